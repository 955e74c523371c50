/* The blocking API's contract (redlock_sync_*), beyond the happy path of
 * test-redis-sync.c:
 *
 *  a. Error messages. A call that fails returns the code AND sets the
 *     message of the CALLING thread (redlock.h: "When a call fails,
 *     redlock_last_error() gives a message for this thread"). Sync calls
 *     that fail with EINVAL on the background thread (bad ttl for extend,
 *     fencing on a read-write lock, a key too long, too many resources)
 *     must leave a message that describes the call in the caller's
 *     thread, not a stale one from an earlier unrelated failure; a failed
 *     acquisition leaves the per-master explanation.
 *  b. on_lost. In the blocking API on_lost must be called with the
 *     caller's handle: the redlock_sync_lock_t * returned by the acquire,
 *     cast to redlock_lock_t * (the internal async handle is not the
 *     caller's to use). Checked for redlock_sync_acquire, _multi and _rw:
 *     the key is deleted on a majority, the next auto-extension finds it
 *     gone, on_lost(ENOTHELD) must fire once with the sync handle; a
 *     blocking call made from it returns EBUSY (it would wait for the
 *     thread it runs on).
 *  c. One handle, many threads (redlock.h: "Safe to call from many
 *     threads at once, on one handle"), around redlock_sync_release
 *     ("Releases the lock and frees the handle (in every case)").
 *     Calls made after release RETURNED are a use-after-free by contract;
 *     calls already posted while the release runs must be safe: they get
 *     an error (or validity 0 / not lost), never a crash or a read of
 *     freed memory.
 *     c1. Deterministic: the background thread is held inside another
 *         lock's on_lost callback (a documented hook that runs on it)
 *         while the release's reply arrives and calls on the same handle
 *         from 6 threads are queued behind it; when it resumes it handles
 *         the reply (the release frees the handle) and then the queued
 *         calls. Today they read the freed handle: ASan and valgrind
 *         report a heap use-after-free; the plain build crashes because
 *         this test's allocator (public redlock_replace_allocator)
 *         poisons freed blocks.
 *     c2. A release posted while another thread's extend on the same
 *         handle is in flight (master stalled) must still release the
 *         lock and free the handle, returning 0 once the master answers;
 *         today it returns EBUSY at once and does neither.
 *     c3. Stress, contract-clean: 8 threads loop on validity / is_lost /
 *         extend on one handle while another thread releases it. The
 *         master is stalled (SIGSTOP) from just before the release is
 *         posted until every thread has stopped posting, so that no call
 *         can be posted after the release returned.
 * Failures of a, b, c2 and c3 are reported together at the end; c1 runs
 * last because today it crashes. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tutil.h"

#define N 3            /* masters for a and b; c uses a fourth, alone */
#define RACERS 6       /* c1 */
#define STRESS 8       /* c3 threads */
#define STRESS_ROUNDS 5

static int slow;
static int failures;

#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      failures++;                                                           \
    }                                                                       \
  } while (0)

static uint64_t bound_ms(uint64_t ms) {
  return slow ? ms * 4 : ms;
}

