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
# Shapes (SHAPES; with one client all three are the same run, labelled "issue"). Four clients of
# the issue's table are one redis-benchmark process against four of ours, on 2 cores; the
# other two shapes give both sides the same number of processes and connections:
#   issue       Redis: 1 process, c connections, -P p    ours: c processes at depth p
#   processes   Redis: c processes, -c 1 -P p each       ours: c processes at depth p
#   connection  Redis: 1 process, -c 1 -P c*p            ours: 1 process at depth c*p
# Rates of concurrent processes are summed on both sides (each process's own ops / its own time);
# group_ops_per_s beside it is all their ops / the wall time from starting the first to the last
# one's exit (process start-up included: ours also connects and handshakes, ~10 ms).
# usage: scripts/bench_redis_tcp.sh [BIN] [ROUNDS] [OPS]
#   BIN default build/rel/rdmahash (else build/ci/rdmahash); ROUNDS 5; OPS per client per run 200000.
#   Env: KEYS (1000000), VALUES ("8 100"), CLIENTS ("1 4"), PIPELINES ("1 16"), CLIENT_WAIT (auto: our
#   clients' --client-wait; auto's hybrid does not spin while clients + server outnumber the cores),
#   READ_SIZES ("8": our clients' --read-size, each a row of its own beside the same round's Redis;
#   a smaller R moves fewer bytes per get, 128-byte slots with 100-byte values, at more RT/op;
#   model, model-throughput: the script first runs `rdmahash calibrate` over the same loopback TCP
#   (mpirun -n 2) and passes the profile, so the model picks R for this link: model-throughput
#   from the time per READ at depth 16, the one for pipelined gets), SHAPES ("issue processes
#   connection": the shapes above).
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
SHAPES=${SHAPES:-issue processes connection}
for shape in $SHAPES; do
  case $shape in issue | processes | connection) ;; *) echo "bench_redis_tcp.sh: error: SHAPES: unknown shape '$shape' (issue, processes, connection)" >&2; exit 2 ;; esac
done
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
# redis SHAPE PROCS CONNS PIPELINE: PROCS concurrent redis-benchmark processes of CONNS connections,
# OPS*c GETs in all; one row: the processes' rates summed, and the group's rate.
redis() {
  local shape=$1 procs=$2 conns=$3 pipe=$4 pids=() rate tag i t0 t1
  tag=${round}_${v}_${c}_${p}_${shape}
  t0=$(date +%s%N)
  for i in $(seq 1 "$procs"); do
    redis-benchmark -p "${RADDR[$v]}" -t get -n $((OPS * c / procs)) -r "$KEYS" -d "$v" -c "$conns" -P "$pipe" --csv -q \
      > "$DIR/redis_${tag}_$i.csv" 2>> "$DIR/redis.err" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "bench_redis_tcp.sh: error: redis-benchmark failed" >&2; tail "$DIR/redis.err" >&2; exit 1; }; done
  t1=$(date +%s%N)
  rate=$(awk -F, -v want="$procs" '/GET/ { gsub(/"/, "", $2); s += $2; n++ } END { if (n == want) printf "%.2f", s }' "$DIR"/redis_"${tag}"_*.csv)
  [ -n "$rate" ] || { echo "bench_redis_tcp.sh: error: redis-benchmark gave no rate" >&2; tail "$DIR/redis.err" >&2; exit 1; }
  row "{\"system\":\"redis\",\"shape\":\"$shape\",\"round\":$round,\"value_bytes\":$v,\"clients\":$c,\"depth\":$p,\"processes\":$procs,\"connections_per_process\":$conns,\"pipeline\":$pipe,\"ops_per_s\":$rate,\"group_ops_per_s\":$(((OPS * c) * 1000000000 / (t1 - t0)))}"
}
# ours SHAPE PROCS DEPTH RS: PROCS concurrent `bench --connect` processes at DEPTH, OPS*c gets in all.
ours() {
  local shape=$1 procs=$2 depth=$3 rs=$4 pids=() tag i t0 t1
  tag=${round}_${v}_${c}_${p}_${rs}_${shape}
  t0=$(date +%s%N)
  for i in $(seq 1 "$procs"); do
    "$BIN" bench --connect "${OURS[$v]}" --workload get --read-size "$rs" ${PROFILE_ARGS[@]+"${PROFILE_ARGS[@]}"} --depth "$depth" \
      --ops $((OPS * c / procs)) --client-wait "$CLIENT_WAIT" --quiet --no-progress \
      --json "$DIR/run_${tag}_$i.jsonl" > /dev/null 2>> "$DIR/clients.err" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "bench_redis_tcp.sh: error: a client failed" >&2; tail "$DIR/clients.err" >&2; exit 1; }; done
  t1=$(date +%s%N)
  python3 - "$DIR" "$tag" "$shape" "$round" "$v" "$c" "$p" "$rs" "$procs" "$depth" "$((t1 - t0))" >> "$DIR/results.jsonl" << 'EOF'
