// rdmahash/linear.h — distributed linear probing over one-sided READ/WRITE/CAS.
//
// Memory layout
// -------------
// The table is split into one shard per memory node. A 64-bit hash of the key picks the shard
// (`node = ⌊h·K/2^64⌋`) and, from a second mix, the home slot in that shard (`⌊h'·S/2^64⌋`).
// A shard's region is a 64-byte header (ShardHeader) followed by `S` home slots and `T` tail
// (overflow) slots. Probe sequences run forward from the home slot and never wrap: a probe that
// would run past the tail is `full` for inserts and a miss for lookups. So every probe is one
// contiguous READ (seed 001 needed split reads at the wrap point; we do not). That is the default,
// linear chunk order; a table with quadratic chunks (ChunkOrder below) wraps modulo the shard's
// home + tail slots instead.
//
// Slot formats
//  * kSet (seed 001): one 64-bit word. 0 = empty, 1 = tombstone, (1<<63)|key = key present.
//    Keys are 63-bit. Insert = CAS 0 → (1<<63)|key. Erase = CAS (1<<63)|key → 1.
//  * kInline (seed 000 inline records): [ctrl:8][key:8, only for 8-byte keys][value, padded to
//    8][check:8, unless 4-byte keys with no value]. ctrl =
//        bit 63 OCC (never cleared) | bit 62 LOCK | bit 61 DEL (tombstone) |
//        bits 32..60 version (29 bits, wraps) | bits 0..31 the key (4-byte keys) or a 32-bit
//        fingerprint of the key (8-byte keys).
//    check = hash(version, key, value). Keys: 4-byte (< 2^32) or 8-byte (any value).
//
// Publication protocol (inline records): a writer owns a slot only while LOCK is set.
//   insert: CAS ctrl 0 → OCC|LOCK|v0|kbits ; WRITE key,value,check(v1) + fence + WRITE ctrl OCC|v1|kbits
//   update: CAS ctrl OCC|v|kbits → OCC|LOCK|v|kbits ; WRITE value,check(v+1) + fence + WRITE ctrl OCC|v+1|kbits
//   erase:  CAS ctrl OCC|v|kbits → OCC|DEL|v+1|kbits      (one atomic step; slot never reused)
// The payload WRITE and the unlocking ctrl WRITE go in one batch, the ctrl WRITE fenced after the
// payload (Request::fence, fabric.h): one round trip, and the unlocking ctrl is never visible
// before the payload. So an insert into the first chunk costs 3 round trips (READ, CAS, WRITEs)
// and 4 requests + the chunk READs; an update the lookup + 2. Why the fence is enough:
//  * Engine and transports keep the batch order (Engine::withdraw erases in place). LocalFabric
//    runs a batch in order. UCX: the fenced WRITE is posted after ucp_worker_fence, which orders
//    every operation posted on this worker before it ahead of every one after it at the same
//    target — by construction on each transport UCX may pick: shared memory (mm/posix/sysv,
//    xpmem, CMA) performs a PUT inside the posting call, in posting order; TCP carries one
//    endpoint's PUTs as active messages over an ordered stream, applied by the target in order;
//    RC/DC (InfiniBand, RoCE) execute RDMA WRITEs of a QP in order, and UCX sets the verbs fence
//    where an earlier READ/atomic must complete first. Direct access (ucx_fabric.cpp) performs
//    the WRITEs as stores in order, with a full thread fence before the fenced one; and if an
//    earlier request of the batch to that node went through UCX, the fenced one does too.
//    The heap's publishing CAS fenced after its record's WRITE (below) rests on the same
//    argument for an atomic: ucp_worker_fence orders the operations of an endpoint posted before
//    it ahead of those after it, atomics included (ucp.h); shared memory performs the CAS with
//    the CPU in the posting call, after the PUT's copy; TCP emulates both as active messages on
//    the endpoint's one ordered stream (or one coalesced message performed in posting order); RC
//    executes a QP's WRITE and a later atomic in order. Caveat for RDMA clusters: the UCX 1.13 we
//    build against implements the worker fence as a weak per-interface fence, which need not order
//    operations UCX put on different lanes (multi-rail RMA, or atomics on another lane than PUTs);
//    later UCX adds a strong fence for that case (UCX_WORKER_STRONG_FENCE, openucx/ucx#8596). This
//    applies to the inline publish fence above as much as to the heap's; on one lane per endpoint
//    (this machine's transports, single-rail RC) the order holds.
//  * The unlock may be a plain WRITE (not a CAS): while LOCK is set nobody else changes ctrl —
//    every other CAS on it expects 0 (a claim) or an unlocked ctrl (update's lock, erase) and
//    fails — so the holder's store overwrites nothing. The one exception is the server's lock
//    recovery (LinearLockSweeper), which by its stated assumption only touches locks whose holder
//    is dead. (A failed CAS writes nothing on any transport: UCX returns the old value.)
// Speculative claim (ProbeConfig::speculative_claim, default auto; every format that inserts
// online; heap records below): find_or_put posts the READ of chunk 0 and the claim CAS
// on the key's home slot (expected 0) in ONE batch. Winning that CAS proves the key absent at that
// instant: a key lies at or after its home and every slot from its home up to it is non-empty
// (slots never return to empty, and an insert claims only the first empty slot of its probe
// sequence), so a present key has a non-empty home. The winner publishes as above; the home slot
// is the first slot of the probe sequence, so the claim is the one seed 001 would have made. A
// lost CAS changes nothing: the insert goes on from chunk 0's READ as seed 001 does, home slot
// included (the READ may predate the winner's claim: then the claim CAS there fails and re-checks
// the winner as any lost claim does), except that chunk 1 is READ only once chunk 0 holds neither
// the key nor a free slot (from there on chunk i+1 overlaps chunk i as before). The CAS and the
// READ may share a batch (unordered) because the claim does not depend on the READ and the READ
// is used only when the claim was lost. Cost against seed 001's order, d = the first free slot's
// distance from home: d = 0: 1 round trip and 1 request fewer (2 round trips for an inline record,
// 1 for a one-word slot, whose CAS is its publication); 0 < d < C: the same round trips and
// requests (chunk 1's READ becomes the failed CAS); chunk 0 full: 1 round trip and 1 CAS more. A
// find of a present key: the same round trips, 1 failed CAS instead of chunk 1's READ.
// A reader accepts a slot only if its ctrl is unlocked and `check` matches the
// version in ctrl and the key/value it read; otherwise it re-reads that slot (a READ of several
// words may be torn: the checksum, not the read order, makes a torn read detectable, as in Pilaf).
// The linearisation point of a read is the moment it read the unlocked ctrl.
// Multi-get (get_batch, inline tables in linear order): the lookups of many keys, round by round,
// each round one batch with the next window of every key not yet answered. Each key's windows are
// exactly the READs its lookup would post, scanned by the same rules, so each key's answer,
// linearisation point, requests and round trips are its lookup's. A key that meets its slot locked
// or torn leaves the rounds for the lookup itself (the window again, then read_stable: one READ and
// round trip more). A window whose READ failed fails only its key. On a transport that maps every
// shard's region (Transport::direct_region: UCX over shared memory, LocalFabric) a round copies
// its windows from the mapped slots itself, with the loads a direct READ makes, instead of
// posting Requests: the same windows, counted as the READs and batch they replace, scanned by the
// same loop (~5 ns less a get). Only when every shard's slots lie inside its region; else READs.
//
// Multi-find-or-put (find_or_put_batch, inline tables in linear order, records of more than one
// word): the inserts of many keys, round by round, each round one batch with the next requests of
// every key in flight, decided in a plain loop instead of a coroutine per key. A key's requests are
// insert's, in insert's order: chunk 0's READ (with the speculative home CAS beside it when
// speculating), a CAS 0 -> claim on the first empty slot the scan finds, the re-check of a lost
// CAS's winner, chunk i+1 READ in the round of chunk i's READ or of a claim CAS in chunk i
// (insert's overlap; not beside the speculative claim), the payload WRITE and the ctrl WRITE fenced
// after it. So its round trips are insert's; it READs less, since insert also posts chunk i+2 when
// it scans chunk i+1 (a READ a batch never waits for when chunk i+1 answers). A failed READ of a
// chunk read ahead is posted again if the scan reaches it (insert would fail the key then).
// Anything insert decides by reading a slot again (a slot naming the key locked or torn, a lost CAS
// whose winner names the key, an unpublished 4-byte claim) and a key past M chunks leave the rounds
// before claiming anything, for insert itself (or, past M, its closing lookup), so their answers
// are insert's. insert starts again from chunk 0, so such a key's stats count its chunks twice
// (rare: a torn or locked slot of the key, a key repeated in flight). Those coroutines may wait
// for a lock (read_stable), so they run only once no key of the batch holds a claim: while any wait, rounds
// carry only the publishes of claimed keys (else a repeated key would wait on this client's own
// unpublished claim). A key whose request failed fails alone with FabricError, as its task would.
// A callback (key_of, value_of, done) that throws does not abandon the keys in flight, whose
// claims would stay LOCKed: no key starts after it, the others run to their outcome and are
// reported, then the first exception is rethrown. A call from its own `done` is refused with
// std::logic_error (schemes/batch_guard.h), which reaches the caller the same way.
// A client that dies mid-batch leaves each key's slot as a dead insert would (at most one claim
// per key in flight, each recovered as any other: see below).
//
// Invariants
//  * A slot goes empty → claimed(locked) → published → (updated)* → tombstone, never back.
//  * A key occupies at most one non-tombstone slot of its shard: an insert claims only the *first*
//    empty slot of its probe sequence it can CAS, and after a failed CAS re-checks the winner's key,
//    so two clients racing to insert one key insert it once (seed 001 §3.3).
//  * Lookups stop at the first empty slot; tombstones are skipped, never reused.
//  * find_or_put claims a slot only within M chunks of its home; when those hold neither the key nor
//    an empty slot it scans on as a lookup does (to the first empty slot) and answers kFound if the
//    key is there — so clients configured with different M agree on which keys are present — and
//    kFull only for an absent key.
//
// Out-of-band (heap) records: kHeap and kHeap4 (seed 000 §4.1, Figs. 4 and 5)
// -----------------------------------------------------------------------------
// A heap shard is [ShardHeader 64 B][T_all slots of 8 B][HeapHeader 64 B][heap: H records].
// A heap record has exactly the format of an inline slot above ([ctrl][key][value][check], ctrl =
// OCC | version 1 | kbits) so a reader can verify it on its own: it accepts a record only if ctrl
// is OCC and neither LOCK nor DEL, ctrl's low 32 bits are the key's kbits, the 8-byte key (if any)
// is the key, and `check` matches. Record i lives at heap_offset() + 64 + i·record_bytes().
// Records are WRITE-ONCE: once a slot may point to a record, no one ever writes it again (updates
// are out of place), so a reader never sees a torn record and indices are never reused (no ABA).
//
//  * kHeap (one record per slot; insertable with CAS). Slot word:
//        0 = empty | bit 63 OCC | bit 62 DEL (tombstone) | bits 46..61 16-bit key fingerprint |
//        bits 0..45 record index + 1 (never 0).
//    Seed 000 used 5-byte read-only slots (1-byte signature, 4-byte offset); ours is one 8-byte
//    word so that claiming, updating and erasing are single CASes, and a 16-bit fingerprint makes a
//    wasted heap READ per probed slot 1/65536 likely instead of 1/256.
//    Heap allocation: HeapHeader.next is a per-shard bump counter advanced with one-sided FAA (no
//    memory-node CPU). A client takes blocks of kHeapBlock records and keeps the unused ones as
//    *private* records (never referenced by a slot); an FAA that returns next >= capacity means
//    the heap is exhausted: the insert/update reports kFull and changes nothing.
//    insert (find_or_put / put of a new key):
//        WRITE the record into a private index i (posted in the same batch as the first chunk
//        READ(s) — the record is private, so writing it speculatively is harmless; if the key turns
//        out to be present, i stays private and is reused by the next insert) ;
//        scan chunks as for inline records (fingerprint match → READ the record to compare keys) ;
//        at the first empty slot: CAS slot 0 → OCC|fp|i+1, FENCED after the record's WRITE. If the
//        WRITE went in an earlier batch it has completed: it is awaited first (no round trip), so
//        a failed WRITE is never published. If i was only taken now (an FAA at the free slot, the
//        client's spare records spent), the WRITE and the fenced CAS share one batch.
//        CAS lost: re-check the winner (its record, if the fingerprints match) exactly like inline;
//        my key → kFound (i stays private), else continue scanning.
//        Speculative claim (as above): the record's WRITE, the home slot's CAS 0 → OCC|fp|i+1
//        fenced after it, and chunk 0's READ go in ONE batch (a client with no spare record takes
//        a heap block first, an FAA per kHeapBlock inserts — also when the key turns out present,
//        whose record stays private for the next insert). Won: the key was absent and the CAS
//        published a complete record: 1 round trip with a spare record (seed 001's order: 2). Lost: i stays private and
//        the scan goes on from chunk 0, home included, exactly as for inline records.
//    update: WRITE a new record into a private index j (same batch as the first slot READ), find
//        the key's slot word w (reading its record to compare keys), CAS w → OCC|fp|j+1 fenced after
//        the WRITE (awaited first if it went in an earlier batch, as for insert) ; CAS lost
//        → j stays private, retry. The superseded record is garbage (never reclaimed: there are no
//        one-sided means to know when readers are done with it).
//    erase: find w as above, CAS w → w|DEL. The record stays (garbage).
//    Leaks, all bounded and never dangerous: superseded and erased records, the private
//    records a client still holds when it is destroyed (< kHeapBlock per client per node), and the
//    record of an operation that failed (FabricError) after writing it.
//    lookup (get / get_all, Algorithm 2): READ R slots; for every live slot whose fingerprint
//        matches, READ its record. get_all posts those record READs in the same batch as the READ
//        of the next R slots (if no empty slot was seen yet) and finishes when BOTH an empty slot
//        has been seen and every record READ it posted has been checked. A get finishes at the
//        first verified match, so it overlaps the next window's READ with record READs only when
//        the window had no fingerprint match (else the prefetch is almost always wasted; a match
//        that fails verification then costs one extra round trip). A record that fails
//        verification (fingerprint collision) is skipped. A present key costs 2 round trips when
//        its slot is within the first R slots read (or the first window is free of other matches
//        up to it), i.e. slots then record; a miss with no fingerprint match costs the slot READs.
//  * kHeap4 (Fig. 5, bulk-loaded, read-only). Slot word = a bucket of 4 ways:
//        bits 32+8w..39+8w = 8-bit fingerprint (1..255) of way w, 0 = free way ;
//        bits 0..31 = group index + 1 of the bucket's 4 contiguous heap records (0 = empty bucket).
//    Our reading of seed 000 §4.1 / Fig. 5 for linear probing: the table is bucketised linear
//    probing over 4-way buckets. The loader puts a record into the first bucket at or after its
//    home bucket that has a free way, in way order; the bucket's group of 4 records is allocated
//    when the bucket gets its first record, so the (up to) 4 records of one slot are contiguous in
//    the heap and a key's record is record 4·group + way. A probe therefore ends at the first
//    bucket with a free way (an insert would have stopped there) — not only at an empty bucket.
//    Lookups read R buckets, then every record whose way fingerprint matches (as kHeap). Online
//    find_or_put/put/update/erase throw InvalidArgument ("heap4 tables are bulk-loaded").
//    The load factor of a heap4 table is records / (4 · home buckets).
//
// Invariants (heap)
//  * A slot word goes empty → live(i) → live(j)* → tombstone; an index is published at most once.
//  * A slot never points to a record that is not completely written: the CAS that publishes an
//    index is fenced after the WRITE of that record (fabric.h: performed after it at the memory
//    node, on every transport, as the inline publish fence above), and posted only after that
//    WRITE completed when the WRITE went in an earlier batch; a fenced request behind a failed
//    one of its batch is not performed.
//  * A key occupies at most one live slot of its shard (same first-empty-slot CAS argument as
//    inline; the winner's key is read from its record when fingerprints match).
//
// Safety mechanisms (each one is removed by a mutant of tests/mutants/linear.json, which the tests
// must kill: scripts/mutants.sh, docs/testing.md)
//  * check word: readers accept an inline record only if `check` matches (linear-inline-consistent-true);
//    heap records: the record's key (linear-heap-record-key-check)
//  * lock bit: update CASes LOCK on before rewriting (linear-update-no-lock); unlock: update's and
//    insert's ctrl WRITE clears it (linear-update-unlock-keeps-lock, linear-insert-publish-keeps-lock)
//  * publish fence: the unlocking ctrl WRITE is fenced after the payload WRITE of its batch
//    (linear-publish-no-fence; the forced interleavings run a batch reversed except across fences)
//  * version bump: update publishes v+1. No mutant: keeping v is equivalent for readers, because the
//    check word covers key and whole value, so no mix of two writes passes it (docs/testing.md)
//  * CAS re-check: after a lost claim, insert re-checks the winner's key
//    (linear-insert-no-recheck-after-lost-cas, linear-heap-insert-no-recheck-after-lost-cas); a
//    4-byte key's unpublished claim is waited for, not taken for the key
//    (linear-unpublished-claim-taken-for-key)
//  * publication order (heap): the slot CAS is fenced after the record's WRITE
//    (linear-heap-publish-before-record-written, linear-heap-update-cas-not-fenced), and a WRITE
//    of an earlier batch is awaited before the CAS is posted (linear-heap-earlier-write-not-awaited,
//    linear-heap-update-earlier-write-not-awaited)
//  * table boundary: chunks and lookup READs end at the last tail slot
//    (linear-insert-chunk-skips-last-slot, linear-locate-reads-past-the-tail); probe bound M
//    (linear-insert-probe-bound); heap capacity (linear-heap-take-record-capacity)
//  * chunk overlap: chunk i+1 lands in the other half of a double buffer
//    (linear-insert-chunk-overlap-one-buffer)
//  * multi-find-or-put (find_or_put_batch): its publish fence, re-check of a lost CAS, unlock,
//    speculative win, chunk end, probe bound M, and no wait on its own claim
//    (linear-batch-publish-no-fence, -no-recheck-after-lost-cas, -publish-keeps-lock,
//    -speculative-cas-lost-taken-as-won, -chunk-past-tail, -probe-bound, -resume-while-holding,
//    -chunk-overlap-one-buffer, -no-read-ahead, -publish-status-unchecked, -spec-cas-status-unchecked);
//    a throwing callback strands no claim (linear-batch-callback-throw-escapes); a batch's call
//    from its own done is refused (batch-reentry-not-refused)
//  * quadratic chunks (ChunkOrder below; tests/mutants/linear_quad.json): one lookup, get_all and
//    insert walk either order; the lookup (get, get_visit, locate) and get_all walk the table's
//    quadratic sequence (linear-quad-get-walks-linear-order, linear-quad-get-all-walks-linear-order),
//    stepping to quad_next, not the adjacent chunk (linear-quad-locate-walks-linear-order), as many
//    chunks as an insert may claim in (linear-quad-lookup-stops-early), a chunk past the last slot
//    goes on at slot 0 (linear-quad-no-wrap), the bulk loader follows the same sequence
//    (linear-quad-loader-linear-order)
//  * speculative claim: only the home slot is claimed before a scan (linear-spec-claim-not-home,
//    linear-heap-spec-claim-not-home), and a lost speculative claim still scans the home slot for
//    the key (linear-spec-lost-skips-home, linear-heap-spec-lost-skips-home)
//  Not mutated, because removing them is equivalent (docs/testing.md): readers' LOCK test (a locked
//  record's check never matches its ctrl's version), the LOCK bit of an insert's claim (same reason).
//
// What another client sees if a client dies at any instruction (tests/serve_kill_test.sh kills
// clients of a served table at random points and checks the survivors' histories)
//  * kSet: every write is one CAS (claim 0 → key, erase key → tombstone): nothing is left half-done.
//  * kHeap: a record written but not yet CASed into a slot is invisible and leaked (as is the rest
//    of the dead client's heap block, < kHeapBlock records); claims, updates and erases are single
//    CASes. The operation in flight took effect or did not, as its CAS says.
//  * kInline: a client dead between its LOCK CAS and its unlocking CAS leaves the slot locked:
//    readers and writers of that key re-read (until their retry budget, a time, is spent: then
//    they fail with RetryBudgetExceeded, see ProbeConfig::retry_budget) — find_or_put of the key
//    too: an unpublished claim (locked, version 0) is not taken for the key's presence, even where
//    the ctrl word holds the whole (4-byte) key, since its recovery may roll it back —
//    until the lock is recovered (by a pass of the server, which learns of the
//    death from the closed connection): `rdmahash serve` runs LinearLockSweeper (below) a grace
//    period after a client's connection closes without goodbye, which rolls each orphaned lock
//    forward or back (tests/serve_kill_test.sh with clients that die holding a lock).
//
// A failed request (fabric.h, "Per-request outcome") fails only its own operation: an insert or
// update whose lock CAS landed goes on to its payload WRITE and unlocking CAS even if another
// operation's request in the same batch failed. What a live client's failed request leaves:
//  * the lock CAS itself failed: the slot's state is unknown to the client, which reports
//    FabricError; if the CAS did land (a completion lost), the slot stays locked as if it had died;
//  * the payload WRITE or the unlocking CAS failed (kInline insert/update): the operation reports
//    FabricError and the slot stays locked (tests/fault_test.cpp,
//    LinearInlineFailedUnlockReportsFailureAndLeavesTheKeyLocked) until LinearLockSweeper rolls
//    it forward or back (served tables) — the same state as a client that died there;
//  * any other request (READs, single-CAS writes of kSet/kHeap, erase's tombstone CAS): the
//    operation reports FabricError and the table is as the completed requests left it.
//
// Thread safety: LinearClient is used by one Engine (one thread); any number of clients on any
// number of threads or processes may operate on one table concurrently.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <unordered_map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/table.h"

