/* Safety under random minority faults (suite "slow").
 *
 * 8 clients (each its own client and connections, one loop) contend for
 * one resource on N=5 masters, through the fault proxy, for 60 s
 * (REDLOCK_SAFETY_SECONDS overrides). A fault timer keeps at most two
 * masters faulty at a time, picking at random: hang (SIGSTOP for
 * 0.3-1.5 s), crash and restart without persistence (keys lost; the
 * restart guard keeps it from voting for a ttl), or 200 ms latency each
 * way (beyond the 50 ms command timeout) for 1 s.
 *
 * With the argument "guard" the faults target the restart guard instead,
 * in cycles of about three seconds:
 *   1. two masters hang (SIGSTOP): grants now rest on a bare quorum of 3;
 *   2. once a client is granted with exactly those 3 YES votes, one of
 *      them crashes and comes back empty late in a wall-clock second
 *      (.80-.90), while the holder still holds; the two hung masters
 *      resume (their stale SETs carry the holder's token);
 *   3. just after the next whole second every client's connection to the
 *      restarted master is killed (CLIENT KILL), so they all reconnect
 *      and read INFO's uptime 1 from a master only ~0.2 s old.
 * A guard that trusted that uptime (or released the holder's token on
 * the resumed masters) would let the others be granted the lock while the
 * holder's is still valid. Holds are longer here (300-700 ms) so that the
 * holder's lock spans the crash.
 *
 * With the argument "clock" (or "clock-aof": the masters run appendonly
 * yes + appendfsync always and the clients declare them durable) the
 * masters run under the clock shim (clockshim.c), and the faults are wall
 * clock steps forward by 1.5-3 ttl, which expire every key a master holds
 * at once. Two kinds of events, alternating:
 *   - random: one or two masters (never more) step, every 0.5-2 s;
 *   - aimed, as the guard schedule's cycle: two masters hang (SIGSTOP),
 *     and once a client is granted with exactly the other three YES (a
 *     bare quorum), one of those three steps while the lock is held and
 *     the hung masters resume. Counting the stepped master's YES then
 *     gives a second grant.
 * Durability does not help here (keys expire by the wall clock); the
 * clock check must.
 *
 * With the argument "tls" the masters speak TLS only to the clients
 * (rediss://, through the same proxy, which moves the encrypted bytes):
 * the mixed schedule again, over TLS connections.
 *
 * Every grant is logged with its window on the validity clock (the
 * library's, CLOCK_BOOTTIME): from the grant to the earlier of its release
 * and the end of its validity. No two windows of different holders may
 * overlap. Prints grants, overlaps, availability (share of attempts made
 * on a free lock, with no other attempt overlapping them, that succeeded)
 * and acquisitions per second. */
#include <time.h>

#include "tutil.h"

#define N 5
#define CLIENTS 8
#define MAX_GRANTS 200000
#define TTL_MS 1000

typedef tu_grant grant;

typedef struct worker {
  int id;
  redlock_client_t *c;
  redlock_lock_t *l;
  uv_timer_t timer;
  uint64_t granted_ns;
  uint64_t deadline_ns;
  int free_attempt;    /* started on a free lock, alone */
  int gi;              /* index of the open grant */
} worker;

static uv_loop_t loop;
static harness_server srv[N];
static harness_proxy px;
static worker workers[CLIENTS];
static grant *grants;
static int n_grants;
static int holders;
static int in_flight;
static unsigned long attempts, free_attempts, free_successes;
static uint64_t end_ns;
static int stopping;
static uint64_t prng = 0x9e3779b97f4a7c15ULL;
static int faulty[N];          /* 0 ok, 1 paused, 2 down, 3 slow, 4 guard,
                                  5 clock stepped (for a ttl) */
static uv_timer_t fault_timer;
static uv_timer_t heal_timers[N];
static unsigned long n_faults[6];
static int clock_schedule;     /* 1: clock steps, 2: with AOF */
static int guard_schedule;
/* The guard cycle: 0 idle, 1 masters hung, waiting for a bare grant,
 * 2 crash scheduled, 3 reconnect kill scheduled. */
