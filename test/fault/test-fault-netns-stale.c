/* Commands written on a connection the library gave up must never reach
 * the master later (real TCP retransmission; root only).
 *
 * Run by test-fault-netns-stale.sh inside a private network namespace
 * (its own loopback and iptables); exits 77 (skipped) anywhere else. One
 * master on 127.0.0.1. An iptables rule drops the packets of the lock
 * connection from the client to the master only (by its local port): what
 * the client writes on it is neither delivered nor acknowledged, so the
 * client's kernel keeps it and retransmits it. The library gives up on the
 * connection at the command deadline, closes it and connects again (not
 * dropped). Then the rule is removed, as when a partition heals. Nothing
 * the library wrote on the connection it closed may arrive after that:
 * node.c sends again (or releases) on the new connection what needs it,
 * and a stale copy arriving afterwards undoes it. The fix is an abortive
 * close (the kernel drops what was unsent instead of retransmitting it).
 *
 *  a) A SET of an acquisition attempt that failed (command deadline): the
 *     release of the attempt's token goes out on the new connection and
 *     finds nothing. If the old SET lands afterwards, the key holds a
 *     token nobody holds, for the whole ttl (30 s): the resource is
 *     blocked. Checked: for 2.5 s after the healing, the key never holds
 *     that token.
 *  b) A PEXPIRE of an extend to a SHORTER ttl (1 s) that failed: the
 *     watchdog of the auto-extended lock (ttl 10 s) extends it again on
 *     the new connection. If the old extend lands afterwards, the key
 *     expires in 1 s while the holder believes it has seconds left, and
 *     another client is granted the lock: two holders. Checked: for 2.5 s
 *     after the healing the key stays the holder's with more than 2 s to
 *     live, and another client is refused.
 * Both cases are reported, then the test fails if either did. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"

static harness_server srv[1];
static int failures;
static int slow;
static int dropped_port;   /* the client port of the rule in place, or 0 */

/* 1 when this process runs in the namespace the script made: the one
 * named by $REDLOCK_NETNS (ip netns keeps it at /run/netns/NAME). */
static int in_test_netns(void) {
  const char *name = getenv("REDLOCK_NETNS");
  char path[256];
  struct stat self, ns;
  if (name == NULL || *name == '\0' || strchr(name, '/') != NULL)
    return 0;
  snprintf(path, sizeof(path), "/run/netns/%s", name);
  if (stat("/proc/self/ns/net", &self) != 0 || stat(path, &ns) != 0)
    return 0;
  return self.st_ino == ns.st_ino && self.st_dev == ns.st_dev;
}

static int run(const char *cmd) {
  int rc = system(cmd);
  return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Drops (on) or lets through (off) the packets from 127.0.0.1:port to
 * the master. */
static void drop_from(int port, int on) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd),
           "iptables -%s INPUT -p tcp -s 127.0.0.1 --sport %d --dport %d "
           "-j DROP", on ? "I" : "D", port, srv[0].port);
  if (run(cmd) != 0)
    TEST_FAIL("failed: %s", cmd);
  dropped_port = on ? port : 0;
}

/* The local port of this process's one established connection to the
 * master (/proc/net/tcp of this namespace). Fails unless exactly one. */
static int client_port(void) {
  char line[512];
  int found = 0;
  int port = 0;
  FILE *f = fopen("/proc/net/tcp", "r");
  if (f == NULL)
    TEST_FAIL("cannot read /proc/net/tcp");
  while (fgets(line, sizeof(line), f) != NULL) {
    unsigned lport, rport, st;
    if (sscanf(line, " %*s %*8s:%x %*8s:%x %x", &lport, &rport, &st) != 3)
      continue;
    if (st == 1 && (int)rport == srv[0].port && (int)lport != srv[0].port) {
      found++;
      port = (int)lport;
    }
  }
  fclose(f);
  if (found != 1)
    TEST_FAIL("%d established connections to the master, wanted 1", found);
  return port;
}

/* Calls of `cmd` the master has served (INFO commandstats). */
static int64_t calls_of(const char *cmd) {
  char buf[8192];
  char field[64];
  const char *p;
  if (harness_cmdf(&srv[0], buf, sizeof(buf), "INFO commandstats") != 0)
    TEST_FAIL("INFO commandstats failed");
  snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
  p = strstr(buf, field);
  return p == NULL ? 0 : strtoll(p + strlen(field), NULL, 10);
}

