/* tq.c: the client's timer queue (tq.h).
 *
 * Owns: a binary min-heap of entries ordered by (due, seq) and the one
 * libuv timer armed for its top. Does not own: the entries (they live in
 * lock handles) or what running one means (each entry's `fire`).
 *
 * Invariants
 *  1. The libuv timer is armed exactly when the heap is not empty, for the
 *     top's due (so an idle client keeps no loop alive, as with per-handle
 *     timers that are stopped).
 *  2. Starting an entry never allocates: every entry's slot was reserved
 *     when its object was made (redlock__tq_reserve).
 *  3. A pass runs only entries started before it began (seq below the
 *     pass's mark): an entry restarted from its own callback runs in a
 *     later pass, so a pass always ends.
 *  4. An entry never runs before its due on the library's clock
 *     (redlock__sys_now, read afresh), whatever the loop's time says: the
 *     loop's time is read once per iteration (stale after a busy one) and
 *     from CLOCK_MONOTONIC_COARSE on a 1000 Hz kernel (up to a ms
 *     behind), so a timer set on it fires early by as much. An early
 *     pass runs nothing and re-arms for what is left. (It did fire early
 *     once: a wait's retries came a few ms sooner than the retry delay,
 *     and the attempt at the deadline ended with a ms left and was
 *     followed by another, 6 attempts where 5 is the bound;
 *     test-redis-wait-deadline c.) */
#include <string.h>

#include "tq.h"

static int before(const redlock__tq_entry *a, const redlock__tq_entry *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void place(redlock__tq *tq, uint32_t i, redlock__tq_entry *e) {
  tq->heap[i] = e;
  e->pos = i + 1;
}

static void sift_up(redlock__tq *tq, uint32_t i) {
  redlock__tq_entry *e = tq->heap[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!before(e, tq->heap[parent]))
      break;
    place(tq, i, tq->heap[parent]);
    i = parent;
  }
  place(tq, i, e);
}

static void sift_down(redlock__tq *tq, uint32_t i) {
  redlock__tq_entry *e = tq->heap[i];
  for (;;) {
    uint32_t l = 2 * i + 1;
    uint32_t m = l;
    if (l >= tq->n)
      break;
    if (l + 1 < tq->n && before(tq->heap[l + 1], tq->heap[l]))
      m = l + 1;
    if (!before(tq->heap[m], e))
      break;
    place(tq, i, tq->heap[m]);
    i = m;
  }
  place(tq, i, e);
}

static void on_tq_timer(redlock__timer *t);

/* Invariant 1. `now` is redlock__sys_now(), or 0 to read it only if the
 * timer must move. */
static void rearm(redlock__tq *tq, redlock__ns now) {
  redlock__ns due;
  if (tq->n == 0) {
    if (tq->armed != UINT64_MAX) {
      redlock__timer_stop(&tq->timer);
      tq->armed = UINT64_MAX;
    }
    return;
  }
  due = tq->heap[0]->due;
  if (due == tq->armed)
    return;
  if (now == 0)
    now = tq->seen = redlock__sys_now(tq->timer.sys);
  tq->armed = due;
  /* Rounded up: the libuv timer may still fire early (invariant 4). */
  redlock__timer_start(&tq->timer, on_tq_timer,
                 due > now ? (due - now + REDLOCK__NS_PER_MS - 1) /
                                 REDLOCK__NS_PER_MS
                           : 0,
                 0);
}

static void remove_at(redlock__tq *tq, uint32_t i) {
  redlock__tq_entry *e = tq->heap[i];
  redlock__tq_entry *last = tq->heap[--tq->n];
  e->pos = 0;
  if (i == tq->n)
    return;
  place(tq, i, last);
  if (i > 0 && before(last, tq->heap[(i - 1) / 2]))
    sift_up(tq, i);
  else
    sift_down(tq, i);
}

void redlock__tq_init(redlock__tq *tq, redlock__sys *sys,
                      redlock__tq_done_fn done,
                      void *arg) {
  memset(tq, 0, sizeof(*tq));
  redlock__timer_init(sys, &tq->timer);
  tq->timer.data = tq;
  tq->armed = UINT64_MAX;
  tq->done = done;
  tq->arg = arg;
}

