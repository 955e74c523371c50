/* on_lost fires exactly once per acquisition, and a lost lock stays lost.
 *
 * a) A late extend success. An auto-extended lock (one master, ttl T,
 *    drift factor 0.45: validity V = 0.55 T) is extended by the user while
 *    the master is blocked (DEBUG SLEEP). The lock's validity runs out
 *    during the sleep: on_lost(EEXPIRED) fires. The master wakes up before
 *    the extend's own validity (counted from its later start) runs out,
 *    and the extend succeeds there. The lock was declared lost, and
 *    someone else may have taken it in between: the late success must not
 *    bring it back. The extend must report a failure (EEXPIRED: the
 *    validity ran out), the lock must stay lost (not held), and when the
 *    key then becomes someone else's, on_lost must not fire a second time
 *    (today the lock is held again, auto-extension resumes, and on_lost
 *    fires a second time).
 * b) The user's extend finds the lock lost. An auto-extended lock whose
 *    key became someone else's is extended by the user: ENOTHELD, and
 *    on_lost(ENOTHELD) must fire (once), as it would have had the
 *    watchdog found it (today it never fires).
 * Both cases are reported, then the test fails if either did. */
#include "tutil.h"

typedef struct {
  int calls;
  int reasons[4];
} lost_rec;

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  (void)l;
  if (r->calls < 4)
    r->reasons[r->calls] = reason;
  r->calls++;
}

static int failures;

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                 \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      failures++;                                                           \
    }                                                                       \
  } while (0)

/* A new extend call on a lock that was lost must be refused (ELOST); if
 * it is accepted anyway its callback is run to completion. */
static void extend_after_lost(uv_loop_t *loop, redlock_lock_t *l,
                              int64_t ttl, const char *what) {
  tu_op op;
  int rc;
  memset(&op, 0, sizeof(op));
  rc = redlock_lock_extend(l, ttl, tu_cb, &op);
  CHECK(rc == REDLOCK_ELOST, "%s: extend on the lost lock returned %s, "
        "wanted ELOST", what, redlock_err_name(rc));
  if (rc == 0)
    ASSERT_EQ(harness_run_until(loop, &op.done, 30000), 0);
}

static void case_late_success(uv_loop_t *loop, harness_server *srv,
                              redlock_client_t *c) {
  int slow = tu_slow();
  int64_t ttl = slow ? 6000 : 4000;
  int64_t v = ttl * 55 / 100 - 2;   /* validity of a round of ttl */
  lost_rec lr;
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_lost, .lost_arg = &lr};
  const char *argv[3] = {"DEBUG", "SLEEP", NULL};
  char secs[32];
  redlock_lock_t *l;
  tu_op op, eop;
  uint64_t now, d1, d2, mid;
  int fd;
  int i;

  memset(&lr, 0, sizeof(lr));
  ASSERT_EQ(redlock_lock_new(c, "lost-a", 6, &l), 0);
  ASSERT_EQ(tu_acquire(loop, l, ttl, &ae, &op), 0);
  /* The first renewal is due at ttl/3 - ttl/10 at the earliest; the
   * user's extend goes out well before (ttl/7 after the acquisition). */
  tu_run_for(loop, (uint64_t)(ttl / 7));
  ASSERT_EQ(redlock_lock_is_held(l), 1);
  /* The lock's validity ends at d1; an extend sent in ~30 ms is valid
   * until d2. The master sleeps until the middle of the two. */
  now = harness_now_ms();
  d1 = now + (uint64_t)redlock_lock_validity_ms(l);
  d2 = now + 30 + (uint64_t)v;
  mid = (d1 + d2) / 2;
  if (d2 < d1 + 400)
    TEST_FAIL("a) setup: the lock was renewed already (validity ends "
              "%llu ms before the extend's would)",
              (unsigned long long)(d2 - d1));
  snprintf(secs, sizeof(secs), "%.3f", (double)(mid - now) / 1000.0);
  argv[2] = secs;
  fd = harness_send_nowait(&srv[0], 3, argv);
  harness_wait_asleep(&srv[0], 5000);
  memset(&eop, 0, sizeof(eop));
  ASSERT_EQ(redlock_lock_extend(l, ttl, tu_cb, &eop), 0);
  ASSERT_EQ(harness_run_until(loop, &eop.done, (uint64_t)ttl + 30000), 0);
  harness_close_fd(fd);
  fprintf(stderr, "a) extend answered %lld ms after the lock's validity "
          "ended: %s; held %d, lost %d, on_lost calls %d\n",
          (long long)(eop.cb_ms - d1), redlock_err_name(eop.status),
          redlock_lock_is_held(l), redlock_lock_is_lost(l), lr.calls);
  /* Setup: the validity did run out while the extend was out. */
  ASSERT_GT(eop.cb_ms, d1);
  ASSERT_EQ(lr.calls, 1);
  ASSERT_EQ(lr.reasons[0], REDLOCK_EEXPIRED);
  CHECK(eop.status == REDLOCK_EEXPIRED, "a) the extend returned %s after "
        "the lock had been declared lost (on_lost EEXPIRED), wanted "
        "EEXPIRED: a late success must not bring a lost lock back",
        redlock_err_name(eop.status));
  CHECK(redlock_lock_is_held(l) == 0 && redlock_lock_is_lost(l) == 1,
        "a) after the late extend: held %d, lost %d (wanted 0, 1)",
        redlock_lock_is_held(l), redlock_lock_is_lost(l));

  /* The key becomes someone else's; past a renewal period nothing more
   * may be reported. */
  ASSERT_EQ(harness_set(&srv[0], "lost-a", "someone-else", 60000), 0);
  tu_run_for(loop, (uint64_t)(ttl / 3 + (slow ? 1000 : 500)));
  for (i = 0; i < lr.calls && i < 4; i++)
    fprintf(stderr, "a) on_lost #%d: %s\n", i + 1,
            redlock_err_name(lr.reasons[i]));
  CHECK(lr.calls == 1, "a) on_lost fired %d times for one acquisition",
        lr.calls);
  extend_after_lost(loop, l, ttl, "a)");
  ASSERT_EQ(redlock_lock_free(l), 0);
}

