#!/bin/sh
# sim_project_race_cuckoo.sh — a projection on the simulated fabric (issue 29 item 2): seed 004's
# comparison, RACE vs cuckoo search (get) and insertion (find-or-put) throughput vs the number of
# clients, one memory node, --sim-profile edr, depth 1. Rows are simulated (`fabric: sim`), not
# measured: cuckoo inserts are RPCs, whose memory-node CPU cost (edr's rpc_ns = 1000 ns) is an
# assumption, not a seed 000 number (sim_fabric.cpp, sim_profile_edr).
#
# Usage: scripts/sim_project_race_cuckoo.sh [BUILD_DIR] [OUT.jsonl]   (CLIENTS="1 8 64 256")
set -eu
BUILD=${1:-build/ci}
OUT=${2:-sim_project_race_cuckoo.jsonl}
CLIENTS=${CLIENTS:-1 8 64 256}
BIN=$BUILD/rdmahash
[ -x "$BIN" ] || { echo "no $BIN: build first" >&2; exit 2; }
: > "$OUT"
for n in $CLIENTS; do
  ops=$((200000 / n))
  [ "$ops" -lt 500 ] && ops=500
  for scheme in race cuckoo; do
    "$BIN" bench --fabric sim --sim-profile edr --memory-nodes 1 --clients "$n" --depth 1 --ops "$ops" \
      --records 100000 --scheme $scheme --workload get,find-or-put --no-progress --quiet --json "$OUT"
  done
done
python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| fabric | profile | scheme | workload | clients | simulated ops/s | RT/op | p50 µs | p99 µs | events/s (wall) |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (r["workload"], r["scheme"], r["clients"])):
    print("| sim | %s | %s | %s | %d | %.3g | %.3f | %.2f | %.2f | %.0f |" % (r["sim_profile"], r["scheme"], r["workload"],
          r["clients"], r["throughput_ops_per_s"], r["round_trips_per_op"], r["latency_us"]["p50"],
          r["latency_us"]["p99"], r["sim_events_per_s"]))
EOF
