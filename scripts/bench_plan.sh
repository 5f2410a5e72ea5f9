#!/usr/bin/env bash
# The planner's step time against the trainer's on this machine: for each rank count, a profile
# measured by `strata plan --calibrate` (under mpirun with that many ranks, at the quickstart
# model's shape), then for each micro-batch `strata plan --explain` beside a training run of the
# quickstart model (median step time of steps 4-15). Prints predicted, measured and their ratio
# per run, and writes them to OUTDIR/bench_plan.json.
#
# Usage: scripts/bench_plan.sh OUTDIR
# Environment:
#   STRATA_BUILD_DIR  build folder with bin/strata (default build)
#   BENCH_RANKS       rank counts (default "1 2")
#   BENCH_MICRO       micro-batch sizes (default "4 8 16 32")
#   MPIRUN_FLAGS      extra mpirun flags (default: --oversubscribe, and --allow-run-as-root as root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/bench_plan.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
strata="${STRATA_BUILD_DIR:-$root/build}/bin/strata"
[ -x "$strata" ] || { echo "bench_plan: $strata not found; build first (scripts/build.sh)"; exit 2; }
read -r -a ranks <<<"${BENCH_RANKS:-1 2}"
read -r -a micro <<<"${BENCH_MICRO:-4 8 16 32}"
default_flags="--oversubscribe"
[ "$(id -u)" -eq 0 ] && default_flags+=" --allow-run-as-root"
read -r -a mpi_flags <<<"${MPIRUN_FLAGS:-$default_flags}"

# A generated corpus (the quickstart's own is a download): the model and its shape are what matter.
for i in $(seq 1 20000); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times."; done \
  > "$out/corpus.txt"
"$strata" data encode --input "$out/corpus.txt" --out "$out/data" --val-fraction 0.05 >/dev/null
sed -e "s#data/kjv/train_\*.bin#$out/data/train_*.bin#; s#data/kjv/val_\*.bin#$out/data/val_*.bin#" \
  "$root/configs/quickstart.yaml" > "$out/quickstart.yaml"

launch() {
  local np="$1"; shift
  if [ "$np" -eq 1 ]; then "$strata" "$@"; else mpirun "${mpi_flags[@]}" -np "$np" "$strata" "$@"; fi
}
results=()
for np in "${ranks[@]}"; do
  launch "$np" plan --calibrate --config "$out/quickstart.yaml" --out "$out/calibrated_np$np.yaml" | tail -n 1
  for mb in "${micro[@]}"; do
    sets=(--set "train_micro_batch_size_per_gpu=$mb" --set train.iters=15 --set train.eval_interval=0
          --set logging.sample_interval=0 --set checkpoint.save_interval=0 --set "checkpoint.dir=$out/ck_${np}_$mb"
          --set checkpoint.resume=none --set checkpoint.overwrite=true)
    launch "$np" train --config "$out/quickstart.yaml" "${sets[@]}" \
      --set "logging.metrics_file=$out/train_${np}_$mb.jsonl" > "$out/train_${np}_$mb.log" 2>&1
    "$strata" plan --config "$out/quickstart.yaml" "${sets[@]}" --gpus "$np" --hardware "$out/calibrated_np$np.yaml" \
      --explain --json > "$out/plan_${np}_$mb.json"
    results+=("$np $mb")
  done
done
python3 - "$out" "${results[@]}" <<'PY'
import json, statistics, sys
out, rows = sys.argv[1], []
for item in sys.argv[2:]:
    np, mb = item.split()
    with open(f"{out}/train_{np}_{mb}.jsonl") as f:
        steps = [r["step_time_s"] for r in map(json.loads, f) if r["type"] == "train"][3:]
    measured = statistics.median(steps)
    with open(f"{out}/plan_{np}_{mb}.json") as f:
        predicted = json.load(f)["step_time_s"]
    rows.append({"ranks": int(np), "micro_batch": int(mb), "measured_s": measured, "predicted_s": predicted,
                 "ratio": predicted / measured})
    print(f"ranks {np} micro-batch {mb:>3}: predicted {predicted:.4f} s, measured {measured:.4f} s, "
          f"ratio {predicted / measured:.2f}")
worst = max(abs(r["ratio"] - 1) for r in rows)
print(f"largest difference: {100 * worst:.1f}%")
with open(f"{out}/bench_plan.json", "w") as f:
    json.dump({"runs": rows, "largest_difference": worst}, f, indent=2)
PY
