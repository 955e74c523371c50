/* conn_uv.c: the library's transport under redlock__conn (sys.h, conn.h):
 * a non-blocking socket watched by a uv_poll_t, TLS through memory
 * buffers, and the flusher's uv_prepare.
 *
 * Owns: the socket, its uv_poll_t, the TLS session of a connection, the
 * flusher's prepare handle. Does not own: the buffers, the reader, the
 * state (conn.c).
 *
 * A close is abortive (RST, SO_LINGER 0): nothing written on a connection
 * we gave up can arrive at the server after we closed it.
 *
 * Lifetime: the uv_poll_t lives in a small separate block (redlock__sock)
 * because uv_close() completes on a later loop turn; the block's close
 * callback only frees the block and never touches the connection. Closing
 * detaches the block, stops polling (libuv removes the fd from epoll at
 * once, inside uv_close) and closes the fd: from then on nothing of this
 * connection can run, and the owner may reuse or free it. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "conn_uv.h"

#define READ_CHUNK 16384   /* bytes per recv() */

typedef struct redlock__sock {
  uv_poll_t poll;
  redlock__conn *conn;    /* NULL once the connection let go of it */
} redlock__sock;

static void on_poll(uv_poll_t *h, int status, int events);

static void conn_arm(redlock__conn *c) {
  int events = UV_READABLE | (c->want_write ? UV_WRITABLE : 0);
  if (c->sock == NULL || events == c->armed)
    return;
  c->armed = events;
  uv_poll_start(&c->sock->poll, events, on_poll);
}

static void on_sock_closed(uv_handle_t *h) {
  redlock__free(h->data);
}

