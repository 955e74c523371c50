/* redlock-sim: the real engine against simulated masters, under fault
 * schedules drawn from a seed (issue 31; world.h for the world, kv.h for
 * the servers' data).
 *
 *   redlock-sim [--seconds S | --seeds K] [--seed S] [--sim-seconds T]
 *               [--workload W] [--faults LIST] [--masters N]
 *               [--topology plain|cluster|sentinel|mixed] [--clients C]
 *               [--durable] [--verbose]
 *
 * Each seed draws a deployment (N masters, each a plain server, a Redis
 * Cluster of 2-3 primaries with 0-1 replica each, or a Redis Sentinel
 * group of a primary, 1-3 replicas and 3 sentinels, with their persistence,
 * whether they are declared durable, clients with their clock rates), a
 * workload and a fault schedule, and runs T simulated seconds. The oracle
 * checks, on true time:
 *  - no two clients inside their reported validity of one key at once
 *    (validity as each result and each extension reported it, on the
 *    client's own clock, which drifts);
 *  - at most K holders of a semaphore of K permits at once (--workload
 *    sem, and in mixed), each inside its reported validity; a limit the
 *    masters hold that differs from the one every client uses (ELIMIT)
 *    never comes back, since all use the same;
 *  - fencing tokens strictly increase from one holder to the next;
 *  - an operator's forced release (F_FORCE) ends its holders' holds
 *    unannounced; an extend they start later must fail where the key is
 *    another holder's or gone;
 *  - the leader's ttl that redlock_election_leader reports is held by a
 *    quorum of the masters (the quorum-th longest PTTL when it answers,
 *    plus the time since the question);
 *  - every call calls back, by its deadline plus a bound when it has one
 *    (a wait deadline), whatever the masters do; a wait that times out,
 *    by its deadline or a command timeout after its last round started,
 *    and by the deadline itself when it made no attempt (a new client's
 *    first connections);
 *  - a wait at a fixed retry delay (no jitter, no wake) starts its next
 *    attempt no sooner than that delay after one that no master refused
 *    (or within a ms of its deadline), also on a client whose loop's time
 *    lags its clock (a loaded machine: world.h, lag_max_ns).
 * A violation prints the seed, what happened around it (the world's log)
 * and the command that replays it. The last line:
 *   sim: G grants, V violations, K seeds, T simulated s, trace H
 * H hashes every event of every seed in order: the same arguments give
 * the same H. Exits 1 on a violation. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <time.h>

#include "pure.h"
#include "scripts.h"
#include "world.h"

#define MAX_MASTERS 7
#define MAX_CLIENTS 16
#define MAX_KEYS 4        /* k0..k3 */
#define LOG_LINES 64

/* ---- options ------------------------------------------------------------- */

enum {
  F_CRASH = 1 << 0,       /* kill -9, restart after a while */
  F_PAUSE = 1 << 1,       /* SIGSTOP of a master */
  F_CLOCK = 1 << 2,       /* a master's wall clock steps */
  F_CUT = 1 << 3,         /* a link cut one way or both, held or dropped */
  F_CPAUSE = 1 << 4,      /* a client's process stops (past its validity) */
  F_CCRASH = 1 << 5,      /* a client dies holding what it holds */
  F_CONFIG = 1 << 6,      /* CONFIG SET appendonly/appendfsync at run time */
  F_JOIN = 1 << 7,        /* fresh clients join (as CLI calls do) */
  F_DRIFT = 1 << 8,       /* a master's wall clock runs fast or slow (within
                             the drift allowance) */
  F_KILL = 1 << 9,        /* CLIENT KILL: a master resets a client's
                             connections */
  /* Redis Cluster masters only (a deployment without one draws none). */
  F_FAILOVER = 1 << 10,   /* a replica takes over: a manual failover, or a
                             TAKEOVER that loses what was not replicated */
  F_MIGRATE = 1 << 11,    /* slots move to another primary (ASK, MOVED) */
  F_DISAGREE = 1 << 12,   /* a node names another owner for some slots a
                             while (MOVED back and forth) */
  F_CLUSTER = F_FAILOVER | F_MIGRATE | F_DISAGREE,
  /* Sentinel groups only (a deployment without one draws none). */
  F_SWITCH = 1 << 13,     /* SENTINEL FAILOVER: a replica promoted with
                             what it had; the sentinels hear of it at
                             different times */
  F_STALE = 1 << 14,      /* a sentinel keeps naming the old primary */
  F_SPLIT = 1 << 15,      /* a partition inside the group: the primary,
                             some replicas and one sentinel on one side */
  F_SENTINEL = F_SWITCH | F_STALE | F_SPLIT,
  /* Drawn on a stream of its own (on_force), not among the others: the
   * schedules of the other kinds stay as they were. */
  F_FORCE = 1 << 16,      /* an operator deletes a lock's key on every
                             plain master whoever holds it (redlock unlock
                             --force; another library's, which knows the
                             plain key only) */
  F_ALL = (1 << 17) - 1
};

static const struct {
  const char *name;
  unsigned bit;
} fault_names[] = {
    {"crash", F_CRASH},   {"pause", F_PAUSE},   {"clock", F_CLOCK},
    {"cut", F_CUT},       {"client-pause", F_CPAUSE},
    {"client-crash", F_CCRASH},                 {"config", F_CONFIG},
    {"join", F_JOIN},     {"drift", F_DRIFT},   {"kill", F_KILL},
    {"failover", F_FAILOVER},                   {"migrate", F_MIGRATE},
    {"disagree", F_DISAGREE},
    {"switch", F_SWITCH}, {"stale", F_STALE}, {"split", F_SPLIT},
    {"force", F_FORCE},
};

static const char *const workloads[] = {"plain", "fence", "extend", "auto",
                                        "rw", "multi", "reentrant",
                                        "elect", "mixed"};

typedef struct opts {
  double wall_seconds;    /* run seeds until this much CPU time passed */
  double wall_cap;        /* --wall-cap: or this much time on the monotonic
                             clock (a loaded machine gives the process less
                             than a core: the budget stays within the
                             test's timeout; 0: none) */
  unsigned seeds;         /* or this many seeds */
  uint64_t seed;          /* the first seed */
  int seed_given;
  double sim_seconds;     /* per seed */
  unsigned faults;
  int masters;            /* 0: drawn per seed */
  const char *topology;   /* "plain", "cluster", "sentinel", "mixed"
                             (default: each master a cluster or a
                             sentinel group one time in five) */
  int clients;            /* 0: drawn */
  const char *workload;   /* "plain" (default), "fence", "extend", "auto",
                             "mixed" */
  const char *faults_arg; /* as given ("all") */
  int verbose;
  int twice;              /* --twice: every seed runs again, and must hash
                             the same (determinism) */
  int stop_at_first;      /* --stop-at-first: the first violating seed
                             ends the run (mutants.sh --sim) */
  int durable;            /* --durable: every master declared durable and
                             running AOF always (each drawn so now and
                             then: this aims seeds at them) */
  int shrink;             /* --shrink: a violating seed's smallest
                             schedule (shorter, fewer faults, clients) */
  char faults_buf[160];   /* faults_arg when the shrinker built it */
} opts;

/* ---- memory -------------------------------------------------------------- */

/* The library's allocations, counted (redlock_replace_allocator): every
 * byte comes back when the clients are closed, and the peak is reported.
 * A header before each block keeps its size. */
typedef union memhead {
  size_t size;
  max_align_t align;
} memhead;

static size_t mem_live, mem_peak;

static void *mem_malloc(size_t n) {
  memhead *h = malloc(sizeof(*h) + n);
  if (h == NULL)
    return NULL;
  h->size = n;
  mem_live += n;
  if (mem_live > mem_peak)
    mem_peak = mem_live;
  return h + 1;
}

static void mem_free(void *p) {
  memhead *h;
  if (p == NULL)
    return;
  h = (memhead *)p - 1;
  mem_live -= h->size;
  /* Poisoned: what the library reads after freeing it is not text (the
   * oracle checks the results' texts, result_text_ok). */
  memset(p, 0xdb, h->size);
  free(h);
}

static void *mem_realloc(void *p, size_t n) {
  memhead *h, *nh;
  if (p == NULL)
    return mem_malloc(n);
  h = (memhead *)p - 1;
  nh = realloc(h, sizeof(*nh) + n);
  if (nh == NULL)
    return NULL;
  mem_live = mem_live - nh->size + n;
  nh->size = n;
  if (mem_live > mem_peak)
    mem_peak = mem_live;
  return nh + 1;
}

static void *mem_calloc(size_t k, size_t n) {
  void *p;
  if (n != 0 && k > SIZE_MAX / n)
    return NULL;
  p = mem_malloc(k * n);
  if (p != NULL)
    memset(p, 0, k * n);
  return p;
}

/* ---- one seed's run ------------------------------------------------------ */

/* The oracle's bound on the connections a client opens to one server in
 * one second of true time: a refused connection is retried every
 * reconnect_min_ms (20 ms by default) jittered down to half, so 100 a
 * second, and a few more for handshakes that a topology ended. */
#define OPENS_PER_SECOND_MAX 120

typedef struct actor actor;

typedef struct holder {
  int held;               /* inside its reported validity */
  char mode;              /* 'P' plain, 'R' read, 'W' write, 'S' a
                             semaphore's permit */
  uint64_t start, end;    /* true ns */
  uint64_t fence;
} holder;

typedef struct run {
  const opts *o;
  uint64_t seed;
  const char *workload;   /* this seed's (--workload any draws one) */
  simworld w;
  unsigned n_masters;
  /* Master i: servers first[i] .. first[i] + nodes[i] - 1 of the world;
   * a cluster (cl[i]) when primaries[i] > 0. */
  unsigned first[MAX_MASTERS], nodes[MAX_MASTERS];
  unsigned primaries[MAX_MASTERS], replica_mask[MAX_MASTERS];
  int old_redis[MAX_MASTERS];
  simcl *cl[MAX_MASTERS];
  unsigned n_clusters;
  /* A sentinel group (sg[i]) when replicas[i] > 0: nodes[i] is its data
   * nodes and its three sentinels; unchecked[i]: its URI says
   * ?isolation=unchecked (a group that is never split). */
  simsg *sg[MAX_MASTERS];
  unsigned replicas[MAX_MASTERS];
  int unchecked[MAX_MASTERS];
  unsigned n_groups;
  char servers[MAX_MASTERS][160];
  const char *server_ptrs[MAX_MASTERS];
  int declared;
  int guard_ms;           /* the clients' restart_guard_ms */
  int max_ttl_ms;         /* the clients' max_ttl_ms: 0, or 10 s (the
                             workload's longest ttl: a cap it never
                             meets but in the probe of do_acquire) */
  unsigned n_actors;
  actor *actors[MAX_CLIENTS];
  unsigned n_keys;
  /* The oracle. */
  holder hold[MAX_CLIENTS][MAX_KEYS];
  uint64_t last_fence[MAX_KEYS];
  int last_fence_ahead[MAX_KEYS];   /* that token was ahead of true wall
                                       time: a master's clock ran ahead */
  unsigned sem_limit[MAX_KEYS];   /* the semaphore of kI's K (1-3) */
  /* Faults no client may see at once (a wall clock that stepped, a
   * durability setting changed at run time) stay within what docs/GUARANTEES.md
   * promises: while such a fault could still matter (its window), at most
   * N - quorum masters have one, so that a majority of the others is a
   * reference; N = 1 gets none. */
  uint64_t faulty_until[MAX_MASTERS];
  /* How long such a fault can matter: the longest ttl (10 s, or the
   * record preset at the deployment: deploy) and a recheck's time. */
  uint64_t window_ns;
  int64_t record_ms;      /* the ttl record preset on the masters, or 0 */
  /* True ns until which a fault keeps a plain master, or the link of a
   * client to it, from taking a release at once (crash, pause; a cut, a
   * CLIENT KILL): the prompt-release check skips them (check_released). */
  uint64_t busy_until[MAX_MASTERS];
  uint64_t link_busy_until[MAX_CLIENTS][MAX_MASTERS];
  uint64_t frng;          /* the faults' random stream */
  uint64_t forces;        /* F_FORCE's draws so far (side_draw) */
  uint64_t clock_at[MAX_MASTERS];   /* true ns of its last clock step */
  /* A plain master's persistence as its config file says (deploy's p:
   * none, RDB, AOF everysec, AOF always), what a restart starts with
   * once a CONFIG SET was not rewritten (forget_config), and, for an
   * AOF-always one, since when its instance runs less durable (true ns
   * of the CONFIG SET, or of its start with that config; 0: durable). */
  unsigned persist[MAX_MASTERS];
  uint64_t config_at[MAX_MASTERS];
  /* Master j holds the mark of a broken declaration that a restart
   * forgot (forget_config) until then: no restart of j may lose it. */
  uint64_t mark_keep_until[MAX_MASTERS];
  uint64_t resync_until[MAX_MASTERS];   /* a declared master's resync: no
                                           crash before (F_CRASH) */
  /* A plain master refuses writes (NOREPLICAS) until then (0: never;
   * config_sequel). */
  uint64_t refuse_until[MAX_MASTERS];
  holder lead[MAX_CLIENTS];   /* the election's leaders */
  uint64_t grants;
  unsigned violations;
  /* The world's log, the last lines (printed with a violation). */
  char log[LOG_LINES][200];
  unsigned log_next;
  int ending;             /* the run's end: no new work */
  uint64_t end_ns;        /* true ns the run's work ends */
  struct released {       /* plain locks released with status 0 */
    char token[41];
    uint64_t at;          /* true ns */
    unsigned by;          /* the client */
    unsigned stale;       /* masters (bits) whose old primary may have
                             taken it and lost it: a cluster's or a
                             sentinel group's deposed primary that still
                             led when it was recorded, or was made a
                             replica within the second before */
  } *released;
  size_t n_released, cap_released;
  int logging;            /* the world's log kept (a replay, --verbose):
                             formatting it costs half the run */
} run;

struct actor {
  run *r;
  unsigned id;
  simenv env;
  redlock_client_t *client;
  redlock_lock_t *lock;
  unsigned keys;          /* the keys it holds or tries (bits) */
  char mode;              /* 'P', 'R', 'W' */
  int reentrant;          /* holds > 1 possible */
  unsigned holds;
  int64_t ttl_ms;
  int late_long;          /* a long ttl near the run's end (do_acquire) */
  int fence, auto_extend, extend;
  int busy;               /* an operation in flight */
  uint64_t op_start;      /* true ns */
  uint64_t op_bound;      /* true ns it must call back by (0: none) */
  uint64_t op_start_env;  /* the client's own clock at op_begin */
  uint64_t op_failed_env; /* and at its acquisition's last failed attempt
                             (REDLOCK_EV_ATTEMPT; 0: none) */
  int64_t fixed_retry_ms; /* the acquisition's retry delay, without
                             jitter or wake (0: drawn as the client's) */
  unsigned retry_after;   /* that attempt failed with no master refusing
                             (the next comes the delay later; 0: none) */
  int op_wait_ms;         /* the acquisition's wait_ms */
  int closed;
  int fresh;              /* a one-shot client (a CLI call) */
  uint64_t born;          /* true ns it was made */
  redlock_election_t *el; /* the election workload's */
  int leading;            /* between ELECTED and DEPOSED */
  int64_t el_margin_ms;   /* its election's step-down margin */
  uint64_t pause_end;     /* true ns its last F_CPAUSE ended (0: none) */
  int forced;             /* an operator deleted the key it holds (F_FORCE):
                             the handle cannot know, so what it says of
                             its validity is no claim (do_ask_validity) */
  uint64_t queries;       /* redlock_election_leader calls so far */
  unsigned want;          /* kI + 1: its one lock is a plain lock of kI
                             (taken right after a forced release), or 0 */
  unsigned gen;           /* bumped per acquisition: stale plans ignored */
  /* Its own URIs when the deployment has sentinel groups (each client
   * lists the sentinels in its own order). */
  char servers[MAX_MASTERS][200];
  const char *server_ptrs[MAX_MASTERS];
};

static void run_log(simworld *w, const char *line) {
  run *r = w->log_arg;
  snprintf(r->log[r->log_next % LOG_LINES], sizeof(r->log[0]), "%s", line);
  r->log_next++;
  if (r->o->verbose)
    fprintf(stderr, "  %s\n", line);
}

