#!/usr/bin/env bash
# Checkpoints across tensor-parallel layouts, with no conversion step: a TP = 4 ZeRO-3 run saves
# at step 10 (each rank its slices as boxes of the global tensors: c_attn by heads, wte by
# vocabulary rows with TP's own padding); resuming it at TP = 2 × DP = 2 with ZeRO-1, and on one
# rank, continues the uninterrupted single-rank curve within 1e-5 relative. `strata export` of
# the same weights saved at TP = 1, 2 and 4 writes the same HuggingFace folder bit for bit, and
# the TP = 4 checkpoint's export holds exactly its pieces reassembled here. A SIGTERM to one
# rank of a TP = 2 run stops both after the same step with a checkpoint (exit 0), which resumes
# on one rank.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# run NAME NP TP GAS STAGE [--set ...]: up to step 20, global batch 8.
run() {
  local name="$1" np="$2" tp="$3" gas="$4" stage="$5"; shift 5
  write_small_config "$WORK/$name.yaml" "$WORK/data" "train: {iters: 20, seed: 9}" \
    "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set model.n_head=4 --set model.vocab_size=250 --set parallelism.tensor_model_parallel_size="$tp" \
    --set gradient_accumulation_steps="$gas" --set zero_optimization.stage="$stage" "$@"
}

run ref 1 1 2 0
run tp4 4 4 2 3 --set checkpoint.dir="$WORK/ckpt" --set checkpoint.save_interval=10
ckpt="$WORK/ckpt/step_00000010"
[ -f "$ckpt/manifest.json" ] || fail "no step-10 checkpoint"
run tp2_dp2 4 2 1 1 --set checkpoint.resume="$ckpt"
expect_contains "$OUT" "resumed from $ckpt at step 10"
run one 1 1 2 0 --set checkpoint.resume="$ckpt"

PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
from equivalence import Runs
runs = Runs(sys.argv[1], steps=20)
runs.check_resumed("tp4", "ref", 1, 1e-5)
for name in ("tp2_dp2", "one"):
    runs.check_resumed(name, "ref", 11, 1e-5)
runs.finish()
PY

# The same initial weights saved at TP = 1, 2, 4 export to identical folders.
for tp in 1 2 4; do
  write_small_config "$WORK/init$tp.yaml" "$WORK/data" "train: {iters: 1, seed: 9}" \
    "checkpoint: {dir: \"$WORK/init$tp\", save_initial: true}"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$tp" "$STRATA" train --config "$WORK/init$tp.yaml" \
    --set model.n_head=4 --set model.vocab_size=250 --set parallelism.tensor_model_parallel_size="$tp"
  run_expect 0 "$STRATA" export --checkpoint "$WORK/init$tp/step_00000000" --out "$WORK/export$tp"
done
cmp "$WORK/export1/model.safetensors" "$WORK/export2/model.safetensors" || fail "TP 2 export differs from TP 1"
cmp "$WORK/export1/model.safetensors" "$WORK/export4/model.safetensors" || fail "TP 4 export differs from TP 1"
cmp "$WORK/export1/config.json" "$WORK/export4/config.json" || fail "config.json differs"

# The TP = 4 checkpoint reassembled here from its pieces (boxes of views) equals its export.
run_expect 0 "$STRATA" export --checkpoint "$ckpt" --out "$WORK/export_tp4"
python3 - "$ckpt" "$WORK/export_tp4/model.safetensors" <<'PY'
import array, itertools, json, struct, sys
ckpt, exported = sys.argv[1], sys.argv[2]
def tensors(path):  # safetensors F32 tensors as flat arrays, with their shapes
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        out[k] = (array.array("f", data[a:b]), v["shape"])
    return out
def numel(shape):
    n = 1
    for d in shape: n *= d
    return n
manifest = json.load(open(f"{ckpt}/manifest.json"))
files, bad = {}, []
exp = tensors(exported)
for name, t in manifest["tensors"].items():
    if not name.startswith("model."): continue
    whole = [None] * numel(t["shape"])
    for p in t["pieces"]:
        if p["file"] not in files: files[p["file"]] = tensors(f"{ckpt}/{p['file']}")
        values = files[p["file"]][p["key"]][0]
        view = p.get("view", t["shape"])
        strides = [numel(view[d + 1:]) for d in range(len(view))]
        # The box's elements in row-major order, placed at their linear index in the view.
        for k, coords in enumerate(itertools.product(*(range(o, o + s) for o, s in zip(p["offset"], p["shape"])))):
            whole[sum(c * st for c, st in zip(coords, strides))] = values[k]
    hf = name[len("model."):]
    want, shape = exp[hf]
    got = whole[: len(want)]  # wte: the export drops the padding rows at the end
    if None in got or array.array("f", got) != want: bad.append(f"{hf}: reassembled pieces differ from the export")
print(f"{len(exp)} exported tensors equal the reassembled TP = 4 pieces" if not bad else "\n".join(bad))
sys.exit(1 if bad else 0)
PY

# SIGTERM to one rank of a TP = 2 run: both stop after the same step and save; one rank resumes.
write_small_config "$WORK/sig.yaml" "$WORK/data" "train: {iters: 100000, seed: 9}" \
  "checkpoint: {dir: \"$WORK/ckpt_sig\"}" "logging: {metrics_file: \"$WORK/sig.jsonl\"}"
stop_one_rank "$WORK/sig.log" "$WORK/sig.jsonl" "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" train \
  --config "$WORK/sig.yaml" --set model.n_head=4 --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.sequence_parallel=true
[ "$RC" -eq 0 ] || fail "SIGTERM to one TP rank: exit code $RC, expected 0"
[ -f "$WORK/ckpt_sig/latest" ] || fail "no checkpoint after the stop"
stopped=$(grep -o 'stopping after step [0-9]*' "$WORK/sig.log" | head -n 1 | grep -o '[0-9]*$')
[ -n "$stopped" ] || fail "stop not reported"
run_expect 0 "$STRATA" train --config "$WORK/sig.yaml" --set model.n_head=4 --set train.iters=$((stopped + 2))
expect_contains "$OUT" "at step $stopped"
echo ok
