// rdmahash/cluster.h — DrTM-KV's cluster hashing (Wei et al., SOSP'15, "Fast in-memory transaction
// processing using RDMA and HTM", §5), volatile: an indirect table of header buckets whose slots
// point at key-value entries stored out of place; one-sided lookups (READ the header bucket, then
// READ the entry), writes on the owner memory node's CPU by RPC (as cuckoo.h, hopscotch.h).
//
// Placement
// ---------
// A 64-bit hash h of the key picks the shard (`node = ⌊h·K/2^64⌋`) and, from a further mix, the
// key's main header bucket `bucket ∈ [0, M)`.
//
// Memory layout of a shard (all offsets 8-byte aligned)
// -----------------------------------------------------
//   [0, 64)                      ClusterShardHeader (word 56: `records`)
//   [64, 64 + (M+P)·128)         header buckets: M main buckets, then P indirect (pool) buckets
//   [.., + E·eb)                 the entry area: E entries of eb = `entry_bytes()` bytes
// A header bucket has 8 slots of 16 bytes (DrTM: 8 slots of 128 bits): [meta:8][key:8].
//   meta = bit 63 ENTRY | bit 62 LINK | bits 32..61 incarnation (30 bits) | bits 0..31 index
//   ENTRY: the slot holds `key`, whose entry is entries[index] of that incarnation.
//   LINK (slot 7 only): the chain goes on in pool bucket `index`.
// Slots 0..6 hold entries; slot 7 is reserved for the link. DrTM lets the last slot hold an entry
// until the bucket overflows and then turns it into a link; that moves the entry into the new
// bucket, and a moved entry can be missed by a concurrent reader (what hopscotch.h needs its
// `moves` seqlock for). Reserving slot 7 costs 1/8 of the header slots and means NO ENTRY OR SLOT
// EVER MOVES, so a miss needs no validation at all (see below).
// DrTM keeps the full key in the slot too (the "lossy" part of its slot is the incarnation); so does
// this table, so a lookup READs only the entry of its own key, never a colliding one.
// An entry is the record of schemes/record.h (shared with linear, cuckoo, hopscotch):
//   [ctrl:8][key:8][value, padded to 8][check:8]
//   ctrl = bit 63 OCC | bit 62 LOCK | bits 32..60 version (29 bits, wraps) | bits 0..31 incarnation
//   check = hash(salt, version, key, value)
// Values inline in the entry, 0..120 bytes (the registry's inline bound for every scheme); 8-byte
// keys only, so every entry has its check word and every torn entry READ is detectable.
// Pool buckets are allocated by the node in order and never freed (erased slots are reused by later
// inserts into the same chain); entries come from a node-local free list (LIFO).
//
// Sizing (ClusterConfig::for_records): E = ⌈records / (load factor · K)⌉ entries per node (the load
// factor is records over entries), M = ⌈E / 7⌉ main buckets, P = max(8, ⌈M / 2⌉) pool buckets.
// DrTM does not state its pool size. With keys spread as Poisson(7·load) over the main buckets,
// about 3 in 10 of them overflow at load 0.9 and 4 in 10 at 0.99, so M/2 pool buckets hold every
// chain up to the highest load factor the bench accepts; an exhausted pool or entry area answers
// kFull (and leaves the shard as it was), never writes past its area.
//
// Lookups, one-sided: READ the main header bucket (128 bytes); a slot with ENTRY and the key →
// READ its entry; else if slot 7 is a LINK, READ that pool bucket, and so on (at most P+1 buckets).
// A hit in the main bucket is 2 READs in 2 round trips (tests/cluster_test.cpp,
// Cluster.HitIsTwoReadsInTwoRoundTrips); each chained bucket before the key's adds one READ.
// The entry READ accepts the entry only if ctrl is OCC and unlocked, its incarnation (low 30 bits)
// equals the slot's, its key word is the key, and its check word matches: then it is the entry the
// slot published, read whole. A locked or torn entry is re-read (bounded by `retry_budget`); an
// entry that is not the slot's (incarnation or key differ, not OCC) means the slot was stale: the
// lookup starts again from the main bucket, at most 16 times, then asks the owner (write_rpc kGet).
//
// Write protocol (memory-node CPU only, one mutex per shard; stores are 8-byte atomic releases)
//   insert k (free entry e, ctrl = version v, incarnation i, not OCC; a free slot s in k's chain):
//     entry: key, value, check(v+1); then ctrl ← OCC | v+1 | i          (the entry is complete)
//     slot:  key word ← k; then meta ← ENTRY | i | e                     (PUBLISH: k is present)
//     a new pool bucket b: its slot 0 is written as above, then the chain's last slot 7 ← LINK | b.
//   update k in place (DrTM updates in place under the entry's lock too): ctrl ← ctrl | LOCK;
//     value and check(v+1); ctrl ← OCC | v+1 | i. The slot does not change.
//   erase k: meta ← 0 (k is absent); then the entry's ctrl ← v+1 | i+1 (not OCC): RETIRE, the
//     incarnation bumped; e goes back on the free list.
// The ctrl version grows on every write of an entry, so a READ mixing two states of one entry fails
// its check; the incarnation grows on every retire, so a slot read before an erase never accepts
// the entry's next life (not even when it is the same key again, whose re-insert is not yet
// published: found there it would be a value of a key that is absent, then present).
//
// Why a one-sided reader is never wrong
//  * Hit. An entry accepted as above is the complete entry the slot published, incarnation i,
//    read unchanged at the instant of its ctrl word: k was present with that value then (an entry
//    of incarnation i is OCC only between its slot's publish and its retire, which follows the
//    slot's clear).
//  * Miss. A key present during the whole lookup has one slot, whose two words do not change
//    (nothing moves), in a bucket on its chain, whose links never change once set (links are
//    only added, after the new bucket is complete). So every READ of its chain finds it: a lookup
//    that walked its chain to the end without finding k missed a key that was absent at some
//    instant of the lookup — the reader needs no seqlock and no second READ for a miss.
//  * A slot READ is not atomic (its key word may be older than its meta): a slot seen with the key
//    and a foreign meta leads to an entry that is rejected (key or incarnation), and the lookup
//    starts again; it is never believed.
// Assumed of the fabric (as cuckoo.h): the node's stores become visible in program order, and a
// READ posted after another one completed observes memory no older than that one did.
// Lossy incarnation: 30 bits; a reader is fooled only if one entry is retired and reused 2^30 times
// between its two READs, or, with the location cache, while the line sits in the cache (DrTM's
// incarnation is lossy in the same way).
// Costs: a hit is 2 READs (128 + eb bytes), a miss 1 READ (128 bytes), plus one READ per chained
// bucket before the key's slot or the end of the chain.
//
// DrTM's location cache (`location_cache` header buckets per client, `--location-cache N`; 0, off,
// by default): each client keeps the header buckets its lookups READ, direct-mapped by the
// bucket's place among all the table's header buckets (so a cache as large as the table holds all
// of them). A lookup first walks the key's chain through the cache; if a cached slot holds the key it
// READs only the entry (a hit in ONE READ) and judges it as always: a cached slot is just a slot
// read long ago, and the entry checks above accept only the entry that slot published, in the life
// it published it, read whole, so a stale cache can cost READs but never a wrong answer. A stale
// entry drops the line and the lookup walks the chain from memory (refilling the cache). A miss in
// the cache is never trusted (a key inserted since is not in it): it walks the chain from memory.
// Default off: seed 004 (the RACE slides) names DrTM cluster hashing among its comparisons but says
// nothing of a cache, and RACE's argument is about uncached one-sided lookups, so the comparable
// configuration is without one. Not built: DrTM's HTM transactions and leases (the KV store only).
//
// What a dead client leaves: nothing. Every write is an RPC the node applies under its shard mutex;
// a client holds no lock and no half-written entry. Readers hold nothing.
//
// Safety mechanisms (mutants in tests/mutants/cluster.json; scripts/mutants.py)
//  * publish order: the entry is complete before its slot is published (cluster-publish-first).
//    With the reader's checks this is liveness, not safety: a reader that finds a published slot
//    before its entry rejects the entry and reads again (then asks the owner).
//  * incarnation: the entry READ rejects an entry whose incarnation is not the slot's
//    (cluster-incarnation-unchecked)
//  * check word: the entry READ rejects an entry whose check word does not match (cluster-check-true)
//  * pool bound: a chain grows only while pool buckets remain (cluster-pool-bound)
//  * stale slot: an entry that is not its slot's sends the lookup back to the main bucket; it is
//    never taken for a miss (cluster-stale-is-miss)
//  * hostile chains: clients can WRITE the whole region, so the node's walk checks every link
//    (cluster-walk-link-past-pool), the entry a slot names (cluster-walk-entry-past-entries) and
//    follows at most P links (cluster-walk-cycle): a corrupt chain fails that RPC, never the node
//
// Thread safety: ClusterClient belongs to one Engine (one thread); ClusterShard and the RPC handler
// are thread-safe; any number of clients may use one table concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/table.h"

