// 3-way cuckoo hashing. The layout, write protocol and the relocation-safety argument are
// documented in include/rdmahash/cuckoo.h; this file follows them.
#include "rdmahash/cuckoo.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/hash.h"
#include "schemes/batch_guard.h"
#include "schemes/record.h"
#include "schemes/retry.h"
#include "schemes/shard_host.h"
#include "schemes/write_rpc.h"

namespace rdmahash {
namespace {

using record::kLock;
using record::kOcc;
using record::kVersionMask;
constexpr uint64_t kHeaderBytes = sizeof(CuckooShardHeader);
constexpr uint64_t kIndexMask = (1ULL << 48) - 1;
// One-sided attempts of a lookup whose miss keeps overlapping relocations before it asks the
// owner by RPC (cuckoo.h, "Retries"). A miss rarely needs a second attempt; 16 in a row means a
// steady stream of relocations.
constexpr uint32_t kMissAttemptsBeforeRpc = 16;

using record::load64;
using record::make_ctrl;
using record::store64;
using record::version_of;

// Records (inline slots and heap records) use the shared format of schemes/record.h; the salt
// keeps cuckoo's checksums distinct from linear probing's.
struct RecordLayout : record::Layout {
  explicit RecordLayout(const CuckooConfig& c) : record::Layout(c.key_bytes, c.value_bytes, 0xC0C0ULL) {}
};

inline uint64_t record_key(const CuckooConfig& c, const std::byte* rec) { return RecordLayout(c).key(rec); }
inline bool consistent(const CuckooConfig&, const RecordLayout& l, const std::byte* rec) { return l.consistent(rec); }
// Fills the bytes after ctrl (key word, padded value, check for `version`).
inline void build_record(const CuckooConfig&, const RecordLayout& l, uint64_t key, uint64_t version,
                         std::span<const std::byte> value, std::byte* rec) {
  l.build(key, version, value, rec);
}

// Memory-node stores: 8-byte atomic releases, because one-sided readers load the same words
// concurrently (LocalFabric reads words with relaxed atomics). Release orders each store after the
// ones before it, which is what the publication protocol in cuckoo.h relies on: a reader that sees
// a store, after its batch's fence, sees everything the node stored before it.
inline std::atomic_ref<uint64_t> word_ref(std::byte* base, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off));
}
inline uint64_t node_load(std::byte* base, uint64_t off) { return word_ref(base, off).load(std::memory_order_relaxed); }
inline void node_store(std::byte* base, uint64_t off, uint64_t v) { word_ref(base, off).store(v, std::memory_order_release); }
void node_store_words(std::byte* base, uint64_t off, const std::byte* src, uint32_t len) {
  for (uint32_t i = 0; i < len; i += 8) node_store(base, off + i, load64(src + i));
}

// A hash of every field a client and the node must agree on; sent with each RPC.
uint32_t config_tag(const CuckooConfig& c) {
  uint64_t h = hash::mix64(c.hash_seed ^ kCuckooMagic);
  for (uint64_t f : {uint64_t{c.memory_nodes}, c.buckets_per_node, uint64_t{c.slots_per_bucket},
                     uint64_t{c.key_bytes}, uint64_t{c.value_bytes}, uint64_t{static_cast<uint8_t>(c.storage)}})
    h = hash::mix64(h ^ f);
  return static_cast<uint32_t>(h);
}

std::string fmt_factor(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", f);
  return buf;
}

}  // namespace

const char* to_string(CuckooStorage s) { return s == CuckooStorage::kInline ? "inline" : "heap"; }
const char* to_string(CuckooProbe p) { return p == CuckooProbe::kSequential ? "sequential" : "parallel"; }

// --- configuration --------------------------------------------------------------------------

CuckooConfig CuckooConfig::for_records(uint64_t records, double load_factor, uint32_t memory_nodes,
                                       uint32_t slots_per_bucket) {
  if (!(load_factor > 0.0 && load_factor < 1.0))
    throw InvalidArgument("load factor must be in (0, 1), got " + std::to_string(load_factor));
  if (records == 0) throw InvalidArgument("records must be at least 1");
  if (memory_nodes == 0) throw InvalidArgument("memory nodes must be at least 1");
  if (slots_per_bucket != 1 && slots_per_bucket != 4)
    throw InvalidArgument("slots per bucket must be 1 or 4, got " + std::to_string(slots_per_bucket));
  CuckooConfig c;
  c.memory_nodes = memory_nodes;
  c.slots_per_bucket = slots_per_bucket;
  const double buckets = static_cast<double>(records) / (load_factor * memory_nodes * slots_per_bucket);
  // Converting a double beyond 2^64 to an integer is undefined: refuse before the cast.
  if (!(buckets <= 0x1p32))
    throw InvalidArgument("load factor " + std::to_string(load_factor) + " is too small for " + std::to_string(records) +
                          " records: the table would need more than 2^32 buckets per memory node");
  c.buckets_per_node = std::max<uint64_t>(3, static_cast<uint64_t>(std::ceil(buckets)));
  return c;
}

