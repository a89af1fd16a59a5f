// DrTM-KV's cluster hashing (volatile). Layout, write protocol and the reader-safety argument are
// documented in include/rdmahash/cluster.h; this file follows them.
#include "rdmahash/cluster.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/hash.h"
#include "schemes/record.h"
#include "schemes/retry.h"
#include "schemes/shard_host.h"
#include "schemes/write_rpc.h"

namespace rdmahash {
namespace {

using record::kLock;
using record::kOcc;
using record::kVersionMask;
using record::load64;
using record::make_ctrl;
using record::store64;
using record::version_of;

constexpr uint64_t kHeaderBytes = sizeof(ClusterShardHeader);
constexpr uint64_t kRecordsOffset = 56;
constexpr uint32_t kEntrySlots = kClusterSlotsPerBucket - 1;  // slot 7 is the link
constexpr uint64_t kSlotEntry = 1ULL << 63;
constexpr uint64_t kSlotLink = 1ULL << 62;
constexpr uint64_t kIncMask = (1ULL << 30) - 1;
constexpr uint32_t kStaleAttemptsBeforeRpc = 16;

struct Layout : record::Layout {
  explicit Layout(const ClusterConfig& c) : record::Layout(8, c.value_bytes, 0xC1D57ULL) {}
};

inline uint64_t slot_meta(uint64_t inc, uint64_t index) { return kSlotEntry | ((inc & kIncMask) << 32) | index; }
inline uint64_t meta_inc(uint64_t meta) { return (meta >> 32) & kIncMask; }
inline uint32_t meta_index(uint64_t meta) { return static_cast<uint32_t>(meta); }

inline std::atomic_ref<uint64_t> word_ref(std::byte* base, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off));
}
inline uint64_t node_load(std::byte* base, uint64_t off) { return word_ref(base, off).load(std::memory_order_relaxed); }
inline void node_store(std::byte* base, uint64_t off, uint64_t v) { word_ref(base, off).store(v, std::memory_order_release); }

uint32_t config_tag(const ClusterConfig& c) {
  uint64_t h = hash::mix64(c.hash_seed ^ kClusterMagic);
  for (uint64_t f : {uint64_t{c.memory_nodes}, c.main_buckets_per_node, c.pool_buckets_per_node, c.entries_per_node,
                     uint64_t{c.value_bytes}})
    h = hash::mix64(h ^ f);
  return static_cast<uint32_t>(h);
}

}  // namespace

// --- configuration ------------------------------------------------------------------------------

ClusterConfig ClusterConfig::for_records(uint64_t records, double load_factor, uint32_t memory_nodes) {
  if (!(load_factor > 0.0 && load_factor < 1.0))
    throw InvalidArgument("load factor must be in (0, 1), got " + std::to_string(load_factor));
  if (records == 0) throw InvalidArgument("records must be at least 1");
  if (memory_nodes == 0) throw InvalidArgument("memory nodes must be at least 1");
  const double entries = std::ceil(static_cast<double>(records) / (load_factor * memory_nodes));
  if (!(entries <= 0x1p32))
    throw InvalidArgument("load factor " + std::to_string(load_factor) + " is too small for " + std::to_string(records) +
                          " records: the table would need more than 2^32 entries per memory node");
  ClusterConfig c;
  c.memory_nodes = memory_nodes;
  c.entries_per_node = std::max<uint64_t>(kEntrySlots, static_cast<uint64_t>(entries));
  c.main_buckets_per_node = (c.entries_per_node + kEntrySlots - 1) / kEntrySlots;
  c.pool_buckets_per_node = std::max<uint64_t>(8, (c.main_buckets_per_node + 1) / 2);
  return c;
}

