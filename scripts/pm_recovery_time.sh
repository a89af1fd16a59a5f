#!/usr/bin/env bash
# Recovery time of a --pm-path image after kill -9 of `rdmahash serve`, vs table size, continuity
# and level hashing interleaved (issue 11; docs/results.md). For each size N and scheme: serve
# formats and bulk-loads a new file on /dev/shm (tmpfs), is kill -9'd once listening, and is
# restarted on the file RESTARTS times (each restart kill -9'd once listening); the time is the
# restarted server's own log line `recovered N records from FILE (B bytes) in T s`.
#   scripts/pm_recovery_time.sh [SIZES...]      (default: 100000 1000000 4000000)
# Env: RDMAHASH_BUILD (default build/release), RESTARTS (2), CONT_LF (0.3), LEVEL_LF (0.5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${RDMAHASH_BUILD:-build/release}/rdmahash
[ -x "$BIN" ] || { echo "$0: no $BIN (set RDMAHASH_BUILD)" >&2; exit 1; }
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 1000000 4000000)
restarts=${RESTARTS:-2}
CONT_LF=${CONT_LF:-0.3} LEVEL_LF=${LEVEL_LF:-0.5}
dir=$(mktemp -d /dev/shm/rdmahash-rec.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
life() {  # life SCHEME N LF LOG: one server life on $dir/t.pm, kill -9'd once listening
  rm -f "$dir/out" "$4"  # the previous life's "listening" must not count
  "$BIN" serve --scheme "$1" --pm-path "$dir/t.pm" --records "$2" --load-factor "$3" --value-bytes 16 \
    --listen 127.0.0.1:0 --no-progress > "$dir/out" 2> "$4" &
  local pid=$!
  until grep -q listening "$dir/out" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { echo "serve failed:"; cat "$4"; exit 1; }
    sleep 0.05
  done
  kill -9 $pid
  wait $pid 2>/dev/null || true
}
echo "| records | scheme | image | recovery after kill -9 (s), $restarts restarts | recovered |"
echo "|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  for scheme in continuity level; do
    lf=$CONT_LF; [ "$scheme" = level ] && lf=$LEVEL_LF
    rm -f "$dir/t.pm"
    life "$scheme" "$n" "$lf" "$dir/load.log"
    times=() rec=""
    for _ in $(seq "$restarts"); do
      life "$scheme" "$n" "$lf" "$dir/rec.log"
      line=$(grep -o 'recovered [0-9]* records from .* in [0-9.]* s.*' "$dir/rec.log") || { cat "$dir/rec.log"; exit 1; }
      times+=("$(echo "$line" | sed -E 's/.* in ([0-9.]+) s.*/\1/')")
      rec=$(echo "$line" | awk '{print $2}')
    done
    bytes=$(stat -c %s "$dir/t.pm")
    echo "| $n | $scheme | $(awk -v b="$bytes" 'BEGIN{printf "%.1f MiB", b/1048576}') | $(IFS=,; echo "${times[*]}" | sed 's/,/, /g') | $rec |"
  done
done
