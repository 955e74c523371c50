/* Network faults through the fault proxy (tools/redlock-faultproxy):
 *  - a slow master beyond the per-node timeout is excluded and the lock
 *    is still valid (validity close to the ttl, not cut by the slow one);
 *  - slow majority: fails within about the command timeout;
 *  - asymmetric partition: the SET lands but its reply is lost; the lock
 *    is held from the others, and when the master returns the key stays
 *    there (it is the held lock's token: never released behind its back)
 *    until the release deletes it everywhere;
 *  - refused and reset connections are error votes, never hangs. */
#include "tutil.h"

#define N 5

static const char *proxy_exe;

static redlock_client_t *client_via(uv_loop_t *loop, harness_proxy *px,
                                    int cmd_timeout, int n) {
  const char *addrs[N];
  redlock_client_config cfg = {.command_timeout_ms = cmd_timeout,
                               .connect_timeout_ms = 300,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50,
                               .restart_guard_ms = -1};
  redlock_client_t *c = NULL;
  harness_proxy_addrs(px, addrs);
  cfg.servers = addrs;
  cfg.n_servers = (size_t)n;
  ASSERT_EQ(redlock_client_new(loop, &cfg, &c), 0);
  tu_wait_up(loop, c, (unsigned)n, 10000);
  return c;
}

int main(int argc, char **argv) {
  harness_server srv[N];
  harness_proxy px;
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  char val[96];
  char tok[96];
  uint64_t t0;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-fault-proxy PATH-TO-redlock-faultproxy");
  proxy_exe = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  harness_proxy_start(&px, proxy_exe, srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = client_via(&loop, &px, 100, N);
  ASSERT_EQ(redlock_lock_new(c, "proxy", 5, &l), 0);

  /* Slow minority: 400 ms each way on two masters, 100 ms timeout. */
  harness_proxy_cmd(&px, 0, "latency 400");
  harness_proxy_cmd(&px, 1, "latency 400");
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  /* decided by the fast three */
  ASSERT_LT(op.cb_ms - t0, (uint64_t)harness_bound_ms(100));
  ASSERT_EQ(op.yes, 3);
  ASSERT_GT(op.validity_ms, 10000 - 102 - 100);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_NONE);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  /* ... and their connections are torn down by the deadline. */
  tu_wait_up(&loop, c, 3, 10000);

  /* Slow majority: fails in about the command timeout, never hangs. */
  harness_proxy_cmd(&px, 2, "latency 400");
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
  ASSERT_LT(op.cb_ms - t0, 1000);
  for (i = 0; i < 3; i++)
    harness_proxy_cmd(&px, i, "normal");
  tu_wait_up(&loop, c, N, 10000);
  tu_run_for(&loop, 500);   /* let the delayed SETs land and be released */

  /* Asymmetric partition on master 0: requests arrive, replies do not. */
  for (i = 0; i < N; i++)
    harness_cmdf(&srv[i], val, sizeof(val), "FLUSHALL");
  harness_proxy_cmd(&px, 0, "blackhole");
  ASSERT_EQ(tu_acquire(&loop, l, 30000, &once, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  /* The SET landed on master 0 although the client never heard back. */
  t0 = harness_now_ms();
  while (tu_count_holding(srv, 1, "proxy", tok) != 1) {
    if (harness_now_ms() - t0 > 5000)
      TEST_FAIL("the blackholed SET did not land");
    tu_run_for(&loop, 5);
  }
  tu_wait_up(&loop, c, N - 1, 10000);   /* its deadline tore it down */
  harness_proxy_cmd(&px, 0, "normal");
  tu_wait_up(&loop, c, N, 10000);
  /* The lock holds that token: it stays on master 0 (never released
   * behind the lock's back) and the lock rests on all N masters. An
   * inspect is answered after everything queued on master 0. */
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_inspect(l, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  ASSERT(redlock_lock_is_held(l));
  ASSERT_EQ(tu_count_holding(srv, N, "proxy", tok), N);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  tu_run_for(&loop, 20);
  ASSERT_EQ(tu_count_holding(srv, N, "proxy", tok), 0);

  /* Refused and reset: error votes at once, each naming its cause. A
   * majority is down, so the decision needs their votes, and a client
   * whose command timeout is 5 s tells an error at once from a request
   * that waits for a master that is not there. */
  {
    redlock_client_t *c2;
    redlock_lock_t *l2;
    const char *addrs[N];
    /* Reconnects 2-4 s apart: a request that waited for the next
     * connect instead of failing would take seconds too. */
    redlock_client_config cfg = {.command_timeout_ms = 5000,
                                 .connect_timeout_ms = 5000,
                                 .reconnect_min_ms = 4000,
                                 .reconnect_max_ms = 4000,
                                 .restart_guard_ms = -1};
    harness_proxy_addrs(&px, addrs);
    cfg.servers = addrs;
    cfg.n_servers = N;
    ASSERT_EQ(redlock_client_new(&loop, &cfg, &c2), 0);
    tu_wait_up(&loop, c2, N, 10000);
    ASSERT_EQ(redlock_lock_new(c2, "proxy-down", 5, &l2), 0);
    harness_proxy_cmd(&px, 2, "refuse");
    harness_proxy_cmd(&px, 3, "refuse");
    harness_proxy_cmd(&px, 4, "reset");
    tu_wait_up(&loop, c2, 2, 10000);
    /* The refused ones have tried to connect again (and been refused). */
    t0 = harness_now_ms();
    for (;;) {
      redlock_master_info m2, m3;
      ASSERT_EQ(redlock_client_master_info(c2, 2, &m2), 0);
      ASSERT_EQ(redlock_client_master_info(c2, 3, &m3), 0);
      if (strstr(m2.error, "refused") != NULL &&
          strstr(m3.error, "refused") != NULL)
        break;
      if (harness_now_ms() - t0 > 10000)
        TEST_FAIL("no refused connect seen: \"%s\", \"%s\"", m2.error,
                  m3.error);
      tu_run_for(&loop, 5);
    }
    t0 = harness_now_ms();
    ASSERT_EQ(tu_acquire(&loop, l2, 10000, &once, &op), REDLOCK_ENOQUORUM);
    /* Far below the 2-5 s a request queued for a down master would take
     * (the next connect, or the command timeout). */
    ASSERT_LT(op.cb_ms - t0, 1500);
    for (i = 2; i < N; i++) {
      ASSERT_EQ(op.nodes[i].vote, REDLOCK_VOTE_ERR);
      ASSERT_EQ(op.nodes[i].error, REDLOCK_EIO);
    }
    fprintf(stderr, "refused: \"%s\"; reset: \"%s\"\n", op.errstr[2],
            op.errstr[4]);
    ASSERT(strstr(op.errstr[2], "refused") != NULL);
    ASSERT(strstr(op.errstr[3], "refused") != NULL);
    ASSERT(strstr(op.errstr[4], "refused") == NULL);
    ASSERT(op.errstr[4][0] != '\0');
    for (i = 2; i < N; i++)
      harness_proxy_cmd(&px, i, "normal");
    tu_wait_up(&loop, c2, N, 10000);
    ASSERT_EQ(tu_acquire(&loop, l2, 10000, &once, &op), 0);
    ASSERT_GE(op.yes, 3);
    ASSERT_EQ(tu_release(&loop, l2, &op), 0);
    ASSERT_EQ(redlock_lock_free(l2), 0);
    tu_close_client(&loop, c2);
  }

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
