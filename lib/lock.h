/* lock.h: lock handles and their rounds (lock.c, round.c, acquire.c,
 * watchdog.c). See lock.c for the state machine and its invariants. */
#ifndef REDLOCK_LOCK_H
#define REDLOCK_LOCK_H

#include <uv.h>

#include "client.h"
#include "common.h"
#include "scripts.h"

#define REDLOCK__ERRSTR_LEN 160  /* per-master text in a result */

typedef struct redlock__round redlock__round;
typedef struct redlock__batch redlock__batch;
#define REDLOCK__BATCH_MAX REDLOCK__BATCH_MAX_LOCKS
#define REDLOCK__RENEW_EARLY_MS 50   /* renewals gathered ahead (watchdog.c) */

/* Called once when a round is decided (early, or when every master
 * answered for an `all` round). st: REACHED, BLOCKED or FAILED. */
typedef void (*redlock__round_fn)(redlock__round *r,
                                  redlock__round_state st, redlock__ns now);

/* One fan-out of one command to every master (DESIGN 4.2). Pooled per
 * client; attached to a lock while the lock waits for its decision, then
 * detached: late replies are consumed by the round alone, which goes back
 * to the pool after the last one. */
struct redlock__round {
  redlock__queue link;          /* FIRST member: the client's pool */
  redlock__guard_waiter gw;     /* PENDING guard verdicts */
  redlock_client_t *client;
  redlock_lock_t *lock;         /* NULL once detached */
  redlock__round_fn decide;
  redlock__cmd cmd;
  uint8_t all;                  /* decide when every master answered */
  uint8_t progress;             /* all: also call decide(PENDING) once,
                                   when a quorum has answered */
  uint8_t quorum_seen;
  uint8_t guarded;              /* YES votes pass the guard */
  uint8_t clocked;              /* ... with the clock reading after them */
  unsigned clock_waits;         /* votes waiting for a reading (cw) */
  uint8_t needs_record;         /* a YES needs the ttl record there */
  uint8_t needs_isolation;      /* ... and a sentinel group's primary that
                                   refuses writes when cut off (node.c) */
  uint8_t decided;
  uint8_t waiting_guard;
  uint8_t redeliver;            /* releases: REDLOCK__REQ_REDELIVER */
  unsigned yes, no, err;
  unsigned refs;                /* requests in flight */
  redlock__ns start;
  redlock__ns decided_ns;       /* when it was decided (0: not yet) */
  int64_t ttl_ms;               /* the ttl (or fence value) sent */
  int64_t value_max;            /* largest value of a YES (fence counter) */
  redlock_node_result *res;     /* n entries */
  char *buf;                    /* n * REDLOCK__ERRSTR_LEN */
  uint8_t *pend;                /* n: a YES waiting for the guard */
  uint64_t *pend_conn;          /* n: the node's teardowns at that YES */
  uint32_t *pend_seq;           /* n: the clock reading it waits for */
  redlock__buf cmd_buf;         /* the command, encoded once for all */
  redlock__guard_waiter *cw;    /* n: waiting for that reading */
  uint16_t *vnode;              /* n: the node whose reply is the vote */
  /* Cluster masters: a command split over slots (multi-resource keys) or
   * sent to every primary (the records) has parts; master i's are
   * part[i * REDLOCK__MAX_PARTS ...], nparts[i] of them, left[i] not
   * answered yet. Made on the first such round. */
  struct redlock__part *part;
  uint8_t *nparts;              /* n: 0 = one command (no parts) */
  uint8_t *left;                /* n */
};

/* One part of a cluster master's vote. */
#define REDLOCK__MAX_PARTS 128   /* 2 x REDLOCK_MAX_RESOURCES names */
typedef struct redlock__part {
  uint16_t node;                /* the node that answered (or has it) */
  uint8_t state;                /* REDLOCK_VOTE_NONE (sent), YES, NO, ERR */
  uint32_t seq;                 /* a YES: the clock reading after it */
  uint64_t conn;                /* a YES: that node's teardowns then */
  int64_t value;
} redlock__part;

