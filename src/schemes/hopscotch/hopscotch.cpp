// FaRM-KV's hopscotch hashing (volatile part). Layout, write protocol and the reader-safety
// argument are documented in include/rdmahash/hopscotch.h; this file follows them.
#include "rdmahash/hopscotch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
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

constexpr uint64_t kHeaderBytes = sizeof(HopscotchShardHeader);
constexpr uint64_t kRecordsOffset = 48;
constexpr uint64_t kBlocksUsedOffset = 72;
constexpr uint64_t kChainedOffset = 80;
constexpr uint32_t kMissAttemptsBeforeRpc = 16;

struct Layout : record::Layout {
  explicit Layout(const HopscotchConfig& c) : record::Layout(8, c.value_bytes, 0x40505ULL) {}
};

inline std::atomic_ref<uint64_t> word_ref(std::byte* base, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off));
}
inline uint64_t node_load(std::byte* base, uint64_t off) { return word_ref(base, off).load(std::memory_order_relaxed); }
inline void node_store(std::byte* base, uint64_t off, uint64_t v) { word_ref(base, off).store(v, std::memory_order_release); }

uint32_t config_tag(const HopscotchConfig& c) {
  uint64_t h = hash::mix64(c.hash_seed ^ kHopscotchMagic);
  for (uint64_t f : {uint64_t{c.memory_nodes}, c.home_slots_per_node, uint64_t{c.neighborhood}, uint64_t{c.value_bytes},
                     uint64_t{c.block_records}, c.overflow_blocks()})
    h = hash::mix64(h ^ f);
  return static_cast<uint32_t>(h);
}

}  // namespace

// --- configuration ------------------------------------------------------------------------------

HopscotchConfig HopscotchConfig::for_records(uint64_t records, double load_factor, uint32_t memory_nodes,
                                             uint32_t neighborhood) {
  if (!(load_factor > 0.0 && load_factor < 1.0))
    throw InvalidArgument("load factor must be in (0, 1), got " + std::to_string(load_factor));
  if (records == 0) throw InvalidArgument("records must be at least 1");
  if (memory_nodes == 0) throw InvalidArgument("memory nodes must be at least 1");
  HopscotchConfig c;
  c.memory_nodes = memory_nodes;
  c.neighborhood = neighborhood;
  const double slots = static_cast<double>(records) / (load_factor * memory_nodes);
  if (!(slots <= 0x1p32))
    throw InvalidArgument("load factor " + std::to_string(load_factor) + " is too small for " + std::to_string(records) +
                          " records: the table would need more than 2^32 slots per memory node");
  c.home_slots_per_node = std::max<uint64_t>(neighborhood, static_cast<uint64_t>(std::ceil(slots)));
  return c;
}

std::string hopscotch_config_error(const HopscotchConfig& c) {
  if (c.memory_nodes == 0) return "memory nodes must be at least 1";
  if (c.neighborhood < 2 || c.neighborhood > 64) return "neighborhood must be in [2, 64], got " + std::to_string(c.neighborhood);
  if (c.home_slots_per_node < c.neighborhood) return "home slots per node must be at least the neighborhood";
  if (c.home_slots_per_node > (1ULL << 32)) return "home slots per node must be at most 2^32";
  if (c.value_bytes > 120) return "value bytes must be at most 120, got " + std::to_string(c.value_bytes);
  if (c.max_probe < c.neighborhood) return "max probe must be at least the neighborhood";
  if (c.block_records < 1 || c.block_records > 64)
    return "overflow block records must be in [1, 64], got " + std::to_string(c.block_records);
  if (c.overflow_percent > 400) return "overflow percent must be at most 400, got " + std::to_string(c.overflow_percent);
  return {};
}

void HopscotchConfig::validate() const {
  if (auto e = hopscotch_config_error(*this); !e.empty()) throw InvalidArgument(e);
}

uint32_t HopscotchConfig::record_bytes() const { return Layout(*this).bytes; }
uint64_t HopscotchConfig::overflow_blocks() const {
  const uint64_t records = (home_slots_per_node * overflow_percent + 99) / 100;
  return (records + block_records - 1) / block_records;
}
uint64_t HopscotchConfig::region_bytes() const { return pool_offset() + overflow_blocks() * block_bytes(); }

