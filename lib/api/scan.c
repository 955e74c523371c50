/* scan.c: listing the locks under a prefix (redlock_client_scan).
 *
 * SCAN cursor MATCH <glob> COUNT 1000 TYPE string|hash on every node in
 * use of every master (master.h's ops->nodes: a plain master's node, a
 * cluster's primaries, a sentinel group's primary), all at once: two
 * streams per node (strings: locks, markers, permits; hashes: read-write
 * locks, semaphores' records; the type tells a hash "K:rw" from a lock
 * named "K:rw": names.c), each stream's cursor followed to its end; the
 * raw keys become lock names through names.c; a table keeps each (name,
 * kind) once with the masters that showed it. SCAN's TYPE needs Redis 6.0.
 *
 *   call --> every stream: SCAN 0 --reply--> names kept, SCAN <cursor> ...
 *        --> cursor 0 (done), the call cap (capped), a failure (failed)
 *   every node ended, or the deadline --> the callback (in a later pass
 *   of the timer queue, never inside the call) --> the table freed
 *   --> the last reply in flight came back --> the scan freed
 *
 * Owns: the scan's state, its table of names, its deadline (an entry of
 * the client's timer queue), the result handed to the callback. Does not
 * own: the nodes and their requests' deadlines (node.c: each SCAN call
 * has the client's command timeout, bounded by the scan's deadline while
 * it waits for a handshake), the key layout (names.c).
 *
 * Invariants:
 *  1. The callback runs exactly once: at the end of every node, at the
 *     deadline, or when the client closes (ECANCELED), whichever is first.
 *  2. The scan lives (a member of the client: the close waits for it)
 *     until its callback ran and no reply is in flight; requests that come
 *     back after the callback only lower the count in flight.
 *  3. A cluster's primaries learned after the call (its first node's
 *     handshake) are scanned as its replies come: after each reply of a
 *     master, its nodes in use are asked for again.
 *  4. Every reply is checked: [cursor, [strings...]] with a decimal
 *     cursor, else its node fails (the others go on).
 *  5. A stream is s->state's index: node index * 2 + (1 for hashes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define SCAN_COUNT "1000"
#define DEF_WAIT_MS 10000
#define MAX_WAIT_MS 3600000

enum { N_IDLE = 0, N_RUNNING, N_DONE, N_CAPPED, N_FAILED };

typedef struct scan_entry {
  size_t off;        /* in the arena */
  size_t len;
  int kind;
  uint64_t masters;  /* a bit per master that showed it */
} scan_entry;

typedef struct scan {
  redlock__member member;      /* in c->members (invariant 2) */
  redlock_client_t *c;
  redlock__tq_entry timer;     /* the deadline, then the delivery */
  redlock__ns deadline;
  redlock_scan_cb cb;
  void *arg;
  char *glob;
  size_t glob_len;
  char *want;                  /* the client's key prefix + the prefix */
  size_t want_len;
  unsigned max_names;
  uint8_t *state;              /* per stream (invariant 5): N_* */
  char (*cursor)[24];          /* per stream: the next call's cursor */
  unsigned *calls;             /* per stream: SCAN calls sent */
  unsigned inflight;
  int finished;                /* the delivery is due (timer at 0) */
  int delivered;
  int status;
  int capped;
  char error[300];
  scan_entry *entries;
  size_t n_entries, cap_entries;
  uint32_t *slots;             /* open addressing: entry index + 1 */
  size_t n_slots;
  char *arena;
  size_t arena_len, arena_cap;
} scan;

/* ---- the table of names -------------------------------------------------- */

