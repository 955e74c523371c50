/* watchdog.c: auto-extension and the lost-lock signal.
 *
 * Owns: the renewal schedule of an auto-extended lock, its extend rounds
 * (the watchdog's turn as owner of the lock's main round), and firing on_lost
 * exactly once. Does not own: the user's operations (lock.c), which take
 * the main round from the watchdog whenever they need it.
 *
 *   HELD --ttl/3 (- up to ttl/10)--> extend round --ok--> HELD (again)
 *                     | majority says not ours ---------> lost(ENOTHELD)
 *                     | failed (no quorum, expired) ----> retry in
 *                     |   min(ttl/10 clamped to 5..500 ms, validity left)
 *   validity ran out before any success -----------------> lost(EEXPIRED)
 *
 * While an extension is in flight (e.g. queued behind a reconnect) the
 * timer stays armed for the end of the validity, so the lost signal is
 * never late. The lost callback runs only from the watchdog's timer or
 * round, never from inside an API call. A user extend, release or acquire
 * stops the watchdog's round first (lock.c invariant 2); on every master
 * the user's command queues behind the watchdog's on the same connection,
 * so an extension can never land after a release. */
#include <string.h>

#include "lock.h"

static void wd_on_timer(redlock_lock_t *l);

/* ---- a renewal batch's entries: the handles (batch.h) -------------------- */

static const char *entry_key(redlock_lock_t *l, size_t *len) {
  *len = l->keylen;
  return l->key;
}

static const char *entry_token(redlock_lock_t *l) {
  return l->token;
}

static unsigned entry_slot(redlock_lock_t *l) {
  return redlock__lock_key_slot(l);
}

static void entry_placed(redlock_lock_t *l, redlock__batch *b,
                         unsigned idx) {
  l->batch = b;
  l->batch_idx = (uint16_t)idx;
}

static const redlock__batch_owner batch_owner = {
    entry_key,         entry_token,         entry_slot,
    entry_placed,      redlock__lock_ref,   redlock__lock_unref,
    redlock__wd_decided,
};

/* The watchdog's entry on the client's timer queue ran. */
static void on_wd(redlock__tq_entry *e) {
  wd_on_timer(REDLOCK__CONTAINER_OF(e, redlock_lock_t, wd));
}

/* The watchdog's entry on the client's timer queue: exactly at `ms`. */
static void wd_arm(redlock_lock_t *l, int64_t ms) {
  if (ms < 1)
    ms = 1;
  l->wd.early_ms = 0;
  redlock__tq_start(&l->client->tq, &l->wd, ms, on_wd);
}

/* Plain locks renew in batches (batch.c); the others with a round. */
static int wd_batched(const redlock_lock_t *l) {
  return redlock__kind_of(l)->batched && !l->heal &&
         l->client->renew_batch > 0;
}

static int64_t wd_retry_ms(const redlock_lock_t *l) {
  int64_t v = l->ttl_ms / 10;
  return v < 5 ? 5 : v > 500 ? 500 : v;
}

/* The validity left that still counts, in ns: what remains before the
 * step-down point (an election's leader gives up that long before its
 * validity ends; plain locks at the end). */
static int64_t wd_left_ns(const redlock_lock_t *l, redlock__ns now) {
  return redlock__validity_left(l->valid_until, now) -
         l->step_down_ms * (int64_t)REDLOCK__NS_PER_MS;
}

/* Soon, and at the step-down point at the latest (+1 ms so that the timer
 * cannot run just before it). */
static void wd_arm_retry(redlock_lock_t *l, redlock__ns now) {
  int64_t left = wd_left_ns(l, now) / (int64_t)REDLOCK__NS_PER_MS;
  int64_t retry = wd_retry_ms(l);
  wd_arm(l, retry < left ? retry : left + 1);
}

void redlock__wd_arm_renewal(redlock_lock_t *l) {
  /* ttl/3, minus up to a tenth of the ttl at random: locks taken together
   * do not all renew in the same loop turn. Never later than half of the
   * validity left (a round that took long left less than 2/3 of it). */
  int64_t spread = l->ttl_ms / 10 + 1;
  int64_t at = l->ttl_ms / 3 - (int64_t)(redlock__prng_next(&l->client->prng) %
                                         (uint64_t)spread);
  int64_t half = redlock__validity_left(l->valid_until, redlock__sys_now(l->client->sys)) /
                 (int64_t)REDLOCK__NS_PER_MS / 2;
  int64_t early = l->ttl_ms / 10 < REDLOCK__RENEW_EARLY_MS
                      ? l->ttl_ms / 10 : REDLOCK__RENEW_EARLY_MS;
  wd_arm(l, at < half ? at : half);
  /* A renewal may run a little early, with others of the same timer pass:
   * one batch instead of several (never late; at most a tenth of the ttl
   * and REDLOCK__RENEW_EARLY_MS early: 100,000 locks of ttl 30 s renew
   * about 10,000 times a second, so 50 ms fill a batch of 256; a renewal
   * 50 ms before ttl/3 instead of at it costs nothing but that). */
  if (wd_batched(l))
    l->wd.early_ms = (uint16_t)early;
}

