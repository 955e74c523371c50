/* redlock: the command-line tool. Like flock(1), across hosts: a Redlock
 * over N Redis masters. Public API only (include/redlock.h).
 *
 *   redlock [GLOBAL] run [--ttl D] [--wait D] [--heal] [--grace D]
 *                        KEY -- CMD [ARGS...]
 *   redlock [GLOBAL] acquire [--ttl D] [--wait D] KEY
 *   redlock [GLOBAL] extend [--ttl D] KEY TOKEN
 *   redlock [GLOBAL] release KEY TOKEN
 *   redlock [GLOBAL] status [--token TOKEN] KEY
 *
 * See usage() for the options and the exit codes. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "redlock.h"

/* Exit codes (documented in --help and the README). */
#define EXIT_OK 0
#define EXIT_FAIL 1          /* extend/release/status failed */
#define EXIT_USAGE 64        /* EX_USAGE */
#define EXIT_NOT_ACQUIRED 75 /* EX_TEMPFAIL: taken, or no quorum in time */
#define EXIT_LOST 76         /* run: the lock was lost, child terminated */
#define EXIT_NOEXEC 127      /* run: the command could not be started */

static const char usage_text[] =
    "usage: redlock [GLOBAL OPTIONS] COMMAND [OPTIONS] ARGS\n"
    "\n"
    "A distributed lock over N independent Redis masters (Redlock).\n"
    "\n"
    "Commands:\n"
    "  run [--ttl D] [--wait D] [--heal] [--fence] [--grace D] KEY -- CMD...\n"
    "        hold KEY while CMD runs (extended automatically); forward\n"
    "        SIGINT/SIGTERM/SIGHUP to CMD; exit with CMD's status. If the\n"
    "        lock is lost, CMD gets SIGTERM, then SIGKILL after the grace\n"
    "        period (default 10s). CMD sees REDLOCK_KEY and REDLOCK_TOKEN;\n"
    "        with --fence also REDLOCK_FENCE, a number that strictly\n"
    "        increases across holders (masters need appendonly).\n"
    "  acquire [--ttl D] [--wait D] [--fence] KEY\n"
    "        acquire and print the token (for scripts; not extended)\n"
    "  run, acquire, extend, release: --also KEY2 (repeatable) locks more\n"
    "        resources together with KEY, all or none on each master;\n"
    "        --read / --write take KEY's read-write lock instead (many\n"
    "        readers or one writer; a waiting writer keeps new readers out)\n"
    "  run, acquire: --wake waits for the holder's release message instead\n"
    "        of polling (the retry delay stays as the fallback)\n"
    "  extend [--ttl D] KEY TOKEN    extend a lock held under TOKEN\n"
    "  release KEY TOKEN             release a lock held under TOKEN\n"
    "  status [--token TOKEN] KEY    per master: reachable, latency, held,\n"
    "        remaining ttl, holder (first 8 characters only; 'mine' when\n"
    "        it is TOKEN)\n"
    "\n"
    "Global options:\n"
    "  --servers LIST     comma-separated masters (default $REDLOCK_SERVERS):\n"
    "                     host:port, redis://[user[:pass]@]host[:port][/db],\n"
    "                     unix:///path\n"
    "  --json             machine-readable output (one JSON object)\n"
    "  --prefix P         key prefix\n"
    "  --quorum N         votes needed (default N/2+1; only raised)\n"
    "  --timeout D        per-master command timeout (default 50ms)\n"
    "  --connect-timeout D  connect timeout (default 250ms)\n"
    "  --restart-guard D|off  a master younger than D does not count for\n"
    "                     acquisitions (default: the ttl; also\n"
    "                     $REDLOCK_RESTART_GUARD)\n"
    "  --tls-ca FILE      CA bundle for rediss:// masters (default: the\n"
    "                     system store; also $REDLOCK_TLS_CA);\n"
    "                     --tls-ca-dir DIR ($REDLOCK_TLS_CA_DIR)\n"
    "  --tls-cert FILE --tls-key FILE  client certificate for mutual TLS\n"
    "                     ($REDLOCK_TLS_CERT, $REDLOCK_TLS_KEY); an encrypted\n"
    "                     key's passphrase: --tls-key-pass-file FILE\n"
    "                     ($REDLOCK_TLS_KEY_PASSWORD_FILE)\n"
    "  --tls-server-name NAME  name to verify (and send as SNI) instead of\n"
    "                     each URI's host ($REDLOCK_TLS_SERVER_NAME)\n"
    "  --tls-insecure     DANGEROUS: no certificate verification at all:\n"
    "                     anyone on the path can pose as the master (tests\n"
    "                     only; also $REDLOCK_TLS_INSECURE=1)\n"
    "  -h, --help         this text;  --version\n"
    "\n"
    "Durations: 500ms, 10s, 2m, 1h; a bare number is seconds (like\n"
    "flock -w). --ttl defaults to 30s. --wait: 0 = one attempt; default:\n"
    "wait forever (run, like flock) or 0 (acquire).\n"
    "Passwords never need argv: REDLOCK_PASSWORD (and REDLOCK_USERNAME) apply\n"
    "to masters without credentials, or put URIs with credentials in\n"
    "REDLOCK_SERVERS.\n"
    "\n"
    "Exit codes:\n"
    "  0    ok\n"
    "  1    extend/release/status failed (not held, no quorum, unreachable)\n"
    "  64   usage error\n"
    "  75   not acquired (held by another owner, or no quorum within --wait)\n"
    "  76   run: the lock was lost; the command was terminated\n"
    "  127  run: the command could not be started\n"
    "  run otherwise exits with the command's status (128+N if it was\n"
    "  killed by signal N).\n"
    "\n"
    "Examples:\n"
    "  export REDLOCK_SERVERS=10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379\n"
    "  redlock run --ttl 30s --wait 5m nightly-backup -- /usr/local/bin/backup\n"
    "  tok=$(redlock acquire --ttl 1m deploy) || exit 1\n"
    "  redlock extend --ttl 1m deploy \"$tok\"; redlock release deploy \"$tok\"\n"
    "  redlock --json status deploy\n";

