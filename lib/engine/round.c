/* round.c: one quorum round (DESIGN 4.2).
 *
 * Owns: sending one command to every master for a lock, classifying each
 * reply into a vote (scripts.c), the restart guard's verdict on the YES
 * votes of an acquisition (guard.c), the early decision (quorum.c), the
 * per-master results, and the NOSCRIPT fallback (resend that call as
 * EVAL). Does not own: what a decision means (the lock's round function).
 *
 *   start = now; send to all N masters in this loop turn
 *   reply -> YES | NO | ERR(reason)     (classifier of the command)
 *   YES of an acquisition -> guard: COUNT | REFUSE (ERR ERESTARTED) |
 *                            PENDING (decided again when the read ends)
 *   yes >= quorum           -> decided: REACHED
 *   yes + unanswered < q    -> decided: BLOCKED (the NOs forbid it) or
 *                              FAILED (errors made it impossible)
 *   late replies            -> consumed; the round lives until the last
 *
 * References: each request in flight holds the round (refs); an attached
 * round holds its lock (lock.c). A detached round with no request left
 * goes back to the client's pool. */
#include <stdio.h>
#include <string.h>

#include "round.h"

static void on_guard_read(redlock__guard_waiter *w);
static void on_clock_read(redlock__guard_waiter *w);

static char *errbuf(const redlock__round *r, unsigned i) {
  return r->buf + (size_t)i * REDLOCK__ERRSTR_LEN;
}

/* The name a result shows for the node that decided master i's vote: a
 * copy when the node may be repointed (found by redlock-sim under ASan:
 * a cluster node repointed between the decision and the delivery freed
 * the name the result pointed to, and explain.c read it). */
static const char *node_name(redlock__round *r, unsigned i,
                             const redlock__node *n) {
  char *b;
  if (!n->redirects && !n->primary_only)
    return n->uri.display;   /* a plain master's node keeps its address */
  b = r->names + (size_t)i * REDLOCK__NODE_NAME;
  redlock__strlcpy(b, n->uri.display != NULL ? n->uri.display : "",
                   REDLOCK__NODE_NAME);
  return b;
}

redlock__round *redlock__round_get(redlock_client_t *c) {
  redlock__round *r;
  unsigned i;
  if (!redlock__queue_empty(&c->rounds.items)) {
    redlock__queue *q = c->rounds.items.next;
    redlock__queue_remove(q);
    r = (redlock__round *)q;   /* link is the first member */
  } else {
    size_t size = sizeof(*r) + c->n * sizeof(redlock_node_result) +
                  c->n * sizeof(redlock__guard_waiter) +
                  2 * c->n * sizeof(uint64_t) + c->n * sizeof(uint32_t) +
                  c->n * sizeof(uint16_t) + c->n * REDLOCK__ERRSTR_LEN +
                  c->n * REDLOCK__NODE_NAME + 3 * c->n;
    char *p = redlock__malloc(size);
    if (p == NULL)
      return NULL;
    r = (redlock__round *)p;
    p += sizeof(*r);
    r->res = (redlock_node_result *)p;
    p += c->n * sizeof(redlock_node_result);
    r->cw = (redlock__guard_waiter *)p;
    p += c->n * sizeof(redlock__guard_waiter);
    r->pend_conn = (uint64_t *)p;
    p += c->n * sizeof(uint64_t);
    r->pend_yes = (redlock__ns *)p;
    p += c->n * sizeof(redlock__ns);
    r->pend_seq = (uint32_t *)p;
    p += c->n * sizeof(uint32_t);
    r->vnode = (uint16_t *)p;
    p += c->n * sizeof(uint16_t);
    r->buf = p;
    p += c->n * REDLOCK__ERRSTR_LEN;
    r->names = p;
    p += c->n * REDLOCK__NODE_NAME;
    r->pend = (uint8_t *)p;
    p += c->n;
    r->nparts = (uint8_t *)p;
    p += c->n;
    r->left = (uint8_t *)p;
    memset(r->nparts, 0, 2 * (size_t)c->n);   /* nparts and left */
    r->part = NULL;
    memset(&r->cmd_buf, 0, sizeof(r->cmd_buf));
    for (i = 0; i < c->n; i++) {
      redlock__queue_init(&r->cw[i].link);
      r->cw[i].cb = on_clock_read;
      r->cw[i].owner = r;
      r->cw[i].idx = i;
    }
  }
  redlock__queue_init(&r->link);
  redlock__queue_init(&r->gw.link);
  r->gw.cb = on_guard_read;
  r->client = c;
  r->lock = NULL;
  r->decide = NULL;
  r->cmd = REDLOCK__CMD_SET_NX;
  r->all = 0;
  r->progress = 0;
  r->quorum_seen = 0;
  r->guarded = 0;
  r->clocked = 0;
  r->clock_waits = 0;
  r->needs_record = 0;
  r->needs_isolation = 0;
  r->decided = 0;
  r->waiting_guard = 0;
  r->redeliver = 0;
  r->yes = 0;
  r->no = 0;
  r->err = 0;
  r->refs = 0;
  r->start = 0;
  r->decided_ns = 0;
  r->ttl_ms = 0;
  r->value_max = 0;
  for (i = 0; i < c->n; i++) {
    redlock_node_result *res = &r->res[i];
    res->server = c->displays[i];
    res->node = node_name(r, i, &c->nodes[i]);
    res->vote = REDLOCK_VOTE_NONE;
    res->error = 0;
    res->errstr = "";
    res->latency_us = 0;
    res->holder = "";
    res->pttl_ms = -2;
    res->guard_wait_ms = -1;
    res->guard_window_ms = -1;
    res->guard_cause = REDLOCK_GUARD_NONE;
    res->rw_lock = 0;
    errbuf(r, i)[0] = '\0';
    r->pend[i] = 0;
    r->vnode[i] = (uint16_t)i;
  }
  if (c->n_nodes > c->n)   /* only clusters' votes have parts */
    memset(r->nparts, 0, 2 * (size_t)c->n);   /* nparts and left */
  return r;
}

