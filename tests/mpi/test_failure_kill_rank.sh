#!/usr/bin/env bash
# A rank killed with SIGKILL while the others are in collectives (comm-check) ends the
# whole job within 60 s, with a non-zero exit and output naming the dead rank.
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
