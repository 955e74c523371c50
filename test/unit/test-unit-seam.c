/* test-unit-seam: the whole engine runs over a seam of ours (lib/sys/sys.h),
 * with no libuv loop, no clock and no socket: virtual time, seeded random
 * bytes, and a transport whose every connection is refused.
 *
 * A client of three masters tries to acquire with a 5 s wait. Each
 * connection is refused 1 ms (virtual) after it is opened, so every
 * attempt fails; the engine backs off, retries and gives up at its wait
 * deadline: on the virtual clock, 5 s after the call, in a fraction of a
 * real second. Then it closes. Checked:
 *  - the acquisition ends ETIMEDOUT at 5 s of virtual time (the deadline
 *    came from our timers, not the OS clock);
 *  - connections were attempted on every master, again after backoffs
 *    (our transport, not sockets: the process opened no descriptor);
 *  - the close completes through our timers and transport;
 *  - the same seed gives the same run (the trace of events hashes the
 *    same), another seed a different one (the tokens and jitter come from
 *    our random bytes).
 * A file of the engine that bypassed the seam (a libuv timer, a socket,
 * the OS clock) would leave this run hanging or failing: there is no
 * libuv loop here to run its callbacks. test/support/check-seam.sh checks the
 * same by reading the sources. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <string.h>

#include "client.h"
#include "conn.h"
#include "harness.h"
#include "sys.h"

/* ---- the simulated world ------------------------------------------------- */

#define MAX_TIMERS 256
#define MAX_EVENTS 256

typedef struct ev {
  redlock__ns at;
  int kind;                  /* 1: fail a connection, 2: a timer closed,
                                3: a flusher closed */
  redlock__conn *conn;
  unsigned gen;
  redlock__timer *timer;
  redlock__flusher *fl;
} ev;

static struct {
  redlock__ns now;
  uint64_t rng;
  uint64_t trace;            /* FNV-1a of what happened, in order */
  redlock__timer *timers[MAX_TIMERS];
  unsigned n_timers;
  ev events[MAX_EVENTS];
  unsigned n_events;
  redlock__flusher *flusher;
  int flush_armed;
  unsigned opens[8];         /* connections opened, per port */
  unsigned open_total;
} w;

static void trace(uint64_t v) {
  int i;
  for (i = 0; i < 8; i++) {
    w.trace ^= (v >> (8 * i)) & 0xff;
    w.trace *= 1099511628211ULL;
  }
}

static redlock__ns sim_now(redlock__sys *s) {
  (void)s;
  return w.now;
}

static int sim_random(redlock__sys *s, void *buf, size_t n) {
  unsigned char *p = buf;
  (void)s;
  while (n-- > 0) {
    w.rng ^= w.rng << 13;
    w.rng ^= w.rng >> 7;
    w.rng ^= w.rng << 17;
    *p++ = (unsigned char)w.rng;
  }
  return 0;
}

/* A timer: impl[0] its due, impl[1] its repeat (ms), impl[2] armed. */
static void sim_timer_init(redlock__sys *s, redlock__timer *t) {
  ASSERT(w.n_timers < MAX_TIMERS);
  memset(t->impl, 0, sizeof(t->impl));
  t->sys = s;
  t->cb = NULL;
  w.timers[w.n_timers++] = t;
}

static void sim_timer_start(redlock__timer *t, redlock__timer_cb cb,
                            uint64_t ms, uint64_t repeat) {
  t->cb = cb;
  t->impl[0] = w.now + ms * 1000000ULL;
  t->impl[1] = repeat;
  t->impl[2] = 1;
}

static void sim_timer_stop(redlock__timer *t) {
  t->impl[2] = 0;
}

static void push(ev e) {
  ASSERT(w.n_events < MAX_EVENTS);
  w.events[w.n_events++] = e;
}

static void sim_timer_close(redlock__timer *t,
                            void (*closed)(redlock__timer *t)) {
  unsigned i;
  ev e;
  t->impl[2] = 0;
  t->closed = closed;
  for (i = 0; i < w.n_timers; i++)
    if (w.timers[i] == t) {
      w.timers[i] = w.timers[--w.n_timers];
      break;
    }
  memset(&e, 0, sizeof(e));
  e.at = w.now;
  e.kind = 2;
  e.timer = t;
  push(e);
}

