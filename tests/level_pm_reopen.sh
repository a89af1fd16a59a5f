#!/bin/sh
# usage: level_pm_reopen.sh RDMAHASH_BIN WORKDIR CHECK_JSON MPIEXEC
# --scheme level --pm-path (as continuity_pm_reopen.sh for continuity): a table is created and
# loaded, then reopened by a second run (recovered, not reloaded: every key the first run inserted
# is found), over the local fabric and over UCX (the memory node exposes the file mapping). Reloads
# between points write back the image as loaded. A run with another geometry, a continuity image, a
# truncated image and one with a flipped header bit are refused (exit 2) and left as they were.
set -e
bin=$1; dir=$2; check=$3; mpirun=$4
rm -rf "$dir"; mkdir -p "$dir"
geometry="--scheme level --records 3000 --load-factor 0.5 --value-bytes 8"
common="$geometry --ops 1000"
python3 "$check" -- "$bin" bench --fabric local $common --workload find-or-put --pm-path "$dir/t.pm"
cp "$dir/t.pm" "$dir/before.pm"
python3 "$check" -- "$bin" bench --fabric local $common --workload get --pm-path "$dir/t.pm"
python3 "$check" -- "$mpirun" --oversubscribe -n 2 "$bin" bench --fabric ucx --memory-nodes 1 $common \
  --workload get --pm-path "$dir/t.pm"
cmp "$dir/t.pm" "$dir/before.pm"  # lookups changed nothing
# The find-or-put keys of the first run were persisted: a second find-or-put finds them all, and
# the JSON says the table was recovered from a file (msync, or pmem on a DAX file system).
out=$("$bin" bench --fabric local $common --workload find-or-put --pm-path "$dir/t.pm" --json "$dir/again.jsonl" 2>"$dir/again.err")
grep -q "recovered 4000 records from $dir/t.pm" "$dir/again.err" || { cat "$dir/again.err"; exit 1; }
python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[0]); o=r['outcomes']; \
sys.exit(0 if o['found']==r['ops'] and o['inserted']==0 and r['persists_per_op']==0 \
and r['persistence'] in ('pmem','msync') and r['pm_path']==sys.argv[2] else 'not recovered: %s' % r)" \
  "$dir/again.jsonl" "$dir/t.pm"
# Reloading between points (the sweep's default) writes back the table as loaded: here the
# recovered image; with a new file, the bulk-loaded one. (Over UCX the same adapter code runs on
# the memory node: bench_continuity_pm_reopen covers that path.)
cp "$dir/t.pm" "$dir/before.pm"
reloaded() {  # JSON file: the get after the find-or-put starts from the loaded table and finds every key
  python3 -c "import json,sys; a,b=[json.loads(l) for l in open(sys.argv[1]).read().splitlines()]; \
sys.exit(0 if b['load_factor_start']==a['load_factor_start'] and b['outcomes']['found']==b['ops'] \
and a['persistence'] in ('pmem','msync') else 'not reloaded: %s %s' % (a, b))" "$1"
}
"$bin" bench --fabric local $geometry --workload find-or-put,get --ops 3000 --pm-path "$dir/t.pm" \
  --json "$dir/reload.jsonl" >/dev/null 2>&1
reloaded "$dir/reload.jsonl"
cmp "$dir/t.pm" "$dir/before.pm"  # the find-or-put's inserts were undone by the reload
"$bin" bench --fabric local $common --workload find-or-put,get --pm-path "$dir/new.pm" >/dev/null
"$bin" bench --fabric local $common --workload get --pm-path "$dir/loaded.pm" >/dev/null
cmp "$dir/new.pm" "$dir/loaded.pm"
# The room for resizes of an image comes from its header, not from the reopening run's --ops (the
# first run sized it from its own writes): a run with many more writes reopens it, not "another
# geometry".
"$bin" bench --fabric local $geometry --workload find-or-put --ops 100000 --pm-path "$dir/new.pm" \
  >/dev/null 2>"$dir/ops.err" || { echo "a run with other --ops was refused"; cat "$dir/ops.err"; exit 1; }
grep -q "recovered" "$dir/ops.err" || { cat "$dir/ops.err"; exit 1; }
# Refused, exit 2, nothing written: $1 = file, $2 = message regex; the table options are $opts.
opts=$common
refused() {
  f=$1 msg=$2
  cp "$f" "$dir/orig"
  set +e
  "$bin" bench --fabric local $opts --workload find-or-put --pm-path "$f" >/dev/null 2>"$dir/err"
  rc=$?
  set -e
  [ $rc -eq 2 ] || { echo "exit $rc for $f, expected 2"; cat "$dir/err"; exit 1; }
  grep -Eq "$msg" "$dir/err" || { echo "message does not match '$msg'"; cat "$dir/err"; exit 1; }
  cmp "$f" "$dir/orig"
}
opts="--scheme level --records 3000 --load-factor 0.5 --value-bytes 16 --ops 1000"
refused "$dir/t.pm" "another geometry"
opts=$common
"$bin" bench --fabric local --scheme continuity --records 3000 --load-factor 0.2 --value-bytes 8 --ops 10 \
  --pm-path "$dir/cont.pm" >/dev/null
refused "$dir/cont.pm" 'not a level table image \(its magic is "RDHCONT1"'
head -c 5000 "$dir/t.pm" > "$dir/trunc.pm"
refused "$dir/trunc.pm" "level image is 5000 bytes, its header says [0-9]+ \(truncated file\?\)"
cp "$dir/t.pm" "$dir/flip.pm"
printf '\001' | dd of="$dir/flip.pm" bs=1 seek=40 conv=notrunc 2>/dev/null  # a bit of the hash seed
refused "$dir/flip.pm" "header is corrupt \(checksum mismatch\)"
# A run killed while it bulk-loaded a new file leaves it without magic: refused, with what
# happened, by every later run (never taken for a partly loaded table), and left as it was.
if RDMAHASH_TEST_DIE_LOADING=1000 "$bin" bench --fabric local $common --workload get --pm-path "$dir/killed.pm" \
     2>/dev/null; then echo "the run did not die while loading"; exit 1; fi
[ -e "$dir/killed.pm" ] || { echo "the killed run left no file"; exit 1; }
refused "$dir/killed.pm" "bulk load or reload was interrupted"
echo "level pm reopen ok"
