#!/usr/bin/env bash
# Fetches the Debian packages strata needs to build and run on a machine that lacks them (the GPU
# machine: CUDA, CMake, a C++ compiler and Python, but no OpenMPI, yaml-cpp, fmt, CLI11, Catch2,
# OpenBLAS or nlohmann-json). scripts/gpu_check.sh unpacks them there; see docs/gpu.md.
#
# Usage: scripts/gpu_bundle.sh [DIR]      (default DIR: <repo>/.deps/gpu, git-ignored)
# Runs on Debian bookworm, amd64, with `apt-get download` reaching Debian's registry.
# Environment:
#   STRATA_BUNDLE_MAX_MIB  refuse a bundle larger than this (default 48: the working tree and
#                          the bundle travel together under a 64 MiB limit)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.deps/gpu}"
max_mib="${STRATA_BUNDLE_MAX_MIB:-48}"

die() { echo "gpu_bundle: $*" >&2; exit 1; }

# What strata links against or runs directly; everything else comes from their dependencies.
roots=(
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libfmt-dev libcli11-dev catch2 nlohmann-json3-dev
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread
)

# Dependencies left out. A machine that can build C++ has these (glibc, the GCC runtime and
# toolchain, zlib and the other base libraries), or strata never loads them: compilers for
# Fortran, Perl and autotools, ssh, javascript docs, and hwloc's optional plugins (X11, OpenCL,
# libxml2 with its 36 MiB ICU; hwloc runs without them). Shadowing a base library of the target
# system with Debian's copy through LD_LIBRARY_PATH would be worse than leaving it out.
skip_exact=(
  adduser debconf debianutils dpkg passwd tar perl perl-base openssh-client
  libc6 libc6-dev libc-dev-bin linux-libc-dev libcrypt1 libcrypt-dev rpcsvc-proto
  libgcc-s1 libstdc++6 libgomp1 libitm1 libatomic1 libasan8 liblsan0 libtsan2 libubsan1
  libcc1-0 libgmp10 libisl23 libmpfr6 libmpc3 libjansson4 libgprofng0 libbinutils
  libctf0 libctf-nobfd0 binutils binutils-common binutils-x86-64-linux-gnu
  m4 autoconf automake autotools-dev
  zlib1g zlib1g-dev libzstd1 liblzma5 libbz2-1.0 libmd0 libbsd0 libacl1 libattr1
  libselinux1 libsemanage2 libsemanage-common libsepol2 libpcre2-8-0 libaudit1
  libaudit-common libcap-ng0 libcap2 libdb5.3 libgdbm6 libgdbm-compat4 libpam0g
  libpam-modules libpam-modules-bin libtinfo6 libedit2 libssl3 libudev1 libuuid1
  libcbor0.8 libfido2-1 libcom-err2 libkrb5-3 libkrb5support0 libk5crypto3 libkeyutils1
  libgssapi-krb5-2 libtirpc3 libtirpc-common libtirpc-dev libnsl2 libnsl-dev
  libjs-jquery libjs-jquery-ui
  libhwloc-plugins libxnvctrl0 ocl-icd-libopencl1 libpciaccess0 libxml2 libicu72
  libx11-6 libx11-data libxau6 libxdmcp6 libxcb1 libxext6
)
# Patterns of package names left out for the same reasons (compilers and their runtimes'
# development files, Perl modules).
skip_patterns=('gcc-*' 'cpp-*' 'g++-*' 'gfortran*' 'libgfortran-*-dev' 'libgcc-*-dev'
  'libstdc++-*-dev' 'perl-modules-*' 'libperl*')

is_skipped() {
  local p="$1" s
  for s in "${skip_exact[@]}"; do [ "$p" = "$s" ] && return 0; done
  for s in "${skip_patterns[@]}"; do
    # shellcheck disable=SC2053  # the pattern is meant to glob
    [[ "$p" == $s ]] && return 0
  done
  return 1
}

is_root_package() {
  local p="$1" r
  for r in "${roots[@]}"; do [ "$p" = "$r" ] && return 0; done
  return 1
}

