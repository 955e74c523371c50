/* guard.h: the guard of YES votes (see guard.c for the design and its
 * proof).
 *
 * A master that may have lost keys - it restarted without persistence, or
 * its wall clock stepped and expired keys early - can grant a lock that
 * another client still holds on the other masters. Its YES votes for
 * acquisitions count only once every lock it may have lost has run out:
 * the longest ttl any client of the deployment may hold a lock with, since
 * the restart or the step. */
#ifndef REDLOCK_GUARD_H
#define REDLOCK_GUARD_H

#include "common.h"
#include "node.h"

typedef struct redlock__guard_waiter {
  redlock__queue link;
  void (*cb)(struct redlock__guard_waiter *w);
  void *owner;                /* the waiter's, for clock waits */
  unsigned idx;
} redlock__guard_waiter;

typedef enum {
  REDLOCK__GUARD_COUNT = 0,   /* the vote counts */
  REDLOCK__GUARD_REFUSE,      /* it does not (why says so) */
  REDLOCK__GUARD_PENDING      /* wait: the deployment's ttl is being read,
                                 or the others' clocks are on their way */
} redlock__guard_verdict;

typedef enum {
  GUARD_READ_NONE = 0,   /* no read covers this master's current instance */
  GUARD_READ_OK,         /* a valid read started after its handshake */
  GUARD_READ_FAILED      /* the last such read had too few answers */
} redlock__guard_read;

/* A declared master's new instance (guard.c, 6.). */
enum {
  GUARD_DECL_NONE = 0,        /* not declared, or cleared, or broken */
  GUARD_DECL_PENDING,         /* it reports durable: cleared once every
                                 other master was read without a mark */
  GUARD_DECL_MARKED           /* a mark names it: not cleared */
};

/* A mark's write on one node (guard.c, 6.). */
enum {
  GUARD_STAMP_NONE = 0,       /* not sent (no mark, or the node not up) */
  GUARD_STAMP_SENT,           /* HSET in flight */
  GUARD_STAMP_DONE,           /* the node answered it with an integer */
  GUARD_STAMP_FAILED          /* an error, a timeout, a lost connection:
                                 sent again (redlock__guard_tick) */
};

/* How a step was seen (guard.c, 3.). */
enum {
  GUARD_STEP_TRACKED = 1,     /* between two readings of this client */
  GUARD_STEP_MOVED,           /* its offset against the others' moved
                                 since the record's */
  GUARD_STEP_FIRST,           /* off the others' at the first sight */
  GUARD_STEP_MARK             /* another client's mark */
};

/* An instance: "run_id/replication id" (node.h, ident). */
#define REDLOCK__IDENT_LEN 84

typedef struct redlock__guard_node {
  char run_id[REDLOCK__IDENT_LEN];   /* instance seen at the last handshake */
  char cleared[REDLOCK__IDENT_LEN];  /* instance whose votes count; "" none */
  char broke[REDLOCK__IDENT_LEN];    /* a declared instance seen
                                        non-durable */
  char distrust[REDLOCK__IDENT_LEN]; /* its successor: not cleared by the
                                        declaration */
  char warned[REDLOCK__IDENT_LEN];   /* instance warned about (declaration) */
  /* Marks on the other masters (guard.c, 6.): */
  char mark[REDLOCK__IDENT_LEN];     /* the broken instance this client
                                        stamps there ("" none) */
  char marked[REDLOCK__IDENT_LEN];   /* the mark a read found for this
                                        master ("" none) */
  char read_mark[REDLOCK__IDENT_LEN];   /* the read in flight's */
  char forget[REDLOCK__IDENT_LEN];   /* an obsolete mark this client
                                        drops ("" none) */
  uint8_t stamp_gen;          /* bumped with `mark`: a late reply to an
                                 older mark's HSET confirms nothing */
  int stamp_warned;           /* warned: that mark's write failed */
  int64_t stamp_backoff_ms;   /* the wait before its next retry */
  redlock__ns stamp_retry_ns; /* a failed write is sent again from then */
  int decl;                   /* GUARD_DECL_*: the declaration's part */
  int decl_failed;            /* the last marks read missed a master */
  int told_failover;          /* warned: a declared node of a cluster or a
                                 sentinel group is guarded all the same */
  int told_isolation;         /* warned: a sentinel group's primary accepts
                                 writes when cut off (node.c), until it
                                 does not */
  int seen_as;                /* GUARD_SEEN_*: what the record said of the
                                 instance at this client's first sight
                                 (only the refusal's wording uses it) */
  redlock__ns start;          /* latest possible start of that instance */
  int start_rec;              /* start is the instance's record (some
                                 client wrote it there: it took writes) */
  int lag_max;                /* a sentinel group's: the largest
                                 min-replicas-max-lag its primaries had
                                 (8.) */
  redlock__ns accept_ns;      /* a sentinel group's primary whose start is
                                 not its record: the first YES this client
                                 had from it (8.), or 0 */
  redlock__ns up_ns;          /* its last handshake */
  int64_t known_ms;           /* record of the longest ttl seen there */
  redlock__guard_read read;
  int up;
  /* Its clock (guard.c, 3.): */
  int have;                   /* `last` is a reading of this instance */
  int continuity;             /* ... that follows an earlier one */
  int64_t slack_us;           /* the largest step tracking could miss
                                 between the last two readings */
  redlock__ns settled_ns;     /* the offset was last compared with the
                                 others' (settle) */
  redlock__clock_reading last;
  int64_t off_us;             /* offset of the latest reading */
  int64_t unc_us;             /* and its uncertainty */
  redlock__ns step_ns;        /* the latest step seen (0: none) */
  int64_t step_us;            /* its size (+ forward, - back) */
  int step_how;               /* GUARD_STEP_* */
  int step_read;              /* the ttl record was read (a quorum) since
                                 the step: its window is the deployment's
                                 longest ttl, not what this client knew */
  int base;                   /* its offset against the others' is known
                                 (the record's, or our note) */
  int base_check;             /* compare the record's with ours once the
                                 others' clocks are known */
  int step_note;              /* a step to note on the master */
  int64_t base_off_us;        /* that offset, and its uncertainty */
  int64_t base_unc_us;
  redlock__queue clock_waiters;   /* votes waiting for a reading */
} redlock__guard_node;

