#!/usr/bin/env bash
# run-fuzz.sh FUZZER SEED_DIR SECONDS: runs a libFuzzer target for a
# bounded time on a scratch copy of its seed corpus (new inputs go to the
# scratch dir, the seeds stay as they are).
set -euo pipefail
# REDLOCK_FUZZ_SECONDS, when set, overrides the time meson passes.
fuzzer=$1 seeds=$2 seconds=${REDLOCK_FUZZ_SECONDS:-${3:-30}}
case "$seconds" in
  ''|*[!0-9]*) echo "REDLOCK_FUZZ_SECONDS must be a whole number of seconds: '$seconds'" >&2; exit 2 ;;
esac
work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A finding exits 1, not libFuzzer's default 77 (meson's "skipped": a
# crash once passed as a skip).
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
  -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  "$work" "$seeds"
