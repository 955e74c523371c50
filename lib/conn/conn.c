/* conn.c: one connection to a Redis server, what every transport shares
 * (see conn.h).
 *
 * Owns: the output buffer, the RESP reader, the state and generation, the
 * flusher's list. Does not own: the socket, TLS or any I/O (the transport,
 * sys.h: conn_uv.c is the library's); what is sent or what replies mean
 * (node.c); timers and deadlines (node.c).
 *
 * Re-entrancy: every callback may close the connection (and even open it
 * again). After each callback we compare the generation counter and stop
 * touching the connection if it changed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "conn.h"

void redlock__conn_close(redlock__conn *c) {
  if (c->sys == NULL)
    return;   /* never set up (zeroed with its owner): nothing to close */
  c->sys->ops->conn_close(c);   /* socket, poll handle, TLS */
  if (c->dirty) {
    redlock__queue_remove(&c->dirty_link);
    c->dirty = 0;
  }
  c->state = REDLOCK__CONN_CLOSED;
  c->got_reply = 0;
  c->armed = 0;
  c->want_write = 0;
  c->gen++;
  redlock__buf_reset(&c->out);
  redlock__buf_reset(&c->net);
  if (c->reader.rd != NULL)
    redlock__reader_free(&c->reader);
}

void redlock__conn_fail(redlock__conn *c, int err, const char *msg) {
  char why[200];
  if (c->tls != NULL && !c->got_reply && c->state == REDLOCK__CONN_OPEN &&
      strncmp(msg, "TLS:", 4) != 0) {
    /* TLS 1.3: a server that wants a client certificate says so only
     * after our side of the handshake, often by just closing. */
    snprintf(why, sizeof(why),
             "TLS: closed after the handshake (%.60s): client certificate "
             "required?", msg);
  } else {
    redlock__strlcpy(why, msg, sizeof(why));
  }
  redlock__conn_close(c);
  c->cbs->failed(c, err, why);
}

/* ---- output -------------------------------------------------------------- */

static void conn_mark_dirty(redlock__conn *c) {
  redlock__flusher *fl = c->fl;
  if (c->dirty || c->flushing || c->want_write ||
      c->state != REDLOCK__CONN_OPEN)
    return;   /* already on its way, or it goes out once connected */
  c->dirty = 1;
  redlock__queue_insert_tail(&fl->dirty, &c->dirty_link);
  if (!fl->active) {
    fl->active = 1;
    fl->sys->ops->flusher_arm(fl);
  }
}

void redlock__flusher_run(redlock__flusher *fl) {
  fl->now_ns = 0;   /* read by the first flush callback that needs it */
  while (!redlock__queue_empty(&fl->dirty)) {
    redlock__conn *c =
        REDLOCK__CONTAINER_OF(fl->dirty.next, redlock__conn, dirty_link);
    redlock__queue_remove(&c->dirty_link);
    if (c->state == REDLOCK__CONN_OPEN && c->cbs->flush != NULL) {
      /* The owner may append a last command (it goes out now: the
       * connection stays marked meanwhile), or close it. */
      c->flushing = 1;
      c->cbs->flush(c);
      c->flushing = 0;
    }
    c->dirty = 0;
    if (c->state == REDLOCK__CONN_OPEN)
      c->sys->ops->conn_write(c);
  }
  fl->active = 0;
}

int redlock__conn_send(redlock__conn *c, int argc, const char *const *argv,
                       const size_t *lens) {
  if (redlock__resp_cmd(&c->out, argc, argv, lens) != 0)
    return REDLOCK_ENOMEM;
  conn_mark_dirty(c);
  return 0;
}

int redlock__conn_send_raw(redlock__conn *c, const char *p, size_t n) {
  if (redlock__buf_append(&c->out, p, n) != 0)
    return REDLOCK_ENOMEM;
  conn_mark_dirty(c);
  return 0;
}

