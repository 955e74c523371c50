/* redlock: the command-line tool. Like flock(1), across hosts: a Redlock
 * over N Redis masters. Public API only (include/redlock.h).
 *
 *   redlock [GLOBAL] run [OPTIONS] KEY [--] CMD [ARGS...]
 *   redlock [GLOBAL] acquire|extend|release|status|unlock ... KEY
 *   redlock [GLOBAL] elect|leader ... KEY
 *   redlock [GLOBAL] limit KEY K
 *   redlock [GLOBAL] stats|guard
 *   redlock [GLOBAL] ls [PREFIX]
 *   redlock help [COMMAND]
 *
 * Options go before or after the command and its arguments, until "--"
 * (as GNU getopt_long permutes them); --opt=value works too; flock(1)'s
 * short forms too. Each command's file has its help text; options.c has
 * the table; the man page is tools/redlock.1. The files: cli.h.
 *
 * Decisions worth knowing (docs: docs/CLI.md, redlock.1):
 *  - Credentials never stay visible: a password in --servers is overwritten
 *    in argv as soon as it is parsed (ps shows '*'), and the child of `run`
 *    gets no REDLOCK_PASSWORD and no user:password in REDLOCK_SERVERS.
 *  - Never silent: a wait says why (wait.c); a configuration error is an
 *    exit code of its own (69, 73, 77, 78), never a wait.
 *  - `run` and `elect` run the command in a process group of its own
 *    behind a small exec helper ("redlock __exec PPID GRACE CMD..."): every
 *    signal goes to the whole group, and if run dies the helper stops the
 *    group (PR_SET_PDEATHSIG). A lost lock stops the job a margin before
 *    its validity ends (run.c).
 *  - Closed standard descriptors get /dev/null (main); a token that cannot
 *    be written is released (acquire.c). */
#include "cli.h"

uv_loop_t loop;
redlock_client_t *client;
redlock_lock_t *lock;
redlock_election_t *election;   /* elect */
const char *key;
char *key_text;   /* key, escaped for people (text_of) */
const char *cmd_name;
unsigned cmd_bit;
int exit_code = EXIT_FAIL;
int finishing;          /* the exit code is decided */
int stdout_closed;      /* started with fd 1 closed */

/* The subcommands (a new one: its file, with help, start and close, and a
 * row here). */
