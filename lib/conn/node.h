/* node.h: one Redis master (see node.c for the invariants).
 *
 * The layer above hands a node a command (argv) and a reply callback; the
 * node hands back a typed reply, or an error. It knows nothing of locks.
 * It tells its owner about state changes through env->on_state. */
#ifndef REDLOCK_NODE_H
#define REDLOCK_NODE_H

#include <uv.h>

#include "common.h"
#include "conn.h"
#include "sys.h"
#include "uri.h"

typedef struct redlock__node redlock__node;
typedef struct redlock__req redlock__req;
struct redlock__cluster;   /* cluster.c */

/* A reply (error == 0, r != NULL) or a failure (r == NULL, error is
 * REDLOCK_ETIMEDOUT, EIO, ECANCELED..., errstr says why). */
typedef void (*redlock__req_cb)(redlock__req *req, const redlock__reply *r,
                                int error, const char *errstr);

/* Flags of a request. */
#define REDLOCK__REQ_REDELIVER 1   /* a release: if this attempt fails by a
                                      connection error or deadline, send it
                                      again after the next handshake */
#define REDLOCK__REQ_INTERNAL 4    /* the node's own (TIME, re-checks): not
                                      counted in the master's statistics */
#define REDLOCK__REQ_CLOCK 2       /* an acquisition: the master's clock is
                                      read (TIME) right after it, in the
                                      same flush; req->clock_seq names that
                                      reading */

#define REDLOCK__REQ_HERE 8        /* a node's own record (clusters): never
                                      redirected to another node */

#define REDLOCK__REQ_INLINE 256    /* bytes of command kept inline */

/* The caller's, to match a reply with what it sent (a redirection copies
 * it): each caller reads the view it wrote. */
typedef union redlock__req_tag {
  uint32_t gen;             /* the generation it was sent in: the node's
                               connection (node.c), the guard's reading */
  uint32_t cell;            /* the guard's marks: master * n + node */
  struct {
    uint16_t part;          /* round.c: the part of a command split by
                               slot (0 for a whole command) */
    uint8_t eval;           /* sent as EVAL, not EVALSHA */
  } round;
  struct {
    uint16_t first;         /* batch.c: the entries of a part of a batch
                               split by slot: first .. first + count */
    uint16_t count;
  } batch;
} redlock__req_tag;

struct redlock__req {
  redlock__queue q;
  redlock__req_cb cb;       /* NULL: nobody waits for the reply */
  void *owner;              /* the caller's */
  redlock__req_tag tag;     /* the caller's */
  uint16_t idx;             /* the master's index (of the quorum) */
  uint8_t hops;             /* redirections so far (clusters) */
  redlock__node *node;      /* the node that has it (a redirection moves
                               it to another) */
  redlock__ns until_ns;     /* 0, or a deadline it keeps on any node */
  uint8_t flags;
  uint8_t kind;             /* the caller's */
  uint32_t clock_seq;       /* REQ_CLOCK: the reading that follows it
                               (redlock__node.clock_done reaches it) */
  uint32_t flush_gen;       /* node->flushes when it was written: equal
                               until it went out */
  redlock__ns sent_ns;      /* submitted */
  redlock__ns reply_ns;     /* its reply came (0 for a failure) */
  redlock__ns deadline_ns;  /* written: its reply's; waiting for the
                               handshake: the wait's (node.c, invariant
                               6); 0: the handshake's own (bounded by
                               the connect deadline) */
  uint32_t wait_len;        /* waiting: its bytes in the node's wait_buf */
  /* REDELIVER, or a cluster node's (for a redirection): a copy of the
   * encoded command. */
  char *cmd;
  size_t cmd_len;
  char cmd_inline[REDLOCK__REQ_INLINE];
};