std::string cluster_config_error(const ClusterConfig& c) {
  if (c.memory_nodes == 0) return "memory nodes must be at least 1";
  if (c.main_buckets_per_node == 0) return "main buckets per node must be at least 1";
  if (c.main_buckets_per_node + c.pool_buckets_per_node > (1ULL << 32))
    return "header buckets per node (main + pool) must be at most 2^32";
  if (c.entries_per_node == 0 || c.entries_per_node > (1ULL << 32)) return "entries per node must be in [1, 2^32]";
  if (c.value_bytes > kClusterMaxValueBytes)
    return "value bytes must be at most " + std::to_string(kClusterMaxValueBytes) + ", got " + std::to_string(c.value_bytes);
  if (c.location_cache > kClusterMaxLocationCache)
    return "location cache must be at most " + std::to_string(kClusterMaxLocationCache) + " header buckets, got " +
           std::to_string(c.location_cache);
  return {};
}

void ClusterConfig::validate() const {
  if (auto e = cluster_config_error(*this); !e.empty()) throw InvalidArgument(e);
}

uint32_t ClusterConfig::entry_bytes() const { return Layout(*this).bytes; }
uint64_t ClusterConfig::region_bytes() const { return entries_offset() + entries_per_node * entry_bytes(); }

ClusterPlacement cluster_place(const ClusterConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  ClusterPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  p.bucket = hash::range(hash::mix64(h ^ 0xA0761D6478BD642FULL), c.main_buckets_per_node);
  return p;
}

// --- memory-node side: one shard --------------------------------------------------------------------

ClusterShard::ClusterShard(const ClusterConfig& cfg, uint32_t node, std::span<std::byte> region)
    : cfg_(cfg), node_(node), region_(region) {
  cfg_.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index " + std::to_string(node) + " out of range");
  if (region.size() < cfg.region_bytes())
    throw InvalidArgument("region of " + std::to_string(region.size()) + " bytes is smaller than the cluster shard (" +
                          std::to_string(cfg.region_bytes()) + " bytes)");
  if (reinterpret_cast<uintptr_t>(region.data()) % 8 != 0) throw InvalidArgument("shard region must be 8-byte aligned");
  std::memset(region.data(), 0, cfg.region_bytes());
  ClusterShardHeader h{};
  h.magic = kClusterMagic;
  h.value_bytes = cfg.value_bytes;
  h.node = node;
  h.memory_nodes = cfg.memory_nodes;
  h.slots_per_bucket = kClusterSlotsPerBucket;
  h.main_buckets = cfg.main_buckets_per_node;
  h.pool_buckets = cfg.pool_buckets_per_node;
  h.entries = cfg.entries_per_node;
  h.hash_seed = cfg.hash_seed;
  std::memcpy(region.data(), &h, sizeof h);
  // Entry 0 is handed out first (popped from the back).
  free_entries_.resize(cfg.entries_per_node);
  for (uint64_t i = 0; i < cfg.entries_per_node; ++i) free_entries_[i] = static_cast<uint32_t>(cfg.entries_per_node - 1 - i);
}

uint64_t ClusterShard::slot_off(uint64_t bucket, uint32_t slot) const {
  return cfg_.buckets_offset() + bucket * kClusterBucketBytes + uint64_t{slot} * 16;
}
uint64_t ClusterShard::entry_off(uint64_t entry) const { return cfg_.entries_offset() + entry * cfg_.entry_bytes(); }
bool ClusterShard::owns(uint64_t key) const { return cluster_place(cfg_, key).node == node_; }

void ClusterShard::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

