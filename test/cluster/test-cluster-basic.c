/* A Redis Cluster as the one master of the quorum (issue 22): keys in
 * different slots and on different primaries are acquired, extended,
 * inspected and released where the cluster serves them (checked on the
 * owning primary itself); a second owner is refused; a multi-resource
 * lock over slots of two primaries is one vote, all or nothing; fencing
 * tokens grow with the counter in the key's slot; read-write locks
 * exclude, and the modes of one name (plain, writer, readers) exclude
 * each other; many auto-extended locks renew in batches per slot; the seed
 * may be any node, a replica too; a waiter is woken by a release (the
 * message crosses the cluster: PUBLISH is broadcast); an election elects
 * one leader and hands over; statistics count per primary. */
#include "tutil.h"

#define P 3

static harness_server srv[P + 1];
static const char *addr[1];

/* A key whose slot primary `want` serves. */
static void key_on(int want, const char *base, char *out, size_t len) {
  int i;
  for (i = 0; i < 10000; i++) {
    snprintf(out, len, "%s-%d", base, i);
    if (harness_cluster_owner(srv, P + 1, out) == want)
      return;
  }
  TEST_FAIL("no key of primary %d", want);
}

static int holders(const char *key, const char *token) {
  return tu_count_holding(srv, P, key, token);
}

static void plain_locks(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts once = {.wait_ms = -1};
  char key[64];
  tu_op op;
  int p;
  for (p = 0; p < P; p++) {
    redlock_lock_t *a, *b;
    char tok[80];
    key_on(p, "job", key, sizeof(key));
    ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &a), 0);
    ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &b), 0);
    ASSERT_EQ(tu_acquire(loop, a, 10000, NULL, &op), 0);
    ASSERT_EQ(op.yes, 1);
    snprintf(tok, sizeof(tok), "%s", redlock_lock_token(a));
    /* On the primary that serves the slot, and only there. */
    ASSERT_EQ(tu_count_holding(&srv[p], 1, key, tok), 1);
    ASSERT_EQ(holders(key, tok), 1);
    /* The vote names the primary that gave it. */
    ASSERT_STR_EQ(op.nodes[0].server, addr[0]);
    {
      char want[64];
      snprintf(want, sizeof(want), "127.0.0.1:%d", srv[p].port);
      ASSERT_STR_EQ(op.nodes[0].node, want);
    }
    ASSERT_EQ(tu_acquire(loop, b, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_extend(loop, a, 20000, &op), 0);
    ASSERT_GT(harness_pttl(&srv[p], key), 10000);
    ASSERT_EQ(tu_release(loop, a, &op), 0);
    tu_drain(loop, c);
    ASSERT_EQ(holders(key, tok), 0);
    ASSERT_EQ(tu_acquire(loop, b, 5000, &once, &op), 0);
    ASSERT_EQ(tu_release(loop, b, &op), 0);
    ASSERT_EQ(redlock_lock_free(a), 0);
    ASSERT_EQ(redlock_lock_free(b), 0);
  }
}

