/* semaphore.c: counting semaphores (issue 32) through the CLI: --limit K
 * makes the lock handle a semaphore of K permits (main.c), run holds one
 * of them with run's machinery unchanged (run.c); here: the checks of
 * --limit, `limit KEY K`, status and unlock --force of a semaphore, and
 * the message for a limit that differs from the masters' (exit 78).
 *
 * The at-most-K bound is the library's (each permit is a mutex): nothing
 * here counts holders. */
#include "cli.h"

const char help_limit[] =
    "usage: redlock limit [OPTIONS] KEY K\n"
    "\n"
    "Change the counting semaphore KEY's limit to K (1..1024) on every\n"
    "master. Raising lets more jobs in at once. Shrinking evicts nobody:\n"
    "a holder of a permit >= K keeps it until it ends (its ttl), but no\n"
    "such permit is granted any more. Jobs still started with the old\n"
    "--limit get exit 78 (the masters' limit differs). Exit 1 if a master\n"
    "did not confirm (run it again).\n";

/* Before the client: what --limit does not combine with. */
void check_semaphore(void) {
  if (opt.permit >= 0 && opt.limit == 0)
    usage_error("--permit needs --limit K (the semaphore's)");
  if (opt.limit == 0 || cmd_bit == C_LIMIT)
    return;
  if (opt.n_also > 0 || opt.rw != 0)
    usage_error("--limit does not combine with --also, --read or --write");
  if (cmd_bit == C_UNLOCK && opt.permit < 0)
    usage_error("unlock --force --limit K needs --permit I (the permit to "
                "release: see redlock status --limit K KEY)");
}

/* ELIMIT: names both limits, the masters' (from a master's refusal,
 * "ERR semaphore limit mismatch: 2 on this master, 3 asked") and ours.
 * 1 if it was one (the caller exits EXIT_CONFIG). */
int limit_mismatch(int status, const redlock_result *r) {
  unsigned i, theirs = 0;
  if (status != REDLOCK_ELIMIT)
    return 0;
  for (i = 0; r != NULL && i < r->n_nodes; i++) {
    const char *m = r->nodes[i].errstr != NULL
                        ? strstr(r->nodes[i].errstr, "mismatch: ")
                        : NULL;
    if (r->nodes[i].error == REDLOCK_ELIMIT && m != NULL &&
        sscanf(m, "mismatch: %u", &theirs) == 1)
      break;
  }
  if (theirs > 0)
    fprintf(stderr, "redlock: %s: the semaphore's limit on the masters is "
            "%u, not --limit %u: use the same --limit everywhere, or "
            "change it with `redlock limit %s %u`\n", key_text, theirs,
            opt.limit, key_text, opt.limit);
  else
    fprintf(stderr, "redlock: %s: the semaphore's limit on the masters "
            "differs from --limit %u\n", key_text, opt.limit);
  return 1;
}

/* ---- limit KEY K ---------------------------------------------------------- */

