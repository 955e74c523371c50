/* redlock_lock_cancel: one acquisition ends with ECANCELED without
 * closing the client (issue 11, item 9).
 *
 *  a) waiting between attempts (the key is held by another owner): the
 *     callback gets ECANCELED on the next loop turn, never inside the
 *     call; the handle can acquire again afterwards;
 *  b) an attempt on the wire (two masters asleep in DEBUG SLEEP, so the
 *     SET waits there): ECANCELED at once, and what the SET leaves on
 *     those masters once they wake is released: nothing stays behind;
 *  c) a writer waiting for readers is cancelled: its intent is withdrawn,
 *     so a new reader gets in at once (not after the writer's ttl);
 *  d) a reentrant acquisition waiting for its longer-ttl extend: the
 *     callback gets ECANCELED, the lock stays held with one hold;
 *  e) nothing in flight, or already decided: EINVAL with a message. */
#include <poll.h>

#include "tutil.h"

#define N 3

static harness_server srv[N];

typedef struct {
  tu_op op;
  int in_call;          /* set around the cancel call */
  int during_call;      /* the callback ran inside it */
} cancel_rec;

static void on_cancel_cb(redlock_lock_t *l, int status,
                         const redlock_result *res, void *arg) {
  cancel_rec *r = arg;
  if (r->in_call)
    r->during_call = 1;
  tu_cb(l, status, res, &r->op);
}

static void start(redlock_lock_t *l, int64_t ttl,
                  const redlock_acquire_opts *o, cancel_rec *r) {
  memset(r, 0, sizeof(*r));
  ASSERT_EQ(redlock_lock_acquire(l, ttl, o, on_cancel_cb, r), 0);
}

static void cancel_now(uv_loop_t *loop, redlock_lock_t *l, cancel_rec *r) {
  r->in_call = 1;
  ASSERT_EQ(redlock_lock_cancel(l), 0);
  r->in_call = 0;
  ASSERT_EQ(r->op.done, 0);
  if (harness_run_until(loop, &r->op.done, 5000) != 0)
    TEST_FAIL("the cancelled acquisition's callback never ran");
  ASSERT_EQ(r->during_call, 0);
  ASSERT_EQ(r->op.calls, 1);
  ASSERT_EQ(r->op.status, REDLOCK_ECANCELED);
}

/* Puts masters 1..N-1 to sleep for 1 s (DEBUG SLEEP on connections of
 * their own) and waits until they no longer answer. */
static void sleep_others(int *fds) {
  const char *sleep_argv[] = {"DEBUG", "SLEEP", "1"};
  int i;
  for (i = 1; i < N; i++) {
    const char *ping[] = {"PING"};
    struct pollfd p;
    int fd;
    fds[i] = harness_send_nowait(&srv[i], 3, sleep_argv);
    fd = harness_send_nowait(&srv[i], 1, ping);
    p.fd = fd;
    p.events = POLLIN;
    if (poll(&p, 1, 100) != 0)
      TEST_FAIL("master %d still answers: DEBUG SLEEP did not start", i);
    harness_close_fd(fd);
  }
}

