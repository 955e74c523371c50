/* The read-write lock's marker is never a token (review item 2). While a
 * read-write lock has owners it holds the plain key of its name set to
 * "__redlock__:rw" (scripts.c, RW_PRELUDE); a plain release or extend
 * given that value as its token would compare equal and delete or cut
 * the marker while readers hold, and a plain lock would then be granted
 * beside them. N = 3 plain masters.
 *
 *  a) The CLI: `acquire --read --ttl 60s job` holds; `release job
 *     __redlock__:rw` and `extend job __redlock__:rw --ttl 100ms` are refused
 *     with a message, the marker stays on every master with its ttl, and a
 *     plain `acquire job` is refused while the reader holds.
 *  b) The library: redlock_lock_adopt refuses a token that starts with
 *     "__redlock__:" (EINVAL), whatever follows.
 *  c) The scripts themselves (defence in depth, for a client that got
 *     past b): every script that compares a key with a given token
 *     (release, extend with and without heal, fence, multi release and
 *     extend, batched extend, takeover) leaves a marker key alone when
 *     the token it is given is the marker. */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scripts.h"
#include "tutil.h"

#define N 3
#define MARK "__redlock__:rw"

static harness_server srv[N];
static const char *cli;
static char tmpdir[200];

/* The marker is on every master with more than min_ms left. */
static void marker_everywhere(const char *key, int64_t min_ms,
                              const char *after) {
  char val[64];
  int i;
  for (i = 0; i < N; i++) {
    int64_t pttl = harness_pttl(&srv[i], key);
    if (harness_get(&srv[i], key, val, sizeof(val)) != 1 ||
        strcmp(val, MARK) != 0)
      TEST_FAIL("after %s: master %d's %s is not the marker any more", after,
                i, key);
    if (pttl < min_ms)
      TEST_FAIL("after %s: master %d's marker has %lld ms left (want > "
                "%lld)", after, i, (long long)pttl, (long long)min_ms);
  }
}

/* `redlock ARGS 2>err`: its exit status, its stderr in msg. */
static int run_cli(char *msg, size_t len, const char *args) {
  char err[300];
  int st;
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  st = harness_sh("%s %s >/dev/null 2>%s", cli, args, err);
  harness_read_file(err, msg, len);
  fprintf(stderr, "redlock %s: exit %d; %s", args, st, msg[0] ? msg : "\n");
  return st;
}

/* EVAL of one of the library's scripts on master 0. */
static void eval(redlock__cmd cmd, int nkeys, const char *const *args,
                 int nargs) {
  const redlock__script *s = redlock__script_of(cmd);
  const char *argv[12];
  size_t lens[12];
  char nk[8], buf[256];
  int i, argc = 0;
  ASSERT_NOT_NULL(s);
  snprintf(nk, sizeof(nk), "%d", nkeys);
  argv[argc] = "EVAL";
  lens[argc++] = 4;
  argv[argc] = s->text;
  lens[argc++] = s->len;
  argv[argc] = nk;
  lens[argc++] = strlen(nk);
  for (i = 0; i < nargs && argc < 12; i++) {
    argv[argc] = args[i];
    lens[argc++] = strlen(args[i]);
  }
  ASSERT_EQ(harness_cmd(&srv[0], buf, sizeof(buf), argc, argv, lens), 0);
  fprintf(stderr, "script %d with the marker as token: %s\n", (int)cmd, buf);
}

/* After one script: the marker on master 0 still there, ttl intact. */
static void marker_kept(const char *what) {
  char val[64];
  int64_t pttl = harness_pttl(&srv[0], "job");
  if (harness_get(&srv[0], "job", val, sizeof(val)) != 1 ||
      strcmp(val, MARK) != 0)
    TEST_FAIL("the %s script given the marker as its token deleted or "
              "replaced it", what);
  if (pttl < 50000)
    TEST_FAIL("the %s script given the marker as its token cut its ttl to "
              "%lld ms", what, (long long)pttl);
}

