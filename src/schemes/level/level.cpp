// Level hashing (OSDI'18) on the persist choke point. Layout, write protocol, crash states and the
// read protocol are documented in include/rdmahash/level.h; this file follows them.
#include "rdmahash/level.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/hash.h"
#include "schemes/record.h"
#include "schemes/shard_host.h"
#include "schemes/write_rpc.h"

namespace rdmahash {
namespace {

using record::kOcc;
using record::kVersionMask;
using record::load64;
using record::make_ctrl;
using record::store64;
using record::version_of;

constexpr uint64_t kSeqShift = 32;
constexpr uint64_t kTokenBits = 0xF;
constexpr uint64_t kResizingBit = 1ULL << 8;
constexpr uint32_t kMaxRetries = 1u << 22;
// Batches that stopped only at a slot outside the seq window before one asks the node (kGet): an
// old item whose buckets change between every two batches (level.h, "Old items").
constexpr uint32_t kOldItemReads = 4;

struct SlotLayout : record::Layout {
  explicit SlotLayout(const LevelConfig& c) : record::Layout(8, c.value_bytes, 0x1E7E1ULL) {}
};

uint64_t seq_of(uint64_t w) { return (w >> kSeqShift) & kVersionMask; }
uint64_t make_token(uint64_t bits, uint64_t seq) { return (bits & kTokenBits) | ((seq & kVersionMask) << kSeqShift); }
bool not_after(uint64_t pub, uint64_t s) { return ((s - pub) & kVersionMask) < (1ULL << 28); }

uint64_t header_checksum(const LevelHeader& h) { return image_header_checksum(&h, kLevelMagic); }

uint32_t config_tag(const LevelConfig& c) {
  uint64_t h = hash::mix64(c.hash_seed ^ kLevelMagic);
  for (uint64_t f : {uint64_t{c.memory_nodes}, c.base_buckets, uint64_t{c.max_resizes}, uint64_t{c.value_bytes}})
    h = hash::mix64(h ^ f);
  return static_cast<uint32_t>(h);
}

// The candidate buckets of a key in `level` (one if both hashes agree).
std::vector<uint64_t> candidates(const LevelConfig& c, const LevelPlacement& p, uint32_t level) {
  const uint64_t n = c.level_buckets(level), a = p.h1 % n, b = p.h2 % n;
  if (a == b) return {a};
  return {a, b};
}

}  // namespace

LevelWord LevelWord::decode(uint64_t w) {
  return {static_cast<uint32_t>(w & 0xFF), (w & kResizingBit) != 0, seq_of(w)};
}
uint64_t LevelWord::encode() const {
  return uint64_t{top & 0xFF} | (resizing ? kResizingBit : 0) | ((seq & kVersionMask) << kSeqShift);
}

// --- configuration ------------------------------------------------------------------------------

LevelConfig LevelConfig::for_records(uint64_t records, double load_factor, uint32_t memory_nodes, uint32_t max_resizes) {
  if (!(load_factor > 0.0 && load_factor < 1.0))
    throw InvalidArgument("load factor must be in (0, 1), got " + std::to_string(load_factor));
  if (records == 0) throw InvalidArgument("records must be at least 1");
  if (memory_nodes == 0) throw InvalidArgument("memory nodes must be at least 1");
  LevelConfig c;
  c.memory_nodes = memory_nodes;
  c.max_resizes = max_resizes;
  const double n = static_cast<double>(records) / (load_factor * memory_nodes * 12.0);
  // Converting a double beyond 2^64 to an integer is undefined: refuse before the cast.
  if (!(n <= 0x1p32))
    throw InvalidArgument("load factor " + std::to_string(load_factor) + " is too small for " + std::to_string(records) +
                          " records: the table would need more than 2^32 base buckets per memory node");
  c.base_buckets = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(n)));
  return c;
}

std::string level_config_error(const LevelConfig& c) {
  if (c.memory_nodes == 0) return "memory nodes must be at least 1";
  if (c.base_buckets < 1 || c.base_buckets > (1ULL << 32))
    return "base buckets per node must be in [1, 2^32], got " + std::to_string(c.base_buckets);
  if (c.max_resizes > 8) return "max resizes must be at most 8, got " + std::to_string(c.max_resizes);
  if (c.value_bytes > 120) return "value bytes must be at most 120, got " + std::to_string(c.value_bytes);
  return {};
}

void LevelConfig::validate() const {
  if (auto e = level_config_error(*this); !e.empty()) throw InvalidArgument(e);
}

uint32_t LevelConfig::slot_bytes() const { return SlotLayout(*this).bytes; }

uint32_t level_resizes_for(const LevelConfig& c, uint64_t capacity) {
  uint32_t r = 1;
  const double per_level_pair = 12.0 * static_cast<double>(c.base_buckets) * c.memory_nodes;
  while (r < 8 && 0.75 * per_level_pair * static_cast<double>(1ULL << r) < static_cast<double>(capacity)) ++r;
  return r;
}

