/* redlock_client_scan in-process (issue 33, `redlock ls`), N = 3 real
 * masters, master 0 behind a proxy of this test (a thread) that forwards
 * every command to its real server but answers SCAN as told:
 *  a) honest: every name under the prefix, sorted, with its kind and
 *     masters; complete; a max_names of 2 keeps 2 and says capped;
 *  b) replies SCAN does not send (a status, a cursor that is not
 *     decimal, an integer among the names, a bare array): that master
 *     fails with the reason named, the others still list (status 0, a
 *     quorum, complete 0), never a crash;
 *  c) the client closes while a scan is in flight: ECANCELED, once;
 *  d) bad arguments: EINVAL with a message, the callback never runs.
 * Nothing leaks (the ASan build). */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis.h>

#include "tutil.h"

#define N 3

typedef struct proxy {
  int lfd;
  int port;
  int upstream;             /* the real server's port */
  volatile int mode;        /* what SCAN gets: 0 the real reply */
  volatile int stop;
  pthread_t thread;
} proxy;

typedef struct out_buf {
  char *p;
  size_t len, cap;
} out_buf;

static void put(out_buf *b, const char *s, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 256;
    b->p = realloc(b->p, b->cap);
    ASSERT_NOT_NULL(b->p);
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

/* A RESP header: the type byte, then v. */
static void putf(out_buf *b, char type, long long v) {
  char t[64];
  int n = snprintf(t, sizeof(t), "%c%lld\r\n", type, v);
  put(b, t, (size_t)n);
}

/* A reply back to RESP2 bytes. */
static void encode(out_buf *b, const redisReply *r) {
  size_t i;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      putf(b, '$', (long long)r->len);
      put(b, r->str, r->len);
      put(b, "\r\n", 2);
      break;
    case REDIS_REPLY_ARRAY:
      putf(b, '*', (long long)r->elements);
      for (i = 0; i < r->elements; i++)
        encode(b, r->element[i]);
      break;
    case REDIS_REPLY_INTEGER:
      putf(b, ':', r->integer);
      break;
    case REDIS_REPLY_NIL:
      put(b, "$-1\r\n", 5);
      break;
    case REDIS_REPLY_STATUS:
      put(b, "+", 1);
      put(b, r->str, r->len);
      put(b, "\r\n", 2);
      break;
    default:   /* an error */
      put(b, "-", 1);
      put(b, r->str, r->len);
      put(b, "\r\n", 2);
      break;
  }
}

static const char *const fakes[] = {
    NULL,
    "+OK\r\n",                                       /* not an array */
    "*2\r\n$3\r\nabc\r\n*0\r\n",                     /* cursor not decimal */
    "*2\r\n$1\r\n0\r\n*2\r\n$6\r\nt:zzz1\r\n:5\r\n", /* an integer name */
    "*1\r\n$1\r\n0\r\n",                             /* one element */
};

static void serve(proxy *px, int fd) {
  redisReader *rd = redisReaderCreate();
  redisContext *up;
  struct timeval tv = {0, 100000};
  char buf[16384];
  ASSERT_NOT_NULL(rd);
  up = redisConnect("127.0.0.1", px->upstream);
  ASSERT(up != NULL && up->err == 0);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  while (!px->stop) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    void *obj;
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        continue;
      break;
    }
    redisReaderFeed(rd, buf, (size_t)n);
    while (redisReaderGetReply(rd, &obj) == REDIS_OK && obj != NULL) {
      redisReply *cmd = obj, *r;
      const char *argv[64];
      size_t lens[64], i;
      out_buf b = {NULL, 0, 0};
      ASSERT(cmd->type == REDIS_REPLY_ARRAY && cmd->elements <= 64);
      for (i = 0; i < cmd->elements; i++) {
        argv[i] = cmd->element[i]->str;
        lens[i] = cmd->element[i]->len;
      }
      if (px->mode != 0 && strcasecmp(argv[0], "SCAN") == 0) {
        put(&b, fakes[px->mode], strlen(fakes[px->mode]));
      } else {
        r = redisCommandArgv(up, (int)cmd->elements, argv, lens);
        ASSERT_NOT_NULL(r);
        encode(&b, r);
        freeReplyObject(r);
      }
      if (send(fd, b.p, b.len, MSG_NOSIGNAL) != (ssize_t)b.len)
        px->stop = px->stop;   /* the client went away: recv says so */
      free(b.p);
      freeReplyObject(cmd);
    }
  }
  redisFree(up);
  redisReaderFree(rd);
}

static void *run(void *arg) {
  proxy *px = arg;
  while (!px->stop) {
    int fd = accept(px->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      break;
    }
    serve(px, fd);
    close(fd);
  }
  return NULL;
}

static void proxy_start(proxy *px, int upstream) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int one = 1;
  struct timeval tv = {0, 100000};
  memset(px, 0, sizeof(*px));
  px->upstream = upstream;
  px->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(px->lfd >= 0);
  setsockopt(px->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(px->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(px->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(px->lfd, 8), 0);
  ASSERT_EQ(getsockname(px->lfd, (struct sockaddr *)&a, &len), 0);
  px->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&px->thread, NULL, run, px), 0);
}

static void proxy_stop(proxy *px) {
  px->stop = 1;
  shutdown(px->lfd, SHUT_RDWR);
  pthread_join(px->thread, NULL);
  close(px->lfd);
}

/* ---- the callback's record ---------------------------------------------- */

typedef struct listing {
  int calls, status, complete, capped;
  unsigned masters_done;
  char error[300];
  char names[2048];         /* "name/kind/masters;" each */
  size_t n;
} listing;

