#!/usr/bin/env bash
# A memory node over TCP against UCX's own benchmark, all in one script (issue 12, item 4):
# UCX_TLS=tcp on the loopback, 1 memory node, depth 16, 64-byte reads. Per round, interleaved:
#   perftest  ucx_perftest -t ucp_get -s 64 -O 16 (package ucx-utils): server + client processes
#   ref       scripts/ucp_get_ref.c (built here): the same GETs with the target spinning on
#             ucp_worker_progress (ref-spin) or sleeping on its event fd (ref-event). Needed because
#             ucx_perftest's passive side progresses only between poll(..., 1 ms) calls of its
#             socket barrier, which over TCP (the target executes every GET) bounds its rate.
#   mpirun    mpirun -n 2 rdmahash bench --fabric ucx (rank 0 the memory node, rank 1 the client)
#   serve     rdmahash serve + one bench --connect client
#   serve x2  rdmahash serve + two bench --connect clients at once (3 processes on the cores)
# each rdmahash variant with the memory node in --serve-mode event, hybrid and poll, running
# raw-read of 64 bytes and get (inline slots, 8-byte keys, 48-byte values: a 64-byte slot, R = 1).
# The memory node runs under `perf stat` (syscalls, context switches, CPU time): per-request
# counts do not depend on the machine's load the way rates do.
# Before the rounds it checks that both sides really use TCP: UCX_LOG_LEVEL=info prints every
# endpoint configuration ("ep_cfg[0]: rma_am(tcp/lo) ...") of the memory node and of the client.
# usage: scripts/bench_serve_tcp.sh [BIN] [ROUNDS] [OPS] [MODES]
#   BIN default build/release/rdmahash; ROUNDS 3; OPS per client and workload 100000;
#   MODES "event hybrid poll". Results: results/serve_tcp/*.jsonl, summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/rdmahash}
ROUNDS=${2:-3}
OPS=${3:-100000}
MODES=${4:-event hybrid poll}
DIR=results/serve_tcp
rm -rf "$DIR"
mkdir -p "$DIR"
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RECORDS=100000
TABLE=(--records "$RECORDS" --slot-format inline --key-bytes 8 --value-bytes 48)
RUN=(--workload raw-read,get --read-bytes 64 --read-size 1 --depth 16 --ops "$OPS" --no-progress --quiet)
EVENTS=task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_poll,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom
PORT=13377

uptime | tee "$DIR/uptime_start.txt"
REF=$(dirname "$BIN")/ucp_get_ref
cc -O2 -o "$REF" scripts/ucp_get_ref.c -lucp -lucs

# Starts `rdmahash serve` (under perf stat into $1 unless empty) with the remaining arguments;
# sets SERVER_PID (perf's or the server's) and ADDR.
start_server() {
  local stat=$1 log=$2; shift 2
  : > "$log"  # exists before the background process opens it (sed below reads it)
  if [ -n "$stat" ]; then
    perf stat -x, -o "$stat" -e "$EVENTS" "$BIN" serve "${TABLE[@]}" --listen 127.0.0.1:0 --no-progress "$@" > "$log" 2>&1 &
  else
    "$BIN" serve "${TABLE[@]}" --listen 127.0.0.1:0 --no-progress "$@" > "$log" 2>&1 &
  fi
  SERVER_PID=$!
  ADDR=
  for _ in $(seq 600); do
    ADDR=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log")
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  echo "the server did not start: $(cat "$log")" >&2
  exit 1
}
stop_server() {
  # perf stat forwards SIGTERM's effect by waiting for its child: signal the server itself.
  local pid=$SERVER_PID child
  child=$(pgrep -P "$pid" || true)
  kill -TERM "${child:-$pid}" 2>/dev/null || true
  wait "$pid" || true
}

