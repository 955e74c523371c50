#!/usr/bin/env bash
# cluster.sh: N independent redis-server masters on 127.0.0.1 as plain
# processes (no containers), for the demo, tests and failure drills.
#
#   cluster.sh up [N=5] [BASEPORT=7101]   start N masters on BASEPORT..
#   cluster.sh down                       stop them (only our own PIDs)
#   cluster.sh status                     per master: pid, state, PING
#   cluster.sh addrs                      127.0.0.1:P1,127.0.0.1:P2,...
#   cluster.sh pause I | resume I         SIGSTOP / SIGCONT master I (1..N)
#   cluster.sh kill I                     SIGKILL master I (keys lost)
#   cluster.sh restart I                  start master I again
#
# State (pids, logs, N, base port) lives in $REDLOCK_CLUSTER_DIR, default
# ${TMPDIR:-/tmp}/redlock-cluster-$UID. REDLOCK_PERSIST=aof starts masters
# with appendonly yes + appendfsync always (keys survive kill + restart).
set -euo pipefail

dir=${REDLOCK_CLUSTER_DIR:-${TMPDIR:-/tmp}/redlock-cluster-$(id -u)}
redis=${REDIS_SERVER:-redis-server}

die() { echo "cluster.sh: $*" >&2; exit 1; }

ping_port() {
  timeout 2 redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null | grep -q PONG
}

port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

load() {
  [ -f "$dir/cluster.env" ] || die "no cluster is up (state dir $dir)"
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
}

check_index() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$N" ] \
    || die "master index must be 1..$N"
}

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

alive() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

start_one() {
  local i=$1 port=$((BASEPORT + $1 - 1)) persist=()
  mkdir -p "$dir/$i"
  if [ "${PERSIST:-none}" = aof ]; then
    persist=(--appendonly yes --appendfsync always)
  else
    persist=(--appendonly no)
  fi
  "$redis" --port "$port" --bind 127.0.0.1 --save '' "${persist[@]}" \
    --dir "$dir/$i" --daemonize no --enable-debug-command local \
    --protected-mode no >>"$dir/$i.log" 2>&1 &
  echo $! >"$dir/$i.pid"
  local t
  for t in $(seq 1 500); do
    ping_port "$port" && return 0
    alive "$(pid_of "$i")" || break
    sleep 0.02
  done
  tail -5 "$dir/$i.log" >&2 || true
  die "master $i (port $port) did not start"
}

stop_one() {
  local i=$1 pid t
  pid=$(pid_of "$i")
  if alive "$pid"; then
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for t in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.02
    done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/$i.pid"
}

cmd=${1:-}
case "$cmd" in
  up)
    N=${2:-5}
    BASEPORT=${3:-7101}
    [[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 64 ] \
      || die "N must be 1..64"
    [ -f "$dir/cluster.env" ] && die "a cluster is already up in $dir"
    command -v "$redis" >/dev/null || die "redis-server not found"
    for i in $(seq 1 "$N"); do
      port_busy $((BASEPORT + i - 1)) && die "port $((BASEPORT + i - 1)) is in use"
    done
    mkdir -p "$dir"
    PERSIST=${REDLOCK_PERSIST:-none}
    printf 'N=%s\nBASEPORT=%s\nPERSIST=%s\n' "$N" "$BASEPORT" "$PERSIST" \
      >"$dir/cluster.env"
    for i in $(seq 1 "$N"); do start_one "$i"; done
    echo "cluster up: $N masters on 127.0.0.1:$BASEPORT-$((BASEPORT + N - 1)) ($PERSIST persistence)" >&2
    ;;
  down)
    [ -f "$dir/cluster.env" ] || exit 0
    load
    for i in $(seq 1 "$N"); do stop_one "$i"; done
    rm -rf "$dir"
    echo "cluster down" >&2
    ;;
  status)
    load
    for i in $(seq 1 "$N"); do
      port=$((BASEPORT + i - 1)); pid=$(pid_of "$i"); state=down
      if alive "$pid"; then
        state=running
        grep -q '^State:.*T' "/proc/$pid/status" 2>/dev/null && state=paused
      fi
      ans=no; [ "$state" = running ] && ping_port "$port" && ans=yes
      printf 'master %d  127.0.0.1:%d  pid %-7s %-8s PING %s\n' \
        "$i" "$port" "${pid:--}" "$state" "$ans"
    done
    ;;
  addrs)
    load
    out=""
    for i in $(seq 1 "$N"); do out+="${out:+,}127.0.0.1:$((BASEPORT + i - 1))"; done
    echo "$out"
    ;;
  pause|resume|kill)
    load; check_index "${2:-}"
    pid=$(pid_of "$2")
    alive "$pid" || die "master $2 is not running"
    case "$cmd" in
      pause) kill -STOP "$pid" ;;
      resume) kill -CONT "$pid" ;;
      kill) kill -CONT "$pid" 2>/dev/null || true; kill -KILL "$pid"
            rm -f "$dir/$2.pid" ;;
    esac
    ;;
  restart)
    load; check_index "${2:-}"
    stop_one "$2"
    start_one "$2"
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
