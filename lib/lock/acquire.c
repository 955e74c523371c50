/* acquire.c: acquisition (the Redlock spec's steps 1-5), retries, fencing
 * and wake-up.
 *
 * Owns: the attempts of one redlock_lock_acquire() call: recording a new
 * longest ttl for the restart guard, the SET round, the fencing round, the
 * release of a failed attempt on every master, the retry policy and the
 * wait deadline, and listening for releases while waiting. Does not own:
 * the quorum round (round.c) or delivering the callback (lock.c).
 *
 *   attempt: [raise the ttl record, restart guard] -> SET round
 *     1. read the validity clock (round start);
 *     2. send SET key token NX PX ttl (or the kind's script) to all N
 *        masters in the same loop turn, each bounded by the command
 *        timeout (node.c);
 *     3. decide as soon as yes >= quorum or yes + unanswered < quorum;
 *        YES votes of masters inside the restart guard's window do not
 *        count (guard.c);
 *     4. validity = ttl - elapsed - (ttl * drift_factor + 2 ms), from the
 *        SET round's start; held only if validity > 0;
 *        [fencing: a second round raises the counter to T on the masters
 *        that said YES; it needs a quorum too]
 *     5. on failure release on every master but those that said NO (the
 *        release queues behind the SET on the same connection; a master
 *        that is down gets it after its next handshake), then retry after
 *        a random delay with a fresh token.
 *   Retries: with a wait deadline (opts.wait_ms > 0), until the next
 *   attempt would start after it (then ETIMEDOUT); without one, up to the
 *   retry count. */
#include <string.h>

#include "lock.h"

/* ---- waiting for a release ----------------------------------------------- */

static void pttl_finish(redlock_lock_t *l, redlock__round *r, int reached,
                        redlock__ns now);

static void on_wake(redlock__wake_waiter *w) {
  redlock_lock_t *l = w->owner;
  redlock_client_t *c = l->client;
  if (l->refused != NULL && l->round != NULL) {
    /* Asking when the holder expires: no need to know any more. */
    l->woken = 1;
    pttl_finish(l, l->round, 0, redlock__sys_now(l->client->sys));
    return;
  }
  if (l->timer_mode != REDLOCK__TIMER_RETRY) {
    /* An attempt is in flight: it may have been refused before this
     * release. Retry at once when it fails, not after the delay. */
    l->woken = 1;
    return;
  }
  /* Retry now, spread over a few ms: every waiter heard the same message,
   * and attempts that all start together split the votes. */
  redlock__lock_timer(l, (int64_t)(redlock__prng_next(&c->prng) % 4));
}

/* The channels a waiter listens on: each key's; a read-write handle also
 * its plain key's (a plain holder of the name keeps it out too, and
 * publishes there: scripts.c). */
static unsigned wait_channels(const redlock_lock_t *l) {
  return REDLOCK__KIND_IS_RW(l->kind) ? 2 : l->nkeys;
}

/* Channel k's name: each key's; a read-write handle's plain key; a
 * semaphore's limit record (every permit's release publishes there). */
static const char *wait_channel(const redlock_lock_t *l, unsigned k,
                                size_t *len) {
  if (l->sem != NULL) {
    *len = l->sem->rec_len;
    return l->sem->rec;
  }
  if (k >= l->nkeys) {
    *len = l->keylen - 3;
    return l->key;
  }
  *len = l->keylens[k];
  return l->keys[k];
}

static void acquire_wait(redlock_lock_t *l) {
  redlock_client_t *c = l->client;
  unsigned k, n = wait_channels(l);
  if (l->waiting)
    return;
  if (l->waiters == NULL) {
    l->waiters = redlock__calloc(n, sizeof(*l->waiters));
    if (l->waiters == NULL)
      return;   /* the retry timer still runs */
  }
  for (k = 0; k < n; k++) {
    size_t len;
    const char *name = wait_channel(l, k, &len);
    l->waiters[k].cb = on_wake;
    l->waiters[k].owner = l;
    if (redlock__wake_add(&c->wake, &l->waiters[k], name, len) != 0)
      break;
  }
  l->waiting = 1;
}

