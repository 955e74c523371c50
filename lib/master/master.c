/* master.c: the kinds of master behind one interface (see master.h). */
#include <stdio.h>
#include <string.h>

#include "master.h"

/* ---- plain and sentinel: one node ---------------------------------------- */

static redlock__node *one_route(redlock__master *m, unsigned slot) {
  (void)slot;
  return &m->nodes[m->index];
}

static unsigned one_record_nodes(const redlock__master *m, uint16_t *out,
                                 unsigned max) {
  if (max == 0)
    return 0;
  out[0] = (uint16_t)m->index;
  return 1;
}

static unsigned one_nodes(const redlock__master *m, unsigned *out,
                          unsigned max) {
  if (max == 0)
    return 0;
  out[0] = m->index;
  return 1;
}

static int one_up(const redlock__master *m) {
  return m->nodes[m->index].state == REDLOCK__NODE_UP;
}

static unsigned one_used(const redlock__master *m) {
  (void)m;
  return 1;
}

static void no_redirections(const redlock__master *m, uint64_t *moved,
                            uint64_t *asked) {
  (void)m;
  *moved = 0;
  *asked = 0;
}

static void no_refresh(redlock__master *m) {
  (void)m;
}

static const char *plain_problem(const redlock__master *m) {
  (void)m;
  return "";
}

static const char *sentinel_problem(const redlock__master *m) {
  return m->sentinel->errstr;
}

static unsigned one_node_indexes(const redlock__master *m,
                               const unsigned **out) {
  (void)m;
  *out = NULL;
  return 1;
}

static unsigned cluster_node_indexes(const redlock__master *m,
                                   const unsigned **out) {
  *out = m->cluster->node_index;
  return m->cluster->cap;
}

static void plain_init_nodes(redlock__master *m, redlock__node_env *env,
                             redlock__uri *u, int declared,
                             unsigned *next_node) {
  (void)declared;
  (void)next_node;
  redlock__node_init(&m->nodes[m->index], env, m->index, u);
}

static void node_start(redlock__master *m) {
  redlock__node_start(&m->nodes[m->index]);
}

static int nothing_to_close(redlock__master *m, void (*closed)(void *),
                            void *arg) {
  (void)m;
  (void)closed;
  (void)arg;
  return 0;
}

static void no_node_down(redlock__master *m, redlock__node *n) {
  (void)m;
  (void)n;
}

static void no_stale(redlock__master *m) {
  (void)m;
}

static int map_fresh(const redlock__master *m, redlock__ns now) {
  (void)m;
  (void)now;
  return 0;
}

static const redlock__master_ops plain_ops = {
    .kind = "plain",
    .by_slot = 0,
    .route = one_route,
    .record_nodes = one_record_nodes,
    .nodes = one_nodes,
    .up = one_up,
    .used = one_used,
    .redirections = no_redirections,
    .refresh = no_refresh,
    .problem = plain_problem,
    .identity_checks = 0,
    .declaration_clears = 1,
    .holds_marks = 1,
    .replica_ok = 0,
    .node_is = NULL,
    .node_indexes = one_node_indexes,
    .init_nodes = plain_init_nodes,
    .start = node_start,
    .close = nothing_to_close,
    .node_down = no_node_down,
    .stale = no_stale,
    .map_stale = map_fresh,
};

/* A sentinel group: its node has no address until the sentinels name the
 * primary (lazy); it keeps the URI's credentials, db and TLS. */
static void sentinel_init_nodes(redlock__master *m, redlock__node_env *env,
                                redlock__uri *u, int declared,
                                unsigned *next_node) {
  redlock__uri data;
  redlock__node *n = &m->nodes[m->index];
  (void)declared;
  (void)next_node;
  memset(&data, 0, sizeof(data));
  data.tls = u->tls;
  data.db = u->db;
  data.username = u->username;
  data.password = u->password;
  u->username = NULL;
  u->password = NULL;
  data.display = redlock__strdup("(no primary named yet)");
  redlock__node_init(n, env, m->index, &data);
  n->primary_only = 1;
  n->peers = "the sentinels and the primary";
  n->isolation_unchecked = u->isolation_unchecked;
  n->lazy = 1;
  redlock__strlcpy(n->errstr, m->sentinel->errstr, sizeof(n->errstr));
  redlock__uri_free(u);
}

