#!/usr/bin/env bash
# check-deb.sh SRCDIR: the Debian packages (tools/deb/mkdeb.sh) installed
# on this machine as an operator would, used, and removed (issue 33,
# "Installing on many hosts"):
#
#  - dpkg -i of libredlock0, libredlock-dev and redlock;
#  - the installed /usr/bin/redlock: --version is the packages' version
#    (meson.build's), and `redlock run` holds a lock on a redis-server
#    this script starts on loopback and stops by PID;
#  - a C program built with `pkg-config --cflags --libs redlock` (the
#    system's paths, no -L, no rpath) links the installed libredlock.so.0
#    and takes, is refused, releases and takes again a lock on that server;
#  - dpkg -P of the three: every path they installed that was not there
#    before (dpkg -L, taken before the removal) is gone.
#
# Needs root (dpkg -i): exits 77 (skipped) otherwise. Disturbs nothing:
# its own meson build in a temporary directory (no build/ is used), and
# it refuses (exit 77, with the reason) when one of the packages is
# installed already or when a file they hold exists on the machine (a
# `meson install --prefix=/usr`): dpkg would overwrite it, then remove it.
set -euo pipefail

src=$(cd "$1" && pwd)
pkgs=(libredlock0 libredlock-dev redlock)
t0=$(date +%s%N)
elapsed() { echo $(( ($(date +%s%N) - t0) / 1000000 )) ms; }
fail() { echo "check-deb: FAIL: $*" >&2; exit 1; }
skip() { echo "check-deb: SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "dpkg -i needs root"
command -v dpkg >/dev/null || skip "not a Debian system (no dpkg)"
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case $st in
    ""|*not-installed) ;;
    *) skip "$p is on this machine ($st): not touched (dpkg -P it first)" ;;
  esac
done

