#!/usr/bin/env bash
# A served memory node over TCP against UCX's own benchmark, in one script (issue 12):
#   ucx_perftest -t ucp_get -s 64 -O 16 (package ucx-utils) on the loopback, then `rdmahash serve`
#   with --serve-mode event and poll, each with one `bench --connect` client: raw-read of 64 bytes
#   and get (inline slots, 8-byte keys, 48-byte values: a 64-byte slot, R = 1) at depth 16.
# usage: scripts/bench_serve_tcp.sh [BIN] [ROUNDS]   (BIN default build/release/rdmahash; ROUNDS 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/rdmahash}
ROUNDS=${2:-2}
OUT=results/serve_tcp.jsonl
mkdir -p results
rm -f "$OUT"
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
perftest() {
  ucx_perftest -t ucp_get -s 64 -O 16 -n 200000 -p 13377 > /dev/null 2>&1 &
  local srv=$!
  sleep 1
  ucx_perftest 127.0.0.1 -t ucp_get -s 64 -O 16 -n 200000 -p 13377 -f 2>/dev/null | tail -1
  wait "$srv" || true
}
serve_run() {
  local mode=$1 log addr pid
  log=$(mktemp)
  "$BIN" serve --records 500000 --slot-format inline --key-bytes 8 --value-bytes 48 --listen 127.0.0.1:0 \
    --serve-mode "$mode" --no-progress > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log")
    [ -n "$addr" ] && break
    sleep 0.1
  done
  "$BIN" bench --connect "$addr" --workload raw-read,get --read-bytes 64 --read-size 1 --depth 16 \
    --ops 100000 --no-progress --quiet --json "$OUT" > /dev/null
  kill -TERM "$pid"
  wait "$pid" || true
  rm -f "$log"
}
for round in $(seq "$ROUNDS"); do
  echo "round $round: ucx_perftest ucp_get 64 B -O 16 (final: iterations, latency typical/avg/overall, BW avg/overall, msg rate avg/overall):"
  perftest
  for mode in event poll; do
    echo "round $round: rdmahash serve --serve-mode $mode" >&2
    serve_run "$mode"
  done
done
python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'server':7} {'workload':10} {'k ops/s':>9} {'p50 us':>8} {'p99 us':>8} {'RT/op':>6} {'client CPU ns/op':>17}")
for i, r in enumerate(rows):  # per round: event (raw-read, get), then poll (raw-read, get)
    print(f"{('event', 'poll')[i // 2 % 2]:7} {r['workload']:10} {r['throughput_ops_per_s']/1e3:9.1f} {r['latency_us']['p50']:8.1f} {r['latency_us']['p99']:8.1f} "
          f"{r['round_trips_per_op']:6.2f} {r['client_cpu_ns_per_op']:17.0f}")
PY