static void sentinel_start(redlock__master *m) {
  redlock__sentinel_start(m->sentinel);
}

static int sentinel_close(redlock__master *m, void (*closed)(void *),
                          void *arg) {
  redlock__sentinel_close(m->sentinel, closed, arg);
  return 1;
}

static void sentinel_stale(redlock__master *m) {
  redlock__sentinel_stale(m->sentinel);
}

static const redlock__master_ops sentinel_ops = {
    .kind = "sentinel",
    .by_slot = 0,
    .route = one_route,
    .record_nodes = one_record_nodes,
    .nodes = one_nodes,
    .up = one_up,
    .used = one_used,
    .redirections = no_redirections,
    .refresh = no_refresh,
    .problem = sentinel_problem,
    .identity_checks = 0,
    .declaration_clears = 0,
    .holds_marks = 1,
    .replica_ok = 0,
    .node_is = "sentinel group",
    .node_indexes = one_node_indexes,
    .init_nodes = sentinel_init_nodes,
    .start = sentinel_start,
    .close = sentinel_close,
    .node_down = no_node_down,
    .stale = sentinel_stale,
    .map_stale = map_fresh,
};

/* ---- cluster: a node per primary ----------------------------------------- */

static redlock__node *cluster_route(redlock__master *m, unsigned slot) {
  return redlock__cluster_route(m->cluster, slot);
}

/* Every primary in use keeps its own copy of the record. */
static unsigned cluster_record_nodes(const redlock__master *m, uint16_t *out,
                                     unsigned max) {
  const redlock__cluster *cl = m->cluster;
  unsigned k, n = 0;
  for (k = 0; k < cl->cap && n < max; k++)
    if (!m->nodes[cl->node_index[k]].lazy)
      out[n++] = (uint16_t)cl->node_index[k];
  return n;
}

static unsigned cluster_nodes(const redlock__master *m, unsigned *out,
                              unsigned max) {
  const redlock__cluster *cl = m->cluster;
  unsigned k, n = 0;
  for (k = 0; k < cl->cap && n < max; k++)
    if (!m->nodes[cl->node_index[k]].lazy || k == 0)
      out[n++] = cl->node_index[k];
  return n;
}

static int cluster_up(const redlock__master *m) {
  const redlock__cluster *cl = m->cluster;
  unsigned k;
  for (k = 0; k < cl->cap; k++)
    if (m->nodes[cl->node_index[k]].state == REDLOCK__NODE_UP)
      return 1;
  return 0;
}

static unsigned cluster_used(const redlock__master *m) {
  return redlock__cluster_used(m->cluster);
}

static void cluster_redirections(const redlock__master *m, uint64_t *moved,
                                 uint64_t *asked) {
  *moved = m->cluster->moved;
  *asked = m->cluster->asked;
}

static void cluster_refresh(redlock__master *m) {
  redlock__cluster_refresh(m->cluster);
}

static const char *cluster_problem(const redlock__master *m) {
  return m->cluster->problem;
}

/* A Redis Cluster: its first node (node `index`) starts at the first
 * seed; its other nodes wait for the topology (lazy). Each gets the
 * cluster URI's credentials and TLS. Nothing here fails but memory of the
 * credentials' copies (then a node goes without them and AUTH fails:
 * reported as any refused password). */

/* A Redis Cluster's node: MOVED/ASK are followed, it names itself. */
static void cluster_node_setup(redlock__node *n, redlock__cluster *cl) {
  n->cluster = cl;
  n->redirects = 1;
  n->peers = "the cluster's nodes";
}