static int guard_phase;
static int guard_hung[2];
static int guard_target;
static unsigned long guard_cycles;

/* The validity clock (CLOCK_BOOTTIME), as the library reads it. */
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Milliseconds into the current wall-clock second (only to pick WHEN a
 * fault happens: Redis's uptime counts wall-clock seconds). */
static unsigned wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned)(ts.tv_nsec / 1000000);
}

static uint32_t rnd(uint32_t n) {
  prng ^= prng << 13;
  prng ^= prng >> 7;
  prng ^= prng << 17;
  return (uint32_t)(prng % n);
}

static void worker_next(worker *w, uint64_t ms);
static void guard_crash(uv_timer_t *t);
static void clock_cut(uv_timer_t *t);

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  worker *w = arg;
  (void)l;
  (void)status;
  (void)r;
  worker_next(w, rnd(10));
}

static void on_hold_done(uv_timer_t *t) {
  worker *w = t->data;
  uint64_t now = now_ns();
  grant *g = &grants[w->gi];
  g->to = now < w->deadline_ns ? now : w->deadline_ns;
  holders--;
  if (redlock_lock_release(w->l, on_released, w) != 0)
    worker_next(w, 1);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  worker *w = arg;
  uint64_t now = now_ns();
  in_flight--;
  free_attempts += (unsigned long)w->free_attempt;
  if (status != 0) {
    worker_next(w, 1 + rnd(20));
    return;
  }
  if (w->free_attempt)
    free_successes++;
  w->granted_ns = now;
  w->deadline_ns = now + (uint64_t)redlock_lock_validity_ms(l) * 1000000ULL;
  if (n_grants == MAX_GRANTS)
    TEST_FAIL("too many grants");
  w->gi = n_grants++;
  grants[w->gi].from = now;
  grants[w->gi].to = w->deadline_ns;
  grants[w->gi].client = w->id;
  holders++;
  if ((guard_schedule || clock_schedule) && guard_phase == 1 &&
      r->yes == 3) {
    /* A bare quorum: crash one of its three late in a second. */
    int yes[N];
    int k = 0;
    int i;
    unsigned ms = wall_ms();
    unsigned at = 800 + rnd(100);
    for (i = 0; i < N; i++)
      if (r->nodes[i].vote == REDLOCK_VOTE_YES)
        yes[k++] = i;
    guard_target = yes[rnd((uint32_t)k)];
    guard_phase = 2;
    if (clock_schedule)
      uv_timer_start(&fault_timer, clock_cut, 0, 0);
    else
      uv_timer_start(&fault_timer, guard_crash,
                     ms < at ? at - ms : 1000 - ms + at, 0);
  }
  /* The guard and clock schedules hold longer, so that locks span the
   * faults. */
  uv_timer_start(&w->timer, on_hold_done,
                 guard_schedule || clock_schedule ? 300 + rnd(400)
                                                  : 5 + rnd(45), 0);
}

static void on_want(uv_timer_t *t) {
  worker *w = t->data;
  redlock_acquire_opts once = {.wait_ms = -1};
  if (stopping || now_ns() >= end_ns)
    return;
  attempts++;
  /* An attempt counts for availability if the lock was free when it
   * started and no other attempt overlapped it (contention is not a
   * fault). */
  w->free_attempt = holders == 0 && in_flight == 0;
  if (in_flight > 0) {
    int k;
    for (k = 0; k < CLIENTS; k++)
      workers[k].free_attempt = 0;
  }
  in_flight++;
  if (redlock_lock_acquire(w->l, TTL_MS, &once, on_acquired, w) != 0)
    TEST_FAIL("acquire: %s", redlock_last_error());
}

static void worker_next(worker *w, uint64_t ms) {
  if (!stopping)
    uv_timer_start(&w->timer, on_want, ms, 0);
}

/* ---- faults ------------------------------------------------------------- */

