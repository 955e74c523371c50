/* The server address parser: every accepted form, every refusal with a
 * message, credentials never shown, and no crash or leak on any input
 * (truncations of valid addresses at every length, random bytes). */
#include "harness.h"
#include "redlock.h"
#include "uri.h"

/* A password field in the display: a ':' in its userinfo (between "://"
 * and an '@' before the next '/'). */
static int display_has_password(const char *d) {
  const char *p = strstr(d, "://");
  const char *at, *slash, *colon;
  if (p == NULL)
    return 0;
  p += 3;
  at = strchr(p, '@');
  slash = strchr(p, '/');
  if (at == NULL || (slash != NULL && slash < at))
    return 0;
  colon = memchr(p, ':', (size_t)(at - p));
  return colon != NULL;
}

static void ok(const char *s, const char *host, int port, const char *path,
               const char *user, const char *pass, int db,
               const char *display) {
  redlock__uri u;
  char err[200] = "";
  int rc = redlock__uri_parse(s, &u, err, sizeof(err));
  if (rc != 0)
    TEST_FAIL("%s: %s", s, err);
  if (host)
    ASSERT_STR_EQ(u.host, host);
  else
    ASSERT_NULL(u.host);
  ASSERT_EQ(u.port, port);
  if (path)
    ASSERT_STR_EQ(u.path, path);
  else
    ASSERT_NULL(u.path);
  if (user)
    ASSERT_STR_EQ(u.username, user);
  else
    ASSERT_NULL(u.username);
  if (pass)
    ASSERT_STR_EQ(u.password, pass);
  else
    ASSERT_NULL(u.password);
  ASSERT_EQ(u.db, db);
  ASSERT_STR_EQ(u.display, display);
  ASSERT(!display_has_password(u.display));
  redlock__uri_free(&u);
  ASSERT_NULL(u.host);
}

static void refused(const char *s, const char *word) {
  redlock__uri u;
  char err[200] = "";
  int rc = redlock__uri_parse(s, &u, err, sizeof(err));
  if (rc != REDLOCK_EINVAL)
    TEST_FAIL("%s: accepted (rc %d)", s, rc);
  if (strstr(err, word) == NULL)
    TEST_FAIL("%s: message \"%s\" lacks \"%s\"", s, err, word);
  ASSERT_NULL(u.host);
  ASSERT_NULL(u.display);
  ASSERT_NULL(strstr(err, "secret"));
}

/* A cluster or sentinel address: kind, name, extra hosts. */
static void ok_kind(const char *s, int kind, const char *name,
                    unsigned n_extra, const char *last_extra, int last_port,
                    const char *display) {
  redlock__uri u;
  char err[200] = "";
  if (redlock__uri_parse(s, &u, err, sizeof(err)) != 0)
    TEST_FAIL("%s: %s", s, err);
  ASSERT_EQ(u.kind, kind);
  if (name != NULL)
    ASSERT_STR_EQ(u.name, name);
  else
    ASSERT_NULL(u.name);
  ASSERT_EQ(u.n_extra, n_extra);
  if (n_extra > 0) {
    ASSERT_STR_EQ(u.extra[n_extra - 1].host, last_extra);
    ASSERT_EQ(u.extra[n_extra - 1].port, last_port);
  }
  ASSERT_STR_EQ(u.display, display);
  ASSERT_NULL(strstr(u.display, "secret"));
  redlock__uri_free(&u);
}

static void no_crash(const char *s) {
  redlock__uri u;
  char err[64];
  int rc = redlock__uri_parse(s, &u, err, sizeof(err));
  if (rc == 0) {
    ASSERT_NOT_NULL(u.display);
    redlock__uri_free(&u);
  } else {
    ASSERT_EQ(rc, REDLOCK_EINVAL);
    ASSERT_NULL(u.host);
    ASSERT_NULL(u.path);
    ASSERT_NULL(u.username);
    ASSERT_NULL(u.password);
    ASSERT_NULL(u.display);
  }
}