std::string cuckoo_config_error(const CuckooConfig& c) {
  if (c.memory_nodes == 0) return "memory nodes must be at least 1";
  if (c.buckets_per_node < 3) return "buckets per node must be at least 3 (a key's 3 candidate buckets are distinct)";
  if (c.buckets_per_node > (1ULL << 32)) return "buckets per node must be at most 2^32";
  if (c.slots_per_bucket != 1 && c.slots_per_bucket != 4)
    return "slots per bucket must be 1 or 4, got " + std::to_string(c.slots_per_bucket);
  if (c.key_bytes != 4 && c.key_bytes != 8) return "key bytes must be 4 or 8, got " + std::to_string(c.key_bytes);
  // Inline buckets are READ whole (S records); a heap record is READ alone, so it may be larger.
  if (c.storage == CuckooStorage::kInline && c.value_bytes > 120)
    return "value bytes must be at most 120 for inline buckets, got " + std::to_string(c.value_bytes);
  if (c.value_bytes > 4096) return "value bytes must be at most 4096, got " + std::to_string(c.value_bytes);
  if (c.storage != CuckooStorage::kInline && c.storage != CuckooStorage::kHeap) return "storage must be inline or heap";
  if (c.max_displacements == 0 || c.max_displacements > (1u << 20))
    return "max displacements must be in [1, 2^20], got " + std::to_string(c.max_displacements);
  return {};
}

void CuckooConfig::validate() const {
  if (auto e = cuckoo_config_error(*this); !e.empty()) throw InvalidArgument(e);
}

uint32_t CuckooConfig::record_bytes() const { return RecordLayout(*this).bytes; }

uint32_t CuckooConfig::bucket_bytes() const {
  return storage == CuckooStorage::kHeap ? 8 : slots_per_bucket * record_bytes();
}

uint64_t CuckooConfig::heap_offset() const { return kHeaderBytes + buckets_per_node * bucket_bytes(); }

uint64_t CuckooConfig::region_bytes() const {
  return heap_offset() + (storage == CuckooStorage::kHeap ? slots_per_node() * record_bytes() : 0);
}

CuckooPlacement cuckoo_place(const CuckooConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  const uint64_t B = c.buckets_per_node;
  CuckooPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  // Three distinct buckets: draw from B, B-1, B-2 values and skip the ones already taken.
  const uint64_t b0 = hash::range(hash::mix64(h ^ 0xA0761D6478BD642FULL), B);
  uint64_t b1 = hash::range(hash::mix64(h ^ 0xE7037ED1A0B428DBULL), B - 1);
  if (b1 >= b0) ++b1;
  const uint64_t lo = std::min(b0, b1), hi = std::max(b0, b1);
  uint64_t b2 = hash::range(hash::mix64(h ^ 0x8EBC6AF09C88C6E3ULL), B - 2);
  if (b2 >= lo) ++b2;
  if (b2 >= hi) ++b2;
  p.buckets = {b0, b1, b2};
  const uint64_t f = hash::mix64(h ^ 0x589965CC75374CC3ULL);
  p.kbits = c.key_bytes == 4 ? static_cast<uint32_t>(key) : static_cast<uint32_t>(f);
  p.fp = c.slots_per_bucket == 4 ? static_cast<uint16_t>(1 + (f >> 32) % 255) : static_cast<uint16_t>(f >> 48);
  return p;
}

// --- memory-node side: one shard ----------------------------------------------------------------

CuckooShard::CuckooShard(const CuckooConfig& cfg, uint32_t node, std::span<std::byte> region)
    : cfg_(cfg), node_(node), region_(region) {
  cfg_.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index " + std::to_string(node) + " out of range");
  if (region.size() < cfg.region_bytes())
    throw InvalidArgument("region of " + std::to_string(region.size()) + " bytes is smaller than the cuckoo shard (" +
                          std::to_string(cfg.region_bytes()) + " bytes)");
  if (reinterpret_cast<uintptr_t>(region.data()) % 8 != 0) throw InvalidArgument("shard region must be 8-byte aligned");
  // Formatting happens before any client can reach the shard, so plain stores are fine here.
  std::memset(region.data(), 0, cfg.region_bytes());
  CuckooShardHeader h{};
  h.magic = kCuckooMagic;
  h.storage = static_cast<uint32_t>(cfg.storage);
  h.slots_per_bucket = cfg.slots_per_bucket;
  h.key_bytes = cfg.key_bytes;
  h.value_bytes = cfg.value_bytes;
  h.buckets = cfg.buckets_per_node;
  h.hash_seed = cfg.hash_seed;
  h.node = node;
  h.memory_nodes = cfg.memory_nodes;
  std::memcpy(region.data(), &h, sizeof h);
  if (cfg.storage == CuckooStorage::kHeap && cfg.slots_per_bucket == 4) {
    // Each bucket word carries the heap offset (in groups of 4 records) of its group.
    for (uint64_t b = 0; b < cfg.buckets_per_node; ++b) store64(region.data() + kHeaderBytes + 8 * b, b << 32);
  }
}

bool CuckooShard::owns(uint64_t key) const {
  if (cfg_.key_bytes == 4 && key > 0xffffffffULL) return false;
  return cuckoo_place(cfg_, key).node == node_;
}

