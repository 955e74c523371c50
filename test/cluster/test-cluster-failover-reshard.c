/* A failover that lost a lock's key, then a reshard of that key's slot
 * (found by redlock-sim: seed 1273, --masters 1 --topology cluster
 * --faults failover,migrate). The primary that holds the key dies before
 * its replica got it; the replica takes over without the key, a new
 * instance that the guard holds for the deployment's longest ttl. Then
 * the slot moves from it to the other primary, an old instance that
 * counts: during the migration a SET NX of the key is answered with ASK
 * (the source lacks the key) and done by the target, after it the target
 * serves the slot. Either way the YES comes from a node that counts, about
 * data that came from the one that lost the key: it was granted at once,
 * twice (a new client in each phase), while the first holder's lock was
 * valid. A cluster's YES now counts only when each of its primaries would
 * (guard.c, 7.): both new clients are refused until the first holder's
 * validity ended, then granted. */
#include "tutil.h"

#define P 2
#define N (2 * P)
#define TTL 5000

static harness_server srv[N];

typedef struct key_gone {
  harness_server *srv;
  const char *key;
} key_gone;

static int replica_lacks(void *arg) {
  const key_gone *kg = arg;
  return harness_get_replica(kg->srv, kg->key, NULL, 0) == 0;
}

/* Tries l every 100 ms until granted or until `until` (ms, harness
 * clock; 0: no end but the bound). Returns when it was granted, or 0.
 * Counts the refusals and those the restart guard gave. */
