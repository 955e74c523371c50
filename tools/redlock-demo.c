/* redlock-demo: several workers contend for one lock over N masters; at
 * half time one master is killed (by a command given on the command line).
 * Shows that the lock keeps working, that no two workers ever held it at
 * once, and prints a latency summary. Public API only.
 *
 *   redlock-demo --servers H:P,H:P,... [--workers 6] [--seconds 6]
 *                [--hold-ms 5] [--ttl-ms 2000] [--kill-cmd "CMD ARGS"]
 *
 * Each worker is its own client (its own connections), as separate
 * processes on separate hosts would be; they share one loop here so the
 * demo can check mutual exclusion exactly: a worker marks the lock as
 * taken when its acquire succeeds and clears the mark just before it
 * releases. An overlap is counted if a grant arrives while another worker
 * holds the mark with validity left. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "redlock.h"

#define MAX_WORKERS 64
#define MAX_SAMPLES 200000

typedef struct worker {
  int id;
  redlock_client_t *client;
  redlock_lock_t *lock;
  uv_timer_t timer;
  uint64_t want_ns;
  unsigned grants;
  unsigned failures;
  int stopping;
} worker;

static uv_loop_t loop;
static worker workers[MAX_WORKERS];
static int n_workers = 6;
static int seconds = 6;
static int hold_ms = 5;
static int64_t ttl_ms = 2000;
static const char *kill_cmd;
static const char *servers[REDLOCK_MAX_SERVERS];
static size_t n_servers;
static int holder = -1;
static unsigned overlaps;
static unsigned grants_before_kill;
static unsigned grants_after_kill;
static int killed;
static uint64_t *samples;
static size_t n_samples;
static uint64_t *rounds;     /* us: the successful attempt's quorum round */
static size_t n_rounds;
static uv_timer_t stop_timer;
static uv_timer_t kill_timer;
static uv_process_t kill_proc;
static int clients_open;
static const char *resource = "redlock-demo";

static void worker_next(worker *w, uint64_t delay_ms);

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  worker *w = arg;
  (void)l;
  (void)res;
  (void)status;
  worker_next(w, 1 + (uint64_t)(rand() % 5));
}

static void on_hold_done(uv_timer_t *t) {
  worker *w = t->data;
  if (holder == w->id)
    holder = -1;
  if (redlock_lock_release(w->lock, on_released, w) != 0)
    worker_next(w, 1);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  worker *w = arg;
  uint64_t now = uv_hrtime();
  if (status != 0) {
    if (status != REDLOCK_ECANCELED)   /* canceled: the demo is stopping */
      w->failures++;
    worker_next(w, 1);
    return;
  }
  if (n_rounds < MAX_SAMPLES)
    rounds[n_rounds++] = res->elapsed_us;
  if (holder != -1 && holder != w->id) {
    overlaps++;
    fprintf(stderr, "OVERLAP: worker %d granted while %d holds\n", w->id,
            holder);
  }
  holder = w->id;
  w->grants++;
  if (killed)
    grants_after_kill++;
  else
    grants_before_kill++;
  if (n_samples < MAX_SAMPLES)
    samples[n_samples++] = (now - w->want_ns) / 1000;
  (void)l;
  uv_timer_start(&w->timer, on_hold_done, (uint64_t)hold_ms, 0);
}

static void on_want(uv_timer_t *t) {
  worker *w = t->data;
  redlock_acquire_opts o = {.wait_ms = 5000, .retry_count = 1000,
                            .retry_delay_ms = 10, .retry_jitter_ms = 5};
  int rc;
  if (w->stopping)
    return;
  w->want_ns = uv_hrtime();
  rc = redlock_lock_acquire(w->lock, ttl_ms, &o, on_acquired, w);
  if (rc != 0) {
    fprintf(stderr, "acquire: %s: %s\n", redlock_err_name(rc),
            redlock_last_error());
    worker_next(w, 10);
  }
}

static void worker_next(worker *w, uint64_t delay_ms) {
  if (w->stopping)
    return;
  uv_timer_start(&w->timer, on_want, delay_ms, 0);
}

