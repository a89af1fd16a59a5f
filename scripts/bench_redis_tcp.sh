#!/usr/bin/env bash
# A served table over TCP against Redis on the same loopback (issue 30 item 4): what a user serving
# a cache of small values over TCP would otherwise run. Redis comes from Debian (`redis-server`,
# `redis-tools`), installed here if missing (never in CI). Everything on 127.0.0.1, interleaved
# rounds (Redis, then ours, then Redis, ...), medians per configuration.
#   Redis    redis-server (no persistence), loaded with exactly KEYS keys "key:%012d" (the names
#            redis-benchmark's -r draws) of VALUE-byte values through redis-cli --pipe; then
#            redis-benchmark -t get -r KEYS -d VALUE -c CLIENTS -P PIPELINE: every GET hits.
#   rdmahash `rdmahash serve` (linear, inline records, KEYS records of 8-byte keys and VALUE-byte
#            values at load 0.5, UCX_TLS=tcp on lo) and CLIENTS `bench --connect` processes running
#            `--workload get` at --depth PIPELINE (present keys: every get hits); the rate is the
#            sum of the clients' throughput_ops_per_s, their round trips and bytes per op beside it.
# Depth 1 is compared with redis-benchmark -P 1 (one request in flight per connection), depth 16
# with -P 16. Both sides are one process serving (Redis single-threaded; serve's one thread).
# usage: scripts/bench_redis_tcp.sh [BIN] [ROUNDS] [OPS]
#   BIN default build/rel/rdmahash (else build/ci/rdmahash); ROUNDS 5; OPS per client per run 200000.
#   Env: KEYS (1000000), VALUES ("8 100"), CLIENTS ("1 4"), PIPELINES ("1 16"), CLIENT_WAIT (auto: our
#   clients' --client-wait; auto's hybrid does not spin while clients + server outnumber the cores),
#   READ_SIZES ("8": our clients' --read-size, each a row of its own beside the same round's Redis;
#   a smaller R moves fewer bytes per get, 128-byte slots with 100-byte values, at more RT/op;
#   model, model-throughput: the script first runs `rdmahash calibrate` over the same loopback TCP
#   (mpirun -n 2) and passes the profile, so the model picks R for this link: model-throughput
#   from the time per READ at depth 16, the one for pipelined gets).
# Output: results/redis_tcp/results.jsonl (one row per run) and summary.md (medians, ratio).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/rel/rdmahash}
[ -x "$BIN" ] || BIN=build/ci/rdmahash
ROUNDS=${2:-5}
OPS=${3:-200000}
KEYS=${KEYS:-1000000}
VALUES=${VALUES:-8 100}
CLIENTS=${CLIENTS:-1 4}
PIPELINES=${PIPELINES:-1 16}
CLIENT_WAIT=${CLIENT_WAIT:-auto}
READ_SIZES=${READ_SIZES:-8}
DIR=results/redis_tcp
RPORT=16379
[ -x "$BIN" ] || { echo "bench_redis_tcp.sh: error: no rdmahash binary at $BIN (build first)" >&2; exit 2; }
if ! command -v redis-server > /dev/null || ! command -v redis-benchmark > /dev/null; then
  [ "$(id -u)" = 0 ] || { echo "bench_redis_tcp.sh: error: redis-server missing; apt-get install redis-server redis-tools" >&2; exit 2; }
  apt-get install -y --no-install-recommends redis-server redis-tools > /dev/null
fi
rm -rf "$DIR"
mkdir -p "$DIR"
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
uptime | tee "$DIR/uptime_start.txt"
PROFILE_ARGS=()
case " $READ_SIZES " in *" model"*)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 \
    mpirun --oversubscribe -n 2 -x UCX_TLS -x UCX_NET_DEVICES "$BIN" calibrate --fabric ucx --out "$DIR/tcp_profile.json" \
    --region-bytes $((256 << 20)) | tee "$DIR/calibrate.txt"
  PROFILE_ARGS=(--profile "$DIR/tcp_profile.json") ;;
esac
redis-server --version | tee "$DIR/redis_version.txt"

SERVERS=()
cleanup() { for p in "${SERVERS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT

# --- the servers, one per value size, loaded once (every run only reads) ---------------------------
declare -A RADDR OURS
for v in $VALUES; do
  port=$((RPORT + v))
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$DIR" --dbfilename "unused.rdb" > "$DIR/redis_$v.log" 2>&1 &
  SERVERS+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.1; done
  python3 - "$KEYS" "$v" << 'EOF' | redis-cli -p "$port" --pipe > "$DIR/redis_load_$v.log"
import sys
n, v = int(sys.argv[1]), int(sys.argv[2])
val = b"x" * v
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(val), val))
EOF
  got=$(redis-cli -p "$port" dbsize)
  [ "$got" = "$KEYS" ] || { echo "bench_redis_tcp.sh: error: redis holds $got keys, expected $KEYS" >&2; exit 1; }
  RADDR[$v]=$port
  log=$DIR/serve_$v.log
  : > "$log"
  "$BIN" serve --listen 127.0.0.1:0 --no-progress --records "$KEYS" --slot-format inline --key-bytes 8 \
    --value-bytes "$v" --load-factor 0.5 > "$log" 2>&1 &
  SERVERS+=($!)
  for _ in $(seq 600); do grep -q listening "$log" && break; sleep 0.1; done
  OURS[$v]=$(grep -o '127\.0\.0\.1:[0-9]*$' "$log") || { echo "bench_redis_tcp.sh: error: serve did not start" >&2; cat "$log" >&2; exit 1; }
  echo "value $v B: redis :$port ($got keys), rdmahash ${OURS[$v]}"