import glob, json, sys
d, tag, shape, r, v, c, p, rs, procs, depth, wall_ns = sys.argv[1:]
rows = [json.loads(l) for f in sorted(glob.glob(f"{d}/run_{tag}_*.jsonl")) for l in open(f)]
if len(rows) != int(procs):
    sys.exit(f"bench_redis_tcp.sh: {len(rows)} client rows for {procs} processes")
hits = sum(x["outcomes"]["found"] for x in rows)
if hits != sum(x["ops"] for x in rows):
    sys.exit("bench_redis_tcp.sh: a get missed a present key")
print(json.dumps({"system": "rdmahash", "shape": shape, "round": int(r), "value_bytes": int(v), "clients": int(c),
                  "depth": int(p), "processes": int(procs), "depth_per_process": int(depth),
                  "read_size_spec": rs, "read_size": rows[0]["read_size"],
                  "ops_per_s": sum(x["throughput_ops_per_s"] for x in rows),
                  "group_ops_per_s": round(sum(x["ops"] for x in rows) * 1e9 / int(wall_ns)),
                  "round_trips_per_op": rows[0]["round_trips_per_op"], "bytes_per_op": rows[0]["bytes_per_op"],
                  "p50_us": rows[0]["latency_us"]["p50"], "p99_us": rows[0]["latency_us"]["p99"],
                  "client_wait": rows[0]["client_wait"], "read_coalescing": rows[0]["read_coalescing"]}))
EOF
}
for round in $(seq 1 "$ROUNDS"); do
  for v in $VALUES; do
    for c in $CLIENTS; do
      for p in $PIPELINES; do
        for shape in $SHAPES; do
          # One client: every shape is the same run (1 process, 1 connection, depth p): run once,
          # with the first shape of SHAPES, labelled issue.
          if [ "$c" = 1 ]; then
            [ "$shape" = "${SHAPES%% *}" ] || continue
            shape=issue
          fi
          case $shape in
            issue) redis issue 1 "$c" "$p" ;;
            processes) redis processes "$c" 1 "$p" ;;
            connection) redis connection 1 1 $((c * p)) ;;
          esac
          for rs in $READ_SIZES; do
            case $shape in
              issue | processes) ours "$shape" "$c" "$p" "$rs" ;;
              connection) ours connection 1 $((c * p)) "$rs" ;;
            esac
          done
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
order = {"issue": 0, "processes": 1, "connection": 2}
keys = sorted({(r["value_bytes"], r["clients"], r["depth"], r["shape"]) for r in rows}, key=lambda k: (k[:3], order[k[3]]))
specs = list(dict.fromkeys(r["read_size_spec"] for r in rows if r["system"] == "rdmahash"))
def shape_text(k):
    v, c, p, s = k
    if s == "issue":
        return f"Redis 1 proc x {c} conn; ours {c} proc" if c > 1 else "1 proc, 1 conn"
    if s == "processes":
        return f"{c} proc each side"
    return f"1 proc, 1 conn, {c * p} in flight"
print("| value B | clients | depth / pipeline | shape | Redis GET/s (median) | rdmahash R | rdmahash get/s (median) | ratio | ratio of group rates | rdmahash RT/op | bytes/op |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k in keys:
    pick = lambda s: [r for r in rows if r["system"] == s and (r["value_bytes"], r["clients"], r["depth"], r["shape"]) == k]
    mr = statistics.median(r["ops_per_s"] for r in pick("redis"))
    for spec in specs:
        ours = [r for r in pick("rdmahash") if r["read_size_spec"] == spec]
        mo = statistics.median(r["ops_per_s"] for r in ours)
        group = lambda rr: statistics.median(r["group_ops_per_s"] for r in rr)
        gr = group(ours) / group(pick("redis"))
        rs = spec if spec == str(ours[0]["read_size"]) else f"{spec} ({ours[0]['read_size']})"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {shape_text(k)} | {mr:,.0f} | {rs} | {mo:,.0f} | {mo / mr:.2f} | {gr:.2f} | {ours[0]['round_trips_per_op']:.3f} | {ours[0]['bytes_per_op']:.0f} |")
EOF
