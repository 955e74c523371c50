/* Read-write locks starve neither side (issue 15).
 *
 * The policy (redlock.h, redlock_rwlock_new): a waiter's place on the
 * masters lives only while it retries; after a writer, the readers that
 * waited for it go first, before the next writer (phase alternation).
 *
 *  A. Phase alternation, step by step: R1 reads; writer W1 waits; reader
 *     R2 waits behind W1. R1 leaves: W1 writes. Writer W2 starts waiting
 *     (retrying four times as often as R2). W1 leaves: R2 must get the
 *     lock before W2 (writer preference alone lets W2 in first and R2
 *     waits for the whole next write phase).
 *  B. A writer that dies while waiting (the CLI, SIGKILL) leaves an
 *     intent that keeps new readers out only for its short lease, not for
 *     its ttl (30 s).
 *  C. The mix: 8 contenders, each on its own client, 10 s, 75% reads and
 *     25% writes (hold 100 ms, retry 100 +- 50 ms, wake-up on, ttl 1 s).
 *     Each side's share of the lock-held time is at least half its share
 *     of the acquisitions; neither side goes 3 ttls without a grant while
 *     it has waiters; readers never overlap a writer (as seen here).
 *  D. A stream of readers still cannot starve a writer: 6 readers that
 *     re-acquire at once, overlapping; a writer must get the lock within
 *     3 ttls.
 *  E. A reader entitled to a read phase that it missed (it polls every
 *     2 s; a faster reader opened and closed the phase, and writer W2
 *     went in) keeps its turn: when W2 leaves, it goes before writer W3,
 *     which polls every 5 ms.
 *  F. Nothing is left without a ttl: when a writer's end entitles the
 *     only queued reader, the hash keeps its expiry; when that reader then
 *     gives up (cancel), its entitlement and the phase opening go.
 *  G. An entitled reader whose attempts reach a quorum too late (ttl
 *     2 ms: no validity, EEXPIRED) is still waiting: it keeps its turn,
 *     and a writer polling every 5 ms gets the lock only after the reader
 *     gave up. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"

#define N 3

static harness_server srv[N];
static int failures;

/* Client c's count of attempts ('a': started), refusals ('t': attempts
 * decided ETAKEN) or EEXPIRED attempts ('e'). */
static uint64_t count_of(redlock_client_t *c, char which) {
  redlock_stats st;
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  return which == 'a' ? st.attempts : which == 't' ? st.taken : st.expired;
}

/* Runs the loop until count_of(c, which) reaches n (bounded). */
static void wait_count(uv_loop_t *loop, redlock_client_t *c, char which,
                       uint64_t n, const char *what) {
  uint64_t end = harness_now_ms() + 10000;
  while (count_of(c, which) < n) {
    if (harness_now_ms() > end)
      TEST_FAIL("%s: count '%c' at %llu after 10 s, wanted %llu", what,
                which, (unsigned long long)count_of(c, which),
                (unsigned long long)n);
    tu_run_for(loop, 2);
  }
}

/* A writer has just left: reader r (its acquisition op ro in flight) must
 * get the lock before writer w (op wo); a failure is counted. Then both
 * finish: whoever holds releases, the other gets the lock and releases. */
static void reader_first(uv_loop_t *loop, const char *what,
                         redlock_lock_t *r, tu_op *ro, redlock_lock_t *w,
                         tu_op *wo) {
  uint64_t end = harness_now_ms() + 10000;
  tu_op op;
  while (!ro->done && !wo->done && harness_now_ms() < end)
    tu_run_for(loop, 2);
  if (!ro->done || ro->status != 0 || wo->done) {
    fprintf(stderr, "FAIL: %s must go before the writer: reader %s, "
            "writer %s\n", what,
            ro->done ? redlock_err_name(ro->status) : "still waiting",
            wo->done ? redlock_err_name(wo->status) : "still waiting");
    failures++;
  } else {
    fprintf(stderr, "%s went before the writer\n", what);
  }
  if (ro->done && ro->status == 0)
    ASSERT_EQ(tu_release(loop, r, &op), 0);
  if (wo->done && wo->status == 0)
    ASSERT_EQ(tu_release(loop, w, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &ro->done, 20000), 0);
  ASSERT_EQ(harness_run_until(loop, &wo->done, 20000), 0);
  if (ro->status == 0 && redlock_lock_is_held(r))
    ASSERT_EQ(tu_release(loop, r, &op), 0);
  if (wo->status == 0 && redlock_lock_is_held(w))
    ASSERT_EQ(tu_release(loop, w, &op), 0);
}

