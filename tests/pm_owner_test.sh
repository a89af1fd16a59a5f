#!/bin/bash
# usage: pm_owner_test.sh RDMAHASH_BIN WORKDIR SCHEME   (SCHEME: continuity, level or hopscotch; issue 26)
# Who may write a --pm-path file:
#  * only a file this run created is formatted: an existing file that is not a valid image — an
#    image whose first 128 bytes were zeroed, a data file starting with 128 zero bytes, a file of
#    zeros (also when a run would be killed loading it) — is refused by bench and serve with exit 2,
#    a message naming the file, and left byte for byte as it was;
#  * one owner at a time: while `serve` maps an image, a second serve and a local bench on it are
#    refused (exit 2, the file and the holder's pid named); once it stops, the image opens again
#    (and serve's messages say "rdmahash serve");
#  * another --records of the same geometry is refused (the image records its data set); level: a
#    corrupt header field is reported as a corrupt header of the file, not as a bad option.
set -u
bin=$1 dir=$2 scheme=$3
rm -rf "$dir"; mkdir -p "$dir"
serve_pid=
trap '[ -n "$serve_pid" ] && kill -9 $serve_pid 2>/dev/null' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.err "$dir"/*.out; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done; exit 1; }
O="--scheme $scheme --memory-nodes 1 --records 20000 --load-factor 0.5 --value-bytes 16 --no-progress"
# refused FILE REGEX CMD...: CMD exits 2, its stderr matches REGEX and names FILE, FILE is unchanged.
refused() {
  local f=$1 msg=$2; shift 2
  local before; before=$(sha256sum < "$f")
  timeout 60 "$@" > "$dir/refused.out" 2> "$dir/refused.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "exit $rc (expected 2, refused) for $f: $*"
  grep -Eq "$msg" "$dir/refused.err" || fail "message does not match '$msg': $(cat "$dir/refused.err")"
  grep -Fq "$f" "$dir/refused.err" || fail "message does not name $f: $(cat "$dir/refused.err")"
  [ "$(sha256sum < "$f")" = "$before" ] || fail "$f was changed by a refused run: $*"
}
cd "$dir" || exit 1

# 1. An image whose first 128 bytes were zeroed (the records written into it are still there).
"$bin" bench --quiet $O --pm-path t.img --workload get --ops 10 || fail "creating t.img"
"$bin" bench --quiet $O --pm-path t.img --workload kv-mix --keys 40000 --ops 1000 --keep-table 2>/dev/null || fail "kv-mix on t.img"
cp t.img good.img
dd if=/dev/zero of=t.img bs=128 count=1 conv=notrunc 2>/dev/null
refused t.img "header is all zero" "$bin" bench --quiet $O --pm-path t.img --workload get --ops 10
refused t.img "header is all zero" "$bin" serve $O --pm-path t.img --listen 127.0.0.1:0

# 2. Any file that starts with 128 zero bytes.
{ head -c128 /dev/zero; yes data | head -c3000000; } > f.bin
refused f.bin "header is all zero" "$bin" bench --quiet $O --pm-path f.bin --workload get --ops 10
refused f.bin "header is all zero" "$bin" serve $O --pm-path f.bin --listen 127.0.0.1:0

# 3. A file of zeros of the table's size: refused before any load (a run that would be killed
#    loading it never starts, so no later run can take a half-loaded table from it).
cp good.img sized.img
head -c "$(stat -c %s good.img)" /dev/zero > z.img
refused z.img "header is all zero" env RDMAHASH_TEST_DIE_LOADING=11493 "$bin" bench --quiet $O --pm-path z.img --workload get --ops 10
refused z.img "header is all zero" "$bin" bench --quiet $O --pm-path z.img --workload get --ops 10

# 4. One owner at a time.
cp good.img dup.img
"$bin" serve $O --pm-path dup.img --listen 127.0.0.1:0 > serve.out 2> serve.err &
serve_pid=$!
for _ in $(seq 600); do grep -q listening serve.out 2>/dev/null && break; kill -0 $serve_pid 2>/dev/null || break; sleep 0.1; done
grep -q listening serve.out || fail "the first serve did not start"
grep -q "^rdmahash serve: recovered [0-9]* records from dup.img" serve.err || fail "serve's recovery message: $(cat serve.err)"
grep -q "rdmahash bench" serve.err && fail "serve's messages say rdmahash bench: $(cat serve.err)"
refused dup.img "in use by another process \(pid $serve_pid\b" "$bin" serve $O --pm-path dup.img --listen 127.0.0.1:0
refused dup.img "in use by another process \(pid $serve_pid\b" "$bin" bench --quiet --fabric local $O --pm-path dup.img \
  --workload kv-mix --keys 1000 --ops 2000
kill -TERM $serve_pid; wait $serve_pid; rc=$?; serve_pid=
[ $rc -eq 0 ] || fail "serve exited $rc on SIGTERM"
"$bin" bench --quiet $O --pm-path dup.img --workload get --ops 10 2> again.err || fail "the image did not open after its owner stopped"
grep -q "recovered" again.err || fail "not recovered after the owner stopped: $(cat again.err)"

if [ "$scheme" = continuity ]; then
  # 5. Same geometry, another data set: --records 20000 on an image loaded with 19999.
  "$bin" bench --quiet ${O/20000/19999} --pm-path r.img --workload get --ops 10 || fail "creating r.img"
  refused r.img "continuity image was loaded with 19999 records, requested 20000" \
    "$bin" bench --quiet $O --pm-path r.img --workload get --ops 10
fi
if [ "$scheme" = level ]; then
  # 5. Same geometry, another data set: --records 20001 on an image loaded with 20000.
  refused good.img "level image was loaded with 20000 records, requested 20001" \
    "$bin" bench --quiet ${O/20000/20001} --pm-path good.img --workload get --ops 10
  # 6. A corrupt header field (bytes 24..27, max resizes) is a corrupt header, found by its checksum.
  cp good.img hdr.img
  printf '\376' | dd of=hdr.img bs=1 seek=24 conv=notrunc 2>/dev/null
  refused hdr.img "hdr.img: level image header is corrupt \(checksum mismatch\)" \
    "$bin" bench --quiet $O --pm-path hdr.img --workload get --ops 10
fi
echo "pm owner ok ($scheme)"
