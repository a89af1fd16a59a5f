#!/bin/sh
# sim_project_seed003.sh — a projection on the simulated fabric (issue 29 item 2): seed 003's
# throughput figure (slides: DAS-5, 66 machines × 16 cores, "throughputs up to 140 × 10^6",
# "remote speedup up to 110"). It runs scripts/sim_project_seed001.sh (same model, options and
# table: see its header) with 2 and 66 machines × 1, 2, 4, 8, 16 processes: 66 × 16 = 1056
# simulated clients on 66 memory nodes, the speed-up relative to its own 2 × 1 point.
#
# Usage: scripts/sim_project_seed003.sh [BUILD_DIR] [OUT.jsonl]
#   Every knob of sim_project_seed001.sh; MACHINES defaults to "2 66" here (11 points with the
#   claim comparison at 66 × 16, 4 M simulated ops, ~30 s of wall time on a 2-core VM).
set -eu
BUILD=${1:-build/ci}
OUT=${2:-sim_project_seed003.jsonl}
MACHINES=${MACHINES:-2 66}
export MACHINES
exec sh "$(dirname "$0")/sim_project_seed001.sh" "$BUILD" "$OUT"
