/* "Durable" is the operator's statement, checked while connected
 * (issue 20, item 3).
 *
 * N=3 masters started with appendonly yes + appendfsync always. At run
 * time an operator turns AOF off on M1 and M2 (CONFIG SET appendonly no).
 * A takes a lock (ttl 8 s); M1 and M2 are killed and restarted with their
 * startup flags: AOF is on again, but the file stopped at the switch, so
 * A's key is gone there. Nothing the new instances report shows it.
 *  a) a new client that did not declare the masters durable is refused:
 *     M1 and M2 are young (restart guard). The old code trusted what
 *     they reported (AOF + always) and granted it 1.3 s after A.
 *  b) a client that declared them durable and stayed connected saw the
 *     declaration break (its re-check: a warning naming the master), and
 *     does not trust the restarted instances either.
 *  c) with the declaration kept (AOF never turned off), a restart of a
 *     declared master loses nothing and its vote counts at once (the
 *     declaration's purpose; test-fault-guard-durable has more).
 *  d) appendfsync lowered at run time (CONFIG SET appendfsync everysec on
 *     M3, a host crash would lose the last second): the declaration broke
 *     too, and the connected client says so. */
#include "tutil.h"

#define N 3
#define TTL 8000

static harness_server srv[N];
static char warnings[4096];

static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  size_t n = strlen(warnings);
  (void)c;
  (void)arg;
  fprintf(stderr, "warning: %s\n", msg);
  snprintf(warnings + n, sizeof(warnings) - n, "%s\n", msg);
}

/* declare: 1 the masters are declared durable; -1 A's client, which
 * only takes the lock (guard off: the masters are seconds old). */
