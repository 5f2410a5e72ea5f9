#!/usr/bin/env bash
# offload_optimizer.device cpu (ZeRO-Offload): each rank's fp32 master and Adam moments live in
# host memory and the host AdamW updates them, piece by piece of the shard (reduce_bucket_size
# 3000 cuts it into several), on the guarded device backend (STRATA_SIMULATE_DEVICE=1), whose
# memory faults on any host access, so every transfer is real. The host AdamW is the backend's
# arithmetic bit for bit, so every run equals the same layout without offload bit for bit: ZeRO
# 1-3, fp32/bf16/fp16 (with overflow skips), clipping active, pinned or not, TP 2 + SP, PP 2
# interleaved, the 8-rank DP 2 x TP 2 x PP 2 grid. The memory record moves the optimizer bytes
# to host (record = estimate), and the device allocator's peak drops by them. Checkpoints saved
# with offload resume without it and on another layout, and the reverse, bit for bit with each
# other. On the CPU backend offload is a no-op that says so. Stage 0, nvme, offload_param and
# offloaded state larger than the node's memory are refused before the first step.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP SIMULATE [yaml lines] -- [--set ...]: 8 steps (GAS 2).
run() {
  local name="$1" np="$2" simulate="$3"; shift 3
  local yaml=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do yaml+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 8, seed: 5}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}" "${yaml[@]}"
  run_expect 0 env STRATA_SIMULATE_DEVICE="$simulate" "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train \
    --config "$WORK/$name.yaml" --set zero_optimization.reduce_bucket_size=3000 "$@"
}

# pair NAME NP [--set ...]: the same run on the simulated device without and with offload.
pair() {
  local name="$1" np="$2"; shift 2
  run "${name}_none" "$np" 1 -- "$@"
  run "${name}_cpu" "$np" 1 -- "$@" --set zero_optimization.offload_optimizer.device=cpu
  expect_contains "$OUT" "offload: optimizer state (fp32 master, Adam moments) in"
  names+=("$name")
}

names=()
fp16=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1)
pair z1_fp32 2 --set zero_optimization.stage=1
pair z1_bf16 2 --set zero_optimization.stage=1 --set bf16.enabled=true
pair z2_fp16 2 --set zero_optimization.stage=2 "${fp16[@]}"
pair z2_bf16_pinned 2 --set zero_optimization.stage=2 --set bf16.enabled=true \
  --set zero_optimization.offload_optimizer.pin_memory=true
expect_contains "$OUT" "in page-locked host memory"
pair z3_fp32 2 --set zero_optimization.stage=3
pair z3_bf16 2 --set zero_optimization.stage=3 --set bf16.enabled=true
pair z3_fp16 2 --set zero_optimization.stage=3 "${fp16[@]}"
pair tp2_sp_z1 2 --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true \
  --set zero_optimization.stage=1 --set bf16.enabled=true
pp2=(--set parallelism.pipeline_model_parallel_size=2 --set model.n_layer=4)
pair pp2_interleaved_z2 4 "${pp2[@]}" --set parallelism.pipeline.schedule=interleaved \
  --set parallelism.pipeline.virtual_stages=2 --set gradient_accumulation_steps=4 --set zero_optimization.stage=2 \
  --set bf16.enabled=true
pair grid8_z3 8 "${pp2[@]}" --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true \
  --set zero_optimization.stage=3 --set bf16.enabled=true

# The CPU backend: accepted, said to be a no-op, the same numbers.
run cpu_backend_none 2 0 -- --set zero_optimization.stage=1
run cpu_backend_cpu 2 0 -- --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=cpu
expect_contains "$OUT" "offload: offload_optimizer cpu is a no-op on the CPU backend"

# Checkpoints: saved at step 4 with offload (ZeRO 2, DP 2) and without; each resumed without
# and with offload on the same layout, and on another (ZeRO 3, DP 4).
save="checkpoint: {dir: \"$WORK/ckpt_off\", save_interval: 4}"
run ck_off 2 1 "$save" -- --set zero_optimization.stage=2 --set bf16.enabled=true \
  --set zero_optimization.offload_optimizer.device=cpu
run ck_on 2 1 "checkpoint: {dir: \"$WORK/ckpt_on\", save_interval: 4}" -- --set zero_optimization.stage=2 \
  --set bf16.enabled=true
