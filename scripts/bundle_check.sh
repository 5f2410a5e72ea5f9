#!/usr/bin/env bash
# Rehearses scripts/gpu_check.sh on this Debian machine as a machine without Debian's packages
# would run it: in a private mount namespace, every file that the bundle's packages (.deps/gpu)
# installed on this system is hidden (an empty file is mounted over it) and dpkg-query reports
# nothing installed, so the check must unpack the bundle, relocate OpenMPI and build and run
# against it alone. Without a GPU the GPU steps are skipped; the rest must pass. Needs root
# (unshare, mount). See docs/gpu.md.
#
# Usage: scripts/bundle_check.sh OUTDIR   (environment as for gpu_check.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/bundle_check.sh OUTDIR}"
bundle="${STRATA_DEPS_BUNDLE:-$root/.deps/gpu}"
[ "$(id -u)" -eq 0 ] || { echo "bundle_check.sh: needs root (a mount namespace)" >&2; exit 2; }
[ -f "$bundle/MANIFEST.txt" ] || { echo "bundle_check.sh: no $bundle/MANIFEST.txt: run scripts/gpu_bundle.sh" >&2; exit 2; }
command -v unshare >/dev/null || { echo "bundle_check.sh: unshare (util-linux) is missing" >&2; exit 2; }

scratch="$(mktemp -d "${TMPDIR:-/tmp}/strata-bundle-check.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/bin"
printf '#!/bin/sh\nexit 1\n' >"$scratch/bin/dpkg-query"  # "not installed", whatever is asked
chmod +x "$scratch/bin/dpkg-query"
# The system's files of every bundled package (links are covered by hiding their targets).
grep -v '^#' "$bundle/MANIFEST.txt" | awk '{print $1}' | while read -r package; do
  dpkg -L "$package" 2>/dev/null || true
done | sort -u >"$scratch/files"

export STRATA_BUILD_DIR="${STRATA_BUILD_DIR:-$root/build-bundle-check}"
export STRATA_DEPS_UNPACK="${STRATA_DEPS_UNPACK:-$scratch/deps}"
export STRATA_CHECK_BUDGET_S="${STRATA_CHECK_BUDGET_S:-3000}"  # a 2-core build takes minutes
# shellcheck disable=SC2016  # the inner shell expands its own variables
unshare --mount --propagation private bash -c '
  set -e
  hidden=0
  while read -r f; do
    if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; hidden=$((hidden + 1)); fi
  done <"$1/files"
  echo "bundle_check: hid $hidden files of the bundled packages"
  PATH="$1/bin:$PATH" bash "$2/scripts/gpu_check.sh" "$3"
' bundle_check "$scratch" "$root" "$out"
