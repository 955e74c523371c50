/* A read-write lock's hold must survive its keys moving to a master whose
 * wall clock differs (found by redlock-sim: seed 1882981962625882 of
 * --topology mixed --workload rw --faults all, a cluster slot migrating
 * to a primary whose clock had stepped 6.3 s ahead).
 *
 * Redis moves a key with the time it has left (MIGRATE, DUMP/RESTORE,
 * a cluster's resharding and replication do the same), so a plain lock's
 * key keeps its meaning on any master. The read-write hash's fields held
 * absolute expiries in the clock of the master that wrote them: on a
 * master whose clock runs ahead, a live reader's field read as expired,
 * the next script purged it, admitted a writer and took down the marker
 * that keeps plain locks out. The scripts now measure the fields against
 * the hash's own ttl (which moves with it), not against the clock of the
 * master they run on.
 *
 * M1 runs with its true clock, M2 under the clock shim 6 s ahead (stepped
 * before any key reached it: a step before the data arrives loses
 * nothing, and no guard refuses it). A reader takes "job" (ttl 4 s) on
 * M1; its keys ("job", the marker, and "job:rw") migrate to M2. Then on
 * M2, while the reader is still valid: a writer and a plain lock must be
 * refused, and the marker must still be there with the reader's time
 * left. Once that time has passed, the writer gets the name (the hold is
 * not stuck either). */
#include "tutil.h"

#define AHEAD 6000   /* ms: M2's clock */
#define TTL 4000     /* ms: the reader's ttl, < AHEAD */

static harness_server srv[2];

static int job_gone(void *arg) {
  (void)arg;
  return harness_pttl(&srv[1], "job") == -2 &&
         harness_pttl(&srv[1], "job:rw") == -2;
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_lock_t *r, *w, *p;
  redlock_acquire_opts one = {.wait_ms = -1};
  char buf[256];
  uint64_t t_r;
  int64_t left;
  tu_op op;
  int st;
  if (!harness_clock_available()) {
    fprintf(stderr, "the clock shim is not built: failing\n");
    return 1;
  }
  harness_clock_prepare(&srv[1]);
  harness_start(srv, 2);
  harness_clock_step(&srv[1], AHEAD);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  a = tu_client(&loop, &srv[0], 1, NULL, 1);
  ASSERT_EQ(redlock_rwlock_new(a, "job", 3, REDLOCK_READ, &r), 0);
  ASSERT_EQ(tu_acquire(&loop, r, TTL, &one, &op), 0);
  t_r = harness_now_ms();
  snprintf(buf, sizeof(buf), "%d", srv[1].port);
  {
    const char *argv[] = {"MIGRATE", "127.0.0.1", buf, "", "0", "5000",
                          "KEYS", "job", "job:rw"};
    char rep[128];
    ASSERT_EQ(harness_cmd(&srv[0], rep, sizeof(rep), 9, argv, NULL), 0);
    fprintf(stderr, "MIGRATE: %s\n", rep);
    ASSERT_STR_EQ(rep, "OK");
  }
  ASSERT(harness_pttl(&srv[1], "job") > 0);

  b = tu_client(&loop, &srv[1], 1, NULL, 1);
  ASSERT_EQ(redlock_rwlock_new(b, "job", 3, REDLOCK_WRITE, &w), 0);
  st = tu_acquire(&loop, w, TTL, &one, &op);
  left = (int64_t)TTL - (int64_t)(harness_now_ms() - t_r);
  fprintf(stderr, "writer on M2, the reader's time left %lld ms: %s\n",
          (long long)left, redlock_err_name(st));
  if (left <= 0)
    TEST_FAIL("too slow: the reader expired before the writer's decision "
              "(the refusal would prove nothing)");
  if (st == 0)
    TEST_FAIL("writer granted on M2 while the reader holds \"job\" (%lld "
              "ms left): its field read as expired in M2's clock",
              (long long)left);
  ASSERT_EQ(st, REDLOCK_ETAKEN);
  ASSERT(harness_pttl(&srv[1], "job") > 0);   /* the marker stays */
  ASSERT_EQ(redlock_lock_new(b, "job", 3, &p), 0);
  st = tu_acquire(&loop, p, TTL, &one, &op);
  left = (int64_t)TTL - (int64_t)(harness_now_ms() - t_r);
  if (st == 0 && left > 0)
    TEST_FAIL("plain lock granted on M2 while the reader holds \"job\"");
  if (left > 0)
    ASSERT_EQ(st, REDLOCK_ETAKEN);

  /* The reader's time runs out on M2 (its keys' ttls, moved with them):
   * the name is free again. */
  if (harness_wait_for(job_gone, NULL, harness_bound_ms(TTL + 10000)) != 0)
    TEST_FAIL("the reader's keys outlived its ttl on M2");
  ASSERT_EQ(tu_acquire(&loop, w, TTL, &one, &op), 0);
  ASSERT_EQ(tu_release(&loop, w, &op), 0);

  ASSERT_EQ(redlock_lock_free(p), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
  ASSERT_EQ(redlock_lock_free(r), 0);
  tu_close_client(&loop, b);
  tu_close(&loop, a);
  harness_stop_all();
  return 0;
}