HopscotchPlacement hopscotch_place(const HopscotchConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  HopscotchPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  p.home = hash::range(hash::mix64(h ^ 0xA0761D6478BD642FULL), c.home_slots_per_node);
  p.kbits = static_cast<uint32_t>(hash::mix64(h ^ 0x589965CC75374CC3ULL));
  return p;
}

// --- memory-node side: one shard --------------------------------------------------------------------

HopscotchShard::HopscotchShard(const HopscotchConfig& cfg, uint32_t node, std::span<std::byte> region)
    : cfg_(cfg), node_(node), region_(region) {
  cfg_.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index " + std::to_string(node) + " out of range");
  if (region.size() < cfg.region_bytes())
    throw InvalidArgument("region of " + std::to_string(region.size()) + " bytes is smaller than the hopscotch shard (" +
                          std::to_string(cfg.region_bytes()) + " bytes)");
  if (reinterpret_cast<uintptr_t>(region.data()) % 8 != 0) throw InvalidArgument("shard region must be 8-byte aligned");
  std::memset(region.data(), 0, cfg.region_bytes());
  HopscotchShardHeader h{};
  h.magic = kHopscotchMagic;
  h.neighborhood = cfg.neighborhood;
  h.key_bytes = 8;
  h.value_bytes = cfg.value_bytes;
  h.node = node;
  h.memory_nodes = cfg.memory_nodes;
  h.home_slots = cfg.home_slots_per_node;
  h.hash_seed = cfg.hash_seed;
  h.block_records = cfg.block_records;
  h.overflow_blocks = cfg.overflow_blocks();
  std::memcpy(region.data(), &h, sizeof h);
  stats_.overflow_blocks = cfg.overflow_blocks();
}

uint64_t HopscotchShard::off(uint64_t slot) const { return kHeaderBytes + slot * cfg_.record_bytes(); }
bool HopscotchShard::occupied(uint64_t slot) const { return node_load(region_.data(), off(slot)) & kOcc; }
uint64_t HopscotchShard::key_at(uint64_t slot) const { return node_load(region_.data(), off(slot) + 8); }
bool HopscotchShard::owns(uint64_t key) const { return hopscotch_place(cfg_, key).node == node_; }

void HopscotchShard::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

std::optional<HopscotchShard::Where> HopscotchShard::locate(uint64_t key, const HopscotchPlacement& p) const {
  std::byte* base = region_.data();
  auto holds = [&](uint64_t o) {
    const uint64_t ctrl = node_load(base, o);
    return (ctrl & kOcc) && static_cast<uint32_t>(ctrl) == p.kbits && node_load(base, o + 8) == key;
  };
  for (uint64_t s = p.home; s < p.home + cfg_.neighborhood; ++s)
    if (holds(off(s))) return Where{off(s), false};
  for (uint64_t b = node_load(base, head_off(p)); b != 0; b = node_load(base, b))
    for (uint32_t i = 0; i < cfg_.block_records; ++i)
      if (holds(b + 8 + uint64_t{i} * cfg_.record_bytes())) return Where{b + 8 + uint64_t{i} * cfg_.record_bytes(), true};
  return std::nullopt;
}

void HopscotchShard::write_new(uint64_t slot, uint64_t key, uint32_t kbits, std::span<const std::byte> value) {
  write_at(off(slot), key, kbits, value);
}

