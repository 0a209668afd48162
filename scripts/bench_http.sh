#!/usr/bin/env bash
# Benchmarks the Beast HTTP server example on boost::beast::tcp_stream against the same
# server on twheel::beast::tcp_stream (scripts/bench_http.py says what is measured).
# Builds both (Release, warnings as errors) in build-http-bench/, installs wrk if missing.
# Not part of the test suite: it takes both CPUs for a few minutes.
# Usage: scripts/bench_http.sh [--quick] [bench_http.py options...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh wrk
build=build-http-bench
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTWHEEL_WERROR=ON -DTWHEEL_BUILD_TESTS=OFF \
      -DTWHEEL_BUILD_BENCH=OFF -DTWHEEL_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target http_server http_server_beast
args=()
if [ "${1:-}" = "--quick" ]; then
  shift
  args=(--seconds 2 --reps 1 --idle 10000 --late-conns 2000)
fi
# 50,000 connections need 50,000 descriptors in the server and as many in the client:
# raise the limit if we may (root with CAP_SYS_RESOURCE); bench_http.py says what it got.
ulimit -Hn 262144 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
mkdir -p out
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/bench_http.py --beast "$build/example/http_server_beast" \
  --twheel "$build/example/http_server" --out out/bench_http.md "${args[@]}" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
