/* wake.c: wake-up instead of polling.
 *
 * Owns: one subscriber connection per master (conn.c, the same layer as
 * the lock connections), made when the first waiter needs it, and the
 * client's table of release channels with their waiters. Does not own:
 * the waiting locks (lock.c decides when to wait and what a wake-up does).
 *
 * Every release script publishes on "__redlock__:<key>" when it deleted
 * the key. An acquisition with opts.wake that has to wait subscribes to
 * the channel of each of its keys on every master; a message runs its
 * waiter's callback. Its retry timer stays armed as the fallback: a lost
 * message or a release by another implementation (which does not publish)
 * only costs the polling delay.
 *
 * A subscriber connection has a connect deadline (the client's connect
 * timeout, until the first SUBSCRIBE is confirmed), and is made again with
 * backoff whenever it fails or is killed while channels are wanted; every
 * wanted channel is subscribed again on the new connection. */
#include <stdio.h>
#include <string.h>

#include "wake.h"

#define CHANNEL_PREFIX "__redlock__:"
#define CHANNEL_PREFIX_LEN 12

enum { SUB_IDLE = 0, SUB_CONNECTING, SUB_READY, SUB_BACKOFF, SUB_CLOSED };

typedef struct redlock__wake_channel {
  redlock__queue link;      /* wake->channels */
  redlock__queue waiters;
  size_t len;
  char name[];              /* CHANNEL_PREFIX + key, NUL-terminated */
} redlock__wake_channel;

static void sub_connect(redlock__sub *s);

static void channel_cmd(redlock__sub *s, const char *verb,
                        const redlock__wake_channel *ch) {
  const char *argv[2];
  size_t lens[2];
  argv[0] = verb;
  lens[0] = strlen(verb);
  argv[1] = ch->name;
  lens[1] = ch->len;
  (void)redlock__conn_send(&s->conn, 2, argv, lens);
}

static int have_channels(const redlock__wake *w) {
  return !redlock__queue_empty(&w->channels);
}

/* ---- one subscriber ------------------------------------------------------ */

static void on_sub_timer(redlock__timer *t);

static void sub_backoff(redlock__sub *s) {
  redlock__node_env *env = s->w->env;
  int64_t delay;
  redlock__conn_close(&s->conn);
  if (s->w->closing || !have_channels(s->w)) {
    s->state = SUB_IDLE;
    redlock__timer_stop(&s->timer);
    return;
  }
  delay = redlock__backoff_ms(env->reconnect_min_ms, env->reconnect_max_ms,
                              s->failures, env->prng);
  s->state = SUB_BACKOFF;
  redlock__timer_start(&s->timer, on_sub_timer, (uint64_t)delay, 0);
}

static void on_sub_timer(redlock__timer *t) {
  redlock__sub *s = t->data;
  if (s->state == SUB_CONNECTING) {
    s->failures++;   /* connect deadline */
    sub_backoff(s);
  } else if (s->state == SUB_BACKOFF) {
    s->state = SUB_IDLE;
    sub_connect(s);
  }
}

static void dispatch(redlock__wake *w, const char *key, size_t keylen) {
  redlock__queue *q;
  for (q = w->channels.next; q != &w->channels; q = q->next) {
    redlock__wake_channel *ch =
        REDLOCK__CONTAINER_OF(q, redlock__wake_channel, link);
    redlock__queue *p;
    if (ch->len != keylen + CHANNEL_PREFIX_LEN ||
        memcmp(ch->name + CHANNEL_PREFIX_LEN, key, keylen) != 0)
      continue;
    w->dispatching++;
    for (p = ch->waiters.next; p != &ch->waiters;) {
      redlock__wake_waiter *wt =
          REDLOCK__CONTAINER_OF(p, redlock__wake_waiter, link);
      p = p->next;
      wt->cb(wt);
    }
    w->dispatching--;
    return;
  }
}

/* Every waiter retries: after a reconnect, messages may have been lost. */
static void wake_all(redlock__wake *w) {
  redlock__queue *q;
  w->dispatching++;
  for (q = w->channels.next; q != &w->channels; q = q->next) {
    redlock__wake_channel *ch =
        REDLOCK__CONTAINER_OF(q, redlock__wake_channel, link);
    redlock__queue *p;
    for (p = ch->waiters.next; p != &ch->waiters;) {
      redlock__wake_waiter *wt =
          REDLOCK__CONTAINER_OF(p, redlock__wake_waiter, link);
      p = p->next;
      wt->cb(wt);
    }
  }
  w->dispatching--;
}

