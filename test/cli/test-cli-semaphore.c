/* Counting semaphores through the CLI (issue 32). N = 3 real masters.
 *
 *  a) 3K jobs `redlock run --limit K` (K = 2, 3), each writing its start
 *     and end times: never more than K inside at once, and K at some
 *     point; each saw REDLOCK_PERMIT in 0..K-1.
 *  b) status --limit K: the limit, held and free, one line per permit
 *     (8 characters of the holder); --json; a K+1-th job with --wait 0
 *     exits 75.
 *  c) unlock --force --limit K --permit I releases permit I only; without
 *     --permit (or --permit without --limit) a usage error; the job that
 *     held it is stopped at its next extension (exit 76); a new job gets
 *     permit I at once.
 *  d) another --limit: exit 78, both limits named; `redlock limit KEY K`
 *     changes it, then --limit K works. */
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3
#define MAX_JOBS 9

static const char *cli;
static char tmpdir[200];

#define sh harness_sh

static int cmp_ev(const void *a, const void *b) {
  const long long *x = a, *y = b;
  /* by time; at the same time an end before a start */
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return (int)(x[1] - y[1]);
}

/* The most jobs inside at once, from lines "S ns" and "E ns". */
static int max_overlap(const char *path, int *n_starts) {
  static long long ev[4 * MAX_JOBS][2];
  char line[128];
  int n = 0, in = 0, most = 0, i;
  FILE *f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  *n_starts = 0;
  while (fgets(line, sizeof(line), f) != NULL && n < 4 * MAX_JOBS) {
    char c;
    long long t;
    if (sscanf(line, "%c %lld", &c, &t) != 2)
      continue;
    ev[n][0] = t;
    ev[n][1] = c == 'S' ? 1 : -1;
    *n_starts += c == 'S';
    n++;
  }
  fclose(f);
  qsort(ev, (size_t)n, sizeof(ev[0]), cmp_ev);
  for (i = 0; i < n; i++) {
    in += (int)ev[i][1];
    if (in > most)
      most = in;
  }
  return most;
}

static void contend(unsigned k) {
  char times[300], name[32], job[1200], perm[300], buf[4096];
  char lim[16];
  pid_t pids[MAX_JOBS];
  int i, starts, most;
  unsigned jobs = 3 * k;
  snprintf(times, sizeof(times), "%s/times-%u", tmpdir, k);
  snprintf(perm, sizeof(perm), "%s/permits-%u", tmpdir, k);
  snprintf(name, sizeof(name), "batch-%u", k);
  snprintf(lim, sizeof(lim), "%u", k);
  snprintf(job, sizeof(job),
           "echo \"S $(date +%%s%%N)\" >> %s; echo $REDLOCK_PERMIT >> %s; "
           "sleep 0.8; echo \"E $(date +%%s%%N)\" >> %s",
           times, perm, times);
  for (i = 0; i < (int)jobs; i++) {
    char *av[] = {"redlock", "run", "--limit", lim, "--ttl", "5s",
                  "--wait", "60s", name, "--", "sh", "-c", job, NULL};
    pids[i] = harness_spawn(cli, av, NULL, NULL);
  }
  for (i = 0; i < (int)jobs; i++)
    ASSERT_EQ(harness_wait_exit(pids[i], 60000), 0);
  most = max_overlap(times, &starts);
  fprintf(stderr, "a) K = %u: %d jobs, at most %d inside at once\n", k,
          starts, most);
  ASSERT_EQ(starts, (int)jobs);
  ASSERT_LE(most, (int)k);
  ASSERT_EQ(most, (int)k);
  harness_read_file(perm, buf, sizeof(buf));
  {
    char *p = buf, *end;
    int lines = 0;
    while (*p != '\0') {
      long v = strtol(p, &end, 10);
      ASSERT(end != p);
      ASSERT(v >= 0 && v < (long)k);
      lines++;
      p = end + strspn(end, "\n");
    }
    ASSERT_EQ(lines, (int)jobs);
  }
}

typedef struct file_has_arg {
  const char *path;
  const char *text;
} file_has_arg;

