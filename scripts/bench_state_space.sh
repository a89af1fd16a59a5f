#!/usr/bin/env bash
# Issue 31: the distributed state-space search of examples/state_space (built against the installed
# package, as a user's program), each method at 1, 2 and 4 ranks (RANKS) in one run: the rdmahash
# PGAS table (find_or_put, batches pipelined), MPI_Alltoallv + absl::flat_hash_set, and one process.
# Every run checks the state and level counts against the graph's known answer. On this 2-core
# machine 4 ranks are oversubscribed. Output: results/state_space/ (results.jsonl,
# state_space.png, index.md). Env: RDMAHASH_BUILD (default build/release), GRAPH (default
# cube2-htm), RANKS ("1 2 4"), REPEAT (3), DEPTH (32), UCX_TLS (self,sm).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${RDMAHASH_BUILD:-build/release}
[ -f "$BUILD/CMakeCache.txt" ] || { echo "$0: no build in $BUILD: build first or set RDMAHASH_BUILD" >&2; exit 1; }
OUT=results/state_space
mkdir -p "$OUT"
rm -f "$OUT"/results.jsonl "$OUT"/*.png
cmake --install "$BUILD" --prefix "$OUT/pkg" >/dev/null
cmake -S examples/state_space -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/$OUT/pkg" >/dev/null
cmake --build "$OUT/build" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
GRAPH=${GRAPH:-cube2-htm}
for rep in $(seq "${REPEAT:-3}"); do
  for n in ${RANKS:-1 2 4}; do
    echo "+ mpirun -n $n state_space --graph $GRAPH (repetition $rep)" >&2
    mpirun --oversubscribe -n "$n" "$OUT/build/state_space" --graph "$GRAPH" --depth "${DEPTH:-32}" \
      --json "$OUT/results.jsonl"
  done
done
for py in ${PYTHON:-} /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then
    exec "$py" python/fig_state_space.py "$OUT/results.jsonl" --out "$OUT"
  fi
done
echo "$0: no python3 with matplotlib (Debian: apt-get install python3-matplotlib)" >&2
exit 2
