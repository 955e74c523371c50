/* tls.h: TLS for a connection, OpenSSL through memory BIOs (see tls.c).
 * Built with REDLOCK_HAVE_TLS (meson -Dtls); without it every call fails
 * with a message saying so. No OpenSSL type appears here. */
#ifndef REDLOCK_TLS_H
#define REDLOCK_TLS_H

#include <stddef.h>

#include "resp.h"

typedef struct redlock__tls_opts {
  const char *ca_file;       /* NULL: the system store (unless ca_dir) */
  const char *ca_dir;
  const char *cert_file;     /* client certificate, mutual TLS */
  const char *key_file;
  const char *key_password;
  const char *server_name;   /* overrides every master's host name */
  int insecure;              /* no verification at all */
} redlock__tls_opts;

typedef struct redlock__tls_ctx redlock__tls_ctx;
typedef struct redlock__tls redlock__tls;

/* Where a connection keeps the session of its last TLS handshake with one
 * master, to resume it on the next connect (a shorter handshake: no
 * certificate exchange). Owned by the node; zero-initialized. */
typedef struct redlock__tls_session {
  void *sess;   /* SSL_SESSION* */
} redlock__tls_session;

void redlock__tls_session_free(redlock__tls_session *s);

/* 1 when the library was built with TLS. */
int redlock__tls_available(void);
/* A context for a client's TLS masters. 0, or EINVAL with a message in
 * err (a file that cannot be read, a key that does not match). */
int redlock__tls_ctx_new(const redlock__tls_opts *o, redlock__tls_ctx **out,
                         char *err, size_t errlen);
void redlock__tls_ctx_free(redlock__tls_ctx *ctx);

/* One TLS session over one connection to `host` (verified against the
 * certificate's names or IP addresses, and sent as SNI when it is a
 * name), resuming `resume` when it holds a session (may be NULL). 0 or
 * ENOMEM. */
int redlock__tls_new(redlock__tls_ctx *ctx, const char *host,
                     redlock__tls_session *resume, redlock__tls **out);
void redlock__tls_free(redlock__tls *t);

/* Results of the calls below. */
enum {
  REDLOCK__TLS_OK = 0,       /* done (handshake finished / data moved) */
  REDLOCK__TLS_WANT = 1,     /* needs more bytes from the network */
  REDLOCK__TLS_ERROR = -1    /* failed: err says why */
};

/* Bytes from the network. */
int redlock__tls_feed(redlock__tls *t, const char *p, size_t n);
/* Drives the handshake: OK when done, WANT, or ERROR. */
int redlock__tls_handshake(redlock__tls *t, char *err, size_t errlen);
/* Decrypts what it can into out (up to cap); *n bytes. OK (maybe 0
 * bytes: more input needed) or ERROR (including the peer's close). */
int redlock__tls_read(redlock__tls *t, char *out, size_t cap, size_t *n,
                      char *err, size_t errlen);
/* Encrypts n bytes of plaintext (all of them). OK or ERROR. */
int redlock__tls_write(redlock__tls *t, const char *p, size_t n,
                       char *err, size_t errlen);
/* Moves the ciphertext waiting to go out into `net`. 0 or ENOMEM. */
int redlock__tls_drain(redlock__tls *t, redlock__buf *net);

#endif