namespace rdmahash {

enum class SlotFormat : uint8_t { kSet = 0, kInline = 1, kHeap = 2, kHeap4 = 3 };
const char* to_string(SlotFormat f);

// The order in which a key's probe sequence visits chunks of C slots (issue 28 item 4; seed 003
// "Hiding latency" argues for linear chunks against quadratic probing between chunks).
//  * kLinear: chunk i is slots [h + C·i, h + C·i + C) — the contiguous probe above: it never
//    wraps, and C is the client's (ProbeConfig::chunk; any client may read any chunk size).
//  * kQuadratic: chunk i starts at h + C·i(i+1)/2 (triangular offsets: 0, C, 3C, 6C, ...), taken
//    modulo the shard's slot count N = home + tail slots (the tail is just more slots of the ring;
//    a chunk that runs past slot N-1 goes on at slot 0 and is READ as two pieces in one batch,
//    the same round trip). The sequence depends on C, so C is the table's (LinearConfig::chunk)
//    and every client's find_or_put chunk must equal it. A sequence has at most ⌈N/C⌉ chunks
//    (LinearConfig::quad_chunks()): inserts claim only within min(M, ⌈N/C⌉) chunks and lookups
//    (get, update, erase, get_all, find_or_put's lookup past M, the engine's get_visit) walk the
//    same chunks in the same order, one READ per chunk (R does not apply: a lookup reads whole
//    chunks), and stop at the first empty slot or after ⌈N/C⌉ chunks. Triangular offsets need not
//    visit every chunk of the ring (they do when C divides N and N/C is a power of two), so a
//    quadratic table may answer kFull with empty slots left; every acknowledged key is still found,
//    because lookups walk every chunk an insert may claim in. The bulk loader places records along
//    the same sequence. Set and inline slots only (heap tables throw InvalidArgument), and no read
//    sizer (the read-size model and cluster hints assume a contiguous probe).
enum class ChunkOrder : uint8_t { kLinear = 0, kQuadratic = 1 };
const char* to_string(ChunkOrder o);
std::optional<ChunkOrder> parse_chunk_order(std::string_view name);  // "linear", "quadratic"

// Bounds of a linear shard: home and tail slots per memory node, and the bytes of its region
// (slots and heap); validate() refuses a config beyond them (sizes are computed with checked
// arithmetic, so a huge --tail-slots cannot wrap the region size).
constexpr uint64_t kMaxHomeSlots = uint64_t{1} << 36;
constexpr uint64_t kMaxTailSlots = uint64_t{1} << 36;
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 44;

struct LinearConfig {
  SlotFormat format = SlotFormat::kSet;
  uint32_t memory_nodes = 1;
  uint64_t home_slots = 1024;  // S, per memory node
  uint64_t tail_slots = 0;     // T, per memory node; 0 picks max(4096, S/32)
  uint32_t key_bytes = 8;      // kInline/kHeap/kHeap4: 4 or 8; kSet: 8 (keys < 2^63)
  uint32_t value_bytes = 0;    // kInline: 0..120; kHeap/kHeap4: 0..4096; kSet: 0
  uint64_t hash_seed = 0x5eed5eed12345678ULL;
  // kHeap/kHeap4: records in each node's heap; 0 picks heap4: 4 per slot (every bucket's group),
  // heap: total_slots() + total_slots()/4 + 1024 (room for every slot, out-of-place updates and
  // the private blocks clients hold).
  uint64_t heap_records = 0;
  // The order of a key's chunks (ChunkOrder above) and, for kQuadratic, their size C: a property of
  // the table, so that every client walks the same sequence (a quadratic client's
  // ProbeConfig::chunk must be this C). Ignored for kLinear.
  ChunkOrder chunk_order = ChunkOrder::kLinear;
  uint32_t chunk = 8;

