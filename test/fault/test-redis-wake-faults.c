/* Wake-up (opts.wake) under the conditions where a waiter can stop
 * hearing releases. A waiter listens on "__redlock__:<key>" on every
 * master, through one subscriber connection per master, and retries at
 * once on a release message; its retry delay (here several seconds) is
 * only the fallback. So a waiter that is still woken only by that delay
 * shows that it was not listening where it should. Each case:
 *
 *  a) a multi-resource waiter ({k1, k2}) blocked by a holder of k2 only
 *     must be woken by the release of k2: it listens on every one of its
 *     keys, not only on the first;
 *  b) its subscriber connections killed (CLIENT KILL TYPE pubsub on every
 *     master), a waiter must connect and subscribe again, and still be
 *     woken by the next release;
 *  c) a subscriber connection that cannot be made (the master is stopped
 *     and its accept queue is full, so the connect itself never
 *     completes: its SYN is dropped) must be given up after the connect
 *     timeout (200 ms here) and tried again, like the main connection:
 *     no connect of this process to that master may still be pending
 *     when the kernel retransmits its SYN, 1 s after sending it (the
 *     retransmission count in /proc/net/tcp tells). Without a connect
 *     timeout the subscriber waits for the kernel's SYN retries (seconds
 *     apart, then ETIMEDOUT after about two minutes). Once the master is
 *     back the waiter listens there again; and while that master is
 *     stopped the waiter is woken through the other masters;
 *  d) a master that is down when the waiter starts listening gets its
 *     subscriber once it is back up;
 *  e) a client configured with a password, on masters that have none
 *     (AUTH answers "called without any password configured", which the
 *     lock connection accepts), must subscribe as well: the subscriber
 *     must not take that answer for a refusal and keep failing;
 *  f) a release message that arrives while the waiter's attempt is still
 *     in flight (one master is blocked by DEBUG SLEEP, so the attempt
 *     waits for its command timeout) must not be lost: the attempt was
 *     refused before the release, so the waiter must retry as soon as it
 *     ends, not after its retry delay (or the blocked master's late
 *     message);
 *  g) the release of a failed attempt's keys (a yes on a minority) sends
 *     no release message: nobody waited for that owner, and waking every
 *     waiter at once after split votes only splits them again (and woke
 *     the failed waiter itself, at once, instead of after its delay). The
 *     release of a held lock does send one.
 *
 * Every case runs on its own loop and clients, so one failing does not
 * hide the others; the test fails at the end if any did. A wake-up counts
 * if the waiter got the lock within wake_ms of the release (500 ms, 1 s
 * under valgrind), and each case checks that its retry fallback could not
 * come that early. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tutil.h"

#define N 3
#define MAX_FILLERS 8192

static harness_server srv[N];
static int slow;             /* REDLOCK_TEST_SLOW: valgrind */
static uint64_t wake_ms;     /* a wake-up takes less than this */

static int numsub(int i, const char *channel) {
  char buf[64];
  if (harness_cmdf(&srv[i], buf, sizeof(buf), "EVAL %s 0 %s",
                   "return redis.call('pubsub','numsub',ARGV[1])[2]",
                   channel) != 0)
    return -1;
  return atoi(buf);
}

/* Runs the loop until every master in `mask` (bit i: master i) has at
 * least one subscriber on each of the channels, or timeout_ms passes.
 * Returns 0, or -1 on timeout. */
static int wait_listening(uv_loop_t *loop, unsigned mask,
                          const char *const *channels, int n_channels,
                          uint64_t timeout_ms) {
  uint64_t end = harness_now_ms() + timeout_ms;
  for (;;) {
    int ok = 1;
    int i, j;
    for (i = 0; i < N && ok; i++)
      for (j = 0; j < n_channels && ok; j++)
        if (mask & (1u << i))
          ok = numsub(i, channels[j]) >= 1;
    if (ok)
      return 0;
    if (harness_now_ms() > end)
      return -1;
    tu_run_for(loop, 2);
  }
}

