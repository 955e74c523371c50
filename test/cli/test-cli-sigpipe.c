/* SIGPIPE: a master that resets its connection while a write to it is
 * still pending must never kill the process that uses the library, nor
 * the redlock CLI. The write then just fails (EPIPE) like any connection
 * error: that master counts as down, the lock stays held on the others,
 * and the connection is made again.
 *
 * Why: write() to a TCP socket whose peer has closed it and then reset it
 * (FIN, then RST: the error is EPIPE) raises SIGPIPE unless the sender
 * passes MSG_NOSIGNAL or ignores the signal; its default action ends the
 * process. A `redlock run` killed that way leaves its command running
 * without the lock. The library must send with MSG_NOSIGNAL (a program
 * using it may not ignore SIGPIPE), and the CLI ignores SIGPIPE too.
 *
 * How the write is made to hit a reset socket, deterministically:
 *  - master 0 is a fake Redis in this process: it answers the handshake
 *    (SCRIPT LOAD, INFO, ...), then reads nothing more. Its socket has a
 *    small receive buffer and a small MSS (so the client's send buffer
 *    stays small too), and the lock covers 9 resources whose names add up
 *    to 480 kB: the acquisition's command cannot fit in the kernel
 *    buffers, and the client is left with a pending write, waiting for
 *    the socket to become writable. The test checks that this is so
 *    (bytes read and queued at the fake master + the client's send queue
 *    in /proc/net/tcp: less than half the names' size) before going on;
 *  - the two real masters grant the lock (2 of 3);
 *  - the fake master half-closes (FIN), then resets (SO_LINGER 0) while
 *    the client cannot run: in-process, the loop is simply not run; the
 *    CLI is SIGSTOPped meanwhile. When the client runs again, its socket
 *    reports an error with data still to write.
 * Part 1 uses the library in this process, with a SIGPIPE handler that
 * counts (the harness ignores SIGPIPE): there must be none. Part 2 runs
 * `redlock run` with SIGPIPE at its default action: it must survive,
 * reconnect, keep the lock on the real masters, and exit with its
 * command's status, releasing the lock. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"

#define N 3                 /* the fake master (0) and two real ones */
#define KEY "sigpipe-key"
#define N_BIG 8             /* resources with long names */
#define BIG_LEN 60000       /* bytes each */

extern char **environ;

static char *big[N_BIG];

/* ---- a fake master ------------------------------------------------------ */

typedef struct fake_master {
  int lfd;           /* listening socket, -1 once closed */
  int port;
  int fd;            /* the connection being served, -1 if none */
  int held;          /* the lock command arrived: read nothing more */
  size_t nread;      /* bytes read on fd */
  size_t blen;
  char buf[16384];   /* unparsed input */
} fake_master;

static void fake_listen(fake_master *f) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int small = 4096;
  int mss = 536;
  memset(f, 0, sizeof(*f));
  f->fd = -1;
  /* Close-on-exec: the CLI must not inherit (and keep open) the
   * listening socket. */
  f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(f->lfd, 0);
  /* Inherited by the accepted socket: a small window, small segments. */
  ASSERT_EQ(setsockopt(f->lfd, SOL_SOCKET, SO_RCVBUF, &small,
                       sizeof(small)), 0);
  ASSERT_EQ(setsockopt(f->lfd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)),
            0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(f->lfd, 8), 0);
  ASSERT_EQ(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
  f->port = ntohs(a.sin_port);
  ASSERT_EQ(fcntl(f->lfd, F_SETFL, O_NONBLOCK), 0);
}

static void fake_send(fake_master *f, const char *s, size_t len) {
  /* Replies are small: they fit in the socket buffer at once. */
  uint64_t end = harness_now_ms() + 5000;
  while (len > 0) {
    ssize_t n = send(f->fd, s, len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd p = {f->fd, POLLOUT, 0};
      if (harness_now_ms() > end)
        TEST_FAIL("fake master: cannot send a reply");
      poll(&p, 1, 100);
      continue;
    }
    if (n <= 0)
      TEST_FAIL("fake master: send: %s", strerror(errno));
    s += n;
    len -= (size_t)n;
  }
}

