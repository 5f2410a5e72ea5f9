#!/usr/bin/env bash
# offload_param.device cpu (ZeRO-Infinity's parameter offload, stage 3): each rank's parameter
# shard, the one the layer groups are gathered from, lives in host memory; the host AdamW writes
# it in place and every gather carries its piece up first. On the guarded device backend
# (STRATA_SIMULATE_DEVICE=1, whose memory faults on any host access) every run equals the same
# layout with only the optimizer offloaded, and with nothing offloaded, bit for bit (the host
# AdamW is the backend's arithmetic, and a gathered group holds the same bits wherever its shard
# lived): bf16, fp16 with overflow skips, fp32, clipping active, pinned or not, groups kept whole
# (stage3_param_persistence_threshold), the optimizer on nvme, TP 2 + SP, PP 2 interleaved and
# the 8-rank DP 2 x TP 2 x PP 2 grid. The memory record moves the parameter shard to the host
# (record = estimate) and the device allocator's peak drops by it. Checkpoints saved with it
# resume without it and on another layout, and the reverse; a run killed with SIGKILL mid-run
# resumes bit for bit. On the CPU backend it is a no-op that says so. Below stage 3, without an
# offloaded optimizer, and to nvme it is refused before the first step.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP SIMULATE [yaml lines] -- [--set ...]: 8 steps (GAS 2) at ZeRO 3.
run() {
  local name="$1" np="$2" simulate="$3"; shift 3
  local yaml=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do yaml+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 8, seed: 5}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}" "${yaml[@]}"
  run_expect 0 env STRATA_SIMULATE_DEVICE="$simulate" "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train \
    --config "$WORK/$name.yaml" --set zero_optimization.stage=3 --set zero_optimization.reduce_bucket_size=3000 "$@"
}

off_opt=(--set zero_optimization.offload_optimizer.device=cpu)
off_param=(--set zero_optimization.offload_param.device=cpu)
# trio NAME NP [--set ...]: nothing offloaded, the optimizer, the optimizer and the parameters.
names=()
trio() {
  local name="$1" np="$2"; shift 2
  run "${name}_none" "$np" 1 -- "$@"
  run "${name}_opt" "$np" 1 -- "$@" "${off_opt[@]}"
  run "${name}_param" "$np" 1 -- "$@" "${off_opt[@]}" "${off_param[@]}"
  expect_contains "$OUT" "offload: parameters (the"
  names+=("$name")
}

fp16=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1)
# d_model 128: a shard of 0.2M parameters per rank, so that page rounding is well under 5 %.
wide=(--set model.d_model=128 --set model.n_head=4)
trio bf16 2 --set bf16.enabled=true "${wide[@]}"
expect_contains "$OUT" "offload: parameters (the bf16 shard the gathers read) in pageable host memory"
trio fp16 2 "${fp16[@]}"
trio fp32 2
trio bf16_pinned 2 --set bf16.enabled=true --set zero_optimization.offload_param.pin_memory=true
expect_contains "$OUT" "in page-locked host memory, each layer group's piece carried up"
# Groups whose every tensor has at most 1100 elements (ln_f) stay gathered from step to step.
trio kept_whole 2 --set bf16.enabled=true --set zero_optimization.stage3_param_persistence_threshold=1100
trio tp2_sp 2 --set bf16.enabled=true --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true
pp2=(--set parallelism.pipeline_model_parallel_size=2 --set model.n_layer=4)
trio pp2_interleaved 4 --set bf16.enabled=true "${pp2[@]}" --set parallelism.pipeline.schedule=interleaved \
  --set parallelism.pipeline.virtual_stages=2 --set gradient_accumulation_steps=4
trio grid8 8 --set bf16.enabled=true "${pp2[@]}" --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true
# The optimizer on nvme, the parameters in host memory.
mkdir -p "$WORK/nvme"
run nvme_param 2 1 -- --set bf16.enabled=true "${off_param[@]}" --set zero_optimization.offload_optimizer.device=nvme \
  --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme"
[ -z "$(ls -A "$WORK/nvme")" ] || fail "offload files left behind: $(ls "$WORK/nvme")"

# The CPU backend: a no-op that says so, the same numbers.
run cpu_backend_opt 2 0 -- "${off_opt[@]}"
run cpu_backend_param 2 0 -- "${off_opt[@]}" "${off_param[@]}"
expect_contains "$OUT" "offload: offload_param cpu is a no-op on the CPU backend"

# Checkpoints: saved at step 4 with the parameters offloaded and without; each resumed the other
# way on the same layout (DP 2), and on another (DP 4).
run ck_param 2 1 "checkpoint: {dir: \"$WORK/ckpt_param\", save_interval: 4}" -- --set bf16.enabled=true \
  "${off_opt[@]}" "${off_param[@]}"
