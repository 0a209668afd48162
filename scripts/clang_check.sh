#!/usr/bin/env bash
# Every source of the repository (library, tests, examples, benchmarks, fuzzer) through
# clang's front end with -Wall -Wextra -Wpedantic -Werror, and the library's sources and
# public headers as C++17 too. Users build twheel's headers with clang as well, and its
# warnings differ from g++'s (an unused work guard in a header was found this way).
# Syntax only: nothing is linked or run. Needs the Boost and OpenSSL headers that
# scripts/test.sh installs; installs clang if missing.
#
# Usage: scripts/clang_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || scripts/deps.sh clang
clang++ --version | head -1

warn=(-fsyntax-only -Wall -Wextra -Wpedantic -Werror -Iinclude)
headers17=$(mktemp --suffix=.cpp)
trap 'rm -f "$headers17"' EXIT
for h in include/twheel/*.hpp include/twheel/beast/*.hpp; do
  echo "#include <${h#include/}>"
done >"$headers17"
echo 'int main() {}' >>"$headers17"

# One line a job: the standard, then the file. Two at a time (CI has two cores).
{
  for f in src/*.cpp "$headers17"; do echo "c++17 $f"; done
  for f in src/*.cpp test/*.cpp example/*.cpp bench/*.cpp fuzz/*.cpp; do echo "c++20 $f"; done
} | xargs -P 2 -L 1 sh -c 'clang++ -std="$0" "$@" '"${warn[*]}"' -Itest -Iexample -Ibench \
      || { echo "clang_check: FAILED: -std=$0 $1" >&2; exit 255; }'
echo "clang_check: every source compiles warning-free with clang"
