/* The small ones of issue 33 ("flock habits and CLI consistency"). N = 3
 * real masters, the restart guard off (brand-new servers).
 *
 *  a) An unreadable --password-file (or REDLOCK_PASSWORD_FILE) exits 78
 *     (EX_CONFIG) naming the file and the option; it exited 1.
 *  b) A bad REDLOCK_RESTART_GUARD and a bad REDLOCK_MAX_TTL both exit 78
 *     naming the variable; the guard's exited 64 naming --restart-guard.
 *     On the command line a bad --restart-guard stays a usage error (64).
 *  c) `status` of a key that is absent shows its pttl as "-" (text) and
 *     null (JSON), not -2.
 *  d) A key with a newline and an escape sequence is echoed escaped
 *     (\n, \x1b) in messages and status, never raw to the terminal.
 *  e) A key that is not UTF-8 is lossless in JSON: each byte that is not
 *     UTF-8 becomes \udcXX (PEP 383's surrogateescape), not U+FFFD.
 *  f) status and stats with stdout closed or full exit 1, saying so; they
 *     exited 0.
 *  g) A command that is not executable: 126, which --help lists.
 *  h) --json stats prints JSON (it printed the Prometheus text, which
 *     stays the default and --prometheus).
 *  i) --json run writes its object to --json-file F or --json-fd N (which
 *     imply --json), apart from the command's stdout (it came after it).
 *  j) --json elect prints one JSON object per event (elected, lost, exit;
 *     it printed none), or to --json-file / --json-fd.
 *  k) `redlock completion bash|zsh`: commands and each command's options
 *     complete, in bash and in zsh (the test command installs zsh; where
 *     it is missing, its part says so and is not run). zsh runs its script
 *     under bashcompinit, whose compgen -W leaves the matching to zsh's
 *     own matcher: the zsh part filters the candidates by the word's
 *     prefix as that matcher does, and compares with bash's. */
#include <stdarg.h>
#include <unistd.h>

#include "harness.h"

#define N 3

static const char *cli;
static char tmpdir[200];
static char err[300], out[300];

#define sh harness_sh

