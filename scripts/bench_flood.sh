#!/usr/bin/env bash
# The flood benchmark (bench/bench_flood.cpp): 1,000,000 timers due at one instant while
# 1,000 loopback connections echo on the same io_context (one thread), three ways:
# boost::asio::steady_timer, twheel with max_per_pass at its default (4096), and twheel
# with max_per_pass 256. Prints each run's report and a table of the echo round trip
# before and during the flood. Any run that loses an expiry or an echo fails the script.
#
# Usage: scripts/bench_flood.sh [--timers N] [--connections N]
# Builds in build-bench/ (the bench preset: Release, warnings as errors).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset bench >/dev/null
cmake --build --preset bench -j"${TWHEEL_JOBS:-2}" --target bench_flood
bin=build-bench/bench/bench_flood
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for config in "--timer asio" "--timer twheel --max-per-pass 4096" "--timer twheel --max-per-pass 256"; do
  # shellcheck disable=SC2086
  "$bin" $config "$@" | tee -a "$out"
  echo
done
echo "| timer | max_per_pass | flood (first to last expiry, ms) | before p50 (us) | before p99 (us) | during: round trips | during p50 (us) | during p99 (us) | during max (us) | echoes lost |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
grep '^csv,flood,' "$out" | while IFS=, read -r _ _ timer mpp timers conns flood b50 b99 dn d50 d99 dmax lost; do
  name=$([ "$timer" = asio ] && echo "boost::asio::steady_timer" || echo "twheel::steady_timer")
  echo "| $name | $mpp | $flood | $b50 | $b99 | $dn | $d50 | $d99 | $dmax | $lost |"
done
