/* TLS (rediss://) against real TLS masters, with certificates made by the
 * openssl CLI at test time (harness_tls_dir):
 *  - acquire / extend / release at N=1 and N=3 over TLS;
 *  - a mixed cluster (two TLS masters, one plain);
 *  - a wrong CA: that master is down with OpenSSL's verify error, the
 *    others still reach the quorum;
 *  - a host name mismatch (certificate for another host, and a
 *    tls_server_name that the certificate does not carry);
 *  - tls_insecure accepts both (no verification);
 *  - mutual TLS: --tls-auth-clients yes refuses a client without a
 *    certificate with a clear error, and lets one with a certificate in;
 *  - a bad client key / missing CA file is EINVAL at client_new. */
#include "tutil.h"

#define N 3

static redlock_client_t *mk(uv_loop_t *loop, const char *const *addrs,
                            size_t n, redlock_client_config *cfg) {
  redlock_client_t *c = NULL;
  int rc;
  cfg->servers = addrs;
  cfg->n_servers = n;
  if (cfg->command_timeout_ms == 0)
    cfg->command_timeout_ms = 2000;
  if (cfg->connect_timeout_ms == 0)
    cfg->connect_timeout_ms = 3000;
  cfg->restart_guard_ms = -1;   /* brand-new servers */
  rc = redlock_client_new(loop, cfg, &c);
  if (rc != 0)
    TEST_FAIL("client_new: %s", redlock_last_error());
  return c;
}

/* One attempt at acquire + extend + release; returns the acquire status
 * and leaves the per-master result in op. */
