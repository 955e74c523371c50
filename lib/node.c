/* node.c: one Redis master.
 *
 * Owns: the hiredis async context of one master, its life cycle (async DNS,
 * connect, handshake, reconnect with capped exponential backoff and
 * jitter), the FIFO of requests in flight, the single deadline timer for
 * the oldest of them, reply classification into votes, and the list of
 * tokens abandoned while the master was unreachable.
 * Does not own: what the votes mean (lock.c), the loop, the event hooks
 * (uvadapter.c).
 *
 * Deadlines: replies on a connection come back in order, so the oldest
 * pending request is the only one that can be overdue first. One timer per
 * node is armed for it. When it fires, everything queued behind it is
 * stuck too: the connection is torn down (redisAsyncFree from the timer:
 * every pending callback runs once, synchronously, with NULL) and the node
 * goes DOWN and reconnects after a backoff. A command to a DOWN node fails
 * at once: nothing queues behind a dead master. While a connection is being
 * made, commands queue in order behind the handshake and are bounded by the
 * connect deadline.
 *
 * A SET that timed out may still land later (the server was only stalled).
 * Its key and token are kept in a bounded per-node list and released as
 * soon as the node is back up (see node_release_abandoned).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>
#include <async.h>

#include "common.h"

/* Release: compare-and-delete, and a message on the key's release channel
 * for waiters (wake.c). */
static const char release_script[] =
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "local r = redis.call('del',KEYS[1]) "
    "redis.call('publish','__redlock__:'..KEYS[1],'1') "
    "return r else return 0 end";
/* Extend: 1 when the key holds our token (ttl renewed); with heal
 * (ARGV[3] == "1") a missing key is set again and 2 is returned; 0 when
 * the key is someone else's (or missing without heal). */
static const char extend_script[] =
    "local v = redis.call('get',KEYS[1]) "
    "if v == ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) "
    "elseif v == false and ARGV[3] == '1' then "
    "redis.call('set',KEYS[1],ARGV[1],'px',ARGV[2]) return 2 "
    "else return 0 end";

static const char inspect_script[] =
    "return {redis.call('get',KEYS[1]) or '', redis.call('pttl',KEYS[1])}";

/* Fencing (DESIGN 5): the acquire also increments the resource's counter;
 * the second round raises the counter to T on the masters where we hold
 * the lock, so any later holder's majority meets a counter >= T. */
static const char fenced_acquire_script[] =
    "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then "
    "return redis.call('incr',KEYS[2]) end return false";
static const char fence_script[] =
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "local c = tonumber(redis.call('get',KEYS[2]) or '0') "
    "if c < tonumber(ARGV[2]) then redis.call('set',KEYS[2],ARGV[2]) end "
    "return 1 end return 0";

/* Multi-resource locks: all K keys or none, on each master. */
static const char multi_acquire_script[] =
    "for i=1,#KEYS do if redis.call('exists',KEYS[i]) == 1 then "
    "return 0 end end "
    "for i=1,#KEYS do redis.call('set',KEYS[i],ARGV[1],'PX',ARGV[2]) end "
    "return 1";
static const char multi_release_script[] =
    "local n = 0 for i=1,#KEYS do "
    "if redis.call('get',KEYS[i]) == ARGV[1] then "
    "n = n + redis.call('del',KEYS[i]) "
    "redis.call('publish','__redlock__:'..KEYS[i],'1') end end return n";
static const char multi_extend_script[] =
    "for i=1,#KEYS do local v = redis.call('get',KEYS[i]) "
    "if v ~= ARGV[1] and not (v == false and ARGV[3] == '1') then "
    "return 0 end end "
    "for i=1,#KEYS do if redis.call('get',KEYS[i]) == ARGV[1] then "
    "redis.call('pexpire',KEYS[i],ARGV[2]) else "
    "redis.call('set',KEYS[i],ARGV[1],'PX',ARGV[2]) end end return 1";

/* Read-write locks: one hash "<key>:rw" per resource. Fields "r:<token>"
 * and "w:<token>" hold each owner's expiry in server ms; "ww" is a waiting
 * writer's intent (readers stay out while it is fresh). Every script
 * first purges expired fields, and keeps the hash's own ttl at the latest
 * expiry. ARGV: token, ttl, "r" or "w". */
