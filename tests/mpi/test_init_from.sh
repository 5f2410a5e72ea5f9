#!/usr/bin/env bash
# model.init_from: a fresh run starts from a HuggingFace GPT-2 folder. A trained run's export is
# loaded, saved at step 0 (save_initial) and exported again: the two exports are the same bytes
# on one rank, at TP 2 x PP 2, and at DP 2 ZeRO 3 in bf16 with the optimizer offloaded; the same
# from a folder sharded into two files with an index, with HF's "transformer." prefix, attention
# mask buffers and the tied lm_head.weight. The model's dimensions come from config.json when the
# config leaves them out; wpe may hold more positions than seq_len. A resume does not read the
# folder (and says so). Mismatches are exit 2 before the first step, naming the tensor, the head
# count or the config.json key (a folder that is not GPT-2 as strata builds it). model.safetensors
# wins over an index beside it; an export over a sharded save removes its shards, and a failed
# export leaves nothing.
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

# A folder holding both model.safetensors and an index loads model.safetensors, as transformers
# does (here the index names a file that is not there: read, it would be refused).
mkdir -p "$WORK/hf_both" && cp "$WORK/hf/model.safetensors" "$WORK/hf/config.json" "$WORK/hf_both/"
echo '{"metadata": {}, "weight_map": {"wte.weight": "model-00001-of-00001.safetensors"}}' \
  > "$WORK/hf_both/model.safetensors.index.json"
again both 1 "$WORK/hf_both"

# Exporting over a sharded save removes its index and shards (else the folder would hold two
# models); a failed export (a corrupt checkpoint file) leaves neither a folder nor a temporary file.
cp -r "$WORK/hf_sharded" "$WORK/over"
run_expect 0 "$STRATA" export --checkpoint "$WORK/ck_trained" --out "$WORK/over"
expect_contains "$OUT" "removed $WORK/over/model.safetensors.index.json, left by an earlier sharded save"
[ "$(cd "$WORK/over" && echo *)" = "config.json model.safetensors" ] || fail "stale files: $(ls "$WORK/over")"
cmp "$WORK/hf/model.safetensors" "$WORK/over/model.safetensors" || fail "the export over a sharded save differs"
"$PY" -c "import json, sys; c = json.load(open(sys.argv[1])); assert c['eos_token_id'] is None, c" "$WORK/over/config.json" ||
  fail "a byte-level model's config.json names an end-of-text token"
cp -r "$WORK/ck_trained" "$WORK/ck_corrupt"
rank_files=("$WORK"/ck_corrupt/step_*/rank_00000.safetensors)
rank_file=${rank_files[-1]}
"$PY" -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-100] ^= 0xff; open(p, 'wb').write(b)" "$rank_file"
run_expect 2 "$STRATA" export --checkpoint "$WORK/ck_corrupt" --out "$WORK/failed"
expect_contains "$OUT" "checksum mismatch"
[ ! -e "$WORK/failed" ] || fail "a failed export left $(ls -a "$WORK/failed")"

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
bad "its config.json says n_head 2 but the model has 1 heads" --set model.init_from="$WORK/hf" --set model.n_head=1
# A config.json that sets what GPT-2 as strata builds it does not compute is another model.
for change in 'model_type="llama"' 'activation_function="relu"' 'layer_norm_epsilon=0.1' \
  'tie_word_embeddings=False' 'n_inner=100' 'scale_attn_weights=False' 'scale_attn_by_inverse_layer_idx=True'; do
  key=${change%%=*}
  mkdir -p "$WORK/arch_$key" && cp "$WORK/hf/model.safetensors" "$WORK/arch_$key/"
  "$PY" -c "import json, sys; c = json.load(open(sys.argv[1])); c['$key'] = ${change#*=}; \
json.dump(c, open(sys.argv[2], 'w'))" "$WORK/hf/config.json" "$WORK/arch_$key/config.json"
  bad "config.json sets $key " --set model.init_from="$WORK/arch_$key"
done
# Without the dimensions in the config, a folder that cannot give them is named for what it is.
run_expect 2 "$STRATA" config "$WORK/no_dims.yaml" --set model.init_from="$WORK/nowhere"
expect_contains "$OUT" "model.init_from: $WORK/nowhere does not exist; it was to give the model's n_layer, n_head and d_model"
run_expect 2 "$STRATA" config "$WORK/no_dims.yaml" --set model.init_from="$WORK/ck_trained"
expect_contains "$OUT" "has no config.json: not a HuggingFace model folder"
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
mkdir -p "$WORK/bad_header" && cp "$WORK/hf/config.json" "$WORK/bad_header/"
"$PY" -c "import struct, sys; open(sys.argv[1], 'wb').write(struct.pack('<Q', 1 << 62) + b'{}')" \
  "$WORK/bad_header/model.safetensors"
bad "model.init_from: $WORK/bad_header/model.safetensors: header length" --set model.init_from="$WORK/bad_header"
echo "init_from: every mismatch refused before the first step"
