#!/usr/bin/env bash
# The start-up memory record: per rank, bytes of parameters, gradients and Adam state follow the
# fp32 formulas for Ψ parameters over p ranks (padding aside, ≤ 1%): params 4Ψ (ZeRO 3: 4Ψ/p),
# grads 4Ψ (ZeRO 2-3: 4Ψ/p), Adam m + v 8Ψ (ZeRO 1-3: 8Ψ/p). Transient buffers are reported
# apart as workspace (stage 2's full-size gradient scratch, stage 3's gathered layer groups).
# The record's every term equals the start-up check's estimate, made before allocating.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
np=4
for stage in 0 1 2 3; do
  write_small_config "$WORK/z$stage.yaml" "$WORK/data" "train: {iters: 1, seed: 1}" \
    "logging: {metrics_file: \"$WORK/z$stage.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np $np "$STRATA" train --config "$WORK/z$stage.yaml" \
    --set zero_optimization.stage=$stage
  expect_contains "$OUT" "memory per rank (ZeRO stage $stage, DP $np, TP 1, recompute none)"
done
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" $np <<'PY'
import sys
from equivalence import records
work, p = sys.argv[1], int(sys.argv[2])
bad = []
for stage in range(4):
    mem = records(f"{work}/z{stage}.jsonl", "memory")[0]
    psi = mem["n_params"]
    want = {"params": 4 * psi / (p if stage == 3 else 1), "grads": 4 * psi / (p if stage >= 2 else 1),
            "optimizer": 8 * psi / (p if stage >= 1 else 1)}
    assert [r["rank"] for r in mem["ranks"]] == list(range(p))
    for r in mem["ranks"]:
        for key, value in want.items():
            if abs(r[key] / value - 1) > 0.01:
                bad.append(f"ZeRO {stage} rank {r['rank']}: {key} {r[key]} B, formula {value:.0f} B")
    r0 = mem["ranks"][0]
    for key, value in mem["estimate"].items():
        if r0[key] != value:
            bad.append(f"ZeRO {stage}: {key} {r0[key]} B, estimated {value} B")
    print(f"ZeRO {stage}: params {r0['params']} grads {r0['grads']} optimizer {r0['optimizer']} "
          f"workspace {r0['workspace']} (Ψ = {psi})")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
