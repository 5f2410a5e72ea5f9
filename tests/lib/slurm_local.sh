# shellcheck shell=bash
# A Slurm cluster on the nodes of tests/lib/netns_nodes.sh, sourced after it: the distribution's
# own Slurm packages, fetched once with apt (scratch package lists, nothing installed or changed
# on the system) and unpacked into .deps/slurm; slurmctld on node0 and slurmd on every node,
# authentication off (auth/none), processes tracked by process group, no cgroups. slurmd runs
# slurmstepd from the path it was built with (/usr/sbin): each slurmd has a mount namespace of its
# own where an overlay adds it there. Skipped (exit 77) where any of this cannot be had.

# slurm_fetch: unpacks the packages into $SLURM_PREFIX (default .deps/slurm of the source tree).
slurm_fetch() {
  SLURM_PREFIX="${STRATA_SLURM_PREFIX:-$SRC/.deps/slurm}"
  if [ ! -f "$SLURM_PREFIX/.complete" ]; then
    command -v apt-get >/dev/null || skip "no apt-get to fetch Slurm's packages with"
    local scratch
    scratch="$(mktemp -d "${TMPDIR:-/tmp}/strata-slurm.XXXXXX")"
    mkdir -p "$scratch/lists/partial" "$scratch/cache/archives/partial" "$scratch/debs"
    local apt_opts=(-o Dir::State::Lists="$scratch/lists" -o Dir::Cache="$scratch/cache"
      -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root -o Debug::NoLocking=1)
    echo "slurm: fetching the distribution's Slurm packages into $SLURM_PREFIX"
    apt-get "${apt_opts[@]}" -qq update >/dev/null 2>&1 || { rm -rf "$scratch"; skip "apt-get update failed (no package registry?)"; }
    # The packages and whichever of their dependencies this machine lacks.
    local packages
    packages="$(apt-get "${apt_opts[@]}" -s install --no-install-recommends slurmctld slurmd slurm-client 2>/dev/null |
      awk '/^Inst /{print $2}')"
    [ -n "$packages" ] || { rm -rf "$scratch"; skip "the package registry has no slurmctld, slurmd and slurm-client"; }
    # shellcheck disable=SC2086  # one package per word
    (cd "$scratch/debs" && apt-get "${apt_opts[@]}" -qq download $packages >/dev/null 2>&1) ||
      { rm -rf "$scratch"; skip "apt-get download of $packages failed"; }
    rm -rf "$SLURM_PREFIX" && mkdir -p "$SLURM_PREFIX"
    local deb
    for deb in "$scratch"/debs/*.deb; do dpkg -x "$deb" "$SLURM_PREFIX"; done
    rm -rf "$scratch"
    touch "$SLURM_PREFIX/.complete"
  fi
  SLURM_LIBDIR="$(dirname "$(find "$SLURM_PREFIX/usr/lib" -name libslurmfull.so | head -n 1)")"
  [ -f "$SLURM_LIBDIR/auth_none.so" ] || skip "this Slurm has no auth/none plugin"
  SLURM_SBIN="$SLURM_PREFIX/usr/sbin"
  export PATH="$SLURM_PREFIX/usr/bin:$PATH"
  LD_LIBRARY_PATH="$SLURM_LIBDIR:$(dirname "$SLURM_LIBDIR")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  echo "slurm: $("$(slurm_daemon slurmctld)" -V) from $SLURM_PREFIX"
}

# slurm_daemon NAME: the daemon's binary (Debian names them NAME-wlm).
slurm_daemon() {
  local f
  for f in "$SLURM_SBIN/$1" "$SLURM_SBIN/$1-wlm"; do
    [ -x "$f" ] && { echo "$f"; return 0; }
  done
  skip "no $1 in $SLURM_SBIN"
}

# slurm_start DIR CPUS: a cluster of every netns node with CPUS CPUs each, its configuration, state
# and logs in DIR (SLURM_CONF points there); returns when every node is idle.
slurm_start() {
  local dir="$1" cpus="$2" n="${#NETNS_NODES[@]}" i addrs=""
  mkdir -p "$dir/state" "$dir/sbin"
  ln -sf "$(slurm_daemon slurmstepd)" "$dir/sbin/slurmstepd"
  for ((i = 0; i < n; i++)); do
    addrs="${addrs:+$addrs,}10.213.0.$((i + 1))"
    mkdir -p "$dir/spool/node$i" "$dir/tmp/node$i"
  done
  # Nodes do not share temporary files: each task's TMPDIR (where Open MPI and PMIx keep their
  # session files) is its node's own, and so are /dev/shm and System V IPC (below).
  cat >"$dir/task_prolog" <<'EOF'
#!/bin/sh
echo "export TMPDIR=$(dirname "$0")/tmp/$SLURMD_NODENAME"
EOF
  chmod +x "$dir/task_prolog"
  cat >"$dir/slurm.conf" <<EOF
ClusterName=strata-test
SlurmctldHost=node0(10.213.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# A requeued job may start again after cred_expire seconds (default 120).
AuthInfo=cred_expire=5
PluginDir=$SLURM_LIBDIR
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
TaskProlog=$dir/task_prolog
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=30
NodeName=node[0-$((n - 1))] NodeAddr=$addrs CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$dir/slurm.conf"
  on_node 0 "$(slurm_daemon slurmctld)" -i || skip "slurmctld did not start ($dir/slurmctld.log)"
  local slurmd
  slurmd="$(slurm_daemon slurmd)"
  # slurmd initialises its cgroup plugin whatever the tracking: give it what the machine has
  # (`ip netns exec` mounts a /sys of its own, without cgroups).
  local cgroups='mount -t cgroup2 cgroup2 /sys/fs/cgroup'
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] ||
    cgroups='mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
      mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd'
  for ((i = 0; i < n; i++)); do
    # shellcheck disable=SC2016  # the arguments of that shell
    on_node "$i" unshare --mount --ipc --propagation private /bin/sh -c \
      'mount -t overlay overlay -o "lowerdir=$1:/usr/sbin" /usr/sbin && mount -t tmpfs shm /dev/shm && eval "$4" &&
        exec "$2" -N "$3"' \
      sh "$dir/sbin" "$slurmd" "node$i" "$cgroups" || skip "slurmd did not start on node$i ($dir/slurmd.node$i.log)"
  done
  for _ in $(seq 1 100); do
    [ "$(slurm sinfo -h -o %T 2>/dev/null)" = idle ] && return 0
    sleep 0.2
  done
  slurm sinfo >&2 || true
  tail -n 5 "$dir"/*.log >&2
  fail "the Slurm nodes did not become idle"
}

# slurm CMD ARGS...: runs a Slurm command on node0 (sbatch, squeue, scontrol, scancel, sinfo).
slurm() { on_node 0 "$@"; }

# slurm_job_field JOB KEY: a value from `scontrol show job JOB` (JobState, Restarts, ...).
slurm_job_field() {
  slurm scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
