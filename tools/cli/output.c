/* output.c: JSON (to stdout, or run's and elect's to --json-file or
 * --json-fd), per-master results, keys escaped for people, the Prometheus
 * text and --stats-file, and the end of a run (finish). */
#include "cli.h"

/* Bytes as a JSON string: escapes, and \udcXX for each byte XX that does
 * not start a valid UTF-8 sequence (JSON must be Unicode; a key or a
 * server's error may be anything): Python's json.loads(...).encode(
 * "utf-8", "surrogateescape") gives the bytes back (redlock(1), JSON). */
void json_fstr(FILE *f, const char *str) {
  const unsigned char *p = (const unsigned char *)str;
  fputc('"', f);
  while (*p != '\0') {
    unsigned c = *p;
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4 : 0;
    size_t k;
    unsigned cp;
    if (n == 1) {
      if (c == '"' || c == '\\')
        fprintf(f, "\\%c", c);
      else if (c < 0x20)
        fprintf(f, "\\u%04x", c);
      else
        fputc((int)c, f);
      p++;
      continue;
    }
    cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (k = 1; k < n && (p[k] & 0xc0) == 0x80; k++)
      cp = (cp << 6) | (p[k] & 0x3f);
    if (n == 0 || k < n || (n == 2 && cp < 0x80) ||
        (n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
      /* Not UTF-8: the byte as a lone surrogate, U+DC80 + byte (PEP
       * 383's surrogateescape: lossless; U+FFFD lost the byte). */
      fprintf(f, "\\udc%02x", c);
      p++;
      continue;
    }
    fwrite(p, 1, n, f);
    p += n;
  }
  fputc('"', f);
}

void json_str(const char *str) {
  json_fstr(stdout, str);
}

/* Where run's and elect's JSON goes: stdout, or --json-file F (opened
 * here, close-on-exec), or --json-fd N (close-on-exec from now on: the
 * command does not inherit it). Exits 73 when F cannot be opened, 64 when
 * N is not open. */
FILE *json_out;

void open_json_out(void) {
  int fd;
  json_out = stdout;
  if (opt.json_file != NULL) {
    fd = open(opt.json_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || (json_out = fdopen(fd, "w")) == NULL) {
      fprintf(stderr, "redlock: --json-file %s: %s\n", opt.json_file,
              strerror(errno));
      exit(EXIT_CANTCREAT);
    }
  } else if (opt.json_fd >= 0) {
    fd = opt.json_fd;
    if (fcntl(fd, F_GETFD) == -1 || fd <= 2)
      usage_error("--json-fd %d: %s", fd,
                  fd <= 2 ? "not a separate descriptor (0, 1, 2)"
                          : "not open (e.g. 3> FILE)");
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) == -1 ||
        (json_out = fdopen(fd, "w")) == NULL)
      usage_error("--json-fd %d: %s", fd, strerror(errno));
  }
}

static const char *vote_name(redlock_vote_t v) {
  switch (v) {
    case REDLOCK_VOTE_NONE:
      return "none";
    case REDLOCK_VOTE_YES:
      return "yes";
    case REDLOCK_VOTE_NO:
      return "no";
    case REDLOCK_VOTE_ERR:
      return "error";
  }
  return "?";
}

static void json_nodes(const redlock_result *r) {
  unsigned i;
  fprintf(json_out, "\"nodes\":[");
  for (i = 0; i < r->n_nodes; i++) {
    const redlock_node_result *n = &r->nodes[i];
    fprintf(json_out, "%s{\"server\":", i ? "," : "");
    json_fstr(json_out, n->server);
    fprintf(json_out, ",\"vote\":\"%s\",\"latency_us\":%llu",
            vote_name(n->vote), (unsigned long long)n->latency_us);
    if (n->error != 0) {
      fprintf(json_out, ",\"error\":\"%s\",\"detail\":",
              redlock_err_name(n->error));
      json_fstr(json_out, n->errstr);
    }
    if (n->error == REDLOCK_ERESTARTED && n->guard_wait_ms >= 0)
      fprintf(json_out, ",\"guard_wait_ms\":%lld,\"guard_window_ms\":%lld",
              (long long)n->guard_wait_ms, (long long)n->guard_window_ms);
    fputc('}', json_out);
  }
  fputc(']', json_out);
}

