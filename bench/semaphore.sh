#!/usr/bin/env bash
# semaphore.sh OUT_DIR: counting semaphores (issue 32), ours against the
# mutex and against redis-semaphore's RedlockSemaphore, on the same 5
# masters (docs/PERFORMANCE.md, "Counting semaphores").
#
# Starts 5 masters (cluster-compose/cluster.sh, no proxy, no persistence)
# on BASEPORT (7901..), pinned to CPU 0, every client to CPU 1 (PIN=split
# as the peers harness; PIN=none leaves them to the scheduler). Then
# REPEATS (3) times, interleaved so the machine's drift spreads over all:
#   the mutex (build/bench/redlock-bench, impl redlock-c):
#     uncontended  throughput scenario, C = 1 (acquire+release cycles)
#     contended    contention scenario, WORKERS (8) on one key
#   for each K in LIMITS ("1 4 16"), ours (--limit K, impl redlock-c-sem)
#   then redis-semaphore 5.8.0 (bench/node/semaphore.mjs):
#     uncontended  C = 1 on a semaphore name of its own
#     contended    WORKERS workers of one process on one name
#     checker      WORKERS processes of one worker each on one name: each
#                  process has its own connections, so the masters see
#                  their commands in different orders
#   each contended and checker run's holds ("start end", CLOCK_MONOTONIC)
#   go through bench/node/holders.mjs: the most holders at once across
#   the processes, and how long more than K held.
# Contention is the mutex bench's: hold HOLD_MS (1), think THINK_MS (5),
# up to 100 retries 10 +- 5 ms apart (redis-semaphore: every 10 ms, it has
# no jitter), ttl 10 s, DURATION_S (5) per run. ONLY=checker runs the
# checker alone (e.g. HOLD_MS=100 THINK_MS=1: long holds, where a holder
# too many stays for a whole hold). JSON lines (each with "run")
# into OUT_DIR/semaphore.jsonl, `uptime` before each repeat into
# OUT_DIR/uptime.txt, the median table into OUT_DIR/table.md
# (bench/node/semaphore-report.mjs). The masters are stopped by PID at
# the end, whatever happens; every run is bounded by DURATION_S.
set -euo pipefail
bench_name=semaphore bench_port=7901
. "$(dirname "$0")/cluster-up.sh"
bench_node_deps

repeats=${REPEATS:-3}
limits=${LIMITS:-1 4 16}
workers=${WORKERS:-8}
pin_client=()
if [ "${PIN:-split}" = split ]; then
  for f in "$REDLOCK_CLUSTER_DIR"/*.pid; do
    taskset -a -p -c 0 "$(cat "$f")" >/dev/null
  done
  pin_client=(taskset -c 1)
fi
export BENCH_SERVERS=$servers BENCH_DURATION_S=${DURATION_S:-5} \
       BENCH_WORKERS=$workers BENCH_CONCURRENCY=1 \
       BENCH_HOLD_MS=${HOLD_MS:-1} BENCH_THINK_MS=${THINK_MS:-5} \
       BENCH_RETRY_COUNT=100 BENCH_RETRY_DELAY_MS=10 \
       BENCH_RETRY_JITTER_MS=5 BENCH_TTL_MS=10000 BENCH_WARMUP=200
bench=$build/bench/redlock-bench
peer=$here/bench/node/semaphore.mjs
holders=$here/bench/node/holders.mjs
jsonl=$out/semaphore.jsonl
iv=$out/intervals
mkdir -p "$iv"
: >"$jsonl"
: >"$out/uptime.txt"

# tag RUN PROCS: each JSON line gets the repeat and the process count.
tag() { sed "s/}\$/,\"run\":$1,\"procs\":$2}/" >>"$jsonl"; }

# one IMPL K SCENARIO: one process (ours: IMPL redlock-c[-sem]).
one() {
  local impl=$1 k=$2 scenario=$3 f="$iv/$1-$2-$run-1p.txt"
  if [ "$impl" = redis-semaphore ]; then
    BENCH_IMPL=$impl BENCH_LIMIT=$k BENCH_SCENARIO=$scenario \
      BENCH_INTERVALS=$f "${pin_client[@]}" node "$peer" | tag "$run" 1
  else
    BENCH_IMPL=$impl BENCH_LIMIT=$k BENCH_SCENARIO=$scenario \
      BENCH_INTERVALS=$f "${pin_client[@]}" "$bench" | tag "$run" 1
  fi
  if [ "$scenario" = contention ]; then
    node "$holders" "$impl" "$((k > 0 ? k : 1))" "$f" | tag "$run" 1
  fi
}

# checker IMPL K: WORKERS processes of one worker each, on one name.
checker() {
  local impl=$1 k=$2 i pids=() files=() rc=0
  local name
  name="semcheck-$impl-$k-$run-$$"
  for i in $(seq 1 "$workers"); do
    files+=("$iv/$impl-$k-$run-p$i.txt")
    if [ "$impl" = redis-semaphore ]; then
      BENCH_IMPL=$impl BENCH_LIMIT=$k BENCH_SCENARIO=contention \
        BENCH_WORKERS=1 BENCH_INTERVALS=${files[-1]} BENCH_NAME=$name \
        "${pin_client[@]}" node "$peer" >"$iv/out.$i" &
    else
      BENCH_IMPL=$impl BENCH_LIMIT=$k BENCH_SCENARIO=contention \
        BENCH_WORKERS=1 BENCH_INTERVALS=${files[-1]} BENCH_NAME=$name \
        "${pin_client[@]}" "$bench" >"$iv/out.$i" &
    fi
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || rc=1
  done
  [ "$rc" = 0 ] || { echo "semaphore.sh: a checker process of $impl failed" >&2; exit 1; }
  cat "$iv"/out.* | tag "$run" "$workers"
  rm -f "$iv"/out.*
  node "$holders" "$impl" "$k" "${files[@]}" | tag "$run" "$workers"
}

for run in $(seq 1 "$repeats"); do
  echo "run $run: $(uptime)" | tee -a "$out/uptime.txt" >&2
  if [ "${ONLY:-}" != checker ]; then
    one redlock-c 0 throughput
    one redlock-c 0 contention
  fi
  for k in $limits; do
    for impl in redlock-c-sem redis-semaphore; do
      [ "${ONLY:-}" = checker ] || one "$impl" "$k" throughput
    done
    for impl in redlock-c-sem redis-semaphore; do
      [ "${ONLY:-}" = checker ] || one "$impl" "$k" contention
    done
    for impl in redlock-c-sem redis-semaphore; do
      checker "$impl" "$k"
    done
  done
done
echo "end: $(uptime)" | tee -a "$out/uptime.txt" >&2
node "$here/bench/node/semaphore-report.mjs" "$jsonl" | tee "$out/table.md"
