#!/usr/bin/env bash
# Builds twheel and runs the demo: the drop-in example, with twheel and as the unchanged
# Asio original (the same source with the two lines reverted).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "twheel::steady_timer:"
./build/example/steady_timer_dropin
echo "boost::asio::steady_timer (the original program):"
./build/example/steady_timer_dropin_asio
echo "Benchmarks: build/bench/bench_timers, build/bench/bench_adapters (see README.md)."
