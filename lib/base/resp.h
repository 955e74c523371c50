/* resp.h: byte buffers and the RESP command encoder. Pure: no uv, no
 * hiredis, no I/O.
 *
 * Commands are written straight into a connection's output buffer as RESP
 * arrays of bulk strings ("*3\r\n$3\r\nGET\r\n..."): no intermediate
 * string, no allocation once the buffer has grown to its working size. */
#ifndef REDLOCK_RESP_H
#define REDLOCK_RESP_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer. `off` bytes at the front were consumed. */
typedef struct redlock__buf {
  char *data;
  size_t len;   /* bytes in use, from data[0] */
  size_t off;   /* bytes already consumed (written out) */
  size_t cap;
} redlock__buf;

/* Makes room for `extra` more bytes. 0 or REDLOCK_ENOMEM. */
int redlock__buf_reserve(redlock__buf *b, size_t extra);
int redlock__buf_append(redlock__buf *b, const void *p, size_t n);
/* Marks n more bytes consumed; resets to empty when all were. */
void redlock__buf_consume(redlock__buf *b, size_t n);
void redlock__buf_reset(redlock__buf *b);
void redlock__buf_free(redlock__buf *b);
static inline size_t redlock__buf_pending(const redlock__buf *b) {
  return b->len - b->off;
}

/* Decimal digits of v into out (at least 21 bytes), no NUL. Returns the
 * length. */
size_t redlock__fmt_i64(char *out, int64_t v);

/* Appends one command (argc bulk strings). 0 or REDLOCK_ENOMEM; on failure
 * the buffer is unchanged. */
int redlock__resp_cmd(redlock__buf *b, int argc, const char *const *argv,
                      const size_t *lens);
/* Writes one command at p (room for redlock__resp_size bytes); returns
 * its length. */
size_t redlock__resp_write(char *p, int argc, const char *const *argv,
                           const size_t *lens);
/* The encoded size of that command, in bytes; and the room the encoder
 * asks for (an upper bound, cheaper to compute). */
size_t redlock__resp_size(int argc, const size_t *lens);
size_t redlock__resp_bound(int argc, const size_t *lens);

#endif
