/* skew.c: the masters' wall clocks, pure (guard.c owns the policy).
 *
 * A reading is TIME's answer bracketed by the validity clock: the master
 * ran TIME somewhere between our send and our receipt of the reply. So the
 * master's offset (its wall clock minus our validity clock) is known to
 * within half the round trip, and between two readings its wall clock must
 * have advanced by the elapsed validity time, within those brackets and the
 * rate its clock may drift. */
#include "pure.h"

#define SLACK_US 2000          /* TIME's microseconds, scheduling */
#define SLACK_PPM 1000         /* twice NTP's largest slew (500 ppm) */

int64_t redlock__clock_step_us(const redlock__clock_reading *a,
                               const redlock__clock_reading *b,
                               int64_t *slack_out) {
  int64_t lo = b->send_ns > a->reply_ns
                   ? (int64_t)((b->send_ns - a->reply_ns) / 1000) : 0;
  int64_t hi = b->reply_ns > a->send_ns
                   ? (int64_t)((b->reply_ns - a->send_ns) / 1000) : 0;
  int64_t moved = b->wall_us - a->wall_us;
  int64_t slack = SLACK_US + hi / (1000000 / SLACK_PPM);
  if (slack_out != NULL)
    *slack_out = slack + (hi - lo);   /* what a step can hide in */
  if (moved > hi + slack)
    return moved - hi;
  if (moved < lo - slack)
    return moved - lo;
  return 0;
}

int64_t redlock__clock_offset_us(const redlock__clock_reading *r) {
  int64_t mid = (int64_t)(r->send_ns / 1000) +
                (int64_t)((r->reply_ns - r->send_ns) / 2000);
  return r->wall_us - mid;
}

int64_t redlock__clock_unc_us(const redlock__clock_reading *r) {
  return r->reply_ns > r->send_ns
             ? (int64_t)((r->reply_ns - r->send_ns) / 2000) + 1 : 1;
}

int64_t redlock__median_i64(int64_t *v, unsigned n) {
  unsigned i, j;
  for (i = 1; i < n; i++)   /* insertion sort: n <= 64 */
    for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
      int64_t t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  if (n % 2 == 1)
    return v[n / 2];
  return v[n / 2 - 1] + (v[n / 2] - v[n / 2 - 1]) / 2;
}
