#!/usr/bin/env bash
# Seed 002's comparison (issues 11, 28): continuity hashing vs level hashing (its baseline) vs
# P-FaRM-KV (FaRM's hopscotch table on PM, --scheme hopscotch: Table I's third row) vs RACE vs
# linear probing on YCSB A, B, C, F, same run, 16-byte values (-p fieldcount=1 -p fieldlength=16),
# 8-byte keys; each point is a load phase (the clients insert the records) then the run. Continuity,
# level and hopscotch write through the memory node's CPU (RPCs, persists counted: JSON
# persists_per_op) and look up with one-sided READs; RACE and linear write one-sided. Then seed
# 002's Fig. 9, update-only latency: the three PM schemes bulk-loaded to the same LOAD_FACTOR, then
# OPS updates of present keys, then OPS erases on the reloaded table (--workload update,erase:
# Table I at one load factor). By default volatile tables (no
# --pm-path) so that every scheme runs on the same memory; PM_DIR=DIR puts the continuity, level and
# hopscotch tables in files DIR/<scheme>-<workload>-<depth>.pm (--pm-path, a new file per run; JSON
# persistence says pmem or msync: on an ordinary file system every persist is an msync, and over
# UCX the file mapping is not one-sided here: docs/results.md). 1 memory node + 1 client over UCX
# shared memory. Every table is sized for the same LOAD_FACTOR (default 0.6; RACE grows from one
# subtable and reports the load it reached): continuity reaches it as seed 002 does, with added
# SBuckets for 1/10 of its pairs and online resizing (it starts 2^4 smaller and doubles when a
# segment is full; without them it fills at ~0.45). Then the cost of added SBuckets alone (seed
# 002: 4-5 % of throughput): continuity at load factor 0.3 (ADDED_LOAD_FACTOR), which it reaches
# without them (its first full segment comes at 0.34-0.45 by table size and seed), with
# none, 1/20 and 1/10 of its pairs given added SBuckets, gets and updates of present keys on one
# run each (REPEAT interleaved repetitions).
# Output: results/ycsb_pm/. Env: RDMAHASH_BUILD, YCSB_RECORDS (default 1 M: tables of 69-423 MB,
# larger than the LLC), OPS, DEPTHS,
# WORKLOADS, PM_DIR, LOAD_FACTOR, ADDED_LOAD_FACTOR, ADDED_RECORDS (default RECORDS), REPEAT_ADDED.
source "$(dirname "$0")/fig_lib.sh" ycsb_pm
RECORDS=${YCSB_RECORDS:-1000000}
OPS=${OPS:-100000}
WORKLOADS=${WORKLOADS:-a b c f}
DEPTHS=${DEPTHS:-16}
PM_DIR=${PM_DIR:-}
LOAD_FACTOR=${LOAD_FACTOR:-0.6}
pm() {  # pm SCHEME W D: the --pm-path options of a persistent scheme's run (none without PM_DIR)
  [ -n "$PM_DIR" ] || return 0
  mkdir -p "$PM_DIR"
  rm -f "$PM_DIR/$1-$2-$3.pm"  # a new table: an existing file would be recovered, not loaded
  echo "--pm-path $PM_DIR/$1-$2-$3.pm"
}
for d in $DEPTHS; do
  for w in $WORKLOADS; do
    common=(--ycsb tests/data/ycsb/workload"$w" -p recordcount="$RECORDS" -p operationcount="$OPS"
            -p fieldcount=1 -p fieldlength=16 --depth "$d")
    # shellcheck disable=SC2046  # pm prints two words or none
    bench --scheme continuity --load-factor "$LOAD_FACTOR" --added-sbuckets 1/10 --max-resizes 4 "${common[@]}" \
      $(pm continuity "$w" "$d")
    # shellcheck disable=SC2046
    bench --scheme level --load-factor "$LOAD_FACTOR" "${common[@]}" $(pm level "$w" "$d")
    # shellcheck disable=SC2046
    bench --scheme hopscotch --key-bytes 8 --load-factor "$LOAD_FACTOR" "${common[@]}" $(pm hopscotch "$w" "$d")
    bench --scheme race --key-bytes 8 --initial-depth 0 "${common[@]}"
    bench --scheme linear --key-bytes 8 --slot-format inline --load-factor "$LOAD_FACTOR" "${common[@]}"
  done
  # Fig. 9: update-only latency (p50/p99 per row; the table at LOAD_FACTOR before and after, keys
  # present), then erase of present keys on the reloaded table (Table I's third column).
  upd=(--records "$RECORDS" --value-bytes 16 --load-factor "$LOAD_FACTOR" --workload update,erase --ops "$OPS" --depth "$d")
  # shellcheck disable=SC2046
  bench --scheme continuity --added-sbuckets 1/10 --max-resizes 4 "${upd[@]}" $(pm continuity update "$d")
  # shellcheck disable=SC2046
  bench --scheme level "${upd[@]}" $(pm level update "$d")
  # shellcheck disable=SC2046
  bench --scheme hopscotch --key-bytes 8 "${upd[@]}" $(pm hopscotch update "$d")
  for added in 0 1/20 1/10; do
    bench --scheme continuity --load-factor "${ADDED_LOAD_FACTOR:-0.3}" --added-sbuckets "$added" --records "${ADDED_RECORDS:-$RECORDS}" \
      --value-bytes 16 --workload get,update --ops "$OPS" --depth "$d" --repeat "${REPEAT_ADDED:-5}"
  done
done
plot
echo "results: $OUT/results.jsonl" >&2
