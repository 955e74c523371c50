/* Connection failures are reported, never hang:
 *  - a refused port (nothing listens) is an error vote with the reason,
 *    and with N=1 the acquisition fails at once with ENOQUORUM;
 *  - a master SIGKILLed with our command unread (connection reset) fails
 *    the pending command at once with EIO, long before its deadline. */
#include "tutil.h"

int main(void) {
  harness_server srv[2];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_client_config cfg = {.command_timeout_ms = 5000};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config rcfg;
  const char *servers[3];
  char refused[32];
  tu_op op;
  uint64_t t0;
  int rc;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 2);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* Refused: N=3 with one dead port still acquires with 2 of 3. */
  snprintf(refused, sizeof(refused), "127.0.0.1:%d", harness_free_port());
  servers[0] = harness_addr(&srv[0]);
  servers[1] = refused;
  servers[2] = harness_addr(&srv[1]);
  memset(&rcfg, 0, sizeof(rcfg));
  rcfg.servers = servers;
  rcfg.n_servers = 3;
  rcfg.command_timeout_ms = 5000;
  rcfg.connect_timeout_ms = 5000;
  rcfg.restart_guard_ms = -1;
  c = NULL;
  ASSERT_EQ(redlock_client_new(&loop, &rcfg, &c), 0);
  tu_wait_up(&loop, c, 2, 10000);
  ASSERT_EQ(redlock_lock_new(c, "refused", 7, &l), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(op.yes, 2);
  ASSERT_EQ(op.nodes[1].vote, REDLOCK_VOTE_ERR);
  ASSERT_EQ(op.nodes[1].error, REDLOCK_EIO);
  ASSERT_NOT_NULL(strstr(op.errstr[1], "refused"));
  ASSERT_LT(op.cb_ms - t0, 2000);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* N=1 refused: fails at once. */
  rcfg.servers = servers + 1;
  rcfg.n_servers = 1;
  ASSERT_EQ(redlock_client_new(&loop, &rcfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "refused", 7, &l), 0);
  t0 = harness_now_ms();
  rc = tu_acquire(&loop, l, 10000, &once, &op);
  ASSERT_EQ(rc, REDLOCK_ENOQUORUM);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_EIO);
  ASSERT_LT(op.cb_ms - t0, 2000);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* Reset mid-command: the server is stopped with our SET unread, then
   * killed; the kernel answers with RST and the command fails at once. */
  c = tu_client(&loop, srv, 1, &cfg, 1);
  ASSERT_EQ(redlock_lock_new(c, "reset", 5, &l), 0);
  harness_pause(&srv[0]);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &once, tu_cb, &op), 0);
  tu_run_for(&loop, 30);   /* the SET is written, unread by the server */
  ASSERT_EQ(op.done, 0);
  t0 = harness_now_ms();
  harness_kill(&srv[0]);
  if (harness_run_until(&loop, &op.done, 10000) != 0)
    TEST_FAIL("reset did not complete the pending acquire");
  ASSERT_EQ(op.status, REDLOCK_ENOQUORUM);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_EIO);
  ASSERT_LT(op.cb_ms - t0, 2000);          /* not the 5 s deadline */
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
