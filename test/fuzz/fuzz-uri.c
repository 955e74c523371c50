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
    /* The display never shows a password field (a ':' in its userinfo:
     * the user is %-encoded, so only a password could put one there) and
     * holds no control character or space (a forged log line). The old
     * check, no ":password@" anywhere, met false alarms: the user "a:pw@",
     * or the password "//u" against "redis://u@h". */
    for (const char *c = u.display; *c != '\0'; c++)
      if ((unsigned char)*c <= ' ' || *c == 0x7f)
        abort();
    {
      const char *p = strstr(u.display, "://");
      if (p != NULL) {
        const char *at = strchr(p + 3, '@');
        const char *slash = strchr(p + 3, '/');
        if (at != NULL && (slash == NULL || at < slash) &&
            memchr(p + 3, ':', (size_t)(at - p - 3)) != NULL)
          abort();
      }
    }
    redlock__uri_free(&u);
  } else if (u.host != NULL || u.display != NULL || u.path != NULL) {
    abort();
  }
  free(s);
  return 0;
}
