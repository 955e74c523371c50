/* N=5 with a minority failing:
 *  - two masters killed: acquisition still succeeds (3 yes, 2 EIO);
 *  - two masters hung (SIGSTOP): it succeeds at once from the live
 *    majority, without waiting for the hung ones (command timeout 3 s),
 *    and the hung connections are torn down by their deadline;
 *  - the SETs stuck in the hung masters land when they resume. The lock
 *    holds that token, so they are NOT released behind its back (the
 *    lock then rests on all five); release deletes every copy. */
#include "tutil.h"

#define N 5

static int key_gone_on(harness_server *s, const char *key) {
  char val[64];
  return harness_get(s, key, val, sizeof(val)) == 0;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_client_config cfg = {.command_timeout_ms = 3000,
                               .reconnect_min_ms = 20,
                               .reconnect_max_ms = 100};
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  const char *key = "minority";
  uint64_t t0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  /* Killed minority. */
  harness_kill(&srv[3]);
  harness_kill(&srv[4]);
  tu_wait_up(&loop, c, 3, 10000);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(op.yes, 3);
  ASSERT_EQ(op.err, 2);
  ASSERT_EQ(op.nodes[3].vote, REDLOCK_VOTE_ERR);
  ASSERT_EQ(op.nodes[3].error, REDLOCK_EIO);
  ASSERT_GT(strlen(op.errstr[3]), 0);
  ASSERT_EQ(tu_count_holding(srv, 3, key, redlock_lock_token(l)), 3);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  harness_restart(&srv[3]);
  harness_restart(&srv[4]);
  tu_wait_up(&loop, c, N, 10000);

  /* Hung minority: decided by the live majority, long before 3 s. */
  harness_pause(&srv[0]);
  harness_pause(&srv[1]);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 30000, &once, &op), 0);
  ASSERT_LT(op.cb_ms - t0, 1500);
  ASSERT_EQ(op.yes, 3);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_NONE);   /* still pending */
  ASSERT_EQ(op.nodes[1].vote, REDLOCK_VOTE_NONE);
  ASSERT(redlock_lock_is_held(l));
  /* Their deadline tears the hung connections down. */
  tu_wait_up(&loop, c, 3, 10000);
  ASSERT(redlock_lock_is_held(l));

  /* Resume: the stuck SETs land and stay (our token: never released
   * while the lock holds it). An inspect waits for every master: it is
   * answered after everything queued on the reconnected nodes. */
  harness_resume(&srv[0]);
  harness_resume(&srv[1]);
  tu_wait_up(&loop, c, N, 10000);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_inspect(l, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  ASSERT_EQ(tu_count_holding(srv, N, key, redlock_lock_token(l)), N);
  ASSERT(redlock_lock_is_held(l));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  tu_run_for(&loop, 20);
  for (i = 0; i < N; i++)
    ASSERT(key_gone_on(&srv[i], key));

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
