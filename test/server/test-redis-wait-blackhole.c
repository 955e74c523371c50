/* The wait deadline bounds the attempt in flight too (issue 29, item 4:
 * "the wait deadline is checked only between attempts"). N = 3: one real
 * master and two black holes (listening sockets nobody accepts from: the
 * kernel completes the connection, nothing ever answers), a connect
 * timeout of 10 s.
 *  a) acquire with a 3 s wait ends at its deadline, plus at most a
 *     command timeout, with ETIMEDOUT, the black holes' votes failed as
 *     not connected; not when their handshakes time out (10 s: a request
 *     queued behind a handshake was bounded by the connect deadline
 *     alone, and the deadline was looked at only between attempts).
 *  b) Without a wait (one attempt) the request keeps its own bound, the
 *     connect plus the command timeout: no wait's bound is applied to it
 *     (a one-shot acquire is not cut short). a) and b) run at once in one
 *     client: b) is still pending when a) ended (then it is canceled:
 *     10 s would make the test slow). */
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tutil.h"

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_config cfg;
  redlock_client_t *c;
  redlock_lock_t *l, *l1;
  redlock_acquire_opts wait = {.wait_ms = 3000};
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
  cfg.restart_guard_ms = -1;
  cfg.connect_timeout_ms = 10000;
  /* 1 s: the wait's hard end (deadline plus a command timeout, 4 s)
   * cannot stand in for the requests' own bound (the deadline, 3 s). */
  cfg.command_timeout_ms = 1000;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "wait", 4, &l), 0);
  ASSERT_EQ(redlock_lock_new(c, "once", 4, &l1), 0);

  memset(&op, 0, sizeof(op));
  memset(&op1, 0, sizeof(op1));
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &wait, tu_cb, &op), 0);
  ASSERT_EQ(redlock_lock_acquire(l1, 10000, &once, tu_cb, &op1), 0);
  if (harness_run_until(&loop, &op.done, (uint64_t)harness_bound_ms(6000)) !=
      0)
    TEST_FAIL("a 3 s wait still running after %lld ms",
              (long long)harness_bound_ms(6000));
  took = op.cb_ms - t0;
  fprintf(stderr, "a) %s after %llu ms (%u attempts): %s | %s\n",
          redlock_err_name(op.status), (unsigned long long)took,
          op.attempts, op.errstr[1], op.errstr[2]);
  ASSERT_EQ(op.status, REDLOCK_ETIMEDOUT);
  ASSERT_GE(took, 3000);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(3500));
  /* Both black holes' requests are due at the wait's deadline, and so is
   * the wait: whichever timer runs first decides, so a black hole's vote
   * is either failed as not connected or not in yet (NONE). What fails
   * the old code is the time taken (the 10 s connect timeout). */
  for (i = 1; i < 3; i++) {
    if (op.nodes[i].vote == REDLOCK_VOTE_NONE)
      continue;
    ASSERT_EQ(op.nodes[i].vote, REDLOCK_VOTE_ERR);
    ASSERT_NOT_NULL(strstr(op.errstr[i], "not connected within"));
  }
  /* b) the one-shot acquisition queued at the same time is still on. */
  ASSERT_EQ(op1.done, 0);
  ASSERT_EQ(redlock_lock_cancel(l1), 0);
  ASSERT_EQ(harness_run_until(&loop, &op1.done, 5000), 0);
  ASSERT_EQ(op1.status, REDLOCK_ECANCELED);

  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(l1), 0);
  /* Closing the listeners resets the connections in their backlog: the
   * client's close then need not wait for the 10 s connect timeout. */
  for (i = 0; i < 2; i++)
    close(bh[i]);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
