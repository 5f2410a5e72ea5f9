#!/usr/bin/env bash
# Errors that only some ranks see (nodes that do not share files, or are set up differently)
# end the whole job with exit code 2 and the failing rank's message, in seconds, instead of
# leaving the other ranks blocked in a collective. Ranks get different working directories
# (set per rank by a script), so relative paths name different files on each rank, as
# they would on nodes without a shared file system. Every run is under a time limit: a hang
# fails the test.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
mkdir -p "$WORK/a" "$WORK/b"
write_small_config "$WORK/a/cfg.yaml" "$WORK/data" "train: {iters: 4, seed: 3}"

# mixed SETUP0 SETUP1 CMD...: two ranks of CMD, rank 0 after the shell commands SETUP0 (its own
# working directory or environment) and rank 1 after SETUP1. One app context and a script doing
# the set-up, rather than an MPMD command line: Open MPI 5.0.7's mpirun crashes on those. A
# SETUP of nothing is `true` (a bare ":" would be mpirun's MPMD separator).
cat >"$WORK/per_rank" <<'SCRIPT'
#!/usr/bin/env bash
setup="$1"
[ "${OMPI_COMM_WORLD_RANK:?}" = 0 ] || setup="$2"
shift 2
eval "$setup" && exec "$@"
SCRIPT
chmod +x "$WORK/per_rank"
mixed() {
  run_expect 2 timeout 60 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 "$WORK/per_rank" "$@"
  if [ "${ABORT_OK:-0}" != 1 ] && grep -q "MPI_ABORT" <<<"$OUT"; then
    echo "$OUT" >&2
    fail "the job was aborted instead of ending cleanly"
  fi
}

# 1. The config file exists on rank 0's node only.
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config cfg.yaml
expect_contains "$OUT" "reading the config: failed on rank 1 of 2 only; rank 1 on"
expect_contains "$OUT" "config file 'cfg.yaml': cannot open it"

# 1b. Each node has its own copy of the config, and the copies differ.
sed 's|^train: .*|train: {iters: 5, seed: 3}|' "$WORK/a/cfg.yaml" > "$WORK/b/cfg.yaml"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config cfg.yaml
expect_contains "$OUT" "config cfg.yaml: rank 1 resolved another config than rank 0"
rm "$WORK/b/cfg.yaml"

# 2. The data exists on rank 1's node only (the same config everywhere, a relative data path).
cp -r "$WORK/data" "$WORK/b/data"
sed 's|^data: .*|data: {train: "data/train_*.bin"}|' "$WORK/a/cfg.yaml" > "$WORK/rel.yaml"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/rel.yaml"
expect_contains "$OUT" "setting up devices and data: failed on rank 0 of 2 only; rank 0 on"
expect_contains "$OUT" "data.train: no files match 'data/train_*.bin'"
[ "$(grep -c 'error:' <<<"$OUT")" -eq 1 ] || { echo "$OUT" >&2; fail "expected the error once"; }

# 2b. Each node has its own copy of the data, and the copies differ.
mkdir -p "$WORK/other"
head -n 300 "$WORK/data/corpus.txt" > "$WORK/other/corpus.txt"
"$STRATA" data encode --input "$WORK/other/corpus.txt" --out "$WORK/b/data" --val-fraction 0 >/dev/null
mkdir -p "$WORK/a/data" && cp "$WORK/data"/train_*.bin "$WORK/a/data/"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/rel.yaml"
expect_contains "$OUT" "data.train: rank 1 finds"
expect_contains "$OUT" "every rank must read the same data"
rm -rf "$WORK/a/data" "$WORK/b/data" && cp -r "$WORK/data" "$WORK/b/data"

# 3. Each rank has its own checkpoint.dir: rank 0 creates it at start-up and rank 1 cannot see it,
# so the run ends before its first step (not at its first save).
cp -r "$WORK/data" "$WORK/a/data"
sed 's|^train: .*|train: {iters: 4, seed: 3}\ncheckpoint: {dir: ckpt}|' "$WORK/rel.yaml" > "$WORK/ckpt.yaml"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/ckpt.yaml"
expect_contains "$OUT" "checking checkpoint.dir: failed on rank 1 of 2 only"
expect_contains "$OUT" "checkpoint.dir ckpt: does not exist (is it on a file system every rank shares?)"
! grep -q "step 1/" <<<"$OUT" || fail "trained before the checkpoint.dir check"
# ... and when rank 1 has a folder of its own, the save cannot complete there.
rm -rf "$WORK/a/ckpt" && mkdir -p "$WORK/b/ckpt"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/ckpt.yaml"
expect_contains "$OUT" "failed on rank 1: it wrote nothing"

# 4. ... and with a checkpoint on rank 0's node only, the ranks would resume from different
# states (rank 0 at step 4, rank 1 from fresh weights).
run_expect 0 timeout 60 "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 -wdir "$WORK/a" "$STRATA" train --config "$WORK/ckpt.yaml"
rm -rf "$WORK/b/ckpt" && mkdir -p "$WORK/b/ckpt"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/ckpt.yaml" --set train.iters=6
expect_contains "$OUT" "the ranks found different checkpoints: rank 0 would start from a checkpoint at step 4, rank 1 from fresh weights"

