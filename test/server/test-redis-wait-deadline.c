/* What redlock.h promises about opts.wait_ms ("overall deadline for all
 * attempts, from the call"; the callback gets "ETIMEDOUT (wait
 * deadline)"). N = 3; another client holds the key.
 *  a) A wait deadline that passes while the key is still taken ends the
 *     acquire with REDLOCK_ETIMEDOUT (not ETAKEN), at about the deadline,
 *     never before it (the last attempt starts at the deadline when the
 *     retry delay would pass it), and the result still carries the last
 *     attempt's votes (a majority said no). Many retries are allowed so
 *     that only the deadline ends it.
 *  b) wait_ms means "keep trying until then": with the default retry count
 *     (3) and a 100 ms retry delay, an acquire with wait_ms = 3000 on a key
 *     whose holder's ttl (1500 ms) runs out after ~1.5 s must succeed; the
 *     retry count applies only when no deadline is given (today it gives up
 *     after 4 attempts, ~400 ms, with ETAKEN).
 *  c) The attempt at the deadline is the last one, also when the loop's
 *     clock lags the library's. libuv's timers run on the loop's time,
 *     read once per iteration (a busy iteration leaves it stale by as
 *     long as it ran) and from CLOCK_MONOTONIC_COARSE when the kernel
 *     ticks at 1000 Hz (up to a ms behind); the library's clock is
 *     CLOCK_BOOTTIME, read afresh. So a timer set while the loop's time
 *     lags fires early by that lag, and a ms more by the rounding. This
 *     program makes the lag up to 4 ms: its clock_gettime and
 *     clock_getres below (the executable's definitions come before libc's
 *     for libuv) give a coarse clock that ticks every 4 ms but claims a
 *     1 ms resolution. 20 waits of 300 ms with a 100 ms retry delay on
 *     keys without expiry: at most 4 attempts each (0, 100, 200 and the
 *     deadline). Before the fix, an attempt that started early at the
 *     deadline and ended with a ms left was followed by another: 7 to 11
 *     of 30 such waits had 5 attempts here (CI's ASan pass once saw 6 of
 *     at most 5 in test-redis-takeover, without a shim). Each wait also
 *     ends at or after its deadline: without jitter, a wait that ended
 *     when the next attempt would start after the deadline ends at ~200
 *     ms every time (a) alone caught that only when the jitter's draws
 *     put the last attempt's end before the deadline: CI's mutant run
 *     once saw it pass).
 * All cases run, then they are checked, so one run shows them all. */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tutil.h"

#define N 3

#define COARSE_TICK_NS 4000000   /* the loop's clock ticks every 4 ms */

int clock_gettime(clockid_t id, struct timespec *ts);
int clock_getres(clockid_t id, struct timespec *res);

int clock_gettime(clockid_t id, struct timespec *ts) {
  long rc;
  if (id != CLOCK_MONOTONIC_COARSE)
    return (int)syscall(SYS_clock_gettime, id, ts);
  rc = syscall(SYS_clock_gettime, CLOCK_MONOTONIC, ts);
  if (rc == 0)
    ts->tv_nsec -= ts->tv_nsec % COARSE_TICK_NS;
  return (int)rc;
}

