#!/usr/bin/env bash
# Seed 000 Fig. 13: the read size R* the cost model picks when a lookup starts x slots from the
# start of a known cluster of SPAN slots (x < 0: before it; 0 ≤ x < SPAN: inside it; x ≥ SPAN: past
# it), with the cluster hint (Eq. 10) and without, at load factors 0.25 and 0.65, as the paper
# draws. A model figure (no benchmark): each point is one `rdmahash model --json`. Output:
# results/seed000_fig13/ (rows.jsonl, seed000_fig13.png, fig13.csv; FIG13_OUT=DIR elsewhere).
# Env: RDMAHASH_BUILD (default build/release), SPAN (10), X_MIN (-30), X_MAX (15), LOAD_FACTORS
# ("0.25 0.65"), SLOT_BYTES (8, the paper's), PROFILE (a `rdmahash calibrate` profile: this
# machine's constants instead of seed 000's EDR ones).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${RDMAHASH_BUILD:-build/release}/rdmahash
[ -x "$BIN" ] || { echo "$0: no $BIN: build first or set RDMAHASH_BUILD" >&2; exit 1; }
OUT=${FIG13_OUT:-results/seed000_fig13}
mkdir -p "$OUT"
rm -f "$OUT"/rows.jsonl "$OUT"/*.png "$OUT"/fig13.csv
SPAN=${SPAN:-10}
X_MIN=${X_MIN:--30}
X_MAX=${X_MAX:-15}
LOAD_FACTORS=${LOAD_FACTORS:-0.25 0.65}
SLOT_BYTES=${SLOT_BYTES:-8}
extra=()
[ -n "${PROFILE:-}" ] && extra=(--profile "$PROFILE")
for lf in $LOAD_FACTORS; do
  for x in $(seq "$X_MIN" "$X_MAX"); do
    base=(--records 1000000 --load-factor "$lf" --slot-bytes "$SLOT_BYTES" --json "${extra[@]}")
    # The hint: the next cluster starts at offset max(x', 0) from the probe start and runs to the
    # cluster's end (a probe inside it sees the rest of it); past the cluster there is none.
    hint=()
    if [ "$x" -lt 0 ]; then hint=(--cluster-offset $((-x)) --cluster-length "$SPAN")
    elif [ "$x" -lt "$SPAN" ]; then hint=(--cluster-offset 0 --cluster-length $((SPAN - x)))
    fi
    for h in 0 1; do
      if [ "$h" = 1 ] && [ ${#hint[@]} -gt 0 ]; then j=$("$BIN" model "${base[@]}" "${hint[@]}")
      else j=$("$BIN" model "${base[@]}"); fi
      python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(x=int(sys.argv[2]), hint=sys.argv[3]=="1", cluster_span=int(sys.argv[4])); print(json.dumps(r))' \
        "$j" "$x" "$h" "$SPAN" >> "$OUT/rows.jsonl"
    done
  done
done
for py in ${PYTHON:-} /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then
    exec "$py" python/fig13.py "$OUT/rows.jsonl" --out "$OUT"
  fi
done
echo "$0: no python3 with matplotlib (Debian: apt-get install python3-matplotlib)" >&2
exit 2
