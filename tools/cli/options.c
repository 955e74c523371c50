/* options.c: the option table, parsing (options before or after the
 * command, --opt=value, flock(1)'s short forms), durations, strict
 * booleans, credentials kept out of ps and of the child. */
#include "cli.h"

static const char usage_text[] =
    "usage: redlock [OPTIONS] COMMAND [OPTIONS] ARGS\n"
    "\n"
    "A distributed lock over N independent Redis masters (Redlock).\n"
    "\n"
    "Commands (redlock COMMAND --help for each):\n"
    "  run KEY -- CMD [ARGS...]  hold KEY while CMD runs (like flock)\n"
    "  acquire KEY               acquire KEY and print its token\n"
    "  extend KEY TOKEN          extend a lock held under TOKEN\n"
    "  release KEY TOKEN         release a lock held under TOKEN\n"
    "  status KEY                show KEY on every master\n"
    "  elect KEY -- CMD...       run CMD only while this process is\n"
    "                            KEY's leader; campaign again when it is not\n"
    "  leader KEY                who leads KEY, and for how long (--watch:\n"
    "                            one line per change)\n"
    "  stats                     each master's counters and latency\n"
    "                            (Prometheus text)\n"
    "  unlock --force KEY        an operator's forced release (any holder)\n"
    "  limit KEY K               change the counting semaphore KEY's limit\n"
    "                            (run/status/unlock --limit K: one of K\n"
    "                            permits; see redlock run --help)\n"
    "  guard                     each master's restart-guard state: does\n"
    "                            its vote count, why not, the ttl record\n"
    "  ls [PREFIX]               the locks held under PREFIX (SCAN, bounded)\n"
    "  completion bash|zsh       a shell completion script (source it)\n"
    "\n";

/* (Split in three: C99 promises string literals of 4095 bytes.) */
static const char usage_options[] =
    "Options for every command (before or after it):\n"
    "  --servers LIST     masters, comma-separated (default $REDLOCK_SERVERS):\n"
    "                     host:port, redis://[user[:pass]@]host[:port][/db],\n"
    "                     rediss://... (TLS), unix:///path; a Redis Cluster:\n"
    "                     redis+cluster://host:port[?seed=host:port...];\n"
    "                     a Sentinel group: redis+sentinel://host:port/NAME\n"
    "                     [?sentinel=host:port...]; each counts as one master\n"
    "  --password-file F  password for masters without one in their URI\n"
    "                     (first line of F; also $REDLOCK_PASSWORD_FILE,\n"
    "                     or $REDLOCK_PASSWORD; user: $REDLOCK_USERNAME)\n"
    "  --json             machine-readable output (one JSON object)\n"
    "  --prefix P         key prefix\n"
    "  --quorum N         votes needed (default N/2+1; only raised)\n"
    "  --command-timeout D  per-master command timeout (default 50ms);\n"
    "                     --timeout D: its deprecated spelling, except for\n"
    "                     run and acquire, where --timeout is the wait\n"
    "  --connect-timeout D  connect timeout (default 250ms); also how long\n"
    "                     masters that refuse connections or never answer\n"
    "                     may keep a quorum out before run/acquire/elect\n"
    "                     give up (exit 69 or 74; default 5s)\n"
    "  --restart-guard D|off  a master younger than D does not count for\n"
    "                     acquisitions (default: the longest ttl in use; also\n"
    "                     $REDLOCK_RESTART_GUARD)\n"
    "  --durable          declare every master durable: it runs appendonly\n"
    "                     yes + appendfsync always and always has (no\n"
    "                     CONFIG SET of either at run time); its restarts\n"
    "                     then need no guard window. Verified at every\n"
    "                     handshake and every 3 s; one master:\n"
    "                     redis://host:port?durable=1 ($REDLOCK_DURABLE=1)\n"
    "  --max-ttl D        the deployment's cap on ttls (default 1h; also\n"
    "                     $REDLOCK_MAX_TTL): longer ones are refused\n"
    "  -q, --quiet        no warnings and no progress messages on stderr; a\n"
    "                     busy lock (75) refused silently\n"
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
    "  -h, --help         help (for a command: redlock COMMAND --help)\n"
    "  -V, --version      the version\n"
    "\n"
    "Durations: 500ms, 10s, 1m30s, 2h, 1d; a bare number is seconds.\n"
    "Booleans in the environment: 1/0, true/false, yes/no (else exit 78).\n"
    "Passwords never need argv: a password given there is hidden from ps\n"
    "once read, but use --password-file or the environment.\n"
    "\n";

