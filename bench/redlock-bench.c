/* redlock-bench: the peers harness's scenarios over the public API.
 *
 * Reads BENCH_* from the environment (see shared peers/README.md, "Adapter
 * contract"), or the same settings as flags:
 *   --impl NAME --servers H:P,... --scenario latency|throughput|contention
 *   --concurrency C --iters N --warmup N --duration-s S --ttl-ms T
 *   --workers W --hold-ms H --think-ms T --retry-count R
 *   --retry-delay-ms D --retry-jitter-ms J --max-seconds S --read-pct P
 *   --limit K
 * Writes one JSON object per line to stdout (the harness's contract) and a
 * human summary with progress to stderr.
 *
 * Scenarios (normative definitions in the harness README):
 *  latency     sequential acquire+release on a new key each, retryCount 0:
 *              rows latency_acquire and latency_release
 *  throughput  C workers loop acquire+release on fresh keys for duration_s
 *  contention  W workers compete for one key: acquire with retries, hold
 *              hold_ms, release, think think_ms; fairness and violations.
 *              With --read-pct P (BENCH_READ_PCT) the key is a read-write
 *              lock: each acquisition is a read with probability P%, else
 *              a write; the row x_contention_rw reports each side's
 *              grants/s, waits, longest stretch without a grant while it
 *              had waiters, and share of the lock-held time.
 * --limit K (BENCH_LIMIT): a counting semaphore of K permits instead of
 * the mutex (redlock_semaphore_new), through the same scenarios: latency
 * and throughput keep one semaphore name per worker (made once, acquired
 * and released each cycle, as a semaphore is used: its limit record
 * exists after the first cycle); contention runs the W workers on one
 * semaphore, a violation is a grant while K others hold. Every acquisition
 * is the library's own path, a refusal's listed free permits included.
 * BENCH_INTERVALS=FILE (contention) writes each hold as "start end" (ns,
 * uv_hrtime: CLOCK_MONOTONIC, the same clock in every local process) from
 * the grant to the release call, for bench/node/holders.mjs, which counts
 * the holders at once across processes (bench/semaphore.sh); with
 * BENCH_NAME=NAME the contention key is NAME, shared by the processes.
 * One client (one connection per master) is shared by all workers. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <hiredis.h>

#include <uv.h>

#include "redlock.h"
#include "raw.h"

#define MAX_WORKERS 1024

static long pace_ms;   /* scale: pause between timed cycles */

static struct {
  const char *impl;
  char *servers;
  const char *scenario;
  long concurrency, iters, warmup, ttl_ms, workers, hold_ms, think_ms;
  long retry_count, retry_delay_ms, retry_jitter_ms, max_seconds;
  long command_timeout_ms;
  long read_pct;   /* -1: a plain lock */
  long limit;      /* 0: the mutex; else a semaphore of this many permits */
  double duration_s;
  int raw;
} opt = {"redlock-c", NULL, "latency", 1, 2000, 200, 10000, 8, 1, 5,
         100, 10, 5, 60, 1000, -1, 0, 5.0, 0};

typedef struct samples {
  uint64_t *v;   /* ns */
  size_t n, cap;
} samples;

static uv_loop_t loop;
static redlock_client_t *client;
static raw_client *raw;
static const char *servers[REDLOCK_MAX_SERVERS];
static size_t n_servers;
static char key_base[128];
static unsigned long key_seq;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "redlock-bench: %s%s%s\n", what, detail ? ": " : "",
          detail ? detail : "");
  exit(2);
}

static void push(samples *s, uint64_t ns) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 4096;
    s->v = realloc(s->v, s->cap * sizeof(*s->v));
    if (s->v == NULL)
      die("out of memory", NULL);
  }
  s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest rank: sorted[ceil(p/100 * n) - 1], in us. */
static double pct_us(const samples *s, double p) {
  size_t r;
  if (s->n == 0)
    return 0;
  r = (size_t)ceil(p / 100.0 * (double)s->n);
  if (r < 1)
    r = 1;
  if (r > s->n)
    r = s->n;
  return (double)s->v[r - 1] / 1000.0;
}

static void emit(const char *scenario, long conc, samples *s,
                 double ops_per_s, const char *extra) {
  double sum = 0;
  size_t i;
  char lim[32] = "";
  if (opt.limit > 0)
    snprintf(lim, sizeof(lim), ",\"limit\":%ld", opt.limit);
  qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
  for (i = 0; i < s->n; i++)
    sum += (double)s->v[i];
  if (getenv("BENCH_SAMPLES_PREFIX") != NULL) {
    /* Raw samples (us, sorted) for plots: PREFIX-SCENARIO.txt */
    char path[512];
    FILE *f;
    snprintf(path, sizeof(path), "%s-%s.txt", getenv("BENCH_SAMPLES_PREFIX"),
             scenario);
    f = fopen(path, "w");
    if (f != NULL) {
      for (i = 0; i < s->n; i++)
        fprintf(f, "%.1f\n", (double)s->v[i] / 1000.0);
      fclose(f);
    }
  }
  printf("{\"impl\":\"%s\",\"n_servers\":%zu,\"scenario\":\"%s\","
         "\"concurrency\":%ld,\"ops\":%zu,\"p50_us\":%.1f,\"p90_us\":%.1f,"
         "\"p99_us\":%.1f,\"max_us\":%.1f,\"ops_per_s\":%.1f,"
         "\"mean_us\":%.1f,\"ttl_ms\":%ld,\"version\":\"redlock %s\","
         "\"runtime\":\"C, libredlock (own libuv adapter)\","
         "\"returns_at\":\"quorum\"%s%s%s}\n",
         opt.impl, n_servers, scenario, conc, s->n, pct_us(s, 50),
         pct_us(s, 90), pct_us(s, 99),
         s->n ? (double)s->v[s->n - 1] / 1000.0 : 0, ops_per_s,
         s->n ? sum / (double)s->n / 1000.0 : 0, opt.ttl_ms,
         redlock_version_string(), lim, extra && *extra ? "," : "",
         extra ? extra : "");
  fflush(stdout);
  fprintf(stderr,
          "[%s] %-18s c=%-4ld ops=%-8zu p50=%.1fus p99=%.1fus "
          "ops/s=%.0f\n",
          opt.impl, scenario, conc, s->n, pct_us(s, 50), pct_us(s, 99),
          ops_per_s);
}

