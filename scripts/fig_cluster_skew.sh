#!/usr/bin/env bash
# Fig. 12 of seed 000 §5.8: rate of reading matching records (get-all on a multimap) with the
# cluster-oblivious model read size vs with cluster hints, for uniform keys and growing Zipf skew,
# 8-byte records at load factor 0.65. Output: results/cluster_skew/.
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables > the LLC; SMALL=1: 200 000), OPS, REPEAT, DEPTH, LOAD_FACTOR, THETAS.
OPS=${OPS:-10000}  # get-all lookups of hot keys return (and scan) many records
source "$(dirname "$0")/fig_lib.sh" cluster_skew
LOAD_FACTOR=${LOAD_FACTOR:-0.65}
THETAS=${THETAS:-0.5 0.75 0.9 0.99}
common=(--scheme linear --records "$RECORDS" --load-factor "$LOAD_FACTOR" --key-bytes 4 --value-bytes 4
        --workload get-all --read-size model,cluster --ops "$OPS" --depth "$DEPTH" --repeat "$REPEAT")

bench --distribution uniform "${common[@]}"
for t in $THETAS; do
  bench --distribution "zipf:$t" "${common[@]}"
done
plot