  // Home slots for `records` at `load_factor` (records / all home slots), split over the nodes.
  static LinearConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes);

  void validate() const;  // throws InvalidArgument with a message naming the bad field
  uint64_t tail() const { return tail_slots ? tail_slots : std::max<uint64_t>(4096, home_slots / 32); }
  uint64_t total_slots() const { return home_slots + tail(); }
  uint32_t slot_bytes() const;     // 8 for kSet/kHeap/kHeap4
  uint64_t region_bytes() const;   // header + all slots (+ heap header + heap); throws beyond kMaxRegionBytes
  bool heap() const { return format == SlotFormat::kHeap || format == SlotFormat::kHeap4; }
  uint32_t record_bytes() const;   // bytes of one record (an inline slot, or a heap record)
  uint64_t heap_capacity() const;  // records per node's heap (0 unless heap())
  uint64_t heap_offset() const;    // byte offset of the HeapHeader in a shard region
  bool quadratic() const { return chunk_order == ChunkOrder::kQuadratic; }
  // kQuadratic: the chunks of a probe sequence, ⌈N/C⌉ (N = total_slots()).
  uint64_t quad_chunks() const { return (total_slots() + chunk - 1) / chunk; }
  // kQuadratic: the first slot of chunk i+1, given chunk i's first slot `start` (chunk 0 starts at
  // the home slot): start + C·(i+1) mod N, so chunk i starts at home + C·i(i+1)/2 mod N.
  uint64_t quad_next(uint64_t start, uint64_t i) const {
    return (start + (static_cast<uint64_t>(chunk) * (i + 1)) % total_slots()) % total_slots();
  }
};

