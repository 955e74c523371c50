/* sync.c: the blocking API over a private loop on a background thread.
 *
 * Owns: the thread, its loop and client, and the call queue. A caller
 * fills a call on its own stack, pushes it under the mutex, wakes the loop
 * with uv_async_send (thread-safe, coalescing: the loop drains the whole
 * queue) and waits on the call's semaphore. The loop thread starts the
 * asynchronous operation; its callback stores the result and posts the
 * semaphore. Like curl's easy_perform over a private multi handle.
 *
 * Lock handles are read and changed only on the loop thread, so getters
 * are calls too. Shutdown: a CLOSE call closes the client (which releases
 * held locks and cancels what is in flight), then the async handle; the
 * loop then runs out of handles and the thread returns. Calls are pushed
 * and the loop woken under the mutex, and shutdown marks the handle shut
 * under it: once shut, nothing is queued and the async handle is never
 * touched again, so calls that race a shutdown end with ECANCELED. The
 * lock and election wrappers stay allocated until redlock_sync_close
 * (calls on them read their sync pointer first), which frees them.
 *
 * A failed operation's per-master result goes back to the calling thread
 * as a deep copy (redlock_sync_last_result), kept in a thread-specific
 * slot until the thread's next blocking call; its destructor frees it
 * when the thread exits.
 *
 * Also owns the process-wide event queue (redlock_sync_queue_*,
 * redlock_sync_next_event): callbacks that a binding gives instead of its
 * own, so that nothing on a loop thread waits for the binding's code (a
 * Python callback waits for the GIL, and the loop with it). Invariant: a
 * queue callback only takes ev_mutex, which no holder keeps across a wait
 * for anything else. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef enum {
  CALL_ACQUIRE,
  CALL_EXTEND,
  CALL_RELEASE,
  CALL_VALIDITY,
  CALL_IS_LOST,
  CALL_TOKEN,
  CALL_HOLDS,
  CALL_FENCE,
  CALL_PERMIT,
  CALL_CAMPAIGN,
  CALL_IS_LEADER,
  CALL_RESIGN,
  CALL_LEADER,
  CALL_STATS,
  CALL_SEM_ADMIN,
  CALL_LOCK_ADMIN,
  CALL_ADOPT,
  CALL_CANCEL,
  CALL_CLOSE
} call_kind;

/* An election of the blocking API (loop thread only, but for the
 * pointer the caller holds). */
struct redlock_sync_election_s {
  redlock_sync_t *sync;
  redlock_election_t *e;        /* NULL once freed */
  redlock__queue link;          /* sync->elections */
  struct sync_call *campaign;   /* the caller waiting to be elected */
  struct sync_call *resign;     /* the caller waiting for the release */
  uv_timer_t timer;             /* the campaign's wait_ms */
  redlock_election_cb user_cb;
  void *user_arg;
};

struct redlock_sync_lock_s {
  redlock_sync_t *sync;
  redlock_lock_t *lock;       /* NULL once released (loop thread) */
  redlock__queue link;        /* sync->locks */
  unsigned refs;              /* owner + calls in flight (sync->mutex) */
  struct sync_call *active;   /* its extend/release in flight (loop) */
  redlock__queue deferred;    /* calls waiting for it, in order (loop) */
  redlock_lost_cb lost_cb;    /* the caller's on_lost */
  void *lost_arg;
  int scoped;                 /* redlock_sync_with_lock releases it */
  int acquiring;              /* its acquisition is in flight (loop) */
};

typedef struct sync_call {
  redlock__queue link;
  call_kind kind;
  uv_sem_t done;
  int status;
  /* inputs */
  const void *resource;
  size_t len;
  int64_t ttl_ms;
  const redlock_acquire_opts *opts;
  const void *const *resources;   /* multi: k > 1 */
  const size_t *lens;
  size_t k;
  int rw;                         /* 0 plain, 1 read, 2 write */
  unsigned limit;                 /* > 0: a semaphore's permit */
  int scoped;                     /* redlock_sync_with_lock's own call */
  const char *identity;           /* CAMPAIGN */
  const redlock_election_opts *eopts;
  redlock_sync_election_t *se;    /* IS_LEADER, RESIGN; CAMPAIGN: out */
  redlock_sync_lock_t *slock;
  redlock_sync_lock_t *held;      /* referenced while the call is queued */
  char *buf;
  size_t buflen;
  const void *cancel_arg;         /* CANCEL: the acquisitions' lost_arg */
  int sem_op;                     /* SEM_ADMIN: SEM_INSPECT, ... */
  unsigned permit;                /* SEM_ADMIN: force release's; set
                                     limit's new limit */
  redlock_semaphore_info *info;   /* SEM_ADMIN inspect: out (one block) */
  redlock_result *inspected;      /* LOCK_ADMIN inspect: out (one block) */
  /* outputs */
  int64_t value;
  redlock_result *res;            /* a failure's result (deep copy) */
  char msg[1024];                 /* the loop thread's error message */
} sync_call;

struct redlock_sync_s {
  uv_thread_t thread;
  uv_thread_t loop_thread_id;
  uv_loop_t loop;
  uv_async_t async;
  uv_mutex_t mutex;
  redlock__queue calls;       /* under mutex */
  redlock__queue locks;       /* loop thread only */
  redlock__queue elections;   /* loop thread only */
  redlock_client_t *client;
  sync_call *closing;         /* the CLOSE call, answered at the end */
  int shut;                   /* under mutex: shutdown began, no call is
                                 queued any more */
  int joined;                 /* the thread has been joined (under
                                 shut_mutex) */
  uv_mutex_t shut_mutex;      /* held through a whole shutdown */
  uv_sem_t ready;
  int start_status;
  char start_msg[256];
  const redlock_client_config *cfg;   /* during start only */
};

static void slock_unref(redlock_sync_t *s, redlock_sync_lock_t *sl) {
  int gone;
  uv_mutex_lock(&s->mutex);
  gone = --sl->refs == 0;
  uv_mutex_unlock(&s->mutex);
  if (gone) {
    redlock__queue_remove(&sl->link);
    redlock__free(sl);
  }
}

/* Answers a call. A failure carries the loop thread's message for the
 * caller's redlock_last_error(). The call struct lives on the caller's
 * stack: nothing touches it after the semaphore is posted. */
static void call_done(sync_call *call, int status) {
  redlock_sync_lock_t *held = call->held;
  redlock_sync_t *s = held != NULL ? held->sync : NULL;
  call->status = status;
  if (status != 0 && call->msg[0] == '\0')
    redlock__strlcpy(call->msg, redlock_strerror(status), sizeof(call->msg));
  uv_sem_post(&call->done);
  if (held != NULL)
    slock_unref(s, held);
}

/* An operation's outcome: a failure carries the per-master explanation
 * the async result has (redlock_result_explain), for the caller's
 * redlock_last_error(). */
/* One block: the result, its node array, then every string. NULL when
 * out of memory (the caller then has the explanation only). */
