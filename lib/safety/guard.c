/* guard.c: the guard of YES votes: restarts and clock steps.
 *
 * Owns: per master, which instance (run_id) it is, the latest moment that
 * instance can have started, and whether its votes count; its clock
 * readings, the steps seen and its skew against the other masters; the
 * record of the deployment's longest ttl and its reads; the masters' clock
 * records; the marks of broken durability declarations (6.), stamped on
 * (each write checked and retried), read from and dropped from the other
 * masters; configuration warnings; what the record said of an instance
 * at first sight (seen_as: a refusal's words only).
 * Does not own: the votes themselves (round.c asks for a verdict on each
 * YES of an acquisition, once the clock reading that followed it came).
 *
 * The argument (what makes a master lose a lock, the failure model, how a
 * client sees a step, the age of an instance, the window, durable masters,
 * masters made of several nodes) is in docs/DESIGN.md, "The guard's
 * argument"; its numbers (1. to 7.) are cited here.
 *
 * Until a read covers an instance its YES votes are PENDING: the round
 * waits (bounded by the read's command deadlines), then asks again. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "master.h"
#include "guard.h"
#include "scripts.h"

/* The seam's clock (every node of the client shares one seam). */
static redlock__ns guard_now(const redlock__guard *g) {
  return redlock__sys_now(g->nodes[0].env->sys);
}

static void guard_start_read(redlock__guard *g);
static void finish_read(redlock__guard *g);
static void mark_broken(redlock__guard *g, unsigned i, const char *ident);
static void stamp_on(redlock__guard *g, unsigned i, unsigned j);
static void forget_on(redlock__guard *g, unsigned i, unsigned j,
                      const char *ident);

/* What the clock record said of an instance when this client first saw
 * it: the cause a refusal names (the verdict never depends on it). */
enum {
  GUARD_SEEN_UNKNOWN,   /* no run_id (ACL): of unknown age */
  GUARD_SEEN_RECORD,    /* the record knows it: some client saw it first */
  GUARD_SEEN_NEVER,     /* no record: a new prefix, the first use, or a
                           restart that lost the record with the keys */
  GUARD_SEEN_RESTART,   /* the record names another run_id */
  GUARD_SEEN_REPLID     /* the same run_id, another replication id */
};

static int is_cleared(const redlock__guard_node *gn) {
  return gn->cleared[0] != '\0' && strcmp(gn->cleared, gn->run_id) == 0;
}

static void clear(redlock__guard_node *gn) {
  if (gn->run_id[0] != '\0')
    memcpy(gn->cleared, gn->run_id, sizeof(gn->cleared));
}

