#!/usr/bin/env bash
# Runs the soak (test/soak.cpp) against the Asio of every Boost in ../shared/asio: CI soaks
# Debian's Boost 1.81 only (.ci/run, 120 s); this is the long run for the other versions.
#
# Usage: scripts/soak_matrix.sh [SECONDS] [ASIO_TARBALL_DIR]
#   SECONDS defaults to 600 per version; ASIO_TARBALL_DIR to ../shared/asio.
# For each asio-boost-*.tar.gz: extracts it under build-soak/src/, builds twheel_soak
# (Release, warnings as errors) with that Asio first on the include path (-isystem, as
# scripts/asio_matrix.sh does), checks that the compiler sees that Asio, and runs the soak
# for SECONDS. Each run's output goes to build-soak/<name>.log; the summary lines of every
# run are printed at the end. Exits 1 if any build fails or any soak reports a violation.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-600}
dir=${2:-../shared/asio}
shopt -s nullglob
tarballs=("$dir"/asio-boost-*.tar.gz)
if [ ${#tarballs[@]} -eq 0 ]; then
  echo "soak_matrix: no asio-boost-*.tar.gz in $dir" >&2
  exit 2
fi
failed=()
for tarball in "${tarballs[@]}"; do
  name=$(basename "$tarball" .tar.gz)  # asio-boost-1.89.0
  src=$root/build-soak/src/$name
  build=build-soak/$name
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$tarball" -C "$src" --strip-components=1
  inc=$src/include
  version=$(sed -n 's|^#define BOOST_ASIO_VERSION \([0-9]*\).*|\1|p' "$inc/boost/asio/version.hpp")
  echo "== $name (BOOST_ASIO_VERSION $version), in $build"
  if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTWHEEL_WERROR=ON \
           -DTWHEEL_BUILD_BENCH=OFF -DTWHEEL_BUILD_EXAMPLES=OFF \
           -DCMAKE_CXX_FLAGS="-isystem $inc" >/dev/null &&
         cmake --build "$build" -j"${TWHEEL_JOBS:-2}" --target twheel_soak; }; then
    failed+=("$name (build)")
    continue
  fi
  # The compiler must find this Asio before the installed one, or the run soaks 1.81 again.
  seen=$(printf '#include <boost/asio/version.hpp>\nBOOST_ASIO_VERSION\n' |
    "${CXX:-c++}" -isystem "$inc" -E -P -x c++ - | tail -n 1)
  if [ "$seen" != "$version" ]; then
    echo "soak_matrix: expected BOOST_ASIO_VERSION $version, the compiler sees $seen" >&2
    failed+=("$name (include path)")
    continue
  fi
  if ! "$build/test/twheel_soak" --seconds "$seconds" 2>&1 | tee "build-soak/$name.log"; then
    failed+=("$name (soak)")
  fi
done
echo
echo "== soak_matrix summary ($seconds s per version)"
for tarball in "${tarballs[@]}"; do
  name=$(basename "$tarball" .tar.gz)
  [ -f "build-soak/$name.log" ] || continue
  echo "-- $name"
  sed -n '/^operations:/,$p' "build-soak/$name.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "soak_matrix: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "soak_matrix: passed: $(for t in "${tarballs[@]}"; do basename "$t" .tar.gz; done | tr '\n' ' ')"
