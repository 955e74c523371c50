/* client.c: client life cycle.
 *
 * Owns: validating and copying the configuration, the nodes and what they
 * share (node env: timeouts, credentials, scripts, the request pool), the
 * write flusher, the restart guard and the wake-up subscribers, and the
 * asynchronous close:
 *
 *   close() --timer 0--> every member (lock handle) aborts: ECANCELED,
 *           releases what it holds or half-acquired
 *           --> a mark no other master confirmed: the close waits for it
 *               (bounded; nothing of the members runs any more)
 *           --> guard, wake-up and every node close (nodes drain what is
 *               in flight, bounded by the deadlines)
 *           --> all nodes CLOSED, all members freed, subscribers closed
 *           --> close flusher + close timer --> user close cb --> free
 *
 * Does not own: lock state machines (lock.c), connections (node.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "lock.h"
#include "scripts.h"
#include "uri.h"

#define DEF_DRIFT_FACTOR 0.01
#define DEF_CONNECT_TIMEOUT_MS 250
#define DEF_COMMAND_TIMEOUT_MS 50
#define DEF_RETRY_COUNT 3
#define DEF_RETRY_DELAY_MS 200
#define DEF_RETRY_JITTER_MS 100
#define DEF_RECONNECT_MIN_MS 20
#define DEF_RECONNECT_MAX_MS 2000
#define MAX_TIMEOUT_MS 3600000        /* one hour: anything above is a typo */
#define MAXTTL_SUFFIX "__redlock__:maxttl"
#define CLOCK_SUFFIX "__redlock__:clock"
#define BROKE_SUFFIX "__redlock__:broke"
#define DEF_MAX_TTL_MS 3600000        /* the cap on ttls: one hour */
#define TICK_MS 1000                  /* the client's background checks */
#define RECHECK_TICKS 3               /* declared masters' persistence */
#define REFRESH_TICKS 5               /* a cluster's topology */

void redlock__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "redlock: assertion failed: %s (%s:%d)\n", expr, file,
          line);
  abort();
}

/* 0 -> def, negative -> 0 when allowed, else checked against max. */
static int pick_ms(const char *name, int v, int def, int neg_ok,
                   int64_t *out) {
  if (v == 0) {
    *out = def;
    return 0;
  }
  if (v < 0) {
    if (!neg_ok)
      return redlock__fail(REDLOCK_EINVAL, "%s must not be negative (%d)",
                           name, v);
    *out = 0;
    return 0;
  }
  if (v > MAX_TIMEOUT_MS)
    return redlock__fail(REDLOCK_EINVAL, "%s too large (%d ms, max %d)",
                         name, v, MAX_TIMEOUT_MS);
  *out = v;
  return 0;
}

static int copy_str(const char *s, char **out) {
  *out = NULL;
  if (s == NULL)
    return 0;
  *out = redlock__strdup(s);
  return *out == NULL ? REDLOCK_ENOMEM : 0;
}

static void client_free_memory(redlock_client_t *c) {
  unsigned i;
  if (c->nodes != NULL)
    for (i = 0; i < c->n_nodes; i++)
      redlock__node_free(&c->nodes[i]);
  for (i = 0; c->masters != NULL && i < c->n; i++)
    redlock__master_free(&c->masters[i]);
  for (i = 0; c->displays != NULL && i < c->n; i++)
    redlock__free(c->displays[i]);
  redlock__free(c->masters);
  redlock__free(c->displays);
  redlock__pool_free(&c->rounds);
  redlock__pool_free(&c->batches);
  redlock__tq_free(&c->tq);
  redlock__node_env_free(&c->env);
  redlock__wake_free(&c->wake);
  redlock__guard_free(&c->guard);
  redlock__tls_ctx_free(c->env.tls);
  redlock__free(c->idle);
  redlock__free(c->nodes);
  redlock__free(c->key_prefix);
  redlock__free(c->maxttl_key);
  redlock__free(c->clock_key);
  redlock__free(c->broke_key);
  redlock__free(c->warnings);
  redlock__free(c->username);
  redlock__free(c->password);
  redlock__free(c);
}

