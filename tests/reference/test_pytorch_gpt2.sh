#!/usr/bin/env bash
# strata's single-rank fp32 CPU training against an independent PyTorch GPT-2: step-0 loss
# (1e-5), every gradient (1e-4), and the loss curve of 10 AdamW steps with warmup, weight
# decay and clipping (1e-4), all from the exported seed checkpoint; then the same for a run that
# starts from the export of the trained model (model.init_from), against PyTorch from that folder.
source "$(dirname "$0")/../lib/common.sh"
PY="${STRATA_PYTHON3:-/usr/bin/python3}"
# Without PyTorch (Ubuntu 24.04 has no python3-torch) the test is skipped (exit 77), saying why.
if ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "skipped: $PY cannot import torch and numpy (scripts/install-deps.sh installs them where the distribution has them)"
  exit 77
fi

# A token stream with learnable structure over a vocabulary that is not a multiple of 128,
# so the padded vocabulary is exercised.
"$PY" - "$WORK/data" <<'PYEOF'
import os, sys
import numpy as np
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
n, vocab = 20000, 211
tokens = np.empty(n, dtype=np.uint16)
tokens[0] = 1
for i in range(1, n):
    tokens[i] = (tokens[i - 1] * 7 + 3) % vocab if rng.random() < 0.8 else rng.integers(vocab)
header = np.zeros(256, dtype=np.int32)
header[:3] = [20240520, 1, n]
with open(f"{out}/train_000000.bin", "wb") as f:
    f.write(header.tobytes()); f.write(tokens.tobytes())
PYEOF

cat > "$WORK/ref.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 2
optimizer: {type: AdamW, params: {lr: 0.01, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
scheduler: {type: WarmupCosineLR, params: {warmup_num_steps: 3, total_num_steps: 10, warmup_type: linear, cos_min_ratio: 0.1}}
gradient_clipping: 0.5
steps_per_print: 1
model: {n_layer: 2, n_head: 4, d_model: 64, vocab_size: 211, seq_len: 32}
data: {train: "$WORK/data/train_*.bin"}
train: {iters: 10, seed: 5}
checkpoint: {dir: "$WORK/ckpt", save_initial: true}
logging: {metrics_file: "$WORK/metrics.jsonl"}
YAML
cat > "$WORK/settings.json" <<JSON
{"seq_len": 32, "global_batch": 8, "micro_batch": 4, "lr": 0.01, "betas": [0.9, 0.95], "eps": 1e-8,
 "weight_decay": 0.1, "clip": 0.5, "warmup": 3, "total": 10, "warmup_min_ratio": 0.0, "cos_min_ratio": 0.1}
JSON

run_expect 0 "$STRATA" train --config "$WORK/ref.yaml" --dump-grads "$WORK/grads.safetensors"
echo "$OUT" | tail -n 12
run_expect 0 "$STRATA" export --checkpoint "$WORK/ckpt/step_00000000" --out "$WORK/hf"
"$PY" "$SRC/tests/reference/gpt2_reference.py" --export "$WORK/hf" --grads "$WORK/grads.safetensors" \
  --metrics "$WORK/metrics.jsonl" --data "$WORK/data/train_*.bin" --settings "$WORK/settings.json"

# Fine-tuning: a fresh run from the trained model's export (model.init_from) against PyTorch
# starting from the same folder.
run_expect 0 "$STRATA" export --checkpoint "$WORK/ckpt" --out "$WORK/hf_trained"
run_expect 0 "$STRATA" train --config "$WORK/ref.yaml" --set model.init_from="$WORK/hf_trained" \
  --set checkpoint.dir="$WORK/ckpt_tuned" --set logging.metrics_file="$WORK/tuned.jsonl" \
  --dump-grads "$WORK/tuned_grads.safetensors"
expect_contains "$OUT" "initialised weights from $WORK/hf_trained"
"$PY" "$SRC/tests/reference/gpt2_reference.py" --export "$WORK/hf_trained" --grads "$WORK/tuned_grads.safetensors" \
  --metrics "$WORK/tuned.jsonl" --data "$WORK/data/train_*.bin" --settings "$WORK/settings.json"
