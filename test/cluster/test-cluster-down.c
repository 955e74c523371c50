/* A cluster that cannot serve (issue 22): a slot that no primary serves
 * answers "CLUSTERDOWN Hash slot not served", and a cluster whose state
 * is fail (a primary died, no replica to promote) answers CLUSTERDOWN for
 * every key. Either way the master's vote is an error with the server's
 * words, at once: no hang, no wait for a deadline. The topology problem
 * is reported by redlock_client_master_info(). And a seed that is down
 * costs nothing while another (?seed=) answers: the first acquisition
 * succeeds. */
#include "tutil.h"

#define P 2

static harness_server srv[P];

typedef struct state_check {
  const harness_server *s;
} state_check;

static int cluster_failed(void *arg) {
  state_check *c = arg;
  char buf[1024];
  return harness_cmdf(c->s, buf, sizeof(buf), "CLUSTER INFO") == 0 &&
         strstr(buf, "cluster_state:fail") != NULL;
}

static void expect_down(uv_loop_t *loop, redlock_client_t *c,
                        const char *key, const char *words) {
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_lock_t *l;
  char why[512];
  tu_op op;
  uint64_t t0;
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(loop, l, 5000, &once, &op), REDLOCK_ENOQUORUM);
  ASSERT_LT(harness_now_ms() - t0, (uint64_t)harness_bound_ms(1000));
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  if (strstr(op.nodes[0].errstr, words) == NULL)
    TEST_FAIL("%s: the error says \"%s\", not \"%s\"", key,
              op.nodes[0].errstr, words);
  {
    redlock_result r;
    memset(&r, 0, sizeof(r));
    r.status = op.status;
    r.n_nodes = op.n_nodes;
    r.nodes = op.nodes;
    r.quorum = 1;
    redlock_result_explain(&r, why, sizeof(why));
    if (strstr(why, words) == NULL)
      TEST_FAIL("explain: %s", why);
    fprintf(stderr, "down: %s -> %s\n", key, why);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_master_info mi;
  redlock_lock_t *ok;
  const char *addr[1];
  state_check sc;
  char key[32], buf[64];
  unsigned slot;
  tu_op op;
  int i, owner;
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < P; i++)
    srv[i].cluster = 1;
  harness_start(srv, P);
  harness_cluster_make(srv, P, P);
  for (i = 0; i < P; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "CONFIG SET "
                           "cluster-require-full-coverage no"), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  addr[0] = harness_cluster_addr(&srv[0]);
  c = tu_client_at(&loop, addr, 1, NULL, 1);

  /* 1. One slot that no primary serves; the others still work. */
  snprintf(key, sizeof(key), "orphan");
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "CLUSTER KEYSLOT %s",
                         key), 0);
  slot = (unsigned)strtoul(buf, NULL, 10);
  owner = harness_cluster_owner(srv, P, key);
  ASSERT_EQ(harness_cmdf(&srv[owner], buf, sizeof(buf),
                         "CLUSTER DELSLOTS %u", slot), 0);
  ASSERT_STR_EQ(buf, "OK");
  expect_down(&loop, c, key, "CLUSTERDOWN");
  ASSERT_EQ(redlock_lock_new(c, "still-fine", 10, &ok), 0);
  ASSERT_EQ(tu_acquire(&loop, ok, 5000, NULL, &op), 0);
  ASSERT_EQ(tu_release(&loop, ok, &op), 0);
  {
    /* The first seed refuses connections; the second is a node. */
    static char seeds[128];
    const char *s2[1];
    redlock_client_t *c2;
    redlock_lock_t *l2;
    redlock_acquire_opts once = {.wait_ms = -1};
    snprintf(seeds, sizeof(seeds), "redis+cluster://127.0.0.1:%d?seed="
             "127.0.0.1:%d", harness_free_port(), srv[1].port);
    s2[0] = seeds;
    c2 = tu_client_at(&loop, s2, 1, NULL, 0);
    ASSERT_EQ(redlock_lock_new(c2, "seeded", 6, &l2), 0);
    ASSERT_EQ(tu_acquire(&loop, l2, 5000, &once, &op), 0);
    ASSERT_EQ(tu_release(&loop, l2, &op), 0);
    ASSERT_EQ(redlock_lock_free(l2), 0);
    tu_close_client(&loop, c2);
  }

  /* 2. The whole cluster down: a primary died and nothing replaces it;
   * with full coverage required again every key is refused. */
  for (i = 0; i < P; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "CONFIG SET "
                           "cluster-require-full-coverage yes"), 0);
  harness_kill(&srv[1]);
  sc.s = &srv[0];
  if (harness_wait_for(cluster_failed, &sc,
                       (uint64_t)harness_bound_ms(20000)) != 0)
    TEST_FAIL("the cluster did not see its primary fail");
  for (i = 0; i < 50; i++) {
    snprintf(key, sizeof(key), "k-%d", i);
    if (harness_cluster_owner(srv, P, key) == 0)
      break;
  }
  expect_down(&loop, c, key, "CLUSTERDOWN");
  ASSERT_EQ(redlock_client_master_info(c, 0, &mi), 0);
  fprintf(stderr, "down: master_info problem: \"%s\"\n", mi.problem);
  ASSERT_EQ(redlock_lock_free(ok), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
