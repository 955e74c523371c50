#!/usr/bin/env bash
# plot-cdf.sh SERVERS_N1 SERVERS_N5 OUT.svg: runs the latency scenario for
# the library and the raw mode at N=1 and N=5, then draws the acquire
# latency CDFs with gnuplot (Debian: gnuplot-nox) into OUT.svg. The data
# files stay beside the SVG (OUT.d/).
set -euo pipefail
s1=${1:?usage: plot-cdf.sh SERVERS_N1 SERVERS_N5 OUT.svg}
s5=${2:?}
out=${3:?}
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH_EXE:-$here/build/bench/redlock-bench}
data="${out%.svg}.d"
mkdir -p "$data"
pin=()
command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ] && pin=(taskset -c 1)
for n in 1 5; do
  servers=$s1; [ "$n" = 5 ] && servers=$s5
  for mode in lib raw; do
    flag=(); [ "$mode" = raw ] && flag=(--raw)
    BENCH_SERVERS=$servers BENCH_ITERS=${ITERS:-3000} \
      BENCH_SAMPLES_PREFIX="$data/$mode-n$n" \
      "${pin[@]}" "$bench" --impl "$mode" --scenario latency "${flag[@]}" \
      >"$data/$mode-n$n.jsonl"
  done
done
gnuplot <<GP
set terminal svg size 800,480 dynamic font "sans,12"
set output "$out"
set title "redlock: acquire latency CDF on loopback (N=1 and N=5)"
set xlabel "acquire latency (us), log scale"
set ylabel "fraction of acquisitions"
set logscale x
set key bottom right
set grid
stats "$data/lib-n1-latency_acquire.txt" nooutput
n11 = STATS_records
stats "$data/raw-n1-latency_acquire.txt" nooutput
n12 = STATS_records
stats "$data/lib-n5-latency_acquire.txt" nooutput
n51 = STATS_records
stats "$data/raw-n5-latency_acquire.txt" nooutput
n52 = STATS_records
plot "$data/lib-n1-latency_acquire.txt" using 1:((\$0+1)/n11) with lines lw 2 title "library, N=1", \
     "$data/raw-n1-latency_acquire.txt" using 1:((\$0+1)/n12) with lines lw 2 dt 2 title "raw SET NX fan-out, N=1", \
     "$data/lib-n5-latency_acquire.txt" using 1:((\$0+1)/n51) with lines lw 2 title "library, N=5 (quorum 3)", \
     "$data/raw-n5-latency_acquire.txt" using 1:((\$0+1)/n52) with lines lw 2 dt 2 title "raw SET NX fan-out, N=5 (quorum 3)"
GP
echo "wrote $out"