void redlock__acquire_unwait(redlock_lock_t *l) {
  unsigned k, n = wait_channels(l);
  if (!l->waiting)
    return;
  for (k = 0; k < n; k++)
    redlock__wake_remove(&l->client->wake, &l->waiters[k]);
  l->waiting = 0;
}

/* ---- attempts ------------------------------------------------------------ */

static redlock__cmd set_cmd(const redlock_lock_t *l) {
  const char *old[REDLOCK__STALE_PER_KEY];
  if (l->kind != REDLOCK__KIND_PLAIN)
    return redlock__kind_of(l)->acquire;
  if (l->want_fence)
    return REDLOCK__CMD_FENCED_ACQUIRE;
  /* Keys of our own may linger (issue 14): take them over. */
  return redlock__stale_tokens(l, old) > 0 ? REDLOCK__CMD_TAKEOVER
                                           : REDLOCK__CMD_SET_NX;
}

/* Ends the acquisition with `status` (no more attempts). */
static void acquire_fail(redlock_lock_t *l, int status) {
  /* A read-write waiter that gives up withdraws its place: those it kept
   * out may come in. Between attempts it stays: that is what keeps either
   * side from starving the other. */
  redlock__lock_withdraw(l, NULL, 0);
  redlock__lock_set_state(l, REDLOCK__LOCK_IDLE);
  redlock__lock_complete(l, status);
}

/* The event hook hears of each failed attempt that is retried (what the
 * acquisition waits for). The hook may cancel or free the lock, or close
 * the client: completions inside it are deferred (in_api), and 0 says the
 * acquisition ended there. */
static int attempt_event(redlock_lock_t *l, int status) {
  redlock_client_t *c = l->client;
  redlock__round *r = l->round;
  redlock_result res;
  if (c->event_cb == NULL || r == NULL)
    return 1;
  memset(&res, 0, sizeof(res));
  res.status = status;
  res.attempts = l->attempts;
  res.n_nodes = c->n;
  res.elapsed_us = l->result_elapsed_us;
  res.nodes = r->res;
  res.quorum = c->quorum;
  res.yes = r->yes;
  res.no = r->no;
  res.err = r->err;
  c->in_api++;
  redlock__lock_event(l, REDLOCK_EV_ATTEMPT, &res);
  c->in_api--;
  return l->op == REDLOCK__OP_ACQUIRE &&
         l->timer_mode != REDLOCK__TIMER_DELIVER;
}

/* Waits `delay` ms for the next attempt, or ends the acquisition when that
 * attempt would start after the wait deadline. The wait is kept to the
 * millisecond: an attempt that would start after the deadline starts at
 * the deadline instead (it may end after it), and only when the deadline
 * has come does the acquisition end. */
static void schedule_retry(redlock_lock_t *l, int status, int64_t delay,
                           redlock__ns now) {
  redlock_client_t *c = l->client;
  redlock__ns next = now + (redlock__ns)delay * REDLOCK__NS_PER_MS;
  if (!c->closing && l->wait_deadline != 0 && next >= l->wait_deadline &&
      now + REDLOCK__NS_PER_MS <= l->wait_deadline) {
    /* The last attempt: at the deadline, the ms rounded down (it may
     * start before it and end after it). Nothing follows it: it starts
     * less than a ms before the deadline, since the timer queue never
     * runs early (tq.c, invariant 4), so it ends with less than a ms
     * left (the branch below). */
    delay = (int64_t)((l->wait_deadline - now) / REDLOCK__NS_PER_MS);
    next = now + (redlock__ns)delay * REDLOCK__NS_PER_MS;
  } else if (!c->closing && l->wait_deadline != 0 && next > l->wait_deadline &&
             now < l->wait_deadline) {
    /* Less than a millisecond left: no attempt, but no end before the
     * deadline either. The round stays for the result's votes. */
    l->end_at_deadline = 1;
    l->retry_status = status;
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_RETRY,
                                 redlock__acquire_attempt);
    redlock__lock_timer(l, 1);
    return;
  }
  if (c->closing) {
    acquire_fail(l, REDLOCK_ECANCELED);   /* as in retry_or_fail */
    return;
  }
  if (l->wait_deadline != 0 && next > l->wait_deadline) {
    c->lst.acquire_timeouts++;
    acquire_fail(l, REDLOCK_ETIMEDOUT);   /* the wait deadline ended it */
    return;
  }
  redlock__lock_drop_round(l);
  redlock__lock_set_timer_mode(l, REDLOCK__TIMER_RETRY,
                                 redlock__acquire_attempt);
  redlock__lock_timer(l, delay);
}