static void nap_ms(unsigned ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- a poisoning allocator ------------------------------------------------
 * Freed blocks are filled with 0xA5 first, so a read of freed library
 * memory in a plain build yields a wild pointer (a crash) instead of the
 * stale value. ASan and valgrind still see the real free. */
typedef union {
  size_t size;
  max_align_t align;
} blk_hdr;

static void *p_malloc(size_t n) {
  blk_hdr *h;
  if (n > SIZE_MAX - sizeof(*h))
    return NULL;
  h = malloc(sizeof(*h) + n);
  if (h == NULL)
    return NULL;
  h->size = n;
  return h + 1;
}

static void *p_calloc(size_t count, size_t size) {
  void *p;
  if (size != 0 && count > SIZE_MAX / size - sizeof(blk_hdr))
    return NULL;
  p = p_malloc(count * size);
  if (p != NULL)
    memset(p, 0, count * size);
  return p;
}

static void *p_realloc(void *old, size_t n) {
  blk_hdr *h;
  if (old == NULL)
    return p_malloc(n);
  if (n > SIZE_MAX - sizeof(*h))
    return NULL;
  h = realloc((blk_hdr *)old - 1, sizeof(*h) + n);
  if (h == NULL)
    return NULL;
  h->size = n;
  return h + 1;
}

static void p_free(void *p) {
  blk_hdr *h;
  if (p == NULL)
    return;
  h = (blk_hdr *)p - 1;
  memset(p, 0xA5, h->size);
  free(h);
}

/* ---- threads ---------------------------------------------------------------
 * "Is this thread inside its sync call yet?" A thread of this test that
 * is blocked in a futex wait is: between publishing its tid and making
 * its call it does nothing that can block, and a blocking call waits on a
 * futex (a semaphore, a condition variable or a mutex) until it is
 * answered. Observed twice, 2 ms apart. (Only the state "S" would not do:
 * under valgrind a thread waiting for the scheduler lock sleeps too, in a
 * read() on a pipe, before it gets to make its call.) */
typedef struct {
  atomic_int tid;
} tinfo;

static void tinfo_publish(tinfo *t) {
  atomic_store(&t->tid, (int)syscall(SYS_gettid));
}

static int tinfo_in_futex(tinfo *t) {
  char path[64];
  char buf[256];
  long nr;
  int tid = atomic_load(&t->tid);
  FILE *f;
  int ok;
  if (tid == 0)
    return 0;
  snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
  f = fopen(path, "r");
  if (f == NULL)
    return 0;
  ok = fgets(buf, sizeof(buf), f) != NULL;
  fclose(f);
  if (!ok || sscanf(buf, "%ld", &nr) != 1)
    return 0;   /* "running", or gone */
  return nr == (long)SYS_futex;
}

/* Whether the probe above can work here (Linux, /proc mounted). */
static int proc_syscall_works(void) {
  char path[64];
  char buf[256];
  FILE *f;
  int ok;
  snprintf(path, sizeof(path), "/proc/self/task/%d/syscall",
           (int)syscall(SYS_gettid));
  f = fopen(path, "r");
  if (f == NULL)
    return 0;
  ok = fgets(buf, sizeof(buf), f) != NULL;
  fclose(f);
  return ok;
}

/* Polls cond(arg) every 2 ms until it held twice in a row; bounded. */
static int wait_twice(int (*cond)(void *), void *arg, uint64_t ms) {
  uint64_t end = harness_now_ms() + ms;
  int seen = 0;
  for (;;) {
    if (cond(arg)) {
      if (++seen == 2)
        return 0;
    } else {
      seen = 0;
    }
    if (harness_now_ms() > end)
      return -1;
    nap_ms(2);
  }
}

static int flag_set(void *arg) {
  return atomic_load((atomic_int *)arg) != 0;
}

/* ---- a: messages in the calling thread --------------------------------- */

static char stale[256];

/* An unrelated failure in this thread, with a known message. */
static void make_stale(void) {
  ASSERT_EQ(redlock_replace_allocator(NULL, NULL, NULL, NULL),
            REDLOCK_EINVAL);
  snprintf(stale, sizeof(stale), "%s", redlock_last_error());
  ASSERT(stale[0] != '\0');
}

static void check_msg(int rc, const char *call, const char *w1,
                      const char *w2) {
  const char *msg = redlock_last_error();
  EXPECT(rc == REDLOCK_EINVAL, "%s returned %s", call, redlock_err_name(rc));
  EXPECT(strcmp(msg, stale) != 0 &&
             (strcasestr(msg, w1) != NULL ||
              (w2 != NULL && strcasestr(msg, w2) != NULL)),
         "%s: redlock_last_error() in the calling thread is \"%s\", wanted "
         "a message about \"%s\"%s%s%s", call, msg, w1,
         w2 != NULL ? " or \"" : "", w2 != NULL ? w2 : "",
         w2 != NULL ? "\"" : "");
}

static void part_a(redlock_sync_t *s) {
  static char big[REDLOCK_MAX_KEY + 2];
  const void *res[REDLOCK_MAX_RESOURCES + 1];
  size_t lens[REDLOCK_MAX_RESOURCES + 1];
  redlock_acquire_opts fence = {.wait_ms = -1, .fence = 1};
  redlock_sync_lock_t *l = NULL;
  redlock_sync_lock_t *out;
  int rc;
  int i;

  ASSERT_EQ(redlock_sync_acquire(s, "msg", 3, 10000, NULL, &l), 0);

  make_stale();
  check_msg(redlock_sync_extend(l, 0), "redlock_sync_extend(l, 0)", "ttl",
            NULL);
  make_stale();
  check_msg(redlock_sync_extend(l, -5), "redlock_sync_extend(l, -5)", "ttl",
            NULL);
  make_stale();
  check_msg(redlock_sync_extend(l, (int64_t)REDLOCK_MAX_TTL_MS + 1),
            "redlock_sync_extend(l, REDLOCK_MAX_TTL_MS + 1)", "ttl", NULL);

  make_stale();
  out = NULL;
  rc = redlock_sync_acquire_rw(s, "msg-rw", 6, REDLOCK_WRITE, 10000, &fence, &out);
  check_msg(rc, "redlock_sync_acquire_rw with opts.fence", "fenc", NULL);
  ASSERT_NULL(out);

  memset(big, 'k', sizeof(big));
  make_stale();
  rc = redlock_sync_acquire(s, big, REDLOCK_MAX_KEY + 1, 10000, NULL, &out);
  check_msg(rc, "redlock_sync_acquire with a key too long", "key",
            "resource");
  ASSERT_NULL(out);

  for (i = 0; i <= REDLOCK_MAX_RESOURCES; i++) {
    res[i] = "m";
    lens[i] = 1;
  }
  make_stale();
  rc = redlock_sync_acquire_multi(s, res, lens, REDLOCK_MAX_RESOURCES + 1,
                                  10000, NULL, &out);
  check_msg(rc, "redlock_sync_acquire_multi with 65 resources", "resource",
            NULL);
  ASSERT_NULL(out);

  /* The handle still works, and so does a failure with another code. */
  ASSERT_EQ(redlock_sync_extend(l, 10000), 0);
  make_stale();
  {
    redlock_acquire_opts once = {.wait_ms = -1};
    rc = redlock_sync_acquire(s, "msg", 3, 10000, &once, &out);
    EXPECT(rc == REDLOCK_ETAKEN, "taken: %s", redlock_err_name(rc));
    EXPECT(strcmp(redlock_last_error(), stale) != 0,
           "ETAKEN left the stale message \"%s\"", redlock_last_error());
  }
  /* A failed acquisition says why, per master, as the async result does
   * (redlock_result_explain), not only "timed out" (issue 21, item 3). */
  make_stale();
  {
    redlock_acquire_opts wait = {.wait_ms = 300};
    rc = redlock_sync_acquire(s, "msg", 3, 10000, &wait, &out);
    EXPECT(rc == REDLOCK_ETIMEDOUT, "wait: %s", redlock_err_name(rc));
    EXPECT(strstr(redlock_last_error(), "masters held by another owner") != NULL,
           "a wait that ended: redlock_last_error() is \"%s\", wanted "
           "the per-master explanation", redlock_last_error());
  }
  ASSERT_EQ(redlock_sync_release(l), 0);
}

/* ---- b: on_lost gets the caller's handle -------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  int calls;
  int reason;
  redlock_lock_t *lock;
  int extend_rc;   /* a blocking call from on_lost: EBUSY, not a hang */
  atomic_int fired;
} lost_rec;

