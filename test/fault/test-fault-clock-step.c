/* A master whose wall clock steps forward expires keys early: its votes
 * must not count until every lock it may have lost has run out.
 *
 * Redis expires keys by its own wall clock. Five masters run under the
 * clock shim (clockshim.c). Holder A takes "k" (ttl T) and the test
 * removes A's key from M4 and M5, so that A rests on the bare quorum
 * M1-M3, as when M4 and M5 were down during its round. Then M1's clock
 * steps 2T forward: A's key is gone there, and a contender that counts
 * M1's YES gets M1, M4, M5: a second grant while A's lock is valid.
 *
 *  a) B has been connected (and has read the masters' clocks) since
 *     before the step: it must see the step (M1's clock moved 2T more
 *     than its own) and refuse M1's vote; once the window (the longest
 *     ttl) has passed since the step, M1 counts again.
 *  b) B is a new client that meets M1 after the step: M1's clock is 2T
 *     ahead of the other four; its vote does not count.
 *  c) The clock steps forward and back again before B first looks (a
 *     round trip: the keys are gone, the clock looks right). C, connected
 *     before the step, saw it with its next acquisition and left a mark
 *     on M1; B (new) must find the mark and refuse M1.
 *  d) The restart guard's age: M1 restarts empty (no persistence) and its
 *     clock then steps 30 s forward, so INFO reports uptime_in_seconds
 *     31 although it is a second old. A new client with the restart
 *     guard (window T) must not count it.
 *  e) The same, the way a bad RTC does it: M1 restarts empty with its
 *     clock 30 s BEHIND, which NTP then corrects (30 s forward) before
 *     any client looks: the clock agrees with the others again, but
 *     uptime is 30 s too large. A new client must not count it either.
 *
 * Each case asserts the refusal by its cause (the vote of M1 is an error
 * ERESTARTED, and the others' votes leave no quorum), and that A's lock
 * was still valid at the decision (else the refusal proves nothing). */
#include "tutil.h"

#define N 5
#define T 4000   /* ms: A's ttl, and the window */

static harness_server srv[N];
static uint64_t seen_ms;   /* when a guarded client first saw them */

static int never(void *arg) {
  (void)arg;
  return 0;
}

static void drop_key(int i, const char *key) {
  char buf[64];
  ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL %s", key), 0);
}

static int has_key(int i, const char *key) {
  char val[256];
  return harness_get(&srv[i], key, val, sizeof(val));
}

typedef struct holding {
  const char *key;
  const char *token;
} holding;

static int on_all(void *arg) {
  holding *w = arg;
  return tu_count_holding(srv, N, w->key, w->token) == N;
}

/* A holds `key` on M1-M3 only (its bare quorum). */
static redlock_lock_t *hold_bare(uv_loop_t *loop, redlock_client_t *a,
                                 const char *key) {
  redlock_lock_t *l = NULL;
  redlock_acquire_opts one = {.wait_ms = -1};
  holding w;
  tu_op op;
  ASSERT_EQ(redlock_lock_new(a, key, strlen(key), &l), 0);
  ASSERT_EQ(tu_acquire(loop, l, T, &one, &op), 0);
  /* Decided at quorum: the last SETs land a moment later. */
  w.key = key;
  w.token = redlock_lock_token(l);
  if (harness_wait_for(on_all, &w, 5000) != 0)
    TEST_FAIL("A's key is not on every master");
  drop_key(3, key);
  drop_key(4, key);
  return l;
}

/* B asks once for `key`: M1's vote must be an ERESTARTED refusal, no
 * quorum, and A still valid when B decided. */