static void multi_lock(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts once = {.wait_ms = -1};
  char k0[64], k1[64], k2[64];
  const void *names[3];
  size_t lens[3];
  redlock_lock_t *m, *one;
  tu_op op;
  key_on(0, "m", k0, sizeof(k0));
  key_on(1, "m", k1, sizeof(k1));
  key_on(1, "n", k2, sizeof(k2));   /* the same primary, another slot */
  names[0] = k0;
  names[1] = k1;
  names[2] = k2;
  lens[0] = strlen(k0);
  lens[1] = strlen(k1);
  lens[2] = strlen(k2);
  ASSERT_EQ(redlock_lock_new_multi(c, names, lens, 3, &m), 0);
  ASSERT_EQ(tu_acquire(loop, m, 10000, NULL, &op), 0);
  ASSERT_EQ(op.yes, 1);
  ASSERT_EQ(tu_count_holding(&srv[0], 1, k0, redlock_lock_token(m)), 1);
  ASSERT_EQ(tu_count_holding(&srv[1], 1, k1, redlock_lock_token(m)), 1);
  ASSERT_EQ(tu_count_holding(&srv[1], 1, k2, redlock_lock_token(m)), 1);
  ASSERT_EQ(tu_extend(loop, m, 20000, &op), 0);
  ASSERT_GT(harness_pttl(&srv[0], k0), 10000);
  ASSERT_GT(harness_pttl(&srv[1], k2), 10000);
  ASSERT_EQ(tu_release(loop, m, &op), 0);
  tu_drain(loop, c);
  ASSERT_EQ(harness_get(&srv[0], k0, NULL, 0), 0);
  ASSERT_EQ(harness_get(&srv[1], k1, NULL, 0), 0);
  /* All or nothing: one key held by a plain lock refuses the multi lock,
   * which then leaves none of its keys behind. */
  ASSERT_EQ(redlock_lock_new(c, k1, strlen(k1), &one), 0);
  ASSERT_EQ(tu_acquire(loop, one, 10000, NULL, &op), 0);
  ASSERT_EQ(tu_acquire(loop, m, 10000, &once, &op), REDLOCK_ETAKEN);
  tu_drain(loop, c);
  ASSERT_EQ(harness_get(&srv[0], k0, NULL, 0), 0);
  ASSERT_EQ(harness_get(&srv[1], k2, NULL, 0), 0);
  ASSERT_EQ(tu_release(loop, one, &op), 0);
  ASSERT_EQ(tu_acquire(loop, m, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(loop, m, &op), 0);
  ASSERT_EQ(redlock_lock_free(one), 0);
  ASSERT_EQ(redlock_lock_free(m), 0);
}

static void inspect_and_force(uv_loop_t *loop, redlock_client_t *c) {
  char key[64];
  redlock_lock_t *a, *look;
  tu_op op;
  key_on(2, "look", key, sizeof(key));
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &a), 0);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &look), 0);
  ASSERT_EQ(tu_acquire(loop, a, 10000, NULL, &op), 0);
  op.done = 0;
  op.calls = 0;
  ASSERT_EQ(redlock_lock_inspect(look, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &op.done, 10000), 0);
  ASSERT_EQ(op.status, 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
  ASSERT_GT(op.nodes[0].pttl_ms, 5000);
  op.done = 0;
  op.calls = 0;
  ASSERT_EQ(redlock_lock_force_release(look, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &op.done, 10000), 0);
  ASSERT_EQ(op.status, 0);
  ASSERT_EQ(harness_get(&srv[2], key, NULL, 0), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(look), 0);
}

static void fencing(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts fenced = {.fence = 1};
  char key[64], fkey[80];
  char val[64];
  redlock_lock_t *a;
  uint64_t last = 0;
  tu_op op;
  int i, p;
  key_on(1, "fenced", key, sizeof(key));
  snprintf(fkey, sizeof(fkey), "{%s}:fence", key);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &a), 0);
  for (i = 0; i < 5; i++) {
    int rc = tu_acquire(loop, a, 10000, &fenced, &op);
    if (rc != 0)
      TEST_FAIL("fenced acquire: %s: %s", redlock_err_name(rc),
                op.nodes[0].errstr);
    ASSERT_GT(redlock_lock_fence(a), last);
    last = redlock_lock_fence(a);
    ASSERT_EQ(tu_release(loop, a, &op), 0);
  }
  /* The counter lives in the key's slot, on the key's primary. */
  p = harness_cluster_owner(srv, P + 1, key);
  ASSERT_EQ(harness_cluster_owner(srv, P + 1, fkey), p);
  ASSERT_EQ(harness_get(&srv[p], fkey, val, sizeof(val)), 1);
  ASSERT_EQ((uint64_t)strtoull(val, NULL, 10), last);
  ASSERT_EQ(redlock_lock_free(a), 0);
}

