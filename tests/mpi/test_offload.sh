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
# other. On the CPU backend offload is a no-op that says so. offload_optimizer.device nvme keeps
# the state in a file under nvme_path (read ahead and written behind in O_DIRECT pieces), on the
# simulated device and on the CPU backend alike, bit for bit too; no file is left behind, and
# the peak resident memory drops by the state that left it, saving and resuming a checkpoint
# included (the state streams a tensor at a time; test_offload_param.sh covers the parameters). Stage 0, offloaded state larger than the node's memory, a missing or unwritable
# nvme_path, a file system without O_DIRECT (a preloaded shim plays one) and a file that cannot
# be reserved are refused before the first step. A run offloading to nvme killed with SIGKILL
# mid-run leaves no file and resumes bit for bit.
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

# pair NAME NP [--set ...]: the same run on the simulated device without and with offload to
# host memory, and (trio) to a file as well.
pair() {
  local name="$1" np="$2"; shift 2
  run "${name}_none" "$np" 1 -- "$@"
  run "${name}_cpu" "$np" 1 -- "$@" --set zero_optimization.offload_optimizer.device=cpu
  expect_contains "$OUT" "offload: optimizer state (fp32 master, Adam moments) in"
  names+=("$name")
}
trio() {
  pair "$@"
  local name="$1" np="$2"; shift 2
  run "${name}_nvme" "$np" 1 -- "$@" --set zero_optimization.offload_optimizer.device=nvme \
    --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme" --set zero_optimization.offload_optimizer.buffer_count=2
  expect_contains "$OUT" "in a file in $WORK/nvme (O_DIRECT, 2 pieces in host memory at once)"
  nvme_names+=("$name")
}
mkdir -p "$WORK/nvme"

names=()
nvme_names=()
fp16=(--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1)
trio z1_fp32 2 --set zero_optimization.stage=1
trio z2_fp16 2 --set zero_optimization.stage=2 "${fp16[@]}"
pair z2_bf16_pinned 2 --set zero_optimization.stage=2 --set bf16.enabled=true \
  --set zero_optimization.offload_optimizer.pin_memory=true
expect_contains "$OUT" "in page-locked host memory"
trio z3_bf16 2 --set zero_optimization.stage=3 --set bf16.enabled=true
pair z3_fp16 2 --set zero_optimization.stage=3 "${fp16[@]}"
pair tp2_sp_z1 2 --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true \
  --set zero_optimization.stage=1 --set bf16.enabled=true
pp2=(--set parallelism.pipeline_model_parallel_size=2 --set model.n_layer=4)
pair pp2_interleaved_z2 4 "${pp2[@]}" --set parallelism.pipeline.schedule=interleaved \
  --set parallelism.pipeline.virtual_stages=2 --set gradient_accumulation_steps=4 --set zero_optimization.stage=2 \
  --set bf16.enabled=true
pair grid8_z3 8 "${pp2[@]}" --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true \
  --set zero_optimization.stage=3 --set bf16.enabled=true

# The CPU backend: cpu is accepted and said to be a no-op; nvme is real. The same numbers.
run cpu_backend_none 2 0 -- --set zero_optimization.stage=1
run cpu_backend_cpu 2 0 -- --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=cpu
expect_contains "$OUT" "offload: offload_optimizer cpu is a no-op on the CPU backend"
run cpu_backend_nvme 2 0 -- --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=nvme \
  --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme"
[ -z "$(ls -A "$WORK/nvme")" ] || fail "offload files left behind: $(ls "$WORK/nvme")"
# Resident memory: a 12.6M-parameter model on one rank (CPU backend, ZeRO 1, fp32) keeps its
# optimizer state (8 bytes per parameter, and the 4-byte master's second copy) out of memory on
# nvme: the resident memory after the first step drops by about what left, less the file's
# buffers.
big=(--set model.n_layer=4 --set model.d_model=512 --set model.n_head=8 --set zero_optimization.stage=1
  --set train.iters=2 --set gradient_accumulation_steps=1)
