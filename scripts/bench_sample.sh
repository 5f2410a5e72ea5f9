#!/usr/bin/env bash
# `strata sample`'s speed: a checkpoint of GPT-2 124M's shape (random weights, fp32, seq_len 256
# unless --set says otherwise) saved after one step on one rank, then `strata sample` timed for
# --tokens tokens (default 200) from the start token, the load included, and for the first quarter
# of them, whose shorter contexts cost less each.
# Usage: scripts/bench_sample.sh [--tokens N] [--set KEY=VALUE ...]   (the --set go to train)
# Environment: STRATA_BIN (the strata binary; default build/bin/strata)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
strata="${STRATA_BIN:-$root/build/bin/strata}"
[ -x "$strata" ] || { echo "bench_sample: no strata binary at $strata (build first, or set STRATA_BIN)" >&2; exit 2; }
tokens=200
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tokens) tokens="${2:?--tokens N}"; shift 2 ;;
    --set) sets+=(--set "${2:?--set KEY=VALUE}"); shift 2 ;;
    *) echo "bench_sample: unknown argument $1 (--tokens N, --set KEY=VALUE)" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d "${TMPDIR:-/tmp}/strata-bench-sample.XXXXXX")"
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog $((i % 13)) times."; done > "$work/corpus.txt"
"$strata" data encode --input "$work/corpus.txt" --out "$work/data" --val-fraction 0.1 > /dev/null
cat > "$work/model.yaml" <<YAML
train_micro_batch_size_per_gpu: 1
gradient_accumulation_steps: 1
optimizer: {type: AdamW, params: {lr: 6.0e-4}}
model: {preset: gpt2-124m, seq_len: 256}
device: cpu
data: {train: "$work/data/train_*.bin", val: "$work/data/val_*.bin"}
train: {iters: 1}
checkpoint: {dir: "$work/ckpt", save_interval: 1}
YAML
"$strata" train --config "$work/model.yaml" "${sets[@]}" > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; echo "bench_sample: the training step failed" >&2; exit 1; }
timed() {  # timed N: seconds for N tokens, the load included
  local start end
  start=$(date +%s.%N)
  "$strata" sample --checkpoint "$work/ckpt" --tokens "$1" > "$work/sample.txt" 2> "$work/sample.err" ||
    { cat "$work/sample.err"; echo "bench_sample: sample failed" >&2; exit 1; }
  end=$(date +%s.%N)
  python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$start" "$end"
}
quarter=$((tokens / 4 > 0 ? tokens / 4 : 1))
echo "bench_sample: $(grep -m1 '^model: [0-9]' "$work/train.log")"
first=$(timed "$quarter")
all=$(timed "$tokens")
echo "bench_sample: $quarter tokens in $first s, $tokens tokens in $all s (load included; $(nproc) cores)"
