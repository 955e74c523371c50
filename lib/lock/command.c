/* command.c: what a lock handle's rounds send: each command's arguments
 * for every master, or for one part of a master that routes by slot
 * (DESIGN, Masters made of several nodes), and the handle's side of its
 * rounds (redlock__round_owner: round.c asks it, never the handle).
 *
 * Owns: the argument lists of every command (scripts.c has the scripts),
 * the keys grouped by slot, the releases and giveups sent to a master
 * that routes by slot. Does not own: sending, votes, decisions (round.c);
 * what a decision means (lock.c, acquire.c, watchdog.c). */
#include <stdio.h>
#include <string.h>

#include "command.h"

/* ---- the keys by slot ---------------------------------------------------- */

unsigned redlock__lock_groups(const redlock_lock_t *l, redlock__cmd cmd,
                              redlock__key_groups *g) {
  const char *in[3 * REDLOCK_MAX_RESOURCES];
  size_t in_len[3 * REDLOCK_MAX_RESOURCES];
  unsigned in_slot[3 * REDLOCK_MAX_RESOURCES];
  uint8_t used[3 * REDLOCK_MAX_RESOURCES];
  unsigned n = 0, k, j, out = 0;
  for (k = 0; k < l->nkeys; k++) {
    in[n] = l->keys[k];
    in_len[n++] = l->keylens[k];
  }
  if (cmd == REDLOCK__CMD_FORCE_RELEASE)
    for (k = 0; k < l->nkeys; k++) {
      /* The hash's name on a cluster (the key's slot), and the one 0.3
       * used there (the plain masters' name), unless they are one. */
      in[n] = l->rw_names_cl[k];
      in_len[n++] = l->rw_name_cl_lens[k];
      if (l->rw_name_lens[k] == l->rw_name_cl_lens[k] &&
          memcmp(l->rw_names[k], l->rw_names_cl[k], l->rw_name_lens[k]) == 0)
        continue;
      in[n] = l->rw_names[k];
      in_len[n++] = l->rw_name_lens[k];
    }
  for (k = 0; k < n; k++) {
    in_slot[k] = redlock__key_slot(in[k], in_len[k]);
    used[k] = 0;
  }
  g->n = 0;
  for (k = 0; k < n; k++) {
    if (used[k])
      continue;
    g->first[g->n++] = out;
    for (j = k; j < n; j++)
      if (!used[j] && in_slot[j] == in_slot[k]) {
        used[j] = 1;
        g->names[out] = in[j];
        g->lens[out] = in_len[j];
        g->slot[out++] = in_slot[j];
      }
  }
  g->first[g->n] = out;
  return g->n;
}

/* ---- fire and forget ----------------------------------------------------- */

/* Fire and forget to a master that routes by slot (lock.c's releases and
 * giveups): split over slots for multi-key commands; REDELIVER. */
void redlock__lock_slot_send(redlock_lock_t *l, unsigned i,
                             redlock__cmd cmd, int64_t ttl_ms,
                             unsigned flags) {
  redlock_client_t *c = l->client;
  redlock__master *m = &c->masters[i];
  const char *argv[REDLOCK__ARGV_MAX];
  size_t lens[REDLOCK__ARGV_MAX];
  char nums[3][24];
  redlock__argv_sub sub;
  redlock__key_groups g;
  unsigned k, np = 1;
  memset(&sub, 0, sizeof(sub));
  if (redlock__multi_keys(cmd))
    np = redlock__lock_groups(l, cmd, &g);
  for (k = 0; k < np; k++) {
    redlock__node *n;
    redlock__req *req;
    int argc;
    if (redlock__multi_keys(cmd))
      n = redlock__groups_part(&g, k, m, &sub);
    else
      n = redlock__master_route(m, redlock__lock_key_slot(l));
    argc = redlock__lock_argv_sub(l, cmd, ttl_ms, flags, &sub, argv, lens,
                                  nums);
    req = redlock__node_req(n);
    if (req == NULL)
      continue;   /* the key still expires by its ttl */
    req->flags = REDLOCK__REQ_REDELIVER;
    (void)redlock__node_submit(n, req, argc, argv, lens);
  }
}

