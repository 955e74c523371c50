/* sentinel.c: a primary named by Redis Sentinel as one master of the
 * quorum.
 *
 * Owns: one connection to one sentinel of the group at a time (the
 * URI's host:port, then its ?sentinel= options, in turn after each
 * failure, with backoff), which asks `SENTINEL get-master-addr-by-name
 * NAME` and `SENTINEL REPLICAS NAME` and then listens on +switch-master,
 * and is opened afresh every 3 s to ask both again (a subscribed
 * connection takes no other command); and pointing the master's
 * data node (node.c) at the primary they name. Does not own: the data
 * node's connection, handshake and requests (node.c), or what a switch
 * means for safety (guard.c).
 *
 * A switch is a failover: the new primary was a replica, replication is
 * asynchronous, so it may lack lock keys, exactly like a master that
 * restarted empty. The data node connects to it afresh; its handshake
 * shows another instance (run_id and replication id), and the restart
 * guard does not count its YES votes until the deployment's longest ttl
 * has passed (guard.c), unless the group is declared durable. A data node
 * whose handshake says role:slave (the sentinels' answer was stale, or a
 * switch is under way) is not used: the sentinels are asked again.
 *
 * A partition can leave the old primary taking writes beside the promoted
 * replica: the group's votes count only while its primary runs
 * min-replicas-to-write and min-replicas-max-lag >= 1, and 2 x
 * min-replicas-to-write >= its replicas (node.c reads the settings and
 * keeps the largest replica count listed here, down replicas included:
 * the primary's own connected_slaves shrinks in a partition; round.c and
 * batch.c refuse the votes otherwise; ?isolation=unchecked overrides;
 * DESIGN, Sentinel).
 *
 *   IDLE -> (RESOLVING) -> CONNECTING: [AUTH], get-master-addr, REPLICAS,
 *        SUBSCRIBE -> READY (messages) --failure/deadline--> BACKOFF ->
 *        next sentinel; READY --3 s--> IDLE (the same sentinel, asked again)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sentinel.h"

/* How often a READY connection is opened afresh to list the replicas
 * again: the period of the primary's min-replicas re-check (client.c). */
#define REASK_MS 3000

enum { S_IDLE = 0, S_RESOLVING, S_CONNECTING, S_READY, S_BACKOFF,
       S_CLOSED };

typedef struct redlock__sgai {
  redlock__resolve req;
  redlock__sentinel *s;   /* NULL once let go */
} redlock__sgai;

static void s_connect(redlock__sentinel *s);

int redlock__sentinel_init(redlock__sentinel *s, redlock__node_env *env,
                           redlock__node *node, const redlock__uri *uri) {
  unsigned i;
  memset(s, 0, sizeof(*s));
  s->env = env;
  s->node = node;
  s->tls = uri->tls;
  s->name = redlock__strdup(uri->name);
  s->name_len = uri->name != NULL ? strlen(uri->name) : 0;
  s->n = 1 + uri->n_extra;
  s->host = redlock__calloc(s->n, sizeof(*s->host));
  s->port = redlock__calloc(s->n, sizeof(*s->port));
  if (s->name == NULL || s->host == NULL || s->port == NULL)
    return REDLOCK_ENOMEM;
  for (i = 0; i < s->n; i++) {
    s->host[i] = redlock__strdup(i == 0 ? uri->host : uri->extra[i - 1].host);
    s->port[i] = i == 0 ? uri->port : uri->extra[i - 1].port;
    if (s->host[i] == NULL)
      return REDLOCK_ENOMEM;
  }
  if ((uri->sentinel_user != NULL &&
       (s->user = redlock__strdup(uri->sentinel_user)) == NULL) ||
      (uri->sentinel_password != NULL &&
       (s->pass = redlock__strdup(uri->sentinel_password)) == NULL))
    return REDLOCK_ENOMEM;
  snprintf(s->errstr, sizeof(s->errstr), "the sentinels have not named "
           "the primary \"%s\" yet", s->name);
  return 0;
}

void redlock__sentinel_free(redlock__sentinel *s) {
  unsigned i;
  redlock__conn_free(&s->conn);
  for (i = 0; s->host != NULL && i < s->n; i++)
    redlock__free(s->host[i]);
  redlock__free(s->host);
  redlock__free(s->port);
  redlock__free(s->name);
  redlock__free(s->user);
  if (s->pass != NULL)
    memset(s->pass, 0, strlen(s->pass));
  redlock__free(s->pass);
  memset(s, 0, sizeof(*s));
}

/* ---- the primary they name ----------------------------------------------- */

static void point(redlock__sentinel *s, const char *host, size_t hostlen,
                  int port, int switched) {
  redlock__node *n = s->node;
  char h[256];
  if (hostlen == 0 || hostlen >= sizeof(h) || port <= 0 || port > 65535)
    return;
  memcpy(h, host, hostlen);
  h[hostlen] = '\0';
  s->errstr[0] = '\0';
  if (!n->lazy && n->uri.host != NULL && strcmp(n->uri.host, h) == 0 &&
      n->uri.port == port && n->state != REDLOCK__NODE_DOWN)
    return;   /* already there */
  (void)redlock__node_repoint(n, h, port,
                              switched ? "the sentinels switched the "
                                         "primary (a failover)"
                                       : "named by the sentinels");
}

