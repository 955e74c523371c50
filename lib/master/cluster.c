/* cluster.c: a Redis Cluster as one master of the quorum.
 *
 * Owns: the cluster's slot map (slot -> node), which nodes of the
 * client serve which primary, the topology (read at every node's
 * handshake, after a redirection, and every few seconds), and following
 * MOVED and ASK. Does not own: connections (node.c), votes (round.c), or
 * what a failover means for safety (guard.c).
 *
 * Each master of the quorum is a set of nodes. A plain master is one node;
 * a cluster is every primary that serves slots, each a node of its own
 * with its own handshake, wire order, kept releases and deadlines
 * (node.c), made when the topology names it and started at once (the
 * restart guard needs each primary's identity and clock before a vote of
 * it counts, and every primary keeps its own copy of the records). The
 * client's node array has REDLOCK__CLUSTER_NODES slots per cluster; a node
 * slot is matched to a primary by its node id (CLUSTER MYID), or by
 * address before its first handshake.
 *
 * Routing: a command goes to the node the map names for its slot; until
 * the map is known, to the first node. A node's handshake begins with
 * CLUSTER MYID and CLUSTER SHARDS (CLUSTER SLOTS before 7.0): that reply
 * is applied to the map, and the handshake goes on only on a primary that
 * serves slots (its record keys are tagged to the first of them); a node
 * that is not one is pointed at a primary that no node has yet, or
 * idled.
 *
 * Redirections: MOVED updates the map for that slot, asks for the whole
 * topology, and the command goes to the named node with the same
 * callback, flags and deadline (node.c, redlock__node_resend); ASK sends
 * ASKING and the command there without touching the map. At most two
 * redirections per command (a MOVED then an ASK during a migration); then
 * the error is the answer. A redirected command replaces the original:
 * its callback runs once, with the reply of the node that answered, so a
 * vote never counts twice. Order: a node answers in order, so commands it
 * redirects reach the target in the order it received them; a release of
 * a key routed after its SET went to the new node (the map learnt it
 * from the SET's MOVED), or is redirected behind it.
 *
 * Commands on a node's own records (REDLOCK__REQ_HERE) are never
 * redirected: a MOVED there means the node no longer serves the slot of
 * its tag, and the next topology gives it another. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

#define MAX_PRIMARIES 256   /* read from one topology */
#define MAX_HOPS 2

/* Copies (the reply's memory goes when a node is repointed). */
typedef struct primary {
  char id[41];
  size_t idlen;
  char host[256];
  size_t hostlen;
  int port;
  int node;            /* the node's index in cl->node_index, or -1 */
  unsigned first;      /* its lowest slot */
  unsigned n_slots;
} primary;

static redlock__node *cluster_node(redlock__cluster *cl, unsigned k) {
  return &cl->nodes[cl->node_index[k]];
}

int redlock__cluster_init(redlock__cluster *cl, const redlock__uri *uri,
                          const char *prefix, size_t prefix_len) {
  unsigned i;
  cl->prefix = prefix;
  cl->prefix_len = prefix_len;
  for (i = 0; i < REDLOCK__SLOTS; i++)
    cl->map[i] = REDLOCK__NO_NODE;
  cl->n_seeds = 1 + uri->n_extra;
  cl->seed_host = redlock__calloc(cl->n_seeds, sizeof(*cl->seed_host));
  cl->seed_port = redlock__calloc(cl->n_seeds, sizeof(*cl->seed_port));
  if (cl->seed_host == NULL || cl->seed_port == NULL)
    return REDLOCK_ENOMEM;
  for (i = 0; i < cl->n_seeds; i++) {
    const char *h = i == 0 ? uri->host : uri->extra[i - 1].host;
    cl->seed_host[i] = redlock__strdup(h);
    cl->seed_port[i] = i == 0 ? uri->port : uri->extra[i - 1].port;
    if (cl->seed_host[i] == NULL)
      return REDLOCK_ENOMEM;
  }
  return 0;
}

void redlock__cluster_free(redlock__cluster *cl) {
  unsigned i;
  for (i = 0; cl->seed_host != NULL && i < cl->n_seeds; i++)
    redlock__free(cl->seed_host[i]);
  redlock__free(cl->seed_host);
  redlock__free(cl->seed_port);
  cl->seed_host = NULL;
  cl->seed_port = NULL;
}

