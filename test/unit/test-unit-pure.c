/* The pure helpers: validity math, retry policy, quorum decision, error
 * map. No server. */
#include "harness.h"
#include "redlock.h"
#include "pure.h"
#include "resp.h"

#define MS REDLOCK__NS_PER_MS

static void test_validity(void) {
  /* drift = ttl * 0.01 + 2 ms */
  ASSERT_EQ(redlock__drift_ns(10000, 0.01), 102 * MS);
  ASSERT_EQ(redlock__drift_ns(1, 0.01), 2 * MS + 10000);
  ASSERT_EQ(redlock__drift_ns(1000, 0), 2 * MS);
  /* deadline = start + ttl - drift */
  ASSERT_EQ(redlock__validity_deadline(5 * MS, 10000, 0.01),
            5 * MS + 10000 * MS - 102 * MS);
  /* a ttl below the drift has no validity at all */
  ASSERT_EQ(redlock__validity_deadline(5 * MS, 1, 0.01), 5 * MS);
  ASSERT_EQ(redlock__validity_left(100, 40), 60);
  ASSERT_EQ(redlock__validity_left(100, 100), 0);
  ASSERT_EQ(redlock__validity_left(100, 130), -30);
  /* validity shrinks by exactly the elapsed time */
  {
    redlock__ns d = redlock__validity_deadline(0, 1000, 0.01);
    ASSERT_EQ(redlock__validity_left(d, 150 * MS), (1000 - 12 - 150) * MS);
  }
}

static void test_retry(void) {
  uint32_t r;
  int64_t lo = 1000;
  int64_t hi = 0;
  uint64_t st = 42;
  int i;
  ASSERT_EQ(redlock__retry_delay_ms(200, 0, 12345), 200);
  ASSERT_EQ(redlock__retry_delay_ms(-5, 0, 1), 0);
  ASSERT_EQ(redlock__retry_delay_ms(10, 100, 0), 0);   /* clamped */
  for (i = 0; i < 10000; i++) {
    int64_t d;
    r = redlock__prng_next(&st);
    d = redlock__retry_delay_ms(200, 100, r);
    ASSERT_GE(d, 100);
    ASSERT_LE(d, 300);
    if (d < lo)
      lo = d;
    if (d > hi)
      hi = d;
  }
  ASSERT_LE(lo, 110);   /* the whole window is used */
  ASSERT_GE(hi, 290);
  ASSERT_EQ(redlock__retry_allowed(1, 0, 0, 0), 0);
  ASSERT_EQ(redlock__retry_allowed(1, 3, 0, 0), 1);
  ASSERT_EQ(redlock__retry_allowed(3, 3, 0, 0), 1);
  ASSERT_EQ(redlock__retry_allowed(4, 3, 0, 0), 0);
  ASSERT_EQ(redlock__retry_allowed(1, 3, 100, 200), 1);
  ASSERT_EQ(redlock__retry_allowed(1, 3, 200, 200), 0);
}

static void test_quorum(void) {
  ASSERT_EQ(redlock__quorum_default(1), 1);
  ASSERT_EQ(redlock__quorum_default(2), 2);
  ASSERT_EQ(redlock__quorum_default(3), 2);
  ASSERT_EQ(redlock__quorum_default(5), 3);
  ASSERT_EQ(redlock__quorum_default(6), 4);
  /* n=5, q=3 */
  ASSERT_EQ(redlock__round_decide(5, 3, 0, 0, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 3, 2, 0, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 3, 3, 0, 0), REDLOCK__ROUND_REACHED);
  ASSERT_EQ(redlock__round_decide(5, 3, 3, 2, 0), REDLOCK__ROUND_REACHED);
  ASSERT_EQ(redlock__round_decide(5, 3, 2, 2, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 3, 0, 3, 0), REDLOCK__ROUND_BLOCKED);
  ASSERT_EQ(redlock__round_decide(5, 3, 0, 0, 3), REDLOCK__ROUND_FAILED);
  ASSERT_EQ(redlock__round_decide(5, 3, 1, 2, 1), REDLOCK__ROUND_FAILED);
  ASSERT_EQ(redlock__round_decide(5, 3, 2, 2, 1), REDLOCK__ROUND_FAILED);
  /* n=1 */
  ASSERT_EQ(redlock__round_decide(1, 1, 1, 0, 0), REDLOCK__ROUND_REACHED);
  ASSERT_EQ(redlock__round_decide(1, 1, 0, 1, 0), REDLOCK__ROUND_BLOCKED);
  ASSERT_EQ(redlock__round_decide(1, 1, 0, 0, 1), REDLOCK__ROUND_FAILED);
  /* raised quorum: n=5, q=5 - one NO blocks it */
  ASSERT_EQ(redlock__round_decide(5, 5, 4, 0, 0), REDLOCK__ROUND_PENDING);
  ASSERT_EQ(redlock__round_decide(5, 5, 4, 1, 0), REDLOCK__ROUND_BLOCKED);
}

