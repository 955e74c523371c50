/* redlock_lock_inspect() must not cancel (or hold back) an in-flight
 * auto-extension. An auto-extended lock (ttl 500 ms, N = 3) is inspected
 * back to back, each inspect started from the previous one's callback, for
 * 4x the ttl. The lock must stay held all the time, on_lost must never
 * fire, every inspect must see our token on a quorum of masters, and at
 * the end the key still holds our token on a quorum.
 * Two runs, each on a fresh client:
 *  1. the default quorum (2 of 3);
 *  2. quorum 3 of 3: an extension round is always sent while an inspect
 *     is in flight (the next one starts from the callback) and needs every
 *     master's answer, each queued behind that inspect's on the same
 *     connection; so it is typically still in flight when the inspect's
 *     callback starts the next inspect: an inspect that cancels the
 *     extension round in flight hits it at every extension. */
#include "tutil.h"

#define N 3

typedef struct {
  int calls;
  int reason;
} lost_rec;

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  lost_rec *r = arg;
  (void)l;
  r->calls++;
  r->reason = reason;
}

typedef struct {
  redlock_lock_t *l;
  const char *token;
  uint64_t t0;
  uint64_t end_ms;
  unsigned quorum;
  int n;                   /* inspects completed */
  int bad_status;          /* first status != 0 */
  int64_t not_held_ms;     /* first time not held, from t0; -1 never */
  int64_t not_quorum_ms;   /* first time < quorum held our token; -1 */
  int start_rc;
  volatile int done;
} chain;

static void on_inspect(redlock_lock_t *l, int status,
                       const redlock_result *res, void *arg) {
  chain *ch = arg;
  uint64_t now = harness_now_ms();
  unsigned ours = 0;
  unsigned i;
  ch->n++;
  if (status != 0 && ch->bad_status == 0)
    ch->bad_status = status;
  for (i = 0; i < res->n_nodes; i++)
    if (res->nodes[i].vote == REDLOCK_VOTE_YES &&
        strcmp(res->nodes[i].holder, ch->token) == 0)
      ours++;
  if (ours < ch->quorum && ch->not_quorum_ms < 0)
    ch->not_quorum_ms = (int64_t)(now - ch->t0);
  if (!redlock_lock_is_held(l) && ch->not_held_ms < 0)
    ch->not_held_ms = (int64_t)(now - ch->t0);
  if (now >= ch->end_ms) {
    ch->done = 1;
    return;
  }
  ch->start_rc = redlock_lock_inspect(l, on_inspect, ch);
  if (ch->start_rc != 0)
    ch->done = 1;
}

static void run(harness_server *srv, unsigned quorum) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  int64_t ttl = tu_slow() ? 1000 : 500;
  redlock_client_config cfg;
  redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1,
                             .on_lost = on_lost};
  char key[64];
  lost_rec lr;
  chain ch;
  tu_op op;
  char tok[80];

  memset(&cfg, 0, sizeof(cfg));
  cfg.quorum = quorum;
  snprintf(key, sizeof(key), "inspect-autoextend-q%u", quorum);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_lock_new(c, key, strlen(key), &l), 0);
  memset(&lr, 0, sizeof(lr));
  ae.lost_arg = &lr;
  ASSERT_EQ(tu_acquire(&loop, l, ttl, &ae, &op), 0);
  snprintf(tok, sizeof(tok), "%s", redlock_lock_token(l));

  memset(&ch, 0, sizeof(ch));
  ch.l = l;
  ch.token = tok;
  ch.quorum = redlock_client_quorum(c);
  ASSERT_EQ(ch.quorum, quorum);
  ch.not_held_ms = -1;
  ch.not_quorum_ms = -1;
  ch.t0 = harness_now_ms();
  ch.end_ms = ch.t0 + 4 * (uint64_t)ttl;
  ASSERT_EQ(redlock_lock_inspect(l, on_inspect, &ch), 0);
  ASSERT_EQ(harness_run_until(&loop, &ch.done, 4 * (uint64_t)ttl + 10000),
            0);
  fprintf(stderr, "quorum %u: %d inspects over %" PRIu64 " ms (ttl %"
          PRId64 "): not held from %" PRId64 " ms, token on < quorum from %"
          PRId64 " ms, on_lost calls %d (%s)\n", quorum, ch.n,
          harness_now_ms() - ch.t0, ttl, ch.not_held_ms, ch.not_quorum_ms,
          lr.calls, lr.calls ? redlock_err_name(lr.reason) : "-");

  ASSERT_EQ(ch.start_rc, 0);
  ASSERT_EQ(ch.bad_status, 0);
  ASSERT_GT(ch.n, 10);
  ASSERT_EQ(ch.not_held_ms, -1);     /* held all the time */
  ASSERT_EQ(lr.calls, 0);            /* never lost */
  ASSERT_EQ(ch.not_quorum_ms, -1);   /* the masters kept our key */
  ASSERT(redlock_lock_is_held(l));
  ASSERT_GE(tu_count_holding(srv, N, key, tok), (int)quorum);

  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(lr.calls, 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
}

int main(void) {
  harness_server srv[N];

  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  run(srv, N / 2 + 1);
  run(srv, N);
  harness_stop_all();
  return 0;
}
