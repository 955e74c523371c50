/* pure.h: the pure helpers (no I/O, no uv, no hiredis): validity clock
 * math, retry policy, quorum decision. They take times and counts as
 * arguments so unit tests can drive them without a server. */
#ifndef REDLOCK_PURE_H
#define REDLOCK_PURE_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic time in nanoseconds (uv_hrtime). */
typedef uint64_t redlock__ns;

#define REDLOCK__NS_PER_MS 1000000ULL
#define REDLOCK__NS_PER_US 1000ULL

/* ---- validity.c ---------------------------------------------------------
 * Redlock spec step 4: validity = ttl - elapsed - drift, where
 * drift = ttl * drift_factor + 2 ms (the 2 ms cover Redis's 1 ms expire
 * precision). All in ns on the monotonic clock. */

/* Drift for a ttl, in ns (rounded up to a whole ns). */
redlock__ns redlock__drift_ns(int64_t ttl_ms, double drift_factor);
/* The absolute monotonic deadline until which the lock is valid, given the
 * time the first command was sent: start + ttl - drift. Saturates at 0. */
redlock__ns redlock__validity_deadline(redlock__ns start, int64_t ttl_ms,
                                       double drift_factor);
/* Remaining validity at `now` in ns; <= 0 when expired. */
int64_t redlock__validity_left(redlock__ns deadline, redlock__ns now);

/* ---- retry.c -------------------------------------------------------------
 * Retry policy: a delay uniform in [delay - jitter, delay + jitter]
 * (clamped at 0), drawn from `rnd` (any uniformly distributed 32 bits).
 * The attempt may run when it starts before the wait deadline. */
int64_t redlock__retry_delay_ms(int64_t delay_ms, int64_t jitter_ms,
                                uint32_t rnd);
/* 1 if another attempt may be made: `attempts` made so far (>= 1),
 * `max_retries` retries allowed, and (when deadline != 0) the next attempt
 * would start at `next_start` before `deadline`. */
int redlock__retry_allowed(unsigned attempts, unsigned max_retries,
                           redlock__ns next_start, redlock__ns deadline);

/* A small fast PRNG (xorshift64*) for jitter only; tokens use uv_random. */
uint32_t redlock__prng_next(uint64_t *state);
/* Reconnect backoff after `failures` failures in a row: min_ms doubled per
 * failure after the first, capped at max_ms, then uniform in [half, all]
 * of it (jitter: clients that failed together do not retry together). */
int64_t redlock__backoff_ms(int64_t min_ms, int64_t max_ms, unsigned failures,
                            uint64_t *prng);

/* ---- stats.c -------------------------------------------------------------
 * The latency histogram's bucket for a value in us (see redlock.h): 0-3
 * linear, then four buckets per power of two, the last one open-ended. */
static inline unsigned redlock__hist_bucket(uint64_t us) {
  unsigned e, b;
  if (us < 4)
    return (unsigned)us;
  e = 63u - (unsigned)__builtin_clzll(us);   /* us >= 4: e >= 2 */
  b = 4u + (e - 2u) * 4u + (unsigned)((us >> (e - 2u)) & 3u);
  return b < 63u ? b : 63u;
}

/* ---- quorum.c ------------------------------------------------------------
 * Early decision of a fan-out round over n nodes (DESIGN 4.2). */
typedef enum {
  REDLOCK__ROUND_PENDING = 0,   /* not decided yet */
  REDLOCK__ROUND_REACHED,       /* yes >= quorum */
  REDLOCK__ROUND_BLOCKED,       /* impossible, and the NO votes alone make
                                   it impossible (held by others) */
  REDLOCK__ROUND_FAILED         /* impossible because of errors */
} redlock__round_state;

redlock__round_state redlock__round_decide(unsigned n, unsigned quorum,
                                           unsigned yes, unsigned no,
                                           unsigned err);
/* Default quorum for n nodes: n/2 + 1. */
unsigned redlock__quorum_default(unsigned n);

/* ---- sha1.c ----------------------------------------------------------------
 * SHA-1 of data as 40 lowercase hex characters and a NUL (the name Redis
 * gives a script for EVALSHA). */
void redlock__sha1_hex(const void *data, size_t len, char out[41]);

/* ---- guard math (quorum.c) ------------------------------------------------
 * Redis reports uptime_in_seconds as whole WALL-CLOCK seconds: the server
 * started at wall time s0 and now is s, uptime = floor(s) - floor(s0), so
 * the true age is more than uptime - 1 s and less than uptime + 1 s. The
 * latest the server can have started, seen at monotonic time `now`, is
 * therefore now - (uptime - 1 s): a lower bound of the age, never an upper
 * one. Returns that start time (saturating at 0; an uptime of 0 or 1 gives
 * `now`: the server may have started just now). */
