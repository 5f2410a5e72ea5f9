#!/usr/bin/env bash
# scripts/sweep.sh: a 2 × 2 grid of ZeRO stage × micro-batch on 2 ranks runs every point in its
# own folder and writes summary.csv/summary.md with one row per point (axes, losses, tokens/s,
# memory, step time, status); a re-run skips the finished points. A --grid file with a point
# whose config is invalid records that point's exit code (2) and error line and goes on with
# the next without running it (the sweep exits 1); a point whose status is lost, or that a signal
# stopped, resumes from its own checkpoint (the earlier log kept). --only names points and only
# they count for the exit status; the runs' --set reach checks and config.yaml. Folder names stay
# apart; repeated points and malformed grid lines are usage errors. A planned sweep plots.
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
write_small_config "$WORK/base.yaml" "$WORK/data" "train: {iters: 3, seed: 4, eval_interval: 3, eval_iters: 1}"
sweep=("$SRC/scripts/sweep.sh" --config "$WORK/base.yaml")
export STRATA MPIRUN_FLAGS="--oversubscribe"

run_expect 0 "${sweep[@]}" --out "$WORK/grid" --np 2 --axis zero_optimization.stage=0,1 \
  --axis train_micro_batch_size_per_gpu=2,4
expect_contains "$OUT" "sweep: 4 point(s) of base.yaml"
expect_contains "$OUT" "sweep: 4 point(s), 0 not finished"
for name in stage-0__train_micro_batch_size_per_gpu-2 stage-1__train_micro_batch_size_per_gpu-4; do
  [ -f "$WORK/grid/$name/metrics.jsonl" ] || fail "no metrics for $name"
  grep -q "layout: 2 rank(s)" "$WORK/grid/$name/train.log" || fail "$name did not run on 2 ranks"
done
python3 - "$WORK/grid/summary.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["zero_optimization.stage"], r["train_micro_batch_size_per_gpu"]) for r in rows] == \
    [("0", "2"), ("0", "4"), ("1", "2"), ("1", "4")], rows
for r in rows:
    assert r["status"] == "0" and r["steps"] == "3", r
    assert float(r["train_loss"]) > 0 and float(r["val_loss"]) > 0 and float(r["tokens_per_s"]) > 0, r
    assert float(r["peak_memory_mib"]) > 0 and float(r["step_time_ms"]) > 0 and r["error"] == "", r
# The same stage at two micro-batch sizes trains on different batches; the same micro-batch at
# two ZeRO stages gives the same losses (ZeRO changes memory, not arithmetic, here).
assert rows[0]["train_loss"] != rows[1]["train_loss"] and rows[0]["train_loss"] == rows[2]["train_loss"], rows
print("summary:", [(r["zero_optimization.stage"], r["train_micro_batch_size_per_gpu"], r["train_loss"]) for r in rows])
PY
grep -qF "| zero_optimization.stage | train_micro_batch_size_per_gpu | steps | train_loss |" "$WORK/grid/summary.md" ||
  fail "summary.md lacks its header"
lines=$(wc -l < "$WORK/grid/stage-0__train_micro_batch_size_per_gpu-2/metrics.jsonl")
run_expect 0 "${sweep[@]}" --out "$WORK/grid" --np 2 --axis zero_optimization.stage=0,1 \
  --axis train_micro_batch_size_per_gpu=2,4
[ "$(grep -c "finished before, skipped" <<<"$OUT")" -eq 4 ] || { echo "$OUT"; fail "a re-run ran finished points again"; }
[ "$(wc -l < "$WORK/grid/stage-0__train_micro_batch_size_per_gpu-2/metrics.jsonl")" -eq "$lines" ] ||
  fail "a skipped point wrote metrics"

