/* A release that could not reach a master is kept and sent after that
 * master's next handshake (node.c, 3.), so a lock that was released does
 * not stay on a master for the rest of its ttl. N = 3 through the fault
 * proxy; the lock (ttl 60 s) is held on all three.
 *
 *  a) Master 3's connections are reset (the proxy closes them with RST
 *     and resets new ones) just before the release: the release succeeds
 *     on masters 1 and 2, and fails on master 3 with a connection error.
 *     The key is still there on master 3.
 *  b) The proxy lets master 3 through again: after the client's
 *     reconnect and handshake, the kept release deletes the key there,
 *     long before its ttl (bounded wait on the key's absence).
 *  c) A kept release never deletes another owner's key: the same with a
 *     new owner taking the key on master 3 (planted while the path was
 *     down): it keeps its key. */
#include "tutil.h"

#define N 3

static harness_server srv[N];

typedef struct gone_arg {
  uv_loop_t *loop;
  const char *key;
} gone_arg;

/* The key is gone on master 3; runs the loop a little meanwhile. */
static int key_gone(void *arg) {
  gone_arg *g = arg;
  char val[128];
  tu_run_for(g->loop, 5);
  return harness_get(&srv[2], g->key, val, sizeof(val)) == 0;
}

static void release_while_reset(uv_loop_t *loop, harness_proxy *px,
                                redlock_client_t *c, redlock_lock_t *l) {
  tu_op op;
  harness_proxy_cmd(px, 2, "reset");
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
  ASSERT_EQ(op.nodes[1].vote, REDLOCK_VOTE_YES);
  ASSERT_EQ(op.nodes[2].vote, REDLOCK_VOTE_ERR);
  fprintf(stderr, "release on master 3: %s %s\n",
          redlock_err_name(op.nodes[2].error), op.errstr[2]);
  (void)c;
}

int main(int argc, char **argv) {
  harness_proxy px;
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config cfg = {.command_timeout_ms = 500,
                               .reconnect_min_ms = 50,
                               .reconnect_max_ms = 200,
                               .restart_guard_ms = -1};
  const char *addrs[N];
  gone_arg g = {&loop, "kept"};
  char val[128];
  tu_op op;

  if (argc < 2)
    TEST_FAIL("usage: test-fault-kept-release PATH-TO-redlock-faultproxy");
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  harness_proxy_start(&px, argv[1], srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  harness_proxy_addrs(&px, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  tu_wait_up(&loop, c, N, 10000);
  ASSERT_EQ(redlock_lock_new(c, "kept", 4, &l), 0);

  /* a) */
  ASSERT_EQ(tu_acquire(&loop, l, 60000, &once, &op), 0);
  tu_drain(&loop, c);
  ASSERT_EQ(tu_count_holding(srv, N, "kept", redlock_lock_token(l)), N);
  release_while_reset(&loop, &px, c, l);
  ASSERT_EQ(harness_get(&srv[0], "kept", val, sizeof(val)), 0);
  ASSERT_EQ(harness_get(&srv[1], "kept", val, sizeof(val)), 0);
  ASSERT_EQ(harness_get(&srv[2], "kept", val, sizeof(val)), 1);

  /* b) */
  harness_proxy_cmd(&px, 2, "normal");
  if (harness_wait_for(key_gone, &g, (uint64_t)harness_bound_ms(5000)) != 0)
    TEST_FAIL("b) the release was not sent again after master 3's "
              "handshake: the key stays there for its ttl (%lld ms left)",
              (long long)harness_pttl(&srv[2], "kept"));

  /* c) */
  ASSERT_EQ(tu_acquire(&loop, l, 60000, &once, &op), 0);
  tu_drain(&loop, c);
  ASSERT_EQ(tu_count_holding(srv, N, "kept", redlock_lock_token(l)), N);
  release_while_reset(&loop, &px, c, l);
  ASSERT_EQ(harness_set(&srv[2], "kept", "another-owner", 60000), 0);
  harness_proxy_cmd(&px, 2, "normal");
  tu_wait_up(&loop, c, N, 10000);
  tu_drain(&loop, c);   /* whatever was kept went out and was answered */
  ASSERT_EQ(harness_get(&srv[2], "kept", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, "another-owner");

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(&loop, c);
  harness_loop_close(&loop, 5000);
  harness_stop_all();
  return 0;
}
