/* validity.c: the Redlock clock math, pure.
 *
 * Owns: drift and validity on the monotonic clock (ns). Does not own:
 * reading the clock (callers pass `now`, read once per decision). */
#include <math.h>

#include "pure.h"

/* drift = ttl * factor + 2 ms. The 2 ms cover Redis's 1 ms expire
 * resolution plus rounding of PX on the server. */
redlock__ns redlock__drift_ns(int64_t ttl_ms, double drift_factor) {
  double d = (double)ttl_ms * drift_factor * (double)REDLOCK__NS_PER_MS;
  if (d < 0)
    d = 0;
  return (redlock__ns)ceil(d) + 2 * REDLOCK__NS_PER_MS;
}

redlock__ns redlock__validity_deadline(redlock__ns start, int64_t ttl_ms,
                                       double drift_factor) {
  redlock__ns ttl = (redlock__ns)ttl_ms * REDLOCK__NS_PER_MS;
  redlock__ns drift = redlock__drift_ns(ttl_ms, drift_factor);
  if (ttl <= drift)
    return start;  /* no validity at all: already expired at start */
  return start + ttl - drift;
}

int64_t redlock__validity_left(redlock__ns deadline, redlock__ns now) {
  if (now >= deadline)
    return -(int64_t)(now - deadline);
  return (int64_t)(deadline - now);
}