// The key's chain. Every client can WRITE anywhere in the region (the rkey covers it), so a link or
// an entry index read here may be anything: one past the pool or the entry array, or a cycle,
// would send this CPU outside the region or around the cycle forever with the shard's lock held.
// Both are refused (the RPC fails; the shard stays usable for other keys).
ClusterShard::Chain ClusterShard::walk(uint64_t key) const {
  std::byte* base = region_.data();
  auto corrupt = [&](const std::string& what) {
    return std::runtime_error("cluster shard " + std::to_string(node_) + ": corrupt chain of key " + std::to_string(key) +
                              ": " + what);
  };
  Chain c;
  uint64_t b = cluster_place(cfg_, key).bucket;
  for (uint64_t hops = 0;; ++hops) {
    c.last = b;
    for (uint32_t s = 0; s < kEntrySlots; ++s) {
      const uint64_t meta = node_load(base, slot_off(b, s));
      if (!(meta & kSlotEntry)) {
        if (!c.free) c.free = Where{b, s};
      } else if (node_load(base, slot_off(b, s) + 8) == key) {
        if (meta_index(meta) >= cfg_.entries_per_node)
          throw corrupt("entry " + std::to_string(meta_index(meta)) + " past the " + std::to_string(cfg_.entries_per_node) +
                        " entries");
        c.at = Where{b, s};
        c.entry = meta_index(meta);
        c.position = static_cast<uint32_t>(hops);
        return c;
      }
    }
    const uint64_t link = node_load(base, slot_off(b, kEntrySlots));
    if (!(link & kSlotLink)) return c;
    if (meta_index(link) >= cfg_.pool_buckets_per_node)
      throw corrupt("link to pool bucket " + std::to_string(meta_index(link)) + " past the " +
                    std::to_string(cfg_.pool_buckets_per_node) + " pool buckets");
    if (hops >= cfg_.pool_buckets_per_node) throw corrupt("a cycle (more links than the pool holds)");
    b = cfg_.main_buckets_per_node + meta_index(link);
  }
}

Status ClusterShard::insert_new(uint64_t key, const Chain& c, std::span<const std::byte> value) {
  std::byte* base = region_.data();
  // Refuse before writing anything: kFull leaves the shard as it was.
  if (free_entries_.empty() || (!c.free && next_pool_ >= cfg_.pool_buckets_per_node)) {
    ++stats_.full;
    return Status::kFull;
  }
  const uint32_t e = free_entries_.back();
  free_entries_.pop_back();
  const Layout l(cfg_);
  const uint64_t eo = entry_off(e);
  const uint64_t ctrl = node_load(base, eo);
  const uint64_t inc = static_cast<uint32_t>(ctrl);
  const uint64_t v = (version_of(ctrl) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  // The entry is not OCC (free): a reader holding a stale slot rejects it until the ctrl store.
  auto write_entry = [&] {
    for (uint32_t i = 8; i < l.bytes; i += 8) node_store(base, eo + i, load64(rec.data() + i));
    node_store(base, eo, make_ctrl(v, static_cast<uint32_t>(inc)));
  };
  // Publish: the key word first, the meta word last (one 8-byte store makes k present).
  auto publish = [&] {
    if (c.free) {
      node_store(base, slot_off(c.free->bucket, c.free->slot) + 8, key);
      node_store(base, slot_off(c.free->bucket, c.free->slot), slot_meta(inc, e));
    } else {
      const uint64_t pb = next_pool_++;
      const uint64_t b = cfg_.main_buckets_per_node + pb;
      node_store(base, slot_off(b, 0) + 8, key);
      node_store(base, slot_off(b, 0), slot_meta(inc, e));
      node_store(base, slot_off(c.last, kEntrySlots), kSlotLink | pb);  // the new bucket is complete
      ++stats_.pool_used;
    }
  };
  write_entry();
  if (publish_hook_) publish_hook_();
  publish();
  set_records(records_ + 1);
  ++stats_.inserts;
  return Status::kInserted;
}

void ClusterShard::rewrite(uint64_t entry, uint64_t key, std::span<const std::byte> value) {
  const Layout l(cfg_);
  std::byte* base = region_.data();
  const uint64_t eo = entry_off(entry);
  const uint64_t ctrl = node_load(base, eo);
  const uint64_t v = (version_of(ctrl) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  node_store(base, eo, ctrl | kLock);
  for (uint32_t i = 8; i < l.bytes; i += 8) node_store(base, eo + i, load64(rec.data() + i));
  node_store(base, eo, make_ctrl(v, static_cast<uint32_t>(ctrl)));
}

void ClusterShard::set_records(uint64_t n) {
  records_ = n;
  node_store(region_.data(), kRecordsOffset, n);
}

Status ClusterShard::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, false);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  std::lock_guard lock(mu_);
  const Chain c = walk(key);
  if (c.at) return Status::kFound;
  return insert_new(key, c, value);
}