void CuckooShard::check_key_value(uint64_t key, std::span<const std::byte> value, bool exact) const {
  if (cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit 4 key bytes");
  if (cuckoo_place(cfg_, key).node != node_)
    throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard than " + std::to_string(node_));
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

uint64_t CuckooShard::record_offset(uint64_t bucket, uint32_t slot) const {
  if (cfg_.storage == CuckooStorage::kInline)
    return kHeaderBytes + bucket * cfg_.bucket_bytes() + uint64_t{slot} * cfg_.record_bytes();
  return cfg_.heap_offset() + (bucket * cfg_.slots_per_bucket + slot) * cfg_.record_bytes();
}

bool CuckooShard::occupied(uint64_t bucket, uint32_t slot) const {
  std::byte* base = region_.data();
  if (cfg_.storage == CuckooStorage::kInline) return node_load(base, record_offset(bucket, slot)) & kOcc;
  const uint64_t w = node_load(base, kHeaderBytes + 8 * bucket);
  return cfg_.slots_per_bucket == 4 ? ((w >> (8 * slot)) & 0xff) != 0 : w != 0;
}

int CuckooShard::free_slot(uint64_t bucket) const {
  for (uint32_t s = 0; s < cfg_.slots_per_bucket; ++s)
    if (!occupied(bucket, s)) return static_cast<int>(s);
  return -1;
}

uint64_t CuckooShard::key_at(uint64_t bucket, uint32_t slot) const {
  const uint64_t off = record_offset(bucket, slot);
  std::byte* base = region_.data();
  return cfg_.key_bytes == 8 ? node_load(base, off + 8) : (node_load(base, off) & 0xffffffffULL);
}

std::optional<CuckooShard::Loc> CuckooShard::locate(uint64_t key, const CuckooPlacement& p) const {
  std::byte* base = region_.data();
  for (uint64_t b : p.buckets)
    for (uint32_t s = 0; s < cfg_.slots_per_bucket; ++s) {
      if (!occupied(b, s)) continue;
      if (static_cast<uint32_t>(node_load(base, record_offset(b, s))) != p.kbits) continue;
      if (key_at(b, s) == key) return Loc{b, s};
    }
  return std::nullopt;
}

void CuckooShard::write_new(const Loc& at, uint64_t key, std::span<const std::byte> value) {
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  const RecordLayout l(cfg_);
  std::byte* base = region_.data();
  const uint64_t off = record_offset(at.bucket, at.slot);
  const uint64_t old = node_load(base, off);
  const uint64_t v = (version_of(old) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  build_record(cfg_, l, key, v, value, rec.data());
  if (cfg_.storage == CuckooStorage::kInline) {
    // The slot's ctrl is not OCC, so readers skip it until the final ctrl store publishes it.
    node_store_words(base, off + 8, rec.data() + 8, l.bytes - 8);
    node_store(base, off, make_ctrl(v, p.kbits));
    return;
  }
  // Heap: the record's ctrl stays free (not OCC) until after the bucket word references it, so a
  // live record is always referenced (see cuckoo.h) and a reader holding a stale fingerprint never
  // accepts it early.
  node_store_words(base, off + 8, rec.data() + 8, l.bytes - 8);
  const uint64_t woff = kHeaderBytes + 8 * at.bucket;
  uint64_t w = node_load(base, woff);
  if (cfg_.slots_per_bucket == 4) w |= uint64_t{p.fp} << (8 * at.slot);
  else w = (uint64_t{p.fp} << 48) | (at.bucket + 1);
  node_store(base, woff, w);
  node_store(base, off, make_ctrl(v, p.kbits));
}

void CuckooShard::rewrite(const Loc& at, uint64_t key, std::span<const std::byte> value) {
  const RecordLayout l(cfg_);
  std::byte* base = region_.data();
  const uint64_t off = record_offset(at.bucket, at.slot);
  const uint64_t ctrl = node_load(base, off);
  const uint64_t v = (version_of(ctrl) + 1) & kVersionMask;
  if (l.bytes > 8) {
    std::vector<std::byte> rec(l.bytes);
    build_record(cfg_, l, key, v, value, rec.data());
    node_store(base, off, ctrl | kLock);  // readers re-read until the new version is published
    node_store_words(base, off + 8, rec.data() + 8, l.bytes - 8);
  }
  node_store(base, off, make_ctrl(v, static_cast<uint32_t>(ctrl)));
}

void CuckooShard::clear(const Loc& at) {
  std::byte* base = region_.data();
  const uint64_t off = record_offset(at.bucket, at.slot);
  const uint64_t ctrl = node_load(base, off);
  // Not OCC, version bumped: the record stops being live in one store; its position never repeats
  // a version, so a torn read across this change fails the check.
  node_store(base, off, ((version_of(ctrl) + 1) & kVersionMask) << 32);
  if (cfg_.storage == CuckooStorage::kHeap) {
    const uint64_t woff = kHeaderBytes + 8 * at.bucket;
    const uint64_t w = node_load(base, woff);
    node_store(base, woff, cfg_.slots_per_bucket == 4 ? (w & ~(0xffULL << (8 * at.slot))) : 0);
  }
}

void CuckooShard::move(const Loc& from, const Loc& to) {
  const RecordLayout l(cfg_);
  std::byte* base = region_.data();
  const uint64_t off = record_offset(from.bucket, from.slot);
  std::vector<std::byte> rec(l.bytes);
  for (uint32_t i = 0; i < l.bytes; i += 8) store64(rec.data() + i, node_load(base, off + i));
  const uint64_t key = record_key(cfg_, rec.data());
  // Copy first, then clear: in between the key is live in both slots with the same value.
  write_new(to, key, std::span<const std::byte>(rec.data() + l.val_off, cfg_.value_bytes));
  clear(from);
}

void CuckooShard::set_records(uint64_t n) {
  records_ = n;
  node_store(region_.data(), 48, n);
}

CuckooShardResult CuckooShard::insert_new(uint64_t key, const CuckooPlacement& p, std::span<const std::byte> value) {
  for (uint64_t b : p.buckets) {
    const int s = free_slot(b);
    if (s >= 0) {
      write_new(Loc{b, static_cast<uint32_t>(s)}, key, value);
      set_records(records_ + 1);
      ++stats_.inserts;
      return {Status::kInserted, 0};
    }
  }
  // Breadth-first search for the shortest displacement path (libcuckoo's approach). Every queued
  // bucket is new (`seen`), so a path never visits a bucket twice and applying it is valid. Each
  // queued bucket is one candidate move examined; at most max_displacements are examined.
  bfs_.clear();
  std::unordered_set<uint64_t> seen;
  for (uint64_t b : p.buckets) {
    bfs_.push_back(Step{b, -1, 0});
    seen.insert(b);
  }
  uint64_t examined = 0;
  int found = -1, hole_slot = -1;
  for (size_t head = 0; head < bfs_.size(); ++head) {
    const uint64_t b = bfs_[head].bucket;
    if (const int s = free_slot(b); s >= 0) {
      found = static_cast<int>(head);
      hole_slot = s;
      break;
    }
    for (uint32_t s = 0; s < cfg_.slots_per_bucket && examined < cfg_.max_displacements; ++s) {
      const CuckooPlacement q = cuckoo_place(cfg_, key_at(b, s));
      for (uint64_t alt : q.buckets) {
        if (alt == b || seen.count(alt)) continue;
        if (examined >= cfg_.max_displacements) break;
        ++examined;
        seen.insert(alt);
        bfs_.push_back(Step{alt, static_cast<int32_t>(head), s});
      }
    }
  }
  if (found < 0) {
    ++stats_.full;
    return {Status::kFull, 0};  // nothing was written
  }
  // Apply the path from its free end back to the new key: each move lands in a free slot. The odd
  // `moves` value tells one-sided readers that a miss they see now may be a key in flight.
  node_store(region_.data(), kCuckooMovesOffset, ++moves_);
  Loc hole{bfs_[found].bucket, static_cast<uint32_t>(hole_slot)};
  uint32_t moved = 0;
  for (int i = found; bfs_[i].parent >= 0; i = bfs_[i].parent) {
    const Loc src{bfs_[bfs_[i].parent].bucket, bfs_[i].slot_in_parent};
    move(src, hole);
    hole = src;
    ++moved;
  }
  write_new(hole, key, value);
  node_store(region_.data(), kCuckooMovesOffset, ++moves_);
  set_records(records_ + 1);
  ++stats_.inserts;
  ++stats_.relocating_inserts;
  stats_.displacements += moved;
  stats_.max_path = std::max<uint64_t>(stats_.max_path, moved);
  return {Status::kInserted, moved};
}

CuckooShardResult CuckooShard::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_key_value(key, value, false);
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (locate(key, p)) return {Status::kFound, 0};
  return insert_new(key, p, value);
}

CuckooShardResult CuckooShard::put(uint64_t key, std::span<const std::byte> value) {
  check_key_value(key, value, true);
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    rewrite(*at, key, value);
    return {Status::kUpdated, 0};
  }
  return insert_new(key, p, value);
}

CuckooShardResult CuckooShard::update(uint64_t key, std::span<const std::byte> value) {
  check_key_value(key, value, true);
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    rewrite(*at, key, value);
    return {Status::kUpdated, 0};
  }
  return {Status::kNotFound, 0};
}

