/* `redlock run` interrupted while it is still waiting for the lock.
 *
 * The key is held by another owner (`redlock acquire`), so `redlock run
 * --wait 30s KEY -- true` keeps retrying. SIGINT, SIGTERM or SIGHUP sent
 * to it then must end it at once with exit status 128 + the signal (130,
 * 143, 129), as a shell expects from an interrupted command, and leave
 * nothing behind: the key still belongs to the first owner only, on every
 * master, and no other key exists. The same with --wake (the waiter also
 * has subscriber connections to close).
 *
 * Why: the run's signal handles used to be closed twice (once by the
 * signal handler, again by the acquire callback that the close cancels),
 * and libuv aborted on `!uv__is_closing(handle)`: exit 134 (SIGABRT).
 *
 * The CLI runs in its own process (posix_spawn, no shell), with the
 * signals it handles at their default disposition, so the signal reaches
 * it and nothing else. It is signalled only once it is provably waiting:
 * every master has run at least three lock commands (SET or a script)
 * since it started, i.e. it has retried at least once. */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define N 3
#define KEY "cli-sig-key"

extern char **environ;
static const char *cli;
static char tmpdir[200];

/* The CLI with argv (argv[0] replaced), stdout/stderr to files. */
static pid_t spawn_cli(char **argv, const char *out, const char *err) {
  argv[0] = (char *)cli;
  return (pid_t)harness_spawn(cli, argv, out, err);
}

/* Raw wait status of pid, waiting at most timeout_ms (bounded polling);
 * the process is killed and the test fails on timeout. */
static int wait_status(pid_t pid, uint64_t timeout_ms, const char *what) {
  uint64_t end = harness_now_ms() + timeout_ms;
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return st;
    if (harness_now_ms() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      TEST_FAIL("%s did not finish within %llu ms", what,
                (unsigned long long)timeout_ms);
    }
    uv_sleep(2);
  }
}

static void describe(int st, char *buf, size_t len) {
  if (WIFEXITED(st))
    snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
             strsignal(WTERMSIG(st)));
  else
    snprintf(buf, len, "wait status 0x%x", st);
}

/* Commands a lock client sends to take a lock (SET, or a script), run on
 * a master so far (INFO commandstats); -1 on error. This test itself
 * sends none of them while a run is going. */
static long long lock_commands(const harness_server *s) {
  static const char *const names[] = {"cmdstat_set:", "cmdstat_eval:",
                                      "cmdstat_evalsha:",
                                      "cmdstat_fcall:"};
  char buf[16384];
  long long n = 0;
  size_t i;
  if (harness_cmdf(s, buf, sizeof(buf), "INFO commandstats") != 0)
    return -1;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const char *p = strstr(buf, names[i]);
    if (p != NULL && strncmp(p + strlen(names[i]), "calls=", 6) == 0)
      n += strtoll(p + strlen(names[i]) + 6, NULL, 10);
  }
  return n;
}

/* Subscribers to KEY's release channel on a master. (A script: this
 * counts as a lock command above, so it is not used while counting.) */
static int subscribers(const harness_server *s) {
  char buf[64];
  if (harness_cmdf(s, buf, sizeof(buf), "EVAL %s 0 %s",
                   "return redis.call('pubsub','numsub',ARGV[1])[2]",
                   "__redlock__:" KEY) != 0)
    return -1;
  return atoi(buf);
}

/* Fails unless KEY holds tok on every master and nothing else exists. */
static void check_only_first_owner(const harness_server *srv,
                                   const char *tok, const char *errfile) {
  char val[128];
  char err[4096];
  int i;
  for (i = 0; i < N; i++) {
    int64_t n = harness_dbsize(&srv[i]);
    int got = harness_get(&srv[i], KEY, val, sizeof(val));
    if (got != 1 || strcmp(val, tok) != 0 || n != 1) {
      harness_read_file(errfile, err, sizeof(err));
      TEST_FAIL("master %d: %s = %s, %lld keys; wanted the first owner's "
                "token and 1 key\n--- redlock stderr ---\n%s", i, KEY,
                got == 1 ? val : "(none)", (long long)n, err);
    }
  }
}

/* Returns 0 when the run ended as it should, 1 (after printing why) when
 * its exit status was wrong; fails the test at once on anything else. */