/* "<base>:<tag>:<worker>:<seq>" without printf: the harness's cost per
 * cycle should be the library's, not the benchmark's formatting. */
static size_t put_num(char *p, unsigned long v) {
  char tmp[24];
  size_t n = 0;
  size_t i;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (i = 0; i < n; i++)
    p[i] = tmp[n - 1 - i];
  return n;
}

static size_t make_key(char *key, const char *tag, long worker,
                       unsigned long seq) {
  size_t bl = strlen(key_base);
  size_t tl = strlen(tag);
  size_t n = 0;
  memcpy(key, key_base, bl);
  n += bl;
  key[n++] = ':';
  memcpy(key + n, tag, tl);
  n += tl;
  key[n++] = ':';
  n += put_num(key + n, (unsigned long)worker);
  key[n++] = ':';
  n += put_num(key + n, seq);
  key[n] = '\0';
  return n;
}

static redlock_lock_t *new_lock(const char *tag, long worker) {
  char key[256];
  redlock_lock_t *l;
  size_t n = make_key(key, tag, worker, key_seq++);
  int rc = redlock_lock_new(client, key, n, &l);
  if (rc != 0)
    die("lock_new", redlock_last_error());
  return l;
}

/* A semaphore of opt.limit permits on `key`. */
static redlock_lock_t *new_sem(const char *key, size_t n) {
  redlock_lock_t *l;
  if (redlock_semaphore_new(client, key, n, (unsigned)opt.limit, &l) != 0)
    die("semaphore_new", redlock_last_error());
  return l;
}

/* ---- one worker: a small state machine per scenario --------------------- */

typedef struct worker {
  long id;
  redlock_lock_t *lock;
  char key[256];           /* raw mode */
  size_t keylen;
  char token[48];
  redlock_lock_t *rw[2];  /* contention with --read-pct: read, write */
  int side;               /* the side of the current acquisition */
  unsigned rnd;
  uv_timer_t timer;
  uint64_t t_start;       /* ns: cycle or wait start */
  uint64_t t_acq;         /* ns: acquire done */
  unsigned long count;    /* cycles or acquisitions */
  unsigned long errors;
  int stop;
} worker;

static worker workers[MAX_WORKERS];
static long n_active;
static samples s_acq, s_rel, s_cycle;
static uint64_t deadline_ns;
static uint64_t last_stop_ns;
static const char *cur_tag;
static int cur_mode;     /* 0 latency/warmup, 1 throughput, 2 contention */
static long latency_left;
static long holding;      /* contention: workers inside a hold now */
static long max_holding;  /* ... the most at once */
static uint64_t last_release_ns;   /* contention: the previous release */
static samples s_handoff;
static unsigned long violations;
static unsigned long failures;
static samples s_intervals;   /* BENCH_INTERVALS: grant, release call */
static int want_intervals;

/* One handle per worker for the whole run (contention; any semaphore)
 * rather than a new lock per cycle. */
static int handle_kept(void) {
  return cur_mode == 2 || opt.limit > 0;
}

/* Read-write contention, per side (0 read, 1 write). */
static struct {
  long holders, waiting;
  uint64_t held_since, held_ns;   /* time with at least one holder */
  uint64_t since;                 /* start of the stretch without a grant */
  uint64_t longest;               /* ... the longest with waiters */
  unsigned long attempts, grants, fails;
  samples wait;
} rw[2];

static void rw_gap(int side, uint64_t now) {
  if (now - rw[side].since > rw[side].longest)
    rw[side].longest = now - rw[side].since;
  rw[side].since = now;
}

static void worker_cycle(worker *w);
static void on_think_done(uv_timer_t *t);

static void worker_done(worker *w) {
  w->stop = 1;
  last_stop_ns = uv_hrtime();
  n_active--;
}

static void do_release(worker *w);

static void released(worker *w, int status) {
  uint64_t now = uv_hrtime();
  if (status != 0)
    w->errors++;
  if (cur_mode == 0 && cur_tag[0] != 'w' && status == 0)
    push(&s_rel, now - w->t_acq);
  if (cur_mode == 1 && status == 0) {
    push(&s_cycle, now - w->t_start);
    w->count++;
  }
  if (!handle_kept() && w->lock != NULL) {
    redlock_lock_free(w->lock);
    w->lock = NULL;
  }
  if (cur_mode == 2 || pace_ms > 0) {
    uv_timer_start(&w->timer, on_think_done,
                   (uint64_t)(cur_mode == 2 ? opt.think_ms : pace_ms), 0);
    return;
  }
  worker_cycle(w);
}

static void on_release(redlock_lock_t *l, int status,
                       const redlock_result *res, void *arg) {
  (void)l;
  (void)res;
  released(arg, status);
}

static void on_raw_released(void *arg, int ok) {
  released(arg, ok ? 0 : REDLOCK_ENOTHELD);
}

static void do_release(worker *w) {
  int rc = opt.raw ? raw_release(raw, w->key, w->keylen, w->token,
                                 on_raw_released, w)
                   : redlock_lock_release(w->lock, on_release, w);
  if (rc != 0)
    die("release", redlock_last_error());
}

static void on_think_done(uv_timer_t *t) {
  worker_cycle(t->data);
}

static void on_hold_done(uv_timer_t *t) {
  worker *w = t->data;
  if (opt.read_pct >= 0 && --rw[w->side].holders == 0)
    rw[w->side].held_ns += uv_hrtime() - rw[w->side].held_since;
  last_release_ns = uv_hrtime();
  if (opt.read_pct < 0)
    holding--;
  if (want_intervals) {
    push(&s_intervals, w->t_acq);
    push(&s_intervals, last_release_ns);
  }
  do_release(w);
}

