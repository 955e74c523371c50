/* An extend to a SHORTER ttl that does not succeed must not leave the old,
 * longer validity in place: the masters that ran the extend now expire the
 * key after the new ttl, so a handle that still reports the old validity
 * believes it holds a lock that another client can already acquire (a
 * double grant). After any extend that did not succeed, and while one is
 * in flight, the validity is at most
 *   (extend round start + new ttl - drift)
 * or the lock counts as lost (validity 0, not held). N = 3.
 *  a) held for 10 s, extended to 2 ms: EEXPIRED (the drift exceeds the
 *     ttl). The handle must report not held and validity 0; a second
 *     client then acquires the key (the masters did expire it), and at that
 *     moment the first handle still does not report held.
 *  b) held for 10 s, two masters hung, extended to 400 ms with a 100 ms
 *     command timeout: the shorter ttl reached one master (answered), the
 *     other two time out (their late PEXPIRE runs when they resume):
 *     ENOQUORUM. Both in flight and afterwards the validity is bounded by
 *     the new ttl from the round's start, never the old ~9.9 s. */
#include "tutil.h"

#define N 3

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *ca;
  redlock_client_t *cb;
  redlock_client_t *c;
  redlock_lock_t *a;
  redlock_lock_t *b;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts patient = {.retry_count = 100000,
                                  .retry_delay_ms = 10,
                                  .retry_jitter_ms = 5};
  redlock_client_config fast = {.reconnect_min_ms = 10,
                                .reconnect_max_ms = 50};
  const char *key = "extend-shorter";
  const char *key_b = "extend-shorter-noquorum";
  int slow = tu_slow();
  int64_t new_ttl = slow ? 1000 : 400;
  int64_t slack = slow ? 100 : 20;
  int64_t v_inflight;
  int64_t v_after;
  int64_t bound;
  uint64_t t_ret;
  uint64_t t_inflight;
  uint64_t t_after;
  tu_op op;
  tu_op opb;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* ---- a) extend to 2 ms: EEXPIRED, and the lock is gone --------------- */
  ca = tu_client(&loop, srv, N, NULL, N);
  cb = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(ca, key, strlen(key), &a), 0);
  ASSERT_EQ(redlock_lock_new(cb, key, strlen(key), &b), 0);
  ASSERT_EQ(tu_acquire(&loop, a, 10000, &once, &op), 0);
  ASSERT_GT(redlock_lock_validity_ms(a), 9000);

  /* drift(2 ms) = 2 * 0.01 + 2 ms > 2 ms: no validity at all. A quorum
   * ran PEXPIRE 2 and said yes. */
  ASSERT_EQ(tu_extend(&loop, a, 2, &op), REDLOCK_EEXPIRED);
  ASSERT_GE(op.yes, 2);
  fprintf(stderr, "a) after the failed extend to 2 ms: is_held %d, "
          "validity_ms %" PRId64 "\n", redlock_lock_is_held(a),
          redlock_lock_validity_ms(a));
  ASSERT_EQ(redlock_lock_validity_ms(a), 0);
  ASSERT_EQ(redlock_lock_is_held(a), 0);

  /* The masters expired the key: another client gets it, within a bounded
   * wait, and the first handle does not claim it at the same time. */
  patient.wait_ms = slow ? 20000 : 5000;
  ASSERT_EQ(tu_acquire(&loop, b, 10000, &patient, &opb), 0);
  fprintf(stderr, "a) the second client holds it; the first handle: "
          "is_held %d\n", redlock_lock_is_held(a));
  ASSERT_EQ(redlock_lock_is_held(a), 0);
  ASSERT(redlock_lock_is_held(b));
  ASSERT_EQ(redlock_lock_validity_ms(a), 0);

  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(tu_release(&loop, b, &opb), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  tu_close_client(&loop, cb);
  tu_close_client(&loop, ca);

  /* ---- b) ENOQUORUM: the shorter ttl reached a minority ------------------ */
  fast.command_timeout_ms = slow ? 300 : 100;
  c = tu_client(&loop, srv, N, &fast, N);
  ASSERT_EQ(redlock_lock_new(c, key_b, strlen(key_b), &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  harness_pause(&srv[1]);
  harness_pause(&srv[2]);

  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_extend(l, new_ttl, tu_cb, &op), 0);
  t_ret = harness_now_ms();   /* the round started about now */
  /* In flight already: the masters that run it may expire the key after
   * new_ttl from now. The bounds below allow `slack` ms for ms rounding
   * and a round started a little after the call returned. */
  v_inflight = redlock_lock_validity_ms(l);
  t_inflight = harness_now_ms();
  ASSERT_EQ(op.done, 0);

  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  v_after = redlock_lock_validity_ms(l);
  t_after = harness_now_ms();
  ASSERT_EQ(op.calls, 1);
  ASSERT_EQ(op.status, REDLOCK_ENOQUORUM);
  /* The scenario: master 0 ran the shorter PEXPIRE and said yes, the two
   * hung ones timed out with it queued. */
  ASSERT_EQ(op.yes, 1);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
  for (i = 1; i < N; i++)
    ASSERT_EQ(op.nodes[i].error, REDLOCK_ETIMEDOUT);
  ASSERT_GT(harness_pttl(&srv[0], key_b), -2);
  ASSERT_LE(harness_pttl(&srv[0], key_b), new_ttl);

  bound = (int64_t)t_ret + slack + new_ttl - (int64_t)t_after;
  fprintf(stderr, "b) after ENOQUORUM of an extend to %" PRId64 " ms: "
          "validity_ms %" PRId64 " (bound %" PRId64 "), in flight %" PRId64
          "\n", new_ttl, v_after, bound, v_inflight);
  ASSERT_LE(v_after, bound);
  ASSERT_LE(v_inflight,
            (int64_t)t_ret + slack + new_ttl - (int64_t)t_inflight);

  /* Once the new ttl has passed since the round, it is certainly not held
   * (master 0 has expired the key by now). */
  while (harness_now_ms() <= t_ret + (uint64_t)(new_ttl + slack))
    tu_run_for(&loop, 10);
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  ASSERT_EQ(redlock_lock_validity_ms(l), 0);

  /* Resume: their late PEXPIREs run; the nodes reconnect. */
  harness_resume(&srv[1]);
  harness_resume(&srv[2]);
  tu_wait_up(&loop, c, N, 10000);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
