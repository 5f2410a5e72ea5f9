#!/usr/bin/env bash
# The device path of training, proven without a GPU. STRATA_SIMULATE_DEVICE=1 trains on the
# guarded CPU backend, whose memory faults when anything outside the backend touches it and
# whose ops refuse tensors not labelled as device memory, so the model, the engine (ZeRO 0-3,
# bf16/fp16 masters), AdamW, the MPI communicators' host staging, evaluation, sampling,
# checkpoint save/resume and --dump-grads all run exactly as they do on a GPU. Its arithmetic is
# the CPU backend's, so every figure must equal the plain CPU run bit for bit (tensor
# parallelism's collectives and vocab-parallel loss, pipeline transfers included); a checkpoint
# written from the simulated device resumes on the CPU and the other way round.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP SIMULATE [--set ...]: 8 steps (GAS 2), eval and checkpoint every 4, a sample at 8.
run() {
  local name="$1" np="$2" simulate="$3"; shift 3
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 8, seed: 3, eval_interval: 4, eval_iters: 2}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\", sample_interval: 8, sample_tokens: 12, sample_prompt: \"the\"}"
  run_expect 0 env STRATA_SIMULATE_DEVICE="$simulate" "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train \
    --config "$WORK/$name.yaml" --set zero_optimization.reduce_bucket_size=3000 "$@"
}

# pair NAME NP [--set ...]: the same run on the CPU and on the simulated device.
pair() {
  local name="$1" np="$2"; shift 2
  run "${name}_cpu" "$np" 0 "$@"
  expect_contains "$OUT" "device: cpu | communication: mpi"
  run "${name}_sim" "$np" 1 "$@"
  expect_contains "$OUT" "device: cpu (guarded: a simulated device)"
  expect_contains "$OUT" "communication: mpi (device buffers staged through host memory)"
  names+=("$name")
}

names=()
fp16=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1)
for stage in 0 3; do
  pair "np1_fp32_z$stage" 1 --set zero_optimization.stage="$stage"
  pair "np1_bf16_z$stage" 1 --set zero_optimization.stage="$stage" --set bf16.enabled=true
  pair "np1_fp16_z$stage" 1 --set zero_optimization.stage="$stage" "${fp16[@]}"
done
for stage in 0 1 2 3; do
  pair "np2_bf16_z$stage" 2 --set zero_optimization.stage="$stage" --set bf16.enabled=true
done
pair np2_fp32_z2 2 --set zero_optimization.stage=2 --set model.recompute=full
# Tensor parallelism's collectives, vocab-parallel loss and sampling on device memory.
pair tp2_sp_bf16_z0 2 --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true \
  --set bf16.enabled=true --set model.recompute=selective
pair tp2_dp2_z3 4 --set parallelism.tensor_model_parallel_size=2 --set zero_optimization.stage=3 \
  --set gradient_accumulation_steps=1
# Pipeline transfers, the tied embedding's reduction and the pipelined evaluation and sampling
# on device memory, at every ZeRO stage.
pp2=(--set parallelism.pipeline_model_parallel_size=2 --set model.n_layer=4 --set gradient_accumulation_steps=4)
pair pp2_interleaved_bf16 2 "${pp2[@]}" --set parallelism.pipeline.schedule=interleaved \
  --set parallelism.pipeline.virtual_stages=2 --set bf16.enabled=true
for stage in 1 2 3; do
  pair "pp2_dp2_z$stage" 4 "${pp2[@]}" --set gradient_accumulation_steps=2 --set zero_optimization.stage="$stage"
done
pair pp2_tp2_sp_fp16_z0 4 "${pp2[@]}" --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true "${fp16[@]}"

# Checkpoints cross between the two: stop at step 4 on one, finish on the other.
run sim_to_cpu 2 1 --set zero_optimization.stage=3 --set bf16.enabled=true --set train.iters=4 \
  --set checkpoint.dir="$WORK/ckpt_a"