#define RW_PRELUDE                                                          \
  "local t = redis.call('time') "                                           \
  "local now = t[1] * 1000 + math.floor(t[2] / 1000) "                      \
  "local h = redis.call('hgetall', KEYS[1]) "                               \
  "local readers, writer, ww, maxexp = 0, false, 0, 0 "                     \
  "for i = 1, #h, 2 do local f, v = h[i], tonumber(h[i + 1]) "             \
  "if v <= now then redis.call('hdel', KEYS[1], f) else "                   \
  "if f == 'ww' then ww = v elseif string.sub(f, 1, 2) == 'w:' then "       \
  "writer = f else readers = readers + 1 end "                             \
  "if v > maxexp then maxexp = v end end end "                              \
  "local me = ARGV[3] .. ':' .. ARGV[1] "                                   \
  "local function keep(exp) if exp > maxexp then maxexp = exp end "         \
  "redis.call('pexpire', KEYS[1], maxexp - now) end "
static const char rw_acquire_script[] =
    RW_PRELUDE
    "local exp = now + tonumber(ARGV[2]) "
    "if ARGV[3] == 'r' then "
    "if writer or ww > now then return 0 end "
    "else "
    "if writer or readers > 0 then "
    "redis.call('hset', KEYS[1], 'ww', exp) keep(exp) return 0 end "
    "redis.call('hdel', KEYS[1], 'ww') end "
    "redis.call('hset', KEYS[1], me, exp) keep(exp) return 1";
static const char rw_extend_script[] =
    RW_PRELUDE
    "if redis.call('hexists', KEYS[1], me) == 0 then return 0 end "
    "local exp = now + tonumber(ARGV[2]) "
    "redis.call('hset', KEYS[1], me, exp) keep(exp) return 1";
static const char rw_release_script[] =
    RW_PRELUDE
    "local n = redis.call('hdel', KEYS[1], me) "
    "if redis.call('hlen', KEYS[1]) == 0 then redis.call('del', KEYS[1]) "
    "end if n == 1 then "
    "redis.call('publish', '__redlock__:' .. KEYS[1], '1') end return n";

static void node_connect(redlock__node *n);
static void node_schedule_reconnect(redlock__node *n);
static void node_finish_close(redlock__node *n);
static void on_req_reply(redisAsyncContext *ac, void *r, void *priv);

static void node_set_errstr(redlock__node *n, const char *s) {
  redlock__strlcpy(n->errstr, s, sizeof(n->errstr));
}

/* ---- request I/O ------------------------------------------------------- */

