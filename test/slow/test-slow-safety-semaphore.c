/* A counting semaphore's safety under random minority faults (suite
 * "slow"; issue 32, docs/DESIGN.md "Counting semaphores").
 *
 * For K = 1, 2 and 3: 3K + 2 workers (each its own client and
 * connections, one loop) contend for one semaphore of limit K on N = 5
 * masters, through the fault proxy, for S seconds per K
 * (REDLOCK_SEM_SAFETY_SECONDS, default 15: the whole test within about a
 * minute). A fault timer keeps at most two masters faulty at a time,
 * picking at random among:
 *   - crash and restart without persistence (masters 1-3 run without it:
 *     their keys are lost; the restart guard keeps a new instance from
 *     voting for a ttl, and it counts as faulty until then);
 *   - crash and restart with AOF (masters 4 and 5 run appendonly yes +
 *     appendfsync always and are declared durable, ?durable=1: they keep
 *     every key and count at once);
 *   - hang (SIGSTOP for 0.3-1.5 s);
 *   - a wall-clock step forward by 1.5-3 ttl (clockshim.c), which
 *     expires every key of that master at once; a ttl later its clock
 *     steps back as far (faulty until a ttl after that). Undone, so that
 *     the offsets do not pile up: a restarted instance whose clock is off
 *     the others' is kept out by the clock check whatever the guard does,
 *     and with offsets left in place a guard that counts new instances
 *     at once went unseen;
 *   - 200 ms of latency each way through the proxy for 1 s (beyond the
 *     50 ms command timeout), as the mutex's mixed schedule;
 *   - (one event in two while no master is faulty) an aimed cycle, as
 *     test-slow-safety's guard and clock schedules: two masters hang, and
 *     once a worker is granted a permit with exactly the other three YES
 *     (a bare quorum), the hung two's connections are reset (the
 *     requests queued for them are lost: they do not take the holder's
 *     SET on resuming), they resume, and one of the three loses the
 *     permit while it is held: a crash and empty restart (masters 1-3,
 *     one time in two) or a clock step (the others). Counting that
 *     master's vote would give the permit a second holder. Given up
 *     after 3 s without such a grant.
 * The clients are configured as test-slow-safety's: the default restart
 * guard (the ttl record) and clock check, a 50 ms command timeout.
 * Holds are mostly short (5-50 ms, so that K at once is reached often),
 * one in sixteen long (300-1000 ms: to the end of the validity, spanning
 * faults), and long while an aimed cycle waits (they span its cut).
 *
 * Every grant is logged with its window on the validity clock (the
 * library's, CLOCK_BOOTTIME): from the grant to the earlier of its release
 * and the end of its validity. A sweep over the windows checks that never
 * more than K are open at once (printing the first episodes beyond K),
 * that K at once was reached (the permits are used) and that there were
 * at least 50 grants per K (the schedule cannot pass vacuously).
 *
 * The positive control: the same sweep must see more than K holders of
 * the naive design (test-redis-semaphore-naive's test double, here as a
 * client): each master keeps a set of holders and admits while it holds
 * fewer than K (one script), a holder needs a majority. Its client is
 * written here on hiredis's async API on the same loop: each attempt
 * sends the script to the five masters (directly, no proxy), each request
 * after its own 0-2 ms delay (the order in which the masters see
 * concurrent attempts differs, as on any network: without it, one process
 * on one loop writes every attempt to the masters in the same order, and
 * one run in two saw no excess in 20 s), with a 50 ms deadline
 * for the replies; yes votes are counted; a majority with validity left
 * (ttl - elapsed - drift, the library's formula) is a grant; a failed
 * attempt is given up on every master. K = 2, 12 workers, holds of 2-20
 * ms, no fault: it runs at least 2 s and until the first excess (at most
 * 20 s). If the sweep never sees K + 1 holders of the naive design, the
 * checker is blind and the test fails. */
#include <time.h>

#include <async.h>
#include <adapters/libuv.h>

#include "tutil.h"

#define N 5
#define N_AOF 2              /* the last two masters: AOF, declared */
#define MAX_WORKERS 12
#define MAX_GRANTS 200000
#define TTL_MS 1000
#define SECONDS 15
#define MIN_GRANTS 50
#define NAIVE_K 2
#define NAIVE_WORKERS 12