static void cluster_init_nodes(redlock__master *m, redlock__node_env *env,
                               redlock__uri *u, int declared,
                               unsigned *next_node) {
  redlock__cluster *cl = m->cluster;
  unsigned k, i = m->index;
  char display[300];
  int v6 = strchr(u->host, ':') != NULL;
  cl->nodes = m->nodes;
  cl->cap = REDLOCK__CLUSTER_NODES;
  cl->node_index[0] = i;
  for (k = 1; k < cl->cap; k++) {
    redlock__uri blank;
    redlock__node *n;
    memset(&blank, 0, sizeof(blank));
    blank.tls = u->tls;
    blank.username = u->username ? redlock__strdup(u->username) : NULL;
    blank.password = u->password ? redlock__strdup(u->password) : NULL;
    cl->node_index[k] = *next_node;
    n = &m->nodes[*next_node];
    redlock__node_init(n, env, *next_node, &blank);
    n->master = i;
    cluster_node_setup(n, cl);
    n->lazy = 1;
    n->declared = declared;
    (*next_node)++;
  }
  /* The first node's own display is its address (the master's is the
   * cluster URI). */
  snprintf(display, sizeof(display), "%s%s%s:%d", v6 ? "[" : "", u->host,
           v6 ? "]" : "", u->port);
  redlock__free(u->display);
  u->display = redlock__strdup(display);
  redlock__node_init(&m->nodes[i], env, i, u);
  cluster_node_setup(&m->nodes[i], cl);
}

static void cluster_node_down(redlock__master *m, redlock__node *n) {
  redlock__cluster_node_down(m->cluster, n);
}

static int cluster_map_stale(const redlock__master *m, redlock__ns now) {
  return redlock__cluster_map_stale(m->cluster, now);
}

static const redlock__master_ops cluster_ops = {
    .kind = "cluster",
    .by_slot = 1,
    .route = cluster_route,
    .record_nodes = cluster_record_nodes,
    .nodes = cluster_nodes,
    .up = cluster_up,
    .used = cluster_used,
    .redirections = cluster_redirections,
    .refresh = cluster_refresh,
    .problem = cluster_problem,
    .identity_checks = 1,
    .declaration_clears = 0,
    .holds_marks = 0,
    .replica_ok = 1,
    .node_is = "Redis Cluster shard",
    .node_indexes = cluster_node_indexes,
    .init_nodes = cluster_init_nodes,
    .start = node_start,
    .close = nothing_to_close,
    .node_down = cluster_node_down,
    .stale = no_stale,
    .map_stale = cluster_map_stale,
};

/* ---- construction -------------------------------------------------------- */

unsigned redlock__master_node_slots(const redlock__uri *u) {
  return u->kind == REDLOCK__URI_CLUSTER ? REDLOCK__CLUSTER_NODES : 1;
}

int redlock__master_new(redlock__master *m, unsigned index,
                        redlock__node *nodes, redlock__node_env *env,
                        const redlock__uri *u, const char *prefix,
                        size_t prefix_len) {
  memset(m, 0, sizeof(*m));
  m->index = index;
  m->nodes = nodes;
  switch (u->kind) {
    case REDLOCK__URI_SENTINEL:
      m->ops = &sentinel_ops;
      m->sentinel = redlock__calloc(1, sizeof(*m->sentinel));
      if (m->sentinel == NULL ||
          redlock__sentinel_init(m->sentinel, env, &nodes[index], u) != 0)
        return REDLOCK_ENOMEM;
      return 0;
    case REDLOCK__URI_CLUSTER:
      m->ops = &cluster_ops;
      m->cluster = redlock__calloc(1, sizeof(*m->cluster));
      if (m->cluster == NULL ||
          redlock__cluster_init(m->cluster, u, prefix, prefix_len) != 0)
        return REDLOCK_ENOMEM;
      return 0;
    default:
      m->ops = &plain_ops;
      return 0;
  }
}

void redlock__master_free(redlock__master *m) {
  if (m->cluster != NULL) {
    redlock__cluster_free(m->cluster);
    redlock__free(m->cluster);
    m->cluster = NULL;
  }
  if (m->sentinel != NULL) {
    redlock__sentinel_free(m->sentinel);
    redlock__free(m->sentinel);
    m->sentinel = NULL;
  }
}



void redlock__master_node_hooks(redlock__node_env *env) {
  env->topology = redlock__cluster_topology;
  env->redirect = redlock__cluster_redirect;
  env->next_seed = redlock__cluster_next_seed;
}