static void acquired(worker *w, int status) {
  uint64_t now = uv_hrtime();
  w->t_acq = now;
  if (cur_mode == 2 && opt.read_pct >= 0) {
    int sd = w->side;
    rw[sd].waiting--;
    rw_gap(sd, now);   /* a grant, or the end of a wait that failed */
    if (status == 0) {
      if (rw[1].holders > 0 || (sd == 1 && rw[0].holders > 0))
        violations++;
      if (rw[sd].holders++ == 0)
        rw[sd].held_since = now;
      rw[sd].grants++;
      push(&rw[sd].wait, now - w->t_start);
      push(&s_acq, now - w->t_start);
      w->count++;
      uv_timer_start(&w->timer, on_hold_done, (uint64_t)opt.hold_ms, 0);
      return;
    }
    rw[sd].fails++;
  }
  if (status != 0) {
    w->errors++;
    if (cur_mode == 2) {
      failures++;
      uv_timer_start(&w->timer, on_think_done,
                     (uint64_t)opt.think_ms, 0);
      return;
    }
    if (!handle_kept() && w->lock != NULL) {
      redlock_lock_free(w->lock);
      w->lock = NULL;
    }
    worker_cycle(w);
    return;
  }
  if (cur_mode == 0 && cur_tag[0] != 'w')
    push(&s_acq, now - w->t_start);
  if (cur_mode == 2) {
    /* The mutex admits one holder, a semaphore opt.limit. */
    if (++holding > (opt.limit > 0 ? opt.limit : 1))
      violations++;
    if (holding > max_holding)
      max_holding = holding;
    w->count++;
    if (last_release_ns != 0)
      push(&s_handoff, now - last_release_ns);
    push(&s_acq, now - w->t_start);
    uv_timer_start(&w->timer, on_hold_done, (uint64_t)opt.hold_ms, 0);
    return;
  }
  do_release(w);
}

static void on_acquire(redlock_lock_t *l, int status,
                       const redlock_result *res, void *arg) {
  (void)l;
  (void)res;
  acquired(arg, status);
}

static void on_raw_acquired(void *arg, int ok) {
  acquired(arg, ok ? 0 : REDLOCK_ETAKEN);
}

static int bench_wake;   /* BENCH_WAKE, read once */

static void worker_cycle(worker *w) {
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts contend = {
      .retry_count = opt.retry_count > 0 ? (int)opt.retry_count : -1,
      .retry_delay_ms = opt.retry_delay_ms > 0 ? (int)opt.retry_delay_ms : -1,
      .retry_jitter_ms =
          opt.retry_jitter_ms > 0 ? (int)opt.retry_jitter_ms : -1,
      .wake = bench_wake};
  uint64_t now = uv_hrtime();
  int rc;
  if (w->stop)
    return;
  if (cur_mode == 0 && latency_left-- <= 0) {
    worker_done(w);
    return;
  }
  if (cur_mode != 0 && now >= deadline_ns) {
    worker_done(w);
    return;
  }
  if (cur_mode == 0 && now >= deadline_ns) {
    worker_done(w);
    return;
  }
  if (opt.raw) {
    /* The same work a Redlock must do: a fresh key name, a token from
     * the OS CSPRNG, the fan-out. */
    unsigned char r[20];
    static const char hex[] = "0123456789abcdef";
    size_t i;
    w->keylen = make_key(w->key, cur_tag, w->id, key_seq++);
    w->t_start = uv_hrtime();
    uv_random(NULL, NULL, r, sizeof(r), 0, NULL);
    for (i = 0; i < sizeof(r); i++) {
      w->token[2 * i] = hex[r[i] >> 4];
      w->token[2 * i + 1] = hex[r[i] & 15];
    }
    w->token[40] = '\0';
    rc = raw_acquire(raw, w->key, w->keylen, w->token, opt.ttl_ms,
                     on_raw_acquired, w);
    if (rc != 0)
      die("raw acquire", NULL);
    return;
  }
  w->t_start = uv_hrtime();
  if (!handle_kept())
    w->lock = new_lock(cur_tag, w->id);
  if (cur_mode == 2 && opt.read_pct >= 0) {
    w->side = (long)(rand_r(&w->rnd) % 100) < opt.read_pct ? 0 : 1;
    w->lock = w->rw[w->side];
    rw[w->side].attempts++;
    if (rw[w->side].waiting++ == 0)
      rw[w->side].since = w->t_start;
  }
  rc = redlock_lock_acquire(w->lock, opt.ttl_ms,
                            cur_mode == 2 ? &contend : &once, on_acquire, w);
  if (rc != 0)
    die("acquire", redlock_last_error());
}

static void on_closed(uv_handle_t *h) {
  (void)h;
}

