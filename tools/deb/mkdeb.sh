#!/usr/bin/env bash
# mkdeb.sh SRCDIR OUTDIR: the Debian packages of the tree at SRCDIR, made
# with dpkg-deb from a staged `meson install` (no debian/ directory, no
# dpkg-buildpackage), written to OUTDIR; prints their paths, one a line.
#
#   libredlock0     the shared library (its soname: libredlock.so.0)
#   libredlock-dev  redlock.h, the static library, libredlock.so and
#                   redlock.pc (for pkg-config --cflags --libs redlock)
#   redlock         the CLI, its man page, redlock-faultproxy (libexec)
#
# Three, as Debian packages libraries (policy 8.1, 8.2): programs built
# against the library need only libredlock0, and a later soname can be
# installed beside it; a fleet that runs the CLI needs only `redlock`,
# which links the static library (no libredlock0, no headers).
#
# Owns: its temporary directory (a meson build of the library and tools
# only, with Debian's build flags and prefix /usr, and the staged files).
# Does not own: SRCDIR's build directories (never touched) or anything
# installed on the machine (this only builds; dpkg -i is the caller's).
# Invariants: the version is meson.build's (the one `redlock --version`
# prints); tools/deb/changelog's latest entry must be that version, or
# nothing is built. Every staged file goes to exactly one package: a file
# `meson install` gains that no package takes stops the build.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: mkdeb.sh SRCDIR OUTDIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
fail() { echo "mkdeb: $*" >&2; exit 1; }
for t in meson ninja dpkg-deb dpkg-shlibdeps dpkg-buildflags gzip; do
  command -v "$t" >/dev/null ||
    fail "$t is missing (Debian: apt-get install meson ninja-build dpkg-dev)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
build=$work/build stage=$work/stage

# The build: Debian's flags (hardening, -O2 -g; buildtype plain, as
# Debian's meson helper does), the library and the tools only.
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
meson setup "$build" "$src" --prefix=/usr --buildtype=plain -Dtests=false \
  --werror >"$work/setup.log" 2>&1 ||
  { cat "$work/setup.log" >&2; fail "meson setup"; }
version=$(meson introspect --projectinfo "$build" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
latest=$(sed -n '1s/^redlock (\([^)]*\)).*/\1/p' "$src/tools/deb/changelog")
[ "$latest" = "$version" ] ||
  fail "tools/deb/changelog's latest entry is '$latest', meson.build's" \
       "version $version: add an entry for $version"
# Only what is installed (not the benchmarks): their outputs, by name.
mapfile -t targets < <(meson introspect --targets "$build" | python3 -c '
import json, os, sys
b = sys.argv[1]
for t in json.load(sys.stdin):
    if t.get("installed"):
        for f in t["filename"]:
            print(os.path.relpath(f, b))' "$build")
ninja -C "$build" "${targets[@]}" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "build"; }
DESTDIR=$stage meson install -C "$build" --no-rebuild --strip \
  >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "meson install"; }

# The changelog's date is the packages' (files' times, reproducible).
maint=$(sed -n 's/^ -- \(.*>\)  .*/\1/p' "$src/tools/deb/changelog" | head -1)
date=$(sed -n 's/^ -- .*>  \(.*\)$/\1/p' "$src/tools/deb/changelog" | head -1)
SOURCE_DATE_EPOCH=$(date -d "$date" +%s) ||
  fail "tools/deb/changelog: unreadable date '$date'"
export SOURCE_DATE_EPOCH
arch=$(dpkg --print-architecture)

# pkg: which staged files (shell patterns under usr/) each package takes.
declare -A takes=(
  [libredlock0]='usr/lib/*/libredlock.so.[0-9]*'
  [libredlock-dev]='usr/include/* usr/lib/*/libredlock.so usr/lib/*/libredlock.a usr/lib/*/pkgconfig/*'
  [redlock]='usr/bin/* usr/libexec/* usr/share/man/*'
)
declare -A taken=()
for pkg in libredlock0 libredlock-dev redlock; do
  root=$work/pkg/$pkg
  mkdir -p "$root/DEBIAN"
  (
    cd "$stage"
    # shellcheck disable=SC2086
    for f in ${takes[$pkg]}; do
      [ -e "$f" ] || [ -L "$f" ] || fail "$pkg: nothing staged matches $f"
      find "$f" \( -type f -o -type l \) -print
    done
  ) >"$work/$pkg.files"
  while read -r f; do
    [ -z "${taken[$f]:-}" ] || fail "$f is in ${taken[$f]} and in $pkg"
    taken[$f]=$pkg
    mkdir -p "$root/$(dirname "$f")"
    cp -a "$stage/$f" "$root/$f"
  done <"$work/$pkg.files"
  doc=$root/usr/share/doc/$pkg
  mkdir -p "$doc"
  cp "$src/tools/deb/copyright" "$doc/copyright"
  # A native package (its upstream is this tree): changelog.gz.
  gzip -9n <"$src/tools/deb/changelog" >"$doc/changelog.gz"
done
while read -r f; do
  [ -n "${taken[${f#./}]:-}" ] ||
    fail "meson installs ${f#./}, which no package takes (mkdeb.sh: takes)"
done < <(cd "$stage" && find . \( -type f -o -type l \) -print)

