/* redlock-failover: how fast a standby takes over (issue 12, item 4).
 *
 *   x_failover_kill    a leader process (`redlock elect --ttl T KEY --
 *                      sleep 3600`) is SIGKILLed; a standby in this
 *                      process, campaigning with the default policy,
 *                      takes over. Delay: from the moment the leader's
 *                      lock expired on a quorum (each master's PTTL read
 *                      right after the kill) to the standby's ELECTED.
 *   x_failover_resign  the leader (an election in this process, on its
 *                      own client) resigns; delay: from the resign call to
 *                      the standby's ELECTED.
 *
 * Environment: BENCH_SERVERS, BENCH_TTL_MS (1000), BENCH_KILLS (50),
 * BENCH_RESIGNS (50), BENCH_CLI (the redlock CLI; default: tools/redlock
 * beside this build's bench/), BENCH_IMPL (redlock-c), BENCH_SAMPLES (a
 * file to append "scenario ttl_ms delay_us" lines to, for plots).
 * Prints the peers harness's JSON lines (custom x_ rows, ttl_ms added).
 * Every wait is bounded; the leader processes are stopped by PID. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "redlock.h"

#define KEY "bench-failover"
#define MAX_SAMPLES 10000

extern char **environ;

static uv_loop_t loop;
static redlock_client_t *client, *client2;
static const char *servers[REDLOCK_MAX_SERVERS];
static size_t n_servers;
static int64_t ttl_ms;
static const char *impl, *cli, *samples_path;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "redlock-failover: %s\n", what);
  exit(1);
}

static void on_deadline(uv_timer_t *t) {
  *(volatile int *)t->data = 1;
}

/* Runs the loop (blocking in it: no busy polling, as any application)
 * until *flag or ms pass; 0, or -1 on timeout. */
static int run_until(volatile int *flag, uint64_t ms) {
  uv_timer_t t;
  volatile int timed_out = 0;
  uv_timer_init(&loop, &t);
  t.data = (void *)&timed_out;
  uv_timer_start(&t, on_deadline, ms, 0);
  while (!*flag && !timed_out)
    uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);   /* the close callback */
  return *flag ? 0 : -1;
}

static void run_for(uint64_t ms) {
  volatile int never = 0;
  run_until(&never, ms);
}

/* ---- elections ----------------------------------------------------------- */

typedef struct side {
  redlock_election_t *e;
  volatile int elected;
  volatile int deposed;
  uint64_t elected_ns;
} side;

static void on_change(redlock_election_t *e, redlock_election_event ev,
                      int reason, void *arg) {
  side *s = arg;
  (void)e;
  (void)reason;
  if (ev == REDLOCK_ELECTED) {
    s->elected = 1;
    s->elected_ns = mono_ns();
  } else {
    s->deposed = 1;
  }
}

static void campaign(side *s, redlock_client_t *c, const char *id) {
  redlock_election_opts o;
  memset(&o, 0, sizeof(o));
  o.ttl_ms = ttl_ms;   /* the default policy otherwise */
  o.on_change = on_change;
  o.arg = s;
  memset((void *)s, 0, sizeof(*s));
  if (redlock_election_new(c, KEY, strlen(KEY), id, &o, &s->e) != 0 ||
      redlock_election_campaign(s->e) != 0)
    die(redlock_last_error());
}

static void drop(side *s) {
  redlock_election_free(s->e);
  s->e = NULL;
}

/* ---- who leads, and when the leader's lock expires ----------------------- */

typedef struct reading {
  volatile int done;
  char id[128];
  uint64_t quorum_expiry_ns;
} reading;

static void on_leader(redlock_client_t *c, int status, const char *identity,
                      int64_t ttl, void *arg) {
  reading *r = arg;
  (void)c;
  (void)ttl;
  snprintf(r->id, sizeof(r->id), "%s", status == 0 ? identity : "");
  r->done = 1;
}

