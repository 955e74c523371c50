/* A sentinel group as one master of the quorum (issue 22, item 5): the
 * client asks the sentinels for the primary, locks there, and follows
 * +switch-master. Its primary dies after a lock was set, before the
 * replica got the key (the replica was down and came back empty); the
 * sentinels promote the replica. A new client must not count the new
 * primary's YES until the deployment's longest ttl has passed (the same
 * guard as a restart or a cluster failover): refused while the first
 * holder's lock can be valid, then granted on the new primary. The first
 * client follows the switch and finds its key gone.
 *
 * Both data nodes run min-replicas-to-write 1 (min-replicas-max-lag 5 s):
 * the client counts a group only where its primary refuses writes when
 * cut off (issue 29, item 11). A replica that is stopped (its connection
 * open) still counts for up to the lag, so the SET right after lands; a
 * dead one would not (its connection closes). The promoted replica takes
 * writes once the old primary is back as its replica. */
#include "tutil.h"

#define TTL 5000

static harness_server data[2];
static harness_server sent[3];

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a_c, *b_c;
  redlock_client_config guarded;
  redlock_lock_t *a, *b;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts wait = {.wait_ms = 0};
  const char *addr[1];
  const char *key = "nightly-report";
  char want[64];
  uint64_t granted_at, valid_until, first_try = 0, b_ok = 0;
  tu_op op;
  int i, refused = 0, guard_said = 0;
  memset(data, 0, sizeof(data));
  memset(sent, 0, sizeof(sent));
  data[0].min_replicas_lag = 5;
  data[1].min_replicas_lag = 5;
  harness_start(data, 1);
  data[1].replicaof = data[0].port;
  harness_start(&data[1], 1);
  harness_sentinel_start(sent, 3, "grp", &data[0], 1);
  addr[0] = harness_sentinel_addr(sent, 3, "grp");
  ASSERT_EQ(uv_loop_init(&loop), 0);

  memset(&guarded, 0, sizeof(guarded));
  guarded.restart_guard_ms = 0;   /* auto */
  a_c = tu_client_guarded(&loop, addr, 1, &guarded, 1);
  ASSERT_EQ(redlock_lock_new(a_c, key, strlen(key), &a), 0);
  /* New masters to this client: counted once a ttl has passed. */
  wait.wait_ms = harness_bound_ms(4 * TTL);
  ASSERT_EQ(tu_acquire(&loop, a, TTL, &wait, &op), 0);
  snprintf(want, sizeof(want), "127.0.0.1:%d", data[0].port);
  ASSERT_STR_EQ(op.nodes[0].node, want);   /* the primary they named */
  ASSERT_EQ(tu_release(&loop, a, &op), 0);

  /* The replica misses the key: stopped while it is set. Its link stays
   * up, so the primary still counts it (for min-replicas-max-lag) and
   * takes the SET; the replica never reads it (killed while stopped). */
  harness_pause(&data[1]);
  ASSERT_EQ(tu_acquire(&loop, a, TTL, &once, &op), 0);
  granted_at = harness_now_ms();
  valid_until = granted_at + (uint64_t)op.validity_ms;
  harness_kill(&data[0]);
  harness_restart(&data[1]);   /* empty, a replica of the dead primary */
  /* The sentinels see the primary down and promote the replica. */
  {
    uint64_t end = harness_now_ms() + (uint64_t)harness_bound_ms(30000);
    char buf[64];
    while (harness_sentinel_primary_port(&sent[0], "grp") != data[1].port) {
      if (harness_now_ms() > end)
        TEST_FAIL("the sentinels did not promote the replica");
      /* Forced, once the primary is seen down (sdown). */
      (void)harness_cmdf(&sent[0], buf, sizeof(buf), "SENTINEL FAILOVER grp");
      tu_run_for(&loop, 200);
    }
  }
  ASSERT_EQ(harness_get(&data[1], key, NULL, 0), 0);   /* lost */
  /* The first client follows the switch: its extension finds the key
   * gone there (while the old primary is still named it fails as down). */
  snprintf(want, sizeof(want), "127.0.0.1:%d", data[1].port);
  for (i = 0; i < 200 && redlock_lock_is_held(a); i++) {
    int rc = tu_extend(&loop, a, TTL, &op);
    ASSERT_NE(rc, 0);
    tu_run_for(&loop, 20);
  }
  ASSERT_EQ(redlock_lock_is_held(a), 0);
  ASSERT_STR_EQ(op.nodes[0].node, want);
  /* The new primary takes writes only with a replica: the old primary
   * comes back as one (empty; it syncs from the new primary). */
  data[0].replicaof = data[1].port;
  harness_restart(&data[0]);

  b_c = tu_client_guarded(&loop, addr, 1, &guarded, 1);
  ASSERT_EQ(redlock_lock_new(b_c, key, strlen(key), &b), 0);
  for (;;) {
    int rc = tu_acquire(&loop, b, TTL, &once, &op);
    uint64_t now = harness_now_ms();
    if (first_try == 0)
      first_try = now;
    if (rc == 0) {
      b_ok = now;
      break;
    }
    refused++;
    if (op.nodes[0].error == REDLOCK_ERESTARTED)
      guard_said++;
    if (now > valid_until + (uint64_t)harness_bound_ms(20000))
      TEST_FAIL("never granted after the window (last: %s)",
                op.nodes[0].errstr);
    tu_run_for(&loop, 100);
  }
  fprintf(stderr, "sentinel: first holder valid until +%llu ms; the new "
          "client tried from +%llu ms, refused %d times (%d by the guard), "
          "granted at +%llu ms\n",
          (unsigned long long)(valid_until - granted_at),
          (unsigned long long)(first_try - granted_at), refused, guard_said,
          (unsigned long long)(b_ok - granted_at));
  ASSERT_GE(b_ok, valid_until);
  /* Refused by the guard while the first holder was valid, not by chance
   * (the promoted replica lacks the key: only the guard stands between). */
  if (first_try < valid_until)
    ASSERT_GT(guard_said, 0);
  snprintf(want, sizeof(want), "127.0.0.1:%d", data[1].port);
  ASSERT_STR_EQ(op.nodes[0].node, want);   /* the promoted replica */
  ASSERT_EQ(tu_count_holding(&data[1], 1, key, redlock_lock_token(b)), 1);

  ASSERT_EQ(tu_release(&loop, b, &op), 0);
  ASSERT_EQ(redlock_lock_free(a), 0);
  ASSERT_EQ(redlock_lock_free(b), 0);
  tu_close_client(&loop, b_c);
  tu_close(&loop, a_c);
  harness_stop_all();
  return 0;
}
