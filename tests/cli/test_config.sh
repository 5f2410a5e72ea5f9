#!/usr/bin/env bash
# `strata config`: five mistakes reported at once with key paths and exit 2; did-you-mean;
# the shipped ds_config resolves at world size 8; --set overrides; the file given as --config too;
# the resolved config loads back as itself; a schedule shorter than the run is warned of; every
# shipped config validates without a warning.
source "$(dirname "$0")/../lib/common.sh"

cat > "$WORK/bad.yaml" <<'YAML'
train_batch_size: 30
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 2
zero_optimisation:
  stage: 1
optimizer:
  type: AdamW
  params:
    lr: fast
fp16: {enabled: true}
bf16: {enabled: true}
gradient_clipping: -1.0
model: {preset: gpt2-124m}
YAML
run_expect 2 "$STRATA" config "$WORK/bad.yaml"
expect_contains "$OUT" "zero_optimisation"
expect_contains "$OUT" "did you mean zero_optimization"
expect_contains "$OUT" "optimizer.params.lr"
expect_contains "$OUT" "gradient_clipping"
expect_contains "$OUT" "train_batch_size"
grep -q "fp16" <<<"$OUT" && grep -q "bf16" <<<"$OUT" || fail "fp16+bf16 conflict not reported"
problems=$(grep -c "^error:   " <<<"$OUT" || true)
[ "$problems" -ge 5 ] || { echo "$OUT"; fail "expected at least 5 problems listed, got $problems"; }

# A rank count of 0 is named as such (not as a range of floating-point numbers).
run_expect 2 "$STRATA" config "$SRC/configs/quickstart.yaml" --world-size 0
expect_contains "$OUT" "expected a whole number of 1 or more, got '0'"

# Only regular files of a config's size are read: a directory is not an empty config, and a
# device is not read without end.
run_expect 2 "$STRATA" config "$WORK"
expect_contains "$OUT" "config file '$WORK': is a directory, not a YAML or JSON file"
run_expect 2 "$STRATA" config /dev/zero
expect_contains "$OUT" "config file '/dev/zero': is not a regular file"
head -c $((17 << 20)) /dev/zero | tr '\0' ' ' > "$WORK/huge.yaml"
run_expect 2 "$STRATA" config "$WORK/huge.yaml"
expect_contains "$OUT" "bytes is too large for a config (at most 16 MiB)"

run_expect 0 "$STRATA" config "$SRC/configs/examples/ds_config.json" --world-size 8
echo "$OUT"
expect_contains "$OUT" "dp_size: 8"
expect_contains "$OUT" "grad_accum: 2"
expect_contains "$OUT" "padded_vocab: 50304"
expect_contains "$OUT" "n_params: 124475904"

run_expect 0 "$STRATA" config "$SRC/configs/quickstart.yaml" --set optimizer.params.betas=[0.9,0.95] --set train.iters=7
expect_contains "$OUT" "iters: 7"
run_expect 2 "$STRATA" config "$SRC/configs/quickstart.yaml" --set train.itres=7
expect_contains "$OUT" "did you mean iters"
# The file may be named as train and plan take it (--config), with the same result.
run_expect 0 "$STRATA" config --config "$SRC/configs/quickstart.yaml" --set train.iters=7
expect_contains "$OUT" "iters: 7"
run_expect 2 "$STRATA" config --config "$SRC/configs/quickstart.yaml" --deepspeed-keys
# A schedule that ends before the run is said (a comment: the output still loads), not refused.
run_expect 0 "$STRATA" config "$SRC/configs/quickstart.yaml" --set train.iters=600
expect_contains "$OUT" "# warning: scheduler.params.total_num_steps 500 is below train.iters 600: WarmupCosineLR"

# The resolved config loads back as the same config (the derived values are comments), and
# the stage-3 key it writes at strata's default draws no "changes nothing" note.
run_expect 0 "$STRATA" config "$SRC/configs/quickstart.yaml" --world-size 2
printf '%s\n' "$OUT" > "$WORK/resolved.yaml"
expect_contains "$OUT" "#   dp_size: 2"
run_expect 0 "$STRATA" config "$WORK/resolved.yaml" --world-size 2
[ "$OUT" = "$(cat "$WORK/resolved.yaml")" ] || { diff <(echo "$OUT") "$WORK/resolved.yaml"; fail "the resolved config did not load back as itself"; }
! grep -q "changes nothing" <<<"$OUT" || fail "a note on a key at its default: $OUT"

# A layout for more ranks than config's default of one says which option gives them.
run_expect 2 "$STRATA" config "$SRC/configs/examples/3d.yaml"
expect_contains "$OUT" "strata config resolves for 1 rank unless --world-size N gives the ranks the job will run on"

# Every shipped config validates at 8 ranks (the layouts of all of them divide it).
for f in "$SRC"/configs/*.yaml "$SRC"/configs/examples/*; do
  run_expect 0 "$STRATA" config "$f" --world-size 8
  ! grep -q "# warning:" <<<"$OUT" || fail "$f draws a warning: $(grep "# warning:" <<<"$OUT")"
done
# The sweep base validates on the 2 ranks its command line uses, with each micro-batch it sweeps.
for micro in 4 16; do
  run_expect 0 "$STRATA" config "$SRC/configs/sweeps/zero_micro.yaml" --world-size 2 \
    --set train_micro_batch_size_per_gpu=$micro
done
echo ok
