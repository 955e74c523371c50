/* tutil.c: see tutil.h. */
#include "tutil.h"

void tu_cb(redlock_lock_t *lock, int status, const redlock_result *res,
           void *arg) {
  tu_op *op = arg;
  unsigned i;
  (void)lock;
  op->calls++;
  op->status = status;
  op->cb_ms = harness_now_ms();
  ASSERT_NOT_NULL(res);
  ASSERT_EQ(res->status, status);
  op->attempts = res->attempts;
  op->yes = res->yes;
  op->no = res->no;
  op->err = res->err;
  op->n_nodes = res->n_nodes;
  op->validity_ms = res->validity_ms;
  op->elapsed_us = res->elapsed_us;
  for (i = 0; i < res->n_nodes && i < TU_MAX_NODES; i++) {
    op->nodes[i] = res->nodes[i];
    snprintf(op->errstr[i], sizeof(op->errstr[i]), "%s",
             res->nodes[i].errstr);
    op->nodes[i].errstr = op->errstr[i];
    snprintf(op->server[i], sizeof(op->server[i]), "%s",
             res->nodes[i].server);
    snprintf(op->node[i], sizeof(op->node[i]), "%s",
             res->nodes[i].node != NULL ? res->nodes[i].node : "(null)");
    op->nodes[i].server = op->server[i];
    op->nodes[i].node = op->node[i];
  }
  op->done = 1;
}

static int tu_finish(uv_loop_t *loop, tu_op *op) {
  ASSERT_EQ(op->done, 0);   /* never from inside the call */
  if (harness_run_until(loop, &op->done, 30000) != 0)
    TEST_FAIL("operation did not complete within 30 s");
  ASSERT_EQ(op->calls, 1);
  return op->status;
}

int tu_acquire(uv_loop_t *loop, redlock_lock_t *l, int64_t ttl_ms,
               const redlock_acquire_opts *opts, tu_op *op) {
  int rc;
  memset(op, 0, sizeof(*op));
  rc = redlock_lock_acquire(l, ttl_ms, opts, tu_cb, op);
  if (rc != 0)
    TEST_FAIL("acquire: %s: %s", redlock_err_name(rc), redlock_last_error());
  return tu_finish(loop, op);
}

int tu_extend(uv_loop_t *loop, redlock_lock_t *l, int64_t ttl_ms,
              tu_op *op) {
  int rc;
  memset(op, 0, sizeof(*op));
  rc = redlock_lock_extend(l, ttl_ms, tu_cb, op);
  if (rc != 0)
    TEST_FAIL("extend: %s: %s", redlock_err_name(rc), redlock_last_error());
  return tu_finish(loop, op);
}

int tu_release(uv_loop_t *loop, redlock_lock_t *l, tu_op *op) {
  int rc;
  memset(op, 0, sizeof(*op));
  rc = redlock_lock_release(l, tu_cb, op);
  if (rc != 0)
    TEST_FAIL("release: %s: %s", redlock_err_name(rc), redlock_last_error());
  return tu_finish(loop, op);
}

static const char *addrs_store[TU_MAX_NODES];

static redlock_client_t *client_at(uv_loop_t *loop,
                                   const char *const *addrs, int n,
                                   const redlock_client_config *cfg,
                                   unsigned wait_up, int guard_auto);

redlock_client_t *tu_client_at(uv_loop_t *loop, const char *const *addrs,
                               int n, const redlock_client_config *cfg,
                               unsigned wait_up) {
  return client_at(loop, addrs, n, cfg, wait_up, 0);
}

redlock_client_t *tu_client_guarded(uv_loop_t *loop,
                                    const char *const *addrs, int n,
                                    const redlock_client_config *cfg,
                                    unsigned wait_up) {
  return client_at(loop, addrs, n, cfg, wait_up, 1);
}