CuckooShardResult CuckooShard::erase(uint64_t key) {
  check_key_value(key, {}, false);
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    clear(*at);
    set_records(records_ - 1);
    return {Status::kErased, 0};
  }
  return {Status::kNotFound, 0};
}

bool CuckooShard::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  if (cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit 4 key bytes");
  if (!owns(key)) return false;
  const CuckooShardResult r = put(key, value);
  if (r.status == Status::kFull) {
    std::lock_guard lock(mu_);
    throw InvalidArgument("cuckoo shard " + std::to_string(node_) + " could not place key " +
                          std::to_string(key) + " within " + std::to_string(cfg_.max_displacements) +
                          " displacements; it reached load factor " +
                          fmt_factor(static_cast<double>(records_) / static_cast<double>(capacity())) + " (" +
                          std::to_string(records_) + " of " + std::to_string(capacity()) +
                          " slots): use a lower load factor, 4-slot buckets or more max displacements");
  }
  return true;
}

std::optional<std::vector<std::byte>> CuckooShard::find(uint64_t key) const {
  if (!owns(key)) return std::nullopt;
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  const RecordLayout l(cfg_);
  std::lock_guard lock(mu_);
  auto at = locate(key, p);
  if (!at) return std::nullopt;
  std::vector<std::byte> rec(l.bytes);
  const uint64_t off = record_offset(at->bucket, at->slot);
  for (uint32_t i = 0; i < l.bytes; i += 8) store64(rec.data() + i, node_load(region_.data(), off + i));
  return std::vector<std::byte>(rec.begin() + l.val_off, rec.begin() + l.val_off + cfg_.value_bytes);
}

std::vector<uint64_t> CuckooShard::keys() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (uint64_t b = 0; b < cfg_.buckets_per_node; ++b)
    for (uint32_t s = 0; s < cfg_.slots_per_bucket; ++s)
      if (occupied(b, s)) out.push_back(key_at(b, s));
  return out;
}

uint64_t CuckooShard::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

double CuckooShard::load_factor() const { return static_cast<double>(records()) / static_cast<double>(capacity()); }

CuckooShardStats CuckooShard::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// --- memory-node side: the table's shards on this process + the RPC handler ----------------------

struct CuckooServer::State {
  std::shared_ptr<detail::ShardHost<CuckooShard>> host;  // the handler co-owns it
};

CuckooServer::CuckooServer(Fabric& fabric, const CuckooConfig& cfg, uint16_t rpc_id)
    : cfg_(cfg), state_(std::make_shared<State>()) {
  cfg_.validate();
  state_->host = detail::ShardHost<CuckooShard>::create(fabric, cfg_, rpc_id, kCuckooRpcFirst, kCuckooRpcLast, "cuckoo", config_tag(cfg_));
}