static void on_client_closed(redlock_client_t *c, void *arg) {
  (void)c;
  (void)arg;
  clients_open--;
}

static void on_worker_timer_closed(uv_handle_t *h) {
  worker *w = h->data;
  redlock_client_close(w->client, on_client_closed, NULL);
}

static void on_stop(uv_timer_t *t) {
  int i;
  (void)t;
  for (i = 0; i < n_workers; i++) {
    workers[i].stopping = 1;
    uv_timer_stop(&workers[i].timer);
    /* Closing cancels an acquire in flight and releases a held lock. */
    uv_close((uv_handle_t *)&workers[i].timer, on_worker_timer_closed);
  }
  uv_close((uv_handle_t *)&stop_timer, NULL);
  uv_close((uv_handle_t *)&kill_timer, NULL);
}

static void on_kill_exit(uv_process_t *p, int64_t status, int sig) {
  fprintf(stderr, "[demo] kill command exited with %lld\n",
          (long long)status);
  (void)sig;
  uv_close((uv_handle_t *)p, NULL);
}

static void on_kill_time(uv_timer_t *t) {
  uv_process_options_t po;
  char *args[16];
  char *copy;
  int n = 0;
  int rc;
  (void)t;
  killed = 1;
  if (kill_cmd == NULL)
    return;
  copy = strdup(kill_cmd);
  if (copy == NULL)
    return;
  for (char *tok = strtok(copy, " "); tok != NULL && n < 15;
       tok = strtok(NULL, " "))
    args[n++] = tok;
  args[n] = NULL;
  memset(&po, 0, sizeof(po));
  po.file = args[0];
  po.args = args;
  po.exit_cb = on_kill_exit;
  fprintf(stderr, "[demo] t=%ds: killing one master: %s\n", seconds / 2,
          kill_cmd);
  rc = uv_spawn(&loop, &kill_proc, &po);
  if (rc != 0)
    fprintf(stderr, "[demo] cannot run kill command: %s\n", uv_strerror(rc));
  free(copy);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest rank over a sorted array. */
static uint64_t pct(const uint64_t *v, size_t n, double p) {
  size_t i;
  if (n == 0)
    return 0;
  i = (size_t)(p / 100.0 * (double)n + 0.999999);
  if (i == 0)
    i = 1;
  if (i > n)
    i = n;
  return v[i - 1];
}

static void usage(void) __attribute__((noreturn));

static void usage(void) {
  fprintf(stderr,
          "usage: redlock-demo --servers H:P,... [--workers N] "
          "[--seconds S] [--hold-ms MS] [--ttl-ms MS] [--kill-cmd CMD] "
          "[--tls-ca FILE]\n");
  exit(2);
}

static int parse_int(const char *s, int lo, int hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "bad number: %s\n", s);
    usage();
  }
  return (int)v;
}