namespace rdmahash {

inline constexpr uint16_t kClusterRpcFirst = 0x1000;  // RPC ids reserved for cluster tables
inline constexpr uint16_t kClusterRpcLast = 0x100F;
inline constexpr uint64_t kClusterMagic = 0x3148534855434C43ULL;  // "CLUCHSH1"
inline constexpr uint32_t kClusterSlotsPerBucket = 8;             // slot 7 is the link
inline constexpr uint32_t kClusterBucketBytes = kClusterSlotsPerBucket * 16;
inline constexpr uint32_t kClusterMaxValueBytes = 120;
inline constexpr uint32_t kClusterMaxLocationCache = 1u << 24;  // header buckets per client (2 GiB)

struct ClusterConfig {
  uint32_t memory_nodes = 1;
  uint64_t main_buckets_per_node = 128;  // M
  uint64_t pool_buckets_per_node = 64;   // P: indirect header buckets for chains
  uint64_t entries_per_node = 896;       // E
  uint32_t value_bytes = 8;              // 0..120
  uint64_t hash_seed = 0x434C555354455231ULL;
  // Client side (not part of the table): how long an entry caught mid-write is re-read, and the
  // header buckets each client caches (DrTM's location cache; 0: off, the default).
  std::chrono::nanoseconds retry_budget = kDefaultRetryBudget;
  uint32_t location_cache = 0;