static void violation(run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void violation(run *r, const char *fmt, ...) {
  char what[400];
  unsigned i, first;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  r->violations++;
  sim_trace(&r->w, 0x7777);
  if (r->violations > 3)
    return;
  fprintf(stderr, "VIOLATION seed %" PRIu64 " at %.6f s: %s\n", r->seed,
          (double)r->w.now / 1e9, what);
  if (!r->logging)
    return;   /* the seed runs again with its log (main) */
  first = r->log_next > LOG_LINES ? r->log_next - LOG_LINES : 0;
  fprintf(stderr, "  the last %u events of the log:\n", r->log_next - first);
  for (i = first; i < r->log_next; i++)
    fprintf(stderr, "    %s\n", r->log[i % LOG_LINES]);
  fprintf(stderr, "  replay: redlock-sim --seed %" PRIu64 " --seeds 1 "
          "--sim-seconds %g --verbose", r->seed, r->o->sim_seconds);
  if (r->o->masters > 0)
    fprintf(stderr, " --masters %d", r->o->masters);
  fprintf(stderr, " --topology %s", r->o->topology);
  if (r->o->clients > 0)
    fprintf(stderr, " --clients %d", r->o->clients);
  fprintf(stderr, " --workload %s --faults %s%s\n", r->workload,
          r->o->faults_arg, r->o->durable ? " --durable" : "");
}

/* ---- the oracle ---------------------------------------------------------- */

/* Two holds of one key conflict unless both are a reader's. A
 * semaphore's permits are other keys ("{kI}:sem:<p>": redlock.h, a
 * semaphore does not exclude a plain lock of its name): they count
 * against each other only, up to the limit (sem_count). */
static int conflict(char x, char y) {
  return !(x == 'R' && y == 'R') && x != 'S' && y != 'S';
}

static const char *mode_name(char m) {
  return m == 'R' ? "read" : m == 'W' ? "write" : m == 'S' ? "permit"
                                                            : "plain";
}

/* How many other clients hold a permit of kI's semaphore at `now`. */
static unsigned sem_count(const run *r, unsigned self, unsigned k,
                          uint64_t now) {
  unsigned i, n = 0;
  for (i = 0; i < r->n_actors; i++) {
    const holder *o = &r->hold[i][k];
    n += i != self && o->held && o->mode == 'S' && o->end > now;
  }
  return n;
}

static void sem_excess(run *r, const actor *a, unsigned k, const char *what,
                       int64_t validity_ms) {
  unsigned i;
  violation(r, "client %u %s a permit of k%u (validity %" PRId64 " ms) "
            "while %u others hold one (limit %u)", a->id, what, k,
            validity_ms, sem_count(r, a->id, k, r->w.now), r->sem_limit[k]);
  for (i = 0; i < r->n_actors; i++) {
    const holder *o = &r->hold[i][k];
    if (i != a->id && o->held && o->mode == 'S' && o->end > r->w.now)
      sim_logf(&r->w, "  client %u holds a permit of k%u since %.6f s, "
               "until %.6f s", i, k, (double)o->start / 1e9,
               (double)o->end / 1e9);
  }
}

static void oracle_grant(actor *a, int64_t validity_ms, uint64_t fence) {
  run *r = a->r;
  uint64_t now = r->w.now;
  uint64_t end = now + sim_env_span(&a->env, (uint64_t)validity_ms * SIM_MS);
  unsigned i, k;
  if (validity_ms <= 0)
    return;
  for (k = 0; k < r->n_keys; k++) {
    holder *h = &r->hold[a->id][k];
    if (!(a->keys & (1u << k)))
      continue;
    if (a->mode == 'S' && sem_count(r, a->id, k, now) >= r->sem_limit[k])
      sem_excess(r, a, k, "got", validity_ms);
    for (i = 0; i < r->n_actors; i++) {
      holder *o = &r->hold[i][k];
      if (i == a->id || !o->held || o->end <= now ||
          !conflict(o->mode, a->mode))
        continue;
      violation(r, "client %u got k%u (%s, validity %" PRId64 " ms) while "
                "client %u holds it (%s) until %.6f s (since %.6f s)",
                a->id, k, mode_name(a->mode), validity_ms, i,
                mode_name(o->mode), (double)o->end / 1e9,
                (double)o->start / 1e9);
    }
    if (fence != 0) {
      /* True wall time in us (world.c starts every server's clock there,
       * within 2 ms): a token above it by more than a second came from a
       * counter raised to the TIME of a master whose clock ran ahead (a
       * step forward, which the clock check keeps out for a window and
       * then counts again, ahead). docs/GUARANTEES.md, the clock rows:
       * such a token stays above the other masters' counters, and one of
       * them lost later (a restart without persistence) starts again from
       * its own, right, clock: below it. Outside the promise, said there;
       * any other regression is a violation. */
      uint64_t true_us = 1700000000000000ULL + now / 1000;
      if (fence <= r->last_fence[k] && r->last_fence_ahead[k])
        sim_logf(&r->w, "client %u's fencing token %" PRIu64 " for k%u is "
                 "below the last holder's %" PRIu64 ", which a clock ahead "
                 "gave (not a violation: docs/GUARANTEES.md)", a->id, fence,
                 k, r->last_fence[k]);
      else if (fence <= r->last_fence[k])
        violation(r, "client %u's fencing token %" PRIu64 " for k%u is not "
                  "above the last holder's %" PRIu64, a->id, fence, k,
                  r->last_fence[k]);
      r->last_fence[k] = fence;
      r->last_fence_ahead[k] = fence > true_us + 1000000;
    }
    h->held = 1;
    h->mode = a->mode;
    h->start = now;
    h->end = end;
  }
  r->grants++;
  sim_logf(&r->w, "client %u holds keys %#x (%s) for %" PRId64 " ms%s",
           a->id, a->keys, mode_name(a->mode), validity_ms,
           fence ? " (fenced)" : "");
}

/* An extension reported validity again. */
static void oracle_extend(actor *a, int64_t validity_ms) {
  run *r = a->r;
  uint64_t now = r->w.now, end;
  unsigned i, k;
  if (validity_ms <= 0)
    return;
  end = now + sim_env_span(&a->env, (uint64_t)validity_ms * SIM_MS);
  for (k = 0; k < r->n_keys; k++) {
    holder *h = &r->hold[a->id][k];
    if (!(a->keys & (1u << k)) || !h->held)
      continue;
    /* A permit that had run out and comes back counts again: the others
     * granted meanwhile did not count it. */
    if (h->mode == 'S' && h->end <= now &&
        sem_count(r, a->id, k, now) >= r->sem_limit[k])
      sem_excess(r, a, k, "extended", validity_ms);
    /* An extension must not make a holder of someone else's time. */
    for (i = 0; i < r->n_actors; i++) {
      holder *o = &r->hold[i][k];
      if (i != a->id && o->held && o->start > h->start && o->start < end &&
          o->end > now && conflict(o->mode, h->mode))
        violation(r, "client %u extended k%u to %.6f s over client %u, who "
                  "holds it since %.6f s", a->id, k, (double)end / 1e9, i,
                  (double)o->start / 1e9);
    }
    if (h->end <= now || end > h->end)
      h->end = end;
  }
  sim_logf(&r->w, "client %u extended keys %#x for %" PRId64 " ms", a->id,
           a->keys, validity_ms);
}

/* An extend to `ttl_ms` starts: the handle's validity is capped at once
 * (redlock.h, redlock_lock_extend), whatever it said before. */
static void oracle_cap(actor *a, int64_t ttl_ms) {
  run *r = a->r;
  uint64_t until = r->w.now + sim_env_span(&a->env, (uint64_t)ttl_ms * SIM_MS);
  unsigned k;
  for (k = 0; k < r->n_keys; k++) {
    holder *h = &r->hold[a->id][k];
    if ((a->keys & (1u << k)) && h->held && h->end > until)
      h->end = until;
  }
}

static void oracle_end(actor *a) {
  unsigned k;
  for (k = 0; k < a->r->n_keys; k++) {
    holder *h = &a->r->hold[a->id][k];
    if (!(a->keys & (1u << k)))
      continue;
    if (h->held && h->end > a->r->w.now)
      h->end = a->r->w.now;
    h->held = 0;
  }
}

/* ---- the workload -------------------------------------------------------- */

static void actor_next(actor *a, uint64_t delay_ns);

/* A draw that does not take from the world's source: from the seed, a
 * client, its acquisition and a salt (an oracle's probe, which must not
 * move every other draw of the seeds the corpus keeps). */
static uint64_t side_draw(const run *r, unsigned id, uint64_t gen,
                          uint64_t salt) {
  uint64_t z = r->seed ^ ((uint64_t)id << 48) ^ (gen << 12) ^ salt;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg);

/* One command run on server s's data, as an operator's redis-cli would
 * (not through a client's connection): its reply in *out. */
static void kv_run(simsrv *s, int argc, const char *const *argv,
                   simkv_out *out) {
  simkv_conn kc;
  simkv_ctx ctx;
  size_t lens[4];
  int k;
  memset(&kc, 0, sizeof(kc));
  kc.authed = 1;
  memset(&ctx, 0, sizeof(ctx));
  ctx.now_us = sim_srv_wall_us(s);
  ctx.info = &s->info;
  for (k = 0; k < argc && k < 4; k++)
    lens[k] = strlen(argv[k]);
  if (simkv_exec(s->kv, &kc, &ctx, argc, argv, lens, out) > 0)
    s->writes++;
}

static void op_begin(actor *a, uint64_t bound_ns) {
  a->busy = 1;
  a->op_start = a->r->w.now;
  a->op_start_env = sim_env_now(&a->env);
  a->op_failed_env = 0;
  a->retry_after = 0;
  a->op_bound = bound_ns ? a->r->w.now + bound_ns : 0;
  a->op_wait_ms = 0;
}

static void op_end(actor *a) {
  run *r = a->r;
  a->busy = 0;
  if (a->op_bound != 0 && r->w.now > a->op_bound && !a->env.dead)
    violation(r, "client %u's call took %.3f s, past its bound (%.3f s)",
              a->id, (double)(r->w.now - a->op_start) / 1e9,
              (double)(a->op_bound - a->op_start) / 1e9);
}

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  actor *a = arg;
  (void)l;
  sim_logf(&a->r->w, "client %u lost keys %#x (%s)", a->id, a->keys,
           redlock_err_name(reason));
  oracle_end(a);
}

static void check_released_later(actor *a);

/* An acquisition with a fixed retry delay (no jitter, no wake): after an
 * attempt that no master refused (no PTTL round to shorten the delay),
 * the next starts the delay later on the client's own clock, or within a
 * ms before the wait's deadline when that is sooner (redlock.h: the retry
 * delay, wait_ms), never before: libuv's timers count from the loop's
 * time, which lags on a loaded machine, and the library's timer queue
 * must not run them early (tq.c, invariant 4). The attempt's start: the
 * result's elapsed time before its decision (first send; a ttl record's
 * raise first makes it later, never sooner). */
static void retry_check(actor *a, const redlock_result *res) {
  uint64_t now = sim_env_now(&a->env), start, due, last;
  if (a->fixed_retry_ms <= 0 || a->retry_after == 0 ||
      res->attempts != a->retry_after + 1 ||
      now < res->elapsed_us * 1000 || a->pause_end > a->op_start)
    return;
  start = now - res->elapsed_us * 1000;
  due = a->op_failed_env + (uint64_t)a->fixed_retry_ms * SIM_MS;
  last = a->op_start_env + (uint64_t)a->op_wait_ms * SIM_MS - SIM_MS;
  if (due > last)
    due = last;
  if (start + SIM_MS / 5 < due)
    violation(a->r, "client %u's attempt %u started %.3f ms after attempt "
              "%u failed (no master refused it): its retry delay is %" PRId64
              " ms, no jitter (the wait's deadline in %.3f ms)", a->id,
              res->attempts,
              start > a->op_failed_env
                  ? (double)(start - a->op_failed_env) / 1e6 : 0.0,
              a->retry_after, a->fixed_retry_ms,
              (double)(a->op_start_env + (uint64_t)a->op_wait_ms * SIM_MS -
                       a->op_failed_env) / 1e6);
}

static void on_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg) {
  actor *a = arg;
  if (ev->kind == REDLOCK_EV_AUTO_EXTEND && ev->status == 0 &&
      a->lock != NULL)
    oracle_extend(a, ev->result->validity_ms);
  if ((ev->kind == REDLOCK_EV_AUTO_EXTEND || ev->kind == REDLOCK_EV_EXTEND) &&
      ev->status == 0 && a->el != NULL && a->leading) {
    holder *h = &a->r->lead[a->id];
    uint64_t end = a->r->w.now +
                   sim_env_span(&a->env,
                                (uint64_t)ev->result->validity_ms * SIM_MS);
    if (end > h->end)
      h->end = end;
  }
  (void)c;
  if (ev->kind == REDLOCK_EV_ATTEMPT && a->lock != NULL)
    check_released_later(a);
  if (ev->kind == REDLOCK_EV_ATTEMPT) {
    retry_check(a, ev->result);
    a->op_failed_env = sim_env_now(&a->env);
    a->retry_after = ev->result->no == 0 ? ev->result->attempts : 0;
  }
  if (ev->kind == REDLOCK_EV_ATTEMPT && a->r->o->verbose) {
    char why[300];
    redlock_result_explain(ev->result, why, sizeof(why));
    sim_logf(&a->r->w, "client %u: attempt %u failed: %s", a->id,
             ev->result->attempts, why);
  }
}

/* The masters whose deposed primary may take a release now and lose it
 * when it is made a replica (struct released, stale): per release, since
 * a later failover of another shard or group replaces deposed_ns and
 * rollback_ns (seed 1883023474159050: a release that a cluster's deposed
 * primary took 7 ms before its rollback, while the new primary's copy of
 * the key, from an old primary whose clock had stepped 13.9 s ahead,
 * lived on; a failover of the other shard 5.7 s later hid that from the
 * end's check). */
static unsigned stale_masters(run *r) {
  uint64_t recent = r->w.now > SIM_S ? r->w.now - SIM_S : 0;
  unsigned s, m = 0;
  for (s = 0; s < r->n_masters; s++) {
    if (r->cl[s] != NULL && r->cl[s]->deposed_ns != 0 &&
        (sim_cluster_deposed_leads(r->cl[s]) ||
         (r->cl[s]->rollback_ns != 0 && r->cl[s]->rollback_ns >= recent)))
      m |= 1u << s;
    if (r->sg[s] != NULL && r->sg[s]->deposed_ns != 0 &&
        (sim_sentinel_deposed_leads(r->sg[s]) ||
         (r->sg[s]->rollback_ns != 0 && r->sg[s]->rollback_ns >= recent)))
      m |= 1u << s;
  }
  return m;
}

/* A token the library gave up on every master (a release that
 * succeeded, a failed acquisition's last attempt): once every fault
 * healed, no master keeps it (the check at the end of the run). */
static void note_released(actor *a, const char *token) {
  run *r = a->r;
  if (token == NULL || strlen(token) != 40)
    return;
  if (r->n_released == r->cap_released) {
    size_t cap = r->cap_released ? 2 * r->cap_released : 256;
    struct released *p = realloc(r->released, cap * sizeof(*p));
    if (p != NULL) {
      r->released = p;
      r->cap_released = cap;
    }
  }
  if (r->n_released < r->cap_released) {
    snprintf(r->released[r->n_released].token, 41, "%s", token);
    r->released[r->n_released].by = a->id;
    r->released[r->n_released].stale = stale_masters(r);
    r->released[r->n_released++].at = r->w.now;
  }
}

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  actor *a = arg;
  (void)res;
  sim_logf(&a->r->w, "client %u released keys %#x: %s", a->id, a->keys,
           redlock_err_name(status));
  op_end(a);
  if (status == 0 && a->mode == 'P')
    note_released(a, redlock_lock_token(l));
  redlock_lock_free(l);
  a->lock = NULL;
  actor_next(a, sim_between(&a->r->w, 0, 50) * SIM_MS);
}

static void do_release(simworld *w, void *arg, uint64_t gen);
static void do_ask_validity(simworld *w, void *arg, uint64_t gen);

/* A re-entrant hold went (not the last: nothing on the masters). */
static void on_unheld(redlock_lock_t *l, int status,
                      const redlock_result *res, void *arg) {
  actor *a = arg;
  (void)res;
  op_end(a);
  if (status != 0) {
    /* It ran out while held (a pause past its validity): over. */
    sim_logf(&a->r->w, "client %u: releasing one of %u holds: %s", a->id,
             a->holds, redlock_err_name(status));
    oracle_end(a);
    redlock_lock_free(l);
    a->lock = NULL;
    actor_next(a, sim_between(&a->r->w, 0, 50) * SIM_MS);
    return;
  }
  a->holds--;
  sim_at(&a->r->w, a->r->w.now + sim_between(&a->r->w, 0, 30) * SIM_MS,
         &a->env, do_release, a, a->gen);
}

static void do_release(simworld *w, void *arg, uint64_t gen) {
  actor *a = arg;
  (void)w;
  if (a->gen != gen || a->lock == NULL || a->busy || a->closed)
    return;
  if (a->holds > 1) {
    op_begin(a, 0);
    if (redlock_lock_release(a->lock, on_unheld, a) != 0) {
      a->busy = 0;
      violation(a->r, "client %u: release of a re-entrant hold refused: %s",
                a->id, redlock_last_error());
    }
    return;
  }
  oracle_end(a);   /* it stops using the resource before it lets go */
  op_begin(a, 0);
  if (redlock_lock_release(a->lock, on_released, a) != 0) {
    a->busy = 0;
    redlock_lock_free(a->lock);
    a->lock = NULL;
    actor_next(a, 10 * SIM_MS);
  }
}

static void on_reentered(redlock_lock_t *l, int status,
                         const redlock_result *res, void *arg) {
  actor *a = arg;
  op_end(a);
  if (status == 0) {
    a->holds = redlock_lock_holds(l);
    /* Without an extend round (a ttl no longer than the lock's: redlock.h,
     * reentrant) it reports the handle's own validity, which after a
     * forced release is no claim (do_ask_validity): a client that was
     * down when the operator forced its key (on_force skips the dead)
     * and re-entered once it ran again (seed 1883023883063065). */
    if (!(a->forced && res->attempts == 0))
      oracle_extend(a, res->validity_ms);
  } else {
    sim_logf(&a->r->w, "client %u: re-entry failed: %s", a->id,
             redlock_err_name(status));
  }
  sim_at(&a->r->w, a->r->w.now + sim_between(&a->r->w, 0, 50) * SIM_MS,
         &a->env, do_release, a, a->gen);
}

/* The holder takes its lock again (reentrancy): a hold, or with a longer
 * ttl an extension first. */
static void do_reenter(simworld *w, void *arg, uint64_t gen) {
  actor *a = arg;
  redlock_acquire_opts ao;
  int64_t ttl;
  if (a->gen != gen || a->lock == NULL || a->busy || a->closed)
    return;
  if (!redlock_lock_is_held(a->lock)) {
    /* It ran out meanwhile (a pause): acquiring now would be a new
     * acquisition, not a hold. Let it go. */
    do_release(w, a, gen);
    return;
  }
  memset(&ao, 0, sizeof(ao));
  ao.reentrant = 1;
  ao.wait_ms = -1;
  ttl = sim_between(w, 0, 1) ? a->ttl_ms
                             : (int64_t)sim_between(w, 100, 3000);
  sim_logf(w, "client %u re-enters keys %#x (ttl %" PRId64 " ms, its "
           "validity %" PRId64 " ms)", a->id, a->keys, ttl,
           redlock_lock_validity_ms(a->lock));
  op_begin(a, 0);
  if (redlock_lock_acquire(a->lock, ttl, &ao, on_reentered, a) != 0) {
    a->busy = 0;
    sim_logf(w, "client %u: re-entry refused: %s", a->id,
             redlock_last_error());
    do_release(w, a, gen);
  }
}

static void on_extended(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  actor *a = arg;
  run *r = a->r;
  (void)l;
  op_end(a);
  if (status == 0) {
    oracle_extend(a, res->validity_ms);
  } else {
    sim_logf(&r->w, "client %u could not extend keys %#x: %s", a->id, a->keys,
             redlock_err_name(status));
  }
  /* Release soon, within what it still has. */
  sim_at(&r->w, r->w.now + sim_between(&r->w, 0, 50) * SIM_MS, &a->env,
         do_release, a, a->gen);
}

