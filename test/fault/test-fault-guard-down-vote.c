/* A YES waiting for the restart guard's read, from a master that then goes
 * down, must end as an error vote: the acquisition is decided, and the
 * guard does not read the record again and again.
 *
 * N=5 (quorum 3), auto guard. Once the masters count for client A (older
 * than the ttl, one lock taken and released), master 4 holds the resource
 * for someone else, master 5 is stopped (SIGSTOP: its commands hang until
 * the command deadline) and master 3 restarts. A's handshake with the new
 * master 3 starts a read of the ttl record on every master, which waits
 * for master 5 (up to the command deadline). A then acquires with
 * wait_ms 1000: masters 1 and 2 say yes, 4 no, 5 hangs, and 3's yes waits
 * for the read (its votes count only once the record is known). Master 3
 * is then killed for good.
 *
 * Correct: master 3's waiting yes becomes an error (its connection is
 * gone); once master 5's command deadline passes the attempt has 2 yes,
 * 1 no, 2 errors, and the acquisition ends (ETIMEDOUT: its wait deadline
 * passed) soon after. Today it is never decided: the read ends without a
 * verdict for the down master, its vote asks for another read, which
 * ends at once (two masters cannot answer), and so on - the callback
 * never runs, and the live masters receive a flood of GETs. */
#include "tutil.h"

#define N 5

/* GET calls master s has served (INFO commandstats); -1 on error. */
static int64_t get_calls(const harness_server *s) {
  char buf[8192];
  const char *p;
  if (harness_cmdf(s, buf, sizeof(buf), "INFO commandstats") != 0)
    return -1;
  p = strstr(buf, "cmdstat_get:calls=");
  return p == NULL ? 0 : strtoll(p + 18, NULL, 10);
}

int main(void) {
  harness_server srv[N];
  const char *addrs[N];
  uv_loop_t loop;
  redlock_client_t *a;
  redlock_lock_t *x, *y;
  int slow = tu_slow();
  int cmd_timeout = slow ? 2000 : 1000;
  int64_t ttl = slow ? 1000 : 500;
  redlock_client_config cfg = {.command_timeout_ms = cmd_timeout,
                               .connect_timeout_ms = cmd_timeout,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 100};   /* guard: auto */
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts dl = {.wait_ms = 1000, .retry_delay_ms = 50,
                             .retry_jitter_ms = 10};
  tu_op op, yop;
  char val[128];
  char tok[80];
  uint64_t t0, t_up, bound;
  int64_t g0, gets;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  harness_addrs(srv, N, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &a), 0);
  tu_wait_up(&loop, a, N, 10000);
  t_up = harness_now_ms();
  /* Every master's age counts from A's handshake at the latest: after the
   * ttl (+ a margin) their votes count (waiting for time, not an event). */
  tu_run_for(&loop, (uint64_t)ttl + (slow ? 1000 : 500));
  ASSERT_GE(harness_now_ms() - t_up, (uint64_t)ttl);
  ASSERT_EQ(redlock_lock_new(a, "x", 1, &x), 0);
  if (tu_acquire(&loop, x, ttl, &once, &op) != 0)
    TEST_FAIL("setup: the first lock was refused: \"%s\"", op.errstr[0]);
  ASSERT_EQ(tu_release(&loop, x, &op), 0);

  /* Master 4: someone else's lock. Master 5: hangs. Master 3: restarts
   * (A reads the record on every master; the read waits for master 5). */
  ASSERT_EQ(harness_set(&srv[3], "y", "someone-else", 60000), 0);
  harness_pause(&srv[4]);
  harness_kill(&srv[2]);
  tu_wait_up(&loop, a, N - 1, 10000);   /* A saw it go */
  harness_restart(&srv[2]);
  tu_wait_up(&loop, a, N, 10000);       /* and handshook the new one */

  ASSERT_EQ(redlock_lock_new(a, "y", 1, &y), 0);
  memset(&yop, 0, sizeof(yop));
  g0 = get_calls(&srv[0]);
  ASSERT_GE(g0, 0);
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_acquire(y, ttl, &dl, tu_cb, &yop), 0);
  /* Master 3 has set the key (its yes is on its way): let A read it. */
  {
    uint64_t end = harness_now_ms() + 5000;
    for (;;) {
      snprintf(tok, sizeof(tok), "%s", redlock_lock_token(y));
      if (tok[0] != '\0' &&
          harness_get(&srv[2], "y", val, sizeof(val)) == 1 &&
          strcmp(val, tok) == 0)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("setup: the attempt never reached master 3");
      tu_run_for(&loop, 2);
    }
    tu_run_for(&loop, slow ? 200 : 50);
  }
  if (yop.done)
    TEST_FAIL("setup: decided (%s) before master 3 went down: the read "
              "of the record did not wait for master 5",
              redlock_err_name(yop.status));
  /* Master 3 goes down for good, its yes still waiting for the read. */
  harness_kill(&srv[2]);

  /* Decided once master 5's deadline passed (the read and the attempt
   * end then), plus a generous margin. */
  bound = (uint64_t)cmd_timeout + (slow ? 6000 : 3000);
  harness_run_until(&loop, &yop.done, bound);
  gets = get_calls(&srv[0]) - g0;
  fprintf(stderr, "acquire (wait_ms %d): %s after %llu ms; master 1 "
          "served %lld GETs meanwhile\n", dl.wait_ms,
          yop.done ? redlock_err_name(yop.status) : "NOT DECIDED",
          (unsigned long long)(harness_now_ms() - t0), (long long)gets);
  if (!yop.done)
    TEST_FAIL("the acquisition was never decided (%llu ms after it started, "
              "wait_ms %d, command timeout %d ms): master 3's yes waited "
              "for a read forever after it went down (%lld GETs on master "
              "1)", (unsigned long long)(harness_now_ms() - t0),
              dl.wait_ms, cmd_timeout, (long long)gets);
  ASSERT_EQ(yop.calls, 1);
  ASSERT_NE(yop.status, 0);
  ASSERT_NE(yop.nodes[2].vote, REDLOCK_VOTE_YES);
  /* A few reads at most (each new instance, each attempt), not a loop. */
  ASSERT_LT(gets, 50);
  ASSERT_EQ(redlock_lock_is_held(y), 0);

  harness_resume(&srv[4]);
  ASSERT_EQ(redlock_lock_free(y), 0);
  ASSERT_EQ(redlock_lock_free(x), 0);
  tu_close(&loop, a);
  harness_stop_all();
  return 0;
}
