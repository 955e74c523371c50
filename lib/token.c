/* token.c: lock tokens. 20 bytes from the OS CSPRNG (uv_random, which
 * uses getrandom(2)), as lowercase hex. A fresh token per attempt. */
#include "common.h"

int redlock__token_new(char *out) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[REDLOCK__TOKEN_BYTES];
  size_t i;
  if (uv_random(NULL, NULL, raw, sizeof(raw), 0, NULL) != 0)
    return REDLOCK_EIO;
  for (i = 0; i < sizeof(raw); i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[REDLOCK__TOKEN_HEX] = '\0';
  return 0;
}
