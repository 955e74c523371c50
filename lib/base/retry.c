/* retry.c: retry policy and jitter source, pure.
 *
 * The spec asks for a random delay between attempts so that clients that
 * collided do not collide again. Delays are uniform in delay +- jitter. */
#include "pure.h"

int64_t redlock__retry_delay_ms(int64_t delay_ms, int64_t jitter_ms,
                                uint32_t rnd) {
  int64_t span;
  int64_t d;
  if (delay_ms < 0)
    delay_ms = 0;
  if (jitter_ms <= 0)
    return delay_ms;
  span = 2 * jitter_ms + 1;                    /* [-jitter, +jitter] */
  d = delay_ms - jitter_ms + (int64_t)(rnd % (uint64_t)span);
  return d < 0 ? 0 : d;
}

int redlock__retry_allowed(unsigned attempts, unsigned max_retries,
                           redlock__ns next_start, redlock__ns deadline) {
  if (attempts > max_retries)
    return 0;
  if (deadline != 0 && next_start >= deadline)
    return 0;
  return 1;
}

uint32_t redlock__prng_next(uint64_t *state) {
  uint64_t x = *state;
  if (x == 0)
    x = 0x9E3779B97F4A7C15ULL;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

int64_t redlock__backoff_ms(int64_t min_ms, int64_t max_ms, unsigned failures,
                            uint64_t *prng) {
  unsigned shift = failures > 0 ? failures - 1 : 0;
  int64_t base = min_ms;
  if (shift > 20)
    shift = 20;
  base <<= shift;
  if (base > max_ms)
    base = max_ms;
  return base / 2 + (int64_t)(redlock__prng_next(prng) %
                              (uint64_t)(base / 2 + 1));
}
