// FaRM-KV's hopscotch hashing (volatile part). Layout, write protocol and the reader-safety
// argument are documented in include/rdmahash/hopscotch.h; this file follows them.
#include "rdmahash/hopscotch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
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
uint64_t HopscotchConfig::log_offset() const {
  return (pool_offset() + overflow_blocks() * block_bytes() + kCacheLine - 1) / kCacheLine * kCacheLine;
}
uint64_t HopscotchConfig::region_bytes() const { return log_offset() + (log_bytes() + kCacheLine - 1) / kCacheLine * kCacheLine; }

HopscotchPlacement hopscotch_place(const HopscotchConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  HopscotchPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  p.home = hash::range(hash::mix64(h ^ 0xA0761D6478BD642FULL), c.home_slots_per_node);
  p.kbits = static_cast<uint32_t>(hash::mix64(h ^ 0x589965CC75374CC3ULL));
  return p;
}

// --- memory-node side: one shard --------------------------------------------------------------------

namespace {

constexpr uint64_t kLogRewrite = 1;  // redo: write the record image at `to`
constexpr uint64_t kLogMove = 2;     // redo: write the record image at `to`, then clear `from`

// The geometry words of a header (magic, neighbourhood .. hash seed, overflow blocks), seeded by the
// magic: a flipped bit of the geometry is refused, not taken for another table.
uint64_t geometry_checksum(const HopscotchShardHeader& h) {
  uint64_t w[6];
  std::memcpy(w, &h, sizeof w);
  uint64_t c = hash::mix64(kHopscotchMagic ^ 0x5046524D4B56ULL);
  for (int i = 1; i < 6; ++i) c = hash::mix64(c ^ w[i]);
  return hash::mix64(c ^ h.overflow_blocks);
}

HopscotchShardHeader make_header(const HopscotchConfig& cfg, uint32_t node) {
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
  h.reserved[0] = geometry_checksum(h);
  return h;
}

// The log record's commit word: a checksum of everything else in it (never 0, the empty log), so a
// log whose lines were only partly persisted is told from a committed one.
uint64_t log_sum(uint64_t kind, uint64_t to, uint64_t from, const std::byte* rec, uint32_t rb) {
  uint64_t c = hash::mix64(0x4C4F47ULL ^ kind);
  c = hash::mix64(c ^ to);
  c = hash::mix64(c ^ from);
  for (uint32_t i = 0; i < rb; i += 8) c = hash::mix64(c ^ load64(rec + i));
  return c ? c : 1;
}

void check_shard_args(const HopscotchConfig& cfg, uint32_t node) {
  cfg.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index " + std::to_string(node) + " out of range");
}

}  // namespace

void hopscotch_check_image(std::span<const std::byte> image, const HopscotchConfig& cfg, uint32_t node) {
  if (image.size() < kHeaderBytes)
    throw PmemError("image of " + std::to_string(image.size()) + " bytes is shorter than the hopscotch header (truncated file?)");
  HopscotchShardHeader h{};
  std::memcpy(&h, image.data(), sizeof h);
  if (std::all_of(image.begin(), image.begin() + kHeaderBytes, [](std::byte b) { return b == std::byte{0}; }))
    throw PmemError("the header is all zero: not a hopscotch table image (an existing file is never formatted)");
  if (h.magic != kHopscotchMagic) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h.magic));
    throw PmemError(std::string("not a hopscotch table image (magic ") + buf + ")");
  }
  if (h.reserved[0] != geometry_checksum(h)) throw PmemError("corrupt hopscotch image: the header fails its checksum");
  if (h.key_bytes != 8 || h.neighborhood != cfg.neighborhood || h.value_bytes != cfg.value_bytes ||
      h.home_slots != cfg.home_slots_per_node || h.hash_seed != cfg.hash_seed || h.node != node ||
      h.memory_nodes != cfg.memory_nodes || h.block_records != cfg.block_records ||
      h.overflow_blocks != cfg.overflow_blocks())
    throw PmemError("hopscotch image was created with another geometry (" + std::to_string(h.home_slots) +
                    " home slots, neighborhood " + std::to_string(h.neighborhood) + ", " + std::to_string(h.value_bytes) +
                    "-byte values, " + std::to_string(h.overflow_blocks) + " overflow blocks, node " +
                    std::to_string(h.node) + " of " + std::to_string(h.memory_nodes) + ") than requested (" +
                    std::to_string(cfg.home_slots_per_node) + ", " + std::to_string(cfg.neighborhood) + ", " +
                    std::to_string(cfg.value_bytes) + ", " + std::to_string(cfg.overflow_blocks()) + ", node " +
                    std::to_string(node) + " of " + std::to_string(cfg.memory_nodes) + ")");
  if (image.size() < cfg.region_bytes())
    throw PmemError("hopscotch image is " + std::to_string(image.size()) + " bytes, its geometry needs " +
                    std::to_string(cfg.region_bytes()) + " (truncated file?)");
}

