/* Validity across a machine suspend.
 *
 * CLOCK_MONOTONIC (uv_hrtime) stops while the machine is suspended, but
 * the masters' ttls keep running: after a suspend longer than the
 * remaining validity the keys are gone, so a lock whose validity is
 * measured on CLOCK_MONOTONIC is still reported held although it is not.
 * Validity must be measured on CLOCK_BOOTTIME (which counts the suspend).
 *
 * The test machine cannot be suspended, so a suspend is simulated: this
 * executable defines clock_gettime() itself. A definition in the
 * executable interposes the libc one for the whole process (libuv.so's
 * calls included); it reads the real clock with the raw syscall and adds
 * a test-controlled offset to CLOCK_BOOTTIME and CLOCK_BOOTTIME_ALARM
 * only. A "suspend" of X ms makes BOOTTIME jump by X while MONOTONIC
 * does not move. The keys on the masters are left alone (the servers do
 * not see the simulated suspend), so only the client's clock tells.
 *
 * Checks (N = 1):
 *  0. the interposition works: BOOTTIME jumps, MONOTONIC does not, and
 *     uv_hrtime() goes through our clock_gettime (both printed);
 *  1. acquired with ttl 5000, then a 10 s suspend: is_held 0 and
 *     validity_ms 0 at once, and extend is refused (ENOTHELD);
 *  2. an auto-extended lock (ttl 3000), then a 10 s suspend: is_held 0 at
 *     once, and on_lost(EEXPIRED) fires promptly (within 2 s: the
 *     watchdog wakes every ttl/3), exactly once, with the lock's handle;
 *  3. a 10 s suspend while an acquisition round is in flight: the
 *     acquisition fails with EEXPIRED (its validity ran out);
 *  4. after all this, a new acquisition has a normal validity (no mix of
 *     clocks: 0 < validity <= ttl, and it decreases).
 * Failed checks are counted and reported together, then the test fails.
 */
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tutil.h"

#if !defined(__linux__) || !defined(CLOCK_BOOTTIME) || \
    !defined(SYS_clock_gettime)
int main(void) {
  fprintf(stderr, "no CLOCK_BOOTTIME here: skipping\n");
  return TEST_SKIP;
}
#else

/* ---- the simulated suspend ------------------------------------------- */

static volatile int64_t boot_offset_ns;   /* only grows */
static volatile unsigned long clock_calls;

int clock_gettime(clockid_t id, struct timespec *ts) {
  long rc = syscall(SYS_clock_gettime, (long)id, ts);
  __atomic_add_fetch(&clock_calls, 1, __ATOMIC_RELAXED);
  if (rc == 0 && (id == CLOCK_BOOTTIME
#ifdef CLOCK_BOOTTIME_ALARM
                  || id == CLOCK_BOOTTIME_ALARM
#endif
                  )) {
    int64_t off = __atomic_load_n(&boot_offset_ns, __ATOMIC_SEQ_CST);
    int64_t ns = (int64_t)ts->tv_nsec + off % 1000000000;
    ts->tv_sec += (time_t)(off / 1000000000 + ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
  }
  return (int)rc;
}

static void suspend_ms(int64_t ms) {
  __atomic_add_fetch(&boot_offset_ns, ms * 1000000, __ATOMIC_SEQ_CST);
}

static int64_t clock_ms(clockid_t id) {
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0)
    TEST_FAIL("clock_gettime(%d): %s", (int)id, strerror(errno));
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- checks ------------------------------------------------------------ */

static int failures;

#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      failures++;                                                           \
    }                                                                       \
  } while (0)

typedef struct {
  int calls;
  int reason;
  redlock_lock_t *lock;
  volatile int fired;
} lost_rec;

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  r->calls++;
  r->reason = reason;
  r->lock = l;
  r->fired = 1;
}

static void check_interposition(void) {
  int64_t m0, b0, m1, b1;
  unsigned long before;
  m0 = clock_ms(CLOCK_MONOTONIC);
  b0 = clock_ms(CLOCK_BOOTTIME);
  suspend_ms(60000);
  m1 = clock_ms(CLOCK_MONOTONIC);
  b1 = clock_ms(CLOCK_BOOTTIME);
  fprintf(stderr, "simulated 60 s suspend: MONOTONIC %lld -> %lld ms, "
          "BOOTTIME %lld -> %lld ms\n", (long long)m0, (long long)m1,
          (long long)b0, (long long)b1);
  ASSERT_LT(m1 - m0, 1000);
  ASSERT_GE(b1 - b0, 60000);
  ASSERT_LT(b1 - b0, 61000);
  before = __atomic_load_n(&clock_calls, __ATOMIC_RELAXED);
  (void)uv_hrtime();
  fprintf(stderr, "uv_hrtime() called our clock_gettime %lu time(s)\n",
          __atomic_load_n(&clock_calls, __ATOMIC_RELAXED) - before);
  /* libuv reads its clock through clock_gettime: so will the library. */
  ASSERT_GE(__atomic_load_n(&clock_calls, __ATOMIC_RELAXED) - before, 1);
}

