/* scripts.c: the command table (see scripts.h).
 *
 * Owns: every Lua script the library runs, its EVALSHA name, and the
 * classification of replies into votes. Every script is loaded with SCRIPT
 * LOAD at each handshake and then called with EVALSHA; a NOSCRIPT reply
 * (the cache was flushed) makes the caller resend that call as EVAL. Does
 * not own: when commands are sent (lock.c) or how (node.c).
 *
 * Wire layout (interoperable with other Redlock implementations for the
 * plain lock): the key holds the token; release is compare-and-delete;
 * extend is compare-and-pexpire. Releases also PUBLISH on
 * "__redlock__:<key>" for waiters (wake.c). A read-write lock with an
 * owner holds the same key too (RW_MARK), so that every mode of a name
 * excludes the others (RW_PRELUDE). */
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "pure.h"
#include "scripts.h"

/* A given token that is the library's own marker ("__redlock__:...", RW_MARK
 * below) is nobody's: every script that compares a key with a given token
 * acts as if the key held something else, so that a release or extend
 * "under" the marker cannot delete or cut a read-write lock's hold of the
 * plain key (review item 2; lock.c's adopt refuses such tokens first).
 * MARKED(x) is Lua, true when x starts with the prefix. */
#define MARKED(x) "string.sub(" x ",1,12) == '__redlock__:'"

/* Release: compare-and-delete, and a message on the key's release channel
 * for waiters, unless quiet (a failed attempt's keys). KEYS[1] key;
 * ARGV[1] token, ARGV[2] quiet ("1"). */
static const char release_script[] =
    "if " MARKED("ARGV[1]") " then return 0 end "
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "local r = redis.call('del',KEYS[1]) "
    "if ARGV[2] ~= '1' then "
    "redis.call('publish','__redlock__:'..KEYS[1],'1') end "
    "return r else return 0 end";

/* Extend: 1 when the key holds our token (ttl renewed); with heal
 * (ARGV[3] == "1") a missing key is set again and 2 is returned; 0 when
 * the key is someone else's (or missing without heal). */
static const char extend_script[] =
    "if " MARKED("ARGV[1]") " then return 0 end "
    "local v = redis.call('get',KEYS[1]) "
    "if v == ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) "
    "elseif v == false and ARGV[3] == '1' then "
    "redis.call('set',KEYS[1],ARGV[1],'px',ARGV[2]) return 2 "
    "else return 0 end";

/* Inspect: the key's value and ttl, and whether the read-write hash of
 * the same name (KEYS[2], when given: on a cluster master its name in the
 * key's slot) exists. */
static const char inspect_script[] =
    "local rw = 0 if #KEYS > 1 then rw = redis.call('exists',KEYS[2]) end "
    "return {redis.call('get',KEYS[1]) or '', redis.call('pttl',KEYS[1]), "
    "rw}";

/* The value of a plain key that a read-write lock of its name holds
 * (RW_PRELUDE). */
#define RW_MARK "__redlock__:rw"

/* Fencing (DESIGN 5): the acquire also increments the resource's counter;
 * the second round raises the counter to T on the masters where we hold
 * the lock, so any later holder's majority meets a counter >= T. Before
 * every increment the counter is raised to the master's clock in
 * microseconds (TIME): a counter that a restart lost (no persistence) or
 * rolled back (an RDB snapshot, an AOF cut short) starts again above every
 * number handed out before, as long as the clocks move forward together
 * (redlock.h, opts.fence); at most one number per script call, i.e. per
 * microsecond. Redis cannot add 1 to more than 2^53 exactly in Lua:
 * string.format keeps the integer. */
static const char fenced_acquire_script[] =
    "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then "
    "local t = redis.call('time') "
    "local floor = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local c = tonumber(redis.call('get',KEYS[2]) or '0') "
    "if c == nil or c < floor then "
    "redis.call('set',KEYS[2],string.format('%d',floor)) end "
    "return redis.call('incr',KEYS[2]) end return false";
static const char fence_script[] =
    "if " MARKED("ARGV[1]") " then return 0 end "
    "if redis.call('get',KEYS[1]) == ARGV[1] then "
    "local c = tonumber(redis.call('get',KEYS[2]) or '0') "
    "if c < tonumber(ARGV[2]) then redis.call('set',KEYS[2],ARGV[2]) end "
    "return 1 end return 0";

/* Multi-resource locks: all K keys or none, on each master. */
static const char multi_acquire_script[] =
    "for i=1,#KEYS do if redis.call('exists',KEYS[i]) == 1 then "
    "return 0 end end "
    "for i=1,#KEYS do redis.call('set',KEYS[i],ARGV[1],'PX',ARGV[2]) end "
    "return 1";