static void on_listed(redlock_client_t *c, int status,
                      const redlock_scan_result *r, void *arg) {
  listing *l = arg;
  size_t i, o = 0;
  (void)c;
  l->calls++;
  l->status = status;
  l->complete = r->complete;
  l->capped = r->capped;
  l->masters_done = r->masters_done;
  l->n = r->n_names;
  snprintf(l->error, sizeof(l->error), "%s", r->error);
  l->names[0] = '\0';
  for (i = 0; i < r->n_names && o < sizeof(l->names) - 100; i++)
    o += (size_t)snprintf(l->names + o, sizeof(l->names) - o, "%.*s/%d/%u;",
                          (int)r->names[i].len,
                          (const char *)r->names[i].name, r->names[i].kind,
                          r->names[i].masters);
}

static void scan_now(uv_loop_t *loop, redlock_client_t *c, unsigned max,
                     listing *l) {
  memset(l, 0, sizeof(*l));
  ASSERT_EQ(redlock_client_scan(c, "t:", 2, max, 0, on_listed, l), 0);
  ASSERT_EQ(l->calls, 0);   /* never from inside the call */
  ASSERT_EQ(harness_run_until(loop, &l->calls,
                              (uint64_t)harness_bound_ms(10000)), 0);
  ASSERT_EQ(l->calls, 1);
}

int main(void) {
  harness_server srv[N];
  proxy px;
  char addrs_buf[N][64];
  const char *addrs[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg;
  redlock_lock_t *lk;
  tu_op op;
  listing l;
  int i, calls = 0;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  proxy_start(&px, srv[0].port);
  snprintf(addrs_buf[0], sizeof(addrs_buf[0]), "127.0.0.1:%d", px.port);
  addrs[0] = addrs_buf[0];
  for (i = 1; i < N; i++)
    addrs[i] = harness_addr(&srv[i]);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(&cfg, 0, sizeof(cfg));
  cfg.key_prefix = "pfx:";
  c = tu_client_at(&loop, addrs, N, &cfg, N);

  /* A lock, a read-write lock, and a name outside the prefix. */
  ASSERT_EQ(redlock_lock_new(c, "t:a", 3, &lk), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(tu_acquire(&loop, lk, 60000, NULL, &op), 0);
  {
    redlock_lock_t *w, *o;
    ASSERT_EQ(redlock_rwlock_new(c, "t:rw", 4, REDLOCK_WRITE, &w), 0);
    ASSERT_EQ(tu_acquire(&loop, w, 60000, NULL, &op), 0);
    ASSERT_EQ(redlock_lock_new(c, "u:x", 3, &o), 0);
    ASSERT_EQ(tu_acquire(&loop, o, 60000, NULL, &op), 0);
    tu_drain(&loop, c);
  }

  /* a) honest. */
  scan_now(&loop, c, 100, &l);
  fprintf(stderr, "a) status %d complete %d: %s\n", l.status, l.complete,
          l.names);
  ASSERT_EQ(l.status, 0);
  ASSERT_EQ(l.complete, 1);
  ASSERT_EQ(l.masters_done, N);
  ASSERT_STR_EQ(l.names, "t:a/1/3;t:rw/2/3;");
  scan_now(&loop, c, 1, &l);
  ASSERT_EQ(l.status, 0);
  ASSERT_EQ(l.capped, 1);
  ASSERT_EQ(l.complete, 0);
  ASSERT_EQ(l.n, 1);

  /* b) replies SCAN does not send: master 0 fails, named. */
  for (px.mode = 1; px.mode < (int)(sizeof(fakes) / sizeof(fakes[0]));
       px.mode++) {
    scan_now(&loop, c, 100, &l);
    fprintf(stderr, "b%d) status %d complete %d done %u: %s [%s]\n",
            px.mode, l.status, l.complete, l.masters_done, l.names, l.error);
    ASSERT_EQ(l.status, 0);
    ASSERT_EQ(l.complete, 0);
    ASSERT_EQ(l.masters_done, N - 1);
    ASSERT_NOT_NULL(strstr(l.error, addrs[0]));
    ASSERT_NOT_NULL(strstr(l.error, px.mode == 2 ? "not a decimal"
                                                 : "not a SCAN reply"));
    ASSERT_NOT_NULL(strstr(l.names, "t:a/1/"));
    ASSERT_NULL(strstr(l.names, "zzz"));
  }
  px.mode = 0;

  /* d) bad arguments. */
  ASSERT_EQ(redlock_client_scan(c, "t:", 2, 0, 0, on_listed, &l),
            REDLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "max_names"));
  ASSERT_EQ(redlock_client_scan(c, "t:", 2, 100001, 0, on_listed, &l),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_client_scan(c, "t:", 2, 10, -1, on_listed, &l),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_client_scan(c, NULL, 2, 10, 0, on_listed, &l),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_client_scan(c, "t:", 2, 10, 0, NULL, &l),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_client_scan(NULL, "t:", 2, 10, 0, on_listed, &l),
            REDLOCK_EINVAL);

  /* c) closed while in flight: ECANCELED, once. */
  memset(&l, 0, sizeof(l));
  ASSERT_EQ(redlock_client_scan(c, "t:", 2, 100, 0, on_listed, &l), 0);
  (void)redlock_lock_free(lk);
  tu_close(&loop, c);
  calls = l.calls;
  fprintf(stderr, "c) %d call(s), status %d\n", calls, l.status);
  ASSERT_EQ(calls, 1);
  ASSERT_EQ(l.status, REDLOCK_ECANCELED);
  proxy_stop(&px);
  /* before main returns: the servers' records live in its frame */
  harness_stop_all();
  fprintf(stderr, "PASS\n");
  return 0;
}