static int cycle(uv_loop_t *loop, redlock_client_t *c, const char *key,
                 tu_op *op) {
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op o2;
  int st;
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  st = tu_acquire(loop, l, 10000, &once, op);
  if (st == 0) {
    ASSERT_EQ(tu_extend(loop, l, 20000, &o2), 0);
    ASSERT_GT(o2.validity_ms, 15000);
    ASSERT_EQ(tu_release(loop, l, &o2), 0);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
  return st;
}

/* An inspect waits for every master: node i's error once it answered or
 * failed (copied into buf). */
static void node_error(uv_loop_t *loop, redlock_client_t *c, unsigned i,
                       char *buf, size_t len) {
  redlock_lock_t *l;
  tu_op op;
  ASSERT_EQ(redlock_lock_new(c, "probe", 5, &l), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_inspect(l, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &op.done, 30000), 0);
  ASSERT_EQ(op.nodes[i].vote, REDLOCK_VOTE_ERR);
  snprintf(buf, len, "%s", op.errstr[i]);
  ASSERT_EQ(redlock_lock_free(l), 0);
}

static int contains(const char *s, const char *needle) {
  return s != NULL && strstr(s, needle) != NULL;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_client_config cfg;
  const char *addrs[N];
  tu_op op;
  char val[64];
  char val2[200];
  int i;

  tu_require_tls();
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++)
    srv[i].tls = 1;
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* N=1 over TLS: the key lands (read back over the plain admin port). */
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = harness_tls_file("ca.crt");
  addrs[0] = harness_tls_addr(&srv[0]);
  c = mk(&loop, addrs, 1, &cfg);
  {
    redlock_lock_t *l;
    redlock_acquire_opts once = {.wait_ms = -1};
    ASSERT_EQ(redlock_lock_new(c, "tls1", 4, &l), 0);
    ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
    ASSERT_EQ(harness_get(&srv[0], "tls1", val, sizeof(val)), 1);
    ASSERT_STR_EQ(val, redlock_lock_token(l));
    ASSERT_EQ(tu_extend(&loop, l, 20000, &op), 0);
    ASSERT_GT(harness_pttl(&srv[0], "tls1"), 15000);
    ASSERT_EQ(tu_release(&loop, l, &op), 0);
    ASSERT_EQ(harness_get(&srv[0], "tls1", val, sizeof(val)), 0);
    ASSERT_EQ(redlock_lock_free(l), 0);
  }
  tu_close_client(&loop, c);

  /* N=3 over TLS. */
  for (i = 0; i < N; i++)
    addrs[i] = harness_tls_addr(&srv[i]);
  c = mk(&loop, addrs, N, &cfg);
  ASSERT_EQ(cycle(&loop, c, "tls3", &op), 0);
  ASSERT_GE(op.yes, 2);   /* decided at the quorum */
  tu_close_client(&loop, c);

  /* Mixed: two TLS masters and one plain. */
  addrs[2] = harness_addr(&srv[2]);
  c = mk(&loop, addrs, N, &cfg);
  ASSERT_EQ(cycle(&loop, c, "mixed", &op), 0);
  ASSERT_GE(op.yes, 2);   /* decided at the quorum */
  tu_close_client(&loop, c);

  /* Wrong CA: every TLS master fails verification; the plain one answers.
   * With one TLS master only failing (the CA is right for the others, via
   * a server certificate from another CA... here: all TLS masters share a
   * CA, so give the client the other CA and a cluster of one TLS master
   * and two plain ones: the quorum holds without it). */
  addrs[0] = harness_tls_addr(&srv[0]);
  addrs[1] = harness_addr(&srv[1]);
  addrs[2] = harness_addr(&srv[2]);
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = harness_tls_file("other-ca.crt");
  c = mk(&loop, addrs, N, &cfg);
  node_error(&loop, c, 0, val2, sizeof(val2));
  if (!contains(val2, "certificate verify failed"))
    TEST_FAIL("wrong CA: \"%s\"", val2);
  fprintf(stderr, "wrong CA: %s\n", val2);
  ASSERT_EQ(cycle(&loop, c, "wrongca", &op), 0);
  tu_close_client(&loop, c);

  /* Host name mismatch: the name we verify is not in the certificate. */
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = harness_tls_file("ca.crt");
  cfg.tls_server_name = "db.example.invalid";
  c = mk(&loop, addrs, N, &cfg);
  node_error(&loop, c, 0, val2, sizeof(val2));
  if (!contains(val2, "certificate verify failed"))
    TEST_FAIL("host mismatch: \"%s\"", val2);
  fprintf(stderr, "host mismatch: %s\n", val2);
  ASSERT_EQ(cycle(&loop, c, "mismatch", &op), 0);
  tu_close_client(&loop, c);

  /* tls_insecure: the same mismatch is accepted (no verification). */
  cfg.tls_insecure = 1;
  c = mk(&loop, addrs, N, &cfg);
  ASSERT_EQ(cycle(&loop, c, "insecure", &op), 0);
  ASSERT_GE(op.yes, 2);   /* decided at the quorum */
  tu_close_client(&loop, c);

  /* Bad files are EINVAL at once, with a message naming the file. */
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = "/nonexistent/ca.crt";
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL);
  ASSERT(contains(redlock_last_error(), "/nonexistent/ca.crt"));
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = harness_tls_file("ca.crt");
  cfg.tls_cert_file = harness_tls_file("client.crt");
  cfg.tls_key_file = harness_tls_file("server.key");   /* not its key */
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL);
  ASSERT(contains(redlock_last_error(), "server.key"));
  fprintf(stderr, "bad key: %s\n", redlock_last_error());
  cfg.tls_key_file = NULL;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL);

  harness_loop_close(&loop, 5000);
  harness_stop_all();

  /* Mutual TLS: the masters require a client certificate. */
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < N; i++) {
    srv[i].tls = 1;
    srv[i].tls_auth_clients = "yes";
  }
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  for (i = 0; i < N; i++)
    addrs[i] = harness_tls_addr(&srv[i]);
  memset(&cfg, 0, sizeof(cfg));
  cfg.tls_ca_file = harness_tls_file("ca.crt");
  c = mk(&loop, addrs, N, &cfg);
  node_error(&loop, c, 0, val2, sizeof(val2));
  ASSERT(contains(val2, "TLS"));
  fprintf(stderr, "no client certificate: %s\n", val2);
  ASSERT_EQ(cycle(&loop, c, "mtls", &op), REDLOCK_ENOQUORUM);
  tu_close_client(&loop, c);
  cfg.tls_cert_file = harness_tls_file("client.crt");
  cfg.tls_key_file = harness_tls_file("client.key");
  c = mk(&loop, addrs, N, &cfg);
  ASSERT_EQ(cycle(&loop, c, "mtls", &op), 0);
  ASSERT_GE(op.yes, 2);   /* decided at the quorum */
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