static const char usage_exits[] =
    "Exit codes:\n"
    "  0    ok\n"
    "  1    extend/release/status failed (not held, no quorum, unreachable);\n"
    "       status/stats/guard/leader/extend/ls: stdout closed or full\n"
    "  64   usage error\n"
    "  69   too few masters accept connections (refused); ls: too few\n"
    "       masters could be read\n"
    "  73   --stats-file cannot be written\n"
    "  74   too few masters answer (they take connections but never reply:\n"
    "       a firewall that drops, a hung proxy); each is named once; ls:\n"
    "       the deadline passed before a quorum of masters was read\n"
    "  75   not acquired (held by another owner, or no quorum within --wait)\n"
    "  76   run: the lock was lost; the command was terminated\n"
    "  77   no quorum of masters accepts the credentials\n"
    "  78   a bad value in the environment (REDLOCK_*, named), an unreadable\n"
    "       password file, or no quorum accepts\n"
    "       the configuration (TLS verification, SELECT); --limit K differs\n"
    "       from the semaphore's limit on the masters\n"
    "  126  run: the command was found but could not be executed\n"
    "  127  run: the command could not be started (not found)\n"
    "  143  run, elect: stopped by SIGTERM (the command was killed after\n"
    "       --grace)\n"
    "  run otherwise exits with the command's status (128+N if it was\n"
    "  killed by signal N).\n"
    "\n"
    "Examples:\n"
    "  export REDLOCK_SERVERS=10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379\n"
    "  redlock run --ttl 30s --wait 5m nightly-backup -- /usr/local/bin/backup\n"
    "  tok=$(redlock acquire --ttl 1m deploy) || exit 1\n"
    "  redlock extend --ttl 1m deploy \"$tok\"; redlock release deploy \"$tok\"\n"
    "  redlock status deploy\n";


cli_opts opt = {NULL, NULL, NULL, 0, NULL, 0, 0, 0, NULL, 30000, -1, 0, 0, 0, 0, 0,
         {NULL}, 0, 10000, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0,
         NULL, 0, 0, NULL, 0, 0, 0, 0, -1, 0, EXIT_NOT_ACQUIRED, 0, 0, 0, 0,
         -1, 0, NULL, 0, NULL, -1, 0, 0, 0};

const char *labels[MAX_LABELS];
int n_labels;

