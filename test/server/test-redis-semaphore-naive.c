/* Why a semaphore is K mutexes (docs/DESIGN.md, Counting semaphores).
 *
 * The naive design, as a double in this test only: each master keeps a
 * set of holders and admits while it holds fewer than K; a holder needs a
 * majority. With N = 5 (quorum 3) and K = 2 the interleaving
 *   A on masters {1,2,3}, B on {1,4,5}, C on {2,3,4}
 * (each holder's requests to its other two masters arrive last) admits
 * three holders with no fault at all: (K+1) q = 9 <= N K = 10.
 *
 * The library's semaphore on the same five masters, with A and B placed
 * exactly so (each on a bare quorum: A's permit 0 on {1,2,3}, B's permit
 * 1 on {1,4,5}), refuses C: no permit is free on a quorum. */
#include "tutil.h"

#define N 5
#define K 2

/* The naive per-master admission: 1 admitted (or already in), 0 full. */
static const char naive_script[] =
    "if redis.call('sismember', KEYS[1], ARGV[1]) == 1 then return 1 end "
    "if redis.call('scard', KEYS[1]) < tonumber(ARGV[2]) then "
    "redis.call('sadd', KEYS[1], ARGV[1]) return 1 end return 0";

static int naive_acquire(harness_server *s, const char *holder) {
  char buf[64];
  ASSERT_EQ(harness_cmdf(s, buf, sizeof(buf), "EVAL %s 1 naive %s %d",
                         naive_script, holder, K), 0);
  return atoi(buf);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *sem;
  /* Masters 0-based: A {0,1,2}, B {0,3,4}, C {1,2,3}; then the rest. */
  static const int first[3][3] = {{0, 1, 2}, {0, 3, 4}, {1, 2, 3}};
  static const int later[3][2] = {{3, 4}, {1, 2}, {0, 4}};
  static const char *const names[3] = {"A", "B", "C"};
  redlock_acquire_opts opts = {.retry_count = 3, .retry_delay_ms = 20,
                               .retry_jitter_ms = -1};
  unsigned yes[3] = {0, 0, 0};
  unsigned holders = 0;
  char buf[64];
  tu_op op;
  int h, j;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);

  /* The naive design: three holders. */
  for (h = 0; h < 3; h++)
    for (j = 0; j < 3; j++)
      yes[h] += (unsigned)naive_acquire(&srv[first[h][j]], names[h]);
  for (h = 0; h < 3; h++)
    for (j = 0; j < 2; j++)
      yes[h] += (unsigned)naive_acquire(&srv[later[h][j]], names[h]);
  for (h = 0; h < 3; h++) {
    fprintf(stderr, "naive: %s admitted by %u of %d masters\n", names[h],
            yes[h], N);
    holders += yes[h] >= N / 2 + 1;
  }
  for (j = 0; j < N; j++) {
    ASSERT_EQ(harness_cmdf(&srv[j], buf, sizeof(buf), "SCARD naive"), 0);
    ASSERT_LE(atoi(buf), K);   /* no master ever held more than K */
  }
  fprintf(stderr, "naive: %u holders with K = %d\n", holders, K);
  ASSERT_EQ(holders, K + 1);

  /* The semaphore: A and B hold permits 0 and 1 on exactly those bare
   * quorums (as the library writes them: the limit record, the permits);
   * C is refused. */
  for (j = 0; j < N; j++)
    ASSERT_EQ(harness_cmdf(&srv[j], buf, sizeof(buf),
                           "HSET {job}:sem k %d hi %d", K, K), 0);
  for (j = 0; j < 3; j++) {
    ASSERT_EQ(harness_set(&srv[first[0][j]], "{job}:sem:0", "tokA", 60000),
              0);
    ASSERT_EQ(harness_set(&srv[first[1][j]], "{job}:sem:1", "tokB", 60000),
              0);
  }
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_semaphore_new(c, "job", 3, K, &sem), 0);
  ASSERT_EQ(tu_acquire(&loop, sem, 10000, &opts, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(op.attempts, 4);
  fprintf(stderr, "semaphore: C refused after %u attempts (%u yes, %u no)\n",
          op.attempts, op.yes, op.no);
  ASSERT_LT(op.yes, N / 2 + 1);
  ASSERT_EQ(redlock_lock_free(sem), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
