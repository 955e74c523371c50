/* redlock: the command-line tool. Like flock(1), across hosts: a Redlock
 * over N Redis masters. Public API only (include/redlock.h).
 *
 *   redlock [GLOBAL] run [OPTIONS] KEY [--] CMD [ARGS...]
 *   redlock [GLOBAL] acquire [OPTIONS] KEY
 *   redlock [GLOBAL] extend [--ttl D] KEY TOKEN
 *   redlock [GLOBAL] release KEY TOKEN
 *   redlock [GLOBAL] status [--token TOKEN] KEY
 *   redlock help [COMMAND]
 *
 * Options go before or after the command and its arguments, until "--"
 * (as GNU getopt_long permutes them); --opt=value works too. See
 * usage_text and cmd_help for the options and the exit codes; the man page
 * is tools/redlock.1.
 *
 * Decisions worth knowing (docs: README, redlock.1):
 *  - Credentials never stay visible: a password in --servers is overwritten
 *    in argv as soon as it is parsed (ps shows '*'), and the child of `run`
 *    gets no REDLOCK_PASSWORD and no user:password in REDLOCK_SERVERS.
 *    Files: --password-file / REDLOCK_PASSWORD_FILE (first line).
 *  - `run` forwards signals, except one the child already got: a signal
 *    the kernel sent to our process group (Ctrl-C, Ctrl-\, hangup) while
 *    the child is in that group. SIGTERM to `run` escalates: the child gets
 *    SIGTERM, then SIGKILL after --grace, the lock is released and run
 *    exits 143. On Linux the child gets SIGTERM if `run` itself dies
 *    (PR_SET_PDEATHSIG, set by a small exec helper: run re-executes itself
 *    as "redlock __exec PPID CMD..." which sets it and execs CMD). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <uv.h>

#include "redlock.h"

/* Exit codes (documented in --help, the README and redlock(1)). */
#define EXIT_OK 0
#define EXIT_FAIL 1          /* extend/release/status failed */
#define EXIT_USAGE 64        /* EX_USAGE */
#define EXIT_NOT_ACQUIRED 75 /* EX_TEMPFAIL: taken, or no quorum in time */
#define EXIT_LOST 76         /* run: the lock was lost, child terminated */
#define EXIT_UNAVAILABLE 69  /* EX_UNAVAILABLE: masters refuse connections */
#define EXIT_CANTCREAT 73    /* EX_CANTCREAT: --stats-file cannot be written */
#define EXIT_NOPERM 77       /* EX_NOPERM: authentication refused */
#define EXIT_CONFIG 78       /* EX_CONFIG: a bad value in the environment;
                                TLS verification or SELECT refused */
#define EXIT_NOEXEC 127      /* run: the command could not be started */

#define EXEC_HELPER "__exec"

enum { C_RUN = 1, C_ACQUIRE = 2, C_EXTEND = 4, C_RELEASE = 8, C_STATUS = 16,
       C_ELECT = 32, C_LEADER = 64, C_STATS = 128, C_GUARD = 256,
       C_UNLOCK = 512, C_ALL = 1023 };

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
    "  guard                     each master's restart-guard state: does\n"
    "                            its vote count, why not, the ttl record\n"
    "\n";

/* (Split in two: C99 promises string literals of 4095 bytes.) */
static const char usage_options[] =
    "Options for every command (before or after it):\n"
    "  --servers LIST     masters, comma-separated (default $REDLOCK_SERVERS):\n"
    "                     host:port, redis://[user[:pass]@]host[:port][/db],\n"
    "                     rediss://... (TLS), unix:///path\n"
    "  --password-file F  password for masters without one in their URI\n"
    "                     (first line of F; also $REDLOCK_PASSWORD_FILE,\n"
    "                     or $REDLOCK_PASSWORD; user: $REDLOCK_USERNAME)\n"
    "  --json             machine-readable output (one JSON object)\n"
    "  --prefix P         key prefix\n"
    "  --quorum N         votes needed (default N/2+1; only raised)\n"
    "  --timeout D        per-master command timeout (default 50ms)\n"
    "  --connect-timeout D  connect timeout (default 250ms); also how long\n"
    "                     refused connections may keep a quorum out before\n"
    "                     run/acquire/elect give up (exit 69; default 5s)\n"
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
    "  -q, --quiet        no warnings and no progress messages on stderr\n"
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
    "\n"
    "Exit codes:\n"
    "  0    ok\n"
    "  1    extend/release/status failed (not held, no quorum, unreachable)\n"
    "  64   usage error\n"
    "  69   too few masters accept connections (refused)\n"
    "  75   not acquired (held by another owner, or no quorum within --wait)\n"
    "  76   run: the lock was lost; the command was terminated\n"
    "  77   no quorum of masters accepts the credentials\n"
    "  78   a bad value in the environment (REDLOCK_*), or no quorum accepts\n"
    "       the configuration (TLS verification, SELECT)\n"
    "  127  run: the command could not be started\n"
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

static const char help_run[] =
    "usage: redlock run [OPTIONS] KEY [--] CMD [ARGS...]\n"
    "\n"
    "Hold KEY while CMD runs, extended automatically, and exit with CMD's\n"
    "status. CMD sees REDLOCK_KEY and REDLOCK_TOKEN (and REDLOCK_FENCE with\n"
    "--fence); never the masters' password.\n"
    "\n"
    "  --ttl D      lock ttl, extended every ttl/3 (default 30s)\n"
    "  --wait D     how long to wait for the lock (default: forever; 0: one\n"
    "               attempt); flock's -w SECS and -n (= --wait 0)\n"
    "  -E CODE      exit code when not acquired (default 75; flock's -E)\n"
    "  --grace D    after SIGTERM to CMD, SIGKILL it this much later\n"
    "               (default 10s; for a lost lock: when the validity ends)\n"
    "  --heal       extensions re-create the key on masters that lost it\n"
    "  --fence      REDLOCK_FENCE: a number that strictly increases across\n"
    "               holders (masters need appendonly)\n"
    "  --wake       wait for the holder's release message instead of polling\n"
    "  --also KEY2  lock KEY2 too, all or none (repeatable)\n"
    "  --read, --write  take KEY's read-write lock (many readers or one\n"
    "               writer); flock's -s and -x\n"
    "  -o           accepted for flock(1): CMD never holds the lock\n"
    "\n"
    "CMD runs in a process group of its own (in front on the terminal when\n"
    "run was): every signal for it goes to the whole group, so what CMD\n"
    "started stops with it. SIGINT, SIGQUIT, SIGHUP, SIGTERM, SIGUSR1 and\n"
    "SIGUSR2 to run are forwarded to the group. SIGTERM to run: the group\n"
    "gets SIGTERM, then SIGKILL after --grace; the lock is released; exit\n"
    "143 if CMD had to be killed. While waiting for the lock,\n"
    "SIGINT/SIGTERM/SIGHUP/SIGQUIT give up: exit 128+N, nothing held.\n"
    "If the lock cannot be extended, the group gets SIGTERM before the\n"
    "validity ends (ttl/10, at least two --timeout) and SIGKILL when it\n"
    "ends; exit 76. If run itself is killed, the group gets SIGTERM (then\n"
    "SIGKILL after --grace; Linux, PR_SET_PDEATHSIG).\n";

static const char help_acquire[] =
    "usage: redlock acquire [OPTIONS] KEY\n"
    "\n"
    "Acquire KEY and print its token on stdout (one line; with --fence the\n"
    "fencing number on a second line). The lock is not extended: extend it\n"
    "or release it with the token.\n"
    "\n"
    "  --ttl D      lock ttl (default 30s)\n"
    "  --wait D     keep trying this long (default 0: one attempt); -w SECS,\n"
    "               -n (one attempt), -E CODE (exit code when not acquired)\n"
    "  --fence      also print the fencing number (second line)\n"
    "  --wake       wait for the holder's release message instead of polling\n"
    "  --also KEY2  lock KEY2 too, all or none (repeatable)\n"
    "  --read, --write  take KEY's read-write lock\n"
    "\n"
    "  tok=$(redlock acquire --ttl 1m deploy) || exit 1\n";

static const char help_extend[] =
    "usage: redlock extend [OPTIONS] KEY TOKEN\n"
    "\n"
    "Extend the lock held under TOKEN to --ttl from now (default 30s), only\n"
    "where the key still holds TOKEN. Prints the new validity in ms (how\n"
    "long the lock is safe to use). Exit 1 if it is not held any more.\n"
    "  --also KEY2, --read, --write  as given to acquire\n";

static const char help_release[] =
    "usage: redlock release [OPTIONS] KEY TOKEN\n"
    "\n"
    "Release the lock held under TOKEN on every master (only where the key\n"
    "holds TOKEN). Prints nothing; exit 1 if nothing of TOKEN was found.\n"
    "  --also KEY2, --read, --write  as given to acquire\n";

