/* A new client's wait deadline holds while its masters make their first
 * connections (found by redlock-sim, seed 1: a fresh client, one master
 * stopped, a 117 ms wait that took the 250 ms connect timeout).
 *
 * With the restart guard on (the default), a new client's first attempt
 * waits until every master made its first connection, since only then
 * does it know which masters hold the ttl record; that wait was bounded
 * by the connect timeout alone. N = 3: one real master and two black
 * holes (the kernel completes the connection, nothing ever answers), a
 * connect timeout of 10 s, a command timeout of 2 s (so that the wait's
 * hard end, deadline plus a command timeout, cannot stand in for this
 * deadline: that would be at 2.5 s).
 *  a) acquire with a 500 ms wait ends at its deadline (plus the timer
 *     queue's ms), with ETIMEDOUT and no attempt made; its explanation
 *     says what it waited for. Before the fix: after 10 s.
 *  b) without a wait (one attempt), the first connections' wait keeps
 *     its own bound: it is still on when a) ended (then canceled). */
#include <unistd.h>

#include "tutil.h"

static char why[400];

static void explain_cb(redlock_lock_t *lock, int status,
                       const redlock_result *res, void *arg) {
  redlock_result_explain(res, why, sizeof(why));
  tu_cb(lock, status, res, arg);
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_config cfg;
  redlock_client_t *c;
  redlock_lock_t *l, *l1;
  redlock_acquire_opts wait = {.wait_ms = 500};
  redlock_acquire_opts once = {.wait_ms = -1};
  char addr[2][64];
  const char *servers[3];
  int bh[2], port[2], i;
  uint64_t t0, took;
  tu_op op, op1;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  for (i = 0; i < 2; i++) {
    bh[i] = harness_listener(&port[i]);
    snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", port[i]);
  }
  servers[0] = harness_addr(&srv[0]);
  servers[1] = addr[0];
  servers[2] = addr[1];
  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 3;
  cfg.restart_guard_ms = 0;   /* the default: the ttl record's window */
  cfg.connect_timeout_ms = 10000;
  cfg.command_timeout_ms = 2000;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "wait", 4, &l), 0);
  ASSERT_EQ(redlock_lock_new(c, "once", 4, &l1), 0);

  memset(&op, 0, sizeof(op));
  memset(&op1, 0, sizeof(op1));
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &wait, explain_cb, &op), 0);
  ASSERT_EQ(redlock_lock_acquire(l1, 10000, &once, tu_cb, &op1), 0);
  if (harness_run_until(&loop, &op.done, (uint64_t)harness_bound_ms(3000)) !=
      0)
    TEST_FAIL("a 500 ms wait still running after %lld ms",
              (long long)harness_bound_ms(3000));
  took = op.cb_ms - t0;
  fprintf(stderr, "a) %s after %llu ms (%u attempts): %s\n",
          redlock_err_name(op.status), (unsigned long long)took,
          op.attempts, why);
  ASSERT_EQ(op.status, REDLOCK_ETIMEDOUT);
  ASSERT_GE(took, 500);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(1500));
  ASSERT_EQ(op.attempts, 0);
  ASSERT_NOT_NULL(strstr(why, "before the first attempt"));
  ASSERT_NOT_NULL(strstr(why, "first connection"));
  /* b) the one-shot acquisition is still waiting for the black holes. */
  ASSERT_EQ(op1.done, 0);
  ASSERT_EQ(redlock_lock_cancel(l1), 0);
  ASSERT_EQ(harness_run_until(&loop, &op1.done, 5000), 0);
  ASSERT_EQ(op1.status, REDLOCK_ECANCELED);

  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(l1), 0);
  for (i = 0; i < 2; i++)
    close(bh[i]);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
