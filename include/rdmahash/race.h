// rdmahash/race.h — RACE hashing (seed 004): a one-sided, extendible hash table of byte-string
// keys and values. Every operation is READ/WRITE/CAS after a client's space allocation (one RPC
// per large chunk); the table grows by splitting subtables while clients run.
//
// Memory layout (every node: [0,64) RaceNodeHeader, [64, 64+8·2^max_depth) directory, then 256
// bytes of death board (both used on node 0 only; the same layout everywhere keeps offsets
// uniform), then the pool)
// ----------------------------------------------------------------------------------------------
//  * Directory, on node 0 only (not replicated: one writer path, no replica consistency to argue).
//    Header word `global_depth` (GD); entries dir[i], i < 2^GD, one 8-byte word each:
//      bits 0..39 subtable offset/64 | bits 40..45 node | bits 48..53 local depth | bit 63 LOCK |
//      owner (the lock holder's client id, 11 bits: low 9 in bits 54..62, high 2 in bits 46..47).
//    Key k (64-bit hash H) uses dir[H mod 2^GD]. A subtable of local depth L and suffix s holds
//    the keys with H mod 2^L == s; dir[s] (s < 2^L) is its *primary* entry and carries its LOCK.
//  * Subtable: G groups of three 64-byte buckets [main0, overflow, main1] (3·64·G bytes). Main
//    bucket m ∈ [0, 2G) is side m%2 of group m/2; its *combined bucket* is [main0, overflow]
//    (group offset 0) or [overflow, main1] (offset 64): one 128-byte READ. Two hash functions of H
//    give the key's two main buckets; both combined buckets are READ in the same batch.
//  * Bucket: 8-byte header (bits 0..7 local depth, bits 8..63 suffix) + 7 slots of 8 bytes:
//      slot = bits 56..63 fingerprint | 48..55 block length in 64-byte units | bit 47 FROZEN |
//             bit 46 COMMITTED | bits 40..45 node | bits 0..39 block offset/64;  0 = empty.
//    7 slots (not 8) because the header shares the 64-byte cache line, as in the RACE authors'
//    code and SMART: one bucket = one line, one combined bucket = two lines.
//  * Directory lock (node-0 header word dir_lock): 0, or owner+1 | s << 16 | L << 48 naming the
//    holder and the split (subtable of depth L, primary dir[s]) it serializes.
//  * Death board (node 0, after the directory): bit i set = client i is dead, for good. Only the
//    memory node's CPU sets bits (race_mark_dead: serve, after a client's connection closed and
//    the grace period passed; tests, for a client they stopped). Clients READ it.
//  * Client ids: 0..2047 (kRaceMaxClientId; RaceClient refuses larger), unique among the table's
//    clients over its life, never reused (a reused id of a dead client would read as dead).
//    bench: the client index (in-process, mpirun); --connect: the id memory node 0 gave (refused
//    from 1024 on: restart the server).
//  * KV block, out of place, 64-byte aligned, never written again once a slot may point to it:
//      [key_len:16 | value_len:32 | writer:16][key][value][zero pad to 8][checksum:8] padded to 64·n
//    (writer: the client id that wrote it: who owns a tentative slot pointing to it).
//    checksum = hash of everything before it; a reader accepts a block only if it checks out
//    and the key matches (a slot's 8 fingerprint bits only select candidates).
//  * Pool: the rest of each node. The node's CPU hands out space only through RPC
//    kRaceRpcAlloc (bump pointer in the node header, under a mutex): KV-block chunks of
//    `chunk_bytes` to clients, which carve blocks from them, and whole subtables to splitters.
//    Exhausted → the client's operation answers kFull and has changed nothing visible.
//    Initial subtables (2^initial_depth) are placed round-robin over the nodes at fixed offsets;
//    later subtables go to node (new suffix mod K).
//
// Protocol (H, two main buckets, fingerprint from the key's bytes; S = subtable from the cache)
//  get:    RT1 READ both combined buckets. Every header must carry the key's suffix at its local
//          depth, else the cache is stale: re-READ the directory (only then) and retry. RT2 READ
//          the blocks of the COMMITTED slots whose fingerprint matches, and dir[H mod 2^GD] and
//          GD (8 bytes each) to validate: if the entry no longer names S, or GD grew (after a
//          doubling the old index's entry keeps naming S even for a moved key), a split moved the
//          key while we read → retry with the new directory.
//  insert (find_or_put, put of an absent key):
//          RT1 WRITE the KV block + READ both combined buckets (+ blocks of matching slots).
//          RT2 CAS an empty slot of the less loaded combined bucket to our pointer, *tentative*
//              (COMMITTED clear; readers ignore tentative slots).
//          RT3 re-READ both combined buckets (+ dir entry; + blocks of new fingerprint matches).
//          RT1 also: a tentative copy of the key by another client and none of ours → wait for it
//          (its owner commits or withdraws; a dead owner's copy is killed, see Takeover), re-read.
//          Duplicate resolution over copies of the key in the two combined buckets:
//              a COMMITTED copy exists → clear ours, kFound;
//              a lower-addressed tentative copy → clear ours, start over (we will see it commit);
//              higher-addressed tentative copies → CAS them to empty (kill), re-read;
//              ours is the only one → RT4 CAS ours tentative→COMMITTED: kInserted (its instant).
//          At most one copy ever commits (a commit needs the copy still tentative; of two racing
//          copies the later re-reader sees the other and either yields or kills it first), and the
//          lowest tentative copy is never killed, so some inserter always finishes.
//          4 round trips, one more than the paper's 3: its rule (re-read, keep one) cannot tell an
//          inserter that already returned kInserted from one still deciding; the commit bit can.
//  update: RT1 WRITE new block + READ buckets; RT2 blocks + dir check; RT3 CAS old slot → new.
//  erase:  RT1 READ buckets; RT2 blocks + dir check; RT3 CAS slot → 0.
//  A lost CAS restarts from a fresh READ. Blocks are never reused, so slot CASes have no ABA.
//
// Split (client whose insert found both combined buckets full; S: depth L, suffix s)
//   1. re-READ the directory; CAS dir[s] unlocked → LOCK|me, then the directory lock (a word in
//      the node-0 header) 0 → (me, s, L). Either lost: release what we hold and retry the insert — nothing
//      has changed yet. The directory lock is held until publication (step 6), so splits are
//      serialized table-wide: simpler to argue (one publication or doubling at a time, every
//      splitter sees the depth it publishes against) at the price of split concurrency.
//   2. RPC: a new subtable S' on node (s | 2^L) mod K. Pool empty → unlock both, kFull.
//   3. Freeze: CAS every slot of S (empty ones too) v → v|FROZEN. Nobody CASes a frozen slot,
//      so from here S's contents are fixed and owned by the splitter.
//   4. READ every block of S; WRITE S' = the slots whose H has bit L set, same positions, headers
//      (L+1, s|2^L), unfrozen (S' is unreachable until step 6). Stranded tentative slots (key's
//      H mod 2^L != s, see below) are cleared in step 7 and go nowhere.
//   5. Headers of S ← (L+1, s): stale caches aimed at S for a moved key now see a wrong suffix.
//   6. (Directory lock held since step 1.) If L == GD, double: copy entries [0,2^GD) to [2^GD, 2^(GD+1)) (LOCK bits cleared), then
//      GD+1. Point every entry ≡ s (mod 2^L) at S or S' by bit L, depth L+1 (primary stays
//      LOCKed): dir[s2] (s2 = s|2^L) first, alone and awaited, then the others, so "dir[s2]
//      names S'" marks that publication began. Unlock the directory.  ← publication point
//   7. Unfreeze S: moved slots → 0, the others lose FROZEN. 8. Unlock dir[s].
// Why each race is safe
//   * A writer's CAS on S lands before the freeze of that slot (the splitter then sees and carries
//     the entry) or fails (frozen); a frozen slot is never unfrozen in S for a moved key, only
//     cleared, and a cleared slot never matches a writer's expected pointer. So no write is lost.
//   * Reads never wait. Before publication S holds every key of S (frozen or not) unchanged by
//     the split; after it, a moved key's old copy is stale, and the RT2 directory check rejects
//     any read of S begun before publication whose key publication moved (the entry changed
//     before the check was posted). A READ torn by step 5/7 is covered by the same check, since
//     step 7 comes after publication. A header that disagrees while the fresh directory still
//     names S means a split between steps 5 and 6: S is frozen, so what was read is current.
//   * A stale cache is found by the header (wrong suffix), or by the RT2 check: either re-reads
//     the directory; a cache is never trusted for a result the check did not confirm.
//   * Writers (insert/update/erase) that meet a frozen slot or a subtable locked by a split, a
//     held directory lock, or a lower tentative copy of their key wait for it: re-read the
//     directory and retry. These are the only places an operation waits for another client;
//     readers never do. A live owner is waited for until `wait_budget` (30 s by default) passes
//     without progress, then RaceWouldWait names what was waited for: bounded by the owner's
//     progress, not by a count (a descheduled owner is not a failure). Every `death_check_every`
//     re-reads the waiter READs the death board; a dead owner is taken over (below).
// Takeover (a writer that found the owner of what it waits for dead on the death board)
//   * Tentative copy of a dead writer (owner from the block header): CAS the slot from the value
//     read to 0. Safe: a tentative copy was never acknowledged (its owner answers only after its
//     commit CAS), and if that commit CAS landed the slot no longer holds the tentative value, so
//     the kill fails. Only dead writers' copies are killed: a live lowest copy is waited for (it
//     is what guarantees that some inserter of the key finishes).
//   * Split lock dir[s] = LOCK|D|entry with D dead: CAS it to LOCK|me|entry (of several helpers
//     one wins; the CAS also fails if D's last request changed it). We now own the split and:
//     (A) the directory lock names (s, L): the split may have begun publication. CAS the lock
//         word to (me, s, L) (only dir[s]'s holder changes a lock word naming s). If L < GD and
//         dir[s2] names a subtable S' ≠ S, publication began, and S' was complete before it
//         (step 4 precedes 5 and 6): roll forward — rewrite every entry ≡ s (mod 2^L) as step 6
//         does (idempotent), release the directory lock, unfreeze S (CAS each FROZEN slot: to 0
//         if its key has bit L set or it is a stranded tentative copy, else to itself without
//         FROZEN), CAS dir[s] unlocked at depth L+1. Otherwise roll back: headers of S back to
//         (L, s), CAS every FROZEN slot unfrozen, then release the directory lock, CAS dir[s]
//         unlocked at depth L (S' leaks; a half-copied upper directory half beyond GD is unused
//         and rewritten by the next doubling).
//     (B) the directory lock does not name s: D never got it (nothing frozen yet: unlock) or
//         published and released it (dir[s] has depth L+1): unfreeze as in roll forward with L =
//         depth−1 (only slots still FROZEN: the others may already be writers'), then unlock.
//   * The directory lock held by a dead D names the split (s): the waiter takes over dir[s] as
//     above if dir[s]'s owner is dead too (a live helper holding dir[s] is waited for).
//   * Why a second death is safe: every step is a CAS from the state read or an idempotent
//     WRITE of what the step computes from the table alone (never from the dead owner's memory),
//     and the state a helper leaves when it dies at any request is recognized the same way by the
//     next one: "dir[s2] names S'" never becomes false again (roll forward), roll back never
//     writes it, and roll back unfreezes every slot before it releases the directory lock, so
//     "frozen slots, directory lock not naming s" means published (case B) in every state any
//     owner leaves. Only FROZEN slots are CASed: a slot unfrozen earlier belongs to writers.
//   * Assumption: a client marked dead issues no request afterwards. serve marks a client only
//     `recovery_grace` after its connection closed, having served its worker meanwhile (requests
//     it posted before dying have landed); a client that is merely slow is never marked.
// What another client sees if a client dies at any instruction
//   * Before its CAS: an unreferenced KV block (leaked pool space), nothing else.
//   * Holding a tentative slot: invisible to readers; other inserters of that key kill it (if
//     theirs is lower, or once the death board marks its writer dead) — until then a dead lowest
//     tentative makes inserts of that one key wait.
//   * Mid-split (holding dir[s].LOCK and frozen slots) or holding the directory lock: reads of S
//     stay correct throughout (frozen contents are current; after publication S' is); writers
//     aimed at S, and later splits, wait until the death board marks the client dead, then one
//     of them takes over and finishes or undoes the split (Takeover). Nothing blocks forever once
//     the memory node marked the death; before that, waiters give up after wait_budget.
//   * A leaked KV block or chunk is never reclaimed (no garbage collection; the paper has none).
//   * A writer whose stale READ preceded a whole split and whose CAS followed it leaves a
//     tentative copy in the old subtable; it notices (header mismatch on its re-read, or another
//     client's committed copy), withdraws it and inserts again or answers. A copy it cannot
//     withdraw (frozen by a later split) is dropped by that split: step 4 drops every tentative
//     slot whose key's hash disagrees with S's suffix (nobody can see or commit it there).
//
// Costs (LocalFabric and UCX, tests/race_test.cpp RoundTripsPerOperation): get 2 round trips
// (hit or miss); insert 4; update 3; erase 3; a split about 3·G·7 CASes + one READ per entry.
//
// Threads: RaceClient belongs to one Engine; RaceServer's RPC handler is thread-safe.
//
// Safety mechanisms (each removed by a mutant of tests/mutants/race.json, which the tests must
// kill: scripts/mutants.sh, docs/testing.md):
//  * duplicate resolution: an inserter that finds a committed copy of its key withdraws its own and
//    answers kFound (race-dup-committed)
//  * CAS re-check: a new key is inserted tentative and committed only after re-reading both buckets
//    (race-commit-without-recheck)
//  * stale-cache detection: a bucket header whose suffix disagrees with the key's hash forces a
//    directory re-read (race-stale-header)
//  * stale-read validation: results are confirmed by re-reading the key's directory entry after the
//    bucket READ (race-dir-check)
//  * stale-read validation also compares the global depth: after a doubling the old-index entry
//    still names the split subtable (race-dir-depth-check)
//  * split lock: the LOCK bit of the subtable's primary directory entry (race-split-lock)
//  * directory lock: one split publishes (and doubles the directory) at a time (race-dir-lock)
//  * split freeze: every slot of the splitting subtable is CASed FROZEN so no write is lost or
//    applied to a stale copy (race-freeze)
//  * writers do not act on a view containing frozen slots (a split in progress): they wait
//    (race-frozen-wait)
//  * stranded copies: an inserter answering from another's committed copy withdraws its stranded
//    one (race-stranded-not-withdrawn); a split drops stranded tentative slots it freezes
//    (race-split-keeps-stranded)
//  * KV block checksum: a block whose bytes do not match its checksum is rejected (race-checksum)
//  * key length bound (1..256 bytes) checked before any request (race-key-bound)
//  * value length bound (15360 bytes) checked before any request (race-value-bound)
//  * takeover CAS: a dead owner's split lock is taken by CAS from the word read, so one helper of
//    several takes over (race-takeover-cas)
//  * death checks: a split lock is taken over, a lower tentative copy killed, only when the death
//    board marks its owner dead (race-takeover-death-check, race-tentative-death-check)
//  * roll forward iff dir[s2] names S' (race-takeover-always-back, race-takeover-always-forward)
//  * roll back unfreezes before releasing the directory lock (race-rollback-unfreeze-before-unlock)
//  * client ids above kRaceMaxClientId are refused (race-client-id-bound)