static const char multi_release_script[] =
    "if " MARKED("ARGV[1]") " then return 0 end "
    "local n = 0 for i=1,#KEYS do "
    "if redis.call('get',KEYS[i]) == ARGV[1] then "
    "n = n + redis.call('del',KEYS[i]) "
    "if ARGV[2] ~= '1' then "
    "redis.call('publish','__redlock__:'..KEYS[i],'1') end end end "
    "return n";
static const char multi_extend_script[] =
    "if " MARKED("ARGV[1]") " then return 0 end "
    "for i=1,#KEYS do local v = redis.call('get',KEYS[i]) "
    "if v ~= ARGV[1] and not (v == false and ARGV[3] == '1') then "
    "return 0 end end "
    "for i=1,#KEYS do if redis.call('get',KEYS[i]) == ARGV[1] then "
    "redis.call('pexpire',KEYS[i],ARGV[2]) else "
    "redis.call('set',KEYS[i],ARGV[1],'PX',ARGV[2]) end end return 1";

/* Read-write locks: one hash "<key>:rw" per resource, every field's value
 * its expiry in server ms. Owners: "r:<token>" (readers), "w:<token>"
 * (the writer). Waiters, each under the id of its acquisition and kept
 * only while it retries (a lease renewed by each attempt, ARGV[6] ms; a
 * single attempt leaves none):
 *  "i:<id>" a waiting writer's intent: new readers stay out;
 *  "q:<id>" a reader refused: it waits for the next read phase;
 *  "e:<id>" a reader entitled to the next read phase: when a writer's
 *           hold ends (release or expiry), every "q:" becomes "e:", and
 *           "p:" (the read phase opening) is set while any "e:" lives.
 * A reader is admitted when no writer holds and no intent is live, or
 * when it is entitled (its "e:" stays until the acquisition ends, so that
 * a failed attempt can put back what it had; the opening goes when an
 * entitled reader got the lock, with its giveup); a writer when nobody
 * holds and no read phase is opening. So phases
 * alternate: one writer, then the readers that waited for it (the first
 * to come back opens the phase, the others join while it lasts, and a
 * late one keeps its entitlement for the next), then the next writer
 * (phase-fair); neither side starves. Every script first purges expired
 * fields and keeps the hash's own ttl at the latest expiry.
 *
 * Times in the hash are not the master's clock: "z:" holds the latest
 * expiry as written, and the hash's own ttl (which Redis moves with the
 * key: MIGRATE, resharding, replication, DUMP/RESTORE) says how far off
 * it is, so "now" is z: minus the hash's pttl. The fields written on a
 * master whose clock differs from the one they reach (a slot migrating to
 * a primary 6 s ahead: redlock-sim's seed 1882981962625882) keep their
 * meaning as every plain key does; measured against the new master's
 * TIME, a live reader read as expired and a writer got in. A hash without
 * "z:" (none written yet) uses TIME. ARGV: token,
 * ttl, "r" or "w", id, quiet (releases, giveups), lease, "p" (a failed
 * attempt's release: put back) or "g" (the giveup of a granted waiter)
 * or "0".
 *
 * The modes of one name exclude each other (DESIGN 7): KEYS[2] is the
 * plain lock's key of the name, which a plain holder (ours, or another
 * Redlock library's: SET NX PX) sets to its token. While the hash has an
 * owner the scripts hold that key themselves, set to RW_MARK with the
 * latest owner's expiry (occupy), so that a plain SET NX is refused; an
 * acquisition is refused while the key holds anything else, and an
 * extend fails then (the name is not ours on that master). The marker
 * goes with the last owner, and its release tells the plain waiters
 * (the key's own channel). On a cluster master KEYS[1] shares KEYS[2]'s
 * slot (lock.c). Messages go on the channel of the handle's key,
 * KEYS[2] .. ":rw", where its waiters listen (wake.c). */
/* A lock's name is its key: an application key of the same name (a hash
 * at "user:42", a string at "a:rw") would make every script fail with
 * Redis's WRONGTYPE, which says nothing of the cause. Checked first, so
 * that the error names it and nothing is written (review item 3). A
 * string at the plain key is a plain lock to us (another library's), so
 * it refuses, as it must. */
