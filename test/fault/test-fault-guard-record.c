/* The restart guard's record of the longest ttl, wrong in neither
 * direction (issue 20, item 4).
 *  a) too low: a new client (a fresh `redlock extend` process) extends a
 *     lock adopted by its token to a longer ttl right after it was made:
 *     the record must be raised on a quorum before the longer ttl reaches
 *     any master. The old code sent the extend first: the masters held the
 *     key for the longer ttl, the record still said the shorter one, and
 *     the extend failed ("ttl record not confirmed on this master").
 *  b) too high: a ttl above the deployment's cap (max_ttl_ms, 1 h by
 *     default) is refused with a message and raises nothing (the old code
 *     raised the record to 24 days for good).
 *  c) an operator lowers the record (redlock_client_set_ttl_record): a
 *     guarded client's window follows it. */
#include "tutil.h"

#define N 3

static harness_server srv[N];

static int64_t record(int i) {
  char val[64];
  if (harness_get(&srv[i], "__redlock__:maxttl", val, sizeof(val)) != 1)
    return 0;
  return strtoll(val, NULL, 10);
}

typedef struct {
  volatile int done;
  int status;
  unsigned yes;
} set_op;

static void on_set(redlock_client_t *c, int status,
                   const redlock_result *res, void *arg) {
  set_op *op = arg;
  (void)c;
  op->status = status;
  op->yes = res->yes;
  op->done = 1;
}

/* One attempt of a new auto-guard client: the window it reports for a
 * refused master (all are young to it), or -1. */
static int64_t window_seen(uv_loop_t *loop) {
  redlock_client_config cfg = {.max_ttl_ms = 60000};
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts one = {.wait_ms = -1};
  tu_op op;
  int64_t w = -1;
  unsigned i;
  cfg.restart_guard_ms = 0;   /* tu_client turns 0 into off: set below */
  {
    const char *addrs[N];
    harness_addrs(srv, N, addrs);
    cfg.servers = addrs;
    cfg.n_servers = N;
    ASSERT_EQ(redlock_client_new(loop, &cfg, &c), 0);
    tu_wait_up(loop, c, N, 10000);
  }
  ASSERT_EQ(redlock_lock_new(c, "probe", 5, &l), 0);
  (void)tu_acquire(loop, l, 1000, &one, &op);
  for (i = 0; i < N; i++)
    if (op.nodes[i].error == REDLOCK_ERESTARTED &&
        op.nodes[i].guard_window_ms > w)
      w = op.nodes[i].guard_window_ms;
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(loop, c);
  return w;
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b;
  redlock_client_config off = {.max_ttl_ms = 60000};
  redlock_lock_t *la, *lb;
  redlock_acquire_opts one = {.wait_ms = -1};
  tu_op op;
  set_op so;
  int64_t pttl;
  int i, rc;

  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* a) A (guard off: the masters are new) takes a 10 s lock. */
  a = tu_client(&loop, srv, N, &off, N);
  ASSERT_EQ(redlock_lock_new(a, "rec", 3, &la), 0);
  ASSERT_EQ(tu_acquire(&loop, la, 10000, &one, &op), 0);
  {
    const char *addrs[N];
    redlock_client_config cfg = {.command_timeout_ms = 1000};
    harness_addrs(srv, N, addrs);
    cfg.servers = addrs;
    cfg.n_servers = N;
    /* B: a new process's client, auto guard; extends at once. */
    ASSERT_EQ(redlock_client_new(&loop, &cfg, &b), 0);
  }
  ASSERT_EQ(redlock_lock_new(b, "rec", 3, &lb), 0);
  ASSERT_EQ(redlock_lock_adopt(lb, redlock_lock_token(la)), 0);
  rc = tu_extend(&loop, lb, 20000, &op);
  pttl = harness_pttl(&srv[0], "rec");
  fprintf(stderr, "a) a new client extends 10 s -> 20 s: %s (master 1: "
          "%s); records %lld %lld %lld, master 1's key pttl %lld\n",
          redlock_err_name(rc), op.errstr[0], (long long)record(0),
          (long long)record(1), (long long)record(2), (long long)pttl);
  ASSERT_EQ(rc, 0);
  for (i = 0; i < N; i++) {
    int64_t p = harness_pttl(&srv[i], "rec");
    if (p > 10000)
      ASSERT_GE(record(i), 20000);
  }
  ASSERT_EQ(tu_release(&loop, lb, &op), 0);
  ASSERT_EQ(redlock_lock_free(lb), 0);
  ASSERT_EQ(redlock_lock_free(la), 0);

  /* b) 24 days: refused, nothing raised. */
  ASSERT_EQ(redlock_lock_new(b, "typo", 4, &lb), 0);
  rc = redlock_lock_acquire(lb, 24LL * 86400 * 1000, &one, tu_cb, &op);
  fprintf(stderr, "b) acquire --ttl 24d: %s: %s\n", redlock_err_name(rc),
          redlock_last_error());
  ASSERT_EQ(rc, REDLOCK_EINVAL);
  ASSERT(strstr(redlock_last_error(), "max_ttl_ms") != NULL);
  for (i = 0; i < N; i++)
    ASSERT_LE(record(i), 20000);
  ASSERT_EQ(redlock_lock_free(lb), 0);
  tu_close_client(&loop, b);

  /* c) the record says 60 s; an operator lowers it to 2 s. */
  {
    redlock_lock_t *l;
    ASSERT_EQ(redlock_lock_new(a, "long", 4, &l), 0);
    ASSERT_EQ(tu_acquire(&loop, l, 60000, &one, &op), 0);
    ASSERT_EQ(tu_release(&loop, l, &op), 0);
    ASSERT_EQ(redlock_lock_free(l), 0);
  }
  for (i = 0; i < N; i++)
    ASSERT_EQ(record(i), 60000);
  ASSERT_EQ(window_seen(&loop), 60000);
  memset(&so, 0, sizeof(so));
  ASSERT_EQ(redlock_client_set_ttl_record(a, 2000, on_set, &so), 0);
  ASSERT_EQ(harness_run_until(&loop, &so.done, 10000), 0);
  ASSERT_EQ(so.status, 0);
  ASSERT_EQ(so.yes, N);
  for (i = 0; i < N; i++)
    ASSERT_EQ(record(i), 2000);
  ASSERT_EQ(window_seen(&loop), 2000);
  fprintf(stderr, "c) record lowered from 60 s to 2 s: a guarded client's "
          "window follows\n");

  tu_close(&loop, a);
  harness_stop_all();
  return 0;
}
