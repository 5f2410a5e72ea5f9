#!/usr/bin/env bash
# `strata plan`: ranks layouts (fastest first, every one fitting), its JSON's parts add up, --write
# gives a config `strata train` runs as is with the layout it names, --explain on that config
# predicts what the plan did, --keep holds axes, --calibrate writes a profile the planner reads,
# every shipped profile loads; and bad input (unknown profile, a field missing, GPUs not a
# multiple of the node, a model that fits no layout, an unknown axis, keeping a grid that does not
# run on the GPUs) exits 2 with the reason.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/tiny.yaml" "$WORK/data" "train: {iters: 1, seed: 1}" \
  "checkpoint: {dir: \"$WORK/ckpt\"}"

run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware cpu-2core --top 3
expect_contains "$OUT" "on 4 × cpu-2core (2 per node)"
expect_contains "$OUT" "the best 3 by predicted tokens/s"
expect_contains "$OUT" " 3. dp "
expect_contains "$OUT" "memory per rank (MiB, the stage needing most): params"
expect_contains "$OUT" "step time: compute"
# The printed terms add up to the printed totals (a rank under 1 GiB is shown in MiB).
python3 - "$OUT" <<'PY'
import re, sys
for line in sys.argv[1].splitlines():
    m = re.search(r"params ([\d.]+) \+ grads ([\d.]+) \+ optimizer ([\d.]+) \+ workspace ([\d.]+) \+ activations ([\d.]+) = ([\d.]+)", line)
    if m:
        *terms, total = map(float, m.groups())
        assert abs(sum(terms) - total) <= 0.05 * 3, line
    m = re.search(r"step time: compute ([\d.]+) \+ tp comm ([\d.]+) \+ pp comm ([\d.]+) \+ bubble ([\d.]+) \+ dp/zero comm ([\d.]+) \(hidden ([\d.]+)\) \+ optimizer ([\d.]+) \+ offload ([\d.]+) = ([\d.]+) s", line)
    if m:
        c, tp, pp, b, dp, hid, opt, off, total = map(float, m.groups())
        decimals = len(m.group(9).split(".")[1]) if "." in m.group(9) else 0
        assert abs(c + tp + pp + b + dp - hid + opt + off - total) <= 5 * 10 ** -decimals, line
PY

run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware cpu-2core --top 50 --json \
  --write "$WORK/best.yaml"
printf '%s\n' "$OUT" > "$WORK/plan.json"
python3 - "$WORK/plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
layouts = plan["layouts"]
assert plan["gpus"] == 4 and plan["fit"] >= len(layouts) == 50, (plan["fit"], len(layouts))
speeds = [l["tokens_per_s"] for l in layouts]
# Fastest first, speeds within half a percent counting as ties.
assert all(b <= a * 1.005 for a, b in zip(speeds, speeds[1:])), speeds
for l in layouts:
    assert l["fits"] and l["dp"] * l["tp"] * l["pp"] == 4, l
    t, m = l["time_s"], l["memory_bytes"]
    total = t["compute"] + t["tp_comm"] + t["pp_comm"] + t["bubble"] + t["dp_comm"] - t["dp_comm_hidden"] \
        + t["optimizer"] + t["offload"]
    assert abs(total - l["step_time_s"]) <= 1e-9 * total, l
    assert m["params"] + m["grads"] + m["optimizer"] + m["workspace"] + m["activations"] == m["total"], l
    assert m["total"] <= m["limit"], l
    assert abs(l["tokens_per_s"] * l["step_time_s"] - plan["global_batch"] * 32) < 1e-6 * l["tokens_per_s"], l
print("ranked", len(layouts), "layouts; best:", layouts[0]["layout"])
PY

