/* status.c: status (the key and each master: reachable, counts,
 * durable, holder), guard (the restart guard's state, --set-record) and
 * stats. */
#include "cli.h"

const char help_status[] =
    "usage: redlock status [OPTIONS] KEY\n"
    "\n"
    "Show KEY on every master: reachable, latency, held, remaining ttl,\n"
    "whether its vote counts now (or in how long: the restart guard),\n"
    "durability (declared and reported; 'broken' when declared but not\n"
    "reported) and holder (its first 8 characters only; 'mine' when it is\n"
    "--token). Then why a master's vote does not count, configuration\n"
    "warnings, and a note when KEY is also a read-write lock.\n"
    "  --token TOKEN  mark the masters where TOKEN holds KEY\n"
    "  --stats        then this client's statistics (Prometheus text)\n"
    "  --limit K      KEY is a counting semaphore: its limit on the\n"
    "                 masters, permits held and free, and each permit's\n"
    "                 holder (8 characters), masters and ttl left\n";

const char help_guard[] =
    "usage: redlock guard [OPTIONS]\n"
    "\n"
    "Connect to every master and show its restart-guard state: up, instance\n"
    "(run_id), uptime, durability (declared / reported), its record of the\n"
    "deployment's longest ttl, its clock against the others', and whether\n"
    "its YES vote counts now; when not, why and for how long.\n"
    "\n"
    "  --set-record D  set the ttl record to D on every master. The record\n"
    "               only grows on its own, so one long ttl (a typo, a\n"
    "               test) makes every later restart of a master without\n"
    "               persistence wait that long. Lowering it to D is safe\n"
    "               only when no lock with a longer ttl can still be held:\n"
    "               every client uses ttls <= D (--max-ttl), and the last\n"
    "               lock with a longer ttl was taken or extended longer ago\n"
    "               than its ttl. Needs every master up (exit 1 otherwise).\n";

const char help_stats[] =
    "usage: redlock stats [OPTIONS]\n"
    "\n"
    "Connect to every master, read one probe key, and print the client's\n"
    "statistics in the Prometheus text format: per master up, commands,\n"
    "errors by kind, handshakes and a latency histogram. --json: one JSON\n"
    "object (per master: its counters, latency p50 and p99); --prometheus:\n"
    "the text even so.\n";

/* status and guard show the guard's verdicts, which need the record of
 * the deployment's longest ttl: a client reads it when it first sees an
 * instance. Until the reads in flight end (bounded: 2 s), look again every
 * 5 ms; then `then` runs. */
static uv_timer_t reads_timer;
static void (*reads_then)(void);
static uint64_t reads_deadline;

static int guard_reading(void) {
  redlock_master_info mi;
  unsigned i, k, n = redlock_client_n_servers(client);
  for (i = 0; i < n; i++) {
    if (redlock_client_master_info(client, i, &mi) != 0)
      continue;
    for (k = 0; k < mi.nodes; k++) {
      redlock_master_info ni;
      if (redlock_client_node_info(client, i, k, &ni) == 0 && ni.up &&
          ni.guard_cause == REDLOCK_GUARD_READING)
        return 1;
    }
  }
  return 0;
}

/* Master i's info for the node that answered (a cluster's primary, a
 * sentinel group's primary), or the master's own. */
static void info_of(unsigned i, const char *node, redlock_master_info *out) {
  unsigned k;
  memset(out, 0, sizeof(*out));
  if (redlock_client_master_info(client, i, out) != 0)
    return;
  for (k = 0; node != NULL && node[0] != '\0' && k < out->nodes; k++) {
    redlock_master_info ni;
    if (redlock_client_node_info(client, i, k, &ni) == 0 &&
        strcmp(ni.node, node) == 0) {
      *out = ni;
      return;
    }
  }
}

static void on_reads_closed(uv_handle_t *h) {
  (void)h;
  reads_then();
}