/* Masters on which the hash "<key>:rw" has a field starting with `pfx`. */
static int masters_with(const char *key, const char *pfx) {
  char buf[64];
  int i, k = 0;
  for (i = 0; i < N; i++) {
    if (harness_cmdf(&srv[i], buf, sizeof(buf),
                     "EVAL %s 1 %s:rw %s",
                     "for _, f in ipairs(redis.call('hkeys', KEYS[1])) do "
                     "if string.sub(f, 1, 2) == ARGV[1] then return 1 end "
                     "end return 0",
                     key, pfx) == 0 &&
        strcmp(buf, "1") == 0)
      k++;
  }
  return k;
}

static redlock_lock_t *rw(redlock_client_t *c, const char *res,
                          redlock_rw_side side) {
  redlock_lock_t *l;
  ASSERT_EQ(redlock_rwlock_new(c, res, strlen(res), side, &l), 0);
  return l;
}

/* ---- A ------------------------------------------------------------------- */

static void phases(uv_loop_t *loop) {
  redlock_client_t *ca = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cr = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cw = tu_client(loop, srv, N, NULL, N);
  redlock_lock_t *r1 = rw(ca, "fa", REDLOCK_READ);
  redlock_lock_t *w1 = rw(ca, "fa", REDLOCK_WRITE);
  redlock_lock_t *r2 = rw(cr, "fa", REDLOCK_READ);
  redlock_lock_t *w2 = rw(cw, "fa", REDLOCK_WRITE);
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts slow = {.wait_ms = 15000, .retry_delay_ms = 20,
                               .retry_jitter_ms = 5};
  redlock_acquire_opts fast = {.wait_ms = 15000, .retry_delay_ms = 5,
                               .retry_jitter_ms = 2};
  tu_op op, w1op, r2op, w2op;
  uint64_t end;

  memset(&w1op, 0, sizeof(w1op));
  memset(&r2op, 0, sizeof(r2op));
  memset(&w2op, 0, sizeof(w2op));
  ASSERT_EQ(tu_acquire(loop, r1, 10000, &once, &op), 0);
  ASSERT_EQ(redlock_lock_acquire(w1, 10000, &slow, tu_cb, &w1op), 0);
  end = harness_now_ms() + 10000;
  while (masters_with("fa", "i:") < N) {   /* W1's intent is everywhere */
    if (harness_now_ms() > end)
      TEST_FAIL("A: the waiting writer's intent never reached every master");
    tu_run_for(loop, 2);
  }
  ASSERT_EQ(redlock_lock_acquire(r2, 10000, &slow, tu_cb, &r2op), 0);
  wait_count(loop, cr, 'a', 2, "A: R2");   /* R2 was refused, waits */
  ASSERT_EQ(r2op.done, 0);
  ASSERT_EQ(tu_release(loop, r1, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &w1op.done, 10000), 0);
  ASSERT_EQ(w1op.status, 0);              /* the waiting writer first */
  ASSERT_EQ(r2op.done, 0);
  ASSERT_EQ(redlock_lock_acquire(w2, 10000, &fast, tu_cb, &w2op), 0);
  wait_count(loop, cw, 'a', 2, "A: W2");   /* W2 was refused, waits */
  ASSERT_EQ(w2op.done, 0);
  ASSERT_EQ(tu_release(loop, w1, &op), 0);
  reader_first(loop, "A: the reader that waited for the writer", r2, &r2op,
               w2, &w2op);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(w1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);
  ASSERT_EQ(redlock_lock_free(w2), 0);
  tu_close_client(loop, ca);
  tu_close_client(loop, cr);
  tu_close_client(loop, cw);
}

/* ---- B ------------------------------------------------------------------- */