/* What the guard tells the client (warnings, client.c). */
typedef void (*redlock__guard_warn_fn)(void *arg, unsigned idx,
                                       const char *msg);

typedef struct redlock__guard {
  redlock__node *nodes;       /* every node of the client */
  const struct redlock__master *masters;   /* n_masters (master.h) */
  unsigned n;                 /* nodes */
  unsigned n_masters;         /* masters (of the quorum): node i < n_masters
                                 is master i's first node, every node
                                 knows its master */
  unsigned quorum;
  int64_t mode_ms;            /* -1 off, 0 auto, > 0 fixed window */
  int clock_on;               /* clock checks (clock_tolerance_ms >= 0) */
  int64_t tolerance_us;       /* > 0 fixed skew tolerance; 0: per ttl */
  double drift_factor;
  const char *key;            /* the ttl record's key */
  size_t keylen;
  const char *clock_key;      /* the clock record's key */
  size_t clock_keylen;
  const char *broke_key;      /* the marks' key (6.): a hash, one field per
                                 master whose declaration broke */
  size_t broke_keylen;
  int64_t window_ms;          /* auto: the longest ttl known */
  redlock__guard_node *gn;    /* n entries */
  /* The read of the record on every master (auto mode), with the marks
   * (6.: also in the fixed mode, while a declared master waits): */
  int reading;                /* a read is in flight */
  int again;                  /* another must start when it ends */
  redlock__ns read_start;
  unsigned read_left;         /* nodes yet to answer or fail */
  unsigned read_answered;     /* masters with an answer */
  uint8_t *read_ok;           /* n_masters: that master answered */
  uint8_t *marks_ok;          /* n_masters: its marks were read */
  uint8_t *stamp;             /* n_masters * n: GUARD_STAMP_* of master i's
                                 mark on node j (stamp[i * n + j]) */
  int64_t read_max;
  redlock__ns read_ok_ns;      /* the start of the last valid read (0:
                                 none): covers a node down since its
                                 handshake before it (7.) */
  unsigned read_gen;
  redlock__queue waiters;     /* rounds with votes waiting for a read */
  redlock__queue settle_waiters;  /* acquisitions waiting for first
                                     connections (redlock__guard_settled) */
  int closing;
  int unsettled;              /* some node may wait for the others' clocks */
  int64_t raise_ok;           /* needs_raise said no for this ttl, and no
                                 record or node changed since: 0 unknown */
  redlock__guard_warn_fn warn;
  void *warn_arg;
} redlock__guard;

/* 0 or ENOMEM. key may be NULL unless mode_ms == 0. The guard's indexes
 * are nodes (nodes[0..n)); quorums count masters. */
int redlock__guard_init(redlock__guard *g, redlock__node *nodes, unsigned n,
                        unsigned n_masters, unsigned quorum, int64_t mode_ms,
                        const char *key, size_t keylen);
void redlock__guard_free(redlock__guard *g);
/* From the client's node events. */
void redlock__guard_node_up(redlock__guard *g, unsigned idx);
void redlock__guard_node_down(redlock__guard *g, unsigned idx);
/* A clock reading of master idx came (node->clock, EV_CLOCK). */
void redlock__guard_clock(redlock__guard *g, unsigned idx);
/* A re-check of a declared master answered (node->durable). */
void redlock__guard_durable(redlock__guard *g, unsigned idx);
/* The client's background tick (every second): marks whose write failed
 * are sent again, with a bounded backoff (guard.c, 6.). */
