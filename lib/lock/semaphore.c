/* semaphore.c: counting semaphores (redlock.h; docs/DESIGN.md, Counting
 * semaphores): K permits, each a mutex of its own key, a holder owning one.
 *
 * Owns: the semaphore's side of a lock handle (redlock__sem): its names
 * (the limit record "{name}:sem", permit i "{name}:sem:<i>", its fencing
 * counter), the permit each attempt asks for (picked from the free lists
 * of the last attempt's refusals), the replies that carry more than a
 * vote (the handle's on_reply: refusals' free lists, inspection), the
 * inspection's summary, setting the limit, forcing one permit. Does not
 * own: the acquisition (acquire.c runs a permit's attempts as a mutex's),
 * the rounds (round.c), the arguments (command.c), the scripts
 * (scripts.c).
 *
 * Invariants
 *  1. The handle's key is the permit of the current attempt or hold; it
 *     changes only in sem_set_slot, called before an attempt's round
 *     (redlock__sem_pick) or by a force release on a handle that holds
 *     nothing: never while a permit of it is held or being acquired.
 *  2. The limit is checked by every master (scripts.c): this file only
 *     ever asks for permits below the handle's limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"

/* ---- names --------------------------------------------------------------- */

/* Points the handle at permit `slot`: its key and its fencing counter. */
static void sem_set_slot(redlock_lock_t *l, unsigned slot) {
  redlock__sem *s = l->sem;
  int n;
  s->slot = slot;
  n = snprintf(s->slot_key + s->rec_len, 12, ":%u", slot);
  l->key = s->slot_key;
  l->keylen = s->rec_len + (size_t)n;
  memcpy(s->fence_key, l->key, l->keylen);
  memcpy(s->fence_key + l->keylen, ":fence", 7);
  s->fence_len = l->keylen + 6;
}

int redlock_semaphore_new(redlock_client_t *c, const void *resource,
                          size_t len, unsigned limit, redlock_lock_t **out) {
  redlock_lock_t *l;
  redlock__sem *s;
  size_t room;
  char *p;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (limit < 1 || limit > REDLOCK_MAX_PERMITS)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_new: limit %u out of range "
                         "1..%d", limit, REDLOCK_MAX_PERMITS);
  rc = redlock_lock_new(c, resource, len, out);
  if (rc != 0)
    return rc;
  l = *out;
  /* "{key}:sem" (slot.c: at most a 5-byte tag and braces more), then
   * ":1023" and ":fence" after it. */
  room = l->keylen + 16;
  s = redlock__calloc(1, sizeof(*s) + 3 * (room + 16));
  if (s == NULL) {
    (void)redlock_lock_free(l);
    *out = NULL;
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  p = (char *)(s + 1);
  s->rec = p;
  s->slot_key = p + room + 16;
  s->fence_key = p + 2 * (room + 16);
  s->rec_len = redlock__same_slot_name(l->key, l->keylen, ":sem", s->rec,
                                       room);
  REDLOCK__ASSERT(s->rec_len > 0);
  memcpy(s->slot_key, s->rec, s->rec_len);
  memcpy(s->offset_str, "0", 2);
  s->limit = limit;
  l->sem = s;
  l->kind = REDLOCK__KIND_SEM;
  l->on_reply = redlock__sem_on_reply;
  sem_set_slot(l, 0);
  return 0;
}

/* ---- picking a permit ---------------------------------------------------- */

/* The permit that the most masters listed free in the last attempt's
 * refusals (ties at random), or -1 when none was listed. *count gets how
 * many listed it. */
static int best_free(redlock_lock_t *l, unsigned *count) {
  redlock__sem *s = l->sem;
  unsigned i, best = 0, ties = 0;
  int pick = -1;
  *count = 0;
  if (s->free_seen == NULL)
    return -1;
  for (i = 0; i < s->limit; i++) {
    unsigned n = s->free_seen[i];
    if (n == 0 || n < best)
      continue;
    if (n > best) {
      best = n;
      ties = 0;
    }
    /* Reservoir sampling over the ties: each as likely. */
    if (redlock__prng_next(&l->client->prng) % ++ties == 0)
      pick = (int)i;
  }
  *count = best;
  return pick;
}

int redlock__sem_free_quorum(redlock_lock_t *l) {
  unsigned n;
  return l->sem != NULL && best_free(l, &n) >= 0 && n >= l->client->quorum;
}

void redlock__sem_pick(redlock_lock_t *l) {
  redlock__sem *s = l->sem;
  uint64_t *prng = &l->client->prng;
  unsigned n;
  int slot = best_free(l, &n);
  if (slot < 0)   /* nothing known: any permit is as good */
    slot = (int)(redlock__prng_next(prng) % s->limit);
  if (s->free_seen != NULL)
    memset(s->free_seen, 0, s->limit * sizeof(*s->free_seen));
  s->offset = redlock__prng_next(prng) % s->limit;
  snprintf(s->offset_str, sizeof(s->offset_str), "%u", (unsigned)s->offset);
  sem_set_slot(l, (unsigned)slot);
}

