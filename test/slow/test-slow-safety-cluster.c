/* Safety with Redis Cluster masters (suite "slow", issue 22).
 *
 * N = 3 masters, each a Redis Cluster of 2 primaries with a replica each
 * (12 redis-servers). 8 clients (each its own client, one loop) contend
 * for one key for 60 s (REDLOCK_SAFETY_SECONDS). One master at a time is
 * faulty, the key's primary in it:
 *   - hang: SIGSTOP for 0.3-1.5 s (below the cluster's node timeout);
 *   - lossy failover: the primary's replica is killed, the primary keeps
 *     granting for 0.1-0.5 s (keys the replica never gets), then the
 *     primary is killed, the replica comes back empty and takes over
 *     (CLUSTER FAILOVER TAKEOVER), and the old primary rejoins as its
 *     replica. The new primary lacks the keys it acknowledged before:
 *     exactly a master that restarted empty. The master counts as faulty
 *     for a ttl after the takeover (the failure model: fewer than a
 *     quorum faulty at a time).
 * With the argument "single": N = 1, the single-cluster lock most cluster
 * users run. Every lossy failover then loses the holder's key on the only
 * master: only the restart guard (a new primary's YES counts once a ttl
 * has passed) keeps a second client out - without it this schedule gave
 * double grants within seconds.
 * The clients run the default (automatic) restart guard. Every grant is
 * logged with its window on the validity clock (CLOCK_BOOTTIME); no two
 * windows of different holders may overlap. */
#include <time.h>

#include "tutil.h"

#define MAX_N 3      /* clusters (masters of the quorum) */
#define PER 4        /* servers per cluster: 2 primaries, 2 replicas */
#define CLIENTS 8
#define MAX_GRANTS 200000
#define TTL_MS 1000

typedef tu_grant grant;

typedef struct worker {
  int id;
  redlock_client_t *c;
  redlock_lock_t *l;
  uv_timer_t timer;
  uint64_t deadline_ns;
  int gi;
} worker;

static uv_loop_t loop;
static int N = 3;
static harness_server srv[MAX_N * PER];
static worker workers[CLIENTS];
static grant *grants;
static int n_grants, holders;
static unsigned long attempts;
static unsigned long n_hangs, n_failovers;
static uint64_t end_ns;
static int stopping;
static uint64_t prng = 0x9e3779b97f4a7c15ULL;
static uv_timer_t fault_timer;
static unsigned slot;
/* The fault in progress. */
static int f_cluster = -1, f_kind, f_step;
static int f_primary, f_replica;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint32_t rnd(uint32_t n) {
  prng ^= prng << 13;
  prng ^= prng >> 7;
  prng ^= prng << 17;
  return (uint32_t)(prng % n);
}

static harness_server *cl(int k) {
  return &srv[k * PER];
}

/* ---- the workers --------------------------------------------------------- */

static void worker_next(worker *w, uint64_t ms);

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  (void)l;
  (void)status;
  (void)r;
  worker_next(arg, rnd(10));
}

static void on_hold_done(uv_timer_t *t) {
  worker *w = t->data;
  uint64_t now = now_ns();
  grants[w->gi].to = now < w->deadline_ns ? now : w->deadline_ns;
  holders--;
  if (redlock_lock_release(w->l, on_released, w) != 0)
    worker_next(w, 1);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  worker *w = arg;
  uint64_t now = now_ns();
  (void)r;
  if (status != 0) {
    worker_next(w, 1 + rnd(20));
    return;
  }
  w->deadline_ns = now + (uint64_t)redlock_lock_validity_ms(l) * 1000000ULL;
  if (n_grants == MAX_GRANTS)
    TEST_FAIL("too many grants");
  w->gi = n_grants++;
  grants[w->gi].from = now;
  grants[w->gi].to = w->deadline_ns;
  grants[w->gi].client = w->id;
  holders++;
  /* N = 1: longer holds, so that failovers fall inside held locks. */
  uv_timer_start(&w->timer, on_hold_done,
                 N == 1 ? 100 + rnd(400) : 5 + rnd(95), 0);
}

