#!/usr/bin/env bash
# Memory speed on a table users have (issue 30 item 2): gets and find-or-puts on a 1 GB table per
# client core, as a fraction of this machine's random-read limit measured in the same run
# (`--memory-limit thp`: one core, random 8-byte loads in prefetched batches of 16 on a region of the
# table's size, transparent huge pages: the best the machine does), probed before the table's first
# point and again right after each point: columns `fraction` and `f after` are the row against each.
#   table: 32 M inline 32-byte slots (1 GB) at every load (SLOTS): 16 M records of 8-byte keys and
#     values at load 0.5, 25.6 M at 0.8; RECORDS=N keeps N records at every load instead (the table
#     shrinks with the load: 16 M at 0.8 is 0.66 GB). The size matters: on the AMD EPYC guest the
#     limit falls steadily with the region (55-58 M loads/s at 264 MiB, 25-29 at 1056 MiB, 18-22 at
#     2112 MiB: scripts/memory_limit_by_size.sh). Loaded; every point starts from the loaded table: gets find present keys,
#     find-or-puts insert new ones (the load factor rises by ops/slots, JSON load_factor_end).
#   layouts: PGAS (mpirun -n 2 --symmetric: every rank a shard and a client) and 1 memory node +
#     1 client (mpirun -n 2), UCX over shared memory, direct access on, depth 16 (DEPTH).
#   --huge-pages on and off (on: hugetlbfs pages when vm.nr_hugepages reserves them, else 4 KB:
#     shared memory gets no THP while shmem_enabled is never; JSON region_pages says which).
#   get at R = 8 and 4 slots; find-or-put (chunk 8); and, 1+1 at load 0.5, get of cuckoo, race and
#     continuity on the same records for comparison.
#   The ceiling (CEILING=1, the default): the same linear points, 1+1, on a table in cache — gets on
#     CEIL_RECORDS=4000 records (256 KB at load 0.5: inside L2), find-or-puts of CEIL_FP_SLOTS / 20 new
#     keys on a table of CEIL_FP_SLOTS=400000 slots (12.8 MB: inside L3; the load rises by 0.05; on
#     4 KB pages its TLB misses cost inserts ~1.4x here, so the pages are the first of HUGE's), each
#     point 5 times (--repeat) — in the same round. Column `ceiling` is that rate over the 1 GB
#     row's limit: the fraction the row would reach if every cache miss of the 1 GB table were free.
#     A target above it cannot be met by hiding misses (prefetching, huge pages, overlap), only by
#     fewer instructions per operation.
# Binaries are interleaved per round (a busy machine slows all alike); medians over rounds.
# usage: scripts/bench_memory_speed.sh BIN [BIN...]   (ROUNDS=2, OPS=1000000, DEPTH=16, SLOTS=32000000 or RECORDS=N,
#        OUT=results/memory_speed.jsonl; HUGE="on off"; LOADS="0.5 0.8"; COMPARE=1;
#        MULTI="off on": the linear and cuckoo rows with --multi-get off and on, side by side (linear
#        find-or-put too: a multi-find-or-put);
#        READ_SIZES=4,2: the get rows' read sizes, default 8,4)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
ROUNDS=${ROUNDS:-2}
OPS=${OPS:-1000000}
DEPTH=${DEPTH:-16}   # operations in flight per client (a multi-get's keys per round)
SLOTS=${SLOTS:-32000000}   # the table's slots at every load (records = load x SLOTS), unless RECORDS is set
RECORDS=${RECORDS:-}
records_at() { [ -n "$RECORDS" ] && echo "$RECORDS" || python3 -c "import sys; print(round(float(sys.argv[1]) * int(sys.argv[2])))" "$1" "$SLOTS"; }
OUT=${OUT:-results/memory_speed.jsonl}
HUGE=${HUGE:-on off}
LOADS=${LOADS:-0.5 0.8}
COMPARE=${COMPARE:-1}
MULTI=${MULTI:-off}   # --multi-get modes of the linear rows ("off on": side by side)
CEILING=${CEILING:-1}
CEIL_RECORDS=${CEIL_RECORDS:-4000}
CEIL_FP_SLOTS=${CEIL_FP_SLOTS:-400000}
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
echo "vm.nr_hugepages = $(cat /proc/sys/vm/nr_hugepages); THP shmem: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled)" >&2
run() {  # run BIN LAYOUT bench-args...: appends the rows, tagged with the binary and the layout
  local bin=$1 layout=$2; shift 2
  local tmp; tmp=$(mktemp)
  mpirun --oversubscribe -n 2 "$bin" bench --fabric ucx "$@" --memory-limit thp --no-progress --quiet --json "$tmp" > /dev/null
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l); j["binary"] = sys.argv[2]; j["layout"] = sys.argv[3]; print(json.dumps(j))' "$tmp" "$bin" "$layout" >> "$OUT"
  rm -f "$tmp"
}
ceiling() {  # ceiling BIN: the linear 1+1 points on tables in cache (layout "cache"), pages as the first of HUGE
  local bin=$1 lf mg hp=${HUGE%% *}
  for lf in $LOADS; do
    for mg in $MULTI; do
      run "$bin" cache --memory-nodes 1 --slot-format inline "${table[@]}" --ops "$OPS" --records "$CEIL_RECORDS" \
        --load-factor "$lf" --huge-pages "$hp" --workload get --read-size "${READ_SIZES:-8,4}" --multi-get "$mg" --repeat 5
      run "$bin" cache --memory-nodes 1 --slot-format inline "${table[@]}" --ops "$((CEIL_FP_SLOTS / 20))" \
        --records "$(SLOTS=$CEIL_FP_SLOTS RECORDS= records_at "$lf")" --load-factor "$lf" --huge-pages "$hp" \
        --workload find-or-put --multi-get "$mg" --repeat 5
    done
  done
}
table=(--key-bytes 8 --value-bytes 8 --depth "$DEPTH" --direct-access on)
base=("${table[@]}" --ops "$OPS")
for round in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    echo "round $round: $bin ($(uptime | sed 's/.*load/load/'))" >&2
    for hp in $HUGE; do
      for lf in $LOADS; do
        common=("${base[@]}" --records "$(records_at "$lf")")
        wl=get,find-or-put  # --multi-get on runs find-or-put as a multi-find-or-put too
        for mg in $MULTI; do
          run "$bin" pgas --symmetric --slot-format inline "${common[@]}" --load-factor "$lf" --huge-pages "$hp" \
            --workload "$wl" --read-size "${READ_SIZES:-8,4}" --multi-get "$mg"
          run "$bin" 1+1 --memory-nodes 1 --slot-format inline "${common[@]}" --load-factor "$lf" --huge-pages "$hp" \
            --workload "$wl" --read-size "${READ_SIZES:-8,4}" --multi-get "$mg"
        done
      done
    done
    if [ "$COMPARE" = 1 ]; then
      hp=${HUGE%% *}
      common=("${base[@]}" --records "$(records_at 0.5)")
      for mg in $MULTI; do  # cuckoo (inline, parallel probing) has a multi-get too
        run "$bin" 1+1 --memory-nodes 1 --scheme cuckoo "${common[@]}" --load-factor 0.5 --huge-pages "$hp" --workload get \
          --multi-get "$mg"
      done
      run "$bin" 1+1 --memory-nodes 1 --scheme race "${common[@]}" --load-factor 0.5 --huge-pages "$hp" --workload get
      run "$bin" 1+1 --memory-nodes 1 --scheme continuity --added-sbuckets 1/10 "${common[@]}" --load-factor 0.5 --huge-pages "$hp" --workload get
    fi
    if [ "$CEILING" = 1 ]; then ceiling "$bin"; fi
  done
