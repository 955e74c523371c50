/* run.c: run and elect. The command runs in a process group of its own
 * behind a small exec helper; signals go to the group; a lost lock stops
 * it before the validity ends. */
#include "cli.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0   /* run ignores SIGPIPE (main.c) */
#endif

const char help_run[] =
    "usage: redlock run [OPTIONS] KEY [--] CMD [ARGS...]\n"
    "       redlock run [OPTIONS] KEY -c 'SHELL COMMAND'\n"
    "\n"
    "Hold KEY while CMD runs, extended automatically, and exit with CMD's\n"
    "status. CMD sees REDLOCK_KEY and REDLOCK_TOKEN (and REDLOCK_FENCE with\n"
    "--fence); never the masters' password.\n"
    "\n"
    "  --ttl D      lock ttl, extended every ttl/3 (default 30s)\n"
    "  --wait D     how long to wait for the lock (default: forever; 0: one\n"
    "               attempt); flock's -w SECS, --timeout D and -n (= --wait\n"
    "               0). Never compared with the ttl\n"
    "  -c CMD       run CMD with sh -c (flock's -c), instead of CMD ARGS\n"
    "  --verbose    say how long the acquisition took (flock's)\n"
    "  -E CODE      exit code when not acquired (default 75; flock's -E)\n"
    "  --grace D    after SIGTERM to CMD, SIGKILL it this much later\n"
    "               (default 10s; never after the validity ends)\n"
    "  --heal       extensions re-create the key on masters that lost it\n"
    "  --fence      REDLOCK_FENCE: a number that strictly increases across\n"
    "               holders (masters need appendonly)\n"
    "  --wake       wait for the holder's release message instead of polling\n"
    "  --also KEY2  lock KEY2 too, all or none (repeatable)\n"
    "  --read, --write  take KEY's read-write lock (many readers or one\n"
    "               writer); flock's -s and -x. The modes of KEY exclude\n"
    "               each other: a plain holder keeps -s and -x out, and\n"
    "               the reverse\n"
    "  --limit K    KEY is a counting semaphore: hold one of its K permits\n"
    "               (at most K jobs at once across hosts; CMD sees\n"
    "               REDLOCK_PERMIT, 0..K-1). Every job must use the same\n"
    "               K: another one gets exit 78 (change it: redlock limit)\n"
    "  --id NAME    the holder `status` shows (1..80 bytes; default\n"
    "               HOSTNAME:PID of this process; --no-id: none)\n"
    "  -o           accepted for flock(1): CMD never holds the lock\n"
    "  --stats-file F, --stats-label NAME=VALUE  as for elect\n"
    "  --json-file F, --json-fd N  the --json object to F or descriptor N\n"
    "               (3> FILE), apart from CMD's stdout; either implies --json\n"
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
    "SIGKILL after --grace, at the validity's end at the latest; Linux,\n"
    "PR_SET_PDEATHSIG). The lock is held until no process of the group is\n"
    "left (what CMD left in the background too); a process that leaves\n"
    "the group (setsid) is out of reach.\n";

const char help_elect[] =
    "usage: redlock elect [--id NAME] [OPTIONS] KEY [--] CMD [ARGS...]\n"
    "       redlock elect [--id NAME] [OPTIONS] KEY -c 'SHELL COMMAND'\n"
    "\n"
    "Leader election: campaign for KEY and run CMD only while this process\n"
    "leads. A standby takes over as soon as the leader's lock expires or it\n"
    "resigns (release message). When leadership is lost (a majority says\n"
    "the lock is someone else's, or it could not be extended: the leader\n"
    "steps down before its validity ends), CMD gets SIGTERM, then SIGKILL\n"
    "after --grace or when the validity ends, whichever is first; the lock\n"
    "is kept until CMD's group has exited, then the process campaigns\n"
    "again (--once: exits 76).\n"
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
    "               5 s and last, for node_exporter's textfile collector\n"
    "  --stats-label NAME=VALUE  one more label on every sample\n"
    "  --json       one JSON object per line and event (elected, lost, exit);\n"
    "               --json-file F or --json-fd N: there, apart from CMD's\n"
    "               stdout\n";

