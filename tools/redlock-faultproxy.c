/* redlock-faultproxy: a small TCP fault proxy on libuv, one listener per
 * master, for failure drills and the fault tests (no toxiproxy needed).
 *
 *   redlock-faultproxy --control PORT LPORT:UHOST:UPORT [LPORT:UHOST:UPORT...]
 *
 * Listens on 127.0.0.1:LPORT and forwards to UHOST:UPORT. Control: connect
 * to 127.0.0.1:PORT and send one command per line; the answer is "OK" or
 * "ERR <why>" on a line. I is the proxy's index (1-based, in argv order).
 *   I normal        pass everything through (and listen again after refuse)
 *   I latency MS    delay every chunk, both directions, by MS
 *   I blackhole     requests still reach the server, replies are dropped
 *                   (the asymmetric partition: the SET lands, the OK is lost)
 *   I reset         reset (RST) every open connection and each new one
 *   I refuse        stop listening: connections are refused
 *   I status        "OK mode=... conns=N"
 * Bounded: at most 256 connections per proxy; every buffer is freed when
 * its connection closes. Loopback only. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#define MAX_PROXIES 32
#define MAX_CONNS 256

typedef enum { M_NORMAL, M_LATENCY, M_BLACKHOLE, M_RESET, M_REFUSE } mode_t_;

typedef struct proxy proxy;
typedef struct pair pair;

typedef struct chunk {
  struct chunk *next;
  uint64_t due;        /* uv_now() ms */
  size_t len;
  char data[];
} chunk;

typedef struct side {
  uv_tcp_t tcp;
  pair *p;
  int open;            /* handle initialized and not closed */
  chunk *head, *tail;  /* delayed data to write to THIS side */
  uv_timer_t timer;
  int timer_open;
} side;

struct pair {
  proxy *px;
  side client, server;
  int closing;
  int handles;         /* open handles: freed at 0 */
  pair *next;
};

struct proxy {
  int index;
  int lport;
  struct sockaddr_storage upstream;
  uv_tcp_t listener;
  int listening;
  mode_t_ mode;
  uint64_t latency_ms;
  pair *pairs;
  int n_pairs;
};

static uv_loop_t *loop;
static proxy proxies[MAX_PROXIES];
static int n_proxies;
static uv_tcp_t control;

static void start_listening(proxy *px);

/* ---- pairs ------------------------------------------------------------- */

static void pair_unlink(pair *p) {
  pair **pp = &p->px->pairs;
  while (*pp != NULL && *pp != p)
    pp = &(*pp)->next;
  if (*pp == p)
    *pp = p->next;
  p->px->n_pairs--;
}

static void on_handle_closed(uv_handle_t *h) {
  side *s = h->data;   /* both the tcp and the timer point to their side */
  pair *p = s->p;
  if (--p->handles == 0) {
    chunk *c;
    for (c = p->client.head; c != NULL;) {
      chunk *n = c->next;
      free(c);
      c = n;
    }
    for (c = p->server.head; c != NULL;) {
      chunk *n = c->next;
      free(c);
      c = n;
    }
    free(p);
  }
}

static void side_close(side *s, int reset) {
  if (s->open) {
    s->open = 0;
    if (!reset || uv_tcp_close_reset(&s->tcp, on_handle_closed) != 0)
      uv_close((uv_handle_t *)&s->tcp, on_handle_closed);
  }
  if (s->timer_open) {
    s->timer_open = 0;
    uv_close((uv_handle_t *)&s->timer, on_handle_closed);
  }
}

static void pair_close(pair *p, int reset) {
  if (p->closing)
    return;
  p->closing = 1;
  pair_unlink(p);
  side_close(&p->client, reset);
  side_close(&p->server, reset);
}

static void on_written(uv_write_t *w, int status) {
  free(w->data);
  free(w);
  (void)status;
}

static void write_now(side *to, const char *data, size_t len) {
  uv_write_t *w;
  char *copy;
  uv_buf_t b;
  if (!to->open || to->p->closing)
    return;
  w = malloc(sizeof(*w));
  copy = malloc(len);
  if (w == NULL || copy == NULL) {
    free(w);
    free(copy);
    pair_close(to->p, 0);
    return;
  }
  memcpy(copy, data, len);
  w->data = copy;
  b = uv_buf_init(copy, (unsigned)len);
  if (uv_write(w, (uv_stream_t *)&to->tcp, &b, 1, on_written) != 0) {
    free(copy);
    free(w);
    pair_close(to->p, 0);
  }
}

static void on_delay_timer(uv_timer_t *t) {
  side *to = t->data;
  uint64_t now = uv_now(loop);
  while (to->head != NULL && to->head->due <= now) {
    chunk *c = to->head;
    to->head = c->next;
    if (to->head == NULL)
      to->tail = NULL;
    write_now(to, c->data, c->len);
    free(c);
    if (to->p->closing)
      return;
  }
  if (to->head != NULL)
    uv_timer_start(&to->timer, on_delay_timer, to->head->due - now, 0);
}

