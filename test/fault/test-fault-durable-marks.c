/* A broken durability declaration is known to every client, including a
 * new one that saw nothing happen (issue 29, item 2 and the suspected
 * item).
 *
 * Three masters run AOF with fsync always and are declared durable. An
 * observer client (declared, connected) sees the declaration break; A,
 * which holds the lock, does not declare them (it sees nothing). Then
 * the broken masters are killed and restarted: what they reload lacks
 * writes that A's lock rests on, and nothing the new instances report
 * shows it (AOF on, fsync always, no replication history). A new client
 * B, declared, asks for the lock and must be refused by the guard. The
 * old code remembered the break only in the observer's memory: B cleared
 * the new instances by the declaration and was granted the lock.
 *
 *  a) appendonly switched off at run time on M1 and M2 (CONFIG SET
 *     appendonly no); A extends its lock (ttl 3 s) to 20 s, which
 *     M1's and M2's AOF do not hold; the observer warns; M1 and M2 restart
 *     with AOF on again and reload A's key with the 3 s expiry, which
 *     passes. B must not get the lock while A's extension holds; nor
 *     may a new client while M3, the only master that kept the marks, is
 *     down (it cannot read them: it must not clear M1 and M2).
 *  b) the suspected item: M1 is made a replica of an unrelated server
 *     (a full resync replaces its data: A's key is gone) and promoted
 *     again (REPLICAOF NO ONE: the observer sees a master that was a
 *     replica in this life). Restarted from its AOF it shows
 *     second_repl_offset -1 and a new run_id. A's key was also dropped
 *     from M3 (as when M3 missed A's SET): with M1 counted, B gets M1 and
 *     M3 while A holds the lock on M2 and (validly) a quorum when it
 *     decided.
 *
 *  d) a mark whose write fails is written later: M2 and M3 refuse the
 *     clients HSET (ACL) when the observer sees M1 break; it warns
 *     (naming the master, the key and the permission) and tries again
 *     while it lives. Once the ACL allows it the mark is on M2 and M3
 *     without any new handshake, and a new client after M1's restart
 *     finds it. The old code sent the HSET once and never looked at
 *     the reply: no mark anywhere, and the new client counted M1's next
 *     instance at once.
 *
 *  e) a client closed while its mark is written on no other master
 *     (HSET denied for good) says so when it closes, after waiting a
 *     bounded time for a retry: a CLI call must not exit as if the
 *     break were known. The old code closed silently.
 *
 *  c) a mark is not forever: once M1's next instance (durable) has been
 *     guarded for one window, a client that counts it again drops the
 *     mark, and a later restart of M1 (the declaration kept) costs
 *     nothing, for a new client too.
 *
 * The marks a break leaves live on the OTHER masters (the broken ones
 * lose what they were told while their AOF was off). The observer is
 * closed before the restarts: what it saw must outlive it. Each case is
 * a deployment of its own (a key prefix: its records and marks). */
#include "tutil.h"

#define N 3
#define TTL 3000
#define LONG 20000

static harness_server srv[N + 1];   /* srv[N]: the unrelated server */
static char warnings[8192];
/* Each case is a deployment of its own (its records and marks): "a:",
 * "b:" ... */
static const char *prefix = "";

static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  size_t n = strlen(warnings);
  (void)c;
  (void)arg;
  fprintf(stderr, "warning: %s\n", msg);
  snprintf(warnings + n, sizeof(warnings) - n, "%s\n", msg);
}

/* declare: the masters are declared durable (the observer and B); A's
 * client does not declare them and runs without the guard. */