static void rwlocks(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_lock_t *r1, *r2, *w;
  tu_op op;
  ASSERT_EQ(redlock_rwlock_new(c, "shared", 6, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "shared", 6, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "shared", 6, REDLOCK_WRITE, &w), 0);
  ASSERT_EQ(tu_acquire(loop, r1, 10000, NULL, &op), 0);
  ASSERT_EQ(tu_acquire(loop, r2, 10000, NULL, &op), 0);
  ASSERT_EQ(tu_acquire(loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(loop, r1, &op), 0);
  ASSERT_EQ(tu_release(loop, r2, &op), 0);
  ASSERT_EQ(tu_acquire(loop, w, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(loop, r1, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(loop, w, &op), 0);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
}

/* The modes of one name exclude each other on a cluster too (issue 29,
 * item 5), for a name on each primary and one with a hash tag: a plain
 * holder refuses a writer and a reader; a writer, and a reader, refuse a
 * plain lock (ours, and another library's SET NX on the primary that
 * serves the name); readers share; the name is free once they are gone;
 * a plain handle's inspect sees a writer, and its forced release frees
 * the name (the hash in the key's slot goes too).
 * (The read-write hash shares the plain key's slot, or its scripts could
 * not hold the key: CROSSSLOT.) */
static void modes(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts once = {.wait_ms = -1};
  char key[64], buf[64];
  tu_op op;
  int p;
  for (p = 0; p <= P; p++) {
    redlock_lock_t *pl, *r1, *r2, *w;
    int owner;
    if (p < P)
      key_on(p, "mode", key, sizeof(key));
    else
      snprintf(key, sizeof(key), "{mode}tagged");
    owner = harness_cluster_owner(srv, P + 1, key);
    ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &pl), 0);
    ASSERT_EQ(redlock_rwlock_new(c, key, strlen(key), REDLOCK_READ, &r1), 0);
    ASSERT_EQ(redlock_rwlock_new(c, key, strlen(key), REDLOCK_READ, &r2), 0);
    ASSERT_EQ(redlock_rwlock_new(c, key, strlen(key), REDLOCK_WRITE, &w), 0);
    ASSERT_EQ(tu_acquire(loop, pl, 10000, &once, &op), 0);
    ASSERT_EQ(tu_acquire(loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_acquire(loop, r1, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_release(loop, pl, &op), 0);
    ASSERT_EQ(tu_acquire(loop, w, 10000, &once, &op), 0);
    ASSERT_EQ(tu_acquire(loop, pl, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(harness_cmdf(&srv[owner], buf, sizeof(buf),
                           "SET %s other NX PX 10000", key), 0);
    ASSERT_STR_EQ(buf, "(nil)");
    ASSERT_EQ(tu_release(loop, w, &op), 0);
    ASSERT_EQ(tu_acquire(loop, r1, 10000, &once, &op), 0);
    ASSERT_EQ(tu_acquire(loop, r2, 10000, &once, &op), 0);
    ASSERT_EQ(tu_acquire(loop, pl, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_acquire(loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_release(loop, r1, &op), 0);
    ASSERT_EQ(tu_acquire(loop, pl, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_release(loop, r2, &op), 0);
    ASSERT_EQ(tu_acquire(loop, pl, 10000, &once, &op), 0);
    ASSERT_EQ(tu_release(loop, pl, &op), 0);
    /* The plain handle sees a writer (inspect), and a forced release
     * through it frees the name: the hash in the key's slot goes too. */
    ASSERT_EQ(tu_acquire(loop, w, 10000, &once, &op), 0);
    op.done = 0;
    op.calls = 0;
    ASSERT_EQ(redlock_lock_inspect(pl, tu_cb, &op), 0);
    ASSERT_EQ(harness_run_until(loop, &op.done, 10000), 0);
    ASSERT_EQ(op.nodes[0].rw_lock, 1);
    op.done = 0;
    op.calls = 0;
    ASSERT_EQ(redlock_lock_force_release(pl, tu_cb, &op), 0);
    ASSERT_EQ(harness_run_until(loop, &op.done, 10000), 0);
    ASSERT_EQ(op.status, 0);
    ASSERT_EQ(tu_acquire(loop, r1, 10000, &once, &op), 0);
    ASSERT_EQ(tu_release(loop, r1, &op), 0);
    ASSERT_EQ(redlock_lock_free(pl), 0);
    ASSERT_EQ(redlock_lock_free(r1), 0);
    ASSERT_EQ(redlock_lock_free(r2), 0);
    ASSERT_EQ(redlock_lock_free(w), 0);
  }
}

/* 60 auto-extended locks over every slot range, ttl 1.2 s, for 3 ttls:
 * the renewals go in batches, one command per slot (a CROSSSLOT error
 * would fail them and lose the locks). */
static void batched(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts ext = {.auto_extend = 1};
  redlock_lock_t *l[60];
  redlock_stats st;
  char key[32];
  tu_op op;
  uint64_t before;
  int i;
  for (i = 0; i < 60; i++) {
    snprintf(key, sizeof(key), "many-%d", i);
    ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l[i]), 0);
    ASSERT_EQ(tu_acquire(loop, l[i], 1200, &ext, &op), 0);
  }
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  before = st.extensions;
  tu_run_for(loop, 3600);
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  ASSERT_EQ(st.lost, 0);
  ASSERT_EQ(st.extension_failures, 0);
  ASSERT_GE(st.extensions - before, 60 * 3);
  for (i = 0; i < 60; i++) {
    ASSERT_EQ(redlock_lock_is_held(l[i]), 1);
    ASSERT_EQ(tu_release(loop, l[i], &op), 0);
    ASSERT_EQ(redlock_lock_free(l[i]), 0);
  }
}

/* A waiter with a long retry delay gets the lock within a fraction of it
 * once the holder releases: the release message reached its subscriber,
 * which may sit on another node of the cluster. */
static void wake(uv_loop_t *loop, redlock_client_t *c) {
  redlock_client_config cfg = {.retry_delay_ms = 5000, .retry_jitter_ms = -1};
  redlock_acquire_opts w = {.wake = 1, .wait_ms = 20000};
  redlock_client_t *c2 = tu_client_at(loop, addr, 1, &cfg, 1);
  redlock_lock_t *a, *b;
  char key[64];
  tu_op op, wop;
  uint64_t t0;
  key_on(2, "wake", key, sizeof(key));
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &a), 0);
  ASSERT_EQ(redlock_lock_new(c2, key, strlen(key), &b), 0);
  ASSERT_EQ(tu_acquire(loop, a, 30000, NULL, &op), 0);
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(b, 10000, &w, tu_cb, &wop), 0);
  /* The waiter tried once and is subscribed somewhere in the cluster. */
  {
    char chan[80];
    snprintf(chan, sizeof(chan), "__redlock__:%s", key);
    tu_wait_subscribed(loop, srv, P, chan, 1, harness_bound_ms(10000));
  }
  ASSERT_EQ(wop.done, 0);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_release(loop, a, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &wop.done, 10000), 0);
  ASSERT_EQ(wop.status, 0);
  fprintf(stderr, "wake: granted %llu ms after the release (retry delay "
          "5000 ms)\n", (unsigned long long)(harness_now_ms() - t0));
  ASSERT_LT(harness_now_ms() - t0, (uint64_t)harness_bound_ms(1500));
  ASSERT_EQ(tu_release(loop, b, &op), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  tu_close_client(loop, c2);
}

typedef struct elect_state {
  volatile int elected;
  volatile int deposed;
} elect_state;

static void on_change(redlock_election_t *e, redlock_election_event ev,
                      int reason, void *arg) {
  elect_state *st = arg;
  (void)e;
  (void)reason;
  if (ev == REDLOCK_ELECTED)
    st->elected++;
  else
    st->deposed++;
}

/* Two candidates: one leads, the other takes over when it resigns. */
static void election(uv_loop_t *loop, redlock_client_t *c) {
  elect_state s1 = {0, 0}, s2 = {0, 0};
  redlock_election_opts o1 = {.ttl_ms = 10000, .on_change = on_change,
                              .arg = &s1};
  redlock_election_opts o2 = {.ttl_ms = 10000, .on_change = on_change,
                              .arg = &s2};
  redlock_election_t *e1, *e2;
  ASSERT_EQ(redlock_election_new(c, "leader", 6, "one", &o1, &e1), 0);
  ASSERT_EQ(redlock_election_new(c, "leader", 6, "two", &o2, &e2), 0);
  ASSERT_EQ(redlock_election_campaign(e1), 0);
  ASSERT_EQ(harness_run_until(loop, &s1.elected, 10000), 0);
  ASSERT_EQ(redlock_election_campaign(e2), 0);
  tu_run_for(loop, 500);
  ASSERT_EQ(s2.elected, 0);
  ASSERT_EQ(redlock_election_resign(e1), 0);
  ASSERT_EQ(harness_run_until(loop, &s2.elected, 10000), 0);
  ASSERT_EQ(redlock_election_is_leader(e1), 0);
  ASSERT_EQ(redlock_election_is_leader(e2), 1);
  ASSERT_EQ(redlock_election_free(e1), 0);
  ASSERT_EQ(redlock_election_free(e2), 0);
  tu_run_for(loop, 50);
}

/* Reentrancy: a second acquire of a held handle adds a hold; the key goes
 * only with the last release. */
static void reentrant(uv_loop_t *loop, redlock_client_t *c) {
  redlock_acquire_opts re = {.reentrant = 1};
  redlock_lock_t *l;
  char key[64];
  tu_op op;
  int p;
  key_on(1, "re", key, sizeof(key));
  p = harness_cluster_owner(srv, P + 1, key);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  ASSERT_EQ(tu_acquire(loop, l, 10000, &re, &op), 0);
  ASSERT_EQ(tu_acquire(loop, l, 10000, &re, &op), 0);
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  ASSERT_EQ(tu_count_holding(&srv[p], 1, key, redlock_lock_token(l)), 1);
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  tu_drain(loop, c);
  ASSERT_EQ(harness_get(&srv[p], key, NULL, 0), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
}

/* The blocking API on the same cluster address. */
static void blocking(void) {
  redlock_client_config cfg = {.servers = addr, .n_servers = 1,
                               .restart_guard_ms = -1,
                               .command_timeout_ms = 1000,
                               .connect_timeout_ms = 2000};
  redlock_sync_t *s;
  redlock_sync_lock_t *a, *b;
  redlock_acquire_opts once = {.wait_ms = -1};
  char key[64];
  key_on(0, "sync", key, sizeof(key));
  ASSERT_EQ(redlock_sync_new(&cfg, &s), 0);
  ASSERT_EQ(redlock_sync_acquire(s, key, strlen(key), 10000, NULL, &a), 0);
  ASSERT_EQ(redlock_sync_acquire(s, key, strlen(key), 10000, &once, &b),
            REDLOCK_ETAKEN);
  ASSERT_EQ(redlock_sync_release(a), 0);
  ASSERT_EQ(redlock_sync_close(s), 0);
}

static void per_primary_stats(redlock_client_t *c) {
  redlock_stats st;
  unsigned k, seen = 0;
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  ASSERT_EQ(st.n_masters, 1);
  ASSERT_EQ(st.n_nodes, P);
  for (k = 0; k < st.n_nodes; k++) {
    ASSERT_EQ(st.nodes[k].master, 0);
    ASSERT_GT(st.nodes[k].commands, 0);
    seen++;
  }
  ASSERT_EQ(seen, P);
  ASSERT_GE(st.masters[0].commands, st.nodes[0].commands);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  int i;
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < P + 1; i++)
    srv[i].cluster = 1;
  harness_start(srv, P + 1);
  harness_cluster_make(srv, P + 1, P);   /* srv[P]: a replica of srv[0] */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* The seed is the replica: the client finds the primaries. */
  addr[0] = harness_cluster_addr(&srv[P]);
  c = tu_client_at(&loop, addr, 1, NULL, 1);
  plain_locks(&loop, c);
  multi_lock(&loop, c);
  inspect_and_force(&loop, c);
  fencing(&loop, c);
  rwlocks(&loop, c);
  modes(&loop, c);
  batched(&loop, c);
  wake(&loop, c);
  election(&loop, c);
  reentrant(&loop, c);
  blocking();
  per_primary_stats(c);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
