// rdmahash/hopscotch.h — FaRM-KV's hopscotch hash table (Dragojević et al., NSDI'14, §5), in DRAM
// and on persistent memory (P-FaRM-KV, below): one-sided lookups that READ a key's whole
// neighbourhood at once, with FaRM's chained overflow blocks for keys whose neighbourhood is full;
// inserts, updates and erases run on the owner
// memory node's CPU, which is the only writer of its shard (as cuckoo.h).
//
// Placement
// ---------
// A 64-bit hash h of the key picks the shard (`node = ⌊h·K/2^64⌋`) and, from a further mix, the
// key's home slot `home ∈ [0, N)` among the shard's N home slots, and its 32-bit `kbits` (a
// fingerprint kept in the record's ctrl word). Every key lives within its *neighbourhood*, the H
// consecutive slots [home, home + H) (H = `neighborhood`, 8 by default, in [2, 64]). The slot array
// has N + H - 1 slots: the last home slot's neighbourhood ends inside the array, so neighbourhoods
// never wrap and every neighbourhood is one contiguous range of memory.
//
// Overflow chains (FaRM §5: "chained overflow blocks" per bucket). The home slots are cut into
// *groups*, aligned runs of H home slots (group = ⌊home/H⌋, ⌈N/H⌉ groups). Each group has one chain
// head word: 0, or the offset of the first of a linked list of *overflow blocks*, each
// [next:8][B records] (B = `block_records`, 2 by default), taken from the shard's pool. A key lives
// in its neighbourhood or in its group's chain, never both. Why groups of H and not one chain per
// home slot: the keys homed in one group are the ones whose neighbourhoods overlap and fill
// together, so they share blocks (fewer, fuller blocks: measured 1.3 records per 2-record block at
// load 0.9), and the heads cost 8/H bytes per home slot (1 at H=8) instead of 8.
//
// Memory layout of a shard (all offsets 8-byte aligned)
// -----------------------------------------------------
//   [0, 128)                 HopscotchShardHeader; word 48 `records`, word 56 `moves`,
//                            word 64 pool blocks, 72 blocks linked now, 80 records in chains
//   [128, 128 + (N+H-1)·rb)  the slots, each one inline record of rb = `record_bytes()` bytes
//   heads_offset()           ⌈N/H⌉ chain head words
//   pool_offset()            the pool: `overflow_blocks()` blocks of 8 + B·rb bytes
// The pool holds `overflow_percent` (25 by default) percent of N records, rounded up to blocks;
// 0 disables chains. The magic ("HOPSCH2"), the header (block_records, overflow_blocks) and the
// RPC config tag all changed with the chains: a client of the chainless layout is refused.
// A record (slot or chain) has the format of schemes/record.h (shared with linear's inline slots and cuckoo):
//   [ctrl:8][key:8][value, padded to 8][check:8]
//   ctrl = bit 63 OCC | bit 62 LOCK | bits 32..60 version (29 bits, wraps) | bits 0..31 kbits
//   check = hash(salt, version, key, value)
// Only 8-byte keys (key_bytes 8): every record has its check word, so every torn READ of a record
// is detectable.
//
// Lookups: ONE READ of the H-slot neighbourhood, then the group's chain on a miss
// ------------------------------------------------------------------------------
// FaRM's neighbourhoods are bucket-granular (a key lives in its home bucket or the next one, and a
// lookup READs two buckets, usually in one READ since they are adjacent). With slot-granular
// neighbourhoods the equivalent is one READ of the H slots [home, home+H): the same "one round trip,
// one READ" for every present key, the read size is H·rb bytes (8 × 40 = 320 bytes at 16-byte
// values), and there is no second bucket to fetch when the first is full. That is what this table
// does. A hit costs exactly one READ (tests/hopscotch_test.cpp, Hopscotch.HitIsOneReadInOneRoundTrip).
// On a neighbourhood miss the lookup READs the `moves` word and the group's chain head in one round
// trip (both posted before either is awaited), then walks the chain, one READ per block (B·rb + 8
// bytes), stopping at the key.
//
// Write protocol (memory-node CPU only, one mutex per shard; stores are 8-byte atomic releases)
//   insert into a free slot (ctrl v, not OCC): payload with check(v+1); ctrl ← OCC|v+1|kbits.
//   update in place: ctrl ← ctrl|LOCK; payload with check(v+1); ctrl ← OCC|v+1|kbits.
//   erase / clear:   ctrl ← v+1 (not OCC).
//   move y from slot j to free slot f: insert y at f as above (y is now live twice, one value),
//                    then clear j. COPY FIRST, THEN CLEAR: y is present at every instant.
//   chain insert:    into the first free record of the group's chain (as a free slot above); if
//                    none, take a pool block (the free list of unlinked blocks first, else the next
//                    never-used one; none left: kFull), write its record and its next ← the current
//                    head, THEN publish it with one store: head ← block. FILL FIRST, THEN PUBLISH.
//   chain erase:     as an erase; if the block is now empty, unlink it: moves ← odd, the word
//                    pointing at it (head or previous next) ← its next, moves ← even; the block
//                    goes on the free list (it may next serve another group).
// A record's version only grows (also across block reuse), so a torn READ mixing two states of
// one record fails the check.
//
// Inserts (hopscotch displacement, Herlihy, Shavit & Tzafrir 2008): if the key's neighbourhood has a
// free slot, the key goes there. Otherwise the node finds the nearest free slot f ≥ home by linear
// probing (at most `max_probe` slots, within the array), then, while f is outside the key's
// neighbourhood (f - home ≥ H), looks among the H-1 slots before f, from the farthest, for an entry
// y whose own neighbourhood still contains f (f - home(y) < H) and moves y from its slot j to f;
// the free slot is now j < f. Each move keeps every key inside its neighbourhood. When no such y
// exists (or no free slot is found) the insert gives up on the neighbourhood: the moves done so far
// kept every key in its neighbourhood and present, so nothing is lost; the key then goes to its
// group's chain, and kFull only means the pool is exhausted. Chain records never move, and a chained key stays in the
// chain until erased (an erase in the neighbourhood does not pull it back).
// Capacity. Without chains the first kFull of a bulk load came at load 0.48-0.51 for H=8 (0.77 at
// H=16, 0.87 at H=32; `rdmahash bench --records 100000 --value-bytes 16`): one unlucky neighbourhood
// is enough. With them (125 000 home slots, 16-byte values, random keys, the default pool of 25%:
// 15 625 blocks of 2): the bulk load's first kFull comes at records/home slots = 0.90 (H=2), 1.10
// (H=4), 1.19 (H=8), 1.22 (H=16), 1.23 (H=32), 1.24 (H=64), i.e. when the pool is full. Keys in
// chains at H=8 after a bulk load: 0.7% at load 0.8, 2.4% at 0.9, 4.0% at 0.95. Under sustained
// erase+insert churn (2-4·10^6 at a fixed load; the same driver) chained keys accumulate to a
// steady 6.1% (0.8), 11.4%
// (0.9), 14.0% (0.95), needing at most 5 040 / 9 791 / 12 536 linked blocks of 2 (8.1% / 15.7% /
// 20.1% of N as records): the 25% default covers churn at 0.95 with room to spare and costs
// 88 B per 8 home slots (27% of the slot array at 16-byte values). Blocks of 4 need 25.3% at 0.9
// and 168-byte blocks (31% at 0.95): 2 is the cheaper default.
// Around the moves of one insert the node sets the shard's `moves` word odd (before the first copy)
// and even again (after the last clear): a per-shard seqlock around displacements, and around the
// unlink of an empty chain block. An insert that moves nothing leaves `moves` alone.
//
// Why a one-sided reader is never wrong
//  * Hit. The reader accepts a record only if its ctrl is OCC, unlocked, carries the key's kbits,
//    the key word matches, and `check` matches the version in ctrl and the key/value read with it:
//    the bytes are exactly the record state whose ctrl it read, which says the key was present (with
//    that value) when read. During a move both copies hold one value, so either is correct.
//    A chain hit is the same: a consistent record of the key is a live record, wherever its block
//    is now, since a key's records are only ever written into its own group's chain.
//  * Miss. A READ of H slots is not atomic (RDMA orders nothing inside a READ): its slots are read
//    at different instants. Inserts without displacement, updates and erases never move a key and
//    change its presence with one 8-byte store, so only a move can hide a present key (the reader
//    reads y's new slot before the copy and its old slot after the clear). Invariant: *a key present
//    at every instant of [t0, t1] and not found by a READ inside [t0, t1] was moved in that window,
//    and every move lies between an odd and the next even store of `moves`*. So a neighbourhood miss
//    counts only if `moves` had one even value both before the READ (the value this client read in
//    an earlier, completed round trip, cached per shard) and after it (one 8-byte READ of the header
//    once the neighbourhood was scanned).
//  * Miss in the chain. A key present at every instant of the lookup is either in its neighbourhood
//    throughout (covered above) or in ONE chain record throughout: chain records never move, and
//    a key goes between the neighbourhood and the chain only by an erase and an insert, absent in
//    between. Its block was linked before the key became present there (a new block's record is
//    visible only from the head store that links it; a free record of a linked block is published
//    by its ctrl store) and is not unlinked while it holds the key (only empty blocks are). The head
//    READ is posted after the neighbourhood READ completed, so it lies inside the lookup; while no
//    block is unlinked, the chain only grows at the head and a linked block's next never changes,
//    so the walk from the head read reaches every block linked at that instant, the key's among
//    them; and each block READ, posted after the READ that returned its pointer completed, sees the
//    block no older than filled (fill first, then publish: the fabric assumption below). A torn
//    block READ cannot fake an absence either: the next word is immutable while linked and each
//    record carries its check word (a record caught mid-write is read again, below). Unlinks are
//    the one change that can cut a walk short (a reader holding an unlinked block's pointer may
//    follow it into another group's chain, or to its end), so they sit inside `moves` windows, and
//    a chain miss counts only if `moves` read once more after the walk (one more round trip) still
//    equals the "before" value and the value read with the head. A walk longer than the pool (only
//    stale pointers or corruption make one) also does not count. A miss that does not count is read
//    again with the fresh value as its "before". A validated miss linearizes at an instant of the
//    lookup where the key was absent.
//  Assumed of the fabric (as cuckoo.h): the node's stores become visible in program order, and a
//  READ posted after another one completed observes memory no older than that one did.
// Retries (as cuckoo.h). A record caught mid-write (LOCK, or a failed check) is re-read, bounded by
// `retry_budget` (a time: only a dead or stalled node CPU keeps a record unstable that long; then
// RetryBudgetExceeded). A miss overlapping displacements is re-validated up to 16 times; then the
// lookup asks the owner by RPC (write_rpc kGet), which answers under the shard's lock.
// Costs (measured: 125 000 home slots, H=8, 16-byte values; `rdmahash bench --fabric local --scheme
// hopscotch --records 100000 --value-bytes 16 --workload get --load-factor L`, round_trips_per_op in
// its JSON): a hit in the neighbourhood is 1 READ, 1 round trip; a chained key adds the moves+head
// round trip and one per block down to its own (tests: HopscotchChains.ChainedKeyIsFoundOneSided);
// a miss is 2 round trips (3 READs) in a group without a chain, 3 + its blocks in a group with one
// (and on a shard's first miss, one more attempt to learn the "before" value). Gets of loaded keys
// average 1.00 round trips at load 0.5, 1.02 at 0.8 and 1.05 at 0.9 (the bench). With a throwaway
// driver (random keys; HopscotchShard::put/erase, HopscotchClient::get): hits 1.01 / 1.05 after a
// bulk load to 0.8 / 0.9, 1.14 / 1.28 after 2·10^6 erase+inserts (more keys chained; at most 7);
// misses 2.07 / 2.23 after the bulk load, 2.56 / 3.09 after the churn.
//
// What a dead client leaves: nothing. Every write is an RPC the node applies under its shard mutex;
// a client holds no lock, no half-written record and no pool block (blocks are taken and linked,
// or unlinked and freed, by the node within one RPC). A write whose RPC reached the node is applied
// whole (its reply may be dropped), one that did not is not applied. Readers hold nothing.
//
// Persistent memory: P-FaRM-KV (seed 002's third scheme; `--scheme hopscotch --pm-path FILE`)
// ------------------------------------------------------------------------------------------
// Seed 002 converts FaRM-KV to PM "following RECIPE": a bitmap per bucket so that a slot's presence
// is published by one persisted 8-byte store, and a log for the updates that write two places. The
// same shard code serves DRAM and PM: HopscotchShard built on a PersistentRegion (pmem.h) sends
// every store through the region and adds the persists and the redo log below; built on a span
// (DRAM) it makes the same stores and no persist, and never writes the log.
// Layout on PM: the DRAM layout above, plus
//   header word 88 (reserved[0])  a checksum of the geometry words (magic .. hash seed, overflow
//                                 blocks), seeded by the magic: checked on reopen
//   log_offset()                  the redo log, cache-line aligned after the pool, one record:
//                                 [commit:8][kind:8][to:8][from:8][record image: rb bytes]
//                                 commit = 0 (empty) or a checksum of the other words (never 0)
// The presence "bitmap": we kept the per-record ctrl word as the publish word instead of adding a
// bitmap word per bucket. Its OCC bit is the slot's presence bit and it is one 8-byte store, which
// is all RECIPE's condition asks (one atomic, persisted store publishes); a separate bitmap would
// be a second word to keep consistent with the ctrl words the one-sided readers check, and the
// neighbourhoods here are slot-granular (no bucket to own a bitmap).
// Write protocol on PM ("persist" = PersistentRegion::persist, flush + fence)
//   insert into a free record (slot or chain):  payload (key, value, check) stores; persist(payload);
//                 ctrl ← OCC|v+1|kbits; persist(ctrl).                                   2 persists
//   new overflow block: record and next ← head stored; persist(block); head ← block;
//                 persist(head).                                                         2 persists
//   move y (displacement, two places): log ← {kMove, to, from, y's image at to}; persist(log);
//                 write the image at `to`; persist(to); clear `from`; persist(from);
//                 log ← empty; persist(commit).                                          4 persists
//   update in place: log ← {kRewrite, at, image}; persist(log); ctrl|LOCK, payload, ctrl stored;
//                 persist(record); log ← empty; persist(commit).                         3 persists
//   erase:        ctrl ← v+1 (not OCC); persist(ctrl).                                   1 persist
//                 + unlinking an emptied chain block: link ← next; persist(link).         +1
// So an insert costs 2 + 4 per displacement move, an update 3, a delete 1 (2 when it unlinks a
// block); every count is exact (HopscotchShardResult::persists, the RPC reply's aux, the bench's
// `persists`; tests/hopscotch_pm_test.cpp HopscotchPm.WritesPersistTwoPlusFourPerMoveThreeAndOne).
// Seed 002's Table I says 5 / 5 / 5 for P-FaRM-KV because its port "uses logging for each write
// operation"; ours logs only the writes that need it (a write to one free record or one ctrl word
// is already atomic), which is why it is lower. The counters in the header (records, chained,
// blocks used, moves) are stored, not persisted: recovery recomputes them.
// Invariants of a durable image (at every instant, whatever reached the media):
//   P1 a record whose ctrl is OCC is whole (its check word matches), lies in its key's
//      neighbourhood or its group's chain, and no key has two OCC records, unless the log holds a
//      committed record naming them (a move between its log persist and its log clear);
//   P2 a record carries LOCK only while a committed log record holds its new image;
//   P3 a committed log record (commit = checksum of the rest) is a whole image of a write whose
//      stores had not begun before it was durable; a torn one (checksum fails) names a write that
//      never began;
//   P4 every chain reaches only pool blocks, each from one chain at most; a block no chain reaches
//      holds no key the node acknowledged (it was filled, not yet linked);
//   P5 an acknowledged write is durable: the reply follows its last persist.
// What a crash at any instruction leaves, and recovery (HopscotchShard on an existing image):
// hopscotch_check_image (magic, checksum, geometry, size; an all-zero header is refused); then the
// log: a committed record is redone — the image written at `to` and persisted, `from` cleared for a
// move — and a torn one dropped; the log cleared either way (a redo is idempotent, so a crash during
// recovery is recovered again). A crash inside an insert leaves the record free (ctrl not durable)
// or whole (P1); inside an update or a move the log finishes it (the new value, the completed move:
// every key present once); inside an erase the key is present or absent; between the fill and the
// head store of a new block the block is unreachable and recovery clears its records. Then every
// slot and chain is checked (a LOCK without a log, a failed check word, a record outside its
// neighbourhood or group, a chain leaving the pool or joining another: PmemError, the image is
// refused, nothing written) and records, chained, linked blocks and an even `moves` are stored and
// persisted; every block no chain reaches is free. A second recovery finds nothing to do
// (recovery_repairs() = 0). Tested at every persist point: HopscotchPmCrash (every store/persist of
// a 900-op workload: plain and moving inserts, chain inserts into new and existing blocks, updates
// in slots and chains, erases with unlinks; three crash images per point), HopscotchPmFile.
// A dead client leaves nothing on PM either: writes are RPCs the node applies whole; a crash of the
// node is a crash as above. On reopen (`--pm-path` of an existing file, bench or serve) the image
// is recovered, never bulk-loaded; a new file is formatted unpublished and its magic written after
// the bulk load (pm_table.h).
//
// Safety mechanisms (mutants in tests/mutants/hopscotch.json and hopscotch_pm.json; scripts/mutants.py)
//  * check word: a reader accepts a record only if `check` matches (hopscotch-consistent-true)
//  * move order: copy to the new slot, then clear the old (hopscotch-move-clear-first)
//  * moves counter: a miss counts only if `moves` was one even value around it (hopscotch-miss-trusted)
//  * neighbourhood bound: displacement moves y to f only if f - home(y) < H (hopscotch-bound-off-by-one)
//  * value bound: the shard refuses a value larger than value_bytes (hopscotch-shard-value-bound)
//  * publish order: a new block is filled before the head store links it (hopscotch-chain-publish-first)
//  * chain search: a neighbourhood miss walks the group's chain (hopscotch-chain-unsearched)
//  * unlink window: an empty block is unlinked inside a moves window (hopscotch-unlink-unfenced)
//  * pool bound: no block is taken past the pool, kFull instead (hopscotch-pool-bound)
//  * hostile chains: clients can WRITE the whole region, so the node follows a head or next pointer
//    only if it names a pool block (hopscotch-chain-pointer-unchecked), and at most as many as the
//    pool has blocks (hopscotch-chain-cycle): a corrupt chain fails that RPC, never the node
//  On persistent memory (tests/mutants/hopscotch_pm.json):
//  * payload persisted before the publishing ctrl store (hopscotch-pm-drop-payload-persist), and
//    stored before it (hopscotch-pm-publish-before-record); the ctrl store persisted before the
//    reply (hopscotch-pm-drop-publish-persist)
//  * redo log: persisted before the write (hopscotch-pm-drop-log-persist); updates and moves logged
//    (hopscotch-pm-rewrite-unlogged, hopscotch-pm-move-unlogged); cleared after the write
//    (hopscotch-pm-log-left-committed); at recovery validated by its checksum
//    (hopscotch-pm-log-unvalidated) and cleared (hopscotch-pm-log-not-cleared-at-recovery)
//  * a new block persisted before its head store (hopscotch-pm-drop-block-persist); an unlink
//    persisted before reuse (hopscotch-pm-drop-unlink-persist); unreachable blocks' records cleared
//    at recovery (hopscotch-pm-orphans-kept)
//  * images: the geometry checksum (hopscotch-pm-checksum-unchecked), every live record's check
//    word (hopscotch-pm-recovery-skips-check-word)
//
// Thread safety: HopscotchClient belongs to one Engine (one thread); HopscotchShard and the RPC
// handler are thread-safe; any number of clients may use one table concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/pmem.h"
#include "rdmahash/table.h"

