#!/usr/bin/env bash
# Where get's (and find-or-put's) client CPU goes, per layer (issue 12): `perf record` of the
# benchmark, then scripts/perf_layers.py with the run's client_cpu_ns_per_op.
#   get, raw-read: 1 memory node + 1 client, 2 M records at load 0.8, R = 8 inline slots (256 B),
#     depth 16, 3 M operations, --repeat 2.
#   pgas-get, pgas-find-or-put: 2 ranks, each a shard and a client, 4 M records, 8-byte keys and
#     values, inline slots, 1 M operations per rank, direct access on.
# usage: scripts/profile_get.sh BIN [BIN...]   (needs perf: Debian's linux-perf; DIR=results/profile)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
command -v perf > /dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 2; }
DIR=${DIR:-results/profile}
mkdir -p "$DIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
i=0
for bin in "$@"; do
  i=$((i + 1))
  for what in get raw-read pgas-get pgas-find-or-put; do
    case $what in
      get | raw-read)
        args=(-n 2 "$bin" bench --fabric ucx --memory-nodes 1 --slot-format inline --key-bytes 8 --value-bytes 8
              --records 2000000 --load-factor 0.8 --workload "$what" --read-size 8 --read-bytes 256
              --ops 3000000 --repeat 2 --depth 16 --direct-access on) ;;
      pgas-*)
        args=(-n 2 "$bin" bench --fabric ucx --symmetric --slot-format inline --key-bytes 8 --value-bytes 8
              --records 4000000 --workload "${what#pgas-}" --ops 1000000 --depth 16 --direct-access on) ;;
    esac
    out="$DIR/$i-$what"
    rm -f "$out.jsonl"
    perf record -q -F 4999 -o "$out.data" -- mpirun --oversubscribe "${args[@]}" --no-progress --quiet --json "$out.jsonl" > /dev/null 2>&1
    cpu=$(python3 -c 'import json,statistics,sys
print(statistics.median(json.loads(l)["client_cpu_ns_per_op"] for l in open(sys.argv[1])))' "$out.jsonl")
    echo "== $bin: $what ($(uptime | sed 's/.*load/load/'))"
    python3 scripts/perf_layers.py "$out.data" "$cpu" 12
  done
done
