/* `redlock ls [PREFIX]` (issue 33: the locks held under a prefix, bounded
 * by SCAN): redlock_client_scan through the CLI, against N = 3 real plain
 * masters and a Redis Cluster of 3 primaries. The restart guard is off
 * (brand-new servers).
 *
 *  a) Under "jobs:": a plain lock (acquire's default holder, its host,
 *     shown as status shows it), a fenced lock without a holder (--no-id:
 *     8 characters; its ":fence" counter is the library's: not listed), a
 *     read-write lock (its hash and marker: one "rw" name), a semaphore
 *     with 2 permits held, a value that carries a holder with an escape
 *     sequence (shown escaped); not "other:x", not the library's
 *     "__redlock__" keys; sorted; --json says complete, holder_id.
 *  b) Prefixes with glob characters ("a*b:", "x[y:") are literal.
 *  c) --max 2 cuts the listing and says so on stderr (exit 0); --max 0
 *     and two prefixes are usage errors; the completion offers ls.
 *  d) 1500 names on one master: more than one SCAN page (COUNT 1000), all
 *     listed (each cursor followed to its end).
 *  e) A master that never answers (SIGSTOP): ls ends well within its
 *     bound, exit 0 from the quorum; two of them and --wait 1s: exit 74
 *     within the bound.
 *  f) One master down: still listed (2 of 3, named on stderr); two down:
 *     69.
 *  g) A cluster master: names stored on different primaries are all
 *     listed; a fenced lock once (not its counter), a read-write lock
 *     once. */
#include <unistd.h>

#include "harness.h"

#define N 3
#define P 3

static const char *cli;
static char err[300], out[300];
static char buf[1 << 20];

#define sh(...) harness_sh_within(30000, __VA_ARGS__)

static int lines(const char *s) {
  return harness_count(s, "\n");
}

