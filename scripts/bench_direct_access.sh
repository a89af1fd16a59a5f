#!/usr/bin/env bash
# Same-host fast path side by side (issue 12): every point with --direct-access on and off,
# interleaved (on, off, on, off, ...) so that a busy machine slows both alike; medians per point.
#   PGAS layout: mpirun -n 2, every rank a shard and a client, 8-byte keys and values, inline slots,
#     4 M records in 8 M slots (load 0.5), get and find-or-put (and set-format get/find-or-put).
#   1 memory node + 1 client: get and raw-read of the same bytes (R = 8 slots = 256 B).
# usage: scripts/bench_direct_access.sh [BIN] [ROUNDS]   (BIN default build/release/rdmahash,
#        ROUNDS default 3). Output: results/direct_access.jsonl and a summary table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/rdmahash}
ROUNDS=${2:-3}
OUT=results/direct_access.jsonl
mkdir -p results
rm -f "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
run() { mpirun --oversubscribe "$@" --no-progress --quiet --json "$OUT" > /dev/null; }
for round in $(seq "$ROUNDS"); do
  for mode in on off; do
    echo "round $round, direct access $mode" >&2
    run -n 2 "$BIN" bench --fabric ucx --symmetric --slot-format inline --key-bytes 8 --value-bytes 8 \
      --records 4000000 --workload get,find-or-put --ops 200000 --depth 16 --direct-access "$mode"
    run -n 2 "$BIN" bench --fabric ucx --symmetric --slot-format set --key-bytes 8 \
      --records 4000000 --workload get,find-or-put --ops 200000 --depth 16 --direct-access "$mode"
    run -n 2 "$BIN" bench --fabric ucx --memory-nodes 1 --slot-format inline --key-bytes 8 --value-bytes 8 \
      --records 2000000 --load-factor 0.5,0.8 --workload get,raw-read --read-size 8 --read-bytes 256 \
      --ops 200000 --depth 16 --direct-access "$mode"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
from collections import defaultdict
pts = defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    key = ("pgas" if j["symmetric"] else "1mem+1cl", j["scheme_detail"].split()[0], j["load_factor_start"], j["workload"], j["direct_access"])
    pts[key].append(j)
print(f"{'layout':9} {'format':14} {'lf':>4} {'workload':12} {'direct':6} {'Mops/s (median)':>16} {'p50 us':>7} {'p99 us':>7} {'RT/op':>6} {'req/op':>6} runs")
for key in sorted(pts):
    rows = pts[key]
    med = statistics.median(r["throughput_ops_per_s"] for r in rows) / 1e6
    p50 = statistics.median(r["latency_us"]["p50"] for r in rows)
    p99 = statistics.median(r["latency_us"]["p99"] for r in rows)
    req = sum(rows[0]["requests_per_op"].values())
    print(f"{key[0]:9} {key[1]:14} {key[2]:4.2f} {key[3]:12} {key[4]:6} {med:16.3f} {p50:7.2f} {p99:7.2f} {rows[0]['round_trips_per_op']:6.2f} {req:6.2f} {len(rows)}")
PY