static void on_sub_connected(redlock__conn *c) {
  (void)c;   /* AUTH and SUBSCRIBE were queued at open */
}

static void on_sub_reply(redlock__conn *c, const redlock__reply *r) {
  redlock__sub *s = c->data;
  const redlock__reply *kind;
  if (r->type == REDLOCK__R_ERROR &&
      strstr(r->str, "without any password configured") != NULL)
    return;   /* AUTH to a master without a password: harmless (node.c) */
  if (r->type == REDLOCK__R_ERROR) {
    /* AUTH refused, or SUBSCRIBE not allowed: try again later. */
    s->failures++;
    sub_backoff(s);
    return;
  }
  if (r->type != REDLOCK__R_ARRAY || r->elements < 3)
    return;   /* +OK of AUTH */
  kind = r->element[0];
  if (kind == NULL || kind->type != REDLOCK__R_STRING)
    return;
  if (strcmp(kind->str, "subscribe") == 0 && s->state == SUB_CONNECTING) {
    s->state = SUB_READY;
    s->failures = 0;
    redlock__timer_stop(&s->timer);
    if (s->ever_ready)
      wake_all(s->w);   /* a release may have gone by while we were away */
    s->ever_ready = 1;
    return;
  }
  if (strcmp(kind->str, "message") == 0 && r->element[1] != NULL &&
      r->element[1]->type == REDLOCK__R_STRING &&
      r->element[1]->len >= CHANNEL_PREFIX_LEN)
    dispatch(s->w, r->element[1]->str + CHANNEL_PREFIX_LEN,
             r->element[1]->len - CHANNEL_PREFIX_LEN);
}

static void on_sub_failed(redlock__conn *c, int err, const char *msg) {
  redlock__sub *s = c->data;
  (void)err;
  (void)msg;
  s->failures++;
  sub_backoff(s);
}

static const redlock__conn_cbs sub_cbs = {on_sub_connected, on_sub_reply,
                                          on_sub_failed, NULL};

/* Connects to the master's address and subscribes every wanted channel. */
static void sub_connect(redlock__sub *s) {
  redlock__wake *w = s->w;
  redlock__node *n = &w->nodes[s->idx];
  redlock__node_env *env = w->env;
  const char *user = n->uri.username ? n->uri.username : env->username;
  const char *pass = n->uri.password ? n->uri.password : env->password;
  char err[160];
  redlock__queue *q;
  if (s->state != SUB_IDLE || w->closing || !have_channels(w))
    return;
  if (n->uri.path == NULL && n->addr.ss_family == 0) {
    /* Not resolved yet: look again after a backoff. */
    s->failures++;
    sub_backoff(s);
    return;
  }
  if (redlock__conn_open(&s->conn,
                         n->uri.path ? NULL
                                     : (const struct sockaddr *)&n->addr,
                         n->uri.path, n->uri.tls ? env->tls : NULL,
                         n->uri.host, err, sizeof(err)) != 0) {
    s->failures++;
    sub_backoff(s);
    return;
  }
  s->state = SUB_CONNECTING;
  if (pass != NULL) {
    const char *argv[3];
    size_t lens[3];
    int argc = 0;
    argv[argc] = "AUTH";
    lens[argc++] = 4;
    if (user != NULL) {
      argv[argc] = user;
      lens[argc++] = strlen(user);
    }
    argv[argc] = pass;
    lens[argc++] = strlen(pass);
    (void)redlock__conn_send(&s->conn, argc, argv, lens);
  }
  for (q = w->channels.next; q != &w->channels; q = q->next)
    channel_cmd(s, "SUBSCRIBE",
                REDLOCK__CONTAINER_OF(q, redlock__wake_channel, link));
  redlock__timer_start(&s->timer, on_sub_timer, (uint64_t)env->connect_timeout_ms,
                 0);
}

/* ---- channels ------------------------------------------------------------ */

void redlock__wake_init(redlock__wake *w, redlock__node_env *env,
                        redlock__node *nodes, unsigned n) {
  memset(w, 0, sizeof(*w));
  w->env = env;
  w->nodes = nodes;
  w->n = n;
  redlock__queue_init(&w->channels);
}