/* Parses the RESP request at s[0..len). Returns its length when it is
 * complete, 0 when more is needed; fills name (upper case) as soon as the
 * first argument has arrived. Aborts the test on malformed input. */
static size_t parse_request(const char *s, size_t len, char *name,
                            size_t namelen) {
  const char *p = s;
  const char *end = s + len;
  long argc;
  long i;
  char *e;
  name[0] = '\0';
  if (len == 0)
    return 0;
  if (*p != '*')
    TEST_FAIL("fake master: not a RESP array: %.*s",
              (int)(len < 20 ? len : 20), s);
  if (memchr(p, '\n', (size_t)(end - p)) == NULL)
    return 0;
  argc = strtol(p + 1, &e, 10);
  p = e + 2;
  for (i = 0; i < argc; i++) {
    long alen;
    if (p >= end || memchr(p, '\n', (size_t)(end - p)) == NULL)
      return 0;
    if (*p != '$')
      TEST_FAIL("fake master: not a bulk string");
    alen = strtol(p + 1, &e, 10);
    p = e + 2;
    if (i == 0 && end - p >= alen) {
      size_t k;
      for (k = 0; k < (size_t)alen && k + 1 < namelen; k++)
        name[k] = (char)(p[k] >= 'a' && p[k] <= 'z' ? p[k] - 32 : p[k]);
      name[k] = '\0';
    }
    if (end - p < alen + 2)
      return 0;
    p += alen + 2;
  }
  return (size_t)(p - s);
}

/* Answers what a client sends before its first lock command. */
static void fake_answer(fake_master *f, const char *name) {
  static const char info[] =
      "# Server\r\nredis_version:7.0.15\r\n"
      "run_id:0123456789abcdef0123456789abcdef01234567\r\n"
      "uptime_in_seconds:100000\r\n";
  char hdr[32];
  if (strcmp(name, "PING") == 0) {
    fake_send(f, "+PONG\r\n", 7);
  } else if (strcmp(name, "SCRIPT") == 0) {
    fake_send(f, "$40\r\n89abcdef0123456789abcdef0123456789abcdef\r\n",
              47);
  } else if (strcmp(name, "INFO") == 0) {
    int n = snprintf(hdr, sizeof(hdr), "$%zu\r\n", sizeof(info) - 1);
    fake_send(f, hdr, (size_t)n);
    fake_send(f, info, sizeof(info) - 1);
    fake_send(f, "\r\n", 2);
  } else {
    fake_send(f, "+OK\r\n", 5);   /* AUTH, SELECT, CLIENT ... */
  }
}

static int is_lock_command(const char *name) {
  return strcmp(name, "SET") == 0 || strcmp(name, "EVAL") == 0 ||
         strcmp(name, "EVALSHA") == 0 || strcmp(name, "FCALL") == 0;
}

/* Non-blocking: accepts the client's connection, answers its handshake,
 * and stops reading at its first lock command. */
static void fake_pump(fake_master *f) {
  char name[32];
  if (f->fd < 0) {
    if (f->lfd < 0 || f->held)
      return;
    f->fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (f->fd < 0)
      return;
    ASSERT_EQ(fcntl(f->fd, F_SETFL, O_NONBLOCK), 0);
  }
  while (!f->held) {
    size_t used;
    ssize_t n = recv(f->fd, f->buf + f->blen, sizeof(f->buf) - f->blen, 0);
    if (n <= 0)
      return;   /* nothing more now (the client never closes first) */
    f->nread += (size_t)n;
    f->blen += (size_t)n;
    for (;;) {
      used = parse_request(f->buf, f->blen, name, sizeof(name));
      if (is_lock_command(name)) {
        f->held = 1;   /* from here on it reads nothing */
        return;
      }
      if (used == 0)
        break;
      fake_answer(f, name);
      memmove(f->buf, f->buf + used, f->blen - used);
      f->blen -= used;
    }
    if (f->blen == sizeof(f->buf))
      TEST_FAIL("fake master: request too long");
  }
}

