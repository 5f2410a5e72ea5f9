# Shared helpers for strata's shell tests: a scratch dir, assertions, mpirun flags.
# Sourced by tests/{cli,mpi,reference}/test_*.sh, which get $1 = strata binary, $2 = source dir.
set -euo pipefail
STRATA="$1"
SRC="$2"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/strata-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
MPIRUN="${STRATA_MPIRUN:-mpirun}"
MPI_FLAGS=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI_FLAGS+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers often forbid CMA
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

fail() { echo "FAIL: $*" >&2; exit 1; }
# run_expect CODE CMD...: runs CMD, captures stdout+stderr in $OUT, checks the exit code.
run_expect() {
  local want="$1"; shift
  set +e
  OUT="$("$@" 2>&1)"
  local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || { echo "$OUT" >&2; fail "expected exit $want, got $rc: $*"; }
}
expect_contains() { grep -qF -- "$2" <<<"$1" || { echo "$1" >&2; fail "output lacks: $2"; }; }

# make_text_data DIR: a small byte-level corpus encoded into DIR/train_*.bin, DIR/val_*.bin.
make_text_data() {
  local dir="$1"
  mkdir -p "$dir"
  for i in $(seq 1 400); do
    echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times and rests."
  done > "$dir/corpus.txt"
  "$STRATA" data encode --input "$dir/corpus.txt" --out "$dir" --val-fraction 0.1 >/dev/null
}

# kill_after_checkpoint PID PATTERN CKPT_DIR: waits (up to 60 s) for the run PID (started in the
# background) to write CKPT_DIR/latest, then kills every process whose command line holds
# PATTERN with SIGKILL and waits until they are gone.
kill_after_checkpoint() {
  local job="$1" pattern="$2" dir="$3"
  for _ in $(seq 1 1200); do
    [ -f "$dir/latest" ] && break
    sleep 0.05
  done
  pkill -KILL -f "$pattern" || fail "the run ended before it could be killed"
  wait "$job" 2>/dev/null || true
  [ -f "$dir/latest" ] || fail "no checkpoint before the kill"
  for _ in $(seq 1 100); do pgrep -f "$pattern" >/dev/null || break; sleep 0.05; done
  echo "killed after $(cat "$dir/latest")"
}

# write_small_config FILE DATA_DIR [extra yaml lines...]: a tiny model that steps quickly.
write_small_config() {
  local file="$1" data="$2"; shift 2
  {
    echo "train_micro_batch_size_per_gpu: 4"
    echo "gradient_accumulation_steps: 2"
    echo "optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}"
    echo "gradient_clipping: 1.0"
    echo "steps_per_print: 1"
    echo "model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 256, seq_len: 32}"
    echo "data: {train: \"$data/train_*.bin\", val: \"$data/val_*.bin\"}"
    for line in "$@"; do echo "$line"; done
  } > "$file"
}

# train_losses FILE: "step loss" per train record of a metrics JSONL, the last record of each
# step winning (a resumed run repeats the steps after its checkpoint).
train_losses() {
  PYTHONPATH="$SRC/tests/lib" python3 -c '
import sys
from equivalence import losses
for step, loss in sorted(losses(sys.argv[1]).items()): print(step, repr(loss))
' "$1"
}

# wait_for_train_record METRICS: waits (up to 30 s) until the metrics file holds a train record.
wait_for_train_record() {
  for _ in $(seq 1 600); do
    grep -q '"type":"train"' "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "no train record in $1"
}

# stop_one_rank LOG METRICS CMD...: runs CMD (an mpirun line) in the background with its output
# in LOG, waits for the first train record in METRICS, sends SIGTERM to one rank only (the last
# child of mpirun), waits for the job and leaves its exit code in $RC.
stop_one_rank() {
  local log="$1" metrics="$2"; shift 2
  "$@" > "$log" 2>&1 &
  local launcher=$!
  wait_for_train_record "$metrics"
  local ranks
  ranks=$(pgrep -P "$launcher" || true)
  [ -n "$ranks" ] || fail "no rank processes under mpirun"
  kill -TERM "$(echo "$ranks" | tail -n 1)"
  set +e; wait "$launcher"; RC=$?; set -e
  tail -n 3 "$log"
}

# in_session CMD...: CMD as the leader of a session and process group of its own, as a terminal's
# shell starts a job: with SIGINT and SIGQUIT at their defaults (a script's background commands
# ignore them, and bash cannot trap a signal ignored when it started). Start it in the background
# (`in_session CMD &`; it execs, so $! is the session leader's pid).
in_session() {
  exec python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)
os.setsid()
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
}
