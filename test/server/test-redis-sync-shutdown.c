/* The blocking API's additions for language bindings (issue 23):
 *
 *  a. redlock_sync_last_result(): a failed acquisition leaves its
 *     per-master result (votes, each master's error text) to the calling
 *     thread only, until its next blocking call (a success or a failure
 *     without one, EINVAL, leaves NULL); another thread's failures do not
 *     touch it; threads that exit with one stored leak nothing (valgrind,
 *     LeakSanitizer).
 *  b. redlock_sync_stats(): the client's counters through the blocking
 *     handle (grants and refusals counted, masters named).
 *  c. redlock_sync_shutdown() with calls in flight on other threads: an
 *     acquisition waiting for a taken lock (wait 30 s) and a campaign
 *     with no limit both end with ECANCELED at once; a lock held by a
 *     third thread is released on the masters; calls made after the
 *     shutdown on the handle, on that lock and on an election return
 *     ECANCELED (getters 0) without touching freed memory; then
 *     redlock_sync_close frees everything, the wrappers included. */
#include <pthread.h>

#include "tutil.h"

#define N 3

static redlock_sync_t *s;
static volatile int waiter_rc = 1, campaign_rc = 1;
static volatile uint64_t waiter_ended_ms, campaign_ended_ms;
static volatile int other_thread_failed;

static void *waiter(void *arg) {
  redlock_acquire_opts o = {.wait_ms = 30000, .wake = 1};
  redlock_sync_lock_t *l = NULL;
  (void)arg;
  waiter_rc = redlock_sync_acquire(s, "held", 4, 10000, &o, &l);
  waiter_ended_ms = harness_now_ms();
  return NULL;
}

static void *campaigner(void *arg) {
  redlock_sync_election_t *e = NULL;
  (void)arg;
  campaign_rc = redlock_sync_campaign(s, "lead", 4, "b", NULL, 0, &e);
  campaign_ended_ms = harness_now_ms();
  return NULL;
}

/* Fails an acquisition in another thread while the main thread's last
 * result is stored: its own slot changes, the main thread's does not. */
static void *other_failure(void *arg) {
  redlock_acquire_opts o = {.wait_ms = -1};
  redlock_sync_lock_t *l = NULL;
  (void)arg;
  other_thread_failed =
      redlock_sync_acquire(s, "held", 4, 10000, &o, &l) == REDLOCK_ETAKEN &&
      redlock_sync_last_result() != NULL;
  return NULL;   /* exits with a result stored: the destructor frees it */
}

/* A subscriber on `channel` on every master. */
static int subscribed(const harness_server *srv, const char *channel) {
  int i;
  for (i = 0; i < N; i++) {
    char buf[64];
    if (harness_cmdf(&srv[i], buf, sizeof(buf), "EVAL %s 0 %s",
                     "return redis.call('pubsub','numsub',ARGV[1])[2]",
                     channel) != 0 || atoi(buf) < 1)
      return 0;
  }
  return 1;
}

