#!/usr/bin/env bash
# The DP communicator's traffic per step, from the JSONL "comm" payloads turned into ring
# volumes (all-reduce 2(p−1)/p·payload, reduce-scatter and all-gather (p−1)/p·payload), matches
# the analytic volume per rank per step for Ψ fp32 parameters within 1% (padding):
#   ZeRO 0-1: 2(p−1)/p·4Ψ; ZeRO 2: (GAS+1)(p−1)/p·4Ψ; ZeRO 3: 3·GAS·(p−1)/p·4Ψ
# and the DP communicator carries nothing else (scalars go on the world communicator).
# p = 3 makes the buffers need padding; several reduction buckets are used.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
for np in 3 4; do
  for stage in 0 1 2 3; do
    name="p${np}_z$stage"
    write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 3, seed: 1}" \
      "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
    run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
      --set zero_optimization.stage=$stage --set zero_optimization.reduce_bucket_size=5000 \
      --set zero_optimization.overlap_comm=true
  done
done
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records
work = sys.argv[1]
expected_ops = {0: {"all_reduce"}, 1: {"reduce_scatter", "all_gather"}, 2: {"reduce_scatter", "all_gather"},
                3: {"reduce_scatter", "all_gather"}}
bad = []
for p in (3, 4):
    for stage in range(4):
        path = f"{work}/p{p}_z{stage}.jsonl"
        psi = records(path, "memory")[0]["n_params"]
        steps = records(path, "train")
        assert len(steps) == 3
        gas = 2
        analytic = {0: 2, 1: 2, 2: gas + 1, 3: 3 * gas}[stage] * (p - 1) / p * psi * 4
        for r in steps:
            dp = {k[3:]: v for k, v in r["comm"].items() if k.startswith("dp.")}
            if set(dp) != expected_ops[stage]:
                bad.append(f"p {p} ZeRO {stage} step {r['step']}: dp ops {sorted(dp)}, expected {sorted(expected_ops[stage])}")
            ring = sum((2 if op == "all_reduce" else 1) * (p - 1) / p * b for op, b in dp.items())
            if r["step"] == 1:
                print(f"p {p} ZeRO {stage}: measured {ring:.0f} B/step/rank, analytic {analytic:.0f} "
                      f"({100 * (ring / analytic - 1):+.3f}%) {dp}")
            if abs(ring / analytic - 1) > 0.01:
                bad.append(f"p {p} ZeRO {stage} step {r['step']}: {ring:.0f} vs analytic {analytic:.0f}")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
