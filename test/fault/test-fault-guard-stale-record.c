/* The auto restart guard must raise the ttl record on a quorum of the
 * masters it holds a lock on, even when its cache says the record is
 * already there: a cached record of a master that restarted unnoticed is
 * stale.
 *
 * N=3, default (auto) guard. An earlier client recorded ttl T on masters
 * 1 and 3 while master 2 was down; master 2 came back empty. Client A
 * starts: its handshakes read the record, T on 1 and 3, none on 2. Once
 * the masters are older than T, master 3 is killed and restarted and A,
 * before its loop has run (it has not seen the connection drop), acquires
 * a lock with ttl T. A's cache says two masters (a quorum) hold the record,
 * but one of them lost it. The lock is held on masters 1 and 2 (3's
 * connection is dead), so the record must now be on a quorum: A must have
 * raised it on master 2 (a master that is up and lacks it). If it is only
 * on master 1 (today: A skipped the raise because its cache counted a
 * quorum), then:
 *
 * Master 1 restarts while A holds the lock. No master has the record any
 * more. A new client C (auto guard, ttl 200 ms) reads a window of 200 ms,
 * so masters 1 and 3 (new, empty) count for it 200 ms later: C is granted
 * the lock while A still holds it (two holders). With the record on
 * master 2, C's window is T and C is refused for as long as A's lock is
 * valid.
 *
 * Checked: right after A's acquisition, the record >= T is on a quorum
 * (reported), and C is never granted while A holds the lock (single
 * attempts every 50 ms until A's validity runs out). */
#include "tutil.h"

#define N 3
#define RECORD_KEY "__redlock__:maxttl"

static const char *addrs[N];

/* A client with the auto guard (tu_client turns it off). */
static redlock_client_t *guarded_client(uv_loop_t *loop,
                                        const harness_server *srv) {
  redlock_client_config cfg = {.command_timeout_ms = 1000,
                               .connect_timeout_ms = 2000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};   /* guard: auto */
  redlock_client_t *c = NULL;
  harness_addrs(srv, N, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(loop, &cfg, &c), 0);
  return c;
}

/* The record on master i (0 when missing, -1 when unreachable). */
static int64_t record_on(const harness_server *s) {
  char val[64];
  int r = harness_get(s, RECORD_KEY, val, sizeof(val));
  if (r < 0)
    return -1;
  return r == 0 ? 0 : strtoll(val, NULL, 10);
}

typedef struct {
  const harness_server *srv;
  int64_t ttl;
} record_cond;

/* The recorder's (asynchronous) raise reached masters 1 and 3. */
static int recorded_on_1_and_3(void *arg) {
  record_cond *rc = arg;
  return record_on(&rc->srv[0]) == rc->ttl &&
         record_on(&rc->srv[2]) == rc->ttl;
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *rec, *a, *c;
  redlock_lock_t *l, *y, *cy;
  redlock_acquire_opts once = {.wait_ms = -1};
  int slow = tu_slow();
  int64_t ttl = slow ? 3000 : 1500;    /* A's lock, and the record */
  int64_t ttl_c = 200;                 /* C's lock */
  record_cond rc;
  tu_op op;
  uint64_t t_up;
  int have = 0;
  int attempts = 0;
  int failures = 0;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* An earlier client records ttl T while master 2 is down (a client
   * with the guard off records too, best effort, where a master is up). */
  harness_kill(&srv[1]);
  rec = tu_client(&loop, srv, N, NULL, N - 1);
  ASSERT_EQ(redlock_lock_new(rec, "rec", 3, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, ttl, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  rc.srv = srv;
  rc.ttl = ttl;
  if (harness_wait_for(recorded_on_1_and_3, &rc, 5000) != 0)
    TEST_FAIL("setup: the record of %lld ms did not reach masters 1 and 3",
              (long long)ttl);
  tu_close_client(&loop, rec);
  harness_restart(&srv[1]);   /* empty: no record */
  ASSERT_EQ(record_on(&srv[1]), 0);

  /* Client A: its handshakes read T on masters 1 and 3, nothing on 2. */
  a = guarded_client(&loop, srv);
  tu_wait_up(&loop, a, N, 10000);
  t_up = harness_now_ms();
  /* A counts a master's age from its handshake at the latest (all were
   * done when tu_wait_up returned): after T (+ a margin) every master's
   * votes count for A. The guard measures age in time, so this waits
   * for time to pass, not for an event. */
  tu_run_for(&loop, (uint64_t)ttl + (slow ? 1000 : 500));
  ASSERT_GE(harness_now_ms() - t_up, (uint64_t)ttl);

  /* Master 3 restarts; A has not seen it (its loop does not run before
   * the acquire call decides whether to raise the record). */
  harness_kill(&srv[2]);
  harness_restart(&srv[2]);
  ASSERT_EQ(redlock_lock_new(a, "y", 1, &y), 0);
  if (tu_acquire(&loop, y, ttl, &once, &op) != 0)
    TEST_FAIL("setup: A was refused (%s); master 1: \"%s\", master 2: "
              "\"%s\"", redlock_err_name(op.status), op.errstr[0],
              op.errstr[1]);
  ASSERT_EQ(op.attempts, 1);
  ASSERT_NE(op.nodes[2].vote, REDLOCK_VOTE_YES);   /* dead connection */
  for (i = 0; i < N; i++) {
    int64_t v = record_on(&srv[i]);
    fprintf(stderr, "record on master %d after A's acquisition: %lld\n",
            i + 1, (long long)v);
    if (v >= ttl)
      have++;
  }
  if (have < 2) {
    fprintf(stderr, "%s:%d: FAIL: A holds a %lld ms lock, but the ttl "
            "record >= %lld ms is on %d master(s), fewer than a quorum "
            "(2): A trusted a cached record of a master that had "
            "restarted\n", __FILE__, __LINE__, (long long)ttl,
            (long long)ttl, have);
    failures++;
  }

  /* Master 1 restarts while A holds the lock; a new client C comes. */
  harness_kill(&srv[0]);
  harness_restart(&srv[0]);
  c = guarded_client(&loop, srv);
  tu_wait_up(&loop, c, N, 10000);
  ASSERT_EQ(redlock_lock_new(c, "y", 1, &cy), 0);
  /* C tries once every 50 ms for as long as A's lock is valid: it must
   * never be granted. */
  while (redlock_lock_validity_ms(y) > 50) {
    int st = tu_acquire(&loop, cy, ttl_c, &once, &op);
    attempts++;
    if (st == 0) {
      int64_t left = redlock_lock_validity_ms(y);
      if (left > 0) {
        fprintf(stderr, "%s:%d: FAIL: C was granted the lock (attempt "
                "%d) while A holds it for %lld ms more: two holders "
                "(C's votes: %d %d %d)\n", __FILE__, __LINE__, attempts,
                (long long)left, op.nodes[0].vote, op.nodes[1].vote,
                op.nodes[2].vote);
        failures++;
      }
      ASSERT_EQ(tu_release(&loop, cy, &op), 0);
      break;
    }
    tu_run_for(&loop, 50);
  }
  fprintf(stderr, "C: %d attempt(s) while A held the lock\n", attempts);
  ASSERT_GE(attempts, 1);

  ASSERT_EQ(redlock_lock_free(cy), 0);
  ASSERT_EQ(redlock_lock_free(y), 0);
  tu_close_client(&loop, c);
  tu_close(&loop, a);
  if (failures > 0)
    TEST_FAIL("%d check(s) failed (see above)", failures);
  harness_stop_all();
  return 0;
}
