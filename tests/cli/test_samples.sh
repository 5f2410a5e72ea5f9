#!/usr/bin/env bash
# Samples: text in a byte-level vocabulary; token ids (from the last id, GPT-2's end of text) in a
# larger one without data.tokenizer, where a text prompt is refused before training; text again with
# a tokenizer, which encodes the prompt (a tokenizer with more ids than the model is refused); a
# smaller vocabulary cannot sample.
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
expect_contains "$OUT" "logging.sample_prompt: a text prompt in a vocabulary of 300 needs data.tokenizer to encode it"

# With data.tokenizer (a tiktoken file: the 256 bytes, "th", "he", "the", then <|endoftext|>) the
# prompt is encoded and the sample decoded with it, in a vocabulary larger than 256.
python3 - "$WORK/tok.tiktoken" <<'PY'
import base64, sys
tokens = [bytes([b]) for b in range(256)] + [b"th", b"he", b"the"]
open(sys.argv[1], "w").write("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(tokens)))
PY
run_expect 0 "$STRATA" train --config "$WORK/s.yaml" --set model.vocab_size=300 --set data.tokenizer="$WORK/tok.tiktoken" \
  --set logging.metrics_file="$WORK/bpe.jsonl"
expect_contains "$OUT" "tokenizer: GPT-2 BPE from $WORK/tok.tiktoken (tiktoken ranks), 260 ids, end of text 259"
expect_contains "$OUT" "sample at step 2:"
python3 - "$WORK/bpe.jsonl" <<'PY'
import json, sys
sample = [json.loads(l) for l in open(sys.argv[1]) if '"sample"' in l]
assert len(sample) == 1 and sample[0]["prompt"] == "the" and isinstance(sample[0]["text"], str), sample
print("sample with data.tokenizer: prompt 'the', text", repr(sample[0]["text"][:40]))
PY
run_expect 2 "$STRATA" train --config "$WORK/s.yaml" --set data.tokenizer="$WORK/tok.tiktoken"
expect_contains "$OUT" "data.tokenizer: $WORK/tok.tiktoken (tiktoken ranks) has 260 token ids, more than model.vocab_size 256"
run_expect 2 "$STRATA" train --config "$WORK/s.yaml" --set model.vocab_size=200
expect_contains "$OUT" "logging.sample_interval: samples start from byte-level text, which needs model.vocab_size 256 or more (this model has 200)"
# The config's rules: `strata config` refuses what `strata train` would.
run_expect 2 "$STRATA" config "$WORK/s.yaml" --set model.vocab_size=200
expect_contains "$OUT" "logging.sample_interval: samples start from byte-level text"
run_expect 2 "$STRATA" config "$WORK/s.yaml" --set model.vocab_size=300
expect_contains "$OUT" "logging.sample_prompt: a text prompt in a vocabulary of 300 needs data.tokenizer"

# A stop during a sample saves the step with the sample pending: the resumed run makes it first,
# and every sample is then an uninterrupted run's (the RNG is saved as before the cut sample).
write_small_config "$WORK/p.yaml" "$WORK/data" "train: {iters: 2, seed: 3}" "checkpoint: {dir: \"$WORK/ckpt_p\"}" \
  "logging: {metrics_file: \"$WORK/p.jsonl\", sample_interval: 1, sample_tokens: 1000000000}"
run_expect 0 "$STRATA" train --config "$WORK/p.yaml" --set checkpoint.dir= --set logging.sample_tokens=16 \
  --set logging.metrics_file="$WORK/p_ref.jsonl"
"$STRATA" train --config "$WORK/p.yaml" > "$WORK/p1.log" 2>&1 &
pid=$!
wait_for_train_record "$WORK/p.jsonl"
sleep 0.5
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" -eq 0 ] || { cat "$WORK/p1.log"; fail "SIGINT while sampling: exit $rc, expected 0"; }
grep -q '"sample"' "$WORK/p.jsonl" && fail "the cut sample was recorded"
run_expect 0 "$STRATA" train --config "$WORK/p.yaml" --set logging.sample_tokens=16
expect_contains "$OUT" "the sample of step 1 that a stop cut short: making it now"
python3 - "$WORK/p_ref.jsonl" "$WORK/p.jsonl" <<'PY'
import json, sys
ref, got = ([(r["step"], r["text"]) for r in map(json.loads, open(f)) if r["type"] == "sample"] for f in sys.argv[1:])
assert [s for s, _ in ref] == [1, 2] and got == ref, (ref, got)
print("samples after a stop mid-sample: those of an uninterrupted run")
PY
echo ok