static void do_extend(simworld *w, void *arg, uint64_t gen) {
  actor *a = arg;
  (void)w;
  if (a->gen != gen || a->lock == NULL || a->busy || a->closed)
    return;
  op_begin(a, 0);
  if (strcmp(a->r->workload, "late") == 0) {
    /* --workload late: an extend to a ttl of its own (often shorter than
     * what is left), and the application asks the handle meanwhile. */
    int64_t ttl = (int64_t)sim_between(w, 20, (uint64_t)a->ttl_ms);
    sim_at(w, w->now + sim_env_span(&a->env, sim_between(w, 0, 3) * SIM_MS),
           &a->env, do_ask_validity, a, gen);
    oracle_cap(a, ttl);
    if (redlock_lock_extend(a->lock, ttl, on_extended, a) != 0) {
      a->busy = 0;
      do_release(w, a, gen);
    }
    return;
  }
  oracle_cap(a, a->ttl_ms);
  if (redlock_lock_extend(a->lock, a->ttl_ms, on_extended, a) != 0) {
    a->busy = 0;
    do_release(w, a, gen);
  }
}

/* A result's texts are text (a name or a message read from freed memory
 * shows the poison, mem_free). */
static int text_ok(const char *t) {
  const unsigned char *p;
  if (t == NULL)
    return 0;
  for (p = (const unsigned char *)t; *p != '\0'; p++)
    if (*p < 0x20 || *p > 0x7e)
      return 0;
  return 1;
}

static void result_text_check(actor *a, const redlock_result *res,
                              const char *why) {
  unsigned i;
  int ok = text_ok(why);
  for (i = 0; ok && i < res->n_nodes; i++)
    ok = text_ok(res->nodes[i].server) && text_ok(res->nodes[i].node) &&
         text_ok(res->nodes[i].errstr);
  if (!ok)
    violation(a->r, "client %u: a result's text is not text (read from "
              "freed memory?)", a->id);
}

/* The application asks the handle how long it still holds (redlock.h:
 * redlock_lock_validity_ms) and works until then: a claim the oracle
 * holds the library to, as a grant's. */
static void do_ask_validity(simworld *w, void *arg, uint64_t gen) {
  actor *a = arg;
  int64_t v;
  (void)w;
  if (a->gen != gen || a->lock == NULL || a->closed || a->forced)
    return;
  v = redlock_lock_validity_ms(a->lock);
  if (v > 0)
    oracle_extend(a, v);
}

/* A failed attempt releases at once wherever it was granted (docs/
 * GUARANTEES.md, How it works): its token is gone from every plain
 * master a moment later, unless a fault kept the release from it (the
 * library then keeps it for the next connection, or the key lives its
 * ttl: the end-of-run check's case). Checked 300 ms after the failure
 * on the plain masters that nothing disturbed since 5 s before it (the
 * node's reconnection backs off), for a client that ran meanwhile. */
typedef struct released_check {
  run *r;
  unsigned actor, keys;
  uint64_t at;
  char token[41];
} released_check;

static void check_released(simworld *w, void *arg, uint64_t x) {
  released_check *c = arg;
  run *r = c->r;
  actor *a = r->actors[c->actor];
  uint64_t quiet = 5 * SIM_S;
  unsigned i, k;
  (void)x;
  if (!r->ending && !a->env.dead && !a->closed &&
      a->pause_end + quiet <= c->at)
    for (i = 0; i < r->n_masters; i++) {
      simsrv *sv = &w->srv[r->first[i]];
      if (r->cl[i] != NULL || r->sg[i] != NULL || !sv->up ||
          sv->paused_until > w->now || r->busy_until[i] + quiet > c->at ||
          r->refuse_until[i] + quiet > c->at ||
          r->link_busy_until[c->actor][i] + quiet > c->at)
        continue;
      for (k = 0; k < r->n_keys; k++) {
        char name[16];
        size_t len;
        const char *v;
        if (!(c->keys & (1u << k)))
          continue;
        snprintf(name, sizeof(name), "k%u", k);
        v = simkv_get(sv->kv, name, strlen(name), sim_srv_wall_us(sv), &len);
        if (v != NULL && len == 40 && memcmp(v, c->token, 40) == 0)
          violation(r, "k%u is still on server %u under the token of "
                    "client %u's attempt that failed %.3f s ago (%.40s), "
                    "with no fault on that master or link since 5 s "
                    "before", k, sv->index, c->actor,
                    (double)(w->now - c->at) / 1e9, c->token);
      }
    }
  free(c);
}

static void check_released_later(actor *a) {
  released_check *c;
  const char *tok = a->lock != NULL ? redlock_lock_token(a->lock) : NULL;
  if (a->mode != 'P' || tok == NULL || strlen(tok) != 40 ||
      (c = malloc(sizeof(*c))) == NULL)
    return;
  c->r = a->r;
  c->actor = a->id;
  c->keys = a->keys;
  c->at = a->r->w.now;
  memcpy(c->token, tok, 41);
  sim_at(&a->r->w, a->r->w.now + 300 * SIM_MS, NULL, check_released, c, 0);
}

/* A wait that timed out ended by its deadline, or a command timeout
 * after its last round started when that is later (redlock.h, wait_ms:
 * an acquisition's requests end by the deadline or a command timeout
 * from when they were made, also those queued behind a connection's
 * handshake; lock.c, owner_until), and by the deadline itself when no
 * attempt was made (a new client's first connections: acquire.c,
 * on_settle_deadline). On the client's own clock; the result's elapsed
 * time dates its last round (first send to the decision, or to the
 * end), 5 ms for the timer queue's ms and the delivery. The op_bound
 * of every call is the coarser form (the hard end: the deadline plus a
 * command timeout). */
#define SIM_COMMAND_TIMEOUT_NS (50 * SIM_MS)   /* the clients' default */

static void wait_end_check(actor *a, const redlock_result *res) {
  uint64_t took = sim_env_now(&a->env) - a->op_start_env;
  uint64_t wait = (uint64_t)a->op_wait_ms * SIM_MS;
  uint64_t round = res->elapsed_us * 1000;
  uint64_t bound = wait;
  unsigned i;
  /* A round after the last failed attempt (its PTTL round, the next
   * attempt's) is newer than the one the result shows. */
  if (a->op_failed_env > a->op_start_env &&
      took - (a->op_failed_env - a->op_start_env) < round)
    round = took - (a->op_failed_env - a->op_start_env);
  /* A vote the guard held (the record's read, another master's clock:
   * bounded by the hard end alone) leaves its latency and no vote. */
  for (i = 0; i < res->n_nodes; i++)
    if ((res->nodes[i].vote == REDLOCK_VOTE_NONE &&
         res->nodes[i].latency_us > 0) ||
        res->nodes[i].error == REDLOCK_ERESTARTED)
      return;
  /* The ttl record read or raised after that round began (before the
   * next attempt's SET round: acquire.c): steps no result dates, bounded
   * by the hard end alone (a command timeout past the deadline). */
  if (res->attempts > 0 && took > round &&
      a->env.record_at + SIM_MS > a->op_start + (took - round) &&
      took <= wait + SIM_COMMAND_TIMEOUT_NS + 5 * SIM_MS)
    return;
  if (res->attempts > 0 && took > round &&
      took - round + SIM_COMMAND_TIMEOUT_NS > bound)
    bound = took - round + SIM_COMMAND_TIMEOUT_NS;
  if (res->attempts > 0 && took <= round)
    bound = took;   /* a round older than the call: nothing to date */
  if (took > bound + 5 * SIM_MS)
    violation(a->r, "client %u's wait of %d ms ended after %.3f ms on its "
              "own clock (%u attempts, its last round started at %.3f "
              "ms): past the deadline%s", a->id, a->op_wait_ms,
              (double)took / 1e6, res->attempts,
              took > round ? (double)(took - round) / 1e6 : 0.0,
              res->attempts > 0 ? " and a command timeout after that round"
                                : " with no attempt made");
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  actor *a = arg;
  run *r = a->r;
  simworld *w = &r->w;
  op_end(a);
  /* redlock.h: the client's close ends every operation in flight with
   * ECANCELED; a grant after it is one the application no longer waits
   * for, released by the close without a word. */
  if (status == 0 && a->closed)
    violation(r, "client %u granted keys %#x after its client's close",
              a->id, a->keys);
  if (status != 0) {
    char why[300];
    if (status != REDLOCK_ECANCELED)
      check_released_later(a);
    redlock_result_explain(res, why, sizeof(why));
    result_text_check(a, res, why);
    /* A wait keeps trying until its deadline (redlock.h, wait_ms): on
     * the client's own clock, its last attempt starts within a ms of it
     * (acquire.c), so ETIMEDOUT never comes sooner. */
    if (status == REDLOCK_ETIMEDOUT && a->op_wait_ms > 0 &&
        sim_env_now(&a->env) - a->op_start_env + SIM_MS <
            (uint64_t)a->op_wait_ms * SIM_MS)
      violation(r, "client %u's wait of %d ms ended after %.3f ms on its "
                "own clock: before its deadline", a->id, a->op_wait_ms,
                (double)(sim_env_now(&a->env) - a->op_start_env) / 1e6);
    retry_check(a, res);
    if (status == REDLOCK_ETIMEDOUT && a->op_wait_ms > 0 &&
        a->op_bound != 0 && a->pause_end <= a->op_start)
      wait_end_check(a, res);   /* not across a pause or a crash */
    if (status == REDLOCK_ELIMIT)
      violation(r, "client %u: ELIMIT for k%u's semaphore, whose limit %u "
                "every client uses: %s", a->id, __builtin_ctz(a->keys),
                r->sem_limit[__builtin_ctz(a->keys)], why);
    sim_logf(w, "client %u did not get keys %#x after %.3f s: %s", a->id,
             a->keys, (double)(w->now - a->op_start) / 1e9, why);
    /* Its last attempt was released wherever it was granted (redlock.h:
     * a failed attempt releases on every master). */
    if (a->mode == 'P' && a->keys == (a->keys & -a->keys))
      note_released(a, redlock_lock_token(l));
    redlock_lock_free(l);
    a->lock = NULL;
    actor_next(a, sim_between(w, 0, 100) * SIM_MS);
    return;
  }
  retry_check(a, res);
  oracle_grant(a, res->validity_ms, redlock_lock_fence(l));
  a->holds = 1;
  if (a->reentrant && sim_between(w, 0, 1)) {
    uint64_t at = (uint64_t)res->validity_ms * SIM_MS / 3;
    sim_at(w, w->now + sim_env_span(&a->env, at), &a->env, do_reenter, a,
           a->gen);
  } else if (a->extend && !a->auto_extend) {
    uint64_t at = (uint64_t)res->validity_ms * SIM_MS / 2;
    /* --workload late: now and then the extend comes after the validity
     * ended (a GC pause): another client may hold the key by then, and
     * the extend must not renew it. */
    if (strcmp(r->workload, "late") == 0 && sim_between(w, 0, 2) == 0)
      at = ((uint64_t)res->validity_ms +
            sim_between(w, 1, 300 + (uint64_t)res->validity_ms)) * SIM_MS;
    sim_at(w, w->now + sim_env_span(&a->env, at), &a->env, do_extend, a,
           a->gen);
  } else {
    /* Hold for part of the validity (auto-extended: up to 3 ttls). */
    uint64_t max = (uint64_t)res->validity_ms;
    uint64_t hold_ms;
    /* Mostly short holds (many grants per simulated second), now and
     * then one to the end of the validity (expiry, takeover). */
    int short_hold = sim_between(w, 0, 4) != 0;
    if ((short_hold || a->late_long) && max > 100)
      max = 100;
    hold_ms = a->auto_extend ? sim_between(w, 0, 3 * (uint64_t)a->ttl_ms)
                             : sim_between(w, 0, max);
    /* A reader that lets go late now and then (a slow job; from the
     * seed's side draws, not the world's): its entry stays until its ttl
     * ends, beside readers of other ttls, and the name must stay taken
     * for the longest of them (a plain lock or a writer comes right as
     * the shortest one's ttl ends). */
    if (a->mode == 'R' && !a->auto_extend &&
        side_draw(r, a->id, a->gen, 0x1a7e) % 4 == 0)
      hold_ms = (uint64_t)res->validity_ms + 1 +
                side_draw(r, a->id, a->gen, 0x1a7f) %
                    (300 + (uint64_t)res->validity_ms);
    if (strcmp(r->workload, "late") == 0) {
      /* --workload late (not in any: its draws would move every other
       * seed's): an application that asks the handle how long it still
       * holds, and trusts it (the oracle takes that answer as a claim),
       * and one that lets go late, after its validity ended (a GC pause,
       * a slow job): its release then meets another holder's key. */
      uint64_t ask = sim_between(w, 0, hold_ms);
      if (sim_between(w, 0, 1) == 0)
        hold_ms = (uint64_t)res->validity_ms +
                  sim_between(w, 1, 300 + (uint64_t)res->validity_ms);
      sim_at(w, w->now + sim_env_span(&a->env, ask * SIM_MS), &a->env,
             do_ask_validity, a, a->gen);
    }
    sim_at(w, w->now + sim_env_span(&a->env, hold_ms * SIM_MS), &a->env,
           do_release, a, a->gen);
  }
}

static int workload_is(const run *r, const char *name) {
  return strcmp(r->workload, name) == 0 ||
         strcmp(r->workload, "mixed") == 0;
}

/* A new handle for this acquisition: its kind drawn from the workload. */
static int new_handle(actor *a) {
  run *r = a->r;
  simworld *w = &r->w;
  char names[MAX_KEYS][12];
  const void *res[MAX_KEYS];
  size_t lens[MAX_KEYS];
  unsigned k, n = 0, first = (unsigned)sim_between(w, 0, r->n_keys - 1);
  int kind = 0;   /* 0 plain, 1 read-write, 2 multi, 3 semaphore */
  if (strcmp(r->workload, "sem") == 0 && sim_between(w, 0, 4) != 0)
    kind = 3;
  else if (workload_is(r, "rw") && sim_between(w, 0, 4) != 0)
    kind = 1;
  else if (workload_is(r, "multi") && r->n_keys > 1 && sim_between(w, 0, 1))
    kind = 2;
  if (a->want > 0) {   /* the lock that follows a forced release */
    kind = 0;
    first = a->want - 1;
  }
  a->mode = 'P';
  a->keys = 1u << first;
  if (kind == 3) {
    a->mode = 'S';
    snprintf(names[0], sizeof(names[0]), "k%u", first);
    return redlock_semaphore_new(a->client, names[0], strlen(names[0]),
                                 r->sem_limit[first], &a->lock);
  }
  if (kind == 1) {
    a->mode = sim_between(w, 0, 2) != 0 ? 'R' : 'W';
    snprintf(names[0], sizeof(names[0]), "k%u", first);
    return redlock_rwlock_new(a->client, names[0], strlen(names[0]),
                              a->mode == 'R' ? REDLOCK_READ : REDLOCK_WRITE,
                              &a->lock);
  }
  if (kind == 2) {
    for (k = 0; k < r->n_keys; k++)
      if (k == first || sim_between(w, 0, 1))
        a->keys |= 1u << k;
    for (k = 0; k < r->n_keys; k++)
      if (a->keys & (1u << k)) {
        snprintf(names[n], sizeof(names[n]), "k%u", k);
        res[n] = names[n];
        lens[n] = strlen(names[n]);
        n++;
      }
    return redlock_lock_new_multi(a->client, res, lens, n, &a->lock);
  }
  snprintf(names[0], sizeof(names[0]), "k%u", first);
  return redlock_lock_new(a->client, names[0], strlen(names[0]), &a->lock);
}