/* Hands a request to hiredis. 0 or EIO (context refuses: disconnecting). */
static int node_write(redlock__node *n, redlock__req *req) {
  const char *argv[8];
  size_t len[8];
  char ttl[24];
  int argc = 0;
  const redlock_lock_t *l = req->lock;
  const char *sha;
  int ttl_len = snprintf(ttl, sizeof(ttl), "%lld", (long long)req->ttl_ms);

  if (l->rw != 0) {
    const char *rv[7];
    size_t rl[7];
    rv[0] = "EVAL";
    rv[1] = req->kind == REDLOCK__REQ_ACQUIRE  ? rw_acquire_script
            : req->kind == REDLOCK__REQ_EXTEND ? rw_extend_script
                                               : rw_release_script;
    rv[2] = "1";
    rv[3] = l->key;
    rv[4] = req->token;
    rv[5] = ttl;
    rv[6] = l->rw == 2 ? "w" : "r";
    for (int j = 0; j < 7; j++)
      rl[j] = strlen(rv[j]);
    rl[3] = l->keylen;
    if (redisAsyncCommandArgv(n->ac, on_req_reply, req, 7, rv, rl) !=
        REDIS_OK)
      return REDLOCK_EIO;
    req->written = 1;
    return 0;
  }
  if (l->nkeys > 1 && req->kind != REDLOCK__REQ_INSPECT) {
    /* EVAL script K key1..keyK token [ttl heal] */
    const char *mv[REDLOCK_MAX_RESOURCES + 7];
    size_t ml[REDLOCK_MAX_RESOURCES + 7];
    char nk[16];
    unsigned i;
    int mc = 0;
    snprintf(nk, sizeof(nk), "%u", l->nkeys);
    mv[mc++] = "EVAL";
    mv[mc++] = req->kind == REDLOCK__REQ_ACQUIRE   ? multi_acquire_script
               : req->kind == REDLOCK__REQ_EXTEND ? multi_extend_script
                                                   : multi_release_script;
    mv[mc++] = nk;
    for (i = 0; i < l->nkeys; i++)
      mv[mc++] = l->keys[i];
    mv[mc++] = req->token;
    if (req->kind == REDLOCK__REQ_ACQUIRE ||
        req->kind == REDLOCK__REQ_EXTEND) {
      mv[mc++] = ttl;
      mv[mc++] = req->heal ? "1" : "0";
    }
    for (int j = 0; j < mc; j++)
      ml[j] = strlen(mv[j]);
    for (i = 0; i < l->nkeys; i++)
      ml[3 + i] = l->keylens[i];
    if (redisAsyncCommandArgv(n->ac, on_req_reply, req, mc, mv, ml) !=
        REDIS_OK)
      return REDLOCK_EIO;
    req->written = 1;
    return 0;
  }
  if (req->kind == REDLOCK__REQ_ACQUIRE_FENCED ||
      req->kind == REDLOCK__REQ_FENCE) {
    argv[0] = "EVAL";
    argv[1] = req->kind == REDLOCK__REQ_FENCE ? fence_script
                                               : fenced_acquire_script;
    argv[2] = "2";
    argv[3] = l->key;
    argv[4] = l->fence_key;
    argv[5] = req->token;
    argv[6] = ttl;   /* the ttl, or T for the fence round */
    for (int i = 0; i < 7; i++)
      len[i] = strlen(argv[i]);
    len[3] = l->keylen;
    len[4] = l->fence_keylen;
    if (redisAsyncCommandArgv(n->ac, on_req_reply, req, 7, argv, len) !=
        REDIS_OK)
      return REDLOCK_EIO;
    req->written = 1;
    return 0;
  }
  if (req->kind == REDLOCK__REQ_INSPECT) {
    argv[0] = "EVAL";
    argv[1] = inspect_script;
    argv[2] = "1";
    argv[3] = l->key;
    argc = 4;
  } else if (req->kind == REDLOCK__REQ_ACQUIRE) {
    argv[0] = "SET";
    argv[1] = l->key;
    argv[2] = req->token;
    argv[3] = "NX";
    argv[4] = "PX";
    argv[5] = ttl;
    argc = 6;
  } else {
    const char *script = req->kind == REDLOCK__REQ_EXTEND ? extend_script
                                                          : release_script;
    sha = req->kind == REDLOCK__REQ_EXTEND ? n->extend_sha : n->release_sha;
    if (req->evalsha_fallback || sha[0] == '\0') {
      argv[0] = "EVAL";
      argv[1] = script;
    } else {
      argv[0] = "EVALSHA";
      argv[1] = sha;
    }
    argv[2] = "1";
    argv[3] = l->key;
    argv[4] = req->token;
    argc = 5;
    if (req->kind == REDLOCK__REQ_EXTEND) {
      argv[5] = ttl;
      argv[6] = req->heal ? "1" : "0";
      argc = 7;
    }
  }
  for (int i = 0; i < argc; i++)
    len[i] = strlen(argv[i]);
  len[1 + (req->kind != REDLOCK__REQ_ACQUIRE ? 2 : 0)] = l->keylen;
  if (req->kind == REDLOCK__REQ_ACQUIRE)
    len[5] = (size_t)ttl_len;
  if (redisAsyncCommandArgv(n->ac, on_req_reply, req, argc, argv, len) !=
      REDIS_OK)
    return REDLOCK_EIO;
  req->written = 1;
  return 0;
}

static void on_deadline(uv_timer_t *t);

static void node_arm_deadline(redlock__node *n, redlock__ns now) {
  redlock__req *head;
  uint64_t ms;
  if (redlock__queue_empty(&n->pending))
    return;
  head = REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
  if (head->deadline_ns == 0)
    return;
  ms = head->deadline_ns > now
           ? (head->deadline_ns - now + REDLOCK__NS_PER_MS - 1) /
                 REDLOCK__NS_PER_MS
           : 0;
  uv_timer_start(&n->deadline_timer, on_deadline, ms, 0);
}

int redlock__node_submit(redlock__node *n, redlock__req *req) {
  redlock_client_t *c = n->client;
  int was_empty = redlock__queue_empty(&n->pending);
  req->node = n;
  req->written = 0;
  req->evalsha_fallback = 0;
  req->sent_ns = uv_hrtime();
  req->deadline_ns = 0;
  switch (n->state) {
    case REDLOCK__NODE_UP:
      if (node_write(n, req) != 0)
        return REDLOCK_EIO;
      req->deadline_ns =
          req->sent_ns + (redlock__ns)c->command_timeout_ms *
                             REDLOCK__NS_PER_MS;
      break;
    case REDLOCK__NODE_CONNECTING:
    case REDLOCK__NODE_HANDSHAKE:
      if (node_write(n, req) != 0)
        return REDLOCK_EIO;
      break;
    case REDLOCK__NODE_RESOLVING:
      break;  /* written once the address is known */
    case REDLOCK__NODE_DOWN:
      return REDLOCK_EIO;
    case REDLOCK__NODE_CLOSED:
      return REDLOCK_ECANCELED;
  }
  redlock__queue_insert_tail(&n->pending, &req->q);
  n->n_pending++;
  if (was_empty && req->deadline_ns != 0)
    node_arm_deadline(n, req->sent_ns);
  return 0;
}

