#!/bin/sh
# usage: expect_fail.sh REGEX COMMAND...  — passes if COMMAND exits non-zero (not by a signal)
# and prints a message matching REGEX on stderr.
regex=$1; shift
err=$(mktemp)
"$@" >/dev/null 2>"$err"
rc=$?
msg=$(cat "$err"); rm -f "$err"
if [ "$rc" -eq 0 ]; then echo "expected failure, got exit 0: $*"; exit 1; fi
if [ "$rc" -ge 128 ]; then echo "crashed (exit $rc): $*"; echo "$msg"; exit 1; fi
if ! printf '%s' "$msg" | grep -Eq -- "$regex"; then echo "message does not match '$regex': $msg"; exit 1; fi
echo "ok (exit $rc): $msg"
