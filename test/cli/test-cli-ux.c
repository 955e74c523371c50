/* The CLI as a new user meets it (issue 11, items 1-5).
 *
 *  1. `redlock COMMAND --help` / `-h` / `redlock help COMMAND` print that
 *     command's usage and exit 0; options after KEY (and --opt=value);
 *     spaces after the commas of a server list; durations in days.
 *  2. `acquire --fence` keeps one value a line (token, then the fence);
 *     `extend` prints the new validity in ms.
 *  3. Credentials: while `redlock run` runs, /proc/PID/cmdline of the CLI
 *     does not show the password given in --servers, and the child's
 *     environment (/proc/CHILD/environ, read by the child itself) has no
 *     REDLOCK_PASSWORD and no user:password in REDLOCK_SERVERS;
 *     --password-file and REDLOCK_PASSWORD_FILE work.
 *  4. Signals: Ctrl-C typed on the terminal (a pty here) reaches the child
 *     once, from the terminal, never a second time from the CLI; SIGTERM to
 *     `run` whose child ignores it escalates to SIGKILL after --grace,
 *     releases the lock and exits 143; a `run` killed with SIGKILL leaves a
 *     child that gets SIGTERM (PR_SET_PDEATHSIG).
 *  5. Not acquired because of the restart guard: the message says so in
 *     words ("never seen by any client ... (restart guard)").
 *
 * The test binary doubles as the Ctrl-C child ("sigint-child LOG STOP"):
 * it logs the origin of every SIGINT it gets (si_code, si_pid). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "harness.h"

#define N 3
#define PASSWORD "s3cret-pw"

extern char **environ;
static const char *cli;
static char tmpdir[200];

/* ---- the Ctrl-C child ---------------------------------------------------- */

static int log_fd = -1;

static void on_sigint(int sig, siginfo_t *si, void *ctx) {
  char line[96];
  int n;
  (void)sig;
  (void)ctx;
  n = snprintf(line, sizeof(line), "INT code=%d pid=%ld\n", si->si_code,
               (long)si->si_pid);
  if (write(log_fd, line, (size_t)n) < 0) {
    /* nothing to do */
  }
}

static int sigint_child(const char *logpath, const char *stop) {
  struct sigaction sa;
  int i;
  log_fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log_fd < 0)
    return 2;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigint;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  if (write(log_fd, "READY\n", 6) < 0)
    return 2;
  for (i = 0; i < 3000 && access(stop, F_OK) != 0; i++)
    uv_sleep(10);   /* bounded: 30 s */
  return 0;
}

/* ---- helpers ------------------------------------------------------------- */

static void path_of(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", tmpdir, name);
}

static void wait_file(const char *path, uint64_t timeout_ms,
                      const char *what) {
  uint64_t end = harness_now_ms() + timeout_ms;
  while (access(path, F_OK) != 0) {
    if (harness_now_ms() > end)
      TEST_FAIL("%s: %s never appeared", what, path);
    uv_sleep(2);
  }
}

/* Runs a shell command line; its exit status (bounded, 20 s). */
#define sh harness_sh

/* The CLI with argv (argv[0] replaced), stdout/stderr to files. */
static pid_t spawn_cli(char **argv, const char *out, const char *err) {
  argv[0] = (char *)cli;
  return (pid_t)harness_spawn(cli, argv, out, err);
}

static int keys_left(harness_server *srv) {
  int i, n = 0;
  for (i = 0; i < N; i++)
    n += (int)harness_dbsize(&srv[i]);
  return n;
}

/* Masters where `key` exists. */
static int held_on(harness_server *srv, const char *key) {
  char val[128];
  int i, n = 0;
  for (i = 0; i < N; i++)
    n += harness_get(&srv[i], key, val, sizeof(val)) == 1;
  return n;
}

/* ---- 1, 2: usage --------------------------------------------------------- */

