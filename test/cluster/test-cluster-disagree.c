/* Two cluster nodes that name each other as the only primary (issue 29,
 * item 4): a cluster whose nodes disagree, as during a partition or a
 * botched reshard. Each one's CLUSTER SHARDS names the other, so a client
 * that follows the topology is sent from one to the other at every
 * handshake and never gets a node that serves.
 *
 * Real Redis nodes cannot be made to disagree this way on purpose, so the
 * two nodes are a tiny fake RESP server written here (CLUSTER MYID,
 * CLUSTER SHARDS; an error for anything else), in a child process of the
 * test on two loopback ports, counting the connections it accepts in
 * memory shared with the test. The harness kills the child with the test;
 * it also dies with its parent (PR_SET_PDEATHSIG).
 *
 *  a) acquire with a 2 s wait ends (not acquired) within its wait plus
 *     the connect and command timeouts, and the result says why. (It was
 *     still running at 12 s: requests queued behind a handshake had no
 *     deadline, and every repoint restarted the connect timer.)
 *  b) Repointing backs off: the fake nodes take a few dozen connections
 *     at most while the acquisition runs, not thousands. (149,604 in 24 s:
 *     a repoint reset the failure count and connected at once.)
 *  c) The same with the restart guard on (the default): the acquisition
 *     first waits until every node made its first connection, and a node
 *     sent on from handshake to handshake never did (it hung past 6 s even
 *     with a) and b) fixed: the node now goes DOWN for its backoff).
 *  d) A request queued behind a handshake ends by its own deadline (the
 *     connect plus the command timeout), also when the node moves on to
 *     the next seed: six black-hole seeds held it for six connect
 *     timeouts. */
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "tutil.h"

#define MAX_CONNS 64
#define SEEDS 6

static const char *ids[2] = {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                             "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"};

typedef struct fconn {
  int fd;
  int node;          /* 0: A, 1: B */
  char buf[4096];
  size_t len;
} fconn;

/* One command of b->buf (RESP array of bulk strings): its first two
 * arguments (upper-cased, cut) in a0/a1; the bytes it used, or 0 when it
 * is not complete yet, or -1 when it is not RESP. */
static long parse_cmd(const char *b, size_t len, char *a0, char *a1) {
  const char *p = b, *end = b + len;
  long argc, i;
  char *e;
  a0[0] = a1[0] = '\0';
  if (len == 0)
    return 0;
  if (*p != '*')
    return -1;
  if (memchr(p, '\n', (size_t)(end - p)) == NULL)
    return 0;
  argc = strtol(p + 1, &e, 10);
  p = strchr(p, '\n') + 1;
  for (i = 0; i < argc; i++) {
    long n;
    const char *nl;
    if (p >= end)
      return 0;
    if (*p != '$')
      return -1;
    nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL)
      return 0;
    n = strtol(p + 1, &e, 10);
    p = nl + 1;
    if (n < 0 || end - p < n + 2)
      return 0;
    if (i < 2) {
      char *out = i == 0 ? a0 : a1;
      long k;
      for (k = 0; k < n && k < 15; k++)
        out[k] = (char)(p[k] >= 'a' && p[k] <= 'z' ? p[k] - 32 : p[k]);
      out[k] = '\0';
    }
    p += n + 2;
  }
  return (long)(p - b);
}

static void put(int fd, const char *s) {
  size_t len = strlen(s), off = 0;
  while (off < len) {
    ssize_t w = write(fd, s + off, len - off);
    if (w <= 0)
      return;
    off += (size_t)w;
  }
}

/* The fake nodes: node k's CLUSTER SHARDS names node 1-k (at ports[1-k])
 * as the only primary, of every slot. */
