#!/usr/bin/env bash
# `strata comm-check` on three ranks checks every op bit for bit and prints a bandwidth
# row per op; `strata --help` lists it apart, as a diagnostic, and it documents itself; bad
# sizes exit 2.
source "$(dirname "$0")/../lib/common.sh"
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 3 "$STRATA" comm-check --seconds 0.2 --bytes 6000
expect_contains "$OUT" "comm-check: 3 rank(s), mpi backend, 6000 bytes per op"
for op in all_reduce reduce_scatter all_gather; do
  grep -qE "^$op +6000 +[0-9]+ +[0-9.]+ us" <<<"$OUT" || { echo "$OUT"; fail "no bandwidth row for $op"; }
done
expect_contains "$OUT" "comm-check passed"
expect_contains "$OUT" "(the first a warm-up, left out of the table)"

run_expect 0 "$STRATA" --help
sed -n '/^Diagnostics:/,$p' <<<"$OUT" | grep -q "^  comm-check " || fail "comm-check not listed under Diagnostics in strata --help"
run_expect 0 "$STRATA" comm-check --help
expect_contains "$OUT" "--bytes"

run_expect 2 "$STRATA" comm-check --bytes 2
# Buffers larger than the node's memory: exit 2 with the arithmetic, before allocating.
run_expect 2 "$STRATA" comm-check --seconds 0 --bytes 17179869184
expect_contains "$OUT" "its buffers need 48.00 GiB of host memory on this node"
echo "ok: comm-check"
