#!/usr/bin/env bash
# communication_data_type (DeepSpeed's key): gradients reduced in bf16 or fp16 over 4 ranks at
# every ZeRO stage (GAS 2). The data-parallel reductions' payload is exactly half the fp32 run's
# (the all-gathers of parameters are unchanged), the memory record's workspace grows by the
# 16-bit twins (2 bytes per element of the flat gradient and of the shard at stages 0-2), and the
# losses follow the fp32 run within 16-bit rounding (1e-3 relative over 4 steps) without
# matching it bit for bit (the rounding is real). Every memory record equals the start-up
# check's estimate.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
run() {
  local name="$1"; shift
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 4, seed: 3}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" train --config "$WORK/$name.yaml" "$@"
}
for stage in 0 1 2 3; do
  z=(--set zero_optimization.stage=$stage --set zero_optimization.reduce_bucket_size=4000)
  run "fp32_z$stage" "${z[@]}"
  run "bf16_z$stage" "${z[@]}" --set communication_data_type=bf16
  run "fp16_z$stage" "${z[@]}" --set communication_data_type=FP16
done
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records, losses
work = sys.argv[1]
bad = []
for stage in range(4):
    base = f"{work}/fp32_z{stage}.jsonl"
    ref = losses(base)
    for dtype in ("bf16", "fp16"):
        path = f"{work}/{dtype}_z{stage}.jsonl"
        got = losses(path)
        worst = max(abs(got[s] / ref[s] - 1) for s in ref)
        if worst > 1e-3 or got == ref:
            bad.append(f"ZeRO {stage} {dtype}: worst relative loss difference {worst:.2e}")
        for a, b in zip(records(path, "train"), records(base, "train")):
            for op in ("all_reduce", "reduce_scatter", "all_gather"):
                key = f"dp.{op}"
                want = b["comm"].get(key, 0) // (1 if op == "all_gather" else 2)
                if a["comm"].get(key, 0) != want:
                    bad.append(f"ZeRO {stage} {dtype} step {a['step']}: {key} {a['comm'].get(key)} B, expected {want}")
        m, m0 = (records(p, "memory")[0]["ranks"][0] for p in (path, base))
        est = records(path, "memory")[0]["estimate"]
        for key, value in est.items():
            if m[key] != value:
                bad.append(f"ZeRO {stage} {dtype}: {key} {m[key]} B, estimated {value} B")
        psi = records(base, "memory")[0]["n_params"]
        extra = m["workspace"] - m0["workspace"]
        if stage < 3:
            twins = 2 * (psi + psi / 4) if stage > 0 else 2 * psi
            if abs(extra / twins - 1) > 0.01:
                bad.append(f"ZeRO {stage} {dtype}: workspace +{extra} B, expected about {twins:.0f}")
        elif extra <= 0:
            bad.append(f"ZeRO 3 {dtype}: no twins in the workspace")
        print(f"ZeRO {stage} {dtype}: losses within {worst:.1e} of fp32; reductions "
              f"{dict((k, v) for k, v in records(path, 'train')[0]['comm'].items() if k.startswith('dp.'))}; "
              f"workspace +{extra} B")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
