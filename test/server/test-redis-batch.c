/* Batched renewals (issue 13), N=3, many auto-extended plain locks:
 *  1. a batch renews every lock in it: L = 600 locks (more than one batch
 *     of 256) with ttls of 900 and 1200 ms held for 3 s, every key still
 *     on every master at the end with its own lock's ttl, none lost, and
 *     the masters saw far fewer script calls than one per lock and
 *     renewal;
 *  2. a batch with one stolen key reports exactly that lock lost
 *     (ENOTHELD, once); every other lock of the batch stays held;
 *  3. one master hung (SIGSTOP, command timeout 5 s) for 3 s: renewals
 *     are decided by the other two, never late: no lock is lost and the
 *     smallest validity seen stays above half the ttl;
 *  0. renew_batch out of range: EINVAL with a message;
 *  4. the event hook sees one AUTO_EXTEND event per lock and renewal,
 *     each with the per-master votes it was decided on (a quorum). */
#include "tutil.h"

#define N 3
#define L 600
#define TTL 900

typedef struct {
  int calls;
  int reason;
} lost_rec;

static lost_rec lost[L];
static redlock_lock_t *locks[L];
static int pending;
static unsigned events, event_yes_votes;

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  (void)l;
  r->calls++;
  r->reason = reason;
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  (void)l;
  (void)res;
  (void)arg;
  ASSERT_EQ(status, 0);
  pending--;
}

static void on_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg) {
  unsigned i;
  (void)c;
  (void)arg;
  if (ev->kind != REDLOCK_EV_AUTO_EXTEND)
    return;
  events++;
  ASSERT_EQ(ev->status, 0);
  ASSERT_EQ(ev->result->n_nodes, N);
  /* Decided at quorum: the votes that came by then. */
  for (i = 0; i < ev->result->n_nodes; i++)
    event_yes_votes += ev->result->nodes[i].vote == REDLOCK_VOTE_YES;
  ASSERT(ev->result->yes >= 2);
}

static int part;   /* fresh keys for each part */

static void key_of(int i, char *buf, size_t len) {
  snprintf(buf, len, "batch:%d:%d", part, i);
}

static int64_t ttl_of(int i) {
  return part == 0 && i % 2 == 1 ? TTL + 300 : TTL;
}

static void acquire_all(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts ae = {.wait_ms = 10000, .auto_extend = 1,
                             .on_lost = on_lost};
  uint64_t end = harness_now_ms() + 30000;
  int i;
  memset(lost, 0, sizeof(lost));
  for (i = 0; i < L; i++) {
    char key[32];
    key_of(i, key, sizeof(key));
    ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &locks[i]), 0);
    ae.lost_arg = &lost[i];
    pending++;
    /* Two ttls: a batch carries one per lock when they differ. */
    ASSERT_EQ(redlock_lock_acquire(locks[i], ttl_of(i), &ae, on_acquired,
                                   NULL),
              0);
    while (pending > 64 && harness_now_ms() < end)
      uv_run(loop, UV_RUN_ONCE);
  }
  while (pending > 0 && harness_now_ms() < end)
    uv_run(loop, UV_RUN_ONCE);
  ASSERT_EQ(pending, 0);
}

static void free_all(uv_loop_t *loop) {
  int i;
  for (i = 0; i < L; i++)
    redlock_lock_free(locks[i]);
  tu_run_for(loop, 50);
}

/* Runs the loop for ms, checking every 10 ms that every lock is held;
 * returns the smallest validity seen. */
