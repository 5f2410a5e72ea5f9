#!/usr/bin/env bash
# Training state is never lost or poisoned:
# 1. lr 1e6 (clipping on): gradients go non-finite; those steps are skipped, not saved (the
#    newest checkpoint stays a finite one, even with keep_last 1), and after more than
#    train.max_nonfinite_steps in a row the run stops with exit 1 naming the step, loss, norm and
#    parameter, with advice that fits the config (enabling clipping only when it is off);
# 2. a finite gradient that makes the parameters infinite (lr 3e38 with weight decay) is caught
#    by the save's check: exit 1, nothing written;
# 3. a manifest with one digit changed (its step, optimizer step count or loader position), a
#    step unlike its dir's name, and a `latest` holding a NUL byte are refused with exit 2 (with
#    resume: auto, a run whose only checkpoint is refused stops too, rather than start over).
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

# 1. Non-finite steps.
write_small_config "$WORK/nan.yaml" "$WORK/data" "train: {iters: 30, seed: 3, max_nonfinite_steps: 2}" \
  "checkpoint: {dir: \"$WORK/nan\", save_interval: 1, keep_last: 1}" "logging: {metrics_file: \"$WORK/nan.jsonl\"}"
run_expect 1 "$STRATA" train --config "$WORK/nan.yaml" --set optimizer.params.lr=1e6
expect_contains "$OUT" "steps in a row had a non-finite gradient (more than train.max_nonfinite_steps 2)"
expect_contains "$OUT" "first parameter with a non-finite gradient: "
expect_contains "$OUT" "lower the learning rate (optimizer.params.lr is 1e+06)"
grep -q "enable gradient_clipping" <<<"$OUT" && fail "advised enabling clipping, which is on"
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK/nan.jsonl" "$WORK/nan" <<'PY'
import os, sys
from equivalence import records
train = records(sys.argv[1], "train")
bad = [r["step"] for r in train if r.get("nonfinite")]
stop = records(sys.argv[1], "stop")
assert len(bad) == 3 and bad == list(range(bad[0], bad[0] + 3)), f"non-finite steps {bad}"
assert stop and stop[0]["reason"] == "nonfinite" and stop[0]["step"] == bad[-1], stop
latest = open(os.path.join(sys.argv[2], "latest")).read().strip()
saved = int(latest.split("_")[1])
assert saved == bad[0] - 1, f"latest is {latest}; the first non-finite step was {bad[0]}"
print(f"steps {bad} non-finite and skipped; latest stays {latest}")
PY
# The newest checkpoint is whole and finite (its weights exported and checked here).
run_expect 0 "$STRATA" export --checkpoint "$WORK/nan" --out "$WORK/nan_export"
python3 - "$WORK/nan_export/model.safetensors" <<'PY'
import array, json, math, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
values = 0
for name, t in header.items():
    if name == "__metadata__": continue
    a, b = t["data_offsets"]
    floats = array.array("f", data[8 + n + a:8 + n + b])
    assert all(math.isfinite(x) for x in floats), f"{name} holds a non-finite value"
    values += len(floats)
print(f"the newest checkpoint's {values} parameters are finite")
PY
write_small_config "$WORK/noclip.yaml" "$WORK/data" "train: {iters: 30, seed: 3, max_nonfinite_steps: 0}"
sed -i 's/^gradient_clipping: .*/gradient_clipping: 0/' "$WORK/noclip.yaml"
run_expect 1 "$STRATA" train --config "$WORK/noclip.yaml" --set optimizer.params.lr=1e6
expect_contains "$OUT" "or enable gradient_clipping (e.g. 1.0)"

# 2. An infinite state is not saved.
write_small_config "$WORK/inf.yaml" "$WORK/data" "train: {iters: 5, seed: 3}" \
  "checkpoint: {dir: \"$WORK/inf\", save_interval: 1}"
run_expect 1 "$STRATA" train --config "$WORK/inf.yaml" --set optimizer.params.lr=3e38
expect_contains "$OUT" "not saving the checkpoint of step 1: model."
expect_contains "$OUT" "holds a non-finite value"
[ ! -e "$WORK/inf/latest" ] || fail "a non-finite state was saved"
# The same with the state offloaded to a file, which the check reads a tensor at a time.
mkdir -p "$WORK/nvme"
run_expect 1 "$STRATA" train --config "$WORK/inf.yaml" --set optimizer.params.lr=3e38 --set zero_optimization.stage=1 \
  --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$WORK/nvme" \
  --set checkpoint.dir="$WORK/inf_nvme"
expect_contains "$OUT" "not saving the checkpoint of step 1: model."
[ ! -e "$WORK/inf_nvme/latest" ] || fail "a non-finite state offloaded to a file was saved"

# 3. Tampered manifests and latest files.
write_small_config "$WORK/ok.yaml" "$WORK/data" "train: {iters: 4, seed: 3}" "checkpoint: {dir: \"$WORK/ok\"}"
run_expect 0 "$STRATA" train --config "$WORK/ok.yaml"
manifest="$WORK/ok/step_00000004/manifest.json"
cp "$manifest" "$WORK/manifest.good"
for field in step optimizer_steps loader_next_sequence; do
  # One digit of the field's value changed; the JSON stays valid.
  python3 - "$manifest" "$field" <<'PY'
import re, sys
path, field = sys.argv[1], sys.argv[2]
text = open(path).read()
m = re.search(r'"%s": (\d+)' % field, text)
assert m, field
digit = m.group(1)[-1]
text = text[:m.end(1) - 1] + str((int(digit) + 1) % 10) + text[m.end(1):]
open(path, "w").write(text)
PY
  run_expect 2 "$STRATA" train --config "$WORK/ok.yaml" --set train.iters=6
  expect_contains "$OUT" "manifest.json: its bytes do not match"
  cp "$WORK/manifest.good" "$manifest"
done
mv "$WORK/ok/step_00000004" "$WORK/ok/step_00000005"
printf 'step_00000005\n' > "$WORK/ok/latest"
run_expect 2 "$STRATA" train --config "$WORK/ok.yaml" --set train.iters=6
expect_contains "$OUT" "says step 4 but its dir is step_00000005"
mv "$WORK/ok/step_00000005" "$WORK/ok/step_00000004"
printf 'step_0000\000junk\n' > "$WORK/ok/latest"
run_expect 2 "$STRATA" train --config "$WORK/ok.yaml" --set train.iters=6 --set checkpoint.resume="$WORK/ok"
expect_contains "$OUT" "holds 'step_0000\\x00junk', which is not the name of a step dir"
printf 'step_00000004\n' > "$WORK/ok/latest"
run_expect 0 "$STRATA" train --config "$WORK/ok.yaml" --set train.iters=6
expect_contains "$OUT" "resumed from $WORK/ok/step_00000004 at step 4"
echo ok