HopscotchShard::HopscotchShard(const HopscotchConfig& cfg, uint32_t node, std::span<std::byte> region)
    : cfg_(cfg), node_(node), region_(region) {
  check_shard_args(cfg_, node);
  if (region.size() < cfg.region_bytes())
    throw InvalidArgument("region of " + std::to_string(region.size()) + " bytes is smaller than the hopscotch shard (" +
                          std::to_string(cfg.region_bytes()) + " bytes)");
  if (reinterpret_cast<uintptr_t>(region.data()) % 8 != 0) throw InvalidArgument("shard region must be 8-byte aligned");
  std::memset(region.data(), 0, cfg.region_bytes());
  const HopscotchShardHeader h = make_header(cfg, node);
  std::memcpy(region.data(), &h, sizeof h);
  stats_.overflow_blocks = cfg.overflow_blocks();
}

HopscotchShard::HopscotchShard(const HopscotchConfig& cfg, uint32_t node, PersistentRegion& region)
    : cfg_(cfg), node_(node), region_(region.bytes()), pm_(&region) {
  check_shard_args(cfg_, node);
  if (region_.size() < kHeaderBytes)
    throw PmemError("image of " + std::to_string(region_.size()) + " bytes is shorter than the hopscotch header (truncated file?)");
  stats_.overflow_blocks = cfg.overflow_blocks();
  if (std::all_of(region_.begin(), region_.begin() + kHeaderBytes, [](std::byte b) { return b == std::byte{0}; })) {
    if (region_.size() < cfg.region_bytes())
      throw PmemError("region of " + std::to_string(region_.size()) + " bytes is smaller than the hopscotch shard (" +
                      std::to_string(cfg.region_bytes()) + " bytes)");
    format_pm();
  } else {
    recover();
  }
}

uint64_t HopscotchShard::ld(uint64_t o) const { return pm_ ? pm_->load(o) : node_load(region_.data(), o); }
void HopscotchShard::st(uint64_t o, uint64_t v) {
  if (pm_) pm_->store(o, v);
  else node_store(region_.data(), o, v);
}
void HopscotchShard::flush(uint64_t o, uint64_t len) {
  if (pm_) pm_->persist(o, len);
}

// A blank (zero-header) persistent region: the body cleared where it is not zero already (a new
// file is), the header's words, one persist of the whole shard, then the magic in its own persist
// (or not at all: format_unpublished, pm_table.h). A crash before the magic leaves an image every
// reopen refuses.
void HopscotchShard::format_pm() {
  clear_image_magic(*pm_);
  for (uint64_t o = kHeaderBytes; o < cfg_.region_bytes(); o += 8)
    if (pm_->load(o) != 0) pm_->store(o, 0);
  const HopscotchShardHeader h = make_header(cfg_, node_);
  uint64_t w[kHeaderBytes / 8];
  std::memcpy(w, &h, sizeof w);
  for (uint64_t i = 1; i < kHeaderBytes / 8; ++i) pm_->store(i * 8, w[i]);
  pm_->persist(0, cfg_.region_bytes());
  if (!cfg_.format_unpublished) {
    pm_->store(0, kHopscotchMagic);
    pm_->persist(0, 8);
  }
}

