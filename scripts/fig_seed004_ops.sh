#!/usr/bin/env bash
# Seed 004's per-operation figures (insertion, search, update, deletion throughput as clients are
# added), every scheme the seed compares that exists here in the same run: RACE (16-byte keys, as
# the seed's YCSB keys), Pilaf-style cuckoo (out-of-place records, as Pilaf's extents), FaRM's
# hopscotch, DrTM's cluster hashing, and linear probing (8-byte keys: they take no longer keys);
# 32-byte values. One memory node and 1..N client processes over UCX shared memory (mpirun -n
# clients+1), each client one operation at a time (depth 1, as the seed's client threads) unless
# DEPTH is set. Each point starts from the bulk-loaded table (reloaded after every point that
# wrote): search and update touch present keys, deletion erases present keys (each client its own,
# none twice), insertion find-or-puts new keys (the load factor at the start and end is in each
# row). Output: results/seed004_ops/ (results.jsonl, seed004_ops*.png, index.md).
# Env: RDMAHASH_BUILD, RECORDS (default 6 M: tables larger than the LLC; SMALL=1: 200 000), OPS
# (operations per client per point; OPS x clients must not exceed RECORDS), REPEAT, CLIENTS
# (default "1 2 3"), LOAD_FACTOR (default 0.8), SCHEMES (default every one of the above).
source "$(dirname "$0")/fig_lib.sh" seed004_ops
CLIENTS=${CLIENTS:-1 2 3}
LOAD_FACTOR=${LOAD_FACTOR:-0.8}
SCHEMES=${SCHEMES:-race cuckoo hopscotch cluster linear}
DEPTH=${SEED004_DEPTH:-1}
OPS=${OPS:-50000}
REPEAT=${REPEAT:-3}
for c in $CLIENTS; do
  if [ $((OPS * c)) -gt "$RECORDS" ]; then
    echo "$0: OPS ($OPS) x clients ($c) exceeds RECORDS ($RECORDS): deletion would run out of present keys" >&2
    exit 2
  fi
done
common=(--records "$RECORDS" --load-factor "$LOAD_FACTOR" --value-bytes 32 --workload find-or-put,get,update,erase
        --ops "$OPS" --depth "$DEPTH" --repeat "$REPEAT")
for c in $CLIENTS; do
  for s in $SCHEMES; do
    case $s in
      race) bench_n $((c + 1)) --scheme race --key-bytes 16 "${common[@]}" ;;
      cuckoo) bench_n $((c + 1)) --scheme cuckoo --storage heap "${common[@]}" ;;
      *) bench_n $((c + 1)) --scheme "$s" "${common[@]}" ;;
    esac
  done
done
plot
