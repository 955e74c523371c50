/* N=5 with a majority failing:
 *  - three masters hung: acquisition fails within the command timeout
 *    (ENOQUORUM), never hangs;
 *  - three masters down: ETIMEDOUT at the wait deadline, after retries;
 *    every failed attempt released its key on the two live masters. */
#include "tutil.h"

#define N 5

/* Lock commands (SET, EVALSHA) server s has run since it started. */
static long set_calls(const harness_server *s) {
  char buf[8192];
  const char *p;
  long n = 0;
  const char *const names[] = {"cmdstat_set:calls=", "cmdstat_evalsha:calls="};
  int k;
  ASSERT_EQ(harness_cmdf(s, buf, sizeof(buf), "INFO commandstats"), 0);
  for (k = 0; k < 2; k++)
    if ((p = strstr(buf, names[k])) != NULL)
      n += strtol(p + strlen(names[k]), NULL, 10);
  return n;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_client_config cfg = {.command_timeout_ms = 300,
                               .reconnect_min_ms = 20,
                               .reconnect_max_ms = 100};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts wait = {.wait_ms = 600, .retry_count = 100,
                               .retry_delay_ms = 50, .retry_jitter_ms = 20};
  tu_op op;
  const char *key = "majority";
  uint64_t t0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  /* Hung majority. */
  for (i = 0; i < 3; i++)
    harness_pause(&srv[i]);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
  ASSERT_GE(op.cb_ms - t0, 250);           /* it did wait for the deadline */
  ASSERT_LT(op.cb_ms - t0, 300 + 1500);    /* but not much longer */
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_ETIMEDOUT);
  for (i = 0; i < 3; i++)
    harness_resume(&srv[i]);
  tu_wait_up(&loop, c, N, 10000);

  /* Majority down, with retries inside a wait deadline. */
  for (i = 0; i < 3; i++)
    harness_kill(&srv[i]);
  t0 = harness_now_ms();
  /* The wait deadline ends it: ETIMEDOUT (the votes are the last
   * attempt's). */
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &wait, &op), REDLOCK_ETIMEDOUT);
  ASSERT_GT(op.attempts, 1);
  ASSERT_LT(op.cb_ms - t0, 600 + 1500);
  /* The two live masters said yes to every attempt: each failed attempt
   * released its key there (the dead ones lost everything anyway, so
   * they prove nothing). Once every answer is in: */
  tu_drain(&loop, c);
  for (i = 3; i < N; i++) {
    ASSERT_GT(set_calls(&srv[i]), 1);   /* the attempts did set it there */
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);
  }
  for (i = 0; i < 3; i++)
    harness_restart(&srv[i]);
  tu_wait_up(&loop, c, N, 10000);

  /* And it works again. */
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