typedef struct window {
  uint64_t from, to;
  int worker;
  int permit;    /* -1: the naive control */
} window;

typedef struct worker {
  int id;
  redlock_client_t *c;
  redlock_lock_t *l;
  uv_timer_t timer;
  uint64_t valid_ns;
  int gi;
  int idle;      /* past the end: wants nothing more */
} worker;

static uv_loop_t loop;
static harness_server srv[N];
static harness_proxy px;
static const char *client_addrs[N];
static worker workers[MAX_WORKERS];
static int n_workers;
static window *grants;
static int n_grants;
static uint64_t start_ns, end_ns;
static int stopping;
static unsigned limit;
static char name[32];
static unsigned long attempts, refusals;
static unsigned long by_status[32];
static uint64_t prng = 0x9e3779b97f4a7c15ULL;
static int faulty[N];    /* 0 ok, 1 hung, 2 down (lossy), 3 down (AOF),
                            4 slow, 5 clock stepped (for a ttl), 6
                            restarted empty (guarded for a ttl), 7 clock
                            stepped back (for a ttl) */
static int64_t step_ms[N];   /* its step forward, to undo */
static unsigned long n_faults[7];
/* The aimed cycle: 0 idle, 1 two masters hung, waiting for a grant on
 * exactly the other three (a bare quorum), 2 its cut is due. */
static int aim_phase;
static int aim_hung[2];
static int aim_target;
static unsigned long aim_cycles;
static uv_timer_t fault_timer;
static uv_timer_t heal_timers[N];

/* The validity clock (CLOCK_BOOTTIME), as the library reads it. */
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

static int log_grant(uint64_t from, uint64_t to, int who, int permit) {
  if (n_grants == MAX_GRANTS)
    TEST_FAIL("too many grants");
  grants[n_grants].from = from;
  grants[n_grants].to = to;
  grants[n_grants].worker = who;
  grants[n_grants].permit = permit;
  return n_grants++;
}

/* ---- the sweep ----------------------------------------------------------- */

typedef struct sweep_result {
  int most;              /* most windows open at once */
  unsigned long episodes;   /* times the count rose above the limit */
  uint64_t over_ns;      /* time spent above the limit */
  uint64_t span_ns;      /* first start to last end */
} sweep_result;