  static ClusterConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes);
  void validate() const;  // throws InvalidArgument naming the bad field
  uint32_t entry_bytes() const;
  uint64_t buckets_offset() const { return 64; }
  uint64_t entries_offset() const { return 64 + (main_buckets_per_node + pool_buckets_per_node) * kClusterBucketBytes; }
  uint64_t region_bytes() const;
};

std::string cluster_config_error(const ClusterConfig& cfg);

struct ClusterShardHeader {
  uint64_t magic;
  uint32_t value_bytes, node;
  uint32_t memory_nodes, slots_per_bucket;
  uint64_t main_buckets;
  uint64_t pool_buckets;
  uint64_t entries;
  uint64_t hash_seed;
  uint64_t records;  // live records
};
static_assert(sizeof(ClusterShardHeader) == 64);

struct ClusterPlacement {
  uint32_t node;
  uint64_t bucket;  // main header bucket in the node's shard
};
ClusterPlacement cluster_place(const ClusterConfig& cfg, uint64_t key);

struct ClusterShardStats {
  uint64_t inserts = 0;       // keys inserted (bulk and online)
  uint64_t pool_used = 0;     // pool buckets allocated (never freed)
  uint64_t full = 0;          // inserts refused with kFull
};

// Memory-node side: one shard, owned by the node's CPU. Formats `region` on construction.
class ClusterShard {
 public:
  ClusterShard(const ClusterConfig& cfg, uint32_t node, std::span<std::byte> region);
  ClusterShard(const ClusterShard&) = delete;
  ClusterShard& operator=(const ClusterShard&) = delete;

