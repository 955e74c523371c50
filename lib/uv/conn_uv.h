/* conn_uv.h: the libuv transport's functions (conn_uv.c), for the seam's
 * table (sys_uv.c). Nothing else calls them. */
#ifndef REDLOCK_CONN_UV_H
#define REDLOCK_CONN_UV_H

#include "conn.h"

int redlock__uvconn_open(redlock__conn *c, const struct sockaddr *sa,
                         const char *path, redlock__tls_ctx *tls,
                         const char *host, char *err, size_t errlen);
int redlock__uvconn_write(redlock__conn *c);
int redlock__uvconn_read(redlock__conn *c);
void redlock__uvconn_close(redlock__conn *c);
void redlock__uvconn_free(redlock__conn *c);
int redlock__uvconn_flusher_init(redlock__sys *s, redlock__flusher *fl);
void redlock__uvconn_flusher_arm(redlock__flusher *fl);
void redlock__uvconn_flusher_close(redlock__flusher *fl);

#endif