static void node_abandon_key(redlock__node *n, const redlock__req *req,
                             const char *key, size_t keylen,
                             redlock__ns now) {
  redlock__abandoned *a;
  unsigned i;
  /* Reuse an expired slot first; the list is bounded. */
  for (i = 0; i < n->n_abandoned; i++)
    if (n->abandoned[i].expires_ns <= now)
      break;
  if (i == n->n_abandoned) {
    if (n->n_abandoned == REDLOCK__ABANDONED_MAX)
      return;  /* full: the key still expires by its ttl */
    n->n_abandoned++;
  } else {
    redlock__free(n->abandoned[i].key);
  }
  a = &n->abandoned[i];
  a->key = redlock__strndup(key, keylen);
  if (a->key == NULL) {
    a->expires_ns = 0;
    return;
  }
  a->keylen = keylen;
  memcpy(a->token, req->token, sizeof(a->token));
  a->expires_ns = now + (redlock__ns)req->ttl_ms * REDLOCK__NS_PER_MS;
}

/* A SET that may have landed: remember every key of the lock. */
static void node_abandon(redlock__node *n, const redlock__req *req,
                         redlock__ns now) {
  const redlock_lock_t *l = req->lock;
  unsigned k;
  for (k = 0; k < l->nkeys; k++)
    node_abandon_key(n, req, l->keys[k], l->keylens[k], now);
}

void redlock__classify(int kind, const struct redisReply *r,
                       redlock_vote_t *vote, int *error, const char **errstr,
                       int64_t *pttl, char *buf, size_t buflen) {
  *vote = REDLOCK_VOTE_ERR;
  *error = REDLOCK_EPROTO;
  *errstr = "unexpected reply type";
  if (r->type == REDIS_REPLY_ERROR) {
    *error = REDLOCK_ESERVER;
    *errstr = r->str;
    return;
  }
  if (kind == REDLOCK__REQ_INSPECT) {
    size_t n;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_INTEGER)
      return;
    n = r->element[0]->len < buflen - 1 ? r->element[0]->len : buflen - 1;
    memcpy(buf, r->element[0]->str, n);
    buf[n] = '\0';
    *errstr = buf;
    *pttl = r->element[1]->integer;
    *vote = r->element[0]->len > 0 ? REDLOCK_VOTE_YES : REDLOCK_VOTE_NO;
    *error = 0;
    return;
  }
  if (kind == REDLOCK__REQ_ACQUIRE_FENCED) {
    if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
      *vote = REDLOCK_VOTE_YES;
      *pttl = r->integer;   /* the counter */
    } else if (r->type == REDIS_REPLY_NIL) {
      *vote = REDLOCK_VOTE_NO;
    } else {
      return;
    }
    *error = 0;
    *errstr = "";
    return;
  }
  if (kind == REDLOCK__REQ_ACQUIRE) {
    /* SET NX: OK or nil; the multi-resource script: 1 or 0. */
    if ((r->type == REDIS_REPLY_STATUS && r->len == 2 &&
         memcmp(r->str, "OK", 2) == 0) ||
        (r->type == REDIS_REPLY_INTEGER && r->integer == 1)) {
      *vote = REDLOCK_VOTE_YES;
    } else if (r->type == REDIS_REPLY_NIL ||
               (r->type == REDIS_REPLY_INTEGER && r->integer == 0)) {
      *vote = REDLOCK_VOTE_NO;
    } else {
      return;
    }
  } else {
    if (r->type != REDIS_REPLY_INTEGER)
      return;
    /* 1 = done; 2 = healed (extend re-created a missing key). */
    *vote = r->integer >= 1 ? REDLOCK_VOTE_YES : REDLOCK_VOTE_NO;
  }
  *error = 0;
  *errstr = "";
}

static void on_close_drained(uv_timer_t *t);

