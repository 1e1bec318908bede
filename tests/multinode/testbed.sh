#!/usr/bin/env bash
# The multi-node test bed: N "nodes" on this machine, each a network namespace whose processes
# also get their own UTS namespace (hostname node0, node1, ...), joined by a bridge that lives
# in a namespace of its own, so no interface or address of the host is touched. Not a launcher
# of dayzero: it makes the nodes, runs commands on them and removes them (docs/testing.md).
#
#   testbed.sh up DIR [NODES] [SLOTS]   make the nodes; writes DIR/hostfile, DIR/rsh-agent, DIR/bed.env
#   testbed.sh exec DIR HOST CMD...     run CMD on HOST (its network, its hostname)
#   testbed.sh pids DIR HOST            the pids of every process on HOST
#   testbed.sh kill DIR HOST            SIGKILL every process on HOST (the node is lost)
#   testbed.sh kill-ranks DIR HOST      SIGKILL what Open MPI started on HOST (its daemon lives)
#   testbed.sh cut DIR HOST             take HOST's link to the bridge down: its processes live on,
#                                       but no packet reaches or leaves it (a lost network)
#   testbed.sh mend DIR HOST            bring that link back up
#   testbed.sh slow DIR HOST RATE       limit HOST's link to RATE (tc tbf on both ends of its veth,
#                                       e.g. 200mbit): a slow NIC, cable or switch port
#   testbed.sh down DIR                 kill every process on the nodes, remove the namespaces
#   testbed.sh mpirun DIR ARGS...       mpirun on node0 across every node over TCP on the bridge
#
# Exit 0 ok, 1 nothing to kill, 2 usage, 3 the namespaces could not be made (a message says
# why; nothing is left behind). `up` of a DIR that still has a bed first removes it. Needs
# root, iproute2 (ip), util-linux (unshare).
set -euo pipefail
shopt -s inherit_errexit

SUBNET_PREFIX=10.77.0      # node i is 10.77.0.(i+1)/24; the bridge itself has no address
SUBNET=$SUBNET_PREFIX.0/24

die() { echo "testbed: $1" >&2; exit "${2:-2}"; }

# The namespace names of a bed: a tag from DIR's absolute path, so two beds (two build trees,
# two test runs) never share a name, and a rerun on the same DIR finds its predecessor's.
bed_tag() {
  local abs
  abs=$(cd "$1" 2>/dev/null && pwd -P) || die "no folder $1"
  printf 'dz%s' "$(printf '%s' "$abs" | cksum | cut -d' ' -f1 | tail -c 8)"
}

node_ns() { echo "$(bed_tag "$1")-n$2"; }
fabric_ns() { echo "$(bed_tag "$1")-fab"; }

# node index of HOST ("node3" -> 3), or die.
node_index() {
  local host=$2 n
  [[ $host =~ ^node([0-9]+)$ ]] || die "$host is not a node of this bed (node0, node1, ...)"
  n=${BASH_REMATCH[1]}
  [[ -f $1/bed.env ]] || die "no bed in $1 (run: testbed.sh up $1)"
  # shellcheck disable=SC1091
  source "$1/bed.env"
  # shellcheck disable=SC2153  # NODES comes from bed.env
  ((n < NODES)) || die "$host: the bed in $1 has $NODES node(s)"
  echo "$n"
}

cmd_down() {
  local dir=$1 tag ns pid
  tag=$(bed_tag "$dir")
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$tag-" || true); do
    # Every process left in the namespace (ranks, orted, a stalled rank): gone before the
    # namespace is, or its interfaces would outlive the name.
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -f "$dir/bed.env" "$dir/hostfile" "$dir/rsh-agent"
}

