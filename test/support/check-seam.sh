#!/usr/bin/env bash
# check-seam.sh LIBDIR: the engine takes the clock, timers, randomness,
# name resolution and I/O only through the seam (lib/sys/sys.h; DESIGN, "Where
# this is going"). Outside the seam's libuv implementation (lib/uv/: sys_uv.c,
# conn_uv.c, clock.c), TLS on memory buffers (sys/tls.c) and the blocking
# API above the engine (api/sync.c), no file of lib/ may call libuv (but uv_once, a thread
# primitive), read a clock, draw random bytes, resolve a name or touch a
# socket. A simulator replaces the seam: what bypasses it would run on
# real time and real sockets in the middle of a simulated run.
set -euo pipefail
dir=$1
bad=0
allowed=' uv/sys_uv.c uv/conn_uv.c uv/clock.c sys/tls.c api/sync.c '
calls='uv_[a-z_]+|clock_gettime|gettimeofday|time|getrandom|rand|random|'
calls+='redlock__clock_ns|getaddrinfo|socket|connect|send|recv|read|write|'
calls+='poll|epoll_[a-z]+|select|nanosleep|usleep|sleep'
pattern="(^|[^_a-zA-Z0-9.>])($calls)[[:space:]]*\\("
n=0
while IFS= read -r f; do
  case "$allowed" in *" ${f#"$dir"/} "*) continue ;; esac
  n=$((n + 1))
  # Comments and string literals out (block comments span lines), then
  # every call that bypasses the seam.
  if python3 - "$f" <<'PY' | grep -nE "$pattern" | grep -vE 'uv_once[[:space:]]*\('
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), s,
           flags=re.S)
s = re.sub(r'//[^\n]*', '', s)
s = re.sub(r'"(\\.|[^"\\\n])*"', '""', s)
sys.stdout.write(s)
PY
  then
    echo "check-seam: $f bypasses the seam (lib/sys/sys.h)" >&2
    bad=1
  fi
done < <(find "$dir" -name '*.c' | sort)
[ "$n" -gt 10 ] || { echo "check-seam: only $n files in $dir" >&2; exit 1; }
[ $bad -eq 0 ] && echo "check-seam: $n engine files take the outside world from the seam only"
exit $bad
