/* A master that is back is counted at once (issue 14, item 2), N=3:
 *  a) killed (SIGKILL) for 1.5 s while the client keeps trying: every
 *     connect is refused, which costs nothing, so the client keeps trying
 *     every 10-20 ms instead of backing off to seconds; once the master
 *     accepts connections again it is UP within 100 ms;
 *  b) hung (SIGSTOP) for 3 s: its connects time out, and those do back off
 *     (up to reconnect_max_ms, 2 s); once it is resumed, an acquisition
 *     that needs it tries it at once instead of waiting for the backoff
 *     timer: UP within 100 ms of the acquisition;
 *  c) a master that stays hung is not hammered by on-demand attempts:
 *     200 acquisitions over about a second make at most one attempt per
 *     50 ms (each one also lasts its connect deadline);
 *  d) a master slower than the command timeout keeps to its backoff (the
 *     on-demand attempt is for masters that were unreachable, not slow):
 *     test-fault-reconnect-backoff.
 * Each case fails on the old code (exponential backoff for every kind of
 * failure, requests to a DOWN master fail at once). */
#include "tutil.h"

#define N 3

static uint64_t wait_up_ms(uv_loop_t *loop, redlock_client_t *c,
                           uint64_t t0) {
  uint64_t end = t0 + 5000;
  while (redlock_client_n_up(c) < N && harness_now_ms() < end)
    uv_run(loop, UV_RUN_NOWAIT);
  ASSERT_EQ(redlock_client_n_up(c), N);
  return harness_now_ms() - t0;
}

static uint64_t node_attempts(redlock_client_t *c, unsigned i) {
  redlock_stats st;
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  return st.masters[i].timeouts + st.masters[i].conn_failures;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  /* The restart guard is not what this test is about: off. */
  redlock_client_config cfg = {.restart_guard_ms = -1,
                               .connect_timeout_ms = 250,
                               .command_timeout_ms = 200};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_lock_t *l;
  tu_op op;
  uint64_t t0, dt, before;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, "rf", 2, &l), 0);

  /* a) refused connects: keep trying fast. */
  harness_kill(&srv[2]);
  tu_run_for(&loop, 1500);
  ASSERT(redlock_client_n_up(c) == N - 1);
  harness_restart(&srv[2]);   /* returns once it answers PING */
  t0 = harness_now_ms();
  dt = wait_up_ms(&loop, c, t0);
  fprintf(stderr, "a) killed master back: UP after %llu ms\n",
          (unsigned long long)dt);
  ASSERT_LE(dt, harness_bound_ms(100));

  /* b) timeouts back off, but an operation that needs the master tries
   * it at once. */
  harness_pause(&srv[2]);
  ASSERT_EQ(tu_acquire(&loop, l, 5000, &once, &op), 0);   /* 2 of 3 */
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  tu_run_for(&loop, 3000);   /* connects time out: backoff grows */
  ASSERT(redlock_client_n_up(c) == N - 1);
  harness_resume(&srv[2]);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 5000, &once, &op), 0);
  dt = wait_up_ms(&loop, c, t0);
  fprintf(stderr, "b) hung master resumed: UP %llu ms after the "
          "acquisition that needed it\n", (unsigned long long)dt);
  ASSERT_LE(dt, harness_bound_ms(100));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);

  /* c) on-demand attempts are rate limited. */
  harness_pause(&srv[2]);
  tu_run_for(&loop, 600);   /* a timeout or two: down, backing off */
  before = node_attempts(c, 2);
  t0 = harness_now_ms();
  for (i = 0; i < 200; i++) {
    ASSERT_EQ(tu_acquire(&loop, l, 5000, &once, &op), 0);
    ASSERT_EQ(tu_release(&loop, l, &op), 0);
    tu_run_for(&loop, 5);
  }
  dt = harness_now_ms() - t0;
  fprintf(stderr, "c) 200 cycles in %llu ms: %llu attempts on the hung "
          "master\n", (unsigned long long)dt,
          (unsigned long long)(node_attempts(c, 2) - before));
  ASSERT_LE(node_attempts(c, 2) - before, dt / 50 + 2);
  harness_resume(&srv[2]);

  redlock_lock_free(l);
  tu_close(&loop, c);
  harness_stop_all();
  fprintf(stderr, "ok\n");
  return 0;
}
