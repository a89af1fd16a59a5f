#!/bin/bash
# Beyond one host (issue 29 item 1): three "hosts" h1 h2 h3 (network + UTS namespaces on a bridge,
# scripts/hosts.sh) and real processes launched into them by Open MPI's own mpirun.
#   multihost_test.sh RDMAHASH
# 1. Placement: `mpirun --host h1,h2,h3 --map-by node -n 4` puts ranks 0..3 on h1 h2 h3 h1.
# 2. For every scheme: 2 memory nodes (h1, h2) + 2 clients (h3, h1) run a contended kv-mix with
#    (race, which bulk-loads in the process hosting every memory node: 1 memory node, clients h2 h3 h1)
#    --history; the history must be linearizable (the hosts share one kernel, hence one
#    CLOCK_MONOTONIC: the boot id says so), and rank 0's UCX context must hold TCP on the host's
#    interface (tcp/eth0), with the client wait resolved as over TCP (hybrid: shared memory is in
#    every context but reaches no other host). Then the same with UCX_TLS=tcp,self: TCP alone between the hosts. And
#    with shared memory alone (posix, sysv, cma): a run within h1 works, one between h1 and h2 must
#    find the peer unreachable (each host has its own IPC namespace: scripts/hosts.sh).
# 3. `rdmahash serve` in h1 listening on its bridge address with a token; two clients in h2 and one
#    in h3 run kv-mix with histories; every process of host h3 is killed -9 mid-run; the h2 clients
#    and a new client from h3 must finish, the four histories must be linearizable together, and the
#    server must have counted the lost client and exit 0 on SIGTERM.
# Needs root (network namespaces); fails (not skips) without them.
set -u
bin=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
hosts=$here/../scripts/hosts.sh
dir=$(mktemp -d /tmp/rdmahash-multihost.XXXXXX)
cleanup() { kill -9 $(jobs -p) 2>/dev/null; "$hosts" down >/dev/null 2>&1; [ -n "${KEEP:-}" ] || rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log "$dir"/*.err "$dir"/*.out; do [ -s "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 UCX_WARN_UNUSED_ENV_VARS=n
unset UCX_TLS OMPI_MCA_btl OMPI_MCA_pml
"$hosts" up 3 > "$dir/up.log" 2>&1 || fail "cannot create the hosts (root and network namespaces needed)"
mpi() { timeout 300 "$hosts" mpirun --oversubscribe --host h1:2,h2:2,h3:2 --map-by node -n 4 -x UCX_NET_DEVICES=eth0 "$@"; }

# 1. placement
# Only the ranks' lines: Open MPI's rsh launcher may warn in between (seen in CI: "plm:rsh: Warning:
# setpgid(...) failed in parent with errno=Permission denied", a child that had already exec'd).
mpi sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' < /dev/null 2> "$dir/placement.err" | grep -E '^[0-9]+ h[0-9]+$' | sort > "$dir/placement.out"
[ "$(tr '\n' ' ' < "$dir/placement.out")" = "0 h1 1 h2 2 h3 3 h1 " ] || fail "ranks not placed on h1 h2 h3 h1: $(cat "$dir/placement.out")"
echo "ok: ranks 0..3 on $(tr '\n' ' ' < "$dir/placement.out")"

# 2. every scheme, histories across hosts
run=(--fabric ucx --workload kv-mix --keys 16 --depth 4 --ops 3000 --records 20000 --no-progress --quiet)
while IFS='|' read -r name flags; do
  [ -n "$name" ] || continue
  rm -f "$dir/$name.bin" "$dir/$name.jsonl"
  # shellcheck disable=SC2086  # flags is a list of words
  mpi "$bin" bench "${run[@]}" $flags --history "$dir/$name.bin" --json "$dir/$name.jsonl" < /dev/null > "$dir/$name.err" 2>&1 ||
    fail "$name: the run across hosts failed (exit $?)"
  "$bin" check-history --timeout-per-key 120 "$dir/$name.bin" > "$dir/check.out" 2>&1 || fail "$name: history not linearizable"
  grep -q "^linearizable" "$dir/check.out" || fail "$name: no verdict"
  grep -q '"ucx_transports":"[^"]*tcp/eth0' "$dir/$name.jsonl" || fail "$name: rank 0's UCX context has no tcp/eth0"
  # Shared memory is in every context but reaches no other host: auto resolves as over TCP.
  grep -q '"client_wait":"hybrid"' "$dir/$name.jsonl" || fail "$name: client wait not resolved as over TCP (hybrid)"
  echo "ok: $name across hosts: $(head -1 "$dir/check.out")"
done <<'SCHEMES'
linear_set|--memory-nodes 2 --scheme linear --slot-format set
linear_inline|--memory-nodes 2 --scheme linear --slot-format inline --value-bytes 16
cuckoo|--memory-nodes 2 --scheme cuckoo --value-bytes 16
hopscotch|--memory-nodes 2 --scheme hopscotch --value-bytes 16 --load-factor 0.8
cluster|--memory-nodes 2 --scheme cluster --value-bytes 16 --load-factor 0.8
race|--memory-nodes 1 --scheme race --key-bytes 16 --value-bytes 16
level|--memory-nodes 2 --scheme level --value-bytes 16
continuity|--memory-nodes 2 --scheme continuity --value-bytes 16 --load-factor 0.25
SCHEMES
# Over TCP alone (UCX_TLS=tcp,self: no shared memory anywhere), the same across hosts.
rm -f "$dir/tcp.bin"
UCX_TLS=tcp,self mpi -x UCX_TLS "$bin" bench "${run[@]}" --memory-nodes 2 --scheme linear --slot-format inline --value-bytes 16 \
  --history "$dir/tcp.bin" --json "$dir/tcp.jsonl" < /dev/null > "$dir/tcp.err" 2>&1 || fail "the run over TCP alone failed"
"$bin" check-history --timeout-per-key 120 "$dir/tcp.bin" > "$dir/check.out" 2>&1 || fail "tcp: history not linearizable"
grep -q '"ucx_transports":"[^"]*tcp/eth0' "$dir/tcp.jsonl" || fail "tcp: rank 0's UCX context has no tcp/eth0"
grep -Eq '"ucx_transports":"[^"]*(posix|sysv|cma|xpmem|knem)' "$dir/tcp.jsonl" && fail "tcp: rank 0's UCX context has a shared-memory transport"
echo "ok: TCP alone across hosts: $(head -1 "$dir/check.out")"
# Shared memory only (posix, sysv, cma): within one host it works, between hosts UCX must find no
# path (each host has its own IPC namespace, as two machines have separate kernels' shared memory).
sm=(--fabric ucx --scheme linear --records 20000 --ops 2000 --no-progress --quiet)
UCX_TLS=posix,sysv,cma,self timeout 300 "$hosts" mpirun --oversubscribe --host h1:2 -n 2 -x UCX_TLS -x UCX_NET_DEVICES=eth0 \
  "$bin" bench "${sm[@]}" < /dev/null > "$dir/sm_in.err" 2>&1 || fail "shared memory within host h1 failed"
UCX_TLS=posix,sysv,cma,self timeout 300 "$hosts" mpirun --oversubscribe --host h1:1,h2:1 -n 2 -x UCX_TLS -x UCX_NET_DEVICES=eth0 \
  "$bin" bench "${sm[@]}" < /dev/null > "$dir/sm_across.err" 2>&1
grep -q "Destination is unreachable" "$dir/sm_across.err" ||
  fail "shared memory only between h1 and h2: expected 'Destination is unreachable', got: $(grep -m1 error "$dir/sm_across.err")"
echo "ok: shared memory within a host, unreachable between hosts"

# 3. serve in h1 with a token, clients in h2 and h3, host h3 killed mid-run
tok=$dir/token
"$hosts" exec h1 "$bin" serve --listen 10.213.0.1:0 --token-file "$tok" --no-progress --records 1000 \
  --slot-format set > "$dir/serve.out" 2> "$dir/serve.log" &
server=$!
for _ in $(seq 300); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o '10\.213\.0\.1:[0-9]*$' "$dir/serve.out") || fail "the server in h1 did not start on 10.213.0.1"
crun=(bench --connect "$addr" --token-file "$tok" --workload kv-mix --keys 16 --depth 4 --quiet)
"$hosts" exec h2 "$bin" "${crun[@]}" --ops 20000 --history "$dir/s1.bin" > "$dir/s1.err" 2>&1 & p1=$!
"$hosts" exec h2 "$bin" "${crun[@]}" --ops 20000 --history "$dir/s2.bin" > "$dir/s2.err" 2>&1 & p2=$!
"$hosts" exec h3 "$bin" "${crun[@]}" --ops 200000 --history "$dir/s3.bin" > "$dir/s3.err" 2>&1 & p3=$!
events() { [ -s "$1" ] && od -An -t u8 -j 16 -N 8 "$1" | tr -d ' ' || echo 0; }
target=$((RANDOM % 5000 + 500))
for _ in $(seq 6000); do [ "$(events "$dir/s3.bin")" -ge "$target" ] && break; kill -0 $p3 2>/dev/null || break; sleep 0.01; done
kill -0 $p3 2>/dev/null || fail "the h3 client ended before it could be killed"
victims=$(ip netns pids h3)
[ -n "$victims" ] || fail "no process in host h3"
kill -9 $victims
echo "ok: killed host h3's processes ($(echo $victims | wc -w)) at event $(events "$dir/s3.bin")"
for _ in $(seq 600); do kill -0 $p1 2>/dev/null || kill -0 $p2 2>/dev/null || break; sleep 0.1; done
wait $p1 || fail "the first h2 client failed (exit $?)"
wait $p2 || fail "the second h2 client failed (exit $?)"
wait $p3 2>/dev/null
"$hosts" exec h3 "$bin" "${crun[@]}" --ops 2000 --history "$dir/s4.bin" > "$dir/s4.err" 2>&1 || fail "a client from h3 after the kill failed"
"$bin" check-history --timeout-per-key 120 "$dir"/s1.bin "$dir"/s2.bin "$dir"/s3.bin "$dir"/s4.bin > "$dir/check.out" 2>&1 ||
  fail "the served table's history across hosts is not linearizable"
grep -q "s3.bin: recording not finished" "$dir/check.out" || fail "the killed client's recording was finished: it was not killed mid-run"
echo "ok: served across hosts with a token, h3 killed mid-run: $(grep '^linearizable' "$dir/check.out")"
kill -TERM $server
wait $server; rc=$?
[ $rc = 0 ] || fail "the server exited $rc on SIGTERM"
grep -q "1 lost" "$dir/serve.out" || fail "the server did not count the lost client: $(tail -1 "$dir/serve.out")"
echo "ok: $(tail -1 "$dir/serve.out" | cut -c1-120)"
echo "PASS"
