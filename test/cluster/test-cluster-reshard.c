/* Resharding while a lock is held and auto-extended (issue 22): the slot
 * of the held key moves from its primary to another, step by step -
 * IMPORTING/MIGRATING (new keys of the slot are answered with ASK), the
 * held key migrated (its extensions then go by ASK too), the slot handed
 * over (MOVED) - and back again with redis-cli's way of doing it. The
 * lock is never lost, a contender on another client is refused every
 * time it tries, both redirections are followed (the master's counters),
 * and a key acquired during the migration is where the cluster says. */
#include "tutil.h"

#define P 3

static harness_server srv[P];

typedef struct contender {
  uv_timer_t t;
  redlock_lock_t *l;
  int tries, granted, busy;
  int stop;
  volatile int done;   /* stopped, nothing in flight */
} contender;

static void on_try(redlock_lock_t *l, int status, const redlock_result *res,
                   void *arg) {
  contender *k = arg;
  (void)res;
  k->busy = 0;
  k->tries++;
  if (k->stop)
    k->done = 1;
  if (status == 0) {
    k->granted++;   /* a second holder: the test fails below */
    (void)redlock_lock_release(l, NULL, NULL);
  }
}

static void on_tick(uv_timer_t *t) {
  contender *k = t->data;
  redlock_acquire_opts once = {.wait_ms = -1};
  if (k->stop || k->busy)
    return;
  if (redlock_lock_acquire(k->l, 5000, &once, on_try, k) == 0)
    k->busy = 1;
}

static void run_steps(uv_loop_t *loop, uint64_t ms) {
  tu_run_for(loop, ms);
}

/* Runs the loop until the holder's client counted `asked` ASK and `moved`
 * MOVED redirections (bounded: fails after the scaled bound). */
