/* reply.c: the RESP reader. The only file of lib/ that includes hiredis.
 *
 * Owns: a hiredis redisReader set up with our own object functions, and
 * the arena those objects live in. hiredis parses; each reply it builds is
 * a tree of redlock__reply in the arena. The caller consumes one complete
 * reply at a time (redlock__reader_next); the arena is reset before the
 * next one is parsed, so steady traffic allocates nothing. Does not own:
 * sockets (conn.c) or what a reply means (scripts.c).
 *
 * Bounds (reply.h): an array announcing more than
 * REDLOCK__REPLY_MAX_ELEMENTS elements is refused when its header is
 * parsed (hiredis 0.14 would allocate and zero them all up front), and a
 * reply that holds more than REDLOCK__REPLY_MAX_BYTES, buffered or built,
 * is refused as it grows: a long bulk string is buffered by hiredis until
 * complete, so the unparsed input is measured after every feed. Nesting
 * is bounded by hiredis itself (7 levels). After a reply the arena keeps
 * one chunk of at most REDLOCK__ARENA_KEEP bytes: one large reply does not
 * pin its memory for the life of the connection.
 *
 * hiredis's reader API (redisReaderCreateWithFunctions, Feed, GetReply,
 * redisReadTask's parent/idx/privdata) is the same from 0.14 to 1.x, except
 * that 1.x passes array sizes as size_t and adds RESP3 constructors; both
 * are covered below, so the same code builds against either. */
#include <stdio.h>
#include <string.h>

#include <hiredis.h>

#include "redlock.h"
#include "alloc.h"
#include "reply.h"

#define CHUNK_MIN 4096   /* bytes */

struct redlock__arena_chunk {
  redlock__arena_chunk *next;
  size_t size;
  /* data follows, max-aligned */
};

#define CHUNK_HDR                                                           \
  ((sizeof(redlock__arena_chunk) + sizeof(long double) - 1) /               \
   sizeof(long double) * sizeof(long double))

static void *arena_alloc(redlock__reader *r, size_t size) {
  redlock__arena_chunk *c = r->chunks;
  size = (size + sizeof(void *) - 1) & ~(sizeof(void *) - 1);
  if (size > REDLOCK__REPLY_MAX_BYTES ||
      r->arena_bytes + size > REDLOCK__REPLY_MAX_BYTES) {
    snprintf(r->limit, sizeof(r->limit),
             "reply too large (more than %u bytes)",
             (unsigned)REDLOCK__REPLY_MAX_BYTES);
    return NULL;
  }
  r->arena_bytes += size;
  if (c == NULL || r->used + size > c->size) {
    size_t want = size > CHUNK_MIN ? size : CHUNK_MIN;
    redlock__arena_chunk *n = redlock__malloc(CHUNK_HDR + want);
    if (n == NULL)
      return NULL;
    n->size = want;
    n->next = c;
    r->chunks = n;
    r->used = 0;
    c = n;
  }
  r->used += size;
  return (char *)c + CHUNK_HDR + r->used - size;
}

/* Frees every chunk but the largest one of at most REDLOCK__ARENA_KEEP
 * bytes, which is kept empty. */
static void arena_reset(redlock__reader *r) {
  redlock__arena_chunk *keep = NULL;
  redlock__arena_chunk *c;
  for (c = r->chunks; c != NULL; c = c->next)
    if (c->size <= REDLOCK__ARENA_KEEP && (keep == NULL ||
                                           c->size > keep->size))
      keep = c;
  c = r->chunks;
  while (c != NULL) {
    redlock__arena_chunk *next = c->next;
    if (c != keep)
      redlock__free(c);
    c = next;
  }
  if (keep != NULL)
    keep->next = NULL;
  r->chunks = keep;
  r->used = 0;
  r->arena_bytes = 0;
}

static redlock__reply *new_obj(const redisReadTask *task,
                               redlock__reply_type type) {
  redlock__reader *r = task->privdata;
  redlock__reply *o = arena_alloc(r, sizeof(*o));
  if (o == NULL)
    return NULL;
  memset(o, 0, sizeof(*o));
  o->type = type;
  if (task->parent != NULL) {
    redlock__reply *parent = task->parent->obj;
    parent->element[task->idx] = o;
  }
  return o;
}

static redlock__reply_type map_type(int t) {
  switch (t) {
    case REDIS_REPLY_STRING:
      return REDLOCK__R_STRING;
    case REDIS_REPLY_STATUS:
      return REDLOCK__R_STATUS;
    case REDIS_REPLY_ERROR:
      return REDLOCK__R_ERROR;
    default:
      return REDLOCK__R_OTHER;
  }
}