void level_check_image(std::span<const std::byte> image, const LevelConfig& cfg, uint32_t node) {
  if (image.size() < kLevelHeaderBytes)
    throw PmemError("image of " + std::to_string(image.size()) + " bytes is shorter than the level header (truncated file?)");
  LevelHeader h{};
  std::memcpy(&h, image.data(), sizeof h);
  static_assert(sizeof h == kImageHeaderBytes);
  check_image_frame(&h, "level", kLevelMagic, kLevelFormatVersion);  // magic, version, checksum
  if (h.header_bytes != kLevelHeaderBytes || h.base_buckets != cfg.base_buckets || h.max_resizes != cfg.max_resizes ||
      h.value_bytes != cfg.value_bytes || h.hash_seed != cfg.hash_seed || h.node != node ||
      h.memory_nodes != cfg.memory_nodes || h.region_bytes != cfg.region_bytes())
    throw PmemError("level image was created with another geometry (" + std::to_string(h.base_buckets) +
                    " base buckets, " + std::to_string(h.max_resizes) + " resizes, " + std::to_string(h.value_bytes) +
                    "-byte values, node " + std::to_string(h.node) + " of " + std::to_string(h.memory_nodes) +
                    ") than requested (" + std::to_string(cfg.base_buckets) + ", " +
                    std::to_string(cfg.max_resizes) + ", " + std::to_string(cfg.value_bytes) + ", node " +
                    std::to_string(node) + " of " + std::to_string(cfg.memory_nodes) + ")");
  if (image.size() < cfg.region_bytes())
    throw PmemError("level image is " + std::to_string(image.size()) + " bytes, its header says " +
                    std::to_string(cfg.region_bytes()) + " (truncated file?)");
  uint64_t records = 0;
  std::memcpy(&records, image.data() + kLevelRecordsOffset, 8);
  if (cfg.records != 0 && records != 0 && records != cfg.records)
    throw PmemError("level image was loaded with " + std::to_string(records) + " records, requested " +
                    std::to_string(cfg.records) + " (same geometry, another data set: its keys are not the run's)");
}

LevelPlacement level_place(const LevelConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  LevelPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  p.h1 = hash::mix64(h ^ 0xA0761D6478BD642FULL);
  p.h2 = hash::mix64(h ^ 0xE7037ED1A0B428DBULL);
  p.kbits = static_cast<uint32_t>(hash::mix64(h ^ 0x589965CC75374CC3ULL));
  return p;
}

// --- memory-node side ---------------------------------------------------------------------------

LevelShard::LevelShard(const LevelConfig& cfg, uint32_t node, PersistentRegion& region)
    : cfg_(cfg), node_(node), region_(region) {
  cfg_.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index " + std::to_string(node) + " out of range");
  const uint64_t have = region.bytes().size();
  if (have < kLevelAreaOffset)
    throw PmemError("image of " + std::to_string(have) + " bytes is shorter than the level header (truncated file?)");
  bool zero = true;
  for (size_t i = 0; i < kLevelAreaOffset; ++i) zero &= region.bytes()[i] == std::byte{0};
  if (zero) {
    if (have < cfg.region_bytes())
      throw PmemError("region of " + std::to_string(have) + " bytes is smaller than the level table (" +
                      std::to_string(cfg.region_bytes()) + " bytes)");
    format();
  } else {
    recover();
  }
}

uint64_t LevelShard::bucket_off(uint32_t level, uint64_t bucket) const {
  return cfg_.level_offset(level) + bucket * cfg_.bucket_bytes();
}

uint64_t LevelShard::slot_off(uint32_t level, uint64_t bucket, uint32_t slot) const {
  return bucket_off(level, bucket) + 8 + uint64_t{slot} * cfg_.slot_bytes();
}

std::vector<uint32_t> LevelShard::levels_in_use() const {
  const LevelWord w = LevelWord::decode(region_.load(kLevelWordOffset));
  if (w.resizing) return {w.top + 1, w.top, w.top - 1};
  return {w.top, w.top - 1};
}

