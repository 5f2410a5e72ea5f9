#!/usr/bin/env bash
# DeepSpeed configs as they are. Configs written here with the keys and values of the ones
# DeepSpeed's example repositories publish for GPT training (Megatron-LM ZeRO-2, Megatron-DeepSpeed
# ZeRO-1 fp16 and bf16 with fp32 gradient accumulation, an autotuning config with an 'auto'
# micro-batch, ZeRO-Infinity) pass `strata config` at 16 ranks for GPT-2 124M, list each key with
# its treatment, and train 5 steps of a tiny model on 2 ranks with the notes logged; offloading
# is refused with its reason, and no DeepSpeed key is ever called unknown. The README's table is
# the one `strata config --deepspeed-keys` prints.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# The README's table is the binary's.
run_expect 0 "$STRATA" config --deepspeed-keys
sed -n '/<!-- deepspeed-keys:begin -->/,/<!-- deepspeed-keys:end -->/p' "$SRC/README.md" | sed '1d;$d' \
  > "$WORK/readme_table.md"
diff <(printf '%s\n' "$OUT") "$WORK/readme_table.md" >/dev/null ||
  fail "README's DeepSpeed key table differs from strata config --deepspeed-keys (regenerate it)"

cat > "$WORK/megatron_zero2.json" <<'JSON'
{
  "train_batch_size": 2048,
  "gradient_accumulation_steps": 1,
  "steps_per_print": 1,
  "zero_optimization": {
    "stage": 2,
    "allgather_partitions": true,
    "reduce_scatter": true,
    "allgather_bucket_size": 50000000,
    "reduce_bucket_size": 50000000,
    "overlap_comm": true
  },
  "optimizer": {
    "type": "Adam",
    "params": {"lr": 0.00015, "max_grad_norm": 1.0, "betas": [0.9, 0.95]}
  },
  "gradient_clipping": 1.0,
  "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
  "activation_checkpointing": {"partition_activations": true, "contiguous_memory_optimization": false},
  "wall_clock_breakdown": true,
  "zero_allow_untested_optimizer": false
}
JSON
cat > "$WORK/zero1_fp16.json" <<'JSON'
{
  "train_batch_size": 256,
  "train_micro_batch_size_per_gpu": 8,
  "steps_per_print": 1,
  "zero_optimization": {"stage": 1},
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 1,
           "initial_scale_power": 11},
  "wall_clock_breakdown": false
}
JSON
cat > "$WORK/zero1_bf16.json" <<'JSON'
{
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 1,
  "steps_per_print": 1,
  "zero_optimization": {"stage": 1},
  "bfloat16": {"enabled": true},
  "data_types": {"grad_accum_dtype": "fp32"},
  "wall_clock_breakdown": false
}
JSON
cat > "$WORK/autotune.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": "auto",
  "fp16": {"enabled": true},
  "autotuning": {
    "enabled": true, "overwrite": false, "fast": true,
    "arg_mappings": {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size"}
  }
}
JSON
cat > "$WORK/infinity.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "zero_optimization": {
    "stage": 3,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "contiguous_gradients": true,
    "overlap_comm": true,
    "reduce_bucket_size": 90000000,
    "sub_group_size": 1e8,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme_data", "buffer_count": 4,
                          "pipeline_read": false, "pipeline_write": false, "pin_memory": true},
    "offload_param": {"device": "nvme", "nvme_path": "/nvme_data", "max_in_cpu": 1, "pin_memory": true}
  },
  "gradient_clipping": 1.0,
  "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
  "wall_clock_breakdown": true,
  "zero_allow_untested_optimizer": false,
  "aio": {"block_size": 1048576, "queue_depth": 16, "single_submit": false, "overlap_events": true,
          "thread_count": 2}
}
JSON

gpt2=(--world-size 16 --set model.preset=gpt2-124m)
run_expect 0 "$STRATA" config "$WORK/megatron_zero2.json" "${gpt2[@]}"
expect_contains "$OUT" "# zero_optimization.allgather_partitions: true accepted, changes nothing"
expect_contains "$OUT" "# optimizer.params.max_grad_norm: 1.0 accepted, changes nothing"
expect_contains "$OUT" "# activation_checkpointing.partition_activations: true accepted, changes nothing: at "
expect_contains "$OUT" "train_micro_batch_size_per_gpu: 128"
run_expect 0 "$STRATA" config "$WORK/megatron_zero2.json" "${gpt2[@]}" --explain-deepspeed
expect_contains "$OUT" "DeepSpeed keys of this config, and what strata does with each:"
expect_contains "$OUT" "zero_optimization.reduce_scatter = true"
[ "$(grep -c '^  ' <<<"$OUT")" -eq 23 ] || fail "expected the config's 23 DeepSpeed keys listed"
run_expect 0 "$STRATA" config "$WORK/zero1_fp16.json" "${gpt2[@]}" --explain-deepspeed
expect_contains "$OUT" "prescale_gradients = false"
# A ds_config as published has no model: its keys are listed all the same, then why it does not
# load (exit 2); a refused key is listed with its reason. DeepSpeed's legacy boolean section is
# named as such.
run_expect 2 "$STRATA" config "$WORK/megatron_zero2.json" --set zero_optimization.prefetch_bucket_size=5e7 \
  --explain-deepspeed
