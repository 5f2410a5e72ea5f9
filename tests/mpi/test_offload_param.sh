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
# resumes bit for bit and leaves no file. offload_param.device nvme keeps the shard in a file
# instead (O_DIRECT, read a layer group ahead of the gathers into buffer_count buffers, written
# group by group by the update), on the simulated device and the CPU backend alike, bit for bit
# too; the resident memory drops by the shard that left it. On the CPU backend cpu is a no-op that
# says so. Below stage 3, without an offloaded optimizer, with fewer than 3 buffers and with a
# missing nvme_path it is refused before the first step.
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
param_nvme=(--set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path="$WORK/nvme"
  --set zero_optimization.offload_param.buffer_count=3)
mkdir -p "$WORK/nvme"
# quartet NAME NP [--set ...]: nothing offloaded, the optimizer, the optimizer and the parameters
# (in host memory, and in a file).
names=()
quartet() {
  local name="$1" np="$2"; shift 2
  run "${name}_none" "$np" 1 -- "$@"
  run "${name}_opt" "$np" 1 -- "$@" "${off_opt[@]}"
  run "${name}_param" "$np" 1 -- "$@" "${off_opt[@]}" "${off_param[@]}"
  expect_contains "$OUT" "offload: parameters (the"
  PARAM_OUT="$OUT"
  run "${name}_pnvme" "$np" 1 -- "$@" "${off_opt[@]}" "${param_nvme[@]}"
  expect_contains "$OUT" "in a file in $WORK/nvme (O_DIRECT, 3 layer groups' pieces in"
  names+=("$name")
}

fp16=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1)
# d_model 128: a shard of 0.2M parameters per rank, so that page rounding is well under 5 %.
wide=(--set model.d_model=128 --set model.n_head=4)
quartet bf16 2 --set bf16.enabled=true "${wide[@]}"
expect_contains "$PARAM_OUT" "offload: parameters (the bf16 shard the gathers read) in pageable host memory"
quartet fp16 2 "${fp16[@]}"
quartet fp32 2
quartet bf16_pinned 2 --set bf16.enabled=true --set zero_optimization.offload_param.pin_memory=true
expect_contains "$PARAM_OUT" "in page-locked host memory, each layer group's piece carried up"
expect_contains "$OUT" "layer groups' pieces in page-locked host memory at once"
# Groups whose every tensor has at most 1100 elements (ln_f) stay gathered from step to step.
quartet kept_whole 2 --set bf16.enabled=true --set zero_optimization.stage3_param_persistence_threshold=1100
quartet tp2_sp 2 --set bf16.enabled=true --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true
pp2=(--set parallelism.pipeline_model_parallel_size=2 --set model.n_layer=4)
quartet pp2_interleaved 4 --set bf16.enabled=true "${pp2[@]}" --set parallelism.pipeline.schedule=interleaved \
  --set parallelism.pipeline.virtual_stages=2 --set gradient_accumulation_steps=4