/* Spread over a few ms: waiters that retry on the same event (a release
 * message, the holder's expiry) would split the votes if they all started
 * in the same ms. */
static int64_t spread_ms(redlock_client_t *c) {
  return (int64_t)(redlock__prng_next(&c->prng) % 4);
}

/* From a PTTL round: ms from `now` until a quorum of masters can be free
 * of the keys that refused us (each key's expiry as the master reported
 * it, +1 ms: PTTL rounds down), or -1 when that cannot be known (keys
 * without expiry, masters that did not answer). */
static int64_t until_quorum_free(const redlock__round *r, unsigned quorum,
                                 redlock__ns now) {
  const redlock_client_t *c = r->client;
  redlock__ns exp[REDLOCK_MAX_SERVERS];
  unsigned free_now = 0, k = 0, i, j, need;
  for (i = 0; i < c->n; i++) {
    const redlock_node_result *res = &r->res[i];
    if (res->vote != REDLOCK_VOTE_YES)
      continue;   /* no answer: unknown */
    if (res->pttl_ms == -2) {
      free_now++;
    } else if (res->pttl_ms >= 0) {
      /* The master measured it when it answered. */
      redlock__ns at = r->start +
                       (redlock__ns)res->latency_us * REDLOCK__NS_PER_US;
      exp[k++] = at + (redlock__ns)(res->pttl_ms + 1) * REDLOCK__NS_PER_MS;
    }
  }
  if (free_now >= quorum)
    return 0;
  need = quorum - free_now;
  if (need > k)
    return -1;
  for (i = 1; i < k; i++)   /* insertion sort: k <= 64 */
    for (j = i; j > 0 && exp[j - 1] > exp[j]; j--) {
      redlock__ns t = exp[j];
      exp[j] = exp[j - 1];
      exp[j - 1] = t;
    }
  if (exp[need - 1] <= now)
    return 0;
  return (int64_t)((exp[need - 1] - now + REDLOCK__NS_PER_MS - 1) /
                   REDLOCK__NS_PER_MS);
}

/* The PTTL round is over (all answered, its grace ran out, or a release
 * message came): the next attempt at the expiry if that is sooner than the
 * retry delay. */
static void pttl_finish(redlock_lock_t *l, redlock__round *r, int reached,
                        redlock__ns now) {
  redlock_client_t *c = l->client;
  int64_t delay = l->next_delay_ms;
  int64_t until = reached ? until_quorum_free(r, c->quorum, now) : -1;
  if (l->timer_mode == REDLOCK__TIMER_PTTL) {
    redlock__lock_timer_stop(l);
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
  }
  /* The result keeps showing the refused attempt's votes. */
  redlock__round_stop(r);
  redlock__lock_drop_round(l);
  l->round = l->refused;
  l->refused = NULL;
  if (l->woken) {
    l->woken = 0;   /* a release was heard meanwhile */
    delay = spread_ms(c);
  } else if (until >= 0 && until < delay) {
    delay = until + spread_ms(c);
  }
  schedule_retry(l, l->retry_status, delay, now);
}

static void on_pttl_decided(redlock__round *r, redlock__round_state st,
                            redlock__ns now) {
  redlock_lock_t *l = r->lock;
  if (st == REDLOCK__ROUND_PENDING) {
    /* A quorum answered: wait for the others as long again (+1 ms), not
     * for a hung master's command timeout. */
    uint64_t grace = (now - r->start) / REDLOCK__NS_PER_MS + 1;
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_PTTL,
                                 redlock__acquire_pttl_grace);
    redlock__lock_timer(l, (int64_t)grace);
    return;
  }
  pttl_finish(l, r, st == REDLOCK__ROUND_REACHED, now);
}

