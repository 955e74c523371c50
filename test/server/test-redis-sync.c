/* The blocking API: 8 threads contend for one lock, through one handle
 * and through 8 separate handles; every grant's window [acquired,
 * released) is logged on the monotonic clock and no two windows overlap.
 * Auto-extension keeps running while the caller works. Closing with locks
 * still held releases them. */
#include <pthread.h>

#include "tutil.h"

#define N 3
#define THREADS 8
#define ROUNDS 12

typedef struct {
  uint64_t from, to;
  int thread;
} window;

static window windows[THREADS * ROUNDS];
static int n_windows;
static pthread_mutex_t wmutex = PTHREAD_MUTEX_INITIALIZER;
static redlock_sync_t *shared;
static redlock_sync_t *own[THREADS];
static volatile int inside;

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  redlock_sync_t *s = shared != NULL ? shared : own[id];
  redlock_acquire_opts o = {.wait_ms = 20000, .retry_count = 100000,
                            .retry_delay_ms = 5, .retry_jitter_ms = 3};
  int r;
  for (r = 0; r < ROUNDS; r++) {
    redlock_sync_lock_t *l = NULL;
    uint64_t from, to;
    int rc = redlock_sync_acquire(s, "sync-contend", 12, 5000, &o, &l);
    if (rc != 0)
      TEST_FAIL("thread %d: acquire: %s", id, redlock_err_name(rc));
    from = uv_hrtime();
    if (__sync_add_and_fetch(&inside, 1) != 1)
      TEST_FAIL("two holders at once");
    ASSERT_GT(redlock_sync_validity_ms(l), 0);
    uv_sleep(1);   /* the work done under the lock */
    __sync_sub_and_fetch(&inside, 1);
    to = uv_hrtime();
    ASSERT_EQ(redlock_sync_release(l), 0);
    pthread_mutex_lock(&wmutex);
    windows[n_windows].from = from;
    windows[n_windows].to = to;
    windows[n_windows].thread = id;
    n_windows++;
    pthread_mutex_unlock(&wmutex);
  }
  return NULL;
}

static int cmp_window(const void *a, const void *b) {
  const window *x = a;
  const window *y = b;
  return x->from < y->from ? -1 : x->from > y->from;
}

static void contend(void) {
  pthread_t th[THREADS];
  int i;
  n_windows = 0;
  for (i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i), 0);
  for (i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  ASSERT_EQ(n_windows, THREADS * ROUNDS);
  qsort(windows, (size_t)n_windows, sizeof(windows[0]), cmp_window);
  for (i = 1; i < n_windows; i++)
    if (windows[i].from < windows[i - 1].to)
      TEST_FAIL("windows overlap: thread %d and %d", windows[i - 1].thread,
                windows[i].thread);
}

int main(void) {
  harness_server srv[N];
  const char *addrs[N];
  redlock_client_config cfg;
  redlock_sync_lock_t *a;
  redlock_sync_lock_t *b;
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1};
  char tok[80];
  uint64_t t0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  harness_addrs(srv, N, addrs);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.command_timeout_ms = 2000;
  cfg.connect_timeout_ms = 2000;
  cfg.restart_guard_ms = -1;   /* brand-new servers */

  /* Bad input. */
  ASSERT_EQ(redlock_sync_new(NULL, &shared), REDLOCK_EINVAL);
  cfg.quorum = 7;
  ASSERT_EQ(redlock_sync_new(&cfg, &shared), REDLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "quorum"));
  cfg.quorum = 0;

  /* One handle shared by 8 threads. */
  ASSERT_EQ(redlock_sync_new(&cfg, &shared), 0);
  ASSERT_EQ(redlock_sync_acquire(shared, "x", 1, 0, NULL, &a),
            REDLOCK_EINVAL);
  contend();

  /* Auto-extension runs while the caller works. */
  ASSERT_EQ(redlock_sync_acquire(shared, "ae", 2, 300, &ae, &a), 0);
  ASSERT_EQ(redlock_sync_token(a, tok, 4), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_sync_token(a, tok, sizeof(tok)), 0);
  t0 = harness_now_ms();
  while (harness_now_ms() - t0 < 1200) {
    uv_sleep(20);   /* the caller's work: no loop of its own */
    ASSERT_GT(redlock_sync_validity_ms(a), 0);
    ASSERT_EQ(redlock_sync_is_lost(a), 0);
  }
  ASSERT_EQ(tu_count_holding(srv, N, "ae", tok), N);
  ASSERT_EQ(redlock_sync_extend(a, 10000), 0);
  ASSERT_GT(redlock_sync_validity_ms(a), 5000);

  /* Multi-resource and read-write locks through the blocking API. */
  {
    const void *res[2] = {"s-m1", "s-m2"};
    const size_t lens[2] = {4, 4};
    redlock_sync_lock_t *m, *r1, *r2, *w;
    ASSERT_EQ(redlock_sync_acquire_multi(shared, res, lens, 2, 10000, NULL,
                                         &m), 0);
    ASSERT_EQ(redlock_sync_acquire(shared, "s-m2", 4, 10000, &ae, &w),
              REDLOCK_ETAKEN);
    ASSERT_EQ(redlock_sync_release(m), 0);
    ASSERT_EQ(redlock_sync_acquire_rw(shared, "doc", 3, REDLOCK_READ, 10000, &ae, &r1),
              0);
    ASSERT_EQ(redlock_sync_acquire_rw(shared, "doc", 3, REDLOCK_READ, 10000, &ae, &r2),
              0);
    ASSERT_EQ(redlock_sync_acquire_rw(shared, "doc", 3, REDLOCK_WRITE, 10000, &ae, &w),
              REDLOCK_ETAKEN);
    ASSERT_EQ(redlock_sync_release(r1), 0);
    ASSERT_EQ(redlock_sync_release(r2), 0);
    ASSERT_EQ(redlock_sync_acquire_rw(shared, "doc", 3, REDLOCK_WRITE, 10000, &ae, &w),
              0);
    ASSERT_EQ(redlock_sync_release(w), 0);
  }

  /* Close with locks held: they are released. */
  ASSERT_EQ(redlock_sync_acquire(shared, "held2", 5, 60000, NULL, &b), 0);
  ASSERT_EQ(redlock_sync_close(shared), 0);
  shared = NULL;
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  /* Eight handles, one per thread. */
  for (i = 0; i < THREADS; i++)
    ASSERT_EQ(redlock_sync_new(&cfg, &own[i]), 0);
  contend();
  for (i = 0; i < THREADS; i++)
    ASSERT_EQ(redlock_sync_close(own[i]), 0);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);
  harness_stop_all();
  return 0;
}
