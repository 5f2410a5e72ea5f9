#!/usr/bin/env bash
# One command for a GPU machine: brings up the dependencies (the Debian bundle of
# scripts/gpu_bundle.sh when the system lacks them), builds strata with CUDA, runs the unit tests,
# the GPU op tests, the GPU training tests (CUDA against the CPU curves) and compute-sanitizer,
# CPU and two-rank training smoke runs and the GPT-2 124M benchmark against PyTorch with the
# per-kernel table. With --bench it builds and then runs only the full benchmark
# (scripts/bench_gpt2.sh: GPT-2 124M and 1558M, strata and PyTorch); with --sanitizer, only the
# compute-sanitizer passes (for when the budget of a full check ran out before them). A build
# folder left by an earlier call on the same machine is reused, so the build is then quick.
# Full logs go to OUTDIR (six files); a table comes last. Every step runs under a time limit taken
# from one overall budget, so a hang costs its step, not the session. See docs/gpu.md.
#
# Usage: scripts/gpu_check.sh OUTDIR [--bench | --sanitizer]
# Environment:
#   STRATA_DEPS_BUNDLE   folder of .deb files (default: <repo>/.deps/gpu); unpacked when present
#                        and Debian's dev packages are not installed
#   STRATA_DEPS_UNPACK   where the bundle is unpacked (default: /tmp/strata-deps)
#   STRATA_DEPS_PREFIX   use a prefix where the packages were already unpacked (`dpkg -x`)
#   STRATA_BUILD_DIR     build folder (default: <repo>/build-gpu)
#   STRATA_JOBS          parallel build and test jobs (default: nproc)
#   STRATA_CHECK_BUDGET_S  seconds for the whole check (default: 540)
#   STRATA_SKIP_SANITIZER=1  skip the compute-sanitizer passes
#   BENCH_*              passed on to scripts/bench_gpt2.sh (models, batches, steps)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu_check.sh OUTDIR [--bench | --sanitizer]}"
mode="${2:-check}"
case "$mode" in
  check | --bench | --sanitizer) ;;
  *) echo "usage: scripts/gpu_check.sh OUTDIR [--bench | --sanitizer]" >&2; exit 2 ;;
esac
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${STRATA_BUILD_DIR:-$root/build-gpu}"
jobs="${STRATA_JOBS:-$(nproc)}"
budget="${STRATA_CHECK_BUDGET_S:-540}"
bundle="${STRATA_DEPS_BUNDLE:-$root/.deps/gpu}"
unpack_dir="${STRATA_DEPS_UNPACK:-/tmp/strata-deps}"
# Python (the PyTorch peer) runs with the caller's library path, not the bundle's.
export STRATA_HOST_LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/strata-gpu-check.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

setup_log="$out/setup.log" build_log="$out/build.log" tests_log="$out/tests.log"
smoke_log="$out/smoke.log" bench_log="$out/bench.log" summary="$out/summary.txt"
for f in "$setup_log" "$build_log" "$tests_log" "$smoke_log" "$bench_log" "$summary"; do : >"$f"; done

rows=()
failed=0 passes=0 skips=0

# record STEP RESULT SECONDS DETAIL
record() {
  rows+=("$(printf '%-28s %-5s %5ss  %s' "$1" "$2" "$3" "$4")")
  case "$2" in
    FAIL) failed=$((failed + 1)) ;;
    PASS) passes=$((passes + 1)) ;;
    SKIP) skips=$((skips + 1)) ;;
  esac
  echo "== $1: $2 ($3 s) $4"
}

print_table() {
  {
    echo
    echo "strata gpu_check ($(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS}s of ${budget}s) - logs in $out"
    printf '%-28s %-5s %6s  %s\n' step result time detail
    for row in "${rows[@]}"; do echo "$row"; done
    echo "result: $passes passed, $failed failed, $skips skipped"
  } | tee "$summary"
}

finish() {
  print_table
  [ -n "${bench_table:-}" ] && printf '\n%s\n' "$bench_table" | tee -a "$summary"
  [ "$failed" -eq 0 ]
  exit
}

# run_step NAME LOG MAX_S CMD...: runs CMD with its output appended to LOG, limited to MAX_S
# seconds or what is left of the budget. Sets step_rc and step_s; returns 2 when no time is left.
run_step() {
  local name="$1" log="$2" max="$3"
  shift 3
  local limit=$((budget - SECONDS))
  [ "$limit" -gt "$max" ] && limit="$max"
  step_s=0
  if [ "$limit" -lt 10 ]; then
    step_rc=2
    record "$name" SKIP 0 "out of time budget (${budget}s)"
    return 2
  fi
  printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >>"$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  step_rc=$?
  step_s=$((SECONDS - start))
  return 0
}

