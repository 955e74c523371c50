/* The restart guard must not be fooled by how Redis rounds its uptime.
 *
 * INFO's uptime_in_seconds is whole WALL-CLOCK seconds since the start
 * (server.unixtime - stat_starttime): it reads 1 as soon as a wall-clock
 * second boundary has passed, even if the server started only a few
 * hundred ms ago. Taking "uptime 1" as "started 1000 ms ago" makes a
 * master that restarted empty look a whole ttl old when the ttl is 1 s
 * or less, and the guard (default window: the ttl) lets its vote count.
 *
 * N=3. Client A (guard off: the servers are new) acquires "k" while M3 is
 * down: A holds it on M1 and M2. At a chosen point of a wall-clock second
 * X, M2 crashes and restarts empty, and M3 comes back. Once the wall
 * clock has passed X+1 (both masters now report uptime 1, while they are
 * younger than the ttl), client B (default guard) asks for "k" with the
 * same ttl, one attempt, while A's lock is still valid:
 *   M1: no (A's key)   M2: yes (empty)   M3: yes (empty)
 * Counting M2 and M3 is a double grant. Correct: B is refused, M2's and
 * M3's votes are errors ERESTARTED (no yes among them).
 *
 * Cases:
 *  1. ttl 1000, B is a new client: its first handshake reads uptime 1.
 *  2. ttl 1000, B was connected before the restarts: it reconnects to the
 *     new instances within second X (uptime 0: guarded correctly); after
 *     the boundary its connections are killed (CLIENT KILL TYPE normal), B
 *     reconnects to the same instances (same run_id) and reads uptime 1.
 *     That later reading must not make the masters look older than the
 *     first one did.
 *  3. ttl 500, B a new client (restarts late in the second, so that A's
 *     short lock is still valid when B asks).
 * Whatever B reads, A's lock still being valid when B decides proves the
 * restarted masters are younger than the ttl, i.e. inside the window.
 *
 * Timing: the restarts must finish within second X (and, in case 2, B's
 * reconnection too), and B must decide before A's lock expires. A run
 * where that did not hold proves nothing either way and is repeated (at
 * most 4 runs per case). If no run of a case could be aligned under
 * valgrind (REDLOCK_TEST_SLOW), the test exits as skipped (77, which meson
 * and the test command report: never a pass);
 * otherwise that is a failure. After a refusal, B must get the lock once
 * A's has expired and the window has passed (bounded retries). */
#include <time.h>

#include "tutil.h"

#define N 3
#define RUNS 4

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t uptime_s(const harness_server *s) {
  char buf[8192];
  const char *p;
  ASSERT_EQ(harness_cmdf(s, buf, sizeof(buf), "INFO server"), 0);
  p = strstr(buf, "uptime_in_seconds:");
  ASSERT_NOT_NULL(p);
  return strtoll(p + strlen("uptime_in_seconds:"), NULL, 10);
}

static redlock_client_t *client_with_guard(uv_loop_t *loop,
                                           const harness_server *srv,
                                           int guard_ms) {
  const char *addrs[N];
  redlock_client_config cfg = {.restart_guard_ms = guard_ms,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50,
                               .command_timeout_ms = 1000,
                               .connect_timeout_ms = 2000};
  redlock_client_t *c = NULL;
  harness_addrs(srv, N, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(loop, &cfg, &c), 0);
  return c;
}

/* Runs the loop in 1 ms steps until n_up(c) satisfies the bound (at most
 * `max_up` when below, else at least `min_up`); -1 after timeout_ms. */
static int wait_n_up(uv_loop_t *loop, redlock_client_t *c, unsigned min_up,
                     unsigned max_up, uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  for (;;) {
    unsigned up = redlock_client_n_up(c);
    if (up >= min_up && up <= max_up)
      return 0;
    if (harness_now_ms() > end)
      return -1;
    tu_run_for(loop, 1);
  }
}

/* Runs the loop in 1 ms steps until the wall clock is at [lo, hi) ms
 * within a second. */
static void wait_phase(uv_loop_t *loop, int lo, int hi) {
  uint64_t end = harness_now_ms() + 3000;
  for (;;) {
    int64_t ph = wall_ms() % 1000;
    if (ph >= lo && ph < hi)
      return;
    if (harness_now_ms() > end)
      TEST_FAIL("could not reach wall-clock phase %d-%d ms", lo, hi);
    tu_run_for(loop, 1);
  }
}

/* One run; returns 1 when it proved something (B refused while A's lock
 * was valid: correct), 0 when the timing did not line up. A double grant
 * fails the test. */
