#!/bin/sh
# usage: expect_fail.sh REGEX COMMAND...  — passes if COMMAND exits with status 2 (the CLI's status
# for bad input, as the README promises) and prints `rdmahash <cmd>: error: ...` (or, for the
# python tools, `<tool>.py: error: ...`) matching REGEX on
# stderr. Any other status (0, 1, a crash) fails, and so does a command still running after
# EXPECT_FAIL_SECONDS (default 30; the mpirun tests, ~2.5 s here, set 120; the rest take under
# 0.2 s): bad input is refused at once, never by hanging. A hang fails here as a FAIL, not as a
# ctest timeout, so the mutation harness does not take it for a slow machine and run it again.
# --foreground keeps the command in ctest's process group, where the harness's stop reaches it.
regex=$1; shift
limit=${EXPECT_FAIL_SECONDS:-30}
err=$(mktemp)
start=$(date +%s)
timeout --foreground -k 5 "$limit" "$@" >/dev/null 2>"$err"
rc=$?
msg=$(cat "$err"); rm -f "$err"
# 124: timed out (137: it ignored the TERM). A 137 before the limit is a kill from elsewhere.
if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $(( $(date +%s) - start )) -ge "$limit" ]; }; then
  echo "still running after $limit s (a hang: bad input must be refused at once): $*"; echo "$msg"; exit 1
fi
if [ "$rc" -ne 2 ]; then echo "expected exit status 2, got $rc: $*"; echo "$msg"; exit 1; fi
if ! printf '%s' "$msg" | grep -Eq -- "^(rdmahash [a-z-]+|[a-z_]+\.py): error: "; then
  echo "message lacks 'rdmahash <cmd>: error: ': $msg"; exit 1
fi
if ! printf '%s' "$msg" | grep -Eq -- "$regex"; then echo "message does not match '$regex': $msg"; exit 1; fi
echo "ok (exit $rc): $msg"
