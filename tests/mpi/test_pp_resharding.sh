#!/usr/bin/env bash
# Checkpoints across pipeline layouts, with no conversion step. The 8-rank grid DP 2 × TP 2 ×
# PP 2 with ZeRO-3 saves at step 10 (each stage writes the layers it holds; the last stage's copy
# of the tied embedding is not written); it resumes at TP 2 × PP 4 with ZeRO-1, at PP 2 with
# interleaving (four chunks of one layer) × DP 2 with ZeRO-2, at PP 2 with stages [3, 1], and on
# one rank, each continuing the uninterrupted single-rank curve within 1e-5 relative. The same
# initial weights saved at PP 1, at PP 2 with stages [1, 3] and at TP 2 × PP 4 export to the same
# HuggingFace folder bit for bit. SIGTERM to one rank of a PP 2 run stops both stages after the
# same step with a checkpoint (exit 0), which resumes on one rank. SIGKILL to the last stage ends
# the job within 60 s naming the lost rank, and the run resumes from its last checkpoint bit for
# bit.
source "$(dirname "$0")/../lib/common.sh"
source "$(dirname "$0")/../mpi_unit/failure_helpers.sh"
make_text_data "$WORK/data"

# run NAME NP PP GAS STAGE [--set ...]: a 4-layer model up to step 20, global batch 16.
run() {
  local name="$1" np="$2" pp="$3" gas="$4" stage="$5"; shift 5
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 20, seed: 9}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set model.n_layer=4 --set parallelism.pipeline_model_parallel_size="$pp" \
    --set gradient_accumulation_steps="$gas" --set zero_optimization.stage="$stage" "$@"
}
tp2="--set parallelism.tensor_model_parallel_size=2"
ckpt="$WORK/ckpt/step_00000010"

run ref 1 1 4 0
run grid 8 2 2 3 $tp2 --set checkpoint.dir="$WORK/ckpt" --set checkpoint.save_interval=10
[ -f "$ckpt/manifest.json" ] || fail "no step-10 checkpoint"
run tp2_pp4 8 4 4 1 $tp2 --set checkpoint.resume="$ckpt"
expect_contains "$OUT" "resumed from $ckpt at step 10"
run interleaved_dp2 4 2 2 2 --set checkpoint.resume="$ckpt" --set parallelism.pipeline.schedule=interleaved \
  --set parallelism.pipeline.virtual_stages=2
run moved 2 2 4 0 --set checkpoint.resume="$ckpt" --set "parallelism.pipeline.partition=[3, 1]"
run one 1 1 4 0 --set checkpoint.resume="$ckpt"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import Runs
runs = Runs(sys.argv[1], steps=20)
runs.check_resumed("grid", "ref", 1, 1e-5)
for name in ("tp2_pp4", "interleaved_dp2", "moved", "one"):
    runs.check_resumed(name, "ref", 11, 1e-5)
runs.finish()
PY

# The same initial weights saved on one rank, at PP 2 with uneven stages and at TP 2 × PP 4
# export to identical folders.
init() {
  local name="$1" np="$2"; shift 2
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 1, seed: 9}" \
    "checkpoint: {dir: \"$WORK/$name\", save_initial: true}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set model.n_layer=4 "$@"
  run_expect 0 "$STRATA" export --checkpoint "$WORK/$name/step_00000000" --out "$WORK/export_$name"
}
init init_one 1
init init_pp2 2 --set parallelism.pipeline_model_parallel_size=2 --set "parallelism.pipeline.partition=[1, 3]"
init init_tp2_pp4 8 --set parallelism.pipeline_model_parallel_size=4 $tp2
for name in init_pp2 init_tp2_pp4; do
  cmp "$WORK/export_init_one/model.safetensors" "$WORK/export_$name/model.safetensors" ||
    fail "$name: export differs from one rank's"
  cmp "$WORK/export_init_one/config.json" "$WORK/export_$name/config.json" || fail "$name: config.json differs"
done
run_expect 0 "$STRATA" export --checkpoint "$ckpt" --out "$WORK/export_grid"

# SIGTERM to one rank of a PP 2 run: both stages stop after the same step and save; one rank
# resumes.
write_small_config "$WORK/sig.yaml" "$WORK/data" "train: {iters: 100000, seed: 9}" \
  "checkpoint: {dir: \"$WORK/ckpt_sig\"}" "logging: {metrics_file: \"$WORK/sig.jsonl\"}"
stop_one_rank "$WORK/sig.log" "$WORK/sig.jsonl" "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train \
  --config "$WORK/sig.yaml" --set model.n_layer=4 --set parallelism.pipeline_model_parallel_size=2 \
  --set gradient_accumulation_steps=4
[ "$RC" -eq 0 ] || fail "SIGTERM to one PP rank: exit code $RC, expected 0"
[ -f "$WORK/ckpt_sig/latest" ] || fail "no checkpoint after the stop"
stopped=$(grep -o 'stopping after step [0-9]*' "$WORK/sig.log" | head -n 1 | grep -o '[0-9]*$')
[ -n "$stopped" ] || fail "stop not reported"
run_expect 0 "$STRATA" train --config "$WORK/sig.yaml" --set model.n_layer=4 --set gradient_accumulation_steps=4 \
  --set train.iters=$((stopped + 2))
expect_contains "$OUT" "at step $stopped"

# SIGKILL to the last stage mid-run (checkpoints every 2 steps): the job ends, naming rank 1; the
# same command resumes from the newest complete checkpoint and continues the uninterrupted run's
# losses bit for bit.
write_small_config "$WORK/kill.yaml" "$WORK/data" "train: {iters: 100000, seed: 9}" \
  "checkpoint: {dir: \"$WORK/ckpt_kill\", save_interval: 2}"
kill_args=(--config "$WORK/kill.yaml" --set model.n_layer=4 --set parallelism.pipeline_model_parallel_size=2
  --set gradient_accumulation_steps=4)
START_MARKER="saved checkpoint" start_job "$WORK/kill.log" -np 2 "$STRATA" train "${kill_args[@]}"
kill -KILL "$(rank_pid 1)"
rc=0; wait_job 60 || rc=$?
[ "$rc" -ne 0 ] || { cat "$WORK/kill.log"; fail "job exited 0 after the last stage was killed"; }
grep -qE "rank 1[^0-9]" "$WORK/kill.log" || { cat "$WORK/kill.log"; fail "output does not name rank 1"; }
saved=$(cat "$WORK/ckpt_kill/latest")
until=$((10#${saved#step_} + 4))
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train "${kill_args[@]}" --set train.iters=$until \
  --set logging.metrics_file="$WORK/killed.jsonl"
expect_contains "$OUT" "resumed from $WORK/ckpt_kill/$saved"
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train "${kill_args[@]}" --set train.iters=$until \
  --set checkpoint.dir="$WORK/ckpt_whole" --set logging.metrics_file="$WORK/whole.jsonl"
diff <(train_losses "$WORK/killed.jsonl") <(train_losses "$WORK/whole.jsonl" | tail -n 4) ||
  fail "the run resumed after the kill differs from the uninterrupted run"
echo ok
