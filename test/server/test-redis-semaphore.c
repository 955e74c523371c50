/* Counting semaphores (redlock_semaphore_*): bad input; K holders and the
 * K+1-th refused; a taken permit is left for a free one at once (not at
 * the retry delay); the keys' layout; inspection; a client with another
 * limit gets ELIMIT naming both; a waiter is woken by a release within
 * milliseconds (its retry delay is 20 s); force release of one permit;
 * shrinking the limit evicts nobody and stops admissions above it;
 * fencing per permit; the blocking API (its one attempt takes any free
 * permit; inspect, force release and set_limit through it). */
#include "tutil.h"

#define N 3

typedef struct insp {
  volatile int done;
  int status;
  redlock_semaphore_info info;
  redlock_permit_info permits[8];
  char holders[8][160];
} insp;

static void on_info(redlock_lock_t *l, int status,
                    const redlock_semaphore_info *info,
                    const redlock_result *res, void *arg) {
  insp *in = arg;
  unsigned i;
  (void)l;
  ASSERT_NOT_NULL(res);
  in->status = status;
  in->info = *info;
  for (i = 0; i < info->n_permits && i < 8; i++) {
    in->permits[i] = info->permits[i];
    snprintf(in->holders[i], sizeof(in->holders[i]), "%s",
             info->permits[i].holder);
    in->permits[i].holder = in->holders[i];
  }
  in->done = 1;
}

static void inspect(uv_loop_t *loop, redlock_lock_t *l, insp *in) {
  memset(in, 0, sizeof(*in));
  ASSERT_EQ(redlock_semaphore_inspect(l, on_info, in), 0);
  ASSERT_EQ(in->done, 0);
  if (harness_run_until(loop, &in->done, 10000) != 0)
    TEST_FAIL("inspect never ended");
}

static int run_op(uv_loop_t *loop, tu_op *op) {
  if (harness_run_until(loop, &op->done, 10000) != 0)
    TEST_FAIL("operation never ended");
  ASSERT_EQ(op->calls, 1);
  return op->status;
}

static int set_limit(uv_loop_t *loop, redlock_lock_t *l, unsigned k) {
  tu_op op;
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_semaphore_set_limit(l, k, tu_cb, &op), 0);
  return run_op(loop, &op);
}

static int force(uv_loop_t *loop, redlock_lock_t *l, unsigned permit) {
  tu_op op;
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_semaphore_force_release(l, permit, tu_cb, &op), 0);
  return run_op(loop, &op);
}

