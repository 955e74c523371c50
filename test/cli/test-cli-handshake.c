/* The redlock command-line tool against a master whose handshake fails:
 * `redlock --servers redis://HOST:PORT/99 acquire k` on a server with the
 * default 16 dbs. SELECT 99 fails, so the master is down: the acquire must
 * exit 78 (the configuration is refused: issue 21), print nothing on stdout (no token), say why on
 * stderr, and leave no key in db 0. Ignoring the SELECT error instead runs
 * the SET queued behind the handshake in db 0: the tool prints a token
 * for a lock in the wrong db that the same URI can never release. */
#include <spawn.h>
#include <stdarg.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

extern char **environ;

#define sh harness_sh

int main(int argc, char **argv) {
  harness_server srv[1];
  char tmpdir[200];
  char out[300];
  char err[300];
  char buf[4096];
  const char *cli;
  int rc;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-handshake PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  unsetenv("REDLOCK_SERVERS");
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_USERNAME");
  /* The server is brand new: without this, the restart guard alone would
   * refuse the acquire and hide what the SELECT failure does. */
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  rc = sh("%s --servers redis://127.0.0.1:%d/99 acquire --ttl 30s hs-cli "
          "> %s 2> %s", cli, srv[0].port, out, err);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "exit %d, stdout \"%s\"\n", rc, buf);
  ASSERT_EQ(rc, 78);
  ASSERT_STR_EQ(buf, "");                     /* no token printed */
  ASSERT_EQ(harness_dbsize(&srv[0]), 0);      /* nothing in db 0 */
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "stderr: %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "DB index is out of range"));

  unlink(out);
  unlink(err);
  rmdir(tmpdir);
  harness_stop_all();
  return 0;
}
