#!/usr/bin/env bash
# model.init_from: a fresh run starts from a HuggingFace GPT-2 folder. A trained run's export is
# loaded, saved at step 0 (save_initial) and exported again: the two exports are the same bytes
# on one rank, at TP 2 x PP 2, and at DP 2 ZeRO 3 in bf16 with the optimizer offloaded; the same
# from a folder sharded into two files with an index, with HF's "transformer." prefix, attention
# mask buffers and the tied lm_head.weight. The model's dimensions come from config.json when the
# config leaves them out; wpe may hold more positions than seq_len. A resume does not read the
# folder (and says so). Mismatches are exit 2 before the first step, naming the tensor.
source "$(dirname "$0")/../lib/common.sh"
PY="${STRATA_PYTHON3:-python3}"
make_text_data "$WORK/data"
write_small_config "$WORK/base.yaml" "$WORK/data" "train: {iters: 3, seed: 4}"

# A trained model, exported: the folder every run below starts from.
run_expect 0 "$STRATA" train --config "$WORK/base.yaml" --set checkpoint.dir="$WORK/ck_trained"
run_expect 0 "$STRATA" export --checkpoint "$WORK/ck_trained" --out "$WORK/hf"

# again NAME NP FOLDER [--set ...]: starts from FOLDER, saves step 0, exports it to WORK/NAME.
again() {
  local name="$1" np="$2" folder="$3"; shift 3
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/base.yaml" \
    --set model.init_from="$folder" --set checkpoint.dir="$WORK/ck_$name" --set checkpoint.save_initial=true \
    --set train.iters=1 "$@"
  expect_contains "$OUT" "initialised weights from $folder (HuggingFace GPT-2; fresh optimizer state)"
  run_expect 0 "$STRATA" export --checkpoint "$WORK/ck_$name/step_00000000" --out "$WORK/$name"
  cmp "$WORK/hf/model.safetensors" "$WORK/$name/model.safetensors" || fail "$name: the export differs from the folder"
  echo "$name: the export of step 0 is the folder's model.safetensors byte for byte"
}
again one_rank 1 "$WORK/hf"
again tp2_pp2 4 "$WORK/hf" --set parallelism.tensor_model_parallel_size=2 \
  --set parallelism.pipeline_model_parallel_size=2 --set zero_optimization.stage=1
again dp2_z3_offload 2 "$WORK/hf" --set zero_optimization.stage=3 --set bf16.enabled=true \
  --set zero_optimization.offload_optimizer.device=cpu

# The same weights as HF's own files lay them out: two shards and an index, names under
# "transformer.", the attention mask buffers and the tied lm_head.weight.
"$PY" - "$WORK/hf" "$WORK/hf_sharded" <<'PY'
import json, os, struct, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with open(f"{src}/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
tensors = {k: (v, data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"}
n_layer = max(int(k.split(".")[1]) for k in tensors if k.startswith("h.")) + 1
mask = struct.pack("<f", 1.0) * 16
extra = {f"h.{i}.attn.bias": ({"dtype": "F32", "shape": [1, 1, 4, 4]}, mask) for i in range(n_layer)}
extra["lm_head.weight"] = tensors["wte.weight"]
def write(path, items):
    head, blob = {}, b""
    for name, (info, raw) in items:
        head[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(head).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text))); f.write(text); f.write(blob)
items = [("transformer." + k, v) for k, v in tensors.items()] + list(extra.items())
half = len(items) // 2
files = {"model-00001-of-00002.safetensors": items[:half], "model-00002-of-00002.safetensors": items[half:]}
weight_map = {}
for name, part in files.items():
    write(f"{out}/{name}", part)
    weight_map.update({k: name for k, _ in part})
json.dump({"metadata": {}, "weight_map": weight_map}, open(f"{out}/model.safetensors.index.json", "w"))
config = json.load(open(f"{src}/config.json"))
config["n_positions"] = 64  # wpe rows beyond seq_len are not read
json.dump(config, open(f"{out}/config.json", "w"))
PY
"$PY" - "$WORK/hf_sharded" <<'PY'
import json, struct, sys
# wpe with 64 positions: the first 32 are the model's; the rest are NaN and must never be read.
out = sys.argv[1]
index = json.load(open(f"{out}/model.safetensors.index.json"))
name = index["weight_map"]["transformer.wpe.weight"]
path = f"{out}/{name}"
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
head, blob = {}, b""
for k, v in header.items():
    raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
    shape = v["shape"]
    if k == "transformer.wpe.weight":
        raw += struct.pack("<f", float("nan")) * (len(raw) // 4)
        shape = [shape[0] * 2, shape[1]]
    head[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
    blob += raw
text = json.dumps(head).encode()
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text))); f.write(text); f.write(blob)
PY
again sharded 2 "$WORK/hf_sharded" --set zero_optimization.stage=2

# Dimensions from config.json: the config gives no n_layer, n_head or d_model.
grep -v '^model:' "$WORK/base.yaml" > "$WORK/no_dims.yaml"
echo "model: {vocab_size: 256, seq_len: 32, init_from: \"$WORK/hf\"}" >> "$WORK/no_dims.yaml"
run_expect 0 "$STRATA" config "$WORK/no_dims.yaml"
expect_contains "$OUT" "n_layer: 2"
expect_contains "$OUT" "d_model: 32"
run_expect 0 "$STRATA" train --config "$WORK/no_dims.yaml" --set train.iters=1
expect_contains "$OUT" "model: 2 layers, 2 heads, d_model 32"

# A resume reads the checkpoint, not the folder.
run_expect 0 "$STRATA" train --config "$WORK/base.yaml" --set checkpoint.dir="$WORK/ck_one_rank" \
  --set model.init_from="$WORK/hf" --set train.iters=2
expect_contains "$OUT" "model.init_from ($WORK/hf) is not used: the run resumes from a checkpoint"

# Mismatches: exit 2 before the first step, naming the tensor (or the folder's fault).
bad() {
  local want="$1"; shift
  run_expect 2 "$STRATA" train --config "$WORK/base.yaml" --set checkpoint.dir= "$@"
  expect_contains "$OUT" "$want"
  if grep -q "^step " <<<"$OUT"; then fail "a step ran despite: $want"; fi
}
bad "has no tensor h.2.ln_1.weight, which the model needs" --set model.init_from="$WORK/hf" --set model.n_layer=3
bad "holds h.1." --set model.init_from="$WORK/hf" --set model.n_layer=1
bad "tensor wte.weight has shape [256,32] in the folder but the model needs [256,64]" \
  --set model.init_from="$WORK/hf" --set model.d_model=64
bad "tensor wpe.weight has shape [32,32] in the folder but the model needs [48,32]" \
  --set model.init_from="$WORK/hf" --set model.seq_len=48
bad "model.init_from: $WORK/nowhere: not a directory" --set model.init_from="$WORK/nowhere"
mkdir -p "$WORK/empty" && cp "$WORK/hf/config.json" "$WORK/empty/"
bad "neither model.safetensors nor model.safetensors.index.json is there" --set model.init_from="$WORK/empty"
mkdir -p "$WORK/odd" && cp "$WORK/hf/config.json" "$WORK/odd/"
"$PY" - "$WORK/hf/model.safetensors" "$WORK/odd/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
header["h.0.mlp.gate.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
text = json.dumps(header).encode()
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text))); f.write(text); f.write(data + b"\0\0\0\0")
PY
bad "tensor h.0.mlp.gate.weight is not a GPT-2 parameter" --set model.init_from="$WORK/odd"
echo "init_from: every mismatch refused before the first step"
