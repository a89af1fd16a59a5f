// rdmahash/cuckoo.h — 3-way cuckoo hashing over one-sided READs, the baseline of seed 000 (§2.2,
// §4.5, §5.2). Lookups are one-sided; every write goes to the owner memory node's CPU, which is the
// only writer of its shard (relocations need the owner's CPU, as in Pilaf).
//
// Placement
// ---------
// A 64-bit hash h of the key picks the shard (`node = ⌊h·K/2^64⌋`). From further mixes of h come
// the key's k = 3 candidate buckets, all inside that shard and pairwise distinct (the second is
// drawn from B-1 buckets skipping the first, the third from B-2 skipping both), its 32-bit `kbits`
// (the key itself for 4-byte keys, else a fingerprint) and, for heap storage, its bucket-word
// fingerprint. Because every candidate of a key lives on one node, the node's CPU can run the whole
// displacement search and every relocation in its own memory, under one lock.
//
// Memory layout of a shard (all offsets 8-byte aligned)
// -----------------------------------------------------
//   [0, 64)            CuckooShardHeader; its last word `moves` is the relocation sequence number
//   [64, 64 + B·bb)    B buckets of `bucket_bytes()` = bb bytes
//   heap (kHeap only)  B·S records of `record_bytes()`, the S records of bucket b at index b·S
//
// A *record* has the format of linear.h's inline slot:
//   [ctrl:8][key:8, only for 8-byte keys][value, padded to 8][check:8, unless 4-byte key, no value]
//   ctrl = bit 63 OCC | bit 62 LOCK | bits 32..60 version (29 bits, wraps) | bits 0..31 kbits
//   check = hash(version, key, value)
// The version of a record position only grows (clearing a record bumps it too), so a torn READ
// that mixes two states of one position fails the check; ctrl alone says whether a record is live.
//
//  * kInline: a bucket is S records back to back; a lookup READs whole buckets (seed 000 inline).
//  * kHeap (seed 000 Fig. 5): a bucket is one 8-byte word, READ atomically.
//      S = 4: bits 8s..8s+7 = fingerprint of slot s (1..255; 0 = empty), bits 32..63 = heap offset
//             of the bucket's group of 4 contiguous records, in groups (fixed at format: b).
//      S = 1: 0 = empty, else bits 48..63 = 16-bit fingerprint, bits 0..47 = record index + 1.
//    A lookup READs the k bucket words, then the records whose fingerprints match.
//
// Write protocol (memory-node CPU only, one mutex per shard; stores are 8-byte atomic releases)
//   inline insert into a free slot (ctrl v, not OCC): payload with check(v+1); ctrl ← OCC|v+1|kbits.
//   heap insert into a free record (ctrl v, not OCC): payload with check(v+1); set the fingerprint
//                 in the bucket word; then record ctrl ← OCC|v+1|kbits.
//   update in place: ctrl ← ctrl|LOCK; payload check(v+1); ctrl ← OCC|v+1|kbits. (The check alone
//                 already rejects a mix of versions; LOCK makes "mid-write, re-read" explicit.)
//   erase / clear:   ctrl ← v+1 (not OCC); heap: then clear the fingerprint.
//   relocate y from slot A to free slot B (one of y's candidates): insert y at B as above (y is now
//   live twice, with the same value), then clear A.
// A heap record is therefore unlocked and live only while its bucket word references it; a key is
// *present* while some ctrl holding it is OCC and unlocked.
//
// What another client sees if a client dies at any instruction: every write is an RPC the memory
// node applies under its shard mutex, so a client holds nothing; a write whose RPC reached the node
// is applied whole even if its client is dead by then (its reply is dropped), one that did not is
// not applied. Readers are one-sided and hold nothing. (tests/serve_kill_test.sh, inline and heap.)
//
// Inserts: if a candidate bucket has a free slot the key goes there (no relocation). Otherwise a
// breadth-first search over displacement paths (as in libcuckoo) examines at most
// `max_displacements` candidate moves; the shortest path found is applied from its free end back to
// the new key, so every move lands in a slot that is free. If the search fails the insert reports
// `kFull` and nothing has been written: no stored key is lost. Before applying a path the node sets
// `moves` odd; after the last write it sets it even again (a seqlock around relocations only).
//
// Why a one-sided reader is never wrong (the relocation-safety argument; MemC3 and Pilaf use the
// same two ingredients, version checks and a relocation counter)
//  * Hit. The reader accepts a record only if its ctrl is OCC, unlocked, carries the key's kbits,
//    and `check` matches the version in ctrl and the key/value read. So the bytes are exactly the
//    record state whose ctrl it read, and that ctrl says the key was present at the instant it was
//    read (heap: a live record is always referenced). During a relocation the key is live in both
//    slots with one value, so finding either copy is correct. A hit linearizes at that ctrl read.
//  * Miss. A key can be missed only if it moved from a bucket the reader had not read yet into one
//    it had already read — a relocation overlapping the lookup. Inserts, updates and erases without
//    relocation never move a key, and each changes its presence with one 8-byte store. So a miss is
//    trusted only if the shard's `moves` word had one even value both before the lookup's first
//    READ and after its last: the "before" value is the one this client read in an earlier, already
//    completed round trip (cached per shard), the "after" value costs one 8-byte header READ once
//    the candidates have been checked. If they differ (or nothing is cached yet), the lookup runs
//    again with the fresh value as its "before". A validated miss linearizes at an instant in that
//    window where no candidate held the key.
//  * Copy-before-clear is what keeps a moving key present at every instant (so hits stay possible
//    mid-relocation and misses rarely need a retry); the counter is what makes misses sound, since
//    a reader's k READs happen at k different instants.
//  Assumed of the fabric (true of LocalFabric's fences and of an RDMA NIC reading x86 memory): the
//  node's stores become visible in program order, and a READ posted after another one completed
//  observes memory no older than that one did.
// Retries. A record caught mid-write is re-read, and a miss that overlapped a relocation is
// re-validated. Re-reads of a record are bounded by a time, `CuckooConfig::retry_budget` (a writer
// is the node's CPU inside one critical section, so only a dead or stalled node CPU keeps a record
// unstable that long); then the lookup fails with RetryBudgetExceeded. Misses are bounded by
// attempts: after 16 one-sided attempts that all overlapped relocations (a steady stream of
// displacing inserts can keep that up indefinitely) the lookup asks the owner by RPC (write_rpc
// kGet), which answers under the shard's lock where no relocation can overlap; the lookup
// linearizes inside that RPC (tests/fault_test.cpp, CuckooMiss.EndlessRelocationsMakeAMissAskTheOwner;
// mutant cuckoo-miss-fallback-trusts-itself).
//
// Consequently a lookup of a present key issues at most k bucket READs (plus re-reads of a record
// caught mid-write); a miss adds one header READ (and on the first miss on a shard, a second probe,
// unless `read_header` primed the cache).
//
// Round trips per lookup: kParallel posts the k bucket READs together (inline: 1 round trip for a
// hit; heap: 2, buckets then records). kSequential reads the candidates one at a time in a random
// order chosen per operation and stops at the first hit (at most k bucket READs).
//
// Two-sided requests: find_or_put/put/update/erase are RPCs to the owner node (ids
// kCuckooRpcFirst..kCuckooRpcLast, one id per table on a fabric) served by `CuckooServer`.
//
// Safety mechanisms (mutants in tests/mutants/cuckoo.json; scripts/mutants.sh, docs/testing.md)
//  * check word: a reader accepts a record only if `check` matches (cuckoo-consistent-true)
//  * relocation counter: a miss counts only if `moves` was one even value around the lookup
//    (cuckoo-miss-without-moves-check)
//  * bound: every entry point, the shard's bulk_insert included, refuses a key wider than 4 bytes
//    in a 4-byte-key table (cuckoo-shard-bulk-key-bound)
//  The version bumps of update and clear and the LOCK of an in-place update (and the readers' test
//  of it) are defence in depth: removing any one alone is an equivalent mutant, because the check
//  word covers version, key and value and every write that changes a record's bytes bumps the
//  version at least once (docs/testing.md).
//
// Thread safety: CuckooClient belongs to one Engine (one thread); CuckooShard and the RPC handler
// are thread-safe; any number of clients may use one table concurrently.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
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

