#!/usr/bin/env bash
# A real single-node Slurm on this machine (Debian's slurm-wlm and munge), for trying and testing
# gdlbench under srun:
#
#   scripts/slurm-local.sh start            # install if missing, configure, start munged, slurmctld, slurmd
#   scripts/slurm-local.sh stop             # stop the three daemons it started
#   scripts/slurm-local.sh run -- COMMAND   # start, run COMMAND (e.g. srun -n 2 --mpi=pmi2 ...), stop
#
# Needs root and a Debian system (apt-get). The configuration it writes (/etc/slurm/slurm.conf,
# /etc/munge/munge.key) carries a marker line; an existing configuration without it is never
# overwritten (the script stops instead). No cgroup.conf: Slurm 22.05 has no CgroupPlugin=disabled
# and slurmd refuses to start with one that names a missing cgroup setup. MPI: the mpich wheel
# speaks PMI2, so run its programs with `srun --mpi=pmi2` (--mpi=pmix fails here: Debian's pmix
# plugin cannot create its context; --mpi=none starts N singleton worlds).
set -euo pipefail

marker="# written by gdlbench scripts/slurm-local.sh"
conf=/etc/slurm/slurm.conf
key=/etc/munge/munge.key
run=/run/gdlbench-slurm

die() { echo "slurm-local: $*" >&2; exit 2; }

install() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  command -v apt-get >/dev/null || die "slurm-wlm and munge are missing and there is no apt-get"
  echo "slurm-local: installing slurm-wlm and munge (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null; } \
    || die "apt-get install slurm-wlm munge failed"
}

configure() {
  if [ -e "$key" ] && ! [ -e "$run/munge.key.ours" ]; then
    [ "$(stat -c %U "$key")" = munge ] || die "$key exists and is not munge's: not touching it"
  else
    mkdir -p "$run" /etc/munge
    head -c 1024 /dev/urandom >"$key"
    chown munge:munge "$key"; chmod 400 "$key"
    touch "$run/munge.key.ours"
  fi
  if [ -e "$conf" ] && ! grep -qF "$marker" "$conf"; then
    die "$conf exists and was not written by this script: not touching it"
  fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm "$run"
  local host node mem
  host=$(hostname -s)
  # slurmd -C prints this machine's own node line (CPUs, sockets, cores, memory); keep a margin of memory.
  node=$(slurmd -C | head -1 | sed -E 's/ RealMemory=[0-9]+//')
  mem=$(slurmd -C | head -1 | sed -nE 's/.*RealMemory=([0-9]+).*/\1/p')
  cat >"$conf" <<EOF
$marker
ClusterName=gdlbench
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MpiDefault=none
$node RealMemory=$((mem > 2048 ? mem - 1024 : mem)) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root"
  install
  configure
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  if ! [ -e /run/munge/munged.pid ] || ! kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; then
    su -s /bin/sh munge -c /usr/sbin/munged
    touch "$run/munged.ours"
  fi
  slurmctld
  slurmd
  local state=""
  for _ in $(seq 60); do
    state=$(sinfo -h -o %t 2>/dev/null | head -1 || true)
    [ "$state" = idle ] && { echo "slurm-local: node $(hostname -s) is idle" >&2; return; }
    sleep 1
  done
  echo "slurm-local: the node did not become idle (state: ${state:-none}); slurmd.log:" >&2
  tail -5 /var/log/slurm/slurmd.log >&2 || true
  stop
  exit 1
}

stopd() {  # pid file
  [ -e "$1" ] || return 0
  local pid
  pid=$(cat "$1")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$1"
}

stop() {
  stopd "$run/slurmd.pid"
  stopd "$run/slurmctld.pid"
  if [ -e "$run/munged.ours" ]; then
    stopd /run/munge/munged.pid
    rm -f "$run/munged.ours"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  run)
    shift
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "run: no command given (run -- COMMAND ARGS)"
    start
    trap stop EXIT
    "$@"
    ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