static void rec_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  /* on_lost runs on the background thread: a blocking call from it would
   * wait for that thread itself (redlock.h: EBUSY). */
  int rc = redlock_sync_extend((redlock_sync_lock_t *)l, 1000);
  pthread_mutex_lock(&r->mu);
  r->calls++;
  r->reason = reason;
  r->lock = l;
  r->extend_rc = rc;
  pthread_mutex_unlock(&r->mu);
  atomic_store(&r->fired, 1);
}

static int rec_twice(void *arg) {
  lost_rec *r = arg;
  int n;
  pthread_mutex_lock(&r->mu);
  n = r->calls;
  pthread_mutex_unlock(&r->mu);
  return n > 1;
}

static void lost_case(redlock_sync_t *s, harness_server *srv, int kind,
                      const char *what) {
  const void *res[2] = {"lost-m1", "lost-m2"};
  const size_t lens[2] = {7, 7};
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = rec_lost};
  redlock_sync_lock_t *sl = NULL;
  const char *key;
  lost_rec rec;
  char buf[64];
  int rc;
  int i;

  memset(&rec, 0, sizeof(rec));
  pthread_mutex_init(&rec.mu, NULL);
  ae.lost_arg = &rec;
  if (kind == 0) {
    rc = redlock_sync_acquire(s, "lost-p", 6, 1000, &ae, &sl);
    key = "lost-p";
  } else if (kind == 1) {
    rc = redlock_sync_acquire_multi(s, res, lens, 2, 1000, &ae, &sl);
    key = "lost-m1";
  } else {
    rc = redlock_sync_acquire_rw(s, "lost-rw", 7, REDLOCK_READ, 1000, &ae,
                                 &sl);
    key = "lost-rw:rw";
  }
  ASSERT_EQ(rc, 0);
  ASSERT_NOT_NULL(sl);
  /* Gone on a majority: the next extension (every ~300 ms) says so. */
  for (i = 0; i < 2; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL %s", key), 0);
  if (harness_wait_for(flag_set, &rec.fired, bound_ms(5000)) != 0)
    TEST_FAIL("%s: on_lost did not fire", what);
  pthread_mutex_lock(&rec.mu);
  EXPECT(rec.lock == (redlock_lock_t *)sl,
         "%s: on_lost got %p, not the caller's handle %p (the internal "
         "async handle leaks out)", what, (void *)rec.lock, (void *)sl);
  EXPECT(rec.reason == REDLOCK_ENOTHELD, "%s: reason %s", what,
         redlock_err_name(rec.reason));
  EXPECT(rec.extend_rc == REDLOCK_EBUSY, "%s: a blocking call from on_lost "
         "(the background thread) returned %s, not EBUSY", what,
         redlock_err_name(rec.extend_rc));
  pthread_mutex_unlock(&rec.mu);
  /* Exactly once: nothing more within a few extension intervals. */
  EXPECT(harness_wait_for(rec_twice, &rec, 500) != 0,
         "%s: on_lost ran twice", what);
  EXPECT(redlock_sync_is_lost(sl) == 1, "%s: is_lost 0", what);
  EXPECT(redlock_sync_validity_ms(sl) == 0, "%s: validity after lost",
         what);
  rc = redlock_sync_release(sl);
  EXPECT(rc == 0 || rc == REDLOCK_ENOTHELD, "%s: release: %s", what,
         redlock_err_name(rc));
  pthread_mutex_destroy(&rec.mu);
}