enum class CuckooStorage : uint8_t { kInline = 0, kHeap = 1 };
enum class CuckooProbe : uint8_t { kSequential = 0, kParallel = 1 };
const char* to_string(CuckooStorage s);
const char* to_string(CuckooProbe p);

inline constexpr uint32_t kCuckooWays = 3;                 // k hash functions
inline constexpr uint16_t kCuckooRpcFirst = 0x0C00;        // RPC ids reserved for cuckoo tables
inline constexpr uint16_t kCuckooRpcLast = 0x0C0F;
inline constexpr uint64_t kCuckooMagic = 0x314b4355434852ULL;  // "RHCUCK1"

struct CuckooConfig {
  uint32_t memory_nodes = 1;
  uint64_t buckets_per_node = 1024;  // B, at least 3 (the candidates are distinct)
  uint32_t slots_per_bucket = 4;     // S: 1 or 4
  uint32_t key_bytes = 8;            // 4 (keys < 2^32) or 8
  uint32_t value_bytes = 8;          // 0..120 inline, 0..4096 heap
  CuckooStorage storage = CuckooStorage::kInline;
  uint64_t hash_seed = 0xC0C0A5A5D00DF00DULL;
  uint32_t max_displacements = 500;  // candidate moves one insert's search may examine
  // Client side (not part of the table): how long a lookup keeps re-reading a record caught
  // mid-write, or re-validating a miss that keeps overlapping relocations, before it fails with
  // RetryBudgetExceeded (fabric.h). A time, not a count (see cuckoo.h, "Retries").
  std::chrono::nanoseconds retry_budget = kDefaultRetryBudget;

