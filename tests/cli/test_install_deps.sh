#!/usr/bin/env bash
# scripts/install-deps.sh's decisions, against stub dpkg-query, apt-get, apt-cache, id and
# python3 (nothing is installed): the distributions it knows and the warning for others,
# nothing done when all is present, only the missing packages installed, a pip-installed
# PyTorch taken as it is, packages the sources lack named (with Ubuntu's universe hint where
# universe is off) before anything is installed, PyTorch left out where the sources have none
# (Ubuntu 24.04), and the command to run when the user cannot install.
source "$(dirname "$0")/../lib/common.sh"
script="$SRC/scripts/install-deps.sh"
stubs="$WORK/stubs"
mkdir -p "$stubs"
cat >"$stubs/dpkg-query" <<'STUB'
#!/usr/bin/env bash
for p in $STUB_INSTALLED; do [ "$p" = "${!#}" ] && { printf 'install ok installed'; exit 0; }; done
exit 1
STUB
cat >"$stubs/apt-get" <<'STUB'
#!/usr/bin/env bash
echo "apt-get $*" >>"$STUB_LOG"
STUB
cat >"$stubs/apt-cache" <<'STUB'
#!/usr/bin/env bash
if [ $# -eq 1 ]; then  # apt-cache policy: the sources
  echo " 500 http://archive.example/ubuntu noble/main amd64 Packages"
  [ -z "${STUB_UNIVERSE:-}" ] || echo " 500 http://archive.example/ubuntu noble/universe amd64 Packages"
  exit 0
fi
for p in $STUB_UNAVAILABLE; do [ "$p" = "$2" ] && { printf '%s:\n  Candidate: (none)\n' "$2"; exit 0; }; done
printf '%s:\n  Candidate: 1.0-1\n' "$2"
STUB
cat >"$stubs/id" <<'STUB'
#!/usr/bin/env bash
echo "${STUB_UID:-0}"
STUB
cat >"$stubs/sudo" <<'STUB'
#!/usr/bin/env bash
exit 1
STUB
cat >"$WORK/python3" <<'STUB'
#!/usr/bin/env bash
exit "${STUB_NO_TORCH:-1}"
STUB
chmod +x "$stubs"/* "$WORK/python3"

os_release() {  # os_release ID VERSION_ID PRETTY_NAME
  printf 'ID=%s\nVERSION_ID="%s"\nPRETTY_NAME="%s"\n' "$1" "$2" "$3" >"$WORK/os-release"
}
base=(build-essential cmake ninja-build ccache pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libcli11-dev
  libfmt-dev catch2 nlohmann-json3-dev libopenblas-dev python3 python3-regex bible-kjv gnuplot-nox shellcheck)
deps() {  # deps CODE: runs install-deps with the stubs, output in $OUT, apt-get calls in $WORK/apt.log
  : >"$WORK/apt.log"
  run_expect "$1" env PATH="$stubs:$PATH" STRATA_OS_RELEASE="$WORK/os-release" STRATA_PYTHON3="$WORK/python3" \
    STUB_LOG="$WORK/apt.log" bash "$script"
}
apt_calls() { cat "$WORK/apt.log"; }

# Debian 12, everything present (PyTorch from Debian's packages): nothing to do.
os_release debian 12 "Debian GNU/Linux 12 (bookworm)"
STUB_INSTALLED="${base[*]} python3-torch python3-numpy" deps 0
expect_contains "$OUT" "all 19 required packages present (Debian GNU/Linux 12 (bookworm))"
[ ! -s "$WORK/apt.log" ] || fail "apt-get ran with everything present: $(apt_calls)"
grep -q warning <<<"$OUT" && fail "a warning on Debian 12: $OUT"

# Debian 13 missing gnuplot-nox and PyTorch: exactly those are installed, after an update.
os_release debian 13 "Debian GNU/Linux 13 (trixie)"
STUB_INSTALLED="${base[*]/gnuplot-nox/}" deps 0
expect_contains "$OUT" "installing on Debian GNU/Linux 13 (trixie): gnuplot-nox python3-numpy python3-torch"
expect_contains "$(apt_calls)" "apt-get update -q"
expect_contains "$(apt_calls)" "apt-get install -y -q --no-install-recommends gnuplot-nox python3-numpy python3-torch"

# Ubuntu 24.04 whose python3 imports a pip-installed PyTorch, its sources without universe:
# the packages they lack are named with the hint, and nothing is installed.
os_release ubuntu 24.04 "Ubuntu 24.04.1 LTS"
STUB_NO_TORCH=0 STUB_INSTALLED="${base[*]}" deps 0
expect_contains "$OUT" "already imports torch and numpy"
expect_contains "$OUT" "all 18 required packages present (Ubuntu 24.04.1 LTS)"
STUB_NO_TORCH=0 STUB_UNAVAILABLE="bible-kjv catch2" STUB_INSTALLED="${base[*]/bible-kjv/}" deps 2
expect_contains "$OUT" "the package sources of Ubuntu 24.04.1 LTS offer no bible-kjv"
expect_contains "$OUT" "add-apt-repository -y universe"
grep -q "apt-get install" "$WORK/apt.log" && fail "installed despite unavailable packages: $(apt_calls)"

# Ubuntu 24.04 as it is (universe on, no python3-torch at all): with the rest present, PyTorch is
# left out with a warning, no update and no root needed; with gnuplot-nox missing too, the rest
# is installed; a package missing for another reason gets no universe hint.
STUB_UNIVERSE=1 STUB_UNAVAILABLE=python3-torch STUB_UID=1000 STUB_INSTALLED="${base[*]} python3-numpy" deps 0
expect_contains "$OUT" "warning: the package sources of Ubuntu 24.04.1 LTS offer no python3-torch: the PyTorch reference test (tests/reference) will be reported skipped"
expect_contains "$OUT" "all 19 required packages present (Ubuntu 24.04.1 LTS)"
[ ! -s "$WORK/apt.log" ] || fail "apt-get ran with only an unoffered optional package missing: $(apt_calls)"
STUB_UNIVERSE=1 STUB_UNAVAILABLE=python3-torch STUB_INSTALLED="${base[*]/gnuplot-nox/}" deps 0
expect_contains "$OUT" "offer no python3-torch"
expect_contains "$(apt_calls)" "apt-get install -y -q --no-install-recommends gnuplot-nox python3-numpy"
grep -q "install.*python3-torch" "$WORK/apt.log" && fail "python3-torch asked of sources that lack it: $(apt_calls)"
STUB_UNIVERSE=1 STUB_UNAVAILABLE="python3-torch shellcheck" STUB_INSTALLED="${base[*]/shellcheck/}" deps 2
expect_contains "$OUT" "offer no shellcheck"
grep -q universe <<<"$OUT" && fail "the universe hint with universe on: $OUT"

# Another distribution: a warning, then the same names.
os_release fedora 41 "Fedora Linux 41"
STUB_INSTALLED="${base[*]} python3-torch python3-numpy" deps 0
expect_contains "$OUT" "warning: Fedora Linux 41 is not one strata is tested on"

# A user who cannot install: the command to run, exit 2, no apt-get.
os_release debian 12 "Debian GNU/Linux 12 (bookworm)"
STUB_UID=1000 STUB_INSTALLED="${base[*]/ccache/}" deps 2
expect_contains "$OUT" "sudo apt-get update && sudo apt-get install -y ccache python3-numpy python3-torch"
[ ! -s "$WORK/apt.log" ] || fail "apt-get ran for a user who cannot install: $(apt_calls)"
echo "ok: install-deps decisions"
