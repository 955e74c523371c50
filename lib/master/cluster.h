/* cluster.h: a Redis Cluster as one master of the quorum (see cluster.c). */
#ifndef REDLOCK_CLUSTER_H
#define REDLOCK_CLUSTER_H

#include "common.h"
#include "node.h"
#include "pure.h"

#define REDLOCK__CLUSTER_NODES 32   /* nodes per cluster: at most this
                                       many primaries are used at once */
#define REDLOCK__NO_NODE 0xffff

typedef struct redlock__cluster {
  redlock__node *nodes;        /* the client's node array */
  unsigned node_index[REDLOCK__CLUSTER_NODES];   /* its nodes (indexes
                                                 in nodes): [0] = master */
  unsigned cap;
  const char *prefix;          /* the client's key prefix */
  size_t prefix_len;
  uint16_t map[REDLOCK__SLOTS];   /* slot -> node index, or NO_NODE */
  int have_map;
  int refreshing;              /* a CLUSTER SHARDS is on the wire */
  int refresh_again;
  redlock__ns refresh_ns;      /* when the last one was asked */
  redlock__ns moved_ns;        /* when a MOVED last said the map is out
                                  of date */
  redlock__ns mapped_ns;       /* when the last topology that came was
                                  asked (a refresh's) */
  /* The seeds (the URI's host:port and its ?seed= options): the first
   * node tries them in turn until a topology came. */
  char **seed_host;
  int *seed_port;
  unsigned n_seeds;
  unsigned next_seed;
  unsigned seed_tries;         /* seeds tried in a row this round */
  uint64_t moved, asked;       /* redirections followed */
  char problem[200];           /* the latest topology problem, or "" */
} redlock__cluster;

/* cl->nodes, cap and node_index must be set; the URI's seeds are
 * copied. 0 or ENOMEM. */
int redlock__cluster_init(redlock__cluster *cl, const redlock__uri *uri,
                          const char *prefix, size_t prefix_len);
void redlock__cluster_free(redlock__cluster *cl);
/* 1 while a MOVED has made the map out of date and no topology asked
 * since came (the ops' map_stale: master.h); asks for one when none is
 * on its way, at most every 200 ms. */
int redlock__cluster_map_stale(redlock__cluster *cl, redlock__ns now);

/* The node that serves `slot` now: the map's, or the first node while the
 * map does not know (a MOVED then teaches it). */
redlock__node *redlock__cluster_route(redlock__cluster *cl, unsigned slot);
/* The node hooks (node.h). */
redlock__topo redlock__cluster_topology(redlock__node *n,
                                        const redlock__reply *r, int slots);
int redlock__cluster_redirect(redlock__node *n, redlock__req *req,
                              const redlock__reply *r);
/* The first node failed before any topology: 1 when it now points at the
 * next seed, to try at once (node.c keeps its waiting requests). */
int redlock__cluster_next_seed(redlock__node *n);
/* A node of the cluster went down (its connection failed). */
void redlock__cluster_node_down(redlock__cluster *cl, redlock__node *n);
/* Asks a connected node for the topology (at most one on the wire). */
void redlock__cluster_refresh(redlock__cluster *cl);
/* Nodes of the cluster in use (serving slots or connecting). */
unsigned redlock__cluster_used(const redlock__cluster *cl);

#endif