// Chooses how many slots each lookup READ fetches (seed 000 §3–4). One per client: not
// thread-safe. Without one, lookups read the fixed `ProbeConfig::read_size`.
class ReadSizer {
 public:
  virtual ~ReadSizer() = default;
  // Slots to read starting at `slot` of shard `node` (>= 1).
  virtual uint32_t size_at(uint32_t node, uint64_t slot) = 0;
  // True if the sizer wants to see the clusters lookups discover (then `observe` is called).
  virtual bool wants_clusters() const { return false; }
  // A run of `length` occupied slots from `start` that a lookup saw end at an empty slot (it may
  // begin before `start` when `start` was the lookup's home slot).
  virtual void observe(uint32_t node, uint64_t start, uint64_t length) { (void)node, (void)start, (void)length; }
};

// Cluster hints (seed 000 §3.4, §4.4): remembers the `capacity` largest clusters this client has
// seen. A read that starts inside a known cluster reads to its end (plus the empty slot after it);
// a read with a known cluster ahead takes the model's Eq. 10 read size for that cluster; otherwise
// the cluster-oblivious model size `default_size`.
class ClusterReadSizer final : public ReadSizer {
 public:
  // `size_with_cluster(x, L)`: the model's read size when a cluster of L slots starts x slots ahead.
  ClusterReadSizer(uint32_t default_size, size_t capacity,
                   std::function<uint32_t(uint64_t offset, uint64_t length)> size_with_cluster,
                   uint32_t max_size = 4096);
  uint32_t size_at(uint32_t node, uint64_t slot) override;
  bool wants_clusters() const override { return true; }
  void observe(uint32_t node, uint64_t start, uint64_t length) override;
  size_t tracked() const { return clusters_.size(); }