static void dead_writer(uv_loop_t *loop, const char *cli) {
  redlock_client_t *c = tu_client(loop, srv, N, NULL, N);
  redlock_lock_t *r1 = rw(c, "fb", REDLOCK_READ);
  redlock_lock_t *r2 = rw(c, "fb", REDLOCK_READ);
  redlock_acquire_opts once = {.wait_ms = -1};
  char servers[N * 32] = "";
  char *argv[12];
  uint64_t end, t0;
  tu_op op;
  int pid, i, rc;

  for (i = 0; i < N; i++)
    snprintf(servers + strlen(servers), sizeof(servers) - strlen(servers),
             "%s%s", i ? "," : "", harness_addr(&srv[i]));
  ASSERT_EQ(tu_acquire(loop, r1, 30000, &once, &op), 0);
  argv[0] = (char *)"redlock";
  argv[1] = (char *)"--servers";
  argv[2] = servers;
  argv[3] = (char *)"acquire";
  argv[4] = (char *)"--write";
  argv[5] = (char *)"--wait";
  argv[6] = (char *)"25s";
  argv[7] = (char *)"--ttl";
  argv[8] = (char *)"30s";
  argv[9] = (char *)"fb";
  argv[10] = NULL;
  pid = harness_spawn(cli, argv, "/dev/null", NULL);
  end = harness_now_ms() + 10000;
  while (masters_with("fb", "i:") < N) {
    if (harness_now_ms() > end) {
      kill(pid, SIGKILL);
      TEST_FAIL("B: the CLI writer's intent never reached every master");
    }
    tu_run_for(loop, 2);
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(harness_wait_exit(pid, 5000), 128 + SIGKILL);
  t0 = harness_now_ms();
  end = t0 + 5000;
  for (;;) {
    rc = tu_acquire(loop, r2, 30000, &once, &op);
    if (rc == 0 || harness_now_ms() > end)
      break;
    tu_run_for(loop, 20);
  }
  if (rc != 0 || harness_now_ms() - t0 > 3000) {
    fprintf(stderr, "FAIL: B: a dead writer kept readers out for %llu ms "
            "(%s; its ttl is 30 s, its lease about 0.5 s)\n",
            (unsigned long long)(harness_now_ms() - t0),
            redlock_err_name(rc));
    failures++;
  } else {
    fprintf(stderr, "B: a reader got in %llu ms after the waiting writer "
            "died\n", (unsigned long long)(harness_now_ms() - t0));
  }
  if (rc == 0)
    ASSERT_EQ(tu_release(loop, r2, &op), 0);
  ASSERT_EQ(tu_release(loop, r1, &op), 0);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);
  tu_close_client(loop, c);
}

/* ---- C and D: contenders on one loop ------------------------------------- */

#define W 8
#define TTL 1000
#define HOLD 100

typedef struct contender {
  redlock_client_t *c;
  redlock_lock_t *side[2];   /* read, write */
  int cur;                   /* the side of the current acquisition */
  int reader_only;           /* D */
  unsigned rnd;
  uv_timer_t timer;
  tu_op op;
  int stop, stopped;
} contender;

static struct {
  long holders, waiting;
  uint64_t held_since, held_ms, since, longest;
  unsigned long acquisitions, grants, fails;
} side[2];
static unsigned long overlaps;
static uint64_t run_end;
static redlock_acquire_opts mix_opts = {.wait_ms = 5000,
                                        .retry_delay_ms = 100,
                                        .retry_jitter_ms = 50, .wake = 1};
static redlock_acquire_opts stream_opts = {.wait_ms = 10000,
                                           .retry_delay_ms = 10,
                                           .retry_jitter_ms = 5};

static void start(contender *k);

/* A stretch of side s without a grant ends at `now` (a grant, or the
 * end of its last waiter). */
static void gap(int s, uint64_t now) {
  if (now - side[s].since > side[s].longest)
    side[s].longest = now - side[s].since;
  side[s].since = now;
}

static void on_think(uv_timer_t *t) {
  start(t->data);
}

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  contender *k = arg;
  (void)l;
  (void)res;
  (void)status;
  uv_timer_start(&k->timer, on_think, k->reader_only ? 0 : 1, 0);
}

