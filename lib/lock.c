/* lock.c: the lock handle and its acquire / extend / release machines.
 *
 * Owns: one fan-out round per operation over every node, the early
 * decision (quorum.c), the validity (validity.c), retries (retry.c), the
 * release of failed attempts, and delivering each callback exactly once.
 * Does not own: connections and deadlines (node.c).
 *
 *   IDLE/RELEASED/FAILED/LOST --acquire--> ACQUIRING --quorum--> HELD
 *        ^                                    |  ^                 |
 *        |                 failed, no retries |  | retry timer     |
 *        +------------- FAILED <--------------+--+                 |
 *   HELD --extend ok--> HELD;  --extend: majority says not ours--> LOST
 *   HELD/LOST --release--> RELEASED
 *
 * Acquisition follows the Redlock spec:
 *  1. read the monotonic clock (round_start);
 *  2. send SET key token NX PX ttl to all N nodes in the same loop turn,
 *     each bounded by the per-node command timeout (node.c);
 *  3. decide as soon as yes >= quorum or yes + pending < quorum;
 *  4. validity = ttl - elapsed - (ttl * drift_factor + 2 ms); held only if
 *     validity > 0;
 *  5. on failure release on every node that said yes or has not answered
 *     (the release queues behind the SET on the same connection), then
 *     retry after a random delay with a fresh token.
 *
 * Lifetime: a handle is referenced by the user, by the operation in flight
 * and by every request in flight. Its memory (one block: handle, per-node
 * results, key) is freed when the last reference goes and its timer is
 * closed, so late replies are always consumed safely. */
#include <stdio.h>
#include <string.h>

#include "common.h"

enum { TIMER_IDLE = 0, TIMER_RETRY, TIMER_DEFER, TIMER_LOCAL };

static void lock_deliver(redlock_lock_t *l);

static void on_lock_closed(uv_handle_t *h) {
  redlock_lock_t *l = h->data;
  redlock_client_t *c = l->client;
  if (--l->handles_open > 0)
    return;
  redlock__queue_remove(&l->link);
  redlock__free(l);
  redlock__client_maybe_finish(c);
}

static void lock_unref(redlock_lock_t *l) {
  REDLOCK__ASSERT(l->refs > 0);
  if (--l->refs == 0) {
    uv_close((uv_handle_t *)&l->timer, on_lock_closed);
    uv_close((uv_handle_t *)&l->wd_timer, on_lock_closed);
  }
}

static char *errbuf(const redlock_lock_t *l, unsigned i) {
  return l->errbufs + (size_t)i * REDLOCK__ERRSTR_LEN;
}

static void set_result(redlock_lock_t *l, unsigned i, redlock_vote_t vote,
                       int error, const char *errstr, uint64_t latency_us) {
  redlock_node_result *r = &l->results[i];
  r->vote = vote;
  r->error = error;
  r->latency_us = latency_us;
  r->holder = "";
  redlock__strlcpy(errbuf(l, i), errstr, REDLOCK__ERRSTR_LEN);
  switch (vote) {
    case REDLOCK_VOTE_YES:
      l->yes++;
      break;
    case REDLOCK_VOTE_NO:
      l->no++;
      break;
    case REDLOCK_VOTE_ERR:
      l->err++;
      break;
    case REDLOCK_VOTE_NONE:
      break;
  }
}

static int lock_send(redlock_lock_t *l, unsigned i, redlock__req_kind kind) {
  redlock_client_t *c = l->client;
  redlock__req *req = redlock__req_get(c);
  int rc;
  if (req == NULL)
    return REDLOCK_ENOMEM;
  req->lock = l;
  req->kind = (uint8_t)kind;
  req->ttl_ms = kind == REDLOCK__REQ_FENCE ? (int64_t)l->fence_max
                                          : l->ttl_ms;
  req->heal = (uint8_t)l->heal;
  req->round = l->round;
  memcpy(req->token, l->token, sizeof(req->token));
  rc = redlock__node_submit(&c->nodes[i], req);
  if (rc != 0) {
    redlock__req_put(c, req);
    return rc;
  }
  l->refs++;
  return 0;
}

/* Step 2: one command per node, all in this loop turn (the adapter writes
 * them together just before the loop blocks). */
static void lock_fanout(redlock_lock_t *l, redlock__req_kind kind) {
  redlock_client_t *c = l->client;
  unsigned i;
  l->round++;
  l->yes = 0;
  l->no = 0;
  l->err = 0;
  l->decided = 0;
  l->round_start = uv_hrtime();
  for (i = 0; i < c->n; i++) {
    int rc;
    l->results[i].vote = REDLOCK_VOTE_NONE;
    l->results[i].error = 0;
    l->results[i].latency_us = 0;
    l->results[i].holder = "";
    l->results[i].pttl_ms = -2;
    errbuf(l, i)[0] = '\0';
    rc = lock_send(l, i, kind);
    if (rc != 0)
      set_result(l, i, REDLOCK_VOTE_ERR, rc,
                 c->nodes[i].errstr[0] ? c->nodes[i].errstr
                                       : "not connected",
                 0);
  }
}