static int run(int reconnect, int64_t ttl, int phase) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *a;
  redlock_client_t *b = NULL;
  redlock_lock_t *la;
  redlock_lock_t *lb;
  redlock_acquire_opts once = {.wait_ms = -1};
  char buf[256];
  int64_t x;
  int64_t a_validity;
  int a_held;
  int ok = 0;
  int answered = 0;
  tu_op op;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  harness_kill(&srv[2]);
  a = client_with_guard(&loop, srv, -1);
  tu_wait_up(&loop, a, 2, 10000);
  if (reconnect) {
    b = client_with_guard(&loop, srv, 0);
    tu_wait_up(&loop, b, 2, 10000);
  }
  ASSERT_EQ(redlock_lock_new(a, "k", 1, &la), 0);

  /* A acquires just before the chosen phase of second X. */
  wait_phase(&loop, phase - 30, phase);
  ASSERT_EQ(tu_acquire(&loop, la, ttl, &once, &op), 0);
  ASSERT_EQ(op.yes, 2);
  x = wall_ms() / 1000;

  /* M2 loses A's key; M3 comes back; both within second X. */
  harness_kill(&srv[1]);
  harness_restart(&srv[1]);
  harness_restart(&srv[2]);
  if (wall_ms() / 1000 != x) {
    fprintf(stderr, "restarts crossed a second boundary: run again\n");
    goto out;
  }
  if (reconnect) {
    /* B reconnects to both new instances within second X: uptime 0. */
    if (wait_n_up(&loop, b, N, N, 2000) != 0)
      TEST_FAIL("B did not reconnect");
    if (wall_ms() / 1000 != x) {
      fprintf(stderr, "B reconnected after the boundary: run again\n");
      goto out;
    }
  }

  /* Past the boundary: both restarted masters now say uptime 1. */
  {
    uint64_t end = harness_now_ms() + 3000;
    while (uptime_s(&srv[1]) < 1 || uptime_s(&srv[2]) < 1) {
      if (harness_now_ms() > end)
        TEST_FAIL("uptime stayed 0");
      tu_run_for(&loop, 2);
    }
  }
  ASSERT_GT(wall_ms() / 1000, x);

  if (reconnect) {
    /* Kill B's (and A's) connections to M2 and M3: B reconnects to the
     * same instances and reads uptime 1 this time. Both are down at once
     * (at most M1 up), then both are back. */
    for (i = 1; i < N; i++) {
      ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf),
                             "CLIENT KILL TYPE normal"), 0);
      ASSERT_GE(strtoll(buf, NULL, 10), 1);
    }
    if (wait_n_up(&loop, b, 0, 1, 2000) != 0)
      TEST_FAIL("B did not notice its connections were killed");
    if (wait_n_up(&loop, b, N, N, 2000) != 0)
      TEST_FAIL("B did not reconnect after the kill");
  } else {
    b = client_with_guard(&loop, srv, 0);
    tu_wait_up(&loop, b, N, 10000);
  }

  /* B asks while A's lock is still valid. */
  ASSERT_EQ(redlock_lock_new(b, "k", 1, &lb), 0);
  tu_acquire(&loop, lb, ttl, &once, &op);
  a_held = redlock_lock_is_held(la);
  a_validity = redlock_lock_validity_ms(la);
  if (!a_held) {
    fprintf(stderr, "A's lock expired before B decided (B: %s): run "
            "again\n", redlock_err_name(op.status));
  } else if (op.status == 0) {
    fprintf(stderr, "ttl %lld, %s: DOUBLE GRANT: B holds \"k\" on %d "
            "masters (M2 \"%s\", M3 \"%s\") while A's lock is valid for "
            "%lld ms more\n", (long long)ttl,
            reconnect ? "B reconnected" : "new client B",
            tu_count_holding(srv, N, "k", redlock_lock_token(lb)),
            op.errstr[1], op.errstr[2], (long long)a_validity);
    ASSERT_NE(op.status, 0);
  } else {
    fprintf(stderr, "ttl %lld, %s: refused: %s; M2 %s \"%s\", M3 %s "
            "\"%s\"\n", (long long)ttl,
            reconnect ? "B reconnected" : "new client B",
            redlock_err_name(op.status),
            redlock_err_name(op.nodes[1].error), op.errstr[1],
            redlock_err_name(op.nodes[2].error), op.errstr[2]);
    /* Decided as soon as a quorum is impossible: at least one of the
     * restarted masters answered; none of them counted as yes. */
    for (i = 1; i < N; i++) {
      ASSERT_NE(op.nodes[i].vote, REDLOCK_VOTE_YES);
      if (op.nodes[i].vote != REDLOCK_VOTE_NONE) {
        ASSERT_EQ(op.nodes[i].error, REDLOCK_ERESTARTED);
        answered++;
      }
    }
    ASSERT_GE(answered, 1);
    /* After A's lock expired and the window passed, B gets it. */
    {
      redlock_acquire_opts wait = {.wait_ms = 8000, .retry_count = 1000,
                                   .retry_delay_ms = 100};
      ASSERT_EQ(tu_acquire(&loop, lb, ttl, &wait, &op), 0);
      ASSERT_EQ(redlock_lock_is_held(la), 0);
    }
    ok = 1;
  }
  ASSERT_EQ(redlock_lock_free(lb), 0);

out:
  ASSERT_EQ(redlock_lock_free(la), 0);
  if (b != NULL)
    ASSERT_EQ(redlock_client_close(b, NULL, NULL), 0);
  tu_close(&loop, a);   /* runs the loop until both are closed */
  harness_stop_all();
  return ok;
}

static void check(const char *name, int reconnect, int64_t ttl,
                  int phase) {
  int i;
  for (i = 0; i < RUNS; i++)
    if (run(reconnect, ttl, phase))
      return;
  if (getenv("REDLOCK_TEST_SLOW") != NULL) {
    /* Not a pass: meson reports the skip (exit 77), and the test
     * command fails on it (only environment skips are allowed there; the
     * fault suite does not run under valgrind). */
    fprintf(stderr, "%s: skipped: the timing never lined up in %d runs "
            "under valgrind\n", name, RUNS);
    harness_stop_all();
    exit(TEST_SKIP);
  }
  TEST_FAIL("%s: the timing never lined up in %d runs", name, RUNS);
}

int main(void) {
  check("ttl 1000, new client", 0, 1000, 550);
  check("ttl 1000, reconnect", 1, 1000, 550);
  check("ttl 500, new client", 0, 500, 800);
  return 0;
}