void HopscotchShard::write_at(uint64_t o, uint64_t key, uint32_t kbits, std::span<const std::byte> value) {
  const Layout l(cfg_);
  std::byte* base = region_.data();
  const uint64_t v = (version_of(node_load(base, o)) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  // The slot is not OCC: readers skip it until the ctrl store publishes it.
  for (uint32_t i = 8; i < l.bytes; i += 8) node_store(base, o + i, load64(rec.data() + i));
  node_store(base, o, make_ctrl(v, kbits));
}

void HopscotchShard::rewrite(uint64_t o, uint64_t key, std::span<const std::byte> value) {
  const Layout l(cfg_);
  std::byte* base = region_.data();
  const uint64_t ctrl = node_load(base, o);
  const uint64_t v = (version_of(ctrl) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  node_store(base, o, ctrl | kLock);
  for (uint32_t i = 8; i < l.bytes; i += 8) node_store(base, o + i, load64(rec.data() + i));
  node_store(base, o, make_ctrl(v, static_cast<uint32_t>(ctrl)));
}

void HopscotchShard::clear(uint64_t slot) { clear_at(off(slot)); }

void HopscotchShard::clear_at(uint64_t o) {
  std::byte* base = region_.data();
  const uint64_t ctrl = node_load(base, o);
  node_store(base, o, ((version_of(ctrl) + 1) & kVersionMask) << 32);
}

void HopscotchShard::move(uint64_t from, uint64_t to) {
  const Layout l(cfg_);
  std::byte* base = region_.data();
  std::vector<std::byte> rec(l.bytes);
  for (uint32_t i = 0; i < l.bytes; i += 8) store64(rec.data() + i, node_load(base, off(from) + i));
  const std::span<const std::byte> value(rec.data() + l.val_off, cfg_.value_bytes);
  // Copy first, then clear: in between the key is live in both slots with the same value.
  write_new(to, l.key(rec.data()), static_cast<uint32_t>(load64(rec.data())), value);
  if (move_hook_) move_hook_();
  clear(from);
  if (move_hook_) move_hook_();
}

void HopscotchShard::set_records(uint64_t n) {
  records_ = n;
  node_store(region_.data(), kRecordsOffset, n);
}

void HopscotchShard::set_chained(uint64_t n) {
  chained_ = n;
  node_store(region_.data(), kChainedOffset, n);
}

// An overflow block left empty by an erase goes back to the pool. Unlinking it may cut a reader
// that holds a pointer to it off the rest of the chain (and the block may next serve another
// group), so it is done inside a `moves` odd/even window, as a move is: a reader whose chain walk
// overlapped it sees `moves` change and walks again (hopscotch.h).
void HopscotchShard::unlink_if_empty(const HopscotchPlacement& p, uint64_t rec) {
  std::byte* base = region_.data();
  const uint64_t pool = cfg_.pool_offset();
  const uint64_t x = pool + (rec - pool) / cfg_.block_bytes() * cfg_.block_bytes();
  for (uint32_t i = 0; i < cfg_.block_records; ++i)
    if (node_load(base, x + 8 + uint64_t{i} * cfg_.record_bytes()) & kOcc) return;
  uint64_t link = head_off(p);  // the word that points at x: the head or the previous block's next
  while (node_load(base, link) != x) link = node_load(base, link);
  node_store(base, kHopscotchMovesOffset, ++moves_);  // odd: the chain changes shape
  node_store(base, link, node_load(base, x));
  if (chain_hook_) chain_hook_();
  node_store(base, kHopscotchMovesOffset, ++moves_);  // even: done
  free_blocks_.push_back(x);
  ++stats_.unlinks;
  node_store(base, kBlocksUsedOffset, blocks_used_ - free_blocks_.size());
}

// The key's neighbourhood is full and displacement could not free it: a free record of the group's
// chain, else a new pool block linked at the chain's head. Chain records never move.
HopscotchShardResult HopscotchShard::insert_chained(uint64_t key, const HopscotchPlacement& p,
                                                    std::span<const std::byte> value, uint32_t moved) {
  std::byte* base = region_.data();
  const uint64_t rb = cfg_.record_bytes();
  const uint64_t head = node_load(base, head_off(p));
  auto inserted = [&] {
    set_records(records_ + 1);
    set_chained(chained_ + 1);
    ++stats_.inserts;
    stats_.displacements += moved;
    return HopscotchShardResult{Status::kInserted, moved};
  };
  for (uint64_t b = head; b != 0; b = node_load(base, b))
    for (uint32_t i = 0; i < cfg_.block_records; ++i)
      if (!(node_load(base, b + 8 + i * rb) & kOcc)) {
        write_at(b + 8 + i * rb, key, p.kbits, value);  // payload, then ctrl: as a free slot
        return inserted();
      }
  uint64_t b = 0;
  if (!free_blocks_.empty()) {
    b = free_blocks_.back();  // unlinked earlier (unlink_if_empty), under the moves seqlock
    free_blocks_.pop_back();
  } else if (blocks_used_ < cfg_.overflow_blocks()) {
    b = cfg_.pool_offset() + blocks_used_++ * cfg_.block_bytes();
  } else {
    stats_.displacements += moved;
    ++stats_.full;
    return {Status::kFull, moved};  // the pool is exhausted
  }
  node_store(base, kBlocksUsedOffset, blocks_used_ - free_blocks_.size());
  // Fill the unlinked block (its record, its next pointer), THEN publish it with one 8-byte store
  // of the head: a reader that sees the new head sees the whole block (hopscotch.h).
  write_at(b + 8, key, p.kbits, value);
  node_store(base, b, head);
  if (chain_hook_) chain_hook_();
  node_store(base, head_off(p), b);
  if (chain_hook_) chain_hook_();
  return inserted();
}

HopscotchShardResult HopscotchShard::insert_new(uint64_t key, const HopscotchPlacement& p,
                                                std::span<const std::byte> value) {
  const uint64_t H = cfg_.neighborhood;
  const uint64_t end = std::min(cfg_.slots_per_node(), p.home + cfg_.max_probe);
  uint64_t f = p.home;
  while (f < end && occupied(f)) ++f;
  if (f == end) return insert_chained(key, p, value, 0);
  uint32_t moved = 0;
  while (f - p.home >= H) {
    // Every slot in [home, f) is occupied. Move back the farthest y in (f-H, f) whose own
    // neighbourhood still contains f.
    bool found = false;
    for (uint64_t j = f - H + 1; j < f; ++j) {
      const uint64_t yhome = hopscotch_place(cfg_, key_at(j)).home;
      if (f - yhome < H) {
        // Odd before the first move only: a search that moves nothing disturbs no reader.
        if (moved == 0) node_store(region_.data(), kHopscotchMovesOffset, ++moves_);  // odd: moves under way
        move(j, f);
        f = j;
        ++moved;
        found = true;
        break;
      }
    }
    if (!found) {
      if (moved) node_store(region_.data(), kHopscotchMovesOffset, ++moves_);  // even: done
      // Every key is still present and within its neighbourhood; this one goes to the chain.
      if (moved) ++stats_.displacing_inserts;
      return insert_chained(key, p, value, moved);
    }
  }
  if (moved) node_store(region_.data(), kHopscotchMovesOffset, ++moves_);  // even: done
  write_new(f, key, p.kbits, value);
  set_records(records_ + 1);
  ++stats_.inserts;
  if (moved) ++stats_.displacing_inserts;
  stats_.displacements += moved;
  return {Status::kInserted, moved};
}

HopscotchShardResult HopscotchShard::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, false);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (locate(key, p)) return {Status::kFound, 0};
  return insert_new(key, p, value);
}

