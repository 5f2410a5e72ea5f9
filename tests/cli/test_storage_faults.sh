#!/usr/bin/env bash
# Storage and resource faults end with a clear message, exit 2 and a state to resume from:
# 1. a full checkpoint disk (a 1200 KiB tmpfs in a private mount namespace: room for two
#    checkpoints): the save that does not fit is refused before writing (how much is needed and
#    free), latest stays on the previous checkpoint, nothing partial is left; with keep_last 1
#    the next run deletes first what the save would prune and goes on, but never the newest
#    checkpoint: with room for no second one it stops (exit 2) keeping it; a leftover step_N.tmp
#    of a killed save is removed at start-up;
# 2. a write that fails halfway (a file-size limit set on the running process): exit 2, the
#    partial step_N.tmp removed;
# 3. unattended resume: with resume: auto a damaged newest checkpoint (one flipped byte, a
#    junk latest file) is skipped with a warning and a JSONL record, and the run resumes from the
#    newest sound one; a checkpoint named in resume stays strict; none sound: exit 2;
# 4. a metrics file that cannot be written (/dev/full at once; a full disk mid-run): reported
#    with path and reason, exit 2, after a checkpoint save when there is something to save;
# 5. a shard cut short while training reads it: exit 2 naming the file;
# 6. a model that cannot fit in memory: exit 2 with the estimate, before allocating.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
cfg() {  # cfg NAME [yaml lines...]
  write_small_config "$WORK/$1.yaml" "$WORK/data" "${@:2}"
}

# 1. A full disk. Inside a private mount namespace the tmpfs is gone when the commands end.
if unshare -m true 2>/dev/null; then
  disk="$WORK/disk"
  mkdir -p "$disk"
  cfg full "train: {iters: 10, seed: 3}" "checkpoint: {dir: \"$disk/ckpt\", save_interval: 2}"
  cat > "$WORK/full.sh" <<SH
set -u
mount -t tmpfs -o size=1200k tmpfs "$disk" || exit 99
"$STRATA" train --config "$WORK/full.yaml" > "$WORK/full1.log" 2>&1; echo \$? > "$WORK/full1.rc"
ls "$disk/ckpt" > "$WORK/full1.ls"; cat "$disk/ckpt/latest" > "$WORK/full1.latest"
mkdir -p "$disk/ckpt/step_00000099.tmp"
"$STRATA" train --config "$WORK/full.yaml" --set checkpoint.keep_last=1 > "$WORK/full2.log" 2>&1
echo \$? > "$WORK/full2.rc"; ls "$disk/ckpt" > "$WORK/full2.ls"
free=\$(df --output=avail -B1 "$disk" | tail -n 1)
head -c \$((free - 200000)) /dev/zero > "$disk/fill"
"$STRATA" train --config "$WORK/full.yaml" --set checkpoint.keep_last=1 --set train.iters=12 > "$WORK/full3.log" 2>&1
echo \$? > "$WORK/full3.rc"; ls "$disk/ckpt" > "$WORK/full3.ls"; cat "$disk/ckpt/latest" > "$WORK/full3.latest"
SH
  unshare -m bash "$WORK/full.sh" || fail "the full-disk run could not mount a tmpfs"
  cat "$WORK/full1.log" | tail -n 2
  [ "$(cat "$WORK/full1.rc")" = 2 ] || fail "a save on a full disk: exit $(cat "$WORK/full1.rc"), expected 2"
  grep -q "needs about .* but the file system has .* free" "$WORK/full1.log" || fail "no room report"
  [ "$(cat "$WORK/full1.latest")" = step_00000004 ] || fail "latest moved: $(cat "$WORK/full1.latest")"
  ! grep -q "\.tmp" "$WORK/full1.ls" || fail "a partial save was left: $(cat "$WORK/full1.ls")"
  tail -n 2 "$WORK/full2.log"
  [ "$(cat "$WORK/full2.rc")" = 0 ] || fail "keep_last 1 after a full disk: exit $(cat "$WORK/full2.rc")"
  grep -q "removing .*step_00000099.tmp, left by an interrupted save" "$WORK/full2.log" || fail "stale .tmp kept"
  grep -q "deleting now what the save would prune after it" "$WORK/full2.log" || fail "no pruning first"
  [ "$(grep -c step_ "$WORK/full2.ls")" -eq 1 ] && grep -q step_00000010 "$WORK/full2.ls" ||
    fail "expected only step_00000010: $(cat "$WORK/full2.ls")"
  # keep_last 1 without room for a second checkpoint: the only one is not deleted to make room
  # (a save that then failed would leave nothing to resume from); exit 2, and it stays latest.
  tail -n 1 "$WORK/full3.log"
  [ "$(cat "$WORK/full3.rc")" = 2 ] || fail "keep_last 1 without room for two: exit $(cat "$WORK/full3.rc")"
  grep -q "keep_last 1 deletes the previous checkpoint only once the new one is complete" "$WORK/full3.log" ||
    fail "the refusal does not say why keep_last 1 needs room for two"
  grep -q step_00000010 "$WORK/full3.ls" && [ "$(cat "$WORK/full3.latest")" = step_00000010 ] ||
    fail "the only checkpoint was lost: $(cat "$WORK/full3.ls")"
else
  echo "full disk: skipped (no mount namespaces here: needs root)"
fi