#define RW_TYPES                                                            \
  "local kt = redis.call('type', KEYS[2])['ok'] "                           \
  "if kt ~= 'none' and kt ~= 'string' then return redis.error_reply("       \
  "'ERR the name holds a non-lock key (' .. kt .. '): a lock\\'s name is " \
  "its key') end "                                                          \
  "local ht = redis.call('type', KEYS[1])['ok'] "                           \
  "if ht ~= 'none' and ht ~= 'hash' then return redis.error_reply("         \
  "'ERR the name\\'s read-write key ' .. KEYS[1] .. ' holds a non-lock "    \
  "key (' .. ht .. ')') end "
#define RW_PRELUDE                                                          \
  RW_TYPES                                                                  \
  "local t = redis.call('time') "                                           \
  "local now = t[1] * 1000 + math.floor(t[2] / 1000) "                      \
  "local z = tonumber(redis.call('hget', KEYS[1], 'z:') or '') "            \
  "local zt = redis.call('pttl', KEYS[1]) "                                 \
  "if z and zt > 0 then now = z - zt end "                                  \
  "local h = redis.call('hgetall', KEYS[1]) "                               \
  "local readers, writer, intents, entitled, maxexp = 0, false, 0, 0, 0 "   \
  "local mine, wgone, opening, emax = false, false, false, 0 "              \
  "local eid = 'e:' .. ARGV[4] "                                            \
  "for i = 1, #h, 2 do local f, v = h[i], tonumber(h[i + 1]) "             \
  "local p = string.sub(f, 1, 2) "                                          \
  "if p == 'z:' then elseif v <= now then redis.call('hdel', KEYS[1], f) "  \
  "if p == 'w:' then wgone = true end else "                                \
  "if p == 'i:' then intents = intents + 1 "                                \
  "elseif p == 'e:' then entitled = entitled + 1 "                          \
  "if f == eid then mine = true end if v > emax then emax = v end "         \
  "elseif p == 'p:' then opening = true "                                   \
  "elseif p == 'w:' then writer = f elseif p == 'r:' then "                 \
  "readers = readers + 1 end "                                              \
  "if v > maxexp then maxexp = v end end end "                              \
  "local me = ARGV[3] .. ':' .. ARGV[1] "                                   \
  "local lease = tonumber(ARGV[6]) "                                        \
  "local function keep(exp) if exp > maxexp then maxexp = exp end "         \
  "redis.call('pexpire', KEYS[1], maxexp - now) "                           \
  "redis.call('hset', KEYS[1], 'z:', maxexp) end "                          \
  "local function empty() return redis.call('hlen', KEYS[1]) == "           \
  "redis.call('hexists', KEYS[1], 'z:') end "                               \
  "local function entitle() for i = 1, #h, 2 do local f = h[i] "            \
  "local v = tonumber(h[i + 1]) "                                           \
  "if string.sub(f, 1, 2) == 'q:' and v > now then "                        \
  "redis.call('hset', KEYS[1], 'e:' .. string.sub(f, 3), v) "               \
  "redis.call('hdel', KEYS[1], f) entitled = entitled + 1 "                 \
  "if v > emax then emax = v end "                                          \
  "if f == 'q:' .. ARGV[4] then mine = true end end end "                   \
  "if entitled > 0 then redis.call('hset', KEYS[1], 'p:', emax) "           \
  "opening = true end "                                                     \
  "if maxexp > now then redis.call('pexpire', KEYS[1], maxexp - now) "      \
  "redis.call('hset', KEYS[1], 'z:', maxexp) end end "                      \
  "if wgone and not writer then entitle() end "                            \
  "local pv = redis.call('get', KEYS[2]) "                                  \
  "local plain = pv and pv ~= '" RW_MARK "' "                               \
  "local chan = '__redlock__:' .. KEYS[2] .. ':rw' "                        \
  "local function occupy() local m = 0 "                                    \
  "local hh = redis.call('hgetall', KEYS[1]) for i = 1, #hh, 2 do "         \
  "local q = string.sub(hh[i], 1, 2) local v = tonumber(hh[i + 1]) "        \
  "if (q == 'r:' or q == 'w:') and v > m then m = v end end "               \
  "if plain then return end "                                               \
  "if m > now then redis.call('set', KEYS[2], '" RW_MARK "', 'px', m - now) " \
  "elseif pv then redis.call('del', KEYS[2]) "                              \
  "if ARGV[5] ~= '1' then "                                                 \
  "redis.call('publish', '__redlock__:' .. KEYS[2], '1') end end end "