int main(void) {
  static const char *valid[] = {
      "127.0.0.1:7000", "redis://user:secret@host.example:7001/5",
      "unix:///var/run/redis.sock?db=3", "redis://[::1]:7000/1",
      "[fe80::1]:6380", "redis://:secret@h",
      "rediss+cluster://u:secret@h:7000?seed=h2:7001&seed=[::1]:7002",
      ("redis+sentinel://:secret@h:26379/m?sentinel=h2:26380&db=2&"
       "sentinel_user=u&sentinel_password=secret")};
  char buf[512];
  uint64_t st = 12345;
  size_t i, k;

  ok("127.0.0.1:7000", "127.0.0.1", 7000, NULL, NULL, NULL, 0,
     "127.0.0.1:7000");
  ok("localhost", "localhost", 6379, NULL, NULL, NULL, 0, "localhost:6379");
  ok("redis://h", "h", 6379, NULL, NULL, NULL, 0, "redis://h:6379");
  ok("rediss://u:p@h:6380/2", "h", 6380, NULL, "u", "p", 2,
     "rediss://u@h:6380/2");
  ok("redis://h:7001/", "h", 7001, NULL, NULL, NULL, 0, "redis://h:7001");
  ok("redis://u:secret@h:1/3", "h", 1, NULL, "u", "secret", 3,
     "redis://u@h:1/3");
  ok("redis://:secret@h", "h", 6379, NULL, NULL, "secret", 0,
     "redis://h:6379");
  ok("redis://us%65r:p%40ss%3Aw@h", "h", 6379, NULL, "user", "p@ss:w", 0,
     "redis://user@h:6379");
  /* The display quotes the user %-encoded: a user holding ':', '@' or a
   * newline cannot forge a password field or a log line (the fuzzer's
   * invariant: no ':' in the display's userinfo). */
  ok("redis://a%3Apw%40:pw@h", "h", 6379, NULL, "a:pw@", "pw", 0,
     "redis://a%3Apw%40@h:6379");
  ok("redis://u%0Ax:pw@h", "h", 6379, NULL, "u\nx", "pw", 0,
     "redis://u%0Ax@h:6379");
  ok("redis://A-z.0_~:pw@h", "h", 6379, NULL, "A-z.0_~", "pw", 0,
     "redis://A-z.0_~@h:6379");
  ok("redis://[::1]:7000/1", "::1", 7000, NULL, NULL, NULL, 1,
     "redis://[::1]:7000/1");
  ok("[::1]:7000", "::1", 7000, NULL, NULL, NULL, 0, "[::1]:7000");
  ok("[::1]", "::1", 6379, NULL, NULL, NULL, 0, "[::1]:6379");
  ok("unix:///tmp/r.sock", NULL, 0, "/tmp/r.sock", NULL, NULL, 0,
     "unix:///tmp/r.sock");
  ok("unix:///tmp/r.sock?db=4", NULL, 0, "/tmp/r.sock", NULL, NULL, 4,
     "unix:///tmp/r.sock?db=4");
  ok("redis://h:65535/2147483647", "h", 65535, NULL, NULL, NULL, 2147483647,
     "redis://h:65535/2147483647");

  refused("", "empty");
  refused("redis://h:99999", "99999");
  refused("redis://h:0", "1..65535");
  refused("h:-1", "port");
  refused("h:12a", "port");
  refused("redis://", "empty host");
  refused("redis://:7000", "empty host");
  refused("h:7:8", "IPv6");
  refused("[::1", "unterminated");
  refused("[]:1", "empty IPv6");
  refused("[::1]x", "after IPv6");
  refused("redis://h/x", "db");
  refused("redis://h/-1", "db");
  refused("redis://h/2147483648", "db");
  refused("unix://relative", "absolute");
  refused("unix:///tmp/s?db=x", "db");
  refused("unix:///tmp/s?foo=1", "option");
  refused("ftp://h", "unknown scheme");
  refused("http://h", "scheme");
  refused("redis://u@h", "password");
  refused("redis://u:%zz@h", "escape");
  refused("redis://u:%4@h", "escape");
  refused("redis://u:%00@h", "escape");
  refused("redis://:@h", "empty password");
  refused("a b:1", "whitespace");
  refused("h\t:1", "control");
  refused("ho$t:1", "bad character");
  refused("redis://u:secret@h:99999", "***");
  memset(buf, 'a', 300);
  buf[300] = '\0';
  refused(buf, "255");
  {
    redlock__uri u;
    ASSERT_EQ(redlock__uri_parse(NULL, &u, NULL, 0), REDLOCK_EINVAL);
    ASSERT_EQ(redlock__uri_parse("x:99999", &u, NULL, 0), REDLOCK_EINVAL);
  }

  /* Redis Cluster and Sentinel (issue 22). */
  ok_kind("redis+cluster://127.0.0.1:7000", REDLOCK__URI_CLUSTER, NULL, 0,
          NULL, 0, "redis+cluster://127.0.0.1:7000");
  ok_kind("rediss+cluster://u:secret@h:7000?seed=h2:7001&seed=[::1]:7002"
          "&durable=1", REDLOCK__URI_CLUSTER, NULL, 2, "::1", 7002,
          "rediss+cluster://u@h:7000");
  ok_kind("redis+cluster://h:7000/0", REDLOCK__URI_CLUSTER, NULL, 0, NULL,
          0, "redis+cluster://h:7000");
  ok_kind("redis+sentinel://h:26379/mymaster", REDLOCK__URI_SENTINEL,
          "mymaster", 0, NULL, 0, "redis+sentinel://h:26379/mymaster");
  ok_kind("redis+sentinel://:secret@h:26379/m?sentinel=h2:26380&db=2&"
          "sentinel_password=secret2", REDLOCK__URI_SENTINEL, "m", 1, "h2",
          26380, "redis+sentinel://h:26379/m?db=2");
  refused("redis+cluster://h:7000/2", "database 0");
  refused("redis+cluster://h:7000?sentinel=h:1", "seed=host:port");
  refused("redis+cluster://h:7000?seed=h:99999", "99999");
  refused("redis+cluster://h:7000?seed=", "without a value");
  refused("redis+sentinel://h:26379", "no primary name");
  refused("redis+sentinel://h:26379/", "no primary name");
  refused("redis+sentinel://h:26379/a/b", "bad character");
  refused("redis+sentinel://h:1/m?seed=h:2", "sentinel=host:port");
  refused("redis+sentinel://h:1/m?sentinel_user=u", "without "
          "sentinel_password");
  refused("redis+sentinel://h:1/m?sentinel_password=secret&"
          "sentinel_password=secret", "twice");
  refused("redis+sentinel://h:1/m?sentinel_password=secret&bogus=1",
          "unknown option");
  /* The isolation check's override (issue 29, item 11). */
  {
    redlock__uri u;
    char err[200] = "";
    ASSERT_EQ(redlock__uri_parse("redis+sentinel://h:1/m?isolation=unchecked",
                                 &u, err, sizeof(err)), 0);
    ASSERT_EQ(u.isolation_unchecked, 1);
    redlock__uri_free(&u);
    ASSERT_EQ(redlock__uri_parse("redis+sentinel://h:1/m?isolation=checked",
                                 &u, err, sizeof(err)), 0);
    ASSERT_EQ(u.isolation_unchecked, 0);
    redlock__uri_free(&u);
  }
  refused("redis+sentinel://h:1/m?isolation=off", "checked or unchecked");
  refused("redis://h:1?isolation=unchecked", "unknown option");
  refused("redis+cluster://h:1?isolation=unchecked", "unknown option");
  refused("redis+cluster://h:1?seed=a:1&seed=a:1&seed=a:1&seed=a:1&seed=a:1"
          "&seed=a:1&seed=a:1&seed=a:1&seed=a:1&seed=a:1&seed=a:1&seed=a:1"
          "&seed=a:1&seed=a:1&seed=a:1&seed=a:1&seed=a:1", "at most 16");
  refused("redis+mesh://h", "redis+cluster://");

  /* Every truncation of every valid form, and random bytes. */
  for (i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
    size_t len = strlen(valid[i]);
    for (k = 0; k <= len; k++) {
      memcpy(buf, valid[i], k);
      buf[k] = '\0';
      no_crash(buf);
    }
  }
  for (i = 0; i < 20000; i++) {
    size_t len;
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    len = st % 40;
    for (k = 0; k < len; k++) {
      static const char alphabet[] = "redis:/unix@[]%?=0123456789abcdef.:";
      st ^= st << 13;
      st ^= st >> 7;
      st ^= st << 17;
      buf[k] = (st & 0x100) ? alphabet[st % (sizeof(alphabet) - 1)]
                            : (char)(1 + st % 255);
    }
    buf[len] = '\0';
    no_crash(buf);
  }
  return 0;
}
