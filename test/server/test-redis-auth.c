/* Handshake: AUTH with an ACL user and SELECT of the URI's db. A master
 * with user "alice" (password "s3cret") and the default user disabled:
 *  - redis://alice:s3cret@host:port/3 acquires, and the key is in db 3;
 *  - the config's username/password apply to masters without credentials;
 *  - a wrong password leaves the node down with the server's error text,
 *    and acquisition fails at once (EIO vote), never hangs. */
#include "tutil.h"

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c = NULL;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config cfg;
  char uri[128];
  const char *servers[1] = {uri};
  char val[96];
  uint64_t t0;
  tu_op op;

  memset(srv, 0, sizeof(srv));
  srv[0].acl_user = "alice on >s3cret ~* &* +@all";
  srv[0].admin_user = "alice";
  srv[0].admin_pass = "s3cret";
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 1;
  cfg.restart_guard_ms = -1;
  cfg.command_timeout_ms = 2000;
  cfg.connect_timeout_ms = 2000;

  /* ACL user in the URI, db 3. */
  snprintf(uri, sizeof(uri), "redis://alice:s3cret@127.0.0.1:%d/3",
           srv[0].port);
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  tu_wait_up(&loop, c, 1, 10000);
  ASSERT_EQ(redlock_lock_new(c, "authed", 6, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(harness_get(&srv[0], "authed", val, sizeof(val)), 0);  /* db 0 */
  ASSERT_EQ(harness_cmdf(&srv[0], val, sizeof(val), "EVAL %s 1 authed",
                         "redis.call('select',3) "
                         "return redis.call('get',KEYS[1])"),
            0);
  ASSERT_STR_EQ(val, redlock_lock_token(l));                        /* db 3 */
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* Credentials from the config. */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  snprintf(uri, sizeof(uri), "127.0.0.1:%d", srv[0].port);
  cfg.username = "alice";
  cfg.password = "s3cret";
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  tu_wait_up(&loop, c, 1, 10000);
  ASSERT_EQ(redlock_lock_new(c, "authed", 6, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(harness_get(&srv[0], "authed", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, redlock_lock_token(l));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* Wrong password: the node stays down, acquisition fails at once. */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  cfg.password = "wrong";
  /* Long timeouts: "at once" is then far from any of them. */
  cfg.command_timeout_ms = 10000;
  cfg.connect_timeout_ms = 10000;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "authed", 6, &l), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
  ASSERT_LT(op.cb_ms - t0, (uint64_t)harness_bound_ms(500));
  ASSERT(strstr(op.errstr[0], "WRONGPASS") != NULL);
  /* The first attempt queued behind the handshake: the server's error. */
  ASSERT(op.nodes[0].error == REDLOCK_ESERVER ||
         op.nodes[0].error == REDLOCK_EIO);
  fprintf(stderr, "wrong password: %s: %s\n",
          redlock_err_name(op.nodes[0].error), op.errstr[0]);
  ASSERT_EQ(redlock_client_n_up(c), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
