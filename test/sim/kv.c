/* kv.c: one simulated Redis 7.0 server's keys and commands (kv.h), for
 * the deterministic simulator (issue 31).
 *
 * Owns: the keyspace (16 dbs of strings and hashes, expiries in ms on the
 * server's wall clock), the script cache, the configuration the library
 * reads or sets, and the execution of one command: the command table at
 * the end, each handler answering as Redis 7.0 does (replies and error
 * texts checked against a real redis-server by test-sim-diff.c), and a C
 * twin of each of the library's Lua scripts (lib/base/scripts.c), which
 * EVAL and EVALSHA run instead of Lua; any other script (a mutant's: a
 * changed text) runs in Lua 5.1 with redis.call on the same handlers
 * (run_lua), checked against Redis by test-sim-diff too.
 *
 * Does not own: connections, time, persistence, replication, pub/sub
 * receivers, cluster routing and INFO's facts: the world gives them
 * through simkv_ctx and simkv_conn (sim.c).
 *
 * Invariants:
 *  - A key with an expiry E (ms) is live while now_ms <= E, as Redis's
 *    keyIsExpired (now > when): PTTL says 0 in E's own millisecond. A
 *    dead key is never seen: a command that touches it removes it first
 *    (lazy expiry), and every command sweeps a few slots of its db
 *    (active expiry), so memory stays bounded; no reply depends on when
 *    a dead key goes.
 *  - One clock per exec: ctx->now_us is the command's time, a script's
 *    start time (its expiry checks) and what TIME says inside it.
 *  - A hash keeps its fields in insertion order and a field updated in
 *    place keeps its place, as Redis's listpack encoding does (up to 128
 *    fields of at most 64 bytes): HGETALL and HKEYS answer in that order,
 *    and the read-write twins walk it as the Lua scripts do.
 *  - A twin calls the same handlers as the commands through rcall(), its
 *    redis.call: the same arity, options and errors, the reply parsed back
 *    into what Lua would see. Lua's numbers are C doubles, parsed and
 *    printed with the C library calls Redis's Lua 5.1 uses (strtod,
 *    "%.17g" for redis.call's arguments, a cast for string.format('%d')
 *    and for integer replies), so every conversion matches.
 *  - Every integer a script returns goes through a Lua number, a double:
 *    INCR's 2^63 - 1 comes back as INT64_MIN, as from Redis.
 *  - No allocation per command once warm: a deleted key goes to a free
 *    list with its buffers, script calls reuse their reply slots (about
 *    a quarter of a microsecond per lock command, scripts included).
 *
 * The world's part of a command: it connects simkv_conn with authed set
 * when requirepass is empty (Redis's rule for a new connection), answers
 * SUBSCRIBE and the other connection commands itself, and applies a
 * master's writes to a replica's kv with a ctx whose role is not "slave"
 * (a replica refuses writes from its clients: READONLY). It counts in
 * info->connected_slaves the replicas within min-replicas-max-lag (the
 * good ones, for NOREPLICAS).
 *
 * Not modelled (documented, not needed by the library): in Lua, the
 * sandbox (globals are not protected), redis.log, redis.sha1hex,
 * redis.setresp and cjson; INFO's sections other
 * than server, persistence, replication, cluster and keyspace, and most
 * of their fields; CONFIG parameters other than the seven the library and
 * the simulator use (CONFIG GET's patterns match those only, several
 * names answer in the order asked: Redis's order is its dict's); ACL
 * users other than "default"; the hashtable encoding's field order of a
 * hash beyond the listpack's limits; MULTI/EXEC, WAIT, OOM and MISCONF
 * errors, busy scripts, SCRIPT KILL; DBSIZE counts live keys only (Redis
 * also counts expired keys not yet removed); exec returns 0 for a command
 * that only removed an expired key (Redis propagates a DEL); a twin takes
 * any number of keys (Lua's unpack stops near 8000). */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "kv.h"
#include "pure.h"
#include "scripts.h"

#define NDB 16
#define NSLOT 8          /* reply slots of a twin's calls */
#define NSB 6            /* string builders of a twin */
#define SWEEP_STEPS 4    /* table slots the active expiry looks at */

/* ---- types --------------------------------------------------------------*/

enum { T_STR = 1, T_HASH = 2 };

/* A hash field: its name's bytes, then its value's, in one buffer. */
typedef struct hfield {
  char *p;
  size_t flen, vlen, cap;
} hfield;

typedef struct entry {
  uint64_t hash;
  char *key;
  size_t klen, kcap;
  int type;
  int64_t expire;          /* ms, -1: none */
  char *s;                 /* T_STR */
  size_t slen, scap;
  hfield *f;               /* T_HASH: nf fields, in order */
  size_t nf, fcap;
  struct entry *next_free;
} entry;

/* Open addressing, linear probing, deletion by backward shift (no
 * tombstones); at most half full. */
typedef struct kdb {
  entry **slot;
  size_t cap;              /* 0 or a power of two */
  size_t n;
  size_t sweep;            /* the next slot the active expiry looks at */
} kdb;

/* A byte string of Lua's: p NULL is nil. */
typedef struct lstr {
  const char *p;
  size_t n;
} lstr;

/* A reply a twin's call got (one level of array: no call of a twin
 * answers nested arrays). Texts point into the slot's output buffer. */
enum { R_STATUS, R_ERR, R_INT, R_BULK, R_NIL, R_ARR };
typedef struct lrep {
  int type;
  int64_t i;
  const char *s;
  size_t n;
  struct lrep *el;
  size_t nel, elcap;
} lrep;

typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

typedef struct scached {
  char sha[41];
  int twin;                /* a redlock__cmd, or -1: not the library's */
  char *text;              /* twin -1: the text, run in Lua (run_lua) */
  size_t tlen;
} scached;

enum {
  CF_APPENDONLY,
  CF_APPENDFSYNC,
  CF_MINREP,
  CF_MINLAG,
  CF_SAVE,
  CF_REQUIREPASS,
  CF_POLICY,
  CF_N
};

struct simkv {
  kdb db[NDB];
  entry *free_list;
  char *conf[CF_N];
  scached *sc;
  size_t nsc, csc;
  /* A twin's scratch: reply slots, string builders, argument vectors and
   * result arrays, kept across execs. */
  simkv_out slot_out[NSLOT];
  lrep slot_rep[NSLOT];
  sbuf sb[NSB];
  const char **cargv;
  size_t *clens;
  size_t ccap;
  lstr *lbuf;
  size_t lcap;
  int64_t *ibuf;
  size_t icap;
  double *dbuf;
  size_t dcap;
  int oom;
};

/* One command's execution. */
typedef struct run {
  simkv *kv;
  simkv_conn *conn;
  const simkv_ctx *ctx;
  int64_t now_us, now_ms;
  kdb *db;
  int argc;
  const char *const *argv;
  const size_t *lens;
  simkv_out *out;
  int wrote;
} run;

/* ---- memory (malloc, realloc and free only) ------------------------- */

static void *zalloc(size_t n, size_t size) {
  void *p;
  if (size != 0 && n > SIZE_MAX / size)
    return NULL;
  p = malloc(n * size);
  if (p != NULL)
    memset(p, 0, n * size);
  return p;
}

static char *copy_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p != NULL)
    memcpy(p, s, n);
  return p;
}

/* ---- output ----------------------------------------------------------- */

static int out_reserve(simkv *kv, simkv_out *o, size_t n) {
  size_t cap;
  char *p;
  if (kv->oom)
    return -1;
  if (o->len + n <= o->cap)
    return 0;
  cap = o->cap ? o->cap : 128;
  while (cap < o->len + n)
    cap *= 2;
  p = realloc(o->p, cap);
  if (p == NULL) {
    kv->oom = 1;
    return -1;
  }
  o->p = p;
  o->cap = cap;
  return 0;
}

static void out_raw(run *R, const char *p, size_t n) {
  if (out_reserve(R->kv, R->out, n) != 0)
    return;
  memcpy(R->out->p + R->out->len, p, n);
  R->out->len += n;
}

static void out_lit(run *R, const char *s) {
  out_raw(R, s, strlen(s));
}

/* Decimal digits of v into b (no NUL): their count. snprintf costs a
 * tenth of a simulated run; replies are mostly numbers. */
static size_t fmt_i64(char *b, int64_t v) {
  char t[24];
  size_t n = 0, k = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    t[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0)
    b[k++] = '-';
  while (n > 0)
    b[k++] = t[--n];
  return k;
}

static void out_int(run *R, int64_t v) {
  char b[32];
  size_t n;
  b[0] = ':';
  n = 1 + fmt_i64(b + 1, v);
  b[n++] = '\r';
  b[n++] = '\n';
  out_raw(R, b, n);
}

static void out_head(run *R, char c, size_t len) {
  char b[32];
  size_t n;
  b[0] = c;
  n = 1 + fmt_i64(b + 1, (int64_t)len);
  b[n++] = '\r';
  b[n++] = '\n';
  out_raw(R, b, n);
}

static void out_bulk(run *R, const char *p, size_t n) {
  out_head(R, '$', n);
  out_raw(R, p, n);
  out_raw(R, "\r\n", 2);
}

static void out_bulk_ll(run *R, int64_t v) {
  char b[32];
  size_t n = fmt_i64(b, v);
  out_bulk(R, b, n);
}

static void out_nil(run *R) {
  out_raw(R, "$-1\r\n", 5);
}

static void out_arr(run *R, size_t n) {
  out_head(R, '*', n);
}

static void out_ok(run *R) {
  out_raw(R, "+OK\r\n", 5);
}

/* "-<text>\r\n", CR and LF in the text turned into spaces (Redis's
 * addReplyErrorFormat). */
static void out_verr(run *R, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void out_verr(run *R, const char *fmt, va_list ap) {
  va_list ap2;
  int n;
  size_t i, at;
  va_copy(ap2, ap);
  n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || out_reserve(R->kv, R->out, (size_t)n + 4) != 0)
    return;
  at = R->out->len;
  R->out->p[at] = '-';
  vsnprintf(R->out->p + at + 1, (size_t)n + 1, fmt, ap);
  for (i = at + 1; i < at + 1 + (size_t)n; i++)
    if (R->out->p[i] == '\r' || R->out->p[i] == '\n')
      R->out->p[i] = ' ';
  memcpy(R->out->p + at + 1 + n, "\r\n", 2);
  R->out->len = at + 3 + (size_t)n;
}

