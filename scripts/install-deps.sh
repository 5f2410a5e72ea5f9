#!/usr/bin/env bash
# Installs the distribution packages strata needs to build, test and run on Debian 12 and 13 and
# Ubuntu 24.04, which share the package names (Ubuntu's come from its universe component) but
# for PyTorch, which Ubuntu 24.04 lacks: the reference test it serves is then skipped.
# Idempotent: when all are present it does nothing. Needs root (or sudo) only when something is
# missing. STRATA_OS_RELEASE and STRATA_PYTHON3 name another os-release file and python3.
set -euo pipefail

os_release="${STRATA_OS_RELEASE:-/etc/os-release}"
python3_bin="${STRATA_PYTHON3:-/usr/bin/python3}"

ID="" VERSION_ID="" PRETTY_NAME=""
# shellcheck source=/dev/null
[ -r "$os_release" ] && . "$os_release"
distribution="${PRETTY_NAME:-an unknown distribution}"
case "${ID:-} ${VERSION_ID:-}" in
  "debian 12" | "debian 13" | "ubuntu 24.04") ;;
  *) echo "install-deps: warning: $distribution is not one strata is tested on (Debian 12 or 13, Ubuntu 24.04);" \
    "trying the same package names" >&2 ;;
esac

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libcli11-dev libfmt-dev catch2 nlohmann-json3-dev libopenblas-dev
  python3 python3-regex bible-kjv gnuplot-nox shellcheck
)
# The PyTorch reference tier runs on the system python3: a PyTorch it already imports (one
# installed with pip, as on GPU images) is used as it is. PyTorch is optional: Ubuntu 24.04 has
# no python3-torch, and without it only that tier is skipped.
optional=()
if "$python3_bin" -c "import torch, numpy" >/dev/null 2>&1; then
  echo "install-deps: $python3_bin already imports torch and numpy"
else
  packages+=(python3-numpy)
  optional+=(python3-torch)
fi

missing=()
for p in "${packages[@]}" "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

is_optional() { [[ " ${optional[*]} " == *" $1 "* ]]; }
offered() {  # offered PACKAGE: the configured sources have a candidate for it
  local candidate
  candidate="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')"
  [ -n "$candidate" ] && [ "$candidate" != "(none)" ]
}
# leave_out_unoffered_optional: drops from `missing` the optional packages the sources lack,
# saying what that costs.
leave_out_unoffered_optional() {
  local kept=() p
  for p in "${missing[@]}"; do
    if is_optional "$p" && ! offered "$p"; then
      echo "install-deps: warning: the package sources of $distribution offer no $p: the PyTorch reference" \
        "test (tests/reference) will be reported skipped; to run it, install PyTorch for $python3_bin (pip)" >&2
      continue
    fi
    kept+=("$p")
  done
  missing=("${kept[@]}")
}

only_optional=1
for p in "${missing[@]}"; do is_optional "$p" || only_optional=0; done
# Only optional packages missing: the current package lists decide, without an update or root.
[ "$only_optional" -eq 0 ] || leave_out_unoffered_optional
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} required packages present ($distribution)"
  exit 0
fi

echo "install-deps: installing on $distribution: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo)
else
  echo "install-deps: these packages are missing and this user cannot install them:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
leave_out_unoffered_optional
# Name what the configured sources lack before apt-get refuses the whole list.
unavailable=()
for p in "${missing[@]}"; do offered "$p" || unavailable+=("$p"); done
if [ ${#unavailable[@]} -gt 0 ]; then
  echo "install-deps: the package sources of $distribution offer no ${unavailable[*]}" >&2
  if [ "${ID:-}" = ubuntu ] && ! apt-cache policy 2>/dev/null | grep -q '/universe '; then
    echo "  they are in Ubuntu's universe component: sudo add-apt-repository -y universe, then run this again" >&2
  fi
  exit 2
fi
[ ${#missing[@]} -gt 0 ] || { echo "install-deps: done"; exit 0; }
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
