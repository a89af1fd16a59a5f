#!/bin/sh
# sim_project_seed001.sh — a projection on the simulated fabric (issue 29 item 2): seed 001 Fig. 3
# (right) and Table 1 (right) on EDR. Seed 001's setup (§4.2): find-or-put in a UPC PGAS on up to
# 48 machines × 16 processes (FDR, 48 Gb/s), C = 32, M = 32, blocking find-or-put, the mixed
# workload (50 % finds, 50 % inserts), each process owning a 1 GB portion (2^27 8-byte buckets)
# and inserting 10^7 random integers (so α ≤ 10^7 / 2^27 = 0.075 throughout). Speed-up is total
# throughput relative to 2 machines × 1 process.
# Here: --fabric sim --sim-profile edr, N memory nodes (one per machine) and N·P simulated clients
# at depth 1, linear probing with set slots (8-byte words: 63-bit keys and an occupied bit, as the
# seed's buckets), --chunk 32 --max-chunks 32, --speculative-claim off (the seed's protocol: READ
# chunks 0 and 1 in one round trip, then CAS the first empty slot), --workload mixed (every op is
# a find-or-put; half on a uniformly random bulk-loaded key, which is found, half on a new key,
# which is inserted). The table is bulk-loaded to α = LOAD_FACTOR before each point and the
# point's inserts raise it (JSON load_factor_start / load_factor_end). Rows are simulated
# (`fabric: sim`), not measured. NOT modelled: a PGAS process's accesses to its own machine's
# portion (1/N of them, local loads in UPC) — every access here is remote; the clients' own NICs
# (each seed machine's HCA carries its processes' requests and its portion's replies); UPC's runtime.
# The table prints an estimate of the PGAS speed-up with 1/N of the ops free (see results.md).
# Seed 001's local points (1 machine, Fig. 3 left) have no network and are not projected.
#
# Usage: scripts/sim_project_seed001.sh [BUILD_DIR] [OUT.jsonl]
#   MACHINES (default "2 4 8 16 32 48"), PROCS per machine (default "1 2 4 8 16"),
#   OPS_TOTAL per point, split over the clients (default 150000), but at least MIN_OPS per client
#   (default 1000: the bench's throughput is all ops over the last client's finish, so few ops per
#   client understate it; from 150 clients on a point has clients × MIN_OPS ops),
#   RECORDS (default 1000000) at LOAD_FACTOR (default 0.05: 20 M slots of 8 B, 165 MB with the
#   overflow tail; a point's inserts, half its ops, raise α to at most 0.05 + 528 000 / 2·10^7 ≈
#   0.076 at 1056 clients),
#   CLAIM (default off; auto is rdmahash's default), COMPARE_CLAIM (default auto: the last N × P
#   point again with that claim; empty: skip), SEED (default 1).
#   Default: 31 points, 6.7 M simulated ops, ~1 minute of wall time on a 2-core VM (48 s).
#   scripts/sim_project_seed003.sh runs this with MACHINES="2 66" (seed 003's 66 machines).
set -eu
BUILD=${1:-build/ci}
OUT=${2:-sim_project_seed001.jsonl}
MACHINES=${MACHINES:-2 4 8 16 32 48}
PROCS=${PROCS:-1 2 4 8 16}
OPS_TOTAL=${OPS_TOTAL:-150000}
MIN_OPS=${MIN_OPS:-1000}
RECORDS=${RECORDS:-1000000}
LOAD_FACTOR=${LOAD_FACTOR:-0.05}
CLAIM=${CLAIM:-off}
COMPARE_CLAIM=${COMPARE_CLAIM-auto}
SEED=${SEED:-1}
BIN=$BUILD/rdmahash
[ -x "$BIN" ] || { echo "no $BIN: build first" >&2; exit 2; }
: > "$OUT"

# point N P CLAIM: N memory nodes, N·P clients at depth 1, OPS_TOTAL ops split over them.
point() {
  clients=$(($1 * $2))
  ops=$((OPS_TOTAL / clients))
  [ "$ops" -lt "$MIN_OPS" ] && ops=$MIN_OPS
  echo "N=$1 P=$2: $clients clients × $ops ops, claim $3" >&2
  "$BIN" bench --fabric sim --sim-profile edr --memory-nodes "$1" --clients "$clients" --depth 1 \
    --ops "$ops" --records "$RECORDS" --load-factor "$LOAD_FACTOR" --scheme linear --slot-format set \
    --key-bytes 8 --value-bytes 0 --workload mixed --chunk 32 --max-chunks 32 --speculative-claim "$3" \
    --seed "$SEED" --no-progress --quiet --json "$OUT"
}

