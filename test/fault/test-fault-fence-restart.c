/* Fencing tokens survive restarts without persistence (issue 15, part 2),
 * N=3, masters without AOF (a restart loses every key, the counter too):
 *  a) every master killed and restarted empty between two holders: the
 *     next token is still higher (the counter starts again from the
 *     master's clock in microseconds; the old code started it at 0 and
 *     handed out 1 after 1,000s);
 *  b) two clients alternate fenced acquisitions for REDLOCK_FENCE_SECONDS
 *     (10; 30 in the slow suite) while, every 100-400 ms, a random
 *     minority is killed and restarted empty: one master, or one and then
 *     another before the next grant (each a minority when it dies, but
 *     together a majority that lost the counter, so the next holder's
 *     quorum may know nothing of the numbers before): tokens strictly
 *     increase across holders. Without the clock initialisation, the
 *     single restarts alone do not break it (the second round raises the
 *     restarted master again at the next grant); the double ones do.
 * The restart guard is off: this is about the numbers, not exclusion. */
#include "tutil.h"

#define N 3

static uint64_t fenced(uv_loop_t *loop, redlock_lock_t *l) {
  redlock_acquire_opts o = {.wait_ms = 5000, .fence = 1};
  tu_op op;
  uint64_t f;
  ASSERT_EQ(tu_acquire(loop, l, 2000, &o, &op), 0);
  f = redlock_lock_fence(l);
  ASSERT_GT(f, 0);
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  return f;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *ca, *cb;
  redlock_client_config cfg = {.command_timeout_ms = 200,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_lock_t *la, *lb;
  uint64_t t1, t2, last, end, next_fault;
  const char *env = getenv("REDLOCK_FENCE_SECONDS");
  long seconds = env != NULL ? atol(env) : 10;
  unsigned grants = 0, restarts = 0, doubles = 0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ca = tu_client(&loop, srv, N, &cfg, N);
  cb = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(ca, "fr", 2, &la), 0);
  ASSERT_EQ(redlock_lock_new(cb, "fr", 2, &lb), 0);

  /* a) */
  t1 = fenced(&loop, la);
  for (i = 0; i < N; i++) {
    harness_kill(&srv[i]);
    harness_restart(&srv[i]);
  }
  tu_wait_up(&loop, ca, N, 10000);
  tu_wait_up(&loop, cb, N, 10000);
  t2 = fenced(&loop, lb);
  fprintf(stderr, "a) token %llu before every master restarted empty, "
          "%llu after\n", (unsigned long long)t1, (unsigned long long)t2);
  ASSERT_GT(t2, t1);

  /* b) */
  last = t2;
  end = harness_now_ms() + (uint64_t)seconds * 1000;
  next_fault = harness_now_ms() + 100;
  while (harness_now_ms() < end) {
    uint64_t t = fenced(&loop, grants % 2 ? la : lb);
    if (t <= last)
      TEST_FAIL("token went back: %llu after %llu (grant %u, %u restarts, "
                "%u double)", (unsigned long long)t,
                (unsigned long long)last, grants, restarts, doubles);
    last = t;
    grants++;
    if (harness_now_ms() >= next_fault) {
      uint64_t r = harness_now_ms();
      int first = (int)(r % N);
      harness_kill(&srv[first]);
      harness_restart(&srv[first]);
      restarts++;
      if ((r / N) % 2 == 0) {   /* and another one, before any grant */
        harness_server *s = &srv[(first + 1 + (int)((r / 7) % (N - 1))) % N];
        harness_kill(s);
        harness_restart(s);
        restarts++;
        doubles++;
      }
      next_fault = harness_now_ms() + 100 + harness_now_ms() % 300;
    }
  }
  fprintf(stderr, "b) %u grants, %u restarts without persistence (%u of "
          "them a second master before the next grant): tokens strictly "
          "increased to %llu\n", grants, restarts, doubles,
          (unsigned long long)last);
  ASSERT_GT(restarts, 10);
  ASSERT_GT(doubles, 3);

  redlock_lock_free(la);
  redlock_lock_free(lb);
  tu_close_client(&loop, ca);
  tu_close(&loop, cb);
  harness_stop_all();
  fprintf(stderr, "ok\n");
  return 0;
}
