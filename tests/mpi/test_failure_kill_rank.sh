#!/usr/bin/env bash
# A rank killed with SIGKILL while the others are in collectives (comm-check) ends the
# whole job within 60 s, with a non-zero exit and output naming the dead rank; under
# launch/strata-mpirun (a 60 s grace, so mpirun's own kill sequence would take 120 s) within
# 20 s, with exit 137 and the wrapper naming the rank, which had started and left no exit file.
source "$(dirname "$0")/../lib/common.sh"
source "$(dirname "$0")/../mpi_unit/failure_helpers.sh"

start_job "$WORK/out.txt" -np 4 "$STRATA" comm-check --seconds 300 --bytes 65536
victim="$(rank_pid 2)"
sleep 0.5  # well inside the rounds: the others will block waiting for rank 2
kill -KILL "$victim"
rc=0; wait_job 60 || rc=$?
out="$(cat "$WORK/out.txt")"
[ "$rc" -ne 0 ] || { echo "$out"; fail "job exited 0 after rank 2 was killed"; }
grep -qE "rank 2[^0-9]" <<<"$out" || { echo "$out"; fail "output does not name rank 2"; }
echo "ok: job ended (exit $rc) after $JOB_SECONDS s, naming rank 2"

MPIRUN="$SRC/launch/strata-mpirun"
export STRATA_STOP_GRACE_S=60
start_job "$WORK/wrapped.txt" -np 3 "$STRATA" comm-check --seconds 300 --bytes 65536
victim="$(rank_pid 1)"
others=("$(rank_pid 0)" "$(rank_pid 2)")
sleep 0.5
kill -KILL "$victim"
rc=0; wait_job 20 || rc=$?
out="$(cat "$WORK/wrapped.txt")"
[ "$rc" -eq 137 ] || { echo "$out"; fail "launch/strata-mpirun: exit $rc after rank 1 was killed, expected 137"; }
expect_contains "$out" "strata-mpirun: rank 1 (pid $victim) has gone without an exit code"
for pid in "${others[@]}"; do
  state=""
  read -r state 2>/dev/null <"/proc/$pid/stat" || true
  state="${state##*) }"
  [[ -z "$state" || "$state" == [ZX]* ]] || fail "rank pid $pid still running after launch/strata-mpirun ended"
done
echo "ok: under launch/strata-mpirun the job ended (exit 137) after $JOB_SECONDS s, naming rank 1"
