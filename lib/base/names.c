/* names.c: the lock names behind the keys a SCAN returns, pure (no I/O).
 *
 * The library's key layout (lock.c, semaphore.c, scripts.c, slot.c), for
 * a lock name N under the client's prefix P (K = P + N):
 *  - a plain lock: K (a read-write lock's marker too: K set to
 *    "__redlock__:rw" while it has owners, beside its hash);
 *  - a read-write lock's hash: "K:rw" on plain masters, K's same-slot
 *    name + ":rw" on a cluster ("{K}:rw", "K:rw" when K has a hash tag,
 *    "{tag}K:rw" when K holds a '}' without one);
 *  - a semaphore: its limit record and permits, K's same-slot name +
 *    ":sem" and + ":sem:<i>", on every kind of master;
 *  - the library's own: fencing counters (any name ending in ":fence":
 *    "K:fence", "{K}:fence", a permit's "...:sem:<i>:fence"), the ttl
 *    record, clock hashes and marks (P + "__redlock__:...", a cluster
 *    node's P + "{tag}__redlock__:...") and the lock "__redlock__:record".
 * The Redis type tells a read-write lock's hash "K:rw" from a plain lock
 * named "K:rw" (or the marker of the read-write lock "K:rw"): scan.c asks
 * for strings and hashes apart (SCAN ... TYPE). A name of the user's that
 * ends in ":fence" or ":sem:<i>", or holds "__redlock__", is read as the
 * library's would be: the layout cannot tell them apart (docs/API.md,
 * Listing the locks).
 *
 * Owns: the glob that finds them and the classification. Does not own:
 * scanning (scan.c). */
#include <string.h>

#include "pure.h"

size_t redlock__name_glob(const char *want, size_t len, char *out) {
  size_t o = 0, i;
  out[o++] = '*';
  for (i = 0; i < len; i++) {
    char ch = want[i];
    if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\')
      out[o++] = '\\';
    out[o++] = ch;
  }
  out[o++] = '*';
  out[o] = '\0';
  return o;
}

static int ends_with(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* The length of body once a semaphore's suffix (":sem", ":sem:<i>") is
 * cut, or 0 when it has none. */
static size_t sem_body(const char *s, size_t len) {
  size_t d = 0;
  if (ends_with(s, len, ":sem"))
    return len - 4;
  while (d < len && d < 5 && s[len - 1 - d] >= '0' && s[len - 1 - d] <= '9')
    d++;
  if (d == 0 || d > 4 || !ends_with(s, len - d, ":sem:"))
    return 0;
  return len - d - 5;
}

/* The key K whose same-slot name is body (+ the suffix, cut already):
 * "{K}" (K without a '}'), "{tag}K" (K holds a '}' and no hash tag: the
 * tag is the first one of K's slot), else body itself (K has a hash tag,
 * or a plain master's "K:rw"). */
static void unwrap(const char *body, size_t len, size_t *k_off,
                   size_t *k_len) {
  const char *close;
  *k_off = 0;
  *k_len = len;
  if (len < 3 || body[0] != '{')
    return;
  close = memchr(body, '}', len);
  if (close == NULL)
    return;
  if ((size_t)(close - body) == len - 1) {
    *k_off = 1;
    *k_len = len - 2;
    return;
  }
  {
    size_t tl = (size_t)(close - body) - 1, i;
    const char *rest = close + 1;
    size_t rl = len - tl - 2;
    char tag[8];
    if (tl < 1 || tl > 5 || memchr(rest, '}', rl) == NULL ||
        redlock__key_has_tag(rest, rl))
      return;
    for (i = 0; i < tl; i++)
      if (!((body[1 + i] >= '0' && body[1 + i] <= '9') ||
            (body[1 + i] >= 'a' && body[1 + i] <= 'z')))
        return;
    if (redlock__slot_tag(redlock__key_slot(rest, rl), tag) != tl ||
        memcmp(tag, body + 1, tl) != 0)
      return;
    *k_off = tl + 2;
    *k_len = rl;
  }
}

static int holds(const char *s, size_t len, const char *needle) {
  size_t n = strlen(needle), i;
  for (i = 0; i + n <= len; i++)
    if (memcmp(s + i, needle, n) == 0)
      return 1;
  return 0;
}

int redlock__name_classify(const char *raw, size_t raw_len, int hash,
                           const char *want, size_t want_len, size_t plen,
                           size_t *off, size_t *len) {
  size_t body, k_off = 0, k_len = raw_len;
  int kind = 1;
  if (ends_with(raw, raw_len, ":fence") || holds(raw, raw_len, "__redlock__"))
    return 0;
  body = sem_body(raw, raw_len);
  if (hash && ends_with(raw, raw_len, ":sem") && body > 0) {
    kind = 3;   /* the limit record */
    unwrap(raw, body, &k_off, &k_len);
  } else if (hash && ends_with(raw, raw_len, ":rw") && raw_len > 3) {
    kind = 2;
    unwrap(raw, raw_len - 3, &k_off, &k_len);
  } else if (hash) {
    return 0;   /* a hash of someone else's */
  } else if (body > 0 && !ends_with(raw, raw_len, ":sem")) {
    kind = 3;   /* a permit */
    unwrap(raw, body, &k_off, &k_len);
  }
  if (k_len <= plen || k_len < want_len ||
      memcmp(raw + k_off, want, want_len) != 0)
    return 0;
  *off = k_off + plen;
  *len = k_len - plen;
  return kind;
}