// Recovery of an existing image (hopscotch.h, "Persistent memory"): the header is checked, a
// committed log record is redone (a torn one, never applied, is dropped) and the log cleared; then
// every live record is checked (its check word, its place: a slot within its key's neighbourhood
// or a record of its group's chain), records of pool blocks no chain reaches (a new block filled
// but not linked) are cleared, and the counters are rebuilt.
void HopscotchShard::recover() {
  hopscotch_check_image(region_, cfg_, node_);
  recovered_ = true;
  const Layout l(cfg_);
  const uint32_t rb = l.bytes;
  const uint64_t H = cfg_.neighborhood;
  const uint64_t pool = cfg_.pool_offset(), bb = cfg_.block_bytes(), nb = cfg_.overflow_blocks();
  const uint64_t slots_end = off(cfg_.slots_per_node());
  auto record_at = [&](uint64_t o) {  // a record boundary of the slot array or of a pool block
    if (o >= kHeaderBytes && o < slots_end) return (o - kHeaderBytes) % rb == 0;
    if (o >= pool && o < pool + nb * bb) {
      const uint64_t in = (o - pool) % bb;
      return in >= 8 && (in - 8) % rb == 0;
    }
    return false;
  };
  std::vector<std::byte> rec(rb);
  const uint64_t lo = cfg_.log_offset();
  if (pm_->load(lo) != 0) {
    const uint64_t kind = pm_->load(lo + 8), to = pm_->load(lo + 16), from = pm_->load(lo + 24);
    for (uint32_t i = 0; i < rb; i += 8) store64(rec.data() + i, pm_->load(lo + kHopscotchLogHeaderBytes + i));
    if (pm_->load(lo) == log_sum(kind, to, from, rec.data(), rb)) {
      if ((kind != kLogRewrite && kind != kLogMove) || !record_at(to) || (kind == kLogMove && !record_at(from)) ||
          !l.consistent(rec.data()))
        throw PmemError("corrupt hopscotch image: a committed log record names no record");
      put_record(to, rec.data(), true);
      if (kind == kLogMove && (pm_->load(from) & kOcc)) clear_at(from);
    }
    log_clear();  // committed: redone; torn: its write never began (the log persist comes first)
    ++repairs_;
  }
  auto check_record = [&](uint64_t o, const char* where, uint64_t index, auto&& placed) {
    const uint64_t ctrl = pm_->load(o);
    if (ctrl & kLock)
      throw PmemError("corrupt hopscotch image: " + std::string(where) + " " + std::to_string(index) +
                      " is locked with no log record");
    if (!(ctrl & kOcc)) return false;
    for (uint32_t i = 0; i < rb; i += 8) store64(rec.data() + i, pm_->load(o + i));
    const HopscotchPlacement p = hopscotch_place(cfg_, l.key(rec.data()));
    if (!l.consistent(rec.data()) || p.node != node_ || p.kbits != static_cast<uint32_t>(ctrl) || !placed(p))
      throw PmemError("corrupt hopscotch image: " + std::string(where) + " " + std::to_string(index) +
                      " holds no consistent record of its place");
    return true;
  };
  uint64_t records = 0, chained = 0, linked = 0;
  for (uint64_t s = 0; s < cfg_.slots_per_node(); ++s)
    records += check_record(off(s), "slot", s, [&](const HopscotchPlacement& p) { return s >= p.home && s < p.home + H; });
  std::vector<bool> reached(nb, false);
  for (uint64_t g = 0; g < cfg_.groups(); ++g)
    for (uint64_t b = pm_->load(cfg_.heads_offset() + g * 8); b != 0; b = pm_->load(b)) {
      if (b < pool || b >= pool + nb * bb || (b - pool) % bb != 0 || reached[(b - pool) / bb])
        throw PmemError("corrupt hopscotch image: the chain of group " + std::to_string(g) +
                        " points outside the pool or into another chain");
      reached[(b - pool) / bb] = true;
      ++linked;
      for (uint32_t i = 0; i < cfg_.block_records; ++i)
        if (check_record(b + 8 + uint64_t{i} * rb, "chain record of group", g,
                         [&](const HopscotchPlacement& p) { return p.home / H == g; }))
          ++records, ++chained;
    }
  // Blocks no chain reaches hold no key: a block filled for a chain insert whose head store did not
  // persist. Their records are cleared so that the block can be linked again; all of them are free.
  for (uint64_t x = nb; x-- > 0;) {
    if (reached[x]) continue;
    for (uint32_t i = 0; i < cfg_.block_records; ++i) {
      const uint64_t o = pool + x * bb + 8 + uint64_t{i} * rb;
      if (pm_->load(o) & (kOcc | kLock)) {
        clear_at(o);
        ++repairs_;
      }
    }
    free_blocks_.push_back(pool + x * bb);
  }
  blocks_used_ = nb;
  moves_ = pm_->load(kHopscotchMovesOffset);
  if (moves_ & 1) pm_->store(kHopscotchMovesOffset, ++moves_);  // no displacement is under way
  set_records(records);
  set_chained(chained);
  pm_->store(kBlocksUsedOffset, linked);
  pm_->persist(0, kHeaderBytes);
}

