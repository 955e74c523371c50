/* test-sim-diff.c: the simulated server (kv.c) against a real
 * redis-server, command by command (issue 31).
 *
 * Each case is a random command or a call of one of the library's scripts
 * (scripts.c) over small domains of keys, tokens, values and ttls, so
 * that keys collide, locks are held and free, types are wrong and numbers
 * are odd (half the tokens are the one the model's key holds: the scripts
 * find their own locks as often as others'); it runs on the real server
 * and on the model, and the replies must be the same, and so must what
 * each published (a PSUBSCRIBE * on the real server, the model's publish
 * callback). Both start empty with the library's scripts loaded and run
 * the same sequence, so their data stays in step. The phases:
 *  1. the model alone, at exact times (a real server cannot be stopped at
 *     a millisecond): expiry boundaries, PTTL, TTL's rounding, a field's
 *     number as redis.call prints it, what exec returns, restart, clone,
 *     requirepass, a replica's READONLY, routing and ASKING;
 *  2. N random cases (REDLOCK_SIM_DIFF_CASES, default 6000; the seed is
 *     printed, REDLOCK_SIM_DIFF_SEED replays one, REDLOCK_SIM_DIFF_VERBOSE
 *     prints every case), with SCRIPT FLUSH now and then (the model's:
 *     SCRIPT FLUSH, simkv_restart or simkv_clone) and so EVALSHA's
 *     NOSCRIPT, SCRIPT LOAD and EVAL's caching;
 *  3. expiry over time: keys and read-write fields with ttls of 50-90 ms,
 *     a wait past them on the server's clock, then commands and scripts;
 *  4. AUTH with requirepass, on new connections;
 *  5. a replica (REPLICAOF an address where nothing listens): writes get
 *     READONLY, in scripts at their first write;
 *  6. a two-node Redis Cluster whose first node is the model: CROSSSLOT,
 *     MOVED (the test's route callback), SELECT.
 *
 * Time. The model's clock is the real server's TIME read just before each
 * case; the server runs the case a round trip later. So ttls are >= 30 s,
 * far beyond a run, except in the cases built to expire at once (PEXPIRE
 * 0 or below, PXAT or EXAT in the past, a read-write ttl of 0 or below)
 * and in phase 3's waits. Values that carry the time differ between the
 * two sides by that round trip, and are compared with a tolerance:
 * integers, and numeric strings of the same printed form, of at least
 * 1000 in magnitude, within TOL_MS (ms: PTTL, INSPECT's pttl, MULTI_PTTL,
 * the clock record's times, the read-write fields' expiries) or TOL_US
 * (values >= 1e14, us: the fence counter that FENCED_ACQUIRE raises to
 * TIME), only in the replies that can carry them: PTTL, GET, MGET, SET
 * GET, INCR, HGET, HMGET, HGETALL, and the scripts INSPECT, MULTI_PTTL,
 * FENCED_ACQUIRE, MAXTTL_RAISE, MAXTTL_SET (a key collides with the
 * counter or a record, so any of their reads may see one);
 * TTL within 1 s (it rounds), for ttls above 1 s. TIME is compared as a
 * clock (the server's at most 2 s after the model's); INFO by its fields
 * (every field the model gives is in the server's section; role,
 * aof_enabled, connected_slaves, second_repl_offset, cluster_enabled,
 * redis_mode equal). Everything else byte for byte. Exactness at the
 * millisecond, which the tolerance cannot see, is phase 1's. */
#include <ctype.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <stdarg.h>

#include "harness.h"
#include "kv.h"
#include "pure.h"
#include "scripts.h"

#define TOL_MS 250.0
#define TOL_US 250000.0

/* ---- random ------------------------------------------------------------ */

static uint64_t rng;

static uint32_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545F4914F6CDD1DULL) >> 32);
}

static unsigned pick(unsigned n) {
  return rnd() % n;
}

static int chance(unsigned pct) {
  return pick(100) < pct;
}

#define ONE(a) ((a)[pick((unsigned)(sizeof(a) / sizeof((a)[0])))])

/* ---- a case ---------------------------------------------------------- */

enum { CMP_EXACT, CMP_TOL, CMP_TTL_S, CMP_TIME, CMP_INFO };

typedef struct kase {
  int argc;
  const char *argv[64];
  size_t lens[64];
  char buf[8192];
  size_t used;
  int cmp;
} kase;

static void add(kase *c, const char *p, size_t n) {
  if (c->argc == 64)
    TEST_FAIL("a case of more than 64 arguments");
  c->argv[c->argc] = p;
  c->lens[c->argc++] = n;
}

static void A(kase *c, const char *s) {
  add(c, s, strlen(s));
}

