#!/usr/bin/env bash
# Figs. 6, 7, 8 and Table 1 of seed 000 §5: lookup throughput, bytes per lookup, round trips and
# read size vs load factor for linear probing (fixed and model read sizes) and the cuckoo variants
# (parallel/sequential, 4/1 slots per bucket), 8-byte records. Output: results/throughput_vs_load/.
# PRESENT_FRACTION (default 0: seed 000's model, which prices every lookup to the first empty slot;
# 1: gets of present keys stop at the key, Knuth's successful search).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables > the LLC; SMALL=1: 200 000), OPS, REPEAT, DEPTH, LOAD_FACTORS, READ_SIZES, CUCKOO1_LOAD_FACTORS.
source "$(dirname "$0")/fig_lib.sh" throughput_vs_load
LOAD_FACTORS=${LOAD_FACTORS:-0.25,0.5,0.65,0.8,0.9,0.95}  # 0.95: where seed 000 shows cuckoo ahead
READ_SIZES=${READ_SIZES:-8,32,model,model-unconstrained}
CUCKOO1_LOAD_FACTORS=${CUCKOO1_LOAD_FACTORS:-0.25,0.5,0.65,0.8}  # 3-way, 1 slot/bucket fills at ~0.87
common=(--records "$RECORDS" --key-bytes 4 --value-bytes 4 --workload get --ops "$OPS" --depth "$DEPTH"
        --repeat "$REPEAT" --present-fraction "${PRESENT_FRACTION:-0}")

bench --scheme linear --load-factor "$LOAD_FACTORS" --read-size "$READ_SIZES" "${common[@]}"
for probe in parallel sequential; do
  bench --scheme cuckoo --cuckoo-probe $probe --slots-per-bucket 4 --load-factor "$LOAD_FACTORS" "${common[@]}"
  bench --scheme cuckoo --cuckoo-probe $probe --slots-per-bucket 1 --load-factor "$CUCKOO1_LOAD_FACTORS" "${common[@]}"
done
plot
