#!/usr/bin/env bash
# An emulated cluster on one machine: one network namespace per node, every node joined to a
# switch (a bridge in a namespace of its own) by a veth pair, and a tc token bucket on both ends
# of each pair as the inter-node link. The command runs under mpiexec with G ranks per node,
# each rank started inside its node's namespace, MPICH told to cross the veths over TCP (its OFI
# netmod) and to see each namespace's ranks as one node (cliques).
#
#   scripts/emulated-cluster.sh [--nodes 2] [--per-node 1] [--rate 1gbit] [--delay 1ms] \
#       [--mpiexec PATH] [--busy-poll] [--pin|--no-pin] [--tcp-cc cubic] -- COMMAND [ARGS...]
#
# Needs root, iproute2 (ip, tc) and the mpich wheel's mpiexec (default: the mpiexec beside the
# python3 on PATH, else `mpiexec`). Everything it creates (namespaces, and with them the veths,
# the bridge and the qdiscs) is named gdl<pid>..., and removed when it exits, also on failure or
# interrupt. Addresses: 10.213.0.<node+1>/24, only inside the namespaces it made. Every rank also
# gets GLOO_SOCKET_IFNAME (its node's veth) and MASTER_ADDR (node 0), so that PyTorch's gloo ranks
# (gdlbench allreduce --backend gloo, a DDP job reading PMI_RANK/PMI_SIZE) cross the same link. The ranks of a
# node share the machine's cores with the other nodes' ranks: with more ranks than cores the
# layout is oversubscribed (say so next to any figure), and MPICH is told to yield the core while
# it waits (progress throttle, as MPICH's own CI runs oversubscribed): a rank spinning in MPI on
# a core its peer needs measures the scheduler, not the link. --busy-poll keeps MPICH's default
# spinning. Oversubscribed, every node also gets cores of its own (taskset; --pin forces it,
# --no-pin leaves placement to the scheduler): node i runs on cores i*C/M .. (i+1)*C/M - 1 of the
# C cores (core i mod C when there are more nodes M than cores), so that a node's ranks share its
# cores as on a real node and never take one another node's ranks need (measured on 2 x 2 over 2
# cores: benchmarks/RESULTS.md, "Several nodes"). TCP between the nodes runs the congestion
# control --tcp-cc names (default cubic, Linux's default; `host` keeps this host's default), set
# on each node's route: under BBR every connection drops to 4 segments in flight for 200 ms
# whenever its minimum RTT is 10 s old (PROBE_RTT), and a sweep caught in that window measured
# the emulated 10 Gbit/s link at 50 MB/s. Exit status: the command's.
set -euo pipefail

nodes=2
per_node=1
rate=1gbit
delay=""
mpiexec=""
busy_poll=0
pin=auto
tcp_cc=cubic
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes|--per-node|--rate|--delay|--mpiexec|--tcp-cc)
      [ $# -ge 2 ] || { echo "emulated-cluster: $1 needs a value" >&2; exit 2; } ;;&
    --nodes) nodes=$2; shift 2 ;;
    --per-node) per_node=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --mpiexec) mpiexec=$2; shift 2 ;;
    --busy-poll) busy_poll=1; shift ;;
    --pin) pin=1; shift ;;
    --no-pin) pin=0; shift ;;
    --tcp-cc) tcp_cc=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "emulated-cluster: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "emulated-cluster: no command given (... -- COMMAND ARGS)" >&2; exit 2; }
