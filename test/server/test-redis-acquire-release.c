/* N=1 and N=5: acquire sets our token on every master, a second handle is
 * refused with ETAKEN while it is held, release removes it everywhere, and
 * the second handle can then acquire. */
#include "tutil.h"

static void run(int n) {
  harness_server srv[5];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *a;
  redlock_lock_t *b;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  char key[64];
  char tok_a[64];
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, n);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, n, NULL, (unsigned)n);
  ASSERT_EQ(redlock_client_n_servers(c), n);
  ASSERT_EQ(redlock_client_quorum(c), n / 2 + 1);

  snprintf(key, sizeof(key), "res-%d", n);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &a), 0);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &b), 0);
  ASSERT_EQ(redlock_lock_is_held(a), 0);
  ASSERT_EQ(redlock_lock_validity_ms(a), 0);

  ASSERT_EQ(tu_acquire(&loop, a, 10000, NULL, &op), 0);
  ASSERT_GE(op.yes, n / 2 + 1);
  ASSERT_EQ(op.attempts, 1);
  ASSERT(redlock_lock_is_held(a));
  ASSERT_GT(redlock_lock_validity_ms(a), 0);
  ASSERT_LE(redlock_lock_validity_ms(a), 10000 - 100 - 2);  /* drift */
  snprintf(tok_a, sizeof(tok_a), "%s", redlock_lock_token(a));
  ASSERT_GE(strlen(tok_a), 32);    /* >= 16 random bytes in hex */
  /* The token is set on a quorum at once and on all masters soon. */
  ASSERT_GE(tu_count_holding(srv, n, key, tok_a), n / 2 + 1);
  for (i = 0; i < n; i++) {
    int64_t pttl = harness_pttl(&srv[i], key);
    if (pttl >= 0) {
      ASSERT_GT(pttl, 9000);
      ASSERT_LE(pttl, 10000);
    }
  }

  /* Contend: the other handle is refused, and leaves nothing behind. */
  ASSERT_EQ(tu_acquire(&loop, b, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(redlock_lock_is_held(b), 0);
  ASSERT_GE(op.no, 1);
  ASSERT_NE(strcmp(redlock_lock_token(b), tok_a), 0);
  /* Releasing a handle that never held anything is refused at once. */
  ASSERT_EQ(redlock_lock_release(b, tu_cb, &op), REDLOCK_ENOTHELD);
  ASSERT_GT(strlen(redlock_last_error()), 0);
  /* Acquiring a held handle again is refused at once. */
  ASSERT_EQ(redlock_lock_acquire(a, 1000, NULL, tu_cb, &op), REDLOCK_EBUSY);

  ASSERT_EQ(tu_release(&loop, a, &op), 0);
  ASSERT_EQ(redlock_lock_is_held(a), 0);
  /* A quorum confirmed; wait for the rest to answer too. */
  tu_drain(&loop, c);
  ASSERT_EQ(tu_count_holding(srv, n, key, tok_a), 0);
  for (i = 0; i < n; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  ASSERT_EQ(tu_acquire(&loop, b, 5000, &once, &op), 0);
  ASSERT_GE(tu_count_holding(srv, n, key, redlock_lock_token(b)),
            n / 2 + 1);
  ASSERT_EQ(tu_release(&loop, b, &op), 0);
  /* Re-acquiring a released handle works and uses a fresh token. */
  ASSERT_EQ(tu_acquire(&loop, a, 5000, &once, &op), 0);
  ASSERT_NE(strcmp(redlock_lock_token(a), tok_a), 0);
  ASSERT_EQ(tu_release(&loop, a, &op), 0);

  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  tu_close(&loop, c);
  harness_stop_all();
}

int main(void) {
  run(1);
  run(5);
  return 0;
}
