/* error.c: names and descriptions generated from REDLOCK_ERRNO_MAP. */
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

#define REDLOCK__STR2(x) #x
#define REDLOCK__STR(x) REDLOCK__STR2(x)

const char *redlock_version_string(void) {
  return REDLOCK__STR(REDLOCK_VERSION_MAJOR) "."
         REDLOCK__STR(REDLOCK_VERSION_MINOR) "."
         REDLOCK__STR(REDLOCK_VERSION_PATCH);
}
