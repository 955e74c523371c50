/* kv.h: one simulated Redis server's data and the commands the library
 * sends it (redlock-sim, issue 31).
 *
 * Owns: the keys (strings and hashes) with their expiries on the server's
 * wall clock, the script cache, the configuration the library reads or
 * sets, and the execution of one command, with a C twin of each of the
 * library's scripts (lib/base/scripts.c); the copies that replication and
 * MIGRATE make of keys. Does not own: connections, time, persistence,
 * when replication happens, pub/sub receivers, cluster routing or INFO's
 * facts about the process (the world, world.c, gives them through
 * simkv_ctx).
 *
 * Pure: no I/O, no clock, no randomness; the same calls give the same
 * bytes. test-sim-diff runs every command and script on random inputs
 * against a real redis-server and against this file and requires the same
 * replies, so the model cannot drift from Redis 7.0. */
#ifndef REDLOCK_SIM_KV_H
#define REDLOCK_SIM_KV_H

#include <stddef.h>
#include <stdint.h>

typedef struct simkv simkv;

/* RESP bytes, growing. */
typedef struct simkv_out {
  char *p;
  size_t len, cap;
} simkv_out;

/* What INFO says about the process (the world's). */
typedef struct simkv_info {
  const char *run_id;          /* 40 hex */
  int64_t uptime_s;
  int tcp_port;
  const char *role;            /* "master" or "slave" */
  const char *master_host;     /* a replica's */
  int master_port;
  int master_link_up;
  const char *master_replid;   /* 40 hex */
  int64_t second_repl_offset;  /* -1 */
  int connected_slaves;
  int aof_enabled;             /* INFO persistence (from the config's
                                  appendonly unless the world says -1) */
  int64_t rdb_last_save_time;
} simkv_info;

/* One connection's state that commands change. */
typedef struct simkv_conn {
  int db;                      /* SELECT */
  int authed;                  /* AUTH passed, or no password set */
  int asking;                  /* ASKING before this command (clusters) */
} simkv_conn;

/* What a command may ask of the world. */
typedef struct simkv_ctx {
  int64_t now_us;              /* the server's wall clock, unix us: TIME,
                                  and expiries (in ms) */
  const simkv_info *info;
  /* PUBLISH, from the command or a script: receivers reached. */
  long (*publish)(void *arg, const char *ch, size_t chlen, const char *msg,
                  size_t msglen);
  /* Cluster nodes: may this node serve `slot` for this command (asking:
   * the connection sent ASKING; keys: how many the command names, all in
   * `slot`; missing: how many of them db 0 lacks, which decides ASK and
   * TRYAGAIN during a migration)? 0 yes; else the error line to answer
   * without "-" and CRLF ("MOVED 1234 127.0.0.1:7001", "ASK ...",
   * "TRYAGAIN ...", "CLUSTERDOWN ..."), written into err. NULL: not a
   * cluster node (every slot is ours, keys of many slots in one command
   * are fine). */
  int (*route)(void *arg, unsigned slot, int asking, int keys, int missing,
               char *err, size_t n);
  void *arg;
} simkv_ctx;

simkv *simkv_new(void);
void simkv_free(simkv *kv);
/* A deep copy (an RDB snapshot, an AOF's fsynced state, a replica's
 * copy): the keys and the config; the script cache is not kept by a
 * restart, as in Redis (simkv_restart). NULL on out of memory. */
simkv *simkv_clone(const simkv *kv);
/* What a restart keeps of a copy: the keys (expired ones dropped at load)
 * and the config; the script cache is emptied. */
void simkv_restart(simkv *kv, int64_t now_us);
/* Removes every key (FLUSHALL). */
void simkv_flush(simkv *kv);
/* A replica's copy (replication, a full sync): dst's keys become a copy
 * of src's, expiries as they are (Redis replicates absolute expiry
 * times); dst keeps its config and its script cache. 0, or -1 on out of
 * memory (dst then holds part of them). */
int simkv_copy_keys(simkv *dst, const simkv *src);
/* MIGRATE of one live key of db 0 whose slot is in [lo, hi], from src
 * to dst, with the ttl it has left (src's clock at src_now_us) set on
 * dst's clock (dst_now_us), replacing a key of that name on dst; dead
 * keys met on the way are dropped. 1 moved one, 0 none is left, -1 out
 * of memory. */
int simkv_migrate_one(simkv *dst, simkv *src, unsigned lo, unsigned hi,
                      int64_t src_now_us, int64_t dst_now_us);

/* Runs one command (argv[0] any case) as Redis 7.0 would and appends its
 * RESP reply to out. Returns 1 when it wrote to the data (for the AOF and
 * replication), 0 when not, -1 on out of memory (nothing appended).
 * SUBSCRIBE, UNSUBSCRIBE, CLUSTER, SENTINEL, CLIENT and anything about
 * connections are the world's: this answers them with an error. */
int simkv_exec(simkv *kv, simkv_conn *conn, const simkv_ctx *ctx, int argc,
               const char *const *argv, const size_t *lens, simkv_out *out);

/* Configuration (CONFIG GET / SET), for the world and for faults. */
const char *simkv_config(const simkv *kv, const char *name);
int simkv_config_set(simkv *kv, const char *name, const char *value);

/* Keys in all dbs (for the oracle and tests); the value of a string key
 * in db 0 at now_us (NULL: missing, expired or a hash). */
size_t simkv_keys(const simkv *kv);
const char *simkv_get(simkv *kv, const char *key, size_t keylen,
                      int64_t now_us, size_t *len);

/* Every script runs in Lua (kv.c run_lua), the library's too: what
 * test-sim-diff checks the Lua path with (a process-wide switch). */
void simkv_lua_only(int on);
/* Scripts of the library whose twin was written for another text (their
 * redlock__cmd numbers into names); they run in Lua meanwhile. */
int simkv_stale_twins(char *names, size_t n);

void simkv_out_reset(simkv_out *o);
void simkv_out_free(simkv_out *o);

#endif