static redlock_client_t *client(uv_loop_t *loop, int declare, int guard,
                                unsigned up) {
  const char *addrs[N];
  redlock_client_config cfg = {.durable = declare,
                               .restart_guard_ms = guard,
                               .on_warning = declare ? on_warning : NULL,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  cfg.key_prefix = prefix;
  harness_addrs(srv, N, addrs);
  return tu_client_guarded(loop, addrs, N, &cfg, up);
}

typedef struct {
  uv_loop_t *loop;
  const char *want;
} spin;

/* The observer's loop runs while we wait (its checks are timers). */
static int warned(void *arg) {
  spin *s = arg;
  tu_run_for(s->loop, 20);
  return strstr(warnings, s->want) != NULL;
}

typedef struct {
  const char *key;
  const char *token;
  int want;
} holding;

static int holds(void *arg) {
  holding *h = arg;
  return tu_count_holding(srv, N, h->key, h->token) == h->want;
}

static int gone_12(void *arg) {
  char val[256];
  const char *key = arg;
  return harness_get(&srv[0], key, val, sizeof(val)) == 0 &&
         harness_get(&srv[1], key, val, sizeof(val)) == 0;
}

/* B, new and declared (auto guard), asks once; it must be refused while
 * A holds the lock, and no restarted master (bit i of `restarted`: M(i+1))
 * may count. */
static void expect_refused(uv_loop_t *loop, redlock_lock_t *held,
                           const char *key, const char *label,
                           uint64_t t_grant, unsigned up,
                           unsigned restarted) {
  redlock_client_t *b = client(loop, 1, 0, up);
  redlock_lock_t *l = NULL;
  redlock_acquire_opts one = {.wait_ms = -1};
  tu_op op;
  int st, i, refused = 0;
  ASSERT_EQ(redlock_lock_new(b, key, strlen(key), &l), 0);
  st = tu_acquire(loop, l, TTL, &one, &op);
  fprintf(stderr, "%s: B %llu ms after A's last grant: %s, yes %u no %u "
          "err %u; M1: vote %d %s (%s); M2: vote %d (%s)\n", label,
          (unsigned long long)(harness_now_ms() - t_grant),
          redlock_err_name(st), op.yes, op.no, op.err, op.nodes[0].vote,
          redlock_err_name(op.nodes[0].error), op.errstr[0],
          op.nodes[1].vote, op.errstr[1]);
  ASSERT(redlock_lock_is_held(held));   /* else the refusal proves nothing */
  if (st == 0)
    TEST_FAIL("%s: double grant: B got \"%s\" while A holds it", label,
              key);
  /* Refused by the guard on a restarted master (the decision may come
   * before another answered), and none counted as a yes. */
  for (i = 0; i < N; i++) {
    if (!(restarted & (1u << i)))
      continue;
    ASSERT_NE(op.nodes[i].vote, REDLOCK_VOTE_YES);
    refused += op.nodes[i].error == REDLOCK_ERESTARTED;
  }
  ASSERT_GE(refused, 1);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(loop, b);
}

static void restart(int i) {
  harness_kill(&srv[i]);
  harness_restart(&srv[i]);
}

static void case_a(uv_loop_t *loop) {
  redlock_client_t *obs, *a;
  redlock_lock_t *held;
  redlock_acquire_opts one = {.wait_ms = -1};
  spin sp = {loop, "now reports appendonly no"};
  holding h;
  tu_op op;
  char ok[64];
  uint64_t t_ext;
  int i;
  warnings[0] = '\0';
  obs = client(loop, 1, 0, N);
  a = client(loop, 0, -1, N);
  ASSERT_EQ(redlock_lock_new(a, "ka", 2, &held), 0);
  ASSERT_EQ(tu_acquire(loop, held, TTL, &one, &op), 0);
  h.key = "a:ka";
  h.token = redlock_lock_token(held);
  h.want = N;
  if (harness_wait_for(holds, &h, 5000) != 0)
    TEST_FAIL("a) A's key is not on every master");
  for (i = 0; i < 2; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "CONFIG SET appendonly no"), 0);
  ASSERT_EQ(tu_extend(loop, held, LONG, &op), 0);
  t_ext = harness_now_ms();
  if (harness_wait_for(warned, &sp, harness_bound_ms(10000)) != 0)
    TEST_FAIL("a) the observer did not see the declaration break: \"%s\"",
              warnings);
  /* What it saw must outlive it: it is gone before the restarts. */
  tu_close_client(loop, obs);
  restart(0);
  restart(1);
  /* Reloaded with the first expiry: gone once it passed. */
  if (harness_wait_for(gone_12, (void *)"a:ka", harness_bound_ms(10000)) !=
      0)
    TEST_FAIL("a) A's key is still on M1 or M2");
  expect_refused(loop, held, "ka", "a) appendonly off at run time", t_ext,
                 N, 3);
  /* M3 alone holds the marks (M1's and M2's copies were lost with their
   * AOF): with M3 down, a new client cannot read them, and must not
   * clear M1 and M2 (they would make its quorum). */
  harness_kill(&srv[2]);
  expect_refused(loop, held, "ka", "a) the same, M3 down", t_ext, 2, 3);
  harness_restart(&srv[2]);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(loop, a);
}

/* M1's AOF rewrites done so far (none in progress), or -1 while one
 * is in progress or scheduled. */
static long aof_rewrites(void) {
  char buf[8192];
  const char *p;
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO persistence"), 0);
  if (strstr(buf, "aof_rewrite_in_progress:0") == NULL ||
      strstr(buf, "aof_rewrite_scheduled:0") == NULL)
    return -1;
  p = strstr(buf, "aof_rewrites:");
  ASSERT_NOT_NULL(p);
  return strtol(p + strlen("aof_rewrites:"), NULL, 10);
}

