#!/usr/bin/env bash
# checkpoint.dir is one run's folder, checked before any training it would lose:
# 1. a folder that cannot be used (read-only, under a read-only parent, a regular file, too
#    small for one checkpoint, `latest` a directory) ends the run with exit 2 before step 1,
#    naming the problem; a missing parent is created;
# 2. resume: none in a folder holding another run's checkpoints is refused (exit 2, saying how to
#    start over); checkpoint.overwrite: true deletes them and starts over;
# 3. a second job on a folder in use is refused at start, naming the holder; a killed job leaves
#    no stale lock;
# 4. resume: auto's fallback and keep_last consider only the folder's run: another run's
#    checkpoint (copied in, at a higher step, with `latest` damaged) is skipped, named, and never
#    pruned;
# 5. a run resumed from one of its own earlier checkpoints moves the later ones into abandoned/,
#    so keep_last and resume: auto's fallback follow the new line.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
cfg() {  # cfg NAME DIR [yaml lines...]
  write_small_config "$WORK/$1.yaml" "$WORK/data" "train: {iters: 4, seed: 3}" \
    "checkpoint: {dir: \"$2\", save_interval: 2}" "logging: {metrics_file: \"$WORK/$1.jsonl\"}" "${@:3}"
}
# refused NAME MESSAGE [--set ...]: exit 2 naming MESSAGE, and not one step trained.
refused() {
  local name="$1" message="$2"; shift 2
  rm -f "$WORK/$name.jsonl"
  run_expect 2 "$STRATA" train --config "$WORK/$name.yaml" "$@"
  expect_contains "$OUT" "$message"
  ! grep -q '"type":"train"' "$WORK/$name.jsonl" 2>/dev/null || fail "$name: trained before refusing"
  echo "$name: refused before step 1: $(grep -m1 -o 'error: .*' <<<"$OUT" | cut -c1-150)"
}

# 1. Folders that cannot be used.
touch "$WORK/a_file"
cfg regular "$WORK/a_file"
refused regular "checkpoint.dir $WORK/a_file: is not a directory"
mkdir -p "$WORK/latest_dir/latest"
cfg latest "$WORK/latest_dir"
refused latest "latest_dir/latest is not a regular file"
cfg parent "$WORK/missing/parent/ckpt"
run_expect 0 "$STRATA" train --config "$WORK/parent.yaml"
[ -f "$WORK/missing/parent/ckpt/step_00000004/manifest.json" ] || fail "a missing parent was not created"
if unshare -m true 2>/dev/null; then
  # Root ignores permission bits: read-only mounts and a small tmpfs in a private mount namespace.
  mkdir -p "$WORK/ro" "$WORK/small"
  cfg readonly "$WORK/ro"
  cfg ro_parent "$WORK/ro/sub/ckpt"
  cfg full "$WORK/small/ckpt"
  cat > "$WORK/mounts.sh" <<SH
set -u
mount --bind "$WORK/ro" "$WORK/ro" && mount -o remount,bind,ro "$WORK/ro" || exit 99
mount -t tmpfs -o size=96k tmpfs "$WORK/small" || exit 99
for n in readonly ro_parent full; do
  "$STRATA" train --config "$WORK/\$n.yaml" > "$WORK/\$n.log" 2>&1; echo \$? > "$WORK/\$n.rc"
done
SH
  unshare -m bash "$WORK/mounts.sh" || fail "could not mount in a private namespace"
  for n in readonly ro_parent full; do
    [ "$(cat "$WORK/$n.rc")" = 2 ] || { cat "$WORK/$n.log"; fail "$n: exit $(cat "$WORK/$n.rc"), expected 2"; }
    ! grep -q '"type":"train"' "$WORK/$n.jsonl" 2>/dev/null || fail "$n: trained before refusing"
    echo "$n: refused before step 1: $(grep -m1 -o 'error: .*' "$WORK/$n.log" | cut -c1-150)"
  done
  grep -q "checkpoint.dir $WORK/ro: cannot be written to (Read-only file system)" "$WORK/readonly.log" ||
    fail "read-only: $(cat "$WORK/readonly.log")"
  grep -q "checkpoint.dir $WORK/ro/sub/ckpt: cannot be created (Read-only file system" "$WORK/ro_parent.log" ||
    fail "read-only parent: $(cat "$WORK/ro_parent.log")"
  grep -q "each checkpoint of this run needs about .* but the file system has .* free" "$WORK/full.log" ||
    fail "full: $(cat "$WORK/full.log")"
else
  echo "read-only and full folders: skipped (no mount namespaces here: needs root)"
fi

# 2. resume: none in a used folder.
cfg used "$WORK/used"
run_expect 0 "$STRATA" train --config "$WORK/used.yaml"
run_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$WORK/used/run.json")"
refused used "checkpoint.dir $WORK/used holds the checkpoints of another run (run $run_id, newest $WORK/used/step_00000004)" \
  --set checkpoint.resume=none
expect_contains "$OUT" "set checkpoint.overwrite: true to delete them and start over"
# Without run.json (a folder from before run ids) its checkpoints are still another run's.
mv "$WORK/used/run.json" "$WORK/used.run.json"
refused used "checkpoint.dir $WORK/used holds the checkpoints of another run" --set checkpoint.resume=none
mv "$WORK/used.run.json" "$WORK/used/run.json"
mkdir -p "$WORK/used/abandoned" && cp -r "$WORK/used/step_00000002" "$WORK/used/abandoned/"
run_expect 0 "$STRATA" train --config "$WORK/used.yaml" --set checkpoint.resume=none --set checkpoint.overwrite=true \
  --set train.iters=2
