/* Server-side stalls: CLIENT PAUSE WRITE (SET NX blocked, PING fine) and
 * DEBUG SLEEP on a minority: the lock is granted by the others at once;
 * on a majority: it fails within the command timeout. */
#include "tutil.h"

#define N 5

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_client_config cfg = {.command_timeout_ms = 200,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *pause_argv[] = {"CLIENT", "PAUSE", "1500", "WRITE"};
  const char *sleep_argv[] = {"DEBUG", "SLEEP", "1"};
  /* Longer for the majority: each sleep must outlast the wait for the
   * others to start plus the 200 ms command timeout, on a loaded host. */
  const char *sleep3_argv[] = {"DEBUG", "SLEEP", "3"};
  tu_op op;
  int fds[3];
  uint64_t t0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, "stall", 5, &l), 0);

  /* CLIENT PAUSE WRITE on two masters. */
  for (i = 0; i < 2; i++)
    fds[i] = harness_send_ok(&srv[i], 4, pause_argv);   /* in force */
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_LT(op.cb_ms - t0, (uint64_t)harness_bound_ms(150));
  ASSERT_EQ(op.yes, 3);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  for (i = 0; i < 2; i++) {
    char ok[16];
    harness_close_fd(fds[i]);
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok), "CLIENT UNPAUSE"), 0);
  }
  tu_wait_up(&loop, c, N, 10000);

  /* DEBUG SLEEP on one master: excluded, granted by the others. */
  fds[0] = harness_send_nowait(&srv[4], 3, sleep_argv);
  harness_wait_asleep(&srv[4], 5000);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_LT(op.cb_ms - t0, (uint64_t)harness_bound_ms(150));
  ASSERT_EQ(op.nodes[4].vote, REDLOCK_VOTE_NONE);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  harness_close_fd(fds[0]);
  {
    /* Its sleep is over (a command answers only after it), or it would
     * still be asleep in the next case, one more master down. */
    char pong[16];
    ASSERT_EQ(harness_cmdf(&srv[4], pong, sizeof(pong), "PING"), 0);
  }
  tu_wait_up(&loop, c, N, 10000);

  /* DEBUG SLEEP on a majority: no quorum, within the command timeout. */
  for (i = 0; i < 3; i++)
    fds[i] = harness_send_nowait(&srv[i], 3, sleep3_argv);
  for (i = 0; i < 3; i++)
    harness_wait_asleep(&srv[i], 5000);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
  ASSERT_LT(op.cb_ms - t0, 200 + 300);
  for (i = 0; i < N; i++)
    fprintf(stderr, "majority asleep: master %d vote %d %s %s\n", i,
            (int)op.nodes[i].vote, redlock_err_name(op.nodes[i].error),
            op.errstr[i]);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_ETIMEDOUT);
  for (i = 0; i < 3; i++)
    harness_close_fd(fds[i]);
  tu_wait_up(&loop, c, N, 10000);
  tu_run_for(&loop, 50);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);   /* late SETs released */

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