void LevelShard::format() {
  clear_image_magic(region_);  // first: a region formatted over is never read as a table meanwhile
  // Tokens of every level zero (a fresh region is; a reused one is cleared), level word: top 1.
  for (uint32_t l = 0; l < cfg_.levels(); ++l)
    for (uint64_t b = 0; b < cfg_.level_buckets(l); ++b)
      if (region_.load(bucket_off(l, b)) != 0) region_.store(bucket_off(l, b), 0);
  region_.store(kLevelWordOffset, LevelWord{1, false, 0}.encode());
  if (region_.load(kLevelRecordsOffset) != cfg_.records) region_.store(kLevelRecordsOffset, cfg_.records);
  region_.persist(kLevelWordOffset, cfg_.region_bytes() - kLevelWordOffset);
  LevelHeader h{};
  h.magic = kLevelMagic;
  h.format_version = kLevelFormatVersion;
  h.header_bytes = kLevelHeaderBytes;
  h.base_buckets = cfg_.base_buckets;
  h.max_resizes = cfg_.max_resizes;
  h.value_bytes = cfg_.value_bytes;
  h.hash_seed = cfg_.hash_seed;
  h.node = node_;
  h.memory_nodes = cfg_.memory_nodes;
  h.region_bytes = cfg_.region_bytes();
  h.checksum = header_checksum(h);
  // The magic last (or, for a new file being loaded, by the loader after the load): an interrupted
  // format is refused, never a table.
  write_image_header(region_, &h, !cfg_.format_unpublished);
}

void LevelShard::recover() {
  level_check_image(region_.bytes(), cfg_, node_);
  const LevelWord w = LevelWord::decode(region_.load(kLevelWordOffset));
  if (w.top < 1 || w.top + (w.resizing ? 1 : 0) >= cfg_.levels() ||
      (region_.load(kLevelWordOffset) & ~(0xFFULL | kResizingBit | (kVersionMask << kSeqShift))))
    throw PmemError("corrupt image: level word names levels beyond the region");
  const auto in_use = levels_in_use();
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  // Duplicates: the keys of every valid slot are collected in scan order (sequential writes) and
  // sorted; a key found more than once is resolved after the scan: its copies can only be in its
  // candidate buckets of the levels in use. (A hash set of the keys seen costs a cache miss per
  // item: 2x slower at 1 M records.) Two copies are an interrupted movement or rehash (one value)
  // or an interrupted update that moved its key to another bucket (two values: either is a state
  // the update may leave). The copy kept is the one in the highest level (a rehash copies upwards),
  // then the first in scan order (bucket, slot); the others are cleared once the whole image has
  // been checked.
  std::vector<uint64_t> keys;
  for (uint32_t level = 0; level < cfg_.levels(); ++level) {
    const bool used = std::find(in_use.begin(), in_use.end(), level) != in_use.end();
    const uint64_t nb = cfg_.level_buckets(level);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint64_t tok = region_.load(bucket_off(level, b));
      const uint64_t bits = tok & 0xffffffffULL;
      if (bits == 0) continue;
      if (!used) throw PmemError("corrupt image: level " + std::to_string(level) + " is not in use but has valid slots");
      if (bits & ~kTokenBits)
        throw PmemError("corrupt image: bucket " + std::to_string(b) + " of level " + std::to_string(level) +
                        " has valid bits beyond its slots");
      for (uint64_t x = bits; x; x &= x - 1) {
        const auto s = static_cast<uint32_t>(std::countr_zero(x));
        const uint64_t off = slot_off(level, b, s);
        for (uint32_t i = 0; i < l.bytes; i += 8) store64(rec.data() + i, region_.load(off + i));
        const uint64_t key = l.key(rec.data());
        const LevelPlacement p = level_place(cfg_, key);
        const uint64_t ctrl = load64(rec.data());
        // pub is not compared with seq: no writer runs, and an item older than 2^28 publications of
        // its bucket lies outside the seq window (level.h, "Old items") though it is intact.
        const bool ok = (ctrl & kOcc) && l.consistent(rec.data()) &&
                        static_cast<uint32_t>(ctrl) == p.kbits && p.node == node_ &&
                        (p.h1 % nb == b || p.h2 % nb == b);
        if (!ok)
          throw PmemError("corrupt image: level " + std::to_string(level) + " bucket " + std::to_string(b) + " slot " +
                          std::to_string(s) + " is valid but does not hold a consistent item of that bucket");
        keys.push_back(key);
      }
    }
  }
  const uint64_t valid = keys.size();
  std::sort(keys.begin(), keys.end());
  std::vector<uint64_t> twice;
  for (size_t i = 1; i < keys.size(); ++i)
    if (keys[i] == keys[i - 1] && (twice.empty() || twice.back() != keys[i])) twice.push_back(keys[i]);
  std::vector<Loc> redundant;
  for (const uint64_t key : twice) {
    const LevelPlacement p = level_place(cfg_, key);
    std::vector<Loc> copies;
    for (uint32_t lv : in_use) {
      const uint64_t n = cfg_.level_buckets(lv);
      for (uint64_t bk : {p.h1 % n, p.h2 % n}) {  // one bucket twice if both agree: unique() below
        for (uint64_t x = region_.load(bucket_off(lv, bk)) & kTokenBits; x; x &= x - 1) {
          const auto s2 = static_cast<uint32_t>(std::countr_zero(x));
          if (region_.load(slot_off(lv, bk, s2) + 8) == key) copies.push_back(Loc{lv, bk, s2});
        }
      }
    }
    auto before = [](const Loc& x, const Loc& y) {  // x is kept rather than y
      if (x.level != y.level) return x.level > y.level;
      return x.bucket != y.bucket ? x.bucket < y.bucket : x.slot < y.slot;
    };
    std::sort(copies.begin(), copies.end(), before);
    copies.erase(std::unique(copies.begin(), copies.end(),
                             [](const Loc& x, const Loc& y) { return x.level == y.level && x.bucket == y.bucket && x.slot == y.slot; }),
                 copies.end());
    for (size_t i = 1; i < copies.size(); ++i) redundant.push_back(copies[i]);
  }
  // Only now, with every check passed, is the image written to: a refused image stays untouched.
  for (const Loc& r : redundant) clear_bit(r);
  repairs_ = redundant.size();
  records_ = valid - redundant.size();
  recovered_ = true;
  if (w.resizing) {  // finish the interrupted resize (resuming skips items already moved)
    rehash_bottom(w.top - 1, w.top + 1);
    region_.store(kLevelWordOffset, LevelWord{w.top + 1, false, w.seq + 1}.encode());
    region_.persist(kLevelWordOffset, 8);
    ++repairs_;
    finished_resize_ = true;
  }
}

