#!/usr/bin/env bash
# Fresh Debian machine → installed dependencies, a Release build, and a short benchmark with real
# processes over UCX shared memory: 1 memory node + 1 client (mpirun -n 2), raw READs vs get and
# find-or-put (200 000 new keys) at load factors 0.5 and 0.8, on 10 M records: 160 MB / 100 MB of
# slots, several times the last-level cache (JSON: table_bytes, llc_bytes). Every point starts from
# the loaded table, after a warm-up pass (JSON: load_factor_start/end, warmup_seconds). Results:
# stdout table + results/quickstart.jsonl; a figure with `scripts/plot.sh results/quickstart.jsonl
# --out results/quickstart`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends $(cat .ci/packages.txt)
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build/release -j "$(nproc)"
mkdir -p results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 UCX_TLS=${UCX_TLS:-self,sm} UCX_WARN_UNUSED_ENV_VARS=n
mpirun --oversubscribe -n 2 build/release/rdmahash bench --fabric ucx --memory-nodes 1 \
  --records 10000000 --load-factor 0.5,0.8 --workload raw-read,get,find-or-put \
  --read-bytes 8,256 --read-size 8 --ops 200000 --depth 16 --json results/quickstart.jsonl