static void do_acquire(simworld *w, void *arg, uint64_t x) {
  actor *a = arg;
  run *r = a->r;
  redlock_acquire_opts ao;
  (void)x;
  if (r->ending || a->busy || a->closed)
    return;
  /* Short ttls mostly, a long one now and then (the ttl record moves). */
  a->ttl_ms = sim_between(w, 0, 9) == 0 ? (int64_t)sim_between(w, 2000, 10000)
                                        : (int64_t)sim_between(w, 100, 1500);
  a->gen++;
  a->forced = 0;
  /* In the run's last 8 s, one lock in two long (5-10 s), drawn aside:
   * the end's check (a key whose release succeeded is gone once every
   * fault healed) sees a release that never landed only while its key
   * lives, 5 s past the faults. Not in runs of less than 20 s, whose
   * early seconds are the point (--sim-seconds 8: clients that read the
   * ttl record while it was low; long ttls from the start raise it). */
  a->late_long = r->o->sim_seconds >= 20 && r->end_ns - w->now < 8 * SIM_S &&
                 side_draw(r, a->id, a->gen, 0x7e1) % 2 == 0;
  if (a->late_long)   /* held 100 ms at most (on_acquired) */
    a->ttl_ms = 5000 + (int64_t)(side_draw(r, a->id, a->gen, 0x7e2) % 5001);
  a->holds = 0;
  if (new_handle(a) != 0) {
    violation(r, "client %u: a new lock handle failed: %s", a->id,
              redlock_last_error());
    return;
  }
  /* Now and then a ttl above the cap, which a fixed restart window sets
   * (redlock.h: max_ttl_ms, restart_guard_ms > 0): the call must refuse
   * it (EINVAL), else a lock outlives the window in which a restarted
   * master stays out. Drawn from the seed, the client and the
   * acquisition, not the world's source: the other draws stay. */
  if ((r->guard_ms > 0 || r->max_ttl_ms > 0) &&
      side_draw(r, a->id, a->gen, 0xca9) % 40 == 0) {
    int cap = r->guard_ms > 0 ? r->guard_ms : r->max_ttl_ms;
    int64_t over = cap + 1 +
                   (int64_t)(side_draw(r, a->id, a->gen, 0xca8) % 3000);
    int rc;
    memset(&ao, 0, sizeof(ao));
    ao.wait_ms = -1;
    rc = redlock_lock_acquire(a->lock, over, &ao, on_acquired, a);
    sim_logf(w, "client %u asks a ttl of %" PRId64 " ms over the cap %d: "
             "%s", a->id, over, cap, redlock_err_name(rc));
    if (rc == 0) {
      violation(r, "client %u: a ttl of %" PRId64 " ms, over the cap %d "
                "ms, was accepted", a->id, over, cap);
      op_begin(a, 0);
      return;   /* on_acquired follows */
    }
    redlock_lock_free(a->lock);
    a->lock = NULL;
    actor_next(a, sim_between(w, 0, 100) * SIM_MS);
    return;
  }
  a->fence = workload_is(r, "fence") && a->mode == 'P' &&
             a->keys == (a->keys & -a->keys) && sim_between(w, 0, 1);
  a->auto_extend = workload_is(r, "auto") && a->keys == (a->keys & -a->keys) &&
                   sim_between(w, 0, 2) == 0;
  a->extend = (workload_is(r, "extend") ||
               strcmp(r->workload, "late") == 0) && sim_between(w, 0, 1);
  a->reentrant = workload_is(r, "reentrant") && a->mode == 'P' &&
                 sim_between(w, 0, 1);
  if (a->mode == 'S') {
    /* A permit: extended by hand or automatically, fenced (a counter per
     * permit: not compared across holders), sometimes re-entered. */
    a->extend = sim_between(w, 0, 2) == 0;
    a->auto_extend = !a->extend && sim_between(w, 0, 3) == 0;
    a->reentrant = sim_between(w, 0, 5) == 0;
  }
  memset(&ao, 0, sizeof(ao));
  ao.wait_ms = (int)sim_between(w, 0, 3) == 0 ? -1
                                              : (int)sim_between(w, 100, 3000);
  ao.fence = a->fence;
  ao.auto_extend = a->auto_extend;
  ao.reentrant = a->reentrant;
  ao.on_lost = on_lost;
  ao.lost_arg = a;
  ao.wake = (int)sim_between(w, 0, 1);
  /* One wait in eight on a plain lock retries at a fixed delay of
   * 100-200 ms, without wake (retry_check; side draws: the world's
   * stay). */
  a->fixed_retry_ms = 0;
  if (ao.wait_ms > 0 && a->mode == 'P' &&
      side_draw(r, a->id, a->gen, 0x7e7) % 8 == 0) {
    a->fixed_retry_ms = 100 + (int64_t)(side_draw(r, a->id, a->gen, 0x7e6) %
                                        101);
    ao.retry_delay_ms = (int)a->fixed_retry_ms;
    ao.retry_jitter_ms = -1;
    ao.wake = 0;
  }
  /* A wait ends at most a command timeout (50 ms) after its deadline;
   * the bound allows for the client's clock rate and a scheduling ms. */
  op_begin(a, ao.wait_ms > 0 ? sim_env_span(&a->env, (uint64_t)(ao.wait_ms +
                                                               50 + 5) *
                                                        SIM_MS)
                             : 0);
  a->op_wait_ms = ao.wait_ms;
  if (redlock_lock_acquire(a->lock, a->ttl_ms, &ao, on_acquired, a) != 0) {
    a->busy = 0;
    violation(r, "client %u: redlock_lock_acquire refused the call: %s",
              a->id, redlock_last_error());
    redlock_lock_free(a->lock);
    a->lock = NULL;
  }
}

/* ---- the election workload ---------------------------------------------- */

static void do_campaign(simworld *w, void *arg, uint64_t x);

static void do_resign(simworld *w, void *arg, uint64_t gen) {
  actor *a = arg;
  (void)w;
  if (a->gen != gen || a->el == NULL || a->closed || a->r->ending)
    return;
  sim_logf(w, "client %u resigns", a->id);
  /* It stops leading before it lets go (its work has stopped). */
  if (a->r->lead[a->id].held && a->r->lead[a->id].end > w->now)
    a->r->lead[a->id].end = w->now;
  a->r->lead[a->id].held = 0;
  redlock_election_resign(a->el);
}

static void on_change(redlock_election_t *e, redlock_election_event ev,
                      int reason, void *arg) {
  actor *a = arg;
  run *r = a->r;
  simworld *w = &r->w;
  holder *h = &r->lead[a->id];
  unsigned i;
  if (ev == REDLOCK_ELECTED) {
    redlock_lock_t *l = redlock_election_lock(e);
    int64_t v = l != NULL ? redlock_lock_validity_ms(l) : 0;
    /* The close ends a campaign with it (redlock.h); the lock of a
     * leader elected after it goes with the close, no DEPOSED said. */
    if (a->closed)
      violation(r, "client %u elected after its client's close", a->id);
    for (i = 0; i < r->n_actors; i++) {
      holder *o = &r->lead[i];
      if (i != a->id && o->held && o->end > w->now)
        violation(r, "client %u elected while client %u leads (until "
                  "%.6f s, since %.6f s): two leaders", a->id, i,
                  (double)o->end / 1e9, (double)o->start / 1e9);
    }
    a->leading = 1;
    h->held = 1;
    h->start = w->now;
    h->end = w->now + sim_env_span(&a->env, (uint64_t)v * SIM_MS);
    r->grants++;
    sim_logf(w, "client %u leads (validity %" PRId64 " ms)", a->id, v);
    a->gen++;
    sim_at(w, w->now + sim_between(w, 0, 3000) * SIM_MS, &a->env,
           do_resign, a, a->gen);
    return;
  }
  sim_logf(w, "client %u deposed (%s)", a->id,
           reason ? redlock_err_name(reason) : "resigned");
  /* A leader that could not extend steps down step_down_ms before its
   * validity ends (redlock.h, redlock_election_opts; here the default:
   * ttl / 10, at least 2 command timeouts), so that its work stops while
   * the lock still holds: not at the end. Unless it was stopped across
   * that point (F_CPAUSE: every callback of it is late). An extension
   * in flight at that point is waited for, a command timeout at most (the
   * margin is at least two). */
  if (reason == REDLOCK_EEXPIRED && h->held && !r->ending) {
    uint64_t point = h->end - sim_env_span(&a->env,
                                           (uint64_t)a->el_margin_ms * SIM_MS);
    if (point < h->start)   /* elected with less than the margin left */
      point = h->start;
    if (w->now > point + (50 + 2) * SIM_MS && a->pause_end < point)
      violation(r, "client %u stepped down %.3f s after its step-down "
                "point (%" PRId64 " ms before its validity ends at %.6f s)",
                a->id, (double)(w->now - point) / 1e9, a->el_margin_ms,
                (double)h->end / 1e9);
  }
  a->leading = 0;
  if (h->held && h->end > w->now)
    h->end = w->now;
  h->held = 0;
  if (reason == 0)   /* resigned: campaign again later */
    sim_at(w, w->now + sim_between(w, 0, 500) * SIM_MS, &a->env,
           do_campaign, a, 0);
}

/* ---- who leads (redlock_election_leader) ---------------------------------- */

/* A client asks who leads e0 now and then: the answer's ttl is how long
 * a quorum still holds the leader's key without an extension (redlock.h,
 * redlock_election_leader): the quorum-th longest PTTL of one value among
 * the masters that hold it when they are read. The oracle reads every
 * master when the answer comes: one read since the question held that
 * value for at most its PTTL now plus the time since the question (keys
 * run down, or are extended; one set again after a delete was set
 * later); a master that no longer holds it, no bound (extended, then
 * deleted). Only on plain masters that no crash, pause or clock step
 * touched meanwhile. */
typedef struct leader_q {
  run *r;
  uint64_t t0;            /* true ns of the question */
} leader_q;

/* e0's value on master i (NUL-terminated in v, "" when none) and its
 * PTTL; -1 when the master cannot be judged. */
static int leader_read(run *r, unsigned i, char *v, size_t n,
                       int64_t *pttl) {
  simsrv *sv = &r->w.srv[r->first[i]];
  const char *cmd[2] = {"PTTL", "e0"};
  simkv_out out = {NULL, 0, 0};
  const char *p;
  size_t len;
  v[0] = '\0';
  *pttl = 0;
  if (r->cl[i] != NULL || r->sg[i] != NULL || !sv->up ||
      sv->paused_until > r->w.now)
    return -1;
  p = simkv_get(sv->kv, "e0", 2, sim_srv_wall_us(sv), &len);
  if (p == NULL)
    return 0;
  if (len >= n)
    return -1;
  memcpy(v, p, len);
  v[len] = '\0';
  kv_run(sv, 2, cmd, &out);
  *pttl = out.len > 1 && out.p[0] == ':' ? strtoll(out.p + 1, NULL, 10) : 0;
  simkv_out_free(&out);
  return 0;
}

static void check_leader(run *r, const leader_q *q, const char *identity,
                         int64_t ttl_ms) {
  simworld *w = &r->w;
  unsigned quorum = r->n_masters / 2 + 1, i, j, c;
  char now_v[MAX_MASTERS][64];
  int64_t now_p[MAX_MASTERS];
  double since_ms = (double)(w->now - q->t0) / 1e6, best = -1;
  for (i = 0; i < r->n_masters; i++)
    if (leader_read(r, i, now_v[i], sizeof(now_v[i]), &now_p[i]) != 0 ||
        r->busy_until[i] > q->t0 || r->clock_at[i] >= q->t0)
      return;
  /* Each value of that identity: its bound. */
  for (c = 0; c < r->n_masters; c++) {
    const char *v = now_v[c];
    const char *who = redlock_token_holder(v);
    double u[MAX_MASTERS] = {0}, t;
    unsigned x, y;
    if (who == NULL || strcmp(who, identity) != 0)
      continue;
    for (j = 0; j < r->n_masters; j++)
      u[j] = strcmp(now_v[j], v) == 0 ? (double)now_p[j] + since_ms * 1.01
                                       : 1e18;
    for (x = 1; x < r->n_masters; x++)   /* descending */
      for (y = x; y > 0 && u[y - 1] < u[y]; y--) {
        t = u[y];
        u[y] = u[y - 1];
        u[y - 1] = t;
      }
    if (u[quorum - 1] > best)
      best = u[quorum - 1];
  }
  /* The masters' clocks run within 0.3 % of true time (F_DRIFT). */
  if (best >= 0 && (double)ttl_ms > best + 2)
    violation(r, "redlock_election_leader said %s leads for %" PRId64 " ms "
              "more (asked %.3f ms ago), but a quorum of masters held its "
              "key for %.0f ms at most", identity, ttl_ms, since_ms, best);
}

static void on_leader(redlock_client_t *c, int status, const char *identity,
                      int64_t ttl_ms, void *arg) {
  leader_q *q = arg;
  run *r = q->r;
  (void)c;
  if (status == 0 && identity != NULL && identity[0] != '\0' &&
      !r->ending)
    check_leader(r, q, identity, ttl_ms);
  free(q);
}

/* From the seed's side draws: the other draws stay where they were. */
static void do_leader_query(simworld *w, void *arg, uint64_t x) {
  actor *a = arg;
  run *r = a->r;
  leader_q *q;
  (void)x;
  if (r->ending || a->closed)
    return;
  sim_at(w, w->now + (100 + side_draw(r, a->id, a->queries++, 0x1eade) %
                                900) * SIM_MS,
         &a->env, do_leader_query, a, 0);
  q = malloc(sizeof(*q));
  if (q == NULL)
    return;
  q->r = r;
  q->t0 = w->now;
  if (redlock_election_leader(a->client, "e0", 2, on_leader, q) != 0)
    free(q);
}

static void do_campaign(simworld *w, void *arg, uint64_t x) {
  actor *a = arg;
  run *r = a->r;
  char id[16];
  (void)x;
  if (r->ending || a->closed)
    return;
  if (a->el == NULL) {
    redlock_election_opts eo;
    memset(&eo, 0, sizeof(eo));
    eo.ttl_ms = (int64_t)sim_between(w, 300, 3000);
    /* The default step-down margin (redlock_election_opts): ttl / 10, at
     * least 2 command timeouts (the run's: 50 ms). */
    a->el_margin_ms = eo.ttl_ms / 10 > 100 ? eo.ttl_ms / 10 : 100;
    eo.on_change = on_change;
    eo.arg = a;
    snprintf(id, sizeof(id), "c%u", a->id);
    if (redlock_election_new(a->client, "e0", 2, id, &eo, &a->el) != 0) {
      violation(r, "client %u: redlock_election_new failed: %s", a->id,
                redlock_last_error());
      return;
    }
    sim_at(w, w->now + (100 + side_draw(r, a->id, 0, 0x1eadf) % 900) * SIM_MS,
           &a->env, do_leader_query, a, 0);
  }
  if (redlock_election_campaign(a->el) != 0)
    sim_logf(w, "client %u: campaign refused: %s", a->id,
             redlock_last_error());
}

static void actor_next(actor *a, uint64_t delay_ns) {
  if (a->r->ending || a->closed)
    return;
  if (a->fresh) {
    a->closed = 1;   /* a CLI call: one lock, then it exits */
    redlock_client_close(a->client, NULL, NULL);
    return;
  }
  sim_at(&a->r->w, a->r->w.now + delay_ns, &a->env, do_acquire, a, 0);
}

/* A CLI call interrupted (Ctrl-C) while its lock is still asked for: its
 * client closes with the call in flight, often while its first
 * connections' handshakes and topology reads run (redlock.h, client
 * close: the call ends with ECANCELED, nothing it started is kept). Not
 * once it holds: the oracle keeps a hold until its validity ends. */
static void do_interrupt(simworld *w, void *arg, uint64_t gen) {
  actor *a = arg;
  if (a->r->ending || a->closed || a->holds || a->gen != gen)
    return;
  sim_logf(w, "client %u interrupted: it closes with its call in flight",
           a->id);
  a->closed = 1;
  redlock_client_close(a->client, NULL, NULL);
}

static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  actor *a = arg;
  (void)c;
  sim_logf(&a->r->w, "client %u warning: %.150s", a->id, msg);
}

static actor *actor_new(run *r, int fresh) {
  actor *a;
  redlock_client_config cfg;
  double drift;
  if (r->n_actors >= MAX_CLIENTS)
    return NULL;
  a = calloc(1, sizeof(*a));
  if (a == NULL)
    return NULL;
  a->r = r;
  a->id = r->n_actors;
  a->fresh = fresh;
  a->born = r->w.now;
  /* Client clocks run within 0.1 % of true time (the drift allowance is
   * 1 % of the ttl plus 2 ms). */
  drift = (sim_unit(&r->w) - 0.5) * 0.002;
  sim_env_init(&r->w, &a->env, a->id, 1.0 + drift);
  /* One client in three on a loaded machine: its loop's time lags its
   * clock by up to 1-6 ms (world.h, lag_max_ns), so libuv's timers run
   * early on the library's clock. Side draws: the world's stay. */
  if (side_draw(r, a->id, 0, 0x1a9) % 3 == 0) {
    a->env.lag_max_ns = (1 + side_draw(r, a->id, 0, 0x1aa) % 6) * SIM_MS;
    a->env.lag_rng = side_draw(r, a->id, 0, 0x1ab);
  }
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = r->server_ptrs;
  if (r->n_groups > 0) {
    unsigned i;
    for (i = 0; i < r->n_masters; i++) {
      a->server_ptrs[i] = r->server_ptrs[i];
      if (r->sg[i] != NULL) {
        simsg *g = r->sg[i];
        unsigned k0 = (unsigned)sim_between(&r->w, 0, SIM_SG_SENTINELS - 1);
        unsigned more = sim_between(&r->w, 0, 3) == 0 ? 1 : 2, k;
        size_t len = (size_t)snprintf(
            a->servers[i], sizeof(a->servers[i]),
            "redis+sentinel://127.0.0.1:%d/%s",
            sim_sentinel_srv(g, k0)->port, g->name);
        for (k = 1; k <= more; k++)
          len += (size_t)snprintf(
              a->servers[i] + len, sizeof(a->servers[i]) - len,
              "%csentinel=127.0.0.1:%d", k == 1 ? '?' : '&',
              sim_sentinel_srv(g, (k0 + k) % SIM_SG_SENTINELS)->port);
        if (r->unchecked[i])
          snprintf(a->servers[i] + len, sizeof(a->servers[i]) - len,
                   "&isolation=unchecked");
        a->server_ptrs[i] = a->servers[i];
      }
    }
    cfg.servers = a->server_ptrs;
  }
  cfg.n_servers = r->n_masters;
  cfg.durable = r->declared;
  cfg.restart_guard_ms = r->guard_ms;
  cfg.max_ttl_ms = r->max_ttl_ms;
  cfg.on_warning = on_warning;
  cfg.warning_arg = a;
  if (redlock__client_new_sys(NULL, &a->env.sys, &cfg, &a->client) != 0) {
    free(a);
    return NULL;
  }
  redlock_client_set_event_hook(a->client, on_event, a);
  r->actors[r->n_actors++] = a;
  return a;
}

/* ---- faults -------------------------------------------------------------- */

static void on_heal(simworld *w, void *arg, uint64_t x) {
  (void)arg;
  sim_cut(w, (unsigned)(x >> 8), (unsigned)(x & 0xff), 0, 3);
  sim_logf(w, "cut healed: client %u, server %u", (unsigned)(x >> 8),
           (unsigned)(x & 0xff));
}

/* May master i get a fault that makes it faulty in the failure model's
 * sense (DESIGN, "The guard's argument", 2.: a restart that lost keys or
 * a clock step, within the window; a durability setting changed under a
 * declaration), for window_ns? */
static int unseen_fault_ok(run *r, unsigned i, uint64_t window_ns) {
  unsigned j, busy = 0, q = r->n_masters / 2 + 1;
  for (j = 0; j < r->n_masters; j++)
    if (j != i && r->faulty_until[j] > r->w.now)
      busy++;
  if (busy + 1 > r->n_masters - q)
    return 0;
  if (r->faulty_until[i] < r->w.now + window_ns)
    r->faulty_until[i] = r->w.now + window_ns;
  return 1;
}

/* The faults draw from a stream of their own (a shrink that drops a kind
 * of fault leaves the workload's and the network's draws as they were
 * until the schedules diverge). */
