#!/bin/sh
# usage: refused_run_keeps_history.sh RDMAHASH DIR — a `bench --history FILE` run that is refused
# (here: a corrupt --pm-path, found after the options passed) leaves an earlier FILE byte-identical
# (issue 26 item 7: it was truncated to 0 bytes before the run was refused).
set -u
bin=$1; dir=$2
rm -rf "$dir" && mkdir -p "$dir" || exit 1
h=$dir/history.bin
"$bin" bench --fabric local --records 100 --ops 50 --workload kv-mix --quiet --no-progress --history "$h" >/dev/null ||
  { echo "FAIL: the first run (writing the history) failed"; exit 1; }
cp "$h" "$dir/history.orig"
printf 'not a table image, not a table image' > "$dir/corrupt.pm"
for scheme in continuity level; do
  "$bin" bench --fabric local --scheme "$scheme" --pm-path "$dir/corrupt.pm" --records 100 --ops 50 --workload kv-mix \
    --quiet --no-progress --history "$h" >/dev/null 2>"$dir/err"
  rc=$?
  if [ "$rc" -ne 2 ]; then echo "FAIL: the run with a corrupt --pm-path ($scheme) exited $rc, not 2: $(cat "$dir/err")"; exit 1; fi
  if ! cmp -s "$h" "$dir/history.orig"; then
    echo "FAIL: the refused run ($scheme: $(cat "$dir/err")) changed the history: $(wc -c < "$h") bytes, was $(wc -c < "$dir/history.orig")"
    exit 1
  fi
  if [ -e "$h.tmp" ]; then echo "FAIL: $h.tmp left behind"; exit 1; fi
done
# A run that succeeds replaces the history whole (written beside it, renamed at the end).
"$bin" bench --fabric local --records 100 --ops 60 --workload kv-mix --quiet --no-progress --history "$h" >/dev/null ||
  { echo "FAIL: the last run failed"; exit 1; }
if cmp -s "$h" "$dir/history.orig" || [ -e "$h.tmp" ]; then echo "FAIL: the last run did not replace the history"; exit 1; fi
echo "PASS: refused runs left the history byte-identical"