int main(int argc, char **argv) {
  harness_server srv[N], cl[P];
  char tmpdir[200], servers[256], tok[256], tok_b[128], cmd[512], line[512];
  uint64_t t0, took;
  int i, rc, owners[P] = {0}, distinct = 0;

  if (argc < 2)
    TEST_FAIL("usage: test-cli-ls PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  memset(cl, 0, sizeof(cl));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-ls-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_PASSWORD_FILE");
  unsetenv("REDLOCK_MAX_TTL");

  /* a) the names under jobs: */
  ASSERT_EQ(sh("%s acquire --ttl 2m jobs:a > %s", cli, out), 0);
  harness_read_file(out, tok, sizeof(tok));
  ASSERT_EQ(sh("%s acquire --ttl 2m --fence --no-id jobs:b > %s", cli, out),
            0);
  harness_read_file(out, tok_b, sizeof(tok_b));
  ASSERT_EQ(sh("%s acquire --ttl 2m --write jobs:rw > /dev/null", cli), 0);
  ASSERT_EQ(sh("%s acquire --ttl 2m other:x > /dev/null", cli), 0);
  for (i = 0; i < 2; i++) {
    snprintf(cmd, sizeof(cmd), "exec %s run --ttl 2m --limit 3 jobs:sem -- "
             "sleep 60", cli);
    harness_spawn_sh(cmd);
  }
  for (i = 0; i < N; i++)
    ASSERT_EQ(harness_set(&srv[i], "jobs:id",
                          "0123456789abcdef0123456789abcdef01234567."
                          "worker-7\033[2J", 120000), 0);
  /* Both permits held (bounded poll on ls itself). */
  t0 = harness_now_ms();
  for (;;) {
    ASSERT_EQ(sh("%s ls jobs:sem > %s", cli, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    if (strstr(buf, "jobs:sem semaphore permits=2/3") != NULL)
      break;
    if (harness_now_ms() - t0 > (uint64_t)harness_bound_ms(10000))
      TEST_FAIL("the semaphore's 2 permits never showed: %s", buf);
    usleep(20000);
  }
  ASSERT_EQ(sh("%s ls jobs: > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "a) %s", buf);
  ASSERT_EQ(lines(buf), 5);
  snprintf(line, sizeof(line), "jobs:a lock on=3/3 pttl_ms=");
  ASSERT_NOT_NULL(strstr(buf, line));
  /* A holder as status shows it: its id (acquire's default: the host),
   * then 8 characters of the token; without one, 8 characters alone. */
  tok[strcspn(tok, "\n")] = '\0';
  ASSERT(strlen(tok) > 41 && tok[40] == '.');
  snprintf(line, sizeof(line), "jobs:a lock on=3/3 pttl_ms=");
  ASSERT_NOT_NULL(strstr(buf, line));
  snprintf(line, sizeof(line), " holder=%s (%.8s...)\n", tok + 41, tok);
  ASSERT_NOT_NULL(strstr(buf, line));
  snprintf(line, sizeof(line), " holder=%.8s...\n", tok_b);
  ASSERT_NOT_NULL(strstr(buf, line));
  ASSERT_NOT_NULL(strstr(buf, "\njobs:b lock on=3/3 pttl_ms="));
  ASSERT_NOT_NULL(strstr(buf, "\njobs:id lock on=3/3 pttl_ms="));
  ASSERT_NOT_NULL(strstr(buf, "holder=worker-7\\x1b[2J (01234567...)\n"));
  ASSERT_NOT_NULL(strstr(buf, "\njobs:rw rw on=3/3\n"));
  ASSERT_NOT_NULL(strstr(buf, "\njobs:sem semaphore permits=2/3\n"));
  ASSERT_NULL(strstr(buf, "fence"));
  ASSERT_NULL(strstr(buf, "other"));
  ASSERT_NULL(strchr(buf, '\033'));
  ASSERT(strstr(buf, "jobs:a ") < strstr(buf, "jobs:b ") &&
              strstr(buf, "jobs:b ") < strstr(buf, "jobs:id ") &&
              strstr(buf, "jobs:id ") < strstr(buf, "jobs:rw ") &&
              strstr(buf, "jobs:rw ") < strstr(buf, "jobs:sem "));
  ASSERT_EQ(sh("%s --json ls jobs: > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "\"complete\":true"));
  ASSERT_EQ(harness_count(buf, "\"name\":"), 5);
  snprintf(line, sizeof(line), "\"holder\":\"%.8s...\",\"holder_id\":\"%s\"",
           tok, tok + 41);
  ASSERT_NOT_NULL(strstr(buf, line));
  ASSERT_NOT_NULL(strstr(buf, "\"holder_id\":null"));
  ASSERT_NOT_NULL(strstr(buf, "{\"name\":\"jobs:rw\",\"kind\":\"rw\","
                              "\"masters\":3}"));
  ASSERT_NOT_NULL(strstr(buf, "\"name\":\"jobs:sem\",\"kind\":\"semaphore\","
                              "\"masters\":3,\"permits_held\":2,\"limit\":3"));
  /* Every name: other:x too, never the library's own keys. */
  ASSERT_EQ(sh("%s ls > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_EQ(lines(buf), 6);
  ASSERT_NOT_NULL(strstr(buf, "\nother:x lock on=3/3"));
  ASSERT_NULL(strstr(buf, "__redlock__"));
  ASSERT_NULL(strstr(buf, "fence"));
  /* Nothing under a prefix: nothing printed, 0. */
  ASSERT_EQ(sh("%s ls nothing-here: > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "");

  /* b) glob characters in the prefix are literal. */
  ASSERT_EQ(sh("%s acquire --ttl 2m 'a*b:1' > /dev/null", cli), 0);
  ASSERT_EQ(sh("%s acquire --ttl 2m 'axb:1' > /dev/null", cli), 0);
  ASSERT_EQ(sh("%s acquire --ttl 2m 'x[y:1' > /dev/null", cli), 0);
  ASSERT_EQ(sh("%s ls 'a*b:' > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "b) %s", buf);
  ASSERT_EQ(lines(buf), 1);
  ASSERT_NOT_NULL(strstr(buf, "a*b:1 lock on=3/3"));
  ASSERT_EQ(sh("%s ls 'x[y:' > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "b) %s", buf);
  ASSERT_EQ(lines(buf), 1);
  ASSERT_NOT_NULL(strstr(buf, "x[y:1 lock on=3/3"));

  /* c) --max cuts, and says so. */
  ASSERT_EQ(sh("%s ls --max 2 jobs: > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_EQ(lines(buf), 2);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "c) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "cut at 2 names"));
  ASSERT_EQ(sh("%s --json ls --max 2 jobs: > %s 2> /dev/null", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "\"complete\":false"));
  ASSERT_EQ(sh("%s ls --max 0 jobs: 2> /dev/null", cli), 64);
  ASSERT_EQ(sh("%s ls a b 2> /dev/null", cli), 64);
  /* The completion (made from the tables) offers ls and its options. */
  ASSERT_EQ(sh("%s completion bash > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, " ls "));
  ASSERT_NOT_NULL(strstr(buf, "    ls) opts=\"--servers"));
  ASSERT_NOT_NULL(strstr(buf, " --wait --max\" ;;"));

  /* d) more names than one SCAN page. */
  ASSERT_EQ(harness_cmdf(&srv[0], line, sizeof(line),
                         "DEBUG POPULATE 1500 pop"), 0);
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s --json ls --max 5000 pop: > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "d) %d names in %llu ms\n", harness_count(buf, "\"name\":"),
          (unsigned long long)(harness_now_ms() - t0));
  ASSERT_EQ(harness_count(buf, "\"name\":"), 1500);
  ASSERT_NOT_NULL(strstr(buf, "\"complete\":true"));

  /* e) masters that never answer. */
  harness_pause(&srv[0]);
  t0 = harness_now_ms();
  ASSERT_EQ(sh("%s ls jobs: > %s 2> %s", cli, out, err), 0);
  took = harness_now_ms() - t0;
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "e) one paused: %llu ms\n%s", (unsigned long long)took,
          buf);
  ASSERT(took < (uint64_t)harness_bound_ms(5000));
  ASSERT_NOT_NULL(strstr(buf, "jobs:a lock on=2/3"));
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "%s", buf);
  ASSERT_NOT_NULL(strstr(buf, "2 of 3 masters read"));
  harness_pause(&srv[1]);
  t0 = harness_now_ms();
  rc = sh("%s ls --wait 1s --connect-timeout 3s jobs: > %s 2> %s", cli, out,
          err);
  took = harness_now_ms() - t0;
  harness_read_file(err, buf, sizeof(buf));
  harness_read_file(out, buf + strlen(buf), sizeof(buf) - strlen(buf));
  fprintf(stderr, "e) two paused: %llu ms: %s", (unsigned long long)took,
          buf);
  ASSERT_EQ(rc, 74);
  ASSERT(took < (uint64_t)harness_bound_ms(8000));
  ASSERT_NOT_NULL(strstr(buf, "deadline"));
  harness_resume(&srv[0]);
  harness_resume(&srv[1]);

  /* f) masters down. */
  harness_kill(&srv[2]);
  ASSERT_EQ(sh("%s ls jobs: > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "f) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "jobs:rw rw on=2/3"));
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "f) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "2 of 3 masters read"));
  harness_kill(&srv[1]);
  ASSERT_EQ(sh("%s ls jobs: > %s 2> %s", cli, out, err), 69);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "");
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "f) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "too few masters"));

  /* g) a cluster master: names on every primary. */
  for (i = 0; i < P; i++)
    cl[i].cluster = 1;
  harness_start(cl, P);
  harness_cluster_make(cl, P, P);
  setenv("REDLOCK_SERVERS", harness_cluster_addr(&cl[0]), 1);
  for (i = 0; i < 12; i++) {
    snprintf(line, sizeof(line), "cl:%d", i);
    ASSERT_EQ(sh("%s acquire --ttl 2m %s > /dev/null", cli, line), 0);
    owners[harness_cluster_owner(cl, P, line)]++;
  }
  for (i = 0; i < P; i++)
    distinct += owners[i] > 0;
  ASSERT(distinct >= 2);
  /* A fenced lock ("{cl:f}:fence" is the library's) and a read-write
   * lock ("{cl:w}:rw" and its marker: one name). */
  ASSERT_EQ(sh("%s acquire --ttl 2m --fence cl:f > /dev/null", cli), 0);
  ASSERT_EQ(sh("%s acquire --ttl 2m --write cl:w > /dev/null", cli), 0);
  ASSERT_EQ(sh("%s ls cl: > %s 2> %s", cli, out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "g) on %d primaries:\n%s", distinct, buf);
  ASSERT_EQ(lines(buf), 14);
  ASSERT_EQ(harness_count(buf, " lock on=1/1 "), 13);
  ASSERT_NOT_NULL(strstr(buf, "\ncl:w rw on=1/1\n"));
  ASSERT_NULL(strstr(buf, "fence"));
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "");

  harness_sh("rm -rf %s", tmpdir);
  /* before main returns: the servers' records live in its frame */
  harness_stop_all();
  fprintf(stderr, "PASS\n");
  return 0;
}