static redlock_result *result_copy(const redlock_result *res) {
  size_t size = sizeof(*res) + res->n_nodes * sizeof(redlock_node_result);
  redlock_node_result *nodes;
  redlock_result *copy;
  char *p;
  unsigned i;
  for (i = 0; i < res->n_nodes; i++) {
    const redlock_node_result *n = &res->nodes[i];
    size += strlen(n->server != NULL ? n->server : "") + 1;
    size += strlen(n->errstr != NULL ? n->errstr : "") + 1;
    size += strlen(n->holder != NULL ? n->holder : "") + 1;
  }
  copy = redlock__malloc(size);
  if (copy == NULL)
    return NULL;
  *copy = *res;
  nodes = (redlock_node_result *)(copy + 1);
  p = (char *)(nodes + res->n_nodes);
  for (i = 0; i < res->n_nodes; i++) {
    const char *str[3];
    const char **dst[3];
    int j;
    nodes[i] = res->nodes[i];
    str[0] = res->nodes[i].server;
    str[1] = res->nodes[i].errstr;
    str[2] = res->nodes[i].holder;
    dst[0] = &nodes[i].server;
    dst[1] = &nodes[i].errstr;
    dst[2] = &nodes[i].holder;
    for (j = 0; j < 3; j++) {
      size_t len = strlen(str[j] != NULL ? str[j] : "");
      memcpy(p, str[j] != NULL ? str[j] : "", len + 1);
      *dst[j] = p;
      p += len + 1;
    }
  }
  copy->nodes = nodes;
  return copy;
}

static void call_done_res(sync_call *call, int status,
                          const redlock_result *res) {
  if (status != 0 && res != NULL && res->n_nodes > 0) {
    redlock_result_explain(res, call->msg, sizeof(call->msg));
    call->res = result_copy(res);
  }
  call_done(call, status);
}

/* A public call failed on the loop thread: keep its message. */
static void call_failed(sync_call *call, int rc) {
  redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
  call_done(call, rc);
}

static void run_call(redlock_sync_t *s, sync_call *call);

/* Calls on one handle from many threads are serialized: an extend or
 * release waits for the one in flight (never EBUSY), then they run in the
 * order they came. */
static void run_deferred(redlock_sync_lock_t *sl) {
  redlock_sync_t *s = sl->sync;
  uv_mutex_lock(&s->mutex);
  sl->refs++;   /* alive through the calls below */
  uv_mutex_unlock(&s->mutex);
  while (sl->active == NULL && !redlock__queue_empty(&sl->deferred)) {
    sync_call *call =
        REDLOCK__CONTAINER_OF(sl->deferred.next, sync_call, link);
    redlock__queue_remove(&call->link);
    run_call(s, call);
  }
  slock_unref(s, sl);
}

static void on_op_done(redlock_lock_t *lock, int status,
                       const redlock_result *res, void *arg) {
  sync_call *call = arg;
  redlock_sync_lock_t *sl = call->slock;
  (void)lock;
  sl->active = NULL;
  call_done_res(call, status, res);
  run_deferred(sl);
}

/* The handle's lock is gone: drop the owner's reference. */
static void slock_release(redlock_sync_lock_t *sl) {
  sl->lock = NULL;
  slock_unref(sl->sync, sl);
}

static void on_sync_lost(redlock_lock_t *lock, int reason, void *arg) {
  redlock_sync_lock_t *sl = arg;
  (void)lock;
  /* The caller's handle, as the header promises. */
  if (sl->lost_cb != NULL)
    sl->lost_cb((redlock_lock_t *)sl, reason, sl->lost_arg);
}

static void on_release_done(redlock_lock_t *lock, int status,
                            const redlock_result *res, void *arg) {
  sync_call *call = arg;
  redlock_sync_lock_t *sl = call->slock;
  redlock_lock_free(lock);
  sl->lock = NULL;
  sl->active = NULL;
  call_done_res(call, status, res);
  run_deferred(sl);   /* they find the handle released */
  slock_unref(sl->sync, sl);   /* the owner's */
}

static void on_acquire_done(redlock_lock_t *lock, int status,
                            const redlock_result *res, void *arg) {
  sync_call *call = arg;
  redlock_sync_lock_t *sl = call->slock;
  sl->acquiring = 0;
  if (status != 0) {
    redlock_lock_free(lock);
    call->slock = NULL;
    slock_release(sl);
  }
  call_done_res(call, status, res);
}

static void start_acquire(redlock_sync_t *s, sync_call *call) {
  redlock_sync_lock_t *sl = redlock__calloc(1, sizeof(*sl));
  redlock_acquire_opts opts;
  int rc;
  if (sl == NULL) {
    call_done(call, REDLOCK_ENOMEM);
    return;
  }
  if (call->limit > 0)
    rc = redlock_semaphore_new(s->client, call->resource, call->len,
                               call->limit, &sl->lock);
  else if (call->rw != 0)
    rc = redlock_rwlock_new(s->client, call->resource, call->len,
                            call->rw == 2 ? REDLOCK_WRITE : REDLOCK_READ,
                            &sl->lock);
  else if (call->k > 0)
    rc = redlock_lock_new_multi(s->client, call->resources, call->lens,
                                call->k, &sl->lock);
  else
    rc = redlock_lock_new(s->client, call->resource, call->len, &sl->lock);
  if (rc != 0) {
    redlock__free(sl);
    call_failed(call, rc);
    return;
  }
  sl->sync = s;
  sl->refs = 1;   /* the caller's, until release */
  sl->scoped = call->scoped;
  redlock__queue_init(&sl->deferred);
  redlock__queue_insert_tail(&s->locks, &sl->link);
  call->slock = sl;
  if (call->opts != NULL)
    opts = *call->opts;
  else
    memset(&opts, 0, sizeof(opts));
  sl->lost_cb = opts.on_lost;
  sl->lost_arg = opts.lost_arg;
  if (opts.on_lost != NULL) {
    opts.on_lost = on_sync_lost;
    opts.lost_arg = sl;
  }
  rc = redlock_lock_acquire(sl->lock, call->ttl_ms, &opts, on_acquire_done,
                            call);
  sl->acquiring = rc == 0;
  if (rc != 0) {
    redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
    redlock_lock_free(sl->lock);
    call->slock = NULL;
    slock_release(sl);
    call_done(call, rc);
  }
}

static void on_se_closed(uv_handle_t *h) {
  redlock__free(h->data);
}

/* The election handle went with the client: answer whoever waits. The
 * wrapper stays (on s->elections, its timer closed) until
 * redlock_sync_close frees it: a caller may still hold it. */
static void se_drop(redlock_sync_election_t *se) {
  if (se->campaign != NULL) {
    call_done(se->campaign, REDLOCK_ECANCELED);
    se->campaign = NULL;
  }
  if (se->resign != NULL) {
    call_done(se->resign, 0);
    se->resign = NULL;
  }
  se->e = NULL;
  uv_close((uv_handle_t *)&se->timer, NULL);
}