bool LevelShard::owns(uint64_t key) const { return level_place(cfg_, key).node == node_; }

void LevelShard::check_kv(uint64_t key, std::span<const std::byte> value, bool exact) const {
  if (!owns(key))
    throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard than " + std::to_string(node_));
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

std::optional<LevelShard::Loc> LevelShard::locate_in(uint64_t key, const LevelPlacement& p, uint32_t level) const {
  for (uint64_t b : candidates(cfg_, p, level)) {
    const uint64_t bits = region_.load(bucket_off(level, b)) & kTokenBits;
    for (uint64_t x = bits; x; x &= x - 1) {
      const auto s = static_cast<uint32_t>(std::countr_zero(x));
      const uint64_t off = slot_off(level, b, s);
      if (static_cast<uint32_t>(region_.load(off)) == p.kbits && region_.load(off + 8) == key) return Loc{level, b, s};
    }
  }
  return std::nullopt;
}

std::optional<LevelShard::Loc> LevelShard::locate(uint64_t key, const LevelPlacement& p) const {
  for (uint32_t level : levels_in_use())
    if (auto at = locate_in(key, p, level)) return at;
  return std::nullopt;
}

int LevelShard::free_slot(uint32_t level, uint64_t bucket) const {
  const uint64_t bits = region_.load(bucket_off(level, bucket));
  for (uint32_t s = 0; s < 4; ++s)
    if (!(bits >> s & 1)) return static_cast<int>(s);
  return -1;
}

void LevelShard::read_item(const Loc& at, uint64_t* key, std::vector<std::byte>* value) const {
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  const uint64_t off = slot_off(at.level, at.bucket, at.slot);
  for (uint32_t i = 0; i < l.bytes; i += 8) store64(rec.data() + i, region_.load(off + i));
  *key = l.key(rec.data());
  value->assign(rec.begin() + l.val_off, rec.begin() + l.val_off + cfg_.value_bytes);
}

void LevelShard::write_slot(const Loc& at, uint64_t key, uint32_t kbits, std::span<const std::byte> value) {
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  const uint64_t pub = seq_of(region_.load(bucket_off(at.level, at.bucket))) + 1;
  store64(rec.data(), make_ctrl(pub, kbits));
  l.build(key, pub, value, rec.data());
  const uint64_t off = slot_off(at.level, at.bucket, at.slot);
  for (uint32_t i = 0; i < l.bytes; i += 8) region_.store(off + i, load64(rec.data() + i));
  region_.persist(off, l.bytes);  // the item is durable before any token can publish it
}

void LevelShard::set_token(uint32_t level, uint64_t bucket, uint64_t bits) {
  const uint64_t off = bucket_off(level, bucket);
  region_.store(off, make_token(bits, seq_of(region_.load(off)) + 1));  // the one store that commits
  region_.persist(off, 8);                                               // durable before the reply
}

void LevelShard::clear_bit(const Loc& at) {
  set_token(at.level, at.bucket, region_.load(bucket_off(at.level, at.bucket)) & kTokenBits & ~(1ULL << at.slot));
}

// One-step movement: an item of (level, bucket), other than `except_slot`, whose other candidate
// bucket in the same level has a free slot moves there: copy published, then the original cleared.
bool LevelShard::move_out(uint32_t level, uint64_t bucket, uint32_t except_slot) {
  const uint64_t bits = region_.load(bucket_off(level, bucket)) & kTokenBits;
  for (uint64_t x = bits; x; x &= x - 1) {
    const auto s = static_cast<uint32_t>(std::countr_zero(x));
    if (s == except_slot) continue;
    uint64_t key = 0;
    std::vector<std::byte> value;
    const Loc from{level, bucket, s};
    read_item(from, &key, &value);
    const LevelPlacement p = level_place(cfg_, key);
    for (uint64_t alt : candidates(cfg_, p, level)) {
      if (alt == bucket) continue;
      const int f = free_slot(level, alt);
      if (f < 0) continue;
      const Loc to{level, alt, static_cast<uint32_t>(f)};
      write_slot(to, key, p.kbits, value);
      set_token(level, alt, (region_.load(bucket_off(level, alt)) & kTokenBits) | (1ULL << f));
      clear_bit(from);  // only after the copy is published: an item is never absent (I2)
      ++stats_.moves;
      return true;
    }
  }
  return false;
}

bool LevelShard::place_in_level(uint64_t key, const LevelPlacement& p, uint32_t level,
                                std::span<const std::byte> value) {
  // The emptier candidate first.
  auto cand = candidates(cfg_, p, level);
  auto used = [&](uint64_t b) { return std::popcount(region_.load(bucket_off(level, b)) & kTokenBits); };
  if (cand.size() == 2 && used(cand[1]) < used(cand[0])) std::swap(cand[0], cand[1]);
  for (uint64_t b : cand) {
    const int f = free_slot(level, b);
    if (f < 0) continue;
    write_slot(Loc{level, b, static_cast<uint32_t>(f)}, key, p.kbits, value);
    set_token(level, b, (region_.load(bucket_off(level, b)) & kTokenBits) | (1ULL << f));
    return true;
  }
  return false;
}

bool LevelShard::place_new(uint64_t key, const LevelPlacement& p, std::span<const std::byte> value) {
  const LevelWord w = LevelWord::decode(region_.load(kLevelWordOffset));
  if (place_in_level(key, p, w.top, value) || place_in_level(key, p, w.top - 1, value)) return true;
  for (uint32_t level : {w.top, w.top - 1})
    for (uint64_t b : candidates(cfg_, p, level))
      if (move_out(level, b, 4)) return place_in_level(key, p, level, value);
  return false;
}

LevelResult LevelShard::insert_new(uint64_t key, const LevelPlacement& p, std::span<const std::byte> value) {
  uint64_t before = region_.persists();
  while (!place_new(key, p, value)) {
    if (LevelWord::decode(region_.load(kLevelWordOffset)).top + 1 >= cfg_.levels()) {
      ++stats_.full;
      return {Status::kFull, static_cast<uint32_t>(region_.persists() - before)};
    }
    const uint64_t r0 = region_.persists();
    resize_locked();
    before += region_.persists() - r0;  // the resize's persists are counted as the resize's
  }
  ++records_;
  ++stats_.inserts;
  const auto n = static_cast<uint32_t>(region_.persists() - before);
  stats_.insert_persists += n;
  return {Status::kInserted, n};
}

LevelResult LevelShard::replace(const Loc& at, uint64_t key, const LevelPlacement& p, std::span<const std::byte> value) {
  const uint64_t before = region_.persists();
  int f = free_slot(at.level, at.bucket);
  if (f < 0 && move_out(at.level, at.bucket, at.slot)) f = free_slot(at.level, at.bucket);
  if (f < 0) {
    // The key's bucket stays full: the new item goes to another candidate bucket with a free slot,
    // published there before the old one is cleared (readers that see both copies re-read).
    for (uint32_t level : levels_in_use())
      for (uint64_t b : candidates(cfg_, p, level)) {
        const int g = free_slot(level, b);
        if (g < 0) continue;
        write_slot(Loc{level, b, static_cast<uint32_t>(g)}, key, p.kbits, value);
        set_token(level, b, (region_.load(bucket_off(level, b)) & kTokenBits) | (1ULL << g));
        clear_bit(at);
        ++stats_.updates;
        ++stats_.moved_updates;
        const auto n = static_cast<uint32_t>(region_.persists() - before);
        stats_.update_persists += n;
        return {Status::kUpdated, n};
      }
    ++stats_.full;
    return {Status::kFull, static_cast<uint32_t>(region_.persists() - before)};  // the old value stays
  }
  write_slot(Loc{at.level, at.bucket, static_cast<uint32_t>(f)}, key, p.kbits, value);
  const uint64_t bits = region_.load(bucket_off(at.level, at.bucket)) & kTokenBits;
  set_token(at.level, at.bucket, (bits | (1ULL << f)) & ~(1ULL << at.slot));  // both bits flip in one store
  ++stats_.updates;
  const auto n = static_cast<uint32_t>(region_.persists() - before);
  stats_.update_persists += n;
  return {Status::kUpdated, n};
}

LevelResult LevelShard::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_kv(key, value, false);
  const LevelPlacement p = level_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (locate(key, p)) return {Status::kFound, 0};
  return insert_new(key, p, value);
}