/* Stops every wait of the round on the guard (reads, clock readings). */
static void round_unwait_all(redlock__round *r) {
  unsigned i;
  if (r->waiting_guard) {
    redlock__guard_unwait(&r->gw);
    r->waiting_guard = 0;
  }
  for (i = 0; r->clock_waits > 0 && i < r->client->n; i++)
    if (!redlock__queue_empty(&r->cw[i].link)) {
      redlock__guard_unwait(&r->cw[i]);
      r->clock_waits--;
    }
}

static inline void round_unwait(redlock__round *r) {
  if (r->waiting_guard || r->clock_waits > 0)
    round_unwait_all(r);
}

static void round_free(redlock__queue *link) {
  redlock__round *r = (redlock__round *)link;
  redlock__buf_free(&r->cmd_buf);
  redlock__free(r->part);
  redlock__free(r);
}

static void round_put(redlock__round *r) {
  round_unwait(r);
  r->client->rounds.free_item = round_free;   /* the client frees them */
  redlock__queue_insert_tail(&r->client->rounds.items, &r->link);
}

void redlock__round_detach(redlock__round *r) {
  redlock_lock_t *l = r->lock;
  const redlock__round_owner *owner = r->owner;
  round_unwait(r);
  r->lock = NULL;
  if (r->refs == 0)
    round_put(r);
  if (l != NULL)
    owner->release(l);
}

void redlock__round_stop(redlock__round *r) {
  r->decided = 1;
  r->all = 0;
  round_unwait(r);
}

/* ---- votes --------------------------------------------------------------- */

static void set_result(redlock__round *r, unsigned i, redlock_vote_t vote,
                       int error, const char *errstr, redlock__ns now,
                       redlock__ns sent) {
  redlock_node_result *res = &r->res[i];
  res->vote = vote;
  res->error = error;
  res->guard_wait_ms = -1;
  res->guard_window_ms = -1;
  res->latency_us = now > sent ? (now - sent) / REDLOCK__NS_PER_US : 0;
  if (r->client->n_nodes > r->client->n)   /* a cluster's primary */
    res->node = node_name(r, i, &r->client->nodes[r->vnode[i]]);
  if (errstr != errbuf(r, i))
    redlock__strlcpy(errbuf(r, i), errstr, REDLOCK__ERRSTR_LEN);
  res->errstr = errbuf(r, i);
  switch (vote) {
    case REDLOCK_VOTE_YES:
      r->yes++;
      break;
    case REDLOCK_VOTE_NO:
      r->no++;
      break;
    case REDLOCK_VOTE_ERR:
      r->err++;
      break;
    case REDLOCK_VOTE_NONE:
      break;
  }
}

/* `now` 0: read the clock only if the round is decided (a round just sent
 * is not, as a rule: a clock read per round saved). */