static void on_heal(uv_timer_t *t) {
  int i = (int)(t - heal_timers);
  switch (faulty[i]) {
    case 5:
      break;   /* a ttl has passed since its step */
    case 1:
      harness_resume(&srv[i]);
      break;
    case 2:
      harness_restart(&srv[i]);
      break;
    case 3:
      harness_proxy_cmd(&px, i, "normal");
      break;
  }
  faulty[i] = 0;
}

static void on_fault(uv_timer_t *t) {
  int n_faulty = 0;
  int i;
  int kind;
  (void)t;
  if (stopping)
    return;
  for (i = 0; i < N; i++)
    n_faulty += faulty[i] != 0;
  if (n_faulty < 2) {
    do
      i = (int)rnd(N);
    while (faulty[i] != 0);
    /* The guard schedule mixes in the other faults: a hung or slow
     * master leaves locks on a bare quorum, which a same-second crash of
     * one of them then threatens. */
    kind = 1 + (int)rnd(3);
    faulty[i] = kind;
    n_faults[kind]++;
    switch (kind) {
      case 1:
        harness_pause(&srv[i]);
        uv_timer_start(&heal_timers[i], on_heal, 300 + rnd(1200), 0);
        break;
      case 2:
        harness_kill(&srv[i]);
        uv_timer_start(&heal_timers[i], on_heal, 200 + rnd(600), 0);
        break;
      case 3:
        harness_proxy_cmd(&px, i, "latency 200");
        uv_timer_start(&heal_timers[i], on_heal, 1000, 0);
        break;
    }
  }
  uv_timer_start(&fault_timer, on_fault, 400 + rnd(600), 0);
}

/* ---- the clock schedule ---------------------------------------------------- */

static void guard_start(uv_timer_t *t);

/* A step of master i: its keys expire at once; faulty for a ttl. */
static void step_clock(int i) {
  faulty[i] = 5;
  n_faults[5]++;
  harness_clock_step(&srv[i], TTL_MS * 3 / 2 + rnd(TTL_MS * 3 / 2));
  uv_timer_start(&heal_timers[i], on_heal, TTL_MS, 0);
}

static void on_clock_fault(uv_timer_t *t);

static void clock_giveup(uv_timer_t *t) {
  int i;
  (void)t;
  for (i = 0; i < 2; i++) {
    harness_resume(&srv[guard_hung[i]]);
    faulty[guard_hung[i]] = 0;
  }
  guard_phase = 0;
  if (!stopping)
    uv_timer_start(&fault_timer, on_clock_fault, 500 + rnd(1500), 0);
}

/* Random steps (one or two masters, never more than two faulty); every
 * third event starts an aimed cycle instead (guard_start). */
static void on_clock_fault(uv_timer_t *t) {
  int n_faulty = 0;
  int i, k, want;
  (void)t;
  if (stopping)
    return;
  for (i = 0; i < N; i++)
    n_faulty += faulty[i] != 0;
  if (rnd(3) == 0 && n_faulty == 0) {
    guard_start(NULL);
    /* No bare grant within 3 s (the others were still guarded): give
     * up this cycle. */
    uv_timer_start(&fault_timer, clock_giveup, 3000, 0);
    return;
  }
  want = 1 + (int)rnd(2);
  if (want > 2 - n_faulty)
    want = 2 - n_faulty;
  for (k = 0; k < want; k++) {
    do
      i = (int)rnd(N);
    while (faulty[i] != 0);
    step_clock(i);
  }
  uv_timer_start(&fault_timer, on_clock_fault, 500 + rnd(1500), 0);
}

/* The aimed cycle's cut: the bare quorum's master steps while the lock is
 * held; the hung masters resume (free of it). */
static void clock_cut(uv_timer_t *t) {
  int i;
  (void)t;
  if (stopping)
    return;
  step_clock(guard_target);
  for (i = 0; i < 2; i++) {
    harness_resume(&srv[guard_hung[i]]);
    faulty[guard_hung[i]] = 0;
  }
  n_faults[4]++;
  guard_cycles++;
  guard_phase = 0;
  uv_timer_start(&fault_timer, on_clock_fault, 500 + rnd(1500), 0);
}

/* ---- the guard schedule's cycle ------------------------------------------ */

