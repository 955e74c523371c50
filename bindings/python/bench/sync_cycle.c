/* sync_cycle.c: the C side of bench.py. Acquire+release cycles through
 * the C library's blocking API (redlock_sync_*), as the Python binding
 * makes them (auto-extension on, one attempt, a fresh key each cycle), so
 * that the difference is the binding's own cost.
 *
 *   sync_cycle SERVERS ITERS WARMUP [GAP_NS]
 * prints one cycle time in ns per line. GAP_NS: a busy wait between the
 * acquire's return and the release call (the caller's own time between
 * the two calls, as the binding spends it). Built by bench.py with
 *   cc -O2 sync_cycle.c -I include -L LIBDIR -lredlock -Wl,-rpath,LIBDIR
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redlock.h"

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
  const char *servers[64];
  size_t n = 0;
  char *list, *tok, *save = NULL;
  long iters, warmup, i;
  long long gap = 0;
  redlock_client_config cfg;
  redlock_acquire_opts o;
  redlock_sync_t *s;
  long long *t;
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: sync_cycle SERVERS ITERS WARMUP [GAP_NS]\n");
    return 2;
  }
  list = strdup(argv[1]);
  for (tok = strtok_r(list, ",", &save); tok != NULL && n < 64;
       tok = strtok_r(NULL, ",", &save))
    servers[n++] = tok;
  iters = atol(argv[2]);
  warmup = atol(argv[3]);
  if (argc == 5)
    gap = atoll(argv[4]);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = n;
  cfg.restart_guard_ms = -1;   /* brand-new masters */
  memset(&o, 0, sizeof(o));
  o.wait_ms = -1;
  o.auto_extend = 1;
  o.wake = 1;
  if (redlock_sync_new(&cfg, &s) != 0) {
    fprintf(stderr, "sync_cycle: %s\n", redlock_last_error());
    return 1;
  }
  t = calloc((size_t)iters, sizeof(*t));
  for (i = -warmup; i < iters; i++) {
    char key[64];
    redlock_sync_lock_t *l;
    long long t0;
    snprintf(key, sizeof(key), "bench:c:%ld", i + warmup);
    t0 = now_ns();
    if (redlock_sync_acquire(s, key, strlen(key), 10000, &o, &l) != 0) {
      fprintf(stderr, "sync_cycle: %s\n", redlock_last_error());
      return 1;
    }
    if (gap > 0) {
      long long until = now_ns() + gap;
      while (now_ns() < until)
        ;
    }
    if (redlock_sync_release(l) != 0) {
      fprintf(stderr, "sync_cycle: %s\n", redlock_last_error());
      return 1;
    }
    if (i >= 0)
      t[i] = now_ns() - t0;
  }
  for (i = 0; i < iters; i++)
    printf("%lld\n", t[i]);
  redlock_sync_close(s);
  free(t);
  free(list);
  return 0;
}
