/* wake.h: wake-up instead of polling (see wake.c). */
#ifndef REDLOCK_WAKE_H
#define REDLOCK_WAKE_H

#include "common.h"
#include "conn.h"
#include "node.h"

struct redlock__wake_channel;

/* One waiter on one key's release channel. */
typedef struct redlock__wake_waiter {
  redlock__queue link;                 /* the channel's waiters */
  struct redlock__wake_channel *ch;    /* NULL when not waiting */
  void (*cb)(struct redlock__wake_waiter *w);
  void *owner;                         /* the waiter's */
} redlock__wake_waiter;

struct redlock__wake;

/* One subscriber connection per master, made on first use. */
typedef struct redlock__sub {
  struct redlock__wake *w;
  unsigned idx;
  redlock__conn conn;
  redlock__timer timer;     /* connect deadline, or reconnect backoff */
  int state;
  unsigned failures;
  int ever_ready;           /* subscribed once: later ones are reconnects */
} redlock__sub;

typedef struct redlock__wake {
  redlock__node_env *env;
  redlock__node *nodes;
  unsigned n;
  redlock__sub *subs;       /* n entries, allocated on first use */
  redlock__queue channels;
  int dispatching;
  int closing;
  unsigned handles_open;
  void (*on_closed)(void *arg);
  void *arg;
} redlock__wake;

void redlock__wake_init(redlock__wake *w, redlock__node_env *env,
                        redlock__node *nodes, unsigned n);
/* Starts waiting on key's release channel: w->cb runs on every release
 * message until redlock__wake_remove. 0 or ENOMEM. */
int redlock__wake_add(redlock__wake *w, redlock__wake_waiter *wt,
                      const char *key, size_t keylen);
void redlock__wake_remove(redlock__wake *w, redlock__wake_waiter *wt);
/* Closes the subscriber connections; on_closed(arg) runs once their
 * handles are closed (at once if there are none). */
void redlock__wake_close(redlock__wake *w, void (*on_closed)(void *),
                         void *arg);
void redlock__wake_free(redlock__wake *w);

#endif