Status ClusterShard::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  std::lock_guard lock(mu_);
  const Chain c = walk(key);
  if (c.at) {
    rewrite(c.entry, key, value);
    return Status::kUpdated;
  }
  return insert_new(key, c, value);
}

Status ClusterShard::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  std::lock_guard lock(mu_);
  const Chain c = walk(key);
  if (!c.at) return Status::kNotFound;
  rewrite(c.entry, key, value);
  return Status::kUpdated;
}

Status ClusterShard::erase(uint64_t key) {
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  std::lock_guard lock(mu_);
  const Chain c = walk(key);
  if (!c.at) return Status::kNotFound;
  std::byte* base = region_.data();
  const uint64_t so = slot_off(c.at->bucket, c.at->slot);
  const uint32_t e = c.entry;
  node_store(base, so, 0);  // k is absent from here on
  // Retire the entry: not OCC, a new version, the next incarnation (stale slots reject it).
  const uint64_t ctrl = node_load(base, entry_off(e));
  node_store(base, entry_off(e), (((version_of(ctrl) + 1) & kVersionMask) << 32) | static_cast<uint32_t>(ctrl + 1));
  free_entries_.push_back(e);
  set_records(records_ - 1);
  return Status::kErased;
}

bool ClusterShard::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  if (!owns(key)) return false;
  if (put(key, value) == Status::kFull) {
    std::lock_guard lock(mu_);
    throw InvalidArgument("cluster shard " + std::to_string(node_) + " could not place key " + std::to_string(key) +
                          " after " + std::to_string(records_) + " records: " +
                          (free_entries_.empty() ? "its " + std::to_string(cfg_.entries_per_node) + " entries are in use"
                                                 : "its " + std::to_string(cfg_.pool_buckets_per_node) +
                                                       " indirect header buckets are in use") +
                          " (use a lower load factor)");
  }
  return true;
}

std::optional<std::vector<std::byte>> ClusterShard::find(uint64_t key) const {
  if (!owns(key)) return std::nullopt;
  const Layout l(cfg_);
  std::lock_guard lock(mu_);
  const Chain c = walk(key);
  if (!c.at) return std::nullopt;
  const uint32_t e = c.entry;
  std::vector<std::byte> v(cfg_.value_bytes + 8);
  for (uint32_t i = 0; i < l.val_padded; i += 8) store64(v.data() + i, node_load(region_.data(), entry_off(e) + l.val_off + i));
  v.resize(cfg_.value_bytes);
  return v;
}

std::optional<uint32_t> ClusterShard::chain_position(uint64_t key) const {
  std::lock_guard lock(mu_);
  const Chain c = walk(key);  // counted as it walks: the links may change after it (clients WRITE them)
  if (!c.at) return std::nullopt;
  return c.position;
}

std::vector<uint64_t> ClusterShard::keys() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  const uint64_t buckets = cfg_.main_buckets_per_node + next_pool_;
  for (uint64_t b = 0; b < buckets; ++b)  // main buckets, then the pool buckets allocated so far
    for (uint32_t s = 0; s < kEntrySlots; ++s)
      if (node_load(region_.data(), slot_off(b, s)) & kSlotEntry) out.push_back(node_load(region_.data(), slot_off(b, s) + 8));
  return out;
}

uint64_t ClusterShard::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

ClusterShardStats ClusterShard::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// --- memory-node side: the shards hosted here + the RPC handler ------------------------------------