static void round_check(redlock__round *r, redlock__ns now) {
  redlock_client_t *c = r->client;
  redlock__round_state st;
  if (r->decided || r->lock == NULL)
    return;
  st = redlock__round_decide(c->n, c->quorum, r->yes, r->no, r->err);
  if (r->all) {
    if (r->yes + r->no + r->err < c->n) {
      if (r->progress && !r->quorum_seen && r->yes + r->no >= c->quorum) {
        /* Tell the owner once: it may not want to wait for a hung
         * minority (the command timeout) any longer. */
        r->quorum_seen = 1;
        r->decide(r, REDLOCK__ROUND_PENDING,
                  now != 0 ? now : redlock__sys_now(r->client->sys));
      }
      return;
    }
    st = r->yes + r->no >= c->quorum ? REDLOCK__ROUND_REACHED
                                     : REDLOCK__ROUND_FAILED;
  } else if (st == REDLOCK__ROUND_PENDING) {
    return;
  }
  if (now == 0)
    now = redlock__sys_now(r->client->sys);
  r->decided = 1;
  r->decided_ns = now;
  round_unwait(r);
  r->decide(r, st, now);
}

/* A YES that must hold the restart guard's record of this round's ttl
 * (auto guard): the node must have confirmed a record >= the ttl on the
 * same connection, i.e. the same instance, before this command. */
static int has_record(redlock__round *r, unsigned node) {
  return !r->needs_record ||
         redlock__guard_has_record(&r->client->guard, node, r->ttl_ms);
}

/* A YES that grants or keeps a lock counts only where a sentinel group's
 * primary refuses writes once cut off from its replicas (node.c; DESIGN,
 * Sentinel): else an isolated old primary and the promoted replica could
 * each complete a grant. 0 with the reason in why. */
static int isolated(redlock__round *r, unsigned node, char *why,
                    size_t len) {
  return !r->needs_isolation ||
         redlock__node_isolated(&r->client->nodes[node], why, len);
}

/* A guard's verdict on master i's YES, about `node`: 1 counts, 0 refused
 * (result set), -1 waits for the guard (the record's read, a handshake,
 * the others' clocks). */
static int apply_verdict(redlock__round *r, unsigned i, unsigned node,
                         redlock__guard_verdict v, const char *why,
                         int64_t wait_ms, int64_t window_ms, int cause,
                         redlock__ns now, redlock__ns sent) {
  redlock_client_t *c = r->client;
  switch (v) {
    case REDLOCK__GUARD_COUNT:
      return 1;
    case REDLOCK__GUARD_REFUSE:
      r->pend[i] = 0;
      r->vnode[i] = (uint16_t)node;
      set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, why, now, sent);
      c->nodes[node].st.guard_refusals++;
      r->res[i].guard_wait_ms = wait_ms;
      r->res[i].guard_window_ms = window_ms;
      r->res[i].guard_cause = cause;
      return 0;
    case REDLOCK__GUARD_PENDING:
      r->pend[i] = 1;
      r->res[i].latency_us = (now - sent) / REDLOCK__NS_PER_US;
      if (!r->waiting_guard) {
        r->waiting_guard = 1;
        redlock__guard_wait(&c->guard, &r->gw);
      }
      return -1;
  }
  return 0;
}

/* The guard's judgement of one node's YES (the vote's node, or each part
 * of a split vote): 1 counts, 0 decided otherwise (result set), -1 waits
 * (a clock reading, or the record's read). */
static inline __attribute__((always_inline)) int
judge_node(redlock__round *r, unsigned i, unsigned node,
                      uint32_t seq, uint64_t conn, redlock__ns now,
                      redlock__ns sent) {
  redlock_client_t *c = r->client;
  char why[REDLOCK__ERRSTR_LEN + 80];
  int64_t wait_ms, window_ms;
  int cause;
  redlock__guard_verdict v;
  if (r->pend[i] && c->nodes[node].teardowns != conn) {
    /* Its connection was lost while the vote waited. */
    r->pend[i] = 0;
    r->vnode[i] = (uint16_t)node;
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_EIO,
               "connection lost before the vote counted", now, sent);
    return 0;
  }
  if (r->clocked) {
    switch (redlock__guard_clock_ready(&c->guard, node, seq, conn)) {
      case 1:
        break;
      case 0:
        /* The TIME behind the SET is on its way (same flush). */
        r->pend[i] = 2;
        r->res[i].latency_us = (now - sent) / REDLOCK__NS_PER_US;
        if (redlock__queue_empty(&r->cw[i].link)) {
          redlock__guard_wait_clock(&c->guard, node, &r->cw[i]);
          r->clock_waits++;
        }
        return -1;
      default:
        r->pend[i] = 0;
        r->vnode[i] = (uint16_t)node;
        set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_EIO,
                   "connection lost before the vote counted", now, sent);
        return 0;
    }
  }
  if (!isolated(r, node, why, sizeof(why))) {
    r->pend[i] = 0;
    r->vnode[i] = (uint16_t)node;
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, why, now, sent);
    return 0;
  }
  if (!has_record(r, node)) {
    r->pend[i] = 0;
    r->vnode[i] = (uint16_t)node;
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED,
               "restart guard: ttl record not confirmed on this master", now,
               sent);
    r->res[i].guard_cause = REDLOCK_GUARD_RECORD;
    return 0;
  }
  v = redlock__guard_check(&c->guard, node, r->ttl_ms, now, why, sizeof(why),
                           &wait_ms, &window_ms, &cause);
  return apply_verdict(r, i, node, v, why, wait_ms, window_ms, cause, now,
                       sent);
}