static void on_hold_done(uv_timer_t *t) {
  contender *k = t->data;
  int s = k->cur;
  if (--side[s].holders == 0)
    side[s].held_ms += harness_now_ms() - side[s].held_since;
  ASSERT_EQ(redlock_lock_release(k->side[s], on_released, k), 0);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  contender *k = arg;
  uint64_t now = harness_now_ms();
  int s = k->cur;
  (void)l;
  (void)res;
  side[s].waiting--;
  gap(s, now);
  if (status != 0) {
    side[s].fails++;
    uv_timer_start(&k->timer, on_think, 1, 0);
    return;
  }
  if (side[1].holders > 0 || (s == 1 && side[0].holders > 0))
    overlaps++;
  if (side[s].holders++ == 0)
    side[s].held_since = now;
  side[s].grants++;
  uv_timer_start(&k->timer, on_hold_done,
                 k->reader_only ? HOLD / 2 + rand_r(&k->rnd) % HOLD : HOLD,
                 0);
}

static void start(contender *k) {
  uint64_t now = harness_now_ms();
  int s;
  if (k->stop || now >= run_end) {
    k->stopped = 1;
    return;
  }
  s = k->reader_only ? 0 : (rand_r(&k->rnd) % 100 < 75 ? 0 : 1);
  k->cur = s;
  side[s].acquisitions++;
  if (side[s].waiting++ == 0)
    side[s].since = now;
  ASSERT_EQ(redlock_lock_acquire(k->side[s], TTL,
                                 k->reader_only ? &stream_opts : &mix_opts,
                                 on_acquired, k),
            0);
}

static void on_timer_closed(uv_handle_t *h) {
  (void)h;
}

static void contenders_new(uv_loop_t *loop, contender *ks, int n,
                           const char *res) {
  int i;
  for (i = 0; i < n; i++) {
    contender *k = &ks[i];
    memset(k, 0, sizeof(*k));
    k->c = tu_client(loop, srv, N, NULL, N);
    k->side[0] = rw(k->c, res, REDLOCK_READ);
    k->side[1] = rw(k->c, res, REDLOCK_WRITE);
    k->rnd = 7919u * (unsigned)i + 17u;
    uv_timer_init(loop, &k->timer);
    k->timer.data = k;
  }
}

/* Waits (bounded) until every contender stopped, then frees them. */
static void contenders_end(uv_loop_t *loop, contender *ks, int n) {
  uint64_t end = harness_now_ms() + 30000;
  int i, all;
  do {
    for (all = 1, i = 0; i < n; i++)
      all &= ks[i].stopped;
    if (!all)
      tu_run_for(loop, 5);
  } while (!all && harness_now_ms() < end);
  if (!all)
    TEST_FAIL("contenders did not stop within 30 s");
  for (i = 0; i < n; i++) {
    uv_close((uv_handle_t *)&ks[i].timer, on_timer_closed);
    ASSERT_EQ(redlock_lock_free(ks[i].side[0]), 0);
    ASSERT_EQ(redlock_lock_free(ks[i].side[1]), 0);
    tu_close_client(loop, ks[i].c);
  }
}