static void on_reads_timer(uv_timer_t *t) {
  if (guard_reading() && uv_now(&loop) < reads_deadline)
    return;
  uv_timer_stop(t);
  uv_close((uv_handle_t *)t, on_reads_closed);
}

static void after_guard_reads(void (*then)(void)) {
  reads_then = then;
  if (!guard_reading()) {
    then();
    return;
  }
  reads_deadline = uv_now(&loop) + 2000;
  uv_timer_init(&loop, &reads_timer);
  uv_timer_start(&reads_timer, on_reads_timer, 5, 5);
}

/* status: below the table, each master whose YES vote would not count
 * now (and why, in words) and each configuration warning. With --json:
 * a "masters" array (inside the object being printed). */
static void print_guard_notes(void) {
  redlock_master_info mi;
  unsigned i, n = redlock_client_n_servers(client);
  if (opt.json)
    printf(",\"masters\":[");
  for (i = 0; i < n; i++) {
    if (redlock_client_master_info(client, i, &mi) != 0)
      continue;
    if (opt.json) {
      printf("%s{\"server\":", i ? "," : "");
      json_str(mi.server);
      printf(",\"counts\":%s,\"guard_wait_ms\":%lld,\"guard_reason\":",
             mi.counts ? "true" : "false", (long long)mi.guard_wait_ms);
      json_str(mi.guard_reason);
      printf(",\"warning\":");
      json_str(mi.warning);
      putchar('}');
      continue;
    }
    if (!mi.counts && mi.up && mi.guard_reason[0] != '\0')
      printf("guard: %s: %s\n", mi.server, mi.guard_reason);
    if (mi.warning[0] != '\0')
      printf("warning: %s\n", mi.warning);
  }
  if (opt.json)
    printf("]");
}

/* One row of the guard table: a master, or a cluster's primary. */
static void guard_row(const redlock_master_info *mi, int comma) {
  char skew[24], record[24], uptime[24];
  char name[300];
  if (opt.json) {
    printf("%s{\"server\":", comma ? "," : "");
    json_str(mi->server);
    printf(",\"node\":");
    json_str(mi->node);
    printf(",\"up\":%s,\"run_id\":", mi->up ? "true" : "false");
    json_str(mi->run_id);
    printf(",\"role\":");
    json_str(mi->role);
    printf(",\"uptime_s\":%lld,\"declared_durable\":%s,"
           "\"reports_durable\":%s,\"ttl_record_ms\":%lld,"
           "\"clock_known\":%s,\"clock_skew_ms\":%lld,\"counts\":%s,"
           "\"guard_wait_ms\":%lld,\"guard_reason\":",
           (long long)mi->uptime_s, mi->declared_durable ? "true" : "false",
           mi->durable ? "true" : "false", (long long)mi->ttl_record_ms,
           mi->clock_known ? "true" : "false", (long long)mi->clock_skew_ms,
           mi->counts ? "true" : "false", (long long)mi->guard_wait_ms);
    json_str(mi->guard_reason);
    printf(",\"error\":");
    json_str(mi->error);
    printf(",\"warning\":");
    json_str(mi->warning);
    putchar('}');
    return;
  }
  /* A cluster's primaries are indented under their master's line. */
  if (strcmp(mi->node, mi->server) != 0)
    snprintf(name, sizeof(name), "  %s", mi->node);
  else
    snprintf(name, sizeof(name), "%s", mi->server);
  snprintf(uptime, sizeof(uptime), "%lld", (long long)mi->uptime_s);
  snprintf(record, sizeof(record), "%lld", (long long)mi->ttl_record_ms);
  if (mi->clock_known)
    snprintf(skew, sizeof(skew), "%+lld", (long long)mi->clock_skew_ms);
  else
    snprintf(skew, sizeof(skew), "-");
  printf("%-28s %-3s %-8.8s %9s %-7s %-7s %12s %8s %-6s\n", name,
         mi->up ? "yes" : "no", mi->run_id[0] ? mi->run_id : "-",
         mi->uptime_s >= 0 ? uptime : "-",
         mi->declared_durable ? "yes" : "no", mi->durable ? "yes" : "no",
         mi->ttl_record_ms >= 0 ? record : "-", skew,
         mi->up && mi->counts ? "yes" : "no");
}

