/* A reentrant re-acquire with a new ttl applies that ttl. A handle holding
 * with ttl 1000 ms is re-acquired (opts.reentrant) with ttl 10000 ms: the
 * caller asks for the lock for 10 s from now, so the new ttl must be put
 * on the masters (an extend round trip) and the validity renewed. Today
 * the ttl is ignored: the hold is counted locally and the lock still
 * expires after the first second. N = 3. Then the two holds are given
 * back: the first release keeps the key, the last one removes it. */
#include "tutil.h"

#define N 3

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts re = {.wait_ms = -1, .reentrant = 1};
  const char *key = "reentrant-ttl";
  int64_t pttl[N];
  int64_t v;
  tu_op op;
  char tok[80];
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  ASSERT_EQ(tu_acquire(&loop, l, 1000, &re, &op), 0);
  ASSERT_EQ(redlock_lock_holds(l), 1);
  ASSERT_LE(redlock_lock_validity_ms(l), 1000);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));

  /* Re-entered with a ten times longer ttl. */
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &re, &op), 0);
  v = redlock_lock_validity_ms(l);
  for (i = 0; i < N; i++)
    pttl[i] = harness_pttl(&srv[i], key);
  fprintf(stderr, "re-acquired with ttl 10000: validity_ms %" PRId64
          " (result %" PRId64 "), pttl on the masters %" PRId64 " %" PRId64
          " %" PRId64 "\n", v, op.validity_ms, pttl[0], pttl[1], pttl[2]);
  ASSERT_EQ(redlock_lock_holds(l), 2);
  ASSERT_STR_EQ(redlock_lock_token(l), tok);   /* same owner, same token */
  ASSERT_GT(v, 5000);
  ASSERT_GT(op.validity_ms, 5000);
  for (i = 0; i < N; i++)
    ASSERT_GT(pttl[i], 5000);

  /* Still held after the first ttl would have run out. */
  tu_run_for(&loop, 1200);
  ASSERT(redlock_lock_is_held(l));
  ASSERT_EQ(tu_count_holding(srv, N, key, tok), N);

  /* Two holds given back: the last one releases on the masters. */
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_holds(l), 1);
  ASSERT_EQ(tu_count_holding(srv, N, key, tok), N);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_holds(l), 0);
  tu_run_for(&loop, 20);
  ASSERT_EQ(tu_count_holding(srv, N, key, tok), 0);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
