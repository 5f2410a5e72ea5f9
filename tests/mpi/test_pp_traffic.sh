#!/usr/bin/env bash
# The pipeline's traffic per step (the JSONL "comm" payloads and "comm_calls" counts of rank 0,
# which is stage 0) equals the analytic volume exactly. A stage sends each micro-batch's output
# activation of every chunk that feeds another (N·C values, N = B·T token rows; under SP the
# rank's N/TP rows) and receives the same chunk's output gradient; an interleaved stage 0 with v
# chunks per rank also receives its later chunks' inputs and sends their input gradients:
# (2v − 1) messages each way per micro-batch. Activations travel in the model's dtype (4 bytes in
# fp32, 2 in bf16). Once per step the tied embedding's gradient (its vocabulary slice of wte and
# wpe, fp32) is all-reduced between the first and last stage: at ZeRO 0-1 the whole group, at
# ZeRO 2-3 the rank's shard of it. PP 2 with 1F1B, GPipe at PP 4, interleaving, TP 2 with SP,
# bf16, ZeRO-3 under DP 2. With wall_clock_breakdown every record and console line also has
# each stage's forward, backward, send/recv wait and optimizer times and its measured bubble,
# beside theory's share (p − 1)/(v·m + p − 1) of the pipeline's span (and the stages pass a
# barrier before the schedule, so that they start it together).
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

run() {
  local name="$1" np="$2"; shift 2
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 3, seed: 1}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set model.n_layer=4 --set gradient_accumulation_steps=4 "$@"
}
pp() { echo "--set parallelism.pipeline_model_parallel_size=$1"; }
run pp2 2 $(pp 2)
breakdown="--set wall_clock_breakdown=true"
run pp4_gpipe 4 $(pp 4) --set parallelism.pipeline.schedule=gpipe $breakdown
expect_contains "$OUT" "stages fwd/bwd/p2p wait/opt ms, bubble:"
expect_contains "$OUT" "(theory 43%)"
run pp2_interleaved 2 $(pp 2) --set parallelism.pipeline.schedule=interleaved --set parallelism.pipeline.virtual_stages=2 \
  $breakdown
run pp2_tp2_sp 4 $(pp 2) --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true
run pp2_bf16 2 $(pp 2) --set bf16.enabled=true
run pp2_dp2_z3 4 $(pp 2) --set gradient_accumulation_steps=2 --set zero_optimization.stage=3

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records
work = sys.argv[1]
B, T, C, V = 4, 32, 32, 256          # write_small_config's model (V already a multiple of 128·TP)
N = B * T
def expected(m, v=1, tp=1, sp=False, width=4, dp=1, zero=0):
    rows = N // tp if sp else N
    messages = (2 * v - 1) * m
    group = V // tp * C + T * C       # wte's vocabulary slice and wpe
    if zero >= 2:
        group = -(-group // dp)       # the rank's shard of the padded group
    return {"pp.send": (messages, messages * rows * C * width), "pp.recv": (messages, messages * rows * C * width),
            "embedding.all_reduce": (1, group * 4)}
cases = {
    "pp2": expected(4), "pp4_gpipe": expected(4), "pp2_interleaved": expected(4, v=2),
    "pp2_tp2_sp": expected(4, tp=2, sp=True), "pp2_bf16": expected(4, width=2),
    "pp2_dp2_z3": expected(2, dp=2, zero=3),
}
theory = {"pp4_gpipe": (4, 4, 1), "pp2_interleaved": (2, 4, 2)}  # (p, m, v) of the breakdown runs
bad = []
for name, want in cases.items():
    for r in records(f"{work}/{name}.jsonl", "train"):
        got = {k: (r["comm_calls"][k], r["comm"][k]) for k in r["comm"] if k.split(".")[0] in ("pp", "embedding")}
        if r["step"] == 1:
            print(f"{name:>16}: measured {got}")
        if name in theory:
            want = dict(want, **{"pp.barrier": (1, 0)})  # the measured stages start together
        if got != want:
            bad.append(f"{name} step {r['step']}: {got} != analytic {want}")
        if name in theory:
            stages = r.get("stages", [])
            p, m, v = theory[name]
            if len(stages) != p or r.get("bubble_theory") != (p - 1) / (v * m + p - 1):
                bad.append(f"{name} step {r['step']}: stages {stages}, theory {r.get('bubble_theory')}")
            for st in stages:
                compute = st["forward_s"] + st["backward_s"]
                if not (compute > 0 and st["pipe_wait_s"] >= 0 and 0 <= st["bubble"] < 1 and st["optimizer_s"] >= 0):
                    bad.append(f"{name} step {r['step']}: stage {st}")
            if r["step"] == 1:
                print(f"{'':>18}bubble {[round(st['bubble'], 3) for st in stages]}, theory {r['bubble_theory']:.3f}")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