namespace rdmahash {

inline constexpr uint16_t kHopscotchRpcFirst = 0x0F00;  // RPC ids reserved for hopscotch tables
inline constexpr uint16_t kHopscotchRpcLast = 0x0F0F;
inline constexpr uint64_t kHopscotchMagic = 0x3248435348504f48ULL;  // "HOPSCH2": with overflow chains
inline constexpr uint32_t kHopscotchDefaultNeighborhood = 8;
inline constexpr uint64_t kHopscotchMovesOffset = 56;
inline constexpr uint64_t kHopscotchSlotsOffset = 128;  // the slot array follows the 128-byte header
inline constexpr uint32_t kHopscotchDefaultBlockRecords = 2;
inline constexpr uint32_t kHopscotchDefaultOverflowPercent = 25;
inline constexpr uint64_t kHopscotchChecksumOffset = 88;  // reserved[0]: checksum of the geometry words
inline constexpr uint64_t kHopscotchLogHeaderBytes = 32;  // [commit][kind][to][from], then one record

struct HopscotchConfig {
  uint32_t memory_nodes = 1;
  uint64_t home_slots_per_node = 1024;  // N: home slots (the array has N + H - 1)
  uint32_t neighborhood = kHopscotchDefaultNeighborhood;  // H in [2, 64]
  uint32_t value_bytes = 8;             // 0..120
  uint64_t hash_seed = 0x4F505343484F5048ULL;
  uint32_t max_probe = 4096;            // slots the free-slot search may examine
  // Overflow chains: records per overflow block, and the pool's record capacity as a percentage
  // of the home slots (0: no pool, a full neighbourhood answers kFull).
  uint32_t block_records = kHopscotchDefaultBlockRecords;        // in [1, 64]
  uint32_t overflow_percent = kHopscotchDefaultOverflowPercent;  // in [0, 400]
  // Client side (not part of the table): how long a record caught mid-write is re-read.
  std::chrono::nanoseconds retry_budget = kDefaultRetryBudget;
  // On persistent memory: format a blank region without its magic word (a new --pm-path file: the
  // magic is written after the bulk load, pm_table.h).
  bool format_unpublished = false;

