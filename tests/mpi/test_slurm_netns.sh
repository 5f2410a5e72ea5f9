#!/usr/bin/env bash
# launch/slurm.sbatch on a real Slurm cluster of two nodes (network namespaces; see
# tests/lib/netns_nodes.sh and tests/lib/slurm_local.sh), 2 ranks on each. Checks:
# - srun: with the time limit near, Slurm itself sends the batch script SIGUSR1
#   (--signal=B:USR1@25 with --time=1 here: 5 to 35 s after the start, as
#   Slurm checks every 30 s); the ranks save and the script requeues the job; the
#   requeued run resumes from that checkpoint; preempted (scontrol requeue: SIGTERM to every
#   process of the job) it saves again and Slurm requeues it; the third run finishes. Its losses
#   equal an uninterrupted job's bit for bit, and the banner places ranks 0-1 on node0 and 2-3 on
#   node1; the uninterrupted job's first job step dies at start-up and is run again;
# - mpirun inside the allocation (STRATA_LAUNCHER=mpirun): the same placement, SIGUSR1 to the batch
#   script saves and requeues, and the requeued run resumes; equal to the uninterrupted job;
# - a config error ends the job with exit 2 before any job step, and it is not requeued.
# Needs root, `ip netns` and the distribution's Slurm packages (fetched with apt into .deps/slurm);
# skipped (exit 77) otherwise, saying why.
source "$(dirname "$0")/../lib/common.sh"
source "$(dirname "$0")/../lib/netns_nodes.sh"
source "$(dirname "$0")/../lib/slurm_local.sh"
netns_nodes 2
slurm_fetch
slurm_start "$WORK/slurm" 2

make_text_data "$WORK/data"
cd "$WORK"
# Exported to the jobs by sbatch: the binary, and Open MPI's TCP on the nodes' link only.
export STRATA_BIN="$STRATA" STRATA_COMM_TIMEOUT_S=60
export OMPI_MCA_btl_tcp_if_include=strata0 OMPI_MCA_oob_tcp_if_include=strata0
nodes=(--nodes=2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1)