last_n=; last_p=
for n in $MACHINES; do
  for p in $PROCS; do
    point "$n" "$p" "$CLAIM"
    last_n=$n; last_p=$p
  done
done
if [ -n "$COMPARE_CLAIM" ] && [ "$COMPARE_CLAIM" != "$CLAIM" ]; then
  point "$last_n" "$last_p" "$COMPARE_CLAIM"
fi

python3 - "$OUT" "$CLAIM" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
claim = sys.argv[2]
# Seed 001 Table 1 (right): total find-or-put throughput, 10^6 ops/s, mixed workload, C = M = 32.
seed = {(2, 1): 1.28, (2, 2): 2.21, (2, 4): 3.83, (2, 8): 6.18, (2, 16): 10.17,
        (32, 1): 8.51, (32, 2): 16.09, (32, 4): 28.76, (32, 8): 49.41, (32, 16): 81.55,
        (48, 1): 11.73, (48, 2): 22.05, (48, 4): 37.82, (48, 8): 63.36, (48, 16): 114.85}
seed003 = {(66, 16): (140.0, 110.0)}  # seed 003's slides: "up to 140 × 10^6", "remote speedup up to 110"
def np(r):
    n = r["memory_nodes"]
    return n, r["clients"] // n
base = [r for r in rows if np(r) == (2, 1) and r["speculative_claim"] == claim]
b = base[0]["throughput_ops_per_s"] if base else None
# Estimated PGAS throughput: a latency-bound client spends (N-1)/N of its ops on the network when
# 1/N of them hit its own machine's portion (taken as free).
def pgas(r):
    n = r["memory_nodes"]
    return r["throughput_ops_per_s"] * n / (n - 1) if n > 1 else float("nan")
bp = pgas(base[0]) if base else None
print("| N × P | clients × ops | claim | sim M ops/s | k ops/s per client | speed-up vs 2×1 | est. PGAS speed-up "
      "| RT/op | chunks/op | READ + CAS per op | B/op | p25 / p50 / p75 / p99 µs | α start → end | full "
      "| events/s (wall) | wall s | seed M ops/s | seed k ops/s per process | seed speed-up |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (r["speculative_claim"] != claim, np(r), r["ops"])):
    n, p = np(r)
    t = r["throughput_ops_per_s"]
    req, lat = r["requests_per_op"], r["latency_us"]
    s, sp, ss = "—", "—", "—"
    if (n, p) in seed:
        s = "%.2f" % seed[(n, p)]
        sp = "%.0f" % (seed[(n, p)] * 1e3 / (n * p))
        ss = "%.1f" % (seed[(n, p)] / seed[(2, 1)])
    if (n, p) in seed003:
        s = "%.0f (seed 003)" % seed003[(n, p)][0]
        sp = "%.0f" % (seed003[(n, p)][0] * 1e3 / (n * p))
        ss = "%.0f (seed 003)" % seed003[(n, p)][1]
    print("| %d × %d | %d × %d | %s | %.2f | %.0f | %s | %s | %.3f | %.3f | %.3f + %.3f | %.1f | %.2f / %.2f / %.2f / %.2f "
          "| %.4f → %.4f | %d | %.0f | %.2f | %s | %s | %s |" % (
        n, p, r["clients"], r["ops"] // r["clients"], r["speculative_claim"], t / 1e6, t / 1e3 / r["clients"],
        "%.1f" % (t / b) if b else "—", "%.1f" % (pgas(r) / bp) if bp else "—",
        r["round_trips_per_op"], r["chunks_per_op"], req["read"], req["cas"], r["bytes_per_op"],
        lat["p25"], lat["p50"], lat["p75"], lat["p99"], r["load_factor_start"], r["load_factor_end"],
        r["outcomes"]["full"], r["sim_events_per_s"], r["sim_wall_seconds"], s, sp, ss))
EOF
