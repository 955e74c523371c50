/* sys_uv.c: the library's implementation of the seam (sys.h) on libuv.
 *
 * Owns: nothing but the table; every state lives in the caller's
 * redlock__timer / redlock__resolve (their `uv` member).
 *
 * The clock is redlock__clock_ns() (clock.c: CLOCK_BOOTTIME); random bytes
 * come from uv_random (getrandom(2)); timers are uv_timer_t and run on
 * the loop's time, as they did before the seam; the transport is
 * conn_uv.c's. */
#include <string.h>

#include "conn_uv.h"
#include "sys.h"

static redlock__ns uv_now_ns(redlock__sys *s) {
  (void)s;
  return redlock__clock_ns();
}

static int uv_random_bytes(redlock__sys *s, void *buf, size_t n) {
  (void)s;
  return uv_random(NULL, NULL, buf, n, 0, NULL) == 0 ? 0 : REDLOCK_EIO;
}

static void on_uv_timer(uv_timer_t *h) {
  redlock__timer *t = REDLOCK__CONTAINER_OF(h, redlock__timer, uv);
  t->cb(t);
}

static void uv_timer_init_(redlock__sys *s, redlock__timer *t) {
  t->sys = s;
  t->cb = NULL;
  t->closed = NULL;
  uv_timer_init(s->loop, &t->uv);
}

static void uv_timer_start_(redlock__timer *t, redlock__timer_cb cb,
                            uint64_t ms, uint64_t repeat) {
  t->cb = cb;
  uv_timer_start(&t->uv, on_uv_timer, ms, repeat);
}

static void uv_timer_stop_(redlock__timer *t) {
  uv_timer_stop(&t->uv);
}

static void on_uv_timer_closed(uv_handle_t *h) {
  redlock__timer *t = REDLOCK__CONTAINER_OF((uv_timer_t *)h, redlock__timer,
                                            uv);
  t->closed(t);
}

static void uv_timer_close_(redlock__timer *t,
                            void (*closed)(redlock__timer *t)) {
  t->closed = closed;
  uv_close((uv_handle_t *)&t->uv, on_uv_timer_closed);
}

static int uv_timer_closing_(const redlock__timer *t) {
  return uv_is_closing((const uv_handle_t *)&t->uv);
}

static void on_uv_resolved(uv_getaddrinfo_t *req, int status,
                           struct addrinfo *res) {
  redlock__resolve *r = REDLOCK__CONTAINER_OF(req, redlock__resolve, uv);
  const char *why = NULL;
  if (status == 0 && res == NULL)
    status = UV_EAI_NONAME;
  if (status != 0)
    why = status == UV_ECANCELED ? "canceled" : uv_strerror(status);
  r->cb(r, status, status == 0 ? res : NULL, why);   /* may free r */
  if (res != NULL)
    uv_freeaddrinfo(res);
}

static int uv_resolve_(redlock__sys *s, redlock__resolve *r,
                       const char *host, redlock__resolve_cb cb) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  r->sys = s;
  r->cb = cb;
  return uv_getaddrinfo(s->loop, &r->uv, on_uv_resolved, host, NULL,
                        &hints);
}

static void uv_resolve_cancel_(redlock__resolve *r) {
  uv_cancel((uv_req_t *)&r->uv);
}

static const redlock__sys_ops uv_ops = {
    uv_now_ns,
    uv_random_bytes,
    uv_timer_init_,
    uv_timer_start_,
    uv_timer_stop_,
    uv_timer_close_,
    uv_timer_closing_,
    uv_resolve_,
    uv_resolve_cancel_,
    redlock__uvconn_open,
    redlock__uvconn_write,
    redlock__uvconn_read,
    redlock__uvconn_close,
    redlock__uvconn_free,
    redlock__uvconn_flusher_init,
    redlock__uvconn_flusher_arm,
    redlock__uvconn_flusher_close,
};

void redlock__sys_uv_init(redlock__sys *s, uv_loop_t *loop) {
  s->ops = &uv_ops;
  s->loop = loop;
  s->arg = NULL;
}
