#!/usr/bin/env bash
# Pipeline benchmark: trains one model at PP 1 and at each pipeline size, schedule and
# micro-batch count asked for, with wall_clock_breakdown on, and prints per configuration the
# step time, tokens/s, each stage's measured bubble (the share of the pipeline's span it was not
# computing, averaged over the timed steps) and theory's (p − 1)/(v·m + p − 1). The measured
# bubble also holds the transfers and any imbalance between the stages' costs (the first holds
# the embeddings, the last the LM head and loss); a rank per core (or GPU) is needed for the
# figures to mean anything. STRATA_PIPE_COST_MS=F,B in the environment gives every chunk's forward
# and backward a fixed least duration, for stages of equal cost.
#
# Usage: scripts/bench_pipeline.sh OUTDIR
# Environment:
#   STRATA_BUILD_DIR  build folder with bin/strata (default build)
#   BENCH_PP          pipeline sizes (default "2")
#   BENCH_M           micro-batches per step (default "2 4 8 16")
#   BENCH_SCHEDULES   schedules (default "gpipe 1f1b interleaved"; interleaved runs 2 chunks per rank)
#   BENCH_MODEL       n_layer,n_head,d_model,seq_len,micro_batch (default 8,4,256,128,4)
#   BENCH_STEPS       steps per run (default 8; the first 2 are not timed)
#   BENCH_DEVICE      cpu or cuda (default cpu)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/bench_pipeline.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
strata="${STRATA_BUILD_DIR:-$root/build}/bin/strata"
[ -x "$strata" ] || { echo "bench_pipeline: $strata not found; build first (scripts/build.sh)"; exit 2; }
IFS=, read -r n_layer n_head d_model seq_len micro <<<"${BENCH_MODEL:-8,4,256,128,4}"
steps="${BENCH_STEPS:-8}"
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

# A byte-level corpus, encoded once.
if [ ! -f "$out/data/corpus.txt" ]; then
  mkdir -p "$out/data"
  for i in $(seq 1 20000); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times."; done \
    > "$out/data/corpus.txt"
  "$strata" data encode --input "$out/data/corpus.txt" --out "$out/data" --val-fraction 0.01 >/dev/null
fi

# run NAME NP M [--set ...]
run() {
  local name="$1" np="$2" m="$3"; shift 3
  cat > "$out/$name.yaml" <<YAML
train_micro_batch_size_per_gpu: $micro
gradient_accumulation_steps: $m
optimizer: {type: AdamW, params: {lr: 0.0003}}
wall_clock_breakdown: true
device: ${BENCH_DEVICE:-cpu}
model: {n_layer: $n_layer, n_head: $n_head, d_model: $d_model, vocab_size: 256, seq_len: $seq_len}
data: {train: "$out/data/train_*.bin"}
train: {iters: $steps, seed: 1}
logging: {metrics_file: "$out/$name.jsonl"}
YAML
  rm -f "$out/$name.jsonl"
  mpirun "${mpi_flags[@]}" -np "$np" "$strata" train --config "$out/$name.yaml" "$@" > "$out/$name.log" 2>&1 ||
    { echo "bench_pipeline: $name failed (see $out/$name.log)"; tail -n 5 "$out/$name.log"; return 1; }
  python3 - "$out/$name.jsonl" "$name" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l][2:]
step = sum(r["step_time_s"] for r in records) / len(records)
tok = sum(r["tokens_per_s"] for r in records) / len(records)
stages = records[0].get("stages", [])
bubbles = [sum(r["stages"][s]["bubble"] for r in records) / len(records) for s in range(len(stages))]
theory = records[0].get("bubble_theory")
measured = " ".join(f"{b:.3f}" for b in bubbles) if bubbles else "-"
print(f"| {sys.argv[2]} | {step * 1e3:.1f} | {tok:.0f} | {measured} | {theory:.3f} |" if theory is not None
      else f"| {sys.argv[2]} | {step * 1e3:.1f} | {tok:.0f} | - | - |")
PY
}

echo "model: n_layer $n_layer, n_head $n_head, d_model $d_model, seq_len $seq_len, micro-batch $micro; $(nproc) cores"
echo "| run | step ms | tok/s | measured bubble per stage | theory |"
echo "|---|---|---|---|---|"
for m in ${BENCH_M:-2 4 8 16}; do
  run "pp1_m$m" 1 "$m" || true
  for p in ${BENCH_PP:-2}; do
    for schedule in ${BENCH_SCHEDULES:-gpipe 1f1b interleaved}; do
      extra=(--set parallelism.pipeline_model_parallel_size="$p" --set parallelism.pipeline.schedule="$schedule")
      if [ "$schedule" = interleaved ]; then
        [ $((m % p)) -eq 0 ] || continue
        extra+=(--set parallelism.pipeline.virtual_stages=2)
      fi
      run "pp${p}_${schedule}_m$m" "$p" "$m" "${extra[@]}" || true
    done
  done
done