static void on_limit_set(redlock_lock_t *l, int status,
                         const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  if (opt.json)
    report_result("limit", status, r);
  else if (status == 0)
    printf("limit of %s set to %u on %u of %u masters\n", key_text, opt.limit,
           r->yes, r->n_nodes);
  else
    report_result("limit", status, r);
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

int start_limit(void) {
  return redlock_semaphore_set_limit(lock, opt.limit, on_limit_set, NULL);
}

/* ---- status --limit K ----------------------------------------------------- */

static void print_sem_status(int status, const redlock_semaphore_info *in,
                             const redlock_result *r) {
  unsigned i, n = r != NULL ? r->n_nodes : 0;
  if (opt.json) {
    printf("{\"command\":\"status\",\"key\":");
    json_str(key);
    printf(",\"ok\":%s,\"status\":\"%s\",\"semaphore\":true,\"limit\":%u,"
           "\"limit_max\":%u,\"asked\":%u,\"held\":%u,\"free\":%u,"
           "\"masters\":%u,\"permits\":[",
           status == 0 ? "true" : "false", redlock_err_name(status),
           in->limit, in->limit_max, opt.limit, in->held, in->free, n);
    for (i = 0; i < in->n_permits; i++) {
      const redlock_permit_info *p = &in->permits[i];
      holder_view hv;
      holder_view_of(p->holder, &hv);
      printf("%s{\"permit\":%u,\"held\":%s", i ? "," : "", p->index,
             p->held ? "true" : "false");
      json_holder(&hv);
      printf(",\"masters\":%u,\"ttl_ms\":%lld}", p->masters,
             (long long)p->pttl_ms);
    }
    printf("]}\n");
    return;
  }
  if (status != 0)
    fprintf(stderr, "redlock: status %s: %s (what the masters that "
            "answered hold follows)\n", key_text, redlock_strerror(status));
  if (in->limit == 0)
    printf("semaphore %s: no limit on a quorum of masters (never acquired, "
           "or being changed; the largest: %u)\n", key_text, in->limit_max);
  else
    printf("semaphore %s: limit %u, %u held, %u free\n", key_text, in->limit,
           in->held, in->free);
  if (in->limit != 0 && in->limit != opt.limit)
    printf("note: --limit %u differs: run --limit %u would get exit 78\n",
           opt.limit, opt.limit);
  if (in->limit_max > in->limit && in->limit != 0)
    printf("note: a master holds limit %u (being changed, or one that "
           "missed `redlock limit`)\n", in->limit_max);
  for (i = 0; i < in->n_permits; i++) {
    const redlock_permit_info *p = &in->permits[i];
    char shown[HOLDER_SHOWN_LEN];
    holder_shown(p->holder, shown, sizeof(shown));   /* never the token */
    printf("permit %u: %s %s on %u of %u masters, %lld ms left%s\n",
           p->index, p->held ? "held by" : "partly held by", shown,
           p->masters, n,
           (long long)p->pttl_ms,
           in->limit != 0 && p->index >= in->limit ? " (above the limit)"
                                                   : "");
  }
}

static void on_sem_status_cmd(redlock_lock_t *l, int status,
                              const redlock_semaphore_info *in,
                              const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  print_sem_status(status, in, r);
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

int start_sem_status(void) {
  return redlock_semaphore_inspect(lock, on_sem_status_cmd, NULL);
}

/* ---- unlock --force --limit K --permit I ---------------------------------- */

static void on_sem_unlock_done(redlock_lock_t *l, int status,
                               const redlock_result *r, void *arg) {
  (void)l;
  (void)arg;
  if (opt.json)
    report_result("unlock", status, r);
  else if (status == 0)
    printf("released permit %d of %s by force on %u of %u masters\n",
           opt.permit, key_text, r->yes, r->n_nodes);
  else
    report_result("unlock", status, r);
  finish(status == 0 ? EXIT_OK : EXIT_FAIL);
}

static void on_sem_unlock_inspected(redlock_lock_t *l, int status,
                                    const redlock_semaphore_info *in,
                                    const redlock_result *r, void *arg) {
  unsigned i;
  const redlock_permit_info *p = NULL;
  (void)status;
  (void)arg;
  for (i = 0; i < in->n_permits; i++)
    if (in->permits[i].index == (unsigned)opt.permit)
      p = &in->permits[i];
  if (opt.quiet)
    ;
  else if (p != NULL)
    fprintf(stderr, "redlock: warning: permit %d of %s is held by %.8s... "
            "on %u of %u masters; that holder is not told and believes it "
            "holds it until its next extension (or its validity ends)\n",
            opt.permit, key_text, p->holder, p->masters, r->n_nodes);
  else
    fprintf(stderr, "redlock: permit %d of %s is not held on any master "
            "that answered; deleting anyway\n", opt.permit, key_text);
  if (redlock_semaphore_force_release(l, (unsigned)opt.permit,
                                      on_sem_unlock_done, NULL) != 0) {
    fprintf(stderr, "redlock: unlock %s: %s\n", key_text, lib_error());
    finish(EXIT_FAIL);
  }
}

int start_sem_unlock(void) {
  return redlock_semaphore_inspect(lock, on_sem_unlock_inspected, NULL);
}