static void on_inspect(redlock_lock_t *l, int status,
                       const redlock_result *res, void *arg) {
  reading *r = arg;
  uint64_t now = mono_ns(), exp[REDLOCK_MAX_SERVERS], t;
  unsigned i, j, k = 0;
  (void)l;
  (void)status;
  for (i = 0; i < res->n_nodes; i++)
    if (res->nodes[i].vote == REDLOCK_VOTE_YES)
      exp[k++] = now + (uint64_t)res->nodes[i].pttl_ms * 1000000ull;
  for (i = 1; i < k; i++)
    for (j = i; j > 0 && exp[j - 1] > exp[j]; j--) {
      t = exp[j];
      exp[j] = exp[j - 1];
      exp[j - 1] = t;
    }
  /* The quorum is free once all but quorum-1 of the holders expired. */
  r->quorum_expiry_ns = k >= res->quorum ? exp[k - res->quorum] : now;
  r->done = 1;
}

static void wait_leader(const char *want) {
  uint64_t end = mono_ns() + 10000000000ull;
  for (;;) {
    reading r;
    memset(&r, 0, sizeof(r));
    if (redlock_election_leader(client2, KEY, strlen(KEY), on_leader, &r) !=
        0 || run_until(&r.done, 5000) != 0)
      die("cannot read the leader");
    if (strcmp(r.id, want) == 0)
      return;
    if (mono_ns() > end)
      die("the leader process was never elected");
    run_for(5);
  }
}

static uint64_t quorum_expiry(void) {
  redlock_lock_t *l;
  reading r;
  memset(&r, 0, sizeof(r));
  if (redlock_lock_new(client2, KEY, strlen(KEY), &l) != 0 ||
      redlock_lock_inspect(l, on_inspect, &r) != 0 ||
      run_until(&r.done, 5000) != 0)
    die("cannot read the leader's keys");
  redlock_lock_free(l);
  return r.quorum_expiry_ns;
}

/* ---- results ------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(const int64_t *v, size_t n, double p) {
  size_t i = (size_t)((p / 100.0) * (double)n + 0.999999);
  if (i == 0)
    i = 1;
  return (double)v[(i > n ? n : i) - 1];
}

static void emit(const char *scenario, int64_t *v, size_t n) {
  double sum = 0;
  size_t i;
  FILE *f = samples_path ? fopen(samples_path, "a") : NULL;
  for (i = 0; i < n; i++) {
    sum += (double)v[i];
    if (f != NULL)
      fprintf(f, "%s %s %lld %lld\n", impl, scenario, (long long)ttl_ms,
              (long long)v[i]);
  }
  if (f != NULL)
    fclose(f);
  qsort(v, n, sizeof(*v), cmp_i64);
  printf("{\"impl\":\"%s\",\"n_servers\":%zu,\"scenario\":\"%s\","
         "\"concurrency\":1,\"ops\":%zu,\"p50_us\":%.1f,\"p90_us\":%.1f,"
         "\"p99_us\":%.1f,\"max_us\":%.1f,\"min_us\":%.1f,\"mean_us\":%.1f,"
         "\"ops_per_s\":%.3f,\"ttl_ms\":%lld,\"returns_at\":\"quorum\","
         "\"version\":\"%s\"}\n",
         impl, n_servers, scenario, n, pct(v, n, 50), pct(v, n, 90),
         pct(v, n, 99), (double)v[n - 1], (double)v[0], sum / (double)n,
         sum > 0 ? 1e6 * (double)n / sum : 0, (long long)ttl_ms,
         redlock_version_string());
  fflush(stdout);
  fprintf(stderr, "%s ttl %lld ms: %zu samples, p50 %.1f ms, p99 %.1f ms, "
          "max %.1f ms\n", scenario, (long long)ttl_ms, n,
          pct(v, n, 50) / 1000, pct(v, n, 99) / 1000,
          (double)v[n - 1] / 1000);
}

/* ---- the scenarios ------------------------------------------------------- */

