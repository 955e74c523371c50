/* quorum.c: the early decision of one fan-out round, pure.
 *
 * A round over n nodes is decided as soon as the outcome can no longer
 * change: yes >= quorum, or yes + (still pending) < quorum. Deciding early
 * is what lets a healthy majority answer without waiting for a hung node.
 *
 *   pending = n - yes - no - err
 *   yes >= quorum                 -> REACHED
 *   yes + pending < quorum        -> impossible:
 *       no > n - quorum           -> BLOCKED (the NO votes alone forbid it)
 *       otherwise                 -> FAILED  (errors made it impossible)
 *   otherwise                     -> PENDING
 */
#include "pure.h"

unsigned redlock__quorum_default(unsigned n) {
  return n / 2 + 1;
}

redlock__round_state redlock__round_decide(unsigned n, unsigned quorum,
                                           unsigned yes, unsigned no,
                                           unsigned err) {
  unsigned answered = yes + no + err;
  unsigned pending = answered >= n ? 0 : n - answered;
  if (yes >= quorum)
    return REDLOCK__ROUND_REACHED;
  if (yes + pending < quorum) {
    if (no > n - quorum)
      return REDLOCK__ROUND_BLOCKED;
    return REDLOCK__ROUND_FAILED;
  }
  return REDLOCK__ROUND_PENDING;
}

redlock__ns redlock__start_bound(redlock__ns now, int64_t uptime_s) {
  redlock__ns age;
  if (uptime_s <= 1)
    return now;
  age = (redlock__ns)(uptime_s - 1) * 1000 * REDLOCK__NS_PER_MS;
  return age < now ? now - age : 0;
}

int64_t redlock__age_ms(redlock__ns start, redlock__ns now) {
  if (start >= now)
    return 0;
  return (int64_t)((now - start) / REDLOCK__NS_PER_MS);
}

int redlock__guard_read_valid(unsigned n, unsigned quorum,
                              unsigned answered) {
  return answered >= quorum && answered <= n;
}