static void wait_redirections(uv_loop_t *loop, redlock_client_t *c,
                              uint64_t asked, uint64_t moved) {
  uint64_t t0 = harness_now_ms();
  redlock_stats st;
  for (;;) {
    ASSERT_EQ(redlock_client_stats(c, &st), 0);
    if (st.masters[0].asked >= asked && st.masters[0].moved >= moved)
      return;
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(10000))
      TEST_FAIL("redirections: asked %llu of %llu, moved %llu of %llu",
                (unsigned long long)st.masters[0].asked,
                (unsigned long long)asked,
                (unsigned long long)st.masters[0].moved,
                (unsigned long long)moved);
    tu_run_for(loop, 20);
  }
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *holder_c, *other_c;
  redlock_lock_t *held, *fresh;
  redlock_acquire_opts ext = {.auto_extend = 1};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_stats st;
  contender k;
  const char *addr[1];
  char key[32], key2[32];
  unsigned slot;
  char buf[32];
  tu_op op;
  int src, dst, i, owner;
  memset(srv, 0, sizeof(srv));
  for (i = 0; i < P; i++)
    srv[i].cluster = 1;
  harness_start(srv, P);
  harness_cluster_make(srv, P, P);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  addr[0] = harness_cluster_addr(&srv[0]);
  holder_c = tu_client_at(&loop, addr, 1, NULL, 1);
  other_c = tu_client_at(&loop, addr, 1, NULL, 1);

  snprintf(key, sizeof(key), "{acct-7}:lock");
  snprintf(key2, sizeof(key2), "{acct-7}:other");   /* the same slot */
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "CLUSTER KEYSLOT %s",
                         key), 0);
  slot = (unsigned)strtoul(buf, NULL, 10);
  src = harness_cluster_owner(srv, P, key);
  ASSERT_GE(src, 0);
  dst = (src + 1) % P;

  ASSERT_EQ(redlock_lock_new(holder_c, key, strlen(key), &held), 0);
  ASSERT_EQ(tu_acquire(&loop, held, 1000, &ext, &op), 0);
  memset(&k, 0, sizeof(k));
  ASSERT_EQ(redlock_lock_new(other_c, key, strlen(key), &k.l), 0);
  uv_timer_init(&loop, &k.t);
  k.t.data = &k;
  uv_timer_start(&k.t, on_tick, 20, 20);

  /* 1. The slot is being migrated; the held key is still at the source. */
  harness_cluster_move_slot(srv, P, slot, &srv[src], &srv[dst], 1, 0);
  run_steps(&loop, 1200);
  /* A new key of the slot goes to the target by ASK. */
  ASSERT_EQ(redlock_lock_new(holder_c, key2, strlen(key2), &fresh), 0);
  ASSERT_EQ(tu_acquire(&loop, fresh, 10000, &once, &op), 0);
  {
    char val[128];
    ASSERT_EQ(harness_get_asking(&srv[dst], key2, val, sizeof(val)), 1);
    ASSERT_STR_EQ(val, redlock_lock_token(fresh));
  }
  ASSERT_EQ(redlock_client_stats(holder_c, &st), 0);
  ASSERT_GT(st.masters[0].asked, 0);

  /* 2. The held key moves too (MIGRATE), the slot still migrating: its
   * extensions follow by ASK. */
  {
    uint64_t asked = st.masters[0].asked;
    harness_cluster_move_slot(srv, P, slot, &srv[src], &srv[dst], 1, 1000);
    wait_redirections(&loop, holder_c, asked + 2, 0);
    ASSERT_EQ(redlock_lock_is_held(held), 1);
    ASSERT_EQ(redlock_client_stats(holder_c, &st), 0);
    ASSERT_GT(st.masters[0].asked, asked + 1);   /* >= 2 extensions */
  }
  /* 3. The slot handed over: MOVED, and the map learns. */
  harness_cluster_finish_slot(srv, P, slot, &srv[src], &srv[dst]);
  wait_redirections(&loop, holder_c, 0, 1);
  ASSERT_EQ(redlock_lock_is_held(held), 1);
  ASSERT_EQ(tu_count_holding(&srv[dst], 1, key, redlock_lock_token(held)),
            1);
  ASSERT_EQ(harness_cmdf(&srv[src], buf, sizeof(buf),
                         "CLUSTER COUNTKEYSINSLOT %u", slot), 0);
  ASSERT_STR_EQ(buf, "0");
  ASSERT_EQ(redlock_client_stats(holder_c, &st), 0);
  ASSERT_GT(st.masters[0].moved, 0);
  ASSERT_EQ(st.lost, 0);
  ASSERT_EQ(st.extension_failures, 0);

  /* 4. And back, in one go, while the extensions go on. */
  harness_cluster_move_slot(srv, P, slot, &srv[dst], &srv[src], 0, 0);
  run_steps(&loop, 1500);
  owner = harness_cluster_owner(srv, P, key);
  ASSERT_EQ(owner, src);
  ASSERT_EQ(tu_count_holding(&srv[src], 1, key, redlock_lock_token(held)),
            1);
  ASSERT_EQ(redlock_lock_is_held(held), 1);
  ASSERT_EQ(redlock_client_stats(holder_c, &st), 0);
  ASSERT_EQ(st.lost, 0);

  /* Never a second holder, and the contender did try all along. */
  k.stop = 1;
  if (!k.busy)
    k.done = 1;
  ASSERT_EQ(harness_run_until(&loop, &k.done, 10000), 0);
  ASSERT_EQ(k.granted, 0);
  ASSERT_GT(k.tries, 20);
  fprintf(stderr, "reshard: %d refused attempts of a contender, moved %llu, "
          "asked %llu\n", k.tries, (unsigned long long)st.masters[0].moved,
          (unsigned long long)st.masters[0].asked);
  uv_close((uv_handle_t *)&k.t, NULL);

  ASSERT_EQ(tu_release(&loop, held, &op), 0);
  ASSERT_EQ(tu_release(&loop, fresh, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, k.l, 5000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, k.l, &op), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  ASSERT_EQ(redlock_lock_free(fresh), 0);
  ASSERT_EQ(redlock_lock_free(k.l), 0);
  tu_close_client(&loop, other_c);
  tu_close(&loop, holder_c);
  harness_stop_all();
  return 0;
}