/* guard: one line per master (and per primary of a cluster master), then
 * why a master does not count. */
static void print_guard_table(void) {
  redlock_master_info mi;
  unsigned i, k, rows = 0, n = redlock_client_n_servers(client);
  if (opt.json)
    printf("{\"command\":\"guard\",\"masters\":[");
  else
    printf("%-28s %-3s %-8s %9s %-7s %-7s %12s %8s %-6s\n", "master", "up",
           "run_id", "uptime_s", "durable", "reports", "record_ms",
           "skew_ms", "counts");
  for (i = 0; i < n; i++) {
    unsigned nodes;
    if (redlock_client_master_info(client, i, &mi) != 0)
      continue;
    nodes = mi.nodes;
    if (!opt.json && strcmp(mi.node, mi.server) != 0)
      printf("%s%s%s\n", mi.server, mi.problem[0] ? ": " : "", mi.problem);
    for (k = 0; k < nodes; k++)   /* node 0 is the master's own */
      if (redlock_client_node_info(client, i, k, &mi) == 0)
        guard_row(&mi, rows++ > 0);
  }
  if (opt.json) {
    printf("]}\n");
    return;
  }
  for (i = 0; i < n; i++) {
    unsigned nodes;
    if (redlock_client_master_info(client, i, &mi) != 0)
      continue;
    nodes = mi.nodes;
    for (k = 0; k < nodes; k++) {
      char name[300];
      if (redlock_client_node_info(client, i, k, &mi) != 0)
        continue;
      if (strcmp(mi.node, mi.server) != 0)
        snprintf(name, sizeof(name), "%s [%s]", mi.server, mi.node);
      else
        snprintf(name, sizeof(name), "%s", mi.server);
      if (!mi.up)
        printf("%s: down: %s\n", name, mi.error);
      else if (!mi.counts && mi.guard_reason[0] != '\0')
        printf("guard: %s: %s\n", name, mi.guard_reason);
      if (mi.warning[0] != '\0')
        printf("warning: %s\n", mi.warning);
    }
  }
}

