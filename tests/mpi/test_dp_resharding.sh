#!/usr/bin/env bash
# Checkpoints across layouts: a DP = 4 ZeRO-3 run saves at step 10 (each rank its shard of
# parameters and Adam state as flat ranges); resuming it at DP = 4 ZeRO-3 repeats the curve bit
# for bit, and at DP = 2 ZeRO-1 and on one rank (ZeRO 0) it continues the uninterrupted curve
# within 1e-6 relative (the gradient is summed in another order). Then a SIGTERM sent to one
# rank only stops every rank after the same step, with a checkpoint and exit code 0.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP GAS STAGE [yaml lines...]
run() {
  local name="$1" np="$2" gas="$3" stage="$4"; shift 4
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 20, seed: 9}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}" "$@"
  sed -i 's|^data: .*|data: {train: "'"$WORK"'/data/train_*.bin", shuffle: false}|' "$WORK/$name.yaml"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set gradient_accumulation_steps="$gas" --set zero_optimization.stage="$stage"
}

run full 4 2 3 "checkpoint: {dir: \"$WORK/ckpt\", save_interval: 10}"
ckpt="$WORK/ckpt/step_00000010"
[ -f "$ckpt/manifest.json" ] || fail "no step-10 checkpoint"
[ "$(ls "$ckpt"/rank_*.safetensors | wc -l)" -eq 4 ] || fail "expected one file per rank"
run same 4 2 3 "checkpoint: {resume: \"$ckpt\"}"
run dp2 2 4 1 "checkpoint: {resume: \"$ckpt\"}"
expect_contains "$OUT" "resumed from $ckpt at step 10"
run dp1 1 8 0 "checkpoint: {resume: \"$ckpt\"}"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
import equivalence
work = sys.argv[1]
def losses(name):
    return equivalence.losses(f"{work}/{name}.jsonl")
full = losses("full")
bad = []
for name in ("same", "dp2", "dp1"):
    got = losses(name)
    if sorted(got) != list(range(11, 21)): bad.append(f"{name}: steps {sorted(got)}")
    worst = max(abs(got[s] - full[s]) / abs(full[s]) for s in got)
    print(f"{name}: max relative difference to the uninterrupted run {worst:.2e}")
    if name == "same" and any(got[s] != full[s] for s in got): bad.append("same layout: not bit-identical")
    if worst > 1e-6: bad.append(f"{name}: {worst:.2e} > 1e-6")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY

# SIGTERM to one rank: both agree to stop after the same step and save.
write_small_config "$WORK/sig.yaml" "$WORK/data" "train: {iters: 100000, seed: 9}" \
  "checkpoint: {dir: \"$WORK/ckpt_sig\"}" "logging: {metrics_file: \"$WORK/sig.jsonl\"}"
stop_one_rank "$WORK/sig.log" "$WORK/sig.jsonl" \
  "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/sig.yaml" --set zero_optimization.stage=2
[ "$RC" -eq 0 ] || fail "SIGTERM to one rank: exit code $RC, expected 0"
grep -qE "signal 15 received|a stop signal reached another rank" "$WORK/sig.log" || fail "stop not reported"
[ -f "$WORK/ckpt_sig/latest" ] || fail "no checkpoint after the stop"
echo ok
