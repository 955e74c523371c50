/* Auto-extension and the lost-lock signal (N=5):
 *  - held for 10x its ttl through extensions, with no gap;
 *  - release during an in-flight extension leaves no key anywhere, and the
 *    extension did reach the masters (before the release);
 *  - one of five restarted empty: still held; with heal the key is back on
 *    that master, without heal it is not;
 *  - a majority restarted empty: lost (ENOTHELD) within one extension
 *    interval, exactly once;
 *  - every master hung: lost (EEXPIRED) when the validity runs out. */
#include "tutil.h"

#define N 5

typedef struct {
  int calls;
  int reason;
  uint64_t at_ms;
  volatile int fired;
} lost_rec;

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  (void)l;
  r->calls++;
  r->reason = reason;
  r->at_ms = harness_now_ms();
  r->fired = 1;
}

static void wait_key(uv_loop_t *loop, harness_server *s, const char *key,
                     const char *token) {
  uint64_t end = harness_now_ms() + 10000;
  while (tu_count_holding(s, 1, key, token) != 1) {
    if (harness_now_ms() > end)
      TEST_FAIL("key not back on the restarted master");
    tu_run_for(loop, 5);
  }
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  uint64_t sent;
  redlock_lock_t *l;
  redlock_client_config cfg = {.command_timeout_ms = 5000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_lost};
  lost_rec lr;
  tu_op op;
  const char *key = "autoextend";
  char tok[80];
  uint64_t t0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  /* 1. Held for 10x the ttl, no gap: the key stays on a quorum. */
  memset(&lr, 0, sizeof(lr));
  ae.lost_arg = &lr;
  ASSERT_EQ(tu_acquire(&loop, l, 300, &ae, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  t0 = harness_now_ms();
  while (harness_now_ms() - t0 < 3000) {
    tu_run_for(&loop, 15);
    ASSERT(redlock_lock_is_held(l));
    ASSERT_GE(tu_count_holding(srv, N, key, tok), N / 2 + 1);
  }
  ASSERT_EQ(lr.calls, 0);

  /* 2. Release while an extension is in flight: every master is hung when
   * the extension goes out, the release queues behind it. */
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 1500, &ae, &op), 0);   /* extends at 500 */
  /* (After the acquire: it also recorded its new longest ttl, once.) */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], tok, sizeof(tok), "CONFIG RESETSTAT"),
              0);
  sent = tu_commands_sent(c);
  for (i = 0; i < N; i++)
    harness_pause(&srv[i]);
  tu_wait_sent(&loop, c, sent + N, 5000);   /* the extension is in flight */
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_release(l, tu_cb, &op), 0);
  for (i = 0; i < N; i++)
    harness_resume(&srv[i]);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  ASSERT_EQ(op.status, 0);
  /* Every master has run the release (the decision waited for a
   * quorum only). */
  {
    uint64_t end = harness_now_ms() + 10000;
    for (i = 0; i < N; i++)
      while (harness_dbsize(&srv[i]) != 0 || tu_evalsha_calls(&srv[i]) < 2) {
        if (harness_now_ms() > end)
          TEST_FAIL("master %d has not run the release", i);
        tu_run_for(&loop, 1);
      }
  }
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);
    ASSERT_EQ(tu_evalsha_calls(&srv[i]), 2);   /* extend, then release */
  }
  ASSERT_EQ(lr.calls, 0);   /* never after release */

  /* 3. One master restarted empty: still held; heal puts the key back. */
  ae.heal = 1;
  ASSERT_EQ(tu_acquire(&loop, l, 900, &ae, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  harness_kill(&srv[0]);
  harness_restart(&srv[0]);
  ASSERT_EQ(tu_count_holding(srv, 1, key, tok), 0);
  wait_key(&loop, &srv[0], key, tok);
  ASSERT(redlock_lock_is_held(l));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  /* Without heal the restarted master stays empty (two intervals). */
  ae.heal = 0;
  ASSERT_EQ(tu_acquire(&loop, l, 900, &ae, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));
  wait_key(&loop, &srv[0], key, tok);   /* the SET landed there too */
  harness_kill(&srv[0]);
  harness_restart(&srv[0]);
  tu_wait_up(&loop, c, N, 10000);
  tu_run_for(&loop, 650);
  ASSERT(redlock_lock_is_held(l));
  ASSERT_EQ(tu_count_holding(srv, 1, key, tok), 0);
  ASSERT_EQ(tu_count_holding(srv + 1, N - 1, key, tok), N - 1);
  ASSERT_EQ(lr.calls, 0);

  /* 4. A majority restarted empty: lost at the next extension. */
  for (i = 0; i < 3; i++)
    harness_kill(&srv[i]);
  for (i = 0; i < 3; i++)
    harness_restart(&srv[i]);
  t0 = harness_now_ms();
  ASSERT_EQ(harness_run_until(&loop, &lr.fired, 5000), 0);
  ASSERT_EQ(lr.reason, REDLOCK_ENOTHELD);
  ASSERT_LE(lr.at_ms - t0, 300 + 400);    /* one interval (+ reconnect) */
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  ASSERT(redlock_lock_is_lost(l));
  tu_run_for(&loop, 700);
  ASSERT_EQ(lr.calls, 1);                 /* exactly once */
  ASSERT_EQ(tu_release(&loop, l, &op), REDLOCK_ENOTHELD);
  tu_wait_up(&loop, c, N, 10000);

  /* 5. Every master hung: the extensions time out, the validity runs out,
   * the lock is lost with EEXPIRED. */
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  cfg.command_timeout_ms = 100;
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  memset(&lr, 0, sizeof(lr));
  ASSERT_EQ(tu_acquire(&loop, l, 900, &ae, &op), 0);
  t0 = harness_now_ms();
  for (i = 0; i < N; i++)
    harness_pause(&srv[i]);
  ASSERT_EQ(harness_run_until(&loop, &lr.fired, 5000), 0);
  ASSERT_EQ(lr.reason, REDLOCK_EEXPIRED);
  ASSERT_GE(lr.at_ms - t0, 800);          /* not before the validity ends */
  ASSERT_LE(lr.at_ms - t0, 900 + 600);
  for (i = 0; i < N; i++)
    harness_resume(&srv[i]);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
