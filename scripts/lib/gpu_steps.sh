# shellcheck shell=bash disable=SC2154
# Shared by the one-call GPU scripts (gpu_timing.sh, gpu_profile.sh, gpu_ab.sh): each step runs
# under its own limit taken from one budget, its output in a log, one summary line per step.
# The caller sets: budget (seconds for the whole script), logs (folder of the logs), summary (file),
# and for train_strata root (the source tree), data (token shards) and out (metrics files).

note() { echo "$*" | tee -a "$summary"; }

# step NAME MAX_S CMD...: CMD's output into $logs/NAME.log under min(MAX_S, what is left).
step() {
  local name="$1" max="$2" limit=$((budget - SECONDS))
  shift 2
  [ "$limit" -gt "$max" ] && limit="$max"
  if [ "$limit" -lt 15 ]; then
    note "$(printf '%-24s SKIP (out of budget)' "$name")"
    return 2
  fi
  local start=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  note "$(printf '%-24s rc %-3s %4ss' "$name" "$rc" $((SECONDS - start)))"
  return "$rc"
}

# configure_and_build SOURCE BUILD NAME TARGETS...: a RelWithDebInfo CUDA build of TARGETS.
configure_and_build() {
  local source="$1" build="$2" name="$3"
  shift 3
  step "configure_$name" 120 cmake -S "$source" -B "$build" -G Ninja -DSTRATA_CUDA=ON -DSTRATA_EMULATOR=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo || return 1
  step "build_$name" 300 ninja -C "$build" -j "$(nproc)" "$@"
}

# train_strata BINARY NAME MAX_S CONFIG ITERS B GAS [--set ...]: one bf16 CUDA run of configs/CONFIG on
# the token shards in $data, one record per step into $out/NAME.jsonl, a line of figures into the summary.
train_strata() {
  local binary="$1" name="$2" max="$3" config="$4" iters="$5" b="$6" gas="$7"
  shift 7
  step "$name" "$max" "$binary" train --config "$root/configs/$config" --set device=cuda \
    --set bf16.enabled=true --set data.train="$data/bench_train_*.bin" --set data.val= \
    --set train.iters="$iters" --set train.eval_interval=0 --set checkpoint.dir= \
    --set checkpoint.save_interval=0 --set checkpoint.resume=none \
    --set train_micro_batch_size_per_gpu="$b" --set gradient_accumulation_steps="$gas" \
    --set steps_per_print=1 --set logging.metrics_file="$out/$name.jsonl" "$@"
  python3 - "$out/$name.jsonl" "$name" <<'PY' | tee -a "$summary"
import json, statistics, sys
try:
    records = [json.loads(line) for line in open(sys.argv[1])]
except OSError:
    records = []
train = [r for r in records if r["type"] == "train"]
timed = [r for r in train if r["step"] > 2] or train
if not timed:
    print(f"  {sys.argv[2]}: no train records"); sys.exit()
tps = statistics.median(r["tokens_per_s"] for r in timed)
mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
peak = max(r["peak_memory_bytes"] for r in train) / 2**30
mem = [r for r in records if r["type"] == "memory"]
host = [r for r in records if r["type"] == "host_memory"]
print(f"  {sys.argv[2]}: {tps:,.0f} tok/s, MFU {100 * statistics.median(mfu) if mfu else 0:.1f}%, "
      f"step {1e3 * statistics.median(r['step_time_s'] for r in timed):.0f} ms, peak {peak:.2f} GiB, "
      f"losses {[round(r['loss'], 6) for r in train]}")
for r in mem + host:
    print("  " + json.dumps(r)[:600])
PY
}
