#!/usr/bin/env bash
# GPU timing in one short call, for a machine lent for a few minutes: builds only what it times
# (strata, gpu_ops, bench_kernels), runs the GPU op tests, the per-kernel table, GPT-2 124M,
# GPT-2 1558M at ZeRO 1 with and without offload_optimizer cpu, a 4.0B-parameter model that fits
# one GPU only with offload, and, with what time is left, PyTorch's GPT-2 124M and SDPA beside them.
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

note() { echo "$*" | tee -a "$summary"; }

# step NAME MAX_S CMD...: CMD's output into OUTDIR/NAME.log under min(MAX_S, what is left).
step() {
  local name="$1" max="$2" limit=$((budget - SECONDS))
  shift 2
  [ "$limit" -gt "$max" ] && limit="$max"
  if [ "$limit" -lt 15 ]; then
    note "$(printf '%-24s SKIP (out of budget)' "$name")"
    return 2
  fi
  local start=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  note "$(printf '%-24s rc %-3s %4ss' "$name" "$rc" $((SECONDS - start)))"
  return "$rc"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  nproc
  free -g | sed -n 2p
} >>"$summary"

step configure 120 cmake -S "$root" -B "$build" -G Ninja -DSTRATA_CUDA=ON -DSTRATA_EMULATOR=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo || { cat "$summary"; exit 1; }
step build 300 ninja -C "$build" -j "$(nproc)" strata gpu_ops bench_kernels || { tail -n 30 "$out/build.log"; exit 1; }
strata="$build/bin/strata"

[ -n "${STRATA_TIMING_TRAIN_ONLY:-}" ] || step bench_kernels_124m 60 "$build/tests/gpu/bench_kernels" --batch 32 --seq 1024 --channels 768 \
  --heads 12 --dtype bf16

# Random GPT-2 token ids in the token-shard format (magic 20240520, version 1, count).
data="$(mktemp -d "${TMPDIR:-/tmp}/strata-timing.XXXXXX")"
mkdir -p "$data"
python3 - "$data/bench_train_000000.bin" <<'PY'
import array, random, struct, sys
count = 4 * 1024 * 1024
random.seed(0)
tokens = array.array("H", (random.randrange(50257) for _ in range(count)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
    f.write(tokens.tobytes())
PY

# train NAME MAX_S CONFIG ITERS B GAS [--set ...]: one strata run, one record per step.
train() {
  local name="$1" max="$2" config="$3" iters="$4" b="$5" gas="$6"
  shift 6
  step "$name" "$max" "$strata" train --config "$root/configs/$config" --set device=cuda \
    --set bf16.enabled=true --set data.train="$data/bench_train_*.bin" --set data.val= \
    --set train.iters="$iters" --set train.eval_interval=0 --set checkpoint.dir= \
    --set checkpoint.save_interval=0 --set checkpoint.resume=none \
    --set train_micro_batch_size_per_gpu="$b" --set gradient_accumulation_steps="$gas" \
    --set steps_per_print=1 --set logging.metrics_file="$out/$name.jsonl" "$@"
  python3 - "$out/$name.jsonl" "$name" <<'PY' | tee -a "$summary"
import json, statistics, sys
try:
    records = [json.loads(line) for line in open(sys.argv[1])]
except OSError:
    records = []
train = [r for r in records if r["type"] == "train"]
timed = [r for r in train if r["step"] > 2] or train
if not timed:
    print(f"  {sys.argv[2]}: no train records"); sys.exit()
tps = statistics.median(r["tokens_per_s"] for r in timed)
mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
peak = max(r["peak_memory_bytes"] for r in train) / 2**30
mem = [r for r in records if r["type"] == "memory"]
host = [r for r in records if r["type"] == "host_memory"]
print(f"  {sys.argv[2]}: {tps:,.0f} tok/s, MFU {100 * statistics.median(mfu) if mfu else 0:.1f}%, "
      f"step {1e3 * statistics.median(r['step_time_s'] for r in timed):.0f} ms, peak {peak:.2f} GiB, "
      f"losses {[round(r['loss'], 6) for r in train]}")
for r in mem + host:
    print("  " + json.dumps(r)[:600])
PY
}

train strata_124m 60 gpt2-124m.yaml 20 32 1
train strata_1558m_z1 90 gpt2-1558m.yaml 8 8 8 --set zero_optimization.stage=1
train strata_1558m_z1_offload 120 gpt2-1558m.yaml 8 8 8 --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_optimizer.pin_memory=true
four_b=(--set model.n_layer=128 --set model.recompute=full --set zero_optimization.stage=3)
train strata_4b_z3 30 gpt2-1558m.yaml 4 1 1 "${four_b[@]}"
grep -iE 'memory|GiB' "$out/strata_4b_z3.log" | tail -n 4 | tee -a "$summary"
train strata_4b_z3_offload 150 gpt2-1558m.yaml 5 1 1 "${four_b[@]}" \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_optimizer.pin_memory=true

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