  Status find_or_put(uint64_t key, std::span<const std::byte> value);
  Status put(uint64_t key, std::span<const std::byte> value);
  Status update(uint64_t key, std::span<const std::byte> value);
  Status erase(uint64_t key);
  // put() for a key of this shard (false: another shard's); throws InvalidArgument on kFull.
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);

  bool owns(uint64_t key) const;
  std::optional<std::vector<std::byte>> find(uint64_t key) const;  // node-side, under the lock
  // Header buckets before the key's own on its chain (0: its main bucket); nullopt if absent.
  std::optional<uint32_t> chain_position(uint64_t key) const;
  std::vector<uint64_t> keys() const;
  uint64_t records() const;
  ClusterShardStats stats() const;
  // Tests: called (under the shard's lock) by an insert after its entry is complete and before its
  // slot is published. Must not call into the shard.
  void set_publish_hook(std::function<void()> hook) { publish_hook_ = std::move(hook); }

 private:
  struct Where {
    uint64_t bucket;  // global bucket index (main or pool)
    uint32_t slot;
  };
  struct Chain {
    std::optional<Where> at;    // the key's slot
    uint32_t entry = 0;         // at: the entry its slot names (checked below entries_per_node)
    uint32_t position = 0;      // at: chained buckets before its bucket (0: the main bucket)
    std::optional<Where> free;  // the first free entry slot on the chain
    uint64_t last = 0;          // the chain's last bucket
  };
  uint64_t slot_off(uint64_t bucket, uint32_t slot) const;
  uint64_t entry_off(uint64_t entry) const;
  Chain walk(uint64_t key) const;
  void check_value(std::span<const std::byte> value, bool exact) const;
  Status insert_new(uint64_t key, const Chain& c, std::span<const std::byte> value);
  void rewrite(uint64_t entry, uint64_t key, std::span<const std::byte> value);
  void set_records(uint64_t n);

  ClusterConfig cfg_;
  uint32_t node_;
  std::span<std::byte> region_;
  mutable std::mutex mu_;
  uint64_t records_ = 0;
  uint64_t next_pool_ = 0;              // pool buckets allocated
  std::vector<uint32_t> free_entries_;  // LIFO
  ClusterShardStats stats_;
  std::function<void()> publish_hook_;
};

// Memory-node side of a table: formats the hosted shards, registers the RPC handler under `rpc_id`
// (which co-owns the shards).
class ClusterServer {
 public:
  ClusterServer(Fabric& fabric, const ClusterConfig& cfg, uint16_t rpc_id = kClusterRpcFirst);
  ~ClusterServer();
  ClusterServer(const ClusterServer&) = delete;
  ClusterServer& operator=(const ClusterServer&) = delete;
  bool hosts(uint32_t node) const;
  ClusterShard& shard(uint32_t node);  // throws InvalidArgument if not hosted here
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);
  uint64_t records() const;
  ClusterShardStats stats() const;

 private:
  struct State;
  ClusterConfig cfg_;
  std::shared_ptr<State> state_;
};

// A header slot as a reader saw it (tests split a lookup in its two READs with these).
struct ClusterSlotRef {
  uint64_t meta;  // ENTRY | incarnation | entry index
  uint32_t reads; // header-bucket READs it took
};
enum class ClusterEntryRead : uint8_t { kHit, kStale, kUnstable };

// One-sided lookups (header bucket READ, entry READ), two-sided writes.
class ClusterClient final : public KvClient {
 public:
  using KvClient::erase;
  using KvClient::find_or_put;
  using KvClient::get;
  using KvClient::put;
  using KvClient::update;
  const char* scheme_name() const override { return "cluster"; }
  ClusterClient(const ClusterConfig& cfg, Engine& engine, uint16_t rpc_id = kClusterRpcFirst);
  // OpResult.chunks = READs issued (0 for the RPC operations).
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;
  Task<ClusterShardHeader> read_header(uint32_t node);  // one READ, validated
  // The lookup's first phase: walk the key's chain of header buckets; meta 0 when the key has no
  // slot on it (a miss).
  Task<ClusterSlotRef> find_slot(uint64_t key);
  // The second phase: one READ of the slot's entry, judged (no re-read).
  Task<ClusterEntryRead> read_entry(uint64_t key, const ClusterSlotRef& slot, std::span<std::byte> value_out);
  const ClusterConfig& config() const { return cfg_; }

 private:
  void check_value(std::span<const std::byte> value, bool exact) const;
  Task<OpResult> remote(uint8_t op, uint64_t key, std::span<const std::byte> value);
  // The location cache: direct-mapped lines of header buckets, tagged (node, bucket).
  struct CacheLine {
    uint64_t tag = ~0ULL;
    std::byte bytes[kClusterBucketBytes];
  };
  CacheLine* cache_line(uint32_t node, uint64_t bucket, bool for_fill);
  uint64_t cached_slot(uint64_t key, CacheLine** line);  // meta of the key's cached slot, or 0

  ClusterConfig cfg_;
  Engine& engine_;
  uint16_t rpc_id_;
  uint32_t cfg_tag_;
  std::vector<CacheLine> cache_;
};

}  // namespace rdmahash
