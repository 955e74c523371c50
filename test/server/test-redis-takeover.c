/* Takeover at expiry, not at the next poll (issue 12, item 1).
 *
 * A refused attempt asks the masters when the holder's keys expire (PTTL)
 * and the next attempt comes at the moment a quorum of them can be free,
 * if that is before the retry delay. Here the retry delay is 3 s, so a
 * waiter that is granted within a few ms of the holder's expiry shows the
 * feature (without it: at the next poll, up to 3 s later).
 *
 *  a) a holder that dies (its lock, ttl 1000 ms, is neither extended nor
 *     released): the waiter is granted within the margin after the moment
 *     its keys expired on a quorum (measured from the masters' PTTL);
 *  b) keys of different ttls on the three masters (300, 900, 2000 ms):
 *     the quorum is free when the second one expires (900 ms), not the
 *     first or the last;
 *  c) a multi-resource waiter ({k1, k2}, held by keys expiring at 600 and
 *     1200 ms): it waits for the later one;
 *  d) keys without any expiry: the waiter keeps to its retry delay (no
 *     busy loop): at most a few attempts in a second;
 *  e) a holder that releases early without a message (another
 *     implementation): still noticed at the next poll (the delay stays the
 *     bound), not only at its expiry;
 *  f) one master hung (SIGSTOP) with a 5 s command timeout: the question
 *     "when do the keys expire" does not wait for it (a grace as long as
 *     the quorum took), so the takeover still lands at the expiry. */
#include "tutil.h"

#define N 3

static harness_server srv[N];
static int64_t margin_ms;   /* takeover lands within this after expiry */

/* When `key` expires on a quorum (2 of 3) of masters, in harness ms: the
 * second smallest expiry. */
static uint64_t quorum_expiry(const char *key) {
  uint64_t exp[N];
  int i, j;
  for (i = 0; i < N; i++) {
    uint64_t now = harness_now_ms();
    int64_t p = harness_pttl(&srv[i], key);
    ASSERT_GE(p, 0);
    exp[i] = now + (uint64_t)p;
  }
  for (i = 1; i < N; i++)
    for (j = i; j > 0 && exp[j - 1] > exp[j]; j--) {
      uint64_t t = exp[j];
      exp[j] = exp[j - 1];
      exp[j - 1] = t;
    }
  return exp[1];
}

static void start_waiter(redlock_lock_t *w, int delay_ms, tu_op *op) {
  redlock_acquire_opts o = {.wait_ms = 20000, .retry_delay_ms = delay_ms,
                            .retry_jitter_ms = -1};
  memset(op, 0, sizeof(*op));
  ASSERT_EQ(redlock_lock_acquire(w, 10000, &o, tu_cb, op), 0);
}

static void run_until_done(uv_loop_t *loop, tu_op *op, const char *what) {
  if (harness_run_until(loop, &op->done, 30000) != 0)
    TEST_FAIL("%s: the waiter never finished", what);
  ASSERT_EQ(op->calls, 1);
}