run rss_none 1 0 -- "${big[@]}"
nvme_big=("${big[@]}" --set zero_optimization.offload_optimizer.device=nvme
  --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme" --set zero_optimization.offload_optimizer.buffer_count=2)
run rss_nvme 1 0 -- "${nvme_big[@]}"
# A checkpoint streams the file's state out and back in a tensor at a time: a run that saves after
# each step, and one that resumes, peak at the resident memory of one that does neither, give or
# take a quarter of the state (copying the state out or in whole would add all of it).
peak_rss_bytes() {
  python3 -c 'import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT).returncode
print(1024 * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if code == 0 else -1)' "$@"
}
write_small_config "$WORK/rss_save.yaml" "$WORK/data" "train: {iters: 2, seed: 5}"
plain=$(peak_rss_bytes "$STRATA" train --config "$WORK/rss_save.yaml" "${nvme_big[@]}")
saving=$(peak_rss_bytes "$STRATA" train --config "$WORK/rss_save.yaml" "${nvme_big[@]}" \
  --set checkpoint.dir="$WORK/ckpt_rss" --set checkpoint.save_interval=1)
[ -f "$WORK/ckpt_rss/latest" ] || fail "the saving run wrote no checkpoint"
resumed=$(peak_rss_bytes "$STRATA" train --config "$WORK/rss_save.yaml" "${nvme_big[@]}" --set train.iters=3 \
  --set checkpoint.resume="$WORK/ckpt_rss/step_00000002")
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK/rss_nvme.jsonl" "$plain" "$saving" "$resumed" <<'PY'
import sys
from equivalence import records
state = records(sys.argv[1], "memory")[0]["ranks"][0]["nvme"]
plain, saving, resumed = (int(x) for x in sys.argv[2:5])
print(f"peak resident memory {plain} B without checkpoints, {saving} B saving each step, {resumed} B resuming "
      f"({state} B of state on nvme)")
for what, peak in (("saving", saving), ("resuming", resumed)):
    if plain <= 0 or peak - plain > state / 4:
        sys.exit(f"{what} raised the peak resident memory by {peak - plain} B, the state is {state} B")
PY

# Checkpoints: saved at step 4 with offload (ZeRO 2, DP 2) and without; resumed without and with
# offload (host memory, file) on the same layout, and on another (ZeRO 3, DP 4).
save="checkpoint: {dir: \"$WORK/ckpt_off\", save_interval: 4}"
run ck_off 2 1 "$save" -- --set zero_optimization.stage=2 --set bf16.enabled=true \
  --set zero_optimization.offload_optimizer.device=cpu
run ck_on 2 1 "checkpoint: {dir: \"$WORK/ckpt_on\", save_interval: 4}" -- --set zero_optimization.stage=2 \
  --set bf16.enabled=true
# resume FROM TO NAME NP [--set ...]: the step-4 checkpoint of ck_FROM resumed with offload TO.
resume() {
  local from="$1" to="$2" name="$3" np="$4"; shift 4
  run "$name" "$np" 1 "checkpoint: {resume: \"$WORK/ckpt_$from/step_00000004\"}" -- --set bf16.enabled=true \
    --set zero_optimization.offload_optimizer.device="$to" --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme" "$@"
}
same=(--set zero_optimization.stage=2)
other=(--set zero_optimization.stage=3 --set gradient_accumulation_steps=1)
resume off none resume_off_none 2 "${same[@]}"
resume on cpu resume_on_cpu 2 "${same[@]}"
resume off nvme resume_off_nvme 2 "${same[@]}"
resume off none reshard_off_none 4 "${other[@]}"
resume on nvme reshard_on_nvme 4 "${other[@]}"

# SIGKILL mid-run (nvme, ZeRO 2, DP 2, a checkpoint every 4 steps): every process is killed
# after the first checkpoint; no offload file is left; resume: auto repeats the uninterrupted
# run's losses bit for bit.
kill_run=(--set zero_optimization.stage=2 --set bf16.enabled=true --set train.iters=16
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme")
run kill_ref 2 1 -- "${kill_run[@]}"
write_small_config "$WORK/kill.yaml" "$WORK/data" "train: {iters: 16, seed: 5}" \
  "logging: {metrics_file: \"$WORK/kill.jsonl\"}" "checkpoint: {dir: \"$WORK/ckpt_kill\", save_interval: 4}"
STRATA_SIMULATE_DEVICE=1 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/kill.yaml" \
  --set zero_optimization.reduce_bucket_size=3000 "${kill_run[@]}" > "$WORK/kill1.log" 2>&1 &
kill_after_checkpoint $! "$WORK/kill.yaml" "$WORK/ckpt_kill"
[ -z "$(ls -A "$WORK/nvme")" ] || fail "offload files left behind by the killed run: $(ls "$WORK/nvme")"
run_expect 0 env STRATA_SIMULATE_DEVICE=1 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/kill.yaml" \
  --set zero_optimization.reduce_bucket_size=3000 "${kill_run[@]}"
expect_contains "$OUT" "resumed from"
diff <(train_losses "$WORK/kill_ref.jsonl") <(train_losses "$WORK/kill.jsonl") || fail "the killed run's resume differs"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" "${names[@]}" --nvme "${nvme_names[@]}" <<'PY'
import sys
from equivalence import records, losses, train_values
work, names = sys.argv[1], sys.argv[2:]
bad = []
def path(name): return f"{work}/{name}.jsonl"
def same(a, b, what):
    la, lb = losses(path(a)), losses(path(b))
    if la != lb or not la:
        bad.append(f"{what}: {a} {la} != {b} {lb}")
nvme_names = sys.argv[sys.argv.index("--nvme") + 1:] if "--nvme" in sys.argv else []
names = names[:names.index("--nvme")] if "--nvme" in names else names
for name in nvme_names + ["cpu_backend"]:
    same(f"{name}_nvme", f"{name}_none", f"{name} on nvme")
    nv, r0 = records(path(f"{name}_nvme"), "memory")[0], records(path(f"{name}_none"), "memory")[0]["ranks"][0]
    n0 = nv["ranks"][0]
    if any(n0[k] != v for k, v in nv["estimate"].items()):
        bad.append(f"{name} on nvme: record {n0} != estimate {nv['estimate']}")
    if n0["optimizer"] != 0 or n0["nvme"] < r0["optimizer"]:
        bad.append(f"{name} on nvme: optimizer {n0['optimizer']} B, in the file {n0['nvme']} B")
    print(f"{name:>20}: on nvme bit for bit; {n0['nvme']} B in the file, {n0['host']} B of host buffers")
rss = [records(path(f"rss_{k}"), "host_memory")[0]["rss_max"] for k in ("none", "nvme")]
mem = [records(path(f"rss_{k}"), "memory")[0]["ranks"][0] for k in ("none", "nvme")]
left = mem[0]["optimizer"] + mem[0]["workspace"] - mem[1]["workspace"] - mem[1]["host"]
print(f"resident memory after the first step {rss[0]} -> {rss[1]} B with nvme ({left} B of state left memory)")
if rss[0] - rss[1] < 0.8 * left:
    bad.append(f"nvme: the RSS dropped {rss[0] - rss[1]} B, expected about {left} B")
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
if not any(r["grad_norm"] > 1.0 for r in records(path("tp2_sp_z1_cpu"), "train")):
    bad.append("clipping never active (gradient_clipping 1.0)")
full = losses(path("ck_off"))
if full != losses(path("ck_on")): bad.append("the checkpointed runs differ")
for name in ("resume_off_none", "resume_on_cpu", "resume_off_nvme"):
    got = losses(path(name))
    if sorted(got) != list(range(5, 9)) or any(got[s] != full[s] for s in got):
        bad.append(f"{name}: {got} vs {full}")
other = [losses(path(name)) for name in ("reshard_off_none", "reshard_on_nvme")]
if other[0] != other[1] or sorted(other[0]) != list(range(5, 9)):
    bad.append(f"resharded resumes differ: {other}")
print("resumes: bit for bit on the same layout; on DP 4 ZeRO 3 with and without offload alike")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY

# Refusals, before any step.
write_small_config "$WORK/bad.yaml" "$WORK/data"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.offload_optimizer.device=cpu
expect_contains "$OUT" "zero_optimization.offload_optimizer.device: cpu needs ZeRO stage 1, 2 or 3"
run_expect 2 "$STRATA" config "$WORK/bad.yaml" --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=
expect_contains "$OUT" "zero_optimization.offload_optimizer.nvme_path: is empty, but device nvme keeps the state in a file"
run_expect 2 "$STRATA" train --config "$WORK/bad.yaml" --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$WORK/none"
expect_contains "$OUT" "nvme_path '$WORK/none' is not a directory"
chmod 500 "$WORK/nvme"
if ! touch "$WORK/nvme/x" 2>/dev/null; then  # (root writes anywhere)
  run_expect 2 "$STRATA" train --config "$WORK/bad.yaml" --set zero_optimization.stage=1 \
    --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme"
  expect_contains "$OUT" "nvme_path '$WORK/nvme': cannot create"
fi
rm -f "$WORK/nvme/x"
chmod 700 "$WORK/nvme"
# A file that cannot be reserved (here 290 MiB under a file-size limit of 64 MiB, which MPI's
# own shared segments stay under; a full disk says the same, with the space free).
run_expect 2 bash -c "ulimit -f 65536; exec \"$STRATA\" train --config \"$WORK/bad.yaml\" --set zero_optimization.stage=1 \
  --set model.n_layer=8 --set model.d_model=512 --set model.n_head=8 --set zero_optimization.offload_optimizer.device=nvme \
  --set zero_optimization.offload_optimizer.nvme_path=\"$WORK/nvme\""
expect_contains "$OUT" "zero_optimization.offload_optimizer.nvme_path '$WORK/nvme': cannot reserve 290.3 MiB for the offloaded optimizer"
# A file system without O_DIRECT (tmpfs before Linux 6.6, some network file systems) answers such
# an open with EINVAL; the file systems at hand all accept it, so a preloaded shim answers so.
cat >"$WORK/no_direct.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>
/* As ramfs does: the file is created, then O_DIRECT refused. */
static int refuse_direct(const char* name, const char* path, int flags, va_list ap) {
  int (*real)(const char*, int, ...) = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, name);
  const int mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
  if (flags & O_DIRECT) {
    const int created = real(path, flags & ~O_DIRECT, mode);
    if (created >= 0) close(created);
    errno = EINVAL;
    return -1;
  }
  return real(path, flags, mode);
}
/* open and open64 (the name glibc's headers give open with large-file support) alike. */
#define REFUSE_DIRECT(fn)                                   \
  int fn(const char* path, int flags, ...) {                \
    va_list ap;                                             \
    va_start(ap, flags);                                    \
    const int fd = refuse_direct(#fn, path, flags, ap);     \
    va_end(ap);                                             \
    return fd;                                              \
  }
REFUSE_DIRECT(open)
REFUSE_DIRECT(open64)
C
cc -shared -fPIC -o "$WORK/no_direct.so" "$WORK/no_direct.c" -ldl
run_expect 2 env LD_PRELOAD="$WORK/no_direct.so" "$STRATA" train --config "$WORK/bad.yaml" \
  --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=nvme \
  --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme"
expect_contains "$OUT" "nvme_path '$WORK/nvme': its file system does not support O_DIRECT"
[ -z "$(ls -A "$WORK/nvme")" ] || fail "a refused nvme_path kept a file: $(ls "$WORK/nvme")"
# Offloaded state that does not fit the node's memory (a 2.5B-parameter model: 28 GiB of
# offloaded state beside 19 GiB of simulated device memory, on a node of 24 GiB): exit 2 before
# anything is allocated, with the numbers. (A model whose device part alone is too large is the
# model not fitting.)
run_expect 2 env STRATA_SIMULATE_DEVICE=1 "$STRATA" train --config "$SRC/configs/gpt2-1558m.yaml" \
  --set model.n_layer=80 --set zero_optimization.stage=3 --set bf16.enabled=true \
  --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=1 --set train_batch_size=1 \
  --set zero_optimization.offload_optimizer.device=cpu --set "data.train=$WORK/data/train_*.bin" \
  --set "data.val=$WORK/data/val_*.bin"
expect_contains "$OUT" "the offloaded optimizer state does not fit host memory: each rank needs about"
# Host memory taken by buffer_count's buffers, not by the state (already in a file): that is what
# the message names.
write_small_config "$WORK/buffers.yaml" "$WORK/data" "train: {iters: 2}"
mkdir -p "$WORK/nvme"
run_expect 2 "$STRATA" train --config "$WORK/buffers.yaml" --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme" \
  --set zero_optimization.offload_optimizer.buffer_count=100000000
expect_contains "$OUT" "lower zero_optimization.offload_optimizer.buffer_count (100000000), whose buffers take"
if grep -q "offload_optimizer.device: nvme (the state in a file)" <<<"$OUT"; then fail "nvme advised with nvme set"; fi
# On the CPU backend a model too large for the node is the model not fitting, whatever is in a file.
run_expect 2 "$STRATA" train --config "$WORK/buffers.yaml" --set model.n_layer=48 --set model.d_model=4096 \
  --set model.n_head=32 --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=nvme \
  --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme"
expect_contains "$OUT" "the model does not fit: each rank needs about"
expect_contains "$OUT" "offloading to nvme, or more ranks"
if grep -q "offloaded optimizer state does not fit" <<<"$OUT"; then fail "the model's size blamed on the offloaded state"; fi
# pin_memory on the CPU backend is said to change nothing (no memory is page-locked there).
run_expect 0 "$STRATA" train --config "$WORK/buffers.yaml" --set zero_optimization.stage=3 \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_param.device=nvme \
  --set zero_optimization.offload_param.nvme_path="$WORK/nvme" --set zero_optimization.offload_param.pin_memory=true
expect_contains "$OUT" "offload: pin_memory changes nothing on the CPU backend"
if grep -q "page-locked" <<<"$OUT"; then fail "the CPU backend claimed page-locked memory"; fi
echo ok
