/* conn.h: one connection to a Redis server (DESIGN 4.1).
 *
 * What every transport shares (conn.c): the output buffer the layer above
 * encodes commands into, the RESP reader (reply.h), the connection's
 * state and generation, and the flusher: a connection with new output is
 * written once per loop turn, just before the loop blocks. The transport
 * under it comes from the seam (sys.h): the library's (conn_uv.c) is a
 * non-blocking socket (TCP with TCP_NODELAY, or a unix socket) watched by
 * a uv_poll_t, with TLS on memory buffers between the socket and the
 * codec; the simulator's hands the bytes to simulated masters.
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
#include "sys.h"
#include "tls.h"

/* Coalesces writes: connections with new output are written once per
 * loop turn (redlock__flusher_run, which the transport calls just before
 * its loop blocks: libuv's from a uv_prepare callback). */
typedef struct redlock__flusher {
  uv_prepare_t prepare;       /* the libuv transport's */
  redlock__sys *sys;
  redlock__queue dirty;
  int active;                 /* the transport was asked for a run */
  redlock__ns now_ns;         /* 0, or read once in this flush by a
                                 flush callback (for the others) */
  void (*closed)(struct redlock__flusher *fl);
  void *data;                 /* the owner's */
} redlock__flusher;

int redlock__flusher_init(redlock__sys *sys, redlock__flusher *fl);
/* `closed` runs later, once the transport let go of the flusher. */
void redlock__flusher_close(redlock__flusher *fl,
                            void (*closed)(redlock__flusher *fl));
/* The transport's turn: every connection with new output is written. */
void redlock__flusher_run(redlock__flusher *fl);

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
  redlock__sys *sys;
  redlock__flusher *fl;
  const redlock__conn_cbs *cbs;
  void *data;                 /* the owner's */
  struct redlock__sock *sock; /* libuv transport: the poll handle */
  int fd;                     /* libuv transport: the socket, or -1 */
  redlock__conn_state state;
  unsigned gen;               /* bumped by every close */
  int armed;                  /* libuv: events passed to uv_poll_start */
  int want_write;             /* the transport does not take our bytes
                                 now (connecting, or its buffer full) */
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

void redlock__conn_init(redlock__conn *c, redlock__sys *sys,
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
 * connection's own callbacks, and on a zeroed connection that was never
 * set up (redlock__conn_init): then it does nothing. */
void redlock__conn_close(redlock__conn *c);
/* Frees the buffers (after the last close). */
void redlock__conn_free(redlock__conn *c);

/* ---- for transports (sys.h) ---------------------------------------------- */
/* Bytes that arrived (plaintext): every complete reply goes up. 0, or -1
 * when the connection was closed (by a failure or a callback). */
int redlock__conn_input(redlock__conn *c, const char *p, size_t n);
/* Connected: OPEN, and the owner is told. 0, or -1 when a callback closed
 * it (its generation moved). */
int redlock__conn_ready(redlock__conn *c);
/* Fails and closes the connection, then reports it (err: EIO, EPROTO,
 * ENOMEM). */
void redlock__conn_fail(redlock__conn *c, int err, const char *msg);

#endif
