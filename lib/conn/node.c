/* node.c: one node: a connection's worth of state to one Redis server (a
 * plain master, one primary of a cluster master, a sentinel group's
 * primary).
 *
 * Owns: the connection to that server (conn.c) and its life cycle (async
 * DNS, connect, handshake, reconnect with capped exponential backoff and
 * jitter), the FIFO of requests in flight with one deadline timer for the
 * oldest, and the releases to send again after a reconnect. Does not own:
 * what a command or a reply means (the layer above), the loop.
 *
 * Invariants
 *  1. Wire order after every (re)connect: the handshake (AUTH, SELECT,
 *     SCRIPT LOAD of every script, INFO server, GET of the recorded longest
 *     ttl; a sentinel group's primary: CONFIG GET min-replicas-to-write
 *     and min-replicas-max-lag), and only once ALL of it answered without
 *     error: the releases kept from failed attempts (kept[]), then the
 *     requests queued while connecting (waiting, bytes in wait_buf), in
 *     submission order.
 *     Nothing else is ever written before the handshake succeeded. The
 *     releases come after the handshake's replies: the server has then run
 *     an event loop turn since it came back, so a stale SET still sitting in
 *     an old connection's socket buffer has been executed, and the release
 *     lands after it. They come before the queued requests, which may
 *     include new acquisitions of the same key by this client.
 *  2. A failed handshake step takes the node DOWN with that step's own
 *     error text ("SELECT 99: ERR DB index is out of range"); nothing
 *     queued is written on that connection. The owner hears of the
 *     refusal first (EV_REFUSED, also while closing: it warns even when
 *     the other masters made a quorum).
 *  3. Only releases (REDLOCK__REQ_REDELIVER) are ever sent again, and the
 *     layer above marks only releases of tokens it no longer holds: a
 *     token a lock currently holds is never released from here.
 *  4. Replies are FIFO, so the oldest pending request is the first that
 *     can be overdue: one timer armed for it, or for the earliest deadline
 *     of a request behind a later one (pend_early: a request that waited
 *     for the handshake keeps its wait's bound, and goes out behind the
 *     kept releases, whose deadlines count from the handshake's end).
 *     When it fires the connection is torn down (every pending request
 *     fails once, with ETIMEDOUT), the failure counts for the reconnect
 *     backoff, and the node reconnects.
 *     Only a reply to a request of the layer above (not a handshake) resets
 *     the backoff: a master slower than the command timeout does not get a
 *     reconnect storm.
 *  5. References: the node owns every request from submit until its
 *     callback returned (then the request goes back to the pool). A
 *     callback may submit, close the node or tear it down: lists are
 *     detached before callbacks run. Closing is synchronous (conn.c): no
 *     event of a closed connection reaches this file.
 *  6. A request submitted while the node makes a connection waits behind
 *     the handshake, bounded by a deadline of its own: the connect and
 *     command timeouts from its submission, or its until_ns when sooner
 *     (a redirected one keeps its first deadline; an acquisition's ends
 *     with its wait). Not by the connection's: a node repointed from one
 *     handshake to the next (a cluster whose nodes name each other as the
 *     primary) or moved to the next seed starts a new connect deadline
 *     each time, and its requests would wait forever (issue 29, item 4).
 *     The deadline timer serves both lists. A request submitted
 *     to a DOWN node fails at once (nothing queues behind a dead master),
 *     unless the node's last attempt began REDLOCK__TRY_NOW_MS ago or more
 *     and ended in a timeout of the connect or handshake (`hung`): then
 *     the node connects at once and the request waits as above (a hung
 *     master that came back is counted now, not when its grown backoff
 *     ends). Not after other failures: a master that refused is retried
 *     every reconnect_min_ms anyway (invariant 7) and its requests fail at
 *     once with the refusal, also while such a retry is in flight; a lost
 *     connection reconnects after reconnect_min_ms; one that completed a
 *     handshake but missed command deadlines is alive and slow: new
 *     connections would only add to its load, so it keeps to its backoff
 *     (invariant 4).
 *  7. Backoff: a refused connection (ECONNREFUSED, or no socket file)
 *     costs nothing to either side, so it is retried after
 *     reconnect_min_ms (jittered down to half) without growing; timeouts
 *     and other failures back off exponentially (invariant 4). Repoints
 *     of a node not serving (its topology named another primary before
 *     its handshake ended, or a topology named it again after another
 *     idled it) are counted until a handshake ends: the first connects
 *     at once (a seed that is
 *     a replica, a primary that moved), a second in a row leaves the node
 *     DOWN for a backoff that grows with the count, as failures do (what
 *     waited fails with why; not counted as failures: a failover's
 *     repoint after a crash is not delayed by the crash), so nodes that
 *     name each other cannot make a connection storm (149,604
 *     connections in 24 s before: issue 29, item 4), and the owner sees
 *     a node that was tried (not one connecting forever). A node
 *     repointed less than REDLOCK__SERVED_MS after its handshake ended
 *     has not served either: a second such repoint in a row backs off
 *     the same way (flaps).
 *  8. A release (REDELIVER) the server refused for now (the cluster is
 *     down or resharding: CLUSTERDOWN, TRYAGAIN, a MOVED or ASK past the
 *     redirections' limit; LOADING, MASTERDOWN, NOREPLICAS, READONLY,
 *     BUSY) is kept like one a connection lost, and the kept releases go
 *     out again on the open connection after a backoff (reconnect_min_ms
 *     doubling to reconnect_max_ms per resend, from the start again once
 *     a release lands and none waits), or
 *     after the next handshake. A cluster's node that a topology idles
 *     hands its kept releases to a node that serves (cluster.c), whose
 *     MOVED sends each to its slot's primary. The list stays bounded
 *     (REDLOCK__KEPT_MAX); a key whose release never lands lives its
 *     ttl. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "pure.h"

#define REDLOCK__TRY_NOW_MS 50   /* invariant 6 */
#define REDLOCK__SERVED_MS 1000  /* invariant 7: a node repointed sooner
                                    after its handshake has not served */

enum {
  HS_AUTH = 1,
  HS_SELECT,
  HS_SCRIPT,
  HS_INFO,
  HS_PERSIST,
  HS_FSYNC,
  HS_MAXTTL,
  HS_REPL,
  HS_TIME,
  HS_CLOCKREC,
  HS_MYID,      /* cluster nodes: CLUSTER MYID, then */
  HS_SHARDS,    /* CLUSTER SHARDS (Redis 7.0), or */
  HS_SLOTS,     /* CLUSTER SLOTS (older) */
  HS_IDCHECK,   /* INFO replication while connected (not a handshake) */
  HS_MINREP,    /* sentinel groups: CONFIG GET min-replicas-to-write, */
  HS_MINLAG     /* CONFIG GET min-replicas-max-lag */
};

static void node_connect(redlock__node *n);
static void node_schedule_reconnect(redlock__node *n);
static void on_reconnect(redlock__timer *t);
static void node_arm_deadline(redlock__node *n);
static void node_finish_close(redlock__node *n);
static void on_deadline(redlock__timer *t);
static void pending_push(redlock__node *n, redlock__req *req);
static int node_send_handshake_rest(redlock__node *n);
static int hs_send(redlock__node *n, int kind, int argc,
                   const char *const *argv, const size_t *lens);

/* What the handshake reads of a master's configuration, and reads again
 * every few seconds (redlock__node_recheck): by handshake step. */
typedef struct conf_read {
  int kind;
  int argc;
  const char *argv[3];
  size_t lens[3];
} conf_read;

static const conf_read conf_reads[] = {
    {HS_PERSIST, 2, {"INFO", "persistence", NULL}, {4, 11, 0}},
    {HS_FSYNC, 3, {"CONFIG", "GET", "appendfsync"}, {6, 3, 11}},
    {HS_MINREP, 3, {"CONFIG", "GET", "min-replicas-to-write"}, {6, 3, 21}},
    {HS_MINLAG, 3, {"CONFIG", "GET", "min-replicas-max-lag"}, {6, 3, 20}},
};

static const conf_read *conf_read_of(int kind) {
  size_t i;
  for (i = 0; i < sizeof(conf_reads) / sizeof(conf_reads[0]); i++)
    if (conf_reads[i].kind == kind)
      return &conf_reads[i];
  REDLOCK__ASSERT(0);
  return &conf_reads[0];
}

static int hs_send_read(redlock__node *n, int kind) {
  const conf_read *c = conf_read_of(kind);
  return hs_send(n, kind, c->argc, c->argv, c->lens);
}

/* A name resolution in flight. Allocated apart from the node: a node that
 * gives up on it (connect deadline, close) lets go of it, and the late
 * callback only frees it. */
typedef struct redlock__gai {
  redlock__resolve req;
  redlock__node *node;     /* NULL once the node let go */
} redlock__gai;

static void node_drop_gai(redlock__node *n) {
  if (n->gai == NULL)
    return;
  n->gai->node = NULL;
  redlock__resolve_cancel(&n->gai->req);
  n->gai = NULL;
}

static void node_set_errstr(redlock__node *n, const char *s) {
  redlock__strlcpy(n->errstr, s, sizeof(n->errstr));
}

static redlock__ns timeout_ns(int64_t ms) {
  return (redlock__ns)ms * REDLOCK__NS_PER_MS;
}

/* ---- request pool -------------------------------------------------------- */

redlock__req *redlock__node_req(redlock__node *n) {
  redlock__node_env *env = n->env;
  redlock__req *req;
  if (redlock__queue_empty(&env->free_reqs)) {
    req = redlock__malloc(sizeof(*req));
    if (req == NULL)
      return NULL;
  } else {
    redlock__queue *q = env->free_reqs.next;
    redlock__queue_remove(q);
    req = REDLOCK__CONTAINER_OF(q, redlock__req, q);
  }
  req->cb = NULL;
  req->owner = NULL;
  req->tag = (redlock__req_tag){.gen = 0};
  req->idx = (uint16_t)n->master;
  req->node = n;
  req->hops = 0;
  req->until_ns = 0;
  req->flags = 0;
  req->kind = 0;
  req->sent_ns = 0;
  req->reply_ns = 0;
  req->deadline_ns = 0;
  req->clock_seq = 0;
  req->flush_gen = n->flushes;
  req->cmd = NULL;
  req->cmd_len = 0;
  redlock__queue_init(&req->q);
  return req;
}

static void req_put(redlock__node_env *env, redlock__req *req) {
  if (req->cmd != NULL && req->cmd != req->cmd_inline)
    redlock__free(req->cmd);
  req->cmd = NULL;
  redlock__queue_insert_tail(&env->free_reqs, &req->q);
}

void redlock__node_env_free(redlock__node_env *env) {
  while (!redlock__queue_empty(&env->free_reqs)) {
    redlock__queue *q = env->free_reqs.next;
    redlock__queue_remove(q);
    redlock__free(REDLOCK__CONTAINER_OF(q, redlock__req, q));
  }
}

/* ---- releases kept for the next handshake -------------------------------- */

/* Keeps the command bytes (ownership moves here). The list is bounded:
 * when full the oldest entry goes (its key still expires by its ttl). */