void redlock__guard_tick(redlock__guard *g);
/* How many masters this client saw break whose mark no other master
 * confirmed yet (a new client could not know of the break); the first
 * one's address in `name` (may be NULL). */
unsigned redlock__guard_marks_unconfirmed(const redlock__guard *g,
                                          char *name, size_t len);
/* Stop reading; wake every waiter (client close). */
void redlock__guard_close(redlock__guard *g);

/* The causes of a refusal (redlock_guard_cause, redlock.h). */
/* The verdict on a YES vote of master idx for an acquisition of ttl_ms, at
 * `now`, once the clock reading that followed the vote came (see
 * redlock__guard_clock_ready). REFUSE writes the reason (for the
 * per-master result) into why, its cause, and when it is a matter of time
 * the ms until the vote counts and the window (else -1 in both). */
redlock__guard_verdict redlock__guard_check(redlock__guard *g, unsigned idx,
                                            int64_t ttl_ms, redlock__ns now,
                                            char *why, size_t whylen,
                                            int64_t *wait_ms,
                                            int64_t *window_ms, int *cause);
/* The same for the other nodes of node idx's master, once idx's own YES
 * counts (7.: a cluster's primaries pass keys to each other): COUNT when
 * each would count, PENDING while one is on its way up, or waits for a
 * read, or for a clock reading sent after `since` (the moment the YES
 * came: asked here), REFUSE with why and *peer the node that does not. */
redlock__guard_verdict redlock__guard_check_peers(
    redlock__guard *g, unsigned idx, int64_t ttl_ms, redlock__ns now,
    redlock__ns since, char *why, size_t whylen, int64_t *wait_ms,
    int64_t *window_ms, int *cause, unsigned *peer);
/* The same without side effects (no read is started; PENDING reads as a
 * refusal "not read yet"): for redlock_client_master_info. */
redlock__guard_verdict redlock__guard_peek(redlock__guard *g, unsigned idx,
                                           int64_t ttl_ms, redlock__ns now,
                                           char *why, size_t whylen,
                                           int64_t *wait_ms, int *cause);
/* Clock checks: 1 once master idx answered the clock reading `seq` on the
 * connection that had torn down `teardowns` times (the vote's); 0 while
 * it is on its way; -1 when that connection was lost (the vote cannot be
 * judged). */
int redlock__guard_clock_ready(const redlock__guard *g, unsigned idx,
                               uint32_t seq, uint64_t teardowns);
/* w->cb runs once the next reading of master idx came, or its connection
 * went down (or the guard closed). */
void redlock__guard_wait_clock(redlock__guard *g, unsigned idx,
                               redlock__guard_waiter *w);
/* The master's clock against the others': its skew in us (*skew) and
 * how uncertain that is (*unc). 0 when known, -1 when it has no reading. */
int redlock__guard_skew(const redlock__guard *g, unsigned idx,
                        int64_t *skew, int64_t *unc);
/* The window of a step or a restart (the longest ttl known). */
int64_t redlock__guard_window(const redlock__guard *g);

/* Auto guard: 1 once every master made its first connection (up at least
 * once, or down). Until then an acquisition cannot know which masters hold
 * the ttl record, so it waits (bounded by the connect deadline). */
int redlock__guard_settled(const redlock__guard *g);
void redlock__guard_wait_settled(redlock__guard *g, redlock__guard_waiter *w);
/* Calls w->cb once the read in progress ended, a clock reading landed, a
 * node came up, or a lost connection's requests have all failed (after a
 * PENDING verdict: judge again; redlock__guard_wake). */
void redlock__guard_wake(redlock__guard *g);
void redlock__guard_wait(redlock__guard *g, redlock__guard_waiter *w);
void redlock__guard_unwait(redlock__guard_waiter *w);

/* This client is about to hold a lock for ttl_ms. 1 when the deployment's
 * record must first be raised to ttl_ms: a master that is up is not known
 * to hold a record >= ttl_ms on its current connection, or fewer than a
 * quorum of masters are known to hold one. Every mode records. */
int redlock__guard_needs_raise(redlock__guard *g, int64_t ttl_ms);
/* Not the auto guard: raise the record where it is lacking, without
 * waiting (the commands go ahead of the caller's next ones). */
void redlock__guard_raise_async(redlock__guard *g, int64_t ttl_ms);
/* 1 when master idx confirmed a record >= ttl_ms on its current
 * connection (its current instance). */
int redlock__guard_has_record(const redlock__guard *g, unsigned idx,
                              int64_t ttl_ms);
/* A master refused to raise the record (an error reply, e.g. ACL). */
void redlock__guard_record_failed(redlock__guard *g, unsigned idx);
/* A master answered a raise of (or a read of) the record with `value`. */
void redlock__guard_record(redlock__guard *g, unsigned idx, int64_t value);
/* This client used ttl_ms (the window covers its own ttls). */
void redlock__guard_used(redlock__guard *g, int64_t ttl_ms);

#endif