void redlock__acquire_pttl_grace(redlock_lock_t *l) {
  redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
  if (l->round != NULL && l->refused != NULL)
    pttl_finish(l, l->round, 1, redlock__sys_now(l->client->sys));
}

/* Step 5: after a failed attempt, another one or the end. A refused
 * attempt (masters said no: the lock is held) first asks the masters when
 * the holder's keys expire (PTTL): the next attempt comes at that moment
 * if it is earlier than the retry delay, so a standby takes over a dead
 * holder's lock as it expires, not at its next poll. The retry delay stays
 * the bound: a holder may release early without a message. */
static void retry_or_fail(redlock_lock_t *l, int status, redlock__ns now) {
  redlock_client_t *c = l->client;
  int64_t delay = redlock__retry_delay_ms(
      l->retry_delay_ms, l->retry_jitter_ms, redlock__prng_next(&c->prng));
  int refused = l->round != NULL && l->round->no > 0;
  if (status == REDLOCK_ETAKEN)
    c->lst.taken++;
  else if (status == REDLOCK_ENOQUORUM)
    c->lst.noquorum++;
  else if (status == REDLOCK_EEXPIRED)
    c->lst.expired++;
  if (status == REDLOCK_ELIMIT) {
    /* A semaphore's limit differs on the masters: waiting changes
     * nothing (redlock_semaphore_set_limit does). */
    acquire_fail(l, status);
    return;
  }
  if (c->closing) {
    /* The client's close ends the acquisition (an attempt decided while
     * the client's other members were being aborted): ECANCELED, as
     * theirs and as redlock_client_close() promises, not this attempt's
     * status (a caller that waits minutes is not told the lock is taken).
     * The result keeps the attempt's votes. */
    acquire_fail(l, REDLOCK_ECANCELED);
    return;
  }
  if (l->wait_deadline == 0 && l->attempts > l->max_retries) {
    /* A semaphore's: its permit was taken but a quorum listed another
     * free. Its one try (wait 0) is a try for any free permit, not for
     * the one picked blindly: that one still, at most K times. */
    if (!(redlock__sem_free_quorum(l) && l->sem->hops < l->sem->limit)) {
      acquire_fail(l, status);
      return;
    }
    l->sem->hops++;
  }
  if (!attempt_event(l, status))
    return;   /* the hook canceled or freed it */
  if (c->closing) {
    acquire_fail(l, REDLOCK_ECANCELED);   /* the hook closed the client */
    return;
  }
  /* Held by someone else (a master said no): listen for its release; the
   * timer stays as the fallback. */
  if (l->wake && refused)
    acquire_wait(l);
  if (redlock__sem_free_quorum(l)) {
    /* The permit asked for was taken, but a quorum listed another one
     * free: that one at once (semaphore.c picks it). */
    l->woken = 0;
    schedule_retry(l, status, spread_ms(c), now);
    return;
  }
  if (l->woken) {
    /* A release was heard while this attempt was in flight. */
    l->woken = 0;
    schedule_retry(l, status, spread_ms(c), now);
    return;
  }
  /* (Not for read-write locks: the hash's ttl is its latest field's,
   * waiters' places included; it says nothing of when owners leave.) */
  if (refused && delay > 0 && !REDLOCK__KIND_IS_RW(l->kind) &&
      l->sem == NULL) {
    l->refused = l->round;
    l->round = NULL;
    l->retry_status = status;
    l->next_delay_ms = delay;
    redlock__lock_set_phase(l, REDLOCK__PHASE_PTTL);
    if (redlock__lock_round(l, l->kind == REDLOCK__KIND_MULTI
                                   ? REDLOCK__CMD_MULTI_PTTL
                                   : REDLOCK__CMD_PTTL,
                            l->ttl_ms, on_pttl_decided, NULL) != NULL)
      return;
    l->round = l->refused;   /* out of memory: the plain delay */
    l->refused = NULL;
  }
  schedule_retry(l, status, delay, now);
}

