/* harness.c: see harness.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "harness.h"

#define MAX_SERVERS 64

static harness_server *registry[MAX_SERVERS];
static int n_registry;
static int installed;

static void pause_ms(unsigned ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

#if defined(__SANITIZE_ADDRESS__)
#define HARNESS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HARNESS_ASAN 1
#endif
#endif

int64_t harness_bound_ms(int64_t base_ms) {
  const char *slow = getenv("REDLOCK_TEST_SLOW");
  if (slow != NULL && *slow != '\0' && strcmp(slow, "0") != 0)
    return base_ms * 10;
#ifdef HARNESS_ASAN
  return base_ms * 4;
#else
  return base_ms;
#endif
}

uint64_t harness_now_ms(void) {
  return uv_hrtime() / 1000000ULL;
}

const char *harness_redis_path(void) {
  static char found[512];
  const char *env = getenv("REDIS_SERVER");
  const char *path;
  char *copy;
  if (env != NULL && *env != '\0')
    return access(env, X_OK) == 0 ? env : NULL;
  if (found[0] != '\0')
    return found;
  path = getenv("PATH");
  if (path == NULL)
    path = "/usr/bin:/bin:/usr/local/bin";
  copy = strdup(path);
  if (copy == NULL)
    return NULL;
  for (char *d = strtok(copy, ":"); d != NULL; d = strtok(NULL, ":")) {
    snprintf(found, sizeof(found), "%s/redis-server", d);
    if (access(found, X_OK) == 0) {
      free(copy);
      return found;
    }
  }
  free(copy);
  found[0] = '\0';
  if (access("/usr/bin/redis-server", X_OK) == 0) {
    snprintf(found, sizeof(found), "/usr/bin/redis-server");
    return found;
  }
  return NULL;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[600];
  if (d == NULL)
    return;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if (unlink(path) != 0)
      rm_dir(path);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- the processes this test owns ------------------------------------------
 * Every process the harness starts (servers, proxies, the CLI and shells)
 * leads a process group of its own and is recorded here; the test is a
 * child subreaper, so whatever a child leaves behind (dash forks for a
 * command with a redirection; `redlock run` puts its command in a group
 * of its own) is re-parented to the test, not to init. Cleanup, on every
 * path (exit, harness_abort, a fatal signal, meson's SIGTERM at a
 * timeout), kills each recorded group, then every remaining child of the
 * test and its group, until the test has no child left. All of it is
 * async-signal-safe: kill, waitpid, and /proc read with getdents64. */

#define MAX_OWNED 256

static volatile pid_t owned[MAX_OWNED];   /* 0: free slot or reaped */
static volatile int n_owned;

static void own(pid_t pid) {
  int i;
  for (i = 0; i < n_owned; i++)
    if (owned[i] == 0) {
      owned[i] = pid;
      return;
    }
  if (n_owned < MAX_OWNED)
    owned[n_owned++] = pid;
}

static void disown_pid(pid_t pid) {
  int i;
  for (i = 0; i < n_owned; i++)
    if (owned[i] == pid)
      owned[i] = 0;
}

/* The parent pid from /proc/PID/stat ("pid (comm) S ppid pgrp ..."), and
 * its process group; -1 if gone. comm may hold spaces and parentheses:
 * scan from the last ')'. */
