#!/usr/bin/env bash
# Samples: text in a byte-level vocabulary; token ids (from the last id, GPT-2's end of text) in a
# larger one, which has no text decoding, and where a text prompt is refused before training; a
# smaller one cannot sample.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/s.yaml" "$WORK/data" "train: {iters: 2, seed: 3}" \
  "logging: {metrics_file: \"$WORK/bytes.jsonl\", sample_interval: 2, sample_tokens: 12, sample_prompt: \"the\"}"
run_expect 0 "$STRATA" train --config "$WORK/s.yaml"
expect_contains "$OUT" "sample at step 2:"
run_expect 0 "$STRATA" train --config "$WORK/s.yaml" --set model.vocab_size=300 --set logging.sample_prompt= \
  --set logging.metrics_file="$WORK/ids.jsonl"
expect_contains "$OUT" "sample at step 2 (token ids, after id 299):"
python3 - "$WORK/bytes.jsonl" "$WORK/ids.jsonl" <<'PY'
import json, sys
text = [json.loads(l) for l in open(sys.argv[1]) if '"sample"' in l]
ids = [json.loads(l) for l in open(sys.argv[2]) if '"sample"' in l]
assert len(text) == 1 and text[0]["prompt"] == "the" and isinstance(text[0]["text"], str), text
assert len(ids) == 1 and "text" not in ids[0], ids
tokens = ids[0]["tokens"]
assert len(tokens) == 12 and all(isinstance(t, int) and 0 <= t < 300 for t in tokens), tokens
print("samples: text at vocabulary 256, 12 token ids below 300 at vocabulary 300")
PY
run_expect 2 "$STRATA" train --config "$WORK/s.yaml" --set model.vocab_size=300
expect_contains "$OUT" "logging.sample_prompt: a text prompt needs a byte-level vocabulary (model.vocab_size 256), not 300"
run_expect 2 "$STRATA" train --config "$WORK/s.yaml" --set model.vocab_size=200
expect_contains "$OUT" "logging.sample_interval: samples start from byte-level text, which needs model.vocab_size 256 or more (this model has 200)"
echo ok