struct ClusterServer::State {
  std::shared_ptr<detail::ShardHost<ClusterShard>> host;  // the handler co-owns it
};

ClusterServer::ClusterServer(Fabric& fabric, const ClusterConfig& cfg, uint16_t rpc_id)
    : cfg_(cfg), state_(std::make_shared<State>()) {
  cfg_.validate();
  state_->host = detail::ShardHost<ClusterShard>::create(fabric, cfg_, rpc_id, kClusterRpcFirst, kClusterRpcLast, "cluster", config_tag(cfg_));
}

ClusterServer::~ClusterServer() = default;

bool ClusterServer::hosts(uint32_t node) const { return state_->host->hosts(node); }
ClusterShard& ClusterServer::shard(uint32_t node) { return state_->host->shard(node); }

bool ClusterServer::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = cluster_place(cfg_, key).node;
  if (!hosts(node)) return false;
  return state_->host->shard(node).bulk_insert(key, value);
}

uint64_t ClusterServer::records() const { return state_->host->records(); }

ClusterShardStats ClusterServer::stats() const {
  ClusterShardStats t;
  state_->host->for_each_shard([&t](const ClusterShard& s) {
    const ClusterShardStats x = s.stats();
    t.inserts += x.inserts;
    t.pool_used += x.pool_used;
    t.full += x.full;
  });
  return t;
}

// --- client --------------------------------------------------------------------------------------

ClusterClient::ClusterClient(const ClusterConfig& cfg, Engine& engine, uint16_t rpc_id)
    : cfg_(cfg), engine_(engine), rpc_id_(rpc_id), cfg_tag_(config_tag(cfg)) {
  cfg_.validate();
  if (rpc_id < kClusterRpcFirst || rpc_id > kClusterRpcLast)
    throw InvalidArgument("cluster rpc id must be in [0x1000, 0x100F], got " + std::to_string(rpc_id));
  cache_.resize(cfg_.location_cache);
}

ClusterClient::CacheLine* ClusterClient::cache_line(uint32_t node, uint64_t bucket, bool for_fill) {
  if (cache_.empty()) return nullptr;
  const uint64_t tag = (uint64_t{node} << 33) | bucket;  // buckets < 2^32 + 1
  // Indexed by the bucket's place among all header buckets (as a CPU cache by address): a cache
  // at least as large as the table's header buckets holds all of them, without conflicts.
  const uint64_t place = uint64_t{node} * (cfg_.main_buckets_per_node + cfg_.pool_buckets_per_node) + bucket;
  CacheLine& l = cache_[place % cache_.size()];
  if (for_fill) {
    l.tag = tag;
    return &l;
  }
  return l.tag == tag ? &l : nullptr;
}

uint64_t ClusterClient::cached_slot(uint64_t key, CacheLine** line) {
  const ClusterPlacement p = cluster_place(cfg_, key);
  uint64_t b = p.bucket;
  for (uint64_t hop = 0; hop <= cfg_.pool_buckets_per_node; ++hop) {
    CacheLine* l = cache_line(p.node, b, false);
    if (!l) return 0;
    for (uint32_t s = 0; s < kEntrySlots; ++s) {
      const uint64_t meta = load64(l->bytes + s * 16);
      if ((meta & kSlotEntry) && load64(l->bytes + s * 16 + 8) == key && meta_index(meta) < cfg_.entries_per_node) {
        *line = l;
        return meta;
      }
    }
    const uint64_t link = load64(l->bytes + kEntrySlots * 16);
    if (!(link & kSlotLink) || meta_index(link) >= cfg_.pool_buckets_per_node) return 0;  // a cached miss proves nothing
    b = cfg_.main_buckets_per_node + meta_index(link);
  }
  return 0;
}

void ClusterClient::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes)
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes is larger than the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
  if (exact && value.size() != cfg_.value_bytes)
    throw InvalidArgument("value must be exactly " + std::to_string(cfg_.value_bytes) + " bytes, got " +
                          std::to_string(value.size()));
}