static struct {
  const char *servers_arg;
  int json;
  const char *prefix;
  unsigned quorum;
  int timeout_ms;
  int connect_timeout_ms;
  const char *restart_guard;
  int64_t ttl_ms;
  int64_t wait_ms;      /* -1: forever */
  int wait_given;
  int heal;
  int fence;
  int rw;   /* 0 plain, 1 --read, 2 --write */
  int wake;
  const char *also[REDLOCK_MAX_RESOURCES];
  int n_also;
  int64_t grace_ms;
  const char *token;
  const char *tls_ca, *tls_ca_dir, *tls_cert, *tls_key, *tls_key_pass_file;
  const char *tls_server_name;
  int tls_insecure;
} opt = {NULL, 0, NULL, 0, 0, 0, NULL, 30000, -1, 0, 0, 0, 0, 0, {NULL}, 0,
         10000, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};

/* A secret from a file: its first line, without the newline. NULL if the
 * file cannot be read (a message says why). */
static char *read_secret(const char *path) {
  static char buf[1024];
  FILE *f = fopen(path, "r");
  size_t n;
  if (f == NULL) {
    fprintf(stderr, "redlock: cannot read %s: %s\n", path, strerror(errno));
    return NULL;
  }
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  return buf;
}

static const char *opt_or_env(const char *v, const char *env) {
  const char *e;
  if (v != NULL)
    return v;
  e = getenv(env);
  return e != NULL && *e != '\0' ? e : NULL;
}

static uv_loop_t loop;
static redlock_client_t *client;
static redlock_lock_t *lock;
static const char *key;
static int exit_code = EXIT_FAIL;
static int finishing;          /* the exit code is decided */

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

static void usage_error(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "redlock: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'redlock --help'.\n");
  exit(EXIT_USAGE);
}