HopscotchShardResult HopscotchShard::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    rewrite(at->at, key, value);
    return {Status::kUpdated, 0};
  }
  return insert_new(key, p, value);
}

HopscotchShardResult HopscotchShard::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    rewrite(at->at, key, value);
    return {Status::kUpdated, 0};
  }
  return {Status::kNotFound, 0};
}

HopscotchShardResult HopscotchShard::erase(uint64_t key) {
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    clear_at(at->at);
    set_records(records_ - 1);
    if (at->chained) {
      set_chained(chained_ - 1);
      unlink_if_empty(p, at->at);
    }
    return {Status::kErased, 0};
  }
  return {Status::kNotFound, 0};
}

bool HopscotchShard::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  if (!owns(key)) return false;
  if (put(key, value).status == Status::kFull) {
    std::lock_guard lock(mu_);
    throw InvalidArgument("hopscotch shard " + std::to_string(node_) + " could not place key " + std::to_string(key) +
                          ": its neighbourhood of " + std::to_string(cfg_.neighborhood) +
                          " slots is full and the overflow pool's " + std::to_string(cfg_.overflow_blocks()) +
                          " blocks are all in use, after " + std::to_string(records_) + " records in " +
                          std::to_string(cfg_.home_slots_per_node) +
                          " home slots: use a lower load factor or a larger --neighborhood");
  }
  return true;
}