void report_result(const char *what, int status,
                   const redlock_result *r) {
  char why[2048];
  redlock_result_explain(r, why, sizeof(why));
  if (opt.json) {
    fprintf(json_out, "{\"command\":\"%s\",\"key\":", what);
    json_fstr(json_out, key);
    fprintf(json_out, ",\"ok\":%s,\"status\":\"%s\"",
            status == 0 ? "true" : "false", redlock_err_name(status));
    if (status != 0) {
      fprintf(json_out, ",\"reason\":");
      json_fstr(json_out, why);
    }
    if (status == 0 && lock != NULL && redlock_lock_is_held(lock)) {
      fprintf(json_out, ",\"token\":");
      json_fstr(json_out, redlock_lock_token(lock));
      fprintf(json_out, ",\"validity_ms\":%lld",
              (long long)redlock_lock_validity_ms(lock));
      if (redlock_lock_fence(lock) != 0)
        fprintf(json_out, ",\"fence\":%llu",
                (unsigned long long)redlock_lock_fence(lock));
    }
    fprintf(json_out, ",\"yes\":%u,\"no\":%u,\"err\":%u,", r->yes, r->no,
            r->err);
    json_nodes(r);
    fprintf(json_out, "}\n");
    fflush(json_out);
    return;
  }
  if (status != 0 && opt.quiet && !opt.verbose &&
      (status == REDLOCK_ETAKEN || (status == REDLOCK_ETIMEDOUT && r->no > 0)))
    return;   /* -q: a busy lock is no news (flock -n is silent) */
  if (status != 0) {
    unsigned i;
    fprintf(stderr, "redlock: %s %s: %s\n", what, key_text, why);
    for (i = 0; i < r->n_nodes; i++)
      if (r->nodes[i].error != 0)
        fprintf(stderr, "  %s: %s %s\n", r->nodes[i].server,
                redlock_err_name(r->nodes[i].error), r->nodes[i].errstr);
  }
}

/* --verbose (flock's): how long the acquisition took; a refusal says why
 * anyway (report_result, even with -q). */
void say_verbose(int status, const redlock_result *r) {
  if (!opt.verbose || status != 0)
    return;
  fprintf(stderr, "redlock: acquired %s after %.3f s (%u attempt%s)\n", key_text,
          (double)(uv_now(&loop) - wait_start_ms) / 1000.0, r->attempts,
          r->attempts == 1 ? "" : "s");
}

/* A holder for people (status, semaphore status, ls): the holder part of
 * the value (redlock_token_holder: --id of run, acquire, elect), escaped
 * as text_of, then the token's first 8 characters in parentheses; a
 * value without one: its first 8 characters. Never another owner's whole
 * token (it releases the lock). */
void holder_shown(const char *value, char *buf, size_t len) {
  const char *id = redlock_token_holder(value);
  char *t = id != NULL ? text_of(id) : NULL;
  if (t != NULL)
    snprintf(buf, len, "%s (%.8s...)", t, value);
  else
    snprintf(buf, len, "%.8s%s", value, strlen(value) > 8 ? "..." : "");
  free(t);
}

void holder_view_of(const char *value, holder_view *h) {
  const char *id = redlock_token_holder(value);
  holder_shown(value, h->shown, sizeof(h->shown));
  snprintf(h->token8, sizeof(h->token8), "%.8s%s", value,
           strlen(value) > 8 ? "..." : "");
  snprintf(h->id, sizeof(h->id), "%s", id != NULL ? id : "");
}

void json_holder(const holder_view *h) {
  printf(",\"holder\":");
  json_str(h != NULL ? h->token8 : "");
  printf(",\"holder_id\":");
  if (h != NULL && h->id[0] != '\0')
    json_str(h->id);
  else
    printf("null");
}

/* A key for people: control characters (a newline, ESC that starts a
 * terminal's escape sequence), C1 controls and bytes that are not UTF-8
 * as \n, \t, \r or \xNN; the rest as it is. Allocated (4 bytes at most
 * per byte: a 64 KB key whole); NULL when out of memory. */