static redlock_client_t *client(uv_loop_t *loop, int command_timeout_ms,
                                int connect_timeout_ms) {
  redlock_client_config cfg = {.command_timeout_ms = command_timeout_ms,
                               .connect_timeout_ms = connect_timeout_ms,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 200};
  return tu_client(loop, srv, N, &cfg, N);
}

/* Starts a waiting acquisition with wake-up and the given retry delay
 * (no jitter); the callback records into op. */
static void start_waiter(redlock_lock_t *w, int retry_delay_ms, tu_op *op) {
  redlock_acquire_opts o = {.wait_ms = 120000, .retry_count = 1000,
                            .retry_delay_ms = retry_delay_ms,
                            .retry_jitter_ms = -1, .wake = 1};
  memset(op, 0, sizeof(*op));
  ASSERT_EQ(redlock_lock_acquire(w, 10000, &o, tu_cb, op), 0);
}

/* Releases the holder, waits for the waiter's callback. Returns the time
 * from the release to the grant; fails the test if the fallback retry
 * could have come within wake_ms of the release (the case would then
 * prove nothing). */
static uint64_t handoff(uv_loop_t *loop, redlock_lock_t *holder,
                        tu_op *wop, uint64_t fallback_at) {
  tu_op op;
  uint64_t t_rel = harness_now_ms();
  if (wop->done)
    TEST_FAIL("the waiter finished before the release (status %s)",
              redlock_err_name(wop->status));
  if (fallback_at < t_rel + 2 * wake_ms)
    TEST_FAIL("setup too slow: the retry fallback is due %lld ms after "
              "the release, a wake-up could not be told from it",
              (long long)fallback_at - (long long)t_rel);
  ASSERT_EQ(tu_release(loop, holder, &op), 0);
  if (harness_run_until(loop, &wop->done, 60000) != 0)
    TEST_FAIL("the waiter never got the lock");
  ASSERT_EQ(wop->calls, 1);
  ASSERT_EQ(wop->status, 0);
  return wop->cb_ms - t_rel;
}

static void finish(uv_loop_t *loop, redlock_client_t *ch,
                   redlock_client_t *cw, redlock_lock_t *h,
                   redlock_lock_t *w) {
  tu_op op;
  if (redlock_lock_is_held(w))
    ASSERT_EQ(tu_release(loop, w, &op), 0);
  ASSERT_EQ(redlock_lock_free(h), 0);
  ASSERT_EQ(redlock_lock_free(w), 0);
  ASSERT_EQ(redlock_client_close(ch, NULL, NULL), 0);
  tu_close(loop, cw);
}

/* ---- a) multi-resource waiter ------------------------------------------ */

static int case_multi(void) {
  static const char *const both[] = {"__redlock__:wf-a-k1",
                                     "__redlock__:wf-a-k2"};
  const char *k2ch = both[1];
  const void *res[2] = {"wf-a-k1", "wf-a-k2"};
  size_t lens[2] = {7, 7};
  redlock_acquire_opts once = {.wait_ms = -1};
  int retry = slow ? 6000 : 3000;
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w;
  tu_op op, wop;
  uint64_t t0, took;
  int on_k2;
  int i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = client(&loop, 0, 0);
  cw = client(&loop, 0, 0);
  ASSERT_EQ(redlock_lock_new(ch, "wf-a-k2", 7, &h), 0);
  ASSERT_EQ(redlock_lock_new_multi(cw, res, lens, 2, &w), 0);
  /* The holder has k2 only; the waiter wants k1 and k2 together. */
  ASSERT_EQ(tu_acquire(&loop, h, 10000, &once, &op), 0);
  t0 = harness_now_ms();
  start_waiter(w, retry, &wop);
  /* Waiting and listening (on some key) on every master. */
  {
    uint64_t end = harness_now_ms() + 5000;
    for (;;) {
      int ok = 1;
      for (i = 0; i < N && ok; i++)
        ok = numsub(i, both[0]) + numsub(i, both[1]) >= 1;
      if (ok)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("a) the waiter never listened on its keys' channels");
      tu_run_for(&loop, 2);
    }
  }
  /* Give it a moment to listen on k2 as well (not fatal: the wake-up is
   * what counts). */
  on_k2 = wait_listening(&loop, 7, &k2ch, 1, 1000) == 0;
  took = handoff(&loop, h, &wop, t0 + (uint64_t)retry);
  fprintf(stderr, "a) multi-resource waiter: granted %llu ms after the "
          "release of k2 (retry delay %d ms; listening on k2: %s)\n",
          (unsigned long long)took, retry, on_k2 ? "yes" : "no");
  finish(&loop, ch, cw, h, w);
  if (took >= wake_ms) {
    fprintf(stderr, "%s:%d: a) FAIL: a waiter on {k1, k2} was not woken "
            "by the release of k2 (%llu ms >= %llu ms): it listens only "
            "on its first key\n", __FILE__, __LINE__,
            (unsigned long long)took, (unsigned long long)wake_ms);
    return 1;
  }
  return 0;
}