#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/table.h"

namespace rdmahash {

inline constexpr uint16_t kRaceRpcAlloc = 0x0D00;
inline constexpr uint64_t kRaceMagic = 0x31454341524852ULL;  // "RHRACE1"
inline constexpr uint32_t kRaceSlots = 7;                     // slots per bucket
inline constexpr uint32_t kRaceBucketBytes = 64;
inline constexpr uint32_t kRaceMaxNodes = 64;                 // 6 node bits in a slot
inline constexpr uint32_t kRaceMaxClientId = 2047;            // 11 owner bits in a directory entry
inline constexpr uint64_t kRaceBoardBytes = 256;              // death board: one bit per client id

struct RaceConfig {
  uint32_t memory_nodes = 1;
  uint32_t groups_per_subtable = 64;  // G: 3·G buckets, 21·G slots per subtable
  uint32_t initial_depth = 0;         // 2^initial_depth subtables at format time
  uint32_t max_depth = 16;            // directory capacity 2^max_depth entries
  uint64_t chunk_bytes = 1 << 20;     // KV-block space per allocation RPC
  uint32_t key_bytes = 8;             // uint64 keys: 8 bytes, or the 8 bytes + a fixed suffix (≤ 256)
  bool dir_cache = true;              // false: READ the directory entry before every operation
  bool resize = true;                 // false: an insert into two full buckets answers kFull
  uint64_t hash_seed = 0x5ACE5ACE12345678ULL;
  // A writer waiting for another client (a split, the directory lock, a lower tentative copy)
  // gives up with RaceWouldWait after this long without progress (0: at the first wait).
  std::chrono::milliseconds wait_budget{30000};
  // Re-reads of a wait between two looks at the death board (a dead owner is taken over).
  uint32_t death_check_every = 64;
  // Tests only (serve kill tests): the client process raise(SIGKILL)s at its Nth split or takeover
  // step (about 12 a split, counted over its life), holding the locks of that step. 0: never.
  uint64_t test_die_at_step = 0;

