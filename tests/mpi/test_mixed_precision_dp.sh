#!/usr/bin/env bash
# Mixed precision under data parallelism. bf16 at DP 2 with ZeRO 0-3 (GAS 2) follows one rank
# running the same global batch (GAS 4): step 1 bit-identical, later steps within 1e-3 relative
# (the fp32 gradient is summed in another order, as in fp32, and a last-bit change of an fp32
# master weight can move its bf16 working copy by one bf16 step). fp16 with overflowing loss
# scales skips the same steps with the same scales at DP 2 (ZeRO 0, 1 and 3) as at DP 1, so the
# ranks agree on every overflow. bf16 runs at ZeRO 1 and 3 stopped at a checkpoint and resumed repeat the
# uninterrupted run bit for bit (the working copy is rebuilt from the fp32 master: cast and
# gathered). The 16-bit working copy halves the parameter all-gather traffic of ZeRO 1 and
# 3 against fp32 (gradients are reduced in fp32 either way), and the memory record follows the
# mixed-precision formulas: params 2Ψ (ZeRO 3: 2Ψ/p), fp32 grads 4Ψ (ZeRO 2-3: 4Ψ/p), fp32
# master + Adam m + v 12Ψ (ZeRO 1-3: 12Ψ/p), padding aside (≤ 1%).
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP GAS STAGE [--set ...]: 12 steps from seed 5, shuffle off, no validation.
run() {
  local name="$1" np="$2" gas="$3" stage="$4"; shift 4
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 12, seed: 5}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  sed -i "s|^data: .*|data: {train: \"$WORK/data/train_*.bin\", shuffle: false}|" "$WORK/$name.yaml"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set gradient_accumulation_steps="$gas" --set zero_optimization.stage="$stage" \
    --set zero_optimization.reduce_bucket_size=3000 "$@"
}
overflow=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1
  --set fp16.loss_scale_window=5)

run bf16_ref 1 4 0 --set bf16.enabled=true
for stage in 0 1 2 3; do
  run "bf16_z$stage" 2 2 "$stage" --set bf16.enabled=true
done
run fp16_ref 1 4 0 "${overflow[@]}"
# ZeRO 0 too: it divides by DP before the reduction as the other stages do (through the tokens'
# loss weights), so its fp16 backward overflows where one rank's does. At fixed scales around the
# first that overflows, step 1 is skipped at DP 2 exactly where it is at DP 1 (dividing after the
# all-reduce doubled the backward's values: DP 2 overflowed at half the scale).
run fp16_z0 2 2 0 "${overflow[@]}"
for k in 21 22 23 24 25 26; do
  run "fixed${k}_ref" 1 4 0 --set fp16.enabled=true --set fp16.loss_scale=$((1 << k)) --set train.iters=1 \
    --set train.max_nonfinite_steps=1
  run "fixed${k}_z0" 2 2 0 --set fp16.enabled=true --set fp16.loss_scale=$((1 << k)) --set train.iters=1 \
    --set train.max_nonfinite_steps=1
done
for stage in 1 3; do
  run "fp16_z$stage" 2 2 "$stage" "${overflow[@]}"
  run "fp32_z$stage" 2 2 "$stage"
  # Stop after step 6 with a checkpoint, then resume to step 12 (metrics appended).
  run "bf16_resumed_z$stage" 2 2 "$stage" --set bf16.enabled=true --set train.iters=6 \
    --set checkpoint.dir="$WORK/ckpt_z$stage"
  run "bf16_resumed_z$stage" 2 2 "$stage" --set bf16.enabled=true --set checkpoint.dir="$WORK/ckpt_z$stage"
  expect_contains "$OUT" "resumed from $WORK/ckpt_z$stage/step_00000006"
done

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
import equivalence
work, p = sys.argv[1], 2
def records(name, kind):
    return equivalence.records(f"{work}/{name}.jsonl", kind)
bad = []

