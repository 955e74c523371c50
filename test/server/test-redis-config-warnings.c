/* Configuration mistakes a master reveals (issue 20, item 6).
 *
 * Masters of a quorum must be independent. Four configured masters:
 * M1, M2, M3 (made a replica of M1 with REPLICAOF) and "localhost:<M1's
 * port>" (M1 again, under another name). The client must warn, through
 * on_warning and in redlock_client_master_info, that
 *  - two configured masters are the same instance (same run_id),
 *  - M3 is a replica (role:slave),
 *  - M3 replicates from M1 (the same replication id),
 * and must not warn about M2. */
#include "tutil.h"

static char warnings[8192];

static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  size_t n = strlen(warnings);
  (void)c;
  (void)arg;
  fprintf(stderr, "warning: %s\n", msg);
  snprintf(warnings + n, sizeof(warnings) - n, "%s\n", msg);
}

typedef struct {
  harness_server *s;
} role_wait;

static int is_replica(void *arg) {
  role_wait *w = arg;
  char buf[4096];
  if (harness_cmdf(w->s, buf, sizeof(buf), "INFO replication") != 0)
    return 0;
  return strstr(buf, "role:slave") != NULL &&
         strstr(buf, "master_link_status:up") != NULL;
}

int main(void) {
  harness_server srv[3];
  uv_loop_t loop;
  redlock_client_t *c;
  char local[64], ok[64];
  const char *addrs[4];
  redlock_client_config cfg = {.servers = addrs, .n_servers = 4,
                               .restart_guard_ms = -1,
                               .on_warning = on_warning};
  redlock_master_info mi;
  role_wait w;
  unsigned i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 3);
  ASSERT_EQ(harness_cmdf(&srv[2], ok, sizeof(ok), "REPLICAOF 127.0.0.1 %d",
                         srv[0].port), 0);
  w.s = &srv[2];
  if (harness_wait_for(is_replica, &w, 10000) != 0)
    TEST_FAIL("master 3 did not become a replica of master 1");
  harness_addrs(srv, 3, addrs);
  snprintf(local, sizeof(local), "localhost:%d", srv[0].port);
  addrs[3] = local;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  tu_wait_up(&loop, c, 4, 10000);

  if (strstr(warnings, "are the same Redis instance") == NULL ||
      strstr(warnings, local) == NULL)
    TEST_FAIL("no warning that %s and %s are one instance:\n%s", addrs[0],
              local, warnings);
  if (strstr(warnings, "is a replica (role:slave)") == NULL)
    TEST_FAIL("no warning that master 3 is a replica:\n%s", warnings);
  if (strstr(warnings, "share a replication id") == NULL)
    TEST_FAIL("no warning that master 3 replicates from master 1:\n%s",
              warnings);
  if (strstr(warnings, addrs[1]) != NULL)
    TEST_FAIL("a warning names master 2, which is independent:\n%s",
              warnings);
  /* The same, per master, for status displays. */
  ASSERT_EQ(redlock_client_master_info(c, 2, &mi), 0);
  ASSERT_STR_EQ(mi.role, "slave");
  ASSERT(mi.warning[0] != '\0');
  ASSERT_EQ(redlock_client_master_info(c, 1, &mi), 0);
  ASSERT_STR_EQ(mi.role, "master");
  ASSERT_STR_EQ(mi.warning, "");
  for (i = 0; i < 4; i++) {
    ASSERT_EQ(redlock_client_master_info(c, i, &mi), 0);
    fprintf(stderr, "master %u: %s role %s run_id %.8s warning \"%s\"\n",
            i + 1, mi.server, mi.role, mi.run_id, mi.warning);
  }
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