static void *create_string(const redisReadTask *task, char *str,
                           size_t len) {
  redlock__reader *r = task->privdata;
  redlock__reply *o;
  char *copy = arena_alloc(r, len + 1);
  if (copy == NULL)
    return NULL;
  o = new_obj(task, map_type(task->type));
  if (o == NULL)
    return NULL;
  memcpy(copy, str, len);
  copy[len] = '\0';
  o->str = copy;
  o->len = len;
  return o;
}

static void *create_array_n(const redisReadTask *task, size_t n) {
  redlock__reader *r = task->privdata;
  redlock__reply *o;
  redlock__reply **el = NULL;
  if (n > REDLOCK__REPLY_MAX_ELEMENTS) {
    snprintf(r->limit, sizeof(r->limit),
             "reply too large (an array of %zu elements, at most %u)", n,
             (unsigned)REDLOCK__REPLY_MAX_ELEMENTS);
    return NULL;
  }
  if (n > 0) {
    if (n > SIZE_MAX / sizeof(*el))
      return NULL;
    el = arena_alloc(r, n * sizeof(*el));
    if (el == NULL)
      return NULL;
    memset(el, 0, n * sizeof(*el));
  }
  o = new_obj(task, REDLOCK__R_ARRAY);
  if (o == NULL)
    return NULL;
  o->elements = n;
  o->element = el;
  return o;
}

#if HIREDIS_MAJOR >= 1
static void *create_array(const redisReadTask *task, size_t n) {
  return create_array_n(task, n);
}
#else
static void *create_array(const redisReadTask *task, int n) {
  return create_array_n(task, n > 0 ? (size_t)n : 0);
}
#endif

static void *create_integer(const redisReadTask *task, long long v) {
  redlock__reply *o = new_obj(task, REDLOCK__R_INTEGER);
  if (o != NULL)
    o->integer = v;
  return o;
}

static void *create_nil(const redisReadTask *task) {
  return new_obj(task, REDLOCK__R_NIL);
}

#if HIREDIS_MAJOR >= 1
static void *create_double(const redisReadTask *task, double d, char *str,
                           size_t len) {
  (void)d;
  (void)str;
  (void)len;
  return new_obj(task, REDLOCK__R_OTHER);
}

static void *create_bool(const redisReadTask *task, int b) {
  (void)b;
  return new_obj(task, REDLOCK__R_OTHER);
}
#endif

static void free_object(void *obj) {
  (void)obj;   /* arena memory: released by arena_reset */
}

static redisReplyObjectFunctions functions = {
    .createString = create_string,
    .createArray = create_array,
    .createInteger = create_integer,
#if HIREDIS_MAJOR >= 1
    .createDouble = create_double,
    .createBool = create_bool,
#endif
    .createNil = create_nil,
    .freeObject = free_object,
};

int redlock__reader_init(redlock__reader *r) {
  redisReader *rd;
  memset(r, 0, sizeof(*r));
  rd = redisReaderCreateWithFunctions(&functions);
  if (rd == NULL)
    return REDLOCK_ENOMEM;
  rd->privdata = r;
  r->rd = rd;
  return 0;
}

void redlock__reader_free(redlock__reader *r) {
  redlock__arena_chunk *c = r->chunks;
  if (r->rd != NULL)
    redisReaderFree(r->rd);
  while (c != NULL) {
    redlock__arena_chunk *next = c->next;
    redlock__free(c);
    c = next;
  }
  memset(r, 0, sizeof(*r));
}

int redlock__reader_feed(redlock__reader *r, const char *buf, size_t len) {
  return redisReaderFeed(r->rd, buf, len) == REDIS_OK ? 0 : REDLOCK_ENOMEM;
}

/* Input buffered for the reply being parsed. */
static size_t unparsed(const redisReader *rd) {
  return rd->len > rd->pos ? rd->len - rd->pos : 0;
}

int redlock__reader_next(redlock__reader *r, const redlock__reply **out,
                         const char **msg) {
  redisReader *rd = r->rd;
  void *reply = NULL;
  *out = NULL;
  if (r->delivered) {
    /* The last reply was consumed and no new one was started: its
     * objects can go (a partial reply's objects must stay). */
    arena_reset(r);
    r->delivered = 0;
  }
  if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
    if (r->limit[0] != '\0') {
      *msg = r->limit;   /* a bound, not memory: hiredis said OOM */
      return REDLOCK_EPROTO;
    }
    *msg = rd->errstr;
    return rd->err == REDIS_ERR_OOM ? REDLOCK_ENOMEM : REDLOCK_EPROTO;
  }
  if (reply == NULL) {
    if (unparsed(rd) > REDLOCK__REPLY_MAX_BYTES) {
      snprintf(r->limit, sizeof(r->limit),
               "reply too large (more than %u bytes)",
               (unsigned)REDLOCK__REPLY_MAX_BYTES);
      *msg = r->limit;
      return REDLOCK_EPROTO;
    }
    return 0;
  }
  *out = reply;
  r->delivered = 1;
  return 1;
}
