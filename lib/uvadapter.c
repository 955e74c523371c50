/* uvadapter.c: our own hiredis <-> libuv adapter.
 *
 * Why not hiredis's adapters/libuv.h: on 0.14.1 it returns early on a poll
 * error, and libuv has already stopped the handle, so a refused connect or
 * a reset never calls back (research/hiredis-libuv.md 4.1). It also
 * toggles write interest per command, which libuv turns into
 * epoll_ctl(DEL)+epoll_ctl(ADD), about six syscalls per command.
 *
 * This adapter:
 *  - keeps read interest armed for the life of the connection;
 *  - never polls for writable once connected: a new command only marks
 *    the context dirty, and one uv_prepare callback (just before the loop
 *    blocks) writes every dirty context once: writes are coalesced per loop
 *    turn, so a fan-out to N masters costs N write() calls and no
 *    epoll_ctl;
 *  - polls for writable only while connecting or when the socket buffer
 *    is full (hiredis asks again from inside a write);
 *  - on a poll error, lets hiredis find the error itself through
 *    read/write/SO_ERROR, so every pending callback runs;
 *  - publishes its hooks only after uv_poll_init_socket succeeded, and
 *    turns every hook into a no-op once cleanup started.
 * The struct is freed in the poll handle's close callback. It never
 * touches the client after cleanup. */
#include <hiredis.h>
#include <async.h>

#include "common.h"

typedef struct uvconn {
  uv_poll_t poll;
  redisAsyncContext *ac;
  redlock__flusher *fl;
  redlock__queue dirty_link;
  int dirty;
  int want_write;       /* POLLOUT armed */
  int armed;            /* events currently passed to uv_poll_start */
  int in_write;         /* inside redisAsyncHandleWrite */
  int closing;
} uvconn;

static void on_poll(uv_poll_t *h, int status, int events);

static void conn_arm(uvconn *c) {
  int events = UV_READABLE | (c->want_write ? UV_WRITABLE : 0);
  if (c->closing || events == c->armed)
    return;
  c->armed = events;
  uv_poll_start(&c->poll, events, on_poll);
}

static void conn_write(uvconn *c) {
  c->in_write = 1;
  redisAsyncHandleWrite(c->ac);
  c->in_write = 0;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  uvconn *c = h->data;
  if (c->closing)
    return;
  if (status < 0) {
    /* libuv stopped the handle. Dispatch what was registered: hiredis
     * then sees the error (SO_ERROR while connecting, read() after). */
    c->armed = 0;
    if (c->want_write)
      conn_write(c);
    if (!c->closing)
      redisAsyncHandleRead(c->ac);
    if (!c->closing)
      conn_arm(c);
    return;
  }
  if (events & UV_READABLE)
    redisAsyncHandleRead(c->ac);
  if (!c->closing && (events & UV_WRITABLE))
    conn_write(c);
}

static void on_prepare(uv_prepare_t *h) {
  redlock__flusher *fl = REDLOCK__CONTAINER_OF(h, redlock__flusher, prepare);
  while (!redlock__queue_empty(&fl->dirty)) {
    uvconn *c = REDLOCK__CONTAINER_OF(fl->dirty.next, uvconn, dirty_link);
    redlock__queue_remove(&c->dirty_link);
    c->dirty = 0;
    if (!c->closing)
      conn_write(c);
  }
  uv_prepare_stop(h);
  fl->active = 0;
}

static void hook_add_read(void *priv) {
  uvconn *c = priv;
  conn_arm(c);
}

static void hook_del_read(void *priv) {
  (void)priv;   /* read interest stays armed: no epoll_ctl churn */
}

static void hook_add_write(void *priv) {
  uvconn *c = priv;
  if (c->closing)
    return;
  if (c->in_write || !(c->ac->c.flags & REDIS_CONNECTED)) {
    /* Connecting, or the kernel buffer is full: wait for POLLOUT. */
    c->want_write = 1;
    conn_arm(c);
    return;
  }
  if (c->want_write || c->dirty)
    return;   /* already on its way out */
  c->dirty = 1;
  redlock__queue_insert_tail(&c->fl->dirty, &c->dirty_link);
  if (!c->fl->active) {
    c->fl->active = 1;
    uv_prepare_start(&c->fl->prepare, on_prepare);
  }
}

static void hook_del_write(void *priv) {
  uvconn *c = priv;
  if (c->closing || !c->want_write)
    return;
  c->want_write = 0;
  conn_arm(c);
}

static void on_poll_closed(uv_handle_t *h) {
  redlock__free(h->data);
}

static void hook_cleanup(void *priv) {
  uvconn *c = priv;
  if (c->closing)
    return;
  c->closing = 1;
  if (c->dirty) {
    redlock__queue_remove(&c->dirty_link);
    c->dirty = 0;
  }
  c->ac->ev.data = NULL;
  uv_poll_stop(&c->poll);
  uv_close((uv_handle_t *)&c->poll, on_poll_closed);
}

int redlock__uv_attach(redisAsyncContext *ac, uv_loop_t *loop,
                       redlock__flusher *fl) {
  uvconn *c;
  if (ac->ev.data != NULL)
    return REDLOCK_EINVAL;
  c = redlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return REDLOCK_ENOMEM;
  if (uv_poll_init_socket(loop, &c->poll, ac->c.fd) != 0) {
    redlock__free(c);
    return REDLOCK_EIO;
  }
  c->poll.data = c;
  c->ac = ac;
  c->fl = fl;
  redlock__queue_init(&c->dirty_link);
  ac->ev.data = c;
  ac->ev.addRead = hook_add_read;
  ac->ev.delRead = hook_del_read;
  ac->ev.addWrite = hook_add_write;
  ac->ev.delWrite = hook_del_write;
  ac->ev.cleanup = hook_cleanup;
  c->armed = UV_READABLE;
  uv_poll_start(&c->poll, UV_READABLE, on_poll);
  return 0;
}

int redlock__flusher_init(uv_loop_t *loop, redlock__flusher *fl) {
  redlock__queue_init(&fl->dirty);
  fl->active = 0;
  return uv_prepare_init(loop, &fl->prepare) == 0 ? 0 : REDLOCK_EIO;
}

void redlock__flusher_close(redlock__flusher *fl, uv_close_cb cb) {
  uv_close((uv_handle_t *)&fl->prepare, cb);
}
