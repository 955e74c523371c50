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

/* ---- the short replies, without hiredis ----------------------------------
 * Most replies are tiny and of a few shapes: "+OK" (SET), ":1" (scripts),
 * "$-1" (nil), and TIME's two short bulk strings, which follows every
 * acquisition flush. hiredis spends hundreds of instructions on each
 * (a task stack, a callback per object); these are parsed here into the
 * same objects, from hiredis's own buffer, when no reply is in progress
 * in it (ridx == -1: the public reader state, the same from 0.14 to 1.x),
 * and its cursor is moved past them. Anything else, or anything not
 * complete yet, is left to hiredis. */

#define FAST_LINE_MAX 64   /* bytes of a status line or an integer */
#define FAST_BULK_MAX 32   /* bytes of each of the two bulk strings */

/* "\r\n" at p[n] for the first n in [0, max) with p[n] == '\r'; the
 * length n, or -1. */
static long line_len(const char *p, const char *end, long max) {
  long n;
  for (n = 0; n < max && p + n + 1 < end; n++)
    if (p[n] == '\r')
      return p[n + 1] == '\n' ? n : -1;
  return -1;
}

static redlock__reply *fast_obj(redlock__reader *r, redlock__reply_type t) {
  redlock__reply *o = arena_alloc(r, sizeof(*o));
  if (o != NULL) {
    memset(o, 0, sizeof(*o));
    o->type = t;
  }
  return o;
}

static redlock__reply *fast_string(redlock__reader *r, redlock__reply_type t,
                                   const char *p, size_t len) {
  char *copy = arena_alloc(r, len + 1);
  redlock__reply *o = copy != NULL ? fast_obj(r, t) : NULL;
  if (o == NULL)
    return NULL;
  memcpy(copy, p, len);
  copy[len] = '\0';
  o->str = copy;
  o->len = len;
  return o;
}

/* "$<len>\r\n<bytes>\r\n" with len <= FAST_BULK_MAX at p: where its
 * bytes are (*at, *len), *next past it; 0, or -1 if not that (or not
 * complete). */
static int fast_bulk(const char *p, const char *end, const char **at,
                     size_t *len, const char **next) {
  long hl, n = 0, i;
  if (p >= end || *p != '$')
    return -1;
  hl = line_len(p + 1, end, 3);
  if (hl <= 0)
    return -1;
  for (i = 0; i < hl; i++) {
    if (p[1 + i] < '0' || p[1 + i] > '9')
      return -1;
    n = n * 10 + (p[1 + i] - '0');
  }
  p += 1 + hl + 2;
  if (n > FAST_BULK_MAX || end - p < n + 2 || p[n] != '\r' ||
      p[n + 1] != '\n')
    return -1;
  *at = p;
  *len = (size_t)n;
  *next = p + n + 2;
  return 0;
}

#define FAST_OBJ_SIZE \
  ((sizeof(redlock__reply) + sizeof(void *) - 1) / sizeof(void *) * \
   sizeof(void *))
#define FAST_STR_SIZE(len) \
  (FAST_OBJ_SIZE + (((len) + 1 + sizeof(void *) - 1) / sizeof(void *) * \
                    sizeof(void *)))

/* A string object over `mem` (room for the object and len + 1 bytes);
 * decimal digits also give their value (TIME's seconds, microseconds).
 * The value is summed only while every byte so far is a digit and there
 * are at most 18 of them (< 10^18 fits a long long): a string of up to
 * FAST_BULK_MAX (32) bytes, or 18 bytes far below '0', once overflowed
 * it (issue 29, item 6; test-unit-reply). */
static redlock__reply *fast_place_string(char *mem, const char *p,
                                         size_t len) {
  redlock__reply *o = (redlock__reply *)(void *)mem;
  char *copy = mem + FAST_OBJ_SIZE;
  long long v = 0;
  int digits = len > 0 && len <= 18;
  size_t i;
  for (i = 0; i < len; i++) {
    char ch = p[i];
    copy[i] = ch;
    digits &= ch >= '0' && ch <= '9';
    if (digits)
      v = v * 10 + (ch - '0');
  }
  copy[len] = '\0';
  o->type = REDLOCK__R_STRING;
  o->integer = digits ? v : 0;
  o->digits = digits;
  o->elements = 0;
  o->element = NULL;
  o->str = copy;
  o->len = len;
  return o;
}

