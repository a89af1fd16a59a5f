#!/usr/bin/env bash
# get at the raw read rate, and the PGAS layout (issue 12), for one or more binaries side by side:
# every round runs every binary once (interleaved, so a busy machine slows all alike), medians
# over rounds and --repeat.
#   1 memory node + 1 client: get and raw-read of the same bytes (R = 8 inline slots = 256 B),
#     2 M records at load 0.5 and 0.8, depth 16, --repeat 5 (get and raw-read alternate).
#   the same at the model's read size (--read-size model, R* slots; raw-read of R* x 32 bytes).
#   PGAS: mpirun -n 2, every rank a shard and a client, 8-byte keys and values, inline slots,
#     4 M records (load 0.5), get and find-or-put, direct access on.
# usage: scripts/bench_get_rate.sh BIN [BIN...]   (ROUNDS=3 by default; OUT=results/get_rate.jsonl)
# Summary on stdout: per binary, point: median M ops/s, get/raw-read ratio, p50/p99, client CPU
# ns/op, and RT, requests and bytes per op (which must not differ between binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-results/get_rate.jsonl}
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
run() {  # run TAG mpirun-args...: appends the rows, each tagged with the binary
  local tag=$1; shift
  local tmp; tmp=$(mktemp)
  mpirun --oversubscribe "$@" --no-progress --quiet --json "$tmp" > /dev/null
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l); j["binary"] = sys.argv[2]; print(json.dumps(j))' "$tmp" "$tag" >> "$OUT"
  rm -f "$tmp"
}
for round in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    echo "round $round: $bin ($(uptime | sed 's/.*load/load/'))" >&2
    run "$bin" -n 2 "$bin" bench --fabric ucx --memory-nodes 1 --slot-format inline --key-bytes 8 --value-bytes 8 \
      --records 2000000 --load-factor 0.5,0.8 --workload get,raw-read --read-size 8 --read-bytes 256 \
      --ops 200000 --depth 16 --repeat 5 --direct-access on
    # The model's read size (--read-size model: R* of seed 000's cost model for this load), get
    # beside a raw read of the same R* slots' bytes; R* comes from the JSON of a short get run.
    # The JSON has no slot size: 32 bytes is the inline slot of --key-bytes 8 --value-bytes 8
    # (ctrl + key + value + check word); change both together.
    for lf in 0.5 0.8; do
      tmp=$(mktemp)
      mpirun --oversubscribe -n 2 "$bin" bench --fabric ucx --memory-nodes 1 --slot-format inline --key-bytes 8 \
        --value-bytes 8 --records 2000000 --load-factor $lf --workload get --read-size model --present-fraction 0 --ops 1000 \
        --direct-access on --no-progress --quiet --json "$tmp" > /dev/null
      rstar=$(python3 -c 'import json,sys; j=json.loads(open(sys.argv[1]).readline()); print(j["read_size"] * 32)' "$tmp")
      rm -f "$tmp"
      run "$bin" -n 2 "$bin" bench --fabric ucx --memory-nodes 1 --slot-format inline --key-bytes 8 --value-bytes 8 \
        --records 2000000 --load-factor $lf --workload get,raw-read --read-size model --present-fraction 0 --read-bytes "$rstar" \
        --ops 200000 --depth 16 --repeat 5 --direct-access on
    done
    run "$bin" -n 2 "$bin" bench --fabric ucx --symmetric --slot-format inline --key-bytes 8 --value-bytes 8 \
      --records 4000000 --workload get,find-or-put --ops 200000 --depth 16 --direct-access on
  done
done
python3 - "$OUT" "$@" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
bins = sys.argv[2:]
pts = defaultdict(list)
for j in rows:
    layout = "pgas" if j["symmetric"] else "1mem+1cl"
    if not j["symmetric"] and not j["read_size_policy"].startswith("fixed"):
        layout = f"1+1 R*={j['read_size']}"  # --read-size model
    pts[(j["binary"], layout, round(j["load_factor_start"], 2), j["workload"])].append(j)
def med(rs, f): return statistics.median(f(r) for r in rs)
print(f"{'binary':34} {'layout':9} {'lf':>4} {'workload':12} {'Mops/s':>7} {'get/raw':>7} {'p50':>6} {'p99':>6} {'cpu ns':>7} {'RT/op':>7} {'req/op':>7} {'B/op':>7} n")
for b in bins:
    for key in sorted(k for k in pts if k[0] == b):
        rs = pts[key]
        thr = med(rs, lambda r: r["throughput_ops_per_s"]) / 1e6
        ratio = ""
        if key[3] == "get" and (b, key[1], key[2], "raw-read") in pts:
            ratio = f"{thr / (med(pts[(b, key[1], key[2], 'raw-read')], lambda r: r['throughput_ops_per_s']) / 1e6):.3f}"
        req = rs[0]["requests_per_op"]
        print(f"{b[-34:]:34} {key[1]:9} {key[2]:4.2f} {key[3]:12} {thr:7.3f} {ratio:>7} "
              f"{med(rs, lambda r: r['latency_us']['p50']):6.2f} {med(rs, lambda r: r['latency_us']['p99']):6.2f} "
              f"{med(rs, lambda r: r['client_cpu_ns_per_op']):7.1f} {rs[0]['round_trips_per_op']:7.4f} "
              f"{sum(req.values()):7.4f} {rs[0]['bytes_per_op']:7.2f} {len(rs)}")
PY