static int check_config(const redlock_client_config *cfg,
                        redlock_client_t *c) {
  size_t i;
  unsigned def_quorum;
  int rc;
  if (cfg->servers == NULL || cfg->n_servers == 0)
    return redlock__fail(REDLOCK_EINVAL, "no servers given");
  if (cfg->n_servers > REDLOCK_MAX_SERVERS)
    return redlock__fail(REDLOCK_EINVAL, "%zu servers: at most %d",
                         cfg->n_servers, REDLOCK_MAX_SERVERS);
  for (i = 0; i < cfg->n_servers; i++)
    if (cfg->servers[i] == NULL)
      return redlock__fail(REDLOCK_EINVAL, "server %zu (counted from 1) is NULL", i + 1);
  c->n = (unsigned)cfg->n_servers;
  def_quorum = redlock__quorum_default(c->n);
  if (cfg->quorum > c->n)
    return redlock__fail(REDLOCK_EINVAL, "quorum %u > %u servers",
                         cfg->quorum, c->n);
  if (cfg->quorum != 0 && cfg->quorum < def_quorum)
    return redlock__fail(REDLOCK_EINVAL,
                         "quorum %u is below a majority of %u servers (%u):"
                         " two owners could hold the lock",
                         cfg->quorum, c->n, def_quorum);
  c->quorum = cfg->quorum != 0 ? cfg->quorum : def_quorum;
  if (cfg->renew_batch > REDLOCK__BATCH_MAX_LOCKS)
    return redlock__fail(REDLOCK_EINVAL,
                         "renew_batch %d out of range (at most %d; 0 = %d, "
                         "negative = off)", cfg->renew_batch,
                         REDLOCK__BATCH_MAX_LOCKS, REDLOCK__BATCH_DEFAULT);
  c->renew_batch = cfg->renew_batch == 0  ? REDLOCK__BATCH_DEFAULT
                   : cfg->renew_batch < 0 ? 0
                                          : cfg->renew_batch;
  if (isnan(cfg->drift_factor) || cfg->drift_factor < 0 ||
      cfg->drift_factor >= 0.5)
    return redlock__fail(REDLOCK_EINVAL,
                         "drift_factor %g out of range [0, 0.5)",
                         cfg->drift_factor);
  c->drift_factor =
      cfg->drift_factor == 0 ? DEF_DRIFT_FACTOR : cfg->drift_factor;
  if ((rc = pick_ms("connect_timeout_ms", cfg->connect_timeout_ms,
                    DEF_CONNECT_TIMEOUT_MS, 0, &c->env.connect_timeout_ms)) ||
      (rc = pick_ms("command_timeout_ms", cfg->command_timeout_ms,
                    DEF_COMMAND_TIMEOUT_MS, 0, &c->command_timeout_ms)) ||
      (rc = pick_ms("retry_delay_ms", cfg->retry_delay_ms,
                    DEF_RETRY_DELAY_MS, 1, &c->retry_delay_ms)) ||
      (rc = pick_ms("retry_jitter_ms", cfg->retry_jitter_ms,
                    DEF_RETRY_JITTER_MS, 1, &c->retry_jitter_ms)) ||
      (rc = pick_ms("reconnect_min_ms", cfg->reconnect_min_ms,
                    DEF_RECONNECT_MIN_MS, 0, &c->env.reconnect_min_ms)) ||
      (rc = pick_ms("reconnect_max_ms", cfg->reconnect_max_ms,
                    DEF_RECONNECT_MAX_MS, 0, &c->env.reconnect_max_ms)))
    return rc;
  c->env.command_timeout_ms = c->command_timeout_ms;
  c->restart_guard_ms =
      cfg->restart_guard_ms < 0 ? -1 : (int64_t)cfg->restart_guard_ms;
  if (c->env.reconnect_min_ms > c->env.reconnect_max_ms)
    return redlock__fail(REDLOCK_EINVAL,
                         "reconnect_min_ms %lld > reconnect_max_ms %lld",
                         (long long)c->env.reconnect_min_ms,
                         (long long)c->env.reconnect_max_ms);
  if (cfg->retry_count < 0)
    c->retry_count = 0;
  else
    c->retry_count =
        cfg->retry_count == 0 ? DEF_RETRY_COUNT : (unsigned)cfg->retry_count;
  if (cfg->key_prefix != NULL && strlen(cfg->key_prefix) >= REDLOCK_MAX_KEY)
    return redlock__fail(REDLOCK_EINVAL, "key_prefix longer than %d bytes",
                         REDLOCK_MAX_KEY - 1);
  if (cfg->username != NULL && cfg->password == NULL)
    return redlock__fail(REDLOCK_EINVAL, "username given without password");
  if (cfg->durable != 0 && cfg->durable != 1)
    return redlock__fail(REDLOCK_EINVAL, "durable must be 0 or 1 (%d)",
                         cfg->durable);
  c->max_ttl_ms = cfg->max_ttl_ms == 0  ? DEF_MAX_TTL_MS
                  : cfg->max_ttl_ms < 0 ? REDLOCK_MAX_TTL_MS
                                        : cfg->max_ttl_ms;
  if (c->restart_guard_ms > 0 && c->restart_guard_ms < c->max_ttl_ms)
    c->max_ttl_ms = c->restart_guard_ms;   /* the fixed window caps too */
  if (cfg->clock_tolerance_ms > MAX_TIMEOUT_MS)
    return redlock__fail(REDLOCK_EINVAL,
                         "clock_tolerance_ms too large (%d ms, max %d)",
                         cfg->clock_tolerance_ms, MAX_TIMEOUT_MS);
  c->warn_cb = cfg->on_warning;
  c->warn_arg = cfg->warning_arg;
  return 0;
}

