/* lock.c: the lock handle: its state, its operations and their callbacks.
 *
 * Owns: the handle's memory and references, its one state enum
 * (redlock__lock_set_state), the user's operation in flight, the owner of
 * the main round (the user's operation or the watchdog), delivering every
 * callback exactly once, extend / release / inspect / adopt / free, and
 * the getters. Acquisition is in acquire.c, auto-extension in watchdog.c,
 * the quorum round in round.c.
 *
 * Invariants
 *  1. One user operation at a time (op): acquire, extend, release or
 *     inspect; another call while one is in flight fails with EBUSY.
 *  2. The main round (round) has one owner (`owner`): the user's operation or
 *     the watchdog. A user extend, release or acquire takes the round from
 *     the watchdog: the watchdog's round is dropped (its late replies are
 *     only consumed). Inspect has its own round and never touches the
 *     slot, so it cannot cancel an auto-extension.
 *  3. Validity never exceeds what the masters can guarantee: an extend to
 *     a ttl T caps the validity at once at (round start + T - drift), so
 *     after any extend that does not succeed the lock is valid at most that
 *     long (the shorter PEXPIRE may have landed on some masters).
 *  4. A token this handle holds is never released behind its back: only
 *     releases of tokens it gave up (a failed attempt, release, free,
 *     close) are marked for redelivery (node.c invariant 3).
 *  5. Callbacks run exactly once and never from inside a public call
 *     (decisions made inside one are delivered on the next loop turn).
 *  6. References: the user holds one until free/detach; the operation in
 *     flight holds one; each attached round or renewal batch holds one.
 *     The memory (one block: handle and keys) goes one timer pass after
 *     the last one goes (lock_reap), so that a walk of the client's
 *     members or a callback never meets freed memory. Rounds and batches
 *     outlive their lock only detached. */
#include <stdio.h>
#include <string.h>

#include "lock.h"

void redlock__lock_set_state(redlock_lock_t *l, redlock__lock_state s) {
  l->state = s;
  if (s != REDLOCK__LOCK_HELD)
    l->valid_until = 0;
}

/* The memory goes one timer pass after the last reference (invariant 6):
 * never inside a walk of the client's members or a callback. */
static void lock_reap(redlock_lock_t *l) {
  redlock_client_t *c = l->client;
  redlock__queue_remove(&l->member.link);
  redlock__tq_unreserve(&c->tq, 3);
  if (l->token != l->tok_inline)
    redlock__free(l->token);
  redlock__free(l->holder_buf);
  if (l->fence_key != NULL) {
    redlock__free(l->fence_key);
    redlock__free(l->fence_key_cl);
  }
  if (l->rw_names != NULL) {
    redlock__free(l->rw_names[0]);
    redlock__free(l->rw_names);
    redlock__free(l->rw_name_lens);
    redlock__free(l->rw_names_cl);
    redlock__free(l->rw_name_cl_lens);
  }
  redlock__free(l->rw_hash_cl);
  if (l->sem != NULL) {
    redlock__free(l->sem->free_seen);
    redlock__free(l->sem->ilimit);
    redlock__free(l->sem->held);
    redlock__free(l->sem);
  }
  redlock__free(l->waiters);
  redlock__free(l);
  redlock__client_leave(c);
}

int redlock__lock_token_room(redlock_lock_t *l, size_t len) {
  char *p;
  if (len <= REDLOCK__TOKEN_HEX || l->token != l->tok_inline)
    return 0;
  p = redlock__malloc(REDLOCK__TOKEN_MAX + 1);
  if (p == NULL)
    return REDLOCK_ENOMEM;
  memcpy(p, l->tok_inline, sizeof(l->tok_inline));
  l->token = p;
  return 0;
}

int redlock__lock_fence_key(redlock_lock_t *l) {
  size_t room = l->keylen + 16;
  if (l->fence_key != NULL)
    return 0;
  l->fence_key = redlock__malloc(l->keylen + 7);
  l->fence_key_cl = redlock__malloc(room);
  if (l->fence_key == NULL || l->fence_key_cl == NULL) {
    redlock__free(l->fence_key);
    redlock__free(l->fence_key_cl);
    l->fence_key = NULL;
    l->fence_key_cl = NULL;
    return REDLOCK_ENOMEM;
  }
  memcpy(l->fence_key, l->key, l->keylen);
  memcpy(l->fence_key + l->keylen, ":fence", 7);
  l->fence_keylen = l->keylen + 6;
  /* On a cluster master the counter shares the key's slot (slot.c): the
   * same name for a key with a hash tag, "{key}:fence" otherwise. Each
   * master keeps its own counter, so plain masters keep "<key>:fence". */
  l->fence_key_cl_len = redlock__same_slot_name(l->key, l->keylen, ":fence",
                                                l->fence_key_cl, room);
  return 0;
}

/* Each key's read-write hash: "<key>:rw" on plain masters, its same-slot
 * name on cluster masters (as the read-write handle's, redlock_rwlock_new).
 * One block holds both names of every key. */
int redlock__lock_rw_names(redlock_lock_t *l) {
  size_t total = 0;
  unsigned k;
  char *p;
  if (l->rw_names != NULL)
    return 0;
  for (k = 0; k < l->nkeys; k++)
    total += 2 * l->keylens[k] + 20;
  l->rw_names = redlock__calloc(l->nkeys, sizeof(*l->rw_names));
  l->rw_name_lens = redlock__calloc(l->nkeys, sizeof(*l->rw_name_lens));
  l->rw_names_cl = redlock__calloc(l->nkeys, sizeof(*l->rw_names_cl));
  l->rw_name_cl_lens =
      redlock__calloc(l->nkeys, sizeof(*l->rw_name_cl_lens));
  p = redlock__malloc(total);
  if (l->rw_names == NULL || l->rw_name_lens == NULL ||
      l->rw_names_cl == NULL || l->rw_name_cl_lens == NULL || p == NULL) {
    redlock__free(l->rw_names);
    redlock__free(l->rw_name_lens);
    redlock__free(l->rw_names_cl);
    redlock__free(l->rw_name_cl_lens);
    redlock__free(p);
    l->rw_names = NULL;
    l->rw_name_lens = NULL;
    l->rw_names_cl = NULL;
    l->rw_name_cl_lens = NULL;
    return REDLOCK_ENOMEM;
  }
  for (k = 0; k < l->nkeys; k++) {
    l->rw_names[k] = p;
    memcpy(p, l->keys[k], l->keylens[k]);
    memcpy(p + l->keylens[k], ":rw", 4);
    l->rw_name_lens[k] = l->keylens[k] + 3;
    p += l->keylens[k] + 4;
    l->rw_names_cl[k] = p;
    l->rw_name_cl_lens[k] = redlock__same_slot_name(
        l->keys[k], l->keylens[k], ":rw", p, l->keylens[k] + 16);
    p += l->keylens[k] + 16;
  }
  return 0;
}

