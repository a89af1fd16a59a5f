#!/usr/bin/env bash
# Fig. 11 of seed 000 §5.7: lookup throughput by record size (4-byte keys, 4..120-byte values) at
# load factor 0.65, records inline in the table vs in a heap. `--storage heap` exists for cuckoo
# only today, so linear probing appears inline only. Output: results/inline_vs_heap/.
# PRESENT_FRACTION (default 0: seed 000's model, which prices every lookup to the first empty slot;
# 1: gets of present keys stop at the key, Knuth's successful search).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables > the LLC; SMALL=1: 200 000), OPS, REPEAT, DEPTH, LOAD_FACTOR, VALUE_SIZES, READ_SIZES.
source "$(dirname "$0")/fig_lib.sh" inline_vs_heap
LOAD_FACTOR=${LOAD_FACTOR:-0.65}
VALUE_SIZES=${VALUE_SIZES:-4 12 28 60 120}
READ_SIZES=${READ_SIZES:-8,model}
common=(--records "$RECORDS" --load-factor "$LOAD_FACTOR" --key-bytes 4 --workload get --ops "$OPS"
        --depth "$DEPTH" --repeat "$REPEAT" --present-fraction "${PRESENT_FRACTION:-0}")

for v in $VALUE_SIZES; do  # the record size is one value per run
  bench --scheme linear --value-bytes "$v" --read-size "$READ_SIZES" "${common[@]}"
  bench --scheme linear --storage heap --value-bytes "$v" --read-size "$READ_SIZES" "${common[@]}"
  bench --scheme linear --storage heap4 --value-bytes "$v" --read-size 8 "${common[@]}"  # model sizes assume 1 record/slot
  bench --scheme cuckoo --storage inline --value-bytes "$v" "${common[@]}"
  bench --scheme cuckoo --storage heap --value-bytes "$v" "${common[@]}"
done
plot
