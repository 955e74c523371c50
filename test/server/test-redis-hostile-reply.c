/* Hostile or corrupt replies (issue 20, item 5).
 *
 * A master (or anything on the path, without TLS) that answers the
 * handshake's first command with a reply no legitimate server sends:
 *  a) "*200000000\r\n": an array of 200 million elements; hiredis 0.14
 *     allocates and zeroes the element table when it parses the header
 *     (1.6 GB, 6-8 s of a blocked loop on the old code);
 *  b) "$1000000000\r\n" and then bytes, as many as the client reads (the
 *     server stops at 64 MB or when the client hangs up);
 *  c) arrays nested 100 deep.
 * Each time the client must fail that master's connection with a clear
 * error (which bound, the reply's shape), promptly and without committing
 * the memory: the per-master result says so, the process's peak RSS grows
 * by less than 256 MB (printed; ~0 in a plain build, the old reader took
 * 1.6 GB), and the client reconnects and fails again
 * the same way (bounded backoff), never hangs. The fake server is a thread
 * of this test on a loopback port. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tutil.h"

typedef struct fake {
  int lfd;
  int port;
  int mode;                  /* 'a', 'b', 'c' */
  volatile int stop;
  volatile int connections;
  pthread_t thread;
} fake;

static void send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0)
      return;
    p += w;
    n -= (size_t)w;
  }
}

static void serve(fake *f, int fd) {
  char buf[4096];
  struct timeval tv = {0, 200000};
  size_t sent = 0;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (recv(fd, buf, sizeof(buf), 0) <= 0)
    return;   /* wait for the handshake's first bytes */
  switch (f->mode) {
    case 'a':
      send_all(fd, "*200000000\r\n", 12);
      break;
    case 'b': {
      static char chunk[65536];
      memset(chunk, 'x', sizeof(chunk));
      send_all(fd, "$1000000000\r\n", 13);
      while (!f->stop && sent < (64u << 20)) {
        ssize_t w = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
        if (w <= 0)
          break;   /* the client hung up (or a 200 ms stall) */
        sent += (size_t)w;
      }
      break;
    }
    case 'c': {
      int i;
      for (i = 0; i < 100; i++)
        send_all(fd, "*1\r\n", 4);
      send_all(fd, ":1\r\n", 4);
      break;
    }
  }
  /* Keep the connection until the client closes it (bounded). */
  while (!f->stop && recv(fd, buf, sizeof(buf), 0) > 0)
    ;
}

static void *run(void *arg) {
  fake *f = arg;
  while (!f->stop) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      break;   /* the listening socket was shut down */
    }
    f->connections++;
    serve(f, fd);
    close(fd);
  }
  return NULL;
}

static void fake_start(fake *f, int mode) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int one = 1;
  struct timeval tv = {0, 100000};
  memset(f, 0, sizeof(*f));
  f->mode = mode;
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(f->lfd >= 0);
  setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(f->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(f->lfd, 8), 0);
  ASSERT_EQ(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
  f->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&f->thread, NULL, run, f), 0);
}

static void fake_stop(fake *f) {
  f->stop = 1;
  shutdown(f->lfd, SHUT_RDWR);
  pthread_join(f->thread, NULL);
  close(f->lfd);
}

static long peak_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

typedef struct {
  uv_loop_t *loop;
  redlock_client_t *c;
  char err[300];
} failure_wait;

/* The master's connection failed with a reply error at least twice (the
 * first connection and a reconnect). */
static int failed_twice(void *arg) {
  failure_wait *w = arg;
  redlock_stats st;
  redlock_master_info mi;
  tu_run_for(w->loop, 5);
  ASSERT_EQ(redlock_client_stats(w->c, &st), 0);
  ASSERT_EQ(redlock_client_master_info(w->c, 0, &mi), 0);
  if (strstr(mi.error, "protocol error") != NULL)
    snprintf(w->err, sizeof(w->err), "%s", mi.error);
  return st.masters[0].conn_failures >= 2 && w->err[0] != '\0';
}

static void one_case(int mode, const char *label, const char *want) {
  uv_loop_t loop;
  fake f;
  char addr[64];
  const char *addrs[1];
  redlock_client_config cfg = {.n_servers = 1,
                               .connect_timeout_ms = 2000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 100};
  redlock_client_t *c;
  failure_wait w;
  long rss0 = peak_rss_kb();
  uint64_t t0;
  fake_start(&f, mode);
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
  addrs[0] = addr;
  cfg.servers = addrs;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  memset(&w, 0, sizeof(w));
  w.loop = &loop;
  w.c = c;
  if (harness_wait_for(failed_twice, &w, 20000) != 0)
    TEST_FAIL("%s: the connection did not fail twice with a protocol "
              "error within 20 s (last: \"%s\")", label, w.err);
  fprintf(stderr, "%s: failed twice in %llu ms: \"%s\"; peak RSS +%ld kB (%ld kB)\n",
          label, (unsigned long long)(harness_now_ms() - t0), w.err,
          peak_rss_kb() - rss0, peak_rss_kb());
  if (strstr(w.err, want) == NULL)
    TEST_FAIL("%s: the error does not say \"%s\": %s", label, want, w.err);
  /* 1.6 GB on the old reader; a sanitizer's own bookkeeping of the 8 MB
   * buffer (shadow, quarantine) stays well below 256 MB. */
  ASSERT_LT(peak_rss_kb() - rss0, 256 * 1024);
  tu_close(&loop, c);
  fake_stop(&f);
}

int main(void) {
  one_case('a', "a) *200000000", "an array of 200000000 elements");
  one_case('b', "b) $1000000000 and a stream", "reply too large");
  one_case('c', "c) nested 100 deep", "protocol error");
  return 0;
}