/* A key of the library's: prefix + suffix. 0 or ENOMEM. */
static int make_key(const redlock_client_t *c, const char *suffix,
                    char **out, size_t *len) {
  size_t sl = strlen(suffix);
  *len = c->key_prefix_len + sl;
  *out = redlock__malloc(*len + 1);
  if (*out == NULL)
    return REDLOCK_ENOMEM;
  memcpy(*out, c->key_prefix ? c->key_prefix : "", c->key_prefix_len);
  memcpy(*out + c->key_prefix_len, suffix, sl + 1);
  return 0;
}

/* ---- warnings ------------------------------------------------------------ */

static void on_guard_warning(void *arg, unsigned idx, const char *msg) {
  redlock_client_t *c = arg;
  redlock__strlcpy(c->warnings[idx], msg, sizeof(c->warnings[idx]));
  if (c->warn_cb != NULL && !c->closing)
    c->warn_cb(c, msg, c->warn_arg);
}

/* A master whose handshake was refused (a wrong password, a db it does
 * not have): said once, until it comes up again, also while a quorum of
 * the others holds (it was silent then: issue 29, item 7), and also
 * while the client closes. By number, as users count masters; the
 * server's own text. */
static void warn_refusal(redlock_client_t *c, redlock__node *n) {
  char msg[sizeof(c->warnings[0]) + 300], who[300];
  const char *e = n->errstr;
  if (!n->hs_refused || n->refusal_said)
    return;
  n->refusal_said = 1;
  if (n->index == n->master)
    snprintf(who, sizeof(who), "master %u", n->master + 1);
  else   /* a cluster's other primary */
    snprintf(who, sizeof(who), "master %u's node %.250s", n->master + 1,
             n->uri.display != NULL ? n->uri.display : "?");
  if (strncmp(e, "AUTH: ", 6) == 0)
    snprintf(msg, sizeof(msg), "%s refused authentication: %s", who, e + 6);
  else
    snprintf(msg, sizeof(msg), "%s refused the handshake: %s", who, e);
  redlock__strlcpy(c->warnings[n->index], msg, sizeof(c->warnings[0]));
  /* Also while closing: the operation that just ended (a one-shot
   * acquire that a quorum granted) did not say it. */
  if (c->warn_cb != NULL)
    c->warn_cb(c, msg, c->warn_arg);
}

