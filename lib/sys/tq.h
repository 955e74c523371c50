/* tq.h: the client's timer queue (see tq.c).
 *
 * A binary min-heap of deadlines on the library's clock (redlock__sys_now)
 * with one timer of the seam (sys.h) armed for the earliest: a lock handle carries two
 * 32-byte entries instead of two 152-byte uv_timer_t, and starting or
 * stopping an entry costs no libuv call unless the earliest deadline moves
 * earlier. */
#ifndef REDLOCK_TQ_H
#define REDLOCK_TQ_H

#include "common.h"
#include "sys.h"

typedef struct redlock__tq_entry redlock__tq_entry;
/* What an entry runs when it is due (it is no longer queued then). */
typedef void (*redlock__tq_fire_fn)(redlock__tq_entry *e);

struct redlock__tq_entry {
  redlock__ns due;     /* redlock__sys_now() */
  uint64_t seq;        /* equal dues run in start order */
  uint32_t pos;        /* heap position + 1; 0 when not queued */
  uint16_t early_ms;   /* may run this much before due, when another
                          entry runs in the same pass (batching) */
  redlock__tq_fire_fn fire;   /* the latest start's */
};

typedef struct redlock__tq redlock__tq;

/* Runs once per pass that ran at least one entry, after them. */
typedef void (*redlock__tq_done_fn)(redlock__tq *tq);

struct redlock__tq {
  redlock__timer timer;   /* armed for heap[0]; data is the queue */
  redlock__tq_entry **heap;
  uint32_t n;
  uint32_t cap;
  uint32_t reserved;   /* slots promised to entries (>= n, <= cap) */
  uint64_t seq;
  uint64_t armed;      /* the timer's due; UINT64_MAX when stopped */
  redlock__ns seen;    /* the latest redlock__sys_now() read here */
  redlock__tq_done_fn done;
  void *arg;
};

void redlock__tq_init(redlock__tq *tq, redlock__sys *sys,
                      redlock__tq_done_fn done,
                      void *arg);
/* Room for k more entries (an object reserves a slot for each of its
 * entries when it is made, so that starting one never fails): 0 or
 * ENOMEM. unreserve gives the slots back (the entries must be stopped). */
int redlock__tq_reserve(redlock__tq *tq, uint32_t k);
void redlock__tq_unreserve(redlock__tq *tq, uint32_t k);
/* (Re)starts e (which has a reserved slot) to run `fire` in `ms` from now
 * (the library's clock, never earlier), as uv_timer_start does. An entry
 * started while the queue runs expired entries runs in a later pass,
 * never in the same one. */
void redlock__tq_start(redlock__tq *tq, redlock__tq_entry *e, int64_t ms,
                       redlock__tq_fire_fn fire);
void redlock__tq_stop(redlock__tq *tq, redlock__tq_entry *e);
static inline int redlock__tq_active(const redlock__tq_entry *e) {
  return e->pos != 0;
}
/* Closes the timer (the queue must be empty); `closed` runs later. */
void redlock__tq_close(redlock__tq *tq, void (*closed)(redlock__timer *t));
void redlock__tq_free(redlock__tq *tq);

#endif