static void wd_lost(redlock_lock_t *l, int reason) {
  redlock__lock_renewal_stop(l);
  redlock__lock_declare_lost(l, reason);
}

void redlock__wd_decided(redlock_lock_t *l, const redlock__wd_outcome *o,
                         redlock__ns now) {
  redlock__round_state st = o->st;
  redlock__ns deadline = redlock__lock_deadline(l, o->start, o->ttl_ms);
  int64_t left = redlock__validity_left(deadline, now);
  /* heal re-creates missing keys: once our validity ran out a success
   * would hide a gap in which another owner may have held it. */
  int lapsed = l->heal && redlock__validity_left(l->valid_until, now) <= 0;
  int ok = st == REDLOCK__ROUND_REACHED && left > 0 && !lapsed;
  if (ok)
    l->client->lst.extensions++;
  else
    l->client->lst.extension_failures++;
  if (l->client->event_cb != NULL) {
    redlock_result res;
    memset(&res, 0, sizeof(res));
    res.status = ok ? 0
                 : st == REDLOCK__ROUND_BLOCKED ? REDLOCK_ENOTHELD
                 : st == REDLOCK__ROUND_REACHED ? REDLOCK_EEXPIRED
                                                : REDLOCK_ENOQUORUM;
    res.attempts = 1;
    res.yes = o->yes;
    res.no = o->no;
    res.err = o->err;
    res.n_nodes = l->client->n;
    res.validity_ms = ok ? left / (int64_t)REDLOCK__NS_PER_MS : 0;
    res.elapsed_us = (now - o->start) / REDLOCK__NS_PER_US;
    res.nodes = o->nodes != NULL ? o->nodes : l->client->idle;
    res.quorum = l->client->quorum;
    redlock__lock_event(l, REDLOCK_EV_AUTO_EXTEND, &res);
  }
  redlock__lock_drop_round(l);
  redlock__lock_set_owner(l, REDLOCK__OWNER_FREE);
  if (ok) {
    l->valid_until = deadline;
    redlock__wd_arm_renewal(l);
    return;
  }
  if (st == REDLOCK__ROUND_BLOCKED) {
    wd_lost(l, REDLOCK_ENOTHELD);
    return;
  }
  if (wd_left_ns(l, now) <= 0) {
    wd_lost(l, REDLOCK_EEXPIRED);
    return;
  }
  wd_arm_retry(l, now);
}

static void on_wd_decided(redlock__round *r, redlock__round_state st,
                          redlock__ns now) {
  redlock__wd_outcome o;
  o.st = st;
  o.start = r->start;
  o.ttl_ms = r->ttl_ms;
  o.yes = r->yes;
  o.no = r->no;
  o.err = r->err;
  o.nodes = r->res;
  redlock__wd_decided(r->lock, &o, now);
}

void redlock__wd_flush(redlock__tq *tq) {
  redlock__batch_flush((redlock_client_t *)tq->arg);
}

static void wd_on_timer(redlock_lock_t *l) {
  redlock__ns now = redlock__sys_now(l->client->sys);
  if (l->state != REDLOCK__LOCK_HELD || !l->auto_extend || l->user_freed ||
      l->client->closing)
    return;
  if (wd_left_ns(l, now) <= 0) {
    /* An extension still in flight no longer matters. */
    wd_lost(l, REDLOCK_EEXPIRED);
    return;
  }
  if (l->owner != REDLOCK__OWNER_FREE) {
    /* The user's operation, or our own round, is in flight: look again
     * soon, and at the end of the validity at the latest. */
    wd_arm_retry(l, now);
    return;
  }
  redlock__lock_set_owner(l, REDLOCK__OWNER_WATCHDOG);
  redlock__lock_set_phase(l, REDLOCK__PHASE_EXTEND);
  if (wd_batched(l)) {
    /* Sent at the end of this timer pass with the others due now. */
    if (redlock__batch_add(l->client, l, l->ttl_ms, &batch_owner) != 0) {
      redlock__lock_set_owner(l, REDLOCK__OWNER_FREE);
      wd_arm_retry(l, now);
      return;
    }
    wd_arm(l, wd_left_ns(l, now) / (int64_t)REDLOCK__NS_PER_MS + 1);
    return;
  }
  if (redlock__lock_round(l, redlock__kind_of(l)->extend, l->ttl_ms, on_wd_decided, NULL) ==
      NULL) {
    redlock__lock_set_owner(l, REDLOCK__OWNER_FREE);
    wd_arm_retry(l, now);
    return;
  }
  if (l->owner == REDLOCK__OWNER_WATCHDOG)
    wd_arm(l, wd_left_ns(l, now) / (int64_t)REDLOCK__NS_PER_MS + 1);
}

void redlock__wd_after_user_extend(redlock_lock_t *l, int status) {
  if (!l->auto_extend)
    return;
  if (status == 0) {
    redlock__wd_arm_renewal(l);
    return;
  }
  if (l->state != REDLOCK__LOCK_HELD) {
    /* the caller learns it from its cb */
    redlock__tq_stop(&l->client->tq, &l->wd);
    return;
  }
  wd_arm_retry(l, redlock__sys_now(l->client->sys));
}
