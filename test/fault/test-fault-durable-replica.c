/* A master declared durable that a client saw as a replica (an operator's
 * REPLICAOF to an unrelated primary: the full sync replaced its keys)
 * does not keep the declaration's credit when it is a master again.
 *
 * N=1 declared master M (appendonly yes, appendfsync always) and X, a
 * server that is not a master of the deployment. A takes "job" (ttl
 * 60 s); M REPLICAOF X (the sync done: master_link_status:up, A's key
 * gone); C connects to M while it is a replica (role:slave, no
 * second_repl_offset: not "promoted"); M REPLICAOF NO ONE; C asks for
 * "job" at once, before its identity check (about 1 s) remakes the
 * connection. The old code counted M's YES (declared, AOF always:
 * cleared at once) and granted "job" while A's validity still ran: two
 * holders (found by the simulator, --durable). Now M is guarded for the
 * window like a promoted replica, with a warning and a refusal that name
 * the cause. */
#include "tutil.h"

#define TTL 60000

static harness_server srv[2];   /* srv[0]: M; srv[1]: X, the other primary */

/* M is a replica of X and the sync is done: A's key is gone. */
static int synced(void *arg) {
  char buf[8192];
  (void)arg;
  if (harness_cmdf(&srv[0], buf, sizeof(buf), "INFO replication") != 0)
    return 0;
  return strstr(buf, "role:slave") != NULL &&
         strstr(buf, "master_link_status:up") != NULL &&
         harness_get(&srv[0], "unrelated", NULL, 0) == 1 &&
         harness_get(&srv[0], "job", NULL, 0) == 0;
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a, *c;
  redlock_lock_t *held, *second;
  redlock_acquire_opts one = {.wait_ms = -1};
  redlock_client_config acfg = {.restart_guard_ms = -1, .max_ttl_ms = TTL};
  redlock_client_config ccfg = {.durable = 1,
                                .restart_guard_ms = TTL,
                                .max_ttl_ms = TTL,
                                .on_warning = tu_on_warning};
  char buf[8192];
  tu_op op;
  uint64_t t0;
  int rc;

  srv[0].appendonly = 1;
  harness_start(srv, 2);
  ASSERT_EQ(harness_set(&srv[1], "unrelated", "x", 600000), 0);
  /* The full sync at once, not after the diskless sync's 5 s delay. */
  ASSERT_EQ(harness_cmdf(&srv[1], buf, sizeof(buf),
                         "CONFIG SET repl-diskless-sync-delay 0"), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* A holds "job" on M. */
  a = tu_client(&loop, srv, 1, &acfg, 1);
  ASSERT_EQ(redlock_lock_new(a, "job", 3, &held), 0);
  ASSERT_EQ(tu_acquire(&loop, held, TTL, &one, &op), 0);
  t0 = harness_now_ms();

  /* M resyncs from X: its keys are replaced. */
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "REPLICAOF 127.0.0.1 %d",
                         srv[1].port), 0);
  if (harness_wait_for(synced, NULL, (uint64_t)harness_bound_ms(20000)) != 0)
    TEST_FAIL("M did not resync from X");

  /* C sees M as a replica, then M is a master again. */
  c = tu_client(&loop, srv, 1, &ccfg, 1);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "REPLICAOF NO ONE"), 0);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO replication"), 0);
  ASSERT(strstr(buf, "role:master") != NULL);

  ASSERT_EQ(redlock_lock_new(c, "job", 3, &second), 0);
  rc = tu_acquire(&loop, second, TTL, &one, &op);
  fprintf(stderr, "C asked for \"job\" %llu ms after A got it: %s (M: %s)\n",
          (unsigned long long)(harness_now_ms() - t0), redlock_err_name(rc),
          op.errstr[0]);
  /* A's validity still runs (ttl 60 s; the sync above is bounded by
   * 20 s, scaled). */
  ASSERT(redlock_lock_is_held(held));
  if (rc == 0)
    TEST_FAIL("double grant: C got \"job\" while A holds it (M was a "
              "replica when C saw it; its sync lost A's key)");
  ASSERT_EQ(rc, REDLOCK_ENOQUORUM);
  ASSERT_NE(op.nodes[0].vote, REDLOCK_VOTE_YES);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_ERESTARTED);
  ASSERT(strstr(op.errstr[0], "a replica (REPLICAOF, a failover)") != NULL);
  ASSERT(strstr(tu_warnings, "a replica (REPLICAOF, a failover)") != NULL);
  ASSERT(strstr(tu_warnings, harness_addr(&srv[0])) != NULL);

  ASSERT_EQ(redlock_lock_free(second), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, c);
  tu_close(&loop, a);
  harness_stop_all();
  return 0;
}