# A listed grid with an invalid point in the middle.
cat > "$WORK/points.txt" <<'TXT'
# lr, and a clipping threshold with it
optimizer.params.lr=0.001 gradient_clipping=0.5
optimizer.params.lr=-1
optimizer.params.lr=0.01
TXT
run_expect 1 "${sweep[@]}" --out "$WORK/listed" --grid "$WORK/points.txt"
expect_contains "$OUT" "sweep: 3 point(s), 1 not finished"
expect_contains "$OUT" "sweep: [2/3] lr--1: the config does not load (exit 2), not run"
! grep -q "^strata " "$WORK/listed/lr--1/train.log" || fail "the point whose config does not load ran"
python3 - "$WORK/listed/summary.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["status"] for r in rows] == ["0", "2", "0"], rows
assert rows[0]["gradient_clipping"] == "0.5" and rows[1]["gradient_clipping"] == "", rows
assert "optimizer.params.lr" in rows[1]["error"], rows[1]
print("failed point recorded:", rows[1]["error"])
PY
# A point whose status was lost (a sweep killed mid-point) resumes from its checkpoint.
# Points --only leaves out (lr--1 failed) do not count against the exit status.
rm "$WORK/listed/lr-0.01/status"
run_expect 0 "${sweep[@]}" --out "$WORK/listed" --grid "$WORK/points.txt" --only lr-0.01
expect_contains "$OUT" "sweep: 3 point(s), 0 not finished of those --only names"
grep -q "resumed from $WORK/listed/lr-0.01/checkpoints/step_00000003" "$WORK/listed/lr-0.01/train.log" ||
  { cat "$WORK/listed/lr-0.01/train.log"; fail "the point did not resume from its checkpoint"; }
grep -q "^strata " "$WORK/listed/lr-0.01/train.log.prev" || fail "the first attempt's log was not kept"
# --only names a point of the sweep; the arguments after -- reach the checks and config.yaml.
run_expect 2 "${sweep[@]}" --out "$WORK/listed" --grid "$WORK/points.txt" --only lr-0.1
expect_contains "$OUT" "--only: no point is named 'lr-0.1'; the points: lr-0.001__gradient_clipping-0.5 lr--1 lr-0.01"
run_expect 1 "${sweep[@]}" --out "$WORK/typo" --axis train.seed=4 -- --set train.itres=2
expect_contains "$OUT" "train.itres: unknown key; did you mean iters?"
# The checks see the sweep's own checkpoint.dir (save_interval needs one).
run_expect 0 "${sweep[@]}" --out "$WORK/extra" --axis train.seed=4 -- --set train.iters=2 --set checkpoint.save_interval=2
grep -q "^  iters: 2$" "$WORK/extra/seed-4/config.yaml" || fail "config.yaml lacks the run's own --set: $(cat "$WORK/extra/seed-4/config.yaml")"
! grep -q "does not load" <<<"$OUT" || fail "a point's check failed: $OUT"
# Two points whose short names meet take their whole keys; a grid written on Windows reads the
# same; a point listed twice, or a word that is not KEY=VALUE, is a usage error.
printf 'fp16.enabled=false\r\nbf16.enabled=false\r\n' > "$WORK/clash.txt"
run_expect 0 "${sweep[@]}" --out "$WORK/clash" --grid "$WORK/clash.txt"
for name in fp16.enabled-false bf16.enabled-false; do
  [ -f "$WORK/clash/$name/metrics.jsonl" ] || fail "two points shared a folder: $(ls "$WORK/clash")"
done
printf 'train.seed=4\ntrain.seed=4\n' > "$WORK/twice.txt"
run_expect 2 "${sweep[@]}" --out "$WORK/twice" --grid "$WORK/twice.txt"
expect_contains "$OUT" "the point 'train.seed=4' comes twice"
printf 'train.seed=4\ntrain.seed=5 train_micro_batch_size_per_gpu 4\n' > "$WORK/word.txt"
run_expect 2 "${sweep[@]}" --out "$WORK/word" --grid "$WORK/word.txt"
expect_contains "$OUT" "line 2: 'train_micro_batch_size_per_gpu' is not KEY=VALUE"
run_expect 2 "${sweep[@]}" --out "$WORK/nogrid" --grid "$WORK/missing.txt"
[ ! -e "$WORK/nogrid" ] || fail "a usage error left $WORK/nogrid behind"
# Ctrl-C in a terminal (SIGINT to the sweep's process group): the running point saves and stops
# (status "stopped", a checkpoint of its last step), the sweep stops (exit 1: not every point
# finished); the same command resumes the point (here to one step past its save, which finishes it).
write_small_config "$WORK/long.yaml" "$WORK/data" "train: {iters: 100000000, seed: 4}"
in_session "$SRC/scripts/sweep.sh" --config "$WORK/long.yaml" --out "$WORK/stopped" --np 2 --axis train.seed=4,5 \
  > "$WORK/stopped.log" 2>&1 < /dev/null &
