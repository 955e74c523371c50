/* redlock-faultproxy: a small TCP fault proxy on libuv, one listener per
 * master, for failure drills and the fault tests (no toxiproxy needed).
 *
 *   redlock-faultproxy [--bind ADDR] [--http PORT] --control PORT
 *                      [NAME=]LPORT:UHOST:UPORT [[NAME=]LPORT:UHOST:UPORT...]
 *   redlock-faultproxy -host=ADDR -config=FILE [-port=PORT]
 *
 * The second form is toxiproxy's command line, as the compose files give
 * it to their toxiproxy service: the proxies come from toxiproxy's JSON
 * config (name, listen, upstream, enabled; each bound on ADDR), and the
 * HTTP API below listens on ADDR:PORT (8474). It lets the drill's local
 * image stand in for toxiproxy's (cluster-compose/README.md says why).
 *
 * Listens on ADDR:LPORT (default 127.0.0.1: loopback unless told; the
 * containers' image binds 0.0.0.0 inside its own network namespace) and
 * forwards to UHOST:UPORT. UHOST is an IPv4 address, or a host name looked
 * up again for every new connection (a container that restarts, or is
 * reconnected to its network, may come back with another address;
 * toxiproxy resolves per connection too). Control: connect to
 * 127.0.0.1:PORT and send one command per line; the answer is "OK" or
 * "ERR <why>" on a line. I is the proxy's index (1-based, in argv order).
 *   I normal        pass everything through (and listen again after refuse)
 *   I latency MS    delay every chunk, both directions, by MS
 *   I blackhole     requests still reach the server, replies are dropped
 *                   (the asymmetric partition: the SET lands, the OK is lost)
 *   I reset         reset (RST) every open connection and each new one
 *   I refuse        stop listening: connections are refused
 *   I status        "OK mode=... conns=N"
 * --http PORT (on ADDR) speaks the part of toxiproxy's HTTP API that the
 * fault recipes of cluster-compose/README.md use, so the same curl lines
 * drive this proxy in the containers (a proxy's name is NAME=, default
 * redisI):
 *   POST /proxies/NAME/toxics  {"type":"latency","attributes":{"latency":MS}}
 *                              latency; {"type":"timeout","stream":
 *                              "downstream","attributes":{"timeout":0}}
 *                              blackhole; {"type":"reset_peer",...} reset
 *   POST /proxies/NAME         {"enabled":false} refuse, true: normal
 *   DELETE /proxies/NAME/toxics/ANY, POST /reset (all): normal
 *   GET /proxies, GET /version
 * Anything else gets a 4xx with a JSON error and changes nothing. One
 * mode per proxy (a new toxic replaces the last), and latency delays both
 * directions (toxiproxy's latency toxic delays the stream it names,
 * downstream by default).
 * Bounded: at most 256 connections per proxy, 16 KB per HTTP request;
 * every buffer is freed when its connection closes. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
  char name[32];
  char uhost[64];      /* as given; looked up per connection if a name */
  int uport;
  int by_name;         /* uhost is not an IPv4 literal */
  struct sockaddr_storage upstream;   /* when !by_name */
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
static uv_tcp_t http;
static const char *bind_addr = "127.0.0.1";

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

/* A pair is freed when its last open handle is closed; a pending name
 * lookup holds a reference too. */
