#!/usr/bin/env bash
# scale.sh OUT_DIR: the scale benchmark (issue 13). Starts 5 masters
# (cluster-compose/cluster.sh, no proxy, no persistence) on BASEPORT
# (7801..) and runs the `scale` scenario of redlock-bench:
#   L = 100,000, ttl 30 s, one extend call per lock (renew_batch -1: the
#                          0.1 behaviour, for the before column)
#   L = 100,000, ttl 30 s, batched renewals (the default)
#   L = 1,000,000, ttl 60 s, batched renewals
# each held DURATION_S (300) seconds: the first half only holding (the
# renewals' cost), the second half timing a new acquisition every 10 ms.
# JSON lines into OUT_DIR/scale.jsonl, the summaries into OUT_DIR/scale.log.
# The masters are stopped by PID at the end, whatever happens.
set -euo pipefail
bench_name=scale bench_port=7801
. "$(dirname "$0")/cluster-up.sh"

: >"$out/scale.jsonl"
: >"$out/scale.log"
run() {   # HELD TTL_MS RENEW_BATCH
  echo "== L=$1 ttl=$2 ms renew_batch=$3" >>"$out/scale.log"
  BENCH_HELD=$1 BENCH_RENEW_BATCH=$3 "$build/bench/redlock-bench" \
    --impl redlock-c --servers "$servers" --scenario scale \
    --ttl-ms "$2" --duration-s "${DURATION_S:-300}" --iters 5000 \
    --warmup 500 --max-seconds 60 \
    >>"$out/scale.jsonl" 2>>"$out/scale.log"
  # Keys of the run go with the next run's cluster flush.
  for a in ${servers//,/ }; do
    redis-cli -h "${a%:*}" -p "${a##*:}" FLUSHALL >/dev/null
  done
}
runs=${RUNS:-"100000:30000:-1 100000:30000:0 1000000:60000:0"}
for spec in $runs; do
  IFS=: read -r held ttl batch <<<"$spec"
  run "$held" "$ttl" "$batch"
done
cat "$out/scale.log" >&2
