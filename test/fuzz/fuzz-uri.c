/* libFuzzer target: the server address parser. Any input: no crash, no
 * leak, and on success the fields are consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redlock.h"
#include "uri.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  char err[128];
  redlock__uri u;
  if (s == NULL)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  if (redlock__uri_parse(s, &u, err, sizeof(err)) == 0) {
    if (u.display == NULL || (u.host == NULL) == (u.path == NULL))
      abort();
    if (u.host != NULL && (u.port < 1 || u.port > 65535))
      abort();
    if (u.password != NULL) {
      /* The display never shows the password: no ":password@" in it. */
      size_t n = strlen(u.password) + 3;
      char *pat = malloc(n);
      if (pat != NULL) {
        pat[0] = ':';
        memcpy(pat + 1, u.password, n - 3);
        pat[n - 2] = '@';
        pat[n - 1] = '\0';
        if (strstr(u.display, pat) != NULL)
          abort();
        free(pat);
      }
    }
    redlock__uri_free(&u);
  } else if (u.host != NULL || u.display != NULL || u.path != NULL) {
    abort();
  }
  free(s);
  return 0;
}