int main(int argc, char **argv) {
  uv_loop_t loop;
  redlock_client_t *c;
  redlock_lock_t *l;
  char servers[256], msg[1024], buf[64];
  int st;

  if (argc < 2)
    TEST_FAIL("usage: test-redis-marker-token PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-marker-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);

  /* a) the CLI: every step runs, then the checks (so that the old
   * code's failure shows the whole reproduction) */
  ASSERT_EQ(run_cli(msg, sizeof(msg), "acquire --read --ttl 60s job"), 0);
  marker_everywhere("job", 50000, "acquire --read");
  {
    char rel_msg[1024], ext_msg[1024];
    int ext = run_cli(ext_msg, sizeof(ext_msg),
                      "extend job " MARK " --ttl 100ms");
    int rel = run_cli(rel_msg, sizeof(rel_msg), "release job " MARK);
    st = run_cli(msg, sizeof(msg), "acquire --ttl 10s job");
    fprintf(stderr, "release: exit %d, extend: exit %d, then a plain "
            "acquire beside the reader: exit %d\n", rel, ext, st);
    ASSERT_NE(st, 0);   /* the reader still holds */
    marker_everywhere("job", 50000, "release and extend with the marker");
    ASSERT_NE(rel, 0);
    ASSERT_NOT_NULL(strstr(rel_msg, "__redlock__:"));
    ASSERT_NE(ext, 0);
    ASSERT_NOT_NULL(strstr(ext_msg, "__redlock__:"));
  }

  /* b) the library */
  ASSERT_EQ(uv_loop_init(&loop), 0);
  c = tu_client(&loop, srv, N, NULL, N);
  ASSERT_EQ(redlock_lock_new(c, "job", 3, &l), 0);
  ASSERT_EQ(redlock_lock_adopt(l, MARK), REDLOCK_EINVAL);
  fprintf(stderr, "redlock_lock_adopt(\"%s\"): EINVAL (%s)\n", MARK,
         redlock_last_error());
  ASSERT_NOT_NULL(strstr(redlock_last_error(), "__redlock__:"));
  ASSERT_EQ(redlock_lock_adopt(l, "__redlock__:anything"), REDLOCK_EINVAL);
  ASSERT_EQ(redlock_lock_adopt(l, "0123abcd"), 0);   /* a token is fine */
  ASSERT_EQ(redlock_lock_free(l), 0);
  tu_close(&loop, c);

  /* c) the scripts, on master 0 (the marker has > 50 s left there) */
  redlock__scripts_init();
  {
    const char *rel[] = {"job", MARK, "1"};
    const char *ext[] = {"job", MARK, "1", "0"};
    const char *heal[] = {"job", MARK, "1", "1"};
    const char *fence[] = {"job", "job:fence-test", MARK, "5"};
    const char *batch[] = {"job", MARK, "1"};
    const char *take[] = {"job", "0123abcd", "1", MARK};
    eval(REDLOCK__CMD_RELEASE, 1, rel, 3);
    marker_kept("release");
    eval(REDLOCK__CMD_EXTEND, 1, ext, 4);
    marker_kept("extend");
    eval(REDLOCK__CMD_EXTEND, 1, heal, 4);
    marker_kept("extend (heal)");
    eval(REDLOCK__CMD_FENCE, 2, fence, 4);
    ASSERT_EQ(harness_get(&srv[0], "job:fence-test", buf, sizeof(buf)), 0);
    eval(REDLOCK__CMD_MULTI_RELEASE, 1, rel, 3);
    marker_kept("multi release");
    eval(REDLOCK__CMD_MULTI_EXTEND, 1, ext, 4);
    marker_kept("multi extend");
    eval(REDLOCK__CMD_MULTI_EXTEND, 1, heal, 4);
    marker_kept("multi extend (heal)");
    eval(REDLOCK__CMD_BATCH_EXTEND, 1, batch, 3);
    marker_kept("batch extend");
    eval(REDLOCK__CMD_TAKEOVER, 1, take, 4);
    marker_kept("takeover");
  }
  marker_everywhere("job", 50000, "the scripts");

  harness_sh("rm -rf %s", tmpdir);
  harness_stop_all();
  return 0;
}