/* Runs `n` workers in `mode` until they all stopped. */
static uint64_t run_workers(long n, int mode, const char *tag,
                            double seconds) {
  long i;
  uint64_t t0 = uv_hrtime();
  cur_mode = mode;
  cur_tag = tag;
  deadline_ns = t0 + (uint64_t)(seconds * 1e9);
  n_active = n;
  last_stop_ns = t0;
  for (i = 0; i < n; i++) {
    worker *w = &workers[i];
    memset(w, 0, sizeof(*w));
    w->id = i;
    uv_timer_init(&loop, &w->timer);
    w->timer.data = w;
  }
  if (mode == 2) {
    /* One key for all workers: one handle each on the same resource;
     * BENCH_NAME names it, to share it with other processes. */
    char key[256];
    const char *shared = getenv("BENCH_NAME");
    int k = shared != NULL && *shared != '\0'
                ? snprintf(key, sizeof(key), "%s", shared)
                : snprintf(key, sizeof(key), "%s:contention", key_base);
    if (k < 1 || (size_t)k >= sizeof(key))
      die("BENCH_NAME too long", NULL);
    for (i = 0; i < n; i++) {
      worker *w = &workers[i];
      w->rnd = (unsigned)i * 2654435761u + 1;
      if (opt.read_pct < 0 && opt.limit > 0) {
        w->lock = new_sem(key, (size_t)k);
      } else if (opt.read_pct < 0) {
        if (redlock_lock_new(client, key, (size_t)k, &w->lock) != 0)
          die("lock_new", redlock_last_error());
      } else if (redlock_rwlock_new(client, key, (size_t)k, REDLOCK_READ,
                                    &w->rw[0]) != 0 ||
                 redlock_rwlock_new(client, key, (size_t)k, REDLOCK_WRITE,
                                    &w->rw[1]) != 0) {
        die("rwlock_new", redlock_last_error());
      }
    }
  } else if (opt.limit > 0) {
    /* One semaphore name per worker, kept for the run. */
    for (i = 0; i < n; i++) {
      char key[256];
      size_t k = make_key(key, tag, i, 0);
      workers[i].lock = new_sem(key, k);
    }
  }
  for (i = 0; i < n; i++)
    worker_cycle(&workers[i]);
  while (n_active > 0)
    uv_run(&loop, UV_RUN_ONCE);
  for (i = 0; i < n; i++) {
    uv_close((uv_handle_t *)&workers[i].timer, on_closed);
    if (workers[i].rw[0] != NULL) {
      redlock_lock_free(workers[i].rw[0]);
      redlock_lock_free(workers[i].rw[1]);
      workers[i].rw[0] = workers[i].rw[1] = workers[i].lock = NULL;
    }
    if (workers[i].lock != NULL) {
      redlock_lock_free(workers[i].lock);
      workers[i].lock = NULL;
    }
  }
  uv_run(&loop, UV_RUN_NOWAIT);
  return last_stop_ns - t0;
}

/* ---- options ------------------------------------------------------------- */

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? v : dflt;
}

static long num(const char *name, const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0)
    die("bad number for", name);
  return v;
}

static void parse(int argc, char **argv) {
  static const struct {
    const char *flag, *env;
    long *field;
  } nums[] = {
      {"--concurrency", "BENCH_CONCURRENCY", &opt.concurrency},
      {"--iters", "BENCH_ITERS", &opt.iters},
      {"--warmup", "BENCH_WARMUP", &opt.warmup},
      {"--ttl-ms", "BENCH_TTL_MS", &opt.ttl_ms},
      {"--workers", "BENCH_WORKERS", &opt.workers},
      {"--hold-ms", "BENCH_HOLD_MS", &opt.hold_ms},
      {"--think-ms", "BENCH_THINK_MS", &opt.think_ms},
      {"--retry-count", "BENCH_RETRY_COUNT", &opt.retry_count},
      {"--retry-delay-ms", "BENCH_RETRY_DELAY_MS", &opt.retry_delay_ms},
      {"--retry-jitter-ms", "BENCH_RETRY_JITTER_MS", &opt.retry_jitter_ms},
      {"--max-seconds", "BENCH_MAX_SECONDS", &opt.max_seconds},
      {"--command-timeout-ms", "BENCH_COMMAND_TIMEOUT_MS",
       &opt.command_timeout_ms},
      {"--read-pct", NULL, &opt.read_pct},
      {"--limit", "BENCH_LIMIT", &opt.limit},
  };
  size_t k;
  int i;
  opt.impl = env_or("BENCH_IMPL", opt.impl);
  opt.scenario = env_or("BENCH_SCENARIO", opt.scenario);
  opt.servers = (char *)env_or("BENCH_SERVERS", "127.0.0.1:7000");
  opt.duration_s = atof(env_or("BENCH_DURATION_S", "5"));
  for (k = 0; k < sizeof(nums) / sizeof(nums[0]); k++) {
    const char *v = nums[k].env != NULL ? getenv(nums[k].env) : NULL;
    if (v != NULL && *v != '\0')
      *nums[k].field = num(nums[k].env, v);
  }
  for (i = 1; i < argc; i++) {
    const char *f = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 0;
    if (strcmp(f, "--raw") == 0) {
      opt.raw = 1;
      continue;
    }
    if (v == NULL)
      die("missing value for", f);
    if (strcmp(f, "--impl") == 0)
      opt.impl = v, used = 1;
    else if (strcmp(f, "--servers") == 0)
      opt.servers = (char *)v, used = 1;
    else if (strcmp(f, "--scenario") == 0)
      opt.scenario = v, used = 1;
    else if (strcmp(f, "--duration-s") == 0)
      opt.duration_s = atof(v), used = 1;
    for (k = 0; !used && k < sizeof(nums) / sizeof(nums[0]); k++)
      if (strcmp(f, nums[k].flag) == 0) {
        *nums[k].field = num(f, v);
        used = 1;
      }
    if (!used)
      die("unknown flag", f);
    i++;
  }
  if (opt.concurrency < 1 || opt.concurrency > MAX_WORKERS ||
      opt.workers < 1 || opt.workers > MAX_WORKERS)
    die("concurrency/workers out of range", NULL);
  if (opt.duration_s <= 0 || opt.duration_s > 3600)
    die("duration_s out of range", NULL);
  {
    const char *v = getenv("BENCH_READ_PCT");
    if (v != NULL && *v != '\0' && opt.read_pct < 0)
      opt.read_pct = num("BENCH_READ_PCT", v);
  }
  if (opt.read_pct > 100)
    die("read_pct out of range (0-100)", NULL);
  if (opt.limit > REDLOCK_MAX_PERMITS)
    die("limit out of range (1-1024; 0: the mutex)", NULL);
  if (opt.limit > 0 && (opt.raw || opt.read_pct >= 0))
    die("--limit runs the library's semaphore: not with --raw or "
        "--read-pct", NULL);
}

/* ---- scale: many locks held at once, auto-extended ----------------------- *
 * BENCH_HELD locks (default 100000) are acquired with auto-extension and
 * held for duration_s. The first BENCH_IDLE_S seconds (default half of
 * it) only hold them: the renewals' cost is measured alone (script calls
 * per second and CPU of every master from INFO, the client's CPU). The
 * rest times new acquisitions (back to back, or one every BENCH_PACE_MS)
 * while the renewals go on, compared with the same measurement before the
 * locks were taken (paced the same way). Lost locks (on_lost) are counted over the whole run.
 * Memory per held lock: RSS, and the library's own heap through the
 * allocator hooks. BENCH_RENEW_BATCH sets the client's renew_batch
 * (negative: one extend call per lock and renewal, as before 0.2). */
