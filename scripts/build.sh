#!/usr/bin/env bash
# Configures (once) and builds strata with ninja into ${STRATA_BUILD_DIR:-build}.
# Extra arguments go to cmake's configure step, e.g. -DSTRATA_CUDA=OFF.
# STRATA_CMAKE_ARGS and STRATA_NINJA_ARGS hold more arguments, split at spaces.
set -euo pipefail
read -r -a cmake_args <<<"${STRATA_CMAKE_ARGS:-}"
read -r -a ninja_args <<<"${STRATA_NINJA_ARGS:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_BUILD_DIR:-$root/build}"
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" -G Ninja "${cmake_args[@]}" "$@"
fi
ninja -C "$build" "${ninja_args[@]}"