static int cmp_ev(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  /* By time; at a tie an end (-1) before a start (+1). */
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* The windows open at `t` (an episode beyond the limit), printed. */
static void print_episode(uint64_t t) {
  int i;
  fprintf(stderr, "  at %.3f s, open:\n", (double)(t - start_ns) / 1e9);
  for (i = 0; i < n_grants; i++)
    if (grants[i].from <= t && t < grants[i].to)
      fprintf(stderr, "    worker %d permit %d: %.3f .. %.3f s\n",
              grants[i].worker, grants[i].permit,
              (double)(grants[i].from - start_ns) / 1e9,
              (double)(grants[i].to - start_ns) / 1e9);
}

/* Sweeps the windows of grants[0..n_grants) against the limit `k`. */
static sweep_result sweep(int k, int print) {
  int64_t *ev = malloc((size_t)n_grants * 4 * sizeof(int64_t) + 1);
  sweep_result r = {0, 0, 0, 0};
  int i, open = 0;
  int64_t over_from = 0;
  ASSERT_NOT_NULL(ev);
  for (i = 0; i < n_grants; i++) {
    ASSERT_LE(grants[i].from, grants[i].to);
    ev[4 * i] = (int64_t)grants[i].from;
    ev[4 * i + 1] = 1;
    ev[4 * i + 2] = (int64_t)grants[i].to;
    ev[4 * i + 3] = -1;
  }
  qsort(ev, (size_t)n_grants * 2, 2 * sizeof(int64_t), cmp_ev);
  for (i = 0; i < 2 * n_grants; i++) {
    open += (int)ev[2 * i + 1];
    if (open > r.most)
      r.most = open;
    if (open == k + 1 && ev[2 * i + 1] == 1) {
      r.episodes++;
      over_from = ev[2 * i];
      if (print && r.episodes <= 5)
        print_episode((uint64_t)ev[2 * i]);
    }
    if (open == k && ev[2 * i + 1] == -1)
      r.over_ns += (uint64_t)(ev[2 * i] - over_from);
  }
  if (n_grants > 0)
    r.span_ns = (uint64_t)(ev[4 * n_grants - 2] - ev[0]);
  free(ev);
  return r;
}

/* ---- the semaphore's workers --------------------------------------------- */

static void worker_next(worker *w, uint64_t ms);
static void aim_cut(uv_timer_t *t);

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
  grants[w->gi].to = now < w->valid_ns ? now : w->valid_ns;
  if (redlock_lock_release(w->l, on_released, w) != 0)
    worker_next(w, 1);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  worker *w = arg;
  uint64_t now = now_ns();
  int permit;
  (void)r;
  if (status != 0) {
    /* Refused (taken, no quorum, timed out): faults and contention. A
     * limit mismatch would be a bug here (one K per name). */
    ASSERT_NE(status, REDLOCK_ELIMIT);
    refusals++;
    if (-status < 32)
      by_status[-status]++;
    worker_next(w, 1 + rnd(20));
    return;
  }
  permit = redlock_semaphore_permit(l);
  ASSERT(permit >= 0 && permit < (int)limit);
  w->valid_ns = now + (uint64_t)redlock_lock_validity_ms(l) * 1000000ULL;
  w->gi = log_grant(now, w->valid_ns, w->id, permit);
  if (aim_phase == 1 && r->yes == 3) {
    /* A bare quorum: one of its three is cut while this is held. */
    int yes[N];
    int n = 0, i;
    for (i = 0; i < N; i++)
      if (r->nodes[i].vote == REDLOCK_VOTE_YES)
        yes[n++] = i;
    aim_target = yes[rnd((uint32_t)n)];
    aim_phase = 2;
    uv_timer_start(&fault_timer, aim_cut, 0, 0);
  }
  /* While a cycle aims, holds span its cut. */
  uv_timer_start(&w->timer, on_hold_done,
                 aim_phase != 0 || rnd(16) == 0 ? 300 + rnd(700)
                                                : 5 + rnd(45), 0);
}

static void on_want(uv_timer_t *t) {
  worker *w = t->data;
  redlock_acquire_opts once = {.wait_ms = -1};
  if (stopping || now_ns() >= end_ns) {
    w->idle = 1;
    return;
  }
  attempts++;
  if (redlock_lock_acquire(w->l, TTL_MS, &once, on_acquired, w) != 0)
    TEST_FAIL("acquire: %s", redlock_last_error());
}

static void worker_next(worker *w, uint64_t ms) {
  uv_timer_start(&w->timer, on_want, ms, 0);
}

/* ---- faults (test-slow-safety.c's, with the AOF masters' crash) --------- */

static void on_heal(uv_timer_t *t) {
  int i = (int)(t - heal_timers);
  switch (faulty[i]) {
    case 1:
      harness_resume(&srv[i]);
      break;
    case 2:
      /* Back empty: out of the quorum for a ttl (the restart guard), so
       * it still counts as faulty. */
      harness_restart(&srv[i]);
      faulty[i] = 6;
      uv_timer_start(t, on_heal, TTL_MS, 0);
      return;
    case 3:
      harness_restart(&srv[i]);
      break;
    case 4:
      harness_proxy_cmd(&px, i, "normal");
      break;
    case 5:
      /* Back in step (a step too: out for another ttl). */
      harness_clock_step(&srv[i], -step_ms[i]);
      faulty[i] = 7;
      uv_timer_start(t, on_heal, TTL_MS, 0);
      return;
    case 6:
    case 7:
      break;   /* a ttl has passed since its restart or step back */
  }
  faulty[i] = 0;
}

/* A master for a fault of `kind` (not faulty; a lossy crash only on the
 * masters without persistence, an AOF crash only on the others), or -1. */