static size_t heap_bytes;    /* library allocations, live */
static unsigned long heap_allocs;

static void *count_malloc(size_t n) {
  size_t *p = malloc(n + sizeof(size_t) * 2);
  if (p == NULL)
    return NULL;
  p[0] = n;
  heap_bytes += n;
  heap_allocs++;
  return p + 2;
}
static void *count_calloc(size_t c, size_t n) {
  void *p = count_malloc(c * n);
  if (p != NULL)
    memset(p, 0, c * n);
  return p;
}
static void count_free(void *q) {
  size_t *p = q;
  if (p == NULL)
    return;
  heap_bytes -= p[-2];
  free(p - 2);
}
static void *count_realloc(void *q, size_t n) {
  size_t *p = q;
  void *r;
  if (p == NULL)
    return count_malloc(n);
  r = count_malloc(n);
  if (r != NULL) {
    memcpy(r, q, p[-2] < n ? p[-2] : n);
    count_free(q);
  }
  return r;
}

static long rss_kb(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
    rss = 0;
  fclose(f);
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static double client_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static long held_ok, held_pending, held_lost;
static redlock_lock_t **held;

static void on_held(redlock_lock_t *l, int status, const redlock_result *r,
                    void *arg) {
  (void)l;
  (void)r;
  (void)arg;
  held_pending--;
  if (status == 0)
    held_ok++;
}

static void on_held_lost(redlock_lock_t *l, int reason, void *arg) {
  (void)l;
  (void)reason;
  (void)arg;
  held_lost++;
}

/* What a master reports: script calls so far, CPU seconds used. */
typedef struct {
  long long evalsha;
  double cpu_s;
} master_snap;

static double info_num(const char *text, const char *field) {
  const char *p = strstr(text, field);
  return p != NULL ? atof(p + strlen(field)) : -1;
}

static int snap_master(const char *addr, master_snap *m) {
  char host[64];
  const char *colon = strrchr(addr, ':');
  size_t hl = colon ? (size_t)(colon - addr) : 0;
  struct timeval tv = {2, 0};
  redisContext *c;
  redisReply *r;
  m->evalsha = -1;
  m->cpu_s = -1;
  if (colon == NULL || hl >= sizeof(host))
    return -1;
  memcpy(host, addr, hl);
  host[hl] = '\0';
  c = redisConnectWithTimeout(host, atoi(colon + 1), tv);
  if (c == NULL || c->err) {
    if (c != NULL)
      redisFree(c);
    return -1;
  }
  r = redisCommand(c, "INFO commandstats");
  if (r != NULL && r->type == REDIS_REPLY_STRING) {
    const char *p = strstr(r->str, "cmdstat_evalsha:calls=");
    m->evalsha = p != NULL ? strtoll(p + 22, NULL, 10) : 0;
  }
  if (r != NULL)
    freeReplyObject(r);
  r = redisCommand(c, "INFO cpu");
  if (r != NULL && r->type == REDIS_REPLY_STRING)
    m->cpu_s = info_num(r->str, "used_cpu_user:") +
               info_num(r->str, "used_cpu_sys:");
  if (r != NULL)
    freeReplyObject(r);
  redisFree(c);
  return m->evalsha >= 0 && m->cpu_s >= 0 ? 0 : -1;
}

static void snap_all(master_snap *m) {
  size_t i;
  for (i = 0; i < n_servers; i++)
    if (snap_master(servers[i], &m[i]) != 0)
      die("cannot read INFO from a master", servers[i]);
}

/* Mean over the masters of script calls/s and of CPU (fraction of a core)
 * between two snapshots `secs` apart; the busiest master's CPU too. */
static void master_rates(const master_snap *a, const master_snap *b,
                         double secs, double *calls_s, double *cpu,
                         double *cpu_max) {
  size_t i;
  *calls_s = *cpu = *cpu_max = 0;
  for (i = 0; i < n_servers; i++) {
    double u = (b[i].cpu_s - a[i].cpu_s) / secs;
    *calls_s += (double)(b[i].evalsha - a[i].evalsha) / secs;
    *cpu += u;
    if (u > *cpu_max)
      *cpu_max = u;
  }
  *calls_s /= (double)n_servers;
  *cpu /= (double)n_servers;
}

static void run_loop_for(double secs) {
  uint64_t end = uv_hrtime() + (uint64_t)(secs * 1e9);
  while (uv_hrtime() < end)
    uv_run(&loop, UV_RUN_ONCE);   /* the renewals' timers keep it busy */
}

static void run_scale(void) {
  const char *env = getenv("BENCH_HELD");
  long n = env != NULL ? atol(env) : 100000;
  double idle_s = getenv("BENCH_IDLE_S") ? atof(getenv("BENCH_IDLE_S"))
                                         : opt.duration_s / 2;
  long rss0, rss1;
  size_t heap0, heap1;
  master_snap m0[REDLOCK_MAX_SERVERS], m1[REDLOCK_MAX_SERVERS];
  master_snap m2[REDLOCK_MAX_SERVERS];
  double calls_idle, cpu_idle, cpu_idle_max, calls_busy, cpu_busy,
      cpu_busy_max, ccpu0, ccpu1, ccpu2;
  uint64_t t0, t1, t2;
  char extra[1024];
  samples before, during;
  long i, still_held = 0;
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_held_lost};
  if (n < 1 || n > 2000000)
    die("BENCH_HELD out of range", NULL);
  if (idle_s < 0 || idle_s >= opt.duration_s)
    die("BENCH_IDLE_S out of range (0 .. duration_s)", NULL);
  held = calloc((size_t)n, sizeof(*held));
  if (held == NULL)
    die("out of memory", NULL);
  /* Latency of new acquisitions with nothing held. */
  pace_ms = getenv("BENCH_PACE_MS") ? atol(getenv("BENCH_PACE_MS")) : 0;
  latency_left = opt.iters;
  memset(&s_acq, 0, sizeof(s_acq));
  run_workers(1, 0, "before", (double)opt.max_seconds);
  pace_ms = 0;
  before = s_acq;
  memset(&s_acq, 0, sizeof(s_acq));
  memset(&s_rel, 0, sizeof(s_rel));

  rss0 = rss_kb();
  heap0 = heap_bytes;
  t0 = uv_hrtime();
  for (i = 0; i < n; i++) {
    char key[128];
    int k = snprintf(key, sizeof(key), "%s:held:%ld", key_base, i);
    if (redlock_lock_new(client, key, (size_t)k, &held[i]) != 0)
      die("lock_new", redlock_last_error());
    held_pending++;
    if (redlock_lock_acquire(held[i], opt.ttl_ms, &ae, on_held, NULL) != 0)
      die("acquire", redlock_last_error());
    while (held_pending > 256)   /* at most 256 in flight */
      uv_run(&loop, UV_RUN_ONCE);
  }
  while (held_pending > 0)
    uv_run(&loop, UV_RUN_ONCE);
  t1 = uv_hrtime();
  rss1 = rss_kb();
  heap1 = heap_bytes;
  fprintf(stderr, "[%s] scale: %ld of %ld held after %.1f s; RSS +%ld kB, "
                  "library heap +%zu bytes\n",
          opt.impl, held_ok, n, (t1 - t0) / 1e9, rss1 - rss0, heap1 - heap0);

  /* Only holding: what the renewals cost. */
  snap_all(m0);
  ccpu0 = client_cpu_s();
  t0 = uv_hrtime();
  run_loop_for(idle_s);
  t1 = uv_hrtime();
  snap_all(m1);
  ccpu1 = client_cpu_s();
  master_rates(m0, m1, (t1 - t0) / 1e9, &calls_idle, &cpu_idle,
               &cpu_idle_max);
  fprintf(stderr, "[%s] scale: holding only, %.0f s: %.0f script calls/s "
                  "and %.1f%% CPU per master (busiest %.1f%%), client "
                  "%.1f%%, lost %ld\n",
          opt.impl, (t1 - t0) / 1e9, calls_idle, 100 * cpu_idle,
          100 * cpu_idle_max, 100 * (ccpu1 - ccpu0) / ((t1 - t0) / 1e9),
          held_lost);

  /* New acquisitions while they are held and renewed. */
  pace_ms = getenv("BENCH_PACE_MS") ? atol(getenv("BENCH_PACE_MS")) : 0;
  latency_left = 1L << 40;
  run_workers(1, 0, "during", opt.duration_s - idle_s);
  pace_ms = 0;
  during = s_acq;
  t2 = uv_hrtime();
  snap_all(m2);
  ccpu2 = client_cpu_s();
  master_rates(m1, m2, (t2 - t1) / 1e9, &calls_busy, &cpu_busy,
               &cpu_busy_max);
  for (i = 0; i < n; i++)
    still_held += redlock_lock_is_held(held[i]);
  qsort(before.v, before.n, sizeof(*before.v), cmp_u64);
  snprintf(extra, sizeof(extra),
           "\"held\":%ld,\"renew_batch\":%d,"
           "\"held_s\":%.1f,\"lost\":%ld,\"still_held\":%ld,"
           "\"rss_kb_per_1000_held\":%.1f,"
           "\"heap_bytes_per_held\":%.0f,"
           "\"script_calls_per_s_per_master\":%.0f,"
           "\"master_cpu_pct\":%.2f,\"master_cpu_pct_max\":%.2f,"
           "\"master_cpu_pct_per_1000_held\":%.4f,"
           "\"master_cpu_pct_while_acquiring\":%.2f,"
           "\"master_cpu_pct_max_while_acquiring\":%.2f,"
           "\"client_cpu_pct\":%.2f,"
           "\"client_cpu_pct_while_acquiring\":%.2f,"
           "\"p50_us_before\":%.1f,\"p99_us_before\":%.1f",
           held_ok,
           getenv("BENCH_RENEW_BATCH") ? atoi(getenv("BENCH_RENEW_BATCH")) : 0,
           (t2 - t0) / 1e9, held_lost, still_held,
           held_ok ? 1000.0 * (double)(rss1 - rss0) / held_ok : 0,
           held_ok ? (double)(heap1 - heap0) / held_ok : 0, calls_idle,
           100 * cpu_idle, 100 * cpu_idle_max,
           held_ok ? 100 * cpu_idle * 1000.0 / held_ok : 0, 100 * cpu_busy,
           100 * cpu_busy_max, 100 * (ccpu1 - ccpu0) / ((t1 - t0) / 1e9),
           100 * (ccpu2 - ccpu1) / ((t2 - t1) / 1e9),
           pct_us(&before, 50), pct_us(&before, 99));
  emit("x_scale_acquire_while_held", 1, &during,
       during.n ? during.n * 1e9 / (double)(t2 - t1) : 0, extra);
  for (i = 0; i < n; i++)
    redlock_lock_free(held[i]);   /* releases in the background */
  free(held);
  free(before.v);
}