static const char rw_acquire_script[] =
    RW_PRELUDE
    "local exp = now + tonumber(ARGV[2]) "
    "if ARGV[3] == 'r' then "
    "if not plain and not writer and (intents == 0 or mine) then "
    "redis.call('hdel', KEYS[1], 'q:' .. ARGV[4]) "
    "redis.call('hset', KEYS[1], me, exp) keep(exp) occupy() return 1 end "
    "if lease > 0 then local f = mine and eid or 'q:' .. ARGV[4] "
    "redis.call('hset', KEYS[1], f, now + lease) keep(now + lease) end "
    "return 0 end "
    "if not plain and not writer and readers == 0 and "
    "not (opening and entitled > 0) then "
    "redis.call('hdel', KEYS[1], 'i:' .. ARGV[4]) "
    "redis.call('hset', KEYS[1], me, exp) keep(exp) occupy() return 1 end "
    "if lease > 0 then redis.call('hset', KEYS[1], 'i:' .. ARGV[4], "
    "now + lease) keep(now + lease) end return 0";
static const char rw_extend_script[] =
    RW_PRELUDE
    "if plain or redis.call('hexists', KEYS[1], me) == 0 then return 0 end "
    "local exp = now + tonumber(ARGV[2]) "
    "redis.call('hset', KEYS[1], me, exp) keep(exp) occupy() return 1";
/* A release ends a writer's phase (entitle). The release of a failed
 * attempt that will retry (put back) restores the place the waiter had
 * where it had been admitted instead: a writer its intent; an entitled
 * reader its entitlement and the opening; another reader its queue
 * entry. Also when the owner field is already gone (a ttl shorter than
 * the round: it expired before the release came). */
static const char rw_release_script[] =
    RW_PRELUDE
    "local n = redis.call('hdel', KEYS[1], me) "
    "if ARGV[7] == 'p' and lease > 0 then "
    "local exp = now + lease "
    "if ARGV[3] == 'w' then redis.call('hset', KEYS[1], 'i:' .. ARGV[4], "
    "exp) elseif mine then redis.call('hset', KEYS[1], eid, exp) "
    "redis.call('hset', KEYS[1], 'p:', math.max(emax, exp)) else "
    "redis.call('hset', KEYS[1], 'q:' .. ARGV[4], exp) end keep(exp) "
    "elseif n == 1 and ARGV[3] == 'w' then entitle() end "
    "occupy() "
    "if empty() then redis.call('del', KEYS[1]) "
    "end if n == 1 and ARGV[5] ~= '1' then "
    "redis.call('publish', chan, '1') end return n";
/* A waiter is done (ARGV[4]): its place goes. An entitled reader that got
 * the lock ("g") has opened the read phase; once no reader is entitled
 * the phase is no longer opening either. Those it kept out (readers
 * behind an intent, writers behind an entitled reader) are told, unless
 * quiet (it got the lock: they would be refused anyway). */
static const char rw_giveup_script[] =
    "local e = redis.call('hdel', KEYS[1], 'e:' .. ARGV[4]) "
    "local n = e + redis.call('hdel', KEYS[1], 'i:' .. ARGV[4]) "
    "redis.call('hdel', KEYS[1], 'q:' .. ARGV[4]) "
    "if e == 1 and ARGV[7] == 'g' then redis.call('hdel', KEYS[1], 'p:') "
    "end if n > 0 then local left = false "
    "for _, f in ipairs(redis.call('hkeys', KEYS[1])) do "
    "if string.sub(f, 1, 2) == 'e:' then left = true break end end "
    "if not left then redis.call('hdel', KEYS[1], 'p:') end end "
    "if redis.call('hlen', KEYS[1]) == redis.call('hexists', KEYS[1], "
    "'z:') then redis.call('del', KEYS[1]) "
    "end if n > 0 and ARGV[5] ~= '1' then "
    "redis.call('publish', '__redlock__:' .. KEYS[2] .. ':rw', '1') end "
    "return 1";

/* Until when a multi-resource attempt is refused on this master: the
 * longest PTTL of its keys (-2 when none exists, -1 if one never expires). */
static const char multi_pttl_script[] =
    "local m = -2 for i=1,#KEYS do local p = redis.call('pttl',KEYS[i]) "
    "if p == -1 then return -1 end if p > m then m = p end end return m";

/* Renewals of many plain locks in one call (batch.c): KEYS[1..n], ARGV[i]
 * the token of KEYS[i], then either one ttl for all (ARGV[n+1], the common
 * case: one service, one ttl) or one per key (ARGV[n+i]). One MGET reads
 * every key (a Lua call per key costs more than the work); an array with
 * one result per key, as the extend script's without heal: 1 renewed, 0
 * not ours. */
static const char batch_extend_script[] =
    "local n = #KEYS local v = redis.call('mget', unpack(KEYS)) "
    "local one = #ARGV == n + 1 local r = {} "
    "for i = 1, n do if v[i] == ARGV[i] and not (" MARKED("ARGV[i]") ") then "
    "r[i] = redis.call('pexpire', KEYS[i], one and ARGV[n + 1] or ARGV[n + i]) "
    "else r[i] = 0 end end return r";