static void grant(redlock_lock_t *l, redlock__ns deadline, int64_t left) {
  l->client->lst.grants++;
  redlock__lock_set_state(l, REDLOCK__LOCK_HELD);
  l->valid_until = deadline;
  l->holds = 1;
  l->lost = 0;
  l->result_validity_ms = left / (int64_t)REDLOCK__NS_PER_MS;
  if (l->auto_extend)
    redlock__wd_arm_renewal(l);
  redlock__lock_complete(l, 0);
}

static void on_fence_decided(redlock__round *r, redlock__round_state st,
                             redlock__ns now) {
  redlock_lock_t *l = r->lock;
  redlock__ns deadline =
      redlock__lock_deadline(l, l->acquire_start, l->ttl_ms);
  int64_t left = redlock__validity_left(deadline, now);
  if (st == REDLOCK__ROUND_REACHED && left > 0) {
    l->fence = (uint64_t)r->ttl_ms;
    grant(l, deadline, left);
    return;
  }
  /* The first round's votes are gone: release on every master (it held
   * the lock: waiters are told). */
  redlock__lock_cleanup(l, NULL, REDLOCK__ARGV_PUTBACK);
  retry_or_fail(l, st == REDLOCK__ROUND_REACHED ? REDLOCK_EEXPIRED
                                                : REDLOCK_ENOQUORUM,
                now);
}

/* A master said the semaphore's limit differs from the handle's. */
static int limit_differs(const redlock__round *r) {
  unsigned i;
  for (i = 0; i < r->client->n; i++)
    if (r->res[i].error == REDLOCK_ELIMIT)
      return 1;
  return 0;
}

static void on_set_decided(redlock__round *r, redlock__round_state st,
                           redlock__ns now) {
  redlock_lock_t *l = r->lock;
  redlock__ns deadline =
      redlock__lock_deadline(l, l->acquire_start, l->ttl_ms);
  int64_t left = redlock__validity_left(deadline, now);
  if (st == REDLOCK__ROUND_REACHED && left > 0) {
    if (l->want_fence) {
      /* Fencing, second round: raise the counter to T where we hold the
       * key; a quorum of them makes T visible to any later holder. The
       * validity still counts from the first round. */
      redlock__round *first = r;
      l->round = NULL;
      redlock__lock_set_phase(l, REDLOCK__PHASE_FENCE);
      if (redlock__lock_round(l, REDLOCK__CMD_FENCE, first->value_max,
                              on_fence_decided, first) == NULL) {
        l->round = first;
        redlock__lock_cleanup(l, NULL, 0);
        acquire_fail(l, REDLOCK_ENOMEM);
        return;
      }
      redlock__round_detach(first);
      return;
    }
    /* A read-write waiter's place where a master refused (or has not
     * answered yet) must not outlive the wait; a reader that waited
     * keeps its entitlement where it was admitted, until now, and opens
     * the read phase now. */
    if (l->kind == REDLOCK__KIND_READ && l->attempts > 1)
      redlock__lock_withdraw(l, NULL,
                             REDLOCK__ARGV_QUIET | REDLOCK__ARGV_GRANTED);
    else if (r->yes < l->client->n)
      redlock__lock_withdraw(l, r, REDLOCK__ARGV_QUIET);
    grant(l, deadline, left);
    return;
  }
  /* Never held (no quorum): nobody waited for this owner, so no message;
   * a quorum whose validity had run out was seen as held: tell. */
  redlock__lock_cleanup(l, r,
                        (st != REDLOCK__ROUND_REACHED ? REDLOCK__ARGV_QUIET
                                                      : 0u) |
                            REDLOCK__ARGV_PUTBACK);
  retry_or_fail(l, st == REDLOCK__ROUND_REACHED   ? REDLOCK_EEXPIRED
                   : limit_differs(r)             ? REDLOCK_ELIMIT
                   : st == REDLOCK__ROUND_BLOCKED ? REDLOCK_ETAKEN
                                                  : REDLOCK_ENOQUORUM,
                now);
}

