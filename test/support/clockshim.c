/* clockshim.c: an LD_PRELOAD library that steps a process's wall clock.
 *
 * Tests start one redis-server with LD_PRELOAD=<this library> and
 * REDLOCK_CLOCK_FILE=<file>; the file holds an offset in milliseconds as
 * a signed 64-bit integer at byte 0 (the harness writes it with pwrite:
 * harness_clock_step). Every call of clock_gettime() on CLOCK_REALTIME (and
 * its _COARSE variant), gettimeofday() and time() returns the real wall
 * clock plus that offset, read afresh at each call from a shared mapping
 * of the file: a step takes effect at once, in every thread.
 *
 * Why not libfaketime: it allocates inside the clock calls, and redis's
 * jemalloc reads the clock while holding its own locks (a deadlock). This
 * shim never allocates: the real clocks come from the system calls
 * themselves (no vDSO, no libc wrapper that could recurse), and the file
 * is mapped once, on the first call, with open/mmap system calls.
 * CLOCK_MONOTONIC and the other clocks pass through untouched. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_map;   /* NULL: no file (offset 0) */
static int init_state;                 /* 0 not yet, 1 busy, 2 done */

static void shim_init(void) {
  const char *path;
  long fd;
  void *p;
  if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 2)
    return;
  if (!__sync_bool_compare_and_swap(&init_state, 0, 1)) {
    while (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != 2)
      ;   /* another thread maps the file (a few system calls) */
    return;
  }
  path = getenv("REDLOCK_CLOCK_FILE");
  if (path != NULL) {
    fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      p = (void *)syscall(SYS_mmap, NULL, (size_t)4096, PROT_READ,
                          MAP_SHARED, (int)fd, (off_t)0);
      syscall(SYS_close, (int)fd);
      if (p != MAP_FAILED)
        offset_map = p;
    }
  }
  __atomic_store_n(&init_state, 2, __ATOMIC_RELEASE);
}

static int64_t offset_ns(void) {
  shim_init();
  if (offset_map == NULL)
    return 0;
  return __atomic_load_n(offset_map, __ATOMIC_RELAXED) * 1000000LL;
}

static void shift(struct timespec *ts, int64_t ns) {
  int64_t total = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + ns;
  ts->tv_sec = (time_t)(total / 1000000000LL);
  ts->tv_nsec = (long)(total % 1000000000LL);
  if (ts->tv_nsec < 0) {
    ts->tv_nsec += 1000000000L;
    ts->tv_sec--;
  }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  long rc = syscall(SYS_clock_gettime, id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
    shift(ts, offset_ns());
  return (int)rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0)
    return -1;
  shift(&ts, offset_ns());
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

time_t time(time_t *out) {
  struct timespec ts;
  if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0)
    return (time_t)-1;
  shift(&ts, offset_ns());
  if (out != NULL)
    *out = ts.tv_sec;
  return ts.tv_sec;
}
