/* Bad input is refused with EINVAL (or the documented code) and a message,
 * never a crash and never a half-done operation. */
#include "tutil.h"

static void expect(int rc, int want, const char *what) {
  if (rc != want)
    TEST_FAIL("%s: got %s, want %s", what, redlock_err_name(rc),
              redlock_err_name(want));
  if (want != 0 && strlen(redlock_last_error()) == 0)
    TEST_FAIL("%s: no message", what);
  fprintf(stderr, "ok %-40s %s: %s\n", what, redlock_err_name(rc),
          redlock_last_error());
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c = NULL;
  redlock_lock_t *l = NULL;
  redlock_client_config cfg;
  const char *good[1];
  const char *bad_uri[1] = {"redis://host:99999"};
  const char *null_srv[2] = {NULL, NULL};
  const char *three[3];
  tu_op op;
  char big[100];

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  good[0] = harness_addr(&srv[0]);
  three[0] = three[1] = three[2] = good[0];

  memset(&cfg, 0, sizeof(cfg));
  expect(redlock_client_new(&loop, &cfg, NULL), REDLOCK_EINVAL, "out NULL");
  expect(redlock_client_new(NULL, &cfg, &c), REDLOCK_EINVAL, "loop NULL");
  expect(redlock_client_new(&loop, NULL, &c), REDLOCK_EINVAL, "cfg NULL");
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "N = 0");
  cfg.servers = good;
  cfg.n_servers = 0;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "n_servers 0");
  cfg.servers = null_srv;
  cfg.n_servers = 2;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "NULL server");
  cfg.servers = bad_uri;
  cfg.n_servers = 1;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "bad URI");
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "99999"));
  cfg.servers = three;
  cfg.n_servers = 3;
  cfg.quorum = 4;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "quorum > N");
  cfg.quorum = 1;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL,
         "quorum < majority");
  cfg.quorum = 0;
  cfg.drift_factor = -1;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "drift < 0");
  cfg.drift_factor = 0;
  cfg.command_timeout_ms = -5;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL,
         "negative timeout");
  cfg.command_timeout_ms = 0;
  cfg.reconnect_min_ms = 500;
  cfg.reconnect_max_ms = 100;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL,
         "reconnect min > max");
  cfg.reconnect_min_ms = 0;
  cfg.reconnect_max_ms = 0;
  cfg.username = "u";
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL,
         "user without password");
  cfg.username = NULL;
  cfg.n_servers = REDLOCK_MAX_SERVERS + 1;
  expect(redlock_client_new(&loop, &cfg, &c), REDLOCK_EINVAL, "N too big");
  ASSERT_NULL(c);
  /* Nothing was created: the loop has no handle. */
  ASSERT_EQ(uv_loop_alive(&loop), 0);

  expect(redlock_client_close(NULL, NULL, NULL), REDLOCK_EINVAL,
         "close NULL");

  c = tu_client(&loop, srv, 1, NULL, 1);
  expect(redlock_lock_new(c, "k", 1, NULL), REDLOCK_EINVAL, "lock out NULL");
  expect(redlock_lock_new(NULL, "k", 1, &l), REDLOCK_EINVAL, "client NULL");
  expect(redlock_lock_new(c, NULL, 1, &l), REDLOCK_EINVAL, "resource NULL");
  expect(redlock_lock_new(c, "k", 0, &l), REDLOCK_EINVAL, "empty key");
  expect(redlock_lock_new(c, big, (size_t)REDLOCK_MAX_KEY + 1, &l),
         REDLOCK_EINVAL, "key too long");
  ASSERT_NULL(l);
  ASSERT_EQ(redlock_lock_new(c, "bad-input", 9, &l), 0);
  expect(redlock_lock_acquire(NULL, 1000, NULL, tu_cb, &op), REDLOCK_EINVAL,
         "acquire NULL lock");
  expect(redlock_lock_acquire(l, 0, NULL, tu_cb, &op), REDLOCK_EINVAL,
         "ttl 0");
  expect(redlock_lock_acquire(l, -1, NULL, tu_cb, &op), REDLOCK_EINVAL,
         "ttl < 0");
  expect(redlock_lock_acquire(l, (int64_t)REDLOCK_MAX_TTL_MS + 1, NULL,
                              tu_cb, &op),
         REDLOCK_EINVAL, "ttl beyond PX limit");
  expect(redlock_lock_acquire(l, 1000, NULL, NULL, &op), REDLOCK_EINVAL,
         "acquire cb NULL");
  expect(redlock_lock_extend(l, 1000, tu_cb, &op), REDLOCK_ENOTHELD,
         "extend unheld");
  expect(redlock_lock_release(l, tu_cb, &op), REDLOCK_ENOTHELD,
         "release unheld");
  expect(redlock_lock_extend(NULL, 1000, tu_cb, &op), REDLOCK_EINVAL,
         "extend NULL");
  expect(redlock_lock_release(NULL, tu_cb, &op), REDLOCK_EINVAL,
         "release NULL");
  expect(redlock_lock_free(NULL), REDLOCK_EINVAL, "free NULL");
  /* Nothing half-done: no key was written by the refused calls. */
  ASSERT_EQ(harness_dbsize(&srv[0]), 0);

  /* Busy: a second operation while one is in flight. */
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_acquire(l, 10000, NULL, tu_cb, &op), 0);
  expect(redlock_lock_acquire(l, 1000, NULL, tu_cb, &op), REDLOCK_EBUSY,
         "acquire while acquiring");
  expect(redlock_lock_free(l), REDLOCK_EBUSY, "free while acquiring");
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  ASSERT_EQ(op.status, 0);
  expect(redlock_lock_extend(l, 0, tu_cb, &op), REDLOCK_EINVAL,
         "extend ttl 0");
  ASSERT(redlock_lock_is_held(l));   /* the refused extend changed nothing */
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);

  ASSERT_STR_EQ(redlock_err_name(REDLOCK_ETAKEN), "ETAKEN");
  ASSERT_STR_EQ(redlock_err_name(12345), "UNKNOWN");
  ASSERT_STR_EQ(redlock_strerror(12345), "unknown error");
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