static void forward(side *to, const char *data, size_t len) {
  proxy *px = to->p->px;
  chunk *c;
  if (px->mode == M_BLACKHOLE && to == &to->p->client)
    return;   /* the reply is lost; the request went through */
  if (px->mode != M_LATENCY && to->head == NULL) {
    write_now(to, data, len);
    return;
  }
  c = malloc(sizeof(*c) + len);
  if (c == NULL) {
    pair_close(to->p, 0);
    return;
  }
  c->next = NULL;
  c->len = len;
  c->due = uv_now(loop) + (px->mode == M_LATENCY ? px->latency_ms : 0);
  memcpy(c->data, data, len);
  if (to->tail != NULL)
    to->tail->next = c;
  else
    to->head = c;
  to->tail = c;
  if (!uv_is_active((uv_handle_t *)&to->timer))
    uv_timer_start(&to->timer, on_delay_timer, c->due - uv_now(loop), 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char slab[65536];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(slab, sizeof(slab));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  side *from = st->data;
  pair *p = from->p;
  side *to = from == &p->client ? &p->server : &p->client;
  if (n < 0) {
    pair_close(p, n == UV_ECONNRESET);
    return;
  }
  if (n > 0)
    forward(to, buf->base, (size_t)n);
}

static int side_init(pair *p, side *s) {
  s->p = p;
  if (uv_tcp_init(loop, &s->tcp) != 0)
    return -1;
  s->tcp.data = s;
  s->open = 1;
  p->handles++;
  uv_timer_init(loop, &s->timer);
  s->timer.data = s;
  s->timer_open = 1;
  p->handles++;
  return 0;
}

static void on_upstream(uv_connect_t *req, int status) {
  pair *p = req->data;
  free(req);
  if (p->closing)
    return;
  if (status != 0) {
    pair_close(p, 1);   /* upstream down: the client sees a reset */
    return;
  }
  uv_tcp_nodelay(&p->server.tcp, 1);
  uv_read_start((uv_stream_t *)&p->client.tcp, on_alloc, on_read);
  uv_read_start((uv_stream_t *)&p->server.tcp, on_alloc, on_read);
}

static void on_accept(uv_stream_t *srv, int status) {
  proxy *px = srv->data;
  pair *p;
  uv_connect_t *req;
  if (status != 0)
    return;
  p = calloc(1, sizeof(*p));
  if (p == NULL)
    return;
  p->px = px;
  p->next = px->pairs;
  px->pairs = p;
  px->n_pairs++;
  if (side_init(p, &p->client) != 0 ||
      uv_accept(srv, (uv_stream_t *)&p->client.tcp) != 0) {
    pair_close(p, 0);
    return;
  }
  if (px->mode == M_RESET || px->n_pairs > MAX_CONNS) {
    pair_close(p, 1);
    return;
  }
  uv_tcp_nodelay(&p->client.tcp, 1);
  req = malloc(sizeof(*req));
  if (req == NULL || side_init(p, &p->server) != 0) {
    free(req);
    pair_close(p, 0);
    return;
  }
  req->data = p;
  if (uv_tcp_connect(req, &p->server.tcp,
                     (const struct sockaddr *)&px->upstream,
                     on_upstream) != 0) {
    free(req);
    pair_close(p, 1);
  }
}

static void start_listening(proxy *px) {
  struct sockaddr_in a;
  if (px->listening)
    return;
  uv_ip4_addr("127.0.0.1", px->lport, &a);
  uv_tcp_init(loop, &px->listener);
  px->listener.data = px;
  if (uv_tcp_bind(&px->listener, (const struct sockaddr *)&a, 0) != 0 ||
      uv_listen((uv_stream_t *)&px->listener, 128, on_accept) != 0) {
    fprintf(stderr, "faultproxy: cannot listen on 127.0.0.1:%d\n",
            px->lport);
    exit(1);
  }
  px->listening = 1;
}

static void stop_listening(proxy *px) {
  if (!px->listening)
    return;
  px->listening = 0;
  uv_close((uv_handle_t *)&px->listener, NULL);
}

/* ---- control ------------------------------------------------------------ */

typedef struct ctl {
  uv_tcp_t tcp;
  char line[256];
  size_t len;
} ctl;

static const char *mode_name(mode_t_ m) {
  switch (m) {
    case M_NORMAL: return "normal";
    case M_LATENCY: return "latency";
    case M_BLACKHOLE: return "blackhole";
    case M_RESET: return "reset";
    case M_REFUSE: return "refuse";
  }
  return "?";
}

static void ctl_reply(ctl *c, const char *text) {
  {
    uv_write_t *w = malloc(sizeof(*w));
    size_t n = strlen(text);
    char *copy = malloc(n);
    uv_buf_t b;
    if (w == NULL || copy == NULL) {
      free(w);
      free(copy);
      return;
    }
    memcpy(copy, text, n);
    w->data = copy;
    b = uv_buf_init(copy, (unsigned)n);
    if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
      free(copy);
      free(w);
    }
  }
}

