#!/usr/bin/env bash
# One command for a GPU machine: checks the GPU, builds the CUDA targets, runs the CUDA host-logic
# tests, the GPU op tests (plain, then under compute-sanitizer memcheck and racecheck), the
# per-kernel benchmark and the PyTorch GPT-2 peer. Full logs go to OUTDIR; a table comes last.
#
# Usage: scripts/gpu_check.sh OUTDIR
# Environment:
#   STRATA_DEPS_PREFIX  a folder where Debian's dependency packages (.deb) were unpacked with
#                       `dpkg -x pkg.deb "$STRATA_DEPS_PREFIX"` (OpenMPI, yaml-cpp, fmt, CLI11,
#                       Catch2 v2, OpenBLAS, nlohmann-json and their runtime libraries), for GPU
#                       machines without those packages; CMake, the linker and OpenMPI are
#                       pointed at it. Unset: the system's packages are used.
#   STRATA_BUILD_DIR    build folder (default: <repo>/build-gpu)
#   STRATA_JOBS         parallel build jobs (default: nproc)
#   STRATA_SKIP_SANITIZER=1  skip the compute-sanitizer passes
#   STRATA_BENCH_BATCH, STRATA_BENCH_SEQ  benchmark shape (default 16 × 1024)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu_check.sh OUTDIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${STRATA_BUILD_DIR:-$root/build-gpu}"
jobs="${STRATA_JOBS:-$(nproc)}"
rows=()
failed=0

# record STEP STATUS SECONDS DETAIL
record() {
  rows+=("$(printf '%-26s %-5s %6ss  %s' "$1" "$2" "$3" "$4")")
  [ "$2" = FAIL ] && failed=1
  echo "== $1: $2 ($3 s) $4"
}

print_table() {
  echo
  echo "strata gpu_check — logs in $out"
  printf '%-26s %-5s %7s  %s\n' step result time detail
  for row in "${rows[@]}"; do echo "$row"; done
}

# run_step NAME LOG CMD...: runs CMD with output to LOG; detail = Catch2's summary line if any.
run_step() {
  local name="$1" log="$2"
  shift 2
  local start=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  local detail
  detail="$(grep -E '^(All tests passed|test cases:)' "$log" | tail -n 1)"
  if [ $rc -eq 0 ]; then
    record "$name" PASS $((SECONDS - start)) "$detail"
  elif [ $rc -eq 77 ]; then
    record "$name" SKIP $((SECONDS - start)) "no usable GPU"
  else
    record "$name" FAIL $((SECONDS - start)) "exit $rc; ${detail:-see $(basename "$log")}"
  fi
  return $rc
}

# ---- the GPU ----
if ! nvidia-smi >"$out/nvidia-smi.log" 2>&1; then
  record "nvidia-smi" FAIL 0 "no GPU or driver (see nvidia-smi.log)"
  print_table
  exit 1
fi
record "nvidia-smi" PASS 0 "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)"

# ---- dependencies from an unpacked prefix ----
# No -Werror here: the GPU machine's compiler may warn where ours does not, and that must not
# stop the GPU checks (warnings are errors in the Debian build).
cmake_args=(-DSTRATA_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ -n "${STRATA_DEPS_PREFIX:-}" ]; then
  deps="$(cd "$STRATA_DEPS_PREFIX" && pwd)"
  arch=x86_64-linux-gnu
  export CMAKE_PREFIX_PATH="$deps/usr;$deps/usr/lib/$arch;$deps/usr/lib/$arch/cmake${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}"
  export CMAKE_LIBRARY_PATH="$deps/usr/lib/$arch/openblas-pthread;$deps/usr/lib/$arch${CMAKE_LIBRARY_PATH:+;$CMAKE_LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/$arch:$deps/usr/lib/$arch/openblas-pthread:$deps/usr/lib/$arch/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$deps/usr/bin:$PATH"
  export OPAL_PREFIX="$deps/usr"  # Debian's OpenMPI is installed with prefix /usr
  cmake_args+=(-DSTRATA_CBLAS_INCLUDE="$deps/usr/include/$arch/openblas-pthread")
  # dpkg -x does not create the alternatives symlinks (mpicc → mpicc.openmpi).
  [ -x "$deps/usr/bin/mpicc.openmpi" ] && cmake_args+=(-DMPI_C_COMPILER="$deps/usr/bin/mpicc.openmpi")
  [ -x "$deps/usr/bin/mpirun.openmpi" ] && cmake_args+=(-DSTRATA_MPIRUN="$deps/usr/bin/mpirun.openmpi")
  echo "dependencies from $deps"
fi

# ---- build ----
start=$SECONDS
if cmake -S "$root" -B "$build" -G Ninja "${cmake_args[@]}" >"$out/configure.log" 2>&1 &&
   ninja -C "$build" -j "$jobs" unit_cuda gpu_ops bench_kernels >"$out/build.log" 2>&1; then
  record "build" PASS $((SECONDS - start)) "unit_cuda gpu_ops bench_kernels in $build"
else
  record "build" FAIL $((SECONDS - start)) "see configure.log / build.log"
  print_table
  exit 1
fi

# ---- tests ----
run_step "unit_cuda (host logic)" "$out/unit_cuda.log" "$build/tests/gpu/unit_cuda"
run_step "gpu_ops" "$out/gpu_ops.log" "$build/tests/gpu/gpu_ops" --durations yes
if [ "${STRATA_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
  run_step "gpu_ops memcheck" "$out/memcheck.log" \
    compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$build/tests/gpu/gpu_ops"
  run_step "attention racecheck" "$out/racecheck.log" \
    compute-sanitizer --tool racecheck --error-exitcode 3 "$build/tests/gpu/gpu_ops" \
    "gpu: attention with generic head dims*"
  run_step "layers synccheck" "$out/synccheck.log" \
    compute-sanitizer --tool synccheck --error-exitcode 3 "$build/tests/gpu/gpu_ops" \
    "gpu: layernorm*" "gpu: softmax cross-entropy*" "gpu: bias_backward*"
else
  record "compute-sanitizer" SKIP 0 "STRATA_SKIP_SANITIZER=1 or not installed"
fi

# ---- benchmarks ----
start=$SECONDS
STRATA_BUILD_DIR="$build" "$root/scripts/bench_gpu.sh" "$out" "${STRATA_BENCH_BATCH:-16}" "${STRATA_BENCH_SEQ:-1024}" \
  >"$out/bench.log" 2>&1
bench_rc=$?
while IFS= read -r line; do
  case "$line" in
    *FAILED*) record "${line%%:*}" FAIL 0 "${line#*: }" ;;
    *skipped*) record "${line%%:*}" SKIP 0 "${line#*: }" ;;
    *) record "${line%%:*}" PASS 0 "${line#*: }" ;;
  esac
done <"$out/bench.log"
[ $bench_rc -ne 0 ] && failed=1
echo "benchmarks took $((SECONDS - start)) s"
if [ -f "$out/bench_kernels_bf16.log" ]; then
  echo
  echo "per-kernel timings (bf16, $(grep -m1 'copy bandwidth' "$out/bench_kernels_bf16.log" | sed 's/.*, copy/copy/')):"
  grep -E 'us .*GB/s' "$out/bench_kernels_bf16.log"
fi

print_table
exit $failed