static void permit_key(char *buf, size_t len, int permit) {
  snprintf(buf, len, "{sem}:sem:%d", permit);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *s1, *s2, *s3, *f, *m, *n1;
  redlock_acquire_opts once = {.wait_ms = -1};
  /* One retry, 20 s later: only the free permit's retry is quick. */
  redlock_acquire_opts slow = {.retry_count = 1, .retry_delay_ms = 20000,
                               .retry_jitter_ms = -1};
  redlock_acquire_opts wait = {.wait_ms = 15000, .retry_delay_ms = 20000,
                               .retry_jitter_ms = -1, .wake = 1};
  redlock_acquire_opts fenced = {.wait_ms = -1, .fence = 1};
  redlock_sync_t *sy;
  redlock_sync_lock_t *sl;
  redlock_client_config cfg;
  const char *addrs[N];
  char key[64], val[160];
  tu_op op, wop;
  insp in;
  int i, p1, p2, p3;
  uint64_t t0, t_rel, fence1;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);

  /* Bad input. */
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 0, &s1), REDLOCK_EINVAL);
  ASSERT_NULL(s1);
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, REDLOCK_MAX_PERMITS + 1, &s1),
            REDLOCK_EINVAL);
  ASSERT(strstr(redlock_last_error(), "1..1024") != NULL);
  ASSERT_EQ(redlock_semaphore_new(c, NULL, 3, 2, &s1), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 2, &s1), 0);
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 2, &s2), 0);
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 2, &s3), 0);
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 2, &f), 0);
  ASSERT_EQ(redlock_semaphore_limit(s1), 2);
  ASSERT_EQ(redlock_semaphore_permit(s1), -1);
  ASSERT_EQ(redlock_semaphore_set_limit(s1, 0, tu_cb, &op), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_semaphore_set_limit(s1, 1025, tu_cb, &op),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_semaphore_force_release(s1, 1024, tu_cb, &op),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_semaphore_inspect(s1, NULL, NULL), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_lock_inspect(s1, tu_cb, &op), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_lock_force_release(s1, tu_cb, &op), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_lock_adopt(s1, "abc"), REDLOCK_EINVAL);
  ASSERT_STR_EQ(redlock_err_name(REDLOCK_ELIMIT), "ELIMIT");

  /* Two holders, the third refused. The resource is the name. */
  ASSERT_EQ(tu_acquire(&loop, s1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, s2, 10000, &slow, &op), 0);
  p1 = redlock_semaphore_permit(s1);
  p2 = redlock_semaphore_permit(s2);
  ASSERT(p1 == 0 || p1 == 1);
  ASSERT_EQ(p1 + p2, 1);
  {
    size_t rl;
    const char *r = redlock_lock_resource(s1, &rl);
    ASSERT_EQ(rl, 3);
    ASSERT(memcmp(r, "sem", 3) == 0);
  }
  ASSERT_EQ(tu_acquire(&loop, s3, 10000, &once, &op), REDLOCK_ETAKEN);
  tu_drain(&loop, c);
  permit_key(key, sizeof(key), p1);
  ASSERT_EQ(tu_count_holding(srv, N, key, redlock_lock_token(s1)), N);
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&srv[i], val, sizeof(val), "HGET {sem}:sem k"), 0);
    ASSERT_STR_EQ(val, "2");
  }

  /* A taken permit is left for the free one at once: s2 again, ten
   * times (its first pick is s1's permit half the time). */
  for (i = 0; i < 10; i++) {
    ASSERT_EQ(tu_release(&loop, s2, &op), 0);
    t0 = harness_now_ms();
    ASSERT_EQ(tu_acquire(&loop, s2, 10000, &slow, &op), 0);
    ASSERT_LT(harness_now_ms() - t0, 2000);
    ASSERT_EQ(redlock_semaphore_permit(s2), p2);
  }
  /* The same with one attempt (wait_ms -1, the CLI's --wait 0): a try
   * for any free permit, not for the blind pick only. */
  for (i = 0; i < 10; i++) {
    ASSERT_EQ(tu_release(&loop, s2, &op), 0);
    ASSERT_EQ(tu_acquire(&loop, s2, 10000, &once, &op), 0);
    ASSERT_EQ(redlock_semaphore_permit(s2), p2);
  }
  ASSERT_EQ(tu_acquire(&loop, s3, 10000, &once, &op), REDLOCK_ETAKEN);

  /* Inspection. */
  inspect(&loop, f, &in);
  ASSERT_EQ(in.status, 0);
  ASSERT_EQ(in.info.limit, 2);
  ASSERT_EQ(in.info.limit_max, 2);
  ASSERT_EQ(in.info.held, 2);
  ASSERT_EQ(in.info.free, 0);
  ASSERT_EQ(in.info.n_permits, 2);
  ASSERT_EQ(in.permits[0].index, 0);
  ASSERT_EQ(in.permits[1].index, 1);
  ASSERT_STR_EQ(in.permits[p1].holder, redlock_lock_token(s1));
  ASSERT_STR_EQ(in.permits[p2].holder, redlock_lock_token(s2));
  for (i = 0; i < 2; i++) {
    ASSERT_EQ(in.permits[i].held, 1);
    ASSERT_EQ(in.permits[i].masters, N);
    ASSERT_GT(in.permits[i].pttl_ms, 5000);
    ASSERT_LE(in.permits[i].pttl_ms, 10000);
  }

  /* Another limit: refused with both values, at once. */
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 3, &m), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_acquire(&loop, m, 10000, &slow, &op), REDLOCK_ELIMIT);
  ASSERT_LT(harness_now_ms() - t0, 2000);
  ASSERT_EQ(op.attempts, 1);
  {
    /* The first master to refuse ends it: any of them (the others may
     * not have answered by then). */
    int said = -1;
    for (i = 0; i < N && said < 0; i++)
      if (op.nodes[i].error == REDLOCK_ELIMIT)
        said = (int)i;
    ASSERT(said >= 0);
    ASSERT(strstr(op.errstr[said], "2 on this master, 3 asked") != NULL);
  }

  /* A waiter is woken by the release (its retry delay is 20 s). */
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(s3, 10000, &wait, tu_cb, &wop), 0);
  tu_wait_subscribed(&loop, srv, N, "__redlock__:{sem}:sem", 1, 5000);
  tu_run_for(&loop, 50);
  ASSERT_EQ(wop.done, 0);
  t_rel = harness_now_ms();
  ASSERT_EQ(tu_release(&loop, s1, &op), 0);
  if (harness_run_until(&loop, &wop.done, 10000) != 0)
    TEST_FAIL("the waiter never got a permit");
  ASSERT_EQ(wop.status, 0);
  fprintf(stderr, "woken: granted %llu ms after the release\n",
          (unsigned long long)(wop.cb_ms - t_rel));
  ASSERT_LT(wop.cb_ms - t_rel, tu_slow() ? 1000 : 250);
  p3 = redlock_semaphore_permit(s3);
  ASSERT_EQ(p3, p1);

  /* Force release of s3's permit: gone everywhere, free for another. */
  ASSERT_EQ(redlock_semaphore_force_release(s3, 0, tu_cb, &op),
            REDLOCK_EBUSY);
  ASSERT_EQ(force(&loop, f, (unsigned)p3), 0);
  permit_key(key, sizeof(key), p3);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], key, val, sizeof(val)), 0);
  ASSERT_EQ(tu_extend(&loop, s3, 10000, &op), REDLOCK_ENOTHELD);
  ASSERT_EQ(tu_acquire(&loop, s1, 10000, &slow, &op), 0);
  ASSERT_EQ(redlock_semaphore_permit(s1), p3);
  (void)tu_release(&loop, s3, &op);

  /* Shrink to 1: nobody is evicted (both extend), no admission to
   * permit 1 any more, the old limit is refused. */
  ASSERT_EQ(set_limit(&loop, f, 1), 0);
  ASSERT_EQ(redlock_semaphore_limit(f), 1);
  ASSERT_EQ(tu_extend(&loop, s1, 10000, &op), 0);
  ASSERT_EQ(tu_extend(&loop, s2, 10000, &op), 0);
  inspect(&loop, f, &in);
  ASSERT_EQ(in.info.limit, 1);
  ASSERT_EQ(in.info.limit_max, 1);
  ASSERT_EQ(in.info.held, 2);
  ASSERT_EQ(in.info.free, 0);
  ASSERT_EQ(redlock_semaphore_new(c, "sem", 3, 1, &n1), 0);
  ASSERT_EQ(tu_acquire(&loop, n1, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, s3, 10000, &once, &op), REDLOCK_ELIMIT);
  /* The holder of permit 0 leaves: n1 gets it; permit 1's holder stays
   * (two holders: the old bound until it leaves). */
  ASSERT_EQ(tu_release(&loop, p3 == 0 ? s1 : s2, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, n1, 10000, &once, &op), 0);
  ASSERT_EQ(redlock_semaphore_permit(n1), 0);
  ASSERT(redlock_lock_is_held(p3 == 0 ? s2 : s1));
  /* Permit 1's holder leaves: nobody may take permit 1 again. */
  ASSERT_EQ(tu_release(&loop, p3 == 0 ? s2 : s1, &op), 0);
  ASSERT_EQ(tu_release(&loop, n1, &op), 0);
  for (i = 0; i < 5; i++) {
    ASSERT_EQ(tu_acquire(&loop, n1, 10000, &once, &op), 0);
    ASSERT_EQ(redlock_semaphore_permit(n1), 0);
    ASSERT_EQ(tu_acquire(&loop, f, 10000, &once, &op), REDLOCK_ETAKEN);
    ASSERT_EQ(tu_release(&loop, n1, &op), 0);
  }

  /* Raise to 3: the client with 3 is let in now. */
  ASSERT_EQ(set_limit(&loop, f, 3), 0);
  ASSERT_EQ(tu_acquire(&loop, m, 10000, &slow, &op), 0);
  ASSERT_EQ(tu_release(&loop, m, &op), 0);

  /* Fencing per permit: increasing on a permit. */
  ASSERT_EQ(tu_acquire(&loop, m, 10000, &fenced, &op), 0);
  fence1 = redlock_lock_fence(m);
  ASSERT_GT(fence1, 0);
  p1 = redlock_semaphore_permit(m);
  snprintf(key, sizeof(key), "{sem}:sem:%d:fence", p1);
  ASSERT_EQ(harness_get(&srv[0], key, val, sizeof(val)), 1);
  ASSERT_EQ(tu_release(&loop, m, &op), 0);
  do {
    ASSERT_EQ(tu_acquire(&loop, m, 10000, &fenced, &op), 0);
    if (redlock_semaphore_permit(m) == p1)
      break;
    ASSERT_EQ(tu_release(&loop, m, &op), 0);
  } while (1);
  ASSERT_GT(redlock_lock_fence(m), fence1);
  ASSERT_EQ(tu_release(&loop, m, &op), 0);

  ASSERT_EQ(redlock_lock_free(s1), 0);
  ASSERT_EQ(redlock_lock_free(s2), 0);
  ASSERT_EQ(redlock_lock_free(s3), 0);
  ASSERT_EQ(redlock_lock_free(f), 0);
  ASSERT_EQ(redlock_lock_free(m), 0);
  ASSERT_EQ(redlock_lock_free(n1), 0);
  tu_close(&loop, c);

  /* The blocking API. */
  memset(&cfg, 0, sizeof(cfg));
  harness_addrs(srv, N, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(redlock_sync_new(&cfg, &sy), 0);
  ASSERT_EQ(redlock_sync_acquire_sem(sy, "sem", 3, 0, 1000, NULL, &sl),
            REDLOCK_EINVAL);
  ASSERT_EQ(redlock_sync_acquire_sem(sy, "sem", 3, 2, 1000, NULL, &sl),
            REDLOCK_ELIMIT);
  ASSERT_EQ(redlock_sync_acquire_sem(sy, "sem", 3, 3, 10000, NULL, &sl), 0);
  ASSERT(redlock_sync_permit(sl) >= 0 && redlock_sync_permit(sl) < 3);
  {
    /* Its administration: inspect (one block), force one permit, set
     * the limit. */
    redlock_semaphore_info *si = NULL;
    int p = redlock_sync_permit(sl);
    ASSERT_EQ(redlock_sync_semaphore_inspect(sy, "sem", 3, 3, &si), 0);
    ASSERT_NOT_NULL(si);
    ASSERT_EQ(si->limit, 3);
    ASSERT_EQ(si->held, 1);
    ASSERT_EQ(si->free, 2);
    ASSERT_EQ(si->n_permits, 1);
    ASSERT_EQ(si->permits[0].index, (unsigned)p);
    ASSERT_EQ(si->permits[0].masters, N);
    ASSERT(si->permits[0].held);
    redlock_sync_free(si);
    ASSERT_EQ(redlock_sync_semaphore_inspect(sy, "sem", 3, 0, &si),
              REDLOCK_EINVAL);
    ASSERT_NULL(si);
    ASSERT_EQ(redlock_sync_semaphore_force_release(sy, "sem", 3, 3,
                                                   (unsigned)p), 0);
    ASSERT_EQ(redlock_sync_semaphore_inspect(sy, "sem", 3, 3, &si), 0);
    ASSERT_EQ(si->held, 0);
    ASSERT_EQ(si->n_permits, 0);
    redlock_sync_free(si);
    ASSERT_EQ(redlock_sync_semaphore_set_limit(sy, "sem", 3, 4), 0);
    ASSERT_EQ(redlock_sync_semaphore_inspect(sy, "sem", 3, 4, &si), 0);
    ASSERT_EQ(si->limit, 4);
    redlock_sync_free(si);
    ASSERT_EQ(redlock_sync_acquire_sem(sy, "sem", 3, 3, 1000, NULL, NULL),
              REDLOCK_EINVAL);
  }
  ASSERT_EQ(redlock_sync_release(sl), REDLOCK_ENOTHELD);
  ASSERT_EQ(redlock_sync_close(sy), 0);
  harness_stop_all();
  return 0;
}