typedef enum {
  REDLOCK__KIND_PLAIN = 0,
  REDLOCK__KIND_MULTI,
  REDLOCK__KIND_READ,
  REDLOCK__KIND_WRITE
} redlock__kind;

/* A side of a read-write lock (its waiters leave places: scripts.c). */
#define REDLOCK__KIND_IS_RW(k) \
  ((k) == REDLOCK__KIND_READ || (k) == REDLOCK__KIND_WRITE)

/* What each kind of lock sends: the one place that chooses (lock.c). A
 * plain acquisition may send FENCED_ACQUIRE or TAKEOVER instead (the
 * acquisition's options and own stale keys: acquire.c). */
typedef struct redlock__kind_cmds {
  redlock__cmd acquire;
  redlock__cmd extend;
  redlock__cmd release;
  redlock__cmd giveup;   /* a waiter withdraws its place (if `withdraws`) */
  uint8_t withdraws;     /* its waiters hold places between attempts */
  uint8_t batched;       /* renewals may go in a batch (batch.c) */
} redlock__kind_cmds;

const redlock__kind_cmds *redlock__kind_of(const redlock_lock_t *l);

/* The handle's state (one enum, changed only by redlock__lock_set_state):
 *
 *   IDLE --acquire--> ACQUIRING --granted--> HELD --release--> IDLE
 *     ^                 |  ^ retry              |  \--lost--> LOST
 *     +-----failed------+  +--+                 |              |
 *   IDLE/LOST --adopt--> ADOPTED --extend ok--> HELD           |
 *   LOST/ADOPTED --release--> IDLE   LOST --acquire--> ACQUIRING */
typedef enum {
  REDLOCK__LOCK_IDLE = 0,
  REDLOCK__LOCK_ACQUIRING,
  REDLOCK__LOCK_HELD,
  REDLOCK__LOCK_ADOPTED,
  REDLOCK__LOCK_LOST
} redlock__lock_state;

/* The user's operation in flight (at most one). */
typedef enum {
  REDLOCK__OP_NONE = 0,
  REDLOCK__OP_ACQUIRE,
  REDLOCK__OP_EXTEND,
  REDLOCK__OP_RELEASE,
  REDLOCK__OP_INSPECT
} redlock__op;

/* Who owns the main round (lock->round): one owner at a time. */
typedef enum {
  REDLOCK__SLOT_FREE = 0,
  REDLOCK__SLOT_USER,
  REDLOCK__SLOT_WATCHDOG
} redlock__slot;

/* What the main round is doing. */
typedef enum {
  REDLOCK__PHASE_NONE = 0,
  REDLOCK__PHASE_RAISE,         /* recording the ttl (restart guard) */
  REDLOCK__PHASE_SET,           /* acquisition round */
  REDLOCK__PHASE_FENCE,         /* fencing, second round */
  REDLOCK__PHASE_PTTL,          /* refused: when does the holder expire? */
  REDLOCK__PHASE_EXTEND,
  REDLOCK__PHASE_RELEASE
} redlock__phase;

enum { REDLOCK__TIMER_IDLE = 0, REDLOCK__TIMER_RETRY,
       REDLOCK__TIMER_DELIVER, REDLOCK__TIMER_INSPECT,
       REDLOCK__TIMER_PTTL };   /* the PTTL round's grace (acquire.c) */

