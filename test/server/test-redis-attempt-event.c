/* The event hook hears of every failed attempt of a waiting acquisition
 * (REDLOCK_EV_ATTEMPT: the CLI's "waiting for KEY: why" messages), and
 * the hook may end the acquisition from inside itself.
 *
 * N = 3, the key held by another owner on every master; acquisitions wait
 * up to 5 s with a 20 ms retry delay.
 *  a) Each failed attempt is reported before the next one starts, with
 *     its votes (3 NO, status ETAKEN); the final outcome still comes as
 *     one REDLOCK_EV_ACQUIRE after the callback.
 *  b) The hook cancels the lock at its third attempt: the callback runs
 *     once with ECANCELED, no attempt follows (the hook's cancel is not
 *     overwritten by the retry the attempt was about to schedule).
 *  c) The hook tries to free the lock at its second attempt: EBUSY (an
 *     operation is in flight, as anywhere else), and the acquisition goes
 *     on until the hook cancels it at the fourth.
 *  d) The hook closes the client: the acquisition ends with ECANCELED and
 *     the close completes.
 *  e) Two acquisitions' attempts go out in the same flush; the first one
 *     decided closes the client from the hook, while the other's replies
 *     are still being read: both end with ECANCELED (the close ended the
 *     wait, not the masters' NO: it said ETAKEN, and a caller that waits
 *     60 s was told the lock is taken). */
#include "tutil.h"

#define N 3

typedef struct hook {
  int attempts;         /* ATTEMPT events seen */
  int finals;           /* ACQUIRE events seen */
  int bad;              /* an ATTEMPT without the expected votes */
  int cancel_at, free_at, close_at;
  redlock_lock_t *l;
  volatile int closed;
} hook;

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  ((hook *)arg)->closed = 1;
}

static void on_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg) {
  hook *h = arg;
  if (ev->kind == REDLOCK_EV_ACQUIRE) {
    h->finals++;
    return;
  }
  if (ev->kind != REDLOCK_EV_ATTEMPT)
    return;
  h->attempts++;
  if (ev->status != REDLOCK_ETAKEN || ev->result->no < 2 ||
      ev->result->attempts != (unsigned)h->attempts)
    h->bad++;
  if (h->attempts == h->cancel_at)
    ASSERT_EQ(redlock_lock_cancel(h->l), 0);
  if (h->attempts == h->free_at)
    ASSERT_EQ(redlock_lock_free(h->l), REDLOCK_EBUSY);
  if (h->attempts == h->close_at)
    ASSERT_EQ(redlock_client_close(c, on_closed, h), 0);
}

static void start(redlock_lock_t *l, tu_op *op) {
  redlock_acquire_opts o = {.wait_ms = 5000, .retry_delay_ms = 20,
                            .retry_jitter_ms = -1};
  memset(op, 0, sizeof(*op));
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &o, tu_cb, op), 0);
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  hook h;
  tu_op op;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "ev", "another-owner", 60000), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_client_set_event_hook(c, on_event, &h), 0);

  /* a) + b) */
  memset(&h, 0, sizeof(h));
  h.cancel_at = 3;
  ASSERT_EQ(redlock_lock_new(c, "ev", 2, &h.l), 0);
  start(h.l, &op);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  tu_run_for(&loop, 100);   /* five retry delays: no attempt may follow */
  fprintf(stderr, "b) %d attempts reported, %d final, status %s\n",
          h.attempts, h.finals, redlock_err_name(op.status));
  ASSERT_EQ(op.calls, 1);
  ASSERT_EQ(op.status, REDLOCK_ECANCELED);
  ASSERT_EQ(h.attempts, 3);
  ASSERT_EQ(h.bad, 0);
  ASSERT_EQ(h.finals, 1);
  ASSERT_EQ(redlock_lock_free(h.l), 0);

  /* c) */
  memset(&h, 0, sizeof(h));
  h.free_at = 2;
  h.cancel_at = 4;
  ASSERT_EQ(redlock_lock_new(c, "ev", 2, &h.l), 0);
  start(h.l, &op);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  tu_run_for(&loop, 100);
  ASSERT_EQ(h.attempts, 4);
  ASSERT_EQ(op.calls, 1);
  ASSERT_EQ(op.status, REDLOCK_ECANCELED);
  ASSERT_EQ(redlock_lock_free(h.l), 0);

  /* d) */
  memset(&h, 0, sizeof(h));
  h.close_at = 2;
  ASSERT_EQ(redlock_lock_new(c, "ev", 2, &h.l), 0);
  start(h.l, &op);
  ASSERT_EQ(harness_run_until(&loop, &h.closed, 10000), 0);
  ASSERT_EQ(op.done, 1);
  ASSERT_EQ(op.status, REDLOCK_ECANCELED);
  ASSERT_EQ(h.attempts, 2);

  /* e) */
  {
    tu_op op2;
    redlock_lock_t *la, *lb;
    c = tu_client(&loop, srv, N, NULL, N);
    ASSERT_EQ(redlock_client_set_event_hook(c, on_event, &h), 0);
    memset(&h, 0, sizeof(h));
    h.close_at = 1;
    ASSERT_EQ(redlock_lock_new(c, "ev", 2, &la), 0);
    ASSERT_EQ(redlock_lock_new(c, "ev", 2, &lb), 0);
    start(la, &op);
    start(lb, &op2);
    ASSERT_EQ(harness_run_until(&loop, &h.closed, 10000), 0);
    fprintf(stderr, "e) %s, %s after %d attempt(s) reported\n",
            redlock_err_name(op.status), redlock_err_name(op2.status),
            h.attempts);
    ASSERT_EQ(op.calls, 1);
    ASSERT_EQ(op2.calls, 1);
    ASSERT_EQ(op.status, REDLOCK_ECANCELED);
    ASSERT_EQ(op2.status, REDLOCK_ECANCELED);
  }
  harness_loop_close(&loop, 5000);
  harness_stop_all();
  return 0;
}