static redlock_client_t *client(uv_loop_t *loop, int declare) {
  redlock_client_config cfg = {.durable = declare > 0,
                               .restart_guard_ms = declare < 0 ? -1 : TTL,
                               .max_ttl_ms = TTL,
                               .on_warning = on_warning,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  return tu_client(loop, srv, N, &cfg, N);
}

static int once(uv_loop_t *loop, redlock_client_t *c, const char *key,
                tu_op *op, redlock_lock_t **out) {
  redlock_acquire_opts one = {.wait_ms = -1};
  redlock_lock_t *l = NULL;
  int rc;
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  rc = tu_acquire(loop, l, TTL, &one, op);
  if (out != NULL)
    *out = l;
  else
    ASSERT_EQ(redlock_lock_free(l), 0);
  return rc;
}

typedef struct {
  uv_loop_t *loop;
  redlock_client_t *c;
  unsigned i;
  uint64_t before;
} reconnect_wait;

static int reconnected(void *arg) {
  reconnect_wait *w = arg;
  redlock_stats st;
  tu_run_for(w->loop, 5);
  ASSERT_EQ(redlock_client_stats(w->c, &st), 0);
  return st.masters[w->i].connects > w->before &&
         st.masters[w->i].up;
}

/* Kills master i, restarts it, and waits until c made a new handshake
 * with it. */
static void bounce(uv_loop_t *loop, redlock_client_t *c, unsigned i) {
  static redlock_stats st;
  reconnect_wait w = {loop, c, i, 0};
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  w.before = st.masters[i].connects;
  harness_kill(&srv[i]);
  harness_restart(&srv[i]);
  if (harness_wait_for(reconnected, &w, 10000) != 0)
    TEST_FAIL("no new handshake with master %u", i + 1);
}

static const char *want_warning = "now reports appendonly no";

static int warned(void *arg) {
  (void)arg;
  return strstr(warnings, want_warning) != NULL;
}

typedef struct {
  uv_loop_t *loop;
} spin;

/* The client's loop runs while we wait (its re-check is a timer). */
static int warned_running(void *arg) {
  spin *s = arg;
  tu_run_for(s->loop, 20);
  return warned(NULL);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *a, *b, *watch;
  redlock_lock_t *held;
  spin sp = {&loop};
  tu_op op;
  char ok[64];
  int i, rc;

  for (i = 0; i < N; i++)
    srv[i].appendonly = 1;
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);

  /* c) first: the declaration kept, a restart costs nothing. */
  a = client(&loop, 1);
  ASSERT_EQ(once(&loop, a, "kept", &op, &held), 0);
  bounce(&loop, a, 0);
  ASSERT_EQ(tu_release(&loop, held, &op), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  harness_pause(&srv[1]);   /* the quorum needs the restarted M1 */
  rc = once(&loop, a, "kept-2", &op, NULL);
  harness_resume(&srv[1]);
  fprintf(stderr, "c) declared and kept: after a restart of M1, %s (M1: "
          "%s)\n", redlock_err_name(rc), op.errstr[0]);
  ASSERT_EQ(rc, 0);
  tu_close_client(&loop, a);

  /* The declaration breaks at run time on M1 and M2. */
  watch = client(&loop, 1);
  warnings[0] = '\0';
  for (i = 0; i < 2; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "CONFIG SET appendonly no"), 0);
  a = client(&loop, -1);
  ASSERT_EQ(once(&loop, a, "job", &op, &held), 0);
  {
    /* A's key is on every master before they go down. */
    uint64_t end = harness_now_ms() + 5000;
    while (tu_count_holding(srv, N, "job", redlock_lock_token(held)) != N &&
           harness_now_ms() < end)
      tu_run_for(&loop, 2);
  }
  /* b) the connected client notices (re-check every 3 s). */
  if (harness_wait_for(warned_running, &sp, 10000) != 0)
    TEST_FAIL("b) no warning about the broken declaration: \"%s\"",
              warnings);
  for (i = 0; i < 2; i++)
    bounce(&loop, watch, (unsigned)i);
  ASSERT_EQ(tu_count_holding(srv, N, "job", redlock_lock_token(held)), 1);

  /* a) */
  b = client(&loop, 0);
  rc = once(&loop, b, "job", &op, NULL);
  fprintf(stderr, "a) undeclared new client: %s (M1: %s)\n",
          redlock_err_name(rc), op.errstr[0]);
  ASSERT(redlock_lock_is_held(held));
  if (rc == 0)
    TEST_FAIL("a) double grant: a new client got \"job\" while A holds it");
  /* Refused by the guard on M1 or M2 (the decision may come before the
   * other one answered), and neither counted as a yes. */
  ASSERT(op.nodes[0].error == REDLOCK_ERESTARTED ||
         op.nodes[1].error == REDLOCK_ERESTARTED);
  ASSERT_NE(op.nodes[0].vote, REDLOCK_VOTE_YES);
  ASSERT_NE(op.nodes[1].vote, REDLOCK_VOTE_YES);
  tu_close_client(&loop, b);

  /* b) */
  rc = once(&loop, watch, "job", &op, NULL);
  fprintf(stderr, "b) declared client that saw the break: %s (M1: %s)\n",
          redlock_err_name(rc), op.errstr[0]);
  ASSERT(redlock_lock_is_held(held));
  if (rc == 0)
    TEST_FAIL("b) double grant to the client that saw the declaration "
              "break");
  ASSERT(strstr(warnings, "restarted after it broke its durability") !=
         NULL);

  /* d) */
  warnings[0] = '\0';
  want_warning = "now reports appendfsync not always";
  ASSERT_EQ(harness_cmdf(&srv[2], ok, sizeof(ok),
                         "CONFIG SET appendfsync everysec"), 0);
  if (harness_wait_for(warned_running, &sp, 10000) != 0)
    TEST_FAIL("d) no warning about appendfsync lowered: \"%s\"", warnings);
  ASSERT(strstr(warnings, harness_addr(&srv[2])) != NULL);

  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(&loop, watch);
  tu_close(&loop, a);
  harness_stop_all();
  return 0;
}