/* Bytes the client has handed to its socket so far: its send queue (from
 * /proc/net/tcp) plus what the fake master has read and has queued. */
static long long fake_bytes_past_client(const fake_master *f) {
  struct sockaddr_in peer;
  socklen_t len = sizeof(peer);
  char line[512];
  char want_local[16], want_remote[16];
  long long tx = -1;
  int queued = 0;
  FILE *fp;
  if (getpeername(f->fd, (struct sockaddr *)&peer, &len) != 0)
    return -1;
  snprintf(want_local, sizeof(want_local), ":%04X", ntohs(peer.sin_port));
  snprintf(want_remote, sizeof(want_remote), ":%04X", f->port);
  fp = fopen("/proc/net/tcp", "r");
  if (fp == NULL)
    return -1;
  while (fgets(line, sizeof(line), fp) != NULL) {
    char local[64], remote[64];
    unsigned st;
    unsigned long long txq;
    if (sscanf(line, " %*s %63s %63s %x %llx:", local, remote, &st,
               &txq) == 4 &&
        strstr(local, want_local) != NULL &&
        strstr(remote, want_remote) != NULL &&
        strlen(strstr(local, want_local)) == 5 &&
        strlen(strstr(remote, want_remote)) == 5)
      tx = (long long)txq;
  }
  fclose(fp);
  if (tx < 0 || ioctl(f->fd, FIONREAD, &queued) != 0)
    return -1;
  return tx + queued + (long long)f->nread;
}

/* 1 when the client still has part of its lock command in its own memory
 * (else the scenario would prove nothing). Two samples 50 ms apart, both
 * far below the command's size (a segment in flight may be counted on
 * both sides: the sum only errs upwards). */
static int fake_write_is_pending(const fake_master *f, char *why,
                                 size_t len) {
  long long a = fake_bytes_past_client(f);
  long long b;
  uv_sleep(50);
  b = fake_bytes_past_client(f);
  snprintf(why, len, "%lld then %lld bytes of a command of more than %d "
           "bytes are past the client", a, b, N_BIG * BIG_LEN);
  /* At least 64 KB of the command still in the client's own buffer: the
   * kernel's send buffer grows with load (autotuning), so half the
   * command (the old bound) was sometimes past it on a busy machine. */
  return a >= 0 && b >= 0 &&
         a < (long long)N_BIG * BIG_LEN - 65536 &&
         b < (long long)N_BIG * BIG_LEN - 65536;
}

/* FIN, then RST: the client's socket ends with the error EPIPE. Returns
 * 0, or -1 if a step failed (no assertion: the CLI may be stopped). */
static int fake_reset(fake_master *f) {
  struct linger lg = {1, 0};
  int rc = 0;
  if (shutdown(f->fd, SHUT_WR) != 0 ||
      setsockopt(f->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) != 0)
    rc = -1;
  close(f->fd);
  f->fd = -1;
  return rc;
}

/* 1 when a new connection waits on the listening socket. */
static int fake_has_new_connection(const fake_master *f) {
  struct pollfd p = {f->lfd, POLLIN, 0};
  return f->lfd >= 0 && poll(&p, 1, 0) == 1;
}

static void fake_close(fake_master *f) {
  if (f->fd >= 0)
    close(f->fd);
  if (f->lfd >= 0)
    close(f->lfd);   /* a connection not accepted yet is reset */
  f->fd = -1;
  f->lfd = -1;
}

/* ---- part 1: the library ------------------------------------------------- */

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig) {
  (void)sig;
  sigpipes++;
}

typedef struct pump {
  uv_timer_t t;
  fake_master *f;
  int after_reset;
  volatile int reconnected;
} pump;

/* Serves the fake master from the test's loop; after the reset, watches
 * for the client's new connection instead. */
static void on_pump(uv_timer_t *t) {
  pump *p = t->data;
  if (!p->after_reset)
    fake_pump(p->f);
  else if (fake_has_new_connection(p->f))
    p->reconnected = 1;
}

