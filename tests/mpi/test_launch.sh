#!/usr/bin/env bash
# launch/mpirun.sh: prints the mpirun command it runs (hosts with their slots, ranks per node,
# binding, the TCP interface, the exported environment, passed-through flags; ranks per node from
# a hostfile's slots) and refuses bad options with exit 2 (an option where a value belongs, a bad
# variable name, an empty host, more ranks than the nodes hold, hostfile lines Open MPI would
# misread, more ranks than cores to bind to); a 2-rank run through it on this machine trains
# exactly like plain mpirun.
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
# An option where a value belongs is refused, never launched with (--dry-run taken as a value).
run_expect 2 "$launch" --iface --dry-run -- echo launched
expect_contains "$OUT" "--iface needs a value, not the option '--dry-run'"
! grep -q launched <<<"$OUT" || fail "the command ran"
run_expect 2 "$launch" --env BAD-NAME --dry-run -- strata train
expect_contains "$OUT" "--env: 'BAD-NAME' is not a variable name"
run_expect 0 env -u STRATA_NOT_SET_ANYWHERE "$launch" --env STRATA_NOT_SET_ANYWHERE --dry-run -- strata train
expect_contains "$OUT" "--env STRATA_NOT_SET_ANYWHERE: not set here, so not exported"
run_expect 2 "$launch" --hosts a,,b --dry-run -- strata train
expect_contains "$OUT" "--hosts: 'a,,b' has an empty name"
run_expect 2 "$launch" --hosts a,b --ranks-per-node 2 --np 6 --dry-run -- strata train
expect_contains "$OUT" "--np 6 is more than 2 rank(s) per node × 2 node(s)"
# Without --ranks-per-node, the hostfile's slots (when every node gives the same) place the ranks.
run_expect 0 "$launch" --hostfile "$WORK/hosts" --dry-run -- strata train
expect_contains "$OUT" "--hostfile $WORK/hosts -np 4 --map-by ppr:2:node"
# hostfile_case RC TEXT EXPECTED: a hostfile of TEXT (printf format) gives exit RC and EXPECTED.
hostfile_case() {
  # shellcheck disable=SC2059  # TEXT is the format
  printf "$2" > "$WORK/case_hosts"
  run_expect "$1" "$launch" --hostfile "$WORK/case_hosts" --dry-run -- strata train
  expect_contains "$OUT" "$3"
}
hostfile_case 2 'a slots=2\nb slots=4\n' "its nodes give different slots"
# A host listed on two lines is one node with a slot per line (Open MPI's reading): 2 ranks on
# it by default. slots= on two lines of a host, which Open MPI fails on with an "internal error",
# a bad slot count, and a hostfile without a node are refused, naming the line.
hostfile_case 0 'a\na\n' "--hostfile $WORK/case_hosts -np 2 --map-by ppr:2:node"
hostfile_case 2 'a slots=2\na slots=2\n' "line 2: a has slots= on two lines; give them once"
hostfile_case 2 'a slots=two\n' "line 1: slots=two is not slots=N with N a positive number"
hostfile_case 2 '# nothing yet\n\n' "lists no node (one per line: NAME slots=N)"
# More ranks than this machine's cores, bound to cores, is refused with the way out.
run_expect 2 "$launch" --ranks-per-node "$(( $(nproc) + 1 ))" --dry-run -- strata train
expect_contains "$OUT" "cannot each be bound to a core: give --bind none"
# --mpirun-arg does not take this script's own options as its value; --hosts takes names only
# (host:N would have run N - 1 ranks fewer); a trailing comma is an empty name; a program that
# is not there is named before mpirun starts.
run_expect 2 "$launch" --mpirun-arg --dry-run -- echo launched
expect_contains "$OUT" "--mpirun-arg needs a value, not this script's option '--dry-run'"
run_expect 2 "$launch" --hosts localhost:2 --dry-run -- strata train
expect_contains "$OUT" "--hosts: 'localhost:2': give node names only; the ranks per node are --ranks-per-node"
run_expect 2 "$launch" --hosts a,b, --dry-run -- strata train
expect_contains "$OUT" "has an empty name"
run_expect 2 "$launch" -- "$WORK/no-such-program" train
expect_contains "$OUT" "'$WORK/no-such-program' is not a command this shell finds"
run_expect 2 env STRATA_STOP_GRACE_S=abc "$SRC/launch/strata-mpirun" -np 1 "$STRATA" info
expect_contains "$OUT" "STRATA_STOP_GRACE_S: 'abc' is not a whole number of seconds"
# launch/slurm.sbatch's checks before any job step (run here as sbatch would, without Slurm):
# -c FILE is train's --config; a job without a task count is told which #SBATCH line gives it.
sbatch_env=(env SLURM_JOB_ID=1 SLURM_JOB_NODELIST=localhost STRATA_BIN="$STRATA")
run_expect 2 "${sbatch_env[@]}" SLURM_NTASKS=2 bash "$SRC/launch/slurm.sbatch" -c "$WORK/run.yaml" \
  --set zero_optimization.stage=9
expect_contains "$OUT" "the config does not validate for 2 ranks: the job ends here"
run_expect 2 "${sbatch_env[@]}" bash "$SRC/launch/slurm.sbatch" --config "$WORK/run.yaml"
expect_contains "$OUT" "SLURM_NTASKS is '': sbatch sets it when the job asks for tasks"
run_expect 2 "${sbatch_env[@]}" SLURM_NTASKS=2 STRATA_STOP_GRACE_S=-5 bash "$SRC/launch/slurm.sbatch" --config "$WORK/run.yaml"
expect_contains "$OUT" "STRATA_STOP_GRACE_S: '-5' is not a whole number of seconds"
# A signal while the config is checked: the job step never starts, and the script says so once.
cat > "$WORK/slow_strata" <<SH
#!/usr/bin/env bash
[ "\$1" != config ] || sleep 2
exec "$STRATA" "\$@"
SH
chmod +x "$WORK/slow_strata"
"${sbatch_env[@]}" SLURM_NTASKS=2 STRATA_BIN="$WORK/slow_strata" bash "$SRC/launch/slurm.sbatch" \
  --config "$WORK/run.yaml" > "$WORK/early_stop.txt" 2>&1 &
sbatch_job=$!
sleep 0.5
kill -TERM "$sbatch_job"
set +e; wait "$sbatch_job"; rc=$?; set -e
OUT="$(cat "$WORK/early_stop.txt")"
[ "$rc" -eq 143 ] || { echo "$OUT"; fail "SIGTERM before the job step: exit $rc, expected 143"; }
expect_contains "$OUT" "SIGTERM came before the job step started: nothing ran, nothing was saved; not requeued"
! grep -q "saved and stopped\|running:" <<<"$OUT" || fail "a job whose step never started: $OUT"

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
