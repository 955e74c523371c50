/* batch-cost: what one renewal costs a master, per way of sending it.
 *
 *   batch-cost HOST:PORT [KEYS]
 *
 * Sets KEYS (100000) keys with tokens on one master (use a scratch
 * server: it is flushed), then for each variant pipelines renewals of all
 * of them and reads the master's CPU (INFO cpu, user + sys) before and
 * after: microseconds of master CPU per renewed key. Variants: the
 * library's per-lock extend script (0.1, and renew_batch < 0), the batch
 * script at 64 and 256 keys per call, and for the floor the same calls to
 * a script that does nothing and to one that only reads the keys. Each
 * variant runs REPEAT (5) times; the median is printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#define REPEAT 5

static redisContext *c;
static long nkeys;

static void die(const char *what) {
  fprintf(stderr, "batch-cost: %s%s%s\n", what, c && c->err ? ": " : "",
          c && c->err ? c->errstr : "");
  exit(1);
}

static double cpu_s(void) {
  redisReply *r = redisCommand(c, "INFO cpu");
  double v = 0;
  const char *p;
  if (r == NULL || r->type != REDIS_REPLY_STRING)
    die("INFO cpu");
  p = strstr(r->str, "used_cpu_user:");
  if (p != NULL)
    v += atof(p + 14);
  p = strstr(r->str, "used_cpu_sys:");
  if (p != NULL)
    v += atof(p + 13);
  freeReplyObject(r);
  return v;
}

static void load(const char *text, char sha[41]) {
  redisReply *r = redisCommand(c, "SCRIPT LOAD %s", text);
  if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40)
    die("SCRIPT LOAD");
  memcpy(sha, r->str, 41);
  freeReplyObject(r);
}

static void drain(long n) {
  long i;
  for (i = 0; i < n; i++) {
    redisReply *r;
    if (redisGetReply(c, (void **)&r) != REDIS_OK)
      die("reply");
    if (r->type == REDIS_REPLY_ERROR)
      die(r->str);
    freeReplyObject(r);
  }
}

/* Renews every key in calls of `per` keys: per 0 = the per-lock script
 * (one key a call); else KEYS[1..per], ARGV = tokens then one ttl. */
static double run(const char *sha, long per) {
  static const char *argv[3 + 2 * 256 + 1];
  static size_t lens[3 + 2 * 256 + 1];
  static char keys[256][32], toks[256][48];
  char nk[24];
  double c0 = cpu_s();
  long calls = 0, i, j;
  long step = per == 0 ? 1 : per;
  for (i = 0; i < nkeys; i += step) {
    long k = i + step <= nkeys ? step : nkeys - i;
    int argc = 0;
    argv[argc] = "EVALSHA";
    lens[argc++] = 7;
    argv[argc] = sha;
    lens[argc++] = 40;
    snprintf(nk, sizeof(nk), "%ld", k);
    argv[argc] = nk;
    lens[argc++] = strlen(nk);
    for (j = 0; j < k; j++) {
      snprintf(keys[j], sizeof(keys[j]), "bc:%ld", i + j);
      argv[argc] = keys[j];
      lens[argc++] = strlen(keys[j]);
    }
    for (j = 0; j < k; j++) {
      snprintf(toks[j], sizeof(toks[j]), "%040ld", i + j);
      argv[argc] = toks[j];
      lens[argc++] = 40;
    }
    argv[argc] = "30000";
    lens[argc++] = 5;
    if (per == 0) {   /* the per-lock script also takes heal = "0" */
      argv[argc] = "0";
      lens[argc++] = 1;
    }
    redisAppendCommandArgv(c, argc, argv, lens);
    calls++;
    if (calls % 512 == 0)
      drain(512);
  }
  drain(calls % 512);
  return (cpu_s() - c0) * 1e6 / (double)nkeys;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  /* The library's per-lock extend script (scripts.c) and batch script. */
  static const char per_lock[] =
      "local v = redis.call('get',KEYS[1]) "
      "if v == ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) "
      "elseif v == false and ARGV[3] == '1' then "
      "redis.call('set',KEYS[1],ARGV[1],'px',ARGV[2]) return 2 "
      "else return 0 end";
  static const char batch[] =
      "local n = #KEYS local v = redis.call('mget', unpack(KEYS)) "
      "local one = #ARGV == n + 1 local r = {} "
      "for i = 1, n do if v[i] == ARGV[i] then "
      "r[i] = redis.call('pexpire', KEYS[i], one and ARGV[n + 1] or "
      "ARGV[n + i]) else r[i] = 0 end end return r";
  static const char nothing[] = "return 1";
  static const char read_only[] = "return redis.call('mget', unpack(KEYS))";
  struct {
    const char *name;
    const char *text;
    long per;
  } v[] = {{"per-lock extend (one call per key)", per_lock, 0},
           {"batch script, 64 keys per call", batch, 64},
           {"batch script, 256 keys per call", batch, 256},
           {"empty script, 64 keys per call", nothing, 64},
           {"MGET-only script, 64 keys per call", read_only, 64}};
  char host[64], sha[41];
  const char *colon;
  size_t i;
  long k;
  if (argc < 2 || (colon = strrchr(argv[1], ':')) == NULL ||
      (size_t)(colon - argv[1]) >= sizeof(host)) {
    fprintf(stderr, "usage: batch-cost HOST:PORT [KEYS]\n");
    return 64;
  }
  memcpy(host, argv[1], (size_t)(colon - argv[1]));
  host[colon - argv[1]] = '\0';
  nkeys = argc > 2 ? atol(argv[2]) : 100000;
  if (nkeys < 256 || nkeys > 10000000) {
    fprintf(stderr, "batch-cost: KEYS out of range (256..10000000)\n");
    return 64;
  }
  c = redisConnect(host, atoi(colon + 1));
  if (c == NULL || c->err)
    die("connect");
  freeReplyObject(redisCommand(c, "FLUSHALL"));
  for (k = 0; k < nkeys; k++)
    redisAppendCommand(c, "SET bc:%ld %040ld PX 600000", k, k);
  drain(nkeys);
  printf("master CPU per renewed key (us), median of %d runs over %ld "
         "keys:\n", REPEAT, nkeys);
  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    double d[REPEAT];
    int r;
    load(v[i].text, sha);
    for (r = 0; r < REPEAT; r++)
      d[r] = run(sha, v[i].per);
    qsort(d, REPEAT, sizeof(d[0]), cmp_d);
    printf("  %-38s %.2f (min %.2f)\n", v[i].name, d[REPEAT / 2], d[0]);
  }
  freeReplyObject(redisCommand(c, "FLUSHALL"));
  redisFree(c);
  return 0;
}
