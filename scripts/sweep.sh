#!/usr/bin/env bash
# Config sweeps: runs strata once per point of a grid of config values, one after another, each
# in its own folder with its own metrics file and checkpoints, and writes a summary table.
#
# Usage: scripts/sweep.sh --config BASE.yaml --out DIR [--np N] [--axis KEY=V1,V2,...]...
#                         [--grid FILE] [--only NAME,...] [-- extra strata train arguments]
#   --axis KEY=V1,V2   a config key (as for --set) and its values; several axes make a grid
#                      (every combination). Values must not contain commas; use --grid for lists.
#   --grid FILE        points listed one per line instead: "KEY=VALUE KEY=VALUE ..." (# comments)
#   --np N             ranks per run, under launch/strata-mpirun (default 1: strata directly)
#   --only NAMES       run only these points (folder names, comma-separated)
#   --from-plan K      the points are `strata plan`'s K best layouts for --np ranks (K = all: every
#                      layout that fits), each with its predicted tokens/s and memory beside the
#                      measured ones in the summary; --hardware NAME|FILE is the plan's profile
#                      (default h100-sxm; a profile from `strata plan --calibrate` for this machine)
# Each point runs in DIR/NAME (NAME from the last part of each key and its value, e.g.
# stage-1__train_micro_batch_size_per_gpu-4; the whole key where two points would share a name):
# its resolved config (config.yaml), log (train.log; earlier attempts' logs in train.log.prev),
# metrics.jsonl, checkpoints/ and exit status (status). Every point's config is checked first; a
# point whose config does not load is not run (status 2, the problems in its train.log). A point
# that failed does not stop the sweep: its exit code and last error line go into the summary.
# Re-running the same command skips the points that finished (status 0) and resumes the others
# (failed, or "stopped" by a signal after saving) from their latest checkpoint. The arguments
# after -- go to every run; their --set overrides also to the checks and each config.yaml.
# Exit status: 0 when every point run (all, or those --only names) finished, 1 when any did not
# (the summary says which), 2 for a usage error. DIR/summary.csv and DIR/summary.md hold one row
# per point: the axes, final train and validation loss, tokens/s, TFLOP/s per rank, MFU (GPUs),
# peak memory, mean step time, exit status, error and the point's folder. A signal stops the
# running point cleanly (it saves) and the sweep.
# Environment: STRATA (the strata binary; default build/bin/strata, else strata on PATH),
#   MPIRUN_FLAGS (extra flags for mpirun, e.g. "--oversubscribe").
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; exit 0; }
die() { echo "sweep: $*" >&2; exit 2; }

base="" out="" np=1 grid="" only="" from_plan="" hardware="h100-sxm"
axes=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) base="${2:-}"; shift 2 ;;
    --out) out="${2:-}"; shift 2 ;;
    --np) np="${2:-}"; shift 2 ;;
    --axis) axes+=("${2:-}"); shift 2 ;;
    --grid) grid="${2:-}"; shift 2 ;;
    --only) only="${2:-}"; shift 2 ;;
    --from-plan) from_plan="${2:-}"; shift 2 ;;
    --hardware) hardware="${2:-}"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
