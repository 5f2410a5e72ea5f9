#!/usr/bin/env bash
# cuBLASLt is opened when the CUDA backend first calls it, not at start-up (its initialisers cost
# every process ~0.4 s): the binary does not name it as a needed library, `strata info` still
# reports its version, and where the library cannot be opened (hidden in a private mount
# namespace) info says "not found" and a CPU run trains as before.
source "$(dirname "$0")/../lib/common.sh"

needed="$(readelf -d "$STRATA" | grep NEEDED)" || fail "readelf found no NEEDED entries in $STRATA"
if grep -q cublasLt <<<"$needed"; then fail "strata links cuBLASLt at start-up: $needed"; fi

run_expect 0 "$STRATA" info
grep -qE "cuBLASLt [0-9]+," <<<"$OUT" || { echo "$OUT"; fail "info gives no cuBLASLt version"; }

# The library hidden: an empty file bound over it (and over every copy the loader could find)
# in a mount namespace of this command only.
if ! unshare -m true 2>/dev/null; then
  echo "ok: cuBLASLt opened on first use (no mount namespace here: the missing-library case not run)"
  exit 0
fi
library="$(ldconfig -p | awk '/libcublasLt\.so\.[0-9]+ / && !found {print $NF; found = 1}')"  # no early exit: ldconfig would get SIGPIPE
[ -n "$library" ] || library="$(dirname "$(ldd "$STRATA" | awk '/libcudart/{print $3}')")/libcublasLt.so.13"
[ -e "$library" ] || fail "no cuBLASLt library found to hide ($library)"
: > "$WORK/empty"
make_text_data "$WORK/data"
write_small_config "$WORK/small.yaml" "$WORK/data" "train: {iters: 2}"
# shellcheck disable=SC2016  # expanded by the inner shell, from its arguments
run_expect 0 unshare -m bash -c 'mount --bind "$1" "$(readlink -f "$2")" && "$3" info && "$3" train --config "$4"' \
  hide "$WORK/empty" "$library" "$STRATA" "$WORK/small.yaml"
expect_contains "$OUT" "cuBLASLt not found,"
expect_contains "$OUT" "step 2/2"
echo "ok: cuBLASLt opened on first use; without it info says so and a CPU run trains"