static void lock_on_timer(redlock_lock_t *l);

static void on_tmr(redlock__tq_entry *e) {
  lock_on_timer(REDLOCK__CONTAINER_OF(e, redlock_lock_t, tmr));
}

static void on_reap(redlock__tq_entry *e) {
  lock_reap(REDLOCK__CONTAINER_OF(e, redlock_lock_t, tmr));
}

void redlock__lock_timer(redlock_lock_t *l, int64_t ms) {
  redlock__tq_start(&l->client->tq, &l->tmr, ms, on_tmr);
}

void redlock__lock_timer_stop(redlock_lock_t *l) {
  redlock__tq_stop(&l->client->tq, &l->tmr);
}

void redlock__lock_ref(redlock_lock_t *l) {
  l->refs++;
}

void redlock__lock_unref(redlock_lock_t *l) {
  REDLOCK__ASSERT(l->refs > 0);
  if (--l->refs == 0) {
    redlock__tq *tq = &l->client->tq;
    redlock__tq_stop(tq, &l->wd);
    redlock__tq_stop(tq, &l->wait_end);
    redlock__tq_start(tq, &l->tmr, 0, on_reap);
  }
}

redlock__ns redlock__lock_deadline(const redlock_lock_t *l,
                                   redlock__ns start, int64_t ttl_ms) {
  return redlock__validity_deadline(start, ttl_ms, l->client->drift_factor);
}


void redlock__lock_renewal_stop(redlock_lock_t *l) {
  redlock__tq_stop(&l->client->tq, &l->wd);
  if (l->owner == REDLOCK__OWNER_WATCHDOG) {
    redlock__lock_drop_round(l);   /* its late votes no longer count */
    redlock__lock_set_owner(l, REDLOCK__OWNER_FREE);
  }
}

void redlock__lock_declare_lost(redlock_lock_t *l, int reason) {
  redlock__lock_set_state(l, REDLOCK__LOCK_LOST);
  redlock__tq_stop(&l->client->tq, &l->wd);
  if (l->lost)
    return;
  l->lost = 1;   /* once per acquisition: never two on_lost */
  l->client->lst.lost++;
  if (l->auto_extend && l->lost_cb != NULL && !l->user_freed)
    l->lost_cb(l, reason, l->lost_arg);
}

/* ---- the handle's side of its rounds (round.h) -------------------------- */

static int owner_argv(const redlock__round *r, unsigned flags,
                      const redlock__argv_sub *sub, const char **argv,
                      size_t *lens, char nums[3][24]) {
  return redlock__lock_argv_sub(r->lock, r->cmd, r->ttl_ms, flags, sub, argv,
                                lens, nums);
}

static unsigned owner_groups(const redlock__round *r,
                             redlock__key_groups *g) {
  return redlock__lock_groups(r->lock, r->cmd, g);
}

static unsigned owner_key_slot(const redlock__round *r) {
  return redlock__lock_key_slot(r->lock);
}

/* An acquisition's request ends by its wait deadline, or a command
 * timeout from now when that is later (the last attempt, at the deadline,
 * still gets its answers): a request queued behind a handshake would
 * otherwise outlive the wait by the connect timeout (issue 29, item 4).
 * 0 (no such bound) for the rest. */
static redlock__ns owner_until(const redlock__round *r) {
  const redlock_lock_t *l = r->lock;
  redlock__ns floor;
  if (l == NULL || l->op != REDLOCK__OP_ACQUIRE || l->wait_deadline == 0)
    return 0;
  floor = redlock__sys_now(r->client->sys) +
          (redlock__ns)r->client->command_timeout_ms * REDLOCK__NS_PER_MS;
  return l->wait_deadline > floor ? l->wait_deadline : floor;
}

static void owner_release(redlock_lock_t *l) {
  redlock__lock_unref(l);
}

static void owner_reply(const redlock__round *r, unsigned i,
                        const redlock__reply *reply) {
  redlock_lock_t *l = r->lock;
  if (l->on_reply != NULL)
    l->on_reply(l, r->cmd, i, reply);
}

const redlock__round_owner redlock__lock_round_owner = {
    owner_argv, owner_groups, owner_key_slot, owner_until, owner_release,
    owner_reply,
};

/* ---- rounds -------------------------------------------------------------- */

static int is_acquisition(redlock__cmd cmd) {
  return cmd == REDLOCK__CMD_SET_NX || cmd == REDLOCK__CMD_TAKEOVER ||
         cmd == REDLOCK__CMD_FENCED_ACQUIRE ||
         cmd == REDLOCK__CMD_MULTI_ACQUIRE || cmd == REDLOCK__CMD_RW_ACQUIRE ||
         cmd == REDLOCK__CMD_SEM_ACQUIRE;
}

static int is_release(redlock__cmd cmd) {
  return cmd == REDLOCK__CMD_RELEASE || cmd == REDLOCK__CMD_MULTI_RELEASE ||
         cmd == REDLOCK__CMD_RW_RELEASE || cmd == REDLOCK__CMD_RW_GIVEUP ||
         cmd == REDLOCK__CMD_SEM_RELEASE;
}

