#!/bin/bash
# A client that dies in the middle of sending an RPC must not stall the other clients (issue 26,
# item 1: `serve_kill_level` / `serve_kill_cuckoo_heap` hung on a busy machine).
#   serve_dead_sender_test.sh RDMAHASH PROBE SERVE-OPTIONS...
# The cause: over shared memory every sender appends to the memory node's UCX receive FIFO by
# reserving an element (a CAS on the FIFO's head) and then filling it; a client killed between the
# two left an element nobody completes, and the worker read nothing after it again, so every later
# RPC of every other client waited for ever. The probe (serve_dead_sender_probe.cpp) dies at that
# instruction deterministically: its RPC payload is an unreadable page, and UCX copies it after the
# reservation. Then two clients run writes (RPCs for level, cuckoo's inserts, RACE's chunks) and
# must finish within a liveness bound, linearizably; a third after them too.
set -u
bin=$1 probe=$2
shift 2
dir=$(mktemp -d /tmp/rdmahash-deadsender.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log "$dir"/*.err "$dir"/*.out; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
"$bin" serve --listen 127.0.0.1:0 --no-progress "$@" > "$dir/serve.out" 2> "$dir/serve.log" &
server=$!
for _ in $(seq 300); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o '127\.0\.0\.1:[0-9]*$' "$dir/serve.out") || fail "the server did not start"
run=(--connect "$addr" --workload kv-mix --keys 16 --depth 4 --quiet)
"$bin" bench "${run[@]}" --ops 500 --history "$dir/h0.bin" > "$dir/c0.err" 2>&1 || fail "a client before the probe failed"
"$probe" "$addr" > "$dir/probe.out" 2>&1
rc=$?
[ $rc -eq 139 ] || fail "the probe did not die in its send (exit $rc, expected 139: SIGSEGV)"
for _ in $(seq 100); do grep -q "client 1 lost" "$dir/serve.log" && break; sleep 0.1; done
grep -q "client 1 lost" "$dir/serve.log" || fail "the server did not log the probe as lost"
# Liveness: the survivors run well under a second of work; 60 s is a hang, not slowness.
timeout 60 "$bin" bench "${run[@]}" --ops 3000 --history "$dir/h1.bin" > "$dir/c1.err" 2>&1 & p1=$!
timeout 60 "$bin" bench "${run[@]}" --ops 3000 --history "$dir/h2.bin" > "$dir/c2.err" 2>&1 & p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
[ $r1 -eq 124 ] || [ $r2 -eq 124 ] && fail "a client after the dead sender did not finish within 60 s (stalled)"
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || fail "a client after the dead sender failed (exit $r1, $r2)"
timeout 60 "$bin" bench "${run[@]}" --ops 1000 --history "$dir/h3.bin" > "$dir/c3.err" 2>&1 || fail "a later client failed or stalled"
"$bin" check-history --timeout-per-key 120 "$dir"/h0.bin "$dir"/h1.bin "$dir"/h2.bin "$dir"/h3.bin > "$dir/check.out" 2>&1 ||
  fail "the clients' history is not linearizable"
grep -q "^linearizable" "$dir/check.out" || fail "no verdict"
kill -0 "$server" 2>/dev/null || fail "the server died"
kill -TERM "$server"
wait "$server" || fail "the server exited $? on SIGTERM"
echo "probe: $(head -1 "$dir/probe.out"); $(tail -1 "$dir/check.out")"
echo "PASS"
