/* world.c: the simulated world (world.h): events, clients' seam, links,
 * servers. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (q == NULL && n > 0) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  return q;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  return p;
}

/* ---- events -------------------------------------------------------------- */

typedef struct simev {
  uint64_t at, seq;
  simenv *env;            /* whose process runs it (NULL: the world's) */
  sim_fn fn;
  void *arg;
  uint64_t a;
} simev;

static int ev_before(const simev *x, const simev *y) {
  return x->at < y->at || (x->at == y->at && x->seq < y->seq);
}

static void heap_push(simworld *w, simev e) {
  size_t i;
  if (w->n_heap == w->cap_heap) {
    w->cap_heap = w->cap_heap ? 2 * w->cap_heap : 1024;
    w->heap = xrealloc(w->heap, w->cap_heap * sizeof(*w->heap));
  }
  i = w->n_heap++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!ev_before(&e, &w->heap[p]))
      break;
    w->heap[i] = w->heap[p];
    i = p;
  }
  w->heap[i] = e;
}

static simev heap_pop(simworld *w) {
  simev top = w->heap[0], last = w->heap[--w->n_heap];
  size_t i = 0, n = w->n_heap;
  if (n == 0)
    return top;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const simev *best = &last;
    if (l < n && ev_before(&w->heap[l], best)) {
      m = l;
      best = &w->heap[l];
    }
    if (r < n && ev_before(&w->heap[r], best))
      m = r;
    if (m == i)
      break;
    w->heap[i] = w->heap[m];
    i = m;
  }
  w->heap[i] = last;
  return top;
}

void sim_trace(simworld *w, uint64_t v) {
  int i;
  for (i = 0; i < 8; i++) {
    w->trace ^= (v >> (8 * i)) & 0xff;
    w->trace *= 1099511628211ULL;
  }
}