 private:
  using Key = std::pair<uint32_t, uint64_t>;  // (node, start)
  uint32_t default_size_;
  size_t capacity_;
  std::function<uint32_t(uint64_t, uint64_t)> size_with_cluster_;
  uint32_t max_size_;
  std::map<Key, uint64_t> clusters_;           // (node, start) -> length
  std::multimap<uint64_t, Key> by_length_;     // for evicting the smallest
  std::unordered_map<uint64_t, uint32_t> cache_;  // (offset, length) -> read size
};

// Probing parameters: a client-side choice, not part of the table.
enum class SpeculativeClaim : uint8_t { kOff = 0, kOn = 1, kAuto = 2 };
const char* to_string(SpeculativeClaim s);
std::optional<SpeculativeClaim> parse_speculative_claim(std::string_view name);  // "off", "on", "auto"

struct ProbeConfig {
  uint32_t chunk = 8;         // C: slots per find_or_put read (seed 001)
  uint32_t max_chunks = 128;  // M: find_or_put claims slots within M chunks (else kFull if absent)
  uint32_t read_size = 8;     // R: slots per get/update/erase read (seed 000)
  // find_or_put's speculative claim (linear.h, "Speculative claim"): kOn posts the claim CAS on the
  // home slot in chunk 0's batch; kOff is seed 001's order (chunks 0 and 1 READ first, a claim only
  // after a scan); kAuto speculates while this client's recent inserts found their home free at
  // least as often as chunk 0 full (the round trip it saves vs the one it costs).
  SpeculativeClaim speculative_claim = SpeculativeClaim::kAuto;
  std::shared_ptr<ReadSizer> read_sizer;  // optional: chooses R per read (model, cluster hints)
  // Fault injection for the lock-recovery tests (0: off): the process kills itself (SIGKILL) while
  // holding its Nth inline slot lock — before the payload WRITE when N is even, after it when N is
  // odd — so that both repairs (roll back, roll forward) are exercised.
  uint64_t die_holding_lock = 0;
  // How long a lookup keeps re-reading a slot that is locked or torn before it fails with
  // RetryBudgetExceeded (fabric.h). Time, not a count: a live holder that is descheduled must not
  // fail healthy readers; only a dead holder nobody recovers should.
  std::chrono::nanoseconds retry_budget = kDefaultRetryBudget;
  void validate() const;
};