static int sim_timer_closing(const redlock__timer *t) {
  unsigned i;
  for (i = 0; i < w.n_timers; i++)
    if (w.timers[i] == t)
      return 0;
  return 1;
}

static int sim_resolve(redlock__sys *s, redlock__resolve *r,
                       const char *host, redlock__resolve_cb cb) {
  (void)s;
  (void)r;
  (void)host;
  (void)cb;
  TEST_FAIL("the masters are IP literals: nothing to resolve");
  return -1;
}

static void sim_resolve_cancel(redlock__resolve *r) {
  (void)r;
}

static int port_of(const struct sockaddr *sa) {
  const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
  return ntohs(in->sin_port);
}

/* Every connection is refused, 1 ms after it is opened. */
static int sim_conn_open(redlock__conn *c, const struct sockaddr *sa,
                         const char *path, redlock__tls_ctx *tls,
                         const char *host, char *err, size_t errlen) {
  ev e;
  int port;
  (void)path;
  (void)tls;
  (void)host;
  (void)err;
  (void)errlen;
  ASSERT_NOT_NULL(sa);
  port = port_of(sa);
  ASSERT(port >= 1 && port <= 3);
  w.opens[port]++;
  w.open_total++;
  trace(((uint64_t)port << 56) ^ w.now);
  c->state = REDLOCK__CONN_CONNECTING;
  c->want_write = 1;
  memset(&e, 0, sizeof(e));
  e.at = w.now + 1000000ULL;
  e.kind = 1;
  e.conn = c;
  e.gen = c->gen;
  push(e);
  return 0;
}

static int sim_conn_write(redlock__conn *c) {
  redlock__buf_reset(&c->out);   /* never OPEN here */
  return 0;
}

static int sim_conn_read(redlock__conn *c) {
  (void)c;
  return 0;
}

static void sim_conn_close(redlock__conn *c) {
  (void)c;
}

static void sim_conn_free(redlock__conn *c) {
  (void)c;
}

static int sim_flusher_init(redlock__sys *s, redlock__flusher *fl) {
  (void)s;
  w.flusher = fl;
  return 0;
}

static void sim_flusher_arm(redlock__flusher *fl) {
  (void)fl;
  w.flush_armed = 1;
}

static void sim_flusher_close(redlock__flusher *fl) {
  ev e;
  memset(&e, 0, sizeof(e));
  e.at = w.now;
  e.kind = 3;
  e.fl = fl;
  push(e);
}

static const redlock__sys_ops sim_ops = {
    sim_now,          sim_random,       sim_timer_init,   sim_timer_start,
    sim_timer_stop,   sim_timer_close,  sim_timer_closing, sim_resolve,
    sim_resolve_cancel, sim_conn_open,  sim_conn_write,   sim_conn_read,
    sim_conn_close,   sim_conn_free,    sim_flusher_init, sim_flusher_arm,
    sim_flusher_close,
};

/* One step: the flusher's turn, then the earliest due thing (an event
 * before a timer at the same time, timers in the order of their dues).
 * 0 when nothing is left to do. */