redlock__node *redlock__cluster_route(redlock__cluster *cl, unsigned slot) {
  uint16_t k = cl->map[slot & (REDLOCK__SLOTS - 1)];
  return k != REDLOCK__NO_NODE ? &cl->nodes[k] : cluster_node(cl, 0);
}

unsigned redlock__cluster_used(const redlock__cluster *cl) {
  unsigned k, used = 0;
  for (k = 0; k < cl->cap; k++)
    used += !cl->nodes[cl->node_index[k]].lazy;
  return used;
}

/* ---- reading a topology -------------------------------------------------- */

static const redlock__reply *field(const redlock__reply *m, const char *name) {
  size_t i;
  if (m == NULL || m->type != REDLOCK__R_ARRAY)
    return NULL;
  for (i = 0; i + 1 < m->elements; i += 2)
    if (redlock__reply_is(m->element[i], name))
      return m->element[i + 1];
  return NULL;
}

static int64_t int_of(const redlock__reply *e) {
  if (e == NULL)
    return -1;
  if (e->type == REDLOCK__R_INTEGER)
    return e->integer;
  if (e->type == REDLOCK__R_STRING && e->len > 0 && e->len < 12) {
    int64_t v = 0;
    size_t i;
    for (i = 0; i < e->len; i++) {
      if (e->str[i] < '0' || e->str[i] > '9')
        return -1;
      v = v * 10 + (e->str[i] - '0');
    }
    return v;
  }
  return -1;
}

/* Marks slots lo..hi as primary p's in tmp; 0, or -1 when out of range. */
static int take_range(uint16_t *tmp, primary *p, unsigned idx, int64_t lo,
                      int64_t hi) {
  int64_t s;
  if (lo < 0 || hi < lo || hi >= REDLOCK__SLOTS)
    return -1;
  for (s = lo; s <= hi; s++)
    tmp[s] = (uint16_t)idx;
  if (p->n_slots == 0 || (unsigned)lo < p->first)
    p->first = (unsigned)lo;
  p->n_slots += (unsigned)(hi - lo + 1);
  return 0;
}

/* The host a node names: "" or "?" (unknown endpoint) means the host we
 * asked (the address we reached it on). */
static int set_host(primary *p, const redlock__reply *e,
                    const redlock__node *from) {
  const char *h = from->uri.host;
  size_t len = strlen(from->uri.host);
  if (e != NULL && e->type == REDLOCK__R_STRING && e->len > 0 &&
      !(e->len == 1 && e->str[0] == '?')) {
    h = e->str;
    len = e->len;
  }
  if (len >= sizeof(p->host))
    return -1;
  memcpy(p->host, h, len);
  p->host[len] = '\0';
  p->hostlen = len;
  return 0;
}

static int set_id(primary *p, const redlock__reply *id) {
  if (id == NULL || id->type != REDLOCK__R_STRING || id->len > 40)
    return -1;
  memcpy(p->id, id->str, id->len);
  p->id[id->len] = '\0';
  p->idlen = id->len;
  return 0;
}

/* CLUSTER SHARDS: [{slots: [lo, hi, ...], nodes: [{id, port, tls-port,
 * ip, endpoint, role, health, ...}, ...]}, ...]. */
static int parse_shards(const redlock__reply *r, const redlock__node *from,
                        int tls, primary *prim, unsigned *np,
                        uint16_t *tmp) {
  size_t i, k;
  if (r->type != REDLOCK__R_ARRAY)
    return -1;
  for (i = 0; i < r->elements; i++) {
    const redlock__reply *shard = r->element[i];
    const redlock__reply *slots = field(shard, "slots");
    const redlock__reply *nodes = field(shard, "nodes");
    primary *p;
    if (slots == NULL || nodes == NULL || slots->type != REDLOCK__R_ARRAY ||
        nodes->type != REDLOCK__R_ARRAY)
      return -1;
    if (slots->elements == 0)
      continue;   /* a shard that serves nothing */
    if (*np == MAX_PRIMARIES)
      return -2;
    p = &prim[*np];
    memset(p, 0, sizeof(*p));
    p->node = -1;
    for (k = 0; k < nodes->elements; k++) {
      const redlock__reply *nd = nodes->element[k];
      const redlock__reply *id = field(nd, "id");
      const redlock__reply *ep = field(nd, "endpoint");
      int64_t port = tls && field(nd, "tls-port") != NULL
                         ? int_of(field(nd, "tls-port"))
                         : int_of(field(nd, "port"));
      if (!redlock__reply_is(field(nd, "role"), "master"))
        continue;
      if (tls && field(nd, "tls-port") == NULL)
        return -3;   /* only plain ports: tls-cluster is off */
      if (set_id(p, id) != 0 || port <= 0 || port > 65535)
        return -1;
      p->port = (int)port;
      if (ep == NULL || (ep->len == 1 && ep->str[0] == '?'))
        ep = field(nd, "ip");
      if (set_host(p, ep, from) != 0)
        return -1;
      break;
    }
    if (p->idlen == 0)
      continue;   /* no primary in this shard now: its slots go unserved */
    for (k = 0; k + 1 < slots->elements; k += 2)
      if (take_range(tmp, p, *np, int_of(slots->element[k]),
                     int_of(slots->element[k + 1])) != 0)
        return -1;
    (*np)++;
  }
  return 0;
}

