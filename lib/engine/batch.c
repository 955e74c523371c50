/* batch.c: renewals of many plain locks in one script call per master.
 *
 * Owns: gathering the auto-extensions that fall due in one pass of the
 * client's timer queue (watchdog.c adds them; the queue lets a renewal run
 * up to min(50 ms, ttl/10) early when another runs in the same pass),
 * sending each batch of up to REDLOCK__BATCH_MAX locks to every master as
 * one EVALSHA of the batch script, and tallying the per-lock results into
 * one quorum decision per lock, with the validity counted from the
 * batch's start. Does not own: what a decision means (watchdog.c).
 *
 *   timer pass: lock due --> redlock__batch_add --> open batch (<= 256)
 *   end of pass (or full): encode once, send to every master
 *   reply of master i: array of 0/1, one per lock --> votes of each lock
 *   each lock decides alone (quorum.c), as soon as its votes allow:
 *     REACHED / BLOCKED (its key is someone else's) / FAILED
 *   errors and timeouts of master i count against every lock of the batch
 *
 * Which locks: plain locks without heal. Multi-resource, read-write and
 * healing locks (elections' included) renew with their own round
 * (their scripts touch several keys or recreate them: a batch of them
 * would be one long script per master for a rare case).
 *
 * Invariants
 *  1. The command is encoded once, before any master is sent it, from the
 *     locks attached at that moment; every master gets the same entries
 *     in the same order, so result i is lock i's on every master. A lock
 *     detached later (the user took the main round, the handle was freed) keeps
 *     its index; its results are only consumed.
 *  2. No decision runs while the batch is being sent: a failed send is
 *     counted, and every lock is judged after the last master was sent
 *     it (a decision may call the user, who may detach other locks).
 *  3. References: each attached lock is held by the batch (lock.c
 *     invariant 6); each request in flight holds the batch. A batch with
 *     no attached lock and no request goes back to the client's pool.
 *  4. A cluster master gets one command per slot of the batch's keys (its
 *     entries in the same order as everywhere: a subsequence of the
 *     batch), to the primary that serves the slot; the reply of a slot's
 *     command is its entries' votes, a failure counts against them only.
 *  5. Wire order: the batch reaches each master's connection before any
 *     command the user issues after it for the same lock (the user's
 *     extend or release detaches the lock first; if the batch was already
 *     sent, the user's command queues behind it). */
#include <string.h>

#include "batch.h"
#include "node.h"
#include "pure.h"
#include "resp.h"

struct redlock__batch {
  redlock__queue link;          /* FIRST member: the client's pool */
  redlock_client_t *client;
  const redlock__batch_owner *owner;   /* its entries' (never looked into) */
  redlock__ns start;
  unsigned n;                   /* entries */
  unsigned live;                /* entries still attached */
  unsigned refs;                /* requests in flight, and batch_judge */
  uint8_t sent;
  uint8_t *votes;               /* n_nodes per entry (redlock_vote_t) */
  uint16_t *errs;               /* n_nodes: the error of master i */
  uint32_t *lat_us;             /* n_nodes: its reply's latency */
  redlock_lock_t *lock[REDLOCK__BATCH_MAX];   /* NULL: detached/decided */
  int64_t ttl[REDLOCK__BATCH_MAX];
  uint8_t yes[REDLOCK__BATCH_MAX];
  uint8_t no[REDLOCK__BATCH_MAX];
  uint8_t err[REDLOCK__BATCH_MAX];
  /* Cluster masters: the entries in slot order; one command per slot
   * (CROSSSLOT must never happen), to the primary serving it. */
  uint16_t order[REDLOCK__BATCH_MAX];
  uint16_t slot[REDLOCK__BATCH_MAX];
};

static void batch_free(redlock__queue *link) {
  redlock__free(link);
}

static void batch_drain(redlock__pool *p);