/* Step 5: compare-and-delete our token wherever it may be set. */
static void lock_cleanup(redlock_lock_t *l, int everywhere) {
  redlock_client_t *c = l->client;
  unsigned i;
  for (i = 0; i < c->n; i++) {
    redlock_vote_t v = l->results[i].vote;
    /* A guarded master (ERESTARTED) did set the key: release it too. */
    if (everywhere || v == REDLOCK_VOTE_YES || v == REDLOCK_VOTE_NONE ||
        l->results[i].error == REDLOCK_ERESTARTED)
      (void)lock_send(l, i, REDLOCK__REQ_CLEANUP);
  }
}

static void on_lock_timer(uv_timer_t *t);
static void wd_after_extend(redlock_lock_t *l, int status, int internal);

static void lock_complete(redlock_lock_t *l, int status) {
  l->status = status;
  if (l->internal_op) {
    /* The watchdog's own extension: no user callback. */
    l->internal_op = 0;
    l->op = REDLOCK__OP_NONE;
    wd_after_extend(l, status, 1);
    lock_unref(l);
    return;
  }
  if (l->op == REDLOCK__OP_EXTEND && l->auto_extend)
    wd_after_extend(l, status, 0);
  if (l->client->in_api > 0) {
    /* Decided inside the public call: never call back from there. */
    l->timer_mode = TIMER_DEFER;
    uv_timer_start(&l->timer, on_lock_timer, 0, 0);
    return;
  }
  lock_deliver(l);
}

static void lock_attempt(redlock_lock_t *l);

static void on_lock_timer(uv_timer_t *t) {
  redlock_lock_t *l = t->data;
  int mode = l->timer_mode;
  l->timer_mode = TIMER_IDLE;
  if (mode == TIMER_RETRY) {
    lock_attempt(l);
  } else if (mode == TIMER_DEFER) {
    lock_deliver(l);
  } else if (mode == TIMER_LOCAL) {
    /* A reentrant hold taken or given back: nothing went on the wire. */
    redlock_lock_cb cb = l->defer_cb;
    void *arg = l->defer_arg;
    redlock_result res;
    l->defer_cb = NULL;
    l->defer_cb_set = 0;
    memset(&res, 0, sizeof(res));
    res.attempts = 0;
    res.n_nodes = l->client->n;
    res.validity_ms = redlock_lock_validity_ms(l);
    res.nodes = l->results;
    if (cb != NULL)
      cb(l, 0, &res, arg);
    lock_unref(l);
  }
}

/* Completes a call that needed no round, from the next loop turn. */
static void lock_defer_local(redlock_lock_t *l, redlock_lock_cb cb,
                             void *arg) {
  l->defer_cb = cb;
  l->defer_arg = arg;
  l->defer_cb_set = 1;
  l->refs++;
  l->timer_mode = TIMER_LOCAL;
  uv_timer_start(&l->timer, on_lock_timer, 0, 0);
}

static void lock_retry_or_fail(redlock_lock_t *l, int status,
                               redlock__ns now) {
  redlock_client_t *c = l->client;
  int64_t delay = redlock__retry_delay_ms(
      l->retry_delay_ms, l->retry_jitter_ms, redlock__prng_next(&c->prng));
  redlock__ns next = now + (redlock__ns)delay * REDLOCK__NS_PER_MS;
  if (!c->closing &&
      redlock__retry_allowed(l->attempts, l->max_retries, next,
                             l->wait_deadline)) {
    l->status = status;
    l->timer_mode = TIMER_RETRY;
    uv_timer_start(&l->timer, on_lock_timer, (uint64_t)delay, 0);
    /* Held by someone else (a master said no; with errors the round may
     * end as ENOQUORUM first): listen for its release, the timer stays
     * as the fallback. */
    if (l->wake && !l->wake_subscribed && l->no > 0 &&
        redlock__wake_want(c, l->key, l->keylen) == 0)
      l->wake_subscribed = 1;
    return;
  }
  l->state = REDLOCK__LOCK_FAILED;
  lock_complete(l, status);
}

static void lock_fence_round(redlock_lock_t *l);

