/* A client's close ends its campaign at once, also while the close waits
 * for a durability mark (redlock.h, redlock_client_close: every operation
 * in flight completes with ECANCELED).
 *
 * Found by redlock-sim (test/sim/corpus.txt, seed 1883001028880464): a
 * closing client waited up to 3 command timeouts + 2 s for a mark that no
 * other master had confirmed BEFORE it cancelled anything, and its
 * campaign went on meanwhile; the leader's client closed (its key
 * released), the campaign was granted 4.6 ms later and told ELECTED after
 * the close, and the close, once done waiting, released the key without
 * a DEPOSED: an application still running its loop until the close's
 * callback leads without a lock under it.
 *
 * N = 3, AOF on every master. B declares the masters durable; M1's AOF
 * is switched off before B connects, so B sees the declaration broken
 * and marks it on M2 and M3, where the clients' user may not HSET (ACL):
 * the mark is written nowhere and B's close waits for it. A leads; B
 * campaigns (a standby); B's client is closed, then A resigns (its
 * release message wakes B's campaign at once). B must never be elected
 * after its close, and the close must complete.
 *
 * Then A's election, idle since its resignation, is freed and A's client
 * closed at once: the close must not read the election's lock, reaped
 * already (the old code did: heap-use-after-free under ASan). The
 * library's allocations come from pages of their own here, made
 * unreadable when freed, so such a read faults in any build. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tutil.h"

#define N 3
#define TTL_MS 10000   /* the step-down margin (2 command timeouts) under half */

static harness_server srv[N];
static char warnings[4096];
static uint64_t closed_at;   /* harness_now_ms() when B's close was called */

typedef struct inst {
  const char *id;
  int elected, deposed, elected_after_close;
  uint64_t elected_ms;
  redlock_election_t *e;
} inst;

static void on_change(redlock_election_t *e, redlock_election_event ev,
                      int reason, void *arg) {
  inst *in = arg;
  (void)e;
  (void)reason;
  if (ev == REDLOCK_ELECTED) {
    in->elected++;
    in->elected_ms = harness_now_ms();
    if (closed_at != 0 && in->id[0] == 'b')
      in->elected_after_close++;
  } else {
    in->deposed++;
  }
}

static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  size_t n = strlen(warnings);
  (void)c;
  (void)arg;
  fprintf(stderr, "warning: %s\n", msg);
  snprintf(warnings + n, sizeof(warnings) - n, "%s\n", msg);
}