static uint64_t frand(run *r) {
  uint64_t z = (r->frng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t fbetween(run *r, uint64_t lo, uint64_t hi) {
  return hi <= lo ? lo : lo + frand(r) % (hi - lo + 1);
}

static double funit(run *r) {
  return (double)(frand(r) >> 11) / (double)(1ULL << 53);
}

/* A fault that may lose acknowledged writes on master i (a restart that
 * lost keys, a failover that lost what was not replicated yet), unseen
 * by the guard's record for window_ns: within the failure model? With
 * a fixed restart window, any number: the guard needs no record (as for
 * crashes). A failover is a restart for docs/GUARANTEES.md (its cluster
 * row: the promoted replica is a new instance, guarded for one window), so with
 * the ttl record it makes that master faulty for the window, as a
 * restart that lost keys does (DESIGN, guard 2. and 7.). A single
 * cluster (N = 1) has no other master: its record survives a lossy event
 * on one shard, kept by every other primary (DESIGN, guard 7.), so such
 * events come one at a time there. */
static int lossy_ok(run *r, unsigned i, uint64_t window_ns) {
  if (r->guard_ms > 0)
    return 1;
  if (r->n_masters == 1 && r->primaries[0] >= 2) {
    if (r->faulty_until[0] > r->w.now)
      return 0;
    r->faulty_until[0] = r->w.now + window_ns;
    return 1;
  }
  return unseen_fault_ok(r, i, window_ns);
}

/* The server runs appendonly yes, appendfsync always now. */
static int srv_durable(simsrv *s) {
  return strcmp(simkv_config(s->kv, "appendonly"), "yes") == 0 &&
         strcmp(simkv_config(s->kv, "appendfsync"), "always") == 0;
}

/* A restart forgets a CONFIG SET that was not rewritten (no CONFIG
 * REWRITE): plain master i's next instance starts with its config file's
 * persistence, and reports it (nothing a new instance reports shows what
 * its predecessor did: docs/GUARANTEES.md, Durable masters). Undeclared,
 * it is guarded whatever it reports: always so. Declared, that is the
 * operator's broken promise, which the library catches only when a
 * connected client saw it: so only when some client, alive now, ran since
 * the CONFIG SET (made before it, never paused since) with its links to
 * master i and to another plain master j untouched (no cut, no CLIENT
 * KILL; no crash or pause of either server since) for 6 s (a recheck
 * every 3 s, then the mark's write), j taking writes for the last 9 s
 * (a refused mark is sent again 0.5 s later, then doubling up to 8 s):
 * it saw the break and marked it on j, and j keeps the mark (no restart
 * of j may lose data until this instance's window passed:
 * mark_keep_until). Otherwise the instance
 * starts with the settings it ran (as after a CONFIG REWRITE). */
static void forget_config(run *r, unsigned i, simsrv *s, uint64_t down) {
  static const char *const aof[4] = {"no", "no", "yes", "yes"};
  uint64_t drop = r->config_at[i], now = r->w.now;
  unsigned c, j, held = 0;
  if (drop == 0 || r->cl[i] != NULL || r->sg[i] != NULL)
    return;
  /* Its next instance runs so from its start. */
  r->config_at[i] = now + down;
  if (r->declared) {
    if (now < drop + 6 * SIM_S || r->busy_until[i] > drop) {
      sim_logf(&r->w, "server %u restarts with the settings it ran (the "
               "CONFIG SET %.3f s ago, the server %s since)", s->index,
               (double)(now - drop) / 1e9,
               r->busy_until[i] > drop ? "stopped" : "not stopped");
      return;
    }
    for (c = 0; c < r->n_actors; c++) {
      const actor *a = r->actors[c];
      if (a->env.dead || a->closed || a->born + SIM_S > drop ||
          a->pause_end > drop || r->link_busy_until[c][i] > drop)
        continue;
      for (j = 0; j < r->n_masters; j++)
        if (j != i && r->cl[j] == NULL && r->sg[j] == NULL &&
            r->busy_until[j] <= drop && r->link_busy_until[c][j] <= drop &&
            (r->refuse_until[j] == 0 ||
             r->refuse_until[j] + 9 * SIM_S <= now))
          held |= 1u << j;
    }
    if (held == 0) {
      sim_logf(&r->w, "server %u restarts with the settings it ran (no "
               "client surely saw the CONFIG SET and marked it)", s->index);
      return;
    }
    for (j = 0; j < r->n_masters; j++)
      if (((held >> j) & 1) &&
          r->mark_keep_until[j] < now + down + 15 * SIM_S)
        r->mark_keep_until[j] = now + down + 15 * SIM_S;
  }
  simkv_config_set(s->kv, "appendonly", aof[r->persist[i]]);
  simkv_config_set(s->kv, "appendfsync",
                   r->persist[i] == 3 ? "always" : "everysec");
  r->config_at[i] = 0;
  sim_logf(&r->w, "server %u restarts with its config file's persistence "
           "(the CONFIG SET was not rewritten)", s->index);
}

/* The server a fault of master i hits: a cluster's node drawn. */
static void busy_for(run *r, unsigned i, uint64_t until) {
  if (r->busy_until[i] < until)
    r->busy_until[i] = until;
}

static simsrv *target(run *r, unsigned i) {
  unsigned k = r->nodes[i] > 1 ? (unsigned)fbetween(r, 0, r->nodes[i] - 1)
                                : 0;
  return &r->w.srv[r->first[i] + k];
}

/* A cluster master drawn (i), or NULL when there is none. */
static simcl *pick_cluster(run *r, unsigned *i) {
  unsigned k = (unsigned)fbetween(r, 0, r->n_clusters - 1), j;
  for (j = 0; j < r->n_masters; j++)
    if (r->cl[j] != NULL && k-- == 0) {
      *i = j;
      return r->cl[j];
    }
  return NULL;
}

/* A primary of c (now) other than `not` (c->n: any), drawn; c->n when
 * there is none. */
static unsigned pick_primary(run *r, simcl *c, unsigned not) {
  unsigned k = (unsigned)fbetween(r, 0, c->n - 1), j;
  for (j = 0; j < c->n; j++) {
    unsigned x = (k + j) % c->n;
    if (x != not && sim_srv_primary(sim_cluster_srv(c, x)))
      return x;
  }
  return c->n;
}

/* A slot worth moving or bending: a lock's name's (its fencing counter
 * and read-write hash share it), the election's, or a primary's lowest
 * (its records' tag), now and then any. */
static unsigned pick_slot(run *r, simcl *c) {
  char name[8];
  unsigned k = (unsigned)fbetween(r, 0, 7);
  int lowest;
  if (k < 4) {
    snprintf(name, sizeof(name), "k%u", k % r->n_keys);
    return redlock__key_slot(name, strlen(name));
  }
  if (k == 4)
    return redlock__key_slot("e0", 2);
  lowest = sim_cluster_lowest(c, pick_primary(r, c, c->n));
  if (k < 7 && lowest >= 0)
    return (unsigned)lowest;
  return (unsigned)fbetween(r, 0, SIM_SLOTS - 1);
}

static int running_srv(const simsrv *s) {
  return s->up && s->paused_until <= s->w->now;
}

/* A crash or a stop of node s of cluster master i for *ns: within the
 * model? A replica's costs nothing (it syncs again); a primary's may
 * lose writes twice over: a restart without them, and, when it stays
 * away past the node timeout with a synced replica, the failover. When
 * only the failover would, the node comes back before it instead. */
static int cluster_stop_ok(run *r, unsigned i, simsrv *s, int crash,
                           uint64_t *ns) {
  int lossy = crash && sim_srv_loss(s) != SIM_LOSE_NOTHING;
  int failover = sim_cluster_would_fail_over(s, *ns);
  if (sim_srv_migrating(s))
    return 0;   /* nobody reshards a failing cluster (sim_cluster_migrate) */
  if (!sim_srv_primary(s) || (!lossy && !failover))
    return 1;
  if (lossy_ok(r, i, *ns + s->cl->node_timeout + 2 * SIM_S + 15 * SIM_S))
    return 1;
  if (lossy)
    return 0;
  *ns = s->cl->node_timeout / 2;
  return 1;
}

/* The takeover of a replica as it finished loading (on_fault). */
static void on_takeover(simworld *w, void *arg, uint64_t x) {
  run *r = arg;
  simsrv *s = &w->srv[x];
  if (!r->ending && running_srv(s))
    sim_cluster_failover(s, 0);
}

static void cluster_fault(run *r, unsigned kind) {
  simworld *w = &r->w;
  unsigned i = 0, x, y, k;
  simcl *c = pick_cluster(r, &i);
  if (c == NULL)
    return;
  switch (kind) {
    case F_FAILOVER: {
      simsrv *p, *heir;
      int lossless = fbetween(r, 0, 2) == 0;
      x = pick_primary(r, c, c->n);
      if (x == c->n)
        break;
      p = sim_cluster_srv(c, x);
      heir = sim_cluster_heir(c, x, 0);
      if (heir == NULL || sim_srv_migrating(p) || sim_srv_migrating(heir))
        break;
      /* A manual failover needs its primary's part; without it, only a
       * TAKEOVER. */
      if (!running_srv(p))
        lossless = 0;
      if (!lossless && !lossy_ok(r, i, 15 * SIM_S + 200 * SIM_MS)) {
        if (!running_srv(p))
          break;
        lossless = 1;
      }
      if (!lossless && fbetween(r, 0, 3) == 0) {
        /* As it finishes loading (DESIGN, guard 7.: test-cluster-failover
         * sends its TAKEOVER so). */
        uint64_t down = fbetween(r, 10, 100) * SIM_MS;
        sim_srv_crash(heir, down);
        sim_at(w, w->now + down + fbetween(r, 0, 100) * SIM_MS, NULL,
               on_takeover, r, heir->index);
        break;
      }
      sim_cluster_failover(heir, lossless);
      break;
    }
    case F_MIGRATE: {
      unsigned slot = pick_slot(r, c), lo, hi;
      simsrv *from = sim_cluster_owner(c, slot);
      if (from == NULL)
        break;
      y = pick_primary(r, c, from->node);
      if (y == c->n)
        break;
      /* That slot, or a run of slots around it that its owner has. */
      sim_cluster_range(c, slot, &lo, &hi);
      if (fbetween(r, 0, 1) == 0) {
        unsigned a = (unsigned)fbetween(r, 0, 200);
        unsigned b = (unsigned)fbetween(r, 0, 200);
        lo = slot - lo > a ? slot - a : lo;
        hi = hi - slot > b ? slot + b : hi;
      } else {
        lo = hi = slot;
      }
      (void)sim_cluster_migrate(c, from->node, y, lo, hi);
      break;
    }
    case F_DISAGREE: {
      unsigned slot = pick_slot(r, c), lo, hi;
      uint64_t ns = fbetween(r, 50, 3000) * SIM_MS;
      simsrv *owner = sim_cluster_owner(c, slot), *sx, *sy;
      int both;
      if (owner == NULL)
        break;
      /* The owner disowns them, or another primary names a third. */
      x = fbetween(r, 0, 1) == 0 ? owner->node : pick_primary(r, c, c->n);
      y = pick_primary(r, c, x);
      if (x == c->n || y == c->n)
        break;
      sx = sim_cluster_srv(c, x);
      sy = sim_cluster_srv(c, y);
      if (sim_srv_migrating(sx) || sim_srv_migrating(sy))
        break;
      /* Each names the other for all it serves, now and then: a client's
       * handshake is then sent from one to the other (test-cluster-
       * disagree's nodes). Rarer and shorter: the client reconnects
       * without a backoff there, a thousand handshakes a second, which
       * costs the simulator most of its time while it lasts. */
      both = x == owner->node && fbetween(r, 0, 3) == 0;
      if (both)
        ns = fbetween(r, 50, 1000) * SIM_MS;
      sim_cluster_range(c, slot, &lo, &hi);
      sim_cluster_bend(sx, lo, hi, y, ns);
      if (both) {
        for (k = 0; k < SIM_SLOTS; k = hi + 1) {
          simsrv *o = sim_cluster_owner(c, k);
          sim_cluster_range(c, k, &lo, &hi);
          if (o == sx)
            sim_cluster_bend(sx, lo, hi, y, ns);
          else if (o == sy)
            sim_cluster_bend(sy, lo, hi, x, ns);
        }
      }
      break;
    }
  }
}

/* A sentinel group drawn (i), or NULL when there is none. */
static simsg *pick_group(run *r, unsigned *i) {
  unsigned k = (unsigned)fbetween(r, 0, r->n_groups - 1), j;
  for (j = 0; j < r->n_masters; j++)
    if (r->sg[j] != NULL && k-- == 0) {
      *i = j;
      return r->sg[j];
    }
  return NULL;
}

/* A crash or a stop of member s of group master i for *ns: within the
 * model? A sentinel's or a replica's costs nothing; the primary's may
 * lose writes twice over: a restart without them, and, when it stays
 * away past down-after-milliseconds, the failover (lossy: a restart for
 * docs/GUARANTEES.md). When only the failover would, it comes back before. */
static int group_stop_ok(run *r, unsigned i, simsrv *s, int crash,
                         uint64_t *ns) {
  simsg *g = r->sg[i];
  int lossy, failover;
  if (s->sentinel)
    return 1;
  lossy = crash && r->guard_ms == 0 && s->node == g->primary &&
          sim_srv_loss(s) != SIM_LOSE_NOTHING;
  failover = sim_sentinel_would_fail_over(s, *ns);
  if (!lossy && !failover)
    return 1;
  if (lossy_ok(r, i, *ns + g->down_after + 2 * SIM_S + 15 * SIM_S))
    return 1;
  if (lossy)
    return 0;
  *ns = g->down_after / 2;
  return 1;
}

static void group_fault(run *r, unsigned kind) {
  simworld *w = &r->w;
  unsigned i = 0, k, n;
  simsg *g = pick_group(r, &i);
  uint64_t ns;
  if (g == NULL)
    return;
  switch (kind) {
    case F_SWITCH:
      /* Lossy (a restart for the budget): the promoted replica lacks
       * what was not replicated yet. */
      if (!lossy_ok(r, i, g->down_after + 15 * SIM_S))
        break;
      (void)sim_sentinel_switch(g);
      break;
    case F_STALE:
      sim_sentinel_stale(g, (unsigned)fbetween(r, 0, SIM_SG_SENTINELS - 1),
                         fbetween(r, 500, 5000) * SIM_MS);
      break;
    case F_SPLIT: {
      unsigned with = 0;
      /* Not a group the operator said cannot be split. */
      if (r->unchecked[i] || g->split)
        break;
      ns = fbetween(r, 1000, 20000) * SIM_MS;
      k = (unsigned)fbetween(r, 0, SIM_SG_SENTINELS - 1);
      for (n = 0; n < g->n; n++)
        if (n != g->primary && fbetween(r, 0, 1) == 0)
          with |= 1u << n;
      /* Past down-after-milliseconds the other side promotes a replica
       * (lossy for the budget), else the partition heals before. */
      if (ns >= g->down_after &&
          !lossy_ok(r, i, ns + g->down_after + 15 * SIM_S))
        ns = g->down_after / 2;
      sim_sentinel_split(g, with, k, ns);
      (void)w;
      break;
    }
  }
}

/* A crash of master i's server s, down for down_ns: now and then its wall
 * clock steps while it is down (a host that corrected its clock at boot,
 * a VM restored), by 4 ms to 0.5 s: around the drift allowances of the
 * short ttls (3-17 ms) and the long ones (22-102 ms), so that the first
 * sight of the new instance is judged with each lock's own tolerance,
 * not the longest ttl's (docs/GUARANTEES.md, the clock check; a key of a
 * declared master's AOF expires early by the step). Unseen until a
 * client reads TIME: a faulty master for the window. Drawn aside
 * (side_draw): the fault stream's draws stay. */
static int64_t crash_clock(run *r, unsigned i, uint64_t *down) {
  uint64_t z = side_draw(r, 0x3f, r->w.now / SIM_MS, 0xc10c5);
  int64_t us;
  /* A quick reboot: keys of the declared masters' AOF still live. */
  uint64_t quick = (10 + (z >> 48) % 290) * SIM_MS;
  if (z % 3 != 0 || !unseen_fault_ok(r, i, *down + r->window_ns))
    return 0;
  if (quick < *down)
    *down = quick;
  us = (int64_t)(4000ULL << ((z >> 8) % 7));
  us += (int64_t)((z >> 16) % (uint64_t)us);
  if ((z >> 40) % 4 == 0)
    us = -us;
  return us;
}

static void config_sequel(run *r, unsigned i, unsigned c);

static void on_fault(simworld *w, void *arg, uint64_t x) {
  run *r = arg;
  unsigned kinds[16], n = 0, k, i;
  uint64_t next;
  simsrv *s;
  (void)x;
  if (r->ending)
    return;
  for (k = 0; k < sizeof(fault_names) / sizeof(fault_names[0]); k++)
    if ((r->o->faults & fault_names[k].bit) &&
        fault_names[k].bit != F_FORCE &&
        (r->n_clusters > 0 || !(fault_names[k].bit & F_CLUSTER)) &&
        (r->n_groups > 0 || !(fault_names[k].bit & F_SENTINEL)))
      kinds[n++] = fault_names[k].bit;
  next = w->now + fbetween(r, 50, 1500) * SIM_MS;
  sim_at(w, next, NULL, on_fault, r, 0);
  if (n == 0)
    return;
  k = kinds[fbetween(r, 0, n - 1)];
  i = (unsigned)fbetween(r, 0, r->n_masters - 1);
  switch (k) {
    case F_CRASH: {
      uint64_t down = fbetween(r, 10, 3000) * SIM_MS;
      int64_t step;
      s = target(r, i);
      /* Now and then a plain master loses its data without a restart: it
       * is made a replica of an unrelated primary (a full sync) and a
       * master again, with the same run_id and a new replication id
       * (sim_srv_resync; test-fault-replid's case). A restart that lost
       * keys for the guard (lossy_ok); a master again no sooner than
       * 7 s later (w->repromote_gap: MASTERS.md's limit, a change
       * between two identity checks, voting meanwhile). Drawn aside.
       * Declared masters too: one that a client saw as a replica must
       * not keep the declaration's credit (a replica shows no
       * second_repl_offset), or its first YES after REPLICAOF NO ONE,
       * before the next identity check, counts though the full sync
       * lost its keys (found by this fault; guard.c, test-fault-durable-
       * replica). */
      if (r->cl[i] == NULL && r->sg[i] == NULL &&
          side_draw(r, 0x3e, w->now / SIM_MS, 0x5e5c) % 4 == 0) {
        uint64_t ns = w->repromote_gap + (down % 2000) * SIM_MS;
        if (s->up && !s->resyncing && lossy_ok(r, i, ns + r->window_ns)) {
          sim_srv_resync(s, w->base_port + (int)w->n_srv, ns);
          busy_for(r, i, w->now + ns);
          r->resync_until[i] = w->now + r->window_ns;
        }
        break;
      }
      /* A declared master restarted from a resync's data before the locks
       * it lost expired (a window) loads what no client acknowledged, and
       * nothing it reports shows it when no client saw it as a replica or
       * promoted (a crash within the first identity check): a broken
       * declaration no client can see, outside the promise (README,
       * durable). */
      if (r->declared && w->now < r->resync_until[i])
        break;
      /* A restart that loses keys is the guard's to handle; with the
       * window read from the masters' ttl record (restart_guard_ms 0),
       * the record must survive somewhere: the failure model (DESIGN,
       * "The guard's argument", 2.) allows at most N - quorum masters
       * within the window of such a restart at a time. A fixed window
       * needs no record: any number may restart. */
      if (r->cl[i] != NULL) {
        if (!cluster_stop_ok(r, i, s, 1, &down))
          break;
      } else if (r->sg[i] != NULL) {
        if (!group_stop_ok(r, i, s, 1, &down))
          break;
      } else if (sim_srv_loss(s) != SIM_LOSE_NOTHING &&
                 r->mark_keep_until[i] > w->now) {
        break;   /* it keeps another master's mark (forget_config) */
      } else if (r->guard_ms == 0 && sim_srv_loss(s) != SIM_LOSE_NOTHING &&
                 !unseen_fault_ok(r, i, down + r->window_ns)) {
        break;
      }
      step = crash_clock(r, i, &down);
      sim_srv_crash(s, down);
      forget_config(r, i, s, down);
      busy_for(r, i, w->now + down);
      if (step != 0) {
        sim_srv_step_clock(s, step);
        sim_logf(w, "server %u's clock stepped %+.3f s while it is down",
                 s->index, (double)step / 1e6);
      }
      break;
    }
    case F_PAUSE: {
      uint64_t ns;
      s = target(r, i);
      ns = fbetween(r, 10, 3000) * SIM_MS;
      if (r->cl[i] != NULL && !cluster_stop_ok(r, i, s, 0, &ns))
        break;
      if (r->sg[i] != NULL && !group_stop_ok(r, i, s, 0, &ns))
        break;
      sim_srv_pause(s, ns);
      busy_for(r, i, w->now + ns);
      break;
    }
    case F_CLOCK: {
      /* Forward steps (keys expire early: the clock check's case), and
       * back (keys live longer). */
      int64_t us = (int64_t)fbetween(r, 50, 20000) * 1000;
      if (fbetween(r, 0, 3) == 0)
        us = -us;
      s = target(r, i);
      /* Unseen until a client reads TIME: the longest ttl (10 s) and a
       * recheck's time. A cluster is faulty when any node is. */
      if (!unseen_fault_ok(r, i, r->window_ns))
        break;
      sim_srv_step_clock(s, us);
      r->clock_at[i] = w->now;
      sim_logf(w, "server %u's clock stepped %+.3f s", s->index,
               (double)us / 1e6);
      break;
    }
    case F_CUT: {
      unsigned c = (unsigned)fbetween(r, 0, r->n_actors - 1);
      int mode = (int)fbetween(r, 1, 2), dirs = (int)fbetween(r, 1, 3);
      uint64_t ms = fbetween(r, 10, 3000);
      s = target(r, i);
      sim_cut(w, c, s->index, mode, dirs);
      sim_logf(w, "cut: client %u, server %u, %s, %s, %.3f s", c, s->index,
               mode == 1 ? "held" : "dropped",
               dirs == 3 ? "both ways" : dirs == 1 ? "to the server"
                                                   : "to the client",
               (double)ms / 1e3);
      sim_at(w, w->now + ms * SIM_MS, NULL, on_heal, r,
             ((uint64_t)c << 8) | s->index);
      if (r->link_busy_until[c][i] < w->now + ms * SIM_MS)
        r->link_busy_until[c][i] = w->now + ms * SIM_MS;
      break;
    }
    case F_CPAUSE: {
      actor *a = r->actors[fbetween(r, 0, r->n_actors - 1)];
      uint64_t ms = fbetween(r, 10, 5000);
      if (a->env.dead || a->closed)
        break;
      a->env.paused_until = w->now + ms * SIM_MS;
      if (a->pause_end < a->env.paused_until)   /* pauses overlap */
        a->pause_end = a->env.paused_until;
      /* Its wait bound moves with the pause. */
      if (a->op_bound != 0)
        a->op_bound += ms * SIM_MS;
      sim_logf(w, "client %u paused for %.3f s", a->id, (double)ms / 1e3);
      break;
    }
    case F_CCRASH: {
      actor *a = r->actors[fbetween(r, 0, r->n_actors - 1)];
      if (a->env.dead || a->closed || r->n_actors < 2)
        break;
      sim_env_crash(&a->env);
      /* Its holds end with their validity; it never calls back. */
      a->op_bound = 0;
      break;
    }
    case F_CONFIG: {
      static const char *const set[4][2] = {{"appendfsync", "everysec"},
                                            {"appendfsync", "always"},
                                            {"appendonly", "no"},
                                            {"appendonly", "yes"}};
      unsigned c = (unsigned)fbetween(r, 0, 3);
      s = target(r, i);
      /* Seen at the next recheck (3 s) by a connected client; a crash
       * before that is the operator's (docs/GUARANTEES.md); then its
       * window. A server that is down takes no CONFIG SET (its next
       * instance would report what its predecessor never ran with). */
      if (!s->up || !unseen_fault_ok(r, i, r->window_ns))
        break;
      simkv_config_set(s->kv, set[c][0], set[c][1]);
      if (r->persist[i] != 3 || srv_durable(s))
        r->config_at[i] = 0;
      else if (r->config_at[i] == 0)
        r->config_at[i] = w->now;
      sim_logf(w, "server %u: CONFIG SET %s %s", s->index, set[c][0],
               set[c][1]);
      config_sequel(r, i, c);
      break;
    }
    case F_DRIFT: {
      /* Within 0.3 %: with the clients' 0.1 %, inside the drift allowance
       * (1 % of the ttl): no client need notice. */
      double rate = 1.0 + (funit(r) - 0.5) * 0.006;
      s = target(r, i);
      sim_srv_set_rate(s, rate);
      sim_logf(w, "server %u's clock runs at %.4f", s->index, rate);
      break;
    }
    case F_KILL: {
      unsigned c = (unsigned)fbetween(r, 0, r->n_actors - 1);
      s = target(r, i);
      sim_srv_kill_client(s, c);
      if (r->link_busy_until[c][i] < w->now)
        r->link_busy_until[c][i] = w->now;
      sim_logf(w, "server %u: CLIENT KILL of client %u's connections",
               s->index, c);
      break;
    }
    case F_JOIN: {
      int elect = strcmp(r->workload, "elect") == 0;
      actor *a = actor_new(r, !elect);
      if (a != NULL) {
        sim_logf(w, "client %u joins (%s)", a->id,
                 elect ? "a new candidate" : "one lock, then it exits");
        sim_at(w, w->now, &a->env, elect ? do_campaign : do_acquire, a, 0);
        /* One call in two interrupted within 200 ms (its first
         * connections), drawn aside: the other draws stay. */
        if (!elect && side_draw(r, a->id, 0, 0x1d7) % 2 == 0)
          sim_at(w, w->now + side_draw(r, a->id, 0, 0x1d8) % 200 * SIM_MS,
                 &a->env, do_interrupt, a, 1);
      }
      break;
    }
    case F_FAILOVER:
    case F_MIGRATE:
    case F_DISAGREE:
      cluster_fault(r, k);
      break;
    case F_SWITCH:
    case F_STALE:
    case F_SPLIT:
      group_fault(r, k);
      break;
  }
}

/* F_FORCE: an operator's forced release of kI, whoever holds it: DEL of
 * the key on every master that runs (redlock unlock --force also
 * deletes the read-write hash "kI:rw"; another library's force unlock,
 * or a redis-cli DEL, knows the plain key only). The holders are not
 * told (docs/CLI.md, Operator's tools): the oracle ends their intervals
 * at the force, and what they say of their validity from then on is no
 * claim; an extend that starts later is one (compare-and-pexpire: it
 * must fail where another holder's key, or none, is). Only while no
 * client has an operation on kI in flight (an attempt whose writes the
 * DEL would erase in part, granted after it), nor auto-extends or
 * re-enters it (their renewals run in the background). From a stream of
 * its own (side_draw): the other draws stay. */
static void on_force(simworld *w, void *arg, uint64_t x) {
  run *r = arg;
  uint64_t z = side_draw(r, 0x3f, r->forces++, 0xf0ce);
  unsigned k = (unsigned)(z % r->n_keys), i, n = 0;
  int rw = (z >> 8) % 2 == 0, extends = 0;
  char key[16], hash[16], chash[24];
  (void)x;
  if (r->ending)
    return;
  sim_at(w, w->now + (200 + (z >> 16) % 2800) * SIM_MS, NULL, on_force, r,
         0);
  /* Mostly the key of a holder that will extend it by hand: its extend
   * then meets what the force left (another holder's key, or none). */
  for (i = 0; (z >> 40) % 4 != 0 && i < r->n_actors; i++) {
    const actor *a = r->actors[(i + (z >> 24)) % r->n_actors];
    if (a->lock != NULL && a->extend && !a->busy && a->mode != 'S' &&
        a->keys == (a->keys & -a->keys)) {
      k = (unsigned)__builtin_ctz(a->keys);
      break;
    }
  }
  for (i = 0; i < r->n_actors; i++) {
    const actor *a = r->actors[i];
    if (a->lock == NULL || !(a->keys & (1u << k)) || a->mode == 'S' ||
        a->env.dead || a->closed)
      continue;
    if (a->busy || a->auto_extend || a->reentrant || a->keys != 1u << k)
      return;
  }
  snprintf(key, sizeof(key), "k%u", k);
  snprintf(hash, sizeof(hash), "k%u:rw", k);
  snprintf(chash, sizeof(chash), "{k%u}:rw", k);
  for (i = 0; i < r->n_masters; i++) {
    /* Every node of a cluster or a sentinel group that runs, as redis-cli
     * on each would (unlock --force reaches every master: docs/CLI.md);
     * a plain master that is down keeps the key. Not only the plain
     * masters: a force that left the holder's keys on the clusters let
     * its extend count them and one master that had rolled the DEL back
     * (a restart from a snapshot before it), over the name's new holder
     * (seed 1883023883064742). */
    unsigned nodes = r->cl[i] != NULL ? r->cl[i]->n
                     : r->sg[i] != NULL ? r->sg[i]->n : 1, j, hit = 0;
    for (j = 0; j < nodes; j++) {
      simsrv *sv = r->cl[i] != NULL ? sim_cluster_srv(r->cl[i], j)
                   : r->sg[i] != NULL ? sim_sentinel_node(r->sg[i], j)
                                      : &w->srv[r->first[i]];
      const char *del[3] = {"DEL", key, r->cl[i] != NULL ? chash : hash};
      simkv_out out = {NULL, 0, 0};
      if (!sv->up)
        continue;
      kv_run(sv, rw ? 3 : 2, del, &out);
      simkv_out_free(&out);
      hit = 1;
    }
    n += hit;
  }
  for (i = 0; n > 0 && i < r->n_actors; i++) {
    holder *h = &r->hold[i][k];
    if (h->held && h->mode != 'S' && h->end > w->now) {
      h->end = w->now;
      r->actors[i]->forced = 1;
      extends |= r->actors[i]->extend;
    }
  }
  sim_logf(w, "operator: DEL %s%s on %u masters (a forced release)", key,
           rw ? " and its read-write hash" : "", n);
  /* Half the time when a holder will extend, someone takes the name at
   * once (a CLI call; test-redis-rwlock-modes d): another lock over a
   * holder that still believes it holds). */
  if (extends && (z >> 32) % 2 == 0) {
    actor *a = actor_new(r, 1);
    if (a != NULL) {
      a->want = k + 1;
      sim_logf(w, "client %u joins (a plain lock of %s)", a->id, key);
      sim_at(w, w->now + (z >> 48) % 20 * SIM_MS, &a->env, do_acquire, a, 0);
    }
  }
}

/* A durability setting dropped at run time under an AOF-always plain
 * master (N >= 3), and what follows (test-fault-durable-marks' scenario,
 * which the independent faults rarely line up): 6.5-9 s later that
 * master crashes (forget_config: its next instance reports the config
 * file's durability), a fresh client (a CLI call) joins as it comes back
 * (half the time cut from the other plain masters for 0.1-0.4 s, bytes
 * held, so that its first read of them fails), and 0.3-1.5 s before the
 * crash N - quorum other plain masters start refusing writes
 * (NOREPLICAS, as a master whose replicas lag) until about the crash, so
 * that what is acquired meanwhile rests on the crashed one and the
 * rest; whoever holds a lock at the crash stops until its validity
 * ends (a GC pause). Two times in three the other plain masters also
 * refuse writes (NOREPLICAS) for 3.5-5 s from the drop, so that every
 * client's mark is refused first, and the crash comes 9.5-11 s after
 * they take writes again. The draws are side draws (the main streams as
 * they were until it happens). */
enum { SQ_CRASH = 1, SQ_JOIN, SQ_REFUSE, SQ_TAKE };

static void on_sequel(simworld *w, void *arg, uint64_t x) {
  run *r = arg;
  unsigned kind = (unsigned)(x & 0xff), i = (unsigned)((x >> 8) & 0xff), c;
  uint64_t ms = x >> 16;
  simsrv *s = &w->srv[r->first[i]];
  if (r->ending)
    return;
  switch (kind) {
    case SQ_CRASH: {
      uint64_t down = ms * SIM_MS;
      int lossy = sim_srv_loss(s) != SIM_LOSE_NOTHING;
      if (!s->up || r->config_at[i] == 0 ||
          (lossy && r->mark_keep_until[i] > w->now) ||
          (r->guard_ms == 0 && lossy &&
           !unseen_fault_ok(r, i, down + 15 * SIM_S)))
        break;
      sim_srv_crash(s, down);
      forget_config(r, i, s, down);
      busy_for(r, i, w->now + down);
      sim_at(w, w->now + down + side_draw(r, i, w->now, 0x501) % 300 * SIM_MS,
             NULL, on_sequel, r, SQ_JOIN | (uint64_t)i << 8);
      /* Whoever holds a lock now stops (a GC pause) until its validity
       * ends: it neither releases nor extends meanwhile. */
      for (c = 0; c < r->n_actors; c++) {
        actor *a = r->actors[c];
        uint64_t end = 0, ns;
        unsigned k;
        for (k = 0; k < r->n_keys; k++)
          if (r->hold[c][k].held && r->hold[c][k].end > end)
            end = r->hold[c][k].end;
        if (a->env.dead || a->closed || end <= w->now + 100 * SIM_MS ||
            a->env.paused_until > w->now)
          continue;
        ns = end - w->now + 50 * SIM_MS;
        if (ns > 3 * SIM_S)
          ns = 3 * SIM_S;
        a->env.paused_until = w->now + ns;
        if (a->pause_end < a->env.paused_until)
          a->pause_end = a->env.paused_until;
        if (a->op_bound != 0)
          a->op_bound += ns;
        sim_logf(w, "client %u paused for %.3f s", a->id, (double)ns / 1e9);
      }
      break;
    }
    case SQ_JOIN: {
      int elect = strcmp(r->workload, "elect") == 0;
      actor *a = actor_new(r, !elect);
      uint64_t z = side_draw(r, i, w->now, 0x10b), hold;
      unsigned j;
      if (a == NULL)
        break;
      sim_logf(w, "client %u joins (%s)", a->id,
               elect ? "a new candidate" : "one lock, then it exits");
      sim_at(w, w->now, &a->env, elect ? do_campaign : do_acquire, a, 0);
      /* Half the time its links to the other plain masters are held a
       * while (its first reads of them, the marks among them, time
       * out). */
      hold = (100 + (z >> 8) % 300) * SIM_MS;
      for (j = 0; z % 2 == 0 && j < r->n_masters; j++) {
        unsigned sv = r->first[j];
        if (j == i || r->cl[j] != NULL || r->sg[j] != NULL)
          continue;
        sim_cut(w, a->id, sv, 1, 3);
        sim_at(w, w->now + hold, NULL, on_heal, r,
               ((uint64_t)a->id << 8) | sv);
        r->link_busy_until[a->id][j] = w->now + hold;
        sim_logf(w, "cut: client %u, server %u, held, both ways, %.3f s",
                 a->id, sv, (double)hold / 1e9);
      }
      break;
    }
    case SQ_REFUSE:
      simkv_config_set(s->kv, "min-replicas-to-write", "1");
      if (r->refuse_until[i] < w->now + ms * SIM_MS)
        r->refuse_until[i] = w->now + ms * SIM_MS;
      sim_at(w, w->now + ms * SIM_MS, NULL, on_sequel, r,
             SQ_TAKE | (uint64_t)i << 8);
      sim_logf(w, "server %u refuses writes (NOREPLICAS) for %.3f s",
               s->index, (double)ms / 1e3);
      break;
    case SQ_TAKE:
      if (r->refuse_until[i] <= w->now) {
        simkv_config_set(s->kv, "min-replicas-to-write", "0");
        sim_logf(w, "server %u takes writes again", s->index);
      }
      break;
  }
}

static void config_sequel(run *r, unsigned i, unsigned c) {
  simworld *w = &r->w;
  uint64_t z = side_draw(r, i, w->now / SIM_MS, 0xc0f), at, refuse_ms, before;
  unsigned j, k, n = 0, pick, left;
  if (r->cl[i] != NULL || r->sg[i] != NULL || r->persist[i] != 3 ||
      (c != 0 && c != 2) || r->n_masters < 3)
    return;
  at = w->now + (6500 + (z >> 8) % 2500) * SIM_MS;
  if ((z >> 20) % 3 != 0) {
    uint64_t ms = 3500 + (z >> 24) % 1500;
    for (j = 0; j < r->n_masters; j++)
      if (j != i && r->cl[j] == NULL && r->sg[j] == NULL)
        on_sequel(w, r, SQ_REFUSE | (uint64_t)j << 8 | ms << 16);
    at = w->now + (ms + 9500 + (z >> 36) % 1500) * SIM_MS;
  }
  /* N - quorum other plain masters from a rotation's start refuse
   * writes until about the crash. */
  for (j = 0; j < r->n_masters; j++)
    n += j != i && r->cl[j] == NULL && r->sg[j] == NULL;
  pick = n > 0 ? (unsigned)((z >> 44) % n) : 0;
  before = (300 + (z >> 52) % 1200) * SIM_MS;
  refuse_ms = before / SIM_MS + (z >> 56) % 200;
  for (k = 0, left = r->n_masters - (r->n_masters / 2 + 1); k < r->n_masters;
       k++) {
    j = (i + 1 + pick + k) % r->n_masters;
    if (left == 0 || j == i || r->cl[j] != NULL || r->sg[j] != NULL)
      continue;
    sim_at(w, at - before, NULL, on_sequel, r,
           SQ_REFUSE | (uint64_t)j << 8 | refuse_ms << 16);
    left--;
  }
  sim_at(w, at, NULL, on_sequel, r,
         SQ_CRASH | (uint64_t)i << 8 | (20 + (z >> 12) % 400) << 16);
}

/* ---- a seed -------------------------------------------------------------- */

/* Master i's shape, from the seed alone (before the world exists: it
 * says how many servers there are), on a stream of its own: a plain
 * deployment draws nothing here, so its runs are those of a simulator
 * without clusters. Mixed: a master is a cluster one time in five (a
 * cluster costs the client a topology read at every handshake and
 * failure: several times a plain master's CPU). A cluster: 2-3
 * primaries, each with a replica three times in four; one in five speaks
 * Redis 6.2 (no CLUSTER SHARDS). */
static void draw_shape(run *r, uint64_t *topo, unsigned i) {
  const char *t = r->o->topology;
  uint64_t z;
  unsigned p;
  r->primaries[i] = r->replica_mask[i] = 0;
  r->old_redis[i] = 0;
  r->replicas[i] = 0;
  r->nodes[i] = 1;
  if (strcmp(t, "plain") == 0)
    return;
  z = *topo += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  if (strcmp(t, "mixed") == 0 && z % 5 != 0)
    return;
  if (strcmp(t, "sentinel") == 0 ||
      (strcmp(t, "mixed") == 0 && (z >> 40) % 2 == 0)) {
    /* A sentinel group: a primary, 1-3 replicas, three sentinels. */
    r->replicas[i] = 1 + (unsigned)((z >> 8) % 3);
    r->nodes[i] = 1 + r->replicas[i] + SIM_SG_SENTINELS;
    r->n_groups++;
    return;
  }
  r->primaries[i] = 2 + (unsigned)((z >> 8) % 2);
  for (p = 0; p < r->primaries[i]; p++)
    if ((z >> (16 + 2 * p)) % 4 != 0)
      r->replica_mask[i] |= 1u << p;
  r->old_redis[i] = (z >> 32) % 5 == 0;
  r->nodes[i] = r->primaries[i];
  for (p = 0; p < r->primaries[i]; p++)
    r->nodes[i] += (r->replica_mask[i] >> p) & 1;
  r->n_clusters++;
}

/* A sentinel group master: its nodes and sentinels, how its primary
 * is configured (drawn: as the library requires, min-replicas-to-write
 * at least half the replicas and min-replicas-max-lag 1-2 s; Redis's
 * default 0, or too few for its replicas, which the library must refuse;
 * or one of those with ?isolation=unchecked, a group never split), and
 * down-after-milliseconds (at least min-replicas-max-lag + 2 s, the
 * operator's part: docs/MASTERS.md). The URIs are each client's (actor_new). */
static void deploy_group(run *r, unsigned i) {
  simworld *w = &r->w;
  unsigned rep = r->replicas[i], k, kind = (unsigned)sim_between(w, 0, 9);
  unsigned m, lag;
  char name[16], buf[16];
  simsg *g;
  if (kind < 5 || kind >= 8) {
    m = (rep + 1) / 2;
    if (m < rep && sim_between(w, 0, 3) == 0)
      m++;
    lag = (unsigned)sim_between(w, 1, 2);
  } else if (kind < 7) {
    m = 0;
    lag = 10;
  } else if (rep == 3) {
    m = 1;   /* 2 x 1 < 3: two sides could each have one */
    lag = 1;
  } else {
    m = 1;
    lag = 0;   /* Redis disables the check */
  }
  if (kind == 9 && rep == 3) {
    m = 1;
    lag = 1;
  }
  r->unchecked[i] = kind >= 8;
  snprintf(name, sizeof(name), "g%u", i);
  g = sim_sentinel_new(w, r->first[i], rep, name,
                       (lag <= 2 ? lag * 1000 : 0) + 2000 +
                           sim_between(w, 0, 3000));
  r->sg[i] = g;
  for (k = 0; k <= rep; k++) {
    simsrv *s = sim_sentinel_node(g, k);
    snprintf(buf, sizeof(buf), "%u", m);
    simkv_config_set(s->kv, "min-replicas-to-write", buf);
    snprintf(buf, sizeof(buf), "%u", lag);
    simkv_config_set(s->kv, "min-replicas-max-lag", buf);
  }
  snprintf(r->servers[i], sizeof(r->servers[i]),
           "redis+sentinel://127.0.0.1:%d/%s", sim_sentinel_srv(g, 0)->port,
           name);
}

/* A cluster master: its nodes, and its URI (a seed node and one or two
 * more, from any node: a seed may be a replica). */
static void deploy_cluster(run *r, unsigned i) {
  simworld *w = &r->w;
  unsigned n = r->nodes[i], k, start = (unsigned)sim_between(w, 0, n - 1);
  unsigned more = (unsigned)sim_between(w, 0, 2);
  size_t len;
  r->cl[i] = sim_cluster_new(w, r->first[i], r->primaries[i],
                             r->replica_mask[i], r->old_redis[i]);
  len = (size_t)snprintf(r->servers[i], sizeof(r->servers[i]),
                         "redis+cluster://127.0.0.1:%d",
                         w->srv[r->first[i] + start].port);
  for (k = 1; k <= more && k < n; k++)
    len += (size_t)snprintf(r->servers[i] + len, sizeof(r->servers[i]) - len,
                            "%s127.0.0.1:%d", k == 1 ? "?seed=" : "&seed=",
                            w->srv[r->first[i] + (start + k) % n].port);
}

/* SET the ttl record on server s, as a client did before the run. */
static void preset_record(simsrv *s, int64_t ms) {
  char num[24];
  const char *argv[3] = {"SET", "__redlock__:maxttl", num};
  size_t lens[3];
  simkv_conn kc = {0, 1, 0};
  simkv_ctx ctx;
  simkv_out o;
  memset(&ctx, 0, sizeof(ctx));
  memset(&o, 0, sizeof(o));
  ctx.now_us = sim_srv_wall_us(s);
  ctx.info = &s->info;
  lens[0] = 3;
  lens[1] = strlen(argv[1]);
  lens[2] = (size_t)snprintf(num, sizeof(num), "%" PRId64, ms);
  if (simkv_exec(s->kv, &kc, &ctx, 3, argv, lens, &o) < 0) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  simkv_out_free(&o);
}

static void deploy(run *r) {
  simworld *w = &r->w;
  unsigned i;
  r->declared = (int)sim_between(w, 0, 1);
  if (r->o->durable)
    r->declared = 1;
  for (i = 0; i < r->n_masters; i++) {
    simsrv *s = &w->srv[r->first[i]];
    unsigned p = (unsigned)sim_between(w, 0, 3), k;
    if (r->o->durable)
      p = 3;
    r->persist[i] = p;
    /* Persistence: none, RDB snapshots, AOF everysec, AOF always (a
     * cluster's nodes alike, as one unit file starts them). */
    for (k = 0; k < r->nodes[i]; k++) {
      simsrv *n = &w->srv[r->first[i] + k];
      simkv_config_set(n->kv, "appendonly", p >= 2 ? "yes" : "no");
      simkv_config_set(n->kv, "appendfsync", p == 3 ? "always" : "everysec");
      if (p == 1)
        sim_srv_snapshot(n);
    }
    if (r->replicas[i] > 0) {
      deploy_group(r, i);
      sim_logf(w, "master %u: a sentinel group of servers %u-%u (primary "
               "%u, %u replicas, sentinels %u-%u; min-replicas-to-write "
               "%s, min-replicas-max-lag %s, down-after %.3f s%s): %s", i,
               r->first[i], r->first[i] + r->nodes[i] - 1, r->first[i],
               r->replicas[i], r->sg[i]->sfirst,
               r->sg[i]->sfirst + SIM_SG_SENTINELS - 1,
               simkv_config(s->kv, "min-replicas-to-write"),
               simkv_config(s->kv, "min-replicas-max-lag"),
               (double)r->sg[i]->down_after / 1e9,
               r->unchecked[i] ? ", ?isolation=unchecked" : "",
               p == 0 ? "no persistence" : p == 1 ? "RDB snapshots"
               : p == 2 ? "AOF everysec" : "AOF always");
    } else if (r->primaries[i] == 0) {
      snprintf(r->servers[i], sizeof(r->servers[i]), "127.0.0.1:%d",
               s->port);
      sim_logf(w, "server %u: %s", i,
               p == 0 ? "no persistence" : p == 1 ? "RDB snapshots"
               : p == 2 ? "AOF everysec" : "AOF always");
    } else {
      deploy_cluster(r, i);
      sim_logf(w, "master %u: a cluster of servers %u-%u (%u primaries, "
               "replicas %#x%s, node timeout %.3f s): %s", i, r->first[i],
               r->first[i] + r->nodes[i] - 1, r->primaries[i],
               r->replica_mask[i], r->old_redis[i] ? ", Redis 6.2" : "",
               (double)r->cl[i]->node_timeout / 1e9,
               p == 0 ? "no persistence" : p == 1 ? "RDB snapshots"
               : p == 2 ? "AOF everysec" : "AOF always");
    }
    r->server_ptrs[i] = r->servers[i];
    /* N = 1: the ttl record lives on the one master a restart can erase
     * or roll back, so each client knows only its own ttls (redlock.h,
     * restart_guard_ms): such a deployment fixes the window at its
     * longest ttl (the workload's: 10 s), as docs/GUARANTEES.md says. A single
     * cluster keeps the record on each primary, which survives a lossy
     * failover or restart of one shard (DESIGN, guard 7.): its record
     * is used a quarter of the time, with such faults one at a time
     * (lossy_ok). */
    if (r->n_masters == 1 && r->primaries[i] == 0 && p != 3)
      r->guard_ms = 10000;
    if (r->n_masters == 1 && r->primaries[i] > 0 && sim_between(w, 0, 3) != 0)
      r->guard_ms = 10000;
    /* A single group keeps its record on its primary only, which a
     * failover may lose (replication is asynchronous). */
    if (r->n_masters == 1 && r->replicas[i] > 0)
      r->guard_ms = 10000;
  }
  /* A fixed restart window (any number of masters may restart), now and
   * then, else the ttl record's. */
  if (r->guard_ms == 0 && sim_between(w, 0, 3) == 0)
    r->guard_ms = 10000;
  if (r->guard_ms == 0 && side_draw(r, 0, 0, 0x77c) % 3 == 0)
    r->max_ttl_ms = 10000;
  /* Plain masters whose ttl record an earlier client raised to 20 s, now
   * and then (a lock of a longer ttl than the workload's, once): the
   * window, and the clock check's tolerance at an instance's first sight
   * (settle: the longest ttl's), are then wider than any lock's own
   * drift allowance by more (docs/GUARANTEES.md, the clock check). */
  r->window_ns = 15 * SIM_S;
  if (r->guard_ms == 0 && r->max_ttl_ms == 0 && r->n_clusters == 0 &&
      r->n_groups == 0 && r->n_masters >= 3 &&
      side_draw(r, 0, 0, 0x5ec) % 3 == 0) {
    r->record_ms = 20000;
    r->window_ns = (uint64_t)r->record_ms * SIM_MS + 5 * SIM_S;
    for (i = 0; i < r->n_masters; i++)
      preset_record(&w->srv[r->first[i]], r->record_ms);
  }
  sim_logf(w, "clients: restart_guard_ms %d, max_ttl_ms %d, %s; ttl record "
           "%" PRId64 " ms", r->guard_ms, r->max_ttl_ms,
           r->declared ? "masters declared durable" : "undeclared",
           r->record_ms);
}

/* RDB snapshots now and then (the servers that save). */
static void on_bgsave(simworld *w, void *arg, uint64_t x) {
  run *r = arg;
  unsigned i;
  (void)x;
  if (r->ending)
    return;
  for (i = 0; i < w->n_srv; i++)
    if (w->srv[i].rdb != NULL && sim_between(w, 0, 3) == 0)
      sim_srv_snapshot(&w->srv[i]);
  sim_at(w, w->now + sim_between(w, 500, 5000) * SIM_MS, NULL, on_bgsave, r,
         0);
}

static size_t peak_worst;   /* the largest peak of a seed's run */

static int run_seed(const opts *o, uint64_t seed, int logging,
                    uint64_t *grants, uint64_t *trace) {
  size_t mem_base = mem_live;
  run *r = calloc(1, sizeof(*r));
  simworld *w;
  unsigned i, n_clients;
  uint64_t end;
  int closing;
  if (r == NULL)
    return -1;
  mem_peak = mem_live;
  r->o = o;
  r->seed = seed;
  r->frng = seed ^ 0x5eed5eed5eed5eedULL;
  w = &r->w;
  {
    /* How many masters comes first, from the seed alone. */
    static const unsigned ns[] = {1, 3, 5, 7};
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
    r->n_masters = o->masters > 0 ? (unsigned)o->masters
                                  : ns[(z >> 33) % 4];
    r->workload = strcmp(o->workload, "any") != 0
                      ? o->workload
                      : workloads[(z >> 13) % (sizeof(workloads) /
                                               sizeof(workloads[0]))];
  }
  {
    uint64_t topo = seed ^ 0x70b0c0de70b0c0deULL;
    unsigned n_srv = 0;
    for (i = 0; i < r->n_masters; i++) {
      draw_shape(r, &topo, i);
      r->first[i] = n_srv;
      n_srv += r->nodes[i];
    }
    sim_init(w, seed, n_srv, 7000, MAX_CLIENTS);
  }
  /* docs/MASTERS.md, Redis Cluster: "a node demoted and promoted again
   * between two identity checks (one second), and voting meanwhile, is
   * seen only at the next check" (a vote from the old instance, whose
   * writes the new one may lack). Outside the promise, so never here: a
   * node is promoted again no sooner than 7 s after its demotion, two
   * checks apart even for a client stopped meanwhile (F_CPAUSE: up to
   * 5 s). */
  w->repromote_gap = 7 * SIM_S;
  r->logging = logging;
  w->log = logging ? run_log : NULL;
  w->log_arg = r;
  if (getenv("REDLOCK_SIM_TRACE_CLIENT") != NULL)
    w->trace_client = atoi(getenv("REDLOCK_SIM_TRACE_CLIENT"));
  deploy(r);
  r->n_keys = (unsigned)sim_between(w, 1, 3);
  /* Each key's semaphore limit: from the seed, not the world's draws (a
   * workload without semaphores draws as before). */
  for (i = 0; i < MAX_KEYS; i++)
    r->sem_limit[i] = 1 + (unsigned)(((seed + i) * 0x9e3779b97f4a7c15ULL) >>
                                     61) % 3;
  n_clients = o->clients > 0 ? (unsigned)o->clients
                             : (unsigned)sim_between(w, 2, 5);
  for (i = 0; i < n_clients; i++) {
    actor *a = actor_new(r, 0);
    if (a == NULL)
      break;
    sim_at(w, w->now + sim_between(w, 0, 100) * SIM_MS, &a->env,
           strcmp(r->workload, "elect") == 0 ? do_campaign : do_acquire, a,
           0);
  }
  if (o->faults != 0)
    sim_at(w, w->now + sim_between(w, 100, 1000) * SIM_MS, NULL, on_fault, r,
           0);
  /* Forced releases where a holder extends or reads and writes share a
   * name (the workloads whose holders can meet a key not theirs), on a
   * deployment with a plain master. */
  for (i = 0; i < r->n_masters && (r->cl[i] != NULL || r->sg[i] != NULL);
       i++)
    ;
  if ((o->faults & F_FORCE) && i < r->n_masters &&
      (workload_is(r, "extend") || workload_is(r, "rw") ||
       strcmp(r->workload, "late") == 0))
    sim_at(w, w->now + (300 + side_draw(r, 0x3f, 0, 0xf0cf) % 2000) * SIM_MS,
           NULL, on_force, r, 0);
  sim_at(w, w->now + SIM_S, NULL, on_bgsave, r, 0);
  end = w->now + (uint64_t)(o->sim_seconds * 1e9);
  r->end_ns = end;
  while (sim_step(w, end))
    ;
  /* The end: no new work; every cut heals, every process runs again, the
   * clients close, and the world runs until nothing is left. */
  r->ending = 1;
  w->stopping = 1;
  for (i = 0; i < r->n_masters; i++)
    if (r->sg[i] != NULL) {
      unsigned k;
      sim_sentinel_heal(r->sg[i]);
      for (k = 0; k < SIM_SG_SENTINELS; k++)
        r->sg[i]->stale_until[k] = 0;
    }
  w->periodic_until = w->now + 5 * SIM_S;
  for (i = 0; i < r->n_actors; i++) {
    unsigned s;
    for (s = 0; s < w->n_srv; s++)
      sim_cut(w, i, s, 0, 3);
  }
  for (i = 0; i < r->n_masters; i++)
    if (r->refuse_until[i] > w->now)
      simkv_config_set(w->srv[r->first[i]].kv, "min-replicas-to-write", "0");
  for (i = 0; i < r->n_actors; i++) {
    actor *a = r->actors[i];
    a->env.paused_until = 0;
    sim_env_revive(&a->env);
  }
  /* Every fault heals (cuts above; servers come back, stopped ones go
   * on), the clients still running: 5 s for kept releases to arrive. */
  {
    uint64_t until = w->now + 5 * SIM_S;
    unsigned s;
    while (sim_step(w, until))
      ;
    for (s = 0; s < r->n_masters; s++) {
      unsigned k;
      for (k = 0; k < r->n_keys; k++) {
        char name[16];
        size_t len, t;
        const char *v;
        simsrv *sv;
        snprintf(name, sizeof(name), "k%u", k);
        /* A cluster's key is on its slot's owner. */
        sv = r->cl[s] != NULL
                 ? sim_cluster_owner(r->cl[s],
                                     redlock__key_slot(name, strlen(name)))
             : r->sg[s] != NULL ? sim_sentinel_primary(r->sg[s])
                                : &w->srv[r->first[s]];
        if (sv == NULL || !sv->up)
          continue;
        v = simkv_get(sv->kv, name, strlen(name), sim_srv_wall_us(sv), &len);
        if (v == NULL || len != 40)
          continue;
        for (t = 0; t < r->n_released; t++)
          if (memcmp(r->released[t].token, v, 40) == 0 &&
              /* Released before the faults healed: one released since
               * (a hold that ran on) has had less than 5 s to land. */
              r->released[t].at < r->end_ns &&
              /* A restart since may have rolled the release back (an
               * AOF everysec, a snapshot): the key then lives its ttl;
               * so may a promotion (the release not replicated yet). */
              sv->data_ns < r->released[t].at &&
              /* So may a group's old primary that still took it (a
               * client that had not heard of the switch) when it was
               * made a replica, or will be (it still believes it
               * leads). */
              (r->sg[s] == NULL ||
               (!(r->released[t].stale & (1u << s)) &&
                !sim_sentinel_deposed_leads(r->sg[s]))) &&
              /* A cluster's likewise (a failover's old primary). */
              (r->cl[s] == NULL ||
               (!(r->released[t].stale & (1u << s)) &&
                !sim_cluster_deposed_leads(r->cl[s]))) &&
              /* A release that the master refused (NOREPLICAS: an
               * answer, not sent again) leaves the key its ttl. */
              (r->refuse_until[s] == 0 ||
               r->released[t].at > r->refuse_until[s] + SIM_S) &&
              /* A client that exited (a CLI call) keeps no release: a
               * master it could not reach then (stopped, cut off)
               * keeps the key until its ttl (redlock.h, client close:
               * best effort, bounded by the command timeout). */
              !r->actors[r->released[t].by]->closed &&
              /* A client paused past the faults' end (a pause drawn
               * shortly before it runs on: seed 1883025229743706, paused
               * until 4.3 s after) has had less than 5 s to send what it
               * kept; a crashed one sends nothing. */
              r->actors[r->released[t].by]->pause_end + 5 * SIM_S <=
                  w->now &&
              !r->actors[r->released[t].by]->env.dead) {
            violation(r, "k%u is still on server %u under a token whose "
                      "release succeeded (%.40s, client %u at %.6f s), 5 s "
                      "after every fault healed", k, sv->index, v,
                      r->released[t].by,
                      (double)r->released[t].at / 1e9);
            break;
          }
      }
    }
  }
  closing = 0;
  for (i = 0; i < r->n_actors; i++) {
    actor *a = r->actors[i];
    if (!a->closed) {
      a->closed = 1;
      redlock_client_close(a->client, NULL, NULL);
      closing++;
    }
  }
  (void)closing;
  while (sim_step(w, UINT64_MAX))
    ;
  /* Every client closed: what they allocated is back, and a released
   * lock left nothing on a master once every fault healed (kept
   * releases reach a master that was cut off or down). */
  /* Reconnects back off: no storm (OPENS_PER_SECOND_MAX). */
  for (i = 0; i < r->n_actors; i++) {
    actor *a = r->actors[i];
    if (a->env.opens_most > OPENS_PER_SECOND_MAX)
      violation(r, "client %u opened %u connections to server %u within one "
                "second (a reconnect storm: the bound is %u)", a->id,
                a->env.opens_most, a->env.opens_most_srv,
                OPENS_PER_SECOND_MAX);
  }
  if (mem_live != mem_base)
    violation(r, "%zu bytes of the library still allocated after every "
              "client closed", mem_live - mem_base);
  if (mem_peak - mem_base > peak_worst)
    peak_worst = mem_peak - mem_base;
  if (mem_peak - mem_base > 32u << 20)
    violation(r, "the library's memory peaked at %zu bytes (32 MB is the "
              "bound for this many clients)", mem_peak - mem_base);
  *grants += r->grants;
  *trace ^= w->trace + seed;
  *trace *= 1099511628211ULL;
  {
    int v = (int)r->violations;
    sim_free(w);
    for (i = 0; i < r->n_actors; i++)
      free(r->actors[i]);
    free(r->released);
    free(r);
    return v;
  }
}

/* ---- main ---------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: redlock-sim [--seconds S [--wall-cap W] | --seeds K] "
          "[--seed S] [--sim-seconds T]\n"
          "                   [--workload plain|fence|extend|auto|rw|multi|"
          "reentrant|elect|mixed|late|sem] "
          "[--faults LIST|all|none]\n"
          "                   [--masters N] "
          "[--topology plain|cluster|sentinel|mixed] [--clients C]\n"
          "                   [--durable] [--twice] [--shrink] "
          "[--verbose]\n"
          "faults: crash,pause,clock,cut,client-pause,client-crash,config,"
          "join,drift,kill,failover,migrate,disagree,switch,stale,split,"
          "force\n");
}

static int parse_faults(const char *s, unsigned *out) {
  char buf[256], *tok, *save = NULL;
  *out = 0;
  if (strcmp(s, "all") == 0) {
    *out = F_ALL;
    return 0;
  }
  if (strcmp(s, "none") == 0)
    return 0;
  snprintf(buf, sizeof(buf), "%s", s);
  for (tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    size_t k;
    int found = 0;
    for (k = 0; k < sizeof(fault_names) / sizeof(fault_names[0]); k++)
      if (strcmp(tok, fault_names[k].name) == 0) {
        *out |= fault_names[k].bit;
        found = 1;
      }
    if (!found) {
      fprintf(stderr, "redlock-sim: unknown fault '%s'\n", tok);
      return -1;
    }
  }
  return 0;
}

static double mono_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void opts_default(opts *o) {
  memset(o, 0, sizeof(*o));
  o->seeds = 1;
  o->sim_seconds = 30;
  o->faults = F_ALL;
  o->workload = "plain";
  o->faults_arg = "all";
  o->topology = "mixed";
}

/* argv[from..argc) into *o: 0, or -1 (said why). */
static int parse_opts(opts *o, int argc, char **argv, int from) {
  int i;
  for (i = from; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--verbose") == 0) {
      o->verbose = 1;
      continue;
    }
    if (strcmp(a, "--twice") == 0) {
      o->twice = 1;
      continue;
    }
    if (strcmp(a, "--stop-at-first") == 0) {
      o->stop_at_first = 1;
      continue;
    }
    if (strcmp(a, "--shrink") == 0) {
      o->shrink = 1;
      continue;
    }
    if (strcmp(a, "--durable") == 0) {
      o->durable = 1;
      continue;
    }
    if (v == NULL) {
      usage();
      return -1;
    }
    i++;
    if (strcmp(a, "--seconds") == 0) {
      o->wall_seconds = atof(v);
      o->seeds = 0;
    } else if (strcmp(a, "--wall-cap") == 0) {
      o->wall_cap = atof(v);
    } else if (strcmp(a, "--seeds") == 0) {
      o->seeds = (unsigned)strtoul(v, NULL, 10);
    } else if (strcmp(a, "--seed") == 0) {
      o->seed = strtoull(v, NULL, 10);
      o->seed_given = 1;
    } else if (strcmp(a, "--sim-seconds") == 0) {
      o->sim_seconds = atof(v);
    } else if (strcmp(a, "--workload") == 0) {
      o->workload = v;
      size_t k;
      int known = strcmp(v, "any") == 0 || strcmp(v, "late") == 0 ||
                  strcmp(v, "sem") == 0;
      for (k = 0; k < sizeof(workloads) / sizeof(workloads[0]); k++)
        known |= strcmp(v, workloads[k]) == 0;
      if (!known) {
        fprintf(stderr, "redlock-sim: unknown workload '%s'\n", v);
        return -1;
      }
    } else if (strcmp(a, "--faults") == 0) {
      if (parse_faults(v, &o->faults) != 0)
        return -1;
      o->faults_arg = v;
    } else if (strcmp(a, "--topology") == 0) {
      if (strcmp(v, "plain") != 0 && strcmp(v, "cluster") != 0 &&
          strcmp(v, "sentinel") != 0 && strcmp(v, "mixed") != 0) {
        fprintf(stderr, "redlock-sim: --topology plain, cluster, sentinel "
                "or mixed\n");
        return -1;
      }
      o->topology = v;
    } else if (strcmp(a, "--masters") == 0) {
      o->masters = atoi(v);
      if (o->masters < 1 || o->masters > MAX_MASTERS) {
        fprintf(stderr, "redlock-sim: --masters 1..%d\n", MAX_MASTERS);
        return -1;
      }
    } else if (strcmp(a, "--clients") == 0) {
      o->clients = atoi(v);
      if (o->clients < 1 || o->clients > MAX_CLIENTS / 2) {
        fprintf(stderr, "redlock-sim: --clients 1..%d\n", MAX_CLIENTS / 2);
        return -1;
      }
    } else {
      usage();
      return -1;
    }
  }
  if (o->sim_seconds <= 0 || (o->seeds == 0 && o->wall_seconds <= 0)) {
    usage();
    return -1;
  }
  return 0;
}

/* One quiet run of o's seed: its violations. */
static int quiet_run(const opts *o) {
  uint64_t g = 0, t = 0;
  return run_seed(o, o->seed, 0, &g, &t);
}

static void faults_name(opts *o) {
  size_t k, n = 0;
  o->faults_buf[0] = '\0';
  for (k = 0; k < sizeof(fault_names) / sizeof(fault_names[0]); k++)
    if (o->faults & fault_names[k].bit)
      n += (size_t)snprintf(o->faults_buf + n, sizeof(o->faults_buf) - n,
                            "%s%s", n ? "," : "", fault_names[k].name);
  o->faults_arg = o->faults ? o->faults_buf : "none";
}

/* --shrink: the same seed with a shorter run (the schedule's prefix is
 * the same: the first violation's time bounds it), then without each
 * kind of fault and with fewer clients, while a violation remains (those
 * change the schedule: the result is a smaller failing run, not the same
 * one). Prints the command that replays it. */
static int run_shrink(opts *o) {
  double lo = 0.25, hi = o->sim_seconds;
  size_t k;
  int c;
  if (quiet_run(o) == 0) {
    printf("sim: seed %" PRIu64 " shows no violation: nothing to shrink\n",
           o->seed);
    return 0;
  }
  while (hi - lo > 0.25) {
    o->sim_seconds = (lo + hi) / 2;
    if (quiet_run(o) > 0)
      hi = o->sim_seconds;
    else
      lo = o->sim_seconds;
  }
  o->sim_seconds = hi;
  for (k = 0; k < sizeof(fault_names) / sizeof(fault_names[0]); k++) {
    unsigned was = o->faults;
    if (!(o->faults & fault_names[k].bit))
      continue;
    o->faults &= ~fault_names[k].bit;
    if (quiet_run(o) == 0)
      o->faults = was;
  }
  faults_name(o);
  if (o->clients == 0)
    for (c = 1; c <= MAX_CLIENTS / 2; c++) {
      o->clients = c;
      if (quiet_run(o) > 0)
        break;
      o->clients = 0;
    }
  printf("sim: shrunk: redlock-sim --seed %" PRIu64 " --seeds 1 "
         "--sim-seconds %g --workload %s --faults %s", o->seed,
         o->sim_seconds, o->workload, o->faults_arg);
  if (o->masters > 0)
    printf(" --masters %d", o->masters);
  printf(" --topology %s", o->topology);
  if (o->clients > 0)
    printf(" --clients %d", o->clients);
  printf(" --verbose\n");
  return 1;
}

/* --corpus FILE: each line "SEED [options]" (# starts a comment) runs
 * that one seed; the seeds a violation was once found with (the seeds
 * belong to the simulator of the commit that recorded them: a change of
 * the simulator changes what a seed draws, so each line also says what it
 * found). Exits 1 when any line's seed violates. */
static int run_corpus(const char *path) {
  FILE *f = fopen(path, "r");
  char line[4096];   /* a line longer than this is read as two */
  unsigned lines = 0, bad = 0;
  uint64_t grants = 0, trace = 14695981039346656037ULL;
  if (f == NULL) {
    fprintf(stderr, "redlock-sim: %s: %s\n", path, strerror(errno));
    return 2;
  }
  redlock__scripts_init();
  redlock_replace_allocator(mem_malloc, mem_realloc, mem_calloc, mem_free);
  while (fgets(line, sizeof(line), f) != NULL) {
    char *argv[32], *save = NULL, *tok, *hash = strchr(line, '#');
    int argc = 0;
    opts o;
    if (hash != NULL)
      *hash = '\0';
    argv[argc++] = "redlock-sim";
    for (tok = strtok_r(line, " \t\n", &save); tok != NULL && argc < 30;
         tok = strtok_r(NULL, " \t\n", &save)) {
      if (argc == 1)
        argv[argc++] = "--seed";
      argv[argc++] = tok;
    }
    if (argc == 1)
      continue;
    opts_default(&o);
    if (parse_opts(&o, argc, argv, 1) != 0) {
      fclose(f);
      return 2;
    }
    lines++;
    if (run_seed(&o, o.seed, 0, &grants, &trace) != 0) {
      uint64_t g = 0, t = 0;
      bad++;
      (void)run_seed(&o, o.seed, 1, &g, &t);
    }
  }
  fclose(f);
  printf("sim: %" PRIu64 " grants, %u violations, %u seeds, corpus %s, "
         "trace %016" PRIx64 "\n", grants, bad, lines, path, trace);
  return bad > 0 ? 1 : 0;
}

int main(int argc, char **argv) {
  opts o;
  uint64_t grants = 0, trace = 14695981039346656037ULL, seed;
  unsigned seeds = 0, violations = 0, bad_seeds = 0;
  double cpu0, mono0;
  int capped = 0;
  opts_default(&o);
  if (argc >= 3 && strcmp(argv[1], "--corpus") == 0)
    return run_corpus(argv[2]);
  if (argc == 2 && strcmp(argv[1], "--args-from-env") == 0) {
    /* The test sim-mutant (mutants.sh --sim): the options come in
     * REDLOCK_SIM_ARGS; without them there is nothing to do (skipped). */
    static char buf[1024];
    static char *args[64];
    char *save = NULL, *tok;
    const char *env = getenv("REDLOCK_SIM_ARGS");
    int n = 0;
    if (env == NULL || env[0] == '\0') {
      fprintf(stderr, "redlock-sim: REDLOCK_SIM_ARGS is not set (this "
              "test runs from test/mutants.sh --sim)\n");
      return 77;
    }
    snprintf(buf, sizeof(buf), "%s", env);
    args[n++] = argv[0];
    for (tok = strtok_r(buf, " ", &save); tok != NULL && n < 63;
         tok = strtok_r(NULL, " ", &save))
      args[n++] = tok;
    args[n] = NULL;
    argc = n;
    argv = args;
  }
  if (parse_opts(&o, argc, argv, 1) != 0)
    return 2;
  if (!o.seed_given) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
  }
  fprintf(stderr, "redlock-sim: first seed %" PRIu64 ", %g simulated s "
          "each, workload %s\n", o.seed, o.sim_seconds, o.workload);
  redlock__scripts_init();
  redlock_replace_allocator(mem_malloc, mem_realloc, mem_calloc, mem_free);
  if (o.shrink)
    return run_shrink(&o);
  cpu0 = cpu_seconds();
  mono0 = mono_seconds();
  for (seed = o.seed;; seed++) {
    int v;
    if (o.seeds > 0 && seeds >= o.seeds)
      break;
    if (o.seeds == 0 && cpu_seconds() - cpu0 >= o.wall_seconds)
      break;
    if (o.seeds == 0 && o.wall_cap > 0 &&
        mono_seconds() - mono0 >= o.wall_cap) {
      capped = 1;
      break;
    }
    v = run_seed(&o, seed, o.verbose, &grants, &trace);
    if (v < 0) {
      fprintf(stderr, "redlock-sim: out of memory\n");
      return 2;
    }
    if (o.twice) {
      uint64_t g = 0, t1 = 0, t2 = 0;
      (void)run_seed(&o, seed, 0, &g, &t1);
      (void)run_seed(&o, seed, 0, &g, &t2);
      if (t1 != t2) {
        fprintf(stderr, "VIOLATION seed %" PRIu64 ": not deterministic (its "
                "trace hashed %016" PRIx64 ", then %016" PRIx64 ")\n", seed,
                t1, t2);
        violations++;
        bad_seeds++;
      }
    }
    if (v > 0 && !o.verbose) {
      /* The same seed again, with its log: what led to it. */
      uint64_t g = 0, t = 0;
      (void)run_seed(&o, seed, 1, &g, &t);
    }
    seeds++;
    if (v > 0) {
      violations += (unsigned)v;
      bad_seeds++;
      if (o.stop_at_first) {
        printf("sim: the first violation came with seed %" PRIu64 ", "
               "after %u seeds, %.0f simulated s and %.1f CPU s\n", seed,
               seeds, seeds * o.sim_seconds, cpu_seconds() - cpu0);
        break;
      }
    }
  }
  fprintf(stderr, "redlock-sim: %.0f grants per CPU-second (%.2f CPU s); "
          "the library's largest peak in a seed: %zu bytes\n",
          (double)grants / (cpu_seconds() - cpu0 + 1e-9),
          cpu_seconds() - cpu0, peak_worst);
  if (capped)
    fprintf(stderr, "redlock-sim: the wall cap (%g s) ended the run before "
            "its %g CPU s: this process had %.0f%% of a core\n", o.wall_cap,
            o.wall_seconds, 100 * (cpu_seconds() - cpu0) / o.wall_cap);
  printf("sim: %" PRIu64 " grants, %u violations, %u seeds, %.0f simulated "
         "s, trace %016" PRIx64 "\n", grants, violations, seeds,
         seeds * o.sim_seconds, trace);
  return violations > 0 ? 1 : 0;
}
