/* The "waiting" message does not flood, and -q is silent on a busy lock
 * (issue 33, "Messages that name the real cause"). N = 3 real masters,
 * the restart guard off (brand-new servers).
 *
 *  a) Two masters of three answer the handshake but not a write (CLIENT
 *     PAUSE WRITE): `run --wait 8s` keeps trying (--connect-timeout 30s:
 *     not given up as unresponsive) and the reason's wording alternates
 *     between attempts (2 or 3 masters timed out, the third waited for or
 *     not). At most one line every 5 s after the first second, each with
 *     the time waited so far: at most 3 lines in 8 s. (It printed 13.)
 *  b) A lock held by another owner: `-q run -n`, `-q acquire` and `-q run
 *     -w 1` exit 75 and print nothing (flock -n is silent; a cron job with
 *     -E 0 mailed on every conflict). Without -q the reason is printed. */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char err[300];

#define sh harness_sh

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], buf[16384];
  const char *pause_argv[] = {"CLIENT", "PAUSE", "60000", "WRITE"};
  int fds[2], i, lines;
  uint64_t t0, took;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-waitmsg PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-waitmsg-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_PASSWORD_FILE");

  /* a) two masters take no writes: a few lines, each with the time. */
  for (i = 0; i < 2; i++)
    fds[i] = harness_send_ok(&srv[i], 4, pause_argv);
  t0 = harness_now_ms();
  ASSERT_EQ(harness_sh_within((uint64_t)harness_bound_ms(20000),
                              "%s --connect-timeout 30s run --wait 8s "
                              "paused -- true 2> %s", cli, err), 74);
  took = harness_now_ms() - t0;
  harness_read_file(err, buf, sizeof(buf));
  lines = harness_count(buf, "redlock: waiting for paused: ");
  fprintf(stderr, "a) %d waiting lines in %llu ms:\n%s", lines,
          (unsigned long long)took, buf);
  ASSERT_GE(took, 8000);
  ASSERT_GE(lines, 1);
  ASSERT_LE(lines, 3);
  ASSERT_EQ(harness_count(buf, " s so far)\n"), lines);
  for (i = 0; i < 2; i++) {
    harness_close_fd(fds[i]);
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "CLIENT UNPAUSE"), 0);
  }


  /* b) -q: silent on a busy lock. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "held", "another-owner", 60000), 0);
  ASSERT_EQ(sh("%s -q run -n held -- true 2> %s", cli, err), 75);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "b) -q run -n: [%s]\n", buf);
  ASSERT_STR_EQ(buf, "");
  ASSERT_EQ(sh("%s -q acquire held 2> %s", cli, err), 75);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "");
  ASSERT_EQ(sh("%s -q run -w 1 held -- true 2> %s", cli, err), 75);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "");
  ASSERT_EQ(sh("%s run -n held -- true 2> %s", cli, err), 75);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "held by another owner"));

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
