/* world.h: the simulated world of redlock-sim (issue 31).
 *
 * One thread, one virtual clock (true time, in ns), one seeded random
 * source and one queue of events. In it: clients, each the real library
 * over a seam of ours (lib/sys/sys.h: its own clock with a drift rate,
 * timers, random bytes from the world's source, and a transport whose
 * connections are links to simulated servers), and simulated Redis
 * servers (kv.h for their data) with wall clocks that drift and step,
 * persistence models, crashes, restarts and pauses. Links between them
 * carry bytes with a delay, in order, and can be cut one way or both
 * (bytes held until the cut heals, as TCP retransmits, or dropped with
 * the connection reset).
 *
 * Owns: the event queue, true time, randomness, the trace hash, the seam
 * implementation, links and servers. Does not own: what the clients do
 * (sim.c's workloads), when faults happen (sim.c's schedule), what counts
 * as a violation (sim.c's oracle).
 *
 * Invariants
 *  1. Same seed and same calls, same run: nothing reads the OS clock or
 *     randomness; events at the same time run in the order they were
 *     queued (a sequence number breaks ties).
 *  2. A link delivers each direction's bytes in the order they were
 *     written, never before their delay, never after the connection was
 *     closed or reset (a closed client connection receives nothing).
 *  3. A paused process (client or server) runs nothing: its events wait
 *     for the pause's end, in order; bytes to a paused server queue.
 *  4. A cluster node serves a slot only when the configuration it
 *     believes says it is the slot's owner (or it imports the slot and
 *     the client asked): beliefs lag (gossip) and can be bent (a fault),
 *     but a node never comes to believe it owns a slot it was not given,
 *     so two nodes serve one slot only while a node that was failed over
 *     has not heard of it yet (stopped or restarting meanwhile; as in
 *     Redis).
 *
 * Redis Cluster (the cluster section of world.c). A cluster is servers
 * first..first + n - 1 of the world: primaries, each with at most one
 * replica. Configurations (who owns which slot, who replicates whom,
 * who is marked failed, an epoch) are made by the cluster's events and
 * reach each node after a gossip delay; each node routes by its own
 * (MOVED, ASK and TRYAGAIN during a migration, CLUSTERDOWN), answers
 * CLUSTER MYID, SHARDS (Redis 7.0's reply; a 6.2 cluster answers only
 * CLUSTER SLOTS) and SLOTS from it, and says its role and replication id
 * in INFO. Replication is asynchronous: a primary's keys reach its
 * replicas in batches, a few ms (now and then a second) behind; a full
 * sync copies them all when a node becomes a replica or restarts. A
 * primary that nobody could reach for the node timeout is marked failed
 * (the cluster is down while a slot has no live primary) and, when it
 * has a synced replica, that replica is elected primary 0.5-1 s later
 * with what it had: writes not replicated yet are lost. Not modelled:
 * the cluster bus's own partitions (cuts are between clients and
 * servers), replica migration, epochs' collisions, CLUSTER NODES. */
#ifndef REDLOCK_SIM_WORLD_H
#define REDLOCK_SIM_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "conn.h"
#include "kv.h"
#include "sys.h"

#define SIM_MS 1000000ULL          /* ns */
#define SIM_S 1000000000ULL

typedef struct simworld simworld;
typedef struct simsrv simsrv;
typedef struct simenv simenv;
typedef struct simlink simlink;
typedef struct simcl simcl;
typedef struct simclcfg simclcfg;   /* a cluster's configuration (world.c) */
typedef struct simsg simsg;

#define SIM_SLOTS 16384
#define SIM_CL_NODES 6     /* nodes of one cluster at most */
#define SIM_MAX_CLUSTERS 16
#define SIM_SG_NODES 4     /* data nodes of a sentinel group at most */
#define SIM_SG_SENTINELS 3 /* its sentinels */
#define SIM_MAX_GROUPS 8

/* How a server keeps its data across a restart: follows its config
 * (appendonly, appendfsync) at the moment it crashes, as Redis does. */
