/* tls.c: TLS for a connection, OpenSSL (1.1.1 and 3.x) through memory
 * BIOs.
 *
 * Owns: the client's SSL_CTX (trust store, client certificate, minimum
 * version TLS 1.2, verification on by default) and one SSL per
 * connection. The socket stays conn.c's: ciphertext read from it is fed
 * into the SSL's read BIO, ciphertext the SSL produces is drained from its
 * write BIO into the connection's network buffer. So the same poll
 * handle, write coalescing, MSG_NOSIGNAL and synchronous close apply to
 * TLS connections unchanged, and nothing here does I/O.
 *
 * Verification: the chain against the CA file/dir (default: the system
 * store), and the server's name or IP address against the certificate
 * (SSL_set1_host / X509_VERIFY_PARAM_set1_ip_asc); SNI carries the name.
 * Failures are reported with OpenSSL's reason text, e.g. "certificate
 * verify failed: unable to get local issuer certificate". */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "tls.h"

#ifndef REDLOCK_HAVE_TLS

int redlock__tls_available(void) {
  return 0;
}

int redlock__tls_ctx_new(const redlock__tls_opts *o, redlock__tls_ctx **out,
                         char *err, size_t errlen) {
  (void)o;
  *out = NULL;
  snprintf(err, errlen,
           "TLS (rediss://) is not supported by this build (rebuild with "
           "OpenSSL: meson -Dtls=enabled, package libssl-dev)");
  return REDLOCK_EINVAL;
}

void redlock__tls_ctx_free(redlock__tls_ctx *ctx) {
  (void)ctx;
}

int redlock__tls_new(redlock__tls_ctx *ctx, const char *host,
                     redlock__tls_session *resume, redlock__tls **out) {
  (void)ctx;
  (void)host;
  (void)resume;
  *out = NULL;
  return REDLOCK_EINVAL;
}

void redlock__tls_session_free(redlock__tls_session *s) {
  (void)s;
}

void redlock__tls_free(redlock__tls *t) {
  (void)t;
}

int redlock__tls_feed(redlock__tls *t, const char *p, size_t n) {
  (void)t;
  (void)p;
  (void)n;
  return REDLOCK__TLS_ERROR;
}

int redlock__tls_handshake(redlock__tls *t, char *err, size_t errlen) {
  (void)t;
  snprintf(err, errlen, "TLS not built");
  return REDLOCK__TLS_ERROR;
}

int redlock__tls_read(redlock__tls *t, char *out, size_t cap, size_t *n,
                      char *err, size_t errlen) {
  (void)t;
  (void)out;
  (void)cap;
  *n = 0;
  snprintf(err, errlen, "TLS not built");
  return REDLOCK__TLS_ERROR;
}

int redlock__tls_write(redlock__tls *t, const char *p, size_t n, char *err,
                       size_t errlen) {
  (void)t;
  (void)p;
  (void)n;
  snprintf(err, errlen, "TLS not built");
  return REDLOCK__TLS_ERROR;
}

int redlock__tls_drain(redlock__tls *t, redlock__buf *net) {
  (void)t;
  (void)net;
  return 0;
}

#else /* REDLOCK_HAVE_TLS */

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct redlock__tls_ctx {
  SSL_CTX *ctx;
  int insecure;
  char *server_name;
};

struct redlock__tls {
  SSL *ssl;
  BIO *rbio;   /* network -> SSL */
  BIO *wbio;   /* SSL -> network */
  redlock__tls_session *resume;   /* where new sessions go, or NULL */
  int failed;                     /* a TLS error happened */
};

/* A new session from the server (TLS 1.3: a ticket after the handshake;
 * TLS 1.2: the handshake's): keep it for the next connection. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
  redlock__tls *t = SSL_get_app_data(ssl);
  if (t == NULL || t->resume == NULL)
    return 0;
  if (t->resume->sess != NULL)
    SSL_SESSION_free(t->resume->sess);
  t->resume->sess = sess;
  return 1;   /* we own it now */
}

void redlock__tls_session_free(redlock__tls_session *s) {
  if (s == NULL || s->sess == NULL)
    return;
  SSL_SESSION_free(s->sess);
  s->sess = NULL;
}

int redlock__tls_available(void) {
  return 1;
}

/* The most useful text for the last failure: the verification result if
 * the handshake failed on it, else the first error on OpenSSL's queue. */
