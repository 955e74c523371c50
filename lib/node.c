/* node.c: one Redis master.
 *
 * Owns: the connection to one master (conn.c) and its life cycle (async
 * DNS, connect, handshake, reconnect with capped exponential backoff and
 * jitter), the FIFO of requests in flight with one deadline timer for the
 * oldest, and the releases to send again after a reconnect. Does not own:
 * what a command or a reply means (the layer above), the loop.
 *
 * Invariants
 *  1. Wire order after every (re)connect: the handshake (AUTH, SELECT,
 *     SCRIPT LOAD of every script, INFO server, GET of the recorded longest
 *     ttl), and only once ALL of it answered without error: the releases
 *     kept from failed attempts (abandoned[]), then the requests queued
 *     while connecting (waiting, bytes in wait_buf), in submission order.
 *     Nothing else is ever written before the handshake succeeded. The
 *     releases come after the handshake's replies: the server has then run
 *     an event loop turn since it came back, so a stale SET still sitting in
 *     an old connection's socket buffer has been executed, and the release
 *     lands after it. They come before the queued requests, which may
 *     include new acquisitions of the same key by this client.
 *  2. A failed handshake step takes the node DOWN with that step's own
 *     error text ("SELECT 99: ERR DB index is out of range"); nothing
 *     queued is written on that connection.
 *  3. Only releases (REDLOCK__REQ_REDELIVER) are ever sent again, and the
 *     layer above marks only releases of tokens it no longer holds: a
 *     token a lock currently holds is never released from here.
 *  4. Replies are FIFO, so the oldest pending request is the first that
 *     can be overdue: one timer armed for it. When it fires the connection
 *     is torn down (every pending request fails once, with ETIMEDOUT), the
 *     failure counts for the reconnect backoff, and the node reconnects.
 *     Only a reply to a request of the layer above (not a handshake) resets
 *     the backoff: a master slower than the command timeout does not get a
 *     reconnect storm.
 *  5. References: the node owns every request from submit until its
 *     callback returned (then the request goes back to the pool). A
 *     callback may submit, close the node or tear it down: lists are
 *     detached before callbacks run. Closing is synchronous (conn.c): no
 *     event of a closed connection reaches this file.
 *  6. A request submitted while the node makes a connection waits behind
 *     the handshake, bounded by the connect deadline. A request submitted
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
 *     and other failures back off exponentially (invariant 4). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

#define REDLOCK__TRY_NOW_MS 50   /* invariant 6 */

enum {
  HS_AUTH = 1,
  HS_SELECT,
  HS_SCRIPT,
  HS_INFO,
  HS_PERSIST,
  HS_FSYNC,
  HS_MAXTTL
};

static void node_connect(redlock__node *n);
static void node_schedule_reconnect(redlock__node *n);
static void node_finish_close(redlock__node *n);
static void on_deadline(uv_timer_t *t);

/* A name resolution in flight. Allocated apart from the node: a node that
 * gives up on it (connect deadline, close) lets go of it, and the late
 * callback only frees it. */
typedef struct redlock__gai {
  uv_getaddrinfo_t req;
  redlock__node *node;     /* NULL once the node let go */
} redlock__gai;