static void AF(kase *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void AF(kase *c, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(c->buf + c->used, sizeof(c->buf) - c->used, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(c->buf) - c->used)
    TEST_FAIL("case buffer full");
  add(c, c->buf + c->used, (size_t)n);
  c->used += (size_t)n + 1;
}

static void start(kase *c, int cmp) {
  c->argc = 0;
  c->used = 0;
  c->cmp = cmp;
}

/* ---- the two sides ----------------------------------------------------- */

static harness_server srv[2];
static redisContext *rc;     /* the cases */
static redisContext *subc;   /* PSUBSCRIBE *: what the server published */
static simkv *kv;
static simkv_conn conn;
static simkv_info info;
static simkv_ctx ctx;
static uint64_t seed;
static long case_no;
static const char *tag = "";   /* cluster phase: a hash tag on node 0 */
static char tag_a[8], tag_b[8];
static int cluster_phase;
static int verbose;   /* REDLOCK_SIM_DIFF_VERBOSE: every case and reply */

/* What the model published in the current case. */
static char pubs[64][256];
static int npubs;

static long on_publish(void *arg, const char *ch, size_t chlen,
                       const char *msg, size_t msglen) {
  (void)arg;
  if (npubs < 64)
    snprintf(pubs[npubs++], sizeof(pubs[0]), "%.*s %.*s", (int)chlen, ch,
             (int)msglen, msg);
  return 1;   /* the test's PSUBSCRIBE receives every message */
}

/* The test's cluster: node 0 (the model) serves slots 0-8191. */
static int on_route(void *arg, unsigned slot, int asking, int keys,
                    int missing, char *err, size_t n) {
  (void)arg;
  (void)asking;
  (void)keys;
  (void)missing;
  if (slot < 8192)
    return 0;
  snprintf(err, n, "MOVED %u 127.0.0.1:%d", slot, srv[1].port);
  return 1;
}

static redisContext *connect_srv(const harness_server *s) {
  struct timeval tv = {5, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (c == NULL || c->err != 0)
    TEST_FAIL("cannot connect to the server on port %d", s->port);
  redisSetTimeout(c, tv);
  return c;
}

static redisReply *srv_cmd(redisContext *c, int argc, const char **argv,
                           const size_t *lens) {
  redisReply *r = redisCommandArgv(c, argc, argv, lens);
  if (r == NULL)
    TEST_FAIL("the server did not answer (%s)", c->errstr);
  return r;
}

static redisReply *srv_cmdf(redisContext *c, const char *fmt, ...) {
  va_list ap;
  redisReply *r;
  va_start(ap, fmt);
  r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (r == NULL)
    TEST_FAIL("the server did not answer (%s)", c->errstr);
  return r;
}

/* The server's clock (TIME), in us. */
static int64_t srv_now_us(void) {
  redisReply *r = srv_cmdf(rc, "TIME");
  int64_t t;
  ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  t = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
      strtoll(r->element[1]->str, NULL, 10);
  freeReplyObject(r);
  return t;
}

/* ---- replies ------------------------------------------------------------ */

static redisReply *parse_model(const simkv_out *o) {
  redisReader *rd = redisReaderCreate();
  void *r = NULL;
  if (rd == NULL || redisReaderFeed(rd, o->p, o->len) != REDIS_OK ||
      redisReaderGetReply(rd, &r) != REDIS_OK || r == NULL)
    TEST_FAIL("the model's reply is not RESP: %.*s", (int)o->len, o->p);
  if (rd->pos != rd->len)
    TEST_FAIL("the model wrote more than one reply: %.*s", (int)o->len,
              o->p);
  redisReaderFree(rd);
  return r;
}

static void show(FILE *f, const char *p, size_t n) {
  size_t i;
  for (i = 0; i < n && i < 300; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch >= 32 && ch < 127)
      fputc(ch, f);
    else
      fprintf(f, "\\x%02x", ch);
  }
  if (n > 300)
    fprintf(f, "...(%zu bytes)", n);
}

static void show_reply(FILE *f, const redisReply *r) {
  size_t i;
  switch (r->type) {
    case REDIS_REPLY_STATUS:
      fputc('+', f);
      show(f, r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      fputc('-', f);
      show(f, r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      fprintf(f, ":%lld", r->integer);
      break;
    case REDIS_REPLY_NIL:
      fprintf(f, "(nil)");
      break;
    case REDIS_REPLY_STRING:
      fputc('"', f);
      show(f, r->str, r->len);
      fputc('"', f);
      break;
    case REDIS_REPLY_ARRAY:
      fputc('[', f);
      for (i = 0; i < r->elements; i++) {
        if (i > 0)
          fprintf(f, ", ");
        show_reply(f, r->element[i]);
      }
      fputc(']', f);
      break;
    default:
      fprintf(f, "(type %d)", r->type);
  }
}

static const char *const script_names[REDLOCK__N_CMDS] = {
    [REDLOCK__CMD_RELEASE] = "RELEASE",
    [REDLOCK__CMD_EXTEND] = "EXTEND",
    [REDLOCK__CMD_INSPECT] = "INSPECT",
    [REDLOCK__CMD_FENCED_ACQUIRE] = "FENCED_ACQUIRE",
    [REDLOCK__CMD_FENCE] = "FENCE",
    [REDLOCK__CMD_MULTI_ACQUIRE] = "MULTI_ACQUIRE",
    [REDLOCK__CMD_MULTI_RELEASE] = "MULTI_RELEASE",
    [REDLOCK__CMD_MULTI_EXTEND] = "MULTI_EXTEND",
    [REDLOCK__CMD_RW_ACQUIRE] = "RW_ACQUIRE",
    [REDLOCK__CMD_RW_EXTEND] = "RW_EXTEND",
    [REDLOCK__CMD_RW_RELEASE] = "RW_RELEASE",
    [REDLOCK__CMD_RW_GIVEUP] = "RW_GIVEUP",
    [REDLOCK__CMD_MAXTTL_RAISE] = "MAXTTL_RAISE",
    [REDLOCK__CMD_MULTI_PTTL] = "MULTI_PTTL",
    [REDLOCK__CMD_BATCH_EXTEND] = "BATCH_EXTEND",
    [REDLOCK__CMD_TAKEOVER] = "TAKEOVER",
    [REDLOCK__CMD_CLOCK_NOTE] = "CLOCK_NOTE",
    [REDLOCK__CMD_MAXTTL_SET] = "MAXTTL_SET",
    [REDLOCK__CMD_FORCE_RELEASE] = "FORCE_RELEASE",
    [REDLOCK__CMD_MARK_FORGET] = "MARK_FORGET",
};

/* A script's name for its text or SHA, or NULL. */
static const char *script_name(const char *p, size_t n) {
  int i;
  for (i = 0; i < REDLOCK__N_CMDS; i++) {
    const redlock__script *s = redlock__script_of((redlock__cmd)i);
    if (s == NULL)
      continue;
    if ((n == s->len && memcmp(p, s->text, n) == 0) ||
        (n == 40 && strncasecmp(p, s->sha, 40) == 0))
      return script_names[i];
  }
  return NULL;
}

static void show_case(FILE *f, const kase *c) {
  int i;
  for (i = 0; i < c->argc; i++) {
    const char *name = i == 1 ? script_name(c->argv[i], c->lens[i]) : NULL;
    if (i > 0)
      fputc(' ', f);
    if (name != NULL) {
      fprintf(f, "<%s%s>", name, c->lens[i] == 40 ? " sha" : " text");
      continue;
    }
    fputc('"', f);
    show(f, c->argv[i], c->lens[i]);
    fputc('"', f);
  }
}

/* A number that carries the time: a double of at least 1000 in
 * magnitude, the whole string. */
static int timeish(const char *p, size_t n, double *v) {
  char b[64], *end;
  if (n == 0 || n >= sizeof(b))
    return 0;
  memcpy(b, p, n);
  b[n] = '\0';
  *v = strtod(b, &end);
  return *end == '\0' && fabs(*v) >= 1000 && *v == *v;
}

/* The same printed form (digits may differ): "1795734033289.5" and
 * "1795734033290.5" are, "1.7957340332895e+12" is not. */
static int same_shape(const char *a, const char *b, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if ((isdigit((unsigned char)a[i]) != 0) !=
            (isdigit((unsigned char)b[i]) != 0) ||
        (!isdigit((unsigned char)a[i]) && a[i] != b[i]))
      return 0;
  return 1;
}

static int close_enough(double a, double b) {
  double tol = fabs(a) >= 1e14 ? TOL_US : TOL_MS;
  return fabs(a - b) <= tol;
}

static int same_reply(const redisReply *m, const redisReply *s, int cmp) {
  size_t i;
  double a, b;
  if (m->type != s->type)
    return 0;
  switch (m->type) {
    case REDIS_REPLY_INTEGER:
      if (m->integer == s->integer)
        return 1;
      if (cmp == CMP_TTL_S)   /* seconds, rounded: long ttls only */
        return m->integer > 1 && s->integer > 1 &&
               llabs(m->integer - s->integer) <= 1;
      return cmp == CMP_TOL && llabs(m->integer) >= 1000 &&
             llabs(s->integer) >= 1000 &&
             close_enough((double)m->integer, (double)s->integer);
    case REDIS_REPLY_STRING:
      if (m->len == s->len && memcmp(m->str, s->str, m->len) == 0)
        return 1;
      return cmp == CMP_TOL && m->len == s->len &&
             same_shape(m->str, s->str, m->len) &&
             timeish(m->str, m->len, &a) && timeish(s->str, s->len, &b) &&
             close_enough(a, b);
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return m->len == s->len && memcmp(m->str, s->str, m->len) == 0;
    case REDIS_REPLY_ARRAY:
      if (m->elements != s->elements)
        return 0;
      for (i = 0; i < m->elements; i++)
        if (!same_reply(m->element[i], s->element[i], cmp))
          return 0;
      return 1;
    default:
      return 1;
  }
}

/* TIME: two numbers, the server's at most 2 s after the model's. */
static int same_time(const redisReply *m, const redisReply *s) {
  int64_t tm, ts;
  if (m->type != REDIS_REPLY_ARRAY || s->type != REDIS_REPLY_ARRAY)
    return same_reply(m, s, CMP_EXACT);
  if (m->elements != 2 || s->elements != 2)
    return 0;
  tm = strtoll(m->element[0]->str, NULL, 10) * 1000000 +
       strtoll(m->element[1]->str, NULL, 10);
  ts = strtoll(s->element[0]->str, NULL, 10) * 1000000 +
       strtoll(s->element[1]->str, NULL, 10);
  return ts >= tm && ts - tm <= 2000000;
}

/* The value of field `name` in an INFO text ("" when absent: 0). */
static int info_field(const char *t, const char *name, char *out,
                      size_t n) {
  size_t nl = strlen(name);
  const char *p = t;
  while ((p = strstr(p, name)) != NULL) {
    if ((p == t || p[-1] == '\n') && p[nl] == ':') {
      size_t i = 0;
      p += nl + 1;
      while (i + 1 < n && p[i] != '\r' && p[i] != '\0') {
        out[i] = p[i];
        i++;
      }
      out[i] = '\0';
      return 1;
    }
    p += nl;
  }
  out[0] = '\0';
  return 0;
}

/* INFO: every field of the model's exists in the server's; the facts the
 * library and the test fix are equal. */
static int same_info(const redisReply *m, const redisReply *s) {
  static const char *const equal[] = {"role", "aof_enabled",
                                      "connected_slaves",
                                      "second_repl_offset",
                                      "cluster_enabled", "redis_mode"};
  const char *p;
  size_t i;
  if (m->type != REDIS_REPLY_STRING || s->type != REDIS_REPLY_STRING)
    return same_reply(m, s, CMP_EXACT);
  for (p = m->str; *p != '\0';) {
    const char *eol = strstr(p, "\r\n");
    const char *colon = memchr(p, ':', eol != NULL ? (size_t)(eol - p) : 0);
    if (eol == NULL)
      return 0;   /* every line ends in CRLF */
    if (colon != NULL) {
      char name[64], v1[128], v2[128];
      snprintf(name, sizeof(name), "%.*s", (int)(colon - p), p);
      if (strncmp(name, "db", 2) != 0 && !info_field(s->str, name, v2,
                                                      sizeof(v2))) {
        fprintf(stderr, "INFO: the server has no field %s\n", name);
        return 0;
      }
      for (i = 0; i < sizeof(equal) / sizeof(equal[0]); i++)
        if (strcmp(name, equal[i]) == 0) {
          info_field(m->str, name, v1, sizeof(v1));
          if (strcmp(v1, v2) != 0) {
            fprintf(stderr, "INFO: %s is %s here, %s there\n", name, v1, v2);
            return 0;
          }
        }
    } else if (p[0] == '#' && strstr(s->str, "\r\n") != NULL) {
      char head[64];
      snprintf(head, sizeof(head), "%.*s", (int)(eol - p), p);
      if (strstr(s->str, head) == NULL) {
        fprintf(stderr, "INFO: the server has no section %s\n", head);
        return 0;
      }
    }
    p = eol + 2;
  }
  return 1;
}

/* What the server published since the last case: PING on the
 * subscriber's connection, and every pmessage before its pong. */
static int srv_pubs(char out[64][256]) {
  int n = 0;
  redisReply *r;
  if (redisAppendCommand(subc, "PING") != REDIS_OK)
    TEST_FAIL("the subscriber's connection failed");
  for (;;) {
    if (redisGetReply(subc, (void **)&r) != REDIS_OK || r == NULL)
      TEST_FAIL("the subscriber's connection failed (%s)", subc->errstr);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
        strcmp(r->element[0]->str, "pmessage") == 0) {
      if (n < 64)
        snprintf(out[n++], 256, "%.*s %.*s", (int)r->element[2]->len,
                 r->element[2]->str, (int)r->element[3]->len,
                 r->element[3]->str);
      freeReplyObject(r);
      continue;
    }
    freeReplyObject(r);
    return n;   /* the pong */
  }
}

static void fail_case(const kase *c, const redisReply *m,
                      const redisReply *s, const char *what) {
  fprintf(stderr, "\nMISMATCH (%s) at case %ld, seed %llu "
                  "(REDLOCK_SIM_DIFF_SEED=%llu replays it)\ncommand: ",
          what, case_no, (unsigned long long)seed, (unsigned long long)seed);
  show_case(stderr, c);
  if (m != NULL && s != NULL) {
    fprintf(stderr, "\nmodel:  ");
    show_reply(stderr, m);
    fprintf(stderr, "\nredis:  ");
    show_reply(stderr, s);
  }
  fprintf(stderr, "\n");
  TEST_FAIL("the model and redis-server disagree");
}

/* Runs case c on the server (connection sc) and on the model
 * (connection mc) and compares the replies and the messages published. */
static void run_on(redisContext *sc, simkv_conn *mc, kase *c) {
  simkv_out o = {NULL, 0, 0};
  redisReply *m, *s;
  char theirs[64][256];
  int n, i, ok;
  case_no++;
  ctx.now_us = srv_now_us();
  npubs = 0;
  if (simkv_exec(kv, mc, &ctx, c->argc, c->argv, c->lens, &o) < 0)
    TEST_FAIL("the model ran out of memory");
  m = parse_model(&o);
  s = srv_cmd(sc, c->argc, c->argv, c->lens);
  switch (c->cmp) {
    case CMP_TIME:
      ok = same_time(m, s);
      break;
    case CMP_INFO:
      ok = same_info(m, s);
      break;
    default:
      ok = same_reply(m, s, c->cmp);
  }
  if (verbose) {
    fprintf(stderr, "case %ld: ", case_no);
    show_case(stderr, c);
    fprintf(stderr, "\n  -> ");
    show_reply(stderr, s);
    fprintf(stderr, "\n");
  }
  if (!ok)
    fail_case(c, m, s, "reply");
  n = srv_pubs(theirs);
  if (n != npubs)
    fail_case(c, m, s, "publish count");
  for (i = 0; i < n; i++)
    if (strcmp(theirs[i], pubs[i]) != 0) {
      fprintf(stderr, "published: model \"%s\", redis \"%s\"\n", pubs[i],
              theirs[i]);
      fail_case(c, m, s, "published message");
    }
  freeReplyObject(m);
  freeReplyObject(s);
  simkv_out_free(&o);
}

static void run(kase *c) {
  run_on(rc, &conn, c);
}

/* A command on both sides given as words (no spaces inside). */
static void both(int cmp, const char *line) {
  kase c;
  char *w, *save;
  start(&c, cmp);
  snprintf(c.buf, sizeof(c.buf), "%s", line);
  c.used = strlen(line) + 1;
  for (w = strtok_r(c.buf, " ", &save); w != NULL;
       w = strtok_r(NULL, " ", &save))
    A(&c, w);
  run(&c);
}

/* ---- the domains ------------------------------------------------------- */

static const char *const lock_keys[] = {"k1", "k2", "k1", "k2", "k3",
                                        "h1", "k1:rw"};
static const char *const any_keys[] = {
    "k1", "k2", "k3", "k1:rw", "k2:rw", "k3:rw", "h1", "h2", "c1",
    "__redlock__:maxttl"};
static const char *const tokens[] = {"t1", "t2", "t1", "t2", "t1",
                                     "t2", "t3", "__redlock__:rw",
                                     "__redlock__:x", ""};
static const char *const values[] = {
    "t1", "t2", "t3", "0", "1", "-1", "42", "9223372036854775807",
    "9223372036854775806", "abc", "1e3", "0x10", " 7", "7 ", "nan", "007",
    "", "-", "-0", "18446744073709551616", "-9223372036854775808",
    "-9223372036854775809",
    ("0000000000000000000000000000000000000000000000000000000000000000000000"
     "000000000000000000000000000000000000000000000000042")};
static const char *const ttls[] = {
    "30000", "60000", "3600000", "30000", "60000", "3600000", "0", "-5",
    "abc", "30000.5", "9223372036854775807", "9223372036854775", "3e4", ""};
/* Read-write ttls: a field's expiry is now + ttl on each side, and the
 * scripts take the largest of a hash's fields; one that is not an
 * integer is apart from the others by far more than the two sides'
 * clocks, so that both take the same field. */
static const char *const rw_ttls[] = {"30000", "60000", "30000", "60000",
                                      "0",     "-1",    "abc",   "45000.5",
                                      "3e4"};
static const char *const leases[] = {"30000", "30000", "0", "-1", "abc"};
static const char *const rw_fields[] = {
    "r:t1", "r:t2", "w:t1", "w:t2", "i:a", "i:b", "q:a", "q:b", "e:a",
    "e:b",  "p:",   "x",    "r:__redlock__:rw"};
static const char *const maxttls[] = {
    "30000", "60000", "5", "0", "-5", "abc", "1e3", "0x10", " 7", "inf",
    "nan", "9223372036854775807", "1e300", "-1e300", "", "12abc", "0x"};

/* A key in the case's slot (cluster phase: its tag; now and then another
 * tag, for CROSSSLOT and MOVED). */
static void AK(kase *c, const char *name) {
  const char *t = tag;
  if (cluster_phase && chance(10))
    t = chance(50) ? tag_a : tag_b;
  AF(c, "%s%s", t, name);
}

/* A ttl: mostly long, sometimes odd. */
static const char *ttl(void) {
  return chance(80) ? ttls[pick(6)] : ONE(ttls);
}

/* A value relative to now (ms): alive for long, dead, or not a number. */
static void rw_value(kase *c, int64_t now_ms) {
  switch (pick(8)) {
    case 0:
      AF(c, "%" PRId64, now_ms - 60000);
      break;
    case 1:
      A(c, ONE(values));
      break;
    case 2:
      A(c, chance(50) ? "1e20" : "nan");
      break;
    default:
      AF(c, "%" PRId64, now_ms + 60000 + (int64_t)pick(3) * 600000);
  }
}

/* ---- the script cases -------------------------------------------------- */

static int scripts_loaded = 1;

static void script_head(kase *c, redlock__cmd cmd, int nk) {
  const redlock__script *s = redlock__script_of(cmd);
  if (chance(scripts_loaded ? 12 : 50)) {
    A(c, "EVAL");
    add(c, s->text, s->len);
  } else {
    A(c, "EVALSHA");
    add(c, s->sha, 40);
  }
  AF(c, "%d", nk);
}

/* Replaces argument i by a copy of s. */
static void set_arg(kase *c, int i, const char *s) {
  size_t n = strlen(s);
  if (n + 1 > sizeof(c->buf) - c->used)
    TEST_FAIL("case buffer full");
  memcpy(c->buf + c->used, s, n + 1);
  c->argv[i] = c->buf + c->used;
  c->lens[i] = n;
  c->used += n + 1;
}

/* Now and then: fewer ARGV or KEYS than the library sends, or numkeys
 * off by one or not a number. */
static void perturb(kase *c) {
  if (chance(4) && c->argc > 3)
    c->argc -= 1 + (int)pick((unsigned)(c->argc - 3 < 7 ? c->argc - 3 : 7));
  if (chance(2)) {
    static const char *const odd[] = {"-1", "x", "99", "1x"};
    char b[24];
    long nk = strtol(c->argv[2], NULL, 10);
    if (chance(50))
      snprintf(b, sizeof(b), "%ld", nk > 0 ? nk - 1 : nk + 1);
    else
      snprintf(b, sizeof(b), "%s", ONE(odd));
    set_arg(c, 2, b);
  }
}

/* A token: half the time the one the model's key (argument ki) holds
 * now, so that the scripts find their own locks as often as others'
 * (not a value that carries the time: the server's differs). */
static void AT(kase *c, int ki) {
  size_t n;
  double d;
  const char *v = chance(50) ? simkv_get(kv, c->argv[ki], c->lens[ki],
                                         ctx.now_us, &n)
                             : NULL;
  if (v != NULL && !timeish(v, n, &d))
    AF(c, "%.*s", (int)n, v);
  else
    A(c, ONE(tokens));
}

/* An owner of the model's read-write hash (argument hi): its mode and
 * token ("r:t1" gives "r" and "t1"), or 0. */
static int rw_owner(kase *c, int hi, char *mode, char *tok, size_t n) {
  simkv_conn look = {0, 1, 0};
  simkv_out o = {NULL, 0, 0};
  const char *argv[2] = {"HKEYS", c->argv[hi]};
  size_t lens[2] = {5, c->lens[hi]};
  redisReply *r;
  size_t i, found = 0;
  if (simkv_exec(kv, &look, &ctx, 2, argv, lens, &o) < 0)
    TEST_FAIL("the model ran out of memory");
  r = parse_model(&o);
  for (i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    const redisReply *f = r->element[i];
    if (f->len > 2 && (f->str[0] == 'r' || f->str[0] == 'w') &&
        f->str[1] == ':' && pick((unsigned)++found) == 0) {
      mode[0] = f->str[0];
      mode[1] = '\0';
      snprintf(tok, n, "%.*s", (int)f->len - 2, f->str + 2);
    }
  }
  freeReplyObject(r);
  simkv_out_free(&o);
  return found > 0;
}

static void gen_script(kase *c, int64_t now_ms) {
  static const redlock__cmd all[] = {
      REDLOCK__CMD_RELEASE,        REDLOCK__CMD_EXTEND,
      REDLOCK__CMD_INSPECT,        REDLOCK__CMD_FENCED_ACQUIRE,
      REDLOCK__CMD_FENCE,          REDLOCK__CMD_MULTI_ACQUIRE,
      REDLOCK__CMD_MULTI_RELEASE,  REDLOCK__CMD_MULTI_EXTEND,
      REDLOCK__CMD_RW_ACQUIRE,     REDLOCK__CMD_RW_ACQUIRE,
      REDLOCK__CMD_RW_EXTEND,      REDLOCK__CMD_RW_RELEASE,
      REDLOCK__CMD_RW_RELEASE,     REDLOCK__CMD_RW_GIVEUP,
      REDLOCK__CMD_MAXTTL_RAISE,   REDLOCK__CMD_MULTI_PTTL,
      REDLOCK__CMD_BATCH_EXTEND,   REDLOCK__CMD_TAKEOVER,
      REDLOCK__CMD_CLOCK_NOTE,     REDLOCK__CMD_MAXTTL_SET,
      REDLOCK__CMD_FORCE_RELEASE,  REDLOCK__CMD_MARK_FORGET};
  redlock__cmd cmd = ONE(all);
  int nk, i;
  (void)now_ms;
  start(c, CMP_EXACT);
  switch (cmd) {
    case REDLOCK__CMD_RELEASE:
    case REDLOCK__CMD_EXTEND:
      script_head(c, cmd, 1);
      AK(c, ONE(lock_keys));
      AT(c, 3);
      if (cmd == REDLOCK__CMD_EXTEND)
        A(c, ttl());
      A(c, chance(50) ? "0" : "1");
      break;
    case REDLOCK__CMD_INSPECT:
      c->cmp = CMP_TOL;
      nk = chance(50) ? 1 : 2;
      script_head(c, cmd, nk);
      i = (int)pick(3);
      AK(c, lock_keys[i]);
      if (nk == 2)
        AK(c, chance(80) ? (i == 0 ? "k1:rw" : "k2:rw") : ONE(any_keys));
      break;
    case REDLOCK__CMD_FENCED_ACQUIRE:
    case REDLOCK__CMD_FENCE: {
      static const char *const counters[] = {"c1", "c1", "c2", "h1", "k2"};
      static const char *const ts[] = {"5", "100", "abc", "1e18", "-1", "",
                                       "0x10", "1795000000000000"};
      c->cmp = cmd == REDLOCK__CMD_FENCED_ACQUIRE ? CMP_TOL : CMP_EXACT;
      script_head(c, cmd, 2);
      AK(c, ONE(lock_keys));
      AK(c, ONE(counters));
      AT(c, 3);
      A(c, cmd == REDLOCK__CMD_FENCED_ACQUIRE ? ttl() : ONE(ts));
      break;
    }
    case REDLOCK__CMD_MULTI_ACQUIRE:
    case REDLOCK__CMD_MULTI_RELEASE:
    case REDLOCK__CMD_MULTI_EXTEND:
    case REDLOCK__CMD_MULTI_PTTL:
    case REDLOCK__CMD_FORCE_RELEASE:
      if (cmd == REDLOCK__CMD_MULTI_PTTL)
        c->cmp = CMP_TOL;
      nk = (int)pick(4);
      script_head(c, cmd, nk);
      for (i = 0; i < nk; i++)
        AK(c, cmd == REDLOCK__CMD_FORCE_RELEASE ? ONE(any_keys)
                                                : ONE(lock_keys));
      if (cmd == REDLOCK__CMD_MULTI_PTTL || cmd == REDLOCK__CMD_FORCE_RELEASE)
        break;
      if (nk > 0)
        AT(c, 3);
      else
        A(c, ONE(tokens));
      if (cmd != REDLOCK__CMD_MULTI_RELEASE)
        A(c, ttl());
      A(c, chance(50) ? "0" : "1");
      break;
    case REDLOCK__CMD_RW_ACQUIRE:
    case REDLOCK__CMD_RW_EXTEND:
    case REDLOCK__CMD_RW_RELEASE:
    case REDLOCK__CMD_RW_GIVEUP: {
      static const char *const modes[] = {"r", "w", "r", "w", "x"};
      static const char *const ids[] = {"a", "b", "a", "b", "c"};
      static const char *const pbs[] = {"0", "p", "g", "0"};
      static const char *const odd_rw[] = {"h1", "k1", "k2:rw"};
      static const char *const odd_plain[] = {"h1", "k1:rw", "k3"};
      /* Mostly k3 (read-write only) and k2 (both modes). */
      static const char *const names[][2] = {
          {"k3:rw", "k3"}, {"k3:rw", "k3"}, {"k2:rw", "k2"}, {"k1:rw", "k1"}};
      int which = (int)pick(4);
      char mode[2], tok[64];
      script_head(c, cmd, 2);
      AK(c, chance(90) ? names[which][0] : ONE(odd_rw));
      AK(c, chance(90) ? names[which][1] : ONE(odd_plain));
      if (cmd == REDLOCK__CMD_RW_ACQUIRE || chance(40) ||
          !rw_owner(c, 3, mode, tok, sizeof(tok))) {
        A(c, chance(85) ? tokens[pick(3)] : ONE(tokens));
        snprintf(mode, sizeof(mode), "%s", ONE(modes));
      } else {
        AF(c, "%s", tok);
      }
      A(c, chance(80) ? rw_ttls[pick(4)] : ONE(rw_ttls));
      AF(c, "%s", mode);
      A(c, ONE(ids));
      A(c, chance(50) ? "0" : "1");
      A(c, chance(80) ? leases[pick(3)] : ONE(leases));
      A(c, ONE(pbs));
      break;
    }
    case REDLOCK__CMD_MAXTTL_RAISE:
    case REDLOCK__CMD_MAXTTL_SET: {
      static const char *const keys[] = {"__redlock__:maxttl",
                                         "__redlock__:maxttl", "k1", "h1",
                                         "c1"};
      c->cmp = CMP_TOL;
      script_head(c, cmd, 1);
      AK(c, ONE(keys));
      A(c, ONE(maxttls));
      break;
    }
    case REDLOCK__CMD_BATCH_EXTEND: {
      int n = (int)pick(4), k = (int)pick(10);
      script_head(c, cmd, n);
      for (i = 0; i < n; i++)
        AK(c, ONE(lock_keys));
      for (i = 0; i < n; i++)
        AT(c, 3 + i);
      if (k < 6) {
        A(c, ttl());
      } else if (k < 9) {
        for (i = 0; i < n; i++)
          A(c, ttl());
      } else {
        for (i = 0; i < (int)pick(4); i++)
          A(c, ttl());
      }
      break;
    }
    case REDLOCK__CMD_TAKEOVER:
      script_head(c, cmd, 1);
      AK(c, ONE(lock_keys));
      A(c, ONE(tokens));
      A(c, ttl());
      for (i = (int)pick(4); i > 0; i--)
        AT(c, 3);
      break;
    case REDLOCK__CMD_CLOCK_NOTE: {
      static const char *const keys[] = {"h1", "h2", "h2", "k1"};
      static const char *const runs[] = {"r1", "r2"};
      static const char *const notes[] = {"s", "b", "x"};
      static const char *const rids[] = {"i1", "i2", ""};
      script_head(c, cmd, 1);
      AK(c, ONE(keys));
      A(c, ONE(runs));
      A(c, chance(50) ? "5" : "-3");
      A(c, "1");
      A(c, ONE(notes));
      A(c, ONE(rids));
      break;
    }
    case REDLOCK__CMD_MARK_FORGET: {
      static const char *const keys[] = {"h1", "h2", "k1"};
      static const char *const fields[] = {"m1", "m2", "run"};
      static const char *const idents[] = {"r1", "r2", "i1"};
      script_head(c, cmd, 1);
      AK(c, ONE(keys));
      A(c, ONE(fields));
      A(c, ONE(idents));
      break;
    }
    default:
      TEST_FAIL("no case for script %d", (int)cmd);
  }
  perturb(c);
}

/* ---- the command cases --------------------------------------------------- */

static void gen_set(kase *c, int64_t now_ms) {
  int n = (int)pick(4), i;
  start(c, CMP_TOL);
  A(c, chance(50) ? "SET" : "set");
  AK(c, ONE(lock_keys));
  A(c, chance(60) ? ONE(tokens) : ONE(values));
  for (i = 0; i < n; i++) {
    switch (pick(9)) {
      case 0:
        A(c, chance(80) ? "NX" : "nx");
        break;
      case 1:
        A(c, "XX");
        break;
      case 2:
        A(c, "GET");
        break;
      case 3:
        A(c, "KEEPTTL");
        break;
      case 4:
      case 5:
        A(c, chance(80) ? "PX" : "px");
        A(c, ttl());
        break;
      case 6:
        A(c, "EX");
        A(c, chance(70) ? "3600" : ONE(ttls));
        break;
      case 7:
        A(c, "PXAT");
        if (chance(70))
          AF(c, "%" PRId64, chance(70) ? now_ms + 3600000 : now_ms - 3600000);
        else
          A(c, ONE(ttls));
        break;
      default:
        A(c, "EXAT");
        if (chance(70))
          AF(c, "%" PRId64, now_ms / 1000 + (chance(70) ? 3600 : -3600));
        else
          A(c, ONE(ttls));
    }
  }
}

/* The library's SET NX PX of a lock. */
static void gen_lock(kase *c) {
  start(c, CMP_EXACT);
  A(c, "SET");
  AK(c, ONE(lock_keys));
  A(c, ONE(tokens));
  A(c, "NX");
  A(c, "PX");
  A(c, ttl());
}

/* Half the cases call a script, a sixth are the library's SET NX PX. */
static void gen_command(kase *c, int64_t now_ms) {
  int i, n;
  unsigned k = pick(100);
  if (k < 50) {
    gen_script(c, now_ms);
    return;
  }
  if (k < 66) {
    gen_lock(c);
    return;
  }
  switch (pick(33)) {
    case 0:
    case 1:
    case 2:
      gen_set(c, now_ms);
      return;
    case 3:
    case 4:
    case 5:
      start(c, CMP_TOL);
      A(c, "GET");
      AK(c, ONE(any_keys));
      return;
    case 7:
      start(c, CMP_TOL);
      A(c, "MGET");
      for (n = 1 + (int)pick(3), i = 0; i < n; i++)
        AK(c, ONE(any_keys));
      return;
    case 8:
      start(c, CMP_EXACT);
      A(c, "DEL");
      for (n = 1 + (int)pick(3), i = 0; i < n; i++)
        AK(c, ONE(any_keys));
      return;
    case 9:
      start(c, CMP_EXACT);
      A(c, "EXISTS");
      for (n = 1 + (int)pick(3), i = 0; i < n; i++)
        AK(c, ONE(any_keys));
      return;
    case 10:
    case 11: {
      static const char *const opts[] = {"NX", "XX", "GT", "LT", "nx", "foo"};
      start(c, CMP_EXACT);
      A(c, chance(80) ? "PEXPIRE"
           : chance(50) ? "EXPIRE"
           : chance(50) ? "PEXPIREAT"
                        : "EXPIREAT");
      AK(c, ONE(any_keys));
      A(c, chance(70) ? ONE(ttls) : chance(50) ? "-1" : "0");
      for (n = chance(80) ? 0 : 1 + (int)pick(2), i = 0; i < n; i++)
        A(c, ONE(opts));
      return;
    }
    case 12:
    case 13:
      start(c, CMP_TOL);
      A(c, "PTTL");
      AK(c, ONE(any_keys));
      return;
    case 14:
      start(c, chance(50) ? CMP_TTL_S : CMP_EXACT);
      A(c, c->cmp == CMP_TTL_S ? "TTL" : "PERSIST");
      AK(c, ONE(any_keys));
      return;
    case 15:
      start(c, CMP_TOL);
      A(c, "INCR");
      AK(c, ONE(any_keys));
      return;
    case 16:
      start(c, CMP_EXACT);
      A(c, "TYPE");
      AK(c, ONE(any_keys));
      return;
    case 17:
    case 18:
    case 19: {
      static const char *const hkeys[] = {"k3:rw", "k2:rw", "h1", "h2",
                                          "k1"};
      start(c, CMP_EXACT);
      A(c, "HSET");
      AK(c, ONE(hkeys));
      for (n = 1 + (chance(20) ? (int)pick(2) : 0), i = 0; i < n; i++) {
        A(c, chance(70) ? ONE(rw_fields) : "run");
        rw_value(c, now_ms);
      }
      return;
    }
    case 20:
    case 21: {
      static const char *const hkeys[] = {"k3:rw", "k2:rw", "h1", "h2",
                                          "k1"};
      static const char *const cmds[] = {"HGET", "HMGET", "HDEL", "HEXISTS",
                                         "HGETALL", "HKEYS", "HLEN"};
      const char *cmd = ONE(cmds);
      start(c, CMP_TOL);
      A(c, cmd);
      AK(c, ONE(hkeys));
      if (strcmp(cmd, "HGET") == 0 || strcmp(cmd, "HEXISTS") == 0) {
        A(c, ONE(rw_fields));
      } else if (cmd[1] == 'M' || cmd[1] == 'D') {
        for (n = 1 + (int)pick(3), i = 0; i < n; i++)
          A(c, ONE(rw_fields));
      }
      return;
    }
    case 22: {
      static const char *const words[] = {"PING", "PING hello", "ECHO x y",
                                          "PING a b", "ping"};
      both(CMP_EXACT, ONE(words));
      start(c, CMP_EXACT);
      A(c, "ECHO");
      A(c, ONE(values));
      return;
    }
    case 23:
      start(c, CMP_TIME);
      A(c, "TIME");
      if (chance(10))
        A(c, "x");
      return;
    case 24:
      start(c, CMP_EXACT);
      A(c, "PUBLISH");
      AF(c, "__redlock__:%s", ONE(lock_keys));
      A(c, "1");
      if (chance(10))
        c->argc--;
      return;
    case 25: {
      static const char *const sel[] = {"0", "0", "1", "16", "-1", "x",
                                        "99999999999", "2147483647"};
      start(c, CMP_EXACT);
      A(c, "SELECT");
      A(c, ONE(sel));
      return;
    }
    case 26: {
      static const char *const names[] = {
          "appendonly", "appendfsync",          "save",
          "requirepass", "min-replicas-to-write", "min-replicas-max-lag",
          "maxmemory-policy", "nosuch", "APPENDFSYNC", "appendfsyn?",
          "maxmemory-pol*", "requirepas*"};
      start(c, CMP_EXACT);
      A(c, "CONFIG");
      A(c, chance(90) ? "GET" : "get");
      A(c, ONE(names));
      return;
    }
    case 27: {
      static const char *const sets[] = {
          "appendfsync always",        "appendfsync everysec",
          "appendfsync no",            "appendfsync sometimes",
          "appendonly maybe",          "appendonly no",
          "min-replicas-to-write 0",   "min-replicas-to-write 0",
          "min-replicas-to-write 0",   "min-replicas-to-write 0",
          "min-replicas-to-write 0",   "min-replicas-to-write 0",
          "min-replicas-to-write 0",   "min-replicas-to-write 1",
          "min-replicas-to-write abc", "min-replicas-max-lag 10",
          "min-replicas-max-lag 0",    "min-replicas-max-lag -1",
          "min-replicas-max-lag 05",   "save 3600_1",
          "save 3600_1_300_100",       "save 0_1",
          "save x",                    "maxmemory-policy noeviction",
          "maxmemory-policy allkeys-lru", "maxmemory-policy nope",
          "nosuch 1",                  "requirepass p1",
          "requirepass p1",            "appendfsync no appendfsync always",
          "appendfsync everysec appendonly no"};
      char line[128], *w, *save;
      start(c, CMP_EXACT);
      A(c, "CONFIG");
      A(c, "SET");
      snprintf(line, sizeof(line), "%s", ONE(sets));
      for (w = strtok_r(line, " ", &save); w != NULL;
           w = strtok_r(NULL, " ", &save)) {
        char *u;
        for (u = w; *u != '\0'; u++)
          if (*u == '_')
            *u = ' ';
        AF(c, "%s", w);
      }
      if (chance(5))
        c->argc--;
      return;
    }
    case 28: {
      static const char *const auths[] = {"AUTH p1", "AUTH default p1",
                                          "AUTH wrong", "AUTH default wrong",
                                          "AUTH nouser p1", "AUTH a b c",
                                          "AUTH"};
      both(CMP_EXACT, ONE(auths));
      start(c, CMP_EXACT);
      A(c, "CONFIG");
      A(c, "SET");
      A(c, "requirepass");
      A(c, "");
      return;
    }
    case 29: {
      static const char *const odd[] = {
          "FOO", "foo a b", "GET", "GET a b", "SET a", "HSET h f",
          "HSET h f v g",
          "HGET h", "MGET", "DEL", "EXPIRE a", "INCR", "PTTL", "TYPE",
          "CONFIG", "CONFIG FOO", "CONFIG GET", "CONFIG SET appendonly",
          "SCRIPT", "SCRIPT FOO", "SCRIPT LOAD", "SCRIPT EXISTS",
          "SCRIPT FLUSH x", "EVAL", "EVALSHA abc", "EVAL x -1",
          "EVALSHA abc x", "EVALSHA 0000000000000000000000000000000000000000 0",
          "EVAL return 2 a", "EVAL return x", "SELECT", "TIME x", "PUBLISH a",
          "INFO nosuch", "ASKING", "ECHO", "PING a b c", "FLUSHALL x",
          "HDEL h", "HMGET h", "HEXISTS h", "HGETALL", "HKEYS", "HLEN",
          "PERSIST", "TTL", "EXISTS", "AUTH a b c d", "FlushDB sync x",
          "fOo bar", "SET a b px", "SET a b ex 10 px 10", "SET a b nx xx",
          "SET a b keepttl px 10", "SET a b px 10 keepttl", "SET a b get get",
          "PEXPIRE a 10 nx xx", "PEXPIRE a 10 gt lt", "PEXPIRE a x nx"};
      both(CMP_EXACT, ONE(odd));
      start(c, CMP_EXACT);
      if (chance(50)) {   /* a long argument, a script not the library's */
        A(c, chance(50) ? "FOO" : "CONFIG");
        AF(c, "%0150d", 7);
        A(c, "b");
      } else {
        A(c, "SCRIPT");
        A(c, "LOAD");
        A(c, chance(50) ? "return 1" : "return redis.call('get', KEYS[1])");
      }
      return;
    }
    case 30: {
      static const char *const sections[] = {"server", "persistence",
                                             "replication", "cluster",
                                             "SERVER"};
      start(c, CMP_INFO);
      A(c, "INFO");
      A(c, ONE(sections));
      return;
    }
    case 31:
      start(c, CMP_EXACT);
      A(c, chance(50) ? "FLUSHALL" : "FLUSHDB");
      if (chance(30))
        A(c, chance(50) ? "ASYNC" : "sync");
      if (chance(90)) {   /* mostly a harmless DEL instead */
        start(c, CMP_EXACT);
        A(c, "DEL");
        AK(c, ONE(any_keys));
      }
      return;
    default:
      gen_lock(c);
  }
}

/* ---- the script cache --------------------------------------------------- */

static void load_scripts(void) {
  int i;
  kase c;
  for (i = 0; i < REDLOCK__N_CMDS; i++) {
    const redlock__script *s = redlock__script_of((redlock__cmd)i);
    if (s == NULL)
      continue;
    start(&c, CMP_EXACT);
    A(&c, "SCRIPT");
    A(&c, "LOAD");
    add(&c, s->text, s->len);
    run(&c);
  }
  scripts_loaded = 1;
}

/* The cache goes on both sides: on the model by SCRIPT FLUSH, by a
 * restart, or in a copy (simkv_clone keeps the keys and the config). */
static void flush_scripts(void) {
  unsigned how = pick(3);
  kase c;
  if (how == 0) {
    start(&c, CMP_EXACT);
    A(&c, "SCRIPT");
    A(&c, "FLUSH");
    if (chance(50))
      A(&c, chance(50) ? "ASYNC" : "SYNC");
    run(&c);
  } else {
    redisReply *r = srv_cmdf(rc, "SCRIPT FLUSH");
    ASSERT(r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    if (how == 1) {
      simkv_restart(kv, srv_now_us());
    } else {
      simkv *copy = simkv_clone(kv);
      ASSERT_NOT_NULL(copy);
      simkv_free(kv);
      kv = copy;
    }
  }
  scripts_loaded = 0;
}

static void script_cache_case(void) {
  kase c;
  int i;
  switch (pick(5)) {
    case 0:
      flush_scripts();
      return;
    case 1:
      load_scripts();
      return;
    case 2:
    case 3: {   /* one script, loaded on its own */
      const redlock__script *s = NULL;
      while (s == NULL)
        s = redlock__script_of((redlock__cmd)pick(REDLOCK__N_CMDS));
      start(&c, CMP_EXACT);
      A(&c, "SCRIPT");
      A(&c, "LOAD");
      add(&c, s->text, s->len);
      run(&c);
      return;
    }
    default:
      start(&c, CMP_EXACT);
      A(&c, "SCRIPT");
      A(&c, "EXISTS");
      for (i = 0; i < 3; i++) {
        const redlock__script *s = NULL;
        while (s == NULL)
          s = redlock__script_of((redlock__cmd)pick(REDLOCK__N_CMDS));
        add(&c, s->sha, 40);
      }
      A(&c, "abc");
      run(&c);
  }
}

/* Argument i of c is s. */
static int arg_is(const kase *c, int i, const char *s) {
  return i < c->argc && c->lens[i] == strlen(s) &&
         memcmp(c->argv[i], s, c->lens[i]) == 0;
}

static void random_cases(long n) {
  long i, writes_back = -1;
  for (i = 0; i < n; i++) {
    kase c;
    int64_t now_ms = ctx.now_us / 1000;
    if (pick(1000) < 15) {
      script_cache_case();
      continue;
    }
    if (cluster_phase)
      tag = chance(70) ? tag_a : tag_b;
    if (chance(3)) {   /* the locks go, so that they are taken again */
      static const char *const names[] = {"k1", "k2", "k3", "k1:rw",
                                          "k2:rw", "k3:rw"};
      int k;
      start(&c, CMP_EXACT);
      A(&c, "DEL");
      for (k = 0; k < 6; k++)
        AK(&c, names[k]);
      run(&c);
      continue;
    }
    if (i == writes_back)
      both(CMP_EXACT, "CONFIG SET min-replicas-to-write 0");
    gen_command(&c, now_ms != 0 ? now_ms : srv_now_us() / 1000);
    run(&c);
    /* Writes refused for a while only. */
    if (arg_is(&c, 2, "min-replicas-to-write") && arg_is(&c, 3, "1"))
      writes_back = i + 10;
  }
}

/* ---- phase 1: the model alone, at exact times ------------------------ */

static simkv_out mo;

/* Runs a command on the model at `now_us` and checks its reply. */
static void model_is(simkv *k, simkv_conn *mc, int64_t now_us,
                     const char *line, const char *want) {
  kase c;
  char *w, *save;
  start(&c, CMP_EXACT);
  snprintf(c.buf, sizeof(c.buf), "%s", line);
  c.used = strlen(line) + 1;
  for (w = strtok_r(c.buf, " ", &save); w != NULL;
       w = strtok_r(NULL, " ", &save))
    A(&c, w);
  ctx.now_us = now_us;
  mo.len = 0;
  ASSERT(simkv_exec(k, mc, &ctx, c.argc, c.argv, c.lens, &mo) >= 0);
  if (mo.len != strlen(want) || memcmp(mo.p, want, mo.len) != 0) {
    fprintf(stderr, "model at %" PRId64 " us: %s\n  got:  ", now_us, line);
    show(stderr, mo.p, mo.len);
    fprintf(stderr, "\n  want: ");
    show(stderr, want, strlen(want));
    fprintf(stderr, "\n");
    TEST_FAIL("the model's reply");
  }
}

static int model_route_calls, model_route_keys, model_route_missing;

static int model_route(void *arg, unsigned slot, int asking, int keys,
                       int missing, char *err, size_t n) {
  (void)arg;
  model_route_calls++;
  model_route_keys += keys;
  model_route_missing += missing;
  if (slot == redlock__key_slot("mine", 4))
    return 0;
  if (asking) {
    snprintf(err, n, "TRYAGAIN asked for %u", slot);
    return 1;
  }
  snprintf(err, n, "MOVED %u 10.0.0.9:7001", slot);
  return 1;
}

static void model_alone(void) {
  simkv *k = simkv_new();
  simkv *copy, *other;
  unsigned slot;
  simkv_conn mc = {0, 1, 0};
  const int64_t t0 = 1700000000000000;   /* us */
  const char *v;
  size_t len;
  char want[128], line[200];
  ASSERT_NOT_NULL(k);
  memset(&ctx, 0, sizeof(ctx));
  ctx.info = &info;
  /* Expiry: a key with expiry E is live through E's own millisecond. */
  model_is(k, &mc, t0, "SET a 1 PX 100", "+OK\r\n");
  model_is(k, &mc, t0 + 40000, "PTTL a", ":60\r\n");
  model_is(k, &mc, t0 + 99999, "PTTL a", ":1\r\n");
  model_is(k, &mc, t0 + 100999, "PTTL a", ":0\r\n");
  model_is(k, &mc, t0 + 100999, "GET a", "$1\r\n1\r\n");
  model_is(k, &mc, t0 + 101000, "GET a", "$-1\r\n");
  model_is(k, &mc, t0 + 101000, "PTTL a", ":-2\r\n");
  model_is(k, &mc, t0, "SET a 1 PX 100", "+OK\r\n");
  model_is(k, &mc, t0 + 1000, "PEXPIRE a 0", ":1\r\n");
  model_is(k, &mc, t0 + 1000, "EXISTS a", ":0\r\n");
  model_is(k, &mc, t0, "SET a 1 EX 2", "+OK\r\n");
  model_is(k, &mc, t0 + 1499000, "TTL a", ":1\r\n");
  model_is(k, &mc, t0 + 1500000, "TTL a", ":1\r\n");
  model_is(k, &mc, t0 + 1501000, "TTL a", ":0\r\n");
  /* A hash's fields in order; an update in place keeps its place. */
  model_is(k, &mc, t0, "HSET h a 1 b 2 c 3", ":3\r\n");
  model_is(k, &mc, t0, "HDEL h b", ":1\r\n");
  model_is(k, &mc, t0, "HSET h d 4 a 5", ":1\r\n");
  model_is(k, &mc, t0, "HKEYS h",
           "*3\r\n$1\r\na\r\n$1\r\nc\r\n$1\r\nd\r\n");
  /* The release script at an exact time: the token's key is ours until
   * its last millisecond. */
  {
    const redlock__script *s = redlock__script_of(REDLOCK__CMD_RELEASE);
    model_is(k, &mc, t0, "SET lk tok PX 10", "+OK\r\n");
    snprintf(line, sizeof(line), "EVALSHA %s 1 lk tok 1", s->sha);
    model_is(k, &mc, t0, line,
             "-NOSCRIPT No matching script. Please use EVAL.\r\n");
    ctx.now_us = t0;
    {
      const char *argv[3] = {"SCRIPT", "LOAD", s->text};
      size_t lens[3] = {6, 4, s->len};
      mo.len = 0;
      ASSERT_EQ(simkv_exec(k, &mc, &ctx, 3, argv, lens, &mo), 0);
    }
    snprintf(line, sizeof(line), "EVALSHA %s 1 lk tok 1", s->sha);
    model_is(k, &mc, t0 + 11000, line, ":0\r\n");
    model_is(k, &mc, t0, "SET lk tok PX 10", "+OK\r\n");
    model_is(k, &mc, t0 + 10999, line, ":1\r\n");
  }
  /* What a command returns: 1 when it wrote, 0 when not. */
  {
    const char *argv[6] = {"SET", "w", "v", "NX", "PX", "1000"};
    size_t lens[6] = {3, 1, 1, 2, 2, 4};
    ctx.now_us = t0;
    mo.len = 0;
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 6, argv, lens, &mo), 1);
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 6, argv, lens, &mo), 0);   /* held */
    argv[0] = "GET";
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 2, argv, lens, &mo), 0);
    argv[0] = "DEL";
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 2, argv, lens, &mo), 1);
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 2, argv, lens, &mo), 0);
  }
  /* A read-write acquire at an exact time: the owner's field is Lua's
   * number printed as redis.call prints it ("%.17g"), the hash and the
   * plain key get the owner's ttl, and "z:" the expiry the hash's ttl
   * stands for (its clock, scripts.c). */
  {
    const redlock__script *s = redlock__script_of(REDLOCK__CMD_RW_ACQUIRE);
    const char *argv[12] = {"EVAL", s->text, "2", "n:rw", "n", "tk",
                            "10000.25", "w", "id", "0", "0", "0"};
    size_t lens[12] = {4, s->len, 1, 4, 1, 2, 8, 1, 2, 1, 1, 1};
    ctx.now_us = t0 + 123456;   /* 1700000000123 ms */
    mo.len = 0;
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 12, argv, lens, &mo), 1);
    ASSERT(mo.len > 0 && memcmp(mo.p, "-ERR value is not an integer", 28) == 0);
    model_is(k, &mc, t0 + 123456, "HGETALL n:rw",
             "*2\r\n$4\r\nw:tk\r\n$16\r\n1700000010123.25\r\n");
    model_is(k, &mc, t0 + 123456, "PTTL n:rw", ":-1\r\n");
    model_is(k, &mc, t0 + 123456, "DEL n:rw", ":1\r\n");
    argv[6] = "1e4";
    lens[6] = 3;
    mo.len = 0;
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 12, argv, lens, &mo), 1);
    ASSERT(mo.len == 4 && memcmp(mo.p, ":1\r\n", 4) == 0);
    model_is(k, &mc, t0 + 123456, "HGETALL n:rw",
             "*4\r\n$4\r\nw:tk\r\n$13\r\n1700000010123\r\n"
             "$2\r\nz:\r\n$13\r\n1700000010123\r\n");
    model_is(k, &mc, t0 + 123456, "PTTL n:rw", ":10000\r\n");
    model_is(k, &mc, t0 + 123456, "GET n",
             "$14\r\n__redlock__:rw\r\n");
    model_is(k, &mc, t0 + 123456, "PTTL n", ":10000\r\n");
    model_is(k, &mc, t0, "DEL n n:rw", ":2\r\n");
  }
  /* simkv_get, simkv_keys, the config API. */
  model_is(k, &mc, t0, "SET g val", "+OK\r\n");
  v = simkv_get(k, "g", 1, t0, &len);
  ASSERT(v != NULL && len == 3 && memcmp(v, "val", 3) == 0);
  ASSERT_NULL(simkv_get(k, "h", 1, t0, &len));   /* a hash */
  ASSERT_EQ(simkv_config_set(k, "appendfsync", "always"), 0);
  ASSERT_EQ(simkv_config_set(k, "appendfsync", "sometimes"), -1);
  ASSERT_EQ(simkv_config_set(k, "nosuch", "1"), -1);
  ASSERT_STR_EQ(simkv_config(k, "appendfsync"), "always");
  ASSERT_STR_EQ(simkv_config(k, "save"), "3600 1 300 100 60 10000");
  ASSERT_NULL(simkv_config(k, "nosuch"));
  /* A restart keeps the live keys and the config, drops the expired keys
   * and the script cache; a clone is a copy without the script cache. */
  model_is(k, &mc, t0, "SET short 1 PX 5", "+OK\r\n");
  ASSERT_EQ(simkv_keys(k), 4);   /* lk, h, g, short */
  copy = simkv_clone(k);
  ASSERT_NOT_NULL(copy);
  model_is(copy, &mc, t0, "GET short", "$1\r\n1\r\n");
  model_is(copy, &mc, t0, "DEL g", ":1\r\n");
  model_is(k, &mc, t0, "GET g", "$3\r\nval\r\n");   /* independent */
  model_is(copy, &mc, t0, line,
           "-NOSCRIPT No matching script. Please use EVAL.\r\n");
  ASSERT_STR_EQ(simkv_config(copy, "appendfsync"), "always");
  simkv_free(copy);
  /* A replica's copy: the source's keys replace its own, expiries as
   * they are; its config stays. */
  copy = simkv_new();
  ASSERT_NOT_NULL(copy);
  model_is(copy, &mc, t0, "SET gone 1", "+OK\r\n");
  ASSERT_EQ(simkv_copy_keys(copy, k), 0);
  ASSERT_EQ(simkv_keys(copy), 4);
  model_is(copy, &mc, t0, "GET gone", "$-1\r\n");
  model_is(copy, &mc, t0, "PTTL short", ":5\r\n");
  ASSERT_STR_EQ(simkv_config(copy, "appendfsync"), "everysec");
  /* MIGRATE: one key of the slots at a time, with the ttl it has left,
   * on the target's clock. */
  other = simkv_new();
  ASSERT_NOT_NULL(other);
  slot = redlock__key_slot("short", 5);
  ASSERT_EQ(simkv_migrate_one(other, copy, slot, slot, t0 + 2000,
                              t0 + 100000), 1);
  model_is(other, &mc, t0 + 100000, "PTTL short", ":3\r\n");
  model_is(copy, &mc, t0 + 2000, "GET short", "$-1\r\n");
  ASSERT_EQ(simkv_migrate_one(other, copy, slot, slot, t0, t0), 0);
  ASSERT_EQ(simkv_keys(copy), 3);
  simkv_free(other);
  simkv_free(copy);
  simkv_restart(k, t0 + 6000);
  ASSERT_EQ(simkv_keys(k), 3);
  model_is(k, &mc, t0 + 6000, "GET g", "$3\r\nval\r\n");
  model_is(k, &mc, t0 + 6000, line,
           "-NOSCRIPT No matching script. Please use EVAL.\r\n");
  ASSERT_STR_EQ(simkv_config(k, "appendfsync"), "always");
  simkv_flush(k);
  ASSERT_EQ(simkv_keys(k), 0);
  /* The rest of the table: what the world answers, DBSIZE, INFO's
   * default sections and keyspace, a script that is not the library's. */
  model_is(k, &mc, t0, "SET a 1", "+OK\r\n");
  model_is(k, &mc, t0, "SET b 1 PX 5", "+OK\r\n");
  model_is(k, &mc, t0, "DBSIZE", ":2\r\n");
  model_is(k, &mc, t0 + 6000, "DBSIZE", ":1\r\n");
  model_is(k, &mc, t0 + 6000, "INFO keyspace",
           "$44\r\n# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n\r\n");
  model_is(k, &mc, t0, "SUBSCRIBE ch",
           "-ERR simulated server: 'SUBSCRIBE' is the world's, not kv's\r\n");
  ctx.now_us = t0 + 6000;
  mo.len = 0;
  {
    const char *argv[1] = {"INFO"};
    size_t lens[1] = {4};
    ASSERT_EQ(simkv_exec(k, &mc, &ctx, 1, argv, lens, &mo), 0);
    ASSERT(strstr(mo.p, "# Server\r\n") != NULL &&
           strstr(mo.p, "\r\n\r\n# Persistence\r\n") != NULL &&
           strstr(mo.p, "\r\n\r\n# Replication\r\nrole:master\r\n") != NULL &&
           strstr(mo.p, "# Keyspace\r\ndb0:keys=1") != NULL);
    simkv_out_reset(&mo);
    ASSERT_EQ(mo.len, 0);
  }
  model_is(k, &mc, t0, "EVAL return 0", "$-1\r\n");   /* Lua: "return" */
  model_is(k, &mc, t0, "SCRIPT LOAD return",
           "$40\r\n63143b6f8007b98c53ca2149822777b3566f9241\r\n");
  model_is(k, &mc, t0, "EVALSHA 63143B6F8007B98C53CA2149822777B3566F9241 0",
           "$-1\r\n");
  model_is(k, &mc, t0,
           "SCRIPT EXISTS 63143b6f8007b98c53ca2149822777b3566f9241 x",
           "*2\r\n:1\r\n:0\r\n");
  model_is(k, &mc, t0, "DEL a", ":1\r\n");
  mc.db = 99;   /* out of range: db 0 */
  model_is(k, &mc, t0, "PING", "+PONG\r\n");
  ASSERT_EQ(mc.db, 0);
  /* Requirepass: a connection made before it stays authenticated. */
  {
    simkv_conn fresh = {0, 0, 0};
    model_is(k, &mc, t0, "CONFIG SET requirepass pw", "+OK\r\n");
    ASSERT_STR_EQ(simkv_config(k, "requirepass"), "pw");
    model_is(k, &fresh, t0, "GET a", "-NOAUTH Authentication required.\r\n");
    model_is(k, &fresh, t0, "AUTH pw", "+OK\r\n");
    model_is(k, &fresh, t0, "GET a", "$-1\r\n");
    model_is(k, &mc, t0, "CONFIG SET requirepass", 
             "-ERR wrong number of arguments for 'config|set' command\r\n");
    model_is(k, &mc, t0, "PING", "+PONG\r\n");
    ASSERT_EQ(simkv_config_set(k, "requirepass", ""), 0);
  }
  /* A replica refuses writes (the world applies its master's stream with
   * another role), in scripts at the first write. */
  info.role = "slave";
  info.master_host = "10.0.0.1";
  info.master_port = 7000;
  model_is(k, &mc, t0, "SET a 1",
           "-READONLY You can't write against a read only replica.\r\n");
  model_is(k, &mc, t0, "GET a", "$-1\r\n");
  info.role = "master";
  /* Routing (a cluster node): one slot per command, the world's answer
   * for a slot it does not serve, ASKING for one command. */
  ctx.route = model_route;
  model_route_calls = model_route_keys = model_route_missing = 0;
  model_is(k, &mc, t0, "SET mine 1", "+OK\r\n");
  snprintf(want, sizeof(want), "-MOVED %u 10.0.0.9:7001\r\n",
           redlock__key_slot("other", 5));
  model_is(k, &mc, t0, "GET other", want);
  model_is(k, &mc, t0, "MGET mine other",
           "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
  model_is(k, &mc, t0, "ASKING", "+OK\r\n");
  ASSERT_EQ(mc.asking, 1);
  snprintf(want, sizeof(want), "-TRYAGAIN asked for %u\r\n",
           redlock__key_slot("other", 5));
  model_is(k, &mc, t0, "GET other", want);
  ASSERT_EQ(mc.asking, 0);   /* consumed by one command */
  model_is(k, &mc, t0, "ASKING", "+OK\r\n");
  model_is(k, &mc, t0, "PING", "+PONG\r\n");
  ASSERT_EQ(mc.asking, 0);
  model_is(k, &mc, t0, "SELECT 1",
           "-ERR SELECT is not allowed in cluster mode\r\n");
  model_is(k, &mc, t0, "SELECT 0", "+OK\r\n");
  model_is(k, &mc, t0, "EVAL x 2 mine other",
           "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
  ASSERT_EQ(model_route_calls, 3);
  /* Each command named one key, not in db 0 when it was routed. */
  ASSERT_EQ(model_route_keys, 3);
  ASSERT_EQ(model_route_missing, 3);
  ctx.route = NULL;
  model_is(k, &mc, t0, "ASKING",
           "-ERR This instance has cluster support disabled\r\n");
  simkv_free(k);
  simkv_out_free(&mo);
}

/* ---- phase 3: expiry over time ------------------------------------------ */

/* Waits until the server's clock passes `until_us`. */
static void wait_srv(int64_t until_us) {
  uint64_t end = harness_now_ms() + 5000;
  while (srv_now_us() < until_us) {
    if (harness_now_ms() > end)
      TEST_FAIL("the server's clock does not move");
    uv_sleep(5);
  }
}

static void expiry_rounds(int rounds) {
  int r, i;
  for (r = 0; r < rounds; r++) {
    kase c;
    int64_t t = srv_now_us();
    int64_t ms = t / 1000;
    /* Short keys and fields (60-90 ms), then a wait of 200 ms. */
    both(CMP_EXACT, "SET k1 t1 PX 60");
    both(CMP_EXACT, "SET k3 t2 PX 90");
    start(&c, CMP_EXACT);
    A(&c, "HSET");
    A(&c, "k1:rw");
    A(&c, "w:t1");
    AF(&c, "%" PRId64, ms + 60);
    A(&c, "q:a");
    AF(&c, "%" PRId64, ms + 60000);
    A(&c, "r:t2");
    AF(&c, "%" PRId64, ms + 70);
    A(&c, "q:b");
    AF(&c, "%" PRId64, ms + 80);
    run(&c);
    both(CMP_EXACT, "PEXPIRE k1:rw 90");
    wait_srv(t + 200000);
    for (i = 0; i < 12; i++) {
      int64_t now_ms = srv_now_us() / 1000;
      if (i == 0) {   /* the hash is gone: the server expired it too */
        both(CMP_EXACT, "EXISTS k1 k3 k1:rw");
        continue;
      }
      gen_command(&c, now_ms);
      run(&c);
    }
    /* Again, the hash without its own ttl: the prelude purges the
     * writer's expired field and entitles the queued reader. */
    t = srv_now_us();
    ms = t / 1000;
    both(CMP_EXACT, "DEL k1:rw k1");
    start(&c, CMP_EXACT);
    A(&c, "HSET");
    A(&c, "k1:rw");
    A(&c, "w:t1");
    AF(&c, "%" PRId64, ms + 50);
    A(&c, "q:a");
    AF(&c, "%" PRId64, ms + 60000);
    A(&c, "q:b");
    AF(&c, "%" PRId64, ms + 70);
    run(&c);
    wait_srv(t + 150000);
    start(&c, CMP_EXACT);
    script_head(&c, r % 2 ? REDLOCK__CMD_RW_ACQUIRE
                          : REDLOCK__CMD_RW_RELEASE, 2);
    A(&c, "k1:rw");
    A(&c, "k1");
    A(&c, "t2");
    A(&c, "60000");
    A(&c, r % 3 ? "r" : "w");
    A(&c, r % 4 ? "a" : "c");
    A(&c, "0");
    A(&c, "60000");
    A(&c, r % 2 ? "0" : "p");
    run(&c);
    start(&c, CMP_TOL);
    A(&c, "HGETALL");
    A(&c, "k1:rw");
    run(&c);
  }
}

/* ---- phase 4: AUTH on new connections ------------------------------------ */

static void auth_phase(void) {
  redisContext *c2, *c3;
  simkv_conn m2 = {0, 0, 0}, m3 = {0, 0, 0};
  static const char *const seq2[] = {
      "PING", "GET k1", "FOO", "GET", "AUTH wrong", "AUTH default wrong",
      "AUTH a b c", "AUTH", "SELECT 1", "SCRIPT FLUSH", "AUTH p2", "PING",
      "AUTH wrong", "GET k1"};
  static const char *const seq3[] = {"AUTH default p2", "PING",
                                     "AUTH nouser p2"};
  size_t i;
  both(CMP_EXACT, "CONFIG SET requirepass p2");
  c2 = connect_srv(&srv[0]);
  m2.authed = simkv_config(kv, "requirepass")[0] == '\0';
  for (i = 0; i < sizeof(seq2) / sizeof(seq2[0]); i++) {
    kase c;
    char *w, *save;
    start(&c, CMP_EXACT);
    snprintf(c.buf, sizeof(c.buf), "%s", seq2[i]);
    c.used = strlen(seq2[i]) + 1;
    for (w = strtok_r(c.buf, " ", &save); w != NULL;
         w = strtok_r(NULL, " ", &save))
      A(&c, w);
    run_on(c2, &m2, &c);
  }
  c3 = connect_srv(&srv[0]);
  m3.authed = simkv_config(kv, "requirepass")[0] == '\0';
  for (i = 0; i < sizeof(seq3) / sizeof(seq3[0]); i++) {
    kase c;
    char *w, *save;
    start(&c, CMP_EXACT);
    snprintf(c.buf, sizeof(c.buf), "%s", seq3[i]);
    c.used = strlen(seq3[i]) + 1;
    for (w = strtok_r(c.buf, " ", &save); w != NULL;
         w = strtok_r(NULL, " ", &save))
      A(&c, w);
    run_on(c3, &m3, &c);
  }
  /* Back to no password: every connection may, AUTH <pass> is refused. */
  both(CMP_EXACT, "AUTH wrong");
  both(CMP_EXACT, "CONFIG SET requirepass");
  {
    kase c;
    start(&c, CMP_EXACT);
    A(&c, "CONFIG");
    A(&c, "SET");
    A(&c, "requirepass");
    A(&c, "");
    run(&c);
  }
  redisFree(c2);
  c2 = connect_srv(&srv[0]);
  m2.authed = 1;
  m2.db = 0;
  {
    static const char *const seq[] = {"PING", "AUTH p2", "AUTH default x",
                                      "AUTH other x"};
    for (i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
      kase c;
      char *w, *save;
      start(&c, CMP_EXACT);
      snprintf(c.buf, sizeof(c.buf), "%s", seq[i]);
      c.used = strlen(seq[i]) + 1;
      for (w = strtok_r(c.buf, " ", &save); w != NULL;
           w = strtok_r(NULL, " ", &save))
        A(&c, w);
      run_on(c2, &m2, &c);
    }
  }
  redisFree(c2);
  redisFree(c3);
}

/* ---- the phases' set-up ------------------------------------------------- */

/* Both sides empty, the same config, the scripts loaded. */
static void reset_both(void) {
  redisReply *r = srv_cmdf(rc, "CONFIG SET min-replicas-to-write 0");
  freeReplyObject(r);
  r = srv_cmdf(rc, "FLUSHALL");
  freeReplyObject(r);
  r = srv_cmdf(rc, "SCRIPT FLUSH");
  freeReplyObject(r);
  r = srv_cmdf(rc, "CONFIG SET requirepass %s", "");
  freeReplyObject(r);
  r = srv_cmdf(rc, "SELECT 0");
  freeReplyObject(r);
  if (kv != NULL)
    simkv_free(kv);
  kv = simkv_new();
  ASSERT_NOT_NULL(kv);
  /* The harness starts redis-server with --save '' --appendonly no. */
  ASSERT_EQ(simkv_config_set(kv, "save", ""), 0);
  memset(&conn, 0, sizeof(conn));
  conn.authed = 1;
  load_scripts();
}

static void connect_both(harness_server *s) {
  redisReply *r;
  if (rc != NULL)
    redisFree(rc);
  if (subc != NULL)
    redisFree(subc);
  rc = connect_srv(s);
  subc = connect_srv(s);
  r = srv_cmdf(subc, "PSUBSCRIBE *");
  freeReplyObject(r);
}

static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? strtol(v, NULL, 10) : def;
}

