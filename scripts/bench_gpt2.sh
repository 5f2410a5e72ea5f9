#!/usr/bin/env bash
# End-to-end GPU benchmark: trains GPT-2 124M and 1558M (T = 1024, bf16) with strata and with a
# PyTorch GPT-2 of the same shape (torch.compile, SDPA flash attention, fused AdamW, bf16
# autocast, clipping 1.0) on the same batch, then prints tokens/s, MFU (989 TFLOP/s), peak
# allocator memory and the strata/PyTorch ratio, followed, for each model's shape, by strata's
# per-kernel table (bench_kernels) and PyTorch SDPA's attention forward and backward at the same
# shape. Both train on random tokens; strata reads them from a token shard written here. Logs and
# JSON records go to OUTDIR.
#
# Usage: scripts/bench_gpt2.sh OUTDIR
# Environment:
#   STRATA_BUILD_DIR   build folder with bin/strata and tests/gpu/bench_kernels (default build-gpu)
#   BENCH_MODELS       models to run (default "124m 1558m")
#   BENCH_BATCH_124M, BENCH_BATCH_1558M   micro-batch per model (default 32 and 8)
#   BENCH_GAS_124M, BENCH_GAS_1558M       micro-batches per optimizer step (default 1 and 8: the
#                                         1558M step then holds 64K tokens, as real training
#                                         of that size does, rather than paying the optimizer
#                                         every 8K tokens)
#   BENCH_STEPS        steps of each run (default 30; the first 5, where torch.compile compiles, are not timed)
#   STRATA_PYTHON3     python with torch (default python3)
#   STRATA_HOST_LD_LIBRARY_PATH  when set, the library path python runs with (see gpu_check.sh)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/bench_gpt2.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${STRATA_BUILD_DIR:-$root/build-gpu}"
strata="$build/bin/strata"
python="${STRATA_PYTHON3:-python3}"
steps="${BENCH_STEPS:-30}"
warmup_steps=5
[ -x "$strata" ] || { echo "bench_gpt2: $strata not found; build first (scripts/gpu_check.sh or scripts/build.sh)"; exit 2; }

python_env=()
if [ -n "${STRATA_HOST_LD_LIBRARY_PATH+set}" ]; then
  if [ -n "$STRATA_HOST_LD_LIBRARY_PATH" ]; then
    python_env=(env "LD_LIBRARY_PATH=$STRATA_HOST_LD_LIBRARY_PATH")
  else
    python_env=(env -u LD_LIBRARY_PATH)
  fi
fi
have_torch=0
"${python_env[@]}" "$python" -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1 && have_torch=1

# Random GPT-2 token ids in llm.c's shard format (header: magic 20240520, version 1, count).
data="$out/data"
mkdir -p "$data"
python3 "$root/scripts/lib/random_token_shard.py" "$data/bench_train_000000.bin" $((8 * 1024 * 1024)) || exit 1

declare -A layers=([124m]=12 [350m]=24 [774m]=36 [1558m]=48)
declare -A heads=([124m]=12 [350m]=16 [774m]=20 [1558m]=25)
declare -A width=([124m]=768 [350m]=1024 [774m]=1280 [1558m]=1600)
declare -A batch=([124m]="${BENCH_BATCH_124M:-32}" [350m]=16 [774m]=8 [1558m]="${BENCH_BATCH_1558M:-8}")
declare -A accum=([124m]="${BENCH_GAS_124M:-1}" [350m]=1 [774m]=1 [1558m]="${BENCH_GAS_1558M:-8}")

rows=()
for model in ${BENCH_MODELS:-124m 1558m}; do
  b="${batch[$model]}" gas="${accum[$model]}"
  metrics="$out/strata_$model.jsonl"
  rm -f "$metrics"
  echo "== strata GPT-2 $model: batch $b x 1024, accumulation $gas, bf16, $steps steps"
  "$strata" train --config "$root/configs/gpt2-$model.yaml" --set device=cuda --set bf16.enabled=true \
    --set data.train="$data/bench_train_*.bin" --set data.val= --set train.iters="$steps" \
    --set train.eval_interval=0 --set checkpoint.dir= --set checkpoint.save_interval=0 \
    --set checkpoint.resume=none --set train_micro_batch_size_per_gpu="$b" --set gradient_accumulation_steps="$gas" \
    --set steps_per_print=5 --set logging.metrics_file="$metrics" >"$out/strata_$model.log" 2>&1
  rc=$?
  strata_json="$(python3 - "$metrics" "$warmup_steps" "$rc" <<'PY'