typedef enum {
  SIM_LOSE_ALL = 0,      /* appendonly no, no snapshot: empty */
  SIM_LOSE_SNAPSHOT,     /* appendonly no: the last RDB snapshot */
  SIM_LOSE_SECOND,       /* appendfsync everysec/no: the last fsync */
  SIM_LOSE_NOTHING       /* appendfsync always */
} sim_loss;

/* A server: one redis-server process over its life (restarts keep the
 * port and the object). */
struct simsrv {
  simworld *w;
  unsigned index;
  int port;
  simkv *kv;
  simkv *rdb;             /* the last snapshot (BGSAVE), or NULL */
  simkv *fsynced;         /* the AOF's state at the last fsync (everysec) */
  int up;                 /* running (accepting) */
  uint64_t paused_until;  /* SIGSTOP: runs nothing before (true ns) */
  unsigned incarnation;   /* bumped by every crash */
  char run_id[41];
  uint64_t started_ns;    /* true time of the last start */
  /* Its wall clock: wall_us = wall_base_us + (now - wall_ref) * rate. */
  int64_t wall_base_us;
  uint64_t wall_ref_ns;
  double wall_rate;
  simkv_info info;
  char replid[41];
  simlink *conns;         /* its accepted connections (list) */
  uint64_t commands;      /* executed */
  uint64_t writes;
  uint64_t data_ns;       /* true time its data began: its start, or a
                             promotion or a full sync since */
  /* A node of a Redis Cluster (cl NULL: a plain master). */
  simcl *cl;
  unsigned node;          /* its index in cl */
  char node_id[41];       /* CLUSTER MYID (nodes.conf: kept by restarts) */
  simclcfg *view;         /* the configuration it believes */
  int bent;               /* view is a fault's (sim_cluster_bend) */
  unsigned bend_gen;
  int synced;             /* a replica: holds a copy of its primary */
  unsigned sync_gen;
  int repl_armed;         /* a primary: a replication batch is queued */
  int64_t second_offset;  /* INFO's second_repl_offset (-1: never
                             promoted in this life) */
  uint64_t gone_ns;       /* others cannot reach it (down, stopped) since,
                             or 0 */
  unsigned gone_gen;
  uint64_t demoted_ns;    /* when it last became a replica (0: never) */
  int mig;                /* a slot migration: 0, SIM_MIG_OUT, SIM_MIG_IN */
  unsigned mig_lo, mig_hi, mig_peer;
  /* A member of a sentinel group (sg NULL: none): a data node (node is
   * its index in the group) or one of its sentinels (sentinel set, node
   * its index among them). */
  simsg *sg;
  int sentinel;
  unsigned follows;       /* a data node: the node it replicates, itself
                             when it believes it is the primary */
  uint64_t ack_ns;        /* a replica: its last REPLCONF ACK (true ns) */
  int good;               /* a primary: repl_good_slaves_count, as its
                             replication cron last counted it */
  uint64_t wrong_since;   /* a primary the sentinels call a replica: since
                             when they see it so (0: not) */
  unsigned tick_gen;
  int resyncing;          /* a plain master: a replica of another primary
                             now (sim_srv_resync): its port, else 0 */
};

enum { SIM_MIG_OUT = 1, SIM_MIG_IN = 2 };

/* A simulated Redis Cluster. */
struct simcl {
  simworld *w;
  unsigned first, n;      /* its nodes: w->srv[first .. first + n) */
  unsigned primaries;     /* at the start: nodes 0 .. primaries - 1 */
  simclcfg *cur;          /* the latest configuration */
  uint64_t node_timeout;  /* ns (cluster-node-timeout) */
  int old;                /* Redis 6.2: no CLUSTER SHARDS */
  int migrating;          /* a migration under way (at most one) */
  unsigned mig_from, mig_to, mig_lo, mig_hi;
  unsigned mig_gen;
  int mig_keys_done;
  uint64_t deposed_ns;    /* the last failover: an old primary that has
                             not heard of it still takes writes */
  uint64_t rollback_ns;   /* the last time a node that believed it was a
                             primary was made a replica (what it took
                             since the failover is lost) */
};

/* A simulated Redis Sentinel group: one primary and its replicas
 * (asynchronous replication), watched by three sentinels that each name
 * the primary they believe in. */