  static HopscotchConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes,
                                     uint32_t neighborhood = kHopscotchDefaultNeighborhood);
  void validate() const;  // throws InvalidArgument naming the bad field
  uint64_t slots_per_node() const { return home_slots_per_node + neighborhood - 1; }
  uint32_t record_bytes() const;
  uint32_t read_bytes() const { return neighborhood * record_bytes(); }  // one lookup READ
  uint64_t groups() const { return (home_slots_per_node + neighborhood - 1) / neighborhood; }  // chain heads
  uint64_t overflow_blocks() const;  // pool blocks per shard
  uint32_t block_bytes() const { return 8 + block_records * record_bytes(); }  // [next:8][records]
  uint64_t heads_offset() const { return kHopscotchSlotsOffset + slots_per_node() * record_bytes(); }
  uint64_t pool_offset() const { return heads_offset() + groups() * 8; }
  uint64_t log_offset() const;  // the redo log (PM; allocated in DRAM too): cache-line aligned, after the pool
  uint64_t log_bytes() const { return kHopscotchLogHeaderBytes + record_bytes(); }
  uint64_t region_bytes() const;
};

std::string hopscotch_config_error(const HopscotchConfig& cfg);

// Validates an existing image of node `node` of `cfg` without changing it: its header (magic,
// geometry checksum, geometry) and size. Throws PmemError saying what is wrong (an all-zero header
// is refused: an existing file is never taken for a blank one). The registry calls it before the
// fabric sees a --pm-path file; a shard built on a PersistentRegion starts its recovery with it.
void hopscotch_check_image(std::span<const std::byte> image, const HopscotchConfig& cfg, uint32_t node);

