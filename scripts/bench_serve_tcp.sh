#!/usr/bin/env bash
# A memory node over TCP against UCX's own benchmark, all in one script (issue 12, item 4):
# UCX_TLS=tcp on the loopback, 1 memory node, depth 16, 64-byte windows. Per round, interleaved:
#   perftest  ucx_perftest -t ucp_get -s 64 -O 16 (package ucx-utils): server + client processes.
#             Every ratio in the summary is a rate divided by THIS ROUND's perftest rate.
#   ref       scripts/ucp_get_ref.c (built here): the same GETs in plain UCP, the target spinning
#             on ucp_worker_progress (spin) or sleeping on its event fd (event), and variants that
#             add one thing rdmahash does (REF_VARIANTS: rma = context with RMA only, peer =
#             UCP_ERR_HANDLING_MODE_PEER endpoints, batch = post 16, await all 16, post the next 16,
#             as rdmahash's engine does): the bisection of where raw-read loses to plain UCP.
#   rdmahash  CONFIGS, each "LAUNCH:SERVE_MODE:CLIENT_WAIT[:READ_COALESCING]":
#               mpirun  mpirun -n 2 rdmahash bench --fabric ucx (rank 0 the memory node, rank 1 the client)
#               serve1  rdmahash serve + one bench --connect client
#               serve2  rdmahash serve + two bench --connect clients at once (3 processes on the 2 cores)
#             SERVE_MODE = the memory node's --serve-mode, CLIENT_WAIT = the clients' --client-wait,
#             READ_COALESCING = the clients' --read-coalescing (default auto, which is on over TCP:
#             a batch's READs to the memory node go as one active message; off: one emulated
#             ucp_get each, as before). The default CONFIGS run each launch with it off and on.
#             Each config runs these workloads, every one a 64-byte READ window at depth 16:
#               raw-read        --read-bytes 64 (1 READ of 64 B per op: what perftest does)
#               get64x1 (old)   inline slots of 8-byte keys + 48-byte values = 64-byte slots, R = 1: a
#                               key displaced from its home slot needs a second READ (Knuth: 1.5
#                               probes at load 0.5), so RT/op ~1.5 and get <= ~0.67 x raw-read by
#                               construction. Kept for continuity with earlier results.
#               get32x2         inline slots of 8-byte keys + 8-byte values = 32-byte slots, R = 2:
#                               one 64-byte READ covers the home slot and the next one
#               get8x8          set format (8-byte slots, keys only), R = 8: one 64-byte READ, 8 slots
# The memory node runs under `perf stat` (CPU time, syscalls, context switches per request served:
# these do not depend on the machine's load the way rates do).
# Before the rounds it checks that both sides really use TCP: UCX_LOG_LEVEL=info prints every
# endpoint configuration ("ep_cfg[0]: rma_am(tcp/lo) ...") of the memory node and of the client.
# usage: scripts/bench_serve_tcp.sh [BIN] [ROUNDS] [OPS] [CONFIGS] [REF_VARIANTS]
#   BIN default build/rel/rdmahash; ROUNDS 3; OPS per client and workload 100000;
#   CONFIGS default "mpirun:hybrid:auto:off mpirun:hybrid:auto:on serve1:hybrid:auto:off
#   serve1:hybrid:auto:on serve1:poll:poll:off serve1:poll:poll:on serve2:hybrid:auto:off
#   serve2:hybrid:auto:on" (the client-wait variants of earlier runs: pass them, e.g.
#   "serve2:hybrid:event:auto"); REF_VARIANTS
#   "plain batch rma peer". Results: results/serve_tcp/*.jsonl; the summary table on stdout (and in
#   results/serve_tcp/summary.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/rel/rdmahash}
ROUNDS=${2:-3}
OPS=${3:-100000}
CONFIGS=${4:-mpirun:hybrid:auto:off mpirun:hybrid:auto:on serve1:hybrid:auto:off serve1:hybrid:auto:on serve1:poll:poll:off serve1:poll:poll:on serve2:hybrid:auto:off serve2:hybrid:auto:on}
REF_VARIANTS=${5:-plain batch rma peer}
DIR=results/serve_tcp
rm -rf "$DIR"
mkdir -p "$DIR"
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RECORDS=100000
# Tables: name -> table options, and the workload options run on it.
declare -A TABLE_OPTS=(
  [t64]="--records $RECORDS --slot-format inline --key-bytes 8 --value-bytes 48"
  [t32]="--records $RECORDS --slot-format inline --key-bytes 8 --value-bytes 8"
  [t8]="--records $RECORDS --slot-format set --key-bytes 8"
)
declare -A TABLE_RUN=(
  [t64]="--workload raw-read,get --read-bytes 64 --read-size 1"
  [t32]="--workload get --read-size 2"
  [t8]="--workload get --read-size 8"
)
TABLES="t64 t32 t8"
COMMON=(--depth 16 --ops "$OPS" --no-progress --quiet)
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
    perf stat -x, -o "$stat" -e "$EVENTS" "$BIN" serve --listen 127.0.0.1:0 --no-progress "$@" > "$log" 2>&1 &
  else
    "$BIN" serve --listen 127.0.0.1:0 --no-progress "$@" > "$log" 2>&1 &
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
  # shellcheck disable=SC2086
  UCX_LOG_LEVEL=info start_server "" "$log" ${TABLE_OPTS[t64]}
  UCX_LOG_LEVEL=info "$BIN" bench --connect "$ADDR" --workload raw-read --read-bytes 64 --ops 1000 --no-progress --quiet > "$clog" 2>&1
  stop_server
  # shellcheck disable=SC2086
  UCX_LOG_LEVEL=info mpirun --oversubscribe -n 2 "$BIN" bench --fabric ucx ${TABLE_OPTS[t64]} --workload raw-read --read-bytes 64 \
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
  local round=$1 mode=$2 variant=$3 out
  out=$(timeout 300 "$REF" "$mode" 64 16 "$OPS" "$variant" || true)
  local cpu
  cpu=$(echo "$out" | awk '$1 == "target_cpu_us_per_get" {print $2}')
  echo "$out" | awk -v r="$round" -v cpu="${cpu:-NaN}" 'NF == 9 {printf "{\"round\": %d, \"mode\": \"%s\", \"variant\": \"%s\", \"throughput_ops_per_s\": %s, \"p50\": %s, \"p99\": %s, \"target_cpu_us\": %s}\n", r, $1, $9, $6, $7, $8, cpu}' \
    >> "$DIR/ref.jsonl"
  echo "round $round ucp_get_ref $mode $variant: $out" >&2
}
# One config on one table: tag = LAUNCH.ROUND.MODE.WAIT.COALESCING.TABLE
rdmahash_run() {
  local launch=$1 round=$2 mode=$3 wait=$4 rc=$5 table=$6 tag c pids=()
  tag=$launch.$round.$mode.$wait.$rc.$table
  # shellcheck disable=SC2206
  local topts=(${TABLE_OPTS[$table]}) run=(${TABLE_RUN[$table]} "${COMMON[@]}" --client-wait "$wait" --read-coalescing "$rc")
  if [ "$launch" = mpirun ]; then
    mpirun --oversubscribe -n 1 perf stat -x, -o "$DIR/$tag.stat" -e "$EVENTS" "$BIN" bench --fabric ucx "${topts[@]}" "${run[@]}" \
      --serve-mode "$mode" --json "$DIR/$tag.jsonl" : -n 1 "$BIN" bench --fabric ucx "${topts[@]}" "${run[@]}" \
      --serve-mode "$mode" --json "$DIR/$tag.jsonl" > "$DIR/$tag.log" 2>&1
    return
  fi
  local clients=${launch#serve}
  start_server "$DIR/$tag.stat" "$DIR/$tag.server.log" "${topts[@]}" --serve-mode "$mode"
  for c in $(seq "$clients"); do
    "$BIN" bench --connect "$ADDR" "${run[@]}" --json "$DIR/$tag.c$c.jsonl" > "$DIR/$tag.c$c.log" 2>&1 &
    pids+=($!)
  done
  for c in "${pids[@]}"; do wait "$c"; done
  stop_server
}
for round in $(seq "$ROUNDS"); do
  perftest "$round"
  for v in $REF_VARIANTS; do ref_run "$round" spin "$v"; done
  ref_run "$round" event plain
  ref_run "$round" event batch
  for cfg in $CONFIGS; do
    IFS=: read -r launch mode wait rc <<< "$cfg"
    rc=${rc:-auto}
    echo "round $round: $launch serve-mode $mode client-wait $wait read-coalescing $rc" >&2
    for table in $TABLES; do rdmahash_run "$launch" "$round" "$mode" "$wait" "$rc" "$table"; done
  done
done
uptime | tee "$DIR/uptime_end.txt"

python3 - "$DIR" "$CONFIGS" "$ROUNDS" "$OPS" <<'PY' | tee "$DIR/summary.txt"
import glob, json, os, statistics, sys
d, configs, rounds, ops = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
med = statistics.median
perf = {json.loads(l)["round"]: json.loads(l)["throughput_ops_per_s"] for l in open(f"{d}/perftest.jsonl")}
def stat(path):
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[0] and f[0][0].isdigit():
            out[f[2]] = float(f[0])
    return out
LABEL = {("t64", "raw-read"): "raw-read 64 B", ("t64", "get"): "get64x1 (old: 64 B slot, R=1)",
         ("t32", "get"): "get32x2 (32 B slots, R=2)", ("t8", "get"): "get8x8 (set, 8 B slots, R=8)"}
WORDER = list(LABEL)
rows = {}  # (launch, mode, wait, table, workload) -> list of dicts per round
for tag_path in sorted(glob.glob(f"{d}/*.stat")):
    tag = os.path.basename(tag_path)[:-5]
    launch, rnd, mode, wait, rc, table = tag.split(".")
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
        rate = sum(p["throughput_ops_per_s"] for p in sel)
        rows.setdefault((launch, mode, wait, rc, table, w), []).append({
            "rate": rate,
            "ratio": rate / perf[rnd] if perf.get(rnd) else float("nan"),
            "p50": max(p["latency_us"]["p50"] for p in sel), "p99": max(p["latency_us"]["p99"] for p in sel),
            "rt": med(p["round_trips_per_op"] for p in sel),
            "req": med(sum(p["requests_per_op"].values()) for p in sel),
            "bytes": med(p["bytes_per_op"] for p in sel),
            "cpu": med(p["client_cpu_ns_per_op"] for p in sel),
            "cs": per_req.get("context-switches", float("nan")),
            "sys": per_req.get("raw_syscalls:sys_enter", float("nan")),
            "srv_us": per_req.get("task-clock", float("nan")) * 1e3,  # task-clock is in ms
            "seen": (sel[0].get("serve_mode", "-"), sel[0].get("client_wait", "-"), sel[0].get("read_coalescing", "-")),
        })
refs = [json.loads(l) for l in open(f"{d}/ref.jsonl")] if os.path.exists(f"{d}/ref.jsonl") else []
up = [open(f"{d}/uptime_{x}.txt").read().strip() for x in ("start", "end")]
print(f"\n=== bench_serve_tcp.sh: {rounds} rounds, {ops} ops per client and workload, UCX_TLS=tcp on lo, depth 16 ===")
print(f"uptime at start: {up[0]}\nuptime at end:   {up[1]}")
print("perftest (ucx_perftest -t ucp_get -s 64 -O 16), k GETs/s per round: " + ", ".join(f"{v/1e3:.1f}" for _, v in sorted(perf.items())))
print("\nucp_get_ref: plain UCP GETs of 64 B, 16 in flight; medians over rounds; ratio to the same round's perftest")
print(f"  {'target':6} {'variant':11} {'k GETs/s':>9} {'ratio':>6} {'p50 us':>7} {'p99 us':>8} {'tgt us/GET':>10}   per round k/s")
for m in ("spin", "event"):
    for v in ("plain", "batch", "rma", "peer", "batch+peer"):
        rs = [r for r in refs if r["mode"] == m and r.get("variant", "plain") == v]
        if not rs:
            continue
        ratio = med(r["throughput_ops_per_s"] / perf[r["round"]] for r in rs if perf.get(r["round"]))
        print(f"  {m:6} {v:11} {med(r['throughput_ops_per_s'] for r in rs)/1e3:9.1f} {ratio:6.2f} "
              f"{med(r['p50'] for r in rs):7.1f} {med(r['p99'] for r in rs):8.1f} {med(r.get('target_cpu_us', float('nan')) for r in rs):10.2f}   "
              + ", ".join(f"{r['throughput_ops_per_s']/1e3:.1f}" for r in rs))
print("  (batch: 16 GETs posted, all 16 awaited, then the next 16 - how rdmahash's engine drives a transport;"
      " rma: context with RMA only; peer: endpoints with UCP_ERR_HANDLING_MODE_PEER;\n   tgt us/GET: the target's CPU time per GET served, to set beside srv us/req below)")
print("\nrdmahash: medians over rounds. ratio = rate / the same round's perftest (serve2: both clients' rates summed,"
      " p50/p99 of the slower client).\nRT/op, req/op, B/op: round trips, requests and bytes per operation (do not depend on load);"
      " cli ns/op: client CPU per op;\nsrv us/req, cs/req, sys/req: memory node CPU time, context switches and syscalls per request"
      " it served (perf stat, whole run of that table).\nreadv: the clients' --read-coalescing (=resolved):"
      " on sends a batch's READs to the memory node as one active message, off one emulated ucp_get per READ;"
      "\n  with it on, req/op still counts READs (the engine counts requests), while the memory node serves one message per batch.")
hdr = (f"{'launch':7} {'serve':6} {'client':11} {'readv':8} {'workload':30} {'k ops/s':>8} {'ratio':>6} {'p50 us':>8} {'p99 us':>9} "
       f"{'RT/op':>6} {'req/op':>6} {'B/op':>6} {'cli ns/op':>9} {'srv us/req':>10} {'cs/req':>6} {'sys/req':>7}")
print(hdr)
order = {c: i for i, c in enumerate(configs)}
def key(kv):
    launch, mode, wait, rc, table, w = kv[0]
    cfg = f"{launch}:{mode}:{wait}:{rc}"
    return (order.get(cfg, order.get(f"{launch}:{mode}:{wait}", 99)), WORDER.index((table, w)) if (table, w) in WORDER else 9, rc)
for (launch, mode, wait, rc, table, w), rs in sorted(rows.items(), key=key):
    m = lambda k: med(r[k] for r in rs)
    seen_mode, seen_wait, seen_rc = rs[0]["seen"]
    wait_txt = wait if wait != "auto" else f"auto={seen_wait}"
    rc_txt = rc if rc != "auto" else f"auto={seen_rc}"
    print(f"{launch:7} {mode:6} {wait_txt:11} {rc_txt:8} {LABEL.get((table, w), table + ' ' + w):30} {m('rate')/1e3:8.1f} {m('ratio'):6.2f} "
          f"{m('p50'):8.1f} {m('p99'):9.1f} {m('rt'):6.2f} {m('req'):6.2f} {m('bytes'):6.1f} {m('cpu'):9.0f} "
          f"{m('srv_us'):10.2f} {m('cs'):6.2f} {m('sys'):7.2f}")
print("\nTargets (issue 12): serve1/mpirun raw-read ratio >= 0.9; get ratio >= 0.8; serve2 p99 < 1000 us.")
PY
