#!/usr/bin/env bash
# train.eval_iters counts global batches: the validation loss is the mean over the val split's
# first eval_iters × train_batch_size sequences, the same set at any micro-batch and layout. With
# one global batch of 8, micro-batch 2 × accumulation 4, micro-batch 8 on one rank and micro-batch 4
# on 2 DP ranks give the same validation loss before training (a step-0 evaluation is not run, so
# after one step at lr 1e-9: the weights are the initial ones, to far below the tolerance).
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/base.yaml" "$WORK/data" "train: {iters: 1, seed: 5, eval_interval: 1, eval_iters: 2}"

# run NAME NP MICRO ACCUM
run() {
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$2" "$STRATA" train --config "$WORK/base.yaml" \
    --set optimizer.params.lr=1e-9 --set train_micro_batch_size_per_gpu="$3" --set gradient_accumulation_steps="$4" \
    --set logging.metrics_file="$WORK/$1.jsonl"
}
run mb2 1 2 4
run mb8 1 8 1
run dp2 2 4 1
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records
work = sys.argv[1]
val = {name: [r["val_loss"] for r in records(f"{work}/{name}.jsonl", "eval")] for name in ("mb2", "mb8", "dp2")}
print("val loss:", val)
assert all(len(v) == 1 for v in val.values()), val
ref = val["mb8"][0]
for name, (v,) in val.items():
    # The same 16 sequences; only the order of the per-batch sums differs.
    assert abs(v - ref) <= 1e-6 * abs(ref), (name, v, ref)
PY

# An eval_iters past the val split takes all of it, also one whose product with the global batch
# would pass int64 (it gave a NaN loss, or an internal error).
run_all() {
  run_expect 0 "$STRATA" train --config "$WORK/base.yaml" --set optimizer.params.lr=1e-9 \
    --set train_micro_batch_size_per_gpu=8 --set gradient_accumulation_steps=1 --set train.eval_iters="$2" \
    --set logging.metrics_file="$WORK/$1.jsonl"
}
run_all all 100000
run_all huge 4611686018427387904
run_all huger 1152921504606846976
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import math, sys
from equivalence import records
work = sys.argv[1]
val = {name: [r["val_loss"] for r in records(f"{work}/{name}.jsonl", "eval")] for name in ("all", "huge", "huger")}
print("val loss over the whole split:", val)
assert all(len(v) == 1 and v[0] is not None and math.isfinite(v[0]) for v in val.values()), val
assert val["huge"] == val["all"] and val["huger"] == val["all"], val
PY
echo ok