ref = [r["loss"] for r in records("bf16_ref", "train")]
assert len(ref) == 12
for stage in range(4):
    got = [r["loss"] for r in records(f"bf16_z{stage}", "train")]
    worst = max(abs(a - b) / b for a, b in zip(got, ref))
    print(f"bf16 DP 2 ZeRO {stage}: max relative difference {worst:.2e}")
    if len(got) != 12: bad.append(f"bf16 ZeRO {stage}: {len(got)} steps")
    if got[0] != ref[0]: bad.append(f"bf16 ZeRO {stage}: step 1 loss {got[0]!r} != {ref[0]!r}")
    if worst > 1e-3: bad.append(f"bf16 ZeRO {stage}: relative difference {worst:.2e} > 1e-3")

def skips(name):
    return [(r["step"], r["loss_scale"], r["skipped"]) for r in records(name, "train")]
want = skips("fp16_ref")
if not any(s for _, _, s in want): bad.append("fp16 reference: no overflow, the test proves nothing")
got = skips("fp16_z0")
print(f"fp16 DP 2 ZeRO 0: skipped steps {[s for s, _, k in got if k]}")
if got != want: bad.append(f"fp16 ZeRO 0: skips/scales {got} differ from DP 1 {want}")
fixed = {k: [records(f"fixed{k}_{r}", "train")[0]["skipped"] for r in ("ref", "z0")] for k in range(21, 27)}
print(f"fp16 fixed scale 2^k, step 1 skipped at DP 1 / DP 2 ZeRO 0: {fixed}")
if not (fixed[26][0] and not fixed[21][0]): bad.append(f"fixed scales: no overflow threshold in 2^21..2^26 {fixed}")
if any(a != b for a, b in fixed.values()): bad.append(f"fixed scales: DP 2 ZeRO 0 overflows elsewhere than DP 1 {fixed}")
for stage in (1, 3):
    whole = [r["loss"] for r in records(f"bf16_z{stage}", "train")]
    resumed = [r["loss"] for r in records(f"bf16_resumed_z{stage}", "train")]
    if resumed != whole: bad.append(f"bf16 ZeRO {stage}: resumed run {resumed} differs from {whole}")
    else: print(f"bf16 DP 2 ZeRO {stage}: resumed run bit-identical")

    got = skips(f"fp16_z{stage}")
    print(f"fp16 DP 2 ZeRO {stage}: skipped steps {[s for s, _, k in got if k]}")
    if got != want: bad.append(f"fp16 ZeRO {stage}: skips/scales {got} differ from DP 1 {want}")
    loss = [r["loss"] for r in records(f"fp16_z{stage}", "train")]
    ref16 = [r["loss"] for r in records("fp16_ref", "train")]
    worst = max(abs(a - b) / b for a, b in zip(loss, ref16))
    if worst > 1e-3: bad.append(f"fp16 ZeRO {stage}: relative difference {worst:.2e} > 1e-3")

    # Parameter gathers move 16-bit values; gradient reductions stay fp32.
    comm16, comm32 = (records(f"{m}_z{stage}", "train")[1]["comm"] for m in ("bf16", "fp32"))
    print(f"ZeRO {stage} traffic bf16 {comm16} fp32 {comm32}")
    if 2 * comm16["dp.all_gather"] != comm32["dp.all_gather"]:
        bad.append(f"ZeRO {stage}: bf16 all-gather {comm16['dp.all_gather']} B is not half of fp32's "
                   f"{comm32['dp.all_gather']} B")
    if comm16["dp.reduce_scatter"] != comm32["dp.reduce_scatter"]:
        bad.append(f"ZeRO {stage}: gradient reduce-scatter traffic changed with bf16")

for stage in range(4):
    mem = records(f"bf16_z{stage}", "memory")[0]
    psi = mem["n_params"]
    want_mem = {"params": 2 * psi / (p if stage == 3 else 1), "grads": 4 * psi / (p if stage >= 2 else 1),
                "optimizer": 12 * psi / (p if stage >= 1 else 1)}
    for r in mem["ranks"]:
        for key, value in want_mem.items():
            if abs(r[key] / value - 1) > 0.01:
                bad.append(f"bf16 ZeRO {stage} rank {r['rank']}: {key} {r[key]} B, formula {value:.0f} B")
    r0 = mem["ranks"][0]
    print(f"bf16 ZeRO {stage} memory: params {r0['params']} grads {r0['grads']} optimizer {r0['optimizer']} "
          f"workspace {r0['workspace']} (Ψ = {psi})")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
