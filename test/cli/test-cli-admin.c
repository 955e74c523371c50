/* The operator's tools (issue 21, item 11). N = 3 real masters.
 *
 *  a) `redlock unlock KEY` without --force is a usage error (64); with it,
 *     KEY goes on every master whoever holds it, the holder is named (8
 *     characters) with a warning, and the holder's extend then fails.
 *  b) A waiter (--wake) on a key held by a dead owner gets it at once when
 *     the operator forces it open (the release message wakes it).
 *  c) A read-write lock of that name goes too; the fencing counter stays
 *     (the next fenced holder's number is still larger).
 *  d) `redlock leader --watch KEY` prints one line per change of leader:
 *     "-" (none), the identity while an `elect` leads, "-" after it
 *     resigns; SIGTERM ends it. */
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];

#define sh harness_sh

static void first_line(const char *path, char *buf, size_t len) {
  harness_read_file(path, buf, len);
  buf[strcspn(buf, "\n")] = '\0';
}

typedef struct file_has_arg {
  const char *path;
  const char *text;
} file_has_arg;

static int file_has(void *arg) {
  file_has_arg *a = arg;
  char buf[4096];
  harness_read_file(a->path, buf, sizeof(buf));
  return strcmp(buf, a->text) == 0;
}

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], out[300], err[300], out2[300], stop[300];
  char tok[128], buf[4096], val[128];
  pid_t w;
  uint64_t t0;
  int i;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-admin PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-admin-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  snprintf(out2, sizeof(out2), "%s/out2", tmpdir);
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(stop, sizeof(stop), "%s/stop", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* a) */
  ASSERT_EQ(sh("%s acquire --ttl 60s fk > %s", cli, out), 0);
  first_line(out, tok, sizeof(tok));
  ASSERT_EQ(sh("%s unlock fk 2> /dev/null", cli), 64);
  ASSERT_EQ(harness_get(&srv[0], "fk", val, sizeof(val)), 1);
  ASSERT_EQ(sh("%s unlock --force fk > %s 2> %s", cli, out, err), 0);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "a) %s", buf);
  {
    char want[64];
    snprintf(want, sizeof(want), "fk is held by %.8s... on 3 of 3", tok);
    ASSERT_NOT_NULL(strstr(buf, want));
    ASSERT_NULL(strstr(buf, tok));   /* never the whole token */
  }
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "released fk by force on 3 of 3 masters"));
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_get(&srv[i], "fk", val, sizeof(val)), 0);
  ASSERT_EQ(sh("%s extend fk %s 2> /dev/null", cli, tok), 1);

  /* b) */
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "wk", "dead-owner", 60000), 0);
  {
    char *av[] = {"redlock", "acquire", "--wake", "--wait", "20s", "wk",
                  NULL};
    w = harness_spawn(cli, av, out2, NULL);
  }
  {
    /* The waiter listens (a subscriber on every master) before the
     * operator acts. */
    uint64_t end = harness_now_ms() + 10000;
    for (;;) {
      int subs = 0;
      for (i = 0; i < N; i++) {
        if (harness_cmdf(&srv[i], buf, sizeof(buf), "EVAL %s 0 %s",
                         "return redis.call('pubsub','numsub',ARGV[1])[2]",
                         "__redlock__:wk") == 0 && atoi(buf) >= 1)
          subs++;
      }
      if (subs == N)
        break;
      if (harness_now_ms() > end)
        TEST_FAIL("b) the waiter never subscribed");
      uv_sleep(5);
    }
  }
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s -q unlock --force wk > /dev/null", cli), 0);
  ASSERT_EQ(harness_wait_exit(w, 20000), 0);
  fprintf(stderr, "b) the waiter got it %llu ms after the forced release\n",
          (unsigned long long)(harness_now_ms() - t0));
  ASSERT_LT(harness_now_ms() - t0, (uint64_t)harness_bound_ms(1000));

  /* c) */
  ASSERT_EQ(sh("%s acquire --write --ttl 60s rk > /dev/null", cli), 0);
  ASSERT_EQ(harness_cmdf(&srv[0], buf, sizeof(buf), "EXISTS rk:rw"), 0);
  ASSERT_STR_EQ(buf, "1");
  ASSERT_EQ(sh("%s -q unlock --force rk > /dev/null", cli), 0);
  for (i = 0; i < N; i++) {
    ASSERT_EQ(harness_cmdf(&srv[i], buf, sizeof(buf), "EXISTS rk:rw"), 0);
    ASSERT_STR_EQ(buf, "0");
  }
  {
    char f1[64], f2[64];
    ASSERT_EQ(sh("%s acquire --fence --ttl 60s xk > %s", cli, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    ASSERT_EQ(sscanf(buf, "%*s %63s", f1), 1);
    ASSERT_EQ(sh("%s -q unlock --force xk > /dev/null", cli), 0);
    ASSERT_EQ(harness_get(&srv[0], "xk:fence", val, sizeof(val)), 1);
    ASSERT_EQ(sh("%s acquire --fence --ttl 60s xk > %s", cli, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    ASSERT_EQ(sscanf(buf, "%*s %63s", f2), 1);
    ASSERT_GT(strtoull(f2, NULL, 10), strtoull(f1, NULL, 10));
  }

  /* d) */
  {
    char *av[] = {"redlock", "leader", "--watch", "lk", NULL};
    file_has_arg none = {out2, "-\n"}, a = {out2, "-\nA\n"},
                 after = {out2, "-\nA\n-\n"};
    pid_t e;
    w = harness_spawn(cli, av, out2, NULL);
    ASSERT_EQ(harness_wait_for(file_has, &none, 10000), 0);
    snprintf(buf, sizeof(buf), "i=0; while [ ! -e %s ] && [ $i -lt 1000 ]; "
             "do sleep 0.02; i=$((i+1)); done", stop);
    {
      char *ev[] = {"redlock", "elect", "--id", "A", "lk", "--", "sh", "-c",
                    buf, NULL};
      e = harness_spawn(cli, ev, NULL, "/dev/null");
    }
    ASSERT_EQ(harness_wait_for(file_has, &a, 10000), 0);
    close(open(stop, O_WRONLY | O_CREAT, 0644));
    ASSERT_EQ(harness_wait_exit(e, 10000), 0);
    ASSERT_EQ(harness_wait_for(file_has, &after, 10000), 0);
    ASSERT_EQ(kill(w, SIGTERM), 0);
    ASSERT_EQ(harness_wait_exit(w, 5000), 143);
  }

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