# judge NAME LOG DETAIL: records the last run_step by its exit code (77: no GPU, skipped).
judge() {
  local name="$1" log="$2" detail="$3"
  case "$step_rc" in
    0) record "$name" PASS "$step_s" "$detail" ;;
    77) record "$name" SKIP "$step_s" "skipped: no GPU" ;;
    124 | 137) record "$name" FAIL "$step_s" "timed out; see $(basename "$log")" ;;
    *) record "$name" FAIL "$step_s" "exit $step_rc; ${detail:+$detail; }see $(basename "$log")" ;;
  esac
}

# ---- the GPU ----
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >>"$setup_log" 2>&1 &&
   nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  have_gpu=1
  record "gpu" PASS 0 "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)"
else
  echo "nvidia-smi: no GPU or no driver" >>"$setup_log"
  record "gpu" SKIP 0 "skipped: no GPU (the GPU steps are skipped)"
fi

# ---- dependencies ----
arch=x86_64-linux-gnu

# system_has_deps: the build's own configure step finds everything it needs on the system
# (mpicc, the headers and CMake packages of OpenMPI, yaml-cpp, fmt, CLI11, nlohmann-json,
# OpenBLAS and Catch2 v2 or v3), whichever packages or prefixes provide them. Its log goes to
# setup.log.
system_has_deps() {
  command -v mpicc >/dev/null 2>&1 || return 1
  local probe="$out/.configure-probe" rc=0
  rm -rf "$probe"
  printf '\n===== dependencies: does the system have what the build needs?\n' >>"$setup_log"
  cmake -S "$root" -B "$probe" "${cmake_args[@]}" >>"$setup_log" 2>&1 || rc=$?
  rm -rf "$probe"
  return "$rc"
}

# extract_deb DEB DIR: dpkg -x, or ar + tar where dpkg is missing (a non-Debian system).
extract_deb() {
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local member
  member="$(ar t "$1" | grep '^data\.tar')" || return 1
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
    *.zst) ar p "$1" "$member" | tar --zstd -x -C "$2" ;;
    *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
    *) ar p "$1" "$member" | tar -x -C "$2" ;;
  esac
}