static redlock_client_t *client_at(uv_loop_t *loop,
                                   const char *const *addrs, int n,
                                   const redlock_client_config *cfg,
                                   unsigned wait_up, int guard_auto) {
  redlock_client_config c;
  redlock_client_t *client = NULL;
  int rc;
  ASSERT_LE(n, TU_MAX_NODES);
  if (cfg != NULL)
    c = *cfg;
  else
    memset(&c, 0, sizeof(c));
  c.servers = addrs;
  c.n_servers = (size_t)n;
  if (c.command_timeout_ms == 0)
    c.command_timeout_ms = 1000;
  if (c.connect_timeout_ms == 0)
    c.connect_timeout_ms = 2000;
  /* The harness's servers are seconds old: the restart guard would hold
   * their votes for a ttl. Tests of the guard set it explicitly. */
  if (c.restart_guard_ms == 0 && !guard_auto)
    c.restart_guard_ms = -1;
  rc = redlock_client_new(loop, &c, &client);
  if (rc != 0)
    TEST_FAIL("client_new: %s: %s", redlock_err_name(rc),
              redlock_last_error());
  if (wait_up > 0)
    tu_wait_up(loop, client, wait_up, 10000);
  return client;
}

redlock_client_t *tu_client(uv_loop_t *loop, const harness_server *srv,
                            int n, const redlock_client_config *cfg,
                            unsigned wait_up) {
  harness_addrs(srv, n, addrs_store);
  return tu_client_at(loop, addrs_store, n, cfg, wait_up);
}

typedef struct {
  uv_timer_t t;
  redlock_client_t *c;
  unsigned want;
  volatile int ok;
} up_waiter;

static void on_up_tick(uv_timer_t *t) {
  up_waiter *w = t->data;
  if (redlock_client_n_up(w->c) == w->want)
    w->ok = 1;
}

static void on_closed_noop(uv_handle_t *h) {
  (void)h;
}

void tu_wait_up(uv_loop_t *loop, redlock_client_t *c, unsigned want,
                uint64_t timeout_ms) {
  up_waiter w;
  memset(&w, 0, sizeof(w));
  w.c = c;
  w.want = want;
  w.ok = redlock_client_n_up(c) == want;
  uv_timer_init(loop, &w.t);
  w.t.data = &w;
  uv_timer_start(&w.t, on_up_tick, 1, 1);
  if (!w.ok && harness_run_until(loop, &w.ok, timeout_ms) != 0) {
    /* Why: each master's failures so far. */
    redlock_stats st;
    size_t i;
    if (redlock_client_stats(c, &st) == 0)
      for (i = 0; i < redlock_client_n_servers(c); i++)
        fprintf(stderr, "master %zu (%s): up %d, connects %llu, timeouts "
                "%llu, connection failures %llu\n", i, st.masters[i].server,
                st.masters[i].up, (unsigned long long)st.masters[i].connects,
                (unsigned long long)st.masters[i].timeouts,
                (unsigned long long)st.masters[i].conn_failures);
    TEST_FAIL("n_up stayed %u, wanted %u", redlock_client_n_up(c), want);
  }
  uv_close((uv_handle_t *)&w.t, on_closed_noop);
  uv_run(loop, UV_RUN_NOWAIT);
}

static void on_client_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

void tu_close_client(uv_loop_t *loop, redlock_client_t *c) {
  volatile int closed = 0;
  ASSERT_EQ(redlock_client_close(c, on_client_closed, (void *)&closed), 0);
  if (harness_run_until(loop, &closed, 10000) != 0)
    TEST_FAIL("client close did not complete within 10 s");
}

void tu_close(uv_loop_t *loop, redlock_client_t *c) {
  tu_close_client(loop, c);
  harness_loop_close(loop, 5000);
}

int tu_slow(void) {
  const char *s = getenv("REDLOCK_TEST_SLOW");
  return s != NULL && *s != '\0' && strcmp(s, "0") != 0;
}

static void on_run_for(uv_timer_t *t) {
  *(volatile int *)t->data = 1;
}

void tu_run_for(uv_loop_t *loop, uint64_t ms) {
  uv_timer_t t;
  volatile int fired = 0;
  uv_timer_init(loop, &t);
  t.data = (void *)&fired;
  uv_timer_start(&t, on_run_for, ms, 0);
  if (harness_run_until(loop, &fired, ms + 10000) != 0)
    TEST_FAIL("timer did not fire");
  uv_close((uv_handle_t *)&t, on_closed_noop);
  uv_run(loop, UV_RUN_NOWAIT);
}