static void attempt_set(redlock_lock_t *l) {
  int rc = l->token_suffix == NULL
               ? 0
               : redlock__lock_token_room(
                     l, REDLOCK__TOKEN_HEX + l->token_suffix_len);
  if (rc == 0)
    rc = redlock__token_new(l->client->sys, l->token);
  if (rc == 0 && l->intent[0] == '\0' && REDLOCK__KIND_IS_RW(l->kind))
    rc = redlock__token_new(l->client->sys, l->intent);   /* the waiter's id */
  if (rc != 0) {
    acquire_fail(l, rc);
    return;
  }
  if (l->token_suffix != NULL)   /* "<hex>.<identity>" (election.c) */
    memcpy(l->token + REDLOCK__TOKEN_HEX, l->token_suffix,
           l->token_suffix_len + 1);
  if (l->sem != NULL)
    redlock__sem_pick(l);   /* the permit this attempt asks for */
  l->fence = 0;
  l->woken = 0;   /* this attempt sees any release heard before it */
  l->client->lst.attempts++;
  redlock__lock_set_phase(l, REDLOCK__PHASE_SET);
  l->acquire_start = redlock__sys_now(l->client->sys);
  if (redlock__lock_round(l, set_cmd(l), l->ttl_ms, on_set_decided, NULL) ==
      NULL)
    acquire_fail(l, REDLOCK_ENOMEM);
}

static void on_raise_decided(redlock__round *r, redlock__round_state st,
                             redlock__ns now) {
  redlock_lock_t *l = r->lock;
  if (st == REDLOCK__ROUND_REACHED) {
    redlock__lock_drop_round(l);
    attempt_set(l);
    return;
  }
  retry_or_fail(l, REDLOCK_ENOQUORUM, now);
}

/* The wait deadline's timer while settling (below), if armed. */
static void on_settle_deadline(redlock_lock_t *l);
static void settle_deadline_stop(redlock_lock_t *l) {
  if (l->timer_fn == on_settle_deadline) {
    redlock__lock_timer_stop(l);
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
  }
}

static void on_settled(redlock__guard_waiter *w) {
  redlock_lock_t *l = REDLOCK__CONTAINER_OF(w, redlock_lock_t, settle);
  l->settling = 0;
  settle_deadline_stop(l);
  redlock__acquire_attempt(l);
}

/* The wait deadline came while a new client's masters were still making
 * their first connections: the acquisition ends by its deadline, not by
 * the connect timeout (found by redlock-sim: a fresh client, one master
 * stopped, a 117 ms wait that took the 250 ms connect timeout). */
static void on_settle_deadline(redlock_lock_t *l) {
  if (!l->settling)
    return;
  if (redlock__sys_now(l->client->sys) < l->wait_deadline) {
    /* The queue's ms were rounded down: once more. */
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_RETRY, on_settle_deadline);
    redlock__lock_timer(l, 1);
    return;
  }
  redlock__guard_unwait(&l->settle);
  l->settling = 0;
  l->client->lst.acquire_timeouts++;
  acquire_fail(l, REDLOCK_ETIMEDOUT);
}

void redlock__acquire_attempt(redlock_lock_t *l) {
  redlock__guard *g = &l->client->guard;
  if (l->end_at_deadline) {
    /* The wait deadline has come (schedule_retry); a timer that ran a
     * little early (the loop's cached time) waits once more. */
    if (redlock__sys_now(l->client->sys) < l->wait_deadline) {
      redlock__lock_set_timer_mode(l, REDLOCK__TIMER_RETRY,
                                 redlock__acquire_attempt);
      redlock__lock_timer(l, 1);
      return;
    }
    l->end_at_deadline = 0;
    l->client->lst.acquire_timeouts++;
    acquire_fail(l, REDLOCK_ETIMEDOUT);
    return;
  }
  redlock__lock_drop_round(l);
  if (g->mode_ms == 0 && !g->closing && !redlock__guard_settled(g)) {
    /* A new client: which masters hold the ttl record is known once each
     * made its first connection (bounded by the connect deadline). */
    l->settling = 1;
    l->settle.cb = on_settled;
    redlock__guard_wait_settled(g, &l->settle);
    if (l->wait_deadline != 0) {
      redlock__ns now = redlock__sys_now(l->client->sys);
      redlock__lock_set_timer_mode(l, REDLOCK__TIMER_RETRY,
                                   on_settle_deadline);
      redlock__lock_timer(l, l->wait_deadline > now
                                 ? (int64_t)((l->wait_deadline - now) /
                                             REDLOCK__NS_PER_MS)
                                 : 0);
    }
    return;
  }
  l->attempts++;
  if (redlock__guard_needs_raise(g, l->ttl_ms)) {
    if (g->mode_ms != 0) {
      redlock__guard_raise_async(g, l->ttl_ms);   /* best effort */
      attempt_set(l);
      return;
    }
    /* Record the ttl for the restart guard first (guard.c): a quorum
     * holds it before any SET of this ttl can land. */
    redlock__lock_set_phase(l, REDLOCK__PHASE_RAISE);
    if (redlock__lock_round(l, REDLOCK__CMD_MAXTTL_RAISE, l->ttl_ms,
                            on_raise_decided, NULL) == NULL)
      acquire_fail(l, REDLOCK_ENOMEM);
    return;
  }
  attempt_set(l);
}