// The first 64 bytes of every shard.
struct ShardHeader {
  uint64_t magic;
  uint32_t format, key_bytes, value_bytes, slot_bytes;
  uint64_t home_slots, total_slots;
  uint64_t records;  // records bulk-loaded into this shard
  uint64_t hash_seed;
  uint32_t node, memory_nodes;
};
static_assert(sizeof(ShardHeader) == 64);
inline constexpr uint64_t kLinearMagic = 0x31524e494c48524dULL;  // "MRHLINR1"

// kHeap/kHeap4: the 64 bytes before the heap records (at LinearConfig::heap_offset()).
struct HeapHeader {
  uint64_t magic;
  uint64_t next;      // records allocated so far (FAA target; may overshoot capacity)
  uint64_t capacity;  // records the heap holds
  uint32_t record_bytes, ways;
  uint64_t reserved[4];
};
static_assert(sizeof(HeapHeader) == 64);
inline constexpr uint64_t kLinearHeapMagic = 0x31504145484c524dULL;  // "MRLHEAP1"
inline constexpr uint32_t kHeapBlock = 16;  // records a client takes per FAA

// A decoded kHeap slot word (memory-node side inspection and tests).
struct HeapSlot {
  bool empty = true, tombstone = false;
  uint16_t fp = 0;
  uint64_t index = 0;  // record index (valid unless empty)
};
HeapSlot decode_heap_slot(uint64_t word);
// The record at `index` of a heap shard if it is published and consistent: (key, value).
std::optional<std::pair<uint64_t, std::vector<std::byte>>> linear_heap_record(const LinearConfig& cfg,
                                                                            std::span<const std::byte> region,
                                                                            uint64_t index);