static int pick_master(int kind) {
  int cand[N];
  int n = 0, i;
  for (i = 0; i < N; i++) {
    int aof = i >= N - N_AOF;
    if (faulty[i] != 0 || (kind == 2 && aof) || (kind == 3 && !aof))
      continue;
    cand[n++] = i;
  }
  return n == 0 ? -1 : cand[rnd((uint32_t)n)];
}

static void on_fault(uv_timer_t *t);

/* The aimed cycle's start: two masters hang; grants now rest on the other
 * three. No grant on exactly those within 3 s: given up. */
static void aim_giveup(uv_timer_t *t) {
  int i;
  (void)t;
  for (i = 0; i < 2; i++) {
    harness_resume(&srv[aim_hung[i]]);
    faulty[aim_hung[i]] = 0;
  }
  aim_phase = 0;
  if (!stopping)
    uv_timer_start(&fault_timer, on_fault, 400 + rnd(600), 0);
}

static void aim_start(void) {
  int i;
  aim_hung[0] = (int)rnd(N);
  do
    aim_hung[1] = (int)rnd(N);
  while (aim_hung[1] == aim_hung[0]);
  for (i = 0; i < 2; i++) {
    harness_pause(&srv[aim_hung[i]]);
    faulty[aim_hung[i]] = 1;
    n_faults[1]++;
  }
  aim_phase = 1;
  uv_timer_start(&fault_timer, aim_giveup, 3000, 0);
}

/* A step forward of master i by 1.5-3 ttl, undone a ttl later. */
static void step_clock(int i) {
  step_ms[i] = TTL_MS * 3 / 2 + rnd(TTL_MS * 3 / 2);
  harness_clock_step(&srv[i], step_ms[i]);
  faulty[i] = 5;
  uv_timer_start(&heal_timers[i], on_heal, TTL_MS, 0);
}

/* The cut, while a grant on a bare quorum is held: the hung two resume
 * (free of that grant: their connections reset) and one of the three
 * loses it: a master without persistence crashes and comes back empty at
 * once (the restart guard's case) or its clock steps forward (the clock
 * check's: one time in two, and always on the declared AOF masters, which
 * would keep it). Counting its vote then would give that permit a second
 * holder. */
static void aim_cut(uv_timer_t *t) {
  int i = aim_target;
  (void)t;
  aim_phase = 0;
  /* The hung two's connections are reset first (a partition that loses
   * what was in flight): else they would run the holder's queued SET on
   * resuming, and hold the permit for it. */
  harness_proxy_cmd(&px, aim_hung[0], "reset");
  harness_proxy_cmd(&px, aim_hung[1], "reset");
  harness_proxy_cmd(&px, aim_hung[0], "normal");
  harness_proxy_cmd(&px, aim_hung[1], "normal");
  harness_resume(&srv[aim_hung[0]]);
  harness_resume(&srv[aim_hung[1]]);
  faulty[aim_hung[0]] = faulty[aim_hung[1]] = 0;
  if (i < N - N_AOF && rnd(2) == 0) {
    harness_kill(&srv[i]);
    harness_restart(&srv[i]);
    faulty[i] = 6;
    n_faults[6]++;
    uv_timer_start(&heal_timers[i], on_heal, TTL_MS, 0);
  } else {
    step_clock(i);
    n_faults[5]++;
  }
  aim_cycles++;
  uv_timer_start(&fault_timer, on_fault, 400 + rnd(600), 0);
}

static void on_fault(uv_timer_t *t) {
  int n_faulty = 0;
  int i, kind;
  (void)t;
  if (stopping)
    return;
  for (i = 0; i < N; i++)
    n_faulty += faulty[i] != 0;
  if (n_faulty == 0 && rnd(2) == 0) {
    aim_start();
    return;
  }
  if (n_faulty < 2) {
    kind = 1 + (int)rnd(5);
    i = pick_master(kind);
    if (i < 0) {
      kind = 1;   /* both masters of that kind are faulty already */
      i = pick_master(kind);
    }
    ASSERT_GE(i, 0);
    faulty[i] = kind;
    n_faults[kind]++;
    switch (kind) {
      case 1:
        harness_pause(&srv[i]);
        uv_timer_start(&heal_timers[i], on_heal, 300 + rnd(1200), 0);
        break;
      case 2:
      case 3:
        harness_kill(&srv[i]);
        uv_timer_start(&heal_timers[i], on_heal, 200 + rnd(600), 0);
        break;
      case 4:
        harness_proxy_cmd(&px, i, "latency 200");
        uv_timer_start(&heal_timers[i], on_heal, 1000, 0);
        break;
      case 5:
        step_clock(i);
        break;
    }
  }
  uv_timer_start(&fault_timer, on_fault, 400 + rnd(600), 0);
}

