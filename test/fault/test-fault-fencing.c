/* Fencing tokens over the quorum (N=5, masters with appendonly + fsync
 * always): 150 acquisitions by two clients in turn, with random minority
 * faults between them (a hung master for a few rounds, a crash and
 * restart that keeps its data): the tokens handed out strictly increase.
 * A plain acquisition (no fence) reports 0. */
#include "tutil.h"

#define N 5
#define ROUNDS 150

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c[2];
  redlock_lock_t *l[2];
  redlock_client_config cfg = {.command_timeout_ms = 200,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 100};
  redlock_acquire_opts fenced = {.fence = 1, .wait_ms = 10000,
                                 .retry_count = 1000, .retry_delay_ms = 20,
                                 .retry_jitter_ms = 10};
  redlock_acquire_opts plain = {.wait_ms = -1};
  int paused_until[N];
  uint64_t prev = 0;
  uint64_t prng = uv_hrtime() | 1;
  unsigned faults_hang = 0, faults_crash = 0;
  tu_op op;
  int i, r;

  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++) {
    srv[i].appendonly = 1;
    paused_until[i] = -1;
  }
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  for (i = 0; i < 2; i++) {
    c[i] = tu_client(&loop, srv, N, &cfg, N);
    ASSERT_EQ(redlock_lock_new(c[i], "fenced", 6, &l[i]), 0);
  }
  ASSERT_EQ(tu_acquire(&loop, l[0], 5000, &plain, &op), 0);
  ASSERT_EQ(redlock_lock_fence(l[0]), 0);
  ASSERT_EQ(tu_release(&loop, l[0], &op), 0);

  for (r = 0; r < ROUNDS; r++) {
    redlock_lock_t *h = l[r % 2];
    int faulty = 0;
    uint64_t f;
    for (i = 0; i < N; i++) {
      if (paused_until[i] == r) {
        harness_resume(&srv[i]);
        paused_until[i] = -1;
      }
      faulty += paused_until[i] >= 0;
    }
    prng ^= prng << 13;
    prng ^= prng >> 7;
    prng ^= prng << 17;
    if (faulty < 2 && prng % 4 == 0) {
      do
        i = (int)((prng >> 8) % N);
      while (paused_until[i] >= 0 && (prng = prng * 6364136223846793005ULL +
                                             1442695040888963407ULL));
      if ((prng >> 16) % 2 == 0) {
        harness_pause(&srv[i]);
        paused_until[i] = r + 1 + (int)((prng >> 20) % 4);
        faults_hang++;
      } else {
        harness_kill(&srv[i]);
        harness_restart(&srv[i]);   /* AOF: keys and counters survive */
        faults_crash++;
      }
    }
    ASSERT_EQ(tu_acquire(&loop, h, 5000, &fenced, &op), 0);
    f = redlock_lock_fence(h);
    if (f <= prev)
      TEST_FAIL("round %d: fence %llu after %llu", r,
                (unsigned long long)f, (unsigned long long)prev);
    prev = f;
    ASSERT_EQ(tu_release(&loop, h, &op), 0);
  }
  for (i = 0; i < N; i++)
    if (paused_until[i] >= 0)
      harness_resume(&srv[i]);
  fprintf(stderr, "fencing: %d acquisitions, tokens strictly increasing up "
                  "to %llu; faults: %u hangs, %u crash-restarts\n",
          ROUNDS, (unsigned long long)prev, faults_hang, faults_crash);
  for (i = 0; i < 2; i++) {
    ASSERT_EQ(redlock_lock_free(l[i]), 0);
    ASSERT_EQ(redlock_client_close(c[i], NULL, NULL), 0);
  }
  harness_loop_close(&loop, 10000);
  harness_stop_all();
  return 0;
}
