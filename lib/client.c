/* client.c: client life cycle.
 *
 * Owns: validating and copying the configuration, the nodes array, the
 * request pool, the write flusher, and the asynchronous close:
 *
 *   close() --timer 0--> abort every lock (ECANCELED, release what is held)
 *           --> close every node (drain, bounded by deadlines)
 *           --> all nodes CLOSED and all lock handles freed
 *           --> close flusher + close timer --> user close cb --> free
 *
 * Does not own: lock state machines (lock.c), connections (node.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define DEF_DRIFT_FACTOR 0.01
#define DEF_CONNECT_TIMEOUT_MS 250
#define DEF_COMMAND_TIMEOUT_MS 50
#define DEF_RETRY_COUNT 3
#define DEF_RETRY_DELAY_MS 200
#define DEF_RETRY_JITTER_MS 100
#define DEF_RECONNECT_MIN_MS 20
#define DEF_RECONNECT_MAX_MS 2000
#define MAX_TIMEOUT_MS 3600000        /* one hour: anything above is a typo */

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
    for (i = 0; i < c->n; i++)
      redlock__node_free(&c->nodes[i]);
  while (!redlock__queue_empty(&c->free_reqs)) {
    redlock__queue *q = c->free_reqs.next;
    redlock__queue_remove(q);
    redlock__free(REDLOCK__CONTAINER_OF(q, redlock__req, q));
  }
  redlock__wake_free(c);
  redlock__free(c->nodes);
  redlock__free(c->key_prefix);
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
      return redlock__fail(REDLOCK_EINVAL, "server %zu is NULL", i);
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
  if (isnan(cfg->drift_factor) || cfg->drift_factor < 0 ||
      cfg->drift_factor >= 0.5)
    return redlock__fail(REDLOCK_EINVAL,
                         "drift_factor %g out of range [0, 0.5)",
                         cfg->drift_factor);
  c->drift_factor =
      cfg->drift_factor == 0 ? DEF_DRIFT_FACTOR : cfg->drift_factor;
  if ((rc = pick_ms("connect_timeout_ms", cfg->connect_timeout_ms,
                    DEF_CONNECT_TIMEOUT_MS, 0, &c->connect_timeout_ms)) ||
      (rc = pick_ms("command_timeout_ms", cfg->command_timeout_ms,
                    DEF_COMMAND_TIMEOUT_MS, 0, &c->command_timeout_ms)) ||
      (rc = pick_ms("retry_delay_ms", cfg->retry_delay_ms,
                    DEF_RETRY_DELAY_MS, 1, &c->retry_delay_ms)) ||
      (rc = pick_ms("retry_jitter_ms", cfg->retry_jitter_ms,
                    DEF_RETRY_JITTER_MS, 1, &c->retry_jitter_ms)) ||
      (rc = pick_ms("reconnect_min_ms", cfg->reconnect_min_ms,
                    DEF_RECONNECT_MIN_MS, 0, &c->reconnect_min_ms)) ||
      (rc = pick_ms("reconnect_max_ms", cfg->reconnect_max_ms,
                    DEF_RECONNECT_MAX_MS, 0, &c->reconnect_max_ms)))
    return rc;
  c->restart_guard_ms =
      cfg->restart_guard_ms < 0 ? -1 : (int64_t)cfg->restart_guard_ms;
  if (c->reconnect_min_ms > c->reconnect_max_ms)
    return redlock__fail(REDLOCK_EINVAL,
                         "reconnect_min_ms %lld > reconnect_max_ms %lld",
                         (long long)c->reconnect_min_ms,
                         (long long)c->reconnect_max_ms);
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
  return 0;
}