static int interrupt_waiting_run(const harness_server *srv,
                                 const char *tok, int sig, int wake) {
  char out[300], errf[300], err[4096], how[96];
  char *argv[12];
  long long before[N];
  uint64_t t0;
  pid_t pid;
  int st;
  int i;
  int k = 0;

  snprintf(out, sizeof(out), "%s/run.out", tmpdir);
  snprintf(errf, sizeof(errf), "%s/run.err", tmpdir);
  for (i = 0; i < N; i++) {
    before[i] = lock_commands(&srv[i]);
    ASSERT_GE(before[i], 0);
  }
  argv[k++] = NULL;   /* the CLI path */
  argv[k++] = "run";
  argv[k++] = "--wait";
  argv[k++] = "30s";
  if (wake)
    argv[k++] = "--wake";
  argv[k++] = KEY;
  argv[k++] = "--";
  argv[k++] = "true";
  argv[k] = NULL;
  pid = spawn_cli(argv, out, errf);

  /* Waiting: retrying on every master; then, with --wake, subscribed on
   * at least one. */
  t0 = harness_now_ms();
  for (;;) {
    int ready = 1;
    int subs = 0;
    for (i = 0; i < N && ready; i++)
      ready = before[i] < 0 || lock_commands(&srv[i]) >= before[i] + 3;
    if (ready)
      for (i = 0; i < N; i++)
        before[i] = -1;   /* done counting */
    for (i = 0; i < N && ready && wake; i++)
      subs += subscribers(&srv[i]) > 0;
    if (ready && (!wake || subs > 0))
      break;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      describe(st, how, sizeof(how));
      harness_read_file(errf, err, sizeof(err));
      TEST_FAIL("run ended before it was signalled (%s)\n%s", how, err);
    }
    if (harness_now_ms() - t0 > 10000) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      TEST_FAIL("run did not start waiting for %s within 10 s (%s)", KEY,
                before[0] < 0 ? "no subscriber" : "not retrying");
    }
    uv_sleep(2);
  }
  ASSERT_EQ(kill(pid, sig), 0);
  /* At once: the wait (30 s) is not what ends it. */
  st = wait_status(pid, 10000, "interrupted run");
  describe(st, how, sizeof(how));
  fprintf(stderr, "run%s waiting, %s: %s\n", wake ? " --wake" : "",
          strsignal(sig), how);
  /* The run never held the lock and left nothing behind. */
  check_only_first_owner(srv, tok, errf);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 128 + sig) {
    harness_read_file(errf, err, sizeof(err));
    fprintf(stderr, "%s:%d: run%s interrupted by %s while waiting: %s, "
            "wanted exit status %d\n--- redlock stderr ---\n%s\n",
            __FILE__, __LINE__, wake ? " --wake" : "", strsignal(sig), how,
            128 + sig, err);
    return 1;
  }
  return 0;
}

static void remove_tmpdir(void) {
  static const char *const files[] = {"acquire.out", "acquire.err",
                                      "run.out", "run.err"};
  char path[300];
  size_t i;
  for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", tmpdir, files[i]);
    unlink(path);
  }
  rmdir(tmpdir);
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256];
  char out[300], errf[300], tok[128], how[96];
  char *av[8];
  int failed = 0;
  int st;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-signals PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);   /* brand-new servers */
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-sig-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/acquire.out", tmpdir);
  snprintf(errf, sizeof(errf), "%s/acquire.err", tmpdir);

  /* The first owner: holds KEY for 30 s and prints its token. */
  av[0] = NULL;
  av[1] = "acquire";
  av[2] = "--ttl";
  av[3] = "30s";
  av[4] = KEY;
  av[5] = NULL;
  st = wait_status(spawn_cli(av, out, errf), 20000, "acquire");
  describe(st, how, sizeof(how));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    TEST_FAIL("redlock acquire: %s", how);
  harness_read_file(out, tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  ASSERT_GE(strlen(tok), 32);
  check_only_first_owner(srv, tok, errf);

  /* Every case runs; the test fails at the end if any went wrong. */
  failed += interrupt_waiting_run(srv, tok, SIGINT, 0);
  failed += interrupt_waiting_run(srv, tok, SIGTERM, 0);
  failed += interrupt_waiting_run(srv, tok, SIGHUP, 0);
  failed += interrupt_waiting_run(srv, tok, SIGINT, 1);
  if (failed > 0) {
    remove_tmpdir();
    TEST_FAIL("%d of 4 interrupted runs did not exit with 128 + signal",
              failed);
  }

  /* The first owner still releases its key normally. */
  av[0] = NULL;
  av[1] = "release";
  av[2] = KEY;
  av[3] = tok;
  av[4] = NULL;
  st = wait_status(spawn_cli(av, out, errf), 20000, "release");
  describe(st, how, sizeof(how));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    TEST_FAIL("redlock release: %s", how);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  remove_tmpdir();
  harness_stop_all();
  return 0;
}
