#!/usr/bin/env bash
# A run killed with SIGKILL after a checkpoint and resumed with resume: auto gives the same
# losses, bit for bit, as an uninterrupted run; SIGTERM finishes the step, saves, exits 0.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"

write_small_config "$WORK/a.yaml" "$WORK/data" "train: {iters: 16, seed: 3}" \
  "checkpoint: {dir: \"$WORK/ckpt_a\", save_interval: 4}" "logging: {metrics_file: \"$WORK/a.jsonl\"}"
run_expect 0 "$STRATA" train --config "$WORK/a.yaml"
[ -d "$WORK/ckpt_a/step_00000016" ] || fail "no final checkpoint"

write_small_config "$WORK/b.yaml" "$WORK/data" "train: {iters: 16, seed: 3}" \
  "checkpoint: {dir: \"$WORK/ckpt_b\", save_interval: 4}" "logging: {metrics_file: \"$WORK/b.jsonl\"}"
"$STRATA" train --config "$WORK/b.yaml" > "$WORK/b1.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ -f "$WORK/ckpt_b/latest" ] && break
  sleep 0.05
done
kill -KILL "$pid" 2>/dev/null || fail "the run ended before it could be killed"
wait "$pid" 2>/dev/null || true
[ -f "$WORK/ckpt_b/latest" ] || fail "no checkpoint before the kill"
killed_at=$(cat "$WORK/ckpt_b/latest")
echo "killed after $killed_at"
run_expect 0 "$STRATA" train --config "$WORK/b.yaml"
expect_contains "$OUT" "resumed from"
diff <(train_losses "$WORK/a.jsonl") <(train_losses "$WORK/b.jsonl") || fail "resumed losses differ from the uninterrupted run"
[ "$(train_losses "$WORK/b.jsonl" | wc -l)" -eq 16 ] || fail "expected 16 steps"
# The resumed run's records follow a resume record naming the checkpoint's step.
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" "$killed_at" <<'PY' || fail "no resume record for $killed_at"
import sys
from equivalence import records
work, killed_at = sys.argv[1], sys.argv[2]
resumes = records(f"{work}/b.jsonl", "resume")
assert resumes == [{"type": "resume", "step": int(killed_at[5:]), "checkpoint": f"{work}/ckpt_b/{killed_at}"}], resumes
PY

# A resume with another global batch continues the data where the checkpoint stopped: 4 steps
# of 8 sequences, then 3 steps of 4 start at sequence 32 (not 4 x 4 = 16) and end at 44.
write_small_config "$WORK/g.yaml" "$WORK/data" "train: {iters: 4, seed: 3}" "checkpoint: {dir: \"$WORK/ckpt_g\"}"
run_expect 0 "$STRATA" train --config "$WORK/g.yaml"
run_expect 0 "$STRATA" train --config "$WORK/g.yaml" --set gradient_accumulation_steps=1 --set train.iters=7
expect_contains "$OUT" "the data continues at sequence 32, not at step x global batch = 4 x 4 = 16"
python3 - "$WORK/ckpt_g" <<'PY'
import json, sys
for step, sequence in ((4, 32), (7, 44)):
    meta = json.load(open(f"{sys.argv[1]}/step_{step:08d}/manifest.json"))["global_meta"]
    if meta["loader_next_sequence"] != sequence:
        sys.exit(f"step {step}: loader_next_sequence {meta['loader_next_sequence']}, expected {sequence}")
PY

# ... and a resume that changes what orders the data says so (not when nothing changed).
run_expect 0 "$STRATA" train --config "$WORK/g.yaml" --set gradient_accumulation_steps=1 --set train.iters=8 \
  --set data.shuffle=true
expect_contains "$OUT" "the data order differs from the checkpoint's run (data.shuffle is now true (false at the checkpoint))"
run_expect 0 "$STRATA" train --config "$WORK/g.yaml" --set gradient_accumulation_steps=1 --set train.iters=9 \
  --set data.shuffle=true
grep -qF "data order differs" <<<"$OUT" && fail "a resume with the same data order warned"

# SIGTERM: finish the step, save, exit 0.
write_small_config "$WORK/c.yaml" "$WORK/data" "train: {iters: 100000, seed: 3}" \
  "checkpoint: {dir: \"$WORK/ckpt_c\"}" "logging: {metrics_file: \"$WORK/c.jsonl\"}"
"$STRATA" train --config "$WORK/c.yaml" > "$WORK/c.log" 2>&1 &
pid=$!
wait_for_train_record "$WORK/c.jsonl"
kill -TERM "$pid"
set +e; wait "$pid"; rc=$?; set -e
cat "$WORK/c.log" | tail -n 3
[ "$rc" -eq 0 ] || fail "SIGTERM: exit code $rc, expected 0"
grep -q "signal 15 received" "$WORK/c.log" || fail "SIGTERM not reported"
[ -f "$WORK/ckpt_c/latest" ] || fail "SIGTERM: no checkpoint saved"

# The metrics file holds one run: a run that does not resume moves an earlier run's records to
# FILE.prev (so a reader never joins two runs' steps into one curve); a resumed run drops an
# unfinished last record (a full disk, a kill mid-write) instead of gluing its own to it.
write_small_config "$WORK/f.yaml" "$WORK/data" "train: {iters: 3, seed: 3}" "logging: {metrics_file: \"$WORK/f.jsonl\"}"
run_expect 0 "$STRATA" train --config "$WORK/f.yaml"
# The banner's resolved config (its derived values as comments) loads back as a config.
awk '/resolved config:$/ { f = 1; next } f { print } /^#   flops_per_token/ { exit }' <<<"$OUT" > "$WORK/banner.yaml"
grep -q "^#   flops_per_token" "$WORK/banner.yaml" || fail "no derived values in the banner"
run_expect 0 "$STRATA" config "$WORK/banner.yaml"
run_expect 0 "$STRATA" train --config "$WORK/f.yaml" --set train.iters=2
expect_contains "$OUT" "held an earlier run's records: moved to $WORK/f.jsonl.prev"
[ "$(train_losses "$WORK/f.jsonl" | cut -d' ' -f1 | xargs)" = "1 2" ] || fail "a fresh run kept an earlier run's steps"
[ "$(train_losses "$WORK/f.jsonl.prev" | cut -d' ' -f1 | xargs)" = "1 2 3" ] || fail "the earlier run's records not in .prev"
head -n 1 "$WORK/f.jsonl" | grep -q '"type":"memory"' || fail "the fresh run's first record is not its memory record"
run_expect 0 "$STRATA" train --config "$WORK/f.yaml" --set checkpoint.dir="$WORK/ckpt_f"
printf '{"type":"train","step":4,"lo' >> "$WORK/f.jsonl"
run_expect 0 "$STRATA" train --config "$WORK/f.yaml" --set checkpoint.dir="$WORK/ckpt_f" --set train.iters=5
expect_contains "$OUT" "ended in an unfinished record (28 bytes"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$WORK/f.jsonl" || fail "a line is not JSON"
[ "$(train_losses "$WORK/f.jsonl" | cut -d' ' -f1 | xargs)" = "1 2 3 4 5" ] || fail "the resumed file's steps"
echo ok
