/* harness.h: test support. ASSERT macros that print both values, real
 * redis-server processes on free loopback ports (started, paused, killed
 * and restarted by PID, always stopped at exit), a synchronous admin
 * connection for checks, and bounded waiting. Tests never sleep to
 * synchronise: they poll a condition with a deadline. */
#ifndef REDLOCK_TEST_HARNESS_H
#define REDLOCK_TEST_HARNESS_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#define TEST_SKIP 77   /* meson: skipped */

#define TEST_FAIL(...)                                                      \
  do {                                                                      \
    fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                   \
    fprintf(stderr, __VA_ARGS__);                                           \
    fprintf(stderr, "\n");                                                  \
    harness_abort();                                                        \
  } while (0)

#define ASSERT(expr)                                                        \
  do {                                                                      \
    if (!(expr))                                                            \
      TEST_FAIL("assertion failed: %s", #expr);                             \
  } while (0)

#define ASSERT__CMP(a, op, b, type, fmt)                                    \
  do {                                                                      \
    type a_ = (type)(a);                                                    \
    type b_ = (type)(b);                                                    \
    if (!(a_ op b_))                                                        \
      TEST_FAIL("%s %s %s (%" fmt " vs %" fmt ")", #a, #op, #b, a_, b_);    \
  } while (0)

#define ASSERT_EQ(a, b) ASSERT__CMP(a, ==, b, int64_t, PRId64)
#define ASSERT_NE(a, b) ASSERT__CMP(a, !=, b, int64_t, PRId64)
#define ASSERT_LT(a, b) ASSERT__CMP(a, <, b, int64_t, PRId64)
#define ASSERT_LE(a, b) ASSERT__CMP(a, <=, b, int64_t, PRId64)
#define ASSERT_GT(a, b) ASSERT__CMP(a, >, b, int64_t, PRId64)
#define ASSERT_GE(a, b) ASSERT__CMP(a, >=, b, int64_t, PRId64)
#define ASSERT_NULL(p) ASSERT((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT((p) != NULL)
#define ASSERT_STR_EQ(a, b)                                                 \
  do {                                                                      \
    const char *sa_ = (a);                                                  \
    const char *sb_ = (b);                                                  \
    if (sa_ == NULL || sb_ == NULL || strcmp(sa_, sb_) != 0)                \
      TEST_FAIL("%s == %s (\"%s\" vs \"%s\")", #a, #b,                      \
                sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                \
  } while (0)

/* Stops every server this process started (SIGKILL, which also ends a
 * stopped one,
 * then waitpid), removes their temp dirs, then abort()s. */
void harness_abort(void);

/* ---- redis-server processes ------------------------------------------ */

typedef struct harness_server {
  int port;            /* 127.0.0.1 port, found free by bind() */
  int pid;             /* 0 when not running */
  int paused;          /* 1 while SIGSTOPped */
  char dir[256];       /* private temp dir (for AOF when enabled) */
  int appendonly;      /* start with --appendonly yes --appendfsync always */
  int tls;             /* also listen with TLS on tls_port (the plain port
                          stays for the harness's admin commands) */
  int tls_port;
  const char *tls_cert;  /* "server" (default: SAN 127.0.0.1, localhost)
                            or "wronghost" (SAN elsewhere.invalid) */
  const char *tls_auth_clients;   /* "no" (default), "yes", "optional" */
  const char *acl_user;  /* if set: "--user <acl_user>" (an ACL rule line);
                            admin commands then AUTH as admin_user/pass */
  const char *admin_user;
  const char *admin_pass;
  int clock_shim;        /* started under the clock shim (clockshim.c):
                            set by harness_clock_prepare */
  int replicaof;         /* --replicaof 127.0.0.1 <this port> (0: none) */
  int min_replicas_lag;  /* > 0: --min-replicas-to-write 1
                            --min-replicas-max-lag <this, s>: a sentinel
                            group's primary (and its replicas, for when
                            they are promoted) refuse writes when cut off
                            from every replica (docs/MASTERS.md) */
  int cluster;           /* --cluster-enabled yes (harness_cluster_*) */
  int node_timeout_ms;   /* cluster-node-timeout (0: 1000 ms) */
  int bus_port;          /* the cluster bus (picked free, not port+10000) */
  int sentinel;          /* a sentinel (harness_sentinel_start) */
  int sentinel_port;     /* the primary it watches (127.0.0.1) */
  int sentinel_quorum;
  char sentinel_name[64];
  char node_id[48];      /* CLUSTER MYID, once the cluster is made */
} harness_server;

/* Path of redis-server, or NULL when absent (tests then exit TEST_SKIP).
 * Honours $REDIS_SERVER. */
const char *harness_redis_path(void);

/* Starts n servers (n <= 32) on free loopback ports with persistence off
 * (--save '' --appendonly no), --enable-debug-command local, and waits
 * (bounded, 5 s) until each answers PING. Registers an atexit and
 * SIGINT/SIGTERM/SIGABRT handler that stops them. Exits TEST_SKIP when
 * redis-server is not installed. Aborts the test on failure. */
void harness_start(harness_server *srv, int n);
/* Stops all servers started by harness_start (by PID; waits for them). */
void harness_stop_all(void);

void harness_pause(harness_server *s);     /* SIGSTOP; returns once it is
                                              stopped (/proc state T) */
void harness_resume(harness_server *s);    /* SIGCONT */
void harness_kill(harness_server *s);      /* SIGKILL + waitpid; keys lost
                                              unless appendonly */
/* Starts the server again on the same port (and dir), waits for PING. */
void harness_restart(harness_server *s);

/* ---- Redis Cluster and Sentinel (issue 22) ------------------------------
 * A cluster: start n servers with .cluster = 1, then harness_cluster_make
 * assigns the 16384 slots evenly to the first `primaries` (ranges in
 * order), makes the rest replicas (replica k of primary k % primaries),
 * and waits (bounded) until every node sees the cluster ok, knows every
 * other node, and every replica's link is up. Done with CLUSTER
 * ADDSLOTSRANGE, MEET and REPLICATE, not redis-cli. */
void harness_cluster_make(harness_server *srv, int n, int primaries);
/* GET after ASKING on one connection (a slot being imported): 1 and the
 * value, 0 missing, -1 error. */
int harness_get_asking(const harness_server *s, const char *key, char *val,
                       size_t vallen);
/* GET on a cluster's replica (after READONLY): the same results. */
int harness_get_replica(const harness_server *s, const char *key, char *val,
                        size_t vallen);
/* "redis+cluster://127.0.0.1:PORT" of s (static buffer, 8 slots). */
const char *harness_cluster_addr(const harness_server *s);
/* The index in srv[0..n) of the primary that serves key's slot now (per
 * CLUSTER NODES of the first reachable node), or -1. */
int harness_cluster_owner(const harness_server *srv, int n, const char *key);
/* 1 when s is a primary now (ROLE), 0 a replica, -1 unreachable. */
int harness_is_primary(const harness_server *s);
/* Waits (bounded) until every reachable node of srv[0..n) reports the
 * cluster ok and agrees that `primary` serves `slot`. */
void harness_cluster_wait_owner(const harness_server *srv, int n,
                                unsigned slot, const harness_server *primary);
/* Moves one slot from src to dst with its keys: SETSLOT IMPORTING /
 * MIGRATING, then (unless `halfway`) MIGRATE of every key and SETSLOT
 * NODE on both and the others. halfway: stops after the MIGRATE of
 * `moved` keys (the ASK state); harness_cluster_finish_slot ends it. */
void harness_cluster_move_slot(harness_server *srv, int n, unsigned slot,
                               harness_server *src, harness_server *dst,
                               int halfway, int moved);
void harness_cluster_finish_slot(harness_server *srv, int n, unsigned slot,
                                 harness_server *src, harness_server *dst);

/* Sentinels: n (<= 5) redis-server --sentinel processes watching the
 * primary `primary` under `name`, quorum n / 2 + 1, down-after 500 ms,
 * failover-timeout 3000 ms; waits (bounded) until each knows the primary
 * and its replicas' count reaches `replicas`. srv[i] get .sentinel = 1. */
void harness_sentinel_start(harness_server *srv, int n, const char *name,
                            const harness_server *primary, int replicas);
/* "redis+sentinel://127.0.0.1:P1/NAME?sentinel=127.0.0.1:P2..." (static
 * buffer). */
const char *harness_sentinel_addr(const harness_server *srv, int n,
                                  const char *name);
/* The port the sentinels name for the primary now (0 if none). */
int harness_sentinel_primary_port(const harness_server *sentinel,
                                  const char *name);

/* ---- wall-clock steps ---------------------------------------------------
 * A server prepared with harness_clock_prepare (before harness_start) runs
 * under test/support/clockshim.c (LD_PRELOAD, path in $REDLOCK_CLOCKSHIM):
 * its wall clock (CLOCK_REALTIME, gettimeofday, time) is the real one plus
 * an offset kept in a file of its dir, which harness_clock_step changes at
 * once. Its monotonic clock is untouched, as on a real host. */
int harness_clock_available(void);
void harness_clock_prepare(harness_server *s);
void harness_clock_step(harness_server *s, int64_t delta_ms);
int64_t harness_clock_offset(const harness_server *s);

/* ---- TLS (certificates made with the openssl CLI at test time) -------- */

/* The directory with ca.crt, server.crt/.key, wronghost.crt/.key,
 * client.crt/.key (signed by ca) and other-ca.crt (an unrelated CA);
 * made once per process, removed at exit. Exits TEST_SKIP without the
 * openssl command. */
const char *harness_tls_dir(void);
/* Path of a file in it, in a static buffer per slot (8 slots). */
const char *harness_tls_file(const char *name);
/* "rediss://127.0.0.1:TLSPORT" of a TLS server. */
const char *harness_tls_addr(const harness_server *s);

/* "127.0.0.1:PORT" for server i, in a static buffer per slot (16 slots),
 * and an array of them suitable for redlock_client_config.servers. */
const char *harness_addr(const harness_server *s);
/* Fills out[0..n-1] with harness_addr of each. */
void harness_addrs(const harness_server *srv, int n, const char **out);

/* A port on 127.0.0.1 on which nothing listens (bound, then closed). */
int harness_free_port(void);
/* A listening socket on 127.0.0.1 and a free port (*port): its fd, to
 * accept from (a fake server) or not (a master that is a black hole: the
 * kernel's backlog takes the connections, nothing answers). */
int harness_listener(int *port);

/* ---- synchronous admin commands (hiredis sync API, 2 s timeout) ------- */

/* Runs a command given as argv on server s. Returns the reply as a string
 * in buf: bulk/status/error text as is ("ERR ..." for errors), integers in
 * decimal, nil as "(nil)"; returns 0 on success, -1 when the server cannot
 * be reached or times out. Binary-safe arguments. */
int harness_cmd(const harness_server *s, char *buf, size_t buflen,
                int argc, const char **argv, const size_t *argvlen);
/* printf-style convenience (redisCommand format). Same return. */
int harness_cmdf(const harness_server *s, char *buf, size_t buflen,
                 const char *fmt, ...);
/* GET key: returns 1 and copies the value (NUL-terminated) if it exists,
 * 0 if not, -1 on connection error. */
int harness_get(const harness_server *s, const char *key, char *val,
                size_t vallen);
/* PTTL key (ms), -2 missing, -1 no expiry; INT64_MIN on error. */
int64_t harness_pttl(const harness_server *s, const char *key);
/* SET key val PX ttl (no NX). 0 ok, -1 error. */
int harness_set(const harness_server *s, const char *key, const char *val,
                int64_t ttl_ms);
/* Number of keys in db 0 (DBSIZE), not counting the library's records
 * ("*__redlock__:maxttl", "*__redlock__:clock", "*__redlock__:broke").
 * -1 on error. */
int64_t harness_dbsize(const harness_server *s);

/* ---- time and waiting -------------------------------------------------- */

/* A time bound for this build and run: base_ms times 1 in a plain build,
 * 4 under ASan/UBSan (instrumented code on a loaded 2-core machine), 10
 * under valgrind ($REDLOCK_TEST_SLOW). Timing assertions use it (or assert
 * the property and print the figure): a bound is never the measurement's
 * own margin. */
int64_t harness_bound_ms(int64_t base_ms);

/* Monotonic ms (uv_hrtime / 1e6). */
uint64_t harness_now_ms(void);

/* Runs `loop` (UV_RUN_ONCE steps) until *flag != 0 or timeout_ms passes
 * on the monotonic clock. Returns 0 when the flag was set, -1 on timeout.
 * A short uv_timer keeps UV_RUN_ONCE from blocking past the deadline. */
int harness_run_until(uv_loop_t *loop, const volatile int *flag,
                      uint64_t timeout_ms);
/* Runs the loop until it has no more active handles (uv_run DEFAULT), but
 * fails the test if that takes more than timeout_ms; then asserts
 * uv_loop_close(loop) == 0. */
void harness_loop_close(uv_loop_t *loop, uint64_t timeout_ms);

/* Polls cond(arg) every ~2 ms until it returns nonzero or timeout_ms
 * passes (this is bounded polling of an external condition, e.g. a key on
 * a server). Returns 0 when true, -1 on timeout. */
int harness_wait_for(int (*cond)(void *arg), void *arg, uint64_t timeout_ms);

#endif

/* ---- processes: the CLI and shells ---------------------------------------- */

/* Every process started below (and every server and proxy) leads a
 * process group of its own and is recorded; the test is a child subreaper,
 * so what those processes leave behind is re-parented to it. On every exit
 * path (return from main, harness_abort, a fatal signal, meson's SIGTERM)
 * the harness kills each group and every remaining child until none is
 * left: a failing test leaves no process running. */

/* `/bin/sh -c cmd` in the background (inherits stdio); aborts on failure. */
int harness_spawn_sh(const char *cmd);
/* Runs `/bin/sh -c` on the formatted command and returns its exit status
 * (harness_wait_exit's), waiting at most 20 s (_within: ms). A command
 * longer than 4 KiB fails the test. */
int harness_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int harness_sh_within(uint64_t ms, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* exe with argv (argv[0] as given), stdout and stderr to files (truncated;
 * NULL: inherited), SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGPIPE at their default
 * and no signal blocked, whatever this process does with them. */
int harness_spawn(const char *exe, char *const *argv, const char *out,
                  const char *err);
/* The exit status of pid (128+N if killed by signal N), waiting at most
 * timeout_ms (bounded polling); on timeout its whole process group is
 * killed with SIGKILL and -1 is returned. */
int harness_wait_exit(int pid, uint64_t timeout_ms);
/* How many times needle occurs in hay (not overlapping). */
int harness_count(const char *hay, const char *needle);
/* The file's content (NUL-terminated, cut at len - 1); "" if unreadable. */
void harness_read_file(const char *path, char *buf, size_t len);

/* ---- the fault proxy (tools/redlock-faultproxy) ------------------------- */

typedef struct harness_proxy {
  int pid;
  int control_port;
  int n;
  int ports[16];       /* proxy i listens on 127.0.0.1:ports[i] */
} harness_proxy;

/* Starts `exe` in front of srv[0..n-1] (their TLS port for TLS servers:
 * the proxy moves bytes) on free ports and waits (bounded)
 * until its control port answers. Stopped by harness_stop_all. */
void harness_proxy_start(harness_proxy *p, const char *exe,
                         const harness_server *srv, int n);
/* Sends "I CMD" (I is 0-based here) and expects "OK". Aborts the test on
 * failure. CMD: normal | latency MS | blackhole | reset | refuse. */
void harness_proxy_cmd(harness_proxy *p, int i, const char *cmd);
/* Fills out[0..n-1] with "127.0.0.1:PORT" of the proxy listeners. */
void harness_proxy_addrs(const harness_proxy *p, const char **out);

/* Sends a command in RESP to server s on a new connection and returns the
 * socket without reading the reply (for DEBUG SLEEP and CLIENT PAUSE that
 * must not block the test). Close it with harness_close_fd. */
int harness_send_nowait(const harness_server *s, int argc,
                        const char **argv);
void harness_close_fd(int fd);
/* The same, then waits (bounded, 5 s) for its "+OK" reply: for CLIENT
 * PAUSE, which is in force once it answered. Aborts on another reply. */
int harness_send_ok(const harness_server *s, int argc, const char **argv);
/* Waits (bounded polling of /proc, timeout_ms) until s's main thread is
 * in a sleep system call: a DEBUG SLEEP sent with harness_send_nowait has
 * started. Aborts the test on timeout. */
void harness_wait_asleep(const harness_server *s, uint64_t timeout_ms);