/* ---- replies that carry more than a vote ---------------------------------- */

static void on_refusal(redlock_lock_t *l, const redlock__reply *reply) {
  redlock__sem *s = l->sem;
  size_t k;
  if (s->free_seen == NULL) {
    s->free_seen =
        redlock__calloc(REDLOCK_MAX_PERMITS, sizeof(*s->free_seen));
    if (s->free_seen == NULL)
      return;   /* the next attempt picks at random */
  }
  for (k = 0; k < reply->elements; k++) {
    const redlock__reply *e = reply->element[k];
    if (e != NULL && e->type == REDLOCK__R_INTEGER && e->integer >= 0 &&
        e->integer < (long long)s->limit)
      s->free_seen[e->integer]++;
  }
}

static void on_inspected(redlock_lock_t *l, unsigned i,
                         const redlock__reply *reply) {
  redlock__sem *s = l->sem;
  size_t k;
  if (reply->elements < 1 || reply->element[0] == NULL ||
      reply->element[0]->type != REDLOCK__R_INTEGER)
    return;
  s->ilimit[i] = reply->element[0]->integer;
  for (k = 1; k + 3 <= reply->elements; k += 3) {
    const redlock__reply *ix = reply->element[k];
    const redlock__reply *v = reply->element[k + 1];
    const redlock__reply *t = reply->element[k + 2];
    redlock__sem_held *h;
    if (ix == NULL || v == NULL || t == NULL)
      continue;
    if (ix->type != REDLOCK__R_INTEGER || ix->integer < 0 ||
        ix->integer >= REDLOCK_MAX_PERMITS || v->type != REDLOCK__R_STRING ||
        t->type != REDLOCK__R_INTEGER)
      continue;
    if (s->nheld == s->cheld) {
      size_t cap = s->cheld ? 2 * s->cheld : 16;
      redlock__sem_held *a = redlock__realloc(s->held, cap * sizeof(*a));
      if (a == NULL)
        return;   /* what fits is shown */
      s->held = a;
      s->cheld = cap;
    }
    h = &s->held[s->nheld++];
    h->slot = (unsigned)ix->integer;
    h->master = i;
    h->pttl_ms = t->integer;
    redlock__strlcpy(h->value, v->str, sizeof(h->value));
  }
}

void redlock__sem_on_reply(redlock_lock_t *l, redlock__cmd cmd, unsigned i,
                           const redlock__reply *reply) {
  if (reply->type != REDLOCK__R_ARRAY)
    return;
  if (cmd == REDLOCK__CMD_SEM_ACQUIRE)
    on_refusal(l, reply);
  else if (cmd == REDLOCK__CMD_SEM_INSPECT && l->sem->ilimit != NULL)
    on_inspected(l, i, reply);
}

/* ---- inspection ---------------------------------------------------------- */

static int by_slot_value(const void *a, const void *b) {
  const redlock__sem_held *x = a, *y = b;
  int c;
  if (x->slot != y->slot)
    return x->slot < y->slot ? -1 : 1;
  c = strcmp(x->value, y->value);
  if (c != 0)
    return c;
  return x->pttl_ms > y->pttl_ms ? -1 : x->pttl_ms < y->pttl_ms;
}

/* The limit a quorum of masters hold (0: none), and the largest. */
static unsigned agreed_limit(const redlock_lock_t *l, unsigned *max) {
  const redlock__sem *s = l->sem;
  unsigned i, j, n = l->client->n;
  *max = 0;
  for (i = 0; i < n; i++)
    if (s->ilimit[i] > 0 && (unsigned)s->ilimit[i] > *max)
      *max = (unsigned)s->ilimit[i];
  for (i = 0; i < n; i++) {
    unsigned same = 0;
    if (s->ilimit[i] <= 0)
      continue;
    for (j = 0; j < n; j++)
      same += s->ilimit[j] == s->ilimit[i];
    if (same >= l->client->quorum)
      return (unsigned)s->ilimit[i];
  }
  return 0;
}