static void on_client_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(int *)arg = 1;
}

/* ---- contention on a read-write lock (--read-pct) ------------------------ */

static void side_json(char *buf, size_t len, int sd, uint64_t el,
                      uint64_t held_total) {
  samples *w = &rw[sd].wait;
  qsort(w->v, w->n, sizeof(*w->v), cmp_u64);
  snprintf(buf, len,
           "{\"attempts\":%lu,\"grants\":%lu,\"grants_per_s\":%.1f,"
           "\"failures\":%lu,\"wait_p50_ms\":%.1f,\"wait_p99_ms\":%.1f,"
           "\"wait_max_ms\":%.1f,\"longest_without_grant_ms\":%.1f,"
           "\"held_share\":%.3f}",
           rw[sd].attempts, rw[sd].grants,
           el ? rw[sd].grants * 1e9 / (double)el : 0, rw[sd].fails,
           pct_us(w, 50) / 1000, pct_us(w, 99) / 1000,
           w->n ? (double)w->v[w->n - 1] / 1e6 : 0, rw[sd].longest / 1e6,
           held_total ? (double)rw[sd].held_ns / (double)held_total : 0);
  fprintf(stderr, "  %-6s attempts %lu grants %lu (%.1f/s) failures %lu "
          "wait p50 %.1f max %.1f ms, longest without a grant %.1f ms, "
          "held share %.3f\n", sd ? "write" : "read", rw[sd].attempts,
          rw[sd].grants, el ? rw[sd].grants * 1e9 / (double)el : 0,
          rw[sd].fails, pct_us(w, 50) / 1000,
          w->n ? (double)w->v[w->n - 1] / 1e6 : 0, rw[sd].longest / 1e6,
          held_total ? (double)rw[sd].held_ns / (double)held_total : 0);
}

