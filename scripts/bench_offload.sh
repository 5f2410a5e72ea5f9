#!/usr/bin/env bash
# Offload benchmark: the host AdamW that updates offloaded optimizer state (`strata adam-check`:
# checked bit for bit, then timed per instruction set and thread count beside the node's
# streaming bandwidth) against torch.optim.AdamW (foreach, and fused where the installed PyTorch
# has it on the CPU) over the same number of parameters, on the same machine in the same run.
# With BENCH_NVME_PATH, also the offload file's write and read rates there (what nvme offload
# moves its state with) against the disk's own sequential rates measured by dd with O_DIRECT in
# the same run. Prints each figure and the ratios; the figures also go to OUTDIR/bench_offload.json.
#
# Usage: scripts/bench_offload.sh OUTDIR
# Environment:
#   STRATA_BUILD_DIR  build folder with bin/strata (default build)
#   BENCH_PARAMS      parameters of the timed step (default 50000000)
#   BENCH_THREADS     threads (default: every core)
#   BENCH_TENSORS     tensors the parameters are split into for torch (default 100)
#   STRATA_PYTHON3    python with torch (default: the first of python3, /usr/bin/python3 that has it)
#   BENCH_NVME_PATH   a directory on the disk to time (default: none)
#   BENCH_NVME_BYTES  bytes written and read there (default 2 GiB)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/bench_offload.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
strata="${STRATA_BUILD_DIR:-$root/build}/bin/strata"
[ -x "$strata" ] || { echo "bench_offload: $strata not found; build first (scripts/build.sh)"; exit 2; }
params="${BENCH_PARAMS:-50000000}"
threads="${BENCH_THREADS:-$(nproc)}"
tensors="${BENCH_TENSORS:-100}"

nvme="${BENCH_NVME_PATH:-}"
nvme_bytes="${BENCH_NVME_BYTES:-2147483648}"
nvme_flags=()
[ -n "$nvme" ] && nvme_flags=(--nvme-path "$nvme" --nvme-bytes "$nvme_bytes")
echo "== strata host AdamW: $params parameters, $threads threads${nvme:+; offload file in $nvme}"
"$strata" adam-check --params "$params" --threads "$threads" --rounds 5 "${nvme_flags[@]}" | tee "$out/adam_check.log"
strata_json="$(tail -n 1 "$out/adam_check.log")"

dd_json='{}'
if [ -n "$nvme" ]; then
  # The disk's own sequential rates: dd with O_DIRECT, 12 MiB blocks, the same bytes.
  count=$(( nvme_bytes / (12 * 1024 * 1024) ))
  file="$nvme/bench_offload_dd.$$"
  rate() { sed -n 's/.* copied, \([0-9.e+-]*\) s, .*/\1/p' | tail -n 1; }
  w=$(dd if=/dev/zero of="$file" bs=12M count="$count" oflag=direct conv=fsync 2>&1 | rate)
  r=$(dd if="$file" of=/dev/null bs=12M count="$count" iflag=direct 2>&1 | rate)
  rm -f "$file"
  dd_json=$(python3 -c "import json,sys; b=$count*12*2**20; print(json.dumps({'dd_write_gbs': b/float('$w')/1e9, 'dd_read_gbs': b/float('$r')/1e9}))")
  echo "== dd O_DIRECT in $nvme: $dd_json"
fi

python=""
for candidate in ${STRATA_PYTHON3:-} python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import torch" >/dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
torch_json='{"error": "skipped: no python with torch"}'
if [ -n "$python" ]; then
  echo "== torch.optim.AdamW ($python): $params parameters in $tensors tensors, $threads threads"
  torch_json="$("$python" - "$params" "$threads" "$tensors" <<'PY'
import json, sys, time
import torch
n, threads, tensors = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
size = n // tensors
params = [torch.randn(size).requires_grad_() for _ in range(tensors)]
for p in params:
    p.grad = torch.randn(size) * 1e-2
result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "params": size * tensors}
variants = {"foreach": {"foreach": True}}
try:
    torch.optim.AdamW(params, lr=1e-4, fused=True).step()
    variants["fused"] = {"fused": True}
except Exception as e:  # fused AdamW on the CPU came with later PyTorch releases
    result["fused_error"] = str(e).splitlines()[0]
for name, kwargs in variants.items():
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kwargs)
    opt.step()
    best = 1e30
    for _ in range(5):
        t = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t)
    result[name + "_params_per_s"] = size * tensors / best
    print(f"torch AdamW {name}: {best * 1e3:.3f} ms/step  {size * tensors / best / 1e6:.1f} M params/s", file=sys.stderr)
print(json.dumps(result))
PY
)"
fi

"${python:-python3}" - "$strata_json" "$torch_json" "$out/bench_offload.json" "$dd_json" <<'PY'
import json, sys
s, t, d = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[4])
best = max(v for k, v in s.items() if k.endswith("_params_per_s"))
floor = s["stream_gbs"] * 1e9 / 28
print(f"strata host AdamW, best: {best / 1e6:.1f} M params/s = {best * 28 / 1e9:.1f} GB/s, "
      f"{100 * best / floor:.0f}% of the streaming floor ({floor / 1e6:.1f} M params/s at {s['stream_gbs']:.1f} GB/s)")
for name in ("foreach", "fused"):
    key = name + "_params_per_s"
    if key in t:
        print(f"  vs torch {t['torch']} AdamW {name} ({t['threads']} threads): {best / t[key]:.2f}x")
for way in ("write", "read"):
    if f"dd_{way}_gbs" in d:
        got, disk = s[f"nvme_{way}_gbs"], d[f"dd_{way}_gbs"]
        print(f"offload file {way}: {got:.2f} GB/s = {100 * got / disk:.0f}% of the disk's sequential {way} "
              f"(dd, O_DIRECT: {disk:.2f} GB/s)")
json.dump({"strata": s, "torch": t, "disk": d}, open(sys.argv[3], "w"), indent=1)
PY