static const char help_status[] =
    "usage: redlock status [OPTIONS] KEY\n"
    "\n"
    "Show KEY on every master: reachable, latency, held, remaining ttl,\n"
    "whether its vote counts now (or in how long: the restart guard),\n"
    "durability (declared and reported; 'broken' when declared but not\n"
    "reported) and holder (its first 8 characters only; 'mine' when it is\n"
    "--token). Then why a master's vote does not count, configuration\n"
    "warnings, and a note when KEY is also a read-write lock.\n"
    "  --token TOKEN  mark the masters where TOKEN holds KEY\n"
    "  --stats        then this client's statistics (Prometheus text)\n";

static const char help_elect[] =
    "usage: redlock elect [--id NAME] [OPTIONS] KEY [--] CMD [ARGS...]\n"
    "\n"
    "Leader election: campaign for KEY and run CMD only while this process\n"
    "leads. A standby takes over as soon as the leader's lock expires or it\n"
    "resigns (release message). When leadership is lost (a majority says\n"
    "the lock is someone else's, or it could not be extended: the leader\n"
    "steps down before its validity ends), CMD gets SIGTERM, then SIGKILL\n"
    "after --grace, and the process campaigns again (--once: exits 76).\n"
    "When CMD exits by itself, elect resigns and exits with its status.\n"
    "SIGTERM: CMD gets it (SIGKILL after --grace), then elect resigns and\n"
    "exits. CMD sees REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_LEADER_ID.\n"
    "\n"
    "  --id NAME    this instance's identity (1..80 bytes; default\n"
    "               HOSTNAME:PID), shown by `redlock leader`\n"
    "  --ttl D      leadership ttl, extended every ttl/3 (default 10s)\n"
    "  --grace D    SIGKILL this long after SIGTERM (default 10s)\n"
    "  --once       exit when leadership is lost instead of campaigning\n"
    "  --stats-file F  write the statistics (Prometheus text) to F every\n"
    "               5 s, for node_exporter's textfile collector\n";

static const char help_leader[] =
    "usage: redlock leader [OPTIONS] KEY\n"
    "\n"
    "Print the identity of KEY's leader (line 1) and how long it stays\n"
    "leader without an extension, in ms (line 2), as a quorum of masters\n"
    "sees it. Exit 1 when there is no leader. --json: one object.\n"
    "  --watch      keep watching: one line per change of leader (its\n"
    "               identity, or '-' for none; --json: one object a line),\n"
    "               until SIGINT or SIGTERM\n";

static const char help_guard[] =
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

static const char help_unlock[] =
    "usage: redlock unlock --force [OPTIONS] KEY\n"
    "\n"
    "An operator's forced release: delete KEY (and a read-write lock of\n"
    "that name) on every master, whoever holds it, and wake its waiters.\n"
    "The holder is NOT told: it believes it holds the lock until its next\n"
    "extension finds it gone (or its validity ends), so two owners may act\n"
    "at once meanwhile. Use it only for a holder known to be dead or\n"
    "stuck. The fencing counter stays. Exit 1 if a master did not answer\n"
    "(the key may remain there until its ttl).\n"
    "  --force      required: says you mean it\n"
    "  --also KEY2  the other keys of a multi-resource lock (repeatable)\n";

static const char help_stats[] =
    "usage: redlock stats [OPTIONS]\n"
    "\n"
    "Connect to every master, read one probe key, and print the client's\n"
    "statistics in the Prometheus text format: per master up, commands,\n"
    "errors by kind, handshakes and a latency histogram.\n";

/* ---- options ------------------------------------------------------------- */

enum {
  O_SERVERS, O_PASSWORD_FILE, O_JSON, O_PREFIX, O_QUORUM, O_TIMEOUT,
  O_CONNECT_TIMEOUT, O_RESTART_GUARD, O_TLS_CA, O_TLS_CA_DIR, O_TLS_CERT,
  O_TLS_KEY, O_TLS_KEY_PASS_FILE, O_TLS_SERVER_NAME, O_TLS_INSECURE,
  O_HELP, O_VERSION, O_TTL, O_WAIT, O_GRACE, O_HEAL, O_FENCE, O_WAKE,
  O_ALSO, O_READ, O_WRITE, O_TOKEN, O_ID, O_ONCE, O_STATS, O_STATS_FILE,
  O_DURABLE, O_MAX_TTL, O_QUIET, O_SET_RECORD, O_NOWAIT, O_WAIT_SECS,
  O_CONFLICT_EXIT, O_SHARED, O_EXCLUSIVE, O_CLOSE, O_STATS_LABEL, O_FORCE,
  O_WATCH
};

typedef struct optdef {
  const char *name;   /* without "--" */
  char shortname;
  int has_arg;
  unsigned cmds;      /* where it applies */
  int id;
} optdef;

static const optdef options[] = {
    {"servers", 0, 1, C_ALL, O_SERVERS},
    {"password-file", 0, 1, C_ALL, O_PASSWORD_FILE},
    {"json", 0, 0, C_ALL, O_JSON},
    {"prefix", 0, 1, C_ALL, O_PREFIX},
    {"quorum", 0, 1, C_ALL, O_QUORUM},
    {"timeout", 0, 1, C_ALL, O_TIMEOUT},
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
    {"help", 'h', 0, C_ALL, O_HELP},
    {"version", 'V', 0, C_ALL, O_VERSION},
    {"ttl", 0, 1, C_RUN | C_ACQUIRE | C_EXTEND | C_ELECT, O_TTL},
    {"wait", 0, 1, C_RUN | C_ACQUIRE, O_WAIT},
    {"grace", 0, 1, C_RUN | C_ELECT, O_GRACE},
    {"heal", 0, 0, C_RUN, O_HEAL},
    {"fence", 0, 0, C_RUN | C_ACQUIRE, O_FENCE},
    {"wake", 0, 0, C_RUN | C_ACQUIRE, O_WAKE},
    {"also", 0, 1, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE | C_UNLOCK,
     O_ALSO},
    {"read", 0, 0, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE, O_READ},
    {"write", 0, 0, C_RUN | C_ACQUIRE | C_EXTEND | C_RELEASE, O_WRITE},
    {"token", 0, 1, C_STATUS, O_TOKEN},
    {"id", 0, 1, C_ELECT, O_ID},
    {"once", 0, 0, C_ELECT, O_ONCE},
    {"stats", 0, 0, C_STATUS, O_STATS},
    {"stats-file", 0, 1, C_RUN | C_ELECT, O_STATS_FILE},
    {"stats-label", 0, 1, C_RUN | C_ELECT, O_STATS_LABEL},
    {"force", 0, 0, C_UNLOCK, O_FORCE},
    {"watch", 0, 0, C_LEADER, O_WATCH},
};
#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