int redlock_client_new(uv_loop_t *loop, const redlock_client_config *cfg,
                       redlock_client_t **out) {
  redlock_client_t *c = NULL;
  redlock__uri *uris = NULL;
  size_t i;
  size_t parsed = 0;
  int rc;

  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_new: out is NULL");
  *out = NULL;
  if (loop == NULL || cfg == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_client_new: loop or config is NULL");
  c = redlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  redlock__queue_init(&c->locks);
  redlock__queue_init(&c->free_reqs);
  redlock__queue_init(&c->wake_channels);
  rc = check_config(cfg, c);
  if (rc != 0)
    goto fail;

  /* Parse every address before creating any handle: a bad one leaves
   * nothing to close. */
  uris = redlock__calloc(c->n, sizeof(*uris));
  if (uris == NULL)
    goto nomem;
  for (i = 0; i < c->n; i++) {
    char err[200];
    rc = redlock__uri_parse(cfg->servers[i], &uris[i], err, sizeof(err));
    if (rc != 0) {
      redlock__fail(rc, "server %zu: %s", i, err);
      goto fail;
    }
    parsed++;
  }
  if (copy_str(cfg->key_prefix, &c->key_prefix) ||
      copy_str(cfg->username, &c->username) ||
      copy_str(cfg->password, &c->password))
    goto nomem;
  c->key_prefix_len = c->key_prefix ? strlen(c->key_prefix) : 0;
  c->nodes = redlock__calloc(c->n, sizeof(*c->nodes));
  if (c->nodes == NULL)
    goto nomem;
  if (uv_random(NULL, NULL, &c->prng, sizeof(c->prng), 0, NULL) != 0)
    c->prng = uv_hrtime();

  /* From here nothing fails. */
  c->loop = loop;
  redlock__flusher_init(loop, &c->flusher);
  uv_timer_init(loop, &c->close_timer);
  c->close_timer.data = c;
  c->handles_open = 2;
  for (i = 0; i < c->n; i++)
    redlock__node_init(c, &c->nodes[i], (unsigned)i, &uris[i]);
  redlock__free(uris);
  for (i = 0; i < c->n; i++)
    redlock__node_start(&c->nodes[i]);
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

/* ---- request pool ------------------------------------------------------- */

redlock__req *redlock__req_get(redlock_client_t *c) {
  redlock__queue *q;
  if (redlock__queue_empty(&c->free_reqs))
    return redlock__calloc(1, sizeof(redlock__req));
  q = c->free_reqs.next;
  redlock__queue_remove(q);
  return REDLOCK__CONTAINER_OF(q, redlock__req, q);
}

void redlock__req_put(redlock_client_t *c, redlock__req *req) {
  redlock__queue_insert_tail(&c->free_reqs, &req->q);
}

/* ---- close -------------------------------------------------------------- */

static void on_client_handle_closed(uv_handle_t *h) {
  redlock_client_t *c = h->data;
  if (--c->handles_open == 0) {
    redlock_close_cb cb = c->close_cb;
    void *arg = c->close_arg;
    client_free_memory(c);
    if (cb != NULL)
      cb(c, arg);   /* the pointer is only an identity now */
  }
}

void redlock__client_maybe_finish(redlock_client_t *c) {
  if (c->close_started != 1 || c->nodes_open != 0 ||
      !redlock__queue_empty(&c->locks))
    return;
  c->close_started = 2;   /* the final close runs once */
  c->flusher.prepare.data = c;
  redlock__flusher_close(&c->flusher, on_client_handle_closed);
  uv_close((uv_handle_t *)&c->close_timer, on_client_handle_closed);
}

void redlock__client_node_closed(redlock_client_t *c) {
  c->nodes_open--;
  redlock__client_maybe_finish(c);
}

static void on_close_timer(uv_timer_t *t) {
  redlock_client_t *c = t->data;
  redlock__queue *q;
  unsigned i;
  c->close_started = 1;
  c->nodes_open = c->n;
  /* Abort every lock. Memory is freed only in uv close callbacks, so the
   * list stays walkable while callbacks run. */
  for (q = c->locks.next; q != &c->locks;) {
    redlock_lock_t *l = REDLOCK__CONTAINER_OF(q, redlock_lock_t, link);
    q = q->next;
    redlock__lock_abort(l);
  }
  redlock__wake_close(c);
  for (i = 0; i < c->n; i++)
    redlock__node_close(&c->nodes[i]);
  redlock__client_maybe_finish(c);
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
  uv_timer_start(&c->close_timer, on_close_timer, 0, 0);
  return 0;
}

/* ---- getters -------------------------------------------------------------- */

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
    up += c->nodes[i].state == REDLOCK__NODE_UP;
  return up;
}

uv_loop_t *redlock_client_loop(const redlock_client_t *c) {
  return c != NULL ? c->loop : NULL;
}
