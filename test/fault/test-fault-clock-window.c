/* A clock step keeps a master out for the deployment's longest ttl as it
 * is when the step is seen, not as this client last read it (found by
 * redlock-sim, seed 102046: a client that had read the ttl record when
 * it held 1.1 s counted a stepped master again after 1.1 s, while another
 * client held a lock of 9.2 s that the step had cut short: two holders).
 *
 * Three masters under the clock shim, durable (appendonly, fsync always,
 * declared: the restart guard has nothing to say, only the clock check).
 *  1. B takes and releases a lock of 1 s: the longest ttl it knows.
 *  2. A takes a lock of 20 s: the ttl record on the masters is 20 s now
 *     (B does not read it: no master restarted).
 *  3. M1's wall clock steps 60 s forward (A's key there expires).
 *  4. B acquires: its reading sees the step; M1 does not count.
 *  5. 1.5 s later (past the 1 s B knew) B acquires a key that M3 holds
 *     for someone else (so M1's vote decides): M1 still does not count,
 *     its window is the record's 20 s, and B does not get the lock. The
 *     old code counted M1's YES and granted it (its window was B's 1 s). */
#include "tutil.h"

#define N 3

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_config cfg;
  redlock_client_t *a, *b;
  redlock_lock_t *la, *lb;
  tu_op op;
  int i;

  if (!harness_clock_available()) {
    fprintf(stderr, "the clock shim is not built: failing\n");
    return 1;
  }
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++) {
    srv[i].appendonly = 1;
    harness_clock_prepare(&srv[i]);
  }
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(&cfg, 0, sizeof(cfg));
  cfg.durable = 1;
  {
    const char *addrs[N];
    harness_addrs(srv, N, addrs);
    b = tu_client_guarded(&loop, addrs, N, &cfg, N);
    a = tu_client_guarded(&loop, addrs, N, &cfg, N);
  }
  /* 1. */
  ASSERT_EQ(redlock_lock_new(b, "kb", 2, &lb), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(tu_acquire(&loop, lb, 1000, NULL, &op), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(tu_release(&loop, lb, &op), 0);
  ASSERT_EQ(redlock_lock_free(lb), 0);
  /* 2. */
  ASSERT_EQ(redlock_lock_new(a, "ka", 2, &la), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(tu_acquire(&loop, la, 20000, NULL, &op), 0);
  /* 3. */
  harness_clock_step(&srv[0], 60000);
  /* 4. */
  ASSERT_EQ(redlock_lock_new(b, "k1", 2, &lb), 0);
  memset(&op, 0, sizeof(op));
  (void)tu_acquire(&loop, lb, 1000, NULL, &op);
  fprintf(stderr, "4. M1: vote %d, cause %d, window %lld ms: %s\n",
          op.nodes[0].vote, op.nodes[0].guard_cause,
          (long long)op.nodes[0].guard_window_ms, op.errstr[0]);
  ASSERT_NE(op.nodes[0].vote, REDLOCK_VOTE_YES);   /* ERR, or not in */
  if (op.status == 0) {
    memset(&op, 0, sizeof(op));
    (void)tu_release(&loop, lb, &op);
  }
  ASSERT_EQ(redlock_lock_free(lb), 0);
  /* 5. Time passes: what B knew of the longest ttl runs out. M3 holds
   * k2 for someone else, so that B's decision needs M1's vote. */
  tu_run_for(&loop, 1500);
  ASSERT_EQ(harness_set(&srv[2], "k2", "someone-else", 60000), 0);
  ASSERT_EQ(redlock_lock_new(b, "k2", 2, &lb), 0);
  memset(&op, 0, sizeof(op));
  (void)tu_acquire(&loop, lb, 1000, NULL, &op);
  fprintf(stderr, "5. M1: vote %d, cause %d, window %lld ms: %s\n",
          op.nodes[0].vote, op.nodes[0].guard_cause,
          (long long)op.nodes[0].guard_window_ms, op.errstr[0]);
  ASSERT_NE(op.status, 0);   /* the old code: granted, M1 and M2 */
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  ASSERT_EQ(op.nodes[0].guard_cause, REDLOCK_GUARD_CLOCK_STEP);
  ASSERT_GE(op.nodes[0].guard_window_ms, 20000);
  if (op.status == 0) {
    memset(&op, 0, sizeof(op));
    (void)tu_release(&loop, lb, &op);
  }
  ASSERT_EQ(redlock_lock_free(lb), 0);
  memset(&op, 0, sizeof(op));
  (void)tu_release(&loop, la, &op);
  ASSERT_EQ(redlock_lock_free(la), 0);
  tu_close_client(&loop, b);
  tu_close(&loop, a);
  harness_stop_all();
  return 0;
}