static void on_client_closed(redlock_client_t *c, void *arg) {
  redlock_sync_t *s = arg;
  redlock__queue *q;
  (void)c;
  for (q = s->elections.next; q != &s->elections; q = q->next)
    se_drop(REDLOCK__CONTAINER_OF(q, redlock_sync_election_t, link));
  /* The client freed every lock handle; our wrappers stay until
   * redlock_sync_close (a caller may still hold one). */
  for (q = s->locks.next; q != &s->locks; q = q->next)
    REDLOCK__CONTAINER_OF(q, redlock_sync_lock_t, link)->lock = NULL;
  s->client = NULL;
  uv_close((uv_handle_t *)&s->async, NULL);
}

/* ---- elections (loop thread) --------------------------------------------- */

static void se_on_change(redlock_election_t *e, redlock_election_event ev,
                         int reason, void *arg) {
  redlock_sync_election_t *se = arg;
  if (ev == REDLOCK_ELECTED && se->campaign != NULL) {
    uv_timer_stop(&se->timer);
    se->campaign->se = se;
    call_done(se->campaign, 0);
    se->campaign = NULL;
  }
  if (se->user_cb != NULL)
    se->user_cb(e, ev, reason, se->user_arg);
  if (ev == REDLOCK_DEPOSED && reason == 0 && se->resign != NULL) {
    /* Resigned and released: now the handle goes. */
    sync_call *call = se->resign;
    se->resign = NULL;
    redlock_election_free(se->e);
    se->e = NULL;
    redlock__queue_remove(&se->link);
    uv_close((uv_handle_t *)&se->timer, on_se_closed);
    call_done(call, 0);
  }
}

/* Frees an election that is not leading (campaigning or idle). */
static void se_free_now(redlock_sync_election_t *se) {
  redlock_election_free(se->e);
  se->e = NULL;
  redlock__queue_remove(&se->link);
  uv_close((uv_handle_t *)&se->timer, on_se_closed);
}

static void on_campaign_timeout(uv_timer_t *t) {
  redlock_sync_election_t *se = t->data;
  sync_call *call = se->campaign;
  se->campaign = NULL;
  redlock__strlcpy(call->msg, "not elected within wait_ms",
                   sizeof(call->msg));
  se_free_now(se);
  call_done(call, REDLOCK_ETIMEDOUT);
}

static void start_campaign(redlock_sync_t *s, sync_call *call) {
  redlock_sync_election_t *se = redlock__calloc(1, sizeof(*se));
  redlock_election_opts o;
  int rc;
  if (se == NULL) {
    call_done(call, REDLOCK_ENOMEM);
    return;
  }
  if (call->eopts != NULL)
    o = *call->eopts;
  else
    memset(&o, 0, sizeof(o));
  se->sync = s;
  se->user_cb = o.on_change;
  se->user_arg = o.arg;
  o.on_change = se_on_change;
  o.arg = se;
  rc = redlock_election_new(s->client, call->resource, call->len,
                            call->identity, &o, &se->e);
  if (rc != 0) {
    redlock__free(se);
    call_failed(call, rc);
    return;
  }
  uv_timer_init(&s->loop, &se->timer);
  se->timer.data = se;
  redlock__queue_insert_tail(&s->elections, &se->link);
  se->campaign = call;
  rc = redlock_election_campaign(se->e);
  if (rc != 0) {
    redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
    se->campaign = NULL;
    se_free_now(se);
    call_done(call, rc);
    return;
  }
  if (call->ttl_ms > 0)
    uv_timer_start(&se->timer, on_campaign_timeout, (uint64_t)call->ttl_ms,
                   0);
}

static void on_leader_read(redlock_client_t *c, int status,
                           const char *identity, int64_t ttl_ms, void *arg) {
  sync_call *call = arg;
  (void)c;
  if (status == 0) {
    if (call->buf != NULL && call->buflen > 0)
      redlock__strlcpy(call->buf, identity, call->buflen);
    call->value = ttl_ms;
  }
  call_done(call, status);
}

static int election_call(redlock_sync_t *s, sync_call *call) {
  redlock_sync_election_t *se = call->se;
  int rc;
  switch (call->kind) {
    case CALL_CAMPAIGN:
      start_campaign(s, call);
      return 1;
    case CALL_IS_LEADER:
      call->value = se->e != NULL && redlock_election_is_leader(se->e);
      call_done(call, 0);
      return 1;
    case CALL_RESIGN:
      if (se->e == NULL) {
        call_done(call, 0);
        return 1;
      }
      if (redlock_election_is_leader(se->e)) {
        se->resign = call;   /* answered once released (se_on_change) */
        redlock_election_resign(se->e);
        return 1;
      }
      se_free_now(se);
      call_done(call, 0);
      return 1;
    case CALL_LEADER:
      rc = redlock_election_leader(s->client, call->resource, call->len,
                                   on_leader_read, call);
      if (rc != 0)
        call_failed(call, rc);
      return 1;
    default:
      return 0;
  }
}

/* ---- a semaphore's administration: a handle of its own per call ---------- */

enum { SEM_INSPECT, SEM_SET_LIMIT, SEM_FORCE };

/* One block: the info, its permits, their holders. */
static redlock_semaphore_info *sem_info_copy(
    const redlock_semaphore_info *in) {
  size_t size = sizeof(*in) + in->n_permits * sizeof(redlock_permit_info);
  redlock_semaphore_info *copy;
  redlock_permit_info *p;
  char *str;
  unsigned i;
  for (i = 0; i < in->n_permits; i++)
    size += strlen(in->permits[i].holder != NULL ? in->permits[i].holder
                                                 : "") + 1;
  copy = redlock__malloc(size);
  if (copy == NULL)
    return NULL;
  *copy = *in;
  p = (redlock_permit_info *)(copy + 1);
  str = (char *)(p + in->n_permits);
  for (i = 0; i < in->n_permits; i++) {
    const char *h = in->permits[i].holder != NULL ? in->permits[i].holder
                                                  : "";
    size_t n = strlen(h) + 1;
    p[i] = in->permits[i];
    memcpy(str, h, n);
    p[i].holder = str;
    str += n;
  }
  copy->permits = in->n_permits > 0 ? p : NULL;
  return copy;
}

static void on_sem_inspected(redlock_lock_t *l, int status,
                             const redlock_semaphore_info *info,
                             const redlock_result *res, void *arg) {
  sync_call *call = arg;
  if (info != NULL) {
    call->info = sem_info_copy(info);
    if (call->info == NULL && status == 0)
      status = REDLOCK_ENOMEM;
  }
  redlock_lock_free(l);   /* deferred: inside its own callback */
  call_done_res(call, status, res);
}

static void on_sem_admin_done(redlock_lock_t *l, int status,
                              const redlock_result *res, void *arg) {
  sync_call *call = arg;
  redlock_lock_free(l);
  call_done_res(call, status, res);
}