std::optional<std::vector<std::byte>> HopscotchShard::find(uint64_t key) const {
  if (!owns(key)) return std::nullopt;
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  const Layout l(cfg_);
  std::lock_guard lock(mu_);
  const auto at = locate(key, p);
  if (!at) return std::nullopt;
  std::vector<std::byte> v(cfg_.value_bytes + 8);
  for (uint32_t i = 0; i < l.val_padded; i += 8) store64(v.data() + i, node_load(region_.data(), at->at + l.val_off + i));
  v.resize(cfg_.value_bytes);
  return v;
}

std::vector<uint64_t> HopscotchShard::keys() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (uint64_t s = 0; s < cfg_.slots_per_node(); ++s)
    if (occupied(s)) out.push_back(key_at(s));
  std::byte* base = region_.data();
  for (uint64_t b = 0; b < blocks_used_; ++b)  // unlinked blocks hold no live record
    for (uint32_t i = 0; i < cfg_.block_records; ++i) {
      const uint64_t o = cfg_.pool_offset() + b * cfg_.block_bytes() + 8 + uint64_t{i} * cfg_.record_bytes();
      if (node_load(base, o) & kOcc) out.push_back(node_load(base, o + 8));
    }
  return out;
}

uint64_t HopscotchShard::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

HopscotchShardStats HopscotchShard::stats() const {
  std::lock_guard lock(mu_);
  HopscotchShardStats s = stats_;
  s.chained = chained_;
  s.blocks_used = blocks_used_ - free_blocks_.size();
  return s;
}

// --- memory-node side: the shards hosted here + the RPC handler ------------------------------------

struct HopscotchServer::State {
  std::shared_ptr<detail::ShardHost<HopscotchShard>> host;  // the handler co-owns it
};

HopscotchServer::HopscotchServer(Fabric& fabric, const HopscotchConfig& cfg, uint16_t rpc_id)
    : cfg_(cfg), state_(std::make_shared<State>()) {
  cfg_.validate();
  state_->host = detail::ShardHost<HopscotchShard>::create(fabric, cfg_, rpc_id, kHopscotchRpcFirst, kHopscotchRpcLast, "hopscotch", config_tag(cfg_));
}

HopscotchServer::~HopscotchServer() = default;

bool HopscotchServer::hosts(uint32_t node) const { return state_->host->hosts(node); }
HopscotchShard& HopscotchServer::shard(uint32_t node) { return state_->host->shard(node); }

bool HopscotchServer::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = hopscotch_place(cfg_, key).node;
  if (!hosts(node)) return false;
  return state_->host->shard(node).bulk_insert(key, value);
}

uint64_t HopscotchServer::records() const { return state_->host->records(); }

HopscotchShardStats HopscotchServer::stats() const {
  HopscotchShardStats t;
  state_->host->for_each_shard([&t](const HopscotchShard& s) {
    const HopscotchShardStats x = s.stats();
    t.inserts += x.inserts;
    t.displacing_inserts += x.displacing_inserts;
    t.displacements += x.displacements;
    t.full += x.full;
    t.chained += x.chained;
    t.blocks_used += x.blocks_used;
    t.overflow_blocks += x.overflow_blocks;
    t.unlinks += x.unlinks;
  });
  return t;
}

// --- client --------------------------------------------------------------------------------------

HopscotchClient::HopscotchClient(const HopscotchConfig& cfg, Engine& engine, uint16_t rpc_id)
    : cfg_(cfg), engine_(engine), rpc_id_(rpc_id), cfg_tag_(config_tag(cfg)) {
  cfg_.validate();
  if (rpc_id < kHopscotchRpcFirst || rpc_id > kHopscotchRpcLast)
    throw InvalidArgument("hopscotch rpc id must be in [0x0F00, 0x0F0F], got " + std::to_string(rpc_id));
  moves_seen_.resize(cfg_.memory_nodes);
}

void HopscotchClient::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes)
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes is larger than the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
  if (exact && value.size() != cfg_.value_bytes)
    throw InvalidArgument("value must be exactly " + std::to_string(cfg_.value_bytes) + " bytes, got " +
                          std::to_string(value.size()));
}

