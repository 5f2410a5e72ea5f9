#!/usr/bin/env bash
# Runs the README's set-up on another distribution, as a new user would: debootstrap makes a
# minimal Debian 13 or Ubuntu 24.04 system in a directory (kept for the next run), a clone of
# this checkout's HEAD goes into it, and scripts/test.sh runs there (install-deps, build, the
# whole suite; no CUDA inside, and the network-namespace tests skip: no iproute2).
# Usage (as root): scripts/test-distro.sh trixie|noble [ctest args...]
# Environment: STRATA_DISTRO_ROOT (default /srv/strata-<suite>): where the system lives.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "test-distro: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: scripts/test-distro.sh trixie|noble [ctest args...]"
suite="$1"
shift
case "$suite" in
  trixie) mirror=http://deb.debian.org/debian components=main debootstrap_args=() ;;
  # Ubuntu's keyring is not a Debian package: the archive's signature cannot be checked while
  # bootstrapping (apt inside the new system checks it from then on).
  noble) mirror=http://archive.ubuntu.com/ubuntu components=main,universe debootstrap_args=(--no-check-gpg) ;;
  *) die "'$suite' is not trixie (Debian 13) or noble (Ubuntu 24.04)" ;;
esac
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mounts)"
system="${STRATA_DISTRO_ROOT:-/srv/strata-$suite}"

if ! command -v debootstrap >/dev/null; then
  echo "test-distro: installing debootstrap"
  apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi
if [ ! -x "$system/usr/bin/apt-get" ]; then
  script=/usr/share/debootstrap/scripts/$suite
  # An older debootstrap knows Ubuntu's newer suites by the script they share.
  [ -e "$script" ] || script=/usr/share/debootstrap/scripts/gutsy
  echo "test-distro: bootstrapping $suite into $system"
  debootstrap "${debootstrap_args[@]}" --variant=minbase --components="$components" "$suite" "$system" "$mirror" \
    "$script" >"$system.debootstrap.log" 2>&1 || die "debootstrap failed: $system.debootstrap.log"
fi
cp /etc/resolv.conf "$system/etc/resolv.conf"
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev dev/pts; do
  if ! mountpoint -q "$system/$m"; then
    mount --bind "/$m" "$system/$m"
    mounted+=("$system/$m")
  fi
done
rm -rf "$system/root/strata"
git clone -q "$root" "$system/root/strata"
echo "test-distro: $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' "$system/etc/os-release"), strata $(git -C "$root" rev-parse --short HEAD)"
chroot "$system" /usr/bin/env -i HOME=/root TERM=dumb DEBIAN_FRONTEND=noninteractive \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c 'cd /root/strata && scripts/test.sh "$@"' \
  bash "$@"
