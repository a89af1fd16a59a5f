#!/bin/bash
# Clients killed at random points against a served table (issue 10, items 4-5):
#   serve_kill_test.sh RDMAHASH ROUNDS OPS SERVE-OPTIONS...
# Each round starts a fresh `rdmahash serve` (its table's whole life is the round's history), runs
# three `bench --connect` kv-mix clients on 16 contended keys with --history, and kill -9s the
# second one once its history file (a MAP_SHARED recording) holds a random number of events, i.e.
# at a random point of its run. Then:
#   - both survivors finish with exit 0 (the server and the table stayed usable),
#   - the three files together are linearizable (the victim's operations in flight are pending),
#   - the victim's file says its recording was not finished,
#   - the server logged the lost client and is still up; a new client then runs and is checked too.
# After the rounds each server is stopped with SIGTERM and must exit 0 saying so.
# With NO_KILL=1 nobody is killed (used over TCP, where UCX 1.13 may abort the server when a
# client dies with READs in flight: see include/rdmahash/ucx_service.h).
# With LOCK_DEATH=1 (linear inline) the victim is not killed from outside: it kills itself while
# holding its Nth slot lock (RDMAHASH_TEST_DIE_HOLDING_LOCK=N, N random, odd and even in turn:
# before its payload WRITE for even N, after it for odd N), and the server must recover the lock (LinearLockSweeper): the
# survivors wait for it, and its log must report the lock rolled back or forward.
# With RACE_SPLIT_DEATH=1 (race) the victim kills itself at its Nth split step (the same variable,
# N random in 1..12: its first split, at any of its ~12 steps, leaving the split installed,
# partly frozen, copied or published as that step does); the server must mark it dead on the
# death board, and the survivors finish its split whenever they meet it (include/rdmahash/race.h, Split).
# CLIENT_FLAGS: more options for every client (e.g. --client-wait event), word-split.
# KEYS (default 16) sets the contended key count (race: enough new keys that tables split mid-run).
set -u
bin=$1 rounds=$2 ops=$3
shift 3
dir=$(mktemp -d /tmp/rdmahash-kill.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
events() {  # the header count of a history file (0 while it does not exist yet)
  [ -s "$1" ] && od -An -t u8 -j 16 -N 8 "$1" | tr -d ' ' || echo 0
}
fail() { echo "FAIL round $r: $*"; for f in "$dir"/*.log "$dir"/*.err "$dir"/check.out; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
killed_mid_run=0
for r in $(seq "$rounds"); do
  rm -f "$dir"/*
  "$bin" serve --listen 127.0.0.1:0 --no-progress "$@" > "$dir/serve.out" 2> "$dir/serve.log" &
  server=$!
  for _ in $(seq 300); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
  addr=$(grep -o '127\.0\.0\.1:[0-9]*$' "$dir/serve.out") || fail "the server did not start"
  # shellcheck disable=SC2206  # CLIENT_FLAGS is a list of words
  run=(--connect "$addr" --workload kv-mix --keys "${KEYS:-16}" --depth 4 --quiet ${CLIENT_FLAGS:-})
  pids=()
  lock_n=$(( (RANDOM % 200) * 2 + 1 + r % 2 ))  # odd and even rounds alternate: roll forward, roll back
  [ "${RACE_SPLIT_DEATH:-}" = 1 ] && lock_n=$((RANDOM % 12 + 1))
  # A victim killed from outside gets 4x the operations: the kill lands at event `target` (at most
  # 80 % of `ops`), and the poll below may be descheduled for a while on a loaded machine; the
  # victim must still be running then, or the kill proves nothing.
  victim_ops=$((ops * 4))
  { [ "${NO_KILL:-}" = 1 ] || [ "${LOCK_DEATH:-}" = 1 ] || [ "${RACE_SPLIT_DEATH:-}" = 1 ]; } && victim_ops=$ops
  for c in 1 2 3; do
    if { [ "${LOCK_DEATH:-}" = 1 ] || [ "${RACE_SPLIT_DEATH:-}" = 1 ]; } && [ $c = 2 ]; then
      RDMAHASH_TEST_DIE_HOLDING_LOCK=$lock_n "$bin" bench "${run[@]}" --ops "$ops" --history "$dir/h$c.bin" > "$dir/c$c.err" 2>&1 &
    elif [ $c = 2 ]; then
      "$bin" bench "${run[@]}" --ops "$victim_ops" --history "$dir/h$c.bin" > "$dir/c$c.err" 2>&1 &
    else
      "$bin" bench "${run[@]}" --ops "$ops" --history "$dir/h$c.bin" > "$dir/c$c.err" 2>&1 &
    fi
    pids+=($!)
  done
  target=$((RANDOM % (ops * 8 / 10) + 17))  # 16 init events, then the victim's operations
  [ "${LOCK_DEATH:-}" = 1 ] && target=$((ops * 10))  # it dies by itself
  [ "${RACE_SPLIT_DEATH:-}" = 1 ] && target=$((ops * 10))
  [ "${NO_KILL:-}" = 1 ] && target=$((ops * 10))     # it finishes
  while kill -0 "${pids[1]}" 2>/dev/null && [ "$(events "$dir/h2.bin")" -lt "$target" ]; do sleep 0.005; done
  kill -9 "${pids[1]}" 2>/dev/null
  # Liveness: the survivors run ~1 s of work; 60 s without finishing is a hang (e.g. a lock nobody
  # recovers), not slowness.
  for _ in $(seq 600); do kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[2]}" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[2]}" 2>/dev/null; then fail "the survivors did not finish within 60 s"; fi
  wait "${pids[0]}" || fail "survivor 1 failed (exit $?)"
  wait "${pids[2]}" || fail "survivor 3 failed (exit $?)"
  wait "${pids[1]}" 2>/dev/null
  # A fourth client after the kill: the server still serves.
  "$bin" bench "${run[@]}" --ops 2000 --history "$dir/h4.bin" > "$dir/c4.err" 2>&1 || fail "a client after the kill failed"
  "$bin" check-history --timeout-per-key 120 "$dir"/h1.bin "$dir"/h2.bin "$dir"/h3.bin "$dir"/h4.bin > "$dir/check.out" 2>&1 ||
    fail "the survivors' history is not linearizable"
  grep -q "^linearizable" "$dir/check.out" || fail "no verdict"
  if grep -q "h2.bin: recording not finished" "$dir/check.out"; then
    killed_mid_run=$((killed_mid_run + 1))
    grep -q "client [0-9]* lost" "$dir/serve.log" || fail "the server did not log the lost client"
    # The server repairs after its grace period (1 s) with no further loss; survivors that never
    # needed the dead client's locks may finish before that: wait for the log line (liveness bound).
    await_log() { for _ in $(seq 100); do grep -Eq "$1" "$dir/serve.log" && return 0; sleep 0.1; done; return 1; }
    if [ "${LOCK_DEATH:-}" = 1 ]; then
      await_log "lock recovery:" || true
      grep -Eq "lock recovery: [1-9][0-9]* locked slot\(s\) marked, [0-9]+ rolled forward, [0-9]+ rolled back, 0 torn" \
        "$dir/serve.log" || fail "the server did not recover the dead client's lock"
      grep -Eq "marked, ([1-9][0-9]* rolled forward|[0-9]+ rolled forward, [1-9])" "$dir/serve.log" ||
        fail "no lock was repaired"
    fi
    if [ "${RACE_SPLIT_DEATH:-}" = 1 ]; then
      await_log "race: client\(s\) [0-9, ]* marked dead on the death board" ||
        fail "the server did not mark the dead client on the death board"
    fi
  fi
  kill -0 "$server" 2>/dev/null || fail "the server died"
  kill -TERM "$server"
  wait "$server"; rc=$?
  [ $rc -eq 0 ] || fail "the server exited $rc on SIGTERM"
  grep -q "stopped by SIGTERM" "$dir/serve.out" || fail "the server did not say it stopped"
  echo "round $r: victim killed at $(events "$dir/h2.bin") events (target $target); $(tail -1 "$dir/check.out")"
  [ "${LOCK_DEATH:-}" = 1 ] && echo "  died holding lock $lock_n; $(grep "lock recovery" "$dir/serve.log" | tail -1)"
  [ "${RACE_SPLIT_DEATH:-}" = 1 ] && echo "  died at split step $lock_n; $(grep "death board" "$dir/serve.log" | tail -1)"
done
echo "killed mid-run: $killed_mid_run of $rounds"
# A kill that came after the victim had finished proves nothing: most rounds must hit mid-run.
if [ "${NO_KILL:-}" = 1 ]; then
  [ "$killed_mid_run" -eq 0 ] || { echo "FAIL: a client died without being killed"; exit 1; }
else
  [ "$killed_mid_run" -ge $((rounds * 3 / 4)) ] || { echo "FAIL: too few kills landed mid-run"; exit 1; }
fi
echo "PASS"
