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
  size_t elements;                  /* ARRAY */
  struct redlock__reply **element;
} redlock__reply;

typedef struct redlock__arena_chunk redlock__arena_chunk;

typedef struct redlock__reader {
  void *rd;                         /* redisReader* */
  redlock__arena_chunk *chunks;     /* first chunk kept across resets */
  size_t used;                      /* in the first (current) chunk */
  int delivered;                    /* a complete reply was handed out */
} redlock__reader;

/* 0 or REDLOCK_ENOMEM. */
int redlock__reader_init(redlock__reader *r);
void redlock__reader_free(redlock__reader *r);
/* Feeds bytes read from the server. 0 or REDLOCK_ENOMEM. */
int redlock__reader_feed(redlock__reader *r, const char *buf, size_t len);
/* The next complete reply: 1 with *out set, 0 when more input is needed,
 * REDLOCK_EPROTO on a protocol error (msg gets the reader's text) or
 * REDLOCK_ENOMEM. *out is valid until the next call on this reader. */
int redlock__reader_next(redlock__reader *r, const redlock__reply **out,
                         const char **msg);

#endif
