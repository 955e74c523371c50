/* cli.h: what the redlock command-line tool's files share: the exit
 * codes, the command bits, the options as parsed, the process-wide state
 * (one loop, one client, one lock or election per run), and the functions
 * one subcommand's file calls in another's.
 *
 * The files, one per concern (each subcommand with its help text and
 * its start: a new subcommand is a file plus a row of cli_commands):
 *   main.c     main(): closed descriptors, parsing, the client, the
 *              command table, dispatch
 *   options.c  the option table, parsing, durations, booleans, credentials
 *   output.c   JSON, results, --stats-file, finish()
 *   wait.c     never silent: why a wait goes on, and when it must not
 *   acquire.c  acquire, extend, release
 *   status.c   status, guard, stats
 *   admin.c    leader (--watch), unlock --force
 *   ls.c       ls: the locks under a prefix (scan, then inspect)
 *   semaphore.c  counting semaphores: --limit's checks, limit, status and
 *              unlock --force of a semaphore, the ELIMIT message
 *   run.c      run and elect: signals, the job's process group, the exec
 *              helper */
#ifndef REDLOCK_CLI_H
#define REDLOCK_CLI_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
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
#define EXIT_UNRESPONSIVE 74 /* EX_IOERR: masters take connections but never
                                answer (a black hole) */
#define EXIT_NOPERM 77       /* EX_NOPERM: authentication refused */
#define EXIT_CONFIG 78       /* EX_CONFIG: a bad value in the environment;
                                TLS verification or SELECT refused */
#define EXIT_NOEXEC 127      /* run: the command could not be started */

#define EXEC_HELPER "__exec"

enum { C_RUN = 1, C_ACQUIRE = 2, C_EXTEND = 4, C_RELEASE = 8, C_STATUS = 16,
       C_ELECT = 32, C_LEADER = 64, C_STATS = 128, C_GUARD = 256,
       C_UNLOCK = 512, C_LIMIT = 1024, C_LS = 2048, C_ALL = 4095 };

enum {
  O_SERVERS, O_PASSWORD_FILE, O_JSON, O_PREFIX, O_QUORUM, O_TIMEOUT,
  O_CONNECT_TIMEOUT, O_RESTART_GUARD, O_TLS_CA, O_TLS_CA_DIR, O_TLS_CERT,
  O_TLS_KEY, O_TLS_KEY_PASS_FILE, O_TLS_SERVER_NAME, O_TLS_INSECURE,
  O_HELP, O_VERSION, O_TTL, O_WAIT, O_GRACE, O_HEAL, O_FENCE, O_WAKE,
  O_ALSO, O_READ, O_WRITE, O_TOKEN, O_ID, O_NO_ID, O_ONCE, O_STATS, O_STATS_FILE,
  O_DURABLE, O_MAX_TTL, O_QUIET, O_SET_RECORD, O_NOWAIT, O_WAIT_SECS,
  O_CONFLICT_EXIT, O_SHARED, O_EXCLUSIVE, O_CLOSE, O_STATS_LABEL, O_FORCE,
  O_WATCH, O_LIMIT, O_PERMIT, O_TIMEOUT_OLD, O_SHELL_CMD, O_VERBOSE,
  O_JSON_FILE, O_JSON_FD, O_PROMETHEUS, O_MAX
};

/* A subcommand: one row of cli_commands (main.c). */
typedef enum {
  ARGS_KEY,          /* KEY */
  ARGS_KEY_TOKEN,    /* KEY TOKEN */
  ARGS_KEY_CMD,      /* KEY [--] CMD [ARGS...] */
  ARGS_KEY_LIMIT,    /* KEY LIMIT (a number: opt.limit) */
  ARGS_NONE,         /* nothing (a probe key is used) */
  ARGS_PREFIX        /* [PREFIX] (key: "" when absent) */
} cli_args;

