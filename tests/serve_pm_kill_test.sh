#!/bin/bash
# kill -9 of a persistent memory node during an insert load (issue 11):
#   serve_pm_kill_test.sh RDMAHASH ROUNDS OPS [SERVE-OPTIONS...]
# Env: SCHEME (continuity, the default, level or hopscotch), RECORDS (20000), LOAD_FACTOR (0.2), KEYS
# (200000), RESIZE_KILLS (level: the last N rounds kill the server while its image says RESIZING,
# i.e. in the middle of a top-level resize, instead of at a random point; default 0).
# Each round, on a new --pm-path file:
#   1. `rdmahash serve --scheme SCHEME --pm-path FILE` formats and bulk-loads the table;
#   2. one `bench --connect` kv-mix client at --depth 1 runs OPS operations over KEYS keys of which
#      all but the loaded records start absent, so its writes are mostly inserts of new keys
#      (find_or_put / put), with gets, updates and erases mixed in; it records a crash-safe mapped
#      --history;
#   3. the server is kill -9'd once the history holds a random number of events (a random point of
#      the run); the client must stop with exit 1 and "memory node ... closed its connection";
#   4. the server is restarted on the same FILE: it must recover (log "recovered N records"; level,
#      killed mid-resize: "an interrupted resize finished") and serve a lookup client again;
#   5. after a SIGTERM, tests/pm_history_verify.py checks the image against the history: every
#      acknowledged insert present with its value, every acknowledged erase/update applied, the one
#      write in flight at the kill either applied or not, no key twice.
# The pm file lives on /dev/shm when there is one (a tmpfs: msync is cheap); kill -9 kills the
# process, not the machine, so what is tested is the server's protocol and recovery, not the media's
# power-failure behaviour (that is continuity_crash_test's: every persist point).
set -u
bin=$1 rounds=$2 ops=$3
shift 3
extra=("$@")
here=$(cd "$(dirname "$0")" && pwd)
keys=${KEYS:-200000}
records=${RECORDS:-20000}
scheme=${SCHEME:-continuity}
lf=${LOAD_FACTOR:-0.2}
resize_kills=${RESIZE_KILLS:-0}
base=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
dir=$(mktemp -d "$base/rdmahash-pmkill.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
events() {  # the header count of a history file (0 while it does not exist yet)
  [ -s "$1" ] && od -An -t u8 -j 16 -N 8 "$1" | tr -d ' ' || echo 0
}
fail() { echo "FAIL round $r: $*"; for f in "$dir"/*.log "$dir"/*.out "$dir"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
serve() {  # serve LOG-PREFIX: starts the server on the round's file, sets $server and $addr
  "$bin" serve --scheme "$scheme" --pm-path "$dir/table.pm" --records "$records" --load-factor "$lf" --value-bytes 16 --seed "$r" \
    --listen 127.0.0.1:0 --no-progress "${extra[@]}" > "$dir/$1.out" 2> "$dir/$1.log" &
  server=$!
  for _ in $(seq 600); do grep -q listening "$dir/$1.out" 2>/dev/null && break; kill -0 $server 2>/dev/null || break; sleep 0.1; done
  addr=$(grep -o '127\.0\.0\.1:[0-9]*$' "$dir/$1.out") || fail "the server ($1) did not start"
}
# resizing FILE PID: kill -9 PID as soon as the level word of FILE (offset 64) has RESIZING (bit 8)
# set; exit 1 if it never has within 60 s.
resizing() {
  python3 - "$1" "$2" <<'PY'
import mmap, os, signal, sys, time
path, pid = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 60
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    while time.time() < deadline:
        if int.from_bytes(m[64:72], "little") >> 8 & 1:
            os.kill(pid, signal.SIGKILL)
            sys.exit(0)
        time.sleep(0.0002)
sys.exit(1)
PY
}
mid_run=0 mid_resize=0
for r in $(seq "$rounds"); do
  rm -f "$dir"/*
  serve life1
  init=$keys
  target=$((init + (RANDOM * 32768 + RANDOM) % (ops * 8 / 10) + 1))
  "$bin" bench --connect "$addr" --workload kv-mix --keys "$keys" --depth 1 --ops "$ops" --quiet \
    --history "$dir/h.bin" > "$dir/c.out" 2> "$dir/c.err" &
  client=$!
  if [ "$r" -gt $((rounds - resize_kills)) ]; then
    resizing "$dir/table.pm" $server || fail "the table never started a resize (raise OPS or LOAD_FACTOR)"
    mid_resize=$((mid_resize + 1))
  else
    while kill -0 $client 2>/dev/null && [ "$(events "$dir/h.bin")" -lt "$target" ]; do sleep 0.005; done
    kill -0 $client 2>/dev/null || fail "the client finished before the kill (raise OPS)"
    kill -9 $server
  fi
  wait $server 2>/dev/null
  for _ in $(seq 600); do kill -0 $client 2>/dev/null || break; sleep 0.1; done
  kill -0 $client 2>/dev/null && fail "the client still runs 60 s after its memory node died"
  wait $client; rc=$?
  [ $rc -eq 1 ] || fail "the client exited $rc, expected 1"
  grep -q "memory node $addr closed its connection" "$dir/c.err" || fail "the client did not say its memory node closed"
  mid_run=$((mid_run + 1))
  # Life 2: recovery, then a lookup client is served.
  serve life2
  grep -Eq "recovered [0-9]+ records from" "$dir/life2.log" || fail "the restarted server did not recover the image"
  if [ "$r" -gt $((rounds - resize_kills)) ]; then
    grep -q "an interrupted resize finished" "$dir/life2.log" || fail "killed mid-resize, but recovery finished no resize"
  fi
  "$bin" bench --connect "$addr" --workload get --ops 2000 --quiet > "$dir/g.out" 2> "$dir/g.err" ||
    fail "a lookup client after the restart failed"
  kill -TERM $server
  wait $server || fail "the restarted server exited $? on SIGTERM"
  python3 "$here/pm_history_verify.py" --self-test "$dir/table.pm" "$dir/h.bin" > "$dir/verify.out" 2>&1 ||
    fail "the recovered image lost acknowledged operations: $(cat "$dir/verify.out")"
  when="target $target"
  [ "$r" -gt $((rounds - resize_kills)) ] && when="mid-resize"
  echo "round $r: killed at $(events "$dir/h.bin") events ($when); $(grep -o 'recovered [0-9]* records.*' "$dir/life2.log" | head -1)"
  echo "  $(head -1 "$dir/verify.out")"
done
echo "memory node killed mid-run: $mid_run of $rounds ($mid_resize in the middle of a resize)"
[ "$mid_run" -eq "$rounds" ] || { echo "FAIL"; exit 1; }
echo "PASS"
