#!/usr/bin/env bash
# Pipeline parallelism reproduces the single-rank loss curve. From one seed, 20 steps of a
# 4-layer model (global batch 16: micro 4 × 4 micro-batches at DP 1) on: PP = 2 and 4 with 1F1B
# and GPipe, interleaved 1F1B with 2 chunks per stage at PP 2 (and at PP 4 on 8 layers), uneven
# explicit stages [1, 3], the parameter-balanced partition, full recompute; PP 2 × DP 2 at every ZeRO stage;
# the 8-rank grid DP 2 × TP 2 × PP 2 with ZeRO-1 and interleaving, and with ZeRO-3 and SP;
# bf16 and fp16 (the loss scaler agreeing over every stage); evaluation and text samples at
# PP 4 and DP 2 × PP 2 ZeRO-3. What holds:
# - fp32 without TP: every step's loss equal to one rank's within 1e-6 relative (the stages
#   run one rank's arithmetic; only the tied embedding's two gradient halves and the norm's
#   parts are summed in another order), and step 1's gradient norm within 1e-6;
# - with TP: within 1e-5 (TP's partial sums), as the TP test holds it;
# - bf16 and fp16: within 1e-4 of one rank in the same precision (the same arithmetic in the
#   16-bit types; only fp32 gradient sums change order);
# - validation losses within 1e-6 and the same sampled text.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP [--set ...]: 20 steps, micro-batch 4 × 4 micro-batches per step.
run() {
  local name="$1" np="$2"; shift 2
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 20, seed: 5}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set model.n_layer=4 --set gradient_accumulation_steps=4 "$@"
}
pp() { echo "--set parallelism.pipeline_model_parallel_size=$1"; }
tp2="--set parallelism.tensor_model_parallel_size=2"
dp2="--set gradient_accumulation_steps=2"
il=(--set parallelism.pipeline.schedule=interleaved --set parallelism.pipeline.virtual_stages=2)

run ref 1
run pp2 2 $(pp 2)
expect_contains "$OUT" "layout: 2 rank(s) = DP 1 x TP 1 x PP 2"
expect_contains "$OUT" "pipeline: 1f1b, 4 micro-batches, stages [0, 2) [2, 4)"
run pp4 4 $(pp 4)
run pp2_gpipe 2 $(pp 2) --set parallelism.pipeline.schedule=gpipe
run pp4_gpipe 4 $(pp 4) --set parallelism.pipeline.schedule=gpipe
run pp2_interleaved 2 $(pp 2) "${il[@]}"
expect_contains "$OUT" "interleaved x 2, 4 micro-batches, stages [0, 1)+[2, 3) [1, 2)+[3, 4)"
# Interleaving at PP 4 needs 8 layers (two chunks per stage): against an 8-layer single rank.
run ref8 1 --set model.n_layer=8
run pp4_interleaved 4 $(pp 4) "${il[@]}" --set model.n_layer=8
run pp2_explicit 2 $(pp 2) --set "parallelism.pipeline.partition=[1, 3]"
expect_contains "$OUT" "stages [0, 1) [1, 4)"
run pp2_parameters 2 $(pp 2) --set parallelism.pipeline.partition=parameters
run pp2_full 2 $(pp 2) --set model.recompute=full
for z in 0 1 2 3; do run pp2_dp2_z$z 4 $(pp 2) $dp2 --set zero_optimization.stage=$z; done
run grid_z1_interleaved 8 $(pp 2) $tp2 $dp2 --set zero_optimization.stage=1 "${il[@]}"
expect_contains "$OUT" "layout: 8 rank(s) = DP 2 x TP 2 x PP 2"
run grid_z3_sp 8 $(pp 2) $tp2 $dp2 --set zero_optimization.stage=3 --set parallelism.sequence_parallel=true
run ref_bf16 1 --set bf16.enabled=true
run pp2_bf16 2 $(pp 2) --set bf16.enabled=true
run ref_fp16 1 --set fp16.enabled=true
run pp2_dp2_z3_fp16 4 $(pp 2) $dp2 --set zero_optimization.stage=3 --set fp16.enabled=true
text=(--set train.eval_interval=10 --set logging.sample_interval=20 --set logging.sample_tokens=24
  --set logging.sample_prompt=the)
run text_ref 1 "${text[@]}"
run text_pp4 4 $(pp 4) "${text[@]}"
run text_pp2_dp2_z3 4 $(pp 2) $dp2 --set zero_optimization.stage=3 "${text[@]}"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import Runs
runs = Runs(sys.argv[1], steps=20)
runs.check("pp4_interleaved", "ref8", 1e-6)
for name in ("pp2", "pp4", "pp2_gpipe", "pp4_gpipe", "pp2_interleaved", "pp2_explicit", "pp2_parameters", "pp2_full",
             "pp2_dp2_z0", "pp2_dp2_z1", "pp2_dp2_z2", "pp2_dp2_z3"):
    runs.check(name, "ref", 1e-6)
runs.check("grid_z1_interleaved", "ref", 1e-5)
runs.check("grid_z3_sp", "ref", 1e-5)
runs.check("pp2_bf16", "ref_bf16", 1e-4)
runs.check("pp2_dp2_z3_fp16", "ref_fp16", 1e-4)
for name in ("text_pp4", "text_pp2_dp2_z3"):
    runs.check_text(name, "text_ref", 1e-6, eval_steps=[10, 20])
runs.finish()
PY
echo ok