static void case_b(uv_loop_t *loop) {
  redlock_client_t *obs, *a;
  redlock_lock_t *held;
  redlock_acquire_opts one = {.wait_ms = -1};
  spin sp = {loop, "was a replica promoted"};
  holding h;
  tu_op op;
  char buf[8192];
  uint64_t t_grant;
  long rewrites;
  warnings[0] = '\0';
  obs = client(loop, 1, 0, N);
  a = client(loop, 0, -1, N);
  ASSERT_EQ(redlock_lock_new(a, "kb", 2, &held), 0);
  ASSERT_EQ(tu_acquire(loop, held, LONG, &one, &op), 0);
  t_grant = harness_now_ms();
  h.key = "b:kb";
  h.token = redlock_lock_token(held);
  h.want = N;
  if (harness_wait_for(holds, &h, 5000) != 0)
    TEST_FAIL("b) A's key is not on every master");
  ASSERT_EQ(harness_cmdf(&srv[2], buf, sizeof(buf), "DEL b:kb"), 0);
  rewrites = aof_rewrites();
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "REPLICAOF 127.0.0.1 %d",
                         srv[N].port), 0);
  {
    /* The full resync replaced M1's data, and its AOF was written anew
     * from it (a rewrite after the sync: until it ends, a restart would
     * load the old file). */
    uint64_t end = harness_now_ms() + (uint64_t)harness_bound_ms(10000);
    for (;;) {
      ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO replication"),
                0);
      if (strstr(buf, "master_link_status:up") != NULL &&
          harness_get(&srv[0], "unrelated", buf, sizeof(buf)) == 1 &&
          aof_rewrites() > rewrites)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("b) M1 did not sync from the unrelated server");
      tu_run_for(loop, 20);
    }
  }
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "REPLICAOF NO ONE"), 0);
  if (harness_wait_for(warned, &sp, harness_bound_ms(10000)) != 0)
    TEST_FAIL("b) the observer did not see M1 promoted: \"%s\"", warnings);
  tu_close_client(loop, obs);
  restart(0);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "INFO replication"), 0);
  ASSERT_NOT_NULL(strstr(buf, "second_repl_offset:"));
  fprintf(stderr, "b) M1 after its restart: %.21s\n",
          strstr(buf, "second_repl_offset:"));
  ASSERT(strstr(buf, "second_repl_offset:-1") != NULL);
  ASSERT_EQ(tu_count_holding(srv, N, "b:kb", redlock_lock_token(held)), 1);
  expect_refused(loop, held, "kb", "b) promoted, restarted from its AOF",
                 t_grant, N, 1);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(loop, a);
}

/* M1's mark on master i: 1 present, 0 absent. */
static int marked_on(int i) {
  char buf[256];
  ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "HGET %s__redlock__:broke "
                         "%s", prefix, harness_addr(&srv[0])), 0);
  return strcmp(buf, "(nil)") != 0;
}

/* (B's loop runs meanwhile.) */
static int forgotten(void *arg) {
  tu_run_for(arg, 20);
  return !marked_on(1) && !marked_on(2);
}

#define SHORT 1500   /* c): the deployment's longest ttl */

typedef struct {
  uv_loop_t *loop;
  redlock_client_t *c;
} mark_read;

/* The client's verdict on M1 names the mark. */
/* The client counts M1 (it read the marks and found none). */
static int counts(void *arg) {
  mark_read *m = arg;
  redlock_master_info mi;
  tu_run_for(m->loop, 10);
  ASSERT_EQ(redlock_client_master_info(m->c, 0, &mi), 0);
  return mi.counts;
}

static int saw_mark(void *arg) {
  mark_read *m = arg;
  redlock_master_info mi;
  tu_run_for(m->loop, 10);
  ASSERT_EQ(redlock_client_master_info(m->c, 0, &mi), 0);
  return strstr(mi.guard_reason, "durability broke (a mark)") != NULL;
}