redlock__ns redlock__start_bound(redlock__ns now, int64_t uptime_s);
/* Age in ms at `now` of a server whose latest possible start is `start`:
 * 0 when start >= now. */
int64_t redlock__age_ms(redlock__ns start, redlock__ns now);
/* Restart guard, safe read of the deployment's longest ttl (guard.c): a
 * read of n masters of which `answered` answered is valid when a quorum
 * answered. Under Redlock's failure model (at most n - quorum masters
 * failed at a time, counting a master that does not answer and one that
 * restarted within its guard window) the answers then include a master
 * that holds the record of every lock still valid. */
int redlock__guard_read_valid(unsigned n, unsigned quorum,
                              unsigned answered);

/* ---- skew.c: the masters' wall clocks (guard.c) ---------------------------
 * One reading of a master's wall clock (TIME): what it said, and when (on
 * the validity clock) we asked and heard. wall_us < 0: unreadable. */
typedef struct redlock__clock_reading {
  int64_t wall_us;
  redlock__ns send_ns;
  redlock__ns reply_ns;
} redlock__clock_reading;

/* Between two readings of the same master, the elapsed time lies in
 * [b.send - a.reply, b.reply - a.send]. Its clock stepped when its wall
 * clock moved outside that interval by more than the slack: 2 ms (TIME's
 * precision and scheduling) plus 1000 ppm of the interval (twice what NTP
 * may slew). Returns the step in us (> 0 forward, < 0 backward; the part
 * beyond the interval, a lower bound of its size) or 0. a before b.
 * *slack (may be NULL) gets the largest step that can go unseen: the
 * slack plus the width of the interval (the two round trips). */
int64_t redlock__clock_step_us(const redlock__clock_reading *a,
                               const redlock__clock_reading *b,
                               int64_t *slack);
/* The master's offset: its wall clock minus the middle of the reading on
 * the validity clock, in us; and the half round trip it is uncertain by. */
int64_t redlock__clock_offset_us(const redlock__clock_reading *r);
int64_t redlock__clock_unc_us(const redlock__clock_reading *r);
/* Median of v[0..n) (sorts v); the mean of the two middle values when n is
 * even. n > 0. */
int64_t redlock__median_i64(int64_t *v, unsigned n);

/* ---- slot.c: Redis Cluster hash slots --------------------------------------
 * CRC16 (XMODEM) of the key, or of its hash tag "{...}" when it has one,
 * modulo 16384. */
#define REDLOCK__SLOTS 16384
uint16_t redlock__crc16(const void *data, size_t len);
unsigned redlock__key_slot(const char *key, size_t len);
/* 1 when the key has a hash tag (a '{', a later '}', bytes between). */
int redlock__key_has_tag(const char *key, size_t len);
/* A short string (1-5 characters of [0-9a-z], NUL-terminated in out) that
 * hashes to `slot`; the same for every caller. Its length. */
size_t redlock__slot_tag(unsigned slot, char out[8]);
/* The name of a key that must share key's slot, ending in `suffix`:
 * key + suffix when the key has a hash tag, else "{key}" + suffix, or,
 * for a key holding a '}', "{<the tag of its slot>}" + key + suffix.
 * Written to out (NUL-terminated); its length, or 0 when outlen is too
 * small. */
size_t redlock__same_slot_name(const char *key, size_t len,
                               const char *suffix, char *out,
                               size_t outlen);

/* ---- names.c: the lock names behind raw keys (redlock_client_scan) --------
 * The SCAN pattern for keys whose lock name starts with `want` (the
 * client's key prefix and the caller's prefix): "*" + want with the glob
 * metacharacters * ? [ ] \ escaped + "*" (a semaphore's and a cluster's
 * names start with '{'). Written to out (room: 4 * len + 3, NUL-terminated);
 * its length. */
size_t redlock__name_glob(const char *want, size_t len, char *out);
/* What a raw key of Redis type `hash` (1: a hash, 0: a string) is (values
 * of redlock.h's redlock_name_kind): 1 a plain lock, 2 a read-write lock,
 * 3 a semaphore; 0 the library's own key (a "__redlock__" name, a ":fence"
 * counter), a hash that is none of ours, or a key whose lock name does not
 * start with want (want_len bytes, the first plen of them the client's key
 * prefix). Else *off and *len give the lock name inside raw, without the
 * client's prefix. */
int redlock__name_classify(const char *raw, size_t raw_len, int hash,
                           const char *want, size_t want_len, size_t plen,
                           size_t *off, size_t *len);

#endif
