#!/bin/sh
# usage: expect_fail.sh REGEX COMMAND...  — passes if COMMAND exits with status 2 (the CLI's status
# for bad input, as the README promises) and prints `rdmahash <cmd>: error: ...` (or, for the
# python tools, `<tool>.py: error: ...`) matching REGEX on
# stderr. Any other status (0, 1, a crash) fails.
regex=$1; shift
err=$(mktemp)
"$@" >/dev/null 2>"$err"
rc=$?
msg=$(cat "$err"); rm -f "$err"
if [ "$rc" -ne 2 ]; then echo "expected exit status 2, got $rc: $*"; echo "$msg"; exit 1; fi
if ! printf '%s' "$msg" | grep -Eq -- "^(rdmahash [a-z-]+|[a-z_]+\.py): error: "; then
  echo "message lacks 'rdmahash <cmd>: error: ': $msg"; exit 1
fi
if ! printf '%s' "$msg" | grep -Eq -- "$regex"; then echo "message does not match '$regex': $msg"; exit 1; fi
echo "ok (exit $rc): $msg"