static void guard_reconnect(uv_timer_t *t) {
  char ok[64];
  (void)t;
  /* Just after the next whole second: every client reconnects and reads
   * uptime 1 from a master ~0.2 s old. */
  harness_cmdf(&srv[guard_target], ok, sizeof(ok), "CLIENT KILL TYPE normal");
  faulty[guard_target] = 0;
  n_faults[4]++;
  guard_cycles++;
  guard_phase = 0;
  if (!stopping)
    uv_timer_start(&fault_timer, guard_start, 1000 + rnd(1000), 0);
}

static void guard_crash(uv_timer_t *t) {
  int i;
  (void)t;
  if (stopping)
    return;
  faulty[guard_target] = 4;
  harness_kill(&srv[guard_target]);
  harness_restart(&srv[guard_target]);
  for (i = 0; i < 2; i++) {
    harness_resume(&srv[guard_hung[i]]);
    faulty[guard_hung[i]] = 0;
  }
  guard_phase = 3;
  uv_timer_start(&fault_timer, guard_reconnect,
                 (uint64_t)(1000 - wall_ms() + 30 + rnd(50)), 0);
}

static void guard_start(uv_timer_t *t) {
  int i;
  (void)t;
  if (stopping)
    return;
  guard_hung[0] = (int)rnd(N);
  do
    guard_hung[1] = (int)rnd(N);
  while (guard_hung[1] == guard_hung[0]);
  for (i = 0; i < 2; i++) {
    harness_pause(&srv[guard_hung[i]]);
    faulty[guard_hung[i]] = 1;
    n_faults[1]++;
  }
  guard_phase = 1;
}

static void on_stop(uv_timer_t *t) {
  int i;
  stopping = 1;
  for (i = 0; i < N; i++)
    if ((guard_schedule || clock_schedule) && faulty[i] == 1)
      harness_resume(&srv[i]);
  uv_close((uv_handle_t *)t, NULL);
  uv_timer_stop(&fault_timer);
  for (i = 0; i < N; i++) {
    if (uv_is_active((uv_handle_t *)&heal_timers[i])) {
      uv_timer_stop(&heal_timers[i]);
      on_heal(&heal_timers[i]);
    }
  }
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  (*(int *)arg)--;
}

