/* alloc.c: allocator hooks and the per-thread last-error message.
 *
 * Owns: the four replaceable allocation functions and the wrappers every
 * other file uses (raw malloc/free are banned elsewhere in lib/). The
 * wrappers keep errno across free and guard calloc against overflow.
 * Does not own: hiredis's allocations (0.14 has no hooks). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redlock.h"
#include "alloc.h"

static redlock_malloc_func fn_malloc = malloc;
static redlock_realloc_func fn_realloc = realloc;
static redlock_calloc_func fn_calloc = calloc;
static redlock_free_func fn_free = free;

int redlock_replace_allocator(redlock_malloc_func m, redlock_realloc_func r,
                              redlock_calloc_func c, redlock_free_func f) {
  if (m == NULL || r == NULL || c == NULL || f == NULL)
    return redlock__fail(REDLOCK_EINVAL,
                         "redlock_replace_allocator: NULL function");
  fn_malloc = m;
  fn_realloc = r;
  fn_calloc = c;
  fn_free = f;
  return 0;
}

void *redlock__malloc(size_t size) {
  if (size == 0)
    size = 1;
  return fn_malloc(size);
}

void *redlock__calloc(size_t count, size_t size) {
  if (count == 0 || size == 0) {
    count = 1;
    size = 1;
  }
  if (SIZE_MAX / count < size)
    return NULL;
  return fn_calloc(count, size);
}

void *redlock__realloc(void *ptr, size_t size) {
  if (size == 0)
    size = 1;
  return fn_realloc(ptr, size);
}

void redlock__free(void *ptr) {
  int saved = errno;
  fn_free(ptr);
  errno = saved;
}

char *redlock__strndup(const char *s, size_t len) {
  char *p = redlock__malloc(len + 1);
  if (p == NULL)
    return NULL;
  memcpy(p, s, len);
  p[len] = '\0';
  return p;
}

char *redlock__strdup(const char *s) {
  return redlock__strndup(s, strlen(s));
}

static _Thread_local char last_error[1024];   /* explanations fit */

int redlock__fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return err;
}

const char *redlock_last_error(void) {
  return last_error;
}

size_t redlock__strlcpy(char *dst, const char *src, size_t size) {
  size_t len = src != NULL ? strlen(src) : 0;
  size_t n = len < size ? len : size - 1;
  if (size == 0)
    return len;
  if (n > 0)
    memcpy(dst, src, n);
  dst[n] = '\0';
  return len;
}
