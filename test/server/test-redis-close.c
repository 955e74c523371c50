/* Closing the client with operations in flight: every pending callback
 * fires exactly once with ECANCELED, then the close callback; a lock that
 * was held is released on every master; the loop ends with no handle left
 * (and ASan/valgrind see no leak). Also: freeing a handle inside its own
 * callback, and calls on a closing client. */
#include "tutil.h"

#define N 3

static redlock_lock_t *freed_in_cb;

static void free_in_cb(redlock_lock_t *lock, int status,
                       const redlock_result *res, void *arg) {
  tu_cb(lock, status, res, arg);
  ASSERT_EQ(redlock_lock_free(lock), 0);
  freed_in_cb = lock;
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *held;
  redlock_lock_t *pending;
  redlock_lock_t *waiting;
  redlock_lock_t *tmp;
  redlock_client_config cfg = {.command_timeout_ms = 5000};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts slow_retry = {.retry_count = 100,
                                     .retry_delay_ms = 5000};
  tu_op op_pending;
  tu_op op_waiting;
  tu_op op;
  volatile int closed = 0;
  char held_token[64];
  uint64_t sent;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);

  /* Free inside the callback. */
  ASSERT_EQ(redlock_lock_new(c, "tmp", 3, &tmp), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_acquire(tmp, 10000, &once, free_in_cb, &op), 0);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  ASSERT(freed_in_cb == tmp);
  tu_drain(&loop, c);   /* its background release has landed */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  ASSERT_EQ(redlock_lock_new(c, "held", 4, &held), 0);
  ASSERT_EQ(tu_acquire(&loop, held, 60000, &once, &op), 0);
  snprintf(held_token, sizeof(held_token), "%s", redlock_lock_token(held));
  tu_drain(&loop, c);
  ASSERT_EQ(tu_count_holding(srv, N, "held", held_token), N);

  sent = tu_commands_sent(c);
  /* An acquire that will be stuck on hung masters. */
  ASSERT_EQ(redlock_lock_new(c, "pending", 7, &pending), 0);
  for (i = 0; i < 2; i++)
    harness_pause(&srv[i]);
  memset(&op_pending, 0, sizeof(op_pending));
  ASSERT_EQ(redlock_lock_acquire(pending, 10000, &once, tu_cb, &op_pending),
            0);
  /* An acquire waiting between retries (the key is taken by `held`). */
  ASSERT_EQ(redlock_lock_new(c, "held", 4, &waiting), 0);
  memset(&op_waiting, 0, sizeof(op_waiting));
  ASSERT_EQ(redlock_lock_acquire(waiting, 1000, &slow_retry, tu_cb,
                                 &op_waiting), 0);
  /* Both have written their first attempt to every master. */
  tu_wait_sent(&loop, c, sent + 2 * N, 10000);
  ASSERT_EQ(op_pending.done, 0);
  ASSERT_EQ(op_waiting.done, 0);
  for (i = 0; i < 2; i++)
    harness_resume(&srv[i]);

  ASSERT_EQ(redlock_client_close(c, on_closed, (void *)&closed), 0);
  ASSERT_EQ(redlock_client_close(c, on_closed, (void *)&closed),
            REDLOCK_EBUSY);
  ASSERT_EQ(redlock_lock_new(c, "x", 1, &tmp), REDLOCK_ECANCELED);
  ASSERT_EQ(closed, 0);
  ASSERT_EQ(harness_run_until(&loop, &closed, 10000), 0);
  ASSERT_EQ(op_pending.calls, 1);
  ASSERT_EQ(op_pending.status, REDLOCK_ECANCELED);
  ASSERT_EQ(op_waiting.calls, 1);
  ASSERT_EQ(op_waiting.status, REDLOCK_ECANCELED);
  harness_loop_close(&loop, 5000);

  /* Nothing left behind: the held lock and the half-acquired one were
   * released before the connections closed. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);
  harness_stop_all();
  return 0;
}
