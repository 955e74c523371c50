/* The restart guard and the masters' configuration as an operator sees
 * them through the CLI (issue 20: the causes named in `redlock status`;
 * durability declared, the ttl cap, the record shown and lowered; the
 * configuration warnings at connect; strict booleans in the environment).
 *
 *  a) A ttl above the deployment's cap (--max-ttl, default 1 h) is refused
 *     (64, the message names the cap), and nothing reaches a master.
 *  b) `acquire --ttl 2h` under --max-ttl 3h raises the ttl record to 2 h
 *     on every master; on masters met less than 2 h ago it is refused by
 *     the restart guard. `redlock guard` shows the record (7200000) and,
 *     per master, that its vote does not count and why.
 *  c) `redlock guard --set-record 1s` lowers the record on every master
 *     (read back with GET); then the masters count again once 1 s has
 *     passed since they were first seen, and a 1 s lock is granted.
 *  d) (last but one: the step is then the masters' latest warning)
 *     A master whose wall clock stepped 3 s forward (the clock shim): a new
 *     client's `redlock status` names it and the clock as the cause;
 *     `redlock --json guard` says it does not count.
 *  e) Two entries that are one instance (127.0.0.1 and localhost): a
 *     warning on stderr at connect (once), none with -q, and a "warning:"
 *     line in `redlock status`.
 *  f) --durable (and REDLOCK_DURABLE=yes) on masters without AOF: guard's
 *     table says declared but not reported, with the warning.
 *  g) Booleans and durations in the environment are strict: a bad value
 *     exits 78 (EX_CONFIG) with a message; REDLOCK_TLS_INSECURE=0 is
 *     false. */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char out[300], err[300];

#define sh harness_sh

static void slurp(const char *path, char *buf, size_t len) {
  harness_read_file(path, buf, len);
}

