#!/bin/sh
# usage: expect_ok.sh REGEX COMMAND...  — passes if COMMAND exits with status 0 and its stdout
# matches REGEX (ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status).
regex=$1; shift
out=$(mktemp)
"$@" >"$out" 2>&1
rc=$?
msg=$(cat "$out"); rm -f "$out"
if [ "$rc" -ne 0 ]; then echo "expected exit status 0, got $rc: $*"; echo "$msg"; exit 1; fi
if ! printf '%s' "$msg" | tr '\n' ' ' | grep -Eq -- "$regex"; then echo "output does not match '$regex':"; echo "$msg"; exit 1; fi
echo "ok: $*"
