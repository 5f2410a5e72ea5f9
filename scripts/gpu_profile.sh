#!/usr/bin/env bash
# Where the GPU step's time goes, in one short call: each kernel's time in one GPT-2 124M training
# step of strata (ncu, clocks left alone) beside PyTorch's (its profiler), and Nsight Compute's full
# sections (occupancy, stalls, pipes, memory) for the attention and cross-entropy kernels.
# Writes OUTDIR/summary.txt (the two per-step tables, longest first), OUTDIR/kernel_details.txt and
# OUTDIR/logs.tar.gz (every log and the raw ncu CSV).
#
# Usage: scripts/gpu_profile.sh OUTDIR
# Environment: STRATA_BUILD_DIR (default build-gpu), STRATA_PROFILE_BUDGET_S (default 420)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu_profile.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${STRATA_BUILD_DIR:-$root/build-gpu}"
budget="${STRATA_PROFILE_BUDGET_S:-420}"
logs="$out/logs"
mkdir -p "$logs"
summary="$out/summary.txt"
: >"$summary"
ncu=(ncu --clock-control none)
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none

# shellcheck source-path=SCRIPTDIR source=lib/gpu_steps.sh
source "$root/scripts/lib/gpu_steps.sh"
finish() {
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
  echo "total ${SECONDS}s" >>"$summary"
  cat "$summary"
}
trap finish EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader >>"$summary" 2>&1
configure_and_build "$root" "$build" strata strata bench_kernels || exit 1

data="$(mktemp -d "${TMPDIR:-/tmp}/strata-profile.XXXXXX")"
trap 'rm -rf "$data"; finish' EXIT
python3 "$root/scripts/lib/random_token_shard.py" "$data/bench_train_000000.bin" $((1024 * 1024))

# Every kernel of a 2-step run with its duration (under ncu a step takes about a minute); the
# last optimizer step's kernels are tabled.
step strata_ncu 200 "${ncu[@]}" --metrics gpu__time_duration.sum --csv --print-units base \
  --log-file "$logs/strata_ncu.csv" "$build/bin/strata" train --config "$root/configs/gpt2-124m.yaml" \
  --set device=cuda --set bf16.enabled=true --set data.train="$data/bench_train_*.bin" --set data.val= \
  --set train.iters=2 --set train.eval_interval=0 --set checkpoint.dir= --set checkpoint.save_interval=0 \
  --set checkpoint.resume=none --set train_micro_batch_size_per_gpu=32 --set gradient_accumulation_steps=1
python3 - "$logs/strata_ncu.csv" >>"$summary" 2>&1 <<'PY'
import collections, csv, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
# "void strata::<unnamed>::cast_kernel<float, …>(…)" → "strata::cast_kernel"
names = [r["Kernel Name"].replace("void ", "").replace("<unnamed>::", "").split("(")[0].split("<")[0] for r in rows]
ns = [float(r["Metric Value"].replace(",", "")) for r in rows]  # ncu writes 318,496
adam = [i for i, n in enumerate(names) if "adamw" in n]
# Optimizer steps: runs of adamw launches; the last step is what follows the one before last.
ends = [a for a, b in zip(adam, adam[1:] + [len(names)]) if b - a > 50] or [len(names) - 1]
first = ends[-2] + 1 if len(ends) > 1 else 0
last = ends[-1]
table = collections.defaultdict(lambda: [0.0, 0])
for n, t in zip(names[first:last + 1], ns[first:last + 1]):
    table[n][0] += t / 1e3
    table[n][1] += 1
total = sum(v[0] for v in table.values())
print(f"== strata: one step = launches {first}..{last} of {len(names)}, kernel time {total / 1e3:.2f} ms")
for n, (us, c) in sorted(table.items(), key=lambda kv: -kv[1][0]):
    print(f"{us:10.1f} us {c:5d}x  {100 * us / total:5.1f}%  {n[:110]}")
PY

step pytorch_profile 150 python3 "$root/scripts/bench_pytorch_gpt2.py" --n-layer 12 --n-head 12 --d-model 768 \
  --batch 32 --grad-accum 1 --seq 1024 --steps 5 --warmup 5 --profile "$logs/pytorch_kernels.tsv"
echo "== pytorch: $(tail -n 1 "$logs/pytorch_profile.log")" >>"$summary"
head -n 40 "$logs/pytorch_kernels.tsv" >>"$summary" 2>/dev/null

# Full sections for the attention and cross-entropy kernels at the 124M shape.
step kernel_sections 120 "${ncu[@]}" --set full -k regex:"attention_mma|cross_entropy|slice_" -c 8 \
  -o "$logs/kernels" "$build/tests/gpu/bench_kernels" --batch 32 --seq 1024 --channels 768 --heads 12 \
  --dtype bf16 --iters 2
ncu -i "$logs/kernels.ncu-rep" --page details >"$out/kernel_details.txt" 2>&1
ncu -i "$logs/kernels.ncu-rep" --page source --csv --print-source sass \
  -k regex:attention_mma_forward >"$logs/attention_forward_sass.csv" 2>&1