CuckooServer::~CuckooServer() = default;

bool CuckooServer::hosts(uint32_t node) const { return state_->host->hosts(node); }
CuckooShard& CuckooServer::shard(uint32_t node) { return state_->host->shard(node); }

bool CuckooServer::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  if (cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit 4 key bytes");
  const uint32_t node = cuckoo_place(cfg_, key).node;
  if (!hosts(node)) return false;
  return state_->host->shard(node).bulk_insert(key, value);
}

uint64_t CuckooServer::build(std::span<const uint64_t> keys, std::span<const std::byte> values) {
  const uint32_t vb = cfg_.value_bytes;
  if (!values.empty() && values.size() != keys.size() * vb)
    throw InvalidArgument("values must hold keys.size() * value_bytes = " + std::to_string(keys.size() * vb) + " bytes");
  // Validate everything first so that a bad key fails the build before anything is stored.
  uint64_t local = 0, slots = 0;
  for (uint64_t k : keys) {
    if (cfg_.key_bytes == 4 && k > 0xffffffffULL)
      throw InvalidArgument("key " + std::to_string(k) + " does not fit 4 key bytes");
    local += hosts(cuckoo_place(cfg_, k).node);
  }
  for (uint32_t n = 0; n < cfg_.memory_nodes; ++n) slots += hosts(n) ? cfg_.slots_per_node() : 0;
  const std::vector<std::byte> zeros(vb);
  const uint64_t before = records();
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto v = values.empty() ? std::span<const std::byte>(zeros) : values.subspan(i * vb, vb);
    try {
      bulk_insert(keys[i], v);
    } catch (const InvalidArgument& e) {
      const double reached = slots ? static_cast<double>(records()) / static_cast<double>(slots) : 0.0;
      const double wanted = slots ? static_cast<double>(before + local) / static_cast<double>(slots) : 0.0;
      throw InvalidArgument("cuckoo build failed: reached load factor " + fmt_factor(reached) + " of the " +
                            fmt_factor(wanted) + " requested (" + std::to_string(records() - before) + " of " +
                            std::to_string(local) + " records placed). " + e.what());
    }
  }
  return records() - before;
}

uint64_t CuckooServer::records() const { return state_->host->records(); }

double CuckooServer::load_factor() const {
  uint64_t slots = 0;
  state_->host->for_each_shard([&slots](const CuckooShard& s) { slots += s.capacity(); });
  return slots ? static_cast<double>(records()) / static_cast<double>(slots) : 0.0;
}

CuckooShardStats CuckooServer::stats() const {
  CuckooShardStats t;
  state_->host->for_each_shard([&t](const CuckooShard& s) {
    const CuckooShardStats x = s.stats();
    t.inserts += x.inserts;
    t.relocating_inserts += x.relocating_inserts;
    t.displacements += x.displacements;
    t.max_path = std::max(t.max_path, x.max_path);
    t.full += x.full;
  });
  return t;
}

// --- client -----------------------------------------------------------------------------------

CuckooClient::CuckooClient(const CuckooConfig& cfg, CuckooProbe probe, Engine& engine, uint64_t seed, uint16_t rpc_id)
    : cfg_(cfg), probe_(probe), engine_(engine), rng_(seed), rpc_id_(rpc_id), cfg_tag_(config_tag(cfg)) {
  cfg_.validate();
  if (probe != CuckooProbe::kSequential && probe != CuckooProbe::kParallel) throw InvalidArgument("unknown probe mode");
  if (rpc_id < kCuckooRpcFirst || rpc_id > kCuckooRpcLast)
    throw InvalidArgument("cuckoo rpc id must be in [0x0C00, 0x0C0F], got " + std::to_string(rpc_id));
  moves_seen_.resize(cfg_.memory_nodes);
}

void CuckooClient::validate_key(uint64_t key) const {
  if (cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit 4 key bytes");
}

void CuckooClient::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes)
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes is larger than the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
  if (exact && value.size() != cfg_.value_bytes)
    throw InvalidArgument("value must be exactly " + std::to_string(cfg_.value_bytes) + " bytes, got " +
                          std::to_string(value.size()));
}

