/* flock(1)'s spellings take the same lock (issue 29, item 5): with one
 * `redlock run` holding a name, another `run -n` of that name in any mode
 * that conflicts exits 75 (not acquired) without running its command.
 * N = 3 real masters.
 *
 *  a) plain holds: -x -n and -s -n are refused.
 *  b) -x holds: plain -n, -x -n and -s -n are refused.
 *  c) -s holds: plain -n and -x -n are refused, another -s -n runs.
 *  d) once the holders are gone, plain -n runs. */
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];

static void path_of(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", tmpdir, name);
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int started(void *arg) {
  return exists(arg);
}

/* `redlock run MODE job -- ...` in the background, returned once its
 * command runs (it holds the lock). mode: "", "-x" or "-s". */
static pid_t hold(const char *mode) {
  char flag[300], script[400], out[300], err[300];
  pid_t pid;
  path_of(flag, sizeof(flag), "holding");
  unlink(flag);
  path_of(out, sizeof(out), "holder.out");
  path_of(err, sizeof(err), "holder.err");
  snprintf(script, sizeof(script), "echo > %s; exec sleep 60", flag);
  if (mode[0] != '\0') {
    char *av[] = {"redlock", "run", (char *)mode, "job", "--", "sh", "-c",
                  script, NULL};
    pid = harness_spawn(cli, av, out, err);
  } else {
    char *av[] = {"redlock", "run", "job", "--", "sh", "-c", script, NULL};
    pid = harness_spawn(cli, av, out, err);
  }
  if (harness_wait_for(started, flag, (uint64_t)harness_bound_ms(10000)) !=
      0)
    TEST_FAIL("run %s never started its command", mode);
  return pid;
}

static void end_hold(pid_t pid) {
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  ASSERT_EQ(harness_wait_exit(pid, (uint64_t)harness_bound_ms(10000)), 143);
}

/* `redlock run MODE -n job -- touch ran`: its exit status; *ran whether
 * the command ran. */
static int try_run(const char *mode, int *ran) {
  char flag[300], err[300], msg[1024];
  int st;
  path_of(flag, sizeof(flag), "ran");
  path_of(err, sizeof(err), "try.err");
  unlink(flag);
  st = harness_sh("%s run %s -n job -- touch %s 2>%s", cli, mode, flag, err);
  *ran = exists(flag);
  harness_read_file(err, msg, sizeof(msg));
  printf("run %s -n: exit %d, command %s; %s", mode, st,
         *ran ? "ran" : "did not run", msg[0] != '\0' ? msg : "\n");
  return st;
}

static void refused(const char *holder, const char *mode) {
  int ran;
  int st = try_run(mode, &ran);
  if (st != 75 || ran)
    TEST_FAIL("with run %s holding, run %s -n exited %d and its command "
              "%s", holder[0] ? holder : "(plain)", mode[0] ? mode : "(plain)",
              st, ran ? "ran" : "did not run");
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256];
  pid_t h, h2;
  int ran;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-modes PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-modes-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* a) */
  h = hold("");
  refused("", "-x");
  refused("", "-s");
  end_hold(h);

  /* b) */
  h = hold("-x");
  refused("-x", "");
  refused("-x", "-x");
  refused("-x", "-s");
  end_hold(h);

  /* c) */
  h = hold("-s");
  refused("-s", "");
  refused("-s", "-x");
  ASSERT_EQ(try_run("-s", &ran), 0);
  ASSERT(ran);
  h2 = hold("-s");   /* a second reader holds alongside */
  end_hold(h);
  refused("-s", "");
  end_hold(h2);

  /* d) */
  ASSERT_EQ(try_run("", &ran), 0);
  ASSERT(ran);

  harness_sh("rm -rf %s", tmpdir);
  harness_stop_all();
  return 0;
}
