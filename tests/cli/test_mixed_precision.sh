#!/usr/bin/env bash
# Mixed precision on one rank. bf16 and fp16 runs of 20 steps follow the fp32 loss curve within
# 2%; the memory record counts the 16-bit working parameters at 2 bytes each (the fp32 master
# with Adam's m and v: 12 bytes); an fp16 run started at a loss scale too large for fp16 skips
# its overflowing steps (log line, JSONL records), halves the scale each time, doubles it again
# after loss_scale_window clean steps, and leaves the LR schedule where it was on every
# skipped step; bf16 and fp16 runs resumed from a checkpoint repeat the uninterrupted run bit
# for bit, the fp16 one including the loss scaler's state.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME [--set ...]: 20 steps from seed 5, metrics in $WORK/NAME.jsonl.
run() {
  local name="$1"; shift
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 20, seed: 5}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$STRATA" train --config "$WORK/$name.yaml" "$@"
}

run fp32
expect_contains "$OUT" "precision: fp32"
run bf16 --set bf16.enabled=true
expect_contains "$OUT" "precision: bf16"
run fp16 --set fp16.enabled=true
expect_contains "$OUT" "precision: fp16"

# Overflow: 2^26 makes the fp16 logit gradients (2^26 / 256 tokens per step) overflow.
# Hysteresis 1 halves on every overflow, window 5 doubles back soon; a linear warmup makes
# every LR step visible.
overflow_settings=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1
  --set fp16.loss_scale_window=5 --set scheduler.type=WarmupLR --set scheduler.params.warmup_type=linear
  --set scheduler.params.warmup_num_steps=10 --set scheduler.params.warmup_max_lr=0.003)
run overflow "${overflow_settings[@]}" --set train.iters=12
expect_contains "$OUT" "fp16 overflow at step 1: loss scale 67108864 → 33554432, step skipped"
# With the default hysteresis 2 the first overflow only spends the budget, and says so.
run hysteresis --set fp16.enabled=true --set fp16.initial_scale_power=26 --set train.iters=2
expect_contains "$OUT" "fp16 overflow at step 1: loss scale 67108864 kept (hysteresis 2 → 1), step skipped"
expect_contains "$OUT" "fp16 overflow at step 2: loss scale 67108864 → 33554432, step skipped"

# A static scale that always overflows cannot be lowered: each skipped step counts towards
# train.max_nonfinite_steps (default 3), so the run stops at step 4 with exit 1 instead of
# skipping every step and reporting "done".
run_expect 1 "$STRATA" train --config "$WORK/fp32.yaml" --set fp16.enabled=true --set fp16.loss_scale=1e30 \
  --set train.iters=40 --set logging.metrics_file="$WORK/static.jsonl"
expect_contains "$OUT" "4 steps in a row had a non-finite gradient (more than train.max_nonfinite_steps 3)"
expect_contains "$OUT" "fp16.loss_scale 1e+30 is fixed: 0 lets the scale fall when gradients overflow"
! grep -q "lowest loss scale" <<<"$OUT" || fail "a fixed scale was called the lowest"
# No update was ever applied: the learning rate and clipping are not the cause, and are not advised;
# a NaN norm prints as nan.
! grep -q "lower the learning rate\|enable gradient_clipping" <<<"$OUT" || fail "advised the learning rate before any update"
expect_contains "$OUT" "gradient norm nan"
! grep -q -- "-nan" <<<"$OUT" || fail "a NaN printed as -nan"
run_expect 1 "$STRATA" train --config "$WORK/fp32.yaml" --set fp16.enabled=true --set fp16.loss_scale=1e30 \
  --set train.iters=40 --set train.max_nonfinite_steps=0 --set logging.metrics_file=
expect_contains "$OUT" "stopping at step 1: 1 step in a row had a non-finite gradient"

# Resume: the same runs interrupted after a checkpoint and resumed must repeat every loss.
resume_pair() {
  local name="$1" total="$2" save_at="$3"; shift 3
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: $total, seed: 5}" \
    "checkpoint: {dir: \"$WORK/ckpt_$name\", save_interval: $save_at}" \
    "logging: {metrics_file: \"$WORK/${name}_resumed.jsonl\"}"
  run_expect 0 "$STRATA" train --config "$WORK/$name.yaml" "$@" --set train.iters="$save_at"
  run_expect 0 "$STRATA" train --config "$WORK/$name.yaml" "$@"
  expect_contains "$OUT" "resumed from $WORK/ckpt_$name/step_$(printf %08d "$save_at")"
}
resume_pair bf16 20 10 --set bf16.enabled=true
resume_pair overflow 12 6 "${overflow_settings[@]}"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
import equivalence
work = sys.argv[1]
def records(name, kind):
    return equivalence.records(f"{work}/{name}.jsonl", kind)
