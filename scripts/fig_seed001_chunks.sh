#!/usr/bin/env bash
# Seed 001's Table 1 / Fig. 2 and §4.3: find-or-put latency, round trips and chunk READs over the load
# factor α and the chunk size C = 8 ... 128 (one table per α, each chunk size a point on it,
# the table reloaded before each), 1 memory node + 1 client over UCX shared memory, depth 1 (the
# latency of one operation, as the paper's table), 8-byte keys (a set, as the paper's states).
# Linear chunks (seed 001) and, beside them, quadratic chunks (--chunk-order quadratic, issue 28:
# chunk i at home + C·i(i+1)/2; the chunk size is the table's there, so one run per C).
# Output: results/seed001_chunks/ (results.jsonl, seed001_chunks*.png, index.md).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables > the LLC; SMALL=1: 200 000), OPS, REPEAT,
# LOAD_FACTORS, CHUNKS, ORDERS (default "linear quadratic").
source "$(dirname "$0")/fig_lib.sh" seed001_chunks
LOAD_FACTORS=${LOAD_FACTORS:-0.5,0.6,0.7,0.8,0.9}
CHUNKS=${CHUNKS:-8,16,32,64,128}
OPS=${OPS:-50000}
ORDERS=${ORDERS:-linear quadratic}
for order in $ORDERS; do
  if [ "$order" = linear ]; then
    bench --scheme linear --records "$RECORDS" --load-factor "$LOAD_FACTORS" --chunk "$CHUNKS" --workload find-or-put \
      --ops "$OPS" --depth 1 --repeat "$REPEAT"
  else
    for c in ${CHUNKS//,/ }; do
      bench --scheme linear --records "$RECORDS" --load-factor "$LOAD_FACTORS" --chunk "$c" --chunk-order "$order" \
        --workload find-or-put --ops "$OPS" --depth 1 --repeat "$REPEAT"
    done
  fi
done
plot
