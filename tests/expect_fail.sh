#!/bin/sh
# usage: expect_fail.sh REGEX COMMAND...  — passes if COMMAND exits with status 2 (the CLI's status
# for bad input, as the README promises) and prints `rdmahash <cmd>: error: ...` (or, for the
# python tools, `<tool>.py: error: ...`) matching REGEX on
# stderr. Any other status (0, 1, a crash) fails, and so does a command still running after
# EXPECT_FAIL_SECONDS (default 30; the slowest of these tests takes ~2 s): bad input is refused at
# once, never by hanging. (A hang fails here as a FAIL, not as a ctest timeout, so the mutation
# harness does not read it as a kill by timeout alone and run it again.)
regex=$1; shift
limit=${EXPECT_FAIL_SECONDS:-30}
err=$(mktemp)
timeout -k 5 "$limit" "$@" >/dev/null 2>"$err"
rc=$?
msg=$(cat "$err"); rm -f "$err"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "still running after $limit s (a hang: bad input must be refused at once): $*"; echo "$msg"; exit 1
fi
if [ "$rc" -ne 2 ]; then echo "expected exit status 2, got $rc: $*"; echo "$msg"; exit 1; fi
if ! printf '%s' "$msg" | grep -Eq -- "^(rdmahash [a-z-]+|[a-z_]+\.py): error: "; then
  echo "message lacks 'rdmahash <cmd>: error: ': $msg"; exit 1
fi
if ! printf '%s' "$msg" | grep -Eq -- "$regex"; then echo "message does not match '$regex': $msg"; exit 1; fi
echo "ok (exit $rc): $msg"