HopscotchClient::Scan HopscotchClient::scan(const std::byte* recs, uint32_t n, uint64_t key,
                                            const HopscotchPlacement& p, std::span<std::byte> out) const {
  const Layout l(cfg_);
  bool unstable = false;
  for (uint32_t i = 0; i < n; ++i) {
    const std::byte* rec = recs + static_cast<size_t>(i) * l.bytes;
    const uint64_t ctrl = load64(rec);
    if (!(ctrl & kOcc) || static_cast<uint32_t>(ctrl) != p.kbits) continue;
    if ((ctrl & kLock) || !l.consistent(rec)) {
      unstable = true;  // caught mid-write or torn: re-read, never guess
      continue;
    }
    if (load64(rec + 8) != key) continue;
    if (!out.empty()) std::memcpy(out.data(), rec + l.val_off, std::min<size_t>(out.size(), cfg_.value_bytes));
    return Scan::kHit;
  }
  return unstable ? Scan::kUnstable : Scan::kMiss;
}

Task<std::optional<Status>> HopscotchClient::probe_once(uint64_t key, std::span<std::byte> value_out) {
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::vector<std::byte> buf(cfg_.read_bytes());
  co_await engine_.read(RemoteAddr{p.node, kHeaderBytes + p.home * cfg_.record_bytes()}, buf.data(), cfg_.read_bytes());
  const Scan s = scan(buf.data(), cfg_.neighborhood, key, p, value_out);
  if (s == Scan::kUnstable) co_return std::nullopt;
  co_return s == Scan::kHit ? Status::kFound : Status::kNotFound;
}

void HopscotchClient::check_pointer(uint32_t node, uint64_t ptr) const {
  const uint64_t first = cfg_.pool_offset();
  if (ptr < first || (ptr - first) % cfg_.block_bytes() != 0 || (ptr - first) / cfg_.block_bytes() >= cfg_.overflow_blocks())
    throw FabricError("hopscotch: node " + std::to_string(node) + " holds a chain pointer " + std::to_string(ptr) +
                      " that names no overflow block (a corrupt shard?)");
}

Task<HopscotchClient::Scan> HopscotchClient::scan_chain(uint64_t head, uint64_t key, const HopscotchPlacement& p,
                                                        std::span<std::byte> out, OpResult& r) {
  const uint32_t len = cfg_.block_bytes();
  std::vector<std::byte> buf(len);
  // A chain is at most the pool long. A longer walk followed pointers of blocks unlinked and
  // reused meanwhile (or a corrupt chain): kUnstable, the caller walks again or asks the node.
  uint64_t hops = 0;
  for (uint64_t b = head; b != 0; b = load64(buf.data())) {
    check_pointer(p.node, b);
    if (++hops > cfg_.overflow_blocks()) co_return Scan::kUnstable;
    RetryDeadline deadline(cfg_.retry_budget);
    Scan s;
    do {
      // The block's next pointer never changes once the block is linked; its records are checked.
      co_await engine_.read(RemoteAddr{p.node, b}, buf.data(), len);
      ++r.chunks;
      s = scan(buf.data() + 8, cfg_.block_records, key, p, out);
      if (s != Scan::kUnstable) break;
      if (deadline.expired())
        throw RetryBudgetExceeded("hopscotch: a chained record of key " + std::to_string(key) + " on node " +
                                  std::to_string(p.node) +
                                  " stayed locked or inconsistent longer than the retry budget (did the memory node die mid-write?)");
    } while (true);
    if (s == Scan::kHit) co_return Scan::kHit;
  }
  co_return Scan::kMiss;
}

