#!/usr/bin/env bash
# check-install.sh SRCDIR: install into a fresh prefix and use it as a user
# would (issue 11, items 12 and 13).
#
#  - the installed redlock runs without LD_LIBRARY_PATH (no rpath needed:
#    the tools link the static library);
#  - redlock-faultproxy is in libexec/redlock, not in bin;
#  - the man page redlock(1) is installed and renders without warnings;
#  - `pkg-config --cflags --libs redlock` builds programs against the
#    prefix: one on the blocking API in strict -std=c11 -pedantic-errors
#    with no feature macro (redlock.h alone), one on the async API in
#    strict C11 with the one macro <uv.h> needs (_POSIX_C_SOURCE=200809L,
#    as docs/API.md says); both run.
set -euo pipefail

src=$(cd "$1" && pwd)
cc=${CC:-cc}
work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() { echo "check-install: FAIL: $*" >&2; exit 1; }

# Only the library and the tools: the tests are not part of an install.
meson setup "$work/build" "$src" --prefix="$prefix" -Dtests=false \
  --buildtype=release --werror >"$work/setup.log" 2>&1 ||
  { cat "$work/setup.log"; fail "meson setup"; }
ninja -C "$work/build" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "build"; }
meson install -C "$work/build" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "meson install"; }

# The CLI from the prefix, nothing in the environment to find libraries.
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/redlock" --version) ||
  fail "installed redlock does not run without LD_LIBRARY_PATH"
case $out in redlock\ *) ;; *) fail "redlock --version printed '$out'";; esac
env -u LD_LIBRARY_PATH "$prefix/bin/redlock" acquire --help |
  grep -q "usage: redlock acquire" || fail "redlock acquire --help"
echo "ok: $prefix/bin/redlock runs: $out"

[ ! -e "$prefix/bin/redlock-faultproxy" ] ||
  fail "redlock-faultproxy installed into bin/"
[ -x "$prefix/libexec/redlock/redlock-faultproxy" ] ||
  fail "redlock-faultproxy is not in libexec/redlock"
echo "ok: redlock-faultproxy in libexec/redlock"

man1=$prefix/share/man/man1/redlock.1
[ -f "$man1" ] || fail "man page not installed ($man1)"
# groff (Debian's groff-base, which quickstart installs) renders it: a
# missing groff fails the check rather than skipping it.
command -v groff >/dev/null || fail "groff is not installed (groff-base)"
warn=$(groff -man -ww -z "$man1" 2>&1) || fail "groff: $warn"
[ -z "$warn" ] || fail "man page warnings: $warn"
groff -man -Tutf8 -P-cbou "$man1" 2>/dev/null | grep "EXIT STATUS" >/dev/null ||
  fail "groff does not render the page (no EXIT STATUS section)"
echo "ok: man page $man1"

pc=$(find "$prefix" -name redlock.pc | head -1)
[ -n "$pc" ] || fail "redlock.pc not installed"
export PKG_CONFIG_PATH=${pc%/*}
cflags=$(pkg-config --cflags redlock) || fail "pkg-config --cflags"
libs=$(pkg-config --libs redlock) || fail "pkg-config --libs"
libdir=$(pkg-config --variable=libdir redlock)
echo "ok: pkg-config: $cflags $libs"

cat >"$work/sync.c" <<'EOF'
/* The blocking API in strict C11: redlock.h alone, no feature macro. */
#include <stdio.h>
#include <string.h>

#include <redlock.h>

int main(void) {
  redlock_client_config cfg;
  redlock_sync_t *s = NULL;
  int rc;
  memset(&cfg, 0, sizeof(cfg));   /* no servers: refused with a message */
  rc = redlock_sync_new(&cfg, &s);
  printf("redlock %s: %s: %s\n", redlock_version_string(),
         redlock_err_name(rc), redlock_last_error());
  return rc == REDLOCK_EINVAL && s == NULL ? 0 : 1;
}
EOF
cat >"$work/async.c" <<'EOF'
/* The async API in strict C11 (uv.h needs _POSIX_C_SOURCE=200809L). */
#include <stdio.h>

#include <uv.h>
#include <redlock.h>

int main(void) {
  const char *servers[] = {"127.0.0.1:1"};
  redlock_client_config cfg = {.servers = servers, .n_servers = 1,
                               .quorum = 2};   /* > N: refused */
  redlock_client_t *c = NULL;
  uv_loop_t loop;
  int rc;
  if (uv_loop_init(&loop) != 0)
    return 1;
  rc = redlock_client_new(&loop, &cfg, &c);
  printf("%s: %s\n", redlock_err_name(rc), redlock_last_error());
  uv_loop_close(&loop);
  return rc == REDLOCK_EINVAL && c == NULL ? 0 : 1;
}
EOF
strict=(-std=c11 -pedantic-errors -Wall -Wextra -Werror)
# shellcheck disable=SC2086
"$cc" "${strict[@]}" $cflags "$work/sync.c" -o "$work/sync" $libs \
  -Wl,-rpath,"$libdir" || fail "strict C11 build of a blocking-API program"
"$work/sync" || fail "the blocking-API program"
# shellcheck disable=SC2086
"$cc" "${strict[@]}" -D_POSIX_C_SOURCE=200809L $cflags "$work/async.c" \
  -o "$work/async" $libs -Wl,-rpath,"$libdir" ||
  fail "strict C11 build of an async-API program"
"$work/async" || fail "the async-API program"
echo "ok: strict C11 programs built with pkg-config and run"
