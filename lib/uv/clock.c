/* clock.c: the validity clock.
 *
 * Why not uv_hrtime(): it reads CLOCK_MONOTONIC, which stops while the
 * machine is suspended, while the masters keep expiring keys. A lock held
 * across a suspend would then report validity it no longer has.
 * CLOCK_BOOTTIME counts the suspended time too. */
#include <time.h>

#include "common.h"

redlock__ns redlock__clock_ns(void) {
  struct timespec ts;
#ifdef CLOCK_BOOTTIME
  if (clock_gettime(CLOCK_BOOTTIME, &ts) == 0)
    return (redlock__ns)ts.tv_sec * 1000000000ULL + (redlock__ns)ts.tv_nsec;
#endif
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (redlock__ns)ts.tv_sec * 1000000000ULL + (redlock__ns)ts.tv_nsec;
}
