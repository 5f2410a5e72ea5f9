#!/usr/bin/env bash
# User-fixable training problems end with exit code 2 and a message naming the file and the
# problem, before any step runs.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# A shard with a bad magic number.
mkdir -p "$WORK/bad"
cp "$WORK/data/train_000000.bin" "$WORK/bad/train_000000.bin"
printf '\x01\x02\x03\x04' | dd of="$WORK/bad/train_000000.bin" bs=1 seek=0 conv=notrunc status=none
write_small_config "$WORK/bad.yaml" "$WORK/bad" "train: {iters: 2}"
sed -i 's|val: .*}|}|' "$WORK/bad.yaml"
run_expect 2 "$STRATA" train --config "$WORK/bad.yaml"
expect_contains "$OUT" "$WORK/bad/train_000000.bin"
expect_contains "$OUT" "magic"

# A truncated shard.
head -c 2000 "$WORK/data/train_000000.bin" > "$WORK/bad/train_000000.bin"
run_expect 2 "$STRATA" train --config "$WORK/bad.yaml"
expect_contains "$OUT" "truncated"

# A glob that matches nothing.
write_small_config "$WORK/none.yaml" "$WORK/nothing-here" "train: {iters: 2}"
run_expect 2 "$STRATA" train --config "$WORK/none.yaml"
expect_contains "$OUT" "data.train"

# data.train's glob also matches the val shard: the validation loss would be training loss.
write_small_config "$WORK/overlap.yaml" "$WORK/data" "train: {iters: 2}"
run_expect 2 "$STRATA" train --config "$WORK/overlap.yaml" --set "data.train=$WORK/data/*.bin"
expect_contains "$OUT" "data.val: $WORK/data/val_000000.bin is also a training shard (data.train '$WORK/data/*.bin' matches it)"

# A checkpoint path that does not exist.
write_small_config "$WORK/ck.yaml" "$WORK/data" "train: {iters: 2}" "checkpoint: {resume: \"$WORK/no/such/ckpt\"}"
run_expect 2 "$STRATA" train --config "$WORK/ck.yaml"
expect_contains "$OUT" "$WORK/no/such/ckpt"

# A corrupt checkpoint: one flipped byte in a rank file fails its checksum.
write_small_config "$WORK/ok.yaml" "$WORK/data" "train: {iters: 2}" "checkpoint: {dir: \"$WORK/ckpt\"}"
run_expect 0 "$STRATA" train --config "$WORK/ok.yaml"
f="$WORK/ckpt/step_00000002/rank_00000.safetensors"
size=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((size - 3)) conv=notrunc status=none
write_small_config "$WORK/ok4.yaml" "$WORK/data" "train: {iters: 4}" "checkpoint: {dir: \"$WORK/ckpt\"}"
run_expect 2 "$STRATA" train --config "$WORK/ok4.yaml"
expect_contains "$OUT" "rank_00000.safetensors"

# A checkpoint of another model shape.
write_small_config "$WORK/other.yaml" "$WORK/data" "train: {iters: 4}" "checkpoint: {dir: \"$WORK/ckpt2\"}"
run_expect 0 "$STRATA" train --config "$WORK/other.yaml" --set train.iters=1
run_expect 2 "$STRATA" train --config "$WORK/other.yaml" --set model.d_model=64
expect_contains "$OUT" "d_model"

# Devices: without a usable GPU, device: cuda says why and auto trains on the CPU; NCCL needs
# GPUs. (Where a GPU is present, the GPU tier covers device: cuda.)
write_small_config "$WORK/dev.yaml" "$WORK/data" "train: {iters: 1}"
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  run_expect 2 "$STRATA" train --config "$WORK/dev.yaml" --set device=cuda
  expect_contains "$OUT" "device: cuda"
  run_expect 0 "$STRATA" train --config "$WORK/dev.yaml" --set device=auto
  expect_contains "$OUT" "device: cpu | communication: mpi"
  run_expect 2 "$STRATA" train --config "$WORK/dev.yaml" --set comm.backend=nccl
  expect_contains "$OUT" "comm.backend: nccl needs a GPU per rank, but device: auto found no GPU"
fi
run_expect 2 "$STRATA" train --config "$WORK/dev.yaml" --set comm.backend=nccl --set device=cpu
expect_contains "$OUT" "comm.backend: nccl needs device: cuda or auto"
echo ok
