/* token.c: lock tokens. 20 random bytes from the seam (sys.h: libuv's
 * reads the OS CSPRNG, getrandom(2)), as lowercase hex. A fresh token per
 * attempt. */
#include "common.h"
#include "sys.h"

int redlock__token_new(redlock__sys *sys, char *out) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[REDLOCK__TOKEN_BYTES];
  size_t i;
  if (redlock__sys_random(sys, raw, sizeof(raw)) != 0)
    return REDLOCK_EIO;
  for (i = 0; i < sizeof(raw); i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[REDLOCK__TOKEN_HEX] = '\0';
  return 0;
}