# unpack_bundle: the .debs into $unpack_dir, then what dpkg's scripts would have done: the
# alternatives links (mpicc, mpirun) and the shared-library name links (ldconfig -n).
unpack_bundle() {
  local stamp deb link target
  stamp="$(cd "$bundle" && stat -c '%n %s' ./*.deb | md5sum | cut -d' ' -f1)"
  if [ -f "$unpack_dir/.strata-bundle" ] && [ "$(cat "$unpack_dir/.strata-bundle")" = "$stamp" ]; then
    echo "bundle already unpacked in $unpack_dir"
    return 0
  fi
  rm -rf "$unpack_dir" && mkdir -p "$unpack_dir" || return 1
  for deb in "$bundle"/*.deb; do
    echo "unpacking $(basename "$deb")"
    extract_deb "$deb" "$unpack_dir" || { echo "cannot unpack $deb"; return 1; }
  done
  # A link to an absolute path would leave the prefix for the system's copy (or nothing).
  while IFS= read -r link; do
    target="$(readlink "$link")"
    ln -sfn "$unpack_dir$target" "$link"
  done < <(find "$unpack_dir" -type l -lname '/*')
  for tool in mpicc mpicxx mpic++ mpirun mpiexec; do
    [ -e "$unpack_dir/usr/bin/$tool.openmpi" ] && ln -sfn "$tool.openmpi" "$unpack_dir/usr/bin/$tool"
  done
  local ldconfig_bin
  ldconfig_bin="$(command -v ldconfig || echo /sbin/ldconfig)"
  [ -x "$ldconfig_bin" ] && "$ldconfig_bin" -n "$unpack_dir/usr/lib/libpsm1" "$unpack_dir/usr/lib/$arch/openblas-pthread"
  echo "$stamp" >"$unpack_dir/.strata-bundle"
}

# use_prefix DIR: point CMake, the loader, OpenMPI and PMIx at packages unpacked under DIR.
use_prefix() {
  local p="$1" lib="$1/usr/lib/$arch"
  export LD_LIBRARY_PATH="$lib:$p/lib/$arch:$lib/openblas-pthread:$lib/openmpi/lib:$lib/pmix2/lib:$p/usr/lib/libpsm1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$p/usr/bin:$PATH"
  # Debian configures OpenMPI with prefix /usr but libdir, pkglibdir and sysconfdir outside it,
  # so OPAL_PREFIX alone does not relocate them; each is named.
  export OPAL_PREFIX="$p/usr" OPAL_EXEC_PREFIX="$p/usr" OPAL_BINDIR="$p/usr/bin"
  export OPAL_LIBDIR="$lib/openmpi/lib" OPAL_PKGLIBDIR="$lib/openmpi/lib/openmpi3"
  export OPAL_INCLUDEDIR="$lib/openmpi/include" OPAL_PKGINCLUDEDIR="$lib/openmpi/include/openmpi"
  export OPAL_DATAROOTDIR="$p/usr/share" OPAL_DATADIR="$p/usr/share" OPAL_PKGDATADIR="$p/usr/share/openmpi"
  export OPAL_SYSCONFDIR="$p/etc/openmpi"  # Debian's MCA defaults (no UCX, no OFI) live there
  # PMIx (OpenMPI's runtime) has its own install tree, relocated the same way.
  export PMIX_PREFIX="$lib/pmix2" PMIX_EXEC_PREFIX="$lib/pmix2" PMIX_LIBDIR="$lib/pmix2/lib"
  export PMIX_PKGLIBDIR="$lib/pmix2/lib/pmix" PMIX_DATAROOTDIR="$lib/pmix2/share"
  export PMIX_DATADIR="$lib/pmix2/share" PMIX_PKGDATADIR="$lib/pmix2/share/pmix"
  cmake_args+=(
    "-DCMAKE_PREFIX_PATH=$p/usr;$lib;$lib/cmake"
    "-DCMAKE_LIBRARY_PATH=$lib/openblas-pthread;$lib"
    "-DMPI_C_COMPILER=$p/usr/bin/mpicc"
    "-DMPIEXEC_EXECUTABLE=$p/usr/bin/mpirun"
    "-DSTRATA_MPIRUN=$p/usr/bin/mpirun"
    "-DSTRATA_CBLAS_INCLUDE=$p/usr/include/$arch/openblas-pthread"
  )
}

# No -Werror here: the GPU machine's compiler may warn where Debian's does not, and that must
# not stop the GPU checks (warnings are errors in the Debian build and in CI).
# The CPU emulator of the CUDA code is CI's stand-in for this machine: not built here.
cmake_args=(-G Ninja -DSTRATA_CUDA=ON -DSTRATA_EMULATOR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)
start=$SECONDS
if [ -n "${STRATA_DEPS_PREFIX:-}" ]; then
  prefix="$(cd "$STRATA_DEPS_PREFIX" && pwd)"
  use_prefix "$prefix"
  record "dependencies" PASS 0 "prefix $prefix (STRATA_DEPS_PREFIX)"
elif compgen -G "$bundle/*.deb" >/dev/null && ! system_has_deps; then
  printf '\n===== dependencies: unpacking %s into %s\n' "$bundle" "$unpack_dir" >>"$setup_log"
  if unpack_bundle >>"$setup_log" 2>&1; then
    use_prefix "$unpack_dir"
    record "dependencies" PASS $((SECONDS - start)) \
      "bundle: $(compgen -G "$bundle/*.deb" | wc -l) packages unpacked into $unpack_dir"
  else
    record "dependencies" FAIL $((SECONDS - start)) "unpacking the bundle failed; see setup.log"
    finish
  fi
elif command -v mpicc >/dev/null 2>&1; then  # no bundle, or the system passed the probe
  record "dependencies" PASS 0 "the system's packages"
else
  record "dependencies" FAIL 0 "no OpenMPI etc. and no bundle in $bundle: run scripts/gpu_bundle.sh on Debian first"
  finish
fi
# One node only: mpirun and singleton runs start their processes directly (no ssh/rsh needed;
# the GPU machine has neither). Containers often forbid cross-memory attach.
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
{
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}"
  env | grep -E '^(OPAL|PMIX|OMPI)_' | sort
  echo "mpicc: $(mpicc --showme 2>&1)"
} >>"$setup_log"

# ---- configure and build ----
run_step "configure" "$setup_log" 180 cmake -S "$root" -B "$build" "${cmake_args[@]}" || finish
judge "configure" "$setup_log" "$(grep -m1 'CUDA backend' "$setup_log" | sed 's/^-- strata: //')"
[ "$step_rc" -eq 0 ] || finish
run_step "build" "$build_log" 480 ninja -C "$build" -j "$jobs" || finish
judge "build" "$build_log" "all targets, -j $jobs, in $build"
[ "$step_rc" -eq 0 ] || finish

strata="$build/bin/strata"
missing="$(ldd "$strata" "$build/tests/gpu/gpu_ops" 2>&1 | grep 'not found' | sort -u | awk '{print $1}' | paste -sd' ')"
if [ -n "$missing" ]; then
  record "shared libraries" FAIL 0 "not found: $missing"
else
  record "shared libraries" PASS 0 "every library of strata and gpu_ops resolves"
fi

# run_benchmark MODELS: scripts/bench_gpt2.sh into bench.log; one row per model, and the table
# (with the per-kernel times) printed after the summary.
run_benchmark() {
  if [ "$have_gpu" -eq 0 ]; then
    record "benchmark" SKIP 0 "skipped: no GPU"
    return
  fi
  run_step "benchmark ($1)" "$bench_log" 480 env STRATA_BUILD_DIR="$build" BENCH_MODELS="$1" \
    "$root/scripts/bench_gpt2.sh" "$scratch/bench" || return
  local rows row
  rows="$(grep '^GPT-2' "$bench_log" | sed 's/  */ /g')"
  if [ -z "$rows" ]; then
    if [ "$step_rc" -eq 0 ]; then
      record "benchmark ($1)" FAIL "$step_s" "no result rows; see bench.log"
    else
      judge "benchmark ($1)" "$bench_log" "no result rows"
    fi
  fi
  # A row whose strata cell holds words instead of figures is a failed strata run.
  while IFS= read -r row; do
    [ -n "$row" ] || continue
    if grep -q '| strata [a-z]' <<<"$row"; then
      record "${row%%|*}" FAIL "$step_s" "${row#*|}"
    else
      record "${row%%|*}" PASS "$step_s" "${row#*|}"
    fi
  done <<<"$rows"
  bench_table="$(sed -n '/^strata vs PyTorch/,$p' "$bench_log")"
}
bench_table=""