static void mix(uv_loop_t *loop) {
  static const char *const names[2] = {"read", "write"};
  contender ks[W];
  uint64_t t0, held;
  unsigned long total;
  int i, s;

  memset(side, 0, sizeof(side));
  contenders_new(loop, ks, W, "fc");
  t0 = harness_now_ms();
  run_end = t0 + 10000;
  for (i = 0; i < W; i++)
    start(&ks[i]);
  contenders_end(loop, ks, W);
  for (s = 0; s < 2; s++)
    if (side[s].waiting > 0)
      gap(s, run_end);
  held = side[0].held_ms + side[1].held_ms;
  total = side[0].acquisitions + side[1].acquisitions;
  ASSERT_GE(held, 1);
  for (s = 0; s < 2; s++) {
    double share = (double)side[s].held_ms / (double)held;
    double asked = (double)side[s].acquisitions / (double)total;
    fprintf(stderr, "C: %-5s %lu acquisitions (%.1f%%), %lu grants, %lu "
            "failed; %.1f%% of the held time; longest without a grant "
            "while waited for: %llu ms\n", names[s], side[s].acquisitions,
            100 * asked, side[s].grants, side[s].fails, 100 * share,
            (unsigned long long)side[s].longest);
    if (share < asked / 2) {
      fprintf(stderr, "FAIL: C: %s side held the lock %.1f%% of the time, "
              "less than half its share of acquisitions (%.1f%%)\n",
              names[s], 100 * share, 100 * asked);
      failures++;
    }
    if (side[s].longest > 3 * TTL) {
      fprintf(stderr, "FAIL: C: %s side went %llu ms without a grant while "
              "it had waiters (more than 3 ttls)\n", names[s],
              (unsigned long long)side[s].longest);
      failures++;
    }
  }
  ASSERT_GE(side[0].grants, 10);
  ASSERT_GE(side[1].grants, 5);
  ASSERT_EQ(overlaps, 0);
}

static void stream(uv_loop_t *loop) {
  contender ks[6];
  redlock_client_t *c;
  redlock_lock_t *w;
  redlock_acquire_opts wopts = {.wait_ms = 3 * TTL, .retry_delay_ms = 20,
                                .retry_jitter_ms = 5};
  tu_op op;
  uint64_t t0;
  int i, rc;

  memset(side, 0, sizeof(side));
  contenders_new(loop, ks, 6, "fd");
  for (i = 0; i < 6; i++)
    ks[i].reader_only = 1;
  run_end = harness_now_ms() + 60000;
  for (i = 0; i < 6; i++)
    start(&ks[i]);
  c = tu_client(loop, srv, N, NULL, N);
  w = rw(c, "fd", REDLOCK_WRITE);
  /* The readers overlap all the time: let them get going. */
  while (side[0].grants < 12)
    tu_run_for(loop, 5);
  t0 = harness_now_ms();
  rc = tu_acquire(loop, w, TTL, &wopts, &op);
  if (rc != 0) {
    fprintf(stderr, "FAIL: D: a stream of readers starved the writer "
            "(%s after %llu ms)\n", redlock_err_name(rc),
            (unsigned long long)(harness_now_ms() - t0));
    failures++;
  } else {
    fprintf(stderr, "D: the writer got the lock %llu ms into a stream of "
            "readers (%lu reader grants before)\n",
            (unsigned long long)(harness_now_ms() - t0), side[0].grants);
    ASSERT_EQ(side[0].holders, 0);
    ASSERT_EQ(tu_release(loop, w, &op), 0);
  }
  for (i = 0; i < 6; i++)
    ks[i].stop = 1;
  contenders_end(loop, ks, 6);
  ASSERT_EQ(redlock_lock_free(w), 0);
  tu_close_client(loop, c);
}

/* ---- E ------------------------------------------------------------------- */