void redlock__uvconn_close(redlock__conn *c) {
  if (c->sock != NULL) {
    redlock__sock *s = c->sock;
    s->conn = NULL;
    c->sock = NULL;
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
  }
  if (c->fd >= 0) {
    /* Abortive close (RST): the kernel drops what we wrote and was not
     * acknowledged yet instead of retransmitting it. A command given up
     * with its connection (a SET or PEXPIRE past its deadline) must not
     * reach the server later, after the commands of the next connection
     * (node.c invariant 1). */
    struct linger lg = {1, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(c->fd);
    c->fd = -1;
  }
  if (c->tls != NULL) {
    redlock__tls_free(c->tls);
    c->tls = NULL;
  }
}

static void conn_fail_errno(redlock__conn *c, int e, const char *what) {
  char why[160];
  c->last_errno = e;
  snprintf(why, sizeof(why), "%s: %s", what, strerror(e));
  redlock__conn_fail(c, REDLOCK_EIO, why);
}

/* ---- output -------------------------------------------------------------- */

/* Sends what b holds, as much as the socket takes. 0, or -1 when the
 * connection failed (closed and reported). */
static int sock_send(redlock__conn *c, redlock__buf *b) {
  while (redlock__buf_pending(b) > 0) {
    ssize_t n = send(c->fd, b->data + b->off, redlock__buf_pending(b),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      conn_fail_errno(c, errno, "write");
      return -1;
    }
    redlock__buf_consume(b, (size_t)n);
  }
  c->want_write = redlock__buf_pending(b) > 0;
  conn_arm(c);
  return 0;
}

/* Ciphertext the TLS session produced goes out. */
static int tls_flush(redlock__conn *c) {
  if (redlock__tls_drain(c->tls, &c->net) != 0) {
    redlock__conn_fail(c, REDLOCK_ENOMEM, "out of memory");
    return -1;
  }
  return sock_send(c, &c->net);
}

/* Writes what is pending. Returns 0, or -1 when the connection failed
 * (closed and reported). */
static int conn_write(redlock__conn *c) {
  char err[160];
  if (c->tls == NULL)
    return sock_send(c, &c->out);
  if (redlock__tls_write(c->tls, c->out.data + c->out.off,
                         redlock__buf_pending(&c->out), err,
                         sizeof(err)) != REDLOCK__TLS_OK) {
    redlock__conn_fail(c, REDLOCK_EIO, err);
    return -1;
  }
  redlock__buf_reset(&c->out);
  return tls_flush(c);
}

int redlock__uvconn_write(redlock__conn *c) {
  return conn_write(c);
}

static void on_prepare(uv_prepare_t *h) {
  redlock__flusher *fl = REDLOCK__CONTAINER_OF(h, redlock__flusher, prepare);
  redlock__flusher_run(fl);
  uv_prepare_stop(h);
}

int redlock__uvconn_flusher_init(redlock__sys *s, redlock__flusher *fl) {
  return uv_prepare_init(s->loop, &fl->prepare) == 0 ? 0 : REDLOCK_EIO;
}

void redlock__uvconn_flusher_arm(redlock__flusher *fl) {
  uv_prepare_start(&fl->prepare, on_prepare);
}

static void on_prepare_closed(uv_handle_t *h) {
  redlock__flusher *fl =
      REDLOCK__CONTAINER_OF((uv_prepare_t *)h, redlock__flusher, prepare);
  fl->closed(fl);
}

void redlock__uvconn_flusher_close(redlock__flusher *fl) {
  uv_close((uv_handle_t *)&fl->prepare, on_prepare_closed);
}

/* ---- input --------------------------------------------------------------- */

static void conn_connected(redlock__conn *c);

/* Ciphertext in: the handshake goes on, or records are decrypted and
 * delivered. 0, or -1 when the connection was closed. */
static int conn_tls_input(redlock__conn *c, const char *p, size_t n) {
  char plain[READ_CHUNK];
  char err[160];
  unsigned gen = c->gen;
  if (redlock__tls_feed(c->tls, p, n) != REDLOCK__TLS_OK) {
    redlock__conn_fail(c, REDLOCK_ENOMEM, "out of memory");
    return -1;
  }
  if (c->state == REDLOCK__CONN_TLS) {
    int rc = redlock__tls_handshake(c->tls, err, sizeof(err));
    if (rc == REDLOCK__TLS_ERROR) {
      redlock__conn_fail(c, REDLOCK_EIO, err);
      return -1;
    }
    if (tls_flush(c) != 0)
      return -1;
    if (rc == REDLOCK__TLS_WANT)
      return 0;
    conn_connected(c);
    if (c->gen != gen)
      return -1;
  }
  for (;;) {
    size_t got;
    if (redlock__tls_read(c->tls, plain, sizeof(plain), &got, err,
                          sizeof(err)) != REDLOCK__TLS_OK) {
      redlock__conn_fail(c, REDLOCK_EIO, err);
      return -1;
    }
    if (got == 0)
      break;
    if (redlock__conn_input(c, plain, got) != 0)
      return -1;
  }
  /* Reading may have produced records to send (e.g. a key update). */
  return tls_flush(c);
}

/* Reads what the socket has. 0, or -1 when the connection was closed. */
static int conn_read(redlock__conn *c) {
  char buf[READ_CHUNK];
  for (;;) {
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    int rc;
    if (n < 0 && (errno == EINTR))
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0) {
      char why[200];
      snprintf(why, sizeof(why), "%s%s",
               n == 0 ? "connection closed by the server" : "read: ",
               n == 0 ? "" : strerror(errno));
      redlock__conn_fail(c, REDLOCK_EIO, why);
      return -1;
    }
    rc = c->tls != NULL ? conn_tls_input(c, buf, (size_t)n)
                        : redlock__conn_input(c, buf, (size_t)n);
    if (rc != 0)
      return -1;
    if ((size_t)n < sizeof(buf))
      return 0;
  }
}

int redlock__uvconn_read(redlock__conn *c) {
  return conn_read(c);
}

/* ---- connect ------------------------------------------------------------- */

/* The connection is ready for commands: what was queued goes out. */
static void conn_connected(redlock__conn *c) {
  if (redlock__conn_ready(c) != 0)
    return;
  if (redlock__buf_pending(&c->out) > 0)
    conn_write(c);
  else
    conn_arm(c);
}