static void node_drop_gai(redlock__node *n) {
  if (n->gai == NULL)
    return;
  n->gai->node = NULL;
  uv_cancel((uv_req_t *)&n->gai->req);
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
  req->tag = 0;
  req->idx = (uint16_t)n->index;
  req->flags = 0;
  req->kind = 0;
  req->sent_ns = 0;
  req->reply_ns = 0;
  req->deadline_ns = 0;
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
  if (n->n_abandoned == REDLOCK__ABANDONED_MAX) {
    redlock__free(n->abandoned[0]);
    memmove(n->abandoned, n->abandoned + 1,
            (REDLOCK__ABANDONED_MAX - 1) * sizeof(n->abandoned[0]));
    memmove(n->abandoned_len, n->abandoned_len + 1,
            (REDLOCK__ABANDONED_MAX - 1) * sizeof(n->abandoned_len[0]));
    n->n_abandoned--;
  }
  n->abandoned[n->n_abandoned] = cmd;
  n->abandoned_len[n->n_abandoned] = len;
  n->n_abandoned++;
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
static int req_copy_cmd(redlock__req *req, int argc, const char *const *argv,
                        const size_t *lens) {
  size_t size = redlock__resp_size(argc, lens);
  char *p = req->cmd_inline;
  if (size > sizeof(req->cmd_inline)) {
    p = redlock__malloc(size);
    if (p == NULL)
      return REDLOCK_ENOMEM;
  }
  req->cmd = p;
  req->cmd_len = redlock__resp_write(p, argc, argv, lens);
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

/* Tears the connection down now: every request pending or waiting fails
 * once with `error`. Safe from any callback. */
static void node_teardown(redlock__node *n, int error, const char *why,
                          int count_failure) {
  redlock__queue pending;
  redlock__queue waiting;
  redlock__queue_init(&pending);
  redlock__queue_init(&waiting);
  redlock__conn_close(&n->conn);
  node_drop_gai(n);
  uv_timer_stop(&n->deadline_timer);
  n->deadline_armed = 0;
  uv_timer_stop(&n->conn_timer);
  node_set_errstr(n, why);
  if (count_failure)
    n->failures++;
  /* Detach both lists first: callbacks may submit to this node again. */
  while (!redlock__queue_empty(&n->pending)) {
    redlock__queue *q = n->pending.next;
    redlock__queue_remove(q);
    redlock__queue_insert_tail(&pending, q);
  }
  while (!redlock__queue_empty(&n->waiting)) {
    redlock__queue *q = n->waiting.next;
    redlock__queue_remove(q);
    redlock__queue_insert_tail(&waiting, q);
  }
  n->n_pending = 0;
  n->hs_left = 0;
  redlock__buf_reset(&n->wait_buf);
  n->state = REDLOCK__NODE_DOWN;
  if (n->env->on_state != NULL && !n->closing)
    n->env->on_state(n, REDLOCK__NODE_EV_DOWN, n->env->arg);
  fail_list(n, &pending, error, why);
  fail_list(n, &waiting, error == REDLOCK_ETIMEDOUT ? REDLOCK_EIO : error,
            why);
  if (n->state != REDLOCK__NODE_DOWN)
    return;   /* a callback restarted it */
  if (n->closing)
    node_finish_close(n);
  else
    node_schedule_reconnect(n);
}

/* ---- requests ------------------------------------------------------------ */

/* Arms the deadline timer for the oldest pending request. Lazily: while
 * it is armed for an earlier moment it stays (deadlines only grow along
 * the FIFO); on_deadline re-arms for the then oldest. */
static void node_arm_deadline(redlock__node *n) {
  redlock__req *head;
  redlock__ns now;
  uint64_t ms;
  if (redlock__queue_empty(&n->pending))
    return;
  head = REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
  if (head->deadline_ns == 0)
    return;   /* the handshake: bounded by the connect deadline */
  if (n->deadline_armed != 0 && n->deadline_armed <= head->deadline_ns)
    return;
  now = redlock__now_ns();
  ms = head->deadline_ns > now
           ? (head->deadline_ns - now + REDLOCK__NS_PER_MS - 1) /
                 REDLOCK__NS_PER_MS
           : 0;
  n->deadline_armed = head->deadline_ns;
  uv_timer_start(&n->deadline_timer, on_deadline, ms, 0);
}

/* Writes a request on the open connection and appends it to the FIFO. */
static int node_write(redlock__node *n, redlock__req *req, int argc,
                      const char *const *argv, const size_t *lens,
                      redlock__ns deadline) {
  if (redlock__conn_send(&n->conn, argc, argv, lens) != 0)
    return REDLOCK_ENOMEM;
  req->deadline_ns = deadline;
  redlock__queue_insert_tail(&n->pending, &req->q);
  n->n_pending++;
  if (n->n_pending == 1)
    node_arm_deadline(n);
  return 0;
}

/* Queues req behind the handshake (invariant 1): sent when it is done. */
static int node_wait(redlock__node *n, redlock__req *req, int argc,
                     const char *const *argv, const size_t *lens) {
  if (redlock__resp_cmd(&n->wait_buf, argc, argv, lens) != 0)
    return REDLOCK_ENOMEM;
  redlock__queue_insert_tail(&n->waiting, &req->q);
  return 0;
}

int redlock__node_submit(redlock__node *n, redlock__req *req, int argc,
                         const char *const *argv, const size_t *lens) {
  redlock__node_env *env = n->env;
  int rc = 0;
  req->sent_ns = redlock__now_ns();
  if ((req->flags & REDLOCK__REQ_REDELIVER) &&
      req_copy_cmd(req, argc, argv, lens) != 0)
    req->flags &= (uint8_t)~REDLOCK__REQ_REDELIVER;
  switch (n->state) {
    case REDLOCK__NODE_UP:
      rc = node_write(n, req, argc, argv, lens,
                      req->sent_ns + timeout_ns(env->command_timeout_ms));
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
      rc = node_wait(n, req, argc, argv, lens);
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
      uv_timer_stop(&n->conn_timer);
      redlock__node_start(n);
      if (n->state == REDLOCK__NODE_DOWN || n->state == REDLOCK__NODE_CLOSED) {
        rc = REDLOCK_EIO;
        break;
      }
      rc = node_wait(n, req, argc, argv, lens);
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
  n->st.commands++;
  return 0;
}

static void on_deadline(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, deadline_timer);
  redlock__ns now = redlock__now_ns();
  redlock__req *head;
  char why[96];
  n->deadline_armed = 0;
  if (redlock__queue_empty(&n->pending))
    return;
  head = REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
  if (head->deadline_ns == 0)
    return;
  if (head->deadline_ns > now) {
    node_arm_deadline(n);
    return;
  }
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

/* The handshake ended well: invariant 1, then tell the owner. */
static void node_up(redlock__node *n) {
  redlock__node_env *env = n->env;
  redlock__ns now = redlock__now_ns();
  redlock__ns deadline = now + timeout_ns(env->command_timeout_ms);
  unsigned i;
  n->state = REDLOCK__NODE_UP;
  n->up_ns = now;
  n->connects++;
  n->refused = 0;
  n->hung = 0;
  n->errstr[0] = '\0';
  uv_timer_stop(&n->conn_timer);
  /* Releases kept from failed attempts first ... */
  for (i = 0; i < n->n_abandoned; i++) {
    redlock__req *req = redlock__node_req(n);
    if (req == NULL ||
        redlock__conn_send_raw(&n->conn, n->abandoned[i],
                               n->abandoned_len[i]) != 0) {
      if (req != NULL)
        req_put(env, req);
      redlock__free(n->abandoned[i]);
      continue;
    }
    /* If this one fails too it is kept again. */
    req->flags = REDLOCK__REQ_REDELIVER;
    req->cmd = n->abandoned[i];
    req->cmd_len = n->abandoned_len[i];
    req->sent_ns = now;
    req->deadline_ns = deadline;
    redlock__queue_insert_tail(&n->pending, &req->q);
    n->n_pending++;
  }
  n->n_abandoned = 0;
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
    req->deadline_ns = deadline;
    redlock__queue_insert_tail(&n->pending, q);
    n->n_pending++;
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
  }
  return "handshake";
}

static void on_hs_failed(uv_timer_t *t);

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
    if (req->kind == HS_SELECT)
      snprintf(why, sizeof(why), "SELECT %d: %s", n->uri.db, r->str);
    else
      snprintf(why, sizeof(why), "%s: %s", hs_step_name(req->kind), r->str);
    /* Invariant 2. Not from inside the connection's own callback: the
     * teardown runs from the timer (the reply loop stops at once, since
     * the connection is closed here). */
    redlock__conn_close(&n->conn);
    node_set_errstr(n, why);
    uv_timer_start(&n->conn_timer, on_hs_failed, 0, 0);
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
      /* ["appendfsync", "always"]; sent after HS_PERSIST, same FIFO. */
      n->durable = n->aof_enabled == 1 && r->type == REDLOCK__R_ARRAY &&
                   r->elements == 2 &&
                   r->element[1]->type == REDLOCK__R_STRING &&
                   strcmp(r->element[1]->str, "always") == 0;
      break;
    case HS_MAXTTL:
      n->maxttl_ms = r->type == REDLOCK__R_STRING
                         ? strtoll(r->str, NULL, 10) : 0;
      if (n->maxttl_ms < 0)
        n->maxttl_ms = 0;
      break;
    default:
      break;
  }
next:
  if (--n->hs_left == 0)
    node_up(n);
}