static redlock__batch *batch_get(redlock_client_t *c) {
  redlock__batch *b;
  c->batches.free_item = batch_free;   /* the client frees the pool */
  c->batches.drain = batch_drain;
  if (!redlock__queue_empty(&c->batches.items)) {
    redlock__queue *q = c->batches.items.next;
    redlock__queue_remove(q);
    b = (redlock__batch *)q;   /* link is the first member */
  } else {
    size_t size = sizeof(*b) + (size_t)c->n * REDLOCK__BATCH_MAX +
                  c->n * sizeof(uint16_t) + c->n * sizeof(uint32_t) + 8;
    char *p = redlock__malloc(size);
    if (p == NULL)
      return NULL;
    b = (redlock__batch *)p;
    p += sizeof(*b);
    b->lat_us = (uint32_t *)p;
    p += c->n * sizeof(uint32_t);
    b->errs = (uint16_t *)p;
    p += c->n * sizeof(uint16_t);
    b->votes = (uint8_t *)p;
  }
  redlock__queue_init(&b->link);
  b->client = c;
  b->start = 0;
  b->n = 0;
  b->live = 0;
  b->refs = 0;
  b->sent = 0;
  return b;
}

static void batch_put(redlock__batch *b) {
  redlock_client_t *c = b->client;
  if (c->open_batch == b)
    c->open_batch = NULL;
  redlock__queue_insert_tail(&c->batches.items, &b->link);
}

static void batch_maybe_put(redlock__batch *b) {
  if (b->sent && b->live == 0 && b->refs == 0)
    batch_put(b);
}

/* The client frees its pool: the batch being gathered goes back first. */
static void batch_drain(redlock__pool *p) {
  redlock_client_t *c = REDLOCK__CONTAINER_OF(p, redlock_client_t, batches);
  if (c->open_batch != NULL)
    batch_put(c->open_batch);
}

/* ---- votes and decisions ------------------------------------------------- */

static void count(redlock__batch *b, unsigned j, unsigned i,
                  redlock_vote_t v) {
  uint8_t *slot = &b->votes[(size_t)j * b->client->n + i];
  if (*slot != REDLOCK_VOTE_NONE)
    return;
  *slot = (uint8_t)v;
  if (v == REDLOCK_VOTE_YES)
    b->yes[j]++;
  else if (v == REDLOCK_VOTE_NO)
    b->no[j]++;
  else
    b->err[j]++;
}

/* Lock j's per-master results, for the event hook. */
static void fill_results(const redlock__batch *b, unsigned j,
                         redlock_node_result *res) {
  redlock_client_t *c = b->client;
  unsigned i;
  for (i = 0; i < c->n; i++) {
    redlock_vote_t v = (redlock_vote_t)b->votes[(size_t)j * c->n + i];
    memset(&res[i], 0, sizeof(res[i]));
    res[i].server = c->displays[i];
    res[i].node = c->nodes[i].uri.display;
    res[i].vote = v;
    res[i].error = v == REDLOCK_VOTE_ERR ? b->errs[i] : 0;
    res[i].errstr = res[i].error ? redlock_strerror(res[i].error) : "";
    res[i].latency_us = v == REDLOCK_VOTE_NONE ? 0 : b->lat_us[i];
    res[i].holder = "";
    res[i].pttl_ms = -2;
    res[i].rw_lock = 0;
    res[i].guard_wait_ms = -1;
    res[i].guard_window_ms = -1;
  }
}

/* Decides lock j if its votes allow (invariant 2: never while sending). */
static void judge(redlock__batch *b, unsigned j, redlock__ns now) {
  redlock_client_t *c = b->client;
  redlock_lock_t *l = b->lock[j];
  redlock__round_state st;
  redlock_node_result res[REDLOCK_MAX_SERVERS];
  redlock__wd_outcome o;
  if (l == NULL)
    return;
  st = redlock__round_decide(c->n, c->quorum, b->yes[j], b->no[j],
                             b->err[j]);
  if (st == REDLOCK__ROUND_PENDING)
    return;
  b->lock[j] = NULL;
  b->live--;
  b->owner->placed(l, NULL, 0);
  o.st = st;
  o.start = b->start;
  o.ttl_ms = b->ttl[j];
  o.yes = b->yes[j];
  o.no = b->no[j];
  o.err = b->err[j];
  o.nodes = NULL;
  if (c->event_cb != NULL) {
    fill_results(b, j, res);
    o.nodes = res;
  }
  b->owner->decided(l, &o, now);
  b->owner->unref(l);   /* the batch's */
}