/* Once master i's own node(s) count: the master's other nodes (a
 * cluster's primaries: what a young one lost may have moved to the node
 * that voted, guard.c 7.). Returns as judge_node. */
static int judge_peers(redlock__round *r, unsigned i, unsigned node,
                       redlock__ns now, redlock__ns sent) {
  redlock_client_t *c = r->client;
  char why[REDLOCK__ERRSTR_LEN + 80];
  int64_t wait_ms, window_ms;
  int cause;
  unsigned peer = node;
  redlock__guard_verdict v;
  if (c->n_nodes == c->n)
    return 1;   /* every master is one node */
  v = redlock__guard_check_peers(&c->guard, node, r->ttl_ms, now,
                                 r->pend_yes[i], why, sizeof(why), &wait_ms,
                                 &window_ms, &cause, &peer);
  return apply_verdict(r, i, peer, v, why, wait_ms, window_ms, cause, now,
                       sent);
}

static redlock__part *part_of(const redlock__round *r, unsigned i,
                              unsigned k) {
  return &r->part[(size_t)i * REDLOCK__MAX_PARTS + k];
}

/* A YES of an acquisition: does this master's vote count? With the clock
 * check, only once the reading that followed it came (guard.c, 3.). A
 * split vote counts when every part's node does. */
static void guard_vote(redlock__round *r, unsigned i, redlock__ns now,
                       redlock__ns sent) {
  unsigned k;
  if (r->nparts[i] == 0) {
    unsigned node = r->vnode[i];
    if (judge_node(r, i, node, r->pend_seq[i], r->pend_conn[i], now,
                   sent) == 1 &&
        judge_peers(r, i, node, now, sent) == 1) {
      r->pend[i] = 0;
      set_result(r, i, REDLOCK_VOTE_YES, 0, "", now, sent);
    }
    return;
  }
  for (k = 0; k < r->nparts[i]; k++) {
    redlock__part *p = part_of(r, i, k);
    if (judge_node(r, i, p->node, p->seq, p->conn, now, sent) != 1)
      return;
  }
  if (judge_peers(r, i, part_of(r, i, 0)->node, now, sent) != 1)
    return;
  r->pend[i] = 0;
  set_result(r, i, REDLOCK_VOTE_YES, 0, "", now, sent);
}

/* Votes waiting on the guard are judged again. */
static void rejudge(redlock__round *r, unsigned i, redlock__ns now) {
  guard_vote(r, i, now,
             now - (redlock__ns)r->res[i].latency_us * REDLOCK__NS_PER_US);
}

static void on_guard_read(redlock__guard_waiter *w) {
  redlock__round *r = REDLOCK__CONTAINER_OF(w, redlock__round, gw);
  redlock_client_t *c = r->client;
  redlock__ns now = redlock__sys_now(r->client->sys);
  unsigned i;
  r->waiting_guard = 0;
  if (r->lock == NULL || r->decided)
    return;
  for (i = 0; i < c->n; i++)
    if (r->pend[i] == 1)
      rejudge(r, i, now);
  round_check(r, now);
}

static void on_clock_read(redlock__guard_waiter *w) {
  redlock__round *r = w->owner;
  const redlock__node *n = &r->client->nodes[r->vnode[w->idx]];
  /* Woken by that reading's reply (its time: no clock read), or by the
   * connection going down. (A split vote waits on one part's node at a
   * time: the time is that node's reading.) */
  redlock__ns now = n->clock.reply_ns != 0 && n->state == REDLOCK__NODE_UP
                        ? n->clock.reply_ns : redlock__sys_now(r->client->sys);
  r->clock_waits--;   /* its link was taken off the list */
  if (r->lock == NULL || r->decided || r->pend[w->idx] != 2)
    return;
  rejudge(r, w->idx, now);
  round_check(r, now);
}

static void round_submit(redlock__round *r, unsigned i, int eval);
static void part_submit(redlock__round *r, unsigned i, unsigned k, int eval);

/* Commands over a lock's several keys: on a cluster master, split into
 * one part per slot. */
int redlock__multi_keys(redlock__cmd cmd) {
  return cmd == REDLOCK__CMD_MULTI_ACQUIRE ||
         cmd == REDLOCK__CMD_MULTI_RELEASE ||
         cmd == REDLOCK__CMD_MULTI_EXTEND || cmd == REDLOCK__CMD_MULTI_PTTL ||
         cmd == REDLOCK__CMD_FORCE_RELEASE;
}

