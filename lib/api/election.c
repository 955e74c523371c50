/* election.c: leader election on a lock (redlock.h, "Leader election").
 *
 * Owns: an election handle's states and its callbacks. It is a plain lock
 * handle driven through the public lock API plus two lock fields: the
 * token suffix (".<identity>", so the value names the leader) and the
 * step-down margin of the auto-extension (watchdog.c).
 *
 *   IDLE --campaign--> CAMPAIGNING --granted--> LEADER
 *     ^                  ^     |                  |  lost (on_lost):
 *     |                  |     |                  |  DEPOSED(reason),
 *     |                  +-----+------------------+  release what is left,
 *     |    resign/free: cancel the acquisition,      campaign again
 *     +--- or release (DEPOSED(0))                   (unless once)
 *
 * A DEPOSED callback that calls redlock_election_hold keeps what is left
 * of the lost lock: HOLDING, no release and no campaign until
 * redlock_election_stepped_down (the application's work has stopped:
 * release, campaign again) or resign/free (release). The keys protect the
 * work while it stops: a standby takes over only when they expire or the
 * release comes.
 *
 * A campaign is an acquisition with no retry limit, wake-up on, and the
 * takeover at expiry of acquire.c. The leadership heals: an extension
 * re-creates the key on a master that lost it (restarted empty), so empty
 * restarts of one master after another do not depose a leader whose
 * validity runs (docs/DESIGN.md, Leader election: why that needs no guard
 * window). Callbacks run from the loop, never from inside a call of this
 * API. */
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "lock.h"

#define IDENTITY_MAX 80
#define DEF_TTL_MS 10000

typedef enum { E_IDLE = 0, E_CAMPAIGNING, E_LEADER, E_RELEASING,
               E_HOLDING } e_state;

struct redlock_election_s {
  redlock__member member;       /* client close frees the handle */
  redlock__timer closer;        /* memory goes in its close callback: the
                                   client's member list stays walkable */
  redlock_client_t *client;
  redlock_lock_t *lock;
  redlock_election_opts opts;
  e_state state;
  int campaign_after_release;   /* lost: campaign again once released */
  int resigned;                 /* DEPOSED(0) once the release is done */
  int freeing;                  /* free after the release completes */
  int in_deposed;               /* inside on_lost's DEPOSED callback */
  int hold;                     /* ... which asked to keep the lock */
  char suffix[IDENTITY_MAX + 2];   /* ".<identity>" */
};

static void campaign(redlock_election_t *e);

static void notify(redlock_election_t *e, redlock_election_event ev,
                   int reason) {
  if (e->opts.on_change != NULL && !e->freeing)
    e->opts.on_change(e, ev, reason, e->opts.arg);
}

static void on_closer_closed(redlock__timer *t) {
  redlock_election_t *e = t->data;
  redlock_client_t *c = e->client;
  redlock__queue_remove(&e->member.link);
  redlock__free(e);
  redlock__client_leave(c);
}

static void finish_free(redlock_election_t *e) {
  if (redlock__timer_closing(&e->closer))
    return;   /* already going */
  redlock_lock_free(e->lock);   /* EINVAL if the client's close took it */
  redlock__timer_close(&e->closer, on_closer_closed);
}

/* The client closes: its lock handle is cancelled and freed by the close;
 * this handle goes with it (after the lock's last callback). */
static void on_member_abort(redlock__member *m) {
  redlock_election_t *e = REDLOCK__CONTAINER_OF(m, redlock_election_t,
                                                member);
  /* Freed already (redlock_election_free, finish_free): its lock may be
   * reaped; the handle stays a member only until its closer's callback.
   * test-fault-close-campaign: a client closed right after freeing an
   * idle election read the reaped lock (ASan: heap-use-after-free). */
  if (redlock__timer_closing(&e->closer))
    return;
  e->freeing = 1;
  if (e->state == E_RELEASING || e->lock->op != REDLOCK__OP_NONE)
    return;
  finish_free(e);
}

static void on_released(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  redlock_election_t *e = arg;
  (void)l;
  (void)status;
  (void)res;
  e->state = E_IDLE;
  if (e->freeing) {
    finish_free(e);
    return;
  }
  if (e->resigned) {
    e->resigned = 0;
    notify(e, REDLOCK_DEPOSED, 0);
    return;
  }
  if (e->campaign_after_release) {
    e->campaign_after_release = 0;
    campaign(e);
  }
}

/* Lost while leading: step down at once, clean up, campaign again. */
static void on_lost(redlock_lock_t *l, int reason, void *arg) {
  redlock_election_t *e = arg;
  (void)l;
  if (e->state != E_LEADER)
    return;
  e->state = E_RELEASING;
  e->campaign_after_release = !e->opts.once;
  e->hold = 0;
  e->in_deposed = 1;
  notify(e, REDLOCK_DEPOSED, reason);
  e->in_deposed = 0;
  if (e->state != E_RELEASING)
    return;   /* the callback resigned or freed */
  if (e->hold && !e->freeing) {
    /* The work is still stopping: the lock protects it until it has
     * (redlock_election_stepped_down), or until the keys expire. */
    e->state = E_HOLDING;
    return;
  }
  /* What may be left on some masters goes (and standbys hear it). */
  if (redlock_lock_release(e->lock, on_released, e) != 0)
    on_released(e->lock, REDLOCK_ENOTHELD, NULL, e);
}