  // Buckets for `records` at `load_factor` (records / all slots), split over the nodes.
  static CuckooConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes,
                                  uint32_t slots_per_bucket = 4);

  void validate() const;  // throws InvalidArgument naming the bad field
  uint64_t slots_per_node() const { return buckets_per_node * slots_per_bucket; }
  uint32_t record_bytes() const;  // one record (inline slot or heap record)
  uint32_t bucket_bytes() const;  // one bucket READ: S records (inline) or 8 (heap)
  uint64_t heap_offset() const;   // where the heap starts in a shard (= region_bytes() for inline)
  uint64_t region_bytes() const;  // header + buckets + heap
};

// The error message of a config that does not validate, or empty.
std::string cuckoo_config_error(const CuckooConfig& cfg);

// The first 64 bytes of every shard.
struct CuckooShardHeader {
  uint64_t magic;
  uint32_t storage, slots_per_bucket, key_bytes, value_bytes;
  uint64_t buckets;
  uint64_t hash_seed;
  uint32_t node, memory_nodes;
  uint64_t records;  // live records (written by the node as it changes)
  uint64_t moves;    // relocation sequence number: odd while a displacement path is being applied
};
static_assert(sizeof(CuckooShardHeader) == 64);
inline constexpr uint64_t kCuckooMovesOffset = 56;

// Where a key lives. Pure function of the config; shared by clients and memory nodes.
struct CuckooPlacement {
  uint32_t node;
  std::array<uint64_t, kCuckooWays> buckets;  // distinct bucket indices in the node's shard
  uint32_t kbits;                             // low 32 bits of a record ctrl for this key
  uint16_t fp;                                // heap bucket-word fingerprint (S=4: 1..255)
};
CuckooPlacement cuckoo_place(const CuckooConfig& cfg, uint64_t key);

struct CuckooShardStats {
  uint64_t inserts = 0;            // keys inserted (bulk and online)
  uint64_t relocating_inserts = 0; // inserts that needed a displacement path
  uint64_t displacements = 0;      // records moved, in total
  uint64_t max_path = 0;           // longest path applied (moves)
  uint64_t full = 0;               // inserts that failed the bounded search
};

// What the memory node did for one request.
struct CuckooShardResult {
  Status status;
  uint32_t displacements = 0;  // records moved to make room
};

// Memory-node side: one shard, owned by the node's CPU. Formats `region` on construction.
// Thread-safe: every operation holds the shard's mutex while one-sided readers read on.
class CuckooShard {
 public:
  CuckooShard(const CuckooConfig& cfg, uint32_t node, std::span<std::byte> region);
  CuckooShard(const CuckooShard&) = delete;
  CuckooShard& operator=(const CuckooShard&) = delete;