typedef enum {
  REDLOCK__NODE_EV_UP = 0,   /* handshake done: commands flow */
  REDLOCK__NODE_EV_DOWN,     /* connection lost or failed */
  REDLOCK__NODE_EV_CLOSED,   /* closed for good (client close) */
  REDLOCK__NODE_EV_CLOCK,    /* a clock reading came (node->clock), after
                                the handshake's */
  REDLOCK__NODE_EV_DURABLE,  /* a re-check of a declared master's
                                persistence answered (node->durable) */
  REDLOCK__NODE_EV_REFUSED,  /* a handshake step was refused (errstr);
                                also while closing: EV_DOWN follows
                                unless closing */
  REDLOCK__NODE_EV_FAILED,   /* after a connection was lost or failed:
                                every request it held has failed (not
                                while closing) */
  REDLOCK__NODE_EV_TOPOLOGY  /* a cluster's topology asked after a MOVED
                                came, or its ask failed (cluster.c) */
} redlock__node_event;

/* What a cluster node's topology (CLUSTER SHARDS or SLOTS at its
 * handshake) means for it (cluster.c). */
typedef enum {
  REDLOCK__TOPO_SERVE = 0,   /* a primary with slots: the handshake goes
                                on (its record keys are set) */
  REDLOCK__TOPO_MOVED,       /* repointed to another address, or idled:
                                stop here */
  REDLOCK__TOPO_FAIL         /* unusable (node->errstr says why) */
} redlock__topo;


/* What every node of a client shares (owned by the client). */
typedef struct redlock__node_env {
  redlock__sys *sys;              /* the seam: clock, timers, resolver,
                                     transport */
  redlock__flusher *flusher;
  redlock__tls_ctx *tls;          /* for rediss:// masters, or NULL */
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  int64_t reconnect_min_ms;
  int64_t reconnect_max_ms;
  const char *username;           /* defaults for URIs without */
  const char *password;
  const char *const *scripts;     /* SCRIPT LOADed at every handshake */
  const size_t *script_lens;
  unsigned n_scripts;
  const char *maxttl_key;         /* GET at every handshake, or NULL */
  int guarded;                    /* restart guard on: ask for durability */
  size_t maxttl_keylen;
  const char *clock_key;          /* HMGET run seen step at every
                                     handshake (guard.c), or NULL */
  size_t clock_keylen;
  uint64_t *prng;                 /* backoff jitter */
  redlock__queue free_reqs;       /* request pool */
  void (*on_state)(redlock__node *n, redlock__node_event ev, void *arg);
  void *arg;
  /* Clusters (cluster.c): the reply of CLUSTER SHARDS (slots: of CLUSTER
   * SLOTS) at a node's handshake; a MOVED or ASK reply to req, which the
   * hook may send elsewhere (1: it took it, and req's callback never
   * runs here). */
  redlock__topo (*topology)(redlock__node *n, const redlock__reply *r,
                            int slots);
  int (*redirect)(redlock__node *n, redlock__req *req,
                  const redlock__reply *r);
  /* A sentinel group's data node is not the primary (role:slave). */
  void (*stale)(redlock__node *n);
  /* A cluster's first node failed before any topology: 1 when it was
   * pointed at another seed to try now (cluster.c). */
  int (*next_seed)(redlock__node *n);
} redlock__node_env;

/*   RESOLVING --> CONNECTING --> HANDSHAKE --> UP
 *       ^              |             |          |  error, deadline
 *       |              v             v          v
 *       +---------- DOWN (backoff timer) <------+
 *   any --(close, drained)--> CLOSED */
typedef enum {
  REDLOCK__NODE_RESOLVING = 0,
  REDLOCK__NODE_CONNECTING,
  REDLOCK__NODE_HANDSHAKE,
  REDLOCK__NODE_UP,
  REDLOCK__NODE_DOWN,
  REDLOCK__NODE_CLOSED
} redlock__node_state;

#define REDLOCK__KEPT_MAX 256   /* releases kept per node */

