/* Reconnect backoff against a master slower than the command timeout.
 *
 * N=3 behind the fault proxy; master 3 answers after 50 ms each way (a
 * 100 ms round trip) while the command timeout is 50 ms; the connect
 * timeout (1000 ms) lets the handshake itself complete. Every command sent
 * to it misses its deadline, so the connection is torn down, and a new one
 * (a full handshake: SCRIPT LOAD x2, INFO, plus AUTH/SELECT when set) is
 * made as soon as the backoff allows. Meanwhile the client keeps working
 * on the two fast masters: an acquire/release pair every ~20 ms for 3 s.
 *
 * A deadline teardown is a failure of that master like a refused connect:
 * it must count for the reconnect backoff, which then grows exponentially
 * from reconnect_min_ms (20) to reconnect_max_ms (1000), so the slow
 * master sees a bounded number of new connections: about 7 in 3 s (the
 * delays 10-20, 20-40, 40-80, ... ms add up, each cycle also takes a
 * handshake and a deadline). Reaching the end of the handshake (or
 * getting replies to requests queued behind it) does not prove the master
 * healthy again. If a teardown does not count, the client reconnects
 * 10-20 ms after each teardown for as long as the master stays slow: a
 * storm of full handshakes (18 in 3 s here) against a master that is
 * already overloaded.
 *
 * The latency is 50 ms rather than a larger one on purpose: with 200 ms
 * each way the handshake alone takes 400 ms and hides the missing backoff
 * (7 connections in 3 s either way).
 *
 * Connections are counted on the slow master (INFO stats
 * total_connections_received, before and after; the proxy opens one
 * upstream connection per client connection). */
#include "tutil.h"

#define N 3
#define SLOW 2           /* the slow master's index */
#define LATENCY_MS 50    /* each way, > command timeout / 2 */
#define SECONDS 3
#define MAX_CONNS 10     /* backoff: ~7; without it: ~18 */

static const char *proxy_exe;

static int64_t connections_received(const harness_server *s) {
  char buf[8192];
  const char *p;
  ASSERT_EQ(harness_cmdf(s, buf, sizeof(buf), "INFO stats"), 0);
  p = strstr(buf, "total_connections_received:");
  ASSERT_NOT_NULL(p);
  return strtoll(p + strlen("total_connections_received:"), NULL, 10);
}

int main(int argc, char **argv) {
  harness_server srv[N];
  harness_proxy px;
  const char *addrs[N];
  char lat[32];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config cfg;
  tu_op op;
  int64_t before;
  int64_t after;
  int64_t conns;
  uint64_t end;
  unsigned ops = 0;
  unsigned granted = 0;

  if (argc < 2)
    TEST_FAIL("usage: test-fault-reconnect-backoff PATH-TO-faultproxy");
  proxy_exe = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  harness_proxy_start(&px, proxy_exe, srv, N);
  harness_proxy_addrs(&px, addrs);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.command_timeout_ms = 50;
  cfg.connect_timeout_ms = 1000;
  cfg.reconnect_min_ms = 20;
  cfg.reconnect_max_ms = 1000;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  tu_wait_up(&loop, c, N, 10000);
  ASSERT_EQ(redlock_lock_new(c, "storm", 5, &l), 0);

  /* The master becomes slow; every operation still goes to it. */
  snprintf(lat, sizeof(lat), "latency %d", LATENCY_MS);
  harness_proxy_cmd(&px, SLOW, lat);
  before = connections_received(&srv[SLOW]);
  end = harness_now_ms() + SECONDS * 1000;
  while (harness_now_ms() < end) {
    if (tu_acquire(&loop, l, 10000, &once, &op) == 0) {
      granted++;
      tu_release(&loop, l, &op);
    }
    ops++;
    tu_run_for(&loop, 20);
  }
  after = connections_received(&srv[SLOW]);
  conns = after - before - 1;   /* minus the INFO's own connection */
  fprintf(stderr, "%u operations (%u granted), %lld new connections to "
          "the slow master in %d s (at most %d allowed)\n", ops, granted,
          (long long)conns, SECONDS, MAX_CONNS);
  ASSERT_GE(ops, 10);                /* the client kept working */
  ASSERT_LE(conns, MAX_CONNS);       /* no reconnect storm */

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
