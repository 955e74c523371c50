/* scripts.h: every command the library sends for a lock, in one table:
 * the Lua text and its SHA-1 (EVALSHA name), and how a reply to it is
 * classified into a vote. Pure apart from the one-time SHA computation. */
#ifndef REDLOCK_SCRIPTS_H
#define REDLOCK_SCRIPTS_H

#include <stddef.h>
#include <stdint.h>

#include "redlock.h"
#include "reply.h"

typedef enum {
  REDLOCK__CMD_SET_NX = 0,     /* SET key token NX PX ttl (no script) */
  REDLOCK__CMD_RELEASE,        /* compare-and-delete, publish */
  REDLOCK__CMD_EXTEND,         /* compare-and-pexpire (heal: set) */
  REDLOCK__CMD_INSPECT,        /* {value or "", pttl} */
  REDLOCK__CMD_FENCED_ACQUIRE, /* SET NX PX + INCR counter */
  REDLOCK__CMD_FENCE,          /* counter = max(counter, T) where ours */
  REDLOCK__CMD_MULTI_ACQUIRE,  /* K keys, all or none */
  REDLOCK__CMD_MULTI_RELEASE,
  REDLOCK__CMD_MULTI_EXTEND,
  REDLOCK__CMD_RW_ACQUIRE,     /* read-write lock hash */
  REDLOCK__CMD_RW_EXTEND,
  REDLOCK__CMD_RW_RELEASE,
  REDLOCK__CMD_RW_GIVEUP,      /* a waiting writer withdraws its intent */
  REDLOCK__CMD_MAXTTL_RAISE,   /* record the deployment's longest ttl */
  REDLOCK__CMD_MAXTTL_GET,     /* GET of that record (no script) */
  REDLOCK__CMD_PTTL,           /* PTTL key: when a refusal ends */
  REDLOCK__CMD_MULTI_PTTL,     /* the longest PTTL of K keys */
  REDLOCK__CMD_BATCH_EXTEND,   /* many plain extends, one result each */
  REDLOCK__CMD_TAKEOVER,       /* SET NX, or over one of our own given-up
                                  tokens (stale keys of this client) */
  REDLOCK__CMD_CLOCK_NOTE,     /* the clock record of a master (guard.c) */
  REDLOCK__CMD_MAXTTL_SET,     /* an operator sets the ttl record */
  REDLOCK__CMD_FORCE_RELEASE,  /* an operator deletes keys, any token */
  REDLOCK__CMD_MARK_FORGET,    /* drops a mark of a broken durability
                                  declaration (guard.c) */
  REDLOCK__CMD_SEM_ACQUIRE,    /* a semaphore's permit: the limit record
                                  checked, SET NX PX; refused: free ones */
  REDLOCK__CMD_SEM_RELEASE,    /* compare-and-delete a permit, publish on
                                  the semaphore's channel */
  REDLOCK__CMD_SEM_INSPECT,    /* the limit and every held permit */
  REDLOCK__CMD_SEM_LIMIT,      /* sets the limit record */
  REDLOCK__CMD_SEM_FORCE,      /* an operator deletes one permit */
  REDLOCK__N_CMDS
} redlock__cmd;

typedef struct redlock__script {
  const char *text;
  size_t len;
  char sha[41];
} redlock__script;

/* Computes the SHA-1 names once per process (thread-safe). */
void redlock__scripts_init(void);
/* The script of `cmd`, or NULL for a plain command. */
const redlock__script *redlock__script_of(redlock__cmd cmd);
/* Every script text, for SCRIPT LOAD at the handshake. */
unsigned redlock__scripts_all(const char *const **texts,
                              const size_t **lens);

/* A reply classified for the layer above. */
typedef struct redlock__vote {
  redlock_vote_t vote;
  int error;              /* 0, or REDLOCK_ESERVER / EPROTO with errstr */
  const char *errstr;     /* "" with a vote; points into the reply */
  int64_t value;          /* fence counter, pttl, recorded ttl */
  const char *holder;     /* INSPECT: the key's value ("" if free) */
  size_t holder_len;
  int noscript;           /* the server does not know the script */
  int rw;                 /* INSPECT: a read-write lock of the name exists */
} redlock__vote;

/* Pure: turns a reply to `cmd` into a vote. Never fails. */
void redlock__classify(redlock__cmd cmd, const redlock__reply *r,
                       redlock__vote *out);

#endif
