/* A leader keeps its leadership across empty restarts (issue 29, item 10).
 *
 * N = 3, the restart guard on (automatic window), a leader "a" and a
 * standby "b" campaigning on two clients. Master 0 is killed and started
 * again without persistence: the leader's key is gone there. The leader
 * re-creates it (its extension heals: SET PX where the key is missing)
 * within a few extensions. Then master 1 restarts the same way, and heals
 * the same way. The leader must never be deposed, the standby never
 * elected, and the key must name the leader on all three masters at the
 * end.
 *
 * On the old code (no heal for elections) master 0 stays empty, and once
 * master 1 restarts too the leader's key is on one master of three: its
 * next extension is refused by a majority and it steps down (DEPOSED,
 * ENOTHELD); the guard then keeps both restarted masters' votes out for a
 * window, and nobody leads. */
#include <string.h>

#include "tutil.h"

#define N 3
#define TTL_MS 3000

static harness_server srv[N];

typedef struct inst {
  const char *id;
  int elected, deposed, last_reason;
  uint64_t deposed_ms;
  redlock_election_t *e;
} inst;

static void on_change(redlock_election_t *e, redlock_election_event ev,
                      int reason, void *arg) {
  inst *in = arg;
  (void)e;
  if (ev == REDLOCK_ELECTED) {
    in->elected++;
  } else {
    in->deposed++;
    in->last_reason = reason;
    in->deposed_ms = harness_now_ms();
  }
}

static redlock_client_t *client(uv_loop_t *loop) {
  const char *addrs[N];
  redlock_client_config cfg = {.command_timeout_ms = 150,
                               .connect_timeout_ms = 2000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  harness_addrs(srv, N, addrs);
  return tu_client_guarded(loop, addrs, N, &cfg, N);
}

/* 1 when master i holds the key with the identity `id`. */
static int holds(int i, const char *id) {
  char val[256];
  const char *dot;
  if (harness_get(&srv[i], "leader", val, sizeof(val)) != 1)
    return 0;
  dot = strchr(val, '.');
  return dot != NULL && strcmp(dot + 1, id) == 0;
}

/* Runs the loop until master i holds the leader's key again, or the bound
 * passes; returns how long it took, or -1. */
static int64_t wait_healed(uv_loop_t *loop, int i, const char *id,
                           int64_t bound_ms) {
  uint64_t t0 = harness_now_ms();
  while (!holds(i, id)) {
    if (harness_now_ms() - t0 > (uint64_t)bound_ms)
      return -1;
    tu_run_for(loop, 5);
  }
  return (int64_t)(harness_now_ms() - t0);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *ca, *cb;
  inst a = {.id = "a"}, b = {.id = "b"};
  redlock_election_opts oa = {.ttl_ms = TTL_MS, .retry_delay_ms = 200,
                              .on_change = on_change, .arg = &a};
  redlock_election_opts ob = {.ttl_ms = TTL_MS, .retry_delay_ms = 200,
                              .on_change = on_change, .arg = &b};
  /* A heal comes with the next extension (every ttl / 3) once the
   * connection is back: a few extensions, scaled for slow builds. */
  int64_t heal_bound = harness_bound_ms(3 * TTL_MS);
  int64_t healed[2];
  uint64_t t0;
  int i, r;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ca = client(&loop);
  cb = client(&loop);

  /* The leader first (the guard holds the brand-new masters' votes for a
   * window: the first election takes about a ttl), then the standby. */
  ASSERT_EQ(redlock_election_new(ca, "leader", 6, a.id, &oa, &a.e), 0);
  ASSERT_EQ(redlock_election_campaign(a.e), 0);
  t0 = harness_now_ms();
  while (a.elected == 0) {
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(4 * TTL_MS))
      TEST_FAIL("the leader was never elected");
    tu_run_for(&loop, 5);
  }
  ASSERT_EQ(redlock_election_new(cb, "leader", 6, b.id, &ob, &b.e), 0);
  ASSERT_EQ(redlock_election_campaign(b.e), 0);
  tu_run_for(&loop, 100);
  for (i = 0; i < N; i++)
    ASSERT(holds(i, a.id));

  /* Masters 0 and then 1 restart empty, one after the other: the second
   * only once the first holds the leader's key again (or the bound
   * passed: the old code never heals). */
  for (r = 0; r < 2; r++) {
    harness_kill(&srv[r]);
    harness_restart(&srv[r]);
    ASSERT_EQ(harness_dbsize(&srv[r]), 0);
    healed[r] = wait_healed(&loop, r, a.id, heal_bound);
    fprintf(stderr, "master %d restarted empty: %s %lld ms; leader "
            "deposed %d time(s) so far (reason %s)\n", r,
            healed[r] >= 0 ? "the leader's key was back after"
                           : "the leader's key was still missing after",
            (long long)(healed[r] >= 0 ? healed[r] : heal_bound), a.deposed,
            a.deposed ? redlock_err_name(a.last_reason) : "-");
  }
  /* One more ttl: the leader must still lead. */
  tu_run_for(&loop, TTL_MS);
  fprintf(stderr, "end: a elected %d, deposed %d (%s); b elected %d; "
          "a leads: %d; key on masters: %d %d %d\n", a.elected, a.deposed,
          a.deposed ? redlock_err_name(a.last_reason) : "-", b.elected,
          redlock_election_is_leader(a.e), holds(0, a.id), holds(1, a.id),
          holds(2, a.id));
  ASSERT_GE(healed[0], 0);
  ASSERT_GE(healed[1], 0);
  ASSERT_EQ(a.deposed, 0);
  ASSERT_EQ(a.elected, 1);
  ASSERT_EQ(b.elected, 0);
  ASSERT_EQ(redlock_election_is_leader(a.e), 1);
  for (i = 0; i < N; i++)
    ASSERT(holds(i, a.id));

  ASSERT_EQ(redlock_election_free(b.e), 0);
  ASSERT_EQ(redlock_election_free(a.e), 0);
  tu_close_client(&loop, cb);
  tu_close(&loop, ca);
  return 0;
}