/* Steps 3 and 4: decide as early as the votes allow. */
static void lock_check(redlock_lock_t *l, redlock__ns now) {
  redlock_client_t *c = l->client;
  redlock__round_state st =
      redlock__round_decide(c->n, c->quorum, l->yes, l->no, l->err);
  redlock__ns deadline;
  int64_t left;
  if (l->op == REDLOCK__OP_INSPECT) {
    /* A status read waits for every master. */
    if (l->yes + l->no + l->err < c->n)
      return;
    l->decided = 1;
    l->result_elapsed_us = (now - l->round_start) / REDLOCK__NS_PER_US;
    lock_complete(l, l->yes + l->no >= c->quorum ? 0 : REDLOCK_ENOQUORUM);
    return;
  }
  if (st == REDLOCK__ROUND_PENDING)
    return;
  l->decided = 1;
  l->result_elapsed_us = (now - l->round_start) / REDLOCK__NS_PER_US;
  l->result_validity_ms = 0;
  deadline = redlock__validity_deadline(
      l->op == REDLOCK__OP_ACQUIRE ? l->acquire_start : l->round_start,
      l->ttl_ms, c->drift_factor);
  left = redlock__validity_left(deadline, now);
  switch (l->op) {
    case REDLOCK__OP_ACQUIRE:
      if (l->want_fence && l->fence_phase == 0 &&
          st == REDLOCK__ROUND_REACHED && left > 0) {
        /* Fencing, second round: raise the counter to T where we hold
         * the key; a quorum of them makes T visible to any later holder.
         * The validity still counts from the first round. */
        lock_fence_round(l);
        lock_check(l, uv_hrtime());
        return;
      }
      if (st == REDLOCK__ROUND_REACHED && left > 0) {
        l->fence = l->want_fence ? l->fence_max : 0;
        l->holds = 1;
        l->state = REDLOCK__LOCK_HELD;
        l->valid_until = deadline;
        l->result_validity_ms = left / (int64_t)REDLOCK__NS_PER_MS;
        if (l->auto_extend)
          wd_after_extend(l, 0, 0);
        lock_complete(l, 0);
        return;
      }
      /* After the fence round the first round's votes are gone: release
       * on every master. */
      lock_cleanup(l, l->fence_phase == 1);
      lock_retry_or_fail(l, st == REDLOCK__ROUND_REACHED ? REDLOCK_EEXPIRED
                            : st == REDLOCK__ROUND_BLOCKED ? REDLOCK_ETAKEN
                                                           : REDLOCK_ENOQUORUM,
                         now);
      return;
    case REDLOCK__OP_EXTEND:
      if (st == REDLOCK__ROUND_REACHED && left > 0) {
        l->state = REDLOCK__LOCK_HELD;   /* also ends ADOPTED */
        l->valid_until = deadline;
        l->result_validity_ms = left / (int64_t)REDLOCK__NS_PER_MS;
        lock_complete(l, 0);
      } else if (st == REDLOCK__ROUND_REACHED) {
        lock_complete(l, REDLOCK_EEXPIRED);
      } else if (st == REDLOCK__ROUND_BLOCKED) {
        l->state = REDLOCK__LOCK_LOST;
        l->valid_until = 0;
        lock_complete(l, REDLOCK_ENOTHELD);
      } else {
        lock_complete(l, REDLOCK_ENOQUORUM);
      }
      return;
    case REDLOCK__OP_RELEASE:
      lock_complete(l, st == REDLOCK__ROUND_REACHED   ? 0
                       : st == REDLOCK__ROUND_BLOCKED ? REDLOCK_ENOTHELD
                                                      : REDLOCK_ENOQUORUM);
      return;
    case REDLOCK__OP_INSPECT:
    case REDLOCK__OP_NONE:
      return;   /* canceled: replies are only recorded */
  }
}

/* ---- auto-extension (the watchdog) ---------------------------------------
 *
 *   HELD --ttl/3 (- up to ttl/10)--> extend round --ok--> HELD (again)
 *                       | majority says not ours --> lost(ENOTHELD)
 *                       | failed (no quorum, expired) --> retry in
 *                       |   min(ttl/10 clamped to 5..500 ms, validity left)
 *   validity ran out before any success --> lost(EEXPIRED)
 *
 * The watchdog's extension is an ordinary extend round marked internal.
 * A user release or extend supersedes it: the round number changes, so
 * its late votes are ignored, and on every master the release queues
 * behind the extension on the same connection, so the extension can never
 * land after the release. The lost callback fires once, only from the
 * watchdog's timer or round (never from inside an API call). */
static void on_wd_timer(uv_timer_t *t);

static void wd_arm(redlock_lock_t *l, int64_t ms) {
  if (ms < 1)
    ms = 1;
  uv_timer_start(&l->wd_timer, on_wd_timer, (uint64_t)ms, 0);
}

static int64_t wd_retry_ms(const redlock_lock_t *l) {
  int64_t v = l->ttl_ms / 10;
  return v < 5 ? 5 : v > 500 ? 500 : v;
}

static void wd_lost(redlock_lock_t *l, int reason) {
  uv_timer_stop(&l->wd_timer);
  l->state = REDLOCK__LOCK_LOST;
  l->valid_until = 0;
  if (l->lost)
    return;
  l->lost = 1;
  if (l->lost_cb != NULL && !l->user_freed)
    l->lost_cb(l, reason, l->lost_arg);
}

/* Stops the watchdog and drops its round in flight, if any. */
static void wd_stop(redlock_lock_t *l) {
  uv_timer_stop(&l->wd_timer);
  if (l->internal_op) {
    l->internal_op = 0;
    l->op = REDLOCK__OP_NONE;
    l->round++;   /* its late votes no longer count */
    lock_unref(l);
  }
}