int redlock__tq_reserve(redlock__tq *tq, uint32_t k) {
  uint32_t want = tq->reserved + k;
  if (want < tq->reserved)
    return REDLOCK_ENOMEM;
  if (want > tq->cap) {
    uint32_t cap = tq->cap < 16 ? 16 : tq->cap;
    redlock__tq_entry **h;
    while (cap < want)
      cap = cap > UINT32_MAX / 2 ? want : cap * 2;
    h = redlock__realloc(tq->heap, (size_t)cap * sizeof(*h));
    if (h == NULL)
      return REDLOCK_ENOMEM;
    tq->heap = h;
    tq->cap = cap;
  }
  tq->reserved = want;
  return 0;
}

void redlock__tq_unreserve(redlock__tq *tq, uint32_t k) {
  REDLOCK__ASSERT(tq->reserved >= k);
  tq->reserved -= k;
  REDLOCK__ASSERT(tq->n <= tq->reserved);
  if (tq->cap > 64 && tq->reserved < tq->cap / 4) {
    /* Give memory back after a burst of handles (halving, so that a
     * workload that hovers does not realloc on every handle). */
    redlock__tq_entry **h =
        redlock__realloc(tq->heap, (size_t)(tq->cap / 2) * sizeof(*h));
    if (h != NULL) {
      tq->heap = h;
      tq->cap /= 2;
    }
  }
}

void redlock__tq_start(redlock__tq *tq, redlock__tq_entry *e, int64_t ms,
                       redlock__tq_fire_fn fire) {
  redlock__ns now;
  if (ms <= 0) {
    /* As soon as possible: any past reading is as good as a new one (the
     * entry is due either way, in a later pass: invariant 3), and a
     * released handle's reap comes here once per cycle. */
    ms = 0;
    now = tq->seen;
  } else {
    now = tq->seen = redlock__sys_now(tq->timer.sys);
  }
  if (e->pos != 0)
    remove_at(tq, e->pos - 1);
  REDLOCK__ASSERT(tq->n < tq->cap && tq->n < tq->reserved);
  e->due = now + (redlock__ns)ms * REDLOCK__NS_PER_MS;
  e->fire = fire;
  e->seq = tq->seq++;
  place(tq, tq->n, e);
  tq->n++;
  sift_up(tq, tq->n - 1);
  rearm(tq, now);
}

void redlock__tq_stop(redlock__tq *tq, redlock__tq_entry *e) {
  if (e->pos == 0)
    return;
  remove_at(tq, e->pos - 1);
  rearm(tq, 0);
}

static void on_tq_timer(redlock__timer *t) {
  redlock__tq *tq = t->data;
  redlock__ns now = tq->seen;   /* read afresh when it decides */
  int fresh = 0;
  uint64_t mark = tq->seq;   /* invariant 3 */
  int ran = 0;
  int batching = 0;
  tq->armed = UINT64_MAX;    /* a one-shot timer that just fired */
  while (tq->n > 0) {
    redlock__tq_entry *e = tq->heap[0];
    if (e->seq >= mark)
      break;   /* started during this pass: every older expired one ran */
    if (e->due > now && !fresh) {
      now = tq->seen = redlock__sys_now(tq->timer.sys);
      fresh = 1;
    }
    if (e->due > now &&
        !(batching && e->early_ms > 0 &&
          e->due <= now + (redlock__ns)e->early_ms * REDLOCK__NS_PER_MS))
      break;
    remove_at(tq, 0);
    if (e->early_ms > 0)
      batching = 1;
    ran = 1;
    e->fire(e);
  }
  if (ran && tq->done != NULL)
    tq->done(tq);
  rearm(tq, ran || !fresh ? 0 : now);
}

void redlock__tq_close(redlock__tq *tq, void (*closed)(redlock__timer *t)) {
  REDLOCK__ASSERT(tq->n == 0);
  redlock__timer_close(&tq->timer, closed);
}

void redlock__tq_free(redlock__tq *tq) {
  redlock__free(tq->heap);
  tq->heap = NULL;
  tq->cap = 0;
}