static void conn_check_connected(redlock__conn *c) {
  int err = 0;
  socklen_t len = sizeof(err);
  char why[160];
  if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err == EINPROGRESS || err == EALREADY)
    return;
  if (err != 0) {
    conn_fail_errno(c, err, "connect");
    return;
  }
  if (c->tls == NULL) {
    conn_connected(c);
    return;
  }
  /* TCP is up: the TLS handshake (inside the connect deadline). */
  c->state = REDLOCK__CONN_TLS;
  c->want_write = 0;
  if (redlock__tls_handshake(c->tls, why, sizeof(why)) ==
      REDLOCK__TLS_ERROR) {
    redlock__conn_fail(c, REDLOCK_EIO, why);
    return;
  }
  tls_flush(c);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  redlock__sock *s = h->data;
  redlock__conn *c = s->conn;
  unsigned gen;
  if (c == NULL)
    return;
  gen = c->gen;
  if (status < 0) {
    /* libuv stopped the handle (POLLERR). The socket tells why. */
    int err = 0;
    socklen_t len = sizeof(err);
    c->armed = 0;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err == 0)
      err = ECONNRESET;
    conn_fail_errno(c, err,
                    c->state == REDLOCK__CONN_CONNECTING ? "connect" : "read");
    return;
  }
  if (c->state == REDLOCK__CONN_CONNECTING) {
    if (events & (UV_WRITABLE | UV_READABLE))
      conn_check_connected(c);
    return;
  }
  if ((events & UV_READABLE) && conn_read(c) != 0)
    return;
  if (c->gen == gen && (events & UV_WRITABLE)) {
    if (c->tls != NULL && redlock__buf_pending(&c->net) > 0)
      sock_send(c, &c->net);
    else if (c->state == REDLOCK__CONN_OPEN)
      conn_write(c);
  }
}

int redlock__uvconn_open(redlock__conn *c, const struct sockaddr *sa,
                         const char *path, redlock__tls_ctx *tls,
                         const char *host, char *err, size_t errlen) {
  struct sockaddr_un un;
  socklen_t salen;
  int fd;
  int rc;
  redlock__sock *s;
  if (sa == NULL) {
    size_t plen = strlen(path);
    if (plen >= sizeof(un.sun_path)) {
      snprintf(err, errlen, "unix socket path too long");
      return REDLOCK_EIO;
    }
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    memcpy(un.sun_path, path, plen + 1);
    sa = (const struct sockaddr *)&un;
    salen = sizeof(un);
  } else {
    salen = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                      : sizeof(struct sockaddr_in);
  }
  s = redlock__calloc(1, sizeof(*s));
  if (s == NULL ||
      (tls != NULL &&
       redlock__tls_new(tls, host, &c->tls_session, &c->tls) != 0)) {
    redlock__free(s);
    snprintf(err, errlen, "out of memory");
    return REDLOCK_ENOMEM;
  }
  fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    goto fail;
  }
  if (sa->sa_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  do
    rc = connect(fd, sa, salen);
  while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    c->last_errno = errno;
    snprintf(err, errlen, "connect: %s", strerror(errno));
    close(fd);
    goto fail;
  }
  if (uv_poll_init_socket(c->sys->loop, &s->poll, fd) != 0) {
    snprintf(err, errlen, "cannot watch the socket");
    close(fd);
    goto fail;
  }
  s->poll.data = s;
  s->conn = c;
  c->sock = s;
  c->fd = fd;
  c->state = REDLOCK__CONN_CONNECTING;
  /* Connected or not, the outcome is reported from the poll callback
   * (POLLOUT), never from inside this call. */
  c->want_write = 1;
  conn_arm(c);
  return 0;

fail:
  redlock__free(s);
  redlock__tls_free(c->tls);
  c->tls = NULL;
  return REDLOCK_EIO;
}

void redlock__uvconn_free(redlock__conn *c) {
  redlock__tls_session_free(&c->tls_session);
}