/* Counters of one master (redlock_client_stats copies them out). */
typedef struct redlock__node_stats {
  uint64_t commands;
  uint64_t replies;
  uint64_t server_errors;
  uint64_t timeouts;
  uint64_t conn_failures;
  uint64_t guard_refusals;
  uint64_t latency_sum_us;
  uint64_t hist[REDLOCK_HIST_BUCKETS];
} redlock__node_stats;

struct redlock__node {
  redlock__node_env *env;
  unsigned index;              /* in the client's node array */
  unsigned master;             /* its master (of the quorum) */
  struct redlock__cluster *cluster;   /* the master layer's (cluster.c),
                                         never read here */
  /* What the master layer asks of the server (master.c sets it up; this
   * file tests these, never the kind of its master): */
  int redirects;               /* it may answer MOVED/ASK (followed unless
                                  REQ_HERE) and names itself (CLUSTER
                                  MYID): a Redis Cluster's node */
  int primary_only;            /* it must say role:master (env->stale if
                                  not), and its isolation is checked: the
                                  primary a sentinel group names */
  const char *peers;           /* who may disagree on where it is, for
                                  messages (a static string), or NULL */
  int lazy;                    /* a cluster's node not started (no
                                  primary, or one that serves no slot) */
  redlock__uri uri;
  redlock__node_state state;
  redlock__conn conn;
  struct redlock__gai *gai;    /* name resolution in flight, or NULL */
  redlock__timer deadline_timer;   /* the oldest pending request */
  redlock__ns deadline_armed;  /* when it fires; 0 when stopped */
  redlock__ns pend_max;        /* the latest deadline written since
                                  pending was last empty */
  redlock__ns pend_early;      /* the earliest deadline of a pending
                                  request behind a later one (a wait's
                                  bound), or 0 (node.c, invariant 4) */
  redlock__timer conn_timer;   /* connect deadline, backoff, deferral */
  redlock__queue pending;      /* written, replies come in this order */
  redlock__queue waiting;      /* submitted before the handshake ended */
  redlock__buf wait_buf;       /* their encoded commands */
  unsigned n_pending;
  unsigned hs_left;            /* handshake replies still expected */
  unsigned failures;           /* consecutive failed connections */
  unsigned repoints;           /* repointed in a row before any handshake
                                  ended (node.c, invariant 7) */
  unsigned flaps;              /* repointed in a row, each within
                                  REDLOCK__SERVED_MS of its handshake
                                  (nodes that disagree on a slot) */
  int closing;
  int handles_open;
  struct sockaddr_storage addr;
  char errstr[200];            /* why the node is down */
  /* What the last handshake learned (for the restart guard): */
  char run_id[41];             /* "" when INFO was refused */
  char ident[84];              /* the instance: "run_id/replid" (or
                                  "run_id"), "" when INFO was refused */
  int64_t uptime_s;            /* -1 when unknown */
  int64_t maxttl_ms;           /* the recorded longest ttl; 0 none */
  /* Keys survive a restart of this instance: INFO persistence says
   * aof_enabled:1 and CONFIG GET appendfsync says always (0 when either
   * is off or cannot be read). Read at the handshake of a guarded client
   * or a declared master, and again (redlock__node_recheck) while
   * connected. */
  int durable;
  int aof_enabled;             /* the last INFO persistence: -1 unknown */
  char fsync[16];              /* the last CONFIG GET appendfsync, or "" */
  int declared;                /* the operator declared it durable */
  /* A sentinel group's primary refuses writes once cut off from its
   * replicas (issue 29, item 11; DESIGN, Sentinel): CONFIG GET
   * min-replicas-to-write and min-replicas-max-lag at every handshake and
   * every 3 s while connected (-1: unknown, refused). Unless the URI says
   * ?isolation=unchecked, its YES votes count only when both are >= 1
   * and 2 x min-replicas-to-write >= the group's replicas (with more, a
   * partition can leave two primaries that each have enough acknowledging
   * replicas; review item 1) (redlock__node_isolated). */
  int isolation_unchecked;
  int min_replicas;
  int min_replicas_lag;
  /* The group's replicas: the largest count the sentinels listed
   * (SENTINEL REPLICAS, down ones included, sentinel.c; asked at every
   * connection and every 3 s), never lowered; -1 until they answered.
   * Not the primary's connected_slaves: a partition shrinks that. */
  int replicas_known;
  unsigned recheck_left;       /* re-check replies still expected */
  int rechecking;              /* a re-check is on the wire */
  int reading_now;             /* a deadline reads the socket first */
  uint64_t answered;           /* replies so far (every request) */
  uint32_t flushes;            /* flushes of this connection's output */
  /* The master's clock (guard.c reads it): the latest reading, from the
   * handshake or from the TIME that follows acquisitions. */
  redlock__clock_reading clock;
  uint32_t clock_next;         /* seq of the last TIME written */
  uint32_t clock_done;         /* seq of the last TIME answered */
  int clock_due;               /* an acquisition went out this turn */
  int clock_refused;           /* TIME answered with an error (ACL) */
  uint64_t teardowns;          /* connections torn down so far */
  /* The clock record (guard.c) as the handshake read it: the instance
   * first seen, when (master ms), its clock's offset against the others'
   * then (us, with its uncertainty), and the latest step seen by any
   * client (master ms). Absent: "" and -1 (INT64_MIN for the offset). */
  char rec_run[41];
  char rec_rid[41];            /* the replication id it was seen with */
  int64_t rec_seen_ms;
  int64_t rec_off_us;
  int64_t rec_unc_us;
  int64_t rec_step_ms;
  /* Its records' keys: the client's, or a cluster node's own (tagged to
   * a slot it serves: <prefix>{tag}__redlock__:maxttl and :clock). */
  const char *rec_maxttl;
  size_t rec_maxttl_len;
  const char *rec_clock;
  size_t rec_clock_len;
  char *own_keys;              /* a cluster node's: both, allocated */
  unsigned tag_slot;           /* the slot its tag hashes to */
  char myid[41];               /* a cluster node's CLUSTER MYID */
  uint32_t id_checks;          /* identity re-checks on the wire */
  /* INFO replication at the handshake (configuration warnings; with
   * run_id, the instance's identity: a promoted replica, or a master that
   * was a replica meanwhile, has another replication id). */
  char role[16];               /* "master", "slave", "" unknown */
  int promoted;                /* a master that was a replica in this
                                  life (INFO's second_repl_offset >= 0):
                                  a failover's new primary; its data is
                                  what replication brought, whatever its
                                  persistence (guard.c, 6.) */
  char replid[41];             /* master_replid */
  char master_host[64];        /* a replica's master, or "" */
  int master_port;
  redlock__ns up_ns;           /* when the handshake ended */
  uint64_t connects;           /* handshakes completed */
  redlock__ns last_try_ns;     /* when the last connection attempt began */
  int refused;                 /* the last attempt was refused: retry
                                  soon, no backoff (cheap for both) */
  int hs_refused;              /* the last handshake failed on a step's
                                  error reply (AUTH, SELECT, ...): the
                                  server refuses this configuration;
                                  errstr says how (invariant 2) */
  int refusal_said;            /* the owner warned of it (once until the
                                  node is UP again) */
  int hung;                    /* the last attempt timed out while
                                  connecting or in the handshake: an
                                  operation may try it at once */
  redlock__node_stats st;
  /* Releases to send again after the next handshake: */
  char **kept;                 /* up to REDLOCK__KEPT_MAX, made on
                                  first use (a Redis Cluster has many
                                  nodes that never keep one) */
  size_t *kept_len;
  unsigned n_kept;
  unsigned kept_tries;         /* resends on an open connection since
                                  the handshake (their backoff) */
  int kept_armed;              /* conn_timer holds that resend */
};

