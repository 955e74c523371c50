/* `run` stops the whole job, not only its direct child (issue 21, items 6
 * and 7). N = 3 real masters; each command is a shell that starts a
 * `sleep` of its own (its pid in a file) and waits for it.
 *
 *  a) SIGTERM to `run --grace 500ms` whose shell ignores SIGTERM (and so
 *     does its sleep: an ignored signal stays ignored across exec): after
 *     the grace SIGKILL goes to the whole group, the sleep too; run exits
 *     143, the lock released. (The sleep used to survive the lock.)
 *  b) `run` killed with SIGKILL: the job's whole group gets SIGTERM (the
 *     exec helper's death signal), the sleep too.
 *  c) A lock that can no longer be extended (a majority of masters stopped
 *     with SIGSTOP): the command gets SIGTERM BEFORE the validity ends (a
 *     margin: ttl/10, at least two command timeouts), and by default
 *     SIGKILL at the end of the validity, not 10 s later; run exits 76.
 *  d) The job's status comes through the helper: exit 7 gives 7, a job
 *     killed by SIGINT gives 130; a missing command gives 127; a
 *     descriptor run inherited (fd 3) reaches the command.
 * Issue 29, item 3: the lock is held until no process of the job's group
 * is left (the exec helper is a child subreaper and reaps the group), and
 * the SIGKILL at the validity's end reaches the whole group, also when
 * run itself is gone (the exec helper knows the validity's end):
 *  e) the command exits at once, a process it left in the background
 *     sleeps 1.5 s: run holds the lock and exits only when it is gone;
 *  f) lost (a majority stopped): a process of the group that ignores
 *     SIGTERM, while the shell exits on it, is SIGKILLed when the validity
 *     ends; run exits 76 once it is gone;
 *  g) run SIGKILLed: the job's shell exits on the SIGTERM, a process of the
 *     group that ignores it gets SIGKILL after --grace 1s (g1), and at the
 *     validity's end when --grace is longer (g2: 30 s, ttl 2 s).
 *  h) --grace's SIGKILL does not kill the exec helper with the group: a
 *     process of the group that takes a while to die (it holds 512 MB:
 *     the kernel frees it, ~100 ms, as a process in D state would finish
 *     its write) is gone, reaped, before the key leaves any master. (run's
 *     kill(-group, SIGKILL) used to kill the helper too, and run released
 *     the moment the helper was gone.) */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];

static void path_of(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", tmpdir, name);
}

#define sh harness_sh

/* The pid written in path (waits for it, bounded). */
static pid_t read_pid(const char *path) {
  char buf[32];
  uint64_t end = harness_now_ms() + 10000;
  for (;;) {
    harness_read_file(path, buf, sizeof(buf));
    if (strchr(buf, '\n') != NULL)
      return (pid_t)strtol(buf, NULL, 10);
    if (harness_now_ms() > end)
      TEST_FAIL("no pid in %s", path);
    uv_sleep(5);
  }
}

/* Gone: no such process, or a zombie (reaped here when it is ours: the
 * test is a subreaper, so orphans come to it). */
static int gone(pid_t p) {
  char path[64], buf[512];
  const char *rp;
  FILE *f;
  size_t n;
  waitpid(p, NULL, WNOHANG);
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)p);
  f = fopen(path, "r");
  if (f == NULL)
    return 1;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  rp = strrchr(buf, ')');
  return rp != NULL && (rp[2] == 'Z' || rp[2] == 'X');
}

static int wait_gone(pid_t p, uint64_t ms) {
  uint64_t end = harness_now_ms() + ms;
  while (!gone(p)) {
    if (harness_now_ms() > end)
      return -1;
    uv_sleep(5);
  }
  return 0;
}

