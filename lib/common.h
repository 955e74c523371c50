/* common.h: private structures shared by the engine's files.
 *
 * Data flows one way: lock.c -> node.c -> Redis; replies come back up as
 * votes through redlock__lock_on_vote(). Only node.c and uvadapter.c
 * include hiredis; this header only forward-declares its context. */
#ifndef REDLOCK_COMMON_H
#define REDLOCK_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "redlock.h"
#include "alloc.h"
#include "pure.h"
#include "uri.h"

struct redisAsyncContext;

#define REDLOCK__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define REDLOCK__CONTAINER_OF(ptr, type, field)                             \
  ((type *)((char *)(ptr) - offsetof(type, field)))

/* Invariants only; never for runtime or network errors. */
#define REDLOCK__ASSERT(expr)                                               \
  do {                                                                      \
    if (!(expr))                                                            \
      redlock__assert_fail(#expr, __FILE__, __LINE__);                      \
  } while (0)
void redlock__assert_fail(const char *expr, const char *file, int line);

/* ---- intrusive doubly linked queue (circular, with a sentinel) --------- */
typedef struct redlock__queue {
  struct redlock__queue *next;
  struct redlock__queue *prev;
} redlock__queue;

static inline void redlock__queue_init(redlock__queue *q) {
  q->next = q;
  q->prev = q;
}
static inline int redlock__queue_empty(const redlock__queue *q) {
  return q->next == q;
}
static inline void redlock__queue_insert_tail(redlock__queue *h,
                                              redlock__queue *q) {
  q->next = h;
  q->prev = h->prev;
  h->prev->next = q;
  h->prev = q;
}
static inline void redlock__queue_remove(redlock__queue *q) {
  q->prev->next = q->next;
  q->next->prev = q->prev;
  q->next = q;
  q->prev = q;
}

/* ---- tokens (token.c) ---------------------------------------------------- */
#define REDLOCK__TOKEN_BYTES 20                       /* from uv_random */
#define REDLOCK__TOKEN_HEX (2 * REDLOCK__TOKEN_BYTES) /* chars, no NUL */
#define REDLOCK__TOKEN_MAX 64    /* adopted tokens (other implementations) */
/* Fills out[REDLOCK__TOKEN_HEX + 1] with fresh random hex. 0 or EIO. */
int redlock__token_new(char *out);

/* ---- the uv adapter (uvadapter.c) ------------------------------------- */
/* Coalesces writes: contexts with new output are flushed once per loop
 * turn from a uv_prepare callback, just before the loop blocks. */
typedef struct redlock__flusher {
  uv_prepare_t prepare;
  redlock__queue dirty;
  int active;
} redlock__flusher;

int redlock__flusher_init(uv_loop_t *loop, redlock__flusher *fl);
/* uv_close()s the prepare handle; `cb` runs when it is closed. */
void redlock__flusher_close(redlock__flusher *fl, uv_close_cb cb);
/* Attaches a connecting hiredis context. Hooks are published only on
 * success; on failure the caller still owns `ac` (and must free it). */
int redlock__uv_attach(struct redisAsyncContext *ac, uv_loop_t *loop,
                       redlock__flusher *fl);

/* ---- requests ----------------------------------------------------------- */
typedef enum {
  REDLOCK__REQ_ACQUIRE = 0,   /* SET key token NX PX ttl: a vote */
  REDLOCK__REQ_EXTEND,        /* extend script: a vote */
  REDLOCK__REQ_RELEASE,       /* release script: a vote */
  REDLOCK__REQ_CLEANUP,       /* release script, no vote (failed attempt,
                                 freed handle, closing client) */
  REDLOCK__REQ_INSPECT,       /* read value + pttl: YES held, NO free */
  REDLOCK__REQ_ACQUIRE_FENCED,/* SET NX PX + INCR <key>:fence: YES(n) */
  REDLOCK__REQ_FENCE          /* counter = max(counter, T) where ours */
} redlock__req_kind;

typedef struct redlock__node redlock__node;

/* One command in flight on one node for one lock. Pooled per client. The
 * token is copied because the lock may start a new attempt (new token)
 * while this command is still queued. */
typedef struct redlock__req {
  redlock__queue q;           /* node FIFO, or the client's free list */
  redlock__node *node;
  redlock_lock_t *lock;
  redlock__ns sent_ns;
  redlock__ns deadline_ns;    /* 0 until the node is UP */
  int64_t ttl_ms;
  uint32_t round;             /* lock->round when sent */
  uint8_t kind;               /* redlock__req_kind */
  uint8_t written;            /* handed to hiredis */
  uint8_t evalsha_fallback;   /* resent as EVAL after NOSCRIPT */
  uint8_t heal;               /* extend: re-create a missing key */
  char token[REDLOCK__TOKEN_MAX + 1];
} redlock__req;

/* ---- node (node.c) -------------------------------------------------------
 *
 *   RESOLVING --> CONNECTING --> HANDSHAKE --> UP
 *       ^              |             |          |  error, deadline
 *       |              v             v          v
 *       +---------- DOWN (backoff timer) <------+
 *   any --(client close, drained)--> CLOSED
 */
typedef enum {
  REDLOCK__NODE_RESOLVING = 0,
  REDLOCK__NODE_CONNECTING,
  REDLOCK__NODE_HANDSHAKE,
  REDLOCK__NODE_UP,
  REDLOCK__NODE_DOWN,
  REDLOCK__NODE_CLOSED
} redlock__node_state;

#define REDLOCK__ABANDONED_MAX 256   /* entries per node */

typedef struct redlock__abandoned {
  char *key;
  size_t keylen;
  char token[REDLOCK__TOKEN_MAX + 1];
  redlock__ns expires_ns;
} redlock__abandoned;

struct redlock__node {
  redlock_client_t *client;
  unsigned index;
  redlock__uri uri;
  redlock__node_state state;
  struct redisAsyncContext *ac;
  uv_getaddrinfo_t gai;
  int gai_active;
  uv_timer_t deadline_timer;   /* the oldest pending request */
  uv_timer_t conn_timer;       /* connect deadline, backoff, deferral */
  redlock__queue pending;      /* redlock__req FIFO, replies come in order */
  unsigned n_pending;
  int teardown_reason;         /* why we freed the context ourselves */
  unsigned failures;           /* consecutive failed connects */
  int handshake_failed;
  int closing;                 /* client is closing: drain, then close */
  int handles_open;            /* timers not yet closed */
  char ip[64];
  char errstr[128];            /* last connection error text */
  char release_sha[41];
  char extend_sha[41];
  char run_id[41];
  int64_t uptime_s;            /* INFO uptime_in_seconds at handshake */
  redlock__ns up_since_ns;     /* when the handshake completed */
  redlock__ns restarted_ns;    /* estimated server start (monotonic) */
  redlock__abandoned abandoned[REDLOCK__ABANDONED_MAX];
  unsigned n_abandoned;
};

/* Takes ownership of the parsed address (moves it; *uri is zeroed). */
void redlock__node_init(redlock_client_t *c, redlock__node *n, unsigned idx,
                        redlock__uri *uri);
void redlock__node_start(redlock__node *n);
/* Queues (or sends) a request. 0, or a REDLOCK_E* error when the node
 * cannot take it now (DOWN, closed): then the caller counts an error vote
 * at once and the request is not kept. Never calls back synchronously. */
int redlock__node_submit(redlock__node *n, redlock__req *req);
/* Begins closing: drain pending requests (bounded by their deadlines),
 * then free the connection and close the timers. */
void redlock__node_close(redlock__node *n);
/* Reply classification (pure; node.c): turns a reply to a request of
 * `kind` into a vote, or an error vote with a reason. For INSPECT, the
 * key's value is copied into buf (errstr points to it) and its ttl to
 * *pttl. Exposed for the fuzz target. */
struct redisReply;
void redlock__classify(int kind, const struct redisReply *r,
                       redlock_vote_t *vote, int *error, const char **errstr,
                       int64_t *pttl, char *buf, size_t buflen);
/* Frees strings owned by the node (after it is CLOSED). */
void redlock__node_free(redlock__node *n);
/* How long ago (ms) the master restarted, as known from its uptime at the
 * handshake and a changed run_id; INT64_MAX when unknown (not connected
 * yet: never counts as recent). */
int64_t redlock__node_restart_age_ms(const redlock__node *n,
                                     redlock__ns now);

/* ---- wake-up (wake.c) ------------------------------------------------------ */
typedef struct redlock__sub {
  redlock_client_t *client;
  unsigned index;                 /* the node */
  struct redisAsyncContext *ac;   /* subscriber connection, or NULL */
} redlock__sub;

/* An acquisition starts / stops waiting on key's release channel. */
int redlock__wake_want(redlock_client_t *c, const char *key, size_t keylen);
void redlock__wake_done(redlock_client_t *c, const char *key, size_t keylen);
void redlock__wake_close(redlock_client_t *c);
void redlock__wake_free(redlock_client_t *c);
/* A release of key was published: retry its waiting acquisitions now. */
void redlock__lock_wake(redlock_client_t *c, const char *key, size_t keylen);

/* ---- client (client.c) --------------------------------------------------- */
struct redlock_client_s {
  uv_loop_t *loop;
  unsigned n;
  unsigned quorum;
  double drift_factor;
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  unsigned retry_count;
  int64_t retry_delay_ms;
  int64_t retry_jitter_ms;
  int64_t reconnect_min_ms;
  int64_t reconnect_max_ms;
  int64_t restart_guard_ms;    /* -1 off, 0 = max_ttl_ms */
  int64_t max_ttl_ms;          /* largest ttl used so far */
  char *key_prefix;
  size_t key_prefix_len;
  char *username;
  char *password;
  redlock__node *nodes;
  redlock__flusher flusher;
  redlock__queue locks;        /* every live lock handle */
  redlock__queue free_reqs;    /* request pool */
  uint64_t prng;
  unsigned in_api;             /* > 0 inside a public call: defer callbacks */
  int closing;
  int close_started;
  unsigned handles_open;       /* flusher + close timer */
  unsigned nodes_open;
  uv_timer_t close_timer;
  redlock__sub *subs;          /* wake-up subscribers, lazily (n) */
  redlock__queue wake_channels;
  redlock_close_cb close_cb;
  void *close_arg;
};

redlock__req *redlock__req_get(redlock_client_t *c);
void redlock__req_put(redlock_client_t *c, redlock__req *req);
/* Called by node.c when a node reached CLOSED. */
void redlock__client_node_closed(redlock_client_t *c);
/* Called by lock.c when a lock handle's memory was freed. */
void redlock__client_maybe_finish(redlock_client_t *c);

/* ---- lock (lock.c) ------------------------------------------------------- */
typedef enum {
  REDLOCK__LOCK_IDLE = 0,     /* never acquired */
  REDLOCK__LOCK_ACQUIRING,    /* attempt in flight or waiting to retry */
  REDLOCK__LOCK_HELD,
  REDLOCK__LOCK_RELEASED,
  REDLOCK__LOCK_FAILED,       /* last acquire failed */
  REDLOCK__LOCK_LOST,         /* a majority says it is not ours */
  REDLOCK__LOCK_ADOPTED       /* token taken over, validity unknown */
} redlock__lock_state;

typedef enum {
  REDLOCK__OP_NONE = 0,
  REDLOCK__OP_ACQUIRE,
  REDLOCK__OP_EXTEND,
  REDLOCK__OP_RELEASE,
  REDLOCK__OP_INSPECT
} redlock__op;

#define REDLOCK__ERRSTR_LEN 80

struct redlock_lock_s {
  redlock__queue link;          /* client->locks */
  redlock_client_t *client;
  redlock__lock_state state;
  redlock__op op;
  redlock_lock_cb cb;
  void *cb_arg;
  void *data;
  char *key;                    /* prefix + resource, NUL-terminated */
  size_t keylen;
  char **keys;                  /* all keys (multi-resource); keys[0]==key */
  size_t *keylens;
  unsigned nkeys;
  int64_t ttl_ms;
  char token[REDLOCK__TOKEN_MAX + 1];
  uint32_t round;               /* one per fan-out */
  redlock__ns round_start;
  redlock__ns valid_until;      /* 0 when not held */
  redlock__ns wait_deadline;    /* 0 = none */
  unsigned attempts;
  unsigned max_retries;
  int64_t retry_delay_ms;
  int64_t retry_jitter_ms;
  unsigned yes, no, err;
  int decided;
  int status;                   /* outcome to deliver */
  int64_t result_validity_ms;
  uint64_t result_elapsed_us;
  unsigned refs;                /* user + op + one per request */
  int user_freed;
  int timer_mode;               /* 0 idle, 1 retry, 2 deferred callback */
  uv_timer_t timer;
  /* Auto-extension (the watchdog): */
  int auto_extend;
  int heal;
  int internal_op;              /* the op in flight is the watchdog's */
  int lost;                     /* lost while held; cleared by acquire */
  redlock_lost_cb lost_cb;
  void *lost_arg;
  uv_timer_t wd_timer;          /* next extension, retry, or expiry */
  int handles_open;             /* timers not yet closed */
  unsigned holds;               /* reentrant holds while HELD */
  int wake;                     /* opts.wake */
  int rw;                       /* 0 plain, 1 reader, 2 writer */
  int wake_subscribed;          /* waiting on the release channel */
  redlock_lock_cb defer_cb;     /* a call completed without a round */
  void *defer_arg;
  int defer_cb_set;
  /* Fencing (opts.fence): */
  int want_fence;
  int fence_phase;              /* 0 acquire round, 1 fence round */
  uint64_t fence_max;           /* T: max counter among the yes votes */
  uint64_t fence;               /* the current acquisition's token */
  redlock__ns acquire_start;    /* validity counts from the first round */
  char *fence_key;              /* key + ":fence" */
  size_t fence_keylen;
  redlock_node_result *results; /* n entries */
  char *errbufs;                /* n * REDLOCK__ERRSTR_LEN */
};

/* A node's answer (or failure) for a request of this lock. `error` is 0
 * with a vote, or a REDLOCK_E* for an error vote with `errstr`. For
 * INSPECT, `errstr` carries the key's value and `pttl` its ttl. */
void redlock__lock_on_vote(redlock__req *req, redlock_vote_t vote, int error,
                           const char *errstr, int64_t pttl,
                           redlock__ns now);
/* The client is closing: cancel the op in flight, release what is held
 * or half-acquired, and drop the user's reference. */
void redlock__lock_abort(redlock_lock_t *lock);

#endif