static void node_keep(redlock__node *n, char *cmd, size_t len) {
  if (n->closing || n->state == REDLOCK__NODE_CLOSED) {
    redlock__free(cmd);
    return;
  }
  if (n->kept == NULL) {
    n->kept = redlock__calloc(REDLOCK__KEPT_MAX,
                                   sizeof(*n->kept));
    n->kept_len = redlock__calloc(REDLOCK__KEPT_MAX,
                                       sizeof(*n->kept_len));
    if (n->kept == NULL || n->kept_len == NULL) {
      redlock__free(n->kept);
      redlock__free(n->kept_len);
      n->kept = NULL;
      n->kept_len = NULL;
      redlock__free(cmd);   /* the key still expires by its ttl */
      return;
    }
  }
  if (n->n_kept == REDLOCK__KEPT_MAX) {
    redlock__free(n->kept[0]);
    memmove(n->kept, n->kept + 1,
            (REDLOCK__KEPT_MAX - 1) * sizeof(n->kept[0]));
    memmove(n->kept_len, n->kept_len + 1,
            (REDLOCK__KEPT_MAX - 1) * sizeof(n->kept_len[0]));
    n->n_kept--;
  }
  n->kept[n->n_kept] = cmd;
  n->kept_len[n->n_kept] = len;
  n->n_kept++;
}

/* A REDELIVER request failed by a connection error: keep its command. */
static void node_keep_req(redlock__node *n, redlock__req *req) {
  char *copy;
  if (!(req->flags & REDLOCK__REQ_REDELIVER) || req->cmd == NULL)
    return;
  if (req->cmd == req->cmd_inline) {
    copy = redlock__malloc(req->cmd_len);
    if (copy == NULL)
      return;   /* the key still expires by its ttl */
    memcpy(copy, req->cmd_inline, req->cmd_len);
  } else {
    copy = req->cmd;
    req->cmd = NULL;
  }
  node_keep(n, copy, req->cmd_len);
}

/* Copies the encoded command into the request (REDELIVER only). */
/* A command to send: an argv to encode, or bytes already encoded (the
 * same command for every master of a round: encoded once, round.c). */
typedef struct cmd_src {
  int argc;
  const char *const *argv;
  const size_t *lens;
  const char *raw;   /* non-NULL: these bytes */
  size_t raw_len;
} cmd_src;

static int put_cmd(redlock__buf *b, const cmd_src *c) {
  return c->raw != NULL ? redlock__buf_append(b, c->raw, c->raw_len)
                        : redlock__resp_cmd(b, c->argc, c->argv, c->lens);
}

static int req_copy_cmd(redlock__req *req, const cmd_src *c) {
  size_t size = c->raw != NULL ? c->raw_len
                               : redlock__resp_size(c->argc, c->lens);
  char *p = req->cmd_inline;
  if (size > sizeof(req->cmd_inline)) {
    p = redlock__malloc(size);
    if (p == NULL)
      return REDLOCK_ENOMEM;
  }
  req->cmd = p;
  if (c->raw != NULL) {
    memcpy(p, c->raw, c->raw_len);
    req->cmd_len = c->raw_len;
  } else {
    req->cmd_len = redlock__resp_write(p, c->argc, c->argv, c->lens);
  }
  return 0;
}

/* ---- failing requests ---------------------------------------------------- */

/* Fails every request of `list` (already detached from the node). */
static void fail_list(redlock__node *n, redlock__queue *list, int error,
                      const char *why) {
  redlock__node_env *env = n->env;
  char msg[sizeof(n->errstr)];
  redlock__strlcpy(msg, why, sizeof(msg));
  while (!redlock__queue_empty(list)) {
    redlock__req *req = REDLOCK__CONTAINER_OF(list->next, redlock__req, q);
    redlock__queue_remove(&req->q);
    if (error != REDLOCK_ECANCELED)
      node_keep_req(n, req);
    if (req->cb != NULL)
      req->cb(req, NULL, error, msg);
    req_put(env, req);
  }
}

/* Moves every request of `from` to the end of `to`. */
static void move_all(redlock__queue *from, redlock__queue *to) {
  while (!redlock__queue_empty(from)) {
    redlock__queue *q = from->next;
    redlock__queue_remove(q);
    redlock__queue_insert_tail(to, q);
  }
}

/* The connection goes now: timers stopped, what was written moved to
 * `pending`, and what waits for the handshake to `waiting` (NULL: it stays
 * queued, bytes and all). The caller fails them (callbacks may submit to
 * this node again: the lists are detached first). */
static void node_cut(redlock__node *n, redlock__queue *pending,
                     redlock__queue *waiting) {
  redlock__conn_close(&n->conn);
  node_drop_gai(n);
  redlock__timer_stop(&n->deadline_timer);
  n->deadline_armed = 0;
  redlock__timer_stop(&n->conn_timer);
  move_all(&n->pending, pending);
  if (waiting != NULL) {
    move_all(&n->waiting, waiting);
    redlock__buf_reset(&n->wait_buf);
  }
  n->n_pending = 0;
  n->hs_left = 0;
  n->clock_due = 0;
  n->rechecking = 0;
  n->id_checks = 0;
  n->teardowns++;
}

/* Tells the owner that what the lost connection held has failed (after
 * EV_DOWN and the failures): a vote that waited on other masters is
 * judged again only now, when each failed request has been counted. */
static void node_failed_event(redlock__node *n) {
  if (n->env->on_state != NULL && !n->closing)
    n->env->on_state(n, REDLOCK__NODE_EV_FAILED, n->env->arg);
}

/* Tears the connection down now: every request pending or waiting fails
 * once with `error`. Safe from any callback. */
static void node_teardown(redlock__node *n, int error, const char *why,
                          int count_failure) {
  redlock__queue pending;
  redlock__queue waiting;
  int next_seed;
  redlock__queue_init(&pending);
  redlock__queue_init(&waiting);
  node_set_errstr(n, why);
  if (count_failure)
    n->failures++;
  /* A cluster that has not answered yet: while untried seeds are left,
   * what waits for the handshake goes to the next one now (the address
   * changes here), and only what was written fails. */
  next_seed = n->state != REDLOCK__NODE_UP && !n->closing &&
              error != REDLOCK_ECANCELED && n->env->next_seed != NULL &&
              n->env->next_seed(n);
  node_cut(n, &pending, next_seed ? NULL : &waiting);
  if (next_seed) {
    n->state = REDLOCK__NODE_RESOLVING;
    fail_list(n, &pending, error, why);
    if (n->state == REDLOCK__NODE_RESOLVING && !n->closing)
      redlock__timer_start(&n->conn_timer, on_reconnect, 0, 0);
    node_arm_deadline(n);   /* what waits keeps its deadline (inv. 6) */
    return;
  }
  n->state = REDLOCK__NODE_DOWN;
  if (n->env->on_state != NULL && !n->closing)
    n->env->on_state(n, REDLOCK__NODE_EV_DOWN, n->env->arg);
  fail_list(n, &pending, error, why);
  fail_list(n, &waiting, error == REDLOCK_ETIMEDOUT ? REDLOCK_EIO : error,
            why);
  node_failed_event(n);
  if (n->state != REDLOCK__NODE_DOWN)
    return;   /* a callback restarted it */
  if (n->closing)
    node_finish_close(n);
  else
    node_schedule_reconnect(n);
}

/* ---- the master's clock (TIME) ------------------------------------------- */

/* TIME's reply: ["<seconds>", "<microseconds>"]. The wall clock in us, or
 * -1 when the reply is not that (a hostile or broken server). */
static int64_t parse_time(const redlock__reply *r) {
  int64_t v[2];
  unsigned k;
  if (r->type != REDLOCK__R_ARRAY || r->elements != 2)
    return -1;
  for (k = 0; k < 2; k++) {
    const redlock__reply *e = r->element[k];
    size_t i;
    if (e == NULL || e->type != REDLOCK__R_STRING || e->len == 0 ||
        e->len > 12)
      return -1;
    if (e->digits) {
      v[k] = e->integer;   /* parsed on the way in (reply.c) */
      continue;
    }
    v[k] = 0;
    for (i = 0; i < e->len; i++) {
      if (e->str[i] < '0' || e->str[i] > '9')
        return -1;
      v[k] = v[k] * 10 + (e->str[i] - '0');
    }
  }
  if (v[1] >= 1000000)
    return -1;
  return v[0] * 1000000 + v[1];
}

static void on_time_reply(redlock__req *req, const redlock__reply *r,
                          int error, const char *errstr) {
  redlock__node *n = req->owner;
  (void)error;
  (void)errstr;
  if (r == NULL)
    return;   /* torn down: the node tells its owner (EV_DOWN) */
  n->clock.wall_us = r->type == REDLOCK__R_ERROR ? -1 : parse_time(r);
  n->clock.send_ns = req->sent_ns;
  n->clock.reply_ns = req->reply_ns;
  n->clock_done = req->clock_seq;
  if (n->env->on_state != NULL)
    n->env->on_state(n, REDLOCK__NODE_EV_CLOCK, n->env->arg);
}

/* Writes TIME now (behind everything written so far), its send time
 * `now`. */
static int node_send_time(redlock__node *n, redlock__ns now) {
  static const char cmd[] = "*1\r\n$4\r\nTIME\r\n";
  redlock__req *req = redlock__node_req(n);
  if (req == NULL)
    return REDLOCK_ENOMEM;
  if (redlock__conn_send_raw(&n->conn, cmd, sizeof(cmd) - 1) != 0) {
    req_put(n->env, req);
    return REDLOCK_ENOMEM;
  }
  req->cb = on_time_reply;
  req->owner = n;
  req->flags = REDLOCK__REQ_INTERNAL;
  req->sent_ns = now;
  req->clock_seq = ++n->clock_next;
  req->deadline_ns = now + timeout_ns(n->env->command_timeout_ms);
  req->flush_gen = n->flushes - 1;   /* inside the flush: goes out now */
  pending_push(n, req);
  if (n->n_pending == 1)
    node_arm_deadline(n);
  return 0;
}

int redlock__node_read_clock(redlock__node *n) {
  redlock__req *req;
  if (n->state != REDLOCK__NODE_UP || n->closing)
    return -1;
  if (n->clock_due || (int32_t)(n->clock_next - n->clock_done) > 0)
    return 0;   /* one is on its way: its reply wakes the guard */
  if (node_send_time(n, redlock__sys_now(n->env->sys)) != 0)
    return -1;
  req = REDLOCK__CONTAINER_OF(n->pending.prev, redlock__req, q);
  req->flush_gen = n->flushes;   /* it goes out with the next flush */
  return 0;
}

/* An acquisition went out: the clock is read right behind it, once per
 * flush for all acquisitions written in this loop turn (the flush
 * callback below), so that a step between the last reading and the SET
 * shows in the reading that follows it (guard.c). A connection waiting
 * for the socket to drain is not flushed by the flusher: TIME goes now. */
static void node_want_clock(redlock__node *n, redlock__req *req) {
  req->clock_seq = n->clock_next + 1;
  if (n->clock_due)
    return;
  n->clock_due = 1;
  if (n->conn.want_write && node_send_time(n, redlock__sys_now(n->env->sys)) == 0)
    n->clock_due = 0;
}