done

# --- rounds ------------------------------------------------------------------------------------------
row() { echo "$1" >> "$DIR/results.jsonl"; }
for round in $(seq 1 "$ROUNDS"); do
  for v in $VALUES; do
    for c in $CLIENTS; do
      for p in $PIPELINES; do
        # Redis: one redis-benchmark process with c connections, p requests pipelined on each.
        n=$((OPS * c))
        rate=$(redis-benchmark -p "${RADDR[$v]}" -t get -n "$n" -r "$KEYS" -d "$v" -c "$c" -P "$p" --csv -q 2> /dev/null |
          awk -F, '/GET/ { gsub(/"/, "", $2); print $2 }')
        [ -n "$rate" ] || { echo "bench_redis_tcp.sh: error: redis-benchmark gave no rate" >&2; exit 1; }
        row "{\"system\":\"redis\",\"round\":$round,\"value_bytes\":$v,\"clients\":$c,\"depth\":$p,\"ops_per_s\":$rate}"
        for rs in $READ_SIZES; do
          # rdmahash: c client processes at depth p.
          pids=()
          for i in $(seq 1 "$c"); do
            "$BIN" bench --connect "${OURS[$v]}" --workload get --read-size "$rs" ${PROFILE_ARGS[@]+"${PROFILE_ARGS[@]}"} --depth "$p" --ops "$OPS" --client-wait "$CLIENT_WAIT" --quiet --no-progress \
              --json "$DIR/run_${round}_${v}_${c}_${p}_${rs}_$i.jsonl" > /dev/null 2>> "$DIR/clients.err" &
            pids+=($!)
          done
          for pid in "${pids[@]}"; do wait "$pid" || { echo "bench_redis_tcp.sh: error: a client failed" >&2; tail "$DIR/clients.err" >&2; exit 1; }; done
          python3 - "$DIR" "$round" "$v" "$c" "$p" "$rs" >> "$DIR/results.jsonl" << 'EOF'
import glob, json, sys
d, r, v, c, p, rs = sys.argv[1:]
rows = [json.loads(l) for f in sorted(glob.glob(f"{d}/run_{r}_{v}_{c}_{p}_{rs}_*.jsonl")) for l in open(f)]
hits = sum(x["outcomes"]["found"] for x in rows)
if hits != sum(x["ops"] for x in rows):
    sys.exit("bench_redis_tcp.sh: a get missed a present key")
print(json.dumps({"system": "rdmahash", "round": int(r), "value_bytes": int(v), "clients": int(c), "depth": int(p),
                  "read_size_spec": rs, "read_size": rows[0]["read_size"],
                  "ops_per_s": sum(x["throughput_ops_per_s"] for x in rows),
                  "round_trips_per_op": rows[0]["round_trips_per_op"], "bytes_per_op": rows[0]["bytes_per_op"],
                  "p50_us": rows[0]["latency_us"]["p50"], "p99_us": rows[0]["latency_us"]["p99"],
                  "client_wait": rows[0]["client_wait"], "read_coalescing": rows[0]["read_coalescing"]}))
EOF
        done
      done
    done
  done
  echo "round $round done"
done
uptime | tee "$DIR/uptime_end.txt"

# --- medians -----------------------------------------------------------------------------------------
python3 - "$DIR" << 'EOF' | tee "$DIR/summary.md"
import json, statistics, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/results.jsonl")]
keys = sorted({(r["value_bytes"], r["clients"], r["depth"]) for r in rows})
specs = list(dict.fromkeys(r["read_size_spec"] for r in rows if r["system"] == "rdmahash"))
print("| value B | clients | depth / pipeline | Redis GET/s (median) | rdmahash R | rdmahash get/s (median) | ratio | rdmahash RT/op | bytes/op |")
print("|---|---|---|---|---|---|---|---|---|")
for k in keys:
    pick = lambda s: [r for r in rows if r["system"] == s and (r["value_bytes"], r["clients"], r["depth"]) == k]
    mr = statistics.median(r["ops_per_s"] for r in pick("redis"))
    for spec in specs:
        ours = [r for r in pick("rdmahash") if r["read_size_spec"] == spec]
        mo = statistics.median(r["ops_per_s"] for r in ours)
        rs = spec if spec == str(ours[0]["read_size"]) else f"{spec} ({ours[0]['read_size']})"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {mr:,.0f} | {rs} | {mo:,.0f} | {mo / mr:.2f} | {ours[0]['round_trips_per_op']:.3f} | {ours[0]['bytes_per_op']:.0f} |")
EOF
