#!/usr/bin/env bash
# check-version.sh SRCDIR CLI VERSION: meson.build's project version is the
# one version (issue 33: `redlock --version` said 0.1.0 whatever the
# release): the CLI prints it, the man page's title carries it, the Debian
# packages' changelog (tools/deb/changelog) has an entry for it. VERSION
# is meson.project_version(), passed by test/cli/meson.build.
set -euo pipefail

src=$1 cli=$2 version=$3
fail() { echo "check-version: FAIL: $*" >&2; exit 1; }

out=$("$cli" --version) || fail "redlock --version exited $?"
[ "$out" = "redlock $version" ] ||
  fail "redlock --version printed '$out', meson.build says $version"
out=$("$cli" -V) || fail "redlock -V exited $?"
[ "$out" = "redlock $version" ] ||
  fail "redlock -V printed '$out', meson.build says $version"
echo "ok: redlock --version: $out"

th=$(grep -m1 '^\.TH ' "$src/tools/redlock.1") || fail "no .TH in redlock.1"
case $th in
  *"\"redlock $version\""*) ;;
  *) fail "tools/redlock.1's title says '$th', meson.build says $version" ;;
esac
echo "ok: redlock.1: $th"

latest=$(head -1 "$src/tools/deb/changelog")
case $latest in
  "redlock ($version) "*) ;;
  *) fail "tools/deb/changelog's latest entry is '$latest', meson.build" \
          "says $version: add an entry" ;;
esac
echo "ok: tools/deb/changelog: $latest"