Task<ClusterSlotRef> ClusterClient::find_slot(uint64_t key) {
  const ClusterPlacement p = cluster_place(cfg_, key);
  std::byte buf[kClusterBucketBytes];
  uint64_t b = p.bucket;
  ClusterSlotRef ref{0, 0};
  // Links only point at pool buckets allocated later, so a chain has at most P+1 buckets; the
  // bound also stops a walk over a corrupt link.
  for (uint64_t hop = 0; hop <= cfg_.pool_buckets_per_node; ++hop) {
    co_await engine_.read(RemoteAddr{p.node, cfg_.buckets_offset() + b * kClusterBucketBytes}, buf, kClusterBucketBytes);
    ++ref.reads;
    if (CacheLine* l = cache_line(p.node, b, true)) std::memcpy(l->bytes, buf, kClusterBucketBytes);
    for (uint32_t s = 0; s < kEntrySlots; ++s) {
      const uint64_t meta = load64(buf + s * 16);
      if ((meta & kSlotEntry) && load64(buf + s * 16 + 8) == key && meta_index(meta) < cfg_.entries_per_node) {
        ref.meta = meta;
        co_return ref;  // meta != 0: a published slot has ENTRY set
      }
    }
    const uint64_t link = load64(buf + kEntrySlots * 16);
    if (!(link & kSlotLink) || meta_index(link) >= cfg_.pool_buckets_per_node) co_return ref;  // meta 0: no slot
    b = cfg_.main_buckets_per_node + meta_index(link);
  }
  throw FabricError("cluster: the chain of key " + std::to_string(key) + " on node " + std::to_string(p.node) +
                    " is longer than the pool (corrupt header buckets?)");
}

Task<ClusterEntryRead> ClusterClient::read_entry(uint64_t key, const ClusterSlotRef& slot, std::span<std::byte> value_out) {
  const ClusterPlacement p = cluster_place(cfg_, key);
  const Layout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  co_await engine_.read(RemoteAddr{p.node, cfg_.entries_offset() + uint64_t{meta_index(slot.meta)} * l.bytes}, rec.data(), l.bytes);
  const uint64_t ctrl = load64(rec.data());
  if (ctrl & kLock) co_return ClusterEntryRead::kUnstable;  // mid-update: re-read
  // Not the entry the slot published (retired, reused, or not yet written): the slot was stale.
  if (!(ctrl & kOcc) || (ctrl & kIncMask) != meta_inc(slot.meta)) co_return ClusterEntryRead::kStale;
  if (!l.consistent(rec.data())) co_return ClusterEntryRead::kUnstable;  // torn: re-read, never guess
  if (load64(rec.data() + 8) != key) co_return ClusterEntryRead::kStale;
  if (!value_out.empty()) std::memcpy(value_out.data(), rec.data() + l.val_off, std::min<size_t>(value_out.size(), cfg_.value_bytes));
  co_return ClusterEntryRead::kHit;
}