struct HopscotchShardHeader {
  uint64_t magic;
  uint32_t neighborhood, key_bytes;
  uint32_t value_bytes, node;
  uint32_t memory_nodes, block_records;
  uint64_t home_slots;
  uint64_t hash_seed;
  uint64_t records;  // live records (neighbourhoods and chains)
  uint64_t moves;    // displacement sequence number: odd while an insert moves records
  uint64_t overflow_blocks;  // pool blocks
  uint64_t blocks_used;      // pool blocks linked into chains now
  uint64_t chained;          // live records in chains
  uint64_t reserved[5];
};
static_assert(sizeof(HopscotchShardHeader) == kHopscotchSlotsOffset);

struct HopscotchPlacement {
  uint32_t node;
  uint64_t home;   // home slot in the node's shard
  uint32_t kbits;  // low 32 bits of the record ctrl
};
HopscotchPlacement hopscotch_place(const HopscotchConfig& cfg, uint64_t key);

struct HopscotchShardStats {
  uint64_t inserts = 0;            // keys inserted (bulk and online)
  uint64_t displacing_inserts = 0; // inserts that moved records
  uint64_t displacements = 0;      // records moved
  uint64_t full = 0;               // inserts refused with kFull
  uint64_t chained = 0;            // live records in overflow chains
  uint64_t blocks_used = 0;        // overflow blocks linked into chains now
  uint64_t overflow_blocks = 0;    // the pool's blocks
  uint64_t unlinks = 0;            // emptied blocks unlinked (and freed for reuse)
  // On persistent memory: persist calls per kind of write (find_or_put/put inserting, updating, erase).
  uint64_t insert_persists = 0, update_persists = 0, erase_persists = 0;
  uint64_t updates = 0, erases = 0;  // updates in place and erases applied
};

