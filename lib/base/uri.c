/* uri.c: parse one master address, pure (no I/O).
 *
 * Accepted forms (see uri.h):
 *   redis://[user[:password]@]host[:port][/db]
 *   rediss://... (the same, over TLS)
 *   unix:///absolute/path[?db=N]
 *   host:port, host, [v6]:port, [v6]
 *   redis+cluster://, rediss+cluster:// (a Redis Cluster by a seed node)
 *   redis+sentinel://host:port/NAME, rediss+sentinel:// (a primary named
 *   by Redis Sentinel)
 * Options after '?', joined by '&': db=N (unix, sentinel), durable=<bool>
 * (the operator declares the master durable), seed=host:port (cluster),
 * sentinel=host:port, sentinel_user=, sentinel_password=,
 * isolation=unchecked (sentinel: count the group although its primary may
 * accept writes when cut off from its replicas; node.c).
 * Every error names what is wrong and quotes the input; on error nothing
 * stays allocated and *out is zeroed. Reads only within the string. */
#include <stdio.h>
#include <string.h>

#include "redlock.h"
#include "alloc.h"
#include "uri.h"

#define MAX_HOST 255

typedef struct {
  char *err;
  size_t errlen;
  const char *input;
} ctx;

/* The input as it may appear in a message: credentials replaced by ***
 * (the userinfo, and a sentinel_password option's value). */
static void redacted(const char *in, char *buf, size_t len) {
  const char *sep = strstr(in, "://");
  const char *at = sep ? strchr(sep + 3, '@') : NULL;
  const char *slash = sep ? strchr(sep + 3, '/') : NULL;
  const char *sp;
  if (at != NULL && (slash == NULL || at < slash))
    snprintf(buf, len, "%.*s***%.80s", (int)(sep + 3 - in), in, at);
  else
    snprintf(buf, len, "%.80s", in);
  for (sp = strstr(buf, "sentinel_password="); sp != NULL;
       sp = strstr(sp + 18, "sentinel_password=")) {
    char *v = (char *)sp + 18;
    char *amp = strchr(v, '&');
    char rest[128];
    snprintf(rest, sizeof(rest), "%s", amp != NULL ? amp : "");
    snprintf(v, len - (size_t)(v - buf), "***%s", rest);
  }
}

static int bad(const ctx *x, const char *what) {
  char shown[128];
  if (x->err != NULL && x->errlen > 0) {
    redacted(x->input, shown, sizeof(shown));
    snprintf(x->err, x->errlen, "%s in \"%s\"", what, shown);
  }
  return REDLOCK_EINVAL;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..len) into a new string; NULL on a bad escape
 * (*oom = 0) or out of memory (*oom = 1). */
