#!/bin/sh
# usage: continuity_pm_reopen.sh RDMAHASH_BIN WORKDIR CHECK_JSON MPIEXEC
# A --pm-path table is created and loaded, then reopened by a second run (recovered, not
# reloaded: every loaded key is found), over the local fabric and over UCX (the memory node
# exposes the file mapping). A run with another geometry is refused and leaves the file as it was.
set -e
bin=$1; dir=$2; check=$3; mpirun=$4
rm -rf "$dir"; mkdir -p "$dir"
common="--scheme continuity --records 3000 --load-factor 0.2 --value-bytes 8 --ops 1000"
python3 "$check" -- "$bin" bench --fabric local $common --workload find-or-put --pm-path "$dir/t.pm"
cp "$dir/t.pm" "$dir/before.pm"
python3 "$check" -- "$bin" bench --fabric local $common --workload get --pm-path "$dir/t.pm"
python3 "$check" -- "$mpirun" --oversubscribe -n 2 "$bin" bench --fabric ucx --memory-nodes 1 $common \
  --workload get --pm-path "$dir/t.pm"
cmp "$dir/t.pm" "$dir/before.pm"  # lookups changed nothing
# The find-or-put keys of the first run were persisted: a second find-or-put finds them all.
out=$("$bin" bench --fabric local $common --workload find-or-put --pm-path "$dir/t.pm" --json "$dir/again.jsonl")
python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[0]); o=r['outcomes']; \
sys.exit(0 if o['found']==r['ops'] and o['inserted']==0 and r['persists_per_op']==0 else 'not recovered: %s' % o)" \
  "$dir/again.jsonl"
# Reloading between points (the sweep's default) writes back the table as loaded: here the
# recovered image (no bulk load could rebuild it), over both fabrics; with a new file, the
# bulk-loaded one.
geometry="--scheme continuity --records 3000 --load-factor 0.2 --value-bytes 8"  # $common without --ops
cp "$dir/t.pm" "$dir/before.pm"
reloaded() {  # JSON file: the get after the find-or-put starts from the loaded table and finds every key
  python3 -c "import json,sys; a,b=[json.loads(l) for l in open(sys.argv[1]).read().splitlines()]; \
sys.exit(0 if b['load_factor_start']==a['load_factor_start'] and b['outcomes']['found']==b['ops'] \
and a['persistence'] in ('pmem','msync') else 'not reloaded: %s %s' % (a, b))" "$1"
}
"$bin" bench --fabric local $geometry --workload find-or-put,get --ops 3000 --pm-path "$dir/t.pm" \
  --json "$dir/reload.jsonl" >/dev/null
reloaded "$dir/reload.jsonl"
cmp "$dir/t.pm" "$dir/before.pm"  # the find-or-put's inserts were undone by the reload
"$mpirun" --oversubscribe -n 2 "$bin" bench --fabric ucx --memory-nodes 1 $geometry --workload find-or-put,get \
  --ops 3000 --pm-path "$dir/t.pm" --json "$dir/reload_ucx.jsonl" >/dev/null
reloaded "$dir/reload_ucx.jsonl"
cmp "$dir/t.pm" "$dir/before.pm"
"$bin" bench --fabric local $common --workload find-or-put,get --pm-path "$dir/new.pm" >/dev/null
"$bin" bench --fabric local $common --workload get --pm-path "$dir/loaded.pm" >/dev/null
cmp "$dir/new.pm" "$dir/loaded.pm"
if "$bin" bench --fabric local --scheme continuity --records 3000 --load-factor 0.2 --value-bytes 16 --ops 10 \
     --pm-path "$dir/t.pm" 2>"$dir/err"; then echo "another geometry was accepted"; exit 1; fi
grep -q "another geometry" "$dir/err" || { cat "$dir/err"; exit 1; }
cmp "$dir/t.pm" "$dir/before.pm"
# A new file whose bulk load fails (a segment full) is removed; one whose run was killed while it
# loaded has no magic and is refused, with what happened, by every later run (never taken for a
# partly loaded table).
if "$bin" bench --fabric local --scheme continuity --records 3000 --load-factor 0.9 --value-bytes 8 --ops 10 \
     --pm-path "$dir/full.pm" 2>"$dir/err"; then echo "an overfull load was accepted"; exit 1; fi
grep -q "the bulk load of the new file .* failed: removed it" "$dir/err" || { cat "$dir/err"; exit 1; }
[ ! -e "$dir/full.pm" ] || { echo "a failed load left its file"; exit 1; }
if RDMAHASH_TEST_DIE_LOADING=1000 "$bin" bench --fabric local $common --workload get --pm-path "$dir/killed.pm" \
     2>/dev/null; then echo "the run did not die while loading"; exit 1; fi
[ -e "$dir/killed.pm" ] || { echo "the killed run left no file"; exit 1; }
cp "$dir/killed.pm" "$dir/killed_before.pm"
if "$bin" bench --fabric local $common --workload get --pm-path "$dir/killed.pm" 2>"$dir/err"; then
  echo "a partly loaded file was taken for the table"; exit 1; fi
grep -q "bulk load or reload was interrupted" "$dir/err" || { cat "$dir/err"; exit 1; }
cmp "$dir/killed.pm" "$dir/killed_before.pm"
echo "pm reopen ok"
