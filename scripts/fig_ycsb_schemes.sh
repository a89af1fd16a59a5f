#!/usr/bin/env bash
# Seed 004's comparison (issues 9, 28): RACE against linear probing, cuckoo, FaRM's hopscotch and
# DrTM's cluster hashing on the same run.
#  1. YCSB A, B, C, D, F, the workload files unmodified, with 32-byte values (-p fieldcount=1
#     -p fieldlength=32): RACE with 16-byte keys, directory cache on and off, the table grown from
#     one subtable during the load phase; linear probing and cuckoo with out-of-place (heap)
#     records and 8-byte keys (they take no longer keys), hopscotch with inline values (as FaRM-KV),
#     all sized for load factor 0.8.
#  2. Insert-only (find-or-put of new keys) into RACE grown from one subtable, beside RACE started
#     large enough (no split), linear and cuckoo sized for the final count.
# Each at depth 1 and 16 (operations in flight per client); 1 memory node + 1 client over UCX
# shared memory. Output: results/ycsb_schemes/. Env: RDMAHASH_BUILD, YCSB_RECORDS (default 1 M;
# SMALL=1: 200 000), OPS (operations per point), DEPTHS, WORKLOADS, REPEAT_YCSB (each repetition
# is a load phase plus a run), SCHEMES (the compared schemes besides RACE, linear and cuckoo;
# default hopscotch cluster).
source "$(dirname "$0")/fig_lib.sh" ycsb_schemes
if [ "${SMALL:-0}" != 1 ]; then RECORDS=${YCSB_RECORDS:-1000000}; fi
WORKLOADS=${WORKLOADS:-a b c d f}
DEPTHS=${DEPTHS:-1 16}
REPEAT_YCSB=${REPEAT_YCSB:-1}
for d in $DEPTHS; do
  for w in $WORKLOADS; do
    common=(--ycsb tests/data/ycsb/workload"$w" -p recordcount="$RECORDS" -p operationcount="$OPS"
            -p fieldcount=1 -p fieldlength=32 --depth "$d" --repeat "$REPEAT_YCSB")
    bench --scheme race --key-bytes 16 --initial-depth 0 --race-dir-cache on "${common[@]}"
    bench --scheme race --key-bytes 16 --initial-depth 0 --race-dir-cache off "${common[@]}"
    bench --scheme linear --storage heap --key-bytes 8 --load-factor 0.8 "${common[@]}"
    bench --scheme cuckoo --storage heap --key-bytes 8 --load-factor 0.8 "${common[@]}"
    for extra in ${SCHEMES:-hopscotch cluster}; do bench --scheme "$extra" --key-bytes 8 --load-factor 0.8 "${common[@]}"; done
  done
  # Insert-only: OPS new keys into a table of 1 000 records (RACE from one subtable, or presized).
  ins=(--workload find-or-put --records 1000 --ops "$OPS" --value-bytes 32 --depth "$d" --repeat "$REPEAT")
  bench --scheme race --key-bytes 16 --initial-depth 0 "${ins[@]}"
  bench --scheme race --key-bytes 16 --initial-depth 10 "${ins[@]}"
  bench --scheme linear --storage heap --key-bytes 8 --load-factor 0.001 "${ins[@]}"
  bench --scheme cuckoo --storage heap --key-bytes 8 --load-factor 0.001 "${ins[@]}"
  for extra in ${SCHEMES:-hopscotch cluster}; do bench --scheme "$extra" --key-bytes 8 --load-factor 0.001 "${ins[@]}"; done
done
plot
