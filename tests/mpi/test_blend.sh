#!/usr/bin/env bash
# Dataset blending: data.train as a list of {path, weight}. Two corpora blended 3:1 with shuffling
# on, from one seed checkpoint: DP 2 and the 8-rank DP 2 x TP 2 x PP 2 grid reproduce one rank's
# 20 losses within 1e-6 (the blend's order is the same on every layout; at DP 2 step 1 is one rank's
# bit for bit, the same sequences summed in the same order; TP splits the products, so the grid's
# last bits differ from step 1 on);
# a run resumed from step 10 continues bit for bit; other weights read other sequences (another
# step-1 loss, and a resume warns); a one-source list reads what its plain glob reads. The banner
# and `strata config` describe each source; a source without shards is exit 2 naming it.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/a"
mkdir -p "$WORK/b"
for i in $(seq 1 300); do
  echo "verse $i: and the evening and the morning were the $((i % 7))th day; $((i * 11 % 17)) stars shone."
done >"$WORK/b/corpus.txt"
run_expect 0 "$STRATA" data encode --input "$WORK/b/corpus.txt" --out "$WORK/b" --val-fraction 0

blend() { echo "[{path: \"$WORK/a/train_*.bin\", weight: $1}, {path: \"$WORK/b/train_*.bin\", weight: $2}]"; }
# config FILE TRAIN [extra yaml lines...]: the small model on data.train TRAIN, shuffled, no val.
config() {
  local file="$1" train="$2"; shift 2
  write_small_config "$file" "$WORK/a" "$@"
  sed -i "s|^data: .*|data: {train: $train, shuffle: true}|" "$file"
}
config "$WORK/seed.yaml" "$(blend 3 1)" "train: {iters: 1, seed: 5}" \
  "checkpoint: {dir: \"$WORK/seed\", save_initial: true}"
run_expect 0 "$STRATA" train --config "$WORK/seed.yaml"
expect_contains "$OUT" "data: a blend of 2 sources"
expect_contains "$OUT" "data.train[0] '$WORK/a/train_*.bin':"
expect_contains "$OUT" "weight 3 (75.00% of the sequences)"
seed_ckpt="$WORK/seed/step_00000000"

# run NAME NP GAS TRAIN [--set ...]: 20 steps from the seed checkpoint.
run() {
  local name="$1" np="$2" gas="$3" train="$4"; shift 4
  config "$WORK/$name.yaml" "$train" "train: {iters: 20, seed: 5}" "checkpoint: {resume: \"$seed_ckpt\"}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set gradient_accumulation_steps="$gas" "$@"
}
run ref 1 4 "$(blend 3 1)"
run dp2 2 2 "$(blend 3 1)" --set zero_optimization.stage=1
run grid 8 2 "$(blend 3 1)" --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.pipeline_model_parallel_size=2 --set parallelism.sequence_parallel=true
run other_weights 1 4 "$(blend 1 3)"
expect_contains "$OUT" "the blend of data.train (tokens and weight per source) is now ["
expect_contains "$OUT" " tokens x weight 1] at the checkpoint)"
# The same shares written as other weights (0.75:0.25 for 3:1) read the same sequences: no warning.
run scaled 1 4 "$(blend 0.75 0.25)"
! grep -q "data order differs" <<<"$OUT" || fail "weights of the same shares were warned of: $OUT"

# Resume: 10 steps saved, then the run continues to 20 from its own checkpoint.
config "$WORK/part.yaml" "$(blend 3 1)" "train: {iters: 10, seed: 5}" \
  "checkpoint: {dir: \"$WORK/part\", save_interval: 10, resume: \"$seed_ckpt\"}" \
  "logging: {metrics_file: \"$WORK/resumed.jsonl\"}"
run_expect 0 "$STRATA" train --config "$WORK/part.yaml" --set gradient_accumulation_steps=4
run_expect 0 "$STRATA" train --config "$WORK/part.yaml" --set gradient_accumulation_steps=4 \
  --set train.iters=20 --set checkpoint.resume=auto

# A list of one source is its glob: the same sequences, whatever its weight.
config "$WORK/glob.yaml" "\"$WORK/a/train_*.bin\"" "train: {iters: 3, seed: 5}" \
  "logging: {metrics_file: \"$WORK/glob.jsonl\"}"
run_expect 0 "$STRATA" train --config "$WORK/glob.yaml"
config "$WORK/list1.yaml" "[{path: \"$WORK/a/train_*.bin\", weight: 5}]" "train: {iters: 3, seed: 5}" \
  "logging: {metrics_file: \"$WORK/list1.jsonl\"}"
run_expect 0 "$STRATA" train --config "$WORK/list1.yaml"
[ "$(train_losses "$WORK/glob.jsonl")" = "$(train_losses "$WORK/list1.jsonl")" ] ||
  fail "a one-source list trains otherwise than its glob"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
import equivalence
runs = equivalence.Runs(sys.argv[1], 20)
runs.check("dp2", "ref", 1e-6)
runs.check("grid", "ref", 1e-6)
if runs.figures("dp2", "loss")[0] != runs.figures("ref", "loss")[0]:
    runs.bad.append("dp2: step 1 loss differs from one rank's")
runs.check_resumed("resumed", "ref", 1, 0.0)
if runs.figures("scaled", "loss") != runs.figures("ref", "loss"):
    runs.bad.append("weights 0.75:0.25 trained otherwise than 3:1")
other, ref = runs.figures("other_weights", "loss"), runs.figures("ref", "loss")
print(f"other weights: step 1 loss {other[0]!r} vs {ref[0]!r}")
if other[0] == ref[0]:
    runs.bad.append("weights 1:3 read the same first batch as 3:1")
runs.finish()
PY

# strata config: each source's tokens, weight, share and epochs per run.
run_expect 0 "$STRATA" config "$WORK/ref.yaml"
expect_contains "$OUT" "# data.train blends 2 sources:"
expect_contains "$OUT" "data.train[1] '$WORK/b/train_*.bin':"
expect_contains "$OUT" "weight 1 (25.00% of the sequences)"
expect_contains "$OUT" "epochs in 20 steps"

# A source that matches no shard: exit 2 before the first step, naming it.
config "$WORK/missing.yaml" "[{path: \"$WORK/a/train_*.bin\", weight: 1}, {path: \"$WORK/none_*.bin\", weight: 1}]"
run_expect 2 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/missing.yaml"
expect_contains "$OUT" "data.train[1]: no files match '$WORK/none_*.bin'"
run_expect 0 "$STRATA" config "$WORK/missing.yaml"
expect_contains "$OUT" "(its shards cannot be read here: data.train[1]: no files match"
echo ok