static void on_req_reply(redisAsyncContext *ac, void *reply, void *priv) {
  redlock__req *req = priv;
  redlock__node *n = req->node;
  const redisReply *r = reply;
  redlock__ns now = uv_hrtime();
  redlock_vote_t vote;
  int error;
  const char *errstr;
  int64_t pttl = -2;
  char buf[160];

  redlock__queue_remove(&req->q);
  n->n_pending--;

  if (r == NULL) {
    vote = REDLOCK_VOTE_ERR;
    if (ac->c.err != 0) {
      error = REDLOCK_EIO;
      redlock__strlcpy(buf, ac->c.errstr, sizeof(buf));
    } else {
      error = n->teardown_reason != 0 ? n->teardown_reason : REDLOCK_EIO;
      redlock__strlcpy(buf, n->errstr, sizeof(buf));
    }
    errstr = buf;
    /* (read-write entries expire by themselves: not kept) */
    if ((req->kind == REDLOCK__REQ_ACQUIRE ||
         req->kind == REDLOCK__REQ_ACQUIRE_FENCED) &&
        error != REDLOCK_ECANCELED && req->lock->rw == 0)
      node_abandon(n, req, now);
  } else if (r->type == REDIS_REPLY_ERROR && !req->evalsha_fallback &&
             req->kind != REDLOCK__REQ_ACQUIRE &&
             req->kind != REDLOCK__REQ_INSPECT &&
             req->kind != REDLOCK__REQ_ACQUIRE_FENCED &&
             req->kind != REDLOCK__REQ_FENCE &&
             strncmp(r->str, "NOSCRIPT", 8) == 0 && n->ac == ac) {
    /* The script cache was flushed: resend this call as EVAL (which also
     * caches it again). It goes to the tail; its deadline is kept. */
    req->evalsha_fallback = 1;
    if (node_write(n, req) == 0) {
      redlock__queue_insert_tail(&n->pending, &req->q);
      n->n_pending++;
      if (n->n_pending == 1)
        node_arm_deadline(n, now);
      return;
    }
    vote = REDLOCK_VOTE_ERR;
    error = REDLOCK_EIO;
    errstr = "connection closing";
  } else {
    redlock__classify(req->kind, r, &vote, &error, &errstr, &pttl, buf,
                      sizeof(buf));
  }

  redlock__lock_on_vote(req, vote, error, errstr, pttl, now);

  if (n->closing && n->n_pending == 0 && n->ac != NULL)
    uv_timer_start(&n->conn_timer, on_close_drained, 0, 0);
}

/* Fails every request not yet handed to hiredis (RESOLVING only). */
static void node_fail_unwritten(redlock__node *n, int error) {
  while (!redlock__queue_empty(&n->pending)) {
    redlock__req *req =
        REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
    REDLOCK__ASSERT(!req->written);
    redlock__queue_remove(&req->q);
    n->n_pending--;
    redlock__lock_on_vote(req, REDLOCK_VOTE_ERR, error, n->errstr, -2,
                          uv_hrtime());
  }
}

/* ---- teardown and reconnect -------------------------------------------- */

/* Frees the connection on our own initiative. Call only from a uv timer
 * callback (never inside a hiredis callback, see research 4.3). */
static void node_teardown(redlock__node *n, int reason, const char *why) {
  redisAsyncContext *ac = n->ac;
  if (ac == NULL)
    return;
  n->ac = NULL;
  n->teardown_reason = reason;
  node_set_errstr(n, why);
  n->state = REDLOCK__NODE_DOWN;
  uv_timer_stop(&n->deadline_timer);
  redisAsyncFree(ac);   /* pending callbacks run now, with NULL */
  n->teardown_reason = 0;
  if (n->closing)
    node_finish_close(n);
  else
    node_schedule_reconnect(n);
}

static void on_deadline(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, deadline_timer);
  redlock__ns now = uv_hrtime();
  redlock__req *head;
  char why[96];
  if (redlock__queue_empty(&n->pending))
    return;
  head = REDLOCK__CONTAINER_OF(n->pending.next, redlock__req, q);
  if (head->deadline_ns == 0)
    return;
  if (head->deadline_ns > now) {
    node_arm_deadline(n, now);
    return;
  }
  snprintf(why, sizeof(why), "no reply within %lld ms",
           (long long)n->client->command_timeout_ms);
  node_teardown(n, REDLOCK_ETIMEDOUT, why);
}

static void on_conn_timeout(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  char why[96];
  snprintf(why, sizeof(why), "connect/handshake timed out after %lld ms",
           (long long)n->client->connect_timeout_ms);
  n->failures++;
  node_teardown(n, REDLOCK_ETIMEDOUT, why);
}

static void on_handshake_failed(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  char why[sizeof(n->errstr)];
  memcpy(why, n->errstr, sizeof(why));
  n->failures++;
  node_teardown(n, REDLOCK_EIO, why);
}

static void on_close_drained(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  node_teardown(n, REDLOCK_ECANCELED, "client closed");
}

static void on_reconnect(uv_timer_t *t) {
  redlock__node *n = REDLOCK__CONTAINER_OF(t, redlock__node, conn_timer);
  redlock__node_start(n);
}

/* Capped exponential backoff with jitter: base = min * 2^(failures-1),
 * capped at max, then uniform in [base/2, base]. */