[ "$(grep -c '^  ' <<<"$OUT")" -eq 24 ] || fail "expected the config's 23 DeepSpeed keys and the one set listed"
expect_contains "$OUT" "zero_optimization.prefetch_bucket_size = 5e7"
expect_contains "$OUT" "refused     write it as stage3_prefetch_bucket_size"
expect_contains "$OUT" "The config does not load as it is; its problems follow."
expect_contains "$OUT" "model.n_layer: required without a preset"
# A key strata implements whose value it refuses is listed as refused, with the reason.
printf '{"train_batch_size": 8, "optimizer": {"type": "Lamb", "params": {"lr": 0.001}}}' > "$WORK/lamb.json"
run_expect 2 "$STRATA" config "$WORK/lamb.json" "${gpt2[@]}" --explain-deepspeed
grep -qE "^  optimizer.type = Lamb +refused +'Lamb' is not supported; supported: AdamW, Adam" <<<"$OUT" ||
  { echo "$OUT"; fail "optimizer.type Lamb not listed as refused"; }
echo '{"train_batch_size": 8, "zero_optimization": true}' > "$WORK/legacy.json"
run_expect 2 "$STRATA" config "$WORK/legacy.json" "${gpt2[@]}"
expect_contains "$OUT" "DeepSpeed's legacy boolean form, which strata does not read: write zero_optimization: {stage: 1}"
run_expect 0 "$STRATA" config "$WORK/zero1_bf16.json" "${gpt2[@]}"
expect_contains "$OUT" "# data_types.grad_accum_dtype: fp32 accepted"
expect_contains "$OUT" "bf16:
  enabled: true"

# 'auto' with nothing that determines it says so; with the global batch it is filled in.
run_expect 2 "$STRATA" config "$WORK/autotune.json" "${gpt2[@]}"
expect_contains "$OUT" "(train_micro_batch_size_per_gpu is 'auto', which strata fills in"
run_expect 0 "$STRATA" config "$WORK/autotune.json" "${gpt2[@]}" --set train_batch_size=64
expect_contains "$OUT" "# train_micro_batch_size_per_gpu: auto → 4 (train_batch_size 64 / (gradient_accumulation_steps 1 × data-parallel size 16))"
expect_contains "$OUT" "# autotuning: {…} accepted, changes nothing: read only by DeepSpeed's launcher"

# ZeRO-Infinity's config (optimizer state and parameters on nvme) is read as it is; the settings
# strata has no use for (max_in_cpu, pipeline_read/write, aio) are DeepSpeed keys, not unknown ones.
run_expect 0 "$STRATA" config "$WORK/infinity.json" "${gpt2[@]}"
expect_contains "$OUT" "# zero_optimization.offload_param.max_in_cpu: 1 accepted, changes nothing"
expect_contains "$OUT" "# aio: {…} accepted, changes nothing"
! grep -q "unknown key" <<<"$OUT" || { echo "$OUT"; fail "a DeepSpeed key was reported as unknown"; }

# Five steps of a tiny model on 2 ranks from each loadable config (batch keys scaled to it).
tiny=(--set model.n_layer=2 --set model.n_head=2 --set model.d_model=32 --set model.vocab_size=256
  --set model.seq_len=32 --set "data.train=$WORK/data/train_*.bin" --set train.iters=5)
train() {
  local name="$1"; shift
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/$name.json" "${tiny[@]}" \
    --set "logging.metrics_file=$WORK/$name.jsonl" "$@"
  [ "$(train_losses "$WORK/$name.jsonl" | wc -l)" -eq "${STEPS:-5}" ] || fail "$name: expected ${STEPS:-5} train records"
}
train megatron_zero2 --set train_batch_size=8
expect_contains "$OUT" "config: zero_allow_untested_optimizer: false accepted, changes nothing"
train zero1_fp16 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=4
expect_contains "$OUT" "precision: fp16"
train zero1_bf16 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=4
expect_contains "$OUT" "precision: bf16"
train autotune --set train_batch_size=8
expect_contains "$OUT" "config: train_micro_batch_size_per_gpu: auto → 4"
mkdir -p "$WORK/nvme"
train infinity --set train_batch_size=8 --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme" \
  --set zero_optimization.offload_param.nvme_path="$WORK/nvme"