static void check_takeover(const char *what, uint64_t expiry,
                           const tu_op *op) {
  int64_t late = (int64_t)op->cb_ms - (int64_t)expiry;
  fprintf(stderr, "%s: granted %lld ms after the quorum expiry (%u "
          "attempts)\n", what, (long long)late, op->attempts);
  ASSERT_EQ(op->status, 0);
  if (late > margin_ms)
    TEST_FAIL("%s: granted %lld ms after the holder's keys expired on a "
              "quorum (margin %lld ms): it waited for its retry delay",
              what, (long long)late, (long long)margin_ms);
  ASSERT_GE(late, -5);   /* never before (clock reading slack) */
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w, *m;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op, wop;
  uint64_t expiry, t0;
  char buf[64];
  int i;

  margin_ms = harness_bound_ms(50);
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = tu_client(&loop, srv, N, NULL, N);
  cw = tu_client(&loop, srv, N, NULL, N);

  /* a) a dead holder: acquired, then abandoned (neither extended nor
   * released). */
  ASSERT_EQ(redlock_lock_new(ch, "to-a", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cw, "to-a", 4, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 1000, &once, &op), 0);
  ASSERT_EQ(redlock_lock_detach(h), 0);
  expiry = quorum_expiry("to-a");
  start_waiter(w, 3000, &wop);
  run_until_done(&loop, &wop, "a");
  check_takeover("a) dead holder, ttl 1000 ms", expiry, &wop);
  ASSERT_EQ(tu_release(&loop, w, &op), 0);

  /* b) different expiries: the second one frees the quorum. */
  ASSERT_EQ(harness_set(&srv[0], "to-a", "x", 300), 0);
  ASSERT_EQ(harness_set(&srv[1], "to-a", "x", 900), 0);
  ASSERT_EQ(harness_set(&srv[2], "to-a", "x", 2000), 0);
  expiry = quorum_expiry("to-a");
  start_waiter(w, 3000, &wop);
  run_until_done(&loop, &wop, "b");
  check_takeover("b) keys expiring at 300, 900, 2000 ms", expiry, &wop);
  ASSERT_EQ(tu_release(&loop, w, &op), 0);

  /* c) a multi-resource waiter waits for its last key. */
  {
    const void *res[] = {"to-k1", "to-k2"};
    size_t lens[] = {5, 5};
    ASSERT_EQ(redlock_lock_new_multi(cw, res, lens, 2, &m), 0);
    for (i = 0; i < N; i++) {
      ASSERT_EQ(harness_set(&srv[i], "to-k1", "x", 600), 0);
      ASSERT_EQ(harness_set(&srv[i], "to-k2", "x", 1200), 0);
    }
    expiry = quorum_expiry("to-k2");
    start_waiter(m, 3000, &wop);
    run_until_done(&loop, &wop, "c");
    check_takeover("c) multi-resource, keys expiring at 600 and 1200 ms",
                   expiry, &wop);
    ASSERT_EQ(tu_release(&loop, m, &op), 0);
    ASSERT_EQ(redlock_lock_free(m), 0);
  }

  /* d) no expiry at all: the retry delay, no busy loop. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "SET to-a forever"),
              0);
  {
    redlock_acquire_opts o = {.wait_ms = 1000, .retry_delay_ms = 300,
                              .retry_jitter_ms = -1};
    ASSERT_EQ(tu_acquire(&loop, w, 10000, &o, &wop), REDLOCK_ETIMEDOUT);
    fprintf(stderr, "d) keys without expiry: %u attempts in 1 s (retry "
            "delay 300 ms)\n", wop.attempts);
    ASSERT_LE(wop.attempts, 5);
  }

  /* e) an early release without a message: the next poll sees it. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "to-a", "x", 10000), 0);
  start_waiter(w, 300, &wop);
  tu_run_for(&loop, 400);
  ASSERT_EQ(wop.done, 0);
  t0 = harness_now_ms();
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL to-a"), 0);
  run_until_done(&loop, &wop, "e");
  ASSERT_EQ(wop.status, 0);
  fprintf(stderr, "e) released early (keys had 10 s left): granted %llu ms "
          "later (retry delay 300 ms)\n",
          (unsigned long long)(wop.cb_ms - t0));
  ASSERT_LE(wop.cb_ms - t0, (uint64_t)(300 + margin_ms * 4));
  ASSERT_EQ(tu_release(&loop, w, &op), 0);

  /* f) a hung master does not hold the takeover back. */
  {
    redlock_client_config slow_cfg = {.command_timeout_ms = 5000};
    redlock_client_t *cs = tu_client(&loop, srv, N, &slow_cfg, N);
    redlock_lock_t *ws;
    ASSERT_EQ(redlock_lock_new(cs, "to-f", 4, &ws), 0);
    ASSERT_EQ(harness_set(&srv[0], "to-f", "x", 800), 0);
    ASSERT_EQ(harness_set(&srv[1], "to-f", "x", 800), 0);
    {
      uint64_t e0 = harness_now_ms() + (uint64_t)harness_pttl(&srv[0],
                                                              "to-f");
      uint64_t e1 = harness_now_ms() + (uint64_t)harness_pttl(&srv[1],
                                                              "to-f");
      expiry = e0 > e1 ? e0 : e1;
    }
    harness_pause(&srv[2]);
    start_waiter(ws, 3000, &wop);
    run_until_done(&loop, &wop, "f");
    harness_resume(&srv[2]);
    check_takeover("f) master 3 hung, command timeout 5 s", expiry, &wop);
    ASSERT_EQ(tu_release(&loop, ws, &op), 0);
    ASSERT_EQ(redlock_lock_free(ws), 0);
    tu_close_client(&loop, cs);
  }

  ASSERT_EQ(redlock_lock_free(w), 0);
  tu_close_client(&loop, ch);
  tu_close(&loop, cw);
  harness_stop_all();
  return 0;
}
