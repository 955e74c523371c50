/* The redlock command-line tool against real masters: exit codes, usage
 * errors, acquire/extend/release/status, two `run`s on one key
 * serialize, `--wait 0` fails fast, a lost lock kills the child. */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>

#include "harness.h"

#define N 3

extern char **environ;
static const char *cli;
static char tmpdir[200];

#define sh harness_sh

static int file_has(const char *path, const char *needle) {
  char buf[8192];
  harness_read_file(path, buf, sizeof(buf));
  return strstr(buf, needle) != NULL;
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256];
  char out[300], tok[128], buf[8192];
  char val[128];
  uint64_t t0;
  pid_t pid;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/out", tmpdir);

  /* Usage errors: 64, never a crash. */
  unsetenv("REDLOCK_SERVERS");
  setenv("REDLOCK_RESTART_GUARD", "off", 1);   /* brand-new servers */
  ASSERT_EQ(sh("%s --help > %s", cli, out), 0);
  ASSERT(file_has(out, "Exit codes"));
  ASSERT_EQ(sh("%s acquire k 2>/dev/null", cli), 64);      /* no servers */
  setenv("REDLOCK_SERVERS", servers, 1);
  ASSERT_EQ(sh("%s 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s bogus k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --frob k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --ttl 5x k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --ttl -1s k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --ttl 0 k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --wait 10q k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s run k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s run k -- 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s release k 2>/dev/null", cli), 64);
  ASSERT_EQ(sh("%s --servers redis://h:99999 acquire k 2>/dev/null", cli),
            64);
  ASSERT_EQ(sh("%s --quorum 1 acquire k 2>/dev/null", cli), 64);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);   /* nothing half-done */

  /* acquire prints the token; a second acquire is refused with 75. */
  ASSERT_EQ(sh("%s acquire --ttl 30s cli-key > %s", cli, out), 0);
  harness_read_file(out, tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  ASSERT_GE(strlen(tok), 32);
  ASSERT_EQ(harness_get(&srv[0], "cli-key", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, tok);
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s acquire --wait 0 cli-key 2>/dev/null", cli), 75);
  ASSERT_LT(harness_now_ms() - t0, 3000);
  /* status: per master, mine, never the full token. */
  ASSERT_EQ(sh("%s status --token %s cli-key > %s", cli, tok, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "held on 3 of 3"));
  ASSERT_NOT_NULL(strstr(buf, "(mine)"));
  ASSERT_NULL(strstr(buf, tok));
  ASSERT_EQ(sh("%s --json status cli-key > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "\"held_on\":3"));
  ASSERT_NULL(strstr(buf, tok));
  /* The token cannot be delivered: nothing stays held (issue 21, items
   * 4 and 5). A full stdout: the lock is released, exit 1. A closed one:
   * refused before anything is sent (no libuv abort). run with closed
   * descriptors runs its command and exits with its status. */
  ASSERT_EQ(sh("%s acquire --ttl 30s full-key > /dev/full 2> %s", cli, out),
            1);
  ASSERT(file_has(out, "cannot write the token"));
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "full-key", val, sizeof(val)), 0);
  ASSERT_EQ(sh("%s acquire --ttl 30s full-key >&- 2> %s", cli, out), 1);
  ASSERT(file_has(out, "standard output is closed"));
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "full-key", val, sizeof(val)), 0);
  ASSERT_EQ(sh("%s run closed-key -- sh -c 'exit 7' <&- >&- 2>&-", cli), 7);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "closed-key", val, sizeof(val)), 0);

  /* extend and release by token. */
  ASSERT_EQ(sh("%s extend --ttl 60s cli-key %s > /dev/null", cli, tok), 0);
  ASSERT_GT(harness_pttl(&srv[1], "cli-key"), 50000);
  ASSERT_EQ(sh("%s release cli-key not-the-token 2>/dev/null", cli), 1);
  ASSERT_EQ(harness_get(&srv[0], "cli-key", val, sizeof(val)), 1);
  ASSERT_EQ(sh("%s --json release cli-key %s > %s", cli, tok, out), 0);
  ASSERT(file_has(out, "\"ok\":true"));
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  /* run: the command's status comes back ("--" is optional, as for
   * flock: the command starts at the first argument after KEY). */
  ASSERT_EQ(sh("%s run cli-run -- sh -c 'exit 7'", cli), 7);
  ASSERT_EQ(sh("%s run cli-run sh -c 'exit 8'", cli), 8);
  ASSERT_EQ(sh("%s run cli-run -- /nonexistent/cmd 2>/dev/null", cli),
            127);

  /* --fence: the command sees REDLOCK_FENCE, increasing run to run. */
  {
    char f1[64], f2[64];
    ASSERT_EQ(sh("%s run --fence cli-fence -- sh -c 'echo $REDLOCK_FENCE' "
                 "> %s", cli, out), 0);
    harness_read_file(out, f1, sizeof(f1));
    ASSERT_EQ(sh("%s run --fence cli-fence -- sh -c 'echo $REDLOCK_FENCE' "
                 "> %s", cli, out), 0);
    harness_read_file(out, f2, sizeof(f2));
    ASSERT_GT(strtoll(f1, NULL, 10), 0);
    ASSERT_GT(strtoll(f2, NULL, 10), strtoll(f1, NULL, 10));
  }

  /* --also: several resources at once; an overlapping one is refused. */
  ASSERT_EQ(sh("%s acquire --ttl 30s --also cli-m2 cli-m1 > %s", cli, out),
            0);
  harness_read_file(out, tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  ASSERT_EQ(harness_get(&srv[0], "cli-m2", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, tok);
  ASSERT_EQ(sh("%s acquire --also cli-m3 cli-m2 2>/dev/null", cli), 75);
  ASSERT_EQ(harness_get(&srv[0], "cli-m3", val, sizeof(val)), 0);
  ASSERT_EQ(sh("%s release --also cli-m2 cli-m1 %s", cli, tok), 0);
  ASSERT_EQ(harness_get(&srv[1], "cli-m1", val, sizeof(val)), 0);
  ASSERT_EQ(harness_get(&srv[1], "cli-m2", val, sizeof(val)), 0);

  /* --read / --write: readers share, a writer is refused meanwhile. */
  {
    char t1[128], t2[128];
    ASSERT_EQ(sh("%s acquire --read --ttl 30s cli-rw > %s", cli, out), 0);
    harness_read_file(out, t1, sizeof(t1));
    t1[strcspn(t1, "\n")] = '\0';
    ASSERT_EQ(sh("%s acquire --read --ttl 30s cli-rw > %s", cli, out), 0);
    harness_read_file(out, t2, sizeof(t2));
    t2[strcspn(t2, "\n")] = '\0';
    ASSERT_EQ(sh("%s acquire --write cli-rw 2>/dev/null", cli), 75);
    ASSERT_EQ(sh("%s release --read cli-rw %s", cli, t1), 0);
    ASSERT_EQ(sh("%s release --read cli-rw %s", cli, t2), 0);
    ASSERT_EQ(sh("%s run --write --wake --wait 5s cli-rw -- true", cli), 0);
    ASSERT_EQ(sh("%s acquire --read --also x cli-rw 2>/dev/null", cli), 64);
  }

  /* Two runs on one key serialize: their start/end lines never
   * interleave. */
  {
    char log[300];
    char cmd[1024];
    pid_t a, b;
    snprintf(log, sizeof(log), "%s/serial", tmpdir);
    snprintf(cmd, sizeof(cmd),
             "%s run --ttl 2s --wait 20s cli-serial -- sh -c "
             "'echo start >> %s; sleep 0.4; echo end >> %s'",
             cli, log, log);
    a = harness_spawn_sh(cmd);
    b = harness_spawn_sh(cmd);
    ASSERT_EQ(harness_wait_exit(a, 20000), 0);
    ASSERT_EQ(harness_wait_exit(b, 20000), 0);
    harness_read_file(log, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "start\nend\nstart\nend\n");
  }

  /* --wait 0 while a run holds the key: 75 at once. */
  {
    char mark[300];
    snprintf(mark, sizeof(mark), "%s/started", tmpdir);
    snprintf(buf, sizeof(buf),
             "%s run --ttl 2s cli-busy -- sh -c 'touch %s; sleep 1.5'", cli,
             mark);
    pid = harness_spawn_sh(buf);
    t0 = harness_now_ms();
    while (access(mark, F_OK) != 0) {
      if (harness_now_ms() - t0 > 10000)
        TEST_FAIL("run did not start");
      uv_sleep(2);
    }
    t0 = harness_now_ms();
    ASSERT_EQ(sh("%s run --wait 0 cli-busy -- true 2>/dev/null", cli), 75);
    ASSERT_LT(harness_now_ms() - t0, 3000);
    ASSERT_EQ(harness_wait_exit(pid, 20000), 0);
  }

  /* A lost lock: the keys vanish (masters restarted empty); the child gets
   * SIGTERM and redlock exits 76. */
  {
    char mark[300];
    char termed[300];
    snprintf(mark, sizeof(mark), "%s/lost-started", tmpdir);
    snprintf(termed, sizeof(termed), "%s/lost-termed", tmpdir);
    snprintf(buf, sizeof(buf),
             "%s run --ttl 900ms --grace 2s cli-lost -- sh -c "
             "'trap \"touch %s; exit 0\" TERM; touch %s; "
             "while :; do sleep 0.05; done' 2>/dev/null",
             cli, termed, mark);
    pid = harness_spawn_sh(buf);
    t0 = harness_now_ms();
    while (access(mark, F_OK) != 0) {
      if (harness_now_ms() - t0 > 10000)
        TEST_FAIL("run did not start");
      uv_sleep(2);
    }
    for (i = 0; i < N; i++)
      harness_cmdf(&srv[i], val, sizeof(val), "FLUSHALL");
    ASSERT_EQ(harness_wait_exit(pid, 10000), 76);
    ASSERT_EQ(access(termed, F_OK), 0);
  }

  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  harness_stop_all();
  return 0;
}
