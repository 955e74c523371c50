/* The restart guard and masters that cannot lose keys (issue 11, item 6).
 *
 * A master running with appendonly yes and appendfsync always writes and
 * fsyncs every acknowledged SET before answering, and loads them all when
 * it restarts: a restart loses no lock, so its votes need no delay. The
 * client reads INFO persistence (aof_enabled) and CONFIG GET appendfsync at
 * every handshake.
 *
 *  a) fresh durable masters, auto guard, ttl 30 s: the first acquisition
 *     succeeds at its first attempt (today: ENOQUORUM for 30 s);
 *  b) fresh masters without persistence: refused by the guard, every vote
 *     ERESTARTED with its wait and window, and redlock_result_explain says
 *     so in words ("2 of 3 masters never seen by any client ...");
 *  c) the rule is sound: a lock held on durable masters survives a
 *     SIGKILL and restart of one of them, and another client is refused;
 *  d) appendonly with appendfsync everysec is not durable: guarded;
 *  e) a user without CONFIG (ACL -config) cannot tell: guarded;
 *  f) durability is the operator's statement (config `durable`, URI
 *     ?durable=1): masters that were not declared are guarded, whatever
 *     they report (nothing a new instance reports shows what its
 *     predecessor did). a) to e) declare their masters. */
#include "tutil.h"

#define N 3
#define TTL 30000

static harness_server aof[N];     /* appendonly yes, appendfsync always */
static harness_server plain[N];   /* no persistence */
static harness_server noconf[N];  /* durable, but the client may not CONFIG */
static const char *addrs[N];

static int declare = 1;   /* the clients declare the masters durable */
static const char *prefix; /* the clients' key prefix (NULL: none) */

static redlock_client_t *guarded(uv_loop_t *loop, harness_server *srv,
                                 const char *user, const char *pass) {
  redlock_client_config cfg = {.command_timeout_ms = 1000,
                               .connect_timeout_ms = 2000,
                               .username = user,
                               .password = pass,
                               .durable = declare,    /* guard: auto */
                               .key_prefix = prefix};
  redlock_client_t *c = NULL;
  harness_addrs(srv, N, addrs);
  cfg.servers = addrs;
  cfg.n_servers = N;
  ASSERT_EQ(redlock_client_new(loop, &cfg, &c), 0);
  tu_wait_up(loop, c, N, 10000);
  return c;
}

/* One attempt of a 30 s lock; returns the status, op filled. */
static int try_once(uv_loop_t *loop, redlock_lock_t *l, tu_op *op) {
  redlock_acquire_opts once = {.wait_ms = -1};
  return tu_acquire(loop, l, TTL, &once, op);
}

