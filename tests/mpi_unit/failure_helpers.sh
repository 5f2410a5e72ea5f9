# Helpers for the failure tests in tests/mpi (sourced after ../lib/common.sh): run an mpirun job in the
# background, find one rank's process, and wait for the job with a deadline.

# start_job LOG MPIRUN_ARGS...: starts mpirun in the background; waits until rank 0 has
# printed a line containing $START_MARKER (default "comm-check:"), i.e. every rank is past
# MPI start-up and communicating. Any earlier output (library warnings) does not count.
start_job() {
  local log="$1"; shift
  "$MPIRUN" "${MPI_FLAGS[@]}" "$@" >"$log" 2>&1 &
  JOB_PID=$!
  JOB_START=$SECONDS
  trap 'kill -TERM "$JOB_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  for _ in $(seq 1 300); do
    grep -qF -- "${START_MARKER:-comm-check:}" "$log" && return 0
    kill -0 "$JOB_PID" 2>/dev/null || { cat "$log"; fail "job ended before it started communicating"; }
    sleep 0.1
  done
  cat "$log"; fail "job did not print '${START_MARKER:-comm-check:}' within 30 s"
}

# parent_of PID: sets PARENT to its parent's process id, read from /proc directly (no procps tools
# needed, and no subshell: rank_pid reads every process's).
parent_of() {
  local stat
  PARENT=""
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat="${stat##*) }"  # after the command name: "STATE PPID ..."
  stat="${stat#* }"
  PARENT="${stat%% *}"
}

# rank_pid R: the process of world rank R: a child of mpirun (or, when the job is
# launch/strata-mpirun, of its mpirun) whose environment says so.
rank_pid() {
  local dir pid
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    parent_of "$pid" || continue
    [ "$PARENT" = "$JOB_PID" ] || { parent_of "$PARENT" && [ "$PARENT" = "$JOB_PID" ]; } || continue
    if tr '\0' '\n' <"$dir/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return 0
    fi
  done
  fail "no process found for rank $1"
}

# wait_job LIMIT: waits for the job; fails the test if it outlives LIMIT seconds (a hang).
# Returns the job's exit code; sets JOB_SECONDS.
wait_job() {
  local limit="$1"
  while kill -0 "$JOB_PID" 2>/dev/null; do
    if [ $((SECONDS - JOB_START)) -gt "$limit" ]; then
      kill -KILL "$JOB_PID" 2>/dev/null || true
      fail "job still running after $limit s: a dead or stalled rank left the others hanging"
    fi
    sleep 0.2
  done
  JOB_SECONDS=$((SECONDS - JOB_START))
  local rc=0
  wait "$JOB_PID" || rc=$?
  return "$rc"
}