static void late_reader(uv_loop_t *loop) {
  redlock_client_t *ca = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cs = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cf = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *c3 = tu_client(loop, srv, N, NULL, N);
  redlock_lock_t *w1 = rw(ca, "fe", REDLOCK_WRITE);
  redlock_lock_t *w2 = rw(ca, "fe", REDLOCK_WRITE);
  redlock_lock_t *rs = rw(cs, "fe", REDLOCK_READ);
  redlock_lock_t *rf = rw(cf, "fe", REDLOCK_READ);
  redlock_lock_t *w3 = rw(c3, "fe", REDLOCK_WRITE);
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts slow = {.wait_ms = 20000, .retry_delay_ms = 2000,
                               .retry_jitter_ms = -1};
  redlock_acquire_opts quick = {.wait_ms = 20000, .retry_delay_ms = 5,
                                .retry_jitter_ms = 2};
  tu_op op, rsop, rfop, w2op, w3op;

  memset(&rsop, 0, sizeof(rsop));
  memset(&rfop, 0, sizeof(rfop));
  memset(&w2op, 0, sizeof(w2op));
  memset(&w3op, 0, sizeof(w3op));
  ASSERT_EQ(tu_acquire(loop, w1, 20000, &once, &op), 0);
  ASSERT_EQ(redlock_lock_acquire(rs, 20000, &slow, tu_cb, &rsop), 0);
  ASSERT_EQ(redlock_lock_acquire(rf, 20000, &quick, tu_cb, &rfop), 0);
  ASSERT_EQ(redlock_lock_acquire(w2, 20000, &quick, tu_cb, &w2op), 0);
  wait_count(loop, cf, 'a', 2, "E: fast reader");
  /* Release W1 just after one of the slow reader's attempts was refused
   * (decided, not only started): its next one is 2 s away. */
  wait_count(loop, cs, 't', count_of(cs, 't') + 1, "E: slow reader");
  ASSERT_EQ(tu_release(loop, w1, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &rfop.done, 1500), 0);
  ASSERT_EQ(rfop.status, 0);
  ASSERT_EQ(rsop.done, 0);
  ASSERT_EQ(tu_release(loop, rf, &op), 0);   /* the phase is over */
  ASSERT_EQ(harness_run_until(loop, &w2op.done, 1500), 0);
  ASSERT_EQ(w2op.status, 0);
  if (rsop.done)
    TEST_FAIL("E: the slow reader came back early (timing)");
  ASSERT_EQ(redlock_lock_acquire(w3, 20000, &quick, tu_cb, &w3op), 0);
  wait_count(loop, c3, 'a', 2, "E: W3");
  ASSERT_EQ(rsop.done, 0);
  ASSERT_EQ(tu_release(loop, w2, &op), 0);
  reader_first(loop, "E: the reader that missed its read phase", rs, &rsop,
               w3, &w3op);
  ASSERT_EQ(redlock_lock_free(w1), 0);
  ASSERT_EQ(redlock_lock_free(w2), 0);
  ASSERT_EQ(redlock_lock_free(rs), 0);
  ASSERT_EQ(redlock_lock_free(rf), 0);
  ASSERT_EQ(redlock_lock_free(w3), 0);
  tu_close_client(loop, ca);
  tu_close_client(loop, cs);
  tu_close_client(loop, cf);
  tu_close_client(loop, c3);
}

/* ---- F and G ------------------------------------------------------------- */

static int64_t pttl_min(const char *hash) {
  int64_t min = INT64_MAX;
  int i;
  for (i = 0; i < N; i++) {
    int64_t p = harness_pttl(&srv[i], hash);
    if (p < min)
      min = p;
  }
  return min;
}

static void no_leak(uv_loop_t *loop) {
  redlock_client_t *c = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cr = tu_client(loop, srv, N, NULL, N);
  redlock_lock_t *w = rw(c, "ff", REDLOCK_WRITE);
  redlock_lock_t *r = rw(cr, "ff", REDLOCK_READ);
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts slow = {.wait_ms = 20000, .retry_delay_ms = 5000,
                               .retry_jitter_ms = -1};
  tu_op op, rop;
  uint64_t end;
  int64_t p;

  memset(&rop, 0, sizeof(rop));
  ASSERT_EQ(tu_acquire(loop, w, 20000, &once, &op), 0);
  ASSERT_EQ(redlock_lock_acquire(r, 20000, &slow, tu_cb, &rop), 0);
  end = harness_now_ms() + 10000;
  while (count_of(cr, 't') < 1 || masters_with("ff", "q:") < N) {
    if (harness_now_ms() > end)
      TEST_FAIL("F: the reader's refusal never reached every master");
    tu_run_for(loop, 2);
  }
  ASSERT_EQ(tu_release(loop, w, &op), 0);   /* the reader is entitled */
  ASSERT_EQ(masters_with("ff", "e:"), N);
  p = pttl_min("ff:rw");
  if (p <= 0) {
    fprintf(stderr, "FAIL: F: the hash lost its ttl when the writer's "
            "release entitled the reader (PTTL %lld)\n", (long long)p);
    failures++;
  }
  ASSERT_EQ(redlock_lock_cancel(r), 0);   /* gives up: its place goes */
  ASSERT_EQ(harness_run_until(loop, &rop.done, 5000), 0);
  ASSERT_EQ(rop.status, REDLOCK_ECANCELED);
  end = harness_now_ms() + 5000;
  while (pttl_min("ff:rw") != -2 && harness_now_ms() < end)
    tu_run_for(loop, 2);
  p = pttl_min("ff:rw");
  if (p != -2) {
    fprintf(stderr, "FAIL: F: after the only waiter gave up, \"ff:rw\" "
            "is still there (PTTL %lld)\n", (long long)p);
    failures++;
  } else {
    fprintf(stderr, "F: the hash kept its ttl and went with the last "
            "waiter\n");
  }
  ASSERT_EQ(redlock_lock_free(w), 0);
  ASSERT_EQ(redlock_lock_free(r), 0);
  tu_close_client(loop, c);
  tu_close_client(loop, cr);
}