# config NAME ITERS: the job's config (its checkpoints in NAME/, metrics in NAME.jsonl); called
# again while a job is pending, it changes the steps its next run trains to.
config() {
  write_small_config "$WORK/$1.yaml.new" "$WORK/data" "train: {iters: $2, seed: 3}" \
    "checkpoint: {dir: \"$WORK/$1\"}" "logging: {metrics_file: \"$WORK/$1.jsonl\"}"
  # Steps of a few tenths of a second: the first run stops after tens of them, not thousands.
  sed -i -e "s|^model: .*|model: {n_layer: 2, n_head: 4, d_model: 64, vocab_size: 256, seq_len: 64}|" \
    -e "s|^train_micro_batch_size_per_gpu: .*|train_micro_batch_size_per_gpu: 8|" \
    -e "s|^gradient_accumulation_steps: .*|gradient_accumulation_steps: 4|" "$WORK/$1.yaml.new"
  mv "$WORK/$1.yaml.new" "$WORK/$1.yaml"
}
# submit NAME [sbatch options...]: submits launch/slurm.sbatch on NAME.yaml; the job id in $JOB.
submit() {
  local name="$1"; shift
  JOB="$(slurm sbatch --parsable --job-name="$name" --output="$WORK/$name.out" "${nodes[@]}" "$@" \
    "$SRC/launch/slurm.sbatch" --config "$WORK/$name.yaml")"
  echo "submitted $name as job $JOB"
}
# wait_log NAME PATTERN [COUNT]: waits (up to 120 s, or until job $JOB has ended) until NAME.out
# has COUNT (default 1) lines matching PATTERN.
wait_log() {
  local n over
  for i in $(seq 1 1200); do
    # Whether the job has ended is asked before the last look at its output.
    over=0
    [ $((i % 10)) -ne 0 ] || ! ended "$(slurm_job_field "$JOB" JobState)" || over=1
    n="$(grep -cE "$2" "$WORK/$1.out" 2>/dev/null || true)"
    [ "${n:-0}" -ge "${3:-1}" ] && return 0
    [ "$over" -eq 0 ] || break
    sleep 0.1
  done
  cat "$WORK/$1.out" >&2 || true
  fail "$1.out never showed ${3:-1} line(s) matching: $2 (job $JOB: $(slurm_job_field "$JOB" JobState))"
}
ended() { case "$1" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac; return 1; }
# wait_done JOB: waits (up to 120 s) until the job has ended, its state in $STATE.
wait_done() {
  for _ in $(seq 1 600); do
    STATE="$(slurm_job_field "$1" JobState)"
    ended "$STATE" && return 0
    sleep 0.2
  done
  fail "job $1 did not end (state $STATE)"
}
latest_step() { local s; s="$(cat "$WORK/$1/latest")"; echo $((10#${s#step_})); }
# same_losses NAME REFERENCE: every step NAME's job recorded equals REFERENCE's bit for bit.
same_losses() {
  join <(train_losses "$WORK/$1.jsonl") <(train_losses "$WORK/$2.jsonl") | awk -v name="$1" '
    { n++; if ($2 != $3) { print name ": step " $1 ": " $2 " vs " $3; bad = 1 } }
    END { if (bad || n == 0) exit 1; print name ": " n " steps equal to the uninterrupted job bit for bit" }' ||
    fail "$1 differs from the uninterrupted job"
}

# srun: the time limit, a requeue, a preemption, the end.
config chain 100000
submit chain --time=1 --signal=B:USR1@25
wait_log chain "^slurm.sbatch: saved and stopped before the time limit: requeueing"
k1="$(latest_step chain)"
echo "run 1 saved step $k1 before the time limit and requeued the job"
grep -F "placement: node0: ranks 0-1; node1: ranks 2-3" "$WORK/chain.out" || fail "no placement over both nodes"
# More time for the next runs, so that only the preemption below stops the second.
slurm scontrol update JobId="$JOB" TimeLimit=10
wait_log chain "^resumed from $WORK/chain/step_$(printf %08d "$k1") at step $k1"
for _ in $(seq 1 600); do
  [ "$(train_losses "$WORK/chain.jsonl" | tail -n 1 | cut -d' ' -f1)" -ge $((k1 + 2)) ] && break
  sleep 0.1
done
slurm scontrol requeue "$JOB"
wait_log chain "^slurm.sbatch: saved and stopped after SIGTERM"
k2="$(latest_step chain)"
[ "$k2" -gt "$k1" ] || fail "the preempted run saved step $k2, not after $k1"
echo "run 2 resumed at step $k1, was preempted and saved step $k2"
config chain $((k2 + 3))
wait_log chain "^slurm.sbatch: training finished"
wait_done "$JOB"
[ "$STATE" = COMPLETED ] || fail "job $JOB ended $STATE"
expect_contains "$(cat "$WORK/chain.out")" "resumed from $WORK/chain/step_$(printf %08d "$k2") at step $k2"
[ "$(slurm_job_field "$JOB" Restarts)" = 2 ] || fail "job $JOB restarted $(slurm_job_field "$JOB" Restarts) times, not 2"
echo "run 3 resumed at step $k2 and finished at step $((k2 + 3)); job $JOB COMPLETED after 2 requeues"

# The uninterrupted job, as long as the chain; its first job step dies at start-up (rank 3 is
# killed before MPI starts, as a crash in MPI_Init would end it), so the script runs it again.
cat >"$WORK/crash_once" <<EOF
#!/bin/sh
if [ "\$1" = train ] && [ "\${SLURM_PROCID:-}" = 3 ] && mkdir "$WORK/crashed" 2>/dev/null; then kill -SEGV \$\$; fi
exec "$STRATA" "\$@"
EOF
chmod +x "$WORK/crash_once"
config whole $((k2 + 3))
STRATA_BIN="$WORK/crash_once" submit whole --time=10
wait_done "$JOB"
[ "$STATE" = COMPLETED ] || { cat "$WORK/whole.out"; fail "the uninterrupted job ended $STATE"; }
expect_contains "$(cat "$WORK/whole.out")" \
  "before every rank was through MPI's start-up: running it again in 10 s (start-up retry 1 of STRATA_STARTUP_RETRIES=1)"
[ "$(grep -c "^slurm.sbatch: running:" "$WORK/whole.out")" = 2 ] || fail "the job step did not run twice"
[ ! -e "$WORK/.strata-started.$JOB" ] || fail "the start-up marker was left behind"
same_losses chain whole

# mpirun inside the allocation: SIGUSR1 to the batch script, as --signal=B:USR1 sends it.
config mpirun 100000
STRATA_LAUNCHER=mpirun submit mpirun --time=10
wait_log mpirun '^step +[0-9]+/' 2
expect_contains "$(cat "$WORK/mpirun.out")" "placement: node0: ranks 0-1; node1: ranks 2-3"
slurm scancel --batch --signal=USR1 "$JOB"
wait_log mpirun "^slurm.sbatch: saved and stopped before the time limit: requeueing"
m1="$(latest_step mpirun)"
config mpirun $((m1 + 2))
wait_log mpirun "^slurm.sbatch: training finished"
wait_done "$JOB"
[ "$STATE" = COMPLETED ] || fail "the mpirun job ended $STATE"
expect_contains "$(cat "$WORK/mpirun.out")" "resumed from $WORK/mpirun/step_$(printf %08d "$m1") at step $m1"
echo "mpirun: saved step $m1 on SIGUSR1, requeued, resumed and finished"
[ $((m1 + 2)) -le $((k2 + 3)) ] || fail "the mpirun job ran past the uninterrupted one ($((m1 + 2)) > $((k2 + 3)))"
same_losses mpirun whole

# A config error: exit 2 before any step, no requeue.
config broken 10
sed -i 's/^train_micro_batch_size_per_gpu: .*/train_micro_batch_size_per_gpu: 0/' "$WORK/broken.yaml"
submit broken --time=10
wait_done "$JOB"
[ "$STATE" = FAILED ] || fail "the broken job ended $STATE"
[ "$(slurm_job_field "$JOB" ExitCode)" = "2:0" ] || fail "the broken job's exit code is $(slurm_job_field "$JOB" ExitCode)"
[ "$(slurm_job_field "$JOB" Restarts)" = 0 ] || fail "the broken job was requeued"
expect_contains "$(cat "$WORK/broken.out")" "train_micro_batch_size_per_gpu"
expect_contains "$(cat "$WORK/broken.out")" "the config does not validate for 4 ranks: the job ends here"
! grep -q "^slurm.sbatch: running:" "$WORK/broken.out" || fail "the broken job started a job step"
echo "ok: a config error ends the job with exit 2 before any job step"
