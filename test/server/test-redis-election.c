/* Leader election (issue 12, item 2), async and blocking.
 *
 *  a) two instances campaign: exactly one is elected; the leader read from
 *     the masters is its identity, with a ttl within the lock's;
 *  b) the leader resigns: it gets DEPOSED(0) and the standby is elected
 *     through the release message, within a few ms;
 *  c) a leader that stops running (its loop frozen: dead, as the masters
 *     see it): the standby is elected within the margin after the
 *     leader's keys expired on a quorum (ttl 1 s);
 *  d) a leader whose masters hang (2 of 3 SIGSTOPped) steps down BEFORE
 *     its validity ends (DEPOSED(EEXPIRED) with validity left), and
 *     campaigns again: elected again once the masters are back;
 *  e) bad identities are refused; client close frees what is left;
 *  f) the blocking API: campaign with a wait that passes (ETIMEDOUT),
 *     campaign, leader, resign hands over;
 *  g) (issue 29, item 9) a DEPOSED callback that calls
 *     redlock_election_hold keeps the lost lock: its key stays on the
 *     master that still answers, no new campaign, until
 *     redlock_election_stepped_down releases it and campaigns again; hold
 *     outside that callback is EINVAL. */
#include "tutil.h"

#define N 3

static harness_server srv[N];
static int64_t margin_ms;

typedef struct inst {
  const char *id;
  int elected, deposed, last_reason;
  int hold;                  /* DEPOSED after a loss: redlock_election_hold */
  uint64_t elected_ms, deposed_ms;
  uint64_t valid_until_ms;   /* the leadership's validity end, as known */
  redlock_election_t *e;
} inst;

/* The event hook: each successful extension moves the validity end. */
static uint64_t last_valid_until;

static void on_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg) {
  (void)c;
  (void)arg;
  if ((ev->kind == REDLOCK_EV_AUTO_EXTEND ||
       ev->kind == REDLOCK_EV_ACQUIRE) && ev->status == 0)
    last_valid_until = harness_now_ms() + (uint64_t)ev->result->validity_ms;
}

static void on_change(redlock_election_t *e, redlock_election_event ev,
                      int reason, void *arg) {
  inst *in = arg;
  ASSERT(e == in->e);
  if (ev == REDLOCK_ELECTED) {
    in->elected++;
    in->elected_ms = harness_now_ms();
    ASSERT_EQ(redlock_election_is_leader(e), 1);
  } else {
    in->deposed++;
    in->deposed_ms = harness_now_ms();
    in->last_reason = reason;
    in->valid_until_ms = last_valid_until;
    if (in->hold && reason != 0)
      ASSERT_EQ(redlock_election_hold(e), 0);
  }
}

static redlock_election_t *make(redlock_client_t *c, inst *in,
                                int64_t ttl_ms) {
  redlock_election_opts o = {.ttl_ms = ttl_ms, .retry_delay_ms = 3000,
                             .on_change = on_change, .arg = in};
  ASSERT_EQ(redlock_election_new(c, "leader", 6, in->id, &o, &in->e), 0);
  ASSERT_EQ(redlock_election_campaign(in->e), 0);
  ASSERT_EQ(in->elected, 0);   /* never from inside the call */
  return in->e;
}

typedef struct leader_rd {
  volatile int done;
  int status;
  char id[128];
  int64_t ttl;
} leader_rd;

static void on_leader(redlock_client_t *c, int status, const char *identity,
                      int64_t ttl_ms, void *arg) {
  leader_rd *r = arg;
  (void)c;
  r->status = status;
  snprintf(r->id, sizeof(r->id), "%s", identity);
  r->ttl = ttl_ms;
  r->done = 1;
}

static void read_leader(uv_loop_t *loop, redlock_client_t *c, leader_rd *r) {
  memset(r, 0, sizeof(*r));
  ASSERT_EQ(redlock_election_leader(c, "leader", 6, on_leader, r), 0);
  ASSERT_EQ(harness_run_until(loop, &r->done, 10000), 0);
  ASSERT_EQ(r->status, 0);
}

