/* The pure helpers: validity math, retry policy, quorum decision, error
 * map. No server. */
#include "harness.h"
#include "redlock.h"
#include "pure.h"

#define MS REDLOCK__NS_PER_MS

static void test_validity(void) {
  /* drift = ttl * 0.01 + 2 ms */
  ASSERT_EQ(redlock__drift_ns(10000, 0.01), 102 * MS);
  ASSERT_EQ(redlock__drift_ns(1, 0.01), 2 * MS + 10000);
  ASSERT_EQ(redlock__drift_ns(1000, 0), 2 * MS);
  /* deadline = start + ttl - drift */
  ASSERT_EQ(redlock__validity_deadline(5 * MS, 10000, 0.01),
            5 * MS + 10000 * MS - 102 * MS);
  /* a ttl below the drift has no validity at all */
  ASSERT_EQ(redlock__validity_deadline(5 * MS, 1, 0.01), 5 * MS);
  ASSERT_EQ(redlock__validity_left(100, 40), 60);
  ASSERT_EQ(redlock__validity_left(100, 100), 0);
  ASSERT_EQ(redlock__validity_left(100, 130), -30);
  /* validity shrinks by exactly the elapsed time */
  {
    redlock__ns d = redlock__validity_deadline(0, 1000, 0.01);
    ASSERT_EQ(redlock__validity_left(d, 150 * MS), (1000 - 12 - 150) * MS);
  }
}

static void test_retry(void) {
  uint32_t r;
  int64_t lo = 1000;
  int64_t hi = 0;
  uint64_t st = 42;
  int i;
  ASSERT_EQ(redlock__retry_delay_ms(200, 0, 12345), 200);
  ASSERT_EQ(redlock__retry_delay_ms(-5, 0, 1), 0);
  ASSERT_EQ(redlock__retry_delay_ms(10, 100, 0), 0);   /* clamped */
  for (i = 0; i < 10000; i++) {
    int64_t d;
    r = redlock__prng_next(&st);
    d = redlock__retry_delay_ms(200, 100, r);
    ASSERT_GE(d, 100);
    ASSERT_LE(d, 300);
    if (d < lo)
      lo = d;
    if (d > hi)
      hi = d;
  }
  ASSERT_LE(lo, 110);   /* the whole window is used */
  ASSERT_GE(hi, 290);
  ASSERT_EQ(redlock__retry_allowed(1, 0, 0, 0), 0);
  ASSERT_EQ(redlock__retry_allowed(1, 3, 0, 0), 1);
  ASSERT_EQ(redlock__retry_allowed(3, 3, 0, 0), 1);
  ASSERT_EQ(redlock__retry_allowed(4, 3, 0, 0), 0);
  ASSERT_EQ(redlock__retry_allowed(1, 3, 100, 200), 1);
  ASSERT_EQ(redlock__retry_allowed(1, 3, 200, 200), 0);
}

static void test_quorum(void) {
  ASSERT_EQ(redlock__quorum_default(1), 1);
  ASSERT_EQ(redlock__quorum_default(2), 2);
  ASSERT_EQ(redlock__quorum_default(3), 2);
  ASSERT_EQ(redlock__quorum_default(5), 3);
  ASSERT_EQ(redlock__quorum_default(6), 4);
  /* n=5, q=3 */
  ASSERT_EQ(redlock__round_decide(5, 3, 0, 0, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 3, 2, 0, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 3, 3, 0, 0), REDLOCK__ROUND_REACHED);
  ASSERT_EQ(redlock__round_decide(5, 3, 3, 2, 0), REDLOCK__ROUND_REACHED);
  ASSERT_EQ(redlock__round_decide(5, 3, 2, 2, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 3, 0, 3, 0), REDLOCK__ROUND_BLOCKED);
  ASSERT_EQ(redlock__round_decide(5, 3, 0, 0, 3), REDLOCK__ROUND_FAILED);
  ASSERT_EQ(redlock__round_decide(5, 3, 1, 2, 1), REDLOCK__ROUND_FAILED);
  ASSERT_EQ(redlock__round_decide(5, 3, 2, 2, 1), REDLOCK__ROUND_FAILED);
  /* n=1 */
  ASSERT_EQ(redlock__round_decide(1, 1, 1, 0, 0), REDLOCK__ROUND_REACHED);
  ASSERT_EQ(redlock__round_decide(1, 1, 0, 1, 0), REDLOCK__ROUND_BLOCKED);
  ASSERT_EQ(redlock__round_decide(1, 1, 0, 0, 1), REDLOCK__ROUND_FAILED);
  /* raised quorum: n=5, q=5 - one NO blocks it */
  ASSERT_EQ(redlock__round_decide(5, 5, 4, 0, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 5, 4, 1, 0), REDLOCK__ROUND_BLOCKED);
}

static void test_errors(void) {
  ASSERT_STR_EQ(redlock_err_name(REDLOCK_EINVAL), "EINVAL");
  ASSERT_STR_EQ(redlock_err_name(REDLOCK_ENOQUORUM), "ENOQUORUM");
  ASSERT_STR_EQ(redlock_err_name(0), "OK");
  ASSERT_STR_EQ(redlock_err_name(-99), "UNKNOWN");
  ASSERT_STR_EQ(redlock_strerror(REDLOCK_ETAKEN),
                "lock is held by another owner");
  ASSERT_STR_EQ(redlock_strerror(1), "unknown error");
  /* every code has a distinct name */
#define XX(name, val, msg)                                                  \
  ASSERT_STR_EQ(redlock_err_name(val), #name);                              \
  ASSERT_NE(strcmp(redlock_strerror(val), "unknown error"), 0);
  REDLOCK_ERRNO_MAP(XX)
#undef XX
  ASSERT_STR_EQ(redlock_version_string(), "0.1.0");
}

int main(void) {
  test_validity();
  test_retry();
  test_quorum();
  test_errors();
  return 0;
}