struct redlock_lock_s {
  redlock__member member;       /* client->members: aborted at close */
  redlock_client_t *client;
  redlock__lock_state state;
  redlock__op op;
  redlock__slot slot;
  redlock__phase phase;
  redlock__round *round;        /* the main round, owned by `slot` */
  redlock__round *iround;       /* redlock_lock_inspect's own round */
  redlock_lock_cb cb;           /* the user's operation */
  void *cb_arg;
  redlock_lock_cb icb;          /* inspect */
  void *icb_arg;
  void *data;
  redlock__kind kind;
  char *key;                    /* prefix + resource (+ ":rw") */
  size_t keylen;
  uint16_t key_slot1;           /* 1 + the key's Redis Cluster slot, or 0
                                   until a cluster master needs it */
  char **keys;                  /* all keys; keys[0] == key */
  size_t *keylens;
  unsigned nkeys;
  char *fence_key;              /* key + ":fence", made by the first
                                   fenced acquisition, or NULL */
  size_t fence_keylen;
  char *fence_key_cl;           /* its name on cluster masters (the key's
                                   slot: slot.c), made with it */
  size_t fence_key_cl_len;
  char **rw_names;              /* nkeys: each key + ":rw" (inspect, force
                                   release), made on first use */
  size_t *rw_name_lens;
  char **rw_names_cl;           /* nkeys: their names on cluster masters
                                   (each key's slot: slot.c), made with
                                   them (force release) */
  size_t *rw_name_cl_lens;
  char *rw_hash_cl;             /* a read-write handle's hash on cluster
                                   masters: the plain key's same-slot name
                                   (its key is the name on plain masters),
                                   made by redlock_rwlock_new */
  size_t rw_hash_cl_len;
  int64_t ttl_ms;               /* the held lock's ttl (watchdog) */
  int64_t op_ttl_ms;            /* the ttl of the operation in flight */
  char *token;                  /* tok_inline, or a heap buffer of
                                   REDLOCK__TOKEN_MAX + 1 for longer ones
                                   (adopted, election's) */
  char tok_inline[REDLOCK__TOKEN_HEX + 1];
  char intent[REDLOCK__TOKEN_HEX + 1];   /* a read-write waiter's id */
  const char *token_suffix;     /* appended to every new token (".id" of
                                   an election), or NULL; not owned */
  size_t token_suffix_len;
  int64_t step_down_ms;         /* auto-extension: lost this long before
                                   the validity ends (elections); 0 at it */
  redlock__ns valid_until;      /* 0 when not held */
  redlock__ns wait_deadline;    /* 0 = none */
  redlock__ns acquire_start;    /* validity counts from the SET round */
  unsigned attempts;
  unsigned max_retries;
  int64_t retry_delay_ms;
  int64_t retry_jitter_ms;
  unsigned holds;               /* reentrant holds while HELD */
  unsigned pending_holds;       /* a re-entry waiting for its extend */
  uint64_t fence;               /* the current acquisition's token */
  /* Options of the current acquisition. */
  uint8_t auto_extend;
  uint8_t heal;
  uint8_t wake;
  uint8_t want_fence;
  uint8_t lost;                 /* lost while held, until re-acquired */
  uint8_t user_freed;
  uint8_t timer_mode;
  void (*timer_fn)(redlock_lock_t *l);   /* what the timer runs (mode's) */
  const struct redlock__lock_above *above;   /* acquire.c's hooks */
  uint8_t waiting;              /* subscribed to the release channels */
  uint8_t woken;                /* a release was heard during an attempt */
  int retry_status;             /* the refused attempt's (PTTL round) */
  struct redlock__round *refused;   /* that attempt's round, for the
                                       result, while the PTTL round runs */
  int64_t next_delay_ms;        /* its retry delay (PTTL round) */
  int end_at_deadline;          /* the retry timer only waits for the wait
                                   deadline (less than a ms was left) */
  redlock_lost_cb lost_cb;
  void *lost_arg;
  /* The outcome being delivered. */
  int status;
  uint64_t result_elapsed_us;
  int64_t result_validity_ms;
  redlock__tq_entry tmr;        /* retry delay; deferred callback */
  redlock__tq_entry wd;         /* the watchdog */
  unsigned refs;                /* user + operation + attached rounds */
  struct redlock__batch *batch; /* the watchdog's renewal batch, or NULL */
  uint16_t batch_idx;           /* this lock's entry in it */
  redlock__wake_waiter *waiters;   /* nkeys, made on first wait */
  redlock__guard_waiter settle;    /* waiting for first connections */
  uint8_t settling;
};

