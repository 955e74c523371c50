/* names.c: the SCAN glob of a prefix and the lock names behind raw keys
 * (redlock_client_scan's classification), against the library's own key
 * layout (slot.c's same-slot names). No server. */
#include "harness.h"
#include "pure.h"
#include "redlock.h"

#define WANT "p:"

/* The kind of raw (a string, or a hash when hash is 1) under want "p:"
 * plus more; the name found, NUL-terminated, in name. */
static int kind_of(const char *raw, size_t raw_len, int hash,
                   const char *want, char *name) {
  size_t off = 0, len = 0;
  int k = redlock__name_classify(raw, raw_len, hash, want, strlen(want), 2,
                                 &off, &len);
  name[0] = '\0';
  if (k != 0) {
    memcpy(name, raw + off, len);
    name[len] = '\0';
  }
  return k;
}

#define KIND(raw, hash) kind_of(raw, strlen(raw), hash, WANT, name)

int main(void) {
  char name[256], glob[256], raw[256];
  size_t n;

  /* The glob: its metacharacters escaped, '*' at both ends. */
  n = redlock__name_glob("a*b?[c]\\d", 9, glob);
  ASSERT_STR_EQ(glob, "*a\\*b\\?\\[c\\]\\\\d*");
  ASSERT_EQ(n, strlen(glob));
  n = redlock__name_glob("", 0, glob);
  ASSERT_STR_EQ(glob, "**");

  /* Plain locks (strings). */
  ASSERT_EQ(KIND("p:jobs:a", 0), REDLOCK_NAME_LOCK);
  ASSERT_STR_EQ(name, "jobs:a");
  ASSERT_EQ(KIND("q:jobs:a", 0), 0);        /* another client prefix */
  ASSERT_EQ(KIND("p:", 0), 0);              /* no name at all */
  ASSERT_EQ(kind_of("p:jobs:a", 8, 0, "p:jo", name), REDLOCK_NAME_LOCK);
  ASSERT_EQ(kind_of("p:other", 7, 0, "p:jo", name), 0);
  /* A plain lock named "x:rw" (or a read-write lock's marker): a string. */
  ASSERT_EQ(KIND("p:x:rw", 0), REDLOCK_NAME_LOCK);
  ASSERT_STR_EQ(name, "x:rw");

  /* The library's own: fencing counters, records, clock hashes. */
  ASSERT_EQ(KIND("p:jobs:a:fence", 0), 0);
  ASSERT_EQ(KIND("{p:jobs:a}:fence", 0), 0);
  ASSERT_EQ(KIND("{p:s}:sem:3:fence", 0), 0);
  ASSERT_EQ(KIND("p:__redlock__:maxttl", 0), 0);
  ASSERT_EQ(KIND("p:__redlock__:clock", 1), 0);
  ASSERT_EQ(KIND("p:{7a}__redlock__:clock", 1), 0);
  ASSERT_EQ(KIND("p:__redlock__:record", 0), 0);

  /* Read-write locks' hashes: plain and cluster names. */
  ASSERT_EQ(KIND("p:x:rw", 1), REDLOCK_NAME_RW);
  ASSERT_STR_EQ(name, "x");
  ASSERT_EQ(KIND("{p:x}:rw", 1), REDLOCK_NAME_RW);
  ASSERT_STR_EQ(name, "x");
  ASSERT_EQ(KIND("p:jobs:rw:rw", 1), REDLOCK_NAME_RW);
  ASSERT_STR_EQ(name, "jobs:rw");
  ASSERT_EQ(KIND("p:other-hash", 1), 0);    /* a hash that is not ours */

  /* Semaphores: the record (a hash), the permits (strings). */
  ASSERT_EQ(KIND("{p:s}:sem", 1), REDLOCK_NAME_SEMAPHORE);
  ASSERT_STR_EQ(name, "s");
  ASSERT_EQ(KIND("{p:s}:sem:0", 0), REDLOCK_NAME_SEMAPHORE);
  ASSERT_STR_EQ(name, "s");
  ASSERT_EQ(KIND("{p:s}:sem:1023", 0), REDLOCK_NAME_SEMAPHORE);
  ASSERT_STR_EQ(name, "s");
  /* A key with a hash tag keeps its name; one holding a '}' without a
   * tag gets its slot's tag in front (slot.c). */
  n = redlock__same_slot_name("p:{u1}x", 7, ":sem", raw, sizeof(raw));
  ASSERT_STR_EQ(raw, "p:{u1}x:sem");
  ASSERT_EQ(kind_of(raw, n, 1, WANT, name), REDLOCK_NAME_SEMAPHORE);
  ASSERT_STR_EQ(name, "{u1}x");
  n = redlock__same_slot_name("p:a}b", 5, ":sem", raw, sizeof(raw));
  ASSERT(raw[0] == '{' && strstr(raw, "}p:a}b:sem") != NULL);
  ASSERT_EQ(kind_of(raw, n, 1, WANT, name), REDLOCK_NAME_SEMAPHORE);
  ASSERT_STR_EQ(name, "a}b");
  n = redlock__same_slot_name("p:a}b", 5, ":rw", raw, sizeof(raw));
  ASSERT_EQ(kind_of(raw, n, 1, WANT, name), REDLOCK_NAME_RW);
  ASSERT_STR_EQ(name, "a}b");
  /* Under a prefix inside the braces. */
  ASSERT_EQ(kind_of("{p:jobs:s}:sem", 14, 1, "p:jobs:", name),
            REDLOCK_NAME_SEMAPHORE);
  ASSERT_EQ(kind_of("{p:other}:sem", 13, 1, "p:jobs:", name), 0);
  fprintf(stderr, "PASS\n");
  return 0;
}
