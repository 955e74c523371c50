/* test-unit-client-oom: redlock_client_new with every allocation failing
 * in turn, for a client of a plain, a sentinel and a cluster master.
 * Each attempt must end with ENOMEM (nothing made, nothing leaked, no
 * descriptor of ours touched) or with a client that then closes. A
 * sentinel group's connection was freed on the failure path without
 * having been set up: the refactored connection dereferenced its missing
 * seam (SIGSEGV), and before that its zeroed descriptor (0) was closed:
 * the process lost its standard input. No server is needed: the masters
 * are on ports where nothing listens, and a made client is closed at
 * once. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "redlock.h"

static atomic_long live;   /* blocks of ours not freed */
static long countdown;     /* fail the allocation that takes it to 0 */

static int fail_now(void) {
  return countdown > 0 && --countdown == 0;
}

static void *t_malloc(size_t n) {
  void *p = fail_now() ? NULL : malloc(n);
  if (p != NULL)
    atomic_fetch_add(&live, 1);
  return p;
}

static void *t_calloc(size_t n, size_t size) {
  void *p = fail_now() ? NULL : calloc(n, size);
  if (p != NULL)
    atomic_fetch_add(&live, 1);
  return p;
}

static void *t_realloc(void *old, size_t n) {
  void *p;
  if (fail_now())
    return NULL;
  p = realloc(old, n);
  if (old == NULL && p != NULL)
    atomic_fetch_add(&live, 1);
  return p;
}

static void t_free(void *p) {
  if (p != NULL)
    atomic_fetch_sub(&live, 1);
  free(p);
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(int *)arg = 1;
}

int main(void) {
  char plain[64], sentinel[128], cluster[96];
  const char *servers[3];
  redlock_client_config cfg;
  long k;
  int made = 0, failed = 0;
  ASSERT_EQ(redlock_replace_allocator(t_malloc, t_realloc, t_calloc,
                                      t_free), 0);
  snprintf(plain, sizeof(plain), "127.0.0.1:%d", harness_free_port());
  snprintf(sentinel, sizeof(sentinel),
           "redis+sentinel://127.0.0.1:%d/mymaster?sentinel=127.0.0.1:%d",
           harness_free_port(), harness_free_port());
  snprintf(cluster, sizeof(cluster), "redis+cluster://127.0.0.1:%d",
           harness_free_port());
  servers[0] = plain;
  servers[1] = sentinel;
  servers[2] = cluster;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 3;
  cfg.restart_guard_ms = -1;
  for (k = 1; k < 5000; k++) {
    uv_loop_t loop;
    redlock_client_t *c = NULL;
    int rc, closed = 0;
    long before = atomic_load(&live);
    ASSERT_EQ(uv_loop_init(&loop), 0);
    countdown = k;
    rc = redlock_client_new(&loop, &cfg, &c);
    countdown = 0;
    if (rc == 0) {
      made++;
      ASSERT_EQ(redlock_client_close(c, on_closed, &closed), 0);
      while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    } else {
      failed++;
      ASSERT_EQ(rc, REDLOCK_ENOMEM);
      ASSERT(c == NULL);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    /* Our standard input is still ours, and nothing of the attempt is
     * left (the library's blocks; libuv's own are not counted). */
    ASSERT(fcntl(0, F_GETFD) != -1);
    ASSERT_EQ(atomic_load(&live), before);
    if (rc == 0 && made >= 20)
      break;   /* past the last allocation of a creation, 20 times */
  }
  fprintf(stderr, "%d creations failed with ENOMEM, one at each of their "
          "allocations; then %d made and closed\n", failed, made);
  ASSERT(failed > 20);
  return 0;
}
