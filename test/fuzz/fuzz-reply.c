/* libFuzzer target: reply classification. The input is fed to hiredis's
 * RESP reader; every complete reply is classified as the answer to each
 * kind of request. No crash, no leak; a vote is always one of the four. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* hiredis 0.14 trusts a server's lengths: "*999999999" allocates the
 * element array up front. Replies come from our own masters, so the fuzz
 * input keeps lengths small (<= 4096) and looks at what we classify. */
static int lengths_small(const uint8_t *d, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    if (d[i] == '*' || d[i] == '$') {
      unsigned long v = 0;
      size_t k = i + 1;
      if (k < n && d[k] == '-')
        k++;
      while (k < n && d[k] >= '0' && d[k] <= '9') {
        v = v * 10 + (unsigned long)(d[k] - '0');
        if (v > 4096)
          return 0;
        k++;
      }
    }
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  redisReader *rd;
  void *reply = NULL;
  int guard = 0;
  if (!lengths_small(data, size))
    return 0;
  rd = redisReaderCreate();
  if (rd == NULL)
    return 0;
  redisReaderFeed(rd, (const char *)data, size);
  while (guard++ < 64 && redisReaderGetReply(rd, &reply) == REDIS_OK &&
         reply != NULL) {
    int kind;
    for (kind = REDLOCK__REQ_ACQUIRE; kind <= REDLOCK__REQ_FENCE; kind++) {
      redlock_vote_t vote;
      int error;
      const char *errstr;
      int64_t pttl = -2;
      char buf[80];
      redlock__classify(kind, reply, &vote, &error, &errstr, &pttl, buf,
                        sizeof(buf));
      if (vote != REDLOCK_VOTE_YES && vote != REDLOCK_VOTE_NO &&
          vote != REDLOCK_VOTE_ERR)
        abort();
      if ((vote == REDLOCK_VOTE_ERR) != (error != 0) || errstr == NULL)
        abort();
      (void)strlen(errstr);
    }
    freeReplyObject(reply);
    reply = NULL;
  }
  redisReaderFree(rd);
  return 0;
}