uint64_t HopscotchShard::off(uint64_t slot) const { return kHeaderBytes + slot * cfg_.record_bytes(); }
bool HopscotchShard::occupied(uint64_t slot) const { return ld(off(slot)) & kOcc; }
uint64_t HopscotchShard::key_at(uint64_t slot) const { return ld(off(slot) + 8); }
bool HopscotchShard::owns(uint64_t key) const { return hopscotch_place(cfg_, key).node == node_; }

void HopscotchShard::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

// Every client can WRITE anywhere in the region (the rkey covers it), so a head or next word this
// CPU follows may name no block, or close a cycle: followed unchecked it would take the node's
// loads and stores outside the pool, or around the cycle forever with the shard's lock held. The
// RPC fails instead; the shard stays usable for other keys.
uint64_t HopscotchShard::checked_block(uint64_t b, uint64_t& hops) const {
  if (b == 0) return 0;
  const uint64_t pool = cfg_.pool_offset(), bb = cfg_.block_bytes();
  if (b < pool || (b - pool) % bb != 0 || (b - pool) / bb >= cfg_.overflow_blocks())
    throw std::runtime_error("hopscotch shard " + std::to_string(node_) + ": corrupt chain: pointer " + std::to_string(b) +
                             " names no overflow block");
  if (++hops > cfg_.overflow_blocks())
    throw std::runtime_error("hopscotch shard " + std::to_string(node_) + ": corrupt chain: a cycle (more links than blocks)");
  return b;
}

std::optional<HopscotchShard::Where> HopscotchShard::locate(uint64_t key, const HopscotchPlacement& p) const {
  auto holds = [&](uint64_t o) {
    const uint64_t ctrl = ld(o);
    return (ctrl & kOcc) && static_cast<uint32_t>(ctrl) == p.kbits && ld(o + 8) == key;
  };
  for (uint64_t s = p.home; s < p.home + cfg_.neighborhood; ++s)
    if (holds(off(s))) return Where{off(s), false};
  uint64_t hops = 0;
  for (uint64_t b = checked_block(ld(head_off(p)), hops); b != 0; b = checked_block(ld(b), hops))
    for (uint32_t i = 0; i < cfg_.block_records; ++i)
      if (holds(b + 8 + uint64_t{i} * cfg_.record_bytes())) return Where{b + 8 + uint64_t{i} * cfg_.record_bytes(), true};
  return std::nullopt;
}

void HopscotchShard::write_new(uint64_t slot, uint64_t key, uint32_t kbits, std::span<const std::byte> value) {
  write_at(off(slot), key, kbits, value);
}

// A whole record image (ctrl first) into the record at `o`. Unlogged (a free record: insert): the
// payload first, persisted, then the ctrl store that publishes it, persisted — 2 persists, and a
// crash leaves the record free or whole. Logged (the log record already holds the image): the
// stores, then one persist; recovery redoes the image if the crash came first.
void HopscotchShard::put_record(uint64_t o, const std::byte* rec, bool logged) {
  const uint32_t rb = cfg_.record_bytes();
  for (uint32_t i = 8; i < rb; i += 8) st(o + i, load64(rec + i));
  if (!logged) flush(o + 8, rb - 8);  // the payload is durable before the ctrl store publishes it
  st(o, load64(rec));
  if (logged) flush(o, rb);
  else flush(o, 8);
}