/* Runs the loop until no master holds `key` (bounded). */
static void wait_gone(uv_loop_t *loop, const char *key, uint64_t ms) {
  uint64_t end = harness_now_ms() + ms;
  char val[128];
  for (;;) {
    int i, left = 0;
    for (i = 0; i < N; i++)
      left += harness_get(&srv[i], key, val, sizeof(val)) == 1;
    if (left == 0)
      return;
    if (harness_now_ms() > end)
      TEST_FAIL("%s is still on %d master(s) after %llu ms: the cancelled "
                "attempt left it behind", key, left,
                (unsigned long long)ms);
    tu_run_for(loop, 10);
  }
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l, *r1, *w, *r2;
  redlock_acquire_opts wait_long = {.wait_ms = 60000, .retry_delay_ms = 200};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_acquire_opts re = {.wait_ms = -1, .reentrant = 1};
  cancel_rec rec;
  tu_op op;
  int fds[N];
  char val[64];
  int i;
  redlock_client_config cfg = {.command_timeout_ms = 3000};

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);

  /* e) nothing in flight */
  ASSERT_EQ(redlock_lock_new(c, "c-a", 3, &l), 0);
  ASSERT_EQ(redlock_lock_cancel(l), REDLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "no acquisition in flight"));
  ASSERT_EQ(redlock_lock_cancel(NULL), REDLOCK_EINVAL);

  /* a) waiting between attempts */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "c-a", "other-owner", 60000), 0);
  start(l, 10000, &wait_long, &rec);
  tu_run_for(&loop, 30);   /* first attempt refused, waiting to retry */
  ASSERT_EQ(rec.op.done, 0);
  cancel_now(&loop, l, &rec);
  fprintf(stderr, "a) waiting: ECANCELED after %u attempt(s)\n",
          rec.op.attempts);
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], val, sizeof(val), "DEL c-a"), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);   /* reusable */
  /* e) already decided: the callback ran */
  ASSERT_EQ(redlock_lock_cancel(l), REDLOCK_EINVAL);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);

  /* b) an attempt on the wire: masters 1 and 2 asleep for 1 s */
  sleep_others(fds);
  start(l, 10000, &once, &rec);
  tu_run_for(&loop, 20);   /* SET answered by master 0 only */
  ASSERT_EQ(rec.op.done, 0);
  cancel_now(&loop, l, &rec);
  ASSERT_EQ(redlock_lock_is_held(l), 0);
  for (i = 1; i < N; i++)
    harness_close_fd(fds[i]);
  /* Once they wake, their SETs run, then our releases. */
  wait_gone(&loop, "c-a", 5000);
  fprintf(stderr, "b) attempt on the wire: ECANCELED, nothing left on any "
          "master\n");
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);

  /* d) reentrant acquisition waiting for its extend */
  sleep_others(fds);
  start(l, 20000, &re, &rec);   /* longer ttl: an extend round first */
  tu_run_for(&loop, 20);
  ASSERT_EQ(rec.op.done, 0);
  cancel_now(&loop, l, &rec);
  for (i = 1; i < N; i++)
    harness_close_fd(fds[i]);
  ASSERT_EQ(redlock_lock_is_held(l), 1);
  ASSERT_EQ(redlock_lock_holds(l), 1);
  fprintf(stderr, "d) reentrant: ECANCELED, still held with %u hold\n",
          redlock_lock_holds(l));
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  wait_gone(&loop, "c-a", 5000);
  ASSERT_EQ(redlock_lock_free(l), 0);

  /* c) a writer waiting for a reader, cancelled: readers get in at once */
  ASSERT_EQ(redlock_rwlock_new(c, "c-rw", 4, REDLOCK_READ, &r1), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "c-rw", 4, REDLOCK_WRITE, &w), 0);
  ASSERT_EQ(redlock_rwlock_new(c, "c-rw", 4, REDLOCK_READ, &r2), 0);
  ASSERT_EQ(tu_acquire(&loop, r1, 30000, &once, &op), 0);
  start(w, 30000, &wait_long, &rec);
  tu_run_for(&loop, 50);   /* its intent is on the masters */
  ASSERT_EQ(tu_acquire(&loop, r2, 30000, &once, &op), REDLOCK_ETAKEN);
  cancel_now(&loop, w, &rec);
  {
    uint64_t end = harness_now_ms() + 3000;
    int rc;
    while ((rc = tu_acquire(&loop, r2, 30000, &once, &op)) != 0) {
      if (harness_now_ms() > end)
        TEST_FAIL("c) a reader was still kept out 3 s after the waiting "
                  "writer was cancelled (%s): its intent stayed",
                  redlock_err_name(rc));
      tu_run_for(&loop, 10);
    }
  }
  fprintf(stderr, "c) cancelled writer: a new reader got in\n");
  ASSERT_EQ(tu_release(&loop, r2, &op), 0);
  ASSERT_EQ(tu_release(&loop, r1, &op), 0);
  ASSERT_EQ(redlock_lock_free(r1), 0);
  ASSERT_EQ(redlock_lock_free(r2), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);

  /* A bare boolean for the side is refused. */
  ASSERT_EQ(redlock_rwlock_new(c, "c-rw", 4, (redlock_rw_side)1, &w),
            REDLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "REDLOCK_READ"));

  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
