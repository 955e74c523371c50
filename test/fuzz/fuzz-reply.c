/* libFuzzer target: the RESP reader (hiredis's parser building our reply
 * objects in an arena, lib/base/reply.c) and reply classification. The input
 * is fed in two pieces (a reply split across reads); every complete reply
 * is classified as the answer to each command. No crash, no leak; a vote
 * is always one of the four. Lengths are not filtered: the reader bounds
 * them itself (reply.h), so "*999999999" must cost nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "scripts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void classify_all(const redlock__reply *r) {
  int cmd;
  for (cmd = 0; cmd < REDLOCK__N_CMDS; cmd++) {
    redlock__vote v;
    redlock__classify((redlock__cmd)cmd, r, &v);
    if (v.vote != REDLOCK_VOTE_YES && v.vote != REDLOCK_VOTE_NO &&
        v.vote != REDLOCK_VOTE_ERR)
      abort();
    if ((v.vote == REDLOCK_VOTE_ERR) != (v.error != 0) || v.errstr == NULL)
      abort();
    (void)strlen(v.errstr);
    if (v.holder_len > 0 && memchr(v.holder, '\0', v.holder_len + 1) == NULL)
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  redlock__reader rd;
  size_t half = size / 2;
  int pass;
  if (redlock__reader_init(&rd) != 0)
    return 0;
  for (pass = 0; pass < 2; pass++) {
    const char *p = (const char *)data + (pass ? half : 0);
    size_t n = pass ? size - half : half;
    int guard = 0;
    if (redlock__reader_feed(&rd, p, n) != 0)
      break;
    while (guard++ < 64) {
      const redlock__reply *r;
      const char *msg;
      int rc = redlock__reader_next(&rd, &r, &msg);
      if (rc <= 0)
        break;
      classify_all(r);
    }
  }
  redlock__reader_free(&rd);
  return 0;
}
