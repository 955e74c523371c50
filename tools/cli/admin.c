/* admin.c: the operator's tools: leader (--watch) and unlock --force. */
#include "cli.h"

const char help_leader[] =
    "usage: redlock leader [OPTIONS] KEY\n"
    "\n"
    "Print the identity of KEY's leader (line 1) and how long it stays\n"
    "leader without an extension, in ms (line 2), as a quorum of masters\n"
    "sees it. Exit 1 when there is no leader. --json: one object.\n"
    "  --watch      keep watching: one line per change of leader (its\n"
    "               identity, or '-' for none; --json: one object a line),\n"
    "               until SIGINT or SIGTERM\n";

const char help_unlock[] =
    "usage: redlock unlock --force [OPTIONS] KEY\n"
    "\n"
    "An operator's forced release: delete KEY (and a read-write lock of\n"
    "that name) on every master, whoever holds it, and wake its waiters.\n"
    "The holder is NOT told: a plain holder believes it holds the lock\n"
    "until its next extension finds it gone (or its validity ends), so two\n"
    "owners may act at once meanwhile. A healing holder (an elect leader,\n"
    "run --heal) is not deposed: its next extension sets the key again,\n"
    "unless another owner took it first; to depose a leader, stop its\n"
    "process (SIGTERM: it resigns). Use it only for a holder known to be\n"
    "dead or stuck. The fencing counter stays. Exit 1 if a master did not\n"
    "answer (the key may remain there until its ttl).\n"
    "  --force      required: says you mean it\n"
    "  --also KEY2  the other keys of a multi-resource lock (repeatable)\n"
    "  --limit K --permit I  KEY is a counting semaphore: release its\n"
    "               permit I only (redlock status --limit K KEY lists them)\n";

uv_timer_t watch_timer;
static char watch_last[256] = "\001";   /* nothing printed yet */

static void on_watch_timer(uv_timer_t *t);

void on_leader_watched(redlock_client_t *c, int status,
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
    fprintf(stderr, "redlock: leader %s: %s\n", key_text,
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

void close_watch(void) {
  if (opt.watch && cmd_bit == C_LEADER &&
      !uv_is_closing((uv_handle_t *)&watch_timer))
    uv_close((uv_handle_t *)&watch_timer, NULL);
}

void on_unlock_done(redlock_lock_t *l, int status,
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
    printf("released %s by force on %u of %u masters\n", key_text, yes,
           r->n_nodes);
  } else {
    report_result("unlock", status, r);
  }
  (void)deleted;
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

void on_unlock_inspected(redlock_lock_t *l, int status,
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
            "lock until its next extension (or its validity ends); a "
            "healing holder (an elect leader, run --heal) sets the key "
            "again at its next extension unless another owner takes it "
            "first: stop its process to depose it\n", key_text,
            who, held, r->n_nodes);
  else
    fprintf(stderr, "redlock: %s is not held on any master that answered; "
            "deleting anyway\n", key_text);
  rc = redlock_lock_force_release(l, on_unlock_done, NULL);
  if (rc != 0) {
    fprintf(stderr, "redlock: unlock %s: %s\n", key_text, lib_error());
    finish(EXIT_FAIL);
  }
}

void on_leader_cmd(redlock_client_t *c, int status,
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
    fprintf(stderr, "redlock: leader %s: %s\n", key_text,
            redlock_strerror(status));
  } else if (identity[0] == '\0') {
    fprintf(stderr, "redlock: %s has no leader\n", key_text);
  } else {
    printf("%s\n%lld\n", identity, (long long)ttl_ms);
  }
  finish(status == 0 && identity[0] != '\0' ? EXIT_OK : EXIT_FAIL);
}

/* ---- the commands (main.c's table) --------------------------------------- */

int start_leader(void) {
  if (!opt.watch)
    return redlock_election_leader(client, key, strlen(key), on_leader_cmd,
                                   NULL);
  uv_timer_init(&loop, &watch_timer);
  if (open_signals() != 0) {
    fprintf(stderr, "redlock: cannot set up signals: %s\n",
            strerror(errno));
    exit(EXIT_FAIL);
  }
  return redlock_election_leader(client, key, strlen(key),
                                 on_leader_watched, NULL);
}

void close_leader(void) {
  close_signals();
  close_watch();
}

void check_unlock(void) {
  if (!opt.force)
    usage_error("unlock deletes KEY whoever holds it: say --force (to "
                "give up a lock you hold, use release with its token)");
}

int start_unlock(void) {
  if (opt.limit > 0)
    return start_sem_unlock();   /* semaphore.c */
  return opt.n_also > 0
             ? redlock_lock_force_release(lock, on_unlock_done, NULL)
             : redlock_lock_inspect(lock, on_unlock_inspected, NULL);
}
