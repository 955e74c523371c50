/* Handshake failures (AUTH, SELECT, INFO) and what they mean for a master.
 *
 * Each connection starts with a handshake: AUTH (when credentials are
 * given), SELECT (when the URI names a db), SCRIPT LOAD, INFO server.
 * Commands issued while it runs are pipelined behind it. A handshake step
 * that fails must decide the master's state before any lock command
 * queued behind it counts:
 *
 *  a) SELECT fails (db 99 on a server with 16 dbs): the master is DOWN,
 *     with the handshake's own error text ("SELECT 99: ERR DB index is
 *     out of range"). A lock command queued behind the failed SELECT must
 *     not run in db 0 (it would take a lock nobody can release: every
 *     later release is refused while the node stays down). An acquire
 *     fails with ENOQUORUM and nothing is left in db 0.
 *  b) AUTH fails (wrong password): the master is DOWN and the node's error
 *     is the AUTH's own ("WRONGPASS ..."), not the NOAUTH that the SET
 *     queued behind it gets; the password is never shown.
 *  c) AUTH to a server without a password ("ERR AUTH <password> called
 *     without any password configured ..."): decided behaviour: a warning
 *     at most, not a failure: the master comes up and the acquire works.
 *  d) INFO denied (an ACL user without +info): the master's age is
 *     unknown. Unknown must count as "restarted now", never as "very
 *     old": with the default restart guard the master's yes is an error
 *     vote ERESTARTED; with the guard off the master works normally.
 *
 * The first acquisition of each case is issued right after
 * redlock_client_new, so it is queued behind the handshake (the case where
 * ignoring a handshake error does damage); later ones find the node in
 * whatever state the handshake left it. */
#include "tutil.h"

static int contains(const char *s, const char *needle) {
  return s != NULL && strstr(s, needle) != NULL;
}

/* A client on the single master `uri` (credentials in the URI or in
 * user/pass). guard_ms as in the config. Does not wait for the node. */
static redlock_client_t *client_on(uv_loop_t *loop, const char *uri,
                                   const char *user, const char *pass,
                                   int guard_ms) {
  const char *servers[1];
  redlock_client_config cfg;
  redlock_client_t *c = NULL;
  int rc;
  servers[0] = uri;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 1;
  cfg.username = user;
  cfg.password = pass;
  cfg.restart_guard_ms = guard_ms;
  cfg.command_timeout_ms = 1000;
  cfg.connect_timeout_ms = 2000;
  cfg.reconnect_min_ms = 10;
  cfg.reconnect_max_ms = 100;
  rc = redlock_client_new(loop, &cfg, &c);
  if (rc != 0)
    TEST_FAIL("client_new: %s: %s", redlock_err_name(rc),
              redlock_last_error());
  return c;
}

static void show(const char *what, const tu_op *op) {
  fprintf(stderr, "%s: status %s, vote %d, error %s, \"%s\"\n", what,
          redlock_err_name(op->status), (int)op->nodes[0].vote,
          redlock_err_name(op->nodes[0].error), op->errstr[0]);
}

/* a) SELECT of a db that does not exist. */
static void case_select(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  char uri[96];
  tu_op op;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d/99", srv[0].port);
  c = client_on(&loop, uri, NULL, NULL, -1);
  ASSERT_EQ(redlock_lock_new(c, "hs-select", 9, &l), 0);
  /* Twice: queued behind the first handshake, then once the node has
   * had time to fail (down, or reconnecting with the same result). */
  for (i = 0; i < 2; i++) {
    tu_acquire(&loop, l, 10000, &once, &op);
    show("SELECT 99", &op);
    ASSERT_EQ(op.status, REDLOCK_ENOQUORUM);
    ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
    ASSERT(contains(op.errstr[0], "SELECT 99"));
    ASSERT(contains(op.errstr[0], "DB index is out of range"));
    ASSERT_EQ(harness_dbsize(&srv[0]), 0);   /* nothing landed in db 0 */
    tu_run_for(&loop, 200);
    ASSERT_EQ(redlock_client_n_up(c), 0);
    ASSERT_EQ(harness_dbsize(&srv[0]), 0);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
}

/* b) A wrong password (requirepass), with and without a username. */
static void case_wrong_password(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  char uri[96];
  char buf[128];
  tu_op op;
  int with_user;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf),
                         "CONFIG SET requirepass right-pw"), 0);
  ASSERT_STR_EQ(buf, "OK");
  srv[0].admin_user = "default";   /* admin commands AUTH from now on */
  srv[0].admin_pass = "right-pw";
  ASSERT_EQ(harness_dbsize(&srv[0]), 0);
  snprintf(uri, sizeof(uri), "127.0.0.1:%d", srv[0].port);
  for (with_user = 0; with_user < 2; with_user++) {
    ASSERT_EQ(uv_loop_init(&loop), 0);
    c = client_on(&loop, uri, with_user ? "default" : NULL, "wrong-pw", -1);
    ASSERT_EQ(redlock_lock_new(c, "hs-auth", 7, &l), 0);
    for (i = 0; i < 2; i++) {
      tu_acquire(&loop, l, 10000, &once, &op);
      show(with_user ? "AUTH default wrong-pw" : "AUTH wrong-pw", &op);
      ASSERT_EQ(op.status, REDLOCK_ENOQUORUM);
      ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
      /* The AUTH's own error, not the NOAUTH of the SET behind it. */
      ASSERT(!contains(op.errstr[0], "NOAUTH"));
      ASSERT(contains(op.errstr[0], "AUTH"));
      ASSERT(contains(op.errstr[0], "WRONGPASS") ||
             contains(op.errstr[0], "invalid"));
      ASSERT(!contains(op.errstr[0], "wrong-pw"));   /* never shown */
      tu_run_for(&loop, 200);
      ASSERT_EQ(redlock_client_n_up(c), 0);
    }
    ASSERT_EQ(harness_dbsize(&srv[0]), 0);
    ASSERT_EQ(redlock_lock_free(l), 0);
    tu_close(&loop, c);
  }
  harness_stop_all();
}