/* ---- the connection ------------------------------------------------------ */

static void on_s_timer(redlock__timer *t);

static void s_backoff(redlock__sentinel *s) {
  redlock__node_env *env = s->env;
  int64_t delay;
  redlock__conn_close(&s->conn);
  if (s->closing)
    return;
  s->next = (s->next + 1) % s->n;   /* the next sentinel */
  delay = redlock__backoff_ms(env->reconnect_min_ms, env->reconnect_max_ms,
                              s->failures, env->prng);
  s->state = S_BACKOFF;
  redlock__timer_start(&s->timer, on_s_timer, (uint64_t)delay, 0);
}

static void s_fail(redlock__sentinel *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A failure: said (while no primary is known: the data node's error),
 * then the next sentinel after a backoff. */
static void s_fail(redlock__sentinel *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->errstr, sizeof(s->errstr), fmt, ap);
  va_end(ap);
  if (s->node->lazy)
    redlock__strlcpy(s->node->errstr, s->errstr, sizeof(s->node->errstr));
  s->failures++;
  s_backoff(s);
}

static void on_s_timer(redlock__timer *t) {
  redlock__sentinel *s = t->data;
  if (s->state == S_CONNECTING || s->state == S_RESOLVING) {
    s_fail(s, "sentinel %s: no answer in time", s->host[s->next]);
    return;
  }
  if (s->state == S_BACKOFF) {
    s->state = S_IDLE;
    s_connect(s);
    return;
  }
  if (s->state == S_READY) {
    /* Ask again (the same sentinel): the address, in case a switch
     * message was missed, and the replicas. */
    redlock__conn_close(&s->conn);
    s->state = S_IDLE;
    s_connect(s);
  }
}

static void on_s_connected(redlock__conn *c) {
  (void)c;   /* the commands were queued at open */
}

static void on_s_reply(redlock__conn *c, const redlock__reply *r) {
  redlock__sentinel *s = c->data;
  if (s->expect > 0) {
    /* The replies come in the order sent: [AUTH], address, REPLICAS,
     * SUBSCRIBE. */
    s->expect--;
    if (s->expect == 1) {
      /* The replicas: one entry per replica the sentinel knows, down ones
       * too. Refused (an older sentinel, an ACL): the count stays what it
       * was, unknown at first, and the group is not counted (node.c). */
      if (r->type == REDLOCK__R_ARRAY && r->elements <= 1000000 &&
          (int)r->elements > s->node->replicas_known)
        s->node->replicas_known = (int)r->elements;
      return;
    }
    if (r->type == REDLOCK__R_ERROR) {
      char why[200];
      snprintf(why, sizeof(why), "%.150s", r->str);
      s_fail(s, "the sentinels answered: %s", why);
      return;
    }
    if (s->expect == 2) {
      /* The address: [ip, port], or nil for a name they do not know. */
      if (r->type == REDLOCK__R_ARRAY && r->elements == 2 &&
          r->element[0] != NULL && r->element[1] != NULL &&
          r->element[0]->type == REDLOCK__R_STRING &&
          r->element[1]->type == REDLOCK__R_STRING) {
        point(s, r->element[0]->str, r->element[0]->len,
              atoi(r->element[1]->str), 0);
      } else if (r->type == REDLOCK__R_NIL) {
        s_fail(s, "the sentinels know no primary named \"%s\"", s->name);
        return;
      }
      return;
    }
    if (s->expect == 0) {
      /* SUBSCRIBE confirmed: switches come as messages from now on. */
      s->state = S_READY;
      s->failures = 0;
      redlock__timer_start(&s->timer, on_s_timer, REASK_MS, 0);
    }
    return;   /* AUTH's +OK */
  }
  /* ["message", "+switch-master", "NAME oldip oldport newip newport"] */
  if (r->type == REDLOCK__R_ARRAY && r->elements == 3 &&
      redlock__reply_is(r->element[0], "message") &&
      redlock__reply_is(r->element[1], "+switch-master") &&
      r->element[2] != NULL && r->element[2]->type == REDLOCK__R_STRING) {
    const char *p = r->element[2]->str;
    const char *f[5];
    size_t fl[5];
    unsigned k = 0;
    while (*p != '\0' && k < 5) {
      const char *sp = strchr(p, ' ');
      f[k] = p;
      fl[k] = sp != NULL ? (size_t)(sp - p) : strlen(p);
      k++;
      p += fl[k - 1];
      while (*p == ' ')
        p++;
    }
    if (k == 5 && fl[0] == s->name_len && memcmp(f[0], s->name, fl[0]) == 0)
      point(s, f[3], fl[3], atoi(f[4]), 1);
  }
}

static void on_s_failed(redlock__conn *c, int err, const char *msg) {
  redlock__sentinel *s = c->data;
  char why[160];
  (void)err;
  snprintf(why, sizeof(why), "%s", msg);
  s_fail(s, "sentinel connection failed: %s", why);
}

static const redlock__conn_cbs s_cbs = {on_s_connected, on_s_reply,
                                        on_s_failed, NULL};

static void s_open(redlock__sentinel *s) {
  redlock__node_env *env = s->env;
  const char *argv[3];
  size_t lens[3];
  char err[160];
  if (redlock__conn_open(&s->conn, (const struct sockaddr *)&s->addr, NULL,
                         s->tls ? env->tls : NULL, s->host[s->next], err,
                         sizeof(err)) != 0) {
    s_fail(s, "sentinel: %s", err);
    return;
  }
  s->state = S_CONNECTING;
  s->expect = 3;
  if (s->pass != NULL) {
    int argc = 0;
    argv[argc] = "AUTH";
    lens[argc++] = 4;
    if (s->user != NULL) {
      argv[argc] = s->user;
      lens[argc++] = strlen(s->user);
    }
    argv[argc] = s->pass;
    lens[argc++] = strlen(s->pass);
    (void)redlock__conn_send(&s->conn, argc, argv, lens);
    s->expect = 4;
  }
  argv[0] = "SENTINEL";
  lens[0] = 8;
  argv[1] = "get-master-addr-by-name";
  lens[1] = 23;
  argv[2] = s->name;
  lens[2] = s->name_len;
  (void)redlock__conn_send(&s->conn, 3, argv, lens);
  argv[1] = "REPLICAS";
  lens[1] = 8;
  (void)redlock__conn_send(&s->conn, 3, argv, lens);
  argv[0] = "SUBSCRIBE";
  lens[0] = 9;
  argv[1] = "+switch-master";
  lens[1] = 14;
  (void)redlock__conn_send(&s->conn, 2, argv, lens);
  redlock__timer_start(&s->timer, on_s_timer, (uint64_t)env->connect_timeout_ms,
                 0);
}

static void on_s_resolved(redlock__resolve *req, int status,
                          const struct addrinfo *res, const char *why) {
  redlock__sgai *g = REDLOCK__CONTAINER_OF(req, redlock__sgai, req);
  redlock__sentinel *s = g->s;
  (void)why;
  redlock__free(g);
  if (s == NULL)
    return;
  s->gai = NULL;
  if (status != 0) {
    s_fail(s, "cannot resolve sentinel %s", s->host[s->next]);
    return;
  }
  redlock__addr_resolved(&s->addr, res, s->port[s->next]);
  s_open(s);
}

static void s_connect(redlock__sentinel *s) {
  const char *h = s->host[s->next];
  if (s->closing || s->state != S_IDLE)
    return;
  if (redlock__addr_literal(&s->addr, h, s->port[s->next])) {
    s_open(s);
    return;
  }
  s->gai = redlock__malloc(sizeof(*s->gai));
  if (s->gai == NULL) {
    s_fail(s, "out of memory");
    return;
  }
  s->gai->s = s;
  s->state = S_RESOLVING;
  if (redlock__sys_resolve(s->env->sys, &s->gai->req, h, on_s_resolved) !=
      0) {
    redlock__free(s->gai);
    s->gai = NULL;
    s_fail(s, "cannot resolve sentinel %s", h);
    return;
  }
  redlock__timer_start(&s->timer, on_s_timer,
                 (uint64_t)s->env->connect_timeout_ms, 0);
}

void redlock__sentinel_start(redlock__sentinel *s) {
  redlock__conn_init(&s->conn, s->env->sys, s->env->flusher, &s_cbs, s);
  redlock__timer_init(s->env->sys, &s->timer);
  s->timer.data = s;
  s->handles_open = 1;
  s_connect(s);
}

void redlock__sentinel_stale(redlock__sentinel *s) {
  if (s->closing || s->state == S_BACKOFF || s->state == S_RESOLVING ||
      s->state == S_CONNECTING)
    return;   /* an answer is on its way, or will be asked for */
  redlock__conn_close(&s->conn);
  redlock__timer_stop(&s->timer);
  s->state = S_IDLE;
  s_connect(s);
}

static void on_s_timer_closed(redlock__timer *t) {
  redlock__sentinel *s = t->data;
  s->handles_open = 0;
  if (s->on_closed != NULL)
    s->on_closed(s->closed_arg);
}

void redlock__sentinel_close(redlock__sentinel *s, void (*on_closed)(void *),
                             void *arg) {
  s->closing = 1;
  s->on_closed = on_closed;
  s->closed_arg = arg;
  redlock__conn_close(&s->conn);
  if (s->gai != NULL) {
    s->gai->s = NULL;
    redlock__resolve_cancel(&s->gai->req);
    s->gai = NULL;
  }
  s->state = S_CLOSED;
  if (s->handles_open == 0) {
    on_closed(arg);
    return;
  }
  redlock__timer_close(&s->timer, on_s_timer_closed);
}