/* ---- b) subscriber connections killed ------------------------------------ */

static int case_killed(void) {
  static const char *const ch_name[] = {"__redlock__:wf-b"};
  redlock_acquire_opts once = {.wait_ms = -1};
  int retry = slow ? 8000 : 4000;
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w;
  tu_op op, wop;
  uint64_t t0, took;
  char buf[64];
  int again;
  int i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = client(&loop, 0, 0);
  cw = client(&loop, 0, 0);
  ASSERT_EQ(redlock_lock_new(ch, "wf-b", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cw, "wf-b", 4, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 10000, &once, &op), 0);
  t0 = harness_now_ms();
  start_waiter(w, retry, &wop);
  if (wait_listening(&loop, 7, ch_name, 1, 5000) != 0)
    TEST_FAIL("b) the waiter never subscribed on every master");
  /* Kill the waiter's subscriber connection on every master (the only
   * pubsub clients there). */
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf),
                           "CLIENT KILL TYPE pubsub"), 0);
    ASSERT_GE(atoi(buf), 1);
    ASSERT_EQ(numsub(i, ch_name[0]), 0);
  }
  /* It connects and subscribes again (not fatal here: the wake-up is
   * what counts). */
  again = wait_listening(&loop, 7, ch_name, 1, slow ? 3000 : 1500) == 0;
  took = handoff(&loop, h, &wop, t0 + (uint64_t)retry);
  fprintf(stderr, "b) subscribers killed: granted %llu ms after the "
          "release (retry delay %d ms; subscribed again: %s)\n",
          (unsigned long long)took, retry, again ? "yes" : "no");
  finish(&loop, ch, cw, h, w);
  if (took >= wake_ms) {
    fprintf(stderr, "%s:%d: b) FAIL: after its subscriber connections "
            "were killed the waiter was not woken by the release (%llu ms "
            ">= %llu ms): it never subscribed again\n", __FILE__,
            __LINE__, (unsigned long long)took,
            (unsigned long long)wake_ms);
    return 1;
  }
  return 0;
}

/* ---- c) a master whose connect never completes --------------------------- */

/* Fills the accept queue of a stopped server: connects until a connect
 * does not complete (its SYN is dropped), closing that last one. Returns
 * the number of open connections in fds. */
static int fill_accept_queue(const harness_server *s, int *fds) {
  struct sockaddr_in a;
  int n;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)s->port);
  for (n = 0; n < MAX_FILLERS; n++) {
    struct pollfd p;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int err = 0;
    socklen_t len = sizeof(err);
    if (fd < 0)
      TEST_FAIL("socket: %s (%d fillers)", strerror(errno), n);
    ASSERT_EQ(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 &&
        errno != EINPROGRESS)
      TEST_FAIL("connect: %s", strerror(errno));
    p.fd = fd;
    p.events = POLLOUT;
    p.revents = 0;
    if (poll(&p, 1, 300) == 0) {
      close(fd);   /* not accepted: the queue is full */
      return n;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
      TEST_FAIL("filler connect: %s", strerror(err));
    fds[n] = fd;
  }
  TEST_FAIL("the accept queue of :%d did not fill up", s->port);
  return 0;
}

/* Connects to 127.0.0.1:port still in SYN_SENT (/proc/net/tcp): how many,
 * and the most SYN retransmissions any of them had. -1 if unreadable. */
