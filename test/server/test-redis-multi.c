/* Multi-resource locks: K keys all-or-nothing on each master, extended
 * and released together; an overlapping set is refused and leaves none of
 * its keys behind; bad input is refused. */
#include "tutil.h"

#define N 5

static int count_key(harness_server *srv, const char *key, const char *tok) {
  return tu_count_holding(srv, N, key, tok);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *m, *o, *o2, *single;
  const void *abc[3] = {"ma", "mb", "mc"};
  const size_t len3[3] = {2, 2, 2};
  const void *cd[2] = {"mc", "md"};
  const void *ec[2] = {"me", "mc"};   /* the held key second */
  const size_t len2[2] = {2, 2};
  const void *bad[2] = {"x", NULL};
  const void *many[REDLOCK_MAX_RESOURCES + 1];
  size_t many_len[REDLOCK_MAX_RESOURCES + 1];
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts fenced = {.wait_ms = -1, .fence = 1};
  char tok[80];
  char val[80];
  tu_op op;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);

  /* Bad input. */
  ASSERT_EQ(redlock_lock_new_multi(c, abc, len3, 0, &m), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_lock_new_multi(c, bad, len2, 2, &m), REDLOCK_EINVAL);
  for (i = 0; i <= REDLOCK_MAX_RESOURCES; i++) {
    many[i] = "k";
    many_len[i] = 1;
  }
  ASSERT_EQ(redlock_lock_new_multi(c, many, many_len,
                                   REDLOCK_MAX_RESOURCES + 1, &m),
            REDLOCK_EINVAL);

  ASSERT_EQ(redlock_lock_new_multi(c, abc, len3, 3, &m), 0);
  ASSERT_EQ(redlock_lock_new_multi(c, cd, len2, 2, &o), 0);
  ASSERT_EQ(redlock_lock_new(c, "mb", 2, &single), 0);
  ASSERT_EQ(redlock_lock_acquire(m, 1000, &fenced, tu_cb, &op),
            REDLOCK_EINVAL);

  ASSERT_EQ(tu_acquire(&loop, m, 10000, &once, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(m));
  tu_drain(&loop, c);
  ASSERT_EQ(count_key(srv, "ma", tok), N);
  ASSERT_EQ(count_key(srv, "mb", tok), N);
  ASSERT_EQ(count_key(srv, "mc", tok), N);

  /* Overlapping set: refused, and "md" was set nowhere. */
  ASSERT_EQ(tu_acquire(&loop, o, 10000, &once, &op), REDLOCK_ETAKEN);
  tu_drain(&loop, c);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "md", val, sizeof(val)), 0);
  ASSERT_EQ(tu_acquire(&loop, single, 10000, &once, &op), REDLOCK_ETAKEN);
  /* The same with the held key last: every key is checked, and "mc"
   * keeps its owner. */
  ASSERT_EQ(redlock_lock_new_multi(c, ec, len2, 2, &o2), 0);
  ASSERT_EQ(tu_acquire(&loop, o2, 10000, &once, &op), REDLOCK_ETAKEN);
  tu_drain(&loop, c);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "me", val, sizeof(val)), 0);
  ASSERT_EQ(count_key(srv, "mc", tok), N);
  ASSERT_EQ(redlock_lock_free(o2), 0);

  /* Extend renews all three keys. */
  ASSERT_EQ(tu_extend(&loop, m, 60000, &op), 0);
  ASSERT_GT(harness_pttl(&srv[0], "ma"), 50000);
  ASSERT_GT(harness_pttl(&srv[2], "mc"), 50000);

  /* Release frees all three; the overlapping set then gets its keys. */
  ASSERT_EQ(tu_release(&loop, m, &op), 0);
  tu_drain(&loop, c);
  ASSERT_EQ(count_key(srv, "ma", tok) + count_key(srv, "mb", tok) +
                count_key(srv, "mc", tok),
            0);
  ASSERT_EQ(tu_acquire(&loop, o, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, o, &op), 0);

  /* One key lost on every master: extend fails (all K must be ours). */
  ASSERT_EQ(tu_acquire(&loop, m, 10000, &once, &op), 0);
  tu_drain(&loop, c);
  for (i = 0; i < N; i++)
    harness_cmdf(&srv[i], val, sizeof(val), "DEL mb");
  ASSERT_EQ(tu_extend(&loop, m, 10000, &op), REDLOCK_ENOTHELD);
  ASSERT_EQ(tu_release(&loop, m, &op), 0);   /* ma and mc were ours */
  tu_drain(&loop, c);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  /* With two of five masters hung, all-or-nothing still holds. */
  harness_pause(&srv[0]);
  harness_pause(&srv[1]);
  ASSERT_EQ(tu_acquire(&loop, m, 10000, &once, &op), 0);
  ASSERT_EQ(op.yes, 3);
  /* ETAKEN needs all three live masters' NO: none is still pending. */
  ASSERT_EQ(tu_acquire(&loop, o, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(op.no, 3);
  for (i = 2; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "md", val, sizeof(val)), 0);
  ASSERT_EQ(tu_release(&loop, m, &op), 0);
  harness_resume(&srv[0]);
  harness_resume(&srv[1]);

  ASSERT_EQ(redlock_lock_free(m), 0);
  ASSERT_EQ(redlock_lock_free(o), 0);
  ASSERT_EQ(redlock_lock_free(single), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
