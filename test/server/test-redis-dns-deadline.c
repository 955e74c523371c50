/* Name resolution counts inside the connect deadline.
 *
 * A master given by name ("localhost:PORT") is resolved on libuv's
 * threadpool. When the resolver hangs, or the pool is busy, requests
 * queued for that master must still end within the connect deadline
 * (connect_timeout_ms), as when the TCP connect or the handshake hangs.
 * Here the pool has a single thread (UV_THREADPOOL_SIZE=1), held by a work
 * item until the test lets it go, so the resolution cannot even start.
 *
 *  1. An acquisition (one attempt) started while the name is being
 *     resolved must complete, with a failure, within the connect deadline
 *     (250 ms) plus a margin: well under 2 s (today it waits for the
 *     resolution, for as long as the pool is held).
 *  2. Closing the client while a resolution is still pending completes
 *     without waiting for it.
 * Then the pool is released and everything is closed and freed. */
#include "tutil.h"

static uv_sem_t hold;
static volatile int work_done;

static void block_pool(uv_work_t *w) {
  (void)w;
  uv_sem_wait(&hold);   /* until the test posts */
}

static void after_block(uv_work_t *w, int status) {
  (void)w;
  (void)status;
  work_done = 1;
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  uv_work_t work;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_client_config cfg;
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *servers[1];
  char addr[64];
  int slow = tu_slow();
  uint64_t bound = slow ? 4000 : 2000;
  uint64_t t0, took;
  volatile int closed = 0;
  tu_op op;

  /* Before anything uses the threadpool. */
  ASSERT_EQ(setenv("UV_THREADPOOL_SIZE", "1", 1), 0);
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(uv_sem_init(&hold, 0), 0);
  ASSERT_EQ(uv_queue_work(&loop, &work, block_pool, after_block), 0);

  snprintf(addr, sizeof(addr), "localhost:%d", srv[0].port);
  servers[0] = addr;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 1;
  cfg.connect_timeout_ms = 250;
  cfg.command_timeout_ms = 50;
  cfg.reconnect_min_ms = 10;
  cfg.reconnect_max_ms = 100;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);

  /* 1. An acquisition while the name cannot be resolved. */
  ASSERT_EQ(redlock_lock_new(c, "k", 1, &l), 0);
  memset(&op, 0, sizeof(op));
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &once, tu_cb, &op), 0);
  harness_run_until(&loop, &op.done, bound);
  took = harness_now_ms() - t0;
  fprintf(stderr, "1. acquire while resolving: %s after %llu ms "
          "(connect timeout %d ms)\n",
          op.done ? redlock_err_name(op.status) : "still pending",
          (unsigned long long)took, cfg.connect_timeout_ms);
  if (!op.done)
    TEST_FAIL("the acquisition was still pending %llu ms after it started "
              "(connect timeout %d ms): name resolution is not bounded by "
              "the connect deadline", (unsigned long long)took,
              cfg.connect_timeout_ms);
  ASSERT_EQ(op.calls, 1);
  ASSERT_NE(op.status, 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  ASSERT_EQ(redlock_client_n_up(c), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);

  /* 2. Close while a resolution is still pending (the pool is held). */
  ASSERT_EQ(work_done, 0);
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_client_close(c, on_closed, (void *)&closed), 0);
  harness_run_until(&loop, &closed, bound);
  took = harness_now_ms() - t0;
  fprintf(stderr, "2. close while resolving: %s after %llu ms\n",
          closed ? "closed" : "still closing", (unsigned long long)took);
  if (!closed)
    TEST_FAIL("the client close waited for the name resolution (%llu ms)",
              (unsigned long long)took);
  ASSERT_EQ(work_done, 0);

  /* Let the pool go; the loop must then end cleanly. */
  uv_sem_post(&hold);
  ASSERT_EQ(harness_run_until(&loop, &work_done, 10000), 0);
  harness_loop_close(&loop, 5000);
  uv_sem_destroy(&hold);
  harness_stop_all();
  return 0;
}
