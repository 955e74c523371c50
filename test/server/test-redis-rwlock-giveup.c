/* Read-write locks: a writer that GIVES UP must not keep readers out.
 *
 * A writer refused because readers hold the lock leaves an intent on the
 * masters so that a stream of new readers cannot starve it while it keeps
 * trying. Once it stops trying (its acquire call completed with a failure:
 * one attempt only, retries exhausted, or its wait deadline passed) nobody
 * is waiting any more, so the intent must go with it: a new reader must be
 * admitted right away, not after the writer's whole ttl (today it is
 * refused for up to ttl ms by a writer that no longer exists).
 *
 * Each case uses its own resource; reader R1 holds it (ttl 10 s):
 *  1. W (same client) tries once (wait_ms = -1): ETAKEN. A new reader on
 *     the same client (its request queues behind whatever W's give-up sent
 *     on each connection) must get the lock with a single attempt.
 *  2. W on another client retries every 20 ms and gives up at its wait
 *     deadline (400 ms), or after 3 retries: a reader on the first client
 *     must be admitted within 1 s (single attempts; W's ttl is 10 s).
 *  3. Writer preference still holds WHILE the writer is trying: a reader
 *     arriving then is refused, and the writer gets the lock when R1
 *     leaves (passes today; it keeps a fix from just dropping the intent).
 *  4. ... also BETWEEN its attempts: a writer that retries every second
 *     keeps its intent after a failed attempt (it has not given up), so
 *     readers arriving while it waits for its next attempt are refused
 *     too; otherwise a steady stream of readers starves it.
 * Cases 1, 2 and 4 are reported together, then the test fails. */
#include "tutil.h"

#define N 3
#define TTL 10000

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

/* The smallest HLEN of `key` over the masters (-1 if one is unreachable). */
static int64_t hash_len_min(const harness_server *srv, const char *key) {
  int64_t min = INT64_MAX;
  char buf[64];
  int i;
  for (i = 0; i < N; i++) {
    int64_t v;
    if (harness_cmdf(&srv[i], buf, sizeof(buf), "HLEN %s", key) != 0)
      return -1;
    v = strtoll(buf, NULL, 10);
    if (v < min)
      min = v;
  }
  return min;
}

/* Single reader attempts on `r` until one succeeds or `ms` pass. Returns
 * the last status. The lock stays held on success. */
static int reader_poll(uv_loop_t *loop, redlock_lock_t *r, uint64_t ms) {
  redlock_acquire_opts once = {.wait_ms = -1};
  uint64_t end = harness_now_ms() + ms;
  tu_op op;
  int rc;
  for (;;) {
    rc = tu_acquire(loop, r, TTL, &once, &op);
    if (rc == 0 || harness_now_ms() >= end)
      return rc;
    tu_run_for(loop, 10);
  }
}

static int failures;

/* One case on its own resource: reader R1 holds; writer W (on client wc)
 * tries with `wopts` and gives up; then a new reader R2 on client c must
 * be admitted: with one attempt when within_ms is 0, else within
 * within_ms (single attempts). A refusal is counted, not fatal, so that
 * every case is reported. */