import json, statistics, sys
path, warmup, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    records = [json.loads(line) for line in open(path)]
except OSError:
    records = []
train = [r for r in records if r["type"] == "train" and r["step"] > warmup]
if rc != 0 or not train:
    print(json.dumps({"impl": "strata", "error": f"exit {rc}, {len(train)} timed steps"}))
    sys.exit()
tps = statistics.median(r["tokens_per_s"] for r in train)
mfu = [r["mfu"] for r in train if r["mfu"] is not None]
print(json.dumps({"impl": "strata", "tokens_per_s": round(tps, 1),
                  "mfu": round(statistics.median(mfu), 4) if mfu else None,
                  "step_ms": round(statistics.median(r["step_time_s"] for r in train) * 1e3, 3),
                  "peak_memory_gib": round(max(r["peak_memory_bytes"] for r in train) / 2**30, 3),
                  "final_loss": round(train[-1]["loss"], 4)}))
PY
)"
  echo "$strata_json" | tee -a "$out/results.jsonl"
  torch_json='{"impl": "pytorch", "error": "skipped: no torch with CUDA"}'
  if [ "$have_torch" -eq 1 ]; then
    echo "== pytorch GPT-2 $model: batch $b x 1024, accumulation $gas, bf16 autocast, torch.compile"
    torch_json="$("${python_env[@]}" "$python" "$root/scripts/bench_pytorch_gpt2.py" --n-layer "${layers[$model]}" \
      --n-head "${heads[$model]}" --d-model "${width[$model]}" --batch "$b" --grad-accum "$gas" --seq 1024 --steps "$((steps - warmup_steps))" --warmup "$warmup_steps" \
      2>"$out/pytorch_$model.log" | tail -n 1)"
    [ -n "$torch_json" ] || torch_json='{"impl": "pytorch", "error": "failed; see pytorch log"}'
  fi
  echo "$torch_json" | tee -a "$out/results.jsonl"
  rows+=("$(python3 - "$model" "${b}x$gas" "$strata_json" "$torch_json" <<'PY'
import json, sys
model, b, s, t = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
def cell(r):
    if "error" in r: return f"{r['error']:<40}"
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
    return f"{r['tokens_per_s']:>10,.0f} tok/s {mfu:>6} {r['peak_memory_gib']:>6.1f} GiB"
ratio = f"{s['tokens_per_s'] / t['tokens_per_s']:.2f}x" if "error" not in s and "error" not in t else "n/a"
print(f"GPT-2 {model:>5} B={b:<5} | strata {cell(s)} | pytorch {cell(t)} | ratio {ratio}")
PY
)")
done

# Per model of the run: bench_kernels at its shape (one micro-batch), and PyTorch's flash
# attention (SDPA) at the same attention shape in the same run, beside strata's rows.
kernel_models=()
for model in ${BENCH_MODELS:-124m 1558m}; do
  [ -x "$build/tests/gpu/bench_kernels" ] || break
  kernel_models+=("$model")
  "$build/tests/gpu/bench_kernels" --batch "${batch[$model]}" --seq 1024 --channels "${width[$model]}" \
    --heads "${heads[$model]}" --dtype bf16 >"$out/bench_kernels_$model.log" 2>&1 ||
    echo "bench_kernels failed; see $out/bench_kernels_$model.log"
  if [ "$have_torch" -eq 1 ]; then
    "${python_env[@]}" "$python" "$root/scripts/bench_pytorch_sdpa.py" --batch "${batch[$model]}" \
      --heads "${heads[$model]}" --seq 1024 --head-dim "$((${width[$model]} / ${heads[$model]}))" \
      >"$out/bench_pytorch_sdpa_$model.log" 2>&1 || echo "bench_pytorch_sdpa failed; see $out/bench_pytorch_sdpa_$model.log"
  fi
done

echo
echo "strata vs PyTorch, one GPU, T = 1024, bf16 ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
for row in "${rows[@]}"; do echo "$row"; done
for model in "${kernel_models[@]}"; do
  echo
  echo "strata per-kernel times at GPT-2 $model's shape, batch ${batch[$model]} (bench_kernels; floor = bytes at the measured copy bandwidth or FLOPs at 989 TFLOP/s):"
  grep -E '^op | us |^TOTAL|^memory' "$out/bench_kernels_$model.log"
  if [ -f "$out/bench_pytorch_sdpa_$model.log" ]; then
    echo "PyTorch SDPA (flash) at the same attention shape:"
    grep -E ' us ' "$out/bench_pytorch_sdpa_$model.log" || tail -n 3 "$out/bench_pytorch_sdpa_$model.log"
  fi
done
