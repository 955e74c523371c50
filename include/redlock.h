/* redlock.h: distributed mutual exclusion over N independent Redis masters.
 *
 * The Redlock algorithm on libuv: a lock is held when a quorum of masters
 * accepted `SET key token NX PX ttl` within the lock's validity. N = 1 is
 * the ordinary single-instance Redis lock, through the same code.
 *
 * Conventions (as libuv):
 *  - Every function returns 0 or a negative REDLOCK_E* code. When a call
 *    fails, redlock_last_error() gives a message for this thread.
 *  - If a call that takes a callback returns < 0, the callback never runs.
 *    If it returns 0, the callback runs exactly once, and never from inside
 *    the call itself.
 *  - redlock_client_close() finishes every pending callback with
 *    REDLOCK_ECANCELED before its own callback fires.
 *  - Result pointers handed to a callback are valid only during the call.
 *  - A client and its locks belong to one loop and one thread.
 *  - What keeps the loop alive: an open client (its connections and
 *    reconnect timers). Close the client to let uv_run() return.
 *  - Signals: the library's sockets send with MSG_NOSIGNAL, so no SIGPIPE
 *    ever reaches the process from them; nothing needs to be ignored.
 *  - Time: validity and ages are measured on CLOCK_BOOTTIME (it keeps
 *    counting while the machine is suspended, as the masters' ttls do),
 *    never on the wall clock.
 */
#ifndef REDLOCK_H
#define REDLOCK_H

#include <stddef.h>
#include <stdint.h>

/* The async API runs on a libuv loop (include <uv.h> to use it); this
 * header only names the type, so it compiles in any C99/C11 program (even
 * strict -std=c11 -pedantic, where <uv.h> itself needs
 * _POSIX_C_SOURCE=200809L) and the blocking API needs no libuv headers. */
struct uv_loop_s;

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
# define REDLOCK_EXTERN __attribute__((visibility("default")))
#else
# define REDLOCK_EXTERN
#endif

/* The library's version: a copy of meson.build's project version (meson
 * setup refuses one that differs), which redlock_version_string() returns. */
#define REDLOCK_VERSION_MAJOR 0
#define REDLOCK_VERSION_MINOR 4
#define REDLOCK_VERSION_PATCH 0

/* ------------------------------------------------------------------------
 * Errors. Values are negative and never renumbered.
 */
#define REDLOCK_ERRNO_MAP(XX)                                                 \
  XX(EINVAL,    -1,  "invalid argument")                                      \
  XX(ENOMEM,    -2,  "out of memory")                                         \
  XX(ETAKEN,    -3,  "lock is held by another owner")                         \
  XX(ENOQUORUM, -4,  "too few masters answered to reach a quorum")            \
  XX(EEXPIRED,  -5,  "quorum reached but the validity time had run out")      \
  XX(ETIMEDOUT, -6,  "timed out")                                             \
  XX(ENOTHELD,  -7,  "lock is not held by this owner")                        \
  XX(ELOST,     -8,  "lock was lost")                                         \
  XX(ECANCELED, -9,  "operation canceled")                                    \
  XX(EBUSY,     -10, "another operation is in progress on this object")      \
  XX(EPROTO,    -11, "unexpected reply from the server")                      \
  XX(EIO,       -12, "connection to the master failed or is down")            \
  XX(ESERVER,   -13, "the server answered with an error")                     \
  XX(ERESTARTED, -14, "master may have lost keys (restart, clock step): "   \
                      "its vote does not count yet")                          \
  XX(ELIMIT,    -15, "the semaphore's limit differs from the one its "       \
                     "masters hold")                                          \

typedef enum {
#define REDLOCK__ERR_ENUM(name, val, msg) REDLOCK_##name = (val),
  REDLOCK_ERRNO_MAP(REDLOCK__ERR_ENUM)
#undef REDLOCK__ERR_ENUM
  REDLOCK_ERRNO_MAX = -100
} redlock_errno_t;

/* A static description of `err`; "unknown error" for unknown values. */
REDLOCK_EXTERN const char *redlock_strerror(int err);
/* The symbolic name ("EINVAL", ...) of `err`; "UNKNOWN" for unknown. */
REDLOCK_EXTERN const char *redlock_err_name(int err);
/* The message of the last failed call in this thread (never NULL). */
REDLOCK_EXTERN const char *redlock_last_error(void);

REDLOCK_EXTERN const char *redlock_version_string(void);

/* sizeof the public struct named `type` ("redlock_stats", ...), 0 for a
 * name it does not know: for bindings that lay the structs out themselves
 * (ctypes), to refuse a library whose structs differ from theirs. */
REDLOCK_EXTERN size_t redlock_abi_sizeof(const char *type);

/* ------------------------------------------------------------------------
 * Allocator. Call before creating any client. hiredis 0.14 has no hooks:
 * its own allocations bypass these.
 */
typedef void *(*redlock_malloc_func)(size_t size);
typedef void *(*redlock_realloc_func)(void *ptr, size_t size);
typedef void *(*redlock_calloc_func)(size_t count, size_t size);
typedef void (*redlock_free_func)(void *ptr);
REDLOCK_EXTERN int redlock_replace_allocator(redlock_malloc_func m,
                                             redlock_realloc_func r,
                                             redlock_calloc_func c,
                                             redlock_free_func f);

/* ------------------------------------------------------------------------
 * Client: the set of masters, one connection each, shared by every lock.
 */
typedef struct redlock_lock_s redlock_lock_t;

/* Durations in a config: 0 means the default; a negative value means
 * "none" (an explicit zero) where that makes sense. */
typedef struct redlock_client_s redlock_client_t;

typedef struct redlock_client_config {
  /* Masters: "redis://[user[:password]@]host[:port][/db]",
   * "unix:///path[?db=N]" or "host:port". Required, 1..REDLOCK_MAX_SERVERS. */
  const char *const *servers;
  size_t n_servers;
  /* Votes needed; 0 = n/2+1. May be raised up to n, never lowered. */
  unsigned quorum;
  /* Clock drift allowance: drift = ttl * drift_factor + 2 ms. 0 = 0.01. */
  double drift_factor;
  /* Connect + handshake deadline per master. 0 = 250 ms. */
  int connect_timeout_ms;
  /* Per-master deadline of one command. Keep it much smaller than the ttl
   * (the spec suggests 5-50 ms for a 10 s ttl). 0 = 50 ms. */
  int command_timeout_ms;
  /* Acquire retries after the first attempt. 0 = 3, negative = none. */
  int retry_count;
  /* Delay before a retry, uniform in delay +- jitter. 0 = 200 ms / 100 ms;
   * negative = none. */
  int retry_delay_ms;
  int retry_jitter_ms;
  /* Reconnect backoff: exponential from min to max, with jitter.
   * 0 = 20 ms / 2000 ms. */
  int reconnect_min_ms;
  int reconnect_max_ms;
  /* Prepended to every resource name to form the key. NULL = none. */
  const char *key_prefix;
  /* Credentials for masters whose URI has none (AUTH [user] password). */
  const char *username;
  const char *password;
  /* Restart guard: a master that restarted may have lost keys, so its yes
   * votes for an acquisition do not count until it is older than the
   * longest ttl a lock it lost could have (the spec's "delayed restart",
   * enforced by the client). Its age is counted from the first time any
   * client saw that instance (run_id), as recorded on the master itself
   * ("<prefix>__redlock__:clock"), or from this client's handshake; INFO's
   * uptime is not trusted (it is wall-clock time: a clock step inflates
   * it). Masters declared durable (`durable`, ?durable=1) that show
   * appendonly + appendfsync always count at once.
   *  0 (default): the window is the longest ttl any client of the
   *    deployment has used: every client records its ttls on the masters
   *    ("<prefix>__redlock__:maxttl", never expires, only raised: see
   *    max_ttl_ms and redlock_client_set_ttl_record) and a client reads
   *    that record from the masters whenever one of them shows a new
   *    instance. N = 1 can only use this client's own ttls.
   *  > 0: a fixed deployment-wide window; acquire and extend refuse longer
   *    ttls (EINVAL). Every client should use the same value.
   *  < 0: off (masters that cannot lose keys in a restart). Such a client
   *    still records its ttls, best effort, for the others. The clock
   *    check (clock_tolerance_ms) stays on: no persistence keeps a key
   *    whose master's clock jumped past its expiry. */
  int restart_guard_ms;
  /* TLS, for masters given as rediss://. Verification of the chain and of
   * the master's host name (or IP address) is on by default. */
  const char *tls_ca_file;      /* PEM CA bundle; NULL = the system store */
  const char *tls_ca_dir;       /* a directory of hashed CA certificates */
  const char *tls_cert_file;    /* client certificate (mutual TLS), PEM */
  const char *tls_key_file;     /* its private key, PEM */
  const char *tls_key_password; /* the key's passphrase, if encrypted */
  const char *tls_server_name;  /* SNI and verification name for every
                                   TLS master; NULL = each URI's host */
  int tls_insecure;             /* 1 = no verification at all (tests
                                   only: anyone can pose as the master) */
  /* Auto-extensions of plain locks that fall due within a few ms of each
   * other go to each master as one script call carrying up to this many
   * locks (1..256), each still decided alone at quorum. 0 = 64; negative =
   * off: each lock renews with its own extend call. */
  int renew_batch;
  /* Clock check (the guard's, see restart_guard_ms): each acquisition
   * reads every master's wall clock (TIME, in the same flush as the SET);
   * a master whose clock stepped counts again only after the deployment's
   * longest ttl, and one whose clock is off the others' by more than the
   * tolerance does not count while it lasts. 0: the tolerance is each
   * lock's drift allowance (ttl * drift_factor + 2 ms), for a master
   * restarted less than the longest ttl ago the shortest ttl's (2 ms: the
   * keys it may have lost are any holder's); > 0 a fixed
   * tolerance in ms; < 0: off (not recommended: a master whose clock
   * steps forward expires locks early). */
  int clock_tolerance_ms;
  /* Declares every master durable (1): the operator promises it runs
   * appendonly yes + appendfsync always, and has for the whole life of the
   * data it loads (no CONFIG SET of either at run time, no AOF replaced
   * by an older copy), so a restart loses no acknowledged write and its
   * votes need no restart window. Verified at every handshake and every
   * few seconds while connected: a declared master that reports otherwise
   * is guarded (and reported through on_warning), and so is its next
   * instance. Undeclared masters are guarded whatever they report, and
   * so are the nodes of a Redis Cluster or a sentinel group, declared or
   * not (a failover cannot be told from a restart; warned about). One
   * master: "redis://host:port?durable=1". 0 = not declared. */
  int durable;
  /* The deployment's cap on ttls: acquire and extend refuse longer ones
   * (EINVAL with a message), so that a typo cannot raise the restart
   * guard's window for every client (the ttl record never comes down on
   * its own). Give every client the same value. 0 = 1 hour; negative =
   * no cap (REDLOCK_MAX_TTL_MS). */
  int max_ttl_ms;
  /* Configuration warnings, on the loop thread (may be NULL): two
   * configured masters that are one instance, a replica given as a master,
   * one master replicating from another, a declared master that is not
   * durable, a clock that stepped, a master that refused the handshake
   * ("master 3 refused authentication: WRONGPASS ...": once per master
   * until it comes up, also while a quorum of others holds, and also
   * while the client closes). */
  void (*on_warning)(redlock_client_t *client, const char *msg, void *arg);
  void *warning_arg;
} redlock_client_config;