/* CLUSTER SLOTS: [[lo, hi, [ip, port, id, ...], replicas...], ...]; one
 * entry per range, so a primary may come several times. */
static int parse_slots(const redlock__reply *r, const redlock__node *from,
                       primary *prim, unsigned *np, uint16_t *tmp) {
  size_t i;
  unsigned j;
  if (r->type != REDLOCK__R_ARRAY)
    return -1;
  for (i = 0; i < r->elements; i++) {
    const redlock__reply *e = r->element[i];
    const redlock__reply *m, *id;
    int64_t port;
    primary *p = NULL;
    if (e == NULL || e->type != REDLOCK__R_ARRAY || e->elements < 3)
      return -1;
    m = e->element[2];
    if (m == NULL || m->type != REDLOCK__R_ARRAY || m->elements < 3)
      return -1;
    id = m->element[2];
    port = int_of(m->element[1]);
    if (id == NULL || id->type != REDLOCK__R_STRING || id->len > 40 ||
        port <= 0 || port > 65535)
      return -1;
    for (j = 0; j < *np; j++)
      if (prim[j].idlen == id->len && memcmp(prim[j].id, id->str, id->len) == 0)
        p = &prim[j];
    if (p == NULL) {
      if (*np == MAX_PRIMARIES)
        return -2;
      p = &prim[*np];
      memset(p, 0, sizeof(*p));
      p->node = -1;
      if (set_id(p, id) != 0 || set_host(p, m->element[0], from) != 0)
        return -1;
      p->port = (int)port;
      j = (*np)++;
    } else {
      j = (unsigned)(p - prim);
    }
    if (take_range(tmp, p, j, int_of(e->element[0]), int_of(e->element[1])) !=
        0)
      return -1;
  }
  return 0;
}

/* ---- applying a topology ------------------------------------------------- */

static int same_addr(const redlock__node *n, const primary *p) {
  return n->uri.host != NULL && n->uri.port == p->port &&
         strlen(n->uri.host) == p->hostlen &&
         memcmp(n->uri.host, p->host, p->hostlen) == 0;
}

static int same_id(const redlock__node *n, const primary *p) {
  return n->myid[0] != '\0' && strlen(n->myid) == p->idlen &&
         memcmp(n->myid, p->id, p->idlen) == 0;
}

/* A node that serves nothing any more: its connection goes, and it
 * is not made again until a topology names it. */
static void idle(redlock__cluster *cl, redlock__node *n, const char *why) {
  unsigned k;
  redlock__node *to = NULL;
  if (n->lazy)
    return;
  n->lazy = 1;
  redlock__node_idle(n, why);
  if (n->n_kept == 0)
    return;
  /* Its kept releases go to a node that serves (one that is up first):
   * a MOVED there sends each to its slot's primary. */
  for (k = 0; k < cl->cap; k++) {
    redlock__node *o = cluster_node(cl, k);
    if (o == n || o->lazy || o->uri.host == NULL)
      continue;
    if (to == NULL || (o->state == REDLOCK__NODE_UP &&
                       to->state != REDLOCK__NODE_UP))
      to = o;
  }
  if (to != NULL)
    redlock__node_pass_kept(n, to);
}

