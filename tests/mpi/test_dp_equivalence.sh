#!/usr/bin/env bash
# Data parallelism reproduces the single-rank loss curve. From one seed checkpoint, DP = 1, 2, 4
# with ZeRO 0, 1, 2, 3 train 20 steps (GAS 2, clipping on) and are compared with one rank running
# the same global batch (micro 4 × GAS 2·DP). What holds:
# - DP 1, ZeRO 0 and 1: bit-identical. Reductions over one rank are copies, the shard is the
#   whole buffer in flat order (the norm's sum of squares runs in the same order), and the model
#   accumulates the micro-batches into the full gradient buffer exactly as the single rank does.
# - every layout, step 1: bit-identical (same weights, same batches; the micro-batch losses are
#   gathered and summed in global batch order).
# - everything else: ≤ 1e-6 relative. DP > 1 sums the gradient in another order (each rank
#   accumulates its micro-batches, then the ranks are added); ZeRO 2 and 3 reduce every
#   micro-batch on its own and add it to the shard accumulator (g1 + g2), while one rank
#   accumulates inside the GEMM and layernorm kernels. fp32 rounding then differs in the last bits.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# config FILE [extra yaml lines...]: write_small_config's model and optimizer, shuffle off, no val.
config() {
  local file="$1"; shift
  write_small_config "$file" "$WORK/data" "$@"
  sed -i "s|^data: .*|data: {train: \"$WORK/data/train_*.bin\", shuffle: false}|" "$file"
}
config "$WORK/seed.yaml" "train: {iters: 1, seed: 5}" "checkpoint: {dir: \"$WORK/seed\", save_initial: true}"
run_expect 0 "$STRATA" train --config "$WORK/seed.yaml"
seed_ckpt="$WORK/seed/step_00000000"
[ -f "$seed_ckpt/manifest.json" ] || fail "no seed checkpoint"

# run NAME NP GAS STAGE [--set ...]: 20 steps from the seed checkpoint.
run() {
  local name="$1" np="$2" gas="$3" stage="$4"; shift 4
  config "$WORK/$name.yaml" "train: {iters: 20, seed: 5}" "checkpoint: {resume: \"$seed_ckpt\"}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set gradient_accumulation_steps="$gas" --set zero_optimization.stage="$stage" "$@"
}

for dp in 1 2 4; do
  run "ref_$dp" 1 $((2 * dp)) 0
done
for dp in 1 2 4; do
  for stage in 0 1 2 3; do
    overlap=$([ $((stage % 2)) -eq 0 ] && echo true || echo false)  # both paths are exercised
    run "dp${dp}_z$stage" "$dp" 2 "$stage" --set zero_optimization.overlap_comm=$overlap \
      --set zero_optimization.reduce_bucket_size=3000
  done
done

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
import equivalence
work = sys.argv[1]
def losses(name):
    out = equivalence.losses(f"{work}/{name}.jsonl")
    return [out[s] for s in sorted(out)]
bad = []
for dp in (1, 2, 4):
    ref = losses(f"ref_{dp}")
    assert len(ref) == 20, f"ref_{dp}: {len(ref)} steps"
    for stage in range(4):
        got = losses(f"dp{dp}_z{stage}")
        assert len(got) == 20, f"dp{dp}_z{stage}: {len(got)} steps"
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        exact = got == ref
        print(f"DP {dp} ZeRO {stage}: {'bit-identical' if exact else f'max relative difference {worst:.2e}'}")
        if got[0] != ref[0]: bad.append(f"DP {dp} ZeRO {stage}: step 1 loss {got[0]!r} != {ref[0]!r}")
        if dp == 1 and stage <= 1 and not exact: bad.append(f"DP 1 ZeRO {stage}: not bit-identical ({worst:.2e})")
        if worst > 1e-6: bad.append(f"DP {dp} ZeRO {stage}: relative difference {worst:.2e} > 1e-6")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