static void run_contention_rw(void) {
  uint64_t el = run_workers(opt.workers, 2, "ct", opt.duration_s);
  uint64_t end = uv_hrtime();
  uint64_t total;
  char r[512], w[512], extra[1400];
  int sd;
  for (sd = 0; sd < 2; sd++) {
    if (rw[sd].waiting > 0)
      rw_gap(sd, end);   /* still waiting at the end */
    if (rw[sd].holders > 0)
      rw[sd].held_ns += end - rw[sd].held_since;
  }
  total = rw[0].held_ns + rw[1].held_ns;
  side_json(r, sizeof(r), 0, el, total);
  side_json(w, sizeof(w), 1, el, total);
  snprintf(extra, sizeof(extra),
           "\"read_pct\":%ld,\"read\":%s,\"write\":%s,"
           "\"violations\":%lu,\"hold_ms\":%ld,\"think_ms\":%ld,"
           "\"retry\":{\"count\":%ld,\"delay_ms\":%ld,\"jitter_ms\":%ld},"
           "\"duration_s\":%.3f,\"wake\":%s",
           opt.read_pct, r, w, violations, opt.hold_ms, opt.think_ms,
           opt.retry_count, opt.retry_delay_ms, opt.retry_jitter_ms, el / 1e9,
           getenv("BENCH_WAKE") ? "true" : "false");
  emit("x_contention_rw", opt.workers, &s_acq,
       el ? s_acq.n * 1e9 / (double)el : 0, extra);
  free(rw[0].wait.v);
  free(rw[1].wait.v);
}

/* BENCH_INTERVALS: one hold a line, "start end" in ns. */
static void write_intervals(const char *path) {
  FILE *f = fopen(path, "w");
  size_t i;
  if (f == NULL)
    die("cannot write BENCH_INTERVALS", path);
  for (i = 0; i + 1 < s_intervals.n; i += 2)
    fprintf(f, "%llu %llu\n", (unsigned long long)s_intervals.v[i],
            (unsigned long long)s_intervals.v[i + 1]);
  if (fclose(f) != 0)
    die("cannot write BENCH_INTERVALS", path);
}