/* Applies a topology read from node `from`; the verdict for `from`. */
static redlock__topo apply(redlock__cluster *cl, redlock__node *from,
                           int handshake, primary *prim, unsigned np,
                           const uint16_t *tmp) {
  int assigned[REDLOCK__CLUSTER_NODES];
  unsigned k, j, s, covered = 0;
  redlock__topo verdict = REDLOCK__TOPO_MOVED;
  char host[256];
  for (k = 0; k < cl->cap; k++)
    assigned[k] = -1;
  /* Match nodes to primaries: by node id, then by address. */
  for (j = 0; j < np; j++)
    for (k = 0; k < cl->cap && prim[j].node < 0; k++)
      if (assigned[k] < 0 && same_id(cluster_node(cl, k), &prim[j])) {
        prim[j].node = (int)k;
        assigned[k] = (int)j;
      }
  for (j = 0; j < np; j++)
    for (k = 0; k < cl->cap && prim[j].node < 0; k++)
      if (assigned[k] < 0 && cluster_node(cl, k)->myid[0] == '\0' &&
          same_addr(cluster_node(cl, k), &prim[j])) {
        prim[j].node = (int)k;
        assigned[k] = (int)j;
      }
  /* The others get a free node: the first node's if it has none
   * (it should serve, not idle), then ones never used, then idle ones. */
  for (j = 0; j < np; j++) {
    int pick = -1;
    if (prim[j].node >= 0)
      continue;
    if (assigned[0] < 0)
      pick = 0;
    for (k = 1; k < cl->cap && pick < 0; k++)
      if (assigned[k] < 0 && cluster_node(cl, k)->uri.host == NULL)
        pick = (int)k;
    for (k = 1; k < cl->cap && pick < 0; k++)
      if (assigned[k] < 0)
        pick = (int)k;
    if (pick < 0) {
      snprintf(cl->problem, sizeof(cl->problem),
               "more than %d primaries: the slots of the others are reached "
               "by redirection only", REDLOCK__CLUSTER_NODES);
      continue;
    }
    prim[j].node = pick;
    assigned[pick] = (int)j;
  }
  /* The map. */
  for (s = 0; s < REDLOCK__SLOTS; s++) {
    uint16_t v = REDLOCK__NO_NODE;
    if (tmp[s] != REDLOCK__NO_NODE && prim[tmp[s]].node >= 0) {
      v = (uint16_t)cl->node_index[prim[tmp[s]].node];
      covered++;
    }
    cl->map[s] = v;
  }
  cl->have_map = 1;
  if (covered < REDLOCK__SLOTS)
    snprintf(cl->problem, sizeof(cl->problem),
             "%u of 16384 slots have no primary (cluster down, or being "
             "failed over)", REDLOCK__SLOTS - covered);
  else if (np <= REDLOCK__CLUSTER_NODES)
    cl->problem[0] = '\0';
  /* Nodes follow: pointed at their primary, tagged, or idled. */
  for (k = 0; k < cl->cap; k++) {
    redlock__node *n = cluster_node(cl, k);
    primary *p;
    if (assigned[k] < 0) {
      idle(cl, n, "no longer a primary that serves slots of the cluster");
      continue;
    }
    p = &prim[assigned[k]];
    snprintf(host, sizeof(host), "%.*s", (int)p->hostlen, p->host);
    if (!same_addr(n, p)) {
      (void)redlock__node_repoint(n, host, p->port,
                                  "the cluster's topology names another "
                                  "primary for this node");
      continue;   /* its handshake tags it */
    }
    if (n == from && handshake) {
      if (redlock__node_set_tag(n, cl->prefix, cl->prefix_len, p->first) !=
          0) {
        snprintf(n->errstr, sizeof(n->errstr), "out of memory");
        verdict = REDLOCK__TOPO_FAIL;
      } else {
        verdict = REDLOCK__TOPO_SERVE;
      }
      continue;
    }
    if (n->lazy) {
      /* Named again (or for the first time) at its old address. */
      (void)redlock__node_repoint(n, host, p->port, "serves slots again");
      continue;
    }
    if (n->state == REDLOCK__NODE_UP &&
        cl->map[n->tag_slot] != cl->node_index[k]) {
      /* Its records' slot went elsewhere: a new tag, read afresh. */
      (void)redlock__node_repoint(n, host, p->port,
                                  "the slot of its records moved");
    }
  }
  return verdict;
}

