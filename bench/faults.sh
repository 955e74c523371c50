#!/usr/bin/env bash
# faults.sh OUT_DIR: availability under minority faults (issue 14).
# Starts 5 masters without persistence behind the fault proxy
# (cluster-compose/cluster.sh, BASEPORT 7901..), then for each fault mode
# and each implementation runs one client making single attempts on a
# free lock (build/bench/redlock-availability, bench/node/availability.mjs:
# node-redlock 5.0.0-beta.2, retryCount 0) for SECONDS (30) while the same
# seeded schedule injects faults: two streams (masters 1-3 and 4-5, so at
# most a minority of two at once), each a fault every 0.3-1.5 s lasting
# 0.3-1.5 s. Modes:
#   pause          SIGSTOP, then SIGCONT
#   kill           SIGKILL and an immediate restart (keys lost)
#   kill-delayed   SIGKILL, restart after the fault's duration
#   client-pause   CLIENT PAUSE for the fault's duration
#   slow           200 ms latency each way (proxy) for the duration
#   mixed          one of the above at random per fault
# Then safety on the same schedules (SAFETY_MODES: kill-delayed, mixed):
# 8 competing clients of each implementation, overlaps seen in one process
# (redlock-availability with BENCH_WORKERS=8, bench/node/safety.mjs).
# JSON lines (with "mode") into OUT_DIR/faults.jsonl, per-attempt logs into
# OUT_DIR/<impl>-<mode>.log. Masters and proxy stopped by PID at the end.
set -euo pipefail
bench_name=faults bench_port=7901 bench_proxy=1
. "$(dirname "$0")/cluster-up.sh"
seconds=${SECONDS_PER_RUN:-30}
modes=${MODES:-"pause kill kill-delayed client-pause slow mixed"}
impls=${IMPLS:-"redlock-c node-redlock"}
IFS=, read -r -a addrs <<<"$servers"
bench_node_deps

msleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }
rnd() { echo $(($1 + RANDOM % ($2 - $1 + 1))); }   # uniform in [$1, $2]

# Every master up, healed and empty.
heal_all() {
  local i a
  for i in 1 2 3 4 5; do
    bash "$cluster" resume "$i" >/dev/null 2>&1 || true
    bash "$cluster" heal "$i" >/dev/null 2>&1 || true
    if ! redis-cli -h 127.0.0.1 -p "${addrs[$((i - 1))]##*:}" PING \
         >/dev/null 2>&1; then
      bash "$cluster" restart "$i" >/dev/null
    fi
  done
  for a in "${addrs[@]}"; do
    redis-cli -h 127.0.0.1 -p "${a##*:}" CLIENT UNPAUSE >/dev/null 2>&1 || true
    redis-cli -h 127.0.0.1 -p "${a##*:}" FLUSHALL >/dev/null
  done
  # Masters this restarted (or just started) are past the restart guard's
  # window before a run starts: the setup is not part of the schedule.
  # INFO's uptime is whole wall-clock seconds and counts as uptime - 1 s,
  # hence the 2 s on top of the ttl.
  msleep $((${TTL_MS:-1000} + 2000))
}

# One fault of `mode` on master i for d ms.
fault() {
  local mode=$1 i=$2 d=$3 port=${addrs[$(($2 - 1))]##*:}
  case "$mode" in
    pause) bash "$cluster" pause "$i"; msleep "$d"; bash "$cluster" resume "$i" ;;
    kill) bash "$cluster" kill "$i"; bash "$cluster" restart "$i" >/dev/null
          msleep "$d" ;;
    kill-delayed) bash "$cluster" kill "$i"; msleep "$d"
                  bash "$cluster" restart "$i" >/dev/null ;;
    client-pause) redis-cli -h 127.0.0.1 -p "$port" CLIENT PAUSE "$d" \
                    >/dev/null; msleep "$d" ;;
    slow) bash "$cluster" slow "$i" 200; msleep "$d"; bash "$cluster" heal "$i" ;;
  esac
}

stream() {   # MODE SEED FIRST LAST: faults on masters FIRST..LAST
  local mode=$1 first=$3 last=$4 end m
  RANDOM=$2
  end=$(($(date +%s%3N) + seconds * 1000 - 1000))
  while [ "$(date +%s%3N)" -lt "$end" ]; do
    msleep "$(rnd 300 1500)"
    m=$mode
    if [ "$mode" = mixed ]; then
      set -- pause kill kill-delayed client-pause slow
      shift $((RANDOM % 5)); m=$1
    fi
    fault "$m" "$(rnd "$first" "$last")" "$(rnd 300 1500)"
  done
}

# Two independent streams, on masters 1-3 and 4-5: at most two of the five
# masters (a minority) are faulty at once, sometimes two at the same time.
schedule() {   # MODE SEED
  stream "$1" "$2" 1 3 &
  local a=$!
  stream "$1" $(($2 + 1)) 4 5
  wait "$a"
}

: >"$out/faults.jsonl"
seed=${SEED:-4711}
# One client (the command given) while MODE's schedule injects faults; its
# JSON line, with the mode, goes into faults.jsonl.
on_schedule() {   # LABEL MODE COMMAND...
  local label=$1 mode=$2 client
  shift 2
  heal_all
  "$@" >"$out/.line" &
  client=$!
  schedule "$mode" "$seed"
  wait "$client"
  sed "s/^{/{\"mode\":\"$mode\",/" "$out/.line" >>"$out/faults.jsonl"
  echo "$label: $(cat "$out/.line")" >&2
}
export BENCH_SERVERS=$servers BENCH_SECONDS=$seconds \
       BENCH_TTL_MS=${TTL_MS:-1000}
for mode in $modes; do
  [ "$mode" = none ] && continue   # MODES=none: the safety runs only
  for impl in $impls; do
    export BENCH_LOG=$out/$impl-$mode.log
    if [ "$impl" = redlock-c ]; then
      on_schedule "$mode $impl" "$mode" "$build/bench/redlock-availability"
    else
      on_schedule "$mode $impl" "$mode" node "$here/bench/node/availability.mjs"
    fi
  done
done
# node-redlock's safety on the same schedules (redlock's own: the safety
# test, test-slow-safety, 0 overlaps): 8 competing clients, overlaps seen
# in one process.
for mode in ${SAFETY_MODES:-kill-delayed mixed}; do
  [ "$mode" = none ] && continue   # SAFETY_MODES=none: no safety runs
  for impl in $impls; do
    if [ "$impl" = redlock-c ]; then
      BENCH_LOG= BENCH_WORKERS=8 on_schedule "safety $mode $impl" "$mode" \
        "$build/bench/redlock-availability"
    else
      on_schedule "safety $mode $impl" "$mode" node "$here/bench/node/safety.mjs"
    fi
  done
done
rm -f "$out/.line"
heal_all