static void on_conn_flush(redlock__conn *c) {
  redlock__node *n = c->data;
  n->flushes++;   /* what was written so far goes out now */
  if (!n->clock_due || n->state != REDLOCK__NODE_UP)
    return;
  if (c->fl->now_ns == 0)
    c->fl->now_ns = redlock__sys_now(n->env->sys);   /* once for every master */
  if (node_send_time(n, c->fl->now_ns) == 0)
    n->clock_due = 0;   /* else the command deadline ends the wait */
}

/* ---- requests ------------------------------------------------------------ */

/* Arms the deadline timer for the oldest pending request, and for the
 * oldest waiting one (invariant 6). Lazily: while it is armed for an
 * earlier moment it stays (deadlines only grow along the FIFO; a waiting
 * request with an earlier one arms it when queued); on_deadline re-arms
 * for the then oldest. */
static void node_arm_at(redlock__node *n, redlock__ns due) {
  redlock__ns now;
  uint64_t ms;
  if (due == 0 || (n->deadline_armed != 0 && n->deadline_armed <= due))
    return;
  now = redlock__sys_now(n->env->sys);
  ms = due > now ? (due - now + REDLOCK__NS_PER_MS - 1) / REDLOCK__NS_PER_MS
                 : 0;
  n->deadline_armed = due;
  redlock__timer_start(&n->deadline_timer, on_deadline, ms, 0);
}

/* Invariant 4's bookkeeping for a deadline d appended to pending. */
static void pending_note(redlock__node *n, redlock__ns d) {
  if (d != 0 && d < n->pend_max &&
      (n->pend_early == 0 || d < n->pend_early))
    n->pend_early = d;
  if (d > n->pend_max)
    n->pend_max = d;
}

/* Appends req (its deadline set) to pending. */
static void pending_push(redlock__node *n, redlock__req *req) {
  if (redlock__queue_empty(&n->pending))
    n->pend_max = n->pend_early = 0;
  pending_note(n, req->deadline_ns);
  redlock__queue_insert_tail(&n->pending, &req->q);
  n->n_pending++;
}

/* pend_max and pend_early again, from the list (after a deadline moved). */
static void pending_rescan(redlock__node *n) {
  redlock__queue *q;
  n->pend_max = n->pend_early = 0;
  for (q = n->pending.next; q != &n->pending; q = q->next)
    pending_note(n, REDLOCK__CONTAINER_OF(q, redlock__req, q)->deadline_ns);
}

/* The pending request that is overdue first: the head, or one behind a
 * later deadline (invariant 4). */
static redlock__req *pending_first_due(redlock__node *n, redlock__ns now) {
  redlock__req *head =
      REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
  redlock__queue *q;
  if (n->pend_early == 0 || n->pend_early > now ||
      (head->deadline_ns != 0 && head->deadline_ns <= now))
    return head;
  for (q = n->pending.next; q != &n->pending; q = q->next) {
    redlock__req *req = REDLOCK__CONTAINER_OF(q, redlock__req, q);
    if (req->deadline_ns != 0 && req->deadline_ns <= now)
      return req;
  }
  pending_rescan(n);   /* answered since: none is due */
  return head;
}

static void node_arm_deadline(redlock__node *n) {
  if (!redlock__queue_empty(&n->pending) && n->pend_early != 0)
    node_arm_at(n, n->pend_early);
  if (!redlock__queue_empty(&n->pending))
    /* 0 for the handshake: bounded by the connect deadline */
    node_arm_at(n, REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q)
                       ->deadline_ns);
  if (!redlock__queue_empty(&n->waiting))
    node_arm_at(n, REDLOCK__CONTAINER_OF(n->waiting.next, redlock__req, q)
                       ->deadline_ns);
}

/* Writes a request on the open connection and appends it to the FIFO. */
static int node_write(redlock__node *n, redlock__req *req, const cmd_src *c,
                      redlock__ns deadline) {
  if ((c->raw != NULL
           ? redlock__conn_send_raw(&n->conn, c->raw, c->raw_len)
           : redlock__conn_send(&n->conn, c->argc, c->argv, c->lens)) != 0)
    return REDLOCK_ENOMEM;
  req->deadline_ns =
      req->until_ns != 0 && req->until_ns < deadline ? req->until_ns
                                                     : deadline;
  req->flush_gen = n->flushes;   /* it goes out with the next flush */
  pending_push(n, req);
  if (n->n_pending == 1 || req->deadline_ns == n->pend_early)
    node_arm_deadline(n);
  return 0;
}

/* Queues req behind the handshake (invariant 1): sent when it is done,
 * or failed at its deadline (invariant 6). */
static int node_wait(redlock__node *n, redlock__req *req, const cmd_src *c) {
  size_t before = redlock__buf_pending(&n->wait_buf);
  if (put_cmd(&n->wait_buf, c) != 0)
    return REDLOCK_ENOMEM;
  req->wait_len = (uint32_t)(redlock__buf_pending(&n->wait_buf) - before);
  req->deadline_ns = req->sent_ns + timeout_ns(n->env->connect_timeout_ms +
                                               n->env->command_timeout_ms);
  if (req->until_ns != 0 && req->until_ns < req->deadline_ns)
    req->deadline_ns = req->until_ns;   /* redirected; a wait's bound */
  redlock__queue_insert_tail(&n->waiting, &req->q);
  node_arm_at(n, req->deadline_ns);
  return 0;
}

/* Moves the requests that waited for the handshake past their deadline
 * to `expired` (their bytes leave wait_buf, the others' keep their
 * order). The earliest deadline left, or 0. */
static redlock__ns node_expire_waiting(redlock__node *n, redlock__ns now,
                                       redlock__queue *expired) {
  char *base = n->wait_buf.data + n->wait_buf.off;
  size_t rd = 0, wr = 0;
  redlock__ns next = 0;
  redlock__queue *q = n->waiting.next;
  while (q != &n->waiting) {
    redlock__queue *after = q->next;
    redlock__req *req = REDLOCK__CONTAINER_OF(q, redlock__req, q);
    if (req->deadline_ns != 0 && req->deadline_ns <= now) {
      redlock__queue_remove(q);
      redlock__queue_insert_tail(expired, q);
    } else {
      if (wr != rd)
        memmove(base + wr, base + rd, req->wait_len);
      wr += req->wait_len;
      if (req->deadline_ns != 0 && (next == 0 || req->deadline_ns < next))
        next = req->deadline_ns;
    }
    rd += req->wait_len;
    q = after;
  }
  n->wait_buf.len = n->wait_buf.off + wr;
  return next;
}

static int node_submit(redlock__node *n, redlock__req *req,
                       const cmd_src *c) {
  redlock__node_env *env = n->env;
  int rc = 0;
  if (req->sent_ns == 0)
    req->sent_ns = redlock__sys_now(n->env->sys);   /* a redirection keeps the first */
  if ((req->flags & REDLOCK__REQ_REDELIVER) ||
      (n->redirects && !(req->flags & REDLOCK__REQ_HERE))) {
    /* Kept for a resend after a reconnect, or for a redirection. */
    if (req->cmd == NULL && req_copy_cmd(req, c) != 0)
      req->flags &= (uint8_t)~REDLOCK__REQ_REDELIVER;
  }
  switch (n->state) {
    case REDLOCK__NODE_UP:
      rc = node_write(n, req, c,
                      req->sent_ns + timeout_ns(env->command_timeout_ms));
      if (rc == 0 && (req->flags & REDLOCK__REQ_CLOCK))
        node_want_clock(n, req);
      break;
    case REDLOCK__NODE_RESOLVING:
    case REDLOCK__NODE_CONNECTING:
    case REDLOCK__NODE_HANDSHAKE:
      if (n->refused) {
        /* A retry of a master that refused (invariant 7): fail at once
         * with that refusal, as when DOWN, rather than wait for a
         * connection that most likely is refused again (the result then
         * says why, not "no answer"). */
        rc = REDLOCK_EIO;
        break;
      }
      rc = node_wait(n, req, c);
      break;
    case REDLOCK__NODE_DOWN:
      if (n->closing || !n->hung ||
          req->sent_ns - n->last_try_ns <
              (redlock__ns)REDLOCK__TRY_NOW_MS * REDLOCK__NS_PER_MS) {
        rc = REDLOCK_EIO;
        break;
      }
      /* Invariant 6: try it now; the request waits behind the handshake
       * (unless the attempt failed at once). */
      redlock__timer_stop(&n->conn_timer);
      redlock__node_start(n);
      if (n->state == REDLOCK__NODE_DOWN || n->state == REDLOCK__NODE_CLOSED) {
        rc = REDLOCK_EIO;
        break;
      }
      rc = node_wait(n, req, c);
      break;
    case REDLOCK__NODE_CLOSED:
      rc = REDLOCK_ECANCELED;
      break;
  }
  if (rc != 0) {
    if (rc == REDLOCK_EIO)
      node_keep_req(n, req);
    req_put(env, req);
    return rc;
  }
  if (!(req->flags & REDLOCK__REQ_INTERNAL))
    n->st.commands++;
  return 0;
}

int redlock__node_submit(redlock__node *n, redlock__req *req, int argc,
                         const char *const *argv, const size_t *lens) {
  cmd_src c = {argc, argv, lens, NULL, 0};
  return node_submit(n, req, &c);
}

int redlock__node_submit_raw(redlock__node *n, redlock__req *req,
                             const char *cmd, size_t len) {
  cmd_src c = {0, NULL, NULL, cmd, len};
  return node_submit(n, req, &c);
}