static void on_set_record(redlock_client_t *c, int status,
                          const redlock_result *r, void *arg) {
  (void)c;
  (void)arg;
  if (status != 0) {
    char why[2048];
    unsigned i;
    redlock_result_explain(r, why, sizeof(why));
    fprintf(stderr, "redlock: guard --set-record: %s\n", why);
    for (i = 0; i < r->n_nodes; i++)
      if (r->nodes[i].error != 0)
        fprintf(stderr, "  %s: %s %s\n", r->nodes[i].server,
                redlock_err_name(r->nodes[i].error), r->nodes[i].errstr);
  } else if (!opt.json) {
    printf("ttl record set to %lld ms on %u masters\n",
           (long long)opt.set_record_ms, r->n_nodes);
  }
  print_guard_table();
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

static int guard_status;   /* the probe's status */

static void guard_show(void) {
  int rc;
  if (opt.set_record_ms < 0) {
    print_guard_table();
    finish(guard_status == 0 ? EXIT_OK : EXIT_FAIL);
    return;
  }
  rc = redlock_client_set_ttl_record(client, opt.set_record_ms,
                                     on_set_record, NULL);
  if (rc != 0) {
    fprintf(stderr, "redlock: guard --set-record: %s\n",
            lib_error());
    finish(rc == REDLOCK_EINVAL ? EXIT_USAGE : EXIT_FAIL);
  }
}

void on_guard_cmd(redlock_lock_t *l, int status,
                  const redlock_result *r, void *arg) {
  (void)l;
  (void)r;
  (void)arg;
  guard_status = status;
  after_guard_reads(guard_show);
}

static int status_status;

/* What status shows of each master, copied from the inspect result (the
 * table is printed once the guard's reads ended). */
typedef struct status_row {
  char server[256];
  char node[64];        /* the primary that answered, if not the master */
  int up, held, mine, rw;
  uint64_t latency_us;
  int64_t pttl_ms;
  holder_view holder;   /* never a whole token */
  char error[160];
} status_row;
static status_row status_rows[REDLOCK_MAX_SERVERS];
static unsigned status_n, status_held, status_rw;

/* "yes", "in 12.3s" (the restart guard: when it counts), "no" (not a
 * matter of time), "-" (down). */
static void counts_cell(const redlock_master_info *mi, char *buf,
                        size_t len) {
  if (!mi->up)
    snprintf(buf, len, "-");
  else if (mi->counts)
    snprintf(buf, len, "yes");
  else if (mi->guard_wait_ms >= 0)
    snprintf(buf, len, "in %.1fs", (double)mi->guard_wait_ms / 1000.0);
  else
    snprintf(buf, len, "no");
}

/* "yes" (declared and it reports appendonly + always), "no" (not
 * declared), "broken" (declared, but it reports otherwise), "-" (declared,
 * down: unknown). */
static const char *durable_cell(const redlock_master_info *mi) {
  if (!mi->declared_durable)
    return "no";
  if (!mi->up)
    return "-";   /* not known while down */
  return mi->durable ? "yes" : "broken";
}

/* The table, the guard's notes, then the rest; after the guard's reads. */
static void status_finish(void) {
  unsigned i;
  if (opt.json) {
    printf("{\"command\":\"status\",\"key\":");
    json_str(key);
    printf(",\"ok\":%s,\"quorum\":%u,\"held_on\":%u,\"rw_lock_on\":%u,"
           "\"nodes\":[", status_status == 0 ? "true" : "false",
           redlock_client_quorum(client), status_held, status_rw);
  } else {
    printf("key %s: held on %u of %u masters (quorum %u)\n", key_text,
           status_held, status_n, redlock_client_quorum(client));
    printf("%-28s %-9s %10s %-5s %10s %-8s %-7s %s\n", "master",
           "reachable", "latency_us", "held", "pttl_ms", "counts",
           "durable", "holder");
  }
  for (i = 0; i < status_n; i++) {
    const status_row *n = &status_rows[i];
    redlock_master_info mi;
    char counts[24];
    info_of(i, n->node, &mi);
    counts_cell(&mi, counts, sizeof(counts));
    if (opt.json) {
      printf("%s{\"server\":", i ? "," : "");
      json_str(n->server);
      if (n->node[0] != '\0') {
        printf(",\"node\":");
        json_str(n->node);
      }
      printf(",\"reachable\":%s", n->up ? "true" : "false");
      if (n->up) {
        char pttl[24] = "null";   /* absent (Redis's -2) */
        if (n->held)
          snprintf(pttl, sizeof(pttl), "%lld", (long long)n->pttl_ms);
        printf(",\"latency_us\":%llu,\"held\":%s,\"pttl_ms\":%s,"
               "\"mine\":%s,\"rw_lock\":%s",
               (unsigned long long)n->latency_us, n->held ? "true" : "false",
               pttl, n->mine ? "true" : "false", n->rw ? "true" : "false");
        json_holder(n->held ? &n->holder : NULL);
      } else {
        printf(",\"error\":");
        json_str(n->error);
      }
      printf(",\"counts\":%s,\"guard_wait_ms\":%lld,\"durable\":",
             mi.up && mi.counts ? "true" : "false",
             (long long)mi.guard_wait_ms);
      json_str(durable_cell(&mi));
      putchar('}');
    } else if (n->up) {
      char pttl[24] = "-";   /* absent (Redis's -2) */
      if (n->held)
        snprintf(pttl, sizeof(pttl), "%lld", (long long)n->pttl_ms);
      printf("%-28s %-9s %10llu %-5s %10s %-8s %-7s %s%s%s%s\n",
             n->server, "yes", (unsigned long long)n->latency_us,
             n->held ? "yes" : "no", pttl,
             counts, durable_cell(&mi), n->held ? n->holder.shown : "-",
             n->mine ? " (mine)" : "", n->node[0] ? " on " : "", n->node);
    } else {
      printf("%-28s %-9s %10s %-5s %10s %-8s %-7s %s\n", n->server, "no",
             "-", "-", "-", "-", durable_cell(&mi), n->error);
    }
  }
  if (opt.json)
    printf("]");
  else if (status_rw > 0)
    printf("note: %s is also a read-write lock on %u of %u masters "
           "(readers, a writer or waiters): see it with --read/--write "
           "commands\n", key_text, status_rw, status_n);
  print_guard_notes();
  if (opt.json && opt.stats) {
    /* One JSON object: the Prometheus text as a string in it. */
    static redlock_stats st;
    char *text = NULL;
    int len;
    if (redlock_client_stats(client, &st) == 0 &&
        (len = redlock_stats_prometheus(&st, NULL, 0)) > 0 &&
        (text = malloc((size_t)len + 1)) != NULL) {
      redlock_stats_prometheus(&st, text, (size_t)len + 1);
      printf(",\"prometheus\":");
      json_str(text);
    }
    free(text);
  }
  if (opt.json)
    printf("}\n");
  if (opt.stats && !opt.json)
    print_stats();
  finish(status_status == 0 ? EXIT_OK : EXIT_FAIL);
}

void on_status_cmd(redlock_lock_t *l, int status,
                   const redlock_result *r, void *arg) {
  unsigned i;
  (void)l;
  (void)arg;
  status_n = r->n_nodes < REDLOCK_MAX_SERVERS ? r->n_nodes
                                              : REDLOCK_MAX_SERVERS;
  status_held = status_rw = 0;
  for (i = 0; i < status_n; i++) {
    const redlock_node_result *n = &r->nodes[i];
    status_row *row = &status_rows[i];
    row->up = n->vote == REDLOCK_VOTE_YES || n->vote == REDLOCK_VOTE_NO;
    row->held = n->vote == REDLOCK_VOTE_YES;
    row->mine = row->held && opt.token != NULL &&
                strcmp(n->holder, opt.token) == 0;
    row->rw = row->up && n->rw_lock;
    row->latency_us = n->latency_us;
    row->pttl_ms = n->pttl_ms;
    snprintf(row->server, sizeof(row->server), "%s", n->server);
    snprintf(row->node, sizeof(row->node), "%s",
             n->node != NULL && strcmp(n->node, n->server) != 0 ? n->node
                                                                : "");
    snprintf(row->error, sizeof(row->error), "%s", n->errstr);
    /* Never print another owner's full token: 8 characters identify it. */
    holder_view_of(n->holder, &row->holder);
    status_held += row->held;
    status_rw += row->rw;
  }
  status_status = status;
  after_guard_reads(status_finish);
}

void on_stats_cmd(redlock_lock_t *l, int status,
                  const redlock_result *r, void *arg) {
  (void)l;
  (void)r;
  (void)arg;
  print_stats();
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

/* ---- the commands (main.c's table) --------------------------------------- */

int start_status(void) {
  if (opt.limit > 0)
    return start_sem_status();   /* semaphore.c */
  return redlock_lock_inspect(lock, on_status_cmd, NULL);
}

int start_stats(void) {
  return redlock_lock_inspect(lock, on_stats_cmd, NULL);
}

int start_guard(void) {
  return redlock_lock_inspect(lock, on_guard_cmd, NULL);
}
