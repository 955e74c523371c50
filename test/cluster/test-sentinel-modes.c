/* The modes of one name exclude each other on a sentinel group too
 * (issue 29, item 5): the master is a primary the sentinels name. A plain
 * holder refuses a writer and a reader; a writer and readers refuse a
 * plain lock (ours, and another library's SET NX on the primary);
 * readers share; the name is free once they are gone, and nothing is
 * left on the primary. The group is one primary without replicas, so it
 * cannot refuse writes when cut off: its URI carries the operator's
 * override (?isolation=unchecked; the check itself is
 * test-sentinel-isolation's). */
#include "tutil.h"

static harness_server data[1];
static harness_server sent[3];

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *p, *r1, *r2, *w;
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *addr[1];
  char group[600], buf[64];
  tu_op op;

  memset(data, 0, sizeof(data));
  memset(sent, 0, sizeof(sent));
  harness_start(data, 1);
  harness_sentinel_start(sent, 3, "grp", &data[0], 0);
  snprintf(group, sizeof(group), "%s&isolation=unchecked",
           harness_sentinel_addr(sent, 3, "grp"));
  addr[0] = group;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client_at(&loop, addr, 1, NULL, 1);
  ASSERT_EQ(redlock_lock_new(c, "job", 3, &p), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "job", 3, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "job", 3, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "job", 3, REDLOCK_WRITE, &w), 0);

  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(&loop, p, &op), 0);

  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(harness_cmdf(&data[0], buf, sizeof(buf),
                         "SET job other NX PX 10000"), 0);
  ASSERT_STR_EQ(buf, "(nil)");
  ASSERT_EQ(tu_release(&loop, w, &op), 0);

  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, r2, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_release(&loop, r2, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, p, &op), 0);
  tu_drain(&loop, c);
  ASSERT_EQ(harness_dbsize(&data[0]), 0);

  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