static int granted_1s(void *arg) {
  (void)arg;
  return sh("%s acquire --ttl 1s c-key > %s 2> %s", cli, out, err) == 0;
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], dup[256];
  char buf[16384], line[512];
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-guard PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++)
    harness_clock_prepare(&srv[i]);
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-guard-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  unsetenv("REDLOCK_RESTART_GUARD");
  unsetenv("REDLOCK_DURABLE");
  unsetenv("REDLOCK_MAX_TTL");
  unsetenv("REDLOCK_TLS_INSECURE");

  /* a) above the cap: refused before anything is sent. */
  ASSERT_EQ(sh("%s acquire --ttl 2h a-key 2> %s", cli, err), 64);
  slurp(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "cap max_ttl_ms 3600000"));
  ASSERT_EQ(sh("%s --max-ttl 1m acquire --ttl 2m a-key 2> %s", cli, err),
            64);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  /* b) a 2 h ttl under a 3 h cap: the record goes up everywhere, and the
   * masters (first seen just now) do not count for 2 h. */
  ASSERT_EQ(sh("%s --max-ttl 3h acquire --ttl 2h b-key 2> %s", cli, err),
            75);
  slurp(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "restart guard"));
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&srv[i], line, sizeof(line),
                           "GET __redlock__:maxttl"), 0);
    ASSERT_STR_EQ(line, "7200000");
  }
  ASSERT_EQ(sh("%s guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  fprintf(stderr, "b) redlock guard:\n%s", buf);
  ASSERT_EQ(harness_count(buf, " 7200000 "), N);
  ASSERT_EQ(harness_count(buf, ": restart guard: "), N);
  ASSERT_EQ(harness_count(buf, "(window 7200.0 s: the ttl record)"), N);
  ASSERT_EQ(sh("%s --json guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "\"ttl_record_ms\":7200000"), N);
  ASSERT_EQ(harness_count(buf, "\"counts\":false"), N);
  /* status shows it too: a master inside its window is reachable, and
   * its counts column says when its vote counts (issue 21, item 13). */
  ASSERT_EQ(sh("%s status b-key > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  fprintf(stderr, "b) redlock status:\n%s", buf);
  ASSERT_EQ(harness_count(buf, " yes       "), N);   /* reachable */
  ASSERT_EQ(harness_count(buf, " - in 7"), N);      /* absent; counts in ~7200 s */

  /* c) the operator lowers the record; the masters count again 1 s after
   * they were first seen, and a 1 s lock is granted. */
  ASSERT_EQ(sh("%s guard --set-record 1s > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "ttl record set to 1000 ms on 3 masters"));
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&srv[i], line, sizeof(line),
                           "GET __redlock__:maxttl"), 0);
    ASSERT_STR_EQ(line, "1000");
  }
  ASSERT_EQ(sh("%s guard --set-record 0x10 2> /dev/null", cli), 64);
  ASSERT_EQ(harness_wait_for(granted_1s, NULL,
                             (uint64_t)harness_bound_ms(8000)), 0);
  ASSERT_EQ(sh("%s guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_NULL(strstr(buf, "guard: "));
  ASSERT_EQ(harness_count(buf, " yes   "), N);   /* the counts column */

  /* e) one instance under two names. */
  snprintf(dup, sizeof(dup), "%s,localhost:%d,%s", harness_addr(&srv[0]),
           srv[0].port, harness_addr(&srv[1]));
  /* (stats waits for every master's answer, so for every handshake.) */
  ASSERT_EQ(sh("%s --servers %s stats > /dev/null 2> %s", cli, dup, err),
            0);
  slurp(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "redlock: warning: "));
  ASSERT_NOT_NULL(strstr(buf, "same Redis instance"));
  ASSERT_EQ(harness_count(buf, "same Redis instance"), 1);   /* once */
  ASSERT_EQ(sh("%s -q --servers %s stats > /dev/null 2> %s", cli, dup, err),
            0);
  slurp(err, buf, sizeof(buf));
  ASSERT_NULL(strstr(buf, "warning"));
  ASSERT_EQ(sh("%s --servers %s status e-key > %s 2> %s", cli, dup, out,
               err), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "warning: "));
  ASSERT_NOT_NULL(strstr(buf, "same Redis instance"));

  /* f) durability declared on masters that do not have it. */
  ASSERT_EQ(sh("%s --durable guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  fprintf(stderr, "f) redlock --durable guard:\n%s", buf);
  ASSERT_EQ(harness_count(buf, " yes     no  "), N);   /* declared, reports */
  ASSERT_EQ(harness_count(buf, "is declared durable but reports appendonly no"),
            N);
  ASSERT_EQ(sh("%s --durable status f-key > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, " broken "), N);   /* declared, not durable */
  ASSERT_EQ(sh("%s status f-key > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, " broken "), 0);
  /* A name used by a read-write lock: status says so. */
  ASSERT_EQ(sh("%s --restart-guard off acquire --write --ttl 30s rw-name "
               "> /dev/null", cli), 0);
  ASSERT_EQ(sh("%s status rw-name > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "note: rw-name is also a read-write lock on "
                              "3 of 3 masters"));
  ASSERT_EQ(sh("REDLOCK_DURABLE=yes %s --json guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "\"declared_durable\":true"), N);
  ASSERT_EQ(sh("REDLOCK_DURABLE=0 %s --json guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "\"declared_durable\":false"), N);

  /* d) master 3's wall clock steps 3 s forward: a new client's status
   * names it and the cause, and guard says it does not count. */
  harness_clock_step(&srv[2], 3000);
  ASSERT_EQ(sh("%s status d-key > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  fprintf(stderr, "d) redlock status after master 3's clock stepped:\n%s",
          buf);
  {
    /* Master 3's line names the clock. (A new client that has read only
     * two clocks when it judges cannot tell which of the two stepped and
     * may guard both for the window: conservative, so not counted here.) */
    char want[128];
    snprintf(want, sizeof(want), "guard: %s: clock stepped ",
             harness_addr(&srv[2]));
    ASSERT_NOT_NULL(strstr(buf, want));
  }
  ASSERT_EQ(sh("%s --json guard > %s", cli, out), 0);
  slurp(out, buf, sizeof(buf));
  {
    char want[128];
    const char *m, *counts;
    snprintf(want, sizeof(want), "{\"server\":\"%s\"",
             harness_addr(&srv[2]));
    m = strstr(buf, want);
    ASSERT_NOT_NULL(m);
    counts = strstr(m, "\"counts\":");
    ASSERT_NOT_NULL(counts);
    ASSERT_EQ(strncmp(counts, "\"counts\":false", 14), 0);
  }
  harness_clock_step(&srv[2], -3000);

  /* g) strict values in the environment. */
  ASSERT_EQ(sh("REDLOCK_DURABLE=2 %s status g-key > /dev/null 2> %s", cli,
               err), 78);
  slurp(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_DURABLE='2' is not a boolean"));
  ASSERT_EQ(sh("REDLOCK_TLS_INSECURE=maybe %s status g-key > /dev/null "
               "2> %s", cli, err), 78);
  ASSERT_EQ(sh("REDLOCK_TLS_INSECURE=0 %s status g-key > /dev/null", cli),
            0);
  ASSERT_EQ(sh("REDLOCK_MAX_TTL=1e3 %s status g-key > /dev/null 2> %s",
               cli, err), 78);
  slurp(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_MAX_TTL"));
  ASSERT_EQ(sh("REDLOCK_MAX_TTL=1m %s acquire --ttl 2m g-key 2> /dev/null",
               cli), 64);

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
