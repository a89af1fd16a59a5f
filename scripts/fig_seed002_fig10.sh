#!/usr/bin/env bash
# Seed 002 Fig. 10: continuity hashing's load factor at each of 9 resizes from the seed's initial
# table of 20 buckets (80 slots), without added SBuckets and with them for 1/20 and 1/10 of the
# segment pairs. The numbers come from the test that checks them
# (ContinuityLoad.AddedSBucketsRaiseTheLoadFactorAtEachResize: inserts of random keys until full,
# mean of 3 hash seeds); this script runs it and draws its output.
# Output: results/seed002_fig10/ (test.txt, seed002_fig10.png, fig10.csv; FIG10_OUT=DIR elsewhere).
# Env: RDMAHASH_BUILD (default build/release; needs its tests/rdmahash_tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TESTS=${RDMAHASH_BUILD:-build/release}/tests/rdmahash_tests
[ -x "$TESTS" ] || { echo "$0: no $TESTS: build the tests first or set RDMAHASH_BUILD" >&2; exit 1; }
OUT=${FIG10_OUT:-results/seed002_fig10}
mkdir -p "$OUT"
rm -f "$OUT"/test.txt "$OUT"/*.png "$OUT"/fig10.csv
"$TESTS" --gtest_filter='ContinuityLoad.AddedSBucketsRaiseTheLoadFactorAtEachResize' > "$OUT/test.txt"
for py in ${PYTHON:-} /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then
    exec "$py" python/fig_seed002_fig10.py "$OUT/test.txt" --out "$OUT"
  fi
done
echo "$0: no python3 with matplotlib (Debian: apt-get install python3-matplotlib)" >&2
exit 2
