/* batch.h: renewals of many locks in one script call per master
 * (batch.c). A batch's entries belong to their owner (lock handles), which
 * it never looks into: what it needs of an entry, it asks through
 * redlock__batch_owner. */
#ifndef REDLOCK_BATCH_H
#define REDLOCK_BATCH_H

#include "state.h"
#include "common.h"
#include "round.h"

typedef struct redlock__batch redlock__batch;
#define REDLOCK__BATCH_MAX REDLOCK__BATCH_MAX_LOCKS

/* One decided extension (a round's, or a batch's). */
typedef struct redlock__wd_outcome {
  redlock__round_state st;
  redlock__ns start;            /* the round's or the batch's */
  int64_t ttl_ms;               /* the ttl sent */
  unsigned yes, no, err;
  const redlock_node_result *nodes;   /* for the event hook, or NULL */
} redlock__wd_outcome;

/* What a batch asks of its entries' owner (the lock layer's table). */
typedef struct redlock__batch_owner {
  /* The entry's key and token, and its key's slot. */
  const char *(*key)(redlock_lock_t *l, size_t *len);
  const char *(*token)(redlock_lock_t *l);
  unsigned (*key_slot)(redlock_lock_t *l);
  /* The entry is now at index `idx` of batch b (NULL: it left). */
  void (*placed)(redlock_lock_t *l, redlock__batch *b, unsigned idx);
  /* The batch holds (ref) or lets go of (unref) the entry. */
  void (*ref)(redlock_lock_t *l);
  void (*unref)(redlock_lock_t *l);
  /* The entry's renewal is decided. */
  void (*decided)(redlock_lock_t *l, const redlock__wd_outcome *o,
                  redlock__ns now);
} redlock__batch_owner;

/* Entry l (renewed to ttl_ms) joins client c's batch being gathered. 0 or
 * ENOMEM. */
int redlock__batch_add(redlock_client_t *c, redlock_lock_t *l,
                       int64_t ttl_ms, const redlock__batch_owner *owner);
/* Sends the batch being gathered (end of a timer pass). */
void redlock__batch_flush(redlock_client_t *c);
/* Entry l, at idx of batch b, leaves it (its results are only
 * consumed). */
void redlock__batch_detach(redlock__batch *b, unsigned idx,
                           redlock_lock_t *l);

#endif
