#!/usr/bin/env bash
# Builds the libFuzzer target for the core wheel with clang and runs it for a bounded
# time from the seed corpus in fuzz/corpus. Usage: scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/deps.sh clang libclang-rt-14-dev
out=build-fuzz
mkdir -p "$out/corpus"
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Iinclude fuzz/fuzz_timing_wheel.cpp src/timing_wheel.cpp -o "$out/fuzz_timing_wheel"
# New inputs go to the scratch corpus; the seed corpus in the repository stays as it is.
"$out/fuzz_timing_wheel" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus" fuzz/corpus 2>&1 | tail -n 25