std::array<uint32_t, kCuckooWays> CuckooClient::order() {
  if (probe_ == CuckooProbe::kParallel) return {0, 1, 2};  // all posted together: order is moot
  rng_ += 0x9E3779B97F4A7C15ULL;  // splitmix64: a fresh random permutation per operation
  static constexpr std::array<std::array<uint32_t, 3>, 6> kPerms{
      {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};
  return kPerms[hash::range(hash::mix64(rng_), 6)];
}

CuckooClient::Scan CuckooClient::scan(const std::byte* records, uint32_t count, uint64_t key,
                                      const CuckooPlacement& p, std::span<std::byte> out) const {
  const RecordLayout l(cfg_);
  bool unstable = false;
  for (uint32_t i = 0; i < count; ++i) {
    const std::byte* rec = records + static_cast<size_t>(i) * l.bytes;
    const uint64_t ctrl = load64(rec);
    if (!(ctrl & kOcc) || static_cast<uint32_t>(ctrl) != p.kbits) continue;
    if ((ctrl & kLock) || !consistent(cfg_, l, rec)) {
      unstable = true;  // caught mid-write (or torn): re-read, never guess
      continue;
    }
    if (cfg_.key_bytes == 8 && load64(rec + 8) != key) continue;
    if (!out.empty()) std::memcpy(out.data(), rec + l.val_off, std::min<size_t>(out.size(), cfg_.value_bytes));
    return Scan::kHit;
  }
  return unstable ? Scan::kUnstable : Scan::kMiss;
}

Task<CuckooClient::Scan> CuckooClient::reread(RemoteAddr addr, uint32_t len, uint32_t count, std::byte* buf,
                                              uint64_t key, const CuckooPlacement& p, std::span<std::byte> out,
                                              uint32_t* chunks) {
  // A writer is the node's CPU inside one critical section: only a dead or stalled node CPU
  // keeps a record unstable for long. Bounded by time (cuckoo.h, "Retries").
  RetryDeadline deadline(cfg_.retry_budget);
  do {
    co_await engine_.read(addr, buf, len);
    if (chunks) ++*chunks;
    const Scan s = scan(buf, count, key, p, out);
    if (s != Scan::kUnstable) co_return s;
  } while (!deadline.expired());
  throw RetryBudgetExceeded("cuckoo: record at offset " + std::to_string(addr.offset) + " on node " + std::to_string(addr.node) +
                            " stayed locked or inconsistent longer than the retry budget (did the memory node die mid-write?)");
}

Task<bool> CuckooClient::probe_inline(uint64_t key, const CuckooPlacement& p,
                                      const std::array<uint32_t, kCuckooWays>& ord, std::span<std::byte> out,
                                      uint32_t& chunks) {
  const uint32_t bb = cfg_.bucket_bytes();
  const uint32_t S = cfg_.slots_per_bucket;
  std::vector<std::byte> buf(size_t{kCuckooWays} * bb);
  auto addr = [&](uint32_t i) { return RemoteAddr{p.node, kHeaderBytes + p.buckets[ord[i]] * bb}; };
  if (probe_ == CuckooProbe::kParallel) {
    std::vector<Pending> reads;
    reads.reserve(kCuckooWays);
    for (uint32_t i = 0; i < kCuckooWays; ++i) reads.push_back(engine_.read(addr(i), buf.data() + i * bb, bb));
    chunks += kCuckooWays;
    for (Pending& r : reads) co_await r;  // the first wait posts all k: one round trip
  }
  for (uint32_t i = 0; i < kCuckooWays; ++i) {
    std::byte* b = buf.data() + i * bb;
    if (probe_ == CuckooProbe::kSequential) {
      co_await engine_.read(addr(i), b, bb);
      ++chunks;
    }
    Scan s = scan(b, S, key, p, out);
    if (s == Scan::kUnstable) s = co_await reread(addr(i), bb, S, b, key, p, out, &chunks);
    if (s == Scan::kHit) co_return true;
  }
  co_return false;
}

Task<bool> CuckooClient::check_records(uint64_t key, const CuckooPlacement& p, const std::vector<uint64_t>& offsets,
                                       std::span<std::byte> out) {
  if (offsets.empty()) co_return false;
  const uint32_t rb = cfg_.record_bytes();
  std::vector<std::byte> buf(offsets.size() * rb);
  std::vector<Pending> reads;
  reads.reserve(offsets.size());
  for (size_t j = 0; j < offsets.size(); ++j)
    reads.push_back(engine_.read(RemoteAddr{p.node, offsets[j]}, buf.data() + j * rb, rb));
  for (Pending& r : reads) co_await r;
  for (size_t j = 0; j < offsets.size(); ++j) {
    Scan s = scan(buf.data() + j * rb, 1, key, p, out);
    if (s == Scan::kUnstable)
      s = co_await reread(RemoteAddr{p.node, offsets[j]}, rb, 1, buf.data() + j * rb, key, p, out, nullptr);
    if (s == Scan::kHit) co_return true;
  }
  co_return false;
}

Task<bool> CuckooClient::probe_heap(uint64_t key, const CuckooPlacement& p,
                                    const std::array<uint32_t, kCuckooWays>& ord, std::span<std::byte> out,
                                    uint32_t& chunks) {
  const uint32_t rb = cfg_.record_bytes();
  const uint64_t heap = cfg_.heap_offset();
  std::array<uint64_t, kCuckooWays> words{};
  auto addr = [&](uint32_t i) { return RemoteAddr{p.node, kHeaderBytes + p.buckets[ord[i]] * 8}; };
  // Records whose fingerprint matches, from the offset stored in the (atomically read) word.
  auto matches = [&](uint64_t w, std::vector<uint64_t>& offsets) {
    if (cfg_.slots_per_bucket == 4) {
      const uint64_t group = w >> 32;
      for (uint32_t s = 0; s < 4; ++s)
        if (((w >> (8 * s)) & 0xff) == p.fp) offsets.push_back(heap + (group * 4 + s) * rb);
    } else if (w != 0 && (w >> 48) == p.fp) {
      offsets.push_back(heap + ((w & kIndexMask) - 1) * rb);
    }
  };
  std::vector<uint64_t> offsets;
  if (probe_ == CuckooProbe::kParallel) {
    std::vector<Pending> reads;
    reads.reserve(kCuckooWays);
    for (uint32_t i = 0; i < kCuckooWays; ++i) reads.push_back(engine_.read(addr(i), &words[i], 8));
    chunks += kCuckooWays;
    for (Pending& r : reads) co_await r;
    for (uint32_t i = 0; i < kCuckooWays; ++i) matches(words[i], offsets);
    co_return co_await check_records(key, p, offsets, out);  // every match in one more round trip
  }
  for (uint32_t i = 0; i < kCuckooWays; ++i) {
    co_await engine_.read(addr(i), &words[i], 8);
    ++chunks;
    offsets.clear();
    matches(words[i], offsets);
    if (co_await check_records(key, p, offsets, out)) co_return true;
  }
  co_return false;
}

Task<OpResult> CuckooClient::get(uint64_t key, std::span<std::byte> value_out) {
  return get_from(key, value_out, std::nullopt, 0, 0, true);
}

Task<OpResult> CuckooClient::get_from(uint64_t key, std::span<std::byte> value_out, std::optional<uint64_t> before,
                                      uint32_t first_attempt, uint32_t chunks, bool before_from_cache) {
  validate_key(key);  // in the task: a bad key fails its own operation (run_many), as every get's
  OpResult r;
  r.chunks = chunks;
  const CuckooPlacement p = cuckoo_place(cfg_, key);
  // The relocation counter as read in an earlier, completed round trip: every READ below is posted
  // in a later batch, so this value precedes them all (the "before" of the miss check in cuckoo.h).
  if (before_from_cache) before = moves_seen_[p.node];
  const auto ord = order();
  for (uint32_t attempt = first_attempt; attempt < kMissAttemptsBeforeRpc; ++attempt) {
    const bool hit = cfg_.storage == CuckooStorage::kInline ? co_await probe_inline(key, p, ord, value_out, r.chunks)
                                                            : co_await probe_heap(key, p, ord, value_out, r.chunks);
    if (hit) {
      r.status = Status::kFound;
      r.matches = 1;
      co_return r;
    }
    // A miss is trusted only if no relocation began or ended since `before` (see cuckoo.h).
    uint64_t after = 0;
    co_await engine_.read(RemoteAddr{p.node, kCuckooMovesOffset}, &after, 8);
    moves_seen_[p.node] = after;
    if (before && *before == after && (after & 1) == 0) {
      r.status = Status::kNotFound;
      co_return r;
    }
    before = after;
  }
  // Relocations kept overlapping this lookup (a steady stream of inserts that displace can do so
  // indefinitely): ask the owner, which answers under the shard's lock, where no relocation can
  // overlap. One RPC; the lookup linearizes inside it. See cuckoo.h, "Retries".
  co_return co_await write_rpc::get(engine_, "cuckoo", rpc_id_, p.node, cfg_tag_, key, cfg_.value_bytes, value_out, r);
}

Task<void> CuckooClient::visit_from(uint64_t key, uint32_t value_bytes, GetVisitor& v, std::optional<uint64_t> before,
                                    uint32_t attempt, uint32_t chunks) {
  std::vector<std::byte> buf(value_bytes);  // zeroed, as KvClient::get_visit's
  const OpResult r = co_await get_from(key, buf, before, attempt, chunks, false);
  v.on_get(key, r, r.status == Status::kFound ? std::span<const std::byte>(buf) : std::span<const std::byte>());
}

struct CuckooClient::BatchState {
  struct Key {  // a key in flight
    uint64_t index, key;
    CuckooPlacement place;
    std::optional<uint64_t> before;  // the miss check's "before": moves_seen_ when the key joined
    bool checking;                   // its buckets all missed: this round READs `moves`
    OpStats stats;
    std::chrono::steady_clock::time_point start;  // the batch boundary it joined at
  };
  struct Leaving {  // goes on as get_from
    Key k;
    std::optional<uint64_t> before;
    uint32_t attempt;
  };
  std::vector<Key> active;
  std::vector<Leaving> leaving;
  std::vector<Request> reqs;
  std::vector<std::byte> bufs;   // per active key, kCuckooWays buckets (or the moves word)
  std::vector<std::byte> value;  // on_get's value buffer
  bool running = false;          // not reentrant (done must not call get_batch)
};

CuckooClient::~CuckooClient() = default;

bool CuckooClient::get_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of,
                             uint32_t value_bytes, GetVisitor& v,
                             const std::function<void(const Engine::Completion&)>& done) {
  if (cfg_.storage != CuckooStorage::kInline || probe_ != CuckooProbe::kParallel) return false;
  if (count == 0) return true;
  if (depth == 0) depth = 1;
  if (!batch_) batch_ = std::make_unique<BatchState>();
  BatchState& b = *batch_;
  const BatchReentryGuard running(b.running, "CuckooClient::get_batch");
  b.active.clear();
  b.leaving.clear();
  b.value.assign(value_bytes, std::byte{0});
  engine_.restart_clock();
  const uint32_t bb = cfg_.bucket_bytes();
  const size_t stride = size_t{kCuckooWays} * bb;
  auto finish = [&](const BatchState::Key& k, std::exception_ptr error) {
    done(Engine::Completion{k.index, k.stats,
                            std::chrono::duration_cast<std::chrono::nanoseconds>(engine_.batch_clock() - k.start),
                            std::move(error)});
  };
  // Rounds, as get's attempts: up to `depth` keys in flight, new keys joining as others are
  // answered; each round one batch of every key's next READs (k buckets, or the moves word).
  uint64_t issued = 0;
  while (issued < count || !b.active.empty()) {
    while (b.active.size() < depth && issued < count) {
      const uint64_t index = issued++;
      const uint64_t key = key_of(index);
      try {
        validate_key(key);
      } catch (const InvalidArgument&) {  // fails its own key, as get's task would
        done(Engine::Completion{index, OpStats{}, std::chrono::nanoseconds(0), std::current_exception()});
        continue;
      }
      const CuckooPlacement p = cuckoo_place(cfg_, key);
      b.active.push_back(BatchState::Key{index, key, p, moves_seen_[p.node], false, OpStats{}, engine_.batch_clock()});
    }
    if (b.active.empty()) break;
    b.bufs.resize(b.active.size() * stride);
    b.reqs.clear();
    for (size_t a = 0; a < b.active.size(); ++a) {
      const BatchState::Key& k = b.active[a];
      std::byte* buf = b.bufs.data() + a * stride;
      if (k.checking) {
        Request r;
        r.addr = RemoteAddr{k.place.node, kCuckooMovesOffset};
        r.buf = buf;
        r.len = 8;
        b.reqs.push_back(r);
        continue;
      }
      for (uint32_t i = 0; i < kCuckooWays; ++i) {
        Request r;
        r.addr = RemoteAddr{k.place.node, kHeaderBytes + k.place.buckets[i] * bb};
        r.buf = buf + i * bb;
        r.len = bb;
        b.reqs.push_back(r);
      }
    }
    const std::string error = engine_.execute_batch(b.reqs);
    size_t kept = 0, q = 0;
    for (size_t a = 0; a < b.active.size(); ++a) {
      BatchState::Key& k = b.active[a];
      const std::byte* buf = b.bufs.data() + a * stride;
      const uint32_t n = k.checking ? 1 : kCuckooWays;
      bool failed = false;
      ++k.stats.round_trips;
      for (uint32_t i = 0; i < n; ++i, ++q) {
        ++k.stats.reads;
        k.stats.bytes += b.reqs[q].len;
        failed |= b.reqs[q].status != ReqStatus::kOk;
      }
      if (failed) {  // as an awaited failed READ: FabricError in that key's get
        finish(k, std::make_exception_ptr(FabricError(error)));
        continue;
      }
      OpResult r;
      r.chunks = kCuckooWays;
      if (k.checking) {  // get's miss check (cuckoo.h, "Why a one-sided reader is never wrong")
        const uint64_t after = load64(buf);
        moves_seen_[k.place.node] = after;
        if (k.before && *k.before == after && (after & 1) == 0) {
          r.status = Status::kNotFound;
          v.on_get(k.key, r, {});
          finish(k, nullptr);
        } else {
          b.leaving.push_back(BatchState::Leaving{k, after, 1});  // get's next attempt
        }
        continue;
      }
      Scan s = Scan::kMiss;
      std::fill(b.value.begin(), b.value.end(), std::byte{0});
      for (uint32_t i = 0; i < kCuckooWays && s == Scan::kMiss; ++i)
        s = scan(buf + i * bb, cfg_.slots_per_bucket, k.key, k.place, b.value);
      if (s == Scan::kHit) {
        r.status = Status::kFound;
        r.matches = 1;
        v.on_get(k.key, r, b.value);
        finish(k, nullptr);
      } else if (s == Scan::kUnstable) {
        b.leaving.push_back(BatchState::Leaving{k, k.before, 0});  // a whole get, from its first probe
      } else {
        k.checking = true;
        b.active[kept++] = k;
      }
    }
    b.active.resize(kept);
    if (!b.leaving.empty()) {
      const auto left = engine_.batch_clock();
      engine_.run_many(
          b.leaving.size(), static_cast<uint32_t>(b.leaving.size()),
          [&](uint64_t i) {
            const BatchState::Leaving& l = b.leaving[i];
            return visit_from(l.k.key, value_bytes, v, l.before, l.attempt, kCuckooWays);  // bucket READs so far
          },
          [&](const Engine::Completion& c) {
            const BatchState::Key& k = b.leaving[c.index].k;
            OpStats st = k.stats;
            st.add(c.stats);
            done(Engine::Completion{k.index, st,
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(left - k.start) + c.latency, c.error});
          });
      b.leaving.clear();
    }
  }
  return true;
}