static void on_hs_failed(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  char why[sizeof(n->errstr)];
  memcpy(why, n->errstr, sizeof(why));
  n->st.conn_failures++;
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
  req->deadline_ns = 0;   /* bounded by the connect deadline */
  redlock__queue_insert_tail(&n->pending, &req->q);
  n->n_pending++;
  n->hs_left++;
  return 0;
}

/* Writes the handshake (invariant 1). 0, or ENOMEM. */
static int node_send_handshake(redlock__node *n) {
  redlock__node_env *env = n->env;
  const char *user = n->uri.username ? n->uri.username : env->username;
  const char *pass = n->uri.password ? n->uri.password : env->password;
  const char *argv[3];
  size_t lens[3];
  char db[24];
  unsigned i;
  n->hs_left = 0;
  n->run_id[0] = '\0';
  n->uptime_s = -1;
  n->maxttl_ms = 0;
  n->aof_enabled = -1;
  n->durable = 0;
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
  if (n->uri.db != 0) {
    argv[0] = "SELECT";
    lens[0] = 6;
    argv[1] = db;
    lens[1] = redlock__fmt_i64(db, n->uri.db);
    if (hs_send(n, HS_SELECT, 2, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
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
  if (env->guarded) {
    /* Durable masters need no restart delay (guard.c). */
    argv[1] = "persistence";
    lens[1] = 11;
    if (hs_send(n, HS_PERSIST, 2, argv, lens) != 0)
      return REDLOCK_ENOMEM;
    argv[0] = "CONFIG";
    lens[0] = 6;
    argv[1] = "GET";
    lens[1] = 3;
    argv[2] = "appendfsync";
    lens[2] = 11;
    if (hs_send(n, HS_FSYNC, 3, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  if (env->maxttl_key != NULL) {
    argv[0] = "GET";
    lens[0] = 3;
    argv[1] = env->maxttl_key;
    lens[1] = env->maxttl_keylen;
    if (hs_send(n, HS_MAXTTL, 2, argv, lens) != 0)
      return REDLOCK_ENOMEM;
  }
  return 0;
}

/* ---- connection events --------------------------------------------------- */

static void on_conn_connected(redlock__conn *c) {
  redlock__node *n = c->data;
  n->state = REDLOCK__NODE_HANDSHAKE;
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
  req->reply_ns = redlock__now_ns();
  if (req->cb != on_hs_reply) {
    uint64_t us = (req->reply_ns - req->sent_ns) / REDLOCK__NS_PER_US;
    n->st.replies++;
    n->st.latency_sum_us += us;
    n->st.hist[redlock__hist_bucket(us)]++;
    if (r->type == REDLOCK__R_ERROR)
      n->st.server_errors++;
    else
      n->failures = 0;   /* invariant 4: a timely answer to real work */
  }
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
  (void)err;
  n->st.conn_failures++;
  n->refused = refused;   /* invariant 7 */
  n->hung = 0;
  node_teardown(n, REDLOCK_EIO, msg, !refused);
}

static const redlock__conn_cbs node_conn_cbs = {
    on_conn_connected, on_conn_reply, on_conn_failed};

/* ---- connect, reconnect -------------------------------------------------- */

static void on_conn_timeout(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  char why[96];
  snprintf(why, sizeof(why), "connect/handshake timed out after %lld ms",
           (long long)n->env->connect_timeout_ms);
  n->st.timeouts++;
  n->hung = 1;   /* invariant 6 */
  n->refused = 0;
  node_teardown(n, REDLOCK_ETIMEDOUT, why, 1);
}

static void on_reconnect(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  redlock__node_start(n);
}

/* Capped exponential backoff with jitter: base = min * 2^(failures-1),
 * capped at max, then uniform in [base/2, base]. */
static void node_schedule_reconnect(redlock__node *n) {
  redlock__node_env *env = n->env;
  int64_t base = env->reconnect_min_ms;
  unsigned shift = n->failures > 0 ? n->failures - 1 : 0;
  int64_t delay;
  n->state = REDLOCK__NODE_DOWN;
  if (shift > 20)
    shift = 20;
  base <<= shift;
  if (base > env->reconnect_max_ms)
    base = env->reconnect_max_ms;
  if (n->refused)
    base = env->reconnect_min_ms;   /* invariant 7 */
  delay = base / 2 + (int64_t)(redlock__prng_next(env->prng) %
                               (uint64_t)(base / 2 + 1));
  uv_timer_start(&n->conn_timer, on_reconnect, (uint64_t)delay, 0);
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
  uv_timer_start(&n->conn_timer, on_conn_timeout,
                 (uint64_t)env->connect_timeout_ms, 0);
  if (node_send_handshake(n) != 0)
    node_teardown(n, REDLOCK_ENOMEM, "out of memory", 1);
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  redlock__gai *g = REDLOCK__CONTAINER_OF(req, redlock__gai, req);
  redlock__node *n = g->node;
  redlock__free(g);
  if (n == NULL) {
    if (res != NULL)
      uv_freeaddrinfo(res);
    return;
  }
  n->gai = NULL;
  if (status != 0 || res == NULL) {
    char why[160];
    snprintf(why, sizeof(why), "cannot resolve %s: %s", n->uri.host,
             status == UV_ECANCELED ? "canceled" : uv_strerror(status));
    if (res != NULL)
      uv_freeaddrinfo(res);
    node_teardown(n, n->closing ? REDLOCK_ECANCELED : REDLOCK_EIO, why, 1);
    return;
  }
  memset(&n->addr, 0, sizeof(n->addr));
  memcpy(&n->addr, res->ai_addr,
         res->ai_addrlen < sizeof(n->addr) ? res->ai_addrlen
                                           : sizeof(n->addr));
  if (res->ai_family == AF_INET6)
    ((struct sockaddr_in6 *)&n->addr)->sin6_port =
        htons((uint16_t)n->uri.port);
  else
    ((struct sockaddr_in *)&n->addr)->sin_port = htons((uint16_t)n->uri.port);
  uv_freeaddrinfo(res);
  if (n->closing) {
    node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
    return;
  }
  node_connect(n);
}

static int parse_ip_literal(redlock__node *n) {
  struct sockaddr_in *in4 = (struct sockaddr_in *)&n->addr;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&n->addr;
  memset(&n->addr, 0, sizeof(n->addr));
  if (inet_pton(AF_INET, n->uri.host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)n->uri.port);
    return 1;
  }
  if (inet_pton(AF_INET6, n->uri.host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)n->uri.port);
    return 1;
  }
  return 0;
}

void redlock__node_start(redlock__node *n) {
  struct addrinfo hints;
  if (n->closing || n->state == REDLOCK__NODE_CLOSED)
    return;
  n->last_try_ns = redlock__now_ns();
  if (n->uri.path != NULL || parse_ip_literal(n)) {
    node_connect(n);
    return;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  n->state = REDLOCK__NODE_RESOLVING;
  n->gai = redlock__malloc(sizeof(*n->gai));
  if (n->gai == NULL) {
    node_teardown(n, REDLOCK_ENOMEM, "out of memory", 1);
    return;
  }
  n->gai->node = n;
  if (uv_getaddrinfo(n->env->loop, &n->gai->req, on_resolved, n->uri.host,
                     NULL, &hints) != 0) {
    redlock__free(n->gai);
    n->gai = NULL;
    node_teardown(n, REDLOCK_EIO, "cannot start name resolution", 1);
    return;
  }
  /* The resolution counts inside the connect deadline too (a busy
   * threadpool or a hung resolver must not hold requests). */
  uv_timer_start(&n->conn_timer, on_conn_timeout,
                 (uint64_t)n->env->connect_timeout_ms, 0);
}

/* ---- life cycle ---------------------------------------------------------- */

void redlock__node_init(redlock__node *n, redlock__node_env *env,
                        unsigned idx, redlock__uri *uri) {
  memset(n, 0, sizeof(*n));
  n->env = env;
  n->index = idx;
  n->state = REDLOCK__NODE_DOWN;
  n->uptime_s = -1;
  n->uri = *uri;   /* moved: the node owns its strings now */
  memset(uri, 0, sizeof(*uri));
  redlock__queue_init(&n->pending);
  redlock__queue_init(&n->waiting);
  redlock__conn_init(&n->conn, env->loop, env->flusher, &node_conn_cbs, n);
  uv_timer_init(env->loop, &n->deadline_timer);
  uv_timer_init(env->loop, &n->conn_timer);
  n->deadline_timer.data = n;
  n->conn_timer.data = n;
  n->handles_open = 2;
  node_set_errstr(n, "not connected yet");
}

static void on_node_timer_closed(uv_handle_t *h) {
  redlock__node *n = h->data;
  if (--n->handles_open == 0 && n->env->on_state != NULL)
    n->env->on_state(n, REDLOCK__NODE_EV_CLOSED, n->env->arg);
}

static void node_finish_close(redlock__node *n) {
  unsigned i;
  if (n->state == REDLOCK__NODE_CLOSED)
    return;
  n->state = REDLOCK__NODE_CLOSED;
  redlock__conn_close(&n->conn);
  for (i = 0; i < n->n_abandoned; i++)
    redlock__free(n->abandoned[i]);
  n->n_abandoned = 0;
  uv_close((uv_handle_t *)&n->deadline_timer, on_node_timer_closed);
  uv_close((uv_handle_t *)&n->conn_timer, on_node_timer_closed);
}

void redlock__node_close(redlock__node *n) {
  n->closing = 1;
  switch (n->state) {
    case REDLOCK__NODE_RESOLVING:
      node_teardown(n, REDLOCK_ECANCELED, "client closed", 0);
      return;
    case REDLOCK__NODE_DOWN:
      uv_timer_stop(&n->conn_timer);
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
  redlock__conn_free(&n->conn);
  redlock__buf_free(&n->wait_buf);
  redlock__uri_free(&n->uri);
}
