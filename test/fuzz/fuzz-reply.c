/* libFuzzer target: reply classification. The input is fed to hiredis's
 * RESP reader; every complete reply is classified as the answer to each
 * kind of request. No crash, no leak; a vote is always one of the four. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  redisReader *rd = redisReaderCreate();
  void *reply = NULL;
  int guard = 0;
  if (rd == NULL)
    return 0;
  redisReaderFeed(rd, (const char *)data, size);
  while (guard++ < 64 && redisReaderGetReply(rd, &reply) == REDIS_OK &&
         reply != NULL) {
    int kind;
    for (kind = REDLOCK__REQ_ACQUIRE; kind <= REDLOCK__REQ_INSPECT; kind++) {
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