static void on_deadline(redlock__timer *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, deadline_timer);
  redlock__ns now = redlock__sys_now(n->env->sys);
  redlock__req *head;
  char why[sizeof(n->errstr) + 64];
  n->deadline_armed = 0;
  if (!redlock__queue_empty(&n->waiting) && n->state != REDLOCK__NODE_UP) {
    /* Invariant 6: what waited for a handshake past its deadline fails;
     * the connection goes on (it may serve the next requests). */
    redlock__queue expired;
    redlock__ns next;
    uint64_t td = n->teardowns;
    redlock__queue_init(&expired);
    next = node_expire_waiting(n, now, &expired);
    if (!redlock__queue_empty(&expired)) {
      /* How long the first of them waited (its connect and command
       * timeouts, or its acquisition's wait). */
      redlock__ns waited =
          now - REDLOCK__CONTAINER_OF(expired.next, redlock__req, q)->sent_ns;
      snprintf(why, sizeof(why), "not connected within %llu ms (%s)",
               (unsigned long long)(waited / REDLOCK__NS_PER_MS),
               n->errstr[0] ? n->errstr : "connecting");
      n->st.timeouts++;
      fail_list(n, &expired, REDLOCK_ETIMEDOUT, why);
      if (n->teardowns != td || n->state == REDLOCK__NODE_UP ||
          n->state == REDLOCK__NODE_CLOSED)
        return;   /* a callback changed the node: it armed what it needs */
    }
    node_arm_at(n, next);
  }
  if (redlock__queue_empty(&n->pending))
    return;
  head = pending_first_due(n, now);
  if (head->deadline_ns == 0)
    return;
  if (head->deadline_ns > now) {
    node_arm_deadline(n);
    return;
  }
  /* Timers run before the loop polls and flushes: after a loop that did
   * not run for a while (the application, a debugger) the request may not
   * even have gone out yet (its deadline counts from now), or its reply
   * may be waiting in the socket. Only a reply that has not come is late.
   * (A socket that does not take our bytes, want_write, is late.) */
  if (n->state == REDLOCK__NODE_UP && !n->conn.want_write &&
      head->flush_gen == n->flushes &&
      (head->until_ns == 0 || head->until_ns > now)) {
    /* Never past its own bound (an acquisition's wait, invariant 6): a
     * request queued behind a handshake that came up while the loop ran
     * late would otherwise end a command timeout after the wait (found
     * by redlock-sim, corpus seed 1883023360429117). */
    redlock__ns d = now + timeout_ns(n->env->command_timeout_ms);
    head->deadline_ns = head->until_ns != 0 && head->until_ns < d
                            ? head->until_ns : d;
    pending_rescan(n);
    node_arm_deadline(n);
    return;
  }
  if (n->state == REDLOCK__NODE_UP && !n->reading_now) {
    uint64_t td = n->teardowns;
    uint64_t answered = n->answered;
    n->reading_now = 1;
    (void)redlock__conn_read_now(&n->conn);
    n->reading_now = 0;
    if (n->teardowns != td || n->state != REDLOCK__NODE_UP)
      return;   /* it failed, or a callback tore it down */
    if (n->answered != answered) {
      /* Replies came: the next one's, or this one's again (its reply may
       * still be behind them: the timer fires at once). */
      node_arm_deadline(n);
      return;
    }
  }
  if (head->flush_gen == n->flushes)
    snprintf(why, sizeof(why), "its wait ended before the request went "
             "out (the event loop ran late)");
  else if (head->until_ns != 0 && head->until_ns <= now &&
           head->deadline_ns == head->until_ns)
    snprintf(why, sizeof(why), "no reply within %llu ms, when its wait "
             "ended", (unsigned long long)((now - head->sent_ns) /
                                          REDLOCK__NS_PER_MS));
  else
    snprintf(why, sizeof(why), "no reply within %lld ms",
             (long long)n->env->command_timeout_ms);
  n->st.timeouts++;
  n->hung = 0;   /* slow, not hung (invariant 6) */
  n->refused = 0;
  node_teardown(n, REDLOCK_ETIMEDOUT, why, 1);
}

/* ---- handshake ----------------------------------------------------------- */

/* run_id and uptime from INFO server. */
static void parse_info(redlock__node *n, const char *s) {
  const char *p = strstr(s, "run_id:");
  if (p != NULL) {
    size_t i = 0;
    p += 7;
    while (i < 40 && p[i] != '\r' && p[i] != '\n' && p[i] != '\0') {
      n->run_id[i] = p[i];
      i++;
    }
    n->run_id[i] = '\0';
  }
  p = strstr(s, "uptime_in_seconds:");
  if (p != NULL)
    n->uptime_s = strtoll(p + 18, NULL, 10);
}

/* A field "name:value" of an INFO text into out (cut to len - 1); ""
 * when absent. */
static void info_field(const char *s, const char *name, char *out,
                       size_t len) {
  size_t nl = strlen(name);
  const char *p = s;
  size_t i = 0;
  out[0] = '\0';
  while ((p = strstr(p, name)) != NULL) {
    if ((p == s || p[-1] == '\n') && p[nl] == ':')
      break;
    p += nl;
  }
  if (p == NULL)
    return;
  p += nl + 1;
  while (i + 1 < len && p[i] != '\r' && p[i] != '\n' && p[i] != '\0') {
    out[i] = p[i];
    i++;
  }
  out[i] = '\0';
}

/* role, master_replid, master_host/port from INFO replication. */
static void parse_replication(redlock__node *n, const char *s) {
  char port[16], second[24];
  info_field(s, "role", n->role, sizeof(n->role));
  info_field(s, "second_repl_offset", second, sizeof(second));
  n->promoted = second[0] != '\0' && second[0] != '-';
  info_field(s, "master_replid", n->replid, sizeof(n->replid));
  info_field(s, "master_host", n->master_host, sizeof(n->master_host));
  info_field(s, "master_port", port, sizeof(port));
  n->master_port = (int)strtol(port, NULL, 10);
}

/* ["appendfsync", "<policy>"]; the node is durable when the INFO
 * persistence before it (same FIFO) said aof_enabled:1 and this says
 * always. */
static void parse_fsync(redlock__node *n, const redlock__reply *r) {
  n->fsync[0] = '\0';
  if (r->type == REDLOCK__R_ARRAY && r->elements == 2 &&
      r->element[1] != NULL && r->element[1]->type == REDLOCK__R_STRING)
    redlock__strlcpy(n->fsync, r->element[1]->str, sizeof(n->fsync));
  n->durable = n->aof_enabled == 1 && strcmp(n->fsync, "always") == 0;
}

/* ["min-replicas-...", "<n>"] into *out; -1 when refused or not a
 * number. */
static void parse_minrep(const redlock__reply *r, int *out) {
  const redlock__reply *v;
  long x = 0;
  size_t i;
  *out = -1;
  if (r == NULL || r->type != REDLOCK__R_ARRAY || r->elements != 2)
    return;
  v = r->element[1];
  if (v == NULL || v->type != REDLOCK__R_STRING || v->len == 0 ||
      v->len > 9)
    return;
  for (i = 0; i < v->len; i++) {
    if (v->str[i] < '0' || v->str[i] > '9')
      return;
    x = x * 10 + (v->str[i] - '0');
  }
  *out = (int)x;
}

int redlock__node_checks_isolation(const redlock__node *n) {
  return n->primary_only && !n->isolation_unchecked;
}

/* Both sides of a partition can take writes only when each has
 * min-replicas-to-write (m) acknowledging replicas: the old primary keeps
 * m, the promoted one gets m re-synced, and with the promoted one itself
 * that needs r >= 2m + 1 replicas. So r <= 2m is safe. r is the
 * sentinels' list (every known replica, down ones too), not the primary's
 * connected_slaves, which a partition shrinks to what is on its side. */
int redlock__node_isolated(const redlock__node *n, char *buf, size_t len) {
  if (!redlock__node_checks_isolation(n) ||
      (n->min_replicas >= 1 && n->min_replicas_lag >= 1 &&
       n->replicas_known >= 0 &&
       2 * (int64_t)n->min_replicas >= n->replicas_known))
    return 1;
  if (n->min_replicas >= 1 && n->min_replicas_lag >= 1) {
    if (n->replicas_known < 0)
      snprintf(buf, len, "sentinel group: the sentinels have not listed "
               "its replicas yet (SENTINEL REPLICAS): not counted (or "
               "?isolation=unchecked)");
    else
      snprintf(buf, len, "sentinel group: %d replicas, "
               "min-replicas-to-write %d: two primaries could take writes; "
               "set it >= %d, or ?isolation=unchecked", n->replicas_known,
               n->min_replicas, (n->replicas_known + 1) / 2);
    return 0;
  }
  if (n->min_replicas < 0 || n->min_replicas_lag < 0)
    snprintf(buf, len, "sentinel group: CONFIG GET min-replicas-to-write/"
             "-max-lag refused on its primary: not counted (or "
             "?isolation=unchecked)");
  else
    snprintf(buf, len, "sentinel group: its primary takes writes when cut "
             "off (min-replicas-to-write %d, min-replicas-max-lag %d): set "
             "both >= 1, or ?isolation=unchecked", n->min_replicas,
             n->min_replicas_lag);
  return 0;
}

/* A decimal field of the clock record (HMGET), optionally negative;
 * `absent` when missing or not a plain number. */
static int64_t record_num(const redlock__reply *e, int64_t absent) {
  int64_t v = 0;
  size_t i = 0;
  int neg = 0;
  if (e == NULL || e->type != REDLOCK__R_STRING || e->len == 0 ||
      e->len > 18)
    return absent;
  if (e->str[0] == '-') {
    neg = 1;
    i = 1;
    if (e->len == 1)
      return absent;
  }
  for (; i < e->len; i++) {
    if (e->str[i] < '0' || e->str[i] > '9')
      return absent;
    v = v * 10 + (e->str[i] - '0');
  }
  return neg ? -v : v;
}

/* HMGET <clock key> run seen off unc step rid. */
static void parse_clock_record(redlock__node *n, const redlock__reply *r) {
  const redlock__reply *run, *rid;
  n->rec_run[0] = '\0';
  n->rec_rid[0] = '\0';
  n->rec_seen_ms = -1;
  n->rec_off_us = INT64_MIN;
  n->rec_unc_us = 0;
  n->rec_step_ms = -1;
  if (r->type != REDLOCK__R_ARRAY || r->elements != 6)
    return;
  run = r->element[0];
  if (run != NULL && run->type == REDLOCK__R_STRING && run->len <= 40)
    memcpy(n->rec_run, run->str, run->len + 1);
  rid = r->element[5];
  if (rid != NULL && rid->type == REDLOCK__R_STRING && rid->len <= 40)
    memcpy(n->rec_rid, rid->str, rid->len + 1);
  n->rec_seen_ms = record_num(r->element[1], -1);
  n->rec_off_us = record_num(r->element[2], INT64_MIN);
  n->rec_unc_us = record_num(r->element[3], 0);
  n->rec_step_ms = record_num(r->element[4], -1);
  if (n->rec_seen_ms < 0)
    n->rec_seen_ms = -1;
  if (n->rec_unc_us < 0)
    n->rec_unc_us = 0;
  if (n->rec_step_ms < 0)
    n->rec_step_ms = -1;
}

/* Sends the kept releases on the open connection, in order; each one that
 * fails again (connection error, or a passing refusal: invariant 8) is
 * kept again. */
static void node_send_kept(redlock__node *n, redlock__ns now,
                           redlock__ns deadline) {
  unsigned i, count = n->n_kept;
  n->n_kept = 0;   /* what fails from here is kept anew */
  for (i = 0; i < count; i++) {
    redlock__req *req = redlock__node_req(n);
    if (req == NULL ||
        redlock__conn_send_raw(&n->conn, n->kept[i],
                               n->kept_len[i]) != 0) {
      if (req != NULL)
        req_put(n->env, req);
      redlock__free(n->kept[i]);
      continue;
    }
    req->flags = REDLOCK__REQ_REDELIVER;
    req->cmd = n->kept[i];
    req->cmd_len = n->kept_len[i];
    req->sent_ns = now;
    req->deadline_ns = deadline;
    pending_push(n, req);
  }
}

/* Invariant 8: the kept releases go out again on the open connection. */
static void on_kept_retry(redlock__timer *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  redlock__ns now = redlock__sys_now(n->env->sys);
  n->kept_armed = 0;
  if (n->state != REDLOCK__NODE_UP || n->closing || n->n_kept == 0)
    return;
  node_send_kept(n, now, now + timeout_ns(n->env->command_timeout_ms));
  node_arm_deadline(n);
}

