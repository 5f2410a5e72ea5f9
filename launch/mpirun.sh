#!/usr/bin/env bash
# Launches strata on one or many nodes with Open MPI, through launch/strata-mpirun (a signal
# saves a checkpoint and the job exits 0). Prints the mpirun command it runs first.
#
# Usage: launch/mpirun.sh [options] -- strata train --config gpt.yaml [...]
#   --hosts H1,H2,...    nodes to run on, names only (default: this machine)
#   --hostfile FILE      an Open MPI hostfile instead (see launch/hostfile.example)
#   --ranks-per-node K   ranks on each node (default: the hostfile's slots when every node gives
#                        the same, else 1 per GPU of this machine, else 1)
#   --np N               ranks in all, at most K × the number of nodes (default: that)
#   --bind core|none     bind each rank to cores (default core; with GPUs each rank then takes
#                        GPU local_rank mod GPUs, as strata does by itself)
#   --iface NAME         the TCP interface between nodes (e.g. eth0, ib0): Open MPI's TCP
#                        transport and its runtime use only this one
#   --env NAME           export one more environment variable to remote ranks (repeatable)
#   --dry-run            print the command and stop
#   --mpirun-arg ARG     pass ARG to mpirun (repeatable)
# Exported to every rank: PATH, LD_LIBRARY_PATH, OPENBLAS_NUM_THREADS and every STRATA_*, NCCL_*
# and CUDA_VISIBLE_DEVICES variable set here. Tensor-parallel groups are consecutive ranks, so
# with K a multiple of tensor_model_parallel_size each TP group stays inside a node (strata warns
# when one does not).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "launch/mpirun.sh: $*" >&2; exit 2; }
hosts="" hostfile="" per_node="" np="" bind=core iface="" dry=0
envs=() passthrough=()
# value OPTION [WORD]: OPTION's value, refused when missing or itself an option ("--iface
# --dry-run" must not launch a job); --mpirun-arg alone takes words that start with "-", but not
# this script's own options.
own_options=" --hosts --hostfile --ranks-per-node --np --bind --iface --env --mpirun-arg --dry-run -- -h --help "
value() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi
  [ "$1" = --mpirun-arg ] || [[ "$2" != -* ]] || die "$1 needs a value, not the option '$2'"
  [[ "$own_options" != *" $2 "* ]] || die "$1 needs a value, not this script's option '$2'"
  printf '%s' "$2"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="$(value "$@")"; shift 2 ;;
    --hostfile) hostfile="$(value "$@")"; shift 2 ;;
    --ranks-per-node) per_node="$(value "$@")"; shift 2 ;;
    --np) np="$(value "$@")"; shift 2 ;;
    --bind) bind="$(value "$@")"; shift 2 ;;
    --iface) iface="$(value "$@")"; shift 2 ;;
    --env)
      envs+=("$(value "$@")")
      [[ "${envs[-1]}" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "--env: '${envs[-1]}' is not a variable name"
      [ -n "${!envs[-1]+set}" ] || echo "launch/mpirun.sh: warning: --env ${envs[-1]}: not set here, so not exported" >&2
      shift 2 ;;
    --mpirun-arg) passthrough+=("$(value "$@")"); shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown option '$1' (the command goes after --; see --help)" ;;
  esac
done
[ $# -gt 0 ] || die "no command: give it after --, e.g. -- strata train --config gpt.yaml"
[ -z "$hosts" ] || [ -z "$hostfile" ] || die "give --hosts or --hostfile, not both"
[ -z "$hostfile" ] || [ -f "$hostfile" ] || die "--hostfile: '$hostfile' is not a file"
case "$bind" in core | none) ;; *) die "--bind: '$bind' is not core or none" ;; esac
if [ -n "$hostfile" ]; then
  # The hostfile's nodes as "NAME SLOTS GIVEN" lines (GIVEN: 1 when slots= says so), or "error:
  # ..." for a line Open MPI would misread (its messages for these read as internal errors). A node
  # on several lines without slots= has a slot per line, as in Open MPI; slots= goes on one line
  # of a node (Open MPI refuses two).
  node_slots=$(awk '
    { sub(/#.*/, "") }
    NF == 0 { next }
    {
      line_slots = ""
      for (i = 2; i <= NF; i++) {
        if ($i !~ /^slots=/) continue
        line_slots = substr($i, 7)
        if (line_slots !~ /^[1-9][0-9]*$/) { printf "error: line %d: %s is not slots=N with N a positive number\n", NR, $i; failed = 1; exit }
      }
      if (!($1 in lines)) order[++n] = $1
      lines[$1]++
      if (line_slots != "") {
        if ($1 in given) { printf "error: line %d: %s has slots= on two lines; give them once\n", NR, $1; failed = 1; exit }
        given[$1] = line_slots
      }
    }
    END {
      if (failed) exit
      for (k = 1; k <= n; k++) {
        h = order[k]
        if ((h in given) && lines[h] > 1) { printf "error: %s is listed on %d lines, one with slots=; give it once\n", h, lines[h]; exit }
        print h, ((h in given) ? given[h] : lines[h]), ((h in given) ? 1 : 0)
      }
    }' "$hostfile")
  [[ "$node_slots" != error:* ]] || die "--hostfile $hostfile: ${node_slots#error: }"
  [ -n "$node_slots" ] || die "--hostfile $hostfile: lists no node (one per line: NAME slots=N)"
  # Ranks are placed K per node: the hostfile's slots (given, or a line each), when every node has
  # the same number; a hostfile of names alone leaves K to the default below.
  counts=$(awk '{print $2}' <<<"$node_slots" | sort -un)
  if [ -z "$per_node" ] && { [ -n "$(awk '$3 == 1' <<<"$node_slots")" ] || [ "$counts" != 1 ]; }; then
    [ "$(wc -l <<<"$counts")" -eq 1 ] || die "--hostfile: its nodes give different slots ($(tr '\n' ' ' <<<"$counts")); give --ranks-per-node"
    per_node="$counts"
  fi
fi
if [ -z "$per_node" ]; then
  gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
  per_node=$((gpus > 0 ? gpus : 1))
fi
[[ "$per_node" =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-node: '$per_node' is not a positive number"

nodes=1
args=()
if [ -n "$hosts" ]; then
  [[ "$hosts" != *, ]] || die "--hosts: '$hosts' has an empty name"
  IFS=, read -r -a host_list <<<"$hosts"
  nodes=${#host_list[@]}
  for h in "${host_list[@]}"; do
    [ -n "$h" ] || die "--hosts: '$hosts' has an empty name"
    [[ "$h" != *:* ]] || die "--hosts: '$h': give node names only; the ranks per node are --ranks-per-node"
  done
  spec=""
  for h in "${host_list[@]}"; do spec="${spec:+$spec,}$h:$per_node"; done
  args+=(--host "$spec")
elif [ -n "$hostfile" ]; then
  # Open MPI merges the lines of one host: nodes are the distinct names.
  nodes=$(wc -l <<<"$node_slots")
  args+=(--hostfile "$hostfile")
fi
np="${np:-$((nodes * per_node))}"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "--np: '$np' is not a positive number"
[ "$np" -le $((nodes * per_node)) ] ||
  die "--np $np is more than $per_node rank(s) per node × $nodes node(s); raise --ranks-per-node or add nodes"
# On this machine alone, more ranks than cores cannot each be bound to one (Open MPI's own error
# for it does not say what to change).
local_only=1
for h in ${hosts//,/ } $([ -z "$hostfile" ] || awk '{print $1}' <<<"$node_slots"); do
  case "$h" in localhost | 127.0.0.1 | "$(hostname)" | "$(hostname -s)") ;; *) local_only=0 ;; esac
done
cores=$(nproc 2>/dev/null || echo 0)
here_ranks=$((np < per_node ? np : per_node))
if [ "$bind" = core ] && [ "$local_only" -eq 1 ] && [ "$cores" -gt 0 ] && [ "$here_ranks" -gt "$cores" ]; then
  die "$here_ranks ranks on this machine's $cores cores cannot each be bound to a core: give --bind none (or fewer ranks)"
fi
args+=(-np "$np" --map-by "ppr:$per_node:node")
if [ "$bind" = core ]; then args+=(--bind-to core); else args+=(--bind-to none); fi
if [ -n "$iface" ]; then
  args+=(--mca btl_tcp_if_include "$iface" --mca oob_tcp_if_include "$iface")
fi
[ "$(id -u)" -eq 0 ] && args+=(--allow-run-as-root)
for name in PATH LD_LIBRARY_PATH OPENBLAS_NUM_THREADS CUDA_VISIBLE_DEVICES $(compgen -e | grep -E '^(STRATA|NCCL)_' || true) \
  "${envs[@]}"; do
  [ -n "${!name+set}" ] && args+=(-x "$name")
done
args+=("${passthrough[@]}")

# The command as it could be pasted into a shell (quoting only what needs it).
printf 'launch/mpirun.sh: mpirun'
for a in "${args[@]}" "$@"; do
  if [[ "$a" =~ ^[A-Za-z0-9_,.:=/+@%-]+$ ]]; then printf ' %s' "$a"; else printf ' %q' "$a"; fi
done
printf '\n'
[ "$dry" -eq 0 ] || exit 0
command -v "$1" >/dev/null || die "'$1' is not a command this shell finds (the program to run on every rank)"
exec "$here/strata-mpirun" "${args[@]}" "$@"
