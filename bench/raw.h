/* raw.h: the benchmark's raw mode (see raw.c). */
#ifndef REDLOCK_BENCH_RAW_H
#define REDLOCK_BENCH_RAW_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

typedef struct raw_client raw_client;
/* ok = 1 when a quorum said yes, 0 when a quorum became impossible. */
typedef void (*raw_cb)(void *arg, int ok);

int raw_client_new(uv_loop_t *loop, const char *const *servers, size_t n,
                   raw_client **out);
int raw_client_ready(const raw_client *c);
void raw_client_close(raw_client *c);
int raw_acquire(raw_client *c, const char *key, size_t keylen,
                const char *token, int64_t ttl_ms, raw_cb cb, void *arg);
int raw_release(raw_client *c, const char *key, size_t keylen,
                const char *token, raw_cb cb, void *arg);

#endif