expect_contains "$OUT" "offload: parameters (the fp16 shard the gathers read) in a file in $WORK/nvme"

# prescale_gradients and gradient_predivide_factor change nothing: strata divides by DP before
# every reduction (through the tokens' loss weights), so the dumped gradients are the same bits
# with them or without, at DP 2 and at DP 3.
dump() {
  local name="$1" np="$2"; shift 2
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 1, seed: 4}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set gradient_accumulation_steps=1 --dump-grads "$WORK/$name.safetensors" "$@"
}
for np in 2 3; do
  dump "post$np" "$np"
  dump "pre$np" "$np" --set prescale_gradients=true
  expect_contains "$OUT" "prescale_gradients: true accepted, changes nothing"
  dump "split$np" "$np" --set gradient_predivide_factor=1.5
  cmp -s "$WORK/post$np.safetensors" "$WORK/pre$np.safetensors" || fail "DP $np: prescale_gradients changed the gradients"
  cmp -s "$WORK/post$np.safetensors" "$WORK/split$np.safetensors" || fail "DP $np: a predivide factor changed them"
done

# csv_monitor writes DeepSpeed's CSV files (rank 0): one per event, a header, and one row per
# optimizer step at the samples trained on so far; the values are the metrics file's. A resumed
# run appends to them without a second header.
csv=(--set csv_monitor.enabled=true --set "csv_monitor.output_path=$WORK/csv" --set csv_monitor.job_name=job
  --set fp16.enabled=true --set wall_clock_breakdown=true --set "checkpoint.dir=$WORK/csv_ckpt")
STEPS=3 train zero1_fp16 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=4 "${csv[@]}" --set train.iters=3
train zero1_fp16 --set train_batch_size=16 --set train_micro_batch_size_per_gpu=4 "${csv[@]}"
expect_contains "$OUT" "resumed from $WORK/csv_ckpt/step_00000003"
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import csv, os, sys
from equivalence import records
work = sys.argv[1]
folder = f"{work}/csv/job"
names = ["train_loss", "lr", "loss_scale"] + [f"elapsed_time_ms_{p}" for p in
                                             ("forward", "backward", "backward_inner", "backward_allreduce", "step")]
assert sorted(os.listdir(folder)) == sorted(f"Train_Samples_{n}.csv" for n in names), os.listdir(folder)
train = {r["step"]: r for r in records(f"{work}/zero1_fp16.jsonl", "train")}
for name in names:
    rows = list(csv.reader(open(f"{folder}/Train_Samples_{name}.csv", newline="")))
    assert rows[0] == ["step", name], rows[0]
    body = rows[1:]
    assert [int(r[0]) for r in body] == [16 * s for s in range(1, 6)], body
    field = {"train_loss": "loss", "lr": "lr", "loss_scale": "loss_scale"}.get(name)
    for r in body:
        if field: assert float(r[1]) == train[int(r[0]) // 16][field], (name, r)
        else: assert float(r[1]) >= 0, (name, r)
print("csv_monitor:", ", ".join(sorted(os.listdir(folder))))
PY

# flops_profiler prints DeepSpeed's report for its profile step (rank 0), here into output_file.
train zero1_bf16 --set train_batch_size=8 --set train_micro_batch_size_per_gpu=2 --set flops_profiler.enabled=true \
  --set flops_profiler.profile_step=2 --set "flops_profiler.output_file=$WORK/flops.txt"
expect_contains "$OUT" "flops profile of step 2 written to $WORK/flops.txt"
grep -q "^Profile Summary at step 2:" "$WORK/flops.txt" || fail "no profile summary in the output file"
grep -q "^data parallel size: *2$" "$WORK/flops.txt" || fail "the profile's data-parallel size"
grep -q "^  h.1: " "$WORK/flops.txt" || fail "no module h.1 in the detailed profile"
# An output file that cannot be written is refused at start-up (not reported at the profiled step
# of a run that then exits 0); a profile step past the last step is warned of.
run_expect 2 "$STRATA" train --config "$WORK/zero1_bf16.json" "${tiny[@]}" --set train_batch_size=2 \
  --set flops_profiler.enabled=true --set flops_profiler.output_file=/proc/none/flops.txt
expect_contains "$OUT" "flops_profiler.output_file: cannot open '/proc/none/flops.txt' for writing"
if grep -q "^step " <<<"$OUT"; then fail "a step ran before the profiler's file was refused"; fi
run_expect 0 "$STRATA" train --config "$WORK/zero1_bf16.json" "${tiny[@]}" --set train_batch_size=2 \
  --set flops_profiler.enabled=true --set flops_profiler.profile_step=99
expect_contains "$OUT" "flops_profiler.profile_step 99 is past train.iters 5: no step will be profiled"
