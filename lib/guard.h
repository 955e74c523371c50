/* guard.h: the restart guard (see guard.c for the design and its proof).
 *
 * A master that restarted without persistence lost its keys: locks it
 * helped grant may now rest on fewer masters than a quorum, and its YES
 * vote for a new acquisition could complete a second grant. Its votes for
 * acquisitions count only once it is older than the longest ttl any client
 * of the deployment may hold a lock with. */
#ifndef REDLOCK_GUARD_H
#define REDLOCK_GUARD_H

#include "common.h"
#include "node.h"

typedef struct redlock__guard_waiter {
  redlock__queue link;
  void (*cb)(struct redlock__guard_waiter *w);
} redlock__guard_waiter;

typedef enum {
  REDLOCK__GUARD_COUNT = 0,   /* the vote counts */
  REDLOCK__GUARD_REFUSE,      /* it does not (why says so) */
  REDLOCK__GUARD_PENDING      /* wait: the deployment's ttl is being read */
} redlock__guard_verdict;

typedef enum {
  GUARD_READ_NONE = 0,   /* no read covers this master's current instance */
  GUARD_READ_OK,         /* a valid read started after its handshake */
  GUARD_READ_FAILED      /* the last such read had too few answers */
} redlock__guard_read;

typedef struct redlock__guard_node {
  char run_id[41];            /* instance seen at the last handshake */
  char cleared[41];           /* instance whose votes count; "" none */
  redlock__ns start;          /* latest possible start of that instance */
  redlock__ns up_ns;          /* its last handshake */
  int64_t known_ms;           /* record of the longest ttl seen there */
  redlock__guard_read read;
  int up;
} redlock__guard_node;

typedef struct redlock__guard {
  redlock__node *nodes;
  unsigned n;
  unsigned quorum;
  int64_t mode_ms;            /* -1 off, 0 auto, > 0 fixed window */
  const char *key;            /* the record's key */
  size_t keylen;
  int64_t window_ms;          /* auto: the longest ttl known */
  redlock__guard_node *gn;    /* n entries */
  /* The read of the record on every master (auto mode): */
  int reading;                /* a read is in flight */
  int again;                  /* another must start when it ends */
  redlock__ns read_start;
  unsigned read_left;         /* masters yet to answer or fail */
  unsigned read_answered;
  int64_t read_max;
  unsigned read_gen;
  redlock__queue waiters;     /* rounds with votes waiting for a read */
  redlock__queue settle_waiters;  /* acquisitions waiting for first
                                     connections (redlock__guard_settled) */
  int closing;
} redlock__guard;

/* 0 or ENOMEM. key may be NULL unless mode_ms == 0. */
int redlock__guard_init(redlock__guard *g, redlock__node *nodes, unsigned n,
                        unsigned quorum, int64_t mode_ms, const char *key,
                        size_t keylen);
void redlock__guard_free(redlock__guard *g);
/* From the client's node events. */
void redlock__guard_node_up(redlock__guard *g, unsigned idx);
void redlock__guard_node_down(redlock__guard *g, unsigned idx);
/* Stop reading; wake every waiter (client close). */
void redlock__guard_close(redlock__guard *g);

/* The verdict on a YES vote of master idx for an acquisition, at `now`.
 * REFUSE writes the reason (for the per-master result) into why, and when
 * it is a matter of time, the ms until the vote counts and the window
 * (else -1 in both). */
redlock__guard_verdict redlock__guard_check(redlock__guard *g, unsigned idx,
                                            redlock__ns now, char *why,
                                            size_t whylen, int64_t *wait_ms,
                                            int64_t *window_ms);
/* Auto guard: 1 once every master made its first connection (up at least
 * once, or down). Until then an acquisition cannot know which masters hold
 * the ttl record, so it waits (bounded by the connect deadline). */
int redlock__guard_settled(const redlock__guard *g);
void redlock__guard_wait_settled(redlock__guard *g, redlock__guard_waiter *w);
/* Calls w->cb once the read in progress ended (after a PENDING verdict). */
void redlock__guard_wait(redlock__guard *g, redlock__guard_waiter *w);
void redlock__guard_unwait(redlock__guard_waiter *w);

/* This client is about to hold a lock for ttl_ms. 1 when the deployment's
 * record must first be raised to ttl_ms: a master that is up is not known
 * to hold a record >= ttl_ms on its current connection. Every mode
 * records. */
int redlock__guard_needs_raise(const redlock__guard *g, int64_t ttl_ms);
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