# run_sanitizer GPU_OPS_RC: memcheck on every GPU op test, racecheck on attention, synccheck on
# the layers; skipped without a GPU (GPU_OPS_RC 77: the op tests found none).
run_sanitizer() {
  if [ "$have_gpu" -eq 0 ] || [ "$1" -eq 77 ]; then
    record "compute-sanitizer" SKIP 0 "skipped: no GPU"
    return
  fi
  if [ "${STRATA_SKIP_SANITIZER:-0}" = 1 ] || ! command -v compute-sanitizer >/dev/null 2>&1; then
    record "compute-sanitizer" SKIP 0 "skipped: STRATA_SKIP_SANITIZER=1 or not installed"
    return
  fi
  local gpu_ops="$build/tests/gpu/gpu_ops"
  run_step "memcheck (gpu op tests)" "$tests_log" 180 \
    compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$gpu_ops" &&
    judge "memcheck (gpu op tests)" "$tests_log" "$(grep 'ERROR SUMMARY' "$tests_log" | tail -n 1)"
  run_step "racecheck (attention)" "$tests_log" 120 \
    compute-sanitizer --tool racecheck --error-exitcode 3 "$gpu_ops" "gpu: attention with generic head dims*" &&
    judge "racecheck (attention)" "$tests_log" "$(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$tests_log" | tail -n 1)"
  run_step "synccheck (layers)" "$tests_log" 90 \
    compute-sanitizer --tool synccheck --error-exitcode 3 "$gpu_ops" \
    "gpu: layernorm*" "gpu: softmax cross-entropy*" "gpu: bias_backward*" &&
    judge "synccheck (layers)" "$tests_log" "$(grep 'ERROR SUMMARY' "$tests_log" | tail -n 1)"
}
if [ "$mode" = --bench ]; then
  run_benchmark "${BENCH_MODELS:-124m 1558m}"
  print_table
  [ -n "$bench_table" ] && printf '\n%s\n' "$bench_table" | tee -a "$summary"
  [ "$failed" -eq 0 ]
  exit
fi
if [ "$mode" = --sanitizer ]; then
  run_sanitizer 0
  finish
fi