/* ---- lock.c -------------------------------------------------------------- */
/* The key's Redis Cluster slot, hashed on first use: rounds to cluster
 * masters route by it, and a plain master never pays for it. */
/* A read-write handle's is its plain key's (the key without ":rw"): its
 * scripts read and write both (scripts.c). */
static inline unsigned redlock__lock_key_slot(redlock_lock_t *l) {
  if (l->key_slot1 == 0)
    l->key_slot1 = (uint16_t)(redlock__key_slot(
                                  l->key, REDLOCK__KIND_IS_RW(l->kind)
                                              ? l->keylen - 3
                                              : l->keylen) +
                              1);
  return l->key_slot1 - 1u;
}

void redlock__lock_set_state(redlock_lock_t *l, redlock__lock_state s);
/* The handle's timer (retry delay, deferred callback), on the client's
 * timer queue: its mode (timer_mode) runs after ms. */
void redlock__lock_timer(redlock_lock_t *l, int64_t ms);
void redlock__lock_timer_stop(redlock_lock_t *l);
/* The handle's other machines change only here, as its state does
 * through redlock__lock_set_state (one place to watch or trace). */
static inline void redlock__lock_set_op(redlock_lock_t *l, redlock__op op) {
  l->op = op;
}
static inline void redlock__lock_set_slot(redlock_lock_t *l,
                                          redlock__slot slot) {
  l->slot = slot;
}
static inline void redlock__lock_set_phase(redlock_lock_t *l,
                                           redlock__phase phase) {
  l->phase = phase;
}
/* The handle's timer runs `fn` (the mode says what waits: acquire.c and
 * lock.c read it); NULL with REDLOCK__TIMER_IDLE. */
static inline void redlock__lock_set_timer_mode(
    redlock_lock_t *l, int mode, void (*fn)(redlock_lock_t *l)) {
  l->timer_mode = (uint8_t)mode;
  l->timer_fn = fn;
}
/* What the layers above a handle do when one of lock.c's operations needs
 * them: set by acquire.c when an acquisition starts (NULL before, when
 * none of it can be pending). Calls go down, these come back up. */
typedef struct redlock__lock_above {
  void (*abort)(redlock_lock_t *l);     /* an acquisition in flight ends */
  void (*unwait)(redlock_lock_t *l);    /* its wake-up subscriptions go */
  void (*after_user_extend)(redlock_lock_t *l, int status);   /* the
                                           watchdog keeps in step */
} redlock__lock_above;
/* Stops the renewals: the watchdog's timer entry, and its round if it
 * owns the slot. */
void redlock__lock_renewal_stop(redlock_lock_t *l);
/* The lock is lost: state LOST, and on_lost (auto-extended locks) fires,
 * at most once per acquisition. */
void redlock__lock_declare_lost(redlock_lock_t *l, int reason);
void redlock__lock_ref(redlock_lock_t *l);
void redlock__lock_unref(redlock_lock_t *l);
/* Ends the user's operation with l->status: the callback runs now, or on
 * the next loop turn when inside a public call. Detaches the round. */
void redlock__lock_complete(redlock_lock_t *l, int status);
/* Sends a release of the current token to every master (no answer
 * awaited; sent again after a reconnect if it fails): a failed attempt,
 * a freed handle, a closing client. Not where r (if given) said NO (the
 * key is someone else's there). flags: REDLOCK__ARGV_QUIET, no release
 * message (an attempt that never held the lock); REDLOCK__ARGV_PUTBACK,
 * a failed attempt of a read-write waiter. */
void redlock__lock_cleanup(redlock_lock_t *l, const redlock__round *r,
                           unsigned flags);