# The written config trains as is, on the layout the plan named.
best=$(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["layouts"][0]; print(l["tp"], l["pp"], l["micro_batch"], l["zero_stage"], l["tokens_per_s"])' "$WORK/plan.json")
read -r tp pp mb zero speed <<<"$best"
run_expect 0 "$STRATA" config "$WORK/best.yaml" --world-size 4
expect_contains "$OUT" "tensor_model_parallel_size: $tp"
expect_contains "$OUT" "pipeline_model_parallel_size: $pp"
expect_contains "$OUT" "train_micro_batch_size_per_gpu: $mb"
expect_contains "$OUT" "  stage: $zero"
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" train --config "$WORK/best.yaml"
expect_contains "$OUT" "step 1/1"
run_expect 0 "$STRATA" plan --config "$WORK/best.yaml" --gpus 4 --hardware cpu-2core --explain --json
python3 -c 'import json,sys; got=json.loads(sys.argv[1])["tokens_per_s"]; want=float(sys.argv[2]); assert abs(got-want) <= 1e-9*want, (got, want)' "$OUT" "$speed"
run_expect 0 "$STRATA" plan --config "$WORK/best.yaml" --gpus 4 --hardware cpu-2core --explain
expect_contains "$OUT" "strata plan --explain: dp "
expect_contains "$OUT" "predicted "

# --keep holds axes at the config's values.
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware cpu-2core --top 20 --json \
  --set zero_optimization.stage=2 --set model.recompute=full --keep zero,recompute,grid
python3 -c '
import json, sys
for l in json.loads(sys.argv[1])["layouts"]:
    assert l["zero_stage"] == 2 and l["recompute"] == "full" and (l["dp"], l["tp"], l["pp"]) == (4, 1, 1), l
' "$OUT"

# Every shipped profile loads; a GPU plan of a big model lands on the GPU's terms.
for hw in a100-sxm-80gb h100-sxm h200-sxm cpu-2core; do
  run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 1 --hardware "$hw" --explain
  expect_contains "$OUT" "× $hw"
done
run_expect 0 "$STRATA" plan --config "$SRC/configs/gpt2-1558m.yaml" --gpus 16 --hardware h100-sxm --top 1
expect_contains "$OUT" "1.56B parameters, seq_len 1024"
! grep -q "^warning: heads" <<<"$OUT" || fail "a warning for heads of 64"
# Heads strata's CUDA attention does not take: a GPU plan says that `strata train` refuses them.
run_expect 0 "$STRATA" plan --config "$SRC/configs/gpt2-1558m.yaml" --gpus 16 --hardware h100-sxm --top 1 \
  --set model.n_head=10
expect_contains "$OUT" "warning: heads of 160 channels: strata's CUDA attention takes a multiple of 16 up to 128"

# --calibrate measures this machine into a profile the planner reads.
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$STRATA" plan --calibrate --config "$WORK/tiny.yaml" \
  --out "$WORK/here.yaml"
expect_contains "$OUT" "wrote $WORK/here.yaml"
expect_contains "$(cat "$WORK/here.yaml")" "# Source: strata plan --calibrate on"
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware "$WORK/here.yaml" --top 1
expect_contains "$OUT" "on 2 × here (2 per node)"

# A CPU profile's node rates were measured with its ranks per node all running: one rank alone gets
# its share of them, not the node's (a rank's own passes use one core).
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 1 --hardware cpu-2core --explain --json
one=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$OUT")
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core --explain --json
two=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$OUT")
python3 -c 'import sys; one, two = map(float, sys.argv[1:]); assert one < 0.6 * two, (one, two)' "$one" "$two" \
  || fail "one rank of a 2-rank CPU profile predicted $one tokens/s against $two for two"
# ZeRO at DP 1 shards nothing: listed only where it carries offload.
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 1 --hardware h100-sxm --top 1000 --json
python3 - "$OUT" <<'PY' || fail "a ZeRO stage above 0 at DP 1 without offload was listed"
import json, sys
layouts = json.loads(sys.argv[1])["layouts"]
assert layouts and all(l["zero_stage"] == 0 or l["offload_optimizer"] != "none" for l in layouts if l["dp"] == 1)
PY

# --keep given twice is the same as its axes comma-separated.
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware cpu-2core --keep zero --keep recompute --json
twice="$OUT"
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware cpu-2core --keep zero,recompute --json
[ "$twice" = "$OUT" ] || fail "--keep zero --keep recompute planned otherwise than --keep zero,recompute"

# Bad input: exit 2 with the reason.
run_expect 2 "$STRATA" plan --config "$WORK" --gpus 2
expect_contains "$OUT" "is a directory, not a YAML or JSON file"
# Options the mode asked for does not use are refused, not ignored.
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core --explain --write "$WORK/x.yaml"
expect_contains "$OUT" "--explain predicts the config's own layout: --write has no effect with it"
[ ! -e "$WORK/x.yaml" ] || fail "--explain --write wrote a file"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core --out "$WORK/x.yaml"
expect_contains "$OUT" "--out is the profile --calibrate writes"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core --write ""
expect_contains "$OUT" "--write: expected a file name"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core --write "$WORK/./tiny.yaml"
expect_contains "$OUT" "that is the config being planned"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core --set train_batch_size=5 \
  --set model.n_layer=1 --set model.n_head=1 --set train_micro_batch_size_per_gpu=5
expect_contains "$OUT" "no layout of 2 GPUs is valid for this config: a split DP × TP × PP of them needs DP to divide the global batch (5)"
# A global batch in the millions plans in well under a minute (pipelines extrapolated past 8p micro-batches).
run_expect 0 timeout 60 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware cpu-2core --top 1 \
  --set train_batch_size=16777216
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware tpu-v9
expect_contains "$OUT" "unknown profile 'tpu-v9'; known: a100-sxm-80gb, cpu-2core, h100-sxm, h200-sxm"
# A binary away from its tree says where it looked and how to point it at the profiles.
cp "$STRATA" "$WORK/strata_copy"
run_expect 2 env -u STRATA_HARDWARE_DIR "$WORK/strata_copy" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware cpu-2core
expect_contains "$OUT" "known: none found in "
expect_contains "$OUT" "set STRATA_HARDWARE_DIR to a folder of profiles"
run_expect 0 env STRATA_HARDWARE_DIR="$SRC/configs/hardware" "$WORK/strata_copy" plan --config "$WORK/tiny.yaml" --gpus 2 \
  --hardware cpu-2core
grep -v '^peak_tflops_16bit' "$SRC/configs/hardware/h100-sxm.yaml" | sed 's/^gpus_per_node: 8/gpus_per_node: 8\nnvlink: 4/' \
  | sed 's/^attention_kernel:.*/attention_kernel: flashy/; s/^multiprocessors:.*/multiprocessors: -4/' \
  | sed 's/^gpus_per_node:.*/gpus_per_node: 2.5/; s/^name:.*/name: [a, b]/' > "$WORK/broken.yaml"
echo "memory_gib: 40" >> "$WORK/broken.yaml"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --hardware "$WORK/broken.yaml"
expect_contains "$OUT" "broken.yaml: peak_tflops_16bit: missing"
expect_contains "$OUT" "broken.yaml: nvlink: unknown key"
expect_contains "$OUT" "broken.yaml: attention_kernel: missing or not fused or unfused"
expect_contains "$OUT" "broken.yaml: multiprocessors: not a number in [0, 100000]"
expect_contains "$OUT" "broken.yaml: gpus_per_node: not a whole number"
expect_contains "$OUT" "broken.yaml: name: missing or not a word"
expect_contains "$OUT" "broken.yaml: memory_gib: given twice"
# The attention kernel a profile names is the one it predicts: stored scores cost more.
sed 's/^attention_kernel:.*/attention_kernel: unfused/' "$SRC/configs/hardware/h100-sxm.yaml" > "$WORK/unfused.yaml"
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 1 --hardware h100-sxm --explain --json
fused_step="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["step_time_s"])' "$OUT")"
run_expect 0 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 1 --hardware "$WORK/unfused.yaml" --explain --json
python3 -c 'import json, sys; assert json.loads(sys.argv[1])["step_time_s"] > float(sys.argv[2]), sys.argv[1]' "$OUT" "$fused_step"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 12 --hardware h100-sxm
expect_contains "$OUT" "--gpus 12 is not a multiple of the 8 GPUs per node"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 2 --hardware h100-sxm --set model.n_layer=2000 \
  --set model.d_model=8192 --set model.n_head=64 --set model.seq_len=4096
expect_contains "$OUT" "no layout of 2 × h100-sxm fits: the smallest, dp "
expect_contains "$OUT" "GiB per rank (params"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 3 --gpus-per-node 3 --hardware cpu-2core \
  --set parallelism.tensor_model_parallel_size=2 --keep grid
expect_contains "$OUT" "--keep grid: the config's own layout does not run on 3 GPUs (parallelism: world size 3"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --gpus 4 --keep zero,colour
expect_contains "$OUT" "--keep: unknown axis 'colour'"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml" --explain
expect_contains "$OUT" "give --gpus N"
run_expect 2 "$STRATA" plan --config "$WORK/tiny.yaml"
expect_contains "$OUT" "give --gpus N"
echo ok
