#!/usr/bin/env bash
# Two nodes on one machine: network namespaces joined by a bridge (itself in a third namespace,
# so the machine's own network is untouched), each with its own host name (a UTS namespace) and
# one address in 10.213.0.0/24, the only addresses used. launch/mpirun.sh starts 2 ranks on each
# over TCP; Open MPI's rsh agent is a script that enters the node's namespaces. Checks:
# - the banner's placement puts ranks 0-1 on node0 and 2-3 on node1;
# - DP 2 x TP 2 (each TP group inside a node) trains 8 steps within 1e-5 of one rank running the
#   same global batch, with no warning; TP 4 spans both nodes and is warned about;
# - killing every process of node1 mid-run: the survivors' collectives time out
#   (STRATA_COMM_TIMEOUT_S) naming the ranks of node1 they wait for — or, when the loss caught
#   them in a collective among themselves and blocked Open MPI's progress (node0's ranks then
#   find each other silent), saying that they have been stuck inside the MPI library, as when a
#   node is lost — the job ends within 2 x STRATA_STOP_GRACE_S and a margin, with Open MPI's
#   report of the lost node, and the same command resumes from the newest checkpoint, its
#   losses equal to the uninterrupted run's bit for bit.
# Needs root and `ip netns`; skipped (exit 77) otherwise, saying why.
source "$(dirname "$0")/../lib/common.sh"
source "$(dirname "$0")/../lib/netns_nodes.sh"
netns_nodes 2
agent="$WORK/netns-rsh"
netns_rsh_agent "$agent"

# on_nodes ARGS...: launch/mpirun.sh from node0 over both nodes, 2 ranks each.
on_nodes() {
  on_node 0 "$SRC/launch/mpirun.sh" --hosts 10.213.0.1,10.213.0.2 --ranks-per-node 2 --iface strata0 --bind none \
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
PYTHONPATH="$SRC/tests/lib" python3 - "$WORK" <<'PY'
import sys
import equivalence
def losses(name):
    return equivalence.losses(f"{sys.argv[1]}/{name}.jsonl")
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
# The kill run's output without its resolved config, which would bury what matters in a CI log.
show_kill_log() {
  awk '/^resolved config:/ {skip = 1; next} skip && /^([a-z_]+:|  |#)/ {next} {skip = 0; print}' "$WORK/kill.log" | tail -n 80
}
kill_args=(train --config "$WORK/run.yaml" "${tp2[@]}" --set train.iters=100000 --set checkpoint.dir="$WORK/ckpt_kill")
# The survivors' collectives time out after 6 s, well inside the kill sequence of mpirun (twice
# the grace: 16 s), and name the ranks they wait for with their host.
STRATA_COMM_TIMEOUT_S=6 STRATA_STOP_GRACE_S=8 on_nodes "${kill_args[@]}" >"$WORK/kill.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  grep -q "saved checkpoint" "$WORK/kill.log" && break
  kill -0 "$job" 2>/dev/null || { show_kill_log; fail "the job ended before its first checkpoint"; }
  sleep 0.1
done
grep -q "saved checkpoint" "$WORK/kill.log" || { show_kill_log; fail "no checkpoint within 60 s"; }
started=$SECONDS
netns_kill_node 1
limit=$((2 * 8 + 20))
while kill -0 "$job" 2>/dev/null && [ $((SECONDS - started)) -le "$limit" ]; do sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then
  kill -KILL "$job"
  show_kill_log
  fail "the job outlived the lost node by $limit s"
fi
rc=0
wait "$job" || rc=$?
[ "$rc" -ne 0 ] || { show_kill_log; fail "the job exited 0 after losing a node"; }
grep -qE "lost communication with a remote daemon|unable to reliably start one or more daemons" "$WORK/kill.log" ||
  { show_kill_log; fail "no report of the lost node"; }
echo "the job ended $((SECONDS - started)) s after node1 was killed (exit $rc)"
if grep -E "communication timeout: .*world rank [23] \(node1\)" "$WORK/kill.log"; then
  echo "a survivor named a rank of node1 as the one it waits for"
elif grep -E "communication timeout: .* this rank has been inside the MPI library for [0-9]+ s without returning, as when a node or its network is lost" "$WORK/kill.log"; then
  echo "the survivors were in a collective among node0's ranks, and the lost node blocked the MPI library itself"
else
  show_kill_log
  fail "no survivor named a rank of node1 as the one it waits for, nor said the MPI library was stuck"
fi

saved=$(cat "$WORK/ckpt_kill/latest")
until=$((10#${saved#step_} + 2))
run_expect 0 on_nodes "${kill_args[@]}" --set train.iters=$until --set logging.metrics_file="$WORK/resumed.jsonl"
expect_contains "$OUT" "resumed from $WORK/ckpt_kill/$saved"
run_expect 0 on_nodes "${kill_args[@]}" --set train.iters=$until --set checkpoint.dir="$WORK/ckpt_whole" \
  --set logging.metrics_file="$WORK/whole.jsonl"
diff <(train_losses "$WORK/resumed.jsonl") <(train_losses "$WORK/whole.jsonl" | tail -n 2) ||
  fail "the run resumed after the node loss differs from the uninterrupted run"
echo "ok: resumed from $saved after the node loss, equal to the uninterrupted run"