static void on_want(uv_timer_t *t) {
  worker *w = t->data;
  redlock_acquire_opts once = {.wait_ms = -1};
  if (stopping || now_ns() >= end_ns)
    return;
  attempts++;
  if (redlock_lock_acquire(w->l, TTL_MS, &once, on_acquired, w) != 0)
    TEST_FAIL("acquire: %s", redlock_last_error());
}

static void worker_next(worker *w, uint64_t ms) {
  if (!stopping)
    uv_timer_start(&w->timer, on_want, ms, 0);
}

/* ---- faults: one master at a time ---------------------------------------- */

static void on_fault(uv_timer_t *t);

/* The next fault after `ms` (the current one is over by then). */
static void next_fault(uint64_t ms) {
  f_cluster = -1;
  if (!stopping)
    uv_timer_start(&fault_timer, on_fault, ms, 0);
}

/* The key's primary of cluster k now, and its replica. */
static void roles(int k, int *primary, int *replica) {
  int owner = harness_cluster_owner(cl(k), PER, "safety");
  int i;
  if (owner < 0)
    TEST_FAIL("cluster %d: no owner of the key's slot", k + 1);
  *primary = owner;
  *replica = -1;
  for (i = 0; i < PER; i++) {
    char buf[256];
    if (i == owner || cl(k)[i].pid == 0)
      continue;
    if (harness_cmdf(&cl(k)[i], buf, sizeof(buf), "ROLE") != 0)
      continue;
    if (harness_is_primary(&cl(k)[i]) == 0) {
      char info[4096];
      char want[32];
      snprintf(want, sizeof(want), "master_port:%d", cl(k)[owner].port);
      if (harness_cmdf(&cl(k)[i], info, sizeof(info), "INFO replication") ==
              0 &&
          strstr(info, want) != NULL)
        *replica = i;
    }
  }
  if (*replica < 0)
    TEST_FAIL("cluster %d: the key's primary has no replica", k + 1);
}

static void on_fault(uv_timer_t *t) {
  harness_server *c;
  char buf[64];
  (void)t;
  if (stopping)
    return;
  if (f_cluster < 0) {
    f_cluster = (int)rnd(N);
    f_kind = (int)rnd(2);
    f_step = 0;
    roles(f_cluster, &f_primary, &f_replica);
  }
  c = cl(f_cluster);
  if (f_kind == 0) {
    /* Hang. */
    if (f_step++ == 0) {
      n_hangs++;
      harness_pause(&c[f_primary]);
      uv_timer_start(&fault_timer, on_fault, 300 + rnd(1200), 0);
    } else {
      harness_resume(&c[f_primary]);
      next_fault(200 + rnd(500));
    }
    return;
  }
  switch (f_step++) {
    case 0:
      /* The replica goes: what the primary grants now it never gets. */
      harness_kill(&c[f_replica]);
      uv_timer_start(&fault_timer, on_fault, 100 + rnd(400), 0);
      return;
    case 1:
      n_failovers++;
      harness_kill(&c[f_primary]);
      harness_restart(&c[f_replica]);   /* empty */
      if (harness_cmdf(&c[f_replica], buf, sizeof(buf),
                       "CLUSTER FAILOVER TAKEOVER") != 0 ||
          strcmp(buf, "OK") != 0)
        TEST_FAIL("takeover: %s", buf);
      harness_cluster_wait_owner(c, PER, slot, &c[f_replica]);
      /* The old primary rejoins as a replica of the new one, empty. */
      harness_restart(&c[f_primary]);
      /* Faulty for a ttl from the takeover: the next fault after it. */
      next_fault(TTL_MS + 200 + rnd(800));
      return;
  }
}

