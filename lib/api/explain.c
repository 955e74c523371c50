/* explain.c: redlock_result_explain, why an operation ended as it did.
 *
 * Owns: the wording of results for people (the CLI, logs, docs/API.md's
 * example). It reads only the public result: the status, the quorum and
 * each master's vote, error and the guard's cause and timing. Masters
 * are grouped by reason (clock, restart guard, unreachable, answered with
 * an error, held by another owner, no answer before the decision); each
 * group names up to three masters with their own text. The restart
 * guard's are counted by the cause guard.c words (never seen, restarted,
 * a new replication id), then where the window comes from and what an
 * operator can do. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "redlock.h"

#define SHOW_MAX 3   /* masters named per group */

typedef struct out {
  char *buf;
  size_t len;
  size_t used;   /* what the full text needs, as snprintf counts */
} out;

static void put(out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(out *o, const char *fmt, ...) {
  va_list ap;
  int n;
  char *at = o->used < o->len ? o->buf + o->used : NULL;
  size_t room = o->used < o->len ? o->len - o->used : 0;
  va_start(ap, fmt);
  n = vsnprintf(at, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->used += (size_t)n;
}

static int unreachable(int err) {
  return err == REDLOCK_EIO || err == REDLOCK_ETIMEDOUT;
}

static int answered_error(int err) {
  return err == REDLOCK_ESERVER || err == REDLOCK_EPROTO ||
         err == REDLOCK_ENOMEM;
}

/* A cluster's or a sentinel group's result names the node that answered:
 * a primary (shown in brackets after the master). */
static int behind(const redlock_node_result *n) {
  return n->node != NULL && n->server != NULL &&
         strcmp(n->node, n->server) != 0;
}

/* "; K of N masters WHAT (server: text, ...)" for the masters that match. */
static void group(out *o, const redlock_result *r, const char *what,
                  int (*match)(const redlock_node_result *), int details,
                  int *first) {
  unsigned i, k = 0, shown = 0;
  for (i = 0; i < r->n_nodes; i++)
    k += match(&r->nodes[i]) != 0;
  if (k == 0)
    return;
  put(o, "%s%u of %u master%s %s", *first ? "" : "; ", k, r->n_nodes,
      r->n_nodes == 1 ? "" : "s", what);
  *first = 0;
  if (!details)
    return;
  for (i = 0; i < r->n_nodes; i++) {
    const redlock_node_result *n = &r->nodes[i];
    if (!match(n))
      continue;
    if (shown == SHOW_MAX) {
      put(o, ", ...");
      break;
    }
    put(o, "%s%s", shown == 0 ? " (" : ", ", n->server);
    if (behind(n))
      put(o, " [%s]", n->node);
    if (n->errstr != NULL && n->errstr[0] != '\0')
      put(o, ": %s", n->errstr);
    shown++;
  }
  if (shown > 0)
    put(o, ")");
}

static int is_clock(const redlock_node_result *n) {
  return n->guard_cause == REDLOCK_GUARD_CLOCK_STEP ||
         n->guard_cause == REDLOCK_GUARD_CLOCK_SKEW ||
         n->guard_cause == REDLOCK_GUARD_CLOCK_UNKNOWN;
}
static int m_guard_timed(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_ERR && n->error == REDLOCK_ERESTARTED &&
         n->guard_wait_ms >= 0 && !is_clock(n);
}
static int m_guard_other(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_ERR && n->error == REDLOCK_ERESTARTED &&
         n->guard_wait_ms < 0 && !is_clock(n);
}
static int m_guard_clock(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_ERR && n->error == REDLOCK_ERESTARTED &&
         is_clock(n);
}
/* The handshake's AUTH was refused: not a reachability problem (the
 * error text is the handshake's "AUTH: ..." or Redis's own code). */
static int auth_refused(const redlock_node_result *n) {
  const char *e = n->errstr != NULL ? n->errstr : "";
  return n->vote == REDLOCK_VOTE_ERR &&
         (strncmp(e, "AUTH: ", 6) == 0 || strstr(e, "WRONGPASS") != NULL ||
          strstr(e, "NOAUTH") != NULL);
}
static int m_auth(const redlock_node_result *n) {
  return auth_refused(n);
}
static int m_unreachable(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_ERR && unreachable(n->error) &&
         !auth_refused(n);
}
static int m_error(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_ERR && answered_error(n->error) &&
         !auth_refused(n);
}
static int m_other_err(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_ERR && n->error != REDLOCK_ERESTARTED &&
         !unreachable(n->error) && !answered_error(n->error) &&
         !auth_refused(n);
}
static int m_no(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_NO;
}
static int m_none(const redlock_node_result *n) {
  return n->vote == REDLOCK_VOTE_NONE;
}

/* The restart guard's causes, as guard.c words them (the text after
 * "restart guard: " and an optional mark, up to the first comma), and
 * how this summary names them. */
static const struct {
  const char *tag;    /* in the master's errstr */
  const char *says;   /* "K of N masters SAYS" */
} guard_causes[] = {
    {"never seen by any client", "never seen by any client under this "
                                 "prefix (a new prefix or the first use; or "
                                 "a restart lost the record with the keys)"},
    {"restarted (", "restarted (another run_id than the record's)"},
    {"changed replication id", "changed replication id (a replica attached "
                               "for the first time, or a full sync from "
                               "another master: the guard cannot tell them "
                               "apart)"},
    {"first seen by a client", "first seen by a client less than a window "
                               "ago (new to the guard then)"},
    {NULL, "of unknown age"},
};

static int cause_of(const redlock_node_result *n) {
  unsigned c;
  const char *e = n->errstr != NULL ? n->errstr : "";
  for (c = 0; guard_causes[c].tag != NULL; c++)
    if (strstr(e, guard_causes[c].tag) != NULL)
      return (int)c;
  return (int)c;
}

/* The restart guard: how many for each cause, when their votes count
 * again (all of them; and enough of them for a quorum), where the window
 * comes from and what an operator can do. */
static void guard_group(out *o, const redlock_result *r, int *first) {
  int64_t waits[64];
  int64_t window = 0, wait_max = 0;
  unsigned i, k = 0, j, need, primaries = 0, c;
  unsigned per[sizeof(guard_causes) / sizeof(guard_causes[0])];
  int fixed = 0, said = 0;
  memset(per, 0, sizeof(per));
  for (i = 0; i < r->n_nodes; i++) {
    const redlock_node_result *n = &r->nodes[i];
    if (!m_guard_timed(n))
      continue;
    primaries += behind(n);
    per[cause_of(n)]++;
    if (n->errstr != NULL && strstr(n->errstr, ": --restart-guard)") != NULL)
      fixed = 1;
    if (k < sizeof(waits) / sizeof(waits[0]))
      waits[k] = n->guard_wait_ms;
    k++;
    if (n->guard_window_ms > window)
      window = n->guard_window_ms;
    if (n->guard_wait_ms > wait_max)
      wait_max = n->guard_wait_ms;
  }
  if (k == 0)
    return;
  put(o, "%s", *first ? "" : "; ");
  for (c = 0; c < sizeof(per) / sizeof(per[0]); c++) {
    if (per[c] == 0)
      continue;
    put(o, "%s%u of %u master%s %s", said ? ", " : "", per[c], r->n_nodes,
        r->n_nodes == 1 ? "" : "s", guard_causes[c].says);
    said = 1;
  }
  /* A cluster's or a sentinel group's new primary: a failover. */
  put(o, "%s (restart guard): %s votes count again within %.1f s",
      primaries > 0 ? ", or failed over" : "", k == 1 ? "its" : "their",
      (double)wait_max / 1000.0);
  *first = 0;
  /* The quorum needs this many of them (yes votes already count). */
  need = r->quorum > r->yes ? r->quorum - r->yes : 0;
  if (need > 0 && need < k && k <= sizeof(waits) / sizeof(waits[0])) {
    for (i = 1; i < k; i++)   /* insertion sort: k <= 64 */
      for (j = i; j > 0 && waits[j - 1] > waits[j]; j--) {
        int64_t t = waits[j];
        waits[j] = waits[j - 1];
        waits[j - 1] = t;
      }
    put(o, ", enough for a quorum within %.1f s",
        (double)waits[need - 1] / 1000.0);
  }
  /* Where the window comes from, and the way out. */
  if (fixed)
    put(o, "; the window, %.1f s, is --restart-guard's; wait %.1f s",
        (double)window / 1000.0, (double)wait_max / 1000.0);
  else
    put(o, "; the window is the ttl record, raised to %.1f s by some "
        "client (the longest ttl any client asked for); wait %.1f s, or "
        "lower the record (`redlock guard --set-record D`, once no longer "
        "lock is held)", (double)window / 1000.0,
        (double)wait_max / 1000.0);
  put(o, ", or declare the masters durable (--durable, durable=1) if they "
      "run appendonly yes with appendfsync always");
}

/* The clock check, one master at a time and by number as users count
 * them: "master 3's clock stepped 2.1 s forward 0.4 s ago: its votes count
 * again in 0.6 s". */
static void clock_group(out *o, const redlock_result *r, int *first) {
  unsigned i, shown = 0;
  for (i = 0; i < r->n_nodes; i++) {
    const redlock_node_result *n = &r->nodes[i];
    if (!m_guard_clock(n))
      continue;
    if (shown == SHOW_MAX) {
      put(o, "; ...");
      break;
    }
    if (strncmp(n->errstr, "clock", 5) == 0 && behind(n))
      put(o, "%smaster %u's primary %s: %s", *first ? "" : "; ", i + 1,
          n->node, n->errstr);
    else if (strncmp(n->errstr, "clock", 5) == 0)
      put(o, "%smaster %u's %s", *first ? "" : "; ", i + 1, n->errstr);
    else
      put(o, "%smaster %u (%s): %s", *first ? "" : "; ", i + 1, n->server,
          n->errstr);
    *first = 0;
    shown++;
  }
}

int redlock_result_explain(const redlock_result *r, char *buf, size_t len) {
  out o;
  int first = 0;
  o.buf = buf;
  o.len = len;
  o.used = 0;
  if (buf != NULL && len > 0)
    buf[0] = '\0';
  if (r == NULL) {
    put(&o, "no result");
    return (int)o.used;
  }
  switch (r->status) {
    case 0:
      put(&o, "ok: %u of %u masters said yes (quorum %u)", r->yes,
          r->n_nodes, r->quorum);
      return (int)o.used;
    case REDLOCK_ETAKEN:
      /* Counted when the refusal was decided: the masters not waited
       * for may hold it too. */
      put(&o, "held by another owner on %s%u of %u masters (quorum %u)",
          r->yes + r->no + r->err < r->n_nodes ? "at least " : "", r->no,
          r->n_nodes, r->quorum);
      break;
    case REDLOCK_ENOQUORUM:
      if (r->yes >= r->quorum && r->yes < r->n_nodes)
        /* A quorum said yes, and still: an operation that every master
         * must do (a forced release, the ttl record's setting). */
        put(&o, "not done on every master: %u of %u masters said yes, "
            "every master needed", r->yes, r->n_nodes);
      else
        put(&o, "no quorum: %u of %u masters said yes, %u needed", r->yes,
            r->n_nodes, r->quorum);
      break;
    case REDLOCK_EEXPIRED:
      put(&o, "a quorum said yes but the ttl had run out (the round took "
          "%.1f ms)", (double)r->elapsed_us / 1000.0);
      break;
    case REDLOCK_ETIMEDOUT:
      if (r->attempts == 0) {
        /* A new client's restart guard waits for every master's first
         * connection before it can tell which ones count. */
        put(&o, "gave up at the wait deadline before the first attempt: "
            "a new client waits for every master's first connection (or "
            "its connect timeout) to know which votes count (restart "
            "guard)");
        return (int)o.used;
      }
      put(&o, "gave up at the wait deadline after %u attempt%s; the last: "
          "%u of %u masters said yes, %u needed", r->attempts,
          r->attempts == 1 ? "" : "s", r->yes, r->n_nodes, r->quorum);
      break;
    case REDLOCK_ENOTHELD:
      put(&o, "not held: gone or someone else's on %u of %u masters",
          r->no, r->n_nodes);
      break;
    case REDLOCK_ECANCELED:
      put(&o, "canceled");
      break;
    default:
      put(&o, "%s", redlock_strerror(r->status));
      break;
  }
  /* Then why, per reason. */
  put(&o, ": ");
  first = 1;
  clock_group(&o, r, &first);
  guard_group(&o, r, &first);
  group(&o, r, "refused by the restart guard", m_guard_other, 1, &first);
  group(&o, r, "refused our credentials (authentication failed: check the "
        "password and user)", m_auth, 1, &first);
  group(&o, r, "unreachable", m_unreachable, 1, &first);
  group(&o, r, "answered with an error", m_error, 1, &first);
  group(&o, r, "failed", m_other_err, 1, &first);
  if (r->status != REDLOCK_ETAKEN && r->status != REDLOCK_ENOTHELD)
    group(&o, r, "held by another owner", m_no, 0, &first);
  /* A refusal is decided by the others' votes: who had not answered yet
   * says nothing. */
  if (r->status != REDLOCK_ETAKEN)
    group(&o, r, "not waited for (decided without them)", m_none, 0,
          &first);
  if (first) {
    /* Nothing to add: take the ": " back. */
    o.used -= 2;
    if (buf != NULL && o.used < len)
      buf[o.used] = '\0';
  }
  return (int)o.used;
}
