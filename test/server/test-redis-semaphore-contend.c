/* At most K holders of a semaphore at once, under contention.
 *
 * For K = 1, 2 and 3: 3K + 2 workers (each its own client and
 * connections, one loop) contend for one semaphore on N = 5 masters for
 * SECONDS seconds each (REDLOCK_SEM_SECONDS overrides), holding 2-20 ms,
 * with wake-up on and a short retry delay. Every grant is logged with its
 * window on the validity clock (the library's, CLOCK_BOOTTIME): from the
 * grant to the earlier of its release and the end of its validity. A
 * sweep over the windows checks that never more than K are open at once,
 * and that K at once was reached (the permits are used, not only one). */
#include <time.h>

#include "tutil.h"

#define N 5
#define MAX_WORKERS 11
#define MAX_GRANTS 100000
#define TTL_MS 1000
#define SECONDS 3

typedef struct worker {
  int id;
  redlock_client_t *c;
  redlock_lock_t *l;
  uv_timer_t timer;
  uint64_t granted_ns;
  uint64_t valid_ns;
  int gi;
} worker;

typedef struct window {
  uint64_t from, to;
  int worker;
  int permit;
} window;

static uv_loop_t loop;
static harness_server srv[N];
static worker workers[MAX_WORKERS];
static int n_workers;
static window *grants;
static int n_grants;
static uint64_t end_ns;
static int running;
static unsigned long refusals;
static uint64_t prng = 0x9e3779b97f4a7c15ULL;
static char name[32];
static unsigned limit;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static unsigned rnd(unsigned n) {
  prng ^= prng << 13;
  prng ^= prng >> 7;
  prng ^= prng << 17;
  return (unsigned)(prng % n);
}

static void want(worker *w);

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  worker *w = arg;
  (void)l;
  (void)status;
  (void)res;
  want(w);
}

static void on_hold_end(uv_timer_t *t) {
  worker *w = t->data;
  uint64_t now = now_ns();
  grants[w->gi].to = now < w->valid_ns ? now : w->valid_ns;
  ASSERT_EQ(redlock_lock_release(w->l, on_released, w), 0);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  worker *w = arg;
  uint64_t now = now_ns();
  (void)res;
  if (status != 0) {
    ASSERT(status == REDLOCK_ETAKEN || status == REDLOCK_ETIMEDOUT ||
           status == REDLOCK_ENOQUORUM);
    refusals++;
    want(w);
    return;
  }
  w->granted_ns = now;
  w->valid_ns = now + (uint64_t)redlock_lock_validity_ms(l) * 1000000ULL;
  ASSERT_LT(n_grants, MAX_GRANTS);
  w->gi = n_grants++;
  grants[w->gi].from = now;
  grants[w->gi].to = w->valid_ns;
  grants[w->gi].worker = w->id;
  grants[w->gi].permit = redlock_semaphore_permit(l);
  ASSERT(grants[w->gi].permit >= 0 &&
         grants[w->gi].permit < (int)limit);
  uv_timer_start(&w->timer, on_hold_end, 2 + rnd(19), 0);
}

static void want(worker *w) {
  redlock_acquire_opts opts = {.wait_ms = 1000, .retry_delay_ms = 30,
                               .retry_jitter_ms = 20, .wake = 1};
  if (now_ns() >= end_ns) {
    running--;
    return;
  }
  ASSERT_EQ(redlock_lock_acquire(w->l, TTL_MS, &opts, on_acquired, w), 0);
}

static int cmp_ev(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  /* By time; at a tie an end (-1) before a start (+1). */
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* The most windows open at once. */
static int max_open(void) {
  int64_t *ev = malloc((size_t)n_grants * 2 * sizeof(int64_t) * 2);
  int i, open = 0, most = 0;
  ASSERT_NOT_NULL(ev);
  for (i = 0; i < n_grants; i++) {
    ev[4 * i] = (int64_t)grants[i].from;
    ev[4 * i + 1] = 1;
    ev[4 * i + 2] = (int64_t)grants[i].to;
    ev[4 * i + 3] = -1;
  }
  qsort(ev, (size_t)n_grants * 2, 2 * sizeof(int64_t), cmp_ev);
  for (i = 0; i < 2 * n_grants; i++) {
    open += (int)ev[2 * i + 1];
    if (open > most)
      most = open;
  }
  free(ev);
  return most;
}

static void run(unsigned k, uint64_t seconds) {
  const char *addrs[N];
  redlock_client_config cfg;
  int i, most;
  limit = k;
  n_workers = (int)(3 * k + 2);
  n_grants = 0;
  refusals = 0;
  snprintf(name, sizeof(name), "contend-%u", k);
  harness_addrs(srv, N, addrs);
  memset(&cfg, 0, sizeof(cfg));
  cfg.command_timeout_ms = 500;
  cfg.connect_timeout_ms = 2000;
  for (i = 0; i < n_workers; i++) {
    worker *w = &workers[i];
    memset(w, 0, sizeof(*w));
    w->id = i;
    w->c = tu_client(&loop, srv, N, &cfg, N);
    ASSERT_EQ(redlock_semaphore_new(w->c, name, strlen(name), k, &w->l), 0);
    ASSERT_EQ(uv_timer_init(&loop, &w->timer), 0);
    w->timer.data = w;
  }
  (void)addrs;
  end_ns = now_ns() + seconds * 1000000000ULL;
  running = n_workers;
  for (i = 0; i < n_workers; i++)
    want(&workers[i]);
  while (running > 0)
    uv_run(&loop, UV_RUN_ONCE);
  most = max_open();
  fprintf(stderr, "K=%u: %d workers, %d grants, %lu refusals, at most %d "
          "holders at once\n", k, n_workers, n_grants, refusals, most);
  ASSERT_LE(most, (int)k);
  ASSERT_EQ(most, (int)k);
  ASSERT_GT(n_grants, 20);
  for (i = 0; i < n_workers; i++) {
    ASSERT_EQ(redlock_lock_free(workers[i].l), 0);
    uv_close((uv_handle_t *)&workers[i].timer, NULL);
    tu_close_client(&loop, workers[i].c);
  }
}

int main(void) {
  const char *env = getenv("REDLOCK_SEM_SECONDS");
  uint64_t seconds = env != NULL ? (uint64_t)atoi(env) : SECONDS;
  unsigned k;
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  grants = calloc(MAX_GRANTS, sizeof(*grants));
  ASSERT_NOT_NULL(grants);
  for (k = 1; k <= 3; k++)
    run(k, seconds);
  free(grants);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  harness_stop_all();
  return 0;
}
