/* tutil.h: helpers over the public API for the redis tests: run one lock
 * operation to completion on a loop (bounded), build a client for harness
 * servers, close it and check that nothing is left on the loop. */
#ifndef REDLOCK_TEST_TUTIL_H
#define REDLOCK_TEST_TUTIL_H

#include <uv.h>

#include "redlock.h"
#include "harness.h"

#define TU_MAX_NODES 16

typedef struct tu_op {
  volatile int done;
  int calls;                    /* must end at exactly 1 */
  int status;
  unsigned attempts, yes, no, err, n_nodes;
  int64_t validity_ms;
  uint64_t elapsed_us;
  uint64_t cb_ms;               /* harness_now_ms() when the cb ran */
  redlock_node_result nodes[TU_MAX_NODES];
  char errstr[TU_MAX_NODES][160];
  char server[TU_MAX_NODES][160];   /* copies: valid after the callback */
  char node[TU_MAX_NODES][64];
} tu_op;

/* A redlock_lock_cb that records into a tu_op (arg). */
void tu_cb(redlock_lock_t *lock, int status, const redlock_result *res,
           void *arg);

/* Starts the operation, asserts the call returned 0 and that the callback
 * did not run inside it, runs the loop until it ran (30 s bound), asserts
 * it ran once. Returns the status. */
int tu_acquire(uv_loop_t *loop, redlock_lock_t *l, int64_t ttl_ms,
               const redlock_acquire_opts *opts, tu_op *op);
int tu_extend(uv_loop_t *loop, redlock_lock_t *l, int64_t ttl_ms, tu_op *op);
int tu_release(uv_loop_t *loop, redlock_lock_t *l, tu_op *op);

/* A client on servers srv[0..n-1]; cfg may be NULL (defaults) and its
 * servers fields are filled in. Generous timeouts by default for slow CI
 * (sanitizers, valgrind) unless cfg sets them; the restart guard is off
 * unless cfg sets restart_guard_ms (the servers are brand new). Waits
 * (bounded) until `wait_up` nodes are UP. */
redlock_client_t *tu_client(uv_loop_t *loop, const harness_server *srv,
                            int n, const redlock_client_config *cfg,
                            unsigned wait_up);
/* The same on explicit addresses (clusters, sentinel groups). With
 * guard_auto, restart_guard_ms 0 stays the automatic guard. */
redlock_client_t *tu_client_guarded(uv_loop_t *loop,
                                    const char *const *addrs, int n,
                                    const redlock_client_config *cfg,
                                    unsigned wait_up);
redlock_client_t *tu_client_at(uv_loop_t *loop, const char *const *addrs,
                               int n, const redlock_client_config *cfg,
                               unsigned wait_up);
/* Waits (bounded, running the loop) until redlock_client_n_up == want. */
void tu_wait_up(uv_loop_t *loop, redlock_client_t *c, unsigned want,
                uint64_t timeout_ms);
/* Closes the client, waits for its close callback, then checks that the
 * loop has no handle left and closes it. */
void tu_close(uv_loop_t *loop, redlock_client_t *c);
/* Closes the client and waits (bounded, 10 s) for its close callback, but
 * leaves the loop open: for tests with several clients on one loop. */
void tu_close_client(uv_loop_t *loop, redlock_client_t *c);

/* 1 when the test runs slowly (under valgrind: REDLOCK_TEST_SLOW is set),
 * for widening timing margins. */
int tu_slow(void);

/* Exits TEST_SKIP when the library was built without TLS. */
void tu_require_tls(void);

/* Runs the loop for about ms milliseconds (a timer): used only to let
 * background work happen when a test asserts that something does NOT
 * happen within a window. */
void tu_run_for(uv_loop_t *loop, uint64_t ms);

/* Waits until every master has answered everything c sent it before
 * (an inspect on a scratch handle: each connection answers in order), so
 * that a check on the servers sees the effect of commands the decision
 * did not wait for (the SETs after a quorum, a background release). */
void tu_drain(uv_loop_t *loop, redlock_client_t *c);
/* The lock commands c has written to all masters (stats). */
uint64_t tu_commands_sent(const redlock_client_t *c);
/* Runs the loop until c has written at least `total` lock commands
 * (bounded: aborts after timeout_ms). */
void tu_wait_sent(uv_loop_t *loop, const redlock_client_t *c, uint64_t total,
                  uint64_t timeout_ms);
/* Runs the loop until `want` of srv[0..n-1] have a subscriber on the
 * channel (PUBSUB NUMSUB), or aborts after timeout_ms. */
void tu_wait_subscribed(uv_loop_t *loop, const harness_server *srv, int n,
                        const char *channel, int want, uint64_t timeout_ms);

/* EVALSHA calls the server has run so far (INFO commandstats), or -1. */
int64_t tu_evalsha_calls(const harness_server *s);

/* Count of servers among srv[0..n-1] on which `key` holds `token`. */
int tu_count_holding(const harness_server *srv, int n, const char *key,
                     const char *token);

/* A lock held by client `client` from `from` to `to` (ns, one clock), as
 * the safety tests record them. */
typedef struct tu_grant {
  uint64_t from, to;
  int client;
} tu_grant;
/* Sorts g by start and counts the grants that began while another
 * client's was still running (each is printed as OVERLAP). */
unsigned long tu_overlaps(tu_grant *g, int n);

/* A client's on_warning that prints each warning to stderr and appends
 * it, one line each, to tu_warnings (what a test then looks for). */
extern char tu_warnings[4096];
void tu_on_warning(redlock_client_t *c, const char *msg, void *arg);

#endif
