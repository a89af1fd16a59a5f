# Sourced by scripts/fig_*.sh (not a figure itself): `source scripts/fig_lib.sh NAME`.
# Sets BIN (the rdmahash binary from $RDMAHASH_BUILD, default build/release), OUT=results/NAME
# (emptied of old results), the MPI/UCX environment for real processes over UCX shared memory, and
#   bench ARGS...  one `rdmahash bench` sweep: 1 memory node + 1 client (mpirun -n 2), appended
#                  to $OUT/results.jsonl
#   bench_n N ARGS the same with N ranks: 1 memory node + N-1 clients
#   plot           scripts/plot.sh (python/plot.py with a python3 that has matplotlib) $OUT/results.jsonl --out $OUT
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${RDMAHASH_BUILD:-build/release}
BIN=$BUILD/rdmahash
if [ ! -x "$BIN" ]; then
  echo "$0: no $BIN: build first (cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD)," \
       "or set RDMAHASH_BUILD" >&2
  exit 1
fi
OUT=results/$1
mkdir -p "$OUT"
rm -f "$OUT"/results.jsonl "$OUT"/*.png "$OUT"/table1.csv "$OUT"/index.md

# Sizes shared by the figures (each script adds its own sweep variables).
# Tables several times larger than the last-level cache (32 MB here), as users' and seed 000's are:
# 6 M records of 4-byte keys + 4-byte values are 24-byte slots, 160 MB at load factor 0.9 and
# 576 MB at 0.25 (JSON: table_bytes, llc_bytes). SMALL=1 (or RECORDS=N) for a quick in-cache run.
if [ "${SMALL:-0}" = 1 ]; then RECORDS=${RECORDS:-200000}; fi
RECORDS=${RECORDS:-6000000}  # records bulk-loaded per table
OPS=${OPS:-200000}           # lookups per point
REPEAT=${REPEAT:-5}          # interleaved repetitions (the plots show medians and min-max)
DEPTH=${DEPTH:-16}           # lookups in flight (throughput figures)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n

bench() {
  echo "+ mpirun -n 2 $BIN bench --fabric ucx --memory-nodes 1 $*" >&2
  mpirun --oversubscribe -n 2 "$BIN" bench --fabric ucx --memory-nodes 1 --no-progress \
    --json "$OUT/results.jsonl" "$@"
}

plot() {
  scripts/plot.sh "$OUT/results.jsonl" --out "$OUT" --rdmahash "$BIN"
  echo "figures: $OUT/index.md" >&2
}

# bench_n N ARGS...: as bench, with N ranks (1 memory node + N-1 clients).
bench_n() {
  local n=$1
  shift
  echo "+ mpirun -n $n $BIN bench --fabric ucx --memory-nodes 1 $*" >&2
  mpirun --oversubscribe -n "$n" "$BIN" bench --fabric ucx --memory-nodes 1 --no-progress \
    --json "$OUT/results.jsonl" "$@"
}