/* Background checks, every second while the client is open:
 *  - every node's replication (role, replication id) when the restart
 *    guard is on, or the node is a cluster's: a failover or a resync
 *    behind a connection that stayed open makes a new instance (node.c);
 *  - declared masters' persistence, every 3 s (guard.c, 6.), and a
 *    sentinel group primary's min-replicas settings (node.c);
 *  - marks of broken durability declarations whose write failed, again
 *    (guard.c, 6.);
 *  - each cluster's topology, every 5 s (a reshard or a failover that no
 *    redirection showed yet). */
static void on_recheck(redlock__timer *t) {
  redlock_client_t *c = t->data;
  unsigned i;
  c->ticks++;
  for (i = 0; i < c->n_nodes; i++) {
    redlock__node *n = &c->nodes[i];
    if (n->state != REDLOCK__NODE_UP)
      continue;
    if (c->restart_guard_ms >= 0 ||
        c->masters[n->master].ops->identity_checks)
      redlock__node_check_identity(n);
    if ((n->declared || redlock__node_checks_isolation(n)) &&
        c->ticks % RECHECK_TICKS == 0)
      redlock__node_recheck(n);
  }
  redlock__guard_tick(&c->guard);   /* marks whose write failed */
  if (c->ticks % REFRESH_TICKS == 0)
    for (i = 0; i < c->n; i++)
      c->masters[i].ops->refresh(&c->masters[i]);
}

/* ---- node events --------------------------------------------------------- */

static void client_maybe_finish(redlock_client_t *c);

static void on_node_state(redlock__node *n, redlock__node_event ev,
                          void *arg) {
  redlock_client_t *c = arg;
  switch (ev) {
    case REDLOCK__NODE_EV_UP:
      redlock__guard_node_up(&c->guard, n->index);
      /* Its handshake's reading may be what a vote waits for. */
      redlock__guard_wake(&c->guard);
      return;
    case REDLOCK__NODE_EV_FAILED:
      redlock__guard_wake(&c->guard);
      return;
    case REDLOCK__NODE_EV_REFUSED:
      warn_refusal(c, n);
      return;
    case REDLOCK__NODE_EV_DOWN:
      redlock__guard_node_down(&c->guard, n->index);
      c->masters[n->master].ops->node_down(&c->masters[n->master], n);
      return;
    case REDLOCK__NODE_EV_CLOSED:
      c->nodes_open--;
      client_maybe_finish(c);
      return;
    case REDLOCK__NODE_EV_CLOCK:
      redlock__guard_clock(&c->guard, n->index);
      return;
    case REDLOCK__NODE_EV_DURABLE:
      redlock__guard_durable(&c->guard, n->index);
      return;
    case REDLOCK__NODE_EV_TOPOLOGY:
      /* A vote may wait for the map a MOVED made stale (guard.c, 7.). */
      redlock__guard_wake(&c->guard);
      return;
  }
}

static void on_stale(redlock__node *n) {
  redlock_client_t *c = n->env->arg;
  redlock__master *m = &c->masters[n->master];
  m->ops->stale(m);
}

int redlock_client_new(uv_loop_t *loop, const redlock_client_config *cfg,
                       redlock_client_t **out) {
  if (out != NULL && loop == NULL) {
    *out = NULL;
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_new: loop or config is NULL");
  }
  return redlock__client_new_sys(loop, NULL, cfg, out);
}

/* Over `sys` when not NULL (the simulator's seam), else over libuv's on
 * `loop`. */