/* A user operation takes the lock's single round: drop the watchdog's
 * extension in flight, and look again soon if auto-extension is on. */
static void wd_cancel_round(redlock_lock_t *l) {
  if (!l->internal_op)
    return;
  wd_stop(l);
  if (l->auto_extend)
    wd_arm(l, wd_retry_ms(l));
}

static void wd_after_extend(redlock_lock_t *l, int status, int internal) {
  int64_t left_ms;
  if (status == 0) {
    /* ttl/3, minus up to a tenth of the ttl at random: locks taken
     * together do not all renew in the same loop turn. */
    int64_t spread = l->ttl_ms / 10 + 1;
    wd_arm(l, l->ttl_ms / 3 -
                  (int64_t)(redlock__prng_next(&l->client->prng) %
                            (uint64_t)spread));
    return;
  }
  if (status == REDLOCK_ENOTHELD) {
    if (internal) {
      wd_lost(l, REDLOCK_ENOTHELD);
    } else {
      uv_timer_stop(&l->wd_timer);
      l->lost = 1;   /* the caller learns it from its own callback */
    }
    return;
  }
  left_ms = redlock__validity_left(l->valid_until, uv_hrtime()) /
            (int64_t)REDLOCK__NS_PER_MS;
  if (l->state != REDLOCK__LOCK_HELD || left_ms <= 0) {
    if (internal)
      wd_lost(l, REDLOCK_EEXPIRED);
    return;
  }
  /* Retry soon; fire at the end of the validity at the latest (+1 ms so
   * the timer cannot run just before it). */
  wd_arm(l, wd_retry_ms(l) < left_ms ? wd_retry_ms(l) : left_ms + 1);
}

static void on_wd_timer(uv_timer_t *t) {
  redlock_lock_t *l = t->data;
  redlock__ns now = uv_hrtime();
  int64_t left;
  if (l->state != REDLOCK__LOCK_HELD || !l->auto_extend || l->user_freed ||
      l->client->closing)
    return;
  left = redlock__validity_left(l->valid_until, now);
  if (left <= 0) {
    wd_stop(l);   /* an extension still in flight no longer matters */
    wd_lost(l, REDLOCK_EEXPIRED);
    return;
  }
  if (l->op != REDLOCK__OP_NONE) {
    /* The user's own extend is in flight: look again soon. */
    int64_t left_ms = left / (int64_t)REDLOCK__NS_PER_MS;
    wd_arm(l, wd_retry_ms(l) < left_ms ? wd_retry_ms(l) : left_ms + 1);
    return;
  }
  l->op = REDLOCK__OP_EXTEND;
  l->internal_op = 1;
  l->cb = NULL;
  l->refs++;
  l->attempts = 1;
  lock_fanout(l, REDLOCK__REQ_EXTEND);
  lock_check(l, now);
  /* While it is in flight (e.g. queued behind a reconnect), make sure the
   * lost signal still fires when the validity runs out. */
  if (l->internal_op)
    wd_arm(l, left / (int64_t)REDLOCK__NS_PER_MS + 1);
}

/* The fence round goes to the masters that said yes; the others count as
 * errors at once (we do not hold the key there). */
static void lock_fence_round(redlock_lock_t *l) {
  redlock_client_t *c = l->client;
  int yes[REDLOCK_MAX_SERVERS];
  unsigned i;
  for (i = 0; i < c->n; i++)
    yes[i] = l->results[i].vote == REDLOCK_VOTE_YES;
  l->fence_phase = 1;
  l->round++;
  l->yes = 0;
  l->no = 0;
  l->err = 0;
  l->decided = 0;
  l->round_start = uv_hrtime();
  for (i = 0; i < c->n; i++) {
    int rc = REDLOCK_ENOTHELD;
    l->results[i].vote = REDLOCK_VOTE_NONE;
    l->results[i].error = 0;
    l->results[i].latency_us = 0;
    errbuf(l, i)[0] = '\0';
    if (yes[i])
      rc = lock_send(l, i, REDLOCK__REQ_FENCE);
    if (rc != 0)
      set_result(l, i, REDLOCK_VOTE_ERR, rc,
                 yes[i] ? "not connected" : "no key of ours here", 0);
  }
}

static void lock_attempt(redlock_lock_t *l) {
  int rc;
  l->attempts++;
  rc = redlock__token_new(l->token);
  if (rc != 0) {
    l->state = REDLOCK__LOCK_FAILED;
    lock_complete(l, rc);
    return;
  }
  l->fence_phase = 0;
  l->fence_max = 0;
  l->fence = 0;
  lock_fanout(l, l->want_fence ? REDLOCK__REQ_ACQUIRE_FENCED
                               : REDLOCK__REQ_ACQUIRE);
  l->acquire_start = l->round_start;
  lock_check(l, uv_hrtime());
}

