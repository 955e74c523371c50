/* handle.h: the lock handle's structure, its machines and their setters:
 * what every file of the lock layer shares (lock.c, command.c, acquire.c,
 * watchdog.c; lock.h declares what each of them offers). */
#ifndef REDLOCK_HANDLE_H
#define REDLOCK_HANDLE_H

#include <uv.h>

#include "batch.h"
#include "state.h"
#include "common.h"
#include "round.h"
#include "scripts.h"

#define REDLOCK__RENEW_EARLY_MS 50   /* renewals gathered ahead (watchdog.c) */




typedef enum {
  REDLOCK__KIND_PLAIN = 0,
  REDLOCK__KIND_MULTI,
  REDLOCK__KIND_READ,
  REDLOCK__KIND_WRITE,
  REDLOCK__KIND_SEM      /* a permit of a counting semaphore */
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
  REDLOCK__OWNER_FREE = 0,
  REDLOCK__OWNER_USER,
  REDLOCK__OWNER_WATCHDOG
} redlock__owner;

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

/* A counting semaphore's side of its handle (semaphore.c; DESIGN,
 * Counting semaphores). The handle's key is the permit of the current
 * attempt (or hold), "{name}:sem:<slot>", rewritten when an attempt picks
 * one; keys[0] stays the name (resource, events). */
typedef struct redlock__sem_held {
  unsigned slot;
  unsigned master;
  int64_t pttl_ms;
  char value[REDLOCK__ERRSTR_LEN];   /* cut at 159 bytes, as a result's */
} redlock__sem_held;

typedef struct redlock__sem {
  unsigned limit;               /* K: permits 0..K-1 */
  unsigned slot;                /* the current attempt's (or held) permit */
  uint32_t offset;              /* where its refusals' scans start */
  char offset_str[12];          /* the same in decimal (command.c) */
  char *rec;                    /* the limit record "{name}:sem": also the
                                   channel's name */
  size_t rec_len;
  char *slot_key;               /* room for rec + ":<index>" */
  char *fence_key;              /* room for the permit's + ":fence" */
  size_t fence_len;
  uint16_t *free_seen;          /* K: masters that listed permit i free in
                                   the current attempt's refusals */
  unsigned hops;                /* this acquisition's attempts past its
                                   retries, each to a permit listed free
                                   (at most K: acquire.c) */
  /* redlock_semaphore_set_limit's caller and the limit it sets. */
  redlock_lock_cb ucb;
  void *uarg;
  unsigned new_limit;
  /* Inspection (redlock_semaphore_inspect): what each master said. */
  redlock_semaphore_info_cb icb;
  void *iarg;
  int64_t *ilimit;              /* n: the stored limit, -1 none, -2 no
                                   answer */
  redlock__sem_held *held;      /* every held permit any master reported */
  size_t nheld, cheld;
} redlock__sem;

struct redlock_lock_s {
  redlock__member member;       /* client->members: aborted at close */
  redlock_client_t *client;
  redlock__lock_state state;
  redlock__op op;
  redlock__owner owner;
  redlock__phase phase;
  redlock__round *round;        /* the main round, owned by `owner` */
  redlock__round *iround;       /* redlock_lock_inspect's own round */
  redlock_lock_cb cb;           /* the user's operation */
  void *cb_arg;
  redlock_lock_cb icb;          /* inspect */
  void *icb_arg;
  void *data;
  redlock__kind kind;
  char *key;                    /* prefix + resource (+ ":rw") */
  size_t keylen;
  uint16_t key_slot;            /* the key's Redis Cluster slot, once */
  uint8_t key_slot_known;       /*   a cluster master needed it */
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
                                   an election, or holder_buf), or NULL;
                                   not owned */
  char *holder_buf;             /* ".<holder>" of opts.holder (owned), or
                                   NULL until one is given */
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
  redlock__tq_entry wait_end;   /* an acquisition's wait: deadline plus a
                                   command timeout (lock.c) */
  unsigned refs;                /* user + operation + attached rounds */
  struct redlock__batch *batch; /* the watchdog's renewal batch, or NULL */
  uint16_t batch_idx;           /* this lock's entry in it */
  redlock__wake_waiter *waiters;   /* nkeys, made on first wait */
  redlock__guard_waiter settle;    /* waiting for first connections */
  uint8_t settling;
  redlock__sem *sem;            /* a semaphore's (REDLOCK__KIND_SEM) */
  /* A reply of master i to one of its rounds, before it is classified,
   * for a kind that reads more than a vote (semaphore.c); or NULL. */
  void (*on_reply)(redlock_lock_t *l, redlock__cmd cmd, unsigned i,
                   const redlock__reply *reply);
};

/* The key's Redis Cluster slot, hashed on first use: rounds to cluster
 * masters route by it, and a plain master never pays for it. */
/* A read-write handle's is its plain key's (the key without ":rw"): its
 * scripts read and write both (scripts.c). */
static inline unsigned redlock__lock_key_slot(redlock_lock_t *l) {
  if (!l->key_slot_known) {
    l->key_slot = (uint16_t)redlock__key_slot(
        l->key, REDLOCK__KIND_IS_RW(l->kind) ? l->keylen - 3 : l->keylen);
    l->key_slot_known = 1;
  }
  return l->key_slot;
}

/* The handle's other machines change only here, as its state does
 * through redlock__lock_set_state (one place to watch or trace). */
static inline void redlock__lock_set_op(redlock_lock_t *l, redlock__op op) {
  l->op = op;
}
static inline void redlock__lock_set_owner(redlock_lock_t *l,
                                           redlock__owner owner) {
  l->owner = owner;
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

#endif