void HopscotchShard::write_at(uint64_t o, uint64_t key, uint32_t kbits, std::span<const std::byte> value) {
  const Layout l(cfg_);
  const uint64_t v = (version_of(ld(o)) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  store64(rec.data(), make_ctrl(v, kbits));
  // The slot is not OCC: readers skip it until the ctrl store publishes it.
  put_record(o, rec.data(), false);
}

// The redo log (PM only): the record image and where it goes, then the commit word (a checksum of
// the rest) last, and one persist of the whole log record.
void HopscotchShard::log_write(uint64_t kind, uint64_t to, uint64_t from, const std::byte* rec) {
  const uint64_t lo = cfg_.log_offset();
  const uint32_t rb = cfg_.record_bytes();
  st(lo + 8, kind);
  st(lo + 16, to);
  st(lo + 24, from);
  for (uint32_t i = 0; i < rb; i += 8) st(lo + kHopscotchLogHeaderBytes + i, load64(rec + i));
  st(lo, log_sum(kind, to, from, rec, rb));
  flush(lo, cfg_.log_bytes());
}

void HopscotchShard::log_clear() {
  st(cfg_.log_offset(), 0);
  flush(cfg_.log_offset(), 8);
}

// Update in place. On PM the new image is logged first (a crash mid-rewrite is redone from it),
// then written under LOCK, persisted, and the log cleared: 3 persists.
void HopscotchShard::rewrite(uint64_t o, uint64_t key, std::span<const std::byte> value) {
  const Layout l(cfg_);
  const uint64_t ctrl = ld(o);
  const uint64_t v = (version_of(ctrl) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  store64(rec.data(), make_ctrl(v, static_cast<uint32_t>(ctrl)));
  if (pm_) log_write(kLogRewrite, o, 0, rec.data());
  st(o, ctrl | kLock);
  for (uint32_t i = 8; i < l.bytes; i += 8) st(o + i, load64(rec.data() + i));
  st(o, load64(rec.data()));
  flush(o, l.bytes);
  if (pm_) log_clear();
}

void HopscotchShard::clear(uint64_t slot) { clear_at(off(slot)); }

void HopscotchShard::clear_at(uint64_t o) {
  const uint64_t ctrl = ld(o);
  st(o, ((version_of(ctrl) + 1) & kVersionMask) << 32);
  flush(o, 8);
}

// Copy first, then clear: in between the key is live in both slots with the same value. On PM the
// move writes two places, so it is logged (the copy's image, `to` and `from`): log, copy, clear,
// log cleared — 4 persists; a crash anywhere is redone to the completed move.
void HopscotchShard::move(uint64_t from, uint64_t to) {
  const Layout l(cfg_);
  std::vector<std::byte> old(l.bytes), rec(l.bytes);
  for (uint32_t i = 0; i < l.bytes; i += 8) store64(old.data() + i, ld(off(from) + i));
  const uint64_t v = (version_of(ld(off(to))) + 1) & kVersionMask;
  l.build(l.key(old.data()), v, std::span<const std::byte>(old.data() + l.val_off, cfg_.value_bytes), rec.data());
  store64(rec.data(), make_ctrl(v, static_cast<uint32_t>(load64(old.data()))));
  if (pm_) log_write(kLogMove, off(to), off(from), rec.data());
  put_record(off(to), rec.data(), pm_ != nullptr);
  if (move_hook_) move_hook_();
  clear(from);
  if (move_hook_) move_hook_();
  if (pm_) log_clear();
}

void HopscotchShard::set_records(uint64_t n) {
  records_ = n;
  st(kRecordsOffset, n);
}

void HopscotchShard::set_chained(uint64_t n) {
  chained_ = n;
  st(kChainedOffset, n);
}

// An overflow block left empty by an erase goes back to the pool. Unlinking it may cut a reader
// that holds a pointer to it off the rest of the chain (and the block may next serve another
// group), so it is done inside a `moves` odd/even window, as a move is: a reader whose chain walk
// overlapped it sees `moves` change and walks again (hopscotch.h). On PM the unlinking store is
// persisted (a crash before leaves an empty block linked, which is harmless).
void HopscotchShard::unlink_if_empty(const HopscotchPlacement& p, uint64_t rec) {
  const uint64_t pool = cfg_.pool_offset();
  const uint64_t x = pool + (rec - pool) / cfg_.block_bytes() * cfg_.block_bytes();
  for (uint32_t i = 0; i < cfg_.block_records; ++i)
    if (ld(x + 8 + uint64_t{i} * cfg_.record_bytes()) & kOcc) return;
  uint64_t link = head_off(p);  // the word that points at x: the head or the previous block's next
  uint64_t hops = 0;
  for (uint64_t next = ld(link); next != x; next = ld(link))
    if ((link = checked_block(next, hops)) == 0)
      throw std::runtime_error("hopscotch shard " + std::to_string(node_) + ": corrupt chain: block " + std::to_string(x) +
                               " is not on its group's chain");
  st(kHopscotchMovesOffset, ++moves_);  // odd: the chain changes shape
  st(link, ld(x));
  flush(link, 8);
  if (chain_hook_) chain_hook_();
  st(kHopscotchMovesOffset, ++moves_);  // even: done
  free_blocks_.push_back(x);
  ++stats_.unlinks;
  st(kBlocksUsedOffset, blocks_used_ - free_blocks_.size());
}

// The key's neighbourhood is full and displacement could not free it: a free record of the group's
// chain, else a new pool block linked at the chain's head. Chain records never move.
HopscotchShardResult HopscotchShard::insert_chained(uint64_t key, const HopscotchPlacement& p,
                                                    std::span<const std::byte> value, uint32_t moved) {
  const uint64_t rb = cfg_.record_bytes();
  const uint64_t head = ld(head_off(p));
  auto inserted = [&] {
    set_records(records_ + 1);
    set_chained(chained_ + 1);
    ++stats_.inserts;
    stats_.displacements += moved;
    return HopscotchShardResult{Status::kInserted, moved};
  };
  uint64_t hops = 0;
  for (uint64_t b = checked_block(head, hops); b != 0; b = checked_block(ld(b), hops))
    for (uint32_t i = 0; i < cfg_.block_records; ++i)
      if (!(ld(b + 8 + i * rb) & kOcc)) {
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
  st(kBlocksUsedOffset, blocks_used_ - free_blocks_.size());
  // Fill the unlinked block (its record, its next pointer), THEN publish it with one 8-byte store
  // of the head: a reader that sees the new head sees the whole block (hopscotch.h). On PM the
  // block is persisted whole before the head store, which is persisted: 2 persists.
  const Layout l(cfg_);
  const uint64_t v = (version_of(ld(b + 8)) + 1) & kVersionMask;
  std::vector<std::byte> rec(l.bytes);
  l.build(key, v, value, rec.data());
  store64(rec.data(), make_ctrl(v, p.kbits));
  for (uint32_t i = 8; i < l.bytes; i += 8) st(b + 8 + i, load64(rec.data() + i));
  st(b + 8, load64(rec.data()));
  st(b, head);
  flush(b, cfg_.block_bytes());
  if (chain_hook_) chain_hook_();
  st(head_off(p), b);
  flush(head_off(p), 8);
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
        if (moved == 0) st(kHopscotchMovesOffset, ++moves_);  // odd: moves under way
        move(j, f);
        f = j;
        ++moved;
        found = true;
        break;
      }
    }
    if (!found) {
      if (moved) st(kHopscotchMovesOffset, ++moves_);  // even: done
      // Every key is still present and within its neighbourhood; this one goes to the chain.
      if (moved) ++stats_.displacing_inserts;
      return insert_chained(key, p, value, moved);
    }
  }
  if (moved) st(kHopscotchMovesOffset, ++moves_);  // even: done
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
  const uint64_t before = persist_count();
  HopscotchShardResult r = insert_new(key, p, value);
  r.persists = static_cast<uint32_t>(persist_count() - before);
  stats_.insert_persists += r.persists;
  return r;
}