  void validate() const;  // InvalidArgument naming the field
  uint64_t subtable_bytes() const { return uint64_t{3} * kRaceBucketBytes * groups_per_subtable; }
  uint64_t directory_offset() const { return 64; }
  uint64_t board_offset() const { return directory_offset() + (uint64_t{8} << max_depth); }  // node 0
  uint64_t pool_offset() const;       // first pool byte on every node
  // Smallest region for the initial subtables plus `pool_bytes` of pool per node.
  uint64_t region_bytes(uint64_t pool_bytes) const;
  // Region per node for `records` of `value_bytes` (blocks, subtables at ~50 % load, chunks).
  uint64_t region_bytes_for(uint64_t records, uint32_t value_bytes, uint32_t clients) const;
};

// The first 64 bytes of every node.
struct RaceNodeHeader {
  uint64_t magic;
  uint64_t global_depth;  // node 0: the directory's depth
  uint64_t split;         // node 0: 0, or owner+1 << 48 | address of the installed split's descriptor
  uint64_t pool_next;     // next free pool byte (memory-node CPU only)
  uint64_t pool_end;
  uint64_t subtables;     // node 0: subtables created by finished splits (statistics)
  uint64_t config_tag;
  uint64_t pad;
};
static_assert(sizeof(RaceNodeHeader) == 64);

// A writer waited `wait_budget` for a live client's split, directory lock or tentative copy.
class RaceWouldWait : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Memory-node side: formats the nodes hosted by this process and serves allocation RPCs.
// The handler keeps its state alive; the object may be dropped after construction.
class RaceServer {
 public:
  RaceServer(Fabric& fabric, const RaceConfig& cfg);
  const RaceConfig& config() const { return cfg_; }