int main(int argc, char **argv) {
  redlock_client_config cfg;
  char *list;
  unsigned char rnd[4];
  int closed = 0;
  int rc;

  signal(SIGPIPE, SIG_IGN);   /* a closed pipe is an error, not death */
  bench_wake = getenv("BENCH_WAKE") != NULL;
  parse(argc, argv);
  if (opt.limit > 0 && (strcmp(opt.scenario, "scale") == 0 ||
                        strcmp(opt.scenario, "x_connect") == 0))
    die("--limit runs latency, throughput and contention", NULL);
  if (strcmp(opt.scenario, "scale") == 0 || getenv("BENCH_COUNT_ALLOCS"))
    redlock_replace_allocator(count_malloc, count_realloc, count_calloc,
                              count_free);
  list = strdup(opt.servers);
  if (list == NULL)
    die("out of memory", NULL);
  for (char *t = strtok(list, ","); t != NULL; t = strtok(NULL, ",")) {
    if (n_servers == REDLOCK_MAX_SERVERS)
      die("too many servers", NULL);
    servers[n_servers++] = t;
  }
  uv_random(NULL, NULL, rnd, sizeof(rnd), 0, NULL);
  snprintf(key_base, sizeof(key_base), "rlbench:%s:%d:%02x%02x%02x%02x",
           opt.impl, (int)getpid(), rnd[0], rnd[1], rnd[2], rnd[3]);
  if (uv_loop_init(&loop) != 0)
    die("uv_loop_init", NULL);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = n_servers;
  cfg.command_timeout_ms = (int)opt.command_timeout_ms;
  cfg.connect_timeout_ms = 2000;
  cfg.restart_guard_ms = -1;   /* the harness starts brand-new servers */
  if (getenv("BENCH_RENEW_BATCH") != NULL)
    cfg.renew_batch = atoi(getenv("BENCH_RENEW_BATCH"));
  cfg.tls_ca_file = getenv("REDLOCK_TLS_CA");   /* rediss:// servers */
  if (strcmp(opt.scenario, "x_connect") == 0) {
    /* Time from redlock_client_new to every master connected and past its
     * handshake (TCP, TLS when rediss://, AUTH/SCRIPT LOAD/INFO...). */
    long k;
    for (k = 0; k < opt.iters; k++) {
      uint64_t t0 = uv_hrtime();
      uint64_t end = t0 + 5000000000ULL;
      closed = 0;
      rc = redlock_client_new(&loop, &cfg, &client);
      if (rc != 0)
        die("client", redlock_last_error());
      while (redlock_client_n_up(client) < n_servers && uv_hrtime() < end)
        uv_run(&loop, UV_RUN_NOWAIT);
      if (redlock_client_n_up(client) < n_servers)
        die("not every master is reachable", NULL);
      push(&s_acq, uv_hrtime() - t0);
      redlock_client_close(client, on_client_closed, &closed);
      while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    }
    emit("x_connect", 1, &s_acq, 0, "\"errors\":0");
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 0;
  }
  if (opt.raw) {
    uint64_t end = uv_hrtime() + 5000000000ULL;
    if (strcmp(opt.scenario, "contention") == 0)
      die("raw mode runs latency and throughput only", NULL);
    if (raw_client_new(&loop, servers, n_servers, &raw) != 0)
      die("raw client", NULL);
    while (!raw_client_ready(raw) && uv_hrtime() < end)
      uv_run(&loop, UV_RUN_NOWAIT);
    if (!raw_client_ready(raw))
      die("not every master is reachable", NULL);
  } else {
    uint64_t end = uv_hrtime() + 5000000000ULL;
    rc = redlock_client_new(&loop, &cfg, &client);
    if (rc != 0)
      die("client", redlock_last_error());
    /* Wait (bounded) until every master is connected. */
    while (redlock_client_n_up(client) < n_servers && uv_hrtime() < end)
      uv_run(&loop, UV_RUN_NOWAIT);
    if (redlock_client_n_up(client) < n_servers)
      die("not every master is reachable", NULL);
  }

  /* Warmup: sequential cycles on throw-away keys, not recorded. */
  latency_left = opt.warmup;
  run_workers(1, 0, "warmup", (double)opt.max_seconds);

  if (strcmp(opt.scenario, "latency") == 0) {
    uint64_t sum = 0;
    size_t i;
    char extra[128];
    unsigned long allocs0 = heap_allocs;
    latency_left = opt.iters;
    run_workers(1, 0, "lat", (double)opt.max_seconds);
    if (getenv("BENCH_COUNT_ALLOCS") != NULL && s_acq.n > 0)
      snprintf(extra, sizeof(extra),
               "\"errors\":%lu,\"lib_allocs_per_cycle\":%.2f",
               workers[0].errors,
               (double)(heap_allocs - allocs0) / (double)s_acq.n);
    else
      snprintf(extra, sizeof(extra), "\"errors\":%lu", workers[0].errors);
    for (i = 0; i < s_acq.n; i++)
      sum += s_acq.v[i];
    emit("latency_acquire", 1, &s_acq, sum ? s_acq.n * 1e9 / sum : 0, extra);
    sum = 0;
    for (i = 0; i < s_rel.n; i++)
      sum += s_rel.v[i];
    emit("latency_release", 1, &s_rel, sum ? s_rel.n * 1e9 / sum : 0, extra);
  } else if (strcmp(opt.scenario, "throughput") == 0) {
    uint64_t el = run_workers(opt.concurrency, 1, "tp", opt.duration_s);
    unsigned long errors = 0;
    char extra[96];
    long i;
    for (i = 0; i < opt.concurrency; i++)
      errors += workers[i].errors;
    snprintf(extra, sizeof(extra), "\"errors\":%lu,\"duration_s\":%.3f",
             errors, el / 1e9);
    emit("throughput", opt.concurrency, &s_cycle,
         el ? s_cycle.n * 1e9 / (double)el : 0, extra);
  } else if (strcmp(opt.scenario, "scale") == 0) {
    run_scale();
  } else if (strcmp(opt.scenario, "contention") == 0 && opt.read_pct >= 0) {
    run_contention_rw();
  } else if (strcmp(opt.scenario, "contention") == 0) {
    /* The client's counters around the run: its attempts per grant
     * (retries; a semaphore's hops to a permit listed free too). */
    static redlock_stats st0, st1;
    uint64_t el;
    double sum = 0, sum2 = 0, h50, h99;
    unsigned long mn = (unsigned long)-1, mx = 0;
    char extra[640];
    long i;
    want_intervals = getenv("BENCH_INTERVALS") != NULL;
    redlock_client_stats(client, &st0);
    el = run_workers(opt.workers, 2, "ct", opt.duration_s);
    redlock_client_stats(client, &st1);
    if (want_intervals)
      write_intervals(getenv("BENCH_INTERVALS"));
    for (i = 0; i < opt.workers; i++) {
      double x = (double)workers[i].count;
      sum += x;
      sum2 += x * x;
      if (workers[i].count < mn)
        mn = workers[i].count;
      if (workers[i].count > mx)
        mx = workers[i].count;
    }
    qsort(s_handoff.v, s_handoff.n, sizeof(*s_handoff.v), cmp_u64);
    h50 = pct_us(&s_handoff, 50);
    h99 = pct_us(&s_handoff, 99);
    snprintf(extra, sizeof(extra),
             "\"fairness_jain\":%.4f,\"per_worker_min\":%lu,"
             "\"per_worker_max\":%lu,\"failures\":%lu,\"violations\":%lu,"
             "\"hold_ms\":%ld,\"think_ms\":%ld,\"retry\":{\"count\":%ld,"
             "\"delay_ms\":%ld,\"jitter_ms\":%ld},\"duration_s\":%.3f,"
             "\"wake\":%s,\"handoff_p50_us\":%.1f,\"handoff_p99_us\":%.1f,"
             "\"max_holders\":%ld,\"attempts\":%llu,\"grants\":%llu",
             sum2 > 0 ? sum * sum / ((double)opt.workers * sum2) : 0, mn, mx,
             failures, violations, opt.hold_ms, opt.think_ms,
             opt.retry_count, opt.retry_delay_ms, opt.retry_jitter_ms,
             el / 1e9, getenv("BENCH_WAKE") ? "true" : "false", h50, h99,
             max_holding,
             (unsigned long long)(st1.attempts - st0.attempts),
             (unsigned long long)(st1.grants - st0.grants));
    emit("contention", opt.workers, &s_acq,
         el ? s_acq.n * 1e9 / (double)el : 0, extra);
  } else {
    die("unknown scenario", opt.scenario);
  }

  if (opt.raw) {
    raw_client_close(raw);
  } else {
    redlock_client_close(client, on_client_closed, &closed);
    while (!closed)
      uv_run(&loop, UV_RUN_ONCE);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(s_acq.v);
  free(s_rel.v);
  free(s_cycle.v);
  free(s_intervals.v);
  free(list);
  return violations == 0 ? 0 : 1;
}