HopscotchShardResult HopscotchShard::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  const uint64_t before = persist_count();
  if (auto at = locate(key, p)) {
    rewrite(at->at, key, value);
    ++stats_.updates;
    const auto n = static_cast<uint32_t>(persist_count() - before);
    stats_.update_persists += n;
    return {Status::kUpdated, 0, n};
  }
  HopscotchShardResult r = insert_new(key, p, value);
  r.persists = static_cast<uint32_t>(persist_count() - before);
  stats_.insert_persists += r.persists;
  return r;
}

HopscotchShardResult HopscotchShard::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    const uint64_t before = persist_count();
    rewrite(at->at, key, value);
    ++stats_.updates;
    const auto n = static_cast<uint32_t>(persist_count() - before);
    stats_.update_persists += n;
    return {Status::kUpdated, 0, n};
  }
  return {Status::kNotFound, 0};
}

HopscotchShardResult HopscotchShard::erase(uint64_t key) {
  if (!owns(key)) throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard");
  const HopscotchPlacement p = hopscotch_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) {
    const uint64_t before = persist_count();
    clear_at(at->at);
    set_records(records_ - 1);
    ++stats_.erases;  // the record is gone from here on, even if the unlink below refuses a corrupt chain
    if (at->chained) {
      set_chained(chained_ - 1);
      unlink_if_empty(p, at->at);
    }
    const auto n = static_cast<uint32_t>(persist_count() - before);
    stats_.erase_persists += n;
    return {Status::kErased, 0, n};
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
  for (uint32_t i = 0; i < l.val_padded; i += 8) store64(v.data() + i, ld(at->at + l.val_off + i));
  v.resize(cfg_.value_bytes);
  return v;
}

