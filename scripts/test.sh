#!/usr/bin/env bash
# Builds twheel (Release, warnings as errors) and runs the whole test suite with CTest.
# Usage: scripts/test.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# wrk and ab drive the HTTP server example; OpenSSL is for beast_tcp_stream_test's TLS cases.
scripts/deps.sh wrk apache2-utils libssl-dev
build=${1:-build}
shift || true
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTWHEEL_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# The soak test (label soak) takes the whole machine for its duration: .ci/run runs it alone.
ctest --output-on-failure -j"$(nproc)" --timeout 900 -LE soak