#define REDLOCK_MAX_SERVERS 64
#define REDLOCK_MAX_KEY 65536          /* bytes, prefix included */
#define REDLOCK_MAX_TTL_MS 2147483647  /* what Redis accepts for PX (int32) */

typedef void (*redlock_close_cb)(redlock_client_t *client, void *arg);

/* Creates a client on `loop` and starts connecting to every master. The
 * config is copied. Errors: EINVAL (with a message), ENOMEM. */
REDLOCK_EXTERN int redlock_client_new(struct uv_loop_s *loop,
                                      const redlock_client_config *cfg,
                                      redlock_client_t **out);

/* Closes the client: every operation in flight completes with ECANCELED,
 * every lock still held or half-acquired is released (best effort, bounded
 * by the command timeout), the connections are closed, every lock handle
 * not yet freed is freed, then `cb` runs (may be NULL). Errors: EINVAL,
 * EBUSY (already closing). */
REDLOCK_EXTERN int redlock_client_close(redlock_client_t *client,
                                        redlock_close_cb cb, void *arg);

REDLOCK_EXTERN size_t redlock_client_n_servers(const redlock_client_t *c);
REDLOCK_EXTERN unsigned redlock_client_quorum(const redlock_client_t *c);
/* Number of masters connected and ready right now. */
REDLOCK_EXTERN unsigned redlock_client_n_up(const redlock_client_t *c);
REDLOCK_EXTERN struct uv_loop_s *redlock_client_loop(
    const redlock_client_t *c);

/* What the client knows of master i (0-based) now: for status displays
 * (`redlock status`). The strings point into the client and stay valid
 * until the next call of this function on it (its loop thread only). */
typedef struct redlock_master_info {
  const char *server;        /* as configured, without password */
  int up;                    /* connected and ready */
  const char *error;         /* why it is not up, or "" */
  const char *run_id;        /* its instance, "" when unknown */
  const char *role;          /* "master", "slave", "" unknown */
  int64_t uptime_s;          /* INFO's, -1 unknown (wall clock: a step
                                inflates it; the guard does not use it) */
  int declared_durable;      /* the operator declared it durable */
  int durable;               /* and it reports appendonly + always */
  int64_t ttl_record_ms;     /* its record of the deployment's longest
                                ttl; -1 unknown */
  int clock_known;           /* its clock has been read */
  int64_t clock_skew_ms;     /* against the masters' median (+ ahead) */
  int counts;                /* a YES vote of it would count now (for the
                                longest ttl known) */
  int guard_cause;           /* when not: redlock_guard_cause */
  int64_t guard_wait_ms;     /* until it counts; -1 not a matter of time */
  const char *guard_reason;  /* why not, in words; or "" */
  const char *warning;       /* the latest configuration warning, or "" */
  /* The node described: the master itself, a cluster's primary, the
   * primary a sentinel group names ("host:port"). */
  const char *node;
  unsigned nodes;            /* redlock_client_master_info: the master's
                                nodes in use (a cluster's primaries; 1
                                otherwise), for redlock_client_node_info */
  const char *problem;       /* a cluster's topology problem (slots without
                                a primary...) or a sentinel group's (no
                                primary named), or "" */
} redlock_master_info;

/* Fills *out for master i: for a Redis Cluster its first primary (the
 * others: redlock_client_node_info). Errors: EINVAL (NULL, i out of
 * range). */
REDLOCK_EXTERN int redlock_client_master_info(redlock_client_t *c,
                                              unsigned i,
                                              redlock_master_info *out);
/* The same for node k (0 <= k < info.nodes) of master i: each primary of
 * a cluster master. Errors: EINVAL. */
REDLOCK_EXTERN int redlock_client_node_info(redlock_client_t *c, unsigned i,
                                            unsigned k,
                                            redlock_master_info *out);

/* ------------------------------------------------------------------------
 * Results: what each master said in the operation that just finished.
 */
typedef enum {
  REDLOCK_VOTE_NONE = 0,  /* not asked, or no answer before the decision */
  REDLOCK_VOTE_YES,       /* set / extended / released on this master */
  REDLOCK_VOTE_NO,        /* held by another owner / not ours there */
  REDLOCK_VOTE_ERR        /* failed: see error and errstr */
} redlock_vote_t;

typedef struct redlock_node_result {
  const char *server;     /* the master, as configured, without password */
  redlock_vote_t vote;
  int error;              /* 0 or REDLOCK_E* (EIO, ETIMEDOUT, ESERVER...) */
  const char *errstr;     /* server error text or connection error; or "" */
  uint64_t latency_us;    /* send to reply; 0 if no reply */
  /* redlock_lock_inspect only: */
  const char *holder;     /* the key's value ("" if free), cut at 159
                             bytes */
  int64_t pttl_ms;        /* the key's remaining ttl; -2 if missing */
  /* error ERESTARTED (restart guard) only: when this master's yes votes
   * count again, in ms from the decision, and the guard window; -1 when
   * not a matter of time (e.g. the ttl record could not be read). */
  int64_t guard_wait_ms;
  int64_t guard_window_ms;
  /* error ERESTARTED only: why (redlock_guard_cause). */
  int guard_cause;
  /* redlock_lock_inspect only: a read-write lock of the same name exists
   * there (its hash "<key>:rw", "{key}:rw" on a cluster master: readers,
   * a writer or waiters). */
  int rw_lock;
  /* The node that answered: for a Redis Cluster master the primary
   * ("host:port"; the first one to decide the vote when the command was
   * split over slots), for a sentinel group the primary it named; for a
   * plain master the same as server. Never NULL. */
  const char *node;
} redlock_node_result;