static const struct {
  const char *name;
  unsigned bit;
  const char *help;
} commands[] = {
    {"run", C_RUN, help_run},         {"acquire", C_ACQUIRE, help_acquire},
    {"extend", C_EXTEND, help_extend}, {"release", C_RELEASE, help_release},
    {"status", C_STATUS, help_status},
    {"elect", C_ELECT, help_elect},    {"leader", C_LEADER, help_leader},
    {"stats", C_STATS, help_stats},    {"guard", C_GUARD, help_guard},
    {"unlock", C_UNLOCK, help_unlock},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static struct {
  const char *servers_arg;
  char *servers_copy;   /* --servers, before its password was hidden */
  const char *password_file;
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
  const char *id;
  int once;
  int stats;
  const char *stats_file;
  int ttl_given;
  int durable;
  int64_t max_ttl_ms;   /* 0: not given */
  int quiet;
  int64_t set_record_ms;   /* guard --set-record; -1: not given */
  int grace_given;
  int conflict_code;    /* exit code when not acquired (-E) */
  int rw_given;         /* --read/--write/-s/-x seen: which one */
  int force;            /* unlock --force */
  int watch;            /* leader --watch */
} opt = {NULL, NULL, NULL, 0, NULL, 0, 0, 0, NULL, 30000, -1, 0, 0, 0, 0, 0,
         {NULL}, 0, 10000, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0,
         NULL, 0, 0, NULL, 0, 0, 0, 0, -1, 0, EXIT_NOT_ACQUIRED, 0, 0, 0};

static uv_loop_t loop;
static redlock_client_t *client;
static redlock_lock_t *lock;
static redlock_election_t *election;   /* elect */
static const char *key;
static const char *cmd_name;
static unsigned cmd_bit;
static int exit_code = EXIT_FAIL;
static int finishing;          /* the exit code is decided */
static int stdout_closed;      /* started with fd 1 closed */

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

#define MAX_LABELS 8
static const char *labels[MAX_LABELS];   /* --stats-label NAME=VALUE */
static int n_labels;

static void usage_error(const char *fmt, ...) {
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

/* A secret from a file: its first line, without the newline. NULL if the
 * file cannot be read (a message says why). */
static char *read_secret(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  size_t n;
  if (f == NULL) {
    fprintf(stderr, "redlock: cannot read %s: %s\n", path, strerror(errno));
    return NULL;
  }
  n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  return buf;
}

static void config_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

/* A bad value in the environment: EX_CONFIG, with what is wrong. */
static void config_error(const char *fmt, ...) {
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
static int env_bool(const char *name, int dflt) {
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
static const char *lib_error(void) {
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

static const char *opt_or_env(const char *v, const char *env) {
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
static int parse_duration(const char *s, int64_t *out) {
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

static int64_t duration_arg(const char *flag, const char *v) {
  int64_t d;
  if (parse_duration(v, &d) != 0)
    usage_error("bad duration for %s: '%s' (use e.g. 500ms, 10s, 1m30s, "
                "2h, 1d; at most 24.8 days)", flag, v ? v : "");
  return d;
}

/* ---- credentials --------------------------------------------------------- */

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
static char *strip_userinfo(const char *list) {
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

/* ---- parsing ------------------------------------------------------------- */

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
  for (i = 0; i < N_COMMANDS; i++)
    if (strcmp(commands[i].name, a) == 0)
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

static void print_help(int cmd_index) {
  fputs(cmd_index >= 0 ? commands[cmd_index].help : usage_text, stdout);
  if (cmd_index < 0)
    fputs(usage_options, stdout);
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
      opt.timeout_ms = (int)duration_arg("--timeout", v);
      if (opt.timeout_ms == 0)
        usage_error("--timeout must be > 0");
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
    case O_TOKEN:
      opt.token = v;
      break;
    case O_ID:
      if (*v == '\0' || strlen(v) > 80)
        usage_error("--id must be 1..80 bytes");
      opt.id = v;
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
static int parse_args(int argc, char **argv, const char **positional,
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
                    "status, elect, leader, stats, guard, unlock)", argv[i + 1]);
      print_help(h);
    }
  }
  if (cmd_at < 0)
    usage_error("no command (run, acquire, extend, release, status, elect, "
                "leader, stats, guard, unlock)");
  if (cmd_index < 0)
    usage_error("unknown command '%s' (run, acquire, extend, release, "
                "status, elect, leader, stats, guard, unlock)", argv[cmd_at]);
  cmd_name = commands[cmd_index].name;
  cmd_bit = commands[cmd_index].bit;

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
      if ((cmd_bit & (C_RUN | C_ELECT)) && *n_pos == 0 && i < argc)
        positional[(*n_pos)++] = argv[i++];
      if (!(cmd_bit & (C_RUN | C_ELECT)))
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
    if ((cmd_bit & (C_RUN | C_ELECT)) && *n_pos == 1) {
      /* run KEY CMD...: the command starts here, options stop. */
      break;
    }
    positional[(*n_pos)++] = a;
    if (*n_pos > 2)
      usage_error("%s: unexpected argument '%s'", cmd_name, a);
  }
  if (cmd_bit & (C_RUN | C_ELECT)) {
    if (i >= argc)
      usage_error("%s: expected KEY [--] CMD [ARGS...]", cmd_name);
    return i;
  }
  if (i < argc)
    usage_error("%s: unexpected argument '%s'", cmd_name, argv[i]);
  return 0;
}

/* ---- output -------------------------------------------------------------- */

/* Bytes as a JSON string: escapes, and U+FFFD for each byte that does not
 * start a valid UTF-8 sequence (JSON must be Unicode; a key or a server's
 * error may be anything). */
static void json_str(const char *str) {
  const unsigned char *p = (const unsigned char *)str;
  putchar('"');
  while (*p != '\0') {
    unsigned c = *p;
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4 : 0;
    size_t k;
    unsigned cp;
    if (n == 1) {
      if (c == '"' || c == '\\')
        printf("\\%c", c);
      else if (c < 0x20)
        printf("\\u%04x", c);
      else
        putchar((int)c);
      p++;
      continue;
    }
    cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (k = 1; k < n && (p[k] & 0xc0) == 0x80; k++)
      cp = (cp << 6) | (p[k] & 0x3f);
    if (n == 0 || k < n || (n == 2 && cp < 0x80) ||
        (n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
      fputs("\\ufffd", stdout);
      p++;
      continue;
    }
    fwrite(p, 1, n, stdout);
    p += n;
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
    if (n->error == REDLOCK_ERESTARTED && n->guard_wait_ms >= 0)
      printf(",\"guard_wait_ms\":%lld,\"guard_window_ms\":%lld",
             (long long)n->guard_wait_ms, (long long)n->guard_window_ms);
    putchar('}');
  }
  putchar(']');
}

static void report_result(const char *what, int status,
                          const redlock_result *r) {
  char why[2048];
  redlock_result_explain(r, why, sizeof(why));
  if (opt.json) {
    printf("{\"command\":\"%s\",\"key\":", what);
    json_str(key);
    printf(",\"ok\":%s,\"status\":\"%s\"", status == 0 ? "true" : "false",
           redlock_err_name(status));
    if (status != 0) {
      printf(",\"reason\":");
      json_str(why);
    }
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
    fprintf(stderr, "redlock: %s %s: %s\n", what, key, why);
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

static void close_signals(void);

/* ---- --stats-file: the Prometheus text for node_exporter's textfile
 * collector, rewritten atomically (tmp + rename) every 5 s and at exit. */
static uv_timer_t stats_timer;
static int stats_timer_open;

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
static void write_stats_reported(void) {
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
static int check_stats_file(void) {
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

static void start_stats_file(void) {
  if (opt.stats_file == NULL)
    return;
  uv_timer_init(&loop, &stats_timer);
  uv_timer_start(&stats_timer, on_stats_timer, 5000, 5000);
  stats_timer_open = 1;
}

/* Ends the run with `code` (the first call decides; closing the client
 * cancels what is in flight, whose callbacks then come back here). */
static void close_watch(void);
static int final_release;   /* finish() waits for its release */

/* The last stats (after the release: releases_total counts it), then the
 * lock and the client go. */
static void finish_close(void) {
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

static void finish(int code) {
  if (finishing)
    return;
  finishing = 1;
  exit_code = code;
  close_signals();
  close_watch();
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

static void print_stats(void);

/* ---- what the client knows of each master -------------------------------- */

/* Configuration warnings (two masters that are one instance, a replica, a
 * declared master that is not durable, a clock that stepped): on stderr,
 * each distinct message once, unless -q. status and guard show them in
 * their output instead. */
static void on_warning(redlock_client_t *c, const char *msg, void *arg) {
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

/* status and guard show the guard's verdicts, which need the record of
 * the deployment's longest ttl: a client reads it when it first sees an
 * instance. Until the reads in flight end (bounded: 2 s), look again every
 * 5 ms; then `then` runs. */
static uv_timer_t reads_timer;
static void (*reads_then)(void);
static uint64_t reads_deadline;

static int guard_reading(void) {
  redlock_master_info mi;
  unsigned i, n = redlock_client_n_servers(client);
  for (i = 0; i < n; i++)
    if (redlock_client_master_info(client, i, &mi) == 0 && mi.up &&
        mi.guard_cause == REDLOCK_GUARD_READING)
      return 1;
  return 0;
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

/* guard: one line per master, then why a master does not count. */
static void print_guard_table(void) {
  redlock_master_info mi;
  unsigned i, n = redlock_client_n_servers(client);
  if (opt.json)
    printf("{\"command\":\"guard\",\"masters\":[");
  else
    printf("%-28s %-3s %-8s %9s %-7s %-7s %12s %8s %-6s\n", "master", "up",
           "run_id", "uptime_s", "durable", "reports", "record_ms",
           "skew_ms", "counts");
  for (i = 0; i < n; i++) {
    char skew[24], record[24], uptime[24];
    if (redlock_client_master_info(client, i, &mi) != 0)
      continue;
    if (opt.json) {
      printf("%s{\"server\":", i ? "," : "");
      json_str(mi.server);
      printf(",\"up\":%s,\"run_id\":", mi.up ? "true" : "false");
      json_str(mi.run_id);
      printf(",\"role\":");
      json_str(mi.role);
      printf(",\"uptime_s\":%lld,\"declared_durable\":%s,"
             "\"reports_durable\":%s,\"ttl_record_ms\":%lld,"
             "\"clock_known\":%s,\"clock_skew_ms\":%lld,\"counts\":%s,"
             "\"guard_wait_ms\":%lld,\"guard_reason\":",
             (long long)mi.uptime_s, mi.declared_durable ? "true" : "false",
             mi.durable ? "true" : "false", (long long)mi.ttl_record_ms,
             mi.clock_known ? "true" : "false", (long long)mi.clock_skew_ms,
             mi.counts ? "true" : "false", (long long)mi.guard_wait_ms);
      json_str(mi.guard_reason);
      printf(",\"error\":");
      json_str(mi.error);
      printf(",\"warning\":");
      json_str(mi.warning);
      putchar('}');
      continue;
    }
    snprintf(uptime, sizeof(uptime), "%lld", (long long)mi.uptime_s);
    snprintf(record, sizeof(record), "%lld", (long long)mi.ttl_record_ms);
    if (mi.clock_known)
      snprintf(skew, sizeof(skew), "%+lld", (long long)mi.clock_skew_ms);
    else
      snprintf(skew, sizeof(skew), "-");
    printf("%-28s %-3s %-8.8s %9s %-7s %-7s %12s %8s %-6s\n", mi.server,
           mi.up ? "yes" : "no", mi.run_id[0] ? mi.run_id : "-",
           mi.uptime_s >= 0 ? uptime : "-",
           mi.declared_durable ? "yes" : "no", mi.durable ? "yes" : "no",
           mi.ttl_record_ms >= 0 ? record : "-", skew,
           mi.up && mi.counts ? "yes" : "no");
  }
  if (opt.json) {
    printf("]}\n");
    return;
  }
  for (i = 0; i < n; i++) {
    if (redlock_client_master_info(client, i, &mi) != 0)
      continue;
    if (!mi.up)
      printf("%s: down: %s\n", mi.server, mi.error);
    else if (!mi.counts && mi.guard_reason[0] != '\0')
      printf("guard: %s: %s\n", mi.server, mi.guard_reason);
    if (mi.warning[0] != '\0')
      printf("warning: %s\n", mi.warning);
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

static void on_guard_cmd(redlock_lock_t *l, int status,
                         const redlock_result *r, void *arg) {
  (void)l;
  (void)r;
  (void)arg;
  guard_status = status;
  after_guard_reads(guard_show);
}

/* ---- never silent: why we wait, and when not to ------------------------- */

/* What a master's error says about the configuration (its text comes from
 * this library's connection layer and Redis's error codes). */
enum { WHY_OTHER, WHY_AUTH, WHY_CONFIG, WHY_REFUSED };

static int error_kind(const redlock_node_result *n) {
  const char *e = n->errstr;
  if (n->vote != REDLOCK_VOTE_ERR || e == NULL)
    return WHY_OTHER;
  if (strstr(e, "WRONGPASS") != NULL || strstr(e, "NOAUTH") != NULL ||
      strstr(e, "NOPERM") != NULL || strncmp(e, "AUTH: ", 6) == 0)
    return WHY_AUTH;
  if (strncmp(e, "SELECT ", 7) == 0 ||
      strstr(e, "certificate verify failed") != NULL ||
      strncmp(e, "TLS: ", 5) == 0)
    return WHY_CONFIG;
  if (strstr(e, "Connection refused") != NULL)
    return WHY_REFUSED;
  return WHY_OTHER;
}

static uint64_t wait_start_ms;     /* when the acquisition started */
static uint64_t refused_since_ms;  /* refusals keep a quorum out since */
static char said_reason[512];      /* the last "waiting" message, digits out */
static unsigned char said_master[REDLOCK_MAX_SERVERS];

/* How long masters that refuse connections may keep a quorum out before
 * the command gives up (69): --connect-timeout when given, else 5 s. */
static uint64_t unavailable_ms(void) {
  return opt.connect_timeout_ms > 0 ? (uint64_t)opt.connect_timeout_ms
                                    : 5000;
}

/* 0 while the masters may still grant the lock; else the exit code that
 * ends the wait: masters whose configuration refuses us (authentication:
 * 77; TLS verification, SELECT: 78) or that refuse connections (69, after
 * unavailable_ms, or at once when `final`) leave fewer than a quorum. Each
 * master's cause is printed once. */
static int config_verdict(const redlock_result *r, int final) {
  unsigned i, auth = 0, conf = 0, refused = 0;
  unsigned n = r->n_nodes, q = redlock_client_quorum(client);
  uint64_t now = uv_now(&loop);
  int code = 0;
  for (i = 0; i < n; i++) {
    switch (error_kind(&r->nodes[i])) {
      case WHY_AUTH: auth++; break;
      case WHY_CONFIG: conf++; break;
      case WHY_REFUSED: refused++; break;
      default: break;
    }
  }
  if (n - auth - conf < q) {
    code = auth > 0 ? EXIT_NOPERM : EXIT_CONFIG;
  } else if (n - auth - conf - refused < q) {
    if (refused_since_ms == 0)
      refused_since_ms = now;
    if (final || now - refused_since_ms >= unavailable_ms())
      code = EXIT_UNAVAILABLE;
  } else {
    refused_since_ms = 0;
  }
  if (code == 0)
    return 0;
  for (i = 0; i < n && i < REDLOCK_MAX_SERVERS; i++) {
    const redlock_node_result *m = &r->nodes[i];
    int k = error_kind(m);
    if (k == WHY_OTHER || said_master[i])
      continue;
    said_master[i] = 1;
    if (k == WHY_AUTH)
      fprintf(stderr, "redlock: %s: authentication failed (%s): check "
              "--password-file (or REDLOCK_PASSWORD_FILE) and the user\n",
              m->server, m->errstr);
    else if (k == WHY_CONFIG)
      fprintf(stderr, "redlock: %s: refused by the configuration (%s)\n",
              m->server, m->errstr);
    else
      fprintf(stderr, "redlock: %s: unavailable (%s)\n", m->server,
              m->errstr);
  }
  fprintf(stderr, "redlock: %s %s: %s\n", cmd_name, key,
          code == EXIT_NOPERM ? "no quorum can authenticate: giving up"
          : code == EXIT_CONFIG ? "no quorum accepts this configuration: "
                                  "giving up"
                                : "too few masters accept connections: "
                                  "giving up");
  return code;
}

/* While waiting: why, on stderr, after a second and whenever the reason
 * changes (numbers aside); never with -q or --json. */
static void say_waiting(const redlock_result *r) {
  char why[2048], shape[512];
  size_t i, k = 0;
  if (opt.quiet || opt.json || uv_now(&loop) - wait_start_ms < 1000)
    return;
  redlock_result_explain(r, why, sizeof(why));
  for (i = 0; why[i] != '\0' && k < sizeof(shape) - 1; i++)
    if (!(why[i] >= '0' && why[i] <= '9') && why[i] != '.')
      shape[k++] = why[i];
  shape[k] = '\0';
  if (strcmp(shape, said_reason) == 0)
    return;
  memcpy(said_reason, shape, k + 1);
  fprintf(stderr, "redlock: waiting for %s: %s\n", key, why);
}

static void on_client_event(redlock_client_t *c, const redlock_event *ev,
                            void *arg) {
  int code;
  (void)c;
  (void)arg;
  if (ev->kind == REDLOCK_EV_RELEASE && final_release &&
      cmd_bit == C_ELECT) {
    finish_close();   /* the resignation's release came */
    return;
  }
  if (ev->kind != REDLOCK_EV_ATTEMPT || finishing)
    return;
  code = config_verdict(ev->result, 0);
  if (code != 0) {
    finish(code);   /* frees the lock: its acquisition ends, canceled */
    return;
  }
  say_waiting(ev->result);
}

/* ---- acquire / extend / release / status --------------------------------- */

static void on_acquire_cmd(redlock_lock_t *l, int status,
                           const redlock_result *r, void *arg) {
  (void)arg;
  report_result("acquire", status, r);
  if (status == 0) {
    if (!opt.json) {
      /* One value a line: tok=$(redlock acquire K) stays the token. */
      printf("%s\n", redlock_lock_token(l));
      if (opt.fence)
        printf("%llu\n", (unsigned long long)redlock_lock_fence(l));
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
      /* Nobody has the token (/dev/full, a closed pipe): a lock that no
       * one can release must not stay for its ttl. finish() releases. */
      fprintf(stderr, "redlock: acquire %s: cannot write the token (%s): "
              "released\n", key, strerror(errno));
      finish(EXIT_FAIL);
      return;
    }
    /* Keep the key: the caller releases it with the token. */
    redlock_lock_detach(l);
    lock = NULL;
    redlock_client_close(client, on_client_closed, NULL);
    exit_code = EXIT_OK;
    finishing = 1;
    return;
  }
  if (status != REDLOCK_ECANCELED) {
    int code = config_verdict(r, 1);
    finish(code != 0 ? code : opt.conflict_code);
    return;
  }
  finish(EXIT_FAIL);
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
  finishing = 1;
}

static void on_release_cmd(redlock_lock_t *l, int status,
                           const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  report_result("release", status, r);
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

static int status_status;

/* What status shows of each master, copied from the inspect result (the
 * table is printed once the guard's reads ended). */
typedef struct status_row {
  char server[256];
  int up, held, mine, rw;
  uint64_t latency_us;
  int64_t pttl_ms;
  char shown[16];       /* the holder: 8 characters, never a whole token */
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
 * declared), "broken" (declared, but it reports otherwise). */
static const char *durable_cell(const redlock_master_info *mi) {
  if (!mi->declared_durable)
    return "no";
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
    printf("key %s: held on %u of %u masters (quorum %u)\n", key,
           status_held, status_n, redlock_client_quorum(client));
    printf("%-28s %-9s %10s %-5s %10s %-8s %-7s %s\n", "master",
           "reachable", "latency_us", "held", "pttl_ms", "counts",
           "durable", "holder");
  }
  for (i = 0; i < status_n; i++) {
    const status_row *n = &status_rows[i];
    redlock_master_info mi;
    char counts[24];
    memset(&mi, 0, sizeof(mi));
    if (redlock_client_master_info(client, i, &mi) != 0)
      mi.up = 0;
    counts_cell(&mi, counts, sizeof(counts));
    if (opt.json) {
      printf("%s{\"server\":", i ? "," : "");
      json_str(n->server);
      printf(",\"reachable\":%s", n->up ? "true" : "false");
      if (n->up) {
        printf(",\"latency_us\":%llu,\"held\":%s,\"pttl_ms\":%lld,"
               "\"mine\":%s,\"rw_lock\":%s,\"holder\":",
               (unsigned long long)n->latency_us, n->held ? "true" : "false",
               (long long)n->pttl_ms, n->mine ? "true" : "false",
               n->rw ? "true" : "false");
        json_str(n->held ? n->shown : "");
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
      printf("%-28s %-9s %10llu %-5s %10lld %-8s %-7s %s%s\n", n->server,
             "yes", (unsigned long long)n->latency_us,
             n->held ? "yes" : "no", (long long)(n->held ? n->pttl_ms : -2),
             counts, durable_cell(&mi), n->held ? n->shown : "-",
             n->mine ? " (mine)" : "");
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
           "commands\n", key, status_rw, status_n);
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

static void on_status_cmd(redlock_lock_t *l, int status,
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
    snprintf(row->error, sizeof(row->error), "%s", n->errstr);
    /* Never print another owner's full token: 8 characters identify it. */
    snprintf(row->shown, sizeof(row->shown), "%.8s%s", n->holder,
             strlen(n->holder) > 8 ? "..." : "");
    status_held += row->held;
    status_rw += row->rw;
  }
  status_status = status;
  after_guard_reads(status_finish);
}

static void print_stats(void) {
  static redlock_stats st;
  char *text;
  int len;
  if (client == NULL || redlock_client_stats(client, &st) != 0)
    return;
  len = redlock_stats_prometheus(&st, NULL, 0);
  text = malloc((size_t)len + 1);
  if (text == NULL)
    return;
  redlock_stats_prometheus(&st, text, (size_t)len + 1);
  fputs(text, stdout);
  free(text);
}

static void on_stats_cmd(redlock_lock_t *l, int status,
                         const redlock_result *r, void *arg) {
  (void)l;
  (void)r;
  (void)arg;
  print_stats();
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

/* ---- leader --watch: one line per change -------------------------------- */

static uv_timer_t watch_timer;
static char watch_last[256] = "\001";   /* nothing printed yet */

static void on_watch_timer(uv_timer_t *t);

static void on_leader_watched(redlock_client_t *c, int status,
                              const char *identity, int64_t ttl_ms,
                              void *arg) {
  const char *now = status == 0 && identity[0] != '\0' ? identity : "-";
  (void)c;
  (void)arg;
  if (finishing)
    return;
  if (status == 0 && strncmp(now, watch_last, sizeof(watch_last) - 1) != 0) {
    snprintf(watch_last, sizeof(watch_last), "%s", now);
    if (opt.json) {
      printf("{\"command\":\"leader\",\"key\":");
      json_str(key);
      printf(",\"leader\":");
      json_str(now[0] == '-' && now[1] == '\0' ? "" : now);
      printf(",\"ttl_ms\":%lld}\n", (long long)ttl_ms);
    } else {
      printf("%s\n", now);
    }
    if (fflush(stdout) != 0) {
      finish(EXIT_FAIL);   /* nobody reads us any more */
      return;
    }
  } else if (status != 0 && !opt.quiet) {
    fprintf(stderr, "redlock: leader %s: %s\n", key,
            redlock_strerror(status));
  }
  uv_timer_start(&watch_timer, on_watch_timer, 200, 0);
}

static void on_watch_timer(uv_timer_t *t) {
  (void)t;
  if (finishing || client == NULL)
    return;
  if (redlock_election_leader(client, key, strlen(key), on_leader_watched,
                              NULL) != 0)
    finish(EXIT_FAIL);
}

static void close_watch(void) {
  if (opt.watch && cmd_bit == C_LEADER &&
      !uv_is_closing((uv_handle_t *)&watch_timer))
    uv_close((uv_handle_t *)&watch_timer, NULL);
}

/* ---- unlock --force -------------------------------------------------------- */

static void on_unlock_done(redlock_lock_t *l, int status,
                           const redlock_result *r, void *arg) {
  unsigned i, deleted = 0, yes = 0;
  (void)l;
  (void)arg;
  for (i = 0; i < r->n_nodes; i++)
    if (r->nodes[i].vote == REDLOCK_VOTE_YES) {
      yes++;
      deleted += r->nodes[i].pttl_ms > 0;
    }
  if (opt.json) {
    report_result("unlock", status, r);
  } else if (status == 0) {
    printf("released %s by force on %u of %u masters\n", key, yes,
           r->n_nodes);
  } else {
    report_result("unlock", status, r);
  }
  (void)deleted;
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

static void on_unlock_inspected(redlock_lock_t *l, int status,
                                const redlock_result *r, void *arg) {
  unsigned i, held = 0;
  char who[16] = "";
  int rc;
  (void)status;
  (void)arg;
  for (i = 0; i < r->n_nodes; i++)
    if (r->nodes[i].vote == REDLOCK_VOTE_YES) {
      held++;
      if (who[0] == '\0')
        snprintf(who, sizeof(who), "%.8s", r->nodes[i].holder);
    }
  if (opt.quiet)
    ;
  else if (held > 0)
    fprintf(stderr, "redlock: warning: %s is held by %s... on %u of %u "
            "masters; that holder is not told and believes it holds the "
            "lock until its next extension (or its validity ends)\n", key,
            who, held, r->n_nodes);
  else
    fprintf(stderr, "redlock: %s is not held on any master that answered; "
            "deleting anyway\n", key);
  rc = redlock_lock_force_release(l, on_unlock_done, NULL);
  if (rc != 0) {
    fprintf(stderr, "redlock: unlock %s: %s\n", key, lib_error());
    finish(EXIT_FAIL);
  }
}

static void on_leader_cmd(redlock_client_t *c, int status,
                          const char *identity, int64_t ttl_ms, void *arg) {
  (void)c;
  (void)arg;
  if (opt.json) {
    printf("{\"command\":\"leader\",\"key\":");
    json_str(key);
    printf(",\"ok\":%s,\"status\":\"%s\",\"leader\":",
           status == 0 && identity[0] != '\0' ? "true" : "false",
           redlock_err_name(status));
    json_str(identity);
    printf(",\"ttl_ms\":%lld}\n", (long long)ttl_ms);
  } else if (status != 0) {
    fprintf(stderr, "redlock: leader %s: %s\n", key, redlock_strerror(status));
  } else if (identity[0] == '\0') {
    fprintf(stderr, "redlock: %s has no leader\n", key);
  } else {
    printf("%s\n%lld\n", identity, (long long)ttl_ms);
  }
  finish(status == 0 && identity[0] != '\0' ? EXIT_OK : EXIT_FAIL);
}

/* ---- run: signals -------------------------------------------------------- */

/* Signals arrive through a pipe (self-pipe): the handler writes what
 * happened, the loop reads it. SA_SIGINFO tells who sent it. */
typedef struct sig_event {
  int signum;
  int from_kernel;   /* si_code SI_KERNEL: sent to our process group */
} sig_event;

static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
                                SIGUSR2};
#define N_FORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

static int sig_pipe[2] = {-1, -1};
static uv_poll_t sig_poll;
static uv_timer_t grace_timer;
static int signals_open;
static uv_process_t child;
static int child_running;
static int lost;
static int term_escalated;     /* SIGKILL after SIGTERM to run */
static int stopping;           /* elect: a signal asked us to stop */
static int deposed_kill;       /* elect: the child goes, we campaign on */
static int start_when_exited;  /* elect: elected again while it went */
static int wait_signal;        /* a signal ended the wait for the lock */
static char **child_argv;

static void on_signal_raw(int signum, siginfo_t *si, void *ctx) {
  sig_event ev;
  int saved = errno;
  (void)ctx;
  ev.signum = signum;
  ev.from_kernel = si != NULL && si->si_code == SI_KERNEL;
  if (write(sig_pipe[1], &ev, sizeof(ev)) < 0) {
    /* the pipe is full: the same signal is pending already */
  }
  errno = saved;
}

static void close_signals(void) {
  size_t i;
  if (!signals_open)
    return;
  signals_open = 0;
  for (i = 0; i < N_FORWARDED; i++)
    signal(forwarded[i], SIG_DFL);
  uv_close((uv_handle_t *)&sig_poll, NULL);
  uv_close((uv_handle_t *)&grace_timer, NULL);
}

/* The command runs in a process group of its own (the exec helper makes
 * it): a signal for it goes to the whole group, so a shell's children stop
 * with it. Until the helper has made the group, to the helper alone. */
static void signal_job(int sig) {
  int pid = uv_process_get_pid(&child);
  if (pid <= 0)
    return;
  if (kill(-pid, sig) != 0)
    kill(pid, sig);
}

static int64_t grace_now_ms;   /* this escalation's grace */

static void on_grace_over(uv_timer_t *t) {
  (void)t;
  if (!child_running)
    return;
  fprintf(stderr, "redlock: %s still running %lld ms after SIGTERM: "
          "SIGKILL\n", child_argv[0], (long long)grace_now_ms);
  if (!lost)
    term_escalated = 1;
  signal_job(SIGKILL);
}

static void start_grace_ms(int64_t ms) {
  if (uv_is_active((uv_handle_t *)&grace_timer))
    return;
  grace_now_ms = ms;
  uv_timer_start(&grace_timer, on_grace_over, (uint64_t)ms, 0);
}

static void start_grace(void) {
  start_grace_ms(opt.grace_ms);
}

static void term_child(void) {
  signal_job(SIGTERM);
  start_grace();
}

static void on_signal(const sig_event *ev) {
  if (!child_running) {
    /* Still waiting for the lock: give up (nothing stays held). */
    if (ev->signum == SIGUSR1 || ev->signum == SIGUSR2 || finishing ||
        wait_signal != 0)
      return;
    wait_signal = 128 + ev->signum;
    if (cmd_bit == C_ELECT) {
      finish(wait_signal);   /* the close resigns */
      return;
    }
    if (lock != NULL && redlock_lock_cancel(lock) == 0)
      return;   /* its callback ends the run */
    finish(wait_signal);
    return;
  }
  /* The terminal sent it to the whole foreground process group: when the
   * job is in that group (it took the terminal), it got it too. Anything
   * else (kill PID, a terminal that still has us in front) only we got:
   * forward it to the job's group. */
  if (!(ev->from_kernel && getpgid(uv_process_get_pid(&child)) == getpgrp()))
    signal_job(ev->signum);
  if (ev->signum != SIGUSR1 && ev->signum != SIGUSR2)
    stopping = 1;   /* elect: no new campaign after this child */
  /* SIGTERM to run: the child has --grace to finish, then SIGKILL. */
  if (ev->signum == SIGTERM)
    start_grace();
}

static void on_sig_readable(uv_poll_t *h, int status, int events) {
  sig_event ev;
  (void)h;
  (void)status;
  (void)events;
  while (read(sig_pipe[0], &ev, sizeof(ev)) == (ssize_t)sizeof(ev))
    on_signal(&ev);
}

static int open_signals(void) {
  struct sigaction sa;
  size_t i;
  if (pipe(sig_pipe) != 0)
    return -1;
  for (i = 0; i < 2; i++) {
    fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
    fcntl(sig_pipe[i], F_SETFL, fcntl(sig_pipe[i], F_GETFL) | O_NONBLOCK);
  }
  if (uv_poll_init(&loop, &sig_poll, sig_pipe[0]) != 0)
    return -1;
  uv_poll_start(&sig_poll, UV_READABLE, on_sig_readable);
  uv_timer_init(&loop, &grace_timer);
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal_raw;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (i = 0; i < N_FORWARDED; i++)
    sigaction(forwarded[i], &sa, NULL);
  signals_open = 1;
  return 0;
}

/* ---- run: the child ------------------------------------------------------ */

static void start_child(void);

static void on_child_exit(uv_process_t *p, int64_t status, int sig) {
  int code;
  child_running = 0;
  uv_close((uv_handle_t *)p, NULL);
  uv_timer_stop(&grace_timer);
  code = sig != 0 ? 128 + sig : (int)status;
  if (cmd_bit == C_ELECT && deposed_kill && !stopping && !finishing) {
    /* Leadership was lost: the command is gone; campaign on. */
    deposed_kill = 0;
    if (opt.once) {
      finish(EXIT_LOST);
      return;
    }
    if (start_when_exited) {
      start_when_exited = 0;
      start_child();
    }
    return;
  }
  if (lost) {
    fprintf(stderr, "redlock: lock on %s was lost; command terminated\n",
            key);
    code = EXIT_LOST;
  } else if (term_escalated) {
    code = 128 + SIGTERM;
  } else if (cmd_bit == C_ELECT && deposed_kill) {
    code = EXIT_LOST;   /* lost, then asked to stop */
  }
  if (opt.json && cmd_bit == C_RUN) {
    printf("{\"command\":\"run\",\"key\":");
    json_str(key);
    printf(",\"ok\":%s,\"exit\":%d,\"lost\":%s}\n",
           code == 0 ? "true" : "false", code, lost ? "true" : "false");
    fflush(stdout);
  }
  finish(code);   /* releases the lock (auto-extension stops first) */
}

/* elect: leadership comes and goes. */
static void on_election_change(redlock_election_t *e,
                               redlock_election_event ev, int reason,
                               void *arg) {
  (void)e;
  (void)arg;
  if (finishing)
    return;
  if (ev == REDLOCK_ELECTED) {
    fprintf(stderr, "redlock: elected leader of %s as %s\n", key, opt.id);
    if (stats_timer_open)
      write_stats_reported();   /* leader: 1, at once */
    if (child_running)
      start_when_exited = 1;   /* the previous term's command is going */
    else
      start_child();
    return;
  }
  if (reason == 0)
    return;   /* our own resignation */
  fprintf(stderr, "redlock: leadership of %s lost (%s)%s\n", key,
          reason == REDLOCK_ENOTHELD ? "a majority says it is not ours"
                                     : "could not extend: stepped down",
          child_running ? ": sending SIGTERM" : "");
  start_when_exited = 0;
  if (child_running) {
    deposed_kill = 1;
    term_child();
  } else if (opt.once) {
    finish(EXIT_LOST);
  }
}

static int64_t lost_margin_ms(void);

static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  (void)l;
  (void)arg;
  lost = 1;
  fprintf(stderr, "redlock: lock on %s lost (%s): sending SIGTERM\n", key,
          reason == REDLOCK_ENOTHELD
              ? "a majority says it is not ours"
              : "not extended in time: stopping before the validity ends");
  if (child_running) {
    /* Default grace: what is left of the validity (the margin), so that
     * SIGKILL comes when the lock would have run out. */
    signal_job(SIGTERM);
    start_grace_ms(opt.grace_given ? opt.grace_ms : lost_margin_ms());
  }
}

/* run: a lock that could not be extended is lost this long before its
 * validity ends (the command gets SIGTERM then; SIGKILL at the end of the
 * validity by default): a tenth of the ttl, at least two command
 * timeouts, below half the ttl. */
static int64_t lost_margin_ms(void) {
  int64_t timeout = opt.timeout_ms > 0 ? opt.timeout_ms : 50;
  int64_t m = opt.ttl_ms / 10;
  if (m < 2 * timeout)
    m = 2 * timeout;
  if (m >= opt.ttl_ms / 2)
    m = opt.ttl_ms / 2 - 1;
  return m > 0 ? m : 0;
}

/* The child's environment: ours, without credentials, plus the lock's. */
static char **child_env(void) {
  extern char **environ;
  static char env_key[4096], env_tok[256], env_fence[64], env_id[128];
  static char *env_servers;
  char **envp;
  size_t n = 0, k = 0, i;
  while (environ[n] != NULL)
    n++;
  envp = calloc(n + 5, sizeof(*envp));
  if (envp == NULL)
    return NULL;
  for (i = 0; i < n; i++) {
    const char *e = environ[i];
    if (strncmp(e, "REDLOCK_PASSWORD=", 17) == 0 ||
        strncmp(e, "REDLOCK_KEY=", 12) == 0 ||
        strncmp(e, "REDLOCK_TOKEN=", 14) == 0 ||
        strncmp(e, "REDLOCK_FENCE=", 14) == 0 ||
        strncmp(e, "REDLOCK_LEADER_ID=", 18) == 0)
      continue;
    if (strncmp(e, "REDLOCK_SERVERS=", 16) == 0) {
      char *stripped = strip_userinfo(e + 16);
      if (stripped == NULL)
        continue;
      free(env_servers);
      env_servers = malloc(strlen(stripped) + 17);
      if (env_servers == NULL) {
        free(stripped);
        continue;
      }
      sprintf(env_servers, "REDLOCK_SERVERS=%s", stripped);
      free(stripped);
      envp[k++] = env_servers;
      continue;
    }
    envp[k++] = environ[i];
  }
  snprintf(env_key, sizeof(env_key), "REDLOCK_KEY=%s", key);
  snprintf(env_tok, sizeof(env_tok), "REDLOCK_TOKEN=%s",
           redlock_lock_token(lock != NULL ? lock
                                           : redlock_election_lock(election)));
  envp[k++] = env_key;
  envp[k++] = env_tok;
  if (cmd_bit == C_ELECT) {
    snprintf(env_id, sizeof(env_id), "REDLOCK_LEADER_ID=%s", opt.id);
    envp[k++] = env_id;
  }
  if (opt.fence) {
    snprintf(env_fence, sizeof(env_fence), "REDLOCK_FENCE=%llu",
             (unsigned long long)redlock_lock_fence(lock));
    envp[k++] = env_fence;
  }
  return envp;
}

static void start_child(void) {
  uv_process_options_t po;
  static uv_stdio_container_t stdio[3];
  char **envp = child_env();
  char **args = child_argv;
  char **helper = NULL;
  char ppid[24], grace[24];
  size_t i, n = 0;
  int rc;
  if (envp == NULL) {
    finish(EXIT_FAIL);
    return;
  }
  memset(&po, 0, sizeof(po));
  po.file = child_argv[0];
#ifdef __linux__
  /* Through the exec helper, so that the child dies with us. */
  if (access("/proc/self/exe", X_OK) == 0) {
    while (child_argv[n] != NULL)
      n++;
    helper = calloc(n + 5, sizeof(*helper));
    if (helper != NULL) {
      snprintf(ppid, sizeof(ppid), "%ld", (long)getpid());
      snprintf(grace, sizeof(grace), "%lld", (long long)opt.grace_ms);
      helper[0] = "redlock";
      helper[1] = EXEC_HELPER;
      helper[2] = ppid;
      helper[3] = grace;
      for (i = 0; i < n; i++)
        helper[4 + i] = child_argv[i];
      args = helper;
      po.file = "/proc/self/exe";
    }
  }
#else
  (void)ppid;
  (void)grace;
  (void)n;
#endif
  po.args = args;
  po.env = envp;
  po.exit_cb = on_child_exit;
  po.stdio_count = 3;
  for (i = 0; i < 3; i++) {
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = (int)i;
  }
  po.stdio = stdio;
  rc = uv_spawn(&loop, &child, &po);
  free(envp);
  free(helper);
  if (rc != 0) {
    fprintf(stderr, "redlock: cannot run %s: %s\n", child_argv[0],
            uv_strerror(rc));
    finish(EXIT_NOEXEC);
    return;
  }
  child_running = 1;
}

/* The exec helper: "redlock __exec PPID GRACE_MS CMD ARGS...", between
 * run (or elect) and the command. It makes the job's process group (and
 * gives it the terminal when run had it in front), starts CMD in it, and
 * stays as a small supervisor:
 *  - signals for the job reach the whole group (run sends them there);
 *    the helper ignores them itself;
 *  - if run dies (SIGKILL, out of memory), the kernel tells the helper
 *    (PR_SET_PDEATHSIG), which sends SIGTERM to the whole group, then
 *    SIGKILL after GRACE_MS: no process of the job goes on without the
 *    lock, not only the direct child;
 *  - it exits as CMD did (the same status, or the same signal), after
 *    giving the terminal back. */
static const int helper_ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM,
                                     SIGUSR1, SIGUSR2, SIGTTOU};
#define N_HELPER_IGNORED (sizeof(helper_ignored) / sizeof(helper_ignored[0]))

static void on_parent_gone(int sig) {
  (void)sig;
  kill(0, SIGTERM);   /* the group: the helper ignores it */
}

static void on_helper_grace(int sig) {
  (void)sig;
  kill(0, SIGKILL);
}

static int exec_helper(int argc, char **argv) {
  long parent = strtol(argv[2], NULL, 10);
  long grace_ms = strtol(argv[3], NULL, 10);
  pid_t front = -1;
  pid_t pid;
  int st;
  size_t i;
  (void)argc;
  if (argc < 5)
    return EXIT_USAGE;
  for (i = 0; i < N_HELPER_IGNORED; i++)
    signal(helper_ignored[i], SIG_IGN);
  setpgid(0, 0);
  /* run was in front on its terminal: the job takes its place, so that
   * Ctrl-C and a reading command work as without us. */
  if (isatty(STDIN_FILENO) &&
      tcgetpgrp(STDIN_FILENO) == getpgid((pid_t)parent)) {
    front = getpgid((pid_t)parent);
    tcsetpgrp(STDIN_FILENO, getpgrp());
  }
#ifdef __linux__
  {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_parent_gone;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGRTMIN + 3, &sa, NULL);
    sa.sa_handler = on_helper_grace;
    sigaction(SIGALRM, &sa, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGRTMIN + 3) != 0) {
      fprintf(stderr, "redlock: prctl: %s\n", strerror(errno));
      return EXIT_NOEXEC;
    }
  }
#endif
  /* run died before the prctl: never start without the lock. */
  if ((long)getppid() != parent)
    return EXIT_FAIL;
  pid = fork();
  if (pid < 0) {
    fprintf(stderr, "redlock: fork: %s\n", strerror(errno));
    return EXIT_NOEXEC;
  }
  if (pid == 0) {
    for (i = 0; i < N_HELPER_IGNORED; i++)
      signal(helper_ignored[i], SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    execvp(argv[4], argv + 4);
    fprintf(stderr, "redlock: cannot run %s: %s\n", argv[4],
            strerror(errno));
    _exit(errno == ENOENT ? EXIT_NOEXEC : 126);
  }
  for (;;) {
    pid_t w = waitpid(pid, &st, 0);
    if (w == pid)
      break;
    if (w < 0 && errno != EINTR)
      return EXIT_FAIL;
    if ((long)getppid() != parent && grace_ms >= 0) {
      /* run is gone: SIGTERM went out (on_parent_gone); SIGKILL after
       * the grace, once. */
      alarm((unsigned)(grace_ms / 1000 > 0 ? grace_ms / 1000 : 1));
      grace_ms = -1;
    }
  }
  if (front >= 0 && (long)getppid() == parent)
    tcsetpgrp(STDIN_FILENO, front);
  if (WIFSIGNALED(st)) {
    signal(WTERMSIG(st), SIG_DFL);
    raise(WTERMSIG(st));
    return 128 + WTERMSIG(st);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : EXIT_FAIL;
}

static void on_run_acquired(redlock_lock_t *l, int status,
                            const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  if (status != 0) {
    if (wait_signal != 0) {
      finish(wait_signal);   /* a signal ended the wait */
      return;
    }
    if (finishing)
      return;
    report_result("run", status, r);
    if (status != REDLOCK_ECANCELED) {
      int code = config_verdict(r, 1);
      finish(code != 0 ? code : opt.conflict_code);
      return;
    }
    finish(EXIT_FAIL);
    return;
  }
  if (wait_signal != 0) {
    finish(wait_signal);   /* granted in the same turn as the signal */
    return;
  }
  if (stats_timer_open)
    write_stats_reported();   /* held: 1, at once */
  start_child();
}

/* ---- main ---------------------------------------------------------------- */

static int make_client(void) {
  static const char *servers[REDLOCK_MAX_SERVERS];
  static char password[1024], key_password[1024];
  redlock_client_config cfg;
  const char *list = opt.servers_arg ? opt.servers_arg
                                     : getenv("REDLOCK_SERVERS");
  const char *pf;
  char *copy, *t, *save = NULL;
  size_t n = 0;
  int rc;
  if (list == NULL || *list == '\0')
    usage_error("no servers: use --servers or set REDLOCK_SERVERS");
  copy = strdup(list);
  if (copy == NULL)
    return EXIT_FAIL;
  for (t = copy; t != NULL; t = save) {
    char *end;
    save = strchr(t, ',');
    if (save != NULL)
      *save++ = '\0';
    while (*t == ' ' || *t == '\t')
      t++;
    end = t + strlen(t);
    while (end > t && (end[-1] == ' ' || end[-1] == '\t'))
      *--end = '\0';
    if (*t == '\0')
      usage_error("empty entry in the server list '%s'", opt.servers_arg
                                                          ? "--servers"
                                                          : list);
    if (n == REDLOCK_MAX_SERVERS)
      usage_error("too many servers (at most %d)", REDLOCK_MAX_SERVERS);
    servers[n++] = t;
  }
  if (n == 0)
    usage_error("no servers in the list");
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
  cfg.tls_insecure = opt.tls_insecure || env_bool("REDLOCK_TLS_INSECURE", 0);
  cfg.durable = opt.durable || env_bool("REDLOCK_DURABLE", 0);
  if (opt.max_ttl_ms == 0 && opt_or_env(NULL, "REDLOCK_MAX_TTL") != NULL &&
      (parse_duration(getenv("REDLOCK_MAX_TTL"), &opt.max_ttl_ms) != 0 ||
       opt.max_ttl_ms <= 0))
    config_error("REDLOCK_MAX_TTL='%s' is not a duration (e.g. 10m, 1h)",
                 getenv("REDLOCK_MAX_TTL"));
  cfg.max_ttl_ms = (int)opt.max_ttl_ms;
  cfg.on_warning = on_warning;
  pf = opt_or_env(opt.tls_key_pass_file, "REDLOCK_TLS_KEY_PASSWORD_FILE");
  if (pf != NULL) {
    cfg.tls_key_password = read_secret(pf, key_password,
                                       sizeof(key_password));
    if (cfg.tls_key_password == NULL)
      return EXIT_FAIL;
  }
  pf = opt_or_env(opt.password_file, "REDLOCK_PASSWORD_FILE");
  if (pf != NULL) {
    cfg.password = read_secret(pf, password, sizeof(password));
    if (cfg.password == NULL)
      return EXIT_FAIL;
  } else {
    cfg.password = opt_or_env(NULL, "REDLOCK_PASSWORD");
  }
  cfg.username = cfg.password ? opt_or_env(NULL, "REDLOCK_USERNAME") : NULL;
  rc = redlock_client_new(&loop, &cfg, &client);
  if (rc == REDLOCK_EINVAL)
    usage_error("%s", lib_error());
  if (rc != 0) {
    fprintf(stderr, "redlock: %s\n", lib_error());
    return EXIT_FAIL;
  }
  if (opt.rw != 0 && (opt.n_also > 0 || opt.fence))
    usage_error("--read/--write do not combine with --also or --fence");
  if (cmd_bit & (C_ELECT | C_LEADER)) {
    free(copy);
    return 0;   /* an election handle, or no handle at all */
  }
  if (opt.rw != 0) {
    rc = redlock_rwlock_new(client, key, strlen(key),
                            opt.rw == 2 ? REDLOCK_WRITE : REDLOCK_READ,
                            &lock);
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
    usage_error("%s", lib_error());
  free(copy);   /* the client copied the addresses */
  return 0;
}

int main(int argc, char **argv) {
  const char *pos[3];
  int n_pos;
  int run_at;
  int rc;
  redlock_acquire_opts ao;

  if (argc >= 5 && strcmp(argv[1], EXEC_HELPER) == 0)
    return exec_helper(argc, argv);

  /* A closed standard descriptor would be taken by the first socket or
   * pipe we open (libuv asserts on it; a token could go to a master's
   * socket): /dev/null takes its place. acquire then refuses to run
   * without a stdout, since the token would be lost. */
  {
    int fd;
    for (fd = 0; fd <= 2; fd++) {
      if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
        continue;
      if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd)
        return EXIT_FAIL;
      if (fd == 1)
        stdout_closed = 1;
    }
  }

  /* A closed pipe (stdout to `head`, a master's socket) must be an error
   * to handle, never a signal that kills us while a child runs under our
   * lock. (The library sends with MSG_NOSIGNAL; libuv resets the child's
   * signal dispositions before exec.) */
  signal(SIGPIPE, SIG_IGN);

  run_at = parse_args(argc, argv, pos, &n_pos);
  if (cmd_bit == C_STATS || cmd_bit == C_GUARD) {
    if (n_pos != 0)
      usage_error("%s: unexpected argument '%s'", cmd_name, pos[0]);
    pos[0] = "__redlock__:probe";   /* read, never written */
    n_pos = 1;
  }
  if (n_pos < 1 || pos[0][0] == '\0')
    usage_error("%s: missing KEY", cmd_name);
  key = pos[0];
  if (cmd_bit & (C_RUN | C_ELECT)) {
    child_argv = argv + run_at;
  } else if (cmd_bit == C_EXTEND || cmd_bit == C_RELEASE) {
    if (n_pos != 2)
      usage_error("%s: expected KEY TOKEN", cmd_name);
    opt.token = pos[1];
  } else if (n_pos != 1) {
    usage_error("%s: unexpected argument '%s'", cmd_name, pos[1]);
  }

  if (stdout_closed && cmd_bit == C_ACQUIRE) {
    fprintf(stderr, "redlock: acquire: standard output is closed: the "
            "token would be lost (nothing acquired)\n");
    return EXIT_FAIL;
  }
  if ((cmd_bit & (C_RUN | C_ACQUIRE | C_EXTEND | C_ELECT)) && opt.ttl_given) {
    /* A lock must outlive its own round trips: a 2 ms ttl was accepted
     * and run spun on it silently. */
    int64_t timeout = opt.timeout_ms > 0 ? opt.timeout_ms : 50;
    int64_t min = 2 * timeout > 100 ? 2 * timeout : 100;
    if (opt.ttl_ms < min)
      usage_error("--ttl %lldms is too short to be safe: at least %lldms "
                  "(2 x --timeout, and 100ms)", (long long)opt.ttl_ms,
                  (long long)min);
  }
  if (uv_loop_init(&loop) != 0)
    return EXIT_FAIL;
  rc = make_client();
  if (rc != 0)
    return rc;

  wait_start_ms = uv_now(&loop);
  if (cmd_bit & (C_ACQUIRE | C_RUN | C_ELECT))
    redlock_client_set_event_hook(client, on_client_event, NULL);
  if ((rc = check_stats_file()) != 0) {
    finish(rc);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
  }
  memset(&ao, 0, sizeof(ao));
  if (cmd_bit == C_ACQUIRE || cmd_bit == C_RUN) {
    int64_t wait = opt.wait_ms;
    if (!opt.wait_given && cmd_bit == C_ACQUIRE)
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
  if (cmd_bit == C_RUN) {
    ao.auto_extend = 1;
    ao.heal = opt.heal;
    ao.fence = opt.fence;
    ao.wake = opt.wake;
    ao.on_lost = on_lost;
    ao.lost_margin_ms = (int)lost_margin_ms();
    if (open_signals() != 0) {
      fprintf(stderr, "redlock: cannot set up signals: %s\n",
              strerror(errno));
      return EXIT_FAIL;
    }
    rc = redlock_lock_acquire(lock, opt.ttl_ms, &ao, on_run_acquired, NULL);
    start_stats_file();
  } else if (cmd_bit == C_ACQUIRE) {
    ao.fence = opt.fence;
    ao.wake = opt.wake;
    rc = redlock_lock_acquire(lock, opt.ttl_ms, &ao, on_acquire_cmd, NULL);
  } else if (cmd_bit == C_EXTEND) {
    rc = redlock_lock_adopt(lock, opt.token);
    if (rc == 0)
      rc = redlock_lock_extend(lock, opt.ttl_ms, on_extend_cmd, NULL);
  } else if (cmd_bit == C_RELEASE) {
    rc = redlock_lock_adopt(lock, opt.token);
    if (rc == 0)
      rc = redlock_lock_release(lock, on_release_cmd, NULL);
  } else if (cmd_bit == C_ELECT) {
    static char default_id[128];
    redlock_election_opts eo;
    if (opt.id == NULL) {
      char host[64];
      if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
      host[sizeof(host) - 1] = '\0';
      snprintf(default_id, sizeof(default_id), "%s:%ld", host,
               (long)getpid());
      opt.id = default_id;
    }
    memset(&eo, 0, sizeof(eo));
    eo.ttl_ms = opt.ttl_given ? opt.ttl_ms : 10000;
    eo.retry_delay_ms = 200;
    eo.on_change = on_election_change;
    rc = redlock_election_new(client, key, strlen(key), opt.id, &eo,
                              &election);
    if (rc == 0 && open_signals() != 0) {
      fprintf(stderr, "redlock: cannot set up signals: %s\n",
              strerror(errno));
      return EXIT_FAIL;
    }
    if (rc == 0)
      rc = redlock_election_campaign(election);
    start_stats_file();
  } else if (cmd_bit == C_LEADER && opt.watch) {
    uv_timer_init(&loop, &watch_timer);
    if (open_signals() != 0) {
      fprintf(stderr, "redlock: cannot set up signals: %s\n",
              strerror(errno));
      return EXIT_FAIL;
    }
    rc = redlock_election_leader(client, key, strlen(key),
                                 on_leader_watched, NULL);
  } else if (cmd_bit == C_LEADER) {
    rc = redlock_election_leader(client, key, strlen(key), on_leader_cmd,
                                 NULL);
  } else if (cmd_bit == C_UNLOCK) {
    if (!opt.force)
      usage_error("unlock deletes KEY whoever holds it: say --force (to "
                  "give up a lock you hold, use release with its token)");
    rc = opt.n_also > 0 ? redlock_lock_force_release(lock, on_unlock_done,
                                                     NULL)
                        : redlock_lock_inspect(lock, on_unlock_inspected,
                                               NULL);
  } else {
    rc = redlock_lock_inspect(lock, cmd_bit == C_STATS   ? on_stats_cmd
                                    : cmd_bit == C_GUARD ? on_guard_cmd
                                                         : on_status_cmd,
                              NULL);
  }
  if (rc == REDLOCK_EINVAL)
    usage_error("%s", lib_error());
  if (rc != 0) {
    fprintf(stderr, "redlock: %s\n", lib_error());
    finish(EXIT_FAIL);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(opt.servers_copy);
  if (sig_pipe[0] >= 0) {
    close(sig_pipe[0]);
    close(sig_pipe[1]);
  }
  return exit_code;
}