command -v apt-get >/dev/null || die "needs apt-get (a Debian bookworm machine)"
arch="$(dpkg --print-architecture)"
[ "$arch" = amd64 ] || die "this machine is $arch; the GPU machine is amd64. Run on an amd64 Debian machine."
if ! apt-cache show libopenmpi-dev >/dev/null 2>&1; then
  echo "gpu_bundle: package lists are missing; running apt-get update"
  apt-get update -q >/dev/null || die "apt-get update failed (run as root, with Debian's registry reachable)"
fi

# apt's own resolver picks one package per alternative and per virtual package, which a plain
# `apt-cache depends --recurse` cannot (it follows every alternative: flang, LLVM, hundreds of
# MiB). Simulating the install against an empty package database lists the whole closure.
empty_status="$(mktemp)"
trap 'rm -f "$empty_status"' EXIT
closure="$(apt-get -s -o Dir::State::status="$empty_status" -o Debug::NoLocking=1 \
  install --no-install-recommends "${roots[@]}" 2>&1)" ||
  die "apt could not resolve ${roots[*]}: $closure"
mapfile -t all_packages < <(awk '/^Inst /{print $2}' <<<"$closure")
[ ${#all_packages[@]} -gt 0 ] || die "apt resolved no packages: $closure"

declare -A in_closure=()
for p in "${all_packages[@]}"; do in_closure[$p]=1; done

# keep PACKAGE: whether it travels. Development files of a dependency (libevent-dev,
# libhwloc-dev, ...) serve only to build against it, which strata does not.
keep() {
  [ -n "${in_closure[$1]:-}" ] || return 1
  is_skipped "$1" && return 1
  if [[ "$1" == *-dev ]] && ! is_root_package "$1"; then return 1; fi
  return 0
}

# Walk the dependency graph from the roots through kept packages only, so that what only a
# left-out package needed (libevent-openssl for libevent-dev, say) stays behind too. apt's
# choice among alternatives is the one in the closure.
declare -A visited=()
queue=("${roots[@]}")
wanted=()
while [ ${#queue[@]} -gt 0 ]; do
  p="${queue[0]}"
  queue=("${queue[@]:1}")
  [ -n "${visited[$p]:-}" ] && continue
  visited[$p]=1
  wanted+=("$p")
  # Depends/PreDepends lines name a package or a <virtual> one, whose providers follow indented.
  while read -r dep; do
    [ -z "${visited[$dep]:-}" ] && keep "$dep" && queue+=("$dep")
  done < <(apt-cache depends --important "$p" |
    awk '/^ *\|?(Pre)?Depends:/ {print $2; next} /^    [^ ]/ {print $1}' | tr -d '<>')
done
for p in "${roots[@]}"; do
  [ -n "${in_closure[$p]:-}" ] || die "apt did not resolve $p"
done

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# A package no longer wanted (or an older version) must not travel along.
find "$dir" -maxdepth 1 -name '*.deb' -delete
echo "gpu_bundle: downloading ${#wanted[@]} packages into $dir"
(cd "$dir" && apt-get download -q "${wanted[@]}" >/dev/null 2>"$dir/.download.err") || {
  cat "$dir/.download.err" >&2
  die "apt-get download failed"
}
rm -f "$dir/.download.err"

# A manifest for the reader and for gpu_check.sh's log.
{
  echo "# Debian packages for strata on machines without them; made by scripts/gpu_bundle.sh"
  for f in "$dir"/*.deb; do
    # shellcheck disable=SC2016  # dpkg's own ${Field} syntax
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$f"
  done
} >"$dir/MANIFEST.txt"

total_bytes="$(du -cb "$dir"/*.deb | tail -n 1 | cut -f1)"
total_mib="$(awk -v b="$total_bytes" 'BEGIN{printf "%.1f", b / 1048576}')"
count="$(find "$dir" -maxdepth 1 -name '*.deb' | wc -l)"
echo "gpu_bundle: $count packages, $total_mib MiB in $dir"
if [ "$total_bytes" -gt $((max_mib * 1048576)) ]; then
  die "the bundle is $total_mib MiB, over the $max_mib MiB budget (the carry limit is 64 MiB with the working tree)"
fi
echo "gpu_bundle: carry it to the GPU machine with the repo (device run: carry [\"${dir#"$root"/}\"]),"
echo "gpu_bundle: then run: bash scripts/gpu_check.sh OUTDIR"