/* Why the guard did not count a master's YES vote. */
typedef enum {
  REDLOCK_GUARD_NONE = 0,
  REDLOCK_GUARD_RESTART,       /* its instance is younger than the window */
  REDLOCK_GUARD_CLOCK_STEP,    /* its wall clock stepped within the window */
  REDLOCK_GUARD_CLOCK_SKEW,    /* its clock is off the others' */
  REDLOCK_GUARD_CLOCK_UNKNOWN, /* its clock cannot be read or compared */
  REDLOCK_GUARD_RECORD,        /* the deployment's longest ttl is not known
                                  there (record unread, connection lost) */
  REDLOCK_GUARD_READING        /* redlock_client_master_info only: the
                                  record is being read (a new instance was
                                  seen); the verdict comes with the read */
} redlock_guard_cause;

typedef struct redlock_result {
  int status;             /* same as the callback's status */
  unsigned attempts;      /* attempts made (acquire) */
  unsigned yes, no, err;  /* votes of the last attempt */
  unsigned n_nodes;
  int64_t validity_ms;    /* remaining validity when decided; <= 0 if none */
  uint64_t elapsed_us;    /* last attempt: first send to decision */
  const redlock_node_result *nodes;   /* n_nodes entries */
  unsigned quorum;        /* votes that were needed */
} redlock_result;

/* An operation of the client itself (not of a lock). */
typedef void (*redlock_client_cb)(redlock_client_t *client, int status,
                                  const redlock_result *result, void *arg);

/* An operator's tool (`redlock guard --set-record`): sets the restart
 * guard's record of the deployment's longest ttl to ttl_ms on every
 * master. The record is only ever raised by clients (never lowered, never
 * expires), so one lock with a long ttl - a typo, a test - makes every
 * later restart of a master without persistence wait that long. Lowering
 * it to L is safe only when no lock with a ttl above L can still be held:
 * every client of the deployment uses ttls <= L (max_ttl_ms), and the
 * last acquisition or extension with a longer ttl is older than its ttl.
 * Run it when every master is up: status 0 once all of them confirmed,
 * else ENOQUORUM (the result says which did not; run it again), ECANCELED.
 * Errors from the call: EINVAL, ENOMEM. */
REDLOCK_EXTERN int redlock_client_set_ttl_record(redlock_client_t *client,
                                                 int64_t ttl_ms,
                                                 redlock_client_cb cb,
                                                 void *arg);

/* Listing the locks (`redlock ls`): the lock names held on the masters
 * under a prefix, found by SCAN on every node in use of every master (a
 * plain master's node, each primary of a Redis Cluster, a sentinel
 * group's primary), all in parallel, each node's cursor followed to its
 * end. What the library keeps beside the locks (fencing counters, the ttl
 * record, clock hashes) is left out; a read-write lock's hash and a
 * semaphore's limit record and permits each give their lock's name once.
 * A name seen on several masters is listed once, with how many showed it.
 * A snapshot: locks taken or freed meanwhile may or may not show. */
typedef enum {
  REDLOCK_NAME_LOCK = 1,        /* a plain lock (redlock_lock_inspect) */
  REDLOCK_NAME_RW = 2,          /* a read-write lock: readers, a writer or
                                   waiters */
  REDLOCK_NAME_SEMAPHORE = 3    /* a counting semaphore's record or permits
                                   (redlock_semaphore_inspect) */
} redlock_name_kind;

typedef struct redlock_scan_name {
  const void *name;       /* the lock's name (without the client's
                             key_prefix), binary-safe, not NUL-terminated */
  size_t len;
  int kind;               /* redlock_name_kind */
  unsigned masters;       /* how many masters showed it */
} redlock_scan_name;

typedef struct redlock_scan_result {
  const redlock_scan_name *names;   /* sorted by name (bytes), then kind */
  size_t n_names;
  /* 1 when every node's cursor reached its end and no cap was hit (the
   * names, the SCAN calls per node): every lock held on a master that
   * answered is listed. */
  int complete;
  int capped;             /* max_names or the call cap cut the listing */
  unsigned masters_done;  /* masters whose every node was scanned */
  unsigned n_masters;
  const char *error;      /* the first node that failed, and why; or "" */
} redlock_scan_result;

typedef void (*redlock_scan_cb)(redlock_client_t *client, int status,
                                const redlock_scan_result *result,
                                void *arg);

#define REDLOCK_SCAN_MAX_NAMES 100000
#define REDLOCK_SCAN_MAX_CALLS 10000   /* SCAN calls per node */

/* Lists the lock names that start with `prefix` (prefix_len bytes,
 * binary-safe; 0 for every name): SCAN cursor MATCH <the prefix as a
 * glob, its metacharacters escaped> COUNT 1000 on every node. Bounds:
 * each call has the command timeout; at most REDLOCK_SCAN_MAX_CALLS per
 * node; max_names (1..REDLOCK_SCAN_MAX_NAMES) distinct names kept (more
 * are counted as a cap hit, not kept); the whole listing ends within
 * wait_ms (0: 10 s; at most one hour). A reply that is not [cursor,
 * [names...]] fails its node; names longer than REDLOCK_MAX_KEY are
 * skipped. The callback gets 0 once a quorum of masters was scanned to
 * the end (or cut by a cap), ENOQUORUM when too few could be, ETIMEDOUT
 * when wait_ms passed first (what was found so far is listed either
 * way), ECANCELED when the client closes. The result is valid during the
 * callback only. Errors from the call: EINVAL, ENOMEM, ECANCELED (the
 * client is closing). */
REDLOCK_EXTERN int redlock_client_scan(redlock_client_t *client,
                                       const void *prefix, size_t prefix_len,
                                       unsigned max_names, int64_t wait_ms,
                                       redlock_scan_cb cb, void *arg);

/* Writes into buf (always NUL-terminated when len > 0) why an operation
 * ended as it did, in words an operator understands, e.g. "no quorum (3
 * needed): 3 of 5 masters restarted less than 10.0 s ago (restart guard)
 * and their votes count again within 8.3 s; 1 unreachable
 * (127.0.0.1:7104: connection refused)". Returns the length the full text
 * needs, as snprintf does. */
REDLOCK_EXTERN int redlock_result_explain(const redlock_result *res,
                                          char *buf, size_t len);

/* ------------------------------------------------------------------------
 * Statistics: always on (a few counters and one histogram bucket per
 * reply), read with redlock_client_stats() from the client's thread.
 *
 * Latency histograms are log-linear over microseconds: buckets 0-3 hold
 * 0, 1, 2, 3 us; above, each power of two is split in 4 equal buckets,
 * up to bucket REDLOCK_HIST_BUCKETS - 1, which also holds everything
 * slower. redlock_hist_upper_us(b) is bucket b's exclusive upper bound.
 */
#define REDLOCK_HIST_BUCKETS 64

typedef struct redlock_master_stats {
  const char *server;        /* as in results: without password */
  int up;                    /* connected and ready now */
  uint64_t commands;         /* lock commands written (not the handshake) */
  uint64_t replies;          /* their answers */
  uint64_t server_errors;    /* answers that were errors (-ERR ...) */
  uint64_t timeouts;         /* connections torn down at a deadline */
  uint64_t conn_failures;    /* connections lost or refused otherwise */
  uint64_t connects;         /* handshakes completed */
  uint64_t guard_refusals;   /* yes votes the restart guard did not count */
  uint64_t latency_sum_us;   /* of every answer */
  uint64_t latency_hist[REDLOCK_HIST_BUCKETS];   /* per answer, us */
  /* A Redis Cluster master: redirections followed (MOVED: the map was
   * out of date; ASK: a slot being migrated), and its primaries in use. */
  uint64_t moved;
  uint64_t asked;
  unsigned primaries;
} redlock_master_stats;

/* One node of a master: a plain master's only node, or a primary of a
 * Redis Cluster master (each primary gets its share of the commands). */
typedef struct redlock_node_stats {
  const char *node;          /* "host:port" */
  unsigned master;           /* its master's index in masters[] */
  int up;
  uint64_t commands;         /* lock commands written to it */
  uint64_t replies;
  uint64_t server_errors;
  uint64_t timeouts;
  uint64_t conn_failures;
  uint64_t connects;
  uint64_t guard_refusals;
  uint64_t latency_sum_us;
} redlock_node_stats;

#define REDLOCK_MAX_NODES 256   /* nodes reported in redlock_stats */