static void tls_error(SSL *ssl, const char *what, char *err, size_t errlen) {
  unsigned long e = ERR_get_error();
  long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (v != X509_V_OK) {
    snprintf(err, errlen, "TLS: certificate verify failed: %s",
             X509_verify_cert_error_string(v));
  } else if (e != 0) {
    const char *reason = ERR_reason_error_string(e);
    if (reason != NULL)
      snprintf(err, errlen, "TLS: %s: %s", what, reason);
    else
      snprintf(err, errlen, "TLS: %s: error %lu", what, e);
  } else {
    snprintf(err, errlen, "TLS: %s failed", what);
  }
  ERR_clear_error();
}

int redlock__tls_ctx_new(const redlock__tls_opts *o, redlock__tls_ctx **out,
                         char *err, size_t errlen) {
  redlock__tls_ctx *t;
  *out = NULL;
  t = redlock__calloc(1, sizeof(*t));
  if (t == NULL)
    return REDLOCK_ENOMEM;
  ERR_clear_error();
  t->ctx = SSL_CTX_new(TLS_client_method());
  if (t->ctx == NULL) {
    tls_error(NULL, "cannot create a context", err, errlen);
    redlock__free(t);
    return REDLOCK_ENOMEM;
  }
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(t->ctx, SSL_MODE_RELEASE_BUFFERS);
  /* Client-side session resumption: each node keeps its last session. */
  SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_CLIENT |
                                             SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(t->ctx, on_new_session);
  t->insecure = o->insecure;
  SSL_CTX_set_verify(t->ctx, o->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                     NULL);
  if (o->ca_file != NULL || o->ca_dir != NULL) {
    const char *path = o->ca_file != NULL ? o->ca_file : o->ca_dir;
    if (access(path, R_OK) != 0) {
      /* Say it as the system does, not as an OpenSSL error number. */
      snprintf(err, errlen, "cannot read the TLS CA %s: %s", path,
               strerror(errno));
      goto fail;
    }
    if (SSL_CTX_load_verify_locations(t->ctx, o->ca_file, o->ca_dir) != 1) {
      char why[200];
      tls_error(NULL, "CA", why, sizeof(why));
      snprintf(err, errlen, "cannot load the TLS CA %s: %s",
               o->ca_file != NULL ? o->ca_file : o->ca_dir, why);
      goto fail;
    }
  } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
    tls_error(NULL, "the system's CA store", err, errlen);
    goto fail;
  }
  if ((o->cert_file == NULL) != (o->key_file == NULL)) {
    snprintf(err, errlen,
             "a TLS client certificate needs both a cert and a key file");
    goto fail;
  }
  if (o->cert_file != NULL) {
    char why[200];
    if (o->key_password != NULL)
      SSL_CTX_set_default_passwd_cb_userdata(t->ctx, (void *)o->key_password);
    if (SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) != 1) {
      tls_error(NULL, "certificate", why, sizeof(why));
      snprintf(err, errlen, "cannot load the TLS certificate %s: %s",
               o->cert_file, why);
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file, SSL_FILETYPE_PEM) !=
            1 ||
        SSL_CTX_check_private_key(t->ctx) != 1) {
      tls_error(NULL, "key", why, sizeof(why));
      snprintf(err, errlen, "cannot use the TLS key %s: %s", o->key_file,
               why);
      goto fail;
    }
    /* The password is not needed any more: do not keep a pointer to the
     * caller's string. */
    SSL_CTX_set_default_passwd_cb_userdata(t->ctx, NULL);
  }
  if (o->server_name != NULL) {
    t->server_name = redlock__strdup(o->server_name);
    if (t->server_name == NULL)
      goto fail;
  }
  *out = t;
  return 0;

fail:
  SSL_CTX_free(t->ctx);
  redlock__free(t->server_name);
  redlock__free(t);
  return REDLOCK_EINVAL;
}

void redlock__tls_ctx_free(redlock__tls_ctx *t) {
  if (t == NULL)
    return;
  SSL_CTX_free(t->ctx);
  redlock__free(t->server_name);
  redlock__free(t);
}

