/* Release and extend act only on our own token: another owner's key is
 * never deleted or extended. A lock whose key was replaced on a majority
 * reports ENOTHELD and counts as lost. */
#include "tutil.h"

#define N 5

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  tu_op op;
  const char *key = "owner-safety";
  char val[64];
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, NULL, &op), 0);
  tu_drain(&loop, c);
  ASSERT_EQ(tu_count_holding(srv, N, key, redlock_lock_token(l)), N);

  /* Another owner takes the key over on all masters (as if ours expired
   * and someone else acquired it). */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], key, "someone-else", 60000), 0);

  ASSERT_EQ(tu_extend(&loop, l, 10000, &op), REDLOCK_ENOTHELD);
  ASSERT_GE(op.no, N - N / 2);
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  /* The other owner's keys keep their ttl: extend did not touch them. */
  for (i = 0; i < N; i++)
    ASSERT_GT(harness_pttl(&srv[i], key), 50000);

  /* Release of the lost lock deletes nothing of theirs. */
  ASSERT_EQ(tu_release(&loop, l, &op), REDLOCK_ENOTHELD);
  tu_drain(&loop, c);
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_get(&srv[i], key, val, sizeof(val)), 1);
    ASSERT_STR_EQ(val, "someone-else");
  }
  /* And extend of a released handle is refused at once. */
  ASSERT_EQ(redlock_lock_extend(l, 1000, tu_cb, &op), REDLOCK_ENOTHELD);

  /* Mixed: ours on 3, theirs on 2 -> release deletes exactly ours. */
  for (i = 0; i < N; i++)
    harness_cmdf(&srv[i], val, sizeof(val), "DEL %s", key);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, NULL, &op), 0);
  tu_drain(&loop, c);
  for (i = 3; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], key, "theirs", 60000), 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  tu_drain(&loop, c);
  for (i = 0; i < 3; i++)
    ASSERT_EQ(harness_get(&srv[i], key, val, sizeof(val)), 0);
  for (i = 3; i < N; i++) {
    ASSERT_EQ(harness_get(&srv[i], key, val, sizeof(val)), 1);
    ASSERT_STR_EQ(val, "theirs");
  }

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