static int step(void) {
  redlock__timer *t = NULL;
  ev *e = NULL;
  unsigned i;
  if (w.flush_armed) {
    w.flush_armed = 0;
    trace(0xf1);
    redlock__flusher_run(w.flusher);
    return 1;
  }
  for (i = 0; i < w.n_events; i++)
    if (e == NULL || w.events[i].at < e->at)
      e = &w.events[i];
  for (i = 0; i < w.n_timers; i++)
    if (w.timers[i]->impl[2] && (t == NULL || w.timers[i]->impl[0] <
                                                  t->impl[0]))
      t = w.timers[i];
  if (e != NULL && (t == NULL || e->at <= t->impl[0])) {
    ev x = *e;
    *e = w.events[--w.n_events];
    if (x.at > w.now)
      w.now = x.at;
    trace(((uint64_t)x.kind << 60) ^ w.now);
    if (x.kind == 1 && x.conn->gen == x.gen &&
        x.conn->state == REDLOCK__CONN_CONNECTING) {
      x.conn->last_errno = ECONNREFUSED;
      redlock__conn_fail(x.conn, REDLOCK_EIO,
                         "connect: Connection refused (simulated)");
    } else if (x.kind == 2) {
      x.timer->closed(x.timer);
    } else if (x.kind == 3) {
      x.fl->closed(x.fl);
    }
    return 1;
  }
  if (t == NULL)
    return 0;
  if (t->impl[0] > w.now)
    w.now = t->impl[0];
  if (t->impl[1] > 0)
    t->impl[0] = w.now + t->impl[1] * 1000000ULL;
  else
    t->impl[2] = 0;
  trace(0x7000000000000000ULL ^ w.now);
  t->cb(t);
  return 1;
}

/* ---- the run ------------------------------------------------------------- */

static int acquired = 1000, closed;
static redlock__ns acquired_at;

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *r, void *arg) {
  (void)l;
  (void)r;
  (void)arg;
  acquired = status;
  acquired_at = w.now;
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  (void)arg;
  closed = 1;
}

static unsigned open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  unsigned n = 0;
  if (d == NULL)
    return 0;
  while (readdir(d) != NULL)
    n++;
  closedir(d);
  return n;
}

static uint64_t run(uint64_t seed) {
  static const char *servers[] = {"127.0.0.1:1", "127.0.0.1:2",
                                  "127.0.0.1:3"};
  redlock__sys sys;
  redlock_client_config cfg;
  redlock_acquire_opts ao;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock__ns start;
  unsigned steps = 0, fds = open_fds(), i;
  memset(&w, 0, sizeof(w));
  w.now = 1000000000ULL * 1000;   /* any start */
  w.rng = seed;
  w.trace = 14695981039346656037ULL;
  acquired = 1000;
  closed = 0;
  sys.ops = &sim_ops;
  sys.loop = NULL;
  sys.arg = NULL;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 3;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(redlock__client_new_sys(NULL, &sys, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "k", 1, &l), 0);
  memset(&ao, 0, sizeof(ao));
  ao.wait_ms = 5000;
  start = w.now;
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &ao, on_acquired, NULL), 0);
  while (acquired == 1000 && steps < 1000000 && step())
    steps++;
  ASSERT_EQ(acquired, REDLOCK_ETIMEDOUT);
  fprintf(stderr, "seed %llu: the acquisition ended %s at %.3f s of "
          "virtual time, after %u steps and %u connections (", 
          (unsigned long long)seed, redlock_strerror(acquired),
          (double)(acquired_at - start) / 1e9, steps, w.open_total);
  for (i = 1; i <= 3; i++)
    fprintf(stderr, "%s%u", i > 1 ? ", " : "", w.opens[i]);
  fprintf(stderr, " per master)\n");
  /* The deadline is ours: 5 s, and at most a command timeout after it. */
  ASSERT_LE((int64_t)(start + 5000000000ULL), (int64_t)acquired_at);
  ASSERT_LE((int64_t)acquired_at, (int64_t)(start + 5600000000ULL));
  for (i = 1; i <= 3; i++)
    ASSERT(w.opens[i] >= 3);   /* and again, after backoffs */
  ASSERT_EQ(open_fds(), fds);  /* no socket, no timer fd, nothing */
  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_client_close(c, on_closed, NULL), 0);
  while (!closed && steps < 2000000 && step())
    steps++;
  ASSERT(closed);
  ASSERT_EQ(w.n_timers, 0);    /* every timer closed */
  return w.trace;
}

int main(void) {
  uint64_t a = run(42), b = run(42), x = run(7);
  fprintf(stderr, "trace hashes: seed 42 %016llx, again %016llx, seed 7 "
          "%016llx\n", (unsigned long long)a, (unsigned long long)b,
          (unsigned long long)x);
  ASSERT_EQ(a, b);
  ASSERT(a != x);
  return 0;
}
