#!/bin/sh
# usage: hopscotch_pm_reopen.sh RDMAHASH_BIN WORKDIR CHECK_JSON MPIEXEC
# --scheme hopscotch --pm-path (P-FaRM-KV; as level_pm_reopen.sh for level): a table is created and
# loaded, then reopened by a second run (recovered, not reloaded: every key the first run inserted
# is found, with no persist), over the local fabric and over UCX (the memory node exposes the file
# mapping). Writes report their persists (insert 2 + 4 per displacement move, update 3, erase 1).
# A run with another geometry, a level image, a truncated image, one with a flipped header bit, a
# file of zeros and one left by a run killed while loading are refused (exit 2) and left as they were.
set -e
bin=$1; dir=$2; check=$3; mpirun=$4
rm -rf "$dir"; mkdir -p "$dir"
geometry="--scheme hopscotch --records 3000 --load-factor 0.5 --value-bytes 8"
common="$geometry --ops 1000"
python3 "$check" -- "$bin" bench --fabric local $common --workload find-or-put --pm-path "$dir/t.pm"
cp "$dir/t.pm" "$dir/before.pm"
python3 "$check" -- "$bin" bench --fabric local $common --workload get --pm-path "$dir/t.pm"
python3 "$check" -- "$mpirun" --oversubscribe -n 2 "$bin" bench --fabric ucx --memory-nodes 1 $common \
  --workload get --pm-path "$dir/t.pm"
cmp "$dir/t.pm" "$dir/before.pm"  # lookups changed nothing
out=$("$bin" bench --fabric local $common --workload find-or-put --pm-path "$dir/t.pm" --json "$dir/again.jsonl" 2>"$dir/again.err")
grep -q "recovered 4000 records from $dir/t.pm" "$dir/again.err" || { cat "$dir/again.err"; exit 1; }
python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[0]); o=r['outcomes']; \
sys.exit(0 if o['found']==r['ops'] and o['inserted']==0 and r['persists_per_op']==0 \
and r['persistence'] in ('pmem','msync') and r['pm_path']==sys.argv[2] else 'not recovered: %s' % r)" \
  "$dir/again.jsonl" "$dir/t.pm"
# Persists per write, from the bench JSON: updates 3 and erases 1 exactly, inserts at least 2.
"$bin" bench --fabric local $geometry --workload find-or-put,update,erase --ops 1000 --pm-path "$dir/p.pm" \
  --json "$dir/persists.jsonl" >/dev/null 2>&1
python3 -c "import json,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; p={r['workload']: r['persists_per_op'] for r in rs}; \
sys.exit(0 if p['find-or-put']>=2 and p['update']==3 and p['erase']==1 else 'persists per op: %s' % p)" "$dir/persists.jsonl"
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
opts="--scheme hopscotch --records 3000 --load-factor 0.5 --value-bytes 16 --ops 1000"
refused "$dir/t.pm" "another geometry"
opts=$common
"$bin" bench --fabric local --scheme level --records 3000 --load-factor 0.5 --value-bytes 8 --ops 10 \
  --pm-path "$dir/level.pm" >/dev/null
refused "$dir/level.pm" "not a hopscotch table image"
head -c 5000 "$dir/t.pm" > "$dir/trunc.pm"
refused "$dir/trunc.pm" "hopscotch image is 5000 bytes, its geometry needs [0-9]+ \(truncated file\?\)"
cp "$dir/t.pm" "$dir/flip.pm"
printf '\001' | dd of="$dir/flip.pm" bs=1 seek=40 conv=notrunc 2>/dev/null  # a bit of the hash seed
refused "$dir/flip.pm" "fails its checksum"
head -c "$(wc -c < "$dir/t.pm")" /dev/zero > "$dir/zeros.pm"
refused "$dir/zeros.pm" "header is all zero"
if RDMAHASH_TEST_DIE_LOADING=1000 "$bin" bench --fabric local $common --workload get --pm-path "$dir/killed.pm" \
     2>/dev/null; then echo "the run did not die while loading"; exit 1; fi
[ -e "$dir/killed.pm" ] || { echo "the killed run left no file"; exit 1; }
refused "$dir/killed.pm" "not a hopscotch table image"
echo "hopscotch pm reopen ok"
