#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs the whole test suite (ctest).
# Usage: scripts/test.sh [ctest args...], e.g. scripts/test.sh -L unit
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
STRATA_CMAKE_ARGS="${STRATA_CMAKE_ARGS:--DSTRATA_WERROR=ON}" "$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure --timeout 900 -j "${STRATA_TEST_JOBS:-2}" "$@"
