/* conn.h: one connection to a Redis server, ours on libuv (DESIGN 4.1).
 *
 * A non-blocking socket (TCP with TCP_NODELAY, or a unix socket) watched
 * by a uv_poll_t, an output buffer the layer above encodes commands into,
 * and the RESP reader (reply.h). Writes are coalesced: a connection with
 * new output is flushed once per loop turn, just before the loop blocks
 * (the flusher's uv_prepare), with send(..., MSG_NOSIGNAL): no SIGPIPE can
 * reach the process from here. With TLS (tls.c), OpenSSL works on memory
 * buffers between the socket and the codec: the same socket code serves
 * both. Read interest stays armed for the life of
 * the connection; write interest only while connecting or while the kernel
 * buffer is full, so steady traffic costs no epoll_ctl.
 *
 * Closing is synchronous: after redlock__conn_close() (or a failure, which
 * closes before it reports) no callback of this connection runs again. */
#ifndef REDLOCK_CONN_H
#define REDLOCK_CONN_H

#include <netdb.h>
#include <sys/socket.h>

#include <uv.h>

#include "common.h"
#include "reply.h"
#include "resp.h"
#include "tls.h"

/* Coalesces writes: connections with new output are flushed once per loop
 * turn from a uv_prepare callback, just before the loop blocks. */
typedef struct redlock__flusher {
  uv_prepare_t prepare;
  redlock__queue dirty;
  int active;
  redlock__ns now_ns;         /* 0, or read once in this flush by a
                                 flush callback (for the others) */
} redlock__flusher;

int redlock__flusher_init(uv_loop_t *loop, redlock__flusher *fl);
/* uv_close()s the prepare handle; `cb` runs when it is closed. */
void redlock__flusher_close(redlock__flusher *fl, uv_close_cb cb);

typedef struct redlock__conn redlock__conn;

typedef struct redlock__conn_cbs {
  /* The socket is connected: commands written now go out. */
  void (*connected)(redlock__conn *c);
  /* One complete reply, in order. Valid during the call only. */
  void (*reply)(redlock__conn *c, const redlock__reply *r);
  /* The connection failed and is already closed (err: REDLOCK_EIO,
   * EPROTO, ENOMEM; msg says why). */
  void (*failed)(redlock__conn *c, int err, const char *msg);
  /* May be NULL. The flusher is about to write this connection's output
   * (once per loop turn): the owner may append a last command. */
  void (*flush)(redlock__conn *c);
} redlock__conn_cbs;

typedef enum {
  REDLOCK__CONN_CLOSED = 0,
  REDLOCK__CONN_CONNECTING,
  REDLOCK__CONN_TLS,          /* TCP up, TLS handshake in progress */
  REDLOCK__CONN_OPEN
} redlock__conn_state;

struct redlock__sock;

struct redlock__conn {
  uv_loop_t *loop;
  redlock__flusher *fl;
  const redlock__conn_cbs *cbs;
  void *data;                 /* the owner's */
  struct redlock__sock *sock; /* the poll handle; NULL when closed */
  int fd;
  redlock__conn_state state;
  unsigned gen;               /* bumped by every close */
  int armed;                  /* events passed to uv_poll_start */
  int want_write;             /* waiting for POLLOUT */
  int dirty;                  /* on the flusher's list */
  int flushing;               /* inside the flush callback */
  int got_reply;              /* a reply came on this connection */
  int last_errno;             /* errno of the last socket failure, or 0 */
  redlock__queue dirty_link;
  redlock__buf out;           /* commands (plaintext) */
  redlock__buf net;           /* TLS: ciphertext waiting to go out */
  redlock__tls *tls;          /* NULL: plain TCP or unix socket */
  redlock__tls_session tls_session;   /* resumed by the next connect */
  redlock__reader reader;
};

void redlock__conn_init(redlock__conn *c, uv_loop_t *loop,
                        redlock__flusher *fl, const redlock__conn_cbs *cbs,
                        void *data);
/* *sa from host, an IP literal, and port: 1; 0 when host is a name (to
 * resolve) and not a literal. */
int redlock__addr_literal(struct sockaddr_storage *sa, const char *host,
                          int port);
/* *sa from a resolved address (getaddrinfo's: no port) and port. */
void redlock__addr_resolved(struct sockaddr_storage *sa,
                            const struct addrinfo *ai, int port);

/* Starts connecting to `sa` (TCP), or to the unix socket `path` when sa is
 * NULL; with `tls`, a TLS session to `host` on top (its handshake is part
 * of connecting). 0: `connected` or `failed` follows, never from inside
 * this call. REDLOCK_EIO or ENOMEM: nothing follows; err says why. */
int redlock__conn_open(redlock__conn *c, const struct sockaddr *sa,
                       const char *path, redlock__tls_ctx *tls,
                       const char *host, char *err, size_t errlen);
/* Appends one command to the output (flushed this loop turn). 0 or
 * REDLOCK_ENOMEM. Allowed while connecting: it goes out once connected. */
int redlock__conn_send(redlock__conn *c, int argc, const char *const *argv,
                       const size_t *lens);
/* Appends bytes that already hold complete commands. */
int redlock__conn_send_raw(redlock__conn *c, const char *p, size_t n);
/* Reads and delivers what the socket holds now (an open connection), as
 * if it had polled readable: a deadline checks that its reply is not
 * already there (the loop may have been blocked). 0, or -1 when the
 * connection is not open or was closed meanwhile (a failure, a callback). */
int redlock__conn_read_now(redlock__conn *c);
/* Closes now; no callback follows. Safe in any state and inside this
 * connection's own callbacks. */
void redlock__conn_close(redlock__conn *c);
/* Frees the buffers (after the last close). */
void redlock__conn_free(redlock__conn *c);

#endif