static void on_stop(uv_timer_t *t) {
  stopping = 1;
  uv_close((uv_handle_t *)t, NULL);
  uv_timer_stop(&fault_timer);
  if (f_cluster >= 0 && f_kind == 0 && f_step == 1)
    harness_resume(&cl(f_cluster)[f_primary]);
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  (*(int *)arg)--;
}

int main(int argc, char **argv) {
  const char *env = getenv("REDLOCK_SAFETY_SECONDS");
  int seconds = env != NULL ? atoi(env) : 60;
  const char *addrs[MAX_N];
  static char addr_buf[MAX_N][64];
  uv_timer_t stop_timer;
  unsigned long overlaps = 0;
  int open_clients = CLIENTS, i, k;
  char buf[64];
  if (seconds < 1 || seconds > 3600)
    seconds = 60;
  if (argc > 1 && strcmp(argv[1], "single") == 0)
    N = 1;
  grants = calloc(MAX_GRANTS, sizeof(*grants));
  ASSERT_NOT_NULL(grants);
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N * PER; i++) {
    srv[i].cluster = 1;
    srv[i].node_timeout_ms = 2000;   /* hangs stay below it */
  }
  harness_start(srv, N * PER);
  for (k = 0; k < N; k++) {
    harness_cluster_make(cl(k), PER, 2);
    snprintf(addr_buf[k], sizeof(addr_buf[k]), "%s",
             harness_cluster_addr(&cl(k)[0]));
    addrs[k] = addr_buf[k];
  }
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "CLUSTER KEYSLOT safety"),
            0);
  slot = (unsigned)strtoul(buf, NULL, 10);
  prng ^= uv_hrtime();
  fprintf(stderr, "safety-cluster: seed %llu\n", (unsigned long long)prng);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  for (i = 0; i < CLIENTS; i++) {
    worker *w = &workers[i];
    redlock_client_config cfg = {.servers = addrs, .n_servers = (size_t)N,
                                 .connect_timeout_ms = 300,
                                 .reconnect_min_ms = 10,
                                 .reconnect_max_ms = 200};
    w->id = i;
    ASSERT_EQ(redlock_client_new(&loop, &cfg, &w->c), 0);
    ASSERT_EQ(redlock_lock_new(w->c, "safety", 6, &w->l), 0);
    uv_timer_init(&loop, &w->timer);
    w->timer.data = w;
    worker_next(w, 1);
  }
  uv_timer_init(&loop, &fault_timer);
  uv_timer_start(&fault_timer, on_fault, 2000, 0);
  uv_timer_init(&loop, &stop_timer);
  uv_timer_start(&stop_timer, on_stop, (uint64_t)seconds * 1000, 0);
  end_ns = now_ns() + (uint64_t)seconds * 1000000000ULL;
  while (!stopping)
    uv_run(&loop, UV_RUN_ONCE);
  tu_run_for(&loop, 200);
  for (i = 0; i < CLIENTS; i++) {
    uv_close((uv_handle_t *)&workers[i].timer, NULL);
    redlock_client_close(workers[i].c, on_closed, &open_clients);
  }
  uv_close((uv_handle_t *)&fault_timer, NULL);
  harness_loop_close(&loop, 10000);
  ASSERT_EQ(open_clients, 0);

  overlaps = tu_overlaps(grants, n_grants);
  printf("safety (Redis Cluster masters): %d s, %d clients, N=%d clusters of "
         "2 primaries + 2 replicas: grants %d, overlaps %lu, attempts %lu, "
         "%.1f acquisitions/s; faults: %lu hangs, %lu lossy failovers\n",
         seconds, CLIENTS, N, n_grants, overlaps, attempts,
         (double)n_grants / seconds, n_hangs, n_failovers);
  fflush(stdout);
  ASSERT_EQ(overlaps, 0);
  ASSERT_GT(n_grants, N == 1 ? seconds / 2 : seconds * 5);
  ASSERT_GT(n_failovers, (unsigned long)seconds / 15);
  free(grants);
  harness_stop_all();
  return 0;
}
