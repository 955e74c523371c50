/* Extend renews the validity and the key's ttl; the reported validity is
 * below the ttl by at least the elapsed time (plus drift), measured on a
 * master that answers slowly (SIGSTOP for ~150 ms during the round). */
#include "tutil.h"

typedef struct {
  uv_timer_t t;
  harness_server *s;
} resumer;

static void on_resume(uv_timer_t *t) {
  resumer *r = t->data;
  harness_resume(r->s);
}

static void on_closed(uv_handle_t *h) {
  (void)h;
}

int main(void) {
  harness_server srv[1];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_client_config cfg = {.command_timeout_ms = 5000};
  redlock_acquire_opts once = {.wait_ms = -1};
  resumer r;
  tu_op op;
  const char *key = "extend-validity";
  int64_t v1;
  int64_t pttl;
  uint64_t t0;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, 1);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, 1, &cfg, 1);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  /* Validity: ttl - elapsed - drift. */
  ASSERT_EQ(tu_acquire(&loop, l, 2000, &once, &op), 0);
  ASSERT_LE(op.validity_ms,
            2000 - (int64_t)(op.elapsed_us / 1000) - 20 - 2);
  ASSERT_GT(op.validity_ms, 0);

  /* Extend to a longer ttl: validity and the server's ttl grow. */
  v1 = redlock_lock_validity_ms(l);
  ASSERT_LE(v1, 2000);
  ASSERT_EQ(tu_extend(&loop, l, 30000, &op), 0);
  ASSERT_GT(redlock_lock_validity_ms(l), 20000);
  ASSERT_GT(op.validity_ms, 20000);
  pttl = harness_pttl(&srv[0], key);
  ASSERT_GT(pttl, 29000);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);

  /* A slow master: the round takes >= 150 ms, and the validity shows it. */
  memset(&r, 0, sizeof(r));
  r.s = &srv[0];
  uv_timer_init(&loop, &r.t);
  r.t.data = &r;
  harness_pause(&srv[0]);
  uv_update_time(&loop);   /* the pause took a while: no stale loop time */
  t0 = harness_now_ms();
  uv_timer_start(&r.t, on_resume, 160, 0);
  ASSERT_EQ(tu_acquire(&loop, l, 2000, &once, &op), 0);
  ASSERT_GE(op.cb_ms - t0, 140);   /* loop timers have ms granularity */
  ASSERT_GE(op.elapsed_us, 140000);
  ASSERT_LE(op.validity_ms, 2000 - 150 - 20 - 2);
  ASSERT_LE(redlock_lock_validity_ms(l), 2000 - 150 - 20 - 2);
  uv_close((uv_handle_t *)&r.t, on_closed);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);

  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
