/* The clock check's first sight of an instance is judged with the
 * tolerance of the lock being decided, not of the deployment's longest
 * ttl (issue 29, item 1).
 *
 * Three masters declared durable (appendonly yes, appendfsync always)
 * run under the clock shim (clockshim.c); the deployment's ttl record
 * says 1 h (some client once used it: its drift allowance is 36 s). M3 is
 * down; A holds "k" (ttl 6 s) on M1 and M2. M1 restarts with its wall
 * clock 30 s ahead: it reloads A's key from its AOF, already expired by
 * its clock. M3 comes back. A new client B asks for "k" (ttl 6 s: a drift
 * allowance of 62 ms). M1's clock is 30 s ahead of the others' when B
 * (or anyone) first sees this instance: it may have stepped and lost
 * keys, and its YES must not count until the window (the longest ttl)
 * has passed since. Else M1 and M3 make B's quorum while A's lock is
 * valid. The old code judged that first sight with the 1 h record's
 * allowance (36 s), took the 30 s offset as the instance's base, and
 * compared it with itself: B was granted "k". */
#include "tutil.h"

#define N 3
#define TTL 6000
#define RECORD 3600000   /* ms: the deployment's longest ttl (1 h) */
#define STEP 30000       /* ms: M1's clock at its restart */

static harness_server srv[N];

static int has_key(int i, const char *key) {
  char val[256];
  return harness_get(&srv[i], key, val, sizeof(val));
}

typedef struct {
  const char *token;
} holding;

static int on_two(void *arg) {
  holding *w = arg;
  return tu_count_holding(srv, 2, "k", w->token) == 2;
}

static redlock_client_t *client(uv_loop_t *loop, int guard, unsigned up) {
  const char *addrs[N];
  redlock_client_config cfg = {.durable = 1,
                               .restart_guard_ms = guard,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  harness_addrs(srv, N, addrs);
  return tu_client_guarded(loop, addrs, N, &cfg, up);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_lock_t *held, *l;
  redlock_acquire_opts one = {.wait_ms = -1};
  redlock_result res;
  holding w;
  tu_op op;
  char buf[64], why[1024];
  uint64_t t_a;
  int i, st;
  if (!harness_clock_available()) {
    fprintf(stderr, "the clock shim is not built: failing\n");
    return 1;
  }
  for (i = 0; i < N; i++) {
    srv[i].appendonly = 1;
    harness_clock_prepare(&srv[i]);
  }
  harness_start(srv, N);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf),
                           "SET __redlock__:maxttl %d", RECORD), 0);
  harness_kill(&srv[2]);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* A: guard off (it only holds the lock). */
  a = client(&loop, -1, 2);   /* M3 is down */
  ASSERT_EQ(redlock_lock_new(a, "k", 1, &held), 0);
  ASSERT_EQ(tu_acquire(&loop, held, TTL, &one, &op), 0);
  t_a = harness_now_ms();
  w.token = redlock_lock_token(held);
  if (harness_wait_for(on_two, &w, 5000) != 0)
    TEST_FAIL("A's key is not on M1 and M2");

  harness_kill(&srv[0]);
  harness_clock_step(&srv[0], STEP);
  harness_restart(&srv[0]);
  ASSERT_EQ(has_key(0, "k"), 0);   /* reloaded, expired by its clock */
  harness_restart(&srv[2]);

  b = client(&loop, 0, N);   /* new, auto guard */
  ASSERT_EQ(redlock_lock_new(b, "k", 1, &l), 0);
  st = tu_acquire(&loop, l, TTL, &one, &op);
  fprintf(stderr, "B, %llu ms after A's grant: %s, yes %u no %u err %u; "
          "M1: vote %d %s (%s)\n",
          (unsigned long long)(harness_now_ms() - t_a),
          redlock_err_name(st), op.yes, op.no, op.err, op.nodes[0].vote,
          redlock_err_name(op.nodes[0].error), op.errstr[0]);
  ASSERT(redlock_lock_is_held(held));   /* else the refusal proves nothing */
  if (st == 0)
    TEST_FAIL("double grant: B got \"k\" while A holds it (M1, %d s "
              "ahead, counted)", STEP / 1000);
  ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_ERR);
  ASSERT_EQ(op.nodes[0].error, REDLOCK_ERESTARTED);
  ASSERT_EQ(op.nodes[0].guard_cause, REDLOCK_GUARD_CLOCK_STEP);
  memset(&res, 0, sizeof(res));
  res.status = st;
  res.yes = op.yes;
  res.no = op.no;
  res.err = op.err;
  res.n_nodes = op.n_nodes;
  res.quorum = 2;
  res.nodes = op.nodes;
  redlock_result_explain(&res, why, sizeof(why));
  fprintf(stderr, "B: %s\n", why);
  ASSERT(strstr(why, "master 1's clock") != NULL);
  ASSERT(strstr(op.errstr[0], "first seen") != NULL);

  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, a);
  tu_close(&loop, b);
  harness_clock_step(&srv[0], -STEP);
  harness_stop_all();
  return 0;
}