void redlock__lock_on_vote(redlock__req *req, redlock_vote_t vote, int error,
                           const char *errstr, int64_t pttl,
                           redlock__ns now) {
  redlock_lock_t *l = req->lock;
  unsigned idx = req->node->index;
  redlock__ns sent = req->sent_ns;
  int counts = req->kind != REDLOCK__REQ_CLEANUP && req->round == l->round;
  int req_kind = req->kind;
  redlock_client_t *c = l->client;
  char why[128];
  if (counts && vote == REDLOCK_VOTE_YES &&
      (req->kind == REDLOCK__REQ_ACQUIRE ||
       req->kind == REDLOCK__REQ_ACQUIRE_FENCED) &&
      c->restart_guard_ms >= 0) {
    /* Restart guard: a master that may have lost its keys recently must
     * not help grant a lock that someone else may still hold. */
    int64_t window = c->restart_guard_ms > 0 ? c->restart_guard_ms
                                             : c->max_ttl_ms;
    int64_t age = redlock__node_restart_age_ms(req->node, now);
    if (age < window) {
      snprintf(why, sizeof(why),
               "restarted %lld ms ago (< %lld ms guard): not counted",
               (long long)age, (long long)window);
      vote = REDLOCK_VOTE_ERR;
      error = REDLOCK_ERESTARTED;
      errstr = why;
    }
  }
  redlock__req_put(c, req);
  if (counts && l->results[idx].vote == REDLOCK_VOTE_NONE) {
    set_result(l, idx, vote, error, errstr,
               (now - sent) / REDLOCK__NS_PER_US);
    if (vote == REDLOCK_VOTE_YES &&
        req_kind == REDLOCK__REQ_ACQUIRE_FENCED && pttl > 0 &&
        (uint64_t)pttl > l->fence_max)
      l->fence_max = (uint64_t)pttl;   /* the counter it returned */
    if (l->op == REDLOCK__OP_INSPECT && error == 0) {
      /* errstr carried the key's value: show it as the holder. */
      l->results[idx].holder = l->results[idx].errstr;
      l->results[idx].pttl_ms = pttl;
    }
    if (!l->decided)
      lock_check(l, now);
  }
  lock_unref(l);
}

static void lock_deliver(redlock_lock_t *l) {
  redlock_lock_cb cb = l->cb;
  void *arg = l->cb_arg;
  redlock_result res;
  if (l->wake_subscribed) {
    l->wake_subscribed = 0;
    redlock__wake_done(l->client, l->key, l->keylen);
  }
  l->cb = NULL;
  l->op = REDLOCK__OP_NONE;
  if (cb != NULL) {
    memset(&res, 0, sizeof(res));
    res.status = l->status;
    res.attempts = l->attempts;
    res.yes = l->yes;
    res.no = l->no;
    res.err = l->err;
    res.n_nodes = l->client->n;
    res.validity_ms = l->status == 0 ? l->result_validity_ms : 0;
    res.elapsed_us = l->result_elapsed_us;
    res.nodes = l->results;
    cb(l, l->status, &res, arg);
  }
  lock_unref(l);   /* the operation's reference */
}

/* One round of `kind` for `op` (extend, release, inspect): the callback
 * runs once, never from inside the caller's public call. */
static void lock_start_round(redlock_lock_t *l, redlock__op op,
                             redlock__req_kind kind, redlock_lock_cb cb,
                             void *arg) {
  l->op = op;
  l->cb = cb;
  l->cb_arg = arg;
  l->refs++;   /* the operation's */
  l->attempts = 1;
  l->client->in_api++;
  lock_fanout(l, kind);
  lock_check(l, uv_hrtime());
  l->client->in_api--;
}

/* ---- public API ----------------------------------------------------------- */

static int lock_usable(const redlock_lock_t *l, const char *fn) {
  if (l == NULL)
    return redlock__fail(REDLOCK_EINVAL, "%s: lock is NULL", fn);
  if (l->user_freed)
    return redlock__fail(REDLOCK_EINVAL, "%s: lock was freed", fn);
  if (l->client->closing)
    return redlock__fail(REDLOCK_ECANCELED, "%s: client is closing", fn);
  if ((l->op != REDLOCK__OP_NONE && !l->internal_op) || l->defer_cb_set)
    return redlock__fail(REDLOCK_EBUSY,
                         "%s: another operation is in flight", fn);
  return 0;
}

