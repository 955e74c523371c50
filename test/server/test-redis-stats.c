/* Statistics, their Prometheus exposition and the event hook (issue 12,
 * item 5): the counters match what the test did.
 *
 *  - one acquisition, one ETAKEN attempt, one extend, one release: the
 *    lock counters say exactly that; every command was answered; each
 *    master's histogram holds as many answers as it has replies;
 *  - one master asleep (DEBUG SLEEP) past the command timeout: exactly one
 *    timeout there, and one reconnect (two handshakes) once it is back;
 *  - a guard window on fresh masters: the refused yes votes are counted;
 *  - an auto-extended lock whose keys vanish: lost 1, failed extension;
 *  - the event hook sees every operation once, the auto-extension's too;
 *  - the Prometheus text parses (a small checker: names, labels, values,
 *    HELP/TYPE before samples, cumulative buckets ending at the count). */
#include <ctype.h>
#include <poll.h>

#include "tutil.h"

#define N 3

static harness_server srv[N];

typedef struct {
  int n[6];           /* per redlock_event_kind */
  int statuses_ok;    /* events whose result status matched */
} events;

static void on_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg) {
  events *e = arg;
  (void)c;
  ASSERT_GE(ev->kind, REDLOCK_EV_ACQUIRE);
  ASSERT_LE(ev->kind, REDLOCK_EV_INSPECT);
  e->n[ev->kind]++;
  ASSERT_NOT_NULL(ev->result);
  ASSERT_EQ(ev->result->n_nodes, N);
  e->statuses_ok += ev->status == ev->result->status;
}

/* ---- a Prometheus text checker ------------------------------------------ */

