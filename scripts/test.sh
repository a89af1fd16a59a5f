#!/usr/bin/env bash
# Builds with -Werror and runs every test (in-process, CLI, and mpirun over UCX shared memory),
# then the same in-process suite under ASan+UBSan. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)
# Each phase's start, with the seconds so far: CI has 90 minutes, and the log shows where they went.
phase() { echo "[test.sh] $* (at ${SECONDS} s)"; }

phase "build (-Werror)"
# RDMAHASH_PYTHON=ON: the Python module and its tests are built and run, never skipped quietly.
cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMAHASH_WERROR=ON -DRDMAHASH_PYTHON=ON
cmake --build build/ci -j "$jobs"
phase "ctest"
ctest --test-dir build/ci --output-on-failure -j 2

# Mutation harness (docs/testing.md): every safety mechanism removed in turn must fail its tests.
# Set RDMAHASH_SKIP_MUTANTS=1 to skip it locally; CI always runs it. A mutant's rebuild is one
# compile and a link, on one core: a worker per core, each in its own copy of the tree.
if [ "${RDMAHASH_SKIP_MUTANTS:-0}" != 1 ]; then
  phase "mutants"
  python3 scripts/mutants.py --workers "$jobs" --jobs 1 --workdir build/mutants
fi

# Sanitizer builds of the in-process suites (threads on LocalFabric; UCX's internals are not ours).
phase "ThreadSanitizer"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMAHASH_WERROR=ON -DRDMAHASH_SANITIZER=thread
cmake --build build/tsan -j "$jobs" --target rdmahash_tests
# UCX's memory hooks (libucm) crash under the sanitizers' allocators when a thread exits; the
# in-process suites do not use UCX, so the hooks are switched off for them.
export UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no
# RACE's growth test inserts 1 M keys; 200 k (the directory still doubles 9 times) under the sanitizers.
export RDMAHASH_RACE_GROWTH_KEYS=200000
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build/tsan --output-on-failure -j 2 -L inprocess

phase "AddressSanitizer + UndefinedBehaviorSanitizer"
# Debug keeps assert(); -O1, as ASan's documentation advises, for a suite that runs in reasonable time.
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DRDMAHASH_WERROR=ON \
  -DRDMAHASH_SANITIZER=address
cmake --build build/asan -j "$jobs" --target rdmahash_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j 2 -L inprocess
phase "done"