redlock__round *redlock__lock_round(redlock_lock_t *l, redlock__cmd cmd,
                                    int64_t ttl_ms, redlock__round_fn fn,
                                    const redlock__round *only_yes) {
  redlock_client_t *c = l->client;
  redlock__round *r = redlock__round_get(c);
  if (r == NULL)
    return NULL;
  r->lock = l;
  r->owner = &redlock__lock_round_owner;
  redlock__lock_ref(l);
  r->decide = fn;
  r->cmd = cmd;
  r->ttl_ms = ttl_ms;
  r->guarded = is_acquisition(cmd) &&
               (c->restart_guard_ms >= 0 || c->guard.clock_on);
  r->clocked = is_acquisition(cmd) && c->guard.clock_on;
  /* Auto guard: a master counts for holding a lock of this ttl only where
   * it holds the ttl record (guard.c). */
  r->needs_record = c->restart_guard_ms == 0 &&
                    (is_acquisition(cmd) || cmd == REDLOCK__CMD_EXTEND ||
                     cmd == REDLOCK__CMD_MULTI_EXTEND ||
                     cmd == REDLOCK__CMD_RW_EXTEND);
  /* Acquisitions and extensions count a sentinel group only where its
   * primary refuses writes when cut off (node.c): whatever the guard. */
  r->needs_isolation = is_acquisition(cmd) || cmd == REDLOCK__CMD_EXTEND ||
                       cmd == REDLOCK__CMD_MULTI_EXTEND ||
                       cmd == REDLOCK__CMD_RW_EXTEND;
  r->redeliver = is_release(cmd);
  /* When a refusal ends: every master's answer counts (bounded by the
   * command timeout), not the first quorum's. */
  r->all = cmd == REDLOCK__CMD_PTTL || cmd == REDLOCK__CMD_MULTI_PTTL;
  r->progress = r->all;
  r->start = redlock__sys_now(l->client->sys);
  l->round = r;
  /* May decide (and call fn) before returning. */
  redlock__round_send(r, only_yes);
  return r;
}

void redlock__lock_drop_round(redlock_lock_t *l) {
  redlock__round *r = l->round;
  if (l->batch != NULL)
    redlock__batch_detach(l->batch, l->batch_idx, l);
  if (r == NULL)
    return;
  l->round = NULL;
  redlock__round_detach(r);
}

static const redlock__kind_cmds kinds[] = {
    [REDLOCK__KIND_PLAIN] = {REDLOCK__CMD_SET_NX, REDLOCK__CMD_EXTEND,
                             REDLOCK__CMD_RELEASE, REDLOCK__CMD_RELEASE, 0,
                             1},
    [REDLOCK__KIND_MULTI] = {REDLOCK__CMD_MULTI_ACQUIRE,
                             REDLOCK__CMD_MULTI_EXTEND,
                             REDLOCK__CMD_MULTI_RELEASE,
                             REDLOCK__CMD_MULTI_RELEASE, 0, 0},
    [REDLOCK__KIND_READ] = {REDLOCK__CMD_RW_ACQUIRE, REDLOCK__CMD_RW_EXTEND,
                            REDLOCK__CMD_RW_RELEASE, REDLOCK__CMD_RW_GIVEUP,
                            1, 0},
    [REDLOCK__KIND_WRITE] = {REDLOCK__CMD_RW_ACQUIRE, REDLOCK__CMD_RW_EXTEND,
                             REDLOCK__CMD_RW_RELEASE, REDLOCK__CMD_RW_GIVEUP,
                             1, 0},
    /* A permit is a plain key: extended (and batched) as one. */
    [REDLOCK__KIND_SEM] = {REDLOCK__CMD_SEM_ACQUIRE, REDLOCK__CMD_EXTEND,
                           REDLOCK__CMD_SEM_RELEASE, REDLOCK__CMD_SEM_RELEASE,
                           0, 1},
};

const redlock__kind_cmds *redlock__kind_of(const redlock_lock_t *l) {
  return &kinds[l->kind];
}

static redlock__cmd release_cmd(const redlock_lock_t *l) {
  return kinds[l->kind].release;
}

static redlock__cmd extend_cmd(const redlock_lock_t *l) {
  return kinds[l->kind].extend;
}

/* Fire and forget: one command to every master (skipping where r gave
 * the vote `skip`), resent after a reconnect if it fails. */
static void send_where(redlock_lock_t *l, redlock__cmd cmd,
                       const redlock__round *r, redlock_vote_t skip,
                       unsigned flags) {
  redlock_client_t *c = l->client;
  const char *argv[REDLOCK__ARGV_MAX];
  size_t lens[REDLOCK__ARGV_MAX];
  char nums[3][24];
  int argc = redlock__lock_argv(l, cmd, l->ttl_ms, flags, argv, lens, nums);
  unsigned i;
  for (i = 0; i < c->n; i++) {
    redlock__req *req;
    if (c->masters[i].ops->by_slot) {
      /* A split vote's NO says nothing of the other slots' keys. */
      if (r != NULL && r->res[i].vote == skip &&
          (r->nparts == NULL || r->nparts[i] == 0))
        continue;
      redlock__lock_slot_send(l, i, cmd, l->ttl_ms, flags);
      continue;
    }
    if (r != NULL && r->res[i].vote == skip)
      continue;
    req = redlock__node_req(&c->nodes[i]);
    if (req == NULL)
      continue;   /* the key still expires by its ttl */
    req->flags = REDLOCK__REQ_REDELIVER;
    (void)redlock__node_submit(&c->nodes[i], req, argc, argv, lens);
  }
}

static void send_everywhere(redlock_lock_t *l, redlock__cmd cmd,
                            const redlock__round *r, unsigned flags) {
  send_where(l, cmd, r, REDLOCK_VOTE_NO, flags);
}

void redlock__lock_cleanup(redlock_lock_t *l, const redlock__round *r,
                           unsigned flags) {
  if (l->token[0] == '\0')
    return;
  /* A master that failed (timed out, connection lost) may still set the
   * key, or miss the release: remember the token. Not when every master
   * answered cleanly: the next acquisition stays a plain SET NX. */
  if (r == NULL || r->err > 0)
    redlock__stale_note(l);
  send_everywhere(l, release_cmd(l), r, flags);
}

/* ---- own stale keys ------------------------------------------------------ */

void redlock__lock_withdraw(redlock_lock_t *l, const redlock__round *r,
                            unsigned flags) {
  if (kinds[l->kind].withdraws && l->intent[0] != '\0' &&
      redlock__rw_lease_ms(l) > 0)
    send_where(l, kinds[l->kind].giveup, r, REDLOCK_VOTE_YES, flags);
}

/* ---- completing operations ----------------------------------------------- */

void redlock__lock_event(redlock_lock_t *l, redlock_event_kind kind,
                         const redlock_result *res) {
  redlock_client_t *c = l->client;
  redlock_event ev;
  if (c->event_cb == NULL)
    return;
  ev.kind = kind;
  ev.resource = redlock_lock_resource(l, &ev.resource_len);
  ev.status = res->status;
  ev.result = res;
  c->event_cb(c, &ev, c->event_arg);
}