 private:
  RaceConfig cfg_;
};

class RaceClient;

// Bulk loading on the memory-node side, before any client starts: a RaceClient whose requests go
// straight to the regions hosted by this process (every node must be hosted here: LocalFabric, or
// a UCX job with one memory node on this rank). Format with RaceServer first.
class RaceLoader {
 public:
  RaceLoader(Fabric& fabric, const RaceConfig& cfg);
  ~RaceLoader();
  RaceLoader(const RaceLoader&) = delete;
  RaceLoader& operator=(const RaceLoader&) = delete;
  Engine& engine();
  RaceClient& client();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct RaceClientStats {
  uint64_t splits = 0;           // splits this client performed
  uint64_t dir_refreshes = 0;    // directory re-reads (stale cache, cache off, splits)
  uint64_t stale_detected = 0;   // headers or directory checks that revealed a stale cache
  uint64_t waits = 0;            // re-reads spent waiting for a live writer's lower tentative copy
  uint64_t takeovers = 0;        // dead writers' tentative copies killed
  uint64_t helped = 0;           // other clients' splits this client ran (in part or to the end)
  uint64_t chunk_rpcs = 0;
  std::vector<double> split_load;  // load factor of each subtable this client split, when split
};

class RaceClient final : public KvClient {
 public:
  RaceClient(const RaceConfig& cfg, Engine& engine, uint32_t client_id = 0);
  ~RaceClient() override;

