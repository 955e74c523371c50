/* The modes of one name exclude each other (issue 29, item 5): a plain
 * lock, a read-write lock's writer and its readers on the same resource
 * (the CLI's plain, -x and -s). N = 3 plain masters.
 *
 *  a) A plain holder refuses a writer and a reader; so does a key that
 *     another Redlock library set (SET NX PX with its own token).
 *  b) A writer refuses a plain lock of ours and another library's SET NX.
 *  c) Readers refuse a plain lock and a writer, and admit each other; the
 *     name stays taken while any reader holds (the first one's release
 *     does not free it, nor does a shorter reader's ttl cut its time),
 *     and is free for a plain lock once the last goes.
 *  d) A reader's extend fails where another client's key holds the name.
 *  e) Nothing is left behind by released holds.
 *  f) A writer that expires (never released) frees the name for a plain
 *     lock within a bound: the occupation ends with the hold.
 *  g) Wake-up across modes (opts.wake, a retry delay of 30 s): a plain
 *     waiter behind a writer, and a writer waiting behind a plain lock,
 *     get the lock within a bound of the release, not after the delay.
 *  h) A read-write lock named after an application key that is not a
 *     string (a hash at "user:42"), or whose "<name>:rw" is not a hash,
 *     fails with a clear error naming the type, not Redis's WRONGTYPE,
 *     and leaves the application's data alone (review item 3). */
#include "tutil.h"

#define N 3

static harness_server srv[N];

/* Another library's acquisition on every master: SET key tok NX PX ttl.
 * Returns on how many masters it was set. */
static int foreign_set(const char *key, const char *tok) {
  char buf[64];
  int i, n = 0;
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "SET %s %s NX PX 10000",
                           key, tok), 0);
    n += strcmp(buf, "OK") == 0;
  }
  return n;
}

/* `waiter` (opts.wake, a client whose retry delay is 30 s) waits for
 * `holder` on `key`; the holder's release must wake it. */
static void wake_across(uv_loop_t *loop, redlock_lock_t *holder,
                        redlock_lock_t *waiter, const char *key) {
  redlock_acquire_opts wake = {.wake = 1, .wait_ms = 120000,
                               .retry_count = 100};
  char chan[80];
  tu_op op, wop;
  uint64_t t0, took;
  ASSERT_EQ(tu_acquire(loop, holder, 60000, NULL, &op), 0);
  memset(&wop, 0, sizeof(wop));
  ASSERT_EQ(redlock_lock_acquire(waiter, 10000, &wake, tu_cb, &wop), 0);
  /* Refused once, and listening on the plain key's channel. */
  snprintf(chan, sizeof(chan), "__redlock__:%s", key);
  tu_wait_subscribed(loop, srv, N, chan, N, harness_bound_ms(10000));
  ASSERT_EQ(wop.done, 0);
  t0 = harness_now_ms();
  ASSERT_EQ(tu_release(loop, holder, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &wop.done, 60000), 0);
  ASSERT_EQ(wop.status, 0);
  took = harness_now_ms() - t0;
  printf("%s: granted %llu ms after the release (retry delay 30000 ms)\n",
         key, (unsigned long long)took);
  ASSERT_LT(took, (uint64_t)harness_bound_ms(3000));
  ASSERT_EQ(tu_release(loop, waiter, &op), 0);
}