typedef struct cli_command {
  const char *name;
  unsigned bit;                /* C_*: which options apply */
  const char *help;
  cli_args args;
  int lock_handle;             /* needs the lock handle (make_client) */
  /* Before the client exists: usage errors (exits), or NULL. */
  void (*check)(void);
  /* Starts the work on the loop: a library call's status (EINVAL: a
   * usage error). */
  int (*start)(void);
  /* finish(): stops what start set up (signals, timers), or NULL. */
  void (*close)(void);
  /* The client's events while it runs (the wait's, on_client_event, or
   * one that passes the others to it), or NULL. */
  void (*event)(redlock_client_t *c, const redlock_event *ev, void *arg);
} cli_command;

extern const cli_command cli_commands[];
extern const size_t n_cli_commands;
extern const cli_command *command;   /* the one running */

typedef struct optdef {
  const char *name;   /* without "--" */
  char shortname;
  int has_arg;
  unsigned cmds;      /* where it applies */
  int id;
} optdef;

#define MAX_LABELS 8
extern const char *labels[MAX_LABELS];   /* --stats-label NAME=VALUE */
extern int n_labels;

/* Signals arrive through a pipe (self-pipe): the handler writes what
 * happened, the loop reads it. SA_SIGINFO tells who sent it. */
typedef struct sig_event {
  int signum;
  int from_kernel;   /* si_code SI_KERNEL: sent to our process group */
} sig_event;

typedef struct cli_opts {
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
  const char *id;         /* --id: run, acquire (holder), elect */
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
  unsigned limit;       /* --limit K (a counting semaphore); 0: a mutex */
  int permit;           /* unlock --permit I; -1: not given */
  /* --timeout: the wait for run and acquire (flock's -w/--timeout);
   * elsewhere the deprecated spelling of --command-timeout (warned once
   * the options are parsed: -q may come after it). */
  int timeout_old;      /* 1: given as the deprecated alias; 2: as a wait
                           below 1 s (an old command timeout, likely) */
  const char *shell_cmd;   /* run/elect -c CMD: sh -c CMD */
  int verbose;          /* --verbose: how long the acquisition took */
  const char *json_file;   /* run/elect --json-file F (implies --json) */
  int json_fd;          /* run/elect --json-fd N; -1: not given */
  int prometheus;       /* stats --prometheus: the text even with --json */
  int no_id;              /* --no-id: run and acquire store no holder */
  unsigned max_names;   /* ls --max N; 0: not given (1000) */
} cli_opts;
extern cli_opts opt;

/* ---- main.c ---- */
extern const char *cmd_name;
extern const char *key;
extern char *key_text;
extern int exit_code;
extern int finishing;
extern redlock_client_t *client;
extern redlock_election_t *election;
extern redlock_lock_t *lock;
extern unsigned cmd_bit;
extern uv_loop_t loop;

/* ---- options.c ---- */
void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
char *read_secret(const char *path, const char *what, char *buf,
                  size_t len);
void config_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
int env_bool(const char *name, int dflt);
const char *lib_error(void);
const char *opt_or_env(const char *v, const char *env);
int parse_duration(const char *s, int64_t *out);
int64_t duration_arg(const char *flag, const char *v);
char *strip_userinfo(const char *list);
int parse_args(int argc, char **argv, const char **positional,
               int *n_pos);
unsigned parse_limit(const char *flag, const char *v);

/* ---- output.c ---- */
extern int final_release;
extern int stats_timer_open;
void json_str(const char *str);
void json_fstr(FILE *f, const char *str);
extern FILE *json_out;   /* run's and elect's JSON: stdout or --json-file */
void open_json_out(void);
void say_verbose(int status, const redlock_result *r);
char *text_of(const char *s);
#define HOLDER_SHOWN_LEN (REDLOCK_MAX_HOLDER * 4 + 16)
void holder_shown(const char *value, char *buf, size_t len);
/* A lock's value as status, ls and a semaphore's status show it: never
 * the whole token. */
