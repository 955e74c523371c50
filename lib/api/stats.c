/* stats.c: statistics, their Prometheus exposition, the event hook.
 *
 * Owns: the histogram's bucket bounds and quantiles, copying the counters
 * out of the client (node.c counts per master, lock.c / acquire.c /
 * watchdog.c per client; they only increment), and the text format.
 * Costs on the hot path: a few increments per command and reply and one
 * bucket index (count leading zeros) per reply. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client.h"

uint64_t redlock_hist_upper_us(unsigned b) {
  unsigned e, sub;
  if (b >= REDLOCK_HIST_BUCKETS - 1)
    return UINT64_MAX;
  if (b < 4)
    return (uint64_t)b + 1;
  e = (b - 4) / 4 + 2;
  sub = (b - 4) % 4;
  return (uint64_t)(5 + sub) << (e - 2);
}

uint64_t redlock_hist_quantile_us(const uint64_t *hist, double q) {
  uint64_t total = 0, want, seen = 0;
  unsigned b;
  if (hist == NULL)
    return 0;
  for (b = 0; b < REDLOCK_HIST_BUCKETS; b++)
    total += hist[b];
  if (total == 0)
    return 0;
  if (q < 0)
    q = 0;
  if (q > 1)
    q = 1;
  want = (uint64_t)(q * (double)total + 0.5);
  if (want == 0)
    want = 1;
  for (b = 0; b < REDLOCK_HIST_BUCKETS; b++) {
    seen += hist[b];
    if (seen >= want)
      return redlock_hist_upper_us(b);
  }
  return UINT64_MAX;
}

int redlock_client_stats(const redlock_client_t *c, redlock_stats *out) {
  unsigned i;
  if (c == NULL || out == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_stats: client or out is NULL");
  memset(out, 0, sizeof(*out));
  out->attempts = c->lst.attempts;
  out->grants = c->lst.grants;
  out->taken = c->lst.taken;
  out->noquorum = c->lst.noquorum;
  out->expired = c->lst.expired;
  out->acquire_timeouts = c->lst.acquire_timeouts;
  out->canceled = c->lst.canceled;
  out->extensions = c->lst.extensions;
  out->extension_failures = c->lst.extension_failures;
  out->lost = c->lst.lost;
  out->releases = c->lst.releases;
  out->quorum = c->quorum;
  out->n_masters = c->n;
  for (i = 0; i < c->n; i++) {
    redlock_master_stats *m = &out->masters[i];
    m->server = c->displays[i];
    {
      const redlock__master *ma = &c->masters[i];
      uint64_t moved, asked;
      ma->ops->redirections(ma, &moved, &asked);
      m->moved = moved;
      m->asked = asked;
      m->primaries = ma->ops->used(ma);
    }
  }
  /* Every node that was ever used adds to its master's counters; a
   * master is up when one of its nodes is (a cluster: the one that
   * serves the slot may be another). */
  for (i = 0; i < c->n_nodes; i++) {
    const redlock__node *n = &c->nodes[i];
    redlock_master_stats *m = &out->masters[n->master];
    unsigned b;
    if (n->uri.host == NULL && n->uri.path == NULL)
      continue;   /* a cluster's node never used */
    m->up |= n->state == REDLOCK__NODE_UP;
    m->commands += n->st.commands;
    m->replies += n->st.replies;
    m->server_errors += n->st.server_errors;
    m->timeouts += n->st.timeouts;
    m->conn_failures += n->st.conn_failures;
    m->connects += n->connects;
    m->guard_refusals += n->st.guard_refusals;
    m->latency_sum_us += n->st.latency_sum_us;
    for (b = 0; b < REDLOCK_HIST_BUCKETS; b++)
      m->latency_hist[b] += n->st.hist[b];
    if (out->n_nodes < REDLOCK_MAX_NODES &&
        (!c->masters[n->master].ops->by_slot || n->connects > 0 ||
         !n->lazy)) {
      redlock_node_stats *ns = &out->nodes[out->n_nodes++];
      ns->node = n->uri.display;
      ns->master = n->master;
      ns->up = n->state == REDLOCK__NODE_UP;
      ns->commands = n->st.commands;
      ns->replies = n->st.replies;
      ns->server_errors = n->st.server_errors;
      ns->timeouts = n->st.timeouts;
      ns->conn_failures = n->st.conn_failures;
      ns->connects = n->connects;
      ns->guard_refusals = n->st.guard_refusals;
      ns->latency_sum_us = n->st.latency_sum_us;
    }
  }
  return 0;
}

