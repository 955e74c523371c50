/* master.h: a master of the quorum, whatever it is made of.
 *
 * A master votes once in every round. It is one of:
 *  - plain: one Redis server, one node;
 *  - cluster: a Redis Cluster, a node per primary in use, keys routed by
 *    their slot (cluster.c);
 *  - sentinel: the primary a sentinel group names, one node that follows
 *    the sentinels (sentinel.c).
 * The engine (round.c, batch.c, lock.c) and the client's life cycle and
 * statistics reach a master through this interface only: nothing above it
 * asks which kind it holds. A new kind is a file behind this table plus
 * its address parser (uri.c).
 *
 * Owns: the table of kinds and the dispatch. Does not own: the nodes (the
 * client's array), what a kind does (cluster.c, sentinel.c). */
#ifndef REDLOCK_MASTER_H
#define REDLOCK_MASTER_H

#include "cluster.h"
#include "common.h"
#include "node.h"
#include "sentinel.h"
#include "uri.h"

/* The most nodes a master has (a cluster's nodes). */
#define REDLOCK__MASTER_NODES REDLOCK__CLUSTER_NODES

typedef struct redlock__master redlock__master;

typedef struct redlock__master_ops {
  const char *kind;
  /* Commands over keys of several slots are one command per slot, and a
   * name that must share the lock key's slot is spelled so (slot.c). */
  int by_slot;
  /* The node that serves `slot` now. */
  redlock__node *(*route)(redlock__master *m, unsigned slot);
  /* The nodes that each keep a copy of the ttl record (their indexes in
   * the client's array): how many, at most `max`. */
  unsigned (*record_nodes)(const redlock__master *m, uint16_t *out,
                           unsigned max);
  /* Its nodes in use, in order (the first node, then a cluster's other
   * primaries): their indexes in the client's array, how many. */
  unsigned (*nodes)(const redlock__master *m, unsigned *out, unsigned max);
  /* Is any of its nodes up? */
  int (*up)(const redlock__master *m);
  /* Nodes in use, and redirections followed (statistics). */
  unsigned (*used)(const redlock__master *m);
  void (*redirections)(const redlock__master *m, uint64_t *moved,
                       uint64_t *asked);
  /* The background tick (a cluster asks for its topology again). */
  void (*refresh)(redlock__master *m);
  /* Why the master has no usable node, or "". */
  const char *(*problem)(const redlock__master *m);
  /* Its nodes need the identity check of every tick (a failover behind
   * an open connection makes a new instance: client.c). */
  int identity_checks;
  /* What the guard must know of it (guard.c, DESIGN "The guard's
   * argument" 6. and 7.): a durability declaration can clear its nodes
   * (no failover can replace its data); it can hold the marks of other
   * masters' broken declarations; a node of it may be a replica (a
   * cluster's, mid-failover); what its nodes are, for messages (NULL: a
   * master of its own). */
  int declaration_clears;
  int holds_marks;
  int replica_ok;
  const char *node_is;
  /* Every node it has (in use or not): how many; *out the list of
   * their indexes, or NULL when it is the one slot `index`. */
  unsigned (*node_indexes)(const redlock__master *m, const unsigned **out);
  /* Sets up its nodes in the client's array (node `index` first,
   * then from *next_node on); takes u's strings. */
  void (*init_nodes)(redlock__master *m, redlock__node_env *env,
                     redlock__uri *u, int declared, unsigned *next_node);
  /* Starts connecting (or asking the sentinels). */
  void (*start)(redlock__master *m);
  /* Closes what it has beside its nodes: 1 when closed(arg) follows. */
  int (*close)(redlock__master *m, void (*closed)(void *), void *arg);
  /* Events of its nodes: one went down; one is not the primary. */
  void (*node_down)(redlock__master *m, redlock__node *n);
  void (*stale)(redlock__master *m);
  /* 1 while its votes must wait for its map (a cluster's, out of date
   * since a MOVED: the topology it then asks for wakes them through its
   * nodes' REDLOCK__NODE_EV_TOPOLOGY; asked again here, at most every
   * 200 ms, when none is on its way), else 0. */
  int (*map_stale)(const redlock__master *m, redlock__ns now);
} redlock__master_ops;

struct redlock__master {
  const redlock__master_ops *ops;
  unsigned index;              /* in the quorum */
  redlock__node *nodes;        /* the client's node array */
  redlock__cluster *cluster;   /* the cluster kind's */
  redlock__sentinel *sentinel; /* the sentinel kind's */
};

/* Master `index` of the kind u names (its address as parsed): the
 * kind's own state is made (the nodes are not set up yet: init_nodes).
 * 0 or ENOMEM (then redlock__master_free frees what was made). */
int redlock__master_new(redlock__master *m, unsigned index,
                        redlock__node *nodes, redlock__node_env *env,
                        const redlock__uri *u, const char *prefix,
                        size_t prefix_len);
/* Nodes that a master of u's kind needs in the client's array. */
unsigned redlock__master_node_slots(const redlock__uri *u);
void redlock__master_free(redlock__master *m);
/* The hooks the nodes call for their master's kind (a cluster node's
 * topology, redirections and seeds). */
void redlock__master_node_hooks(redlock__node_env *env);

static inline redlock__node *redlock__master_route(redlock__master *m,
                                                   unsigned slot) {
  return m->ops->route(m, slot);
}

#endif