static void count_op(redlock__lock_stats *st, int op, int status) {
  if (status == REDLOCK_ECANCELED)
    st->canceled++;
  else if (op == REDLOCK__OP_EXTEND && status == 0)
    st->extensions++;
  else if (op == REDLOCK__OP_EXTEND)
    st->extension_failures++;
  else if (op == REDLOCK__OP_RELEASE)
    st->releases++;
}

static void lock_deliver(redlock_lock_t *l) {
  redlock_client_t *c = l->client;
  redlock__round *r = l->round;
  redlock_lock_cb cb = l->cb;
  void *arg = l->cb_arg;
  redlock_result res;
  int status = l->status;
  int op = l->op;
  if (l->above != NULL)
    l->above->unwait(l);
  l->cb = NULL;
  redlock__lock_set_op(l, REDLOCK__OP_NONE);
  if (l->owner == REDLOCK__OWNER_USER) {
    redlock__lock_set_owner(l, REDLOCK__OWNER_FREE);
    l->round = NULL;   /* detached after the callback */
  } else {
    r = NULL;
  }
  memset(&res, 0, sizeof(res));
  res.status = status;
  res.attempts = l->attempts;
  res.n_nodes = c->n;
  res.validity_ms = status == 0 ? l->result_validity_ms : 0;
  res.elapsed_us = l->result_elapsed_us;
  res.nodes = r != NULL ? r->res : c->idle;
  res.quorum = c->quorum;
  if (r != NULL) {
    res.yes = r->yes;
    res.no = r->no;
    res.err = r->err;
  }
  count_op(&c->lst, op, status);
  if (cb != NULL)
    cb(l, status, &res, arg);
  redlock__lock_event(l, op == REDLOCK__OP_ACQUIRE   ? REDLOCK_EV_ACQUIRE
                         : op == REDLOCK__OP_EXTEND ? REDLOCK_EV_EXTEND
                                                    : REDLOCK_EV_RELEASE,
                      &res);
  if (r != NULL)
    redlock__round_detach(r);
  redlock__lock_unref(l);   /* the operation's */
}

void redlock__lock_complete(redlock_lock_t *l, int status) {
  l->status = status;
  redlock__tq_stop(&l->client->tq, &l->wait_end);
  if (l->round != NULL && l->owner == REDLOCK__OWNER_USER) {
    /* First send to the decision (the result's validity is counted at
     * the decision too), not to this call: under load the two differ. */
    redlock__ns end = l->round->decided_ns != 0 ? l->round->decided_ns
                                                : redlock__sys_now(l->client->sys);
    l->result_elapsed_us = (end - l->round->start) / REDLOCK__NS_PER_US;
  }
  if (l->client->in_api > 0) {
    /* Decided inside the public call: never call back from there. */
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_DELIVER, lock_deliver);
    redlock__lock_timer(l, 0);
    return;
  }
  lock_deliver(l);
}

/* Starts the user's operation: op, callback, reference. */
static void op_begin(redlock_lock_t *l, redlock__op op, redlock_lock_cb cb,
                     void *arg) {
  redlock__lock_set_op(l, op);
  l->cb = cb;
  l->cb_arg = arg;
  l->result_validity_ms = 0;
  l->result_elapsed_us = 0;
  l->attempts = 1;
  redlock__lock_ref(l);
}

/* The user's operation takes the main round from the watchdog. */
static void take_slot(redlock_lock_t *l) {
  if (l->owner == REDLOCK__OWNER_WATCHDOG) {
    redlock__tq_stop(&l->client->tq, &l->wd);
    redlock__lock_drop_round(l);
  }
  redlock__lock_set_owner(l, REDLOCK__OWNER_USER);
}

/* ---- extend -------------------------------------------------------------- */

static void start_extend(redlock_lock_t *l);

static void on_extend_decided(redlock__round *r, redlock__round_state st,
                              redlock__ns now);

static void on_extend_raised(redlock__round *r, redlock__round_state st,
                             redlock__ns now) {
  redlock_lock_t *l = r->lock;
  (void)now;
  if (st != REDLOCK__ROUND_REACHED) {
    l->pending_holds = 0;
    if (l->above != NULL)
      l->above->after_user_extend(l, REDLOCK_ENOQUORUM);
    redlock__lock_complete(l, REDLOCK_ENOQUORUM);
    return;
  }
  redlock__lock_drop_round(l);
  redlock__lock_set_phase(l, REDLOCK__PHASE_EXTEND);
  if (redlock__lock_round(l, extend_cmd(l), l->op_ttl_ms, on_extend_decided,
                          NULL) == NULL)
    redlock__lock_complete(l, REDLOCK_ENOMEM);
}

static void on_extend_decided(redlock__round *r, redlock__round_state st,
                              redlock__ns now) {
  redlock_lock_t *l = r->lock;
  redlock__ns deadline = redlock__lock_deadline(l, r->start, l->op_ttl_ms);
  int64_t left = redlock__validity_left(deadline, now);
  /* With heal the extend re-creates missing keys: if our validity ran out
   * before the decision, someone else may have held the lock in between,
   * and success would hide that gap. */
  int lapsed = l->heal && l->state == REDLOCK__LOCK_HELD &&
               redlock__validity_left(l->valid_until, now) <= 0;
  int status;
  if (l->state == REDLOCK__LOCK_LOST) {
    /* Declared lost (validity ran out) while the round was out: a late
     * success does not bring it back. */
    status = REDLOCK_EEXPIRED;
  } else if (st == REDLOCK__ROUND_REACHED && left > 0 && !lapsed) {
    redlock__lock_set_state(l, REDLOCK__LOCK_HELD);   /* ends ADOPTED */
    l->valid_until = deadline;
    l->ttl_ms = l->op_ttl_ms;
    l->result_validity_ms = left / (int64_t)REDLOCK__NS_PER_MS;
    if (l->op == REDLOCK__OP_ACQUIRE) {
      l->holds += l->pending_holds;   /* a re-entry with a longer ttl */
      l->pending_holds = 0;
    }
    status = 0;
  } else if (st == REDLOCK__ROUND_REACHED) {
    /* The ttl ran out during the round: not valid any more. */
    redlock__lock_declare_lost(l, REDLOCK_EEXPIRED);
    status = REDLOCK_EEXPIRED;
  } else if (st == REDLOCK__ROUND_BLOCKED) {
    redlock__lock_declare_lost(l, REDLOCK_ENOTHELD);
    status = REDLOCK_ENOTHELD;
  } else {
    status = REDLOCK_ENOQUORUM;   /* the cap of invariant 3 stays */
  }
  l->pending_holds = 0;
  if (l->above != NULL)
    l->above->after_user_extend(l, status);
  redlock__lock_complete(l, status);
}