for from in off on; do
  ck="checkpoint: {resume: \"$WORK/ckpt_$from/step_00000004\"}"
  for to in none cpu; do
    run "resume_${from}_${to}" 2 1 "$ck" -- --set zero_optimization.stage=2 --set bf16.enabled=true \
      --set zero_optimization.offload_optimizer.device=$to
    run "reshard_${from}_${to}" 4 1 "$ck" -- --set zero_optimization.stage=3 --set bf16.enabled=true \
      --set gradient_accumulation_steps=1 --set zero_optimization.offload_optimizer.device=$to
  done
done

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" "${names[@]}" <<'PY'
import sys
from equivalence import records, losses, train_values
work, names = sys.argv[1], sys.argv[2:]
bad = []
def path(name): return f"{work}/{name}.jsonl"
def same(a, b, what):
    la, lb = losses(path(a)), losses(path(b))
    if la != lb or not la:
        bad.append(f"{what}: {a} {la} != {b} {lb}")
for name in names + ["cpu_backend"]:
    same(f"{name}_cpu", f"{name}_none", name)
    none, cpu = (records(path(f"{name}_{k}"), "memory")[0] for k in ("none", "cpu"))
    r0, c0 = none["ranks"][0], cpu["ranks"][0]
    for key, value in cpu["estimate"].items():
        if c0[key] != value:
            bad.append(f"{name}: {key} {c0[key]} B, estimated {value} B")
    if name == "cpu_backend":
        if c0 != r0: bad.append(f"cpu backend: the memory record changed {c0} vs {r0}")
        continue
    if c0["optimizer"] != 0 or c0["host"] < r0["optimizer"]:
        bad.append(f"{name}: optimizer {c0['optimizer']} B on the device, {c0['host']} B on the host; "
                   f"without offload {r0['optimizer']} B")
    peak = [records(path(f"{name}_{k}"), "device_memory")[0]["peak_allocated_max"] for k in ("none", "cpu")]
    drop = peak[0] - peak[1]
    if abs(drop / r0["optimizer"] - 1) > 0.05:
        bad.append(f"{name}: the device peak dropped {drop} B, the optimizer state is {r0['optimizer']} B")
    print(f"{name:>20}: losses bit for bit; device peak {peak[0]} -> {peak[1]} B (optimizer state "
          f"{r0['optimizer']} B), host {c0['host']} B")
for name in ("z2_fp16", "z3_fp16"):
    if not any(r.get("skipped") for r in records(path(f"{name}_cpu"), "train")):
        bad.append(f"{name}: no overflow skip")
if not any(r["grad_norm"] > 1.0 for r in records(path("z1_bf16_cpu"), "train")):
    bad.append("clipping never active (gradient_clipping 1.0)")
full = losses(path("ck_off"))
if full != losses(path("ck_on")): bad.append("the checkpointed runs differ")
for from_ in ("off", "on"):
    for to in ("none", "cpu"):
        got = losses(path(f"resume_{from_}_{to}"))
        if sorted(got) != list(range(5, 9)) or any(got[s] != full[s] for s in got):
            bad.append(f"resume {from_} -> {to}: {got} vs {full}")
    other = [losses(path(f"reshard_{f}_{t}")) for f in ("off", "on") for t in ("none", "cpu")]
if any(o != other[0] for o in other) or sorted(other[0]) != list(range(5, 9)):
    bad.append(f"resharded resumes differ: {other}")
print(f"resumes: bit for bit on the same layout; on DP 4 ZeRO 3 the four resumes agree bit for bit")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY

# Refusals, before any step.
write_small_config "$WORK/bad.yaml" "$WORK/data"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.offload_optimizer.device=cpu
expect_contains "$OUT" "zero_optimization.offload_optimizer.device: cpu needs ZeRO stage 1, 2 or 3"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=nvme
expect_contains "$OUT" "offloading to nvme is not supported yet"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=3 \
  --set zero_optimization.offload_param.device=cpu
expect_contains "$OUT" "offloading to cpu is not supported yet"
# Offloaded state that does not fit the node's memory (a 6.2B-parameter model): exit 2 before
# anything is allocated, with the numbers.
run_expect 2 env STRATA_SIMULATE_DEVICE=1 "$STRATA" train --config "$SRC/configs/gpt2-1558m.yaml" \
  --set model.n_layer=200 --set zero_optimization.stage=3 --set bf16.enabled=true \
  --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=1 --set train_batch_size=1 \
  --set zero_optimization.offload_optimizer.device=cpu --set "data.train=$WORK/data/train_*.bin" \
  --set "data.val=$WORK/data/val_*.bin"
expect_contains "$OUT" "the offloaded optimizer state does not fit host memory: each rank needs about"
echo ok
