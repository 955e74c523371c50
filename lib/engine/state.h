/* state.h: the client's state that the engine and the locks share.
 *
 * The API layer (client.c) makes and closes a client; the layers under it
 * (rounds, batches, lock handles) read its masters, quorum, guard, timer
 * queue and pools from here and never call up into client.c: a member
 * that leaves tells the API through `member_left`, a callback the client
 * sets (DESIGN, "Layers": calls go down, events come back through
 * callbacks).
 *
 * Owns: the layout of struct redlock_client_s and the member list's two
 * operations. Does not own: making, configuring or closing a client
 * (client.c). */
#ifndef REDLOCK_STATE_H
#define REDLOCK_STATE_H

#include <uv.h>

#include "common.h"
#include "conn.h"
#include "guard.h"
#include "master.h"
#include "node.h"
#include "tq.h"
#include "wake.h"

/* Something that lives as long as the client and must be told when it
 * closes (a lock handle). */
typedef struct redlock__member {
  redlock__queue link;                       /* client->members */
  void (*abort)(struct redlock__member *m);  /* the client is closing */
} redlock__member;

/* A token this client gave up on a key (a failed attempt's, a released
 * or freed lock's): a key of its own that may still sit on a master (a
 * SET that landed late, a release that did not arrive) until `until`.
 * The next acquisition of that key by this client may take it over. */
#define REDLOCK__STALE_MAX 64
#define REDLOCK__STALE_PER_KEY 4   /* given-up tokens sent with one SET */
typedef struct redlock__stale {
  uint64_t hash;                /* of the key; 0 = a free entry */
  redlock__ns until;
  char token[REDLOCK__TOKEN_HEX + 1];
} redlock__stale;

/* Lock counters of a client (stats.c copies them out). */
typedef struct redlock__lock_stats {
  uint64_t attempts, grants, taken, noquorum, expired, acquire_timeouts;
  uint64_t canceled, extensions, extension_failures, lost, releases;
} redlock__lock_stats;

struct redlock_client_s {
  uv_loop_t *loop;             /* the libuv seam's (NULL over another) */
  redlock__sys *sys;           /* the seam (sys.h): &sys_uv, or another's */
  redlock__sys sys_uv;
  unsigned n;                  /* masters (of the quorum) */
  unsigned n_nodes;            /* nodes: the n masters' first nodes
                                  (node i is master i's), then the other
                                  primaries of cluster masters */
  char **displays;             /* n: each master as configured, without
                                  password (results, messages) */
  redlock__master *masters;    /* n: each master of the quorum (master.h) */
  unsigned masters_open;       /* closing: masters not closed (their
                                  state beside the nodes: a sentinel
                                  group's connection and timer) */
  unsigned quorum;
  double drift_factor;
  int64_t command_timeout_ms;
  unsigned retry_count;
  int64_t retry_delay_ms;
  int64_t retry_jitter_ms;
  int64_t restart_guard_ms;    /* -1 off, 0 auto, > 0 fixed */
  char *key_prefix;
  size_t key_prefix_len;
  char *username;
  char *password;
  char *maxttl_key;            /* prefix + "__redlock__:maxttl" */
  size_t maxttl_keylen;
  char *clock_key;             /* prefix + "__redlock__:clock" */
  size_t clock_keylen;
  char *broke_key;             /* prefix + "__redlock__:broke" (guard.c) */
  size_t broke_keylen;
  int64_t max_ttl_ms;          /* the deployment's cap on ttls */
  int declared;                /* some master is declared durable */
  redlock__timer recheck_timer;   /* background checks (client.c) */
  uint64_t ticks;
  void (*warn_cb)(redlock_client_t *c, const char *msg, void *arg);
  void *warn_arg;
  char (*warnings)[300];       /* n: the latest warning per master */
  char info_buf[2][300];       /* redlock_client_master_info's strings */
  redlock__node_env env;
  redlock__node *nodes;
  redlock__flusher flusher;
  redlock__guard guard;
  redlock__wake wake;
  redlock__queue members;      /* every live lock handle */
  void (*member_left)(redlock_client_t *c);   /* the API's (client.c):
                                                 a close may finish */
  redlock__pool rounds;        /* pooled rounds (round.c) */
  redlock_node_result *idle;   /* n results for calls without a round */
  uint64_t prng;
  unsigned in_api;             /* > 0 inside a public call */
  int closing;
  int close_stage;             /* 1: closing down, 2: final handles */
  int close_aborted;           /* every member aborted: the close's first
                                  step, before any wait for marks */
  redlock__ns close_marks_until;   /* closing waits until then for marks
                                      no other master confirmed (0: not
                                      waiting yet) */
  int wake_closed;
  unsigned nodes_open;
  unsigned handles_open;       /* flusher + close timer + tq */
  redlock__timer close_timer;
  redlock__tq tq;              /* every lock handle's timers (lock.c) */
  struct redlock__batch *open_batch;   /* renewals being gathered
                                          (watchdog.c), or NULL */
  redlock__pool batches;       /* pooled batches (batch.c) */
  int renew_batch;             /* locks per renewal batch; 0 = off */
  uint64_t batch_eval;         /* masters that said NOSCRIPT to a batch */
  redlock__stale stale[REDLOCK__STALE_MAX];   /* a ring (lock.c) */
  unsigned stale_next;
  redlock__ns stale_until;     /* the latest `until` in the ring */
  redlock_close_cb close_cb;
  void *close_arg;
  redlock__lock_stats lst;
  redlock_event_cb event_cb;   /* redlock_client_set_event_hook */
  void *event_arg;
};

/* A member joins; one left the list and its memory is gone (the close
 * may finish). */
static inline void redlock__client_join(redlock_client_t *c,
                                        redlock__member *m) {
  redlock__queue_insert_tail(&c->members, &m->link);
}
static inline void redlock__client_leave(redlock_client_t *c) {
  c->member_left(c);
}

#endif