static pid_t spawn_leader(const char *id) {
  char ttl[32];
  char *argv[] = {(char *)cli, "elect", "--id", (char *)id, "--ttl", ttl,
                  KEY, "--", "sleep", "3600", NULL};
  posix_spawn_file_actions_t fa;
  pid_t pid;
  snprintf(ttl, sizeof(ttl), "%lldms", (long long)ttl_ms);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 1, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", 1, 0);
  if (posix_spawn(&pid, cli, &fa, NULL, argv, environ) != 0)
    die("cannot start the leader (BENCH_CLI)");
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

static void scenario_kill(long kills) {
  static int64_t delays[MAX_SAMPLES];
  long i;
  for (i = 0; i < kills; i++) {
    char id[32];
    side s;
    pid_t leader;
    int st;
    uint64_t expiry;
    snprintf(id, sizeof(id), "leader-%ld", i);
    leader = spawn_leader(id);
    wait_leader(id);
    campaign(&s, client, "standby");
    run_for(30);   /* refused: it waits for the leader's expiry */
    if (s.elected)
      die("the standby was elected while the leader lived");
    kill(leader, SIGKILL);
    waitpid(leader, &st, 0);
    expiry = quorum_expiry();
    if (run_until(&s.elected, (uint64_t)ttl_ms + 10000) != 0)
      die("the standby never took over");
    delays[i] = ((int64_t)s.elected_ns - (int64_t)expiry) / 1000;
    drop(&s);
    run_for(20);   /* the release goes out */
  }
  emit("x_failover_kill", delays, (size_t)kills);
}

static void scenario_resign(long resigns) {
  static int64_t delays[MAX_SAMPLES];
  long i;
  for (i = 0; i < resigns; i++) {
    side l, s;
    uint64_t t0;
    campaign(&l, client2, "leader");
    if (run_until(&l.elected, 10000) != 0)
      die("the leader was never elected");
    campaign(&s, client, "standby");
    run_for(20);
    if (s.elected)
      die("two leaders");
    t0 = mono_ns();
    redlock_election_resign(l.e);
    if (run_until(&s.elected, (uint64_t)ttl_ms + 10000) != 0)
      die("the standby never took over after the resign");
    delays[i] = ((int64_t)s.elected_ns - (int64_t)t0) / 1000;
    drop(&l);
    drop(&s);
    run_for(20);
  }
  emit("x_failover_resign", delays, (size_t)resigns);
}

static redlock_client_t *connect_client(void) {
  redlock_client_config cfg;
  redlock_client_t *c;
  uint64_t end = mono_ns() + 10000000000ull;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = n_servers;
  cfg.restart_guard_ms = -1;   /* the masters were just started */
  if (redlock_client_new(&loop, &cfg, &c) != 0)
    die(redlock_last_error());
  while (redlock_client_n_up(c) < n_servers) {
    if (mono_ns() > end)
      die("masters unreachable");
    run_for(2);
  }
  return c;
}

int main(int argc, char **argv) {
  static char cli_path[4096];
  char *list, *t, *save = NULL;
  long kills, resigns;
  const char *s;
  (void)argc;
  signal(SIGPIPE, SIG_IGN);
  s = getenv("BENCH_SERVERS");
  if (s == NULL || *s == '\0')
    die("set BENCH_SERVERS");
  list = strdup(s);
  for (t = strtok_r(list, ",", &save); t != NULL && n_servers < 64;
       t = strtok_r(NULL, ",", &save))
    servers[n_servers++] = t;
  ttl_ms = getenv("BENCH_TTL_MS") ? atol(getenv("BENCH_TTL_MS")) : 1000;
  kills = getenv("BENCH_KILLS") ? atol(getenv("BENCH_KILLS")) : 50;
  resigns = getenv("BENCH_RESIGNS") ? atol(getenv("BENCH_RESIGNS")) : 50;
  if (kills > MAX_SAMPLES || resigns > MAX_SAMPLES)
    die("at most 10000 samples");
  impl = getenv("BENCH_IMPL") ? getenv("BENCH_IMPL") : "redlock-c";
  samples_path = getenv("BENCH_SAMPLES");
  cli = getenv("BENCH_CLI");
  if (cli == NULL) {
    /* build/bench/redlock-failover -> build/tools/redlock */
    char *slash;
    snprintf(cli_path, sizeof(cli_path), "%s", argv[0]);
    slash = strrchr(cli_path, '/');
    if (slash != NULL)
      *slash = '\0';
    else
      snprintf(cli_path, sizeof(cli_path), ".");
    strncat(cli_path, "/../tools/redlock",
            sizeof(cli_path) - strlen(cli_path) - 1);
    cli = cli_path;
  }
  if (access(cli, X_OK) != 0)
    die("the redlock CLI is not there (BENCH_CLI)");
  setenv("REDLOCK_SERVERS", s, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  if (uv_loop_init(&loop) != 0)
    die("uv_loop_init");
  client = connect_client();
  client2 = connect_client();
  if (kills > 0)
    scenario_kill(kills);
  if (resigns > 0)
    scenario_resign(resigns);
  redlock_client_close(client, NULL, NULL);
  redlock_client_close(client2, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(list);
  return 0;
}