static redlock_client_t *client(uv_loop_t *loop) {
  redlock_client_config cfg = {.command_timeout_ms = slow ? 300 : 100,
                               .connect_timeout_ms = 2000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  return tu_client(loop, srv, 1, &cfg, 1);
}

static void case_stale_set(void) {
  redlock_acquire_opts once = {.wait_ms = -1};
  uint64_t window = slow ? 4000 : 2500;
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  char tok[80];
  char val[128];
  uint64_t t_heal, end;
  int64_t scripts0;
  int landed = 0;
  tu_op op;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = client(&loop);
  ASSERT_EQ(redlock_lock_new(c, "stale-a", 7, &l), 0);
  drop_from(client_port(), 1);
  scripts0 = calls_of("evalsha");
  /* The SET is never answered: the attempt fails at the command deadline
   * and the connection is closed with the SET unacknowledged. */
  ASSERT_NE(tu_acquire(&loop, l, 30000, &once, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  ASSERT(tok[0] != '\0');
  /* Reconnected; the attempt's release (a script) ran on the new
   * connection and found nothing. */
  tu_wait_up(&loop, c, 1, 10000);
  end = harness_now_ms() + 10000;
  while (calls_of("evalsha") < scripts0 + 1) {
    if (harness_now_ms() > end)
      TEST_FAIL("a) the attempt's release never reached the master");
    tu_run_for(&loop, 5);
  }
  ASSERT_EQ(harness_get(&srv[0], "stale-a", val, sizeof(val)), 0);
  /* The partition heals. */
  drop_from(dropped_port, 0);
  t_heal = harness_now_ms();
  while (harness_now_ms() < t_heal + window) {
    if (harness_get(&srv[0], "stale-a", val, sizeof(val)) == 1 &&
        strcmp(val, tok) == 0) {
      landed = 1;
      break;
    }
    tu_run_for(&loop, 20);
  }
  if (landed) {
    fprintf(stderr, "%s:%d: FAIL: a) the failed attempt's SET, written on "
            "a connection the client had closed, reached the master %llu "
            "ms after the path healed: the key holds a token nobody holds "
            "(pttl %lld ms)\n", __FILE__, __LINE__,
            (unsigned long long)(harness_now_ms() - t_heal),
            (long long)harness_pttl(&srv[0], "stale-a"));
    failures++;
  } else {
    fprintf(stderr, "a) nothing arrived from the closed connection within "
            "%llu ms of the healing\n", (unsigned long long)window);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
}

static int lock_renewed(void *arg) {
  return redlock_lock_validity_ms(arg) > 1000;
}

static void case_stale_extend(void) {
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1};
  redlock_acquire_opts once = {.wait_ms = -1};
  uint64_t window = slow ? 4000 : 2500;
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_lock_t *la, *lb;
  char tok[80];
  char val[128];
  uint64_t t_heal, end;
  int64_t pttl = 0;
  int broken = 0;
  int st;
  tu_op op;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  a = client(&loop);
  ASSERT_EQ(redlock_lock_new(a, "stale-b", 7, &la), 0);
  ASSERT_EQ(tu_acquire(&loop, la, 10000, &ae, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(la));
  drop_from(client_port(), 1);
  /* An extend to 1 s: never answered, it fails at the command deadline;
   * the validity is capped at 1 s from the call, time enough for the
   * watchdog's retry (500 ms later). */
  ASSERT_NE(tu_extend(&loop, la, 1000, &op), 0);
  /* The watchdog extends the lock to its 10 s ttl on the new connection
   * (polling the lock while the loop runs). */
  end = harness_now_ms() + 5000;
  while (!lock_renewed(la)) {
      if (harness_now_ms() > end || !redlock_lock_is_held(la))
      TEST_FAIL("b) setup: the lock was not extended again on the new "
                "connection (held %d, validity %lld ms)",
                redlock_lock_is_held(la),
                (long long)redlock_lock_validity_ms(la));
    tu_run_for(&loop, 5);
  }
  /* The partition heals. For the window the key stays ours, with more
   * than 2 s to live (auto-extension keeps it above 6 s). */
  drop_from(dropped_port, 0);
  t_heal = harness_now_ms();
  while (harness_now_ms() < t_heal + window) {
    int got = harness_get(&srv[0], "stale-b", val, sizeof(val));
    pttl = harness_pttl(&srv[0], "stale-b");
    if (got != 1 || strcmp(val, tok) != 0 || pttl < 2000) {
      broken = 1;
      break;
    }
    tu_run_for(&loop, 20);
  }
  if (broken) {
    int64_t left = redlock_lock_validity_ms(la);
    fprintf(stderr, "%s:%d: FAIL: b) %llu ms after the path healed the "
            "key expires in %lld ms (or is gone) while its holder believes "
            "%lld ms remain: the failed short extend, written on a "
            "connection the client had closed, landed after the renewal\n",
            __FILE__, __LINE__,
            (unsigned long long)(harness_now_ms() - t_heal),
            (long long)pttl, (long long)left);
    failures++;
    /* Let it expire, to show the consequence. */
    end = harness_now_ms() + 3000;
    while (harness_get(&srv[0], "stale-b", val, sizeof(val)) == 1 &&
           harness_now_ms() < end)
      tu_run_for(&loop, 10);
  } else {
    fprintf(stderr, "b) the key stayed the holder's for %llu ms after the "
            "healing (pttl %lld ms)\n", (unsigned long long)window,
            (long long)pttl);
  }
  /* Another client must be refused while the first holds the lock. */
  b = client(&loop);
  ASSERT_EQ(redlock_lock_new(b, "stale-b", 7, &lb), 0);
  st = tu_acquire(&loop, lb, 10000, &once, &op);
  if (st == 0 && redlock_lock_is_held(la)) {
    fprintf(stderr, "%s:%d: FAIL: b) another client was granted the lock "
            "while the first holds it for %lld ms more: two holders\n",
            __FILE__, __LINE__, (long long)redlock_lock_validity_ms(la));
    failures++;
  } else if (!broken) {
    ASSERT_EQ(st, REDLOCK_ETAKEN);
  }
  if (st == 0)
    ASSERT_EQ(tu_release(&loop, lb, &op), 0);
  ASSERT_EQ(redlock_lock_free(lb), 0);
  ASSERT_EQ(redlock_lock_free(la), 0);
  tu_close_client(&loop, b);
  tu_close(&loop, a);
}

int main(void) {
  slow = tu_slow();
  if (geteuid() != 0 || !in_test_netns()) {
    fprintf(stderr, "needs root in a private network namespace (run by "
            "test-fault-netns-stale.sh): skipped\n");
    return TEST_SKIP;
  }
  if (run("iptables -S INPUT >/dev/null 2>&1") != 0) {
    fprintf(stderr, "iptables unusable here: skipped\n");
    return TEST_SKIP;
  }
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  case_stale_set();
  case_stale_extend();
  if (failures > 0)
    TEST_FAIL("%d check(s) failed (see above)", failures);
  harness_stop_all();
  return 0;
}