sweep_job=$!
wait_for_train_record "$WORK/stopped/seed-4/metrics.jsonl"
kill -INT -- "-$sweep_job"
set +e; wait "$sweep_job"; set -e
grep -q "sweep: stopped by a signal; re-run the same command to continue" "$WORK/stopped.log" ||
  { cat "$WORK/stopped.log"; fail "the sweep did not stop"; }
[ "$(cat "$WORK/stopped/seed-4/status")" = stopped ] || fail "the stopped point: status $(cat "$WORK/stopped/seed-4/status")"
grep -q "saved checkpoint" "$WORK/stopped/seed-4/train.log" || fail "the stopped point saved nothing"
[ ! -e "$WORK/stopped/seed-5/status" ] || fail "the sweep went on to the next point"
saved=$(sed -n 's/.*stopping after step \([0-9]*\).*/\1/p' "$WORK/stopped/seed-4/train.log" | tail -1)
run_expect 0 "$SRC/scripts/sweep.sh" --config "$WORK/long.yaml" --out "$WORK/stopped" --np 2 --axis train.seed=4 \
  -- --set train.iters=$((saved + 1))
grep -q "resumed from $WORK/stopped/seed-4/checkpoints/step_$(printf %08d "$saved")" "$WORK/stopped/seed-4/train.log" ||
  { cat "$WORK/stopped/seed-4/train.log"; fail "the stopped point was not resumed"; }
[ "$(cat "$WORK/stopped/seed-4/status")" = 0 ] || fail "the resumed point: status $(cat "$WORK/stopped/seed-4/status")"
echo "Ctrl-C: the running point saved and stopped, the sweep stopped; a re-run resumed the point"
# --from-plan: the planner's best layouts for the ranks, predicted beside measured.
run_expect 0 "${sweep[@]}" --out "$WORK/planned" --np 2 --from-plan 2 --hardware cpu-2core
run_expect 0 "$STRATA" plan --config "$WORK/base.yaml" --gpus 2 --hardware cpu-2core --top 2 --json
python3 - "$WORK/planned/summary.csv" "$OUT" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
plan = json.loads(sys.argv[2])["layouts"]
assert [r["layout"] for r in rows] == [l["layout"] for l in plan], (rows, plan)
for r, l in zip(rows, plan):
    assert r["status"] == "0" and float(r["tokens_per_s"]) > 0, r
    assert r["predicted_tokens_per_s"] == f"{l['tokens_per_s']:.0f}", (r, l)
    assert r["predicted_memory_mib"] == f"{l['memory_bytes']['total'] / 2**20:.0f}", (r, l)
print("--from-plan:", [r["layout"] for r in rows])
PY
# Its charts: the layout is the sweep's one axis.
run_expect 0 "$SRC/scripts/plot.sh" --out "$WORK/planned_charts" --sweep "$WORK/planned"
for chart in throughput memory; do
  [ -s "$WORK/planned_charts/$chart.png" ] || fail "no $chart chart for the planned sweep"
done
# Usage errors are exit 2 before anything runs.
run_expect 2 "${sweep[@]}" --out "$WORK/bad"
expect_contains "$OUT" "give at least one --axis KEY=V1,V2, a --grid FILE or --from-plan K"
run_expect 2 "${sweep[@]}" --out "$WORK/bad" --from-plan 2 --axis train.seed=1
expect_contains "$OUT" "give one of --axis, --grid and --from-plan"
run_expect 2 "${sweep[@]}" --out "$WORK/bad" --from-plan some
expect_contains "$OUT" "--from-plan: 'some' is not a count or all"
run_expect 2 "${sweep[@]}" --out "$WORK/bad" --np 0 --axis train.seed=1
expect_contains "$OUT" "--np: '0' is not a positive number of ranks"
echo ok