static void find_tags(void) {
  char t[2] = {'a', '\0'};
  tag_a[0] = tag_b[0] = '\0';
  for (; t[0] <= 'z'; t[0]++) {
    unsigned slot = redlock__key_slot(t, 1);
    if (slot < 8192 && tag_a[0] == '\0')
      snprintf(tag_a, sizeof(tag_a), "{%s}", t);
    if (slot >= 8192 && tag_b[0] == '\0')
      snprintf(tag_b, sizeof(tag_b), "{%s}", t);
  }
  ASSERT(tag_a[0] != '\0' && tag_b[0] != '\0');
}

int main(void) {
  long cases = env_long("REDLOCK_SIM_DIFF_CASES", 6000);
  uint64_t t0 = harness_now_ms();
  redisReply *r;
  char port[16];
  seed = (uint64_t)env_long("REDLOCK_SIM_DIFF_SEED", 20240531);
  verbose = env_long("REDLOCK_SIM_DIFF_VERBOSE", 0) != 0;
  rng = seed * 0x9E3779B97F4A7C15ULL + 1;
  fprintf(stderr, "test-sim-diff: seed %llu, %ld cases "
                  "(REDLOCK_SIM_DIFF_SEED, REDLOCK_SIM_DIFF_CASES)\n",
          (unsigned long long)seed, cases);
  redlock__scripts_init();
  memset(&info, 0, sizeof(info));
  info.run_id = "0123456789012345678901234567890123456789";
  info.role = "master";
  info.master_replid = "0123456789012345678901234567890123456789";
  info.second_repl_offset = -1;
  info.aof_enabled = -1;
  info.tcp_port = 6379;

  /* 0. Every twin is the one for the library's script as it is now (a
   * changed script runs in Lua in the simulator, and this fails until
   * its twin and kv.c's twin_sha follow the change). */
  {
    char stale[128];
    if (simkv_stale_twins(stale, sizeof(stale)) != 0) {
      fprintf(stderr, "test-sim-diff: the twins of scripts %s (redlock__cmd)"
                      " were written for other texts: bring kv.c's twin and "
                      "twin_sha to the library's script\n", stale);
      return 1;
    }
  }

  /* 1. */
  model_alone();
  fprintf(stderr, "phase 1 (the model alone): ok\n");

  memset(&ctx, 0, sizeof(ctx));
  ctx.info = &info;
  ctx.publish = on_publish;
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  connect_both(&srv[0]);
  reset_both();

  /* 2. */
  random_cases(cases);
  fprintf(stderr, "phase 2 (%ld random cases): ok, %" PRIu64 " ms\n", cases,
          harness_now_ms() - t0);

  /* 2b. The same with every script in Lua (kv.c run_lua): the path a
   * script that is not the library's takes (a mutant's), so that the
   * simulator judges a changed script as Redis would run it. */
  simkv_lua_only(1);
  random_cases(cases / 3);
  simkv_lua_only(0);
  fprintf(stderr, "phase 2b (%ld random cases, scripts in Lua): ok\n",
          cases / 3);

  /* 3. */
  both(CMP_EXACT, "CONFIG SET min-replicas-to-write 0");
  both(CMP_EXACT, "SELECT 0");
  expiry_rounds(4);
  fprintf(stderr, "phase 3 (expiry over time): ok\n");

  /* 4. */
  auth_phase();
  fprintf(stderr, "phase 4 (AUTH): ok\n");

  /* 5. A replica of an address where nothing listens: its link stays
   * down, it serves reads, refuses writes. */
  snprintf(port, sizeof(port), "%d", harness_free_port());
  r = srv_cmdf(rc, "REPLICAOF 127.0.0.1 %s", port);
  freeReplyObject(r);
  info.role = "slave";
  info.master_host = "127.0.0.1";
  info.master_port = atoi(port);
  random_cases(cases / 10 + 50);
  r = srv_cmdf(rc, "REPLICAOF NO ONE");
  freeReplyObject(r);
  info.role = "master";
  info.master_host = NULL;
  info.master_port = 0;
  fprintf(stderr, "phase 5 (a replica): ok\n");
  redisFree(rc);
  redisFree(subc);
  rc = subc = NULL;
  harness_stop_all();

  /* 6. A cluster of two primaries; the model is node 0 (slots 0-8191). */
  memset(srv, 0, sizeof(srv));
  srv[0].cluster = srv[1].cluster = 1;
  harness_start(srv, 2);
  harness_cluster_make(srv, 2, 2);
  find_tags();
  connect_both(&srv[0]);
  ctx.route = on_route;
  cluster_phase = 1;
  reset_both();
  random_cases(cases / 10 + 50);
  both(CMP_EXACT, "SELECT 1");
  both(CMP_EXACT, "ASKING");
  fprintf(stderr, "phase 6 (a cluster node): ok\n");

  redisFree(rc);
  redisFree(subc);
  simkv_free(kv);
  harness_stop_all();
  fprintf(stderr, "test-sim-diff: %ld cases compared, %" PRIu64 " ms\n",
          case_no, harness_now_ms() - t0);
  return 0;
}
