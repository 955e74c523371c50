/* common.h: what every file of lib/ shares: the public header, the
 * allocator, the pure helpers, assertions, an intrusive queue, pools, tokens
 * and the validity clock's type. The private structures live in the header
 * of the file that owns them (conn.h, node.h, master.h, guard.h, state.h,
 * handle.h, ...). lib/ is one folder per layer, bottom up: base, sys, conn,
 * master, safety, engine, lock, uv, api (lib_layers in lib/meson.build;
 * docs/DESIGN.md, "Layers"); a file includes and calls only its own folder
 * and those below it (tools/check-layers.py). Calls go down by name; events
 * come back up through callbacks. */
#ifndef REDLOCK_COMMON_H
#define REDLOCK_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "redlock.h"
#include "alloc.h"
#include "pure.h"

#define REDLOCK__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define REDLOCK__CONTAINER_OF(ptr, type, field)                             \
  ((type *)((char *)(ptr) - offsetof(type, field)))

/* Invariants only; never for runtime or network errors. */
#define REDLOCK__ASSERT(expr)                                               \
  do {                                                                      \
    if (!(expr))                                                            \
      redlock__assert_fail(#expr, __FILE__, __LINE__);                      \
  } while (0)
void redlock__assert_fail(const char *expr, const char *file, int line)
#if defined(__GNUC__)
    __attribute__((noreturn))
#endif
    ;

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

#define REDLOCK__BATCH_MAX_LOCKS 256   /* locks per renewal batch: most */
#define REDLOCK__BATCH_DEFAULT 64      /* and by default (docs/PERFORMANCE.md:
                                          a batch of 256 holds every master
                                          for ~0.8 ms at once, which shows
                                          in other clients' p99) */

/* ---- tokens (token.c) ---------------------------------------------------- */
#define REDLOCK__TOKEN_BYTES 20                       /* from uv_random */
#define REDLOCK__TOKEN_HEX (2 * REDLOCK__TOKEN_BYTES) /* chars, no NUL */
#define REDLOCK__TOKEN_MAX 128   /* adopted tokens (other implementations),
                                    tokens with an election's identity */
/* Fills out[REDLOCK__TOKEN_HEX + 1] with fresh random hex. 0 or EIO. */
struct redlock__sys;
int redlock__token_new(struct redlock__sys *sys, char *out);

/* ---- pools --------------------------------------------------------------- */
/* Blocks kept for reuse, each linked by its first member. The file that
 * makes the blocks (round.c, batch.c) sets free_item, and `drain` when
 * some may be out of the list; whoever owns the pool (the client) frees
 * it without knowing what the blocks are. */
typedef struct redlock__pool {
  redlock__queue items;
  void (*free_item)(redlock__queue *link);
  void (*drain)(struct redlock__pool *p);   /* NULL, or: put back what
                                               is out, before freeing */
} redlock__pool;

static inline void redlock__pool_init(redlock__pool *p) {
  redlock__queue_init(&p->items);
  p->free_item = NULL;
  p->drain = NULL;
}

static inline void redlock__pool_free(redlock__pool *p) {
  if (p->drain != NULL)
    p->drain(p);
  while (!redlock__queue_empty(&p->items)) {
    redlock__queue *q = p->items.next;
    redlock__queue_remove(q);
    p->free_item(q);
  }
}

/* ---- the validity clock (clock.c) -------------------------------------- */
/* Nanoseconds on CLOCK_BOOTTIME, which keeps counting while the machine
 * is suspended (the masters' ttls do too); CLOCK_MONOTONIC where there is
 * no BOOTTIME. Every validity, age and deadline of the library is read
 * from this clock; never the wall clock. The engine reads it through the
 * seam (redlock__sys_now, sys.h), whose libuv implementation calls this. */
redlock__ns redlock__clock_ns(void);

#endif