/* Commands whose parts add up (a release deletes what it finds where it
 * finds it) or whose value is the largest part's; the others need every
 * part to say yes (an acquisition, an extension, the records). */
static int parts_any(redlock__cmd cmd) {
  return cmd == REDLOCK__CMD_MULTI_RELEASE ||
         cmd == REDLOCK__CMD_FORCE_RELEASE;
}

/* A split vote's parts so far: decides master i when they allow. */
static void parts_combine(redlock__round *r, unsigned i, redlock__ns now,
                          redlock__ns sent) {
  unsigned k, yes = 0, no = 0, err = 0;
  int64_t sum = 0, max = INT64_MIN;
  const redlock__part *first_no = NULL, *first_err = NULL;
  if (r->res[i].vote != REDLOCK_VOTE_NONE || r->pend[i])
    return;   /* decided, or its YES waits on the guard */
  for (k = 0; k < r->nparts[i]; k++) {
    const redlock__part *p = part_of(r, i, k);
    switch (p->state) {
      case REDLOCK_VOTE_YES:
        yes++;
        sum += p->value;
        if (p->value > max)
          max = p->value;
        break;
      case REDLOCK_VOTE_NO:
        no++;
        if (first_no == NULL)
          first_no = p;
        break;
      case REDLOCK_VOTE_ERR:
        err++;
        if (first_err == NULL)
          first_err = p;
        break;
      case REDLOCK_VOTE_NONE:
        break;
    }
  }
  if (!parts_any(r->cmd)) {
    if (first_no != NULL) {
      r->vnode[i] = first_no->node;
      set_result(r, i, REDLOCK_VOTE_NO, 0, "", now, sent);
      return;
    }
    if (first_err != NULL) {
      r->vnode[i] = first_err->node;
      set_result(r, i, REDLOCK_VOTE_ERR, r->res[i].error, errbuf(r, i), now,
                 sent);
      return;
    }
    if (r->left[i] > 0)
      return;
  } else {
    if (r->left[i] > 0)
      return;
    if (yes == 0) {
      const redlock__part *p = first_no != NULL ? first_no : first_err;
      r->vnode[i] = p->node;
      if (first_no != NULL)
        set_result(r, i, REDLOCK_VOTE_NO, 0, "", now, sent);
      else
        set_result(r, i, REDLOCK_VOTE_ERR, r->res[i].error, errbuf(r, i),
                   now, sent);
      return;
    }
    max = sum;
  }
  r->vnode[i] = part_of(r, i, 0)->node;
  if (max > r->value_max)
    r->value_max = max;
  if (r->guarded) {
    r->pend_yes[i] = now;
    guard_vote(r, i, now, sent);
    return;
  }
  for (k = 0; k < r->nparts[i]; k++)
    if (!has_record(r, part_of(r, i, k)->node)) {
      r->vnode[i] = part_of(r, i, k)->node;
      set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED,
                 "restart guard: ttl record not confirmed on this master",
                 now, sent);
      return;
    }
  set_result(r, i, REDLOCK_VOTE_YES, 0, "", now, sent);
  if ((r->cmd == REDLOCK__CMD_MULTI_PTTL) && max != INT64_MIN)
    r->res[i].pttl_ms = max;
}

/* A ttl record round's reply tells the guard what the node holds: every
 * answer updates what we know, even a late one. */
static void learn_record(redlock__round *r, unsigned node,
                         const redlock__reply *reply) {
  redlock__vote v;
  if (reply == NULL || (r->cmd != REDLOCK__CMD_MAXTTL_RAISE &&
                        r->cmd != REDLOCK__CMD_MAXTTL_SET))
    return;
  redlock__classify(r->cmd, reply, &v);
  if (v.vote == REDLOCK_VOTE_YES)
    redlock__guard_record(&r->client->guard, node, v.value);
  else if (v.error == REDLOCK_ESERVER)
    redlock__guard_record_failed(&r->client->guard, node);
}