/* Takes ownership of the parsed address (moves it; *uri is zeroed). */
void redlock__node_init(redlock__node *n, redlock__node_env *env,
                        unsigned idx, redlock__uri *uri);
void redlock__node_start(redlock__node *n);
/* A request from the pool (NULL when out of memory). Fill cb, owner, tag,
 * kind, flags, then submit it. */
redlock__req *redlock__node_req(redlock__node *n);
/* Encodes argv and queues it. 0: req->cb runs exactly once, never from
 * inside this call; the node frees req after it. < 0 (EIO: the node is
 * down; ECANCELED: closing; ENOMEM): req was freed and its cb never runs
 * (a REDELIVER command is kept for the next handshake). */
int redlock__node_submit(redlock__node *n, redlock__req *req, int argc,
                         const char *const *argv, const size_t *lens);
/* A declared master: reads its persistence again (INFO persistence,
 * CONFIG GET appendfsync) when UP and no re-check is in flight; EV_DURABLE
 * follows the answers. A checked sentinel group's primary: its
 * min-replicas settings too (EV_DURABLE follows as well). */
void redlock__node_recheck(redlock__node *n);
/* 1 when n's YES votes may count as far as isolation goes: not a sentinel
 * group's primary, or one the URI says not to check, or one whose last
 * reading showed min-replicas-to-write >= 1 and min-replicas-max-lag >= 1,
 * with 2 x min-replicas-to-write >= the replicas the sentinels listed.
 * Else 0, with why (naming the setting) in buf. */