static void node_schedule_reconnect(redlock__node *n) {
  redlock_client_t *c = n->client;
  int64_t base = c->reconnect_min_ms;
  unsigned shift = n->failures > 0 ? n->failures - 1 : 0;
  int64_t delay;
  n->state = REDLOCK__NODE_DOWN;
  if (shift > 20)
    shift = 20;
  base <<= shift;
  if (base > c->reconnect_max_ms)
    base = c->reconnect_max_ms;
  delay = base / 2 + (int64_t)(redlock__prng_next(&c->prng) %
                               (uint64_t)(base / 2 + 1));
  uv_timer_start(&n->conn_timer, on_reconnect, (uint64_t)delay, 0);
}

/* ---- connect and handshake --------------------------------------------- */

static int hs_current(redlock__node *n, redisAsyncContext *ac,
                      const redisReply *r) {
  if (ac != n->ac || r == NULL)
    return 0;
  if (r->type == REDIS_REPLY_ERROR && !n->handshake_failed) {
    n->handshake_failed = 1;
    node_set_errstr(n, r->str);
  }
  return 1;
}

static void on_hs_reply(redisAsyncContext *ac, void *reply, void *priv) {
  hs_current(priv, ac, reply);
}

static void on_hs_script(redisAsyncContext *ac, void *reply, void *priv,
                         char *sha) {
  const redisReply *r = reply;
  if (!hs_current(priv, ac, r))
    return;
  if (r->type == REDIS_REPLY_STRING && r->len == 40)
    memcpy(sha, r->str, 41);
}

static void on_hs_release_sha(redisAsyncContext *ac, void *r, void *priv) {
  redlock__node *n = priv;
  on_hs_script(ac, r, priv, n->release_sha);
}

static void on_hs_extend_sha(redisAsyncContext *ac, void *r, void *priv) {
  redlock__node *n = priv;
  on_hs_script(ac, r, priv, n->extend_sha);
}

/* run_id and uptime from INFO server: when did this server start? The
 * uptime is whole seconds, rounded down: taking it as is errs on the side
 * of a younger server (a longer guard), which is the safe side. A changed run_id with a large uptime cannot
 * happen for one address unless it is another server: then the start is
 * taken as now. */
static void parse_info(redlock__node *n, const char *s) {
  redlock__ns now = uv_hrtime();
  char run_id[41];
  const char *p = strstr(s, "run_id:");
  int changed = 0;
  run_id[0] = '\0';
  if (p != NULL) {
    size_t i = 0;
    p += 7;
    while (i < 40 && p[i] != '\r' && p[i] != '\n' && p[i] != '\0') {
      run_id[i] = p[i];
      i++;
    }
    run_id[i] = '\0';
    changed = n->run_id[0] != '\0' && strcmp(run_id, n->run_id) != 0;
    memcpy(n->run_id, run_id, sizeof(run_id));
  }
  p = strstr(s, "uptime_in_seconds:");
  if (p != NULL) {
    redlock__ns up;
    n->uptime_s = strtoll(p + 18, NULL, 10);
    up = (redlock__ns)n->uptime_s * 1000 * REDLOCK__NS_PER_MS;
    n->restarted_ns = up < now ? now - up : 1;
    if (changed && n->restarted_ns < now - up / 2)
      n->restarted_ns = now;
  } else if (changed) {
    n->restarted_ns = now;
  }
}

static void on_abandoned_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  (void)r;
  (void)priv;
}

/* Releases the tokens abandoned while the node was unreachable. Sent once
 * the handshake answered, i.e. after the server has run at least one event
 * loop turn since it came back: a stale SET still sitting in an old
 * connection's buffer has been executed by then, so this release lands
 * after it. Entries whose ttl passed are dropped. If this connection dies
 * too, the keys still expire by their ttl. */
static void node_release_abandoned(redlock__node *n, redlock__ns now) {
  unsigned i;
  for (i = 0; i < n->n_abandoned; i++) {
    redlock__abandoned *a = &n->abandoned[i];
    if (a->key != NULL && a->expires_ns > now)
      redisAsyncCommand(n->ac, on_abandoned_reply, NULL, "EVAL %s 1 %b %s",
                        release_script, a->key, a->keylen, a->token);
    redlock__free(a->key);
    a->key = NULL;
  }
  n->n_abandoned = 0;
}

int64_t redlock__node_restart_age_ms(const redlock__node *n,
                                     redlock__ns now) {
  if (n->restarted_ns == 0 || now < n->restarted_ns)
    return n->restarted_ns == 0 ? INT64_MAX : 0;
  return (int64_t)((now - n->restarted_ns) / REDLOCK__NS_PER_MS);
}

