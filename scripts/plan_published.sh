#!/usr/bin/env bash
# strata plan against published runs: Table 1 of Narayanan et al. 2021 ("Efficient Large-Scale
# Language Model Training on GPU Clusters Using Megatron-LM"): GPT models from 1.7B to 1T
# parameters on 32 to 3072 A100s, sequence 2048, vocabulary 51200, fp16, full recompute, with the
# tensor- and pipeline-parallel sizes, micro-batch, batch and interleaving of the paper's launch
# scripts (Megatron-LM's examples/sc21/run_table_1.sh). For each row, with the A100 profile:
# the predicted TFLOP/s per GPU of the paper's layout (counted as the paper's Eq. 3 counts it)
# beside the paper's, whether the layout fits strata's memory, and its rank among the layouts the
# planner finds for that model and GPU count (ZeRO, recompute, SP and offload held at the paper's:
# none, full, off, none). Prints a Markdown table (the README's), then the comparisons of parallel
# configurations the paper timed (its Figures 13-15) with the planner's predictions for each.
#
# Usage: scripts/plan_published.sh [--hardware NAME|FILE]   (default a100-sxm-80gb)
# Environment: STRATA (the strata binary; default build/bin/strata)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
strata="${STRATA:-$root/build/bin/strata}"
[ -x "$strata" ] || { echo "plan_published: $strata not found; build first (scripts/build.sh)"; exit 2; }
hardware=a100-sxm-80gb
[ "${1:-}" = --hardware ] && hardware="${2:?--hardware NAME|FILE}"
source_profile="$hardware"
[ -f "$source_profile" ] || source_profile="$root/configs/hardware/$hardware.yaml"
[ -f "$source_profile" ] || { echo "plan_published: no profile $hardware (a file, or a name in configs/hardware)"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The paper's software, as its scripts ran Megatron-LM of the time: attention unfused (the scores
# stored, with the fused scale-mask-softmax and attention dropout 0.1: the profile's attention
# kernel), and per row PyTorch's DDP (DDP=torch: the all-reduce overlapped with backward) or
# Megatron's own (DDP=local: after backward). The reductions stay in strata's fp32 (the paper's
# were fp16: that would predict at most 3% faster, for 39B, and cost strata a buffer for which the
# 530B layout has no room).
sed 's/^attention_kernel:.*/attention_kernel: unfused/' "$source_profile" > "$work/hardware.yaml"
cat > "$work/base.yaml" <<'EOF'
fp16: {enabled: true}
model: {vocab_size: 51200, seq_len: 2048, recompute: full}
data: {train: data/none/train_*.bin}
EOF
# name heads hidden layers TP PP GPUs batch micro-batch virtual-stages DDP paper-TFLOP/s
rows="1.7B 24 2304 24 1 1 32 512 16 1 torch 137
3.6B 32 3072 30 2 1 64 512 16 1 torch 138
7.5B 32 4096 36 4 1 128 512 16 1 torch 142
18B 48 6144 40 8 1 256 1024 8 1 torch 135
39B 64 8192 48 8 2 512 1536 4 1 local 138
76B 80 10240 60 8 4 1024 1792 2 3 local 140
145B 96 12288 80 8 8 1536 2304 2 2 local 148
310B 128 16384 96 8 16 1920 2160 1 2 local 155
530B 128 20480 105 8 35 2520 2520 1 3 local 163
1T 160 25600 128 8 64 3072 3072 1 1 local 163"
echo "| model | GPUs | TP | PP | v | micro-batch | batch | paper TFLOP/s | predicted | predicted / paper | fits | rank |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
while read -r name heads hidden layers tp pp gpus batch micro v ddp paper; do
  schedule=1f1b
  [ "$v" -gt 1 ] && schedule=interleaved
  overlap=false
  [ "$ddp" = torch ] && overlap=true
  model=(--set "model.n_layer=$layers" --set "model.n_head=$heads" --set "model.d_model=$hidden"
         --set "train_batch_size=$batch" --set "zero_optimization.overlap_comm=$overlap")
  layout=(--set "train_micro_batch_size_per_gpu=$micro" --set "parallelism.tensor_model_parallel_size=$tp"
          --set "parallelism.pipeline_model_parallel_size=$pp" --set "parallelism.pipeline.schedule=$schedule"
          --set "parallelism.pipeline.virtual_stages=$v")
  "$strata" plan --config "$work/base.yaml" "${model[@]}" "${layout[@]}" --gpus "$gpus" --hardware "$work/hardware.yaml" \
    --explain --json > "$work/explain.json"
  "$strata" plan --config "$work/base.yaml" "${model[@]}" "${layout[@]}" --gpus "$gpus" --hardware "$work/hardware.yaml" \
    --keep zero,recompute,sp,offload --top 1000000 --json > "$work/plan.json" 2>/dev/null || echo '{"layouts": []}' > "$work/plan.json"
  python3 - "$work/explain.json" "$work/plan.json" "$name" "$gpus" "$tp" "$pp" "$v" "$micro" "$batch" "$paper" <<'PY'
import json, sys
explain, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
name, gpus, tp, pp, v, micro, batch, paper = sys.argv[3:]
key = lambda l: (l["tp"], l["pp"], l["virtual_stages"], l["micro_batch"], l["schedule"])
rank = next((i + 1 for i, l in enumerate(plan["layouts"]) if key(l) == key(explain)), None)
got = explain["tflops_per_gpu"]
print(f"| {name} | {gpus} | {tp} | {pp} | {v} | {micro} | {batch} | {paper} | {got:.0f} | {got / float(paper):.2f} | "
      f"{'yes' if explain['fits'] else 'no (%.0f GiB)' % (explain['memory_bytes']['total'] / 2**30)} | "
      f"{rank if rank else '-'} of {len(plan['layouts'])} |")
PY
done <<<"$rows"

# The comparisons of parallel configurations the paper timed (its Figures 13-15, from the same
# scripts: examples/sc21/run_figure_1[345].sh; 64 GPUs, micro-batch 1, full recompute, DDP=local),
# predicted for each configuration, beside what the paper found: a 162.2B model (32 layers, hidden
# 20480, 128 heads) fastest at TP 8 × PP 8 of the (PP, TP) pairs; a 5.9B model (32 layers, hidden
# 3840, 32 heads) slower as PP grows (over DP) and as TP grows (over DP).
explain_tflops() {  # layers hidden heads batch tp pp -> predicted TFLOP/s per GPU
  "$strata" plan --config "$work/base.yaml" --gpus 64 --hardware "$work/hardware.yaml" --explain --json \
    --set "model.n_layer=$1" --set "model.d_model=$2" --set "model.n_head=$3" --set "train_batch_size=$4" \
    --set parallelism.tensor_model_parallel_size="$5" --set parallelism.pipeline_model_parallel_size="$6" \
    --set train_micro_batch_size_per_gpu=1 --set zero_optimization.overlap_comm=false \
    | python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["tflops_per_gpu"])'
}
echo
echo "| figure | model | batch | configurations | predicted TFLOP/s per GPU | the paper found | predicted |"
echo "|---|---|---|---|---|---|---|"
for batch in 32 128; do
  got=()
  for pp in 2 4 8 16 32; do got+=("$(explain_tflops 32 20480 128 "$batch" $((64 / pp)) "$pp")"); done
  best=$(python3 -c 'import sys; v = [int(x) for x in sys.argv[1:]]; print(["(2, 32)", "(4, 16)", "(8, 8)", "(16, 4)", "(32, 2)"][v.index(max(v))])' "${got[@]}")
  echo "| 13 | 162.2B | $batch | (PP, TP) = (2, 32), (4, 16), (8, 8), (16, 4), (32, 2) | ${got[*]} | (8, 8) fastest | $best fastest |"
done
for axis in pp tp; do
  for batch in 32 128 512; do
    got=()
    for size in 2 4 8 16 32; do
      if [ "$axis" = pp ]; then got+=("$(explain_tflops 32 3840 32 "$batch" 1 "$size")"); else got+=("$(explain_tflops 32 3840 32 "$batch" "$size" 1)"); fi
    done
    falls=$(python3 -c 'import sys; v = [int(x) for x in sys.argv[1:]]; print("slower" if all(a > b for a, b in zip(v, v[1:])) else "not always slower")' "${got[@]}")
    figure=14; [ "$axis" = tp ] && figure=15
    echo "| $figure | 5.9B | $batch | ${axis^^} = 2, 4, 8, 16, 32 (DP = 64 / ${axis^^}) | ${got[*]} | slower as ${axis^^} grows | $falls as ${axis^^} grows |"
  done
done