char *text_of(const char *s) {
  size_t size = strlen(s) * 4 + 1;
  char *buf = malloc(size);
  const unsigned char *p = (const unsigned char *)s;
  size_t o = 0;
  if (buf == NULL)
    return NULL;
  while (*p != '\0') {
    unsigned c = *p;
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4 : 0;
    size_t k;
    for (k = 1; k < n && (p[k] & 0xc0) == 0x80; k++)
      ;
    if (n == 1 && c >= 0x20 && c != 0x7f) {
      buf[o++] = (char)c;
    } else if (n == 1) {
      o += (size_t)snprintf(buf + o, size - o, "%s",
                            c == '\n' ? "\\n" : c == '\t' ? "\\t"
                            : c == '\r' ? "\\r" : "");
      if (c != '\n' && c != '\t' && c != '\r')
        o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
    } else if (n == 0 || k < n || (n == 2 && c == 0xc2 && p[1] < 0xa0)) {
      /* not UTF-8, or a C1 control (U+0080..U+009F: CSI is one) */
      o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
      n = 1;
    } else {
      if (o + n >= size)
        break;
      memcpy(buf + o, p, n);
      o += n;
    }
    p += n == 0 ? 1 : n;
  }
  buf[o] = '\0';
  return buf;
}

void on_client_closed(redlock_client_t *c, void *arg) {
  (void)c;
  (void)arg;
  client = NULL;
}

/* ---- --stats-file: the Prometheus text for node_exporter's textfile
 * collector, rewritten atomically (tmp + rename) every 5 s and at exit. */
static uv_timer_t stats_timer;
int stats_timer_open;

/* A label value as Prometheus quotes it. */
static void put_label_value(char **o, const char *v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    if (v[i] == '\\' || v[i] == '"') {
      *(*o)++ = '\\';
      *(*o)++ = v[i];
    } else if (v[i] == '\n') {
      *(*o)++ = '\\';
      *(*o)++ = 'n';
    } else {
      *(*o)++ = v[i];
    }
  }
}

/* key="KEY",NAME="VALUE"... for every sample: two jobs that export
 * through node_exporter's textfile collector do not collide. */
static char *label_set(void) {
  size_t need = strlen(key) * 2 + 16;
  char *out, *o;
  int i;
  for (i = 0; i < n_labels; i++)
    need += strlen(labels[i]) * 2 + 8;
  out = malloc(need);
  if (out == NULL)
    return NULL;
  o = out;
  memcpy(o, "key=\"", 5);
  o += 5;
  put_label_value(&o, key, strlen(key));
  *o++ = '"';
  for (i = 0; i < n_labels; i++) {
    const char *eq = strchr(labels[i], '=');
    *o++ = ',';
    memcpy(o, labels[i], (size_t)(eq - labels[i]));
    o += eq - labels[i];
    *o++ = '=';
    *o++ = '"';
    put_label_value(&o, eq + 1, strlen(eq + 1));
    *o++ = '"';
  }
  *o = '\0';
  return out;
}

/* The library's text with our labels on every sample, and the gauges of
 * this process: the lock held (run, elect) and leadership (elect). */
static char *stats_text(void) {
  static redlock_stats st;
  char *text, *lab, *out, *o;
  const char *p;
  int len;
  size_t lablen, lines = 0, need;
  if (client == NULL || redlock_client_stats(client, &st) != 0)
    return NULL;
  len = redlock_stats_prometheus(&st, NULL, 0);
  text = malloc((size_t)len + 1);
  lab = label_set();
  if (text == NULL || lab == NULL) {
    free(text);
    free(lab);
    return NULL;
  }
  redlock_stats_prometheus(&st, text, (size_t)len + 1);
  for (p = text; *p != '\0'; p++)
    lines += *p == '\n';
  lablen = strlen(lab);
  need = (size_t)len + (lines + 1) * (lablen + 3) + 2 * lablen + 512;
  out = malloc(need);
  if (out == NULL) {
    free(text);
    free(lab);
    return NULL;
  }
  o = out;
  for (p = text; *p != '\0';) {
    const char *eol = strchr(p, '\n');
    size_t n = eol != NULL ? (size_t)(eol - p + 1) : strlen(p);
    if (*p != '#' && n > 1) {
      size_t name = strcspn(p, "{ ");
      memcpy(o, p, name);
      o += name;
      *o++ = '{';
      memcpy(o, lab, lablen);
      o += lablen;
      if (p[name] == '{') {
        *o++ = ',';
        name++;
      } else {
        *o++ = '}';
      }
      memcpy(o, p + name, n - name);
      o += n - name;
    } else {
      memcpy(o, p, n);
      o += n;
    }
    p += n;
  }
  {
    redlock_lock_t *held = lock != NULL ? lock
                           : election != NULL ? redlock_election_lock(election)
                                              : NULL;
    o += sprintf(o, "# HELP redlock_lock_held 1 while this process holds "
                 "the lock.\n# TYPE redlock_lock_held gauge\n"
                 "redlock_lock_held{%s} %d\n", lab,
                 held != NULL && redlock_lock_is_held(held) && !finishing);
    if (cmd_bit == C_ELECT)
      o += sprintf(o, "# HELP redlock_leader 1 while this process leads.\n"
                   "# TYPE redlock_leader gauge\nredlock_leader{%s} %d\n",
                   lab, election != NULL &&
                            redlock_election_is_leader(election) &&
                            !finishing);
  }
  *o = '\0';
  free(text);
  free(lab);
  return out;
}