static void expect_guarded(uv_loop_t *loop, harness_server *srv,
                           const char *what, const char *user,
                           const char *pass) {
  redlock_client_t *c = guarded(loop, srv, user, pass);
  redlock_lock_t *l;
  tu_op op;
  int i, k, rc;
  ASSERT_EQ(redlock_lock_new(c, what, strlen(what), &l), 0);
  /* Guarded means it stays so: three attempts, 300 ms apart, the later
   * ones after any read of the masters' records and marks the first
   * started has ended (a declared master is cleared by such a read). */
  for (k = 0; k < 3; k++) {
    if (k > 0)
      tu_run_for(loop, 300);
    rc = try_once(loop, l, &op);
    if (rc != REDLOCK_ENOQUORUM)
      TEST_FAIL("%s: a young master's vote counted at attempt %d (status "
                "%s): it is not durable", what, k + 1, redlock_err_name(rc));
    for (i = 0; i < N; i++)
      if (op.nodes[i].vote != REDLOCK_VOTE_NONE)
        ASSERT_EQ(op.nodes[i].error, REDLOCK_ERESTARTED);
  }
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(loop, c);
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c, *b;
  redlock_lock_t *l, *lb;
  tu_op op;
  char why[1024], val[128];
  int i, rc;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(aof, 0, sizeof(aof));
  memset(plain, 0, sizeof(plain));
  memset(noconf, 0, sizeof(noconf));
  for (i = 0; i < N; i++) {
    aof[i].appendonly = 1;
    noconf[i].appendonly = 1;
    noconf[i].acl_user = "app on >app-pw ~* &* +@all -config";
    noconf[i].admin_user = "app";
    noconf[i].admin_pass = "app-pw";
  }
  harness_start(aof, N);
  harness_start(plain, N);
  harness_start(noconf, N);

  /* a) */
  c = guarded(&loop, aof, NULL, NULL);
  ASSERT_EQ(redlock_lock_new(c, "durable", 7, &l), 0);
  rc = try_once(&loop, l, &op);
  if (rc != 0)
    TEST_FAIL("a) fresh durable masters: the first acquisition failed "
              "(%s; master 1: %s): their votes should count at once",
              redlock_err_name(rc), op.nodes[0].errstr);
  ASSERT_EQ(op.attempts, 1);
  fprintf(stderr, "a) fresh durable masters: acquired at the first attempt "
          "(validity %lld ms)\n", (long long)op.validity_ms);

  /* c) the lock survives a crash of a durable master. The acquisition
   * was decided at quorum: wait (bounded) until master 1 has the key
   * too, so that the crash is what the test is about. */
  {
    uint64_t end = harness_now_ms() + 5000;
    while (tu_count_holding(aof, 1, "durable", redlock_lock_token(l)) != 1) {
      if (harness_now_ms() > end)
        TEST_FAIL("c) master 1 never got the key");
      tu_run_for(&loop, 2);
    }
  }
  harness_kill(&aof[0]);
  harness_restart(&aof[0]);
  ASSERT_EQ(harness_get(&aof[0], "durable", val, sizeof(val)), 1);
  ASSERT_STR_EQ(val, redlock_lock_token(l));
  /* Master 2 loses the key (its own fault, within the model: one faulty
   * master): the second client's answer now rests on what master 1
   * kept. Had master 1 come back empty, masters 1 and 2 would vote yes
   * and, declared durable, count at once: a double grant. */
  ASSERT_EQ(harness_cmdf(&aof[1], val, sizeof(val), "DEL durable"), 0);
  b = guarded(&loop, aof, NULL, NULL);
  ASSERT_EQ(redlock_lock_new(b, "durable", 7, &lb), 0);
  rc = try_once(&loop, lb, &op);
  if (rc == 0)
    TEST_FAIL("c) a second client was granted a lock held on durable "
              "masters after one of them restarted");
  ASSERT_EQ(rc, REDLOCK_ETAKEN);
  fprintf(stderr, "c) master 1 killed and restarted: the key is still "
          "there, a second client gets %s\n", redlock_err_name(rc));
  ASSERT_EQ(redlock_lock_free(lb), 0);
  tu_close_client(&loop, b);
  /* (Master 2 no longer holds it, master 1 may still be reconnecting:
   * a cleanup, whatever it decides.) */
  rc = tu_release(&loop, l, &op);
  ASSERT(rc == 0 || rc == REDLOCK_ENOTHELD || rc == REDLOCK_ENOQUORUM);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(&loop, c);

  /* b) masters without persistence: guarded, and explained */
  c = guarded(&loop, plain, NULL, NULL);
  ASSERT_EQ(redlock_lock_new(c, "plain", 5, &l), 0);
  rc = try_once(&loop, l, &op);
  ASSERT_EQ(rc, REDLOCK_ENOQUORUM);
  /* Decided once a quorum was impossible: at least 2 refused. */
  {
    int refused = 0;
    for (i = 0; i < N; i++) {
      if (op.nodes[i].vote == REDLOCK_VOTE_NONE)
        continue;
      ASSERT_EQ(op.nodes[i].error, REDLOCK_ERESTARTED);
      ASSERT_EQ(op.nodes[i].guard_window_ms, TTL);
      ASSERT_GT(op.nodes[i].guard_wait_ms, 0);
      ASSERT_LE(op.nodes[i].guard_wait_ms, TTL);
      refused++;
    }
    ASSERT_GE(refused, 2);
  }
  {
    redlock_result res;
    memset(&res, 0, sizeof(res));
    res.status = rc;
    res.yes = op.yes;
    res.no = op.no;
    res.err = op.err;
    res.n_nodes = op.n_nodes;
    res.attempts = op.attempts;
    res.quorum = 2;
    res.nodes = op.nodes;
    redlock_result_explain(&res, why, sizeof(why));
  }
  fprintf(stderr, "b) fresh masters without persistence: %s\n", why);
  if (strstr(why, "of 3 masters never seen by any client under this "
                  "prefix") == NULL ||
      strstr(why, "(restart guard): their votes count again within") == NULL)
    TEST_FAIL("b) the explanation does not name the restart guard: %s",
              why);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(&loop, c);

  /* d) everysec loses up to a second of writes: not durable */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&aof[i], val, sizeof(val),
                           "CONFIG SET appendfsync everysec"), 0);
  expect_guarded(&loop, aof, "everysec", NULL, NULL);
  fprintf(stderr, "d) appendfsync everysec: guarded\n");

  /* e) durable, but this user may not read the configuration */
  expect_guarded(&loop, noconf, "noconf", "app", "app-pw");
  fprintf(stderr, "e) no CONFIG permission: guarded\n");

  /* f) durable masters that nobody declared */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&aof[i], val, sizeof(val),
                           "CONFIG SET appendfsync always"), 0);
  /* A prefix of its own: d) saw these declared masters report
   * appendfsync everysec, which leaves marks of a broken declaration on
   * the other masters (guard.c 6.); under the default prefix they would
   * guard the masters whatever f) is about. */
  declare = 0;
  prefix = "f:";
  expect_guarded(&loop, aof, "undeclared", NULL, NULL);
  fprintf(stderr, "f) appendfsync always, not declared: guarded\n");

  harness_loop_close(&loop, 5000);
  harness_stop_all();
  return 0;
}
