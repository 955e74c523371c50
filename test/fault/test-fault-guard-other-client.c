/* The restart guard's window must cover the longest ttl used by ANY client
 * of the deployment, not only the ttls of the client that asks.
 *
 * N=5. Client A (this process, the library) holds "shared" with a long
 * ttl (6 s) on M1, M2, M3 (M4 and M5 were down when it acquired). M1
 * crashes and restarts empty; M4 and M5 come back (empty). Client B is
 * another process (the CLI) with a short ttl (1 s) and the default guard.
 * Once the restarted masters are more than 1 s old (B's own window has
 * passed) but A's lock is still valid, B asks:
 *   M1: yes (empty)  M2: no (A)  M3: no (A)  M4: yes  M5: yes
 * If B's window is only its own ttl, that is 3 of 5: a double grant while
 * A still holds a valid lock. Correct: B is refused (exit 75) as long as
 * A's lock is valid, because a master younger than A's ttl may have lost
 * A's key. Once A's lock has expired and 6 s have passed since the
 * restarts, B gets the lock (bounded retries).
 *
 * The wait before B asks is until the restarted masters report an uptime
 * of at least 3 s (INFO counts whole wall-clock seconds, so they are then
 * more than 2 s old): B's ttl-based window (1 s) has passed even if B
 * reads the uptime conservatively, so only the longer ttl of the other
 * client can refuse B.
 *
 * A runs with its own guard off: the servers are brand new (the long-ttl
 * holder is the victim here, not the one being checked). */
#include <spawn.h>
#include <stdarg.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"

#define N 5
#define A_TTL_MS 6000

extern char **environ;

static const char *cli;
static char servers[N * 32];
static char tmpdir[200];
static char out_path[300];
static char err_path[300];

/* Client B: one acquisition attempt of "shared" with ttl 1 s and the
 * default restart guard, in its own process. Returns the exit code; the
 * token (stdout) and messages (stderr) are in out_path / err_path. */
static int run_b(void) {
  char cmd[1024];
  snprintf(cmd, sizeof(cmd),
           "%s --servers %s --timeout 500ms --connect-timeout 2s "
           "acquire --ttl 1s shared > %s 2> %s",
           cli, servers, out_path, err_path);
  return harness_wait_exit(harness_spawn_sh(cmd), 20000);
}

static int64_t uptime_s(const harness_server *s) {
  char buf[8192];
  const char *p;
  ASSERT_EQ(harness_cmdf(s, buf, sizeof(buf), "INFO server"), 0);
  p = strstr(buf, "uptime_in_seconds:");
  ASSERT_NOT_NULL(p);
  return strtoll(p + strlen("uptime_in_seconds:"), NULL, 10);
}