[[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 2 ] && [ "$nodes" -le 64 ] \
  || { echo "emulated-cluster: --nodes must be an integer from 2 to 64, got $nodes" >&2; exit 2; }
[[ "$per_node" =~ ^[0-9]+$ ]] && [ "$per_node" -ge 1 ] \
  || { echo "emulated-cluster: --per-node must be a positive integer, got $per_node" >&2; exit 2; }
[[ "$rate" =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] \
  || { echo "emulated-cluster: --rate must look like 1gbit, 10gbit, 500mbit; got $rate" >&2; exit 2; }
ccs=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null || true)
[ "$tcp_cc" = host ] || { [[ "$tcp_cc" =~ ^[a-z0-9_]+$ ]] && [[ " $ccs " == *" $tcp_cc "* ]]; } \
  || { echo "emulated-cluster: --tcp-cc $tcp_cc is not one of this kernel's: ${ccs:-none listed} (or host)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "emulated-cluster: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null && command -v tc >/dev/null \
  || { echo "emulated-cluster: needs iproute2 (ip and tc)" >&2; exit 2; }
if [ -z "$mpiexec" ]; then
  mpiexec=$(dirname "$(command -v python3)")/mpiexec
  [ -x "$mpiexec" ] || mpiexec=$(command -v mpiexec || true)
fi
[ -x "$mpiexec" ] || { echo "emulated-cluster: no mpiexec found (give --mpiexec PATH)" >&2; exit 2; }

tag="gdl$$"
made=()
cleanup() {
  local ns
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The link: a token bucket (rate; burst and queue sizes checked on this machine kind), behind a netem
# delay when --delay is given. Applied on both ends of a node's veth: node->switch, switch->node.
shape() {  # namespace device
  if [ -n "$delay" ]; then
    tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$delay" 2>/dev/null \
      || { echo "emulated-cluster: --delay needs the kernel's netem qdisc, which this kernel lacks" >&2; exit 2; }
    tc -n "$1" qdisc add dev "$2" parent 1:1 handle 10: tbf rate "$rate" burst 256kb latency 50ms
  else
    tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms
  fi
}

sw="${tag}sw"
ip netns add "$sw"; made+=("$sw")
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((i = 0; i < nodes; i++)); do
  ns="${tag}n$i"
  ip netns add "$ns"; made+=("$ns")
  ip link add "${tag}v$i" type veth peer name "${tag}s$i"
  ip link set "${tag}v$i" netns "$ns"
  ip link set "${tag}s$i" netns "$sw"
  ip -n "$sw" link set "${tag}s$i" master br0
  ip -n "$sw" link set "${tag}s$i" up
  ip -n "$ns" addr add "10.213.0.$((i + 1))/24" dev "${tag}v$i"
  ip -n "$ns" link set "${tag}v$i" up
  [ "$tcp_cc" = host ] || ip -n "$ns" route replace 10.213.0.0/24 dev "${tag}v$i" congctl "$tcp_cc" \
    || { echo "emulated-cluster: cannot set $tcp_cc on the node's route (--tcp-cc host keeps the host's)" >&2; exit 2; }
  ip -n "$ns" link set lo up
  shape "$ns" "${tag}v$i"
  shape "$sw" "${tag}s$i"
done

opts=(MPIR_CVAR_NUM_CLIQUES="$nodes" MPIR_CVAR_CLIQUES_BY_BLOCK=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp)
ranks=$((nodes * per_node))
# the cores this script may use, by id (its affinity mask, e.g. "0-1,4")
cpus=()
IFS=, read -ra ranges <<< "$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)"
for r in "${ranges[@]}"; do
  for ((c = ${r%-*}; c <= ${r#*-}; c++)); do cpus+=("$c"); done
done
cores=${#cpus[@]}
waiting="busy-polling"
if [ "$ranks" -gt "$cores" ] && [ "$busy_poll" = 0 ] && [ -z "${MPIR_CVAR_CH4_PROGRESS_THROTTLE+set}" ]; then
  # Measured on 2 x 2 over 2 cores at 1 Gbit/s: the library all-reduce 70 % off the two-level
  # model while spinning, 9-15 % with these (benchmarks/RESULTS.md, "Several nodes"). A throttle
  # the caller set is left as it is.
  opts+=(MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT=1
         MPIR_CVAR_POLLS_BEFORE_YIELD=1)
  waiting="MPICH yields while it waits (oversubscribed)"
elif [ -n "${MPIR_CVAR_CH4_PROGRESS_THROTTLE+set}" ]; then
  waiting="MPICH's progress throttle as the caller set it"
fi
if [ "$pin" = auto ]; then
  [ "$ranks" -gt "$cores" ] && command -v taskset >/dev/null && pin=1 || pin=0
elif [ "$pin" = 1 ]; then
  command -v taskset >/dev/null || { echo "emulated-cluster: --pin needs taskset (util-linux)" >&2; exit 2; }
fi
placement=""
cmd=()
for ((i = 0; i < nodes; i++)); do
  [ $i -eq 0 ] || cmd+=(":")
  bind=()
  if [ "$pin" = 1 ]; then
    if [ "$nodes" -le "$cores" ]; then
      list=$(IFS=,; echo "${cpus[*]:$((i * cores / nodes)):$(((i + 1) * cores / nodes - i * cores / nodes))}")
    else list=${cpus[$((i % cores))]}; fi
    bind=(taskset -c "$list")
    placement+=" node $i on cores $list;"
  fi
  # torch.distributed (gloo) ranks find node 0 and their node's interface the same way MPICH does
  cmd+=(-n "$per_node" env "${opts[@]}" FI_TCP_IFACE="${tag}v$i" GLOO_SOCKET_IFNAME="${tag}v$i"
        MASTER_ADDR=10.213.0.1 ip netns exec "${tag}n$i" "${bind[@]}" "$@")
done
cc_used=$tcp_cc
[ "$tcp_cc" != host ] || cc_used="$(cat /proc/sys/net/ipv4/tcp_congestion_control) (host)"
echo "emulated-cluster: $nodes nodes x $per_node ranks, inter-node link $rate${delay:+ + $delay delay}" \
     "(veth + tc tbf, TCP $cc_used), $cores cores for $ranks ranks, $waiting${placement:+;${placement%;}}" >&2
# In the background so that a signal to this script is handled at once (bash runs traps only
# between foreground commands): the trap stops mpiexec, and the EXIT trap removes the namespaces.
"$mpiexec" "${cmd[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 130' INT
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM
set +e
wait "$child"
rc=$?
set -e
exit $rc
