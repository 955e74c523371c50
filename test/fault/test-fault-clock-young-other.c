/* A young instance's clock is judged with the tolerance of the shortest
 * ttl, not of the lock being decided: the keys it may have lost early
 * belong to whoever holds them (reported from the simulator's seed
 * 1883017503125197, --durable: a double grant at 11.41 s).
 *
 * Three masters declared durable (appendonly yes, appendfsync always)
 * run under the clock shim (clockshim.c); the deployment's ttl record
 * says 600 s. M3 is down; A holds "k" with a SHORT ttl (3 s: a drift
 * allowance of 32 ms) on M1 and M2. M1 restarts with its wall clock
 * 2.5 s ahead: it reloads A's key from its AOF, which now expires 2.5 s
 * early by its clock. M3 comes back. Once A's key is gone from M1 (and
 * A's validity still runs), a new client B asks for "k" with a LONG ttl
 * (600 s: a drift allowance of 6 s). M1's first sight (2.5 s ahead) is
 * within the longest ttl's allowance, so settle() marks no step; the
 * young-instance check then decides. The old code judged M1's offset
 * with B's own allowance (6 s): M1's YES counted, and M1 and M3 made
 * B's quorum while A's lock was valid. The lost key was A's, whose ttl
 * allows 32 ms; any holder's may allow as little as the fixed 2 ms. */
#include "tutil.h"

#define N 3
#define TTL_A 3000       /* ms: A's (short) ttl */
#define TTL_B 600000     /* ms: B's (long) ttl */
#define RECORD TTL_B     /* ms: the deployment's longest ttl */
#define STEP 2500        /* ms: M1's clock at its restart */

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

/* A's key is gone from M1 (expired early by its clock), or M1 errs. */
static int gone_on_m1(void *arg) {
  (void)arg;
  return has_key(0, "k") == 0;
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
  uint64_t t_a, t_gone, t_b;
  int64_t v_before, v_after;
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
  ASSERT_EQ(tu_acquire(&loop, held, TTL_A, &one, &op), 0);
  t_a = harness_now_ms();
  w.token = redlock_lock_token(held);
  if (harness_wait_for(on_two, &w, TTL_A) != 0)
    TEST_FAIL("A's key is not on M1 and M2");

  /* M3 back first (it never had A's key): less time spent in A's ttl. */
  harness_restart(&srv[2]);
  harness_kill(&srv[0]);
  harness_clock_step(&srv[0], STEP);
  harness_restart(&srv[0]);
  /* A's key on M1 expires TTL_A - STEP ms after A set it, by M1's
   * clock; poll for its absence (bounded by A's ttl). */
  if (harness_wait_for(gone_on_m1, NULL, TTL_A) != 0)
    TEST_FAIL("A's key is still on M1 %llu ms after A's grant",
              (unsigned long long)(harness_now_ms() - t_a));
  t_gone = harness_now_ms();
  ASSERT_EQ(tu_count_holding(srv, N, "k", w.token), 1);   /* M2 only */
  v_before = redlock_lock_validity_ms(held);
  fprintf(stderr, "A's key gone from M1 %llu ms after A's grant; A's "
          "validity %lld ms\n", (unsigned long long)(t_gone - t_a),
          (long long)v_before);
  if (v_before <= 0)
    TEST_FAIL("A's validity ran out (%llu ms after its grant) before B "
              "could ask: too slow a machine, the test proves nothing",
              (unsigned long long)(t_gone - t_a));

  b = client(&loop, 0, N);   /* new, auto guard */
  ASSERT_EQ(redlock_lock_new(b, "k", 1, &l), 0);
  st = tu_acquire(&loop, l, TTL_B, &one, &op);
  t_b = harness_now_ms();
  v_after = redlock_lock_validity_ms(held);
  fprintf(stderr, "B (ttl %d ms), %llu ms after A's grant (A's validity "
          "then %lld ms): %s, yes %u no %u err %u; M1: vote %d %s (%s)\n",
          TTL_B, (unsigned long long)(t_b - t_a), (long long)v_after,
          redlock_err_name(st), op.yes, op.no, op.err, op.nodes[0].vote,
          redlock_err_name(op.nodes[0].error), op.errstr[0]);
  /* Else B's grant is legitimate, and a refusal proves nothing. */
  if (v_after <= 0)
    TEST_FAIL("A's validity ran out (%llu ms after its grant) before B's "
              "decision: too slow a machine, the test proves nothing",
              (unsigned long long)(t_b - t_a));
  if (st == 0)
    TEST_FAIL("double grant: B got \"k\" while A holds it for %lld ms "
              "more (M1, %d ms ahead, counted with B's ttl's allowance)",
              (long long)v_after, STEP);
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
  ASSERT(strstr(op.errstr[0], "the others'") != NULL);

  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, a);
  tu_close(&loop, b);
  harness_clock_step(&srv[0], -STEP);
  harness_stop_all();
  return 0;
}