/* Release what is left of a held lost lock, then campaign again (unless
 * once or resigned). */
static void release_held(redlock_election_t *e) {
  e->state = E_RELEASING;
  if (redlock_lock_release(e->lock, on_released, e) != 0)
    on_released(e->lock, REDLOCK_ENOTHELD, NULL, e);
}

static void on_acquired(redlock_lock_t *l, int status,
                        const redlock_result *res, void *arg) {
  redlock_election_t *e = arg;
  (void)l;
  (void)res;
  if (e->freeing && status == REDLOCK_ECANCELED) {
    finish_free(e);   /* freed while campaigning: now the handle can go */
    return;
  }
  if (e->state != E_CAMPAIGNING)
    return;
  if (status == 0) {
    e->state = E_LEADER;
    notify(e, REDLOCK_ELECTED, 0);
    return;
  }
  e->state = E_IDLE;
  if (status != REDLOCK_ECANCELED && !e->freeing)
    campaign(e);   /* cannot happen with no retry limit; be safe */
}

static void campaign(redlock_election_t *e) {
  redlock_acquire_opts o;
  memset(&o, 0, sizeof(o));
  o.retry_count = 0x7fffffff;     /* never gives up */
  o.retry_delay_ms = e->opts.retry_delay_ms;
  o.auto_extend = 1;
  o.heal = 1;                     /* an empty restart does not depose */
  o.wake = 1;
  o.on_lost = on_lost;
  o.lost_arg = e;
  o.lost_margin_ms = (int)e->lock->step_down_ms;   /* the step-down point */
  e->state = E_CAMPAIGNING;
  if (redlock_lock_acquire(e->lock, e->opts.ttl_ms, &o, on_acquired, e) !=
      0)
    e->state = E_IDLE;
}

int redlock_election_new(redlock_client_t *c, const void *resource,
                         size_t len, const char *identity,
                         const redlock_election_opts *opts,
                         redlock_election_t **out) {
  redlock_election_t *e;
  size_t idlen;
  int64_t margin;
  int rc;
  if (out == NULL)
    return redlock__fail(REDLOCK_EINVAL, "redlock_election_new: out NULL");
  *out = NULL;
  if (c == NULL || identity == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_new: client or identity NULL");
  idlen = strlen(identity);
  if (idlen == 0 || idlen > IDENTITY_MAX)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_new: identity must be 1..%d "
                         "bytes", IDENTITY_MAX);
  e = redlock__calloc(1, sizeof(*e));
  if (e == NULL)
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  if (opts != NULL)
    e->opts = *opts;
  if (e->opts.ttl_ms == 0)
    e->opts.ttl_ms = DEF_TTL_MS;
  if (e->opts.ttl_ms < 0 || e->opts.ttl_ms > REDLOCK_MAX_TTL_MS ||
      e->opts.step_down_ms < 0 || e->opts.retry_delay_ms < 0) {
    redlock__free(e);
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_new: ttl, step_down_ms or "
                         "retry_delay_ms out of range");
  }
  margin = e->opts.step_down_ms;
  if (margin == 0) {
    margin = e->opts.ttl_ms / 10;
    if (margin < 2 * c->command_timeout_ms)
      margin = 2 * c->command_timeout_ms;
  }
  if (margin >= e->opts.ttl_ms / 2) {
    redlock__free(e);
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_new: step-down margin %lld ms "
                         "must be under half the ttl (%lld ms)",
                         (long long)margin, (long long)e->opts.ttl_ms);
  }
  rc = redlock_lock_new(c, resource, len, &e->lock);
  if (rc != 0) {
    redlock__free(e);
    return rc;
  }
  e->client = c;
  e->suffix[0] = '.';
  memcpy(e->suffix + 1, identity, idlen + 1);
  e->lock->token_suffix = e->suffix;
  e->lock->token_suffix_len = idlen + 1;
  e->lock->step_down_ms = margin;
  e->member.abort = on_member_abort;
  redlock__timer_init(c->sys, &e->closer);
  e->closer.data = e;
  redlock__client_join(c, &e->member);
  *out = e;
  return 0;
}

int redlock_election_campaign(redlock_election_t *e) {
  if (e == NULL || e->freeing)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_campaign: election NULL or freed");
  if (e->state != E_IDLE)
    return redlock__fail(REDLOCK_EBUSY,
                         "redlock_election_campaign: already campaigning or "
                         "leading");
  e->client->in_api++;
  campaign(e);
  e->client->in_api--;
  if (e->state == E_IDLE)
    return redlock__fail(REDLOCK_ECANCELED,
                         "redlock_election_campaign: %s",
                         redlock_last_error());
  return 0;
}

