#!/usr/bin/env bash
# This machine's random-read limit (`bench --memory-limit`, model/memory_limit.h) as the region
# grows: does a table's size, not only the machine's load, move the limit a fraction is taken of?
# On the AMD EPYC KVM guest it does: 55-58 M loads/s at 264 MiB, 25-29 at 1056 MiB, 18-22 at 2112 MiB, on huge
# pages throughout (results.md, "The limit probed on both sides of each row").
# Each size is a local-fabric bench of 100 000 records in a table of that many MiB of slots (the
# probe maps a region of the table's size, up to 3 % more with its tail slots), one client, 1000 gets; the limit is probed before and after the point.
# Sizes are visited ROUNDS times in order, so a drift of the machine shows as a difference between
# rounds, a size effect as a trend within each.
# usage: scripts/memory_limit_by_size.sh BIN [MiB...]   (default: 256 512 768 1024 1536 2048;
#        ROUNDS=2; PAGES=thp|4k; OUT=results/memory_limit_by_size.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BIN [MB...]" >&2; exit 2; }
bin=$1; shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(256 512 768 1024 1536 2048)
ROUNDS=${ROUNDS:-2}
PAGES=${PAGES:-thp}
OUT=${OUT:-results/memory_limit_by_size.jsonl}
for mb in "${sizes[@]}"; do  # every size checked before anything runs or the output is removed
  [[ "$mb" =~ ^[0-9]+$ ]] && [ "$mb" -ge 8 ] || { echo "$0: size '$mb' is not a whole number of MiB >= 8" >&2; exit 2; }
done
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
records=100000
for round in $(seq "$ROUNDS"); do
  echo "round $round ($(uptime | sed 's/.*load/load/'))" >&2
  for mb in "${sizes[@]}"; do
    # 32-byte inline slots: records / load factor slots make the table mb MiB.
    lf=$(python3 -c "import sys; print($records / (int(sys.argv[1]) * 2**20 / 32))" "$mb")
    tmp=$(mktemp)
    "$bin" bench --fabric local --clients 1 --records "$records" --load-factor "$lf" --slot-format inline --key-bytes 8 \
      --value-bytes 8 --ops 1000 --workload get --memory-limit "$PAGES" --no-progress --quiet --json "$tmp" > /dev/null
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l); j["round"] = int(sys.argv[2]); print(json.dumps(j))' "$tmp" "$round" >> "$OUT"
    rm -f "$tmp"
  done
done
python3 - "$OUT" <<'PY'
import json, sys
print(f"{'round':>5} {'region MiB':>10} {'pages':>5} {'huge':>5} {'before M/s':>10} {'after M/s':>9} {'dep ns':>6} {'after':>5}")
for l in open(sys.argv[1]):
    r = json.loads(l)
    m = r["memory_limit"]
    print(f"{r['round']:5} {m['bytes'] / 2**20:10.0f} {m['pages_given']:>5} {m['huge_fraction']:5.3f} "
          f"{m['batched_ops_per_s'] / 1e6:10.1f} {m['after_batched_ops_per_s'] / 1e6:9.1f} "
          f"{m['dependent_ns']:6.0f} {m['after_dependent_ns']:5.0f}")
PY