static void judge_all(redlock__batch *b, redlock__ns now) {
  unsigned j;
  b->refs++;   /* decisions call the user, who may detach locks */
  for (j = 0; j < b->n; j++)
    judge(b, j, now);
  b->refs--;
  batch_maybe_put(b);
}

/* Master i failed for the entries of its command: on a cluster master,
 * order[at + k] for k < len (one command per slot); else entry k. */
static void entries_failed(redlock__batch *b, unsigned i, int cl, unsigned at,
                           unsigned len, int error) {
  unsigned k, j;
  b->errs[i] = (uint16_t)error;
  for (k = 0; k < len; k++) {
    j = cl ? b->order[at + k] : k;
    if (b->lock[j] != NULL)
      count(b, j, i, REDLOCK_VOTE_ERR);
  }
}

static void on_batch_reply(redlock__req *req, const redlock__reply *r,
                           int error, const char *errstr) {
  redlock__batch *b = req->owner;
  redlock_client_t *c = b->client;
  unsigned i = req->idx;
  redlock__ns now = r != NULL ? req->reply_ns : redlock__sys_now(b->client->sys);
  int cl = c->masters[i].ops->by_slot;
  unsigned at = cl ? req->tag.batch.first : 0;
  unsigned len = cl ? req->tag.batch.count : b->n;
  unsigned k;
  char why[REDLOCK__ERRSTR_LEN];
  (void)errstr;
  b->refs--;
  if (b->live == 0) {
    batch_maybe_put(b);
    return;
  }
  b->lat_us[i] = (uint32_t)((now - req->sent_ns) / REDLOCK__NS_PER_US);
  if (r == NULL) {
    entries_failed(b, i, cl, at, len, error);
  } else if (r->type == REDLOCK__R_ERROR) {
    if (strncmp(r->str, "NOSCRIPT", 8) == 0)
      c->batch_eval |= (uint64_t)1 << i;   /* next batch: EVAL there */
    entries_failed(b, i, cl, at, len, REDLOCK_ESERVER);
  } else if (r->type != REDLOCK__R_ARRAY || r->elements != len) {
    entries_failed(b, i, cl, at, len, REDLOCK_EPROTO);
  } else {
    for (k = 0; k < len; k++) {
      const redlock__reply *e = r->element[k];
      unsigned j = cl ? b->order[at + k] : k;
      redlock_lock_t *l = b->lock[j];
      if (l == NULL)
        continue;
      if (e == NULL || e->type != REDLOCK__R_INTEGER) {
        b->errs[i] = REDLOCK_EPROTO;
        count(b, j, i, REDLOCK_VOTE_ERR);
      } else if (e->integer < 1) {
        count(b, j, i, REDLOCK_VOTE_NO);
      } else if (!redlock__node_isolated(req->node, why, sizeof(why))) {
        /* As round.c: a sentinel group's primary that takes writes when
         * cut off does not keep a lock either. */
        b->errs[i] = REDLOCK_ERESTARTED;
        count(b, j, i, REDLOCK_VOTE_ERR);
      } else if (c->restart_guard_ms == 0 &&
                 !redlock__guard_has_record(&c->guard, req->node->index,
                                            b->ttl[j])) {
        /* As round.c: a YES counts only where the master confirmed the
         * ttl record on this connection. */
        b->errs[i] = REDLOCK_ERESTARTED;
        count(b, j, i, REDLOCK_VOTE_ERR);
      } else {
        count(b, j, i, REDLOCK_VOTE_YES);
      }
    }
  }
  judge_all(b, now);
}

/* ---- gathering and sending ----------------------------------------------- */

