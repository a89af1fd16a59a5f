// rdmahash/linear.h — distributed linear probing over one-sided READ/WRITE/CAS.
//
// Memory layout
// -------------
// The table is split into one shard per memory node. A 64-bit hash of the key picks the shard
// (`node = ⌊h·K/2^64⌋`) and, from a second mix, the home slot in that shard (`⌊h'·S/2^64⌋`).
// A shard's region is a 64-byte header (ShardHeader) followed by `S` home slots and `T` tail
// (overflow) slots. Probe sequences run forward from the home slot and never wrap: a probe that
// would run past the tail is `full` for inserts and a miss for lookups. So every probe is one
// contiguous READ (seed 001 needed split reads at the wrap point; we do not).
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
//   insert: CAS ctrl 0 → OCC|LOCK|v0|kbits ; WRITE key,value,check(v1) ; WRITE ctrl OCC|v1|kbits
//   update: CAS ctrl OCC|v|kbits → OCC|LOCK|v|kbits ; WRITE value,check(v+1) ; WRITE ctrl OCC|v+1|kbits
//   erase:  CAS ctrl OCC|v|kbits → OCC|DEL|v+1|kbits      (one atomic step; slot never reused)
// Each WRITE is awaited before the next is posted, so the unlocking ctrl is never visible before
// the payload. A reader accepts a slot only if its ctrl is unlocked and `check` matches the
// version in ctrl and the key/value it read; otherwise it re-reads that slot (a READ of several
// words may be torn: the checksum, not the read order, makes a torn read detectable, as in Pilaf).
// The linearisation point of a read is the moment it read the unlocked ctrl.
//
// Invariants
//  * A slot goes empty → claimed(locked) → published → (updated)* → tombstone, never back.
//  * A key occupies at most one non-tombstone slot of its shard: an insert claims only the *first*
//    empty slot of its probe sequence it can CAS, and after a failed CAS re-checks the winner's key,
//    so two clients racing to insert one key insert it once (seed 001 §3.3).
//  * Lookups stop at the first empty slot; tombstones are skipped, never reused.
//
// Thread safety: LinearClient is used by one Engine (one thread); any number of clients on any
// number of threads or processes may operate on one table concurrently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <span>
#include <string>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/table.h"

namespace rdmahash {

enum class SlotFormat : uint8_t { kSet = 0, kInline = 1 };
const char* to_string(SlotFormat f);

struct LinearConfig {
  SlotFormat format = SlotFormat::kSet;
  uint32_t memory_nodes = 1;
  uint64_t home_slots = 1024;  // S, per memory node
  uint64_t tail_slots = 0;     // T, per memory node; 0 picks max(4096, S/32)
  uint32_t key_bytes = 8;      // kInline: 4 or 8; kSet: 8 (keys < 2^63)
  uint32_t value_bytes = 0;    // kInline: 0..120; kSet: 0
  uint64_t hash_seed = 0x5eed5eed12345678ULL;

  // Home slots for `records` at `load_factor` (records / all home slots), split over the nodes.
  static LinearConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes);

  void validate() const;  // throws InvalidArgument with a message naming the bad field
  uint64_t tail() const { return tail_slots ? tail_slots : std::max<uint64_t>(4096, home_slots / 32); }
  uint64_t total_slots() const { return home_slots + tail(); }
  uint32_t slot_bytes() const;
  uint64_t region_bytes() const;  // header + all slots
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
struct ProbeConfig {
  uint32_t chunk = 8;         // C: slots per find_or_put read (seed 001)
  uint32_t max_chunks = 128;  // M: find_or_put gives up (kFull) after M chunks
  uint32_t read_size = 8;     // R: slots per get/update/erase read (seed 000)
  std::shared_ptr<ReadSizer> read_sizer;  // optional: chooses R per read (model, cluster hints)
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

// Where a key lives. Pure function of the config; shared by clients and loaders.
struct LinearPlacement {
  uint32_t node;
  uint64_t home;   // slot index in the shard
  uint32_t kbits;  // low 32 bits of an inline ctrl word for this key
};
LinearPlacement linear_place(const LinearConfig& cfg, uint64_t key);

// Memory-node side: formats a shard and inserts records with plain stores, before clients start.
class LinearShardLoader {
 public:
  LinearShardLoader(const LinearConfig& cfg, uint32_t node, std::span<std::byte> region);
  // Inserts `key` if it belongs to this shard (returns false if it does not). Duplicate keys are
  // stored again (bulk-loaded multimaps). Throws InvalidArgument if the shard's tail overflows.
  bool insert(uint64_t key, std::span<const std::byte> value);
  uint64_t records() const;

 private:
  LinearConfig cfg_;
  uint32_t node_;
  std::span<std::byte> region_;
};

// Memory-node side inspection: every live (published, not erased) key of a shard, in slot order.
std::vector<uint64_t> linear_scan_keys(const LinearConfig& cfg, std::span<const std::byte> region);

class LinearClient final : public KvClient {
 public:
  LinearClient(const LinearConfig& cfg, const ProbeConfig& probe, Engine& engine);
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
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

 private:
  struct Located;
  void check_value(std::span<const std::byte> value, bool required) const;
  RemoteAddr slot_addr(uint32_t node, uint64_t slot) const;
  Task<Located> locate(uint64_t key, const LinearPlacement& p, std::span<std::byte> value_out, uint32_t& reads);
  Task<bool> read_stable(uint32_t node, uint64_t slot, std::byte* dst);
  uint32_t read_slots(uint32_t node, uint64_t slot) const;
  void observe_clusters(uint32_t node, uint64_t start, const std::byte* slots, uint64_t n, uint64_t& run_start) const;
  Task<OpResult> insert(uint64_t key, std::span<const std::byte> value);

  LinearConfig cfg_;
  ProbeConfig probe_;
  Engine& engine_;
  uint32_t slot_bytes_;
};

// The error message of a config that does not validate, or empty.
std::string linear_config_error(const LinearConfig& cfg);

}  // namespace rdmahash