# Debian's modes: 0644 files (shared libraries too), 0755 programs and
# directories; man pages compressed; the static library without debug
# symbols, no .comment sections (as dh_strip leaves them; meson's --strip
# took the symbols).
for pkg in libredlock0 libredlock-dev redlock; do
  root=$work/pkg/$pkg
  find "$root" -type d -exec chmod 0755 {} +
  find "$root" -type f -exec chmod 0644 {} +
done
chmod 0755 "$work"/pkg/redlock/usr/bin/* \
  "$work"/pkg/redlock/usr/libexec/redlock/*
find "$work/pkg/redlock/usr/share/man" -type f -name '*.[0-9]' \
  -exec gzip -9n {} +
find "$work/pkg/libredlock-dev" -name '*.a' -exec strip --strip-debug \
  --remove-section=.comment --remove-section=.note \
  --enable-deterministic-archives {} +
strip --remove-section=.comment --remove-section=.note \
  "$work"/pkg/redlock/usr/bin/* "$work"/pkg/redlock/usr/libexec/redlock/* \
  "$work"/pkg/libredlock0/usr/lib/*/libredlock.so.*.*

# Depends of the ELF files: dpkg-shlibdeps (the shlibs of the libraries
# they link), which wants a debian/control naming the packages.
mkdir -p "$work/shl/debian"
printf 'Source: redlock\n\nPackage: libredlock0\nArchitecture: any\n\nPackage: redlock\nArchitecture: any\n' \
  >"$work/shl/debian/control"
shlibs_of() {   # files... -> "libc6 (>= 2.34), ..."
  (cd "$work/shl" && dpkg-shlibdeps -O "${@/#/-e}" 2>"$work/shlibdeps.log") |
    sed -n 's/^shlibs:Depends=//p'
}
lib_depends=$(shlibs_of "$work"/pkg/libredlock0/usr/lib/*/libredlock.so.*.*)
cli_depends=$(shlibs_of "$work"/pkg/redlock/usr/bin/redlock \
  "$work"/pkg/redlock/usr/libexec/redlock/redlock-faultproxy)
if [ -z "$lib_depends" ] || [ -z "$cli_depends" ]; then
  cat "$work/shlibdeps.log" >&2
  fail "dpkg-shlibdeps found no Depends"
fi
# libredlock-dev: the packages of the .pc files redlock.pc requires
# (pkg-config --libs redlock needs them, Requires.private too).
pc=$(find "$stage" -name redlock.pc | head -1)
dev_depends="libredlock0 (= $version)"
for req in $(sed -n 's/^Requires\(\.private\)\{0,1\}: *//p' "$pc" |
             tr ',' '\n' | awk '{print $1}'); do
  path=$(pkg-config --path "$req") || fail "redlock.pc requires $req: not found"
  owner=$(dpkg-query -S "$(readlink -f "$path")" 2>/dev/null |
          head -1 | cut -d: -f1) || true
  [ -n "$owner" ] || fail "no package owns $path ($req, for libredlock-dev)"
  dev_depends="$dev_depends, $owner"
done

soname=$(cd "$work"/pkg/libredlock0/usr/lib/* && ls libredlock.so.[0-9]* |
  sed -n 's/^libredlock\.so\.\([0-9]*\)$/\1/p')
[ "$soname" = 0 ] ||
  fail "the soname is libredlock.so.$soname: the runtime package's name" \
       "(libredlock0) must follow it"
echo "libredlock $soname libredlock0 (>= $version)" \
  >"$work/pkg/libredlock0/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$work/pkg/libredlock0/DEBIAN/triggers"
chmod 0644 "$work"/pkg/libredlock0/DEBIAN/*

synopsis='distributed locks over N Redis masters (Redlock)'
long=' The Redlock algorithm on libuv: a lock is held when a quorum of
 independent Redis masters accepted it within its validity; one master is
 the ordinary single-instance Redis lock. Fencing tokens, a restart guard
 for masters that may lose keys, read-write locks, counting semaphores and
 leader elections.'
control() {   # pkg section multiarch depends description-first-line extra
  local pkg=$1 root=$work/pkg/$1
  {
    echo "Package: $pkg"
    echo "Source: redlock"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: $maint"
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
    echo "Depends: $4"
    [ "$3" = no ] || echo "Multi-Arch: $3"
    echo "Section: $2"
    echo "Priority: optional"
    echo "Description: $5"
    echo "$long"
    echo " ."
    echo "$6"
  } >"$root/DEBIAN/control"
}
control libredlock0 libs same "$lib_depends" "$synopsis - library" \
' This package has the shared library (C API: async on libuv, and blocking).'
control libredlock-dev libdevel same "$dev_depends" \
  "$synopsis - development files" \
' This package has the header, the static library and the pkg-config file
 (pkg-config --cflags --libs redlock).'
control redlock utils no "$cli_depends" "$synopsis - command-line tool" \
' This package has the redlock command (like flock(1), across hosts: run a
 command while holding a lock, elect a leader, inspect and force locks) and
 redlock-faultproxy, the fault-injecting TCP proxy of the failure drills.'

for pkg in libredlock0 libredlock-dev redlock; do
  root=$work/pkg/$pkg
  (cd "$root" && find usr -type f -print0 | LC_ALL=C sort -z |
     xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/md5sums" "$root/DEBIAN/control"
  deb=$out/${pkg}_${version}_$arch.deb
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null ||
    fail "dpkg-deb --build $pkg"
  echo "$deb"
done