static void test_errors(void) {
  ASSERT_STR_EQ(redlock_err_name(REDLOCK_EINVAL), "EINVAL");
  ASSERT_STR_EQ(redlock_err_name(REDLOCK_ENOQUORUM), "ENOQUORUM");
  ASSERT_STR_EQ(redlock_err_name(0), "OK");
  ASSERT_STR_EQ(redlock_err_name(-99), "UNKNOWN");
  ASSERT_STR_EQ(redlock_strerror(REDLOCK_ETAKEN),
                "lock is held by another owner");
  ASSERT_STR_EQ(redlock_strerror(1), "unknown error");
  /* every code has a distinct name */
#define XX(name, val, msg)                                                  \
  ASSERT_STR_EQ(redlock_err_name(val), #name);                              \
  ASSERT_NE(strcmp(redlock_strerror(val), "unknown error"), 0);
  REDLOCK_ERRNO_MAP(XX)
#undef XX
  /* meson.build's version (issue 33), and redlock.h's macros spell it */
  ASSERT_STR_EQ(redlock_version_string(), REDLOCK_PROJECT_VERSION);
  {
    char v[64];
    snprintf(v, sizeof(v), "%d.%d.%d", REDLOCK_VERSION_MAJOR,
             REDLOCK_VERSION_MINOR, REDLOCK_VERSION_PATCH);
    ASSERT_STR_EQ(redlock_version_string(), v);
  }
  /* Struct sizes for bindings (issue 23). */
  ASSERT_EQ(redlock_abi_sizeof("redlock_stats"), sizeof(redlock_stats));
  ASSERT_EQ(redlock_abi_sizeof("redlock_node_result"),
            sizeof(redlock_node_result));
  ASSERT_EQ(redlock_abi_sizeof("redlock_client_config"),
            sizeof(redlock_client_config));
  ASSERT_EQ(redlock_abi_sizeof("redlock_stat"), 0);
  ASSERT_EQ(redlock_abi_sizeof(NULL), 0);
}

/* The restart guard's arithmetic: uptime is whole wall-clock seconds, so
 * an uptime of u means an age of more than u - 1 s, never more. */
static void test_guard_math(void) {
  const redlock__ns s = 1000000000ULL;   /* one second in ns */
  redlock__ns now = 10000 * s;
  ASSERT_EQ(redlock__start_bound(now, 0), now);
  ASSERT_EQ(redlock__start_bound(now, 1), now);   /* maybe 0.05 s old */
  ASSERT_EQ(redlock__start_bound(now, 2), now - s);
  ASSERT_EQ(redlock__start_bound(now, 3600), now - 3599 * s);
  ASSERT_EQ(redlock__start_bound(5 * s, 3600), 0);   /* saturates */
  ASSERT_EQ(redlock__age_ms(now, now), 0);
  ASSERT_EQ(redlock__age_ms(now + s, now), 0);
  ASSERT_EQ(redlock__age_ms(now - 1500 * REDLOCK__NS_PER_MS, now), 1500);
  /* A read of the ttl record is valid once a quorum answered. */
  ASSERT_EQ(redlock__guard_read_valid(5, 3, 2), 0);
  ASSERT_EQ(redlock__guard_read_valid(5, 3, 3), 1);
  ASSERT_EQ(redlock__guard_read_valid(5, 3, 5), 1);
  ASSERT_EQ(redlock__guard_read_valid(1, 1, 0), 0);
  ASSERT_EQ(redlock__guard_read_valid(1, 1, 1), 1);
}

/* The masters' clocks (skew.c): steps between two readings, offsets, the
 * median. A reading: the master's wall clock in us, bracketed by our send
 * and reply times (ns on the validity clock). */
static redlock__clock_reading rd(int64_t wall_us, redlock__ns send_ms,
                                 redlock__ns reply_ms) {
  redlock__clock_reading r;
  r.wall_us = wall_us;
  r.send_ns = send_ms * MS;
  r.reply_ns = reply_ms * MS;
  return r;
}

static void test_clock(void) {
  const int64_t base = 1795000000000000LL;   /* us */
  redlock__clock_reading a = rd(base, 1000, 1001);
  redlock__clock_reading b;
  int64_t slack = 0;
  int64_t v[5];
  /* 10 s later, 10 s more on the master: no step. */
  b = rd(base + 10000000, 11000, 11001);
  ASSERT_EQ(redlock__clock_step_us(&a, &b, &slack), 0);
  /* The slack: 2 ms + 1000 ppm of the interval + the brackets. */
  ASSERT_EQ(slack, 2000 + 10001 + 2000);
  /* Within the brackets and the slack: no step (drift, scheduling). */
  b = rd(base + 10000000 + 11000, 11000, 11001);
  ASSERT_EQ(redlock__clock_step_us(&a, &b, NULL), 0);
  /* 2 s more than elapsed: a forward step of at least 1.999 s. */
  b = rd(base + 12000000, 11000, 11001);
  ASSERT_EQ(redlock__clock_step_us(&a, &b, NULL), 12000000 - 10001000);
  /* 2 s less: a step back. */
  b = rd(base + 8000000, 11000, 11001);
  ASSERT_EQ(redlock__clock_step_us(&a, &b, NULL), 8000000 - 9999000);
  /* The master's clock stood still for a 2 ms round trip: fine. */
  b = rd(base, 1003, 1005);
  ASSERT_EQ(redlock__clock_step_us(&a, &b, NULL), 0);
  /* Offsets: wall minus the middle of the reading; half the round trip
   * of uncertainty (+1 us for rounding). */
  a = rd(5000000, 1000, 1002);
  ASSERT_EQ(redlock__clock_offset_us(&a), 5000000 - 1001000);
  ASSERT_EQ(redlock__clock_unc_us(&a), 1001);
  /* Median: odd, even (the mean of the middle two), sorted in place. */
  v[0] = 5;
  v[1] = -3;
  v[2] = 100;
  ASSERT_EQ(redlock__median_i64(v, 3), 5);
  v[0] = 10;
  v[1] = 2;
  v[2] = 4;
  v[3] = 8;
  ASSERT_EQ(redlock__median_i64(v, 4), 6);
  ASSERT_EQ(v[0], 2);
  v[0] = 42;
  ASSERT_EQ(redlock__median_i64(v, 1), 42);
  /* One master of five 3 s ahead: the median is a sound master's. */
  v[0] = 3000000;
  v[1] = 10;
  v[2] = -5;
  v[3] = 0;
  v[4] = 7;
  ASSERT_EQ(redlock__median_i64(v, 5), 7);
}

/* SHA-1 (the EVALSHA names) and the RESP encoder. */
static void test_codec(void) {
  char hex[41];
  char num[24];
  redlock__buf b = {0};
  const char *argv[3] = {"SET", "k", ""};
  size_t lens[3] = {3, 1, 0};
  redlock__sha1_hex("", 0, hex);
  ASSERT_STR_EQ(hex, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  redlock__sha1_hex("abc", 3, hex);
  ASSERT_STR_EQ(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
  redlock__sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                    56, hex);
  ASSERT_STR_EQ(hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  num[redlock__fmt_i64(num, 0)] = '\0';
  ASSERT_STR_EQ(num, "0");
  num[redlock__fmt_i64(num, -1234567)] = '\0';
  ASSERT_STR_EQ(num, "-1234567");
  num[redlock__fmt_i64(num, INT64_MAX)] = '\0';
  ASSERT_STR_EQ(num, "9223372036854775807");
  num[redlock__fmt_i64(num, INT64_MIN)] = '\0';
  ASSERT_STR_EQ(num, "-9223372036854775808");
  ASSERT_EQ(redlock__resp_cmd(&b, 3, argv, lens), 0);
  ASSERT_EQ(b.len, redlock__resp_size(3, lens));
  ASSERT_EQ(memcmp(b.data, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
                   b.len), 0);
  redlock__buf_free(&b);
}

/* redlock_result_explain: the wording per reason, and snprintf's
 * contract for the buffer. */
static void node(redlock_node_result *n, const char *server,
                 redlock_vote_t vote, int error, const char *errstr,
                 int64_t wait, int64_t window) {
  memset(n, 0, sizeof(*n));
  n->server = server;
  n->vote = vote;
  n->error = error;
  n->errstr = errstr;
  n->holder = "";
  n->guard_wait_ms = wait;
  n->guard_window_ms = window;
}

static void test_explain(void) {
  redlock_node_result n[5];
  redlock_result r;
  char buf[1024], small[16];
  int len;
  memset(&r, 0, sizeof(r));
  r.nodes = n;
  r.n_nodes = 5;
  r.quorum = 3;
  /* Fresh masters: three guarded (waits 8300, 5100, 9000 of 10000), one
   * unreachable, one yes. */
  node(&n[0], "a:1", REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, "restart guard: "
       "never seen by any client (no record), 1.7 s ago", 8300, 10000);
  node(&n[1], "b:1", REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, "restart guard: "
       "restarted (another run_id on record), 4.9 s ago", 5100, 10000);
  node(&n[2], "c:1", REDLOCK_VOTE_ERR, REDLOCK_ERESTARTED, "restart guard: "
       "never seen by any client (no record), 1.0 s ago", 9000, 10000);
  node(&n[3], "d:1", REDLOCK_VOTE_ERR, REDLOCK_EIO, "connection refused", -1,
       -1);
  node(&n[4], "e:1", REDLOCK_VOTE_YES, 0, "", -1, -1);
  r.status = REDLOCK_ENOQUORUM;
  r.yes = 1;
  r.err = 4;
  len = redlock_result_explain(&r, buf, sizeof(buf));
  ASSERT_EQ(len, (int)strlen(buf));
  ASSERT_STR_EQ(buf, "no quorum: 1 of 5 masters said yes, 3 needed: 2 of 5 "
                "masters never seen by any client under this prefix (a new "
                "prefix or the first use; or a restart lost the record with "
                "the keys), 1 of 5 masters restarted (another run_id than "
                "the record's) (restart guard): their votes count again "
                "within 9.0 s, enough for a quorum within 8.3 s; the window "
                "is the ttl record, raised to 10.0 s by some client (the "
                "longest ttl any client asked for); wait 9.0 s, or lower the "
                "record (`redlock guard --set-record D`, once no longer lock "
                "is held), or declare the masters durable (--durable, "
                "durable=1) if they run appendonly yes with appendfsync "
                "always; 1 of 5 masters unreachable (d:1: connection "
                "refused)");
  /* snprintf's contract: the full length, a cut and terminated text. */
  ASSERT_EQ(redlock_result_explain(&r, small, sizeof(small)), len);
  ASSERT_EQ(strlen(small), sizeof(small) - 1);
  ASSERT_EQ(redlock_result_explain(&r, NULL, 0), len);
  /* A refused password is not "unreachable" (issue 21). */
  node(&n[3], "d:1", REDLOCK_VOTE_ERR, REDLOCK_EIO,
       "AUTH: WRONGPASS invalid username-password pair", -1, -1);
  redlock_result_explain(&r, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "1 of 5 masters refused our credentials "
                              "(authentication failed: check the password "
                              "and user) (d:1: AUTH: WRONGPASS"));
  ASSERT_NULL(strstr(buf, "unreachable"));
  /* Held by another owner: the count, no noise about late answers. */
  node(&n[0], "a:1", REDLOCK_VOTE_NO, 0, "", -1, -1);
  node(&n[1], "b:1", REDLOCK_VOTE_NO, 0, "", -1, -1);
  node(&n[2], "c:1", REDLOCK_VOTE_NO, 0, "", -1, -1);
  node(&n[3], "d:1", REDLOCK_VOTE_NONE, 0, "", -1, -1);
  node(&n[4], "e:1", REDLOCK_VOTE_NONE, 0, "", -1, -1);
  r.status = REDLOCK_ETAKEN;
  r.yes = 0;
  r.no = 3;
  r.err = 0;
  redlock_result_explain(&r, buf, sizeof(buf));
  /* (Two were not waited for: they may hold it too.) */
  ASSERT_STR_EQ(buf,
                "held by another owner on at least 3 of 5 masters (quorum 3)");
  node(&n[3], "d:1", REDLOCK_VOTE_NO, 0, "", -1, -1);
  node(&n[4], "e:1", REDLOCK_VOTE_NO, 0, "", -1, -1);
  r.no = 5;
  redlock_result_explain(&r, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "held by another owner on 5 of 5 masters (quorum 3)");
  /* A failure decided before two masters answered: those are "not waited
   * for", not a fault. */
  node(&n[3], "d:1", REDLOCK_VOTE_NONE, 0, "", -1, -1);
  node(&n[4], "e:1", REDLOCK_VOTE_NONE, 0, "", -1, -1);
  node(&n[0], "a:1", REDLOCK_VOTE_ERR, REDLOCK_EIO, "refused", -1, -1);
  r.status = REDLOCK_ENOQUORUM;
  r.yes = 0;
  r.no = 2;
  r.err = 1;
  redlock_result_explain(&r, buf, sizeof(buf));
  if (strstr(buf, "2 of 5 masters not waited for (decided without them)") ==
      NULL)
    TEST_FAIL("explain: %s", buf);
  /* More than three in a group: named up to three. */
  for (len = 0; len < 5; len++)
    node(&n[len], "m:1", REDLOCK_VOTE_ERR, REDLOCK_ETIMEDOUT, "timed out",
         -1, -1);
  r.status = REDLOCK_ETIMEDOUT;
  r.attempts = 4;
  r.no = 0;
  r.err = 5;
  redlock_result_explain(&r, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "gave up at the wait deadline after 4 attempts; the "
                "last: 0 of 5 masters said yes, 3 needed: 5 of 5 masters "
                "unreachable (m:1: timed out, m:1: timed out, m:1: timed "
                "out, ...)");
  r.status = 0;
  r.yes = 3;
  redlock_result_explain(&r, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "ok: 3 of 5 masters said yes (quorum 3)");
  redlock_result_explain(NULL, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "no result");
}

/* Every latency falls in the bucket whose bounds hold it. */
static void test_hist(void) {
  uint64_t us;
  uint64_t h[REDLOCK_HIST_BUCKETS];
  for (us = 0; us < 400000; us += 1 + us / 64) {
    unsigned b = redlock__hist_bucket(us);
    ASSERT_LT(b, REDLOCK_HIST_BUCKETS);
    if (b < REDLOCK_HIST_BUCKETS - 1)   /* the last one is open-ended */
      ASSERT_LT(us, redlock_hist_upper_us(b));
    if (b > 0)
      ASSERT_GE(us, redlock_hist_upper_us(b - 1));
  }
  ASSERT_EQ(redlock__hist_bucket(UINT64_MAX), REDLOCK_HIST_BUCKETS - 1);
  memset(h, 0, sizeof(h));
  ASSERT_EQ(redlock_hist_quantile_us(h, 0.5), 0);
  h[redlock__hist_bucket(100)] = 99;
  h[redlock__hist_bucket(5000)] = 1;
  ASSERT_EQ(redlock_hist_quantile_us(h, 0.5), 112);    /* [96, 112) */
  ASSERT_EQ(redlock_hist_quantile_us(h, 1.0), 5120);   /* [4096, 5120) */
}

/* Redis Cluster slots: the CRC16 check value, slots CLUSTER KEYSLOT gives
 * (redis-server 7.0, checked by hand), hash tags, same-slot names, tags. */
static void test_slots(void) {
  static const struct {
    const char *key;
    unsigned slot;
  } known[] = {{"foo", 12182}, {"bar", 5061}, {"hello", 866},
               {"{user1000}.following", 3443}, {"foo{}{bar}", 8363},
               {"foo{{bar}}zap", 4015}, {"foo{bar}{zap}", 5061},
               {"a}b", 7866}, {"", 0}};
  char name[64];
  char tag[8];
  size_t i, n;
  unsigned s;
  ASSERT_EQ(redlock__crc16("123456789", 9), 0x31C3);
  for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
    if (redlock__key_slot(known[i].key, strlen(known[i].key)) !=
        known[i].slot)
      TEST_FAIL("slot of \"%s\": %u, want %u", known[i].key,
                redlock__key_slot(known[i].key, strlen(known[i].key)),
                known[i].slot);
  ASSERT_EQ(redlock__key_has_tag("{a}x", 4), 1);
  ASSERT_EQ(redlock__key_has_tag("{}x", 3), 0);
  ASSERT_EQ(redlock__key_has_tag("x{a", 3), 0);
  /* Same-slot names: tagged keys keep their name, others are wrapped,
   * a key with a '}' gets its slot's tag. */
  n = redlock__same_slot_name("{job}:7", 7, ":fence", name, sizeof(name));
  ASSERT_STR_EQ(name, "{job}:7:fence");
  ASSERT_EQ(n, 13);
  redlock__same_slot_name("job-42", 6, ":fence", name, sizeof(name));
  ASSERT_STR_EQ(name, "{job-42}:fence");
  n = redlock__same_slot_name("a}b", 3, ":fence", name, sizeof(name));
  ASSERT_EQ(name[0], '{');
  ASSERT_EQ(redlock__key_slot(name, n), redlock__key_slot("a}b", 3));
  ASSERT_EQ(redlock__same_slot_name("job-42", 6, ":fence", name, 14), 0);
  for (i = 0; i < 200; i++) {
    char key[32];
    int kl = snprintf(key, sizeof(key), "k%zu}%zu{x", i * 7919, i);
    n = redlock__same_slot_name(key, (size_t)kl, ":f", name, sizeof(name));
    ASSERT_EQ(redlock__key_slot(name, n), redlock__key_slot(key, (size_t)kl));
  }
  /* A tag for every slot, and the same one each time. */
  for (s = 0; s < REDLOCK__SLOTS; s += 97) {
    n = redlock__slot_tag(s, tag);
    ASSERT_EQ(n > 0 && n <= 5, 1);
    ASSERT_EQ(redlock__crc16(tag, n) & (REDLOCK__SLOTS - 1), s);
  }
  redlock__slot_tag(16383, tag);
  ASSERT_EQ(redlock__key_slot(tag, strlen(tag)), 16383);
}

/* The holder in a lock's value (issue 33): "<40 lowercase hex>.<holder>"
 * only; and opts.holder's bounds, refused before anything is sent (a
 * client on a port where nothing listens). */
static void on_unused(redlock_lock_t *l, int status,
                      const redlock_result *r, void *arg) {
  (void)l, (void)status, (void)r, (void)arg;
  TEST_FAIL("an acquisition with a bad holder was started");
}

static void on_holder_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(int *)arg = 1;
}

static void test_holder(void) {
  const char *hex = "0123456789abcdef0123456789abcdef01234567";
  char v[200], addr[64], long_id[REDLOCK_MAX_HOLDER + 2];
  const char *servers[1];
  redlock_client_config cfg;
  redlock_acquire_opts ao;
  redlock_client_t *c;
  redlock_lock_t *l;
  uv_loop_t loop;
  int closed = 0;
  snprintf(v, sizeof(v), "%s.host-1:42", hex);
  ASSERT_STR_EQ(redlock_token_holder(v), "host-1:42");
  snprintf(v, sizeof(v), "%s.a.b", hex);   /* a dot in the holder */
  ASSERT_STR_EQ(redlock_token_holder(v), "a.b");
  ASSERT_NULL(redlock_token_holder(hex));               /* no holder */
  snprintf(v, sizeof(v), "%s.", hex);
  ASSERT_NULL(redlock_token_holder(v));                 /* empty holder */
  snprintf(v, sizeof(v), "%.39s.x", hex);
  ASSERT_NULL(redlock_token_holder(v));                 /* 39 hex */
  snprintf(v, sizeof(v), "%.39sA.x", hex);
  ASSERT_NULL(redlock_token_holder(v));                 /* not lowercase */
  ASSERT_NULL(redlock_token_holder("my-uuid.x"));       /* another's value */
  ASSERT_NULL(redlock_token_holder(""));
  ASSERT_NULL(redlock_token_holder(NULL));

  snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
  servers[0] = addr;
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 1;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "k", 1, &l), 0);
  memset(&ao, 0, sizeof(ao));
  ao.holder = "";
  ASSERT_EQ(redlock_lock_acquire(l, 1000, &ao, on_unused, NULL),
            REDLOCK_EINVAL);
  memset(long_id, 'x', sizeof(long_id) - 1);
  long_id[sizeof(long_id) - 1] = '\0';   /* 81 bytes */
  ao.holder = long_id;
  ASSERT_EQ(redlock_lock_acquire(l, 1000, &ao, on_unused, NULL),
            REDLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "1..80 bytes"));
  ASSERT_EQ(redlock_lock_free(l), 0);
  ASSERT_EQ(redlock_client_close(c, on_holder_closed, &closed), 0);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(&loop), 0);
}

int main(void) {
  test_holder();
  test_slots();
  test_clock();
  test_hist();
  test_explain();
  test_guard_math();
  test_codec();
  test_validity();
  test_retry();
  test_quorum();
  test_errors();
  return 0;
}
