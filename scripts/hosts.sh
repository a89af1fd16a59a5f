#!/usr/bin/env bash
# Many "hosts" on one machine, for real multi-host runs (issue 29): each host hK is a network
# namespace (its own interfaces, addresses and loopback) with its own UTS namespace (its own host
# name, hK), joined to the others by a bridge. Addresses are our own private range, 10.213.0.0/24
# (hK = 10.213.0.K; the machine itself is 10.213.0.254 on the bridge); nothing outside the machine
# is ever addressed. Each host also has its own IPC namespace. Processes in a host share the
# machine's file systems and kernel, so they see the same files and the same CLOCK_MONOTONIC (the
# boot id says so), but not each other's network or System V IPC: between hosts, UCX (which finds a
# peer in another IPC namespace unreachable over shared memory) and MPI carry traffic over TCP on
# the bridge.
#
#   scripts/hosts.sh up N           create h1 … hN (replacing any left from before); needs root
#   scripts/hosts.sh down           remove them
#   scripts/hosts.sh exec hK CMD…   run CMD inside host hK
#   scripts/hosts.sh list           the hosts that exist
#   scripts/hosts.sh mpirun ARGS…   Open MPI's own mpirun, launching into the hosts: its rsh agent is
#                                   this script (`agent hK CMD…` instead of ssh), its out-of-band and
#                                   TCP traffic on the bridge; e.g. `hosts.sh mpirun --host h1,h2 -n 2 …`
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=/run/rdmahash-hosts
BR=rhbr0
NET=10.213.0

die() { echo "hosts.sh: error: $*" >&2; exit 2; }
need_root() { [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"; }
exists() { [ -e "/var/run/netns/$1" ] && [ -e "$RUN/$1.uts" ] && [ -e "$RUN/$1.ipc" ]; }

down() {
  for f in "$RUN"/h*.uts; do
    [ -e "$f" ] || continue
    h=$(basename "$f" .uts)
    ip netns del "$h" 2>/dev/null || true
    ip link del "rhv${h#h}" 2>/dev/null || true
    umount "$f" 2>/dev/null || true
    umount "$RUN/$h.ipc" 2>/dev/null || true
    rm -f "$f" "$RUN/$h.ipc"
  done
  ip link del "$BR" 2>/dev/null || true
}

up() {
  local n=$1
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up needs a host count in [1, 64], got '$n'"
  need_root
  down
  mkdir -p "$RUN"
  ip link add "$BR" type bridge
  ip addr add "$NET.254/24" dev "$BR"
  ip link set "$BR" up
  for k in $(seq 1 "$n"); do
    h=h$k
    ip netns add "$h"
    ip link add "rhv$k" type veth peer name eth0 netns "$h"
    ip link set "rhv$k" master "$BR"
    ip link set "rhv$k" up
    ip -n "$h" addr add "$NET.$k/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    # A persistent UTS namespace (bind-mounted on a file) holding the host's name.
    touch "$RUN/$h.uts"
    unshare --uts="$RUN/$h.uts" hostname "$h"
    # And its own IPC namespace: System V shared memory stays inside the host, and UCX (which
    # names a host by the kernel's boot id, the same for every host here) sees a peer in another
    # IPC namespace as unreachable over shared memory (posix, sysv), as on two real machines.
    touch "$RUN/$h.ipc"
    unshare --ipc="$RUN/$h.ipc" true
  done
  # Name resolution for the hosts, in every host (they share /etc): h1 … hN and the machine.
  { grep -v ' # rdmahash-hosts$' /etc/hosts 2>/dev/null || true
    for k in $(seq 1 "$n"); do echo "$NET.$k h$k # rdmahash-hosts"; done; } > /etc/hosts.rdmahash-new
  cat /etc/hosts.rdmahash-new > /etc/hosts && rm -f /etc/hosts.rdmahash-new
  echo "hosts.sh: h1 … h$n up ($NET.1 … $NET.$n on bridge $BR)"
}

in_host() {  # in_host hK CMD…
  local h=$1
  shift
  exists "$h" || die "no host '$h' (scripts/hosts.sh up N first; hosts: $(list | tr '\n' ' '))"
  exec nsenter --net="/var/run/netns/$h" --uts="$RUN/$h.uts" --ipc="$RUN/$h.ipc" -- "$@"
}

list() { for f in "$RUN"/h*.uts; do [ -e "$f" ] && basename "$f" .uts; done | sort -V; }

case "${1:-}" in
  up) [ $# = 2 ] || die "usage: hosts.sh up N"; up "$2" ;;
  down) need_root; down; sed -i '/ # rdmahash-hosts$/d' /etc/hosts 2>/dev/null || true ;;
  exec) [ $# -ge 3 ] || die "usage: hosts.sh exec hK CMD…"; h=$2; shift 2; in_host "$h" "$@" ;;
  list) list ;;
  agent)  # Open MPI's rsh agent: `agent [options] hK CMD…` (ssh-style options are ignored)
    shift
    while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done
    [ $# -ge 2 ] || die "agent: usage: agent hK CMD…"
    h=$1
    shift
    in_host "$h" /bin/sh -c "$*" ;;
  mpirun)
    shift
    exec mpirun --mca plm_rsh_agent "$HERE/hosts.sh agent" --mca oob_tcp_if_include "$NET.0/24" \
      --mca btl self,vader,tcp --mca btl_tcp_if_include "$NET.0/24" --mca pml ob1 "$@" ;;
  *) die "usage: hosts.sh up N | down | exec hK CMD… | list | mpirun ARGS…" ;;
esac