int main(void) {
  harness_server srv[N];
  const char *addrs[N];
  redlock_client_config cfg;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_sync_lock_t *held, *l = NULL;
  redlock_sync_election_t *leader;
  const redlock_result *r;
  redlock_stats st;
  pthread_t tw, tc, to;
  char tok[80];
  uint64_t t0;
  unsigned i;

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

  /* a. The result of a refusal, per master. */
  ASSERT_EQ(redlock_sync_acquire(s, "held", 4, 10000, NULL, &held), 0);
  ASSERT_EQ(redlock_sync_token(held, tok, sizeof(tok)), 0);
  ASSERT_EQ(redlock_sync_acquire(s, "held", 4, 10000, &once, &l),
            REDLOCK_ETAKEN);
  r = redlock_sync_last_result();
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->status, REDLOCK_ETAKEN);
  ASSERT_EQ(r->n_nodes, N);
  ASSERT_GE(r->no, 2);   /* decided as soon as a quorum is impossible */
  ASSERT_EQ(r->quorum, 2);
  for (i = 0; i < r->n_nodes; i++) {
    ASSERT(r->nodes[i].vote == REDLOCK_VOTE_NO ||
           r->nodes[i].vote == REDLOCK_VOTE_NONE);
    ASSERT_STR_EQ(r->nodes[i].server, addrs[i]);
    ASSERT_NOT_NULL(r->nodes[i].errstr);
    ASSERT_NOT_NULL(r->nodes[i].holder);
  }
  /* Another thread's failure has its own slot. */
  ASSERT_EQ(pthread_create(&to, NULL, other_failure, NULL), 0);
  pthread_join(to, NULL);
  ASSERT_EQ(other_thread_failed, 1);
  ASSERT(redlock_sync_last_result() == r);
  /* The next blocking call replaces it: a success, or a failure without
   * a result, leaves NULL. */
  ASSERT_GT(redlock_sync_validity_ms(held), 0);
  ASSERT_NULL(redlock_sync_last_result());
  ASSERT_EQ(redlock_sync_acquire(s, "held", 4, 10000, &once, &l),
            REDLOCK_ETAKEN);
  ASSERT_NOT_NULL(redlock_sync_last_result());
  ASSERT_EQ(redlock_sync_extend(held, 0), REDLOCK_EINVAL);
  ASSERT_NULL(redlock_sync_last_result());

  /* b. Stats. */
  ASSERT_EQ(redlock_sync_stats(NULL, &st), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_sync_stats(s, NULL), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_sync_stats(s, &st), 0);
  ASSERT_EQ(st.n_masters, N);
  ASSERT_EQ(st.quorum, 2);
  ASSERT_GE(st.grants, 1);
  ASSERT_GE(st.taken, 3);
  ASSERT_STR_EQ(st.masters[0].server, addrs[0]);

  /* c. Shutdown with a waiter and a campaign blocked in other threads. */
  ASSERT_EQ(redlock_sync_campaign(s, "lead", 4, "a", NULL, 10000, &leader),
            0);
  ASSERT_EQ(pthread_create(&tw, NULL, waiter, NULL), 0);
  ASSERT_EQ(pthread_create(&tc, NULL, campaigner, NULL), 0);
  /* Both are inside the library, waiting: each listens on its key's
   * release channel (the waiter asked for wake-up; a campaign always
   * does) once the masters refused it. */
  t0 = harness_now_ms();
  while (!subscribed(srv, "__redlock__:held") ||
         !subscribed(srv, "__redlock__:lead")) {
    if (harness_now_ms() - t0 > 10000)
      TEST_FAIL("the waiter and the campaign are not waiting");
    uv_sleep(5);
  }
  ASSERT_EQ(waiter_rc, 1);
  ASSERT_EQ(campaign_rc, 1);
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_sync_shutdown(s), 0);
  pthread_join(tw, NULL);
  pthread_join(tc, NULL);
  ASSERT_EQ(waiter_rc, REDLOCK_ECANCELED);
  ASSERT_EQ(campaign_rc, REDLOCK_ECANCELED);
  ASSERT_LT(waiter_ended_ms - t0, 5000);     /* not its 30 s wait */
  ASSERT_LT(campaign_ended_ms - t0, 5000);   /* not forever */
  /* The held lock was released on the masters. */
  ASSERT_EQ(tu_count_holding(srv, N, "held", tok), 0);
  /* Calls after the shutdown: ECANCELED, nothing read from freed memory
   * (ASan, valgrind). */
  ASSERT_EQ(redlock_sync_shutdown(s), 0);
  ASSERT_EQ(redlock_sync_acquire(s, "x", 1, 1000, NULL, &l),
            REDLOCK_ECANCELED);
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "closed"));
  ASSERT_NULL(redlock_sync_last_result());
  ASSERT_EQ(redlock_sync_validity_ms(held), 0);
  ASSERT_EQ(redlock_sync_is_lost(held), 0);
  ASSERT_EQ(redlock_sync_extend(held, 1000), REDLOCK_ECANCELED);
  ASSERT_EQ(redlock_sync_release(held), REDLOCK_ECANCELED);
  ASSERT_EQ(redlock_sync_is_leader(leader), 0);
  ASSERT_EQ(redlock_sync_resign(leader), REDLOCK_ECANCELED);
  ASSERT_EQ(redlock_sync_stats(s, &st), REDLOCK_ECANCELED);
  ASSERT_EQ(redlock_sync_close(s), 0);

  harness_stop_all();
  printf("ok\n");
  return 0;
}