int clock_getres(clockid_t id, struct timespec *res) {
  if (id != CLOCK_MONOTONIC_COARSE)
    return (int)syscall(SYS_clock_getres, id, res);
  if (res != NULL) {
    res->tv_sec = 0;
    res->tv_nsec = 1000000;   /* what a 1000 Hz kernel says */
  }
  return 0;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *ca;
  redlock_client_t *cb;
  redlock_lock_t *a;
  redlock_lock_t *holder;
  int slow = tu_slow();
  int64_t w_a = slow ? 2000 : 1000;
  int64_t w_b = slow ? 6000 : 3000;
  int64_t hold_ttl = 1500;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts until_a = {.wait_ms = (int)w_a,
                                  .retry_count = 100000,
                                  .retry_delay_ms = 100,
                                  .retry_jitter_ms = 20};
  /* retry_count 0: the client's default (3). */
  redlock_acquire_opts until_b = {.wait_ms = (int)w_b,
                                  .retry_delay_ms = 100,
                                  .retry_jitter_ms = 20};
  const char *key_a = "wait-deadline-a";
  const char *key_b = "wait-deadline-b";
  tu_op op_a;
  tu_op op_b;
  tu_op op;
  uint64_t t_a;
  uint64_t t_hold;
  int64_t el_a;
  int64_t el_b;
  char tok[80];
  int holding_b;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* The loop reads the coarse clock below (c) would test nothing else). */
  uv_update_time(&loop);
  ASSERT_EQ(uv_now(&loop) % 4, 0);
  ca = tu_client(&loop, srv, N, NULL, N);
  cb = tu_client(&loop, srv, N, NULL, N);

  /* ---- a) the deadline passes: ETIMEDOUT -------------------------------- */
  ASSERT_EQ(redlock_lock_new(cb, key_a, strlen(key_a), &holder), 0);
  ASSERT_EQ(redlock_lock_new(ca, key_a, strlen(key_a), &a), 0);
  ASSERT_EQ(tu_acquire(&loop, holder, 60000, &once, &op), 0);
  t_a = harness_now_ms();
  (void)tu_acquire(&loop, a, 10000, &until_a, &op_a);
  el_a = (int64_t)(op_a.cb_ms - t_a);
  fprintf(stderr, "a) wait_ms %" PRId64 " on a taken key: %s after %" PRId64
          " ms, %u attempts, last attempt yes %u no %u err %u\n", w_a,
          redlock_err_name(op_a.status), el_a, op_a.attempts, op_a.yes,
          op_a.no, op_a.err);
  ASSERT_EQ(redlock_lock_is_held(a), 0);
  ASSERT_EQ(tu_release(&loop, holder, &op), 0);
  ASSERT_EQ(redlock_lock_free(holder), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);

  /* ---- b) keeps trying until the deadline: succeeds --------------------- */
  ASSERT_EQ(redlock_lock_new(cb, key_b, strlen(key_b), &holder), 0);
  ASSERT_EQ(redlock_lock_new(ca, key_b, strlen(key_b), &a), 0);
  ASSERT_EQ(tu_acquire(&loop, holder, hold_ttl, &once, &op), 0);
  t_hold = harness_now_ms();
  (void)tu_acquire(&loop, a, 10000, &until_b, &op_b);
  el_b = (int64_t)(op_b.cb_ms - t_hold);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(a));
  holding_b = tu_count_holding(srv, N, key_b, tok);
  fprintf(stderr, "b) wait_ms %" PRId64 ", holder's ttl %" PRId64 " ms: %s "
          "after %" PRId64 " ms, %u attempts\n", w_b, hold_ttl,
          redlock_err_name(op_b.status), el_b, op_b.attempts);

  /* ---- c) the deadline's attempt is the last (a lagging loop clock) ---- */
  {
    redlock_acquire_opts o = {.wait_ms = 300, .retry_count = 100000,
                              .retry_delay_ms = 100, .retry_jitter_ms = -1};
    const char *key_c = "wait-deadline-c";
    char buf[64];
    unsigned i, most = 0, fewest = 1000, over = 0, early = 0;
    uint64_t t0;
    int64_t shortest = INT64_MAX;
    for (i = 0; i < N; i++)
      ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf),
                             "SET wait-deadline-c forever"), 0);
    redlock_lock_t *c_lock;
    ASSERT_EQ(redlock_lock_new(ca, key_c, strlen(key_c), &c_lock), 0);
    for (i = 0; i < 20; i++) {
      t0 = harness_now_ms();
      ASSERT_EQ(tu_acquire(&loop, c_lock, 10000, &o, &op),
                REDLOCK_ETIMEDOUT);
      /* Never before the deadline: without jitter the attempts start at
       * 0, 100 and 200 ms, and a wait that ended when the next one would
       * start after the deadline ended at ~200 ms. */
      if ((int64_t)(op.cb_ms - t0) < shortest)
        shortest = (int64_t)(op.cb_ms - t0);
      early += op.cb_ms - t0 < 300;
      most = op.attempts > most ? op.attempts : most;
      fewest = op.attempts < fewest ? op.attempts : fewest;
      over += op.attempts > 4;
    }
    fprintf(stderr, "c) 20 waits of 300 ms, retry delay 100 ms, loop clock "
            "ticking every 4 ms: %u to %u attempts, %u waits over 4, the "
            "shortest %" PRId64 " ms (%u before 300 ms)\n", fewest, most,
            over, shortest, early);
    ASSERT_EQ(redlock_lock_free(c_lock), 0);
    ASSERT_EQ(over, 0);
    ASSERT_EQ(early, 0);
    ASSERT_GE(fewest, 2);
  }

  /* a) */
  ASSERT_EQ(op_a.status, REDLOCK_ETIMEDOUT);
  ASSERT_GT(op_a.attempts, 1);
  /* The last attempt's votes: a blocking majority said no (the round may
   * be decided before the last master answers). */
  ASSERT_GE(op_a.no, N - N / 2);
  ASSERT_EQ(op_a.yes, 0);
  ASSERT_EQ(op_a.n_nodes, N);
  ASSERT_LE(op_a.validity_ms, 0);
  /* It kept trying until then, to the millisecond: an attempt that would
   * start after the deadline starts at it (issue 21, item 2). */
  ASSERT_GE(el_a, w_a);
  ASSERT_LE(el_a, w_a + (slow ? 3000 : 1000));

  /* b) */
  ASSERT_EQ(op_b.status, 0);
  ASSERT_GT(op_b.attempts, 4);    /* beyond the retry count */
  ASSERT_GE(el_b, hold_ttl - 100);   /* only once the holder's key expired */
  ASSERT_LT(el_b, w_b + 1000);
  ASSERT(redlock_lock_is_held(a));
  ASSERT_GE(holding_b, 2);

  ASSERT_EQ(tu_release(&loop, a, &op), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(holder), 0);
  tu_close_client(&loop, cb);
  tu_close(&loop, ca);
  harness_stop_all();
  return 0;
}
