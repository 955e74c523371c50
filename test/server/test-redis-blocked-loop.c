/* A loop that does not run for longer than the command timeout does not
 * fail requests whose replies came meanwhile, nor requests that were not
 * even written yet.
 *
 * An application that runs its loop only now and then, or stops running
 * it for a while (a long computation between two uv_run calls, a
 * debugger), comes back to a deadline that is due: libuv runs timers first
 * in an iteration, before it polls for I/O and before the flush writes
 * what was submitted. The node must not count the time before the write,
 * and must read the socket before it declares a master late. The old code
 * tore the connection down ("no reply within 100 ms") in both cases.
 *
 * N=1, command timeout 100 ms (harness_bound_ms); the test does not run the
 * loop for four timeouts
 * (the fault under test, not a synchronisation: nothing is waited for):
 *  a) after the SET went out (its reply arrives meanwhile);
 *  b) after the acquisition was submitted, before the SET went out.
 * Both acquisitions must succeed, with no deadline teardown. */
#include "tutil.h"

static int64_t timeout_ms;   /* the command timeout */

/* Four command timeouts without running the loop. */
static void stall(void) {
  uint64_t end = harness_now_ms() + (uint64_t)(4 * timeout_ms);
  while (harness_now_ms() < end)
    ;
}

static void one_case(uv_loop_t *loop, harness_server *s, redlock_client_t *c,
                     int flushed_first, const char *label) {
  redlock_acquire_opts one = {.wait_ms = -1};
  redlock_lock_t *l;
  redlock_stats st;
  uint64_t before;
  tu_op op;
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  before = st.masters[0].timeouts;
  ASSERT_EQ(redlock_lock_new(c, "blocked", 7, &l), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &one, tu_cb, &op), 0);
  if (flushed_first) {
    /* The master holds its reply for two timeouts (it comes during the
     * stall, not in the poll right after the flush, which a slow client
     * under valgrind would otherwise reach only after the reply). */
    char ms[32];
    const char *pause[] = {"CLIENT", "PAUSE", ms, "ALL"};
    snprintf(ms, sizeof(ms), "%lld", (long long)(2 * timeout_ms));
    close(harness_send_ok(s, 4, pause));
    uv_run(loop, UV_RUN_NOWAIT);   /* the flush writes the SET */
    ASSERT_EQ(op.done, 0);
  }
  stall();
  ASSERT_EQ(harness_run_until(loop, &op.done, 10000), 0);
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  fprintf(stderr, "%s: %s (%s); deadline teardowns %llu\n", label,
          redlock_err_name(op.status), op.errstr[0],
          (unsigned long long)(st.masters[0].timeouts - before));
  ASSERT_EQ(op.status, 0);
  ASSERT_EQ(st.masters[0].timeouts, before);
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg = {.command_timeout_ms = 100};

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  timeout_ms = harness_bound_ms(100);
  cfg.command_timeout_ms = (int)timeout_ms;
  c = tu_client(&loop, srv, 1, &cfg, 1);
  one_case(&loop, &srv[0], c, 1, "a) the loop stalled after the SET went out");
  one_case(&loop, &srv[0], c, 0, "b) the loop stalled before the SET went out");
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