static int64_t hold_for(uv_loop_t *loop, uint64_t ms) {
  uint64_t end = harness_now_ms() + ms;
  int64_t min_valid = INT64_MAX;
  int i;
  while (harness_now_ms() < end) {
    tu_run_for(loop, 10);
    for (i = 0; i < L; i++) {
      int64_t v = redlock_lock_validity_ms(locks[i]);
      if (!redlock_lock_is_held(locks[i]))
        TEST_FAIL("lock %d not held (lost %d, reason %d)", i,
                  lost[i].calls, lost[i].reason);
      if (v < min_valid)
        min_valid = v;
    }
  }
  return min_valid;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg = {.command_timeout_ms = 5000};
  int64_t calls0[N], min_valid;
  const int stolen = 137;
  char key[32];
  uint64_t end;
  int i, j;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    /* Bad input: a clear error, no client. */
    redlock_client_config bad = {.renew_batch = 257};
    const char *addrs[N];
    redlock_client_t *none = NULL;
    harness_addrs(srv, N, addrs);
    bad.servers = addrs;
    bad.n_servers = N;
    ASSERT_EQ(redlock_client_new(&loop, &bad, &none), REDLOCK_EINVAL);
    ASSERT(none == NULL);
    ASSERT(strstr(redlock_last_error(), "renew_batch") != NULL);
  }
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_client_set_event_hook(c, on_event, NULL), 0);

  /* 1. Every lock renewed; few script calls. */
  acquire_all(&loop, c);
  for (j = 0; j < N; j++)
    calls0[j] = tu_evalsha_calls(&srv[j]);
  events = event_yes_votes = 0;
  min_valid = hold_for(&loop, 3000);
  for (j = 0; j < N; j++) {
    /* One call per lock and renewal would be >= L * 3000 / (TTL / 3),
     * about 6,000 here; batches of locks due together make it a few
     * hundred. */
    int64_t calls = tu_evalsha_calls(&srv[j]) - calls0[j];
    fprintf(stderr, "master %d: %lld script calls for %u renewals\n", j,
            (long long)calls, events);
    ASSERT(calls > 0);
    ASSERT(calls * 8 < (int64_t)events);
  }
  {
    int longer = 0;
    /* The checks are synchronous commands: the loop runs between locks
     * so that renewals go on (under sanitizers 600 x 3 x 2 commands take
     * longer than the ttl). */
    for (i = 0; i < L; i++) {
      uv_run(&loop, UV_RUN_NOWAIT);
      ASSERT(redlock_lock_is_held(locks[i]));
      key_of(i, key, sizeof(key));
      ASSERT_EQ(
          tu_count_holding(srv, N, key, redlock_lock_token(locks[i])), N);
      ASSERT_EQ(lost[i].calls, 0);
      for (j = 0; j < N; j++) {
        /* Each key renewed to its own lock's ttl. */
        int64_t pttl = harness_pttl(&srv[j], key);
        ASSERT_GT(pttl, 0);
        ASSERT_LE(pttl, ttl_of(i));
        longer += pttl > TTL;
      }
    }
    ASSERT_GT(longer, 0);
  }
  /* 4. Every renewal was an event with its votes: >= 3 renewals each. */
  ASSERT(events >= 3u * L);
  ASSERT_EQ(redlock_client_set_event_hook(c, NULL, NULL), 0);
  ASSERT(event_yes_votes >= events * 2);
  fprintf(stderr, "1. %u renewals, smallest validity %lld ms\n", events,
          (long long)min_valid);

  /* 2. One stolen key: exactly that lock is lost. */
  key_of(stolen, key, sizeof(key));
  for (j = 0; j < N; j++)
    ASSERT_EQ(harness_set(&srv[j], key, "someone-else", 60000), 0);
  end = harness_now_ms() + 5000;
  while (lost[stolen].calls == 0 && harness_now_ms() < end)
    tu_run_for(&loop, 5);
  ASSERT_EQ(lost[stolen].calls, 1);
  ASSERT_EQ(lost[stolen].reason, REDLOCK_ENOTHELD);
  ASSERT(!redlock_lock_is_held(locks[stolen]));
  tu_run_for(&loop, 1000);   /* three more renewals of the others */
  for (i = 0; i < L; i++) {
    if (i == stolen) {
      ASSERT_EQ(lost[i].calls, 1);
      continue;
    }
    ASSERT_EQ(lost[i].calls, 0);
    ASSERT(redlock_lock_is_held(locks[i]));
  }
  free_all(&loop);

  /* 3. One master hung for 3 s: renewals decided by the others. */
  part++;
  acquire_all(&loop, c);
  harness_pause(&srv[2]);
  min_valid = hold_for(&loop, 3000);
  harness_resume(&srv[2]);
  fprintf(stderr, "3. one master hung 3 s: smallest validity %lld ms\n",
          (long long)min_valid);
  ASSERT(min_valid > TTL / 2);
  for (i = 0; i < L; i++)
    ASSERT_EQ(lost[i].calls, 0);
  free_all(&loop);

  tu_close(&loop, c);
  harness_stop_all();
  fprintf(stderr, "ok\n");
  return 0;
}