/* 1 with *out when a short reply was parsed at hiredis's cursor, else 0
 * (hiredis takes it). */
static int fast_reply(redlock__reader *r, redisReader *rd,
                      const redlock__reply **out) {
  const char *p = rd->buf + rd->pos;
  const char *end = rd->buf + rd->len;
  const char *next = NULL;
  redlock__reply *o = NULL;
  long n;
  if (rd->ridx != -1 || rd->err != 0 || end - p < 4)
    return 0;
  switch (*p) {
    case '+':
      n = line_len(p + 1, end, FAST_LINE_MAX);
      if (n < 0)
        return 0;
      o = fast_string(r, REDLOCK__R_STATUS, p + 1, (size_t)n);
      next = p + 1 + n + 2;
      break;
    case ':': {
      long long v = 0;
      long i = 1;
      int neg = p[1] == '-';
      n = line_len(p + 1, end, 21);
      if (n <= neg || n - neg > 18)
        return 0;
      for (i = 1 + neg; i < 1 + n; i++) {
        if (p[i] < '0' || p[i] > '9')
          return 0;
        v = v * 10 + (p[i] - '0');
      }
      o = fast_obj(r, REDLOCK__R_INTEGER);
      if (o != NULL)
        o->integer = neg ? -v : v;
      next = p + 1 + n + 2;
      break;
    }
    case '$':
      if (end - p < 5 || memcmp(p, "$-1\r\n", 5) != 0)
        return 0;
      o = fast_obj(r, REDLOCK__R_NIL);
      next = p + 5;
      break;
    case '*': {
      /* Two short bulk strings (TIME): one arena block for all. */
      const char *pa, *pb, *q;
      size_t la, lb;
      char *mem;
      if (memcmp(p, "*2\r\n", 4) != 0 ||
          fast_bulk(p + 4, end, &pa, &la, &q) != 0 ||
          fast_bulk(q, end, &pb, &lb, &next) != 0)
        return 0;
      mem = arena_alloc(r, FAST_OBJ_SIZE + 2 * sizeof(void *) +
                               FAST_STR_SIZE(la) + FAST_STR_SIZE(lb));
      if (mem == NULL)
        return 0;
      o = (redlock__reply *)(void *)mem;
      memset(o, 0, sizeof(*o));
      o->type = REDLOCK__R_ARRAY;
      o->elements = 2;
      o->element = (redlock__reply **)(void *)(mem + FAST_OBJ_SIZE);
      mem += FAST_OBJ_SIZE + 2 * sizeof(void *);
      o->element[0] = fast_place_string(mem, pa, la);
      o->element[1] = fast_place_string(mem + FAST_STR_SIZE(la), pb, lb);
      break;
    }
    default:
      return 0;
  }
  if (o == NULL)
    return 0;   /* out of arena: hiredis gets it (and fails the same) */
  rd->pos = (size_t)(next - rd->buf);
  *out = o;
  return 1;
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
  if (fast_reply(r, rd, out)) {
    r->delivered = 1;
    return 1;
  }
  if (rd->ridx == -1 && rd->pos == rd->len && rd->err == 0) {
    /* Nothing buffered: hiredis would start a reply (ridx 0) and keep
     * the short ones from the fast path until it completed another.
     * Only now and then let it drop the consumed bytes. */
    if (rd->pos >= 16384)
      (void)redisReaderGetReply(rd, NULL);
    return 0;
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

int redlock__reply_is(const redlock__reply *e, const char *s) {
  return e != NULL &&
         (e->type == REDLOCK__R_STRING || e->type == REDLOCK__R_STATUS) &&
         e->len == strlen(s) && memcmp(e->str, s, e->len) == 0;
}
