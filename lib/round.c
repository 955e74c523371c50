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

#include "lock.h"

static void on_guard_read(redlock__guard_waiter *w);
static void on_clock_read(redlock__guard_waiter *w);

static char *errbuf(const redlock__round *r, unsigned i) {
  return r->buf + (size_t)i * REDLOCK__ERRSTR_LEN;
}

redlock__round *redlock__round_get(redlock_client_t *c) {
  redlock__round *r;
  unsigned i;
  if (!redlock__queue_empty(&c->free_rounds)) {
    redlock__queue *q = c->free_rounds.next;
    redlock__queue_remove(q);
    r = (redlock__round *)q;   /* link is the first member */
  } else {
    size_t size = sizeof(*r) + c->n * sizeof(redlock_node_result) +
                  c->n * sizeof(redlock__guard_waiter) +
                  c->n * sizeof(uint64_t) + c->n * sizeof(uint32_t) +
                  c->n * REDLOCK__ERRSTR_LEN + c->n;
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
    r->pend_seq = (uint32_t *)p;
    p += c->n * sizeof(uint32_t);
    r->buf = p;
    p += c->n * REDLOCK__ERRSTR_LEN;
    r->pend = (uint8_t *)p;
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
    res->server = c->nodes[i].uri.display;
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
  }
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

void redlock__round_free(redlock__queue *link) {
  redlock__round *r = (redlock__round *)link;
  redlock__buf_free(&r->cmd_buf);
  redlock__free(r);
}

static void round_put(redlock__round *r) {
  round_unwait(r);
  redlock__queue_insert_tail(&r->client->free_rounds, &r->link);
}

void redlock__round_detach(redlock__round *r) {
  redlock_lock_t *l = r->lock;
  round_unwait(r);
  r->lock = NULL;
  if (r->refs == 0)
    round_put(r);
  if (l != NULL)
    redlock__lock_unref(l);
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
        r->decide(r, REDLOCK__ROUND_PENDING, now);
      }
      return;
    }
    st = r->yes + r->no >= c->quorum ? REDLOCK__ROUND_REACHED
                                     : REDLOCK__ROUND_FAILED;
  } else if (st == REDLOCK__ROUND_PENDING) {
    return;
  }
  r->decided = 1;
  r->decided_ns = now;
  round_unwait(r);
  r->decide(r, st, now);
}

/* A YES that must hold the restart guard's record of this round's ttl
 * (auto guard): the master must have confirmed a record >= the ttl on
 * the same connection, i.e. the same instance, before this command. */
static int has_record(redlock__round *r, unsigned i) {
  return !r->needs_record ||
         redlock__guard_has_record(&r->client->guard, i, r->ttl_ms);
}

/* A YES of an acquisition: does this master's vote count? With the clock
 * check, only once the reading that followed it came (guard.c, 3.). */
static void guard_vote(redlock__round *r, unsigned i, redlock__ns now,
                       redlock__ns sent) {
  redlock_client_t *c = r->client;
  char why[REDLOCK__ERRSTR_LEN + 80];
  int64_t wait_ms, window_ms;
  int cause;
  if (r->pend[i] && c->nodes[i].teardowns != r->pend_conn[i]) {
    /* Its connection was lost while the vote waited. */
    r->pend[i] = 0;
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_EIO,
               "connection lost before the vote counted", now, sent);
    return;
  }
  if (r->clocked) {
    switch (redlock__guard_clock_ready(&c->guard, i, r->pend_seq[i],
                                       r->pend_conn[i])) {
      case 1:
        break;
      case 0:
        /* The TIME behind the SET is on its way (same flush). */
        r->pend[i] = 2;
        r->res[i].latency_us = (now - sent) / REDLOCK__NS_PER_US;
        if (redlock__queue_empty(&r->cw[i].link)) {
          redlock__guard_wait_clock(&c->guard, i, &r->cw[i]);
          r->clock_waits++;
        }
        return;
      default:
        r->pend[i] = 0;
        set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_EIO,
                   "connection lost before the vote counted", now, sent);
        return;
    }
  }
  if (!has_record(r, i)) {
    r->pend[i] = 0;
    set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED,
               "restart guard: ttl record not confirmed on this master", now,
               sent);
    r->res[i].guard_cause = REDLOCK_GUARD_RECORD;
    return;
  }
  switch (redlock__guard_check(&c->guard, i, r->ttl_ms, now, why,
                               sizeof(why), &wait_ms, &window_ms, &cause)) {
    case REDLOCK__GUARD_COUNT:
      r->pend[i] = 0;
      set_result(r, i, REDLOCK_VOTE_YES, 0, "", now, sent);
      return;
    case REDLOCK__GUARD_REFUSE:
      r->pend[i] = 0;
      set_result(r, i, REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, why, now, sent);
      c->nodes[i].st.guard_refusals++;
      r->res[i].guard_wait_ms = wait_ms;
      r->res[i].guard_window_ms = window_ms;
      r->res[i].guard_cause = cause;
      return;
    case REDLOCK__GUARD_PENDING:
      r->pend[i] = 1;
      r->res[i].latency_us = (now - sent) / REDLOCK__NS_PER_US;
      if (!r->waiting_guard) {
        r->waiting_guard = 1;
        redlock__guard_wait(&c->guard, &r->gw);
      }
      return;
  }
}