static int64_t lost_wait_ms(void) {
  /* The watchdog of a 3000 ms lock wakes within 1000 ms. */
  return getenv("REDLOCK_TEST_SLOW") != NULL ? 8000 : 2000;
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l, *ae_lock;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config nocheck = {.clock_tolerance_ms = -1};
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_lost};
  lost_rec lr;
  tu_op op;
  int64_t v;
  int rc;

  check_interposition();

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* The simulated suspend moves only this process's validity clock, not
   * the master's wall clock (as a real one would): the clock check would
   * see the master's clock step back. Off here. */
  c = tu_client(&loop, srv, 1, &nocheck, 1);

  /* 1. A held lock across a 10 s suspend (ttl 5 s). */
  ASSERT_EQ(redlock_lock_new(c, "susp", 4, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 5000, &once, &op), 0);
  ASSERT(redlock_lock_is_held(l));
  ASSERT_GT(redlock_lock_validity_ms(l), 0);
  suspend_ms(10000);
  EXPECT(redlock_lock_is_held(l) == 0,
         "still held after a 10 s suspend with ttl 5000 ms");
  v = redlock_lock_validity_ms(l);
  EXPECT(v == 0, "validity %lld ms after a 10 s suspend with ttl 5000 ms",
         (long long)v);
  memset(&op, 0, sizeof(op));
  rc = redlock_lock_extend(l, 5000, tu_cb, &op);
  EXPECT(rc == REDLOCK_ENOTHELD, "extend after the suspend: %s, wanted "
         "ENOTHELD (the lock had expired)", redlock_err_name(rc));
  if (rc == 0)
    ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  /* The key is still on the server (it did not see the suspend): a
   * release finds it or not, both are fine here. */
  rc = tu_release(&loop, l, &op);
  ASSERT(rc == 0 || rc == REDLOCK_ENOTHELD);

  /* 2. An auto-extended lock across a 10 s suspend (ttl 3 s). */
  memset(&lr, 0, sizeof(lr));
  ae.lost_arg = &lr;
  ASSERT_EQ(redlock_lock_new(c, "susp-ae", 7, &ae_lock), 0);
  ASSERT_EQ(tu_acquire(&loop, ae_lock, 3000, &ae, &op), 0);
  suspend_ms(10000);
  EXPECT(redlock_lock_is_held(ae_lock) == 0,
         "auto-extended lock still held after a 10 s suspend, ttl 3000 ms");
  if (harness_run_until(&loop, &lr.fired, (uint64_t)lost_wait_ms()) != 0) {
    EXPECT(lr.fired, "on_lost did not fire within %lld ms of a 10 s "
           "suspend (ttl 3000 ms); held=%d validity=%lld ms",
           (long long)lost_wait_ms(), redlock_lock_is_held(ae_lock),
           (long long)redlock_lock_validity_ms(ae_lock));
  } else {
    EXPECT(lr.reason == REDLOCK_EEXPIRED, "on_lost reason %s",
           redlock_err_name(lr.reason));
    EXPECT(lr.lock == ae_lock, "on_lost got another handle");
    EXPECT(redlock_lock_is_lost(ae_lock) == 1, "is_lost is 0");
    EXPECT(redlock_lock_is_held(ae_lock) == 0, "held after on_lost");
    tu_run_for(&loop, 100);   /* never a second time */
    EXPECT(lr.calls == 1, "on_lost ran %d times", lr.calls);
  }
  rc = tu_release(&loop, ae_lock, &op);
  ASSERT(rc == 0 || rc == REDLOCK_ENOTHELD);

  /* 3. A suspend while the acquisition round is in flight: the replies
   * come back 10 s later on BOOTTIME, after the ttl (5 s) ran out. */
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_acquire(l, 5000, &once, tu_cb, &op), 0);
  suspend_ms(10000);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  EXPECT(op.status == REDLOCK_EEXPIRED, "acquisition across a 10 s "
         "suspend (ttl 5000 ms): %s, validity %lld ms; wanted EEXPIRED",
         redlock_err_name(op.status), (long long)op.validity_ms);
  if (op.status == 0)
    ASSERT_EQ(tu_release(&loop, l, &op), 0);

  /* 4. No suspend: a normal validity. */
  tu_run_for(&loop, 20);   /* the failed attempt's cleanup lands */
  ASSERT_EQ(tu_acquire(&loop, l, 5000, &once, &op), 0);
  v = redlock_lock_validity_ms(l);
  EXPECT(v > 4000 && v <= 5000, "validity %lld ms just after acquiring "
         "with ttl 5000 ms", (long long)v);
  EXPECT(op.validity_ms > 4000 && op.validity_ms <= 5000,
         "result validity %lld ms", (long long)op.validity_ms);
  tu_run_for(&loop, 50);
  EXPECT(redlock_lock_validity_ms(l) < v, "validity did not decrease");
  EXPECT(redlock_lock_is_held(l) == 1, "not held");
  ASSERT_EQ(tu_release(&loop, l, &op), 0);

  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(ae_lock), 0);
  tu_close(&loop, c);
  if (failures > 0)
    TEST_FAIL("%d check(s) failed (see above)", failures);
  harness_stop_all();
  return 0;
}
#endif
