/* reply.h: typed replies and the RESP reader. The reader is hiredis's
 * (redisReader*: the same API from 0.14 to 1.x), building our own reply
 * objects in a per-reader arena: no allocation per reply once the arena
 * has grown, and no hiredis type above this file. */
#ifndef REDLOCK_REPLY_H
#define REDLOCK_REPLY_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  REDLOCK__R_STRING = 1,
  REDLOCK__R_ARRAY,
  REDLOCK__R_INTEGER,
  REDLOCK__R_NIL,
  REDLOCK__R_STATUS,
  REDLOCK__R_ERROR,
  REDLOCK__R_OTHER        /* RESP3 types we never ask for */
} redlock__reply_type;

typedef struct redlock__reply {
  redlock__reply_type type;
  long long integer;
  size_t len;                       /* STRING, STATUS, ERROR */
  const char *str;                  /* NUL-terminated */
  int digits;                       /* STRING of 1..18 decimal digits,
                                       their value in `integer` (set by
                                       the short-reply path only) */
  size_t elements;                  /* ARRAY */
  struct redlock__reply **element;
} redlock__reply;

typedef struct redlock__arena_chunk redlock__arena_chunk;

/* What a legitimate reply to our commands can be (INFO is a few KB, a
 * batch of renewals 256 integers, CLUSTER SLOTS at most 16384 ranges):
 * anything larger fails the connection with EPROTO, before memory is
 * committed to it. A server (or anything on the path without TLS) that
 * announces a billion elements costs us nothing. */
#define REDLOCK__REPLY_MAX_ELEMENTS 65536         /* per array */
#define REDLOCK__REPLY_MAX_BYTES (8u << 20)       /* one reply, buffered */
#define REDLOCK__ARENA_KEEP (64u << 10)           /* kept across replies */

typedef struct redlock__reader {
  void *rd;                         /* redisReader* */
  redlock__arena_chunk *chunks;     /* first chunk kept across resets */
  size_t used;                      /* in the first (current) chunk */
  int delivered;                    /* a complete reply was handed out */
  size_t arena_bytes;               /* allocated for the current reply */
  char limit[96];                   /* which bound a reply broke, or "" */
} redlock__reader;

/* 0 or REDLOCK_ENOMEM. */
int redlock__reader_init(redlock__reader *r);
void redlock__reader_free(redlock__reader *r);
/* Feeds bytes read from the server. 0 or REDLOCK_ENOMEM. */
int redlock__reader_feed(redlock__reader *r, const char *buf, size_t len);
/* The next complete reply: 1 with *out set, 0 when more input is needed,
 * REDLOCK_EPROTO on a protocol error or a reply beyond the bounds above
 * (msg says which) or REDLOCK_ENOMEM. *out is valid until the next call
 * on this reader. After an error the reader is not used again. */
int redlock__reader_next(redlock__reader *r, const redlock__reply **out,
                         const char **msg);
/* e is a string or status reply equal to s (false for NULL). */
int redlock__reply_is(const redlock__reply *e, const char *s);

#endif