/* Rewrites --stats-file atomically (a temporary file, then rename).
 * Returns 0 or an errno. */
static int write_stats_file(void) {
  char tmp[4096];
  char *text;
  size_t len;
  FILE *f;
  int err = 0;
  if (opt.stats_file == NULL)
    return 0;
  text = stats_text();
  if (text == NULL)
    return ENOMEM;
  len = strlen(text);
  snprintf(tmp, sizeof(tmp), "%s.tmp", opt.stats_file);
  f = fopen(tmp, "w");
  if (f == NULL) {
    err = errno;
  } else {
    if (fwrite(text, 1, len, f) != len)
      err = errno != 0 ? errno : EIO;
    if (fclose(f) != 0 && err == 0)
      err = errno;
    if (err == 0 && rename(tmp, opt.stats_file) != 0)
      err = errno;
    if (err != 0)
      unlink(tmp);
  }
  free(text);
  return err;
}

/* A write that fails is said on stderr, once per cause. */
void write_stats_reported(void) {
  static int said;
  int err = write_stats_file();
  if (err != 0 && err != said)
    fprintf(stderr, "redlock: --stats-file %s: %s\n", opt.stats_file,
            strerror(err));
  said = err;
}

static void on_stats_timer(uv_timer_t *t) {
  (void)t;
  write_stats_reported();
}

/* Before anything is acquired: --stats-file can be written (its
 * directory exists and takes a new file; it is not itself a directory).
 * Else the command ends with 73 and says why: a metrics file that stays
 * silently empty is an outage nobody sees. */
int check_stats_file(void) {
  char tmp[4096];
  struct stat sb;
  int fd;
  if (opt.stats_file == NULL)
    return 0;
  if (stat(opt.stats_file, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "redlock: --stats-file %s: %s\n", opt.stats_file,
            strerror(EISDIR));
    return EXIT_CANTCREAT;
  }
  snprintf(tmp, sizeof(tmp), "%s.tmp", opt.stats_file);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "redlock: --stats-file %s: %s\n", opt.stats_file,
            strerror(errno));
    return EXIT_CANTCREAT;
  }
  close(fd);
  unlink(tmp);
  return 0;
}

void start_stats_file(void) {
  if (opt.stats_file == NULL)
    return;
  uv_timer_init(&loop, &stats_timer);
  uv_timer_start(&stats_timer, on_stats_timer, 5000, 5000);
  stats_timer_open = 1;
}

/* Ends the run with `code` (the first call decides; closing the client
 * cancels what is in flight, whose callbacks then come back here). */
int final_release;   /* finish() waits for its release */

/* The last stats (after the release: releases_total counts it), then the
 * lock and the client go. */
void finish_close(void) {
  final_release = 0;
  if (stats_timer_open) {
    write_stats_reported();
    stats_timer_open = 0;
    uv_close((uv_handle_t *)&stats_timer, NULL);
  }
  election = NULL;   /* freed (and its lock released) by the close */
  if (lock != NULL && redlock_lock_free(lock) == 0)
    lock = NULL;   /* released in the background if held */
  if (client != NULL)
    redlock_client_close(client, on_client_closed, NULL);
}

static void on_final_release(redlock_lock_t *l, int status,
                             const redlock_result *r, void *arg) {
  (void)l;
  (void)status;
  (void)r;
  (void)arg;
  if (final_release)
    finish_close();
}