int main(int argc, char **argv) {
  const char *addrs[N];
  const char *env = getenv("REDLOCK_SAFETY_SECONDS");
  const char *proxy_exe = getenv("REDLOCK_FAULTPROXY");
  int seconds = env != NULL ? atoi(env) : 60;
  uv_timer_t stop_timer;
  unsigned long overlaps = 0;
  int open_clients = CLIENTS;
  static char tls_addrs[N][64];
  int tls;
  int i;

  if (proxy_exe == NULL)
    TEST_FAIL("REDLOCK_FAULTPROXY not set");
  guard_schedule = argc > 1 && strcmp(argv[1], "guard") == 0;
  tls = argc > 1 && strcmp(argv[1], "tls") == 0;
  clock_schedule = argc > 1 && strcmp(argv[1], "clock") == 0       ? 1
                   : argc > 1 && strcmp(argv[1], "clock-aof") == 0 ? 2
                                                                   : 0;
  if (seconds < 1 || seconds > 3600)
    seconds = 60;
  grants = calloc(MAX_GRANTS, sizeof(*grants));
  ASSERT_NOT_NULL(grants);
  memset(srv, 0, sizeof(srv));
  if (tls) {
    tu_require_tls();
    for (i = 0; i < N; i++)
      srv[i].tls = 1;
  }
  for (i = 0; i < N && clock_schedule; i++) {
    harness_clock_prepare(&srv[i]);
    srv[i].appendonly = clock_schedule == 2;
  }
  harness_start(srv, N);
  harness_proxy_start(&px, proxy_exe, srv, N);
  harness_proxy_addrs(&px, addrs);
  if (tls) {
    for (i = 0; i < N; i++) {
      snprintf(tls_addrs[i], sizeof(tls_addrs[i]), "rediss://%s", addrs[i]);
      addrs[i] = tls_addrs[i];
    }
  }
  prng ^= uv_hrtime();
  fprintf(stderr, "safety: seed %llu\n", (unsigned long long)prng);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  for (i = 0; i < CLIENTS; i++) {
    worker *w = &workers[i];
    /* Default restart guard (the ttl): fresh or restarted masters do
     * not vote for a ttl. Default 50 ms command timeout. */
    redlock_client_config cfg = {.servers = addrs, .n_servers = N,
                                 .connect_timeout_ms = 200,
                                 .reconnect_min_ms = 10,
                                 .reconnect_max_ms = 200};
    if (tls)
      cfg.tls_ca_file = harness_tls_file("ca.crt");
    cfg.durable = clock_schedule == 2;
    w->id = i;
    ASSERT_EQ(redlock_client_new(&loop, &cfg, &w->c), 0);
    ASSERT_EQ(redlock_lock_new(w->c, "safety", 6, &w->l), 0);
    uv_timer_init(&loop, &w->timer);
    w->timer.data = w;
    worker_next(w, 1);
  }
  for (i = 0; i < N; i++)
    uv_timer_init(&loop, &heal_timers[i]);
  uv_timer_init(&loop, &fault_timer);
  uv_timer_start(&fault_timer, guard_schedule   ? guard_start
                              : clock_schedule ? on_clock_fault
                                               : on_fault,
                 1500, 0);
  uv_timer_init(&loop, &stop_timer);
  uv_timer_start(&stop_timer, on_stop, (uint64_t)seconds * 1000, 0);
  end_ns = now_ns() + (uint64_t)seconds * 1000000000ULL;

  while (!stopping)
    uv_run(&loop, UV_RUN_ONCE);
  /* Let the last holds and releases finish (bounded), then close. */
  tu_run_for(&loop, 200);
  for (i = 0; i < CLIENTS; i++) {
    uv_close((uv_handle_t *)&workers[i].timer, NULL);
    redlock_client_close(workers[i].c, on_closed, &open_clients);
  }
  for (i = 0; i < N; i++)
    uv_close((uv_handle_t *)&heal_timers[i], NULL);
  uv_close((uv_handle_t *)&fault_timer, NULL);
  harness_loop_close(&loop, 10000);
  ASSERT_EQ(open_clients, 0);

  overlaps = tu_overlaps(grants, n_grants);
  printf("safety%s%s: %d s, %d clients, N=%d: grants %d, overlaps %lu, "
         "attempts %lu, availability %.1f%% (%lu of %lu attempts on a free "
         "lock), %.1f acquisitions/s; faults: %lu hangs, %lu crash-restarts,"
         " %lu slow, %lu %s, %lu clock steps\n",
         guard_schedule   ? " (guard schedule)"
         : clock_schedule ? (clock_schedule == 2 ? " (clock steps, AOF)"
                                                 : " (clock steps)")
                          : "",
         tls ? " (TLS)" : "",
         seconds, CLIENTS, N,
         n_grants, overlaps, attempts,
         free_attempts ? 100.0 * (double)free_successes /
                             (double)free_attempts
                       : 0.0,
         free_successes, free_attempts, (double)n_grants / seconds,
         n_faults[1], n_faults[2], n_faults[3], n_faults[4],
         clock_schedule ? "steps of a bare quorum's master"
                        : "same-second crashes of a bare quorum's master",
         n_faults[5]);
  fflush(stdout);
  ASSERT_EQ(overlaps, 0);
  /* It did keep working (the guard schedule holds longer). */
  ASSERT_GT(n_grants, guard_schedule || clock_schedule ? seconds
                                                      : seconds * 10);
  if (clock_schedule) {
    ASSERT_GT(n_faults[5], (unsigned long)seconds / 2);   /* it ran */
    ASSERT_GT(guard_cycles, (unsigned long)seconds / 15);
  }
  if (guard_schedule)
    ASSERT_GT(guard_cycles, seconds / 6);   /* the scenario did run */
  free(grants);
  harness_stop_all();
  return 0;
}