/* Ends the faults: every master back (resumed, restarted, normal). */
static void heal_all(void) {
  int i;
  uv_timer_stop(&fault_timer);
  if (aim_phase != 0)
    aim_giveup(NULL);   /* resumes the hung two */
  for (i = 0; i < N; i++) {
    if (uv_is_active((uv_handle_t *)&heal_timers[i])) {
      uv_timer_stop(&heal_timers[i]);
      on_heal(&heal_timers[i]);
    }
  }
}

static int all_idle(void) {
  int i;
  for (i = 0; i < n_workers; i++)
    if (!workers[i].idle)
      return 0;
  return 1;
}

/* One K: 3K + 2 workers for `seconds` under the faults. */
static void run_sem(unsigned k, int seconds) {
  redlock_client_config cfg;
  sweep_result r;
  unsigned long faults_before[7];
  unsigned long aims_before = aim_cycles;
  int i;
  limit = k;
  n_workers = (int)(3 * k + 2);
  n_grants = 0;
  attempts = refusals = 0;
  stopping = 0;
  memcpy(faults_before, n_faults, sizeof(n_faults));
  snprintf(name, sizeof(name), "semsafety-%u", k);
  /* As test-slow-safety's clients: the default restart guard (the ttl
   * record) and clock check, the default 50 ms command timeout. */
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = client_addrs;
  cfg.n_servers = N;
  cfg.connect_timeout_ms = 200;
  cfg.reconnect_min_ms = 10;
  cfg.reconnect_max_ms = 200;
  for (i = 0; i < n_workers; i++) {
    worker *w = &workers[i];
    memset(w, 0, sizeof(*w));
    w->id = i;
    ASSERT_EQ(redlock_client_new(&loop, &cfg, &w->c), 0);
    ASSERT_EQ(redlock_semaphore_new(w->c, name, strlen(name), k, &w->l), 0);
    ASSERT_EQ(uv_timer_init(&loop, &w->timer), 0);
    w->timer.data = w;
    worker_next(w, 1);
  }
  start_ns = now_ns();
  end_ns = start_ns + (uint64_t)seconds * 1000000000ULL;
  uv_timer_start(&fault_timer, on_fault, 1000, 0);
  while (now_ns() < end_ns)
    uv_run(&loop, UV_RUN_ONCE);
  stopping = 1;
  heal_all();
  /* The last holds (at most a ttl) end and are released (bounded). */
  {
    uint64_t bound = harness_now_ms() + (uint64_t)harness_bound_ms(10000);
    while (!all_idle()) {
      if (harness_now_ms() > bound)
        TEST_FAIL("K=%u: workers still busy 10 s after the end", k);
      tu_run_for(&loop, 10);
    }
  }
  for (i = 0; i < n_workers; i++) {
    ASSERT_EQ(redlock_lock_free(workers[i].l), 0);
    uv_close((uv_handle_t *)&workers[i].timer, NULL);
    tu_close_client(&loop, workers[i].c);
  }
  fprintf(stderr, "K=%u: windows beyond K, if any:\n", k);
  r = sweep((int)k, 1);
  printf("semaphore K=%u: %d s, %d workers, N=%d: grants %d (%.1f/s), "
         "attempts %lu, refusals %lu, at most %d holders at once, %lu "
         "episodes beyond K; faults: %lu hangs, %lu lossy crash-restarts, "
         "%lu AOF crash-restarts, %lu slow, %lu clock steps; %lu aimed "
         "cuts of a bare quorum (%lu crash-restarts, the rest steps)\n",
         k, seconds, n_workers, N, n_grants, (double)n_grants / seconds,
         attempts, refusals, r.most, r.episodes,
         n_faults[1] - faults_before[1], n_faults[2] - faults_before[2],
         n_faults[3] - faults_before[3], n_faults[4] - faults_before[4],
         n_faults[5] - faults_before[5], aim_cycles - aims_before,
         n_faults[6] - faults_before[6]);
  for (i = 0; i < 32; i++)
    if (by_status[i])
      printf("  refused %lu times: %s\n", by_status[i], redlock_strerror(-i));
  memset(by_status, 0, sizeof(by_status));
  fflush(stdout);
  ASSERT_LE(r.most, (int)k);        /* safety: at most K */
  ASSERT_EQ(r.most, (int)k);        /* the permits are used */
  ASSERT_GE(n_grants, MIN_GRANTS);  /* it did run */
  /* The faults did happen (a fault every 0.4-1 s while fewer than two). */
  ASSERT_GE(n_faults[1] + n_faults[2] + n_faults[3] + n_faults[4] +
                n_faults[5] - faults_before[1] - faults_before[2] -
                faults_before[3] - faults_before[4] - faults_before[5],
            (unsigned long)seconds / 3);
}