static void case_user_extend_finds_lost(uv_loop_t *loop,
                                        harness_server *srv,
                                        redlock_client_t *c) {
  int slow = tu_slow();
  int64_t ttl = slow ? 3000 : 1500;
  lost_rec lr;
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_lost, .lost_arg = &lr};
  redlock_lock_t *l;
  tu_op op;
  int rc;

  memset(&lr, 0, sizeof(lr));
  ASSERT_EQ(redlock_lock_new(c, "lost-b", 6, &l), 0);
  ASSERT_EQ(tu_acquire(loop, l, ttl, &ae, &op), 0);
  ASSERT_EQ(harness_set(&srv[0], "lost-b", "someone-else", 60000), 0);
  memset(&op, 0, sizeof(op));
  rc = redlock_lock_extend(l, ttl, tu_cb, &op);
  if (rc == 0) {
    ASSERT_EQ(harness_run_until(loop, &op.done, 30000), 0);
    ASSERT_EQ(op.status, REDLOCK_ENOTHELD);
  } else {
    /* The watchdog found it first (a slow run): then it reported it. */
    ASSERT_EQ(rc, REDLOCK_ELOST);
  }
  /* Past a renewal period: exactly one report. */
  tu_run_for(loop, (uint64_t)(ttl / 3 + (slow ? 1000 : 500)));
  fprintf(stderr, "b) user extend: %s; on_lost calls %d%s%s\n",
          rc == 0 ? redlock_err_name(op.status) : "ELOST (call)",
          lr.calls, lr.calls > 0 ? ", reason " : "",
          lr.calls > 0 ? redlock_err_name(lr.reasons[0]) : "");
  CHECK(lr.calls == 1 && lr.reasons[0] == REDLOCK_ENOTHELD,
        "b) the lock was found lost (ENOTHELD) but on_lost fired %d "
        "time(s), wanted once with ENOTHELD", lr.calls);
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  ASSERT_EQ(redlock_lock_is_lost(l), 1);
  extend_after_lost(loop, l, ttl, "b)");
  ASSERT_EQ(redlock_lock_free(l), 0);
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg = {.drift_factor = 0.45,
                               .command_timeout_ms = 30000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, 1, &cfg, 1);
  case_late_success(&loop, srv, c);
  case_user_extend_finds_lost(&loop, srv, c);
  tu_close(&loop, c);
  if (failures > 0)
    TEST_FAIL("%d check(s) failed (see above)", failures);
  harness_stop_all();
  return 0;
}