/* The entries in slot order (insertion sort: stable, at most 256). */
static void sort_by_slot(redlock__batch *b) {
  unsigned j, k;
  for (j = 0; j < b->n; j++) {
    b->slot[j] = (uint16_t)b->owner->key_slot(b->lock[j]);
    b->order[j] = (uint16_t)j;
  }
  for (j = 1; j < b->n; j++) {
    uint16_t v = b->order[j];
    for (k = j; k > 0 && b->slot[b->order[k - 1]] > b->slot[v]; k--)
      b->order[k] = b->order[k - 1];
    b->order[k] = v;
  }
}

/* Master i routes by slot: one command per slot (invariant 4). */
static void slot_send(redlock__batch *b, unsigned i, int eval,
                      int uniform) {
  redlock_client_t *c = b->client;
  const redlock__script *s = redlock__script_of(REDLOCK__CMD_BATCH_EXTEND);
  const char *argv[3 + 3 * REDLOCK__BATCH_MAX];
  size_t lens[3 + 3 * REDLOCK__BATCH_MAX];
  char nums[REDLOCK__BATCH_MAX + 1][24];
  unsigned at = 0, sent = 0;
  while (at < b->n) {
    unsigned len = 1, k;
    int argc = 3, rc = REDLOCK_ENOMEM;
    redlock__node *n;
    redlock__req *req;
    while (at + len < b->n &&
           b->slot[b->order[at + len]] == b->slot[b->order[at]])
      len++;
    argv[0] = eval ? "EVAL" : "EVALSHA";
    lens[0] = eval ? 4 : 7;
    argv[1] = eval ? s->text : s->sha;
    lens[1] = eval ? s->len : 40;
    argv[2] = nums[REDLOCK__BATCH_MAX];
    lens[2] = redlock__fmt_i64(nums[REDLOCK__BATCH_MAX], (int64_t)len);
    for (k = 0; k < len; k++) {
      redlock_lock_t *l = b->lock[b->order[at + k]];
      argv[argc] = b->owner->key(l, &lens[argc]);
      argc++;
    }
    for (k = 0; k < len; k++) {
      redlock_lock_t *l = b->lock[b->order[at + k]];
      argv[argc] = b->owner->token(l);
      lens[argc] = strlen(argv[argc]);
      argc++;
    }
    for (k = 0; k < (uniform ? 1 : len); k++) {
      argv[argc] = nums[k];
      lens[argc++] = redlock__fmt_i64(nums[k], b->ttl[b->order[at + k]]);
    }
    n = redlock__master_route(&c->masters[i], b->slot[b->order[at]]);
    req = redlock__node_req(n);
    if (req != NULL) {
      req->cb = on_batch_reply;
      req->owner = b;
      req->kind = (uint8_t)REDLOCK__CMD_BATCH_EXTEND;
      req->tag.batch.first = (uint16_t)at;
      req->tag.batch.count = (uint16_t)len;
      req->flags = 0;
      rc = redlock__node_submit(n, req, argc, argv, lens);
    }
    if (rc == 0) {
      b->refs++;
      sent++;
    } else {
      entries_failed(b, i, 1, at, len,
                     rc == REDLOCK_ENOMEM ? rc : REDLOCK_EIO);
    }
    at += len;
  }
  if (sent > 0)
    c->batch_eval &= ~((uint64_t)1 << i);
}

