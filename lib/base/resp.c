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

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233"
    "34353637383940414243444546474849505152535455565758596061626364656667"
    "6869707172737475767778798081828384858687888990919293949596979899";

/* Unsigned decimal into p; returns the length. Two digits per step. */
static size_t put_u64(char *p, uint64_t u) {
  char tmp[24];
  char *t = tmp + sizeof(tmp);
  size_t n;
  if (u < 10) {
    *p = (char)('0' + u);
    return 1;
  }
  if (u < 100) {   /* most lengths of a command: no copy */
    p[0] = digit_pairs[u * 2];
    p[1] = digit_pairs[u * 2 + 1];
    return 2;
  }
  while (u >= 100) {
    unsigned d = (unsigned)(u % 100) * 2;
    u /= 100;
    *--t = digit_pairs[d + 1];
    *--t = digit_pairs[d];
  }
  if (u < 10) {
    *--t = (char)('0' + u);
  } else {
    *--t = digit_pairs[u * 2 + 1];
    *--t = digit_pairs[u * 2];
  }
  n = (size_t)(tmp + sizeof(tmp) - t);
  memcpy(p, t, n);
  return n;
}

size_t redlock__fmt_i64(char *out, int64_t v) {
  if (v < 0) {
    *out = '-';
    return 1 + put_u64(out + 1, (uint64_t)0 - (uint64_t)v);
  }
  return put_u64(out, (uint64_t)v);
}

size_t redlock__resp_size(int argc, const size_t *lens) {
  char tmp[24];
  size_t size = 3 + put_u64(tmp, (uint64_t)argc);
  int i;
  for (i = 0; i < argc; i++)
    size += 5 + put_u64(tmp, lens[i]) + lens[i];
  return size;
}

size_t redlock__resp_bound(int argc, const size_t *lens) {
  size_t bound = 3 + 20;
  int i;
  for (i = 0; i < argc; i++)
    bound += 5 + 20 + lens[i];
  return bound;
}

size_t redlock__resp_write(char *p, int argc, const char *const *argv,
                           const size_t *lens) {
  char *start = p;
  int i;
  *p++ = '*';
  p += put_u64(p, (uint64_t)argc);
  *p++ = '\r';
  *p++ = '\n';
  for (i = 0; i < argc; i++) {
    *p++ = '$';
    p += put_u64(p, lens[i]);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, argv[i], lens[i]);
    p += lens[i];
    *p++ = '\r';
    *p++ = '\n';
  }
  return (size_t)(p - start);
}

/* One pass: room for the worst case (20 digits a length), then write. */
int redlock__resp_cmd(redlock__buf *b, int argc, const char *const *argv,
                      const size_t *lens) {
  if (redlock__buf_reserve(b, redlock__resp_bound(argc, lens)) != 0)
    return REDLOCK_ENOMEM;
  b->len += redlock__resp_write(b->data + b->len, argc, argv, lens);
  return 0;
}
