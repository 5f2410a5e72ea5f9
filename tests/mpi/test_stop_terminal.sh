#!/usr/bin/env bash
# A job stopped the way people stop jobs keeps its work. A terminal sends Ctrl-C (SIGINT) or its
# hang-up (SIGHUP) to its whole foreground process group; here each job is started with setsid
# and the signal goes to its process group as a terminal would send it, or it runs under a real
# pseudo-terminal (an interactive bash in python's pty) that gets Ctrl-C typed or is closed.
# Through launch/strata-mpirun, at DP 2 and PP 2 x DP 2, with fast steps (a tiny model printing
# every step, its rank 0 writing as fast as it can) and slow ones (a second or more a step):
#  - the job exits 0 within 10 s of the signal, with a checkpoint of the last finished step;
#  - resumed, its losses equal an uninterrupted run's bit for bit;
#  - a pipeline step of thousands of micro-batches stops part-way, within 10 s;
#  - a second signal ends the job within 10 s and leaves the newest checkpoint whole (the same
#    command resumes from it).
source "$(dirname "$0")/../lib/common.sh"
make_text_data "$WORK/data"
LAUNCH="$SRC/launch/strata-mpirun"

# config NAME LAYOUT SPEED [yaml lines...]: LAYOUT dp2 | pp2dp2, SPEED fast | slow.
config() {
  local name="$1" layout="$2" speed="$3"; shift 3
  local lines=("checkpoint: {dir: \"$WORK/$name\", save_interval: 3}" "logging: {metrics_file: \"$WORK/$name.jsonl\"}"
    "train: {iters: 1000000, seed: 5}")
  [ "$layout" = pp2dp2 ] && lines+=("parallelism: {pipeline_model_parallel_size: 2}")
  write_small_config "$WORK/$name.yaml" "$WORK/data" "${lines[@]}" "$@"
  if [ "$speed" = slow ]; then
    sed -i "s|^model: .*|model: {n_layer: 2, n_head: 4, d_model: 64, vocab_size: 256, seq_len: 64}|" "$WORK/$name.yaml"
    sed -i "s|^train_micro_batch_size_per_gpu: .*|train_micro_batch_size_per_gpu: 8|" "$WORK/$name.yaml"
    sed -i "s|^gradient_accumulation_steps: .*|gradient_accumulation_steps: 16|" "$WORK/$name.yaml"
  fi
}
np_of() { [ "$1" = pp2dp2 ] && echo 4 || echo 2; }