/* A reply (or failure) of part k of master i. */
static void on_part_reply(redlock__round *r, unsigned i, unsigned k,
                          redlock__req *req, const redlock__reply *reply,
                          int error, const char *errstr, redlock__ns now) {
  redlock__part *p = part_of(r, i, k);
  redlock__vote v;
  if (p->state != REDLOCK_VOTE_NONE)
    return;
  p->node = (uint16_t)req->node->index;
  learn_record(r, p->node, reply);
  if (r->lock == NULL || (r->decided && !r->all))
    return;
  if (reply == NULL) {
    v.vote = REDLOCK_VOTE_ERR;
    v.error = error;
    v.errstr = errstr;
    v.value = 0;
  } else {
    redlock__classify(r->cmd, reply, &v);
    if (v.noscript && !req->tag.round.eval) {
      part_submit(r, i, k, 1);   /* again as EVAL */
      return;
    }
  }
  r->left[i]--;
  p->state = (uint8_t)v.vote;
  p->value = v.value;
  if (v.vote == REDLOCK_VOTE_YES) {
    p->conn = req->node->teardowns;
    p->seq = req->clock_seq;
  } else if (v.vote == REDLOCK_VOTE_ERR && r->res[i].error == 0) {
    /* The first part that failed says why. */
    r->res[i].error = v.error;
    redlock__strlcpy(errbuf(r, i), v.errstr, REDLOCK__ERRSTR_LEN);
  }
  parts_combine(r, i, now, req->sent_ns);
  round_check(r, now);
}

static void on_round_reply(redlock__req *req, const redlock__reply *reply,
                           int error, const char *errstr) {
  redlock__round *r = req->owner;
  unsigned i = req->idx;
  redlock__node *node = req->node;
  /* The node read the clock when the reply came (one read per reply). */
  redlock__ns now = reply != NULL ? req->reply_ns : redlock__sys_now(r->client->sys);
  redlock__vote v;
  r->refs--;
  if (r->nparts[i] > 0) {
    if (r->lock == NULL) {
      /* Detached: the records still learn, then the last late reply
       * gives the round back. */
      on_part_reply(r, i, req->tag.round.part, req, reply, error, errstr, now);
      if (r->refs == 0)
        round_put(r);
      return;
    }
    on_part_reply(r, i, req->tag.round.part, req, reply, error, errstr, now);
    return;
  }
  r->vnode[i] = (uint16_t)node->index;
  learn_record(r, node->index, reply);
  if (r->lock == NULL) {
    if (r->refs == 0)
      round_put(r);   /* detached: the last late reply */
    return;
  }
  if (r->decided && !r->all)
    return;   /* a late reply of a decided round */
  if (reply == NULL) {
    set_result(r, i, REDLOCK_VOTE_ERR, error, errstr, now, req->sent_ns);
    round_check(r, now);
    return;
  }
  if (r->owner->reply != NULL)
    r->owner->reply(r, i, reply);
  redlock__classify(r->cmd, reply, &v);
  if (v.noscript && !req->tag.round.eval) {
    /* The script cache was flushed: this call again as EVAL (which also
     * caches it again). */
    round_submit(r, i, 1);
    round_check(r, now);
    return;
  }
  if (v.vote == REDLOCK_VOTE_YES && v.value > r->value_max)
    r->value_max = v.value;
  if (v.vote == REDLOCK_VOTE_YES && r->guarded) {
    r->pend_conn[i] = node->teardowns;
    r->pend_seq[i] = req->clock_seq;
    r->pend_yes[i] = now;
    if (r->clocked && (int32_t)(node->clock_done - req->clock_seq) < 0) {
      /* The usual case: the TIME behind it is on its way. */
      r->pend[i] = 2;
      r->res[i].latency_us = (now - req->sent_ns) / REDLOCK__NS_PER_US;
      redlock__guard_wait_clock(&r->client->guard, node->index, &r->cw[i]);
      r->clock_waits++;
      return;
    }
    r->pend[i] = 0;
    guard_vote(r, i, now, req->sent_ns);
  } else if (v.vote == REDLOCK_VOTE_YES &&
             !isolated(r, node->index, errbuf(r, i), REDLOCK__ERRSTR_LEN)) {
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, errbuf(r, i), now,
               req->sent_ns);
  } else if (v.vote == REDLOCK_VOTE_YES && !has_record(r, node->index)) {
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED,
               "restart guard: ttl record not confirmed on this master", now,
               req->sent_ns);
  } else {
    set_result(r, i, v.vote, v.error, v.errstr, now, req->sent_ns);
    if (r->cmd == REDLOCK__CMD_INSPECT && v.error == 0) {
      /* The result shows the key's value and ttl. */
      size_t n = v.holder_len < REDLOCK__ERRSTR_LEN - 1
                     ? v.holder_len : REDLOCK__ERRSTR_LEN - 1;
      memcpy(errbuf(r, i), v.holder, n);
      errbuf(r, i)[n] = '\0';
      r->res[i].holder = errbuf(r, i);
      r->res[i].errstr = "";
      r->res[i].pttl_ms = v.value;
      r->res[i].rw_lock = v.rw;
    } else if ((r->cmd == REDLOCK__CMD_PTTL ||
                r->cmd == REDLOCK__CMD_MULTI_PTTL) && v.error == 0) {
      r->res[i].pttl_ms = v.value;
    }
  }
  round_check(r, now);
}

