/* A key held by another token on 3 of 5 masters -> ETAKEN, and our
 * partial SETs on the other two are released (nothing left behind). With
 * retries the result is still ETAKEN after every attempt. */
#include "tutil.h"

#define N 5

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts retry = {.retry_count = 3, .retry_delay_ms = 10,
                                .retry_jitter_ms = 5};
  tu_op op;
  const char *key = "taken";
  char val[64];
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  for (i = 0; i < 3; i++)
    ASSERT_EQ(harness_set(&srv[i], key, "other-owner", 60000), 0);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_GE(op.no, 3);
  ASSERT_EQ(op.attempts, 1);
  ASSERT_EQ(redlock_lock_is_held(l), 0);

  ASSERT_EQ(tu_acquire(&loop, l, 10000, &retry, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(op.attempts, 4);

  tu_run_for(&loop, 50);
  for (i = 0; i < 3; i++) {
    ASSERT_EQ(harness_get(&srv[i], key, val, sizeof(val)), 1);
    ASSERT_STR_EQ(val, "other-owner");
  }
  for (i = 3; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