static int pending_connects(int port, int *max_retrans) {
  char line[512];
  char want[16];
  int count = 0;
  FILE *f = fopen("/proc/net/tcp", "r");
  *max_retrans = 0;
  if (f == NULL)
    return -1;
  snprintf(want, sizeof(want), ":%04X", port);
  while (fgets(line, sizeof(line), f) != NULL) {
    char remote[64];
    unsigned st, retrans;
    const char *p;
    if (sscanf(line, " %*s %*s %63s %x %*s %*s %x", remote, &st,
               &retrans) != 3)
      continue;
    p = strstr(remote, want);
    if (st != 2 || p == NULL || strlen(p) != 5)
      continue;
    count++;
    if ((int)retrans > *max_retrans)
      *max_retrans = (int)retrans;
  }
  fclose(f);
  return count;
}

static int case_unreachable(void) {
  static const char *const ch_name[] = {"__redlock__:wf-c"};
  static int fillers[MAX_FILLERS];
  redlock_acquire_opts once = {.wait_ms = -1};
  int connect_timeout = slow ? 400 : 200;
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w;
  tu_op op, wop;
  uint64_t t0, t_listen, t_resume, took;
  int n_fill;
  int pending, max_retrans;
  int back;
  int failed = 0;
  int i;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* Both clients: commands may wait 20 s (their connections to the
   * stopped master stay up meanwhile); connects give up quickly. */
  ch = client(&loop, 20000, connect_timeout);
  cw = client(&loop, 20000, connect_timeout);
  ASSERT_EQ(redlock_lock_new(ch, "wf-c", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cw, "wf-c", 4, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 30000, &once, &op), 0);
  /* Every master has answered the holder (nothing of it is pending on
   * master 2 when it stops). */
  {
    uint64_t end = harness_now_ms() + 5000;
    while (tu_count_holding(srv, N, "wf-c", redlock_lock_token(h)) != N) {
      if (harness_now_ms() > end)
        TEST_FAIL("c) the holder's key is not on every master");
      tu_run_for(&loop, 2);
    }
    tu_run_for(&loop, 10);
  }

  /* Master 2 stops, and its kernel accepts no new connection any more:
   * a connect to it stays in SYN_SENT, its SYN retransmitted after 1 s,
   * then again and again. The waiter's connection to it stays up. */
  harness_pause(&srv[2]);
  n_fill = fill_accept_queue(&srv[2], fillers);
  t0 = harness_now_ms();
  start_waiter(w, 60000, &wop);   /* no retry within this case */
  if (wait_listening(&loop, 3, ch_name, 1, 5000) != 0)
    TEST_FAIL("c) the waiter never subscribed on masters 0 and 1");
  t_listen = harness_now_ms();
  /* 2.5 s on: no connect attempt of ours to master 2 may be old enough
   * to have had its SYN retransmitted (1 s after it was sent; the count
   * stays): each must have been given up after the connect timeout. The
   * loop runs freely meanwhile, then /proc/net/tcp is read once. */
  if (harness_now_ms() < t0 + 2500)
    tu_run_for(&loop, t0 + 2500 - harness_now_ms());
  pending = pending_connects(srv[2].port, &max_retrans);
  harness_resume(&srv[2]);
  t_resume = harness_now_ms();
  for (i = 0; i < n_fill; i++)
    close(fillers[i]);
  fprintf(stderr, "c) master 2 stopped, accept queue full (%d "
          "connections), for %llu ms (listening on 0 and 1 after %llu "
          "ms): %d connect attempt(s) to it pending, at most %d SYN "
          "retransmission(s)\n", n_fill,
          (unsigned long long)(t_resume - t0),
          (unsigned long long)(t_listen - t0), pending, max_retrans);
  if (pending < 0)
    fprintf(stderr, "c) /proc/net/tcp unreadable: connect timeout not "
            "checked\n");
  if (max_retrans > 0) {
    fprintf(stderr, "%s:%d: c) FAIL: a connect to the unreachable master "
            "was still pending after its SYN was retransmitted (> 1 s), "
            "with connect_timeout_ms %d: the subscriber connection has "
            "no connect timeout\n", __FILE__, __LINE__, connect_timeout);
    failed = 1;
  }
  /* Back: the waiter listens there again soon. */
  back = wait_listening(&loop, 4, ch_name, 1, 5000) == 0;
  fprintf(stderr, "c) subscribed on master 2 %s (%llu ms after it came "
          "back)\n", back ? "again" : "NOT within 5 s",
          (unsigned long long)(harness_now_ms() - t_resume));
  if (!back) {
    fprintf(stderr, "%s:%d: c) FAIL: no subscriber on master 2 within 5 s "
            "after it came back\n", __FILE__, __LINE__);
    failed = 1;
  }
  /* Whatever happened, the release wakes it. */
  took = handoff(&loop, h, &wop, t0 + 60000);
  fprintf(stderr, "c) granted %llu ms after the release\n",
          (unsigned long long)took);
  ASSERT_LT(took, wake_ms);

  /* Master 2 stopped again (accepting this time): the release is heard
   * through the other two masters. */
  tu_wait_up(&loop, ch, N, 10000);
  tu_wait_up(&loop, cw, N, 10000);
  ASSERT_EQ(tu_release(&loop, w, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 30000, &once, &op), 0);
  harness_pause(&srv[2]);
  t0 = harness_now_ms();
  start_waiter(w, slow ? 8000 : 4000, &wop);
  if (wait_listening(&loop, 3, ch_name, 1, 5000) != 0)
    TEST_FAIL("c) the waiter never subscribed on masters 0 and 1");
  took = handoff(&loop, h, &wop, t0 + (slow ? 8000 : 4000));
  fprintf(stderr, "c) master 2 stopped: granted %llu ms after the release "
          "(%u yes)\n", (unsigned long long)took, wop.yes);
  if (took >= wake_ms) {
    fprintf(stderr, "%s:%d: c) FAIL: with master 2 stopped the waiter was "
            "not woken through the other masters (%llu ms >= %llu ms)\n",
            __FILE__, __LINE__, (unsigned long long)took,
            (unsigned long long)wake_ms);
    failed = 1;
  }
  ASSERT_EQ(wop.yes, 2);
  harness_resume(&srv[2]);
  tu_wait_up(&loop, ch, N, 10000);
  tu_wait_up(&loop, cw, N, 10000);
  finish(&loop, ch, cw, h, w);
  return failed;
}

