/* The CLI never waits silently, and a configuration error is not a busy
 * lock (issue 21, item 1). N = 3 real masters (no password).
 *
 *  a) A password the masters do not accept (REDLOCK_PASSWORD=wrong):
 *     `run` ends at once with 77 (EX_NOPERM), each master named once with
 *     "authentication failed ... check --password-file"; the command does
 *     not run. (It waited forever, silently.)
 *  b) A database the masters refuse (redis://HOST:PORT/99): 78.
 *  c) Masters that refuse connections (free ports): `run` gives up with 69
 *     once refusals have kept a quorum out for --connect-timeout; a
 *     one-shot `acquire` at once.
 *  d) A lock held by another owner: `run --wait 2s` says why it waits on
 *     stderr ("waiting for KEY: held by another owner ...") once, after a
 *     second, and exits 75 at the wait, not before it (item 2: it gave up
 *     up to 150 ms early); -q says nothing.
 *  e) flock(1)'s options: -n (one attempt), -w SECS, -E CODE (cron: 0),
 *     -s/-x (read/write; both: a usage error), -o (accepted); ttls: 1m30s
 *     accepted; 1e3, 0x10, 1s1m refused; 2 ms refused as too short, the
 *     message naming the minimum (it was accepted, and run spun on it).
 *  f) One master of three refuses our password (issue 29, item 7): run
 *     and acquire succeed, warning once that master 3 refused
 *     authentication; unlock --force fails saying so, not "no quorum".
 *  g) Two masters of three are black holes (accept, never answer: issue
 *     29, item 4): run and a one-shot acquire exit 74, each named once
 *     as unresponsive (run waited forever; acquire said 75). */
#include <stdarg.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char err[300];

#define sh harness_sh

/* A black hole on a free loopback port: listening, never accepting (the
 * kernel completes connections into the backlog; nothing is ever read
 * or answered). Closed by the test (and with it). */