std::vector<std::pair<uint64_t, std::vector<std::byte>>> HopscotchShard::items() const {
  const Layout l(cfg_);
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> out;
  auto take = [&](uint64_t o) {
    if (!(ld(o) & kOcc)) return;
    std::vector<std::byte> v(l.val_padded);
    for (uint32_t i = 0; i < l.val_padded; i += 8) store64(v.data() + i, ld(o + l.val_off + i));
    v.resize(cfg_.value_bytes);
    out.emplace_back(ld(o + 8), std::move(v));
  };
  for (uint64_t s = 0; s < cfg_.slots_per_node(); ++s) take(off(s));
  for (uint64_t b = 0; b < blocks_used_; ++b)  // unlinked blocks hold no live record
    for (uint32_t i = 0; i < cfg_.block_records; ++i)
      take(cfg_.pool_offset() + b * cfg_.block_bytes() + 8 + uint64_t{i} * cfg_.record_bytes());
  return out;
}

std::vector<uint64_t> HopscotchShard::keys() const {
  std::vector<uint64_t> out;
  for (auto& [k, v] : items()) out.push_back(k);
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

HopscotchServer::HopscotchServer(Fabric& fabric, const HopscotchConfig& cfg, PersistMode mode, uint16_t rpc_id)
    : cfg_(cfg), state_(std::make_shared<State>()) {
  cfg_.validate();
  state_->host = detail::ShardHost<HopscotchShard>::create(fabric, cfg_, mode, rpc_id, kHopscotchRpcFirst,
                                                          kHopscotchRpcLast, "hopscotch", config_tag(cfg_));
}

HopscotchServer::~HopscotchServer() = default;

bool HopscotchServer::hosts(uint32_t node) const { return state_->host->hosts(node); }
HopscotchShard& HopscotchServer::shard(uint32_t node) { return state_->host->shard(node); }
PersistentRegion& HopscotchServer::region(uint32_t node) { return state_->host->region(node); }
bool HopscotchServer::recovered() const { return state_->host->recovered(); }

std::string HopscotchServer::recovery_summary() const {
  uint64_t repairs = 0;
  state_->host->for_each_shard([&](const HopscotchShard& s) { repairs += s.recovery_repairs(); });
  return std::to_string(repairs) + " repairs (a log record redone or dropped, records of unlinked blocks cleared)";
}

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
    t.insert_persists += x.insert_persists;
    t.update_persists += x.update_persists;
    t.erase_persists += x.erase_persists;
    t.updates += x.updates;
    t.erases += x.erases;
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
  return write_rpc::write(engine_, "hopscotch", rpc_id_, node, cfg_tag_, static_cast<write_rpc::Op>(op), key, value,
                          &persists_);
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