static void expired_attempts(uv_loop_t *loop) {
  redlock_client_t *c = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cr = tu_client(loop, srv, N, NULL, N);
  redlock_client_t *cw = tu_client(loop, srv, N, NULL, N);
  redlock_lock_t *w1 = rw(c, "fg", REDLOCK_WRITE);
  redlock_lock_t *r = rw(cr, "fg", REDLOCK_READ);
  redlock_lock_t *w2 = rw(cw, "fg", REDLOCK_WRITE);
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts ropts = {.wait_ms = 2500, .retry_delay_ms = 100,
                                .retry_jitter_ms = -1};
  redlock_acquire_opts quick = {.wait_ms = 20000, .retry_delay_ms = 5,
                                .retry_jitter_ms = 2};
  tu_op op, rop, w2op;

  memset(&rop, 0, sizeof(rop));
  memset(&w2op, 0, sizeof(w2op));
  ASSERT_EQ(tu_acquire(loop, w1, 20000, &once, &op), 0);
  ASSERT_EQ(redlock_lock_acquire(r, 2, &ropts, tu_cb, &rop), 0);
  wait_count(loop, cr, 't', 1, "G: the reader's refusal");
  ASSERT_EQ(redlock_lock_acquire(w2, 20000, &quick, tu_cb, &w2op), 0);
  wait_count(loop, cw, 'a', 2, "G: W2");
  ASSERT_EQ(tu_release(loop, w1, &op), 0);
  ASSERT_EQ(harness_run_until(loop, &rop.done, 10000), 0);
  ASSERT_EQ(harness_run_until(loop, &w2op.done, 10000), 0);
  ASSERT_EQ(w2op.status, 0);
  if (w2op.cb_ms < rop.cb_ms || count_of(cr, 'e') < 2) {
    fprintf(stderr, "FAIL: G: the writer got the lock while the entitled "
            "reader was still trying (%llu EEXPIRED attempts; writer %llu "
            "ms before the reader's end)\n",
            (unsigned long long)count_of(cr, 'e'),
            (unsigned long long)(rop.cb_ms - w2op.cb_ms));
    failures++;
  } else {
    fprintf(stderr, "G: the reader kept its turn through %llu EEXPIRED "
            "attempts (%s); the writer came after it\n",
            (unsigned long long)count_of(cr, 'e'),
            redlock_err_name(rop.status));
  }
  ASSERT_EQ(tu_release(loop, w2, &op), 0);
  ASSERT_EQ(redlock_lock_free(w1), 0);
  ASSERT_EQ(redlock_lock_free(r), 0);
  ASSERT_EQ(redlock_lock_free(w2), 0);
  tu_close_client(loop, c);
  tu_close_client(loop, cr);
  tu_close_client(loop, cw);
}

int main(int argc, char **argv) {
  uv_loop_t loop;
  if (argc < 2)
    TEST_FAIL("usage: test-fault-rwlock-fair PATH-TO-redlock");
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  unsetenv("REDLOCK_SERVERS");
  phases(&loop);
  dead_writer(&loop, argv[1]);
  mix(&loop);
  stream(&loop);
  late_reader(&loop);
  no_leak(&loop);
  expired_attempts(&loop);
  harness_loop_close(&loop, 10000);
  harness_stop_all();
  if (failures > 0)
    TEST_FAIL("%d fairness check(s) failed", failures);
  return 0;
}