// Where a key lives. Pure function of the config; shared by clients and loaders.
struct LinearPlacement {
  uint32_t node;
  uint64_t home;   // slot index in the shard
  uint32_t kbits;  // low 32 bits of an inline ctrl word for this key
  uint16_t fp16;   // kHeap slot fingerprint
  uint8_t fp8;     // kHeap4 way fingerprint, 1..255
};
LinearPlacement linear_place(const LinearConfig& cfg, uint64_t key);

// Memory-node side: formats a shard and inserts records with plain stores, before clients start
// (its index of full slots assumes every record in the shard came through insert()).
class LinearShardLoader {
 public:
  LinearShardLoader(const LinearConfig& cfg, uint32_t node, std::span<std::byte> region);
  // Inserts `key` if it belongs to this shard (returns false if it does not). Duplicate keys are
  // stored again (bulk-loaded multimaps). Throws InvalidArgument if the shard's tail overflows.
  bool insert(uint64_t key, std::span<const std::byte> value);
  uint64_t records() const;
  // Slot checks so far (one per slot looked at or union-find step): tests bound the loader's work.
  uint64_t slot_checks() const { return slot_checks_; }

 private:
  bool slot_free(uint64_t s) const;        // slot s can take one more record
  uint64_t first_free(uint64_t home);      // the first such slot at or after home; total_slots() if none
  LinearConfig cfg_;
  uint32_t node_;
  std::span<std::byte> region_;
  // Contiguous probing only, built on the first walk longer than kLongWalk slots: next_[s] == s
  // for a free slot, else a slot after s that may be free (union-find with path halving), so n
  // copies of a hot key load in O(n α(n)), not O(n²). Empty until then (tables without long
  // clusters pay nothing) and for shards of 2^32 − 1 slots or more. Once built it costs 4 bytes
  // per slot (a skewed multimap's load: +17–50 % of the shard) for as long as the loader lives.
  static constexpr uint64_t kLongWalk = 256;
  std::vector<uint32_t> next_;
  mutable uint64_t slot_checks_ = 0;
};

// Memory-node side recovery of inline slot locks left by dead clients (issue 10 item 5), run by
// `rdmahash serve` when a client's connection closes without goodbye.
//   mark():   remembers every LOCKed inline slot of the shards hosted here, with its ctrl.
//   repair(): after a grace period, every marked slot whose ctrl is still the same word is orphaned
//             (a live writer holds a lock for a few round trips; the same locked ctrl, version
//             included, for the whole grace period means its holder is gone) and is repaired with
//             one CAS on the locked ctrl:
//               roll forward — the payload is consistent with version v+1 (the holder's WRITE
//                 landed): publish OCC|v+1|kbits (its insert or update took effect);
//               roll back — the payload is consistent with v (the WRITE never began): unlock to
//                 OCC|v|kbits (an update that did not happen);
//               tombstone — neither (an insert claim without payload, or a WRITE torn by the
//                 death): OCC|DEL|v+1|kbits. For a claim that is an insert that did not happen; for
//                 a torn update it loses the key, which is counted (`torn`) and logged by the server.
// Assumes no live client holds one lock for the whole grace period (a stopped — SIGSTOP — client
// would be mistaken for a dead one) and that the memory node's CPU CAS is atomic with the clients'
// (true for shared memory and TCP, where the node's worker applies them; on RDMA NICs without
// atomics coherent with the CPU it is not — there a lease in the lock word would be needed).
struct LinearLockRepair {
  uint64_t marked = 0;                        // locked slots seen by mark()
  uint64_t forward = 0, back = 0, torn = 0;   // repaired by repair()
};
class LinearLockSweeper {
 public:
  LinearLockSweeper(Fabric& fabric, const LinearConfig& cfg);
  void mark();
  LinearLockRepair repair();

 private:
  Fabric& fabric_;
  LinearConfig cfg_;
  struct Marked {
    uint32_t node;
    uint64_t slot, ctrl;
  };
  std::vector<Marked> marked_;
};

// Memory-node side inspection: every live (published, not erased) key of a shard, in slot order.
std::vector<uint64_t> linear_scan_keys(const LinearConfig& cfg, std::span<const std::byte> region);