static void fake_nodes(int lfd[2], const int ports[2],
                       volatile unsigned long *accepted) {
  fconn conns[MAX_CONNS];
  struct pollfd pfd[2 + MAX_CONNS];
  int nconns = 0, i;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (;;) {
    int n = 0;
    pfd[n].fd = lfd[0];
    pfd[n++].events = POLLIN;
    pfd[n].fd = lfd[1];
    pfd[n++].events = POLLIN;
    for (i = 0; i < nconns; i++) {
      pfd[n].fd = conns[i].fd;
      pfd[n++].events = POLLIN;
    }
    if (poll(pfd, (nfds_t)n, 1000) < 0)
      continue;
    for (i = 0; i < 2; i++) {
      int fd;
      if (!(pfd[i].revents & POLLIN))
        continue;
      fd = accept(lfd[i], NULL, NULL);
      if (fd < 0)
        continue;
      (*accepted)++;
      if (nconns == MAX_CONNS) {
        close(fd);   /* bounded: the oldest ones stay */
        continue;
      }
      conns[nconns].fd = fd;
      conns[nconns].node = i;
      conns[nconns].len = 0;
      nconns++;
    }
    for (i = nconns - 1; i >= 0; i--) {
      fconn *c = &conns[i];
      ssize_t r;
      long used;
      char a0[16], a1[16], reply[1024];
      if (!(pfd[2 + i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
      if (r <= 0) {
        close(c->fd);
        conns[i] = conns[--nconns];
        continue;
      }
      c->len += (size_t)r;
      while ((used = parse_cmd(c->buf, c->len, a0, a1)) > 0) {
        int other = 1 - c->node;
        if (strcmp(a0, "CLUSTER") == 0 && strcmp(a1, "MYID") == 0) {
          snprintf(reply, sizeof(reply), "$40\r\n%s\r\n", ids[c->node]);
        } else if (strcmp(a0, "CLUSTER") == 0 && strcmp(a1, "SHARDS") == 0) {
          snprintf(reply, sizeof(reply),
                   "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"
                   "$5\r\nnodes\r\n*1\r\n*12\r\n"
                   "$2\r\nid\r\n$40\r\n%s\r\n"
                   "$4\r\nport\r\n:%d\r\n"
                   "$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                   "$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n"
                   "$4\r\nrole\r\n$6\r\nmaster\r\n"
                   "$6\r\nhealth\r\n$6\r\nonline\r\n",
                   ids[other], ports[other]);
        } else {
          snprintf(reply, sizeof(reply), "-ERR not a real node\r\n");
        }
        put(c->fd, reply);
        memmove(c->buf, c->buf + used, c->len - (size_t)used);
        c->len -= (size_t)used;
      }
      if (used < 0 || c->len == sizeof(c->buf)) {
        close(c->fd);
        conns[i] = conns[--nconns];
      }
    }
  }
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  tu_cb(l, status, res, arg);
}

int main(void) {
  harness_server srv[1];
  volatile unsigned long *accepted;
  int lfd[2], ports[2], pid, st;
  uv_loop_t loop;
  redlock_client_config cfg;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts wait2s = {.wait_ms = 2000};
  redlock_acquire_opts once = {.wait_ms = -1};
  char uri[512], why[1024];
  const char *servers[1] = {uri};
  redlock_result r;
  uint64_t t0, took;
  unsigned long conns;
  tu_op op;

  /* A real server as well: the harness then owns this test's children
   * (and it checks that redis-server exists, as every redis test). */
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  accepted = mmap(NULL, sizeof(*accepted), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(accepted != MAP_FAILED);
  *accepted = 0;
  lfd[0] = harness_listener(&ports[0]);
  lfd[1] = harness_listener(&ports[1]);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    fake_nodes(lfd, ports, accepted);
    _exit(0);
  }
  close(lfd[0]);
  close(lfd[1]);

  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(&cfg, 0, sizeof(cfg));
  snprintf(uri, sizeof(uri), "redis+cluster://127.0.0.1:%d", ports[0]);
  cfg.servers = servers;
  cfg.n_servers = 1;
  cfg.restart_guard_ms = -1;   /* nothing to guard: no node ever serves */
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "k", 1, &l), 0);

  /* a) the wait ends: 2 s + the connect (250 ms) and command (50 ms)
   * timeouts of its last attempt; bound generously. */
  memset(&op, 0, sizeof(op));
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &wait2s, on_acquired, &op), 0);
  if (harness_run_until(&loop, &op.done, (uint64_t)harness_bound_ms(6000)) !=
      0)
    TEST_FAIL("acquire --wait 2s still running after %lld ms; the fake "
              "nodes took %lu connections", (long long)harness_bound_ms(6000),
              *accepted);
  took = op.cb_ms - t0;
  conns = *accepted;
  memset(&r, 0, sizeof(r));
  r.status = op.status;
  r.attempts = op.attempts;
  r.n_nodes = op.n_nodes;
  r.nodes = op.nodes;
  r.quorum = 1;
  redlock_result_explain(&r, why, sizeof(why));
  fprintf(stderr, "a) %s after %llu ms, %lu connections: %s\n",
          redlock_err_name(op.status), (unsigned long long)took, conns, why);
  ASSERT_EQ(op.calls, 1);
  ASSERT(op.status == REDLOCK_ETIMEDOUT || op.status == REDLOCK_ENOQUORUM);
  ASSERT_GE(took, 1900);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(4000));
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);

  /* b) backoff: about one connection per doubling of the delay (20 ms
   * up to 2 s) in ~2.3 s; a generous bound far below a storm. */
  ASSERT_LT(conns, 100);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* c) the same with the restart guard on (the default, the CLI's): an
   * acquisition first waits until every node made its first connection;
   * a node sent on from handshake to handshake must count as made (down)
   * once it backs off, or that wait never ends. */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  cfg.restart_guard_ms = 0;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "k", 1, &l), 0);
  memset(&op, 0, sizeof(op));
  *accepted = 0;
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &wait2s, on_acquired, &op), 0);
  if (harness_run_until(&loop, &op.done, (uint64_t)harness_bound_ms(6000)) !=
      0)
    TEST_FAIL("guarded: acquire --wait 2s still running after %lld ms; the "
              "fake nodes took %lu connections",
              (long long)harness_bound_ms(6000), *accepted);
  took = op.cb_ms - t0;
  conns = *accepted;
  memset(&r, 0, sizeof(r));
  r.status = op.status;
  r.attempts = op.attempts;
  r.n_nodes = op.n_nodes;
  r.nodes = op.nodes;
  r.quorum = 1;
  redlock_result_explain(&r, why, sizeof(why));
  fprintf(stderr, "c) guarded: %s after %llu ms, %lu connections: %s\n",
          redlock_err_name(op.status), (unsigned long long)took, conns, why);
  ASSERT(op.status == REDLOCK_ETIMEDOUT || op.status == REDLOCK_ENOQUORUM);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(4000));
  ASSERT_LT(conns, 100);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* d) a request queued behind a handshake ends by its own deadline
   * (the connect plus the command timeout from its submission), also
   * when the node moves on to the next seed, which starts a connect
   * deadline of its own: six seeds that are black holes (listening, never
   * accepting) took six connect timeouts, 6 s here. */
  {
    int bh[SEEDS], bport[SEEDS], k;
    size_t at;
    for (k = 0; k < SEEDS; k++)
      bh[k] = harness_listener(&bport[k]);
    at = (size_t)snprintf(uri, sizeof(uri),
                          "redis+cluster://127.0.0.1:%d", bport[0]);
    for (k = 1; k < SEEDS; k++)
      at += (size_t)snprintf(uri + at, sizeof(uri) - at, "%sseed=127.0.0.1:%d",
                             k == 1 ? "?" : "&", bport[k]);
    ASSERT_EQ(uv_loop_init(&loop), 0);
    cfg.restart_guard_ms = -1;
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = 50;
    ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
    ASSERT_EQ(redlock_lock_new(c, "k", 1, &l), 0);
    t0 = harness_now_ms();
    ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
    took = op.cb_ms - t0;
    fprintf(stderr, "d) %d black-hole seeds: %s after %llu ms: %s\n", SEEDS,
            redlock_err_name(op.status), (unsigned long long)took,
            op.errstr[0]);
    ASSERT_EQ(op.nodes[0].error, REDLOCK_ETIMEDOUT);
    ASSERT_NOT_NULL(strstr(op.errstr[0], "not connected within 10"));
    ASSERT_GE(took, 1000);
    ASSERT_LT(took, (uint64_t)harness_bound_ms(3000));
    ASSERT_EQ(redlock_lock_free(l), 0);
    tu_close(&loop, c);
    for (k = 0; k < SEEDS; k++)
      close(bh[k]);
  }

  kill(pid, SIGKILL);
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  munmap((void *)accepted, sizeof(*accepted));
  harness_stop_all();
  return 0;
}