int main(int argc, char **argv) {
  char *list = NULL;
  const char *tls_ca = getenv("REDLOCK_TLS_CA");
  int i;
  int rc;
  unsigned total = 0;

  signal(SIGPIPE, SIG_IGN);   /* a closed pipe is an error, not death */
  for (i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      usage();
    if (strcmp(argv[i], "--servers") == 0)
      list = argv[++i];
    else if (strcmp(argv[i], "--workers") == 0)
      n_workers = parse_int(argv[++i], 1, MAX_WORKERS);
    else if (strcmp(argv[i], "--seconds") == 0)
      seconds = parse_int(argv[++i], 1, 3600);
    else if (strcmp(argv[i], "--hold-ms") == 0)
      hold_ms = parse_int(argv[++i], 0, 60000);
    else if (strcmp(argv[i], "--ttl-ms") == 0)
      ttl_ms = parse_int(argv[++i], 10, 600000);
    else if (strcmp(argv[i], "--kill-cmd") == 0)
      kill_cmd = argv[++i];
    else if (strcmp(argv[i], "--tls-ca") == 0)
      tls_ca = argv[++i];
    else
      usage();
  }
  if (list == NULL)
    usage();
  for (char *tok = strtok(list, ","); tok != NULL;
       tok = strtok(NULL, ",")) {
    if (n_servers == REDLOCK_MAX_SERVERS)
      usage();
    servers[n_servers++] = tok;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  samples = calloc(MAX_SAMPLES, sizeof(*samples));
  rounds = calloc(MAX_SAMPLES, sizeof(*rounds));
  if (samples == NULL || rounds == NULL || uv_loop_init(&loop) != 0)
    return 1;
  srand((unsigned)uv_hrtime());

  for (i = 0; i < n_workers; i++) {
    worker *w = &workers[i];
    redlock_client_config cfg = {.servers = servers, .n_servers = n_servers,
                                 .tls_ca_file = tls_ca};
    w->id = i;
    rc = redlock_client_new(&loop, &cfg, &w->client);
    if (rc == 0)
      rc = redlock_lock_new(w->client, resource, strlen(resource), &w->lock);
    if (rc != 0) {
      fprintf(stderr, "redlock-demo: %s: %s\n", redlock_err_name(rc),
              redlock_last_error());
      return 1;
    }
    clients_open++;
    uv_timer_init(&loop, &w->timer);
    w->timer.data = w;
    worker_next(w, 50);   /* let the connections come up */
  }
  fprintf(stderr,
          "[demo] %d workers contend for \"%s\" on %zu masters (quorum %u) "
          "for %d s, holding it %d ms each time\n",
          n_workers, resource, n_servers,
          redlock_client_quorum(workers[0].client), seconds, hold_ms);
  fprintf(stderr,
          "[demo] the masters were just started: with appendonly yes and "
          "appendfsync always (cluster.sh's default, and its addresses "
          "declare them durable: ?durable=1) they lose no key in a "
          "restart and their votes count at once; undeclared, or without "
          "persistence, the restart guard holds their votes for one ttl "
          "(%lld ms)\n",
          (long long)ttl_ms);
  uv_timer_init(&loop, &stop_timer);
  uv_timer_init(&loop, &kill_timer);
  uv_timer_start(&stop_timer, on_stop, (uint64_t)seconds * 1000, 0);
  uv_timer_start(&kill_timer, on_kill_time, (uint64_t)seconds * 500, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&loop);

  qsort(samples, n_samples, sizeof(*samples), cmp_u64);
  qsort(rounds, n_rounds, sizeof(*rounds), cmp_u64);
  printf("\nredlock demo: %d workers, %zu masters, %d s\n", n_workers,
         n_servers, seconds);
  for (i = 0; i < n_workers; i++) {
    printf("  worker %d: %u grants, %u gave up\n", i, workers[i].grants,
           workers[i].failures);
    total += workers[i].grants;
  }
  printf("grants: %u (before the kill: %u, after: %u)\n", total,
         grants_before_kill, grants_after_kill);
  printf("overlaps (two holders at once): %u\n", overlaps);
  printf("latency summary (us)            p50      p90      p99      max\n");
  printf("  quorum round of a grant   %8llu %8llu %8llu %8llu\n",
         (unsigned long long)pct(rounds, n_rounds, 50),
         (unsigned long long)pct(rounds, n_rounds, 90),
         (unsigned long long)pct(rounds, n_rounds, 99),
         (unsigned long long)pct(rounds, n_rounds, 100));
  printf("  wait, retries included    %8llu %8llu %8llu %8llu\n",
         (unsigned long long)pct(samples, n_samples, 50),
         (unsigned long long)pct(samples, n_samples, 90),
         (unsigned long long)pct(samples, n_samples, 99),
         (unsigned long long)pct(samples, n_samples, 100));
  free(samples);
  free(rounds);
  if (overlaps != 0 || grants_after_kill == 0 || rc != 0) {
    printf("RESULT: FAILED\n");
    return 1;
  }
  printf("RESULT: OK - the lock kept working after a master died, and no "
         "two workers ever held it at once\n");
  return 0;
}
