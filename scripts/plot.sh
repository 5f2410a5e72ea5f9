#!/usr/bin/env bash
# Charts (PNG, with gnuplot) from strata's metrics files and sweep folders.
#
# Usage: scripts/plot.sh --out DIR METRICS.jsonl...     loss.png: the train loss of every run
#                                                       against steps (validation loss as points)
#        scripts/plot.sh --out DIR --sweep SWEEP_DIR [--axis KEY]
#                                                       loss.png of every point, throughput.png
#                                                       (tokens/s against KEY, default the first
#                                                       axis, a line per value of the others) and
#                                                       memory.png (peak memory per rank per point)
# A run is named by its metrics file's folder (or its file name when the folder says nothing).
# Prints the paths of the PNGs written.
set -euo pipefail
die() { echo "plot: $*" >&2; exit 2; }
out="" sweep="" axis=""
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:-}"; shift 2 ;;
    --sweep) sweep="${2:-}"; shift 2 ;;
    --axis) axis="${2:-}"; shift 2 ;;
    -h | --help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) files+=("$1"); shift ;;
  esac
done
[ -n "$out" ] || die "--out DIR is required"
command -v gnuplot >/dev/null 2>&1 || die "gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)"
if [ -n "$sweep" ]; then
  [ -f "$sweep/summary.csv" ] || die "--sweep: no $sweep/summary.csv (run scripts/sweep.sh first)"
  [ ${#files[@]} -eq 0 ] || die "give metrics files or --sweep, not both"
else
  [ ${#files[@]} -gt 0 ] || die "no metrics files given"
  for f in "${files[@]}"; do [ -f "$f" ] || die "no such metrics file: $f"; done
fi
mkdir -p "$out" || die "cannot create $out"

# Python turns the JSONL and CSV into gnuplot data blocks and a script; gnuplot draws.
python3 - "$out" "$sweep" "$axis" "${files[@]}" > "$out/plot.gp" <<'PY' || { rm -f "$out/plot.gp"; die "cannot read the metrics"; }
import csv, json, os, sys
out, sweep, axis, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def name_of(path):
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    return folder if stem == "metrics" and folder else stem
def quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("_", "\\_") + '"'
rows = []
if sweep:
    rows = list(csv.DictReader(open(os.path.join(sweep, "summary.csv"))))
    fixed = {"steps", "train_loss", "val_loss", "tokens_per_s", "tflops_per_rank", "mfu", "peak_memory_mib",
             "step_time_ms", "status", "error", "point", "predicted_tokens_per_s", "predicted_memory_mib"}
    axes = [k for k in rows[0].keys() if k not in fixed] if rows else []
    if not axes: sys.exit("the sweep summary has no axes")
    axis = axis or axes[0]
    if axis not in axes: sys.exit(f"--axis {axis}: not an axis of the sweep ({', '.join(axes)})")
    # The summary names each point's folder (a plan's points have the layout as their one axis).
    found = [os.path.join(sweep, r["point"]) if r.get("point") else None for r in rows]
    files = [os.path.join(d, "metrics.jsonl") for d in found if d and os.path.exists(os.path.join(d, "metrics.jsonl"))]
blocks, loss_plots = [], []
for i, path in enumerate(files):
    train, val = {}, {}
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("type") == "train": train[r["step"]] = r["loss"]
        elif r.get("type") == "eval": val[r["step"]] = r["val_loss"]
    blocks.append(f"$train{i} << EOD\n" + "".join(f"{s} {train[s]}\n" for s in sorted(train)) + "EOD\n")
    loss_plots.append(f"$train{i} with lines lw 2 lc {i + 1} title {quote(name_of(path) + ' train')}")
    if val:
        blocks.append(f"$val{i} << EOD\n" + "".join(f"{s} {val[s]}\n" for s in sorted(val)) + "EOD\n")
        loss_plots.append(f"$val{i} with points pt 7 ps 1.2 lc {i + 1} title {quote(name_of(path) + ' val')}")
if not loss_plots: sys.exit("no train records in the metrics files")
gp = "".join(blocks)
gp += "set terminal pngcairo size 1000,600 noenhanced\nset grid\nset key top right\n"
gp += f"set output {quote(os.path.join(out, 'loss.png'))}\nset title 'loss'\nset xlabel 'step'\nset ylabel 'loss'\n"
gp += "plot " + ", ".join(loss_plots) + "\n"
pngs = ["loss.png"]
if sweep:
    others = [k for k in axes if k != axis]
    groups = {}
    for r in rows:
        if r["tokens_per_s"] == "": continue
        key = ", ".join(f"{k.split('.')[-1]}={r[k]}" for k in others) or "tokens/s"
        groups.setdefault(key, []).append((r[axis], float(r["tokens_per_s"])))
    labels = sorted({r[axis] for r in rows}, key=lambda v: (float(v) if v.replace('.', '', 1).isdigit() else 0, v))
    gp += "unset key\nset key outside right\n"
    tp_plots = []
    for j, (key, pts) in enumerate(sorted(groups.items())):
        data = "".join(f"{labels.index(v)} {t} {v}\n" for v, t in sorted(pts, key=lambda p: labels.index(p[0])))
        gp += f"$tp{j} << EOD\n{data}EOD\n"
        tp_plots.append(f"$tp{j} using 1:2:xtic(3) with linespoints lw 2 pt 7 title {quote(key)}")
    if tp_plots:
        gp += f"set output {quote(os.path.join(out, 'throughput.png'))}\nset title 'throughput'\n"
        gp += f"set xlabel {quote(axis)}\nset ylabel 'tokens/s'\nset yrange [0:*]\nplot " + ", ".join(tp_plots) + "\n"
        pngs.append("throughput.png")
    mem = [(i, r) for i, r in enumerate(r for r in rows if r["peak_memory_mib"] != "")]
    if mem:
        data = "".join(f"{i} {r['peak_memory_mib']} {quote(', '.join(r[k] for k in axes))}\n" for i, r in mem)
        gp += f"$mem << EOD\n{data}EOD\nunset key\nset output {quote(os.path.join(out, 'memory.png'))}\n"
        gp += f"set title 'peak memory per rank'\nset xlabel {quote(', '.join(axes))}\nset ylabel 'MiB'\n"
        gp += "set style fill solid 0.6\nset boxwidth 0.6\nset xtics rotate by -30\n"
        gp += "plot $mem using 1:2:xtic(3) with boxes lc 3\n"
        pngs.append("memory.png")
gp += "\n".join(f"# png {p}" for p in pngs) + "\n"
print(gp, end="")
PY
gnuplot "$out/plot.gp" || die "gnuplot failed on $out/plot.gp"
sed -n 's|^# png ||p' "$out/plot.gp" | while read -r png; do echo "plot: wrote $out/$png"; done