struct simsg {
  simworld *w;
  unsigned first, n;      /* data nodes: w->srv[first .. first + n) */
  unsigned sfirst;        /* sentinels: w->srv[sfirst .. sfirst + 3) */
  char name[16];          /* the master's name for the sentinels */
  unsigned primary;       /* the latest elected node (the majority's) */
  uint64_t epoch;         /* its failover epoch */
  int visible;            /* the sentinels announce it (the failover's
                             replicas were reconfigured) */
  unsigned leader;        /* the sentinel that ran the last failover */
  unsigned names[SIM_SG_SENTINELS];   /* what each sentinel names */
  uint64_t known[SIM_SG_SENTINELS];   /* the epoch each one knows */
  uint64_t stale_until[SIM_SG_SENTINELS];   /* learns nothing before */
  /* A partition inside the group: side[] of each member (nodes, then
   * sentinels at SIM_SG_NODES + k) while split. */
  int split;
  unsigned split_gen;
  unsigned char side[SIM_SG_NODES + SIM_SG_SENTINELS];
  uint64_t deposed_ns;    /* the last election: an old primary that has
                             not heard of it still takes writes */
  uint64_t rollback_ns;   /* the last time a node that believed it led
                             was made a replica: what it took since the
                             last election is lost (0: never) */
  uint64_t down_after;    /* ns: down-after-milliseconds */
  uint64_t gone_ns;       /* a majority of sentinels sees the primary
                             down since (0: not) */
  unsigned gone_gen;
};

/* A client's environment: its seam (sys.h) and its process. */
struct simenv {
  redlock__sys sys;       /* sys.arg = this */
  simworld *w;
  unsigned id;
  /* Its validity clock: base + (now - ref) * rate; never steps. */
  uint64_t clock_base_ns, clock_ref_ns;
  double rate;
  uint64_t paused_until;  /* SIGSTOP of the client's process */
  uint64_t record_at;     /* true ns a server last ran a command of this
                             client's on the ttl record (its read, its
                             raise: steps of an attempt that no result
                             dates; sim.c's wait check) */
  /* A loaded machine (lag_max_ns > 0): CPU time spent in the callbacks
   * of a loop turn before this one ran, so the loop's cached time (when
   * the turn began: libuv's uv_now, which its timers count from) lags
   * the clock the seam reads, by up to lag_max_ns, drawn per event from
   * lag_rng (not the world's source). loop_ns is the loop's time during
   * the event at true time loop_at; timers started then count from it
   * and fire early on the client's clock by as much. */
  uint64_t lag_max_ns;
  uint64_t lag_rng;
  uint64_t loop_ns, loop_at;
  int dead;               /* crashed: stopped for good (its events wait
                             at the end of time; sim_env_revive) */
  redlock__flusher *flusher;
  int flush_armed;
  int on_armed_list;
  simenv *next_armed;
  simlink *links;         /* its connections' links */
  /* Connections it opened to each server in the current second of true
   * time, and the most in any second (the oracle's bound on reconnect
   * storms, sim.c). */
  uint64_t opens_second;
  unsigned short opens[64];
  unsigned opens_most, opens_most_srv;
};

struct simworld {
  uint64_t now;           /* true time, ns */
  uint64_t rng;
  uint64_t trace;         /* FNV-1a of every event, in order */
  uint64_t events;
  /* The event heap. */
  struct simev *heap;
  size_t n_heap, cap_heap;
  uint64_t seq;
  simsrv *srv;            /* n_srv servers, ports base_port + i */
  unsigned n_srv;
  simcl *cl[SIM_MAX_CLUSTERS];   /* the clusters made of them */
  unsigned n_cl;
  simsg *sg[SIM_MAX_GROUPS];     /* the sentinel groups */
  unsigned n_sg;
  uint64_t periodic_until;  /* a group's periodic work (replication cron,
                               sentinels) stops after (the run's end) */
  uint64_t repromote_gap; /* ns: a node demoted less than this ago is not
                             promoted (an election or a failover waits; the
                             fault schedule's rule, sim.c) */
  int base_port;
  simenv *armed;          /* clients whose flusher wants a turn */
  /* Links: latency of each direction, ns, uniform in [lat_min, lat_max]. */
  uint64_t lat_min, lat_max;
  /* Cuts: cut[c][s] bit 1: client c's bytes to server s are held (bit 2:
   * dropped), bit 4/8 the same for s to c. At most SIM_MAX_CLIENTS. */
  unsigned char (*cut)[64];
  unsigned max_clients;
  int stopping;           /* the run ends: no more periodic events */
  int trace_client;       /* -1, or a client whose commands and replies
                             the log shows (debugging a seed) */
  int verbose;
  void (*log)(simworld *w, const char *line);
  void *log_arg;
};