/* ---- d) a master down when the waiter starts listening ------------------- */

static int case_down_first(void) {
  static const char *const ch_name[] = {"__redlock__:wf-d"};
  redlock_acquire_opts once = {.wait_ms = -1};
  int retry = slow ? 8000 : 4000;
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w;
  tu_op op, wop;
  uint64_t t0, took;
  int back;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = client(&loop, 0, 0);
  cw = client(&loop, 0, 0);
  ASSERT_EQ(redlock_lock_new(ch, "wf-d", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cw, "wf-d", 4, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 30000, &once, &op), 0);
  harness_kill(&srv[2]);
  tu_wait_up(&loop, ch, N - 1, 10000);
  tu_wait_up(&loop, cw, N - 1, 10000);
  t0 = harness_now_ms();
  start_waiter(w, retry, &wop);
  if (wait_listening(&loop, 3, ch_name, 1, 5000) != 0)
    TEST_FAIL("d) the waiter never subscribed on masters 0 and 1");
  harness_restart(&srv[2]);
  tu_wait_up(&loop, cw, N, 10000);
  back = wait_listening(&loop, 4, ch_name, 1, slow ? 2000 : 1500) == 0;
  fprintf(stderr, "d) master 2 down when the waiter subscribed: "
          "listening there once it is back: %s\n", back ? "yes" : "no");
  tu_wait_up(&loop, ch, N, 10000);
  took = handoff(&loop, h, &wop, t0 + (uint64_t)retry);
  fprintf(stderr, "d) granted %llu ms after the release\n",
          (unsigned long long)took);
  ASSERT_LT(took, wake_ms);   /* through masters 0 and 1 */
  finish(&loop, ch, cw, h, w);
  if (!back) {
    fprintf(stderr, "%s:%d: d) FAIL: master 2 was down when the waiter "
            "started listening; once it was back the waiter never "
            "subscribed there\n", __FILE__, __LINE__);
    return 1;
  }
  return 0;
}

