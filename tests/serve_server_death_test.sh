#!/bin/bash
# A memory node that dies under its clients (issue 10 item 4): serve_server_death_test.sh RDMAHASH SERVE-OPTIONS...
# Starts `rdmahash serve`, runs a long kv-mix client against it, kill -9s the server after the
# client has started; the client must stop within 60 s (a liveness bound, not a timing) with exit
# 1 and "memory node ... closed its connection" — not hang on an RPC nobody answers, and not go on
# "succeeding" on the dead node's shared-memory segment.
# CLIENT_FLAGS: more options for the client (e.g. --client-wait event), word-split. WORKLOAD: the
# client's workload (kv-mix).
set -u
bin=$1
shift
dir=$(mktemp -d /tmp/rdmahash-sdeath.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
"$bin" serve --listen 127.0.0.1:0 --no-progress "$@" > "$dir/serve.out" 2> "$dir/serve.log" &
server=$!
for _ in $(seq 300); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o '127\.0\.0\.1:[0-9]*$' "$dir/serve.out") || { echo "FAIL: the server did not start"; exit 1; }
# shellcheck disable=SC2086  # CLIENT_FLAGS is a list of words
"$bin" bench --connect "$addr" --workload "${WORKLOAD:-kv-mix}" --keys 1000 --depth 4 --ops 100000000 --quiet ${CLIENT_FLAGS:-} > "$dir/c.out" 2> "$dir/c.err" &
client=$!
for _ in $(seq 300); do grep -q "client 0 connected" "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -9 "$server"
for _ in $(seq 600); do kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$client" 2>/dev/null; then echo "FAIL: the client still runs 60 s after its memory node died"; exit 1; fi
wait "$client"; rc=$?
cat "$dir/c.err"
[ $rc -eq 1 ] || { echo "FAIL: the client exited $rc, expected 1"; exit 1; }
grep -q "memory node $addr closed its connection" "$dir/c.err" || { echo "FAIL: no clear message"; exit 1; }
echo PASS