/* "500ms", "10s", "2m", "1h", "1.5s"; a bare number is seconds. */
static int parse_duration(const char *s, int64_t *out) {
  char *end;
  double v;
  double mult = 1000;
  if (s == NULL || *s == '\0')
    return -1;
  errno = 0;
  v = strtod(s, &end);
  if (errno != 0 || end == s || v < 0 || v != v)
    return -1;
  if (strcmp(end, "ms") == 0)
    mult = 1;
  else if (strcmp(end, "s") == 0 || *end == '\0')
    mult = 1000;
  else if (strcmp(end, "m") == 0)
    mult = 60000;
  else if (strcmp(end, "h") == 0)
    mult = 3600000;
  else
    return -1;
  v *= mult;
  if (v > (double)INT32_MAX)
    return -1;
  *out = (int64_t)(v + 0.5);
  return 0;
}

static int64_t duration_arg(const char *flag, const char *v) {
  int64_t d;
  if (parse_duration(v, &d) != 0)
    usage_error("bad duration for %s: '%s' (use e.g. 500ms, 10s, 2m)",
                flag, v ? v : "");
  return d;
}

/* ---- output -------------------------------------------------------------- */

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
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
  printf("\"nodes\":[");
  for (i = 0; i < r->n_nodes; i++) {
    const redlock_node_result *n = &r->nodes[i];
    printf("%s{\"server\":", i ? "," : "");
    json_str(n->server);
    printf(",\"vote\":\"%s\",\"latency_us\":%llu", vote_name(n->vote),
           (unsigned long long)n->latency_us);
    if (n->error != 0) {
      printf(",\"error\":\"%s\",\"detail\":", redlock_err_name(n->error));
      json_str(n->errstr);
    }
    putchar('}');
  }
  putchar(']');
}

static void report_result(const char *what, int status,
                          const redlock_result *r) {
  if (opt.json) {
    printf("{\"command\":\"%s\",\"key\":", what);
    json_str(key);
    printf(",\"ok\":%s,\"status\":\"%s\"", status == 0 ? "true" : "false",
           redlock_err_name(status));
    if (status == 0 && lock != NULL && redlock_lock_is_held(lock)) {
      printf(",\"token\":");
      json_str(redlock_lock_token(lock));
      printf(",\"validity_ms\":%lld",
             (long long)redlock_lock_validity_ms(lock));
      if (redlock_lock_fence(lock) != 0)
        printf(",\"fence\":%llu",
               (unsigned long long)redlock_lock_fence(lock));
    }
    printf(",\"yes\":%u,\"no\":%u,\"err\":%u,", r->yes, r->no, r->err);
    json_nodes(r);
    printf("}\n");
    return;
  }
  if (status != 0) {
    unsigned i;
    fprintf(stderr, "redlock: %s %s: %s (%u yes, %u no, %u errors)\n", what,
            key, redlock_strerror(status), r->yes, r->no, r->err);
    for (i = 0; i < r->n_nodes; i++)
      if (r->nodes[i].error != 0)
        fprintf(stderr, "  %s: %s %s\n", r->nodes[i].server,
                redlock_err_name(r->nodes[i].error), r->nodes[i].errstr);
  }
}

/* ---- shutdown ------------------------------------------------------------ */

static void on_client_closed(redlock_client_t *c, void *arg) {
  (void)c;
  (void)arg;
  client = NULL;
}

/* Ends the run with `code` (the first call decides; closing the client
 * cancels what is in flight, whose callbacks then come back here). */
static void finish(int code) {
  if (finishing)
    return;
  finishing = 1;
  exit_code = code;
  if (lock != NULL && redlock_lock_free(lock) == 0)
    lock = NULL;   /* released in the background if held */
  if (client != NULL)
    redlock_client_close(client, on_client_closed, NULL);
}

/* ---- acquire / extend / release / status --------------------------------- */

static void on_acquire_cmd(redlock_lock_t *l, int status,
                           const redlock_result *r, void *arg) {
  (void)arg;
  report_result("acquire", status, r);
  if (status == 0) {
    if (!opt.json && opt.fence)
      printf("%s %llu\n", redlock_lock_token(l),
             (unsigned long long)redlock_lock_fence(l));
    else if (!opt.json)
      printf("%s\n", redlock_lock_token(l));
    /* Keep the key: the caller releases it with the token. */
    redlock_lock_detach(l);
    lock = NULL;
    redlock_client_close(client, on_client_closed, NULL);
    exit_code = EXIT_OK;
    return;
  }
  finish(EXIT_NOT_ACQUIRED);
}

