#!/usr/bin/env bash
# check-leftovers.sh SRCDIR TMPDIR: after a test suite, no process of this
# build may be left: none whose program is under SRCDIR (the build dirs'
# CLI, demo, proxy, tests) and none whose working directory or command
# line is under TMPDIR (the run's private temp dir: the redis-servers the
# harness started). Those found are listed, killed (they are ours) and the
# check fails.
set -u
src=$1 tmp=$2
self=$$
found=()
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ "$pid" = "$self" ] && continue
  exe=$(readlink "$d/exe" 2>/dev/null) || continue
  cwd=$(readlink "$d/cwd" 2>/dev/null) || cwd=
  cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || cmd=
  case "$exe" in
    "$src"/build*) found+=("$pid") ; continue ;;
  esac
  case "$cwd" in
    "$tmp"|"$tmp"/*) found+=("$pid") ; continue ;;
  esac
  case "$cmd" in
    *"$tmp"/*) found+=("$pid") ;;
  esac
done
# This script and the shell that runs it are not leftovers.
left=()
for pid in "${found[@]}"; do
  [ "$pid" = "$PPID" ] && continue
  [ -d "/proc/$pid" ] || continue
  left+=("$pid")
done
[ ${#left[@]} -eq 0 ] && exit 0
echo "check-leftovers: ${#left[@]} process(es) left by the tests:" >&2
for pid in "${left[@]}"; do
  echo "  $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >&2
done
kill -KILL "${left[@]}" 2>/dev/null
exit 1