/* Parses and applies a topology reply read from `from`. */
static redlock__topo topology(redlock__cluster *cl, redlock__node *from,
                              int handshake, const redlock__reply *r,
                              int slots) {
  primary *prim = redlock__malloc(MAX_PRIMARIES * sizeof(*prim));
  uint16_t *tmp = redlock__malloc(REDLOCK__SLOTS * sizeof(*tmp));
  unsigned np = 0, s;
  int rc;
  redlock__topo v;
  if (prim == NULL || tmp == NULL) {
    redlock__free(prim);
    redlock__free(tmp);
    snprintf(from->errstr, sizeof(from->errstr), "out of memory");
    return REDLOCK__TOPO_FAIL;
  }
  for (s = 0; s < REDLOCK__SLOTS; s++)
    tmp[s] = REDLOCK__NO_NODE;
  rc = slots ? parse_slots(r, from, prim, &np, tmp)
             : parse_shards(r, from, from->uri.tls, prim, &np, tmp);
  if (rc != 0 || np == 0) {
    snprintf(from->errstr, sizeof(from->errstr), "%s",
             rc == -3 ? "CLUSTER SHARDS names no TLS port: a cluster "
                        "reached over TLS needs tls-cluster yes on its "
                        "nodes (or use redis+cluster://)"
             : rc == -2 ? "CLUSTER SHARDS: more than 256 primaries"
             : rc != 0 ? (slots ? "CLUSTER SLOTS: unexpected reply"
                                : "CLUSTER SHARDS: unexpected reply")
                       : "the cluster has no primary that serves slots");
    redlock__free(prim);
    redlock__free(tmp);
    return REDLOCK__TOPO_FAIL;
  }
  v = apply(cl, from, handshake, prim, np, tmp);
  redlock__free(prim);
  redlock__free(tmp);
  return v;
}

redlock__topo redlock__cluster_topology(redlock__node *n,
                                        const redlock__reply *r, int slots) {
  if (r->type == REDLOCK__R_ERROR) {
    snprintf(n->errstr, sizeof(n->errstr), "%s: %s (is it a Redis Cluster "
             "node? use redis:// for a plain master)",
             slots ? "CLUSTER SLOTS" : "CLUSTER SHARDS", r->str);
    return REDLOCK__TOPO_FAIL;
  }
  return topology(n->cluster, n, 1, r, slots);
}

/* ---- refreshing ---------------------------------------------------------- */

static void on_refresh_reply(redlock__req *req, const redlock__reply *r,
                             int error, const char *errstr) {
  redlock__cluster *cl = req->owner;
  (void)error;
  (void)errstr;
  redlock__node *n = req->node;
  cl->refreshing = 0;
  if (r != NULL && r->type != REDLOCK__R_ERROR &&
      topology(cl, n, 0, r, 0) != REDLOCK__TOPO_FAIL)   /* SHARDS */
    cl->mapped_ns = cl->refresh_ns;
  if (cl->refresh_again) {
    cl->refresh_again = 0;
    redlock__cluster_refresh(cl);
  }
  /* A vote that waits for the map a MOVED made stale (guard.c, 7.):
   * this one, or the failure to get one. */
  if (cl->moved_ns != 0 && !cl->refreshing)
    n->env->on_state(n, REDLOCK__NODE_EV_TOPOLOGY, n->env->arg);
}

void redlock__cluster_refresh(redlock__cluster *cl) {
  static const char *const argv[2] = {"CLUSTER", "SHARDS"};
  static const size_t lens[2] = {7, 6};
  unsigned k;
  if (cl->refreshing) {
    cl->refresh_again = 1;
    return;
  }
  for (k = 0; k < cl->cap; k++) {
    redlock__node *n = cluster_node(cl, k);
    redlock__req *req;
    if (n->state != REDLOCK__NODE_UP)
      continue;
    req = redlock__node_req(n);
    if (req == NULL)
      return;
    req->cb = on_refresh_reply;
    req->owner = cl;
    req->flags = REDLOCK__REQ_INTERNAL | REDLOCK__REQ_HERE;
    if (redlock__node_submit(n, req, 2, argv, lens) == 0) {
      cl->refreshing = 1;
      cl->refresh_ns = redlock__sys_now(n->env->sys);
    }
    return;
  }
}

#define REFRESH_MIN_NS (200 * REDLOCK__NS_PER_MS)

int redlock__cluster_map_stale(redlock__cluster *cl, redlock__ns now) {
  if (cl->moved_ns <= cl->mapped_ns)
    return 0;
  if (!cl->refreshing && now - cl->refresh_ns >= REFRESH_MIN_NS)
    redlock__cluster_refresh(cl);
  return 1;
}