/* c) A password given for a server that has none: a warning, not a
 * failure. */
static void case_auth_without_password(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  char uri[96];
  char val[96];
  tu_op op;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  snprintf(uri, sizeof(uri), "127.0.0.1:%d", srv[0].port);
  c = client_on(&loop, uri, NULL, "unneeded-pw", -1);
  /* Queued behind the handshake; the master then stays up. */
  ASSERT_EQ(redlock_lock_new(c, "hs-nopass", 9, &l), 0);
  tu_acquire(&loop, l, 10000, &once, &op);
  show("AUTH without a password configured", &op);
  ASSERT_EQ(op.status, 0);
  tu_wait_up(&loop, c, 1, 10000);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  tu_run_for(&loop, 100);
  ASSERT_EQ(redlock_client_n_up(c), 1);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(harness_get(&srv[0], "hs-nopass", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, redlock_lock_token(l));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(harness_get(&srv[0], "hs-nopass", val, sizeof(val)), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
}

static int key_gone(void *arg) {
  char val[96];
  return harness_get(arg, "hs-noinfo", val, sizeof(val)) == 0;
}

/* d) INFO denied by ACL: the master's age is unknown. */
static void case_info_denied(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  char uri[128];
  char val[96];
  tu_op op;
  int i;

  memset(srv, 0, sizeof(srv));
  srv[0].acl_user = "bob on >bob-pw ~* &* +@all -info";
  srv[0].admin_user = "bob";
  srv[0].admin_pass = "bob-pw";
  harness_start(srv, 1);
  ASSERT_EQ(harness_cmdf(&srv[0], val, sizeof(val), "INFO server"), 0);
  ASSERT(contains(val, "NOPERM"));   /* the setup: INFO is denied */
  snprintf(uri, sizeof(uri), "redis://bob:bob-pw@127.0.0.1:%d",
           srv[0].port);

  /* Default guard (the ttl, 1 s): the master may have restarted just now
   * for all we know, so its yes does not count. Queued behind the
   * handshake, then again right after it completed. */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = client_on(&loop, uri, NULL, NULL, 0);
  ASSERT_EQ(redlock_lock_new(c, "hs-noinfo", 9, &l), 0);
  for (i = 0; i < 2; i++) {
    tu_acquire(&loop, l, 1000, &once, &op);
    show("INFO denied, default guard", &op);
    ASSERT_NE(op.status, 0);
    ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
    ASSERT_EQ(op.nodes[0].error, REDLOCK_ERESTARTED);
    /* The guarded master's copy is released again. */
    ASSERT_EQ(harness_wait_for(key_gone, &srv[0], 5000), 0);
    if (i == 0)
      tu_wait_up(&loop, c, 1, 10000);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* Guard off: INFO is not needed, the master works normally. */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = client_on(&loop, uri, NULL, NULL, -1);
  tu_wait_up(&loop, c, 1, 10000);
  ASSERT_EQ(redlock_lock_new(c, "hs-noinfo", 9, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(harness_get(&srv[0], "hs-noinfo", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, redlock_lock_token(l));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(harness_get(&srv[0], "hs-noinfo", val, sizeof(val)), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
}

int main(void) {
  case_select();
  case_wrong_password();
  case_auth_without_password();
  case_info_denied();
  return 0;
}