static void batch_send(redlock__batch *b) {
  redlock_client_t *c = b->client;
  const redlock__script *s = redlock__script_of(REDLOCK__CMD_BATCH_EXTEND);
  const char *argv[3 + 3 * REDLOCK__BATCH_MAX];
  size_t lens[3 + 3 * REDLOCK__BATCH_MAX];
  char nums[REDLOCK__BATCH_MAX + 1][24];
  unsigned i, j, k = 0;
  int argc = 3;
  int uniform = 1;
  if (c->open_batch == b)
    c->open_batch = NULL;
  /* Detached entries go: the command carries only attached locks. */
  for (j = 0; j < b->n; j++) {
    if (b->lock[j] == NULL)
      continue;
    b->lock[k] = b->lock[j];
    b->ttl[k] = b->ttl[j];
    b->owner->placed(b->lock[k], b, k);
    k++;
  }
  b->n = k;
  b->sent = 1;
  if (k == 0) {
    batch_maybe_put(b);
    return;
  }
  for (i = 0; i < c->n; i++)
    if (c->masters[i].ops->by_slot) {
      sort_by_slot(b);
      break;
    }
  argv[1] = s->sha;
  lens[1] = 40;
  argv[2] = nums[REDLOCK__BATCH_MAX];
  lens[2] = redlock__fmt_i64(nums[REDLOCK__BATCH_MAX], (int64_t)k);
  for (j = 0; j < k; j++) {
    redlock_lock_t *l = b->lock[j];
    argv[argc] = b->owner->key(l, &lens[argc]);
    argc++;
    b->yes[j] = b->no[j] = b->err[j] = 0;
  }
  for (j = 0; j < k; j++) {
    redlock_lock_t *l = b->lock[j];
    argv[argc] = b->owner->token(l);
    lens[argc] = strlen(argv[argc]);
    argc++;
    uniform = uniform && b->ttl[j] == b->ttl[0];
  }
  /* One ttl for all when they share it (fewer bytes, less parsing). */
  for (j = 0; j < (uniform ? 1 : k); j++) {
    argv[argc] = nums[j];
    lens[argc++] = redlock__fmt_i64(nums[j], b->ttl[j]);
  }
  memset(b->votes, REDLOCK_VOTE_NONE, (size_t)c->n * k);
  b->start = redlock__sys_now(b->client->sys);
  for (i = 0; i < c->n; i++) {
    redlock__node *n = &c->nodes[i];
    redlock__req *req;
    int eval = (c->batch_eval >> i) & 1;
    int rc = REDLOCK_ENOMEM;
    b->errs[i] = 0;
    b->lat_us[i] = 0;
    if (c->masters[i].ops->by_slot) {
      slot_send(b, i, eval, uniform);
      continue;
    }
    req = redlock__node_req(n);
    if (req != NULL) {
      argv[0] = eval ? "EVAL" : "EVALSHA";
      lens[0] = eval ? 4 : 7;
      argv[1] = eval ? s->text : s->sha;
      lens[1] = eval ? s->len : 40;
      req->cb = on_batch_reply;
      req->owner = b;
      req->kind = (uint8_t)REDLOCK__CMD_BATCH_EXTEND;
      req->flags = 0;
      rc = redlock__node_submit(n, req, argc, argv, lens);
    }
    if (rc == 0) {
      b->refs++;
      c->batch_eval &= ~((uint64_t)1 << i);   /* EVAL cached it again */
    } else {
      entries_failed(b, i, 0, 0, b->n,
                     rc == REDLOCK_ENOMEM ? rc : REDLOCK_EIO);
    }
  }
  judge_all(b, redlock__sys_now(b->client->sys));   /* every master may have failed */
}

int redlock__batch_add(redlock_client_t *c, redlock_lock_t *l,
                       int64_t ttl_ms, const redlock__batch_owner *owner) {
  redlock__batch *b = c->open_batch;
  if (b == NULL) {
    b = batch_get(c);
    if (b == NULL)
      return REDLOCK_ENOMEM;
    c->open_batch = b;
  }
  b->owner = owner;
  b->lock[b->n] = l;
  b->ttl[b->n] = ttl_ms;
  owner->placed(l, b, b->n);
  b->n++;
  b->live++;
  owner->ref(l);
  if (b->n >= (unsigned)c->renew_batch)
    batch_send(b);
  return 0;
}

void redlock__batch_flush(redlock_client_t *c) {
  if (c->open_batch != NULL)
    batch_send(c->open_batch);
}

void redlock__batch_detach(redlock__batch *b, unsigned idx,
                           redlock_lock_t *l) {
  const redlock__batch_owner *owner = b->owner;
  REDLOCK__ASSERT(idx < b->n && b->lock[idx] == l);
  b->lock[idx] = NULL;
  b->live--;
  owner->placed(l, NULL, 0);
  batch_maybe_put(b);   /* b may be back in the pool from here */
  owner->unref(l);
}
