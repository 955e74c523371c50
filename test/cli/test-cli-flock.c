/* flock(1)'s habits (issue 33, "flock habits and CLI consistency"). N = 3
 * real masters, the restart guard off (brand-new servers).
 *
 *  a) --timeout is the wait, as flock's -w/--timeout: `acquire --timeout
 *     1500ms` of a lock held elsewhere keeps trying for 1.5 s, then 75.
 *     (It was the per-master command timeout: 75 at once.)
 *  b) One rule for wait and ttl, run and acquire alike: the wait is not
 *     compared with the ttl. `acquire --timeout 20s --ttl 30s` and `run
 *     --timeout 60 --ttl 30s` are accepted (both were refused, 64: "at
 *     least 40000ms (2 x --timeout)").
 *  c) The per-master command timeout is --command-timeout; --timeout
 *     keeps that meaning where no wait exists (status, ...), with a
 *     deprecation warning naming --command-timeout; a --timeout below 1 s
 *     on run/acquire (an old command timeout, likely) is warned about.
 *  d) -c: `run KEY -c 'CMD'` runs CMD with sh -c, as flock -c (elect
 *     too); -c and a command both: a usage error (64).
 *  e) --verbose says how long it took to acquire, as flock --verbose. */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char err[300], out[300];

#define sh harness_sh

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], buf[8192];
  uint64_t t0, took;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-flock PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-flock-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "held", "another-owner", 60000), 0);

  /* a) --timeout is the wait. */
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s acquire --timeout 1500ms held > /dev/null 2> %s", cli,
               err), 75);
  took = harness_now_ms() - t0;
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "a) acquire --timeout 1500ms (%llu ms):\n%s",
          (unsigned long long)took, buf);
  ASSERT_GE(took, 1500);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(6000));
  ASSERT_NULL(strstr(buf, "deprecated"));

  /* b) the wait is not the ttl's business. */
  ASSERT_EQ(sh("%s acquire --timeout 20s --ttl 30s b-free > /dev/null "
               "2> %s", cli, err), 0);
  ASSERT_EQ(sh("%s run --timeout 60 --ttl 30s b-free2 -- true 2> %s", cli,
               err), 0);

  /* c) --command-timeout; --timeout elsewhere: the deprecated alias. */
  ASSERT_EQ(sh("%s --command-timeout 20ms status b-free > /dev/null "
               "2> %s", cli, err), 0);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "");
  ASSERT_EQ(sh("%s --command-timeout 60ms acquire --ttl 100ms c-key > "
               "/dev/null 2> %s", cli, err), 64);   /* 2 x 60 ms > 100 */
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "2 x --command-timeout"));
  ASSERT_EQ(sh("%s --timeout 50ms status b-free > /dev/null 2> %s", cli,
               err), 0);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "c) status --timeout 50ms: %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "deprecated"));
  ASSERT_NOT_NULL(strstr(buf, "--command-timeout"));
  ASSERT_EQ(sh("%s run --timeout 200ms held -- true 2> %s", cli, err), 75);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "c) run --timeout 200ms: %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "--timeout is the wait"));

  /* d) -c. */
  ASSERT_EQ(sh("%s run d-key -c 'echo \"$REDLOCK_KEY\" ran > %s'", cli,
               out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "d-key ran\n");
  ASSERT_EQ(sh("%s run -c 'exit 3' d-key", cli), 3);
  ASSERT_EQ(sh("%s elect d-leader -c 'exit 4' 2> /dev/null", cli), 4);
  ASSERT_EQ(sh("%s run d-key -c true -- true 2> %s", cli, err), 64);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "-c"));

  /* e) --verbose. */
  ASSERT_EQ(sh("%s acquire --verbose e-key > /dev/null 2> %s", cli, err),
            0);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "e) --verbose: %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "redlock: acquired e-key after "));

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
