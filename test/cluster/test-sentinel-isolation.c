/* A sentinel group counts only when its primary refuses writes once cut
 * off from its replicas (issue 29, item 11).
 *
 * N = 3: a sentinel group G (primary P, three replicas, three sentinels) and
 * plain masters M1, M2; M2 is down, so every grant needs G's vote. P runs
 * without min-replicas-to-write (Redis's default, 0): after a partition
 * it would keep taking writes while the other sentinels promote the
 * replica, and two clients could each complete a quorum (one through P,
 * one through the new primary).
 *  a) a client refuses to count G: the acquisition fails, G's result
 *     names min-replicas-to-write, and on_warning said so;
 *  b) with ?isolation=unchecked in G's URI (the operator's override) a
 *     client counts G: granted;
 *  c) with min-replicas-to-write 1 and min-replicas-max-lag 2 set on P
 *     (CONFIG SET): still not counted, because P has three replicas (the
 *     sentinels list them all): a partition leaving P with one of them
 *     and promoting another, which the third re-syncs to, gives two
 *     primaries that each have an acknowledging replica (review item 1:
 *     counted only when 2 x min-replicas-to-write >= replicas);
 *  c2) with min-replicas-to-write 2 (2 x 2 >= 3): a fresh client counts G
 *     at once, and the client of a) once its periodic re-check read the
 *     new settings;
 *  d) the setting switched off again at run time: that client stops
 *     counting G after its next re-check;
 *  e) min-replicas-to-write 1 again, and two replicas die (the primary
 *     still takes writes with the third): a fresh client still counts
 *     three replicas (the sentinels list down ones; the primary's
 *     connected_slaves, 1 now, is what a partition would leave it) and
 *     refuses G. */
#include <string.h>

#include "tutil.h"

static harness_server data[4];
static harness_server sent[3];
static harness_server plain[2];
static char warnings[8192];

static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  size_t n = strlen(warnings);
  (void)c;
  (void)arg;
  fprintf(stderr, "warning: %s\n", msg);
  snprintf(warnings + n, sizeof(warnings) - n, "%s\n", msg);
}

static redlock_client_t *client(uv_loop_t *loop, const char *group) {
  const char *addrs[3];
  redlock_client_config cfg = {.on_warning = on_warning};
  addrs[0] = group;
  addrs[1] = harness_addr(&plain[0]);
  addrs[2] = harness_addr(&plain[1]);
  return tu_client_at(loop, addrs, 3, &cfg, 2);
}

