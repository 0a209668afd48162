#!/usr/bin/env bash
# Builds twheel and runs the demo: the drop-in example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
./build/example/steady_timer_dropin