static const optdef options[] = {
    {"servers", 0, 1, C_ALL, O_SERVERS},
    {"password-file", 0, 1, C_ALL, O_PASSWORD_FILE},
    {"json", 0, 0, C_ALL, O_JSON},
    {"prefix", 0, 1, C_ALL, O_PREFIX},
    {"quorum", 0, 1, C_ALL, O_QUORUM},
    {"command-timeout", 0, 1, C_ALL, O_TIMEOUT},
    /* run, acquire: the wait (flock's); elsewhere deprecated: the
     * command timeout's old spelling (one release). */
    {"timeout", 0, 1, C_ALL, O_TIMEOUT_OLD},
    {"connect-timeout", 0, 1, C_ALL, O_CONNECT_TIMEOUT},
    {"restart-guard", 0, 1, C_ALL, O_RESTART_GUARD},
    {"tls-ca", 0, 1, C_ALL, O_TLS_CA},
    {"tls-ca-dir", 0, 1, C_ALL, O_TLS_CA_DIR},
    {"tls-cert", 0, 1, C_ALL, O_TLS_CERT},
    {"tls-key", 0, 1, C_ALL, O_TLS_KEY},
    {"tls-key-pass-file", 0, 1, C_ALL, O_TLS_KEY_PASS_FILE},
    {"tls-server-name", 0, 1, C_ALL, O_TLS_SERVER_NAME},
    {"tls-insecure", 0, 0, C_ALL, O_TLS_INSECURE},
    {"durable", 0, 0, C_ALL, O_DURABLE},
    {"max-ttl", 0, 1, C_ALL, O_MAX_TTL},
    {"quiet", 'q', 0, C_ALL, O_QUIET},
    {"set-record", 0, 1, C_GUARD, O_SET_RECORD},
    /* flock(1)'s spellings */
    {"nonblock", 'n', 0, C_RUN | C_ACQUIRE, O_NOWAIT},
    {"timeout-secs", 'w', 1, C_RUN | C_ACQUIRE, O_WAIT_SECS},
    {"conflict-exit-code", 'E', 1, C_RUN | C_ACQUIRE, O_CONFLICT_EXIT},
    {"shared", 's', 0, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE, O_SHARED},
    {"exclusive", 'x', 0, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE,
     O_EXCLUSIVE},
    {"close", 'o', 0, C_RUN, O_CLOSE},
    {"command", 'c', 1, C_RUN | C_ELECT, O_SHELL_CMD},
    {"verbose", 0, 0, C_RUN | C_ACQUIRE, O_VERBOSE},
    {"json-file", 0, 1, C_RUN | C_ELECT, O_JSON_FILE},
    {"json-fd", 0, 1, C_RUN | C_ELECT, O_JSON_FD},
    {"prometheus", 0, 0, C_STATS, O_PROMETHEUS},
    {"help", 'h', 0, C_ALL, O_HELP},
    {"version", 'V', 0, C_ALL, O_VERSION},
    {"ttl", 0, 1, C_RUN | C_ACQUIRE | C_EXTEND | C_ELECT, O_TTL},
    {"wait", 0, 1, C_RUN | C_ACQUIRE | C_LS, O_WAIT},
    {"max", 0, 1, C_LS, O_MAX},
    {"grace", 0, 1, C_RUN | C_ELECT, O_GRACE},
    {"heal", 0, 0, C_RUN, O_HEAL},
    {"fence", 0, 0, C_RUN | C_ACQUIRE, O_FENCE},
    {"wake", 0, 0, C_RUN | C_ACQUIRE, O_WAKE},
    {"also", 0, 1, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE | C_UNLOCK,
     O_ALSO},
    {"read", 0, 0, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE, O_READ},
    {"write", 0, 0, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE, O_WRITE},
    {"token", 0, 1, C_STATUS, O_TOKEN},
    {"id", 0, 1, C_RUN | C_ACQUIRE | C_ELECT, O_ID},
    {"no-id", 0, 0, C_RUN | C_ACQUIRE, O_NO_ID},
    {"once", 0, 0, C_ELECT, O_ONCE},
    {"stats", 0, 0, C_STATUS, O_STATS},
    {"stats-file", 0, 1, C_RUN | C_ELECT, O_STATS_FILE},
    {"stats-label", 0, 1, C_RUN | C_ELECT, O_STATS_LABEL},
    {"force", 0, 0, C_UNLOCK, O_FORCE},
    {"watch", 0, 0, C_LEADER, O_WATCH},
    {"limit", 0, 1, C_RUN | C_STATUS | C_UNLOCK, O_LIMIT},
    {"permit", 0, 1, C_UNLOCK, O_PERMIT},
};
#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

void usage_error(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "redlock: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (cmd_name != NULL)
    fprintf(stderr, "\nTry 'redlock %s --help'.\n", cmd_name);
  else
    fprintf(stderr, "\nTry 'redlock --help'.\n");
  exit(EXIT_USAGE);
}

/* A secret from a file: its first line, without the newline. An
 * unreadable file is a configuration error (78), named with the option or
 * variable `what` that gave it. */
char *read_secret(const char *path, const char *what, char *buf,
                  size_t len) {
  FILE *f = fopen(path, "r");
  size_t n;
  if (f == NULL)
    config_error("cannot read %s '%s': %s", what, path, strerror(errno));
  n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  return buf;
}

/* A bad value in the environment: EX_CONFIG, with what is wrong. */
void config_error(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "redlock: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(EXIT_CONFIG);
}

/* A boolean from the environment, strictly: 1/true/yes or 0/false/no
 * (any case); unset or empty is `dflt`; anything else is an error, never
 * a guess (REDLOCK_TLS_INSECURE=0 once turned verification off). */
int env_bool(const char *name, int dflt) {
  static const char *const yes[] = {"1", "true", "yes"};
  static const char *const no[] = {"0", "false", "no"};
  const char *v = getenv(name);
  size_t i;
  if (v == NULL || *v == '\0')
    return dflt;
  for (i = 0; i < 3; i++) {
    if (strcasecmp(v, yes[i]) == 0)
      return 1;
    if (strcasecmp(v, no[i]) == 0)
      return 0;
  }
  config_error("%s='%s' is not a boolean (1/0, true/false, yes/no)", name,
               v);
}

/* The library's last message for an operator: without the C function it
 * names ("redlock_lock_new: key too long" -> "key too long"). */
