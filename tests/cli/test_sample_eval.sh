#!/usr/bin/env bash
# strata sample and strata eval: a checkpoint's model used without training. eval gives the val loss
# the run logged at that step, on any layout and from the exported HuggingFace folder; sample draws
# what the run's own sampler drew (same seed, same step), the same tokens on every layout and from the
# exported folder; temperature 0 and top-k 1 take the most likely token; user errors exit 2.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
# One sample at step 12, from the training sampler's first draws (seed 3).
write_small_config "$WORK/c.yaml" "$WORK/data" "train: {iters: 12, seed: 3, eval_interval: 6}" \
  "checkpoint: {dir: \"$WORK/ck\", save_interval: 6}" \
  "logging: {metrics_file: \"$WORK/m.jsonl\", sample_interval: 12, sample_tokens: 24, sample_prompt: \"line 1\"}"
run_expect 0 "$STRATA" train --config "$WORK/c.yaml"
val_loss() { python3 -c 'import json, sys
print("%.6f" % [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l and "\"step\":%s," % sys.argv[2] in l][0]["val_loss"])' "$WORK/m.jsonl" "$1"; }
mpi() { "$MPIRUN" "${MPI_FLAGS[@]}" -np "$@"; }

# eval: the loss the run logged, for the latest and an earlier step, on one rank and on DP, TP, PP
# and ZeRO-3 layouts of two ranks.
run_expect 0 "$STRATA" eval --checkpoint "$WORK/ck"
expect_contains "$OUT" "step 12 of $WORK/ck/step_00000012 on 1 rank(s) = DP 1 x TP 1 x PP 1 on cpu"
expect_contains "$OUT" "val loss $(val_loss 12) |"
run_expect 0 "$STRATA" eval --checkpoint "$WORK/ck/step_00000006"
expect_contains "$OUT" "val loss $(val_loss 6) |"
for layout in "" parallelism.tensor_model_parallel_size=2 parallelism.pipeline_model_parallel_size=2 zero_optimization.stage=3; do
  run_expect 0 mpi 2 "$STRATA" eval --checkpoint "$WORK/ck" ${layout:+--set "$layout"}
  expect_contains "$OUT" "val loss $(val_loss 12) |"
done
# --iters counts global batches (8 sequences here): 1 of them.
run_expect 0 "$STRATA" eval --checkpoint "$WORK/ck" --iters 1
expect_contains "$OUT" "| 8 sequences of 32 tokens |"
first_batch="$(grep -o 'val loss [0-9.]* |' <<<"$OUT")"

# sample: the run's own sample (seed 3, step 12; its bytes are the record's ids), then the same draws
# on every layout.
python3 -c 'import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if "\"sample\"" in l][0]
sys.stdout.buffer.write(s["prompt"].encode() + bytes(s["tokens"]) + b"\n")' "$WORK/m.jsonl" > "$WORK/trained.txt"
run_expect 0 "$STRATA" sample --checkpoint "$WORK/ck" --prompt "line 1" --tokens 24 --seed 3
expect_contains "$OUT" "sampling 1 x 24 tokens from step 12 of $WORK/ck/step_00000012"
"$STRATA" sample --checkpoint "$WORK/ck" --prompt "line 1" --tokens 24 --seed 3 2>/dev/null > "$WORK/one.txt"
cmp "$WORK/trained.txt" "$WORK/one.txt" || fail "strata sample differs from the run's own sample: $(cat "$WORK/one.txt")"
for layout in parallelism.tensor_model_parallel_size=2 parallelism.pipeline_model_parallel_size=2; do
  mpi 2 "$STRATA" sample --checkpoint "$WORK/ck" --prompt "line 1" --tokens 24 --seed 3 --set "$layout" \
    2>/dev/null > "$WORK/two.txt"
  cmp "$WORK/one.txt" "$WORK/two.txt" || fail "the sample on $layout differs"
done

# A checkpoint an interleaved pipeline saved (2 stages, 2 chunks each) evaluates on one rank to the
# loss that run logged; a --set of what matters here (the precision) is taken.
write_small_config "$WORK/pp.yaml" "$WORK/data" "train: {iters: 4, seed: 3, eval_interval: 4}" \
  "checkpoint: {dir: \"$WORK/ck_pp\", save_interval: 4}" "logging: {metrics_file: \"$WORK/pp.jsonl\"}" \
  "parallelism: {pipeline_model_parallel_size: 2, pipeline: {schedule: interleaved, virtual_stages: 2}}"
run_expect 0 mpi 2 "$STRATA" train --config "$WORK/pp.yaml" --set model.n_layer=4
pp_loss="$(python3 -c 'import json, sys
print("%.6f" % [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l][-1]["val_loss"])' "$WORK/pp.jsonl")"
run_expect 0 "$STRATA" eval --checkpoint "$WORK/ck_pp"
expect_contains "$OUT" "val loss $pp_loss |"
run_expect 0 "$STRATA" eval --checkpoint "$WORK/ck_pp" --set bf16.enabled=true
expect_contains "$OUT" "val loss "

# Any rank count: 3 ranks do not divide the run's global batch of 8, which eval still reads.
run_expect 0 mpi 3 "$STRATA" eval --checkpoint "$WORK/ck"
expect_contains "$OUT" "val loss $(val_loss 12) |"

# The exported HuggingFace folder: the same loss over the same sequences (given the split; its
# global batch is 8 sequences, on any number of ranks) and the same sample.
run_expect 0 "$STRATA" export --checkpoint "$WORK/ck" --out "$WORK/hf"
run_expect 0 mpi 2 "$STRATA" eval --checkpoint "$WORK/hf" --data "$WORK/data/val_*.bin" --iters 1
expect_contains "$OUT" "the HuggingFace folder $WORK/hf on 2 rank(s)"
expect_contains "$OUT" "$first_batch"
expect_contains "$OUT" "| 8 sequences of 32 tokens |"
"$STRATA" sample --checkpoint "$WORK/hf" --prompt "line 1" --tokens 24 --seed 3 2>/dev/null > "$WORK/hf.txt"
cmp "$WORK/one.txt" "$WORK/hf.txt" || fail "the sample from the exported folder differs"

# Draw rules: another seed draws another sample; at temperature 0 (and at top-k 1) the seed is moot;
# three samples are three, apart by ---.
sample() { "$STRATA" sample --checkpoint "$WORK/ck" --prompt "line 1" --tokens 24 "$@" 2>/dev/null; }
[ "$(sample --seed 3)" != "$(sample --seed 4)" ] || fail "seeds 3 and 4 drew the same sample"
greedy="$(sample --temperature 0 --seed 3)"
[ "$greedy" = "$(sample --temperature 0 --seed 4)" ] || fail "temperature 0 depends on the seed"
[ "$greedy" = "$(sample --top-k 1 --seed 4)" ] || fail "top-k 1 is not the most likely token"
[ "$greedy" != "$(sample --seed 3)" ] || fail "temperature 1 drew the most likely tokens"
[ "$(sample --count 3 | grep -c '^---$')" -eq 2 ] || fail "--count 3 did not print three samples"
# Every byte drawn is written, zero bytes too (at temperature 1000 the draws are nearly uniform:
# this one holds a zero), and 3 ranks sample as one does.
"$STRATA" sample --checkpoint "$WORK/ck" --prompt "line 1" --tokens 400 --temperature 1000 --seed 1 2>/dev/null \
  > "$WORK/uniform.bin"
bytes="$(wc -c < "$WORK/uniform.bin")"
[ "$bytes" -ge 406 ] || fail "400 sampled bytes after a 6-byte prompt came out as $bytes"
[ "$(od -An -tu1 -v "$WORK/uniform.bin" | tr -s ' ' '\n' | grep -cx 0)" -ge 1 ] || fail "the sample holds no zero byte"
[ "$(mpi 3 "$STRATA" sample --checkpoint "$WORK/ck" --prompt "line 1" --tokens 24 --seed 3 2>/dev/null)" = "$(cat "$WORK/one.txt")" ] ||
  fail "3 ranks sampled another text"
# A reader that has gone ends the samples (quietly); a write that fails is an error.
start=$SECONDS
sample --count 100000 | head -1 >/dev/null
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "sampling into a reader that went exited ${PIPESTATUS[0]}"
[ $((SECONDS - start)) -lt 20 ] || fail "sampling went on for $((SECONDS - start)) s after its reader had gone"
if [ -w /dev/full ]; then
  run_expect 2 sh -c "\"\$0\" sample --checkpoint \"\$1\" --tokens 4 >/dev/full" "$STRATA" "$WORK/ck"
  expect_contains "$OUT" "writing the samples to standard output: No space left on device"
fi

# User errors.
run_expect 2 "$STRATA" eval --checkpoint "$WORK/none"
expect_contains "$OUT" "--checkpoint: $WORK/none: no such file or directory"
mkdir "$WORK/empty"
run_expect 2 "$STRATA" sample --checkpoint "$WORK/empty"
expect_contains "$OUT" "no checkpoint found"
run_expect 2 "$STRATA" eval --checkpoint "$WORK/hf"
expect_contains "$OUT" "its config names no validation split (data.val): give one with --data"
run_expect 2 "$STRATA" eval --checkpoint "$WORK/ck" --set model.n_layer=3
expect_contains "$OUT" "--set model.n_layer=3: the model's shape is the checkpoint's; it cannot be changed here"
run_expect 2 "$STRATA" sample --checkpoint "$WORK/ck" --tokenizer "$WORK/none.json"
expect_contains "$OUT" "--tokenizer: $WORK/none.json: does not exist"
run_expect 2 "$STRATA" sample --checkpoint "$WORK/ck" --tokens 0
expect_contains "$OUT" "--tokens: Value 0 not in range"
run_expect 2 "$STRATA" sample --checkpoint "$WORK/ck" --temperature nan
expect_contains "$OUT" "--temperature: expected a finite number, 0 or more"
run_expect 2 "$STRATA" sample --checkpoint "$WORK/ck" --seed 99999999999999999999
expect_contains "$OUT" "--seed: expected a whole number from 0 to 9223372036854775807"
run_expect 2 "$STRATA" eval --checkpoint "$WORK/ck" --set logging.metrics_file="$WORK/x.jsonl"
expect_contains "$OUT" "--set logging.metrics_file=$WORK/x.jsonl: changes nothing here; the keys that do:"
run_expect 2 "$STRATA" sample --checkpoint "$WORK/ck" --set train.eval_iters=3
expect_contains "$OUT" "--set train.eval_iters=3: changes nothing here"
run_expect 2 "$STRATA" eval --checkpoint "$WORK/ck" --set parallelism.pipeline.schedule=interleaved
expect_contains "$OUT" "forwards alone follow no schedule"
echo "sample and eval: the run's val losses and sample, on 1 and 2 ranks and from the HuggingFace export"
