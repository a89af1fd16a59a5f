#!/bin/sh
# sim_project_seed000.sh — a projection on the simulated fabric (issue 29 item 2): seed 000 Figs. 7-8
# on EDR. Seed 000's setup (§5.1): one server, one client machine with 28 threads, one queue pair
# each, 16 outstanding READs per queue pair; 4-byte keys and values; load factors 0.25 ... 0.95.
# Here: --fabric sim --sim-profile edr (seed 000's c, ρ0 and link bandwidth; no client CPU: the
# seed's c is the whole cost of a READ), 1 memory node, 28 simulated clients at depth 16.
# Compared, as in Fig. 7: linear probing with the model's read size R* (bandwidth-bound, Eq. 2),
# unconstrained R*, fixed R = 11 slots (264 B: the paper's fixed 256 B, our slots are 24 B), and
# parallel cuckoo with 4-slot buckets (3 READs per lookup). Every lookup finds a present key of a
# warm table at its load factor (start = end). Rows are simulated (`fabric: sim`), not measured;
# round trips, requests and bytes per lookup are the protocol's and carry over unchanged.
#
# Usage: scripts/sim_project_seed000.sh [BUILD_DIR] [OUT.jsonl]
#   RECORDS (default 1 000 000: the simulated time does not depend on the table's size), OPS per
#   client (default 5 000), LOAD_FACTORS (default 0.25,0.5,0.65,0.8,0.9,0.95), CLIENTS (default 28).
set -eu
BUILD=${1:-build/ci}
OUT=${2:-sim_project_seed000.jsonl}
RECORDS=${RECORDS:-1000000}
OPS=${OPS:-5000}
LOAD_FACTORS=${LOAD_FACTORS:-0.25,0.5,0.65,0.8,0.9,0.95}
CLIENTS=${CLIENTS:-28}
BIN=$BUILD/rdmahash
[ -x "$BIN" ] || { echo "no $BIN: build first" >&2; exit 2; }
: > "$OUT"
common="--fabric sim --sim-profile edr --memory-nodes 1 --clients $CLIENTS --depth 16 --ops $OPS
        --records $RECORDS --key-bytes 4 --value-bytes 4 --load-factor $LOAD_FACTORS --workload get
        --no-progress --quiet --json $OUT"
# shellcheck disable=SC2086  # $common is a word list
"$BIN" bench $common --scheme linear --read-size model,model-unconstrained,fixed:11 --present-fraction 0  # the paper's R*
# shellcheck disable=SC2086
"$BIN" bench $common --scheme cuckoo --cuckoo-probe parallel --slots-per-bucket 4
python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| load factor | scheme | read size | simulated M lookups/s | RT/lookup | READs/lookup | B/lookup | p50 µs |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (r["target_load_factor"], r["scheme"], r["read_size_policy"])):
    print("| %.2f | %s | %s (R %d) | %.2f | %.3f | %.3f | %.0f | %.2f |" % (
        r["target_load_factor"], r["scheme_detail"], r["read_size_policy"], r["read_size"],
        r["throughput_ops_per_s"] / 1e6, r["round_trips_per_op"], r["requests_per_op"]["read"],
        r["bytes_per_op"], r["latency_us"]["p50"]))
EOF