const char *lib_error(void) {
  const char *e = redlock_last_error();
  const char *colon = strstr(e, ": ");
  size_t i;
  if (strncmp(e, "redlock_", 8) != 0 || colon == NULL)
    return e;
  for (i = 0; e + i < colon; i++)
    if (!((e[i] >= 'a' && e[i] <= 'z') || e[i] == '_'))
      return e;
  return colon + 2;
}

const char *opt_or_env(const char *v, const char *env) {
  const char *e;
  if (v != NULL)
    return v;
  e = getenv(env);
  return e != NULL && *e != '\0' ? e : NULL;
}

/* "500ms", "10s", "2m", "1h", "1d", "1.5s", and sums of them in
 * decreasing units as Go writes them ("1m30s", "1h2m3.5s"); a bare number
 * is seconds. Only decimal digits: "1e3", "0x10", "inf", " 5" and "-1s"
 * are errors, not values strtod would make of them. */
int parse_duration(const char *s, int64_t *out) {
  static const struct {
    const char *unit;
    double ms;
  } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},
               {"d", 86400000}};
  double total = 0;
  double last_unit = 1e18;   /* units must decrease: "1s1m" is a typo */
  const char *p = s;
  if (s == NULL || *s == '\0')
    return -1;
  while (*p != '\0') {
    double v = 0, scale = 1, mult = -1;
    int digits = 0;
    size_t u;
    while (*p >= '0' && *p <= '9') {
      v = v * 10 + (*p++ - '0');
      digits++;
    }
    if (*p == '.') {
      p++;
      while (*p >= '0' && *p <= '9') {
        scale /= 10;
        v += (*p++ - '0') * scale;
        digits++;
      }
    }
    if (digits == 0 || v > 1e12)
      return -1;
    if (*p == '\0' && p == s + strlen(s) && total == 0 &&
        last_unit == 1e18) {
      mult = 1000;   /* a bare number: seconds */
    } else {
      for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        size_t n = strlen(units[u].unit);
        /* "ms" before "m": "5ms" is not "5m" + "s". */
        if (strncmp(p, units[u].unit, n) == 0 &&
            !(n == 1 && p[0] == 'm' && p[1] == 's')) {
          mult = units[u].ms;
          p += n;
          break;
        }
      }
      if (mult < 0 || mult >= last_unit)
        return -1;
      last_unit = mult;
    }
    total += v * mult;
  }
  if (total > (double)INT32_MAX)
    return -1;
  *out = (int64_t)(total + 0.5);
  return 0;
}

int64_t duration_arg(const char *flag, const char *v) {
  int64_t d;
  if (parse_duration(v, &d) != 0)
    usage_error("bad duration for %s: '%s' (use e.g. 500ms, 10s, 1m30s, "
                "2h, 1d; at most 24.8 days)", flag, v ? v : "");
  return d;
}

/* In a server list, the password of each URI: [start, end) offsets of
 * "pass" in scheme://user:pass@host... Calls fn for each. */
static void each_password(char *list, void (*fn)(char *p, size_t n)) {
  char *item = list;
  while (item != NULL && *item != '\0') {
    char *next = strchr(item, ',');
    char *end = next != NULL ? next : item + strlen(item);
    char *scheme = strstr(item, "://");
    if (scheme != NULL && scheme < end) {
      char *auth = scheme + 3;
      char *slash = auth;
      char *at = NULL;
      char *p;
      while (slash < end && *slash != '/' && *slash != '?')
        slash++;
      for (p = auth; p < slash; p++)
        if (*p == '@')
          at = p;   /* the last '@': a password may contain one */
      if (at != NULL) {
        char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon != NULL)
          fn(colon + 1, (size_t)(at - colon - 1));
      }
    }
    item = next != NULL ? next + 1 : NULL;
  }
}

static void star_out(char *p, size_t n) {
  memset(p, '*', n);
}

/* The list without any user[:password]@ (for the child's environment). */
char *strip_userinfo(const char *list) {
  char *out = malloc(strlen(list) + 1);
  const char *item = list;
  char *o = out;
  if (out == NULL)
    return NULL;
  while (*item != '\0') {
    const char *next = strchr(item, ',');
    const char *end = next != NULL ? next : item + strlen(item);
    const char *scheme = strstr(item, "://");
    const char *copy_from = item;
    if (scheme != NULL && scheme < end) {
      const char *auth = scheme + 3;
      const char *slash = auth;
      const char *at = NULL;
      const char *p;
      while (slash < end && *slash != '/' && *slash != '?')
        slash++;
      for (p = auth; p < slash; p++)
        if (*p == '@')
          at = p;
      if (at != NULL) {
        memcpy(o, item, (size_t)(auth - item));
        o += auth - item;
        copy_from = at + 1;
      }
    }
    memcpy(o, copy_from, (size_t)(end - copy_from));
    o += end - copy_from;
    if (next == NULL)
      break;
    *o++ = ',';
    item = next + 1;
  }
  *o = '\0';
  return out;
}