/* The handshake ended well: invariant 1, then tell the owner. */
static void node_up(redlock__node *n) {
  redlock__node_env *env = n->env;
  redlock__ns now = redlock__sys_now(n->env->sys);
  redlock__ns deadline = now + timeout_ns(env->command_timeout_ms);
  n->state = REDLOCK__NODE_UP;
  n->up_ns = now;
  n->connects++;
  /* The instance: a replica promoted, or a master that was a replica
   * meanwhile (its data came from another), has another replication id
   * under the same run_id. */
  if (n->run_id[0] == '\0')
    n->ident[0] = '\0';
  else if (n->replid[0] == '\0')
    redlock__strlcpy(n->ident, n->run_id, sizeof(n->ident));
  else
    snprintf(n->ident, sizeof(n->ident), "%s/%s", n->run_id, n->replid);
  n->refused = 0;
  n->hung = 0;
  n->hs_refused = 0;
  n->refusal_said = 0;
  n->repoints = 0;
  n->errstr[0] = '\0';
  redlock__timer_stop(&n->conn_timer);
  /* Releases kept from failed attempts first ... */
  n->kept_tries = 0;
  n->kept_armed = 0;
  node_send_kept(n, now, deadline);
  /* ... then what was queued while connecting, in order. */
  if (redlock__buf_pending(&n->wait_buf) > 0 &&
      redlock__conn_send_raw(&n->conn, n->wait_buf.data + n->wait_buf.off,
                             redlock__buf_pending(&n->wait_buf)) != 0) {
    node_teardown(n, REDLOCK_ENOMEM, "out of memory", 0);
    return;
  }
  redlock__buf_reset(&n->wait_buf);
  while (!redlock__queue_empty(&n->waiting)) {
    redlock__queue *q = n->waiting.next;
    redlock__req *req = REDLOCK__CONTAINER_OF(q, redlock__req, q);
    redlock__queue_remove(q);
    /* The wait's deadline (invariant 6) stays a bound. */
    if (req->deadline_ns == 0 || req->deadline_ns > deadline)
      req->deadline_ns = deadline;
    req->flush_gen = n->flushes;   /* goes out with the next flush */
    pending_push(n, req);
    if (req->flags & REDLOCK__REQ_CLOCK)
      node_want_clock(n, req);
  }
  node_arm_deadline(n);
  if (n->closing) {
    if (n->n_pending == 0)
      node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
    return;
  }
  if (env->on_state != NULL)
    env->on_state(n, REDLOCK__NODE_EV_UP, env->arg);
}

static const char *hs_step_name(int kind) {
  switch (kind) {
    case HS_AUTH:
      return "AUTH";
    case HS_SELECT:
      return "SELECT";
    case HS_SCRIPT:
      return "SCRIPT LOAD";
    case HS_INFO:
      return "INFO";
    case HS_PERSIST:
      return "INFO persistence";
    case HS_FSYNC:
      return "CONFIG GET appendfsync";
    case HS_MAXTTL:
      return "GET";
    case HS_REPL:
      return "INFO replication";
    case HS_TIME:
      return "TIME";
    case HS_CLOCKREC:
      return "HMGET";
    case HS_MYID:
      return "CLUSTER MYID";
    case HS_SHARDS:
      return "CLUSTER SHARDS";
    case HS_SLOTS:
      return "CLUSTER SLOTS";
    case HS_IDCHECK:
      return "INFO replication";
    case HS_MINREP:
      return "CONFIG GET min-replicas-to-write";
    case HS_MINLAG:
      return "CONFIG GET min-replicas-max-lag";
  }
  return "handshake";
}

static void on_hs_failed(redlock__timer *t);

static void on_hs_reply(redlock__req *req, const redlock__reply *r,
                        int error, const char *errstr) {
  redlock__node *n = req->owner;
  char why[sizeof(n->errstr)];
  if (r == NULL) {
    (void)error;
    (void)errstr;
    return;   /* torn down: the node already knows why */
  }
  if (r->type == REDLOCK__R_ERROR) {
    if (req->kind == HS_AUTH &&
        strstr(r->str, "without any password configured") != NULL) {
      /* AUTH to a master that has no password: harmless (decided: warn,
       * do not fail). The text stays readable in errstr until UP. */
      goto next;
    }
    if (req->kind == HS_INFO) {
      /* INFO refused (ACL without +info): the master's age is unknown,
       * which the restart guard counts as "restarted now". */
      n->run_id[0] = '\0';
      n->uptime_s = -1;
      goto next;
    }
    if (req->kind == HS_PERSIST || req->kind == HS_FSYNC) {
      /* Refused (ACL, CONFIG renamed): not known to be durable. */
      n->durable = 0;
      goto next;
    }
    if (req->kind == HS_MAXTTL) {
      /* The record cannot be read here (ACL): unknown, read as none. */
      n->maxttl_ms = 0;
      goto next;
    }
    if (req->kind == HS_REPL || req->kind == HS_CLOCKREC)
      goto next;   /* refused (ACL): unknown */
    if (req->kind == HS_MINREP || req->kind == HS_MINLAG) {
      /* Refused (ACL, CONFIG renamed): unknown, so not counted. */
      *(req->kind == HS_MINREP ? &n->min_replicas : &n->min_replicas_lag) =
          -1;
      goto next;
    }
    if (req->kind == HS_SHARDS) {
      /* Before Redis 7.0: CLUSTER SLOTS says the same. */
      const char *argv[2] = {"CLUSTER", "SLOTS"};
      const size_t lens[2] = {7, 5};
      if (hs_send(n, HS_SLOTS, 2, argv, lens) == 0)
        goto next;
    }
    if (req->kind == HS_TIME) {
      /* TIME refused (ACL): the clock cannot be checked (guard.c says
       * so in every refused vote). */
      n->clock_refused = 1;
      n->clock.wall_us = -1;
      n->clock.send_ns = req->sent_ns;
      n->clock.reply_ns = req->reply_ns;
      n->clock_done = req->clock_seq;
      goto next;
    }
    if (req->kind == HS_SELECT)
      snprintf(why, sizeof(why), "SELECT %d: %s", n->uri.db, r->str);
    else
      snprintf(why, sizeof(why), "%s: %s", hs_step_name(req->kind), r->str);
    /* Invariant 2. Not from inside the connection's own callback: the
     * teardown runs from the timer (the reply loop stops at once, since
     * the connection is closed here). */
    redlock__conn_close(&n->conn);
    node_set_errstr(n, why);
    n->hs_refused = 1;   /* the owner warns of it (a quorum may hold) */
    redlock__timer_start(&n->conn_timer, on_hs_failed, 0, 0);
    return;
  }
  switch (req->kind) {
    case HS_INFO:
      if (r->type == REDLOCK__R_STRING)
        parse_info(n, r->str);
      break;
    case HS_PERSIST:
      n->aof_enabled = r->type == REDLOCK__R_STRING &&
                       strstr(r->str, "aof_enabled:1") != NULL;
      break;
    case HS_FSYNC:
      parse_fsync(n, r);
      break;
    case HS_MINREP:
      parse_minrep(r, &n->min_replicas);
      break;
    case HS_MINLAG:
      parse_minrep(r, &n->min_replicas_lag);
      break;
    case HS_MAXTTL:
      n->maxttl_ms = r->type == REDLOCK__R_STRING
                         ? strtoll(r->str, NULL, 10) : 0;
      if (n->maxttl_ms < 0)
        n->maxttl_ms = 0;
      break;
    case HS_REPL:
      if (r->type == REDLOCK__R_STRING)
        parse_replication(n, r->str);
      if (n->primary_only && strcmp(n->role, "master") != 0) {
        /* The sentinels' answer was stale, or a switch is under way. */
        snprintf(why, sizeof(why), "role %s: not the primary (a switch "
                 "under way?); asking the sentinels again",
                 n->role[0] ? n->role : "unknown");
        redlock__conn_close(&n->conn);
        node_set_errstr(n, why);
        redlock__timer_start(&n->conn_timer, on_hs_failed, 0, 0);
        if (n->env->stale != NULL)
          n->env->stale(n);
        return;
      }
      break;
    case HS_TIME:
      n->clock.wall_us = parse_time(r);
      n->clock.send_ns = req->sent_ns;
      n->clock.reply_ns = req->reply_ns;
      n->clock_done = req->clock_seq;
      break;
    case HS_CLOCKREC:
      parse_clock_record(n, r);
      break;
    case HS_MYID:
      if (r->type == REDLOCK__R_STRING && r->len <= 40)
        memcpy(n->myid, r->str, r->len + 1);
      break;
    case HS_SHARDS:
    case HS_SLOTS:
      switch (n->env->topology != NULL
                  ? n->env->topology(n, r, req->kind == HS_SLOTS)
                  : REDLOCK__TOPO_FAIL) {
        case REDLOCK__TOPO_SERVE:
          if (node_send_handshake_rest(n) != 0) {
            redlock__conn_close(&n->conn);
            node_set_errstr(n, "out of memory");
            redlock__timer_start(&n->conn_timer, on_hs_failed, 0, 0);
            return;
          }
          break;
        case REDLOCK__TOPO_MOVED:
          return;   /* repointed (or idled): this handshake is over */
        case REDLOCK__TOPO_FAIL:
          redlock__conn_close(&n->conn);
          redlock__timer_start(&n->conn_timer, on_hs_failed, 0, 0);
          return;
      }
      break;
    default:
      break;
  }
next:
  if (--n->hs_left == 0)
    node_up(n);
}

static void on_hs_failed(redlock__timer *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  char why[sizeof(n->errstr)];
  memcpy(why, n->errstr, sizeof(why));
  n->st.conn_failures++;
  if (n->hs_refused && n->env->on_state != NULL)
    n->env->on_state(n, REDLOCK__NODE_EV_REFUSED, n->env->arg);
  node_teardown(n, REDLOCK_EIO, why, 1);
}

static int hs_send(redlock__node *n, int kind, int argc,
                   const char *const *argv, const size_t *lens) {
  redlock__req *req = redlock__node_req(n);
  if (req == NULL || redlock__conn_send(&n->conn, argc, argv, lens) != 0) {
    if (req != NULL)
      req_put(n->env, req);
    return REDLOCK_ENOMEM;
  }
  req->cb = on_hs_reply;
  req->owner = n;
  req->kind = (uint8_t)kind;
  /* Dates the reply: the handshake's TIME is the instance's first clock
   * reading, and a reading without its send time had a round trip as
   * long as this machine's uptime, an uncertainty that made the first
   * comparison with the others' clocks (guard.c, settle) say nothing. */
  req->sent_ns = redlock__sys_now(n->env->sys);
  req->deadline_ns = 0;   /* bounded by the connect deadline */
  if (kind == HS_TIME)
    req->clock_seq = ++n->clock_next;
  pending_push(n, req);
  n->hs_left++;
  return 0;
}

/* Writes the handshake (invariant 1). 0, or ENOMEM. A cluster node's
 * begins with its topology (CLUSTER MYID and CLUSTER SHARDS): the rest
 * follows once the cluster layer knows the node serves slots (its record
 * keys are tagged to one of them). */
