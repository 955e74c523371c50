/* error.c: names and descriptions generated from REDLOCK_ERRNO_MAP; the
 * version; the sizes of the public structs for bindings. */
#include <string.h>

#include "redlock.h"

const char *redlock_strerror(int err) {
  switch (err) {
#define XX(name, val, msg) case REDLOCK_##name: return msg;
    REDLOCK_ERRNO_MAP(XX)
#undef XX
    case 0:
      return "success";
  }
  return "unknown error";
}

const char *redlock_err_name(int err) {
  switch (err) {
#define XX(name, val, msg) case REDLOCK_##name: return #name;
    REDLOCK_ERRNO_MAP(XX)
#undef XX
    case 0:
      return "OK";
  }
  return "UNKNOWN";
}

/* meson.build's project version, passed by meson: the one source of the
 * version that `redlock --version`, the shared library's file name and
 * redlock.pc carry (issue 33: the string was spelled from redlock.h's
 * macros and said 0.1.0 whatever the release). */
#ifndef REDLOCK_PROJECT_VERSION
# error "REDLOCK_PROJECT_VERSION is meson.build's project version: build with meson"
#endif

const char *redlock_version_string(void) {
  return REDLOCK_PROJECT_VERSION;
}

/* Bindings that lay the structs out themselves (Python's ctypes) compare
 * these with their own sizes when they load the library, and refuse one
 * they do not match: a field added to a struct would otherwise have them
 * read and write past its end. */
size_t redlock_abi_sizeof(const char *type) {
  static const struct {
    const char *name;
    size_t size;
  } types[] = {
#define T(t) {#t, sizeof(t)}
    T(redlock_client_config), T(redlock_acquire_opts),
    T(redlock_election_opts), T(redlock_node_result), T(redlock_result),
    T(redlock_master_stats), T(redlock_stats), T(redlock_master_info),
    T(redlock_node_stats), T(redlock_sync_event),
    T(redlock_permit_info), T(redlock_semaphore_info),
#undef T
  };
  size_t i;
  if (type == NULL)
    return 0;
  for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
    if (strcmp(types[i].name, type) == 0)
      return types[i].size;
  return 0;
}