quartet grid8 8 --set bf16.enabled=true "${pp2[@]}" --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true
# The optimizer on nvme, the parameters in host memory or beside it in a file.
opt_nvme=(--set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme")
run nvme_param 2 1 -- --set bf16.enabled=true "${off_param[@]}" "${opt_nvme[@]}"
run nvme_pnvme 2 1 -- --set bf16.enabled=true "${param_nvme[@]}" "${opt_nvme[@]}"
[ -z "$(ls -A "$WORK/nvme")" ] || fail "offload files left behind: $(ls "$WORK/nvme")"

# The CPU backend: cpu is a no-op that says so; nvme is real. The same numbers.
run cpu_backend_opt 2 0 -- "${off_opt[@]}"
run cpu_backend_param 2 0 -- "${off_opt[@]}" "${off_param[@]}"
expect_contains "$OUT" "offload: offload_param cpu is a no-op on the CPU backend"
run cpu_backend_pnvme 2 0 -- "${off_opt[@]}" "${param_nvme[@]}"
expect_contains "$OUT" "offload: parameters (the fp32 shard the gathers read) in a file in $WORK/nvme"
# Resident memory: a 25M-parameter model on one rank (CPU backend, fp32) keeps its parameter
# shard (4 bytes per parameter) out of memory in the file: the resident memory after the first
# step drops by about what left, less the file's three buffers.
big=(--set model.n_layer=8 --set model.d_model=512 --set model.n_head=8 --set train.iters=2
  --set gradient_accumulation_steps=1 "${opt_nvme[@]}")
run rss_opt 1 0 -- "${big[@]}"
run rss_pnvme 1 0 -- "${big[@]}" "${param_nvme[@]}"

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
resume none resume_none_pnvme 2 "${off_opt[@]}" "${param_nvme[@]}"

# SIGKILL mid-run (a checkpoint every 4 steps): every process is killed after the first
# checkpoint; resume: auto repeats the uninterrupted run's losses bit for bit.
kill_run=(--set bf16.enabled=true --set train.iters=16 "${off_opt[@]}" "${param_nvme[@]}")
run kill_ref 2 1 -- "${kill_run[@]}"
write_small_config "$WORK/kill.yaml" "$WORK/data" "train: {iters: 16, seed: 5}" \
  "logging: {metrics_file: \"$WORK/kill.jsonl\"}" "checkpoint: {dir: \"$WORK/ckpt_kill\", save_interval: 4}"
kill_args=(train --config "$WORK/kill.yaml" --set zero_optimization.stage=3 --set zero_optimization.reduce_bucket_size=3000
  "${kill_run[@]}")
STRATA_SIMULATE_DEVICE=1 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" "${kill_args[@]}" > "$WORK/kill1.log" 2>&1 &
kill_after_checkpoint $! "$WORK/kill.yaml" "$WORK/ckpt_kill"
[ -z "$(ls -A "$WORK/nvme")" ] || fail "offload files left behind by the killed run: $(ls "$WORK/nvme")"
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
    same(f"{name}_pnvme", f"{name}_none", f"{name}: parameters in a file vs nothing offloaded")
    opt, par, pnv = (records(path(f"{name}_{k}"), "memory")[0] for k in ("opt", "param", "pnvme"))
    o0, p0, n0 = opt["ranks"][0], par["ranks"][0], pnv["ranks"][0]
    for which, rec, r0 in (("param", par, p0), ("pnvme", pnv, n0)):
        for key, value in rec["estimate"].items():
            if r0[key] != value:
                bad.append(f"{name}_{which}: {key} {r0[key]} B, estimated {value} B")
    if n0["params"] != p0["params"] or n0["nvme"] - o0["nvme"] != o0["params"] - p0["params"]:
        bad.append(f"{name}_pnvme: params {n0['params']} B on the device, {n0['nvme']} B in files")
    moved = o0["params"] - p0["params"]
    if moved <= 0 or p0["host"] - o0["host"] != moved:
        bad.append(f"{name}: params {o0['params']} -> {p0['params']} B on the device, host {o0['host']} -> {p0['host']} B")
    peak = [records(path(f"{name}_{k}"), "device_memory")[0]["peak_allocated_max"] for k in ("opt", "param", "pnvme")]
    for which, p in (("param", peak[1]), ("pnvme", peak[2])):
        if name == "bf16" and abs((peak[0] - p) / moved - 1) > 0.05:
            bad.append(f"{name}_{which}: the device peak dropped {peak[0] - p} B, the parameter shard is {moved} B")
    print(f"{name:>16}: losses bit for bit; parameter shard {moved} B to the host or a file; device peak "
          f"{peak[0]} -> {peak[1]} (host) / {peak[2]} B (file)")
same("nvme_param", "bf16_pinned_none", "optimizer on nvme, parameters in host memory")
same("nvme_pnvme", "bf16_pinned_none", "optimizer and parameters in files")
same("cpu_backend_param", "cpu_backend_opt", "the CPU backend")
same("cpu_backend_pnvme", "cpu_backend_opt", "the CPU backend, parameters in a file")
rss = [records(path(f"rss_{k}"), "host_memory")[0]["rss_max"] for k in ("opt", "pnvme")]
mem = [records(path(f"rss_{k}"), "memory")[0]["ranks"][0] for k in ("opt", "pnvme")]
left = mem[0]["params"] + mem[0]["host"] - mem[1]["params"] - mem[1]["host"]
print(f"resident memory after the first step {rss[0]} -> {rss[1]} B with the parameters in a file "
      f"({left} B left memory; {mem[1]['nvme']} B in the files)")
if left <= 0 or rss[0] - rss[1] < 0.8 * left:
    bad.append(f"parameters on nvme: the RSS dropped {rss[0] - rss[1]} B, expected about {left} B")
for name in ("fp16",):
    if not any(r.get("skipped") for r in records(path(f"{name}_param"), "train")):
        bad.append(f"{name}: no overflow skip")
if not any(r["grad_norm"] > 1.0 for r in records(path("tp2_sp_param"), "train")):
    bad.append("clipping never active (gradient_clipping 1.0)")
same("ck_param", "ck_none", "the checkpointed runs")
runs = Runs(work, 8)
runs.bad = bad
for name in ("resume_param_none", "resume_none_param", "resume_none_pnvme"):
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
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=3 "${off_opt[@]}" "${param_nvme[@]}" \
  --set zero_optimization.offload_param.buffer_count=2
expect_contains "$OUT" "zero_optimization.offload_param.buffer_count"
run_expect 2 env STRATA_SIMULATE_DEVICE=1 "$STRATA" train --config "$WORK/bad.yaml" --set zero_optimization.stage=3 \
  "${off_opt[@]}" "${param_nvme[@]}" --set zero_optimization.offload_param.nvme_path="$WORK/none"
expect_contains "$OUT" "nvme_path '$WORK/none' is not a directory"
echo ok