static void node_up(redlock__node *n) {
  redlock__ns now = uv_hrtime();
  redlock__ns timeout =
      (redlock__ns)n->client->command_timeout_ms * REDLOCK__NS_PER_MS;
  redlock__queue *q;
  n->state = REDLOCK__NODE_UP;
  n->failures = 0;
  n->up_since_ns = now;
  n->errstr[0] = '\0';
  uv_timer_stop(&n->conn_timer);
  node_release_abandoned(n, now);
  /* Requests queued while connecting get their deadline from now on. */
  for (q = n->pending.next; q != &n->pending; q = q->next)
    REDLOCK__CONTAINER_OF(q, redlock__req, q)->deadline_ns = now + timeout;
  node_arm_deadline(n, now);
}

static void on_hs_info(redisAsyncContext *ac, void *reply, void *priv) {
  redlock__node *n = priv;
  const redisReply *r = reply;
  if (!hs_current(n, ac, r))
    return;
  if (r->type == REDIS_REPLY_STRING)
    parse_info(n, r->str);
  if (n->handshake_failed) {
    /* Not from inside a hiredis callback: defer the teardown. */
    uv_timer_start(&n->conn_timer, on_handshake_failed, 0, 0);
    return;
  }
  node_up(n);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  redlock__node *n = ac->data;
  if (ac != n->ac)
    return;
  if (status == REDIS_OK) {
    n->state = REDLOCK__NODE_HANDSHAKE;
    return;
  }
  /* hiredis frees the context after this callback, then runs the pending
   * callbacks with NULL (they read ac->c.err). */
  node_set_errstr(n, ac->c.errstr);
  n->ac = NULL;
  n->failures++;
  uv_timer_stop(&n->conn_timer);
  if (n->closing)
    node_finish_close(n);
  else
    node_schedule_reconnect(n);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  redlock__node *n = ac->data;
  if (ac != n->ac)
    return;  /* our own teardown */
  node_set_errstr(n, status == REDIS_OK ? "connection closed"
                                        : ac->c.errstr);
  n->ac = NULL;
  uv_timer_stop(&n->deadline_timer);
  uv_timer_stop(&n->conn_timer);
  if (n->closing) {
    node_finish_close(n);
  } else {
    n->failures++;
    node_schedule_reconnect(n);
  }
}

static void node_send_handshake(redlock__node *n) {
  redlock_client_t *c = n->client;
  const char *user = n->uri.username ? n->uri.username : c->username;
  const char *pass = n->uri.password ? n->uri.password : c->password;
  redisAsyncContext *ac = n->ac;

  if (pass != NULL) {
    if (user != NULL)
      redisAsyncCommand(ac, on_hs_reply, n, "AUTH %s %s", user, pass);
    else
      redisAsyncCommand(ac, on_hs_reply, n, "AUTH %s", pass);
  }
  if (n->uri.db != 0)
    redisAsyncCommand(ac, on_hs_reply, n, "SELECT %d", n->uri.db);
  redisAsyncCommand(ac, on_hs_release_sha, n, "SCRIPT LOAD %s",
                    release_script);
  redisAsyncCommand(ac, on_hs_extend_sha, n, "SCRIPT LOAD %s", extend_script);
  redisAsyncCommand(ac, on_hs_info, n, "INFO server");
}

static void node_connect(redlock__node *n) {
  redlock_client_t *c = n->client;
  redisAsyncContext *ac;
  redlock__queue *q;

  if (n->uri.path != NULL)
    ac = redisAsyncConnectUnix(n->uri.path);
  else
    ac = redisAsyncConnect(n->ip, n->uri.port);
  if (ac == NULL) {
    node_set_errstr(n, "out of memory");
    goto fail;
  }
  if (ac->err != 0) {
    node_set_errstr(n, ac->errstr);
    redisAsyncFree(ac);
    goto fail;
  }
  if (redlock__uv_attach(ac, c->loop, &c->flusher) != 0) {
    node_set_errstr(n, "cannot watch the socket");
    redisAsyncFree(ac);
    goto fail;
  }
  ac->data = n;
  n->ac = ac;
  n->handshake_failed = 0;
  n->release_sha[0] = '\0';
  n->extend_sha[0] = '\0';
  n->state = REDLOCK__NODE_CONNECTING;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  uv_timer_start(&n->conn_timer, on_conn_timeout,
                 (uint64_t)c->connect_timeout_ms, 0);
  node_send_handshake(n);
  /* Requests queued during resolution follow the handshake, in order. */
  for (q = n->pending.next; q != &n->pending; q = q->next) {
    redlock__req *req = REDLOCK__CONTAINER_OF(q, redlock__req, q);
    if (!req->written && node_write(n, req) != 0)
      break;   /* cannot happen on a fresh context */
  }
  return;

fail:
  n->failures++;
  n->state = REDLOCK__NODE_DOWN;
  node_fail_unwritten(n, REDLOCK_EIO);
  if (n->closing)
    node_finish_close(n);
  else
    node_schedule_reconnect(n);
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  redlock__node *n = REDLOCK__CONTAINER_OF(req, redlock__node, gai);
  n->gai_active = 0;
  if (status != 0 || res == NULL) {
    char why[160];
    snprintf(why, sizeof(why), "cannot resolve %s: %s", n->uri.host,
             status == UV_ECANCELED ? "canceled" : uv_strerror(status));
    node_set_errstr(n, why);
    if (res != NULL)
      uv_freeaddrinfo(res);
    n->failures++;
    n->state = REDLOCK__NODE_DOWN;
    node_fail_unwritten(n, n->closing ? REDLOCK_ECANCELED : REDLOCK_EIO);
    if (n->closing)
      node_finish_close(n);
    else
      node_schedule_reconnect(n);
    return;
  }
  if (res->ai_family == AF_INET6)
    uv_ip6_name((const struct sockaddr_in6 *)res->ai_addr, n->ip,
                sizeof(n->ip));
  else
    uv_ip4_name((const struct sockaddr_in *)res->ai_addr, n->ip,
                sizeof(n->ip));
  uv_freeaddrinfo(res);
  if (n->closing) {
    node_set_errstr(n, "client closed");
    n->state = REDLOCK__NODE_DOWN;
    node_fail_unwritten(n, REDLOCK_ECANCELED);
    node_finish_close(n);
    return;
  }
  node_connect(n);
}