static int is_ip(const char *s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

int redlock__tls_new(redlock__tls_ctx *ctx, const char *host,
                     redlock__tls_session *resume, redlock__tls **out) {
  redlock__tls *t = redlock__calloc(1, sizeof(*t));
  const char *name = ctx->server_name != NULL ? ctx->server_name : host;
  *out = NULL;
  if (t == NULL)
    return REDLOCK_ENOMEM;
  ERR_clear_error();
  t->ssl = SSL_new(ctx->ctx);
  t->rbio = BIO_new(BIO_s_mem());
  t->wbio = BIO_new(BIO_s_mem());
  if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
    BIO_free(t->rbio);
    BIO_free(t->wbio);
    SSL_free(t->ssl);
    redlock__free(t);
    ERR_clear_error();
    return REDLOCK_ENOMEM;
  }
  BIO_set_mem_eof_return(t->rbio, -1);   /* empty: "retry", not EOF */
  SSL_set_bio(t->ssl, t->rbio, t->wbio);  /* the SSL owns both now */
  SSL_set_connect_state(t->ssl);
  SSL_set_app_data(t->ssl, t);
  t->resume = resume;
  if (resume != NULL && resume->sess != NULL)
    SSL_set_session(t->ssl, resume->sess);   /* resume if the server can */
  if (name != NULL && !is_ip(name))
    SSL_set_tlsext_host_name(t->ssl, name);
  if (!ctx->insecure && name != NULL) {
    int ok = is_ip(name)
                 ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name)
                 : SSL_set1_host(t->ssl, name);
    if (ok != 1) {
      redlock__tls_free(t);
      ERR_clear_error();
      return REDLOCK_ENOMEM;
    }
  }
  *out = t;
  return 0;
}

void redlock__tls_free(redlock__tls *t) {
  if (t == NULL)
    return;
  /* We close connections without a close_notify (abortive, conn.c); mark
   * a healthy one as shut down anyway, or OpenSSL would make its session
   * non-resumable. */
  if (!t->failed)
    SSL_set_shutdown(t->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
  SSL_free(t->ssl);   /* and its BIOs */
  redlock__free(t);
}

int redlock__tls_feed(redlock__tls *t, const char *p, size_t n) {
  return BIO_write(t->rbio, p, (int)n) == (int)n ? REDLOCK__TLS_OK
                                                 : REDLOCK__TLS_ERROR;
}

int redlock__tls_handshake(redlock__tls *t, char *err, size_t errlen) {
  int rc;
  ERR_clear_error();
  rc = SSL_do_handshake(t->ssl);
  if (rc == 1)
    return REDLOCK__TLS_OK;
  switch (SSL_get_error(t->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return REDLOCK__TLS_WANT;
    default:
      t->failed = 1;
      tls_error(t->ssl, "handshake", err, errlen);
      return REDLOCK__TLS_ERROR;
  }
}

int redlock__tls_read(redlock__tls *t, char *out, size_t cap, size_t *n,
                      char *err, size_t errlen) {
  int rc;
  *n = 0;
  ERR_clear_error();
  rc = SSL_read(t->ssl, out, (int)cap);
  if (rc > 0) {
    *n = (size_t)rc;
    return REDLOCK__TLS_OK;
  }
  switch (SSL_get_error(t->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return REDLOCK__TLS_OK;
    case SSL_ERROR_ZERO_RETURN:
      t->failed = 1;
      snprintf(err, errlen, "TLS: connection closed by the server");
      return REDLOCK__TLS_ERROR;
    default:
      t->failed = 1;
      tls_error(t->ssl, "read", err, errlen);
      return REDLOCK__TLS_ERROR;
  }
}

int redlock__tls_write(redlock__tls *t, const char *p, size_t n, char *err,
                       size_t errlen) {
  ERR_clear_error();
  if (n == 0)
    return REDLOCK__TLS_OK;
  /* Memory BIOs never refuse: the whole buffer is taken. */
  if (SSL_write(t->ssl, p, (int)n) != (int)n) {
    t->failed = 1;
    tls_error(t->ssl, "write", err, errlen);
    return REDLOCK__TLS_ERROR;
  }
  return REDLOCK__TLS_OK;
}

int redlock__tls_drain(redlock__tls *t, redlock__buf *net) {
  size_t pending = BIO_ctrl_pending(t->wbio);
  int got;
  if (pending == 0)
    return 0;
  if (redlock__buf_reserve(net, pending) != 0)
    return REDLOCK_ENOMEM;
  got = BIO_read(t->wbio, net->data + net->len, (int)pending);
  if (got > 0)
    net->len += (size_t)got;
  return 0;
}

#endif /* REDLOCK_HAVE_TLS */