static void expect_refused(uv_loop_t *loop, redlock_client_t *b,
                           redlock_lock_t *held, const char *key,
                           const char *label) {
  redlock_lock_t *l = NULL;
  redlock_acquire_opts one = {.wait_ms = -1};
  tu_op op;
  int st;
  ASSERT_EQ(redlock_lock_new(b, key, strlen(key), &l), 0);
  st = tu_acquire(loop, l, T, &one, &op);
  fprintf(stderr, "%s: status %s, yes %u no %u err %u; M1: vote %d %s "
          "(%s)\n", label, redlock_err_name(st), op.yes, op.no, op.err,
          op.nodes[0].vote, redlock_err_name(op.nodes[0].error),
          op.errstr[0]);
  ASSERT(redlock_lock_is_held(held));
  if (st == 0)
    TEST_FAIL("%s: double grant: B got \"%s\" while A holds it", label,
              key);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_ERESTARTED);
  {
    /* The explanation names the cause, by master number. */
    redlock_result res;
    char why[1024];
    memset(&res, 0, sizeof(res));
    res.status = st;
    res.yes = op.yes;
    res.no = op.no;
    res.err = op.err;
    res.n_nodes = op.n_nodes;
    res.quorum = 3;
    res.nodes = op.nodes;
    redlock_result_explain(&res, why, sizeof(why));
    fprintf(stderr, "%s: %s\n", label, why);
    if (op.nodes[0].guard_cause == REDLOCK_GUARD_RESTART)
      ASSERT(strstr(why, "(restart guard): ") != NULL);
    else
      ASSERT(strstr(why, "master 1's clock") != NULL);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
}

static redlock_client_t *guarded_client(uv_loop_t *loop, int guard) {
  redlock_client_config cfg = {.restart_guard_ms = guard,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  return tu_client(loop, srv, N, &cfg, N);
}

/* Acquire+release of a throw-away key: reads every master's clock. */
static void touch(uv_loop_t *loop, redlock_client_t *c, const char *key) {
  redlock_lock_t *l = NULL;
  redlock_acquire_opts one = {.wait_ms = -1};
  tu_op op;
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  (void)tu_acquire(loop, l, 1000, &one, &op);
  if (op.status == 0)
    (void)tu_release(loop, l, &op);
  ASSERT_EQ(redlock_lock_free(l), 0);
}

static void case_a(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_lock_t *held;
  redlock_lock_t *l = NULL;
  redlock_acquire_opts opts = {.wait_ms = 4 * T, .retry_delay_ms = 100,
                               .retry_jitter_ms = 20};
  tu_op op;
  uint64_t t0;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  t0 = harness_now_ms();
  a = tu_client(&loop, srv, N, NULL, N);
  b = tu_client(&loop, srv, N, NULL, N);
  touch(&loop, b, "a-warm");
  /* The instances grow older than the window first: a young one off the
   * others' clocks is refused by the first-sight check (issue 29, item
   * 1) whatever tracking saw, and this case is about tracking (a step
   * seen between two readings of an instance the client knows). B keeps
   * reading the clocks meanwhile. */
  while (harness_now_ms() < t0 + T + 300) {
    tu_run_for(&loop, 500);
    touch(&loop, b, "a-warm");
  }
  held = hold_bare(&loop, a, "ka");
  harness_clock_step(&srv[0], 2 * T);
  ASSERT_EQ(has_key(0, "ka"), 0);   /* the step expired it */
  t0 = harness_now_ms();
  expect_refused(&loop, b, held, "ka", "a) connected client");
  /* Once the window has passed since the step, M1 counts again: with M4
   * and M5 hung, B's quorum needs it. */
  while (harness_now_ms() < t0 + T + 200)
    tu_run_for(&loop, t0 + T + 200 - harness_now_ms());
  ASSERT(!redlock_lock_is_held(held));
  harness_pause(&srv[3]);
  harness_pause(&srv[4]);
  ASSERT_EQ(redlock_lock_new(b, "ka", 2, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, T, &opts, &op), 0);
  fprintf(stderr, "a) B got the lock %llu ms after the step, %u yes; M1: "
          "vote %d\n", (unsigned long long)(harness_now_ms() - t0), op.yes,
          op.nodes[0].vote);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
  harness_resume(&srv[3]);
  harness_resume(&srv[4]);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, a);
  tu_close(&loop, b);
  harness_clock_step(&srv[0], -2 * T);
}