run sim_to_cpu 2 0 --set zero_optimization.stage=3 --set bf16.enabled=true --set checkpoint.dir="$WORK/ckpt_a"
expect_contains "$OUT" "resumed from $WORK/ckpt_a/step_00000004"
run cpu_to_sim 2 0 --set zero_optimization.stage=1 --set bf16.enabled=true --set train.iters=4 \
  --set checkpoint.dir="$WORK/ckpt_b"
run cpu_to_sim 2 1 --set zero_optimization.stage=1 --set bf16.enabled=true --set checkpoint.dir="$WORK/ckpt_b"
expect_contains "$OUT" "resumed from $WORK/ckpt_b/step_00000004"

# --dump-grads reads the gradient back from the device.
run dump_cpu 1 0 --set train.iters=1 --set logging.sample_interval=0
"$STRATA" train --config "$WORK/dump_cpu.yaml" --set train.iters=1 --set logging.sample_interval=0 \
  --dump-grads "$WORK/grads_cpu.safetensors" >/dev/null 2>&1 || fail "dump-grads on the CPU"
STRATA_SIMULATE_DEVICE=1 "$STRATA" train --config "$WORK/dump_cpu.yaml" --set train.iters=1 \
  --set logging.sample_interval=0 --dump-grads "$WORK/grads_sim.safetensors" >/dev/null 2>&1 ||
  fail "dump-grads on the simulated device"
cmp -s "$WORK/grads_cpu.safetensors" "$WORK/grads_sim.safetensors" || fail "dumped gradients differ"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" "${names[@]}" <<'PY'
import sys
import equivalence
work, names = sys.argv[1], sys.argv[2:]
def records(name):
    return equivalence.records(f"{work}/{name}.jsonl")
def figures(name):
    out = []
    for r in records(name):
        if r["type"] == "train": out.append(("train", r["step"], repr(r["loss"]), repr(r["grad_norm"]), r.get("loss_scale")))
        elif r["type"] == "eval": out.append(("eval", r["step"], repr(r["val_loss"])))
        elif r["type"] == "sample": out.append(("sample", r["step"], r["text"]))
    return out
bad = []
for name in names:
    cpu, sim = figures(f"{name}_cpu"), figures(f"{name}_sim")
    if len([f for f in cpu if f[0] == "train"]) != 8 or not any(f[0] == "sample" for f in cpu):
        bad.append(f"{name}: the CPU run is incomplete: {cpu}")
    if cpu != sim:
        bad.append(f"{name}: the simulated device differs from the CPU:\n  cpu {cpu}\n  sim {sim}")
    else:
        print(f"{name}: {len(cpu)} figures bit-identical")
for name, whole in (("sim_to_cpu", "np2_bf16_z3_cpu"), ("cpu_to_sim", "np2_bf16_z1_cpu")):
    got = [f for f in figures(name) if f[0] == "train"]
    want = [f for f in figures(whole) if f[0] == "train"]
    if got != want: bad.append(f"{name}: resumed run {got} differs from {want}")
    else: print(f"{name}: resumed across backends, bit-identical")
if any(r["type"] == "train" and r.get("skipped") for r in records("np1_fp16_z0_sim")):
    print("fp16 on the simulated device skipped overflowing steps like the CPU")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY

# Wrong uses are user errors.
run_expect 2 env STRATA_SIMULATE_DEVICE=1 "$STRATA" train --config "$WORK/dump_cpu.yaml" --set device=cuda
expect_contains "$OUT" "STRATA_SIMULATE_DEVICE=1 runs the guarded CPU backend, but the config says device: cuda"
run_expect 2 env STRATA_SIMULATE_DEVICE=yes "$STRATA" train --config "$WORK/dump_cpu.yaml"
expect_contains "$OUT" "STRATA_SIMULATE_DEVICE='yes': use 1 (on) or 0 (off)"
echo "simulated device: every figure equals the CPU run"
