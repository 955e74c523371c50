/* wake.c: wake-up instead of polling.
 *
 * Owns: one subscriber connection per master, created lazily when the
 * first waiter needs it, and the client's table of channels with the
 * number of waiting acquisitions on each. Does not own: the waiting
 * locks (lock.c decides when to wait and what a wake-up does).
 *
 * Every release script publishes on "__redlock__:<key>" when it deleted
 * the key. An acquisition with opts.wake that has to wait for a retry
 * subscribes to its key's channel on every master; a message retries it at
 * once. The retry timer stays armed as the fallback: a lost message, a
 * master without a subscriber connection, or a release by another
 * implementation (which does not publish) only costs the polling delay.
 * Subscriber connections are best effort: an error drops the connection
 * and the next waiter makes a new one. */
#include <string.h>

#include <hiredis.h>
#include <async.h>

#include "common.h"

#define CHANNEL_PREFIX "__redlock__:"
#define CHANNEL_PREFIX_LEN 12

typedef struct wake_channel {
  redlock__queue link;      /* client->wake_channels */
  unsigned refs;            /* waiting acquisitions */
  size_t len;
  char name[];              /* CHANNEL_PREFIX + key, NUL-terminated */
} wake_channel;

static void on_sub_message(redisAsyncContext *ac, void *reply, void *priv) {
  redlock__sub *sub = priv;
  redisReply *r = reply;
  redisReply *ch;
  (void)ac;
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 3)
    return;
  if (r->element[0]->type != REDIS_REPLY_STRING ||
      strcmp(r->element[0]->str, "message") != 0)
    return;
  ch = r->element[1];
  if (ch->type != REDIS_REPLY_STRING || ch->len < CHANNEL_PREFIX_LEN)
    return;
  redlock__lock_wake(sub->client, ch->str + CHANNEL_PREFIX_LEN,
                     ch->len - CHANNEL_PREFIX_LEN);
}

static void sub_subscribe(redlock__sub *sub, const wake_channel *w,
                          int on) {
  if (sub->ac == NULL)
    return;
  redisAsyncCommand(sub->ac, on ? on_sub_message : NULL, on ? sub : NULL,
                    on ? "SUBSCRIBE %b" : "UNSUBSCRIBE %b", w->name,
                    w->len);
}

static void on_sub_connect(const redisAsyncContext *ac, int status) {
  redlock__sub *sub = ac->data;
  if (status != REDIS_OK && sub->ac == ac)
    sub->ac = NULL;   /* hiredis frees it */
}

static void on_sub_disconnect(const redisAsyncContext *ac, int status) {
  redlock__sub *sub = ac->data;
  (void)status;
  if (sub->ac == ac)
    sub->ac = NULL;
}

static void on_sub_auth(redisAsyncContext *ac, void *reply, void *priv) {
  (void)ac;
  (void)reply;
  (void)priv;
}

/* Connects a subscriber to the node's address and subscribes every
 * channel that has waiters. Best effort. */
static void sub_connect(redlock_client_t *c, redlock__sub *sub) {
  redlock__node *n = &c->nodes[sub->index];
  const char *user = n->uri.username ? n->uri.username : c->username;
  const char *pass = n->uri.password ? n->uri.password : c->password;
  redisAsyncContext *ac;
  redlock__queue *q;
  if (sub->ac != NULL || c->closing || n->state != REDLOCK__NODE_UP)
    return;
  ac = n->uri.path ? redisAsyncConnectUnix(n->uri.path)
                   : redisAsyncConnect(n->ip, n->uri.port);
  if (ac == NULL)
    return;
  if (ac->err != 0 || redlock__uv_attach(ac, c->loop, &c->flusher) != 0) {
    redisAsyncFree(ac);
    return;
  }
  ac->data = sub;
  sub->ac = ac;
  redisAsyncSetConnectCallback(ac, on_sub_connect);
  redisAsyncSetDisconnectCallback(ac, on_sub_disconnect);
  if (pass != NULL) {
    if (user != NULL)
      redisAsyncCommand(ac, on_sub_auth, NULL, "AUTH %s %s", user, pass);
    else
      redisAsyncCommand(ac, on_sub_auth, NULL, "AUTH %s", pass);
  }
  for (q = c->wake_channels.next; q != &c->wake_channels; q = q->next)
    sub_subscribe(sub, REDLOCK__CONTAINER_OF(q, wake_channel, link), 1);
}

static wake_channel *find_channel(redlock_client_t *c, const char *key,
                                  size_t keylen) {
  redlock__queue *q;
  for (q = c->wake_channels.next; q != &c->wake_channels; q = q->next) {
    wake_channel *w = REDLOCK__CONTAINER_OF(q, wake_channel, link);
    if (w->len == keylen + CHANNEL_PREFIX_LEN &&
        memcmp(w->name + CHANNEL_PREFIX_LEN, key, keylen) == 0)
      return w;
  }
  return NULL;
}

int redlock__wake_want(redlock_client_t *c, const char *key, size_t keylen) {
  wake_channel *w = find_channel(c, key, keylen);
  unsigned i;
  if (w != NULL) {
    w->refs++;
    return 0;
  }
  if (c->subs == NULL) {
    c->subs = redlock__calloc(c->n, sizeof(*c->subs));
    if (c->subs == NULL)
      return REDLOCK_ENOMEM;
    for (i = 0; i < c->n; i++) {
      c->subs[i].client = c;
      c->subs[i].index = i;
    }
  }
  w = redlock__malloc(sizeof(*w) + CHANNEL_PREFIX_LEN + keylen + 1);
  if (w == NULL)
    return REDLOCK_ENOMEM;
  w->refs = 1;
  w->len = CHANNEL_PREFIX_LEN + keylen;
  memcpy(w->name, CHANNEL_PREFIX, CHANNEL_PREFIX_LEN);
  memcpy(w->name + CHANNEL_PREFIX_LEN, key, keylen);
  w->name[w->len] = '\0';
  redlock__queue_insert_tail(&c->wake_channels, &w->link);
  for (i = 0; i < c->n; i++) {
    if (c->subs[i].ac == NULL)
      sub_connect(c, &c->subs[i]);   /* subscribes everything */
    else
      sub_subscribe(&c->subs[i], w, 1);
  }
  return 0;
}

void redlock__wake_done(redlock_client_t *c, const char *key,
                        size_t keylen) {
  wake_channel *w = find_channel(c, key, keylen);
  unsigned i;
  if (w == NULL || --w->refs > 0)
    return;
  for (i = 0; c->subs != NULL && i < c->n; i++)
    sub_subscribe(&c->subs[i], w, 0);
  redlock__queue_remove(&w->link);
  redlock__free(w);
}

/* From the client's close timer: not inside a hiredis callback. */
void redlock__wake_close(redlock_client_t *c) {
  unsigned i;
  for (i = 0; c->subs != NULL && i < c->n; i++) {
    redisAsyncContext *ac = c->subs[i].ac;
    if (ac != NULL) {
      c->subs[i].ac = NULL;
      redisAsyncFree(ac);
    }
  }
}

void redlock__wake_free(redlock_client_t *c) {
  while (!redlock__queue_empty(&c->wake_channels)) {
    redlock__queue *q = c->wake_channels.next;
    redlock__queue_remove(q);
    redlock__free(REDLOCK__CONTAINER_OF(q, wake_channel, link));
  }
  redlock__free(c->subs);
  c->subs = NULL;
}