static void run_command(ctl *c, char *line) {
  char verb[32];
  char out[128];
  int idx = 0;
  long arg = 0;
  int n = sscanf(line, "%d %31s %ld", &idx, verb, &arg);
  proxy *px;
  if (n < 2 || idx < 1 || idx > n_proxies) {
    ctl_reply(c, "ERR usage: I normal|latency MS|blackhole|reset|refuse|"
                 "status\n");
    return;
  }
  px = &proxies[idx - 1];
  if (strcmp(verb, "status") == 0) {
    snprintf(out, sizeof(out), "OK mode=%s latency=%llu conns=%d\n",
             mode_name(px->mode), (unsigned long long)px->latency_ms,
             px->n_pairs);
    ctl_reply(c, out);
    return;
  }
  if (strcmp(verb, "normal") == 0) {
    px->mode = M_NORMAL;
    start_listening(px);
  } else if (strcmp(verb, "latency") == 0 && n == 3 && arg >= 0 &&
             arg <= 600000) {
    px->mode = M_LATENCY;
    px->latency_ms = (uint64_t)arg;
    start_listening(px);
  } else if (strcmp(verb, "blackhole") == 0) {
    px->mode = M_BLACKHOLE;
    start_listening(px);
  } else if (strcmp(verb, "reset") == 0 || strcmp(verb, "refuse") == 0) {
    px->mode = verb[2] == 's' ? M_RESET : M_REFUSE;
    while (px->pairs != NULL)
      pair_close(px->pairs, 1);
    if (px->mode == M_REFUSE)
      stop_listening(px);
    else
      start_listening(px);
  } else {
    ctl_reply(c, "ERR unknown command\n");
    return;
  }
  ctl_reply(c, "OK\n");
}

static void on_ctl_closed(uv_handle_t *h) {
  free(h->data);
}

static void on_ctl_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  ctl *c = h->data;
  (void)s;
  *buf = uv_buf_init(c->line + c->len, (unsigned)(sizeof(c->line) - 1 -
                                                  c->len));
}

static void on_ctl_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  ctl *c = st->data;
  char *nl;
  (void)buf;
  if (n < 0) {
    uv_close((uv_handle_t *)&c->tcp, on_ctl_closed);
    return;
  }
  c->len += (size_t)n;
  c->line[c->len] = '\0';
  while ((nl = strchr(c->line, '\n')) != NULL) {
    *nl = '\0';
    run_command(c, c->line);
    memmove(c->line, nl + 1, c->len - (size_t)(nl + 1 - c->line) + 1);
    c->len = strlen(c->line);
  }
  if (c->len >= sizeof(c->line) - 1) {
    ctl_reply(c, "ERR line too long\n");
    c->len = 0;
  }
}

static void on_ctl_accept(uv_stream_t *srv, int status) {
  ctl *c;
  if (status != 0)
    return;
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_ctl_closed);
    return;
  }
  uv_read_start((uv_stream_t *)&c->tcp, on_ctl_alloc, on_ctl_read);
}

static void usage(void) __attribute__((noreturn));

static void usage(void) {
  fprintf(stderr, "usage: redlock-faultproxy --control PORT "
                  "LPORT:UHOST:UPORT [LPORT:UHOST:UPORT...]\n");
  exit(64);
}

int main(int argc, char **argv) {
  struct sockaddr_in a;
  int cport;
  int i;
  if (argc < 4 || strcmp(argv[1], "--control") != 0)
    usage();
  cport = atoi(argv[2]);
  if (cport < 1 || cport > 65535)
    usage();
  signal(SIGPIPE, SIG_IGN);   /* a peer gone mid-write is not fatal */
  loop = uv_default_loop();
  for (i = 3; i < argc; i++) {
    proxy *px;
    char host[64];
    int lport = 0, uport = 0;
    if (n_proxies == MAX_PROXIES ||
        sscanf(argv[i], "%d:%63[^:]:%d", &lport, host, &uport) != 3)
      usage();
    px = &proxies[n_proxies++];
    px->index = n_proxies;
    px->lport = lport;
    if (uv_ip4_addr(host, uport, (struct sockaddr_in *)&px->upstream) != 0)
      usage();
    start_listening(px);
  }
  uv_ip4_addr("127.0.0.1", cport, &a);
  uv_tcp_init(loop, &control);
  if (uv_tcp_bind(&control, (const struct sockaddr *)&a, 0) != 0 ||
      uv_listen((uv_stream_t *)&control, 16, on_ctl_accept) != 0) {
    fprintf(stderr, "faultproxy: cannot listen on control port %d\n", cport);
    return 1;
  }
  fprintf(stderr, "faultproxy: %d proxies, control on 127.0.0.1:%d\n",
          n_proxies, cport);
  return uv_run(loop, UV_RUN_DEFAULT);
}