static void wait_cond(uv_loop_t *loop, volatile int *flag, int want,
                      const char *what) {
  uint64_t end = harness_now_ms() + 15000;
  while (*flag < want) {
    if (harness_now_ms() > end)
      TEST_FAIL("%s never happened", what);
    tu_run_for(loop, 1);
  }
}

static uint64_t quorum_expiry(const char *key) {
  uint64_t exp[N], t;
  int i, j;
  for (i = 0; i < N; i++)
    exp[i] = harness_now_ms() + (uint64_t)harness_pttl(&srv[i], key);
  for (i = 1; i < N; i++)
    for (j = i; j > 0 && exp[j - 1] > exp[j]; j--) {
      t = exp[j];
      exp[j] = exp[j - 1];
      exp[j - 1] = t;
    }
  return exp[1];
}

int main(void) {
  uv_loop_t loop, frozen;
  redlock_client_t *ca, *cb, *cc;
  inst a = {.id = "host-a:4711"}, b = {.id = "host-b:4711"};
  inst c3 = {.id = "host-c:1"};
  leader_rd rd;
  uint64_t t0, expiry;
  int i;
  /* Step-down margin: ttl / 10, at least 2 command timeouts. */
  redlock_client_config ccfg = {.command_timeout_ms = tu_slow() ? 150 : 100};

  margin_ms = harness_bound_ms(50);
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ca = tu_client(&loop, srv, N, &ccfg, N);
  cb = tu_client(&loop, srv, N, &ccfg, N);

  /* a) one leader of two */
  make(ca, &a, 2000);
  make(cb, &b, 2000);
  {
    uint64_t end = harness_now_ms() + 10000;
    while (a.elected + b.elected == 0) {
      if (harness_now_ms() > end)
        TEST_FAIL("a) nobody was elected");
      tu_run_for(&loop, 1);
    }
    tu_run_for(&loop, 300);
  }
  ASSERT_EQ(a.elected + b.elected, 1);
  {
    inst *leader = a.elected ? &a : &b;
    read_leader(&loop, cc = ca, &rd);
    (void)cc;
    fprintf(stderr, "a) elected: %s; leader read from the masters: %s, "
            "%lld ms left\n", leader->id, rd.id, (long long)rd.ttl);
    ASSERT_STR_EQ(rd.id, leader->id);
    ASSERT_GT(rd.ttl, 0);
    ASSERT_LE(rd.ttl, 2000);
    /* The ttl is how long a quorum still holds it: one master with a
     * far longer ttl (60 s) does not lengthen it. */
    {
      char buf[64];
      ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf),
                             "PEXPIRE leader 60000"), 0);
      read_leader(&loop, ca, &rd);
      ASSERT_STR_EQ(rd.id, leader->id);
      ASSERT_LE(rd.ttl, 2000);
    }
  }

  /* b) resign: the standby takes over through the release message */
  {
    inst *leader = a.elected ? &a : &b;
    inst *standby = a.elected ? &b : &a;
    t0 = harness_now_ms();
    ASSERT_EQ(redlock_election_resign(leader->e), 0);
    ASSERT_EQ(leader->deposed, 0);   /* from the release's callback */
    wait_cond(&loop, &standby->elected, 1, "b) the standby's election");
    wait_cond(&loop, &leader->deposed, 1, "b) DEPOSED(0)");
    ASSERT_EQ(leader->last_reason, 0);
    fprintf(stderr, "b) resign: the standby was elected %llu ms later\n",
            (unsigned long long)(standby->elected_ms - t0));
    ASSERT_LT(standby->elected_ms - t0, (uint64_t)margin_ms);
    ASSERT_EQ(redlock_election_free(leader->e), 0);
    read_leader(&loop, ca, &rd);
    ASSERT_STR_EQ(rd.id, standby->id);
    /* The new leader frees its handle: released, nobody leads. */
    ASSERT_EQ(redlock_election_free(standby->e), 0);
    tu_run_for(&loop, 50);
    read_leader(&loop, ca, &rd);
    ASSERT_STR_EQ(rd.id, "");
  }

  /* c) a leader that stops running: its loop is frozen from now on. */
  {
    redlock_client_t *cf;
    inst f = {.id = "frozen"};
    inst s = {.id = "standby"};
    ASSERT_EQ(uv_loop_init(&frozen), 0);
    cf = tu_client(&frozen, srv, N, &ccfg, N);
    make(cf, &f, 1000);
    wait_cond(&frozen, &f.elected, 1, "c) the first leader's election");
    make(cb, &s, 1000);
    tu_run_for(&loop, 100);   /* the standby is refused and waits */
    ASSERT_EQ(s.elected, 0);
    expiry = quorum_expiry("leader");
    wait_cond(&loop, &s.elected, 1, "c) the standby's takeover");
    fprintf(stderr, "c) leader frozen (ttl 1 s): standby elected %lld ms "
            "after the leader's keys expired on a quorum\n",
            (long long)s.elected_ms - (long long)expiry);
    ASSERT_LE((int64_t)s.elected_ms - (int64_t)expiry, margin_ms);
    ASSERT_GE((int64_t)s.elected_ms - (int64_t)expiry, -5);
    ASSERT_EQ(redlock_election_free(s.e), 0);
    /* Thaw the old leader: it finds the lock gone and steps down. */
    wait_cond(&frozen, &f.deposed, 1, "c) the old leader's step-down");
    ASSERT_EQ(redlock_election_free(f.e), 0);
    tu_close(&frozen, cf);
  }

  /* d) masters hang under a leader: it steps down before its validity
   * ends, then is elected again once they are back. */
  {
    inst l = {.id = "stepper"};
    ASSERT_EQ(redlock_client_set_event_hook(ca, on_event, NULL), 0);
    make(ca, &l, 1000);
    wait_cond(&loop, &l.elected, 1, "d) election");
    harness_pause(&srv[1]);
    harness_pause(&srv[2]);
    wait_cond(&loop, &l.deposed, 1, "d) step-down");
    fprintf(stderr, "d) masters hung: stepped down (%s) %lld ms before "
            "its validity ended\n", redlock_err_name(l.last_reason),
            (long long)l.valid_until_ms - (long long)l.deposed_ms);
    ASSERT_EQ(l.last_reason, REDLOCK_EEXPIRED);
    if ((int64_t)l.valid_until_ms - (int64_t)l.deposed_ms <= 0)
      TEST_FAIL("d) the leader stepped down %lld ms AFTER its validity "
                "ended", (long long)l.deposed_ms -
                (long long)l.valid_until_ms);
    ASSERT_EQ(redlock_election_is_leader(l.e), 0);
    harness_resume(&srv[1]);
    harness_resume(&srv[2]);
    wait_cond(&loop, &l.elected, 2, "d) election after the masters came "
              "back");
    ASSERT_EQ(redlock_election_free(l.e), 0);
  }

  /* g) hold: the lost lock stays until stepped_down. */
  {
    inst h = {.id = "holder", .hold = 1};
    char val[128];
    int64_t pttl;
    make(ca, &h, 1000);
    wait_cond(&loop, &h.elected, 1, "g) election");
    ASSERT_EQ(redlock_election_hold(h.e), REDLOCK_EINVAL);   /* leading */
    ASSERT_EQ(redlock_election_stepped_down(h.e), 0);   /* nothing held */
    ASSERT_EQ(redlock_election_hold(NULL), REDLOCK_EINVAL);
    ASSERT_EQ(redlock_election_stepped_down(NULL), REDLOCK_EINVAL);
    harness_pause(&srv[1]);
    harness_pause(&srv[2]);
    wait_cond(&loop, &h.deposed, 1, "g) step-down");
    ASSERT_EQ(h.last_reason, REDLOCK_EEXPIRED);
    tu_run_for(&loop, 50);   /* a release would have reached master 1 */
    pttl = harness_pttl(&srv[0], "leader");
    ASSERT_EQ(harness_get(&srv[0], "leader", val, sizeof(val)), 1);
    fprintf(stderr, "g) held after the step-down: master 1 still has %s "
            "(%lld ms left), no new campaign\n", val, (long long)pttl);
    ASSERT_NOT_NULL(strstr(val, ".holder"));
    ASSERT_EQ(redlock_election_is_leader(h.e), 0);
    ASSERT_EQ(redlock_election_campaign(h.e), REDLOCK_EBUSY);
    harness_resume(&srv[1]);
    harness_resume(&srv[2]);
    ASSERT_EQ(redlock_election_stepped_down(h.e), 0);
    wait_cond(&loop, &h.elected, 2, "g) election after stepped_down");
    ASSERT_EQ(h.deposed, 1);
    ASSERT_EQ(redlock_election_free(h.e), 0);
    tu_run_for(&loop, 50);
  }

  /* e) bad identities; close with elections alive */
  {
    redlock_election_t *e;
    char longid[90];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    ASSERT_EQ(redlock_election_new(ca, "leader", 6, "", NULL, &e),
              REDLOCK_EINVAL);
    ASSERT_EQ(redlock_election_new(ca, "leader", 6, longid, NULL, &e),
              REDLOCK_EINVAL);
    ASSERT_EQ(redlock_election_new(ca, "leader", 6, "ok", NULL, &e), 0);
    ASSERT_EQ(redlock_election_campaign(e), 0);
    ASSERT_EQ(redlock_election_campaign(e), REDLOCK_EBUSY);
    make(cb, &c3, 5000);
    tu_run_for(&loop, 100);   /* one of them leads, the other waits */
  }
  tu_close_client(&loop, ca);   /* frees their handles */
  tu_close(&loop, cb);

  /* f) the blocking API */
  {
    redlock_client_config cfg;
    const char *addrs[N];
    redlock_sync_t *s;
    redlock_sync_election_t *e1, *e2 = NULL;
    redlock_election_opts o = {.ttl_ms = 2000};
    char id[128];
    int64_t ttl;
    memset(&cfg, 0, sizeof(cfg));
    harness_addrs(srv, N, addrs);
    cfg.servers = addrs;
    cfg.n_servers = N;
    cfg.restart_guard_ms = -1;
    ASSERT_EQ(redlock_sync_new(&cfg, &s), 0);
    for (i = 0; i < N; i++)
      ASSERT_EQ(harness_cmdf(&srv[i], id, sizeof(id), "DEL leader"), 0);
    ASSERT_EQ(redlock_sync_campaign(s, "leader", 6, "sync-1", &o, 0, &e1),
              0);
    ASSERT_EQ(redlock_sync_is_leader(e1), 1);
    ASSERT_EQ(redlock_sync_campaign(s, "leader", 6, "sync-2", &o, 300, &e2),
              REDLOCK_ETIMEDOUT);
    ASSERT_NULL(e2);
    ASSERT_EQ(redlock_sync_leader(s, "leader", 6, id, sizeof(id), &ttl), 0);
    ASSERT_STR_EQ(id, "sync-1");
    ASSERT_GT(ttl, 0);
    ASSERT_EQ(redlock_sync_resign(e1), 0);
    ASSERT_EQ(redlock_sync_campaign(s, "leader", 6, "sync-2", &o, 2000,
                                    &e2), 0);
    ASSERT_EQ(redlock_sync_leader(s, "leader", 6, id, sizeof(id), &ttl), 0);
    ASSERT_STR_EQ(id, "sync-2");
    fprintf(stderr, "f) blocking API: campaign, ETIMEDOUT, leader, resign: "
            "ok\n");
    ASSERT_EQ(redlock_sync_close(s), 0);   /* e2 goes with it */
  }
  harness_stop_all();
  return 0;
}
