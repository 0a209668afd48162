#!/usr/bin/env bash
# Builds twheel's unit suites and examples against another Asio and runs them: the check
# CI runs for every Boost it supports, and the one to run with your own Boost.
#
# Usage:
#   scripts/asio_matrix.sh ASIO_INCLUDE_DIR [BUILD_DIR]
#       ASIO_INCLUDE_DIR holds boost/asio.hpp (e.g. /opt/boost-1.89/include, or the
#       include/ of an Asio header tarball); it is put before the installed Boost on the
#       include path, so its Asio is the one compiled (the rest of Boost stays the
#       installed one). BUILD_DIR defaults to build-asio/<Asio version>.
#   scripts/asio_matrix.sh --tarballs DIR
#       For each DIR/asio-boost-*.tar.gz (see ../shared/asio/README.md): extracts it under
#       build-asio/ and runs the check above against it. Then the same for the installed
#       Boost is what scripts/test.sh does.
#
# The build is -Og with assertions on and warnings as errors, without the benchmarks and
# without the suites of the core wheel (timing_wheel includes no Asio, so they would test
# the same code on every version; the Release build of scripts/test.sh runs them). -Og
# keeps the flow analysis behind -Wmaybe-uninitialized and the like, and one entry builds
# and runs in 230 to 290 s here instead of about 395 s for a Release build of everything.
# Tests run: every CTest test but the soak, the packaging tests (they build a consumer
# against the installed Boost, not against ASIO_INCLUDE_DIR) and the docs check (the same
# on every version).
# The Asio directory is given with -isystem, as an installed Boost is, so that Asio's own
# headers are not held to twheel's -Werror (twheel's code is).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

check_one() {
  local inc=$1 build=${2:-}
  if [ ! -f "$inc/boost/asio/version.hpp" ]; then
    echo "asio_matrix: $inc has no boost/asio/version.hpp" >&2
    return 2
  fi
  local version
  version=$(sed -n 's|^#define BOOST_ASIO_VERSION \([0-9]*\).*|\1|p' "$inc/boost/asio/version.hpp")
  local dotted="$((version / 100000)).$((version / 100 % 1000)).$((version % 100))"
  build=${build:-build-asio/asio-$dotted}
  local t0=$SECONDS
  echo "== Asio $dotted from $inc, in $build"
  # Every step says `|| return 1`: `set -e` does not apply inside a function called as
  # `check_one ... || ...` (the loop below), so a failure must be returned by hand.
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None -DTWHEEL_WERROR=ON \
    -DTWHEEL_BUILD_BENCH=OFF -DTWHEEL_BUILD_CORE_TESTS=OFF \
    -DCMAKE_CXX_FLAGS="-Og -isystem $(cd "$inc" && pwd)" >/dev/null ||
    return 1
  cmake --build "$build" -j"${TWHEEL_JOBS:-2}" || return 1
  # The compiler must find this Asio before the installed one (otherwise the run would
  # test the installed Asio and pass silently).
  local seen
  seen=$(printf '#include <boost/asio/version.hpp>\nBOOST_ASIO_VERSION\n' |
    "${CXX:-c++}" -isystem "$inc" -E -P -x c++ - | tail -n 1) || return 1
  if [ "$seen" != "$version" ]; then
    echo "asio_matrix: expected BOOST_ASIO_VERSION $version, the compiler sees $seen" >&2
    return 1
  fi
  (cd "$build" && ctest --output-on-failure -j"${TWHEEL_JOBS:-2}" --timeout 600 \
    -LE 'soak|package|docs') || { echo "== Asio $dotted: FAILED"; return 1; }
  echo "== Asio $dotted: passed in $((SECONDS - t0)) s"
}

if [ "${1:-}" = "--tarballs" ]; then
  dir=${2:?usage: scripts/asio_matrix.sh --tarballs DIR}
  shopt -s nullglob
  tarballs=("$dir"/asio-boost-*.tar.gz)
  if [ ${#tarballs[@]} -eq 0 ]; then
    echo "asio_matrix: no asio-boost-*.tar.gz in $dir: skipped"
    exit 0
  fi
  failed=()
  for tarball in "${tarballs[@]}"; do
    name=$(basename "$tarball" .tar.gz)  # asio-boost-1.89.0
    src=$root/build-asio/src/$name
    rm -rf "$src" && mkdir -p "$src"
    tar xzf "$tarball" -C "$src" --strip-components=1
    check_one "$src/include" "build-asio/$name" || failed+=("$name")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "asio_matrix: FAILED: ${failed[*]}" >&2
    exit 1
  fi
  echo "asio_matrix: passed: $(for t in "${tarballs[@]}"; do basename "$t" .tar.gz; done | tr '\n' ' ')"
  exit 0
fi

[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
check_one "$@"