typedef void (*sim_fn)(simworld *w, void *arg, uint64_t a);

/* ---- the world ----------------------------------------------------------- */

void sim_init(simworld *w, uint64_t seed, unsigned n_srv, int base_port,
              unsigned max_clients);
void sim_free(simworld *w);
uint64_t sim_rand(simworld *w);
/* Uniform in [lo, hi]. */
uint64_t sim_between(simworld *w, uint64_t lo, uint64_t hi);
double sim_unit(simworld *w);
void sim_trace(simworld *w, uint64_t v);
/* Runs fn(w, arg, a) at true time `at` (>= now) in `env`'s process (NULL:
 * the world's own, never paused). */
void sim_at(simworld *w, uint64_t at, simenv *env, sim_fn fn, void *arg,
            uint64_t a);
/* One event (and the flushers it armed): 0 when none is left or the next
 * one is after `until`. */
int sim_step(simworld *w, uint64_t until);
void sim_logf(simworld *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- clients' environments ----------------------------------------------- */

void sim_env_init(simworld *w, simenv *e, unsigned id, double rate);
/* The client's own clock now. */
uint64_t sim_env_now(const simenv *e);
/* True ns for `ns` of the client's clock. */
uint64_t sim_env_span(const simenv *e, uint64_t ns);
/* Crash: every connection of the client is dropped (the servers see it
 * go), and nothing of it runs again. Its memory stays (the oracle reads
 * it; sim_env_free at the end). */
void sim_env_crash(simenv *e);
/* The end of a run: a crashed client runs again (its events come due
 * now, in order), so that it can be closed and freed. */
void sim_env_revive(simenv *e);

/* ---- servers ------------------------------------------------------------- */

int64_t sim_srv_wall_us(const simsrv *s);
void sim_srv_step_clock(simsrv *s, int64_t us);
void sim_srv_set_rate(simsrv *s, double rate);
/* Kill -9: connections reset; restart after down_ns with what its
 * persistence kept (sim_loss of its config at this moment). */
void sim_srv_crash(simsrv *s, uint64_t down_ns);
sim_loss sim_srv_loss(const simsrv *s);
void sim_srv_pause(simsrv *s, uint64_t ns);
/* A plain master made a replica of another, unrelated primary (on
 * `port`), then a master again ns later (REPLICAOF host port, the full
 * sync, REPLICAOF NO ONE): meanwhile READONLY; its keys replaced by the
 * other's (none of ours); then a new replication id and
 * second_repl_offset (it was a replica in this life), with the same
 * run_id and connections all along. */
void sim_srv_resync(simsrv *s, int port, uint64_t ns);
/* CLIENT KILL (or an idle timeout): the server closes every connection of
 * that client (a reset). */
void sim_srv_kill_client(simsrv *s, unsigned client);
/* BGSAVE: the RDB snapshot is now. */
void sim_srv_snapshot(simsrv *s);
/* Cuts between client id and server index: mode 0 heals, 1 holds bytes
 * (delivered when it heals), 2 drops them and resets the connection when
 * it heals; dirs bit 1: client to server, bit 2: server to client. */
void sim_cut(simworld *w, unsigned client, unsigned srv, int mode,
             int dirs);

/* ---- Redis Cluster ------------------------------------------------------- */

/* Servers first .. first + primaries + replicas - 1 become a cluster:
 * the first `primaries` are primaries with the slots split evenly, then
 * one replica for each primary whose bit is set in replica_mask, in
 * order. Draws its node ids and timing from the world. */
simcl *sim_cluster_new(simworld *w, unsigned first, unsigned primaries,
                       unsigned replica_mask, int old);
simsrv *sim_cluster_srv(simcl *c, unsigned node);
/* The node that owns slot now (the latest configuration), or NULL. */
simsrv *sim_cluster_owner(simcl *c, unsigned slot);
/* The slots around `slot` with its owner, and a node's lowest slot (-1:
 * none), in the latest configuration. */
void sim_cluster_range(simcl *c, unsigned slot, unsigned *lo, unsigned *hi);
int sim_cluster_lowest(simcl *c, unsigned node);
/* A primary in the latest configuration (a plain master: 1). */
int sim_srv_primary(const simsrv *s);
/* A replica of primary `node` that could take over now (up, running; and
 * synced, with `synced`), or NULL. */
simsrv *sim_cluster_heir(simcl *c, unsigned node, int synced);
/* Could stopping this node for ns fail it over (a primary with a
 * replica, gone for more than the node timeout)? */
int sim_cluster_would_fail_over(const simsrv *s, uint64_t ns);
/* 1 while a running node believes it is a primary that the cluster's
 * latest configuration made a replica (it takes writes that are lost). */
int sim_cluster_deposed_leads(simcl *c);
/* In a slot migration (a fault leaves it alone). */
int sim_srv_migrating(const simsrv *s);
/* CLUSTER FAILOVER on replica r: lossless (a manual failover: it first
 * takes its primary's data) or TAKEOVER (what replication brought it).
 * Nothing when r is not a running replica, or was demoted less than
 * w->repromote_gap ago. */
void sim_cluster_failover(simsrv *r, int lossless);
/* Slots lo..hi move from primary `from` to primary `to`, a key at a time
 * (ASK meanwhile), then the target owns them. 0, or -1 when it cannot
 * start now (another migration, a node down or stopped, slots not all
 * from's, a node with a stale or bent view). */
int sim_cluster_migrate(simcl *c, unsigned from, unsigned to, unsigned lo,
                        unsigned hi);
/* Node s believes for ns that slots lo..hi are primary to's (to must not
 * be s): MOVED where it should serve, CLUSTER SHARDS that say so. */
void sim_cluster_bend(simsrv *s, unsigned lo, unsigned hi, unsigned to,
                      uint64_t ns);

/* ---- Redis Sentinel groups ---------------------------------------------- */

/* Servers first .. first + 1 + replicas - 1 become a group's data nodes
 * (the first its primary), servers first + 1 + replicas .. + 2 its three
 * sentinels, which know the primary as `name`. down_after_ms: the
 * sentinels' down-after-milliseconds. The data nodes' min-replicas
 * settings are the caller's (CONFIG). */
simsg *sim_sentinel_new(simworld *w, unsigned first, unsigned replicas,
                        const char *name, uint64_t down_after_ms);
simsrv *sim_sentinel_node(simsg *g, unsigned node);
simsrv *sim_sentinel_srv(simsg *g, unsigned k);
/* The primary the majority elected last (the oracle's). */
simsrv *sim_sentinel_primary(simsg *g);
/* 1 while a node other than the primary believes it leads (a deposed
 * primary not converted yet: what it takes is lost when it is). */
int sim_sentinel_deposed_leads(simsg *g);
/* Could stopping (or cutting off) data node s for ns fail it over? */
int sim_sentinel_would_fail_over(const simsrv *s, uint64_t ns);
/* SENTINEL FAILOVER: a synced replica that runs is promoted with what
 * replication brought it (writes not replicated are lost); -1 when none
 * can be now. */
int sim_sentinel_switch(simsg *g);
/* Sentinel k learns nothing new for ns: it keeps naming the primary it
 * names now. */
void sim_sentinel_stale(simsg *g, unsigned k, uint64_t ns);
/* A partition inside the group for ns: the primary, the replicas in
 * `with` (bits of node indexes) and sentinel k on one side, the rest on
 * the other. */
void sim_sentinel_split(simsg *g, unsigned with, unsigned k, uint64_t ns);
/* The partition heals now (the run's end). */
void sim_sentinel_heal(simsg *g);

#endif
