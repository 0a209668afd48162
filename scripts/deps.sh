#!/usr/bin/env bash
# Installs what building twheel needs from Debian's packages, only where it is missing.
set -euo pipefail

need=()
[ -f /usr/include/boost/asio.hpp ] || need+=(libboost1.81-dev)
[ -f /usr/include/boost/test/unit_test.hpp ] || need+=(libboost-test1.81-dev)
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v python3 >/dev/null || need+=(python3)
command -v pkg-config >/dev/null || need+=(pkg-config)  # the packaging test
for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done

if [ ${#need[@]} -gt 0 ]; then
  echo "twheel: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