LevelResult LevelShard::put(uint64_t key, std::span<const std::byte> value) {
  check_kv(key, value, true);
  const LevelPlacement p = level_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) return replace(*at, key, p, value);
  return insert_new(key, p, value);
}

LevelResult LevelShard::update(uint64_t key, std::span<const std::byte> value) {
  check_kv(key, value, true);
  const LevelPlacement p = level_place(cfg_, key);
  std::lock_guard lock(mu_);
  if (auto at = locate(key, p)) return replace(*at, key, p, value);
  return {Status::kNotFound, 0};
}

LevelResult LevelShard::erase(uint64_t key) {
  check_kv(key, {}, false);
  const LevelPlacement p = level_place(cfg_, key);
  std::lock_guard lock(mu_);
  auto at = locate(key, p);
  if (!at) return {Status::kNotFound, 0};
  const uint64_t before = region_.persists();
  clear_bit(*at);
  --records_;
  ++stats_.erases;
  const auto n = static_cast<uint32_t>(region_.persists() - before);
  stats_.erase_persists += n;
  return {Status::kErased, n};
}

// Moves every item of level `old_bottom` into level `new_top`: insert (unless a resumed resize
// already did), then clear the original.
void LevelShard::rehash_bottom(uint32_t old_bottom, uint32_t new_top) {
  for (uint64_t b = 0; b < cfg_.level_buckets(old_bottom); ++b) {
    const uint64_t bits = region_.load(bucket_off(old_bottom, b)) & kTokenBits;
    for (uint64_t x = bits; x; x &= x - 1) {
      const Loc from{old_bottom, b, static_cast<uint32_t>(std::countr_zero(x))};
      uint64_t key = 0;
      std::vector<std::byte> value;
      read_item(from, &key, &value);
      const LevelPlacement p = level_place(cfg_, key);
      if (!locate_in(key, p, new_top)) {
        bool placed = place_in_level(key, p, new_top, value);
        for (size_t i = 0; !placed && i < 2; ++i) {
          const auto cand = candidates(cfg_, p, new_top);
          if (i < cand.size() && move_out(new_top, cand[i], 4)) placed = place_in_level(key, p, new_top, value);
        }
        if (!placed)  // a new top level of 4x the bottom's buckets has no full candidate in practice
          throw std::runtime_error("level resize: both buckets of key " + std::to_string(key) +
                                   " in the new top level are full; the table is consistent, the resize unfinished");
      }
      clear_bit(from);  // only once the item is in the new top (log-free rehash)
      ++stats_.rehashed;
    }
  }
}

