#!/usr/bin/env bash
# scripts/plot.sh draws PNGs with gnuplot: the loss curves (train, and validation as points) of
# several metrics files on one chart, and from a sweep folder the loss of every point,
# tokens/s against the swept axis and peak memory per point. Bad input is exit 2.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/base.yaml" "$WORK/data" "train: {iters: 3, seed: 4, eval_interval: 3, eval_iters: 1}"
export STRATA
run_expect 0 "$SRC/scripts/sweep.sh" --config "$WORK/base.yaml" --out "$WORK/sweep" \
  --axis train_micro_batch_size_per_gpu=2,4 --axis zero_optimization.stage=0,1
plot="$SRC/scripts/plot.sh"
is_png() {  # FILE: a PNG of some size
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG"
  [ "$(stat -c %s "$1")" -gt 5000 ] || fail "$1 is too small to hold a chart"
}
run_expect 0 "$plot" --out "$WORK/runs" "$WORK"/sweep/*/metrics.jsonl
expect_contains "$OUT" "plot: wrote $WORK/runs/loss.png"
is_png "$WORK/runs/loss.png"
[ "$(grep -o 'with lines' "$WORK/runs/plot.gp" | wc -l)" -eq 4 ] || fail "expected 4 train curves"
[ "$(grep -o 'with points' "$WORK/runs/plot.gp" | wc -l)" -eq 4 ] || fail "expected 4 validation series"
run_expect 0 "$plot" --out "$WORK/charts" --sweep "$WORK/sweep"
for png in loss throughput memory; do
  expect_contains "$OUT" "plot: wrote $WORK/charts/$png.png"
  is_png "$WORK/charts/$png.png"
done
# tokens/s against the first axis (micro-batch), one line per ZeRO stage.
grep -q 'set xlabel "train\\_micro\\_batch\\_size\\_per\\_gpu"' "$WORK/charts/plot.gp" || fail "throughput not against the first axis"
grep -q 'title "stage=1"' "$WORK/charts/plot.gp" || fail "no line for ZeRO stage 1"
run_expect 2 "$plot" --out "$WORK/x" --sweep "$WORK/sweep" --axis nope
expect_contains "$OUT" "--axis nope: not an axis of the sweep"
run_expect 2 "$plot" --out "$WORK/x" "$WORK/missing.jsonl"
expect_contains "$OUT" "no such metrics file"
echo ok