int main(int argc, char **argv) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *a;
  redlock_lock_t *la;
  redlock_client_config cfg;
  redlock_acquire_opts once = {.wait_ms = -1};
  char buf[4096];
  char tok[128];
  tu_op op;
  uint64_t t_restart;
  uint64_t end;
  int rc;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-fault-guard-other-client PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  servers[0] = '\0';
  for (i = 0; i < N; i++)
    snprintf(servers + strlen(servers), sizeof(servers) - strlen(servers),
             "%s%s", i ? "," : "", harness_addr(&srv[i]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-guard-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out_path, sizeof(out_path), "%s/out", tmpdir);
  snprintf(err_path, sizeof(err_path), "%s/err", tmpdir);
  unsetenv("REDLOCK_SERVERS");
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_USERNAME");
  unsetenv("REDLOCK_RESTART_GUARD");   /* B: the default guard */
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* A acquires with a long ttl while M4 and M5 are down: M1, M2, M3. */
  harness_kill(&srv[3]);
  harness_kill(&srv[4]);
  memset(&cfg, 0, sizeof(cfg));
  cfg.restart_guard_ms = -1;
  cfg.reconnect_min_ms = 10;
  cfg.reconnect_max_ms = 100;
  a = tu_client(&loop, srv, N, &cfg, 3);
  ASSERT_EQ(redlock_lock_new(a, "shared", 6, &la), 0);
  ASSERT_EQ(tu_acquire(&loop, la, A_TTL_MS, &once, &op), 0);
  ASSERT_EQ(op.yes, 3);

  /* M1 loses A's key; M4 and M5 come back empty. */
  harness_kill(&srv[0]);
  harness_restart(&srv[0]);
  harness_restart(&srv[3]);
  harness_restart(&srv[4]);
  t_restart = harness_now_ms();
  ASSERT_EQ(tu_count_holding(srv, N, "shared", redlock_lock_token(la)), 2);

  /* Wait until the restarted masters are more than 2 s old: B's own
   * window (its ttl, 1 s) has passed. */
  end = harness_now_ms() + 6000;
  while (uptime_s(&srv[0]) < 3 || uptime_s(&srv[3]) < 3 ||
         uptime_s(&srv[4]) < 3) {
    if (harness_now_ms() > end)
      TEST_FAIL("restarted masters did not reach an uptime of 3 s");
    tu_run_for(&loop, 20);
  }
  ASSERT_GT(harness_now_ms() - t_restart, 2000);
  ASSERT(redlock_lock_is_held(la));
  fprintf(stderr, "B asks %llu ms after the restarts; A's validity %lld "
          "ms\n", (unsigned long long)(harness_now_ms() - t_restart),
          (long long)redlock_lock_validity_ms(la));

  rc = run_b();
  harness_read_file(err_path, buf, sizeof(buf));
  if (!redlock_lock_is_held(la))
    TEST_FAIL("A's lock expired before B finished (%llu ms after the "
              "restarts): too slow to tell",
              (unsigned long long)(harness_now_ms() - t_restart));
  if (rc == 0) {
    harness_read_file(out_path, tok, sizeof(tok));
    tok[strcspn(tok, "\n")] = '\0';
    fprintf(stderr, "DOUBLE GRANT: B holds \"shared\" on %d of %d masters "
            "while A's lock is valid for %lld ms more\n",
            tu_count_holding(srv, N, "shared", tok), N,
            (long long)redlock_lock_validity_ms(la));
  } else {
    fprintf(stderr, "B refused (exit %d):\n%s", rc, buf);
  }
  ASSERT_EQ(rc, 75);
  harness_read_file(out_path, tok, sizeof(tok));
  ASSERT_STR_EQ(tok, "");
  /* B's refused attempt left nothing behind; A's key is untouched. */
  ASSERT_EQ(harness_get(&srv[0], "shared", buf, sizeof(buf)), 0);
  ASSERT_EQ(harness_get(&srv[3], "shared", buf, sizeof(buf)), 0);
  ASSERT_EQ(harness_get(&srv[4], "shared", buf, sizeof(buf)), 0);
  ASSERT_EQ(tu_count_holding(srv, N, "shared", redlock_lock_token(la)), 2);

  /* After A's lock expired and A's ttl has passed since the restarts, B
   * gets it (bounded retries: one attempt per run). */
  end = harness_now_ms() + 15000;
  while (redlock_lock_is_held(la) ||
         harness_now_ms() - t_restart < A_TTL_MS) {
    if (harness_now_ms() > end)
      TEST_FAIL("A's lock did not expire");
    tu_run_for(&loop, 50);
  }
  end = harness_now_ms() + 15000;
  for (;;) {
    rc = run_b();
    if (rc == 0)
      break;
    harness_read_file(err_path, buf, sizeof(buf));
    if (rc != 75)
      TEST_FAIL("B: exit %d: %s", rc, buf);
    if (harness_now_ms() > end)
      TEST_FAIL("B still refused %llu ms after the restarts: %s",
                (unsigned long long)(harness_now_ms() - t_restart), buf);
    tu_run_for(&loop, 200);
  }
  harness_read_file(out_path, tok, sizeof(tok));
  tok[strcspn(tok, "\n")] = '\0';
  ASSERT_GE(tu_count_holding(srv, N, "shared", tok), 3);
  fprintf(stderr, "B granted %llu ms after the restarts\n",
          (unsigned long long)(harness_now_ms() - t_restart));

  ASSERT_EQ(redlock_lock_free(la), 0);
  tu_close(&loop, a);
  unlink(out_path);
  unlink(err_path);
  rmdir(tmpdir);
  harness_stop_all();
  return 0;
}
