# shellcheck shell=bash disable=SC2016  # single-quoted text is for the shell of another namespace
# Nodes on one machine for the multi-node tests, sourced after common.sh: network namespaces
# joined by a bridge (itself in a namespace of its own, so the machine's network is untouched);
# node i has the address 10.213.0.(i+1), the only addresses used, and the host name node<i> in
# a UTS namespace of its own. Needs root and `ip netns`: the test is skipped (exit 77) otherwise.

skip() { echo "skipped: $*"; exit 77; }

# netns_nodes N: creates N nodes (NETNS_NODES[i] is node i's namespace) and a cleanup at exit that
# kills every process left in them.
netns_nodes() {
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "no ip command (iproute2)"
  command -v unshare >/dev/null || skip "no unshare command (util-linux)"
  NETNS_SWITCH="strata-sw-$$"
  NETNS_NODES=()
  local i
  for ((i = 0; i < $1; i++)); do NETNS_NODES+=("strata-n$i-$$"); done
  trap netns_cleanup EXIT
  ip netns add "$NETNS_SWITCH" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
  ip -n "$NETNS_SWITCH" link add br0 type bridge
  ip -n "$NETNS_SWITCH" link set br0 up
  for ((i = 0; i < $1; i++)); do
    ip netns add "${NETNS_NODES[$i]}"
    ip -n "$NETNS_SWITCH" link add "port$i" type veth peer name strata0 netns "${NETNS_NODES[$i]}"
    ip -n "$NETNS_SWITCH" link set "port$i" master br0 up
    ip -n "${NETNS_NODES[$i]}" addr add "10.213.0.$((i + 1))/24" dev strata0
    ip -n "${NETNS_NODES[$i]}" link set strata0 up
    ip -n "${NETNS_NODES[$i]}" link set lo up
  done
}

netns_cleanup() {
  local ns pids
  for ns in "${NETNS_NODES[@]}" "$NETNS_SWITCH"; do
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    # shellcheck disable=SC2086  # one pid per word
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
  done
  rm -rf "$WORK"
}

# on_node I CMD...: runs CMD on node I (its network and a UTS namespace named node<I>).
on_node() {
  local i="$1"; shift
  ip netns exec "${NETNS_NODES[$i]}" unshare --uts /bin/sh -c 'hostname "$1"; shift; exec "$@"' sh "node$i" "$@"
}

# netns_kill_node I: kills every process of node I, as a power loss would.
netns_kill_node() {
  # shellcheck disable=SC2046  # one pid per word
  kill -KILL $(ip netns pids "${NETNS_NODES[$1]}")
}

# netns_rsh_agent FILE: writes Open MPI's rsh agent, `FILE HOST COMMAND...`, which runs COMMAND
# as a remote shell would on the node with that address.
netns_rsh_agent() {
  local i
  {
    echo '#!/usr/bin/env bash'
    echo 'case "$1" in'
    for i in "${!NETNS_NODES[@]}"; do
      echo "  10.213.0.$((i + 1))) ns=${NETNS_NODES[$i]} name=node$i ;;"
    done
    echo '  *) echo "netns-rsh: no node $1" >&2; exit 255 ;;'
    echo 'esac'
    echo 'shift'
    echo "exec ip netns exec \"\$ns\" unshare --uts /bin/sh -c 'hostname \"\$1\"; shift; eval \"\$*\"' sh \"\$name\" \"\$@\""
  } >"$1"
  chmod +x "$1"
}