/* ---- c: one handle, many threads, and its release ------------------------ */

enum { K_VALIDITY, K_IS_LOST, K_EXTEND, K_TOKEN, K_RELEASE };

typedef struct {
  pthread_t th;
  redlock_sync_lock_t *sl;
  int kind;
  tinfo ti;
  atomic_int done;
  int rc;
  int64_t value;
} racer;

static void *racer_main(void *arg) {
  racer *r = arg;
  char tok[80];
  tinfo_publish(&r->ti);
  switch (r->kind) {
    case K_VALIDITY:
      r->value = redlock_sync_validity_ms(r->sl);
      break;
    case K_IS_LOST:
      r->value = redlock_sync_is_lost(r->sl);
      break;
    case K_EXTEND:
      r->rc = redlock_sync_extend(r->sl, 60000);
      break;
    case K_TOKEN:
      r->rc = redlock_sync_token(r->sl, tok, sizeof(tok));
      break;
    default:
      r->rc = redlock_sync_release(r->sl);
      break;
  }
  atomic_store(&r->done, 1);
  return NULL;
}

static void start_racer(racer *r, redlock_sync_lock_t *sl, int kind) {
  memset(r, 0, sizeof(*r));
  r->sl = sl;
  r->kind = kind;
  ASSERT_EQ(pthread_create(&r->th, NULL, racer_main, r), 0);
}

static int racer_inside(void *arg) {
  racer *r = arg;
  return atomic_load(&r->done) || tinfo_in_futex(&r->ti);
}

/* Waits (bounded) until the racer is blocked in its call (or returned). */
static void wait_inside(racer *r, const char *what) {
  if (wait_twice(racer_inside, r, bound_ms(10000)) != 0)
    TEST_FAIL("%s: the call never blocked nor returned", what);
}

static void join_racer(racer *r, const char *what) {
  if (harness_wait_for(flag_set, &r->done, bound_ms(20000)) != 0)
    TEST_FAIL("%s: a call did not return", what);
  pthread_join(r->th, NULL);
}

