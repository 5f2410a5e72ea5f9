#!/usr/bin/env bash
# Tensor-parallel layouts that cannot work are config errors (exit 2, before any collective) that
# name the keys and numbers: heads that TP does not divide, a TP size that does not divide the
# world, SP on a micro-batch whose token rows TP does not divide; and --dump-grads, which needs
# the whole gradient on one rank, refuses TP. `strata config` reports the same for a world size.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/c.yaml" "$WORK/data" "train: {iters: 2}"

run_expect 2 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/c.yaml" \
  --set parallelism.tensor_model_parallel_size=2 --set model.n_head=1
expect_contains "$OUT" "parallelism.tensor_model_parallel_size: model.n_head = 1 is not divisible by tensor_model_parallel_size 2"

run_expect 2 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" train --config "$WORK/c.yaml" \
  --set parallelism.tensor_model_parallel_size=3
expect_contains "$OUT" "parallelism: world size 4 is not divisible by TP×PP = 3 (tensor_model_parallel_size 3"

run_expect 2 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/c.yaml" \
  --set parallelism.tensor_model_parallel_size=2 --set parallelism.sequence_parallel=true --set model.seq_len=31 \
  --set train_micro_batch_size_per_gpu=1
expect_contains "$OUT" "parallelism.sequence_parallel: splits a micro-batch's train_micro_batch_size_per_gpu × model.seq_len = 1 × 31 = 31 token rows over tensor_model_parallel_size 2"

run_expect 2 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train --config "$WORK/c.yaml" \
  --set parallelism.tensor_model_parallel_size=2 --dump-grads "$WORK/g.safetensors"
expect_contains "$OUT" "--dump-grads writes the whole gradient from one rank, which tensor parallelism splits over 2 ranks"

run_expect 2 "$STRATA" config "$WORK/c.yaml" --world-size 6 --set parallelism.tensor_model_parallel_size=4
expect_contains "$OUT" "parallelism: world size 6 is not divisible by TP×PP = 4"
run_expect 0 "$STRATA" config "$WORK/c.yaml" --world-size 8 --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true
expect_contains "$OUT" "tp_size: 2"
expect_contains "$OUT" "dp_size: 4"
echo ok