static int proc_parent(pid_t pid, pid_t *pgrp) {
  char path[64];
  char buf[512];
  char *p, *q;
  ssize_t n;
  int fd;
  long v[2] = {0, 0};
  int k;
  /* snprintf is not async-signal-safe: build the path by hand. */
  {
    char digits[16];
    int d = 0;
    unsigned u = (unsigned)pid;
    memcpy(path, "/proc/", 6);
    do {
      digits[d++] = (char)('0' + u % 10);
      u /= 10;
    } while (u != 0);
    for (k = 0; k < d; k++)
      path[6 + k] = digits[d - 1 - k];
    memcpy(path + 6 + d, "/stat", 6);
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  p = NULL;
  for (q = buf; *q != '\0'; q++)
    if (*q == ')')
      p = q;
  if (p == NULL || p[1] != ' ' || p[2] == '\0' || p[3] != ' ')
    return -1;
  p += 4;   /* past ") S " */
  for (k = 0; k < 2; k++) {
    while (*p >= '0' && *p <= '9')
      v[k] = v[k] * 10 + (*p++ - '0');
    if (*p == ' ')
      p++;
  }
  *pgrp = (pid_t)v[1];
  return (int)v[0];
}

struct linux_dirent64_ {
  unsigned long long d_ino;
  long long d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* Kills every child of this process (and its group when that is not
 * ours), reaps it; returns how many were found. */
static int kill_children(void) {
  char buf[4096];
  pid_t self = getpid();
  pid_t mygrp = getpgrp();
  int found = 0;
  int fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  long n;
  if (fd < 0)
    return 0;
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
    long off = 0;
    while (off < n) {
      struct linux_dirent64_ *d = (struct linux_dirent64_ *)(buf + off);
      const char *c = d->d_name;
      pid_t pid = 0;
      off += d->d_reclen;
      if (*c < '1' || *c > '9')
        continue;
      for (; *c >= '0' && *c <= '9'; c++)
        pid = pid * 10 + (*c - '0');
      {
        pid_t grp = 0;
        if (proc_parent(pid, &grp) != (int)self)
          continue;
        found++;
        if (grp > 0 && grp != mygrp)
          kill(-grp, SIGKILL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
      }
    }
  }
  close(fd);
  return found;
}

static void kill_owned(void) {
  int i, rounds;
  for (i = 0; i < n_owned; i++) {
    pid_t pid = owned[i];
    if (pid > 0) {
      /* Not reaped yet, so neither the pid nor its group can have been
       * reused. */
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      owned[i] = 0;
    }
  }
  for (rounds = 0; rounds < 50 && kill_children() > 0; rounds++)
    ;
}

static void stop_one(harness_server *s) {
  int st;
  if (s->pid > 0) {
    /* SIGKILL ends a stopped process too; no SIGCONT first, so a paused
     * server never gets to run what is queued for it (a reset test needs
     * the data to stay unread). */
    kill(-s->pid, SIGKILL);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    disown_pid(s->pid);
    s->pid = 0;
    s->paused = 0;
  }
}

void harness_stop_proxies(void);

void harness_stop_all(void) {
  int i;
  harness_stop_proxies();
  for (i = 0; i < n_registry; i++) {
    stop_one(registry[i]);
    if (registry[i]->dir[0] != '\0') {
      rm_dir(registry[i]->dir);
      registry[i]->dir[0] = '\0';
    }
  }
  n_registry = 0;
}

static void print_log_tail(const harness_server *s) {
  char path[600];
  char buf[2048];
  FILE *f;
  size_t n;
  long size;
  if (s->dir[0] == '\0')
    return;
  snprintf(path, sizeof(path), "%s/redis.log", s->dir);
  f = fopen(path, "r");
  if (f == NULL)
    return;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0,
        SEEK_SET);
  n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  fprintf(stderr, "--- redis-server :%d log tail ---\n%s\n", s->port, buf);
}

static void tls_cleanup(void);

void harness_abort(void) {
  int i;
  for (i = 0; i < n_registry; i++)
    if (registry[i]->pid == 0)
      print_log_tail(registry[i]);
  harness_stop_all();
  kill_owned();
  tls_cleanup();
  fflush(stderr);
  signal(SIGABRT, SIG_DFL);
  abort();
}

static void on_exit_cleanup(void) {
  harness_stop_all();
  kill_owned();
}

static void on_fatal_signal(int sig) {
  int i;
  /* Async-signal-safe: kill and waitpid only. */
  harness_stop_proxies();
  for (i = 0; i < n_registry; i++)
    if (registry[i]->pid > 0) {
      kill(registry[i]->pid, SIGKILL);
      waitpid(registry[i]->pid, NULL, 0);
    }
  kill_owned();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_handlers(void) {
  if (installed)
    return;
  installed = 1;
  /* Orphans of our children come back to us (see kill_owned). */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  atexit(on_exit_cleanup);
  signal(SIGINT, on_fatal_signal);
  signal(SIGTERM, on_fatal_signal);
  signal(SIGHUP, on_fatal_signal);
  signal(SIGQUIT, on_fatal_signal);
  signal(SIGSEGV, on_fatal_signal);
  signal(SIGBUS, on_fatal_signal);
  /* Sanitizers end a failing test with abort(): stop the servers too. */
  signal(SIGABRT, on_fatal_signal);
  /* A closed connection must fail a write, not kill the test. */
  signal(SIGPIPE, SIG_IGN);
}

/* The kernel's ephemeral range (outgoing connections take their source
 * ports from it): a port picked inside it and released can be taken by
 * any client's connect before the server binds it. */
static void ephemeral_range(int *lo, int *hi) {
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  *lo = 32768;
  *hi = 60999;
  if (f != NULL) {
    if (fscanf(f, "%d %d", lo, hi) != 2) {
      *lo = 32768;
      *hi = 60999;
    }
    fclose(f);
  }
}

/* A port free now, outside the ephemeral range when there is room below
 * it (random, so parallel tests rarely pick the same), else one the
 * kernel picks. The caller retries when its server cannot bind it. */
int harness_listener(int *port) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT(fd >= 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 128), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

int harness_free_port(void) {
  static uint64_t seed;
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int lo, hi, tries;
  ephemeral_range(&lo, &hi);
  if (seed == 0)
    seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ harness_now_ms();
  for (tries = 0; lo > 12000 && tries < 64; tries++) {
    int fd, port, ok;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    port = 10000 + (int)((seed >> 33) % (uint64_t)(lo - 10000));
    if (port == 6379 || (port >= 26379 && port <= 26381) ||
        (port >= 17000 && port < 18000))   /* demo and drill clusters' buses */
      continue;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
      break;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    if (ok)
      return port;
  }
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = 0;
    if (fd < 0)
      return 0;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
      port = ntohs(a.sin_port);
    close(fd);
    return port;
  }
}

static redisContext *connect_to(const harness_server *s) {
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (c == NULL)
    return NULL;
  if (c->err != 0) {
    redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  if (s->admin_user != NULL) {
    redisReply *r = redisCommand(c, "AUTH %s %s", s->admin_user,
                                 s->admin_pass);
    if (r != NULL)
      freeReplyObject(r);
  }
  return c;
}

static int ping_ok(const harness_server *s) {
  redisContext *c = connect_to(s);
  redisReply *r;
  int ok = 0;
  if (c == NULL)
    return 0;
  r = redisCommand(c, "PING");
  if (r != NULL) {
    /* NOAUTH still proves the server is up. */
    ok = (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0) ||
         (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0);
    freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

static void clock_reset(harness_server *s);

/* Starts (or restarts) s on s->port; 0 when it answers PING within 5 s. */
/* In a forked child of `parent`: killed when the test process dies,
 * however it dies (an exit that skips the atexit handlers, a sanitizer's
 * _exit, SIGKILL): no server or proxy outlives its test. */
static void die_with_test(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(1);   /* the test died before the prctl */
}

static int spawn_server(harness_server *s) {
  const char *exe = harness_redis_path();
  pid_t parent;
  char port[16];
  char logpath[600];
  uint64_t end;
  pid_t pid;
  int st;
  if (exe == NULL)
    return -1;
  snprintf(port, sizeof(port), "%d", s->port);
  snprintf(logpath, sizeof(logpath), "%s/redis.log", s->dir);
  parent = getpid();
  pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    die_with_test(parent);
    setpgid(0, 0);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    char *args[64];
    char rule[256];
    if (s->sentinel) {
      /* A sentinel rewrites its configuration: a file in its dir. */
      static char conf[600];
      FILE *f;
      snprintf(conf, sizeof(conf), "%s/sentinel.conf", s->dir);
      f = fopen(conf, "r");
      if (f == NULL) {
        f = fopen(conf, "w");
        if (f == NULL)
          _exit(126);
        fprintf(f, "port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"
                "sentinel monitor %s 127.0.0.1 %d %d\n"
                "sentinel down-after-milliseconds %s 500\n"
                "sentinel failover-timeout %s 3000\n"
                "sentinel parallel-syncs %s 1\n", port, s->dir,
                s->sentinel_name, s->sentinel_port, s->sentinel_quorum,
                s->sentinel_name, s->sentinel_name, s->sentinel_name);
      }
      fclose(f);
      args[0] = (char *)exe;
      args[1] = conf;
      args[2] = "--sentinel";
      args[3] = NULL;
      execv(exe, args);
      _exit(127);
    }
    char tport[16];
    char certf[600], keyf[600], caf[600];
    int k = 0;
    args[k++] = (char *)exe;
    args[k++] = "--port";
    args[k++] = port;
    args[k++] = "--bind";
    args[k++] = "127.0.0.1";
    args[k++] = "--save";
    args[k++] = "";
    args[k++] = "--dir";
    args[k++] = s->dir;
    args[k++] = "--daemonize";
    args[k++] = "no";
    args[k++] = "--protected-mode";
    args[k++] = "no";
    args[k++] = "--enable-debug-command";
    args[k++] = "local";
    args[k++] = "--appendonly";
    if (s->appendonly) {
      args[k++] = "yes";
      args[k++] = "--appendfsync";
      args[k++] = "always";
    } else {
      args[k++] = "no";
    }
    if (s->tls) {
      const char *which = s->tls_cert != NULL ? s->tls_cert : "server";
      snprintf(tport, sizeof(tport), "%d", s->tls_port);
      snprintf(certf, sizeof(certf), "%s/%s.crt", harness_tls_dir(), which);
      snprintf(keyf, sizeof(keyf), "%s/%s.key", harness_tls_dir(), which);
      snprintf(caf, sizeof(caf), "%s/ca.crt", harness_tls_dir());
      args[k++] = "--tls-port";
      args[k++] = tport;
      args[k++] = "--tls-cert-file";
      args[k++] = certf;
      args[k++] = "--tls-key-file";
      args[k++] = keyf;
      args[k++] = "--tls-ca-cert-file";
      args[k++] = caf;
      args[k++] = "--tls-auth-clients";
      args[k++] = (char *)(s->tls_auth_clients != NULL ? s->tls_auth_clients
                                                       : "no");
    }
    if (s->replicaof > 0) {
      static char rport[16];
      snprintf(rport, sizeof(rport), "%d", s->replicaof);
      args[k++] = "--replicaof";
      args[k++] = "127.0.0.1";
      args[k++] = rport;
    }
    if (s->min_replicas_lag > 0) {
      static char lag[16];
      snprintf(lag, sizeof(lag), "%d", s->min_replicas_lag);
      args[k++] = "--min-replicas-to-write";
      args[k++] = "1";
      args[k++] = "--min-replicas-max-lag";
      args[k++] = lag;
    }
    if (s->cluster) {
      static char nt[16], bus[16];
      snprintf(nt, sizeof(nt), "%d",
               s->node_timeout_ms > 0 ? s->node_timeout_ms : 1000);
      snprintf(bus, sizeof(bus), "%d", s->bus_port);
      args[k++] = "--cluster-enabled";
      args[k++] = "yes";
      args[k++] = "--cluster-config-file";
      args[k++] = "nodes.conf";
      args[k++] = "--cluster-node-timeout";
      args[k++] = nt;
      args[k++] = "--cluster-port";
      args[k++] = bus;
      /* Failover tests promote replicas whose link was just cut. */
      args[k++] = "--cluster-replica-validity-factor";
      args[k++] = "0";
      if (s->tls) {
        /* The cluster then tells clients its nodes' TLS ports. */
        args[k++] = "--tls-cluster";
        args[k++] = "yes";
      }
    }
    if (s->acl_user != NULL) {
      /* An ACL rule line is several words: one argv element each. */
      snprintf(rule, sizeof(rule), "%s", s->acl_user);
      args[k++] = "--user";
      for (char *w = strtok(rule, " "); w != NULL && k < 58;
           w = strtok(NULL, " "))
        args[k++] = w;
      args[k++] = "--user";
      args[k++] = "default";
      args[k++] = "off";
    }
    args[k] = NULL;
    if (s->clock_shim) {
      /* The wall clock of this server can be stepped (clockshim.c). */
      char clk[600];
      const char *shim = getenv("REDLOCK_CLOCKSHIM");
      snprintf(clk, sizeof(clk), "%s/clock-offset", s->dir);
      if (shim == NULL)
        _exit(126);
      setenv("LD_PRELOAD", shim, 1);
      setenv("REDLOCK_CLOCK_FILE", clk, 1);
    }
    execv(exe, args);
    _exit(127);
  }
  setpgid(pid, pid);   /* both sides: no race with the kill below */
  own(pid);
  s->pid = pid;
  s->paused = 0;
  end = harness_now_ms() + 5000;
  while (harness_now_ms() < end) {
    if (waitpid(pid, &st, WNOHANG) == pid) {
      disown_pid(pid);
      s->pid = 0;   /* died: port taken, or a bad build */
      return -1;
    }
    if (ping_ok(s))
      return 0;
    pause_ms(2);
  }
  stop_one(s);
  return -1;
}

static void register_server(harness_server *s) {
  int i;
  for (i = 0; i < n_registry; i++)
    if (registry[i] == s)
      return;
  if (n_registry == MAX_SERVERS)
    TEST_FAIL("too many servers");
  registry[n_registry++] = s;
}

void harness_start(harness_server *srv, int n) {
  const char *tmp = getenv("TMPDIR");
  int i;
  if (harness_redis_path() == NULL) {
    fprintf(stderr, "redis-server not found: skipping\n");
    exit(TEST_SKIP);
  }
  install_handlers();
  if (n > 32)
    TEST_FAIL("at most 32 servers");
  for (i = 0; i < n; i++) {
    harness_server *s = &srv[i];
    int tries;
    harness_server keep = *s;
    memset(s, 0, sizeof(*s));
    s->appendonly = keep.appendonly;
    s->acl_user = keep.acl_user;
    s->admin_user = keep.admin_user;
    s->admin_pass = keep.admin_pass;
    s->tls = keep.tls;
    s->tls_cert = keep.tls_cert;
    s->tls_auth_clients = keep.tls_auth_clients;
    s->clock_shim = keep.clock_shim;
    s->cluster = keep.cluster;
    s->replicaof = keep.replicaof;
    s->min_replicas_lag = keep.min_replicas_lag;
    s->node_timeout_ms = keep.node_timeout_ms;
    s->sentinel = keep.sentinel;
    s->sentinel_port = keep.sentinel_port;
    s->sentinel_quorum = keep.sentinel_quorum;
    memcpy(s->sentinel_name, keep.sentinel_name, sizeof(s->sentinel_name));
    snprintf(s->dir, sizeof(s->dir), "%s/redlock-test-XXXXXX",
             tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL)
      TEST_FAIL("mkdtemp: %s", strerror(errno));
    register_server(s);
    if (s->clock_shim)
      clock_reset(s);
    if (s->tls)
      harness_tls_dir();   /* before the first fork */
    for (tries = 0; tries < 5; tries++) {
      s->port = harness_free_port();
      s->tls_port = s->tls ? harness_free_port() : 0;
      s->bus_port = s->cluster ? harness_free_port() : 0;
      if (s->port != 0 && spawn_server(s) == 0)
        break;
    }
    if (s->pid == 0) {
      print_log_tail(s);
      TEST_FAIL("could not start redis-server");
    }
  }
}

/* The state letter of /proc/PID/stat, or 0. */
static char proc_state(pid_t pid) {
  char path[64], buf[512];
  char *p;
  FILE *f;
  size_t n;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  f = fopen(path, "r");
  if (f == NULL)
    return 0;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  p = strrchr(buf, ')');
  return p != NULL && p[1] == ' ' ? p[2] : 0;
}

void harness_pause(harness_server *s) {
  uint64_t end = harness_now_ms() + 5000;
  if (s->pid <= 0 || kill(s->pid, SIGSTOP) != 0)
    return;
  s->paused = 1;
  while (proc_state(s->pid) != 'T') {
    if (harness_now_ms() > end)
      TEST_FAIL("redis-server %d did not stop", s->pid);
    pause_ms(1);
  }
}

void harness_resume(harness_server *s) {
  if (s->pid > 0 && kill(s->pid, SIGCONT) == 0)
    s->paused = 0;
}

void harness_kill(harness_server *s) {
  stop_one(s);
}

void harness_restart(harness_server *s) {
  int tries;
  if (s->pid > 0)
    stop_one(s);
  register_server(s);
  /* The port can stay busy for a moment after the kill. */
  for (tries = 0; tries < 50; tries++) {
    if (spawn_server(s) == 0)
      return;
    pause_ms(20);
  }
  print_log_tail(s);
  TEST_FAIL("could not restart redis-server on port %d", s->port);
}

/* ---- TLS ----------------------------------------------------------------- */

static char tls_dir[300];

static void tls_cleanup(void) {
  if (tls_dir[0] != '\0')
    rm_dir(tls_dir);
  tls_dir[0] = '\0';
}

static int run_sh(const char *cmd) {
  int st;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

const char *harness_tls_dir(void) {
  const char *tmp = getenv("TMPDIR");
  char cmd[4096];
  if (tls_dir[0] != '\0')
    return tls_dir;
  if (run_sh("command -v openssl") != 0) {
    fprintf(stderr, "openssl command not found: skipping\n");
    exit(TEST_SKIP);
  }
  snprintf(tls_dir, sizeof(tls_dir), "%s/redlock-tls-XXXXXX",
           tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
  if (mkdtemp(tls_dir) == NULL)
    TEST_FAIL("mkdtemp: %s", strerror(errno));
  atexit(tls_cleanup);
  /* A CA; the server's certificate for 127.0.0.1 and localhost (also a
   * client's: cluster nodes with tls-cluster present it to each other);
   * one for another host; a client certificate; an unrelated CA. */
  snprintf(cmd, sizeof(cmd),
           "set -e; cd '%s'; "
           "mk_ca() { openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
           "-subj \"/CN=$1\" -keyout $2.key -out $2.crt; }; "
           "mk_cert() { openssl req -newkey rsa:2048 -nodes "
           "-subj \"/CN=$2\" -keyout $1.key -out $1.csr; "
           "printf 'subjectAltName=%%s\\nextendedKeyUsage=%%s\\n' "
           "\"$3\" \"$4\" > $1.ext; "
           "openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key "
           "-CAcreateserial -days 2 -extfile $1.ext -out $1.crt; }; "
           "mk_ca 'redlock test CA' ca; "
           "mk_ca 'another CA' other-ca; "
           "mk_cert server localhost 'IP:127.0.0.1,DNS:localhost' "
           "serverAuth,clientAuth; "
           "mk_cert wronghost elsewhere 'DNS:elsewhere.invalid' serverAuth; "
           "mk_cert client redlock-client 'DNS:client' clientAuth; "
           "chmod 600 *.key",
           tls_dir);
  if (run_sh(cmd) != 0)
    TEST_FAIL("could not make the test certificates in %s", tls_dir);
  return tls_dir;
}

const char *harness_tls_file(const char *name) {
  static char slots[8][400];
  static int next;
  char *p = slots[next++ % 8];
  snprintf(p, 400, "%s/%s", harness_tls_dir(), name);
  return p;
}

const char *harness_tls_addr(const harness_server *s) {
  static char slots[16][48];
  static int next;
  char *p = slots[next++ % 16];
  snprintf(p, 48, "rediss://127.0.0.1:%d", s->tls_port);
  return p;
}

const char *harness_addr(const harness_server *s) {
  static char slots[16][32];
  static int next;
  char *p = slots[next++ % 16];
  snprintf(p, 32, "127.0.0.1:%d", s->port);
  return p;
}

void harness_addrs(const harness_server *srv, int n, const char **out) {
  static char addrs[16][32];
  int i;
  for (i = 0; i < n && i < 16; i++) {
    snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", srv[i].port);
    out[i] = addrs[i];
  }
}

static int reply_to_buf(redisReply *r, char *buf, size_t len) {
  if (r == NULL)
    return -1;
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      snprintf(buf, len, "%.*s", (int)r->len, r->str);
      break;
    case REDIS_REPLY_INTEGER:
      snprintf(buf, len, "%lld", (long long)r->integer);
      break;
    case REDIS_REPLY_NIL:
      snprintf(buf, len, "(nil)");
      break;
    default:
      snprintf(buf, len, "(array of %zu)", (size_t)r->elements);
      break;
  }
  freeReplyObject(r);
  return 0;
}

int harness_cmd(const harness_server *s, char *buf, size_t buflen, int argc,
                const char **argv, const size_t *argvlen) {
  redisContext *c = connect_to(s);
  int rc;
  if (c == NULL)
    return -1;
  rc = reply_to_buf(redisCommandArgv(c, argc, argv, argvlen), buf, buflen);
  redisFree(c);
  return rc;
}

int harness_cmdf(const harness_server *s, char *buf, size_t buflen,
                 const char *fmt, ...) {
  redisContext *c = connect_to(s);
  va_list ap;
  int rc;
  if (c == NULL)
    return -1;
  va_start(ap, fmt);
  rc = reply_to_buf(redisvCommand(c, fmt, ap), buf, buflen);
  va_end(ap);
  redisFree(c);
  return rc;
}

int harness_get(const harness_server *s, const char *key, char *val,
                size_t vallen) {
  redisContext *c = connect_to(s);
  redisReply *r;
  int rc = -1;
  if (c == NULL)
    return -1;
  r = redisCommand(c, "GET %s", key);
  if (r != NULL) {
    if (r->type == REDIS_REPLY_NIL) {
      rc = 0;
    } else if (r->type == REDIS_REPLY_STRING) {
      snprintf(val, vallen, "%.*s", (int)r->len, r->str);
      rc = 1;
    }
    freeReplyObject(r);
  }
  redisFree(c);
  return rc;
}

int64_t harness_pttl(const harness_server *s, const char *key) {
  char buf[64];
  if (harness_cmdf(s, buf, sizeof(buf), "PTTL %s", key) != 0)
    return INT64_MIN;
  return strtoll(buf, NULL, 10);
}

int harness_set(const harness_server *s, const char *key, const char *val,
                int64_t ttl_ms) {
  char buf[64];
  if (harness_cmdf(s, buf, sizeof(buf), "SET %s %s PX %lld", key, val,
                   (long long)ttl_ms) != 0)
    return -1;
  return strcmp(buf, "OK") == 0 ? 0 : -1;
}

int64_t harness_dbsize(const harness_server *s) {
  char buf[64];
  int64_t n;
  redisContext *c;
  redisReply *r;
  if (harness_cmdf(s, buf, sizeof(buf), "DBSIZE") != 0)
    return -1;
  n = strtoll(buf, NULL, 10);
  /* The library's records stay by design: the deployment's longest ttl
   * and each master's clock record (restart guard, clock check), and the
   * marks of broken durability declarations. They are not locks left
   * behind. */
  c = connect_to(s);
  if (c == NULL)
    return -1;
  r = redisCommand(c, "KEYS *__redlock__:maxttl");
  if (r != NULL && r->type == REDIS_REPLY_ARRAY)
    n -= (int64_t)r->elements;
  if (r != NULL)
    freeReplyObject(r);
  r = redisCommand(c, "KEYS *__redlock__:clock");
  if (r != NULL && r->type == REDIS_REPLY_ARRAY)
    n -= (int64_t)r->elements;
  if (r != NULL)
    freeReplyObject(r);
  r = redisCommand(c, "KEYS *__redlock__:broke");
  if (r != NULL && r->type == REDIS_REPLY_ARRAY)
    n -= (int64_t)r->elements;
  if (r != NULL)
    freeReplyObject(r);
  redisFree(c);
  return n;
}

/* ---- waiting ---------------------------------------------------------- */

static void on_tick(uv_timer_t *t) {
  (void)t;
}

static void on_tick_closed(uv_handle_t *h) {
  *(int *)h->data = 1;
}

int harness_run_until(uv_loop_t *loop, const volatile int *flag,
                      uint64_t timeout_ms) {
  uv_timer_t tick;
  int closed = 0;
  uint64_t end = harness_now_ms() + timeout_ms;
  int rc = -1;
  uv_timer_init(loop, &tick);
  uv_timer_start(&tick, on_tick, 5, 5);
  for (;;) {
    if (*flag) {
      rc = 0;
      break;
    }
    if (harness_now_ms() >= end)
      break;
    uv_run(loop, UV_RUN_ONCE);
  }
  tick.data = &closed;
  uv_close((uv_handle_t *)&tick, on_tick_closed);
  while (!closed)
    uv_run(loop, UV_RUN_NOWAIT);
  return rc;
}

static void print_handle(uv_handle_t *h, void *arg) {
  (void)arg;
  fprintf(stderr, "  open handle: %s%s\n", uv_handle_type_name(h->type),
          uv_is_active(h) ? " (active)" : "");
}

void harness_loop_close(uv_loop_t *loop, uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  while (uv_loop_alive(loop)) {
    if (harness_now_ms() >= end) {
      uv_walk(loop, print_handle, NULL);
      TEST_FAIL("loop still has handles after %llu ms",
                (unsigned long long)timeout_ms);
    }
    uv_run(loop, UV_RUN_ONCE);
  }
  if (uv_loop_close(loop) != 0) {
    uv_walk(loop, print_handle, NULL);
    TEST_FAIL("uv_loop_close failed: handles left");
  }
}

int harness_wait_for(int (*cond)(void *arg), void *arg, uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  while (!cond(arg)) {
    if (harness_now_ms() >= end)
      return -1;
    pause_ms(2);
  }
  return 0;
}

/* ---- the fault proxy ----------------------------------------------------- */

static harness_proxy *proxies[8];
static int n_proxies;

static int connect_port(int port) {
  struct sockaddr_in a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Forks the proxy on the ports in p; its pid, or -1 when it exited
 * (a port taken meanwhile: the caller picks others) or did not listen
 * within 5 s. */
static pid_t proxy_spawn(harness_proxy *p, const char *exe, char **argv) {
  uint64_t end;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    TEST_FAIL("fork");
  if (pid == 0) {
    const char *log = getenv("REDLOCK_FAULTPROXY_LOG");
    die_with_test(parent);
    setpgid(0, 0);
    int fd = open(log != NULL ? log : "/dev/null",
                  O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    execv(exe, argv);
    _exit(127);
  }
  setpgid(pid, pid);
  own(pid);
  end = harness_now_ms() + harness_bound_ms(5000);
  for (;;) {
    int status;
    int fd = connect_port(p->control_port);
    if (fd >= 0) {
      close(fd);
      return pid;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      disown_pid(pid);
      return -1;
    }
    if (harness_now_ms() > end) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      disown_pid(pid);
      return -1;
    }
    pause_ms(2);
  }
}

void harness_proxy_start(harness_proxy *p, const char *exe,
                         const harness_server *srv, int n) {
  char *argv[20];
  char specs[16][64];
  char cport[16];
  pid_t pid = -1;
  int i, tries;
  if (n > 16 || n_proxies == 8)
    TEST_FAIL("too many proxies");
  install_handlers();
  memset(p, 0, sizeof(*p));
  p->n = n;
  for (tries = 0; tries < 5 && pid < 0; tries++) {
    p->control_port = harness_free_port();
    snprintf(cport, sizeof(cport), "%d", p->control_port);
    argv[0] = (char *)exe;
    argv[1] = "--control";
    argv[2] = cport;
    for (i = 0; i < n; i++) {
      p->ports[i] = harness_free_port();
      snprintf(specs[i], sizeof(specs[i]), "%d:127.0.0.1:%d", p->ports[i],
               srv[i].tls ? srv[i].tls_port : srv[i].port);
      argv[3 + i] = specs[i];
    }
    argv[3 + n] = NULL;
    pid = proxy_spawn(p, exe, argv);
  }
  if (pid < 0)
    TEST_FAIL("fault proxy did not start in 5 tries (%s; set "
              "REDLOCK_FAULTPROXY_LOG=FILE for its messages)", exe);
  p->pid = pid;
  proxies[n_proxies++] = p;
}

void harness_proxy_cmd(harness_proxy *p, int i, const char *cmd) {
  char line[128];
  char reply[128];
  size_t got = 0;
  int fd = connect_port(p->control_port);
  int n = snprintf(line, sizeof(line), "%d %s\n", i + 1, cmd);
  uint64_t end = harness_now_ms() + 5000;
  if (fd < 0 || write(fd, line, (size_t)n) != n) {
    int st = 0;
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
      disown_pid(p->pid);
      p->pid = 0;
      TEST_FAIL("fault proxy died (%s %d)",
                WIFSIGNALED(st) ? "signal" : "exit",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    TEST_FAIL("fault proxy control: cannot send \"%s\"", cmd);
  }
  while (got < sizeof(reply) - 1 && harness_now_ms() < end) {
    ssize_t r = read(fd, reply + got, sizeof(reply) - 1 - got);
    if (r <= 0)
      break;
    got += (size_t)r;
    if (memchr(reply, '\n', got) != NULL)
      break;
  }
  reply[got] = '\0';
  close(fd);
  if (strncmp(reply, "OK", 2) != 0)
    TEST_FAIL("fault proxy: \"%s\" -> \"%s\"", cmd, reply);
}

void harness_proxy_addrs(const harness_proxy *p, const char **out) {
  static char addrs[16][32];
  int i;
  for (i = 0; i < p->n; i++) {
    snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", p->ports[i]);
    out[i] = addrs[i];
  }
}

void harness_stop_proxies(void) {
  int i;
  for (i = 0; i < n_proxies; i++)
    if (proxies[i]->pid > 0) {
      kill(-proxies[i]->pid, SIGKILL);
      kill(proxies[i]->pid, SIGKILL);
      waitpid(proxies[i]->pid, NULL, 0);
      disown_pid(proxies[i]->pid);
      proxies[i]->pid = 0;
    }
  n_proxies = 0;
}

int harness_send_nowait(const harness_server *s, int argc,
                        const char **argv) {
  char buf[1024];
  size_t len = 0;
  int fd;
  int i;
  len += (size_t)snprintf(buf + len, sizeof(buf) - len, "*%d\r\n", argc);
  for (i = 0; i < argc && len < sizeof(buf); i++)
    len += (size_t)snprintf(buf + len, sizeof(buf) - len, "$%zu\r\n%s\r\n",
                            strlen(argv[i]), argv[i]);
  if (len >= sizeof(buf))
    TEST_FAIL("command too long");
  fd = connect_port(s->port);
  if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
    TEST_FAIL("cannot send to server :%d", s->port);
  return fd;
}

void harness_close_fd(int fd) {
  if (fd >= 0)
    close(fd);
}

int harness_send_ok(const harness_server *s, int argc, const char **argv) {
  int fd = harness_send_nowait(s, argc, argv);
  char reply[128];
  size_t got = 0;
  uint64_t end = harness_now_ms() + 5000;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  while (memchr(reply, '\n', got) == NULL) {
    ssize_t r = read(fd, reply + got, sizeof(reply) - 1 - got);
    if (r > 0)
      got += (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      TEST_FAIL("%s on :%d: connection closed", argv[0], s->port);
    if (harness_now_ms() > end || got == sizeof(reply) - 1)
      TEST_FAIL("%s on :%d: no reply", argv[0], s->port);
    if (memchr(reply, '\n', got) == NULL)
      pause_ms(1);
  }
  reply[got] = '\0';
  if (strncmp(reply, "+OK", 3) != 0)
    TEST_FAIL("%s on :%d: %s", argv[0], s->port, reply);
  return fd;
}

void harness_wait_asleep(const harness_server *s, uint64_t timeout_ms) {
  char path[64], buf[128];
  uint64_t end = harness_now_ms() + timeout_ms;
  snprintf(path, sizeof(path), "/proc/%d/syscall", s->pid);
  for (;;) {
    FILE *f = fopen(path, "r");
    long nr = -1;
    if (f != NULL) {
      if (fgets(buf, sizeof(buf), f) != NULL)
        nr = strtol(buf, NULL, 10);
      fclose(f);
    }
#ifdef SYS_nanosleep
    if (nr == SYS_nanosleep)
      return;
#endif
    if (nr == SYS_clock_nanosleep)
      return;
    if (harness_now_ms() > end)
      TEST_FAIL("redis-server :%d is not asleep after %llu ms (%s: %ld)",
                s->port, (unsigned long long)timeout_ms, path, nr);
    pause_ms(1);
  }
}

/* ---- processes ----------------------------------------------------------- */

extern char **environ;

int harness_spawn(const char *exe, char *const *argv, const char *out,
                  const char *err) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t def, none;
  pid_t pid;
  int rc;
  if (posix_spawn_file_actions_init(&fa) != 0 ||
      posix_spawnattr_init(&at) != 0)
    TEST_FAIL("posix_spawn setup");
  if (out != NULL)
    posix_spawn_file_actions_addopen(&fa, 1, out,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err != NULL)
    posix_spawn_file_actions_addopen(&fa, 2, err,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  sigaddset(&def, SIGHUP);
  sigaddset(&def, SIGQUIT);
  sigaddset(&def, SIGPIPE);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &def);
  posix_spawnattr_setsigmask(&at, &none);
  /* A process group of its own, so the harness can stop all it starts. */
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF |
                                    POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETPGROUP);
  install_handlers();
  rc = posix_spawn(&pid, exe, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0)
    TEST_FAIL("posix_spawn %s: %s", exe, strerror(rc));
  own(pid);
  return (int)pid;
}

int harness_spawn_sh(const char *cmd) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  return harness_spawn("/bin/sh", argv, NULL, NULL);
}

int harness_count(const char *hay, const char *needle) {
  size_t len = strlen(needle);
  int n = 0;
  if (len == 0)
    return 0;
  while ((hay = strstr(hay, needle)) != NULL) {
    n++;
    hay += len;
  }
  return n;
}

static int sh_va(uint64_t ms, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static int sh_va(uint64_t ms, const char *fmt, va_list ap) {
  char cmd[4096];
  int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
  if (n < 0 || (size_t)n >= sizeof(cmd))
    TEST_FAIL("harness_sh: a command of %d bytes (at most %zu)", n,
              sizeof(cmd) - 1);
  return harness_wait_exit(harness_spawn_sh(cmd), ms);
}

int harness_sh(const char *fmt, ...) {
  va_list ap;
  int rc;
  va_start(ap, fmt);
  rc = sh_va(20000, fmt, ap);
  va_end(ap);
  return rc;
}

int harness_sh_within(uint64_t ms, const char *fmt, ...) {
  va_list ap;
  int rc;
  va_start(ap, fmt);
  rc = sh_va(ms, fmt, ap);
  va_end(ap);
  return rc;
}

int harness_wait_exit(int pid, uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  int st;
  for (;;) {
    pid_t r = waitpid((pid_t)pid, &st, WNOHANG);
    if (r == (pid_t)pid) {
      disown_pid((pid_t)pid);
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (harness_now_ms() > end) {
      /* The whole group: a shell's children too. */
      kill(-(pid_t)pid, SIGKILL);
      kill((pid_t)pid, SIGKILL);
      waitpid((pid_t)pid, &st, 0);
      disown_pid((pid_t)pid);
      fprintf(stderr, "harness: pid %d did not exit within %llu ms: "
              "killed\n", pid, (unsigned long long)timeout_ms);
      return -1;
    }
    pause_ms(2);
  }
}

void harness_read_file(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  size_t n;
  buf[0] = '\0';
  if (f == NULL)
    return;
  n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* ---- wall-clock steps (clockshim.c) --------------------------------------- */

static int clock_fd(const harness_server *s, int create) {
  char path[600];
  snprintf(path, sizeof(path), "%s/clock-offset", s->dir);
  return open(path, O_RDWR | (create ? O_CREAT : 0), 0644);
}

/* A zero offset in the server's dir (before its first start). */
static void clock_reset(harness_server *s) {
  int64_t zero = 0;
  int fd = clock_fd(s, 1);
  if (fd < 0 || pwrite(fd, &zero, sizeof(zero), 0) != (ssize_t)sizeof(zero))
    TEST_FAIL("cannot write the clock offset file in %s", s->dir);
  close(fd);
}

int harness_clock_available(void) {
  const char *shim = getenv("REDLOCK_CLOCKSHIM");
  return shim != NULL && access(shim, R_OK) == 0;
}

void harness_clock_prepare(harness_server *s) {
  if (!harness_clock_available())
    TEST_FAIL("REDLOCK_CLOCKSHIM is not set or not readable (the test "
              "needs the clock shim built by meson)");
  s->clock_shim = 1;
}

int64_t harness_clock_offset(const harness_server *s) {
  int64_t v = 0;
  int fd = clock_fd(s, 0);
  if (fd < 0)
    return 0;
  if (pread(fd, &v, sizeof(v), 0) != (ssize_t)sizeof(v))
    v = 0;
  close(fd);
  return v;
}

void harness_clock_step(harness_server *s, int64_t delta_ms) {
  int64_t v = harness_clock_offset(s) + delta_ms;
  int fd = clock_fd(s, 0);
  if (!s->clock_shim || fd < 0 ||
      pwrite(fd, &v, sizeof(v), 0) != (ssize_t)sizeof(v))
    TEST_FAIL("cannot step the clock of the server on port %d", s->port);
  close(fd);
}

/* ---- Redis Cluster and Sentinel ------------------------------------------ */

/* Runs a command on s and returns the reply (caller frees), or NULL. */
static redisReply *cmd_reply(const harness_server *s, const char *fmt, ...) {
  redisContext *c = connect_to(s);
  redisReply *r;
  va_list ap;
  if (c == NULL)
    return NULL;
  va_start(ap, fmt);
  r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

/* The value of "field:" in an INFO-style text (CLUSTER INFO, INFO), as an
 * integer, or -1. */
static long long info_num(const char *text, const char *field) {
  const char *p = strstr(text, field);
  if (p == NULL)
    return -1;
  p += strlen(field);
  if (*p != ':')
    return -1;
  return strtoll(p + 1, NULL, 10);
}

typedef struct cluster_check {
  const harness_server *srv;
  int n;
  int primaries;
} cluster_check;

/* Every node knows every other node and sees the cluster ok; every
 * replica's link is up. */
static int cluster_ready(void *arg) {
  const cluster_check *cc = arg;
  char buf[2048];
  int i;
  for (i = 0; i < cc->n; i++) {
    if (harness_cmdf(&cc->srv[i], buf, sizeof(buf), "CLUSTER INFO") != 0)
      return 0;
    if (strstr(buf, "cluster_state:ok") == NULL ||
        info_num(buf, "cluster_known_nodes") != cc->n ||
        info_num(buf, "cluster_slots_ok") != 16384)
      return 0;
    if (i >= cc->primaries) {
      if (harness_cmdf(&cc->srv[i], buf, sizeof(buf),
                       "INFO replication") != 0 ||
          strstr(buf, "master_link_status:up") == NULL)
        return 0;
    }
  }
  return 1;
}

static int cluster_known(void *arg) {
  const cluster_check *cc = arg;
  char buf[2048];
  int i;
  for (i = 0; i < cc->n; i++)
    if (harness_cmdf(&cc->srv[i], buf, sizeof(buf), "CLUSTER INFO") != 0 ||
        info_num(buf, "cluster_known_nodes") != cc->n)
      return 0;
  return 1;
}

void harness_cluster_make(harness_server *srv, int n, int primaries) {
  char buf[256];
  cluster_check cc = {srv, n, primaries};
  int i;
  if (primaries < 1 || primaries > n)
    TEST_FAIL("cluster: %d primaries of %d servers", primaries, n);
  for (i = 0; i < n; i++) {
    if (!srv[i].cluster)
      TEST_FAIL("cluster: server %d was not started with .cluster", i);
    if (harness_cmdf(&srv[i], srv[i].node_id, sizeof(srv[i].node_id),
                     "CLUSTER MYID") != 0 || strlen(srv[i].node_id) != 40)
      TEST_FAIL("cluster: CLUSTER MYID on %d: %s", i, srv[i].node_id);
  }
  for (i = 0; i < primaries; i++) {
    int lo = 16384 * i / primaries;
    int hi = 16384 * (i + 1) / primaries - 1;
    if (harness_cmdf(&srv[i], buf, sizeof(buf), "CLUSTER ADDSLOTSRANGE %d %d",
                     lo, hi) != 0 || strcmp(buf, "OK") != 0)
      TEST_FAIL("cluster: ADDSLOTSRANGE %d %d: %s", lo, hi, buf);
  }
  for (i = 1; i < n; i++)
    if (harness_cmdf(&srv[i], buf, sizeof(buf), "CLUSTER MEET 127.0.0.1 %d %d",
                     srv[0].port, srv[0].bus_port) != 0 ||
        strcmp(buf, "OK") != 0)
      TEST_FAIL("cluster: MEET: %s", buf);
  if (harness_wait_for(cluster_known, &cc, (uint64_t)harness_bound_ms(10000)))
    TEST_FAIL("cluster: the nodes did not meet");
  for (i = primaries; i < n; i++) {
    const harness_server *p = &srv[(i - primaries) % primaries];
    if (harness_cmdf(&srv[i], buf, sizeof(buf), "CLUSTER REPLICATE %s",
                     p->node_id) != 0 || strcmp(buf, "OK") != 0)
      TEST_FAIL("cluster: REPLICATE: %s", buf);
  }
  if (harness_wait_for(cluster_ready, &cc, (uint64_t)harness_bound_ms(15000)))
    TEST_FAIL("cluster: not ok in time");
}

/* GET after `first` (ASKING, READONLY) on one connection. */
static int get_after(const harness_server *s, const char *first,
                     const char *key, char *val, size_t vallen) {
  redisContext *c = connect_to(s);
  redisReply *r;
  int rc = -1;
  if (c == NULL)
    return -1;
  r = redisCommand(c, first);
  if (r != NULL)
    freeReplyObject(r);
  r = redisCommand(c, "GET %s", key);
  if (r != NULL) {
    if (r->type == REDIS_REPLY_NIL) {
      rc = 0;
    } else if (r->type == REDIS_REPLY_STRING) {
      if (val != NULL)
        snprintf(val, vallen, "%.*s", (int)r->len, r->str);
      rc = 1;
    }
    freeReplyObject(r);
  }
  redisFree(c);
  return rc;
}

int harness_get_asking(const harness_server *s, const char *key, char *val,
                       size_t vallen) {
  return get_after(s, "ASKING", key, val, vallen);
}

int harness_get_replica(const harness_server *s, const char *key, char *val,
                        size_t vallen) {
  return get_after(s, "READONLY", key, val, vallen);
}

const char *harness_cluster_addr(const harness_server *s) {
  static char bufs[8][64];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, 64, "redis+cluster://127.0.0.1:%d", s->port);
  return b;
}

int harness_is_primary(const harness_server *s) {
  char buf[64];
  redisReply *r = cmd_reply(s, "ROLE");
  int v = -1;
  if (r == NULL)
    return -1;
  if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING) {
    snprintf(buf, sizeof(buf), "%s", r->element[0]->str);
    v = strcmp(buf, "master") == 0;
  }
  freeReplyObject(r);
  return v;
}

/* The port of the primary that node `from` says serves `slot`, or 0. */
static int owner_port(const harness_server *from, unsigned slot) {
  redisReply *r = cmd_reply(from, "CLUSTER NODES");
  int port = 0;
  char *save = NULL, *line;
  char *text;
  if (r == NULL || r->type != REDIS_REPLY_STRING) {
    if (r != NULL)
      freeReplyObject(r);
    return 0;
  }
  text = strdup(r->str);
  freeReplyObject(r);
  if (text == NULL)
    return 0;
  for (line = strtok_r(text, "\n", &save); line != NULL && port == 0;
       line = strtok_r(NULL, "\n", &save)) {
    char *f[64];
    char *s2 = NULL;
    int nf = 0, k;
    for (char *w = strtok_r(line, " ", &s2); w != NULL && nf < 64;
         w = strtok_r(NULL, " ", &s2))
      f[nf++] = w;
    if (nf < 8 || strstr(f[2], "master") == NULL || strstr(f[2], "fail"))
      continue;
    for (k = 8; k < nf; k++) {
      unsigned lo, hi;
      if (f[k][0] == '[')
        continue;   /* a slot being migrated or imported */
      if (sscanf(f[k], "%u-%u", &lo, &hi) != 2) {
        if (sscanf(f[k], "%u", &lo) != 1)
          continue;
        hi = lo;
      }
      if (slot >= lo && slot <= hi) {
        const char *colon = strchr(f[1], ':');
        port = colon != NULL ? atoi(colon + 1) : 0;
        break;
      }
    }
  }
  free(text);
  return port;
}

static unsigned node_index(const harness_server *s, const char *key) {
  char buf[32];
  if (harness_cmdf(s, buf, sizeof(buf), "CLUSTER KEYSLOT %s", key) != 0)
    return 0;
  return (unsigned)strtoul(buf, NULL, 10);
}

int harness_cluster_owner(const harness_server *srv, int n, const char *key) {
  int i, j;
  for (i = 0; i < n; i++) {
    int port;
    if (srv[i].pid == 0 || srv[i].paused)
      continue;
    port = owner_port(&srv[i], node_index(&srv[i], key));
    for (j = 0; j < n; j++)
      if (port != 0 && srv[j].port == port)
        return j;
    return -1;
  }
  return -1;
}

typedef struct owner_check {
  const harness_server *srv;
  int n;
  unsigned slot;
  int port;
} owner_check;

static int owner_agreed(void *arg) {
  const owner_check *oc = arg;
  char buf[2048];
  int i;
  for (i = 0; i < oc->n; i++) {
    if (oc->srv[i].pid == 0 || oc->srv[i].paused)
      continue;
    if (harness_cmdf(&oc->srv[i], buf, sizeof(buf), "CLUSTER INFO") != 0 ||
        strstr(buf, "cluster_state:ok") == NULL ||
        owner_port(&oc->srv[i], oc->slot) != oc->port)
      return 0;
  }
  return 1;
}

void harness_cluster_wait_owner(const harness_server *srv, int n,
                                unsigned slot, const harness_server *primary) {
  owner_check oc = {srv, n, slot, primary->port};
  if (harness_wait_for(owner_agreed, &oc, (uint64_t)harness_bound_ms(20000)))
    TEST_FAIL("cluster: the nodes do not agree that %d serves slot %u",
              primary->port, slot);
}

void harness_cluster_move_slot(harness_server *srv, int n, unsigned slot,
                               harness_server *src, harness_server *dst,
                               int halfway, int moved) {
  char buf[256];
  redisReply *keys;
  size_t k;
  if (harness_cmdf(dst, buf, sizeof(buf), "CLUSTER SETSLOT %u IMPORTING %s",
                   slot, src->node_id) != 0 || strcmp(buf, "OK") != 0)
    TEST_FAIL("cluster: SETSLOT IMPORTING: %s", buf);
  if (harness_cmdf(src, buf, sizeof(buf), "CLUSTER SETSLOT %u MIGRATING %s",
                   slot, dst->node_id) != 0 || strcmp(buf, "OK") != 0)
    TEST_FAIL("cluster: SETSLOT MIGRATING: %s", buf);
  keys = cmd_reply(src, "CLUSTER GETKEYSINSLOT %u 1000", slot);
  if (keys == NULL || keys->type != REDIS_REPLY_ARRAY)
    TEST_FAIL("cluster: GETKEYSINSLOT");
  for (k = 0; k < keys->elements; k++) {
    if (halfway && (int)k >= moved)
      break;
    if (harness_cmdf(src, buf, sizeof(buf), "MIGRATE 127.0.0.1 %d %b 0 5000",
                     dst->port, keys->element[k]->str,
                     (size_t)keys->element[k]->len) != 0 ||
        (strcmp(buf, "OK") != 0 && strcmp(buf, "NOKEY") != 0))
      TEST_FAIL("cluster: MIGRATE: %s", buf);
  }
  freeReplyObject(keys);
  if (!halfway)
    harness_cluster_finish_slot(srv, n, slot, src, dst);
}

void harness_cluster_finish_slot(harness_server *srv, int n, unsigned slot,
                                 harness_server *src, harness_server *dst) {
  char buf[256];
  redisReply *keys = cmd_reply(src, "CLUSTER GETKEYSINSLOT %u 1000", slot);
  size_t k;
  int i;
  if (keys == NULL || keys->type != REDIS_REPLY_ARRAY)
    TEST_FAIL("cluster: GETKEYSINSLOT");
  for (k = 0; k < keys->elements; k++)
    if (harness_cmdf(src, buf, sizeof(buf), "MIGRATE 127.0.0.1 %d %b 0 5000",
                     dst->port, keys->element[k]->str,
                     (size_t)keys->element[k]->len) != 0 ||
        (strcmp(buf, "OK") != 0 && strcmp(buf, "NOKEY") != 0))
      TEST_FAIL("cluster: MIGRATE: %s", buf);
  freeReplyObject(keys);
  if (harness_cmdf(dst, buf, sizeof(buf), "CLUSTER SETSLOT %u NODE %s", slot,
                   dst->node_id) != 0 || strcmp(buf, "OK") != 0)
    TEST_FAIL("cluster: SETSLOT NODE on the target: %s", buf);
  if (harness_cmdf(src, buf, sizeof(buf), "CLUSTER SETSLOT %u NODE %s", slot,
                   dst->node_id) != 0 || strcmp(buf, "OK") != 0)
    TEST_FAIL("cluster: SETSLOT NODE on the source: %s", buf);
  for (i = 0; i < n; i++)
    if (&srv[i] != src && &srv[i] != dst && srv[i].pid != 0 &&
        !srv[i].paused && harness_is_primary(&srv[i]) == 1)
      (void)harness_cmdf(&srv[i], buf, sizeof(buf),
                         "CLUSTER SETSLOT %u NODE %s", slot, dst->node_id);
  harness_cluster_wait_owner(srv, n, slot, dst);
}

/* ---- sentinels ---- */

typedef struct sentinel_check {
  const harness_server *srv;
  int n;
  const char *name;
  int replicas;
} sentinel_check;

static int sentinels_ready(void *arg) {
  const sentinel_check *sc = arg;
  int i;
  for (i = 0; i < sc->n; i++) {
    redisReply *r = cmd_reply(&sc->srv[i], "SENTINEL MASTER %s", sc->name);
    int ok = 0;
    size_t k;
    if (r == NULL)
      return 0;
    if (r->type == REDIS_REPLY_ARRAY)
      for (k = 0; k + 1 < r->elements; k += 2) {
        if (strcmp(r->element[k]->str, "num-slaves") == 0 &&
            atoi(r->element[k + 1]->str) >= sc->replicas)
          ok |= 1;
        if (strcmp(r->element[k]->str, "num-other-sentinels") == 0 &&
            atoi(r->element[k + 1]->str) >= sc->n - 1)
          ok |= 2;
      }
    freeReplyObject(r);
    if (ok != 3)
      return 0;
  }
  return 1;
}

void harness_sentinel_start(harness_server *srv, int n, const char *name,
                            const harness_server *primary, int replicas) {
  sentinel_check sc = {srv, n, name, replicas};
  int i;
  if (n < 1 || n > 5)
    TEST_FAIL("sentinels: 1..5");
  for (i = 0; i < n; i++) {
    srv[i].sentinel = 1;
    srv[i].sentinel_port = primary->port;
    srv[i].sentinel_quorum = n / 2 + 1;
    snprintf(srv[i].sentinel_name, sizeof(srv[i].sentinel_name), "%s", name);
  }
  harness_start(srv, n);
  if (harness_wait_for(sentinels_ready, &sc, (uint64_t)harness_bound_ms(15000)))
    TEST_FAIL("sentinels did not find each other and the replicas in time");
}

const char *harness_sentinel_addr(const harness_server *srv, int n,
                                  const char *name) {
  static char buf[512];
  int i;
  size_t len = (size_t)snprintf(buf, sizeof(buf),
                                "redis+sentinel://127.0.0.1:%d/%s",
                                srv[0].port, name);
  for (i = 1; i < n && len < sizeof(buf); i++)
    len += (size_t)snprintf(buf + len, sizeof(buf) - len,
                            "%csentinel=127.0.0.1:%d", i == 1 ? '?' : '&',
                            srv[i].port);
  return buf;
}

int harness_sentinel_primary_port(const harness_server *sentinel,
                                  const char *name) {
  redisReply *r = cmd_reply(sentinel, "SENTINEL get-master-addr-by-name %s",
                            name);
  int port = 0;
  if (r == NULL)
    return 0;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
    port = atoi(r->element[1]->str);
  freeReplyObject(r);
  return port;
}
