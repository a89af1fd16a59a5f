#!/bin/sh
# sim_validate.sh — the simulated fabric against this machine (issue 29 item 2).
#
# 1. `rdmahash calibrate --fabric local --write-sim-profile` measures this machine's in-process
#    fabric (one client, one memory node) and writes a sim profile (unless PROFILE is given):
#    its NIC/link constants measured, its client CPU `client_cpu = measured` (the scheme's, the
#    engine's and the bench's CPU between two batches, timed on this CPU as the simulation runs).
# 2. Each case runs on --fabric local (1 client, 1 memory node: what the profile describes) and on
#    --fabric sim with that profile, at depth 1 and 16: linear get and find-or-put, cuckoo get,
#    race get and insert (find-or-put).
# 3. Prints a table: measured vs simulated throughput (target within ±20 %) and whether round
#    trips, requests and bytes per op are identical, with the client CPU the simulation charged.
#
# Usage: scripts/sim_validate.sh [BUILD_DIR] [OUT.jsonl] [PROFILE]
#   defaults: build/ci, sim_validate.jsonl (JSON Lines of every run), a fresh calibration.
#   OPS (default 20000) operations per run; REPEAT (default 3) runs per point, medians.
set -eu
BUILD=${1:-build/ci}
OUT=${2:-sim_validate.jsonl}
PROFILE=${3:-}
OPS=${OPS:-20000}
REPEAT=${REPEAT:-3}
BIN=$BUILD/rdmahash
[ -x "$BIN" ] || { echo "no $BIN: build first" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ -z "$PROFILE" ]; then
  PROFILE=$TMP/local.simprofile
  "$BIN" calibrate --fabric local --region-bytes 16777216 --out "$TMP/calibration.json" --write-sim-profile "$PROFILE" >&2
fi
echo "# profile $PROFILE:" >&2
grep -v '^#' "$PROFILE" >&2
: > "$OUT"
for depth in 1 16; do
  for case in "linear|--scheme linear --workload get,find-or-put" \
              "cuckoo|--scheme cuckoo --workload get" \
              "race|--scheme race --workload get,find-or-put"; do
    flags=${case#*|}
    for fabric in local sim; do
      extra=""
      [ "$fabric" = sim ] && extra="--sim-profile $PROFILE"
      # shellcheck disable=SC2086
      "$BIN" bench --fabric $fabric $extra --clients 1 --memory-nodes 1 --depth $depth --ops "$OPS" \
        --records 100000 --repeat "$REPEAT" $flags --no-progress --quiet --json "$OUT"
    done
  done
done
python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["scheme"], r["workload"], r["depth"])
proto = lambda r: (r["round_trips_per_op"], r["requests_per_op"], r["bytes_per_op"])
groups = {}
for r in rows:
    groups.setdefault(key(r), {}).setdefault(r["fabric"], []).append(r)
print("| scheme | workload | depth | measured ops/s (local) | simulated ops/s | sim/measured | RT/op | req/op | bytes/op | local client CPU ns/op | sim charged client CPU ns/op | counters identical |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for k in sorted(groups, key=lambda k: (k[2], k[0], k[1])):
    g = groups[k]
    m = statistics.median(r["throughput_ops_per_s"] for r in g["local"])
    s = statistics.median(r["throughput_ops_per_s"] for r in g["sim"])
    same = all(proto(a) == proto(b) for a, b in zip(g["local"], g["sim"]))
    ratio = s / m
    flag = "" if abs(ratio - 1) <= 0.2 else " (outside ±20 %)"
    cpu = statistics.median(r["client_cpu_ns_per_op"] for r in g["local"])
    sr = g["sim"][0]
    # sim_client_cpu_ns covers the whole run (warm-up included): per op of the run, approximately.
    scpu = statistics.median(r.get("sim_client_cpu_ns", 0) / r["ops"] for r in g["sim"])
    print("| %s | %s | %d | %.0f | %.0f | %.2f%s | %.3f | %.3f | %.1f | %.0f | %.0f | %s |" % (k[0], k[1], k[2], m, s, ratio, flag,
          sr["round_trips_per_op"], sum(sr["requests_per_op"].values()), sr["bytes_per_op"], cpu, scpu, "yes" if same else "NO"))
EOF
