/* raw.c: the benchmark's raw mode, the lower bound the library is measured
 * against in the same process: plain SET key token NX PX ttl fanned out
 * to N masters, decided at quorum; release = EVALSHA compare-and-delete at
 * quorum. No retries, no validity, no deadlines, no per-node bookkeeping:
 * only the protocol work every Redlock must do. It uses the library's own
 * connection layer (lib/conn/conn.c: our sockets, hiredis's RESP reader), so
 * the ratio library/raw isolates what the Redlock logic costs. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "raw.h"

static const char release_lua[] =
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "return redis.call('del',KEYS[1]) else return 0 end";

#define RING 65536   /* ops in flight per connection */

typedef struct raw_op raw_op;

typedef struct raw_conn {
  redlock__conn conn;
  struct raw_client *c;
  raw_op **ring;     /* FIFO of ops waiting for a reply */
  size_t head, tail;
  int loaded;
} raw_conn;

struct raw_client {
  uv_loop_t *loop;
  redlock__sys sys;
  redlock__flusher flusher;
  size_t n;
  unsigned quorum;
  raw_conn conns[64];
  int ready;                  /* connections whose SCRIPT LOAD answered */
  char sha[41];
};

struct raw_op {
  raw_cb cb;
  void *arg;
  unsigned yes, no, replies, n, quorum;
  int decided;
};

static void op_reply(raw_op *op, const redlock__reply *r) {
  int yes = r != NULL &&
            ((r->type == REDLOCK__R_STATUS && r->len == 2) ||
             (r->type == REDLOCK__R_INTEGER && r->integer == 1));
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

static void on_connected(redlock__conn *conn) {
  (void)conn;
}

static void on_reply(redlock__conn *conn, const redlock__reply *r) {
  raw_conn *rc = conn->data;
  if (!rc->loaded) {
    if (r->type == REDLOCK__R_STRING && r->len == 40) {
      memcpy(rc->c->sha, r->str, 41);
      rc->c->ready++;
    }
    rc->loaded = 1;
    return;
  }
  if (rc->head == rc->tail)
    return;
  op_reply(rc->ring[rc->head++ % RING], r);
}

static void on_failed(redlock__conn *conn, int err, const char *msg) {
  raw_conn *rc = conn->data;
  (void)err;
  fprintf(stderr, "raw: connection failed: %s\n", msg);
  while (rc->head != rc->tail)
    op_reply(rc->ring[rc->head++ % RING], NULL);
}

static const redlock__conn_cbs raw_cbs = {on_connected, on_reply, on_failed,
                                          NULL};

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

static int fanout(raw_client *c, raw_op *op, int argc, const char **argv,
                  const size_t *len) {
  size_t i;
  for (i = 0; i < c->n; i++) {
    raw_conn *rc = &c->conns[i];
    if (rc->tail - rc->head == RING ||
        redlock__conn_send(&rc->conn, argc, argv, len) != 0)
      return -1;
    rc->ring[rc->tail++ % RING] = op;
  }
  return 0;
}

int raw_acquire(raw_client *c, const char *key, size_t keylen,
                const char *token, int64_t ttl_ms, raw_cb cb, void *arg) {
  raw_op *op = op_new(c, cb, arg);
  char ttl[24];
  const char *argv[6] = {"SET", key, token, "NX", "PX", ttl};
  size_t len[6] = {3, keylen, strlen(token), 2, 2, 0};
  if (op == NULL)
    return -1;
  len[5] = redlock__fmt_i64(ttl, ttl_ms);
  return fanout(c, op, 6, argv, len);
}

int raw_release(raw_client *c, const char *key, size_t keylen,
                const char *token, raw_cb cb, void *arg) {
  raw_op *op = op_new(c, cb, arg);
  const char *argv[5] = {"EVALSHA", c->sha, "1", key, token};
  size_t len[5] = {7, 40, 1, keylen, strlen(token)};
  if (op == NULL)
    return -1;
  return fanout(c, op, 5, argv, len);
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
  redlock__sys_uv_init(&c->sys, loop);
  redlock__flusher_init(&c->sys, &c->flusher);
  for (i = 0; i < n; i++) {
    raw_conn *rc = &c->conns[i];
    struct sockaddr_in sa;
    char host[64];
    char err[160];
    int port = 6379;
    const char *colon = strrchr(servers[i], ':');
    size_t hl = colon ? (size_t)(colon - servers[i]) : strlen(servers[i]);
    const char *argv[3] = {"SCRIPT", "LOAD", release_lua};
    size_t len[3] = {6, 4, sizeof(release_lua) - 1};
    if (hl >= sizeof(host))
      return -1;
    memcpy(host, servers[i], hl);
    host[hl] = '\0';
    if (colon)
      port = atoi(colon + 1);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    rc->c = c;
    rc->ring = calloc(RING, sizeof(*rc->ring));
    redlock__conn_init(&rc->conn, &c->sys, &c->flusher, &raw_cbs, rc);
    if (rc->ring == NULL || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        redlock__conn_open(&rc->conn, (struct sockaddr *)&sa, NULL, NULL,
                           NULL, err,
                           sizeof(err)) != 0) {
      fprintf(stderr, "raw: cannot connect to %s\n", servers[i]);
      return -1;
    }
    redlock__conn_send(&rc->conn, 3, argv, len);
  }
  *out = c;
  return 0;
}

int raw_client_ready(const raw_client *c) {
  return (size_t)c->ready == c->n;
}

static void on_flusher_closed(redlock__flusher *fl) {
  free(fl->data);
}

void raw_client_close(raw_client *c) {
  size_t i;
  for (i = 0; i < c->n; i++) {
    redlock__conn_free(&c->conns[i].conn);
    free(c->conns[i].ring);
  }
  c->flusher.data = c;
  redlock__flusher_close(&c->flusher, on_flusher_closed);
}