static void warn(redlock__guard *g, unsigned idx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void warn(redlock__guard *g, unsigned idx, const char *fmt, ...) {
  char msg[300];
  va_list ap;
  if (g->warn == NULL)
    return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  g->warn(g->warn_arg, idx, msg);
}

int redlock__guard_init(redlock__guard *g, redlock__node *nodes, unsigned n,
                        unsigned n_masters, unsigned quorum, int64_t mode_ms,
                        const char *key, size_t keylen) {
  unsigned i;
  memset(g, 0, sizeof(*g));
  g->nodes = nodes;
  g->n = n;
  g->n_masters = n_masters;
  g->quorum = quorum;
  g->mode_ms = mode_ms;
  g->key = key;
  g->keylen = keylen;
  g->clock_on = 1;
  g->drift_factor = 0.01;
  redlock__queue_init(&g->waiters);
  redlock__queue_init(&g->settle_waiters);
  g->gn = redlock__calloc(n, sizeof(*g->gn));
  g->read_ok = redlock__calloc(n_masters, 1);
  g->marks_ok = redlock__calloc(n_masters, 1);
  g->stamp = redlock__calloc((size_t)n_masters * (n > 0 ? n : 1), 1);
  if (g->gn == NULL || g->read_ok == NULL || g->marks_ok == NULL ||
      g->stamp == NULL)
    return REDLOCK_ENOMEM;
  for (i = 0; i < n; i++)
    redlock__queue_init(&g->gn[i].clock_waiters);
  return 0;
}

void redlock__guard_free(redlock__guard *g) {
  redlock__free(g->gn);
  redlock__free(g->read_ok);
  redlock__free(g->marks_ok);
  g->marks_ok = NULL;
  redlock__free(g->stamp);
  g->stamp = NULL;
  g->gn = NULL;
  g->read_ok = NULL;
}

static int decl_waiting(const redlock__guard *g);

static void request_read(redlock__guard *g) {
  if (g->mode_ms < 0 || g->closing ||
      (g->mode_ms > 0 && !decl_waiting(g)))
    return;
  if (g->reading)
    g->again = 1;
  else
    guard_start_read(g);
}

int redlock__guard_settled(const redlock__guard *g) {
  unsigned i;
  for (i = 0; i < g->n; i++) {
    const redlock__node *n = &g->nodes[i];
    if (n->lazy)
      continue;
    if (n->connects == 0 && n->state != REDLOCK__NODE_DOWN &&
        n->state != REDLOCK__NODE_CLOSED)
      return 0;
  }
  return 1;
}

void redlock__guard_wait_settled(redlock__guard *g,
                                 redlock__guard_waiter *w) {
  redlock__queue_insert_tail(&g->settle_waiters, &w->link);
}

static void wake_list(redlock__queue *list) {
  redlock__queue todo;
  if (redlock__queue_empty(list))
    return;
  if (list->next->next == list) {
    /* One waiter (the usual case: a vote waiting for its reading). */
    redlock__guard_waiter *w =
        REDLOCK__CONTAINER_OF(list->next, redlock__guard_waiter, link);
    redlock__queue_remove(&w->link);
    w->cb(w);
    return;
  }
  redlock__queue_init(&todo);
  while (!redlock__queue_empty(list)) {
    redlock__queue *q = list->next;
    redlock__queue_remove(q);
    redlock__queue_insert_tail(&todo, q);
  }
  while (!redlock__queue_empty(&todo)) {
    redlock__guard_waiter *w =
        REDLOCK__CONTAINER_OF(todo.next, redlock__guard_waiter, link);
    redlock__queue_remove(&w->link);
    w->cb(w);
  }
}

static void check_settled(redlock__guard *g) {
  if (!redlock__queue_empty(&g->settle_waiters) &&
      (g->closing || redlock__guard_settled(g)))
    wake_list(&g->settle_waiters);
}

/* A master's record of the deployment's longest ttl (at its handshake, or
 * from a read that a quorum answered): the window covers it (5.). */
static void record_seen(redlock__guard *g, int64_t value) {
  if (value > g->window_ms)
    g->window_ms = value;
}

int64_t redlock__guard_window(const redlock__guard *g) {
  return g->mode_ms > 0 ? g->mode_ms : g->window_ms;
}

/* ---- the masters' clocks ------------------------------------------------- */

#define SETTLE_EVERY_NS (1000 * REDLOCK__NS_PER_MS)   /* settle(): 1 s */

static int reading_ok(const redlock__node *n) {
  return n->clock.wall_us >= 0;
}

/* The nodes of master m (its first node, a cluster's others). */
static unsigned master_nodes(const redlock__guard *g, unsigned m,
                             const unsigned **out) {
  const redlock__master *ma = &g->masters[m];
  return ma->ops->node_indexes(ma, out);
}

/* The master that node n belongs to. */
static const redlock__master_ops *kind_of(const redlock__guard *g,
                                          const redlock__node *n) {
  return g->masters[n->master].ops;
}

static unsigned node_of(const unsigned *list, unsigned m, unsigned k) {
  return list != NULL ? list[k] : m;
}

/* A node's clock against the others': its offset minus the median of the
 * masters' offsets, each master's being the median of its nodes' (a
 * cluster is one master however many primaries it has: the failure model
 * counts masters, 2.). */
int redlock__guard_skew(const redlock__guard *g, unsigned idx,
                        int64_t *skew, int64_t *unc) {
  int64_t v[REDLOCK_MAX_SERVERS];
  int64_t w[REDLOCK__MASTER_NODES];
  int64_t med, umax = 0;
  unsigned m, k = 0;
  const redlock__guard_node *me = &g->gn[idx];
  *skew = 0;
  *unc = 0;
  if (!me->have)
    return -1;
  for (m = 0; m < g->n_masters; m++) {
    const unsigned *list;
    unsigned cnt = master_nodes(g, m, &list), j, kw = 0;
    for (j = 0; j < cnt; j++) {
      const redlock__guard_node *gn = &g->gn[node_of(list, m, j)];
      if (!gn->have || !gn->up)
        continue;
      w[kw++] = gn->off_us;
      if (gn->unc_us > umax)
        umax = gn->unc_us;
    }
    if (kw > 0)
      v[k++] = kw == 1 ? w[0] : redlock__median_i64(w, kw);
  }
  if (k < g->quorum)
    return -1;   /* too few clocks to tell which are sound */
  med = redlock__median_i64(v, k);
  *skew = me->off_us - med;
  /* The median master's uncertainty is at most the largest. */
  *unc = me->unc_us + umax;
  return 0;
}

static int64_t tolerance_us(const redlock__guard *g, int64_t ttl_ms) {
  if (g->tolerance_us > 0)
    return g->tolerance_us;
  /* The drift allowance (validity.c): ttl * drift_factor + 2 ms. */
  return (int64_t)((double)ttl_ms * g->drift_factor * 1000.0) + 2000;
}

static int64_t abs64(int64_t v) {
  return v < 0 ? -v : v;
}

/* Whether the comparison with the others' clocks may still become
 * possible: fewer than a quorum of masters' clocks are known, but enough
 * masters are connected, or still connecting, whose first reading is on
 * its way (a new client reads every clock behind its first SETs, and its
 * connections come up in any order). The vote then waits (PENDING) for
 * them instead of being refused for want of a reading that is a reply
 * away. A reading (redlock__guard_clock), a node up, or a lost or failed
 * connection wakes it (client.c, redlock__guard_wake); the last only once
 * that node's requests have failed (REDLOCK__NODE_EV_FAILED), so a round
 * decided then counts every silent master as such (the CLI's exit code
 * 74 names them) instead of deciding before their failures. */
static int clocks_coming(const redlock__guard *g) {
  unsigned m, known = 0, coming = 0;
  for (m = 0; m < g->n_masters; m++) {
    const unsigned *list;
    unsigned cnt = master_nodes(g, m, &list), j;
    int have = 0, up = 0;
    for (j = 0; j < cnt; j++) {
      unsigned k = node_of(list, m, j);
      const redlock__guard_node *gn = &g->gn[k];
      redlock__node_state st = g->nodes[k].state;
      if (g->nodes[k].clock_refused)
        continue;   /* TIME refused (ACL): no reading will come */
      have |= gn->have && gn->up;
      up |= (gn->up && !gn->have) || st == REDLOCK__NODE_RESOLVING ||
            st == REDLOCK__NODE_CONNECTING || st == REDLOCK__NODE_HANDSHAKE;
    }
    known += have;
    coming += !have && up;
  }
  return known < g->quorum && known + coming >= g->quorum;
}

/* A note written: the instance took a write (8.: a sentinel group's
 * primary that took none yet is not counted on its first sight). */
static void on_note_reply(redlock__req *req, const redlock__reply *r,
                          int error, const char *errstr) {
  redlock__guard *g = req->owner;
  redlock__guard_node *gn;
  (void)error;
  (void)errstr;
  if (g->closing || r == NULL || r->type == REDLOCK__R_ERROR)
    return;
  gn = &g->gn[req->idx];
  if (gn->accept_ns == 0 &&
      req->kind == (uint8_t)g->nodes[req->idx].connects)
    gn->accept_ns = guard_now(g);
}

/* The clock record of master idx (scripts.c, EVAL of the text: these are
 * rare), offset `off` +- `unc`, note `how`; its reply says only whether the
 * instance took the write. */
static void note(redlock__guard *g, unsigned idx, int64_t off, int64_t unc,
                 const char *how) {
  const redlock__script *s = redlock__script_of(REDLOCK__CMD_CLOCK_NOTE);
  redlock__node *node = &g->nodes[idx];
  const char *argv[9];
  size_t lens[9];
  char offs[24], uncs[24];
  redlock__req *req;
  redlock__guard_node *gn = &g->gn[idx];
  gn->base = 1;
  gn->base_off_us = off;
  gn->base_unc_us = unc;
  if (g->clock_key == NULL || node->state != REDLOCK__NODE_UP ||
      node->run_id[0] == '\0')
    return;
  req = redlock__node_req(node);
  if (req == NULL)
    return;   /* a note that is lost only makes others see less */
  argv[0] = "EVAL";
  lens[0] = 4;
  argv[1] = s->text;
  lens[1] = s->len;
  argv[2] = "1";
  lens[2] = 1;
  argv[3] = node->rec_clock;
  lens[3] = node->rec_clock_len;
  argv[4] = node->run_id;
  lens[4] = strlen(node->run_id);
  argv[5] = offs;
  lens[5] = redlock__fmt_i64(offs, off);
  argv[6] = uncs;
  lens[6] = redlock__fmt_i64(uncs, unc);
  argv[7] = how;
  lens[7] = 1;
  argv[8] = node->replid;
  lens[8] = strlen(node->replid);
  req->flags = REDLOCK__REQ_INTERNAL | REDLOCK__REQ_HERE;
  req->cb = on_note_reply;
  req->owner = g;
  req->idx = idx;
  req->kind = (uint8_t)node->connects;   /* this handshake (mod 256) */
  (void)redlock__node_submit(node, req, 9, argv, lens);
}

/* Master idx's clock stepped by `size` us (seen `how`) at `at`. */
static void mark_step(redlock__guard *g, unsigned idx, int64_t size,
                      int how, redlock__ns at) {
  redlock__guard_node *gn = &g->gn[idx];
  gn->step_ns = at;
  gn->step_us = size;
  gn->step_how = how;
  gn->step_note = 1;
  /* Its window is the deployment's longest ttl NOW: a longer ttl may have
   * been recorded since this client last read the record (found by
   * redlock-sim: a step kept out for the 2.1 s this client knew while
   * another held an 8.3 s lock). The record is read again. */
  gn->step_read = 0;
  request_read(g);
  warn(g, idx, "%s: wall clock %s %.1f s %s%s: its votes count again in "
       "%.1f s (the longest ttl)", g->nodes[idx].uri.display,
       how == GUARD_STEP_FIRST ? "is" : "stepped",
       (double)abs64(size) / 1e6,
       how == GUARD_STEP_FIRST ? (size > 0 ? "ahead of" : "behind")
                               : (size > 0 ? "forward" : "back"),
       how == GUARD_STEP_FIRST ? " the others' at first sight (it may "
                                 "have stepped)"
       : how == GUARD_STEP_MOVED ? " against the others' since the last "
                                   "look"
                                 : "",
       (double)redlock__guard_window(g) / 1000.0);
}

/* Master idx's clock against the others' once they are known (3. ii):
 * the first sight of an instance is noted on the master; an offset that
 * moved since the record's is a step, unless this client followed the
 * clock continuously (then it is drift: noted as the new offset). */
static void settle(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  int64_t tol = tolerance_us(g, redlock__guard_window(g));
  int64_t skew, unc;
  if (!gn->up || redlock__guard_skew(g, idx, &skew, &unc) != 0)
    return;
  gn->settled_ns = gn->last.reply_ns;
  if (!gn->base) {
    /* The first client to see this instance: nobody knows its clock's
     * past. Out of step: it may have stepped just now. */
    if (abs64(skew) > tol + unc) {
      mark_step(g, idx, skew, GUARD_STEP_FIRST, gn->last.reply_ns);
      gn->step_note = 0;
      note(g, idx, skew, unc, "x");
    } else {
      note(g, idx, skew, unc, "s");
    }
    gn->base_check = 0;
    return;
  }
  if (gn->step_note) {
    gn->step_note = 0;
    gn->base_check = 0;
    note(g, idx, skew, unc, "x");
    return;
  }
  if (abs64(skew - gn->base_off_us) > tol + unc + gn->base_unc_us) {
    if (gn->continuity) {
      /* This client followed the clock (tracking saw no step): drift, or
       * the others' median moved. */
      note(g, idx, skew, unc, "b");
    } else {
      mark_step(g, idx, skew - gn->base_off_us, GUARD_STEP_MOVED,
                gn->last.reply_ns);
      gn->step_note = 0;
      note(g, idx, skew, unc, "x");
    }
  }
  gn->base_check = 0;
}

/* A new reading of master idx (`same`: of the instance read before):
 * tracking (3. i), then its offset against the others'. */
static void clock_reading(redlock__guard *g, unsigned idx, int same) {
  redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  const redlock__clock_reading *rd = &node->clock;
  int64_t step = 0;
  unsigned i;
  if (!reading_ok(node)) {
    gn->have = 0;
    gn->continuity = 0;
    return;
  }
  gn->continuity = same && gn->have;
  gn->slack_us = INT64_MAX;
  if (gn->continuity)
    step = redlock__clock_step_us(&gn->last, rd, &gn->slack_us);
  gn->last = *rd;
  gn->off_us = redlock__clock_offset_us(rd);
  gn->unc_us = redlock__clock_unc_us(rd);
  gn->have = 1;
  if (step != 0)
    mark_step(g, idx, step, GUARD_STEP_TRACKED, rd->reply_ns);
  /* Followed closely, the offset against the others' needs comparing
   * only now and then (drift, the others' median moving): tracking sees
   * this master's own steps more precisely. */
  if (!gn->continuity || !gn->base || gn->base_check || gn->step_note ||
      rd->reply_ns - gn->settled_ns >= SETTLE_EVERY_NS)
    settle(g, idx);
  /* Masters that waited for the others' clocks (first connections):
   * looked for only while some may be (a cluster has many nodes). */
  if (g->unsettled) {
    unsigned left = 0;
    for (i = 0; i < g->n; i++) {
      redlock__guard_node *o = &g->gn[i];
      if (i != idx && o->have && (!o->base || o->base_check))
        settle(g, i);
      left += o->have && (!o->base || o->base_check);
    }
    g->unsettled = left > 0;
  }
}

void redlock__guard_clock(redlock__guard *g, unsigned idx) {
  clock_reading(g, idx, 1);
  wake_list(&g->gn[idx].clock_waiters);
  /* Votes that waited for the others' clocks (clocks_coming). */
  wake_list(&g->waiters);
}

int redlock__guard_clock_ready(const redlock__guard *g, unsigned idx,
                               uint32_t seq, uint64_t teardowns) {
  const redlock__node *n = &g->nodes[idx];
  if (n->teardowns != teardowns || n->state != REDLOCK__NODE_UP)
    return -1;
  return (int32_t)(n->clock_done - seq) >= 0 ? 1 : 0;
}

void redlock__guard_wait_clock(redlock__guard *g, unsigned idx,
                               redlock__guard_waiter *w) {
  redlock__queue_insert_tail(&g->gn[idx].clock_waiters, &w->link);
}

/* ---- configuration warnings (item: masters that are not independent) ----- */

static void config_warnings(redlock__guard *g, unsigned idx) {
  const redlock__node *me = &g->nodes[idx];
  unsigned i;
  if (strcmp(me->role, "slave") == 0 && !kind_of(g, me)->replica_ok)
    warn(g, idx, "%s is a replica (role:slave), not a master: it cannot "
         "take a lock; give the masters themselves", me->uri.display);
  for (i = 0; i < g->n; i++) {
    const redlock__node *o = &g->nodes[i];
    if (i == idx || o->connects == 0 || o->master == me->master)
      continue;
    if (me->run_id[0] != '\0' && strcmp(me->run_id, o->run_id) == 0) {
      warn(g, idx, "%s and %s are the same Redis instance (run_id %.8s): "
           "one master counted twice, the quorum means less than it says",
           o->uri.display, me->uri.display, me->run_id);
      continue;
    }
    if (me->replid[0] != '\0' && strcmp(me->replid, o->replid) == 0)
      warn(g, idx, "%s and %s share a replication id: one replicates from "
           "the other, so they are not independent masters",
           o->uri.display, me->uri.display);
  }
}

/* A sentinel group's primary that accepts writes when cut off from its
 * replicas is not counted (round.c, batch.c): said once, again after it
 * was fixed and broke again. */
static void isolation_warning(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  char why[300];
  if (redlock__node_isolated(&g->nodes[idx], why, sizeof(why))) {
    gn->told_isolation = 0;
    return;
  }
  if (gn->told_isolation)
    return;
  gn->told_isolation = 1;
  warn(g, idx, "%s: %s; its votes do not count (a partition could leave "
       "the old primary taking writes while the other sentinels promote a "
       "replica)", g->nodes[idx].uri.display, why);
}

/* ---- node events ----------------------------------------------------------- */

/* The clock record describes this instance: its run_id and replication
 * id (a record without the latter, of an older client, does not). */
static int record_is_mine(const redlock__node *node) {
  return node->run_id[0] != '\0' && strcmp(node->rec_run, node->run_id) == 0 &&
         strcmp(node->rec_rid, node->replid) == 0;
}

/* The start the clock record gives this instance (when a client first
 * saw it, in the master's time, as a validity-clock time), or 0 when the
 * record is not this instance's. */
static redlock__ns record_start(const redlock__node *node) {
  int64_t ago_ms;
  if (!record_is_mine(node) || node->rec_seen_ms < 0 || !reading_ok(node))
    return 0;
  ago_ms = node->clock.wall_us / 1000 - node->rec_seen_ms;
  if (ago_ms <= 0)
    return node->clock.reply_ns;
  if ((redlock__ns)ago_ms * REDLOCK__NS_PER_MS >= node->clock.reply_ns)
    return 1;
  return node->clock.reply_ns - (redlock__ns)ago_ms * REDLOCK__NS_PER_MS;
}

/* The record's clock part: its offset (for this instance), and a step
 * mark that another client left. */
static void read_record(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  int64_t ago_ms;
  redlock__ns at;
  if (record_is_mine(node) && node->rec_off_us != INT64_MIN) {
    gn->base = 1;
    gn->base_check = 1;
    gn->base_off_us = node->rec_off_us;
    gn->base_unc_us = node->rec_unc_us;
  }
  if (node->rec_step_ms < 0 || !reading_ok(node))
    return;
  ago_ms = node->clock.wall_us / 1000 - node->rec_step_ms;
  if (ago_ms <= 0)
    at = node->clock.reply_ns;   /* its clock went back since: now */
  else if ((redlock__ns)ago_ms * REDLOCK__NS_PER_MS >= node->clock.reply_ns)
    return;                      /* longer ago than this machine's boot */
  else
    at = node->clock.reply_ns - (redlock__ns)ago_ms * REDLOCK__NS_PER_MS;
  if (at > gn->step_ns) {
    gn->step_ns = at;
    gn->step_us = 0;
    gn->step_how = GUARD_STEP_MARK;
    gn->step_read = 0;   /* its window: the record as it is now */
    request_read(g);
  }
}

void redlock__guard_node_up(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  redlock__ns now = node->up_ns;
  redlock__ns rec = record_start(node);
  int same = node->ident[0] != '\0' && strcmp(node->ident, gn->run_id) == 0;
  gn->up = 1;
  gn->up_ns = now;
  gn->known_ms = node->maxttl_ms;
  record_seen(g, node->maxttl_ms);
  if (same) {
    /* The same instance again: one more bound on its start. */
    if (rec != 0 && rec < gn->start) {
      gn->start = rec;
      gn->start_rec = 1;
    }
  } else {
    /* A new instance (or one we cannot identify): it started at the
     * latest when some client first saw it in step, or now (4.). */
    gn->start = rec != 0 ? rec : now;
    gn->start_rec = rec != 0;
    gn->accept_ns = 0;
    gn->warned[0] = '\0';
    gn->have = 0;   /* tracking starts over */
    gn->base = 0;   /* unless the record knows this instance */
    gn->decl = GUARD_DECL_NONE;
    gn->decl_failed = 0;
    if (gn->broke[0] != '\0' && strcmp(gn->broke, node->ident) != 0) {
      /* Its predecessor broke the durability declaration: what this one
       * loaded may lack writes (6.). */
      memcpy(gn->distrust, node->ident, sizeof(gn->distrust));
      gn->broke[0] = '\0';
      warn(g, idx, "%s restarted after it broke its durability "
           "declaration: guarded for the longest ttl", node->uri.display);
    }
    memcpy(gn->run_id, node->ident, sizeof(gn->run_id));
    if (node->ident[0] == '\0')
      gn->seen_as = GUARD_SEEN_UNKNOWN;
    else if (rec != 0)
      gn->seen_as = GUARD_SEEN_RECORD;
    else if (node->rec_run[0] == '\0')
      gn->seen_as = GUARD_SEEN_NEVER;
    else if (strcmp(node->rec_run, node->run_id) != 0)
      gn->seen_as = GUARD_SEEN_RESTART;
    else
      gn->seen_as = GUARD_SEEN_REPLID;
  }
  if (node->declared && node->ident[0] != '\0' &&
      (node->promoted || strcmp(node->role, "slave") == 0)) {
    /* A failover's new primary, or a replica now (REPLICAOF: a full sync
     * replaced its keys, and REPLICAOF NO ONE may make it a master again
     * before this connection's identity check): its data is what
     * asynchronous replication brought it, not what it acknowledged; its
     * own persistence does not help (6.). Guarded, and its next instance
     * too (it reloads the same data). */
    memcpy(gn->broke, node->ident, sizeof(gn->broke));
    gn->decl = GUARD_DECL_NONE;
    if (strcmp(gn->mark, node->ident) != 0)
      mark_broken(g, idx, node->ident);
    if (strcmp(gn->warned, node->ident) != 0) {
      memcpy(gn->warned, node->ident, sizeof(gn->warned));
      warn(g, idx, "%s is declared durable but %s (REPLICAOF, a failover): "
           "guarded for the longest ttl, as its data may lack writes it "
           "acknowledged", node->uri.display,
           node->promoted ? "was a replica promoted in this life"
                          : "is a replica");
    }
  } else if (node->declared && node->ident[0] != '\0' &&
             !kind_of(g, node)->declaration_clears) {
    /* A cluster's primary, a sentinel group's: a failover cannot be told
     * from a durable restart (7.), so the declaration clears nothing. */
    if (!gn->told_failover) {
      gn->told_failover = 1;
      warn(g, idx, "%s is declared durable, but it is the primary of a %s: "
           "a replica promoted by a failover holds only what replication "
           "brought it, and Redis does not always report a promotion; "
           "guarded like an undeclared master", node->uri.display,
           kind_of(g, node)->node_is);
    }
  } else if (node->declared && node->ident[0] != '\0') {
    if (node->durable && strcmp(gn->distrust, node->ident) != 0) {
      /* Declared, and it shows appendonly + appendfsync always: this
       * instance loaded every key its predecessor acknowledged (6.),
       * unless another client saw the declaration break: cleared once
       * the other masters were read without a mark naming it. */
      if (!is_cleared(gn) && gn->decl == GUARD_DECL_NONE &&
          idx < g->n_masters && g->broke_key != NULL)
        gn->decl = GUARD_DECL_PENDING;
      else if (!is_cleared(gn) && gn->decl == GUARD_DECL_NONE)
        clear(gn);
    } else if (!node->durable) {
      gn->decl = GUARD_DECL_NONE;
      if (node->aof_enabled == 0 || node->fsync[0] != '\0') {
        /* Not durable now (read, not merely unknown: ACL): what its next
         * instance loads may lack writes. */
        memcpy(gn->broke, node->ident, sizeof(gn->broke));
        if (is_cleared(gn))
          gn->cleared[0] = '\0';
        if (strcmp(gn->mark, node->ident) != 0)
          mark_broken(g, idx, node->ident);
      }
      if (strcmp(gn->warned, node->ident) != 0) {
        memcpy(gn->warned, node->ident, sizeof(gn->warned));
        warn(g, idx, "%s is declared durable but reports %s: guarded like "
             "an undeclared master", node->uri.display,
             node->aof_enabled != 1 ? "appendonly no"
                                    : "appendfsync not always");
      }
    }
  }
  {
    /* The marks this client stamps or drops, on a master that was not up
     * then. */
    unsigned m;
    for (m = 0; m < g->n_masters; m++) {
      if (g->gn[m].mark[0] != '\0')
        stamp_on(g, m, idx);
      if (g->gn[m].forget[0] != '\0')
        forget_on(g, m, idx, g->gn[m].forget);
    }
  }
  g->unsettled = 1;
  g->raise_ok = 0;
  read_record(g, idx);
  clock_reading(g, idx, same);
  if (!same)
    config_warnings(g, idx);
  isolation_warning(g, idx);
  if (g->mode_ms >= 0 && !is_cleared(gn)) {
    gn->cleared[0] = '\0';
    gn->read = GUARD_READ_NONE;
    request_read(g);
  }
  check_settled(g);
}

void redlock__guard_node_down(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  g->raise_ok = 0;
  gn->up = 0;
  gn->known_ms = 0;   /* read again at the next handshake */
  check_settled(g);
  wake_list(&gn->clock_waiters);
}

void redlock__guard_durable(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  isolation_warning(g, idx);
  if (!node->declared || node->durable || node->ident[0] == '\0' ||
      strcmp(gn->broke, node->ident) == 0)
    return;
  /* The declaration broke while connected (CONFIG SET at run time): this
   * instance keeps its keys in memory, but what a restart loads now lacks
   * writes. Guarded as undeclared, and its next instance too. */
  memcpy(gn->broke, node->ident, sizeof(gn->broke));
  gn->decl = GUARD_DECL_NONE;
  if (is_cleared(gn))
    gn->cleared[0] = '\0';
  /* Other clients, a CLI call among them, must know it too: marked on
   * the other masters (this one loses what it is told from now on). */
  mark_broken(g, idx, node->ident);
  warn(g, idx, "%s is declared durable but now reports %s (changed at run "
       "time?): guarded like an undeclared master, and after its next "
       "restart", node->uri.display,
       node->aof_enabled != 1 ? "appendonly no" : "appendfsync not always");
  if (g->mode_ms >= 0) {
    gn->read = GUARD_READ_NONE;
    request_read(g);
  }
}

/* ---- marks of a broken declaration (6.) ---------------------------------- */

/* A master that a declaration can clear (a plain one): the subject of a
 * mark (a cluster's or a sentinel group's node is never cleared by the
 * declaration, 7.). */
static int is_plain(const redlock__guard *g, const redlock__node *n) {
  return kind_of(g, n)->declaration_clears;
}

/* The mark's field: the master's address as the deployment names it. */
static void mark_field(const redlock__node *n, char *buf, size_t len) {
  if (n->uri.path != NULL)
    snprintf(buf, len, "%s", n->uri.path);
  else if (strchr(n->uri.host, ':') != NULL)
    snprintf(buf, len, "[%s]:%d", n->uri.host, n->uri.port);
  else
    snprintf(buf, len, "%s:%d", n->uri.host, n->uri.port);
}

static int decl_waiting(const redlock__guard *g) {
  unsigned i;
  for (i = 0; i < g->n_masters; i++)
    if (g->gn[i].decl == GUARD_DECL_PENDING)
      return 1;
  return 0;
}

#define STAMP_BACKOFF_MIN_MS 500
#define STAMP_BACKOFF_MAX_MS 8000

/* Node j's answer to master i's mark (req->tag.cell: i * n + j; req->kind: the
 * mark's generation). Only an integer (HSET's count) means the mark is
 * there: an error (NOPERM, OOM, READONLY), a timeout or a lost connection
 * leaves it to be sent again, and is told once per mark. */
static void on_stamp_reply(redlock__req *req, const redlock__reply *r,
                           int error, const char *errstr) {
  redlock__guard *g = req->owner;
  unsigned i = req->tag.cell / g->n, j = req->tag.cell % g->n;
  redlock__guard_node *gn;
  if (g->stamp == NULL || i >= g->n_masters)
    return;
  gn = &g->gn[i];
  if (req->kind != gn->stamp_gen || gn->mark[0] == '\0' ||
      g->stamp[req->tag.cell] != GUARD_STAMP_SENT)
    return;   /* an older mark's, or stamped again meanwhile */
  if (r != NULL && r->type == REDLOCK__R_INTEGER) {
    g->stamp[req->tag.cell] = GUARD_STAMP_DONE;
    return;
  }
  g->stamp[req->tag.cell] = GUARD_STAMP_FAILED;
  if (gn->stamp_backoff_ms == 0)
    gn->stamp_backoff_ms = STAMP_BACKOFF_MIN_MS;
  gn->stamp_retry_ns = guard_now(g) +
                       (redlock__ns)gn->stamp_backoff_ms * 1000000;
  if (gn->stamp_backoff_ms < STAMP_BACKOFF_MAX_MS)
    gn->stamp_backoff_ms *= 2;
  if (gn->stamp_warned || g->closing)
    return;
  gn->stamp_warned = 1;
  /* The key before the server's text: the message is cut at 300. */
  warn(g, i, "the mark that %s broke its durability declaration could not "
       "be written on %s: the client's user needs HSET on %.*s; retrying "
       "while this client is open (%.70s)", g->nodes[i].uri.display,
       g->nodes[j].uri.display, (int)g->broke_keylen, g->broke_key,
       r != NULL && r->type == REDLOCK__R_ERROR && r->str != NULL
           ? r->str
           : (error && errstr != NULL && errstr[0] != '\0' ? errstr
                                                           : "no reply"));
}

/* Can node j hold a mark of master i: a plain node that is up and not of
 * master i? */
static int mark_target(const redlock__guard *g, unsigned i, unsigned j) {
  const redlock__node *node = &g->nodes[j];
  return g->broke_key != NULL && kind_of(g, node)->holds_marks &&
         !node->lazy &&
         node->master != i && node->state == REDLOCK__NODE_UP;
}

/* Master i's mark on node j (mark_target), checked: done on j once j answered the HSET with an integer
 * (on_stamp_reply). A restarted j lost it: this client stamps it again
 * at j's every handshake, and a failed write at the next tick after its
 * backoff (redlock__guard_tick). */
static void stamp_on(redlock__guard *g, unsigned i, unsigned j) {
  redlock__node *node = &g->nodes[j];
  const char *argv[4];
  size_t lens[4];
  char field[300];
  redlock__req *req;
  if (!mark_target(g, i, j))
    return;
  req = redlock__node_req(node);
  if (req == NULL) {
    g->stamp[i * g->n + j] = GUARD_STAMP_FAILED;
    return;
  }
  mark_field(&g->nodes[i], field, sizeof(field));
  argv[0] = "HSET";
  lens[0] = 4;
  argv[1] = g->broke_key;
  lens[1] = g->broke_keylen;
  argv[2] = field;
  lens[2] = strlen(field);
  argv[3] = g->gn[i].mark;
  lens[3] = strlen(g->gn[i].mark);
  req->flags = REDLOCK__REQ_INTERNAL | REDLOCK__REQ_HERE;
  req->cb = on_stamp_reply;
  req->owner = g;
  req->tag.cell = i * g->n + j;
  req->kind = g->gn[i].stamp_gen;
  g->stamp[i * g->n + j] = GUARD_STAMP_SENT;
  (void)redlock__node_submit(node, req, 4, argv, lens);
}

/* Plain master i's instance `ident` broke its declaration (or was a
 * replica in this life): stamped on every other master up. */
static void mark_broken(redlock__guard *g, unsigned i, const char *ident) {
  unsigned j;
  if (i >= g->n_masters || !is_plain(g, &g->nodes[i]))
    return;
  redlock__strlcpy(g->gn[i].mark, ident, sizeof(g->gn[i].mark));
  g->gn[i].stamp_gen++;
  g->gn[i].stamp_warned = 0;
  g->gn[i].stamp_backoff_ms = 0;
  memset(&g->stamp[i * g->n], GUARD_STAMP_NONE, g->n);
  for (j = 0; j < g->n; j++)
    stamp_on(g, i, j);
}

void redlock__guard_tick(redlock__guard *g) {
  redlock__ns now = guard_now(g);
  unsigned i, j;
  if (g->stamp == NULL || g->closing)
    return;
  for (i = 0; i < g->n_masters; i++) {
    if (g->gn[i].mark[0] == '\0' || now < g->gn[i].stamp_retry_ns)
      continue;
    for (j = 0; j < g->n; j++)
      if (g->stamp[i * g->n + j] == GUARD_STAMP_FAILED)
        stamp_on(g, i, j);
  }
}

unsigned redlock__guard_marks_unconfirmed(const redlock__guard *g,
                                          char *name, size_t len) {
  unsigned i, j, count = 0;
  if (g->stamp == NULL || g->broke_key == NULL)
    return 0;
  for (i = 0; i < g->n_masters; i++) {
    int done = 0, other = 0;
    if (g->gn[i].mark[0] == '\0')
      continue;
    for (j = 0; j < g->n; j++) {
      if (g->nodes[j].master == i || !kind_of(g, &g->nodes[j])->holds_marks)
        continue;
      other = 1;
      done |= g->stamp[i * g->n + j] == GUARD_STAMP_DONE;
    }
    if (!other || done)
      continue;   /* N = 1: nowhere to write it (docs/GUARANTEES.md) */
    if (count++ == 0 && name != NULL && len > 0)
      snprintf(name, len, "%s", g->nodes[i].uri.display);
  }
  return count;
}

/* Fire and forget: drop master i's mark on node j if it still names
 * `ident` (a newer break stays). */
static void forget_on(redlock__guard *g, unsigned i, unsigned j,
                      const char *ident) {
  const redlock__script *s = redlock__script_of(REDLOCK__CMD_MARK_FORGET);
  redlock__node *node = &g->nodes[j];
  const char *argv[6];
  size_t lens[6];
  char field[300];
  redlock__req *req;
  if (!mark_target(g, i, j))
    return;
  req = redlock__node_req(node);
  if (req == NULL)
    return;
  mark_field(&g->nodes[i], field, sizeof(field));
  argv[0] = "EVAL";
  lens[0] = 4;
  argv[1] = s->text;
  lens[1] = s->len;
  argv[2] = "1";
  lens[2] = 1;
  argv[3] = g->broke_key;
  lens[3] = g->broke_keylen;
  argv[4] = field;
  lens[4] = strlen(field);
  argv[5] = ident;
  lens[5] = strlen(ident);
  req->flags = REDLOCK__REQ_INTERNAL | REDLOCK__REQ_HERE;
  (void)redlock__node_submit(node, req, 6, argv, lens);
}

/* Master i's instance has been guarded for the window (cleared by age):
 * a mark naming an EARLIER instance is obsolete once this one is durable
 * (what it lost then has expired; what it writes now it keeps). Dropped
 * on every other master up, and again at the next handshake of the
 * others (a master down now keeps it: its mark would cost a new client
 * one window more, not safety); this client no longer stamps it. A mark
 * naming this very instance stays (its successor must be guarded). */
static void forget_marks(redlock__guard *g, unsigned i) {
  redlock__guard_node *gn = &g->gn[i];
  const char *name;
  unsigned j;
  if (i >= g->n_masters || !g->nodes[i].durable || g->broke_key == NULL)
    return;
  name = gn->marked[0] != '\0' ? gn->marked : gn->mark;
  if (name[0] == '\0' || strcmp(name, gn->run_id) == 0)
    return;
  memmove(gn->forget, name, sizeof(gn->forget));
  if (strcmp(gn->mark, gn->forget) == 0)
    gn->mark[0] = '\0';
  gn->marked[0] = '\0';
  for (j = 0; j < g->n; j++)
    forget_on(g, i, j, gn->forget);
}

/* A read's answer from node j: the marks it holds (HGETALL, field and
 * value pairs), matched against our masters' addresses. */
static void on_marks_reply(redlock__req *req, const redlock__reply *r,
                           int error, const char *errstr) {
  redlock__guard *g = req->owner;
  size_t k;
  unsigned m;
  (void)error;
  (void)errstr;
  if (req->tag.gen != g->read_gen || !g->reading)
    return;
  if (r != NULL && r->type == REDLOCK__R_ARRAY) {
    g->marks_ok[req->idx] = 1;
    for (k = 0; k + 1 < r->elements; k += 2) {
      const redlock__reply *f = r->element[k], *v = r->element[k + 1];
      char field[300];
      if (f == NULL || v == NULL || f->type != REDLOCK__R_STRING ||
          v->type != REDLOCK__R_STRING || v->len == 0)
        continue;
      for (m = 0; m < g->n_masters; m++) {
        /* Only a plain master is marked (a sentinel group's node has no
         * address until the sentinels name its primary). */
        if (!is_plain(g, &g->nodes[m]) || m == req->idx)
          continue;
        mark_field(&g->nodes[m], field, sizeof(field));
        if (strlen(field) == f->len && memcmp(field, f->str, f->len) == 0)
          redlock__strlcpy(g->gn[m].read_mark, v->str,
                           v->len < sizeof(g->gn[m].read_mark)
                               ? v->len + 1 : sizeof(g->gn[m].read_mark));
      }
    }
  }
  if (--g->read_left == 0)
    finish_read(g);
}

/* The read ended: a declared instance waiting for the marks is cleared
 * when every other master answered and none holds a mark naming it. */
static void settle_decl(redlock__guard *g) {
  unsigned i, m;
  for (i = 0; i < g->n_masters; i++) {
    redlock__guard_node *gn = &g->gn[i];
    int all = 1;
    if (gn->decl != GUARD_DECL_PENDING || !gn->up ||
        gn->up_ns > g->read_start)
      continue;
    for (m = 0; m < g->n_masters; m++)
      if (m != i && !g->marks_ok[m])
        all = 0;
    if (!all) {
      gn->decl_failed = 1;
      continue;
    }
    gn->decl_failed = 0;
    if (gn->read_mark[0] != '\0') {
      gn->decl = GUARD_DECL_MARKED;
      memcpy(gn->marked, gn->read_mark, sizeof(gn->marked));
      warn(g, i, "%s is declared durable, but a client saw the durability "
           "of %s instance break (a mark on the other masters): guarded "
           "for the longest ttl", g->nodes[i].uri.display,
           strcmp(gn->marked, gn->run_id) == 0 ? "this" : "a previous");
    } else {
      gn->decl = GUARD_DECL_NONE;
      clear(gn);
    }
  }
}

/* ---- reading the record on every master --------------------------------- */

static void finish_read(redlock__guard *g) {
  redlock__queue waiters;
  unsigned i;
  int valid;
  g->reading = 0;
  valid = redlock__guard_read_valid(g->n_masters, g->quorum,
                                    g->read_answered);
  if (valid) {
    record_seen(g, g->read_max);
    g->read_ok_ns = g->read_start;
    for (i = 0; i < g->n; i++)
      if (g->gn[i].step_ns != 0 && g->gn[i].step_ns <= g->read_start)
        g->gn[i].step_read = 1;
  }
  settle_decl(g);
  for (i = 0; i < g->n; i++) {
    redlock__guard_node *gn = &g->gn[i];
    if (gn->up && !is_cleared(gn) && gn->up_ns <= g->read_start)
      gn->read = valid ? GUARD_READ_OK : GUARD_READ_FAILED;
  }
  /* Detach first: a waiter may wait again. */
  redlock__queue_init(&waiters);
  while (!redlock__queue_empty(&g->waiters)) {
    redlock__queue *q = g->waiters.next;
    redlock__queue_remove(q);
    redlock__queue_insert_tail(&waiters, q);
  }
  if (g->again && !g->closing)
    guard_start_read(g);
  while (!redlock__queue_empty(&waiters)) {
    redlock__guard_waiter *w =
        REDLOCK__CONTAINER_OF(waiters.next, redlock__guard_waiter, link);
    redlock__queue_remove(&w->link);
    w->cb(w);
  }
}

static void on_read_reply(redlock__req *req, const redlock__reply *r,
                          int error, const char *errstr) {
  redlock__guard *g = req->owner;
  (void)error;
  (void)errstr;
  if (req->tag.gen != g->read_gen || !g->reading)
    return;
  if (r != NULL) {
    redlock__vote v;
    redlock__classify(REDLOCK__CMD_MAXTTL_GET, r, &v);
    if (v.vote == REDLOCK_VOTE_YES) {
      /* A master answered when one of its nodes did (a cluster keeps a
       * copy of the record on every primary: a failover of one shard
       * loses one copy, guard.c 5.). */
      if (!g->read_ok[req->idx]) {
        g->read_ok[req->idx] = 1;
        g->read_answered++;
      }
      if (v.value > g->read_max)
        g->read_max = v.value;
      if (v.value < g->gn[req->node->index].known_ms)
        g->raise_ok = 0;
      g->gn[req->node->index].known_ms = v.value;
    }
  }
  if (--g->read_left == 0)
    finish_read(g);
}

static void guard_start_read(redlock__guard *g) {
  const char *argv[2];
  size_t lens[2];
  unsigned i;
  g->reading = 1;
  g->again = 0;
  g->read_start = guard_now(g);
  g->read_left = g->n;
  g->read_answered = 0;
  memset(g->read_ok, 0, g->n_masters);
  memset(g->marks_ok, 0, g->n_masters);
  for (i = 0; i < g->n_masters; i++)
    g->gn[i].read_mark[0] = '\0';
  g->read_max = 0;
  g->read_gen++;
  argv[0] = "GET";
  lens[0] = 3;
  for (i = 0; i < g->n; i++) {
    redlock__req *req;
    if (g->nodes[i].lazy) {
      g->read_left--;
      continue;
    }
    req = redlock__node_req(&g->nodes[i]);
    argv[1] = g->nodes[i].rec_maxttl;
    lens[1] = g->nodes[i].rec_maxttl_len;
    if (req != NULL) {
      req->cb = on_read_reply;
      req->owner = g;
      req->tag.gen = g->read_gen;
      req->flags = REDLOCK__REQ_HERE;
      if (redlock__node_submit(&g->nodes[i], req, 2, argv, lens) != 0)
        g->read_left--;
    } else {
      g->read_left--;
    }
    /* And the marks of broken declarations it holds (6.): a cluster
     * cannot hold them (its keys are tagged to slots). */
    if (g->broke_key == NULL || !kind_of(g, &g->nodes[i])->holds_marks)
      continue;
    g->read_left++;
    req = redlock__node_req(&g->nodes[i]);
    if (req != NULL) {
      const char *mv[2];
      size_t ml[2];
      mv[0] = "HGETALL";
      ml[0] = 7;
      mv[1] = g->broke_key;
      ml[1] = g->broke_keylen;
      req->cb = on_marks_reply;
      req->owner = g;
      req->tag.gen = g->read_gen;
      req->flags = REDLOCK__REQ_HERE;
      if (redlock__node_submit(&g->nodes[i], req, 2, mv, ml) == 0)
        continue;
    }
    g->read_left--;
  }
  if (g->read_left == 0)
    finish_read(g);
}

void redlock__guard_close(redlock__guard *g) {
  unsigned i;
  g->closing = 1;
  g->again = 0;
  wake_list(&g->settle_waiters);
  for (i = 0; i < g->n; i++)
    wake_list(&g->gn[i].clock_waiters);
  while (!redlock__queue_empty(&g->waiters)) {
    redlock__guard_waiter *w =
        REDLOCK__CONTAINER_OF(g->waiters.next, redlock__guard_waiter, link);
    redlock__queue_remove(&w->link);
    w->cb(w);
  }
}

/* ---- verdicts ------------------------------------------------------------ */

/* The clock's part of a verdict (3.): COUNT, or REFUSE with why. */
static redlock__guard_verdict clock_verdict(const redlock__guard *g,
                                            unsigned idx, int64_t ttl_ms,
                                            redlock__ns now, char *why,
                                            size_t whylen, int64_t *wait_ms,
                                            int64_t *window_ms, int *cause) {
  const redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  int64_t window = redlock__guard_window(g);
  int64_t skew, unc;
  if (!g->clock_on)
    return REDLOCK__GUARD_COUNT;
  if (!gn->have) {
    *cause = REDLOCK_GUARD_CLOCK_UNKNOWN;
    snprintf(why, whylen, node->clock_refused
                              ? "TIME refused (ACL?): its clock cannot be "
                                "checked; allow TIME or turn the clock "
                                "check off (clock_tolerance_ms < 0)"
                              : "its clock could not be read (TIME)");
    return REDLOCK__GUARD_REFUSE;
  }
  if (gn->step_ns != 0 && window > 0 &&
      now < gn->step_ns + (redlock__ns)window * REDLOCK__NS_PER_MS) {
    int64_t ago = (int64_t)((now - gn->step_ns) / REDLOCK__NS_PER_MS);
    *cause = REDLOCK_GUARD_CLOCK_STEP;
    *wait_ms = window - ago;
    *window_ms = window;
    switch (gn->step_how) {
      case GUARD_STEP_MARK:
        /* Starts with "clock": explain.c then writes "master N's
         * clock ...", as for every clock cause. */
        snprintf(why, whylen, "clock step seen by another client %.1f s "
                 "ago: its votes count again in %.1f s",
                 (double)ago / 1000.0, (double)*wait_ms / 1000.0);
        break;
      case GUARD_STEP_FIRST:
        snprintf(why, whylen, "clock %.1f s %s the others' when first seen "
                 "%.1f s ago (it may have stepped): its votes count again "
                 "in %.1f s", (double)abs64(gn->step_us) / 1e6,
                 gn->step_us > 0 ? "ahead of" : "behind",
                 (double)ago / 1000.0, (double)*wait_ms / 1000.0);
        break;
      default:
        snprintf(why, whylen, "clock stepped %.1f s %s %.1f s ago: its "
                 "votes count again in %.1f s",
                 (double)abs64(gn->step_us) / 1e6,
                 gn->step_us > 0 ? "forward" : "back", (double)ago / 1000.0,
                 (double)*wait_ms / 1000.0);
        break;
    }
    return REDLOCK__GUARD_REFUSE;
  }
  if (window > 0 &&
      now < gn->start + (redlock__ns)window * REDLOCK__NS_PER_MS) {
    /* A young instance (first seen less than `window` ago): nobody knows
     * its clock's past. Off the others' by more than the SHORTEST ttl's
     * drift allowance (the fixed part, or the configured tolerance), it
     * may have stepped before it was first seen and lost keys then;
     * settle() judged that first sight with the longest ttl's allowance
     * only (it has no ttl), and its base is the stepped offset itself, so
     * neither tracking nor the base can tell. The keys it may have lost
     * are whoever's held them, with ttls down to 1 ms, not this lock's:
     * judged with this lock's allowance, a long ttl's YES counted on a
     * master that had lost a short ttl's key early (3. ii). */
    if (redlock__guard_skew(g, idx, &skew, &unc) != 0) {
      if (clocks_coming(g))
        return REDLOCK__GUARD_PENDING;
      *cause = REDLOCK_GUARD_CLOCK_UNKNOWN;
      snprintf(why, whylen, "too few masters' clocks known to compare its "
               "clock with");
      return REDLOCK__GUARD_REFUSE;
    }
    if (abs64(skew) > tolerance_us(g, 0) + unc) {
      int64_t ago = (int64_t)((now - gn->start) / REDLOCK__NS_PER_MS);
      *cause = REDLOCK_GUARD_CLOCK_STEP;
      *wait_ms = window - ago;
      *window_ms = window;
      snprintf(why, whylen, "clock %.3f s %s the others' (first seen "
               "%.1f s ago; a young one may be off by %.3f s: the "
               "shortest ttl's allowance): counts in %.1f s",
               (double)abs64(skew) / 1e6, skew > 0 ? "ahead of" : "behind",
               (double)ago / 1000.0, (double)tolerance_us(g, 0) / 1e6,
               (double)*wait_ms / 1000.0);
      return REDLOCK__GUARD_REFUSE;
    }
  }
  if (gn->continuity && gn->slack_us <= tolerance_us(g, ttl_ms))
    return REDLOCK__GUARD_COUNT;   /* tracking is tighter than the skew */
  if (redlock__guard_skew(g, idx, &skew, &unc) != 0 || !gn->base) {
    if (gn->base && clocks_coming(g))
      return REDLOCK__GUARD_PENDING;
    *cause = REDLOCK_GUARD_CLOCK_UNKNOWN;
    snprintf(why, whylen, "too few masters' clocks known to compare its "
             "clock with");
    return REDLOCK__GUARD_REFUSE;
  }
  if (abs64(skew - gn->base_off_us) >
      tolerance_us(g, ttl_ms) + unc + gn->base_unc_us) {
    /* Moved against the others since its offset was noted, by less than
     * the longest ttl's tolerance (else settle() saw a step) but more
     * than this lock's. */
    *cause = REDLOCK_GUARD_CLOCK_SKEW;
    snprintf(why, whylen, "clock moved %.3f s against the others' since "
             "it was last seen (tolerance %.3f s for this ttl)",
             (double)abs64(skew - gn->base_off_us) / 1e6,
             (double)tolerance_us(g, ttl_ms) / 1e6);
    return REDLOCK__GUARD_REFUSE;
  }
  return REDLOCK__GUARD_COUNT;
}

/* A young instance's refusal, in words an operator can act on: which
 * cause the record showed at this client's first sight (explain.c groups
 * masters by these words: keep them in step), its age and own uptime,
 * and where the window comes from. A new replication id under the same
 * run_id is guarded though a first replica attaching loses no key: Redis
 * gives a master a new id then (a new backlog), and the same change, with
 * nothing else to tell them apart, follows a full sync from another
 * master (a replica meanwhile, promoted back, its backlog freed): keys
 * replaced. */
static void restart_why(const redlock__guard *g, unsigned idx, int64_t age,
                        int64_t window, char *why, size_t whylen) {
  const redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  const char *what, *from, *broke = "";
  char up[48] = "";
  switch (gn->seen_as) {
    case GUARD_SEEN_NEVER:
      what = "never seen by any client (no record)";
      break;
    case GUARD_SEEN_RESTART:
      what = "restarted (another run_id on record)";
      break;
    case GUARD_SEEN_REPLID:
      what = "changed replication id (same run_id)";
      break;
    case GUARD_SEEN_RECORD:
      what = "first seen by a client";
      break;
    default:
      what = "of unknown age (no run_id)";
      break;
  }
  if (node->uptime_s >= 0)
    snprintf(up, sizeof(up), ", up %lld s",
             (long long)node->uptime_s);
  if (g->mode_ms > 0)
    from = "--restart-guard";
  else
    from = "the ttl record";
  if (gn->decl == GUARD_DECL_MARKED)
    broke = "durability broke (a mark), ";
  else if (node->declared &&
           (node->promoted || strcmp(node->role, "slave") == 0))
    broke = "a replica (REPLICAOF, a failover), ";
  snprintf(why, whylen,
           "restart guard: %s%s, %.1f s ago%s; counts in %.1f s (window "
           "%.1f s: %s)",
           broke,
           what, (double)age / 1000.0, up, (double)(window - age) / 1000.0,
           (double)window / 1000.0, from);
}

/* The restart's part (4.-6.), given the read state. */
static redlock__guard_verdict restart_verdict(redlock__guard *g,
                                              unsigned idx, redlock__ns now,
                                              int start_reads, char *why,
                                              size_t whylen,
                                              int64_t *wait_ms,
                                              int64_t *window_ms,
                                              int *cause) {
  redlock__guard_node *gn = &g->gn[idx];
  int64_t age;
  int64_t window;
  if (g->mode_ms < 0 || is_cleared(gn))
    return REDLOCK__GUARD_COUNT;
  age = redlock__age_ms(gn->start, now);
  if (g->mode_ms > 0) {
    window = g->mode_ms;
  } else {
    if (g->closing) {
      *cause = REDLOCK_GUARD_RECORD;
      snprintf(why, whylen, "restart guard: client closing");
      return REDLOCK__GUARD_REFUSE;
    }
    if (gn->read == GUARD_READ_NONE && start_reads)
      request_read(g);   /* may end at once when no master can answer */
    switch (gn->read) {
      case GUARD_READ_NONE:
        if (!start_reads) {
          *cause = g->reading ? REDLOCK_GUARD_READING : REDLOCK_GUARD_RECORD;
          snprintf(why, whylen, "restart guard: longest ttl %s",
                   g->reading ? "being read" : "not read yet");
          return REDLOCK__GUARD_REFUSE;
        }
        return REDLOCK__GUARD_PENDING;
      case GUARD_READ_FAILED:
        *cause = REDLOCK_GUARD_RECORD;
        snprintf(why, whylen,
                 "restart guard: longest ttl unreadable (too few masters "
                 "answered)");
        /* The next attempt reads again. */
        if (start_reads)
          gn->read = GUARD_READ_NONE;
        return REDLOCK__GUARD_REFUSE;
      case GUARD_READ_OK:
        break;
    }
    window = g->window_ms;
  }
  if (g->nodes[idx].primary_only && !g->nodes[idx].isolation_unchecked) {
    /* A sentinel group's primary (8.): promoted while the old one still
     * took writes on its side of a partition, it refuses writes
     * (NOREPLICAS) until replicas join it, and the old one stops within
     * min-replicas-max-lag (+1 s: its count of good replicas is updated
     * once a second) after they left. The window runs from its first
     * write taken: its record (written by the first client it let write),
     * else the first YES this client had from it (this one, maybe); and
     * it is longer by that lag. */
    const redlock__node *nd = &g->nodes[idx];
    if (!gn->start_rec) {
      if (gn->accept_ns == 0 && start_reads)
        gn->accept_ns = now;
      if (gn->accept_ns == 0)
        age = 0;
      else if (redlock__age_ms(gn->accept_ns, now) < age)
        age = redlock__age_ms(gn->accept_ns, now);
    }
    /* The old primary's lag bounds it: the largest this client saw in
     * the group (a fresh client knows only the one it reads). */
    if (nd->min_replicas_lag > gn->lag_max)
      gn->lag_max = nd->min_replicas_lag;
    window += ((int64_t)gn->lag_max + 1) * 1000;
  }
  if (age >= window) {
    if (start_reads) {
      clear(gn);
      if (g->nodes[idx].declared)
        forget_marks(g, idx);
      gn->decl = GUARD_DECL_NONE;
    }
    return REDLOCK__GUARD_COUNT;
  }
  if (gn->decl == GUARD_DECL_PENDING) {
    /* Declared and durable: cleared once the marks were read (6.). */
    if (gn->decl_failed || !start_reads) {
      *cause = REDLOCK_GUARD_RECORD;
      snprintf(why, whylen, "restart guard: marks of broken durability "
               "declarations %s", gn->decl_failed
                   ? "unreadable (a master did not answer)" : "not read yet");
      if (start_reads) {
        gn->decl_failed = 0;   /* the next attempt reads again */
        request_read(g);
      }
      return REDLOCK__GUARD_REFUSE;
    }
    if (!g->reading)
      request_read(g);
    return REDLOCK__GUARD_PENDING;
  }
  *cause = REDLOCK_GUARD_RESTART;
  *wait_ms = window - age;
  *window_ms = window;
  restart_why(g, idx, age, window, why, whylen);
  return REDLOCK__GUARD_REFUSE;
}

static redlock__guard_verdict verdict(redlock__guard *g, unsigned idx,
                                      int64_t ttl_ms, redlock__ns now,
                                      int start_reads, char *why,
                                      size_t whylen, int64_t *wait_ms,
                                      int64_t *window_ms, int *cause) {
  redlock__guard_verdict v;
  *wait_ms = -1;
  *window_ms = -1;
  *cause = REDLOCK_GUARD_NONE;
  if (!g->gn[idx].up) {
    *cause = REDLOCK_GUARD_RECORD;
    snprintf(why, whylen, "restart guard: connection lost");
    return REDLOCK__GUARD_REFUSE;
  }
  v = clock_verdict(g, idx, ttl_ms, now, why, whylen, wait_ms, window_ms,
                    cause);
  if (v != REDLOCK__GUARD_COUNT)
    return v;
  if (g->mode_ms == 0 && g->gn[idx].step_ns != 0 && !g->gn[idx].step_read &&
      !g->closing) {
    /* A step's window ended by what this client knew of the longest ttl,
     * not yet by the record read since the step (mark_step). */
    if (start_reads && !g->reading)
      request_read(g);
    if (g->reading && start_reads)
      return REDLOCK__GUARD_PENDING;
    *cause = REDLOCK_GUARD_CLOCK_STEP;
    snprintf(why, whylen, "clock stepped: the longest ttl %s since",
             g->reading ? "is being read" : "could not be read (too few "
                                            "masters answered)");
    return REDLOCK__GUARD_REFUSE;
  }
  return restart_verdict(g, idx, now, start_reads, why, whylen, wait_ms,
                         window_ms, cause);
}

redlock__guard_verdict redlock__guard_check(redlock__guard *g, unsigned idx,
                                            int64_t ttl_ms, redlock__ns now,
                                            char *why, size_t whylen,
                                            int64_t *wait_ms,
                                            int64_t *window_ms, int *cause) {
  return verdict(g, idx, ttl_ms, now, 1, why, whylen, wait_ms, window_ms,
                 cause);
}

/* A cluster's primary that is down or idled (check_peers): judged by
 * what was seen of its instance. Its window is the longest ttl that any
 * valid read started after its handshake gave (the locks it may have
 * lost were granted before it started, so their ttls were recorded
 * before such a read): no read of its own, which no read can give a node
 * that is down (finish_read), and none asked while the vote waits (a
 * read ended would only start the next one). */
static redlock__guard_verdict down_verdict(redlock__guard *g, unsigned j,
                                           redlock__ns now, char *sub,
                                           size_t sublen, int64_t *wait_ms,
                                           int64_t *window_ms, int *cause) {
  const redlock__guard_node *gn = &g->gn[j];
  int64_t window = redlock__guard_window(g), age;
  if (g->clock_on && gn->step_ns != 0 && window > 0 &&
      now < gn->step_ns + (redlock__ns)window * REDLOCK__NS_PER_MS) {
    *cause = REDLOCK_GUARD_CLOCK_STEP;
    *window_ms = window;
    *wait_ms = window - (int64_t)((now - gn->step_ns) / REDLOCK__NS_PER_MS);
    snprintf(sub, sublen, "clock stepped, counts in %.1f s",
             (double)*wait_ms / 1000.0);
    return REDLOCK__GUARD_REFUSE;
  }
  if (is_cleared(gn))
    return REDLOCK__GUARD_COUNT;
  if (g->mode_ms == 0 &&
      (g->read_ok_ns == 0 || g->read_ok_ns < gn->up_ns)) {
    if (g->reading)
      return REDLOCK__GUARD_PENDING;   /* its end wakes the vote */
    /* The last read failed (or none came since): the next attempt's. */
    request_read(g);
    *cause = REDLOCK_GUARD_RECORD;
    snprintf(sub, sublen, "restart guard: longest ttl not read since it "
             "was seen");
    return REDLOCK__GUARD_REFUSE;
  }
  age = redlock__age_ms(gn->start, now);
  if (age >= window)
    return REDLOCK__GUARD_COUNT;
  *cause = REDLOCK_GUARD_RESTART;
  *wait_ms = window - age;
  *window_ms = window;
  restart_why(g, j, age, window, sub, sublen);
  return REDLOCK__GUARD_REFUSE;
}

/* 7.: a cluster's primaries pass keys to each other (MIGRATE, and ASK
 * while a slot moves), so what one of them lost in a failover or a clock
 * step may be what another now answers for: a slot that left a young
 * primary within its window holds its losses wherever it went, and no
 * client can read which slots did (a new one least of all). The YES of
 * node idx counts only when each other primary of its master would count
 * too: one that is up is judged as its own YES would be (this ttl's
 * tolerance for its clock), on a clock reading sent after the YES came
 * (an older one may predate a step that expired the keys of a slot that
 * then moved: asked, and waited for); one on its way up is waited for
 * (its first handshake may show a new instance); one that is down, or
 * idled (drained of its slots: they went somewhere), by what was seen of
 * it (down_verdict). A master of one node has no other. */
redlock__guard_verdict redlock__guard_check_peers(
    redlock__guard *g, unsigned idx, int64_t ttl_ms, redlock__ns now,
    redlock__ns since, char *why, size_t whylen, int64_t *wait_ms,
    int64_t *window_ms, int *cause, unsigned *peer) {
  unsigned m = g->nodes[idx].master, cnt, k;
  const unsigned *list;
  int pending = 0;
  *wait_ms = -1;
  *window_ms = -1;
  *cause = REDLOCK_GUARD_NONE;
  if (g->mode_ms < 0)
    return REDLOCK__GUARD_COUNT;
  if (g->closing) {
    /* guard_close woke every waiter: none may wait again (a peer whose
     * handshake ended during the close never comes up). */
    *cause = REDLOCK_GUARD_RECORD;
    snprintf(why, whylen, "restart guard: client closing");
    return REDLOCK__GUARD_REFUSE;
  }
  if (g->masters[m].ops->map_stale(&g->masters[m], now)) {
    /* A MOVED said this client's map of the master is out of date: a
     * primary it does not know of may have passed its losses on with the
     * slot that answered (a replica that restarted from an old snapshot,
     * unseen while it was one, promoted, then its slot migrated:
     * redlock-sim, seed 1273 of the corpus). The vote waits for the map
     * that follows (its reply wakes it: cluster.c), whose primaries are
     * then judged below; the attempt's deadline bounds the wait. */
    return REDLOCK__GUARD_PENDING;
  }
  cnt = master_nodes(g, m, &list);
  for (k = 0; k < cnt; k++) {
    unsigned j = node_of(list, m, k);
    redlock__node *n = &g->nodes[j];
    const redlock__guard_node *gn = &g->gn[j];
    redlock__guard_verdict v;
    char sub[200];
    if (j == idx)
      continue;
    if (!gn->up || n->lazy) {
      if (!n->lazy && n->state != REDLOCK__NODE_DOWN &&
          n->state != REDLOCK__NODE_CLOSED) {
        pending = 1;   /* its handshake (client.c wakes the guard) */
        continue;
      }
      if (gn->run_id[0] == '\0')
        continue;      /* never seen: a node that is down moves no key */
      v = down_verdict(g, j, now, sub, sizeof(sub), wait_ms, window_ms,
                       cause);
    } else {
      v = verdict(g, j, ttl_ms, now, 1, sub, sizeof(sub), wait_ms,
                  window_ms, cause);
      if (v == REDLOCK__GUARD_COUNT && g->clock_on && !n->clock_refused &&
          gn->last.send_ns < since) {
        /* Its clock was last read before the YES came: a step since
         * may have expired keys of a slot that then moved to the node
         * that said yes. A reading asked now shows it (tracking). */
        if (redlock__node_read_clock(n) == 0) {
          pending = 1;   /* its reply wakes the vote (guard_clock) */
          continue;
        }
        *cause = REDLOCK_GUARD_CLOCK_UNKNOWN;
        snprintf(sub, sizeof(sub), "its clock could not be read since "
                 "the vote");
        v = REDLOCK__GUARD_REFUSE;
      }
    }
    if (v == REDLOCK__GUARD_PENDING)
      pending = 1;
    if (v != REDLOCK__GUARD_REFUSE)
      continue;
    *peer = j;
    snprintf(why, whylen, "%s: %s, a primary of this cluster (its slots "
             "may have moved)", sub,
             n->uri.display != NULL ? n->uri.display : "?");
    return REDLOCK__GUARD_REFUSE;
  }
  *wait_ms = -1;
  *window_ms = -1;
  *cause = REDLOCK_GUARD_NONE;
  return pending ? REDLOCK__GUARD_PENDING : REDLOCK__GUARD_COUNT;
}

redlock__guard_verdict redlock__guard_peek(redlock__guard *g, unsigned idx,
                                           int64_t ttl_ms, redlock__ns now,
                                           char *why, size_t whylen,
                                           int64_t *wait_ms, int *cause) {
  int64_t window;
  return verdict(g, idx, ttl_ms, now, 0, why, whylen, wait_ms, &window,
                 cause);
}

void redlock__guard_wake(redlock__guard *g) {
  wake_list(&g->waiters);
}

void redlock__guard_wait(redlock__guard *g, redlock__guard_waiter *w) {
  redlock__queue_insert_tail(&g->waiters, &w->link);
}

void redlock__guard_unwait(redlock__guard_waiter *w) {
  redlock__queue_remove(&w->link);
}

/* ---- the record ---------------------------------------------------------- */

int redlock__guard_needs_raise(redlock__guard *g, int64_t ttl_ms) {
  unsigned have = 0;
  unsigned m, i;
  if (ttl_ms <= g->raise_ok)
    return 0;   /* nothing changed since it was enough */
  for (i = 0; i < g->n; i++)
    if (g->gn[i].up && g->gn[i].known_ms < ttl_ms)
      return 1;   /* a node that is up lacks it */
  /* And when fewer than a quorum of masters are known to hold it
   * (masters still connecting: the raise waits behind their handshakes),
   * so that no ttl reaches any master before a quorum holds its record
   * (5.). A master holds it when one of its nodes is up and every node
   * up holds it. */
  for (m = 0; m < g->n_masters; m++) {
    const unsigned *list;
    unsigned cnt = master_nodes(g, m, &list), j, up = 0;
    for (j = 0; j < cnt; j++)
      up += g->gn[node_of(list, m, j)].up;
    have += up > 0;
  }
  if (have < g->quorum)
    return 1;
  g->raise_ok = ttl_ms;
  return 0;
}

int redlock__guard_has_record(const redlock__guard *g, unsigned idx,
                              int64_t ttl_ms) {
  return g->gn[idx].up && g->gn[idx].known_ms >= ttl_ms;
}

static void on_raise_reply(redlock__req *req, const redlock__reply *r,
                           int error, const char *errstr) {
  redlock__guard *g = req->owner;
  redlock__vote v;
  (void)error;
  (void)errstr;
  if (r == NULL)
    return;   /* the node went down: read again at its next handshake */
  redlock__classify(REDLOCK__CMD_MAXTTL_RAISE, r, &v);
  if (v.vote == REDLOCK_VOTE_YES)
    redlock__guard_record(g, req->node->index, v.value);
  else
    redlock__guard_record_failed(g, req->node->index);
}

void redlock__guard_raise_async(redlock__guard *g, int64_t ttl_ms) {
  const redlock__script *s = redlock__script_of(REDLOCK__CMD_MAXTTL_RAISE);
  const char *argv[5];
  size_t lens[5];
  char num[24];
  unsigned i;
  argv[0] = "EVALSHA";
  lens[0] = 7;
  argv[1] = s->sha;
  lens[1] = 40;
  argv[2] = "1";
  lens[2] = 1;
  argv[4] = num;
  lens[4] = redlock__fmt_i64(num, ttl_ms);
  for (i = 0; i < g->n; i++) {
    redlock__req *req;
    if (!g->gn[i].up || g->gn[i].known_ms >= ttl_ms)
      continue;
    req = redlock__node_req(&g->nodes[i]);
    if (req == NULL)
      continue;
    argv[3] = g->nodes[i].rec_maxttl;
    lens[3] = g->nodes[i].rec_maxttl_len;
    req->cb = on_raise_reply;
    req->owner = g;
    req->flags = REDLOCK__REQ_HERE;
    g->gn[i].known_ms = ttl_ms;   /* sent: do not send it again */
    (void)redlock__node_submit(&g->nodes[i], req, 5, argv, lens);
  }
}

void redlock__guard_record_failed(redlock__guard *g, unsigned idx) {
  g->raise_ok = 0;
  /* A client without the auto guard does not insist: no raise again on
   * this connection (the next handshake reads the record afresh). */
  if (g->mode_ms != 0)
    g->gn[idx].known_ms = INT64_MAX;
}

void redlock__guard_record(redlock__guard *g, unsigned idx, int64_t value) {
  if (value < g->gn[idx].known_ms)
    g->raise_ok = 0;
  g->gn[idx].known_ms = value;
}

void redlock__guard_used(redlock__guard *g, int64_t ttl_ms) {
  if (ttl_ms > g->window_ms)
    g->window_ms = ttl_ms;
}
