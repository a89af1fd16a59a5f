#!/usr/bin/env bash
# Issue 12's get / raw-read target, over both client paths, for one or more binaries side by side:
# 1 memory node + 1 client, 8-byte keys and values, inline slots, 2 M records at load 0.5 and 0.8,
# R = 8 (get) against a raw read of the same 256 bytes, depth 16, --repeat 5 (get and raw-read
# alternate inside one process), with --direct-access off (UCX requests over shared memory) and on
# (loads and stores). Every round runs every (direct access, binary) pair once, interleaved, so a
# busy machine slows all alike.
# usage: scripts/bench_get_cpu.sh BIN [BIN...]   (ROUNDS=2 by default; OUT=results/get_cpu.jsonl;
#        OPS=200000 and REPEAT=5 are the issue's; longer points, e.g. OPS=2000000 REPEAT=3, are less
#        noisy for comparing binaries; DA="off on" picks the client paths;
#        MULTI="off on": --multi-get off and on side by side, get and raw-read alike;
#        READ_SIZES="8 10": get with each read size R against a raw read of R x 32 bytes, side by side)
# Summary on stdout, per direct access, load and binary: median M ops/s of get and raw-read and
# their ratio (the target: >= 0.9 at load 0.5, >= 0.85 at 0.8), median client CPU ns/op of both
# with raw/get and get - raw, and RT, requests and bytes per get (which must not differ between
# binaries). Compare binaries built the same way: code layout alone moves raw-read by a few ns/op.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-results/get_cpu.jsonl}
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
for round in $(seq "$ROUNDS"); do
  for da in ${DA:-off on}; do
   for mg in ${MULTI:-off}; do
    for rs in ${READ_SIZES:-8}; do
    for bin in "$@"; do
      echo "round $round: direct access $da, multi-get $mg, R = $rs: $bin ($(uptime | sed 's/.*load/load/'))" >&2
      tmp=$(mktemp)
      mpirun --oversubscribe -n 2 "$bin" bench --fabric ucx --memory-nodes 1 --slot-format inline --key-bytes 8 \
        --value-bytes 8 --records 2000000 --load-factor 0.5,0.8 --workload get,raw-read --read-size "$rs" \
        --read-bytes $((rs * 32)) --ops "${OPS:-200000}" --depth 16 --repeat "${REPEAT:-5}" --direct-access "$da" --multi-get "$mg" --no-progress --quiet \
        --json "$tmp" > /dev/null
      python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l); j["binary"] = sys.argv[2]; j["da"] = sys.argv[3]; print(json.dumps(j))' "$tmp" "$bin" "$da" >> "$OUT"
      rm -f "$tmp"
    done
    done
   done
  done
done
python3 - "$OUT" "$@" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
bins = sys.argv[2:]
pts = defaultdict(list)
for j in rows:
    rs = j["read_size"] if j["workload"] == "get" else j["read_bytes"] // 32
    pts[(j["da"], round(j["load_factor_start"], 2), j["binary"] + (" multi" if j.get("multi_get") == "on" else "") + f" R={rs}",
         j["workload"])].append(j)
med = lambda rs, f: statistics.median(f(r) for r in rs)
print(f"{'direct':6} {'lf':>4} {'binary':40} {'get M/s':>7} {'raw M/s':>7} {'get/raw':>7} "
      f"{'get ns':>7} {'raw ns':>7} {'raw/get':>7} {'get-raw':>7} {'RT/op':>7} {'req/op':>7} {'B/op':>7} n")
for da in ("off", "on"):
    for lf in sorted({k[1] for k in pts}):
        for b in sorted({k[2] for k in pts}, key=lambda s: (s.split(" R=")[0], int(s.split(" R=")[1]))):
            g, r = pts.get((da, lf, b, "get")), pts.get((da, lf, b, "raw-read"))
            if not g or not r:
                continue
            tg = med(g, lambda x: x["throughput_ops_per_s"]) / 1e6
            tr = med(r, lambda x: x["throughput_ops_per_s"]) / 1e6
            cg = med(g, lambda x: x["client_cpu_ns_per_op"])
            cr = med(r, lambda x: x["client_cpu_ns_per_op"])
            print(f"{da:6} {lf:4.2f} {b[-40:]:40} {tg:7.3f} {tr:7.3f} {tg / tr:7.3f} {cg:7.1f} {cr:7.1f} {cr / cg:7.3f} {cg - cr:7.1f} "
                  f"{g[0]['round_trips_per_op']:7.4f} {sum(g[0]['requests_per_op'].values()):7.4f} "
                  f"{g[0]['bytes_per_op']:7.2f} {len(g)}")
PY
