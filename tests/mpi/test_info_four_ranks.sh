#!/usr/bin/env bash
# `strata info` under mpirun -np 4 reports four distinct ranks with their (dp, pp, tp)
# grid coordinates for the layout asked for, and refuses a layout that does not divide.
source "$(dirname "$0")/../lib/common.sh"

# row_of RANK: the table row of that rank ("rank dp pp tp host local/size ...").
row_of() { grep -E "^ +$1 +[0-9]+ +[0-9]+ +[0-9]+ +[^ ]+ +[0-9]+/4 " <<<"$OUT" || { echo "$OUT"; fail "no row for rank $1"; }; }
# expect_coords RANK DP PP TP
expect_coords() {
  local row; row="$(row_of "$1")"
  read -r rank dp pp tp _ <<<"$row"
  [ "$dp $pp $tp" = "$2 $3 $4" ] || { echo "$OUT"; fail "rank $1: expected dp/pp/tp $2 $3 $4, got $dp $pp $tp"; }
}

run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" info
expect_contains "$OUT" "world size: 4 = DP 4 × PP 1 × TP 1"
for r in 0 1 2 3; do expect_coords $r $r 0 0; done
rows=$(grep -cE "^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[^ ]+ +[0-9]+/4 " <<<"$OUT")
[ "$rows" -eq 4 ] || fail "expected 4 rank rows, got $rows"

# TP varies fastest: ranks 0,1 are dp 0 and ranks 2,3 dp 1.
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" info --tp 2
expect_contains "$OUT" "world size: 4 = DP 2 × PP 1 × TP 2"
expect_coords 0 0 0 0; expect_coords 1 0 0 1; expect_coords 2 1 0 0; expect_coords 3 1 0 1

run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" info --pp 2
expect_coords 0 0 0 0; expect_coords 1 1 0 0; expect_coords 2 0 1 0; expect_coords 3 1 1 0

run_expect 2 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" info --tp 3
expect_contains "$OUT" "world size 4 is not divisible by TP × PP = 3"
echo "ok: four ranks with grid coordinates"