const cli_command cli_commands[] = {
    {"run", C_RUN, help_run, ARGS_KEY_CMD, 1, NULL, start_run,
     close_signals, on_run_event},
    {"acquire", C_ACQUIRE, help_acquire, ARGS_KEY, 1, check_acquire,
     start_acquire, NULL, on_client_event},
    {"extend", C_EXTEND, help_extend, ARGS_KEY_TOKEN, 1, NULL, start_extend,
     NULL, NULL},
    {"release", C_RELEASE, help_release, ARGS_KEY_TOKEN, 1, NULL,
     start_release, NULL, NULL},
    {"status", C_STATUS, help_status, ARGS_KEY, 1, NULL, start_status, NULL,
     NULL},
    {"elect", C_ELECT, help_elect, ARGS_KEY_CMD, 0, NULL, start_elect,
     close_signals, on_run_event},
    {"leader", C_LEADER, help_leader, ARGS_KEY, 0, NULL, start_leader,
     close_leader, NULL},
    {"stats", C_STATS, help_stats, ARGS_NONE, 1, NULL, start_stats, NULL,
     NULL},
    {"guard", C_GUARD, help_guard, ARGS_NONE, 1, NULL, start_guard, NULL,
     NULL},
    {"unlock", C_UNLOCK, help_unlock, ARGS_KEY, 1, check_unlock,
     start_unlock, NULL, NULL},
    {"limit", C_LIMIT, help_limit, ARGS_KEY_LIMIT, 1, NULL, start_limit,
     NULL, NULL},
    {"ls", C_LS, help_ls, ARGS_PREFIX, 0, NULL, start_ls, close_ls, NULL},
};
const size_t n_cli_commands = sizeof(cli_commands) / sizeof(cli_commands[0]);
const cli_command *command;

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
      int64_t d;
      /* The environment's bad values are all 78, named (as
       * REDLOCK_MAX_TTL's); the command line's are usage errors. */
      if (opt.restart_guard == NULL && parse_duration(g, &d) != 0)
        config_error("REDLOCK_RESTART_GUARD='%s' is neither off nor a "
                     "duration (e.g. 30s, 1m)", g);
      d = duration_arg("--restart-guard", g);
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
  if (pf != NULL)
    cfg.tls_key_password = read_secret(
        pf, opt.tls_key_pass_file != NULL ? "--tls-key-pass-file"
                                          : "REDLOCK_TLS_KEY_PASSWORD_FILE",
        key_password, sizeof(key_password));
  pf = opt_or_env(opt.password_file, "REDLOCK_PASSWORD_FILE");
  if (pf != NULL) {
    cfg.password = read_secret(
        pf, opt.password_file != NULL ? "--password-file"
                                      : "REDLOCK_PASSWORD_FILE",
        password, sizeof(password));
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
  if (!command->lock_handle) {
    free(copy);
    return 0;   /* an election handle, or no handle at all */
  }
  if (opt.limit > 0) {
    /* A counting semaphore: one of opt.limit permits (semaphore.c). */
    rc = redlock_semaphore_new(client, key, strlen(key), opt.limit, &lock);
  } else if (opt.rw != 0) {
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
  open_json_out();
  if (opt.timeout_old == 1 && !opt.quiet)
    fprintf(stderr, "redlock: warning: --timeout as the per-master command "
            "timeout is deprecated (run and acquire take it as the wait, "
            "as flock does): use --command-timeout\n");
  else if (opt.timeout_old == 2 && !opt.quiet)
    fprintf(stderr, "redlock: warning: --timeout is the wait (as flock's "
            "-w), here below 1 s; the per-master command timeout is "
            "--command-timeout\n");
  if (command->args == ARGS_NONE) {
    if (n_pos != 0)
      usage_error("%s: unexpected argument '%s'", cmd_name, pos[0]);
    pos[0] = "__redlock__:probe";   /* read, never written */
    n_pos = 1;
  }
  if (command->args == ARGS_PREFIX) {
    if (n_pos > 1)
      usage_error("%s: unexpected argument '%s'", cmd_name, pos[1]);
    if (n_pos == 0)
      pos[0] = "";   /* every name */
    n_pos = 1;
  }
  if (n_pos < 1 || (pos[0][0] == '\0' && command->args != ARGS_PREFIX))
    usage_error("%s: missing KEY", cmd_name);
  key = pos[0];
  key_text = text_of(key);
  if (key_text == NULL)
    return EXIT_FAIL;
  if (command->args == ARGS_KEY_CMD && opt.shell_cmd != NULL) {
    /* flock -c: the shell runs it. */
    static char *shell_argv[4];
    shell_argv[0] = (char *)"sh";
    shell_argv[1] = (char *)"-c";
    shell_argv[2] = (char *)opt.shell_cmd;
    shell_argv[3] = NULL;
    child_argv = shell_argv;
  } else if (command->args == ARGS_KEY_CMD) {
    child_argv = argv + run_at;
  } else if (command->args == ARGS_KEY_TOKEN) {
    if (n_pos != 2)
      usage_error("%s: expected KEY TOKEN", cmd_name);
    opt.token = pos[1];
  } else if (command->args == ARGS_KEY_LIMIT) {
    if (n_pos != 2)
      usage_error("%s: expected KEY LIMIT", cmd_name);
    opt.limit = parse_limit("LIMIT", pos[1]);
  } else if (n_pos != 1) {
    usage_error("%s: unexpected argument '%s'", cmd_name, pos[1]);
  }
  check_semaphore();
  if (command->check != NULL)
    command->check();
  if ((cmd_bit & (C_RUN | C_ACQUIRE | C_EXTEND | C_ELECT)) && opt.ttl_given) {
    /* A lock must outlive its own round trips: a 2 ms ttl was accepted
     * and run spun on it silently. */
    int64_t timeout = opt.timeout_ms > 0 ? opt.timeout_ms : 50;
    int64_t min = 2 * timeout > 100 ? 2 * timeout : 100;
    if (opt.ttl_ms < min)
      usage_error("--ttl %lldms is too short to be safe: at least %lldms "
                  "(2 x --command-timeout, and 100ms)", (long long)opt.ttl_ms,
                  (long long)min);
  }
  if (uv_loop_init(&loop) != 0)
    return EXIT_FAIL;
  rc = make_client();
  if (rc != 0)
    return rc;

  wait_start_ms = uv_now(&loop);
  if (command->event != NULL)
    redlock_client_set_event_hook(client, command->event, NULL);
  if ((rc = check_stats_file()) != 0) {
    finish(rc);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
  }
  rc = command->start();
  if (rc == REDLOCK_EINVAL)
    usage_error("%s", lib_error());
  if (rc != 0) {
    fprintf(stderr, "redlock: %s\n", lib_error());
    finish(EXIT_FAIL);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (exit_code == EXIT_OK &&
      (cmd_bit & (C_STATUS | C_STATS | C_GUARD | C_LEADER | C_EXTEND |
                  C_LS)) &&
      (stdout_closed || fflush(stdout) != 0 || ferror(stdout))) {
    /* What was asked for did not reach anyone: a failure (a closed
     * pipe, /dev/full, fd 1 closed), not 0. */
    fprintf(stderr, "redlock: %s: cannot write to standard output (%s)\n",
            cmd_name, stdout_closed ? "it is closed" : strerror(errno));
    exit_code = EXIT_FAIL;
  }
  free(key_text);
  free(opt.servers_copy);
  if (sig_pipe[0] >= 0) {
    close(sig_pipe[0]);
    close(sig_pipe[1]);
  }
  return exit_code;
}