static int check_ttl(int64_t ttl_ms, const char *fn) {
  if (ttl_ms <= 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL,
                         "%s: ttl %lld ms out of range 1..%d", fn,
                         (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  return 0;
}

int redlock_lock_new_multi(redlock_client_t *c,
                           const void *const *resources, const size_t *lens,
                           size_t k, redlock_lock_t **out) {
  redlock_lock_t *l;
  size_t size;
  size_t keybytes = 0;
  size_t i;
  char *p;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_new: out is NULL");
  *out = NULL;
  if (c == NULL || resources == NULL || lens == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_new: client or resource is NULL");
  if (k == 0 || k > REDLOCK_MAX_RESOURCES)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_new_multi: %zu resources, want 1..%d",
                         k, REDLOCK_MAX_RESOURCES);
  if (c->closing)
    return redlock__fail(REDLOCK_ECANCELED,
                         "redlock_lock_new: client is closing");
  for (i = 0; i < k; i++) {
    if (resources[i] == NULL)
      return redlock__fail(REDLOCK_EINVAL,
                           "redlock_lock_new: resource %zu is NULL", i);
    if (lens[i] == 0)
      return redlock__fail(REDLOCK_EINVAL,
                           "redlock_lock_new: empty resource");
    if (lens[i] > REDLOCK_MAX_KEY - c->key_prefix_len)
      return redlock__fail(REDLOCK_EINVAL,
                           "redlock_lock_new: key longer than %d bytes",
                           REDLOCK_MAX_KEY);
    keybytes += c->key_prefix_len + lens[i] + 1;
  }
  /* One block: handle, per-node results, per-node error text, the key
   * table, the keys, and "<first key>:fence". */
  size = sizeof(*l) + c->n * sizeof(redlock_node_result) +
         c->n * REDLOCK__ERRSTR_LEN + k * (sizeof(char *) + sizeof(size_t)) +
         keybytes + c->key_prefix_len + lens[0] + 7;
  l = redlock__calloc(1, size);
  if (l == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  p = (char *)(l + 1);
  l->results = (redlock_node_result *)p;
  p += c->n * sizeof(redlock_node_result);
  l->keys = (char **)p;
  p += k * sizeof(char *);
  l->keylens = (size_t *)p;
  p += k * sizeof(size_t);
  l->errbufs = p;
  p += c->n * REDLOCK__ERRSTR_LEN;
  for (i = 0; i < k; i++) {
    l->keys[i] = p;
    if (c->key_prefix_len > 0)
      memcpy(p, c->key_prefix, c->key_prefix_len);
    memcpy(p + c->key_prefix_len, resources[i], lens[i]);
    l->keylens[i] = c->key_prefix_len + lens[i];
    p[l->keylens[i]] = '\0';
    p += l->keylens[i] + 1;
  }
  l->nkeys = (unsigned)k;
  l->key = l->keys[0];
  l->keylen = l->keylens[0];
  l->fence_key = p;   /* "<key>:fence" */
  memcpy(l->fence_key, l->key, l->keylen);
  memcpy(l->fence_key + l->keylen, ":fence", 7);
  l->fence_keylen = l->keylen + 6;
  for (unsigned j = 0; j < c->n; j++) {
    l->results[j].server = c->nodes[j].uri.display;
    l->results[j].errstr = errbuf(l, j);
  }
  l->client = c;
  l->refs = 1;   /* the user's */
  uv_timer_init(c->loop, &l->timer);
  l->timer.data = l;
  uv_timer_init(c->loop, &l->wd_timer);
  l->wd_timer.data = l;
  l->handles_open = 2;
  redlock__queue_insert_tail(&c->locks, &l->link);
  *out = l;
  return 0;
}

int redlock_lock_new(redlock_client_t *c, const void *resource, size_t len,
                     redlock_lock_t **out) {
  return redlock_lock_new_multi(c, &resource, &len, 1, out);
}

int redlock_rwlock_new(redlock_client_t *c, const void *resource, size_t len,
                       int write, redlock_lock_t **out) {
  char *name;
  const void *res;
  size_t n;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (resource == NULL || len == 0 || len > REDLOCK_MAX_KEY - 3)
    return redlock_lock_new(c, resource, len, out);   /* its messages */
  name = redlock__malloc(len + 3);
  if (name == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  memcpy(name, resource, len);
  memcpy(name + len, ":rw", 3);
  res = name;
  n = len + 3;
  rc = redlock_lock_new_multi(c, &res, &n, 1, out);
  redlock__free(name);
  if (rc == 0)
    (*out)->rw = write ? 2 : 1;
  return rc;
}

int redlock_lock_free(redlock_lock_t *l) {
  if (l == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_free: lock is NULL");
  if (l->user_freed)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_free: double free");
  if ((l->op != REDLOCK__OP_NONE && !l->internal_op) || l->defer_cb_set)
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_lock_free: an operation is in flight");
  l->auto_extend = 0;
  wd_stop(l);
  if (l->state == REDLOCK__LOCK_HELD) {
    l->client->in_api++;
    lock_cleanup(l, 1);
    l->client->in_api--;
    l->state = REDLOCK__LOCK_RELEASED;
    l->valid_until = 0;
  }
  l->user_freed = 1;
  lock_unref(l);
  return 0;
}

int redlock_lock_detach(redlock_lock_t *l) {
  if (l == NULL || l->user_freed)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_detach: bad lock");
  if ((l->op != REDLOCK__OP_NONE && !l->internal_op) || l->defer_cb_set)
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_lock_detach: an operation is in flight");
  l->auto_extend = 0;
  wd_stop(l);
  l->state = REDLOCK__LOCK_RELEASED;   /* nothing to release on free */
  l->valid_until = 0;
  return redlock_lock_free(l);
}

int redlock_lock_acquire(redlock_lock_t *l, int64_t ttl_ms,
                         const redlock_acquire_opts *opts, redlock_lock_cb cb,
                         void *arg) {
  static const redlock_acquire_opts none;
  redlock_client_t *c;
  int rc = lock_usable(l, "redlock_lock_acquire");
  if (rc != 0)
    return rc;
  c = l->client;
  if ((rc = check_ttl(ttl_ms, "redlock_lock_acquire")) != 0)
    return rc;
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: callback is NULL");
  if (opts == NULL)
    opts = &none;
  if (redlock_lock_is_held(l) && opts->reentrant) {
    /* Re-entered by its owner: one more hold, nothing on the wire. */
    l->holds++;
    lock_defer_local(l, cb, arg);
    return 0;
  }
  if (redlock_lock_is_held(l))
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_lock_acquire: already held by this handle;"
                         " extend or release it (or acquire with reentrant)");
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
  if (opts->wait_ms < 0)
    l->max_retries = 0;
  else if (opts->wait_ms > 0)
    l->wait_deadline =
        uv_hrtime() + (redlock__ns)opts->wait_ms * REDLOCK__NS_PER_MS;
  if (opts->fence && (l->nkeys > 1 || l->rw != 0))
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_acquire: fencing needs a single "
                         "plain resource");
  l->want_fence = opts->fence != 0;
  l->wake = opts->wake != 0;
  l->auto_extend = opts->auto_extend != 0;
  l->heal = opts->heal != 0;
  l->lost_cb = opts->on_lost;
  l->lost_arg = opts->lost_arg;
  l->lost = 0;
  l->op = REDLOCK__OP_ACQUIRE;
  l->cb = cb;
  l->cb_arg = arg;
  l->refs++;   /* the operation's */
  l->ttl_ms = ttl_ms;
  if (ttl_ms > c->max_ttl_ms)
    c->max_ttl_ms = ttl_ms;
  l->attempts = 0;
  l->state = REDLOCK__LOCK_ACQUIRING;
  l->valid_until = 0;
  c->in_api++;
  lock_attempt(l);
  c->in_api--;
  return 0;
}

int redlock_lock_extend(redlock_lock_t *l, int64_t ttl_ms, redlock_lock_cb cb,
                        void *arg) {
  int rc = lock_usable(l, "redlock_lock_extend");
  if (rc != 0)
    return rc;
  if ((rc = check_ttl(ttl_ms, "redlock_lock_extend")) != 0)
    return rc;
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_extend: callback is NULL");
  if (!redlock_lock_is_held(l) && l->state != REDLOCK__LOCK_ADOPTED)
    return redlock__fail(REDLOCK_ENOTHELD,
                         "redlock_lock_extend: the lock is not held "
                         "(never acquired, released, lost or expired)");
  l->ttl_ms = ttl_ms;
  wd_cancel_round(l);   /* the user's extension replaces the watchdog's */
  lock_start_round(l, REDLOCK__OP_EXTEND, REDLOCK__REQ_EXTEND, cb, arg);
  return 0;
}

int redlock_lock_release(redlock_lock_t *l, redlock_lock_cb cb, void *arg) {
  int rc = lock_usable(l, "redlock_lock_release");
  if (rc != 0)
    return rc;
  if (l->state != REDLOCK__LOCK_HELD && l->state != REDLOCK__LOCK_LOST &&
      l->state != REDLOCK__LOCK_ADOPTED)
    return redlock__fail(REDLOCK_ENOTHELD,
                         "redlock_lock_release: the lock is not held");
  if (l->state == REDLOCK__LOCK_HELD && l->holds > 1) {
    /* Not the last hold of a reentrant lock: it stays held. */
    l->holds--;
    lock_defer_local(l, cb, arg);
    return 0;
  }
  l->holds = 0;
  l->auto_extend = 0;
  wd_stop(l);   /* stop the extension first: it must not race the release */
  l->state = REDLOCK__LOCK_RELEASED;
  l->valid_until = 0;
  lock_start_round(l, REDLOCK__OP_RELEASE, REDLOCK__REQ_RELEASE, cb, arg);
  return 0;
}

int redlock_lock_inspect(redlock_lock_t *l, redlock_lock_cb cb, void *arg) {
  int rc = lock_usable(l, "redlock_lock_inspect");
  if (rc != 0)
    return rc;
  if (l->rw != 0)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_inspect: not for read-write locks");
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_inspect: callback is NULL");
  wd_cancel_round(l);
  lock_start_round(l, REDLOCK__OP_INSPECT, REDLOCK__REQ_INSPECT, cb, arg);
  return 0;
}

int redlock_lock_adopt(redlock_lock_t *l, const char *token) {
  size_t len;
  int rc = lock_usable(l, "redlock_lock_adopt");
  if (rc != 0)
    return rc;
  if (token == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_adopt: token NULL");
  len = strlen(token);
  if (len == 0 || len > REDLOCK__TOKEN_MAX)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_adopt: token must be 1..%d bytes",
                         REDLOCK__TOKEN_MAX);
  if (redlock_lock_is_held(l))
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_lock_adopt: this handle holds a lock");
  memcpy(l->token, token, len + 1);
  l->state = REDLOCK__LOCK_ADOPTED;
  l->valid_until = 0;
  l->lost = 0;
  return 0;
}

void redlock__lock_wake(redlock_client_t *c, const char *key,
                        size_t keylen) {
  redlock__queue *q;
  for (q = c->locks.next; q != &c->locks;) {
    redlock_lock_t *l = REDLOCK__CONTAINER_OF(q, redlock_lock_t, link);
    q = q->next;
    if (l->wake_subscribed && l->timer_mode == TIMER_RETRY &&
        l->keylen == keylen && memcmp(l->key, key, keylen) == 0) {
      /* Retry now, spread over a few ms: every waiter heard the same
       * message, and attempts that all start together split the votes. */
      l->timer_mode = TIMER_RETRY;
      uv_timer_start(&l->timer, on_lock_timer,
                     redlock__prng_next(&c->prng) % 4, 0);
    }
  }
}

void redlock__lock_abort(redlock_lock_t *l) {
  l->auto_extend = 0;
  wd_stop(l);
  if (l->defer_cb_set) {
    redlock_lock_cb cb = l->defer_cb;
    redlock_result res;
    uv_timer_stop(&l->timer);
    l->timer_mode = TIMER_IDLE;
    l->defer_cb = NULL;
    l->defer_cb_set = 0;
    memset(&res, 0, sizeof(res));
    res.status = REDLOCK_ECANCELED;
    res.n_nodes = l->client->n;
    res.nodes = l->results;
    if (cb != NULL)
      cb(l, REDLOCK_ECANCELED, &res, l->defer_arg);
    lock_unref(l);
  }
  if (l->op != REDLOCK__OP_NONE) {
    uv_timer_stop(&l->timer);
    l->timer_mode = TIMER_IDLE;
    if (l->op == REDLOCK__OP_ACQUIRE) {
      /* Half-acquired, held (decision not delivered yet) or between
       * attempts: release whatever this token may have set. */
      if (!l->decided || l->state == REDLOCK__LOCK_HELD)
        lock_cleanup(l, l->state == REDLOCK__LOCK_HELD);
      l->state = REDLOCK__LOCK_FAILED;
    }
    l->valid_until = l->state == REDLOCK__LOCK_HELD ? l->valid_until : 0;
    l->status = REDLOCK_ECANCELED;
    lock_deliver(l);
  }
  if (l->state == REDLOCK__LOCK_HELD) {
    lock_cleanup(l, 1);
    l->state = REDLOCK__LOCK_RELEASED;
    l->valid_until = 0;
  }
  if (!l->user_freed) {
    l->user_freed = 1;
    lock_unref(l);
  }
}

/* ---- getters -------------------------------------------------------------- */

int64_t redlock_lock_validity_ms(const redlock_lock_t *l) {
  int64_t left;
  if (l == NULL || l->state != REDLOCK__LOCK_HELD || l->valid_until == 0)
    return 0;
  left = redlock__validity_left(l->valid_until, uv_hrtime());
  return left > 0 ? left / (int64_t)REDLOCK__NS_PER_MS : 0;
}

int redlock_lock_is_held(const redlock_lock_t *l) {
  if (l == NULL || l->state != REDLOCK__LOCK_HELD || l->valid_until == 0)
    return 0;
  return redlock__validity_left(l->valid_until, uv_hrtime()) > 0;
}

unsigned redlock_lock_holds(const redlock_lock_t *l) {
  return l != NULL && l->state == REDLOCK__LOCK_HELD ? l->holds : 0;
}

uint64_t redlock_lock_fence(const redlock_lock_t *l) {
  return l != NULL ? l->fence : 0;
}

int redlock_lock_is_lost(const redlock_lock_t *l) {
  return l != NULL && l->lost;
}

const char *redlock_lock_token(const redlock_lock_t *l) {
  return l != NULL ? l->token : NULL;
}

const void *redlock_lock_resource(const redlock_lock_t *l, size_t *len) {
  if (l == NULL)
    return NULL;
  if (len != NULL)
    *len = l->keylen - l->client->key_prefix_len;
  return l->key + l->client->key_prefix_len;
}

redlock_client_t *redlock_lock_client(const redlock_lock_t *l) {
  return l != NULL ? l->client : NULL;
}

void *redlock_lock_get_data(const redlock_lock_t *l) {
  return l != NULL ? l->data : NULL;
}

void redlock_lock_set_data(redlock_lock_t *l, void *data) {
  if (l != NULL)
    l->data = data;
}
