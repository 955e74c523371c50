/* raw.c: the benchmark's raw mode, the lower bound the library is measured
 * against in the same process: plain SET key token NX PX ttl fanned out
 * to N masters on hiredis, decided at quorum; release = EVALSHA
 * compare-and-delete at quorum. No retries, no validity, no deadlines, no
 * per-node bookkeeping: only the protocol work every Redlock must do. It
 * uses the library's own hiredis/libuv adapter (lib/uvadapter.c), so the
 * ratio library/raw isolates what the Redlock logic costs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>
#include <async.h>

#include "common.h"
#include "raw.h"

static const char release_lua[] =
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "return redis.call('del',KEYS[1]) else return 0 end";

struct raw_client {
  uv_loop_t *loop;
  redlock__flusher flusher;
  size_t n;
  unsigned quorum;
  redisAsyncContext *ac[64];
  int ready;                  /* contexts whose SCRIPT LOAD answered */
  char sha[41];
  int closing;
};

typedef struct raw_op {
  raw_cb cb;
  void *arg;
  unsigned yes, no, replies, n, quorum;
  int decided;
} raw_op;

static void op_reply(redisAsyncContext *ac, void *reply, void *priv) {
  raw_op *op = priv;
  redisReply *r = reply;
  int yes = r != NULL &&
            ((r->type == REDIS_REPLY_STATUS && r->len == 2) ||
             (r->type == REDIS_REPLY_INTEGER && r->integer == 1));
  (void)ac;
  op->replies++;
  if (yes)
    op->yes++;
  else
    op->no++;
  if (!op->decided) {
    if (op->yes >= op->quorum) {
      op->decided = 1;
      op->cb(op->arg, 1);
    } else if (op->no > op->n - op->quorum) {
      op->decided = 1;
      op->cb(op->arg, 0);
    }
  }
  if (op->replies == op->n)
    free(op);   /* late replies are consumed first */
}

static raw_op *op_new(raw_client *c, raw_cb cb, void *arg) {
  raw_op *op = calloc(1, sizeof(*op));
  if (op == NULL)
    return NULL;
  op->cb = cb;
  op->arg = arg;
  op->n = (unsigned)c->n;
  op->quorum = c->quorum;
  return op;
}

int raw_acquire(raw_client *c, const char *key, size_t keylen,
                const char *token, int64_t ttl_ms, raw_cb cb, void *arg) {
  raw_op *op = op_new(c, cb, arg);
  char ttl[24];
  const char *argv[6] = {"SET", key, token, "NX", "PX", ttl};
  size_t len[6] = {3, keylen, strlen(token), 2, 2, 0};
  size_t i;
  if (op == NULL)
    return -1;
  len[5] = (size_t)snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_ms);
  for (i = 0; i < c->n; i++)
    redisAsyncCommandArgv(c->ac[i], op_reply, op, 6, argv, len);
  return 0;
}

int raw_release(raw_client *c, const char *key, size_t keylen,
                const char *token, raw_cb cb, void *arg) {
  raw_op *op = op_new(c, cb, arg);
  const char *argv[5] = {"EVALSHA", c->sha, "1", key, token};
  size_t len[5] = {7, 40, 1, keylen, strlen(token)};
  size_t i;
  if (op == NULL)
    return -1;
  for (i = 0; i < c->n; i++)
    redisAsyncCommandArgv(c->ac[i], op_reply, op, 5, argv, len);
  return 0;
}

static void on_loaded(redisAsyncContext *ac, void *reply, void *priv) {
  raw_client *c = priv;
  redisReply *r = reply;
  (void)ac;
  if (r != NULL && r->type == REDIS_REPLY_STRING && r->len == 40) {
    memcpy(c->sha, r->str, 41);
    c->ready++;
  }
}

int raw_client_new(uv_loop_t *loop, const char *const *servers, size_t n,
                   raw_client **out) {
  raw_client *c;
  size_t i;
  if (n == 0 || n > 64)
    return -1;
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    return -1;
  c->loop = loop;
  c->n = n;
  c->quorum = (unsigned)(n / 2 + 1);
  redlock__flusher_init(loop, &c->flusher);
  for (i = 0; i < n; i++) {
    char host[64];
    int port = 6379;
    const char *colon = strrchr(servers[i], ':');
    size_t hl = colon ? (size_t)(colon - servers[i]) : strlen(servers[i]);
    if (hl >= sizeof(host))
      return -1;
    memcpy(host, servers[i], hl);
    host[hl] = '\0';
    if (colon)
      port = atoi(colon + 1);
    c->ac[i] = redisAsyncConnect(host, port);
    if (c->ac[i] == NULL || c->ac[i]->err ||
        redlock__uv_attach(c->ac[i], loop, &c->flusher) != 0) {
      fprintf(stderr, "raw: cannot connect to %s\n", servers[i]);
      return -1;
    }
    redisAsyncCommand(c->ac[i], on_loaded, c, "SCRIPT LOAD %s", release_lua);
  }
  *out = c;
  return 0;
}

int raw_client_ready(const raw_client *c) {
  return (size_t)c->ready == c->n;
}

static void on_flusher_closed(uv_handle_t *h) {
  free(h->data);
}

void raw_client_close(raw_client *c) {
  size_t i;
  for (i = 0; i < c->n; i++)
    redisAsyncFree(c->ac[i]);
  c->flusher.prepare.data = c;
  redlock__flusher_close(&c->flusher, on_flusher_closed);
}