/* ---- e) a password the masters do not need ------------------------------- */

static int case_needless_password(void) {
  static const char *const ch_name[] = {"__redlock__:wf-e"};
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config pw = {.password = "not-needed",
                              .reconnect_min_ms = 10,
                              .reconnect_max_ms = 200};
  int retry = slow ? 8000 : 4000;
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w;
  tu_op op, wop;
  uint64_t t0, took;
  int listening;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = client(&loop, 0, 0);
  /* The masters have no password: the lock connections come up anyway. */
  cw = tu_client(&loop, srv, N, &pw, N);
  ASSERT_EQ(redlock_lock_new(ch, "wf-e", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cw, "wf-e", 4, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 10000, &once, &op), 0);
  t0 = harness_now_ms();
  start_waiter(w, retry, &wop);
  listening = wait_listening(&loop, 7, ch_name, 1, slow ? 3000 : 1500) == 0;
  took = handoff(&loop, h, &wop, t0 + (uint64_t)retry);
  fprintf(stderr, "e) client password, masters without one: subscribed "
          "on every master: %s; granted %llu ms after the release (retry "
          "delay %d ms)\n", listening ? "yes" : "no",
          (unsigned long long)took, retry);
  finish(&loop, ch, cw, h, w);
  if (!listening || took >= wake_ms) {
    fprintf(stderr, "%s:%d: e) FAIL: with a password the masters do not "
            "need, the waiter %s and was granted %llu ms after the "
            "release (>= %llu ms): the wake-up subscriber takes the "
            "harmless AUTH error for a failure\n", __FILE__, __LINE__,
            listening ? "subscribed" : "never subscribed",
            (unsigned long long)took, (unsigned long long)wake_ms);
    return 1;
  }
  return 0;
}

/* ---- f) a release heard while an attempt is in flight -------------------- */

/* 1 if master i does not answer a PING within 100 ms (it is blocked). */
static int is_blocked(int i) {
  const char *argv[] = {"PING"};
  struct pollfd p;
  int fd = harness_send_nowait(&srv[i], 1, argv);
  int n;
  p.fd = fd;
  p.events = POLLIN;
  n = poll(&p, 1, 100);
  harness_close_fd(fd);
  return n == 0;
}