uint64_t sim_rand(simworld *w) {
  /* splitmix64 */
  uint64_t z = (w->rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t sim_between(simworld *w, uint64_t lo, uint64_t hi) {
  if (hi <= lo)
    return lo;
  return lo + sim_rand(w) % (hi - lo + 1);
}

double sim_unit(simworld *w) {
  return (double)(sim_rand(w) >> 11) / (double)(1ULL << 53);
}

void sim_logf(simworld *w, const char *fmt, ...) {
  char line[600];
  int n;
  va_list ap;
  if (w->log == NULL)
    return;
  n = snprintf(line, sizeof(line), "%11.6f ", (double)w->now / 1e9);
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
  va_end(ap);
  w->log(w, line);
}

void sim_at(simworld *w, uint64_t at, simenv *env, sim_fn fn, void *arg,
            uint64_t a) {
  simev e;
  e.at = at < w->now ? w->now : at;
  e.seq = w->seq++;
  e.env = env;
  e.fn = fn;
  e.arg = arg;
  e.a = a;
  heap_push(w, e);
}

/* The flushers armed while an event ran: their turn before the process
 * blocks again (libuv's prepare phase). */
static void run_flushers(simworld *w) {
  while (w->armed != NULL) {
    simenv *e = w->armed;
    w->armed = e->next_armed;
    e->next_armed = NULL;
    e->on_armed_list = 0;
    if (!e->flush_armed || e->flusher == NULL)
      continue;
    if (e->paused_until > w->now) {
      /* Stopped: its turn comes when it runs again. */
      sim_at(w, e->paused_until, e, NULL, NULL, 0);
      continue;
    }
    e->flush_armed = 0;
    sim_trace(w, 0xf100 + e->id);
    redlock__flusher_run(e->flusher);
  }
}

static void arm(simworld *w, simenv *e) {
  e->flush_armed = 1;
  if (!e->on_armed_list) {
    e->on_armed_list = 1;
    e->next_armed = w->armed;
    w->armed = e;
  }
}

/* A loaded client's event: the loop's time is when its turn began, up
 * to lag_max_ns before now (never before the last turn's: libuv's time
 * does not go back). */
static void env_turn(simworld *w, simenv *e) {
  uint64_t z = (e->lag_rng += 0x9e3779b97f4a7c15ULL), lag;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  lag = (z ^ (z >> 31)) % (e->lag_max_ns + 1);
  if (lag > w->now)
    lag = w->now;
  if (e->loop_ns < w->now - lag)
    e->loop_ns = w->now - lag;
  e->loop_at = w->now;
}

int sim_step(simworld *w, uint64_t until) {
  simev e;
  if (w->n_heap == 0 || w->heap[0].at > until)
    return 0;
  e = heap_pop(w);
  if (e.at > w->now)
    w->now = e.at;
  if (e.env != NULL) {
    if (e.env->paused_until > w->now) {
      /* Its process is stopped: the event waits, in order. */
      sim_at(w, e.env->paused_until, e.env, e.fn, e.arg, e.a);
      return 1;
    }
  }
  w->events++;
  sim_trace(w, w->now);
  if (e.env != NULL && e.env->lag_max_ns > 0)
    env_turn(w, e.env);
  if (e.fn != NULL)
    e.fn(w, e.arg, e.a);
  else if (e.env != NULL && e.env->flush_armed)
    arm(w, e.env);   /* a flusher's turn after a pause */
  run_flushers(w);
  return 1;
}

/* ---- links --------------------------------------------------------------- */

/* Bytes on their way, one direction of a link. */
typedef struct chunk {
  struct chunk *next;
  uint64_t at;            /* arrives (true ns) */
  size_t len;
  char data[];
} chunk;

typedef struct dir {
  chunk *head, *tail;     /* written, not delivered yet, in order */
  uint64_t last_at;       /* the last arrival scheduled (FIFO) */
} dir;

struct simlink {
  simworld *w;
  simenv *env;
  redlock__conn *conn;    /* NULL once the client closed it */
  unsigned gen;           /* the client connection's at open */
  simsrv *srv;            /* NULL: nobody listens on that port */
  unsigned incarnation;   /* the server's when accepted */
  int connecting;         /* the client waits for the handshake */
  int accepted;           /* the server has it */
  int reset;              /* the server side went (crash): nothing more */
  int lost;               /* a cut dropped some of its bytes: TCP cannot
                             go on past a hole, so the connection is
                             reset when the cut heals (sim_cut) */
  int fin;                /* the client closed it or died: the server
                             drops it once the bytes before arrived */
  unsigned refs;          /* the client, the server, events */
  dir up, down;           /* client -> server, server -> client */
  /* The server's side. */
  char *in;               /* bytes received, not yet executed */
  size_t in_len, in_cap;
  simkv_conn kc;
  char **subs;            /* channels subscribed */
  size_t *sub_lens;
  unsigned n_subs;
  simlink *next_srv;      /* srv->conns */
  simlink *next_env;      /* env->links */
};

static unsigned char cut_of(simworld *w, const simlink *l) {
  if (l->srv == NULL || l->env->id >= w->max_clients)
    return 0;
  return w->cut[l->env->id][l->srv->index];
}

static uint64_t latency(simworld *w) {
  return sim_between(w, w->lat_min, w->lat_max);
}

static void link_unref(simlink *l) {
  chunk *c;
  if (--l->refs > 0)
    return;
  while ((c = l->up.head) != NULL) {
    l->up.head = c->next;
    free(c);
  }
  while ((c = l->down.head) != NULL) {
    l->down.head = c->next;
    free(c);
  }
  free(l);
}

static chunk *chunk_pop(dir *d) {
  chunk *c = d->head;
  if (c != NULL) {
    d->head = c->next;
    if (d->head == NULL)
      d->tail = NULL;
  }
  return c;
}

static void dir_clear(dir *d) {
  chunk *c;
  while ((c = chunk_pop(d)) != NULL)
    free(c);
}

static void on_up(simworld *w, void *arg, uint64_t a);
static void on_down(simworld *w, void *arg, uint64_t a);

/* Arrival at or after `at`, never before the previous one (FIFO). */
static uint64_t dir_next_at(dir *d, uint64_t at) {
  if (at < d->last_at)
    at = d->last_at;
  d->last_at = at;
  return at;
}

static void dir_schedule(simworld *w, simlink *l, int up, uint64_t at) {
  l->refs++;
  if (up)
    sim_at(w, at, NULL, on_up, l, 0);
  else
    sim_at(w, at, l->env, on_down, l, 0);
}

static void dir_push(simworld *w, simlink *l, int up, const char *p,
                     size_t n) {
  dir *d = up ? &l->up : &l->down;
  chunk *c = xcalloc(1, sizeof(*c) + n);
  c->len = n;
  memcpy(c->data, p, n);
  c->at = dir_next_at(d, w->now + latency(w));
  if (d->tail != NULL)
    d->tail->next = c;
  else
    d->head = c;
  d->tail = c;
  dir_schedule(w, l, up, c->at);
}

static void srv_receive(simlink *l, const char *p, size_t n);
static void srv_drop(simlink *l);

/* The chunks of the up direction due by now arrive at the server; a cut
 * holds or drops them. */
static void on_up(simworld *w, void *arg, uint64_t a) {
  simlink *l = arg;
  unsigned char cut = cut_of(w, l);
  (void)a;
  while (l->up.head != NULL && l->up.head->at <= w->now) {
    chunk *c;
    if (cut & 1)
      break;                     /* held: sim_cut's heal moves them */
    c = chunk_pop(&l->up);
    if (cut & 2)
      l->lost = 1;
    else if (l->accepted && !l->reset && !l->lost && l->srv->up &&
             l->srv->incarnation == l->incarnation) {
      sim_trace(w, 0xa0000000ULL + c->len);
      srv_receive(l, c->data, c->len);
    }
    free(c);
  }
  /* The client closed: once its last bytes arrived, so does its FIN. */
  if (l->fin && l->up.head == NULL && l->accepted)
    srv_drop(l);
  link_unref(l);
}

static void on_down(simworld *w, void *arg, uint64_t a) {
  simlink *l = arg;
  unsigned char cut = cut_of(w, l);
  (void)a;
  l->refs++;                     /* its callbacks may close it */
  while (l->down.head != NULL && l->down.head->at <= w->now) {
    chunk *c;
    if (cut & 4)
      break;
    c = chunk_pop(&l->down);
    if (cut & 8)
      l->lost = 1;
    else if (!l->lost && l->conn != NULL && l->conn->gen == l->gen &&
             l->conn->state == REDLOCK__CONN_OPEN) {
      sim_trace(w, 0xb0000000ULL + c->len);
      if (redlock__conn_input(l->conn, c->data, c->len) != 0) {
        free(c);
        break;
      }
    }
    free(c);
  }
  l->refs--;        /* the extra one (the event's still holds it) */
  link_unref(l);    /* the event's */
}

/* The client learns that its connection was refused or reset. */
static void on_fail(simworld *w, void *arg, uint64_t a) {
  simlink *l = arg;
  (void)w;
  if (l->conn != NULL && l->conn->gen == l->gen &&
      l->conn->state != REDLOCK__CONN_CLOSED) {
    l->conn->last_errno = (int)a;
    sim_trace(w, 0xe0000000ULL + a);
    redlock__conn_fail(l->conn, REDLOCK_EIO,
                       a == ECONNREFUSED
                           ? "connect: Connection refused (simulated)"
                           : "read: Connection reset by peer (simulated)");
  }
  link_unref(l);
}

/* The client learns that its connection is up. */
static void on_established(simworld *w, void *arg, uint64_t a) {
  simlink *l = arg;
  redlock__conn *c = l->conn;
  (void)a;
  if (c != NULL && c->gen == l->gen && l->connecting) {
    l->connecting = 0;
    sim_trace(w, 0xc0000000ULL);
    if (redlock__conn_ready(c) == 0 && redlock__buf_pending(&c->out) > 0)
      c->sys->ops->conn_write(c);
  }
  link_unref(l);
}

static void on_syn(simworld *w, void *arg, uint64_t a);

/* The client's SYN arrives: refused, accepted (even by a stopped process:
 * the kernel's backlog answers), or held or lost by a cut. */
static void on_syn(simworld *w, void *arg, uint64_t a) {
  simlink *l = arg;
  simsrv *s = l->srv;
  unsigned char cut = cut_of(w, l);
  (void)a;
  if (l->conn == NULL || !l->connecting || l->fin) {
    link_unref(l);
    return;
  }
  if (cut & 1) {
    /* Held: the kernel sends the SYN again, 1 s, 2 s, 4 s ... later. */
    if (a < 6)
      sim_at(w, w->now + (SIM_S << a), NULL, on_syn, l, a + 1);
    else
      link_unref(l);
    return;
  }
  if (cut & 2) {
    link_unref(l);   /* lost: the client's connect deadline */
    return;
  }
  if (s == NULL || !s->up) {
    l->refs++;
    sim_at(w, w->now + latency(w), l->env, on_fail, l, ECONNREFUSED);
    link_unref(l);
    return;
  }
  l->accepted = 1;
  l->incarnation = s->incarnation;
  l->refs++;   /* the server's */
  l->next_srv = s->conns;
  s->conns = l;
  memset(&l->kc, 0, sizeof(l->kc));
  l->kc.authed = simkv_config(s->kv, "requirepass")[0] == '\0';
  l->refs++;
  sim_at(w, dir_next_at(&l->down, w->now + latency(w)), l->env,
         on_established, l, 0);
  link_unref(l);
}

/* ---- the client's seam (sys.h) ------------------------------------------- */

static simenv *env_of(redlock__sys *s) {
  return s->arg;
}

uint64_t sim_env_now(const simenv *e) {
  return e->clock_base_ns +
         (uint64_t)((double)(e->w->now - e->clock_ref_ns) * e->rate);
}

uint64_t sim_env_span(const simenv *e, uint64_t ns) {
  return (uint64_t)((double)ns / e->rate) + 1;
}

static redlock__ns env_now(redlock__sys *s) {
  return sim_env_now(env_of(s));
}

static int env_random(redlock__sys *s, void *buf, size_t n) {
  simworld *w = env_of(s)->w;
  unsigned char *p = buf;
  while (n > 0) {
    uint64_t r = sim_rand(w);
    size_t k = n < 8 ? n : 8;
    memcpy(p, &r, k);
    p += k;
    n -= k;
  }
  return 0;
}

/* A timer: impl[0] its record (below). */
typedef struct simtimer {
  redlock__timer *t;      /* NULL once closed */
  simenv *env;
  uint64_t gen;           /* bumped by start, stop and close */
  uint64_t repeat_ns;     /* of the client's clock */
  int armed;
  unsigned refs;          /* the timer, events */
} simtimer;

static void st_unref(simtimer *st) {
  if (--st->refs == 0)
    free(st);
}

static void on_timer(simworld *w, void *arg, uint64_t gen) {
  simtimer *st = arg;
  redlock__timer *t = st->t;
  if (t != NULL && st->armed && st->gen == gen) {
    if (st->repeat_ns > 0) {
      st->gen++;
      st->refs++;
      sim_at(w, w->now + sim_env_span(st->env, st->repeat_ns), st->env,
             on_timer, st, st->gen);
    } else {
      st->armed = 0;
    }
    sim_trace(w, 0x70000000ULL + st->env->id);
    t->cb(t);
  }
  st_unref(st);
}

static void env_timer_init(redlock__sys *s, redlock__timer *t) {
  simtimer *st = xcalloc(1, sizeof(*st));
  st->t = t;
  st->env = env_of(s);
  st->refs = 1;
  memset(t->impl, 0, sizeof(t->impl));
  t->impl[0] = (uint64_t)(uintptr_t)st;
  t->sys = s;
  t->cb = NULL;
}

static simtimer *st_of(const redlock__timer *t) {
  return (simtimer *)(uintptr_t)t->impl[0];
}

/* A timer closed already: libuv's uv_timer_start says EINVAL and does
 * nothing, uv_timer_stop does nothing; so here (a node that a late
 * topology repoints while the client closes stops its closed timers). */
static int closed_timer(redlock__timer *t, const char *what) {
  simenv *e = env_of(t->sys);
  if (st_of(t) != NULL)
    return 0;
  sim_logf(e->w, "client %u: a closed timer was %s (libuv ignores it)",
           e->id, what);
  return 1;
}

static void env_timer_start(redlock__timer *t, redlock__timer_cb cb,
                            uint64_t ms, uint64_t repeat) {
  simtimer *st = st_of(t);
  simworld *w;
  if (closed_timer(t, "started"))
    return;
  w = st->env->w;
  t->cb = cb;
  st->gen++;
  st->armed = 1;
  st->repeat_ns = repeat * SIM_MS;
  st->refs++;
  /* From the loop's time, as libuv counts (a loaded client's lags). */
  sim_at(w, (st->env->loop_at == w->now ? st->env->loop_ns : w->now) +
                (ms > 0 ? sim_env_span(st->env, ms * SIM_MS) : 0),
         st->env, on_timer, st, st->gen);
}

static void env_timer_stop(redlock__timer *t) {
  simtimer *st = st_of(t);
  if (closed_timer(t, "stopped"))
    return;
  st->armed = 0;
  st->gen++;
}

static void on_timer_closed(simworld *w, void *arg, uint64_t a) {
  redlock__timer *t = arg;
  (void)w;
  (void)a;
  t->closed(t);
}

static void env_timer_close(redlock__timer *t,
                            void (*closed)(redlock__timer *t)) {
  simtimer *st = st_of(t);
  st->armed = 0;
  st->gen++;
  st->t = NULL;
  t->closed = closed;
  t->impl[0] = 0;
  sim_at(st->env->w, st->env->w->now, st->env, on_timer_closed, t, 0);
  st_unref(st);
}

static int env_timer_closing(const redlock__timer *t) {
  return t->impl[0] == 0;
}

static int env_resolve(redlock__sys *s, redlock__resolve *r,
                       const char *host, redlock__resolve_cb cb) {
  (void)s;
  (void)r;
  (void)host;
  (void)cb;
  return -EAI_NONAME;   /* the simulated masters are IP literals */
}

static void env_resolve_cancel(redlock__resolve *r) {
  (void)r;
}

static simlink *link_of(const redlock__conn *c) {
  return (simlink *)c->sock;
}

static int env_conn_open(redlock__conn *c, const struct sockaddr *sa,
                         const char *path, redlock__tls_ctx *tls,
                         const char *host, char *err, size_t errlen) {
  simenv *e = env_of(c->sys);
  simworld *w = e->w;
  simlink *l;
  int port;
  unsigned i;
  (void)host;
  if (sa == NULL || path != NULL || tls != NULL ||
      sa->sa_family != AF_INET) {
    snprintf(err, errlen, "the simulator has IPv4 TCP only");
    return REDLOCK_EIO;
  }
  port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
  l = xcalloc(1, sizeof(*l));
  l->w = w;
  l->env = e;
  l->conn = c;
  l->gen = c->gen;
  l->connecting = 1;
  l->refs = 1;   /* the client's */
  for (i = 0; i < w->n_srv; i++)
    if (w->srv[i].port == port)
      l->srv = &w->srv[i];
  if (l->srv != NULL && (unsigned)(l->srv - w->srv) < 64) {
    unsigned k = (unsigned)(l->srv - w->srv);
    if (e->opens_second != w->now / SIM_S) {
      e->opens_second = w->now / SIM_S;
      memset(e->opens, 0, sizeof(e->opens));
    }
    if (++e->opens[k] > e->opens_most) {
      e->opens_most = e->opens[k];
      e->opens_most_srv = k;
    }
  }
  l->next_env = e->links;
  e->links = l;
  c->sock = (struct redlock__sock *)l;
  c->state = REDLOCK__CONN_CONNECTING;
  c->want_write = 1;
  sim_trace(w, 0xd0000000ULL + (uint64_t)port);
  l->refs++;
  sim_at(w, w->now + latency(w), NULL, on_syn, l, 0);
  return 0;
}

static int env_conn_write(redlock__conn *c) {
  simlink *l = link_of(c);
  size_t n = redlock__buf_pending(&c->out);
  if (l != NULL && n > 0)
    dir_push(l->w, l, 1, c->out.data + c->out.off, n);
  redlock__buf_reset(&c->out);
  c->want_write = 0;
  return 0;
}

/* What has arrived by now is delivered (a deadline reads first). */
static int env_conn_read(redlock__conn *c) {
  simlink *l = link_of(c);
  unsigned gen = c->gen;
  if (l == NULL)
    return 0;
  l->refs++;
  on_down(l->w, l, 0);   /* drops the extra reference */
  return c->gen == gen && c->state != REDLOCK__CONN_CLOSED ? 0 : -1;
}

static void env_unlist(simlink *l) {
  simlink **pp;
  for (pp = &l->env->links; *pp != NULL; pp = &(*pp)->next_env)
    if (*pp == l) {
      *pp = l->next_env;
      return;
    }
}

/* The client's side goes (a close, or its process died): bytes already
 * on their way still arrive, then its FIN (on_up); bytes a cut holds are
 * lost (a reset discards the send queue: SO_LINGER 0, conn_uv.c). */
static void link_fin(simlink *l) {
  simworld *w = l->w;
  if (l->fin)
    return;
  l->fin = 1;
  l->connecting = 0;
  if (cut_of(w, l) & 1)
    dir_clear(&l->up);
  if (l->accepted) {
    l->refs++;
    sim_at(w, dir_next_at(&l->up, w->now + latency(w)), NULL, on_up, l, 0);
  }
}

static void env_conn_close(redlock__conn *c) {
  simlink *l = link_of(c);
  if (l == NULL)
    return;
  c->sock = NULL;
  l->conn = NULL;
  link_fin(l);
  env_unlist(l);
  link_unref(l);   /* the client's */
}

static void env_conn_free(redlock__conn *c) {
  (void)c;
}

static int env_flusher_init(redlock__sys *s, redlock__flusher *fl) {
  env_of(s)->flusher = fl;
  return 0;
}

static void env_flusher_arm(redlock__flusher *fl) {
  simenv *e = env_of(fl->sys);
  arm(e->w, e);
}

static void on_flusher_closed(simworld *w, void *arg, uint64_t a) {
  redlock__flusher *fl = arg;
  (void)w;
  (void)a;
  fl->closed(fl);
}

static void env_flusher_close(redlock__flusher *fl) {
  simenv *e = env_of(fl->sys);
  e->flusher = NULL;
  e->flush_armed = 0;
  sim_at(e->w, e->w->now, e, on_flusher_closed, fl, 0);
}

static const redlock__sys_ops env_ops = {
    env_now,           env_random,        env_timer_init,
    env_timer_start,   env_timer_stop,    env_timer_close,
    env_timer_closing, env_resolve,       env_resolve_cancel,
    env_conn_open,     env_conn_write,    env_conn_read,
    env_conn_close,    env_conn_free,     env_flusher_init,
    env_flusher_arm,   env_flusher_close,
};

void sim_env_init(simworld *w, simenv *e, unsigned id, double rate) {
  memset(e, 0, sizeof(*e));
  e->w = w;
  e->id = id;
  e->rate = rate;
  e->clock_ref_ns = w->now;
  /* Its boot clock: any start, far from the others'. */
  e->clock_base_ns = sim_between(w, 1, 1000000) * SIM_S;
  e->sys.ops = &env_ops;
  e->sys.loop = NULL;
  e->sys.arg = e;
}

void sim_env_crash(simenv *e) {
  simlink *l;
  e->dead = 1;
  e->paused_until = UINT64_MAX;
  /* Its kernel closes its sockets. */
  for (l = e->links; l != NULL; l = l->next_env)
    link_fin(l);
  sim_logf(e->w, "client %u crashed", e->id);
}

void sim_env_revive(simenv *e) {
  simworld *w = e->w;
  size_t i, n = w->n_heap;
  simev *all = w->heap;
  if (!e->dead)
    return;
  e->dead = 0;
  e->paused_until = 0;
  /* Its waiting events come due now, in their order: the heap again. */
  w->heap = NULL;
  w->n_heap = w->cap_heap = 0;
  for (i = 0; i < n; i++) {
    if (all[i].env == e && all[i].at == UINT64_MAX)
      all[i].at = w->now;
    heap_push(w, all[i]);
  }
  free(all);
  if (e->flush_armed) {
    e->flush_armed = 0;
    arm(w, e);
  }
}

/* ---- servers ------------------------------------------------------------- */

int64_t sim_srv_wall_us(const simsrv *s) {
  return s->wall_base_us +
         (int64_t)((double)(s->w->now - s->wall_ref_ns) / 1000.0 *
                   s->wall_rate);
}

static void wall_rebase(simsrv *s) {
  s->wall_base_us = sim_srv_wall_us(s);
  s->wall_ref_ns = s->w->now;
}

void sim_srv_step_clock(simsrv *s, int64_t us) {
  wall_rebase(s);
  s->wall_base_us += us;
  sim_trace(s->w, 0x5000000000ULL + (uint64_t)us);
}

void sim_srv_set_rate(simsrv *s, double rate) {
  wall_rebase(s);
  s->wall_rate = rate;
}

static void hex40(simworld *w, char *out) {
  static const char hex[] = "0123456789abcdef";
  int i;
  for (i = 0; i < 40; i++)
    out[i] = hex[sim_rand(w) & 15];
  out[40] = '\0';
}

/* The cluster section's (below). */
static void cl_fill_info(simsrv *s);
static int cl_view_primary(const simsrv *s);
static int cl_route(void *arg, unsigned slot, int asking, int keys,
                    int missing, char *err, size_t n);
static void cl_command(simsrv *s, int argc, const char *const *argv,
                       const size_t *lens, simkv_out *o);
static void cl_wrote(simsrv *s);
static void cl_gone(simsrv *s);
static void cl_back(simsrv *s, int restarted);
static void cl_free(simcl *c);
/* The sentinel section's. */
static void sg_fill_info(simsrv *s);
static void sg_command(simsrv *s, int argc, const char *const *argv,
                       const size_t *lens, simkv_out *o);
static void sg_wrote(simsrv *s);
static void sg_gone(simsrv *s);
static void sg_back(simsrv *s, int restarted);

static void srv_fill_info(simsrv *s) {
  s->info.run_id = s->run_id;
  s->info.uptime_s = (int64_t)((s->w->now - s->started_ns) / SIM_S);
  s->info.tcp_port = s->port;
  s->info.role = "master";
  s->info.master_host = NULL;
  s->info.master_port = 0;
  s->info.master_link_up = 0;
  s->info.master_replid = s->replid;
  s->info.second_repl_offset = s->second_offset;
  s->info.connected_slaves = 0;
  s->info.aof_enabled = -1;
  s->info.rdb_last_save_time = 0;
  if (s->resyncing) {
    s->info.role = "slave";
    s->info.master_host = "127.0.0.1";
    s->info.master_port = s->resyncing;
    s->info.master_link_up = 1;
  }
  if (s->cl != NULL)
    cl_fill_info(s);
  if (s->sg != NULL && !s->sentinel)
    sg_fill_info(s);
}

static long srv_publish(void *arg, const char *ch, size_t chlen,
                        const char *msg, size_t msglen);

static void srv_start(simsrv *s) {
  s->up = 1;
  s->started_ns = s->w->now;
  s->data_ns = s->w->now;
  s->second_offset = -1;   /* no replication history after a restart */
  s->resyncing = 0;
  hex40(s->w, s->run_id);
  /* A replica keeps the replication id it loads (its primary's, in the
   * RDB's or the AOF's preamble) until it syncs again. */
  if ((s->cl == NULL || cl_view_primary(s)) &&
      (s->sg == NULL || s->sentinel || s->follows == s->node))
    hex40(s->w, s->replid);
  srv_fill_info(s);
  sim_trace(s->w, 0x5100000000ULL + s->index);
}

/* ---- the server's side of a link ---------------------------------------- */

static void srv_drop(simlink *l) {
  simsrv *s = l->srv;
  simlink **pp;
  unsigned i;
  if (!l->accepted)
    return;
  for (pp = &s->conns; *pp != NULL; pp = &(*pp)->next_srv)
    if (*pp == l) {
      *pp = l->next_srv;
      break;
    }
  l->accepted = 0;
  for (i = 0; i < l->n_subs; i++)
    free(l->subs[i]);
  free(l->subs);
  free(l->sub_lens);
  l->subs = NULL;
  l->sub_lens = NULL;
  l->n_subs = 0;
  free(l->in);
  l->in = NULL;
  l->in_len = l->in_cap = 0;
  link_unref(l);   /* the server's */
}

/* The server side goes (a crash, CLIENT KILL, a cut that dropped bytes
 * healing): nothing more on this link; the client learns it after what
 * was already on its way to it. */
static void link_reset(simworld *w, simlink *l) {
  l->reset = 1;
  dir_clear(&l->up);
  l->refs++;
  sim_at(w, dir_next_at(&l->down, w->now + latency(w)), l->env, on_fail, l,
         ECONNRESET);
  srv_drop(l);
}

static void out_append(simkv_out *o, const char *p, size_t n) {
  if (o->len + n > o->cap) {
    o->cap = (o->len + n) * 2 + 64;
    o->p = xrealloc(o->p, o->cap);
  }
  memcpy(o->p + o->len, p, n);
  o->len += n;
}

static void out_printf(simkv_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void out_printf(simkv_out *o, const char *fmt, ...) {
  char buf[256];
  int n;
  va_list ap;
  va_start(ap, fmt);
  n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  out_append(o, buf, (size_t)n);
}

static void out_bulk(simkv_out *o, const char *p, size_t n) {
  out_printf(o, "$%zu\r\n", n);
  out_append(o, p, n);
  out_append(o, "\r\n", 2);
}

/* PUBLISH's receivers on server s. */
static long publish_here(simsrv *s, const char *ch, size_t chlen,
                         const char *msg, size_t msglen) {
  simlink *l;
  long n = 0;
  simkv_out o = {NULL, 0, 0};
  for (l = s->conns; l != NULL; l = l->next_srv) {
    unsigned i;
    for (i = 0; i < l->n_subs; i++)
      if (l->sub_lens[i] == chlen && memcmp(l->subs[i], ch, chlen) == 0) {
        o.len = 0;
        out_append(&o, "*3\r\n$7\r\nmessage\r\n", 17);
        out_bulk(&o, ch, chlen);
        out_bulk(&o, msg, msglen);
        dir_push(s->w, l, 0, o.p, o.len);
        n++;
        break;
      }
  }
  free(o.p);
  return n;
}

/* A cluster node's PUBLISH reaches every node over the cluster bus (the
 * count is its own receivers', as Redis 7.0 says). */
static long srv_publish(void *arg, const char *ch, size_t chlen,
                        const char *msg, size_t msglen) {
  simsrv *s = arg;
  unsigned i;
  long n = publish_here(s, ch, chlen, msg, msglen);
  for (i = 0; s->cl != NULL && i < s->cl->n; i++) {
    simsrv *o = sim_cluster_srv(s->cl, i);
    if (o != s && o->up)
      (void)publish_here(o, ch, chlen, msg, msglen);
  }
  return n;
}

/* SUBSCRIBE / UNSUBSCRIBE: the connection's channels. */
static void srv_pubsub(simlink *l, int sub, int argc, const char *const *argv,
                       const size_t *lens, simkv_out *o) {
  int i;
  for (i = 1; i < argc; i++) {
    unsigned k, found = l->n_subs;
    for (k = 0; k < l->n_subs; k++)
      if (l->sub_lens[k] == lens[i] &&
          memcmp(l->subs[k], argv[i], lens[i]) == 0)
        found = k;
    if (sub && found == l->n_subs) {
      l->subs = xrealloc(l->subs, (l->n_subs + 1) * sizeof(*l->subs));
      l->sub_lens =
          xrealloc(l->sub_lens, (l->n_subs + 1) * sizeof(*l->sub_lens));
      l->subs[l->n_subs] = xcalloc(1, lens[i] + 1);
      memcpy(l->subs[l->n_subs], argv[i], lens[i]);
      l->sub_lens[l->n_subs++] = lens[i];
    } else if (!sub && found < l->n_subs) {
      free(l->subs[found]);
      l->subs[found] = l->subs[l->n_subs - 1];
      l->sub_lens[found] = l->sub_lens[l->n_subs - 1];
      l->n_subs--;
    }
    out_printf(o, "*3\r\n$%d\r\n%s\r\n", sub ? 9 : 11,
               sub ? "subscribe" : "unsubscribe");
    out_bulk(o, argv[i], lens[i]);
    out_printf(o, ":%u\r\n", l->n_subs);
  }
}

/* A RESP length line at p (after its type byte) up to CRLF: *v and the
 * bytes through the LF; 0 when incomplete, -1 when not a number. */
static long parse_len(const char *p, size_t n, long *v) {
  size_t i = 0;
  long x = 0;
  if (n == 0)
    return 0;
  if (p[0] == '-') {
    for (i = 1; i < n && p[i] != '\r'; i++)
      ;
    if (i + 1 >= n)
      return 0;
    *v = -1;
    return (long)i + 2;
  }
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
    x = x * 10 + (p[i] - '0');
    if (x > (1L << 40))
      return -1;
  }
  if (i + 1 >= n)
    return 0;
  if (i == 0 || p[i] != '\r' || p[i + 1] != '\n')
    return -1;
  *v = x;
  return (long)i + 2;
}

/* One complete command at the front of l->in: its length, 0 when more
 * bytes are needed, -1 when it is not RESP (a protocol error). */
#define MAX_ARGS 1024
static long parse_cmd(const char *p, size_t n, int *argc,
                      const char **argv, size_t *lens) {
  size_t i;
  long k, count, used;
  if (n < 4)
    return 0;
  if (p[0] != '*')
    return -1;
  used = parse_len(p + 1, n - 1, &count);
  if (used <= 0)
    return used;
  if (count < 1 || count > MAX_ARGS)
    return -1;
  i = 1 + (size_t)used;
  for (k = 0; k < count; k++) {
    long len;
    if (i >= n)
      return 0;
    if (p[i] != '$')
      return -1;
    used = parse_len(p + i + 1, n - i - 1, &len);
    if (used <= 0)
      return used;
    if (len < 0)
      return -1;
    i += 1 + (size_t)used;
    if (i + (size_t)len + 2 > n)
      return 0;
    argv[k] = p + i;
    lens[k] = (size_t)len;
    i += (size_t)len + 2;
  }
  *argc = (int)count;
  return (long)i;
}

static int is(const char *a, size_t n, const char *b) {
  return strlen(b) == n && strncasecmp(a, b, n) == 0;
}

/* Runs what l->in holds, unless the server is stopped. */
static void srv_run(simlink *l) {
  simsrv *s = l->srv;
  simworld *w = s->w;
  const char *argv[MAX_ARGS];
  size_t lens[MAX_ARGS];
  simkv_out o = {NULL, 0, 0};
  size_t off = 0;
  simkv_ctx ctx;
  if (s->paused_until > w->now || !l->accepted)
    return;
  memset(&ctx, 0, sizeof(ctx));
  srv_fill_info(s);
  ctx.info = &s->info;
  ctx.publish = srv_publish;
  ctx.route = s->cl != NULL ? cl_route : NULL;
  ctx.arg = s;
  while (off < l->in_len) {
    int argc = 0;
    long used = parse_cmd(l->in + off, l->in_len - off, &argc, argv, lens);
    if (used == 0)
      break;
    if (used < 0) {
      out_printf(&o, "-ERR Protocol error (simulated)\r\n");
      off = l->in_len;
      break;
    }
    off += (size_t)used;
    s->commands++;
    {
      int k;
      for (k = 1; k < argc && k < 4; k++)
        if (lens[k] == 18 && memcmp(argv[k], "__redlock__:maxttl", 18) == 0)
          l->env->record_at = w->now;
    }
    if ((int)l->env->id == w->trace_client) {
      char line[160];
      int k, m = 0;
      for (k = 0; k < argc && k < 4 && m < 120; k++)
        m += snprintf(line + m, sizeof(line) - (size_t)m, " %.*s",
                      (int)(lens[k] < 24 ? lens[k] : 24), argv[k]);
      sim_logf(w, "  server %u runs for client %u:%s", s->index,
               l->env->id, line);
    }
    ctx.now_us = sim_srv_wall_us(s);
    if (is(argv[0], lens[0], "SUBSCRIBE") && argc > 1) {
      srv_pubsub(l, 1, argc, argv, lens, &o);
    } else if (is(argv[0], lens[0], "UNSUBSCRIBE") && argc > 1) {
      srv_pubsub(l, 0, argc, argv, lens, &o);
    } else if (s->cl != NULL && l->n_subs == 0 && argc >= 2 &&
               is(argv[0], lens[0], "CLUSTER")) {
      cl_command(s, argc, argv, lens, &o);
    } else if (s->sentinel && l->n_subs == 0) {
      sg_command(s, argc, argv, lens, &o);
    } else if (l->n_subs > 0 && !is(argv[0], lens[0], "PING")) {
      out_printf(&o, "-ERR Can't execute '%.*s': only (P|S)SUBSCRIBE / "
                 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in "
                 "this context\r\n", (int)lens[0], argv[0]);
    } else {
      size_t at = o.len;
      int rc = simkv_exec(s->kv, &l->kc, &ctx, argc, argv, lens, &o);
      if (rc > 0) {
        s->writes++;
        if (s->cl != NULL)
          cl_wrote(s);
        if (s->sg != NULL)
          sg_wrote(s);
      }
      if ((int)l->env->id == w->trace_client && o.len > at &&
          o.p[at] == '-')
        sim_logf(w, "  server %u answers client %u: %.*s", s->index,
                 l->env->id, (int)(o.len - at - 3), o.p + at + 1);
    }
  }
  if (off > 0) {
    memmove(l->in, l->in + off, l->in_len - off);
    l->in_len -= off;
  }
  if (o.len > 0)
    dir_push(w, l, 0, o.p, o.len);
  free(o.p);
}

static void srv_receive(simlink *l, const char *p, size_t n) {
  if (l->in_len + n > l->in_cap) {
    l->in_cap = (l->in_len + n) * 2;
    l->in = xrealloc(l->in, l->in_cap);
  }
  memcpy(l->in + l->in_len, p, n);
  l->in_len += n;
  srv_run(l);
}

sim_loss sim_srv_loss(const simsrv *s) {
  const char *aof = simkv_config(s->kv, "appendonly");
  const char *fsync = simkv_config(s->kv, "appendfsync");
  if (strcmp(aof, "yes") == 0)
    return strcmp(fsync, "always") == 0 ? SIM_LOSE_NOTHING
                                        : SIM_LOSE_SECOND;
  return s->rdb != NULL ? SIM_LOSE_SNAPSHOT : SIM_LOSE_ALL;
}

void sim_srv_snapshot(simsrv *s) {
  if (s->rdb != NULL)
    simkv_free(s->rdb);
  s->rdb = simkv_clone(s->kv);
}

/* The AOF's fsync (everysec): what a crash keeps is this copy. */
static void on_fsync(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  if (!s->up || s->incarnation != incarnation)
    return;
  if (strcmp(simkv_config(s->kv, "appendonly"), "yes") == 0 &&
      strcmp(simkv_config(s->kv, "appendfsync"), "always") != 0) {
    if (s->fsynced != NULL)
      simkv_free(s->fsynced);
    s->fsynced = simkv_clone(s->kv);
  }
  if (!w->stopping)
    sim_at(w, w->now + SIM_S, NULL, on_fsync, s, incarnation);
}

static void on_restart(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  (void)w;
  if (s->up || s->incarnation != incarnation)
    return;
  srv_start(s);
  simkv_restart(s->kv, sim_srv_wall_us(s));
  sim_at(w, w->now + SIM_S, NULL, on_fsync, s, s->incarnation);
  sim_logf(w, "server %u restarted (run_id %.8s, %zu keys)", s->index,
           s->run_id, simkv_keys(s->kv));
  if (s->cl != NULL)
    cl_back(s, 1);
  if (s->sg != NULL)
    sg_back(s, 1);
}

void sim_srv_crash(simsrv *s, uint64_t down_ns) {
  simworld *w = s->w;
  sim_loss loss = sim_srv_loss(s);
  simkv *keep = NULL;
  char conf[6][32];
  static const char *names[6] = {"appendonly", "appendfsync", "save",
                                 "requirepass", "min-replicas-to-write",
                                 "min-replicas-max-lag"};
  int i;
  if (!s->up)
    return;
  /* What the disk kept; the config is the one it starts with (its file
   * on disk: a CONFIG SET without CONFIG REWRITE is lost too, but the
   * simulated deployment starts every instance with the same settings as
   * it ran, as an operator's unit file would). */
  for (i = 0; i < 6; i++)
    snprintf(conf[i], sizeof(conf[i]), "%s", simkv_config(s->kv, names[i]));
  switch (loss) {
    case SIM_LOSE_NOTHING:
      keep = simkv_clone(s->kv);
      break;
    case SIM_LOSE_SECOND:
      keep = s->fsynced != NULL ? simkv_clone(s->fsynced) : simkv_new();
      break;
    case SIM_LOSE_SNAPSHOT:
      keep = simkv_clone(s->rdb);
      break;
    case SIM_LOSE_ALL:
      keep = simkv_new();
      break;
  }
  if (keep == NULL) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  for (i = 0; i < 6; i++)
    simkv_config_set(keep, names[i], conf[i]);
  simkv_free(s->kv);
  s->kv = keep;
  if (s->fsynced != NULL) {
    simkv_free(s->fsynced);
    s->fsynced = NULL;
  }
  s->up = 0;
  s->paused_until = 0;
  s->incarnation++;
  if (s->cl != NULL) {
    /* What was not sent to its replicas is lost with the process. */
    s->repl_armed = 0;
    s->synced = 0;
    cl_gone(s);
  }
  if (s->sg != NULL && !s->sentinel) {
    s->repl_armed = 0;
    if (s->follows != s->node)
      s->synced = 0;   /* a replica syncs again when it is back */
  }
  /* Every connection is reset: the clients learn it after what was
   * already on its way to them. */
  while (s->conns != NULL) {
    simlink *l = s->conns;
    link_reset(w, l);
  }
  sim_logf(w, "server %u crashed (loses %s), back in %.3f s", s->index,
           loss == SIM_LOSE_NOTHING    ? "nothing"
           : loss == SIM_LOSE_SECOND   ? "up to a second"
           : loss == SIM_LOSE_SNAPSHOT ? "what followed its snapshot"
                                       : "everything",
           (double)down_ns / 1e9);
  sim_at(w, w->now + down_ns, NULL, on_restart, s, s->incarnation);
  if (s->sg != NULL)
    sg_gone(s);
}

/* REPLICAOF NO ONE: a new replication id, the old one's offset in
 * second_repl_offset; the process (its run_id) is the same. */
static void on_resync_back(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  if (!s->up || s->incarnation != incarnation || s->resyncing == 0)
    return;
  s->resyncing = 0;
  s->second_offset = (int64_t)s->writes + 1;
  hex40(w, s->replid);
  sim_trace(w, 0x5300000000ULL + s->index);
  sim_logf(w, "server %u is a master again (run_id %.8s, replication id "
           "%.8s, %zu keys)", s->index, s->run_id, s->replid,
           simkv_keys(s->kv));
}

void sim_srv_resync(simsrv *s, int port, uint64_t ns) {
  simworld *w = s->w;
  if (!s->up || s->cl != NULL || s->sg != NULL || s->resyncing)
    return;
  /* REPLICAOF 127.0.0.1 port: a replica (READONLY to its clients), and
   * the full sync: the other primary's data (none of ours) replaces ours,
   * in memory and on disk (the RDB it loaded, the AOF rewritten from it);
   * the config stays. A restart meanwhile comes back a master (the
   * config file says nothing of it). */
  s->resyncing = port;
  simkv_flush(s->kv);
  if (s->rdb != NULL)
    simkv_flush(s->rdb);
  if (s->fsynced != NULL)
    simkv_flush(s->fsynced);
  hex40(w, s->replid);   /* the other primary's */
  s->data_ns = w->now;
  sim_trace(w, 0x5200000000ULL + s->index);
  sim_logf(w, "server %u: REPLICAOF 127.0.0.1 %d (a full sync: 0 keys), a "
           "master again in %.3f s", s->index, port, (double)ns / 1e9);
  sim_at(w, w->now + ns, NULL, on_resync_back, s, s->incarnation);
}

void sim_srv_kill_client(simsrv *s, unsigned client) {
  simworld *w = s->w;
  simlink *l, *next;
  for (l = s->conns; l != NULL; l = next) {
    next = l->next_srv;
    if (l->env->id != client)
      continue;
    link_reset(w, l);
  }
}

static void on_resume(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  simlink *l, *next;
  if (s->incarnation != incarnation || s->paused_until > w->now)
    return;
  s->paused_until = 0;
  /* What the clients sent meanwhile runs first, on what it believed when
   * it stopped; the cluster bus's news reach it just after (cl_back). */
  for (l = s->conns; l != NULL; l = next) {
    next = l->next_srv;
    l->refs++;
    srv_run(l);
    link_unref(l);
  }
  if (s->cl != NULL)
    cl_back(s, 0);
  if (s->sg != NULL)
    sg_back(s, 0);
}

void sim_srv_pause(simsrv *s, uint64_t ns) {
  simworld *w = s->w;
  if (!s->up)
    return;
  if (s->paused_until < w->now + ns)
    s->paused_until = w->now + ns;
  sim_logf(w, "server %u paused for %.3f s", s->index, (double)ns / 1e9);
  sim_at(w, s->paused_until, NULL, on_resume, s, s->incarnation);
  if (s->cl != NULL)
    cl_gone(s);
  if (s->sg != NULL)
    sg_gone(s);
}

/* ---- Redis Cluster ------------------------------------------------------- */

#define NO_NODE 0xff

/* A run of slots with one owner (CLUSTER SHARDS and SLOTS list them). */
typedef struct clrun {
  unsigned lo, hi;
  unsigned char owner;
} clrun;

/* One configuration: immutable once sealed, shared by the nodes that
 * believe it. */
struct simclcfg {
  unsigned refs;
  uint64_t epoch;
  unsigned char owner[SIM_SLOTS];         /* node, or NO_NODE */
  unsigned char primary[SIM_CL_NODES];    /* itself for a primary */
  unsigned char failed[SIM_CL_NODES];     /* marked FAIL */
  int ok;                                 /* cluster_state:ok */
  clrun *runs;
  unsigned n_runs;
};

simsrv *sim_cluster_srv(simcl *c, unsigned node) {
  return &c->w->srv[c->first + node];
}

/* A copy of `from` (NULL: empty) one epoch later, to change and seal. */
static simclcfg *cfg_new(simcl *c, const simclcfg *from) {
  simclcfg *g = xcalloc(1, sizeof(*g));
  g->refs = 1;
  if (from != NULL) {
    memcpy(g->owner, from->owner, sizeof(g->owner));
    memcpy(g->primary, from->primary, sizeof(g->primary));
    memcpy(g->failed, from->failed, sizeof(g->failed));
  }
  g->epoch = c->cur != NULL ? c->cur->epoch + 1 : 1;
  return g;
}

/* Its runs of slots and its state: ok when every slot's owner is a
 * primary not marked failed (cluster-require-full-coverage yes). */
static void cfg_seal(simclcfg *g) {
  unsigned s, cap = 0;
  g->ok = 1;
  for (s = 0; s < SIM_SLOTS; s++) {
    unsigned o = g->owner[s];
    if (o == NO_NODE || g->primary[o] != o || g->failed[o])
      g->ok = 0;
    if (g->n_runs > 0 && g->runs[g->n_runs - 1].owner == o) {
      g->runs[g->n_runs - 1].hi = s;
      continue;
    }
    if (g->n_runs == cap) {
      cap = cap ? 2 * cap : 8;
      g->runs = xrealloc(g->runs, cap * sizeof(*g->runs));
    }
    g->runs[g->n_runs].lo = g->runs[g->n_runs].hi = s;
    g->runs[g->n_runs].owner = (unsigned char)o;
    g->n_runs++;
  }
}

static void cfg_unref(simclcfg *g) {
  if (g != NULL && --g->refs == 0) {
    free(g->runs);
    free(g);
  }
}

static void view_set(simsrv *s, simclcfg *g) {
  g->refs++;
  cfg_unref(s->view);
  s->view = g;
}

static int cl_view_primary(const simsrv *s) {
  return s->view == NULL || s->view->primary[s->node] == s->node;
}

int sim_srv_primary(const simsrv *s) {
  return s->cl == NULL || s->cl->cur->primary[s->node] == s->node;
}

int sim_srv_migrating(const simsrv *s) {
  return s->mig != 0;
}

static int running(const simsrv *s) {
  return s->up && s->paused_until <= s->w->now;
}

/* The cluster bus: news reach a node within milliseconds, now and then
 * one much later (its pings were lost for a while). */
static uint64_t gossip(simworld *w) {
  return sim_between(w, 0, 7) == 0 ? sim_between(w, 100, 1000) * SIM_MS
                                    : sim_between(w, 1, 20) * SIM_MS;
}

static void cl_sync_later(simsrv *s);

/* Node s now believes g. */
static void cl_adopt(simsrv *s, simclcfg *g) {
  unsigned x = s->node, was = s->view->primary[x], now = g->primary[x];
  view_set(s, g);
  s->bent = 0;
  if (s->mig == SIM_MIG_OUT && g->owner[s->mig_lo] != x)
    s->mig = 0;   /* SETSLOT ... NODE reached it: the migration is over */
  if (now != x && was == x) {
    s->demoted_ns = s->w->now;
    s->cl->rollback_ns = s->w->now;
  }
  if (now != x && now != was) {
    /* Demoted, or another primary's replica now: a full sync. */
    sim_logf(s->w, "server %u (cluster node %u) follows node %u now", s->index,
             x, now);
    cl_sync_later(s);
  }
}

static void on_cl_adopt(simworld *w, void *arg, uint64_t epoch) {
  simsrv *s = arg;
  simclcfg *cur = s->cl->cur;
  (void)w;
  /* A node down or stopped hears of it when it is back (cl_back). */
  if (!running(s) || cur->epoch != epoch || s->view->epoch >= epoch)
    return;
  cl_adopt(s, cur);
}

/* g is the cluster's latest configuration; nodes in `now` (a bit each)
 * believe it at once, the others when the bus brings it. */
static void cl_publish(simcl *c, simclcfg *g, unsigned now) {
  simworld *w = c->w;
  unsigned i;
  cfg_unref(c->cur);
  c->cur = g;   /* takes the creator's reference */
  sim_trace(w, 0x6c00000000ULL + g->epoch);
  for (i = 0; i < c->n; i++) {
    simsrv *s = sim_cluster_srv(c, i);
    if (now & (1u << i))
      cl_adopt(s, g);
    else
      sim_at(w, w->now + gossip(w), NULL, on_cl_adopt, s, g->epoch);
  }
}

simcl *sim_cluster_new(simworld *w, unsigned first, unsigned primaries,
                       unsigned replica_mask, int old) {
  simcl *c = xcalloc(1, sizeof(*c));
  simclcfg *g;
  unsigned p, i, n = primaries;
  for (p = 0; p < primaries; p++)
    n += (replica_mask >> p) & 1;
  if (n > SIM_CL_NODES || first + n > w->n_srv ||
      w->n_cl == SIM_MAX_CLUSTERS) {
    fprintf(stderr, "sim: a cluster of %u nodes does not fit\n", n);
    abort();
  }
  c->w = w;
  c->first = first;
  c->n = n;
  c->primaries = primaries;
  c->old = old;
  c->node_timeout = sim_between(w, 500, 2000) * SIM_MS;
  g = cfg_new(c, NULL);
  for (i = 0; i < SIM_SLOTS; i++)
    g->owner[i] = (unsigned char)(i * primaries / SIM_SLOTS);
  for (p = 0, i = primaries; p < primaries; p++) {
    g->primary[p] = (unsigned char)p;
    if ((replica_mask >> p) & 1)
      g->primary[i++] = (unsigned char)p;
  }
  cfg_seal(g);
  c->cur = g;
  for (i = 0; i < n; i++) {
    simsrv *s = sim_cluster_srv(c, i);
    s->cl = c;
    s->node = i;
    hex40(w, s->node_id);
    view_set(s, g);
    s->second_offset = -1;
    s->synced = 1;   /* empty, as its primary */
    if (g->primary[i] != i)
      memcpy(s->replid, sim_cluster_srv(c, g->primary[i])->replid, 41);
    srv_fill_info(s);
  }
  w->cl[w->n_cl++] = c;
  return c;
}

static void cl_free(simcl *c) {
  unsigned i;
  for (i = 0; i < c->n; i++) {
    simsrv *s = sim_cluster_srv(c, i);
    cfg_unref(s->view);
    s->view = NULL;
  }
  cfg_unref(c->cur);
  free(c);
}

simsrv *sim_cluster_owner(simcl *c, unsigned slot) {
  unsigned o = c->cur->owner[slot % SIM_SLOTS];
  return o == NO_NODE ? NULL : sim_cluster_srv(c, o);
}

void sim_cluster_range(simcl *c, unsigned slot, unsigned *lo, unsigned *hi) {
  unsigned k;
  for (k = 0; k < c->cur->n_runs; k++)
    if (c->cur->runs[k].lo <= slot && slot <= c->cur->runs[k].hi) {
      *lo = c->cur->runs[k].lo;
      *hi = c->cur->runs[k].hi;
      return;
    }
  *lo = *hi = slot;
}

int sim_cluster_lowest(simcl *c, unsigned node) {
  unsigned k;
  for (k = 0; k < c->cur->n_runs; k++)
    if (c->cur->runs[k].owner == node)
      return (int)c->cur->runs[k].lo;
  return -1;
}

simsrv *sim_cluster_heir(simcl *c, unsigned node, int synced) {
  unsigned i;
  for (i = 0; i < c->n; i++) {
    simsrv *q = sim_cluster_srv(c, i);
    if (i != node && c->cur->primary[i] == node && running(q) &&
        q->view->primary[i] == node && (!synced || q->synced))
      return q;
  }
  return NULL;
}

/* May r be promoted now (w->repromote_gap)? */
static int repromote_ok(const simsrv *r) {
  return r->demoted_ns == 0 || r->w->now >= r->demoted_ns + r->w->repromote_gap;
}

int sim_cluster_would_fail_over(const simsrv *s, uint64_t ns) {
  unsigned i;
  if (s->cl == NULL || !sim_srv_primary(s) || ns <= s->cl->node_timeout)
    return 0;
  /* Any replica: one down or syncing now may be elected by then. */
  for (i = 0; i < s->cl->n; i++)
    if (i != s->node && s->cl->cur->primary[i] == s->node)
      return 1;
  return 0;
}

/* ---- a node's answers ---------------------------------------------------- */

static void cl_fill_info(simsrv *s) {
  simcl *c = s->cl;
  unsigned x = s->node, p = s->view->primary[x], i;
  s->info.second_repl_offset = s->second_offset;
  if (p != x) {
    simsrv *ps = sim_cluster_srv(c, p);
    s->info.role = "slave";
    s->info.master_host = "127.0.0.1";
    s->info.master_port = ps->port;
    s->info.master_link_up = s->synced && running(ps);
    return;
  }
  for (i = 0; i < c->n; i++) {
    simsrv *q = sim_cluster_srv(c, i);
    s->info.connected_slaves += i != x && q->up && q->synced &&
                                q->view->primary[i] == x;
  }
}

static void addr_of(simsrv *s, char *out, size_t n) {
  snprintf(out, n, "127.0.0.1:%d", s->port);
}

/* getNodeByQuery (Redis 7.0's cluster.c), with this node's beliefs. */
static int cl_route(void *arg, unsigned slot, int asking, int keys,
                    int missing, char *err, size_t n) {
  simsrv *s = arg;
  const simclcfg *v = s->view;
  unsigned me = s->node, owner = v->owner[slot];
  char at[32];
  if (!v->ok) {
    snprintf(err, n, "CLUSTERDOWN The cluster is down");
    return 1;
  }
  if (owner == NO_NODE) {
    snprintf(err, n, "CLUSTERDOWN Hash slot not served");
    return 1;
  }
  if (v->primary[me] == me && s->mig != 0 && slot >= s->mig_lo &&
      slot <= s->mig_hi) {
    if (owner == me && s->mig == SIM_MIG_OUT && missing > 0) {
      if (missing < keys) {
        snprintf(err, n, "TRYAGAIN Multiple keys request during rehashing "
                 "of slot");
        return 1;
      }
      addr_of(sim_cluster_srv(s->cl, s->mig_peer), at, sizeof(at));
      snprintf(err, n, "ASK %u %s", slot, at);
      return 1;
    }
    if (owner != me && s->mig == SIM_MIG_IN && asking) {
      if (keys > 1 && missing > 0) {
        snprintf(err, n, "TRYAGAIN Multiple keys request during rehashing "
                 "of slot");
        return 1;
      }
      return 0;
    }
  }
  if (owner == me && v->primary[me] == me)
    return 0;
  addr_of(sim_cluster_srv(s->cl, owner), at, sizeof(at));
  snprintf(err, n, "MOVED %u %s", slot, at);
  return 1;
}

/* One node of a CLUSTER SHARDS reply (Redis 7.0.15's fields, in order). */
static void shard_node(simkv_out *o, simcl *c, const simclcfg *v,
                       unsigned x) {
  simsrv *n = sim_cluster_srv(c, x);
  int replica = v->primary[x] != x;
  out_printf(o, "*14\r\n$2\r\nid\r\n$40\r\n%s\r\n$4\r\nport\r\n:%d\r\n"
             "$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n"
             "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n", n->node_id, n->port);
  out_bulk(o, replica ? "replica" : "master", replica ? 7 : 6);
  out_printf(o, "$18\r\nreplication-offset\r\n:%" PRIu64 "\r\n"
             "$6\r\nhealth\r\n", n->writes);
  if (v->failed[x])
    out_bulk(o, "fail", 4);
  else if (replica && !n->synced)
    out_bulk(o, "loading", 7);
  else
    out_bulk(o, "online", 6);
}

/* CLUSTER SHARDS: each primary of its view with its slots (pairs of
 * bounds) and its nodes, the primary first. */
static void cl_shards(simsrv *s, simkv_out *o) {
  simcl *c = s->cl;
  const simclcfg *v = s->view;
  unsigned x, k, i, shards = 0;
  for (x = 0; x < c->n; x++)
    shards += v->primary[x] == x;
  out_printf(o, "*%u\r\n", shards);
  for (x = 0; x < c->n; x++) {
    unsigned pairs = 0, nodes = 0;
    if (v->primary[x] != x)
      continue;
    for (k = 0; k < v->n_runs; k++)
      pairs += v->runs[k].owner == x;
    for (i = 0; i < c->n; i++)
      nodes += v->primary[i] == x;
    out_printf(o, "*4\r\n$5\r\nslots\r\n*%u\r\n", 2 * pairs);
    for (k = 0; k < v->n_runs; k++)
      if (v->runs[k].owner == x)
        out_printf(o, ":%u\r\n:%u\r\n", v->runs[k].lo, v->runs[k].hi);
    out_printf(o, "$5\r\nnodes\r\n*%u\r\n", nodes);
    shard_node(o, c, v, x);
    for (i = 0; i < c->n; i++)
      if (i != x && v->primary[i] == x)
        shard_node(o, c, v, i);
  }
}

/* A node of CLUSTER SLOTS: [ip, port, id] (6.2; 7.0 adds a map of
 * hostnames, empty here). */
static void slots_node(simkv_out *o, simcl *c, unsigned x) {
  simsrv *n = sim_cluster_srv(c, x);
  out_printf(o, "*%d\r\n$9\r\n127.0.0.1\r\n:%d\r\n$40\r\n%s\r\n%s",
             c->old ? 3 : 4, n->port, n->node_id, c->old ? "" : "*0\r\n");
}

/* CLUSTER SLOTS: a run of slots, its primary, its replicas not failed. */
static void cl_slots(simsrv *s, simkv_out *o) {
  simcl *c = s->cl;
  const simclcfg *v = s->view;
  unsigned k, i, runs = 0;
  for (k = 0; k < v->n_runs; k++)
    runs += v->runs[k].owner != NO_NODE;
  out_printf(o, "*%u\r\n", runs);
  for (k = 0; k < v->n_runs; k++) {
    unsigned x = v->runs[k].owner, nodes = 1;
    if (x == NO_NODE)
      continue;
    for (i = 0; i < c->n; i++)
      nodes += i != x && v->primary[i] == x && !v->failed[i];
    out_printf(o, "*%u\r\n:%u\r\n:%u\r\n", 2 + nodes, v->runs[k].lo,
               v->runs[k].hi);
    slots_node(o, c, x);
    for (i = 0; i < c->n; i++)
      if (i != x && v->primary[i] == x && !v->failed[i])
        slots_node(o, c, i);
  }
}

static void cl_command(simsrv *s, int argc, const char *const *argv,
                       const size_t *lens, simkv_out *o) {
  if (argc == 2 && is(argv[1], lens[1], "MYID"))
    out_bulk(o, s->node_id, 40);
  else if (argc == 2 && is(argv[1], lens[1], "SHARDS") && !s->cl->old)
    cl_shards(s, o);
  else if (argc == 2 && is(argv[1], lens[1], "SLOTS"))
    cl_slots(s, o);
  else if (s->cl->old)
    out_printf(o, "-ERR Unknown subcommand or wrong number of arguments "
               "for '%.*s'. Try CLUSTER HELP.\r\n", (int)lens[1], argv[1]);
  else
    out_printf(o, "-ERR unknown subcommand '%.*s'. Try CLUSTER HELP.\r\n",
               (int)lens[1], argv[1]);
}

/* ---- replication --------------------------------------------------------- */

/* A batch: the primary's keys as they are now reach the replicas that
 * follow it and run (a stopped one catches up with the next batch). The
 * replica's data is always the primary's of some moment before: a prefix
 * of its writes, as Redis's replication stream gives. */
static void on_cl_repl(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  simcl *c = s->cl;
  unsigned i;
  if (!s->up || s->incarnation != incarnation)
    return;   /* died with it (the crash disarmed it) */
  if (s->paused_until > w->now) {
    sim_at(w, s->paused_until, NULL, on_cl_repl, s, incarnation);
    return;
  }
  s->repl_armed = 0;
  for (i = 0; i < c->n; i++) {
    simsrv *q = sim_cluster_srv(c, i);
    if (q != s && running(q) && q->synced && q->view->primary[i] == s->node &&
        simkv_copy_keys(q->kv, s->kv) != 0) {
      fprintf(stderr, "sim: out of memory\n");
      abort();
    }
  }
  sim_trace(w, 0x6d00000000ULL + s->index);
}

/* s wrote: the batch leaves a few ms later (now and then a second: a
 * replica that lags). */
static void cl_wrote(simsrv *s) {
  simworld *w = s->w;
  uint64_t lag;
  if (s->repl_armed || !cl_view_primary(s))
    return;
  s->repl_armed = 1;
  lag = sim_between(w, 0, 9) == 0 ? sim_between(w, 100, 1000)
                                  : sim_between(w, 1, 20);
  sim_at(w, w->now + lag * SIM_MS, NULL, on_cl_repl, s, s->incarnation);
}

/* A full sync: the replica takes a copy of all its primary holds, and
 * its replication id. */
static void on_cl_sync(simworld *w, void *arg, uint64_t gen) {
  simsrv *s = arg, *p;
  unsigned x = s->node, px = s->view->primary[x];
  if (s->sync_gen != gen || !s->up || px == x)
    return;
  p = sim_cluster_srv(s->cl, px);
  if (s->paused_until > w->now || !running(p) || !cl_view_primary(p)) {
    /* Tried again (not at the run's end: a replica left behind then
     * matters to nobody). */
    if (!w->stopping)
      sim_at(w, w->now + sim_between(w, 100, 300) * SIM_MS, NULL, on_cl_sync,
             s, gen);
    return;
  }
  if (simkv_copy_keys(s->kv, p->kv) != 0) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  s->synced = 1;
  s->data_ns = w->now;
  memcpy(s->replid, p->replid, sizeof(s->replid));
  sim_trace(w, 0x6e00000000ULL + s->index);
}

static void cl_sync_later(simsrv *s) {
  simworld *w = s->w;
  s->synced = 0;
  s->sync_gen++;
  sim_at(w, w->now + sim_between(w, 20, 200) * SIM_MS, NULL, on_cl_sync, s,
         s->sync_gen);
}

/* ---- failures and failovers ---------------------------------------------- */

static void cl_promote(simsrv *r, int lossless);

/* The replica's election: it wins if its primary is still failed and it
 * can still take over. */
static void on_cl_elect(simworld *w, void *arg, uint64_t a) {
  simsrv *r = arg;
  simcl *c = r->cl;
  simsrv *p = sim_cluster_srv(c, (unsigned)(a & 0xff));
  (void)w;
  if (p->gone_gen != (unsigned)(a >> 8) || p->gone_ns == 0 ||
      sim_cluster_heir(c, p->node, 1) != r || !repromote_ok(r))
    return;
  cl_promote(r, 0);
}

/* Nobody reached s for the node timeout: marked failed; a primary's
 * synced replica runs for election. */
static void on_cl_timeout(simworld *w, void *arg, uint64_t gen) {
  simsrv *s = arg, *heir;
  simcl *c = s->cl;
  simclcfg *g;
  if (s->gone_gen != gen || s->gone_ns == 0 || c->cur->failed[s->node])
    return;
  g = cfg_new(c, c->cur);
  g->failed[s->node] = 1;
  cfg_seal(g);
  sim_logf(w, "server %u (cluster node %u) marked failed%s", s->index,
           s->node, g->ok ? "" : ": the cluster is down");
  cl_publish(c, g, 0);
  heir = sim_cluster_heir(c, s->node, 1);
  if (sim_srv_primary(s) && heir != NULL)
    sim_at(w, w->now + sim_between(w, 500, 1000) * SIM_MS, NULL, on_cl_elect,
           heir, ((uint64_t)gen << 8) | s->node);
}

static void cl_gone(simsrv *s) {
  simworld *w = s->w;
  if (s->gone_ns != 0)
    return;
  s->gone_ns = w->now;
  s->gone_gen++;
  sim_at(w, w->now + s->cl->node_timeout, NULL, on_cl_timeout, s,
         s->gone_gen);
}

/* s runs again and meets the others: it learns what changed, and they
 * clear its failure. */
static void on_cl_rejoin(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  simcl *c = s->cl;
  (void)w;
  if (!running(s) || s->incarnation != incarnation)
    return;
  if (s->view->epoch < c->cur->epoch || s->bent)
    cl_adopt(s, c->cur);
  if (c->cur->failed[s->node]) {
    simclcfg *g = cfg_new(c, c->cur);
    g->failed[s->node] = 0;
    cfg_seal(g);
    cl_publish(c, g, 1u << s->node);
  }
}

/* s is back (restarted: with what its persistence kept). A replica
 * syncs again, or catches up; a restarted primary's replicas sync again
 * (its replication id is new). */
static void cl_back(simsrv *s, int restarted) {
  simworld *w = s->w;
  simcl *c = s->cl;
  unsigned i, x = s->node;
  s->gone_ns = 0;
  s->gone_gen++;
  sim_at(w, w->now + (restarted ? sim_between(w, 10, 100)
                                 : sim_between(w, 0, 5)) * SIM_MS,
         NULL, on_cl_rejoin, s, s->incarnation);
  if (!cl_view_primary(s)) {
    if (restarted)
      cl_sync_later(s);
    else if (s->synced && running(sim_cluster_srv(c, s->view->primary[x])))
      cl_wrote(sim_cluster_srv(c, s->view->primary[x]));
    return;
  }
  if (restarted)
    for (i = 0; i < c->n; i++) {
      simsrv *q = sim_cluster_srv(c, i);
      if (i != x && q->up && q->view->primary[i] == x)
        cl_sync_later(q);
    }
}

/* Replica r becomes the primary of its primary's slots; its primary and
 * the other replicas follow it. A promotion gives a new replication id,
 * but for a TAKEOVER that comes before the node's first cron tick after
 * it loaded (DESIGN, guard 7.: 3 of 10 takeovers sent as the node
 * finished loading kept the id it loaded, second_repl_offset -1). */
int sim_cluster_deposed_leads(simcl *c) {
  unsigned i;
  for (i = 0; i < c->n; i++) {
    simsrv *s = sim_cluster_srv(c, i);
    if (running(s) && s->view->primary[i] == i && c->cur->primary[i] != i)
      return 1;
  }
  return 0;
}

static void cl_promote(simsrv *r, int lossless) {
  simworld *w = r->w;
  r->cl->deposed_ns = w->now;
  simcl *c = r->cl;
  unsigned x = r->node, p = c->cur->primary[x], i, now = 1u << x;
  simsrv *ps = sim_cluster_srv(c, p);
  simclcfg *g = cfg_new(c, c->cur);
  int quirk = !lossless && w->now < r->started_ns + 100 * SIM_MS;
  for (i = 0; i < SIM_SLOTS; i++)
    if (g->owner[i] == p)
      g->owner[i] = (unsigned char)x;
  for (i = 0; i < c->n; i++)
    if (g->primary[i] == p)
      g->primary[i] = (unsigned char)x;
  g->primary[x] = (unsigned char)x;
  g->failed[x] = 0;
  cfg_seal(g);
  if (lossless) {
    /* CLUSTER FAILOVER: the primary stops its clients until the replica
     * has all it wrote, then hands over. */
    if (simkv_copy_keys(r->kv, ps->kv) != 0) {
      fprintf(stderr, "sim: out of memory\n");
      abort();
    }
    now |= 1u << p;
  }
  if (!quirk) {
    hex40(w, r->replid);
    r->second_offset = (int64_t)r->writes + 1;
  }
  r->data_ns = w->now;
  /* The primary it replaces hears of it first (the new primary's
   * broadcast; unless it is stopped or down: then when it is back). */
  if (!(now & (1u << p)))
    sim_at(w, w->now + sim_between(w, 1, 20) * SIM_MS, NULL, on_cl_adopt, ps,
           g->epoch);
  sim_logf(w, "server %u (cluster node %u) promoted in place of server %u%s",
           r->index, x, ps->index,
           lossless ? " (manual failover: nothing lost)"
           : quirk  ? " (takeover as it loaded: its replication id kept)"
                    : " (writes not replicated are lost)");
  cl_publish(c, g, now);
}

void sim_cluster_failover(simsrv *r, int lossless) {
  if (r->cl == NULL || !running(r) || sim_srv_primary(r) || !repromote_ok(r))
    return;
  cl_promote(r, lossless);
}

/* ---- resharding and disagreement ----------------------------------------- */

/* A migration's step: one key moves (MIGRATE), a few ms apart (a tool
 * sends CLUSTER GETKEYSINSLOT and MIGRATE in turn); once none is left,
 * SETSLOT ... NODE gives the slots to the target. */
static void on_cl_mig(simworld *w, void *arg, uint64_t gen) {
  simcl *c = arg;
  simsrv *from = sim_cluster_srv(c, c->mig_from);
  simsrv *to = sim_cluster_srv(c, c->mig_to);
  simclcfg *g;
  unsigned i;
  int rc;
  if (!c->migrating || c->mig_gen != gen)
    return;
  if (!running(from) || !running(to)) {
    sim_at(w, w->now + 100 * SIM_MS, NULL, on_cl_mig, c, gen);
    return;
  }
  rc = simkv_migrate_one(to->kv, from->kv, c->mig_lo, c->mig_hi,
                         sim_srv_wall_us(from), sim_srv_wall_us(to));
  if (rc < 0) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  if (rc > 0) {
    /* The key brings its history: a promotion of the source may have
     * rolled a release back (the oracle's rule, sim.c). */
    if (from->data_ns > to->data_ns)
      to->data_ns = from->data_ns;
    from->writes++;
    to->writes++;
    cl_wrote(from);
    cl_wrote(to);
    sim_trace(w, 0x6f00000000ULL + c->mig_lo);
    sim_at(w, w->now + sim_between(w, 1, 50) * SIM_MS, NULL, on_cl_mig, c,
           gen);
    return;
  }
  if (!c->mig_keys_done) {
    /* The tool's last round trips before it sets the owner. */
    c->mig_keys_done = 1;
    sim_at(w, w->now + sim_between(w, 1, 20) * SIM_MS, NULL, on_cl_mig, c,
           gen);
    return;
  }
  /* No key left: CLUSTER SETSLOT ... NODE on the target (it owns them
   * now, under a new epoch), then the source, then the bus. */
  g = cfg_new(c, c->cur);
  for (i = c->mig_lo; i <= c->mig_hi; i++)
    g->owner[i] = (unsigned char)c->mig_to;
  cfg_seal(g);
  to->mig = 0;
  c->migrating = 0;
  sim_logf(w, "slots %u-%u now on server %u", c->mig_lo, c->mig_hi,
           to->index);
  cl_publish(c, g, 1u << c->mig_to);
  sim_at(w, w->now + sim_between(w, 0, 10) * SIM_MS, NULL, on_cl_adopt, from,
         g->epoch);
}

int sim_cluster_migrate(simcl *c, unsigned from, unsigned to, unsigned lo,
                        unsigned hi) {
  simworld *w = c->w;
  simsrv *fs, *ts;
  unsigned i;
  if (c->migrating || from == to || from >= c->n || to >= c->n ||
      lo > hi || hi >= SIM_SLOTS || c->cur->primary[from] != from ||
      c->cur->primary[to] != to)
    return -1;
  fs = sim_cluster_srv(c, from);
  ts = sim_cluster_srv(c, to);
  if (!running(fs) || !running(ts) || fs->gone_ns != 0 || ts->gone_ns != 0 ||
      fs->view != c->cur || ts->view != c->cur || fs->mig || ts->mig)
    return -1;
  for (i = lo; i <= hi; i++)
    if (c->cur->owner[i] != from)
      return -1;
  /* SETSLOT IMPORTING on the target, then MIGRATING on the source. */
  c->migrating = 1;
  c->mig_from = from;
  c->mig_to = to;
  c->mig_lo = lo;
  c->mig_hi = hi;
  c->mig_gen++;
  c->mig_keys_done = 0;
  ts->mig = SIM_MIG_IN;
  fs->mig = SIM_MIG_OUT;
  ts->mig_lo = fs->mig_lo = lo;
  ts->mig_hi = fs->mig_hi = hi;
  ts->mig_peer = from;
  fs->mig_peer = to;
  sim_logf(w, "slots %u-%u migrate from server %u to server %u", lo, hi,
           fs->index, ts->index);
  sim_at(w, w->now + sim_between(w, 1, 10) * SIM_MS, NULL, on_cl_mig, c,
         c->mig_gen);
  return 0;
}

static void on_cl_unbend(simworld *w, void *arg, uint64_t gen) {
  simsrv *s = arg;
  (void)w;
  if (s->bend_gen != gen || !s->bent)
    return;
  if (!running(s)) {
    s->bent = 0;   /* it adopts the latest when it is back (cl_back) */
    return;
  }
  cl_adopt(s, s->cl->cur);
}

void sim_cluster_bend(simsrv *s, unsigned lo, unsigned hi, unsigned to,
                      uint64_t ns) {
  simworld *w = s->w;
  simcl *c = s->cl;
  simclcfg *g;
  unsigned i;
  if (c == NULL || to == s->node || to >= c->n || lo > hi ||
      hi >= SIM_SLOTS || s->view->primary[to] != to || !running(s))
    return;
  g = cfg_new(c, s->view);
  g->epoch = s->view->epoch;   /* no news: the next ones replace it */
  for (i = lo; i <= hi; i++)
    g->owner[i] = (unsigned char)to;
  cfg_seal(g);
  view_set(s, g);
  cfg_unref(g);
  s->bent = 1;
  s->bend_gen++;
  sim_logf(w, "server %u believes slots %u-%u are server %u's for %.3f s",
           s->index, lo, hi, sim_cluster_srv(c, to)->index,
           (double)ns / 1e9);
  sim_at(w, w->now + ns, NULL, on_cl_unbend, s, s->bend_gen);
}

/* ---- Redis Sentinel groups ----------------------------------------------- */

/* A group (world.h): data nodes that replicate asynchronously from the one
 * each follows (a full sync when it starts following, then batches), a
 * replication cron on each primary that counts its good replicas once a
 * second (min-replicas-to-write: NOREPLICAS below it, kv.c), and three
 * sentinels. A majority of running sentinels that reach each other but not
 * the primary for down-after-milliseconds elects one of its synced
 * replicas on their side (0.1-1 s later): it is promoted with what it had,
 * the replicas the leader reaches are reconfigured one after the other,
 * then the switch is announced: each sentinel that can hear of it names
 * the new primary (a few ms, now and then a second; a stale one later)
 * and publishes +switch-master. A node that follows the wrong primary is
 * reconfigured by a sentinel that knows better and reaches it: a replica
 * at its next cron, an old primary that still believes it leads 1-8 s
 * after that sentinel first sees it (Sentinel waits for it to report the
 * wrong role for a while). A partition splits the members in two sides:
 * replication, acknowledgements and the sentinels' view stop between them
 * (the clients reach both). */

simsrv *sim_sentinel_node(simsg *g, unsigned node) {
  return &g->w->srv[g->first + node];
}

simsrv *sim_sentinel_srv(simsg *g, unsigned k) {
  return &g->w->srv[g->sfirst + k];
}

simsrv *sim_sentinel_primary(simsg *g) {
  return sim_sentinel_node(g, g->primary);
}

static unsigned sg_member(const simsrv *s) {
  return s->sentinel ? SIM_SG_NODES + s->node : s->node;
}

/* Can two members of one group reach each other? */
static int sg_talk(const simsrv *a, const simsrv *b) {
  const simsg *g = a->sg;
  return !g->split || g->side[sg_member(a)] == g->side[sg_member(b)];
}

static int sg_leads(const simsrv *s) {
  return s->follows == s->node;
}

/* refreshGoodSlavesCount on primary p: its online replicas whose last
 * ack is at most min-replicas-max-lag seconds old (whole seconds, as
 * Redis's unixtime). */
static void sg_count(simsrv *p) {
  simsg *g = p->sg;
  int64_t lag = atoi(simkv_config(p->kv, "min-replicas-max-lag"));
  int64_t now_s = (int64_t)(p->w->now / SIM_S);
  unsigned i;
  int good = 0;
  for (i = 0; i < g->n; i++) {
    simsrv *q = sim_sentinel_node(g, i);
    if (i != p->node && q->up && q->follows == p->node && q->synced &&
        now_s - (int64_t)(q->ack_ns / SIM_S) <= lag)
      good++;
  }
  p->good = good;
}

/* A link of primary p closed (its replica went, or follows another): it
 * leaves p's count at once (freeClient). */
static void sg_link_lost(simsrv *p) {
  if (running(p) && sg_leads(p))
    sg_count(p);
}

static void sg_fill_info(simsrv *s) {
  simsg *g = s->sg;
  s->info.second_repl_offset = s->second_offset;
  if (!sg_leads(s)) {
    simsrv *p = sim_sentinel_node(g, s->follows);
    s->info.role = "slave";
    s->info.master_host = "127.0.0.1";
    s->info.master_port = p->port;
    s->info.master_link_up = s->synced && running(p) && sg_talk(s, p);
    return;
  }
  /* kv.c's NOREPLICAS reads the good ones here. */
  s->info.connected_slaves = s->good;
}

/* Replication: a batch of the primary's keys as they are now reaches the
 * replicas that follow it, run, and are on its side. */
static void on_sg_repl(simworld *w, void *arg, uint64_t incarnation) {
  simsrv *s = arg;
  simsg *g = s->sg;
  unsigned i;
  if (!s->up || s->incarnation != incarnation)
    return;
  if (s->paused_until > w->now) {
    sim_at(w, s->paused_until, NULL, on_sg_repl, s, incarnation);
    return;
  }
  s->repl_armed = 0;
  if (!sg_leads(s))
    return;
  for (i = 0; i < g->n; i++) {
    simsrv *q = sim_sentinel_node(g, i);
    if (q != s && running(q) && q->synced && q->follows == s->node &&
        sg_talk(s, q) && simkv_copy_keys(q->kv, s->kv) != 0) {
      fprintf(stderr, "sim: out of memory\n");
      abort();
    }
  }
  sim_trace(w, 0x6d10000000ULL + s->index);
}

static void sg_wrote(simsrv *s) {
  simworld *w = s->w;
  uint64_t lag;
  if (s->sentinel || s->repl_armed || !sg_leads(s))
    return;
  s->repl_armed = 1;
  lag = sim_between(w, 0, 9) == 0 ? sim_between(w, 100, 1000)
                                  : sim_between(w, 1, 20);
  sim_at(w, w->now + lag * SIM_MS, NULL, on_sg_repl, s, s->incarnation);
}

/* A full sync from the node it follows (tried again while that one does
 * not run, does not lead, or is on the other side). */
static void on_sg_sync(simworld *w, void *arg, uint64_t gen) {
  simsrv *s = arg, *p;
  if (s->sync_gen != gen || !s->up || sg_leads(s))
    return;
  p = sim_sentinel_node(s->sg, s->follows);
  if (!running(s) || !running(p) || !sg_leads(p) || !sg_talk(s, p)) {
    if (w->now < w->periodic_until)
      sim_at(w, w->now + sim_between(w, 100, 300) * SIM_MS, NULL, on_sg_sync,
             s, gen);
    return;
  }
  if (simkv_copy_keys(s->kv, p->kv) != 0) {
    fprintf(stderr, "sim: out of memory\n");
    abort();
  }
  s->synced = 1;
  s->data_ns = w->now;
  s->ack_ns = w->now;
  memcpy(s->replid, p->replid, sizeof(s->replid));
  sg_count(p);   /* replicaPutOnline */
  sim_trace(w, 0x6e10000000ULL + s->index);
}

static void sg_sync_later(simsrv *s) {
  simworld *w = s->w;
  s->synced = 0;
  s->sync_gen++;
  sim_at(w, w->now + sim_between(w, 20, 200) * SIM_MS, NULL, on_sg_sync, s,
         s->sync_gen);
}

/* s follows node p from now on (REPLICAOF). */
static void sg_follow(simsrv *s, unsigned p) {
  simworld *w = s->w;
  unsigned old = s->follows;
  if (old == p)
    return;
  if (sg_leads(s)) {
    s->demoted_ns = w->now;
    s->sg->rollback_ns = w->now;
  }
  s->wrong_since = 0;
  s->follows = p;
  sim_logf(w, "server %u (group node %u) follows server %u now", s->index,
           s->node, sim_sentinel_node(s->sg, p)->index);
  if (old != s->node)
    sg_link_lost(sim_sentinel_node(s->sg, old));
  sg_sync_later(s);
}

/* A sentinel that knows the latest election, runs and reaches s. */
static int sg_watched(const simsrv *s) {
  simsg *g = s->sg;
  unsigned k;
  if (!g->visible)
    return 0;
  for (k = 0; k < SIM_SG_SENTINELS; k++) {
    simsrv *t = sim_sentinel_srv(g, k);
    if (running(t) && g->known[k] == g->epoch && sg_talk(s, t))
      return 1;
  }
  return 0;
}

/* The sentinels put a node that follows the wrong primary right. */
static void sg_reconcile(simsrv *s) {
  simsg *g = s->sg;
  simworld *w = s->w;
  if (s->node == g->primary || s->follows == g->primary || !running(s) ||
      !sg_watched(s)) {
    s->wrong_since = 0;
    return;
  }
  if (sg_leads(s)) {
    if (s->wrong_since == 0) {
      s->wrong_since = w->now + sim_between(w, 1000, 8000) * SIM_MS;
      return;
    }
    if (w->now < s->wrong_since)
      return;
  }
  sg_follow(s, g->primary);
}

/* A data node's replication cron, once a second: a replica acks, a
 * primary counts its good replicas; and the sentinels' reconfiguration. */
static void on_sg_tick(simworld *w, void *arg, uint64_t a) {
  simsrv *s = arg;
  (void)a;
  if (w->now >= w->periodic_until)
    return;
  sim_at(w, w->now + SIM_S, NULL, on_sg_tick, s, 0);
  if (!running(s))
    return;
  if (sg_leads(s)) {
    sg_count(s);
  } else {
    simsrv *p = sim_sentinel_node(s->sg, s->follows);
    if (s->synced && p->up && sg_talk(p, s))
      s->ack_ns = w->now;
  }
  sg_reconcile(s);
}

/* Sentinel k hears of the latest election, when it can: it names the new
 * primary and publishes +switch-master. */
static void sg_tell(simsg *g, unsigned k) {
  simworld *w = g->w;
  simsrv *t = sim_sentinel_srv(g, k);
  unsigned old = g->names[k];
  char msg[128];
  int n;
  if (!g->visible || g->known[k] >= g->epoch || !running(t) ||
      w->now < g->stale_until[k] ||
      !sg_talk(t, sim_sentinel_srv(g, g->leader)))
    return;
  g->known[k] = g->epoch;
  g->names[k] = g->primary;
  if (old == g->primary)
    return;
  n = snprintf(msg, sizeof(msg), "%s 127.0.0.1 %d 127.0.0.1 %d", g->name,
               sim_sentinel_node(g, old)->port,
               sim_sentinel_node(g, g->primary)->port);
  sim_logf(w, "sentinel %u (server %u): +switch-master %s", k, t->index, msg);
  (void)publish_here(t, "+switch-master", 14, msg, (size_t)n);
}

static void on_sg_tell(simworld *w, void *arg, uint64_t k) {
  (void)w;
  sg_tell(arg, (unsigned)k);
}

static void sg_tell_later(simsg *g) {
  unsigned k;
  for (k = 0; k < SIM_SG_SENTINELS; k++)
    sim_at(g->w, g->w->now + gossip(g->w), NULL, on_sg_tell, g, k);
}

/* The side (1 or 2) whose running sentinels, two or more, cannot reach
 * the primary (0: none); *leader one of them. */
static int sg_down_side(simsg *g, unsigned *leader) {
  simsrv *p = sim_sentinel_primary(g);
  unsigned side, k;
  for (side = 0; side < 2; side++) {
    unsigned cnt = 0, lead = 0;
    for (k = 0; k < SIM_SG_SENTINELS; k++) {
      simsrv *t = sim_sentinel_srv(g, k);
      if (running(t) && (g->split ? g->side[SIM_SG_NODES + k] == side
                                  : side == 0)) {
        cnt++;
        lead = k;
      }
    }
    if (cnt >= 2 &&
        !(running(p) && sg_talk(p, sim_sentinel_srv(g, lead)))) {
      *leader = lead;
      return (int)side + 1;
    }
  }
  return 0;
}

/* A replica on the leader's side that may be elected now, or NULL. */
static simsrv *sg_heir(simsg *g, unsigned leader) {
  simsrv *t = sim_sentinel_srv(g, leader);
  unsigned i, k = (unsigned)sim_between(g->w, 0, g->n - 1);
  for (i = 0; i < g->n; i++) {
    simsrv *q = sim_sentinel_node(g, (k + i) % g->n);
    if (q->node != g->primary && !sg_leads(q) && running(q) && q->synced &&
        sg_talk(q, t) && repromote_ok(q))
      return q;
  }
  return NULL;
}

static void on_sg_announce(simworld *w, void *arg, uint64_t epoch) {
  simsg *g = arg;
  (void)w;
  if (g->epoch != epoch)
    return;
  g->visible = 1;
  sg_tell(g, g->leader);
  sg_tell_later(g);
}

static void on_sg_reconf(simworld *w, void *arg, uint64_t epoch) {
  simsrv *q = arg;
  (void)w;
  if (q->sg->epoch == epoch && running(q) && !sg_leads(q))
    sg_follow(q, q->sg->primary);
}

static void sg_check(simsg *g);

/* Node x becomes the primary (REPLICAOF NO ONE), with what it has; the
 * leader reconfigures the replicas it reaches, then the switch is
 * announced. */
static void sg_promote(simsg *g, simsrv *r, unsigned leader) {
  simworld *w = g->w;
  simsrv *old = sim_sentinel_primary(g), *t = sim_sentinel_srv(g, leader);
  unsigned i, prev = r->follows;
  uint64_t at = w->now;
  g->primary = r->node;
  g->epoch++;
  g->deposed_ns = w->now;
  g->visible = 0;
  g->leader = leader;
  r->follows = r->node;
  r->wrong_since = 0;
  hex40(w, r->replid);
  r->second_offset = (int64_t)r->writes + 1;
  r->data_ns = w->now;
  r->good = 0;
  sg_link_lost(sim_sentinel_node(g, prev));
  sim_logf(w, "server %u (group node %u) promoted in place of server %u "
           "(writes not replicated are lost)", r->index, r->node, old->index);
  sim_trace(w, 0x6c10000000ULL + g->epoch);
  for (i = 0; i < g->n; i++) {
    simsrv *q = sim_sentinel_node(g, i);
    if (q == r || sg_leads(q) || !running(q) || !sg_talk(q, t))
      continue;
    at += sim_between(w, 10, 300) * SIM_MS;
    sim_at(w, at, NULL, on_sg_reconf, q, g->epoch);
  }
  sim_at(w, at + sim_between(w, 1, 50) * SIM_MS, NULL, on_sg_announce, g,
         g->epoch);
  sg_check(g);
}

int sim_sentinel_deposed_leads(simsg *g) {
  unsigned i;
  for (i = 0; i < g->n; i++)
    if (i != g->primary && sg_leads(sim_sentinel_node(g, i)))
      return 1;
  return 0;
}

static void on_sg_elect(simworld *w, void *arg, uint64_t a) {
  simsg *g = arg;
  unsigned leader;
  simsrv *r = sim_sentinel_node(g, (unsigned)(a & 0xff));
  (void)w;
  if ((unsigned)(a >> 8) != g->gone_gen || g->gone_ns == 0 ||
      sg_down_side(g, &leader) == 0)
    return;
  if (r->node == g->primary || sg_leads(r) || !running(r) || !r->synced ||
      !sg_talk(r, sim_sentinel_srv(g, leader)) || !repromote_ok(r))
    return;
  sg_promote(g, r, leader);
}

/* The primary was down for down-after-milliseconds on one side: its
 * sentinels elect a leader, which picks a replica (tried again each
 * second while none can be). */
static void on_sg_timeout(simworld *w, void *arg, uint64_t gen) {
  simsg *g = arg;
  unsigned leader;
  simsrv *heir;
  if (g->gone_gen != gen || g->gone_ns == 0 || w->now >= w->periodic_until ||
      sg_down_side(g, &leader) == 0)
    return;
  heir = sg_heir(g, leader);
  if (heir == NULL) {
    sim_at(w, w->now + SIM_S, NULL, on_sg_timeout, g, gen);
    return;
  }
  sim_logf(w, "group %s: server %u is down for the sentinels", g->name,
           sim_sentinel_primary(g)->index);
  sim_at(w, w->now + sim_between(w, 100, 1000) * SIM_MS, NULL, on_sg_elect,
         g, ((uint64_t)gen << 8) | heir->node);
}

static void sg_check(simsg *g) {
  simworld *w = g->w;
  unsigned leader;
  int down = sg_down_side(g, &leader) != 0;
  if (down && g->gone_ns == 0) {
    g->gone_ns = w->now;
    g->gone_gen++;
    sim_at(w, w->now + g->down_after, NULL, on_sg_timeout, g, g->gone_gen);
  } else if (!down && g->gone_ns != 0) {
    g->gone_ns = 0;
    g->gone_gen++;
  }
}

/* The group's own second: the sentinels hear what they can, and look at
 * the primary. */
static void on_sg_group_tick(simworld *w, void *arg, uint64_t a) {
  simsg *g = arg;
  unsigned k;
  (void)a;
  if (w->now >= w->periodic_until)
    return;
  sim_at(w, w->now + SIM_S, NULL, on_sg_group_tick, g, 0);
  for (k = 0; k < SIM_SG_SENTINELS; k++)
    sg_tell(g, k);
  sg_check(g);
}

/* A member crashed or stopped. */
static void sg_gone(simsrv *s) {
  if (!s->sentinel && !s->up && !sg_leads(s))
    sg_link_lost(sim_sentinel_node(s->sg, s->follows));
  sg_check(s->sg);
}

/* A member is back: restarted (with what its persistence kept: a primary
 * comes back believing it leads, a replica syncs again), or resumed (a
 * primary's cron catches up once what the clients sent meanwhile ran). */
static void sg_back(simsrv *s, int restarted) {
  simsg *g = s->sg;
  simworld *w = s->w;
  unsigned i;
  if (s->sentinel) {
    sim_at(w, w->now + sim_between(w, 10, 100) * SIM_MS, NULL, on_sg_tell, g,
           s->node);
  } else if (sg_leads(s)) {
    s->good = 0;
    for (i = 0; restarted && i < g->n; i++) {
      simsrv *q = sim_sentinel_node(g, i);
      if (q != s && q->up && q->follows == s->node)
        sg_sync_later(q);
    }
    sg_count(s);
  } else if (restarted) {
    sg_sync_later(s);
  } else if (s->synced) {
    sg_wrote(sim_sentinel_node(g, s->follows));
  }
  sg_check(g);
}

static void sg_command(simsrv *s, int argc, const char *const *argv,
                       const size_t *lens, simkv_out *o) {
  simsg *g = s->sg;
  unsigned k = s->node, i, n = 0;
  char port[16];
  int known;
  if (is(argv[0], lens[0], "PING")) {
    out_printf(o, "+PONG\r\n");
    return;
  }
  if (!is(argv[0], lens[0], "SENTINEL")) {
    out_printf(o, "-ERR unknown command '%.*s', with args beginning with: "
               "\r\n", (int)(lens[0] < 64 ? lens[0] : 64), argv[0]);
    return;
  }
  known = argc == 3 && is(argv[2], lens[2], g->name);
  if (argc == 3 && is(argv[1], lens[1], "get-master-addr-by-name")) {
    if (!known) {
      out_printf(o, "*-1\r\n");
      return;
    }
    snprintf(port, sizeof(port), "%d",
             sim_sentinel_node(g, g->names[k])->port);
    out_printf(o, "*2\r\n$9\r\n127.0.0.1\r\n");
    out_bulk(o, port, strlen(port));
    return;
  }
  if (argc == 3 && (is(argv[1], lens[1], "REPLICAS") ||
                    is(argv[1], lens[1], "SLAVES"))) {
    if (!known) {
      out_printf(o, "-ERR No such master with that name\r\n");
      return;
    }
    /* Every node but the one it names (down ones too), Redis 7.0's
     * fields for a replica. */
    out_printf(o, "*%u\r\n", g->n - 1);
    for (i = 0; i < g->n; i++) {
      simsrv *q = sim_sentinel_node(g, i), *m;
      int ok = running(q) && sg_talk(s, q);
      char name[32], v[5][24];
      const char *f[42];
      unsigned j;
      if (i == g->names[k])
        continue;
      m = sim_sentinel_node(g, g->names[k]);
      snprintf(name, sizeof(name), "127.0.0.1:%d", q->port);
      snprintf(v[0], sizeof(v[0]), "%d", q->port);
      snprintf(v[1], sizeof(v[1]), "%" PRIu64,
               (uint64_t)(g->down_after / SIM_MS));
      snprintf(v[2], sizeof(v[2]), "%d", m->port);
      snprintf(v[3], sizeof(v[3]), "%" PRIu64, q->writes);
      snprintf(v[4], sizeof(v[4]), "%u", 100 + n);
      f[0] = "name"; f[1] = name;
      f[2] = "ip"; f[3] = "127.0.0.1";
      f[4] = "port"; f[5] = v[0];
      f[6] = "runid"; f[7] = q->run_id;
      f[8] = "flags"; f[9] = ok ? "slave" : "s_down,slave,disconnected";
      f[10] = "link-pending-commands"; f[11] = "0";
      f[12] = "link-refcount"; f[13] = "1";
      f[14] = "last-ping-sent"; f[15] = "0";
      f[16] = "last-ok-ping-reply"; f[17] = v[4];
      f[18] = "last-ping-reply"; f[19] = v[4];
      f[20] = "down-after-milliseconds"; f[21] = v[1];
      f[22] = "info-refresh"; f[23] = "100";
      f[24] = "role-reported"; f[25] = "slave";
      f[26] = "role-reported-time"; f[27] = "1000";
      f[28] = "master-link-down-time"; f[29] = "0";
      f[30] = "master-link-status"; f[31] = ok ? "ok" : "err";
      f[32] = "master-host"; f[33] = "127.0.0.1";
      f[34] = "master-port"; f[35] = v[2];
      f[36] = "slave-priority"; f[37] = "100";
      f[38] = "slave-repl-offset"; f[39] = v[3];
      f[40] = "replica-announced"; f[41] = "1";
      out_printf(o, "*42\r\n");
      for (j = 0; j < 42; j++)
        out_bulk(o, f[j], strlen(f[j]));
      n++;
    }
    return;
  }
  out_printf(o, "-ERR Unknown sentinel subcommand '%.*s'\r\n",
             (int)(argc > 1 && lens[1] < 64 ? lens[1] : 0),
             argc > 1 ? argv[1] : "");
}

simsg *sim_sentinel_new(simworld *w, unsigned first, unsigned replicas,
                        const char *name, uint64_t down_after_ms) {
  simsg *g = xcalloc(1, sizeof(*g));
  unsigned i, n = 1 + replicas;
  if (n > SIM_SG_NODES || first + n + SIM_SG_SENTINELS > w->n_srv ||
      w->n_sg == SIM_MAX_GROUPS) {
    fprintf(stderr, "sim: a sentinel group of %u nodes does not fit\n", n);
    abort();
  }
  g->w = w;
  g->first = first;
  g->n = n;
  g->sfirst = first + n;
  snprintf(g->name, sizeof(g->name), "%s", name);
  g->down_after = down_after_ms * SIM_MS;
  g->visible = 1;
  for (i = 0; i < n; i++) {
    simsrv *s = sim_sentinel_node(g, i);
    s->sg = g;
    s->node = i;
    s->follows = 0;
    s->synced = 1;   /* empty, as its primary */
    s->ack_ns = w->now;
    if (i > 0)
      memcpy(s->replid, sim_sentinel_node(g, 0)->replid, 41);
    srv_fill_info(s);
    sim_at(w, w->now + sim_between(w, 0, 999) * SIM_MS, NULL, on_sg_tick, s,
           0);
  }
  sim_sentinel_node(g, 0)->good = (int)replicas;   /* all online */
  for (i = 0; i < SIM_SG_SENTINELS; i++) {
    simsrv *s = sim_sentinel_srv(g, i);
    s->sg = g;
    s->sentinel = 1;
    s->node = i;
  }
  sim_at(w, w->now + sim_between(w, 0, 999) * SIM_MS, NULL, on_sg_group_tick,
         g, 0);
  w->sg[w->n_sg++] = g;
  return g;
}

int sim_sentinel_would_fail_over(const simsrv *s, uint64_t ns) {
  return s->sg != NULL && !s->sentinel && s->node == s->sg->primary &&
         s->sg->n > 1 && ns >= s->sg->down_after;
}

int sim_sentinel_switch(simsg *g) {
  unsigned k, i, k0 = (unsigned)sim_between(g->w, 0, SIM_SG_SENTINELS - 1);
  if (!g->visible)
    return -1;   /* a failover under way */
  for (i = 0; i < SIM_SG_SENTINELS; i++) {
    simsrv *r;
    k = (k0 + i) % SIM_SG_SENTINELS;
    if (!running(sim_sentinel_srv(g, k)))
      continue;
    r = sg_heir(g, k);
    if (r == NULL)
      return -1;
    sim_logf(g->w, "sentinel %u: SENTINEL FAILOVER %s", k, g->name);
    sg_promote(g, r, k);
    return 0;
  }
  return -1;
}

void sim_sentinel_stale(simsg *g, unsigned k, uint64_t ns) {
  simworld *w = g->w;
  if (k >= SIM_SG_SENTINELS)
    return;
  if (g->stale_until[k] < w->now + ns)
    g->stale_until[k] = w->now + ns;
  sim_logf(w, "sentinel %u (server %u) learns nothing for %.3f s", k,
           sim_sentinel_srv(g, k)->index, (double)ns / 1e9);
}

static void on_sg_heal(simworld *w, void *arg, uint64_t gen) {
  simsg *g = arg;
  (void)w;
  if (g->split_gen == gen)
    sim_sentinel_heal(g);
}

void sim_sentinel_heal(simsg *g) {
  unsigned i;
  if (!g->split)
    return;
  g->split = 0;
  g->split_gen++;
  memset(g->side, 0, sizeof(g->side));
  sim_logf(g->w, "group %s: the partition heals", g->name);
  for (i = 0; i < g->n; i++)
    sg_wrote(sim_sentinel_node(g, i));
  sg_tell_later(g);
  sg_check(g);
}

void sim_sentinel_split(simsg *g, unsigned with, unsigned k, uint64_t ns) {
  simworld *w = g->w;
  unsigned i;
  if (g->split || k >= SIM_SG_SENTINELS)
    return;
  memset(g->side, 0, sizeof(g->side));
  for (i = 0; i < g->n && i < SIM_SG_NODES; i++)
    if (i == g->primary || (with & (1u << i)))
      g->side[i] = 1;
  g->side[SIM_SG_NODES + k % SIM_SG_SENTINELS] = 1;
  g->split = 1;
  g->split_gen++;
  sim_logf(w, "group %s: partitioned for %.3f s: server %u (its primary), "
           "replicas %#x and sentinel %u on one side", g->name,
           (double)ns / 1e9, sim_sentinel_primary(g)->index, with, k);
  sim_at(w, w->now + ns, NULL, on_sg_heal, g, g->split_gen);
  sg_check(g);
}

/* ---- cuts ---------------------------------------------------------------- */

void sim_cut(simworld *w, unsigned client, unsigned srv, int mode, int dirs) {
  unsigned char old, now = 0;
  if (client >= w->max_clients || srv >= w->n_srv)
    return;
  old = w->cut[client][srv];
  if (mode == 1)
    now = (unsigned char)(((dirs & 1) ? 1 : 0) | ((dirs & 2) ? 4 : 0));
  else if (mode == 2)
    now = (unsigned char)(((dirs & 1) ? 2 : 0) | ((dirs & 2) ? 8 : 0));
  w->cut[client][srv] = now;
  if (old == now)
    return;
  /* Healed directions: what they held moves on (held chunks arrive one
   * latency from now, in order; a held SYN is tried again). A connection
   * that lost bytes to a drop is reset once no direction drops any more:
   * TCP never delivers what follows a hole (before this, a reply could
   * arrive for a later request and be taken for a lost one's). */
  {
    simsrv *s = &w->srv[srv];
    simlink *l, *next;
    if (!(now & (2 | 8)))
      for (l = s->conns; l != NULL; l = next) {
        next = l->next_srv;
        if (l->env->id != client || !l->lost || l->reset)
          continue;
        link_reset(w, l);
      }
    for (l = s->conns; l != NULL; l = l->next_srv) {
      if (l->env->id != client)
        continue;
      if ((old & 1) && !(now & 1) && l->up.head != NULL) {
        chunk *c;
        for (c = l->up.head; c != NULL; c = c->next)
          if (c->at <= w->now)
            c->at = dir_next_at(&l->up, w->now + latency(w));
        for (c = l->up.head; c != NULL; c = c->next)
          dir_schedule(w, l, 1, c->at);
      }
      if ((old & 4) && !(now & 4) && l->down.head != NULL) {
        chunk *c;
        for (c = l->down.head; c != NULL; c = c->next)
          if (c->at <= w->now)
            c->at = dir_next_at(&l->down, w->now + latency(w));
        for (c = l->down.head; c != NULL; c = c->next)
          dir_schedule(w, l, 0, c->at);
      }
    }
  }
}

/* ---- the world ----------------------------------------------------------- */

void sim_init(simworld *w, uint64_t seed, unsigned n_srv, int base_port,
              unsigned max_clients) {
  unsigned i;
  memset(w, 0, sizeof(*w));
  w->rng = seed;
  w->trace = 14695981039346656037ULL;
  w->now = SIM_S;
  w->lat_min = 50000;       /* 50 us */
  w->lat_max = 400000;      /* 400 us */
  w->max_clients = max_clients;
  w->trace_client = -1;
  w->periodic_until = UINT64_MAX;
  w->cut = xcalloc(max_clients, sizeof(*w->cut));
  w->n_srv = n_srv;
  w->base_port = base_port;
  w->srv = xcalloc(n_srv, sizeof(*w->srv));
  for (i = 0; i < n_srv; i++) {
    simsrv *s = &w->srv[i];
    s->w = w;
    s->index = i;
    s->port = base_port + (int)i;
    s->kv = simkv_new();
    if (s->kv == NULL) {
      fprintf(stderr, "sim: out of memory\n");
      abort();
    }
    s->wall_rate = 1.0;
    s->wall_ref_ns = w->now;
    /* Wall clocks near each other, as NTP keeps them: within 2 ms. */
    s->wall_base_us = 1700000000000000LL + (int64_t)sim_between(w, 0, 2000);
    srv_start(s);
    sim_at(w, w->now + SIM_S, NULL, on_fsync, s, s->incarnation);
  }
}

void sim_free(simworld *w) {
  unsigned i;
  for (i = 0; i < w->n_cl; i++)
    cl_free(w->cl[i]);
  for (i = 0; i < w->n_sg; i++)
    free(w->sg[i]);
  for (i = 0; i < w->n_srv; i++) {
    simsrv *s = &w->srv[i];
    while (s->conns != NULL)
      srv_drop(s->conns);
    simkv_free(s->kv);
    if (s->rdb != NULL)
      simkv_free(s->rdb);
    if (s->fsynced != NULL)
      simkv_free(s->fsynced);
  }
  free(w->srv);
  free(w->cut);
  free(w->heap);
  memset(w, 0, sizeof(*w));
}
