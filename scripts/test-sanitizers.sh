#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer pass: builds strata and its tests with
# -fsanitize=address,undefined (no CUDA, no emulator) in build-asan and runs the unit tests, the
# MPI Catch2 tests (comm, engine, tensor parallelism at 1-4 ranks) and short training runs under
# mpirun: 2 ranks with ZeRO-3, and 2 pipeline stages with ZeRO-1. Any report fails the run
# (halt_on_error; UBSan's reports are errors too). Leak checking is off: Open MPI keeps its
# allocations until exit on purpose.
# Usage: scripts/test-sanitizers.sh   Environment: STRATA_ASAN_BUILD_DIR (default build-asan)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_ASAN_BUILD_DIR:-$root/build-asan}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87"
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

# No -Werror: GCC warns falsely under the sanitizers (maybe-uninitialized in libstdc++'s regex);
# the normal build keeps warnings errors. -O1 with line tables: reports name files and lines, and
# the tree builds in about half the time of -O2 -g.
cmake -S "$root" -B "$build" -G Ninja -DSTRATA_CUDA=OFF -DSTRATA_EMULATOR=OFF -DSTRATA_WERROR=OFF \
  -DSTRATA_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" >/dev/null
read -r -a ninja_args <<<"${STRATA_NINJA_ARGS:-}"  # more ninja arguments, split at spaces
ninja -C "$build" "${ninja_args[@]}"
(cd "$build" && ctest --output-on-failure --timeout 900 -j "${STRATA_TEST_JOBS:-2}" -L unit)
(cd "$build" && ctest --output-on-failure --timeout 600 -R "^mpi: comm np=")

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-asan.XXXXXX")"
trap 'rm -rf "$work"' EXIT
strata="$build/bin/strata"
mpi_flags=(--oversubscribe -x ASAN_OPTIONS -x UBSAN_OPTIONS)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
for i in $(seq 1 200); do echo "line $i: the quick brown fox jumps over the lazy dog $((i % 13)) times."; done \
  > "$work/corpus.txt"
"$strata" data encode --input "$work/corpus.txt" --out "$work" --val-fraction 0.1 >/dev/null
cat > "$work/small.yaml" <<YAML
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 2
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 256, seq_len: 32}
data: {train: "$work/train_*.bin", val: "$work/val_*.bin"}
train: {iters: 4, eval_interval: 2, eval_iters: 2}
logging: {sample_interval: 4, sample_tokens: 8}
YAML
run() {
  local name="$1"; shift
  echo "test-sanitizers: $name"
  mpirun "${mpi_flags[@]}" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; echo "test-sanitizers: $name failed"; exit 1; }
  if grep -qE "ERROR: AddressSanitizer|runtime error:" "$work/$name.log"; then
    cat "$work/$name.log"; echo "test-sanitizers: $name: sanitizer report"; exit 1
  fi
}
run zero3_np2 -np 2 "$strata" train --config "$work/small.yaml" --set zero_optimization.stage=3 \
  --set checkpoint.dir="$work/ckpt"
run pp2_zero1_np4 -np 4 "$strata" train --config "$work/small.yaml" --set zero_optimization.stage=1 \
  --set parallelism.pipeline_model_parallel_size=2 --set checkpoint.dir="$work/ckpt_pp"
echo "test-sanitizers: clean"
