/* resp.c: byte buffers and the RESP command encoder, pure.
 *
 * Owns: the growable buffer used for every connection's output and the
 * encoding of a command (argv of binary-safe strings) as a RESP array of
 * bulk strings. Does not own: sockets (conn.c) or parsing replies
 * (reply.c, through hiredis's reader). */
#include <string.h>

#include "redlock.h"
#include "alloc.h"
#include "resp.h"

#define BUF_MIN 256   /* bytes: first allocation */

int redlock__buf_reserve(redlock__buf *b, size_t extra) {
  size_t need;
  size_t cap;
  char *p;
  if (b->off > 0 && b->off == b->len) {
    b->off = 0;
    b->len = 0;
  }
  need = b->len + extra;
  if (need < extra)
    return REDLOCK_ENOMEM;
  if (need <= b->cap)
    return 0;
  if (b->off > 0 && b->len - b->off + extra <= b->cap) {
    /* Slide the unconsumed bytes to the front instead of growing. */
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    return 0;
  }
  cap = b->cap < BUF_MIN ? BUF_MIN : b->cap;
  while (cap < need) {
    if (cap > SIZE_MAX / 2)
      return REDLOCK_ENOMEM;
    cap *= 2;
  }
  p = redlock__realloc(b->data, cap);
  if (p == NULL)
    return REDLOCK_ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int redlock__buf_append(redlock__buf *b, const void *p, size_t n) {
  if (redlock__buf_reserve(b, n) != 0)
    return REDLOCK_ENOMEM;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void redlock__buf_consume(redlock__buf *b, size_t n) {
  b->off += n;
  if (b->off >= b->len) {
    b->off = 0;
    b->len = 0;
  }
}

void redlock__buf_reset(redlock__buf *b) {
  b->off = 0;
  b->len = 0;
}

void redlock__buf_free(redlock__buf *b) {
  redlock__free(b->data);
  memset(b, 0, sizeof(*b));
}

size_t redlock__fmt_i64(char *out, int64_t v) {
  char tmp[24];
  size_t n = 0;
  size_t i;
  uint64_t u;
  int neg = v < 0;
  u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  i = 0;
  if (neg)
    out[i++] = '-';
  while (n > 0)
    out[i++] = tmp[--n];
  return i;
}

static size_t digits(size_t v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    n++;
  }
  return n;
}

size_t redlock__resp_size(int argc, const size_t *lens) {
  size_t size = 1 + digits((size_t)argc) + 2;
  int i;
  for (i = 0; i < argc; i++)
    size += 1 + digits(lens[i]) + 2 + lens[i] + 2;
  return size;
}

int redlock__resp_cmd(redlock__buf *b, int argc, const char *const *argv,
                      const size_t *lens) {
  size_t size = redlock__resp_size(argc, lens);
  char *p;
  int i;
  if (redlock__buf_reserve(b, size) != 0)
    return REDLOCK_ENOMEM;
  p = b->data + b->len;
  *p++ = '*';
  p += redlock__fmt_i64(p, argc);
  *p++ = '\r';
  *p++ = '\n';
  for (i = 0; i < argc; i++) {
    *p++ = '$';
    p += redlock__fmt_i64(p, (int64_t)lens[i]);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, argv[i], lens[i]);
    p += lens[i];
    *p++ = '\r';
    *p++ = '\n';
  }
  b->len += size;
  return 0;
}