typedef struct redlock_stats {
  /* Acquisitions: every attempt, and how each ended. */
  uint64_t attempts, grants, taken, noquorum, expired;
  uint64_t acquire_timeouts;  /* acquisitions ended at their wait deadline */
  uint64_t canceled;          /* operations ended by cancel or close */
  uint64_t extensions;        /* successful extends (auto or not) */
  uint64_t extension_failures;
  uint64_t lost;              /* locks lost while held */
  uint64_t releases;          /* release calls completed */
  unsigned quorum;
  unsigned n_masters;
  /* Per master: a cluster's are the sums of its primaries'. */
  redlock_master_stats masters[REDLOCK_MAX_SERVERS];
  /* Every node in use (a master's only node, or each primary of a
   * cluster that served or serves slots), at most REDLOCK_MAX_NODES. */
  unsigned n_nodes;
  redlock_node_stats nodes[REDLOCK_MAX_NODES];
} redlock_stats;

/* Copies the client's counters into *out. Errors: EINVAL. */
REDLOCK_EXTERN int redlock_client_stats(const redlock_client_t *client,
                                        redlock_stats *out);
/* Bucket b's exclusive upper bound in us (UINT64_MAX for the last). */
REDLOCK_EXTERN uint64_t redlock_hist_upper_us(unsigned b);
/* The q-quantile (0..1) of a histogram, as its bucket's upper bound in us
 * (0 when empty). */
REDLOCK_EXTERN uint64_t redlock_hist_quantile_us(const uint64_t *hist,
                                                 double q);
/* The stats in the Prometheus text exposition format (version 0.0.4):
 * counters redlock_*_total, the gauge redlock_master_up and the histogram
 * redlock_master_latency_seconds, per master labelled master="...".
 * Writes into buf as snprintf does; returns the length the full text
 * needs. */
REDLOCK_EXTERN int redlock_stats_prometheus(const redlock_stats *stats,
                                            char *buf, size_t len);

/* An operation that finished, for tracing: one call per acquire (its
 * final outcome), extend (the user's or the auto-extension's), release
 * and inspect, with each master's vote, latency and error; and, while an
 * acquisition waits, one per failed attempt that will be retried (its
 * votes: why it waits, e.g. for progress messages). */
typedef enum {
  REDLOCK_EV_ACQUIRE = 1,
  REDLOCK_EV_EXTEND,
  REDLOCK_EV_AUTO_EXTEND,
  REDLOCK_EV_RELEASE,
  REDLOCK_EV_INSPECT,
  REDLOCK_EV_ATTEMPT      /* an attempt failed; another one will follow */
} redlock_event_kind;

typedef struct redlock_event {
  redlock_event_kind kind;
  const void *resource;       /* as given to redlock_lock_new */
  size_t resource_len;
  int status;
  const redlock_result *result;
} redlock_event;

typedef void (*redlock_event_cb)(redlock_client_t *client,
                                 const redlock_event *ev, void *arg);
/* Sets (or with NULL clears) the client's event hook. It runs on the
 * loop thread after the operation's own callback; it must not block. */
REDLOCK_EXTERN int redlock_client_set_event_hook(redlock_client_t *client,
                                                 redlock_event_cb cb,
                                                 void *arg);

/* ------------------------------------------------------------------------
 * Locks. A handle names one resource; it can be acquired, extended and
 * released many times, one operation at a time.
 */
typedef void (*redlock_lock_cb)(redlock_lock_t *lock, int status,
                                const redlock_result *result, void *arg);

/* The lost-lock signal of an auto-extended lock (see auto_extend). */
typedef void (*redlock_lost_cb)(redlock_lock_t *lock, int reason, void *arg);

typedef struct redlock_acquire_opts {
  /* Overall deadline, from the call: keep trying until then (the retry
   * count does not apply); the callback gets ETIMEDOUT when it passes
   * (the result shows the last attempt's votes), at most a command
   * timeout after it whatever the masters do (an attempt in flight is
   * bounded by it too, also its requests queued behind a connection's
   * handshake). 0 = no deadline: up to the retry count; negative = one
   * attempt only. Every request, with or without a wait, ends by the
   * connect plus the command timeout from when it was made. */
  int wait_ms;
  /* Override the client's retry policy for this call (same meanings). */
  int retry_count;
  int retry_delay_ms;
  int retry_jitter_ms;
  /* Auto-extension (opt-in): while held, the lock is extended to its ttl
   * every ttl/3; a failed extension is retried quickly while validity
   * remains. It stops at release (before the release is sent: an
   * extension never races a release), at free and at client close. */
  int auto_extend;
  /* Every extension of this lock (automatic or not) also re-creates the
   * key with our token where it is missing (a master that restarted
   * empty), counting it as a yes. */
  int heal;
  /* Called exactly once if an auto-extended lock is lost: reason
   * REDLOCK_ENOTHELD at once when a majority answers that the key is gone
   * or someone else's, REDLOCK_EEXPIRED when the validity ran out with no
   * successful extension. Never after release, free or close. May be
   * NULL (then poll redlock_lock_is_lost). In the blocking API `lock` is
   * the caller's redlock_sync_lock_t (cast it back). */
  redlock_lost_cb on_lost;
  void *lost_arg;
  /* Fencing token (opt-in, one extra round trip): each acquisition gets a
   * number that strictly increases across holders of the resource, for
   * the protected resource to reject stale writers. Kept in the key
   * "<key>:fence" on every master. Before every increment the counter is
   * raised to the master's clock in microseconds since 1970 (TIME), so a
   * counter that a restart lost (no persistence) or rolled back (an RDB
   * snapshot, an AOF cut short) starts again above every number handed
   * out since (at most one per microsecond per master: one script call
   * each). That assumes the masters' clocks move forward and roughly
   * together, as Redlock's ttls already do (the clock check keeps a master
   * whose clock stepped out of the quorum for a while, but a master whose
   * clock is set back AND loses its counter can hand out an old number):
   * with clocks you do not trust, run masters with appendonly +
   * appendfsync always. Numbers stay far below 2^63 (about 2^51 today).
   * Failed attempts also increment the counter, so tokens jump: only
   * their order means something. */
  int fence;
  /* Reentrancy: acquiring a handle that already holds its lock adds a
   * hold instead of failing with EBUSY; each release removes one, and the
   * last one releases on the masters. No round trip, unless the new ttl
   * is longer than the lock's: then the lock is extended to it first (one
   * extend round; on failure no hold is added and the callback gets the
   * extend's status). The owner is the handle: pass it to the code that
   * re-enters. */
  int reentrant;
  /* Wake-up instead of polling: while waiting for a lock held by another
   * owner, listen on its release channel (one subscriber connection per
   * master, made on first use) and retry at once when it is released; the
   * retry delay stays as the fallback. Releases by this library publish;
   * other implementations' do not (then the delay applies). */
  int wake;
  /* With auto_extend: a lock that could not be extended is declared lost
   * (on_lost, REDLOCK_EEXPIRED) this long BEFORE its validity ends, so
   * that whatever it protects can stop while the lock still holds (as an
   * elected leader steps down). 0 = at the end of the validity; below half
   * the ttl (EINVAL otherwise). */
  int lost_margin_ms;
  /* Who holds it (opt-in; issue 33): 1..REDLOCK_MAX_HOLDER bytes, no
   * NUL, such as "host:pid" or a job's name. The value set on the masters
   * becomes "<40 hex>.<holder>" (as an election's is "<40 hex>.<identity>")
   * and stays one opaque string: other Redlock implementations compare it
   * whole, as they compare any value; compare-and-delete stays exact.
   * Anyone reading the key sees it (redlock_lock_inspect's holder, read
   * back with redlock_token_holder; `redlock status`): never a secret.
   * NULL: the 40 hex alone. Taken by each acquisition (a reentrant one
   * keeps the held token's); EINVAL on an election's lock (its identity
   * is its holder). Added in 0.4 at the end of the struct: rebuild
   * programs made with 0.3's header. */
  const char *holder;
} redlock_acquire_opts;

#define REDLOCK_MAX_HOLDER 80

/* The holder part of a lock's value, as redlock_lock_inspect shows it
 * (redlock_node_result.holder) or redlock_lock_token returns it: the bytes
 * after "<40 lowercase hex>." in a value made with opts.holder or by an
 * election; NULL for any other value (a token without a holder, another
 * implementation's value, NULL). Points into `value`. */
REDLOCK_EXTERN const char *redlock_token_holder(const char *value);

/* Creates a handle for `resource` (binary-safe, 1..REDLOCK_MAX_KEY bytes
 * with the prefix). Errors: EINVAL, ENOMEM, ECANCELED (client closing). */
REDLOCK_EXTERN int redlock_lock_new(redlock_client_t *client,
                                    const void *resource, size_t len,
                                    redlock_lock_t **out);