# wait_steps METRICS N: until the metrics file holds N train records (up to 120 s).
wait_steps() {
  for _ in $(seq 1 1200); do
    [ "$(cat "$1" 2>/dev/null | grep -c '"type":"train"' || true)" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 never reached $2 steps"
}
last_step() { grep '"type":"train"' "$1" | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/'; }

# check_stopped NAME RC TOOK: exit 0 in time, latest = the last finished step, nothing partial.
check_stopped() {
  local name="$1" rc="$2" took="$3"
  tail -n 3 "$WORK/$name.log"
  [ "$rc" -eq 0 ] || fail "$name: exit $rc after the signal, expected 0"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 10 else 1)" "$took" || fail "$name: the stop took $took s"
  local step
  step="$(last_step "$WORK/$name.jsonl")"
  [ "$(cat "$WORK/$name/latest")" = "$(printf 'step_%08d' "$step")" ] ||
    fail "$name: latest is $(cat "$WORK/$name/latest"), the last finished step $step"
  [ -f "$WORK/$name/$(printf 'step_%08d' "$step")/manifest.json" ] || fail "$name: no manifest for step $step"
  ! ls -d "$WORK/$name"/*.tmp >/dev/null 2>&1 || fail "$name: a partial save was left"
  echo "$name: exit 0 after $took s, saved step $step"
}

# resume_equals NAME LAYOUT: resumes NAME for 2 more steps and compares every step's loss with
# an uninterrupted run of as many steps.
resume_equals() {
  local name="$1" layout="$2" np step
  np="$(np_of "$layout")"
  step="$(last_step "$WORK/$name.jsonl")"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set train.iters=$((step + 2))
  expect_contains "$OUT" "resumed from $WORK/$name/$(printf 'step_%08d' "$step") at step $step"
  run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np "$np" "$STRATA" train --config "$WORK/$name.yaml" \
    --set train.iters=$((step + 2)) --set checkpoint.dir="$WORK/$name.ref" \
    --set logging.metrics_file="$WORK/$name.ref.jsonl"
  [ "$(train_losses "$WORK/$name.jsonl")" = "$(train_losses "$WORK/$name.ref.jsonl")" ] ||
    fail "$name: the resumed losses differ from the uninterrupted run's"
  echo "$name: $((step + 2)) steps equal to the uninterrupted run bit for bit"
}

# group_stop NAME LAYOUT SPEED STEPS SIGNAL [SECOND]: starts the job in a session of its own,
# waits for STEPS finished steps, sends SIGNAL to its process group (and SECOND a second later).
group_stop() {
  local name="$1" layout="$2" speed="$3" steps="$4" sig="$5" second="${6:-}"
  [ -n "${CONFIGURED:-}" ] || config "$name" "$layout" "$speed"
  in_session "$LAUNCH" "${MPI_FLAGS[@]}" -np "$(np_of "$layout")" "$STRATA" train --config "$WORK/$name.yaml" \
    > "$WORK/$name.log" 2>&1 < /dev/null &
  local job=$!
  if [ "$steps" -gt 0 ]; then
    wait_steps "$WORK/$name.jsonl" "$steps"
  else  # the step-0 checkpoint (save_initial), then a moment into the first step
    for _ in $(seq 1 1200); do grep -q "saved checkpoint" "$WORK/$name.log" && break; sleep 0.1; done
    sleep 1
  fi
  local t0
  t0="$(date +%s.%N)"
  kill "-$sig" -- "-$job"
  if [ -n "$second" ]; then sleep 1; kill "-$second" -- "-$job"; fi
  set +e; wait "$job"; RC=$?; set -e
  TOOK="$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")"
}

# 1. The process group of a setsid job, as a terminal signals it.
group_stop fast_dp2_int dp2 fast 40 INT
check_stopped fast_dp2_int "$RC" "$TOOK"
resume_equals fast_dp2_int dp2
group_stop fast_pp_term pp2dp2 fast 40 TERM
check_stopped fast_pp_term "$RC" "$TOOK"
resume_equals fast_pp_term pp2dp2
group_stop slow_dp2_hup dp2 slow 2 HUP
check_stopped slow_dp2_hup "$RC" "$TOOK"
resume_equals slow_dp2_hup dp2
group_stop slow_pp_int pp2dp2 slow 2 INT
check_stopped slow_pp_int "$RC" "$TOOK"

# A pipeline step of 2000 micro-batches (minutes) stops part-way: the stages vote as their tables
# reach each micro-batch and stop together; the step is abandoned, the step-0 checkpoint kept.
config long_pp pp2dp2 slow
sed -i -e 's|save_interval: 3}|save_interval: 3, save_initial: true}|' \
  -e 's|^gradient_accumulation_steps: .*|gradient_accumulation_steps: 2000|' "$WORK/long_pp.yaml"
CONFIGURED=1 group_stop long_pp pp2dp2 slow 0 INT
check_stopped_at_zero() {  # NAME: the checkpoint of step 0 is the newest, whole
  [ "$(cat "$WORK/$1/latest")" = step_00000000 ] || fail "$1: latest is $(cat "$WORK/$1/latest")"
  ! ls -d "$WORK/$1"/*.tmp >/dev/null 2>&1 || fail "$1: a partial save was left"
}
tail -n 2 "$WORK/long_pp.log"
[ "$RC" -eq 0 ] || fail "long_pp: exit $RC"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 10 else 1)" "$TOOK" || fail "long_pp: the stop took $TOOK s"
grep -q "abandoned step 1 after [0-9]* of 2000 micro-batches" "$WORK/long_pp.log" || fail "long_pp: no abandoned step"
check_stopped_at_zero long_pp
echo "long_pp: exit 0 after $TOOK s, $(grep -o 'abandoned step 1 after [0-9]* of 2000 micro-batches' "$WORK/long_pp.log")"

# 2. A second signal: the job ends at once, the newest checkpoint stays whole. Each chunk's
# forward and backward is padded to 3 s (STRATA_PIPE_COST_MS), so the first stop takes a while;
# the user presses Ctrl-C again.
config twice pp2dp2 slow
sed -i -e 's|save_interval: 3}|save_interval: 3, save_initial: true}|' "$WORK/twice.yaml"
STRATA_PIPE_COST_MS=3000,3000 CONFIGURED=1 group_stop twice pp2dp2 slow 0 INT INT
tail -n 3 "$WORK/twice.log"
[ "$RC" -ne 0 ] || fail "a second signal: exit 0, expected the job killed"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 10 else 1)" "$TOOK" || fail "the second signal took $TOOK s"
expect_contains "$(cat "$WORK/twice.log")" "received again: stopping the ranks now"
check_stopped_at_zero twice
echo "twice: killed after $TOOK s (exit $RC); the checkpoint of step 0 stays the newest"
run_expect 0 "$MPIRUN" "${MPI_FLAGS[@]}" -np 4 "$STRATA" train --config "$WORK/twice.yaml" \
  --set train.iters=1 --set gradient_accumulation_steps=2
expect_contains "$OUT" "resumed from $WORK/twice/step_00000000 at step 0"

# 3. A real terminal: an interactive bash in a pseudo-terminal runs the job in the foreground;
# Ctrl-C is typed, or the terminal is closed (the shell and the job get SIGHUP). The exit code is
# recorded by a parent that survives the hang-up (its handlers, unlike an ignored signal, are
# not inherited by the job).
in_terminal() {  # in_terminal NAME LAYOUT SPEED STEPS ctrl-c|close
  local name="$1" layout="$2" speed="$3" steps="$4" action="$5"
  config "$name" "$layout" "$speed"
  python3 - "$WORK" "$name" "$action" "$steps" "$LAUNCH" "$(np_of "$layout")" "$STRATA" "${MPI_FLAGS[*]}" <<'PY'
import os, pty, shlex, sys, time
work, name, action, steps, launch, np, strata, flags = sys.argv[1:]
record = ("import signal, subprocess, sys; signal.signal(signal.SIGHUP, lambda *a: None); "
          "signal.signal(signal.SIGINT, lambda *a: None); rc = subprocess.call(sys.argv[2:]); "
          "open(sys.argv[1], 'w').write(str(rc))")
command = " ".join(["python3", "-c", shlex.quote(record), f"{work}/{name}.rc", launch, flags, "-np", np, strata,
                    "train", "--config", f"{work}/{name}.yaml", ">", f"{work}/{name}.log", "2>&1"])
pid, master = pty.fork()
if pid == 0:
    os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
def pump(seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            os.read(master, 65536)
        except OSError:
            return
os.write(master, (command + "\n").encode())
metrics = f"{work}/{name}.jsonl"
deadline = time.time() + 120
while time.time() < deadline:
    if os.path.exists(metrics) and open(metrics).read().count('"type":"train"') >= int(steps):
        break
    time.sleep(0.1)
else:
    sys.exit(f"FAIL: {name}: never reached {steps} steps")
t0 = time.time()
if action == "ctrl-c":
    os.write(master, b"\x03")
else:
    os.close(master)
while not os.path.exists(f"{work}/{name}.rc") and time.time() - t0 < 60:
    if action == "ctrl-c":
        pump(0.1)
    else:
        time.sleep(0.1)
took = time.time() - t0
open(f"{work}/{name}.took", "w").write(f"{took:.1f}")
PY
  [ -f "$WORK/$name.rc" ] || fail "$name: the job had not ended 60 s after the terminal's $action"
  check_stopped "$name" "$(cat "$WORK/$name.rc")" "$(cat "$WORK/$name.took")"
}
in_terminal tty_ctrl_c pp2dp2 fast 40 ctrl-c
resume_equals tty_ctrl_c pp2dp2
in_terminal tty_close dp2 slow 2 close
echo ok
