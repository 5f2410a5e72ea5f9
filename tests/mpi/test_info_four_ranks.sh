#!/usr/bin/env bash
# `strata info` under mpirun -np 4 reports four distinct ranks on the host.
source "$(dirname "$0")/../lib/common.sh"
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" info
expect_contains "$OUT" "world size: 4"
for r in 0 1 2 3; do
  grep -qE "^ +$r +[^ ]+ +[0-3]/4 " <<<"$OUT" || { echo "$OUT"; fail "no row for rank $r"; }
done
rows=$(grep -cE "^ +[0-9]+ +[^ ]+ +[0-9]+/4 " <<<"$OUT")
[ "$rows" -eq 4 ] || fail "expected 4 rank rows, got $rows"
echo "ok: four ranks"