void LevelShard::resize_locked() {
  const LevelWord w = LevelWord::decode(region_.load(kLevelWordOffset));
  if (w.top + 1 >= cfg_.levels())
    throw InvalidArgument("level table of node " + std::to_string(node_) + " has used its " +
                          std::to_string(cfg_.max_resizes) + " resizes");
  const uint64_t before = region_.persists();
  region_.store(kLevelWordOffset, LevelWord{w.top, true, w.seq + 1}.encode());
  region_.persist(kLevelWordOffset, 8);
  rehash_bottom(w.top - 1, w.top + 1);
  region_.store(kLevelWordOffset, LevelWord{w.top + 1, false, w.seq + 2}.encode());
  region_.persist(kLevelWordOffset, 8);
  ++stats_.resizes;
  stats_.resize_persists += region_.persists() - before;
}

void LevelShard::resize() {
  std::lock_guard lock(mu_);
  resize_locked();
}

std::optional<std::vector<std::byte>> LevelShard::find(uint64_t key) const {
  if (!owns(key)) return std::nullopt;
  const LevelPlacement p = level_place(cfg_, key);
  std::lock_guard lock(mu_);
  auto at = locate(key, p);
  if (!at) return std::nullopt;
  uint64_t k = 0;
  std::vector<std::byte> v;
  read_item(*at, &k, &v);
  return v;
}

std::vector<std::pair<uint64_t, std::vector<std::byte>>> LevelShard::items() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> out;
  for (uint32_t level : levels_in_use())
    for (uint64_t b = 0; b < cfg_.level_buckets(level); ++b)
      for (uint64_t x = region_.load(bucket_off(level, b)) & kTokenBits; x; x &= x - 1) {
        uint64_t k = 0;
        std::vector<std::byte> v;
        read_item(Loc{level, b, static_cast<uint32_t>(std::countr_zero(x))}, &k, &v);
        out.emplace_back(k, std::move(v));
      }
  return out;
}

uint64_t LevelShard::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

uint64_t LevelShard::capacity() const {
  std::lock_guard lock(mu_);
  const uint32_t top = LevelWord::decode(region_.load(kLevelWordOffset)).top;
  return 4 * (cfg_.level_buckets(top) + cfg_.level_buckets(top - 1));
}

uint32_t LevelShard::top_level() const {
  std::lock_guard lock(mu_);
  return LevelWord::decode(region_.load(kLevelWordOffset)).top;
}

LevelStats LevelShard::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// --- memory-node side on a fabric ----------------------------------------------------------------

