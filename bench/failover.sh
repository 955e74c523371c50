#!/usr/bin/env bash
# failover.sh OUT_DIR: the failover benchmark (issue 12, item 4), ours and
# node-redlock's side by side on the same masters, in the same run.
#
# Starts 5 masters (cluster-compose/cluster.sh, no proxy, no persistence)
# on BASEPORT (7701..), then for each ttl in TTLS ("1000 10000"):
#   build/bench/redlock-failover         (redlock-c: `redlock elect` leader,
#                                         library standby)
#   node bench/node/failover.mjs         (node-redlock 5.0.0-beta.2: `using`
#                                         leader, acquire retry loop
#                                         200 ms / jitter 200 ms)
# with KILLS (50) SIGKILLs and RESIGNS (50) clean resigns each; JSON lines
# into OUT_DIR/failover.jsonl, every sample into OUT_DIR/samples.txt, a
# CDF plot (gnuplot) into OUT_DIR/failover-cdf.svg. The masters are
# stopped by PID at the end, whatever happens. Needs npm (installs the
# pinned node packages into bench/node/node_modules once).
set -euo pipefail
bench_name=failover bench_port=7701
. "$(dirname "$0")/cluster-up.sh"
bench_node_deps

: >"$out/failover.jsonl"
: >"$out/samples.txt"
for ttl in ${TTLS:-1000 10000}; do
  export BENCH_SERVERS=$servers BENCH_TTL_MS=$ttl \
         BENCH_KILLS=${KILLS:-50} BENCH_RESIGNS=${RESIGNS:-50} \
         BENCH_SAMPLES=$out/samples.txt
  "$build/bench/redlock-failover" >>"$out/failover.jsonl"
  node "$here/bench/node/failover.mjs" >>"$out/failover.jsonl"
done

# One CDF per (impl, scenario, ttl), delays in ms, log x.
data="$out/cdf.d"
mkdir -p "$data"
awk -v d="$data" '{ f = d "/" $1 "-" $2 "-" $3 ".txt"; print $4 / 1000 >> f }' \
  "$out/samples.txt"
plots=""
for f in "$data"/*.txt; do
  sort -n -o "$f" "$f"
  name=$(basename "$f" .txt)
  plots="$plots${plots:+, }\"$f\" using (\$1 > 0.05 ? \$1 : 0.05):(\$0 + 1) / $(wc -l <"$f") with lines title \"$name\""
done
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal svg size 900,520 dynamic noenhanced font "sans,12"
set output "$out/failover-cdf.svg"
set title "Failover: standby takeover delay (5 masters on loopback)"
set xlabel "delay (ms, log): kill = past the lock's quorum expiry; resign = after the resign call"
set ylabel "fraction of takeovers"
set logscale x
set key outside right
set grid
plot $plots
GP
fi
echo "results: $out/failover.jsonl, plot: $out/failover-cdf.svg" >&2
