/* Observability that works in production (issue 21, item 12, and the JSON
 * small things). N = 3 real masters.
 *
 *  a) --stats-file that cannot be written (a missing directory, a
 *     directory) ends the command with 73 before anything is acquired,
 *     saying why; an empty name is a usage error. (It was silent, exit 0.)
 *  b) run --stats-file F --stats-label job=backup: while the command runs,
 *     F says redlock_lock_held{key="KEY",job="backup"} 1 (every sample
 *     carries the labels: two jobs do not collide in node_exporter's
 *     textfile collector); after the run F is written last, after the
 *     release: releases_total 1 and held 0 (it read 0 releases).
 *  c) elect --stats-file: redlock_leader 1 while it leads; after, the
 *     resignation's release is counted.
 *  d) --json run prints one object; --json status --stats one JSON object
 *     with the Prometheus text in it (it mixed both on stdout); bytes that
 *     are not UTF-8 come out as \udcXX (surrogateescape: lossless). */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];

#define sh harness_sh

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], f[300], out[300], err[300], buf[16384];
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-stats PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-stats-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(f, sizeof(f), "%s/job.prom", tmpdir);
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* a) */
  ASSERT_EQ(sh("%s run --stats-file %s/no-such-dir/x.prom sk -- true "
               "2> %s", cli, tmpdir, err), 73);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "No such file or directory"));
  ASSERT_EQ(sh("%s run --stats-file %s sk -- true 2> %s", cli, tmpdir, err),
            73);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "Is a directory"));
  ASSERT_EQ(sh("%s run --stats-file '' sk -- true 2> /dev/null", cli), 64);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);   /* nothing was acquired */

  /* b) */
  ASSERT_EQ(sh("%s run --stats-file %s --stats-label job=backup sk -- "
               "grep -q 'redlock_lock_held{key=\"sk\",job=\"backup\"} 1' %s",
               cli, f, f), 0);
  harness_read_file(f, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf,
                         "redlock_lock_releases_total{key=\"sk\",job=\"backup\"} 1"));
  ASSERT_NOT_NULL(strstr(buf,
                         "redlock_lock_held{key=\"sk\",job=\"backup\"} 0"));
  ASSERT_NOT_NULL(strstr(buf, "redlock_master_up{key=\"sk\",job=\"backup\","
                              "master=\""));
  ASSERT_EQ(sh("%s run --stats-label 1x=y sk -- true 2> /dev/null", cli),
            64);

  /* c) */
  ASSERT_EQ(sh("%s elect --id a --stats-file %s ek -- "
               "grep -q 'redlock_leader{key=\"ek\"} 1' %s", cli, f, f), 0);
  harness_read_file(f, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "redlock_leader{key=\"ek\"} 0"));
  ASSERT_NOT_NULL(strstr(buf, "redlock_lock_releases_total{key=\"ek\"} 1"));

  /* d) */
  ASSERT_EQ(sh("%s --json run jk -- true > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "{\"command\":\"run\",\"key\":\"jk\",\"ok\":true,"
                     "\"exit\":0,\"lost\":false}\n");
  ASSERT_EQ(sh("%s --json status --stats jk > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_EQ(buf[0], '{');
  ASSERT_NOT_NULL(strstr(buf, ",\"prometheus\":\"# HELP "));
  ASSERT_NULL(strstr(buf, "\n#"));   /* no raw Prometheus lines */
  ASSERT_EQ(sh("%s --json status \"$(printf 'k\\377x')\" > %s", cli, out),
            0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "\"key\":\"k\\udcffx\""));

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
