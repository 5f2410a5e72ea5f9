#!/usr/bin/env bash
# ZeRO 3's bounds on what stays gathered (DeepSpeed's stage3_* keys), over 4 ranks with GAS 2:
# - stage3_param_persistence_threshold 4096 keeps whole every block and ln_f (their largest
#   parameter, c_fc's weight, has 4·C·C = 4096 elements; wte's 8192 keeps the embeddings
#   partitioned): the memory record's params grow by their 4·Ψ_whole bytes, and the per-step
#   all-gather payload shrinks by (2·GAS − 1)·4·Ψ_whole, since those groups are gathered once per
#   optimizer step instead of twice per micro-batch; stage3_model_persistence_threshold caps
#   Ψ_whole (one block and ln_f fit under 13000);
# - stage3_prefetch_bucket_size below every layer group (ln_f's 64 elements included), or
#   stage3_max_live_parameters below a block with its neighbour, leaves nothing to prefetch: one
#   slot of layer parameters instead of two in the workspace;
# and every run's losses equal the unbounded run's bit for bit, and every memory record equals the
# start-up check's estimate (made before allocation).
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

run() {
  local name="$1"; shift
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 3, seed: 2}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" train --config "$WORK/$name.yaml" \
    --set zero_optimization.stage=3 "$@"
}
run unbounded
run whole --set zero_optimization.stage3_param_persistence_threshold=4096
run capped --set zero_optimization.stage3_param_persistence_threshold=4096 \
  --set zero_optimization.stage3_model_persistence_threshold=13000
run prefetch --set zero_optimization.stage3_prefetch_bucket_size=50
run live --set zero_optimization.stage3_max_live_parameters=12000

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records, losses
work = sys.argv[1]
C, L, gas = 32, 2, 2
block = 12 * C * C + 13 * C          # one block's parameters (every size a multiple of 4: no padding)
ln_f = 2 * C
def memory(name):
    record = records(f"{work}/{name}.jsonl", "memory")[0]
    mine = record["ranks"][0]
    for key, value in record["estimate"].items():
        assert mine[key] == value, f"{name}: {key} {mine[key]} B, estimated {value} B"
    return mine
def gathered(name):
    return [r["comm"]["dp.all_gather"] for r in records(f"{work}/{name}.jsonl", "train")]
base = losses(f"{work}/unbounded.jsonl")
for name in ("whole", "capped", "prefetch", "live"):
    assert losses(f"{work}/{name}.jsonl") == base, f"{name}: losses differ from the unbounded run"
m0 = memory("unbounded")
for name, whole in (("whole", L * block + ln_f), ("capped", block + ln_f)):
    m = memory(name)
    assert m["params"] - m0["params"] == 4 * whole, f"{name}: params {m['params']} vs {m0['params']} + 4·{whole}"
    for a, b in zip(gathered(name), gathered("unbounded")):
        assert b - a == (2 * gas - 1) * 4 * whole, f"{name}: all-gather {a} B/step vs {b} − (2·GAS−1)·4·{whole}"
    print(f"{name}: {whole} elements kept whole; params +{m['params'] - m0['params']} B, "
          f"all-gather {gathered(name)[0]} B/step (unbounded {gathered('unbounded')[0]})")
for name in ("prefetch", "live"):
    m = memory(name)
    assert m0["workspace"] - m["workspace"] == 4 * block, f"{name}: workspace {m['workspace']} vs {m0['workspace']}"
    assert gathered(name) == gathered("unbounded"), f"{name}: the gathers' volume changed"
    print(f"{name}: one layer slot, workspace {m['workspace']} B (unbounded {m0['workspace']} B)")
PY
echo ok
