#!/usr/bin/env bash
# The tensor-parallel communicator's traffic per step (the JSONL "comm" payloads and
# "comm_calls" counts) equals the analytic volume exactly, for TP = 2 and 4, with and without
# sequence parallelism. Per micro-batch of N = B·T token rows, with P = N·C·4 bytes (fp32) and L
# layers:
#   without SP (all-reduces): forward the embedding's and two per layer (the attention's and the
#     MLP's row-parallel outputs), backward the LM head input's and two per layer (the
#     column-parallel inputs' gradients): (4L + 2) of P; and the vocab-parallel loss's row
#     maxima (N floats, Max) and exponential sums with the target logits (2N floats, Sum).
#   with SP the same sums move as reduce-scatters and all-gathers of P: forward the embedding's
#     and 2 per layer reduce-scattered, 2 per layer and ln_f's output gathered; backward the LM
#     head input's and 2 per layer reduce-scattered, 2 per layer (the output gradients) and the
#     embedding's gradient gathered, plus 2 per layer gathered again (SP keeps only this rank's
#     rows of each layernorm output; the weight gradient needs them all, as in Megatron-LM);
#     the loss's two all-reduces as without SP; and once per step (after the last micro-batch)
#     an all-reduce of each layernorm's weight and bias gradients (2C floats; 2L + 1 of them).
# In ring volume per rank (all-reduce 2(p−1)/p, the others (p−1)/p of the payload), SP moves the
# same bytes as the all-reduces it replaces, plus the 2L re-gathers.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
for tp in 2 4; do
  for sp in false true; do
    name="tp${tp}_sp_$sp"
    write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 3, seed: 1}" \
      "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
    run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$tp" "$STRATA" train --config "$WORK/$name.yaml" \
      --set model.n_head=4 --set parallelism.tensor_model_parallel_size=$tp --set parallelism.sequence_parallel=$sp
  done
done
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records
work = sys.argv[1]
B, T, C, L, GAS = 4, 32, 32, 2, 2      # write_small_config's model and batch
N = B * T
P = N * C * 4
bad = []
for tp in (2, 4):
    for sp in (False, True):
        if sp:
            expected = {
                "reduce_scatter": (GAS * (4 * L + 2), GAS * (4 * L + 2) * P),
                "all_gather": (GAS * (6 * L + 2), GAS * (6 * L + 2) * P),
                "all_reduce": (GAS * 2 + 2 * L + 1, GAS * 3 * N * 4 + (2 * L + 1) * 2 * C * 4),
            }
        else:
            expected = {"all_reduce": (GAS * (4 * L + 4), GAS * ((4 * L + 2) * P + 3 * N * 4))}
        ring = sum((2 if op == "all_reduce" else 1) * (tp - 1) / tp * b for op, (_, b) in expected.items())
        for r in records(f"{work}/tp{tp}_sp_{str(sp).lower()}.jsonl", "train"):
            got = {k[3:]: (r["comm_calls"][k], r["comm"][k]) for k in r["comm"] if k.startswith("tp.")}
            if r["step"] == 1:
                print(f"TP {tp} SP {sp}: measured {got}")
                print(f"{'':14}analytic {expected}; ring volume {ring:.0f} B/rank/step")
            if got != expected:
                bad.append(f"TP {tp} SP {sp} step {r['step']}: {got} != {expected}")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
