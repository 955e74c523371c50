/* Who holds a lock (issue 33: "give every holder an optional identity
 * (host, pid, a name) visible to `status`, without breaking the key
 * layout other Redlock libraries share"). N = 3 real masters, the restart
 * guard off (brand-new servers).
 *
 *  a) `run` stores HOST:PID of the redlock process by default: `status`,
 *     a fresh client that saw nothing, shows it on every master (text and
 *     JSON's holder_id), never the whole token; the job's REDLOCK_TOKEN is
 *     "<40 hex>.HOST:PID" (PID: the redlock process's).
 *  b) `acquire --id NAME` stores NAME (a space in it too): status shows
 *     it; the printed token releases the lock (compare-and-delete exact).
 *  c) `acquire` without --id stores the host only (its process is gone
 *     once the token is printed).
 *  d) --no-id: the value is the 40 hex alone (status shows 8 characters
 *     and holder_id null), as before.
 *  e) the value stays one opaque string for other implementations: a
 *     plain GET on each master returns the token as printed, and a
 *     compare-and-delete by that whole string (what node-redlock's and
 *     redis-py's releases do) frees the key.
 *  f) a semaphore's permit shows its holder too.
 *  g) bad --id: empty, or longer than 80 bytes: usage error 64. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char err[300], out[300];

#define sh harness_sh

static void read_out(char *buf, size_t len) {
  harness_read_file(out, buf, len);
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], buf[8192], host[64], want[400], tok[256];
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-holder PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-holder-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_PASSWORD_FILE");
  ASSERT_EQ(gethostname(host, sizeof(host)), 0);
  host[sizeof(host) - 1] = '\0';

  /* a) run's default: HOST:PID of the redlock process ($! of the shell
   *    that started it). The job writes what it sees, then waits for the
   *    test to read status (until the file "done", polled: bounded). */
  ASSERT_EQ(sh("%s run --ttl 20s job-a -- sh -c 'echo \"$REDLOCK_TOKEN\""
               " > %s/job; i=0; while [ ! -e %s/done ] && [ $i -lt 300 ];"
               " do sleep 0.1; i=$((i+1)); done' > /dev/null 2> %s &"
               " echo $! > %s/pid", cli, tmpdir, tmpdir, err, tmpdir), 0);
  {
    char path[300], line[400];
    long ppid = 0;
    snprintf(path, sizeof(path), "%s/job", tmpdir);
    for (i = 0; i < 300 && access(path, F_OK) != 0; i++)
      usleep(100 * 1000);   /* bounded poll: the job has started */
    harness_read_file(path, line, sizeof(line));
    ASSERT_EQ(sscanf(line, "%255s", tok), 1);
    snprintf(path, sizeof(path), "%s/pid", tmpdir);
    harness_read_file(path, line, sizeof(line));
    ppid = atol(line);
    fprintf(stderr, "a) redlock's pid %ld, the job's token %s\n", ppid, tok);
    snprintf(want, sizeof(want), "%s:%ld", host, ppid);
    ASSERT_EQ((int)strlen(tok), 40 + 1 + (int)strlen(want));
    ASSERT_EQ(tok[40], '.');
    ASSERT_STR_EQ(tok + 41, want);
  }
  ASSERT_EQ(sh("%s status job-a > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  fprintf(stderr, "a) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "held on 3 of 3"));
  snprintf(want, sizeof(want), "%s:%.*s (%.8s...)", host,
           (int)(strlen(tok) - 41 - strlen(host) - 1),
           tok + 41 + strlen(host) + 1, tok);
  ASSERT_EQ(harness_count(buf, want), N);
  ASSERT_NULL(strstr(buf, tok));   /* never the whole token */
  ASSERT_EQ(sh("%s --json status job-a > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  snprintf(want, sizeof(want), "\"holder_id\":\"%s\"", tok + 41);
  ASSERT_EQ(harness_count(buf, want), N);
  ASSERT_NULL(strstr(buf, tok));

  /* b) acquire --id with a space; the printed token releases it. */
  ASSERT_EQ(sh("%s acquire --ttl 20s --id 'nightly backup' job-b > %s", cli,
               out), 0);
  read_out(tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  fprintf(stderr, "b) token %s\n", tok);
  ASSERT_STR_EQ(tok + 40, ".nightly backup");
  ASSERT_EQ(sh("%s status job-b > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "nightly backup ("), N);
  ASSERT_EQ(sh("%s release job-b '%s'", cli, tok), 0);
  ASSERT_EQ(sh("%s status job-b > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "held on 0 of 3"));

  /* c) acquire's default: the host alone. */
  ASSERT_EQ(sh("%s acquire --ttl 20s job-c > %s", cli, out), 0);
  read_out(tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  fprintf(stderr, "c) token %s\n", tok);
  ASSERT_EQ(tok[40], '.');
  ASSERT_STR_EQ(tok + 41, host);

  /* d) --no-id: 40 hex, nothing after. */
  ASSERT_EQ(sh("%s acquire --ttl 20s --no-id job-d > %s", cli, out), 0);
  read_out(tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  fprintf(stderr, "d) token %s\n", tok);
  ASSERT_EQ((int)strlen(tok), 40);
  ASSERT_EQ(sh("%s --json status job-d > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "\"holder_id\":null"), N);
  snprintf(want, sizeof(want), "\"holder\":\"%.8s...\"", tok);
  ASSERT_EQ(harness_count(buf, want), N);

  /* e) what another implementation sees: GET returns the whole printed
   *    token, and its compare-and-delete by that string frees the key. */
  ASSERT_EQ(sh("%s acquire --ttl 20s --id web-7 job-e > %s", cli, out), 0);
  read_out(tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  for (i = 0; i < N; i++) {
    char v[256];
    ASSERT_EQ(harness_get(&srv[i], "job-e", v, sizeof(v)), 1);
    ASSERT_STR_EQ(v, tok);
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "EVAL %s 1 job-e %s",
                           "if redis.call('get',KEYS[1]) == ARGV[1] then "
                           "return redis.call('del',KEYS[1]) else return 0 "
                           "end", tok), 0);
    ASSERT_STR_EQ(buf, "1");
  }

  /* f) a semaphore's permit names its holder. */
  ASSERT_EQ(sh("%s run --limit 2 --ttl 20s --id worker-1 pool -- sh -c "
               "'touch %s/started; i=0; while [ ! -e %s/done ] && "
               "[ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done' 2> %s &"
               " echo $! > %s/pid-f", cli, tmpdir, tmpdir, err, tmpdir), 0);
  {
    char path[300];
    snprintf(path, sizeof(path), "%s/started", tmpdir);
    for (i = 0; i < 300 && access(path, F_OK) != 0; i++)
      usleep(100 * 1000);   /* bounded poll: the job holds a permit */
  }
  ASSERT_EQ(sh("%s status --limit 2 pool > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  fprintf(stderr, "f) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "held by worker-1 ("));
  ASSERT_EQ(sh("%s --json status --limit 2 pool > %s", cli, out), 0);
  read_out(buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "\"holder_id\":\"worker-1\""));

  /* the two jobs end, and their redlock processes with them (bounded:
   * 30 s) */
  {
    char path[300], line[64];
    const char *pids[] = {"pid", "pid-f"};
    FILE *f;
    snprintf(path, sizeof(path), "%s/done", tmpdir);
    f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fclose(f);
    for (i = 0; i < 2; i++) {
      pid_t p;
      int k;
      snprintf(path, sizeof(path), "%s/%s", tmpdir, pids[i]);
      harness_read_file(path, line, sizeof(line));
      p = (pid_t)atol(line);
      ASSERT_GT(p, 0);
      /* the harness is the orphans' subreaper: reaped here */
      for (k = 0; k < 300; k++) {
        if (waitpid(p, NULL, WNOHANG) == p || kill(p, 0) != 0)
          break;
        usleep(100 * 1000);
      }
      ASSERT_LT(k, 300);
    }
  }

  /* g) bad --id. */
  ASSERT_EQ(sh("%s acquire --id '' k 2> %s", cli, err), 64);
  ASSERT_EQ(sh("%s acquire --id %081d k 2> %s", cli, 0, err), 64);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "--id must be 1..80 bytes"));

  harness_sh("rm -rf %s", tmpdir);
  harness_stop_all();
  fprintf(stderr, "test-cli-holder: ok\n");
  return 0;
}
