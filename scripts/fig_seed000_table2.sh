#!/usr/bin/env bash
# Seed 000 Table 2: lookup throughput of variable-sized linear probing (--read-size model) when
# the load factor the cost model assumes (--assumed-load-factor: columns) differs from the table's
# actual one (rows), 0.25 / 0.50 / 0.65 each, 1 memory node + 1 client over UCX shared memory.
# One run: each table (actual load factor) is built once and its lookups with every assumed load
# factor run on it, interleaved over REPEAT repetitions; every point reads present keys of a warm
# table larger than the LLC. The read size and round trips per lookup carry over to an RDMA NIC;
# the throughput is this machine's. Records: 4-byte keys and values, as the paper's (its 8-byte
# slots; ours add the ctrl and check words: 24 bytes). --present-fraction 0: the paper's model, which
# prices every lookup to the first empty slot (a get of a present key stops sooner; docs/read-size.md).
# Output: results/seed000_table2/ (results.jsonl, seed000_table2.png, table2.csv, index.md).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M; SMALL=1: 200 000), OPS, REPEAT, DEPTH, LOAD_FACTORS
# (default 0.25,0.5,0.65), ASSUMED (default 0.25,0.5,0.65).
source "$(dirname "$0")/fig_lib.sh" seed000_table2
LOAD_FACTORS=${LOAD_FACTORS:-0.25,0.5,0.65}
ASSUMED=${ASSUMED:-0.25,0.5,0.65}
bench --scheme linear --key-bytes 4 --value-bytes 4 --records "$RECORDS" --load-factor "$LOAD_FACTORS" \
  --read-size model --present-fraction 0 --assumed-load-factor "$ASSUMED" --workload get --ops "$OPS" --depth "$DEPTH" --repeat "$REPEAT"
plot
