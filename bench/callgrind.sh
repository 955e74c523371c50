#!/usr/bin/env bash
# callgrind.sh SERVERS: client instructions per acquire+release cycle,
# library vs raw mode, measured with callgrind (instruction counts are
# deterministic). Two runs per mode with different iteration counts; the
# difference divided by the extra cycles removes start-up and warmup.
#   bench/callgrind.sh 127.0.0.1:7000,127.0.0.1:7001,...
set -euo pipefail
servers=${1:?usage: callgrind.sh SERVERS}
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH_EXE:-$here/build/bench/redlock-bench}
work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-cg.XXXXXX")
trap 'rm -rf "$work"' EXIT
lo=200 hi=1200
ir() {   # mode iters -> total instructions
  local mode=$1 iters=$2 out="$work/cg.$1.$2"
  BENCH_SERVERS=$servers BENCH_ITERS=$iters BENCH_WARMUP=50 \
    valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bench" --impl cg --scenario latency $mode >/dev/null 2>&1
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
}
declare -A per
for mode in lib raw; do
  flag=""; [ "$mode" = raw ] && flag="--raw"
  a=$(ir "$flag" $lo); b=$(ir "$flag" $hi)
  per[$mode]=$(( (b - a) / (hi - lo) ))
  echo "$mode: $(( per[$mode] )) instructions per acquire+release cycle"
done
awk -v l="${per[lib]}" -v r="${per[raw]}" \
  'BEGIN { printf "ratio library/raw: %.2f\n", l / r }'