int tu_count_holding(const harness_server *srv, int n, const char *key,
                     const char *token) {
  int i;
  int count = 0;
  char val[128];
  for (i = 0; i < n; i++)
    if (srv[i].pid != 0 && !srv[i].paused &&
        harness_get(&srv[i], key, val, sizeof(val)) == 1 &&
        strcmp(val, token) == 0)
      count++;
  return count;
}

void tu_require_tls(void) {
  uv_loop_t loop;
  redlock_client_t *c = NULL;
  const char *addr[1] = {"rediss://127.0.0.1:1"};
  redlock_client_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = addr;
  cfg.n_servers = 1;
  cfg.tls_insecure = 1;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  if (redlock_client_new(&loop, &cfg, &c) != 0) {
    fprintf(stderr, "no TLS in this build (%s): skipping\n",
            redlock_last_error());
    uv_loop_close(&loop);
    exit(TEST_SKIP);
  }
  tu_close(&loop, c);
}

int64_t tu_evalsha_calls(const harness_server *s) {
  char buf[8192];
  const char *p;
  if (harness_cmdf(s, buf, sizeof(buf), "INFO commandstats") != 0)
    return -1;
  p = strstr(buf, "cmdstat_evalsha:calls=");
  return p ? strtoll(p + 22, NULL, 10) : 0;
}

void tu_drain(uv_loop_t *loop, redlock_client_t *c) {
  redlock_lock_t *probe;
  tu_op op;
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_new(c, "tu-drain", 8, &probe), 0);
  ASSERT_EQ(redlock_lock_inspect(probe, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &op.done, 30000), 0);
  ASSERT_EQ(redlock_lock_free(probe), 0);
}

uint64_t tu_commands_sent(const redlock_client_t *c) {
  redlock_stats st;
  uint64_t sum = 0;
  unsigned i;
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  for (i = 0; i < st.n_masters; i++)
    sum += st.masters[i].commands;
  return sum;
}

void tu_wait_sent(uv_loop_t *loop, const redlock_client_t *c, uint64_t total,
                  uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  while (tu_commands_sent(c) < total) {
    if (harness_now_ms() > end)
      TEST_FAIL("%llu lock commands written, %llu wanted, after %llu ms",
                (unsigned long long)tu_commands_sent(c),
                (unsigned long long)total, (unsigned long long)timeout_ms);
    tu_run_for(loop, 1);
  }
}

void tu_wait_subscribed(uv_loop_t *loop, const harness_server *srv, int n,
                        const char *channel, int want, uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  for (;;) {
    char buf[64];
    int i, have = 0;
    for (i = 0; i < n; i++)
      if (harness_cmdf(&srv[i], buf, sizeof(buf), "EVAL %s 0 %s",
                       "return redis.call('pubsub','numsub',ARGV[1])[2]",
                       channel) == 0 && atoi(buf) >= 1)
        have++;
    if (have >= want)
      return;
    if (harness_now_ms() > end)
      TEST_FAIL("%d of %d masters have a subscriber on %s after %llu ms "
                "(%d wanted)", have, n, channel,
                (unsigned long long)timeout_ms, want);
    tu_run_for(loop, 2);
  }
}

static int cmp_grant(const void *a, const void *b) {
  const tu_grant *x = a;
  const tu_grant *y = b;
  return x->from < y->from ? -1 : x->from > y->from;
}

unsigned long tu_overlaps(tu_grant *g, int n) {
  unsigned long overlaps = 0;
  uint64_t max_to = 0;
  int max_client = -1, i;
  qsort(g, (size_t)n, sizeof(*g), cmp_grant);
  for (i = 0; i < n; i++) {
    if (g[i].from < max_to && g[i].client != max_client) {
      overlaps++;
      fprintf(stderr, "OVERLAP: client %d from %llu, client %d until %llu\n",
              g[i].client, (unsigned long long)g[i].from, max_client,
              (unsigned long long)max_to);
    }
    if (g[i].to > max_to) {
      max_to = g[i].to;
      max_client = g[i].client;
    }
  }
  return overlaps;
}

char tu_warnings[4096];

void tu_on_warning(redlock_client_t *c, const char *msg, void *arg) {
  size_t n = strlen(tu_warnings);
  (void)c;
  (void)arg;
  fprintf(stderr, "warning: %s\n", msg);
  snprintf(tu_warnings + n, sizeof(tu_warnings) - n, "%s\n", msg);
}