/* An acquisition of a key where this client may have left keys of its
 * own (tokens it gave up: a SET that landed after its attempt failed, a
 * release that did not arrive): SET NX, or SET over the key when it holds
 * one of those tokens. KEYS[1] key; ARGV[1] token, ARGV[2] ttl, ARGV[3..]
 * the given-up tokens. 1 set, 2 taken over, 0 someone else's. */
static const char takeover_script[] =
    "local v = redis.call('get',KEYS[1]) "
    "if v then local mine = false "
    "for i = 3, #ARGV do if v == ARGV[i] then mine = true break end end "
    "if " MARKED("v") " then mine = false end "
    "if not mine then return 0 end end "
    "redis.call('set',KEYS[1],ARGV[1],'PX',ARGV[2]) "
    "if v then return 2 end return 1";

/* The clock record of a master (guard.c), a hash "<prefix>__redlock__:
 * clock" (a cluster node's: "<prefix>{tag}__redlock__:clock", tagged to a
 * slot it serves): "run" and "rid" the instance (run_id and replication
 * id) it describes; "seen" when a client
 * first saw it (the master's ms); "off"/"unc" its clock's offset against
 * the masters' median then, and the measurement's uncertainty (us);
 * "step" when a client last saw its clock step (the master's ms). Times
 * are stamped with the master's own clock, in the script. ARGV: run_id,
 * off, unc, the note: "s" first sight (nothing if the record is this
 * instance's already), "b" a new offset (slow drift), "x" a step; and the
 * replication id. */
static const char clock_note_script[] =
    "local t = redis.call('time') "
    "local now = string.format('%d',"
    "tonumber(t[1]) * 1000 + math.floor(t[2] / 1000)) "
    "if redis.call('hget',KEYS[1],'run') ~= ARGV[1] or "
    "(redis.call('hget',KEYS[1],'rid') or '') ~= ARGV[5] then "
    "redis.call('hset',KEYS[1],'run',ARGV[1],'rid',ARGV[5],'seen',now,"
    "'off',ARGV[2],'unc',ARGV[3]) "
    "elseif ARGV[4] ~= 's' then "
    "redis.call('hset',KEYS[1],'off',ARGV[2],'unc',ARGV[3]) end "
    "if ARGV[4] == 'x' then redis.call('hset',KEYS[1],'step',now) end "
    "return 1";

/* An operator's forced release (redlock_lock_force_release): each key and
 * the read-write hash of the same name (KEYS: both names of every key,
 * declared, so a cluster can route them) go, whoever holds them, and
 * their waiters hear a release. The fencing counter stays (tokens must
 * not go back). Returns how many keys went. */
static const char force_release_script[] =
    "local n = 0 for i=1,#KEYS do "
    "n = n + redis.call('del',KEYS[i]) "
    "redis.call('publish','__redlock__:'..KEYS[i],'1') end "
    "return n";

/* A mark of a broken durability declaration (guard.c, 6.) goes once a
 * later instance of that master has been guarded for the window: only if
 * it still names the same broken instance (a newer break stays). KEYS[1]
 * the marks' hash; ARGV[1] the master's field, ARGV[2] the instance. */
static const char mark_forget_script[] =
    "if redis.call('hget',KEYS[1],ARGV[1]) == ARGV[2] then "
    "return redis.call('hdel',KEYS[1],ARGV[1]) end return 0";

/* An operator sets the ttl record (lowering it: redlock.h). */
static const char maxttl_set_script[] =
    "redis.call('set',KEYS[1],ARGV[1]) return tonumber(ARGV[1])";

/* The restart guard's record of the deployment's longest ttl: only ever
 * raised, never expires. Returns the record after the call. */
static const char maxttl_raise_script[] =
    "local v = tonumber(redis.call('get',KEYS[1]) or '0') "
    "local t = tonumber(ARGV[1]) "
    "if t > v then redis.call('set',KEYS[1],ARGV[1]) return t end "
    "return v";

/* Counting semaphores (DESIGN, Counting semaphores): K permits, each a
 * mutex of its own key "{name}:sem:<i>"; the limit record "{name}:sem"
 * is a hash: "k" the limit, "hi" the highest limit ever set. Every key of
 * a semaphore shares the record's hash tag (one cluster slot), so the
 * scripts may form permit keys from the record's name. SEM_TYPES refuses
 * a record that is not a hash (an application key of that name). */