Task<OpResult> ClusterClient::get(uint64_t key, std::span<std::byte> value_out) {
  OpResult r;
  const ClusterPlacement p = cluster_place(cfg_, key);
  CacheLine* line = nullptr;
  if (const uint64_t meta = cached_slot(key, &line)) {
    const uint64_t tag = line->tag;
    // A cached slot is a slot read earlier: the entry READ judges it as any other (cluster.h).
    RetryDeadline deadline(cfg_.retry_budget);
    ClusterEntryRead e;
    while (true) {
      e = co_await read_entry(key, ClusterSlotRef{meta, 0}, value_out);
      ++r.chunks;
      if (e != ClusterEntryRead::kUnstable || deadline.expired()) break;
    }
    if (e == ClusterEntryRead::kHit) {
      r.status = Status::kFound;
      r.matches = 1;
      co_return r;
    }
    if (line->tag == tag) line->tag = ~0ULL;  // stale (or still unstable): READ the chain from memory
  }
  for (uint32_t attempt = 0; attempt < kStaleAttemptsBeforeRpc; ++attempt) {
    const ClusterSlotRef slot = co_await find_slot(key);
    r.chunks += slot.reads;
    if (slot.meta == 0) {
      // A walk to the chain's end: nothing moves, so a key present throughout would have been seen.
      r.status = Status::kNotFound;
      co_return r;
    }
    RetryDeadline deadline(cfg_.retry_budget);
    ClusterEntryRead e;
    while (true) {
      e = co_await read_entry(key, slot, value_out);
      ++r.chunks;
      if (e != ClusterEntryRead::kUnstable) break;
      if (deadline.expired())
        throw RetryBudgetExceeded("cluster: the entry of key " + std::to_string(key) + " on node " + std::to_string(p.node) +
                                  " stayed locked or inconsistent longer than the retry budget (did the memory node die mid-write?)");
    }
    if (e == ClusterEntryRead::kHit) {
      r.status = Status::kFound;
      r.matches = 1;
      co_return r;
    }
  }
  // Slots kept going stale under this lookup: ask the owner, under the shard's lock.
  const write_rpc::Result res =
      co_await write_rpc::call(engine_, "cluster", rpc_id_, p.node, cfg_tag_, write_rpc::kGet, key, {});
  r.status = res.status;
  if (res.status == Status::kFound) {
    if (res.value.size() != cfg_.value_bytes)
      throw FabricError("cluster: node " + std::to_string(p.node) + " returned a value of the wrong size");
    if (!value_out.empty()) std::memcpy(value_out.data(), res.value.data(), std::min(value_out.size(), res.value.size()));
    r.matches = 1;
  }
  co_return r;
}

Task<OpResult> ClusterClient::remote(uint8_t op, uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = cluster_place(cfg_, key).node;
  const write_rpc::Result res =
      co_await write_rpc::call(engine_, "cluster", rpc_id_, node, cfg_tag_, static_cast<write_rpc::Op>(op), key, value);
  OpResult r;
  r.status = res.status;
  r.matches = (r.status == Status::kFound || r.status == Status::kUpdated || r.status == Status::kErased) ? 1 : 0;
  co_return r;
}

Task<OpResult> ClusterClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, false);
  co_return co_await remote(write_rpc::kFindOrPut, key, value);
}

Task<OpResult> ClusterClient::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kPut, key, value);
}

Task<OpResult> ClusterClient::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kUpdate, key, value);
}

Task<OpResult> ClusterClient::erase(uint64_t key) {
  co_return co_await remote(write_rpc::kErase, key, {});
}

Task<OpResult> ClusterClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  std::vector<std::byte> value(values_out ? cfg_.value_bytes : 0);
  const OpResult r = co_await get(key, value);
  if (r.status == Status::kFound && values_out) values_out->insert(values_out->end(), value.begin(), value.end());
  co_return r;
}

Task<ClusterShardHeader> ClusterClient::read_header(uint32_t node) {
  if (node >= cfg_.memory_nodes) throw InvalidArgument("node " + std::to_string(node) + " holds no shard of this table");
  ClusterShardHeader h{};
  co_await engine_.read(RemoteAddr{node, 0}, &h, sizeof h);
  if (h.magic != kClusterMagic) throw FabricError("node " + std::to_string(node) + " holds no cluster table shard");
  if (h.value_bytes != cfg_.value_bytes || h.main_buckets != cfg_.main_buckets_per_node ||
      h.pool_buckets != cfg_.pool_buckets_per_node || h.entries != cfg_.entries_per_node || h.hash_seed != cfg_.hash_seed ||
      h.memory_nodes != cfg_.memory_nodes)
    throw InvalidArgument("cluster shard " + std::to_string(node) + " was built with a different configuration");
  co_return h;
}

}  // namespace rdmahash