  // The KvClient operations, applied locally. Keys must belong to this shard and values must fit
  // (InvalidArgument otherwise). find_or_put/put return kFull if the displacement search fails.
  CuckooShardResult find_or_put(uint64_t key, std::span<const std::byte> value);
  CuckooShardResult put(uint64_t key, std::span<const std::byte> value);
  CuckooShardResult update(uint64_t key, std::span<const std::byte> value);
  CuckooShardResult erase(uint64_t key);

  // Bulk loading: inserts `key` (a repeated key gets the new value) if it belongs to this shard,
  // else returns false. Throws InvalidArgument naming the load factor reached when the bounded
  // displacement search fails; everything stored before stays stored.
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);

  bool owns(uint64_t key) const;
  std::optional<std::vector<std::byte>> find(uint64_t key) const;  // node-side lookup
  std::vector<uint64_t> keys() const;                              // every live key, slot order
  uint64_t records() const;
  uint64_t capacity() const { return cfg_.slots_per_node(); }
  double load_factor() const;
  CuckooShardStats stats() const;
  uint32_t node() const { return node_; }

 private:
  struct Loc {
    uint64_t bucket;
    uint32_t slot;
  };
  struct Step {  // one BFS node: a bucket and how it was reached
    uint64_t bucket;
    int32_t parent;
    uint32_t slot_in_parent;
  };
  void check_key_value(uint64_t key, std::span<const std::byte> value, bool exact) const;
  std::optional<Loc> locate(uint64_t key, const CuckooPlacement& p) const;
  bool occupied(uint64_t bucket, uint32_t slot) const;
  int free_slot(uint64_t bucket) const;
  uint64_t key_at(uint64_t bucket, uint32_t slot) const;
  uint64_t record_offset(uint64_t bucket, uint32_t slot) const;
  void write_new(const Loc& at, uint64_t key, std::span<const std::byte> value);
  void rewrite(const Loc& at, uint64_t key, std::span<const std::byte> value);
  void clear(const Loc& at);
  void move(const Loc& from, const Loc& to);
  CuckooShardResult insert_new(uint64_t key, const CuckooPlacement& p, std::span<const std::byte> value);
  void set_records(uint64_t n);

  CuckooConfig cfg_;
  uint32_t node_;
  std::span<std::byte> region_;
  mutable std::mutex mu_;
  uint64_t records_ = 0;
  uint64_t moves_ = 0;
  CuckooShardStats stats_;
  std::vector<Step> bfs_;  // reused search queue
};

// Memory-node side of a table on a fabric: formats every shard hosted by this process (the nodes
// whose `local_region` is not empty) and registers the RPC handler serving them under `rpc_id`.
// The handler keeps the shards alive for as long as the fabric keeps the handler, so the server
// object may be dropped once loading is done. One rpc id per table: a second server on the same
// fabric and id replaces the first one's handler.
class CuckooServer {
 public:
  CuckooServer(Fabric& fabric, const CuckooConfig& cfg, uint16_t rpc_id = kCuckooRpcFirst);
  ~CuckooServer();
  CuckooServer(const CuckooServer&) = delete;
  CuckooServer& operator=(const CuckooServer&) = delete;

  bool hosts(uint32_t node) const;
  CuckooShard& shard(uint32_t node);  // throws InvalidArgument if not hosted here

  // Bulk build: inserts every key whose shard is hosted here. `values` holds keys.size() values of
  // value_bytes back to back, or is empty (zero values). Returns the records loaded here. Fails
  // (InvalidArgument) as soon as one insert's bounded displacement search fails, with a message
  // naming the load factor reached and the one requested; nothing stored before is lost.
  uint64_t build(std::span<const uint64_t> keys, std::span<const std::byte> values = {});
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);

  uint64_t records() const;       // live records in the shards hosted here
  double load_factor() const;     // of the shards hosted here
  CuckooShardStats stats() const; // summed over the shards hosted here
  const CuckooConfig& config() const { return cfg_; }

 private:
  struct State;
  CuckooConfig cfg_;
  std::shared_ptr<State> state_;
};