/* ---- the positive control: the naive design ----------------------------- */

/* The naive per-master admission (test-redis-semaphore-naive's): 1
 * admitted (or already in), 0 full. */
static const char naive_script[] =
    "if redis.call('sismember', KEYS[1], ARGV[1]) == 1 then return 1 end "
    "if redis.call('scard', KEYS[1]) < tonumber(ARGV[2]) then "
    "redis.call('sadd', KEYS[1], ARGV[1]) return 1 end return 0";

typedef struct naive {
  int id;
  redisAsyncContext *ac[N];
  uv_timer_t timer;        /* the next attempt, the hold */
  uv_timer_t deadline;     /* the attempt's replies */
  uv_timer_t send[N];      /* each master's request, delayed */
  unsigned gen;            /* the attempt (late replies are ignored) */
  char member[32];
  int replies, yes;
  int deciding;            /* an attempt is out */
  uint64_t start_ns, valid_ns;
  int gi;
  int idle;
} naive;

typedef struct naive_req {
  naive *w;
  unsigned gen;
} naive_req;

static naive nw[NAIVE_WORKERS];
static int naive_holders;
static uint64_t naive_first_excess_ns;
static unsigned long naive_attempts;
static int naive_closed;

static void naive_next(naive *w, uint64_t ms);

/* Gives the member up on every master (a failed attempt, a release). */
static void naive_release(naive *w) {
  int i;
  for (i = 0; i < N; i++)
    if (redisAsyncCommand(w->ac[i], NULL, NULL, "SREM naive %s",
                          w->member) != REDIS_OK)
      TEST_FAIL("naive: SREM on master %d", i + 1);
}

static void naive_hold_done(uv_timer_t *t) {
  naive *w = t->data;
  uint64_t now = now_ns();
  grants[w->gi].to = now < w->valid_ns ? now : w->valid_ns;
  naive_holders--;
  naive_release(w);
  naive_next(w, rnd(5));
}

static void naive_decide(naive *w) {
  uint64_t now = now_ns();
  int64_t drift_ms = TTL_MS / 100 + 2;
  int64_t valid_ms = TTL_MS - (int64_t)((now - w->start_ns) / 1000000ULL) -
                     drift_ms;
  int i;
  w->deciding = 0;
  w->gen++;
  uv_timer_stop(&w->deadline);
  for (i = 0; i < N; i++)
    uv_timer_stop(&w->send[i]);
  if (w->yes >= N / 2 + 1 && valid_ms > 0) {
    w->valid_ns = now + (uint64_t)valid_ms * 1000000ULL;
    w->gi = log_grant(now, w->valid_ns, 100 + w->id, -1);
    naive_holders++;
    if (naive_holders > NAIVE_K && naive_first_excess_ns == 0)
      naive_first_excess_ns = now;
    uv_timer_start(&w->timer, naive_hold_done, 2 + rnd(19), 0);
    return;
  }
  naive_release(w);
  naive_next(w, 1 + rnd(5));
}

