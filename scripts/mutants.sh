#!/usr/bin/env bash
# The mutation harness (docs/testing.md): applies every mutant of tests/mutants/*.json to a copy of
# the tree, rebuilds incrementally, runs the tests that must kill it; exits non-zero on a survivor.
#   scripts/mutants.sh [--only ID,...] [--repeat N] [--full] [--list]   (see scripts/mutants.py -h)
#   scripts/mutants.sh --sweep [DIR...]   universalmutator sweep (scripts/mutants_sweep.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --sweep ]; then
  shift
  exec scripts/mutants_sweep.sh "$@"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec python3 scripts/mutants.py "$@"
