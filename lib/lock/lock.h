/* lock.h: lock handles and their rounds (lock.c, round.c, acquire.c,
 * watchdog.c). See lock.c for the state machine and its invariants. */
#ifndef REDLOCK_LOCK_H
#define REDLOCK_LOCK_H

#include <uv.h>

#include "batch.h"
#include "state.h"
#include "command.h"
#include "common.h"
#include "handle.h"
#include "round.h"
#include "scripts.h"

/* ---- lock.c -------------------------------------------------------------- */

void redlock__lock_set_state(redlock_lock_t *l, redlock__lock_state s);
/* The handle's timer (retry delay, deferred callback), on the client's
 * timer queue: its mode (timer_mode) runs after ms. */
void redlock__lock_timer(redlock_lock_t *l, int64_t ms);
void redlock__lock_timer_stop(redlock_lock_t *l);
/* An acquisition's wait ends in `ms` whatever it waits for (ETIMEDOUT);
 * stopped when the operation completes. */
void redlock__lock_wait_end(redlock_lock_t *l, int64_t ms);
/* What the layers above a handle do when one of lock.c's operations needs
 * them: set by acquire.c when an acquisition starts (NULL before, when
 * none of it can be pending). Calls go down, these come back up. */
typedef struct redlock__lock_above {
  void (*abort)(redlock_lock_t *l);     /* an acquisition in flight ends */
  void (*unwait)(redlock_lock_t *l);    /* its wake-up subscriptions go */
  void (*after_user_extend)(redlock_lock_t *l, int status);   /* the
                                           watchdog keeps in step */
} redlock__lock_above;
/* Stops the renewals: the watchdog's timer entry, and its round if it
 * owns the main round. */
void redlock__lock_renewal_stop(redlock_lock_t *l);
/* The lock is lost: state LOST, and on_lost (auto-extended locks) fires,
 * at most once per acquisition. */
void redlock__lock_declare_lost(redlock_lock_t *l, int reason);
void redlock__lock_ref(redlock_lock_t *l);
void redlock__lock_unref(redlock_lock_t *l);
/* Ends the user's operation with l->status: the callback runs now, or on
 * the next loop turn when inside a public call. Detaches the round. */
void redlock__lock_complete(redlock_lock_t *l, int status);
/* Sends a release of the current token to every master (no answer
 * awaited; sent again after a reconnect if it fails): a failed attempt,
 * a freed handle, a closing client. Not where r (if given) said NO (the
 * key is someone else's there). flags: REDLOCK__ARGV_QUIET, no release
 * message (an attempt that never held the lock); REDLOCK__ARGV_PUTBACK,
 * a failed attempt of a read-write waiter. */
void redlock__lock_cleanup(redlock_lock_t *l, const redlock__round *r,
                           unsigned flags);
/* A waiter on a read-write lock is done: its place (a writer's intent, a
 * reader's queue entry or entitlement) goes; at the end of the
 * acquisition, never between attempts. With r (a granting round): only
 * where r's vote was not YES (those masters dropped it when they said
 * yes; a master that refused, or had not answered, may keep it for the
 * lease and hold the other side back). flags: REDLOCK__ARGV_QUIET, no
 * message to waiters; REDLOCK__ARGV_GRANTED, the waiter got the lock. */
void redlock__lock_withdraw(redlock_lock_t *l, const redlock__round *r,
                            unsigned flags);
/* Room for a token of len bytes in l->token: 0 or ENOMEM. */
int redlock__lock_token_room(redlock_lock_t *l, size_t len);
/* Makes l->fence_key (and its cluster name) if needed: 0 or ENOMEM. */
int redlock__lock_fence_key(redlock_lock_t *l);
/* Makes l->rw_names and their cluster names if needed: 0 or ENOMEM. */
int redlock__lock_rw_names(redlock_lock_t *l);
/* Validity deadline of a round of `ttl_ms` that started at `start`. */
redlock__ns redlock__lock_deadline(const redlock_lock_t *l,
                                   redlock__ns start, int64_t ttl_ms);
/* Starts the main round of `cmd` for its owner (l->owner). The round may decide
 * inside this call (every master down). */
redlock__round *redlock__lock_round(redlock_lock_t *l, redlock__cmd cmd,
                                    int64_t ttl_ms, redlock__round_fn fn,
                                    const redlock__round *only_yes);
/* Lets go of the main round (its late replies are only consumed). */
void redlock__lock_drop_round(redlock_lock_t *l);
/* Checks of a public call: 0 or an error with a message. */
int redlock__lock_usable(const redlock_lock_t *l, const char *fn);
int redlock__check_ttl(const redlock_lock_t *l, int64_t ttl_ms,
                       const char *fn);
/* Sets the ttl record on every master (redlock_client_set_ttl_record): a
 * round of its own, as inspect's. */
int redlock__lock_set_record(redlock_lock_t *l, int64_t ttl_ms,
                             redlock_lock_cb cb, void *arg);
/* A re-entrant acquire with a longer ttl: one extend round, delivered as
 * the acquire's outcome (one more hold on success). */
void redlock__lock_reenter_extend(redlock_lock_t *l, int64_t ttl_ms);

/* The event hook, if set (stats.c): one finished operation. */
void redlock__lock_event(redlock_lock_t *l, redlock_event_kind kind,
                         const redlock_result *res);

/* A round of its own (never the main one) that waits for every master:
 * inspect, force release, the ttl record's and a semaphore's limit's
 * setting. cb gets the outcome (op INSPECT meanwhile). 0 or ENOMEM. */
int redlock__lock_side_round(redlock_lock_t *l, redlock__cmd cmd,
                             int64_t value, redlock_lock_cb cb, void *arg);

/* ---- semaphore.c --------------------------------------------------------- */
/* Before an attempt: the permit it asks for (the handle's key). */
void redlock__sem_pick(redlock_lock_t *l);
/* After a refused attempt: 1 when some permit was listed free by a quorum
 * of masters (the next attempt may come at once). */
int redlock__sem_free_quorum(redlock_lock_t *l);
/* The handle's on_reply (handle.h). */
void redlock__sem_on_reply(redlock_lock_t *l, redlock__cmd cmd, unsigned i,
                           const redlock__reply *reply);

/* ---- acquire.c ----------------------------------------------------------- */
/* The next attempt (first, or from the retry timer). */
void redlock__acquire_attempt(redlock_lock_t *l);
/* A waiting acquisition stops listening for releases. */
void redlock__acquire_unwait(redlock_lock_t *l);
/* Client close: an acquisition in flight or between attempts ends. */
void redlock__acquire_abort(redlock_lock_t *l);
/* The PTTL round's grace timer fired (lock.c's timer). */
void redlock__acquire_pttl_grace(redlock_lock_t *l);

/* ---- watchdog.c ---------------------------------------------------------- */
/* Arms the next renewal (after a grant or a successful extension). */
void redlock__wd_arm_renewal(redlock_lock_t *l);
/* The user's extend ended with status: keep the watchdog in step. */
void redlock__wd_after_user_extend(redlock_lock_t *l, int status);
void redlock__wd_decided(redlock_lock_t *l, const redlock__wd_outcome *o,
                         redlock__ns now);
/* The client's timer queue's flush (a renewal batch goes out): client.c
 * wires it in. */
void redlock__wd_flush(redlock__tq *tq);

#endif