static int node_send_handshake(redlock__node *n) {
  redlock__node_env *env = n->env;
  const char *user = n->uri.username ? n->uri.username : env->username;
  const char *pass = n->uri.password ? n->uri.password : env->password;
  const char *argv[3];
  size_t lens[3];
  char db[24];
  n->hs_left = 0;
  n->hs_refused = 0;
  n->run_id[0] = '\0';
  n->uptime_s = -1;
  n->maxttl_ms = 0;
  n->aof_enabled = -1;
  n->fsync[0] = '\0';
  n->durable = 0;
  n->min_replicas = -1;
  n->min_replicas_lag = -1;
  n->clock.wall_us = -1;
  n->clock_refused = 0;
  n->rec_run[0] = '\0';
  n->rec_rid[0] = '\0';
  n->rec_seen_ms = -1;
  n->rec_off_us = INT64_MIN;
  n->rec_unc_us = 0;
  n->rec_step_ms = -1;
  n->role[0] = '\0';
  n->replid[0] = '\0';
  n->master_host[0] = '\0';
  n->master_port = 0;
  n->promoted = 0;
  n->id_checks = 0;
  if (pass != NULL) {
    int argc = 0;
    argv[argc] = "AUTH";
    lens[argc++] = 4;
    if (user != NULL) {
      argv[argc] = user;
      lens[argc++] = strlen(user);
    }
    argv[argc] = pass;
    lens[argc++] = strlen(pass);
    if (hs_send(n, HS_AUTH, argc, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  if (n->redirects) {
    argv[0] = "CLUSTER";
    lens[0] = 7;
    argv[1] = "MYID";
    lens[1] = 4;
    if (hs_send(n, HS_MYID, 2, argv, lens) != 0)
      return REDLOCK_ENOMEM;
    argv[1] = "SHARDS";
    lens[1] = 6;
    return hs_send(n, HS_SHARDS, 2, argv, lens);
  }
  if (n->uri.db != 0) {
    argv[0] = "SELECT";
    lens[0] = 6;
    argv[1] = db;
    lens[1] = redlock__fmt_i64(db, n->uri.db);
    if (hs_send(n, HS_SELECT, 2, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  return node_send_handshake_rest(n);
}

/* The handshake after the topology: scripts, INFO, the records, TIME. */
static int node_send_handshake_rest(redlock__node *n) {
  redlock__node_env *env = n->env;
  const char *argv[8];
  size_t lens[8];
  unsigned i;
  for (i = 0; i < env->n_scripts; i++) {
    argv[0] = "SCRIPT";
    lens[0] = 6;
    argv[1] = "LOAD";
    lens[1] = 4;
    argv[2] = env->scripts[i];
    lens[2] = env->script_lens[i];
    if (hs_send(n, HS_SCRIPT, 3, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  argv[0] = "INFO";
  lens[0] = 4;
  argv[1] = "server";
  lens[1] = 6;
  if (hs_send(n, HS_INFO, 2, argv, lens) != 0)
    return REDLOCK_ENOMEM;
  argv[1] = "replication";
  lens[1] = 11;
  if (hs_send(n, HS_REPL, 2, argv, lens) != 0)
    return REDLOCK_ENOMEM;
  if ((env->guarded || n->declared) &&
      /* Durable masters need no restart delay (guard.c). */
      (hs_send_read(n, HS_PERSIST) != 0 || hs_send_read(n, HS_FSYNC) != 0))
    return REDLOCK_ENOMEM;
  if (redlock__node_checks_isolation(n) &&
      /* Does this primary stop accepting writes when cut off from its
       * replicas (DESIGN, Sentinel)? */
      (hs_send_read(n, HS_MINREP) != 0 || hs_send_read(n, HS_MINLAG) != 0))
    return REDLOCK_ENOMEM;
  if (env->maxttl_key != NULL) {
    argv[0] = "GET";
    lens[0] = 3;
    argv[1] = n->rec_maxttl;
    lens[1] = n->rec_maxttl_len;
    if (hs_send(n, HS_MAXTTL, 2, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  if (env->clock_key != NULL) {
    argv[0] = "HMGET";
    lens[0] = 5;
    argv[1] = n->rec_clock;
    lens[1] = n->rec_clock_len;
    argv[2] = "run";
    lens[2] = 3;
    argv[3] = "seen";
    lens[3] = 4;
    argv[4] = "off";
    lens[4] = 3;
    argv[5] = "unc";
    lens[5] = 3;
    argv[6] = "step";
    lens[6] = 4;
    argv[7] = "rid";
    lens[7] = 3;
    if (hs_send(n, HS_CLOCKREC, 8, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  /* Last: the reading closest to the end of the handshake. */
  argv[0] = "TIME";
  lens[0] = 4;
  return hs_send(n, HS_TIME, 1, argv, lens);
}

/* ---- re-checking a declared master's persistence ------------------------- */

static void on_recheck_reply(redlock__req *req, const redlock__reply *r,
                             int error, const char *errstr) {
  redlock__node *n = req->owner;
  (void)error;
  (void)errstr;
  if (r == NULL)
    return;   /* torn down: the next handshake reads it again */
  if (req->kind == HS_PERSIST) {
    n->aof_enabled = r->type == REDLOCK__R_STRING &&
                     strstr(r->str, "aof_enabled:1") != NULL;
  } else if (req->kind == HS_MINREP || req->kind == HS_MINLAG) {
    parse_minrep(r, req->kind == HS_MINREP ? &n->min_replicas
                                           : &n->min_replicas_lag);
  } else if (r->type == REDLOCK__R_ERROR) {
    n->fsync[0] = '\0';
    n->durable = 0;
  } else {
    parse_fsync(n, r);
  }
  if (n->recheck_left > 0 && --n->recheck_left > 0)
    return;
  n->rechecking = 0;
  if (n->env->on_state != NULL)
    n->env->on_state(n, REDLOCK__NODE_EV_DURABLE, n->env->arg);
}

static int recheck_send(redlock__node *n, int kind, int argc,
                        const char *const *argv, const size_t *lens) {
  redlock__req *req = redlock__node_req(n);
  if (req == NULL)
    return REDLOCK_ENOMEM;
  req->cb = on_recheck_reply;
  req->owner = n;
  req->kind = (uint8_t)kind;
  req->flags = REDLOCK__REQ_INTERNAL;
  /* Not lock work: a slow answer must not count against the master's
   * backoff any differently from the rest (same deadline). */
  return redlock__node_submit(n, req, argc, argv, lens);
}

void redlock__node_recheck(redlock__node *n) {
  int kinds[4], k = 0, i;
  if (n->state != REDLOCK__NODE_UP || n->rechecking || n->closing)
    return;
  if (n->declared) {
    kinds[k++] = HS_PERSIST;
    kinds[k++] = HS_FSYNC;
  }
  if (redlock__node_checks_isolation(n)) {
    kinds[k++] = HS_MINREP;
    kinds[k++] = HS_MINLAG;
  }
  n->recheck_left = 0;
  for (i = 0; i < k; i++) {
    const conf_read *c = conf_read_of(kinds[i]);
    if (recheck_send(n, kinds[i], c->argc, c->argv, c->lens) != 0)
      break;
    n->recheck_left++;
  }
  n->rechecking = n->recheck_left > 0;
}

/* ---- identity, repointing, redirections (clusters, sentinels) ---------- */

static void on_idcheck_reply(redlock__req *req, const redlock__reply *r,
                             int error, const char *errstr) {
  redlock__node *n = req->owner;
  char role[16], replid[41], why[200];
  (void)error;
  (void)errstr;
  if (n->id_checks > 0)
    n->id_checks--;
  if (r == NULL || r->type != REDLOCK__R_STRING || req->tag.gen != n->connects ||
      n->state != REDLOCK__NODE_UP)
    return;   /* failed (the next handshake reads it), or refused (ACL) */
  info_field(r->str, "role", role, sizeof(role));
  info_field(r->str, "master_replid", replid, sizeof(replid));
  if (strcmp(role, n->role) == 0 && strcmp(replid, n->replid) == 0)
    return;
  /* Another instance behind the same connection: demoted, resynced from
   * another master, promoted. The next handshake meets it as new. */
  snprintf(why, sizeof(why), "replication changed while connected (role "
           "%s -> %s, replication id %.8s -> %.8s): a failover or a resync",
           n->role[0] ? n->role : "?", role[0] ? role : "?",
           n->replid[0] ? n->replid : "?", replid[0] ? replid : "?");
  node_teardown(n, REDLOCK_EIO, why, 0);
}

void redlock__node_check_identity(redlock__node *n) {
  static const char *const argv[2] = {"INFO", "replication"};
  static const size_t lens[2] = {4, 11};
  redlock__req *req;
  if (n->state != REDLOCK__NODE_UP || n->closing || n->id_checks > 0)
    return;
  req = redlock__node_req(n);
  if (req == NULL)
    return;
  req->cb = on_idcheck_reply;
  req->owner = n;
  req->kind = HS_IDCHECK;
  req->tag.gen = (uint32_t)n->connects;   /* this connection's */
  req->flags = REDLOCK__REQ_INTERNAL | REDLOCK__REQ_HERE;
  if (redlock__node_submit(n, req, 2, argv, lens) == 0)
    n->id_checks++;
}

/* The host and its display ("host:port", "[v6]:port"), allocated: 0 or
 * ENOMEM (then neither is). */
static int address_strings(const char *host, int port, char **h, char **d) {
  char display[300];
  int v6 = strchr(host, ':') != NULL;
  snprintf(display, sizeof(display), "%s%s%s:%d", v6 ? "[" : "", host,
           v6 ? "]" : "", port);
  *h = redlock__strdup(host);
  *d = redlock__strdup(display);
  if (*h == NULL || *d == NULL) {
    redlock__free(*h);
    redlock__free(*d);
    return REDLOCK_ENOMEM;
  }
  return 0;
}

/* The node's address is now host:port (h, d: address_strings's, taken
 * over); it is resolved again at the next connect. */
static void adopt_address(redlock__node *n, char *h, char *d, int port) {
  redlock__free(n->uri.host);
  n->uri.host = h;
  n->uri.port = port;
  redlock__free(n->uri.display);
  n->uri.display = d;
  memset(&n->addr, 0, sizeof(n->addr));
}

int redlock__node_repoint(redlock__node *n, const char *host, int port,
                          const char *why) {
  redlock__queue pending, waiting;
  char *h, *d;
  char stuck_why[sizeof(n->errstr)];
  /* Sent on with no handshake ended since the last time: it was midway,
   * or DOWN (idled by a topology, or failed) (invariant 7). */
  int midway = n->state != REDLOCK__NODE_UP;
  int stuck;
  int64_t delay = 0;
  if (n->state == REDLOCK__NODE_CLOSED)
    return 0;   /* a topology that came after the close */
  if (address_strings(host, port, &h, &d) != 0)
    return REDLOCK_ENOMEM;
  /* What was written is lost with this connection; what waits for the
   * handshake goes to the new address. */
  redlock__queue_init(&pending);
  node_cut(n, &pending, NULL);
  n->failures = 0;
  if (midway) {
    n->repoints++;
  } else {
    /* A node that served; but one sent on again and again right after
     * each handshake (its topology's and another node's disagree on where
     * its records' slot is) is a storm all the same (found by redlock-sim:
     * seed 295 of --faults failover,disagree,migrate, 457 connections a
     * second). */
    redlock__ns now = redlock__sys_now(n->env->sys);
    n->repoints = 0;
    if (now - n->up_ns < (redlock__ns)REDLOCK__SERVED_MS * REDLOCK__NS_PER_MS)
      n->flaps++;
    else
      n->flaps = 0;
  }
  stuck = ((midway && n->repoints > 1) || n->flaps > 1) && !n->closing;
  if (stuck)
    delay = redlock__backoff_ms(n->env->reconnect_min_ms,
                                n->env->reconnect_max_ms,
                                (n->repoints > n->flaps ? n->repoints
                                                        : n->flaps) - 1,
                                n->env->prng);
  n->refused = 0;
  n->hung = 0;
  n->lazy = 0;
  n->myid[0] = '\0';
  adopt_address(n, h, d, port);
  node_set_errstr(n, why);
  if (stuck) {
    /* Sent on again before any handshake ended: DOWN for the backoff
     * (invariant 7), as after a failed connection: what waits fails now,
     * new requests fail at once, and the owner counts the node as tried
     * (the restart guard's first-connection wait ends). */
    snprintf(stuck_why, sizeof(stuck_why), "%.100s (sent on %u times in a "
             "row, never serving: do %s disagree?)", why,
             n->repoints > n->flaps ? n->repoints : n->flaps,
             n->peers != NULL ? n->peers : "its peers");
    node_set_errstr(n, stuck_why);
    redlock__queue_init(&waiting);
    move_all(&n->waiting, &waiting);
    redlock__buf_reset(&n->wait_buf);
    n->state = REDLOCK__NODE_DOWN;
    if (n->env->on_state != NULL)
      n->env->on_state(n, REDLOCK__NODE_EV_DOWN, n->env->arg);
    fail_list(n, &pending, REDLOCK_EIO, stuck_why);
    fail_list(n, &waiting, REDLOCK_EIO, stuck_why);
    node_failed_event(n);
    if (n->state == REDLOCK__NODE_DOWN && n->closing) {
      redlock__timer_stop(&n->conn_timer);
      node_finish_close(n);
    } else if (n->state == REDLOCK__NODE_DOWN)
      redlock__timer_start(&n->conn_timer, on_reconnect, (uint64_t)delay, 0);
    return 0;
  }
  if (n->state == REDLOCK__NODE_UP) {
    n->state = REDLOCK__NODE_DOWN;
    if (n->env->on_state != NULL && !n->closing)
      n->env->on_state(n, REDLOCK__NODE_EV_DOWN, n->env->arg);
  }
  n->state = REDLOCK__NODE_DOWN;
  fail_list(n, &pending, REDLOCK_EIO, why);
  node_failed_event(n);
  if (n->state == REDLOCK__NODE_DOWN && n->closing) {
    /* Closing while its handshake ran (the close waited for it): the
     * topology that ended it ends the close too (found by redlock-sim:
     * the node stayed DOWN with its timers open and the client's close
     * never completed), and what waited for the next connection fails
     * (it would be lost with the node). */
    redlock__queue_init(&waiting);
    move_all(&n->waiting, &waiting);
    redlock__buf_reset(&n->wait_buf);
    fail_list(n, &waiting, REDLOCK_ECANCELED, "client closed");
    if (n->state == REDLOCK__NODE_DOWN) {
      redlock__timer_stop(&n->conn_timer);
      node_finish_close(n);
    }
    return 0;
  }
  if (n->state == REDLOCK__NODE_DOWN && !n->closing) {
    /* Connect from a timer: this may run inside the old connection's
     * reply callback. Requests submitted meanwhile wait for it (bounded
     * by their own deadlines, invariant 6). */
    n->state = REDLOCK__NODE_RESOLVING;
    redlock__timer_start(&n->conn_timer, on_reconnect, 0, 0);
  }
  node_arm_deadline(n);   /* node_cut stopped it: what still waits */
  return 0;
}

void redlock__node_idle(redlock__node *n, const char *why) {
  redlock__queue pending, waiting;
  if (n->state == REDLOCK__NODE_CLOSED)
    return;   /* a topology that came after the close */
  redlock__queue_init(&pending);
  redlock__queue_init(&waiting);
  node_cut(n, &pending, &waiting);
  n->myid[0] = '\0';
  node_set_errstr(n, why);
  if (n->state == REDLOCK__NODE_UP && n->env->on_state != NULL &&
      !n->closing) {
    n->state = REDLOCK__NODE_DOWN;
    n->env->on_state(n, REDLOCK__NODE_EV_DOWN, n->env->arg);
  }
  n->state = REDLOCK__NODE_DOWN;
  fail_list(n, &pending, REDLOCK_EIO, why);
  fail_list(n, &waiting, REDLOCK_EIO, why);
  node_failed_event(n);
  if (n->state == REDLOCK__NODE_DOWN && n->closing) {
    redlock__timer_stop(&n->conn_timer);   /* the close waited for its */
    node_finish_close(n);                  /* handshake */
  }
}

void redlock__node_pass_kept(redlock__node *n, redlock__node *to) {
  /* The list is taken first: a submit may run callbacks that keep a new
   * release on n (a fresh list then). */
  char **kept = n->kept;
  size_t *kept_len = n->kept_len;
  unsigned i, count = n->n_kept;
  n->kept = NULL;
  n->kept_len = NULL;
  n->n_kept = 0;
  for (i = 0; i < count; i++) {
    redlock__req *req = redlock__node_req(to);
    if (req != NULL) {
      req->flags = REDLOCK__REQ_REDELIVER;
      (void)redlock__node_submit_raw(to, req, kept[i], kept_len[i]);
    }
    redlock__free(kept[i]);   /* submit copied it (or kept a copy) */
  }
  redlock__free(kept);
  redlock__free(kept_len);
}

int redlock__node_set_address(redlock__node *n, const char *host, int port) {
  char *h, *d;
  if (n->state != REDLOCK__NODE_DOWN)
    return REDLOCK_EBUSY;
  if (address_strings(host, port, &h, &d) != 0)
    return REDLOCK_ENOMEM;
  adopt_address(n, h, d, port);
  return 0;
}

int redlock__node_resend(redlock__node *to, redlock__req *req, int asking) {
  static const char asking_cmd[] = "*1\r\n$6\r\nASKING\r\n";
  redlock__req *nr;
  cmd_src c = {0, NULL, NULL, NULL, 0};
  int rc;
  /* The first deadline it had (its acquisition's wait may be later). */
  redlock__ns until = req->until_ns != 0 && (req->deadline_ns == 0 ||
                                             req->until_ns < req->deadline_ns)
                          ? req->until_ns
                          : req->deadline_ns;
  if (req->cmd == NULL)
    return REDLOCK_ENOMEM;   /* not kept: cannot be sent again */
  if (until != 0 && until <= redlock__sys_now(to->env->sys))
    return REDLOCK_ETIMEDOUT;   /* no time left for another node */
  nr = redlock__node_req(to);
  if (nr == NULL)
    return REDLOCK_ENOMEM;
  nr->cb = req->cb;
  nr->owner = req->owner;
  nr->tag = req->tag;
  nr->idx = req->idx;
  nr->kind = req->kind;
  nr->flags = req->flags;
  nr->hops = (uint8_t)(req->hops + 1);
  nr->sent_ns = req->sent_ns;
  nr->until_ns = until;
  /* The command's bytes move to the new request. */
  nr->cmd = req->cmd == req->cmd_inline ? nr->cmd_inline : req->cmd;
  if (req->cmd == req->cmd_inline)
    memcpy(nr->cmd_inline, req->cmd_inline, req->cmd_len);
  nr->cmd_len = req->cmd_len;
  req->cmd = NULL;
  c.raw = nr->cmd;
  c.raw_len = nr->cmd_len;
  if (asking) {
    /* ASKING, then the command, back to back on the target's connection
     * (or both behind its handshake). */
    redlock__req *ar = redlock__node_req(to);
    cmd_src a = {0, NULL, NULL, asking_cmd, sizeof(asking_cmd) - 1};
    if (ar == NULL) {
      req_put(to->env, nr);
      return REDLOCK_ENOMEM;
    }
    ar->flags = REDLOCK__REQ_INTERNAL | REDLOCK__REQ_HERE;
    ar->until_ns = nr->until_ns;
    rc = node_submit(to, ar, &a);
    if (rc != 0) {
      req_put(to->env, nr);
      return rc;
    }
  }
  return node_submit(to, nr, &c);
}

int redlock__node_set_tag(redlock__node *n, const char *prefix,
                          size_t prefix_len, unsigned slot) {
  static const char maxttl[] = "__redlock__:maxttl";
  static const char clock[] = "__redlock__:clock";
  char tag[8];
  size_t tl = redlock__slot_tag(slot, tag);
  size_t a = prefix_len + tl + 2 + sizeof(maxttl) - 1;
  size_t b = prefix_len + tl + 2 + sizeof(clock) - 1;
  char *keys = redlock__malloc(a + 1 + b + 1);
  char *p;
  if (keys == NULL)
    return REDLOCK_ENOMEM;
  p = keys;
  if (prefix_len > 0)
    memcpy(p, prefix, prefix_len);
  p += prefix_len;
  *p++ = '{';
  memcpy(p, tag, tl);
  p += tl;
  *p++ = '}';
  memcpy(p, maxttl, sizeof(maxttl));
  p = keys + a + 1;
  memcpy(p, keys, prefix_len + tl + 2);
  memcpy(p + prefix_len + tl + 2, clock, sizeof(clock));
  redlock__free(n->own_keys);
  n->own_keys = keys;
  n->rec_maxttl = keys;
  n->rec_maxttl_len = a;
  n->rec_clock = keys + a + 1;
  n->rec_clock_len = b;
  n->tag_slot = slot;
  return 0;
}

/* ---- connection events --------------------------------------------------- */

static void on_conn_connected(redlock__conn *c) {
  redlock__node *n = c->data;
  redlock__ns now = redlock__sys_now(n->env->sys);
  redlock__queue *q;
  n->state = REDLOCK__NODE_HANDSHAKE;
  /* The handshake goes out now: its TIME's reading starts here, not when
   * it was queued before the connect. */
  for (q = n->pending.next; q != &n->pending; q = q->next)
    REDLOCK__CONTAINER_OF(q, redlock__req, q)->sent_ns = now;
}

/* A Redis Cluster moved the slot (MOVED) or is moving it (ASK): the
 * cluster layer may send the command where the slot is now, with the same
 * callback. Not an answer of this master: no statistics. 1 when req went
 * elsewhere (it is given back here). Out of the hot path. */
static int __attribute__((noinline))
node_redirected(redlock__node *n, redlock__req *req, const redlock__reply *r) {
  uint64_t td = n->teardowns;
  if (req->cb == on_hs_reply || n->env->redirect == NULL ||
      (strncmp(r->str, "MOVED ", 6) != 0 && strncmp(r->str, "ASK ", 4) != 0))
    return 0;
  if (!n->env->redirect(n, req, r))
    return 0;
  req_put(n->env, req);
  if (n->teardowns != td || n->conn.state != REDLOCK__CONN_OPEN)
    return 1;
  node_arm_deadline(n);
  if (n->closing && n->n_pending == 0 && n->state == REDLOCK__NODE_UP)
    node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
  return 1;
}

/* Refusals that pass: the cluster is down or resharding (CLUSTERDOWN,
 * TRYAGAIN, a MOVED or ASK past the redirections' limit), the server is
 * loading or lost its primary (LOADING, MASTERDOWN), a sentinel group's
 * primary lacks replicas or was demoted (NOREPLICAS, READONLY), a script
 * runs long (BUSY). */
static int passing_refusal(const redlock__reply *r) {
  static const char *const codes[] = {"CLUSTERDOWN ", "TRYAGAIN ", "MOVED ",
                                      "ASK ", "LOADING ", "MASTERDOWN ",
                                      "NOREPLICAS ", "READONLY ", "BUSY "};
  size_t i;
  for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    if (strncmp(r->str, codes[i], strlen(codes[i])) == 0)
      return 1;
  return 0;
}

/* Invariant 8: a release the server refused for now is kept, and sent
 * again on this connection after a backoff (or after the next
 * handshake). Out of the hot path. */
static void __attribute__((noinline))
node_refused_release(redlock__node *n, redlock__req *req,
                     const redlock__reply *r) {
  int64_t delay;
  if (!passing_refusal(r))
    return;
  node_keep_req(n, req);
  if (n->n_kept == 0 || n->kept_armed || n->state != REDLOCK__NODE_UP ||
      n->closing)
    return;
  delay = redlock__backoff_ms(n->env->reconnect_min_ms,
                              n->env->reconnect_max_ms, ++n->kept_tries,
                              n->env->prng);
  n->kept_armed = 1;
  redlock__timer_start(&n->conn_timer, on_kept_retry, (uint64_t)delay, 0);
}

static void on_conn_reply(redlock__conn *c, const redlock__reply *r) {
  redlock__node *n = c->data;
  redlock__req *req;
  if (redlock__queue_empty(&n->pending)) {
    node_teardown(n, REDLOCK_EPROTO, "reply to no request", 1);
    return;
  }
  req = REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
  redlock__queue_remove(&req->q);
  n->n_pending--;
  n->answered++;
  req->reply_ns = redlock__sys_now(n->env->sys);
  if (n->redirects && r->type == REDLOCK__R_ERROR &&
      node_redirected(n, req, r))
    return;
  if (req->cb != on_hs_reply && !(req->flags & REDLOCK__REQ_INTERNAL)) {
    uint64_t us = (req->reply_ns - req->sent_ns) / REDLOCK__NS_PER_US;
    n->st.replies++;
    n->st.latency_sum_us += us;
    n->st.hist[redlock__hist_bucket(us)]++;
    if (r->type == REDLOCK__R_ERROR)
      n->st.server_errors++;
    else
      n->failures = 0;   /* invariant 4: a timely answer to real work */
  }
  if (r->type == REDLOCK__R_ERROR && (req->flags & REDLOCK__REQ_REDELIVER))
    node_refused_release(n, req, r);
  else if ((req->flags & REDLOCK__REQ_REDELIVER) && n->n_kept == 0)
    n->kept_tries = 0;   /* invariant 8: a release landed, none waits */
  if (req->cb != NULL)
    req->cb(req, r, 0, NULL);
  req_put(n->env, req);
  if (n->conn.state != REDLOCK__CONN_OPEN)
    return;
  node_arm_deadline(n);
  if (n->closing && n->n_pending == 0 && n->state == REDLOCK__NODE_UP)
    node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
}

static int conn_refused(const redlock__conn *c) {
  return c->last_errno == ECONNREFUSED || c->last_errno == ENOENT;
}

static void on_conn_failed(redlock__conn *c, int err, const char *msg) {
  redlock__node *n = c->data;
  int refused = n->state == REDLOCK__NODE_CONNECTING && conn_refused(c);
  char hinted[sizeof(n->errstr)];
  (void)err;
  n->st.conn_failures++;
  n->refused = refused;   /* invariant 7 */
  n->hung = 0;
  if (!n->uri.tls && !c->got_reply && !refused &&
      n->state != REDLOCK__NODE_UP) {
    /* Closed before the first reply of a plain handshake: what a TLS
     * port does with plain bytes, and a proxy (a load balancer, the
     * fault kit's) whose server is down. */
    snprintf(hinted, sizeof(hinted), "%s (closed before any reply: a TLS "
             "port? use rediss://; or a proxy whose server is down)", msg);
    msg = hinted;
  }
  node_teardown(n, REDLOCK_EIO, msg, !refused);
}

static const redlock__conn_cbs node_conn_cbs = {
    on_conn_connected, on_conn_reply, on_conn_failed, on_conn_flush};

/* ---- connect, reconnect -------------------------------------------------- */

static void on_conn_timeout(redlock__timer *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  char why[160];
  snprintf(why, sizeof(why), "connect/handshake timed out after %lld ms%s",
           (long long)n->env->connect_timeout_ms,
           n->conn.state == REDLOCK__CONN_TLS
               ? " in the TLS handshake (no TLS answer: a plain port? use "
                 "redis://)"
               : "");
  n->st.timeouts++;
  n->hung = 1;   /* invariant 6 */
  n->refused = 0;
  node_teardown(n, REDLOCK_ETIMEDOUT, why, 1);
}

static void on_reconnect(redlock__timer *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  redlock__node_start(n);
}

/* Capped exponential backoff with jitter: base = min * 2^(failures-1),
 * capped at max, then uniform in [base/2, base]. */
static void node_schedule_reconnect(redlock__node *n) {
  redlock__node_env *env = n->env;
  /* Invariant 7: a refused connection is retried without growing. */
  int64_t delay = redlock__backoff_ms(env->reconnect_min_ms,
                                      env->reconnect_max_ms,
                                      n->refused ? 1 : n->failures,
                                      env->prng);
  n->state = REDLOCK__NODE_DOWN;
  redlock__timer_start(&n->conn_timer, on_reconnect, (uint64_t)delay, 0);
}

static void node_connect(redlock__node *n) {
  redlock__node_env *env = n->env;
  char err[160];
  int rc;
  rc = redlock__conn_open(&n->conn,
                          n->uri.path != NULL
                              ? NULL
                              : (const struct sockaddr *)&n->addr,
                          n->uri.path, n->uri.tls ? env->tls : NULL,
                          n->uri.host, err, sizeof(err));
  if (rc != 0) {
    n->refused = conn_refused(&n->conn);   /* a unix socket: at once */
    node_teardown(n, REDLOCK_EIO, err, !n->refused);
    return;
  }
  n->state = REDLOCK__NODE_CONNECTING;
  redlock__timer_start(&n->conn_timer, on_conn_timeout,
                 (uint64_t)env->connect_timeout_ms, 0);
  if (node_send_handshake(n) != 0)
    node_teardown(n, REDLOCK_ENOMEM, "out of memory", 1);
}

static void on_resolved(redlock__resolve *req, int status,
                        const struct addrinfo *res, const char *err) {
  redlock__gai *g = REDLOCK__CONTAINER_OF(req, redlock__gai, req);
  redlock__node *n = g->node;
  redlock__free(g);
  if (n == NULL)
    return;
  n->gai = NULL;
  if (status != 0) {
    char why[160];
    snprintf(why, sizeof(why), "cannot resolve %s: %s", n->uri.host, err);
    node_teardown(n, n->closing ? REDLOCK_ECANCELED : REDLOCK_EIO, why, 1);
    return;
  }
  redlock__addr_resolved(&n->addr, res, n->uri.port);
  if (n->closing) {
    node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
    return;
  }
  node_connect(n);
}

void redlock__node_start(redlock__node *n) {
  if (n->closing || n->state == REDLOCK__NODE_CLOSED)
    return;
  if (n->uri.host == NULL && n->uri.path == NULL)
    return;   /* no address yet (a sentinel group's, a cluster's slot) */
  n->last_try_ns = redlock__sys_now(n->env->sys);
  if (n->uri.path != NULL ||
      redlock__addr_literal(&n->addr, n->uri.host, n->uri.port)) {
    node_connect(n);
    return;
  }
  n->state = REDLOCK__NODE_RESOLVING;
  n->gai = redlock__malloc(sizeof(*n->gai));
  if (n->gai == NULL) {
    node_teardown(n, REDLOCK_ENOMEM, "out of memory", 1);
    return;
  }
  n->gai->node = n;
  if (redlock__sys_resolve(n->env->sys, &n->gai->req, n->uri.host,
                           on_resolved) != 0) {
    redlock__free(n->gai);
    n->gai = NULL;
    node_teardown(n, REDLOCK_EIO, "cannot start name resolution", 1);
    return;
  }
  /* The resolution counts inside the connect deadline too (a busy
   * threadpool or a hung resolver must not hold requests). */
  redlock__timer_start(&n->conn_timer, on_conn_timeout,
                 (uint64_t)n->env->connect_timeout_ms, 0);
}

/* ---- life cycle ---------------------------------------------------------- */

void redlock__node_init(redlock__node *n, redlock__node_env *env,
                        unsigned idx, redlock__uri *uri) {
  memset(n, 0, sizeof(*n));
  n->env = env;
  n->index = idx;
  n->master = idx;
  n->rec_maxttl = env->maxttl_key;
  n->rec_maxttl_len = env->maxttl_keylen;
  n->rec_clock = env->clock_key;
  n->rec_clock_len = env->clock_keylen;
  n->state = REDLOCK__NODE_DOWN;
  n->uptime_s = -1;
  n->replicas_known = -1;
  n->uri = *uri;   /* moved: the node owns its strings now */
  memset(uri, 0, sizeof(*uri));
  redlock__queue_init(&n->pending);
  redlock__queue_init(&n->waiting);
  redlock__conn_init(&n->conn, env->sys, env->flusher, &node_conn_cbs, n);
  redlock__timer_init(env->sys, &n->deadline_timer);
  redlock__timer_init(env->sys, &n->conn_timer);
  n->deadline_timer.data = n;
  n->conn_timer.data = n;
  n->handles_open = 2;
  node_set_errstr(n, "not connected yet");
}

static void on_node_timer_closed(redlock__timer *t) {
  redlock__node *n = t->data;
  if (--n->handles_open == 0 && n->env->on_state != NULL)
    n->env->on_state(n, REDLOCK__NODE_EV_CLOSED, n->env->arg);
}

static void node_finish_close(redlock__node *n) {
  unsigned i;
  if (n->state == REDLOCK__NODE_CLOSED)
    return;
  n->state = REDLOCK__NODE_CLOSED;
  redlock__conn_close(&n->conn);
  for (i = 0; i < n->n_kept; i++)
    redlock__free(n->kept[i]);
  n->n_kept = 0;
  redlock__timer_close(&n->deadline_timer, on_node_timer_closed);
  redlock__timer_close(&n->conn_timer, on_node_timer_closed);
}

void redlock__node_close(redlock__node *n) {
  n->closing = 1;
  switch (n->state) {
    case REDLOCK__NODE_RESOLVING:
      node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
      return;
    case REDLOCK__NODE_DOWN:
      redlock__timer_stop(&n->conn_timer);
      node_finish_close(n);
      return;
    case REDLOCK__NODE_CONNECTING:
    case REDLOCK__NODE_HANDSHAKE:
      /* What waits goes out once the handshake ended (bounded by the
       * connect deadline), then drains. */
      return;
    case REDLOCK__NODE_UP:
      if (n->n_pending == 0)
        node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
      return;
    case REDLOCK__NODE_CLOSED:
      return;
  }
}

void redlock__node_free(redlock__node *n) {
  redlock__free(n->own_keys);
  n->own_keys = NULL;
  redlock__free(n->kept);
  redlock__free(n->kept_len);
  n->kept = NULL;
  n->kept_len = NULL;
  redlock__conn_free(&n->conn);
  redlock__buf_free(&n->wait_buf);
  redlock__uri_free(&n->uri);
}
