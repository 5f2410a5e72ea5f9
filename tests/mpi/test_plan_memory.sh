#!/usr/bin/env bash
# strata plan's memory is the trainer's: for 24 layouts spanning DP, TP (with and without SP),
# PP (1F1B, GPipe, interleaved), ZeRO 0-3, every recompute mode, fp32/bf16/fp16 and the tiny and
# quickstart models on 1-8 ranks, `strata plan --explain --json` predicts, per term (parameters,
# gradients, optimizer state, workspace, activations), the bytes the run's memory record then
# measures on the rank that needs the most, within 5%; and in total, the guarded device
# allocator's measured peak after the first step within 5%.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/tiny.yaml" "$WORK/data" "train: {iters: 1, seed: 1}"
write_small_config "$WORK/quick.yaml" "$WORK/data" "train: {iters: 1, seed: 1}" \
  "model: {n_layer: 4, n_head: 4, d_model: 128, vocab_size: 256, seq_len: 128}"
sed -i '/^train_micro_batch_size_per_gpu/d; /^gradient_accumulation_steps/d; /^model: {n_layer: 2/d' "$WORK/quick.yaml"
echo "train_batch_size: 32" >> "$WORK/quick.yaml"

tp() { echo "--set parallelism.tensor_model_parallel_size=$1"; }
pp() { echo "--set parallelism.pipeline_model_parallel_size=$1"; }
# name | model | ranks | overrides
layouts=(
  "z0|tiny|1|"
  "z1_dp2|tiny|2|--set zero_optimization.stage=1"
  "z2_dp4|tiny|4|--set zero_optimization.stage=2 --set bf16.enabled=true"
  "z3_dp4|tiny|4|--set zero_optimization.stage=3"
  "z3_dp2_bf16_full|tiny|2|--set zero_optimization.stage=3 --set bf16.enabled=true --set model.recompute=full"
  "tp2|tiny|2|$(tp 2)"
  "tp2_sp|tiny|2|$(tp 2) --set parallelism.sequence_parallel=true --set model.recompute=selective"
  "tp2_dp2_z1_fp16|tiny|4|$(tp 2) --set zero_optimization.stage=1 --set fp16.enabled=true"
  "pp2_1f1b|tiny|2|$(pp 2)"
  "pp2_gpipe|tiny|2|$(pp 2) --set parallelism.pipeline.schedule=gpipe"
  "pp2_interleaved|tiny|2|$(pp 2) --set model.n_layer=4 --set parallelism.pipeline.schedule=interleaved --set parallelism.pipeline.virtual_stages=2"
  "pp2_dp2_z2_full|tiny|4|$(pp 2) --set zero_optimization.stage=2 --set model.recompute=full"
  "dp2_tp2_pp2|tiny|8|$(tp 2) $(pp 2) --set zero_optimization.stage=1 --set bf16.enabled=true"
  "dp2_tp2_pp2_z3_sp|tiny|8|$(tp 2) $(pp 2) --set zero_optimization.stage=3 --set parallelism.sequence_parallel=true"
  "q_z0|quick|1|"
  "q_selective|quick|1|--set model.recompute=selective --set bf16.enabled=true"
  "q_full_mb8|quick|1|--set model.recompute=full --set train_micro_batch_size_per_gpu=8"
  "q_dp2_z1|quick|2|--set zero_optimization.stage=1 --set train_micro_batch_size_per_gpu=4"
  "q_dp2_z3|quick|2|--set zero_optimization.stage=3 --set bf16.enabled=true"
  "q_tp2_sp|quick|2|$(tp 2) --set parallelism.sequence_parallel=true --set train_micro_batch_size_per_gpu=8"
  "q_tp4|quick|4|$(tp 4) --set model.recompute=full"
  "q_pp2|quick|2|$(pp 2) --set train_micro_batch_size_per_gpu=4"
  "q_pp4_interleaved|quick|4|$(pp 2) --set parallelism.pipeline.schedule=interleaved --set parallelism.pipeline.virtual_stages=2 --set zero_optimization.stage=1 --set train_micro_batch_size_per_gpu=4"
  "q_tp2_pp2_z2_fp16|quick|4|$(tp 2) $(pp 2) --set zero_optimization.stage=2 --set fp16.enabled=true --set train_micro_batch_size_per_gpu=4"
)
for entry in "${layouts[@]}"; do
  IFS='|' read -r name model np sets <<<"$entry"
  # shellcheck disable=SC2086  # the overrides are words
  run_expect 0 env STRATA_SIMULATE_DEVICE=1 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train \
    --config "$WORK/$model.yaml" $sets --set logging.metrics_file="$WORK/$name.jsonl"
  # shellcheck disable=SC2086
  run_expect 0 "$STRATA" plan --config "$WORK/$model.yaml" $sets --gpus "$np" --hardware h100-sxm --explain --json
  printf '%s\n' "$OUT" > "$WORK/$name.plan.json"
done
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" "${layouts[@]}" <<'PY'
import json, sys
from equivalence import records
work, bad, count = sys.argv[1], [], 0
terms = ["params", "grads", "optimizer", "workspace", "activations"]
for entry in sys.argv[2:]:
    name = entry.split("|")[0]
    plan = json.load(open(f"{work}/{name}.plan.json"))["memory_bytes"]
    mem = records(f"{work}/{name}.jsonl", "memory")[0]
    worst = max(mem["ranks"], key=lambda r: sum(r[t] for t in terms))
    peak = records(f"{work}/{name}.jsonl", "device_memory")[0]["peak_allocated_max"]
    line = []
    for t in terms + ["total"]:
        want = peak if t == "total" else worst[t]
        got = plan[t]
        off = abs(got - want) / want if want else (0 if got == 0 else 1)
        line.append(f"{t} {got}/{want}")
        if off > 0.05:
            bad.append(f"{name}: {t} predicted {got} B, measured {want} B ({100 * off:.1f}% off)")
    count += 1
    print(f"{name}: " + ", ".join(line))
print(f"{count} layouts")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
