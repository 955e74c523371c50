/* The CLI on a Redis Cluster master and on a mixed list (issue 22, item
 * 1): `--servers redis+cluster://...` (N = 1, the single-cluster lock)
 * acquires, shows the key with the primary that serves it, lists every
 * primary in `guard`, runs a job and releases; a mixed list of a cluster
 * and two plain masters (N = 3) refuses a second owner while one holds
 * the key, and `status` counts the cluster as one master. */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define P 2

static const char *cli;

#define sh(...) harness_sh_within(30000, __VA_ARGS__)

int main(int argc, char **argv) {
  harness_server cl[P], plain[2];
  char tmpdir[200], out[300], err[300], buf[8192], tok[128], servers[512];
  char want[64];
  int owner, rc;
  if (argc < 2)
    TEST_FAIL("usage: test-cli-cluster PATH-TO-redlock");
  cli = argv[1];
  memset(cl, 0, sizeof(cl));
  memset(plain, 0, sizeof(plain));
  cl[0].cluster = cl[1].cluster = 1;
  harness_start(cl, P);
  harness_cluster_make(cl, P, P);
  harness_start(plain, 2);
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-cluster-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* N = 1: the cluster alone. */
  setenv("REDLOCK_SERVERS", harness_cluster_addr(&cl[0]), 1);
  ASSERT_EQ(sh("%s acquire --ttl 60s job-7 > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  owner = harness_cluster_owner(cl, P, "job-7");
  ASSERT_GE(owner, 0);
  ASSERT_EQ(harness_get(&cl[owner], "job-7", buf, sizeof(buf)), 1);
  ASSERT_STR_EQ(buf, tok);
  ASSERT_EQ(sh("%s status job-7 > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  snprintf(want, sizeof(want), " on 127.0.0.1:%d", cl[owner].port);
  if (strstr(buf, "held on 1 of 1 masters") == NULL ||
      strstr(buf, want) == NULL)
    TEST_FAIL("status does not show the key on its primary:\n%s", buf);
  /* guard: the master, then one row per primary. */
  ASSERT_EQ(sh("%s guard > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  if (harness_count(buf, "\n  127.0.0.1:") != P)
    TEST_FAIL("guard does not list the %d primaries:\n%s", P, buf);
  /* A job refused while held, and run once released. */
  rc = sh("%s run -n job-7 -- true > %s 2> %s", cli, out, err);
  ASSERT_EQ(rc, 75);
  ASSERT_EQ(sh("%s release job-7 %s 2> %s", cli, tok, err), 0);
  ASSERT_EQ(sh("%s run job-7 -- sh -c 'echo ran' > %s 2> %s", cli, out, err),
            0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "ran\n");

  /* N = 3: the cluster and two plain masters. */
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_cluster_addr(&cl[1]),
           harness_addr(&plain[0]), harness_addr(&plain[1]));
  setenv("REDLOCK_SERVERS", servers, 1);
  ASSERT_EQ(sh("%s acquire --ttl 60s mixed > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  ASSERT_EQ(sh("%s acquire -n --ttl 60s mixed > /dev/null 2> %s", cli, err),
            75);
  ASSERT_EQ(sh("%s status mixed > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  if (strstr(buf, "held on 3 of 3 masters (quorum 2)") == NULL)
    TEST_FAIL("status on the mixed list:\n%s", buf);
  ASSERT_EQ(sh("%s release mixed %s 2> %s", cli, tok, err), 0);
  harness_stop_all();
  return 0;
}
