/* redlock-availability: one client, single attempts on a free lock, under
 * whatever faults bench/faults.sh injects meanwhile (issue 14).
 *
 * Every BENCH_INTERVAL_MS (5) one attempt (no retries) on a fresh key with
 * ttl BENCH_TTL_MS (1000); a granted lock is released at once. For
 * BENCH_SECONDS (30). Each attempt is one line in BENCH_LOG (if set):
 *   T_MS OK|FAIL VOTES
 * VOTES has one letter per master: Y yes, N no (someone's key), G restart
 * guard, D down (connection refused or lost), T timeout, E other error,
 * - no answer by the decision. At the end one JSON line on stdout: the
 * fraction of attempts that failed, the outages (runs of failed attempts:
 * count, median and longest, in ms) and, over the failed attempts, how
 * many votes of each kind. BENCH_SERVERS is the master list; the restart
 * guard is on (auto), everything else default.
 *
 * With BENCH_WORKERS=W (> 0): safety instead. W clients (their own
 * connections) compete for one key (single attempts every 5-15 ms, hold a
 * grant 20 ms, release); an overlap is a grant while another worker holds
 * within the validity it was given, seen in this process on one clock. One
 * JSON line: grants and overlaps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "redlock.h"

#define MAX_OUTAGES 4096

static uv_loop_t loop;
static redlock_client_t *client;
static FILE *log_file;
static long seq, attempts, failed;
static int busy;
static uint64_t t_start, fail_since, outages[MAX_OUTAGES];
static size_t n_outages;
static long kinds[7];   /* Y N G D T E - over failed attempts */
static const char kind_letters[] = "YNGDTE-";
static int64_t ttl_ms = 1000;

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000;
}

static char vote_letter(const redlock_node_result *r) {
  switch (r->vote) {
    case REDLOCK_VOTE_YES:
      return 'Y';
    case REDLOCK_VOTE_NO:
      return 'N';
    case REDLOCK_VOTE_NONE:
      return '-';
    case REDLOCK_VOTE_ERR:
      break;
  }
  if (r->error == REDLOCK_ERESTARTED)
    return 'G';
  if (r->error == REDLOCK_ETIMEDOUT)
    return 'T';
  if (r->error == REDLOCK_EIO)
    return 'D';
  return 'E';
}

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  (void)status;
  (void)r;
  (void)arg;
  redlock_lock_free(l);
}

static void on_attempt(redlock_lock_t *l, int status,
                       const redlock_result *r, void *arg) {
  char votes[REDLOCK_MAX_SERVERS + 1];
  uint64_t t = now_ms();
  unsigned i;
  (void)arg;
  busy = 0;
  if (status == REDLOCK_ECANCELED) {   /* the end of the run */
    redlock_lock_free(l);
    return;
  }
  attempts++;
  for (i = 0; i < r->n_nodes && i < REDLOCK_MAX_SERVERS; i++)
    votes[i] = vote_letter(&r->nodes[i]);
  votes[i] = '\0';
  if (log_file != NULL)
    fprintf(log_file, "%llu %s %s\n", (unsigned long long)(t - t_start),
            status == 0 ? "OK" : "FAIL", votes);
  if (status == 0) {
    if (fail_since != 0 && n_outages < MAX_OUTAGES)
      outages[n_outages++] = t - fail_since;
    fail_since = 0;
    if (redlock_lock_release(l, on_released, NULL) != 0)
      redlock_lock_free(l);
    return;
  }
  failed++;
  if (fail_since == 0)
    fail_since = t;
  for (i = 0; votes[i] != '\0'; i++)
    kinds[strchr(kind_letters, votes[i]) - kind_letters]++;
  redlock_lock_free(l);
}

static void on_tick(uv_timer_t *t) {
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_lock_t *l;
  char key[64];
  int k;
  (void)t;
  if (busy)
    return;   /* one attempt at a time: a slow one delays the next */
  k = snprintf(key, sizeof(key), "avail:%d:%ld", (int)uv_os_getpid(),
               seq++);
  if (redlock_lock_new(client, key, (size_t)k, &l) != 0)
    return;
  busy = 1;
  if (redlock_lock_acquire(l, ttl_ms, &once, on_attempt, NULL) != 0) {
    busy = 0;
    redlock_lock_free(l);
  }
}

static void on_end(uv_timer_t *t) {
  uv_timer_stop((uv_timer_t *)t->data);
  uv_close((uv_handle_t *)t->data, NULL);
  uv_close((uv_handle_t *)t, NULL);
  redlock_client_close(client, NULL, NULL);
}

/* ---- safety: W competing clients --------------------------------------- */

#define MAX_W 32

typedef struct sworker {
  redlock_client_t *c;
  redlock_lock_t *l;
  uv_timer_t t;
  uint64_t valid_until;   /* ms; 0 when not holding */
  int id;
} sworker;

static sworker sw[MAX_W];
static int n_w, stopping;
static long grants, overlaps;
static uint64_t s_end;
static const char skey[] = "avail-safety";

static void sw_next(sworker *w, uint64_t ms);

static void sw_released(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  sworker *w = arg;
  (void)l;
  (void)status;
  (void)r;
  sw_next(w, 5 + (uint64_t)(uv_hrtime() % 11));
}

static void sw_hold_done(uv_timer_t *t) {
  sworker *w = t->data;
  w->valid_until = 0;
  if (redlock_lock_release(w->l, sw_released, w) != 0)
    sw_next(w, 5);
}

