/* Read-write locks over the quorum (N=3): readers share, a writer
 * excludes readers and other writers, expired readers are purged, and a
 * waiting writer is not starved by new readers (its intent keeps them
 * out while it waits; a writer that gave up withdraws it). The hash
 * disappears when the last owner releases. */
#include "tutil.h"

#define N 3

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *r1, *r2, *w1, *w2;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts fenced = {.wait_ms = -1, .fence = 1};
  redlock_acquire_opts wait = {.wait_ms = 5000, .retry_count = 1000,
                               .retry_delay_ms = 20, .retry_jitter_ms = 5};
  tu_op op, wop;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_rwlock_new(c, "doc", 3, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "doc", 3, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "doc", 3, REDLOCK_WRITE, &w1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "doc", 3, REDLOCK_WRITE, &w2), 0);
  ASSERT_EQ(redlock_lock_acquire(r1, 1000, &fenced, tu_cb, &op),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_lock_inspect(r1, tu_cb, &op), REDLOCK_EINVAL);

  /* Readers share; a writer is refused. */
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, r2, 300, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, w1, 10000, &once, &op), REDLOCK_ETAKEN);
  /* Extend works for a reader. */
  ASSERT_EQ(tu_extend(&loop, r1, 10000, &op), 0);

  /* Writer preference: a writer that waits (retrying) leaves an intent,
   * so a new reader is refused although only readers hold the lock ... */
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(w1, 10000, &wait, tu_cb, &wop), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "doc", 3, REDLOCK_READ, &r2), 0);   /* fresh handle */
  {
    /* (bounded: until the writer's first refused attempt set it) */
    uint64_t end = harness_now_ms() + 5000;
    while (tu_acquire(&loop, r2, 10000, &once, &op) == 0) {
      ASSERT_EQ(tu_release(&loop, r2, &op), 0);
      if (harness_now_ms() > end)
        TEST_FAIL("the waiting writer's intent never kept a reader out");
    }
    ASSERT_EQ(op.status, REDLOCK_ETAKEN);
  }
  /* ... and the writer gets it once the readers are gone: r1 releases,
   * the first r2 (ttl 300, never extended) expires and is purged. */
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(harness_run_until(&loop, &wop.done, 6000), 0);
  ASSERT_EQ(wop.status, 0);
  ASSERT(redlock_lock_is_held(w1));

  /* The writer excludes readers and writers. */
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, w2, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(&loop, w1, &op), 0);
  /* w2 gave up: its intent went with it, readers come in at once. */
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, w2, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, w2, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);

  /* Empty: the hash is gone. */
  tu_drain(&loop, c);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  /* One of three masters hung: readers still share, a writer is still
   * excluded (decided by the other two). */
  harness_pause(&srv[2]);
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, r2, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, w2, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(tu_release(&loop, r2, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, w2, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, w2, &op), 0);
  harness_resume(&srv[2]);

  ASSERT_EQ(redlock_client_close(c, NULL, NULL), 0);   /* frees handles */
  harness_loop_close(&loop, 10000);
  harness_stop_all();
  return 0;
}