struct LevelServer::State {
  std::shared_ptr<detail::ShardHost<LevelShard>> host;
};

LevelServer::LevelServer(Fabric& fabric, const LevelConfig& cfg, PersistMode mode, uint16_t rpc_id)
    : cfg_(cfg), state_(std::make_shared<State>()) {
  cfg_.validate();
  state_->host = detail::ShardHost<LevelShard>::create(fabric, cfg_, mode, rpc_id, kLevelRpcFirst, kLevelRpcLast,
                                                      "level", config_tag(cfg_));
}

LevelServer::~LevelServer() = default;

bool LevelServer::hosts(uint32_t node) const { return state_->host->hosts(node); }
LevelShard& LevelServer::shard(uint32_t node) { return state_->host->shard(node); }
PersistentRegion& LevelServer::region(uint32_t node) { return state_->host->region(node); }

bool LevelServer::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = level_place(cfg_, key).node;
  if (!hosts(node)) return false;
  const LevelResult r = state_->host->shard(node).put(key, value);
  if (r.status == Status::kFull)
    throw InvalidArgument("level shard " + std::to_string(node) + ": the buckets of key " + std::to_string(key) +
                          " are full at " + std::to_string(state_->host->shard(node).records()) + " of " +
                          std::to_string(state_->host->shard(node).capacity()) +
                          " slots after every resize: use a lower load factor");
  return true;
}

uint64_t LevelServer::records() const { return state_->host->records(); }

bool LevelServer::recovered() const { return state_->host->recovered(); }

std::string LevelServer::recovery_summary() const {
  std::string out;
  state_->host->for_each_shard([&out](const LevelShard& s) {
    if (!out.empty()) out += "; ";
    out += "top level " + std::to_string(s.top_level());
    const uint64_t dup = s.recovery_repairs() - (s.finished_resize() ? 1 : 0);
    if (dup) out += ", " + std::to_string(dup) + " duplicate cop" + (dup == 1 ? "y" : "ies") + " cleared";
    if (s.finished_resize()) out += ", an interrupted resize finished";
  });
  return out;
}

LevelStats LevelServer::stats() const {
  LevelStats t;
  state_->host->for_each_shard([&t](const LevelShard& s) {
    const LevelStats x = s.stats();
    t.inserts += x.inserts;
    t.updates += x.updates;
    t.erases += x.erases;
    t.full += x.full;
    t.moves += x.moves;
    t.resizes += x.resizes;
    t.rehashed += x.rehashed;
    t.moved_updates += x.moved_updates;
    t.insert_persists += x.insert_persists;
    t.update_persists += x.update_persists;
    t.erase_persists += x.erase_persists;
    t.resize_persists += x.resize_persists;
  });
  return t;
}

// --- client -------------------------------------------------------------------------------------

LevelClient::LevelClient(const LevelConfig& cfg, Engine& engine, uint16_t rpc_id)
    : cfg_(cfg), engine_(engine), rpc_id_(rpc_id), cfg_tag_(config_tag(cfg)), level_word_(cfg.memory_nodes, 0) {
  cfg_.validate();
  if (rpc_id < kLevelRpcFirst || rpc_id > kLevelRpcLast)
    throw InvalidArgument("level rpc id must be in [0x0E00, 0x0E0F], got " + std::to_string(rpc_id));
}

void LevelClient::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