void redlock__acquire_abort(redlock_lock_t *l) {
  redlock__acquire_unwait(l);
  if (l->refused != NULL) {
    /* Cancelled while asking when the holder expires: the result shows
     * the refused attempt. */
    if (l->round != NULL)
      redlock__round_stop(l->round);
    redlock__lock_drop_round(l);
    l->round = l->refused;
    l->refused = NULL;
  }
  if (l->settling) {
    redlock__guard_unwait(&l->settle);
    l->settling = 0;
    settle_deadline_stop(l);
  }
  if (l->state == REDLOCK__LOCK_ACQUIRING) {
    /* Half-acquired or between attempts: release whatever this token may
     * have set (and a read-write waiter's place). */
    redlock__lock_cleanup(l, NULL, 0);
    redlock__lock_withdraw(l, NULL, 0);
    redlock__lock_set_state(l, REDLOCK__LOCK_IDLE);
  }
}

/* ---- the public call ----------------------------------------------------- */

/* What lock.c's operations (cancel, free, the close's abort, a user's
 * extend, a delivery) need of the acquisition and its watchdog. */
static const redlock__lock_above above = {
    redlock__acquire_abort,
    redlock__acquire_unwait,
    redlock__wd_after_user_extend,
};

/* opts.holder: the suffix of the tokens of this acquisition's attempts
 * (".<holder>"), in a buffer of the handle's; NULL clears it. An
 * election's handle has its identity's suffix already: no other. */
static int take_holder(redlock_lock_t *l, const char *holder) {
  size_t len;
  if (l->token_suffix != NULL && l->token_suffix != l->holder_buf) {
    if (holder == NULL)
      return 0;
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: opts.holder on an "
                         "election's lock (its identity names its holder)");
  }
  if (holder == NULL) {
    l->token_suffix = NULL;
    return 0;
  }
  len = strnlen(holder, REDLOCK_MAX_HOLDER + 1);
  if (len == 0 || len > REDLOCK_MAX_HOLDER)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: opts.holder must be 1..%d "
                         "bytes", REDLOCK_MAX_HOLDER);
  if (l->holder_buf == NULL &&
      (l->holder_buf = redlock__malloc(REDLOCK_MAX_HOLDER + 2)) == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  l->holder_buf[0] = '.';
  memcpy(l->holder_buf + 1, holder, len + 1);
  l->token_suffix = l->holder_buf;
  l->token_suffix_len = len + 1;
  return 0;
}