/* A handle for K resources (1..REDLOCK_MAX_RESOURCES) locked together:
 * on each master all K keys are set only if none exists (one script), and
 * extend and release act on all K. Fencing needs a single resource. */
#define REDLOCK_MAX_RESOURCES 64
REDLOCK_EXTERN int redlock_lock_new_multi(redlock_client_t *client,
                                          const void *const *resources,
                                          const size_t *lens, size_t k,
                                          redlock_lock_t **out);

/* The side of a read-write lock a handle takes. (Not 0/1: a bare boolean
 * is refused with EINVAL.) */
typedef enum { REDLOCK_READ = 'R', REDLOCK_WRITE = 'W' } redlock_rw_side;

/* A read-write lock on `resource`: many readers or one writer, each with
 * its own expiry (server time), over the quorum as usual. `side` is
 * REDLOCK_READ or REDLOCK_WRITE. Expired owners are purged by every script.
 *
 * Policy: phase-fair; neither side starves.
 *  - A writer that is refused leaves an intent: new readers stay out, so
 *    a stream of readers cannot starve it.
 *  - A reader that is refused (a writer holds, or an intent is there)
 *    waits for the next read phase: when a writer's hold ends (release or
 *    expiry), the readers waiting then are entitled to go before the next
 *    writer, even with writers waiting. The phase opens when the first of
 *    them is back (writers wait for it: at most its retry delay, or its
 *    lease if it died; with opts.wake it is back within milliseconds);
 *    the others join while readers hold the lock, and one that comes back
 *    later keeps its turn for the next phase. So phases alternate: one
 *    writer, the readers that waited for it, the next writer.
 *  - A waiter's place (intent, or a reader's queue entry) lives only
 *    while it retries: it lasts retry delay + jitter + 2 x command
 *    timeout + 100 ms after each attempt, is renewed by the next attempt,
 *    and is withdrawn when the acquisition ends (granted, given up,
 *    cancelled). A waiter that dies holds the other side back at most
 *    that long. An acquisition with a single attempt (wait_ms < 0, or
 *    retry_count < 0 without a wait_ms) leaves no place.
 *  - Every client that uses a resource's read-write lock must run this
 *    policy (0.2 or later): 0.1 clients count the waiters' places as
 *    readers, and a 0.1 writer and a 0.2 reader can keep each other out
 *    for as long as both retry. Exclusion holds either way.
 *  - There is no order among writers (nor among readers): whichever
 *    attempt reaches a quorum first wins, as for plain locks.
 *  - The policy is decided on each master; masters that disagree (an
 *    attempt raced another) cost a retry, never exclusion.
 *  - The modes of one resource exclude each other: a plain lock of it
 *    (redlock_lock_new, or another Redlock library's SET NX PX on the
 *    key) keeps readers and writers out, and readers or a writer keep a
 *    plain lock out. While the read-write lock has an owner it holds the
 *    plain key too, set to "__redlock__:rw" with its longest owner's
 *    expiry (so any plain SET NX is refused); an acquisition is refused
 *    while the key holds anything else, and an extend fails on a master
 *    where it does. Every client of the resource needs this version: a
 *    read-write lock of 0.3 or earlier does not hold the key (and on a
 *    cluster keeps its hash under another name, "<key>:rw").
 * A lock's name is its key, and must not be an application key: over a
 * key that is not a string (a hash, ...) an acquisition fails on that
 * master with "the name holds a non-lock key (hash)" (ESERVER), over a
 * string it is refused as another library's plain lock. On plain masters
 * a read-write lock "a" also uses "a:rw": a lock named "a:rw" collides.
 * Kept in the hash "<key>:rw" ("{key}:rw" on a Redis Cluster master: the
 * plain key's slot), plus the plain key while held. Fencing, inspect and
 * heal do not apply. Errors: as redlock_lock_new. */
REDLOCK_EXTERN int redlock_rwlock_new(redlock_client_t *client,
                                      const void *resource, size_t len,
                                      redlock_rw_side side,
                                      redlock_lock_t **out);

/* ------------------------------------------------------------------------
 * Counting semaphores: at most `limit` holders of a name at once, across
 * every client (docs/DESIGN.md, "Counting semaphores").
 *
 * A semaphore of limit K is K mutexes, its permits: permit i is a Redlock
 * lock of the key "{<key>}:sem:<i>", and a holder owns one of them. So
 * the bound is the mutex's: at most K holders inside their validity
 * whenever fewer than a quorum of masters are faulty. (Per-master holder
 * counts with a majority quorum would NOT bound them: N = 5, K = 2 admits
 * three holders with no fault at all.)
 *
 * The handle is a lock handle (redlock_lock_t): redlock_lock_acquire
 * picks a permit that looks free and acquires it as a mutex (the restart
 * guard, the clock check, retries, wait_ms, wake, auto_extend with
 * on_lost, fence: a counter per permit, cancel); extend, release, free,
 * validity, token, fence, reentrant and heal work as for a plain lock.
 * Inspect it with redlock_semaphore_inspect (redlock_lock_inspect,
 * redlock_lock_force_release and redlock_lock_adopt refuse it: EINVAL).
 *
 * The limit is stored on every master (the hash "{<key>}:sem": k, and hi
 * the highest limit ever set; it never expires), created by the first
 * acquisition there. An acquisition whose limit differs from a master's
 * is refused there ("ERR semaphore limit mismatch: 2 on this master, 3
 * asked", error REDLOCK_ELIMIT in the result) and, unless a quorum of
 * the other masters grant it, ends at once with REDLOCK_ELIMIT: change
 * the limit with redlock_semaphore_set_limit, not by using another one.
 * A permit at or above a master's stored limit is never granted there.
 * A refused acquisition reads up to K keys per master (after a refusal
 * only). A semaphore "a" does not exclude a plain lock "a" (other keys).
 */
#define REDLOCK_MAX_PERMITS 1024

/* A semaphore handle for `resource` (as redlock_lock_new) with `limit`
 * permits (1..REDLOCK_MAX_PERMITS). Nothing is sent until it is acquired.
 * Errors: EINVAL (limit out of range, bad resource), ENOMEM, ECANCELED. */
REDLOCK_EXTERN int redlock_semaphore_new(redlock_client_t *client,
                                         const void *resource, size_t len,
                                         unsigned limit,
                                         redlock_lock_t **out);
/* The handle's limit (0 if it is not a semaphore). */
REDLOCK_EXTERN unsigned redlock_semaphore_limit(const redlock_lock_t *sem);
/* The permit the handle holds (0..limit-1), or -1 when not held (or not
 * a semaphore). */
REDLOCK_EXTERN int redlock_semaphore_permit(const redlock_lock_t *sem);

/* Changes the semaphore's limit on every master to `limit`, and the
 * handle's (on success). Raising lets more holders in at once. Shrinking
 * never evicts: a holder of a permit >= the new limit keeps it (extends
 * and releases it as usual) until it releases or its ttl runs out; no
 * permit >= the new limit is granted any more. Clients still using the
 * old limit get ELIMIT. Waiters are woken. status 0 once every master
 * confirmed, else ENOQUORUM (run it again), ECANCELED. Errors: EINVAL,
 * EBUSY (an operation in flight on the handle). */
REDLOCK_EXTERN int redlock_semaphore_set_limit(redlock_lock_t *sem,
                                               unsigned limit,
                                               redlock_lock_cb cb,
                                               void *arg);

/* An operator's forced release of one permit (its index, as inspect
 * shows it), whatever token holds it, on every master; its waiters are
 * woken. The holder is not told (as redlock_lock_force_release). status
 * 0 once every master answered, else ENOQUORUM. Not on a handle that
 * holds a permit (EBUSY). Errors: EINVAL (permit >= REDLOCK_MAX_PERMITS,
 * not a semaphore). */
REDLOCK_EXTERN int redlock_semaphore_force_release(redlock_lock_t *sem,
                                                   unsigned permit,
                                                   redlock_lock_cb cb,
                                                   void *arg);

typedef struct redlock_permit_info {
  unsigned index;
  const char *holder;     /* the value the most masters hold there, cut
                             at 159 bytes (a holder's token) */
  unsigned masters;       /* how many masters hold that value */
  int held;               /* masters >= quorum: the permit is taken */
  int64_t pttl_ms;        /* held: until fewer than a quorum hold it (the
                             quorum-th longest pttl); else the longest */
} redlock_permit_info;