/* A semaphore's limit (--limit K, limit KEY K): 1..REDLOCK_MAX_PERMITS. */
unsigned parse_limit(const char *flag, const char *v) {
  char *end;
  long k = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || k < 1 || k > REDLOCK_MAX_PERMITS)
    usage_error("bad %s '%s' (1..%d)", flag, v, REDLOCK_MAX_PERMITS);
  return (unsigned)k;
}

static const optdef *find_long(const char *name, size_t len) {
  size_t i;
  for (i = 0; i < N_OPTIONS; i++)
    if (strlen(options[i].name) == len &&
        strncmp(options[i].name, name, len) == 0)
      return &options[i];
  return NULL;
}

static const optdef *find_short(char c) {
  size_t i;
  for (i = 0; i < N_OPTIONS; i++)
    if (options[i].shortname == c)
      return &options[i];
  return NULL;
}

static int find_command(const char *a) {
  size_t i;
  for (i = 0; i < n_cli_commands; i++)
    if (strcmp(cli_commands[i].name, a) == 0)
      return (int)i;
  return -1;
}

/* The command word: the first argument that is neither an option nor an
 * option's value. -1 if none; *help_cmd set for "help CMD". */
static int scan_command(int argc, char **argv, int *at) {
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0)
      return -1;
    if (a[0] == '-' && a[1] == '-') {
      const char *eq = strchr(a + 2, '=');
      const optdef *o = find_long(a + 2, eq ? (size_t)(eq - a - 2)
                                            : strlen(a + 2));
      if (o != NULL && o->has_arg && eq == NULL)
        i++;
      continue;
    }
    if (a[0] == '-' && a[1] != '\0')
      continue;
    *at = i;
    return find_command(a);
  }
  return -1;
}

/* `redlock completion bash|zsh`: a completion script made from the tables
 * (options[], cli_commands), so that it cannot drift from them. Commands
 * after the global options; each command's options (and the global ones);
 * an option's value and the rest: file names. zsh runs the bash function
 * through bashcompinit. */