int redlock__client_new_sys(uv_loop_t *loop, redlock__sys *sys,
                            const redlock_client_config *cfg,
                            redlock_client_t **out) {
  redlock_client_t *c = NULL;
  redlock__uri *uris = NULL;
  size_t i;
  unsigned next_node, checked = 0;
  size_t parsed = 0;
  int rc;

  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_new: out is NULL");
  *out = NULL;
  if ((loop == NULL && sys == NULL) || cfg == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_new: loop or config is NULL");
  redlock__scripts_init();
  c = redlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  if (sys == NULL) {
    redlock__sys_uv_init(&c->sys_uv, loop);
    sys = &c->sys_uv;
  }
  c->sys = sys;
  c->env.sys = sys;
  redlock__queue_init(&c->members);
  c->member_left = client_maybe_finish;
  redlock__pool_init(&c->rounds);
  redlock__pool_init(&c->batches);
  redlock__queue_init(&c->env.free_reqs);
  redlock__wake_init(&c->wake, &c->env, NULL, 0);
  rc = check_config(cfg, c);
  if (rc != 0)
    goto fail;

  /* Parse every address before creating any handle: a bad one leaves
   * nothing to close. */
  c->n_nodes = c->n;
  uris = redlock__calloc(c->n, sizeof(*uris));
  if (uris == NULL)
    goto nomem;
  for (i = 0; i < c->n; i++) {
    char err[200];
    rc = redlock__uri_parse(cfg->servers[i], &uris[i], err, sizeof(err));
    if (rc != 0) {
      redlock__fail(rc, "server %zu: %s", i + 1, err);
      goto fail;
    }
    parsed++;
    if (uris[i].kind == REDLOCK__URI_CLUSTER) {
      const char *open = cfg->key_prefix != NULL
                             ? strchr(cfg->key_prefix, '{') : NULL;
      if (open != NULL && strchr(open, '}') != NULL) {
        rc = redlock__fail(REDLOCK_EINVAL,
                           "server %zu: %s: the key prefix \"%s\" holds a "
                           "hash tag: every lock would live in one slot of "
                           "the cluster (put tags in the lock names)",
                           i + 1, uris[i].display, cfg->key_prefix);
        goto fail;
      }
      c->n_nodes += redlock__master_node_slots(&uris[i]) - 1;
    }
  }
  for (i = 0; i < c->n; i++) {
    if (uris[i].tls && c->env.tls == NULL) {
      redlock__tls_opts o;
      char err[300];
      memset(&o, 0, sizeof(o));
      o.ca_file = cfg->tls_ca_file;
      o.ca_dir = cfg->tls_ca_dir;
      o.cert_file = cfg->tls_cert_file;
      o.key_file = cfg->tls_key_file;
      o.key_password = cfg->tls_key_password;
      o.server_name = cfg->tls_server_name;
      o.insecure = cfg->tls_insecure != 0;
      rc = redlock__tls_ctx_new(&o, &c->env.tls, err, sizeof(err));
      if (rc != 0) {
        redlock__fail(rc, "server %zu: %s", i + 1, err);
        goto fail;
      }
    }
  }
  if (copy_str(cfg->key_prefix, &c->key_prefix) ||
      copy_str(cfg->username, &c->username) ||
      copy_str(cfg->password, &c->password))
    goto nomem;
  c->key_prefix_len = c->key_prefix ? strlen(c->key_prefix) : 0;
  c->nodes = redlock__calloc(c->n_nodes, sizeof(*c->nodes));
  c->displays = redlock__calloc(c->n, sizeof(*c->displays));
  c->masters = redlock__calloc(c->n, sizeof(*c->masters));
  if (c->nodes == NULL || c->displays == NULL || c->masters == NULL)
    goto nomem;
  for (i = 0; i < c->n; i++) {
    c->displays[i] = redlock__strdup(uris[i].display);
    if (c->displays[i] == NULL)
      goto nomem;
    if (redlock__master_new(&c->masters[i], (unsigned)i, c->nodes, &c->env,
                            &uris[i], c->key_prefix,
                            c->key_prefix_len) != 0)
      goto nomem;
  }
  c->idle = redlock__calloc(c->n, sizeof(*c->idle));
  c->warnings = redlock__calloc(c->n_nodes, sizeof(*c->warnings));
  if (make_key(c, MAXTTL_SUFFIX, &c->maxttl_key, &c->maxttl_keylen) != 0 ||
      make_key(c, CLOCK_SUFFIX, &c->clock_key, &c->clock_keylen) != 0 ||
      make_key(c, BROKE_SUFFIX, &c->broke_key, &c->broke_keylen) != 0 ||
      c->nodes == NULL || c->idle == NULL || c->warnings == NULL)
    goto nomem;
  if (redlock__guard_init(&c->guard, c->nodes, c->n_nodes, c->n, c->quorum,
                          c->restart_guard_ms, c->maxttl_key,
                          c->maxttl_keylen) != 0)
    goto nomem;
  c->guard.masters = c->masters;
  c->guard.clock_key = c->clock_key;
  c->guard.clock_keylen = c->clock_keylen;
  c->guard.broke_key = c->broke_key;
  c->guard.broke_keylen = c->broke_keylen;
  c->guard.clock_on = cfg->clock_tolerance_ms >= 0;
  c->guard.tolerance_us = cfg->clock_tolerance_ms > 0
                              ? (int64_t)cfg->clock_tolerance_ms * 1000 : 0;
  c->guard.drift_factor = c->drift_factor;
  c->guard.warn = on_guard_warning;
  c->guard.warn_arg = c;
  if (redlock__sys_random(c->sys, &c->prng, sizeof(c->prng)) != 0)
    c->prng = redlock__sys_now(c->sys);

  /* From here nothing fails. */
  c->loop = loop;
  c->env.flusher = &c->flusher;
  c->env.username = c->username;
  c->env.password = c->password;
  c->env.n_scripts =
      redlock__scripts_all(&c->env.scripts, &c->env.script_lens);
  c->env.maxttl_key = c->maxttl_key;
  c->env.maxttl_keylen = c->maxttl_keylen;
  c->env.clock_key = c->clock_key;
  c->env.clock_keylen = c->clock_keylen;
  c->env.guarded = c->restart_guard_ms >= 0;
  c->env.prng = &c->prng;
  c->env.on_state = on_node_state;
  c->env.arg = c;
  c->env.stale = on_stale;
  redlock__master_node_hooks(&c->env);
  redlock__flusher_init(c->sys, &c->flusher);
  c->flusher.data = c;
  redlock__timer_init(c->sys, &c->close_timer);
  c->close_timer.data = c;
  redlock__timer_init(c->sys, &c->recheck_timer);
  c->recheck_timer.data = c;
  redlock__tq_init(&c->tq, c->sys, redlock__wd_flush, c);
  c->handles_open = 4;
  c->wake.nodes = c->nodes;
  c->wake.n = c->n;
  next_node = c->n;
  for (i = 0; i < c->n; i++) {
    int declared = uris[i].durable || cfg->durable;
    c->masters[i].ops->init_nodes(&c->masters[i], &c->env, &uris[i],
                                  declared, &next_node);
    c->nodes[i].declared = declared;
    c->declared |= declared;
    c->idle[i].server = c->displays[i];
    c->idle[i].node = c->displays[i];
    c->idle[i].errstr = "";
    c->idle[i].holder = "";
    c->idle[i].pttl_ms = -2;
    c->idle[i].rw_lock = 0;
    c->idle[i].guard_wait_ms = -1;
    c->idle[i].guard_window_ms = -1;
  }
  redlock__free(uris);
  for (i = 0; i < c->n; i++)
    if (redlock__node_checks_isolation(&c->nodes[i]))
      checked++;   /* its primary's min-replicas settings (node.c) */
  if (c->declared || c->restart_guard_ms >= 0 || c->n_nodes > c->n ||
      checked > 0)
    redlock__timer_start(&c->recheck_timer, on_recheck, TICK_MS, TICK_MS);
  for (i = 0; i < c->n; i++)
    c->masters[i].ops->start(&c->masters[i]);
  *out = c;
  return 0;

nomem:
  rc = redlock__fail(REDLOCK_ENOMEM, "out of memory");
fail:
  if (uris != NULL) {
    for (i = 0; i < parsed; i++)
      redlock__uri_free(&uris[i]);
    redlock__free(uris);
  }
  redlock__free(c->nodes);
  c->nodes = NULL;
  client_free_memory(c);
  return rc;
}

/* ---- members ------------------------------------------------------------- */

/* ---- close --------------------------------------------------------------- */

static void client_handle_closed(redlock_client_t *c) {
  if (--c->handles_open == 0) {
    redlock_close_cb cb = c->close_cb;
    void *arg = c->close_arg;
    client_free_memory(c);
    if (cb != NULL)
      cb(c, arg);   /* the pointer is only an identity now */
  }
}

static void on_flusher_closed(redlock__flusher *fl) {
  client_handle_closed(fl->data);
}

static void on_client_timer_closed(redlock__timer *t) {
  client_handle_closed(t->data);
}

static void on_tq_closed(redlock__timer *t) {
  client_handle_closed(REDLOCK__CONTAINER_OF(t, redlock_client_t, tq.timer));
}

static void client_maybe_finish(redlock_client_t *c) {
  if (c->close_stage != 1 || c->nodes_open != 0 || !c->wake_closed ||
      c->masters_open != 0 || !redlock__queue_empty(&c->members))
    return;
  c->close_stage = 2;   /* the final close runs once */
  redlock__flusher_close(&c->flusher, on_flusher_closed);
  redlock__timer_close(&c->close_timer, on_client_timer_closed);
  redlock__timer_close(&c->recheck_timer, on_client_timer_closed);
  redlock__tq_close(&c->tq, on_tq_closed);
}

static void on_master_closed(void *arg) {
  redlock_client_t *c = arg;
  c->masters_open--;
  client_maybe_finish(c);
}

static void on_wake_closed(void *arg) {
  redlock_client_t *c = arg;
  c->wake_closed = 1;
  client_maybe_finish(c);
}

static void on_close_timer(redlock__timer *t) {
  redlock_client_t *c = t->data;
  redlock__queue *q;
  unsigned i;
  char name[300], msg[1000];
  unsigned left;
  /* Abort every member first, whatever the close waits for next: every
   * operation in flight ends with ECANCELED (redlock.h) and what is held
   * is released now. Memory is freed only in uv close callbacks, so the
   * list stays walkable while callbacks run. Found by redlock-sim (seed
   * 1883001028880464): aborted only after the wait for marks below, a
   * campaign went on for that wait, was granted once another client's
   * close released the leader's key, told ELECTED after the close, and
   * its key released when the wait ended without a DEPOSED: two leaders
   * (test-fault-close-campaign: elected 3 ms after the close, which
   * took 5 s). */
  if (!c->close_aborted) {
    c->close_aborted = 1;
    for (q = c->members.next; q != &c->members;) {
      redlock__member *m = REDLOCK__CONTAINER_OF(q, redlock__member, link);
      q = q->next;
      m->abort(m);
    }
  }
  /* A mark of a broken durability declaration that no other master
   * confirmed (guard.c, 6.): a new client could not know of the break,
   * and would count that master's next instance. Waited for (the
   * background tick sends it again), bounded by three command timeouts
   * and two ticks; then said, also while closing. */
  left = redlock__guard_marks_unconfirmed(&c->guard, name, sizeof(name));
  if (c->close_stage == 0 && left > 0) {
    redlock__ns now = redlock__sys_now(c->sys);
    if (c->close_marks_until == 0)
      c->close_marks_until =
          now + (redlock__ns)(3 * c->command_timeout_ms + 2 * TICK_MS) *
                    1000000;
    if (now < c->close_marks_until) {
      redlock__timer_start(&c->close_timer, on_close_timer, 50, 0);
      return;
    }
    snprintf(msg, sizeof(msg), "closed while the mark that %s broke its "
             "durability declaration is written on no other master%s: a "
             "new client will count its next instance (give the clients' "
             "user HSET on the marks' key, or keep %s guarded by hand)",
             name, left > 1 ? " (and others)" : "", name);
    if (c->warn_cb != NULL)
      c->warn_cb(c, msg, c->warn_arg);
  }
  c->close_stage = 1;
  c->nodes_open = c->n_nodes;
  redlock__timer_stop(&c->recheck_timer);
  redlock__guard_close(&c->guard);
  /* Counted first: a master's close may report at once. */
  c->masters_open = c->n + 1;
  for (i = 0; i < c->n; i++)
    if (!c->masters[i].ops->close(&c->masters[i], on_master_closed, c))
      c->masters_open--;
  c->masters_open--;
  redlock__wake_close(&c->wake, on_wake_closed, c);
  for (i = 0; i < c->n_nodes; i++)
    redlock__node_close(&c->nodes[i]);
  client_maybe_finish(c);
}

int redlock_client_close(redlock_client_t *c, redlock_close_cb cb,
                         void *arg) {
  if (c == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_close: NULL");
  if (c->closing)
    return redlock__fail(REDLOCK_EBUSY, "client is already closing");
  c->closing = 1;
  c->close_cb = cb;
  c->close_arg = arg;
  redlock__timer_start(&c->close_timer, on_close_timer, 0, 0);
  return 0;
}

/* ---- getters ------------------------------------------------------------- */

size_t redlock_client_n_servers(const redlock_client_t *c) {
  return c != NULL ? c->n : 0;
}

unsigned redlock_client_quorum(const redlock_client_t *c) {
  return c != NULL ? c->quorum : 0;
}

unsigned redlock_client_n_up(const redlock_client_t *c) {
  unsigned i;
  unsigned up = 0;
  if (c == NULL)
    return 0;
  for (i = 0; i < c->n; i++)
    up += c->masters[i].ops->up(&c->masters[i]) != 0;
  return up;
}

uv_loop_t *redlock_client_loop(const redlock_client_t *c) {
  return c != NULL ? c->loop : NULL;
}

static void fill_info(redlock_client_t *c, unsigned i, unsigned idx,
                      redlock_master_info *out) {
  const redlock__node *n = &c->nodes[idx];
  const redlock__guard_node *gn = &c->guard.gn[idx];
  int64_t skew, unc, window;
  int cause;
  memset(out, 0, sizeof(*out));
  out->server = c->displays[i];
  out->node = n->uri.display;
  out->up = n->state == REDLOCK__NODE_UP;
  out->error = out->up ? "" : n->errstr;
  out->run_id = n->run_id;
  out->role = n->role;
  out->uptime_s = n->uptime_s;
  out->declared_durable = n->declared;
  out->durable = n->durable;
  out->ttl_record_ms = gn->up ? gn->known_ms : -1;
  out->clock_known = gn->have;
  if (redlock__guard_skew(&c->guard, idx, &skew, &unc) == 0)
    out->clock_skew_ms = skew / 1000;
  window = redlock__guard_window(&c->guard);
  c->info_buf[0][0] = '\0';
  out->counts =
      redlock__guard_peek(&c->guard, idx, window > 0 ? window : 1,
                          redlock__sys_now(c->sys), c->info_buf[0],
                          sizeof(c->info_buf[0]), &out->guard_wait_ms,
                          &cause) == REDLOCK__GUARD_COUNT;
  out->guard_cause = out->counts ? REDLOCK_GUARD_NONE : cause;
  out->guard_reason = out->counts ? "" : c->info_buf[0];
  if (out->counts)
    out->guard_wait_ms = -1;
  out->warning = c->warnings[idx];
  {
    const redlock__master *m = &c->masters[i];
    unsigned tmp[REDLOCK__MASTER_NODES];
    out->nodes = m->ops->nodes(m, tmp, REDLOCK__MASTER_NODES);
    out->problem = m->ops->problem(m);
  }
}

int redlock_client_master_info(redlock_client_t *c, unsigned i,
                               redlock_master_info *out) {
  if (c == NULL || out == NULL || i >= c->n)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_master_info: client, out or index "
                         "out of range");
  fill_info(c, i, i, out);
  return 0;
}

int redlock_client_node_info(redlock_client_t *c, unsigned i, unsigned k,
                             redlock_master_info *out) {
  unsigned tmp[REDLOCK__MASTER_NODES];
  unsigned n;
  if (c == NULL || out == NULL || i >= c->n)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_node_info: client, out or index "
                         "out of range");
  n = c->masters[i].ops->nodes(&c->masters[i], tmp,
                                REDLOCK__MASTER_NODES);
  if (k >= n)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_node_info: master %u has %u "
                         "node%s in use", i + 1, n, n == 1 ? "" : "s");
  fill_info(c, i, tmp[k], out);
  return 0;
}
