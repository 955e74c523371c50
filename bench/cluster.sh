#!/usr/bin/env bash
# cluster.sh [SECONDS=10]: Redis Cluster masters, measured (issue 22).
#
#  1. Each primary's share of the commands: N = 3 masters, each a Redis
#     Cluster of P = 1, 2, 3 primaries (no replicas, no persistence), the
#     throughput scenario at C = 128 for SECONDS; per primary the calls of
#     INFO commandstats (SET, EVALSHA, EVAL, TIME) and its CPU (used_cpu_
#     user + sys) per acquire+release cycle. One JSON line per primary and
#     one per P.
#  2. Latency at N = 3 clusters (P = 3) against N = 3 plain masters (p50,
#     p99 of acquire and release, 2000 cycles), and node-redlock over
#     ioredis Cluster clients on the same clusters (latency, and
#     throughput at C = 128).
#  3. Client instructions per cycle (callgrind), plain masters vs clusters.
#
# Output: JSON lines on stdout, a summary on stderr. Needs redis-server,
# redis-cli, node >= 20 (npm install in bench/node, done here), valgrind.
# Ports 7601-7609 (and their cluster bus ports 17601-17609).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-10}
bench=${BENCH_EXE:-$here/build/bench/redlock-bench}
cl=$here/cluster-compose/cluster.sh
export REDLOCK_CLUSTER_DIR
REDLOCK_CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/redlock-bench-cl.XXXXXX")
rmdir "$REDLOCK_CLUSTER_DIR"
export REDLOCK_PERSIST=none REDLOCK_NO_PROXY=1
trap '"$cl" down >/dev/null 2>&1 || true' EXIT
base=7601
[ -x "$bench" ] || { echo "build first: $bench" >&2; exit 1; }
if [ ! -d "$here/bench/node/node_modules/ioredis" ]; then
  (cd "$here/bench/node" && npm install --no-package-lock --no-audit --no-fund \
     >/dev/null)
fi

# The command calls of a node (SET, EVALSHA, EVAL, TIME) and its CPU (s).
node_calls() {
  redis-cli -p "$1" INFO commandstats | tr -d '\r' | awk -F'[:=,]' '
    /^cmdstat_(set|evalsha|eval|time):/ { n += $3 } END { print n + 0 }'
}
node_cpu() {
  redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '
    /^used_cpu_(user|sys):/ { s += $2 } END { printf "%.3f", s }'
}

log() { printf '[cluster-bench] %s\n' "$*" >&2; }

# ---- 1. shares per primary -------------------------------------------------
for p in 1 2 3; do
  "$cl" clusters 3 "$p" 0 $base 2>/dev/null
  servers=$("$cl" addrs)
  nodes=$((3 * p))
  declare -A c0 u0
  for i in $(seq 1 "$nodes"); do
    c0[$i]=$(node_calls $((base + i - 1)))
    u0[$i]=$(node_cpu $((base + i - 1)))
  done
  row=$(BENCH_SERVERS=$servers "$bench" --impl redlock-c-cluster \
        --scenario throughput --concurrency 128 --duration-s "$seconds" \
        --warmup 200 2>/dev/null | tail -1)
  cps=$(echo "$row" | sed -n 's/.*"ops_per_s":\([0-9.]*\).*/\1/p')
  cycles=$(echo "$row" | sed -n 's/.*"ops":\([0-9]*\).*/\1/p')
  echo "$row"
  declare -A c1
  for i in $(seq 1 "$nodes"); do   # each node's INFO read once
    c1[$i]=$(( $(node_calls $((base + i - 1))) - c0[$i] ))
  done
  for k in 1 2 3; do
    total=0
    for j in $(seq 1 "$p"); do
      total=$((total + c1[$(( (k - 1) * p + j ))]))
    done
    for j in $(seq 1 "$p"); do
      i=$(( (k - 1) * p + j ))
      c=${c1[$i]}
      cpu=$(awk -v a="$(node_cpu $((base + i - 1)))" -v b="${u0[$i]}" \
            'BEGIN { printf "%.3f", a - b }')
      awk -v p="$p" -v k="$k" -v j="$j" -v c="$c" -v t="$total" \
          -v cpu="$cpu" -v cy="$cycles" 'BEGIN {
        printf "{\"row\":\"x_cluster_share\",\"primaries\":%d,\"cluster\":%d,\"primary\":%d,\"calls\":%d,\"share\":%.3f,\"cpu_us_per_cycle\":%.2f}\n",
          p, k, j, c, t ? c / t : 0, cy ? cpu * 1e6 / cy : 0 }'
    done
  done
  log "P=$p: $cps cycles/s at C=128"
  unset c0 u0 c1
  "$cl" down 2>/dev/null
done

# ---- 2. latency: plain masters vs clusters, and node-redlock ---------------
"$cl" up 3 $base 2>/dev/null
plain=$("$cl" addrs)
BENCH_SERVERS=$plain "$bench" --impl redlock-c-plain --scenario latency \
  --iters 2000 --warmup 200 2>/dev/null
if command -v valgrind >/dev/null; then
  BENCH_EXE=$bench bash "$here/bench/callgrind.sh" "$plain" 2>/dev/null |
    sed -n 's/^lib: \([0-9]*\).*/{"row":"x_callgrind","masters":"plain","instructions_per_cycle":\1}/p'
fi
"$cl" down 2>/dev/null
"$cl" clusters 3 3 0 $base 2>/dev/null
servers=$("$cl" addrs)
BENCH_SERVERS=$servers "$bench" --impl redlock-c-cluster --scenario latency \
  --iters 2000 --warmup 200 2>/dev/null
if command -v valgrind >/dev/null; then
  lib=$(BENCH_EXE=$bench bash "$here/bench/callgrind.sh" "$servers" 2>/dev/null |
        sed -n 's/^lib: \([0-9]*\).*/\1/p' || true)
  [ -n "$lib" ] &&
    echo "{\"row\":\"x_callgrind\",\"masters\":\"cluster\",\"instructions_per_cycle\":$lib}"
fi
seeds=$(echo "$servers" | tr ',' '\n' | sed 's|redis+cluster://||; s|?.*||' |
        paste -sd, -)
(cd "$here/bench/node" &&
 node cluster.mjs --seeds "$seeds" --iters 2000 --concurrency 128 \
   --duration-s "$seconds")
"$cl" down 2>/dev/null