/* A waiter on a read-write lock is done: its place (a writer's intent, a
 * reader's queue entry or entitlement) goes; at the end of the
 * acquisition, never between attempts. With r (a granting round): only
 * where r's vote was not YES (those masters dropped it when they said
 * yes; a master that refused, or had not answered, may keep it for the
 * lease and hold the other side back). flags: REDLOCK__ARGV_QUIET, no
 * message to waiters; REDLOCK__ARGV_GRANTED, the waiter got the lock. */
void redlock__lock_withdraw(redlock_lock_t *l, const redlock__round *r,
                            unsigned flags);
/* How long a read-write waiter's place lives on the masters after each
 * attempt (renewed by the next one): 0 for a single attempt. */
int64_t redlock__rw_lease_ms(const redlock_lock_t *l);
/* Own stale keys (client.h): l gives up its current token; and the
 * given-up tokens of l's key still alive (at most REDLOCK__STALE_PER_KEY,
 * newest first; plain locks only). */
void redlock__stale_note(redlock_lock_t *l);
unsigned redlock__stale_tokens(const redlock_lock_t *l,
                               const char **tokens);
/* Room for a token of len bytes in l->token: 0 or ENOMEM. */
int redlock__lock_token_room(redlock_lock_t *l, size_t len);
/* Makes l->fence_key (and its cluster name) if needed: 0 or ENOMEM. */
int redlock__lock_fence_key(redlock_lock_t *l);
/* Makes l->rw_names and their cluster names if needed: 0 or ENOMEM. */
int redlock__lock_rw_names(redlock_lock_t *l);
/* Room for any command's arguments (a force release of K keys names up
 * to 3K on a cluster: each key and two names of its hash, round.c). */
#define REDLOCK__ARGV_MAX (3 * REDLOCK_MAX_RESOURCES + 8)
/* Validity deadline of a round of `ttl_ms` that started at `start`. */
redlock__ns redlock__lock_deadline(const redlock_lock_t *l,
                                   redlock__ns start, int64_t ttl_ms);
/* Starts the main round of `cmd` for the slot owner. The round may decide
 * inside this call (every master down). */
redlock__round *redlock__lock_round(redlock_lock_t *l, redlock__cmd cmd,
                                    int64_t ttl_ms, redlock__round_fn fn,
                                    const redlock__round *only_yes);
/* Lets go of the main round (its late replies are only consumed). */
void redlock__lock_drop_round(redlock_lock_t *l);
/* Checks of a public call: 0 or an error with a message. */
int redlock__lock_usable(const redlock_lock_t *l, const char *fn);
int redlock__check_ttl(const redlock_lock_t *l, int64_t ttl_ms,
                       const char *fn);
/* Sets the ttl record on every master (redlock_client_set_ttl_record): a
 * round of its own, as inspect's. */
int redlock__lock_set_record(redlock_lock_t *l, int64_t ttl_ms,
                             redlock_lock_cb cb, void *arg);
/* A re-entrant acquire with a longer ttl: one extend round, delivered as
 * the acquire's outcome (one more hold on success). */
void redlock__lock_reenter_extend(redlock_lock_t *l, int64_t ttl_ms);

/* The event hook, if set (stats.c): one finished operation. */
void redlock__lock_event(redlock_lock_t *l, redlock_event_kind kind,
                         const redlock_result *res);

/* ---- round.c ------------------------------------------------------------- */
redlock__round *redlock__round_get(redlock_client_t *c);
/* Sends cmd to every master (only where only_yes voted YES, if given). */
void redlock__round_send(redlock__round *r, const redlock__round *only_yes);
void redlock__round_detach(redlock__round *r);
/* Fire and forget to master i, one that routes by slot (split over
 * slots). */
void redlock__round_slot_send(redlock_lock_t *l, unsigned i,
                              redlock__cmd cmd, int64_t ttl_ms,
                              unsigned flags);
