/* Own stale keys never block this client (issue 14, item 1), N=3:
 *
 * An attempt fails because two masters are hung (SIGSTOP): its SETs time
 * out there. When they are resumed, keys with that attempt's token can
 * still appear on them after the client's releases (a SET that lands
 * late); the test plants them there itself, after the releases, so the
 * case is exact. No other client exists:
 *  a) the next single attempt of the same handle takes its own stale keys
 *     over (compare-and-set from the given-up token): granted, and the
 *     keys now hold the new token;
 *  b) a key of someone else on those masters is not taken over: ETAKEN;
 *  c) another handle of the same client takes the stale keys over too;
 *  d) with every master answering, the acquisition stays a plain SET NX
 *     (no script call on the masters). */
#include "tutil.h"

#define N 3

/* A failed attempt of l (masters 1 and 2 hung), then the masters back
 * with that attempt's keys on them: returns the given-up token. */
static void leave_stale_keys(uv_loop_t *loop, redlock_client_t *c,
                             harness_server *srv, redlock_lock_t *l,
                             char *tok, size_t toklen) {
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  int i;
  harness_pause(&srv[1]);
  harness_pause(&srv[2]);
  ASSERT_EQ(tu_acquire(loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
  snprintf(tok, toklen, "%s", redlock_lock_token(l));
  ASSERT_EQ(strlen(tok), 40);
  harness_resume(&srv[1]);
  harness_resume(&srv[2]);
  tu_wait_up(loop, c, N, 5000);
  tu_run_for(loop, 200);   /* the kept releases went out */
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "so", tok, 10000), 0);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg = {.command_timeout_ms = 100};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_lock_t *l, *l2;
  tu_op op;
  char old[64];
  int64_t calls0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, "so", 2, &l), 0);

  /* a) */
  leave_stale_keys(&loop, c, srv, l, old, sizeof(old));
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  tu_run_for(&loop, 50);   /* decided at quorum: the third answers */
  ASSERT_EQ(tu_count_holding(srv, N, "so", redlock_lock_token(l)), N);
  ASSERT(strcmp(redlock_lock_token(l), old) != 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  fprintf(stderr, "a) own stale keys on 2 of 3 masters: taken over\n");

  /* b) */
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "so", "someone-else", 10000), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ETAKEN);
  for (i = 1; i < N; i++) {
    char val[64];
    ASSERT_EQ(harness_get(&srv[i], "so", val, sizeof(val)), 1);
    ASSERT_STR_EQ(val, "someone-else");
    ASSERT_EQ(harness_cmdf(&srv[i], val, sizeof(val), "DEL so"), 0);
  }
  fprintf(stderr, "b) someone else's keys: ETAKEN, untouched\n");

  /* c) */
  leave_stale_keys(&loop, c, srv, l, old, sizeof(old));
  ASSERT_EQ(redlock_lock_new(c, "so", 2, &l2), 0);
  ASSERT_EQ(tu_acquire(&loop, l2, 10000, &once, &op), 0);
  tu_run_for(&loop, 50);
  ASSERT_EQ(tu_count_holding(srv, N, "so", redlock_lock_token(l2)), N);
  ASSERT_EQ(tu_release(&loop, l2, &op), 0);
  redlock_lock_free(l2);
  fprintf(stderr, "c) another handle of the client: taken over\n");

  /* d) a clean cycle on another key: plain SET NX, no script. */
  {
    redlock_lock_t *l3;
    ASSERT_EQ(redlock_lock_new(c, "so-clean", 8, &l3), 0);
    ASSERT_EQ(tu_acquire(&loop, l3, 10000, &once, &op), 0);
    ASSERT_EQ(tu_release(&loop, l3, &op), 0);
    calls0 = tu_evalsha_calls(&srv[0]);
    ASSERT_EQ(tu_acquire(&loop, l3, 10000, &once, &op), 0);
    ASSERT_EQ(tu_evalsha_calls(&srv[0]), calls0);   /* SET NX only */
    ASSERT_EQ(tu_release(&loop, l3, &op), 0);
    redlock_lock_free(l3);
  }
  fprintf(stderr, "d) clean cycles stay SET NX\n");

  redlock_lock_free(l);
  tu_close(&loop, c);
  harness_stop_all();
  fprintf(stderr, "ok\n");
  return 0;
}