# dpkg ACTION ARGS..., waiting (up to 60 s) while another dpkg or apt
# holds dpkg's lock (an apt-get install elsewhere on the machine); its
# output in $work/dpkg-ACTION.log.
dpkg_run() {
  local action=$1
  shift
  for _ in $(seq 30); do
    dpkg "$action" "$@" >"$work/dpkg$action.log" 2>&1 && return 0
    grep -q "locked by another process" "$work/dpkg$action.log" || return 1
    sleep 2
  done
  return 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-checkdeb.XXXXXX")
redis_pid="" installed=0
cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  # A failure between dpkg -i and dpkg -P leaves nothing installed.
  [ "$installed" = 0 ] || dpkg -P "${pkgs[@]}" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

bash "$src/tools/deb/mkdeb.sh" "$src" "$work/out" >"$work/debs" ||
  fail "mkdeb.sh"
mapfile -t debs <"$work/debs"
[ ${#debs[@]} -eq 3 ] || fail "mkdeb.sh made ${#debs[@]} packages, not 3"
version=$(dpkg-deb -f "${debs[2]}" Version)
echo "ok: built ${debs[*]##*/} ($(elapsed))"

# What the packages hold that the machine has: not ours to overwrite.
: >"$work/paths"
for d in "${debs[@]}"; do
  dpkg-deb --fsys-tarfile "$d" | tar -t | sed 's|^\./|/|; s|/$||' |
    grep -v '^/\{0,1\}$' >>"$work/paths"
done
: >"$work/new"
while read -r p; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    if [ ! -d "$p" ] || [ -L "$p" ]; then
      skip "$p exists (not from these packages): dpkg would replace it"
    fi
  else
    echo "$p" >>"$work/new"
  fi
done <"$work/paths"

installed=1
dpkg_run -i "${debs[@]}" || { cat "$work/dpkg-i.log" >&2; fail "dpkg -i"; }
for p in "${pkgs[@]}"; do
  [ "$(dpkg-query -W -f='${Status} ${Version}' "$p")" = \
    "install ok installed $version" ] || fail "$p is not installed"
done
echo "ok: dpkg -i ($(elapsed))"

# The installed CLI, by its path (a /usr/local/bin/redlock may come first
# in PATH), with no library path from the environment.
cli=/usr/bin/redlock
out=$(env -u LD_LIBRARY_PATH "$cli" --version) || fail "$cli --version"
[ "$out" = "redlock $version" ] ||
  fail "$cli --version printed '$out', the package is $version"
echo "ok: $out"
[ -f /usr/share/man/man1/redlock.1.gz ] || fail "no man page"

port=$(python3 -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 200); do   # up to 20 s
  redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
  kill -0 "$redis_pid" 2>/dev/null ||
    { cat "$work/redis.log" >&2; fail "redis-server on port $port exited"; }
  sleep 0.1
done
redis-cli -p "$port" ping 2>/dev/null | grep -q PONG ||
  fail "redis-server on port $port does not answer in 20 s"

# The master was started just now: its votes would wait out the restart
# guard's window (a master that may have lost keys); nothing else uses it.
servers=127.0.0.1:$port
out=$(env -u LD_LIBRARY_PATH timeout 60 "$cli" run --servers "$servers" \
      --restart-guard off --ttl 10s check-deb -- \
      sh -c "redis-cli -p $port exists check-deb") ||
  fail "redlock run exited $? ($out)"
[ "$out" = 1 ] || fail "the job did not see its lock on the master: '$out'"
[ "$(redis-cli -p "$port" exists check-deb)" = 0 ] ||
  fail "the lock is still on the master after redlock run"
echo "ok: redlock run held check-deb on $servers ($(elapsed))"

cat >"$work/prog.c" <<'EOF'
/* Takes a lock, is refused a second time, releases, takes it again. */
#include <stdio.h>
#include <string.h>

#include <redlock.h>

int main(int argc, char **argv) {
  const char *servers[1];
  redlock_client_config cfg;
  redlock_acquire_opts once;
  redlock_sync_t *s = NULL;
  redlock_sync_lock_t *a = NULL, *b = NULL;
  int rc, taken, again;
  if (argc != 2)
    return 2;
  servers[0] = argv[1];
  memset(&cfg, 0, sizeof(cfg));
  cfg.servers = servers;
  cfg.n_servers = 1;
  cfg.restart_guard_ms = -1;   /* a master started just now (see above) */
  memset(&once, 0, sizeof(once));
  once.wait_ms = -1;           /* one attempt */
  if ((rc = redlock_sync_new(&cfg, &s)) != 0) {
    fprintf(stderr, "new: %s\n", redlock_last_error());
    return 1;
  }
  rc = redlock_sync_acquire(s, "check-deb-c", 11, 10000, &once, &a);
  taken = rc == 0 ? redlock_sync_acquire(s, "check-deb-c", 11, 10000, &once,
                                         &b)
                  : 0;
  if (rc == 0)
    redlock_sync_release(a);
  again = rc == 0 ? redlock_sync_acquire(s, "check-deb-c", 11, 10000, &once,
                                         &a)
                  : -1;
  if (again == 0)
    redlock_sync_release(a);
  printf("libredlock %s: acquire %s, again while held %s, after the "
         "release %s\n", redlock_version_string(), redlock_err_name(rc),
         redlock_err_name(taken), redlock_err_name(again));
  redlock_sync_close(s);
  return rc == 0 && taken == REDLOCK_ETAKEN && again == 0 ? 0 : 1;
}
EOF
cflags=$(pkg-config --cflags redlock) || fail "pkg-config --cflags redlock"
libs=$(pkg-config --libs redlock) || fail "pkg-config --libs redlock"
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -Wall -Wextra -Werror $cflags "$work/prog.c" \
  -o "$work/prog" $libs || fail "cc \$(pkg-config ... redlock) prog.c"
lib=$(env -u LD_LIBRARY_PATH ldd "$work/prog" |
      sed -n 's/^\s*libredlock\.so\.0 => \(\S*\) .*/\1/p')
case $lib in
  /usr/lib/*/libredlock.so.0|/lib/*/libredlock.so.0) ;;
  *) fail "prog links libredlock.so.0 from '$lib', not the package's" ;;
esac
out=$(env -u LD_LIBRARY_PATH timeout 60 "$work/prog" "$servers") ||
  fail "the C program: $out"
case $out in
  "libredlock $version: "*) ;;
  *) fail "the C program reports '$out', the package is $version" ;;
esac
echo "ok: a C program built with pkg-config ($cflags $libs) runs on" \
  "$lib: $out ($(elapsed))"

kill "$redis_pid"
wait "$redis_pid" 2>/dev/null || true
redis_pid=""

# What dpkg says the packages hold, then their removal.
for p in "${pkgs[@]}"; do dpkg -L "$p"; done | sort -u >"$work/listed"
missing=$(sort -u "$work/new" | comm -23 - "$work/listed")
[ -z "$missing" ] || fail "not listed by dpkg -L: $missing"
dpkg_run -P "${pkgs[@]}" || { cat "$work/dpkg-P.log" >&2; fail "dpkg -P"; }
installed=0
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case $st in ""|*not-installed) ;; *) fail "$p after dpkg -P: $st" ;; esac
done
left=""
while read -r p; do
  if [ -e "$p" ] || [ -L "$p" ]; then left="$left $p"; fi
done <"$work/new"
[ -z "$left" ] || fail "left after dpkg -P:$left"
echo "ok: dpkg -P: none of the $(wc -l <"$work/new") paths it" \
  "installed is left ($(elapsed))"