static void out_err(run *R, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void out_err(run *R, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  out_verr(R, fmt, ap);
  va_end(ap);
}

static const char E_INT[] = "ERR value is not an integer or out of range";
static const char E_TYPE[] =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
static const char E_SYNTAX[] = "ERR syntax error";

/* ---- parsing ---------------------------------------------------------- */

static int ieq(const char *p, size_t n, const char *lit) {
  return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

/* Redis's string2ll: an optional '-', no leading zeros, no spaces, no
 * '+', 1 to 20 characters, in range. */
static int str2ll(const char *p, size_t n, int64_t *out) {
  size_t i = 0;
  int neg = 0;
  uint64_t v;
  if (n == 0 || n > 20)
    return 0;
  if (n == 1 && p[0] == '0') {
    *out = 0;
    return 1;
  }
  if (p[0] == '-') {
    neg = 1;
    if (++i == n)
      return 0;
  }
  if (p[i] < '1' || p[i] > '9')
    return 0;
  v = (uint64_t)(p[i++] - '0');
  for (; i < n; i++) {
    unsigned d;
    if (p[i] < '0' || p[i] > '9')
      return 0;
    d = (unsigned)(p[i] - '0');
    if (v > (UINT64_MAX - d) / 10)
      return 0;
    v = v * 10 + d;
  }
  if (neg) {
    if (v > (uint64_t)INT64_MAX + 1)
      return 0;
    *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
  } else {
    if (v > (uint64_t)INT64_MAX)
      return 0;
    *out = (int64_t)v;
  }
  return 1;
}

/* ---- Lua 5.1's conversions ---------------------------------------------- */

/* tonumber() of a string (luaO_str2d over the C string: up to a NUL):
 * strtod, a hexadecimal integer when strtod stops at an 'x', trailing
 * spaces allowed. 0: nil. */
static int lua_tonum(simkv *kv, const char *p, size_t n, double *out) {
  char local[96], *s = local, *end;
  const char *z = memchr(p, '\0', n);
  double d;
  int ok = 0;
  if (z != NULL)
    n = (size_t)(z - p);
  if (n >= sizeof(local)) {
    s = malloc(n + 1);
    if (s == NULL) {
      kv->oom = 1;
      return 0;
    }
  }
  memcpy(s, p, n);
  s[n] = '\0';
  d = strtod(s, &end);
  if (end != s) {
    if (*end == 'x' || *end == 'X')
      d = (double)strtoul(s, &end, 16);
    while (isspace((unsigned char)*end))
      end++;
    ok = *end == '\0';
  }
  if (s != local)
    free(s);
  if (ok)
    *out = d;
  return ok;
}

/* A double cast to a 64-bit integer as x86-64 does it (Redis's integer
 * replies of Lua numbers, string.format('%d')): the integer indefinite,
 * INT64_MIN, out of range and for NaN. */
static int64_t lua_int(double d) {
  if (d != d || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)d;
}

/* A Lua number as redis.call passes it: "%.17g". */
static lstr lua_num(double d, char buf[40]) {
  lstr r;
  r.n = (size_t)snprintf(buf, 40, "%.17g", d);
  r.p = buf;
  return r;
}

/* ---- keys ------------------------------------------------------------- */

static uint64_t hash_bytes(const char *p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    h = (h ^ (unsigned char)*p++) * 0x100000001b3ULL;
    n--;
  }
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

static int dead(const entry *e, int64_t now_ms) {
  return e->expire >= 0 && e->expire < now_ms;
}

/* The slot of a key (dead or live) or -1. */
static long db_find(const kdb *d, const char *k, size_t n, uint64_t h) {
  size_t i;
  if (d->cap == 0)
    return -1;
  for (i = h & (d->cap - 1); d->slot[i] != NULL; i = (i + 1) & (d->cap - 1)) {
    const entry *e = d->slot[i];
    if (e->hash == h && e->klen == n && memcmp(e->key, k, n) == 0)
      return (long)i;
  }
  return -1;
}

static void hash_clear(entry *e) {
  size_t i;
  for (i = 0; i < e->nf; i++)
    free(e->f[i].p);
  free(e->f);
  e->f = NULL;
  e->nf = e->fcap = 0;
}

static void entry_free(entry *e) {
  hash_clear(e);
  free(e->key);
  free(e->s);
  free(e);
}

/* Removes the entry in slot i (to the free list, with its buffers) and
 * shifts the entries after it back (linear probing's deletion). */
static void db_remove(simkv *kv, kdb *d, size_t i) {
  size_t mask = d->cap - 1, j = i;
  entry *e = d->slot[i];
  hash_clear(e);
  e->type = 0;
  e->next_free = kv->free_list;
  kv->free_list = e;
  d->slot[i] = NULL;
  d->n--;
  for (;;) {
    size_t home;
    j = (j + 1) & mask;
    if (d->slot[j] == NULL)
      break;
    home = d->slot[j]->hash & mask;
    /* Stays when its home is cyclically in (i, j]. */
    if (i <= j ? (home > i && home <= j) : (home > i || home <= j))
      continue;
    d->slot[i] = d->slot[j];
    d->slot[j] = NULL;
    i = j;
  }
}

static int db_grow(simkv *kv, kdb *d) {
  size_t cap = d->cap ? d->cap * 2 : 16, i;
  entry **s = zalloc(cap, sizeof(*s));
  if (s == NULL) {
    kv->oom = 1;
    return -1;
  }
  for (i = 0; i < d->cap; i++) {
    entry *e = d->slot[i];
    size_t j;
    if (e == NULL)
      continue;
    for (j = e->hash & (cap - 1); s[j] != NULL; j = (j + 1) & (cap - 1))
      ;
    s[j] = e;
  }
  free(d->slot);
  d->slot = s;
  d->cap = cap;
  return 0;
}

/* A new key (not in d), empty, of `type`, without expiry. */
static entry *db_add(simkv *kv, kdb *d, const char *k, size_t n, int type) {
  uint64_t h = hash_bytes(k, n);
  entry *e = kv->free_list;
  size_t i;
  if ((d->n + 1) * 2 > d->cap && db_grow(kv, d) != 0)
    return NULL;
  if (e != NULL) {
    kv->free_list = e->next_free;
  } else {
    e = zalloc(1, sizeof(*e));
    if (e == NULL) {
      kv->oom = 1;
      return NULL;
    }
  }
  if (e->kcap < n + 1) {
    char *p = realloc(e->key, n + 1);
    if (p == NULL) {
      e->next_free = kv->free_list;
      kv->free_list = e;
      kv->oom = 1;
      return NULL;
    }
    e->key = p;
    e->kcap = n + 1;
  }
  memcpy(e->key, k, n);
  e->key[n] = '\0';
  e->klen = n;
  e->hash = h;
  e->type = type;
  e->expire = -1;
  e->slen = 0;
  e->nf = 0;
  e->next_free = NULL;
  for (i = h & (d->cap - 1); d->slot[i] != NULL; i = (i + 1) & (d->cap - 1))
    ;
  d->slot[i] = e;
  d->n++;
  return e;
}

/* The live key k of the command's db, or NULL (a dead one goes first). */
static entry *lookup(run *R, const char *k, size_t n) {
  long i = db_find(R->db, k, n, hash_bytes(k, n));
  entry *e;
  if (i < 0)
    return NULL;
  e = R->db->slot[i];
  if (dead(e, R->now_ms)) {
    db_remove(R->kv, R->db, (size_t)i);
    return NULL;
  }
  return e;
}

static void key_delete(run *R, entry *e) {
  long i = db_find(R->db, e->key, e->klen, e->hash);
  if (i >= 0)
    db_remove(R->kv, R->db, (size_t)i);
}

static int str_assign(simkv *kv, entry *e, const char *v, size_t n) {
  if (e->scap < n + 1) {
    size_t cap = n + 1 < 32 ? 32 : n + 1;
    char *p = realloc(e->s, cap);
    if (p == NULL) {
      kv->oom = 1;
      return -1;
    }
    e->s = p;
    e->scap = cap;
  }
  memcpy(e->s, v, n);
  e->s[n] = '\0';
  e->slen = n;
  return 0;
}

/* Active expiry: a few slots of the db at every command. */
static void sweep(run *R) {
  kdb *d = R->db;
  int k;
  for (k = 0; k < SWEEP_STEPS && d->n > 0; k++) {
    size_t i = d->sweep & (d->cap - 1);
    entry *e = d->slot[i];
    if (e != NULL && dead(e, R->now_ms))
      db_remove(R->kv, d, i);   /* a later entry may move into i */
    else
      d->sweep = i + 1;
  }
}

/* ---- hash fields ------------------------------------------------------ */

static long hf_find(const entry *e, const char *f, size_t n) {
  size_t i;
  for (i = 0; i < e->nf; i++)
    if (e->f[i].flen == n && memcmp(e->f[i].p, f, n) == 0)
      return (long)i;
  return -1;
}

/* Sets a field: 1 added (at the end), 0 updated in place, -1 no memory. */
static int hf_set(simkv *kv, entry *e, const char *f, size_t fn,
                  const char *v, size_t vn) {
  long i = hf_find(e, f, fn);
  hfield *x;
  if (i < 0) {
    if (e->nf == e->fcap) {
      size_t cap = e->fcap ? e->fcap * 2 : 4;
      hfield *a = realloc(e->f, cap * sizeof(*a));
      if (a == NULL) {
        kv->oom = 1;
        return -1;
      }
      e->f = a;
      e->fcap = cap;
    }
    x = &e->f[e->nf];
    x->p = NULL;
    x->cap = 0;
    x->flen = fn;
  } else {
    x = &e->f[i];
  }
  if (x->cap < fn + vn + 1) {
    char *p = realloc(x->p, fn + vn + 1);
    if (p == NULL) {
      kv->oom = 1;
      return -1;
    }
    x->p = p;
    x->cap = fn + vn + 1;
  }
  if (i < 0)
    memcpy(x->p, f, fn);
  memcpy(x->p + fn, v, vn);
  x->vlen = vn;
  if (i < 0) {
    e->nf++;
    return 1;
  }
  return 0;
}

static void hf_del(entry *e, size_t i) {
  free(e->f[i].p);
  memmove(&e->f[i], &e->f[i + 1], (e->nf - i - 1) * sizeof(e->f[0]));
  e->nf--;
}

/* ---- config ----------------------------------------------------------- */

enum { K_BOOL, K_ENUM, K_INT, K_SAVE, K_STR };

static const char *const fsync_names[] = {"everysec", "always", "no", NULL};
static const char *const policy_names[] = {
    "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
    "allkeys-lru",  "allkeys-lfu",  "allkeys-random",  "noeviction",
    NULL};

static const struct cfdef {
  const char *name;
  const char *def;         /* Redis 7.0's compiled-in default */
  int kind;
  const char *const *names;
  const char *enum_err;    /* K_ENUM: Redis's error */
} cfdefs[CF_N] = {
    [CF_APPENDONLY] = {"appendonly", "no", K_BOOL, NULL, NULL},
    [CF_APPENDFSYNC] = {"appendfsync", "everysec", K_ENUM, fsync_names,
                        "argument(s) must be one of the following: "
                        "everysec, always, no"},
    [CF_MINREP] = {"min-replicas-to-write", "0", K_INT, NULL, NULL},
    [CF_MINLAG] = {"min-replicas-max-lag", "10", K_INT, NULL, NULL},
    [CF_SAVE] = {"save", "3600 1 300 100 60 10000", K_SAVE, NULL, NULL},
    [CF_REQUIREPASS] = {"requirepass", "", K_STR, NULL, NULL},
    [CF_POLICY] = {"maxmemory-policy", "noeviction", K_ENUM, policy_names,
                   "argument(s) must be one of the following: "
                   "volatile-lru, volatile-lfu, volatile-random, "
                   "volatile-ttl, allkeys-lru, allkeys-lfu, "
                   "allkeys-random, noeviction"},
};

static int cf_index(const char *p, size_t n) {
  int i;
  for (i = 0; i < CF_N; i++)
    if (ieq(p, n, cfdefs[i].name))
      return i;
  return -1;
}

/* Checks a value for config i: NULL and *canon (malloc'ed, the value as
 * CONFIG GET shows it), or Redis's reason (*canon NULL when out of
 * memory: "" returned). */
static const char *cf_check(int i, const char *v, size_t n, char **canon) {
  const struct cfdef *c = &cfdefs[i];
  char buf[256];
  const char *val = buf;
  size_t len = 0;
  *canon = NULL;
  switch (c->kind) {
    case K_BOOL:
      if (ieq(v, n, "yes"))
        val = "yes";
      else if (ieq(v, n, "no"))
        val = "no";
      else
        return "argument must be 'yes' or 'no'";
      len = strlen(val);
      break;
    case K_ENUM: {
      int k;
      for (k = 0; c->names[k] != NULL; k++)
        if (ieq(v, n, c->names[k]))
          break;
      if (c->names[k] == NULL)
        return c->enum_err;
      val = c->names[k];
      len = strlen(val);
      break;
    }
    case K_INT: {
      int64_t x;
      if (!str2ll(v, n, &x))
        return "argument couldn't be parsed into an integer";
      if (x < 0 || x > INT_MAX)
        return "argument must be between 0 and 2147483647 inclusive";
      len = (size_t)snprintf(buf, sizeof(buf), "%" PRId64, x);
      break;
    }
    case K_SAVE: {
      /* Words split at each single space; pairs of seconds >= 1 and
       * changes >= 0 (strtoll to the word's end); shown re-printed. */
      size_t at = 0, words = 0;
      if (n >= 200)
        return "Invalid save parameters";
      while (n > 0 && at <= n) {
        const char *sp = memchr(v + at, ' ', n - at);
        size_t wl = sp != NULL ? (size_t)(sp - (v + at)) : n - at;
        char w[201], *end;
        long long x;
        memcpy(w, v + at, wl);
        w[wl] = '\0';
        x = strtoll(w, &end, 10);
        if (*end != '\0' || ((words & 1) == 0 && x < 1) ||
            ((words & 1) == 1 && x < 0))
          return "Invalid save parameters";
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%lld",
                                words ? " " : "", x);
        words++;
        at += wl + 1;
        if (sp == NULL)
          break;
      }
      if (words & 1)
        return "Invalid save parameters";
      break;
    }
    default:
      val = v;
      len = n;
      break;
  }
  *canon = malloc(len + 1);
  if (*canon == NULL)
    return "";
  memcpy(*canon, val, len);
  (*canon)[len] = '\0';
  return NULL;
}

static int cf_int(const simkv *kv, int i) {
  return atoi(kv->conf[i]);
}

const char *simkv_config(const simkv *kv, const char *name) {
  int i = cf_index(name, strlen(name));
  return i < 0 ? NULL : kv->conf[i];
}

int simkv_config_set(simkv *kv, const char *name, const char *value) {
  int i = cf_index(name, strlen(name));
  char *canon;
  if (i < 0 || cf_check(i, value, strlen(value), &canon) != NULL)
    return -1;
  free(kv->conf[i]);
  kv->conf[i] = canon;
  return 0;
}

/* ---- the server's state ----------------------------------------------- */

static int is_replica(const run *R) {
  return R->ctx != NULL && R->ctx->info != NULL &&
         R->ctx->info->role != NULL &&
         strcmp(R->ctx->info->role, "slave") == 0;
}

/* Redis's checkGoodReplicasStatus: the world counts in connected_slaves
 * the replicas whose lag is within min-replicas-max-lag. */
static int good_replicas(const run *R) {
  int need = cf_int(R->kv, CF_MINREP);
  int have = R->ctx != NULL && R->ctx->info != NULL
                 ? R->ctx->info->connected_slaves
                 : 0;
  return is_replica(R) || cf_int(R->kv, CF_MINLAG) == 0 || need == 0 ||
         have >= need;
}

static int cluster(const run *R) {
  return R->ctx != NULL && R->ctx->route != NULL;
}

/* ---- script cache ------------------------------------------------------ */

/* The library's scripts, by redlock__cmd (text, length, sha). */
static const redlock__script *lib_script(int cmd) {
  return redlock__script_of((redlock__cmd)cmd);
}

/* The SHA1 of the text each twin was written for (and test-sim-diff
 * checked against Redis). A library whose script differs (a mutant's, or
 * a change not brought to its twin yet) has that script run in Lua, as
 * Redis would run it; test-sim-diff fails until the twin and its SHA here
 * follow a deliberate change (simkv_stale_twins). */
static const char *const twin_sha[REDLOCK__N_CMDS] = {
    [REDLOCK__CMD_RELEASE] = "0daffb8d7d9d7f94fd1f177c5f95dd644d6a0da4",
    [REDLOCK__CMD_EXTEND] = "9f8d853bf755f0b12e0d6b5e580e49264c15997c",
    [REDLOCK__CMD_INSPECT] = "38ae21da79c46a396a240ad50477657154b034fe",
    [REDLOCK__CMD_FENCED_ACQUIRE] = "60f6b83777fb9c9a3b978d595ac5abb170dc6116",
    [REDLOCK__CMD_FENCE] = "8115d15b28fc3d4bf4cfe94f939b3393dc877b77",
    [REDLOCK__CMD_MULTI_ACQUIRE] = "bb679a33f3065dee0b8ed4b43b45cb2521a2d835",
    [REDLOCK__CMD_MULTI_RELEASE] = "7221f602434143c47077ca0a15e8018424354a58",
    [REDLOCK__CMD_MULTI_EXTEND] = "dc5d586e525a72675baefb6cdf59a66923fad812",
    [REDLOCK__CMD_RW_ACQUIRE] = "95b54ac7cb7e0d038f016c35aa8ab45ecc7cd93d",
    [REDLOCK__CMD_RW_EXTEND] = "a5e5385c31ff537582a8061a50b18a51f262680e",
    [REDLOCK__CMD_RW_RELEASE] = "3c1859c41e97b9526c687703b818abd6e4588c33",
    [REDLOCK__CMD_RW_GIVEUP] = "515a88696392150f12c00afc891a4e0cb7e878e3",
    [REDLOCK__CMD_MAXTTL_RAISE] = "26c854a3428ee810b62cb821349f73351e855f81",
    [REDLOCK__CMD_MULTI_PTTL] = "f8e390de33a3e310cf78035f3684a27eb02d012a",
    [REDLOCK__CMD_BATCH_EXTEND] = "e0fe157135148f4359d954b14e06cb1f4b338409",
    [REDLOCK__CMD_TAKEOVER] = "2e81a53d59636f23ed1bf81bf3a2130e77f84040",
    [REDLOCK__CMD_CLOCK_NOTE] = "689fa4bc52cd7091805d50899279c2be30d64c9c",
    [REDLOCK__CMD_MAXTTL_SET] = "fc06d9907469c36a3b44e297d9f110067a1a1b39",
    [REDLOCK__CMD_FORCE_RELEASE] = "803b129650e5de615e9c823833d5afc118481823",
    [REDLOCK__CMD_MARK_FORGET] = "e7c0138ae42174a89ab43d13a7c3935d90b419aa",
};

static int twin_current(int c) {
  const redlock__script *s = lib_script(c);
  return s != NULL && twin_sha[c] != NULL &&
         strcmp(s->sha, twin_sha[c]) == 0;
}

int simkv_stale_twins(char *names, size_t n) {
  int c, stale = 0;
  size_t used = 0;
  if (n > 0)
    names[0] = '\0';
  for (c = 0; c < REDLOCK__N_CMDS; c++) {
    if (twin_sha[c] == NULL || twin_current(c))
      continue;
    stale++;
    if (used < n)
      used += (size_t)snprintf(names + used, n - used, "%s%d",
                               stale > 1 ? " " : "", c);
  }
  return stale;
}

static int twin_of_text(const char *p, size_t n) {
  int c;
  for (c = 0; c < REDLOCK__N_CMDS; c++) {
    const redlock__script *s = lib_script(c);
    if (s != NULL && s->len == n && memcmp(s->text, p, n) == 0)
      return twin_current(c) ? c : -1;
  }
  return -1;
}

static scached *cache_find(simkv *kv, const char *sha40) {
  size_t i;
  for (i = 0; i < kv->nsc; i++)
    if (memcmp(kv->sc[i].sha, sha40, 40) == 0)
      return &kv->sc[i];
  return NULL;
}

static void cache_clear(simkv *kv) {
  size_t i;
  for (i = 0; i < kv->nsc; i++)
    free(kv->sc[i].text);
  kv->nsc = 0;
}

static int cache_add(simkv *kv, const char *sha40, int twin, const char *p,
                     size_t n) {
  scached *c = cache_find(kv, sha40);
  char *text = NULL;
  if (c != NULL)
    return 0;
  if (twin < 0) {
    text = malloc(n + 1);
    if (text == NULL) {
      kv->oom = 1;
      return -1;
    }
    memcpy(text, p, n);
    text[n] = '\0';
  }
  if (kv->nsc == kv->csc) {
    size_t cap = kv->csc ? kv->csc * 2 : 32;
    scached *a = realloc(kv->sc, cap * sizeof(*a));
    if (a == NULL) {
      free(text);
      kv->oom = 1;
      return -1;
    }
    kv->sc = a;
    kv->csc = cap;
  }
  memcpy(kv->sc[kv->nsc].sha, sha40, 40);
  kv->sc[kv->nsc].sha[40] = '\0';
  kv->sc[kv->nsc].twin = twin;
  kv->sc[kv->nsc].text = text;
  kv->sc[kv->nsc].tlen = n;
  kv->nsc++;
  return 0;
}

/* A script's SHA and twin: the library's texts are known by content. */
static int script_sha(const char *p, size_t n, char sha[41]) {
  int t = twin_of_text(p, n);
  if (t >= 0)
    memcpy(sha, lib_script(t)->sha, 41);
  else
    redlock__sha1_hex(p, n, sha);
  return t;
}

/* ==== commands ============================================================ */

#define ARG(i) R->argv[i]
#define LEN(i) R->lens[i]

/* ---- connection and server -------------------------------------------- */

static void c_ping(run *R) {
  if (R->argc > 2)
    out_err(R, "ERR wrong number of arguments for 'ping' command");
  else if (R->argc == 2)
    out_bulk(R, ARG(1), LEN(1));
  else
    out_raw(R, "+PONG\r\n", 7);
}

static void c_echo(run *R) {
  out_bulk(R, ARG(1), LEN(1));
}

static void c_auth(run *R) {
  const char *pass = R->kv->conf[CF_REQUIREPASS];
  const char *p;
  size_t n;
  int ok;
  if (R->argc > 3) {
    out_err(R, "%s", E_SYNTAX);
    return;
  }
  if (R->argc == 2) {
    if (pass[0] == '\0') {
      out_err(R, "ERR AUTH <password> called without any password "
                 "configured for the default user. Are you sure your "
                 "configuration is correct?");
      return;
    }
    p = ARG(1);
    n = LEN(1);
    ok = 1;
  } else {
    ok = LEN(1) == 7 && memcmp(ARG(1), "default", 7) == 0;
    p = ARG(2);
    n = LEN(2);
  }
  /* The default user: any password while it has none (nopass). */
  if (ok && (pass[0] == '\0' || (strlen(pass) == n &&
                                 memcmp(pass, p, n) == 0))) {
    R->conn->authed = 1;
    out_ok(R);
  } else {
    out_err(R, "WRONGPASS invalid username-password pair or user is "
               "disabled.");
  }
}

static void c_select(run *R) {
  int64_t id;
  if (!str2ll(ARG(1), LEN(1), &id)) {
    out_err(R, "%s", E_INT);
  } else if (id < INT_MIN || id > INT_MAX) {
    out_err(R, "ERR value is out of range, value must between %d and %d",
            INT_MIN, INT_MAX);
  } else if (cluster(R) && id != 0) {
    out_err(R, "ERR SELECT is not allowed in cluster mode");
  } else if (id < 0 || id >= NDB) {
    out_err(R, "ERR DB index is out of range");
  } else {
    R->conn->db = (int)id;
    R->db = &R->kv->db[id];
    out_ok(R);
  }
}

static void c_asking(run *R) {
  if (!cluster(R)) {
    out_err(R, "ERR This instance has cluster support disabled");
    return;
  }
  R->conn->asking = 1;
  out_ok(R);
}

static void c_time(run *R) {
  out_arr(R, 2);
  out_bulk_ll(R, R->now_us / 1000000);
  out_bulk_ll(R, R->now_us % 1000000);
}

static void c_publish(run *R) {
  long n = 0;
  if (R->ctx != NULL && R->ctx->publish != NULL)
    n = R->ctx->publish(R->ctx->arg, ARG(1), LEN(1), ARG(2), LEN(2));
  out_int(R, n);
}

/* The world's commands (connections, pub/sub receivers, topology). */
static void c_world(run *R) {
  out_err(R, "ERR simulated server: '%.*s' is the world's, not kv's",
          (int)(LEN(0) > 64 ? 64 : LEN(0)), ARG(0));
}

static void c_dbsize(run *R) {
  kdb *d = R->db;
  int64_t n = 0;
  size_t i;
  for (i = 0; i < d->cap; i++)
    if (d->slot[i] != NULL && !dead(d->slot[i], R->now_ms))
      n++;
  out_int(R, n);
}

static void flush_db(simkv *kv, kdb *d) {
  size_t i;
  for (i = 0; i < d->cap; i++) {
    entry *e = d->slot[i];
    if (e == NULL)
      continue;
    hash_clear(e);
    e->type = 0;
    e->next_free = kv->free_list;
    kv->free_list = e;
    d->slot[i] = NULL;
  }
  d->n = 0;
}

static int flush_args(run *R) {
  if (R->argc > 2 || (R->argc == 2 && !ieq(ARG(1), LEN(1), "sync") &&
                      !ieq(ARG(1), LEN(1), "async"))) {
    out_err(R, "%s", E_SYNTAX);
    return -1;
  }
  return 0;
}

static void c_flushall(run *R) {
  if (flush_args(R) != 0)
    return;
  simkv_flush(R->kv);
  R->wrote = 1;
  out_ok(R);
}

static void c_flushdb(run *R) {
  if (flush_args(R) != 0)
    return;
  flush_db(R->kv, R->db);
  R->wrote = 1;
  out_ok(R);
}

/* ---- strings ---------------------------------------------------------- */

static void c_get(run *R) {
  entry *e = lookup(R, ARG(1), LEN(1));
  if (e == NULL)
    out_nil(R);
  else if (e->type != T_STR)
    out_err(R, "%s", E_TYPE);
  else
    out_bulk(R, e->s, e->slen);
}

static void c_mget(run *R) {
  int i;
  out_arr(R, (size_t)R->argc - 1);
  for (i = 1; i < R->argc; i++) {
    entry *e = lookup(R, ARG(i), LEN(i));
    if (e == NULL || e->type != T_STR)
      out_nil(R);
    else
      out_bulk(R, e->s, e->slen);
  }
}

enum {
  SET_NX = 1, SET_XX = 2, SET_GET = 4, SET_KEEPTTL = 8, SET_EX = 16,
  SET_PX = 32, SET_EXAT = 64, SET_PXAT = 128
};

/* Redis 7.0's getExpireMillisecondsOrReply: the absolute expiry in ms. */
static int set_expire(run *R, const char *p, size_t n, int flags,
                      int64_t *ms) {
  int secs = (flags & (SET_EX | SET_EXAT)) != 0;
  int64_t v;
  if (!str2ll(p, n, &v)) {
    out_err(R, "%s", E_INT);
    return -1;
  }
  if (v <= 0 || (secs && v > INT64_MAX / 1000))
    goto bad;
  if (secs)
    v *= 1000;
  if (flags & (SET_EX | SET_PX)) {
    if (v > INT64_MAX - R->now_ms)
      goto bad;   /* Redis's sum wraps negative */
    v += R->now_ms;
  }
  *ms = v;
  return 0;
bad:
  out_err(R, "ERR invalid expire time in 'set' command");
  return -1;
}

static int opt2(const char *p, size_t n, char a, char b) {
  return n == 2 && (p[0] | 0x20) == a && (p[1] | 0x20) == b;
}

static void c_set(run *R) {
  int flags = 0, j, exp_at = 0;
  int64_t ms = -1;
  entry *e;
  /* Options, as parseExtendedStringArgumentsOrReply takes them. */
  for (j = 3; j < R->argc; j++) {
    const char *o = ARG(j);
    size_t n = LEN(j);
    int next = j + 1 < R->argc;
    if (opt2(o, n, 'n', 'x') && !(flags & SET_XX)) {
      flags |= SET_NX;
    } else if (opt2(o, n, 'x', 'x') && !(flags & SET_NX)) {
      flags |= SET_XX;
    } else if (ieq(o, n, "get")) {
      flags |= SET_GET;
    } else if (ieq(o, n, "keepttl") &&
               !(flags & (SET_EX | SET_EXAT | SET_PX | SET_PXAT))) {
      flags |= SET_KEEPTTL;
    } else if (opt2(o, n, 'e', 'x') && next &&
               !(flags & (SET_KEEPTTL | SET_EXAT | SET_PX | SET_PXAT))) {
      flags |= SET_EX;
      exp_at = ++j;
    } else if (opt2(o, n, 'p', 'x') && next &&
               !(flags & (SET_KEEPTTL | SET_EX | SET_EXAT | SET_PXAT))) {
      flags |= SET_PX;
      exp_at = ++j;
    } else if (ieq(o, n, "exat") && next &&
               !(flags & (SET_KEEPTTL | SET_EX | SET_PX | SET_PXAT))) {
      flags |= SET_EXAT;
      exp_at = ++j;
    } else if (ieq(o, n, "pxat") && next &&
               !(flags & (SET_KEEPTTL | SET_EX | SET_EXAT | SET_PX))) {
      flags |= SET_PXAT;
      exp_at = ++j;
    } else {
      out_err(R, "%s", E_SYNTAX);
      return;
    }
  }
  if (exp_at && set_expire(R, ARG(exp_at), LEN(exp_at), flags, &ms) != 0)
    return;
  e = lookup(R, ARG(1), LEN(1));
  if (flags & SET_GET) {
    if (e == NULL)
      out_nil(R);
    else if (e->type != T_STR) {
      out_err(R, "%s", E_TYPE);
      return;
    } else
      out_bulk(R, e->s, e->slen);
  }
  if (((flags & SET_NX) && e != NULL) || ((flags & SET_XX) && e == NULL)) {
    if (!(flags & SET_GET))
      out_nil(R);
    return;
  }
  if (e == NULL) {
    e = db_add(R->kv, R->db, ARG(1), LEN(1), T_STR);
    if (e == NULL)
      return;
  } else {
    if (e->type == T_HASH)
      hash_clear(e);
    e->type = T_STR;
    if (!(flags & SET_KEEPTTL))
      e->expire = -1;
  }
  if (str_assign(R->kv, e, ARG(2), LEN(2)) != 0)
    return;
  if (exp_at)
    e->expire = ms;
  R->wrote = 1;
  if (!(flags & SET_GET))
    out_ok(R);
}

static void c_incr(run *R) {
  entry *e = lookup(R, ARG(1), LEN(1));
  int64_t v = 0;
  char b[24];
  int n;
  if (e != NULL && e->type != T_STR) {
    out_err(R, "%s", E_TYPE);
    return;
  }
  if (e != NULL && !str2ll(e->s, e->slen, &v)) {
    out_err(R, "%s", E_INT);
    return;
  }
  if (v == INT64_MAX) {
    out_err(R, "ERR increment or decrement would overflow");
    return;
  }
  v++;
  if (e == NULL && (e = db_add(R->kv, R->db, ARG(1), LEN(1), T_STR)) == NULL)
    return;
  n = snprintf(b, sizeof(b), "%" PRId64, v);
  if (str_assign(R->kv, e, b, (size_t)n) != 0)
    return;
  R->wrote = 1;
  out_int(R, v);
}

/* ---- keys --------------------------------------------------------------- */

static void c_del(run *R) {
  int64_t n = 0;
  int i;
  for (i = 1; i < R->argc; i++) {
    entry *e = lookup(R, ARG(i), LEN(i));
    if (e != NULL) {
      key_delete(R, e);
      n++;
    }
  }
  if (n > 0)
    R->wrote = 1;
  out_int(R, n);
}

static void c_exists(run *R) {
  int64_t n = 0;
  int i;
  for (i = 1; i < R->argc; i++)
    if (lookup(R, ARG(i), LEN(i)) != NULL)
      n++;
  out_int(R, n);
}

static void c_type(run *R) {
  entry *e = lookup(R, ARG(1), LEN(1));
  out_lit(R, e == NULL              ? "+none\r\n"
             : e->type == T_STR ? "+string\r\n"
                                : "+hash\r\n");
}

enum { EXP_NX = 1, EXP_XX = 2, EXP_GT = 4, EXP_LT = 8 };

/* Redis 7.0's expireGenericCommand: base 0 for the *AT forms, now for
 * the relative ones; name for the error. */
static void expire_generic(run *R, int64_t base, int secs,
                           const char *name) {
  int flags = 0, j;
  int64_t when, cur;
  entry *e;
  for (j = 3; j < R->argc; j++) {
    if (ieq(ARG(j), LEN(j), "nx"))
      flags |= EXP_NX;
    else if (ieq(ARG(j), LEN(j), "xx"))
      flags |= EXP_XX;
    else if (ieq(ARG(j), LEN(j), "gt"))
      flags |= EXP_GT;
    else if (ieq(ARG(j), LEN(j), "lt"))
      flags |= EXP_LT;
    else {
      out_err(R, "ERR Unsupported option %.*s", (int)strnlen(ARG(j), LEN(j)),
              ARG(j));
      return;
    }
  }
  if ((flags & EXP_NX) && (flags & (EXP_XX | EXP_GT | EXP_LT))) {
    out_err(R, "ERR NX and XX, GT or LT options at the same time are not "
               "compatible");
    return;
  }
  if ((flags & EXP_GT) && (flags & EXP_LT)) {
    out_err(R, "ERR GT and LT options at the same time are not compatible");
    return;
  }
  if (!str2ll(ARG(2), LEN(2), &when)) {
    out_err(R, "%s", E_INT);
    return;
  }
  if (secs) {
    if (when > INT64_MAX / 1000 || when < INT64_MIN / 1000)
      goto bad;
    when *= 1000;
  }
  if (when > INT64_MAX - base)
    goto bad;
  when += base;
  e = lookup(R, ARG(1), LEN(1));
  if (e == NULL) {
    out_int(R, 0);
    return;
  }
  cur = e->expire;
  if (((flags & EXP_NX) && cur != -1) || ((flags & EXP_XX) && cur == -1) ||
      ((flags & EXP_GT) && (when <= cur || cur == -1)) ||
      ((flags & EXP_LT) && cur != -1 && when >= cur)) {
    out_int(R, 0);
    return;
  }
  if (when <= R->now_ms)
    key_delete(R, e);   /* checkAlreadyExpired */
  else
    e->expire = when;
  R->wrote = 1;
  out_int(R, 1);
  return;
bad:
  out_err(R, "ERR invalid expire time in '%s' command", name);
}

static void c_pexpire(run *R) {
  expire_generic(R, R->now_ms, 0, "pexpire");
}

static void c_expire(run *R) {
  expire_generic(R, R->now_ms, 1, "expire");
}

static void c_pexpireat(run *R) {
  expire_generic(R, 0, 0, "pexpireat");
}

static void c_expireat(run *R) {
  expire_generic(R, 0, 1, "expireat");
}

static void ttl_generic(run *R, int ms) {
  entry *e = lookup(R, ARG(1), LEN(1));
  int64_t t;
  if (e == NULL) {
    out_int(R, -2);
    return;
  }
  if (e->expire < 0) {
    out_int(R, -1);
    return;
  }
  t = e->expire - R->now_ms;
  if (t < 0)
    t = 0;
  out_int(R, ms ? t : (t + 500) / 1000);
}

static void c_pttl(run *R) {
  ttl_generic(R, 1);
}

static void c_ttl(run *R) {
  ttl_generic(R, 0);
}

static void c_persist(run *R) {
  entry *e = lookup(R, ARG(1), LEN(1));
  if (e == NULL || e->expire < 0) {
    out_int(R, 0);
    return;
  }
  e->expire = -1;
  R->wrote = 1;
  out_int(R, 1);
}

/* ---- hashes -------------------------------------------------------------*/

/* The hash at argv[1]: 1 and *e (NULL: missing), or 0 after WRONGTYPE. */
static int hash_read(run *R, entry **e) {
  *e = lookup(R, ARG(1), LEN(1));
  if (*e != NULL && (*e)->type != T_HASH) {
    out_err(R, "%s", E_TYPE);
    return 0;
  }
  return 1;
}

static void c_hset(run *R) {
  entry *e;
  int64_t added = 0;
  int i;
  if (R->argc % 2 == 1) {
    out_err(R, "ERR wrong number of arguments for 'hset' command");
    return;
  }
  if (!hash_read(R, &e))
    return;
  if (e == NULL && (e = db_add(R->kv, R->db, ARG(1), LEN(1), T_HASH)) == NULL)
    return;
  for (i = 2; i < R->argc; i += 2) {
    int rc = hf_set(R->kv, e, ARG(i), LEN(i), ARG(i + 1), LEN(i + 1));
    if (rc < 0)
      return;
    added += rc;
  }
  R->wrote = 1;
  out_int(R, added);
}

static void c_hget(run *R) {
  entry *e;
  long i;
  if (!hash_read(R, &e))
    return;
  if (e == NULL || (i = hf_find(e, ARG(2), LEN(2))) < 0)
    out_nil(R);
  else
    out_bulk(R, e->f[i].p + e->f[i].flen, e->f[i].vlen);
}

static void c_hmget(run *R) {
  entry *e;
  int k;
  if (!hash_read(R, &e))
    return;
  out_arr(R, (size_t)R->argc - 2);
  for (k = 2; k < R->argc; k++) {
    long i = e != NULL ? hf_find(e, ARG(k), LEN(k)) : -1;
    if (i < 0)
      out_nil(R);
    else
      out_bulk(R, e->f[i].p + e->f[i].flen, e->f[i].vlen);
  }
}

static void c_hdel(run *R) {
  entry *e;
  int64_t n = 0;
  int k;
  if (!hash_read(R, &e))
    return;
  for (k = 2; e != NULL && k < R->argc; k++) {
    long i = hf_find(e, ARG(k), LEN(k));
    if (i >= 0) {
      hf_del(e, (size_t)i);
      n++;
    }
  }
  if (n > 0) {
    R->wrote = 1;
    if (e->nf == 0)
      key_delete(R, e);
  }
  out_int(R, n);
}

static void c_hexists(run *R) {
  entry *e;
  if (hash_read(R, &e))
    out_int(R, e != NULL && hf_find(e, ARG(2), LEN(2)) >= 0);
}

static void c_hlen(run *R) {
  entry *e;
  if (hash_read(R, &e))
    out_int(R, e != NULL ? (int64_t)e->nf : 0);
}

static void hash_list(run *R, int values) {
  entry *e;
  size_t i, n;
  if (!hash_read(R, &e))
    return;
  n = e != NULL ? e->nf : 0;
  out_arr(R, values ? n * 2 : n);
  for (i = 0; i < n; i++) {
    out_bulk(R, e->f[i].p, e->f[i].flen);
    if (values)
      out_bulk(R, e->f[i].p + e->f[i].flen, e->f[i].vlen);
  }
}

static void c_hgetall(run *R) {
  hash_list(R, 1);
}

static void c_hkeys(run *R) {
  hash_list(R, 0);
}

/* ---- INFO ------------------------------------------------------------ */

enum {
  IS_SERVER = 1, IS_PERSIST = 2, IS_REPL = 4, IS_CLUSTER = 8,
  IS_KEYSPACE = 16
};

static void sb_printf(simkv *kv, sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sb_printf(simkv *kv, sbuf *b, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->len + (size_t)n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      kv->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static const char ZERO40[] = "0000000000000000000000000000000000000000";

/* INFO [section ...]: the sections and fields the library reads (server,
 * persistence, replication) and cluster and keyspace, in Redis's format
 * ("# Name" headers, "field:value" lines, a blank line between
 * sections); the default and "all" give those five. */
static void c_info(run *R) {
  const simkv_info *in = R->ctx != NULL ? R->ctx->info : NULL;
  sbuf *b = &R->kv->sb[0];
  unsigned want = 0;
  int i, sections = 0;
  if (R->argc == 1)
    want = IS_SERVER | IS_PERSIST | IS_REPL | IS_CLUSTER | IS_KEYSPACE;
  for (i = 1; i < R->argc; i++) {
    if (ieq(ARG(i), LEN(i), "all") || ieq(ARG(i), LEN(i), "everything") ||
        ieq(ARG(i), LEN(i), "default"))
      want |= IS_SERVER | IS_PERSIST | IS_REPL | IS_CLUSTER | IS_KEYSPACE;
    else if (ieq(ARG(i), LEN(i), "server"))
      want |= IS_SERVER;
    else if (ieq(ARG(i), LEN(i), "persistence"))
      want |= IS_PERSIST;
    else if (ieq(ARG(i), LEN(i), "replication"))
      want |= IS_REPL;
    else if (ieq(ARG(i), LEN(i), "cluster"))
      want |= IS_CLUSTER;
    else if (ieq(ARG(i), LEN(i), "keyspace"))
      want |= IS_KEYSPACE;
  }
  b->len = 0;
  if (want & IS_SERVER) {
    int64_t up = in != NULL ? in->uptime_s : 0;
    sb_printf(R->kv, b,
              "# Server\r\nredis_version:7.0.15\r\nredis_mode:%s\r\n"
              "arch_bits:64\r\nrun_id:%s\r\ntcp_port:%d\r\n"
              "server_time_usec:%" PRId64 "\r\n"
              "uptime_in_seconds:%" PRId64 "\r\n"
              "uptime_in_days:%" PRId64 "\r\nhz:10\r\n",
              cluster(R) ? "cluster" : "standalone",
              in != NULL && in->run_id != NULL ? in->run_id : ZERO40,
              in != NULL ? in->tcp_port : 6379, R->now_us, up, up / 86400);
    sections++;
  }
  if (want & IS_PERSIST) {
    int aof = in != NULL && in->aof_enabled >= 0
                  ? in->aof_enabled
                  : strcmp(R->kv->conf[CF_APPENDONLY], "yes") == 0;
    sb_printf(R->kv, b,
              "%s# Persistence\r\nloading:0\r\nasync_loading:0\r\n"
              "rdb_bgsave_in_progress:0\r\n"
              "rdb_last_save_time:%" PRId64 "\r\n"
              "rdb_last_bgsave_status:ok\r\naof_enabled:%d\r\n"
              "aof_rewrite_in_progress:0\r\naof_last_write_status:ok\r\n",
              sections ? "\r\n" : "",
              in != NULL ? in->rdb_last_save_time : 0, aof);
    sections++;
  }
  if (want & IS_REPL) {
    const char *replid =
        in != NULL && in->master_replid != NULL ? in->master_replid : ZERO40;
    sb_printf(R->kv, b, "%s# Replication\r\n", sections ? "\r\n" : "");
    if (is_replica(R))
      sb_printf(R->kv, b,
                "role:slave\r\nmaster_host:%s\r\nmaster_port:%d\r\n"
                "master_link_status:%s\r\nmaster_sync_in_progress:0\r\n"
                "slave_read_only:1\r\n",
                in->master_host != NULL ? in->master_host : "",
                in->master_port, in->master_link_up ? "up" : "down");
    else
      sb_printf(R->kv, b, "role:master\r\n");
    sb_printf(R->kv, b,
              "connected_slaves:%d\r\nmaster_failover_state:no-failover\r\n"
              "master_replid:%s\r\nmaster_replid2:%s\r\n"
              "master_repl_offset:0\r\nsecond_repl_offset:%" PRId64 "\r\n",
              in != NULL ? in->connected_slaves : 0, replid, ZERO40,
              in != NULL ? in->second_repl_offset : -1);
    sections++;
  }
  if (want & IS_CLUSTER) {
    sb_printf(R->kv, b, "%s# Cluster\r\ncluster_enabled:%d\r\n",
              sections ? "\r\n" : "", cluster(R));
    sections++;
  }
  if (want & IS_KEYSPACE) {
    int d;
    sb_printf(R->kv, b, "%s# Keyspace\r\n", sections ? "\r\n" : "");
    for (d = 0; d < NDB; d++) {
      kdb *x = &R->kv->db[d];
      size_t k, keys = 0, expires = 0;
      for (k = 0; k < x->cap; k++)
        if (x->slot[k] != NULL && !dead(x->slot[k], R->now_ms)) {
          keys++;
          expires += x->slot[k]->expire >= 0;
        }
      if (keys > 0)
        sb_printf(R->kv, b, "db%d:keys=%zu,expires=%zu,avg_ttl=0\r\n", d,
                  keys, expires);
    }
  }
  out_bulk(R, b->p != NULL ? b->p : "", b->len);
}

/* ---- CONFIG ----------------------------------------------------------- */

/* Glob match, case-insensitive: '*' and '?' (the names have no others). */
static int glob(const char *p, size_t pn, const char *s) {
  if (pn == 0)
    return *s == '\0';
  if (*p == '*') {
    for (;; s++) {
      if (glob(p + 1, pn - 1, s))
        return 1;
      if (*s == '\0')
        return 0;
    }
  }
  if (*s == '\0')
    return 0;
  if (*p != '?' && tolower((unsigned char)*p) != tolower((unsigned char)*s))
    return 0;
  return glob(p + 1, pn - 1, s + 1);
}

/* CONFIG GET: each pattern's configs once, in the order met (Redis's
 * order is its dict's, random for several), an exact name as typed. */
static void c_config_get(run *R) {
  int shown[CF_N] = {0};
  const char *name[CF_N];
  size_t nlen[CF_N];
  int order[CF_N], n = 0, i, k;
  for (i = 2; i < R->argc; i++) {
    int exact = 1;
    size_t j;
    for (j = 0; j < LEN(i); j++)
      if (strchr("*?[\\", ARG(i)[j]) != NULL && ARG(i)[j] != '\0')
        exact = 0;
    for (k = 0; k < CF_N; k++) {
      int hit = exact ? ieq(ARG(i), LEN(i), cfdefs[k].name)
                      : glob(ARG(i), LEN(i), cfdefs[k].name);
      if (!hit || shown[k])
        continue;
      shown[k] = 1;
      name[k] = exact ? ARG(i) : cfdefs[k].name;
      nlen[k] = exact ? LEN(i) : strlen(cfdefs[k].name);
      order[n++] = k;
    }
  }
  out_arr(R, (size_t)n * 2);
  for (i = 0; i < n; i++) {
    k = order[i];
    out_bulk(R, name[k], nlen[k]);
    out_bulk(R, R->kv->conf[k], strlen(R->kv->conf[k]));
  }
}

static void c_config_set(run *R) {
  int idx[64], n = (R->argc - 2) / 2, i, j;
  char *canon[64];
  if (R->argc % 2 == 1 || n > 64) {
    out_err(R, "%s", E_SYNTAX);
    return;
  }
  for (i = 0; i < n; i++) {
    idx[i] = cf_index(ARG(2 + 2 * i), LEN(2 + 2 * i));
    if (idx[i] < 0) {
      out_err(R, "ERR Unknown option or number of arguments for CONFIG SET "
                 "- '%.*s'", (int)LEN(2 + 2 * i), ARG(2 + 2 * i));
      return;
    }
  }
  for (i = 0; i < n; i++)
    for (j = 0; j < i; j++)
      if (idx[j] == idx[i]) {
        out_err(R, "ERR CONFIG SET failed (possibly related to argument "
                   "'%.*s') - duplicate parameter",
                (int)LEN(2 + 2 * i), ARG(2 + 2 * i));
        return;
      }
  for (i = 0; i < n; i++) {
    const char *why =
        cf_check(idx[i], ARG(3 + 2 * i), LEN(3 + 2 * i), &canon[i]);
    if (why != NULL) {
      for (j = 0; j < i; j++)
        free(canon[j]);
      if (canon[i] == NULL && why[0] == '\0')
        R->kv->oom = 1;
      else
        out_err(R, "ERR CONFIG SET failed (possibly related to argument "
                   "'%s') - %s", cfdefs[idx[i]].name, why);
      return;
    }
  }
  for (i = 0; i < n; i++) {
    free(R->kv->conf[idx[i]]);
    R->kv->conf[idx[i]] = canon[i];
  }
  out_ok(R);
}

/* ---- SCRIPT, EVAL, EVALSHA ----------------------------------------- */

static void c_script_load(run *R) {
  char sha[41];
  int t = script_sha(ARG(2), LEN(2), sha);
  if (cache_add(R->kv, sha, t, ARG(2), LEN(2)) != 0)
    return;
  out_bulk(R, sha, 40);
}

static void c_script_flush(run *R) {
  if (R->argc > 3 || (R->argc == 3 && !ieq(ARG(2), LEN(2), "sync") &&
                      !ieq(ARG(2), LEN(2), "async"))) {
    out_err(R, "ERR SCRIPT FLUSH only support SYNC|ASYNC option");
    return;
  }
  cache_clear(R->kv);
  out_ok(R);
}

static void lower40(const char *p, char out[41]) {
  int i;
  for (i = 0; i < 40; i++)
    out[i] = (char)tolower((unsigned char)p[i]);
  out[40] = '\0';
}

static void c_script_exists(run *R) {
  int i;
  out_arr(R, (size_t)R->argc - 2);
  for (i = 2; i < R->argc; i++) {
    char sha[41];
    int hit = 0;
    if (LEN(i) == 40) {
      lower40(ARG(i), sha);
      hit = cache_find(R->kv, sha) != NULL;
    }
    out_int(R, hit);
  }
}

static void run_twin(run *R, int twin, int nk);
static void run_lua(run *R, const char *sha, const char *text, size_t len,
                    int nk);

/* EVAL script numkeys ... and EVALSHA sha numkeys ...: numkeys checked
 * first (after a SHA that is not 40 characters), as evalGenericCommand
 * does; EVAL caches its script. */
static void eval_generic(run *R, int sha) {
  int64_t nk;
  int twin;
  char h[41];
  if (sha && LEN(1) != 40) {
    out_err(R, "NOSCRIPT No matching script. Please use EVAL.");
    return;
  }
  if (!str2ll(ARG(2), LEN(2), &nk)) {
    out_err(R, "%s", E_INT);
    return;
  }
  if (nk > R->argc - 3) {
    out_err(R, "ERR Number of keys can't be greater than number of args");
    return;
  }
  if (nk < 0) {
    out_err(R, "ERR Number of keys can't be negative");
    return;
  }
  if (sha) {
    scached *c;
    lower40(ARG(1), h);
    c = cache_find(R->kv, h);
    if (c == NULL) {
      out_err(R, "NOSCRIPT No matching script. Please use EVAL.");
      return;
    }
    twin = c->twin;
    if (twin < 0) {
      run_lua(R, c->sha, c->text, c->tlen, (int)nk);
      return;
    }
  } else {
    twin = script_sha(ARG(1), LEN(1), h);
    if (cache_add(R->kv, h, twin, ARG(1), LEN(1)) != 0)
      return;
    if (twin < 0) {
      run_lua(R, h, ARG(1), LEN(1), (int)nk);
      return;
    }
  }
  run_twin(R, twin, (int)nk);
}

static void c_eval(run *R) {
  eval_generic(R, 0);
}

static void c_evalsha(run *R) {
  eval_generic(R, 1);
}

/* ---- the command table ------------------------------------------------ */

enum {
  F_WRITE = 1,      /* refused on a replica and without good replicas */
  F_NOAUTH = 2,     /* allowed before AUTH */
  F_EVAL = 4        /* keys: numkeys at argv[2], then the keys */
};

typedef struct cmddef {
  const char *name;       /* lowercase; "config|get" for a subcommand */
  int arity;              /* n: exactly n arguments; -n: at least n */
  unsigned flags;
  int first, last;        /* the keys (argv index; last -1: to the end),
                             first 0: none */
  void (*fn)(run *R);
  const struct cmddef *sub;  /* a container's subcommands (NULL-ended) */
} cmddef;

static const cmddef config_cmds[] = {
    {"config|get", -3, 0, 0, 0, c_config_get, NULL},
    {"config|set", -4, 0, 0, 0, c_config_set, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static const cmddef script_cmds[] = {
    {"script|load", 3, 0, 0, 0, c_script_load, NULL},
    {"script|flush", -2, 0, 0, 0, c_script_flush, NULL},
    {"script|exists", -3, 0, 0, 0, c_script_exists, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static const cmddef commands[] = {
    /* strings and keys: the locks */
    {"get", 2, 0, 1, 1, c_get, NULL},
    {"set", -3, F_WRITE, 1, 1, c_set, NULL},
    {"mget", -2, 0, 1, -1, c_mget, NULL},
    {"del", -2, F_WRITE, 1, -1, c_del, NULL},
    {"exists", -2, 0, 1, -1, c_exists, NULL},
    {"pexpire", -3, F_WRITE, 1, 1, c_pexpire, NULL},
    {"pttl", 2, 0, 1, 1, c_pttl, NULL},
    {"incr", 2, F_WRITE, 1, 1, c_incr, NULL},
    {"type", 2, 0, 1, 1, c_type, NULL},
    {"expire", -3, F_WRITE, 1, 1, c_expire, NULL},
    {"pexpireat", -3, F_WRITE, 1, 1, c_pexpireat, NULL},
    {"expireat", -3, F_WRITE, 1, 1, c_expireat, NULL},
    {"ttl", 2, 0, 1, 1, c_ttl, NULL},
    {"persist", 2, F_WRITE, 1, 1, c_persist, NULL},
    /* hashes: read-write locks, the guard's records */
    {"hset", -4, F_WRITE, 1, 1, c_hset, NULL},
    {"hget", 3, 0, 1, 1, c_hget, NULL},
    {"hmget", -3, 0, 1, 1, c_hmget, NULL},
    {"hdel", -3, F_WRITE, 1, 1, c_hdel, NULL},
    {"hexists", 3, 0, 1, 1, c_hexists, NULL},
    {"hgetall", 2, 0, 1, 1, c_hgetall, NULL},
    {"hkeys", 2, 0, 1, 1, c_hkeys, NULL},
    {"hlen", 2, 0, 1, 1, c_hlen, NULL},
    /* scripts */
    {"evalsha", -3, F_EVAL, 0, 0, c_evalsha, NULL},
    {"eval", -3, F_EVAL, 0, 0, c_eval, NULL},
    {"script", -2, 0, 0, 0, NULL, script_cmds},
    {"publish", 3, 0, 0, 0, c_publish, NULL},
    /* connection and server */
    {"ping", -1, 0, 0, 0, c_ping, NULL},
    {"auth", -2, F_NOAUTH, 0, 0, c_auth, NULL},
    {"select", 2, 0, 0, 0, c_select, NULL},
    {"time", 1, 0, 0, 0, c_time, NULL},
    {"info", -1, 0, 0, 0, c_info, NULL},
    {"config", -2, 0, 0, 0, NULL, config_cmds},
    {"asking", 1, 0, 0, 0, c_asking, NULL},
    {"echo", 2, 0, 0, 0, c_echo, NULL},
    {"dbsize", 1, 0, 0, 0, c_dbsize, NULL},
    {"flushall", -1, F_WRITE, 0, 0, c_flushall, NULL},
    {"flushdb", -1, F_WRITE, 0, 0, c_flushdb, NULL},
    /* the world's: answered with an error if they reach kv */
    {"subscribe", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"unsubscribe", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"psubscribe", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"punsubscribe", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"cluster", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"sentinel", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"client", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"hello", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"quit", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"reset", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"readonly", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"readwrite", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"replicaof", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"slaveof", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"wait", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"debug", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {"shutdown", -1, F_NOAUTH, 0, 0, c_world, NULL},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

/* The command named p (any case) in table t, or NULL. */
static const cmddef *find_cmd(const cmddef *t, const char *p, size_t n,
                              size_t skip) {
  for (; t->name != NULL; t++) {
    const char *name = t->name + skip;
    if (strlen(name) == n && (name[0] | 0x20) == (p[0] | 0x20) &&
        strncasecmp(name, p, n) == 0)
      return t;
  }
  return NULL;
}

static int arity_ok(const cmddef *c, int argc) {
  return c->arity >= 0 ? argc == c->arity : argc >= -c->arity;
}

/* ==== the twins: the library's scripts in C ============================== */

/* One script's run: its KEYS and ARGV, the EVAL's run (whose output gets
 * the script's reply). */
typedef struct tw {
  run *R;
  const char *sha;
  int nk, na;
  const char *const *k;
  const size_t *kl;
  const char *const *a;
  const size_t *al;
  int dirty;              /* a write was let through: no more checks */
  int done;               /* the reply is written (or memory ran out) */
} tw;

static lstr KEY(const tw *S, int i) {
  lstr r = {NULL, 0};
  if (i >= 1 && i <= S->nk) {
    r.p = S->k[i - 1];
    r.n = S->kl[i - 1];
  }
  return r;
}

static lstr ARGV(const tw *S, int i) {
  lstr r = {NULL, 0};
  if (i >= 1 && i <= S->na) {
    r.p = S->a[i - 1];
    r.n = S->al[i - 1];
  }
  return r;
}

#define LIT(s) ((lstr){(s), sizeof(s) - 1})

/* A == 'lit' in Lua (nil is no string). */
static int is(lstr x, const char *lit) {
  return x.p != NULL && x.n == strlen(lit) && memcmp(x.p, lit, x.n) == 0;
}

/* Two Lua values that are nil, false or strings: equal when both are the
 * same string (nil and false differ, and are never used as equal). */
static int same(lstr a, lstr b) {
  return a.p != NULL && b.p != NULL && a.n == b.n &&
         memcmp(a.p, b.p, a.n) == 0;
}

/* A call's bulk or nil reply as a Lua value: the string, or false (p
 * NULL). */
static lstr val(const lrep *r) {
  lstr v = {NULL, 0};
  if (r->type == R_BULK || r->type == R_STATUS) {
    v.p = r->s;
    v.n = r->n;
  }
  return v;
}

/* The script's reply is an error: "<text> script: <sha>, on
 * @user_script:1." (Redis 7.0's form for a script that raised it). */
static void tw_fail(tw *S, const char *text, size_t n) {
  out_err(S->R, "%.*s script: %s, on @user_script:1.", (int)n, text,
          S->sha);
  S->done = 1;
}

/* A Lua runtime error: "ERR user_script:1: <message> ...". */
static void tw_lua(tw *S, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tw_lua(tw *S, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  out_err(S->R, "ERR user_script:1: %s script: %s, on @user_script:1.",
          msg, S->sha);
  S->done = 1;
}

/* The script returns an integer a call gave it (or a literal): through
 * a Lua number, a double (INCR's 2^63 - 1 comes back as INT64_MIN). */
static void tw_int(tw *S, int64_t v) {
  out_int(S->R, lua_int((double)v));
  S->done = 1;
}

/* Parses our own RESP (a scalar, or an array of scalars) into r. */
static size_t parse_scalar(const char *p, lrep *r) {
  const char *e = strchr(p, '\r');   /* our replies end lines in CRLF */
  size_t line = (size_t)(e - p);
  r->s = NULL;
  r->n = 0;
  switch (p[0]) {
    case '+':
    case '-':
      r->type = p[0] == '+' ? R_STATUS : R_ERR;
      r->s = p + 1;
      r->n = line - 1;
      return line + 2;
    case ':':
      r->type = R_INT;
      r->i = strtoll(p + 1, NULL, 10);
      return line + 2;
    default: {   /* '$' */
      long long len = strtoll(p + 1, NULL, 10);
      if (len < 0) {
        r->type = R_NIL;
        return line + 2;
      }
      r->type = R_BULK;
      r->s = p + line + 2;
      r->n = (size_t)len;
      return line + 2 + (size_t)len + 2;
    }
  }
}

static int parse_reply(simkv *kv, simkv_out *o, lrep *r) {
  size_t at, i;
  if (out_reserve(kv, o, 1) != 0)
    return -1;
  o->p[o->len] = '\0';   /* strchr stops at the end */
  r->nel = 0;
  if (o->p[0] != '*') {
    parse_scalar(o->p, r);
    return 0;
  }
  r->type = R_ARR;
  r->nel = (size_t)strtoull(o->p + 1, NULL, 10);
  if (r->nel > r->elcap) {
    lrep *a = realloc(r->el, r->nel * sizeof(*a));
    if (a == NULL) {
      kv->oom = 1;
      return -1;
    }
    r->el = a;
    r->elcap = r->nel;
  }
  at = (size_t)(strchr(o->p, '\r') - o->p) + 2;
  for (i = 0; i < r->nel; i++)
    at += parse_scalar(o->p + at, &r->el[i]);
  return 0;
}

/* redis.call(av[0], ...) into reply slot `slot`: the reply, or NULL when
 * it raised an error (the script's reply is written: S->done). Checks as
 * Redis 7.0's luaRedisGenericCommand and scriptCall: Lua arguments, the
 * command, its arity, a write's permission (the first write only). */
static const lrep *rcall(tw *S, int slot, int argc, const lstr *av) {
  simkv *kv = S->R->kv;
  const cmddef *c;
  run Q;
  int i;
  if (kv->oom) {
    S->done = 1;
    return NULL;
  }
  if ((size_t)argc > kv->ccap) {
    size_t cap = (size_t)argc * 2;
    const char **a = realloc(kv->cargv, cap * sizeof(*a));
    size_t *l;
    if (a != NULL)
      kv->cargv = a;
    l = a != NULL ? realloc(kv->clens, cap * sizeof(*l)) : NULL;
    if (l == NULL) {
      kv->oom = 1;
      S->done = 1;
      return NULL;
    }
    kv->clens = l;
    kv->ccap = cap;
  }
  for (i = 0; i < argc; i++) {
    if (av[i].p == NULL) {
      static const char m[] =
          "ERR Lua redis lib command arguments must be strings or integers";
      tw_fail(S, m, sizeof(m) - 1);
      return NULL;
    }
    kv->cargv[i] = av[i].p;
    kv->clens[i] = av[i].n;
  }
  c = find_cmd(commands, av[0].p, av[0].n, 0);
  if (c == NULL || c->fn == NULL) {
    static const char m[] = "ERR Unknown Redis command called from script";
    tw_fail(S, m, sizeof(m) - 1);
    return NULL;
  }
  if (!arity_ok(c, argc)) {
    static const char m[] =
        "ERR Wrong number of args calling Redis command from script";
    tw_fail(S, m, sizeof(m) - 1);
    return NULL;
  }
  if ((c->flags & F_WRITE) && !S->dirty) {
    static const char ro[] =
        "READONLY You can't write against a read only replica.";
    static const char nr[] = "NOREPLICAS Not enough good replicas to write.";
    if (is_replica(S->R)) {
      tw_fail(S, ro, sizeof(ro) - 1);
      return NULL;
    }
    if (!good_replicas(S->R)) {
      tw_fail(S, nr, sizeof(nr) - 1);
      return NULL;
    }
    S->dirty = 1;
  }
  Q = *S->R;
  Q.argc = argc;
  Q.argv = kv->cargv;
  Q.lens = kv->clens;
  Q.out = &kv->slot_out[slot];
  Q.out->len = 0;
  Q.wrote = 0;
  c->fn(&Q);
  S->R->wrote |= Q.wrote;
  if (kv->oom || parse_reply(kv, Q.out, &kv->slot_rep[slot]) != 0) {
    S->done = 1;
    return NULL;
  }
  if (kv->slot_rep[slot].type == R_ERR) {
    tw_fail(S, kv->slot_rep[slot].s, kv->slot_rep[slot].n);
    return NULL;
  }
  return &kv->slot_rep[slot];
}

#define CALL(S, slot, ...)                                                  \
  rcall((S), (slot), (int)(sizeof((lstr[]){__VA_ARGS__}) / sizeof(lstr)),  \
        (lstr[]){__VA_ARGS__})

/* Concatenation x .. y .. z into builder b_ (NONE for a missing z), or
 * Lua's error for a nil operand (every operand the scripts concatenate
 * is a string or a KEYS or ARGV field, all named "field '?'"). */
static int cat(tw *S, int b_, lstr *out, lstr x, lstr y, lstr z) {
  sbuf *b = &S->R->kv->sb[b_];
  size_t n;
  if (x.p == NULL || y.p == NULL || z.p == NULL) {
    tw_lua(S, "attempt to concatenate field '?' (a nil value)");
    return -1;
  }
  n = x.n + y.n + z.n;
  if (n + 1 > b->cap) {
    char *p = realloc(b->p, n + 1);
    if (p == NULL) {
      S->R->kv->oom = 1;
      S->done = 1;
      return -1;
    }
    b->p = p;
    b->cap = n + 1;
  }
  memcpy(b->p, x.p, x.n);
  memcpy(b->p + x.n, y.p, y.n);
  if (z.n > 0)
    memcpy(b->p + x.n + y.n, z.p, z.n);
  b->len = n;
  out->p = b->p;
  out->n = n;
  return 0;
}

static const lstr NONE = {"", 0};

/* string.sub(x, 1, 12) == '__redlock__:' (MARKED in scripts.c): 1, 0, or
 * -1 after Lua's error for a nil x. */
static int marked(tw *S, lstr x) {
  if (x.p == NULL) {
    tw_lua(S, "bad argument #1 to 'sub' (string expected, got nil)");
    return -1;
  }
  return x.n >= 12 && memcmp(x.p, "__redlock__:", 12) == 0;
}

/* A Lua number or nil (tonumber's result). */
typedef struct onum {
  int ok;
  double v;
} onum;

static onum tonum(tw *S, lstr x) {
  onum r = {0, 0};
  if (x.p != NULL)
    r.ok = lua_tonum(S->R->kv, x.p, x.n, &r.v);
  return r;
}

static onum num(double v) {
  onum r;
  r.ok = 1;
  r.v = v;
  return r;
}

/* a < b (le: a <= b) in Lua's VM order (a > b is b < a): 1, 0, or -1
 * after Lua's error for a nil operand. */
static int lt_le(tw *S, onum a, onum b, int le) {
  if (!a.ok || !b.ok) {
    if (!a.ok && !b.ok)
      tw_lua(S, "attempt to compare two nil values");
    else
      tw_lua(S, "attempt to compare %s with %s", a.ok ? "number" : "nil",
             b.ok ? "number" : "nil");
    return -1;
  }
  return le ? a.v <= b.v : a.v < b.v;
}

/* The script returns a Lua number (truncated toward zero, x86's cast). */
static void tw_num(tw *S, double v) {
  tw_int(S, lua_int(v));
}

/* redis.call('publish', ch, '1'). */
static int publish(tw *S, lstr ch) {
  return CALL(S, 7, LIT("publish"), ch, LIT("1")) != NULL ? 0 : -1;
}

/* TIME in Lua: t[1] * 1000 + math.floor(t[2] / 1000) (ms), or sec * 1e6
 * + usec (us): TIME's strings are plain numbers. */
static int lua_time(tw *S, double *sec, double *usec) {
  const lrep *t = CALL(S, 6, LIT("time"));
  if (t == NULL)
    return -1;
  lua_tonum(S->R->kv, t->el[0].s, t->el[0].n, sec);
  lua_tonum(S->R->kv, t->el[1].s, t->el[1].n, usec);
  return 0;
}

/* ---- release: compare-and-delete, publish unless quiet ------------------ */

static void tw_release(tw *S) {
  lstr tok = ARGV(S, 1);
  const lrep *r;
  int m = marked(S, tok);
  if (m != 0) {
    if (m > 0)
      tw_int(S, 0);
    return;
  }
  if ((r = CALL(S, 0, LIT("get"), KEY(S, 1))) == NULL)
    return;
  if (same(val(r), tok)) {
    lstr ch;
    int64_t n;
    if ((r = CALL(S, 1, LIT("del"), KEY(S, 1))) == NULL)
      return;
    n = r->i;
    if (!is(ARGV(S, 2), "1") &&
        (cat(S, 0, &ch, LIT("__redlock__:"), KEY(S, 1), NONE) != 0 ||
         publish(S, ch) != 0))
      return;
    tw_int(S, n);
    return;
  }
  tw_int(S, 0);
}

/* ---- extend: compare-and-pexpire; heal sets a missing key ------------- */

static void tw_extend(tw *S) {
  lstr tok = ARGV(S, 1);
  const lrep *r;
  lstr v;
  int m = marked(S, tok);
  if (m != 0) {
    if (m > 0)
      tw_int(S, 0);
    return;
  }
  if ((r = CALL(S, 0, LIT("get"), KEY(S, 1))) == NULL)
    return;
  v = val(r);
  if (same(v, tok)) {
    if ((r = CALL(S, 1, LIT("pexpire"), KEY(S, 1), ARGV(S, 2))) != NULL)
      tw_int(S, r->i);
  } else if (v.p == NULL && is(ARGV(S, 3), "1")) {
    if (CALL(S, 1, LIT("set"), KEY(S, 1), tok, LIT("px"), ARGV(S, 2)) !=
        NULL)
      tw_int(S, 2);
  } else {
    tw_int(S, 0);
  }
}

/* ---- inspect: {value or '', pttl, the rw hash exists} ------------------ */

static void tw_inspect(tw *S) {
  const lrep *g, *p, *x;
  int64_t rw = 0;
  lstr v;
  if (S->nk > 1) {
    if ((x = CALL(S, 0, LIT("exists"), KEY(S, 2))) == NULL)
      return;
    rw = x->i;
  }
  if ((g = CALL(S, 1, LIT("get"), KEY(S, 1))) == NULL ||
      (p = CALL(S, 2, LIT("pttl"), KEY(S, 1))) == NULL)
    return;
  v = val(g);
  out_arr(S->R, 3);
  out_bulk(S->R, v.p != NULL ? v.p : "", v.n);
  out_int(S->R, lua_int((double)p->i));
  out_int(S->R, lua_int((double)rw));
  S->done = 1;
}

/* ---- fenced acquire: SET NX PX, the counter raised to TIME, INCR ----- */

static void tw_fenced_acquire(tw *S) {
  const lrep *r;
  double sec, usec, floor_;
  onum c;
  lstr cv;
  if ((r = CALL(S, 0, LIT("set"), KEY(S, 1), ARGV(S, 1), LIT("NX"),
                LIT("PX"), ARGV(S, 2))) == NULL)
    return;
  if (r->type == R_NIL) {   /* return false */
    out_nil(S->R);
    S->done = 1;
    return;
  }
  if (lua_time(S, &sec, &usec) != 0)
    return;
  floor_ = sec * 1000000 + usec;
  if ((r = CALL(S, 1, LIT("get"), KEY(S, 2))) == NULL)
    return;
  cv = val(r);
  c = tonum(S, cv.p != NULL ? cv : LIT("0"));
  if (!c.ok || c.v < floor_) {
    char b[32];
    lstr f;
    f.n = (size_t)snprintf(b, sizeof(b), "%" PRId64, lua_int(floor_));
    f.p = b;
    if (CALL(S, 2, LIT("set"), KEY(S, 2), f) == NULL)
      return;
  }
  if ((r = CALL(S, 3, LIT("incr"), KEY(S, 2))) != NULL)
    tw_int(S, r->i);
}

/* ---- fence: counter = max(counter, T) where the key is ours ----------- */

static void tw_fence(tw *S) {
  lstr tok = ARGV(S, 1);
  const lrep *r;
  lstr cv;
  int m = marked(S, tok), less;
  if (m != 0) {
    if (m > 0)
      tw_int(S, 0);
    return;
  }
  if ((r = CALL(S, 0, LIT("get"), KEY(S, 1))) == NULL)
    return;
  if (!same(val(r), tok)) {
    tw_int(S, 0);
    return;
  }
  if ((r = CALL(S, 1, LIT("get"), KEY(S, 2))) == NULL)
    return;
  cv = val(r);
  less = lt_le(S, tonum(S, cv.p != NULL ? cv : LIT("0")),
               tonum(S, ARGV(S, 2)), 0);
  if (less < 0)
    return;
  if (less && CALL(S, 2, LIT("set"), KEY(S, 2), ARGV(S, 2)) == NULL)
    return;
  tw_int(S, 1);
}

/* ---- multi-resource locks --------------------------------------------- */

static void tw_multi_acquire(tw *S) {
  const lrep *r;
  int i;
  for (i = 1; i <= S->nk; i++) {
    if ((r = CALL(S, 0, LIT("exists"), KEY(S, i))) == NULL)
      return;
    if (r->i == 1) {
      tw_int(S, 0);
      return;
    }
  }
  for (i = 1; i <= S->nk; i++)
    if (CALL(S, 0, LIT("set"), KEY(S, i), ARGV(S, 1), LIT("PX"),
             ARGV(S, 2)) == NULL)
      return;
  tw_int(S, 1);
}

static void tw_multi_release(tw *S) {
  lstr tok = ARGV(S, 1);
  const lrep *r;
  int64_t n = 0;
  int i, m = marked(S, tok);
  if (m != 0) {
    if (m > 0)
      tw_int(S, 0);
    return;
  }
  for (i = 1; i <= S->nk; i++) {
    lstr ch;
    if ((r = CALL(S, 0, LIT("get"), KEY(S, i))) == NULL)
      return;
    if (!same(val(r), tok))
      continue;
    if ((r = CALL(S, 1, LIT("del"), KEY(S, i))) == NULL)
      return;
    n += r->i;
    if (!is(ARGV(S, 2), "1") &&
        (cat(S, 0, &ch, LIT("__redlock__:"), KEY(S, i), NONE) != 0 ||
         publish(S, ch) != 0))
      return;
  }
  tw_int(S, n);
}

static void tw_multi_extend(tw *S) {
  lstr tok = ARGV(S, 1);
  const lrep *r;
  int i, m = marked(S, tok);
  if (m != 0) {
    if (m > 0)
      tw_int(S, 0);
    return;
  }
  for (i = 1; i <= S->nk; i++) {
    lstr v;
    if ((r = CALL(S, 0, LIT("get"), KEY(S, i))) == NULL)
      return;
    v = val(r);
    if (!same(v, tok) && !(v.p == NULL && is(ARGV(S, 3), "1"))) {
      tw_int(S, 0);
      return;
    }
  }
  for (i = 1; i <= S->nk; i++) {
    if ((r = CALL(S, 0, LIT("get"), KEY(S, i))) == NULL)
      return;
    if (same(val(r), tok))
      r = CALL(S, 1, LIT("pexpire"), KEY(S, i), ARGV(S, 2));
    else
      r = CALL(S, 1, LIT("set"), KEY(S, i), tok, LIT("PX"), ARGV(S, 2));
    if (r == NULL)
      return;
  }
  tw_int(S, 1);
}

/* ---- multi pttl: the longest PTTL (-2 none, -1 one never expires) ---- */

static void tw_multi_pttl(tw *S) {
  int64_t m = -2;
  int i;
  for (i = 1; i <= S->nk; i++) {
    const lrep *p = CALL(S, 0, LIT("pttl"), KEY(S, i));
    if (p == NULL)
      return;
    if (p->i == -1) {
      tw_int(S, -1);
      return;
    }
    if (p->i > m)
      m = p->i;
  }
  tw_int(S, m);
}

/* ---- batch extend: MGET all, PEXPIRE each that is ours ---------------- */

static void tw_batch_extend(tw *S) {
  simkv *kv = S->R->kv;
  int n = S->nk, one = S->na == n + 1, i;
  const lrep *v;
  if ((size_t)n + 1 > kv->lcap || (size_t)n > kv->icap) {
    size_t cap = (size_t)n * 2 + 2;
    lstr *l = realloc(kv->lbuf, cap * sizeof(*l));
    int64_t *x;
    if (l != NULL)
      kv->lbuf = l;
    x = l != NULL ? realloc(kv->ibuf, cap * sizeof(*x)) : NULL;
    if (x == NULL) {
      kv->oom = 1;
      S->done = 1;
      return;
    }
    kv->ibuf = x;
    kv->lcap = kv->icap = cap;
  }
  kv->lbuf[0] = LIT("mget");
  for (i = 1; i <= n; i++)
    kv->lbuf[i] = KEY(S, i);
  if ((v = rcall(S, 0, n + 1, kv->lbuf)) == NULL)
    return;
  for (i = 1; i <= n; i++) {
    lstr a = ARGV(S, i);
    kv->ibuf[i - 1] = 0;
    if (same(val(&v->el[i - 1]), a) && !marked(S, a)) {
      const lrep *p = CALL(S, 1, LIT("pexpire"), KEY(S, i),
                           one ? ARGV(S, n + 1) : ARGV(S, n + i));
      if (p == NULL)
        return;
      kv->ibuf[i - 1] = p->i;
    }
  }
  out_arr(S->R, (size_t)n);
  for (i = 0; i < n; i++)
    out_int(S->R, lua_int((double)kv->ibuf[i]));
  S->done = 1;
}

/* ---- takeover: SET NX, or over one of our given-up tokens ------------- */

static void tw_takeover(tw *S) {
  const lrep *r;
  lstr v;
  int i;
  if ((r = CALL(S, 0, LIT("get"), KEY(S, 1))) == NULL)
    return;
  v = val(r);
  if (v.p != NULL) {
    int mine = 0;
    for (i = 3; i <= S->na; i++)
      if (same(v, ARGV(S, i))) {
        mine = 1;
        break;
      }
    if (marked(S, v))
      mine = 0;
    if (!mine) {
      tw_int(S, 0);
      return;
    }
  }
  if (CALL(S, 1, LIT("set"), KEY(S, 1), ARGV(S, 1), LIT("PX"),
           ARGV(S, 2)) != NULL)
    tw_int(S, v.p != NULL ? 2 : 1);
}

/* ---- clock note: a master's clock record (guard.c) --------------------- */

static void tw_clock_note(tw *S) {
  double sec, usec;
  const lrep *r;
  char b[32];
  lstr now;
  int fresh;
  if (lua_time(S, &sec, &usec) != 0)
    return;
  now.n = (size_t)snprintf(b, sizeof(b), "%" PRId64,
                           lua_int(sec * 1000 + floor(usec / 1000)));
  now.p = b;
  if ((r = CALL(S, 0, LIT("hget"), KEY(S, 1), LIT("run"))) == NULL)
    return;
  fresh = !same(val(r), ARGV(S, 1));
  if (!fresh) {
    lstr rid;
    if ((r = CALL(S, 0, LIT("hget"), KEY(S, 1), LIT("rid"))) == NULL)
      return;
    rid = val(r);
    fresh = !same(rid.p != NULL ? rid : LIT(""), ARGV(S, 5));
  }
  if (fresh)
    r = CALL(S, 1, LIT("hset"), KEY(S, 1), LIT("run"), ARGV(S, 1),
             LIT("rid"), ARGV(S, 5), LIT("seen"), now, LIT("off"),
             ARGV(S, 2), LIT("unc"), ARGV(S, 3));
  else if (!is(ARGV(S, 4), "s"))
    r = CALL(S, 1, LIT("hset"), KEY(S, 1), LIT("off"), ARGV(S, 2),
             LIT("unc"), ARGV(S, 3));
  if (r == NULL)
    return;
  if (is(ARGV(S, 4), "x") &&
      CALL(S, 1, LIT("hset"), KEY(S, 1), LIT("step"), now) == NULL)
    return;
  tw_int(S, 1);
}

/* ---- force release: every key goes, its waiters hear ------------------ */

static void tw_force_release(tw *S) {
  int64_t n = 0;
  int i;
  for (i = 1; i <= S->nk; i++) {
    const lrep *r = CALL(S, 0, LIT("del"), KEY(S, i));
    lstr ch;
    if (r == NULL)
      return;
    n += r->i;
    if (cat(S, 0, &ch, LIT("__redlock__:"), KEY(S, i), NONE) != 0 ||
        publish(S, ch) != 0)
      return;
  }
  tw_int(S, n);
}

/* ---- mark forget: HDEL if the mark still names that instance --------- */

static void tw_mark_forget(tw *S) {
  const lrep *r = CALL(S, 0, LIT("hget"), KEY(S, 1), ARGV(S, 1));
  if (r == NULL)
    return;
  if (!same(val(r), ARGV(S, 2))) {
    tw_int(S, 0);
    return;
  }
  if ((r = CALL(S, 1, LIT("hdel"), KEY(S, 1), ARGV(S, 1))) != NULL)
    tw_int(S, r->i);
}

/* ---- the ttl record: set, raise --------------------------------------- */

static void tw_maxttl_set(tw *S) {
  onum x;
  if (CALL(S, 0, LIT("set"), KEY(S, 1), ARGV(S, 1)) == NULL)
    return;
  x = tonum(S, ARGV(S, 1));
  if (x.ok) {
    tw_num(S, x.v);
  } else {
    out_nil(S->R);
    S->done = 1;
  }
}

static void tw_maxttl_raise(tw *S) {
  const lrep *r = CALL(S, 0, LIT("get"), KEY(S, 1));
  onum v, t;
  lstr cv;
  int less;
  if (r == NULL)
    return;
  cv = val(r);
  v = tonum(S, cv.p != NULL ? cv : LIT("0"));
  t = tonum(S, ARGV(S, 1));
  less = lt_le(S, v, t, 0);   /* t > v */
  if (less < 0)
    return;
  if (less) {
    if (CALL(S, 1, LIT("set"), KEY(S, 1), ARGV(S, 1)) != NULL)
      tw_num(S, t.v);
    return;
  }
  tw_num(S, v.v);
}

/* ---- read-write locks: RW_TYPES and RW_PRELUDE -------------------------- */

/* Slots: 0 the snapshot h, 1 the plain key's value pv, 2 occupy's hh, 3
 * and 4 transient calls; builders: 1 eid, 2 me, 3 chan, 4 and 5
 * transient. */
#define RW_MARK "__redlock__:rw"

typedef struct rwst {
  double now;
  const lrep *h;           /* HGETALL at the start (fields, values) */
  double *hv;              /* tonumber of h's values */
  double readers, intents, entitled, maxexp, emax;
  int writer, mine, wgone, opening;
  lstr eid, me, pv, chan;
  onum lease;
  int plain;
} rwst;

static lstr el(const lrep *r, size_t i) {
  return val(&r->el[i]);
}

static int prefix2(lstr f, const char *p) {
  return f.n >= 2 && f.p[0] == p[0] && f.p[1] == p[1];
}

/* keep(exp): maxexp = max(maxexp, exp); the hash's ttl at maxexp. */
static int rw_keep(tw *S, rwst *P, double exp) {
  char nb[40];
  if (P->maxexp < exp)
    P->maxexp = exp;
  return CALL(S, 3, LIT("pexpire"), KEY(S, 1),
              lua_num(P->maxexp - P->now, nb)) != NULL &&
                 CALL(S, 3, LIT("hset"), KEY(S, 1), LIT("z:"),
                      lua_num(P->maxexp, nb)) != NULL
             ? 0
             : -1;
}

/* empty(): nothing but "z:" is left (hlen == hexists z:). 1, 0 or -1. */
static int rw_empty(tw *S, int slot) {
  const lrep *r = CALL(S, slot, LIT("hlen"), KEY(S, 1));
  int64_t n;
  if (r == NULL)
    return -1;
  n = r->i;
  if ((r = CALL(S, slot, LIT("hexists"), KEY(S, 1), LIT("z:"))) == NULL)
    return -1;
  return n == r->i;
}

/* entitle(): every live "q:" of the snapshot becomes "e:", the opening is
 * set while any is entitled. */
static int rw_entitle(tw *S, rwst *P) {
  size_t i;
  char nb[40];
  for (i = 0; i + 1 < P->h->nel; i += 2) {
    lstr f = el(P->h, i), ef, qid;
    double v = P->hv[i / 2];
    if (!prefix2(f, "q:") || !(P->now < v))
      continue;
    if (cat(S, 4, &ef, LIT("e:"), (lstr){f.p + 2, f.n - 2}, NONE) != 0 ||
        CALL(S, 3, LIT("hset"), KEY(S, 1), ef, lua_num(v, nb)) == NULL ||
        CALL(S, 3, LIT("hdel"), KEY(S, 1), f) == NULL)
      return -1;
    P->entitled += 1;
    if (P->emax < v)
      P->emax = v;
    if (cat(S, 5, &qid, LIT("q:"), ARGV(S, 4), NONE) != 0)
      return -1;
    if (same(f, qid))
      P->mine = 1;
  }
  if (P->entitled > 0) {
    if (CALL(S, 3, LIT("hset"), KEY(S, 1), LIT("p:"),
             lua_num(P->emax, nb)) == NULL)
      return -1;
    P->opening = 1;
  }
  if (P->now < P->maxexp &&
      (CALL(S, 3, LIT("pexpire"), KEY(S, 1),
            lua_num(P->maxexp - P->now, nb)) == NULL ||
       CALL(S, 3, LIT("hset"), KEY(S, 1), LIT("z:"),
            lua_num(P->maxexp, nb)) == NULL))
    return -1;
  return 0;
}

/* occupy(): the plain key holds RW_MARK until the latest owner's expiry;
 * it goes (and its waiters hear, unless quiet) with the last owner. */
static int rw_occupy(tw *S, rwst *P) {
  const lrep *hh = CALL(S, 2, LIT("hgetall"), KEY(S, 1));
  double m = 0;
  size_t i;
  char nb[40];
  if (hh == NULL)
    return -1;
  for (i = 0; i + 1 < hh->nel; i += 2) {
    lstr f = el(hh, i), vs = el(hh, i + 1);
    onum v;
    if (!prefix2(f, "r:") && !prefix2(f, "w:"))
      continue;
    v = tonum(S, vs);
    if (!v.ok) {   /* m < v: the script only writes numbers there */
      tw_lua(S, "attempt to compare number with nil");
      return -1;
    }
    if (m < v.v)
      m = v.v;
  }
  if (P->plain)
    return 0;
  if (P->now < m)
    return CALL(S, 3, LIT("set"), KEY(S, 2), LIT(RW_MARK), LIT("px"),
                lua_num(m - P->now, nb)) != NULL
               ? 0
               : -1;
  if (P->pv.p != NULL) {
    lstr ch;
    if (CALL(S, 3, LIT("del"), KEY(S, 2)) == NULL)
      return -1;
    if (!is(ARGV(S, 5), "1") &&
        (cat(S, 4, &ch, LIT("__redlock__:"), KEY(S, 2), NONE) != 0 ||
         publish(S, ch) != 0))
      return -1;
  }
  return 0;
}

/* The type checks (RW_TYPES): 0, or -1 with the script's reply written
 * (an error_reply naming the key, or a call's error). */
static int rw_types(tw *S) {
  const lrep *t = CALL(S, 3, LIT("type"), KEY(S, 2));
  lstr k;
  if (t == NULL)
    return -1;
  if (!is(val(t), "none") && !is(val(t), "string")) {
    out_err(S->R, "ERR the name holds a non-lock key (%.*s): a lock's name "
                  "is its key", (int)t->n, t->s);
    S->done = 1;
    return -1;
  }
  if ((t = CALL(S, 3, LIT("type"), KEY(S, 1))) == NULL)
    return -1;
  if (!is(val(t), "none") && !is(val(t), "hash")) {
    k = KEY(S, 1);
    out_err(S->R, "ERR the name's read-write key %.*s holds a non-lock key "
                  "(%.*s)", (int)k.n, k.p, (int)t->n, t->s);
    S->done = 1;
    return -1;
  }
  return 0;
}

/* RW_PRELUDE: 0 with P filled, or -1 with the script's reply written. */
static int rw_prelude(tw *S, rwst *P) {
  simkv *kv = S->R->kv;
  double sec, usec;
  const lrep *r;
  size_t i, n;
  memset(P, 0, sizeof(*P));
  if (rw_types(S) != 0 || lua_time(S, &sec, &usec) != 0)
    return -1;
  P->now = sec * 1000 + floor(usec / 1000);
  /* The hash's own clock: z: minus its pttl (scripts.c). */
  if ((r = CALL(S, 3, LIT("hget"), KEY(S, 1), LIT("z:"))) == NULL)
    return -1;
  {
    lstr zs = val(r);
    onum z = tonum(S, zs.p != NULL ? zs : LIT(""));
    if ((r = CALL(S, 4, LIT("pttl"), KEY(S, 1))) == NULL)
      return -1;
    if (z.ok && r->i > 0)
      P->now = z.v - (double)r->i;
  }
  if ((P->h = CALL(S, 0, LIT("hgetall"), KEY(S, 1))) == NULL)
    return -1;
  if (cat(S, 1, &P->eid, LIT("e:"), ARGV(S, 4), NONE) != 0)
    return -1;
  n = P->h->nel / 2;
  if (n > kv->dcap) {
    double *d = realloc(kv->dbuf, n * 2 * sizeof(*d));
    if (d == NULL) {
      kv->oom = 1;
      S->done = 1;
      return -1;
    }
    kv->dbuf = d;
    kv->dcap = n * 2;
  }
  P->hv = kv->dbuf;
  for (i = 0; i < n; i++) {
    lstr f = el(P->h, 2 * i);
    onum v = tonum(S, el(P->h, 2 * i + 1));
    int le;
    P->hv[i] = v.v;
    if (prefix2(f, "z:"))
      continue;
    if ((le = lt_le(S, v, num(P->now), 1)) < 0)   /* v <= now */
      return -1;
    if (le) {
      if (CALL(S, 3, LIT("hdel"), KEY(S, 1), f) == NULL)
        return -1;
      if (prefix2(f, "w:"))
        P->wgone = 1;
      continue;
    }
    if (prefix2(f, "i:")) {
      P->intents += 1;
    } else if (prefix2(f, "e:")) {
      P->entitled += 1;
      if (same(f, P->eid))
        P->mine = 1;
      if (P->emax < v.v)
        P->emax = v.v;
    } else if (prefix2(f, "p:")) {
      P->opening = 1;
    } else if (prefix2(f, "w:")) {
      P->writer = 1;
    } else if (prefix2(f, "r:")) {
      P->readers += 1;
    }
    if (P->maxexp < v.v)
      P->maxexp = v.v;
  }
  if (cat(S, 2, &P->me, ARGV(S, 3), LIT(":"), ARGV(S, 1)) != 0)
    return -1;
  P->lease = tonum(S, ARGV(S, 6));
  if (P->wgone && !P->writer && rw_entitle(S, P) != 0)
    return -1;
  if ((r = CALL(S, 1, LIT("get"), KEY(S, 2))) == NULL)
    return -1;
  P->pv = val(r);
  P->plain = P->pv.p != NULL && !is(P->pv, RW_MARK);
  if (cat(S, 3, &P->chan, LIT("__redlock__:"), KEY(S, 2), LIT(":rw")) != 0)
    return -1;
  return 0;
}

/* exp = now + tonumber(ARGV[2]): 0, or -1 after Lua's error. */
static int rw_exp(tw *S, const rwst *P, double *exp) {
  onum t = tonum(S, ARGV(S, 2));
  if (!t.ok) {
    tw_lua(S, "attempt to perform arithmetic on a nil value");
    return -1;
  }
  *exp = P->now + t.v;
  return 0;
}

/* lease > 0: 1, 0, or -1 after Lua's error. */
static int rw_lease(tw *S, const rwst *P) {
  return lt_le(S, num(0), P->lease, 0);
}

/* Owner field me at exp, the hash's ttl, the plain key: granted. */
static void rw_grant(tw *S, rwst *P, double exp) {
  char nb[40];
  if (CALL(S, 3, LIT("hset"), KEY(S, 1), P->me, lua_num(exp, nb)) != NULL &&
      rw_keep(S, P, exp) == 0 && rw_occupy(S, P) == 0)
    tw_int(S, 1);
}

static void tw_rw_acquire(tw *S) {
  rwst P;
  double exp;
  int lease;
  lstr f;
  char nb[40];
  if (rw_prelude(S, &P) != 0 || rw_exp(S, &P, &exp) != 0)
    return;
  if (is(ARGV(S, 3), "r")) {
    if (!P.plain && !P.writer && (P.intents == 0 || P.mine)) {
      if (cat(S, 4, &f, LIT("q:"), ARGV(S, 4), NONE) != 0 ||
          CALL(S, 3, LIT("hdel"), KEY(S, 1), f) == NULL)
        return;
      rw_grant(S, &P, exp);
      return;
    }
    if ((lease = rw_lease(S, &P)) < 0)
      return;
    if (lease) {
      double t = P.now + P.lease.v;
      if (P.mine)
        f = P.eid;
      else if (cat(S, 4, &f, LIT("q:"), ARGV(S, 4), NONE) != 0)
        return;
      if (CALL(S, 3, LIT("hset"), KEY(S, 1), f, lua_num(t, nb)) == NULL ||
          rw_keep(S, &P, t) != 0)
        return;
    }
    tw_int(S, 0);
    return;
  }
  if (!P.plain && !P.writer && P.readers == 0 &&
      !(P.opening && P.entitled > 0)) {
    if (cat(S, 4, &f, LIT("i:"), ARGV(S, 4), NONE) != 0 ||
        CALL(S, 3, LIT("hdel"), KEY(S, 1), f) == NULL)
      return;
    rw_grant(S, &P, exp);
    return;
  }
  if ((lease = rw_lease(S, &P)) < 0)
    return;
  if (lease) {
    double t = P.now + P.lease.v;
    if (cat(S, 4, &f, LIT("i:"), ARGV(S, 4), NONE) != 0 ||
        CALL(S, 3, LIT("hset"), KEY(S, 1), f, lua_num(t, nb)) == NULL ||
        rw_keep(S, &P, t) != 0)
      return;
  }
  tw_int(S, 0);
}

static void tw_rw_extend(tw *S) {
  rwst P;
  const lrep *r;
  double exp;
  if (rw_prelude(S, &P) != 0)
    return;
  if (P.plain) {
    tw_int(S, 0);
    return;
  }
  if ((r = CALL(S, 3, LIT("hexists"), KEY(S, 1), P.me)) == NULL)
    return;
  if (r->i == 0) {
    tw_int(S, 0);
    return;
  }
  if (rw_exp(S, &P, &exp) != 0)
    return;
  rw_grant(S, &P, exp);
}

static void tw_rw_release(tw *S) {
  rwst P;
  const lrep *r;
  int64_t n;
  int e;
  char nb[40];
  if (rw_prelude(S, &P) != 0)
    return;
  if ((r = CALL(S, 3, LIT("hdel"), KEY(S, 1), P.me)) == NULL)
    return;
  n = r->i;
  if (is(ARGV(S, 7), "p")) {
    int lease = rw_lease(S, &P);
    if (lease < 0)
      return;
    if (lease) {
      double exp = P.now + P.lease.v;
      lstr f;
      if (is(ARGV(S, 3), "w")) {
        if (cat(S, 4, &f, LIT("i:"), ARGV(S, 4), NONE) != 0 ||
            CALL(S, 3, LIT("hset"), KEY(S, 1), f, lua_num(exp, nb)) == NULL)
          return;
      } else if (P.mine) {
        double mx = P.emax < exp ? exp : P.emax;   /* math.max */
        if (CALL(S, 3, LIT("hset"), KEY(S, 1), P.eid, lua_num(exp, nb)) ==
                NULL ||
            CALL(S, 3, LIT("hset"), KEY(S, 1), LIT("p:"),
                 lua_num(mx, nb)) == NULL)
          return;
      } else {
        if (cat(S, 4, &f, LIT("q:"), ARGV(S, 4), NONE) != 0 ||
            CALL(S, 3, LIT("hset"), KEY(S, 1), f, lua_num(exp, nb)) == NULL)
          return;
      }
      if (rw_keep(S, &P, exp) != 0)
        return;
      goto occupy;
    }
  }
  if (n == 1 && is(ARGV(S, 3), "w") && rw_entitle(S, &P) != 0)
    return;
occupy:
  if (rw_occupy(S, &P) != 0)
    return;
  if ((e = rw_empty(S, 3)) < 0 ||
      (e && CALL(S, 3, LIT("del"), KEY(S, 1)) == NULL))
    return;
  if (n == 1 && !is(ARGV(S, 5), "1") && publish(S, P.chan) != 0)
    return;
  tw_int(S, n);
}

/* ---- rw giveup: a waiter's place goes ------------------------------------ */

static void tw_rw_giveup(tw *S) {
  const lrep *r;
  lstr f;
  int64_t e, n;
  size_t i;
  int empty;
  if (cat(S, 4, &f, LIT("e:"), ARGV(S, 4), NONE) != 0 ||
      (r = CALL(S, 0, LIT("hdel"), KEY(S, 1), f)) == NULL)
    return;
  e = r->i;
  if (cat(S, 4, &f, LIT("i:"), ARGV(S, 4), NONE) != 0 ||
      (r = CALL(S, 0, LIT("hdel"), KEY(S, 1), f)) == NULL)
    return;
  n = e + r->i;
  if (cat(S, 4, &f, LIT("q:"), ARGV(S, 4), NONE) != 0 ||
      CALL(S, 0, LIT("hdel"), KEY(S, 1), f) == NULL)
    return;
  if (e == 1 && is(ARGV(S, 7), "g") &&
      CALL(S, 0, LIT("hdel"), KEY(S, 1), LIT("p:")) == NULL)
    return;
  if (n > 0) {
    int left = 0;
    if ((r = CALL(S, 1, LIT("hkeys"), KEY(S, 1))) == NULL)
      return;
    for (i = 0; i < r->nel && !left; i++)
      left = prefix2(el(r, i), "e:");
    if (!left && CALL(S, 0, LIT("hdel"), KEY(S, 1), LIT("p:")) == NULL)
      return;
  }
  if ((empty = rw_empty(S, 0)) < 0 ||
      (empty && CALL(S, 0, LIT("del"), KEY(S, 1)) == NULL))
    return;
  if (n > 0 && !is(ARGV(S, 5), "1")) {
    lstr ch;
    if (cat(S, 3, &ch, LIT("__redlock__:"), KEY(S, 2), LIT(":rw")) != 0 ||
        publish(S, ch) != 0)
      return;
  }
  tw_int(S, 1);
}

/* ---- the twins' table ------------------------------------------------- */

static void (*const twins[REDLOCK__N_CMDS])(tw *S) = {
    [REDLOCK__CMD_RELEASE] = tw_release,
    [REDLOCK__CMD_EXTEND] = tw_extend,
    [REDLOCK__CMD_INSPECT] = tw_inspect,
    [REDLOCK__CMD_FENCED_ACQUIRE] = tw_fenced_acquire,
    [REDLOCK__CMD_FENCE] = tw_fence,
    [REDLOCK__CMD_MULTI_ACQUIRE] = tw_multi_acquire,
    [REDLOCK__CMD_MULTI_RELEASE] = tw_multi_release,
    [REDLOCK__CMD_MULTI_EXTEND] = tw_multi_extend,
    [REDLOCK__CMD_RW_ACQUIRE] = tw_rw_acquire,
    [REDLOCK__CMD_RW_EXTEND] = tw_rw_extend,
    [REDLOCK__CMD_RW_RELEASE] = tw_rw_release,
    [REDLOCK__CMD_RW_GIVEUP] = tw_rw_giveup,
    [REDLOCK__CMD_MAXTTL_RAISE] = tw_maxttl_raise,
    [REDLOCK__CMD_MULTI_PTTL] = tw_multi_pttl,
    [REDLOCK__CMD_BATCH_EXTEND] = tw_batch_extend,
    [REDLOCK__CMD_TAKEOVER] = tw_takeover,
    [REDLOCK__CMD_CLOCK_NOTE] = tw_clock_note,
    [REDLOCK__CMD_MAXTTL_SET] = tw_maxttl_set,
    [REDLOCK__CMD_FORCE_RELEASE] = tw_force_release,
    [REDLOCK__CMD_MARK_FORGET] = tw_mark_forget,
};

/* ---- scripts the twins do not know: Lua 5.1, as Redis 7.0 runs them ---- */

/* A script whose text is not one of the library's (a mutant's, or any
 * other) runs in a Lua 5.1 interpreter, as Redis's does: KEYS and ARGV,
 * redis.call and redis.pcall through the same handlers as the commands
 * (the checks of rcall: arguments, the command, its arity, a write's
 * permission), redis.error_reply and redis.status_reply, and the reply
 * converted both ways as Redis 7.0's RESP2 conversions do. The library's
 * own scripts keep their twins (fast, and checked against Redis by
 * test-sim-diff); this path is what lets the simulator judge a changed
 * script at all. One interpreter per call: slow, and only for these. */

typedef struct luarun {
  run *R;
  const char *sha;
  int dirty;               /* a write was let through: no more checks */
} luarun;

static luarun *luarun_of(lua_State *L) {
  luarun *lr;
  lua_getfield(L, LUA_REGISTRYINDEX, "simkv_run");
  lr = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return lr;
}

/* Pushes {field = text} (an error or a status reply as Lua sees it). */
static void lua_push_field(lua_State *L, const char *field, const char *p,
                           size_t n) {
  lua_newtable(L);
  lua_pushlstring(L, p, n);
  lua_setfield(L, -2, field);
}

/* Pushes the Lua value of the RESP reply at *pp (ours: well formed), and
 * moves *pp past it: an integer is a number, a bulk a string, a nil
 * bulk false, an array a table, a status {ok = ...}, an error
 * {err = ...}. */
static void lua_push_resp(lua_State *L, const char **pp) {
  const char *p = *pp;
  const char *e = strchr(p, '\r');
  size_t line = (size_t)(e - p);
  long long v, i;
  switch (p[0]) {
    case '+':
      lua_push_field(L, "ok", p + 1, line - 1);
      *pp = p + line + 2;
      return;
    case '-':
      lua_push_field(L, "err", p + 1, line - 1);
      *pp = p + line + 2;
      return;
    case ':':
      lua_pushnumber(L, (lua_Number)strtoll(p + 1, NULL, 10));
      *pp = p + line + 2;
      return;
    case '*':
      v = strtoll(p + 1, NULL, 10);
      *pp = p + line + 2;
      if (v < 0) {
        lua_pushboolean(L, 0);
        return;
      }
      lua_createtable(L, (int)v, 0);
      for (i = 1; i <= v; i++) {
        lua_push_resp(L, pp);
        lua_rawseti(L, -2, (int)i);
      }
      return;
    default:   /* '$' */
      v = strtoll(p + 1, NULL, 10);
      if (v < 0) {
        lua_pushboolean(L, 0);
        *pp = p + line + 2;
        return;
      }
      lua_pushlstring(L, p + line + 2, (size_t)v);
      *pp = p + line + 2 + (size_t)v + 2;
      return;
  }
}

/* redis.call (raise 1) and redis.pcall (raise 0). */
static int lua_redis_generic(lua_State *L, int raise) {
  luarun *lr = luarun_of(L);
  run *R = lr->R;
  simkv *kv = R->kv;
  int argc = lua_gettop(L), i;
  const cmddef *c;
  char (*nums)[40];
  const char **av;
  size_t *al;
  const char *err = NULL;
  run Q;
  simkv_out *o = &kv->slot_out[NSLOT - 1];
  const char *p;
  if (argc == 0)
    return luaL_error(L, "Please specify at least one argument for this "
                         "redis lib call");
  nums = malloc((size_t)argc * sizeof(*nums));
  av = malloc((size_t)argc * sizeof(*av));
  al = malloc((size_t)argc * sizeof(*al));
  if (nums == NULL || av == NULL || al == NULL) {
    free(nums);
    free(av);
    free(al);
    kv->oom = 1;
    return luaL_error(L, "out of memory");
  }
  for (i = 0; i < argc && err == NULL; i++) {
    if (lua_type(L, i + 1) == LUA_TNUMBER) {
      lstr n = lua_num((double)lua_tonumber(L, i + 1), nums[i]);
      av[i] = n.p;
      al[i] = n.n;
    } else if (lua_type(L, i + 1) == LUA_TSTRING) {
      av[i] = lua_tolstring(L, i + 1, &al[i]);
    } else {
      err = "ERR Lua redis lib command arguments must be strings or "
            "integers";
    }
  }
  c = err == NULL ? find_cmd(commands, av[0], al[0], 0) : NULL;
  if (err == NULL && (c == NULL || c->fn == NULL))
    err = "ERR Unknown Redis command called from script";
  if (err == NULL && !arity_ok(c, argc))
    err = "ERR Wrong number of args calling Redis command from script";
  if (err == NULL && (c->flags & F_WRITE) && !lr->dirty) {
    if (is_replica(R))
      err = "READONLY You can't write against a read only replica.";
    else if (!good_replicas(R))
      err = "NOREPLICAS Not enough good replicas to write.";
    else
      lr->dirty = 1;
  }
  if (err != NULL) {
    free(nums);
    free(av);
    free(al);
    lua_push_field(L, "err", err, strlen(err));
    if (raise)
      return lua_error(L);
    return 1;
  }
  Q = *R;
  Q.argc = argc;
  Q.argv = av;
  Q.lens = al;
  Q.out = o;
  Q.out->len = 0;
  Q.wrote = 0;
  c->fn(&Q);
  R->wrote |= Q.wrote;
  free(nums);
  free(av);
  free(al);
  if (kv->oom || out_reserve(kv, o, 1) != 0)
    return luaL_error(L, "out of memory");
  o->p[o->len] = '\0';
  p = o->p;
  lua_push_resp(L, &p);
  if (raise && o->p[0] == '-')
    return lua_error(L);
  return 1;
}

static int lua_redis_call(lua_State *L) {
  return lua_redis_generic(L, 1);
}

static int lua_redis_pcall(lua_State *L) {
  return lua_redis_generic(L, 0);
}

static int lua_redis_error_reply(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  lua_push_field(L, "err", p, n);
  return 1;
}

static int lua_redis_status_reply(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  lua_push_field(L, "ok", p, n);
  return 1;
}

/* The Lua value at the top of the stack as the script's reply (Redis's
 * luaReplyToRedisReply, RESP2), popped. */
static void lua_reply(run *R, lua_State *L) {
  switch (lua_type(L, -1)) {
    case LUA_TSTRING: {
      size_t n;
      const char *p = lua_tolstring(L, -1, &n);
      out_bulk(R, p, n);
      break;
    }
    case LUA_TBOOLEAN:
      if (lua_toboolean(L, -1))
        out_int(R, 1);
      else
        out_nil(R);
      break;
    case LUA_TNUMBER:
      out_int(R, lua_int((double)lua_tonumber(L, -1)));
      break;
    case LUA_TTABLE: {
      size_t n = 0, i;
      lua_getfield(L, -1, "err");
      if (lua_type(L, -1) == LUA_TSTRING) {
        out_err(R, "%s", lua_tostring(L, -1));   /* redis.error_reply */
        lua_pop(L, 2);
        return;
      }
      lua_pop(L, 1);
      lua_getfield(L, -1, "ok");
      if (lua_type(L, -1) == LUA_TSTRING) {
        out_raw(R, "+", 1);
        out_lit(R, lua_tostring(L, -1));
        out_raw(R, "\r\n", 2);
        lua_pop(L, 2);
        return;
      }
      lua_pop(L, 1);
      for (;;) {
        lua_rawgeti(L, -1, (int)(n + 1));
        if (lua_isnil(L, -1)) {
          lua_pop(L, 1);
          break;
        }
        lua_pop(L, 1);
        n++;
      }
      out_arr(R, n);
      for (i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, (int)i);
        lua_reply(R, L);
      }
      break;
    }
    default:
      out_nil(R);
      break;
  }
  lua_pop(L, 1);
}

static void run_lua(run *R, const char *sha, const char *text, size_t len,
                    int nk) {
  luarun lr;
  lua_State *L = luaL_newstate();
  int i;
  if (L == NULL) {
    R->kv->oom = 1;
    return;
  }
  lr.R = R;
  lr.sha = sha;
  lr.dirty = 0;
  luaL_openlibs(L);
  lua_pushlightuserdata(L, &lr);
  lua_setfield(L, LUA_REGISTRYINDEX, "simkv_run");
  lua_newtable(L);
  lua_pushcfunction(L, lua_redis_call);
  lua_setfield(L, -2, "call");
  lua_pushcfunction(L, lua_redis_pcall);
  lua_setfield(L, -2, "pcall");
  lua_pushcfunction(L, lua_redis_error_reply);
  lua_setfield(L, -2, "error_reply");
  lua_pushcfunction(L, lua_redis_status_reply);
  lua_setfield(L, -2, "status_reply");
  lua_setglobal(L, "redis");
  lua_createtable(L, nk, 0);
  for (i = 0; i < nk; i++) {
    lua_pushlstring(L, R->argv[3 + i], R->lens[3 + i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "KEYS");
  lua_createtable(L, R->argc - 3 - nk, 0);
  for (i = 3 + nk; i < R->argc; i++) {
    lua_pushlstring(L, R->argv[i], R->lens[i]);
    lua_rawseti(L, -2, i - 2 - nk);
  }
  lua_setglobal(L, "ARGV");
  if (luaL_loadbuffer(L, text, len, "@user_script") != 0) {
    out_err(R, "ERR Error compiling script (new function): %s",
            lua_tostring(L, -1));
    lua_close(L);
    return;
  }
  if (lua_pcall(L, 0, 1, 0) != 0) {
    if (lua_type(L, -1) == LUA_TTABLE) {
      lua_getfield(L, -1, "err");
      out_err(R, "%s script: %s, on @user_script:1.",
              lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                             : "ERR unknown error",
              sha);
    } else {
      out_err(R, "ERR %s script: %s, on @user_script:1.",
              lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                             : "unknown error",
              sha);
    }
    lua_close(L);
    return;
  }
  lua_reply(R, L);
  lua_close(L);
}

static int lua_only;

void simkv_lua_only(int on) {
  lua_only = on;
}

static void run_twin(run *R, int twin, int nk) {
  tw S;
  if (twins[twin] == NULL || lua_only) {
    const redlock__script *sc = lib_script(twin);
    run_lua(R, sc->sha, sc->text, sc->len, nk);
    return;
  }
  memset(&S, 0, sizeof(S));
  S.R = R;
  S.sha = lib_script(twin)->sha;
  S.nk = nk;
  S.k = R->argv + 3;
  S.kl = R->lens + 3;
  S.na = R->argc - 3 - nk;
  S.a = R->argv + 3 + nk;
  S.al = R->lens + 3 + nk;
  twins[twin](&S);
  if (!S.done)   /* a twin's bug: a reply all the same */
    out_err(R, "ERR simulated server: the twin of %s gave no reply",
            S.sha);
}

/* ==== execution ==========================================================*/

/* "unknown command '<name>', with args beginning with: '<a>' '<b>' ":
 * up to 128 characters of arguments, C strings (as Redis prints them). */
static void unknown_command(run *R) {
  char args[160];
  size_t len = 0;
  int i;
  args[0] = '\0';
  for (i = 1; i < R->argc && len < 128; i++) {
    size_t n = strnlen(R->argv[i], R->lens[i]);
    size_t room = 128 - len;
    if (n > room)
      n = room;
    len += (size_t)snprintf(args + len, sizeof(args) - len, "'%.*s' ",
                            (int)n, R->argv[i]);
  }
  out_err(R, "ERR unknown command '%.*s', with args beginning with: %s",
          (int)(strnlen(ARG(0), LEN(0)) > 128 ? 128
                                             : strnlen(ARG(0), LEN(0))),
          ARG(0), args);
}

/* Cluster routing (getNodeByQuery): the command's keys must share a slot
 * (CROSSSLOT) that the world lets this node serve. 0: go on. */
static int route(run *R, const cmddef *c) {
  int first = c->first, last = c->last, i, keys = 0, missing = 0;
  long slot = -1;
  char why[256];
  if (c->flags & F_EVAL) {
    /* numkeys as Redis 7.0's evalGetKeys reads it: atoi, no key when
     * it is below 1 or more than there are arguments. */
    char b[64];
    int nk;
    size_t n = strnlen(ARG(2), LEN(2));
    if (n >= sizeof(b))
      n = sizeof(b) - 1;
    memcpy(b, ARG(2), n);
    b[n] = '\0';
    nk = atoi(b);
    if (nk < 1 || nk > R->argc - 3)
      return 0;
    first = 3;
    last = 2 + nk;
  }
  if (first == 0)
    return 0;
  if (last < 0)
    last = R->argc - 1;
  for (i = first; i <= last && i < R->argc; i++) {
    long s = (long)redlock__key_slot(ARG(i), LEN(i));
    const kdb *d0 = &R->kv->db[0];
    long at = db_find(d0, ARG(i), LEN(i), hash_bytes(ARG(i), LEN(i)));
    keys++;
    /* Redis looks the key up without touching it (an expired one is
     * missing, and stays until something else removes it). */
    missing += at < 0 || dead(d0->slot[at], R->now_ms);
    if (slot < 0) {
      slot = s;
    } else if (s != slot) {
      out_err(R, "CROSSSLOT Keys in request don't hash to the same slot");
      return -1;
    }
  }
  if (slot < 0)
    return 0;
  why[0] = '\0';
  if (R->ctx->route(R->ctx->arg, (unsigned)slot, R->conn->asking, keys,
                    missing, why, sizeof(why)) != 0) {
    out_err(R, "%s", why);
    return -1;
  }
  return 0;
}

int simkv_exec(simkv *kv, simkv_conn *conn, const simkv_ctx *ctx, int argc,
               const char *const *argv, const size_t *lens, simkv_out *out) {
  run R;
  size_t mark = out->len;
  const cmddef *c;
  int asking_cmd = 0;
  if (argc <= 0)
    return 0;
  kv->oom = 0;
  memset(&R, 0, sizeof(R));
  R.kv = kv;
  R.conn = conn;
  R.ctx = ctx;
  R.now_us = ctx != NULL ? ctx->now_us : 0;
  R.now_ms = R.now_us / 1000;
  if (conn->db < 0 || conn->db >= NDB)
    conn->db = 0;
  R.db = &kv->db[conn->db];
  R.argc = argc;
  R.argv = argv;
  R.lens = lens;
  R.out = out;
  sweep(&R);
  c = find_cmd(commands, argv[0], lens[0], 0);
  if (c == NULL) {
    unknown_command(&R);
  } else if (c->sub != NULL && argc == 1) {
    out_err(&R, "ERR wrong number of arguments for '%s' command", c->name);
  } else {
    if (c->sub != NULL) {
      const cmddef *s = find_cmd(c->sub, argv[1], lens[1],
                                 strlen(c->name) + 1);
      if (s == NULL) {
        char up[16];
        size_t i;
        for (i = 0; c->name[i] != '\0' && i + 1 < sizeof(up); i++)
          up[i] = (char)toupper((unsigned char)c->name[i]);
        up[i] = '\0';
        out_err(&R, "ERR unknown subcommand '%.*s'. Try %s HELP.",
                (int)(strnlen(argv[1], lens[1]) > 128
                          ? 128
                          : strnlen(argv[1], lens[1])),
                argv[1], up);
        goto done;
      }
      c = s;
    }
    asking_cmd = c->fn == c_asking;
    if (!arity_ok(c, argc))
      out_err(&R, "ERR wrong number of arguments for '%s' command", c->name);
    else if (kv->conf[CF_REQUIREPASS][0] != '\0' && !conn->authed &&
             !(c->flags & F_NOAUTH))
      out_err(&R, "NOAUTH Authentication required.");
    else if (cluster(&R) && route(&R, c) != 0)
      ;
    else if ((c->flags & F_WRITE) && !good_replicas(&R))
      out_err(&R, "NOREPLICAS Not enough good replicas to write.");
    else if ((c->flags & F_WRITE) && is_replica(&R))
      out_err(&R, "READONLY You can't write against a read only replica.");
    else
      c->fn(&R);
  }
done:
  if (!asking_cmd)
    conn->asking = 0;
  if (kv->oom) {
    out->len = mark;
    kv->oom = 0;
    return -1;
  }
  return R.wrote;
}

/* ==== the kv's life ======================================================*/

simkv *simkv_new(void) {
  simkv *kv = zalloc(1, sizeof(*kv));
  int i;
  if (kv == NULL)
    return NULL;
  redlock__scripts_init();
  for (i = 0; i < CF_N; i++) {
    kv->conf[i] = copy_str(cfdefs[i].def);
    if (kv->conf[i] == NULL) {
      simkv_free(kv);
      return NULL;
    }
  }
  return kv;
}

void simkv_free(simkv *kv) {
  int i;
  entry *e;
  if (kv == NULL)
    return;
  for (i = 0; i < NDB; i++) {
    size_t k;
    for (k = 0; k < kv->db[i].cap; k++)
      if (kv->db[i].slot[k] != NULL)
        entry_free(kv->db[i].slot[k]);
    free(kv->db[i].slot);
  }
  while ((e = kv->free_list) != NULL) {
    kv->free_list = e->next_free;
    entry_free(e);
  }
  for (i = 0; i < CF_N; i++)
    free(kv->conf[i]);
  for (i = 0; i < NSLOT; i++) {
    free(kv->slot_out[i].p);
    free(kv->slot_rep[i].el);
  }
  for (i = 0; i < NSB; i++)
    free(kv->sb[i].p);
  cache_clear(kv);
  free(kv->sc);
  free(kv->cargv);
  free(kv->clens);
  free(kv->lbuf);
  free(kv->ibuf);
  free(kv->dbuf);
  free(kv);
}

static entry *entry_copy(const entry *s) {
  entry *e = zalloc(1, sizeof(*e));
  size_t i;
  if (e == NULL)
    return NULL;
  e->hash = s->hash;
  e->type = s->type;
  e->expire = s->expire;
  e->klen = s->klen;
  e->kcap = s->klen + 1;
  e->key = malloc(e->kcap);
  if (e->key == NULL)
    goto fail;
  memcpy(e->key, s->key, s->klen + 1);
  if (s->type == T_STR) {
    e->slen = s->slen;
    e->scap = s->slen + 1;
    e->s = malloc(e->scap);
    if (e->s == NULL)
      goto fail;
    memcpy(e->s, s->s, s->slen + 1);
  } else if (s->nf > 0) {
    e->f = zalloc(s->nf, sizeof(*e->f));
    if (e->f == NULL)
      goto fail;
    e->fcap = s->nf;
    for (i = 0; i < s->nf; i++) {
      size_t n = s->f[i].flen + s->f[i].vlen;
      e->f[i].p = malloc(n + 1);
      if (e->f[i].p == NULL)
        goto fail;
      memcpy(e->f[i].p, s->f[i].p, n);
      e->f[i].flen = s->f[i].flen;
      e->f[i].vlen = s->f[i].vlen;
      e->f[i].cap = n + 1;
      e->nf = i + 1;
    }
  }
  return e;
fail:
  entry_free(e);
  return NULL;
}

simkv *simkv_clone(const simkv *src) {
  simkv *kv = simkv_new();
  int i;
  if (kv == NULL)
    return NULL;
  for (i = 0; i < CF_N; i++) {
    char *v = copy_str(src->conf[i]);
    if (v == NULL)
      goto fail;
    free(kv->conf[i]);
    kv->conf[i] = v;
  }
  for (i = 0; i < NDB; i++) {
    const kdb *s = &src->db[i];
    kdb *d = &kv->db[i];
    size_t k;
    if (s->cap == 0)
      continue;
    d->slot = zalloc(s->cap, sizeof(*d->slot));
    if (d->slot == NULL)
      goto fail;
    d->cap = s->cap;
    for (k = 0; k < s->cap; k++) {
      if (s->slot[k] == NULL)
        continue;
      d->slot[k] = entry_copy(s->slot[k]);
      if (d->slot[k] == NULL)
        goto fail;
      d->n++;
    }
  }
  return kv;
fail:
  simkv_free(kv);
  return NULL;
}

void simkv_restart(simkv *kv, int64_t now_us) {
  int64_t now_ms = now_us / 1000;
  int i;
  for (i = 0; i < NDB; i++) {
    kdb *d = &kv->db[i];
    size_t k = 0;
    while (k < d->cap) {
      if (d->slot[k] != NULL && dead(d->slot[k], now_ms))
        db_remove(kv, d, k);   /* a later entry may move into k */
      else
        k++;
    }
  }
  cache_clear(kv);
}

void simkv_flush(simkv *kv) {
  int i;
  for (i = 0; i < NDB; i++)
    flush_db(kv, &kv->db[i]);
}

int simkv_copy_keys(simkv *dst, const simkv *src) {
  int i;
  simkv_flush(dst);
  for (i = 0; i < NDB; i++) {
    const kdb *s = &src->db[i];
    kdb *d = &dst->db[i];
    size_t k;
    if (s->n == 0)
      continue;
    if (d->cap < s->cap) {
      entry **slot = zalloc(s->cap, sizeof(*slot));
      if (slot == NULL)
        return -1;
      free(d->slot);
      d->slot = slot;
      d->cap = s->cap;
    }
    for (k = 0; k < s->cap; k++) {
      const entry *e = s->slot[k];
      entry *c;
      size_t j;
      if (e == NULL)
        continue;
      c = entry_copy(e);
      if (c == NULL)
        return -1;
      for (j = e->hash & (d->cap - 1); d->slot[j] != NULL;
           j = (j + 1) & (d->cap - 1))
        ;
      d->slot[j] = c;
      d->n++;
    }
  }
  return 0;
}

int simkv_migrate_one(simkv *dst, simkv *src, unsigned lo, unsigned hi,
                      int64_t src_now_us, int64_t dst_now_us) {
  kdb *s = &src->db[0], *d = &dst->db[0];
  int64_t src_ms = src_now_us / 1000, dst_ms = dst_now_us / 1000;
  size_t k = 0;
  while (k < s->cap) {
    entry *e = s->slot[k], *c;
    unsigned slot;
    long at;
    if (e == NULL) {
      k++;
      continue;
    }
    slot = redlock__key_slot(e->key, e->klen);
    if (slot < lo || slot > hi) {
      k++;
      continue;
    }
    if (dead(e, src_ms)) {
      db_remove(src, s, k);   /* a later entry may move into k */
      continue;
    }
    c = entry_copy(e);
    if (c == NULL)
      return -1;
    /* RESTORE ... REPLACE with the ttl left (DUMP's PTTL). */
    if (c->expire >= 0)
      c->expire = dst_ms + (c->expire - src_ms);
    at = db_find(d, c->key, c->klen, c->hash);
    if (at >= 0)
      db_remove(dst, d, (size_t)at);
    if ((d->n + 1) * 2 > d->cap && db_grow(dst, d) != 0) {
      entry_free(c);
      dst->oom = 0;
      return -1;
    }
    {
      size_t j;
      for (j = c->hash & (d->cap - 1); d->slot[j] != NULL;
           j = (j + 1) & (d->cap - 1))
        ;
      d->slot[j] = c;
      d->n++;
    }
    db_remove(src, s, k);
    return 1;
  }
  return 0;
}

size_t simkv_keys(const simkv *kv) {
  size_t n = 0;
  int i;
  for (i = 0; i < NDB; i++)
    n += kv->db[i].n;
  return n;
}

const char *simkv_get(simkv *kv, const char *key, size_t keylen,
                      int64_t now_us, size_t *len) {
  kdb *d = &kv->db[0];
  long i = db_find(d, key, keylen, hash_bytes(key, keylen));
  entry *e;
  if (i < 0)
    return NULL;
  e = d->slot[i];
  if (dead(e, now_us / 1000)) {
    db_remove(kv, d, (size_t)i);
    return NULL;
  }
  if (e->type != T_STR)
    return NULL;
  if (len != NULL)
    *len = e->slen;
  return e->s;
}

void simkv_out_reset(simkv_out *o) {
  o->len = 0;
}

void simkv_out_free(simkv_out *o) {
  free(o->p);
  o->p = NULL;
  o->len = o->cap = 0;
}