static void naive_on_reply(redisAsyncContext *ac, void *reply, void *priv) {
  naive_req *q = priv;
  naive *w = q->w;
  redisReply *r = reply;
  (void)ac;
  if (q->gen == w->gen && w->deciding) {
    w->replies++;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
      w->yes++;
    if (w->replies == N)
      naive_decide(w);
  }
  free(q);
}

static void naive_send(uv_timer_t *t) {
  naive *w = t->data;
  int i = (int)(t - w->send);
  char k[8];
  naive_req *q = malloc(sizeof(*q));
  ASSERT_NOT_NULL(q);
  q->w = w;
  q->gen = w->gen;
  snprintf(k, sizeof(k), "%d", NAIVE_K);
  if (redisAsyncCommand(w->ac[i], naive_on_reply, q, "EVAL %s 1 naive %s %s",
                        naive_script, w->member, k) != REDIS_OK)
    TEST_FAIL("naive: EVAL on master %d", i + 1);
}

static void naive_timeout(uv_timer_t *t) {
  naive *w = t->data;
  naive_decide(w);   /* the missing replies are no votes */
}

static void naive_want(uv_timer_t *t) {
  naive *w = t->data;
  int i;
  if (stopping) {
    w->idle = 1;
    return;
  }
  naive_attempts++;
  snprintf(w->member, sizeof(w->member), "w%d:%u", w->id, w->gen);
  w->replies = w->yes = 0;
  w->deciding = 1;
  w->start_ns = now_ns();
  uv_timer_start(&w->deadline, naive_timeout, 50, 0);
  for (i = 0; i < N; i++)
    uv_timer_start(&w->send[i], naive_send, rnd(3), 0);
}

static void naive_next(naive *w, uint64_t ms) {
  w->timer.data = w;
  uv_timer_start(&w->timer, naive_want, ms, 0);
}

static void naive_on_disconnect(const redisAsyncContext *ac, int status) {
  (void)ac;
  (void)status;
  naive_closed++;
}

/* The control: K = 2 on the naive design, no faults. Returns the sweep. */
static sweep_result run_naive(void) {
  uint64_t min_end, max_end;
  sweep_result r;
  int i, j;
  n_grants = 0;
  stopping = 0;
  naive_closed = 0;
  for (j = 0; j < N; j++) {
    char ok[64];
    ASSERT_EQ(harness_cmdf(&srv[j], ok, sizeof(ok), "DEL naive"), 0);
  }
  for (i = 0; i < NAIVE_WORKERS; i++) {
    naive *w = &nw[i];
    memset(w, 0, sizeof(*w));
    w->id = i;
    for (j = 0; j < N; j++) {
      w->ac[j] = redisAsyncConnect("127.0.0.1", srv[j].port);
      ASSERT_NOT_NULL(w->ac[j]);
      ASSERT_EQ(w->ac[j]->err, 0);
      ASSERT_EQ(redisLibuvAttach(w->ac[j], &loop), REDIS_OK);
      ASSERT_EQ(redisAsyncSetDisconnectCallback(w->ac[j],
                                                naive_on_disconnect),
                REDIS_OK);
      uv_timer_init(&loop, &w->send[j]);
      w->send[j].data = w;
    }
    uv_timer_init(&loop, &w->timer);
    uv_timer_init(&loop, &w->deadline);
    w->timer.data = w;
    w->deadline.data = w;
    naive_next(w, 1 + rnd(5));
  }
  start_ns = now_ns();
  min_end = start_ns + 2000000000ULL;
  max_end = start_ns + 20000000000ULL;
  for (;;) {
    uint64_t now = now_ns();
    if (now >= max_end || (now >= min_end && naive_first_excess_ns != 0))
      break;
    uv_run(&loop, UV_RUN_ONCE);
  }
  stopping = 1;
  {
    uint64_t bound = harness_now_ms() + (uint64_t)harness_bound_ms(10000);
    int busy = 1;
    while (busy) {
      busy = 0;
      for (i = 0; i < NAIVE_WORKERS; i++)
        busy += !nw[i].idle;
      if (busy && harness_now_ms() > bound)
        TEST_FAIL("naive: workers still busy 10 s after the end");
      if (busy)
        tu_run_for(&loop, 10);
    }
  }
  for (i = 0; i < NAIVE_WORKERS; i++) {
    for (j = 0; j < N; j++) {
      redisAsyncDisconnect(nw[i].ac[j]);
      uv_close((uv_handle_t *)&nw[i].send[j], NULL);
    }
    uv_close((uv_handle_t *)&nw[i].timer, NULL);
    uv_close((uv_handle_t *)&nw[i].deadline, NULL);
  }
  {
    uint64_t bound = harness_now_ms() + (uint64_t)harness_bound_ms(10000);
    while (naive_closed < NAIVE_WORKERS * N) {
      if (harness_now_ms() > bound)
        TEST_FAIL("naive: %d of %d connections closed", naive_closed,
                  NAIVE_WORKERS * N);
      tu_run_for(&loop, 10);
    }
  }
  fprintf(stderr, "naive K=%d: the first windows beyond K:\n", NAIVE_K);
  r = sweep(NAIVE_K, 1);
  printf("naive control K=%d: %d workers, no faults, %.1f s: grants %d, "
         "attempts %lu, at most %d holders at once, %lu episodes beyond K, "
         "%.2f%% of the time beyond K, the first after %.3f s\n",
         NAIVE_K, NAIVE_WORKERS, (double)(now_ns() - start_ns) / 1e9,
         n_grants, naive_attempts, r.most, r.episodes,
         r.span_ns ? 100.0 * (double)r.over_ns / (double)r.span_ns : 0.0,
         naive_first_excess_ns
             ? (double)(naive_first_excess_ns - start_ns) / 1e9
             : -1.0);
  fflush(stdout);
  return r;
}