run ck_none 2 1 "checkpoint: {dir: \"$WORK/ckpt_none\", save_interval: 4}" -- --set bf16.enabled=true
# resume FROM NAME NP [--set ...]: the step-4 checkpoint of ck_FROM.
resume() {
  local from="$1" name="$2" np="$3"; shift 3
  run "$name" "$np" 1 "checkpoint: {resume: \"$WORK/ckpt_$from/step_00000004\"}" -- --set bf16.enabled=true "$@"
}
resume param resume_param_none 2
resume none resume_none_param 2 "${off_opt[@]}" "${off_param[@]}"
resume param reshard_param_none 4 --set gradient_accumulation_steps=1
resume none reshard_none_param 4 --set gradient_accumulation_steps=1 "${off_opt[@]}" "${off_param[@]}"

# SIGKILL mid-run (a checkpoint every 4 steps): every process is killed after the first
# checkpoint; resume: auto repeats the uninterrupted run's losses bit for bit.
kill_run=(--set bf16.enabled=true --set train.iters=16 "${off_opt[@]}" "${off_param[@]}")
run kill_ref 2 1 -- "${kill_run[@]}"
write_small_config "$WORK/kill.yaml" "$WORK/data" "train: {iters: 16, seed: 5}" \
  "logging: {metrics_file: \"$WORK/kill.jsonl\"}" "checkpoint: {dir: \"$WORK/ckpt_kill\", save_interval: 4}"
kill_args=(train --config "$WORK/kill.yaml" --set zero_optimization.stage=3 --set zero_optimization.reduce_bucket_size=3000
  "${kill_run[@]}")
STRATA_SIMULATE_DEVICE=1 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" "${kill_args[@]}" > "$WORK/kill1.log" 2>&1 &
kill_after_checkpoint $! "$WORK/kill.yaml" "$WORK/ckpt_kill"
run_expect 0 env STRATA_SIMULATE_DEVICE=1 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" "${kill_args[@]}"
expect_contains "$OUT" "resumed from"
diff <(train_losses "$WORK/kill_ref.jsonl") <(train_losses "$WORK/kill.jsonl") || fail "the killed run's resume differs"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" "${names[@]}" <<'PY'
import sys
from equivalence import records, losses, Runs
work, names = sys.argv[1], sys.argv[2:]
bad = []
def path(name): return f"{work}/{name}.jsonl"
def same(a, b, what):
    la, lb = losses(path(a)), losses(path(b))
    if la != lb or not la:
        bad.append(f"{what}: {a} {la} != {b} {lb}")
for name in names:
    same(f"{name}_param", f"{name}_opt", f"{name}: parameters offloaded vs the optimizer only")
    same(f"{name}_param", f"{name}_none", f"{name}: parameters offloaded vs nothing offloaded")
    opt, par = (records(path(f"{name}_{k}"), "memory")[0] for k in ("opt", "param"))
    o0, p0 = opt["ranks"][0], par["ranks"][0]
    for key, value in par["estimate"].items():
        if p0[key] != value:
            bad.append(f"{name}: {key} {p0[key]} B, estimated {value} B")
    moved = o0["params"] - p0["params"]
    if moved <= 0 or p0["host"] - o0["host"] != moved:
        bad.append(f"{name}: params {o0['params']} -> {p0['params']} B on the device, host {o0['host']} -> {p0['host']} B")
    peak = [records(path(f"{name}_{k}"), "device_memory")[0]["peak_allocated_max"] for k in ("opt", "param")]
    drop = peak[0] - peak[1]
    if name == "bf16" and abs(drop / moved - 1) > 0.05:
        bad.append(f"{name}: the device peak dropped {drop} B, the parameter shard is {moved} B")
    print(f"{name:>16}: losses bit for bit; parameter shard {moved} B to the host; device peak {peak[0]} -> {peak[1]} B")
same("nvme_param", "bf16_pinned_none", "optimizer on nvme, parameters in host memory")
same("cpu_backend_param", "cpu_backend_opt", "the CPU backend")
for name in ("fp16",):
    if not any(r.get("skipped") for r in records(path(f"{name}_param"), "train")):
        bad.append(f"{name}: no overflow skip")
if not any(r["grad_norm"] > 1.0 for r in records(path("tp2_sp_param"), "train")):
    bad.append("clipping never active (gradient_clipping 1.0)")
same("ck_param", "ck_none", "the checkpointed runs")
runs = Runs(work, 8)
runs.bad = bad
for name in ("resume_param_none", "resume_none_param"):
    runs.check_resumed(name, "ck_param", 5, 0.0)
same("reshard_param_none", "reshard_none_param", "resumed on DP 4")
runs.finish()
PY

# Refusals, before any step.
write_small_config "$WORK/bad.yaml" "$WORK/data"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=2 "${off_opt[@]}" "${off_param[@]}"
expect_contains "$OUT" "zero_optimization.offload_param.device: cpu needs ZeRO stage 3"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=3 "${off_param[@]}"
expect_contains "$OUT" "zero_optimization.offload_param.device: cpu needs offload_optimizer.device cpu or nvme"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=3 "${off_opt[@]}" \
  --set zero_optimization.offload_param.device=nvme
expect_contains "$OUT" "zero_optimization.offload_param.device: offloading to nvme is not supported yet"
echo ok
