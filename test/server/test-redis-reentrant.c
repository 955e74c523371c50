/* Reentrancy: the owner (the handle) re-acquires what it holds: one more
 * hold, no round trip, same token; another handle is refused (ETAKEN);
 * each release gives back one hold and only the last releases on the
 * masters; auto-extension keeps the lock alive across partial releases,
 * also with a master hung. */
#include "tutil.h"

#define N 3

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *a;
  redlock_lock_t *b;
  redlock_acquire_opts re = {.wait_ms = -1, .reentrant = 1,
                             .auto_extend = 1};
  redlock_acquire_opts once = {.wait_ms = -1, .reentrant = 1};
  char tok[80];
  char val[80];
  tu_op op;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(c, "re", 2, &a), 0);
  ASSERT_EQ(redlock_lock_new(c, "re", 2, &b), 0);

  ASSERT_EQ(redlock_lock_holds(a), 0);
  ASSERT_EQ(tu_acquire(&loop, a, 600, &re, &op), 0);
  ASSERT_EQ(redlock_lock_holds(a), 1);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(a));
  for (i = 0; i < N; i++)
    harness_cmdf(&srv[i], val, sizeof(val), "CONFIG RESETSTAT");

  /* Re-entered twice: no command reaches the masters. */
  ASSERT_EQ(tu_acquire(&loop, a, 600, &re, &op), 0);
  ASSERT_EQ(op.attempts, 0);
  ASSERT_EQ(tu_acquire(&loop, a, 600, &re, &op), 0);
  ASSERT_EQ(redlock_lock_holds(a), 3);
  ASSERT_STR_EQ(redlock_lock_token(a), tok);
  {
    char info[8192];
    ASSERT_EQ(harness_cmdf(&srv[0], info, sizeof(info), "INFO commandstats"),
              0);
    ASSERT_NULL(strstr(info, "cmdstat_set:"));   /* no new SET */
  }

  /* Not reentrant: refused at once; another owner: taken. */
  ASSERT_EQ(redlock_lock_acquire(a, 600, NULL, tu_cb, &op), REDLOCK_EBUSY);
  ASSERT_EQ(tu_acquire(&loop, b, 600, &once, &op), REDLOCK_ETAKEN);

  /* Two releases give back holds; the key stays, extended meanwhile,
   * with one master hung (the other two keep the quorum). */
  harness_pause(&srv[2]);
  ASSERT_EQ(tu_release(&loop, a, &op), 0);
  ASSERT_EQ(tu_release(&loop, a, &op), 0);
  ASSERT_EQ(redlock_lock_holds(a), 1);
  tu_run_for(&loop, 1300);   /* > 2 ttl: only extensions keep it */
  ASSERT(redlock_lock_is_held(a));
  ASSERT_EQ(tu_count_holding(srv, 2, "re", tok), 2);
  harness_resume(&srv[2]);

  /* The last release releases everywhere. */
  ASSERT_EQ(tu_release(&loop, a, &op), 0);
  ASSERT_EQ(redlock_lock_holds(a), 0);
  tu_run_for(&loop, 20);
  ASSERT_EQ(tu_count_holding(srv, N, "re", tok), 0);
  ASSERT_EQ(redlock_lock_release(a, tu_cb, &op), REDLOCK_ENOTHELD);
  ASSERT_EQ(tu_acquire(&loop, b, 600, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, b, &op), 0);

  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
