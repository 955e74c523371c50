/* round.h: one fan-out of one command to every master of the quorum, and
 * its decision (round.c). A round belongs to an owner (a lock handle),
 * which it never looks into: what it needs of it, it asks through
 * redlock__round_owner (its command's arguments, its keys by slot, a
 * request's deadline, letting go). So round.c includes no header above
 * its layer (tools/check-layers.py). */
#ifndef REDLOCK_ROUND_H
#define REDLOCK_ROUND_H

#include "state.h"
#include "common.h"
#include "scripts.h"

#define REDLOCK__ERRSTR_LEN 160  /* per-master text in a result */
#define REDLOCK__NODE_NAME 264   /* a node's "host:port" in a result */

typedef struct redlock__round redlock__round;

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
  redlock_lock_t *lock;         /* its owner (never looked into here), NULL
                                   once detached */
  const struct redlock__round_owner *owner;   /* what it asks the owner */
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
  char *names;                  /* n * REDLOCK__NODE_NAME: the name of a
                                   node that may be repointed (a cluster's,
                                   a sentinel group's), copied: a repoint
                                   frees the node's before the result is
                                   delivered */
  uint8_t *pend;                /* n: a YES waiting for the guard */
  uint64_t *pend_conn;          /* n: the node's teardowns at that YES */
  uint32_t *pend_seq;           /* n: the clock reading it waits for */
  redlock__ns *pend_yes;        /* n: when that YES came (a cluster's
                                   other primaries' clocks are read after
                                   it: guard.c 7.) */
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

/* Room for any command's arguments (a force release of K keys names up
 * to 3K on a cluster: each key and two names of its hash, round.c). */
#define REDLOCK__ARGV_MAX (3 * REDLOCK_MAX_RESOURCES + 8)

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


/* The keys of a multi-key command grouped by slot (a master that routes
 * by slot gets one command per slot): part k holds names[first[k] ..
 * first[k + 1]). */
typedef struct redlock__key_groups {
  const char *names[3 * REDLOCK_MAX_RESOURCES];
  size_t lens[3 * REDLOCK_MAX_RESOURCES];
  unsigned slot[3 * REDLOCK_MAX_RESOURCES];
  unsigned first[REDLOCK__MAX_PARTS + 1];
  unsigned n;
} redlock__key_groups;

/* Part k of g: its names into *sub (pointing into g), and the node of m
 * that serves them now. */
static inline redlock__node *redlock__groups_part(const redlock__key_groups *g,
                                                  unsigned k,
                                                  redlock__master *m,
                                                  redlock__argv_sub *sub) {
  sub->names = &g->names[g->first[k]];
  sub->name_lens = &g->lens[g->first[k]];
  sub->n_names = g->first[k + 1] - g->first[k];
  return redlock__master_route(m, g->slot[g->first[k]]);
}

/* What a round asks its owner (lock handles: the lock layer's table). */
typedef struct redlock__round_owner {
  /* The command's arguments (flags: REDLOCK__ARGV_*): for every master
   * (sub NULL), or for one part of a master that routes by slot. */
  int (*argv)(const redlock__round *r, unsigned flags,
              const redlock__argv_sub *sub, const char **argv, size_t *lens,
              char nums[3][24]);
  /* The keys of the round's multi-key command, by slot: how many parts. */
  unsigned (*groups)(const redlock__round *r, redlock__key_groups *g);
  /* The slot of the owner's key. */
  unsigned (*key_slot)(const redlock__round *r);
  /* A request's deadline (0: none beyond the command timeout). */
  redlock__ns (*until)(const redlock__round *r);
  /* The round lets go of its owner (its reference). */
  void (*release)(redlock_lock_t *owner);
  /* A reply of master i before it is classified, while the owner waits
   * for the round (a command whose reply says more than a vote). */
  void (*reply)(const redlock__round *r, unsigned i,
                const redlock__reply *reply);
} redlock__round_owner;

/* Commands over several keys (split by slot where a master routes so). */
int redlock__multi_keys(redlock__cmd cmd);

redlock__round *redlock__round_get(redlock_client_t *c);
/* Sends cmd to every master (only where only_yes voted YES, if given). */
void redlock__round_send(redlock__round *r, const redlock__round *only_yes);
void redlock__round_detach(redlock__round *r);
/* The round decides nothing more (its late replies are only consumed). */
void redlock__round_stop(redlock__round *r);

#endif