typedef struct holder_view {
  char shown[HOLDER_SHOWN_LEN];      /* for people (holder_shown) */
  char token8[16];                   /* 8 characters of it, then "..." */
  char id[REDLOCK_MAX_HOLDER + 1];   /* its holder part, or "" */
} holder_view;
void holder_view_of(const char *value, holder_view *h);
/* ,"holder":"<8 characters>","holder_id":"<id>" (null without one); h
 * NULL: a free key's ("holder":"","holder_id":null). */
void json_holder(const holder_view *h);
/* run's and acquire's holder (--id, else a default: HOST:PID when
 * with_pid, else HOST; NULL with --no-id). */
const char *holder_id(int with_pid);
void report_result(const char *what, int status,
                   const redlock_result *r);
void on_client_closed(redlock_client_t *c, void *arg);
void write_stats_reported(void);
int check_stats_file(void);
void start_stats_file(void);
void finish_close(void);
void finish(int code);
void on_warning(redlock_client_t *c, const char *msg, void *arg);
void print_stats(void);

/* ---- wait.c ---- */
extern uint64_t wait_start_ms;
int config_verdict(const redlock_result *r, int final);
void on_client_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg);

/* ---- acquire.c ---- */
extern const char help_acquire[];
extern const char help_extend[];
extern const char help_release[];
extern int stdout_closed;
void wait_opts(redlock_acquire_opts *ao);
void check_acquire(void);
int start_acquire(void);
int start_extend(void);
int start_release(void);
void on_acquire_cmd(redlock_lock_t *l, int status,
                    const redlock_result *r, void *arg);
void on_extend_cmd(redlock_lock_t *l, int status,
                   const redlock_result *r, void *arg);
void on_release_cmd(redlock_lock_t *l, int status,
                    const redlock_result *r, void *arg);

/* ---- status.c ---- */
extern const char help_guard[];
extern const char help_stats[];
extern const char help_status[];
int start_status(void);
int start_stats(void);
int start_guard(void);
void on_guard_cmd(redlock_lock_t *l, int status,
                  const redlock_result *r, void *arg);
void on_status_cmd(redlock_lock_t *l, int status,
                   const redlock_result *r, void *arg);
void on_stats_cmd(redlock_lock_t *l, int status,
                  const redlock_result *r, void *arg);

/* ---- admin.c ---- */
extern const char help_leader[];
extern const char help_unlock[];
extern uv_timer_t watch_timer;
void check_unlock(void);
int start_leader(void);
int start_unlock(void);
void close_leader(void);
void on_leader_watched(redlock_client_t *c, int status,
                       const char *identity, int64_t ttl_ms,
                       void *arg);
void close_watch(void);
void on_unlock_done(redlock_lock_t *l, int status,
                    const redlock_result *r, void *arg);
void on_unlock_inspected(redlock_lock_t *l, int status,
                         const redlock_result *r, void *arg);
void on_leader_cmd(redlock_client_t *c, int status,
                   const char *identity, int64_t ttl_ms, void *arg);

/* ---- semaphore.c ---- */
extern const char help_limit[];
void check_semaphore(void);
int start_limit(void);
int start_sem_status(void);
int start_sem_unlock(void);
int limit_mismatch(int status, const redlock_result *r);

/* ---- ls.c ---- */
extern const char help_ls[];
int start_ls(void);
void close_ls(void);

/* ---- run.c ---- */
extern char **child_argv;
extern const char help_elect[];
extern const char help_run[];
extern int lost;
extern int sig_pipe[2];
extern uv_process_t child;
void close_signals(void);
int start_run(void);
void on_run_event(redlock_client_t *c, const redlock_event *ev, void *arg);
int start_elect(void);
int open_signals(void);
void on_election_change(redlock_election_t *e,
                        redlock_election_event ev, int reason,
                        void *arg);
void on_lost(redlock_lock_t *l, int reason, void *arg);
int64_t lost_margin_ms(void);
int exec_helper(int argc, char **argv);
void on_run_acquired(redlock_lock_t *l, int status,
                     const redlock_result *r, void *arg);

#endif
