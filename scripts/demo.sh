#!/usr/bin/env bash
# Builds twheel and runs the demo: the drop-in example, with twheel and as the unchanged
# Asio original (the same source with the two lines reverted), then the short version of
# the benchmark comparison (scripts/bench.sh --quick, under a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "twheel::steady_timer:"
./build/example/steady_timer_dropin
echo "boost::asio::steady_timer (the original program):"
./build/example/steady_timer_dropin_asio
echo
echo "Short comparison with boost::asio::steady_timer (ratio > 1: twheel better):"
scripts/bench.sh --quick --build-dir build
echo
echo "That was the quick run (10,000 and 100,000 timers, medians of 3)."
echo "The full run (up to 1,000,000 timers, medians of 5, about 5 minutes on 2 cores) is"
echo "scripts/bench.sh: it writes out/bench.csv and out/bench.md and draws docs/bench.svg"
echo "(scripts/chart.sh): the table and the chart shown in README.md."