/* One attempt; the status, and G's result in op. */
static int try_once(uv_loop_t *loop, redlock_client_t *c, tu_op *op) {
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  int rc;
  ASSERT_EQ(redlock_lock_new(c, "iso-key", 7, &l), 0);
  rc = tu_acquire(loop, l, 2000, &once, op);
  if (rc == 0) {
    tu_op rel;
    ASSERT_EQ(tu_release(loop, l, &rel), 0);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
  return rc;
}

/* Tries until the result is `want` (0 or not 0) or the bound passes;
 * returns how long it took, or -1. */
static int64_t until(uv_loop_t *loop, redlock_client_t *c, int want_ok,
                     int64_t bound_ms, tu_op *op) {
  uint64_t t0 = harness_now_ms();
  for (;;) {
    int rc = try_once(loop, c, op);
    if ((rc == 0) == want_ok)
      return (int64_t)(harness_now_ms() - t0);
    if (harness_now_ms() - t0 > (uint64_t)bound_ms)
      return -1;
    tu_run_for(loop, 100);
  }
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *ca, *cb, *cc;
  char group[512], unchecked[600], buf[128];
  tu_op op;
  int rc;
  int64_t took;

  memset(data, 0, sizeof(data));
  memset(sent, 0, sizeof(sent));
  memset(plain, 0, sizeof(plain));
  harness_start(data, 1);
  data[1].replicaof = data[0].port;
  data[2].replicaof = data[0].port;
  data[3].replicaof = data[0].port;
  harness_start(&data[1], 3);
  harness_sentinel_start(sent, 3, "iso", &data[0], 3);
  harness_start(plain, 2);
  snprintf(group, sizeof(group), "%s", harness_sentinel_addr(sent, 3, "iso"));
  snprintf(unchecked, sizeof(unchecked), "%s%cisolation=unchecked", group,
           strchr(group, '?') != NULL ? '&' : '?');
  harness_kill(&plain[1]);   /* every grant needs G */
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* a) not counted, and said why */
  ca = client(&loop, group);
  rc = try_once(&loop, ca, &op);
  fprintf(stderr, "a) min-replicas-to-write 0: %s; G: %s\n",
          redlock_err_name(rc), op.errstr[0]);
  ASSERT_NE(rc, 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  ASSERT_NOT_NULL(strstr(op.errstr[0], "min-replicas-to-write 0"));
  ASSERT_NOT_NULL(strstr(op.errstr[0], "isolation=unchecked"));
  ASSERT_NOT_NULL(strstr(warnings, "min-replicas-to-write"));
  ASSERT_EQ(harness_dbsize(&data[0]), 0);   /* nothing left behind */

  /* b) the operator's override */
  cb = client(&loop, unchecked);
  rc = try_once(&loop, cb, &op);
  fprintf(stderr, "b) ?isolation=unchecked: %s\n", redlock_err_name(rc));
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);

  /* c) the setting on the primary (and the replicas, for a failover) */
  {
    int i;
    for (i = 0; i < 4; i++) {
      ASSERT_EQ(harness_cmdf(&data[i], buf, sizeof(buf),
                             "CONFIG SET min-replicas-max-lag 2"), 0);
      ASSERT_EQ(harness_cmdf(&data[i], buf, sizeof(buf),
                             "CONFIG SET min-replicas-to-write 1"), 0);
    }
  }
  /* P counts its good replicas once a second: wait until it takes a
   * write again. */
  {
    uint64_t end = harness_now_ms() + (uint64_t)harness_bound_ms(5000);
    while (harness_cmdf(&data[0], buf, sizeof(buf), "SET iso-probe 1") != 0 ||
           strncmp(buf, "OK", 2) != 0) {
      if (harness_now_ms() > end)
        TEST_FAIL("the primary never took a write with its replica: %s",
                  buf);
      tu_run_for(&loop, 20);
    }
    ASSERT_EQ(harness_cmdf(&data[0], buf, sizeof(buf), "DEL iso-probe"), 0);
  }
  /* three replicas, min-replicas-to-write 1: two sides can each have one */
  cc = client(&loop, group);
  rc = try_once(&loop, cc, &op);
  fprintf(stderr, "c) min-replicas-to-write 1, max-lag 2, 3 replicas: a "
          "fresh client: %s (G: %s)\n", redlock_err_name(rc), op.errstr[0]);
  ASSERT_NE(rc, 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  ASSERT_NOT_NULL(strstr(op.errstr[0], "3 replicas"));
  ASSERT_NOT_NULL(strstr(op.errstr[0], "set it >= 2"));
  ASSERT_EQ(harness_dbsize(&data[0]), 0);
  tu_close_client(&loop, cc);

  /* c2) min-replicas-to-write 2: 2 x 2 >= 3, one side at most */
  {
    int i;
    for (i = 0; i < 4; i++)
      ASSERT_EQ(harness_cmdf(&data[i], buf, sizeof(buf),
                             "CONFIG SET min-replicas-to-write 2"), 0);
  }
  cc = client(&loop, group);
  rc = try_once(&loop, cc, &op);
  fprintf(stderr, "c2) min-replicas-to-write 2, 3 replicas: a fresh client: "
          "%s (G: %s)\n", redlock_err_name(rc), op.errstr[0]);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
  /* The client of a) re-reads them every 3 s. */
  took = until(&loop, ca, 1, harness_bound_ms(10000), &op);
  fprintf(stderr, "c2) the client of a) counted G after %lld ms\n",
          (long long)took);
  ASSERT_GE(took, 0);

  /* d) switched off at run time: refused again after a re-check */
  ASSERT_EQ(harness_cmdf(&data[0], buf, sizeof(buf),
                         "CONFIG SET min-replicas-to-write 0"), 0);
  took = until(&loop, ca, 0, harness_bound_ms(10000), &op);
  fprintf(stderr, "d) off again: refused after %lld ms (G: %s)\n",
          (long long)took, op.errstr[0]);
  ASSERT_GE(took, 0);
  ASSERT_NOT_NULL(strstr(op.errstr[0], "min-replicas-to-write 0"));

  /* e) the count is the sentinels' list, not what the primary sees */
  ASSERT_EQ(harness_cmdf(&data[0], buf, sizeof(buf),
                         "CONFIG SET min-replicas-to-write 1"), 0);
  harness_kill(&data[2]);
  harness_kill(&data[3]);
  {
    uint64_t end = harness_now_ms() + (uint64_t)harness_bound_ms(10000);
    for (;;) {   /* the primary sees one replica and takes writes */
      if (harness_cmdf(&data[0], buf, sizeof(buf), "INFO replication") ==
              0 &&
          strstr(buf, "connected_slaves:1") != NULL &&
          harness_cmdf(&data[0], buf, sizeof(buf), "SET iso-probe 1") == 0 &&
          strncmp(buf, "OK", 2) == 0)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("the primary did not settle on one replica: %s", buf);
      tu_run_for(&loop, 50);
    }
    ASSERT_EQ(harness_cmdf(&data[0], buf, sizeof(buf), "DEL iso-probe"), 0);
  }
  tu_close_client(&loop, cc);
  cc = client(&loop, group);
  rc = try_once(&loop, cc, &op);
  fprintf(stderr, "e) two replicas down (connected_slaves 1), "
          "min-replicas-to-write 1: a fresh client: %s (G: %s)\n",
          redlock_err_name(rc), op.errstr[0]);
  ASSERT_NE(rc, 0);
  ASSERT_NOT_NULL(strstr(op.errstr[0], "3 replicas"));
  ASSERT_EQ(harness_dbsize(&data[0]), 0);

  tu_close_client(&loop, cc);
  tu_close_client(&loop, cb);
  tu_close(&loop, ca);
  harness_stop_all();
  return 0;
}