class LinearClient final : public KvClient {
 public:
  // Integer keys only: the byte-key overloads are KvClient's, which reject them.
  using KvClient::find_or_put;
  using KvClient::get;
  using KvClient::update;
  using KvClient::put;
  using KvClient::erase;
  const char* scheme_name() const override { return "linear"; }
  LinearClient(const LinearConfig& cfg, const ProbeConfig& probe, Engine& engine);
  ~LinearClient() override;
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  // One coroutine for the whole lookup, the found value handed over in the read buffer.
  Task<void> get_visit(uint64_t key, uint32_t value_bytes, GetVisitor& v) override;
  // Multi-get (inline tables in linear chunk order; heap and quadratic tables return false): rounds
  // of one batch each, carrying the next window READ of each of up to `depth` keys in flight, new
  // keys joining as others are answered, scanned in a plain loop (no coroutine, no engine queue per
  // key); a key that meets its slot locked or torn continues as get_visit's lookup from that window,
  // that round's such keys in one run_many before the next round. Requests, round trips, bytes and
  // chunks per key are get_visit's (one READ and round trip more after a locked or torn slot). Not
  // reentrant: `done` must not call get_batch on this client (std::logic_error).
  using KvClient::get_batch;
  bool get_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of, uint32_t value_bytes,
                 GetVisitor& v, const std::function<void(const Engine::Completion&)>& done) override;
  // Multi-find-or-put (inline tables in linear chunk order, records larger than one word; others,
  // and a client with ProbeConfig::die_holding_lock, return false): see "Multi-find-or-put" above.
  bool find_or_put_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of,
                         const std::function<void(uint64_t, uint64_t, std::span<std::byte>)>& value_of,
                         const std::function<void(const Engine::Completion&, const OpResult&)>& done) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  // Multimap lookup (seed 000): scans from the home slot to the first empty slot and returns every
  // record with `key` (bulk-loaded tables may hold a key many times). `matches` counts them; their
  // values are appended to `values_out` when it is given.
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;
  // Reads and validates a shard's header (one READ).
  Task<ShardHeader> read_header(uint32_t node);

  const LinearConfig& config() const { return cfg_; }
  // Throws InvalidArgument if `key` cannot be stored in this table.
  void validate_key(uint64_t key) const;
  ProbeConfig& probe() { return probe_; }
  // Whether the next find_or_put claims its home slot speculatively (ProbeConfig::speculative_claim;
  // under kAuto, from this client's recent inserts).
  bool speculating() const;

 private:
  struct Located;
  void check_value(std::span<const std::byte> value, bool required) const;
  RemoteAddr slot_addr(uint32_t node, uint64_t slot) const;
  enum class Probe : uint8_t;
  inline Probe scan(uint64_t key, uint32_t kbits, const std::byte* data, uint64_t n, uint64_t& j) const;
  uint64_t window(uint32_t node, uint64_t slot) const;
  // get, get_visit and locate: the lookup, in one frame; `Sink` says where the answer goes.
  struct CopySink;
  struct VisitSink;
  struct LocateSink;
  // Where a lookup starts when not at the key's home slot: get_batch's keys its first window did
  // not answer (the window's start, the cluster run so far, the windows already read).
  struct LookupFrom {
    bool set = false;
    uint64_t slot = 0, run_start = 0;
    uint32_t chunks = 0;
  };
  template <class Sink>
  Task<typename Sink::Ret> lookup(uint64_t key, Sink sink, LookupFrom from = {});
  // The lookup of update, erase and a find_or_put past its M chunks (inline tables): lookup's
  // requests, answering the key's slot and ctrl word; its READs are added to `reads`.
  Task<Located> locate(uint64_t key, uint32_t& reads);
  Task<bool> read_stable(uint32_t node, uint64_t slot, std::byte* dst);
  uint32_t read_slots(uint32_t node, uint64_t slot) const;
  void observe_clusters(uint32_t node, uint64_t start, const std::byte* slots, uint64_t n, uint64_t& run_start) const;
  // lookup, get_all and insert walk the key's chunks in the table's order (ChunkOrder above).
  Task<OpResult> insert(uint64_t key, std::span<const std::byte> value);
  // Posts the READ of the window [start, start + n) mod N into `dst` (two READs in one batch when
  // it runs past the last slot: quadratic chunks only, linear windows end there).
  std::pair<Pending, std::optional<Pending>> read_window(uint32_t node, uint64_t start, uint64_t n, std::byte* dst);
  // Out-of-band records (kHeap, kHeap4).
  RemoteAddr record_addr(uint32_t node, uint64_t index) const;
  bool record_matches(const std::byte* rec, uint64_t key, const LinearPlacement& p) const;
  void build_record(uint64_t key, std::span<const std::byte> value, std::byte* rec) const;
  Task<Located> heap_scan(uint64_t key, const LinearPlacement& p, bool all, std::span<std::byte> value_out,
                          std::vector<std::byte>* values_out, OpResult& r);
  Task<std::optional<uint64_t>> take_record(uint32_t node);  // private record index, or none (heap full)
  std::optional<uint64_t> pop_spare(uint32_t node);
  void give_back(uint32_t node, uint64_t index) { spare_[node].push_back(index); }
  Task<bool> heap_is_mine(uint64_t word, uint64_t key, const LinearPlacement& p);
  Task<OpResult> heap_insert(uint64_t key, std::span<const std::byte> value);
  Task<OpResult> heap_update(uint64_t key, std::span<const std::byte> value);
  Task<OpResult> heap_erase(uint64_t key);
  void check_writable() const;

  LinearConfig cfg_;
  ProbeConfig probe_;
  uint64_t locks_taken_ = 0;  // for ProbeConfig::die_holding_lock
  // SpeculativeClaim::kAuto's evidence, over this client's recent inserts (halved every
  // kClaimWindow): how many claimed their home slot, and how many claimed past chunk 0.
  uint32_t claims_ = 0, claims_home_ = 0, claims_past_chunk0_ = 0;
  void note_claim(uint64_t distance);
  uint64_t lock_taken();
  Task<void> publish(RemoteAddr a, const std::byte* rec, uint64_t lock);
  void maybe_die_holding_lock(uint64_t lock, bool payload_written);
  Engine& engine_;
  uint32_t slot_bytes_;
  uint32_t record_bytes_;
  std::vector<std::vector<uint64_t>> spare_;  // per node: private (unpublished) heap records
  // get_batch's buffers, kept between calls (no malloc per batch).
  struct BatchState;
  std::unique_ptr<BatchState> batch_;
  // find_or_put_batch's buffers, kept between calls, and the coroutine of a key that leaves it.
  struct PutBatchState;
  std::unique_ptr<PutBatchState> put_batch_;
  Task<void> put_batch_resume(uint64_t key, std::span<const std::byte> value, bool past_m, OpResult* out);
};

// The error message of a config that does not validate, or empty.
std::string linear_config_error(const LinearConfig& cfg);

}  // namespace rdmahash
