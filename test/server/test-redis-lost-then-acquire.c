/* A new operation on a handle whose auto-extension round is still in
 * flight. An auto-extended lock (ttl 300 ms) loses its quorum: two of three
 * masters hang (SIGSTOP) with a long command timeout (5 s), so the
 * watchdog's extend round stays in flight (master 0 answered, the hung two
 * hold it). The validity runs out. Then, on the same handle, the user
 *  - acquires again, or
 *  - adopts the token and releases it,
 * either after on_lost has fired (EEXPIRED), or as soon as the handle
 * reports not held, before the watchdog's timer has noticed (the loop is
 * not run in between: the watchdog's round is certainly still in flight).
 * The masters are then resumed. In every case the operation's callback
 * must run exactly once within a bounded time (well below the 5 s command
 * timeout: with the masters back, the replies come at once), and the
 * client must close (nothing leaks; valgrind and ASan clean). Each case
 * runs on a fresh client and handle. */
#include "tutil.h"

#define N 3

enum { AFTER_LOST = 0, IN_FLIGHT = 1 };
enum { DO_ACQUIRE = 0, DO_ADOPT_RELEASE = 1 };

typedef struct {
  int calls;
  int reason;
  volatile int fired;
} lost_rec;

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  (void)l;
  r->calls++;
  r->reason = reason;
  r->fired = 1;
}

typedef struct {
  const harness_server *s;
  const char *key;
  uint64_t expiry_ms;   /* the key's expiry on s after the acquire */
} extended_cond;

/* The key's expiry on the master moved later: an extension ran there. */
static int extended_there(void *arg) {
  extended_cond *e = arg;
  int64_t pttl = harness_pttl(e->s, e->key);
  return pttl > 0 && harness_now_ms() + (uint64_t)pttl > e->expiry_ms + 20;
}

static int not_held(void *arg) {
  return !redlock_lock_is_held(arg);
}

static void run_case(harness_server *srv, int when, int what) {
  static const char *names[2][2] = {
      {"after on_lost: acquire", "after on_lost: adopt + release"},
      {"round in flight: acquire", "round in flight: adopt + release"}};
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  int slow = tu_slow();
  int64_t ttl = slow ? 600 : 300;
  uint64_t bound = slow ? 10000 : 3000;
  redlock_client_config cfg = {.command_timeout_ms = 5000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_lost};
  char key[64];
  extended_cond ext;
  lost_rec lr;
  tu_op op;
  char tok[80];
  uint64_t t0;
  uint64_t end;

  fprintf(stderr, "case: %s\n", names[when][what]);
  /* A key per case: what a case leaves behind expires by its ttl. */
  snprintf(key, sizeof(key), "lost-then-acquire-%d-%d", when, what);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  memset(&lr, 0, sizeof(lr));
  ae.lost_arg = &lr;
  ASSERT_EQ(tu_acquire(&loop, l, ttl, &ae, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  ext.s = &srv[0];
  ext.key = key;
  ext.expiry_ms = harness_now_ms() + (uint64_t)ttl;

  /* A majority hangs. Run the loop until the watchdog's extension has
   * reached master 0: its round is now in flight (the hung two hold it,
   * for up to the 5 s command timeout). */
  harness_pause(&srv[1]);
  harness_pause(&srv[2]);
  end = harness_now_ms() + 5000;
  while (!extended_there(&ext)) {
    if (harness_now_ms() > end)
      TEST_FAIL("the watchdog's extension never reached master 0");
    tu_run_for(&loop, 2);
  }
  ASSERT_EQ(lr.calls, 0);

  if (when == AFTER_LOST) {
    ASSERT_EQ(harness_run_until(&loop, &lr.fired, 5000), 0);
    ASSERT_EQ(lr.reason, REDLOCK_EEXPIRED);
  } else {
    /* Not running the loop: the watchdog's timer cannot run, its round
     * stays in flight while the validity runs out. */
    ASSERT_EQ(harness_wait_for(not_held, l, (uint64_t)ttl + 5000), 0);
    ASSERT_EQ(lr.calls, 0);
  }
  ASSERT_EQ(redlock_lock_is_held(l), 0);

  memset(&op, 0, sizeof(op));
  if (what == DO_ACQUIRE) {
    /* The same options again (auto-extended), one attempt. */
    ASSERT_EQ(redlock_lock_acquire(l, ttl, &ae, tu_cb, &op), 0);
  } else {
    ASSERT_EQ(redlock_lock_adopt(l, tok), 0);
    ASSERT_EQ(redlock_lock_release(l, tu_cb, &op), 0);
  }
  ASSERT_EQ(op.done, 0);
  harness_resume(&srv[1]);
  harness_resume(&srv[2]);
  t0 = harness_now_ms();
  if (harness_run_until(&loop, &op.done, bound) != 0)
    TEST_FAIL("%s: the callback did not run within %" PRIu64 " ms of the "
              "masters' return", names[when][what], bound);
  fprintf(stderr, "  callback after %" PRIu64 " ms: %s\n",
          op.cb_ms - t0, redlock_err_name(op.status));
  ASSERT_NE(op.status, REDLOCK_ECANCELED);
  if (what == DO_ACQUIRE && op.status == 0)
    ASSERT(redlock_lock_is_held(l));
  tu_run_for(&loop, 200);
  ASSERT_EQ(op.calls, 1);   /* exactly once */
  ASSERT_LE(lr.calls, 1);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);   /* completes: nothing left on the loop */
}

int main(void) {
  harness_server srv[N];

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  run_case(srv, AFTER_LOST, DO_ACQUIRE);
  run_case(srv, AFTER_LOST, DO_ADOPT_RELEASE);
  run_case(srv, IN_FLIGHT, DO_ADOPT_RELEASE);
  run_case(srv, IN_FLIGHT, DO_ACQUIRE);
  harness_stop_all();
  return 0;
}