static void start_sem_admin(redlock_sync_t *s, sync_call *call) {
  redlock_lock_t *l;
  int rc = redlock_semaphore_new(s->client, call->resource, call->len,
                                 call->limit, &l);
  if (rc != 0) {
    call_failed(call, rc);
    return;
  }
  if (call->sem_op == SEM_INSPECT)
    rc = redlock_semaphore_inspect(l, on_sem_inspected, call);
  else if (call->sem_op == SEM_SET_LIMIT)
    rc = redlock_semaphore_set_limit(l, call->limit, on_sem_admin_done,
                                     call);
  else
    rc = redlock_semaphore_force_release(l, call->permit,
                                         on_sem_admin_done, call);
  if (rc != 0) {
    redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
    redlock_lock_free(l);
    call_done(call, rc);
  }
}

/* ---- a plain lock's administration: a handle of its own per call -------- */

enum { LOCK_INSPECT, LOCK_FORCE };   /* sync_call.sem_op of LOCK_ADMIN */

static void on_lock_admin_done(redlock_lock_t *l, int status,
                               const redlock_result *res, void *arg) {
  sync_call *call = arg;
  if (call->sem_op == LOCK_INSPECT && res != NULL) {
    call->inspected = result_copy(res);
    if (call->inspected == NULL && status == 0)
      status = REDLOCK_ENOMEM;
  }
  redlock_lock_free(l);   /* deferred: inside its own callback */
  call_done_res(call, status, res);
}

static void start_lock_admin(redlock_sync_t *s, sync_call *call) {
  redlock_lock_t *l;
  int rc = redlock_lock_new(s->client, call->resource, call->len, &l);
  if (rc != 0) {
    call_failed(call, rc);
    return;
  }
  if (call->sem_op == LOCK_INSPECT)
    rc = redlock_lock_inspect(l, on_lock_admin_done, call);
  else
    rc = redlock_lock_force_release(l, on_lock_admin_done, call);
  if (rc != 0) {
    redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
    redlock_lock_free(l);
    call_done(call, rc);
  }
}

/* A handle that takes over a lock acquired elsewhere under a token
 * (redlock_lock_adopt): a wrapper as an acquisition's, held at once, its
 * validity unknown (0) until an extend. */
static void start_adopt(redlock_sync_t *s, sync_call *call) {
  redlock_sync_lock_t *sl = redlock__calloc(1, sizeof(*sl));
  int rc;
  if (sl == NULL) {
    call_done(call, REDLOCK_ENOMEM);
    return;
  }
  rc = redlock_lock_new(s->client, call->resource, call->len, &sl->lock);
  if (rc != 0) {
    redlock__free(sl);
    call_failed(call, rc);
    return;
  }
  rc = redlock_lock_adopt(sl->lock, call->identity);
  if (rc != 0) {
    redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
    redlock_lock_free(sl->lock);
    redlock__free(sl);
    call_done(call, rc);
    return;
  }
  sl->sync = s;
  sl->refs = 1;   /* the caller's, until release */
  redlock__queue_init(&sl->deferred);
  redlock__queue_insert_tail(&s->locks, &sl->link);
  call->slock = sl;
  call_done(call, 0);
}

static void run_call(redlock_sync_t *s, sync_call *call) {
  redlock_lock_t *l = NULL;
  int rc;
  if (election_call(s, call))
    return;
  if (call->kind != CALL_ACQUIRE && call->kind != CALL_CLOSE &&
      call->kind != CALL_STATS && call->kind != CALL_CANCEL &&
      call->kind != CALL_SEM_ADMIN && call->kind != CALL_LOCK_ADMIN &&
      call->kind != CALL_ADOPT) {
    l = call->slock->lock;
    if (l == NULL) {
      /* Released by a call that ran before this one. */
      redlock__strlcpy(call->msg, "the lock handle was released",
                       sizeof(call->msg));
      call_done(call, REDLOCK_EINVAL);
      return;
    }
  }
  switch (call->kind) {
    case CALL_ACQUIRE:
      start_acquire(s, call);
      return;
    case CALL_EXTEND:
      if (call->slock->active != NULL) {
        redlock__queue_insert_tail(&call->slock->deferred, &call->link);
        return;
      }
      rc = redlock_lock_extend(l, call->ttl_ms, on_op_done, call);
      if (rc != 0)
        call_failed(call, rc);
      else
        call->slock->active = call;
      return;
    case CALL_RELEASE: {
      redlock_sync_lock_t *sl = call->slock;
      if (sl->scoped && !call->scoped) {
        redlock__strlcpy(call->msg,
                         "redlock_sync_release: this lock is released by "
                         "redlock_sync_with_lock when its function returns",
                         sizeof(call->msg));
        call_done(call, REDLOCK_EINVAL);
        return;
      }
      if (sl->active != NULL) {
        redlock__queue_insert_tail(&sl->deferred, &call->link);
        return;
      }
      rc = redlock_lock_release(l, on_release_done, call);
      if (rc == 0) {
        sl->active = call;
        return;
      }
      /* Not held (lost, expired): free the handle all the same. */
      redlock__strlcpy(call->msg, redlock_last_error(), sizeof(call->msg));
      redlock_lock_free(l);
      sl->lock = NULL;
      call_done(call, REDLOCK_ENOTHELD);
      run_deferred(sl);
      slock_unref(s, sl);   /* the owner's */
      return;
    }
    case CALL_VALIDITY:
      call->value = redlock_lock_validity_ms(l);
      call_done(call, 0);
      return;
    case CALL_IS_LOST:
      call->value = redlock_lock_is_lost(l);
      call_done(call, 0);
      return;
    case CALL_HOLDS:
      call->value = redlock_lock_holds(l);
      call_done(call, 0);
      return;
    case CALL_FENCE:
      call->value = (int64_t)redlock_lock_fence(l);
      call_done(call, 0);
      return;
    case CALL_PERMIT:
      call->value = redlock_semaphore_permit(l);
      call_done(call, 0);
      return;
    case CALL_TOKEN:
      if (strlen(redlock_lock_token(l)) + 1 > call->buflen) {
        redlock__strlcpy(call->msg, "token buffer too small",
                         sizeof(call->msg));
        call_done(call, REDLOCK_EINVAL);
        return;
      }
      redlock__strlcpy(call->buf, redlock_lock_token(l), call->buflen);
      call_done(call, 0);
      return;
    case CALL_CAMPAIGN:
    case CALL_IS_LEADER:
    case CALL_RESIGN:
    case CALL_LEADER:
      return;   /* election_call */
    case CALL_STATS:
      rc = redlock_client_stats(s->client, (redlock_stats *)call->buf);
      if (rc != 0)
        call_failed(call, rc);
      else
        call_done(call, 0);
      return;
    case CALL_SEM_ADMIN:
      start_sem_admin(s, call);
      return;
    case CALL_LOCK_ADMIN:
      start_lock_admin(s, call);
      return;
    case CALL_ADOPT:
      start_adopt(s, call);
      return;
    case CALL_CANCEL: {
      /* Every acquisition in flight with this arg; their callbacks come
       * on a later loop turn (not inside this walk). */
      redlock__queue *q, *next;
      call->value = 0;
      for (q = s->locks.next; q != &s->locks; q = q->next) {
        redlock_sync_lock_t *sl =
            REDLOCK__CONTAINER_OF(q, redlock_sync_lock_t, link);
        if (sl->acquiring && sl->lock != NULL &&
            sl->lost_arg == call->cancel_arg &&
            redlock_lock_cancel(sl->lock) == 0)
          call->value++;
      }
      /* And every campaign still waiting to be elected whose opts->arg it
       * is (a standby's Ctrl-C, issue 33): given up as its wait_ms would
       * (se_free_now releases what its attempt set), ECANCELED. */
      for (q = s->elections.next; q != &s->elections; q = next) {
        redlock_sync_election_t *se =
            REDLOCK__CONTAINER_OF(q, redlock_sync_election_t, link);
        next = q->next;   /* se_free_now unlinks se */
        if (se->campaign != NULL && se->e != NULL &&
            se->user_arg == call->cancel_arg) {
          sync_call *waiting = se->campaign;
          se->campaign = NULL;
          uv_timer_stop(&se->timer);
          redlock__strlcpy(waiting->msg, "campaign canceled",
                           sizeof(waiting->msg));
          se_free_now(se);
          call_done(waiting, REDLOCK_ECANCELED);
          call->value++;
        }
      }
      call_done(call, 0);
      return;
    }
    case CALL_CLOSE:
      s->closing = call;
      if (redlock_client_close(s->client, on_client_closed, s) != 0)
        uv_close((uv_handle_t *)&s->async, NULL);
      return;
  }
}