int redlock__node_isolated(const redlock__node *n, char *buf, size_t len);
/* Whether n is checked at all (a sentinel group's primary without
 * ?isolation=unchecked). */
int redlock__node_checks_isolation(const redlock__node *n);
/* The same with the command already encoded (RESP): len bytes at cmd,
 * owned by the caller (copied as needed). */
int redlock__node_submit_raw(redlock__node *n, redlock__req *req,
                             const char *cmd, size_t len);
/* Re-reads INFO replication when UP: a role or replication id other than
 * the handshake's (a failover, a resync from another master) tears the
 * connection down, so the next handshake meets a new instance. */
void redlock__node_check_identity(redlock__node *n);
/* Points the node at another address (a cluster's primary, the primary a
 * sentinel names) and connects there now: what is pending fails with
 * `why`; what waits for the handshake goes to the new address. */
int redlock__node_repoint(redlock__node *n, const char *host, int port,
                          const char *why);
/* Closes the connection and stays down (no reconnect) until repointed:
 * a cluster's node that serves nothing now. Requests fail with why. */
void redlock__node_idle(redlock__node *n, const char *why);
/* A clock reading now (TIME, as the one behind an acquisition): its
 * reply comes as REDLOCK__NODE_EV_CLOCK. 0 when asked (or one is on its
 * way already), -1 when the node is not up. */
int redlock__node_read_clock(redlock__node *n);
/* Gives the releases n keeps to `to`, sent there as new requests (a
 * cluster's node that idles: another node redirects them to the slot's
 * primary; invariant 8 of node.c). */
void redlock__node_pass_kept(redlock__node *n, redlock__node *to);
/* A DOWN node's next connection goes to host:port (a cluster's seeds). */
int redlock__node_set_address(redlock__node *n, const char *host, int port);
/* A redirection (cluster.c): sends req's command to `to` (ASKING first
 * when asking), keeping its callback, flags and deadline. 0, or < 0 when
 * it could not be sent (req's callback then runs with the error). */
int redlock__node_resend(redlock__node *to, redlock__req *req, int asking);
/* The node's own record keys (a cluster node's): prefix + "{tag}" +
 * suffixes for `slot`. 0 or ENOMEM. */
int redlock__node_set_tag(redlock__node *n, const char *prefix,
                          size_t prefix_len, unsigned slot);
/* Begins closing: what is in flight drains (bounded by the deadlines),
 * then the connection and the timers close; EV_CLOSED follows. */
void redlock__node_close(redlock__node *n);
void redlock__node_free(redlock__node *n);
/* Frees the request pool (client teardown). */
void redlock__node_env_free(redlock__node_env *env);

#endif