void redlock__cluster_node_down(redlock__cluster *cl, redlock__node *n) {
  if (cl->have_map && !n->lazy &&
      redlock__sys_now(n->env->sys) - cl->refresh_ns >= REFRESH_MIN_NS) {
    /* A primary failed: another may be taking over its slots (a
     * failover). Ask the others, at most every 200 ms. */
    redlock__cluster_refresh(cl);
    return;
  }
  if (n != cluster_node(cl, 0) || cl->have_map || cl->n_seeds < 2)
    return;
  /* No topology yet and every seed failed this round: the next round
   * starts at the node's own backoff. */
  cl->next_seed = (cl->next_seed + 1) % cl->n_seeds;
  cl->seed_tries = 0;
  (void)redlock__node_set_address(n, cl->seed_host[cl->next_seed],
                                  cl->seed_port[cl->next_seed]);
}

int redlock__cluster_next_seed(redlock__node *n) {
  redlock__cluster *cl = n->cluster;
  if (cl == NULL || n != cluster_node(cl, 0) || cl->have_map ||
      cl->seed_tries + 1 >= cl->n_seeds)
    return 0;
  /* The seed failed: try the next one at once (requests keep waiting). */
  cl->seed_tries++;
  cl->next_seed = (cl->next_seed + 1) % cl->n_seeds;
  n->state = REDLOCK__NODE_DOWN;
  if (redlock__node_set_address(n, cl->seed_host[cl->next_seed],
                                cl->seed_port[cl->next_seed]) != 0)
    return 0;
  return 1;
}

/* ---- redirections -------------------------------------------------------- */

/* The node for host:port (a known one, or a free one pointed
 * there), or NULL. */
static redlock__node *node_for(redlock__cluster *cl, const char *host,
                               size_t hostlen, int port) {
  primary p;
  unsigned k;
  char h[256];
  memset(&p, 0, sizeof(p));
  if (hostlen >= sizeof(p.host))
    return NULL;
  memcpy(p.host, host, hostlen);
  p.hostlen = hostlen;
  p.port = port;
  for (k = 0; k < cl->cap; k++)
    if (same_addr(cluster_node(cl, k), &p) && !cluster_node(cl, k)->lazy)
      return cluster_node(cl, k);
  for (k = 0; k < cl->cap; k++)
    if (same_addr(cluster_node(cl, k), &p))
      break;
  if (k == cl->cap)
    for (k = 1; k < cl->cap; k++)
      if (cluster_node(cl, k)->lazy)
        break;
  if (k == cl->cap)
    return NULL;
  snprintf(h, sizeof(h), "%.*s", (int)hostlen, host);
  if (redlock__node_repoint(cluster_node(cl, k), h, port,
                            "named by a redirection") != 0)
    return NULL;
  return cluster_node(cl, k);
}

int redlock__cluster_redirect(redlock__node *n, redlock__req *req,
                              const redlock__reply *r) {
  redlock__cluster *cl = n->cluster;
  int asking = r->str[0] == 'A';
  const char *p = r->str + (asking ? 4 : 6);
  const char *sp, *colon;
  unsigned long slot;
  char *end;
  long port;
  redlock__node *to;
  slot = strtoul(p, &end, 10);
  if (end == p || *end != ' ' || slot >= REDLOCK__SLOTS)
    return 0;
  sp = end + 1;
  colon = strrchr(sp, ':');
  if (colon == NULL)
    return 0;
  port = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || port <= 0 || port > 65535)
    return 0;
  if (!asking) {
    cl->moved_ns = redlock__sys_now(n->env->sys);
    redlock__cluster_refresh(cl);   /* the map is out of date */
  }
  if ((req->flags & REDLOCK__REQ_HERE) || req->hops >= MAX_HOPS)
    return 0;   /* the error is the answer */
  if (colon == sp)
    to = node_for(cl, n->uri.host, strlen(n->uri.host), (int)port);
  else
    to = node_for(cl, sp, (size_t)(colon - sp), (int)port);
  if (to == NULL)
    return 0;
  if (asking) {
    cl->asked++;
  } else {
    cl->moved++;
    cl->map[slot] = (uint16_t)to->index;
  }
  return redlock__node_resend(to, req, asking) == 0;
}
