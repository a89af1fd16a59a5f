#!/usr/bin/env bash
# Coalescing of every one-sided request over TCP (kAmOpv, issue 12): two rdmahash binaries side by
# side, interleaved per round, on the lead's command of 18:53 UTC (UCX_TLS=tcp, mpirun -n 2: 1 memory
# node + 1 client, inline 8-byte keys and values, 200 000 records, depth 16), one workload per run:
#   find-or-put, get, kv-mix
# The memory node (rank 0) runs under `perf stat -e task-clock`: its CPU per request served is the
# whole run's task-clock (load phase and hybrid-mode spinning included) over the requests the
# client counted; the client reports its own CPU ns/op (client_cpu_ns_per_op).
# usage: scripts/bench_opv_tcp.sh BASE_BIN NEW_BIN [ROUNDS=3] [OPS=30000] [OUTDIR=results/opv_tcp]
#   (each binary runs with its default --read-coalescing, auto = on over TCP: the base binary
#   coalesces all-READ batches only, the new one every batch's one-sided requests.)
set -euo pipefail
BASE=${1:?usage: bench_opv_tcp.sh BASE_BIN NEW_BIN [ROUNDS] [OPS] [OUTDIR]}
NEW=${2:?usage: bench_opv_tcp.sh BASE_BIN NEW_BIN [ROUNDS] [OPS] [OUTDIR]}
ROUNDS=${3:-3}
OPS=${4:-30000}
DIR=${5:-results/opv_tcp}
mkdir -p "$DIR"
rm -f "$DIR"/*.jsonl "$DIR"/*.stat
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp OMPI_MCA_pml=ob1 UCX_TLS=tcp \
  UCX_WARN_UNUSED_ENV_VARS=n
ARGS=(--memory-nodes 1 --slot-format inline --key-bytes 8 --value-bytes 8 --records 200000 --ops "$OPS" --depth 16
  --no-progress --quiet)
echo "load before: $(uptime)"
for round in $(seq "$ROUNDS"); do
  for w in find-or-put get kv-mix; do
    for variant in base new; do
      bin=$BASE
      [ "$variant" = new ] && bin=$NEW
      tag=$variant.$w.$round
      mpirun --oversubscribe -n 1 perf stat -x, -o "$DIR/$tag.stat" -e task-clock "$bin" bench --fabric ucx "${ARGS[@]}" \
        --workload "$w" --json "$DIR/$tag.jsonl" : -n 1 "$bin" bench --fabric ucx "${ARGS[@]}" --workload "$w" \
        --json "$DIR/$tag.jsonl" > "$DIR/$tag.log" 2>&1 || { echo "FAIL: $tag (see $DIR/$tag.log)"; exit 1; }
    done
  done
done
echo "load after: $(uptime)"
python3 - "$DIR" "$ROUNDS" <<'EOF'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def stat(path):
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[2] == "task-clock":
            return float(f[0])  # ms
    return float("nan")
print(f"{'workload':12} {'binary':6} {'kops/s':>8} {'p50 us':>8} {'p99 us':>9} {'RT/op':>6} {'req/op':>6} "
      f"{'cli ns/op':>9} {'node us/req':>11}   (median of {rounds} rounds; per-round kops/s)")
for w in ("find-or-put", "get", "kv-mix"):
    for v in ("base", "new"):
        rows = []
        for r in range(1, rounds + 1):
            tag = f"{d}/{v}.{w}.{r}"
            p = [json.loads(l) for l in open(tag + ".jsonl")][0]
            reqs = sum(p["requests_per_op"].values()) * p["ops"]
            rows.append(dict(k=p["throughput_ops_per_s"] / 1e3, p50=p["latency_us"]["p50"], p99=p["latency_us"]["p99"],
                             rt=p["round_trips_per_op"], rq=sum(p["requests_per_op"].values()),
                             cpu=p.get("client_cpu_ns_per_op", float("nan")), node=stat(tag + ".stat") * 1e3 / reqs,
                             rc=p.get("read_coalescing")))
        m = lambda k: statistics.median(x[k] for x in rows)
        per_round = ", ".join("%.1f" % x["k"] for x in rows)
        print(f"{w:12} {v:6} {m('k'):8.1f} {m('p50'):8.1f} {m('p99'):9.1f} {m('rt'):6.2f} {m('rq'):6.2f} {m('cpu'):9.0f} "
              f"{m('node'):11.2f}   ({per_round}; coalescing {rows[0]['rc']})")
EOF
