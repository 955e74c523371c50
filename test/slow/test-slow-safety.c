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
 * clock check must. (The durable schedule below holds locks to the end of
 * their validity, 700-1000 ms.)
 *
 * With the argument "durable" (issue 29: the first sight of a clock, a
 * broken durability declaration) the masters run appendonly yes +
 * appendfsync always under the clock shim, the clients declare them
 * durable, and the deployment's ttl record says 100 s (some client once
 * used it: a drift allowance of 1.002 s, against the locks' 12 ms):
 *   - aimed (the first 40% of the run), as above: two masters hang, and
 *     once a client is granted with exactly the other three YES, one of
 *     those three restarts with its clock 0.95-1.15 s ahead (it reloads
 *     the holder's key, expired by its clock); the hung masters resume.
 *     Counting it at its first sight gives a second grant (the old
 *     code's: an overlap in 1 of 2 runs); a later event restarts it in
 *     step;
 *   - a restart of a master in step (durable: it counts at once);
 *   - durability switched off (CONFIG SET appendonly no) on one master
 *     (after 40%), which restarts once a client saw it (its mark is on
 *     another master: a break nobody saw is outside the promise) lacking
 *     what it acknowledged since; and, three quarters into the run, on
 *     three (a majority: no quorum is possible after that);
 *   - every 1-2 s a client is replaced by a new one (a CLI call meets
 *     every instance for the first time).
 * Locks are held to the end of their validity. Availability is low by
 * design: every master is younger than the 100 s window, so a new client
 * counts a declared master only once every other master answered its
 * read of the marks (none may hang).
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
#include <stdarg.h>
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
  int rejoin;          /* replace the client at the next want */
  int rejoining;       /* its old client is closing */
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

/* What happened, on the validity clock (now_ns), printed when an overlap
 * is found: each grant with its YES votes, each fault. A run is one
 * schedule of many in real time: its log is what there is to replay. */
#define EV_MAX 8192
static struct {
  uint64_t t;
  char what[72];
} ev_log[EV_MAX];
static int n_ev;
static uint64_t now_ns(void);
static void ev_note(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void ev_note(const char *fmt, ...) {
  va_list ap;
  if (n_ev == EV_MAX)
    return;
  ev_log[n_ev].t = now_ns();
  va_start(ap, fmt);
  vsnprintf(ev_log[n_ev].what, sizeof(ev_log[n_ev].what), fmt, ap);
  va_end(ap);
  n_ev++;
}
/* The faults, logged where they are made (a macro of the same name calls
 * the function: no recursion in a macro's expansion). */
#define harness_pause(s) (ev_note("master %d hangs", (int)((s) - srv) + 1), \
                          harness_pause(s))
#define harness_resume(s) \
  (ev_note("master %d resumes", (int)((s) - srv) + 1), harness_resume(s))
#define harness_kill(s) \
  (ev_note("master %d killed", (int)((s) - srv) + 1), harness_kill(s))
#define harness_restart(s) \
  (ev_note("master %d restarts", (int)((s) - srv) + 1), harness_restart(s))
#define harness_clock_step(s, d)                                         \
  (ev_note("master %d clock %+lld ms", (int)((s) - srv) + 1,             \
           (long long)(d)), harness_clock_step(s, d))
static uint64_t prng = 0x9e3779b97f4a7c15ULL;
static int faulty[N];          /* 0 ok, 1 paused, 2 down, 3 slow, 4 guard,
                                  5 clock stepped (for a ttl) */
static uv_timer_t fault_timer;
static uv_timer_t heal_timers[N];
static unsigned long n_faults[9];   /* 6 restarts ahead, 7 durability off,
                                       8 restarts in step */
static int clock_schedule;     /* 1: clock steps, 2: with AOF */
static int guard_schedule;
static int durable_schedule;
static int64_t offset_ms[N];      /* durable: each master's clock offset */
static int majority_done;
static uv_timer_t rejoin_timer;
static int open_clients = CLIENTS;
static unsigned long rejoins;
static redlock_client_config worker_cfg;
static uint64_t break_ns[N];      /* when its durability went off */
static const char *proxy_addrs[N];
static uint64_t start_ns;
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
static void durable_cut(uv_timer_t *t);
static void on_rejoin_closed(redlock_client_t *c, void *arg);

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
  ev_note("client %d lets go", w->id);
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
  {
    char votes[N + 1];
    int i;
    for (i = 0; i < N && i < (int)r->n_nodes; i++)
      votes[i] = r->nodes[i].vote == REDLOCK_VOTE_YES ? 'Y' : '.';
    votes[i] = '\0';
    ev_note("client %d granted until +%lld ms (yes: %s)", w->id,
            (long long)redlock_lock_validity_ms(l), votes);
  }
  grants[w->gi].from = now;
  grants[w->gi].to = w->deadline_ns;
  grants[w->gi].client = w->id;
  holders++;
  if ((guard_schedule || clock_schedule || durable_schedule) &&
      guard_phase == 1 && r->yes == 3) {
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
    else if (durable_schedule)
      uv_timer_start(&fault_timer, durable_cut, 0, 0);
    else
      uv_timer_start(&fault_timer, guard_crash,
                     ms < at ? at - ms : 1000 - ms + at, 0);
  }
  /* The guard and clock schedules hold longer, so that locks span the
   * faults. */
  uv_timer_start(&w->timer, on_hold_done,
                 durable_schedule ? 700 + rnd(300)   /* to its end */
                 : guard_schedule || clock_schedule ? 300 + rnd(400)
                                                    : 5 + rnd(45), 0);
}

static void on_want(uv_timer_t *t) {
  worker *w = t->data;
  redlock_acquire_opts once = {.wait_ms = -1};
  if (stopping || now_ns() >= end_ns)
    return;
  if (w->rejoin) {
    /* A new client in its place (durable schedule). */
    w->rejoin = 0;
    w->rejoining = 1;
    ASSERT_EQ(redlock_lock_free(w->l), 0);
    w->l = NULL;
    redlock_client_close(w->c, on_rejoin_closed, w);
    return;
  }
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

static void on_rejoin_closed(redlock_client_t *c, void *arg) {
  worker *w = arg;
  (void)c;
  w->rejoining = 0;
  w->c = NULL;
  if (stopping) {
    open_clients--;
    return;
  }
  rejoins++;
  ASSERT_EQ(redlock_client_new(&loop, &worker_cfg, &w->c), 0);
  ASSERT_EQ(redlock_lock_new(w->c, "safety", 6, &w->l), 0);
  worker_next(w, 1);
}

static void on_rejoin(uv_timer_t *t) {
  worker *w = &workers[rnd(CLIENTS)];
  if (stopping)
    return;
  if (!w->rejoining) {
    w->rejoin = 1;
    ev_note("client %d: a new client in its place", w->id);
  }
  uv_timer_start(t, on_rejoin, 1000 + rnd(1000), 0);
}

/* ---- faults ------------------------------------------------------------- */

/* A client saw master i's durability off: its mark is on another. */
static int break_seen(int i) {
  char buf[256];
  int j;
  for (j = 0; j < N; j++)
    if (j != i && harness_cmdf(&srv[j], buf, sizeof(buf),
                               "HEXISTS __redlock__:broke %s",
                               proxy_addrs[i]) == 0 &&
        strcmp(buf, "1") == 0)
      return 1;
  return 0;
}

static void on_heal(uv_timer_t *t) {
  int i = (int)(t - heal_timers);
  switch (faulty[i]) {
    case 7:
      /* Durability is off. Once a client saw it (its mark is on another
       * master: the promise covers breaks that a client saw), the master
       * restarts (AOF on again, from the startup flags) and loads what
       * the file had. Still out: marked. */
      if (!break_seen(i)) {
        if (now_ns() - break_ns[i] > (uint64_t)harness_bound_ms(15000) *
                                         1000000ULL)
          TEST_FAIL("no client saw master %d's durability off", i + 1);
        uv_timer_start(t, on_heal, 100, 0);
        return;
      }
      harness_kill(&srv[i]);
      harness_restart(&srv[i]);
      return;
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

/* ---- the durable schedule (issue 29) --------------------------------------- */

static void on_durable_fault(uv_timer_t *t);

/* Master i restarts with its clock `delta` ms further (0: as it was). */
static void restart_stepped(int i, int64_t delta) {
  harness_kill(&srv[i]);
  if (delta != 0) {
    harness_clock_step(&srv[i], delta);
    offset_ms[i] += delta;
  }
  harness_restart(&srv[i]);
}

static void durable_giveup(uv_timer_t *t) {
  int i;
  (void)t;
  for (i = 0; i < 2; i++) {
    harness_resume(&srv[guard_hung[i]]);
    faulty[guard_hung[i]] = 0;
  }
  guard_phase = 0;
  if (!stopping)
    uv_timer_start(&fault_timer, on_durable_fault, 500 + rnd(1000), 0);
}

/* The aimed cycle's cut: a master of the bare quorum restarts ahead while
 * the lock is held (its first sight is off the others' by about a second,
 * within the 100 s record's allowance, far beyond the lock's); the hung
 * masters resume. */
static void durable_cut(uv_timer_t *t) {
  int i;
  (void)t;
  if (stopping)
    return;
  faulty[guard_target] = 6;
  n_faults[6]++;
  restart_stepped(guard_target, 950 + rnd(200));
  for (i = 0; i < 2; i++) {
    harness_resume(&srv[guard_hung[i]]);
    faulty[guard_hung[i]] = 0;
  }
  n_faults[4]++;
  guard_cycles++;
  guard_phase = 0;
  uv_timer_start(&fault_timer, on_durable_fault, 500 + rnd(1000), 0);
}

/* Durability off on master i, and a restart a little later (its AOF
 * lacks what it acknowledged since). Out for the rest of the run (the
 * mark guards it for the 100 s window). */
static void durability_off(int i) {
  char ok[64];
  faulty[i] = 7;
  n_faults[7]++;
  break_ns[i] = now_ns();
  ev_note("master %d: CONFIG SET appendonly no", i + 1);
  if (harness_cmdf(&srv[i], ok, sizeof(ok), "CONFIG SET appendonly no") != 0)
    TEST_FAIL("CONFIG SET appendonly no on master %d", i + 1);
  uv_timer_start(&heal_timers[i], on_heal, 300 + rnd(500), 0);
}

/* How far into the run, in percent. */
static int run_pct(void) {
  return (int)((now_ns() - start_ns) * 100 / (end_ns - start_ns));
}

static void on_durable_fault(uv_timer_t *t) {
  int n_faulty = 0, n_broken = 0;
  int i, k;
  (void)t;
  if (stopping)
    return;
  for (i = 0; i < N; i++) {
    n_faulty += faulty[i] != 0;
    n_broken += faulty[i] == 7;
  }
  /* Aimed cycles in the first 40% (they need every master but the hung
   * two and the target), one master's durability off after that. */
  k = (int)rnd(4);
  if (run_pct() < 40 && rnd(2) == 0)
    k = 0;
  if (run_pct() >= 40 && n_broken == 0)
    k = 1;
  if (k == 0 && n_faulty == 0 && run_pct() < 40) {
    guard_start(NULL);
    uv_timer_start(&fault_timer, durable_giveup, 3000, 0);
    return;
  }
  for (i = 0; i < N; i++) {
    if (faulty[i] == 6 && rnd(2) == 0) {
      /* In step again: a new instance, durable, counts at once. */
      restart_stepped(i, -offset_ms[i]);
      faulty[i] = 0;
      n_faults[8]++;
      break;
    }
  }
  if (i == N && k == 1 && n_broken == 0 && n_faulty < 2 &&
      run_pct() >= 40) {
    do
      i = (int)rnd(N);
    while (faulty[i] != 0);
    durability_off(i);
  } else if (i == N && k >= 2 && n_faulty < 2) {
    do
      i = (int)rnd(N);
    while (faulty[i] != 0);
    restart_stepped(i, 0);
    n_faults[8]++;
  }
  uv_timer_start(&fault_timer, on_durable_fault, 600 + rnd(900), 0);
}

/* Three quarters into the run: durability off on three masters (a
 * majority; hung ones resume first), each restarting a little later. No
 * quorum is possible afterwards: none may be granted against a holder
 * whose lock they lost. */
static void on_majority(uv_timer_t *t) {
  int i, k = 0;
  (void)t;
  if (stopping)
    return;
  uv_timer_stop(&fault_timer);
  majority_done = 1;
  for (i = 0; i < N; i++) {
    if (faulty[i] == 1) {
      harness_resume(&srv[i]);
      faulty[i] = 0;
    }
  }
  guard_phase = 0;
  for (i = 0; i < N && k < 3; i++) {
    if (faulty[i] == 7)
      continue;   /* its earlier restart may still be pending */
    uv_timer_stop(&heal_timers[i]);
    durability_off(i);
    k++;
  }
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
    if ((guard_schedule || clock_schedule || durable_schedule) &&
        faulty[i] == 1)
      harness_resume(&srv[i]);
  uv_timer_stop(&rejoin_timer);
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
  (void)arg;
  open_clients--;
}

int main(int argc, char **argv) {
  const char *addrs[N];
  const char *env = getenv("REDLOCK_SAFETY_SECONDS");
  const char *proxy_exe = getenv("REDLOCK_FAULTPROXY");
  int seconds = env != NULL ? atoi(env) : 60;
  uv_timer_t stop_timer;
  unsigned long overlaps = 0;
  uv_timer_t majority_timer;
  static char tls_addrs[N][64];
  int tls;
  int i;

  if (proxy_exe == NULL)
    TEST_FAIL("REDLOCK_FAULTPROXY not set");
  guard_schedule = argc > 1 && strcmp(argv[1], "guard") == 0;
  durable_schedule = argc > 1 && strcmp(argv[1], "durable") == 0;
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
  for (i = 0; i < N && (clock_schedule || durable_schedule); i++) {
    harness_clock_prepare(&srv[i]);
    srv[i].appendonly = clock_schedule == 2 || durable_schedule;
  }
  harness_start(srv, N);
  for (i = 0; i < N && durable_schedule; i++) {
    /* Some client of the deployment once used a 100 s ttl. */
    char ok[64];
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "SET __redlock__:maxttl 100000"), 0);
  }
  harness_proxy_start(&px, proxy_exe, srv, N);
  harness_proxy_addrs(&px, addrs);
  for (i = 0; i < N; i++)
    proxy_addrs[i] = addrs[i];
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
    cfg.durable = clock_schedule == 2 || durable_schedule;
    worker_cfg = cfg;
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
  uv_timer_start(&fault_timer, guard_schedule     ? guard_start
                              : clock_schedule   ? on_clock_fault
                              : durable_schedule ? on_durable_fault
                                                 : on_fault,
                 1500, 0);
  uv_timer_init(&loop, &rejoin_timer);
  uv_timer_init(&loop, &majority_timer);
  if (durable_schedule) {
    uv_timer_start(&rejoin_timer, on_rejoin, 1000, 0);
    uv_timer_start(&majority_timer, on_majority,
                   (uint64_t)seconds * 750, 0);
  }
  uv_timer_init(&loop, &stop_timer);
  uv_timer_start(&stop_timer, on_stop, (uint64_t)seconds * 1000, 0);
  start_ns = now_ns();
  end_ns = start_ns + (uint64_t)seconds * 1000000000ULL;

  while (!stopping)
    uv_run(&loop, UV_RUN_ONCE);
  /* Let the last holds and releases finish (bounded), then close. */
  tu_run_for(&loop, 200);
  for (i = 0; i < CLIENTS; i++) {
    uv_close((uv_handle_t *)&workers[i].timer, NULL);
    if (workers[i].rejoining)
      continue;   /* on_rejoin_closed counts it */
    redlock_client_close(workers[i].c, on_closed, NULL);
  }
  uv_close((uv_handle_t *)&rejoin_timer, NULL);
  uv_close((uv_handle_t *)&majority_timer, NULL);
  for (i = 0; i < N; i++)
    uv_close((uv_handle_t *)&heal_timers[i], NULL);
  uv_close((uv_handle_t *)&fault_timer, NULL);
  harness_loop_close(&loop, 10000);
  ASSERT_EQ(open_clients, 0);

  overlaps = tu_overlaps(grants, n_grants);
  if (overlaps > 0) {
    fprintf(stderr, "what happened (ns on the validity clock):\n");
    for (i = 0; i < n_ev; i++)
      fprintf(stderr, "  %llu %s\n", (unsigned long long)ev_log[i].t,
              ev_log[i].what);
  }
  printf("safety%s%s: %d s, %d clients, N=%d: grants %d, overlaps %lu, "
         "attempts %lu, availability %.1f%% (%lu of %lu attempts on a free "
         "lock), %.1f acquisitions/s; faults: %lu hangs, %lu crash-restarts,"
         " %lu slow, %lu %s, %lu clock steps\n",
         guard_schedule     ? " (guard schedule)"
         : clock_schedule   ? (clock_schedule == 2 ? " (clock steps, AOF)"
                                                   : " (clock steps)")
         : durable_schedule ? " (durable schedule)"
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
  if (durable_schedule)
    printf("durable schedule: %lu restarts ahead of a bare quorum's master, "
           "%lu restarts in step, %lu durability switched off (a majority "
           "%s), %lu new clients\n", n_faults[6], n_faults[8], n_faults[7],
           majority_done ? "included" : "not reached", rejoins);
  fflush(stdout);
  ASSERT_EQ(overlaps, 0);
  /* It did keep working (the guard schedule holds longer). */
  ASSERT_GT(n_grants, durable_schedule                   ? 5
                      : guard_schedule || clock_schedule ? seconds
                                                         : seconds * 10);
  if (durable_schedule) {
    /* It ran: aimed restarts, breaks, the majority's, new clients. */
    ASSERT_GE(n_faults[6], 1);
    ASSERT_GE(n_faults[7], 3);
    ASSERT_EQ(majority_done, 1);
    ASSERT_GT(rejoins, (unsigned long)seconds / 4);
  }
  if (clock_schedule) {
    ASSERT_GT(n_faults[5], (unsigned long)seconds / 2);   /* it ran */
    /* Steps aimed at a bare quorum's master need a grant on a bare
     * quorum: since a young instance off the others' clocks by more than
     * the lock's allowance stays out for the window (issue 29, item 1),
     * such grants are rarer (3 in 45 s in a CI run, 7-9 before). */
    ASSERT_GT(guard_cycles, (unsigned long)seconds / 30);
  }
  if (guard_schedule)
    ASSERT_GT(guard_cycles, seconds / 6);   /* the scenario did run */
  free(grants);
  harness_stop_all();
  return 0;
}