cmd_up() {
  local dir=$1 nodes=${2:-2} slots=${3:-2} tag fab ns i
  [[ $nodes =~ ^[0-9]+$ && $nodes -ge 2 && $nodes -le 16 ]] || die "NODES must be 2..16, not $nodes"
  [[ $slots =~ ^[0-9]+$ && $slots -ge 1 ]] || die "SLOTS must be >= 1, not $slots"
  [[ $(id -u) -eq 0 ]] || die "network namespaces need root (uid $(id -u))" 3
  command -v ip >/dev/null || die "ip (iproute2) is not installed" 3
  command -v unshare >/dev/null || die "unshare (util-linux) is not installed" 3
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  cmd_down "$dir"
  tag=$(bed_tag "$dir")
  fab=$(fabric_ns "$dir")
  trap 'trap - ERR; cmd_down "$dir"; die "setting up the bed failed at line $LINENO of ${BASH_SOURCE[0]}" 3' ERR
  ip netns add "$fab" 2>/dev/null || { trap - ERR; cmd_down "$dir"; die "cannot create network namespace $fab (ip netns add failed: no CAP_SYS_ADMIN, or no netns support)" 3; }
  unshare --uts true 2>/dev/null || { trap - ERR; cmd_down "$dir"; die "cannot create a UTS namespace (unshare --uts failed)" 3; }
  ip -n "$fab" link set lo up
  ip -n "$fab" link add br0 type bridge
  ip -n "$fab" link set br0 up
  local hosts="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < nodes; i++)); do hosts+="$SUBNET_PREFIX.$((i + 1)) node$i"$'\n'; done
  : >"$dir/hostfile"
  for ((i = 0; i < nodes; i++)); do
    ns=$tag-n$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # The veth pair: v<i> on the bridge in the fabric namespace, fab0 inside the node.
    ip -n "$fab" link add "v$i" type veth peer name fab0 netns "$ns"
    ip -n "$fab" link set "v$i" master br0
    ip -n "$fab" link set "v$i" up
    ip -n "$ns" addr add "$SUBNET_PREFIX.$((i + 1))/24" dev fab0
    ip -n "$ns" link set fab0 up
    # ip netns exec bind-mounts /etc/netns/<ns>/* over /etc: the nodes resolve each other.
    mkdir -p "/etc/netns/$ns"
    printf '%s' "$hosts" >"/etc/netns/$ns/hosts"
    echo "node$i slots=$slots" >>"$dir/hostfile"
  done
  printf 'NODES=%s\nSLOTS=%s\nTAG=%s\nSUBNET=%s\n' "$nodes" "$slots" "$tag" "$SUBNET" >"$dir/bed.env"
  # Open MPI's rsh launcher calls the agent as `AGENT [options] HOST COMMAND...`, the command
  # words to be run by a shell there, as ssh would.
  cat >"$dir/rsh-agent" <<EOF
#!/usr/bin/env bash
while [[ \$# -gt 0 && \$1 == -* ]]; do shift; done
host=\$1; shift
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/testbed.sh" exec "$dir" "\$host" sh -c "\$*"
EOF
  chmod +x "$dir/rsh-agent"
  # Every node's end of its veth must be up before anyone relies on the bridge (a bridge
  # without STP forwards as soon as its ports are up).
  local ok
  for ((i = 0; i < nodes; i++)); do
    ok=0
    for _ in $(seq 1 50); do
      if ip -n "$tag-n$i" link show fab0 | grep -q LOWER_UP; then ok=1; break; fi
      sleep 0.1
    done
    if ((!ok)); then trap - ERR; cmd_down "$dir"; die "node$i: its link to the bridge did not come up" 3; fi
  done
  trap - ERR
  echo "testbed: $nodes node(s) x $slots slot(s) up in $dir ($tag, $SUBNET)"
}

cmd_exec() {
  local dir=$1 host=$2 n ns
  shift 2
  [[ $# -ge 1 ]] || die "exec: no command"
  n=$(node_index "$dir" "$host")
  ns=$(node_ns "$dir" "$n")
  # A fresh UTS namespace per command, named like the node: every process of a node sees the
  # same hostname, and the host's own name is never changed.
  # shellcheck disable=SC2016  # expanded by the inner sh
  exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

cmd_pids() {
  local n
  n=$(node_index "$1" "$2")
  ip netns pids "$(node_ns "$1" "$n")"
}

cmd_kill() {
  local pid
  for pid in $(cmd_pids "$1" "$2"); do kill -9 "$pid" 2>/dev/null || true; done
}

# SIGKILL the processes Open MPI started on HOST (every descendant of its daemon there, orted,
# or mpirun on node0), leaving the daemon itself alive: the ranks die, the node does not.
cmd_kill_ranks() {
  local pids pid ppid f victims=() frontier=() next=()
  pids=$(cmd_pids "$1" "$2")
  for pid in $pids; do
    case $(cat "/proc/$pid/comm" 2>/dev/null) in orted | mpirun) frontier+=("$pid") ;; esac
  done
  ((${#frontier[@]})) || die "no Open MPI daemon (orted, mpirun) on $2" 1
  while ((${#frontier[@]})); do
    next=()
    for pid in $pids; do
      ppid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
      for f in "${frontier[@]}"; do [[ $ppid == "$f" ]] && next+=("$pid"); done
    done
    ((${#next[@]})) && victims+=("${next[@]}")
    frontier=("${next[@]}")
  done
  ((${#victims[@]})) || die "no process started by Open MPI on $2" 1
  kill -9 "${victims[@]}" 2>/dev/null || true
}

# HOST's end of its veth (fab0, inside the node) down or up: nothing is killed, no RST is sent;
# peers see silence, as when a node's NIC, cable or switch port fails.
cmd_link() {
  local n
  n=$(node_index "$1" "$2")
  ip -n "$(node_ns "$1" "$n")" link set fab0 "$3"
}

cmd_slow() {
  local n
  n=$(node_index "$1" "$2")
  command -v tc >/dev/null || die "tc (iproute2) is not installed" 3
  ip netns exec "$(node_ns "$1" "$n")" tc qdisc replace dev fab0 root tbf rate "$3" burst 64kb latency 200ms
  ip netns exec "$(fabric_ns "$1")" tc qdisc replace dev "v$n" root tbf rate "$3" burst 64kb latency 200ms
}

cmd_mpirun() {
  local dir=$1
  shift
  [[ -f $dir/bed.env ]] || die "no bed in $dir (run: testbed.sh up $dir)"
  # shellcheck disable=SC1091
  source "$dir/bed.env"
  # TCP only (no shared memory between the "nodes"), daemons and ranks on the bridge's subnet.
  cmd_exec "$dir" node0 mpirun --hostfile "$dir/hostfile" \
    --mca plm_rsh_agent "$dir/rsh-agent" \
    --mca btl self,tcp --mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET" \
    --mca pml ob1 "$@"
}

[[ $# -ge 2 ]] || die "usage: testbed.sh up|down|exec|pids|kill|kill-ranks|cut|mend|slow|mpirun DIR ..."
sub=$1
shift
case $sub in
  up) cmd_up "$@" ;;
  down) if [[ -d $1 ]]; then cmd_down "$(cd "$1" && pwd -P)"; fi ;;
  exec) [[ $# -ge 3 ]] || die "usage: testbed.sh exec DIR HOST CMD..."; cmd_exec "$@" ;;
  pids) [[ $# -eq 2 ]] || die "usage: testbed.sh pids DIR HOST"; cmd_pids "$@" ;;
  kill) [[ $# -eq 2 ]] || die "usage: testbed.sh kill DIR HOST"; cmd_kill "$@" ;;
  kill-ranks) [[ $# -eq 2 ]] || die "usage: testbed.sh kill-ranks DIR HOST"; cmd_kill_ranks "$@" ;;
  cut) [[ $# -eq 2 ]] || die "usage: testbed.sh cut DIR HOST"; cmd_link "$@" down ;;
  mend) [[ $# -eq 2 ]] || die "usage: testbed.sh mend DIR HOST"; cmd_link "$@" up ;;
  slow) [[ $# -eq 3 ]] || die "usage: testbed.sh slow DIR HOST RATE"; cmd_slow "$@" ;;
  mpirun) cmd_mpirun "$@" ;;
  *) die "unknown command $sub (up, down, exec, pids, kill, kill-ranks, cut, mend, slow, mpirun)" ;;
esac