typedef struct redlock_semaphore_info {
  unsigned limit;         /* the limit a quorum of masters hold; 0 when
                             none (never acquired, or being changed) */
  unsigned limit_max;     /* the largest limit any master holds */
  unsigned held;          /* permits held by a quorum */
  unsigned free;          /* permits below `limit` not held by a quorum */
  unsigned n_permits;     /* entries in permits: every permit that some
                             master holds, by index */
  const redlock_permit_info *permits;
} redlock_semaphore_info;

typedef void (*redlock_semaphore_info_cb)(redlock_lock_t *sem, int status,
                                          const redlock_semaphore_info *info,
                                          const redlock_result *result,
                                          void *arg);
/* Reads the limit and every permit on every master (bounded by the
 * command timeout), changing nothing; an auto-extension keeps running.
 * status 0 when a quorum answered, else ENOQUORUM (info then says what
 * the masters that answered hold). info and result are valid during the
 * callback only. Errors: EINVAL, EBUSY, ENOMEM. */
REDLOCK_EXTERN int redlock_semaphore_inspect(redlock_lock_t *sem,
                                             redlock_semaphore_info_cb cb,
                                             void *arg);

/* Frees the handle. A lock still held is released in the background first.
 * Allowed inside the lock's own callback (the free is deferred). Errors:
 * EINVAL, EBUSY (an operation is in flight: its callback has not run). */
REDLOCK_EXTERN int redlock_lock_free(redlock_lock_t *lock);

/* Frees the handle WITHOUT releasing: a held lock stays on the masters
 * until its ttl runs out or someone releases it with its token (for
 * handing a lock to another process). Errors: EINVAL, EBUSY. */
REDLOCK_EXTERN int redlock_lock_detach(redlock_lock_t *lock);

/* Acquires the lock for `ttl_ms` (1..REDLOCK_MAX_TTL_MS). `opts` may be
 * NULL. The callback gets 0 (held; see redlock_lock_validity_ms) or
 * ETAKEN, ENOQUORUM, EEXPIRED, ETIMEDOUT (wait deadline), ECANCELED. A
 * failed attempt is released on every master before the next one. An
 * auto-extension still running on this handle (a lock that was just lost)
 * is stopped first. Errors from the call: EINVAL, EBUSY (held or operation
 * in flight). */
REDLOCK_EXTERN int redlock_lock_acquire(redlock_lock_t *lock, int64_t ttl_ms,
                                        const redlock_acquire_opts *opts,
                                        redlock_lock_cb cb, void *arg);

/* Cancels the acquisition in flight on this handle (waiting between
 * attempts, or an attempt on the wire): whatever its current token set on
 * the masters is released (and a waiting writer's intent withdrawn), and
 * its callback gets ECANCELED on the next loop turn (the result shows the
 * votes so far). A reentrant acquisition waiting for its extend leaves the
 * lock held as it was. Errors: EINVAL (NULL, freed, or no acquisition in
 * flight: none started, or already decided, when its callback brings its
 * own status). */
REDLOCK_EXTERN int redlock_lock_cancel(redlock_lock_t *lock);

/* Extends a held lock to `ttl_ms` from now, only where the key still holds
 * our token. Success renews the validity. The callback gets 0, ENOTHELD
 * (a majority says the key is gone or someone else's: the lock is lost),
 * EEXPIRED (the ttl ran out during the round: lost), ENOQUORUM,
 * ECANCELED. From the moment the call is made the validity is at most
 * the call's time + ttl_ms - drift (the new ttl may reach some masters
 * even if the extend fails), so after an extend to a SHORTER ttl that
 * does not succeed the lock is valid at most that long. An auto-extension
 * in flight is superseded. Errors from the call: EINVAL, ENOTHELD (not
 * held), ELOST (the lock was lost: see on_lost), EBUSY. */
REDLOCK_EXTERN int redlock_lock_extend(redlock_lock_t *lock, int64_t ttl_ms,
                                       redlock_lock_cb cb, void *arg);

/* Releases the lock on every master (compare-and-delete: never another
 * owner's key). Completes when a quorum confirmed, or when every master
 * answered; the callback gets 0, ENOTHELD (nothing of ours was found on a
 * quorum: it had expired or was lost), ENOQUORUM, ECANCELED. The handle is
 * released afterwards in every case. Errors: EINVAL, ENOTHELD (never
 * acquired), EBUSY. */
REDLOCK_EXTERN int redlock_lock_release(redlock_lock_t *lock,
                                        redlock_lock_cb cb, void *arg);

/* An operator's forced release (`redlock unlock --force`, as Redisson's
 * forceUnlock, `consul kv delete`, `etcdctl del`): deletes the handle's
 * keys, and a read-write lock's hash of the same name, on every master
 * whatever token they hold, and wakes their waiters. The holder is not
 * told: it believes it holds the lock until its next extension finds it
 * gone (or its validity ends), so use it only for a holder known to be
 * dead or stuck; the fencing counter stays, so a fenced resource still
 * rejects that holder's writes once a new holder has written. Waits for
 * every master: status 0 once all of them answered, else ENOQUORUM (the
 * result says which did not: the keys may remain there until their ttl).
 * Not on a handle that holds its lock (EBUSY) or a read-write handle
 * (EINVAL: use a plain handle of the same name). */
REDLOCK_EXTERN int redlock_lock_force_release(redlock_lock_t *lock,
                                              redlock_lock_cb cb,
                                              void *arg);

/* Reads the key on every master (its value and remaining ttl), without
 * changing anything; waits for every master (bounded by the command
 * timeout). Per master: vote YES if the key exists (holder, pttl_ms), NO
 * if it is free, ERR if unreachable. The callback gets 0 when a quorum
 * answered, else ENOQUORUM. An auto-extension keeps running meanwhile.
 * Errors: EINVAL, EBUSY. */
REDLOCK_EXTERN int redlock_lock_inspect(redlock_lock_t *lock,
                                        redlock_lock_cb cb, void *arg);

/* Takes over a lock acquired elsewhere (another process, `redlock
 * acquire`) under `token` (1..128 bytes, NUL-terminated): extend and
 * release then act on it. Its validity is unknown (0) until a successful
 * extend. A token starting with "__redlock__:" is refused (EINVAL): that
 * is the library's own marker (a read-write lock's value of the plain
 * key), never a holder's token. Errors: EINVAL, EBUSY (in flight or
 * held). */
REDLOCK_EXTERN int redlock_lock_adopt(redlock_lock_t *lock,
                                      const char *token);

/* Remaining validity in ms on the monotonic clock; 0 if not held. */
REDLOCK_EXTERN int64_t redlock_lock_validity_ms(const redlock_lock_t *lock);
/* 1 if acquired and the validity has not run out, else 0. */
REDLOCK_EXTERN int redlock_lock_is_held(const redlock_lock_t *lock);
/* Holds on a reentrant lock (0 when not held). */
REDLOCK_EXTERN unsigned redlock_lock_holds(const redlock_lock_t *lock);
/* The fencing token of the current acquisition (opts.fence); 0 if none. */
REDLOCK_EXTERN uint64_t redlock_lock_fence(const redlock_lock_t *lock);
/* 1 if the lock was lost while held (see on_lost), until the next acquire. */
REDLOCK_EXTERN int redlock_lock_is_lost(const redlock_lock_t *lock);
/* The token of the current (or last) attempt, NUL-terminated hex. */
REDLOCK_EXTERN const char *redlock_lock_token(const redlock_lock_t *lock);
/* The resource name as given (not NUL-terminated if binary); len may be
 * NULL. */
REDLOCK_EXTERN const void *redlock_lock_resource(const redlock_lock_t *lock,
                                                 size_t *len);
REDLOCK_EXTERN redlock_client_t *redlock_lock_client(
    const redlock_lock_t *lock);
REDLOCK_EXTERN void *redlock_lock_get_data(const redlock_lock_t *lock);
REDLOCK_EXTERN void redlock_lock_set_data(redlock_lock_t *lock, void *data);

/* ------------------------------------------------------------------------
 * Leader election: one leader among the instances that campaign for a
 * resource, standbys that take over when it goes.
 *
 * A campaign is an acquisition that never gives up: standbys listen for the
 * leader's release message and ask the masters when its keys expire, so a
 * dead leader is replaced as its lock expires, a resigning one at once.
 * The leader's lock is extended every ttl/3; a leader that cannot extend
 * steps down (DEPOSED, reason EEXPIRED) `step_down_ms` BEFORE its validity
 * ends, and at once (ENOTHELD) when a majority says the lock is not its
 * own any more. After losing, an instance campaigns again (unless `once`).
 * The leader's extensions heal: a master that lost the key (restarted
 * empty) gets it back with the next extension.
 * The lock's value is "<40 hex>.<identity>": the identity travels with
 * it, and compare-and-delete stays exact.
 */