static void case_c(uv_loop_t *loop) {
  redlock_client_t *obs, *a, *b;
  redlock_lock_t *held, *l;
  redlock_acquire_opts one = {.wait_ms = -1};
  spin sp = {loop, "now reports appendonly no"};
  tu_op op;
  char ok[64], first[160] = "";
  uint64_t t0, t_new;
  int st;
  warnings[0] = '\0';
  obs = client(loop, 1, 0, N);
  a = client(loop, 0, -1, N);   /* records the deployment's ttl */
  ASSERT_EQ(redlock_lock_new(a, "kc", 2, &held), 0);
  ASSERT_EQ(tu_acquire(loop, held, SHORT, &one, &op), 0);
  ASSERT_EQ(tu_release(loop, held, &op), 0);
  ASSERT_EQ(redlock_lock_free(held), 0);
  tu_close_client(loop, a);
  ASSERT_EQ(harness_cmdf(&srv[0], ok, sizeof(ok), "CONFIG SET appendonly no"),
            0);
  if (harness_wait_for(warned, &sp, harness_bound_ms(10000)) != 0)
    TEST_FAIL("c) the observer did not see the declaration break: \"%s\"",
              warnings);
  tu_close_client(loop, obs);
  ASSERT(marked_on(1) && marked_on(2));
  restart(0);
  /* A new client: M1 is guarded for one window (the mark), then counts,
   * and the mark goes (M1's new instance is durable). */
  t_new = harness_now_ms();   /* B's first sight of M1 is later */
  b = client(loop, 1, 0, N);
  ASSERT_EQ(redlock_lock_new(b, "x", 1, &l), 0);
  {
    /* B read the marks (then M2 may hang). */
    mark_read mr = {loop, b};
    if (harness_wait_for(saw_mark, &mr, harness_bound_ms(5000)) != 0)
      TEST_FAIL("c) the new client did not find the mark");
  }
  harness_pause(&srv[1]);   /* B's quorum needs M1 */
  t0 = harness_now_ms();
  for (;;) {
    st = tu_acquire(loop, l, SHORT, &one, &op);
    if (first[0] == '\0')
      snprintf(first, sizeof(first), "%s", op.errstr[0]);
    if (st == 0)
      break;
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(4 * SHORT + 5000))
      TEST_FAIL("c) M1 never counted again: %s", op.errstr[0]);
    tu_run_for(loop, 50);
  }
  fprintf(stderr, "c) M1 counted %llu ms after the new client met it "
          "(first refusal: %s)\n", (unsigned long long)(harness_now_ms() - t0),
          first);
  (void)tu_release(loop, l, &op);
  harness_resume(&srv[1]);
  /* Not before one window since B first saw it (ms granularity). */
  ASSERT_GE(harness_now_ms() - t_new, SHORT - 2);
  ASSERT_EQ(redlock_lock_free(l), 0);
  /* Dropped on every other master (on M2 once B is connected again). */
  if (harness_wait_for(forgotten, loop, harness_bound_ms(5000)) != 0)
    TEST_FAIL("c) the mark stayed once M1's new instance counted (on M2 "
              "%d, on M3 %d)", marked_on(1), marked_on(2));
  tu_close_client(loop, b);
  /* A restart now (the declaration kept) costs nothing, for a new client
   * too: with M2 hung, its quorum needs M1. */
  restart(0);
  b = client(loop, 1, 0, N);
  {
    mark_read mr = {loop, b};
    if (harness_wait_for(counts, &mr, harness_bound_ms(5000)) != 0)
      TEST_FAIL("c) M1 does not count after a durable restart");
  }
  harness_pause(&srv[1]);
  ASSERT_EQ(redlock_lock_new(b, "y", 1, &l), 0);
  st = tu_acquire(loop, l, SHORT, &one, &op);
  harness_resume(&srv[1]);
  fprintf(stderr, "c) after a durable restart: %s (M1: %s)\n",
          redlock_err_name(st), op.errstr[0]);
  ASSERT_EQ(st, 0);
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(loop, b);
}

/* Whether M1's mark is on M2 or M3 (the observer's loop runs meanwhile:
 * its retries are timers). */
static int marked_again(void *arg) {
  tu_run_for(arg, 20);
  return marked_on(1) || marked_on(2);
}

