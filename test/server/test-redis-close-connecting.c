/* Closing a client while a master's connect() is still in flight must not
 * leak.
 *
 * The sequence: the client starts connecting (non-blocking connect() to a
 * port where nothing listens: it is refused only when the loop polls), an
 * acquire's SET is queued on that connecting context, then
 * redlock_client_close(). In the next loop turn the close timer runs
 * first: it aborts the lock (ECANCELED; its cleanup is queued too) and
 * closes the node, which waits for its pending requests. Then the poll
 * phase reports the refused connect: the node finishes closing (freeing
 * its list of abandoned tokens), and hiredis then calls the pending
 * callbacks with NULL; a SET that fails that way is recorded as
 * "abandoned" (it may have landed) - in a list that was already freed,
 * so the entry (a copy of the key) is never freed.
 *
 * Detection: the library's allocator is replaced (public API) by one that
 * counts live blocks, so a plain build sees the leak too: once the client
 * is closed, nothing the library allocated may remain. The count is
 * checked at the end without aborting, so that LeakSanitizer (ASan build)
 * and valgrind report the leaked block as well.
 *
 * Cases: N=1 (the refused master alone), and N=3 with one refused address
 * and two real masters (the SET lands on those two and the close's
 * cleanup removes it: no key is left). A control case first: an ordinary
 * open/acquire/close leaves no block behind (the counter is right). */
#include <stdatomic.h>

#include "tutil.h"

static atomic_long live_blocks;

static void *count_malloc(size_t n) {
  void *p = malloc(n);
  if (p != NULL)
    atomic_fetch_add(&live_blocks, 1);
  return p;
}

static void *count_calloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p != NULL)
    atomic_fetch_add(&live_blocks, 1);
  return p;
}

static void *count_realloc(void *old, size_t n) {
  void *p = realloc(old, n);
  if (old == NULL && p != NULL)
    atomic_fetch_add(&live_blocks, 1);
  return p;
}

static void count_free(void *p) {
  if (p != NULL)
    atomic_fetch_sub(&live_blocks, 1);
  free(p);
}

static void on_closed(redlock_client_t *c, void *arg) {
  (void)c;
  *(volatile int *)arg = 1;
}

static int leaks;

/* Opens a client on `servers`, queues an acquire while the nodes are
 * still connecting, closes the client in the same loop turn, and checks
 * the outcome: the acquire is canceled, the close completes, the loop is
 * empty, and every block the library allocated was freed. */
static void close_while_connecting(const char *what, const char **servers,
                                   size_t n) {
  uv_loop_t loop;
  redlock_client_config cfg;
  redlock_client_t *c = NULL;
  redlock_lock_t *l = NULL;
  redlock_acquire_opts once = {.wait_ms = -1};
  volatile int closed = 0;
  tu_op op;
  long left;

  ASSERT_EQ(atomic_load(&live_blocks), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = n;
  cfg.connect_timeout_ms = 5000;
  cfg.command_timeout_ms = 5000;
  cfg.restart_guard_ms = -1;
  ASSERT_EQ(redlock_client_new(&loop, &cfg, &c), 0);
  ASSERT_EQ(redlock_lock_new(c, "cc-key", 6, &l), 0);
  memset(&op, 0, sizeof(op));
  ASSERT_EQ(redlock_lock_acquire(l, 10000, &once, tu_cb, &op), 0);
  ASSERT_EQ(op.done, 0);
  ASSERT_EQ(redlock_client_close(c, on_closed, (void *)&closed), 0);
  if (harness_run_until(&loop, &closed, 10000) != 0)
    TEST_FAIL("%s: client close did not complete", what);
  ASSERT_EQ(op.calls, 1);
  ASSERT_EQ(op.status, REDLOCK_ECANCELED);
  harness_loop_close(&loop, 5000);
  left = atomic_load(&live_blocks);
  if (left != 0) {
    fprintf(stderr, "%s:%d: FAIL: %s: %ld block(s) allocated by the "
            "library still live after the client closed (leak)\n",
            __FILE__, __LINE__, what, left);
    leaks++;
    atomic_store(&live_blocks, 0);   /* next case counts from zero */
  }
}

int main(void) {
  harness_server srv[2];
  const char *addrs[3];
  char refused[32];
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  redlock_acquire_opts once = {.wait_ms = -1};
  tu_op op;
  int i;

  ASSERT_EQ(redlock_replace_allocator(count_malloc, count_realloc,
                                      count_calloc, count_free), 0);
  memset(srv, 0, sizeof(srv));
  harness_start(srv, 2);
  snprintf(refused, sizeof(refused), "127.0.0.1:%d", harness_free_port());

  /* Control: an ordinary life cycle leaves nothing behind. */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, 2, NULL, 2);
  ASSERT_EQ(redlock_lock_new(c, "ctl", 3, &l), 0);
  ASSERT_EQ(tu_acquire(&loop, l, 10000, &once, &op), 0);
  ASSERT_EQ(tu_release(&loop, l, &op), 0);
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);
  ASSERT_EQ(atomic_load(&live_blocks), 0);

  /* N=1: the only master refuses the connection. */
  addrs[0] = refused;
  close_while_connecting("N=1, refused", addrs, 1);

  /* N=3: one refused address, two real masters. */
  harness_addrs(srv, 2, addrs);
  addrs[2] = refused;
  close_while_connecting("N=3, one refused", addrs, 3);
  for (i = 0; i < 2; i++)
    ASSERT_EQ(harness_dbsize(&srv[i]), 0);

  harness_stop_all();
  if (leaks > 0) {
    /* Not an abort: let LeakSanitizer / valgrind report the block. */
    fprintf(stderr, "FAIL: %d case(s) leaked\n", leaks);
    return 1;
  }
  return 0;
}