static int case_in_flight(void) {
  static const char *const ch_name[] = {"__redlock__:wf-f"};
  redlock_acquire_opts once = {.wait_ms = -1};
  int retry = slow ? 8000 : 4000;
  const char *sleep_argv[] = {"DEBUG", "SLEEP", slow ? "4" : "2"};
  uv_loop_t loop;
  redlock_client_t *ch, *cw;
  redlock_lock_t *h, *w;
  tu_op op, wop;
  uint64_t took, end;
  char buf[64];
  int fd;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = client(&loop, 0, 0);
  /* The waiter gives a blocked master 150 ms (300 under valgrind). */
  cw = client(&loop, slow ? 300 : 150, 0);
  ASSERT_EQ(redlock_lock_new(ch, "wf-f", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cw, "wf-f", 4, &w), 0);
  ASSERT_EQ(tu_acquire(&loop, h, 10000, &once, &op), 0);
  /* Master 2 free: the waiter's attempts get a yes there, so one with
   * master 1 blocked stays undecided (1 yes, 1 no) until its timeout. */
  ASSERT_EQ(harness_cmdf(&srv[2], buf, sizeof(buf), "DEL wf-f"), 0);
  start_waiter(w, retry, &wop);
  if (wait_listening(&loop, 7, ch_name, 1, 5000) != 0)
    TEST_FAIL("f) the waiter never subscribed on every master");
  /* Its first attempt is over (refused by masters 0 and 1, its yes on
   * master 2 released): it waits for a message or its retry delay. */
  end = harness_now_ms() + 5000;
  for (;;) {
    ASSERT_EQ(harness_cmdf(&srv[2], buf, sizeof(buf), "EXISTS wf-f"), 0);
    if (strcmp(buf, "0") == 0)
      break;
    if (harness_now_ms() > end)
      TEST_FAIL("f) the waiter's first attempt never ended");
    tu_run_for(&loop, 2);
  }
  ASSERT_EQ(wop.done, 0);
  fd = harness_send_nowait(&srv[1], 3, sleep_argv);
  end = harness_now_ms() + 2000;
  while (!is_blocked(1))
    if (harness_now_ms() > end)
      TEST_FAIL("f) DEBUG SLEEP did not block master 1");
  /* A message (as another releaser's) starts an attempt now; it is in
   * flight once its yes is on master 2. */
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "PUBLISH %s 1",
                         ch_name[0]), 0);
  end = harness_now_ms() + 2000;
  for (;;) {
    tu_run_for(&loop, 1);
    ASSERT_EQ(harness_cmdf(&srv[2], buf, sizeof(buf), "EXISTS wf-f"), 0);
    if (strcmp(buf, "1") == 0)
      break;
    if (harness_now_ms() > end)
      TEST_FAIL("f) the waiter did not retry on the message");
  }
  /* The release publishes on master 0 while that attempt waits for
   * master 1; master 1's own message comes only after its sleep. */
  {
    /* The holder's release: yes on master 0, nothing on master 2, no
     * answer from master 1 (ENOQUORUM: it is sent again there later). */
    uint64_t t_rel = harness_now_ms();
    ASSERT_EQ(tu_release(&loop, h, &op), REDLOCK_ENOQUORUM);
    ASSERT_EQ(op.nodes[0].vote, REDLOCK_VOTE_YES);
    if (harness_run_until(&loop, &wop.done, 60000) != 0)
      TEST_FAIL("f) the waiter never got the lock");
    ASSERT_EQ(wop.status, 0);
    took = wop.cb_ms - t_rel;
  }
  fprintf(stderr, "f) release heard during an attempt: granted %llu ms "
          "after the release (retry delay %d ms, master 1 asleep %s s)\n",
          (unsigned long long)took, retry, sleep_argv[2]);
  ASSERT_EQ(harness_cmdf(&srv[1], buf, sizeof(buf), "PING"), 0);
  harness_close_fd(fd);
  finish(&loop, ch, cw, h, w);
  if (took >= wake_ms) {
    fprintf(stderr, "%s:%d: f) FAIL: a release message that came while "
            "the waiter's attempt was in flight was lost: granted %llu ms "
            "after the release (>= %llu ms)\n", __FILE__, __LINE__,
            (unsigned long long)took, (unsigned long long)wake_ms);
    return 1;
  }
  return 0;
}

/* ---- g) a failed attempt's release is quiet ------------------------------- */

/* Bytes readable on fd within ms, appended to buf (NUL-terminated). */
static void read_for(int fd, char *buf, size_t cap, int ms) {
  uint64_t end = harness_now_ms() + (uint64_t)ms;
  size_t len = strlen(buf);
  for (;;) {
    struct pollfd p;
    int64_t left = (int64_t)end - (int64_t)harness_now_ms();
    ssize_t n;
    if (left <= 0 || len + 1 >= cap)
      return;
    p.fd = fd;
    p.events = POLLIN;
    if (poll(&p, 1, (int)left) <= 0)
      return;
    n = read(fd, buf + len, cap - 1 - len);
    if (n <= 0)
      return;
    len += (size_t)n;
    buf[len] = '\0';
  }
}

static int count_messages(const char *buf) {
  int n = 0;
  const char *p = buf;
  while ((p = strstr(p, "\r\nmessage\r\n")) != NULL) {
    n++;
    p += 11;
  }
  return n;
}

/* Calls of a command on master i so far (INFO commandstats). */
static long cmd_calls(int i, const char *name) {
  char buf[8192];
  char pat[64];
  const char *p;
  snprintf(pat, sizeof(pat), "cmdstat_%s:calls=", name);
  if (harness_cmdf(&srv[i], buf, sizeof(buf), "INFO commandstats") != 0)
    return -1;
  p = strstr(buf, pat);
  return p == NULL ? 0 : atol(p + strlen(pat));
}

