#!/usr/bin/env bash
# A change against its base revision, timed in one GPU call: builds the base source tree and this
# one side by side, runs the GPU op tests of this one, then times both on the same GPU, each figure
# beside the other: the per-kernel table at the GPT-2 124M shape (and 1558M), a GPT-2 124M training
# run, and Nsight Compute's sections for this tree's attention kernels.
#
# Usage: scripts/gpu_ab.sh BASE_SOURCE_DIR OUTDIR
#   BASE_SOURCE_DIR: the base revision's files, e.g. `git archive BASE | tar -x -C DIR`.
# Environment: STRATA_AB_BUDGET_S (default 420); STRATA_AB_1558M=1: the kernel table at the 1558M
#   shape and a GPT-2 1558M training (B 8 x 8, ZeRO 1) on both sides too; STRATA_AB_PYTORCH=1:
#   PyTorch's GPT-2 124M (scripts/bench_pytorch_gpt2.py) beside them.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="$(cd "${1:?usage: scripts/gpu_ab.sh BASE_SOURCE_DIR OUTDIR}" && pwd)"
out="${2:?usage: scripts/gpu_ab.sh BASE_SOURCE_DIR OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
budget="${STRATA_AB_BUDGET_S:-420}"
logs="$out/logs"
summary="$out/summary.txt"
mkdir -p "$logs"
: >"$summary"
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
# shellcheck source-path=SCRIPTDIR source=lib/gpu_steps.sh
source "$root/scripts/lib/gpu_steps.sh"
data="$(mktemp -d "${TMPDIR:-/tmp}/strata-ab.XXXXXX")"
finish() {
  rm -rf "$data"
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
  echo "total ${SECONDS}s" >>"$summary"
}
trap finish EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$summary" 2>&1
# Both builds at once (each alone leaves most cores idle while it links).
configure_and_build "$base" "$base/build-gpu" base strata bench_kernels &
base_build=$!
configure_and_build "$root" "$root/build-gpu" new strata bench_kernels gpu_ops || exit 1
wait "$base_build" || exit 1
declare -A bin=([base]="$base/build-gpu" [new]="$root/build-gpu")

step gpu_ops_new 100 "${bin[new]}/tests/gpu/gpu_ops" --durations yes
grep -E '^(All tests passed|test cases:|assertions:)|FAILED' "$logs/gpu_ops_new.log" | head -n 20 | tee -a "$summary"

shapes=("124m --batch 32 --channels 768 --heads 12")
[ -n "${STRATA_AB_1558M:-}" ] && shapes+=("1558m --batch 8 --channels 1600 --heads 25")
for shape in "${shapes[@]}"; do
  read -r name args <<<"$shape"
  for side in base new; do
    # shellcheck disable=SC2086  # args is a list of options
    step "bench_${name}_$side" 40 "${bin[$side]}/tests/gpu/bench_kernels" --seq 1024 --dtype bf16 $args
  done
  for side in base new; do
    echo "== bench_kernels $name, $side" >>"$summary"
    grep -E '^(attention|softmax_cross_entropy|vocab_parallel|layernorm|TOTAL)' "$logs/bench_${name}_$side.log" >>"$summary" 2>/dev/null
  done
done

python3 "$root/scripts/lib/random_token_shard.py" "$data/bench_train_000000.bin" $((2 * 1024 * 1024))
for side in base new; do
  train_strata "${bin[$side]}/bin/strata" "train_124m_$side" 60 gpt2-124m.yaml 20 32 1
done
if [ -n "${STRATA_AB_PYTORCH:-}" ]; then
  step pytorch_124m 120 python3 "$root/scripts/bench_pytorch_gpt2.py" --n-layer 12 --n-head 12 --d-model 768 \
    --batch 32 --grad-accum 1 --seq 1024 --steps 15 --warmup 5
  tail -n 1 "$logs/pytorch_124m.log" | tee -a "$summary"
fi
if [ -n "${STRATA_AB_1558M:-}" ]; then
  for side in new base; do
    train_strata "${bin[$side]}/bin/strata" "train_1558m_$side" 70 gpt2-1558m.yaml 6 8 8 --set zero_optimization.stage=1
  done
fi

step ncu_attention 90 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section InstructionStats --section MemoryWorkloadAnalysis --section WarpStateStats \
  -k regex:attention_mma -c 6 "${bin[new]}/tests/gpu/bench_kernels" --batch 32 --seq 1024 --channels 768 \
  --heads 12 --dtype bf16 --iters 1
grep -E 'attention_mma|Duration|Executed Instructions  |Registers Per|Achieved Occupancy|DRAM Throughput|L2 Hit Rate|Issue Slots Busy' \
  "$logs/ncu_attention.log" | tee -a "$summary"