static void completion(int argc, char **argv, int at) {
  const char *shell = at + 1 < argc ? argv[at + 1] : "";
  size_t i, c;
  int first;
  if (at + 2 < argc || (strcmp(shell, "bash") != 0 &&
                        strcmp(shell, "zsh") != 0))
    usage_error("usage: redlock completion bash|zsh");
  if (strcmp(shell, "zsh") == 0)
    printf("#compdef redlock\n# redlock completion zsh: source it, or put it "
           "in a directory of $fpath as _redlock\n"
           "autoload -U +X bashcompinit && bashcompinit\n");
  else
    printf("# redlock completion bash: source it (e.g. from "
           "~/.bashrc, or as /etc/bash_completion.d/redlock)\n");
  printf("_redlock() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd= i w opts\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    w=\"${COMP_WORDS[i]}\"\n"
         "    case \"$w\" in\n"
         "      --) break ;;\n");
  /* Options that take a value: the word after them is not the command. */
  first = 1;
  for (i = 0; i < N_OPTIONS; i++) {
    if (!options[i].has_arg)
      continue;
    printf("%s--%s", first ? "      " : "|", options[i].name);
    if (options[i].shortname != 0)
      printf("|-%c", options[i].shortname);
    first = 0;
  }
  printf(") ((i++)) ;;\n"
         "      -*) ;;\n"
         "      *) [ -z \"$cmd\" ] && cmd=\"$w\" ;;\n"
         "    esac\n"
         "  done\n"
         "  case \"$cmd\" in\n");
  for (c = 0; c <= n_cli_commands; c++) {
    unsigned bit = c < n_cli_commands ? cli_commands[c].bit : C_ALL;
    printf("    %s) opts=\"", c < n_cli_commands ? cli_commands[c].name
                                                  : "\"\"|completion|help");
    first = 1;
    for (i = 0; i < N_OPTIONS; i++) {
      /* a command's own and the global ones; before a command: global */
      if ((options[i].cmds & bit) == 0 ||
          (c == n_cli_commands && options[i].cmds != C_ALL))
        continue;
      printf("%s--%s", first ? "" : " ", options[i].name);
      first = 0;
    }
    printf("\" ;;\n");
  }
  printf("    *) opts= ;;\n"
         "  esac\n"
         "  if [ -z \"$cmd\" ] && [[ \"$cur\" != -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"");
  for (c = 0; c < n_cli_commands; c++)
    printf("%s ", cli_commands[c].name);
  printf("completion help\" -- \"$cur\"))\n"
         "  elif [[ \"$cur\" == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
         "  else\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "  fi\n"
         "}\n"
         "complete -F _redlock redlock\n");
  exit(EXIT_OK);
}

static void print_help(int cmd_index) {
  fputs(cmd_index >= 0 ? cli_commands[cmd_index].help : usage_text, stdout);
  if (cmd_index < 0) {
    fputs(usage_options, stdout);
    fputs(usage_exits, stdout);
  }
  exit(EXIT_OK);
}

static void set_option(const optdef *o, const char *v) {
  const char *flag = o->name;
  if (cmd_bit != 0 && !(o->cmds & cmd_bit))
    usage_error("--%s does not apply to %s", flag, cmd_name);
  switch (o->id) {
    case O_SERVERS:
      opt.servers_arg = v;
      break;
    case O_PASSWORD_FILE:
      opt.password_file = v;
      break;
    case O_JSON:
      opt.json = 1;
      break;
    case O_PREFIX:
      opt.prefix = v;
      break;
    case O_QUORUM: {
      char *end;
      long q = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || q < 1 || q > REDLOCK_MAX_SERVERS)
        usage_error("bad --quorum '%s' (1..%d)", v, REDLOCK_MAX_SERVERS);
      opt.quorum = (unsigned)q;
      break;
    }
    case O_TIMEOUT:
      opt.timeout_ms = (int)duration_arg("--command-timeout", v);
      if (opt.timeout_ms == 0)
        usage_error("--command-timeout must be > 0");
      break;
    case O_TIMEOUT_OLD:
      if (cmd_bit & (C_RUN | C_ACQUIRE)) {
        /* flock's -w/--timeout: the wait. */
        opt.wait_ms = duration_arg("--timeout", v);
        opt.wait_given = 1;
        if (opt.wait_ms < 1000)
          opt.timeout_old = 2;
      } else {
        opt.timeout_ms = (int)duration_arg("--timeout", v);
        if (opt.timeout_ms == 0)
          usage_error("--timeout must be > 0");
        opt.timeout_old = 1;
      }
      break;
    case O_SHELL_CMD:
      opt.shell_cmd = v;
      break;
    case O_VERBOSE:
      opt.verbose = 1;
      break;
    case O_JSON_FILE:
      opt.json_file = v;
      opt.json = 1;
      break;
    case O_JSON_FD: {
      char *end;
      long fd = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || fd < 0 || fd > 1024)
        usage_error("bad --json-fd '%s' (a descriptor number)", v);
      opt.json_fd = (int)fd;
      opt.json = 1;
      break;
    }
    case O_PROMETHEUS:
      opt.prometheus = 1;
      break;
    case O_CONNECT_TIMEOUT:
      opt.connect_timeout_ms = (int)duration_arg("--connect-timeout", v);
      if (opt.connect_timeout_ms == 0)
        usage_error("--connect-timeout must be > 0");
      break;
    case O_RESTART_GUARD:
      opt.restart_guard = v;
      break;
    case O_TLS_CA:
      opt.tls_ca = v;
      break;
    case O_TLS_CA_DIR:
      opt.tls_ca_dir = v;
      break;
    case O_TLS_CERT:
      opt.tls_cert = v;
      break;
    case O_TLS_KEY:
      opt.tls_key = v;
      break;
    case O_TLS_KEY_PASS_FILE:
      opt.tls_key_pass_file = v;
      break;
    case O_TLS_SERVER_NAME:
      opt.tls_server_name = v;
      break;
    case O_TLS_INSECURE:
      opt.tls_insecure = 1;
      break;
    case O_DURABLE:
      opt.durable = 1;
      break;
    case O_MAX_TTL:
      opt.max_ttl_ms = duration_arg("--max-ttl", v);
      if (opt.max_ttl_ms <= 0)
        usage_error("--max-ttl must be > 0");
      break;
    case O_QUIET:
      opt.quiet = 1;
      break;
    case O_SET_RECORD:
      opt.set_record_ms = duration_arg("--set-record", v);
      if (opt.set_record_ms <= 0)
        usage_error("--set-record must be > 0");
      break;
    case O_HELP:
    case O_VERSION:
      break;   /* handled before */
    case O_TTL:
      opt.ttl_ms = duration_arg("--ttl", v);
      opt.ttl_given = 1;
      if (opt.ttl_ms <= 0)
        usage_error("--ttl must be > 0");
      break;
    case O_WAIT:
      opt.wait_ms = duration_arg("--wait", v);
      opt.wait_given = 1;
      break;
    case O_GRACE:
      opt.grace_ms = duration_arg("--grace", v);
      opt.grace_given = 1;
      break;
    case O_HEAL:
      opt.heal = 1;
      break;
    case O_FENCE:
      opt.fence = 1;
      break;
    case O_WAKE:
      opt.wake = 1;
      break;
    case O_ALSO:
      if (opt.n_also == REDLOCK_MAX_RESOURCES - 1)
        usage_error("too many --also (at most %d)",
                    REDLOCK_MAX_RESOURCES - 1);
      if (*v == '\0')
        usage_error("--also needs a non-empty KEY");
      opt.also[opt.n_also++] = v;
      break;
    case O_READ:
    case O_SHARED:
    case O_WRITE:
    case O_EXCLUSIVE: {
      int side = o->id == O_READ || o->id == O_SHARED ? 1 : 2;
      if (opt.rw_given != 0 && opt.rw_given != side)
        usage_error("--read/-s and --write/-x exclude each other");
      opt.rw = opt.rw_given = side;
      break;
    }
    case O_NOWAIT:
      opt.wait_ms = 0;
      opt.wait_given = 1;
      break;
    case O_WAIT_SECS:
      /* flock -w: seconds, a decimal allowed; our durations work too. */
      opt.wait_ms = duration_arg("-w", v);
      opt.wait_given = 1;
      break;
    case O_CONFLICT_EXIT: {
      char *end;
      long code = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || code < 0 || code > 255)
        usage_error("bad -E/--conflict-exit-code '%s' (0..255)", v);
      opt.conflict_code = (int)code;
      break;
    }
    case O_CLOSE:
      break;   /* the command never inherits the lock: nothing to close */
    case O_FORCE:
      opt.force = 1;
      break;
    case O_WATCH:
      opt.watch = 1;
      break;
    case O_LIMIT:
      opt.limit = parse_limit("--limit", v);
      break;
    case O_MAX: {
      char *end;
      long k = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || k < 1 ||
          k > REDLOCK_SCAN_MAX_NAMES)
        usage_error("bad --max '%s' (1..%d)", v, REDLOCK_SCAN_MAX_NAMES);
      opt.max_names = (unsigned)k;
      break;
    }
    case O_PERMIT: {
      char *end;
      long p = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || p < 0 || p >= REDLOCK_MAX_PERMITS)
        usage_error("bad --permit '%s' (0..%d)", v, REDLOCK_MAX_PERMITS - 1);
      opt.permit = (int)p;
      break;
    }
    case O_TOKEN:
      opt.token = v;
      break;
    case O_ID:
      if (*v == '\0' || strlen(v) > REDLOCK_MAX_HOLDER)
        usage_error("--id must be 1..%d bytes", REDLOCK_MAX_HOLDER);
      opt.id = v;
      opt.no_id = 0;
      break;
    case O_NO_ID:
      opt.no_id = 1;
      opt.id = NULL;
      break;
    case O_ONCE:
      opt.once = 1;
      break;
    case O_STATS:
      opt.stats = 1;
      break;
    case O_STATS_FILE:
      if (*v == '\0')
        usage_error("--stats-file needs a file name");
      opt.stats_file = v;
      break;
    case O_STATS_LABEL: {
      const char *eq = strchr(v, '=');
      const char *c;
      if (n_labels == MAX_LABELS)
        usage_error("at most %d --stats-label", MAX_LABELS);
      if (eq == NULL || eq == v)
        usage_error("--stats-label wants NAME=VALUE, not '%s'", v);
      for (c = v; c < eq; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              *c == '_' || (c > v && *c >= '0' && *c <= '9')))
          usage_error("--stats-label: '%.*s' is not a Prometheus label name",
                      (int)(eq - v), v);
      if ((eq - v == 3 && strncmp(v, "key", 3) == 0) ||
          (eq - v == 6 && strncmp(v, "master", 6) == 0))
        usage_error("--stats-label: '%.*s' is set by redlock itself",
                    (int)(eq - v), v);
      labels[n_labels++] = v;
      break;
    }
  }
}

