/* Events instead of callbacks (redlock_sync_queue_*, redlock_sync_next_event;
 * issue 35): the callbacks a binding gives so that nothing on the loop
 * thread waits for its code (a Python callback takes the GIL).
 *
 *  a. next_event with nothing queued: ETIMEDOUT at or after its timeout
 *     (the monotonic clock), well before a bound; NULL out is EINVAL.
 *  b. A lock lost (its keys deleted on every master) with on_lost =
 *     redlock_sync_queue_lost: a LOST event with ENOTHELD and the
 *     lock's arg, read on this thread.
 *  c. An election with on_change = redlock_sync_queue_election: ELECTED
 *     at the campaign, then DEPOSED (reason 0) at the resignation, in
 *     that order, with its arg.
 *  d. on_warning = redlock_sync_queue_warning: a master given twice is
 *     reported as one instance, the text copied into the event.
 *  e. redlock_sync_cancel: an acquisition waiting 30 s in another thread
 *     for a taken lock, found by its lost_arg, returns ECANCELED at once;
 *     an arg with nothing in flight cancels nothing.
 * Every event left queued at the end is read (nothing leaks: ASan's
 * LeakSanitizer, valgrind). */
#include <pthread.h>

#include "tutil.h"

#define N 3

static redlock_sync_t *s;
static volatile int waiter_rc = 1;

static void *waiter(void *arg) {
  redlock_acquire_opts o;
  redlock_sync_lock_t *l = NULL;
  (void)arg;
  memset(&o, 0, sizeof(o));
  o.wait_ms = 30000;
  o.lost_arg = (void *)(uintptr_t)0x38;
  waiter_rc = redlock_sync_acquire(s, "ev-taken", 8, 10000, &o, &l);
  return NULL;
}

/* The next event of `kind` within bound_ms (others are skipped: the
 * queue is the process's). 0, or -1 when none came. */
static int next_of(int kind, redlock_sync_event *ev, int64_t bound_ms) {
  uint64_t end = harness_now_ms() + (uint64_t)bound_ms;
  while (harness_now_ms() < end) {
    if (redlock_sync_next_event(ev, 100) == 0 && ev->kind == kind)
      return 0;
  }
  return -1;
}

int main(void) {
  harness_server srv[N];
  const char *addrs[N], *twice[N];
  redlock_client_config cfg;
  redlock_acquire_opts o;
  redlock_election_opts eo;
  redlock_sync_t *s2;
  redlock_sync_lock_t *l, *held;
  pthread_t tw;
  redlock_sync_election_t *e;
  redlock_sync_event ev;
  uint64_t t0, took;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  harness_addrs(srv, N, addrs);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.command_timeout_ms = 2000;
  cfg.connect_timeout_ms = 2000;
  cfg.restart_guard_ms = -1;   /* brand-new servers */
  ASSERT_EQ(redlock_sync_new(&cfg, &s), 0);

  /* a. Nothing queued. */
  ASSERT_EQ(redlock_sync_next_event(NULL, 0), REDLOCK_EINVAL);
  while (redlock_sync_next_event(&ev, 0) == 0) {
  }
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_sync_next_event(&ev, 50), REDLOCK_ETIMEDOUT);
  took = harness_now_ms() - t0;
  ASSERT_GE(took, 50);
  ASSERT_LT(took, harness_bound_ms(2000));

  /* b. A lost lock. */
  memset(&o, 0, sizeof(o));
  o.auto_extend = 1;
  o.on_lost = redlock_sync_queue_lost;
  o.lost_arg = (void *)(uintptr_t)0x35;
  ASSERT_EQ(redlock_sync_acquire(s, "ev-lost", 7, 900, &o, &l), 0);
  for (i = 0; i < N; i++) {
    char buf[32];
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL ev-lost"), 0);
  }
  ASSERT_EQ(next_of(REDLOCK_SYNC_EV_LOST, &ev, harness_bound_ms(5000)), 0);
  ASSERT_EQ(ev.reason, REDLOCK_ENOTHELD);
  ASSERT(ev.arg == (void *)(uintptr_t)0x35);
  ASSERT_EQ(redlock_sync_is_lost(l), 1);
  redlock_sync_release(l);

  /* c. An election's changes, in order. */
  memset(&eo, 0, sizeof(eo));
  eo.ttl_ms = 10000;   /* the default step-down (2 command timeouts) < ttl / 2 */
  eo.once = 1;
  eo.on_change = redlock_sync_queue_election;
  eo.arg = (void *)(uintptr_t)0x36;
  ASSERT_EQ(redlock_sync_campaign(s, "ev-lead", 7, "me", &eo, 5000, &e), 0);
  ASSERT_EQ(redlock_sync_resign(e), 0);
  ASSERT_EQ(next_of(REDLOCK_SYNC_EV_ELECTION, &ev, harness_bound_ms(5000)),
            0);
  ASSERT_EQ(ev.event, REDLOCK_ELECTED);
  ASSERT(ev.arg == (void *)(uintptr_t)0x36);
  ASSERT_EQ(next_of(REDLOCK_SYNC_EV_ELECTION, &ev, harness_bound_ms(5000)),
            0);
  ASSERT_EQ(ev.event, REDLOCK_DEPOSED);
  ASSERT_EQ(ev.reason, 0);

  /* d. A warning's text. */
  twice[0] = addrs[0];
  twice[1] = addrs[0];
  twice[2] = addrs[1];
  cfg.servers = twice;
  cfg.on_warning = redlock_sync_queue_warning;
  cfg.warning_arg = (void *)(uintptr_t)0x37;
  cfg.restart_guard_ms = 0;   /* the identity checks run with the guard */
  ASSERT_EQ(redlock_sync_new(&cfg, &s2), 0);
  ASSERT_EQ(next_of(REDLOCK_SYNC_EV_WARNING, &ev, harness_bound_ms(10000)),
            0);
  ASSERT(ev.arg == (void *)(uintptr_t)0x37);
  ASSERT_NOT_NULL(strstr(ev.text, "same Redis instance"));

  ASSERT_EQ(redlock_sync_close(s2), 0);

  /* e. Cancelling one acquisition by its lost_arg. */
  ASSERT_EQ(redlock_sync_cancel(NULL, NULL), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_sync_cancel(s, (void *)(uintptr_t)0x38), 0);
  ASSERT_EQ(redlock_sync_acquire(s, "ev-taken", 8, 10000, NULL, &held), 0);
  ASSERT_EQ(pthread_create(&tw, NULL, waiter, NULL), 0);
  t0 = harness_now_ms();
  /* Until the waiter's call is in flight on the loop. */
  while (redlock_sync_cancel(s, (void *)(uintptr_t)0x38) == 0) {
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(5000))
      TEST_FAIL("no acquisition in flight to cancel");
    uv_sleep(2);
  }
  pthread_join(tw, NULL);
  took = harness_now_ms() - t0;
  ASSERT_EQ(waiter_rc, REDLOCK_ECANCELED);
  ASSERT_LT(took, harness_bound_ms(5000));   /* not its 30 s wait */
  ASSERT_EQ(redlock_sync_release(held), 0);
  ASSERT_EQ(redlock_sync_close(s), 0);
  while (redlock_sync_next_event(&ev, 0) == 0) {
  }
  harness_stop_all();
  printf("ok\n");
  return 0;
}