void finish(int code) {
  if (finishing)
    return;
  finishing = 1;
  exit_code = code;
  if (command != NULL && command->close != NULL)
    command->close();   /* signals, timers */
  /* With --stats-file, release before the last write so that it shows
   * (an election resigns: its release comes as an event). */
  if (stats_timer_open && client != NULL) {
    if (lock != NULL && redlock_lock_is_held(lock) &&
        redlock_lock_release(lock, on_final_release, NULL) == 0) {
      final_release = 1;
      return;
    }
    if (election != NULL && redlock_election_is_leader(election) &&
        redlock_election_resign(election) == 0) {
      final_release = 1;
      return;
    }
  }
  finish_close();
}

/* Configuration warnings (two masters that are one instance, a replica, a
 * declared master that is not durable, a clock that stepped): on stderr,
 * each distinct message once, unless -q. status and guard show them in
 * their output instead. */
void on_warning(redlock_client_t *c, const char *msg, void *arg) {
  static char seen[16][256];
  static unsigned n_seen;
  unsigned i;
  (void)c;
  (void)arg;
  if (opt.quiet || (cmd_bit & (C_STATUS | C_GUARD)))
    return;
  for (i = 0; i < n_seen; i++)
    if (strncmp(seen[i], msg, sizeof(seen[i]) - 1) == 0)
      return;
  if (n_seen < 16)
    snprintf(seen[n_seen++], sizeof(seen[0]), "%s", msg);
  fprintf(stderr, "redlock: warning: %s\n", msg);
}

/* --json stats: the counters as one JSON object (per master: its
 * counters, and its latency's median and 99th percentile, the upper
 * bounds of their histogram buckets). */
static void print_stats_json(const redlock_stats *st) {
  unsigned i;
  printf("{\"command\":\"stats\",\"ok\":true,\"quorum\":%u,"
         "\"attempts\":%llu,\"grants\":%llu,\"taken\":%llu,"
         "\"noquorum\":%llu,\"expired\":%llu,\"acquire_timeouts\":%llu,"
         "\"canceled\":%llu,\"extensions\":%llu,"
         "\"extension_failures\":%llu,\"lost\":%llu,\"releases\":%llu,"
         "\"masters\":[", st->quorum, (unsigned long long)st->attempts,
         (unsigned long long)st->grants, (unsigned long long)st->taken,
         (unsigned long long)st->noquorum, (unsigned long long)st->expired,
         (unsigned long long)st->acquire_timeouts,
         (unsigned long long)st->canceled, (unsigned long long)st->extensions,
         (unsigned long long)st->extension_failures,
         (unsigned long long)st->lost, (unsigned long long)st->releases);
  for (i = 0; i < st->n_masters && i < REDLOCK_MAX_SERVERS; i++) {
    const redlock_master_stats *m = &st->masters[i];
    printf("%s{\"server\":", i ? "," : "");
    json_str(m->server != NULL ? m->server : "");
    printf(",\"up\":%s,\"commands\":%llu,\"replies\":%llu,"
           "\"server_errors\":%llu,\"timeouts\":%llu,"
           "\"conn_failures\":%llu,\"connects\":%llu,"
           "\"guard_refusals\":%llu,\"latency_sum_us\":%llu,"
           "\"latency_p50_us\":%llu,\"latency_p99_us\":%llu,"
           "\"moved\":%llu,\"asked\":%llu}", m->up ? "true" : "false",
           (unsigned long long)m->commands, (unsigned long long)m->replies,
           (unsigned long long)m->server_errors,
           (unsigned long long)m->timeouts,
           (unsigned long long)m->conn_failures,
           (unsigned long long)m->connects,
           (unsigned long long)m->guard_refusals,
           (unsigned long long)m->latency_sum_us,
           (unsigned long long)redlock_hist_quantile_us(m->latency_hist, 0.5),
           (unsigned long long)redlock_hist_quantile_us(m->latency_hist, 0.99),
           (unsigned long long)m->moved, (unsigned long long)m->asked);
  }
  printf("]}\n");
}

void print_stats(void) {
  static redlock_stats st;
  char *text;
  int len;
  if (client == NULL || redlock_client_stats(client, &st) != 0)
    return;
  if (opt.json && !opt.prometheus && cmd_bit == C_STATS) {
    print_stats_json(&st);
    return;
  }
  len = redlock_stats_prometheus(&st, NULL, 0);
  text = malloc((size_t)len + 1);
  if (text == NULL)
    return;
  redlock_stats_prometheus(&st, text, (size_t)len + 1);
  fputs(text, stdout);
  free(text);
}