static uint64_t hash_of(const char *p, size_t len, int kind) {
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)kind;
  size_t i;
  for (i = 0; i < len; i++) {
    h ^= (unsigned char)p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

static int table_grow(scan *s) {
  size_t n = s->n_slots ? 2 * s->n_slots : 256, i;
  uint32_t *slots = redlock__calloc(n, sizeof(*slots));
  if (slots == NULL)
    return REDLOCK_ENOMEM;
  for (i = 0; i < s->n_entries; i++) {
    const scan_entry *e = &s->entries[i];
    size_t h = (size_t)hash_of(s->arena + e->off, e->len, e->kind) & (n - 1);
    while (slots[h] != 0)
      h = (h + 1) & (n - 1);
    slots[h] = (uint32_t)(i + 1);
  }
  redlock__free(s->slots);
  s->slots = slots;
  s->n_slots = n;
  return 0;
}

/* Name p (len bytes) of `kind` was seen on master m: kept once. 0, or
 * ENOMEM. */
static int table_add(scan *s, unsigned m, const char *p, size_t len,
                     int kind) {
  size_t h;
  scan_entry *e;
  if ((s->n_entries + 1) * 2 > s->n_slots && table_grow(s) != 0)
    return REDLOCK_ENOMEM;
  h = (size_t)hash_of(p, len, kind) & (s->n_slots - 1);
  while (s->slots[h] != 0) {
    e = &s->entries[s->slots[h] - 1];
    if (e->kind == kind && e->len == len &&
        memcmp(s->arena + e->off, p, len) == 0) {
      e->masters |= (uint64_t)1 << m;
      return 0;
    }
    h = (h + 1) & (s->n_slots - 1);
  }
  if (s->n_entries >= s->max_names) {
    s->capped = 1;   /* more names than kept: the listing is cut */
    return 0;
  }
  if (s->n_entries == s->cap_entries) {
    size_t n = s->cap_entries ? 2 * s->cap_entries : 64;
    scan_entry *ne = redlock__realloc(s->entries, n * sizeof(*ne));
    if (ne == NULL)
      return REDLOCK_ENOMEM;
    s->entries = ne;
    s->cap_entries = n;
  }
  if (s->arena_len + len > s->arena_cap) {
    size_t n = s->arena_cap ? s->arena_cap : 4096;
    char *na;
    while (n < s->arena_len + len)
      n *= 2;
    na = redlock__realloc(s->arena, n);
    if (na == NULL)
      return REDLOCK_ENOMEM;
    s->arena = na;
    s->arena_cap = n;
  }
  memcpy(s->arena + s->arena_len, p, len);
  e = &s->entries[s->n_entries];
  e->off = s->arena_len;
  e->len = len;
  e->kind = kind;
  e->masters = (uint64_t)1 << m;
  s->arena_len += len;
  s->slots[h] = (uint32_t)++s->n_entries;
  return 0;
}

static void table_free(scan *s) {
  redlock__free(s->entries);
  redlock__free(s->slots);
  redlock__free(s->arena);
  s->entries = NULL;
  s->slots = NULL;
  s->arena = NULL;
  s->n_entries = s->cap_entries = s->n_slots = 0;
  s->arena_len = s->arena_cap = 0;
}

/* ---- delivery ------------------------------------------------------------ */

typedef struct sorted {
  redlock_scan_name n;
  uint64_t masters;
} sorted;

static int cmp_sorted(const void *a, const void *b) {
  const redlock_scan_name *x = &((const sorted *)a)->n;
  const redlock_scan_name *y = &((const sorted *)b)->n;
  size_t len = x->len < y->len ? x->len : y->len;
  int d = len > 0 ? memcmp(x->name, y->name, len) : 0;
  if (d != 0)
    return d;
  if (x->len != y->len)
    return x->len < y->len ? -1 : 1;
  return x->kind - y->kind;
}

static unsigned popcount64(uint64_t v) {
  unsigned n = 0;
  for (; v != 0; v &= v - 1)
    n++;
  return n;
}

/* Masters whose every node in use ended its streams without failing. */
static unsigned masters_done(const scan *s) {
  const redlock_client_t *c = s->c;
  unsigned i, k, done = 0;
  for (i = 0; i < c->n; i++) {
    const redlock__master *m = &c->masters[i];
    unsigned idx[REDLOCK__MASTER_NODES];
    unsigned n = m->ops->nodes(m, idx, REDLOCK__MASTER_NODES), ok = n > 0;
    for (k = 0; k < 2 * n; k++) {
      unsigned st = s->state[2 * idx[k / 2] + k % 2];
      if (st != N_DONE && st != N_CAPPED)
        ok = 0;
    }
    done += ok;
  }
  return done;
}

static int all_ended(const scan *s) {
  unsigned i;
  for (i = 0; i < 2 * s->c->n_nodes; i++)
    if (s->state[i] == N_RUNNING)
      return 0;
  return 1;
}

static void scan_maybe_free(scan *s) {
  redlock_client_t *c = s->c;
  if (!s->delivered || s->inflight > 0)
    return;
  redlock__tq_stop(&c->tq, &s->timer);
  redlock__tq_unreserve(&c->tq, 1);
  redlock__queue_remove(&s->member.link);
  table_free(s);
  redlock__free(s->glob);
  redlock__free(s->want);
  redlock__free(s->state);
  redlock__free(s->cursor);
  redlock__free(s->calls);
  redlock__free(s);
  redlock__client_leave(c);
}

/* The callback (invariant 1), then the table is freed. */
static void scan_deliver(scan *s, int status) {
  redlock_client_t *c = s->c;
  redlock_scan_result res;
  redlock_scan_name *names = NULL;
  sorted *all = NULL;
  size_t i, n = 0;
  unsigned done = masters_done(s);
  int complete;
  if (s->delivered)
    return;
  s->delivered = 1;
  redlock__tq_stop(&c->tq, &s->timer);
  complete = status == 0 && !s->capped && done == c->n;
  if (s->n_entries > 0) {
    all = redlock__malloc(s->n_entries * sizeof(*all));
    names = redlock__malloc(s->n_entries * sizeof(*names));
    if (all == NULL || names == NULL) {
      status = REDLOCK_ENOMEM;
      complete = 0;
    }
  }
  if (all != NULL && names != NULL) {
    for (i = 0; i < s->n_entries; i++) {
      all[i].n.name = s->arena + s->entries[i].off;
      all[i].n.len = s->entries[i].len;
      all[i].n.kind = s->entries[i].kind;
      all[i].masters = s->entries[i].masters;
    }
    qsort(all, s->n_entries, sizeof(*all), cmp_sorted);
    /* A read-write lock's marker (its plain key) and its hash: one
     * read-write lock, on the masters that showed either. */
    for (i = 0; i < s->n_entries; i++) {
      if (n > 0 && all[i].n.kind == REDLOCK_NAME_RW &&
          all[n - 1].n.kind == REDLOCK_NAME_LOCK &&
          all[n - 1].n.len == all[i].n.len &&
          memcmp(all[n - 1].n.name, all[i].n.name, all[i].n.len) == 0) {
        all[n - 1].n.kind = REDLOCK_NAME_RW;
        all[n - 1].masters |= all[i].masters;
        continue;
      }
      all[n++] = all[i];
    }
    for (i = 0; i < n; i++) {
      names[i] = all[i].n;
      names[i].masters = popcount64(all[i].masters);
    }
  }
  memset(&res, 0, sizeof(res));
  res.names = names;
  res.n_names = n;
  res.complete = complete;
  res.capped = s->capped;
  res.masters_done = done;
  res.n_masters = c->n;
  res.error = s->error;
  s->status = status;
  s->cb(c, status, &res, s->arg);
  redlock__free(names);
  redlock__free(all);
  table_free(s);
}

static void on_deliver(redlock__tq_entry *e) {
  scan *s = REDLOCK__CONTAINER_OF(e, scan, timer);
  scan_deliver(s, s->status);
  scan_maybe_free(s);
}

/* Every node ended: the callback in a later pass (never inside the call
 * that started the scan). */
static void scan_maybe_finish(scan *s) {
  if (s->finished || s->delivered || !all_ended(s))
    return;
  s->finished = 1;
  s->status = masters_done(s) >= s->c->quorum ? 0 : REDLOCK_ENOQUORUM;
  redlock__tq_start(&s->c->tq, &s->timer, 0, on_deliver);
}

static void on_deadline(redlock__tq_entry *e) {
  scan *s = REDLOCK__CONTAINER_OF(e, scan, timer);
  scan_deliver(s, masters_done(s) >= s->c->quorum ? 0 : REDLOCK_ETIMEDOUT);
  scan_maybe_free(s);
}

static void scan_abort(redlock__member *m) {
  scan *s = REDLOCK__CONTAINER_OF(m, scan, member);
  scan_deliver(s, REDLOCK_ECANCELED);
  scan_maybe_free(s);
}

/* ---- the nodes ----------------------------------------------------------- */

static void node_failed(scan *s, unsigned st, const char *why) {
  const redlock__node *n = &s->c->nodes[st / 2];
  s->state[st] = N_FAILED;
  if (s->error[0] == '\0')
    snprintf(s->error, sizeof(s->error), "%s: %s",
             n->uri.display ? n->uri.display : "?", why);
}

static void on_scan_reply(redlock__req *req, const redlock__reply *r,
                          int error, const char *errstr);

/* The next SCAN call of stream st (its cursor). */
static void scan_send(scan *s, unsigned st) {
  redlock__node *n = &s->c->nodes[st / 2];
  const char *argv[8];
  size_t lens[8];
  redlock__req *req;
  int rc;
  argv[0] = "SCAN";
  argv[1] = s->cursor[st];
  argv[2] = "MATCH";
  argv[3] = s->glob;
  argv[4] = "COUNT";
  argv[5] = SCAN_COUNT;
  argv[6] = "TYPE";
  argv[7] = st % 2 ? "hash" : "string";
  lens[0] = 4;
  lens[1] = strlen(s->cursor[st]);
  lens[2] = 5;
  lens[3] = s->glob_len;
  lens[4] = 5;
  lens[5] = strlen(SCAN_COUNT);
  lens[6] = 4;
  lens[7] = strlen(argv[7]);
  req = redlock__node_req(n);
  if (req == NULL) {
    node_failed(s, st, "out of memory");
    return;
  }
  req->cb = on_scan_reply;
  req->owner = s;
  req->tag.gen = st;
  req->flags = REDLOCK__REQ_HERE;   /* a node's own keys: never redirected */
  req->until_ns = s->deadline;
  rc = redlock__node_submit(n, req, 8, argv, lens);
  if (rc != 0) {
    node_failed(s, st, rc == REDLOCK_EIO && n->errstr[0] != '\0'
                           ? n->errstr : redlock_strerror(rc));
    return;
  }
  s->calls[st]++;
  s->inflight++;
}

/* Master i's nodes in use that were not scanned yet start (invariant 3). */
static void scan_master(scan *s, unsigned i) {
  redlock__master *m = &s->c->masters[i];
  unsigned idx[REDLOCK__MASTER_NODES];
  unsigned n = m->ops->nodes(m, idx, REDLOCK__MASTER_NODES), k;
  for (k = 0; k < 2 * n; k++) {
    unsigned st = 2 * idx[k / 2] + k % 2;
    if (s->state[st] != N_IDLE)
      continue;
    s->state[st] = N_RUNNING;
    memcpy(s->cursor[st], "0", 2);
    scan_send(s, st);
  }
}

/* A page of names (invariant 4): 0, or why the reply is not SCAN's. */
static const char *scan_page(scan *s, unsigned st,
                             const redlock__reply *r) {
  unsigned master = s->c->nodes[st / 2].master;
  const redlock__reply *cur, *keys;
  size_t i;
  if (r->type == REDLOCK__R_ERROR)
    return r->str != NULL ? r->str : "error reply";
  if (r->type != REDLOCK__R_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDLOCK__R_STRING ||
      r->element[1]->type != REDLOCK__R_ARRAY)
    return "not a SCAN reply ([cursor, [names...]])";
  cur = r->element[0];
  if (cur->len < 1 || cur->len > 20)
    return "a SCAN cursor that is not a decimal number";
  for (i = 0; i < cur->len; i++)
    if (cur->str[i] < '0' || cur->str[i] > '9')
      return "a SCAN cursor that is not a decimal number";
  keys = r->element[1];
  for (i = 0; i < keys->elements; i++)
    if (keys->element[i]->type != REDLOCK__R_STRING)
      return "not a SCAN reply ([cursor, [names...]])";
  for (i = 0; i < keys->elements; i++) {
    const redlock__reply *k = keys->element[i];
    size_t off, len;
    int kind;
    if (k->len > REDLOCK_MAX_KEY)
      continue;
    kind = redlock__name_classify(k->str, k->len, (int)(st % 2), s->want,
                                  s->want_len, s->c->key_prefix_len, &off,
                                  &len);
    if (kind != 0 && table_add(s, master, k->str + off, len, kind) != 0)
      return "out of memory";
  }
  return NULL;
}

static void on_scan_reply(redlock__req *req, const redlock__reply *r,
                          int error, const char *errstr) {
  scan *s = req->owner;
  unsigned st = req->tag.gen;
  unsigned master = s->c->nodes[st / 2].master;
  const char *why;
  s->inflight--;
  if (s->delivered) {
    scan_maybe_free(s);
    return;
  }
  if (r == NULL) {
    node_failed(s, st, errstr != NULL && errstr[0] != '\0'
                           ? errstr : redlock_strerror(error));
  } else if ((why = scan_page(s, st, r)) != NULL) {
    node_failed(s, st, why);
  } else if (r->element[0]->len == 1 && r->element[0]->str[0] == '0') {
    s->state[st] = N_DONE;
  } else if (s->calls[st] >= REDLOCK_SCAN_MAX_CALLS) {
    s->state[st] = N_CAPPED;
    s->capped = 1;
  } else {
    memcpy(s->cursor[st], r->element[0]->str, r->element[0]->len);
    s->cursor[st][r->element[0]->len] = '\0';
    scan_send(s, st);
  }
  scan_master(s, master);
  scan_maybe_finish(s);
}

/* ---- the call ------------------------------------------------------------ */

int redlock_client_scan(redlock_client_t *c, const void *prefix,
                        size_t prefix_len, unsigned max_names,
                        int64_t wait_ms, redlock_scan_cb cb, void *arg) {
  scan *s;
  unsigned i;
  if (c == NULL || cb == NULL || (prefix == NULL && prefix_len > 0))
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_scan: client, "
                         "callback or prefix is NULL");
  if (c->closing)
    return redlock__fail(REDLOCK_ECANCELED,
                         "redlock_client_scan: client is closing");
  if (max_names < 1 || max_names > REDLOCK_SCAN_MAX_NAMES)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_scan: max_names "
                         "%u out of range 1..%d", max_names,
                         REDLOCK_SCAN_MAX_NAMES);
  if (wait_ms < 0 || wait_ms > MAX_WAIT_MS)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_scan: wait %lld "
                         "ms out of range 0..%d", (long long)wait_ms,
                         MAX_WAIT_MS);
  if (prefix_len > REDLOCK_MAX_KEY - c->key_prefix_len)
    return redlock__fail(REDLOCK_EINVAL, "redlock_client_scan: prefix "
                         "longer than %zu bytes",
                         (size_t)REDLOCK_MAX_KEY - c->key_prefix_len);
  if (wait_ms == 0)
    wait_ms = DEF_WAIT_MS;
  s = redlock__calloc(1, sizeof(*s));
  if (s == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  s->want_len = c->key_prefix_len + prefix_len;
  s->want = redlock__malloc(s->want_len + 1);
  s->glob = redlock__malloc(4 * s->want_len + 3);
  s->state = redlock__calloc(2 * (size_t)c->n_nodes, sizeof(*s->state));
  s->cursor = redlock__calloc(2 * (size_t)c->n_nodes, sizeof(*s->cursor));
  s->calls = redlock__calloc(2 * (size_t)c->n_nodes, sizeof(*s->calls));
  if (s->want == NULL || s->glob == NULL || s->state == NULL ||
      s->cursor == NULL || s->calls == NULL ||
      redlock__tq_reserve(&c->tq, 1) != 0) {
    redlock__free(s->want);
    redlock__free(s->glob);
    redlock__free(s->state);
    redlock__free(s->cursor);
    redlock__free(s->calls);
    redlock__free(s);
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  if (c->key_prefix_len > 0)
    memcpy(s->want, c->key_prefix, c->key_prefix_len);
  if (prefix_len > 0)
    memcpy(s->want + c->key_prefix_len, prefix, prefix_len);
  s->want[s->want_len] = '\0';
  s->glob_len = redlock__name_glob(s->want, s->want_len, s->glob);
  s->c = c;
  s->cb = cb;
  s->arg = arg;
  s->max_names = max_names;
  s->member.abort = scan_abort;
  s->deadline = redlock__sys_now(c->sys) +
                (redlock__ns)wait_ms * REDLOCK__NS_PER_MS;
  redlock__client_join(c, &s->member);
  redlock__tq_start(&c->tq, &s->timer, wait_ms, on_deadline);
  for (i = 0; i < c->n; i++)
    scan_master(s, i);
  scan_maybe_finish(s);
  return 0;
}
