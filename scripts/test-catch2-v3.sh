#!/usr/bin/env bash
# Builds and runs the unit tests (and the MPI Catch2 tests) against Catch2 v3, the version of
# Debian 13 and Ubuntu 24.04, on a machine whose own Catch2 is v2 (Debian 12). Debian 13's
# catch2 source is fetched with apt from a scratch source list (nothing in the system's apt
# configuration changes), built once into .deps/catch2-v3 and used by a build tree of its own.
# Its binary package cannot be used instead: its static library needs Debian 13's glibc and
# libstdc++.
# Usage: scripts/test-catch2-v3.sh [ctest args...] (default: -L unit and the MPI Catch2 tests)
# Environment: STRATA_CATCH2_V3_BUILD_DIR (default build-catch2-v3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.deps/catch2-v3"
build="${STRATA_CATCH2_V3_BUILD_DIR:-$root/build-catch2-v3}"
suite="trixie"

if [ ! -f "$prefix/lib/cmake/Catch2/Catch2Config.cmake" ]; then
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/strata-catch2.XXXXXX")"
  trap 'rm -rf "$scratch"' EXIT
  mkdir -p "$scratch/lists/partial" "$scratch/cache/archives/partial" "$scratch/src"
  echo "deb-src http://deb.debian.org/debian $suite main" > "$scratch/sources.list"
  apt_opts=(-o Dir::Etc::sourcelist="$scratch/sources.list" -o Dir::Etc::sourceparts=-
    -o Dir::State::Lists="$scratch/lists" -o Dir::Cache="$scratch/cache" -o APT::Get::List-Cleanup=0
    -o APT::Sandbox::User=root)
  echo "test-catch2-v3: fetching Debian $suite's catch2 source"
  apt-get "${apt_opts[@]}" -qq update
  (cd "$scratch/src" && apt-get "${apt_opts[@]}" -qq source --download-only catch2)
  tar -xzf "$scratch"/src/catch2_*.orig.tar.gz -C "$scratch/src"
  source_dir="$(find "$scratch/src" -maxdepth 1 -type d -name 'Catch2-*' | head -n 1)"
  [ -n "$source_dir" ] || { echo "test-catch2-v3: no Catch2 source in the package"; exit 1; }
  echo "test-catch2-v3: building $(basename "$source_dir") into $prefix"
  cmake -S "$source_dir" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
    -DCATCH_INSTALL_DOCS=OFF -DCATCH_INSTALL_EXTRAS=ON -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
  ninja -C "$scratch/build" install >/dev/null
fi

cmake -S "$root" -B "$build" -G Ninja -DSTRATA_CUDA=OFF -DSTRATA_EMULATOR=OFF -DSTRATA_WERROR=ON \
  -DCMAKE_PREFIX_PATH="$prefix" | grep -F -- "-- Catch2 " || { echo "test-catch2-v3: Catch2 not reported"; exit 1; }
read -r -a ninja_args <<<"${STRATA_NINJA_ARGS:-}"  # more ninja arguments, split at spaces
ninja -C "$build" "${ninja_args[@]}"
cd "$build"
if [ $# -eq 0 ]; then set -- -L unit; fi
ctest --output-on-failure --timeout 900 -j "${STRATA_TEST_JOBS:-2}" "$@"
if [ "$*" = "-L unit" ]; then ctest --output-on-failure --timeout 300 -R "^mpi: comm np="; fi