struct HopscotchShardResult {
  Status status;
  uint32_t displacements = 0;
  uint32_t persists = 0;  // persist calls the operation made (0 in DRAM)
};

// Memory-node side: one shard, owned by the node's CPU. In DRAM (a span) it formats `region` on
// construction; on persistent memory (a PersistentRegion) it formats a region whose 128-byte header
// is all zero and otherwise recovers the image (hopscotch_check_image, then the redo log, then a
// scan), throwing PmemError for an image it cannot take.
class HopscotchShard {
 public:
  HopscotchShard(const HopscotchConfig& cfg, uint32_t node, std::span<std::byte> region);
  HopscotchShard(const HopscotchConfig& cfg, uint32_t node, PersistentRegion& region);
  HopscotchShard(const HopscotchShard&) = delete;
  HopscotchShard& operator=(const HopscotchShard&) = delete;

  HopscotchShardResult find_or_put(uint64_t key, std::span<const std::byte> value);
  HopscotchShardResult put(uint64_t key, std::span<const std::byte> value);
  HopscotchShardResult update(uint64_t key, std::span<const std::byte> value);
  HopscotchShardResult erase(uint64_t key);
  // put() for a key of this shard (false: another shard's); throws InvalidArgument on kFull.
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);

  bool owns(uint64_t key) const;
  std::optional<std::vector<std::byte>> find(uint64_t key) const;  // node-side, under the lock
  std::vector<uint64_t> keys() const;
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> items() const;  // every live record
  uint64_t records() const;
  bool recovered() const { return recovered_; }                 // built over an existing image
  uint64_t recovery_repairs() const { return repairs_; }        // log records redone or dropped, orphans cleared
  HopscotchShardStats stats() const;
  // Tests: called (under the shard's lock) after each store step of a move: after the copy and
  // after the clear. Must not call into the shard.
  void set_move_hook(std::function<void()> hook) { move_hook_ = std::move(hook); }
  // Tests: called (under the shard's lock) after each step of linking a new overflow block (after
  // the block is filled, after the head store that publishes it) and after the store that unlinks
  // an emptied block (`moves` is odd then). Must not call into the shard.
  void set_chain_hook(std::function<void()> hook) { chain_hook_ = std::move(hook); }

 private:
  uint64_t off(uint64_t slot) const;
  bool occupied(uint64_t slot) const;
  uint64_t key_at(uint64_t slot) const;
  // Byte offset of the key's record (neighbourhood or chain), and whether it is in a chain.
  struct Where {
    uint64_t at;
    bool chained;
  };
  std::optional<Where> locate(uint64_t key, const HopscotchPlacement& p) const;
  // `b`, a chain pointer just read from the region, if 0 or an overflow block within `hops` (its
  // count of pointers followed) ≤ the pool's blocks; else it throws (a corrupt or hostile chain).
  uint64_t checked_block(uint64_t b, uint64_t& hops) const;
  uint64_t head_off(const HopscotchPlacement& p) const { return cfg_.heads_offset() + p.home / cfg_.neighborhood * 8; }
  void check_value(std::span<const std::byte> value, bool exact) const;
  void write_new(uint64_t slot, uint64_t key, uint32_t kbits, std::span<const std::byte> value);
  void write_at(uint64_t o, uint64_t key, uint32_t kbits, std::span<const std::byte> value);
  void rewrite(uint64_t o, uint64_t key, std::span<const std::byte> value);
  void clear(uint64_t slot);
  void clear_at(uint64_t o);
  void move(uint64_t from, uint64_t to);
  HopscotchShardResult insert_new(uint64_t key, const HopscotchPlacement& p, std::span<const std::byte> value);
  HopscotchShardResult insert_chained(uint64_t key, const HopscotchPlacement& p, std::span<const std::byte> value,
                                      uint32_t moved);
  void unlink_if_empty(const HopscotchPlacement& p, uint64_t rec);
  void set_records(uint64_t n);
  void set_chained(uint64_t n);
  // Persistent memory (durable_): flush + fence through the region's choke point; nothing in DRAM.
  void flush(uint64_t o, uint64_t len);
  void put_record(uint64_t o, const std::byte* rec, bool logged);
  void log_write(uint64_t kind, uint64_t to, uint64_t from, const std::byte* rec);
  void log_clear();
  void format_pm();
  void recover();
  uint64_t persist_count() const { return pm_ ? pm_->persists() : 0; }
  uint64_t ld(uint64_t o) const;          // relaxed 8-byte load of the shard's memory
  void st(uint64_t o, uint64_t v);        // release 8-byte store (on PM: through the region)

  HopscotchConfig cfg_;
  uint32_t node_;
  std::span<std::byte> region_;
  PersistentRegion* pm_ = nullptr;  // on PM every store and persist goes through it; null in DRAM
  bool recovered_ = false;
  uint64_t repairs_ = 0;
  mutable std::mutex mu_;
  uint64_t records_ = 0;
  uint64_t moves_ = 0;
  uint64_t chained_ = 0;
  uint64_t blocks_used_ = 0;           // pool blocks ever taken (the bump pointer)
  std::vector<uint64_t> free_blocks_;  // taken, then unlinked empty: reused first
  HopscotchShardStats stats_;
  std::function<void()> move_hook_;
  std::function<void()> chain_hook_;
};