/* The outcome of a call that raced with the release of its handle. */
static void check_raced(const racer *r, const char *what) {
  switch (r->kind) {
    case K_VALIDITY:
      EXPECT(r->value == 0, "%s: validity %lld on a released handle", what,
             (long long)r->value);
      break;
    case K_IS_LOST:
      EXPECT(r->value == 0, "%s: is_lost %lld on a released handle", what,
             (long long)r->value);
      break;
    case K_EXTEND:
      EXPECT(r->rc == REDLOCK_EINVAL || r->rc == REDLOCK_ENOTHELD ||
                 r->rc == REDLOCK_EBUSY,
             "%s: extend on a released handle returned %s", what,
             redlock_err_name(r->rc));
      break;
    default:
      EXPECT(r->rc != 0, "%s: token on a released handle succeeded", what);
      break;
  }
}

static int key_gone(const harness_server *s, const char *key) {
  char val[128];
  return harness_get(s, key, val, sizeof(val)) == 0;
}

/* c2: a release posted while another thread's extend is in flight. */
static void part_c2(redlock_sync_t *s, harness_server *solo) {
  redlock_sync_lock_t *sl = NULL;
  racer x, rel;
  ASSERT_EQ(redlock_sync_acquire(s, "c2", 2, 60000, NULL, &sl), 0);
  harness_pause(solo);
  start_racer(&x, sl, K_EXTEND);    /* stuck on the stalled master */
  wait_inside(&x, "c2 extend");
  /* Calls run in order: once this returns the extend is in flight. */
  (void)redlock_sync_validity_ms(sl);
  ASSERT_EQ(atomic_load(&x.done), 0);
  start_racer(&rel, sl, K_RELEASE);
  wait_inside(&rel, "c2 release");
  harness_resume(solo);
  join_racer(&x, "c2 extend");
  join_racer(&rel, "c2 release");
  fprintf(stderr, "c2: the in-flight extend returned %s\n",
          redlock_err_name(x.rc));
  EXPECT(rel.rc == 0, "release returned %s while another thread's extend "
         "was in flight: the lock was neither released nor its handle "
         "freed (\"in every case\")", redlock_err_name(rel.rc));
  EXPECT(key_gone(solo, "c2"), "the key is still on the master after "
         "redlock_sync_release returned");
}

/* c3: 8 threads on one handle while another thread releases it. */
typedef struct {
  pthread_t th;
  redlock_sync_lock_t *sl;
  int id;
  tinfo ti;
  atomic_int in_call;         /* set before checking `releasing` */
  atomic_int calls;
  atomic_int exited;
  int bad;
  char badmsg[160];
} stresser;

static atomic_int releasing;

static void *stress_main(void *arg) {
  stresser *t = arg;
  unsigned k = (unsigned)t->id;
  tinfo_publish(&t->ti);
  for (;;) {
    int64_t v;
    int rc;
    atomic_store(&t->in_call, 1);
    if (atomic_load(&releasing)) {
      atomic_store(&t->in_call, 0);
      break;
    }
    switch (k++ % 3) {
      case 0:
        v = redlock_sync_validity_ms(t->sl);
        if (v < 0 && !t->bad++)
          snprintf(t->badmsg, sizeof(t->badmsg), "validity %lld",
                   (long long)v);
        break;
      case 1:
        v = redlock_sync_is_lost(t->sl);
        if (v != 0 && !t->bad++)
          snprintf(t->badmsg, sizeof(t->badmsg), "is_lost %lld",
                   (long long)v);
        break;
      default:
        rc = redlock_sync_extend(t->sl, 60000);
        if (rc != 0 && rc != REDLOCK_EINVAL && rc != REDLOCK_ENOTHELD &&
            rc != REDLOCK_EBUSY && !t->bad++)
          snprintf(t->badmsg, sizeof(t->badmsg), "extend: %s",
                   redlock_err_name(rc));
        break;
    }
    atomic_store(&t->in_call, 0);
    atomic_fetch_add(&t->calls, 1);
  }
  atomic_store(&t->exited, 1);
  return NULL;
}

/* Every stresser either stopped or is blocked inside a call. */
static int stressers_settled(void *arg) {
  stresser *t = arg;
  int i;
  for (i = 0; i < STRESS; i++)
    if (!atomic_load(&t[i].exited) &&
        !(atomic_load(&t[i].in_call) && tinfo_in_futex(&t[i].ti)))
      return 0;
  return 1;
}