Task<OpResult> HopscotchClient::get(uint64_t key, std::span<std::byte> value_out) {
  OpResult r;
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  const RemoteAddr addr{p.node, kHeaderBytes + p.home * cfg_.record_bytes()};
  const uint32_t len = cfg_.read_bytes();
  std::vector<std::byte> buf(len);
  // `moves` as read in an earlier, completed round trip: it precedes every READ below.
  std::optional<uint64_t> before = moves_seen_[p.node];
  for (uint32_t attempt = 0; attempt < kMissAttemptsBeforeRpc; ++attempt) {
    RetryDeadline deadline(cfg_.retry_budget);
    Scan s;
    do {
      co_await engine_.read(addr, buf.data(), len);
      ++r.chunks;
      s = scan(buf.data(), cfg_.neighborhood, key, p, value_out);
      if (s != Scan::kUnstable) break;
      if (deadline.expired())
        throw RetryBudgetExceeded("hopscotch: a record of key " + std::to_string(key) + " on node " +
                                  std::to_string(p.node) +
                                  " stayed locked or inconsistent longer than the retry budget (did the memory node die mid-write?)");
    } while (true);
    if (s == Scan::kHit) {
      r.status = Status::kFound;
      r.matches = 1;
      co_return r;
    }
    // A miss is trusted only if no displacement began or ended since `before`, and the group's chain
    // (its head READ in the same round trip, after the neighbourhood READ) lacks the key (hopscotch.h).
    uint64_t after = 0, head = 0;
    {
      Pending moves_read = engine_.read(RemoteAddr{p.node, kHopscotchMovesOffset}, &after, 8);
      Pending head_read = engine_.read(RemoteAddr{p.node, cfg_.heads_offset() + p.home / cfg_.neighborhood * 8}, &head, 8);
      co_await moves_read;
      co_await head_read;
    }
    moves_seen_[p.node] = after;
    bool walked = true;  // the chain, if any, was walked to its end
    if (head != 0) {
      // A hit needs no validation (a consistent record of the key is live). A miss does: a block
      // unlinked during the walk may have cut it short, and unlinks are in `moves` windows too.
      const Scan cs = co_await scan_chain(head, key, p, value_out, r);
      if (cs == Scan::kHit) {
        r.status = Status::kFound;
        r.matches = 1;
        co_return r;
      }
      walked = cs == Scan::kMiss;
      uint64_t end = 0;
      co_await engine_.read(RemoteAddr{p.node, kHopscotchMovesOffset}, &end, 8);
      moves_seen_[p.node] = end;
      if (end != after) walked = false;
      after = end;
    }
    if (walked && before && *before == after && (after & 1) == 0) {
      r.status = Status::kNotFound;
      co_return r;
    }
    before = after;
  }
  // Displacements kept overlapping this lookup: ask the owner, under the shard's lock.
  co_return co_await write_rpc::get(engine_, "hopscotch", rpc_id_, p.node, cfg_tag_, key, cfg_.value_bytes, value_out, r);
}

Task<OpResult> HopscotchClient::remote(uint8_t op, uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = hopscotch_place(cfg_, key).node;
  return write_rpc::write(engine_, "hopscotch", rpc_id_, node, cfg_tag_, static_cast<write_rpc::Op>(op), key, value);
}

Task<OpResult> HopscotchClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, false);
  co_return co_await remote(write_rpc::kFindOrPut, key, value);
}

Task<OpResult> HopscotchClient::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kPut, key, value);
}

Task<OpResult> HopscotchClient::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kUpdate, key, value);
}

Task<OpResult> HopscotchClient::erase(uint64_t key) { co_return co_await remote(write_rpc::kErase, key, {}); }

Task<OpResult> HopscotchClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  return get_all_by_get(key, cfg_.value_bytes, values_out);
}

Task<HopscotchShardHeader> HopscotchClient::read_header(uint32_t node) {
  if (node >= cfg_.memory_nodes) throw InvalidArgument("node " + std::to_string(node) + " holds no shard of this table");
  HopscotchShardHeader h{};
  co_await engine_.read(RemoteAddr{node, 0}, &h, sizeof h);
  if (h.magic != kHopscotchMagic) throw FabricError("node " + std::to_string(node) + " holds no hopscotch table shard");
  if (h.neighborhood != cfg_.neighborhood || h.value_bytes != cfg_.value_bytes ||
      h.home_slots != cfg_.home_slots_per_node || h.hash_seed != cfg_.hash_seed || h.memory_nodes != cfg_.memory_nodes ||
      h.block_records != cfg_.block_records || h.overflow_blocks != cfg_.overflow_blocks())
    throw InvalidArgument("hopscotch shard " + std::to_string(node) + " was built with a different configuration");
  moves_seen_[node] = h.moves;
  co_return h;
}

}  // namespace rdmahash
