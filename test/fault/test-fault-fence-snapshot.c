/* Fencing tokens survive counters that come back old (issue 20, item 2).
 *
 * Debian's redis.conf saves RDB snapshots: a master restarted from its
 * snapshot has the fencing counter, but an old value of it. The script
 * must not trust the value it finds: it raises the counter to the
 * master's clock in microseconds before every increment, so a rolled-back
 * counter starts again above every number handed out since.
 *
 * N=3 masters without AOF; the restart guard is off (this is about the
 * numbers, not exclusion).
 *  a) one holder, SAVE on every master, three more holders, then every
 *     master killed and restarted from its snapshot: the fifth token is
 *     above the fourth (the old code handed out the snapshot's value + 1);
 *  b) one failure at a time: M3 hangs for the whole case (quorums are
 *     M1+M2), SAVE on M1 and M2, three holders, M1 restarted from its
 *     snapshot, later M2 from its own (each a minority when it happens),
 *     with no grant in between: the next token is still above the last. */
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

static void save(harness_server *s) {
  char ok[64];
  ASSERT_EQ(harness_cmdf(s, ok, sizeof(ok), "SAVE"), 0);
  ASSERT_STR_EQ(ok, "OK");
}

/* The counter on master s (0 if none). */
static uint64_t counter(harness_server *s, const char *key) {
  char val[64];
  return harness_get(s, key, val, sizeof(val)) == 1
             ? strtoull(val, NULL, 10) : 0;
}

static void restore(uv_loop_t *loop, redlock_client_t *c, harness_server *s,
                    unsigned up) {
  harness_kill(s);
  harness_restart(s);   /* loads dump.rdb from its dir */
  tu_wait_up(loop, c, up, 10000);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg = {.command_timeout_ms = 500,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_lock_t *l;
  uint64_t t[6], before, last, next, snap0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, "fs", 2, &l), 0);

  /* a) */
  t[1] = fenced(&loop, l);
  /* Master 0's own counter then (the token is the largest of a quorum's:
   * another master's clock may have been a little ahead). */
  snap0 = counter(&srv[0], "fs:fence");
  for (i = 0; i < N; i++)
    save(&srv[i]);
  for (i = 2; i <= 4; i++)
    t[i] = fenced(&loop, l);
  for (i = 0; i < N; i++) {
    harness_kill(&srv[i]);
    harness_restart(&srv[i]);
  }
  /* The snapshots did bring the counters back, old. */
  ASSERT_EQ(counter(&srv[0], "fs:fence"), snap0);
  ASSERT_LT(counter(&srv[0], "fs:fence"), t[4]);
  tu_wait_up(&loop, c, N, 10000);
  t[5] = fenced(&loop, l);
  fprintf(stderr, "a) tokens %llu %llu %llu %llu, every master restored "
          "from a snapshot taken after the first, then %llu\n",
          (unsigned long long)t[1], (unsigned long long)t[2],
          (unsigned long long)t[3], (unsigned long long)t[4],
          (unsigned long long)t[5]);
  for (i = 2; i <= 4; i++)
    ASSERT_GT(t[i], t[i - 1]);
  if (t[5] <= t[4])
    TEST_FAIL("a) token went back after the restore: %llu after %llu",
              (unsigned long long)t[5], (unsigned long long)t[4]);

  /* b) */
  harness_pause(&srv[2]);
  save(&srv[0]);
  save(&srv[1]);
  before = fenced(&loop, l);
  last = before;
  for (i = 0; i < 3; i++) {
    next = fenced(&loop, l);
    ASSERT_GT(next, last);
    last = next;
  }
  restore(&loop, c, &srv[0], 2);
  restore(&loop, c, &srv[1], 2);
  ASSERT_LT(counter(&srv[0], "fs:fence"), last);
  ASSERT_LT(counter(&srv[1], "fs:fence"), last);
  next = fenced(&loop, l);
  fprintf(stderr, "b) M1, then M2 restored from their snapshots (M3 hung): "
          "token %llu after %llu\n", (unsigned long long)next,
          (unsigned long long)last);
  if (next <= last)
    TEST_FAIL("b) token went back after one-at-a-time restores: %llu "
              "after %llu", (unsigned long long)next,
              (unsigned long long)last);
  harness_resume(&srv[2]);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
