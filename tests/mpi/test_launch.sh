#!/usr/bin/env bash
# launch/mpirun.sh: prints the mpirun command it runs (hosts with their slots, ranks per node,
# binding, the TCP interface, the exported environment, passed-through flags) and refuses bad
# options with exit 2; a 2-rank run through it on this machine trains exactly like plain mpirun.
source "$(dirname "$0")/../lib/common.sh"
launch="$SRC/launch/mpirun.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/run.yaml" "$WORK/data" "train: {iters: 4, seed: 6}"

export STRATA_COMM_TIMEOUT_S=120
run_expect 0 "$launch" --hosts node01,node02 --ranks-per-node 4 --iface eth1 --env HOME --dry-run \
  --mpirun-arg --oversubscribe -- strata train --config gpt.yaml
expect_contains "$OUT" "launch/mpirun.sh: mpirun --host node01:4,node02:4 -np 8 --map-by ppr:4:node --bind-to core"
expect_contains "$OUT" "--mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1"
expect_contains "$OUT" "-x STRATA_COMM_TIMEOUT_S"
expect_contains "$OUT" "-x HOME"
expect_contains "$OUT" "--oversubscribe strata train --config gpt.yaml"
cat > "$WORK/hosts" <<'TXT'
# two nodes
a slots=2

b slots=2
TXT
run_expect 0 "$launch" --hostfile "$WORK/hosts" --ranks-per-node 2 --dry-run -- strata train
expect_contains "$OUT" "--hostfile $WORK/hosts -np 4 --map-by ppr:2:node"
run_expect 2 "$launch" --hosts a --hostfile "$WORK/hosts" -- strata train
expect_contains "$OUT" "give --hosts or --hostfile, not both"
run_expect 2 "$launch" --bind socket -- strata train
expect_contains "$OUT" "--bind: 'socket' is not core or none"
run_expect 2 "$launch" --np 2
expect_contains "$OUT" "no command: give it after --"

# The same 2-rank run through the launcher and through plain mpirun.
run_expect 0 "$launch" --hosts localhost --ranks-per-node 2 --bind none --mpirun-arg --oversubscribe -- \
  "$STRATA" train --config "$WORK/run.yaml" --set logging.metrics_file="$WORK/launched.jsonl"
expect_contains "$OUT" "launch/mpirun.sh: mpirun --host localhost:2 -np 2"
expect_contains "$OUT" "layout: 2 rank(s)"
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/run.yaml" \
  --set logging.metrics_file="$WORK/plain.jsonl"
diff <(train_losses "$WORK/launched.jsonl") <(train_losses "$WORK/plain.jsonl") ||
  fail "the launched run differs from plain mpirun"
[ "$(train_losses "$WORK/launched.jsonl" | wc -l)" -eq 4 ] || fail "the launched run did not train 4 steps"
echo ok