static void start_extend(redlock_lock_t *l) {
  redlock__guard *g = &l->client->guard;
  redlock__ns now = redlock__sys_now(l->client->sys);
  redlock__ns cap = redlock__lock_deadline(l, now, l->op_ttl_ms);
  /* Invariant 3: from now on the masters may hold the shorter ttl. */
  if (l->state == REDLOCK__LOCK_HELD && cap < l->valid_until)
    l->valid_until = cap;
  redlock__guard_used(g, l->op_ttl_ms);
  if (redlock__guard_needs_raise(g, l->op_ttl_ms) && g->mode_ms != 0)
    redlock__guard_raise_async(g, l->op_ttl_ms);   /* best effort */
  else if (redlock__guard_needs_raise(g, l->op_ttl_ms)) {
    redlock__lock_set_phase(l, REDLOCK__PHASE_RAISE);
    if (redlock__lock_round(l, REDLOCK__CMD_MAXTTL_RAISE, l->op_ttl_ms,
                            on_extend_raised, NULL) == NULL)
      redlock__lock_complete(l, REDLOCK_ENOMEM);
    return;
  }
  redlock__lock_set_phase(l, REDLOCK__PHASE_EXTEND);
  if (redlock__lock_round(l, extend_cmd(l), l->op_ttl_ms, on_extend_decided,
                          NULL) == NULL)
    redlock__lock_complete(l, REDLOCK_ENOMEM);
}

void redlock__lock_reenter_extend(redlock_lock_t *l, int64_t ttl_ms) {
  take_slot(l);
  redlock__tq_stop(&l->client->tq, &l->wd);
  l->op_ttl_ms = ttl_ms;
  l->pending_holds = 1;
  start_extend(l);
}

/* ---- release, inspect ---------------------------------------------------- */

static void on_release_decided(redlock__round *r, redlock__round_state st,
                               redlock__ns now) {
  redlock_lock_t *l = r->lock;
  int status = st == REDLOCK__ROUND_REACHED   ? 0
               : st == REDLOCK__ROUND_BLOCKED ? REDLOCK_ENOTHELD
                                              : REDLOCK_ENOQUORUM;
  (void)now;
  if (r->err > 0)
    redlock__stale_note(l);   /* the release may not reach a master */
  redlock__lock_complete(l, status);
}

/* Delivers the inspection (its round is decided). */
static void inspect_deliver(redlock_lock_t *l, int status) {
  redlock_client_t *c = l->client;
  redlock__round *r = l->iround;
  redlock_lock_cb cb = l->icb;
  void *arg = l->icb_arg;
  redlock_result res;
  l->iround = NULL;
  l->icb = NULL;
  redlock__lock_set_op(l, REDLOCK__OP_NONE);
  memset(&res, 0, sizeof(res));
  res.status = status;
  res.attempts = 1;
  res.yes = r->yes;
  res.no = r->no;
  res.err = r->err;
  res.n_nodes = c->n;
  res.elapsed_us = (redlock__sys_now(l->client->sys) - r->start) / REDLOCK__NS_PER_US;
  res.nodes = r->res;
  res.quorum = c->quorum;
  if (cb != NULL)
    cb(l, status, &res, arg);
  if (r->cmd == REDLOCK__CMD_INSPECT)
    redlock__lock_event(l, REDLOCK_EV_INSPECT, &res);
  redlock__round_detach(r);
  redlock__lock_unref(l);   /* the operation's */
}

static void inspect_deliver_timer(redlock_lock_t *l) {
  inspect_deliver(l, l->status);
}

static void on_inspect_decided(redlock__round *r, redlock__round_state st,
                               redlock__ns now) {
  redlock_lock_t *l = r->lock;
  (void)now;
  l->status = st == REDLOCK__ROUND_REACHED ? 0 : REDLOCK_ENOQUORUM;
  if ((r->cmd == REDLOCK__CMD_MAXTTL_SET ||
       r->cmd == REDLOCK__CMD_FORCE_RELEASE ||
       r->cmd == REDLOCK__CMD_SEM_LIMIT || r->cmd == REDLOCK__CMD_SEM_FORCE) &&
      r->yes < l->client->n)
    l->status = REDLOCK_ENOQUORUM;   /* every master must have it */
  if (l->client->in_api > 0) {
    /* Every master failed at once: deliver on the next loop turn. */
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_INSPECT,
                                 inspect_deliver_timer);
    redlock__lock_timer(l, 0);
    return;
  }
  inspect_deliver(l, l->status);
}

/* ---- timers -------------------------------------------------------------- */

static void lock_on_timer(redlock_lock_t *l) {
  void (*fn)(redlock_lock_t *l) = l->timer_fn;
  redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
  if (fn != NULL)
    fn(l);
}

/* ---- public API ---------------------------------------------------------- */

int redlock__lock_usable(const redlock_lock_t *l, const char *fn) {
  if (l == NULL)
    return redlock__fail(REDLOCK_EINVAL, "%s: lock is NULL", fn);
  if (l->user_freed)
    return redlock__fail(REDLOCK_EINVAL, "%s: lock was freed", fn);
  if (l->client->closing)
    return redlock__fail(REDLOCK_ECANCELED, "%s: client is closing", fn);
  if (l->op != REDLOCK__OP_NONE)
    return redlock__fail(REDLOCK_EBUSY,
                         "%s: another operation is in flight", fn);
  return 0;
}