int main(void) {
  const char *env = getenv("REDLOCK_SEM_SAFETY_SECONDS");
  const char *proxy_exe = getenv("REDLOCK_FAULTPROXY");
  int seconds = env != NULL ? atoi(env) : SECONDS;
  static char durable_addrs[N_AOF][64];
  sweep_result control;
  uint64_t t0 = harness_now_ms();
  unsigned k;
  int i;

  if (proxy_exe == NULL)
    TEST_FAIL("REDLOCK_FAULTPROXY not set");
  if (seconds < 1 || seconds > 3600)
    seconds = SECONDS;
  grants = calloc(MAX_GRANTS, sizeof(*grants));
  ASSERT_NOT_NULL(grants);
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++) {
    harness_clock_prepare(&srv[i]);
    srv[i].appendonly = i >= N - N_AOF;
  }
  harness_start(srv, N);
  harness_proxy_start(&px, proxy_exe, srv, N);
  harness_proxy_addrs(&px, client_addrs);
  for (i = N - N_AOF; i < N; i++) {
    snprintf(durable_addrs[i - (N - N_AOF)], sizeof(durable_addrs[0]),
             "redis://%s?durable=1", client_addrs[i]);
    client_addrs[i] = durable_addrs[i - (N - N_AOF)];
  }
  prng ^= uv_hrtime();
  fprintf(stderr, "semaphore safety: seed %llu\n", (unsigned long long)prng);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  for (i = 0; i < N; i++)
    uv_timer_init(&loop, &heal_timers[i]);
  uv_timer_init(&loop, &fault_timer);

  for (k = 1; k <= 3; k++)
    run_sem(k, seconds);

  /* The control: the checker must see the naive design's excess. */
  /* The aimed cuts did happen (1-3 per K in a plain build). */
  ASSERT_GE(aim_cycles, 2);
  control = run_naive();
  if (control.most <= NAIVE_K)
    TEST_FAIL("the naive design never showed more than %d holders: the "
              "sweep is blind", NAIVE_K);

  for (i = 0; i < N; i++)
    uv_close((uv_handle_t *)&heal_timers[i], NULL);
  uv_close((uv_handle_t *)&fault_timer, NULL);
  harness_loop_close(&loop, 10000);
  printf("semaphore safety: %.1f s in all\n",
         (double)(harness_now_ms() - t0) / 1000.0);
  free(grants);
  harness_stop_all();
  return 0;
}