static void sem_inspect_done(redlock_lock_t *l, int status,
                             const redlock_result *res, void *arg) {
  redlock__sem *s = l->sem;
  redlock_semaphore_info_cb cb = s->icb;
  redlock_semaphore_info info;
  redlock_permit_info *pi = NULL;
  unsigned q = l->client->quorum;
  size_t k = 0;
  (void)arg;
  s->icb = NULL;
  memset(&info, 0, sizeof(info));
  info.limit = agreed_limit(l, &info.limit_max);
  if (s->nheld > 0) {
    qsort(s->held, s->nheld, sizeof(*s->held), by_slot_value);
    pi = redlock__calloc(s->nheld, sizeof(*pi));
    if (pi == NULL && status == 0)
      status = REDLOCK_ENOMEM;
  }
  while (pi != NULL && k < s->nheld) {
    /* One permit: its runs of equal values, the longest run wins. */
    redlock_permit_info *p = &pi[info.n_permits++];
    unsigned slot = s->held[k].slot;
    p->index = slot;
    while (k < s->nheld && s->held[k].slot == slot) {
      size_t run = k;
      while (run < s->nheld && s->held[run].slot == slot &&
             strcmp(s->held[run].value, s->held[k].value) == 0)
        run++;
      if (run - k > p->masters) {
        /* pttls sorted longest first: the quorum-th keeps a quorum. */
        p->masters = (unsigned)(run - k);
        p->holder = s->held[k].value;
        p->held = p->masters >= q;
        p->pttl_ms = p->held ? s->held[k + q - 1].pttl_ms
                             : s->held[k].pttl_ms;
      }
      k = run;
    }
    if (p->held) {
      info.held++;
      if (slot < info.limit)
        info.free++;   /* counted down below */
    }
  }
  info.free = info.limit - info.free;
  info.permits = pi;
  if (cb != NULL)
    cb(l, status, &info, res, s->iarg);
  redlock__free(pi);
  s->nheld = 0;
}

int redlock_semaphore_inspect(redlock_lock_t *l, redlock_semaphore_info_cb cb,
                              void *arg) {
  int rc = redlock__lock_usable(l, "redlock_semaphore_inspect");
  unsigned i;
  if (rc != 0)
    return rc;
  if (l->sem == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_inspect: not a semaphore");
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_inspect: callback is NULL");
  if (l->sem->ilimit == NULL) {
    l->sem->ilimit = redlock__calloc(l->client->n, sizeof(int64_t));
    if (l->sem->ilimit == NULL)
      return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  for (i = 0; i < l->client->n; i++)
    l->sem->ilimit[i] = -2;
  l->sem->nheld = 0;
  l->sem->icb = cb;
  l->sem->iarg = arg;
  return redlock__lock_side_round(l, REDLOCK__CMD_SEM_INSPECT,
                                  (int64_t)l->sem->limit, sem_inspect_done,
                                  NULL);
}

/* ---- the limit, forcing a permit ------------------------------------------ */

static void sem_limit_done(redlock_lock_t *l, int status,
                           const redlock_result *res, void *arg) {
  redlock__sem *s = l->sem;
  redlock_lock_cb cb = s->ucb;
  (void)arg;
  s->ucb = NULL;
  if (status == 0)
    s->limit = s->new_limit;
  if (cb != NULL)
    cb(l, status, res, s->uarg);
}

int redlock_semaphore_set_limit(redlock_lock_t *l, unsigned limit,
                                redlock_lock_cb cb, void *arg) {
  int rc = redlock__lock_usable(l, "redlock_semaphore_set_limit");
  if (rc != 0)
    return rc;
  if (l->sem == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_set_limit: not a semaphore");
  if (limit < 1 || limit > REDLOCK_MAX_PERMITS)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_set_limit: limit %u out of "
                         "range 1..%d", limit, REDLOCK_MAX_PERMITS);
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_set_limit: callback is NULL");
  l->sem->ucb = cb;
  l->sem->uarg = arg;
  l->sem->new_limit = limit;
  return redlock__lock_side_round(l, REDLOCK__CMD_SEM_LIMIT, (int64_t)limit,
                                  sem_limit_done, NULL);
}

int redlock_semaphore_force_release(redlock_lock_t *l, unsigned permit,
                                    redlock_lock_cb cb, void *arg) {
  int rc = redlock__lock_usable(l, "redlock_semaphore_force_release");
  if (rc != 0)
    return rc;
  if (l->sem == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_force_release: not a "
                         "semaphore");
  if (permit >= REDLOCK_MAX_PERMITS)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_force_release: permit %u out "
                         "of range 0..%d", permit, REDLOCK_MAX_PERMITS - 1);
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_semaphore_force_release: callback is "
                         "NULL");
  if (l->state == REDLOCK__LOCK_HELD || l->state == REDLOCK__LOCK_LOST ||
      l->state == REDLOCK__LOCK_ADOPTED)
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_semaphore_force_release: this handle "
                         "holds a permit: release it");
  sem_set_slot(l, permit);   /* invariant 1: it holds nothing */
  return redlock__lock_side_round(l, REDLOCK__CMD_SEM_FORCE, 0, cb, arg);
}

/* ---- getters ------------------------------------------------------------- */

unsigned redlock_semaphore_limit(const redlock_lock_t *l) {
  return l != NULL && l->sem != NULL ? l->sem->limit : 0;
}

int redlock_semaphore_permit(const redlock_lock_t *l) {
  if (l == NULL || l->sem == NULL || !redlock_lock_is_held(l))
    return -1;
  return (int)l->sem->slot;
}
