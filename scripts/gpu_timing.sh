#!/usr/bin/env bash
# GPU timing in one short call, for a machine lent for a few minutes: builds only what it times
# (strata, gpu_ops, bench_kernels), runs the GPU op tests, the per-kernel table, GPT-2 124M,
# GPT-2 1558M at ZeRO 1 with and without offload_optimizer cpu, a 4.0B-parameter model at ZeRO 3
# without offload, with the optimizer offloaded and with the parameters too, a 7.0B model that
# fits one GPU only with offload, strata plan's predictions for the 124M and 1558M runs (the shipped
# profile and one calibrated there at each model's shape), and, with what time is left, PyTorch's GPT-2 124M and SDPA
# beside them.
# Every step runs under its own time limit from one budget; a summary comes last.
#
# Usage: scripts/gpu_timing.sh OUTDIR
# Environment: STRATA_BUILD_DIR (default build-gpu), STRATA_TIMING_BUDGET_S (default 540),
#   STRATA_PYTHON3 (python with torch, default python3)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu_timing.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${STRATA_BUILD_DIR:-$root/build-gpu}"
budget="${STRATA_TIMING_BUDGET_S:-540}"
python="${STRATA_PYTHON3:-python3}"
summary="$out/summary.txt"
: >"$summary"
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none

logs="$out"
# shellcheck source-path=SCRIPTDIR source=lib/gpu_steps.sh
source "$root/scripts/lib/gpu_steps.sh"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  nproc
  free -g | sed -n 2p
} >>"$summary"

configure_and_build "$root" "$build" strata strata gpu_ops bench_kernels || { tail -n 30 "$out"/build_strata.log; exit 1; }
strata="$build/bin/strata"

[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step bench_kernels_124m 60 "$build/tests/gpu/bench_kernels" --batch 32 --seq 1024 --channels 768 \
  --heads 12 --dtype bf16

# Random GPT-2 token ids in the token-shard format (magic 20240520, version 1, count).
data="$(mktemp -d "${TMPDIR:-/tmp}/strata-timing.XXXXXX")"
mkdir -p "$data"
trap 'rm -rf "$data"' EXIT
python3 "$root/scripts/lib/random_token_shard.py" "$data/bench_train_000000.bin" $((4 * 1024 * 1024))

train() { train_strata "$strata" "$@"; }

train strata_124m 60 gpt2-124m.yaml 20 32 1
train strata_1558m_z1 90 gpt2-1558m.yaml 8 8 8 --set zero_optimization.stage=1
train strata_1558m_z1_offload 120 gpt2-1558m.yaml 8 8 8 --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_optimizer.pin_memory=true
four_b=(--set model.n_layer=128 --set model.recompute=full --set zero_optimization.stage=3)
train strata_4b_z3 60 gpt2-1558m.yaml 5 1 1 "${four_b[@]}"
grep -iE 'memory|GiB' "$out/strata_4b_z3.log" | tail -n 4 | tee -a "$summary"
train strata_4b_z3_offload 150 gpt2-1558m.yaml 5 1 1 "${four_b[@]}" \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_optimizer.pin_memory=true
# The same with the parameter shard in host memory too: each layer group's piece goes up before
# its gather, on the communicator's stream, beside the compute.
train strata_4b_z3_offload_param 150 gpt2-1558m.yaml 5 1 1 "${four_b[@]}" \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_optimizer.pin_memory=true \
  --set zero_optimization.offload_param.device=cpu --set zero_optimization.offload_param.pin_memory=true
# 7.0B (224 layers): 118.5 GiB without offload, 27.6 GiB on the GPU and 90.9 GiB of host memory
# with both offloads.
train strata_7b_z3_offload_param 240 gpt2-1558m.yaml 4 1 1 --set model.n_layer=224 --set model.recompute=full \
  --set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu \
  --set zero_optimization.offload_optimizer.pin_memory=true --set zero_optimization.offload_param.device=cpu \
  --set zero_optimization.offload_param.pin_memory=true

# strata plan beside the runs above: its predictions for the 124M and 1558M runs from the shipped
# profile of this GPU and from a profile calibrated here at each model's own shape.
profile=h100-sxm
grep -q H200 "$summary" && profile=h200-sxm
for run in "124m gpt2-124m.yaml 32 1" "1558m gpt2-1558m.yaml 8 8 --set zero_optimization.stage=1"; do
  read -r -a words <<<"$run"
  sets=(--set bf16.enabled=true --set train_micro_batch_size_per_gpu="${words[2]}"
        --set gradient_accumulation_steps="${words[3]}" "${words[@]:4}")
  step "plan_calibrate_${words[0]}" 40 "$strata" plan --calibrate --config "$root/configs/${words[1]}" "${sets[@]}" \
    --out "$out/calibrated_${words[0]}.yaml"
  for hw in "$profile" "$out/calibrated_${words[0]}.yaml"; do
    [ -f "$hw" ] || [ "$hw" = "$profile" ] || continue
    if "$strata" plan --config "$root/configs/${words[1]}" --gpus 1 --hardware "$hw" --explain --json "${sets[@]}" \
      > "$data/plan.json" 2> "$data/plan.err"; then
      predicted=$(python3 -c 'import json, sys; print("{:,.0f} tok/s".format(json.load(open(sys.argv[1]))["tokens_per_s"]))' \
        "$data/plan.json")
    else
      predicted="failed: $(tail -n 1 "$data/plan.err")"
    fi
    echo "  plan ${words[1]} mb ${words[2]} on $(basename "$hw"): predicted $predicted" | tee -a "$summary"
  done
done

[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step gpu_ops 110 "$build/tests/gpu/gpu_ops" --durations yes
grep -E '^(All tests passed|test cases:|assertions:)' "$out/gpu_ops.log" | tee -a "$summary"
grep -E 'FAILED|failed' "$out/gpu_ops.log" | head -n 20 | tee -a "$summary"

[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step bench_kernels_1558m 40 "$build/tests/gpu/bench_kernels" --batch 8 --seq 1024 --channels 1600 \
  --heads 25 --dtype bf16
[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step sdpa_124m 30 "$python" "$root/scripts/bench_pytorch_sdpa.py" --batch 32 --heads 12 --seq 1024 --head-dim 64
[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step sdpa_1558m 30 "$python" "$root/scripts/bench_pytorch_sdpa.py" --batch 8 --heads 25 --seq 1024 --head-dim 64
[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step pytorch_124m 150 "$python" "$root/scripts/bench_pytorch_gpt2.py" --n-layer 12 --n-head 12 \
  --d-model 768 --batch 32 --grad-accum 1 --seq 1024 --steps 15 --warmup 5
tail -n 1 "$out/pytorch_124m.log" | tee -a "$summary"
for f in bench_kernels_124m bench_kernels_1558m sdpa_124m sdpa_1558m; do
  echo "== $f" >>"$summary"
  grep -E '^op | us |^TOTAL|^memory' "$out/$f.log" >>"$summary" 2>/dev/null
done
echo "total ${SECONDS}s" >>"$summary"
cat "$summary"