/* ---- the arguments ------------------------------------------------------- */


int redlock__lock_argv(const redlock_lock_t *l, redlock__cmd cmd,
                       int64_t ttl_ms, unsigned flags, const char **argv,
                       size_t *lens, char nums[3][24]) {
  return redlock__lock_argv_sub(l, cmd, ttl_ms, flags, NULL, argv, lens,
                                nums);
}

int redlock__lock_argv_sub(const redlock_lock_t *l, redlock__cmd cmd,
                           int64_t ttl_ms, unsigned flags,
                           const redlock__argv_sub *sub, const char **argv,
                           size_t *lens, char nums[3][24]) {
  const redlock__script *s = redlock__script_of(cmd);
  const redlock_client_t *c = l->client;
  size_t toklen = strlen(l->token);
  int argc = 0;
  unsigned k;
#define ARG(p, n)                                                           \
  do {                                                                      \
    argv[argc] = (p);                                                       \
    lens[argc++] = (n);                                                     \
  } while (0)
#define NUM(slot, v) ARG(nums[slot], redlock__fmt_i64(nums[slot], (v)))
  if (cmd == REDLOCK__CMD_PTTL) {
    ARG("PTTL", 4);
    ARG(l->key, l->keylen);
    return argc;
  }
  if (cmd == REDLOCK__CMD_TAKEOVER) {
    const char *old[REDLOCK__STALE_PER_KEY];
    unsigned n = redlock__stale_tokens(l, old);
    ARG(flags & REDLOCK__ARGV_EVAL ? "EVAL" : "EVALSHA",
        flags & REDLOCK__ARGV_EVAL ? 4 : 7);
    ARG(flags & REDLOCK__ARGV_EVAL ? s->text : s->sha,
        flags & REDLOCK__ARGV_EVAL ? s->len : 40);
    ARG("1", 1);
    ARG(l->key, l->keylen);
    ARG(l->token, toklen);
    NUM(0, ttl_ms);
    for (k = 0; k < n; k++)
      ARG(old[k], REDLOCK__TOKEN_HEX);
    return argc;
  }
  if (cmd == REDLOCK__CMD_SET_NX) {
    ARG("SET", 3);
    ARG(l->key, l->keylen);
    ARG(l->token, toklen);
    ARG("NX", 2);
    ARG("PX", 2);
    NUM(0, ttl_ms);
    return argc;
  }
  const char *quiet = flags & REDLOCK__ARGV_QUIET ? "1" : "0";
  if (flags & REDLOCK__ARGV_EVAL) {
    ARG("EVAL", 4);
    ARG(s->text, s->len);
  } else {
    ARG("EVALSHA", 7);
    ARG(s->sha, 40);
  }
  switch (cmd) {
    case REDLOCK__CMD_RELEASE:
    case REDLOCK__CMD_EXTEND:
      ARG("1", 1);
      ARG(l->key, l->keylen);
      ARG(l->token, toklen);
      if (cmd == REDLOCK__CMD_EXTEND) {
        NUM(0, ttl_ms);
        ARG(l->heal ? "1" : "0", 1);
      } else {
        ARG(quiet, 1);
      }
      break;
    case REDLOCK__CMD_INSPECT:
      ARG(l->rw_names != NULL ? "2" : "1", 1);
      ARG(l->key, l->keylen);
      if (l->rw_names != NULL && sub != NULL)
        ARG(l->rw_names_cl[0], l->rw_name_cl_lens[0]);   /* its slot */
      else if (l->rw_names != NULL)
        ARG(l->rw_names[0], l->rw_name_lens[0]);
      break;
    case REDLOCK__CMD_FENCED_ACQUIRE:
    case REDLOCK__CMD_FENCE:
      ARG("2", 1);
      ARG(l->key, l->keylen);
      if (l->sem != NULL)   /* the permit's counter: one name anywhere */
        ARG(l->sem->fence_key, l->sem->fence_len);
      else if (sub != NULL)
        ARG(l->fence_key_cl, l->fence_key_cl_len);
      else
        ARG(l->fence_key, l->fence_keylen);
      ARG(l->token, toklen);
      NUM(0, ttl_ms);   /* the ttl, or T for the fence round */
      break;
    case REDLOCK__CMD_MULTI_PTTL:
    case REDLOCK__CMD_MULTI_ACQUIRE:
    case REDLOCK__CMD_MULTI_RELEASE:
    case REDLOCK__CMD_MULTI_EXTEND:
      if (sub != NULL) {
        NUM(1, sub->n_names);
        for (k = 0; k < sub->n_names; k++)
          ARG(sub->names[k], sub->name_lens[k]);
      } else {
        NUM(1, l->nkeys);
        for (k = 0; k < l->nkeys; k++)
          ARG(l->keys[k], l->keylens[k]);
      }
      if (cmd == REDLOCK__CMD_MULTI_PTTL)
        break;
      ARG(l->token, toklen);
      if (cmd != REDLOCK__CMD_MULTI_RELEASE) {
        NUM(0, ttl_ms);
        ARG(l->heal && cmd == REDLOCK__CMD_MULTI_EXTEND ? "1" : "0", 1);
      } else {
        ARG(quiet, 1);
      }
      break;
    case REDLOCK__CMD_FORCE_RELEASE:
      /* Every key and its read-write hash (lock.c made the names). */
      if (sub != NULL) {
        NUM(1, sub->n_names);
        for (k = 0; k < sub->n_names; k++)
          ARG(sub->names[k], sub->name_lens[k]);
      } else {
        NUM(1, 2 * l->nkeys);
        for (k = 0; k < l->nkeys; k++)
          ARG(l->keys[k], l->keylens[k]);
        for (k = 0; k < l->nkeys; k++)
          ARG(l->rw_names[k], l->rw_name_lens[k]);
      }
      break;
    case REDLOCK__CMD_RW_ACQUIRE:
    case REDLOCK__CMD_RW_EXTEND:
    case REDLOCK__CMD_RW_RELEASE:
    case REDLOCK__CMD_RW_GIVEUP:
      /* The hash, and the plain key the scripts occupy while the lock
       * is held (the handle's key without ":rw"); on a cluster master
       * the hash's name in that key's slot (lock.c). */
      ARG("2", 1);
      if (sub != NULL)
        ARG(l->rw_hash_cl, l->rw_hash_cl_len);
      else
        ARG(l->key, l->keylen);
      ARG(l->key, l->keylen - 3);
      ARG(l->token, toklen);
      NUM(0, ttl_ms);
      ARG(l->kind == REDLOCK__KIND_WRITE ? "w" : "r", 1);
      ARG(l->intent, strlen(l->intent));
      ARG(quiet, 1);
      NUM(1, redlock__rw_lease_ms(l));
      ARG(flags & REDLOCK__ARGV_PUTBACK   ? "p"
          : flags & REDLOCK__ARGV_GRANTED ? "g"
                                          : "0",
          1);
      break;
    case REDLOCK__CMD_MAXTTL_RAISE:
    case REDLOCK__CMD_MAXTTL_SET:
      ARG("1", 1);
      if (sub != NULL)
        ARG(sub->rec, sub->rec_len);
      else
        ARG(c->maxttl_key, c->maxttl_keylen);
      NUM(0, ttl_ms);
      break;
    case REDLOCK__CMD_SEM_ACQUIRE:
      /* The permit, the limit record, the permit's fencing counter (one
       * slot: every name has the record's tag, so one form anywhere). */
      ARG("3", 1);
      ARG(l->key, l->keylen);
      ARG(l->sem->rec, l->sem->rec_len);
      ARG(l->sem->fence_key, l->sem->fence_len);
      ARG(l->token, toklen);
      NUM(0, ttl_ms);
      NUM(1, l->sem->limit);
      NUM(2, l->sem->slot);
      ARG(l->sem->offset_str, strlen(l->sem->offset_str));
      ARG(l->want_fence ? "1" : "0", 1);
      break;
    case REDLOCK__CMD_SEM_RELEASE:
    case REDLOCK__CMD_SEM_FORCE:
      ARG("2", 1);
      ARG(l->key, l->keylen);
      ARG(l->sem->rec, l->sem->rec_len);
      if (cmd == REDLOCK__CMD_SEM_RELEASE) {
        ARG(l->token, toklen);
        ARG(quiet, 1);
      }
      break;
    case REDLOCK__CMD_SEM_INSPECT:
    case REDLOCK__CMD_SEM_LIMIT:
      ARG("1", 1);
      ARG(l->sem->rec, l->sem->rec_len);
      NUM(0, ttl_ms);   /* the handle's limit, or the new one */
      break;
    case REDLOCK__CMD_SET_NX:
    case REDLOCK__CMD_PTTL:
    case REDLOCK__CMD_MAXTTL_GET:
    case REDLOCK__CMD_BATCH_EXTEND:   /* batch.c encodes its own */
    case REDLOCK__CMD_TAKEOVER:
    case REDLOCK__CMD_CLOCK_NOTE:   /* guard.c encodes its own */
    case REDLOCK__CMD_MARK_FORGET:  /* guard.c encodes its own */
    case REDLOCK__N_CMDS:
      break;
  }
#undef NUM
#undef ARG
  return argc;
}

