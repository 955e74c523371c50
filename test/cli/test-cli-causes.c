/* The restart guard's refusals name their real cause, and what the
 * operator can do (issue 33, "Messages that name the real cause"). Three
 * masters with appendonly (a restart keeps the clock record), two spare
 * servers that become replicas; every call is a new CLI client with the
 * guard on (its default) and a 1 s ttl record, so each window is short.
 *
 *  a) Masters no client has seen under this prefix (the first use): the
 *     refusal (75) says "never seen by any client" and names the remedies
 *     (--durable, waiting, the ttl record); it said "3 of 3 masters
 *     restarted less than 1.0 s ago", which they had not.
 *  b) Two masters restarted (their run_id changed, the record kept by
 *     the AOF): "restarted".
 *  c) A replica attached to two masters (Redis gives a master a new
 *     replication id when its first replica attaches and no backlog
 *     exists): "replication id changed", with why that must be guarded
 *     (the same id change follows a full sync from another master). It
 *     said "first seen 0.0 s ago" of masters up for seconds.
 *  d) One `acquire --ttl 1m` raises the ttl record: a later 1 s lock's
 *     refusal says the window is the ttl record, 60 s, raised by some
 *     client, and that `redlock guard --set-record` lowers it. */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char err[300];
static const char *want_key;

#define sh harness_sh

static int granted(void *arg) {
  (void)arg;
  return sh("%s acquire --ttl 1s %s > /dev/null 2> %s", cli, want_key,
            err) == 0;
}

/* Waits (bounded) until a 1 s lock on key is granted: every master's
 * window (the 1 s record) has passed. */
static void wait_granted(const char *key) {
  want_key = key;
  ASSERT_EQ(harness_wait_for(granted, NULL,
                             (uint64_t)harness_bound_ms(15000)), 0);
}

static void refused(const char *what, const char *key, const char *ttl,
                    char *buf, size_t len) {
  ASSERT_EQ(sh("%s acquire --ttl %s %s > /dev/null 2> %s", cli, ttl, key,
               err), 75);
  harness_read_file(err, buf, len);
  fprintf(stderr, "%s:\n%s", what, buf);
}

static int has_replica(void *arg) {
  const harness_server *s = arg;
  char buf[4096];
  if (harness_cmdf(s, buf, sizeof(buf), "INFO replication") != 0)
    return 0;
  return strstr(buf, "connected_slaves:1") != NULL &&
         strstr(buf, "state=online") != NULL;
}

int main(int argc, char **argv) {
  harness_server srv[N + 2];
  char servers[256], buf[16384];
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-causes PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++)
    srv[i].appendonly = 1;
  harness_start(srv, N + 2);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-causes-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  unsetenv("REDLOCK_RESTART_GUARD");
  unsetenv("REDLOCK_DURABLE");
  unsetenv("REDLOCK_MAX_TTL");

  /* a) never seen by any client. */
  refused("a) first use", "a-key", "1s", buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "never seen by any client"));
  ASSERT_NULL(strstr(buf, "restarted"));
  ASSERT_NOT_NULL(strstr(buf, "--durable"));
  ASSERT_NOT_NULL(strstr(buf, "guard --set-record"));
  ASSERT_NOT_NULL(strstr(buf, "wait "));
  wait_granted("a-key");

  /* b) two masters restarted (the AOF keeps the record: another run_id
   * than the one on it). */
  for (i = 0; i < 2; i++) {
    harness_kill(&srv[i]);
    harness_restart(&srv[i]);
  }
  refused("b) two restarted", "b-key", "1s", buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "2 of 3 masters restarted"));
  ASSERT_NULL(strstr(buf, "never seen"));
  wait_granted("b-key");

  /* c) a first replica attached to masters 1 and 2: a new replication id
   * under the same run_id. */
  for (i = 0; i < 2; i++) {
    ASSERT_EQ(harness_cmdf(&srv[N + i], buf, sizeof(buf),
                           "REPLICAOF 127.0.0.1 %d", srv[i].port), 0);
    ASSERT_EQ(harness_wait_for(has_replica, &srv[i],
                               (uint64_t)harness_bound_ms(10000)), 0);
  }
  refused("c) replicas attached", "c-key", "1s", buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "2 of 3 masters changed replication id"));
  ASSERT_NOT_NULL(strstr(buf, "a replica attached"));
  ASSERT_NULL(strstr(buf, "restarted"));
  ASSERT_NULL(strstr(buf, "never seen"));

  /* d) the ttl record raised by one client's 1 m lock: a 1 s lock waits
   * 60 s, and says so. */
  refused("d) acquire --ttl 1m", "d-key", "1m", buf, sizeof(buf));
  refused("d) then a 1 s lock", "d-key", "1s", buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "the ttl record, raised to 60.0 s by some "
                         "client"));
  ASSERT_NOT_NULL(strstr(buf, "guard --set-record"));
  ASSERT_EQ(sh("%s guard --set-record 1s > /dev/null 2> %s", cli, err), 0);
  wait_granted("d-key");

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
