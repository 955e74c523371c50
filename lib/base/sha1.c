/* sha1.c: SHA-1 (FIPS 180-4), pure. Only for the Lua scripts' EVALSHA
 * names, which Redis defines as the SHA-1 of the script text: no security
 * rests on it. */
#include <string.h>

#include "pure.h"

#define ROL(v, n) (((v) << (n)) | ((v) >> (32 - (n))))

static void sha1_block(uint32_t h[5], const unsigned char *p) {
  uint32_t w[80];
  uint32_t a, b, c, d, e, t;
  int i;
  for (i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
  for (i = 16; i < 80; i++)
    w[i] = ROL(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  a = h[0];
  b = h[1];
  c = h[2];
  d = h[3];
  e = h[4];
  for (i = 0; i < 80; i++) {
    uint32_t f;
    uint32_t k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDC;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6;
    }
    t = ROL(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = ROL(b, 30);
    b = a;
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

void redlock__sha1_hex(const void *data, size_t len, char out[41]) {
  static const char hex[] = "0123456789abcdef";
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476,
                   0xC3D2E1F0};
  const unsigned char *p = data;
  unsigned char tail[128];
  uint64_t bits = (uint64_t)len * 8;
  size_t rest;
  size_t tlen;
  int i;
  while (len >= 64) {
    sha1_block(h, p);
    p += 64;
    len -= 64;
  }
  rest = len;
  memset(tail, 0, sizeof(tail));
  memcpy(tail, p, rest);
  tail[rest] = 0x80;
  tlen = rest + 1 + 8 <= 64 ? 64 : 128;
  for (i = 0; i < 8; i++)
    tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
  sha1_block(h, tail);
  if (tlen == 128)
    sha1_block(h, tail + 64);
  for (i = 0; i < 20; i++) {
    unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
    out[2 * i] = hex[byte >> 4];
    out[2 * i + 1] = hex[byte & 15];
  }
  out[40] = '\0';
}
