#!/usr/bin/env bash
# Activation memory per rank follows Korthikanti et al.'s accounting ("Reducing Activation
# Recomputation in Large Transformer Models"), adapted to strata's GPT-2: no dropout (so no
# masks), flash attention (the a·s² scores and softmax are never stored: each head keeps one
# fp32 log-sum-exp per token instead), and fp32 mean and rstd kept per token for each layernorm.
# The JSONL memory record's per-layer, shared (recompute scratch) and total activation bytes are
# compared exactly with the formulas for recompute none / selective / full, with and without
# sequence parallelism, at TP = 2 and 4, and every term of the record equals the start-up
# check's estimate (made before allocation). Per layer, with N = b·s token rows, h = d_model, a heads,
# t = TP and w bytes per stored element (4 here, fp32; 2 under bf16/fp16):
#   none, no SP:   N·(w·h·(4 + 12/t) + 16 + 4a/t)     [Korthikanti: s·b·h·(10 + 24/t + 5as/(ht))]
#   none, SP:      N/t·(16·w·h + 16 + 4a)             [s·b·h·34/t + 5as²b/t]
#   selective:     less N·(w·h + 4a)/t per layer (the attention output and its log-sum-exp, which
#                  backward recomputes), kept once as shared scratch
#   full:          N·w·h per layer (the block input; /t under SP), one block's worth shared
# (w·h·4: the layernorm inputs and outputs, Korthikanti's 10 less the two dropout masks;
# 12/t: q, k, v, the attention output and the MLP's two 4h-wide activations.)
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
for tp in 2 4; do
  for sp in false true; do
    for recompute in none selective full; do
      name="tp${tp}_${sp}_$recompute"
      write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 2, seed: 1}" \
        "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
      run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$tp" "$STRATA" train --config "$WORK/$name.yaml" \
        --set model.n_head=4 --set train_micro_batch_size_per_gpu=8 --set gradient_accumulation_steps=1 \
        --set parallelism.tensor_model_parallel_size=$tp --set parallelism.sequence_parallel=$sp \
        --set model.recompute=$recompute
    done
  done
done
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import records
work = sys.argv[1]
B, T, h, a, L, V = 8, 32, 32, 4, 2, 256    # micro-batch, seq_len, d_model, heads, layers, vocab
w, f32 = 4, 4
N = B * T
def formulas(t, sp, recompute):
    local = N // t if sp else N
    residual = local * w * h                                            # a block's input
    block = local * (3 * w * h + 4 * f32) + N * (12 * w * h + a * f32) // t  # the rest it keeps
    attention_core = N * (w * h + a * f32) // t                         # output and log-sum-exp
    if recompute == "none": per_layer, shared = residual + block, 0
    elif recompute == "selective": per_layer, shared = residual + block - attention_core, attention_core
    else: per_layer, shared = residual, block
    vocab = V  # padded to 128·t: 256 at TP 2, 512 at TP 4
    vocab = (V + 128 * t - 1) // (128 * t) * (128 * t)
    full = N * h * w
    other = (2 * N * 4                       # token and target ids
             + residual                      # the last block's output
             + full                          # a row-parallel layer's product
             + local * w * h + 2 * local * f32   # ln_f output and statistics
             + N * vocab // t * w + N * f32  # logits of this vocabulary slice, losses
             + 3 * N * f32 + vocab * w       # the loss's row maxima and sums, one gathered row
             + residual                      # d(residual)
             + full + N * 4 * h // t * w)    # backward scratch
    if sp: other += 3 * full                 # gathered layernorm output, ln_f output, gradient
    return per_layer, shared, L * per_layer + shared + other
bad = []
print(f"{'layout':>24} {'per layer':>19} {'shared':>17} {'total':>21}   (measured / formula, bytes)")
for t in (2, 4):
    per = {}
    for sp in (False, True):
        for recompute in ("none", "selective", "full"):
            name = f"tp{t}_{str(sp).lower()}_{recompute}"
            mem = records(f"{work}/{name}.jsonl", "memory")[0]
            r = mem["ranks"][0]
            got = (r["activations_per_layer"], r["activations_shared"], r["activations"])
            want = formulas(t, sp, recompute)
            per[(sp, recompute)] = got[0]
            print(f"{f'TP {t} SP {sp} {recompute}':>24} {got[0]:>9}/{want[0]:<9} {got[1]:>8}/{want[1]:<8} "
                  f"{got[2]:>10}/{want[2]:<10}")
            if got != want: bad.append(f"{name}: measured {got}, formula {want}")
            if any((x["activations"], x["activations_per_layer"]) != (got[2], got[0]) for x in mem["ranks"]):
                bad.append(f"{name}: ranks differ: {mem['ranks']}")
            for key, value in mem["estimate"].items():  # the start-up check's, before allocation
                if r[key] != value: bad.append(f"{name}: {key} {r[key]} B, estimated {value} B")
    drop = per[(False, "none")] / per[(True, "none")]
    print(f"TP {t}: SP keeps 1/{drop:.2f} of the per-layer activations")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
echo ok
