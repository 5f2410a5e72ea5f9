#!/usr/bin/env bash
# Two nodes on one machine: network namespaces joined by a bridge (itself in a third namespace,
# so the machine's own network is untouched), each with its own host name (a UTS namespace) and
# one address in 10.213.0.0/24, the only addresses used. launch/mpirun.sh starts 2 ranks on each
# over TCP; Open MPI's rsh agent is a script that enters the node's namespaces. Checks:
# - the banner's placement puts ranks 0-1 on node0 and 2-3 on node1;
# - DP 2 x TP 2 (each TP group inside a node) trains 8 steps within 1e-5 of one rank running the
#   same global batch, with no warning; TP 4 spans both nodes and is warned about;
# - killing every process of node1 mid-run ends the job within 2 x STRATA_STOP_GRACE_S and a
#   margin, with Open MPI's report of the lost node, and the same command resumes from the
#   newest checkpoint, its losses equal to the uninterrupted run's bit for bit.
# Needs root and `ip netns`; skipped (exit 77) otherwise, saying why.
source "$(dirname "$0")/../lib/common.sh"

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v unshare >/dev/null || skip "no unshare command (util-linux)"
tag="$$"
switch="strata-sw-$tag" nodes=("strata-n0-$tag" "strata-n1-$tag")
cleanup() {
  for ns in "${nodes[@]}" "$switch"; do
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$switch" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
for i in 0 1; do
  ip netns add "${nodes[$i]}"
  ip -n "$switch" link add "port$i" type veth peer name strata0 netns "${nodes[$i]}"
  ip -n "$switch" link set "port$i" master br0 up
  ip -n "${nodes[$i]}" addr add "10.213.0.$((i + 1))/24" dev strata0
  ip -n "${nodes[$i]}" link set strata0 up
  ip -n "${nodes[$i]}" link set lo up
done

# The rsh agent: `agent HOST COMMAND...` runs COMMAND as a remote shell would, on that node.
agent="$WORK/netns-rsh"
cat >"$agent" <<EOF
#!/usr/bin/env bash
case "\$1" in
  10.213.0.1) ns=${nodes[0]} name=node0 ;;
  10.213.0.2) ns=${nodes[1]} name=node1 ;;
  *) echo "netns-rsh: no node \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts /bin/sh -c 'hostname "\$1"; shift; eval "\$*"' sh "\$name" "\$@"
EOF
chmod +x "$agent"

# on_nodes ARGS...: launch/mpirun.sh from node0 over both nodes, 2 ranks each.
on_nodes() {
  ip netns exec "${nodes[0]}" unshare --uts /bin/sh -c 'hostname node0; exec "$@"' sh \
    "$SRC/launch/mpirun.sh" --hosts 10.213.0.1,10.213.0.2 --ranks-per-node 2 --iface strata0 --bind none \
    --mpirun-arg --mca --mpirun-arg plm_rsh_agent --mpirun-arg "$agent" -- "$STRATA" "$@"
}

make_text_data "$WORK/data"
write_small_config "$WORK/run.yaml" "$WORK/data" "train: {iters: 8, seed: 9}" \
  "checkpoint: {dir: \"$WORK/ckpt\", save_interval: 2}"
sed -i 's/n_head: 2,/n_head: 4,/' "$WORK/run.yaml"  # TP 4 divides the heads
export STRATA_COMM_TIMEOUT_S=30 STRATA_STOP_GRACE_S=5
tp2=(--set parallelism.tensor_model_parallel_size=2)

run_expect 0 on_nodes train --config "$WORK/run.yaml" "${tp2[@]}" --set logging.metrics_file="$WORK/nodes.jsonl"
grep -E '^(launch/mpirun.sh: mpirun|placement:)' <<<"$OUT"
expect_contains "$OUT" "placement: node0: ranks 0-1; node1: ranks 2-3"
expect_contains "$OUT" "layout: 4 rank(s) = DP 2 x TP 2"
grep -q "spans several nodes" <<<"$OUT" && fail "a warning about TP groups inside nodes: $OUT"
run_expect 0 "$STRATA" train --config "$WORK/run.yaml" --set gradient_accumulation_steps=4 \
  --set checkpoint.dir="$WORK/ckpt_one" --set logging.metrics_file="$WORK/one.jsonl"
python3 - "$WORK" <<'PY'
import json, sys
def losses(name):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{sys.argv[1]}/{name}.jsonl")) if r["type"] == "train"}
nodes, one = losses("nodes"), losses("one")
assert sorted(nodes) == sorted(one) == list(range(1, 9)), (sorted(nodes), sorted(one))
worst = max(abs(nodes[s] - one[s]) / abs(one[s]) for s in one)
print(f"2 nodes x 2 ranks (DP 2 x TP 2) vs one rank: max relative loss difference {worst:.2e} (tolerance 1e-05)")
sys.exit(0 if worst <= 1e-5 else 1)
PY

run_expect 0 on_nodes train --config "$WORK/run.yaml" --set train.iters=1 --set parallelism.tensor_model_parallel_size=4 \
  --set checkpoint.dir="$WORK/ckpt_tp4"
expect_contains "$OUT" "tensor-parallel group of (dp 0, pp 0) spans several nodes (2 of its 4 ranks share this node)"

# node1 dies: every process in its namespace is killed once a checkpoint is on disk.
kill_args=(train --config "$WORK/run.yaml" "${tp2[@]}" --set train.iters=100000 --set checkpoint.dir="$WORK/ckpt_kill")
on_nodes "${kill_args[@]}" >"$WORK/kill.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  grep -q "saved checkpoint" "$WORK/kill.log" && break
  kill -0 "$job" 2>/dev/null || { cat "$WORK/kill.log"; fail "the job ended before its first checkpoint"; }
  sleep 0.1
done
grep -q "saved checkpoint" "$WORK/kill.log" || { cat "$WORK/kill.log"; fail "no checkpoint within 60 s"; }
started=$SECONDS
# shellcheck disable=SC2046  # one pid per word
kill -KILL $(ip netns pids "${nodes[1]}")
limit=$((2 * STRATA_STOP_GRACE_S + 20))
while kill -0 "$job" 2>/dev/null && [ $((SECONDS - started)) -le "$limit" ]; do sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then
  kill -KILL "$job"
  cat "$WORK/kill.log"
  fail "the job outlived the lost node by $limit s"
fi
rc=0
wait "$job" || rc=$?
[ "$rc" -ne 0 ] || { cat "$WORK/kill.log"; fail "the job exited 0 after losing a node"; }
grep -qE "lost communication with a remote daemon|unable to reliably start one or more daemons" "$WORK/kill.log" ||
  { cat "$WORK/kill.log"; fail "no report of the lost node"; }
echo "the job ended $((SECONDS - started)) s after node1 was killed (exit $rc)"

saved=$(cat "$WORK/ckpt_kill/latest")
until=$((10#${saved#step_} + 2))
run_expect 0 on_nodes "${kill_args[@]}" --set train.iters=$until --set logging.metrics_file="$WORK/resumed.jsonl"
expect_contains "$OUT" "resumed from $WORK/ckpt_kill/$saved"
run_expect 0 on_nodes "${kill_args[@]}" --set train.iters=$until --set checkpoint.dir="$WORK/ckpt_whole" \
  --set logging.metrics_file="$WORK/whole.jsonl"
diff <(train_losses "$WORK/resumed.jsonl") <(train_losses "$WORK/whole.jsonl" | tail -n 2) ||
  fail "the run resumed after the node loss differs from the uninterrupted run"
echo "ok: resumed from $saved after the node loss, equal to the uninterrupted run"
