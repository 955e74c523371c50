/* The restart guard with a master down (N=3, default guard).
 *
 * A new client (like every `redlock` CLI call) knows no master's history:
 * each one shows it a new instance, so it reads the deployment's ttl
 * record from every master before their votes count. With one master
 * down only two of three can answer that read. Two is a quorum, which is
 * all Redlock's failure model needs (guard.c): once the masters are older
 * than the longest recorded ttl, the new client must be granted the lock
 * by the two live masters. A read that demanded every master would leave
 * it refused (ERESTARTED) for as long as the third stays down.
 *
 * Also: the window is the deployment's record, not the new client's own
 * ttl: a 2000 ms lock recorded earlier keeps the new client's 300 ms
 * acquisition refused until the masters are 2000 ms old. */
#include "tutil.h"

#define N 3

static redlock_client_t *guarded_client(uv_loop_t *loop,
                                        const harness_server *srv) {
  const char *addrs[N];
  redlock_client_config cfg = {.command_timeout_ms = 1000,
                               .connect_timeout_ms = 2000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};   /* guard: default */
  redlock_client_t *c = NULL;
  harness_addrs(srv, N, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(loop, &cfg, &c), 0);
  return c;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *rec;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  uint64_t started;
  uint64_t t;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  started = harness_now_ms();
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* Some client recorded a 2000 ms ttl (guard off: the masters are new). */
  rec = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(rec, "other", 5, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 2000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(&loop, rec);

  /* One master goes down for good; a new client comes. */
  harness_kill(&srv[2]);
  c = guarded_client(&loop, srv);
  tu_wait_up(&loop, c, 2, 10000);
  ASSERT_EQ(redlock_lock_new(c, "degraded", 8, &l), 0);

  /* While the masters are younger than the recorded 2000 ms (counted as
   * uptime - 1 s, so younger than ~3 s by INFO): refused by the guard. */
  ASSERT_LT(harness_now_ms() - started, 1500);
  ASSERT_EQ(tu_acquire(&loop, l, 300, &once, &op), REDLOCK_ENOQUORUM);
  /* (decided as soon as a quorum became impossible: at least one of the
   * live masters answered, and none counted as YES) */
  ASSERT_EQ(op.yes, 0);
  ASSERT_GE((op.nodes[0].error == REDLOCK_ERESTARTED) +
                (op.nodes[1].error == REDLOCK_ERESTARTED), 1);
  for (i = 0; i < 2; i++)
    if (op.nodes[i].error == REDLOCK_ERESTARTED)
      fprintf(stderr, "young masters: refused: \"%s\"\n", op.errstr[i]);

  /* Once they are old enough, the two live masters grant it (bounded
   * polling: one attempt every 100 ms, 10 s at most). */
  t = harness_now_ms();
  for (;;) {
    tu_acquire(&loop, l, 300, &once, &op);
    if (op.status == 0)
      break;
    ASSERT_EQ(op.status, REDLOCK_ENOQUORUM);
    if (harness_now_ms() - t > 10000)
      TEST_FAIL("never granted with one master down: \"%s\"",
                op.errstr[0]);
    tu_run_for(&loop, 100);
  }
  fprintf(stderr, "granted %llu ms after the masters started, 2 of 3 up\n",
          (unsigned long long)(harness_now_ms() - started));
  ASSERT_GE(harness_now_ms() - started, 2000);
  ASSERT_EQ(op.yes, 2);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