Task<OpResult> LevelClient::get(uint64_t key, std::span<std::byte> value_out) {
  const LevelPlacement p = level_place(cfg_, key);
  const SlotLayout l(cfg_);
  const uint32_t bb = cfg_.bucket_bytes();
  OpResult r;
  uint64_t& cached = level_word_[p.node];
  if (cached == 0) {  // first lookup on this node: learn the levels (a valid word has top >= 1)
    co_await engine_.read(RemoteAddr{p.node, kLevelWordOffset}, &cached, 8);
    if (LevelWord::decode(cached).top < 1) throw FabricError("level: node " + std::to_string(p.node) + " holds no table");
  }
  std::vector<std::byte> buf;
  std::vector<uint64_t> prev_tokens;  // a miss's previous batch: level word, then every token word
  // The previous batch (any outcome): its level word and token words, and its buckets, for items
  // older than the seq window (level.h, "Old items").
  std::vector<uint64_t> last_tokens;
  std::vector<std::byte> prev_buf;
  uint32_t old_waits = 0;  // batches that stopped only at a slot outside the window
  bool ask = false;
  for (uint32_t attempt = 0; attempt < kMaxRetries; ++attempt) {
    const LevelWord w = LevelWord::decode(cached);
    std::vector<uint32_t> levels = w.resizing ? std::vector<uint32_t>{w.top + 1, w.top, w.top - 1}
                                              : std::vector<uint32_t>{w.top, w.top - 1};
    std::vector<std::pair<uint32_t, uint64_t>> buckets;
    for (uint32_t lv : levels)
      if (lv < cfg_.levels())
        for (uint64_t b : candidates(cfg_, p, lv)) buckets.emplace_back(lv, b);
    buf.resize(buckets.size() * bb);
    uint64_t word = 0;
    {
      std::vector<Pending> reads;
      reads.push_back(engine_.read(RemoteAddr{p.node, kLevelWordOffset}, &word, 8));
      for (size_t i = 0; i < buckets.size(); ++i)
        reads.push_back(engine_.read(RemoteAddr{p.node, cfg_.level_offset(buckets[i].first) + buckets[i].second * bb},
                                     buf.data() + i * bb, bb));
      for (Pending& rd : reads) co_await rd;  // the first wait posts them all: one round trip
    }
    ++r.chunks;
    if (word != cached) {  // the levels changed: re-read those the new word names
      cached = word;
      prev_tokens.clear();
      last_tokens.clear();
      continue;
    }
    std::vector<uint64_t> tokens{word};
    for (size_t i = 0; i < buckets.size(); ++i) tokens.push_back(load64(buf.data() + i * bb));
    // A slot outside the seq window — republished after its token was read (pub > seq), or an item
    // older than 2^28 publications of its bucket — is taken only if the previous batch read the
    // same level word and token words and the same slot bytes (level.h, "Old items").
    const std::byte* prev = tokens == last_tokens ? prev_buf.data() : nullptr;
    // Keeps this batch for the next one; true when the lookup should ask the node.
    auto retry = [&](bool old) {
      buf.swap(prev_buf);
      last_tokens = tokens;
      return old && ++old_waits >= kOldItemReads;
    };
    bool stable = true, old = false;
    const std::byte* hit = nullptr;
    for (size_t i = 0; i < buckets.size() && stable; ++i) {
      const std::byte* bucket = buf.data() + i * bb;
      const uint64_t tok = tokens[i + 1];
      for (uint64_t x = tok & kTokenBits; x; x &= x - 1) {
        const std::byte* rec = bucket + 8 + uint64_t(std::countr_zero(x)) * l.bytes;
        const uint64_t ctrl = load64(rec);
        if (!(ctrl & kOcc) || !l.consistent(rec)) {
          stable = false;  // torn: never guess
          break;
        }
        const bool settled = not_after(version_of(ctrl), seq_of(tok)) ||
                             (prev != nullptr && std::memcmp(rec, prev + (rec - buf.data()), l.bytes) == 0);
        if (!settled) {
          stable = false;  // republished after its token was read, or an old item: read again
          old = true;
          break;
        }
        if (static_cast<uint32_t>(ctrl) == p.kbits && l.key(rec) == key) {
          // Two copies of different values: an update that moved the key to another bucket is
          // between publishing the new copy and clearing the old one. Re-read.
          if (hit && std::memcmp(hit + l.val_off, rec + l.val_off, l.val_padded) != 0) {
            stable = false;
            break;
          }
          hit = rec;
        }
      }
    }
    if (!stable) {
      prev_tokens.clear();
      if ((ask = retry(old))) break;
      continue;
    }
    if (hit) {
      if (!value_out.empty())
        std::memcpy(value_out.data(), hit + l.val_off, std::min<size_t>(value_out.size(), cfg_.value_bytes));
      r.status = Status::kFound;
      r.matches = 1;
      co_return r;
    }
    // A miss: trusted only when a second batch read the same level word and token words.
    if (tokens == prev_tokens) {
      r.status = Status::kNotFound;
      co_return r;
    }
    prev_tokens = tokens;
    retry(false);
  }
  if (ask) {
    // An old item whose buckets keep changing: the node answers under its shard lock (one RPC;
    // the lookup linearizes inside it).
    co_return co_await write_rpc::get(engine_, "level", rpc_id_, p.node, cfg_tag_, key, cfg_.value_bytes, value_out, r);
  }
  throw FabricError("level: the buckets of key " + std::to_string(key) + " on node " + std::to_string(p.node) +
                    " kept changing (did the memory node die mid-write?)");
}

Task<OpResult> LevelClient::remote(uint8_t op, uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = level_place(cfg_, key).node;
  return write_rpc::write(engine_, "level", rpc_id_, node, cfg_tag_, static_cast<write_rpc::Op>(op), key, value, &persists_);
}

Task<OpResult> LevelClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, false);
  co_return co_await remote(write_rpc::kFindOrPut, key, value);
}

Task<OpResult> LevelClient::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kPut, key, value);
}

Task<OpResult> LevelClient::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kUpdate, key, value);
}

Task<OpResult> LevelClient::erase(uint64_t key) { co_return co_await remote(write_rpc::kErase, key, {}); }

Task<OpResult> LevelClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  return get_all_by_get(key, cfg_.value_bytes, values_out);
}

}  // namespace rdmahash