def last_per_step(name):
    out = {}
    for r in records(name, "train"): out[r["step"]] = r
    return [out[s] for s in sorted(out)]
bad = []

ref = [r["loss"] for r in records("fp32", "train")]
assert len(ref) == 20
for mode in ("bf16", "fp16"):
    got = [r["loss"] for r in records(mode, "train")]
    worst = max(abs(a - b) / b for a, b in zip(got, ref))
    print(f"{mode}: max relative loss difference to fp32 {worst:.2e}")
    if len(got) != 20: bad.append(f"{mode}: {len(got)} steps")
    if worst > 0.02: bad.append(f"{mode}: loss differs from fp32 by {worst:.2%} > 2%")
    if got == ref: bad.append(f"{mode}: identical to fp32, so it did not run in 16 bits")
    if records(mode, "overflow"): bad.append(f"{mode}: unexpected overflow")
    if mode == "fp16" and any(r["loss_scale"] != 65536 or r["skipped"] for r in records(mode, "train")):
        bad.append("fp16: the default scale should stay 2^16 without overflow")

for mode, width in (("fp32", 4), ("bf16", 2)):
    mem = records(mode, "memory")[0]
    psi, r0 = mem["n_params"], mem["ranks"][0]
    want = {"params": width * psi, "grads": 4 * psi, "optimizer": (8 if mode == "fp32" else 12) * psi}
    print(f"{mode} memory: " + ", ".join(f"{k} {r0[k]} B" for k in want) + f" (Ψ = {psi})")
    for key, value in want.items():
        if r0[key] != value: bad.append(f"{mode} memory: {key} {r0[key]} B, expected {value} B")

# Overflow run: expected skips and scales, worked out by hand from DeepSpeed's rules.
train = records("overflow", "train")
skipped = [r["step"] for r in train if r["skipped"]]
scales = [r["loss_scale"] for r in train]
print("overflow run: skipped", skipped, "scales", [int(s) for s in scales])
# Steps 1-4 overflow (2^26 → 2^22); 5 clean steps since the last overflow (iteration 3) double
# the scale after step 9 (iteration 8), so step 10 overflows again and halves it back.
want_scales = [2.0**26, 2.0**25, 2.0**24, 2.0**23] + [2.0**22] * 5 + [2.0**23] + [2.0**22] * 2
if skipped != [1, 2, 3, 4, 10]: bad.append(f"overflow run: skipped steps {skipped}, expected [1, 2, 3, 4, 10]")
if scales != want_scales: bad.append(f"overflow run: scales {scales}, expected {want_scales}")
events = [(r["step"], r["loss_scale"], r["next_loss_scale"]) for r in records("overflow", "overflow")]
want_events = [(1, 2.0**26, 2.0**25), (2, 2.0**25, 2.0**24), (3, 2.0**24, 2.0**23), (4, 2.0**23, 2.0**22),
               (10, 2.0**23, 2.0**22)]
if events != want_events: bad.append(f"overflow records {events}, expected {want_events}")
if any(r["grad_norm"] is not None for r in train if r["skipped"]): bad.append("a skipped step reports a finite norm")
# The schedule advances only after steps that were not skipped: step k runs with the LR of
# iteration (clean steps before k) − 1; linear warmup over 10 iterations to 0.003.
clean = 0
for r in train:
    it = clean - 1
    want_lr = 0.0 if it < 0 else 0.003 * it / 10
    if abs(r["lr"] - want_lr) > 1e-12: bad.append(f"overflow run step {r['step']}: lr {r['lr']}, expected {want_lr}")
    if not r["skipped"]: clean += 1
print("overflow run: lr", [r["lr"] for r in train])

for name in ("bf16", "overflow"):
    whole = [(r["step"], r["loss"], r.get("loss_scale"), r["lr"]) for r in last_per_step(name)]
    resumed = [(r["step"], r["loss"], r.get("loss_scale"), r["lr"]) for r in last_per_step(f"{name}_resumed")]
    if whole != resumed: bad.append(f"{name}: the resumed run differs from the uninterrupted one")
    else: print(f"{name}: resumed run bit-identical over {len(whole)} steps")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