typedef struct redlock_election_s redlock_election_t;

typedef enum {
  REDLOCK_ELECTED = 1,   /* this instance is the leader now */
  REDLOCK_DEPOSED        /* it is not any more: reason ENOTHELD (the lock
                            is gone or someone else's), EEXPIRED (no
                            extension in time: stepped down), or 0 after
                            redlock_election_resign */
} redlock_election_event;

typedef void (*redlock_election_cb)(redlock_election_t *e,
                                    redlock_election_event ev, int reason,
                                    void *arg);

typedef struct redlock_election_opts {
  int64_t ttl_ms;        /* the leader's lock ttl; 0 = 10 s */
  int retry_delay_ms;    /* a standby polls at least this often; 0 = the
                            client's retry delay (200 ms) */
  int step_down_ms;      /* a leader that could not extend steps down this
                            long before its validity ends; 0 = ttl / 10,
                            at least 2 command timeouts */
  int once;              /* after losing, do not campaign again */
  redlock_election_cb on_change;   /* may be NULL (poll is_leader); in the
                                      blocking API it runs on the
                                      background thread */
  void *arg;
} redlock_election_opts;

/* An election handle for `resource` with this instance's `identity`
 * (1..80 bytes, no NUL). It does not campaign yet. Errors: EINVAL, ENOMEM,
 * ECANCELED (client closing). */
REDLOCK_EXTERN int redlock_election_new(redlock_client_t *client,
                                        const void *resource, size_t len,
                                        const char *identity,
                                        const redlock_election_opts *opts,
                                        redlock_election_t **out);
/* Starts campaigning: on_change(ELECTED) once this instance leads.
 * Errors: EINVAL, EBUSY (already campaigning or leading). */
REDLOCK_EXTERN int redlock_election_campaign(redlock_election_t *e);
/* Stops campaigning; a leader releases its lock (standbys hear it at once)
 * and gets on_change(DEPOSED, 0). Nothing to do is not an error. */
REDLOCK_EXTERN int redlock_election_resign(redlock_election_t *e);
/* Only from on_change(DEPOSED) with a reason (a loss): keep what is left
 * of the lost lock, no release and no new campaign, until
 * redlock_election_stepped_down (or resign/free, which release it): the
 * keys still protect the leader's work while it stops (a standby takes
 * over when they expire or the release comes). Without it the lock is
 * released at once. Errors: EINVAL (not inside such a callback). */
REDLOCK_EXTERN int redlock_election_hold(redlock_election_t *e);
/* After hold: the work has stopped; release what is left and campaign
 * again (unless once). Not holding is not an error. Errors: EINVAL. */
REDLOCK_EXTERN int redlock_election_stepped_down(redlock_election_t *e);
/* 1 while this instance leads (its validity has not run out). */
REDLOCK_EXTERN int redlock_election_is_leader(const redlock_election_t *e);
/* The lock of the current leadership (its token, fence, validity). */
REDLOCK_EXTERN redlock_lock_t *redlock_election_lock(
    const redlock_election_t *e);
/* Resigns and frees the handle (on_change runs no more). */
REDLOCK_EXTERN int redlock_election_free(redlock_election_t *e);

/* Who leads `resource` now, read from every master: `identity` is the
 * leader's identity ("" when there is none: no value held by a quorum, or
 * a lock of another kind), `ttl_ms` how long it stays leader without an
 * extension (the time until fewer than a quorum hold it). status: 0, or
 * ENOQUORUM (too few masters answered), ECANCELED. */
typedef void (*redlock_leader_cb)(redlock_client_t *client, int status,
                                  const char *identity, int64_t ttl_ms,
                                  void *arg);
REDLOCK_EXTERN int redlock_election_leader(redlock_client_t *client,
                                           const void *resource, size_t len,
                                           redlock_leader_cb cb, void *arg);

/* ------------------------------------------------------------------------
 * Blocking API, for programs without a libuv loop. A redlock_sync_t runs a
 * private loop and client on a background thread; every call is posted to
 * it and waited on. Safe to call from many threads at once, on one handle
 * or on several. Auto-extension keeps running on the background thread
 * while the caller works. Calls made from that thread (from an on_lost
 * callback) return EBUSY.
 */
typedef struct redlock_sync_s redlock_sync_t;
typedef struct redlock_sync_lock_s redlock_sync_lock_t;

/* Starts the background thread and connects (the config is copied).
 * Errors: EINVAL (with a message), ENOMEM, EIO (thread). */
REDLOCK_EXTERN int redlock_sync_new(const redlock_client_config *cfg,
                                    redlock_sync_t **out);
/* Releases every lock still held (bounded by the command timeout), closes
 * the connections, joins the thread and frees everything, including lock
 * and election handles not released. Calls in flight on other threads end
 * with ECANCELED, but no call may START once redlock_sync_close was
 * called (the handle is freed): when other threads may still call, use
 * redlock_sync_shutdown first, wait for them, then close. */
REDLOCK_EXTERN int redlock_sync_close(redlock_sync_t *s);
/* The first half of redlock_sync_close, for handles shared by threads
 * (language bindings): every call in flight ends with ECANCELED (waiting
 * acquisitions and campaigns included), locks still held are released,
 * the connections are closed and the thread is joined. The handle stays
 * allocated: later calls on it, its locks and its elections return
 * ECANCELED (getters 0) at once, until redlock_sync_close frees it.
 * Idempotent; a second caller returns once the first one is done. */
REDLOCK_EXTERN int redlock_sync_shutdown(redlock_sync_t *s);
/* The per-master result of this thread's last blocking call if it failed
 * with one (the votes, each master's error text, latency and
 * restart-guard wait, as an async callback gets them); NULL after a
 * success or a failure without one (EINVAL, a closed handle). Valid in
 * this thread until its next blocking call (redlock_sync_*, close
 * included); freed when the thread exits. */
REDLOCK_EXTERN const redlock_result *redlock_sync_last_result(void);
/* The client's counters and latency histograms (redlock_client_stats),
 * read on the background thread. Its strings (masters[i].server) stay
 * valid until the handle is shut down or closed. Errors: EINVAL,
 * ECANCELED (shut down). */
REDLOCK_EXTERN int redlock_sync_stats(redlock_sync_t *s, redlock_stats *out);

/* Acquires `resource` for ttl_ms, waiting as `opts` allows (NULL: the
 * client's retry policy). On success *out is a held lock. Returns 0 or
 * the status of the last attempt (ETAKEN, ENOQUORUM, EEXPIRED), EINVAL,
 * EBUSY. opts->on_lost runs on the background thread. */
REDLOCK_EXTERN int redlock_sync_acquire(redlock_sync_t *s,
                                        const void *resource, size_t len,
                                        int64_t ttl_ms,
                                        const redlock_acquire_opts *opts,
                                        redlock_sync_lock_t **out);
/* The same for K resources together (redlock_lock_new_multi) and for one
 * side of a read-write lock (redlock_rwlock_new). */
REDLOCK_EXTERN int redlock_sync_acquire_multi(redlock_sync_t *s,
                                              const void *const *resources,
                                              const size_t *lens, size_t k,
                                              int64_t ttl_ms,
                                              const redlock_acquire_opts *opts,
                                              redlock_sync_lock_t **out);
REDLOCK_EXTERN int redlock_sync_acquire_rw(redlock_sync_t *s,
                                           const void *resource, size_t len,
                                           redlock_rw_side side,
                                           int64_t ttl_ms,
                                           const redlock_acquire_opts *opts,
                                           redlock_sync_lock_t **out);
/* The same for a permit of a counting semaphore of `limit` permits
 * (redlock_semaphore_new); ELIMIT when the masters hold another limit. */
REDLOCK_EXTERN int redlock_sync_acquire_sem(redlock_sync_t *s,
                                            const void *resource, size_t len,
                                            unsigned limit, int64_t ttl_ms,
                                            const redlock_acquire_opts *opts,
                                            redlock_sync_lock_t **out);
/* The permit a semaphore's lock holds (0..limit-1), -1 otherwise. */
REDLOCK_EXTERN int redlock_sync_permit(redlock_sync_lock_t *lock);
/* A semaphore's administration, each on a handle of its own of `limit`
 * permits made and freed inside the call (redlock_semaphore_inspect,
 * _set_limit, _force_release, with their statuses). inspect: *out is one
 * block (the info, its permits and their holders), also on ENOQUORUM
 * (what the masters that answered hold), NULL on another error; free it
 * with redlock_sync_free. */
REDLOCK_EXTERN int redlock_sync_semaphore_inspect(
    redlock_sync_t *s, const void *resource, size_t len, unsigned limit,
    redlock_semaphore_info **out);