# 5. A damaged checkpoint on rank 1's node only (resume: auto then finds no sound checkpoint).
rm -rf "$WORK/b/ckpt" && cp -r "$WORK/a/ckpt" "$WORK/b/ckpt"
echo '{}' > "$WORK/b/ckpt/step_00000004/manifest.json"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/ckpt.yaml" --set train.iters=6
expect_contains "$OUT" "resuming from ckpt/step_00000004: failed on rank 1 of 2 only"
expect_contains "$OUT" "not a strata checkpoint manifest"
expect_contains "$OUT" "no checkpoint in ckpt loads whole and finite"

# 5b. A manifest on rank 1's node that parses but lacks the training state's step (written as a
# format-1 manifest, which has no checksum seal: an edit to a sealed one is refused earlier).
python3 - "$WORK/b/ckpt/step_00000004/manifest.json" "$WORK/a/ckpt/step_00000004/manifest.json" <<'PY'
import json, sys
manifest = json.load(open(sys.argv[2]))
del manifest["global_meta"]["step"]
manifest["format_version"] = 1
json.dump(manifest, open(sys.argv[1], "w"))
PY
rm -f "$WORK/b/ckpt/step_00000004/manifest.checksum"
mixed "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/ckpt.yaml" --set train.iters=6
expect_contains "$OUT" "resuming from ckpt/step_00000004: failed on rank 1 of 2 only"
expect_contains "$OUT" "the manifest's training state is incomplete or malformed"

# 6. Ranks on different kinds of device (a node whose GPUs are not visible would do this).
mixed "export STRATA_SIMULATE_DEVICE=1" true "$STRATA" train --config "$WORK/a/cfg.yaml"
expect_contains "$OUT" "ranks would train on different devices (rank 0: simulated, rank 1: cpu)"

# 7. An error past the agreements, on one rank (its environment differs): that rank reports
# it and ends the job with code 2.
ABORT_OK=1 mixed true "export STRATA_COMM_TIMEOUT_S=abc" "$STRATA" train --config "$WORK/a/cfg.yaml"
expect_contains "$OUT" "[rank 1] error: environment variable STRATA_COMM_TIMEOUT_S='abc'"

# 8. An error every rank sees is reported once, and the job ends without an abort.
mixed true true "$STRATA" train --config "$WORK/missing.yaml"
[ "$(grep -c "error: config file" <<<"$OUT")" -eq 1 ] || { echo "$OUT" >&2; fail "expected one report"; }
# 9. Case 7 under launch/strata-mpirun at its default grace (60 s): mpirun would keep the other
# rank, waiting in a collective, for its whole kill sequence (120 s); the wrapper ends the job
# 10 s after the failing rank's report.
t0=$SECONDS
run_expect 2 timeout 60 env -u STRATA_STOP_GRACE_S "$SRC/launch/strata-mpirun" "${MPI_FLAGS[@]}" -np 2 \
  "$WORK/per_rank" true "export STRATA_COMM_TIMEOUT_S=abc" "$STRATA" train --config "$WORK/a/cfg.yaml"
expect_contains "$OUT" "[rank 1] error: environment variable STRATA_COMM_TIMEOUT_S='abc'"
[ $((SECONDS - t0)) -le 25 ] || fail "a one-rank user error under launch/strata-mpirun took $((SECONDS - t0)) s"
# 10. A shard cut short under the run on rank 1's node only, under launch/strata-mpirun: the rank
# that reads it ends at once (exit 2, naming the file) and leaves its exit file, so the wrapper
# ends the job within seconds instead of after mpirun's 120 s kill sequence.
sed 's|^train: .*|train: {iters: 100000, seed: 3}|' "$WORK/rel.yaml" > "$WORK/cut.yaml"
timeout 90 env -u STRATA_STOP_GRACE_S "$SRC/launch/strata-mpirun" "${MPI_FLAGS[@]}" -np 2 "$WORK/per_rank" \
  "cd $WORK/a" "cd $WORK/b" "$STRATA" train --config "$WORK/cut.yaml" --set logging.metrics_file="$WORK/cut.jsonl" \
  > "$WORK/cut.log" 2>&1 &
pid=$!
wait_for_train_record "$WORK/cut.jsonl"
truncate -s 2048 "$WORK"/b/data/train_*.bin
t0=$SECONDS
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" -eq 2 ] || { cat "$WORK/cut.log" >&2; fail "a shard cut short on one rank under the wrapper: exit $rc"; }
grep -q "\[rank 1\] error: data shard data/train_000000.bin changed while this run read it" "$WORK/cut.log" ||
  { cat "$WORK/cut.log" >&2; fail "the cut shard is not named"; }
[ $((SECONDS - t0)) -le 25 ] || fail "a shard cut short under launch/strata-mpirun took $((SECONDS - t0)) s"
echo "PASS: rank-local errors end the job with code 2 and the failing rank's message"