  // uint64 keys: the key's 8 little-endian bytes, followed by key_bytes-8 fixed bytes.
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;

  Task<OpResult> find_or_put(KeyView key, std::span<const std::byte> value) override;
  Task<OpResult> get(KeyView key, std::vector<std::byte>* value_out) override;
  Task<OpResult> update(KeyView key, std::span<const std::byte> value) override;
  Task<OpResult> put(KeyView key, std::span<const std::byte> value) override;
  Task<OpResult> erase(KeyView key) override;
  const char* scheme_name() const override { return "race"; }

  // Re-READs the directory (what a stale header triggers).
  Task<void> refresh_directory();
  uint32_t cached_depth() const;
  const RaceClientStats& stats() const { return stats_; }
  const RaceConfig& config() const { return cfg_; }

 private:
  struct Impl;
  RaceConfig cfg_;
  std::unique_ptr<Impl> impl_;
  RaceClientStats stats_;
};

// Inspection from the memory-node side (tests, bench): walks the directory and subtables of a
// LocalFabric (every node hosted here). `keys` receives every COMMITTED key, one entry per slot.
struct RaceInspection {
  uint32_t global_depth = 0;
  uint64_t subtables = 0;
  uint64_t committed = 0, tentative = 0, frozen = 0;
  uint64_t slots = 0;  // over all subtables
  bool locks_clear = true;
  std::vector<std::vector<std::byte>> keys;
};
RaceInspection race_inspect(Fabric& fabric, const RaceConfig& cfg, bool with_keys = false);
// The death board (node 0, hosted by this process): marks `client_id` dead, for good. The memory
// node calls it when the client's connection closed (serve); tests call it for a stopped client.
// Only a client that will never issue another request may be marked.
void race_mark_dead(Fabric& fabric, const RaceConfig& cfg, uint32_t client_id);
// The table's slots now (distinct subtables in the directory x 3G x kRaceSlots), from node 0's
// directory alone; call where node 0 is hosted and no split runs.
uint64_t race_slot_count(Fabric& fabric, const RaceConfig& cfg);

}  // namespace rdmahash
