#!/usr/bin/env bash
# run-fuzz.sh FUZZER SEED_DIR SECONDS: runs a libFuzzer target for a
# bounded time on a scratch copy of its seed corpus (new inputs go to the
# scratch dir, the seeds stay as they are).
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=${3:-30}
work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
  -print_final_stats=1 "$work" "$seeds"