int redlock__check_ttl(const redlock_lock_t *l, int64_t ttl_ms,
                       const char *fn) {
  const redlock_client_t *c = l->client;
  if (ttl_ms <= 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL,
                         "%s: ttl %lld ms out of range 1..%d", fn,
                         (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  if (c->restart_guard_ms > 0 && ttl_ms > c->restart_guard_ms)
    return redlock__fail(REDLOCK_EINVAL,
                         "%s: ttl %lld ms is longer than restart_guard_ms "
                         "%lld (the deployment's longest ttl)",
                         fn, (long long)ttl_ms,
                         (long long)c->restart_guard_ms);
  if (ttl_ms > c->max_ttl_ms)
    return redlock__fail(REDLOCK_EINVAL,
                         "%s: ttl %lld ms is above the deployment's cap "
                         "max_ttl_ms %lld (a ttl raises every master's "
                         "restart window for good; for longer holds use "
                         "auto-extension, or raise max_ttl_ms on every "
                         "client)", fn, (long long)ttl_ms,
                         (long long)c->max_ttl_ms);
  return 0;
}

static void on_member_abort(redlock__member *m);

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
  /* One block: handle, the key table, the keys. */
  size = sizeof(*l) + k * (sizeof(char *) + sizeof(size_t)) + keybytes;
  if (redlock__tq_reserve(&c->tq, 3) != 0)   /* its three timer entries */
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  l = redlock__calloc(1, size);
  if (l == NULL) {
    redlock__tq_unreserve(&c->tq, 3);
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  p = (char *)(l + 1);
  l->keys = (char **)p;
  p += k * sizeof(char *);
  l->keylens = (size_t *)p;
  p += k * sizeof(size_t);
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
  l->kind = k > 1 ? REDLOCK__KIND_MULTI : REDLOCK__KIND_PLAIN;
  l->key = l->keys[0];
  l->keylen = l->keylens[0];
  l->token = l->tok_inline;
  l->client = c;
  l->refs = 1;   /* the user's */
  l->member.abort = on_member_abort;
  redlock__client_join(c, &l->member);
  *out = l;
  return 0;
}

int redlock_lock_new(redlock_client_t *c, const void *resource, size_t len,
                     redlock_lock_t **out) {
  return redlock_lock_new_multi(c, &resource, &len, 1, out);
}

int redlock_rwlock_new(redlock_client_t *c, const void *resource, size_t len,
                       redlock_rw_side side, redlock_lock_t **out) {
  redlock_lock_t *l;
  size_t room;
  char *name;
  const void *res;
  size_t n;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (side != REDLOCK_READ && side != REDLOCK_WRITE)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_rwlock_new: side must be REDLOCK_READ or "
                         "REDLOCK_WRITE (got %d)", (int)side);
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
  if (rc != 0)
    return rc;
  l = *out;
  l->kind = side == REDLOCK_WRITE ? REDLOCK__KIND_WRITE : REDLOCK__KIND_READ;
  /* On a cluster master the hash shares the plain key's slot (the scripts
   * occupy the plain key too: scripts.c): "{key}:rw" for a key without a
   * hash tag, the key's own name otherwise (slot.c). */
  room = l->keylen - 3 + 16;
  l->rw_hash_cl = redlock__malloc(room);
  if (l->rw_hash_cl == NULL) {
    (void)redlock_lock_free(l);
    *out = NULL;
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  l->rw_hash_cl_len = redlock__same_slot_name(l->key, l->keylen - 3, ":rw",
                                              l->rw_hash_cl, room);
  return 0;
}

static int free_check(const redlock_lock_t *l, const char *fn) {
  if (l == NULL)
    return redlock__fail(REDLOCK_EINVAL, "%s: lock is NULL", fn);
  if (l->user_freed)
    return redlock__fail(REDLOCK_EINVAL, "%s: double free", fn);
  if (l->op != REDLOCK__OP_NONE)
    return redlock__fail(REDLOCK_EBUSY,
                         "%s: an operation is in flight", fn);
  return 0;
}

static void lock_let_go(redlock_lock_t *l, int release) {
  l->auto_extend = 0;
  redlock__lock_renewal_stop(l);
  if (release && (l->state == REDLOCK__LOCK_HELD ||
                  l->state == REDLOCK__LOCK_LOST)) {
    l->client->in_api++;
    redlock__lock_cleanup(l, NULL, 0);
    l->client->in_api--;
  }
  redlock__lock_set_state(l, REDLOCK__LOCK_IDLE);
  l->holds = 0;
  l->user_freed = 1;
  redlock__lock_unref(l);
}

int redlock_lock_free(redlock_lock_t *l) {
  int rc = free_check(l, "redlock_lock_free");
  if (rc != 0)
    return rc;
  lock_let_go(l, 1);
  return 0;
}

int redlock_lock_detach(redlock_lock_t *l) {
  int rc = free_check(l, "redlock_lock_detach");
  if (rc != 0)
    return rc;
  lock_let_go(l, 0);
  return 0;
}

int redlock_lock_extend(redlock_lock_t *l, int64_t ttl_ms, redlock_lock_cb cb,
                        void *arg) {
  int rc = redlock__lock_usable(l, "redlock_lock_extend");
  if (rc != 0)
    return rc;
  if ((rc = redlock__check_ttl(l, ttl_ms, "redlock_lock_extend")) != 0)
    return rc;
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_extend: callback is NULL");
  if (l->state == REDLOCK__LOCK_LOST)
    return redlock__fail(REDLOCK_ELOST,
                         "redlock_lock_extend: the lock was lost");
  if (!redlock_lock_is_held(l) && l->state != REDLOCK__LOCK_ADOPTED)
    return redlock__fail(REDLOCK_ENOTHELD,
                         "redlock_lock_extend: the lock is not held "
                         "(never acquired, released or expired)");
  op_begin(l, REDLOCK__OP_EXTEND, cb, arg);
  take_slot(l);
  l->op_ttl_ms = ttl_ms;
  l->pending_holds = 0;
  l->client->in_api++;
  start_extend(l);
  l->client->in_api--;
  return 0;
}

int redlock_lock_release(redlock_lock_t *l, redlock_lock_cb cb, void *arg) {
  int rc = redlock__lock_usable(l, "redlock_lock_release");
  if (rc != 0)
    return rc;
  if (l->state != REDLOCK__LOCK_HELD && l->state != REDLOCK__LOCK_LOST &&
      l->state != REDLOCK__LOCK_ADOPTED)
    return redlock__fail(REDLOCK_ENOTHELD,
                         "redlock_lock_release: the lock is not held");
  if (l->state == REDLOCK__LOCK_HELD && l->holds > 1 &&
      redlock_lock_is_held(l)) {
    /* Not the last hold of a reentrant lock: it stays held. */
    l->holds--;
    op_begin(l, REDLOCK__OP_RELEASE, cb, arg);
    l->attempts = 0;
    l->result_validity_ms = redlock_lock_validity_ms(l);
    l->client->in_api++;
    redlock__lock_complete(l, 0);
    l->client->in_api--;
    return 0;
  }
  op_begin(l, REDLOCK__OP_RELEASE, cb, arg);
  /* Stop the extension first: it must not race the release. */
  l->auto_extend = 0;
  redlock__lock_renewal_stop(l);
  take_slot(l);
  redlock__lock_set_state(l, REDLOCK__LOCK_IDLE);
  l->holds = 0;
  redlock__lock_set_phase(l, REDLOCK__PHASE_RELEASE);
  l->client->in_api++;
  if (redlock__lock_round(l, release_cmd(l), l->ttl_ms, on_release_decided,
                          NULL) == NULL)
    redlock__lock_complete(l, REDLOCK_ENOMEM);
  l->client->in_api--;
  return 0;
}

/* A round of its own (never the main one) that waits for every master:
 * inspect, force release, the ttl record's setting
 * (redlock_client_set_ttl_record), a semaphore's (semaphore.c). */
int redlock__lock_side_round(redlock_lock_t *l, redlock__cmd cmd,
                             int64_t value, redlock_lock_cb cb, void *arg) {
  redlock__round *r = redlock__round_get(l->client);
  if (r == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  redlock__lock_set_op(l, REDLOCK__OP_INSPECT);
  l->icb = cb;
  l->icb_arg = arg;
  redlock__lock_ref(l);   /* the operation's */
  redlock__lock_ref(l);   /* the attached round's */
  r->lock = l;
  r->owner = &redlock__lock_round_owner;
  r->decide = on_inspect_decided;
  r->cmd = cmd;
  r->ttl_ms = value;
  r->all = 1;
  r->start = redlock__sys_now(l->client->sys);
  l->iround = r;
  l->client->in_api++;
  redlock__round_send(r, NULL);
  l->client->in_api--;
  return 0;
}

int redlock_lock_inspect(redlock_lock_t *l, redlock_lock_cb cb, void *arg) {
  int rc = redlock__lock_usable(l, "redlock_lock_inspect");
  if (rc != 0)
    return rc;
  if (REDLOCK__KIND_IS_RW(l->kind))
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_inspect: not for read-write locks");
  if (l->sem != NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_inspect: a semaphore: use "
                         "redlock_semaphore_inspect");
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_inspect: callback is NULL");
  if (redlock__lock_rw_names(l) != 0)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  return redlock__lock_side_round(l, REDLOCK__CMD_INSPECT, 0, cb, arg);
}

int redlock_lock_force_release(redlock_lock_t *l, redlock_lock_cb cb,
                               void *arg) {
  int rc = redlock__lock_usable(l, "redlock_lock_force_release");
  if (rc != 0)
    return rc;
  if (REDLOCK__KIND_IS_RW(l->kind))
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_force_release: use a plain handle of "
                         "the same name (its read-write hash goes too)");
  if (l->sem != NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_force_release: a semaphore: use "
                         "redlock_semaphore_force_release (one permit)");
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_force_release: callback is NULL");
  if (redlock_lock_is_held(l))
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_lock_force_release: this handle holds the "
                         "lock: release it");
  if (redlock__lock_rw_names(l) != 0)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  return redlock__lock_side_round(l, REDLOCK__CMD_FORCE_RELEASE, 0, cb, arg);
}

int redlock__lock_set_record(redlock_lock_t *l, int64_t ttl_ms,
                             redlock_lock_cb cb, void *arg) {
  int rc = redlock__lock_usable(l, "redlock_client_set_ttl_record");
  if (rc != 0)
    return rc;
  return redlock__lock_side_round(l, REDLOCK__CMD_MAXTTL_SET, ttl_ms, cb, arg);
}

int redlock_lock_adopt(redlock_lock_t *l, const char *token) {
  size_t len;
  int rc = redlock__lock_usable(l, "redlock_lock_adopt");
  if (rc != 0)
    return rc;
  if (token == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_adopt: token NULL");
  if (l->sem != NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_adopt: not for semaphores (which "
                         "permit?)");
  len = strlen(token);
  if (len == 0 || len > REDLOCK__TOKEN_MAX)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_adopt: token must be 1..%d bytes",
                         REDLOCK__TOKEN_MAX);
  /* "__redlock__:" names the library's own values: a read-write lock
   * holds the plain key set to "__redlock__:rw" while it has owners
   * (scripts.c), and a release or extend under that "token" would delete
   * or cut it beside the readers (review item 2). No token of ours (hex)
   * or another Redlock library's starts so. The scripts refuse it too. */
  if (len >= 12 && memcmp(token, "__redlock__:", 12) == 0)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_adopt: a token cannot start with "
                         "\"__redlock__:\" (the library's marker, not a "
                         "holder's token)");
  if (redlock_lock_is_held(l))
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_lock_adopt: this handle holds a lock");
  if (redlock__lock_token_room(l, len) != 0)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  l->auto_extend = 0;
  redlock__lock_renewal_stop(l);   /* a lost lock's extension may still be out */
  memcpy(l->token, token, len + 1);
  redlock__lock_set_state(l, REDLOCK__LOCK_ADOPTED);
  l->lost = 0;
  l->holds = 0;
  return 0;
}

/* ---- cancel -------------------------------------------------------------- */

/* Ends the acquisition in flight with `status`: its round decides
 * nothing any more (its votes stay for the result), whatever its token
 * may have set is released. Cancel, and the wait's hard end. */
static void acquire_end(redlock_lock_t *l, int status) {
  redlock_client_t *c = l->client;
  c->in_api++;
  if (l->round != NULL && l->owner == REDLOCK__OWNER_USER)
    redlock__round_stop(l->round);
  if (l->state == REDLOCK__LOCK_HELD) {
    /* A re-entry waiting for its longer-ttl extend: the lock stays held
     * with its holds; the extension (if any) resumes. */
    l->pending_holds = 0;
    if (l->above != NULL)
      l->above->after_user_extend(l, status);
  } else {
    redlock__lock_timer_stop(l);
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
    if (l->above != NULL)
      l->above->abort(l);
  }
  redlock__lock_complete(l, status);
  c->in_api--;
}

int redlock_lock_cancel(redlock_lock_t *l) {
  if (l == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_lock_cancel: lock is NULL");
  if (l->user_freed)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_cancel: lock was freed");
  if (l->op != REDLOCK__OP_ACQUIRE || l->timer_mode == REDLOCK__TIMER_DELIVER)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_lock_cancel: no acquisition in flight "
                         "(none started, or already decided)");
  acquire_end(l, REDLOCK_ECANCELED);
  return 0;
}

/* The wait's hard end (redlock__lock_wait_end): an acquisition with a
 * wait deadline calls back at most a command timeout after it, whatever
 * its attempt waits for (a round queued behind the ttl record's, the
 * guard's verdict on a vote, a new client's first connections, the PTTL
 * grace): found by redlock-sim, a wait that ended 68 ms late because the
 * attempt at the deadline first raised the ttl record. A re-entry waiting
 * for its extend is an extension, with its own bounds. */
static void on_wait_end(redlock__tq_entry *e) {
  redlock_lock_t *l = REDLOCK__CONTAINER_OF(e, redlock_lock_t, wait_end);
  if (l->op != REDLOCK__OP_ACQUIRE || l->timer_mode == REDLOCK__TIMER_DELIVER ||
      l->state == REDLOCK__LOCK_HELD || l->client->closing)
    return;
  l->client->lst.acquire_timeouts++;
  acquire_end(l, REDLOCK_ETIMEDOUT);
}

void redlock__lock_wait_end(redlock_lock_t *l, int64_t ms) {
  redlock__tq_start(&l->client->tq, &l->wait_end, ms, on_wait_end);
}

/* ---- client close -------------------------------------------------------- */

static void on_member_abort(redlock__member *m) {
  redlock_lock_t *l = REDLOCK__CONTAINER_OF(m, redlock_lock_t, member);
  l->auto_extend = 0;
  redlock__lock_renewal_stop(l);
  if (l->op == REDLOCK__OP_INSPECT) {
    redlock__lock_timer_stop(l);
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
    inspect_deliver(l, REDLOCK_ECANCELED);
  } else if (l->op != REDLOCK__OP_NONE) {
    redlock__lock_timer_stop(l);
    redlock__lock_set_timer_mode(l, REDLOCK__TIMER_IDLE, NULL);
    if (l->op == REDLOCK__OP_ACQUIRE)
      if (l->above != NULL)
        l->above->abort(l);
    l->status = REDLOCK_ECANCELED;
    lock_deliver(l);
  }
  if (l->state == REDLOCK__LOCK_HELD || l->state == REDLOCK__LOCK_LOST)
    redlock__lock_cleanup(l, NULL, 0);
  redlock__lock_set_state(l, REDLOCK__LOCK_IDLE);
  if (!l->user_freed) {
    l->user_freed = 1;
    redlock__lock_unref(l);
  }
}

/* ---- getters ------------------------------------------------------------- */

int64_t redlock_lock_validity_ms(const redlock_lock_t *l) {
  int64_t left;
  if (l == NULL || l->state != REDLOCK__LOCK_HELD || l->valid_until == 0)
    return 0;
  left = redlock__validity_left(l->valid_until, redlock__sys_now(l->client->sys));
  return left > 0 ? left / (int64_t)REDLOCK__NS_PER_MS : 0;
}

int redlock_lock_is_held(const redlock_lock_t *l) {
  if (l == NULL || l->state != REDLOCK__LOCK_HELD || l->valid_until == 0)
    return 0;
  return redlock__validity_left(l->valid_until, redlock__sys_now(l->client->sys)) > 0;
}

unsigned redlock_lock_holds(const redlock_lock_t *l) {
  return redlock_lock_is_held(l) ? l->holds : 0;
}

uint64_t redlock_lock_fence(const redlock_lock_t *l) {
  return l != NULL ? l->fence : 0;
}

int redlock_lock_is_lost(const redlock_lock_t *l) {
  return l != NULL && l->lost;
}

const char *redlock_token_holder(const char *value) {
  size_t i;
  if (value == NULL)
    return NULL;
  for (i = 0; i < REDLOCK__TOKEN_HEX; i++)
    if (!((value[i] >= '0' && value[i] <= '9') ||
          (value[i] >= 'a' && value[i] <= 'f')))
      return NULL;   /* also the end of a shorter value */
  return value[i] == '.' && value[i + 1] != '\0' ? value + i + 1 : NULL;
}

const char *redlock_lock_token(const redlock_lock_t *l) {
  return l != NULL ? l->token : NULL;
}

const void *redlock_lock_resource(const redlock_lock_t *l, size_t *len) {
  if (l == NULL)
    return NULL;
  /* keys[0] is the name (a semaphore's key is the permit's). */
  if (len != NULL)
    *len = l->keylens[0] - l->client->key_prefix_len;
  return l->keys[0] + l->client->key_prefix_len;
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

/* ---- the ttl record, by an operator -------------------------------------- */

typedef struct record_op {
  redlock_client_cb cb;
  void *arg;
  int64_t ttl_ms;
} record_op;

static void on_record_set(redlock_lock_t *l, int status,
                          const redlock_result *res, void *arg) {
  record_op *op = arg;
  redlock_client_t *c = l->client;
  if (status == 0 && op->ttl_ms < c->guard.window_ms)
    c->guard.window_ms = op->ttl_ms;   /* this client's own view too */
  if (op->cb != NULL)
    op->cb(c, status, res, op->arg);
  redlock__free(op);
  redlock_lock_free(l);
}

int redlock_client_set_ttl_record(redlock_client_t *c, int64_t ttl_ms,
                                  redlock_client_cb cb, void *arg) {
  redlock_lock_t *l;
  record_op *op;
  int rc;
  if (c == NULL || cb == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_set_ttl_record: "
                         "client or callback is NULL");
  if (ttl_ms < 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_set_ttl_record: "
                         "ttl %lld ms out of range 0..%d",
                         (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  rc = redlock_lock_new(c, "__redlock__:record", 18, &l);
  if (rc != 0)
    return rc;
  op = redlock__malloc(sizeof(*op));
  if (op == NULL) {
    redlock_lock_free(l);
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  op->cb = cb;
  op->arg = arg;
  op->ttl_ms = ttl_ms;
  rc = redlock__lock_set_record(l, ttl_ms, on_record_set, op);
  if (rc != 0) {
    redlock__free(op);
    redlock_lock_free(l);
  }
  return rc;
}