static void case_usage(harness_server *srv, const char *servers) {
  char out[300], buf[8192], tok[128], val[128];
  path_of(out, sizeof(out), "out");

  ASSERT_EQ(sh("%s acquire --help > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "usage: redlock acquire"));
  ASSERT_EQ(sh("%s run -h > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "usage: redlock run"));
  ASSERT_EQ(sh("%s help release > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "usage: redlock release"));
  ASSERT_EQ(sh("%s status --token x --help > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "usage: redlock status"));
  ASSERT_EQ(sh("%s extend --help > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "validity in ms"));
  ASSERT_EQ(sh("%s help bogus 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s status --ttl 5s k 2>/dev/null", cli), 64);
  fprintf(stderr, "1) per-command help: ok\n");

  /* Options after KEY, --opt=value, days, a spaced server list. */
  {
    char spaced[512];
    int i;
    const char *p = servers;
    size_t o = 0;
    for (; *p && o < sizeof(spaced) - 3; p++) {
      spaced[o++] = *p;
      if (*p == ',')
        spaced[o++] = ' ';
    }
    spaced[o] = '\0';
    ASSERT_EQ(sh("%s acquire ux-a --also ux-b --ttl=1h "
                 "--servers '%s' > %s", cli, spaced, out), 0);
    harness_read_file(out, tok, sizeof(tok));
    tok[strcspn(tok, "\n")] = '\0';
    for (i = 0; i < N; i++) {
      ASSERT_EQ(harness_get(&srv[i], "ux-b", val, sizeof(val)), 1);
      ASSERT_STR_EQ(val, tok);
      ASSERT_GT(harness_pttl(&srv[i], "ux-a"), 3590000);
    }
    ASSERT_EQ(sh("%s release ux-a %s --also ux-b", cli, tok), 0);
    ASSERT_EQ(keys_left(srv), 0);
  }
  fprintf(stderr, "1) options after KEY, --ttl=1h, 'a, b, c': ok\n");

  /* 2: acquire --fence: the token alone on line 1, the fence on line 2. */
  {
    char *nl;
    long long fence;
    ASSERT_EQ(sh("%s acquire --fence ux-f > %s", cli, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    ASSERT_EQ(harness_count(buf, "\n"), 2);
    nl = strchr(buf, '\n');
    *nl = '\0';
    ASSERT_EQ(harness_get(&srv[0], "ux-f", val, sizeof(val)), 1);
    ASSERT_STR_EQ(buf, val);
    fence = strtoll(nl + 1, NULL, 10);
    ASSERT_GT(fence, 0);
    ASSERT_EQ(sh("%s acquire --fence ux-g | { read tok; read fence; "
                 "[ \"$fence\" -gt 0 ] && %s release ux-g \"$tok\"; }", cli,
                 cli), 0);
    ASSERT_EQ(sh("%s extend --ttl 45s ux-f %s > %s", cli, buf, out), 0);
    harness_read_file(out, val, sizeof(val));
    ASSERT_GT(strtoll(val, NULL, 10), 40000);
    ASSERT_LE(strtoll(val, NULL, 10), 45000);
    ASSERT_EQ(sh("%s release ux-f %s", cli, buf), 0);
  }
  fprintf(stderr, "2) acquire --fence: token, then fence; extend prints "
          "the validity in ms: ok\n");
}

/* ---- 3: credentials ------------------------------------------------------ */

static void case_credentials(harness_server *srv) {
  char url_servers[512], plain_servers[512];
  char started[300], stop[300], envf[300], out[300], err[300];
  char pwfile[300], cmdline_path[64], buf[16384], script[2048];
  pid_t pid;
  int i, fd;
  ssize_t n;

  snprintf(url_servers, sizeof(url_servers),
           "redis://:%s@%s,redis://:%s@%s,redis://:%s@%s", PASSWORD,
           harness_addr(&srv[0]), PASSWORD, harness_addr(&srv[1]), PASSWORD,
           harness_addr(&srv[2]));
  snprintf(plain_servers, sizeof(plain_servers), "%s,%s,%s",
           harness_addr(&srv[0]), harness_addr(&srv[1]),
           harness_addr(&srv[2]));
  path_of(started, sizeof(started), "cred-started");
  path_of(stop, sizeof(stop), "cred-stop");
  path_of(envf, sizeof(envf), "cred-env");
  path_of(out, sizeof(out), "cred-out");
  path_of(err, sizeof(err), "cred-err");
  path_of(pwfile, sizeof(pwfile), "pw");

  /* Both ways of leaking: --servers with a password on argv, and the
   * environment (REDLOCK_SERVERS with user:password, REDLOCK_PASSWORD). */
  setenv("REDLOCK_SERVERS", url_servers, 1);
  setenv("REDLOCK_PASSWORD", PASSWORD, 1);
  snprintf(script, sizeof(script),
           "tr '\\000' '\\n' < /proc/$$/environ > %s; touch %s; i=0; "
           "while [ ! -e %s ] && [ $i -lt 1500 ]; do sleep 0.02; "
           "i=$((i+1)); done", envf, started, stop);
  {
    char *argv[] = {NULL, "--servers", url_servers, "run", "ux-cred", "--",
                    "sh", "-c", script, NULL};
    pid = spawn_cli(argv, out, err);
  }
  wait_file(started, 10000, "run with credentials");
  snprintf(cmdline_path, sizeof(cmdline_path), "/proc/%ld/cmdline",
           (long)pid);
  fd = open(cmdline_path, O_RDONLY);
  ASSERT_GE(fd, 0);
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  ASSERT_GT(n, 0);
  for (i = 0; i < n; i++)
    if (buf[i] == '\0')
      buf[i] = ' ';
  buf[n] = '\0';
  fprintf(stderr, "3) ps shows: %s\n", buf);
  if (strstr(buf, PASSWORD) != NULL)
    TEST_FAIL("3) the password is visible in /proc/%ld/cmdline: %s",
              (long)pid, buf);
  ASSERT_NOT_NULL(strstr(buf, "redis://:*********@"));
  harness_read_file(envf, buf, sizeof(buf));
  if (strstr(buf, PASSWORD) != NULL)
    TEST_FAIL("3) the child's environment holds the password:\n%s", buf);
  ASSERT_NULL(strstr(buf, "REDLOCK_PASSWORD="));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_SERVERS=redis://"));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_TOKEN="));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_KEY=ux-cred"));
  close(open(stop, O_WRONLY | O_CREAT, 0644));
  ASSERT_EQ(harness_wait_exit(pid, 10000), 0);
  fprintf(stderr, "3) password hidden from ps and from the child: ok\n");

  /* --password-file and REDLOCK_PASSWORD_FILE. */
  unsetenv("REDLOCK_PASSWORD");
  setenv("REDLOCK_SERVERS", plain_servers, 1);
  fd = open(pwfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, PASSWORD "\n", strlen(PASSWORD) + 1),
            (ssize_t)strlen(PASSWORD) + 1);
  close(fd);
  ASSERT_EQ(sh("%s run --wait 0 ux-pw -- true 2>/dev/null", cli),
            77);   /* NOAUTH: not a busy lock (EX_NOPERM, issue 21) */
  ASSERT_EQ(sh("%s run --password-file %s ux-pw -- true", cli, pwfile), 0);
  setenv("REDLOCK_PASSWORD_FILE", pwfile, 1);
  ASSERT_EQ(sh("%s run ux-pw -- true", cli), 0);
  ASSERT_EQ(sh("%s --password-file /nonexistent run ux-pw -- true "
               "2>/dev/null", cli), 78);   /* EX_CONFIG (issue 33) */
  unsetenv("REDLOCK_PASSWORD_FILE");
  fprintf(stderr, "3) --password-file, REDLOCK_PASSWORD_FILE: ok\n");
  ASSERT_EQ(keys_left(srv), 0);
}

/* ---- 4: signals ---------------------------------------------------------- */

/* `redlock run KEY -- SELF sigint-child LOG STOP` on a pty of its own, as
 * a terminal session would; Ctrl-C typed `presses` times. */
static void case_ctrl_c(const char *self) {
  char logp[300], stop[300], buf[8192];
  int master, presses, i;
  pid_t pid;
  char *slave;
  path_of(logp, sizeof(logp), "ctrlc-log");
  path_of(stop, sizeof(stop), "ctrlc-stop");
  master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  slave = ptsname(master);
  ASSERT_NOT_NULL(slave);
  pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    /* A session of its own with the pty as controlling terminal: its
     * process group is the terminal's foreground group. */
    char *argv[] = {(char *)cli, "run", "ux-ctrlc", "--", (char *)self,
                    "sigint-child", logp, stop, NULL};
    int s;
    setsid();
    s = open(slave, O_RDWR);
    if (s < 0)
      _exit(120);
    dup2(s, 0);
    dup2(s, 1);
    dup2(s, 2);
    if (s > 2)
      close(s);
    close(master);
    signal(SIGINT, SIG_DFL);
    execv(cli, argv);
    _exit(121);
  }
  /* Wait until the child runs, then press Ctrl-C a few times, each once
   * the previous one has been logged. */
  {
    uint64_t end = harness_now_ms() + 10000;
    for (;;) {
      struct pollfd p = {master, POLLIN, 0};
      harness_read_file(logp, buf, sizeof(buf));
      if (strstr(buf, "READY") != NULL)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("4) the Ctrl-C child never started");
      if (poll(&p, 1, 2) > 0 && read(master, buf, sizeof(buf)) < 0)
        break;
    }
  }
  presses = 5;
  for (i = 0; i < presses; i++) {
    uint64_t end = harness_now_ms() + 5000;
    ASSERT_EQ(write(master, "\003", 1), 1);
    for (;;) {
      harness_read_file(logp, buf, sizeof(buf));
      if (harness_count(buf, "INT ") >= i + 1)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("4) Ctrl-C %d never reached the child", i + 1);
      uv_sleep(2);
    }
    uv_sleep(30);   /* time for a second, forwarded copy to show up */
  }
  close(open(stop, O_WRONLY | O_CREAT, 0644));
  {
    int st = harness_wait_exit(pid, 10000);
    harness_read_file(logp, buf, sizeof(buf));
    fprintf(stderr, "4) %d Ctrl-C on the terminal; the child got:\n%s", presses,
            buf);
    {
      char mine[64];
      snprintf(mine, sizeof(mine), "pid=%ld\n", (long)pid);
      if (strstr(buf, mine) != NULL || harness_count(buf, "INT ") != presses)
        TEST_FAIL("4) Ctrl-C reached the child %d times for %d presses "
                  "(copies from redlock: %s): it forwarded what the "
                  "terminal had already sent", harness_count(buf, "INT "),
                  presses, strstr(buf, mine) ? "yes" : "no");
    }
    ASSERT_EQ(st, 0);
  }
  close(master);
  fprintf(stderr, "4) Ctrl-C: once per press, none forwarded: ok\n");
}

static void case_sigterm(harness_server *srv) {
  char started[300], pidf[300], out[300], err[300], buf[64], script[1024];
  pid_t pid, child;
  uint64_t t0;
  int st;
  path_of(started, sizeof(started), "term-started");
  path_of(pidf, sizeof(pidf), "term-pid");
  path_of(out, sizeof(out), "term-out");
  path_of(err, sizeof(err), "term-err");
  snprintf(script, sizeof(script),
           "trap '' TERM; echo $$ > %s; touch %s; i=0; "
           "while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done", pidf,
           started);
  {
    char *argv[] = {NULL, "run", "--grace", "300ms", "ux-term", "--", "sh",
                    "-c", script, NULL};
    pid = spawn_cli(argv, out, err);
  }
  wait_file(started, 10000, "SIGTERM case");
  harness_read_file(pidf, buf, sizeof(buf));
  child = (pid_t)strtol(buf, NULL, 10);
  ASSERT_GT(child, 0);
  ASSERT_EQ(held_on(srv, "ux-term"), N);
  t0 = harness_now_ms();
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  st = harness_wait_exit(pid, 5000);
  if (st != 143)
    TEST_FAIL("4) SIGTERM to run whose child ignores it: exit %d after "
              "%llu ms, wanted 143 after the 300 ms grace", st,
              (unsigned long long)(harness_now_ms() - t0));
  /* Killed (a zombie until reaped: with the exec helper killed too, it
   * comes to this test, a subreaper). */
  waitpid(child, NULL, WNOHANG);
  ASSERT_NE(kill(child, 0), 0);
  ASSERT_EQ(held_on(srv, "ux-term"), 0);   /* released */
  fprintf(stderr, "4) SIGTERM, child ignores it: SIGKILL after the grace, "
          "exit 143 after %llu ms, lock released: ok\n",
          (unsigned long long)(harness_now_ms() - t0));
}

static void case_parent_death(void) {
  char started[300], termed[300], pidf[300], out[300], err[300], buf[64];
  char script[1024];
  pid_t pid, child;
  uint64_t end;
  path_of(started, sizeof(started), "pd-started");
  path_of(termed, sizeof(termed), "pd-termed");
  path_of(pidf, sizeof(pidf), "pd-pid");
  path_of(out, sizeof(out), "pd-out");
  path_of(err, sizeof(err), "pd-err");
  snprintf(script, sizeof(script),
           "trap 'touch %s; exit 0' TERM; echo $$ > %s; touch %s; i=0; "
           "while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done", termed,
           pidf, started);
  {
    char *argv[] = {NULL, "run", "ux-pdeath", "--", "sh", "-c", script,
                    NULL};
    pid = spawn_cli(argv, out, err);
  }
  wait_file(started, 10000, "parent-death case");
  harness_read_file(pidf, buf, sizeof(buf));
  child = (pid_t)strtol(buf, NULL, 10);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(harness_wait_exit(pid, 5000), 128 + SIGKILL);
  end = harness_now_ms() + 5000;
  while (access(termed, F_OK) != 0) {
    if (harness_now_ms() > end) {
      kill(child, SIGKILL);
      TEST_FAIL("4) redlock run was killed, but its child went on without "
                "the lock (no SIGTERM within 5 s)");
    }
    uv_sleep(5);
  }
  end = harness_now_ms() + 5000;
  while (kill(child, 0) == 0 && harness_now_ms() < end)
    uv_sleep(5);
  fprintf(stderr, "4) run killed with SIGKILL: its child got SIGTERM: ok\n");
}

/* ---- 5: the restart guard in words --------------------------------------- */

static void case_guard_words(const char *servers) {
  char out[300], err[300], buf[8192];
  path_of(out, sizeof(out), "g-out");
  path_of(err, sizeof(err), "g-err");
  unsetenv("REDLOCK_RESTART_GUARD");
  ASSERT_EQ(sh("%s --servers %s acquire --ttl 20s ux-guard > %s 2> %s", cli,
               servers, out, err), 75);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "5) %s", buf);
  if (strstr(buf, "(restart guard): their votes count again within") ==
      NULL || strstr(buf, "the window is the ttl record, raised to 20.0 s")
      == NULL)
    TEST_FAIL("5) the refusal does not say that the restart guard held "
              "the votes: %s", buf);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
}

/* REDLOCK_UX_CASES="usage,cred,..." runs only those (all by default). */
static int want(const char *name) {
  const char *only = getenv("REDLOCK_UX_CASES");
  return only == NULL || *only == '\0' || strstr(only, name) != NULL;
}

int main(int argc, char **argv) {
  harness_server srv[N], pw[N];
  char servers[256];
  char buf[64];
  int i;

  if (argc == 4 && strcmp(argv[1], "sigint-child") == 0)
    return sigint_child(argv[2], argv[3]);
  if (argc < 2)
    TEST_FAIL("usage: test-cli-ux PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  memset(pw, 0, sizeof(pw));
  harness_start(srv, N);
  harness_start(pw, N);
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&pw[i], buf, sizeof(buf),
                           "CONFIG SET requirepass %s", PASSWORD), 0);
    pw[i].admin_user = "default";
    pw[i].admin_pass = PASSWORD;
  }
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-ux-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));

  /* Fresh masters without persistence: the guard is the subject of 5
   * only. */
  if (want("guard"))
    case_guard_words(servers);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  setenv("REDLOCK_SERVERS", servers, 1);
  if (want("usage"))
    case_usage(srv, servers);
  if (want("cred"))
    case_credentials(pw);
  setenv("REDLOCK_SERVERS", servers, 1);
  unsetenv("REDLOCK_PASSWORD");
  if (want("ctrlc"))
    case_ctrl_c(argv[0]);
  if (want("term"))
    case_sigterm(srv);
  if (want("pdeath"))
    case_parent_death();

  ASSERT_EQ(sh("rm -rf %s", tmpdir), 0);
  harness_stop_all();
  return 0;
}
