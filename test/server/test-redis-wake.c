/* Wake-up instead of polling: a waiter with opts.wake subscribes to the
 * key's release channel on every master and takes the lock right after the
 * holder releases it, instead of after its (here 2 s) retry delay. The
 * same wait without wake-up takes the delay. After the acquisition the
 * waiter unsubscribes. */
#include "tutil.h"

#define N 3

static int subscribers(harness_server *s, const char *channel) {
  char buf[64];
  if (harness_cmdf(s, buf, sizeof(buf),
                   "EVAL %s 0 %s",
                   "return redis.call('pubsub','numsub',ARGV[1])[2]",
                   channel) != 0)
    return -1;
  return atoi(buf);
}

static uint64_t handoff(uv_loop_t *loop, harness_server *srv,
                        redlock_lock_t *holder, redlock_lock_t *waiter,
                        int wake, int live) {
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts wait = {.wait_ms = 10000, .retry_count = 100,
                               .retry_delay_ms = 2000, .retry_jitter_ms = -1,
                               .wake = wake};
  tu_op op, wop;
  uint64_t t_rel;
  int i;
  ASSERT_EQ(tu_acquire(loop, holder, 10000, &once, &op), 0);
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(waiter, 10000, &wait, tu_cb, &wop), 0);
  if (wake) {
    /* Bounded wait until the waiter listens on every master. */
    for (i = 0; i < live; i++) {
      uint64_t end = harness_now_ms() + 5000;
      while (subscribers(&srv[i], "__redlock__:wake-key") != 1) {
        if (harness_now_ms() > end)
          TEST_FAIL("no subscriber on master %d (%d; waiter done=%d "
                    "status=%d attempts=%u)",
                    i, subscribers(&srv[i], "__redlock__:wake-key"),
                    wop.done, wop.status, wop.attempts);
        tu_run_for(loop, 2);
      }
    }
  } else {
    tu_run_for(loop, 100);   /* let its first attempt fail */
  }
  ASSERT_EQ(wop.done, 0);
  t_rel = harness_now_ms();
  ASSERT_EQ(tu_release(loop, holder, &op), 0);
  if (harness_run_until(loop, &wop.done, 10000) != 0)
    TEST_FAIL("waiter never got the lock");
  ASSERT_EQ(wop.status, 0);
  ASSERT_EQ(tu_release(loop, waiter, &op), 0);
  return wop.cb_ms - t_rel;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c1, *c2;
  redlock_lock_t *a, *b;
  uint64_t with, without;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c1 = tu_client(&loop, srv, N, NULL, N);
  c2 = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(c1, "wake-key", 8, &a), 0);
  ASSERT_EQ(redlock_lock_new(c2, "wake-key", 8, &b), 0);

  with = handoff(&loop, srv, a, b, 1, N);
  without = handoff(&loop, srv, a, b, 0, N);
  fprintf(stderr, "handoff with wake-up %llu ms, by polling %llu ms\n",
          (unsigned long long)with, (unsigned long long)without);
  ASSERT_LT(with, 500);        /* not the 2 s retry delay */
  ASSERT_GE(without, 1000);    /* the delay, without wake-up */
  /* Unsubscribed once it got the lock. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(subscribers(&srv[i], "__redlock__:wake-key"), 0);

  /* A master killed: the other two still publish and wake the waiter. */
  harness_kill(&srv[2]);
  tu_wait_up(&loop, c1, N - 1, 10000);
  tu_wait_up(&loop, c2, N - 1, 10000);
  with = handoff(&loop, srv, a, b, 1, N - 1);
  fprintf(stderr, "handoff with a master down: %llu ms\n",
          (unsigned long long)with);
  ASSERT_LT(with, 500);

  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  ASSERT_EQ(redlock_client_close(c1, NULL, NULL), 0);
  tu_close(&loop, c2);
  harness_stop_all();
  return 0;
}
