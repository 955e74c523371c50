/* uri.h: parse one master address. Pure: no I/O, no uv, no hiredis. */
#ifndef REDLOCK_URI_H
#define REDLOCK_URI_H

#include <stddef.h>

/* A parsed server address. Every string is owned by the struct (allocated
 * with redlock__malloc) and freed by redlock__uri_free(). */
/* More seeds of a cluster, more sentinels of a group. */
typedef struct redlock__hostport {
  char *host;
  int port;
} redlock__hostport;

#define REDLOCK__URI_PLAIN 0      /* one Redis master */
#define REDLOCK__URI_CLUSTER 1    /* redis+cluster://: a Redis Cluster */
#define REDLOCK__URI_SENTINEL 2   /* redis+sentinel://: a primary that
                                     Redis Sentinel names */
#define REDLOCK__URI_MAX_EXTRA 16 /* ?seed= or ?sentinel= options */

typedef struct redlock__uri {
  char *host;        /* hostname or IP literal without brackets; NULL for unix */
  int port;          /* 1..65535; 6379 when omitted; 0 for unix */
  char *path;        /* unix socket path; NULL for tcp */
  char *username;    /* NULL when absent */
  char *password;    /* NULL when absent */
  int db;            /* 0 when omitted; 0..INT32_MAX */
  int tls;           /* rediss:// */
  int durable;       /* ?durable=1: the operator declares it durable */
  char *display;     /* for logs and results: the address without password,
                        e.g. "redis://user@127.0.0.1:7000/2", "unix:///tmp/s",
                        "127.0.0.1:7000", "redis+cluster://127.0.0.1:7000" */
  int kind;          /* REDLOCK__URI_* */
  char *name;        /* sentinel: the primary's name (the path) */
  redlock__hostport *extra;   /* cluster: more seeds; sentinel: more
                                 sentinels (host:port is the first) */
  unsigned n_extra;
  char *sentinel_user;        /* sentinel: credentials for the sentinels */
  char *sentinel_password;    /* (the others are the data nodes') */
  int isolation_unchecked;    /* sentinel: ?isolation=unchecked, the
                                 operator counts the group although its
                                 primary may accept writes when cut off
                                 from its replicas (node.c) */
} redlock__uri;

/* Parses `s` (NUL-terminated). Accepted forms:
 *   redis://[user[:password]@]host[:port][/db]
 *   redis://[:password@]host[:port][/db]     (password only)
 *   rediss://...                             (the same, over TLS)
 *   unix:///absolute/path[?db=N]
 *   host:port  and  host  (port 6379)
 *   redis+cluster://[user:pass@]host:port[?seed=host:port...]
 *   rediss+cluster://...                     (a Redis Cluster over TLS)
 *   redis+sentinel://[user:pass@]host:port/NAME[?sentinel=host:port...]
 *   rediss+sentinel://...                    (data nodes and sentinels
 *                                             over TLS)
 * redis://, rediss:// and unix:// take options after '?', joined by '&':
 *   db=N (unix, sentinel), durable=1|0|yes|no|true|false,
 *   seed=host:port (cluster, repeatable), sentinel=host:port (sentinel,
 *   repeatable), sentinel_user=U and sentinel_password=P (sentinel).
 *   IPv6 literals in brackets: redis://[::1]:7000, [::1]:7000
 * User and password may be %XX-encoded in the redis:// form.
 * Returns 0, REDLOCK_EINVAL (and writes a message into err, errlen bytes,
 * NUL-terminated, naming what is wrong) or REDLOCK_ENOMEM. On error *out is
 * left zeroed and nothing is allocated. */
int redlock__uri_parse(const char *s, redlock__uri *out, char *err,
                       size_t errlen);
void redlock__uri_free(redlock__uri *u);

#endif
