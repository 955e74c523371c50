/* guard.c: the restart guard.
 *
 * Owns: per master, which instance (run_id) it is, the latest moment that
 * instance can have started, and whether its votes count; the record of
 * the deployment's longest ttl and its reads. Does not own: the votes
 * themselves (lock.c asks for a verdict on each YES of an acquisition).
 *
 * The age of an instance. INFO's uptime_in_seconds is whole wall-clock
 * seconds (pure.h, redlock__start_bound): an instance seen with uptime u
 * at time t started after t - (u - 1) s, so that is the start we assume
 * (the youngest it can be). Every handshake with the same run_id gives
 * another such bound and we keep the earliest, which is still a bound;
 * a new run_id starts over. An instance whose INFO we cannot read (ACL)
 * counts as started at that handshake. The age is measured on the
 * validity clock (CLOCK_BOOTTIME): never the wall clock for durations.
 *
 * The window. A restarted instance's votes count once its age reaches
 * the longest ttl that a lock it lost could have had:
 *  - mode_ms > 0 (a fixed, deployment-wide setting): that value; the
 *    client refuses longer ttls (lock.c), so the promise is kept;
 *  - mode_ms == 0 (auto, the default): the longest ttl recorded on the
 *    masters by any client of the deployment, and this client's own.
 *
 * The record. Every master holds "<prefix>__redlock__:maxttl", never
 * expiring, only raised (scripts.c). A client about to use a ttl L first
 * raises the record to L and waits until a quorum of masters hold a record
 * >= L (acquire.c, lock.c: a round before its first SET or extend with that
 * ttl; masters whose record it already read >= L count without a round
 * trip). Every client records, whatever its own guard setting: the
 * record protects the OTHER clients' guards from its locks. A client with
 * the auto guard waits for the quorum; one with the guard off or fixed
 * sends the raise just ahead of its SET on the same connections and goes
 * on (best effort: it misses only a restart in the same round trip as its
 * first use of a new longest ttl; give every client of a deployment the
 * same setting). Whenever a master shows an instance whose votes do not
 * count yet (new to this client, or restarted), the client reads the
 * record on EVERY master; the instance's votes are judged with the largest
 * value read by a read that started after its handshake and that a quorum
 * of masters answered.
 *
 * Why that is safe: let A hold a lock with ttl L on quorum Q. A raised the
 * record on a set R of >= quorum masters before sending any SET, so
 * before any master of Q could restart having A's key. Redlock's failure
 * model allows at most n - quorum masters to be failed at a time; a master
 * that does not answer our read, and one that restarted and lost A's
 * record, are failed in that model (the guard is what keeps a restarted
 * master out until it is no longer a danger). So among our >= quorum
 * answers at most (n - quorum) - (non-answering) come from restarted
 * members of R, and R has >= quorum members: some answer comes from a
 * member of R that kept the record, and we see a value >= L. (An earlier
 * version demanded more answers - all n, or n - quorum + 1 + the masters
 * this client had not cleared - to stay safe even beyond the model; it
 * left a new client, i.e. every CLI call, unable to acquire at all while a
 * single master was down.) N = 1 cannot meet this (the only master lost
 * its record): there the window is this client's own ttls.
 *
 * Until a read covers an instance its YES votes are PENDING: the round
 * waits (bounded by the read's command deadlines), then asks again. */
#include <stdio.h>
#include <string.h>

#include "guard.h"
#include "scripts.h"

static void guard_start_read(redlock__guard *g);

static int is_cleared(const redlock__guard_node *gn) {
  return gn->cleared[0] != '\0' && strcmp(gn->cleared, gn->run_id) == 0;
}

static void clear(redlock__guard_node *gn) {
  if (gn->run_id[0] != '\0')
    memcpy(gn->cleared, gn->run_id, sizeof(gn->cleared));
}

int redlock__guard_init(redlock__guard *g, redlock__node *nodes, unsigned n,
                        unsigned quorum, int64_t mode_ms, const char *key,
                        size_t keylen) {
  memset(g, 0, sizeof(*g));
  g->nodes = nodes;
  g->n = n;
  g->quorum = quorum;
  g->mode_ms = mode_ms;
  g->key = key;
  g->keylen = keylen;
  redlock__queue_init(&g->waiters);
  redlock__queue_init(&g->settle_waiters);
  g->gn = redlock__calloc(n, sizeof(*g->gn));
  return g->gn == NULL ? REDLOCK_ENOMEM : 0;
}