static void case_d(uv_loop_t *loop) {
  redlock_client_t *obs, *a, *b;
  redlock_lock_t *l;
  redlock_acquire_opts one = {.wait_ms = -1};
  tu_op op;
  spin sp = {loop, "now reports appendonly no"};
  spin sw = {loop, "could not be written"};
  char ok[64];
  uint64_t t0;
  int i;
  warnings[0] = '\0';
  a = client(loop, 0, -1, N);   /* records the deployment's ttl */
  ASSERT_EQ(redlock_lock_new(a, "kd", 2, &l), 0);
  ASSERT_EQ(tu_acquire(loop, l, TTL, &one, &op), 0);
  ASSERT_EQ(tu_release(loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close_client(loop, a);
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "ACL SETUSER default -hset"), 0);
  obs = client(loop, 1, 0, N);
  ASSERT_EQ(harness_cmdf(&srv[0], ok, sizeof(ok), "CONFIG SET appendonly no"),
            0);
  if (harness_wait_for(warned, &sp, harness_bound_ms(10000)) != 0)
    TEST_FAIL("d) the observer did not see the declaration break: \"%s\"",
              warnings);
  tu_run_for(loop, 200);   /* the HSETs had time to come back refused */
  ASSERT(!marked_on(1) && !marked_on(2));
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "ACL SETUSER default +hset"), 0);
  /* No handshake happens meanwhile: only a retry writes the mark. */
  t0 = harness_now_ms();
  if (harness_wait_for(marked_again, loop, harness_bound_ms(15000)) != 0)
    TEST_FAIL("d) the mark never reached M2 or M3 after %llu ms with HSET "
              "allowed again (on M2 %d, on M3 %d): a failed write was not "
              "retried", (unsigned long long)(harness_now_ms() - t0),
              marked_on(1), marked_on(2));
  fprintf(stderr, "d) the mark was written %llu ms after HSET was allowed\n",
          (unsigned long long)(harness_now_ms() - t0));
  /* The refusal was told, once, naming the master, the key and what the
   * client's user needs. */
  if (!warned(&sw) || strstr(warnings, "HSET") == NULL ||
      strstr(warnings, "d:__redlock__:broke") == NULL)
    TEST_FAIL("d) no warning about the mark's failed write: \"%s\"",
              warnings);
  tu_close_client(loop, obs);
  restart(0);
  b = client(loop, 1, 0, N);
  {
    mark_read mr = {loop, b};
    if (harness_wait_for(saw_mark, &mr, harness_bound_ms(5000)) != 0)
      TEST_FAIL("d) the new client did not find the mark");
  }
  tu_close_client(loop, b);
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

static void case_e(uv_loop_t *loop) {
  redlock_client_t *obs;
  volatile int closed = 0;
  spin sp = {loop, "now reports appendonly no"};
  char ok[64], want[300];
  uint64_t t0;
  int i;
  warnings[0] = '\0';
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "ACL SETUSER default -hset"), 0);
  obs = client(loop, 1, 0, N);
  ASSERT_EQ(harness_cmdf(&srv[0], ok, sizeof(ok), "CONFIG SET appendonly no"),
            0);
  if (harness_wait_for(warned, &sp, harness_bound_ms(10000)) != 0)
    TEST_FAIL("e) the observer did not see the declaration break: \"%s\"",
              warnings);
  /* The close waits up to 3 command timeouts (1 s here) + 2 s: bounded
   * with a margin for a loaded machine (tu_close_client allows 10 s). */
  t0 = harness_now_ms();
  ASSERT_EQ(redlock_client_close(obs, on_closed, (void *)&closed), 0);
  if (harness_run_until(loop, &closed, harness_bound_ms(20000)) != 0)
    TEST_FAIL("e) the close did not complete in %llu ms",
              (unsigned long long)(harness_now_ms() - t0));
  fprintf(stderr, "e) closed in %llu ms\n",
          (unsigned long long)(harness_now_ms() - t0));
  snprintf(want, sizeof(want), "closed while the mark that %s broke",
           harness_addr(&srv[0]));
  if (strstr(warnings, want) == NULL)
    TEST_FAIL("e) closed without saying the mark is nowhere: \"%s\"",
              warnings);
  ASSERT(!marked_on(1) && !marked_on(2));
  for (i = 1; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], ok, sizeof(ok),
                           "ACL SETUSER default +hset"), 0);
  restart(0);
}

int main(int argc, char **argv) {
  uv_loop_t loop;
  const char *only = argc > 1 ? argv[1] : "";
  int i;
  for (i = 0; i < N; i++)
    srv[i].appendonly = 1;
  harness_start(srv, N + 1);
  ASSERT_EQ(harness_set(&srv[N], "unrelated", "x", 600000), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  if (*only == '\0' || strchr(only, 'a')) {
    prefix = "a:";
    case_a(&loop);
  }
  if (*only == '\0' || strchr(only, 'b')) {
    prefix = "b:";
    case_b(&loop);
  }
  if (*only == '\0' || strchr(only, 'c')) {
    prefix = "c:";
    case_c(&loop);
  }
  if (*only == '\0' || strchr(only, 'd')) {
    prefix = "d:";
    case_d(&loop);
  }
  if (*only == '\0' || strchr(only, 'e')) {
    prefix = "e:";
    case_e(&loop);
  }
  harness_loop_close(&loop, 10000);
  harness_stop_all();
  return 0;
}
