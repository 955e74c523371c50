/* slot.c: Redis Cluster hash slots, pure (no I/O).
 *
 * Owns: the key -> slot function Redis Cluster uses (CRC16, the XMODEM
 * variant: polynomial 0x1021, initial value 0, no reflection, modulo
 * 16384), hash tags ("{...}": when a key holds a '{' and a later '}' with
 * at least one byte between them, only those bytes are hashed), the names
 * of keys that must share a slot with another (the fencing counter), and a
 * tag that hashes to a given slot (records kept on one chosen primary).
 * Written from the Redis Cluster specification, not from its sources. */
#include <string.h>

#include "pure.h"

static uint16_t crc_table[256];
static int crc_ready;

static void crc_init(void) {
  unsigned i, b;
  for (i = 0; i < 256; i++) {
    uint16_t c = (uint16_t)(i << 8);
    for (b = 0; b < 8; b++)
      c = (uint16_t)(c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1);
    crc_table[i] = c;
  }
  crc_ready = 1;   /* idempotent: racing threads write the same table */
}

uint16_t redlock__crc16(const void *data, size_t len) {
  const unsigned char *p = data;
  uint16_t crc = 0;
  size_t i;
  if (!crc_ready)
    crc_init();
  for (i = 0; i < len; i++)
    crc = (uint16_t)((crc << 8) ^ crc_table[((crc >> 8) ^ p[i]) & 0xff]);
  return crc;
}

/* The part of the key that is hashed: the hash tag when there is one. */
static const char *hashed_part(const char *key, size_t len, size_t *out) {
  const char *open = memchr(key, '{', len);
  const char *close;
  size_t rest;
  *out = len;
  if (open == NULL)
    return key;
  rest = len - (size_t)(open - key) - 1;
  close = memchr(open + 1, '}', rest);
  if (close == NULL || close == open + 1)
    return key;   /* no '}', or "{}": the whole key */
  *out = (size_t)(close - open - 1);
  return open + 1;
}

unsigned redlock__key_slot(const char *key, size_t len) {
  size_t n;
  const char *p = hashed_part(key, len, &n);
  return redlock__crc16(p, n) & (REDLOCK__SLOTS - 1);
}

int redlock__key_has_tag(const char *key, size_t len) {
  size_t n;
  return hashed_part(key, len, &n) != key;
}

/* The tag of a slot: the first string of the enumeration "0".."9", "a"..
 * "z", then two characters, ... that hashes to it. Every client finds the
 * same one. Four characters of 36 cover every slot (36^4 > 16384 by far);
 * the search costs on average 16384 hashes of four bytes. */
size_t redlock__slot_tag(unsigned slot, char out[8]) {
  static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  unsigned len, i;
  slot &= REDLOCK__SLOTS - 1;
  for (len = 1; len <= 5; len++) {
    unsigned long total = 1, v;
    for (i = 0; i < len; i++)
      total *= 36;
    for (v = 0; v < total; v++) {
      unsigned long x = v;
      for (i = 0; i < len; i++) {
        out[len - 1 - i] = digits[x % 36];
        x /= 36;
      }
      out[len] = '\0';
      if ((redlock__crc16(out, len) & (REDLOCK__SLOTS - 1)) == slot)
        return len;
    }
  }
  out[0] = '\0';   /* not reached: five characters cover every slot */
  return 0;
}

size_t redlock__same_slot_name(const char *key, size_t len,
                               const char *suffix, char *out,
                               size_t outlen) {
  size_t sl = strlen(suffix);
  size_t need;
  char tag[8];
  size_t tl = 0;
  int wrap;
  if (redlock__key_has_tag(key, len)) {
    /* The key's own tag comes first in the name too. */
    need = len + sl;
    if (need + 1 > outlen)
      return 0;
    memcpy(out, key, len);
    memcpy(out + len, suffix, sl + 1);
    return need;
  }
  /* "{key}suffix" hashes the key as a whole, unless the key holds a '}'
   * (the tag would end there): then the tag of its slot goes first. */
  wrap = memchr(key, '}', len) == NULL && len > 0;
  if (!wrap)
    tl = redlock__slot_tag(redlock__key_slot(key, len), tag);
  need = wrap ? len + 2 + sl : tl + 2 + len + sl;
  if (need + 1 > outlen)
    return 0;
  out[0] = '{';
  if (wrap) {
    memcpy(out + 1, key, len);
    out[len + 1] = '}';
    memcpy(out + len + 2, suffix, sl + 1);
  } else {
    memcpy(out + 1, tag, tl);
    out[tl + 1] = '}';
    memcpy(out + tl + 2, key, len);
    memcpy(out + tl + 2 + len, suffix, sl + 1);
  }
  return need;
}
