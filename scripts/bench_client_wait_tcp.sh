#!/usr/bin/env bash
# How a client waits over TCP (`--client-wait`, rdmahash::ClientWait): the policies side by side
# against one `rdmahash serve` on the loopback, interleaved, medians.
#   serve    linear, inline records, KEYS records of 8-byte keys and VALUE-byte values, load 0.5,
#            UCX_TLS=tcp on lo, its default serve mode (auto: hybrid over TCP).
#   clients  CLIENTS `bench --connect` processes at once, each `--workload get` of present keys at
#            --depth DEPTH, OPS operations each; the rate is the sum of their throughputs.
#   WAITS    the client flags compared (default: hybrid with its default spin, hybrid with the old
#            20 us spin, event, poll). With CLIENTS + 1 processes on fewer cores, hybrid should not
#            spin (client_unspun_sleeps_per_op near client_sleeps_per_op) and poll shows why.
# usage: scripts/bench_client_wait_tcp.sh [BIN] [ROUNDS] [OPS]
#   BIN default build/release/rdmahash (else build/ci/rdmahash); ROUNDS 3; OPS 100000 per client.
#   Env: CLIENTS ("1 4"), DEPTHS ("1 16"), VALUE (8), KEYS (1000000), WAITS (one flag set per line).
# Output: results/client_wait_tcp/results.jsonl (one row per run) and summary.md (medians).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/rdmahash}
[ -x "$BIN" ] || BIN=build/ci/rdmahash
ROUNDS=${2:-3}
OPS=${3:-100000}
CLIENTS=${CLIENTS:-1 4}
DEPTHS=${DEPTHS:-1 16}
VALUE=${VALUE:-8}
KEYS=${KEYS:-1000000}
WAITS=${WAITS:-"--client-wait hybrid
--client-wait hybrid --client-spin-us 20
--client-wait event
--client-wait poll"}
DIR=results/client_wait_tcp
[ -x "$BIN" ] || { echo "bench_client_wait_tcp.sh: error: no rdmahash binary at $BIN (build first)" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ && "$OPS" =~ ^[1-9][0-9]*$ ]] || { echo "bench_client_wait_tcp.sh: error: ROUNDS and OPS must be positive integers" >&2; exit 2; }
rm -rf "$DIR"
mkdir -p "$DIR"
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
uptime | tee "$DIR/uptime_start.txt"
nproc | tee "$DIR/nproc.txt"

"$BIN" serve --listen 127.0.0.1:0 --no-progress --records "$KEYS" --slot-format inline --key-bytes 8 \
  --value-bytes "$VALUE" --load-factor 0.5 > "$DIR/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2> /dev/null || true; wait 2> /dev/null || true' EXIT
for _ in $(seq 600); do grep -q listening "$DIR/serve.log" && break; sleep 0.1; done
ADDR=$(grep -o '127\.0\.0\.1:[0-9]*$' "$DIR/serve.log") || { echo "bench_client_wait_tcp.sh: error: serve did not start" >&2; cat "$DIR/serve.log" >&2; exit 1; }

mapfile -t WAIT_LIST <<< "$WAITS"
for round in $(seq 1 "$ROUNDS"); do
  for c in $CLIENTS; do
    for d in $DEPTHS; do
      for w in "${WAIT_LIST[@]}"; do
        rm -f "$DIR"/run_*.jsonl
        pids=()
        for i in $(seq 1 "$c"); do
          # shellcheck disable=SC2086  # $w is a set of flags
          "$BIN" bench --connect "$ADDR" --workload get --depth "$d" --ops "$OPS" --quiet --no-progress $w \
            --json "$DIR/run_$i.jsonl" > /dev/null 2>> "$DIR/clients.err" &
          pids+=($!)
        done
        for pid in "${pids[@]}"; do wait "$pid" || { echo "bench_client_wait_tcp.sh: error: a client failed" >&2; tail "$DIR/clients.err" >&2; exit 1; }; done
        python3 - "$DIR" "$round" "$c" "$d" "$w" >> "$DIR/results.jsonl" << 'PY'
import glob, json, statistics, sys
d, r, c, depth, w = sys.argv[1:]
rows = [json.loads(l) for f in sorted(glob.glob(f"{d}/run_*.jsonl")) for l in open(f)]
if sum(x["outcomes"]["found"] for x in rows) != sum(x["ops"] for x in rows):
    sys.exit("bench_client_wait_tcp.sh: a get missed a present key")
mean = lambda k: statistics.fmean(x[k] for x in rows)
print(json.dumps({"round": int(r), "clients": int(c), "depth": int(depth), "wait": w,
                  "client_wait": rows[0]["client_wait"], "ops_per_s": sum(x["throughput_ops_per_s"] for x in rows),
                  "p50_us": rows[0]["latency_us"]["p50"], "p99_us": rows[0]["latency_us"]["p99"],
                  "client_cpu_ns_per_op": mean("client_cpu_ns_per_op"),
                  "client_sleeps_per_op": mean("client_sleeps_per_op"),
                  "client_unspun_sleeps_per_op": mean("client_unspun_sleeps_per_op"),
                  "round_trips_per_op": rows[0]["round_trips_per_op"], "bytes_per_op": rows[0]["bytes_per_op"]}))
PY
      done
    done
  done
  echo "round $round done"
done
uptime | tee "$DIR/uptime_end.txt"

python3 - "$DIR" << 'PY' | tee "$DIR/summary.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/results.jsonl")]
keys = list(dict.fromkeys((r["clients"], r["depth"], r["wait"]) for r in rows))
print("| clients | depth | client flags | get/s (median) | min-max | p50 / p99 us | sleeps/op | unspun sleeps/op | client CPU ns/op | RT/op |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k in keys:
    g = [r for r in rows if (r["clients"], r["depth"], r["wait"]) == k]
    med = lambda f: statistics.median(r[f] for r in g)
    rates = [r["ops_per_s"] for r in g]
    print(f"| {k[0]} | {k[1]} | `{k[2]}` | {med('ops_per_s'):,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | "
          f"{med('p50_us'):.1f} / {med('p99_us'):.1f} | {med('client_sleeps_per_op'):.2f} | "
          f"{med('client_unspun_sleeps_per_op'):.2f} | {med('client_cpu_ns_per_op'):,.0f} | {g[0]['round_trips_per_op']:.3f} |")
PY