// Memory-node side of a table: formats the hosted shards, registers the RPC handler under `rpc_id`
// (which co-owns the shards).
class HopscotchServer {
 public:
  HopscotchServer(Fabric& fabric, const HopscotchConfig& cfg, uint16_t rpc_id = kHopscotchRpcFirst);
  // On persistent memory: each hosted shard over a PersistentRegion of `mode` (formats a zero header,
  // recovers anything else; throws PmemError for an image it cannot take).
  HopscotchServer(Fabric& fabric, const HopscotchConfig& cfg, PersistMode mode, uint16_t rpc_id = kHopscotchRpcFirst);
  ~HopscotchServer();
  HopscotchServer(const HopscotchServer&) = delete;
  HopscotchServer& operator=(const HopscotchServer&) = delete;
  bool hosts(uint32_t node) const;
  HopscotchShard& shard(uint32_t node);  // throws InvalidArgument if not hosted here
  PersistentRegion& region(uint32_t node);  // idem, and InvalidArgument in DRAM
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);
  uint64_t records() const;
  HopscotchShardStats stats() const;
  bool recovered() const;  // every hosted shard was recovered from an existing image
  std::string recovery_summary() const;

 private:
  struct State;
  HopscotchConfig cfg_;
  std::shared_ptr<State> state_;
};