/* ---- own stale keys, read-write leases -------------------------------- */

static uint64_t key_hash(const redlock_lock_t *l) {
  uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
  size_t i;
  for (i = 0; i < l->keylen; i++)
    h = (h ^ (uint8_t)l->key[i]) * 1099511628211ULL;
  return h | 1;   /* never 0 (a free slot) */
}

void redlock__stale_note(redlock_lock_t *l) {
  redlock_client_t *c = l->client;
  redlock__stale *s;
  if (l->kind != REDLOCK__KIND_PLAIN ||
      strlen(l->token) != REDLOCK__TOKEN_HEX)
    return;   /* adopted or election tokens: not ours to take over */
  s = &c->stale[c->stale_next++ % REDLOCK__STALE_MAX];
  s->hash = key_hash(l);
  /* A key of that token lives at most its ttl from now (a SET still on
   * its way starts its ttl when it lands: bounded by the command timeout
   * for a live master; a master that comes back later has lost it or
   * replays it from its AOF, where it expired by the ttl as well). */
  s->until = redlock__sys_now(l->client->sys) +
             (redlock__ns)((l->ttl_ms > l->op_ttl_ms ? l->ttl_ms
                                                     : l->op_ttl_ms) +
                           c->command_timeout_ms) *
                 REDLOCK__NS_PER_MS;
  memcpy(s->token, l->token, sizeof(s->token));
  if (s->until > c->stale_until)
    c->stale_until = s->until;
}