/* Votes waiting on the guard are judged again. */
static void rejudge(redlock__round *r, unsigned i, redlock__ns now) {
  guard_vote(r, i, now,
             now - (redlock__ns)r->res[i].latency_us * REDLOCK__NS_PER_US);
}

static void on_guard_read(redlock__guard_waiter *w) {
  redlock__round *r = REDLOCK__CONTAINER_OF(w, redlock__round, gw);
  redlock_client_t *c = r->client;
  redlock__ns now = redlock__now_ns();
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
  const redlock__node *n = &r->client->nodes[w->idx];
  /* Woken by that reading's reply (its time: no clock read), or by the
   * connection going down. */
  redlock__ns now = n->clock.reply_ns != 0 && n->state == REDLOCK__NODE_UP
                        ? n->clock.reply_ns : redlock__now_ns();
  r->clock_waits--;   /* its link was taken off the list */
  if (r->lock == NULL || r->decided || r->pend[w->idx] != 2)
    return;
  rejudge(r, w->idx, now);
  round_check(r, now);
}

static void round_submit(redlock__round *r, unsigned i, int eval);

static void on_round_reply(redlock__req *req, const redlock__reply *reply,
                           int error, const char *errstr) {
  redlock__round *r = req->owner;
  unsigned i = req->idx;
  /* The node read the clock when the reply came (one read per reply). */
  redlock__ns now = reply != NULL ? req->reply_ns : redlock__now_ns();
  redlock__vote v;
  r->refs--;
  if (reply != NULL && (r->cmd == REDLOCK__CMD_MAXTTL_RAISE ||
                        r->cmd == REDLOCK__CMD_MAXTTL_SET)) {
    /* Every answer updates what we know, even a late one. */
    redlock__classify(r->cmd, reply, &v);
    if (v.vote == REDLOCK_VOTE_YES)
      redlock__guard_record(&r->client->guard, i, v.value);
    else if (v.error == REDLOCK_ESERVER)
      redlock__guard_record_failed(&r->client->guard, i);
  }
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
  redlock__classify(r->cmd, reply, &v);
  if (v.noscript && !(req->tag & 1)) {
    /* The script cache was flushed: this call again as EVAL (which also
     * caches it again). */
    round_submit(r, i, 1);
    round_check(r, now);
    return;
  }
  if (v.vote == REDLOCK_VOTE_YES && v.value > r->value_max)
    r->value_max = v.value;
  if (v.vote == REDLOCK_VOTE_YES && r->guarded) {
    r->pend_conn[i] = r->client->nodes[i].teardowns;
    r->pend_seq[i] = req->clock_seq;
    if (r->clocked && (int32_t)(r->client->nodes[i].clock_done -
                                req->clock_seq) < 0) {
      /* The usual case: the TIME behind it is on its way. */
      r->pend[i] = 2;
      r->res[i].latency_us = (now - req->sent_ns) / REDLOCK__NS_PER_US;
      redlock__guard_wait_clock(&r->client->guard, i, &r->cw[i]);
      r->clock_waits++;
      return;
    }
    r->pend[i] = 0;
    guard_vote(r, i, now, req->sent_ns);
  } else if (v.vote == REDLOCK_VOTE_YES && !has_record(r, i)) {
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

/* The round's command, encoded once for every master (EVALSHA); 0 or
 * ENOMEM. */
static int round_encode(redlock__round *r) {
  const char *argv[REDLOCK_MAX_RESOURCES + 8];
  size_t lens[REDLOCK_MAX_RESOURCES + 8];
  char nums[3][24];
  int argc = redlock__lock_argv(r->lock, r->cmd, r->ttl_ms, 0u, argv, lens,
                                nums);
  redlock__buf_reset(&r->cmd_buf);
  return redlock__resp_cmd(&r->cmd_buf, argc, argv, lens);
}

static void round_submit(redlock__round *r, unsigned i, int eval) {
  redlock_client_t *c = r->client;
  redlock__node *n = &c->nodes[i];
  redlock__req *req = redlock__node_req(n);
  int rc = REDLOCK_ENOMEM;
  if (req != NULL) {
    req->cb = on_round_reply;
    req->owner = r;
    req->kind = (uint8_t)r->cmd;
    req->tag = eval ? 1 : 0;
    req->flags = r->redeliver ? REDLOCK__REQ_REDELIVER
                 : r->clocked   ? REDLOCK__REQ_CLOCK
                                : 0;
    if (eval) {
      /* NOSCRIPT: this master alone gets the script's text. */
      const char *argv[REDLOCK_MAX_RESOURCES + 8];
      size_t lens[REDLOCK_MAX_RESOURCES + 8];
      char nums[3][24];
      int argc = redlock__lock_argv(r->lock, r->cmd, r->ttl_ms,
                                    REDLOCK__ARGV_EVAL, argv, lens, nums);
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
    round_submit(r, i, 0);
  }
  round_check(r, redlock__now_ns());
}

/* ---- commands ------------------------------------------------------------ */

int redlock__lock_argv(const redlock_lock_t *l, redlock__cmd cmd,
                       int64_t ttl_ms, unsigned flags, const char **argv,
                       size_t *lens, char nums[3][24]) {
  const redlock__script *s = redlock__script_of(cmd);
  const redlock_client_t *c = l->client;
  size_t toklen = strlen(l->token);
  int argc = 0;
  unsigned k;
#define ARG(p, n)                                                           \
  do {                                                                      \
    argv[argc] = (p);                                                       \
    lens[argc++] = (n);                                                     \
  } while (0)
#define NUM(slot, v) ARG(nums[slot], redlock__fmt_i64(nums[slot], (v)))
  if (cmd == REDLOCK__CMD_PTTL) {
    ARG("PTTL", 4);
    ARG(l->key, l->keylen);
    return argc;
  }
  if (cmd == REDLOCK__CMD_TAKEOVER) {
    const char *old[REDLOCK__STALE_PER_KEY];
    unsigned n = redlock__stale_tokens(l, old);
    ARG(flags & REDLOCK__ARGV_EVAL ? "EVAL" : "EVALSHA",
        flags & REDLOCK__ARGV_EVAL ? 4 : 7);
    ARG(flags & REDLOCK__ARGV_EVAL ? s->text : s->sha,
        flags & REDLOCK__ARGV_EVAL ? s->len : 40);
    ARG("1", 1);
    ARG(l->key, l->keylen);
    ARG(l->token, toklen);
    NUM(0, ttl_ms);
    for (k = 0; k < n; k++)
      ARG(old[k], REDLOCK__TOKEN_HEX);
    return argc;
  }
  if (cmd == REDLOCK__CMD_SET_NX) {
    ARG("SET", 3);
    ARG(l->key, l->keylen);
    ARG(l->token, toklen);
    ARG("NX", 2);
    ARG("PX", 2);
    NUM(0, ttl_ms);
    return argc;
  }
  const char *quiet = flags & REDLOCK__ARGV_QUIET ? "1" : "0";
  if (flags & REDLOCK__ARGV_EVAL) {
    ARG("EVAL", 4);
    ARG(s->text, s->len);
  } else {
    ARG("EVALSHA", 7);
    ARG(s->sha, 40);
  }
  switch (cmd) {
    case REDLOCK__CMD_RELEASE:
    case REDLOCK__CMD_EXTEND:
    case REDLOCK__CMD_INSPECT:
      ARG("1", 1);
      ARG(l->key, l->keylen);
      if (cmd == REDLOCK__CMD_INSPECT)
        break;
      ARG(l->token, toklen);
      if (cmd == REDLOCK__CMD_EXTEND) {
        NUM(0, ttl_ms);
        ARG(l->heal ? "1" : "0", 1);
      } else {
        ARG(quiet, 1);
      }
      break;
    case REDLOCK__CMD_FENCED_ACQUIRE:
    case REDLOCK__CMD_FENCE:
      ARG("2", 1);
      ARG(l->key, l->keylen);
      ARG(l->fence_key, l->fence_keylen);
      ARG(l->token, toklen);
      NUM(0, ttl_ms);   /* the ttl, or T for the fence round */
      break;
    case REDLOCK__CMD_MULTI_PTTL:
      NUM(1, l->nkeys);
      for (k = 0; k < l->nkeys; k++)
        ARG(l->keys[k], l->keylens[k]);
      break;
    case REDLOCK__CMD_FORCE_RELEASE:
      if (l->kind == REDLOCK__KIND_MULTI) {
        NUM(1, l->nkeys);
        for (k = 0; k < l->nkeys; k++)
          ARG(l->keys[k], l->keylens[k]);
      } else {
        ARG("1", 1);
        ARG(l->key, l->keylen);
      }
      break;
    case REDLOCK__CMD_MULTI_ACQUIRE:
    case REDLOCK__CMD_MULTI_RELEASE:
    case REDLOCK__CMD_MULTI_EXTEND:
      NUM(1, l->nkeys);
      for (k = 0; k < l->nkeys; k++)
        ARG(l->keys[k], l->keylens[k]);
      ARG(l->token, toklen);
      if (cmd != REDLOCK__CMD_MULTI_RELEASE) {
        NUM(0, ttl_ms);
        ARG(l->heal && cmd == REDLOCK__CMD_MULTI_EXTEND ? "1" : "0", 1);
      } else {
        ARG(quiet, 1);
      }
      break;
    case REDLOCK__CMD_RW_ACQUIRE:
    case REDLOCK__CMD_RW_EXTEND:
    case REDLOCK__CMD_RW_RELEASE:
    case REDLOCK__CMD_RW_GIVEUP:
      ARG("1", 1);
      ARG(l->key, l->keylen);
      ARG(l->token, toklen);
      NUM(0, ttl_ms);
      ARG(l->kind == REDLOCK__KIND_WRITE ? "w" : "r", 1);
      ARG(l->intent, strlen(l->intent));
      ARG(quiet, 1);
      NUM(1, redlock__rw_lease_ms(l));
      ARG(flags & REDLOCK__ARGV_PUTBACK   ? "p"
          : flags & REDLOCK__ARGV_GRANTED ? "g"
                                          : "0",
          1);
      break;
    case REDLOCK__CMD_MAXTTL_RAISE:
    case REDLOCK__CMD_MAXTTL_SET:
      ARG("1", 1);
      ARG(c->maxttl_key, c->maxttl_keylen);
      NUM(0, ttl_ms);
      break;
    case REDLOCK__CMD_SET_NX:
    case REDLOCK__CMD_PTTL:
    case REDLOCK__CMD_MAXTTL_GET:
    case REDLOCK__CMD_BATCH_EXTEND:   /* batch.c encodes its own */
    case REDLOCK__CMD_TAKEOVER:
    case REDLOCK__CMD_CLOCK_NOTE:   /* guard.c encodes its own */
    case REDLOCK__N_CMDS:
      break;
  }
#undef NUM
#undef ARG
  return argc;
}
