/* A master that became a replica and a master again behind an open
 * connection (issue 22, item 4: "a new run_id or replication id"): M1 is
 * made a replica of an unrelated server (a full resync replaces its data:
 * the lock's key is gone), then a master again. Its run_id is the same;
 * its replication id is not. A long-running client whose connection
 * stayed open must see a new instance: within its background check (1 s)
 * the connection is made again and M1's YES votes are refused by the
 * restart guard for the longest ttl, as after a restart. The masters run
 * AOF with fsync always and are declared durable: the declaration does
 * not cover data that came from another server (INFO's
 * second_repl_offset: it was a replica in this life). */
#include "tutil.h"

#define N 3
#define TTL 3000

static harness_server srv[N + 1];

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg;
  redlock_lock_t *held, *probe;
  redlock_acquire_opts wait = {.wait_ms = 0};
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *addrs[N];
  char run_before[64], run_after[64], buf[8192];
  tu_op op;
  uint64_t t0;
  int refused = 0, i;
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++)
    srv[i].appendonly = 1;
  harness_start(srv, N + 1);   /* srv[N]: the unrelated server */
  ASSERT_EQ(harness_set(&srv[N], "unrelated", "x", 60000), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  harness_addrs(srv, N, addrs);
  memset(&cfg, 0, sizeof(cfg));
  cfg.restart_guard_ms = 0;   /* auto */
  cfg.durable = 1;            /* declared: AOF, fsync always */
  c = tu_client_guarded(&loop, addrs, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, "job", 3, &held), 0);
  ASSERT_EQ(redlock_lock_new(c, "probe", 5, &probe), 0);
  /* Declared durable masters: their votes count at once. */
  wait.wait_ms = harness_bound_ms(4 * TTL);
  ASSERT_EQ(tu_acquire(&loop, held, TTL, &wait, &op), 0);
  /* M1's vote counts now (the decision may come before it answered:
   * look until it did). */
  for (i = 0; i < 50; i++) {
    ASSERT_EQ(tu_acquire(&loop, probe, TTL, &once, &op), 0);
    ASSERT_EQ(tu_release(&loop, probe, &op), 0);
    if (op.nodes[0].vote == REDLOCK_VOTE_YES)
      break;
  }
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
  /* Without M3 every decision needs M1's vote (and waits for it). */
  harness_kill(&srv[2]);

  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO server"), 0);
  ASSERT_EQ(sscanf(strstr(buf, "run_id:") + 7, "%40s", run_before), 1);
  /* M1 resyncs from the unrelated server, then is a master again. */
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "REPLICAOF 127.0.0.1 %d",
                         srv[N].port), 0);
  t0 = harness_now_ms();
  for (;;) {
    ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO replication"),
              0);
    if (strstr(buf, "master_link_status:up") != NULL &&
        harness_get(&srv[0], "unrelated", NULL, 0) == 1)
      break;
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(10000))
      TEST_FAIL("M1 did not resync from the other server");
    tu_run_for(&loop, 20);
  }
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "REPLICAOF NO ONE"), 0);
  ASSERT_EQ(harness_get(&srv[0], "job", NULL, 0), 0);   /* the key is gone */
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO server"), 0);
  ASSERT_EQ(sscanf(strstr(buf, "run_id:") + 7, "%40s", run_after), 1);
  ASSERT_STR_EQ(run_before, run_after);   /* the same process */

  /* Within the background check, M1's vote stops counting. */
  t0 = harness_now_ms();
  for (i = 0; i < 100; i++) {
    int rc = tu_acquire(&loop, probe, TTL, &once, &op);
    if (rc == 0) {
      /* Granted before the check saw the new replid. The check may
       * remake M1's connection under the release: with M3 down, the
       * release then has no quorum (M2's key is gone; M1's is deleted
       * when the connection is back, or expires). */
      tu_op rop;
      int rr = tu_release(&loop, probe, &rop);
      if (rr != 0 && rr != REDLOCK_ENOQUORUM)
        TEST_FAIL("release: %s", redlock_err_name(rr));
    }
    if (op.nodes[0].vote == REDLOCK_VOTE_ERR &&
        op.nodes[0].error == REDLOCK_ERESTARTED) {
      ASSERT_EQ(rc, REDLOCK_ENOQUORUM);
      refused = 1;
      break;
    }
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(5000))
      break;
    tu_run_for(&loop, 50);
  }
  fprintf(stderr, "replid: M1's vote refused %llu ms after it was a master "
          "again: %s\n", (unsigned long long)(harness_now_ms() - t0),
          op.nodes[0].errstr);
  ASSERT_EQ(refused, 1);
  ASSERT_EQ(redlock_lock_free(held), 0);
  ASSERT_EQ(redlock_lock_free(probe), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