static void part_c3(redlock_sync_t *s, harness_server *solo) {
  static stresser t[STRESS];
  char key[16];
  int round;
  int i;
  for (round = 0; round < STRESS_ROUNDS; round++) {
    redlock_sync_lock_t *sl = NULL;
    racer rel;
    uint64_t end;
    snprintf(key, sizeof(key), "c3-%d", round);
    ASSERT_EQ(redlock_sync_acquire(s, key, strlen(key), 60000, NULL, &sl),
              0);
    atomic_store(&releasing, 0);
    memset(t, 0, sizeof(t));
    for (i = 0; i < STRESS; i++) {
      t[i].sl = sl;
      t[i].id = i;
      ASSERT_EQ(pthread_create(&t[i].th, NULL, stress_main, &t[i]), 0);
    }
    /* Let every thread make a few calls. */
    end = harness_now_ms() + bound_ms(10000);
    for (i = 0; i < STRESS; i++)
      while (atomic_load(&t[i].calls) < 3) {
        if (harness_now_ms() > end)
          TEST_FAIL("c3: thread %d made no progress", i);
        nap_ms(1);
      }
    /* The release cannot complete while the master is stalled, so no
     * thread can post after it returned: they stop first. */
    harness_pause(solo);
    atomic_store(&releasing, 1);
    start_racer(&rel, sl, K_RELEASE);
    wait_inside(&rel, "c3 release");
    if (wait_twice(stressers_settled, t, bound_ms(10000)) != 0)
      TEST_FAIL("c3: the threads did not settle");
    harness_resume(solo);
    for (i = 0; i < STRESS; i++) {
      if (harness_wait_for(flag_set, &t[i].exited, bound_ms(20000)) != 0)
        TEST_FAIL("c3: thread %d did not stop", i);
      pthread_join(t[i].th, NULL);
      EXPECT(t[i].bad == 0, "c3 round %d, thread %d: %s", round, i,
             t[i].badmsg);
    }
    join_racer(&rel, "c3 release");
    EXPECT(rel.rc == 0, "c3 round %d: release returned %s with calls on "
           "the handle in flight", round, redlock_err_name(rel.rc));
    EXPECT(key_gone(solo, key), "c3 round %d: the key is still on the "
           "master after redlock_sync_release returned", round);
  }
}

/* c1: the background thread is held inside lock B's on_lost (B's
 * validity ran out while the master was stalled) while, in this order,
 * the reply to A's release arrives on the connection and calls on A from
 * RACERS threads are queued. When it resumes, the loop handles the reply
 * first (the socket became readable before the wake-up) - the release
 * completes and frees A's handle - then the queued calls. */
static struct {
  atomic_int entered;
  atomic_int go;
} blk;

static void blocker_lost(redlock_lock_t *l, int reason, void *arg) {
  uint64_t end = harness_now_ms() + 120000;
  (void)l;
  (void)reason;
  (void)arg;
  atomic_store(&blk.entered, 1);
  while (!atomic_load(&blk.go) && harness_now_ms() < end)
    nap_ms(1);
}