static void on_extend_cmd(redlock_lock_t *l, int status,
                          const redlock_result *r, void *arg) {
  (void)arg;
  report_result("extend", status, r);
  if (status == 0 && !opt.json)
    printf("%lld\n", (long long)redlock_lock_validity_ms(l));
  /* Do not release it: the lock stays with its owner. */
  redlock_lock_detach(l);
  lock = NULL;
  redlock_client_close(client, on_client_closed, NULL);
  exit_code = status == 0 ? EXIT_OK : EXIT_FAIL;
}

static void on_release_cmd(redlock_lock_t *l, int status,
                           const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  report_result("release", status, r);
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

static void on_status_cmd(redlock_lock_t *l, int status,
                          const redlock_result *r, void *arg) {
  unsigned i;
  unsigned held = 0;
  (void)l;
  (void)arg;
  for (i = 0; i < r->n_nodes; i++)
    held += r->nodes[i].vote == REDLOCK_VOTE_YES;
  if (opt.json) {
    printf("{\"command\":\"status\",\"key\":");
    json_str(key);
    printf(",\"ok\":%s,\"quorum\":%u,\"held_on\":%u,\"nodes\":[",
           status == 0 ? "true" : "false", redlock_client_quorum(client),
           held);
  } else {
    printf("key %s: held on %u of %u masters (quorum %u)\n", key, held,
           r->n_nodes, redlock_client_quorum(client));
    printf("%-28s %-9s %10s %-5s %10s  %s\n", "master", "reachable",
           "latency_us", "held", "pttl_ms", "holder");
  }
  for (i = 0; i < r->n_nodes; i++) {
    const redlock_node_result *n = &r->nodes[i];
    int up = n->vote == REDLOCK_VOTE_YES || n->vote == REDLOCK_VOTE_NO;
    int is_held = n->vote == REDLOCK_VOTE_YES;
    int mine = is_held && opt.token != NULL &&
               strcmp(n->holder, opt.token) == 0;
    char shown[16];
    /* Never print another owner's full token: 8 characters identify it. */
    snprintf(shown, sizeof(shown), "%.8s%s", n->holder,
             strlen(n->holder) > 8 ? "..." : "");
    if (opt.json) {
      printf("%s{\"server\":", i ? "," : "");
      json_str(n->server);
      printf(",\"reachable\":%s", up ? "true" : "false");
      if (up)
        printf(",\"latency_us\":%llu,\"held\":%s,\"pttl_ms\":%lld,"
               "\"mine\":%s,\"holder\":",
               (unsigned long long)n->latency_us, is_held ? "true" : "false",
               (long long)n->pttl_ms, mine ? "true" : "false");
      if (up)
        json_str(is_held ? shown : "");
      else {
        printf(",\"error\":");
        json_str(n->errstr);
      }
      putchar('}');
    } else if (up) {
      printf("%-28s %-9s %10llu %-5s %10lld  %s%s\n", n->server, "yes",
             (unsigned long long)n->latency_us, is_held ? "yes" : "no",
             (long long)(is_held ? n->pttl_ms : -2), is_held ? shown : "-",
             mine ? " (mine)" : "");
    } else {
      printf("%-28s %-9s %10s %-5s %10s  %s\n", n->server, "no", "-", "-",
             "-", n->errstr);
    }
  }
  if (opt.json)
    printf("]}\n");
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

/* ---- run ---------------------------------------------------------------- */

static uv_process_t child;
static int child_running;
static uv_signal_t sig_int, sig_term, sig_hup;
static uv_timer_t grace_timer;
static int signals_open;
static int lost;
static char **child_argv;

/* Once: a signal while waiting and the acquisition's callback both end
 * the run. */
static void close_signals(void) {
  if (!signals_open)
    return;
  signals_open = 0;
  uv_close((uv_handle_t *)&sig_int, NULL);
  uv_close((uv_handle_t *)&sig_term, NULL);
  uv_close((uv_handle_t *)&sig_hup, NULL);
  uv_close((uv_handle_t *)&grace_timer, NULL);
}

static void on_child_exit(uv_process_t *p, int64_t status, int sig) {
  int code;
  child_running = 0;
  uv_close((uv_handle_t *)p, NULL);
  close_signals();
  code = sig != 0 ? 128 + sig : (int)status;
  if (lost) {
    fprintf(stderr, "redlock: lock on %s was lost; command terminated\n",
            key);
    code = EXIT_LOST;
  }
  finish(code);   /* releases the lock (auto-extension stops first) */
}

static void on_grace_over(uv_timer_t *t) {
  (void)t;
  if (child_running) {
    fprintf(stderr, "redlock: command still running after the grace "
                    "period: SIGKILL\n");
    uv_process_kill(&child, SIGKILL);
  }
}

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  (void)l;
  (void)arg;
  lost = 1;
  fprintf(stderr, "redlock: lock on %s lost (%s): sending SIGTERM\n", key,
          reason == REDLOCK_ENOTHELD ? "a majority says it is not ours"
                                     : "validity ran out");
  if (child_running) {
    uv_process_kill(&child, SIGTERM);
    uv_timer_start(&grace_timer, on_grace_over, (uint64_t)opt.grace_ms, 0);
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)h;
  if (child_running) {
    uv_process_kill(&child, signum);   /* forward; the child decides */
    return;
  }
  /* Still waiting for the lock: give up. */
  close_signals();
  finish(128 + signum);
}

static void start_child(void) {
  uv_process_options_t po;
  static char env_key[4096];
  static char env_tok[256];
  static char env_fence[64];
  extern char **environ;
  static char **envp;
  size_t n = 0;
  size_t i;
  int rc;
  while (environ[n] != NULL)
    n++;
  envp = calloc(n + 4, sizeof(*envp));
  if (envp == NULL) {
    finish(EXIT_FAIL);
    return;
  }
  for (i = 0; i < n; i++)
    envp[i] = environ[i];
  snprintf(env_key, sizeof(env_key), "REDLOCK_KEY=%s", key);
  snprintf(env_tok, sizeof(env_tok), "REDLOCK_TOKEN=%s",
           redlock_lock_token(lock));
  envp[n] = env_key;
  envp[n + 1] = env_tok;
  if (opt.fence) {
    snprintf(env_fence, sizeof(env_fence), "REDLOCK_FENCE=%llu",
             (unsigned long long)redlock_lock_fence(lock));
    envp[n + 2] = env_fence;
  }
  memset(&po, 0, sizeof(po));
  po.file = child_argv[0];
  po.args = child_argv;
  po.env = envp;
  po.exit_cb = on_child_exit;
  po.stdio_count = 3;
  {
    static uv_stdio_container_t stdio[3];
    for (i = 0; i < 3; i++) {
      stdio[i].flags = UV_INHERIT_FD;
      stdio[i].data.fd = (int)i;
    }
    po.stdio = stdio;
  }
  rc = uv_spawn(&loop, &child, &po);
  free(envp);
  if (rc != 0) {
    fprintf(stderr, "redlock: cannot run %s: %s\n", child_argv[0],
            uv_strerror(rc));
    close_signals();
    finish(EXIT_NOEXEC);
    return;
  }
  child_running = 1;
}

static void on_run_acquired(redlock_lock_t *l, int status,
                            const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  if (status != 0) {
    close_signals();
    if (finishing)
      return;   /* a signal ended the wait: its exit code stands */
    report_result("run", status, r);
    finish(status == REDLOCK_ECANCELED ? EXIT_FAIL : EXIT_NOT_ACQUIRED);
    return;
  }
  start_child();
}

/* ---- main ---------------------------------------------------------------- */

static int make_client(void) {
  static const char *servers[REDLOCK_MAX_SERVERS];
  redlock_client_config cfg;
  const char *list = opt.servers_arg ? opt.servers_arg
                                     : getenv("REDLOCK_SERVERS");
  char *copy;
  size_t n = 0;
  int rc;
  if (list == NULL || *list == '\0')
    usage_error("no servers: use --servers or set REDLOCK_SERVERS");
  copy = strdup(list);
  if (copy == NULL)
    return EXIT_FAIL;
  for (char *t = strtok(copy, ","); t != NULL; t = strtok(NULL, ",")) {
    if (n == REDLOCK_MAX_SERVERS)
      usage_error("too many servers (at most %d)", REDLOCK_MAX_SERVERS);
    servers[n++] = t;
  }
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = n;
  cfg.quorum = opt.quorum;
  cfg.key_prefix = opt.prefix;
  cfg.command_timeout_ms = opt.timeout_ms;
  cfg.connect_timeout_ms = opt.connect_timeout_ms;
  {
    const char *g = opt.restart_guard ? opt.restart_guard
                                      : getenv("REDLOCK_RESTART_GUARD");
    if (g != NULL && strcmp(g, "off") == 0) {
      cfg.restart_guard_ms = -1;
    } else if (g != NULL && *g != '\0') {
      int64_t d = duration_arg("--restart-guard", g);
      cfg.restart_guard_ms = d > 0 ? (int)d : -1;
    }
  }
  cfg.retry_delay_ms = 100;
  cfg.retry_jitter_ms = 50;
  cfg.tls_ca_file = opt_or_env(opt.tls_ca, "REDLOCK_TLS_CA");
  cfg.tls_ca_dir = opt_or_env(opt.tls_ca_dir, "REDLOCK_TLS_CA_DIR");
  cfg.tls_cert_file = opt_or_env(opt.tls_cert, "REDLOCK_TLS_CERT");
  cfg.tls_key_file = opt_or_env(opt.tls_key, "REDLOCK_TLS_KEY");
  cfg.tls_server_name =
      opt_or_env(opt.tls_server_name, "REDLOCK_TLS_SERVER_NAME");
  cfg.tls_insecure = opt.tls_insecure ||
                     opt_or_env(NULL, "REDLOCK_TLS_INSECURE") != NULL;
  {
    const char *pf = opt_or_env(opt.tls_key_pass_file,
                                "REDLOCK_TLS_KEY_PASSWORD_FILE");
    if (pf != NULL) {
      cfg.tls_key_password = read_secret(pf);
      if (cfg.tls_key_password == NULL)
        return EXIT_FAIL;
    }
  }
  cfg.password = getenv("REDLOCK_PASSWORD");
  cfg.username = cfg.password ? getenv("REDLOCK_USERNAME") : NULL;
  rc = redlock_client_new(&loop, &cfg, &client);
  if (rc == REDLOCK_EINVAL)
    usage_error("%s", redlock_last_error());
  if (rc != 0) {
    fprintf(stderr, "redlock: %s\n", redlock_last_error());
    return EXIT_FAIL;
  }
  if (opt.rw != 0 && (opt.n_also > 0 || opt.fence))
    usage_error("--read/--write do not combine with --also or --fence");
  if (opt.rw != 0) {
    rc = redlock_rwlock_new(client, key, strlen(key),
                            opt.rw == 2 ? REDLOCK_WRITE : REDLOCK_READ, &lock);
  } else {
    const void *res[REDLOCK_MAX_RESOURCES];
    size_t lens[REDLOCK_MAX_RESOURCES];
    int k;
    res[0] = key;
    lens[0] = strlen(key);
    for (k = 0; k < opt.n_also; k++) {
      res[k + 1] = opt.also[k];
      lens[k + 1] = strlen(opt.also[k]);
    }
    rc = redlock_lock_new_multi(client, res, lens, (size_t)opt.n_also + 1,
                                &lock);
  }
  if (rc != 0)
    usage_error("%s", redlock_last_error());
  free(copy);   /* the client copied the addresses */
  return 0;
}

static int is_flag(const char *a, const char *name) {
  return strcmp(a, name) == 0;
}

int main(int argc, char **argv) {
  const char *cmd;
  int i = 1;
  int rc;
  redlock_acquire_opts ao;

  /* A closed pipe (stdout to `head`, a master's socket) must be an error
   * to handle, never a signal that kills us while a child runs under our
   * lock. (The library sends with MSG_NOSIGNAL; libuv resets the child's
   * signal dispositions before exec.) */
  signal(SIGPIPE, SIG_IGN);

  /* Global options. */
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (is_flag(a, "-h") || is_flag(a, "--help")) {
      fputs(usage_text, stdout);
      return EXIT_OK;
    } else if (is_flag(a, "--version")) {
      printf("redlock %s\n", redlock_version_string());
      return EXIT_OK;
    } else if (is_flag(a, "--json")) {
      opt.json = 1;
      continue;
    } else if (is_flag(a, "--tls-insecure")) {
      opt.tls_insecure = 1;
      continue;
    }
    if (v == NULL)
      usage_error("%s needs a value", a);
    if (is_flag(a, "--tls-ca")) {
      opt.tls_ca = v;
    } else if (is_flag(a, "--tls-ca-dir")) {
      opt.tls_ca_dir = v;
    } else if (is_flag(a, "--tls-cert")) {
      opt.tls_cert = v;
    } else if (is_flag(a, "--tls-key")) {
      opt.tls_key = v;
    } else if (is_flag(a, "--tls-key-pass-file")) {
      opt.tls_key_pass_file = v;
    } else if (is_flag(a, "--tls-server-name")) {
      opt.tls_server_name = v;
    } else if (is_flag(a, "--servers")) {
      opt.servers_arg = v;
    } else if (is_flag(a, "--prefix")) {
      opt.prefix = v;
    } else if (is_flag(a, "--quorum")) {
      char *end;
      long q = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || q < 1 || q > REDLOCK_MAX_SERVERS)
        usage_error("bad --quorum '%s'", v);
      opt.quorum = (unsigned)q;
    } else if (is_flag(a, "--timeout")) {
      opt.timeout_ms = (int)duration_arg(a, v);
      if (opt.timeout_ms == 0)
        usage_error("--timeout must be > 0");
    } else if (is_flag(a, "--restart-guard")) {
      opt.restart_guard = v;
    } else if (is_flag(a, "--connect-timeout")) {
      opt.connect_timeout_ms = (int)duration_arg(a, v);
      if (opt.connect_timeout_ms == 0)
        usage_error("--connect-timeout must be > 0");
    } else {
      usage_error("unknown option '%s'", a);
    }
    i++;
  }
  if (i >= argc)
    usage_error("no command");
  cmd = argv[i++];
  if (!is_flag(cmd, "run") && !is_flag(cmd, "acquire") &&
      !is_flag(cmd, "extend") && !is_flag(cmd, "release") &&
      !is_flag(cmd, "status"))
    usage_error("unknown command '%s'", cmd);

  /* Command options, then positional arguments. */
  for (; i < argc && argv[i][0] == '-' && !is_flag(argv[i], "--"); i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (is_flag(a, "--heal") && is_flag(cmd, "run")) {
      opt.heal = 1;
      continue;
    }
    if (is_flag(a, "--fence") &&
        (is_flag(cmd, "run") || is_flag(cmd, "acquire"))) {
      opt.fence = 1;
      continue;
    }
    if ((is_flag(a, "--read") || is_flag(a, "--write")) &&
        !is_flag(cmd, "status")) {
      opt.rw = is_flag(a, "--read") ? 1 : 2;
      continue;
    }
    if (is_flag(a, "--wake") &&
        (is_flag(cmd, "run") || is_flag(cmd, "acquire"))) {
      opt.wake = 1;
      continue;
    }
    if (is_flag(a, "--json")) {
      opt.json = 1;
      continue;
    }
    if (v == NULL)
      usage_error("%s needs a value", a);
    if (is_flag(a, "--ttl") && !is_flag(cmd, "release") &&
        !is_flag(cmd, "status")) {
      opt.ttl_ms = duration_arg(a, v);
      if (opt.ttl_ms <= 0)
        usage_error("--ttl must be > 0");
    } else if (is_flag(a, "--wait") &&
               (is_flag(cmd, "run") || is_flag(cmd, "acquire"))) {
      opt.wait_ms = duration_arg(a, v);
      opt.wait_given = 1;
    } else if (is_flag(a, "--also") && !is_flag(cmd, "status")) {
      if (opt.n_also == REDLOCK_MAX_RESOURCES - 1)
        usage_error("too many --also (at most %d)",
                    REDLOCK_MAX_RESOURCES - 1);
      if (*v == '\0')
        usage_error("--also needs a non-empty KEY");
      opt.also[opt.n_also++] = v;
    } else if (is_flag(a, "--grace") && is_flag(cmd, "run")) {
      opt.grace_ms = duration_arg(a, v);
    } else if (is_flag(a, "--token") && is_flag(cmd, "status")) {
      opt.token = v;
    } else {
      usage_error("unknown option '%s' for %s", a, cmd);
    }
    i++;
  }
  if (i >= argc || argv[i][0] == '\0')
    usage_error("%s: missing KEY", cmd);
  key = argv[i++];
  if (is_flag(cmd, "run")) {
    if (i >= argc || !is_flag(argv[i], "--") || i + 1 >= argc)
      usage_error("run: expected KEY -- CMD [ARGS...]");
    child_argv = argv + i + 1;
  } else if (is_flag(cmd, "extend") || is_flag(cmd, "release")) {
    if (i + 1 != argc)
      usage_error("%s: expected KEY TOKEN", cmd);
    opt.token = argv[i];
  } else if (i != argc) {
    usage_error("%s: unexpected argument '%s'", cmd, argv[i]);
  }

  if (uv_loop_init(&loop) != 0)
    return EXIT_FAIL;
  rc = make_client();
  if (rc != 0)
    return rc;

  memset(&ao, 0, sizeof(ao));
  if (is_flag(cmd, "acquire") || is_flag(cmd, "run")) {
    int64_t wait = opt.wait_ms;
    if (!opt.wait_given && is_flag(cmd, "acquire"))
      wait = 0;
    if (wait == 0) {
      ao.wait_ms = -1;                  /* one attempt */
    } else if (wait > 0) {
      ao.wait_ms = (int)wait;
      ao.retry_count = INT_MAX;
    } else {
      ao.retry_count = INT_MAX;         /* forever */
    }
  }
  if (is_flag(cmd, "run")) {
    ao.auto_extend = 1;
    ao.heal = opt.heal;
    ao.fence = opt.fence;
    ao.wake = opt.wake;
    ao.on_lost = on_lost;
    uv_signal_init(&loop, &sig_int);
    uv_signal_init(&loop, &sig_term);
    uv_signal_init(&loop, &sig_hup);
    uv_timer_init(&loop, &grace_timer);
    signals_open = 1;
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_hup, on_signal, SIGHUP);
    rc = redlock_lock_acquire(lock, opt.ttl_ms, &ao, on_run_acquired, NULL);
  } else if (is_flag(cmd, "acquire")) {
    ao.fence = opt.fence;
    ao.wake = opt.wake;
    rc = redlock_lock_acquire(lock, opt.ttl_ms, &ao, on_acquire_cmd, NULL);
  } else if (is_flag(cmd, "extend")) {
    rc = redlock_lock_adopt(lock, opt.token);
    if (rc == 0)
      rc = redlock_lock_extend(lock, opt.ttl_ms, on_extend_cmd, NULL);
  } else if (is_flag(cmd, "release")) {
    rc = redlock_lock_adopt(lock, opt.token);
    if (rc == 0)
      rc = redlock_lock_release(lock, on_release_cmd, NULL);
  } else {
    rc = redlock_lock_inspect(lock, on_status_cmd, NULL);
  }
  if (rc == REDLOCK_EINVAL)
    usage_error("%s", redlock_last_error());
  if (rc != 0) {
    fprintf(stderr, "redlock: %s\n", redlock_last_error());
    finish(EXIT_FAIL);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return exit_code;
}
