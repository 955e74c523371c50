/* command.h: what a lock handle's rounds send (command.c). */
#ifndef REDLOCK_COMMAND_H
#define REDLOCK_COMMAND_H

#include "handle.h"

/* How long a read-write waiter's place lives on the masters after each
 * attempt (renewed by the next one): 0 for a single attempt. */
int64_t redlock__rw_lease_ms(const redlock_lock_t *l);
/* Own stale keys (state.h): l gives up its current token; and the
 * given-up tokens of l's key still alive (at most REDLOCK__STALE_PER_KEY,
 * newest first; plain locks only). */
void redlock__stale_note(redlock_lock_t *l);
unsigned redlock__stale_tokens(const redlock_lock_t *l,
                               const char **tokens);
/* The owner table of a lock handle's rounds. */
extern const redlock__round_owner redlock__lock_round_owner;
/* The keys of l's command `cmd`, grouped by slot: how many parts. */
unsigned redlock__lock_groups(const redlock_lock_t *l, redlock__cmd cmd,
                              redlock__key_groups *g);
/* Fire and forget to master i, one that routes by slot (split over
 * slots). */
void redlock__lock_slot_send(redlock_lock_t *l, unsigned i,
                             redlock__cmd cmd, int64_t ttl_ms,
                             unsigned flags);

/* Encodes the command of `cmd` for lock l: EVALSHA, or EVAL with
 * REDLOCK__ARGV_EVAL (round.h says the flags). */
int redlock__lock_argv(const redlock_lock_t *l, redlock__cmd cmd,
                       int64_t ttl_ms, unsigned flags, const char **argv,
                       size_t *lens, char nums[3][24]);
/* The same for a part of a master that routes by slot (round.h). */
int redlock__lock_argv_sub(const redlock_lock_t *l, redlock__cmd cmd,
                           int64_t ttl_ms, unsigned flags,
                           const redlock__argv_sub *sub, const char **argv,
                           size_t *lens, char nums[3][24]);

#endif