/* The round's command, encoded once for every plain master (EVALSHA); 0
 * or ENOMEM. */
static int round_encode(redlock__round *r) {
  const char *argv[REDLOCK__ARGV_MAX];
  size_t lens[REDLOCK__ARGV_MAX];
  char nums[3][24];
  int argc = r->owner->argv(r, 0u, NULL, argv, lens, nums);
  redlock__buf_reset(&r->cmd_buf);
  return redlock__resp_cmd(&r->cmd_buf, argc, argv, lens);
}

static int req_flags(const redlock__round *r) {
  return r->redeliver ? REDLOCK__REQ_REDELIVER
         : r->clocked ? REDLOCK__REQ_CLOCK
                      : 0;
}

/* A request's own deadline, the owner's (an acquisition's wait). */
static redlock__ns req_until(const redlock__round *r) {
  return r->lock != NULL ? r->owner->until(r) : 0;
}

/* ---- cluster masters ----------------------------------------------------- */

/* Sends part k of master i (one that routes by slot). */
static void part_submit(redlock__round *r, unsigned i, unsigned k,
                        int eval) {
  redlock_client_t *c = r->client;
  redlock__master *m = &c->masters[i];
  const char *argv[REDLOCK__ARGV_MAX];
  size_t lens[REDLOCK__ARGV_MAX];
  char nums[3][24];
  redlock__argv_sub sub;
  redlock__key_groups g;
  redlock__node *n;
  redlock__req *req;
  int argc, rc = REDLOCK_ENOMEM;
  memset(&sub, 0, sizeof(sub));
  if (r->cmd == REDLOCK__CMD_MAXTTL_RAISE || r->cmd == REDLOCK__CMD_MAXTTL_SET) {
    /* Every primary keeps its own copy of the record. */
    n = &c->nodes[part_of(r, i, k)->node];
    sub.rec = n->rec_maxttl;
    sub.rec_len = n->rec_maxttl_len;
  } else {
    r->owner->groups(r, &g);
    n = redlock__groups_part(&g, k, m, &sub);
  }
  /* sub points into g: encoded while g lives. */
  argc = r->owner->argv(r, eval ? REDLOCK__ARGV_EVAL : 0u, &sub, argv, lens,
                        nums);
  part_of(r, i, k)->node = (uint16_t)n->index;
  req = redlock__node_req(n);
  if (req != NULL) {
    req->cb = on_round_reply;
    req->owner = r;
    req->kind = (uint8_t)r->cmd;
    req->tag.round.part = (uint16_t)k;
    req->tag.round.eval = (uint8_t)(eval != 0);
    req->flags = (uint8_t)req_flags(r);
    req->until_ns = req_until(r);
    if (r->cmd == REDLOCK__CMD_MAXTTL_RAISE ||
        r->cmd == REDLOCK__CMD_MAXTTL_SET)
      req->flags |= REDLOCK__REQ_HERE;
    rc = redlock__node_submit(n, req, argc, argv, lens);
  }
  if (rc == 0) {
    r->refs++;
    return;
  }
  {
    redlock__part *p = part_of(r, i, k);
    redlock__ns now = redlock__sys_now(r->client->sys);
    r->left[i]--;
    p->state = REDLOCK_VOTE_ERR;
    if (r->res[i].error == 0) {
      r->res[i].error = rc == REDLOCK_ENOMEM || rc == REDLOCK_ECANCELED
                            ? rc : REDLOCK_EIO;
      redlock__strlcpy(errbuf(r, i),
                       rc == REDLOCK_ENOMEM ? "out of memory" : n->errstr,
                       REDLOCK__ERRSTR_LEN);
    }
    parts_combine(r, i, now, now);
  }
}

/* A master that routes by slot: how many parts (0: one command routed by
 * the key's slot). With `fill`, the records' parts get their nodes (every
 * node that keeps a copy of the record). */
static unsigned master_parts(redlock__round *r, unsigned i, int fill) {
  redlock__master *m = &r->client->masters[i];
  redlock__cmd cmd = r->cmd;
  unsigned k, np = 0;
  if (cmd == REDLOCK__CMD_MAXTTL_RAISE || cmd == REDLOCK__CMD_MAXTTL_SET) {
    uint16_t nodes[REDLOCK__MAX_PARTS];
    np = m->ops->record_nodes(m, nodes, REDLOCK__MAX_PARTS);
    for (k = 0; fill && k < np; k++)
      part_of(r, i, k)->node = nodes[k];
    return np;
  }
  if (redlock__multi_keys(cmd)) {
    redlock__key_groups g;
    np = r->owner->groups(r, &g);
    return np > 1 ? np : 0;
  }
  return 0;
}