static uint64_t try_until(uv_loop_t *loop, redlock_lock_t *l, uint64_t until,
                          uint64_t bound, int *refused, int *guard_said) {
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  for (;;) {
    int rc = tu_acquire(loop, l, TTL, &once, &op);
    uint64_t now = harness_now_ms();
    if (rc == 0)
      return now;
    (*refused)++;
    if (op.nodes[0].error == REDLOCK_ERESTARTED &&
        strstr(op.nodes[0].errstr, "restart guard") != NULL)
      (*guard_said)++;
    if (until != 0 && now >= until)
      return 0;
    if (now > bound)
      TEST_FAIL("never granted after the window (last: %s)",
                op.nodes[0].errstr);
    tu_run_for(loop, 100);
  }
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a_c, *b_c, *c_c;
  redlock_client_config guarded;
  redlock_lock_t *a, *b, *c;
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *addr[1];
  const char *key = "{order-9}:lock";
  unsigned slot;
  char buf[64];
  tu_op op;
  uint64_t granted_at, valid_until, b_ok, c_ok;
  int primary, replica, other, i;
  int b_refused = 0, b_guard = 0, c_refused = 0, c_guard = 0;
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++) {
    srv[i].cluster = 1;
    srv[i].appendonly = 1;
  }
  harness_start(srv, N);
  harness_cluster_make(srv, N, P);   /* replica P + k of primary k */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "CLUSTER KEYSLOT %s",
                         key), 0);
  slot = (unsigned)strtoul(buf, NULL, 10);
  primary = harness_cluster_owner(srv, N, key);
  ASSERT_GE(primary, 0);
  ASSERT_LT(primary, P);
  replica = P + primary;
  other = (primary + 1) % P;

  memset(&guarded, 0, sizeof(guarded));
  guarded.restart_guard_ms = 0;   /* auto: the deployment's longest ttl */
  addr[0] = harness_cluster_addr(&srv[other]);
  a_c = tu_client_guarded(&loop, addr, 1, &guarded, 1);
  ASSERT_EQ(redlock_lock_new(a_c, key, strlen(key), &a), 0);
  /* The cluster is new to this client: its votes count once a ttl has
   * passed. Its records then say when each primary was first seen. */
  {
    redlock_acquire_opts wait = {.wait_ms = harness_bound_ms(4 * TTL)};
    ASSERT_EQ(tu_acquire(&loop, a, TTL, &wait, &op), 0);
    ASSERT_EQ(tu_release(&loop, a, &op), 0);
  }
  {
    key_gone kg = {&srv[replica], key};
    if (harness_wait_for(replica_lacks, &kg,
                         (uint64_t)harness_bound_ms(5000)))
      TEST_FAIL("the replica still has %s", key);
  }
  /* The replica is down while the key is set; the primary dies; the
   * replica comes back from its own AOF, without the key, and takes
   * over. */
  harness_kill(&srv[replica]);
  ASSERT_EQ(tu_acquire(&loop, a, TTL, &once, &op), 0);
  granted_at = harness_now_ms();
  valid_until = granted_at + (uint64_t)op.validity_ms;
  harness_kill(&srv[primary]);
  harness_restart(&srv[replica]);
  ASSERT_EQ(harness_cmdf(&srv[replica], buf, sizeof(buf),
                         "CLUSTER FAILOVER TAKEOVER"), 0);
  ASSERT_STR_EQ(buf, "OK");
  harness_cluster_wait_owner(srv, N, slot, &srv[replica]);
  ASSERT_EQ(harness_get(&srv[replica], key, NULL, 0), 0);   /* lost */

  /* 1. The slot migrates from the new primary to the other one (no key
   * to move: ASK for the key). A new client tries for a second. */
  harness_cluster_move_slot(srv, N, slot, &srv[replica], &srv[other], 1, 0);
  b_c = tu_client_guarded(&loop, addr, 1, &guarded, 1);
  ASSERT_EQ(redlock_lock_new(b_c, key, strlen(key), &b), 0);
  b_ok = try_until(&loop, b, harness_now_ms() + 1000,
                   valid_until + (uint64_t)harness_bound_ms(15000), &b_refused,
                   &b_guard);
  if (b_ok != 0)
    fprintf(stderr, "DOUBLE GRANT during the migration: +%llu ms, the "
            "first holder valid until +%llu ms\n",
            (unsigned long long)(b_ok - granted_at),
            (unsigned long long)(valid_until - granted_at));
  ASSERT(b_ok == 0 || b_ok >= valid_until);
  if (b_ok != 0)
    ASSERT_EQ(tu_release(&loop, b, &op), 0);
  tu_drain(&loop, b_c);

  /* 2. The slot is the other primary's now: another new client tries
   * every 100 ms until granted. */
  harness_cluster_finish_slot(srv, N, slot, &srv[replica], &srv[other]);
  harness_cluster_wait_owner(srv, N, slot, &srv[other]);
  c_c = tu_client_guarded(&loop, addr, 1, &guarded, 1);
  ASSERT_EQ(redlock_lock_new(c_c, key, strlen(key), &c), 0);
  c_ok = try_until(&loop, c, 0,
                   valid_until + (uint64_t)harness_bound_ms(15000), &c_refused,
                   &c_guard);
  fprintf(stderr, "failover, then a reshard of the slot: first holder valid "
          "until +%llu ms; during the migration refused %d times (%d by "
          "the guard); after it refused %d times (%d by the guard), "
          "granted at +%llu ms\n",
          (unsigned long long)(valid_until - granted_at), b_refused, b_guard,
          c_refused, c_guard, (unsigned long long)(c_ok - granted_at));
  if (c_ok < valid_until)
    fprintf(stderr, "DOUBLE GRANT after the migration\n");
  ASSERT_GE(c_ok, valid_until);
  ASSERT_GT(b_guard, 0);
  ASSERT_GT(c_guard, 0);
  ASSERT_EQ(tu_count_holding(&srv[other], 1, key, redlock_lock_token(c)), 1);
  ASSERT_EQ(tu_release(&loop, c, &op), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  ASSERT_EQ(redlock_lock_free(c), 0);
  tu_close_client(&loop, c_c);
  tu_close_client(&loop, b_c);
  tu_close(&loop, a_c);
  harness_stop_all();
  return 0;
}