static void on_async(uv_async_t *h) {
  redlock_sync_t *s = h->data;
  redlock__queue todo;
  redlock__queue_init(&todo);
  uv_mutex_lock(&s->mutex);
  while (!redlock__queue_empty(&s->calls)) {
    redlock__queue *q = s->calls.next;
    redlock__queue_remove(q);
    redlock__queue_insert_tail(&todo, q);
  }
  uv_mutex_unlock(&s->mutex);
  while (!redlock__queue_empty(&todo)) {
    sync_call *call = REDLOCK__CONTAINER_OF(todo.next, sync_call, link);
    redlock__queue_remove(&call->link);
    if (s->closing != NULL)
      call_done(call, REDLOCK_ECANCELED);
    else
      run_call(s, call);
  }
}

static void loop_thread(void *arg) {
  redlock_sync_t *s = arg;
  int rc;
  s->loop_thread_id = uv_thread_self();
  rc = redlock_client_new(&s->loop, s->cfg, &s->client);
  s->start_status = rc;
  if (rc != 0) {
    redlock__strlcpy(s->start_msg, redlock_last_error(),
                     sizeof(s->start_msg));
    uv_close((uv_handle_t *)&s->async, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_sem_post(&s->ready);
    return;
  }
  uv_sem_post(&s->ready);
  uv_run(&s->loop, UV_RUN_DEFAULT);
}

/* ---- calls from any thread ---------------------------------------------- */

/* The calling thread's last failed operation's result (a deep copy),
 * freed when replaced and when the thread exits. */
static pthread_key_t last_result_key;
static pthread_once_t last_result_once = PTHREAD_ONCE_INIT;
static int last_result_ok;

static void last_result_free(void *p) {
  redlock__free(p);
}

static void last_result_init(void) {
  last_result_ok = pthread_key_create(&last_result_key,
                                      last_result_free) == 0;
}

static void set_last_result(redlock_result *res) {
  pthread_once(&last_result_once, last_result_init);
  if (!last_result_ok) {
    redlock__free(res);
    return;
  }
  redlock__free(pthread_getspecific(last_result_key));
  if (pthread_setspecific(last_result_key, res) != 0)
    redlock__free(res);
}

const redlock_result *redlock_sync_last_result(void) {
  pthread_once(&last_result_once, last_result_init);
  return last_result_ok ? pthread_getspecific(last_result_key) : NULL;
}

static int sync_post(redlock_sync_t *s, sync_call *call) {
  if (uv_thread_equal(&s->loop_thread_id, &(uv_thread_t){uv_thread_self()}))
    return redlock__fail(REDLOCK_EBUSY,
                         "blocking call from the redlock loop thread");
  if (uv_sem_init(&call->done, 0) != 0)
    return redlock__fail(REDLOCK_ENOMEM, "cannot create a semaphore");
  call->msg[0] = '\0';
  call->res = NULL;
  uv_mutex_lock(&s->mutex);
  if (s->shut) {
    uv_mutex_unlock(&s->mutex);
    uv_sem_destroy(&call->done);
    set_last_result(NULL);
    return redlock__fail(REDLOCK_ECANCELED, "the blocking client is closed");
  }
  if (call->slock != NULL) {
    /* The handle stays allocated while this call is queued, even if a
     * release queued before it frees its lock. */
    call->held = call->slock;
    call->slock->refs++;
  }
  redlock__queue_insert_tail(&s->calls, &call->link);
  /* Under the mutex: a shutdown cannot close the async handle between
   * the push and this wake-up. */
  uv_async_send(&s->async);
  uv_mutex_unlock(&s->mutex);
  uv_sem_wait(&call->done);
  uv_sem_destroy(&call->done);
  set_last_result(call->res);   /* NULL after a success */
  if (call->status != 0)
    redlock__fail(call->status, "%s", call->msg);
  return call->status;
}

int redlock_sync_new(const redlock_client_config *cfg, redlock_sync_t **out) {
  redlock_sync_t *s;
  char msg[256];
  int rc;
  if (out == NULL || cfg == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_new: cfg or out is NULL");
  *out = NULL;
  s = redlock__calloc(1, sizeof(*s));
  if (s == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  redlock__queue_init(&s->calls);
  redlock__queue_init(&s->locks);
  redlock__queue_init(&s->elections);
  s->cfg = cfg;
  if (uv_loop_init(&s->loop) != 0)
    goto fail_loop;
  if (uv_async_init(&s->loop, &s->async, on_async) != 0)
    goto fail_async;
  s->async.data = s;
  uv_mutex_init(&s->mutex);
  uv_mutex_init(&s->shut_mutex);
  uv_sem_init(&s->ready, 0);
  if (uv_thread_create(&s->thread, loop_thread, s) != 0) {
    uv_close((uv_handle_t *)&s->async, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    uv_mutex_destroy(&s->mutex);
    uv_mutex_destroy(&s->shut_mutex);
    uv_sem_destroy(&s->ready);
    redlock__free(s);
    return redlock__fail(REDLOCK_EIO, "cannot start the loop thread");
  }
  uv_sem_wait(&s->ready);
  uv_sem_destroy(&s->ready);
  s->cfg = NULL;
  rc = s->start_status;
  if (rc != 0) {
    redlock__strlcpy(msg, s->start_msg, sizeof(msg));
    uv_thread_join(&s->thread);
    uv_loop_close(&s->loop);
    uv_mutex_destroy(&s->mutex);
    uv_mutex_destroy(&s->shut_mutex);
    redlock__free(s);
    return redlock__fail(rc, "%s", msg);
  }
  *out = s;
  return 0;

fail_async:
  uv_loop_close(&s->loop);
fail_loop:
  redlock__free(s);
  return redlock__fail(REDLOCK_EIO, "cannot create the private loop");
}

int redlock_sync_shutdown(redlock_sync_t *s) {
  sync_call call;
  if (s == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_shutdown: NULL");
  if (uv_thread_equal(&s->loop_thread_id, &(uv_thread_t){uv_thread_self()}))
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_sync_shutdown from the redlock loop thread");
  set_last_result(NULL);
  /* A second caller waits here until the first one's thread is joined. */
  uv_mutex_lock(&s->shut_mutex);
  if (!s->joined) {
    memset(&call, 0, sizeof(call));
    call.kind = CALL_CLOSE;
    uv_mutex_lock(&s->mutex);
    s->shut = 1;
    redlock__queue_insert_tail(&s->calls, &call.link);
    uv_async_send(&s->async);
    uv_mutex_unlock(&s->mutex);
    uv_thread_join(&s->thread);
    s->joined = 1;
  }
  uv_mutex_unlock(&s->shut_mutex);
  return 0;
}

int redlock_sync_close(redlock_sync_t *s) {
  int rc;
  if (s == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_close: NULL");
  rc = redlock_sync_shutdown(s);
  if (rc != 0)
    return rc;
  uv_loop_close(&s->loop);
  uv_mutex_destroy(&s->mutex);
  uv_mutex_destroy(&s->shut_mutex);
  /* What callers still held: wrappers of locks not released and of
   * elections not resigned (their async handles went with the client). */
  while (!redlock__queue_empty(&s->locks)) {
    redlock__queue *q = s->locks.next;
    redlock__queue_remove(q);
    redlock__free(REDLOCK__CONTAINER_OF(q, redlock_sync_lock_t, link));
  }
  while (!redlock__queue_empty(&s->elections)) {
    redlock__queue *q = s->elections.next;
    redlock__queue_remove(q);
    redlock__free(REDLOCK__CONTAINER_OF(q, redlock_sync_election_t, link));
  }
  redlock__free(s);
  return 0;
}

static int sync_acquire(redlock_sync_t *s, sync_call *call,
                        redlock_sync_lock_t **out) {
  int rc;
  call->kind = CALL_ACQUIRE;
  rc = sync_post(s, call);
  if (rc == 0)
    *out = call->slock;
  return rc;
}

int redlock_sync_acquire_multi(redlock_sync_t *s,
                               const void *const *resources,
                               const size_t *lens, size_t k, int64_t ttl_ms,
                               const redlock_acquire_opts *opts,
                               redlock_sync_lock_t **out) {
  sync_call call;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_acquire: out NULL");
  *out = NULL;
  if (s == NULL || resources == NULL || lens == NULL || k == 0)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_acquire_multi: bad arguments");
  if (ttl_ms <= 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL, "ttl %lld ms out of range 1..%d",
                         (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  memset(&call, 0, sizeof(call));
  call.resources = resources;
  call.lens = lens;
  call.k = k;
  call.ttl_ms = ttl_ms;
  call.opts = opts;
  return sync_acquire(s, &call, out);
}

int redlock_sync_acquire_rw(redlock_sync_t *s, const void *resource,
                            size_t len, redlock_rw_side side, int64_t ttl_ms,
                            const redlock_acquire_opts *opts,
                            redlock_sync_lock_t **out) {
  sync_call call;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_acquire: out NULL");
  *out = NULL;
  if (s == NULL || resource == NULL || len == 0)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_acquire_rw: bad arguments");
  if (side != REDLOCK_READ && side != REDLOCK_WRITE)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_acquire_rw: side must be REDLOCK_READ "
                         "or REDLOCK_WRITE (got %d)", (int)side);
  if (ttl_ms <= 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL, "ttl %lld ms out of range 1..%d",
                         (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  memset(&call, 0, sizeof(call));
  call.resource = resource;
  call.len = len;
  call.rw = side == REDLOCK_WRITE ? 2 : 1;
  call.ttl_ms = ttl_ms;
  call.opts = opts;
  return sync_acquire(s, &call, out);
}

int redlock_sync_acquire_sem(redlock_sync_t *s, const void *resource,
                             size_t len, unsigned limit, int64_t ttl_ms,
                             const redlock_acquire_opts *opts,
                             redlock_sync_lock_t **out) {
  sync_call call;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_acquire: out NULL");
  *out = NULL;
  if (s == NULL || resource == NULL || len == 0)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_acquire_sem: bad arguments");
  if (limit < 1 || limit > REDLOCK_MAX_PERMITS)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_acquire_sem: limit %u out of range "
                         "1..%d", limit, REDLOCK_MAX_PERMITS);
  if (ttl_ms <= 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL, "ttl %lld ms out of range 1..%d",
                         (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  memset(&call, 0, sizeof(call));
  call.resource = resource;
  call.len = len;
  call.limit = limit;
  call.ttl_ms = ttl_ms;
  call.opts = opts;
  return sync_acquire(s, &call, out);
}

static int acquire_one(redlock_sync_t *s, const void *resource, size_t len,
                       int64_t ttl_ms, const redlock_acquire_opts *opts,
                       int scoped, const char *fn,
                       redlock_sync_lock_t **out) {
  sync_call call;
  int rc;
  if (s == NULL || resource == NULL || len == 0)
    return redlock__fail(REDLOCK_EINVAL,
                         "%s: NULL handle or empty resource", fn);
  if (ttl_ms <= 0 || ttl_ms > REDLOCK_MAX_TTL_MS)
    return redlock__fail(REDLOCK_EINVAL, "%s: ttl %lld ms out of range "
                         "1..%d", fn, (long long)ttl_ms, REDLOCK_MAX_TTL_MS);
  memset(&call, 0, sizeof(call));
  call.kind = CALL_ACQUIRE;
  call.resource = resource;
  call.len = len;
  call.ttl_ms = ttl_ms;
  call.opts = opts;
  call.scoped = scoped;
  rc = sync_post(s, &call);
  if (rc == 0)
    *out = call.slock;
  return rc;
}

int redlock_sync_adopt(redlock_sync_t *s, const void *resource, size_t len,
                       const char *token, redlock_sync_lock_t **out) {
  sync_call call;
  int rc;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_adopt: out NULL");
  *out = NULL;
  if (s == NULL || resource == NULL || len == 0 || token == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_adopt: bad arguments");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_ADOPT;
  call.resource = resource;
  call.len = len;
  call.identity = token;
  rc = sync_post(s, &call);
  if (rc == 0)
    *out = call.slock;
  return rc;
}

int redlock_sync_acquire(redlock_sync_t *s, const void *resource, size_t len,
                         int64_t ttl_ms, const redlock_acquire_opts *opts,
                         redlock_sync_lock_t **out) {
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_acquire: out NULL");
  *out = NULL;
  return acquire_one(s, resource, len, ttl_ms, opts, 0,
                     "redlock_sync_acquire", out);
}

int redlock_sync_with_lock(redlock_sync_t *s, const void *resource,
                           size_t len, int64_t ttl_ms,
                           const redlock_acquire_opts *opts,
                           redlock_sync_fn fn, void *arg, int *fn_result) {
  redlock_acquire_opts o;
  redlock_sync_lock_t *sl = NULL;
  sync_call call;
  int rc, lost, r;
  if (fn == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_with_lock: fn NULL");
  if (opts != NULL)
    o = *opts;
  else
    memset(&o, 0, sizeof(o));
  o.auto_extend = 1;   /* held for as long as fn runs */
  rc = acquire_one(s, resource, len, ttl_ms, &o, 1, "redlock_sync_with_lock",
                   &sl);
  if (rc != 0)
    return rc;
  r = fn(sl, arg);
  if (fn_result != NULL)
    *fn_result = r;
  lost = redlock_sync_is_lost(sl);
  memset(&call, 0, sizeof(call));
  call.kind = CALL_RELEASE;
  call.slock = sl;
  call.scoped = 1;
  rc = sync_post(s, &call);
  /* A release without a quorum is not an error here: the keys expire by
   * their ttl. Nothing of ours found on a quorum is a loss fn missed. */
  if (lost || rc == REDLOCK_ENOTHELD)
    return redlock__fail(REDLOCK_ELOST,
                         "redlock_sync_with_lock: the lock was lost while "
                         "the function ran");
  return 0;
}

static int lock_call(redlock_sync_lock_t *sl, call_kind kind, int64_t ttl,
                     sync_call *call) {
  if (sl == NULL)
    return redlock__fail(REDLOCK_EINVAL, "lock is NULL");
  memset(call, 0, sizeof(*call));
  call->kind = kind;
  call->slock = sl;
  call->ttl_ms = ttl;
  return sync_post(sl->sync, call);
}

int redlock_sync_extend(redlock_sync_lock_t *sl, int64_t ttl_ms) {
  sync_call call;
  return lock_call(sl, CALL_EXTEND, ttl_ms, &call);
}

int redlock_sync_release(redlock_sync_lock_t *sl) {
  sync_call call;
  return lock_call(sl, CALL_RELEASE, 0, &call);
}

int64_t redlock_sync_validity_ms(redlock_sync_lock_t *sl) {
  sync_call call;
  return lock_call(sl, CALL_VALIDITY, 0, &call) == 0 ? call.value : 0;
}

int redlock_sync_permit(redlock_sync_lock_t *sl) {
  sync_call call;
  return lock_call(sl, CALL_PERMIT, 0, &call) == 0 ? (int)call.value : -1;
}

int redlock_sync_is_lost(redlock_sync_lock_t *sl) {
  sync_call call;
  return lock_call(sl, CALL_IS_LOST, 0, &call) == 0 ? (int)call.value : 0;
}

int redlock_sync_token(redlock_sync_lock_t *sl, char *buf, size_t len) {
  sync_call call;
  if (buf == NULL)
    return redlock__fail(REDLOCK_EINVAL, "buf is NULL");
  if (sl == NULL)
    return redlock__fail(REDLOCK_EINVAL, "lock is NULL");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_TOKEN;
  call.slock = sl;
  call.buf = buf;
  call.buflen = len;
  return sync_post(sl->sync, &call);
}

uint64_t redlock_sync_fence(redlock_sync_lock_t *sl) {
  sync_call call;
  return lock_call(sl, CALL_FENCE, 0, &call) == 0 ? (uint64_t)call.value : 0;
}

unsigned redlock_sync_holds(redlock_sync_lock_t *sl) {
  sync_call call;
  return lock_call(sl, CALL_HOLDS, 0, &call) == 0 ? (unsigned)call.value : 0;
}

/* ---- elections ----------------------------------------------------------- */

int redlock_sync_campaign(redlock_sync_t *s, const void *resource, size_t len,
                          const char *identity,
                          const redlock_election_opts *opts, int wait_ms,
                          redlock_sync_election_t **out) {
  sync_call call;
  int rc;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_campaign: out NULL");
  *out = NULL;
  if (s == NULL || resource == NULL || len == 0 || identity == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_campaign: bad arguments");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_CAMPAIGN;
  call.resource = resource;
  call.len = len;
  call.identity = identity;
  call.eopts = opts;
  call.ttl_ms = wait_ms > 0 ? wait_ms : 0;   /* the wait, here */
  rc = sync_post(s, &call);
  if (rc == 0)
    *out = call.se;
  return rc;
}

int redlock_sync_is_leader(redlock_sync_election_t *se) {
  sync_call call;
  if (se == NULL)
    return 0;
  memset(&call, 0, sizeof(call));
  call.kind = CALL_IS_LEADER;
  call.se = se;
  return sync_post(se->sync, &call) == 0 ? (int)call.value : 0;
}

int redlock_sync_resign(redlock_sync_election_t *se) {
  sync_call call;
  if (se == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_resign: NULL");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_RESIGN;
  call.se = se;
  return sync_post(se->sync, &call);
}

int redlock_sync_cancel(redlock_sync_t *s, const void *lost_arg) {
  sync_call call;
  int rc;
  if (s == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_cancel: NULL");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_CANCEL;
  call.cancel_arg = lost_arg;
  rc = sync_post(s, &call);
  return rc != 0 ? rc : (int)call.value;
}

int redlock_sync_stats(redlock_sync_t *s, redlock_stats *out) {
  sync_call call;
  if (s == NULL || out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_stats: NULL");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_STATS;
  call.buf = (char *)out;
  return sync_post(s, &call);
}

int redlock_sync_leader(redlock_sync_t *s, const void *resource, size_t len,
                        char *buf, size_t buflen, int64_t *ttl_ms) {
  sync_call call;
  int rc;
  if (s == NULL || resource == NULL || len == 0)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_leader: bad "
                         "arguments");
  memset(&call, 0, sizeof(call));
  call.kind = CALL_LEADER;
  call.resource = resource;
  call.len = len;
  call.buf = buf;
  call.buflen = buflen;
  if (buf != NULL && buflen > 0)
    buf[0] = '\0';
  rc = sync_post(s, &call);
  if (ttl_ms != NULL)
    *ttl_ms = rc == 0 ? call.value : 0;
  return rc;
}

static int sem_admin(redlock_sync_t *s, const char *what,
                     const void *resource, size_t len, int op,
                     unsigned limit, unsigned permit,
                     redlock_semaphore_info **out) {
  sync_call call;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (s == NULL || resource == NULL || len == 0)
    return redlock__fail(REDLOCK_EINVAL, "%s: bad arguments", what);
  memset(&call, 0, sizeof(call));
  call.kind = CALL_SEM_ADMIN;
  call.sem_op = op;
  call.resource = resource;
  call.len = len;
  call.limit = limit;
  call.permit = permit;
  rc = sync_post(s, &call);
  if (out != NULL)
    *out = call.info;
  else
    redlock__free(call.info);
  return rc;
}

int redlock_sync_semaphore_inspect(redlock_sync_t *s, const void *resource,
                                   size_t len, unsigned limit,
                                   redlock_semaphore_info **out) {
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_sync_semaphore_inspect: out is NULL");
  return sem_admin(s, "redlock_sync_semaphore_inspect", resource, len,
                   SEM_INSPECT, limit, 0, out);
}

int redlock_sync_semaphore_set_limit(redlock_sync_t *s, const void *resource,
                                     size_t len, unsigned limit) {
  return sem_admin(s, "redlock_sync_semaphore_set_limit", resource, len,
                   SEM_SET_LIMIT, limit, 0, NULL);
}

int redlock_sync_semaphore_force_release(redlock_sync_t *s,
                                         const void *resource, size_t len,
                                         unsigned limit, unsigned permit) {
  return sem_admin(s, "redlock_sync_semaphore_force_release", resource, len,
                   SEM_FORCE, limit, permit, NULL);
}

static int lock_admin(redlock_sync_t *s, const char *what,
                      const void *resource, size_t len, int op,
                      redlock_result **out) {
  sync_call call;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (s == NULL || resource == NULL || len == 0)
    return redlock__fail(REDLOCK_EINVAL, "%s: bad arguments", what);
  memset(&call, 0, sizeof(call));
  call.kind = CALL_LOCK_ADMIN;
  call.sem_op = op;
  call.resource = resource;
  call.len = len;
  rc = sync_post(s, &call);
  if (out != NULL)
    *out = call.inspected;
  else
    redlock__free(call.inspected);
  return rc;
}

int redlock_sync_inspect(redlock_sync_t *s, const void *resource, size_t len,
                         redlock_result **out) {
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_inspect: out is NULL");
  return lock_admin(s, "redlock_sync_inspect", resource, len, LOCK_INSPECT,
                    out);
}

int redlock_sync_force_release(redlock_sync_t *s, const void *resource,
                               size_t len) {
  return lock_admin(s, "redlock_sync_force_release", resource, len,
                    LOCK_FORCE, NULL);
}

void redlock_sync_free(void *p) {
  redlock__free(p);
}

/* ---- events instead of callbacks ------------------------------------------
 * One process-wide queue: the callbacks below run on any handle's loop
 * thread and only append (never wait for the caller's code, which is why
 * they exist); redlock_sync_next_event takes from the head. A node per
 * event, malloc'd by the producer; when that fails the event is counted
 * in `dropped` and the next reader gets a DROPPED event first. */

typedef struct ev_node {
  redlock__queue link;
  redlock_sync_event ev;
} ev_node;

static uv_once_t ev_once = UV_ONCE_INIT;
static uv_mutex_t ev_mutex;
static uv_cond_t ev_cond;
static redlock__queue ev_queue;   /* under ev_mutex */
static unsigned ev_dropped;       /* under ev_mutex */

/* fork(): a loop thread of the parent may hold ev_mutex at that moment,
 * and it is not in the child: the mutex is taken around the fork, and the
 * child starts with a fresh one (the parent's events stay queued: their
 * args are the parent's, which the child's copies still name). */
static void ev_prefork(void) {
  uv_mutex_lock(&ev_mutex);
}

static void ev_postfork_parent(void) {
  uv_mutex_unlock(&ev_mutex);
}

static void ev_postfork_child(void) {
  if (uv_mutex_init(&ev_mutex) != 0 || uv_cond_init(&ev_cond) != 0)
    abort();
}

static void ev_init(void) {
  if (uv_mutex_init(&ev_mutex) != 0 || uv_cond_init(&ev_cond) != 0)
    abort();   /* no way to report it, and no queue to run without */
  redlock__queue_init(&ev_queue);
  if (pthread_atfork(ev_prefork, ev_postfork_parent, ev_postfork_child) != 0)
    abort();
}

static void ev_push(int kind, int event, int reason, void *arg,
                    const char *text) {
  ev_node *n = redlock__calloc(1, sizeof(*n));
  uv_once(&ev_once, ev_init);
  if (n != NULL) {
    n->ev.kind = kind;
    n->ev.event = event;
    n->ev.reason = reason;
    n->ev.arg = arg;
    if (text != NULL)
      redlock__strlcpy(n->ev.text, text, sizeof(n->ev.text));
  }
  uv_mutex_lock(&ev_mutex);
  if (n != NULL)
    redlock__queue_insert_tail(&ev_queue, &n->link);
  else
    ev_dropped++;
  uv_cond_signal(&ev_cond);
  uv_mutex_unlock(&ev_mutex);
}

void redlock_sync_queue_lost(redlock_lock_t *lock, int reason, void *arg) {
  (void)lock;
  ev_push(REDLOCK_SYNC_EV_LOST, 0, reason, arg, NULL);
}

void redlock_sync_queue_election(redlock_election_t *e,
                                 redlock_election_event ev, int reason,
                                 void *arg) {
  (void)e;
  ev_push(REDLOCK_SYNC_EV_ELECTION, (int)ev, reason, arg, NULL);
}

void redlock_sync_queue_warning(redlock_client_t *client, const char *msg,
                                void *arg) {
  (void)client;
  ev_push(REDLOCK_SYNC_EV_WARNING, 0, 0, arg, msg != NULL ? msg : "");
}

int redlock_sync_next_event(redlock_sync_event *out, int timeout_ms) {
  uint64_t end = 0;
  int rc = 0;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_sync_next_event: NULL");
  uv_once(&ev_once, ev_init);
  if (timeout_ms >= 0)   /* the monotonic clock (uv_cond_timedwait's too) */
    end = uv_hrtime() + (uint64_t)timeout_ms * 1000000u;
  uv_mutex_lock(&ev_mutex);
  while (ev_dropped == 0 && redlock__queue_empty(&ev_queue)) {
    if (timeout_ms < 0) {
      uv_cond_wait(&ev_cond, &ev_mutex);
      continue;
    }
    {
      uint64_t now = uv_hrtime();
      if (now >= end || uv_cond_timedwait(&ev_cond, &ev_mutex,
                                          end - now) == UV_ETIMEDOUT) {
        if (ev_dropped == 0 && redlock__queue_empty(&ev_queue))
          rc = REDLOCK_ETIMEDOUT;
        break;
      }
    }
  }
  if (rc == 0 && ev_dropped > 0) {
    memset(out, 0, sizeof(*out));
    out->kind = REDLOCK_SYNC_EV_DROPPED;
    out->reason = ev_dropped > INT32_MAX ? INT32_MAX : (int)ev_dropped;
    ev_dropped = 0;
    uv_mutex_unlock(&ev_mutex);
    return 0;
  }
  if (rc == 0) {
    ev_node *n = REDLOCK__CONTAINER_OF(ev_queue.next, ev_node, link);
    redlock__queue_remove(&n->link);
    uv_mutex_unlock(&ev_mutex);
    *out = n->ev;
    redlock__free(n);
    return 0;
  }
  uv_mutex_unlock(&ev_mutex);
  return redlock__fail(rc, "no event within %d ms", timeout_ms);
}
