/* A Redis Cluster over TLS (issue 22, item 1: rediss+cluster://): the
 * seed is reached over TLS, the topology's primaries by their TLS ports
 * (CLUSTER SHARDS' tls-port), every connection verified against the CA. A
 * lock is taken, found on the primary that serves its slot, and released.
 */
#include "tutil.h"

#define P 2

int main(void) {
  harness_server srv[P];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg;
  redlock_lock_t *l;
  const char *addr[1];
  char uri[128], key[64];
  tu_op op;
  int i, owner = -1;
  tu_require_tls();
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < P; i++) {
    srv[i].cluster = 1;
    srv[i].tls = 1;
  }
  harness_start(srv, P);
  harness_cluster_make(srv, P, P);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  snprintf(uri, sizeof(uri), "rediss+cluster://127.0.0.1:%d",
           srv[0].tls_port);
  addr[0] = uri;
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = harness_tls_file("ca.crt");
  c = tu_client_at(&loop, addr, 1, &cfg, 1);
  /* A key on the second primary: reached over TLS from the topology. */
  for (i = 0; i < 1000 && owner != 1; i++) {
    snprintf(key, sizeof(key), "tls-%d", i);
    owner = harness_cluster_owner(srv, P, key);
  }
  ASSERT_EQ(owner, 1);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, NULL, &op), 0);
  {
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d", srv[1].tls_port);
    ASSERT_STR_EQ(op.nodes[0].node, want);
  }
  ASSERT_EQ(tu_count_holding(&srv[1], 1, key, redlock_lock_token(l)), 1);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