static redlock_client_t *client(uv_loop_t *loop, int declare) {
  redlock_client_config cfg = {.durable = declare,
                               .on_warning = declare ? on_warning : NULL,
                               .restart_guard_ms = -1,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  return tu_client(loop, srv, N, &cfg, N);
}

typedef struct {
  uv_loop_t *loop;
  const char *want;
} spin;

/* The loop runs while we wait (B's retries and checks are timers). */
static int warned(void *arg) {
  spin *s = arg;
  tu_run_for(s->loop, 20);
  return strstr(warnings, s->want) != NULL;
}

/* Each block on pages of its own, a header before it; freed pages stay
 * mapped, unreadable (a read after free is a SIGSEGV) and dropped from
 * memory. Never reused: the test is short. */
typedef union gp_head {
  size_t span;
  max_align_t align;
} gp_head;

static void *gp_malloc(size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t span = (sizeof(gp_head) + n + page - 1) / page * page;
  gp_head *h = mmap(NULL, span, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (h == MAP_FAILED)
    return NULL;
  h->span = span;
  return h + 1;
}

static void gp_free(void *p) {
  gp_head *h;
  size_t span;
  if (p == NULL)
    return;
  h = (gp_head *)p - 1;
  span = h->span;   /* read before the pages are dropped (zeroed) */
  (void)madvise(h, span, MADV_DONTNEED);
  ASSERT_EQ(mprotect(h, span, PROT_NONE), 0);
}

static void *gp_realloc(void *p, size_t n) {
  void *q;
  size_t had;
  if (p == NULL)
    return gp_malloc(n);
  q = gp_malloc(n);
  if (q == NULL)
    return NULL;
  had = ((gp_head *)p - 1)->span - sizeof(gp_head);
  memcpy(q, p, had < n ? had : n);
  gp_free(p);
  return q;
}

static void *gp_calloc(size_t k, size_t n) {
  if (n != 0 && k > SIZE_MAX / n)
    return NULL;
  return gp_malloc(k * n);   /* fresh pages are zero */
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *ca, *cb;
  inst a = {.id = "a"}, b = {.id = "b"};
  redlock_election_opts oa = {.ttl_ms = TTL_MS, .retry_delay_ms = 200,
                              .on_change = on_change, .arg = &a};
  redlock_election_opts ob = {.ttl_ms = TTL_MS, .retry_delay_ms = 200,
                              .on_change = on_change, .arg = &b};
  spin refused = {NULL, "could not be written"};
  volatile int closed = 0;
  char ok[64];
  uint64_t t0;
  int i;

  ASSERT_EQ(redlock_replace_allocator(gp_malloc, gp_realloc, gp_calloc,
                                      gp_free), 0);
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++)
    srv[i].appendonly = 1;
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  refused.loop = &loop;
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "ACL SETUSER default -hset"), 0);
  ASSERT_EQ(harness_cmdf(&srv[0], ok, sizeof(ok), "CONFIG SET appendonly no"),
            0);

  ca = client(&loop, 0);
  ASSERT_EQ(redlock_election_new(ca, "leader", 6, a.id, &oa, &a.e), 0);
  ASSERT_EQ(redlock_election_campaign(a.e), 0);
  t0 = harness_now_ms();
  while (a.elected == 0) {
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(4 * TTL_MS))
      TEST_FAIL("the leader was never elected");
    tu_run_for(&loop, 5);
  }

  /* B sees M1's declaration broken, and its mark refused on M2 and M3. */
  cb = client(&loop, 1);
  if (harness_wait_for(warned, &refused, harness_bound_ms(10000)) != 0)
    TEST_FAIL("B never warned that its mark was refused: \"%s\"", warnings);
  ASSERT_EQ(redlock_election_new(cb, "leader", 6, b.id, &ob, &b.e), 0);
  ASSERT_EQ(redlock_election_campaign(b.e), 0);
  tu_run_for(&loop, 300);   /* B campaigns: refused while A leads */
  ASSERT_EQ(b.elected, 0);

  /* B's client closes; then the leader goes, and its release message
   * wakes B's campaign (if it still runs) at once. */
  closed_at = harness_now_ms();
  ASSERT_EQ(redlock_client_close(cb, on_closed, (void *)&closed), 0);
  ASSERT_EQ(redlock_election_resign(a.e), 0);
  /* The close waits up to 3 command timeouts + 2 s for the mark: a
   * bound with a margin for a loaded machine. */
  if (harness_run_until(&loop, &closed, harness_bound_ms(20000)) != 0)
    TEST_FAIL("B's close did not complete in %llu ms",
              (unsigned long long)(harness_now_ms() - closed_at));
  fprintf(stderr, "B closed in %llu ms; B elected %d time(s), %d after its "
          "close (%lld ms after it); A deposed %d\n",
          (unsigned long long)(harness_now_ms() - closed_at), b.elected,
          b.elected_after_close,
          b.elected ? (long long)(b.elected_ms - closed_at) : -1LL,
          a.deposed);
  ASSERT(strstr(warnings, "closed while the mark") != NULL);   /* it waited */
  ASSERT_EQ(a.deposed, 1);
  ASSERT_EQ(b.elected_after_close, 0);
  ASSERT_EQ(b.elected, 0);

  /* A's election is idle (resigned): freed at once, its lock reaped
   * while the client's close runs. */
  ASSERT_EQ(redlock_election_free(a.e), 0);
  tu_close(&loop, ca);
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "ACL SETUSER default +hset"), 0);
  harness_stop_all();
  return 0;
}
