/* The restart guard. N=3: client 1 holds the lock on masters A and B
 * (C was down when it acquired). B crashes and restarts without
 * persistence: its copy is gone. Client 2 then asks:
 *   A: no (client 1's key)   B: yes (empty)   C: yes (empty)
 * Without the guard that is 2 of 3: a double grant while client 1 still
 * holds a valid lock. With the guard (default window: the ttl), B's and
 * C's yes votes do not count until the window has passed: no grant; after
 * the window (once client 1's lock has expired) client 2 gets it. */
#include "tutil.h"

#define N 3

/* guard_ms as in the config: 0 = the default window (the largest ttl
 * used), negative = off. Not tu_client: it turns the guard off. */
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

static int run(int guard_on) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c1;
  redlock_client_t *c2;
  redlock_lock_t *l1;
  redlock_lock_t *l2;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  int granted;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* Client 1 acquires while C is down: held on A and B. The servers are
   * new, so client 1 itself runs without the guard. */
  harness_kill(&srv[2]);
  c1 = client_with_guard(&loop, srv, -1);
  tu_wait_up(&loop, c1, 2, 10000);
  ASSERT_EQ(redlock_lock_new(c1, "guarded", 7, &l1), 0);
  ASSERT_EQ(tu_acquire(&loop, l1, 3000, &once, &op), 0);
  ASSERT_EQ(op.yes, 2);

  /* B crashes and comes back empty; C comes back too. */
  harness_kill(&srv[1]);
  harness_restart(&srv[1]);
  harness_restart(&srv[2]);
  ASSERT(redlock_lock_is_held(l1));

  c2 = client_with_guard(&loop, srv, guard_on ? 0 : -1);
  tu_wait_up(&loop, c2, N, 10000);
  ASSERT_EQ(redlock_lock_new(c2, "guarded", 7, &l2), 0);
  tu_acquire(&loop, l2, 3000, &once, &op);
  granted = op.status == 0;
  if (granted) {
    fprintf(stderr, "guard %s: DOUBLE GRANT (client 1 validity %lld ms)\n",
            guard_on ? "on" : "off",
            (long long)redlock_lock_validity_ms(l1));
    ASSERT(redlock_lock_is_held(l1));   /* both hold it: the violation */
  } else {
    fprintf(stderr, "guard %s: refused: %s; B says \"%s\"\n",
            guard_on ? "on" : "off", redlock_err_name(op.status),
            op.errstr[1]);
    /* The round is decided as soon as a quorum is impossible: at least
     * one of the restarted masters answered, and none counted as yes. */
    ASSERT_GE((op.nodes[1].error == REDLOCK_ERESTARTED) +
                  (op.nodes[2].error == REDLOCK_ERESTARTED), 1);
    ASSERT_NE(op.nodes[1].vote, REDLOCK_VOTE_YES);
    ASSERT_NE(op.nodes[2].vote, REDLOCK_VOTE_YES);
    /* The guarded masters' copies were released again. */
    tu_drain(&loop, c2);
    ASSERT_EQ(harness_dbsize(&srv[1]), 0);
    ASSERT_EQ(harness_dbsize(&srv[2]), 0);
    /* Once the window has passed, the masters count again. */
    {
      redlock_acquire_opts wait = {.wait_ms = 8000, .retry_count = 1000,
                                   .retry_delay_ms = 100};
      uint64_t t0 = harness_now_ms();
      ASSERT_EQ(tu_acquire(&loop, l2, 3000, &wait, &op), 0);
      ASSERT_EQ(redlock_lock_is_held(l1), 0);   /* client 1's expired */
      fprintf(stderr, "guard on: granted %llu ms later, after the window\n",
              (unsigned long long)(harness_now_ms() - t0));
    }
  }
  ASSERT_EQ(redlock_lock_free(l2), 0);
  ASSERT_EQ(redlock_lock_free(l1), 0);
  ASSERT_EQ(redlock_client_close(c1, NULL, NULL), 0);
  tu_close(&loop, c2);   /* runs the loop until both are closed */
  harness_stop_all();
  return granted;
}

int main(void) {
  /* Without the guard the double grant happens ... */
  ASSERT_EQ(run(0), 1);
  /* ... and with it, it does not. */
  ASSERT_EQ(run(1), 0);
  return 0;
}