static int case_quiet_giveup(void) {
  const char *sub_argv[] = {"SUBSCRIBE", "__redlock__:wf-g"};
  redlock_acquire_opts once = {.wait_ms = -1};
  uv_loop_t loop;
  redlock_client_t *ch, *cc;
  redlock_lock_t *h, *c;
  tu_op op;
  char buf[4096] = "";
  char reply[64];
  int fd, failed_msgs, held_msgs;
  uint64_t end;
  long sets, releases;

  ASSERT_EQ(uv_loop_init(&loop), 0);
  ch = client(&loop, 0, 0);
  cc = client(&loop, 0, 0);
  ASSERT_EQ(redlock_lock_new(ch, "wf-g", 4, &h), 0);
  ASSERT_EQ(redlock_lock_new(cc, "wf-g", 4, &c), 0);
  fd = harness_send_nowait(&srv[2], 2, sub_argv);
  end = harness_now_ms() + 2000;
  while (strstr(buf, ":1\r\n") == NULL) {
    if (harness_now_ms() > end)
      TEST_FAIL("g) SUBSCRIBE was not confirmed");
    read_for(fd, buf, sizeof(buf), 20);
  }
  buf[0] = '\0';
  ASSERT_EQ(tu_acquire(&loop, h, 10000, &once, &op), 0);
  ASSERT_EQ(harness_cmdf(&srv[2], reply, sizeof(reply), "DEL wf-g"), 0);
  /* C's attempt: no on masters 0 and 1, yes on master 2 (its SET lands
   * there even if the attempt is decided before that answer), given up:
   * wait until the release ran there and the key is gone. */
  sets = cmd_calls(2, "set");
  releases = cmd_calls(2, "evalsha");
  ASSERT_EQ(tu_acquire(&loop, c, 10000, &once, &op), REDLOCK_ETAKEN);
  end = harness_now_ms() + 2000;
  for (;;) {
    tu_run_for(&loop, 2);
    ASSERT_EQ(harness_cmdf(&srv[2], reply, sizeof(reply), "EXISTS wf-g"),
              0);
    if (strcmp(reply, "0") == 0 && cmd_calls(2, "set") == sets + 1 &&
        cmd_calls(2, "evalsha") == releases + 1)
      break;
    if (harness_now_ms() > end)
      TEST_FAIL("g) the failed attempt's yes was never released");
  }
  read_for(fd, buf, sizeof(buf), 100);
  failed_msgs = count_messages(buf);
  /* Control: a lock that was held, released, is announced. */
  ASSERT_EQ(tu_release(&loop, h, &op), 0);
  ASSERT_EQ(tu_acquire(&loop, c, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, c, &op), 0);
  buf[0] = '\0';
  read_for(fd, buf, sizeof(buf), slow ? 2000 : 1000);
  held_msgs = count_messages(buf);
  harness_close_fd(fd);
  fprintf(stderr, "g) release messages on master 2: %d for a failed "
          "attempt's yes, %d for a held lock's release\n", failed_msgs,
          held_msgs);
  ASSERT_EQ(redlock_lock_free(h), 0);
  ASSERT_EQ(redlock_lock_free(c), 0);
  ASSERT_EQ(redlock_client_close(ch, NULL, NULL), 0);
  tu_close(&loop, cc);
  if (held_msgs != 1)
    TEST_FAIL("g) the release of a held lock sent %d messages on master 2, "
              "wanted 1", held_msgs);
  if (failed_msgs != 0) {
    fprintf(stderr, "%s:%d: g) FAIL: giving up a failed attempt's yes sent "
            "%d release message(s): every waiter wakes at once\n",
            __FILE__, __LINE__, failed_msgs);
    return 1;
  }
  return 0;
}

int main(void) {
  int failed = 0;
  const char *s = getenv("REDLOCK_TEST_SLOW");
  slow = s != NULL && *s != '\0' && strcmp(s, "0") != 0;
  wake_ms = slow ? 1000 : 500;
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);

  failed += case_multi();
  failed += case_killed();
  failed += case_unreachable();
  failed += case_down_first();
  failed += case_needless_password();
  failed += case_in_flight();
  failed += case_quiet_giveup();
  if (failed > 0)
    TEST_FAIL("%d of 7 wake-up cases failed (see above)", failed);
  harness_stop_all();
  return 0;
}
