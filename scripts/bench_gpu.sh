#!/usr/bin/env bash
# Side-by-side GPU benchmarks at one shape: strata's per-kernel timings (bench_kernels, each op
# against its bytes/FLOPs floor) and a PyTorch GPT-2 training step (bench_pytorch_gpt2.py) on the
# same batch and sequence length. Logs go to OUTDIR; a summary is printed last.
# Usage: scripts/bench_gpu.sh OUTDIR [BATCH [SEQ]]
#   STRATA_BUILD_DIR  build folder holding tests/gpu/bench_kernels (default: build-gpu)
#   STRATA_BENCH_DTYPES  dtypes for bench_kernels (default: "bf16")
#   STRATA_PYTHON3    python with torch for the PyTorch peer (default: python3)
#   STRATA_HOST_LD_LIBRARY_PATH  when set, the library path python runs with (gpu_check.sh sets
#                     it: the unpacked Debian bundle is for strata, not for PyTorch)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/bench_gpu.sh OUTDIR [BATCH [SEQ]]}"
batch="${2:-16}"
seq="${3:-1024}"
build="${STRATA_BUILD_DIR:-$root/build-gpu}"
python="${STRATA_PYTHON3:-python3}"
mkdir -p "$out"
status=0

for dtype in ${STRATA_BENCH_DTYPES:-bf16}; do
  log="$out/bench_kernels_$dtype.log"
  if "$build/tests/gpu/bench_kernels" --batch "$batch" --seq "$seq" --dtype "$dtype" >"$log" 2>&1; then
    echo "bench_kernels ($dtype): $(grep '^TOTAL' "$log")"
  else
    echo "bench_kernels ($dtype): FAILED, see $log"
    status=1
  fi
done

log="$out/pytorch_gpt2.log"
python_env=()
if [ -n "${STRATA_HOST_LD_LIBRARY_PATH+set}" ]; then
  if [ -n "$STRATA_HOST_LD_LIBRARY_PATH" ]; then
    python_env=(env "LD_LIBRARY_PATH=$STRATA_HOST_LD_LIBRARY_PATH")
  else
    python_env=(env -u LD_LIBRARY_PATH)
  fi
fi
if "${python_env[@]}" "$python" -c "import torch" >/dev/null 2>&1; then
  if "${python_env[@]}" "$python" "$root/scripts/bench_pytorch_gpt2.py" --batch "$batch" --seq "$seq" >"$log" 2>&1; then
    echo "pytorch gpt2-124m: $(tail -n 1 "$log")"
  else
    echo "pytorch gpt2-124m: FAILED, see $log"
    status=1
  fi
else
  echo "pytorch gpt2-124m: skipped ($python has no torch)" | tee "$log"
fi
exit $status