int main(int argc, char **argv) {
  harness_server srv[N];
  char servers[256], buf[8192];

  if (argc < 2)
    TEST_FAIL("usage: test-cli-small PATH-TO-redlock");
  cli = argv[1];
  memset(srv, 0, sizeof(srv));
  harness_start(srv, N);
  snprintf(servers, sizeof(servers), "%s,%s,%s", harness_addr(&srv[0]),
           harness_addr(&srv[1]), harness_addr(&srv[2]));
  snprintf(tmpdir, sizeof(tmpdir), "%s/redlock-cli-small-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  snprintf(err, sizeof(err), "%s/err", tmpdir);
  snprintf(out, sizeof(out), "%s/out", tmpdir);
  setenv("REDLOCK_SERVERS", servers, 1);
  setenv("REDLOCK_RESTART_GUARD", "off", 1);
  unsetenv("REDLOCK_PASSWORD");
  unsetenv("REDLOCK_PASSWORD_FILE");
  unsetenv("REDLOCK_MAX_TTL");

  /* a) an unreadable password file: 78, named. */
  ASSERT_EQ(sh("%s --password-file %s/nonexistent status k 2> %s", cli,
               tmpdir, err), 78);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "a) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "--password-file"));
  ASSERT_NOT_NULL(strstr(buf, "nonexistent"));
  ASSERT_EQ(sh("REDLOCK_PASSWORD_FILE=%s/nonexistent %s acquire k 2> %s",
               tmpdir, cli, err), 78);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_PASSWORD_FILE"));

  /* b) the environment's bad values: 78, the variable named. */
  ASSERT_EQ(sh("REDLOCK_RESTART_GUARD=foo %s status k 2> %s", cli, err), 78);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "b) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_RESTART_GUARD='foo'"));
  ASSERT_EQ(sh("REDLOCK_MAX_TTL=2x %s status k 2> %s", cli, err), 78);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "REDLOCK_MAX_TTL='2x'"));
  ASSERT_EQ(sh("%s --restart-guard foo status k 2> %s", cli, err), 64);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "--restart-guard"));

  /* c) an absent key's pttl. */
  ASSERT_EQ(sh("%s status absent > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "c) %s", buf);
  ASSERT_NULL(strstr(buf, "-2"));
  ASSERT_EQ(sh("%s --json status absent > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_EQ(harness_count(buf, "\"pttl_ms\":null"), N);

  /* d) a key with a newline and ESC [ 2 J (clear the screen). */
  ASSERT_EQ(sh("%s status \"$(printf 'a\\nb\\033[2Jc')\" > %s 2> %s", cli,
               out, err), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "d) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "key a\\nb\\x1b[2Jc: held on 0"));
  ASSERT_NULL(strchr(buf, '\033'));
  ASSERT_EQ(sh("%s -q acquire --ttl 1m \"$(printf 'x\\ny')\" > /dev/null",
               cli), 0);
  ASSERT_EQ(sh("%s -n run \"$(printf 'x\\ny')\" -- true 2> %s", cli, err),
            75);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "redlock: run x\\ny: held by another"));

  /* e) a key that is not UTF-8, in JSON. */
  ASSERT_EQ(sh("%s --json status \"$(printf 'k\\377\\300z\\303\\251')\" > %s",
               cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "e) %.200s\n", buf);
  ASSERT_NOT_NULL(strstr(buf, "\"key\":\"k\\udcff\\udcc0z\xc3\xa9\""));
  ASSERT_NULL(strstr(buf, "fffd"));

  /* f) stdout closed or full. */
  ASSERT_EQ(sh("%s status k >&- 2> %s", cli, err), 1);
  harness_read_file(err, buf, sizeof(buf));
  fprintf(stderr, "f) %s", buf);
  ASSERT_NOT_NULL(strstr(buf, "standard output"));
  ASSERT_EQ(sh("%s status k > /dev/full 2> %s", cli, err), 1);
  ASSERT_EQ(sh("%s stats > /dev/full 2> %s", cli, err), 1);
  harness_read_file(err, buf, sizeof(buf));
  ASSERT_NOT_NULL(strstr(buf, "standard output"));
  ASSERT_EQ(sh("%s stats >&- 2> %s", cli, err), 1);

  /* g) exit 126 (in the table now): a command that is not executable. */
  ASSERT_EQ(sh("touch %s/noexec && %s run g-key -- %s/noexec 2> /dev/null",
               tmpdir, cli, tmpdir), 126);
  ASSERT_EQ(sh("%s --help | grep -q '^  126 '", cli), 0);

  /* h) --json stats is JSON; the Prometheus text stays the default. */
  ASSERT_EQ(sh("%s --json stats > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  fprintf(stderr, "h) %.300s\n", buf);
  ASSERT_EQ(buf[0], '{');
  ASSERT_NOT_NULL(strstr(buf, "{\"command\":\"stats\",\"ok\":true,"));
  ASSERT_EQ(harness_count(buf, "{\"server\":"), N);
  ASSERT_NULL(strstr(buf, "# HELP"));
  ASSERT_EQ(sh("%s stats > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_EQ(strncmp(buf, "# HELP redlock_lock_attempts_total", 34), 0);
  ASSERT_EQ(sh("%s --json stats --prometheus > %s", cli, out), 0);
  harness_read_file(out, buf, sizeof(buf));
  ASSERT_EQ(strncmp(buf, "# HELP ", 7), 0);

  /* i) --json run: the object to --json-file or --json-fd, apart from the
   * command's own stdout. */
  {
    char jf[300];
    snprintf(jf, sizeof(jf), "%s/json", tmpdir);
    ASSERT_EQ(sh("%s --json run --json-file %s i-key -- echo child-out > %s",
                 cli, jf, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "child-out\n");
    harness_read_file(jf, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "{\"command\":\"run\",\"key\":\"i-key\",\"ok\":true,"
                  "\"exit\":0,\"lost\":false}\n");
    ASSERT_EQ(sh("%s run --json-fd 3 i-key -- sh -c 'echo child-out; if "
                 "{ true >&3; } 2> /dev/null; then echo fd-3-inherited; fi' "
                 "> %s 3> %s", cli, out, jf), 0);
    harness_read_file(out, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "child-out\n");   /* the child has no fd 3 */
    harness_read_file(jf, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "{\"command\":\"run\",\"key\":\"i-key\",\"ok\":true,"
                  "\"exit\":0,\"lost\":false}\n");
    ASSERT_EQ(sh("%s run --json-fd 9 i-key -- true 2> %s", cli, err), 64);

    /* j) --json elect: one JSON object per line, per event. */
    ASSERT_EQ(sh("%s --json elect --id me j-key -- echo child-out > %s",
                 cli, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    fprintf(stderr, "j) %s", buf);
    ASSERT_NOT_NULL(strstr(buf, "child-out\n"));
    ASSERT_NOT_NULL(strstr(buf, "{\"command\":\"elect\",\"key\":\"j-key\","
                           "\"event\":\"elected\",\"id\":\"me\"}\n"));
    ASSERT_NOT_NULL(strstr(buf, "{\"command\":\"elect\",\"key\":\"j-key\","
                           "\"event\":\"exit\",\"ok\":true,\"exit\":0,"
                           "\"lost\":false}\n"));
    ASSERT_EQ(sh("%s elect --id me --json-file %s j-key -- echo child-out > "
                 "%s", cli, jf, out), 0);
    harness_read_file(out, buf, sizeof(buf));
    ASSERT_STR_EQ(buf, "child-out\n");
    harness_read_file(jf, buf, sizeof(buf));
    ASSERT_EQ(harness_count(buf, "\"event\":"), 2);
  }

  /* k) shell completion, made from the option table: commands after the
   * global options (a value skipped), each command's options. (zsh's
   * script runs the same function through bashcompinit.) */
  {
    static const char *const cases[][2] = {
        {"redlock --servers x --prefix p ac", "acquire"},
        {"redlock run --verb", "--verbose"},
        {"redlock --json stats --prom", "--prometheus"},
        {"redlock acquire --json-f", ""},   /* run and elect only */
        {"redlock st", "status stats"},
    };
    size_t c;
    char script[300];
    snprintf(script, sizeof(script), "%s/completion.bash", tmpdir);
    ASSERT_EQ(sh("%s completion bash > %s", cli, script), 0);
    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
      ASSERT_EQ(sh("bash -c '. %s; COMP_WORDS=(%s); "
                   "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _redlock; "
                   "echo \"${COMPREPLY[*]}\"' > %s", script, cases[c][0], out),
                0);
      harness_read_file(out, buf, sizeof(buf));
      fprintf(stderr, "k) %s -> %s", cases[c][0], buf);
      buf[strcspn(buf, "\n")] = '\0';
      ASSERT_STR_EQ(buf, cases[c][1]);
    }
    snprintf(script, sizeof(script), "%s/completion.zsh", tmpdir);
    ASSERT_EQ(sh("%s completion zsh > %s", cli, script), 0);
    harness_read_file(script, buf, sizeof(buf));
    ASSERT_EQ(strncmp(buf, "#compdef redlock\n", 17), 0);
    ASSERT_NOT_NULL(strstr(buf, "bashcompinit"));
    if (sh("command -v zsh > /dev/null") != 0) {
      fprintf(stderr, "k) zsh is not installed: its completion not run\n");
    } else {
      for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *last = strrchr(cases[c][0], ' ') + 1;
        /* bashcompinit's _bash_complete runs the function with
         * ksharrays (0-based arrays, as bash's) */
        ASSERT_EQ(sh("zsh -fc 'autoload -U +X compinit && compinit -u; "
                     ". %s; setopt ksharrays; COMP_WORDS=(%s); "
                     "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _redlock; "
                     "print -l -- \"${COMPREPLY[@]}\"' | grep -e '^%s' | "
                     "paste -sd ' ' > %s", script, cases[c][0], last,
                     out), 0);
        harness_read_file(out, buf, sizeof(buf));
        fprintf(stderr, "k) zsh: %s -> %s", cases[c][0], buf);
        buf[strcspn(buf, "\n")] = '\0';
        ASSERT_STR_EQ(buf, cases[c][1]);
      }
    }
    ASSERT_EQ(sh("%s completion fish 2> /dev/null", cli), 64);
  }

  harness_stop_all();
  snprintf(buf, sizeof(buf), "rm -rf %s", tmpdir);
  ASSERT_EQ(sh("%s", buf), 0);
  return 0;
}