static void part_c1(redlock_sync_t *s, harness_server *solo) {
  static const int kinds[RACERS] = {K_VALIDITY, K_IS_LOST, K_EXTEND,
                                    K_TOKEN, K_VALIDITY, K_EXTEND};
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = blocker_lost};
  int64_t ttl_b = slow ? 8000 : 2000;
  redlock_sync_lock_t *a = NULL, *b = NULL;
  racer rel, r[RACERS];
  int64_t v;
  int rc;
  int i;

  ASSERT_EQ(redlock_sync_acquire(s, "c1-a", 4, 60000, NULL, &a), 0);
  ASSERT_EQ(redlock_sync_acquire(s, "c1-b", 4, ttl_b, &ae, &b), 0);
  harness_pause(solo);
  start_racer(&rel, a, K_RELEASE);
  wait_inside(&rel, "c1 release");
  if (atomic_load(&blk.entered))
    TEST_FAIL("c1: B was lost before A's release was sent (too slow)");
  /* Calls run in order: once this returns, A's release was sent. */
  v = redlock_sync_validity_ms(a);
  fprintf(stderr, "c1: validity of A with its release in flight: %lld\n",
          (long long)v);
  if (atomic_load(&blk.entered))
    TEST_FAIL("c1: B was lost before A's release was sent (too slow)");
  /* B's validity runs out (no extension can succeed): its on_lost holds
   * the background thread. */
  if (harness_wait_for(flag_set, &blk.entered, (uint64_t)ttl_b + 10000) != 0)
    TEST_FAIL("c1: B was never reported lost");
  harness_resume(solo);
  /* The master executes A's release (the key goes) and answers; one more
   * round trip on a new connection makes sure the answer was written. */
  {
    uint64_t end = harness_now_ms() + 10000;
    while (!key_gone(solo, "c1-a")) {
      if (harness_now_ms() > end)
        TEST_FAIL("c1: A's release never reached the master");
      nap_ms(2);
    }
    ASSERT_GE(harness_dbsize(solo), 0);
  }
  if (atomic_load(&rel.done)) {
    /* on_lost did not hold the thread that runs the calls: redlock.h
     * says "opts->on_lost runs on the background thread", and this is
     * that contract broken. */
    atomic_store(&blk.go, 1);
    join_racer(&rel, "c1 release");
    TEST_FAIL("c1: A's release completed while B's on_lost held the "
              "background thread (on_lost does not run on it)");
  }
  /* Calls on A, made while its release is in flight (contract-clean:
   * the release cannot return while the background thread is held). */
  for (i = 0; i < RACERS; i++) {
    start_racer(&r[i], a, kinds[i]);
    wait_inside(&r[i], "c1 racer");
  }
  if (atomic_load(&rel.done))
    TEST_FAIL("c1: the release returned while the background thread was "
              "held in on_lost");
  atomic_store(&blk.go, 1);
  join_racer(&rel, "c1 release");
  for (i = 0; i < RACERS; i++)
    join_racer(&r[i], "c1 racer");
  EXPECT(rel.rc == 0, "c1: release returned %s", redlock_err_name(rel.rc));
  for (i = 0; i < RACERS; i++) {
    fprintf(stderr, "c1: racer %d (kind %d): rc %s, value %lld\n", i,
            r[i].kind, redlock_err_name(r[i].rc), (long long)r[i].value);
    check_raced(&r[i], "c1");
  }
  rc = redlock_sync_release(b);
  EXPECT(rc == 0 || rc == REDLOCK_ENOTHELD, "c1: release of B: %s",
         redlock_err_name(rc));
}

int main(void) {
  harness_server srv[N + 1];
  const char *addrs[N];
  const char *solo_addr[1];
  redlock_client_config cfg;
  redlock_sync_t *s;

  slow = getenv("REDLOCK_TEST_SLOW") != NULL;
  ASSERT_EQ(redlock_replace_allocator(p_malloc, p_realloc, p_calloc,
                                      p_free), 0);
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N + 1);
  harness_addrs(srv, N, addrs);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = addrs;
  cfg.n_servers = N;
  cfg.command_timeout_ms = 2000;
  cfg.connect_timeout_ms = 2000;
  cfg.restart_guard_ms = -1;   /* brand-new servers */

  /* a and b, N = 3. */
  ASSERT_EQ(redlock_sync_new(&cfg, &s), 0);
  part_a(s);
  lost_case(s, srv, 0, "redlock_sync_acquire");
  lost_case(s, srv, 1, "redlock_sync_acquire_multi");
  lost_case(s, srv, 2, "redlock_sync_acquire_rw");
  ASSERT_EQ(redlock_sync_close(s), 0);

  /* c, N = 1: a master that can be stalled without losing the quorum of
   * anything else. Command timeout far above the stalls. */
  solo_addr[0] = harness_addr(&srv[N]);
  cfg.servers = solo_addr;
  cfg.n_servers = 1;
  cfg.command_timeout_ms = 60000;
  ASSERT_EQ(redlock_sync_new(&cfg, &s), 0);
  if (!proc_syscall_works()) {
    /* Only c needs to see where a thread is blocked; without it, c
     * cannot check anything: the test fails rather than pass unchecked
     * (the suite runs on Linux with /proc). */
    ASSERT_EQ(redlock_sync_close(s), 0);
    if (failures > 0)
      fprintf(stderr, "%d check(s) failed (see above)\n", failures);
    TEST_FAIL("/proc/self/task/*/syscall is not readable: part c cannot "
              "run");
  }
  part_c2(s, &srv[N]);
  part_c3(s, &srv[N]);
  part_c1(s, &srv[N]);
  ASSERT_EQ(redlock_sync_close(s), 0);

  if (failures > 0)
    TEST_FAIL("%d check(s) failed (see above)", failures);
  harness_stop_all();
  return 0;
}