static void case_b(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_lock_t *held;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  a = tu_client(&loop, srv, N, NULL, N);
  held = hold_bare(&loop, a, "kb");
  harness_clock_step(&srv[0], 2 * T);
  ASSERT_EQ(has_key(0, "kb"), 0);
  b = tu_client(&loop, srv, N, NULL, N);
  expect_refused(&loop, b, held, "kb", "b) new client");
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, a);
  tu_close(&loop, b);
  harness_clock_step(&srv[0], -2 * T);
}

static void case_c(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b, *c;
  redlock_lock_t *held;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  a = tu_client(&loop, srv, N, NULL, N);
  c = tu_client(&loop, srv, N, NULL, N);
  touch(&loop, c, "c-warm");
  held = hold_bare(&loop, a, "kc");
  harness_clock_step(&srv[0], 2 * T);
  ASSERT_EQ(has_key(0, "kc"), 0);
  touch(&loop, c, "c-warm");      /* C sees the step */
  harness_clock_step(&srv[0], -2 * T);
  b = tu_client(&loop, srv, N, NULL, N);
  expect_refused(&loop, b, held, "kc", "c) new client after a round trip");
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, a);
  tu_close_client(&loop, c);
  tu_close(&loop, b);
}

/* d and e: M1 restarts empty; `before` ms of offset at the restart, then
 * a step of `step` ms; a new client with the restart guard (window T). */
static void case_restart(int64_t before, int64_t step, const char *label,
                         const char *key) {
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_lock_t *held;
  char buf[8192];
  const char *p;
  while (harness_now_ms() < seen_ms + T + 1500)
    harness_wait_for(never, NULL, seen_ms + T + 1500 - harness_now_ms());
  ASSERT_EQ(uv_loop_init(&loop), 0);
  a = tu_client(&loop, srv, N, NULL, N);
  held = hold_bare(&loop, a, key);
  harness_kill(&srv[0]);
  harness_clock_step(&srv[0], before);
  harness_restart(&srv[0]);
  harness_clock_step(&srv[0], step);
  ASSERT_EQ(has_key(0, key), 0);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO server"), 0);
  p = strstr(buf, "uptime_in_seconds:");
  ASSERT_NOT_NULL(p);
  fprintf(stderr, "%s: M1 reports uptime %s", label,
          p + strlen("uptime_in_seconds:"));
  ASSERT_GT(strtoll(p + strlen("uptime_in_seconds:"), NULL, 10), T / 1000);
  b = guarded_client(&loop, T);
  expect_refused(&loop, b, held, key, label);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, a);
  tu_close(&loop, b);
  harness_clock_step(&srv[0], -(before + step));
}

int main(int argc, char **argv) {
  int i;
  const char *only = argc > 1 ? argv[1] : "";
  if (!harness_clock_available()) {
    fprintf(stderr, "the clock shim is not built: failing\n");
    return 1;
  }
  for (i = 0; i < N; i++)
    harness_clock_prepare(&srv[i]);
  harness_start(srv, N);
  /* d and e need the other masters to be old enough for a guarded client
   * (older than T): a guarded client looks at them now, and the cases
   * wait until T has passed since. */
  {
    uv_loop_t loop;
    redlock_client_t *o;
    ASSERT_EQ(uv_loop_init(&loop), 0);
    o = guarded_client(&loop, T);
    touch(&loop, o, "o-warm");
    tu_close(&loop, o);
    seen_ms = harness_now_ms();
  }
  if (*only == '\0' || strchr(only, 'a'))
    case_a();
  if (*only == '\0' || strchr(only, 'b'))
    case_b();
  if (*only == '\0' || strchr(only, 'c'))
    case_c();
  if (*only == '\0' || strchr(only, 'd'))
    case_restart(0, 30000, "d) restarted, then 30 s forward", "kd");
  if (*only == '\0' || strchr(only, 'e'))
    case_restart(-30000, 30000, "e) restarted 30 s behind, corrected",
                 "ke");
  harness_stop_all();
  return 0;
}