static void giveup_case(uv_loop_t *loop, redlock_client_t *c,
                        redlock_client_t *wc, const char *res,
                        const redlock_acquire_opts *wopts,
                        unsigned min_attempts, uint64_t within_ms,
                        const char *what) {
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_lock_t *r1, *r2, *w;
  tu_op op, wop;
  int rc;
  ASSERT_EQ(redlock_rwlock_new(c, res, strlen(res), REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, res, strlen(res), REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(wc, res, strlen(res), REDLOCK_WRITE, &w), 0);
  ASSERT_EQ(tu_acquire(loop, r1, TTL, &once, &op), 0);
  rc = tu_acquire(loop, w, TTL, wopts, &wop);
  if (rc != REDLOCK_ETAKEN && rc != REDLOCK_ETIMEDOUT)
    TEST_FAIL("%s: the writer got %s, wanted ETAKEN or ETIMEDOUT", what,
              redlock_err_name(rc));
  ASSERT_GE(wop.attempts, min_attempts);
  /* W gave up: nobody waits for the lock, readers must share it. */
  if (within_ms == 0)
    rc = tu_acquire(loop, r2, TTL, &once, &op);
  else
    rc = reader_poll(loop, r2, within_ms);
  if (rc != 0) {
    fprintf(stderr, "%s:%d: FAIL: %s: a new reader was refused (%s) %s "
            "after the only writer gave up (writer ttl %d ms): its intent "
            "outlived it\n", __FILE__, __LINE__, what, redlock_err_name(rc),
            within_ms == 0 ? "at once" : "for 1 s", TTL);
    failures++;
  } else {
    ASSERT(redlock_lock_is_held(r2));
    ASSERT_EQ(tu_release(loop, r2, &op), 0);
  }
  ASSERT_EQ(tu_release(loop, r1, &op), 0);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
}

/* Scripts master i has run so far (EVALSHA and EVAL; INFO commandstats),
 * or -1 if it cannot be reached. */
static int64_t script_calls(const harness_server *s) {
  static const char *const names[] = {"cmdstat_evalsha:calls=",
                                      "cmdstat_eval:calls="};
  char buf[8192];
  int64_t sum = 0;
  size_t i;
  if (harness_cmdf(s, buf, sizeof(buf), "INFO commandstats") != 0)
    return -1;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const char *p = strstr(buf, names[i]);
    if (p != NULL)
      sum += strtoll(p + strlen(names[i]), NULL, 10);
  }
  return sum;
}

/* Case 4 on its own resource: R1 (client c) holds; writer W (client wc)
 * retries every second (no jitter). Once its first attempt ran on every
 * master (a script ran there since W started; nothing else runs), single
 * reader attempts for the next ~400 ms (before its next attempt) must
 * all be refused; then R1 leaves and W gets the lock. A reader let in is
 * counted, not fatal. */