static void pair_unref(pair *p) {
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

static void on_handle_closed(uv_handle_t *h) {
  side *s = h->data;   /* both the tcp and the timer point to their side */
  pair_unref(s->p);
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

static void on_resolved(uv_getaddrinfo_t *gr, int status,
                        struct addrinfo *res) {
  pair *p = gr->data;
  uv_connect_t *req = NULL;
  free(gr);
  if (!p->closing && status == 0 && res != NULL &&
      (req = malloc(sizeof(*req))) != NULL) {
    req->data = p;
    if (uv_tcp_connect(req, &p->server.tcp, res->ai_addr, on_upstream) !=
        0) {
      free(req);
      req = NULL;
    }
  }
  if (res != NULL)
    uv_freeaddrinfo(res);
  if (req == NULL)
    pair_close(p, 1);   /* no such host now: the client sees a reset */
  pair_unref(p);        /* the lookup's reference */
}

/* The upstream by name, looked up anew for this connection. */
static void resolve_upstream(pair *p) {
  struct addrinfo hints;
  char port[8];
  uv_getaddrinfo_t *gr = malloc(sizeof(*gr));
  if (gr == NULL) {
    pair_close(p, 0);
    return;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(port, sizeof(port), "%d", p->px->uport);
  gr->data = p;
  p->handles++;   /* the pair outlives the lookup */
  if (uv_getaddrinfo(loop, gr, on_resolved, p->px->uhost, port, &hints) !=
      0) {
    free(gr);
    pair_close(p, 1);
    pair_unref(p);
  }
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
  if (px->by_name) {
    free(req);
    resolve_upstream(p);
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
  uv_ip4_addr(bind_addr, px->lport, &a);
  uv_tcp_init(loop, &px->listener);
  px->listener.data = px;
  if (uv_tcp_bind(&px->listener, (const struct sockaddr *)&a, 0) != 0 ||
      uv_listen((uv_stream_t *)&px->listener, 128, on_accept) != 0) {
    fprintf(stderr, "faultproxy: cannot listen on %s:%d\n", bind_addr,
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

/* ---- toxiproxy's HTTP API (the part the fault recipes use) --------------- */

/* One request per connection (Connection: close), as curl sends them. */
typedef struct hconn {
  uv_tcp_t tcp;
  char buf[16384];
  size_t len;
  int answered;
} hconn;

static void on_hconn_closed(uv_handle_t *h) {
  free(h->data);
}

static void on_http_written(uv_write_t *w, int status) {
  hconn *c = w->data;
  (void)status;
  free(w);
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, on_hconn_closed);
}

static void http_reply(hconn *c, int code, const char *body) {
  const char *why = code == 200   ? "OK"
                    : code == 204 ? "No Content"
                    : code == 404 ? "Not Found"
                                  : "Bad Request";
  uv_write_t *w = malloc(sizeof(*w));
  uv_buf_t b;
  int n;
  c->answered = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  /* The request is done with: its buffer holds the reply until written
   * (the bodies are never in it). */
  n = snprintf(c->buf, sizeof(c->buf),
               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
               code, why, strlen(body), body);
  if (w == NULL || n < 0 || (size_t)n >= sizeof(c->buf)) {
    free(w);
    uv_close((uv_handle_t *)&c->tcp, on_hconn_closed);
    return;
  }
  b = uv_buf_init(c->buf, (unsigned)n);
  w->data = c;
  if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_http_written) != 0) {
    free(w);
    uv_close((uv_handle_t *)&c->tcp, on_hconn_closed);
  }
}

static void http_error(hconn *c, int code, const char *msg) {
  char body[256];
  snprintf(body, sizeof(body), "{\"error\":\"%s\",\"status\":%d}", msg, code);
  http_reply(c, code, body);
}

/* The value of "key" anywhere in a flat or nested JSON body: the text
 * after the colon (a string's opening quote included), or NULL. Enough for
 * the bodies of the recipes; a key's name seen as a value is skipped. */
static const char *json_value(const char *body, const char *key) {
  char pat[40];
  const char *s = body;
  snprintf(pat, sizeof(pat), "\"%s\"", key);
  while ((s = strstr(s, pat)) != NULL) {
    const char *v = s + strlen(pat);
    while (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
      v++;
    if (*v == ':') {
      v++;
      while (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
        v++;
      return v;
    }
    s = v;
  }
  return NULL;
}

static int json_is(const char *v, const char *lit) {
  return v != NULL && strncmp(v, lit, strlen(lit)) == 0;
}

static void proxy_json(const proxy *px, char *out, size_t n) {
  char toxics[96] = "";
  if (px->mode == M_LATENCY)
    snprintf(toxics, sizeof(toxics),
             "{\"name\":\"latency\",\"type\":\"latency\","
             "\"attributes\":{\"latency\":%llu}}",
             (unsigned long long)px->latency_ms);
  else if (px->mode == M_BLACKHOLE)
    snprintf(toxics, sizeof(toxics),
             "{\"name\":\"timeout\",\"type\":\"timeout\",\"stream\":"
             "\"downstream\",\"attributes\":{\"timeout\":0}}");
  else if (px->mode == M_RESET)
    snprintf(toxics, sizeof(toxics),
             "{\"name\":\"reset_peer\",\"type\":\"reset_peer\"}");
  snprintf(out, n,
           "{\"name\":\"%s\",\"listen\":\"%s:%d\",\"upstream\":\"%s:%d\","
           "\"enabled\":%s,\"toxics\":[%s]}",
           px->name, bind_addr, px->lport, px->uhost, px->uport,
           px->mode == M_REFUSE ? "false" : "true", toxics);
}

static void set_mode(proxy *px, mode_t_ m, uint64_t latency_ms) {
  px->mode = m;
  px->latency_ms = latency_ms;
  if (m == M_RESET || m == M_REFUSE)
    while (px->pairs != NULL)
      pair_close(px->pairs, 1);
  if (m == M_REFUSE)
    stop_listening(px);
  else
    start_listening(px);
}

static proxy *proxy_named(const char *name, size_t len) {
  int i;
  for (i = 0; i < n_proxies; i++)
    if (strlen(proxies[i].name) == len &&
        strncmp(proxies[i].name, name, len) == 0)
      return &proxies[i];
  return NULL;
}

static void http_toxic(hconn *c, proxy *px, const char *body) {
  const char *type = json_value(body, "type");
  char out[512];
  if (json_is(type, "\"latency\"")) {
    const char *v = json_value(body, "latency");
    char *end;
    long ms = v != NULL ? strtol(v, &end, 10) : -1;
    if (v == NULL || end == v || ms < 0 || ms > 600000) {
      http_error(c, 400, "latency: attributes.latency 0..600000 (ms)");
      return;
    }
    set_mode(px, M_LATENCY, (uint64_t)ms);
  } else if (json_is(type, "\"timeout\"")) {
    /* toxiproxy's timeout 0 on the downstream: replies never arrive,
     * requests still do. Other timeouts or streams are not modelled. */
    const char *st = json_value(body, "stream");
    const char *to = json_value(body, "timeout");
    if (!json_is(st, "\"downstream\"") || !json_is(to, "0")) {
      http_error(c, 400, "timeout: only stream downstream, timeout 0");
      return;
    }
    set_mode(px, M_BLACKHOLE, 0);
  } else if (json_is(type, "\"reset_peer\"")) {
    set_mode(px, M_RESET, 0);
  } else {
    http_error(c, 400, "toxic type: latency, timeout or reset_peer");
    return;
  }
  proxy_json(px, out, sizeof(out));
  http_reply(c, 200, out);
}

static void http_request(hconn *c, char *method, char *path, char *body) {
  char out[4096];
  proxy *px;
  size_t off;
  int i;
  if (strcmp(method, "GET") == 0 && strcmp(path, "/version") == 0) {
    http_reply(c, 200, "\"redlock-faultproxy\"");
    return;
  }
  if (strcmp(method, "GET") == 0 && strcmp(path, "/proxies") == 0) {
    off = (size_t)snprintf(out, sizeof(out), "{");
    for (i = 0; i < n_proxies && off < sizeof(out); i++) {
      char one[512];
      proxy_json(&proxies[i], one, sizeof(one));
      off += (size_t)snprintf(out + off, sizeof(out) - off, "%s\"%s\":%s",
                              i > 0 ? "," : "", proxies[i].name, one);
    }
    if (off < sizeof(out))
      snprintf(out + off, sizeof(out) - off, "}");
    http_reply(c, 200, out);
    return;
  }
  if (strcmp(method, "POST") == 0 && strcmp(path, "/reset") == 0) {
    for (i = 0; i < n_proxies; i++)
      set_mode(&proxies[i], M_NORMAL, 0);
    http_reply(c, 204, "");
    return;
  }
  if (strncmp(path, "/proxies/", 9) == 0) {
    const char *name = path + 9;
    const char *rest = strchr(name, '/');
    size_t len = rest != NULL ? (size_t)(rest - name) : strlen(name);
    px = proxy_named(name, len);
    if (px == NULL) {
      http_error(c, 404, "proxy not found");
      return;
    }
    if (rest == NULL && strcmp(method, "GET") == 0) {
      proxy_json(px, out, sizeof(out));
      http_reply(c, 200, out);
      return;
    }
    if (rest == NULL && strcmp(method, "POST") == 0) {
      const char *en = json_value(body, "enabled");
      if (json_is(en, "false"))
        set_mode(px, M_REFUSE, 0);
      else if (json_is(en, "true"))
        set_mode(px, M_NORMAL, 0);
      else {
        http_error(c, 400, "body: {\"enabled\":true|false}");
        return;
      }
      proxy_json(px, out, sizeof(out));
      http_reply(c, 200, out);
      return;
    }
    if (rest != NULL && strcmp(rest, "/toxics") == 0 &&
        strcmp(method, "POST") == 0) {
      http_toxic(c, px, body);
      return;
    }
    if (rest != NULL && strncmp(rest, "/toxics/", 8) == 0 &&
        strcmp(method, "DELETE") == 0) {
      if (px->mode == M_REFUSE) {
        http_error(c, 404, "toxic not found");
        return;
      }
      set_mode(px, M_NORMAL, 0);
      http_reply(c, 204, "");
      return;
    }
  }
  http_error(c, 404, "not supported by redlock-faultproxy");
}

static void on_http_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  hconn *c = h->data;
  (void)s;
  *buf = uv_buf_init(c->buf + c->len,
                     (unsigned)(sizeof(c->buf) - 1 - c->len));
}

static void on_http_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  hconn *c = st->data;
  char *end, *cl, *sp1, *sp2;
  long want = 0;
  (void)buf;
  if (c->answered)
    return;
  if (n < 0) {
    uv_close((uv_handle_t *)&c->tcp, on_hconn_closed);
    return;
  }
  c->len += (size_t)n;
  c->buf[c->len] = '\0';
  end = strstr(c->buf, "\r\n\r\n");
  if (end == NULL) {
    if (c->len >= sizeof(c->buf) - 1)
      http_error(c, 400, "request too large");
    return;
  }
  *end = '\0';
  for (cl = strstr(c->buf, "\r\n"); cl != NULL; cl = strstr(cl + 2, "\r\n"))
    if (strncasecmp(cl + 2, "Content-Length:", 15) == 0) {
      want = strtol(cl + 17, NULL, 10);
      break;
    }
  if (want < 0 || (size_t)want > sizeof(c->buf) - 1 - (size_t)(end + 4 -
                                                                c->buf)) {
    http_error(c, 400, "request too large");
    return;
  }
  if (c->len < (size_t)(end + 4 - c->buf) + (size_t)want) {
    *end = '\r';   /* not all of the body yet */
    return;
  }
  end[4 + want] = '\0';
  sp1 = strchr(c->buf, ' ');
  sp2 = sp1 != NULL ? strchr(sp1 + 1, ' ') : NULL;
  if (sp1 == NULL || sp2 == NULL) {
    http_error(c, 400, "bad request line");
    return;
  }
  *sp1 = '\0';
  *sp2 = '\0';
  http_request(c, c->buf, sp1 + 1, end + 4);
}

static void on_http_accept(uv_stream_t *srv, int status) {
  hconn *c;
  if (status != 0)
    return;
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_hconn_closed);
    return;
  }
  uv_read_start((uv_stream_t *)&c->tcp, on_http_alloc, on_http_read);
}

static void usage(void) __attribute__((noreturn));

static void usage(void) {
  fprintf(stderr, "usage: redlock-faultproxy [--bind ADDR] [--http PORT] "
                  "--control PORT [NAME=]LPORT:UHOST:UPORT "
                  "[[NAME=]LPORT:UHOST:UPORT...]\n"
                  "       redlock-faultproxy -host=ADDR -config=FILE "
                  "[-port=PORT]   (toxiproxy's)\n");
  exit(64);
}

static int port_arg(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > 65535)
    usage();
  return (int)v;
}

static void listen_on(uv_tcp_t *t, const char *addr, int port,
                      uv_connection_cb cb) {
  struct sockaddr_in a;
  if (uv_ip4_addr(addr, port, &a) != 0 || uv_tcp_init(loop, t) != 0 ||
      uv_tcp_bind(t, (const struct sockaddr *)&a, 0) != 0 ||
      uv_listen((uv_stream_t *)t, 16, cb) != 0) {
    fprintf(stderr, "faultproxy: cannot listen on %s:%d\n", addr, port);
    exit(1);
  }
}

/* One proxy more; NULL name: redisI. 0, or -1 when it does not fit. */
static int add_proxy(const char *name, size_t name_len, int lport,
                     const char *uhost, int uport) {
  proxy *px;
  if (n_proxies == MAX_PROXIES || lport < 1 || lport > 65535 || uport < 1 ||
      uport > 65535 || strlen(uhost) >= sizeof(px->uhost) ||
      (name != NULL && (name_len == 0 || name_len >= sizeof(px->name))))
    return -1;
  px = &proxies[n_proxies++];
  px->index = n_proxies;
  if (name != NULL) {
    memcpy(px->name, name, name_len);
    px->name[name_len] = '\0';
  } else {
    snprintf(px->name, sizeof(px->name), "redis%d", n_proxies);
  }
  snprintf(px->uhost, sizeof(px->uhost), "%s", uhost);
  px->lport = lport;
  px->uport = uport;
  px->by_name = uv_ip4_addr(px->uhost, px->uport,
                            (struct sockaddr_in *)&px->upstream) != 0;
  return 0;
}

/* A JSON string value (v just after the colon) into out; -1 if not one. */
static int json_string(const char *v, char *out, size_t n) {
  const char *e;
  if (v == NULL || *v != '"' || (e = strchr(v + 1, '"')) == NULL ||
      (size_t)(e - v - 1) >= n)
    return -1;
  memcpy(out, v + 1, (size_t)(e - v - 1));
  out[e - v - 1] = '\0';
  return 0;
}

/* toxiproxy's -config file (cluster-compose/toxiproxy.json): a list of
 * flat objects {"name","listen","upstream","enabled"}. Each listen port is
 * bound on -host (toxiproxy binds each "listen" address as written; the
 * compose files' say 0.0.0.0, as does their -host). Exits with a message
 * on anything it cannot read. */
static void load_toxiproxy_config(const char *path) {
  static char text[65536];
  FILE *f = fopen(path, "r");
  size_t n;
  char *o, *e;
  if (f == NULL) {
    fprintf(stderr, "faultproxy: cannot open %s\n", path);
    exit(66);
  }
  n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  for (o = strchr(text, '{'); o != NULL; o = strchr(e + 1, '{')) {
    char name[32], listen[96], up[96], *lc, *uc;
    const char *en;
    if ((e = strchr(o, '}')) == NULL)
      break;
    *e = '\0';
    en = json_value(o, "enabled");
    if (json_string(json_value(o, "name"), name, sizeof(name)) != 0 ||
        json_string(json_value(o, "listen"), listen, sizeof(listen)) != 0 ||
        json_string(json_value(o, "upstream"), up, sizeof(up)) != 0 ||
        (lc = strrchr(listen, ':')) == NULL ||
        (uc = strrchr(up, ':')) == NULL) {
      fprintf(stderr, "faultproxy: %s: a proxy without name, listen "
                      "HOST:PORT and upstream HOST:PORT\n", path);
      exit(65);
    }
    *uc = '\0';
    if (add_proxy(name, strlen(name), atoi(lc + 1), up, atoi(uc + 1)) != 0) {
      fprintf(stderr, "faultproxy: %s: proxy %s: bad ports or too many\n",
              path, name);
      exit(65);
    }
    if (json_is(en, "false"))
      proxies[n_proxies - 1].mode = M_REFUSE;
  }
  if (n_proxies == 0) {
    fprintf(stderr, "faultproxy: %s: no proxies\n", path);
    exit(65);
  }
}

/* As a container's PID 1 a process has no default action for SIGTERM:
 * `compose down` or `stop` would wait its 10 s and kill. Nothing to save. */
static void on_term(int sig) {
  (void)sig;
  _exit(0);
}

int main(int argc, char **argv) {
  struct sockaddr_in probe;
  int cport = 0, hport = 0;
  int i;
  if (argc > 1 && argv[1][0] == '-' && argv[1][1] != '-') {
    /* toxiproxy's command line, as the compose files give it to the
     * toxiproxy service: -host=ADDR -config=FILE [-port=PORT] (HTTP API
     * port, default 8474); no line control port. */
    const char *config = NULL;
    hport = 8474;
    for (i = 1; i < argc; i++) {
      if (strncmp(argv[i], "-host=", 6) == 0)
        bind_addr = argv[i] + 6;
      else if (strncmp(argv[i], "-config=", 8) == 0)
        config = argv[i] + 8;
      else if (strncmp(argv[i], "-port=", 6) == 0)
        hport = port_arg(argv[i] + 6);
      else
        usage();
    }
    if (config == NULL || uv_ip4_addr(bind_addr, 1, &probe) != 0)
      usage();
    load_toxiproxy_config(config);
  } else {
    for (i = 1; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
      if (strcmp(argv[i], "--bind") == 0)
        bind_addr = argv[i + 1];
      else if (strcmp(argv[i], "--http") == 0)
        hport = port_arg(argv[i + 1]);
      else if (strcmp(argv[i], "--control") == 0)
        cport = port_arg(argv[i + 1]);
      else
        usage();
    }
    if (cport == 0 || i >= argc || uv_ip4_addr(bind_addr, 1, &probe) != 0)
      usage();
    for (; i < argc; i++) {
      const char *spec = argv[i];
      const char *eq = strchr(spec, '=');
      char uhost[64], rest[8];
      int lport = 0, uport = 0;
      if (eq != NULL)
        spec = eq + 1;
      if (sscanf(spec, "%d:%63[^:]:%d%7s", &lport, uhost, &uport, rest) != 3 ||
          add_proxy(eq != NULL ? argv[i] : NULL,
                    eq != NULL ? (size_t)(eq - argv[i]) : 0, lport, uhost,
                    uport) != 0)
        usage();
    }
  }
  signal(SIGPIPE, SIG_IGN);   /* a peer gone mid-write is not fatal */
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  loop = uv_default_loop();
  for (i = 0; i < n_proxies; i++)
    if (proxies[i].mode != M_REFUSE)
      start_listening(&proxies[i]);
  if (cport != 0)
    listen_on(&control, "127.0.0.1", cport, on_ctl_accept);
  if (hport != 0)
    listen_on(&http, bind_addr, hport, on_http_accept);
  fprintf(stderr, "faultproxy: %d proxies on %s", n_proxies, bind_addr);
  if (cport != 0)
    fprintf(stderr, ", control on 127.0.0.1:%d", cport);
  if (hport != 0)
    fprintf(stderr, ", HTTP (toxiproxy's API) on %s:%d", bind_addr, hport);
  fprintf(stderr, "\n");
  return uv_run(loop, UV_RUN_DEFAULT);
}
