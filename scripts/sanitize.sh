#!/usr/bin/env bash
# Builds the whole suite under a sanitizer preset and runs it (packaging and soak tests are
# left out: they build or run outside the sanitized binaries).
# Usage: scripts/sanitize.sh asan|tsan
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?usage: scripts/sanitize.sh asan|tsan}
scripts/deps.sh wrk apache2-utils  # wrk and ab drive the HTTP server example
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j"$(nproc)"
ctest --preset "$preset"