/* Parses everything; returns the index of the first argument of run's
 * command (0 for other commands). positional[] gets the others. */
int parse_args(int argc, char **argv, const char **positional,
               int *n_pos) {
  int i;
  int cmd_at = -1;
  int cmd_index;
  int seen_cmd = 0;
  *n_pos = 0;

  cmd_index = scan_command(argc, argv, &cmd_at);
  /* --help and --version anywhere win (before any other complaint). */
  for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
      print_help(cmd_index);
    if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
      printf("redlock %s\n", redlock_version_string());
      exit(EXIT_OK);
    }
    if (cmd_at == i && cmd_index < 0 && strcmp(argv[i], "help") == 0) {
      int h = i + 1 < argc ? find_command(argv[i + 1]) : -1;
      if (i + 1 < argc && h < 0)
        usage_error("no command '%s' (run, acquire, extend, release, "
                    "status, elect, leader, stats, guard, unlock, limit, ls)",
                    argv[i + 1]);
      print_help(h);
    }
  }
  if (cmd_at > 0 && cmd_index < 0 && strcmp(argv[cmd_at], "completion") == 0)
    completion(argc, argv, cmd_at);
  if (cmd_at < 0)
    usage_error("no command (run, acquire, extend, release, status, elect, "
                "leader, stats, guard, unlock, limit, ls)");
  if (cmd_index < 0)
    usage_error("unknown command '%s' (run, acquire, extend, release, "
                "status, elect, leader, stats, guard, unlock, limit, ls)",
                argv[cmd_at]);
  command = &cli_commands[cmd_index];
  cmd_name = command->name;
  cmd_bit = command->bit;

  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i == cmd_at) {
      seen_cmd = 1;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      if (!seen_cmd)
        usage_error("'--' before the command");
      i++;
      /* The rest is positional: run's KEY if not given yet, then its
       * command; the other commands' KEY and TOKEN. */
      if (command->args == ARGS_KEY_CMD && *n_pos == 0 && i < argc)
        positional[(*n_pos)++] = argv[i++];
      if (command->args != ARGS_KEY_CMD)
        for (; i < argc; i++) {
          if (*n_pos == 2)
            usage_error("%s: unexpected argument '%s'", cmd_name, argv[i]);
          positional[(*n_pos)++] = argv[i];
        }
      break;
    }
    if (a[0] == '-' && a[1] != '\0') {
      const optdef *o;
      const char *v = NULL;
      if (a[1] == '-') {
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        o = find_long(a + 2, len);
        if (o == NULL)
          usage_error("unknown option '%.*s'", (int)len + 2, a);
        if (eq != NULL) {
          if (!o->has_arg)
            usage_error("--%s takes no value", o->name);
          v = eq + 1;
        }
      } else {
        o = a[2] == '\0' ? find_short(a[1]) : NULL;
        if (o == NULL)
          usage_error("unknown option '%s'", a);
      }
      if (o->has_arg && v == NULL) {
        if (i + 1 >= argc)
          usage_error("--%s needs a value", o->name);
        v = argv[++i];
      }
      set_option(o, v);
      if (o->id == O_SERVERS) {
        /* Keep a copy for the client; hide passwords from ps now. */
        free(opt.servers_copy);
        opt.servers_copy = strdup(v);
        if (opt.servers_copy == NULL)
          usage_error("out of memory");
        opt.servers_arg = opt.servers_copy;
        each_password(argv[i], star_out);
      }
      continue;
    }
    if (!seen_cmd)
      continue;   /* cannot happen: the first positional is the command */
    if (command->args == ARGS_KEY_CMD && *n_pos == 1) {
      /* run KEY CMD...: the command starts here, options stop. */
      break;
    }
    positional[(*n_pos)++] = a;
    if (*n_pos > 2)
      usage_error("%s: unexpected argument '%s'", cmd_name, a);
  }
  if (command->args == ARGS_KEY_CMD) {
    if (opt.shell_cmd != NULL && i < argc)
      usage_error("%s: -c CMD and a command after KEY: one or the other",
                  cmd_name);
    if (opt.shell_cmd != NULL && *n_pos == 0)
      usage_error("%s: missing KEY", cmd_name);
    if (opt.shell_cmd == NULL && i >= argc)
      usage_error("%s: expected KEY [--] CMD [ARGS...] or KEY -c CMD",
                  cmd_name);
    return i;
  }
  if (i < argc)
    usage_error("%s: unexpected argument '%s'", cmd_name, argv[i]);
  return 0;
}