static void between_attempts(uv_loop_t *loop, redlock_client_t *c,
                             redlock_client_t *wc,
                             const harness_server *srv) {
  int slow = tu_slow();
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts wopts = {.wait_ms = 30000, .retry_count = 100000,
                                .retry_delay_ms = slow ? 2000 : 1000,
                                .retry_jitter_ms = -1};
  uint64_t window = slow ? 800 : 400;
  redlock_lock_t *r1, *r2, *w;
  tu_op op, wop;
  uint64_t end;
  int64_t base[N];
  unsigned refused = 0;
  int admitted = 0;
  int rc;
  int i;
  ASSERT_EQ(redlock_rwlock_new(c, "g-between", 9, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "g-between", 9, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(wc, "g-between", 9, REDLOCK_WRITE, &w), 0);
  ASSERT_EQ(tu_acquire(loop, r1, TTL, &once, &op), 0);
  for (i = 0; i < N; i++) {
    base[i] = script_calls(&srv[i]);
    ASSERT_GE(base[i], 0);
  }
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(w, TTL, &wopts, tu_cb, &wop), 0);
  /* Wait until the attempt ran on every master (an intent that is
   * withdrawn at once may never be seen in the hash). */
  end = harness_now_ms() + 10000;
  for (i = 0; i < N; i++) {
    while (script_calls(&srv[i]) <= base[i]) {
      if (harness_now_ms() > end)
        TEST_FAIL("4: the writer's attempt never reached master %d", i);
      tu_run_for(loop, 2);
    }
  }
  /* Let its replies come back: the attempt has failed (R1 holds) and the
   * next one is a second away. Readers arriving meanwhile must stay
   * out. */
  tu_run_for(loop, slow ? 100 : 20);
  end = harness_now_ms() + window;
  while (harness_now_ms() < end) {
    rc = tu_acquire(loop, r2, TTL, &once, &op);
    if (rc == 0) {
      admitted = 1;
      ASSERT_EQ(tu_release(loop, r2, &op), 0);
      break;
    }
    ASSERT_EQ(rc, REDLOCK_ETAKEN);
    refused++;
    tu_run_for(loop, 10);
  }
  ASSERT_EQ(wop.done, 0);
  if (admitted) {
    fprintf(stderr, "%s:%d: FAIL: 4: a new reader was admitted while a "
            "writer was waiting for its next attempt (%u reader attempt(s) "
            "refused before): the writer withdrew its intent between "
            "attempts\n", __FILE__, __LINE__, refused);
    failures++;
  } else {
    fprintf(stderr, "4: %u reader attempt(s) refused between the "
            "writer's attempts\n", refused);
  }
  ASSERT_GE(refused + (unsigned)admitted, 1);
  /* R1 leaves: the writer gets in at its next attempt. */
  ASSERT_EQ(tu_release(loop, r1, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &wop.done, 20000), 0);
  ASSERT_EQ(wop.calls, 1);
  ASSERT_EQ(wop.status, 0);
  ASSERT_EQ(tu_release(loop, w, &op), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c, *c2;
  redlock_lock_t *r1, *r2, *w;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts until = {.wait_ms = 400, .retry_count = 100000,
                                .retry_delay_ms = 20, .retry_jitter_ms = 5};
  redlock_acquire_opts few = {.retry_count = 3, .retry_delay_ms = 20,
                              .retry_jitter_ms = 5};
  redlock_acquire_opts longer = {.wait_ms = 20000, .retry_count = 100000,
                                 .retry_delay_ms = 20, .retry_jitter_ms = 5};
  tu_op op, wop;
  uint64_t end;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  c2 = tu_client(&loop, srv, N, NULL, N);

  /* 1. One attempt, same client. */
  giveup_case(&loop, c, c, "g-once", &once, 1, 0,
              "writer with one attempt");
  /* 2. Another client's writer, at its wait deadline / out of retries. */
  giveup_case(&loop, c, c2, "g-deadline", &until, 2, 1000,
              "writer retrying until its wait deadline");
  giveup_case(&loop, c, c2, "g-retries", &few, 4, 1000,
              "writer out of retries");

  /* 3. While the writer is still trying, new readers stay out. */
  ASSERT_EQ(redlock_rwlock_new(c, "g-pref", 6, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "g-pref", 6, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(c2, "g-pref", 6, REDLOCK_WRITE, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, r1, TTL, &once, &op), 0);
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(w, TTL, &longer, tu_cb, &wop), 0);
  /* Wait until its first attempt reached every master: the hash then
   * holds something besides R1's entry and its "z:" (the hash's clock,
   * scripts.c). */
  end = harness_now_ms() + 10000;
  while (hash_len_min(srv, "g-pref:rw") < 3) {
    if (harness_now_ms() > end)
      TEST_FAIL("the writer's attempt never reached the masters");
    tu_run_for(&loop, 5);
  }
  ASSERT_EQ(wop.done, 0);
  ASSERT_EQ(tu_acquire(&loop, r2, TTL, &once, &op), REDLOCK_ETAKEN);
  /* R1 leaves: the writer gets in. */
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(harness_run_until(&loop, &wop.done, 10000), 0);
  ASSERT_EQ(wop.calls, 1);
  ASSERT_EQ(wop.status, 0);
  ASSERT_EQ(tu_release(&loop, w, &op), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);

  /* 4. Between the writer's attempts, new readers stay out too. */
  between_attempts(&loop, c, c2, srv);

  {
    volatile int closed = 0;
    ASSERT_EQ(redlock_client_close(c2, on_closed, (void *)&closed), 0);
    ASSERT_EQ(harness_run_until(&loop, &closed, 10000), 0);
  }
  tu_close(&loop, c);
  if (failures > 0)
    TEST_FAIL("%d case(s) failed (see above)", failures);
  harness_stop_all();
  return 0;
}
