#!/usr/bin/env bash
# Runs an MPI Catch2 executable on N ranks: run_mpi_unit.sh N EXE [catch args...].
# Uses the same mpirun flags as the shell tests (tests/lib/common.sh).
set -euo pipefail
np="$1"; exe="$2"; shift 2
flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export STRATA_COMM_TIMEOUT_S="${STRATA_COMM_TIMEOUT_S:-30}"
exec "${STRATA_MPIRUN:-mpirun}" "${flags[@]}" -np "$np" "$exe" "$@"
