/* A token that the lock currently holds must never be released as
 * "abandoned". N = 3, master 2 hangs (SIGSTOP) during an acquire that
 * succeeds on masters 0 and 1. Its SET times out (short command timeout)
 * and its connection is torn down; the client reconnects at once, and the
 * connect to the stopped server succeeds through the kernel's backlog, so
 * the node sits in the handshake (long connect timeout). An extend issued
 * now queues behind that handshake. When master 2 resumes, the stale SET
 * (still in the old connection's buffer) lands first: our key, our token;
 * the queued extend then renews it there (a yes). Releasing the timed-out
 * SET's token afterwards would delete our own key on master 2 while the
 * lock is held: the correct order after a (re)connect is handshake, then
 * abandoned releases, then queued requests, and a token the lock holds is
 * never released as abandoned.
 *
 * Settled deterministically: after master 2 is up again, an inspect (which
 * waits for every master; replies on a connection come in order) answers
 * after everything queued there before it. Then, with the lock still held,
 * the key must hold our token on all three masters. A MONITOR on master 2
 * prints the order of what it ran, to show why when it does not. */
#include <poll.h>
#include <unistd.h>

#include "tutil.h"

#define N 3

static int64_t cmd_calls(const harness_server *s, const char *cmd) {
  char buf[8192];
  char field[64];
  const char *p;
  if (harness_cmdf(s, buf, sizeof(buf), "INFO commandstats") != 0)
    return -1;
  snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
  p = strstr(buf, field);
  return p ? strtoll(p + strlen(field), NULL, 10) : 0;
}

/* Appends what arrives on fd to buf (NUL-terminated) until nothing came
 * for quiet_ms, or total_ms passed. */
static void drain_fd(int fd, char *buf, size_t cap, size_t *len,
                     int quiet_ms, uint64_t total_ms) {
  uint64_t end = harness_now_ms() + total_ms;
  while (harness_now_ms() < end && *len + 1 < cap) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t r;
    if (poll(&p, 1, quiet_ms) <= 0)
      break;
    r = read(fd, buf + *len, cap - 1 - *len);
    if (r <= 0)
      break;
    *len += (size_t)r;
  }
  buf[*len] = '\0';
}

int main(void) {
  harness_server srv[N];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  int slow = tu_slow();
  redlock_client_config cfg = {.command_timeout_ms = slow ? 300 : 100,
                               .connect_timeout_ms = slow ? 15000 : 5000,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_acquire_opts once = {.wait_ms = -1};
  const char *monitor_argv[] = {"MONITOR"};
  const char *key = "abandoned-held";
  static char mon[65536];
  size_t mon_len = 0;
  char tok[80];
  char val[128];
  char ok[64];
  tu_op op;
  uint64_t end;
  int holding;
  int mfd;
  int i;

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);

  ASSERT_EQ(harness_cmdf(&srv[2], ok, sizeof(ok), "CONFIG RESETSTAT"), 0);
  mfd = harness_send_nowait(&srv[2], 1, monitor_argv);
  drain_fd(mfd, mon, sizeof(mon), &mon_len, 1000, 2000);
  ASSERT(strncmp(mon, "+OK", 3) == 0);   /* MONITOR is active */
  mon_len = 0;

  /* Master 2 hangs: the acquire is decided by 0 and 1; the SET sent to 2
   * stays there, unanswered. */
  harness_pause(&srv[2]);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(op.yes, 2);
  ASSERT_EQ(op.nodes[2].vote, REDLOCK_VOTE_NONE);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));

  /* Its deadline passes: the connection to 2 is torn down (n_up 2), the
   * SET counts as abandoned (it may land later). */
  tu_wait_up(&loop, c, 2, 10000);

  /* Extend until master 2's part of it is queued (not refused at once as
   * DOWN): the node is reconnecting and waits in the handshake. */
  end = harness_now_ms() + 5000;
  for (;;) {
    ASSERT_EQ(tu_extend(&loop, l, 10000, &op), 0);
    ASSERT_EQ(op.yes, 2);
    if (op.nodes[2].vote == REDLOCK_VOTE_NONE)
      break;
    /* Refused at once (the node is DOWN, between connections): again. */
    ASSERT_EQ(op.nodes[2].vote, REDLOCK_VOTE_ERR);
    if (harness_now_ms() > end)
      TEST_FAIL("master 2 never started reconnecting");
    tu_run_for(&loop, 5);
  }
  ASSERT_EQ(redlock_client_n_up(c), 2);

  /* Master 2 resumes: the stale SET lands, the handshake completes, the
   * queued extend runs. */
  harness_resume(&srv[2]);
  tu_wait_up(&loop, c, N, 10000);

  /* Settle: inspect answers after everything queued on master 2. */
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_inspect(l, tu_cb, &op), 0);
  ASSERT_EQ(harness_run_until(&loop, &op.done, 10000), 0);
  ASSERT_EQ(op.calls, 1);
  ASSERT_EQ(op.status, 0);

  /* The scenario happened: master 2 ran the stale SET of the acquire
   * (MONITOR shows it; the library's other SETs, e.g. of its ttl record,
   * run inside scripts), and the lock is still held. */
  drain_fd(mfd, mon, sizeof(mon), &mon_len, 100, 2000);
  ASSERT_GE(cmd_calls(&srv[2], "set"), 1);
  if (strstr(mon, "\"SET\" \"abandoned-held\"") == NULL)
    TEST_FAIL("master 2 never ran the acquire's SET:\n%s", mon);
  ASSERT(redlock_lock_is_held(l));

  holding = tu_count_holding(srv, N, key, tok);
  if (holding != N) {
    fprintf(stderr, "our token %s\n", tok);
    for (i = 0; i < N; i++) {
      int r = harness_get(&srv[i], key, val, sizeof(val));
      fprintf(stderr, "master %d: %s, pttl %" PRId64 "\n", i,
              r == 1 ? val : "(missing)", harness_pttl(&srv[i], key));
    }
    fprintf(stderr, "what master 2 ran (MONITOR):\n%s\n", mon);
  }
  ASSERT_EQ(holding, N);

  harness_close_fd(mfd);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  harness_stop_all();
  return 0;
}
