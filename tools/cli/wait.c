/* wait.c: never silent. While an acquisition waits, say why; when the
 * configuration (credentials, TLS, SELECT), refused connections or
 * masters that never answer leave no quorum possible, end with an exit
 * code of its own. */
#include "cli.h"

/* What a master's error says about the configuration (its text comes from
 * this library's connection layer and Redis's error codes). */
enum { WHY_OTHER, WHY_AUTH, WHY_CONFIG, WHY_REFUSED, WHY_SILENT };

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
  /* Connected, or connecting, and no answer in time: a black hole (a
   * firewall that drops, a hung proxy or server). Not a busy lock. */
  if (strstr(e, "timed out") != NULL ||
      strstr(e, "no reply within") != NULL ||
      strstr(e, "not connected within") != NULL)
    return WHY_SILENT;
  return WHY_OTHER;
}

uint64_t wait_start_ms;     /* when the acquisition started */
static uint64_t refused_since_ms;  /* refusals or silence keep a quorum
                                      out since */
static char said_reason[512];      /* the last "waiting" message, digits out */
static uint64_t said_at_ms;        /* when it was printed (0: never) */

/* The "waiting" message: at most one line this often after the first
 * (the reason's wording can change at every attempt: which masters timed
 * out, which were waited for; it printed 11 lines in 8 s). */
#define SAY_EVERY_MS 5000
static unsigned char said_master[REDLOCK_MAX_SERVERS];

/* How long masters that refuse connections (69) or never answer (74) may
 * keep a quorum out before the command gives up: --connect-timeout when
 * given, else 5 s. */
static uint64_t unavailable_ms(void) {
  return opt.connect_timeout_ms > 0 ? (uint64_t)opt.connect_timeout_ms
                                    : 5000;
}

/* 0 while the masters may still grant the lock; else the exit code that
 * ends the wait: masters whose configuration refuses us (authentication:
 * 77; TLS verification, SELECT: 78), that refuse connections (69) or that
 * never answer (74; the larger group of the two decides, refusals on a
 * tie) leave fewer than a quorum: after unavailable_ms, or at once when
 * `final`. Each master's cause is printed once. */
int config_verdict(const redlock_result *r, int final) {
  unsigned i, auth = 0, conf = 0, refused = 0, silent = 0;
  unsigned n = r->n_nodes, q = redlock_client_quorum(client);
  uint64_t now = uv_now(&loop);
  int code = 0;
  for (i = 0; i < n; i++) {
    switch (error_kind(&r->nodes[i])) {
      case WHY_AUTH: auth++; break;
      case WHY_CONFIG: conf++; break;
      case WHY_REFUSED: refused++; break;
      case WHY_SILENT: silent++; break;
      default: break;
    }
  }
  if (n - auth - conf < q) {
    code = auth > 0 ? EXIT_NOPERM : EXIT_CONFIG;
  } else if (n - auth - conf - refused - silent < q) {
    if (refused_since_ms == 0)
      refused_since_ms = now;
    if (final || now - refused_since_ms >= unavailable_ms())
      code = silent > refused ? EXIT_UNRESPONSIVE : EXIT_UNAVAILABLE;
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
    else if (k == WHY_SILENT)
      fprintf(stderr, "redlock: %s: unresponsive (%s): it takes "
              "connections but does not answer (a firewall, a hung proxy "
              "or server?)\n", m->server, m->errstr);
    else
      fprintf(stderr, "redlock: %s: unavailable (%s)\n", m->server,
              m->errstr);
  }
  fprintf(stderr, "redlock: %s %s: %s\n", cmd_name, key_text,
          code == EXIT_NOPERM ? "no quorum can authenticate: giving up"
          : code == EXIT_CONFIG ? "no quorum accepts this configuration: "
                                  "giving up"
          : code == EXIT_UNRESPONSIVE ? "too few masters answer: giving up"
                                      : "too few masters accept connections: "
                                        "giving up");
  return code;
}

/* While waiting: why, on stderr, after a second; then when the reason
 * changes (numbers aside), at most every SAY_EVERY_MS, with the time
 * waited so far; never with -q or --json. */
static void say_waiting(const redlock_result *r) {
  char why[2048], shape[512];
  size_t i, k = 0;
  uint64_t now = uv_now(&loop);
  if (opt.quiet || opt.json || now - wait_start_ms < 1000 ||
      (said_at_ms != 0 && now - said_at_ms < SAY_EVERY_MS))
    return;
  redlock_result_explain(r, why, sizeof(why));
  for (i = 0; why[i] != '\0' && k < sizeof(shape) - 1; i++)
    if (!(why[i] >= '0' && why[i] <= '9') && why[i] != '.')
      shape[k++] = why[i];
  shape[k] = '\0';
  if (strcmp(shape, said_reason) == 0)
    return;
  memcpy(said_reason, shape, k + 1);
  said_at_ms = now;
  fprintf(stderr, "redlock: waiting for %s: %s (%.1f s so far)\n", key_text, why,
          (double)(now - wait_start_ms) / 1000.0);
}

void on_client_event(redlock_client_t *c, const redlock_event *ev,
                     void *arg) {
  int code;
  (void)c;
  (void)arg;
  if (ev->kind != REDLOCK_EV_ATTEMPT || finishing)
    return;
  code = config_verdict(ev->result, 0);
  if (code != 0) {
    finish(code);   /* frees the lock: its acquisition ends, canceled */
    return;
  }
  say_waiting(ev->result);
}