static int subs_create(redlock__wake *w) {
  unsigned i;
  w->subs = redlock__calloc(w->n, sizeof(*w->subs));
  if (w->subs == NULL)
    return REDLOCK_ENOMEM;
  for (i = 0; i < w->n; i++) {
    redlock__sub *s = &w->subs[i];
    s->w = w;
    s->idx = i;
    redlock__conn_init(&s->conn, w->env->sys, w->env->flusher, &sub_cbs,
                       s);
    redlock__timer_init(w->env->sys, &s->timer);
    s->timer.data = s;
    w->handles_open++;
  }
  return 0;
}

static redlock__wake_channel *find_channel(redlock__wake *w, const char *key,
                                           size_t keylen) {
  redlock__queue *q;
  for (q = w->channels.next; q != &w->channels; q = q->next) {
    redlock__wake_channel *ch =
        REDLOCK__CONTAINER_OF(q, redlock__wake_channel, link);
    if (ch->len == keylen + CHANNEL_PREFIX_LEN &&
        memcmp(ch->name + CHANNEL_PREFIX_LEN, key, keylen) == 0)
      return ch;
  }
  return NULL;
}

int redlock__wake_add(redlock__wake *w, redlock__wake_waiter *wt,
                      const char *key, size_t keylen) {
  redlock__wake_channel *ch;
  unsigned i;
  if (w->closing)
    return REDLOCK_ECANCELED;
  if (w->subs == NULL && subs_create(w) != 0)
    return REDLOCK_ENOMEM;
  ch = find_channel(w, key, keylen);
  if (ch == NULL) {
    ch = redlock__malloc(sizeof(*ch) + CHANNEL_PREFIX_LEN + keylen + 1);
    if (ch == NULL)
      return REDLOCK_ENOMEM;
    redlock__queue_init(&ch->waiters);
    ch->len = CHANNEL_PREFIX_LEN + keylen;
    memcpy(ch->name, CHANNEL_PREFIX, CHANNEL_PREFIX_LEN);
    memcpy(ch->name + CHANNEL_PREFIX_LEN, key, keylen);
    ch->name[ch->len] = '\0';
    redlock__queue_insert_tail(&w->channels, &ch->link);
    for (i = 0; i < w->n; i++) {
      redlock__sub *s = &w->subs[i];
      if (s->state == SUB_CONNECTING || s->state == SUB_READY)
        channel_cmd(s, "SUBSCRIBE", ch);
      else if (s->state == SUB_IDLE)
        sub_connect(s);   /* subscribes every channel */
    }
  }
  wt->ch = ch;
  redlock__queue_insert_tail(&ch->waiters, &wt->link);
  return 0;
}

void redlock__wake_remove(redlock__wake *w, redlock__wake_waiter *wt) {
  redlock__wake_channel *ch = wt->ch;
  unsigned i;
  if (ch == NULL)
    return;
  redlock__queue_remove(&wt->link);
  wt->ch = NULL;
  if (!redlock__queue_empty(&ch->waiters) || w->dispatching)
    return;   /* (an empty channel seen while dispatching stays: cheap) */
  for (i = 0; w->subs != NULL && i < w->n; i++)
    if (w->subs[i].state == SUB_CONNECTING || w->subs[i].state == SUB_READY)
      channel_cmd(&w->subs[i], "UNSUBSCRIBE", ch);
  redlock__queue_remove(&ch->link);
  redlock__free(ch);
}

static void on_sub_timer_closed(redlock__timer *t) {
  redlock__sub *s = t->data;
  redlock__wake *w = s->w;
  if (--w->handles_open == 0 && w->on_closed != NULL)
    w->on_closed(w->arg);
}

void redlock__wake_close(redlock__wake *w, void (*on_closed)(void *),
                         void *arg) {
  unsigned i;
  w->closing = 1;
  w->on_closed = on_closed;
  w->arg = arg;
  if (w->subs == NULL || w->handles_open == 0) {
    on_closed(arg);
    return;
  }
  for (i = 0; i < w->n; i++) {
    redlock__sub *s = &w->subs[i];
    redlock__conn_close(&s->conn);
    s->state = SUB_CLOSED;
    redlock__timer_close(&s->timer, on_sub_timer_closed);
  }
}

void redlock__wake_free(redlock__wake *w) {
  unsigned i;
  while (!redlock__queue_empty(&w->channels)) {
    redlock__queue *q = w->channels.next;
    redlock__queue_remove(q);
    redlock__free(REDLOCK__CONTAINER_OF(q, redlock__wake_channel, link));
  }
  for (i = 0; w->subs != NULL && i < w->n; i++)
    redlock__conn_free(&w->subs[i].conn);
  redlock__free(w->subs);
  w->subs = NULL;
}