static void on_pump_closed(uv_handle_t *h) {
  (void)h;
}

static int library_part(harness_server *srv) {
  struct sigaction sa, old;
  redlock_client_config cfg = {.command_timeout_ms = 10000,
                               .connect_timeout_ms = 10000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *addrs[N];
  const void *res[N_BIG + 1];
  size_t lens[N_BIG + 1];
  char a1[32], a2[32], a0[32], why[160];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  fake_master f;
  pump p;
  tu_op op;
  char tok[96];
  int failed = 0;
  int i;

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigpipe;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGPIPE, &sa, &old), 0);
  fake_listen(&f);
  snprintf(a0, sizeof(a0), "127.0.0.1:%d", f.port);
  snprintf(a1, sizeof(a1), "127.0.0.1:%d", srv[0].port);
  snprintf(a2, sizeof(a2), "127.0.0.1:%d", srv[1].port);
  addrs[0] = a0;
  addrs[1] = a1;
  addrs[2] = a2;
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  memset(&p, 0, sizeof(p));
  p.f = &f;
  uv_timer_init(&loop, &p.t);
  p.t.data = &p;
  uv_timer_start(&p.t, on_pump, 1, 1);
  tu_wait_up(&loop, c, N, 10000);

  res[0] = KEY;
  lens[0] = strlen(KEY);
  for (i = 0; i < N_BIG; i++) {
    res[i + 1] = big[i];
    lens[i + 1] = BIG_LEN;
  }
  ASSERT_EQ(redlock_lock_new_multi(c, res, lens, N_BIG + 1, &l), 0);
  /* Granted by the two real masters; the fake one holds the command. */
  ASSERT_EQ(tu_acquire(&loop, l, 60000, &once, &op), 0);
  ASSERT_EQ(op.yes, 2);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  if (harness_run_until(&loop, (const volatile int *)&f.held, 5000) != 0)
    TEST_FAIL("the fake master did not get the lock command");
  if (!fake_write_is_pending(&f, why, sizeof(why)))
    TEST_FAIL("no write left pending (%s): cannot test", why);

  /* The loop does not run: FIN then RST reach the socket meanwhile. */
  ASSERT_EQ(fake_reset(&f), 0);
  p.after_reset = 1;
  ASSERT_EQ(sigpipes, 0);
  if (harness_run_until(&loop, &p.reconnected, 10000) != 0)
    TEST_FAIL("the client did not connect to the reset master again");
  fprintf(stderr, "library: SIGPIPE raised %d time(s) in this process\n",
          (int)sigpipes);
  if (sigpipes != 0) {
    fprintf(stderr, "%s:%d: the library raised SIGPIPE (%d) writing to a "
            "reset connection: a program that does not ignore SIGPIPE "
            "dies of it\n", __FILE__, __LINE__, (int)sigpipes);
    failed = 1;
  }
  fake_close(&f);

  /* Still held on the two real masters; released there normally. */
  ASSERT(redlock_lock_is_held(l));
  ASSERT_EQ(tu_count_holding(srv, 2, KEY, tok), 2);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(tu_count_holding(srv, 2, KEY, tok), 0);
  for (i = 0; i < 2; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  uv_close((uv_handle_t *)&p.t, on_pump_closed);
  tu_close(&loop, c);
  ASSERT_EQ(sigaction(SIGPIPE, &old, NULL), 0);
  return failed;
}

/* ---- part 2: the CLI ----------------------------------------------------- */

static const char *cli;
static char tmpdir[200];
static char stopfile[300];
static pid_t cli_pid;
static pid_t cmd_pid;   /* the run's command, once known */

/* Before failing: end the command (it would outlive a killed CLI, and
 * keep this test's stderr open) and the CLI. */
static void cli_cleanup(void) {
  int fd = open(stopfile, O_WRONLY | O_CREAT, 0644);
  int st;
  if (fd >= 0)
    close(fd);
  if (cmd_pid > 0)
    kill(cmd_pid, SIGKILL);
  if (cli_pid > 0) {
    kill(cli_pid, SIGKILL);
    kill(cli_pid, SIGCONT);
    waitpid(cli_pid, &st, 0);
    cli_pid = 0;
  }
}