# 2. A write that fails halfway: once the run is going, its file-size limit is set below the size
# of its checkpoint file (set earlier, it would also stop MPI's own start-up files).
cfg fsize "train: {iters: 100000, seed: 3}" "checkpoint: {dir: \"$WORK/fsize\", save_interval: 50}" \
  "logging: {metrics_file: \"$WORK/fsize.jsonl\"}"
"$STRATA" train --config "$WORK/fsize.yaml" > "$WORK/fsize.log" 2>&1 &
pid=$!
wait_for_train_record "$WORK/fsize.jsonl"
prlimit --pid "$pid" --fsize=200000
set +e; wait "$pid"; rc=$?; set -e
tail -n 1 "$WORK/fsize.log"
[ "$rc" -eq 2 ] || fail "a failed write: exit $rc, expected 2"
grep -q "File too large" "$WORK/fsize.log" || fail "the failed write is not reported"
! ls -d "$WORK"/fsize/*.tmp >/dev/null 2>&1 || fail "the partial save was left behind"
[ ! -e "$WORK/fsize/latest" ] || fail "latest written after a failed save"

# 3. Unattended resume.
cfg auto "train: {iters: 6, seed: 3}" "checkpoint: {dir: \"$WORK/auto\", save_interval: 2}" \
  "logging: {metrics_file: \"$WORK/auto.jsonl\"}"
run_expect 0 "$STRATA" train --config "$WORK/auto.yaml"
python3 - "$WORK/auto/step_00000006/rank_00000.safetensors" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x01
open(path, "wb").write(bytes(data))
PY
run_expect 2 "$STRATA" train --config "$WORK/auto.yaml" --set train.iters=10 \
  --set checkpoint.resume="$WORK/auto/step_00000006"
expect_contains "$OUT" "rank_00000.safetensors"
run_expect 0 "$STRATA" train --config "$WORK/auto.yaml" --set train.iters=8
expect_contains "$OUT" "checkpoint.resume auto: skipping $WORK/auto/step_00000006"
expect_contains "$OUT" "resumed from $WORK/auto/step_00000004 at step 4"
grep -q '"type":"resume_fallback"' "$WORK/auto.jsonl" || fail "no resume_fallback record"
printf 'garbage\n' > "$WORK/auto/latest"
run_expect 0 "$STRATA" train --config "$WORK/auto.yaml" --set train.iters=9
expect_contains "$OUT" "skipping $WORK/auto/latest"
expect_contains "$OUT" "resumed from $WORK/auto/step_00000008 at step 8"
for d in "$WORK"/auto/step_*; do printf 'x' >> "$d/rank_00000.safetensors"; done
run_expect 2 "$STRATA" train --config "$WORK/auto.yaml" --set train.iters=12
expect_contains "$OUT" "no checkpoint in $WORK/auto loads whole and finite"

# 4. Metrics that cannot be written.
cfg devfull "train: {iters: 3}" "logging: {metrics_file: /dev/full}"
run_expect 2 "$STRATA" train --config "$WORK/devfull.yaml"
expect_contains "$OUT" "logging.metrics_file: writing '/dev/full' failed: No space left on device"
if unshare -m true 2>/dev/null; then
  cfg mfull "train: {iters: 100000, seed: 3}" "checkpoint: {dir: \"$WORK/mfull\"}" \
    "logging: {metrics_file: \"$WORK/mdisk/m.jsonl\"}"
  mkdir -p "$WORK/mdisk"
  set +e
  OUT=$(unshare -m bash -c "mount -t tmpfs -o size=40k tmpfs '$WORK/mdisk' && '$STRATA' train --config '$WORK/mfull.yaml'" 2>&1)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "$OUT" | tail; fail "metrics on a full disk: exit $rc, expected 2"; }
  expect_contains "$OUT" "failed: No space left on device"
  stopped=$(grep -o 'stopping after step [0-9]*' <<<"$OUT" | grep -o '[0-9]*$')
  [ "$(cat "$WORK/mfull/latest")" = "$(printf 'step_%08d' "$stopped")" ] || fail "no checkpoint of step $stopped"
fi

# 5. A shard cut short under the run.
cp -r "$WORK/data" "$WORK/cut"
cfg cut "train: {iters: 100000}" "logging: {metrics_file: \"$WORK/cut.jsonl\"}"
sed -i "s|^data: .*|data: {train: \"$WORK/cut/train_*.bin\", shuffle: true}|" "$WORK/cut.yaml"
"$STRATA" train --config "$WORK/cut.yaml" > "$WORK/cut.log" 2>&1 &
pid=$!
wait_for_train_record "$WORK/cut.jsonl"
truncate -s 2048 "$WORK"/cut/train_*.bin
set +e; wait "$pid"; rc=$?; set -e
tail -n 1 "$WORK/cut.log"
[ "$rc" -eq 2 ] || fail "a shard cut short: exit $rc, expected 2"
grep -q "error: data shard $WORK/cut/train_000000.bin changed while this run read it" "$WORK/cut.log" ||
  fail "the cut shard is not named"

# 6. A model that cannot fit.
cfg huge "train: {iters: 2}"
run_expect 2 "$STRATA" train --config "$WORK/huge.yaml" --set model.n_layer=10000 --set model.d_model=768
expect_contains "$OUT" "the model does not fit: each rank needs about"
expect_contains "$OUT" "parameters"
# One rank: a higher ZeRO stage alone would add buffers and shard nothing, so it is not advised.
expect_contains "$OUT" "more data-parallel ranks with a higher ZeRO stage, offloading to nvme, or more ranks"
echo ok
