#!/usr/bin/env bash
# A rank that stops answering (SIGSTOP: alive but stalled) must not hang the job: the
# others' communication timeout (STRATA_COMM_TIMEOUT_S) aborts it, naming the silent rank.
source "$(dirname "$0")/../lib/common.sh"
source "$(dirname "$0")/../mpi_unit/failure_helpers.sh"

export STRATA_COMM_TIMEOUT_S=3
start_job "$WORK/out.txt" -np 4 "$STRATA" comm-check --seconds 300 --bytes 65536
victim="$(rank_pid 2)"
sleep 0.5
kill -STOP "$victim"
rc=0; wait_job 60 || rc=$?
kill -CONT "$victim" 2>/dev/null || true
out="$(cat "$WORK/out.txt")"
[ "$rc" -ne 0 ] || { echo "$out"; fail "job exited 0 with rank 2 stalled"; }
expect_contains "$out" "communication timeout"
# A peer names rank 2 as the one it waits for: its data has not arrived, or it has not taken
# the peer's (which of the two depends on where in the collective rank 2 was stopped); ranks
# are named with their hosts once the banner has gathered them.
grep -E '^\[rank [013]\] error: communication timeout.*(no data yet from|our data not yet received by)( world rank [0-9]+( \([^)]*\))?,)* world rank 2\b' \
  <<<"$out" >/dev/null || { echo "$out"; fail "no peer names world rank 2 as the one it waits for"; }
echo "ok: job ended (exit $rc) after $JOB_SECONDS s, naming rank 2"