static int held_on(harness_server *srv, const char *key) {
  char val[128];
  int i, n = 0;
  for (i = 0; i < N; i++)
    n += harness_get(&srv[i], key, val, sizeof(val)) == 1;
  return n;
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], script[1024], spid[300], out[300], err[300];
  char termed[300];
  char buf[4096];
  pid_t run, sleeper;
  uint64_t t0, took, expiry, t_term;
  int st, i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-job PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-job-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  path_of(spid, sizeof(spid), "sleep-pid");
  path_of(out, sizeof(out), "out");
  path_of(err, sizeof(err), "err");
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* a) SIGTERM: the whole group. */
  snprintf(script, sizeof(script),
           "trap '' TERM; sleep 7.77 & echo $! > %s; wait; wait", spid);
  {
    char *av[] = {"redlock", "run", "--grace", "500ms", "job-a", "--", "sh",
                  "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  ASSERT_EQ(held_on(srv, "job-a"), N);
  t0 = harness_now_ms();
  ASSERT_EQ(kill(run, SIGTERM), 0);
  st = harness_wait_exit(run, 10000);
  took = harness_now_ms() - t0;
  if (wait_gone(sleeper, 1000) != 0)
    TEST_FAIL("a) SIGTERM to run, SIGKILL after the grace: the command's "
              "own child (sleep) still runs after the lock is gone: only "
              "the direct child was signalled");
  fprintf(stderr, "a) SIGTERM: run exit %d after %llu ms, the whole job "
          "gone\n", st, (unsigned long long)took);
  ASSERT_EQ(st, 143);
  ASSERT_GE(took, 500);
  ASSERT_EQ(held_on(srv, "job-a"), 0);
  unlink(spid);

  /* b) run killed: the death signal reaches the group. */
  snprintf(script, sizeof(script), "sleep 7.77 & echo $! > %s; wait", spid);
  {
    char *av[] = {"redlock", "run", "job-b", "--", "sh", "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  ASSERT_EQ(kill(run, SIGKILL), 0);
  ASSERT_EQ(harness_wait_exit(run, 5000), 128 + SIGKILL);
  if (wait_gone(sleeper, (uint64_t)harness_bound_ms(2000)) != 0)
    TEST_FAIL("b) run was killed, but the command's child went on without "
              "the lock");
  fprintf(stderr, "b) run killed: the job's sleep got SIGTERM: ok\n");
  unlink(spid);

  /* c) lost: SIGTERM before the validity ends, SIGKILL at its end. */
  path_of(termed, sizeof(termed), "termed");
  snprintf(script, sizeof(script),
           "trap 'touch %s' TERM; sleep 7.77 & echo $! > %s; "
           "while :; do wait; done", termed, spid);
  {
    char *av[] = {"redlock", "run", "--ttl", "2s", "--command-timeout", "100ms",
                  "job-c", "--", "sh", "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  ASSERT_EQ(held_on(srv, "job-c"), N);
  /* The key's expiry on master 1 just before it stops: the lock's
   * validity ends before it (drift, the round trip). */
  t0 = harness_now_ms();
  expiry = t0 + (uint64_t)harness_pttl(&srv[0], "job-c");
  for (i = 0; i < 2; i++)
    harness_pause(&srv[i]);
  while (access(termed, F_OK) != 0) {
    if (harness_now_ms() > t0 + 10000)
      TEST_FAIL("c) no SIGTERM within 10 s of the masters stopping");
    uv_sleep(1);
  }
  t_term = harness_now_ms();
  st = harness_wait_exit(run, 20000);
  took = harness_now_ms() - t0;
  for (i = 0; i < 2; i++)
    harness_resume(&srv[i]);
  {
    char e[4096];
    harness_read_file(err, e, sizeof(e));
    fprintf(stderr, "c) masters stopped: run exit %d after %llu ms; "
            "stderr:\n%s", st, (unsigned long long)took, e);
    ASSERT_EQ(st, 76);
    ASSERT_EQ(access(termed, F_OK), 0);   /* SIGTERM came first */
    ASSERT_NOT_NULL(strstr(e, "stopping before the validity ends"));
  }
  /* SIGTERM came the margin (200 ms here) before the validity ended, so
   * well before the key's expiry on the master (the validity ends ~25 ms
   * before it): at least 80 ms. */
  fprintf(stderr, "c) SIGTERM %lld ms before the key's expiry on master "
          "1\n", (long long)expiry - (long long)t_term);
  ASSERT_LE(t_term + 80, expiry + 20);
  /* SIGTERM at validity - margin, SIGKILL at the validity's end: within
   * the 2 s ttl (plus the decision), far from a 10 s grace. */
  ASSERT_LT(took, (uint64_t)harness_bound_ms(3500));
  ASSERT_EQ(wait_gone(sleeper, 2000), 0);

  /* e) a background process of the job: held until it is gone. */
  unlink(spid);
  snprintf(script, sizeof(script),
           "sleep 1.5 & echo $! > %s; exit 0", spid);
  {
    char *av[] = {"redlock", "run", "job-e", "--", "sh", "-c", script,
                  NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  t0 = harness_now_ms();
  while (!gone(sleeper) && gone(run) == 0 && held_on(srv, "job-e") == N) {
    if (harness_now_ms() > t0 + 10000)
      TEST_FAIL("e) neither run nor the background sleep ended in 10 s");
    uv_sleep(2);
  }
  took = harness_now_ms() - t0;
  if (!gone(sleeper))
    TEST_FAIL("e) run exited or released %llu ms after the command's shell "
              "ended while its background sleep still ran (held on %d of "
              "%d): the lock was released with a process of the job left",
              (unsigned long long)took, held_on(srv, "job-e"), N);
  st = harness_wait_exit(run, (uint64_t)harness_bound_ms(5000));
  fprintf(stderr, "e) background process: held %llu ms, until it ended; "
          "run exit %d\n", (unsigned long long)took, st);
  ASSERT_EQ(st, 0);
  ASSERT_EQ(held_on(srv, "job-e"), 0);
  unlink(spid);

  /* f) lost: a process that ignores SIGTERM is SIGKILLed when the
   * validity ends, though the shell exited on the SIGTERM. */
  snprintf(script, sizeof(script),
           "sh -c 'trap \"\" TERM; echo $$ > %s; sleep 7.77; :' & wait",
           spid);
  {
    char *av[] = {"redlock", "run", "--ttl", "2s", "--command-timeout", "100ms",
                  "job-f", "--", "sh", "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  ASSERT_EQ(held_on(srv, "job-f"), N);
  t0 = harness_now_ms();
  expiry = t0 + (uint64_t)harness_pttl(&srv[0], "job-f");
  for (i = 0; i < 2; i++)
    harness_pause(&srv[i]);
  while (!gone(sleeper)) {
    if (harness_now_ms() > t0 + 10000)
      break;
    uv_sleep(1);
  }
  took = harness_now_ms();
  st = harness_wait_exit(run, 20000);
  for (i = 0; i < 2; i++)
    harness_resume(&srv[i]);
  fprintf(stderr, "f) lost, a process ignoring SIGTERM: gone %lld ms after "
          "the key's expiry on master 1; run exit %d\n",
          (long long)took - (long long)expiry, st);
  if (took > expiry + (uint64_t)harness_bound_ms(1000))
    TEST_FAIL("f) the process that ignores SIGTERM ran %lld ms past the "
              "key's expiry: no SIGKILL at the validity's end",
              (long long)took - (long long)expiry);
  ASSERT_EQ(st, 76);
  unlink(spid);

  /* g1) run SIGKILLed, --grace 1s: SIGKILL reaches the group after it. */
  snprintf(script, sizeof(script),
           "sh -c 'trap \"\" TERM; echo $$ > %s; sleep 7.77; :' & wait",
           spid);
  {
    char *av[] = {"redlock", "run", "--grace", "1s", "job-g1", "--", "sh",
                  "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  t0 = harness_now_ms();
  ASSERT_EQ(kill(run, SIGKILL), 0);
  ASSERT_EQ(harness_wait_exit(run, 5000), 128 + SIGKILL);
  if (wait_gone(sleeper, (uint64_t)harness_bound_ms(3000)) != 0)
    TEST_FAIL("g1) run killed, --grace 1s: a process of the group that "
              "ignores SIGTERM still runs %llu ms later",
              (unsigned long long)(harness_now_ms() - t0));
  took = harness_now_ms() - t0;
  fprintf(stderr, "g1) run killed, --grace 1s: the group's last process "
          "gone %llu ms later\n", (unsigned long long)took);
  ASSERT_GE(took, 900);
  unlink(spid);

  /* g2) run SIGKILLed, --grace 30s, ttl 2 s: SIGKILL at the validity's
   * end, from the exec helper. */
  snprintf(script, sizeof(script),
           "sh -c 'trap \"\" TERM; echo $$ > %s; sleep 7.77; :' & wait",
           spid);
  {
    char *av[] = {"redlock", "run", "--grace", "30s", "--ttl", "2s",
                  "job-g2", "--", "sh", "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  t0 = harness_now_ms();
  expiry = t0 + (uint64_t)harness_pttl(&srv[0], "job-g2");
  ASSERT_EQ(kill(run, SIGKILL), 0);
  ASSERT_EQ(harness_wait_exit(run, 5000), 128 + SIGKILL);
  while (!gone(sleeper)) {
    if (harness_now_ms() > t0 + 10000)
      break;
    uv_sleep(1);
  }
  took = harness_now_ms();
  fprintf(stderr, "g2) run killed, --grace 30s: the group's last process "
          "gone %lld ms after the key's expiry on master 1\n",
          (long long)took - (long long)expiry);
  if (took > expiry + (uint64_t)harness_bound_ms(1000))
    TEST_FAIL("g2) run killed: a process of the group ran %lld ms past the "
              "key's expiry (the lock's validity had ended)",
              (long long)took - (long long)expiry);
  unlink(spid);

  /* h) SIGKILL after --grace: released only once the group is gone. */
  snprintf(script, sizeof(script),
           "trap '' TERM; perl -e '$x = \"a\" x (256 << 20); "
           "open(F, \">\", $ARGV[0]) or die; print F \"$$\\n\"; "
           "close(F); sleep 100' %s & wait; wait", spid);
  {
    char *av[] = {"redlock", "run", "--grace", "300ms", "job-h", "--", "sh",
                  "-c", script, NULL};
    run = harness_spawn(cli, av, out, err);
  }
  sleeper = read_pid(spid);
  ASSERT_EQ(held_on(srv, "job-h"), N);
  t0 = harness_now_ms();
  ASSERT_EQ(kill(run, SIGTERM), 0);
  while (held_on(srv, "job-h") == N) {
    if (harness_now_ms() > t0 + (uint64_t)harness_bound_ms(10000))
      TEST_FAIL("h) the lock was not released within 10 s of SIGTERM");
  }
  took = harness_now_ms() - t0;
  if (!gone(sleeper)) {
    uint64_t t_rel = harness_now_ms();
    int late = wait_gone(sleeper, (uint64_t)harness_bound_ms(5000));
    TEST_FAIL("h) the key left a master %llu ms after SIGTERM while a "
              "process of the job's group was still alive (it was gone "
              "%s%llu ms later): run released when the exec helper died, "
              "not when the group was empty",
              (unsigned long long)took, late != 0 ? "not even " : "",
              (unsigned long long)(harness_now_ms() - t_rel));
  }
  st = harness_wait_exit(run, (uint64_t)harness_bound_ms(5000));
  fprintf(stderr, "h) SIGKILL after --grace 300ms: released %llu ms after "
          "SIGTERM, the group's slow-dying process gone before; run exit "
          "%d\n", (unsigned long long)took, st);
  ASSERT_EQ(st, 143);
  ASSERT_GE(took, 300);
  ASSERT_EQ(held_on(srv, "job-h"), 0);
  unlink(spid);

  /* d) statuses through the helper. */
  ASSERT_EQ(sh("%s run job-d -- sh -c 'exit 7'", cli), 7);
  ASSERT_EQ(sh("%s run job-d -- sh -c 'kill -INT $$'", cli), 130);
  ASSERT_EQ(sh("%s run job-d -- /nonexistent/cmd 2> /dev/null", cli), 127);
  /* A descriptor run inherited (fd 3 here) reaches CMD: the helper's
   * socket takes a number of its own. */
  path_of(termed, sizeof(termed), "fd3");
  ASSERT_EQ(sh("%s run job-d -- sh -c 'echo through >&3' 3> %s", cli,
               termed), 0);
  harness_read_file(termed, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "through\n");

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