// One-sided lookups, two-sided writes. `seed` seeds the per-operation random candidate order of
// kSequential probing.
class CuckooClient final : public KvClient {
 public:
  // Integer keys only: the byte-key overloads are KvClient's, which reject them.
  using KvClient::find_or_put;
  using KvClient::get;
  using KvClient::update;
  using KvClient::put;
  using KvClient::erase;
  using KvClient::get_batch;  // the span overload
  const char* scheme_name() const override { return "cuckoo"; }
  CuckooClient(const CuckooConfig& cfg, CuckooProbe probe, Engine& engine, uint64_t seed = 1,
               uint16_t rpc_id = kCuckooRpcFirst);
  ~CuckooClient() override;
  // OpResult.chunks = bucket READs issued (0 for the RPC operations); matches = 1 on a hit.
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  // Multi-get (KvClient::get_batch), inline storage with parallel probing (else false: heap
  // lookups take a second round trip for the records, sequential ones one READ per bucket). Each
  // round is one batch: the k bucket READs of every key that joined, the `moves` READ of every key
  // whose buckets all missed (get's miss check, with the "before" the key took when it joined: a
  // value read in an earlier, completed round trip). A hit or a checked miss is answered from the
  // batch, at get's requests, round trips, bytes and chunks. A miss that overlapped a relocation
  // goes on as get's next attempt would (the same cost). A key that met a record locked or torn
  // goes on as a whole get from its first probe: at most one round trip and k READs more than get,
  // which re-reads only that bucket. The value is handed over as KvClient::get_visit does (a buffer of
  // `value_bytes`, the table's value cut or zero-padded to it).
  bool get_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of, uint32_t value_bytes,
                 GetVisitor& v, const std::function<void(const Engine::Completion&)>& done) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  // A cuckoo table holds a key at most once: get(), with the value appended to `values_out`.
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;
  // Reads and validates a shard's header (one READ) and primes the relocation-counter cache.
  Task<CuckooShardHeader> read_header(uint32_t node);

  const CuckooConfig& config() const { return cfg_; }
  CuckooProbe probe() const { return probe_; }
  void set_probe(CuckooProbe p) { probe_ = p; }
  // Throws InvalidArgument if `key` cannot be stored in this table.
  void validate_key(uint64_t key) const;

 private:
  enum class Scan : uint8_t { kMiss, kHit, kUnstable };
  Scan scan(const std::byte* records, uint32_t count, uint64_t key, const CuckooPlacement& p,
            std::span<std::byte> out) const;
  Task<Scan> reread(RemoteAddr addr, uint32_t len, uint32_t count, std::byte* buf, uint64_t key,
                    const CuckooPlacement& p, std::span<std::byte> out, uint32_t* chunks);
  Task<bool> probe_inline(uint64_t key, const CuckooPlacement& p, const std::array<uint32_t, kCuckooWays>& order,
                          std::span<std::byte> out, uint32_t& chunks);
  Task<bool> probe_heap(uint64_t key, const CuckooPlacement& p, const std::array<uint32_t, kCuckooWays>& order,
                        std::span<std::byte> out, uint32_t& chunks);
  Task<bool> check_records(uint64_t key, const CuckooPlacement& p, const std::vector<uint64_t>& offsets,
                           std::span<std::byte> out);
  Task<OpResult> remote(uint8_t op, uint64_t key, std::span<const std::byte> value);
  // get from attempt `attempt` on, with the miss check's "before" (the cached moves_seen_ when
  // before_from_cache, read as the task starts) and the chunks counted so far.
  Task<OpResult> get_from(uint64_t key, std::span<std::byte> value_out, std::optional<uint64_t> before, uint32_t attempt,
                          uint32_t chunks, bool before_from_cache);
  // get_from, then v.on_get as KvClient::get_visit (get_batch's keys that leave the batch).
  Task<void> visit_from(uint64_t key, uint32_t value_bytes, GetVisitor& v, std::optional<uint64_t> before,
                        uint32_t attempt, uint32_t chunks);
  struct BatchState;
  std::unique_ptr<BatchState> batch_;
  void check_value(std::span<const std::byte> value, bool exact) const;
  std::array<uint32_t, kCuckooWays> order();

  CuckooConfig cfg_;
  CuckooProbe probe_;
  Engine& engine_;
  uint64_t rng_;
  uint16_t rpc_id_;
  uint32_t cfg_tag_;
  std::vector<std::optional<uint64_t>> moves_seen_;  // per node: last `moves` value read
};

}  // namespace rdmahash