void redlock__guard_free(redlock__guard *g) {
  redlock__free(g->gn);
  g->gn = NULL;
}

static void request_read(redlock__guard *g) {
  if (g->mode_ms != 0 || g->closing)
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

void redlock__guard_node_up(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  const redlock__node *node = &g->nodes[idx];
  redlock__ns now = node->up_ns;
  gn->up = 1;
  gn->up_ns = now;
  gn->known_ms = node->maxttl_ms;
  if (node->maxttl_ms > g->window_ms)
    g->window_ms = node->maxttl_ms;
  if (node->run_id[0] != '\0' && strcmp(node->run_id, gn->run_id) == 0) {
    /* The same instance again: one more bound on its start. */
    redlock__ns s = redlock__start_bound(now, node->uptime_s);
    if (s < gn->start)
      gn->start = s;
  } else {
    /* A new instance (or one we cannot identify): it may have started
     * just now if its uptime says so, or if we cannot read it. */
    gn->start = node->uptime_s >= 0
                    ? redlock__start_bound(now, node->uptime_s) : now;
    memcpy(gn->run_id, node->run_id, sizeof(gn->run_id));
  }
  if (node->durable && node->run_id[0] != '\0') {
    /* appendonly + appendfsync always: this instance loaded every key its
     * predecessor acknowledged, so it lost no lock: its votes count at
     * once. */
    clear(gn);
  }
  if (g->mode_ms >= 0 && !is_cleared(gn)) {
    gn->cleared[0] = '\0';
    gn->read = GUARD_READ_NONE;
    request_read(g);
  }
  check_settled(g);
}

void redlock__guard_node_down(redlock__guard *g, unsigned idx) {
  redlock__guard_node *gn = &g->gn[idx];
  gn->up = 0;
  gn->known_ms = 0;   /* read again at the next handshake */
  check_settled(g);
}

/* ---- reading the record on every master --------------------------------- */

static void finish_read(redlock__guard *g) {
  redlock__queue waiters;
  unsigned i;
  int valid;
  g->reading = 0;
  valid = redlock__guard_read_valid(g->n, g->quorum, g->read_answered);
  if (valid && g->read_max > g->window_ms)
    g->window_ms = g->read_max;
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
  if (req->tag != g->read_gen || !g->reading)
    return;
  if (r != NULL) {
    redlock__vote v;
    redlock__classify(REDLOCK__CMD_MAXTTL_GET, r, &v);
    if (v.vote == REDLOCK_VOTE_YES) {
      g->read_answered++;
      if (v.value > g->read_max)
        g->read_max = v.value;
      g->gn[req->idx].known_ms = v.value;
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
  g->read_start = redlock__now_ns();
  g->read_left = g->n;
  g->read_answered = 0;
  g->read_max = 0;
  g->read_gen++;
  argv[0] = "GET";
  lens[0] = 3;
  argv[1] = g->key;
  lens[1] = g->keylen;
  for (i = 0; i < g->n; i++) {
    redlock__req *req = redlock__node_req(&g->nodes[i]);
    if (req != NULL) {
      req->cb = on_read_reply;
      req->owner = g;
      req->tag = g->read_gen;
      if (redlock__node_submit(&g->nodes[i], req, 2, argv, lens) == 0)
        continue;
    }
    g->read_left--;
  }
  if (g->read_left == 0)
    finish_read(g);
}

void redlock__guard_close(redlock__guard *g) {
  g->closing = 1;
  g->again = 0;
  wake_list(&g->settle_waiters);
  while (!redlock__queue_empty(&g->waiters)) {
    redlock__guard_waiter *w =
        REDLOCK__CONTAINER_OF(g->waiters.next, redlock__guard_waiter, link);
    redlock__queue_remove(&w->link);
    w->cb(w);
  }
}

/* ---- verdicts ------------------------------------------------------------ */

redlock__guard_verdict redlock__guard_check(redlock__guard *g, unsigned idx,
                                            redlock__ns now, char *why,
                                            size_t whylen, int64_t *wait_ms,
                                            int64_t *window_ms) {
  redlock__guard_node *gn = &g->gn[idx];
  int64_t age;
  int64_t window;
  *wait_ms = -1;
  *window_ms = -1;
  if (g->mode_ms < 0)
    return REDLOCK__GUARD_COUNT;
  if (!gn->up) {
    snprintf(why, whylen, "restart guard: connection lost");
    return REDLOCK__GUARD_REFUSE;
  }
  if (is_cleared(gn))
    return REDLOCK__GUARD_COUNT;
  age = redlock__age_ms(gn->start, now);
  if (g->mode_ms > 0) {
    window = g->mode_ms;
  } else {
    if (g->closing) {
      snprintf(why, whylen, "restart guard: client closing");
      return REDLOCK__GUARD_REFUSE;
    }
    if (gn->read == GUARD_READ_NONE) {
      request_read(g);   /* may end at once when no master can answer */
      if (gn->read == GUARD_READ_NONE)
        return REDLOCK__GUARD_PENDING;
    }
    switch (gn->read) {
      case GUARD_READ_NONE:
        return REDLOCK__GUARD_PENDING;
      case GUARD_READ_FAILED:
        snprintf(why, whylen,
                 "restart guard: longest ttl unreadable (too few masters "
                 "answered)");
        /* The next attempt reads again. */
        gn->read = GUARD_READ_NONE;
        return REDLOCK__GUARD_REFUSE;
      case GUARD_READ_OK:
        break;
    }
    window = g->window_ms;
  }
  if (age >= window) {
    clear(gn);
    return REDLOCK__GUARD_COUNT;
  }
  *wait_ms = window - age;
  *window_ms = window;
  snprintf(why, whylen,
           "restart guard: %s %lld ms ago, counts in %lld ms (window %lld "
           "ms)",
           gn->run_id[0] != '\0' ? "started" : "age unknown, seen",
           (long long)age, (long long)(window - age), (long long)window);
  return REDLOCK__GUARD_REFUSE;
}

void redlock__guard_wait(redlock__guard *g, redlock__guard_waiter *w) {
  redlock__queue_insert_tail(&g->waiters, &w->link);
}

void redlock__guard_unwait(redlock__guard_waiter *w) {
  redlock__queue_remove(&w->link);
}

/* ---- the record ---------------------------------------------------------- */

int redlock__guard_needs_raise(const redlock__guard *g, int64_t ttl_ms) {
  unsigned have = 0;
  unsigned lack = 0;
  unsigned i;
  for (i = 0; i < g->n; i++) {
    if (!g->gn[i].up)
      continue;
    if (g->gn[i].known_ms >= ttl_ms)
      have++;
    else
      lack++;
  }
  /* Auto: raise where a master that is up lacks it, and wait (its YES
   * counts only where the record is confirmed); a quorum must answer.
   * Otherwise: best effort, the same masters. */
  (void)have;
  return lack > 0;
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
    redlock__guard_record(g, req->idx, v.value);
  else
    redlock__guard_record_failed(g, req->idx);
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
  argv[3] = g->key;
  lens[3] = g->keylen;
  argv[4] = num;
  lens[4] = redlock__fmt_i64(num, ttl_ms);
  for (i = 0; i < g->n; i++) {
    redlock__req *req;
    if (!g->gn[i].up || g->gn[i].known_ms >= ttl_ms)
      continue;
    req = redlock__node_req(&g->nodes[i]);
    if (req == NULL)
      continue;
    req->cb = on_raise_reply;
    req->owner = g;
    g->gn[i].known_ms = ttl_ms;   /* sent: do not send it again */
    (void)redlock__node_submit(&g->nodes[i], req, 5, argv, lens);
  }
}

void redlock__guard_record_failed(redlock__guard *g, unsigned idx) {
  /* A client without the auto guard does not insist: no raise again on
   * this connection (the next handshake reads the record afresh). */
  if (g->mode_ms != 0)
    g->gn[idx].known_ms = INT64_MAX;
}

void redlock__guard_record(redlock__guard *g, unsigned idx, int64_t value) {
  g->gn[idx].known_ms = value;
}

void redlock__guard_used(redlock__guard *g, int64_t ttl_ms) {
  if (ttl_ms > g->window_ms)
    g->window_ms = ttl_ms;
}
