/* sentinel.h: a primary named by Redis Sentinel as one master of the
 * quorum (see sentinel.c). */
#ifndef REDLOCK_SENTINEL_H
#define REDLOCK_SENTINEL_H

#include <uv.h>

#include "common.h"
#include "conn.h"
#include "node.h"
#include "uri.h"

struct redlock__sgai;

typedef struct redlock__sentinel {
  redlock__node_env *env;
  redlock__node *node;          /* the data node: master i's only node */
  char *name;                   /* the primary's name at the sentinels */
  size_t name_len;
  char **host;                  /* the sentinels */
  int *port;
  unsigned n;
  unsigned next;                /* the one tried next */
  char *user;                   /* credentials for the sentinels */
  char *pass;
  int tls;
  redlock__conn conn;
  redlock__timer timer;         /* connect deadline, backoff, re-ask */
  struct redlock__sgai *gai;    /* name resolution in flight */
  struct sockaddr_storage addr;
  int state;
  unsigned failures;
  unsigned expect;              /* replies still expected before messages:
                                   AUTH, the address, REPLICAS,
                                   SUBSCRIBE */
  int closing;
  int handles_open;
  void (*on_closed)(void *arg);
  void *closed_arg;
  char errstr[200];             /* why no primary is known, or "" */
} redlock__sentinel;

/* Copies what it needs of uri. 0 or ENOMEM. */
int redlock__sentinel_init(redlock__sentinel *s, redlock__node_env *env,
                           redlock__node *node, const redlock__uri *uri);
/* Asks the sentinels (and keeps asking after every failure). */
void redlock__sentinel_start(redlock__sentinel *s);
/* The data node is not the primary (its handshake said role:slave, or a
 * re-check did): ask the sentinels again now. */
void redlock__sentinel_stale(redlock__sentinel *s);
/* Closes the connection and the timer; on_closed(arg) follows (at once if
 * nothing was open). */
void redlock__sentinel_close(redlock__sentinel *s, void (*on_closed)(void *),
                             void *arg);
void redlock__sentinel_free(redlock__sentinel *s);

#endif