# --- are both sides on TCP? ---------------------------------------------------------------------
check_tcp() {
  local log=$DIR/check_server.log clog=$DIR/check_client.log mlog=$DIR/check_mpirun.log
  UCX_LOG_LEVEL=info start_server "" "$log"
  UCX_LOG_LEVEL=info "$BIN" bench --connect "$ADDR" --workload raw-read --read-bytes 64 --ops 1000 --no-progress --quiet > "$clog" 2>&1
  stop_server
  UCX_LOG_LEVEL=info mpirun --oversubscribe -n 2 "$BIN" bench --fabric ucx "${TABLE[@]}" --workload raw-read --read-bytes 64 \
    --ops 1000 --no-progress --quiet > "$mlog" 2>&1
  local f bad=0
  for f in "$log" "$clog" "$mlog"; do
    if ! grep -q "ep_cfg" "$f"; then echo "no UCX endpoint configuration in $f" >&2; bad=1; fi
    # Every lane of every endpoint: tcp (self only for an mpirun rank's endpoint to itself).
    if grep "ep_cfg" "$f" | grep -o '([a-z_0-9]*/[a-z_0-9]*)' | grep -qv '^(tcp/\|^(self/'; then
      echo "a non-TCP transport in $f:" >&2; grep "ep_cfg" "$f" >&2; bad=1
    fi
  done
  [ "$bad" = 0 ] || exit 1
  echo "transports: serve: $(grep -o 'ep_cfg.*' "$log" | sort -u | tr '\n' ' ')"
  echo "            connect client: $(grep -o 'ep_cfg.*' "$clog" | sort -u | tr '\n' ' ')"
  echo "            mpirun ranks: $(grep -o 'ep_cfg.*' "$mlog" | sort -u | tr '\n' ' ')"
  grep "serve mode" "$log" | sed 's/^/            /'
}
check_tcp

# --- the runs -----------------------------------------------------------------------------------
perftest() {
  local round=$1 out
  PORT=$((PORT + 1))
  ucx_perftest -t ucp_get -s 64 -O 16 -n "$OPS" -p "$PORT" > /dev/null 2>&1 &
  local srv=$!
  sleep 1
  out=$(ucx_perftest 127.0.0.1 -t ucp_get -s 64 -O 16 -n "$OPS" -p "$PORT" -f 2>/dev/null | tail -1 || true)
  wait "$srv" || true
  # -f's last line: iterations, latency 50th percentile / average / overall (us), BW average /
  # overall (MB/s), message rate average / overall (msg/s)
  echo "$out" | awk -v r="$round" 'NF == 8 {printf "{\"round\": %d, \"throughput_ops_per_s\": %s, \"latency_p50_us\": %s}\n", r, $8, $2}' \
    >> "$DIR/perftest.jsonl"
  echo "round $round perftest: $out" >&2
}
ref_run() {
  local round=$1 mode=$2 out
  out=$(timeout 300 "$REF" "$mode" 64 16 "$OPS" || true)
  echo "$out" | awk -v r="$round" 'NF == 8 {printf "{\"round\": %d, \"mode\": \"%s\", \"throughput_ops_per_s\": %s, \"p50\": %s, \"p99\": %s}\n", r, $1, $6, $7, $8}' \
    >> "$DIR/ref.jsonl"
  echo "round $round ucp_get_ref $mode: $out" >&2
}
mpirun_run() {
  local round=$1 mode=$2 tag=mpirun.$1.$2
  mpirun --oversubscribe -n 1 perf stat -x, -o "$DIR/$tag.stat" -e "$EVENTS" "$BIN" bench --fabric ucx "${TABLE[@]}" "${RUN[@]}" \
    --serve-mode "$mode" --json "$DIR/$tag.jsonl" : -n 1 "$BIN" bench --fabric ucx "${TABLE[@]}" "${RUN[@]}" \
    --serve-mode "$mode" --json "$DIR/$tag.jsonl" > "$DIR/$tag.log" 2>&1
}
serve_run() {
  local round=$1 mode=$2 clients=$3 tag=serve$3.$1.$2 c pids=()
  start_server "$DIR/$tag.stat" "$DIR/$tag.server.log" --serve-mode "$mode"
  for c in $(seq "$clients"); do
    "$BIN" bench --connect "$ADDR" "${RUN[@]}" --json "$DIR/$tag.c$c.jsonl" > "$DIR/$tag.c$c.log" 2>&1 &
    pids+=($!)
  done
  for c in "${pids[@]}"; do wait "$c"; done
  stop_server
}
for round in $(seq "$ROUNDS"); do
  perftest "$round"
  ref_run "$round" spin
  ref_run "$round" event
  for mode in $MODES; do
    echo "round $round: $mode" >&2
    mpirun_run "$round" "$mode"
    serve_run "$round" "$mode" 1
    serve_run "$round" "$mode" 2
  done
done
uptime | tee "$DIR/uptime_end.txt"