unsigned redlock__stale_tokens(const redlock_lock_t *l,
                               const char **tokens) {
  const redlock_client_t *c = l->client;
  uint64_t h;
  redlock__ns now;
  unsigned k = 0, i;
  if (l->kind != REDLOCK__KIND_PLAIN || c->stale_until == 0)
    return 0;   /* the acquisition's hot path: nothing given up, ever */
  now = redlock__sys_now(l->client->sys);
  if (now >= c->stale_until)
    return 0;   /* every given-up token expired */
  h = key_hash(l);
  for (i = 1; i <= REDLOCK__STALE_MAX && k < REDLOCK__STALE_PER_KEY; i++) {
    const redlock__stale *s =
        &c->stale[(c->stale_next - i) % REDLOCK__STALE_MAX];
    if (s->hash == h && s->until > now)
      tokens[k++] = s->token;
  }
  return k;
}

int64_t redlock__rw_lease_ms(const redlock_lock_t *l) {
  if (l->max_retries == 0 && l->wait_deadline == 0)
    return 0;   /* one attempt: nobody waits */
  /* The longest gap between two attempts: the attempt itself, a round
   * before it (the ttl record's raise), the retry delay with its jitter,
   * and slack for a busy loop. */
  return l->retry_delay_ms + l->retry_jitter_ms +
         2 * l->client->command_timeout_ms + 100;
}