/* The round decides nothing more (its late replies are only consumed). */
void redlock__round_stop(redlock__round *r);
/* Encodes the command of `cmd` for lock l: EVALSHA, or EVAL with
 * REDLOCK__ARGV_EVAL; a release with REDLOCK__ARGV_QUIET publishes no
 * release message (it gives up a failed attempt's keys: nobody waited for
 * that owner, and waking every waiter at once would only split their
 * votes again). */
#define REDLOCK__ARGV_EVAL 1u
#define REDLOCK__ARGV_QUIET 2u
/* A read-write release of a failed attempt: put back the waiter's place
 * where the attempt had been admitted (scripts.c). */
#define REDLOCK__ARGV_PUTBACK 4u
/* A read-write giveup of a waiter that got the lock (scripts.c). */
#define REDLOCK__ARGV_GRANTED 8u
int redlock__lock_argv(const redlock_lock_t *l, redlock__cmd cmd,
                       int64_t ttl_ms, unsigned flags, const char **argv,
                       size_t *lens, char nums[3][24]);
/* The same for a cluster master's part (cluster.c routes it): names are
 * the part's keys (multi-resource keys of one slot; a force release's
 * keys and read-write hashes of one slot), rec the node's record key
 * (MAXTTL commands). The fencing counter and the read-write hash are
 * the key's same-slot names (an inspect's, a read-write handle's). */
typedef struct redlock__argv_sub {
  const char *const *names;
  const size_t *name_lens;
  unsigned n_names;
  const char *rec;
  size_t rec_len;
} redlock__argv_sub;
int redlock__lock_argv_sub(const redlock_lock_t *l, redlock__cmd cmd,
                           int64_t ttl_ms, unsigned flags,
                           const redlock__argv_sub *sub, const char **argv,
                           size_t *lens, char nums[3][24]);

/* ---- acquire.c ----------------------------------------------------------- */
/* The next attempt (first, or from the retry timer). */
void redlock__acquire_attempt(redlock_lock_t *l);
/* A waiting acquisition stops listening for releases. */
void redlock__acquire_unwait(redlock_lock_t *l);
/* Client close: an acquisition in flight or between attempts ends. */
void redlock__acquire_abort(redlock_lock_t *l);
/* The PTTL round's grace timer fired (lock.c's timer). */
void redlock__acquire_pttl_grace(redlock_lock_t *l);

/* ---- watchdog.c ---------------------------------------------------------- */
/* Arms the next renewal (after a grant or a successful extension). */
void redlock__wd_arm_renewal(redlock_lock_t *l);
/* The user's extend ended with status: keep the watchdog in step. */
void redlock__wd_after_user_extend(redlock_lock_t *l, int status);
/* One decided extension of the watchdog (a round's, or a batch's). */
typedef struct redlock__wd_outcome {
  redlock__round_state st;
  redlock__ns start;            /* the round's or the batch's */
  int64_t ttl_ms;               /* the ttl sent */
  unsigned yes, no, err;
  const redlock_node_result *nodes;   /* for the event hook, or NULL */
} redlock__wd_outcome;
void redlock__wd_decided(redlock_lock_t *l, const redlock__wd_outcome *o,
                         redlock__ns now);

/* ---- batch.c ------------------------------------------------------------- */
/* A renewal's outcome, to the batch's owner (the watchdog). */
typedef void (*redlock__batch_decided_fn)(redlock_lock_t *l,
                                          const redlock__wd_outcome *o,
                                          redlock__ns now);
/* The lock (slot taken by the watchdog) joins the renewal batch being
 * gathered; `decided` gets its outcome. 0 or ENOMEM. */
int redlock__batch_add(redlock_lock_t *l, redlock__batch_decided_fn decided);
/* Sends the batch being gathered (end of a timer pass). */
void redlock__batch_flush(redlock_client_t *c);
/* The lock leaves its batch (its results are only consumed). */
void redlock__batch_detach(redlock_lock_t *l);

#endif