#define SEM_TYPES(rec)                                                      \
  "local rt = redis.call('type', " rec ")['ok'] "                           \
  "if rt ~= 'none' and rt ~= 'hash' then return redis.error_reply("         \
  "'ERR the semaphore\\'s limit record ' .. " rec " .. ' holds a "          \
  "non-lock key (' .. rt .. ')') end "
/* The prefix of the error that tells a limit apart (REDLOCK_ELIMIT). */
#define SEM_MISMATCH "ERR semaphore limit mismatch"

/* Acquire permit ARGV[4] of a semaphore of limit ARGV[3]. KEYS[1] the
 * permit, KEYS[2] the limit record, KEYS[3] the permit's fencing counter;
 * ARGV[1] token, ARGV[2] ttl, ARGV[5] where the scan of free permits
 * starts, ARGV[6] "1" to fence (as fenced_acquire_script). The first
 * acquisition on a master creates the record; one with another limit is
 * an error naming both, and a permit >= the stored limit is never granted.
 * Granted: 0, or the fencing counter. Refused: up to 16 permits free on
 * this master, scanned cyclically from ARGV[5] (an empty array: full). */
static const char sem_acquire_script[] =
    SEM_TYPES("KEYS[2]")
    "local k = redis.call('hget', KEYS[2], 'k') "
    "if not k then k = ARGV[3] redis.call('hset', KEYS[2], 'k', k) "
    "if tonumber(redis.call('hget', KEYS[2], 'hi') or '0') < tonumber(k) "
    "then redis.call('hset', KEYS[2], 'hi', k) end end "
    "if k ~= ARGV[3] then return redis.error_reply('" SEM_MISMATCH ": ' "
    ".. k .. ' on this master, ' .. ARGV[3] .. ' asked') end "
    "local n = tonumber(k) "
    "if tonumber(ARGV[4]) >= n then return redis.error_reply("
    "'ERR semaphore permit ' .. ARGV[4] .. ' out of range (limit ' .. k "
    ".. ')') end "
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "if ARGV[6] ~= '1' then return 0 end "
    "local t = redis.call('time') "
    "local floor = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local c = tonumber(redis.call('get', KEYS[3]) or '0') "
    "if c == nil or c < floor then "
    "redis.call('set', KEYS[3], string.format('%d', floor)) end "
    "return redis.call('incr', KEYS[3]) end "
    "local free, o = {}, tonumber(ARGV[5]) "
    "for j = 0, n - 1 do local s = (o + j) % n "
    "if redis.call('exists', KEYS[2] .. ':' .. s) == 0 then "
    "free[#free + 1] = s if #free == 16 then break end end end "
    "return free";

/* Release a permit: compare-and-delete, and a message on the semaphore's
 * channel (every waiter of the name listens there), unless quiet. KEYS[1]
 * the permit, KEYS[2] the record; ARGV[1] token, ARGV[2] quiet. */
static const char sem_release_script[] =
    "if " MARKED("ARGV[1]") " then return 0 end "
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "local r = redis.call('del', KEYS[1]) "
    "if ARGV[2] ~= '1' then "
    "redis.call('publish', '__redlock__:' .. KEYS[2], '1') end "
    "return r else return 0 end";

/* Inspect: {the stored limit or -1, then for each held permit below
 * max(hi, ARGV[1]): its index, value, pttl}. KEYS[1] the record. */
static const char sem_inspect_script[] =
    SEM_TYPES("KEYS[1]")
    "local k = redis.call('hget', KEYS[1], 'k') "
    "local hi = tonumber(redis.call('hget', KEYS[1], 'hi') or '0') "
    "if tonumber(ARGV[1]) > hi then hi = tonumber(ARGV[1]) end "
    "local out = {k and tonumber(k) or -1} "
    "for s = 0, hi - 1 do local key = KEYS[1] .. ':' .. s "
    "if redis.call('type', key)['ok'] == 'string' then "
    "out[#out + 1] = s out[#out + 1] = redis.call('get', key) "
    "out[#out + 1] = redis.call('pttl', key) end end "
    "return out";

/* Set the limit (redlock_semaphore_set_limit): k, hi raised; waiters are
 * told (a raise lets them in). KEYS[1] the record; ARGV[1] the limit. */
static const char sem_limit_script[] =
    SEM_TYPES("KEYS[1]")
    "redis.call('hset', KEYS[1], 'k', ARGV[1]) "
    "if tonumber(redis.call('hget', KEYS[1], 'hi') or '0') < "
    "tonumber(ARGV[1]) then redis.call('hset', KEYS[1], 'hi', ARGV[1]) end "
    "redis.call('publish', '__redlock__:' .. KEYS[1], '1') "
    "return tonumber(ARGV[1])";