int redlock_election_resign(redlock_election_t *e) {
  if (e == NULL || e->freeing)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_resign: election NULL or freed");
  e->campaign_after_release = 0;
  switch (e->state) {
    case E_IDLE:
    case E_RELEASING:
      return 0;
    case E_HOLDING:
      release_held(e);   /* deposed already: no DEPOSED(0) */
      return 0;
    case E_CAMPAIGNING:
      e->state = E_IDLE;
      redlock_lock_cancel(e->lock);   /* its callback finds E_IDLE */
      return 0;
    case E_LEADER:
      e->state = E_RELEASING;
      e->resigned = 1;   /* DEPOSED(0) from the release's callback */
      if (redlock_lock_release(e->lock, on_released, e) != 0) {
        e->state = E_IDLE;
        e->resigned = 0;
      }
      return 0;
  }
  return 0;
}

int redlock_election_hold(redlock_election_t *e) {
  if (e == NULL || e->freeing || !e->in_deposed)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_hold: only from on_change("
                         "DEPOSED) after a loss");
  e->hold = 1;
  return 0;
}

int redlock_election_stepped_down(redlock_election_t *e) {
  if (e == NULL || e->freeing)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_stepped_down: election NULL or "
                         "freed");
  if (e->state != E_HOLDING)
    return 0;
  e->client->in_api++;
  release_held(e);
  e->client->in_api--;
  return 0;
}

int redlock_election_is_leader(const redlock_election_t *e) {
  return e != NULL && e->state == E_LEADER && redlock_lock_is_held(e->lock);
}

redlock_lock_t *redlock_election_lock(const redlock_election_t *e) {
  return e != NULL ? e->lock : NULL;
}

int redlock_election_free(redlock_election_t *e) {
  if (e == NULL || e->freeing)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_free: election NULL or freed");
  redlock_election_resign(e);
  e->freeing = 1;
  if (e->state == E_RELEASING || e->lock->op != REDLOCK__OP_NONE)
    return 0;   /* freed from the release's or the cancel's callback */
  finish_free(e);
  return 0;
}

/* ---- who leads ----------------------------------------------------------- */

typedef struct leader_q {
  redlock_leader_cb cb;
  void *arg;
} leader_q;

static void on_leader_inspected(redlock_lock_t *l, int status,
                                const redlock_result *res, void *arg) {
  leader_q q = *(leader_q *)arg;
  redlock_client_t *c = redlock_lock_client(l);
  char identity[REDLOCK__ERRSTR_LEN];
  int64_t ttl = 0;
  unsigned i, j;
  redlock__free(arg);
  identity[0] = '\0';
  if (status == 0) {
    /* The value a quorum holds, and when fewer than a quorum will. */
    for (i = 0; i < res->n_nodes && identity[0] == '\0'; i++) {
      const char *v = res->nodes[i].holder;
      int64_t pttls[REDLOCK_MAX_SERVERS];
      unsigned k = 0, a, b;
      if (res->nodes[i].vote != REDLOCK_VOTE_YES)
        continue;
      for (j = 0; j < res->n_nodes; j++)
        if (res->nodes[j].vote == REDLOCK_VOTE_YES &&
            strcmp(res->nodes[j].holder, v) == 0)
          pttls[k++] = res->nodes[j].pttl_ms;
      if (k < res->quorum)
        continue;
      for (a = 1; a < k; a++)   /* descending */
        for (b = a; b > 0 && pttls[b - 1] < pttls[b]; b--) {
          int64_t t = pttls[b];
          pttls[b] = pttls[b - 1];
          pttls[b - 1] = t;
        }
      ttl = pttls[res->quorum - 1];
      if (redlock_token_holder(v) != NULL)
        redlock__strlcpy(identity, redlock_token_holder(v),
                         sizeof(identity));
      if (identity[0] == '\0')
        ttl = 0;   /* a lock of another kind: no leader */
    }
  }
  redlock_lock_free(l);
  if (q.cb != NULL)
    q.cb(c, status, identity, ttl, q.arg);
}

int redlock_election_leader(redlock_client_t *c, const void *resource,
                            size_t len, redlock_leader_cb cb, void *arg) {
  redlock_lock_t *l;
  leader_q *q;
  int rc;
  if (cb == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_election_leader: callback is NULL");
  rc = redlock_lock_new(c, resource, len, &l);
  if (rc != 0)
    return rc;
  q = redlock__malloc(sizeof(*q));
  if (q == NULL) {
    redlock_lock_free(l);
    return redlock__fail(REDLOCK_ENOMEM, "out of memory");
  }
  q->cb = cb;
  q->arg = arg;
  rc = redlock_lock_inspect(l, on_leader_inspected, q);
  if (rc != 0) {
    redlock__free(q);
    redlock_lock_free(l);
  }
  return rc;
}