static int is_name_char(int c, int first) {
  return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

/* Checks the exposition; returns the number of samples. Fails the test on
 * a malformed line. */
static int check_prometheus(const char *text) {
  char family[128] = "";
  char type[32] = "";
  int samples = 0;
  double bucket_prev = -1, count_seen = -1, inf_seen = -1;
  const char *line = text;
  while (*line != '\0') {
    const char *end = strchr(line, '\n');
    char buf[1024];
    size_t len;
    ASSERT_NOT_NULL(end);   /* every line ends with \n */
    len = (size_t)(end - line);
    ASSERT_LT(len, sizeof(buf));
    memcpy(buf, line, len);
    buf[len] = '\0';
    line = end + 1;
    if (strncmp(buf, "# HELP ", 7) == 0) {
      sscanf(buf + 7, "%127s", family);
      continue;
    }
    if (strncmp(buf, "# TYPE ", 7) == 0) {
      char name[128];
      ASSERT_EQ(sscanf(buf + 7, "%127s %31s", name, type), 2);
      ASSERT_STR_EQ(name, family);
      ASSERT(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
             strcmp(type, "histogram") == 0);
      bucket_prev = -1;
      continue;
    }
    {
      const char *p = buf;
      char name[128];
      size_t k = 0;
      double v;
      char *after;
      ASSERT(is_name_char((unsigned char)*p, 1));
      while (is_name_char((unsigned char)*p, 0) && k < sizeof(name) - 1)
        name[k++] = *p++;
      name[k] = '\0';
      /* The sample belongs to the family announced last. */
      if (strcmp(type, "histogram") == 0)
        ASSERT(strncmp(name, family, strlen(family)) == 0);
      else
        ASSERT_STR_EQ(name, family);
      if (*p == '{') {
        p++;
        while (*p != '}') {
          ASSERT(is_name_char((unsigned char)*p, 1));
          while (is_name_char((unsigned char)*p, 0))
            p++;
          ASSERT(*p == '=');
          p++;
          ASSERT(*p == '"');
          p++;
          while (*p != '"') {
            ASSERT(*p != '\0');
            if (*p == '\\')
              p++;
            p++;
          }
          p++;
          if (*p == ',')
            p++;
        }
        p++;
      }
      ASSERT(*p == ' ');
      v = strtod(p + 1, &after);
      ASSERT(after != p + 1 && *after == '\0');
      ASSERT_GE(v, 0);
      if (strstr(name, "_bucket") != NULL) {
        ASSERT_GE(v, bucket_prev);   /* cumulative */
        bucket_prev = v;
        if (strstr(buf, "le=\"+Inf\"") != NULL)
          inf_seen = v;
      } else if (strstr(name, "_count") != NULL) {
        count_seen = v;
        ASSERT_EQ((int64_t)count_seen, (int64_t)inf_seen);
        bucket_prev = -1;
      }
      samples++;
    }
  }
  return samples;
}

static uint64_t hist_total(const uint64_t *h) {
  uint64_t t = 0;
  int b;
  for (b = 0; b < REDLOCK_HIST_BUCKETS; b++)
    t += h[b];
  return t;
}

int main(void) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  redlock_client_config cfg = {.command_timeout_ms = 200,
                               .reconnect_min_ms = 10,
                               .reconnect_max_ms = 50};
  redlock_stats st;
  events ev;
  tu_op op;
  char buf[64];
  char *text;
  int len, i;

  memset(srv, 0, sizeof(srv));
  memset(&ev, 0, sizeof(ev));
  harness_start(srv, N);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, &cfg, N);
  ASSERT_EQ(redlock_client_set_event_hook(c, on_event, &ev), 0);
  ASSERT_EQ(redlock_lock_new(c, "st", 2, &l), 0);

  /* Acquire, extend, release; one ETAKEN attempt. */
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(tu_extend(&loop, l, 10000, &op), 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "st", "other", 60000), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ETAKEN);
  tu_run_for(&loop, 50);   /* late answers of the refused attempt */
  ASSERT_EQ(redlock_client_stats(c, &st), 0);
  ASSERT_EQ(st.attempts, 2);
  ASSERT_EQ(st.grants, 1);
  ASSERT_EQ(st.taken, 1);
  ASSERT_EQ(st.noquorum, 0);
  ASSERT_EQ(st.extensions, 1);
  ASSERT_EQ(st.releases, 1);
  ASSERT_EQ(st.lost, 0);
  ASSERT_EQ(st.quorum, 2);
  ASSERT_EQ(st.n_masters, N);
  for (i = 0; i < N; i++) {
    const redlock_master_stats *m = &st.masters[i];
    ASSERT_EQ(m->up, 1);
    ASSERT_GE(m->commands, 4);   /* SET, extend, release, SET (+ cleanup) */
    ASSERT_EQ(m->replies, m->commands);
    ASSERT_EQ(hist_total(m->latency_hist), m->replies);
    ASSERT_GT(m->latency_sum_us, 0);
    ASSERT_EQ(m->timeouts, 0);
    ASSERT_EQ(m->connects, 1);
    ASSERT_STR_EQ(m->server, harness_addr(&srv[i]));
  }
  ASSERT_EQ(ev.n[REDLOCK_EV_ACQUIRE], 2);
  ASSERT_EQ(ev.n[REDLOCK_EV_EXTEND], 1);
  ASSERT_EQ(ev.n[REDLOCK_EV_RELEASE], 1);
  fprintf(stderr, "counters: %llu attempts, %llu grants, %llu taken; "
          "master 1: %llu commands, p50 %llu us, p99 %llu us\n",
          (unsigned long long)st.attempts, (unsigned long long)st.grants,
          (unsigned long long)st.taken,
          (unsigned long long)st.masters[0].commands,
          (unsigned long long)redlock_hist_quantile_us(
              st.masters[0].latency_hist, 0.5),
          (unsigned long long)redlock_hist_quantile_us(
              st.masters[0].latency_hist, 0.99));

  /* One timeout and one reconnect on master 1. */
  {
    const char *sleep_argv[] = {"DEBUG", "SLEEP", "0.5"};
    int fd = harness_send_nowait(&srv[0], 3, sleep_argv);
    redlock_lock_t *l2;
    uint64_t end;
    tu_run_for(&loop, 20);
    ASSERT_EQ(redlock_lock_new(c, "st2", 3, &l2), 0);
    ASSERT_EQ(tu_acquire(&loop, l2, 10000, &once, &op), 0);   /* 2 of 3 */
    end = harness_now_ms() + 5000;
    for (;;) {   /* the deadline passes, then the master comes back */
      ASSERT_EQ(redlock_client_stats(c, &st), 0);
      if (st.masters[0].timeouts == 1 && st.masters[0].connects == 2)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("master 1: %llu timeouts, %llu connects after its sleep",
                  (unsigned long long)st.masters[0].timeouts,
                  (unsigned long long)st.masters[0].connects);
      tu_run_for(&loop, 10);
    }
    harness_close_fd(fd);
    ASSERT_EQ(st.masters[1].timeouts, 0);
    ASSERT_EQ(tu_release(&loop, l2, &op), 0);
    ASSERT_EQ(redlock_lock_free(l2), 0);
  }

  /* A lock lost under its auto-extension. */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL st"), 0);
  {
    redlock_acquire_opts ae = {.wait_ms = -1, .auto_extend = 1};
    uint64_t end;
    ASSERT_EQ(tu_acquire(&loop, l, 900, &ae, &op), 0);
    for (i = 0; i < N; i++)
      ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "DEL st"), 0);
    end = harness_now_ms() + 5000;
    while (!redlock_lock_is_lost(l)) {
      if (harness_now_ms() > end)
        TEST_FAIL("the lock whose keys vanished was never declared lost");
      tu_run_for(&loop, 10);
    }
    ASSERT_EQ(redlock_client_stats(c, &st), 0);
    ASSERT_EQ(st.lost, 1);
    ASSERT_GE(st.extension_failures, 1);
    ASSERT_GE(ev.n[REDLOCK_EV_AUTO_EXTEND], 1);
  }
  ASSERT_EQ(ev.statuses_ok, ev.n[1] + ev.n[2] + ev.n[3] + ev.n[4] + ev.n[5]);

  /* The exposition. */
  len = redlock_stats_prometheus(&st, NULL, 0);
  ASSERT_GT(len, 0);
  text = malloc((size_t)len + 1);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(redlock_stats_prometheus(&st, text, (size_t)len + 1), len);
  ASSERT_EQ((int)strlen(text), len);
  i = check_prometheus(text);
  fprintf(stderr, "prometheus: %d bytes, %d samples parse\n", len, i);
  snprintf(buf, sizeof(buf), "master=\"%s\",kind=\"timeout\"} 1\n",
           harness_addr(&srv[0]));
  ASSERT_NOT_NULL(strstr(text, buf));
  ASSERT_NOT_NULL(strstr(text, "redlock_lock_lost_total 1\n"));
  ASSERT_NOT_NULL(strstr(text, "redlock_lock_grants_total "));
  {
    char small[32];
    ASSERT_EQ(redlock_stats_prometheus(&st, small, sizeof(small)), len);
    ASSERT_EQ(strlen(small), sizeof(small) - 1);
  }
  free(text);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* Guard refusals: a fixed window on brand-new masters. */
  {
    redlock_client_config g = {.restart_guard_ms = 60000};
    ASSERT_EQ(uv_loop_init(&loop), 0);
    c = tu_client(&loop, srv, N, &g, N);
    ASSERT_EQ(redlock_lock_new(c, "st-guard", 8, &l), 0);
    ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), REDLOCK_ENOQUORUM);
    ASSERT_EQ(redlock_client_stats(c, &st), 0);
    {
      uint64_t refused = 0;
      for (i = 0; i < N; i++)
        refused += st.masters[i].guard_refusals;
      ASSERT_GE(refused, 2);
      ASSERT_EQ(st.noquorum, 1);
    }
    ASSERT_EQ(redlock_lock_free(l), 0);
    tu_close(&loop, c);
  }
  ASSERT_EQ(redlock_client_stats(NULL, &st), REDLOCK_EINVAL);
  /* Histogram bounds. */
  ASSERT_EQ(redlock_hist_upper_us(0), 1);
  ASSERT_EQ(redlock_hist_upper_us(3), 4);
  ASSERT_EQ(redlock_hist_upper_us(4), 5);
  ASSERT_EQ(redlock_hist_upper_us(7), 8);
  ASSERT_EQ(redlock_hist_upper_us(8), 10);
  ASSERT_EQ(redlock_hist_upper_us(REDLOCK_HIST_BUCKETS - 1), UINT64_MAX);
  harness_stop_all();
  return 0;
}
