/* The RESP reader's short-reply path (lib/base/reply.c, fast_place_string) on
 * hostile TIME-shaped replies (issue 29, item 6): a 2-element array of
 * bulk strings of up to 32 bytes each. A string of 19 or more digits, or
 * 18 bytes far from '0', once overflowed the `long long` its digits are
 * summed into (signed overflow: undefined behaviour).
 *
 * This executable compiles its own copy of lib/base/reply.c with signed
 * overflow checks that trap (test/meson.build: no sanitizer runtime, so
 * the plain build and the mutants' build catch it too, not only the ASan
 * build): on the old code the test dies of SIGILL at the first such
 * string. It also asserts what the reply must say: a string is `digits`
 * with its value only when it is 1 to 18 decimal digits; anything else is
 * a string and nothing more (the caller, node.c's TIME, refuses it). */
#include <string.h>

#include "harness.h"
#include "reply.h"

/* Parses `s` (one complete reply) and returns the reply; the reader
 * stays valid until the next call. */
static const redlock__reply *parse(redlock__reader *rd, const char *s) {
  const redlock__reply *r = NULL;
  const char *msg = NULL;
  ASSERT_EQ(redlock__reader_feed(rd, s, strlen(s)), 0);
  ASSERT_EQ(redlock__reader_next(rd, &r, &msg), 1);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDLOCK__R_ARRAY);
  ASSERT_EQ(r->elements, 2);
  return r;
}

static void check_string(const redlock__reply *e, const char *bytes,
                         size_t len, int digits, long long value) {
  ASSERT_EQ(e->type, REDLOCK__R_STRING);
  ASSERT_EQ(e->len, len);
  ASSERT(memcmp(e->str, bytes, len) == 0);
  ASSERT_EQ(e->digits, digits);
  ASSERT_EQ(e->integer, value);
}

int main(void) {
  redlock__reader rd;
  const redlock__reply *r;
  char buf[128];
  char hi[19];
  ASSERT_EQ(redlock__reader_init(&rd), 0);

  /* A legitimate TIME reply: both values. */
  r = parse(&rd, "*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n");
  check_string(r->element[0], "1700000000", 10, 1, 1700000000LL);
  check_string(r->element[1], "123456", 6, 1, 123456);

  /* 18 digits: the most that is read as a value. */
  r = parse(&rd, "*2\r\n$18\r\n999999999999999999\r\n$1\r\n0\r\n");
  check_string(r->element[0], "999999999999999999", 18, 1,
               999999999999999999LL);
  check_string(r->element[1], "0", 1, 1, 0);

  /* 19 digits (overflows a long long on its own: 9.99e18 > 9.22e18). */
  r = parse(&rd, "*2\r\n$19\r\n9999999999999999999\r\n$1\r\n7\r\n");
  check_string(r->element[0], "9999999999999999999", 19, 0, 0);
  check_string(r->element[1], "7", 1, 1, 7);

  /* 32 digits, in the second element. */
  r = parse(&rd, "*2\r\n$1\r\n5\r\n$32\r\n"
                 "99999999999999999999999999999999\r\n");
  check_string(r->element[0], "5", 1, 1, 5);
  check_string(r->element[1], "99999999999999999999999999999999", 32, 0,
               0);

  /* 18 bytes that are not digits: 0x80 is -128 as a (signed) char, 176
   * below '0'; summed as if digits, 17 of them reach -1.96e18 and the
   * 18th overflows (where char is signed, as on x86). No value. */
  memset(hi, '\x80', 18);
  hi[18] = '\0';
  snprintf(buf, sizeof(buf), "*2\r\n$18\r\n%s\r\n$1\r\n1\r\n", hi);
  r = parse(&rd, buf);
  check_string(r->element[0], hi, 18, 0, 0);
  check_string(r->element[1], "1", 1, 1, 1);

  /* Digits with a non-digit late: not a value either. */
  r = parse(&rd, "*2\r\n$3\r\n12x\r\n$2\r\n-1\r\n");
  check_string(r->element[0], "12x", 3, 0, 0);
  check_string(r->element[1], "-1", 2, 0, 0);

  redlock__reader_free(&rd);
  return 0;
}