# ---- tests ----
run_step "unit tests (ctest -L unit)" "$tests_log" 180 \
  ctest --test-dir "$build" -L unit -j "$jobs" --timeout 120 --output-on-failure
judge "unit tests (ctest -L unit)" "$tests_log" "$(grep -E 'tests passed, [0-9]+ tests failed' "$tests_log" | tail -n 1)"
run_step "gpu op tests" "$tests_log" 240 "$build/tests/gpu/gpu_ops" --durations yes
judge "gpu op tests" "$tests_log" "$(grep -E '^(All tests passed|test cases:)' "$tests_log" | tail -n 1)"
gpu_ops_rc="$step_rc"
# The 16-bit comparisons nearest their ulp bounds (tests/gpu/ops/tolerances.h), for the record.
echo "== 16-bit outputs nearest their bounds (worst/bound, then the test's line):"
awk -F'worst |[(]bound |[)]$' '/^ulps: / && $3 > 0 { printf "%.2f  %s\n", $2 / $3, $0 }' "$tests_log" |
  sort -rn | head -n 8
run_step "gpu training tests" "$tests_log" 420 bash "$root/tests/gpu/test_cuda_train.sh" "$strata" "$root"
judge "gpu training tests" "$tests_log" "$(grep -E 'max relative loss difference' "$tests_log" | sed -n '1p;2p' |
  sed 's/: max relative loss difference/:/' | paste -sd';')"

# ---- smoke runs: info, one CPU rank, two ranks (DP = 2) ----
run_step "strata info" "$smoke_log" 60 "$strata" info
judge "strata info" "$smoke_log" "$(grep -m1 -iE 'world|rank' "$smoke_log" | cut -c1-80)"

data="$scratch/data"
mkdir -p "$data"
for i in $(seq 1 400); do
  echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times and rests."
done >"$data/corpus.txt"
cat >"$scratch/smoke.yaml" <<EOF
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 1
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
gradient_clipping: 1.0
steps_per_print: 5
model: {n_layer: 2, n_head: 2, d_model: 64, vocab_size: 256, seq_len: 64}
data: {train: "$data/train_*.bin", val: "$data/val_*.bin"}
train: {iters: 30, eval_interval: 15, eval_iters: 2, seed: 7}
device: cpu
EOF

# loss_trend METRICS: "loss A -> B" over the train records, or nothing when it did not drop.
loss_trend() {
  local losses first last
  losses="$(grep '"type":"train"' "$1" 2>/dev/null | grep -o '"loss":[-0-9.e+]*' | cut -d: -f2)"
  first="$(head -n 1 <<<"$losses")" last="$(tail -n 1 <<<"$losses")"
  [ -n "$first" ] && awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a)}' &&
    printf 'loss %.3f -> %.3f over %s steps' "$first" "$last" "$(wc -l <<<"$losses")"
}

# smoke_train NAME METRICS CMD...: a training run must finish and lower the loss.
smoke_train() {
  local name="$1" metrics="$2" trend
  shift 2
  run_step "$name" "$smoke_log" 150 "$@" --config "$scratch/smoke.yaml" \
    --set "logging.metrics_file=$metrics" || return
  trend="$(loss_trend "$metrics")"
  if [ "$step_rc" -eq 0 ] && [ -z "$trend" ]; then
    record "$name" FAIL "$step_s" "the loss did not drop (see smoke.log)"
  else
    judge "$name" "$smoke_log" "$trend"
  fi
}

run_step "data encode" "$smoke_log" 60 "$strata" data encode --input "$data/corpus.txt" \
  --out "$data" --val-fraction 0.1
if [ "$step_rc" -eq 0 ]; then
  smoke_train "cpu train (1 rank)" "$scratch/train_1.jsonl" "$strata" train
  mpi_flags=(--oversubscribe)
  [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
  smoke_train "cpu train (mpirun -np 2)" "$scratch/train_2.jsonl" \
    env OPENBLAS_NUM_THREADS=1 mpirun "${mpi_flags[@]}" -np 2 "$strata" train
else
  judge "data encode" "$smoke_log" ""
fi

# ---- benchmark: GPT-2 124M, strata against PyTorch, and the per-kernel table ----
if [ "$gpu_ops_rc" -eq 77 ]; then
  record "benchmark" SKIP 0 "skipped: no GPU"
else
  run_benchmark 124m
fi

# ---- compute-sanitizer (last: the slowest, given what is left of the budget) ----
run_sanitizer "$gpu_ops_rc"

finish