done
python3 - "$OUT" "$@" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
bins = sys.argv[2:]
pts = defaultdict(list)
for j in rows:
    # find-or-put ignores the read size: one row per table, whatever --read-size listed
    r = j["read_size"] if j["workload"] == "get" and j["scheme"] == "linear" else "-"
    mg = j.get("multi_get", "off") if j["workload"] in ("get", "find-or-put") else "-"
    pts[(j["binary"], j["layout"], j["scheme"], j["huge_pages"], round(j["target_load_factor"], 2), j["workload"], r, mg)].append(j)
def med(rs, f): return statistics.median(f(r) for r in rs)
print(f"{'binary':24} {'layout':6} {'scheme':10} {'pages':8} {'lf':>4} {'workload':11} {'R':>2} {'multi':>5} {'M/s/core':>8} "
      f"{'limit M/s':>9} {'after':>6} {'probe':>5} {'fraction':>8} {'f after':>7} {'ceiling':>7} {'cpu ns':>7} {'RT/op':>7} {'req/op':>7} {'B/op':>7} {'lf end':>6} n")
for b in bins:
    for key in sorted(k for k in pts if k[0] == b):
        rs = pts[key]
        cores = rs[0]["clients"]  # one client per core: PGAS 2 ranks on 2 cores, 1+1 one client
        per_core = med(rs, lambda r: r["throughput_ops_per_s"]) / cores
        limit = med(rs, lambda r: r["memory_limit_ops_per_s"])
        # The limit probed again right after the row's point (a build without it: the one before).
        after = med(rs, lambda r: r.get("memory_limit_after_ops_per_s", r["memory_limit_ops_per_s"]))
        pages = rs[0].get("region_pages", "?")
        req = rs[0]["requests_per_op"]
        # The pages the kernel gave the limit's probe ("-": a build that does not report them); a
        # probe on 4 KB pages where THP was asked measures a lower limit than the machine's best.
        given = sorted({r["memory_limit"].get("pages_given", "-") or "-" for r in rs})
        probe = given[0] if len(given) == 1 else "mixed"
        # The same point on a table in cache (layout "cache", this binary) over this row's limit.
        ceil = pts.get((b, "cache", key[2], key[3], key[4], key[5], key[6], key[7]))
        ceiling = f"{med(ceil, lambda r: r['throughput_ops_per_s']) / limit:7.3f}" if ceil and key[1] != "cache" else f"{'-':>7}"
        print(f"{b[-24:]:24} {key[1]:6} {key[2]:10} {pages:8} {key[4]:4.2f} {key[5]:11} {key[6]:>2} {key[7]:>5} {per_core / 1e6:8.3f} "
              f"{limit / 1e6:9.1f} {after / 1e6:6.1f} {probe:>5} {per_core / limit:8.3f} {per_core / after:7.3f} {ceiling} {med(rs, lambda r: r['client_cpu_ns_per_op']):7.1f} "
              f"{rs[0]['round_trips_per_op']:7.4f} {sum(req.values()):7.4f} {rs[0]['bytes_per_op']:7.2f} "
              f"{rs[0]['load_factor_end']:6.3f} {len(rs)}")
PY