Task<OpResult> CuckooClient::remote(uint8_t op, uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = cuckoo_place(cfg_, key).node;
  return write_rpc::write(engine_, "cuckoo", rpc_id_, node, cfg_tag_, static_cast<write_rpc::Op>(op), key, value);
}

// Coroutines (not plain functions returning a Task) so that a bad key or value surfaces from the
// awaited operation like every other error, and no request is issued for it.
Task<OpResult> CuckooClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, false);
  co_return co_await remote(write_rpc::kFindOrPut, key, value);
}

Task<OpResult> CuckooClient::put(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, true);
  co_return co_await remote(write_rpc::kPut, key, value);
}

Task<OpResult> CuckooClient::update(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, true);
  co_return co_await remote(write_rpc::kUpdate, key, value);
}

Task<OpResult> CuckooClient::erase(uint64_t key) {
  validate_key(key);
  co_return co_await remote(write_rpc::kErase, key, {});
}

Task<OpResult> CuckooClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  return get_all_by_get(key, cfg_.value_bytes, values_out);
}

Task<CuckooShardHeader> CuckooClient::read_header(uint32_t node) {
  if (node >= cfg_.memory_nodes) throw InvalidArgument("node " + std::to_string(node) + " holds no shard of this table");
  CuckooShardHeader h{};
  co_await engine_.read(RemoteAddr{node, 0}, &h, sizeof h);
  if (h.magic != kCuckooMagic) throw FabricError("node " + std::to_string(node) + " holds no cuckoo table shard");
  if (h.storage != static_cast<uint32_t>(cfg_.storage) || h.slots_per_bucket != cfg_.slots_per_bucket ||
      h.key_bytes != cfg_.key_bytes || h.value_bytes != cfg_.value_bytes || h.buckets != cfg_.buckets_per_node ||
      h.hash_seed != cfg_.hash_seed || h.memory_nodes != cfg_.memory_nodes)
    throw InvalidArgument("cuckoo shard " + std::to_string(node) + " was built with a different configuration");
  moves_seen_[node] = h.moves;
  co_return h;
}

}  // namespace rdmahash
