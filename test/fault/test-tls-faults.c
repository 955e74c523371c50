/* TLS masters under faults (N=3, every master TLS only for the client):
 *  - a master SIGSTOPped before the client connects: its TCP connect
 *    succeeds (the kernel's backlog) but the TLS handshake never answers;
 *    the connect deadline holds it (no hang) and the other two grant;
 *  - a master killed and restarted empty: the client reconnects (a new
 *    TLS handshake) and the restart guard applies to its votes;
 *  - wake-up over TLS: a waiter is granted right after the holder's
 *    release, well before its retry delay. */
#include "tutil.h"

#define N 3

static redlock_client_t *mk(uv_loop_t *loop, const harness_server *srv,
                            int guard_ms, int connect_ms) {
  static const char *addrs[N];
  redlock_client_config cfg;
  redlock_client_t *c = NULL;
  int i;
  memset(&cfg, 0, sizeof(cfg));
  for (i = 0; i < N; i++)
    addrs[i] = harness_tls_addr(&srv[i]);
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.tls_ca_file = harness_tls_file("ca.crt");
  cfg.command_timeout_ms = 2000;
  cfg.connect_timeout_ms = connect_ms;
  cfg.reconnect_min_ms = 10;
  cfg.reconnect_max_ms = 100;
  cfg.restart_guard_ms = guard_ms;
  if (redlock_client_new(loop, &cfg, &c) != 0)
    TEST_FAIL("client_new: %s", redlock_last_error());
  return c;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_t *c2;
  redlock_lock_t *l;
  redlock_lock_t *w;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  tu_op wop;
  uint64_t t0;
  int slow = tu_slow();
  int i;

  tu_require_tls();
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++)
    srv[i].tls = 1;
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* A stopped master: TLS handshake without an answer. */
  harness_pause(&srv[2]);
  t0 = harness_now_ms();
  c = mk(&loop, srv, -1, slow ? 3000 : 300);
  ASSERT_EQ(redlock_lock_new(c, "stopped", 7, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(op.yes, 2);
  ASSERT_LT(op.cb_ms - t0, slow ? 5000 : 1500);
  /* Its connect deadline passes: it is reported, not waited for. */
  tu_run_for(&loop, slow ? 3500 : 400);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_client_n_up(c), 2);
  harness_resume(&srv[2]);
  tu_wait_up(&loop, c, N, 10000);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(&loop, c);

  /* Killed and restarted: reconnects over TLS, and the restart guard
   * (fixed window 1500 ms) refuses the restarted master's vote. */
  c = mk(&loop, srv, 1500, 3000);
  tu_wait_up(&loop, c, N, 10000);
  ASSERT_EQ(redlock_lock_new(c, "restarted", 9, &l), 0);
  harness_kill(&srv[0]);
  harness_kill(&srv[1]);
  tu_wait_up(&loop, c, 1, 10000);   /* it noticed */
  harness_restart(&srv[0]);
  harness_restart(&srv[1]);
  tu_wait_up(&loop, c, N, 10000);   /* new TLS sessions */
  ASSERT_EQ(tu_acquire(&loop, l, 1000, &once, &op), REDLOCK_ENOQUORUM);
  ASSERT_GE((op.nodes[0].error == REDLOCK_ERESTARTED) +
                (op.nodes[1].error == REDLOCK_ERESTARTED), 1);
  fprintf(stderr, "restarted TLS master: %s\n",
          op.nodes[0].error == REDLOCK_ERESTARTED ? op.errstr[0]
                                                  : op.errstr[1]);
  {
    redlock_acquire_opts wait = {.wait_ms = 10000, .retry_delay_ms = 100,
                                 .retry_jitter_ms = 20};
    ASSERT_EQ(tu_acquire(&loop, l, 1000, &wait, &op), 0);
  }
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);

  /* Wake-up over TLS: subscribers on the same connection layer. */
  c2 = mk(&loop, srv, -1, 3000);
  tu_wait_up(&loop, c2, N, 10000);
  ASSERT_EQ(redlock_lock_new(c, "woken", 5, &l), 0);
  ASSERT_EQ(redlock_lock_new(c2, "woken", 5, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 1400, &once, &op), 0);   /* <= window */
  {
    redlock_acquire_opts wake = {.wait_ms = 20000, .retry_delay_ms = 4000,
                                 .retry_jitter_ms = 1, .wake = 1};
    uint64_t released;
    memset(&wop, 0, sizeof(wop));
    ASSERT_EQ(redlock_lock_acquire(w, 30000, &wake, tu_cb, &wop), 0);
    /* The waiter's first attempt has failed and it listens everywhere. */
    {
      uint64_t end = harness_now_ms() + 10000;
      redlock_stats st;
      for (;;) {
        ASSERT_EQ(redlock_client_stats(c2, &st), 0);
        if (st.taken >= 1)
          break;
        if (harness_now_ms() > end)
          TEST_FAIL("the waiter's first attempt did not end");
        tu_run_for(&loop, 1);
      }
    }
    tu_wait_subscribed(&loop, srv, N, "__redlock__:woken", N, 10000);
    ASSERT_EQ(wop.done, 0);
    released = harness_now_ms();
    ASSERT_EQ(tu_release(&loop, l, &op), 0);
    ASSERT_EQ(harness_run_until(&loop, &wop.done, 10000), 0);
    ASSERT_EQ(wop.status, 0);
    fprintf(stderr, "woken over TLS %llu ms after the release\n",
            (unsigned long long)(wop.cb_ms - released));
    ASSERT_LT(wop.cb_ms - released, slow ? 3000 : 1000);
  }
  ASSERT_EQ(tu_release(&loop, w, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
  tu_close_client(&loop, c2);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