int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], bad[256], ran[300];
  char buf[8192];
  uint64_t t0, took;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-wait PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-wait-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(ran, sizeof(ran), "%s/ran", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);   /* brand-new servers */
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_PASSWORD_FILE");

  /* b) a database the masters refuse: 78. */
  snprintf(bad, sizeof(bad), "redis://%s/99,redis://%s/99,redis://%s/99",
           harness_addr(&srv[0]), harness_addr(&srv[1]),
           harness_addr(&srv[2]));
  ASSERT_EQ(sh("%s --servers %s run nightly -- touch %s 2> %s", cli, bad,
               ran, err), 78);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "b) SELECT 99:\n%s", buf);
  /* (Named once each; those that answered before the decision: two
   * refusals already leave no quorum.) */
  ASSERT_GE(harness_count(buf, "refused by the configuration (SELECT 99"), 2);
  ASSERT_LE(harness_count(buf, "refused by the configuration (SELECT 99"), N);
  ASSERT_NE(access(ran, F_OK), 0);

  /* c) refused connections: 69 after --connect-timeout (run), at once
   * (one-shot acquire). */
  snprintf(bad, sizeof(bad), "127.0.0.1:%d,127.0.0.1:%d,%s",
           harness_free_port(), harness_free_port(), harness_addr(&srv[2]));
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s --servers %s --connect-timeout 500ms run nightly -- "
               "touch %s 2> %s", cli, bad, ran, err), 69);
  took = harness_now_ms() - t0;
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "c) two of three refused (%llu ms):\n%s",
          (unsigned long long)took, buf);
  ASSERT_EQ(harness_count(buf, "unavailable (connect: Connection refused)"), 2);
  ASSERT_GE(took, 500);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(3000));
  ASSERT_NE(access(ran, F_OK), 0);
  ASSERT_EQ(sh("%s --servers %s acquire k 2> /dev/null", cli, bad), 69);

  /* d) held by another owner: the reason, once, after a second; 75. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "held", "another-owner", 60000), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s run --wait 2s held -- touch %s 2> %s", cli, ran, err),
            75);
  took = harness_now_ms() - t0;
  ASSERT_GE(took, 2000);   /* the wait is kept to the ms (item 2) */
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "d) held:\n%s", buf);
  ASSERT_EQ(harness_count(buf, "redlock: waiting for held: held by another "
                          "owner on "), 1);
  ASSERT_NE(access(ran, F_OK), 0);
  ASSERT_EQ(sh("%s -q run --wait 1500ms held -- touch %s 2> %s", cli, ran,
               err), 75);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "waiting for"), 0);

  /* e) flock(1)'s options and strict values (items 8 and 9). */
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s run -n held -- touch %s 2> /dev/null", cli, ran), 75);
  ASSERT_LT(harness_now_ms() - t0, (uint64_t)harness_bound_ms(1000));
  ASSERT_EQ(sh("%s run -n -E 0 held -- touch %s 2> /dev/null", cli, ran),
            0);   /* cron: a busy lock is not an error */
  ASSERT_NE(access(ran, F_OK), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s -q run -w 1 held -- touch %s", cli, ran), 75);
  ASSERT_GE(harness_now_ms() - t0, 1000);
  ASSERT_EQ(sh("%s acquire -s -x rw-key 2> %s", cli, err), 64);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "exclude each other"));
  ASSERT_EQ(sh("%s run -s rw-key -- true", cli), 0);
  ASSERT_EQ(sh("%s run -x -o rw-key -- true", cli), 0);
  ASSERT_EQ(sh("%s acquire --ttl 2ms short 2> %s", cli, err), 64);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "too short to be safe: at least 100ms"));
  ASSERT_EQ(sh("%s acquire --ttl 1e3 short 2> /dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --ttl 0x10 short 2> /dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --ttl 1s1m short 2> /dev/null", cli), 64);
  ASSERT_EQ(sh("%s acquire --ttl 1m30s long > /dev/null", cli), 0);
  ASSERT_GT(harness_pttl(&srv[0], "long"), 85000);
  ASSERT_LE(harness_pttl(&srv[0], "long"), 90000);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "short", buf, sizeof(buf)), 0);
  /* Small things: "a,,b" is a mistake, not two masters; messages do not
   * name C functions. */
  ASSERT_EQ(sh("%s --servers %s,,%s acquire k 2> %s", cli,
               harness_addr(&srv[0]), harness_addr(&srv[1]), err), 64);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "empty entry in the server list"));
  {
    ASSERT_EQ(sh("%s acquire --ttl 2h k 2> %s", cli, err), 64);
    harness_read_file(err, buf, sizeof(buf));
    fprintf(stderr, "e) a ttl above the cap: %s", buf);
    ASSERT_NOT_NULL(strstr(buf, "above the deployment's cap"));
    ASSERT_NULL(strstr(buf, "redlock_lock_acquire"));
  }

  /* f) one master of three refuses our password (issue 29, item 7): run
   * and acquire succeed on the other two, and stderr warns once that
   * master 3 refused authentication, with the server's text; unlock
   * --force (every master must delete) fails, saying which master and
   * why, never "no quorum" with a quorum of yes. (It was silent, and
   * unlock said "no quorum: 2 of 3 masters said yes, 2 needed".) */
  ASSERT_EQ(harness_cmdf(&srv[2], buf, sizeof(buf),
                         "CONFIG SET requirepass pw3"), 0);
  srv[2].admin_user = "default";   /* the harness's own commands */
  srv[2].admin_pass = "pw3";
  snprintf(bad, sizeof(bad), "%s,%s,redis://:wrong@%s",
           harness_addr(&srv[0]), harness_addr(&srv[1]),
           harness_addr(&srv[2]));
  ASSERT_EQ(sh("%s --servers %s run onewrong -- touch %s 2> %s", cli, bad,
               ran, err), 0);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "f) run, master 3's password wrong:\n%s", buf);
  ASSERT_EQ(access(ran, F_OK), 0);
  unlink(ran);
  ASSERT_EQ(harness_count(buf, "warning: master 3 refused authentication: "
                          "WRONGPASS"), 1);
  ASSERT_EQ(harness_count(buf, "master 1"), 0);
  ASSERT_EQ(harness_count(buf, "master 2"), 0);
  ASSERT_EQ(sh("%s --servers %s acquire --ttl 1m onewrong > /dev/null "
               "2> %s", cli, bad, err), 0);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "f) acquire:\n%s", buf);
  ASSERT_EQ(harness_count(buf, "warning: master 3 refused authentication: "
                          "WRONGPASS"), 1);
  ASSERT_EQ(sh("%s --servers %s unlock --force onewrong 2> %s", cli, bad,
               err), 1);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "f) unlock --force:\n%s", buf);
  ASSERT_NULL(strstr(buf, "no quorum"));
  ASSERT_NOT_NULL(strstr(buf, "2 of 3 masters said yes"));
  ASSERT_NOT_NULL(strstr(buf, "every master"));
  ASSERT_NOT_NULL(strstr(buf, "WRONGPASS"));
  ASSERT_EQ(harness_count(buf, "warning: master 3 refused authentication: "
                          "WRONGPASS"), 1);
  ASSERT_EQ(harness_get(&srv[0], "onewrong", buf, sizeof(buf)), 0);
  ASSERT_EQ(harness_get(&srv[1], "onewrong", buf, sizeof(buf)), 0);
  ASSERT_EQ(harness_cmdf(&srv[2], buf, sizeof(buf),
                         "CONFIG SET requirepass %s", ""), 0);
  srv[2].admin_user = NULL;
  srv[2].admin_pass = NULL;

  /* g) two masters of three are black holes (issue 29, item 4): they
   * accept connections and never answer (a firewall, a hung proxy; here
   * a listening socket nobody accepts from: the kernel completes the
   * connection). `run` gives up with 74 once they have kept a quorum
   * out for --connect-timeout, naming each once as unresponsive; a
   * one-shot `acquire` exits 74 too, not 75 ("held by another owner",
   * which is false). (run waited on past 30 s; acquire exited 75.) */
  {
    int bh[2], bport[2];
    for (i = 0; i < 2; i++)
      bh[i] = harness_listener(&bport[i]);
    snprintf(bad, sizeof(bad), "127.0.0.1:%d,127.0.0.1:%d,%s", bport[0],
             bport[1], harness_addr(&srv[2]));
    t0 = harness_now_ms();
    ASSERT_EQ(harness_sh_within((uint64_t)harness_bound_ms(8000),
                                "%s --servers %s --connect-timeout 500ms "
                                "run blackhole -- touch %s 2> %s", cli, bad,
                                ran, err), 74);
    took = harness_now_ms() - t0;
    harness_read_file(err, buf, sizeof(buf));
    fprintf(stderr, "g) two black holes, run (%llu ms):\n%s",
            (unsigned long long)took, buf);
    ASSERT_NE(access(ran, F_OK), 0);
    ASSERT_GE(took, 500);
    ASSERT_LT(took, (uint64_t)harness_bound_ms(4000));
    for (i = 0; i < 2; i++) {
      char who[64];
      snprintf(who, sizeof(who), "redlock: 127.0.0.1:%d: unresponsive (",
               bport[i]);
      ASSERT_EQ(harness_count(buf, who), 1);
    }
    ASSERT_EQ(harness_count(buf, "run blackhole: too few masters answer: "
                            "giving up"), 1);
    t0 = harness_now_ms();
    ASSERT_EQ(harness_sh_within((uint64_t)harness_bound_ms(8000),
                                "%s --servers %s --connect-timeout 500ms "
                                "acquire blackhole > /dev/null 2> %s", cli,
                                bad, err), 74);
    harness_read_file(err, buf, sizeof(buf));
    fprintf(stderr, "g) acquire (%llu ms):\n%s",
            (unsigned long long)(harness_now_ms() - t0), buf);
    ASSERT_EQ(harness_count(buf, "unresponsive ("), 2);
    for (i = 0; i < 2; i++)
      close(bh[i]);
  }

  /* a) (last: the masters keep their password) the wrong password: 77
   * at once, each master named once. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf),
                           "CONFIG SET requirepass right-pw"), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(sh("REDLOCK_PASSWORD=wrong %s run nightly -- touch %s 2> %s",
               cli, ran, err), 77);
  took = harness_now_ms() - t0;
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "a) wrong password (%llu ms):\n%s",
          (unsigned long long)took, buf);
  ASSERT_GE(harness_count(buf, "authentication failed"), 2);
  ASSERT_EQ(harness_count(buf, "authentication failed"),
            harness_count(buf, "check --password-file"));
  for (i = 0; i < N; i++)
    ASSERT_LE(harness_count(buf, harness_addr(&srv[i])), 1);
  ASSERT_NE(access(ran, F_OK), 0);   /* the command did not run */
  ASSERT_LT(took, (uint64_t)harness_bound_ms(3000));

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