static int file_has(void *arg) {
  file_has_arg *a = arg;
  char buf[4096];
  harness_read_file(a->path, buf, sizeof(buf));
  return strstr(buf, a->text) != NULL;
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], out[300], err[300], stop[300], p0[300], p1[300];
  char buf[4096], job[1200];
  pid_t h0, h1, held1;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-semaphore PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-sem-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(stop, sizeof(stop), "%s/stop", tmpdir);
  snprintf(p0, sizeof(p0), "%s/p0", tmpdir);
  snprintf(p1, sizeof(p1), "%s/p1", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* a) */
  contend(2);
  contend(3);

  /* b) two jobs hold both permits of "bk" until the stop file exists */
  snprintf(job, sizeof(job),
           "echo $REDLOCK_PERMIT; i=0; while [ ! -e %s ] && [ $i -lt 1500 ];"
           " do sleep 0.02; i=$((i+1)); done", stop);
  {
    char *av[] = {"redlock", "run", "--limit", "2", "--ttl", "3s", "bk",
                  "--", "sh", "-c", job, NULL};
    file_has_arg a0 = {p0, "\n"}, a1 = {p1, "\n"};
    h0 = harness_spawn(cli, av, p0, NULL);
    ASSERT_EQ(harness_wait_for(file_has, &a0, 10000), 0);
    h1 = harness_spawn(cli, av, p1, NULL);
    ASSERT_EQ(harness_wait_for(file_has, &a1, 10000), 0);
  }
  ASSERT_EQ(sh("%s status --limit 2 bk > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "b) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "semaphore bk: limit 2, 2 held, 0 free"));
  ASSERT_NOT_NULL(strstr(buf, "permit 0: held by "));
  ASSERT_NOT_NULL(strstr(buf, "permit 1: held by "));
  ASSERT_NOT_NULL(strstr(buf, "on 3 of 3 masters"));
  ASSERT_EQ(sh("%s status --json --limit 2 bk > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "\"semaphore\":true,\"limit\":2"));
  ASSERT_NOT_NULL(strstr(buf, "\"held\":2,\"free\":0"));
  ASSERT_NOT_NULL(strstr(buf, "{\"permit\":1,\"held\":true"));
  ASSERT_EQ(sh("%s run --limit 2 --wait 0 bk -- true 2> /dev/null", cli),
            75);

  /* c) */
  ASSERT_EQ(sh("%s unlock --force --limit 2 bk 2> /dev/null", cli), 64);
  ASSERT_EQ(sh("%s unlock --force --permit 1 bk 2> /dev/null", cli), 64);
  harness_read_file(p1, buf, sizeof(buf));
  held1 = strtol(buf, NULL, 10) == 1 ? h1 : h0;
  ASSERT_EQ(sh("%s unlock --force --limit 2 --permit 1 bk > %s 2> %s", cli,
               out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "released permit 1 of bk by force on 3 of 3 "
                              "masters"));
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "permit 1 of bk is held by "));
  ASSERT_EQ(harness_wait_exit(held1, 10000), 76);   /* lost: stopped */
  ASSERT_EQ(sh("%s status --limit 2 bk > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "limit 2, 1 held, 1 free"));
  ASSERT_NULL(strstr(buf, "permit 1:"));
  ASSERT_EQ(sh("%s run --limit 2 --wait 0 bk -- sh -c 'echo "
               "$REDLOCK_PERMIT' > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "1\n");

  /* d) */
  ASSERT_EQ(sh("%s run --limit 3 --wait 5s bk -- true 2> %s", cli, err),
            78);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "d) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "the semaphore's limit on the masters is 2, "
                              "not --limit 3"));
  ASSERT_EQ(sh("%s run --limit 0 bk -- true 2> /dev/null", cli), 64);
  ASSERT_EQ(sh("%s run --limit 2 --also x bk -- true 2> /dev/null", cli),
            64);
  ASSERT_EQ(sh("%s limit bk 3 > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "limit of bk set to 3 on 3 of 3 masters"));
  ASSERT_EQ(sh("%s run --limit 3 --wait 0 bk -- sh -c 'echo "
               "$REDLOCK_PERMIT' > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT(strcmp(buf, "1\n") == 0 || strcmp(buf, "2\n") == 0);   /* 0 held */
  ASSERT_EQ(sh("%s run --limit 2 --wait 0 bk -- true 2> /dev/null", cli),
            78);
  ASSERT_EQ(sh("%s limit bk 0 2> /dev/null", cli), 64);

  close(open(stop, O_WRONLY | O_CREAT, 0644));
  ASSERT_EQ(harness_wait_exit(held1 == h1 ? h0 : h1, 10000), 0);
  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
