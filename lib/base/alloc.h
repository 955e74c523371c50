/* alloc.h: the library's allocator wrappers (replaceable, see
 * redlock_replace_allocator). Pure: no uv, no hiredis. */
#ifndef REDLOCK_ALLOC_H
#define REDLOCK_ALLOC_H

#include <stddef.h>

void *redlock__malloc(size_t size);
void *redlock__calloc(size_t count, size_t size);
void *redlock__realloc(void *ptr, size_t size);
void redlock__free(void *ptr);
/* Copies len bytes and adds a NUL. */
char *redlock__strndup(const char *s, size_t len);
char *redlock__strdup(const char *s);
/* Copies at most size-1 bytes and NUL-terminates (size > 0); NULL src
 * copies "". Returns strlen(src). */
size_t redlock__strlcpy(char *dst, const char *src, size_t size);

/* Records the message for redlock_last_error() in this thread and returns
 * err, so that `return redlock__fail(REDLOCK_EINVAL, "...", ...)` works. */
int redlock__fail(int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
