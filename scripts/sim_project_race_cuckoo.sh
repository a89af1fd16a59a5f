#!/bin/sh
# sim_project_race_cuckoo.sh — a projection on the simulated fabric (issue 29 item 2): seed 004's
# comparison, RACE against cuckoo, FaRM's hopscotch and DrTM's cluster hashing: search (get) and
# insertion (find-or-put of new keys) throughput vs the number of clients, one memory node,
# --sim-profile edr, depth 1. Rows are simulated (`fabric: sim`), not measured: the other schemes'
# inserts are RPCs, whose memory-node CPU cost (edr's rpc_ns = 1000 ns) is an assumption, not a seed
# 000 number (sim_fabric.cpp, sim_profile_edr). Tables: 100 000 records loaded at load factor 0.25
# (RACE grows by splits instead), so that a point's 200 000 inserts end at 0.75 and none answers full;
# every get finds a loaded key. The table printed gives each row's load factor at start and end and
# its `full` answers.
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
  for scheme in race cuckoo hopscotch cluster; do
    "$BIN" bench --fabric sim --sim-profile edr --memory-nodes 1 --clients "$n" --depth 1 --ops "$ops" \
      --records 100000 --load-factor 0.25 --scheme $scheme --workload get,find-or-put --no-progress --quiet --json "$OUT"
  done
done
python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| scheme | workload | clients | simulated ops/s | RT/op | requests/op | p50 µs | p99 µs | load factor start → end | full | events/s (wall) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
for r in sorted(rows, key=lambda r: (r["workload"], r["scheme"], r["clients"])):
    print("| %s | %s | %d | %.3g | %.3f | %.2f | %.2f | %.2f | %.2f → %.2f | %d | %.0f |" % (
          r["scheme"], r["workload"], r["clients"], r["throughput_ops_per_s"], r["round_trips_per_op"],
          sum(r["requests_per_op"].values()), r["latency_us"]["p50"], r["latency_us"]["p99"],
          r["load_factor_start"], r["load_factor_end"], r["outcomes"]["full"], r["sim_events_per_s"]))
EOF