/* An operator's forced release of one permit, whoever holds it; waiters
 * are told. KEYS[1] the permit, KEYS[2] the record. */
static const char sem_force_script[] =
    "local r = redis.call('del', KEYS[1]) "
    "redis.call('publish', '__redlock__:' .. KEYS[2], '1') "
    "return r";

#define S(text) {text, sizeof(text) - 1, ""}

static redlock__script table[REDLOCK__N_CMDS] = {
    [REDLOCK__CMD_RELEASE] = S(release_script),
    [REDLOCK__CMD_EXTEND] = S(extend_script),
    [REDLOCK__CMD_INSPECT] = S(inspect_script),
    [REDLOCK__CMD_FENCED_ACQUIRE] = S(fenced_acquire_script),
    [REDLOCK__CMD_FENCE] = S(fence_script),
    [REDLOCK__CMD_MULTI_ACQUIRE] = S(multi_acquire_script),
    [REDLOCK__CMD_MULTI_RELEASE] = S(multi_release_script),
    [REDLOCK__CMD_MULTI_EXTEND] = S(multi_extend_script),
    [REDLOCK__CMD_RW_ACQUIRE] = S(rw_acquire_script),
    [REDLOCK__CMD_RW_EXTEND] = S(rw_extend_script),
    [REDLOCK__CMD_RW_RELEASE] = S(rw_release_script),
    [REDLOCK__CMD_RW_GIVEUP] = S(rw_giveup_script),
    [REDLOCK__CMD_MAXTTL_RAISE] = S(maxttl_raise_script),
    [REDLOCK__CMD_MULTI_PTTL] = S(multi_pttl_script),
    [REDLOCK__CMD_BATCH_EXTEND] = S(batch_extend_script),
    [REDLOCK__CMD_TAKEOVER] = S(takeover_script),
    [REDLOCK__CMD_CLOCK_NOTE] = S(clock_note_script),
    [REDLOCK__CMD_MAXTTL_SET] = S(maxttl_set_script),
    [REDLOCK__CMD_FORCE_RELEASE] = S(force_release_script),
    [REDLOCK__CMD_MARK_FORGET] = S(mark_forget_script),
    [REDLOCK__CMD_SEM_ACQUIRE] = S(sem_acquire_script),
    [REDLOCK__CMD_SEM_RELEASE] = S(sem_release_script),
    [REDLOCK__CMD_SEM_INSPECT] = S(sem_inspect_script),
    [REDLOCK__CMD_SEM_LIMIT] = S(sem_limit_script),
    [REDLOCK__CMD_SEM_FORCE] = S(sem_force_script),
};

static const char *texts[REDLOCK__N_CMDS];
static size_t lens[REDLOCK__N_CMDS];
static unsigned n_texts;
static uv_once_t once = UV_ONCE_INIT;

static void compute(void) {
  unsigned i;
  for (i = 0; i < REDLOCK__N_CMDS; i++) {
    if (table[i].text == NULL)
      continue;
    redlock__sha1_hex(table[i].text, table[i].len, table[i].sha);
    texts[n_texts] = table[i].text;
    lens[n_texts] = table[i].len;
    n_texts++;
  }
}

void redlock__scripts_init(void) {
  uv_once(&once, compute);
}

const redlock__script *redlock__script_of(redlock__cmd cmd) {
  return table[cmd].text != NULL ? &table[cmd] : NULL;
}

unsigned redlock__scripts_all(const char *const **t, const size_t **l) {
  *t = texts;
  *l = lens;
  return n_texts;
}

/* ---- classification ------------------------------------------------------ */

static void vote(redlock__vote *out, redlock_vote_t v, int64_t value) {
  out->vote = v;
  out->error = 0;
  out->errstr = "";
  out->value = value;
}

