/* sys.h: the engine's one seam to the outside world (DESIGN, "Where this
 * is going").
 *
 * The clock, timers, random bytes, name resolution and the transport
 * under redlock__conn: the engine takes each of them from a redlock__sys
 * and never from libuv or the OS (test/support/check-seam.sh). The library ships
 * one implementation (sys_uv.c: libuv, CLOCK_BOOTTIME, getrandom, real
 * sockets); the simulator brings its own (virtual time, seeded bytes,
 * simulated masters) and runs the same engine over it.
 *
 * Owns: the table and its inline callers. Does not own: any state of an
 * implementation (sys_uv.c, or the simulator's).
 *
 * Invariants:
 * 1. A timer's callback never runs from inside a call on that timer
 *    (start, stop, close), and never after stop or close returned.
 * 2. After close, `closed` runs once, later (never from inside the close
 *    call); only then may the timer's memory go.
 * 3. A resolution's callback runs exactly once, later (never from inside
 *    resolve); a cancel only makes it come sooner, with a status < 0. Its
 *    memory may go in the callback. */
#ifndef REDLOCK_SYS_H
#define REDLOCK_SYS_H

#include <netdb.h>
#include <sys/socket.h>

#include "common.h"

typedef struct redlock__sys redlock__sys;
typedef struct redlock__timer redlock__timer;
typedef struct redlock__resolve redlock__resolve;
struct redlock__conn;
struct redlock__flusher;
struct redlock__tls_ctx;

typedef void (*redlock__timer_cb)(redlock__timer *t);
/* `ai`: the addresses (freed by the implementation after the call), or
 * NULL with status < 0 (a libuv-style error code; `why` says it). */
typedef void (*redlock__resolve_cb)(redlock__resolve *r, int status,
                                    const struct addrinfo *ai,
                                    const char *why);

struct redlock__timer {
  uv_timer_t uv;             /* the libuv implementation's */
  redlock__sys *sys;
  redlock__timer_cb cb;
  void (*closed)(redlock__timer *t);
  void *data;                /* the owner's */
  uint64_t impl[3];          /* another implementation's */
};

struct redlock__resolve {
  uv_getaddrinfo_t uv;       /* the libuv implementation's */
  redlock__sys *sys;
  redlock__resolve_cb cb;
  void *data;                /* the owner's */
  uint64_t impl[2];          /* another implementation's */
};

typedef struct redlock__sys_ops {
  /* The validity clock: never steps back, counts a suspend (clock.c). */
  redlock__ns (*now_ns)(redlock__sys *s);
  /* n random bytes: 0, or REDLOCK_EIO. */
  int (*random)(redlock__sys *s, void *buf, size_t n);
  void (*timer_init)(redlock__sys *s, redlock__timer *t);
  /* (Re)starts t: cb in `ms`, then every `repeat` ms (0: once). */
  void (*timer_start)(redlock__timer *t, redlock__timer_cb cb, uint64_t ms,
                      uint64_t repeat);
  void (*timer_stop)(redlock__timer *t);
  void (*timer_close)(redlock__timer *t, void (*closed)(redlock__timer *t));
  int (*timer_closing)(const redlock__timer *t);
  /* Resolves host (TCP addresses of any family): 0 and cb follows, or a
   * libuv-style error code and nothing follows. */
  int (*resolve)(redlock__sys *s, redlock__resolve *r, const char *host,
                 redlock__resolve_cb cb);
  /* Asks for cb to come soon (status < 0 if not resolved yet). */
  void (*resolve_cancel)(redlock__resolve *r);

  /* The transport under redlock__conn (conn.h), which calls these. Open:
   * to `sa` (TCP), or the unix socket `path` when sa is NULL, with `tls`
   * a TLS session to `host` on top. 0: the transport reports
   * redlock__conn_ready or redlock__conn_fail later, never from inside
   * this call. Else EIO or ENOMEM with err set, and nothing follows. */
  int (*conn_open)(struct redlock__conn *c, const struct sockaddr *sa,
                   const char *path, struct redlock__tls_ctx *tls,
                   const char *host, char *err, size_t errlen);
  /* Writes c->out (an OPEN connection), as much as it takes now. 0, or
   * -1 when the connection failed (closed and reported). */
  int (*conn_write)(struct redlock__conn *c);
  /* Delivers what has arrived by now (an OPEN connection). 0, or -1 when
   * the connection was closed meanwhile. */
  int (*conn_read)(struct redlock__conn *c);
  /* The transport's part of a close: nothing of it runs after. */
  void (*conn_close)(struct redlock__conn *c);
  /* The transport's part of freeing (after the last close). */
  void (*conn_free)(struct redlock__conn *c);
  int (*flusher_init)(redlock__sys *s, struct redlock__flusher *fl);
  /* Calls redlock__flusher_run once, later in this loop turn. */
  void (*flusher_arm)(struct redlock__flusher *fl);
  /* fl->closed runs later. */
  void (*flusher_close)(struct redlock__flusher *fl);
} redlock__sys_ops;

struct redlock__sys {
  const redlock__sys_ops *ops;
  uv_loop_t *loop;           /* the libuv implementation's (NULL else) */
  void *arg;                 /* the implementation's */
};

/* The libuv implementation over `loop` (sys_uv.c). */
void redlock__sys_uv_init(redlock__sys *s, uv_loop_t *loop);

static inline redlock__ns redlock__sys_now(redlock__sys *s) {
  return s->ops->now_ns(s);
}
static inline int redlock__sys_random(redlock__sys *s, void *buf, size_t n) {
  return s->ops->random(s, buf, n);
}
static inline void redlock__timer_init(redlock__sys *s, redlock__timer *t) {
  s->ops->timer_init(s, t);
}
static inline void redlock__timer_start(redlock__timer *t,
                                        redlock__timer_cb cb, uint64_t ms,
                                        uint64_t repeat) {
  t->sys->ops->timer_start(t, cb, ms, repeat);
}
static inline void redlock__timer_stop(redlock__timer *t) {
  t->sys->ops->timer_stop(t);
}
static inline void redlock__timer_close(redlock__timer *t,
                                        void (*closed)(redlock__timer *t)) {
  t->sys->ops->timer_close(t, closed);
}
static inline int redlock__timer_closing(const redlock__timer *t) {
  return t->sys->ops->timer_closing(t);
}
static inline int redlock__sys_resolve(redlock__sys *s, redlock__resolve *r,
                                       const char *host,
                                       redlock__resolve_cb cb) {
  return s->ops->resolve(s, r, host, cb);
}
static inline void redlock__resolve_cancel(redlock__resolve *r) {
  r->sys->ops->resolve_cancel(r);
}

#endif