static void sw_acquired(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  sworker *w = arg;
  uint64_t t = now_ms();
  int i;
  (void)l;
  if (status != 0) {
    if (status != REDLOCK_ECANCELED)
      sw_next(w, 5 + (uint64_t)(uv_hrtime() % 11));
    return;
  }
  grants++;
  for (i = 0; i < n_w; i++)
    if (&sw[i] != w && sw[i].valid_until > t)
      overlaps++;
  w->valid_until = t + (uint64_t)(r->validity_ms > 0 ? r->validity_ms : 0);
  uv_timer_start(&w->t, sw_hold_done, 20, 0);
}

static void sw_try(uv_timer_t *t) {
  sworker *w = t->data;
  redlock_acquire_opts once = {.wait_ms = -1};
  if (stopping || now_ms() >= s_end)
    return;
  if (redlock_lock_acquire(w->l, ttl_ms, &once, sw_acquired, w) != 0)
    sw_next(w, 5);
}

static void sw_next(sworker *w, uint64_t ms) {
  if (!stopping)
    uv_timer_start(&w->t, sw_try, ms, 0);
}

static void sw_end(uv_timer_t *t) {
  int i;
  stopping = 1;
  uv_close((uv_handle_t *)t, NULL);
  for (i = 0; i < n_w; i++) {
    uv_timer_stop(&sw[i].t);
    uv_close((uv_handle_t *)&sw[i].t, NULL);
    redlock_lock_free(sw[i].l);
    redlock_client_close(sw[i].c, NULL, NULL);
  }
}

static int run_safety(redlock_client_config *cfg, long seconds) {
  uv_timer_t end;
  int i;
  for (i = 0; i < n_w; i++) {
    if (redlock_client_new(&loop, cfg, &sw[i].c) != 0 ||
        redlock_lock_new(sw[i].c, skey, sizeof(skey) - 1, &sw[i].l) != 0) {
      fprintf(stderr, "redlock-availability: %s\n", redlock_last_error());
      return 1;
    }
    sw[i].id = i;
    uv_timer_init(&loop, &sw[i].t);
    sw[i].t.data = &sw[i];
    sw_next(&sw[i], 10 + (uint64_t)i);
  }
  s_end = now_ms() + (uint64_t)seconds * 1000;
  uv_timer_init(&loop, &end);
  uv_timer_start(&end, sw_end, (uint64_t)seconds * 1000, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  printf("{\"impl\":\"redlock-c\",\"scenario\":\"x_safety\",\"workers\":%d,"
         "\"ttl_ms\":%lld,\"seconds\":%ld,\"grants\":%ld,\"overlaps\":%ld}\n",
         n_w, (long long)ttl_ms, seconds, grants, overlaps);
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  const char *servers_env = getenv("BENCH_SERVERS");
  const char *servers[REDLOCK_MAX_SERVERS];
  char *list, *tok;
  size_t n = 0;
  long seconds = getenv("BENCH_SECONDS") ? atol(getenv("BENCH_SECONDS"))
                                         : 30;
  long interval = getenv("BENCH_INTERVAL_MS")
                      ? atol(getenv("BENCH_INTERVAL_MS")) : 5;
  redlock_client_config cfg;
  uv_timer_t tick, end;
  size_t i;
  if (servers_env == NULL || seconds < 1 || seconds > 3600 || interval < 1) {
    fprintf(stderr, "redlock-availability: set BENCH_SERVERS (and "
                    "BENCH_SECONDS 1..3600, BENCH_INTERVAL_MS >= 1)\n");
    return 64;
  }
  if (getenv("BENCH_TTL_MS") != NULL)
    ttl_ms = atol(getenv("BENCH_TTL_MS"));
  list = strdup(servers_env);
  for (tok = strtok(list, ","); tok != NULL && n < REDLOCK_MAX_SERVERS;
       tok = strtok(NULL, ","))
    servers[n++] = tok;
  if (getenv("BENCH_LOG") != NULL)
    log_file = fopen(getenv("BENCH_LOG"), "w");
  uv_loop_init(&loop);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = n;
  if (getenv("BENCH_WORKERS") != NULL) {
    n_w = atoi(getenv("BENCH_WORKERS"));
    if (n_w < 1 || n_w > MAX_W) {
      fprintf(stderr, "redlock-availability: BENCH_WORKERS 1..%d\n", MAX_W);
      return 64;
    }
    return run_safety(&cfg, seconds);
  }
  if (redlock_client_new(&loop, &cfg, &client) != 0) {
    fprintf(stderr, "redlock-availability: %s\n", redlock_last_error());
    return 1;
  }
  t_start = now_ms();
  uv_timer_init(&loop, &tick);
  uv_timer_init(&loop, &end);
  end.data = &tick;
  uv_timer_start(&tick, on_tick, (uint64_t)interval, (uint64_t)interval);
  uv_timer_start(&end, on_end, (uint64_t)seconds * 1000, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (fail_since != 0 && n_outages < MAX_OUTAGES)
    outages[n_outages++] = now_ms() - fail_since;
  qsort(outages, n_outages, sizeof(outages[0]), cmp_u64);
  printf("{\"impl\":\"redlock-c\",\"n_servers\":%zu,\"ttl_ms\":%lld,"
         "\"attempts\":%ld,\"failed\":%ld,\"unavailable_pct\":%.2f,"
         "\"outages\":%zu,\"outage_median_ms\":%llu,"
         "\"outage_max_ms\":%llu,\"votes_of_failed\":{",
         n, (long long)ttl_ms, attempts, failed,
         attempts ? 100.0 * (double)failed / (double)attempts : 0,
         n_outages,
         (unsigned long long)(n_outages ? outages[n_outages / 2] : 0),
         (unsigned long long)(n_outages ? outages[n_outages - 1] : 0));
  for (i = 0; i < 7; i++)
    printf("%s\"%c\":%ld", i ? "," : "", kind_letters[i], kinds[i]);
  printf("}}\n");
  if (log_file != NULL)
    fclose(log_file);
  free(list);
  return 0;
}
