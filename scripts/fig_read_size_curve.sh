#!/usr/bin/env bash
# Fig. 10 of seed 000 §5.5: lookup throughput vs fixed read size R at load factors 0.5 and 0.85,
# with the read sizes the model picks circled, next to the model's predicted cost E[X(R)]*T(R)
# (`rdmahash model --curve`). 8-byte records. Output: results/read_size_curve/.
# PRESENT_FRACTION (default 0: seed 000's model, every lookup priced to the first empty slot; 1: gets
# of present keys stop at the key, Knuth's successful search; the curve is priced the same way).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables > the LLC; SMALL=1: 200 000), OPS, REPEAT, DEPTH, LOAD_FACTORS, READ_SIZES.
source "$(dirname "$0")/fig_lib.sh" read_size_curve
LOAD_FACTORS=${LOAD_FACTORS:-0.5,0.85}
READ_SIZES=${READ_SIZES:-1,2,4,6,8,12,16,24,32,48,64}

bench --scheme linear --records "$RECORDS" --load-factor "$LOAD_FACTORS" --key-bytes 4 --value-bytes 4 \
  --workload get --read-size "$READ_SIZES,model,model-unconstrained" --present-fraction "${PRESENT_FRACTION:-0}" --ops "$OPS" --depth "$DEPTH" --repeat "$REPEAT"
plot