/* Commands whose arguments differ on a master that routes by slot (a
 * same-slot name, a key left out): the others go out as the bytes encoded
 * once. */
static int slot_names(redlock__cmd cmd) {
  return cmd == REDLOCK__CMD_FENCED_ACQUIRE || cmd == REDLOCK__CMD_FENCE ||
         cmd == REDLOCK__CMD_INSPECT || cmd == REDLOCK__CMD_RW_ACQUIRE ||
         cmd == REDLOCK__CMD_RW_EXTEND || cmd == REDLOCK__CMD_RW_RELEASE ||
         cmd == REDLOCK__CMD_RW_GIVEUP;
}

static void round_submit(redlock__round *r, unsigned i, int eval) {
  redlock_client_t *c = r->client;
  redlock__master *m = &c->masters[i];
  /* The key's slot only where it routes (a CRC16 per new handle). */
  redlock__node *n = redlock__master_route(
      m, m->ops->by_slot ? r->owner->key_slot(r) : 0);
  redlock__req *req;
  int rc = REDLOCK_ENOMEM;
  r->vnode[i] = (uint16_t)n->index;
  req = redlock__node_req(n);
  if (req != NULL) {
    req->cb = on_round_reply;
    req->owner = r;
    req->kind = (uint8_t)r->cmd;
    req->tag.round.eval = (uint8_t)(eval != 0);
    req->flags = (uint8_t)req_flags(r);
    req->until_ns = req_until(r);
    if (eval || (m->ops->by_slot && slot_names(r->cmd))) {
      /* NOSCRIPT: this master alone gets the script's text; a cluster's
       * node gets its own names (slot.c). */
      const char *argv[REDLOCK__ARGV_MAX];
      size_t lens[REDLOCK__ARGV_MAX];
      char nums[3][24];
      redlock__argv_sub sub;
      int argc;
      memset(&sub, 0, sizeof(sub));
      argc = r->owner->argv(r, eval ? REDLOCK__ARGV_EVAL : 0u,
                            m->ops->by_slot ? &sub : NULL, argv, lens,
                            nums);
      rc = redlock__node_submit(n, req, argc, argv, lens);
    } else {
      rc = redlock__node_submit_raw(n, req, r->cmd_buf.data,
                                    r->cmd_buf.len);
    }
  }
  if (rc == 0) {
    r->refs++;
    return;
  }
  set_result(r, i, REDLOCK_VOTE_ERR, rc == REDLOCK_ECANCELED ? rc
                                      : rc == REDLOCK_ENOMEM ? rc
                                                             : REDLOCK_EIO,
             rc == REDLOCK_ENOMEM ? "out of memory" : n->errstr, 0, 0);
}

/* Master i (a cluster's) with parts: every part goes out. */
static void parts_send(redlock__round *r, unsigned i) {
  unsigned k, np;
  if (r->part == NULL) {
    r->part = redlock__calloc((size_t)r->client->n * REDLOCK__MAX_PARTS,
                              sizeof(*r->part));
    if (r->part == NULL) {
      set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ENOMEM, "out of memory", 0,
                 0);
      return;
    }
  }
  np = master_parts(r, i, 1);
  if (np == 0) {
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_EIO,
               "no primary of the cluster is known", 0, 0);
    return;
  }
  r->nparts[i] = (uint8_t)np;
  r->left[i] = (uint8_t)np;
  for (k = 0; k < np; k++) {
    redlock__part *p = part_of(r, i, k);
    p->state = REDLOCK_VOTE_NONE;
    p->value = 0;
  }
  for (k = 0; k < np && r->res[i].vote == REDLOCK_VOTE_NONE; k++)
    part_submit(r, i, k, 0);
}

void redlock__round_send(redlock__round *r, const redlock__round *only_yes) {
  redlock_client_t *c = r->client;
  unsigned i;
  int enc = round_encode(r);
  for (i = 0; i < c->n; i++) {
    if (enc != 0) {
      set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ENOMEM, "out of memory", 0,
                 0);
      continue;
    }
    if (only_yes != NULL && only_yes->res[i].vote != REDLOCK_VOTE_YES) {
      set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ENOTHELD,
                 "no key of ours there", 0, 0);
      continue;
    }
    if (c->masters[i].ops->by_slot &&
        (r->cmd == REDLOCK__CMD_MAXTTL_RAISE ||
         r->cmd == REDLOCK__CMD_MAXTTL_SET || master_parts(r, i, 0) > 0)) {
      parts_send(r, i);
      continue;
    }
    round_submit(r, i, 0);
  }
  round_check(r, 0);
}