static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
                                SIGUSR2};
#define N_FORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

int sig_pipe[2] = {-1, -1};
static uv_poll_t sig_poll;
static uv_timer_t grace_timer;
static int signals_open;
uv_process_t child;
static int child_running;
int lost;
static int term_escalated;     /* SIGKILL after SIGTERM to run */
static int stopping;           /* elect: a signal asked us to stop */
static int deposed_kill;       /* elect: the child goes, we campaign on */
static int start_when_exited;  /* elect: elected again while it went */
static int child_closing;      /* the exited child's handle is closing:
                                  uv_spawn on it must wait (libuv asserts) */
static int start_when_closed;  /* elect: the next term's command, then */
static int wait_signal;        /* a signal ended the wait for the lock */
static int job_fd = -1;        /* our end of the socket to the exec helper:
                                  the validity's end goes down, 'X' comes
                                  up when the helper killed the job then */
static int expired_kill;       /* the helper SIGKILLed the job's group at
                                  the validity's end */
static int expired_wait;       /* elect: so killed before the library said
                                  the leadership is lost: wait for it */
char **child_argv;

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

void close_signals(void) {
  size_t i;
  if (!signals_open)
    return;
  signals_open = 0;
  for (i = 0; i < N_FORWARDED; i++)
    signal(forwarded[i], SIG_DFL);
  uv_close((uv_handle_t *)&sig_poll, NULL);
  uv_close((uv_handle_t *)&grace_timer, NULL);
}

#define JOB_KILL_NOW 0   /* on the helper's socket, for a validity's end:
                            SIGKILL the group now (kill_job) */

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

/* SIGKILL for the job's group, through the exec helper when there is
 * one: it leaves the group, kills it and exits only once it has reaped
 * every member. kill(-group, SIGKILL) from here would kill the helper
 * too, and its exit (our cue to release) could come while members are
 * still dying (a large memory to free, a write in flight in D state). */
static void kill_job(void) {
  int64_t now_please = JOB_KILL_NOW;
  if (job_fd >= 0 && send(job_fd, &now_please, sizeof(now_please),
                          MSG_NOSIGNAL) == (ssize_t)sizeof(now_please))
    return;
  signal_job(SIGKILL);   /* no helper, or it is gone: as before */
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
  kill_job();
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

int open_signals(void) {
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

static void start_child(void);

/* The handle is reusable only now: a new term's command elected while the
 * old one was stopping starts here, not from the exit callback. */
static void on_child_closed(uv_handle_t *h) {
  (void)h;
  child_closing = 0;
  if (start_when_closed) {
    start_when_closed = 0;
    if (!finishing)
      start_child();
  }
}

static void on_child_exit(uv_process_t *p, int64_t status, int sig) {
  int code;
  child_running = 0;
  child_closing = 1;
  uv_close((uv_handle_t *)p, on_child_closed);
  uv_timer_stop(&grace_timer);
  code = sig != 0 ? 128 + sig : (int)status;
  if (job_fd >= 0) {
    /* The helper writes 'X' before the SIGKILL that ends it too: it is
     * there by the time its exit is. */
    char c;
    expired_kill = sig == SIGKILL && read(job_fd, &c, 1) == 1 && c == 'X';
    close(job_fd);
    job_fd = -1;
  }
  if (expired_kill)
    fprintf(stderr, "redlock: the validity of the lock on %s ended: the "
            "command's group was killed\n", key_text);
  if (cmd_bit == C_ELECT && expired_kill && !deposed_kill && !stopping &&
      !finishing) {
    /* The library says so at its next timer (or, an extension that was
     * in flight came back in time, leads on: on_job_extended). */
    expired_wait = 1;
    return;
  }
  if (cmd_bit == C_RUN && expired_kill)
    lost = 1;
  if (cmd_bit == C_ELECT && deposed_kill && election != NULL) {
    /* The lost term's command has stopped: the lock it kept (hold) goes;
     * campaign again unless we stop. */
    if (stopping || finishing || opt.once)
      redlock_election_resign(election);
    else
      redlock_election_stepped_down(election);
  }
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
            key_text);
    code = EXIT_LOST;
  } else if (term_escalated) {
    code = 128 + SIGTERM;
  } else if (cmd_bit == C_ELECT && deposed_kill) {
    code = EXIT_LOST;   /* lost, then asked to stop */
  }
  if (opt.json) {
    /* run: one object; elect: its last event (JSON lines). */
    fprintf(json_out, "{\"command\":\"%s\",\"key\":",
            cmd_bit == C_RUN ? "run" : "elect");
    json_fstr(json_out, key);
    fprintf(json_out, "%s,\"ok\":%s,\"exit\":%d,\"lost\":%s}\n",
            cmd_bit == C_RUN ? "" : ",\"event\":\"exit\"",
            code == 0 ? "true" : "false", code, lost ? "true" : "false");
    fflush(json_out);
  }
  finish(code);   /* releases the lock (auto-extension stops first) */
}