if [ -z "$base" ] || [ ! -f "$base" ]; then die "--config: '$base' is not a file"; fi
[ -n "$out" ] || die "--out DIR is required"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "--np: '$np' is not a positive number of ranks"
sources=$(( ${#axes[@]} > 0 ? 1 : 0 ))
[ -z "$grid" ] || sources=$((sources + 1))
[ -z "$from_plan" ] || sources=$((sources + 1))
[ "$sources" -gt 0 ] || die "give at least one --axis KEY=V1,V2, a --grid FILE or --from-plan K"
[ "$sources" -eq 1 ] || die "give one of --axis, --grid and --from-plan"
[ -z "$from_plan" ] || [[ "$from_plan" =~ ^([1-9][0-9]*|all)$ ]] || die "--from-plan: '$from_plan' is not a count or all"
strata="${STRATA:-}"
if [ -z "$strata" ]; then
  if [ -x "$root/build/bin/strata" ]; then strata="$root/build/bin/strata"; else strata="$(command -v strata || true)"; fi
fi
if [ -z "$strata" ] || [ ! -x "$strata" ]; then die "no strata binary: build it (scripts/build.sh) or set STRATA"; fi
[ -z "$grid" ] || [ -f "$grid" ] || die "--grid: '$grid' is not a file"
mkdir -p "$out" || die "cannot create $out"
out="$(cd "$out" && pwd)"
base="$(cd "$(dirname "$base")" && pwd)/$(basename "$base")"

# The --set overrides among the arguments for strata train (after --): every run has them, so the
# checks, the plan and each point's config.yaml see them too.
extra_sets=()
for ((i = 0; i < ${#extra[@]}; i++)); do
  [ "${extra[i]}" = --set ] && [ $((i + 1)) -lt ${#extra[@]} ] && extra_sets+=(--set "${extra[i + 1]}")
done

# The points, one per line, as "KEY=VALUE KEY=VALUE ...".
points=()
if [ -n "$from_plan" ]; then
  # The plan's layouts as points, and what it predicts for each (the summary puts it beside).
  top=$([ "$from_plan" = all ] && echo 1000000 || echo "$from_plan")
  # The runs' own --set overrides (after --) shape the model the plan is for.
  "$strata" plan --config "$base" "${extra_sets[@]}" --gpus "$np" --hardware "$hardware" --top "$top" --json \
    > "$out/plan.json" || { rm -f "$out/plan.json"; rmdir "$out" 2>/dev/null; die "strata plan failed (see above)"; }
  grid="$out/plan_points.txt"
  # Each layout as the --set overrides that give it (the plan's own list).
  python3 -c 'import json, sys; [print(" ".join(l["sets"])) for l in json.load(open(sys.argv[1]))["layouts"]]' \
    "$out/plan.json" > "$grid" || die "cannot read $out/plan.json"
else
  rm -f "$out/plan_points.txt" "$out/plan.json"  # a plan's points from an earlier sweep in this folder
fi
if [ -n "$grid" ]; then
  number=0
  while IFS= read -r line || [ -n "$line" ]; do
    number=$((number + 1))
    line="${line//$'\r'/}"  # a file written on Windows
    line="${line%%#*}"
    read -r -a words <<<"$line"
    for kv in "${words[@]}"; do
      [[ "$kv" == ?*=* ]] || die "--grid $grid line $number: '$kv' is not KEY=VALUE"
    done
    [ ${#words[@]} -gt 0 ] && points+=("${words[*]}")
  done < "$grid"
else
  points=("")
  for axis in "${axes[@]}"; do
    [[ "$axis" == *=* ]] || die "--axis '$axis': expected KEY=V1,V2,..."
    key="${axis%%=*}"
    IFS=, read -r -a values <<<"${axis#*=}"
    [ ${#values[@]} -gt 0 ] || die "--axis '$axis': no values"
    next=()
    for p in "${points[@]}"; do
      for v in "${values[@]}"; do next+=("${p:+$p }$key=$v"); done
    done
    points=("${next[@]}")
  done
fi
[ ${#points[@]} -gt 0 ] || die "no points to run"

# point_name "KEY=VALUE ..." [whole]: a folder name from the last part of each key (the whole key
# with `whole`) and its value (for a plan's layouts, short labels: tp2__pp1__sp-true__...).
point_name() {
  local name="" kv key value label
  for kv in $1; do
    key="${kv%%=*}"; value="${kv#*=}"
    label="${key##*.}"
    [ -z "${2:-}" ] || label="$key"
    if [ -n "$from_plan" ] && [ -z "${2:-}" ]; then
      case "$key" in
        parallelism.tensor_model_parallel_size) label=tp ;;
        parallelism.pipeline_model_parallel_size) label=pp ;;
        parallelism.sequence_parallel) label=sp ;;
        parallelism.pipeline.virtual_stages) label=v ;;
        train_batch_size | zero_optimization.overlap_comm | activation_checkpointing.partition_activations) continue ;;
        train_micro_batch_size_per_gpu) label=mb ;;
        gradient_accumulation_steps) label=ga ;;
        zero_optimization.stage) label=zero ;;
        zero_optimization.offload_optimizer.device) label=offload ;;
        zero_optimization.offload_param.device) label=offload_param ;;
      esac
    fi
    name="${name:+${name}__}${label}-${value}"
  done
  echo "$name" | tr -c 'A-Za-z0-9._=+\n-' '_'
}

# Every point's folder name, told apart: a point listed twice is a mistake; two points whose short
# names meet (stage-3__device-cpu from two offload keys) take their whole keys.
names=()
for p in "${points[@]}"; do names+=("$(point_name "$p")"); done
for ((i = 0; i < ${#points[@]}; i++)); do
  for ((j = 0; j < i; j++)); do
    [ "${points[i]}" != "${points[j]}" ] || die "the point '${points[i]}' comes twice"
    if [ "${names[i]}" = "${names[j]}" ]; then
      names[i]="$(point_name "${points[i]}" whole)"
      names[j]="$(point_name "${points[j]}" whole)"
    fi
  done
done
for ((i = 0; i < ${#points[@]}; i++)); do
  for ((j = 0; j < i; j++)); do
    [ "${names[i]}" != "${names[j]}" ] || die "the points '${points[j]}' and '${points[i]}' would share the folder ${names[i]}"
  done
done

# --only names points of this sweep (a typo would otherwise run nothing).
if [ -n "$only" ]; then
  IFS=, read -r -a wanted <<<"$only"
  for w in "${wanted[@]}"; do
    [[ " ${names[*]} " == *" $w "* ]] || die "--only: no point is named '$w'; the points: ${names[*]}"
  done
fi

# point_sets INDEX: the --set overrides of a point's run (its own and the sweep's), in `sets`.
point_sets() {
  local dir="$out/${names[$1]}" kv
  sets=()
  for kv in ${points[$1]}; do sets+=(--set "$kv"); done
  sets+=(--set "logging.metrics_file=$dir/metrics.jsonl" --set "checkpoint.dir=$dir/checkpoints"
    --set checkpoint.resume=auto)
}

# Every point's config, as its run will load it, is checked before anything runs, so a typo
# fails at once; a point whose config does not load is recorded as failed and not run.
check_errors=()
for ((i = 0; i < ${#points[@]}; i++)); do
  point_sets "$i"
  if ! check=$("$strata" config "$base" "${extra_sets[@]}" "${sets[@]}" --world-size "$np" 2>&1 >/dev/null); then
    check_errors[i]="$check"
    echo "sweep: point '${points[i]}' has a config that does not load; it is recorded as failed and not run:" >&2
    echo "$check" >&2
  fi
done

# A signal stops the sweep: the running point is asked once to save and stop (SIGTERM), and
# again for each further SIGINT or SIGTERM (which stops it at once); a closed terminal's repeated
# SIGHUP is one signal.
stop=0 pending=0
on_signal() {
  if [ "$stop" -eq 1 ] && [ "$1" = HUP ]; then return; fi
  stop=1 pending=1
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP
launcher=()
if [ "$np" -gt 1 ]; then
  read -r -a mpirun_flags <<<"${MPIRUN_FLAGS:-}"
  [ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
  launcher=("$root/launch/strata-mpirun" "${mpirun_flags[@]}" -np "$np")
fi
echo "sweep: ${#points[@]} point(s) of $(basename "$base") into $out, $np rank(s) each"
for ((index = 1; index <= ${#points[@]}; index++)); do
  p="${points[index - 1]}"
  name="${names[index - 1]}"
  dir="$out/$name"
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  mkdir -p "$dir"
  echo "$p" > "$dir/axes"
  if [ "$(cat "$dir/status" 2>/dev/null)" = 0 ]; then
    echo "sweep: [$index/${#points[@]}] $name: finished before, skipped"
    continue
  fi
  [ "$stop" -eq 0 ] || break
  # The log of an earlier attempt (failed, or stopped and now resumed) is kept.
  if [ -f "$dir/train.log" ]; then cat "$dir/train.log" >> "$dir/train.log.prev" && rm "$dir/train.log"; fi
  if [ -n "${check_errors[index - 1]:-}" ]; then
    echo "${check_errors[index - 1]}" > "$dir/train.log"
    echo 2 > "$dir/status"
    echo "sweep: [$index/${#points[@]}] $name: the config does not load (exit 2), not run"
    continue
  fi
  point_sets $((index - 1))
  "$strata" config "$base" "${extra_sets[@]}" "${sets[@]}" --world-size "$np" > "$dir/config.yaml" 2>/dev/null || true
  echo "sweep: [$index/${#points[@]}] $name: $p"
  start=$SECONDS
  # The run gets a process group of its own (job control), so that a terminal's Ctrl-C or
  # hang-up reaches this script alone, which passes it on once: a second signal to the run would
  # stop it without a save.
  set -m
  "${launcher[@]}" "$strata" train --config "$base" "${sets[@]}" "${extra[@]}" > "$dir/train.log" 2>&1 </dev/null &
  child=$!
  set +m
  while true; do
    wait "$child"
    rc=$?
    # A signal interrupted the wait: pass it on (the run saves and stops) and wait again.
    if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then
      [ "$pending" -eq 0 ] || kill -TERM "$child" 2>/dev/null
      pending=0
      continue
    fi
    break
  done
  # A run stopped by a signal saved and exits 0 without having finished: "stopped", which a re-run
  # resumes (its log says whether the signal came through this script or straight to the run).
  status=$rc
  if [ "$rc" -eq 0 ] && { [ "$stop" -eq 1 ] || grep -qE "(signal [0-9]+ received|a stop signal reached another rank): " "$dir/train.log"; }; then status=stopped; fi
  echo "$status" > "$dir/status"
  echo "sweep: [$index/${#points[@]}] $name: exit $rc$([ "$status" = stopped ] && echo " (stopped, saved)") after $((SECONDS - start)) s"
  [ "$stop" -eq 0 ] || { echo "sweep: stopped by a signal; re-run the same command to continue"; break; }
done

# The summary, from every point's files.
# Each point as "NAME<tab>KEY=VALUE ...".
named=()
for ((i = 0; i < ${#points[@]}; i++)); do named+=("${names[i]}"$'\t'"${points[i]}"); done
SWEEP_ONLY="$only" python3 - "$out" "${named[@]}" <<'PY'
import csv, json, os, re, sys
out = sys.argv[1]
only = set(filter(None, os.environ["SWEEP_ONLY"].split(",")))
folder_of = dict(reversed(arg.split("\t", 1)) for arg in sys.argv[2:])
points = [arg.split("\t", 1)[1] for arg in sys.argv[2:]]
keys = []
for p in points:
    for kv in p.split():
        k = kv.split("=", 1)[0]
        if k not in keys: keys.append(k)
predicted = {}
if os.path.exists(os.path.join(out, "plan_points.txt")):
    plan = json.load(open(os.path.join(out, "plan.json")))
    lines = [l.strip() for l in open(os.path.join(out, "plan_points.txt")) if l.strip()]
    predicted = {p: l for p, l in zip(lines, plan["layouts"])}
rows = []
for p in points:
    d = os.path.join(out, folder_of[p])
    values = dict(kv.split("=", 1) for kv in p.split())
    train, evals = [], []
    try:
        for line in open(os.path.join(d, "metrics.jsonl")):
            r = json.loads(line)
            (train if r.get("type") == "train" else evals if r.get("type") == "eval" else []).append(r)
    except (OSError, ValueError):
        pass
    last = {}
    for r in train: last[r["step"]] = r
    timed = [last[s] for s in sorted(last)][1:] or list(last.values())  # the first step warms up
    mean = lambda f: sum(r[f] for r in timed) / len(timed) if timed else None
    status = open(os.path.join(d, "status")).read().strip() if os.path.exists(os.path.join(d, "status")) else "not run"
    error = ""
    if status not in ("0", "not run") and os.path.exists(os.path.join(d, "train.log")):
        log = [l.strip() for l in open(os.path.join(d, "train.log"), errors="replace")]
        # strata's own error lines first (mpirun's abort notice comes after them), a count
        # heading a list of problems left out; else anything that reads like a failure.
        own = [l for l in log if (re.search(r"(^|\] )error: ", l) and not re.search(r"error: \d+ problems? found:$", l))
               or re.search(r"arguments? (was|were) not expected|is required$", l)]
        broad = [l for l in log if re.search(r"error|abort|killed|not finite", l, re.I)]
        error = (own or broad or [""])[-1]
    mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
    rows.append({**{k: values.get(k, "") for k in keys},
                 "steps": max(last) if last else 0,
                 "train_loss": f"{last[max(last)]['loss']:.4f}" if last else "",
                 "val_loss": f"{evals[-1]['val_loss']:.4f}" if evals else "",
                 "tokens_per_s": f"{mean('tokens_per_s'):.0f}" if timed else "",
                 "tflops_per_rank": f"{mean('tflops_per_rank'):.3f}" if timed else "",
                 "mfu": f"{100 * sum(mfu) / len(mfu):.1f}%" if mfu else "",
                 "peak_memory_mib": f"{max(r['peak_memory_bytes'] for r in train) / 2**20:.0f}" if train else "",
                 "step_time_ms": f"{1000 * mean('step_time_s'):.1f}" if timed else "",
                 "status": status, "error": error, "point": folder_of[p]})
    if predicted:
        plan_row = predicted.get(p, {})
        rows[-1]["layout"] = plan_row.get("layout", "")
        rows[-1]["predicted_tokens_per_s"] = f"{plan_row['tokens_per_s']:.0f}" if plan_row else ""
        rows[-1]["predicted_memory_mib"] = f"{plan_row['memory_bytes']['total'] / 2**20:.0f}" if plan_row else ""
fields = keys + ["steps", "train_loss", "val_loss", "tokens_per_s", "tflops_per_rank", "mfu", "peak_memory_mib",
                 "step_time_ms", "status", "error", "point"]
if predicted:
    # The layout in the plan's words replaces the twelve keys that spell it.
    fields = ["layout", "predicted_tokens_per_s", "tokens_per_s", "predicted_memory_mib", "peak_memory_mib"] + \
        [f for f in fields[len(keys):] if f not in ("tokens_per_s", "peak_memory_mib")]
with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("| " + " | ".join(fields) + " |\n|" + "---|" * len(fields) + "\n")
    for r in rows:
        f.write("| " + " | ".join(str(r[k]).replace("|", "\\|") for k in fields) + " |\n")
print(open(os.path.join(out, "summary.md")).read(), end="")
# With --only, the points it leaves out are listed as they are but do not count.
failed = sum(1 for r in rows if r["status"] != "0" and (not only or r["point"] in only))
print(f"sweep: {len(rows)} point(s), {failed} not finished{' of those --only names' if only else ''}; "
      f"{out}/summary.csv and summary.md")
sys.exit(1 if failed else 0)
PY