REDLOCK_EXTERN int redlock_sync_semaphore_set_limit(redlock_sync_t *s,
                                                    const void *resource,
                                                    size_t len,
                                                    unsigned limit);
REDLOCK_EXTERN int redlock_sync_semaphore_force_release(
    redlock_sync_t *s, const void *resource, size_t len, unsigned limit,
    unsigned permit);
/* A plain lock's administration, on a handle of its own made and freed
 * inside the call: redlock_lock_inspect (*out: its result, one block:
 * per master the holder and pttl_ms, vote YES where the key exists; also
 * on ENOQUORUM, NULL on another error; free it with redlock_sync_free)
 * and redlock_lock_force_release, with their statuses. */
REDLOCK_EXTERN int redlock_sync_inspect(redlock_sync_t *s,
                                        const void *resource, size_t len,
                                        redlock_result **out);
REDLOCK_EXTERN int redlock_sync_force_release(redlock_sync_t *s,
                                              const void *resource,
                                              size_t len);
/* A lock handle that takes over `resource` acquired elsewhere under
 * `token` (redlock_lock_adopt: 1..128 bytes): held at once, validity 0
 * until a redlock_sync_extend succeeds (ELOST/ENOTHELD there when the
 * token is not held any more); no auto-extension; released by
 * redlock_sync_release. Errors: EINVAL, ECANCELED. */
REDLOCK_EXTERN int redlock_sync_adopt(redlock_sync_t *s,
                                      const void *resource, size_t len,
                                      const char *token,
                                      redlock_sync_lock_t **out);
/* Frees what a redlock_sync_* call allocated for the caller. */
REDLOCK_EXTERN void redlock_sync_free(void *p);
/* The scoped form: acquires `resource` (as redlock_sync_acquire, with
 * auto_extend always on), runs fn(lock, arg) in the calling thread while
 * it is held, then releases it whatever fn returned, even if the lock was
 * lost meanwhile. fn learns of a loss through redlock_sync_is_lost(lock)
 * (or opts->on_lost, called on the background thread) and should stop
 * its work; it must not release the lock itself (EINVAL) and the handle
 * is gone when fn returns. *fn_result (may be NULL) gets fn's return
 * value. Returns the acquisition's error (fn did not run), ELOST if the
 * lock was lost before fn returned (or was found gone at the release),
 * else 0. */
typedef int (*redlock_sync_fn)(redlock_sync_lock_t *lock, void *arg);
REDLOCK_EXTERN int redlock_sync_with_lock(redlock_sync_t *s,
                                          const void *resource, size_t len,
                                          int64_t ttl_ms,
                                          const redlock_acquire_opts *opts,
                                          redlock_sync_fn fn, void *arg,
                                          int *fn_result);
/* Cancels the acquisitions in flight on `s` (from other threads) whose
 * opts->lost_arg is `lost_arg`, as redlock_lock_cancel: what they set on
 * the masters is released and each returns ECANCELED. Also the campaigns
 * not yet elected whose election opts->arg is `lost_arg`
 * (redlock_sync_campaign returns ECANCELED, as if its wait_ms had passed).
 * Returns how many it cancelled (0: none in flight with that arg: not
 * started yet, or decided), or ECANCELED (shut down), EINVAL. A binding
 * that abandons a call (an asyncio task cancelled, a Ctrl-C) gives each
 * acquisition its own lost_arg and calls this until its acquisition
 * returns. */
REDLOCK_EXTERN int redlock_sync_cancel(redlock_sync_t *s,
                                       const void *lost_arg);
/* Extends a held lock (see redlock_lock_extend): ELOST once an
 * auto-extended lock was lost. */
REDLOCK_EXTERN int redlock_sync_extend(redlock_sync_lock_t *lock,
                                       int64_t ttl_ms);
/* Releases the lock and frees the handle (in every case: the handle must
 * not be used afterwards). Returns the release status. */
REDLOCK_EXTERN int redlock_sync_release(redlock_sync_lock_t *lock);
/* Remaining validity in ms; 0 if not held (or lost). */
REDLOCK_EXTERN int64_t redlock_sync_validity_ms(redlock_sync_lock_t *lock);
/* 1 if an auto-extended lock was lost. */
REDLOCK_EXTERN int redlock_sync_is_lost(redlock_sync_lock_t *lock);
/* The fencing token of the acquisition (opts.fence); 0 if none. */
REDLOCK_EXTERN uint64_t redlock_sync_fence(redlock_sync_lock_t *lock);
/* Holds on a reentrant lock (0 when not held). */
REDLOCK_EXTERN unsigned redlock_sync_holds(redlock_sync_lock_t *lock);
/* Copies the token (NUL-terminated hex) into buf. 0, or EINVAL if len is
 * too small. */
REDLOCK_EXTERN int redlock_sync_token(redlock_sync_lock_t *lock, char *buf,
                                      size_t len);

/* Events instead of callbacks, for callers whose callbacks must not run
 * on the background thread: a language binding's callback that takes an
 * interpreter lock (Python's GIL) would stop the loop, and every lock's
 * extension with it, for as long as another thread holds that lock. Give
 * these functions as the callbacks (redlock_acquire_opts.on_lost,
 * redlock_election_opts.on_change, redlock_client_config.on_warning): each
 * copies its arguments into one process-wide queue and returns at once,
 * without waiting for anything but the queue's mutex; a thread of the
 * caller's takes them in order with redlock_sync_next_event. The queue
 * grows until it is read. An event that cannot be queued (out of memory)
 * is counted, and the next event read is REDLOCK_SYNC_EV_DROPPED with that
 * count in `reason`: a reader should then treat every lock as lost. */
typedef enum {
  REDLOCK_SYNC_EV_LOST = 1,       /* on_lost(lock, reason, arg) */
  REDLOCK_SYNC_EV_ELECTION = 2,   /* on_change(e, event, reason, arg) */
  REDLOCK_SYNC_EV_WARNING = 3,    /* on_warning(client, text, arg) */
  REDLOCK_SYNC_EV_DROPPED = 4     /* `reason` events could not be queued */
} redlock_sync_event_kind;

typedef struct redlock_sync_event {
  int kind;          /* redlock_sync_event_kind */
  int event;         /* ELECTION: REDLOCK_ELECTED or REDLOCK_DEPOSED */
  int reason;        /* LOST, ELECTION: the callback's reason; DROPPED:
                        how many */
  void *arg;         /* the callback's arg (lost_arg, arg, warning_arg) */
  char text[512];    /* WARNING: the message (cut to fit, NUL-ended) */
} redlock_sync_event;

REDLOCK_EXTERN void redlock_sync_queue_lost(redlock_lock_t *lock, int reason,
                                            void *arg);
REDLOCK_EXTERN void redlock_sync_queue_election(redlock_election_t *e,
                                                redlock_election_event ev,
                                                int reason, void *arg);
REDLOCK_EXTERN void redlock_sync_queue_warning(redlock_client_t *client,
                                               const char *msg, void *arg);
/* Takes the oldest queued event into *out: 0, or ETIMEDOUT when none came
 * within timeout_ms (< 0: waits for as long as it takes), EINVAL (out
 * NULL). Any thread; several readers share the events between them. */
REDLOCK_EXTERN int redlock_sync_next_event(redlock_sync_event *out,
                                           int timeout_ms);

/* Leader election (see redlock_election_new). campaign blocks until this
 * instance leads (0) or wait_ms passes (ETIMEDOUT; <= 0: no limit); the
 * handle keeps campaigning in the background after a loss (unless
 * opts->once) until redlock_sync_resign, which also frees it. */
typedef struct redlock_sync_election_s redlock_sync_election_t;
REDLOCK_EXTERN int redlock_sync_campaign(redlock_sync_t *s,
                                         const void *resource, size_t len,
                                         const char *identity,
                                         const redlock_election_opts *opts,
                                         int wait_ms,
                                         redlock_sync_election_t **out);
REDLOCK_EXTERN int redlock_sync_is_leader(redlock_sync_election_t *e);
REDLOCK_EXTERN int redlock_sync_resign(redlock_sync_election_t *e);
/* Who leads `resource`: its identity into buf (NUL-terminated; "" when
 * none) and its remaining ms into *ttl_ms (may be NULL). */
REDLOCK_EXTERN int redlock_sync_leader(redlock_sync_t *s,
                                       const void *resource, size_t len,
                                       char *buf, size_t buflen,
                                       int64_t *ttl_ms);

#ifdef __cplusplus
}
#endif
#endif /* REDLOCK_H */