/* elect: leadership comes and goes. */
void on_election_change(redlock_election_t *e,
                        redlock_election_event ev, int reason,
                        void *arg) {
  (void)e;
  (void)arg;
  if (finishing)
    return;
  if (ev == REDLOCK_ELECTED) {
    fprintf(stderr, "redlock: elected leader of %s as %s\n", key_text, opt.id);
    if (opt.json) {
      fprintf(json_out, "{\"command\":\"elect\",\"key\":");
      json_fstr(json_out, key);
      fprintf(json_out, ",\"event\":\"elected\",\"id\":");
      json_fstr(json_out, opt.id);
      fprintf(json_out, "}\n");
      fflush(json_out);
    }
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
  fprintf(stderr, "redlock: leadership of %s lost (%s)%s\n", key_text,
          reason == REDLOCK_ENOTHELD ? "a majority says it is not ours"
                                     : "could not extend: stepped down",
          child_running ? ": sending SIGTERM" : "");
  if (opt.json) {
    fprintf(json_out, "{\"command\":\"elect\",\"key\":");
    json_fstr(json_out, key);
    fprintf(json_out, ",\"event\":\"lost\",\"reason\":\"%s\"}\n",
            reason == REDLOCK_ENOTHELD ? "not_ours" : "not_extended");
    fflush(json_out);
  }
  start_when_exited = 0;
  expired_wait = 0;
  if (child_running) {
    /* The lock stays (no release, no campaign) until the command has
     * exited: it is protected while it stops; the exec helper SIGKILLs
     * its group when the validity ends. */
    redlock_election_hold(election);
    deposed_kill = 1;
    term_child();
  } else if (opt.once) {
    finish(EXIT_LOST);
  }
}

/* The boot-time clock (CLOCK_BOOTTIME, the library's: it counts a
 * suspension too), in ns: the exec helper and we read the same one. */
static int64_t boot_ns(void) {
  struct timespec ts;
#ifdef CLOCK_BOOTTIME
  if (clock_gettime(CLOCK_BOOTTIME, &ts) == 0)
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
#endif
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An auto-extension succeeded with validity_ms left: the helper's
 * deadline moves (whole ms, rounded down: never after the library's). */
static void on_job_extended(int64_t validity_ms) {
  int64_t until;
  if (cmd_bit == C_ELECT && expired_wait && !child_running && !finishing &&
      !stopping) {
    expired_wait = 0;
    start_child();   /* still the leader: its command again */
    return;
  }
  if (job_fd < 0 || validity_ms <= 0)
    return;
  until = boot_ns() + validity_ms * 1000000;
  if (send(job_fd, &until, sizeof(until), MSG_NOSIGNAL) !=
      (ssize_t)sizeof(until)) {
    /* the helper is gone, or its buffer full: it kills at the last
     * deadline it read, never later */
  }
}

void on_lost(redlock_lock_t *l, int reason, void *arg) {
  (void)l;
  (void)arg;
  lost = 1;
  fprintf(stderr, "redlock: lock on %s lost (%s): sending SIGTERM\n", key_text,
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
int64_t lost_margin_ms(void) {
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
  static char env_permit[32];
  static char *env_servers;
  char **envp;
  size_t n = 0, k = 0, i;
  while (environ[n] != NULL)
    n++;
  envp = calloc(n + 6, sizeof(*envp));
  if (envp == NULL)
    return NULL;
  for (i = 0; i < n; i++) {
    const char *e = environ[i];
    if (strncmp(e, "REDLOCK_PASSWORD=", 17) == 0 ||
        strncmp(e, "REDLOCK_KEY=", 12) == 0 ||
        strncmp(e, "REDLOCK_TOKEN=", 14) == 0 ||
        strncmp(e, "REDLOCK_FENCE=", 14) == 0 ||
        strncmp(e, "REDLOCK_PERMIT=", 15) == 0 ||
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
  if (opt.limit > 0 && lock != NULL) {
    snprintf(env_permit, sizeof(env_permit), "REDLOCK_PERMIT=%d",
             redlock_semaphore_permit(lock));
    envp[k++] = env_permit;
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
  uv_stdio_container_t *stdio;
  char **envp;
  char **args = child_argv;
  char **helper = NULL;
  char ppid[24], grace[24], until[24], fdnum[24];
  int sp[2] = {-1, -1};
  size_t i, n = 0;
  int rc;
  if (child_closing) {
    start_when_closed = 1;   /* on_child_closed starts it */
    return;
  }
  envp = child_env();
  if (envp == NULL) {
    finish(EXIT_FAIL);
    return;
  }
  memset(&po, 0, sizeof(po));
  po.file = child_argv[0];
  po.stdio_count = 3;
#ifdef __linux__
  /* Through the exec helper, so that the job dies with the lock: it gets
   * the validity's end now and after every extension (a socket). */
  if (access("/proc/self/exe", X_OK) == 0 &&
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0) {
    redlock_lock_t *l = lock != NULL ? lock : redlock_election_lock(election);
    int64_t left = redlock_lock_validity_ms(l);
    while (child_argv[n] != NULL)
      n++;
    helper = calloc(n + 7, sizeof(*helper));
    if (helper != NULL) {
      snprintf(ppid, sizeof(ppid), "%ld", (long)getpid());
      snprintf(grace, sizeof(grace), "%lld", (long long)opt.grace_ms);
      snprintf(until, sizeof(until), "%lld",
               (long long)(boot_ns() + (left > 0 ? left : 0) * 1000000));
      snprintf(fdnum, sizeof(fdnum), "%d", sp[1]);
      helper[0] = "redlock";
      helper[1] = EXEC_HELPER;
      helper[2] = ppid;
      helper[3] = grace;
      helper[4] = until;
      helper[5] = fdnum;
      for (i = 0; i < n; i++)
        helper[6 + i] = child_argv[i];
      args = helper;
      po.file = "/proc/self/exe";
      /* The socket keeps its number in the helper: descriptors we
       * inherited (3 and up) reach CMD as they are. */
      po.stdio_count = sp[1] + 1;
    }
  }
#else
  (void)ppid;
  (void)grace;
  (void)until;
  (void)fdnum;
  (void)n;
#endif
  po.args = args;
  po.env = envp;
  po.exit_cb = on_child_exit;
  stdio = calloc((size_t)po.stdio_count, sizeof(*stdio));
  if (stdio == NULL) {
    free(envp);
    free(helper);
    if (sp[0] >= 0) {
      close(sp[0]);
      close(sp[1]);
    }
    finish(EXIT_FAIL);
    return;
  }
  for (i = 0; i < (size_t)po.stdio_count; i++) {
    /* 0-2 ours; 3 and up left as inherited (UV_IGNORE); the socket */
    stdio[i].flags = i < 3 || (int)i == sp[1] ? UV_INHERIT_FD : UV_IGNORE;
    stdio[i].data.fd = (int)i;
  }
  po.stdio = stdio;
  rc = uv_spawn(&loop, &child, &po);
  free(stdio);
  free(envp);
  free(helper);
  if (sp[1] >= 0)
    close(sp[1]);
  if (sp[0] >= 0) {
    if (rc == 0 && po.stdio_count > 3) {
      fcntl(sp[0], F_SETFL, fcntl(sp[0], F_GETFL) | O_NONBLOCK);
      job_fd = sp[0];
    } else {
      close(sp[0]);
    }
  }
  if (rc != 0) {
    fprintf(stderr, "redlock: cannot run %s: %s\n", child_argv[0],
            uv_strerror(rc));
    finish(EXIT_NOEXEC);
    return;
  }
  child_running = 1;
  expired_kill = 0;
}

/* The exec helper: "redlock __exec PPID GRACE_MS VALID_UNTIL FD CMD
 * ARGS...", between run (or elect) and the command, FD a socket to run (a
 * number of its own: what run inherited reaches CMD unchanged). It makes
 * the job's process group (and gives it the terminal when run had it in
 * front), starts CMD in it, and stays as a small supervisor:
 *  - signals for the job reach the whole group (run sends them there);
 *    the helper ignores them itself;
 *  - it is a child subreaper: what the job leaves behind (a shell's
 *    background processes) becomes its child when its parent exits, and
 *    it exits only when no process of the group is left (waitpid on the
 *    group until ECHILD): run holds the lock until then, like flock(1)
 *    while any process holds the descriptor. A process that leaves the
 *    group (setsid, setpgid) is out of reach, of this and of the kills;
 *  - VALID_UNTIL is the lock's validity's end (CLOCK_BOOTTIME ns, the
 *    library's clock), and run writes the new end after every extension
 *    to FD (8 bytes): at that end the helper writes 'X' to FD and
 *    SIGKILLs the group, itself with it, whether run is alive, stopped or
 *    gone: no process of the job outlives the lock's validity;
 *  - 0 instead of a validity's end on FD: run's SIGKILL (--grace over).
 *    The helper leaves the group (for run's, alive since it asks), then
 *    SIGKILLs it and goes on reaping until ECHILD as above: run releases
 *    when the group is empty, not when the helper is (a member may take
 *    a while to die: memory to free, a write in D state). Bounded by the
 *    validity's end still; when the helper cannot leave the group, it
 *    dies with it (as run's own kill(-group) would have done);
 *  - if run dies (SIGKILL, out of memory), the kernel tells the helper
 *    (PR_SET_PDEATHSIG), which sends SIGTERM to the whole group, then
 *    SIGKILL after GRACE_MS (at the validity's end if that is sooner);
 *  - it exits as CMD did (the same status, or the same signal), after
 *    giving the terminal back.
 * Invariant: the helper never waits in a call that a deadline cannot cut
 * short (ppoll with the time left, SIGCHLD and the death signal let in
 * only there). */
static const int helper_ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM,
                                     SIGUSR1, SIGUSR2, SIGTTOU};
#define N_HELPER_IGNORED (sizeof(helper_ignored) / sizeof(helper_ignored[0]))

static pid_t helper_group;   /* the job's; the helper may have left it */

static void on_parent_gone(int sig) {
  (void)sig;
  kill(-helper_group, SIGTERM);   /* the helper ignores it */
}

static void on_helper_sigchld(int sig) {
  (void)sig;   /* only to cut ppoll short */
}

int exec_helper(int argc, char **argv) {
  long parent, grace_ms;
  int64_t valid_until, kill_at = INT64_MAX;
  pid_t front = -1;
  pid_t pid, self;
  int st = 0, child_done = 0, run_gone = 0, fd_open = 1, fd;
  int kill_asked = 0, killed = 0, left_group = 0;
  sigset_t block, wait_mask;
  size_t i;
  if (argc < 7)
    return EXIT_USAGE;
  parent = strtol(argv[2], NULL, 10);
  grace_ms = strtol(argv[3], NULL, 10);
  valid_until = (int64_t)strtoll(argv[4], NULL, 10);
  fd = (int)strtol(argv[5], NULL, 10);
  for (i = 0; i < N_HELPER_IGNORED; i++)
    signal(helper_ignored[i], SIG_IGN);
  setpgid(0, 0);
  self = getpid();
  helper_group = self;
  if (fd < 3 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)   /* never CMD's */
    fd_open = 0;   /* no socket: the deadline given stands */
  else
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  /* run was in front on its terminal: the job takes its place, so that
   * Ctrl-C and a reading command work as without us. */
  if (isatty(STDIN_FILENO) &&
      tcgetpgrp(STDIN_FILENO) == getpgid((pid_t)parent)) {
    front = getpgid((pid_t)parent);
    tcsetpgrp(STDIN_FILENO, getpgrp());
  }
  sigemptyset(&block);
  sigaddset(&block, SIGCHLD);
#ifdef __linux__
  sigaddset(&block, SIGRTMIN + 3);
#endif
  sigprocmask(SIG_BLOCK, &block, &wait_mask);
  {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_helper_sigchld;
    sigaction(SIGCHLD, &sa, NULL);
#ifdef __linux__
    sa.sa_handler = on_parent_gone;
    sigaction(SIGRTMIN + 3, &sa, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGRTMIN + 3) != 0 ||
        prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
      fprintf(stderr, "redlock: prctl: %s\n", strerror(errno));
      return EXIT_NOEXEC;
    }
#endif
  }
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
    sigprocmask(SIG_SETMASK, &wait_mask, NULL);
    execvp(argv[6], argv + 6);
    fprintf(stderr, "redlock: cannot run %s: %s\n", argv[6],
            strerror(errno));
    _exit(errno == ENOENT ? EXIT_NOEXEC : 126);
  }
  for (;;) {
    struct pollfd pfd;
    struct timespec ts, *tsp = NULL;
    int64_t now, deadline;
    pid_t w;
    int s;
    /* Reap everything (orphans of the job come to us), then: is any
     * process of the group left? (ECHILD: none of our children is.) */
    while ((w = waitpid(-1, &s, WNOHANG)) > 0)
      if (w == pid) {
        st = s;
        child_done = 1;
      }
    if (child_done && waitpid(-self, &s, WNOHANG) < 0 && errno == ECHILD)
      break;
    if (!run_gone && (long)getppid() != parent) {
      /* run is gone: SIGTERM went out (on_parent_gone); SIGKILL after
       * the grace, or at the validity's end. */
      run_gone = 1;
      kill_at = boot_ns() + (int64_t)grace_ms * 1000000;
    }
    while (fd_open) {
      int64_t v;
      ssize_t r = read(fd, &v, sizeof(v));
      if (r == (ssize_t)sizeof(v)) {
        if (v == JOB_KILL_NOW)
          kill_asked = 1;
        else
          valid_until = v;
        continue;
      }
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
        fd_open = 0;   /* run closed it: the last deadline stands */
      break;
    }
    if (kill_asked && !killed) {
      /* run's SIGKILL: out of the group first (into run's), so that it
       * spares the helper, which stays to reap the group. */
      pid_t run_group = getpgid((pid_t)parent);
      killed = 1;
      if ((long)getppid() == parent && run_group > 0 &&
          setpgid(0, run_group) == 0)
        left_group = 1;
      kill(-self, SIGKILL);   /* the helper with it if it could not leave */
      continue;   /* reap */
    }
    deadline = valid_until < kill_at ? valid_until : kill_at;
    now = boot_ns();
    if (now >= deadline) {
      if (fd_open && send(fd, "X", 1, MSG_NOSIGNAL) < 0) {
        /* run is gone: nobody to tell */
      }
      kill(-self, SIGKILL);   /* the group, the helper with it */
      if (left_group)
        kill(self, SIGKILL);   /* no longer in it */
      return EXIT_FAIL;
    }
    ts.tv_sec = (time_t)((deadline - now) / 1000000000);
    ts.tv_nsec = (long)((deadline - now) % 1000000000);
    tsp = &ts;
    pfd.fd = fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    ppoll(&pfd, fd_open ? 1 : 0, tsp, &wait_mask);
  }
  if (front >= 0 && (long)getppid() == parent)
    tcsetpgrp(STDIN_FILENO, front);
  if (WIFSIGNALED(st)) {
    signal(WTERMSIG(st), SIG_DFL);
    sigprocmask(SIG_SETMASK, &wait_mask, NULL);
    raise(WTERMSIG(st));
    return 128 + WTERMSIG(st);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : EXIT_FAIL;
}

void on_run_acquired(redlock_lock_t *l, int status,
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
    if (limit_mismatch(status, r)) {
      finish(EXIT_CONFIG);   /* semaphore.c: both limits named */
      return;
    }
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
  say_verbose(status, r);
  if (stats_timer_open)
    write_stats_reported();   /* held: 1, at once */
  start_child();
}

/* ---- the commands (main.c's table) --------------------------------------- */

/* run's and elect's events: an extension moves the helper's deadline;
 * the rest is the wait's (wait.c). */
void on_run_event(redlock_client_t *c, const redlock_event *ev, void *arg) {
  if (ev->kind == REDLOCK_EV_RELEASE && final_release &&
      cmd_bit == C_ELECT) {
    finish_close();   /* the resignation's release came */
    return;
  }
  if (ev->kind == REDLOCK_EV_AUTO_EXTEND && ev->status == 0) {
    on_job_extended(ev->result->validity_ms);   /* the helper's deadline */
    return;
  }
  on_client_event(c, ev, arg);
}

static void signals_or_exit(void) {
  if (open_signals() != 0) {
    fprintf(stderr, "redlock: cannot set up signals: %s\n",
            strerror(errno));
    exit(EXIT_FAIL);
  }
}

int start_run(void) {
  redlock_acquire_opts ao;
  int rc;
  memset(&ao, 0, sizeof(ao));
  wait_opts(&ao);
  ao.auto_extend = 1;
  ao.heal = opt.heal;
  ao.fence = opt.fence;
  ao.wake = opt.wake;
  ao.on_lost = on_lost;
  ao.lost_margin_ms = (int)lost_margin_ms();
  ao.holder = holder_id(1);   /* this process runs as long as the job */
  signals_or_exit();
  rc = redlock_lock_acquire(lock, opt.ttl_ms, &ao, on_run_acquired, NULL);
  start_stats_file();
  return rc;
}

int start_elect(void) {
  redlock_election_opts eo;
  int rc;
  if (opt.id == NULL)
    opt.id = holder_id(1);
  memset(&eo, 0, sizeof(eo));
  eo.ttl_ms = opt.ttl_given ? opt.ttl_ms : 10000;
  eo.retry_delay_ms = 200;
  eo.on_change = on_election_change;
  rc = redlock_election_new(client, key, strlen(key), opt.id, &eo,
                            &election);
  if (rc == 0)
    signals_or_exit();
  if (rc == 0)
    rc = redlock_election_campaign(election);
  start_stats_file();
  return rc;
}