python3 - "$DIR" "$MODES" <<'PY'
import glob, json, os, statistics, sys
d, modes = sys.argv[1], sys.argv[2].split()
med = statistics.median
perf = {json.loads(l)["round"]: json.loads(l)["throughput_ops_per_s"] for l in open(f"{d}/perftest.jsonl")}
def stat(path):
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[0] and f[0][0].isdigit():
            out[f[2]] = float(f[0])
    return out
rows = {}  # (launch, mode, workload) -> list of dicts per round
for tag_path in sorted(glob.glob(f"{d}/*.stat")):
    tag = os.path.basename(tag_path)[:-5]
    launch, rnd, mode = tag.split(".")
    rnd = int(rnd)
    jsonl = sorted(glob.glob(f"{d}/{tag}.jsonl") + glob.glob(f"{d}/{tag}.c*.jsonl"))
    pts = [json.loads(l) for p in jsonl for l in open(p)]
    if not pts:
        continue
    s = stat(tag_path)
    # Requests the memory node served: every point's, plus each client's warm-up (one READ per
    # 4 KiB page of the shard).
    reqs = sum(sum(p["requests_per_op"].values()) * p["ops"] for p in pts) + len(jsonl) * pts[0]["table_bytes"] / 4096
    per_req = {k: v / reqs for k, v in s.items()}
    for w in ("raw-read", "get"):
        sel = [p for p in pts if p["workload"] == w]
        if not sel:
            continue
        rows.setdefault((launch, mode, w), []).append({
            "rate": sum(p["throughput_ops_per_s"] for p in sel),
            "ratio": sum(p["throughput_ops_per_s"] for p in sel) / perf[rnd] if perf.get(rnd) else float("nan"),
            "p50": max(p["latency_us"]["p50"] for p in sel), "p99": max(p["latency_us"]["p99"] for p in sel),
            "rt": med(p["round_trips_per_op"] for p in sel),
            "cpu": med(p["client_cpu_ns_per_op"] for p in sel),
            "sys": per_req.get("raw_syscalls:sys_enter", float("nan")),
            "epoll": per_req.get("syscalls:sys_enter_epoll_wait", float("nan")),
            "poll": per_req.get("syscalls:sys_enter_poll", float("nan")),
            "cs": per_req.get("context-switches", float("nan")),
            "srv_us": per_req.get("task-clock", float("nan")) * 1e3,  # task-clock is in ms
            "mode_seen": sel[0].get("serve_mode", ""),
        })
refs = [json.loads(l) for l in open(f"{d}/ref.jsonl")] if os.path.exists(f"{d}/ref.jsonl") else []
print(f"\nperftest ucp_get 64 B -O 16, k msg/s per round: " + ", ".join(f"{v/1e3:.1f}" for _, v in sorted(perf.items())))
for m in ("spin", "event"):
    rs = [r for r in refs if r["mode"] == m]
    if rs:
        print(f"ucp_get_ref {m:5} (target {'spins' if m == 'spin' else 'sleeps on its event fd'}), k GETs/s per round: "
              + ", ".join(f"{r['throughput_ops_per_s']/1e3:.1f}" for r in rs)
              + f"; median p50 {med(r['p50'] for r in rs):.1f} us, p99 {med(r['p99'] for r in rs):.1f} us")
print("medians over rounds; ratio = rate / the same round's perftest; p50/p99 of the slowest client; "
      "server columns per request the memory node served (whole run, perf stat)")
print(f"{'launch':8} {'mode':7} {'workload':9} {'k ops/s':>8} {'ratio':>6} {'p50 us':>8} {'p99 us':>8} {'RT/op':>6} "
      f"{'cli CPU ns/op':>13} {'srv sys/req':>11} {'epoll/req':>9} {'poll/req':>8} {'cs/req':>7} {'srv CPU us/req':>14}")
order = {"mpirun": 0, "serve1": 1, "serve2": 2}
for (launch, mode, w), rs in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 9), modes.index(kv[0][1]) if kv[0][1] in modes else 9, kv[0][2] != "raw-read")):
    m = lambda k: med(r[k] for r in rs)
    print(f"{launch:8} {mode:7} {w:9} {m('rate')/1e3:8.1f} {m('ratio'):6.2f} {m('p50'):8.1f} {m('p99'):8.1f} {m('rt'):6.2f} "
          f"{m('cpu'):13.0f} {m('sys'):11.2f} {m('epoll'):9.2f} {m('poll'):8.2f} {m('cs'):7.2f} {m('srv_us'):14.2f}")
PY