int redlock_lock_acquire(redlock_lock_t *l, int64_t ttl_ms,
                         const redlock_acquire_opts *opts, redlock_lock_cb cb,
                         void *arg) {
  static const redlock_acquire_opts none;
  redlock_client_t *c;
  int rc = redlock__lock_usable(l, "redlock_lock_acquire");
  if (rc != 0)
    return rc;
  c = l->client;
  l->above = &above;
  if ((rc = redlock__check_ttl(l, ttl_ms, "redlock_lock_acquire")) != 0)
    return rc;
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: callback is NULL");
  if (opts == NULL)
    opts = &none;
  if (opts->fence && l->kind != REDLOCK__KIND_PLAIN && l->sem == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: fencing needs a single "
                         "plain resource (or a semaphore)");
  if (redlock_lock_is_held(l)) {
    if (!opts->reentrant)
      return redlock__fail(REDLOCK_EBUSY,
                           "redlock_lock_acquire: already held by this "
                           "handle; extend or release it (or acquire with "
                           "reentrant)");
    /* Re-entered by its owner: one more hold. A longer ttl than the
     * lock's is applied with an extend round; otherwise nothing goes on
     * the wire. */
    redlock__lock_set_op(l, REDLOCK__OP_ACQUIRE);
    l->cb = cb;
    l->cb_arg = arg;
    l->attempts = 0;
    redlock__lock_ref(l);
    c->in_api++;
    if (ttl_ms > l->ttl_ms) {
      l->attempts = 1;
      redlock__lock_reenter_extend(l, ttl_ms);
    } else {
      l->holds++;
      l->result_validity_ms = redlock_lock_validity_ms(l);
      redlock__lock_complete(l, 0);
    }
    c->in_api--;
    return 0;
  }
  if (opts->lost_margin_ms < 0 ||
      (opts->lost_margin_ms > 0 && opts->lost_margin_ms >= ttl_ms / 2))
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: lost_margin_ms %d must be "
                         "0..half the ttl (%lld ms)", opts->lost_margin_ms,
                         (long long)ttl_ms);
  if (opts->fence && l->sem == NULL && redlock__lock_fence_key(l) != 0)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  if ((rc = take_holder(l, opts->holder)) != 0)
    return rc;
  /* Any auto-extension still running (a lock that just ran out, its
   * extension hung) stops here: one owner of the main round. */
  l->auto_extend = 0;
  redlock__lock_renewal_stop(l);
  l->max_retries = opts->retry_count == 0  ? c->retry_count
                   : opts->retry_count < 0 ? 0
                                           : (unsigned)opts->retry_count;
  l->retry_delay_ms = opts->retry_delay_ms == 0  ? c->retry_delay_ms
                      : opts->retry_delay_ms < 0 ? 0
                                                 : opts->retry_delay_ms;
  l->retry_jitter_ms = opts->retry_jitter_ms == 0  ? c->retry_jitter_ms
                       : opts->retry_jitter_ms < 0 ? 0
                                                   : opts->retry_jitter_ms;
  l->wait_deadline = 0;
  l->end_at_deadline = 0;
  if (opts->wait_ms < 0)
    l->max_retries = 0;
  else if (opts->wait_ms > 0)
    l->wait_deadline = redlock__sys_now(l->client->sys) +
                       (redlock__ns)opts->wait_ms * REDLOCK__NS_PER_MS;
  if (l->wait_deadline != 0)
    redlock__lock_wait_end(l, (int64_t)opts->wait_ms + c->command_timeout_ms);
  l->want_fence = opts->fence != 0;
  l->wake = opts->wake != 0;
  l->auto_extend = opts->auto_extend != 0;
  l->heal = opts->heal != 0;
  l->lost_cb = opts->on_lost;
  l->lost_arg = opts->lost_arg;
  l->step_down_ms = opts->lost_margin_ms;
  l->lost = 0;
  l->fence = 0;
  l->holds = 0;
  redlock__lock_set_op(l, REDLOCK__OP_ACQUIRE);
  l->cb = cb;
  l->cb_arg = arg;
  l->result_validity_ms = 0;
  l->result_elapsed_us = 0;
  redlock__lock_ref(l);   /* the operation's */
  redlock__lock_set_owner(l, REDLOCK__OWNER_USER);
  l->ttl_ms = ttl_ms;
  l->op_ttl_ms = ttl_ms;
  l->attempts = 0;
  if (l->sem != NULL)
    l->sem->hops = 0;
  redlock__lock_set_state(l, REDLOCK__LOCK_ACQUIRING);
  /* No token until the first SET round: a cleanup before it (client
   * close during the ttl record's round) must not release an old or
   * adopted token. */
  l->token[0] = '\0';
  redlock__guard_used(&c->guard, ttl_ms);
  l->intent[0] = '\0';   /* made with the first attempt's token */
  c->in_api++;
  redlock__acquire_attempt(l);
  c->in_api--;
  return 0;
}
