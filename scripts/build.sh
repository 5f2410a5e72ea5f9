#!/usr/bin/env bash
# Configures (once) and builds strata with ninja into ${STRATA_BUILD_DIR:-build}.
# Extra arguments go to cmake's configure step, e.g. -DSTRATA_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_BUILD_DIR:-$root/build}"
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" -G Ninja ${STRATA_CMAKE_ARGS:-} "$@"
fi
ninja -C "$build" ${STRATA_NINJA_ARGS:-}