void redlock__classify(redlock__cmd cmd, const redlock__reply *r,
                       redlock__vote *out) {
  out->vote = REDLOCK_VOTE_ERR;
  out->error = REDLOCK_EPROTO;
  out->errstr = "unexpected reply type";
  out->value = 0;
  out->holder = "";
  out->holder_len = 0;
  out->noscript = 0;
  out->rw = 0;
  if (r->type == REDLOCK__R_ERROR) {
    out->error = REDLOCK_ESERVER;
    out->errstr = r->str;
    out->noscript = strncmp(r->str, "NOSCRIPT", 8) == 0;
    if (cmd == REDLOCK__CMD_SEM_ACQUIRE &&
        strncmp(r->str, SEM_MISMATCH, sizeof(SEM_MISMATCH) - 1) == 0)
      out->error = REDLOCK_ELIMIT;   /* the text names both limits */
    return;
  }
  switch (cmd) {
    case REDLOCK__CMD_SET_NX:
      if (r->type == REDLOCK__R_STATUS && r->len == 2 &&
          memcmp(r->str, "OK", 2) == 0)
        vote(out, REDLOCK_VOTE_YES, 0);
      else if (r->type == REDLOCK__R_NIL)
        vote(out, REDLOCK_VOTE_NO, 0);
      return;
    case REDLOCK__CMD_FENCED_ACQUIRE:
      if (r->type == REDLOCK__R_INTEGER && r->integer > 0)
        vote(out, REDLOCK_VOTE_YES, r->integer);   /* the counter */
      else if (r->type == REDLOCK__R_NIL)
        vote(out, REDLOCK_VOTE_NO, 0);
      return;
    case REDLOCK__CMD_INSPECT:
      if (r->type != REDLOCK__R_ARRAY || r->elements < 2 ||
          r->elements > 3 || r->element[0] == NULL ||
          r->element[1] == NULL ||
          r->element[0]->type != REDLOCK__R_STRING ||
          r->element[1]->type != REDLOCK__R_INTEGER)
        return;
      vote(out, r->element[0]->len > 0 ? REDLOCK_VOTE_YES : REDLOCK_VOTE_NO,
           r->element[1]->integer);
      out->rw = r->elements == 3 && r->element[2] != NULL &&
                r->element[2]->type == REDLOCK__R_INTEGER &&
                r->element[2]->integer > 0;
      out->holder = r->element[0]->str;
      out->holder_len = r->element[0]->len;
      return;
    case REDLOCK__CMD_SEM_ACQUIRE:
      /* Granted: 0 or the fencing counter; refused: the free permits
       * (semaphore.c reads them). */
      if (r->type == REDLOCK__R_INTEGER && r->integer >= 0)
        vote(out, REDLOCK_VOTE_YES, r->integer);
      else if (r->type == REDLOCK__R_ARRAY)
        vote(out, REDLOCK_VOTE_NO, (int64_t)r->elements);
      return;
    case REDLOCK__CMD_SEM_INSPECT:   /* semaphore.c reads the array */
      if (r->type == REDLOCK__R_ARRAY && r->elements >= 1)
        vote(out, REDLOCK_VOTE_YES, 0);
      return;
    case REDLOCK__CMD_MAXTTL_GET:
      if (r->type == REDLOCK__R_NIL) {
        vote(out, REDLOCK_VOTE_YES, 0);
      } else if (r->type == REDLOCK__R_STRING) {
        long long v = strtoll(r->str, NULL, 10);
        vote(out, REDLOCK_VOTE_YES, v > 0 ? v : 0);
      }
      return;
    case REDLOCK__CMD_PTTL:
    case REDLOCK__CMD_MULTI_PTTL:
    case REDLOCK__CMD_MAXTTL_RAISE:
    case REDLOCK__CMD_MAXTTL_SET:
    case REDLOCK__CMD_CLOCK_NOTE:
    case REDLOCK__CMD_MARK_FORGET:
    case REDLOCK__CMD_RW_GIVEUP:
    case REDLOCK__CMD_FORCE_RELEASE:
    case REDLOCK__CMD_SEM_LIMIT:
    case REDLOCK__CMD_SEM_FORCE:
      if (r->type == REDLOCK__R_INTEGER)
        vote(out, REDLOCK_VOTE_YES, r->integer);
      return;
    case REDLOCK__CMD_RELEASE:
    case REDLOCK__CMD_EXTEND:
    case REDLOCK__CMD_TAKEOVER:
    case REDLOCK__CMD_FENCE:
    case REDLOCK__CMD_MULTI_ACQUIRE:
    case REDLOCK__CMD_MULTI_RELEASE:
    case REDLOCK__CMD_MULTI_EXTEND:
    case REDLOCK__CMD_RW_ACQUIRE:
    case REDLOCK__CMD_RW_EXTEND:
    case REDLOCK__CMD_RW_RELEASE:
    case REDLOCK__CMD_SEM_RELEASE:
      /* 1 (or more) = done, 2 = healed; 0 = not ours / refused. */
      if (r->type == REDLOCK__R_INTEGER)
        vote(out, r->integer >= 1 ? REDLOCK_VOTE_YES : REDLOCK_VOTE_NO,
             r->integer);
      return;
    case REDLOCK__CMD_BATCH_EXTEND:   /* an array: batch.c reads it */
    case REDLOCK__N_CMDS:
      return;
  }
}