/* ---- input --------------------------------------------------------------- */

int redlock__conn_input(redlock__conn *c, const char *p, size_t n) {
  unsigned gen = c->gen;
  if (redlock__reader_feed(&c->reader, p, n) != 0) {
    redlock__conn_fail(c, REDLOCK_ENOMEM, "out of memory");
    return -1;
  }
  for (;;) {
    const redlock__reply *r;
    const char *msg = "";
    int rc = redlock__reader_next(&c->reader, &r, &msg);
    if (rc == 0)
      return 0;
    if (rc < 0) {
      char why[160];
      snprintf(why, sizeof(why), "protocol error: %s", msg);
      redlock__conn_fail(c, rc, why);
      return -1;
    }
    c->got_reply = 1;
    c->cbs->reply(c, r);
    if (c->gen != gen)
      return -1;
  }
}

int redlock__conn_read_now(redlock__conn *c) {
  if (c->state != REDLOCK__CONN_OPEN)
    return -1;
  return c->sys->ops->conn_read(c);
}

/* ---- connect ------------------------------------------------------------- */

int redlock__conn_ready(redlock__conn *c) {
  unsigned gen = c->gen;
  c->state = REDLOCK__CONN_OPEN;
  c->want_write = 0;
  c->cbs->connected(c);
  return c->gen == gen ? 0 : -1;
}

/* ---- addresses ----------------------------------------------------------- */

int redlock__addr_literal(struct sockaddr_storage *sa, const char *host,
                          int port) {
  struct sockaddr_in *in4 = (struct sockaddr_in *)sa;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
  memset(sa, 0, sizeof(*sa));
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)port);
    return 1;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    return 1;
  }
  return 0;
}

void redlock__addr_resolved(struct sockaddr_storage *sa,
                            const struct addrinfo *ai, int port) {
  memset(sa, 0, sizeof(*sa));
  memcpy(sa, ai->ai_addr,
         ai->ai_addrlen < sizeof(*sa) ? ai->ai_addrlen : sizeof(*sa));
  if (ai->ai_family == AF_INET6)
    ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
}

void redlock__conn_init(redlock__conn *c, redlock__sys *sys,
                        redlock__flusher *fl, const redlock__conn_cbs *cbs,
                        void *data) {
  memset(c, 0, sizeof(*c));
  c->sys = sys;
  c->fl = fl;
  c->cbs = cbs;
  c->data = data;
  c->fd = -1;
  redlock__queue_init(&c->dirty_link);
}

int redlock__conn_open(redlock__conn *c, const struct sockaddr *sa,
                       const char *path, redlock__tls_ctx *tls,
                       const char *host, char *err, size_t errlen) {
  int rc;
  REDLOCK__ASSERT(c->state == REDLOCK__CONN_CLOSED);
  c->last_errno = 0;
  if (redlock__reader_init(&c->reader) != 0) {
    snprintf(err, errlen, "out of memory");
    return REDLOCK_ENOMEM;
  }
  rc = c->sys->ops->conn_open(c, sa, path, tls, host, err, errlen);
  if (rc != 0)
    redlock__reader_free(&c->reader);
  return rc;
}

void redlock__conn_free(redlock__conn *c) {
  if (c->sys == NULL)
    return;   /* never set up: nothing was allocated */
  redlock__conn_close(c);
  c->sys->ops->conn_free(c);
  redlock__buf_free(&c->out);
  redlock__buf_free(&c->net);
}

int redlock__flusher_init(redlock__sys *sys, redlock__flusher *fl) {
  redlock__queue_init(&fl->dirty);
  fl->sys = sys;
  fl->active = 0;
  fl->now_ns = 0;
  return sys->ops->flusher_init(sys, fl);
}

void redlock__flusher_close(redlock__flusher *fl,
                            void (*closed)(redlock__flusher *fl)) {
  fl->closed = closed;
  fl->sys->ops->flusher_close(fl);
}