int redlock_client_set_event_hook(redlock_client_t *c, redlock_event_cb cb,
                                  void *arg) {
  if (c == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_set_event_hook: client is NULL");
  c->event_cb = cb;
  c->event_arg = arg;
  return 0;
}

/* ---- Prometheus text format ---------------------------------------------- */

typedef struct out {
  char *buf;
  size_t len;
  size_t used;
} out;

static void put(out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(out *o, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(o->used < o->len ? o->buf + o->used : NULL,
                o->used < o->len ? o->len - o->used : 0, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->used += (size_t)n;
}

/* A label value: backslash, double quote and newline escaped. */
static void label(out *o, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      put(o, "\\%c", *v);
    else if (*v == '\n')
      put(o, "\\n");
    else
      put(o, "%c", *v);
  }
}

static void head(out *o, const char *name, const char *type,
                 const char *help) {
  put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void per_master(out *o, const redlock_stats *s, const char *name,
                       const char *type, const char *help, size_t offset) {
  unsigned i;
  head(o, name, type, help);
  for (i = 0; i < s->n_masters; i++) {
    const char *m = (const char *)&s->masters[i];
    uint64_t v;
    if (offset == (size_t)-1)
      v = (uint64_t)s->masters[i].up;
    else
      memcpy(&v, m + offset, sizeof(v));
    put(o, "%s{master=\"", name);
    label(o, s->masters[i].server);
    put(o, "\"} %llu\n", (unsigned long long)v);
  }
}

int redlock_stats_prometheus(const redlock_stats *s, char *buf, size_t len) {
  out o;
  unsigned i, b;
  o.buf = buf;
  o.len = len;
  o.used = 0;
  if (buf != NULL && len > 0)
    buf[0] = '\0';
  if (s == NULL)
    return 0;
  head(&o, "redlock_lock_attempts_total", "counter",
       "Acquisition attempts (quorum rounds).");
  put(&o, "redlock_lock_attempts_total %llu\n",
      (unsigned long long)s->attempts);
  head(&o, "redlock_lock_grants_total", "counter", "Locks acquired.");
  put(&o, "redlock_lock_grants_total %llu\n", (unsigned long long)s->grants);
  head(&o, "redlock_lock_failed_attempts_total", "counter",
       "Acquisition attempts that failed, by reason.");
  put(&o, "redlock_lock_failed_attempts_total{reason=\"taken\"} %llu\n",
      (unsigned long long)s->taken);
  put(&o, "redlock_lock_failed_attempts_total{reason=\"noquorum\"} %llu\n",
      (unsigned long long)s->noquorum);
  put(&o, "redlock_lock_failed_attempts_total{reason=\"expired\"} %llu\n",
      (unsigned long long)s->expired);
  head(&o, "redlock_lock_acquire_timeouts_total", "counter",
       "Acquisitions that ended at their wait deadline.");
  put(&o, "redlock_lock_acquire_timeouts_total %llu\n",
      (unsigned long long)s->acquire_timeouts);
  head(&o, "redlock_lock_canceled_total", "counter",
       "Operations ended by cancel or client close.");
  put(&o, "redlock_lock_canceled_total %llu\n",
      (unsigned long long)s->canceled);
  head(&o, "redlock_lock_extensions_total", "counter",
       "Extensions (automatic or not), by result.");
  put(&o, "redlock_lock_extensions_total{result=\"ok\"} %llu\n",
      (unsigned long long)s->extensions);
  put(&o, "redlock_lock_extensions_total{result=\"failed\"} %llu\n",
      (unsigned long long)s->extension_failures);
  head(&o, "redlock_lock_lost_total", "counter", "Locks lost while held.");
  put(&o, "redlock_lock_lost_total %llu\n", (unsigned long long)s->lost);
  head(&o, "redlock_lock_releases_total", "counter", "Releases completed.");
  put(&o, "redlock_lock_releases_total %llu\n",
      (unsigned long long)s->releases);
  head(&o, "redlock_quorum", "gauge", "Votes needed.");
  put(&o, "redlock_quorum %u\n", s->quorum);

  per_master(&o, s, "redlock_master_up", "gauge",
             "1 when the master is connected and ready.", (size_t)-1);
#define OFF(f) offsetof(redlock_master_stats, f)
  per_master(&o, s, "redlock_master_commands_total", "counter",
             "Lock commands written.", OFF(commands));
  per_master(&o, s, "redlock_master_replies_total", "counter",
             "Answers to lock commands.", OFF(replies));
  head(&o, "redlock_master_errors_total", "counter",
       "Failures, by kind: error answers, deadline teardowns, lost or "
       "refused connections.");
  for (i = 0; i < s->n_masters; i++) {
    static const char *const kinds[] = {"server", "timeout", "connection"};
    const redlock_master_stats *m = &s->masters[i];
    const uint64_t v[] = {m->server_errors, m->timeouts, m->conn_failures};
    unsigned k;
    for (k = 0; k < 3; k++) {
      put(&o, "redlock_master_errors_total{master=\"");
      label(&o, m->server);
      put(&o, "\",kind=\"%s\"} %llu\n", kinds[k], (unsigned long long)v[k]);
    }
  }
  per_master(&o, s, "redlock_master_connects_total", "counter",
             "Handshakes completed.", OFF(connects));
  per_master(&o, s, "redlock_master_guard_refusals_total", "counter",
             "Yes votes the restart guard did not count.",
             OFF(guard_refusals));
#undef OFF
  if (s->n_nodes > s->n_masters) {
    /* A cluster master: each primary's share. */
    head(&o, "redlock_node_commands_total", "counter",
         "Lock commands written to each node (a cluster's primaries).");
    for (i = 0; i < s->n_nodes; i++) {
      put(&o, "redlock_node_commands_total{master=\"");
      label(&o, s->masters[s->nodes[i].master].server);
      put(&o, "\",node=\"");
      label(&o, s->nodes[i].node);
      put(&o, "\"} %llu\n", (unsigned long long)s->nodes[i].commands);
    }
    head(&o, "redlock_node_up", "gauge",
         "1 when the node is connected and ready.");
    for (i = 0; i < s->n_nodes; i++) {
      put(&o, "redlock_node_up{master=\"");
      label(&o, s->masters[s->nodes[i].master].server);
      put(&o, "\",node=\"");
      label(&o, s->nodes[i].node);
      put(&o, "\"} %d\n", s->nodes[i].up);
    }
  }
  head(&o, "redlock_master_latency_seconds", "histogram",
       "Time from writing a lock command to its answer.");
  for (i = 0; i < s->n_masters; i++) {
    const redlock_master_stats *m = &s->masters[i];
    uint64_t cum = 0;
    for (b = 0; b < REDLOCK_HIST_BUCKETS; b++) {
      cum += m->latency_hist[b];
      /* Every power of two (each fourth bucket) and +Inf: compact. */
      if (b == REDLOCK_HIST_BUCKETS - 1 || (b >= 3 && (b - 3) % 4 == 0)) {
        put(&o, "redlock_master_latency_seconds_bucket{master=\"");
        label(&o, m->server);
        if (b == REDLOCK_HIST_BUCKETS - 1)
          put(&o, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        else
          put(&o, "\",le=\"%.6f\"} %llu\n",
              (double)redlock_hist_upper_us(b) / 1e6,
              (unsigned long long)cum);
      }
    }
    put(&o, "redlock_master_latency_seconds_sum{master=\"");
    label(&o, m->server);
    put(&o, "\"} %.6f\n", (double)m->latency_sum_us / 1e6);
    put(&o, "redlock_master_latency_seconds_count{master=\"");
    label(&o, m->server);
    put(&o, "\"} %llu\n", (unsigned long long)cum);
  }
  return (int)o.used;
}