static void foreign_del(const char *key) {
  char buf[64];
  int i;
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL %s", key), 0);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *p, *r1, *r2, *w;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  uint64_t t0, end;
  char val[64];
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(c, "job", 3, &p), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "job", 3, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "job", 3, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "job", 3, REDLOCK_WRITE, &w), 0);

  /* a) */
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(op.yes, 0);
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(op.yes, 0);
  ASSERT_EQ(tu_release(&loop, p, &op), 0);
  ASSERT_EQ(foreign_set("job", "node-redlock-token"), N);
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
  foreign_del("job");

  /* b) */
  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(op.yes, 0);
  ASSERT_EQ(foreign_set("job", "node-redlock-token"), 0);
  ASSERT_EQ(tu_release(&loop, w, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, p, &op), 0);

  /* c) */
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, w, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(tu_acquire(&loop, r2, 20000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, r2, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  ASSERT_EQ(foreign_set("job", "node-redlock-token"), 0);
  /* A reader of 300 ms beside r1 (10 s): the name stays taken for the
   * longest reader, not the latest one. */
  ASSERT_EQ(tu_acquire(&loop, r2, 300, &once, &op), 0);
  for (i = 0; i < N; i++)
    ASSERT_GT(harness_pttl(&srv[i], "job"), 5000);
  ASSERT_EQ(tu_release(&loop, r2, &op), 0);
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, p, &op), 0);

  /* d) A reader whose name another client took over on every master (an
   * operator's forced release, then another library's lock) is told at
   * its next extend: the name is not ours there. */
  ASSERT_EQ(tu_acquire(&loop, r1, 10000, &once, &op), 0);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "job", "node-redlock-token", 10000), 0);
  ASSERT_NE(tu_extend(&loop, r1, 10000, &op), 0);
  printf("the reader's extend under another library's key: %s\n",
         redlock_err_name(op.status));
  ASSERT_EQ(op.yes, 0);
  foreign_del("job");
  (void)tu_release(&loop, r1, &op);

  /* e) Nothing is left behind by released holds. */
  tu_run_for(&loop, 20);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  /* f) A writer of 300 ms, never released (detached from its handle). */
  ASSERT_EQ(tu_acquire(&loop, w, 300, &once, &op), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_lock_detach(w), 0);
  ASSERT_EQ(tu_acquire(&loop, p, 10000, &once, &op), REDLOCK_ETAKEN);
  end = t0 + (uint64_t)harness_bound_ms(5000);
  while (tu_acquire(&loop, p, 10000, &once, &op) != 0) {
    ASSERT_EQ(op.status, REDLOCK_ETAKEN);
    if (harness_now_ms() > end)
      TEST_FAIL("the expired writer kept the name for %llu ms",
                (unsigned long long)(harness_now_ms() - t0));
    tu_run_for(&loop, 20);
  }
  printf("plain lock granted %llu ms after the 300 ms writer\n",
         (unsigned long long)(harness_now_ms() - t0));
  ASSERT_EQ(tu_release(&loop, p, &op), 0);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "job", val, sizeof(val)), 0);

  /* g) */
  {
    redlock_client_config slow = {.retry_delay_ms = 30000,
                                  .retry_jitter_ms = -1};
    redlock_client_t *c2 = tu_client(&loop, srv, N, &slow, N);
    redlock_lock_t *hw, *wp, *hp, *ww;
    ASSERT_EQ(redlock_rwlock_new(c, "wk1", 3, REDLOCK_WRITE, &hw), 0);
    ASSERT_EQ(redlock_lock_new(c2, "wk1", 3, &wp), 0);
    wake_across(&loop, hw, wp, "wk1");
    ASSERT_EQ(redlock_lock_new(c, "wk2", 3, &hp), 0);
    ASSERT_EQ(redlock_rwlock_new(c2, "wk2", 3, REDLOCK_WRITE, &ww), 0);
    wake_across(&loop, hp, ww, "wk2");
    tu_close_client(&loop, c2);
  }

  /* h) */
  {
    static const struct {
      const char *name, *key, *type;
    } cases[] = {{"user:42", "user:42", "hash"},
                 {"app:7", "app:7:rw", "string"}};
    unsigned k;
    int rd;
    for (k = 0; k < 2; k++) {
      char want[64];
      for (i = 0; i < N; i++)
        ASSERT_EQ(k == 0 ? harness_cmdf(&srv[i], val, sizeof(val),
                                        "HSET %s f v", cases[k].key)
                         : harness_cmdf(&srv[i], val, sizeof(val),
                                        "SET %s v", cases[k].key), 0);
      snprintf(want, sizeof(want), "non-lock key (%s)", cases[k].type);
      for (rd = 0; rd < 2; rd++) {
        redlock_lock_t *h;
        int rc;
        ASSERT_EQ(redlock_rwlock_new(c, cases[k].name,
                                     strlen(cases[k].name),
                                     rd ? REDLOCK_READ : REDLOCK_WRITE, &h),
                  0);
        int said = 0, m;
        rc = tu_acquire(&loop, h, 10000, &once, &op);
        ASSERT_NE(rc, 0);
        /* The masters that answered before the decision: the error. */
        for (m = 0; m < N; m++) {
          if (op.nodes[m].vote == REDLOCK_VOTE_NONE)
            continue;
          fprintf(stderr, "h) %s over a %s at %s: %s; master %d: %s\n",
                  rd ? "reader" : "writer", cases[k].type, cases[k].key,
                  redlock_err_name(rc), m, op.errstr[m]);
          ASSERT_EQ(op.nodes[m].vote, REDLOCK_VOTE_ERR);
          ASSERT_NOT_NULL(strstr(op.errstr[m], want));
          ASSERT_NULL(strstr(op.errstr[m], "WRONGTYPE"));
          said++;
        }
        ASSERT_GE(said, 2);
        ASSERT_EQ(redlock_lock_free(h), 0);
      }
      for (i = 0; i < N; i++) {   /* the application's key untouched */
        ASSERT_EQ(harness_cmdf(&srv[i], val, sizeof(val), "TYPE %s",
                               cases[k].key), 0);
        ASSERT_STR_EQ(val, cases[k].type);
      }
    }
  }

  ASSERT_EQ(redlock_client_close(c, NULL, NULL), 0);   /* frees handles */
  harness_loop_close(&loop, 10000);
  harness_stop_all();
  return 0;
}