static char *decode(const char *s, size_t len, int *oom) {
  char *out = redlock__malloc(len + 1);
  size_t i;
  size_t o = 0;
  *oom = out == NULL;
  if (out == NULL)
    return NULL;
  for (i = 0; i < len; i++) {
    if (s[i] == '%') {
      int c;
      if (len - i < 3 || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) {
        redlock__free(out);
        return NULL;
      }
      c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
      if (c == 0) {   /* no NUL inside a credential */
        redlock__free(out);
        return NULL;
      }
      out[o++] = (char)c;
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return out;
}

/* Decimal digits only, value in [lo, hi]. */
static int parse_num(const char *s, size_t len, long lo, long hi,
                     long *out) {
  long v = 0;
  size_t i;
  if (len == 0 || len > 10)
    return -1;
  for (i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

static int host_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* host[:port] or [v6][:port] in s[0..len). */
static int parse_hostport(const ctx *x, const char *s, size_t len,
                          redlock__uri *u) {
  const char *host;
  size_t hlen;
  const char *port = NULL;
  size_t plen = 0;
  size_t i;
  long v;
  if (len == 0)
    return bad(x, "empty host");
  if (s[0] == '[') {
    const char *close = memchr(s, ']', len);
    if (close == NULL)
      return bad(x, "unterminated '[' in IPv6 address");
    host = s + 1;
    hlen = (size_t)(close - host);
    if (hlen == 0)
      return bad(x, "empty IPv6 address");
    for (i = 0; i < hlen; i++) {
      char c = host[i];
      if (!(hexval(c) >= 0 || c == ':' || c == '.'))
        return bad(x, "bad character in IPv6 address");
    }
    i = (size_t)(close - s) + 1;
    if (i < len) {
      if (s[i] != ':')
        return bad(x, "unexpected text after IPv6 address");
      port = s + i + 1;
      plen = len - i - 1;
    }
  } else {
    const char *colon = memchr(s, ':', len);
    host = s;
    hlen = colon ? (size_t)(colon - s) : len;
    if (colon != NULL) {
      port = colon + 1;
      plen = len - hlen - 1;
      if (memchr(port, ':', plen) != NULL)
        return bad(x, "too many ':' (IPv6 addresses go in brackets)");
    }
    if (hlen == 0)
      return bad(x, "empty host");
    for (i = 0; i < hlen; i++)
      if (!host_char_ok(host[i]))
        return bad(x, "bad character in host");
  }
  if (hlen > MAX_HOST)
    return bad(x, "host longer than 255 characters");
  u->port = 6379;
  if (port != NULL) {
    if (parse_num(port, plen, 1, 65535, &v) != 0) {
      if (x->err != NULL && x->errlen > 0) {
        char shown[128];
        redacted(x->input, shown, sizeof(shown));
        snprintf(x->err, x->errlen,
                 "bad port \"%.*s\" in \"%s\": must be 1..65535",
                 (int)(plen > 16 ? 16 : plen), port, shown);
      }
      return REDLOCK_EINVAL;
    }
    u->port = (int)v;
  }
  u->host = redlock__strndup(host, hlen);
  return u->host == NULL ? REDLOCK_ENOMEM : 0;
}

/* The user as the display shows it: RFC 3986's unreserved characters as
 * they are, every other byte %XX. A decoded user may hold ':' and '@' (a
 * display "redis://a:pw@@h" would show a password field that is not
 * there) or a newline (a forged log line). */
static void encode_user(const char *user, char *out, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (; *user != '\0' && o + 4 <= len; user++) {
    unsigned char c = (unsigned char)*user;
    if (host_char_ok((char)c) || c == '~') {
      out[o++] = (char)c;
    } else {
      out[o++] = '%';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  out[o] = '\0';
}

static int make_display(redlock__uri *u, int scheme) {
  static const char *const names[2][3] = {
      {"redis", "redis+cluster", "redis+sentinel"},
      {"rediss", "rediss+cluster", "rediss+sentinel"}};
  const char *name = names[u->tls ? 1 : 0][u->kind];
  char buf[600];
  char user[200];
  int v6 = u->host != NULL && strchr(u->host, ':') != NULL;
  if (u->username != NULL)
    encode_user(u->username, user, sizeof(user));
  if (u->path != NULL) {
    if (u->db != 0)
      snprintf(buf, sizeof(buf), "unix://%s?db=%d", u->path, u->db);
    else
      snprintf(buf, sizeof(buf), "unix://%s", u->path);
  } else if (scheme) {
    snprintf(buf, sizeof(buf), "%s://%s%s%s%s%s:%d", name,
             u->username ? user : "", u->username ? "@" : "",
             v6 ? "[" : "", u->host, v6 ? "]" : "", u->port);
    if (u->name != NULL) {
      size_t n = strlen(buf);
      snprintf(buf + n, sizeof(buf) - n, "/%s", u->name);
    }
    if (u->db != 0) {
      size_t n = strlen(buf);
      snprintf(buf + n, sizeof(buf) - n, u->name != NULL ? "?db=%d" : "/%d",
               u->db);
    }
  } else {
    snprintf(buf, sizeof(buf), "%s%s%s:%d", v6 ? "[" : "", u->host,
             v6 ? "]" : "", u->port);
  }
  u->display = redlock__strdup(buf);
  return u->display == NULL ? REDLOCK_ENOMEM : 0;
}

/* A boolean option's value: 1, 0, or -1 when it is none of the words. */
static int parse_bool(const char *s, size_t len) {
  static const char *const yes[] = {"1", "yes", "true"};
  static const char *const no[] = {"0", "no", "false"};
  size_t i;
  for (i = 0; i < 3; i++) {
    if (strlen(yes[i]) == len && memcmp(s, yes[i], len) == 0)
      return 1;
    if (strlen(no[i]) == len && memcmp(s, no[i], len) == 0)
      return 0;
  }
  return -1;
}

/* An extra host:port (?seed=, ?sentinel=). */
static int add_extra(const ctx *x, const char *val, size_t vlen,
                     redlock__uri *u) {
  redlock__uri tmp;
  redlock__hostport *more;
  int rc;
  if (u->n_extra == REDLOCK__URI_MAX_EXTRA)
    return bad(x, "too many seed= or sentinel= options (at most 16)");
  memset(&tmp, 0, sizeof(tmp));
  rc = parse_hostport(x, val, vlen, &tmp);
  if (rc != 0)
    return rc;
  more = redlock__realloc(u->extra, (u->n_extra + 1) * sizeof(*more));
  if (more == NULL) {
    redlock__free(tmp.host);
    return REDLOCK_ENOMEM;
  }
  u->extra = more;
  more[u->n_extra].host = tmp.host;
  more[u->n_extra].port = tmp.port;
  u->n_extra++;
  return 0;
}

static int opt_is(const char *q, size_t nlen, const char *name) {
  return strlen(name) == nlen && memcmp(q, name, nlen) == 0;
}

/* "name=value&name=value" (after the '?'). db where allow_db (unix,
 * sentinel); seed= for clusters, sentinel= and its credentials for
 * sentinel groups. */
static int parse_options(const ctx *x, const char *q, int allow_db,
                         redlock__uri *u) {
  static const char *const known[3] = {
      "db=N, durable=1", "durable=1, seed=host:port",
      ("db=N, durable=1, sentinel=host:port, sentinel_user=U, "
       "sentinel_password=P, isolation=unchecked")};
  char msg[160];
  while (*q != '\0') {
    const char *amp = strchr(q, '&');
    size_t len = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', len);
    size_t nlen = eq ? (size_t)(eq - q) : len;
    const char *val = eq ? eq + 1 : q + len;
    size_t vlen = eq ? len - nlen - 1 : 0;
    long v;
    int b, rc, oom;
    if (eq == NULL || vlen == 0)
      return bad(x, "option without a value (name=value)");
    if (allow_db && opt_is(q, nlen, "db")) {
      if (parse_num(val, vlen, 0, 2147483647L, &v) != 0)
        return bad(x, "db must be a non-negative integer");
      u->db = (int)v;
    } else if (opt_is(q, nlen, "durable")) {
      b = parse_bool(val, vlen);
      if (b < 0)
        return bad(x, "durable must be 1 or 0 (yes/no, true/false)");
      u->durable = b;
    } else if ((u->kind == REDLOCK__URI_CLUSTER && opt_is(q, nlen, "seed")) ||
               (u->kind == REDLOCK__URI_SENTINEL &&
                opt_is(q, nlen, "sentinel"))) {
      if ((rc = add_extra(x, val, vlen, u)) != 0)
        return rc;
    } else if (u->kind == REDLOCK__URI_SENTINEL &&
               opt_is(q, nlen, "isolation")) {
      if (!(vlen == 9 && memcmp(val, "unchecked", 9) == 0) &&
          !(vlen == 7 && memcmp(val, "checked", 7) == 0))
        return bad(x, "isolation must be checked or unchecked");
      u->isolation_unchecked = vlen == 9;
    } else if (u->kind == REDLOCK__URI_SENTINEL &&
               (opt_is(q, nlen, "sentinel_user") ||
                opt_is(q, nlen, "sentinel_password"))) {
      char **dst = nlen == 13 ? &u->sentinel_user : &u->sentinel_password;
      if (*dst != NULL)
        return bad(x, "sentinel_user or sentinel_password given twice");
      *dst = decode(val, vlen, &oom);
      if (*dst == NULL)
        return oom ? REDLOCK_ENOMEM : bad(x, "bad %-escape in an option");
    } else {
      snprintf(msg, sizeof(msg), "unknown option (%s)",
               u->kind == REDLOCK__URI_PLAIN && !allow_db
                   ? "durable=1" : known[u->kind]);
      return bad(x, msg);
    }
    q += len;
    if (*q == '&') {
      q++;
      if (*q == '\0')
        return bad(x, "empty option after '&'");
    }
  }
  if (u->sentinel_user != NULL && u->sentinel_password == NULL)
    return bad(x, "sentinel_user without sentinel_password");
  return 0;
}

static int parse_unix(const ctx *x, const char *s, redlock__uri *u) {
  const char *q = strchr(s, '?');
  size_t plen = q ? (size_t)(q - s) : strlen(s);
  int rc;
  if (plen == 0 || s[0] != '/')
    return bad(x, "unix socket path must be absolute");
  if (plen > 107)
    return bad(x, "unix socket path too long");
  if (q != NULL) {
    if (q[1] == '\0')
      return bad(x, "empty options after '?'");
    if ((rc = parse_options(x, q + 1, 1, u)) != 0)
      return rc;
  }
  u->path = redlock__strndup(s, plen);
  return u->path == NULL ? REDLOCK_ENOMEM : 0;
}

static int parse_redis(const ctx *x, const char *s, redlock__uri *u) {
  /* Options start at the first '?' after the userinfo (a password may
   * hold a '?'). */
  const char *last_at = strrchr(s, '@');
  const char *q = strchr(last_at != NULL ? last_at : s, '?');
  const char *end = q != NULL ? q : s + strlen(s);
  const char *slash;
  const char *at;
  const char *hp = s;
  int oom;
  long v;
  int rc;
  if (q != NULL) {
    if (q[1] == '\0')
      return bad(x, "empty options after '?'");
    if ((rc = parse_options(x, q + 1, u->kind == REDLOCK__URI_SENTINEL,
                            u)) != 0)
      return rc;
  }
  /* userinfo: up to the last '@' before the first '/' */
  slash = memchr(s, '/', (size_t)(end - s));
  if (slash == NULL)
    slash = end;
  at = NULL;
  for (const char *p = s; p < slash; p++)
    if (*p == '@')
      at = p;
  if (at != NULL) {
    const char *colon = memchr(s, ':', (size_t)(at - s));
    size_t ulen = colon ? (size_t)(colon - s) : (size_t)(at - s);
    if (ulen > 0) {
      u->username = decode(s, ulen, &oom);
      if (u->username == NULL)
        return oom ? REDLOCK_ENOMEM : bad(x, "bad %-escape in user");
    }
    if (colon != NULL) {
      u->password = decode(colon + 1, (size_t)(at - colon - 1), &oom);
      if (u->password == NULL)
        return oom ? REDLOCK_ENOMEM : bad(x, "bad %-escape in password");
      if (u->password[0] == '\0') {
        redlock__free(u->password);
        u->password = NULL;
        return bad(x, "empty password");
      }
    } else if (ulen > 0) {
      return bad(x, "user without password (use redis://user:pass@host)");
    }
    hp = at + 1;
  }
  rc = parse_hostport(x, hp, (size_t)(slash - hp), u);
  if (rc != 0)
    return rc;
  if (u->kind == REDLOCK__URI_SENTINEL) {
    /* The path is the primary's name, as the sentinels know it. */
    const char *name = slash != end ? slash + 1 : end;
    size_t i, nl = (size_t)(end - name);
    if (nl == 0)
      return bad(x, "no primary name (redis+sentinel://host:port/NAME)");
    if (nl > 128)
      return bad(x, "primary name longer than 128 characters");
    for (i = 0; i < nl; i++)
      if (!host_char_ok(name[i]))
        return bad(x, "bad character in the primary name (letters, "
                      "digits, '-', '_', '.')");
    u->name = redlock__strndup(name, nl);
    return u->name == NULL ? REDLOCK_ENOMEM : 0;
  }
  if (slash != end && u->kind == REDLOCK__URI_CLUSTER) {
    if (slash + 1 != end && !(slash + 2 == end && slash[1] == '0'))
      return bad(x, "a cluster has only database 0 (no /db)");
    return 0;
  }
  if (slash != end) {
    const char *db = slash + 1;
    if (db != end) {
      if (parse_num(db, (size_t)(end - db), 0, 2147483647L, &v) != 0)
        return bad(x, "db must be a non-negative integer");
      u->db = (int)v;
    }
  }
  return 0;
}

int redlock__uri_parse(const char *s, redlock__uri *out, char *err,
                       size_t errlen) {
  ctx x = {err, errlen, s};
  int rc;
  int scheme = 0;
  size_t i;
  if (out == NULL)
    return REDLOCK_EINVAL;
  memset(out, 0, sizeof(*out));
  if (s == NULL) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "no server address");
    return REDLOCK_EINVAL;
  }
  if (*s == '\0')
    return bad(&x, "empty server address");
  for (i = 0; s[i] != '\0'; i++)
    if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
      return bad(&x, "whitespace or control character");
  if (strncmp(s, "redis://", 8) == 0) {
    scheme = 1;
    rc = parse_redis(&x, s + 8, out);
  } else if (strncmp(s, "unix://", 7) == 0) {
    rc = parse_unix(&x, s + 7, out);
  } else if (strncmp(s, "rediss://", 9) == 0) {
    scheme = 1;
    out->tls = 1;
    rc = parse_redis(&x, s + 9, out);
  } else if (strncmp(s, "redis+cluster://", 16) == 0 ||
             strncmp(s, "rediss+cluster://", 17) == 0) {
    scheme = 1;
    out->tls = s[5] == 's';
    out->kind = REDLOCK__URI_CLUSTER;
    rc = parse_redis(&x, s + (out->tls ? 17 : 16), out);
  } else if (strncmp(s, "redis+sentinel://", 17) == 0 ||
             strncmp(s, "rediss+sentinel://", 18) == 0) {
    scheme = 1;
    out->tls = s[5] == 's';
    out->kind = REDLOCK__URI_SENTINEL;
    rc = parse_redis(&x, s + (out->tls ? 18 : 17), out);
  } else if (strstr(s, "://") != NULL) {
    rc = bad(&x, "unknown scheme (use redis://, rediss://, unix://, "
                 "redis+cluster:// or redis+sentinel://)");
  } else {
    rc = parse_hostport(&x, s, strlen(s), out);
  }
  if (rc == 0)
    rc = make_display(out, scheme);
  if (rc != 0) {
    if (rc == REDLOCK_ENOMEM && err != NULL && errlen > 0)
      snprintf(err, errlen, "out of memory");
    redlock__uri_free(out);
  }
  return rc;
}

void redlock__uri_free(redlock__uri *u) {
  if (u == NULL)
    return;
  redlock__free(u->host);
  redlock__free(u->path);
  redlock__free(u->username);
  if (u->password != NULL)
    memset(u->password, 0, strlen(u->password));
  redlock__free(u->password);
  redlock__free(u->display);
  redlock__free(u->name);
  while (u->n_extra > 0)
    redlock__free(u->extra[--u->n_extra].host);
  redlock__free(u->extra);
  redlock__free(u->sentinel_user);
  if (u->sentinel_password != NULL)
    memset(u->sentinel_password, 0, strlen(u->sentinel_password));
  redlock__free(u->sentinel_password);
  memset(u, 0, sizeof(*u));
}