#define CLI_FAIL(...)                                                       \
  do {                                                                      \
    cli_cleanup();                                                          \
    TEST_FAIL(__VA_ARGS__);                                                 \
  } while (0)

static void describe(int st, char *buf, size_t len) {
  if (WIFEXITED(st))
    snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
             strsignal(WTERMSIG(st)));
  else
    snprintf(buf, len, "wait status 0x%x", st);
}

static void remove_tmpdir(const char *started, const char *errf) {
  unlink(started);
  unlink(stopfile);
  unlink(errf);
  rmdir(tmpdir);
}

/* 1 and the status in *st once the CLI has exited, else 0. */
static int cli_exited(int *st) {
  if (waitpid(cli_pid, st, WNOHANG) == cli_pid) {
    cli_pid = 0;
    return 1;
  }
  return 0;
}

static int cli_part(harness_server *srv) {
  char servers[128], started[300], errf[300], script[1400];
  char err[4096], how[128], why[160], info[256];
  char *argv[64];
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t def, none;
  fake_master f;
  uint64_t t0;
  long child = 0;
  char tok[96];
  int k = 0;
  int st = 0;
  int rc;
  int i;

  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-sigpipe-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(started, sizeof(started), "%s/started", tmpdir);
  snprintf(stopfile, sizeof(stopfile), "%s/stop", tmpdir);
  snprintf(errf, sizeof(errf), "%s/err", tmpdir);
  /* The command: says it runs (its pid and token), then waits for the
   * test. */
  snprintf(script, sizeof(script),
           "echo $$ $REDLOCK_TOKEN > %s.tmp && mv %s.tmp %s; "
           "while [ ! -e %s ]; do sleep 0.02; done",
           started, started, started, stopfile);

  fake_listen(&f);
  snprintf(servers, sizeof(servers), "127.0.0.1:%d,%s,%s", f.port,
           harness_addr(&srv[0]), harness_addr(&srv[1]));
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);   /* brand-new servers */
  argv[k++] = (char *)cli;
  argv[k++] = "--command-timeout";  /* the fake master's command waits */
  argv[k++] = "10s";
  argv[k++] = "--connect-timeout";
  argv[k++] = "10s";
  argv[k++] = "run";
  argv[k++] = "--ttl";
  argv[k++] = "60s";
  for (i = 0; i < N_BIG; i++) {
    argv[k++] = "--also";
    argv[k++] = big[i];
  }
  argv[k++] = KEY;
  argv[k++] = "--";
  argv[k++] = "/bin/sh";
  argv[k++] = "-c";
  argv[k++] = script;
  argv[k] = NULL;

  /* Its own process, SIGPIPE at the default action (this process ignores
   * it, and an ignored signal would stay ignored across exec). */
  ASSERT_EQ(posix_spawn_file_actions_init(&fa), 0);
  ASSERT_EQ(posix_spawn_file_actions_addopen(&fa, 2, errf,
                                             O_WRONLY | O_CREAT | O_TRUNC,
                                             0644), 0);
  ASSERT_EQ(posix_spawnattr_init(&at), 0);
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  sigemptyset(&none);
  ASSERT_EQ(posix_spawnattr_setsigdefault(&at, &def), 0);
  ASSERT_EQ(posix_spawnattr_setsigmask(&at, &none), 0);
  ASSERT_EQ(posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF |
                                              POSIX_SPAWN_SETSIGMASK), 0);
  rc = posix_spawn(&cli_pid, cli, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0)
    TEST_FAIL("posix_spawn %s: %s", cli, strerror(rc));

  /* The run holds the lock (its command started) and its lock command
   * to the fake master is stuck half-written. */
  t0 = harness_now_ms();
  while (access(started, F_OK) != 0 || !f.held) {
    fake_pump(&f);
    if (cli_exited(&st)) {
      describe(st, how, sizeof(how));
      harness_read_file(errf, err, sizeof(err));
      CLI_FAIL("redlock run ended early: %s\n%s", how, err);
    }
    if (harness_now_ms() - t0 > 20000)
      CLI_FAIL("redlock run did not start its command within 20 s");
    uv_sleep(2);
  }
  harness_read_file(started, info, sizeof(info));
  if (sscanf(info, "%ld %95s", &child, tok) != 2)
    CLI_FAIL("bad started file: %s", info);
  cmd_pid = (pid_t)child;
  if (tu_count_holding(srv, 2, KEY, tok) != 2)
    CLI_FAIL("the run's lock is not on both real masters");
  if (!fake_write_is_pending(&f, why, sizeof(why)))
    CLI_FAIL("no write left pending (%s): cannot test", why);

  /* FIN and RST while the CLI cannot run (stopped, and seen stopped). */
  ASSERT_EQ(kill(cli_pid, SIGSTOP), 0);
  t0 = harness_now_ms();
  for (;;) {
    pid_t r = waitpid(cli_pid, &st, WNOHANG | WUNTRACED);
    if (r == cli_pid && WIFSTOPPED(st))
      break;
    if (r == cli_pid)
      CLI_FAIL("redlock run ended instead of stopping");
    if (harness_now_ms() - t0 > 10000)
      CLI_FAIL("redlock run did not stop");
    uv_sleep(1);
  }
  rc = fake_reset(&f);
  kill(cli_pid, SIGCONT);
  if (rc != 0)
    CLI_FAIL("cannot reset the fake master's connection");

  /* It must live on and connect to the master again. */
  t0 = harness_now_ms();
  while (!fake_has_new_connection(&f)) {
    if (cli_exited(&st)) {
      describe(st, how, sizeof(how));
      harness_read_file(errf, err, sizeof(err));
      fprintf(stderr, "%s:%d: redlock run %s after the master reset its "
              "connection; its command (pid %ld) %s\n"
              "--- redlock stderr ---\n%s\n", __FILE__, __LINE__, how,
              child, kill((pid_t)child, 0) == 0
                         ? "is still running, its lock no longer extended"
                         : "is gone", err);
      cli_cleanup();
      fake_close(&f);
      remove_tmpdir(started, errf);
      return 1;
    }
    if (harness_now_ms() - t0 > 10000)
      CLI_FAIL("redlock run did not connect to the reset master again");
    uv_sleep(2);
  }
  fake_close(&f);   /* that master stays away from now on */
  if (tu_count_holding(srv, 2, KEY, tok) != 2)
    CLI_FAIL("the run's lock is no longer on both real masters");

  /* The command ends: the run exits with its status and releases. */
  {
    int fd = open(stopfile, O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  t0 = harness_now_ms();
  while (!cli_exited(&st)) {
    if (harness_now_ms() - t0 > 20000)
      CLI_FAIL("redlock run did not exit after its command");
    uv_sleep(2);
  }
  describe(st, how, sizeof(how));
  fprintf(stderr, "cli: redlock run %s\n", how);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    harness_read_file(errf, err, sizeof(err));
    TEST_FAIL("redlock run: %s, wanted exit status 0\n%s", how, err);
  }
  for (i = 0; i < 2; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  remove_tmpdir(started, errf);
  return 0;
}

int main(int argc, char **argv) {
  harness_server srv[2];
  int failed = 0;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-sigpipe PATH-TO-redlock");
  cli = argv[1];
  for (i = 0; i < N_BIG; i++) {
    big[i] = malloc(BIG_LEN + 1);
    ASSERT_NOT_NULL(big[i]);
    memset(big[i], 'a' + i, BIG_LEN);
    big[i][BIG_LEN] = '\0';
  }
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 2);

  failed += library_part(srv);
  failed += cli_part(srv);
  if (failed > 0)
    TEST_FAIL("%d of 2 parts were hit by SIGPIPE (see above)", failed);

  for (i = 0; i < N_BIG; i++)
    free(big[i]);
  harness_stop_all();
  return 0;
}