expect_contains "$OUT" "checkpoint.overwrite: deleted the previous run's 2 checkpoint(s) and the 1 it had set aside in abandoned/ and its records in $WORK/used"
[ ! -d "$WORK/used/abandoned" ] || fail "overwrite kept the old run's abandoned checkpoints"
[ ! -d "$WORK/used/step_00000004" ] || fail "overwrite kept the old run's step 4"
new_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$WORK/used/run.json")"
[ "$new_id" != "$run_id" ] || fail "the new run kept the old run's id"
echo "used: refused, then started over with checkpoint.overwrite (run $run_id -> $new_id)"

# 3. Two jobs on one folder; a killed holder leaves no stale lock.
cfg busy "$WORK/busy"
sed -i 's|^train: .*|train: {iters: 100000000, seed: 3}|' "$WORK/busy.yaml"
"$STRATA" train --config "$WORK/busy.yaml" > "$WORK/busy.log" 2>&1 &
holder=$!
wait_for_train_record "$WORK/busy.jsonl"
cfg second "$WORK/busy"
refused second "checkpoint.dir $WORK/busy: in use by another strata job (pid $holder on $(hostname)"
# Refused before it writes anything, even into a metrics file it shares with the running job.
memory_records=$(grep -c '"type":"memory"' "$WORK/busy.jsonl")
run_expect 2 "$STRATA" train --config "$WORK/second.yaml" --set logging.metrics_file="$WORK/busy.jsonl"
[ "$(grep -c '"type":"memory"' "$WORK/busy.jsonl")" -eq "$memory_records" ] ||
  fail "the refused job wrote into the running job's metrics file"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
run_expect 0 "$STRATA" train --config "$WORK/second.yaml" --set checkpoint.resume=none --set checkpoint.overwrite=true
echo "busy: a second job refused while the first ran; after kill -9 the folder is free"

# 4. Another run's checkpoint in the folder: never resumed, never pruned.
cfg lineage "$WORK/lineage"
sed -i 's|save_interval: 2}|save_interval: 2, keep_last: 1}|' "$WORK/lineage.yaml"
run_expect 0 "$STRATA" train --config "$WORK/lineage.yaml"
cfg other "$WORK/other"
sed -i 's|^train: .*|train: {iters: 10, seed: 4}|' "$WORK/other.yaml"
run_expect 0 "$STRATA" train --config "$WORK/other.yaml"
cp -r "$WORK/other/step_00000010" "$WORK/lineage/"
echo "junk" > "$WORK/lineage/latest"
run_expect 0 "$STRATA" train --config "$WORK/lineage.yaml" --set train.iters=8
expect_contains "$OUT" "skipping $WORK/lineage/step_00000010: belongs to another run"
expect_contains "$OUT" "resumed from $WORK/lineage/step_00000004 at step 4"
[ -d "$WORK/lineage/step_00000010" ] || fail "keep_last pruned another run's checkpoint"
[ "$(ls -d "$WORK"/lineage/step_* | wc -l)" -eq 2 ] || fail "keep_last 1: $(ls "$WORK/lineage")"
[ "$(cat "$WORK/lineage/latest")" = step_00000008 ] || fail "latest: $(cat "$WORK/lineage/latest")"
echo "lineage: another run's step 10 skipped on resume and kept by keep_last 1"

# 5. A rewind: the run resumed from its own step 2 leaves its steps 4 and 6 behind. They move
# into abandoned/, latest names step 2; keep_last keeps the new line's newest two; a damaged
# latest then resumes the new line's newest, not the abandoned step 6.
cfg rewind "$WORK/rewind"
sed -i 's|^train: .*|train: {iters: 6, seed: 3}|' "$WORK/rewind.yaml"
run_expect 0 "$STRATA" train --config "$WORK/rewind.yaml"
run_expect 0 "$STRATA" train --config "$WORK/rewind.yaml" --set checkpoint.resume="$WORK/rewind/step_00000002" \
  --set train.iters=5 --set checkpoint.save_interval=1 --set checkpoint.keep_last=2 --set optimizer.params.lr=0.02
expect_contains "$OUT" "resuming at step 2 leaves this run's 2 later checkpoint(s) behind"
for moved in step_00000004 step_00000006; do
  [ -d "$WORK/rewind/abandoned/$moved" ] || fail "abandoned/ lacks $moved: $(ls "$WORK/rewind/abandoned" 2>&1)"
done
[ "$(cd "$WORK/rewind" && echo step_*)" = "step_00000004 step_00000005" ] || fail "keep_last 2: $(ls "$WORK/rewind")"
echo "junk" > "$WORK/rewind/latest"
run_expect 0 "$STRATA" train --config "$WORK/rewind.yaml" --set train.iters=6
expect_contains "$OUT" "resumed from $WORK/rewind/step_00000005 at step 5"
echo "rewind: steps 4 and 6 of the left line moved to abandoned/; the new line resumed at its step 5"

# A changed model fails every checkpoint of the run alike: resume: auto says the reason once and
# names the checkpoints it stopped on one line, not the same text per checkpoint.
run_expect 2 "$STRATA" train --config "$WORK/rewind.yaml" --set train.iters=8 --set model.n_layer=3
expect_contains "$OUT" "skipping $WORK/rewind/step_00000006: the checkpoint's model has n_layer 2 but the config asks for 3"
expect_contains "$OUT" "skipping $WORK/rewind/step_00000005: the same"
expect_contains "$OUT" "skipping $WORK/rewind/step_00000004: the same"
expect_contains "$OUT" "  $WORK/rewind/step_00000006, $WORK/rewind/step_00000005, $WORK/rewind/step_00000004: the checkpoint's"
[ "$(grep -c "but the config asks for 3" <<<"$OUT")" -eq 2 ] || fail "the mismatch was said more than twice: $OUT"
echo ok
