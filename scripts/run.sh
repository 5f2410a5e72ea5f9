#!/usr/bin/env bash
# Quickstart: installs dependencies, builds strata, encodes the King James Bible (from
# Debian's bible-kjv package) into byte-level shards once, trains configs/quickstart.yaml and
# draws its loss curve (runs/quickstart/loss.png).
# Usage: scripts/run.sh [-np N] [--set key=value ...]   (N ranks, default 2: data parallelism
# over two processes uses two cores better than one process's BLAS threads)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
ranks=2
if [ "${1:-}" = "-np" ]; then ranks="$2"; shift 2; fi

scripts/install-deps.sh
# The strata binary alone (scripts/test.sh builds the tests and the GPU emulator too).
STRATA_CMAKE_ARGS="${STRATA_CMAKE_ARGS:-}" STRATA_NINJA_ARGS="${STRATA_NINJA_ARGS:-strata}" scripts/build.sh
strata="${STRATA_BUILD_DIR:-$root/build}/bin/strata"

if [ ! -f data/kjv/train_000000.bin ]; then
  mkdir -p data/kjv
  echo "run.sh: extracting the King James Bible (bible-kjv)"
  bible -f Gen1:1-Rev22:21 > data/kjv/kjv.txt
  "$strata" data encode --input data/kjv/kjv.txt --out data/kjv --val-fraction 0.02
fi

mpi_args=(-np "$ranks")
[ "$(id -u)" -eq 0 ] && mpi_args+=(--allow-run-as-root)
[ "$ranks" -gt "$(nproc)" ] && mpi_args+=(--oversubscribe)
rc=0
# Through launch/strata-mpirun: Ctrl-C (or closing the terminal) saves a checkpoint and stops;
# the same command resumes from it.
launch/strata-mpirun "${mpi_args[@]}" "$strata" train --config configs/quickstart.yaml "$@" || rc=$?
# The loss curve of the run (the config's metrics file), whatever the outcome.
metrics=runs/quickstart/metrics.jsonl
if [ -f "$metrics" ] && scripts/plot.sh --out runs/quickstart "$metrics" >/dev/null; then
  echo "run.sh: loss curve in $root/runs/quickstart/loss.png"
fi
exit "$rc"
