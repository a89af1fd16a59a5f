#!/usr/bin/env bash
# Fig. 9 of seed 000 §5.4: lookup latency percentiles (p10/p25/p50/p75/p90) at depth 1 (one lookup
# in flight: an idle system) per scheme and load factor, 8-byte records. Output: results/latency/.
# PRESENT_FRACTION (default 0: seed 000's model, which prices every lookup to the first empty slot;
# 1: gets of present keys stop at the key, Knuth's successful search).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables > the LLC; SMALL=1: 200 000), OPS, REPEAT, LOAD_FACTORS, READ_SIZES.
OPS=${OPS:-50000}  # one lookup at a time: fewer per point
source "$(dirname "$0")/fig_lib.sh" latency
LOAD_FACTORS=${LOAD_FACTORS:-0.25,0.5,0.65,0.8,0.9}
READ_SIZES=${READ_SIZES:-32,model,model-unconstrained}
common=(--records "$RECORDS" --load-factor "$LOAD_FACTORS" --key-bytes 4 --value-bytes 4 --workload get
        --ops "$OPS" --depth 1 --repeat "$REPEAT" --present-fraction "${PRESENT_FRACTION:-0}")

bench --scheme linear --read-size "$READ_SIZES" "${common[@]}"
bench --scheme cuckoo --cuckoo-probe parallel "${common[@]}"
bench --scheme cuckoo --cuckoo-probe sequential "${common[@]}"
plot