static int is_ip_literal(const char *host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, buf) == 1 ||
         inet_pton(AF_INET6, host, buf) == 1;
}

void redlock__node_start(redlock__node *n) {
  struct addrinfo hints;
  if (n->closing)
    return;
  if (n->uri.path != NULL || is_ip_literal(n->uri.host)) {
    if (n->uri.path == NULL)
      redlock__strlcpy(n->ip, n->uri.host, sizeof(n->ip));
    node_connect(n);
    return;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  n->state = REDLOCK__NODE_RESOLVING;
  if (uv_getaddrinfo(n->client->loop, &n->gai, on_resolved, n->uri.host,
                     NULL, &hints) != 0) {
    node_set_errstr(n, "cannot start name resolution");
    n->failures++;
    n->state = REDLOCK__NODE_DOWN;
    node_schedule_reconnect(n);
    return;
  }
  n->gai_active = 1;
}

/* ---- life cycle ---------------------------------------------------------- */

void redlock__node_init(redlock_client_t *c, redlock__node *n, unsigned idx,
                        redlock__uri *uri) {
  memset(n, 0, sizeof(*n));
  n->client = c;
  n->index = idx;
  n->state = REDLOCK__NODE_DOWN;
  n->uri = *uri;   /* moved: the node owns its strings now */
  memset(uri, 0, sizeof(*uri));
  redlock__queue_init(&n->pending);
  uv_timer_init(c->loop, &n->deadline_timer);
  uv_timer_init(c->loop, &n->conn_timer);
  n->handles_open = 2;
}

static void on_node_timer_closed(uv_handle_t *h) {
  redlock__node *n = h->data;
  if (--n->handles_open == 0)
    redlock__client_node_closed(n->client);
}

static void node_finish_close(redlock__node *n) {
  unsigned i;
  if (n->state == REDLOCK__NODE_CLOSED)
    return;
  n->state = REDLOCK__NODE_CLOSED;
  for (i = 0; i < n->n_abandoned; i++)
    redlock__free(n->abandoned[i].key);
  n->n_abandoned = 0;
  n->deadline_timer.data = n;
  n->conn_timer.data = n;
  uv_close((uv_handle_t *)&n->deadline_timer, on_node_timer_closed);
  uv_close((uv_handle_t *)&n->conn_timer, on_node_timer_closed);
}

void redlock__node_close(redlock__node *n) {
  n->closing = 1;
  switch (n->state) {
    case REDLOCK__NODE_RESOLVING:
      /* on_resolved runs (canceled or not) and finishes the close. */
      uv_cancel((uv_req_t *)&n->gai);
      return;
    case REDLOCK__NODE_DOWN:
      uv_timer_stop(&n->conn_timer);
      node_finish_close(n);
      return;
    case REDLOCK__NODE_CONNECTING:
    case REDLOCK__NODE_HANDSHAKE:
    case REDLOCK__NODE_UP:
      /* Drain what is in flight (bounded by the deadlines), then free. */
      if (n->n_pending == 0)
        node_teardown(n, REDLOCK_ECANCELED, "client closed");
      return;
    case REDLOCK__NODE_CLOSED:
      return;
  }
}

void redlock__node_free(redlock__node *n) {
  redlock__uri_free(&n->uri);
}