// One-sided lookups (one READ of the neighbourhood), two-sided writes.
class HopscotchClient final : public KvClient {
 public:
  using KvClient::erase;
  using KvClient::find_or_put;
  using KvClient::get;
  using KvClient::put;
  using KvClient::update;
  const char* scheme_name() const override { return "hopscotch"; }
  HopscotchClient(const HopscotchConfig& cfg, Engine& engine, uint16_t rpc_id = kHopscotchRpcFirst);
  // OpResult.chunks = READs of records issued: neighbourhoods and overflow blocks (0 for the RPCs).
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;
  uint64_t persists() const { return persists_; }  // persists the node reported for this client's writes
  // Reads and validates a shard's header (one READ) and primes the moves cache.
  Task<HopscotchShardHeader> read_header(uint32_t node);
  // Tests: one READ of the key's neighbourhood, no re-read and no miss validation: kFound, kNotFound,
  // or nullopt when the key's record was caught mid-write or torn.
  Task<std::optional<Status>> probe_once(uint64_t key, std::span<std::byte> value_out);
  const HopscotchConfig& config() const { return cfg_; }

 private:
  enum class Scan : uint8_t { kMiss, kHit, kUnstable };
  Scan scan(const std::byte* recs, uint32_t n, uint64_t key, const HopscotchPlacement& p, std::span<std::byte> out) const;
  // Follows the key's group chain from `head`: kHit or kMiss (every record stable when read).
  Task<Scan> scan_chain(uint64_t head, uint64_t key, const HopscotchPlacement& p, std::span<std::byte> out, OpResult& r);
  void check_pointer(uint32_t node, uint64_t ptr) const;
  Task<OpResult> remote(uint8_t op, uint64_t key, std::span<const std::byte> value);
  void check_value(std::span<const std::byte> value, bool exact) const;

  HopscotchConfig cfg_;
  Engine& engine_;
  uint16_t rpc_id_;
  uint32_t cfg_tag_;
  std::vector<std::optional<uint64_t>> moves_seen_;
  uint64_t persists_ = 0;
};

}  // namespace rdmahash
