/* acquire.c: acquire, extend, release (a lock held across processes by
 * its token). */
#include "cli.h"

const char help_acquire[] =
    "usage: redlock acquire [OPTIONS] KEY\n"
    "\n"
    "Acquire KEY and print its token on stdout (one line; with --fence the\n"
    "fencing number on a second line). The lock is not extended: extend it\n"
    "or release it with the token.\n"
    "\n"
    "  --ttl D      lock ttl (default 30s)\n"
    "  --wait D     keep trying this long (default 0: one attempt); -w SECS,\n"
    "               --timeout D (flock's), -n (one attempt), -E CODE (exit\n"
    "               code when not acquired). Never compared with the ttl\n"
    "  --verbose    say how long the acquisition took (flock's)\n"
    "  --fence      also print the fencing number (second line)\n"
    "  --wake       wait for the holder's release message instead of polling\n"
    "  --also KEY2  lock KEY2 too, all or none (repeatable)\n"
    "  --read, --write  take KEY's read-write lock (it excludes KEY's plain\n"
    "               lock, and the reverse)\n"    "  --id NAME    the holder `status` shows (1..80 bytes; default the host\n"
    "               name; --no-id: none); the token is <40 hex>.NAME\n"
    "\n"
    "  tok=$(redlock acquire --ttl 1m deploy) || exit 1\n";

const char help_extend[] =
    "usage: redlock extend [OPTIONS] KEY TOKEN\n"
    "\n"
    "Extend the lock held under TOKEN to --ttl from now (default 30s), only\n"
    "where the key still holds TOKEN. Prints the new validity in ms (how\n"
    "long the lock is safe to use). Exit 1 if it is not held any more.\n"
    "  --also KEY2, --read, --write  as given to acquire\n";

const char help_release[] =
    "usage: redlock release [OPTIONS] KEY TOKEN\n"
    "\n"
    "Release the lock held under TOKEN on every master (only where the key\n"
    "holds TOKEN). Prints nothing; exit 1 if nothing of TOKEN was found.\n"
    "  --also KEY2, --read, --write  as given to acquire\n";

void on_acquire_cmd(redlock_lock_t *l, int status,
                    const redlock_result *r, void *arg) {
  (void)arg;
  report_result("acquire", status, r);
  say_verbose(status, r);
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
              "released\n", key_text, strerror(errno));
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

void on_extend_cmd(redlock_lock_t *l, int status,
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

void on_release_cmd(redlock_lock_t *l, int status,
                    const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  report_result("release", status, r);
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

/* ---- the commands (main.c's table) --------------------------------------- */

/* --wait for acquire (one attempt unless given) and run (forever unless
 * given). */
void wait_opts(redlock_acquire_opts *ao) {
  int64_t wait = opt.wait_ms;
  if (!opt.wait_given && cmd_bit == C_ACQUIRE)
    wait = 0;
  if (wait == 0) {
    ao->wait_ms = -1;                  /* one attempt */
  } else if (wait > 0) {
    ao->wait_ms = (int)wait;
    ao->retry_count = INT_MAX;
  } else {
    ao->retry_count = INT_MAX;         /* forever */
  }
}

void check_acquire(void) {
  if (stdout_closed) {
    fprintf(stderr, "redlock: acquire: standard output is closed: the "
            "token would be lost (nothing acquired)\n");
    exit(EXIT_FAIL);
  }
}

const char *holder_id(int with_pid) {
  static char id[REDLOCK_MAX_HOLDER + 1];
  char host[64];
  if (opt.no_id)
    return NULL;
  if (opt.id != NULL)
    return opt.id;
  if (gethostname(host, sizeof(host)) != 0)
    snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  if (with_pid)
    snprintf(id, sizeof(id), "%s:%ld", host, (long)getpid());
  else
    snprintf(id, sizeof(id), "%s", host);
  return id;
}

int start_acquire(void) {
  redlock_acquire_opts ao;
  memset(&ao, 0, sizeof(ao));
  wait_opts(&ao);
  /* The host only: this process is gone once the token is printed. */
  ao.holder = holder_id(0);
  ao.fence = opt.fence;
  ao.wake = opt.wake;
  return redlock_lock_acquire(lock, opt.ttl_ms, &ao, on_acquire_cmd, NULL);
}

int start_extend(void) {
  int rc = redlock_lock_adopt(lock, opt.token);
  return rc != 0 ? rc
                 : redlock_lock_extend(lock, opt.ttl_ms, on_extend_cmd, NULL);
}

int start_release(void) {
  int rc = redlock_lock_adopt(lock, opt.token);
  return rc != 0 ? rc : redlock_lock_release(lock, on_release_cmd, NULL);
}
