// Continuity hashing (seed 002). Layout, write protocol, crash states and the torn-read argument
// are documented in include/rdmahash/continuity.h; this file follows them.
#include "rdmahash/continuity.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <chrono>
#include <thread>
#include <cmath>
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

// Indicator word (continuity.h): own valid bits 0..23, reserved (zero) 24..31, added-slot claims
// 32..43, seq 44..60 (17 bits), MOVED 61, UNBORN 62.
constexpr uint64_t kOwnMask = 0xffffffULL;
constexpr uint32_t kAddShift = 32;
constexpr uint64_t kAddMask = 0xfffULL << kAddShift;
constexpr uint64_t kValidMask = kOwnMask | kAddMask;  // every slot bit (own and added)
constexpr uint64_t kSeqShift = 44;
constexpr uint64_t kBitsMask = (1ULL << kSeqShift) - 1;  // valid bits and claims (24..31 zero)
constexpr uint64_t kReservedMask = 0xffULL << 24;        // format 3's generations; zero since format 4
constexpr uint64_t kSeqMask = (1ULL << 17) - 1;
// A segment caught mid-write is re-read; the writer is the node's CPU inside one critical
// section, so this bound is only reached if that CPU died mid-write.
constexpr uint32_t kMaxRetries = 1u << 22;
// Lookups that could not settle before one asks the node (kGet): stopped only at a slot outside the
// seq window (an old item under a pair whose indicator changes between every two READs), or an even
// segment whose indicator changed during the READ (its echo differs) (continuity.h, "Old items",
// "Torn reads").
constexpr uint32_t kOldItemReads = 4;

struct SlotLayout : record::Layout {
  explicit SlotLayout(const ContinuityConfig& c) : record::Layout(8, c.value_bytes, 0xC047ULL) {}
};

// Indicator flags (bits 61, 62; continuity.h "Online resizing").
constexpr uint64_t kMoved = 1ULL << 61;
constexpr uint64_t kUnborn = 1ULL << 62;
// The geometry word: level, RESIZING, and a check of both.
constexpr uint64_t kResizingBit = 1ULL << 8;
uint64_t geometry_word(uint32_t level, bool resizing) {
  const uint64_t low = uint64_t{level} | (resizing ? kResizingBit : 0);
  return low | (hash::mix64(low ^ 0x47454F4D45545259ULL) << 32);
}
uint64_t seq_of(uint64_t ind) { return (ind >> kSeqShift) & kSeqMask; }
uint64_t make_indicator(uint64_t bits, uint64_t seq) { return (bits & kBitsMask) | ((seq & kSeqMask) << kSeqShift); }
// pub ≤ s in the wrapping 17-bit sequence space (continuity.h: why 17 bits suffice).
bool not_after(uint64_t pub, uint64_t s) { return ((s - pub) & kSeqMask) < (1ULL << 16); }
uint64_t segment_mask(const ContinuityConfig& c, uint32_t first_bit) {
  return ((1ULL << (4 + 4 * c.sbuckets)) - 1) << first_bit;
}

uint64_t header_checksum(const ContinuityHeader& h) { return image_header_checksum(&h, kContinuityMagic); }

uint32_t config_tag(const ContinuityConfig& c) {
  uint64_t h = hash::mix64(c.hash_seed ^ kContinuityMagic);
  for (uint64_t f : {uint64_t{c.memory_nodes}, c.buckets_per_node, uint64_t{c.sbuckets}, uint64_t{c.value_bytes},
                     uint64_t{c.max_resizes}, uint64_t{c.added_group_pairs}})
    h = hash::mix64(h ^ f);
  return static_cast<uint32_t>(h);
}

}  // namespace

// --- configuration ------------------------------------------------------------------------------

ContinuityConfig ContinuityConfig::for_records(uint64_t records, double load_factor, uint32_t memory_nodes,
                                               uint32_t sbuckets) {
  if (!(load_factor > 0.0 && load_factor < 1.0))
    throw InvalidArgument("load factor must be in (0, 1), got " + std::to_string(load_factor));
  if (records == 0) throw InvalidArgument("records must be at least 1");
  if (memory_nodes == 0) throw InvalidArgument("memory nodes must be at least 1");
  ContinuityConfig c;
  c.memory_nodes = memory_nodes;
  c.sbuckets = sbuckets;
  const double pairs = static_cast<double>(records) / (load_factor * memory_nodes * c.pair_slots());
  // Converting a double beyond 2^64 to an integer is undefined: refuse before the cast.
  if (!(pairs <= 0x1p35))
    throw InvalidArgument("load factor " + std::to_string(load_factor) + " is too small for " + std::to_string(records) +
                          " records: the table would need more than 2^36 numbered buckets per memory node");
  c.buckets_per_node = 2 * std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(pairs)));
  return c;
}

std::string continuity_config_error(const ContinuityConfig& c) {
  if (c.memory_nodes == 0) return "memory nodes must be at least 1";
  if (c.buckets_per_node < 2 || c.buckets_per_node % 2 != 0)
    return "numbered buckets per node must be even and at least 2, got " + std::to_string(c.buckets_per_node);
  if (c.max_resizes > 16) return "max resizes must be at most 16, got " + std::to_string(c.max_resizes);
  if (c.buckets_per_node > (1ULL << 36) >> c.max_resizes)
    return "numbered buckets per node, doubled max_resizes times, must be at most 2^36";
  if (c.sbuckets < 1 || c.sbuckets > kMaxSBuckets)
    return "SBuckets per segment pair must be in [1, 4] (the indicator has 24 valid bits), got " +
           std::to_string(c.sbuckets);
  if (c.value_bytes > 120) return "value bytes must be at most 120, got " + std::to_string(c.value_bytes);
  if (c.added_group_pairs > 65535)
    return "added SBuckets: one group per at most 65535 segment pairs, got " + std::to_string(c.added_group_pairs);
  return {};
}

void ContinuityConfig::validate() const {
  if (auto e = continuity_config_error(*this); !e.empty()) throw InvalidArgument(e);
}

uint32_t ContinuityConfig::slot_bytes() const { return SlotLayout(*this).bytes; }

namespace {
// Bit i-1 of the result is set iff table i (1 <= i <= level) doubled the number of added groups.
uint64_t doubling_levels(const ContinuityConfig& c, uint32_t level, uint64_t* groups) {
  const uint64_t p0 = c.buckets_per_node / 2, d = c.added_group_pairs;
  uint64_t m = (p0 + d - 1) / d, mask = 0;
  for (uint32_t i = 1; i <= level; ++i)
    if ((p0 << i) > m * d) {
      m *= 2;
      mask |= uint64_t{1} << (i - 1);
    }
  *groups = m;
  return mask;
}
}  // namespace

uint64_t ContinuityConfig::groups_at(uint32_t level) const {
  if (!added_group_pairs) return 0;
  uint64_t m = 0;
  doubling_levels(*this, level, &m);
  return m;
}

uint64_t ContinuityConfig::group_of(uint32_t level, uint64_t pair) const {
  const uint64_t p0 = buckets_per_node / 2, d = added_group_pairs;
  if (d == 0) throw InvalidArgument("continuity: no added SBuckets in this configuration (added_group_pairs = 0)");
  uint64_t m = (p0 + d - 1) / d;
  uint64_t g = pair % p0 % m;
  const uint64_t t = pair / p0;
  for (uint32_t i = 1; i <= level; ++i)
    if ((p0 << i) > m * d) {
      if (t >> (i - 1) & 1) g += m;
      m *= 2;
    }
  return g;
}

uint64_t ContinuityConfig::table_offset(uint32_t level) const {
  uint64_t off = kContinuityTableBase;
  for (uint32_t i = 0; i < level; ++i) off += table_bytes(i);
  return off;
}

ContinuityPlacement continuity_place(const ContinuityConfig& c, uint64_t key, uint32_t level) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  ContinuityPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  const uint64_t hk = hash::mix64(h ^ 0xA0761D6478BD642FULL);
  p.level = level;
  p.bucket = hk % c.buckets_at(level);  // eq. (1)
  p.pair = p.bucket / 2;
  const uint64_t pair_bytes = c.pair_bytes();  // size_se + size_bu
  const uint64_t table = c.table_offset(level);
  if (p.bucket % 2 == 0) {  // the READ starts at the pair's echo word
    p.segment_offset = table + p.bucket / 2 * pair_bytes;  // eq. (2)
    p.first_bit = 0;
    p.indicator_pos = static_cast<uint32_t>(c.odd_segment_in_pair());
    p.read_bytes = c.segment_bytes() + 8;
  } else {
    p.segment_offset = table + (p.bucket - 1) / 2 * pair_bytes + c.odd_segment_in_pair();  // eq. (3)
    p.first_bit = 4;
    p.indicator_pos = 0;
    p.read_bytes = c.segment_bytes();
  }
  p.kbits = static_cast<uint32_t>(hash::mix64(h ^ 0x589965CC75374CC3ULL));
  return p;
}

// --- memory-node side ---------------------------------------------------------------------------

ContinuityShard::ContinuityShard(const ContinuityConfig& cfg, uint32_t node, PersistentRegion& region)
    : cfg_(cfg), node_(node), region_(region) {
  cfg_.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index " + std::to_string(node) + " out of range");
  const uint64_t have = region.bytes().size();
  if (have < kContinuityHeaderBytes)
    throw PmemError("image of " + std::to_string(have) + " bytes is shorter than the " +
                    std::to_string(kContinuityHeaderBytes) + "-byte continuity header (truncated file?)");
  ContinuityHeader h{};
  std::memcpy(&h, region.bytes().data(), sizeof h);
  bool zero = true;
  for (size_t i = 0; i < sizeof h; ++i) zero &= region.bytes()[i] == std::byte{0};
  if (zero) {
    if (have < cfg.region_bytes())
      throw PmemError("region of " + std::to_string(have) + " bytes is smaller than the continuity table (" +
                      std::to_string(cfg.region_bytes()) + " bytes)");
    format();
  } else {
    recover();
  }
}

uint64_t ContinuityShard::indicator_off(uint32_t level, uint64_t pair) const {
  return echo_off(level, pair) + cfg_.odd_segment_in_pair();
}

uint64_t ContinuityShard::echo_off(uint32_t level, uint64_t pair) const {
  return cfg_.table_offset(level) + pair * cfg_.pair_bytes();
}

void ContinuityShard::store_indicator(uint32_t level, uint64_t pair, uint64_t word) {
  // The indicator first, then its echo: either order keeps the reader's argument (continuity.h,
  // "Torn reads"); the echo is a reader's bracket, never persisted on its own (recovery rewrites it).
  region_.store(indicator_off(level, pair), word);
  region_.store(echo_off(level, pair), word);
}

uint64_t ContinuityShard::slot_off(uint32_t level, uint64_t pair, uint32_t bit) const {
  const uint64_t base = cfg_.table_offset(level) + pair * cfg_.pair_bytes();
  const uint32_t sb = cfg_.slot_bytes();
  if (bit >= kAddShift) return cfg_.group_offset(level, cfg_.group_of(level, pair)) + uint64_t{bit - kAddShift} * sb;
  return base + cfg_.slot_in_pair(bit);
}

void ContinuityShard::format() {
  clear_image_magic(region_);  // first: a region formatted over is never read as a table meanwhile
  // Only the indicators need a value: a slot whose bit is clear is never read.
  const uint64_t pairs = cfg_.buckets_per_node / 2;
  for (uint64_t i = 0; i < pairs; ++i)
    if (region_.load(indicator_off(0, i)) != 0 || region_.load(echo_off(0, i)) != 0) store_indicator(0, i, 0);
  region_.store(kContinuityGeometryOffset, geometry_word(0, false));
  if (region_.load(kContinuityRecordsOffset) != cfg_.records) region_.store(kContinuityRecordsOffset, cfg_.records);
  region_.persist(kContinuityHeaderBytes, cfg_.table_offset(1) - kContinuityHeaderBytes);
  ContinuityHeader h{};
  h.magic = kContinuityMagic;
  h.format_version = kContinuityFormatVersion;
  h.header_bytes = kContinuityHeaderBytes;
  h.added_group_pairs = static_cast<uint16_t>(cfg_.added_group_pairs);
  h.buckets = cfg_.buckets_per_node;
  h.sbuckets = cfg_.sbuckets;
  h.value_bytes = cfg_.value_bytes;
  h.hash_seed = cfg_.hash_seed;
  h.node = node_;
  h.memory_nodes = cfg_.memory_nodes;
  h.region_bytes = cfg_.region_bytes();
  h.checksum = header_checksum(h);
  // The magic word last, in its own persist: an image whose format was interrupted has no valid
  // magic (or a checksum mismatch) and is refused, never mistaken for a table.
  write_image_header(region_, &h, !cfg_.format_unpublished);  // format_unpublished: the loader publishes it
}

void ContinuityShard::recover() {
  ContinuityHeader h{};
  std::memcpy(&h, region_.bytes().data(), sizeof h);
  static_assert(sizeof h == kImageHeaderBytes);
  check_image_frame(&h, "continuity", kContinuityMagic, kContinuityFormatVersion);  // magic, version, checksum
  if (h.added_group_pairs != cfg_.added_group_pairs)
    throw PmemError("continuity image was created with added SBuckets for " +
                    (h.added_group_pairs ? "1/" + std::to_string(h.added_group_pairs) : std::string("none")) +
                    " of the segment pairs, requested " +
                    (cfg_.added_group_pairs ? "1/" + std::to_string(cfg_.added_group_pairs) : std::string("none")));
  if (h.header_bytes != kContinuityHeaderBytes || h.buckets != cfg_.buckets_per_node || h.sbuckets != cfg_.sbuckets ||
      h.value_bytes != cfg_.value_bytes || h.hash_seed != cfg_.hash_seed || h.node != node_ ||
      h.memory_nodes != cfg_.memory_nodes || h.region_bytes != cfg_.region_bytes())
    // Every field that can differ is named (a different --seed or --max-resizes changes only the
    // hash seed or the region size).
    throw PmemError("continuity image was created with another geometry (" + std::to_string(h.buckets) +
                    " buckets, " + std::to_string(h.sbuckets) + " SBuckets, " + std::to_string(h.value_bytes) +
                    "-byte values, node " + std::to_string(h.node) + " of " + std::to_string(h.memory_nodes) +
                    ", hash seed " + std::to_string(h.hash_seed) + ", " + std::to_string(h.region_bytes) +
                    " bytes) than requested (" + std::to_string(cfg_.buckets_per_node) + ", " +
                    std::to_string(cfg_.sbuckets) + ", " + std::to_string(cfg_.value_bytes) + ", node " +
                    std::to_string(node_) + " of " + std::to_string(cfg_.memory_nodes) + ", hash seed " +
                    std::to_string(cfg_.hash_seed) + ", " + std::to_string(cfg_.region_bytes()) + " bytes)");
  if (region_.bytes().size() < cfg_.region_bytes())
    throw PmemError("continuity image is " + std::to_string(region_.bytes().size()) + " bytes, its header says " +
                    std::to_string(cfg_.region_bytes()) + " (truncated file?)");
  if (const uint64_t records = region_.load(kContinuityRecordsOffset);
      cfg_.records != 0 && records != 0 && records != cfg_.records)
    throw PmemError("continuity image was loaded with " + std::to_string(records) + " records, requested " +
                    std::to_string(cfg_.records) + " (same geometry, another data set: its keys are not the run's)");
  const uint64_t geo = region_.load(kContinuityGeometryOffset);
  const auto geo_level = static_cast<uint32_t>(geo & 0xff);
  const bool geo_resizing = (geo & kResizingBit) != 0;
  if (geo != geometry_word(geo_level, geo_resizing) || geo_level + (geo_resizing ? 1u : 0u) > cfg_.max_resizes)
    throw PmemError("corrupt image: the geometry word " + std::to_string(geo) + " is not a valid level (max resizes " +
                    std::to_string(cfg_.max_resizes) + ")");
  // The scan: every valid slot must be a consistent item of its own segment, no key twice (I1, I2).
  // While resizing: MOVED pairs of the old table and UNBORN pairs of the new one hold no valid bit;
  // a born pair of the new table under a not-MOVED parent is a leftover (reset below).
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  uint64_t n = 0;
  std::vector<uint64_t> seen;  // keys of this pair: a key can only be valid in its own pair
  const uint64_t old_pairs = cfg_.buckets_at(geo_level) / 2;
  std::vector<bool> moved(old_pairs, false);
  std::vector<uint64_t> leftovers;
  auto bad = [](uint32_t level, uint64_t i, const std::string& what) {
    return PmemError("corrupt image: table " + std::to_string(level) + " pair " + std::to_string(i) + " " + what);
  };
  for (uint32_t level = geo_level; level <= geo_level + (geo_resizing ? 1u : 0u); ++level) {
    const bool newer = level > geo_level;
    for (uint64_t i = 0; i < cfg_.buckets_at(level) / 2; ++i) {
      seen.clear();
      const uint64_t ind = region_.load(indicator_off(level, i));
      const uint64_t bits = ind & kValidMask;
      if (ind >> 63 || (ind & kReservedMask)) throw bad(level, i, "has an unknown indicator flag or reserved bit");
      if (ind & kMoved) {
        if (newer || !geo_resizing || bits) throw bad(level, i, "is MOVED out of place");
        moved[i] = true;
        continue;
      }
      if (ind & kUnborn) {
        if (!newer || bits || moved[i % old_pairs]) throw bad(level, i, "is UNBORN out of place");
        continue;
      }
      if (newer && !moved[i % old_pairs]) {  // an interrupted migration's copies: the parent holds them
        leftovers.push_back(i);
        continue;
      }
      if ((bits & kOwnMask) >> cfg_.pair_slots() || (bits & kAddMask) >> (kAddShift + cfg_.added_slots()))
        throw bad(level, i, "has valid bits beyond its slots");
      // (A slot claimed by two pairs is refused below: its one key belongs to one pair, so the
      // other claim fails the pair check.)
      for (uint64_t b = bits; b; b &= b - 1) {
        const uint32_t bit = static_cast<uint32_t>(std::countr_zero(b));
        const uint64_t off = slot_off(level, i, bit);
        for (uint32_t w = 0; w < l.bytes; w += 8) store64(rec.data() + w, region_.load(off + w));
        const uint64_t key = l.key(rec.data());
        const ContinuityPlacement p = continuity_place(cfg_, key, level);
        const uint64_t ctrl = load64(rec.data());
        // pub is not compared with seq: no writer runs, and an item older than 2^16 publications of
        // its pair lies outside the seq window (continuity.h, "Old items") though it is intact.
        const bool ok = (ctrl & kOcc) && l.consistent(rec.data()) &&
                        static_cast<uint32_t>(ctrl) == p.kbits && p.node == node_ && p.pair == i &&
                        (bit >= kAddShift || (segment_mask(cfg_, p.first_bit) >> bit & 1));
        if (!ok)
          throw PmemError("corrupt image: pair " + std::to_string(i) + " slot " + std::to_string(bit) +
                          " is valid but does not hold a consistent item of that segment");
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
          throw PmemError("corrupt image: key " + std::to_string(key) + " is valid twice");
        seen.push_back(key);
        ++n;
      }
    }
  }
  if (geo_resizing)  // a moved parent's children are both born
    for (uint64_t i = 0; i < old_pairs; ++i)
      if (moved[i])
        for (uint64_t child : {i, i + old_pairs})
          if (region_.load(indicator_off(geo_level + 1, child)) & kUnborn)
            throw bad(geo_level, i, "is MOVED but its items are not in the new table");
  // The image is valid: only now write (a refused image is left untouched).
  for (uint64_t i : leftovers) {  // back to UNBORN: readers go to the parent, which holds the items
    set_indicator(geo_level + 1, i, 0, kUnborn);
    ++stats_.cleaned_leftovers;
  }
  // Echoes are not persisted (a crash may leave one behind its indicator): every table a reader
  // may READ gets its echoes back, or its even segments would look busy forever.
  for (uint32_t level = 0; level <= geo_level + (geo_resizing ? 1u : 0u); ++level)
    for (uint64_t i = 0; i < cfg_.buckets_at(level) / 2; ++i)
      if (const uint64_t ind = region_.load(indicator_off(level, i)); region_.load(echo_off(level, i)) != ind)
        region_.store(echo_off(level, i), ind);
  level_ = geo_level;
  resizing_ = geo_resizing;
  cursor_ = 0;
  records_ = n;
  recovered_ = true;
}

bool ContinuityShard::owns(uint64_t key) const { return continuity_place(cfg_, key).node == node_; }

void ContinuityShard::check_kv(uint64_t key, std::span<const std::byte> value, bool exact) const {
  if (!owns(key))
    throw InvalidArgument("key " + std::to_string(key) + " belongs to another shard than " + std::to_string(node_));
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

std::optional<ContinuityShard::Loc> ContinuityShard::locate(uint64_t key, const ContinuityPlacement& p) const {
  // The segment's own slots and the pair's added slots (either segment's keys may be there).
  const uint64_t bits = region_.load(indicator_off(p.level, p.pair)) & (segment_mask(cfg_, p.first_bit) | kAddMask);
  for (uint64_t b = bits; b; b &= b - 1) {
    const uint32_t bit = static_cast<uint32_t>(std::countr_zero(b));
    const uint64_t off = slot_off(p.level, p.pair, bit);
    if (static_cast<uint32_t>(region_.load(off)) == p.kbits && region_.load(off + 8) == key) return Loc{p.pair, bit};
  }
  return std::nullopt;
}

int ContinuityShard::free_bit(const ContinuityPlacement& p, uint64_t bits, bool with_added) const {
  // Home bucket first (bits first_bit.. for even, the last four for odd), then the SBuckets.
  const uint32_t home = p.first_bit == 0 ? 0 : 4 + 4 * cfg_.sbuckets;
  for (uint32_t j = home; j < home + 4; ++j)
    if (!(bits >> j & 1)) return static_cast<int>(j);
  for (uint32_t j = 4; j < 4 + 4 * cfg_.sbuckets; ++j)
    if (!(bits >> j & 1)) return static_cast<int>(j);
  if (!with_added) return -1;
  const uint64_t taken = group_claims(p.level, p.pair, bits);
  for (uint32_t x = 0; x < cfg_.added_slots(); ++x)
    if (!(taken >> (kAddShift + x) & 1)) return static_cast<int>(kAddShift + x);
  return -1;
}

uint64_t ContinuityShard::group_claims(uint32_t level, uint64_t pair, uint64_t low) const {
  // Every pair sharing `pair`'s group (ContinuityConfig::group_of): r + P0·t with r ≡ pair (mod
  // M0), r < P0, and t equal to pair's t on the bits of the levels that doubled the groups. `pair`
  // itself counts with `low` (its indicator to come, which may claim more than its stored one).
  const uint64_t p0 = cfg_.buckets_per_node / 2, m0 = cfg_.groups_at(0);
  uint64_t m = 0;
  const uint64_t doubled = doubling_levels(cfg_, level, &m);
  const uint64_t free_bits = ((uint64_t{1} << level) - 1) & ~doubled;
  const uint64_t t0 = (pair / p0) & ~free_bits;
  uint64_t taken = low & kAddMask;
  for (uint64_t sub = free_bits;; sub = (sub - 1) & free_bits) {
    for (uint64_t r = pair % p0 % m0; r < p0; r += m0)
      if (const uint64_t q = r + p0 * (t0 | sub); q != pair) taken |= region_.load(indicator_off(level, q)) & kAddMask;
    if (sub == 0) break;
  }
  return taken;
}

uint64_t ContinuityShard::write_slot(uint32_t level, uint64_t pair, uint32_t bit, uint64_t key, uint32_t kbits,
                                     uint64_t pub, uint64_t low, std::span<const std::byte> value) {
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  low &= kBitsMask;  // valid bits and claims of the next indicator
  store64(rec.data(), make_ctrl(pub, kbits));
  l.build(key, pub, value, rec.data());
  const uint64_t off = slot_off(level, pair, bit);
  for (uint32_t w = 0; w < l.bytes; w += 8) region_.store(off + w, load64(rec.data() + w));
  region_.persist(off, l.bytes);  // I2: the item is durable before any indicator can publish it
  return low | (1ULL << bit);
}

void ContinuityShard::set_indicator(uint32_t level, uint64_t pair, uint64_t bits, uint64_t flags) {
  const uint64_t off = indicator_off(level, pair);
  const uint64_t seq = seq_of(region_.load(off)) + 1;
  region_.store(off, make_indicator(bits, seq) | flags);  // the one 8-byte store that commits the operation
  region_.persist(off, 8);                        // I3: durable before the reply
  region_.store(echo_off(level, pair), make_indicator(bits, seq) | flags);  // readers' bracket (not persisted)
}

void ContinuityShard::store_geometry(uint32_t level, bool resizing) {
  region_.store(kContinuityGeometryOffset, geometry_word(level, resizing));
  region_.persist(kContinuityGeometryOffset, 8);
}

ContinuityResult ContinuityShard::insert_new(uint64_t key, const ContinuityPlacement& p,
                                             std::span<const std::byte> value) {
  const uint64_t ind = region_.load(indicator_off(p.level, p.pair));
  const int bit = free_bit(p, ind, added_allowed());
  if (bit < 0) return {Status::kFull, 0};
  stats_.added_writes += bit >= static_cast<int>(kAddShift);
  const uint64_t before = region_.persists();
  set_indicator(p.level, p.pair,
                write_slot(p.level, p.pair, static_cast<uint32_t>(bit), key, p.kbits, seq_of(ind) + 1, ind, value));
  ++records_;
  ++stats_.inserts;
  const auto n = static_cast<uint32_t>(region_.persists() - before);
  stats_.insert_persists += n;
  return {Status::kInserted, n};
}

ContinuityResult ContinuityShard::replace(const Loc& at, uint64_t key, const ContinuityPlacement& p,
                                          std::span<const std::byte> value) {
  const uint64_t ind = region_.load(indicator_off(p.level, p.pair));
  const int bit = free_bit(p, ind, added_allowed());
  stats_.added_writes += bit >= static_cast<int>(kAddShift);
  if (bit < 0) return {Status::kFull, 0};  // out of place needs a free slot in the segment; nothing changed
  const uint64_t before = region_.persists();
  const uint64_t low = write_slot(p.level, p.pair, static_cast<uint32_t>(bit), key, p.kbits, seq_of(ind) + 1, ind, value);
  set_indicator(p.level, p.pair, low & ~(1ULL << at.bit));  // both bits flip in one store
  stats_.added_vacated += at.bit >= kAddShift;
  ++stats_.updates;
  const auto n = static_cast<uint32_t>(region_.persists() - before);
  stats_.update_persists += n;
  return {Status::kUpdated, n};
}

ContinuityResult ContinuityShard::write(Kind kind, uint64_t key, std::span<const std::byte> value) {
  check_kv(key, value, kind == Kind::kPut || kind == Kind::kUpdate);
  std::lock_guard lock(mu_);
  if (resizing_) {
    // The key's own pair first: from now on its items are written in the new table only.
    migrate_pair(continuity_place(cfg_, key, level_).pair);
    for (uint32_t i = 0; i < cfg_.migrate_pairs_per_write && step_locked(); ++i) {
    }
  }
  for (;;) {
    const ContinuityPlacement p = continuity_place(cfg_, key, write_level());
    const auto at = locate(key, p);
    ContinuityResult r;
    switch (kind) {
      case Kind::kFindOrPut:
        if (at) return {Status::kFound, 0};
        r = insert_new(key, p, value);
        break;
      case Kind::kPut: r = at ? replace(*at, key, p, value) : insert_new(key, p, value); break;
      case Kind::kUpdate:
        if (!at) return {Status::kNotFound, 0};
        r = replace(*at, key, p, value);
        break;
      case Kind::kErase: {
        if (!at) return {Status::kNotFound, 0};
        const uint64_t before = region_.persists();
        set_indicator(p.level, p.pair, (region_.load(indicator_off(p.level, p.pair)) & kBitsMask) & ~(1ULL << at->bit));
        --records_;
        ++stats_.erases;
        stats_.added_vacated += at->bit >= kAddShift;
        const auto n = static_cast<uint32_t>(region_.persists() - before);
        stats_.erase_persists += n;
        return {Status::kErased, n};
      }
    }
    if (r.status != Status::kFull) return r;
    if (resizing_ && cfg_.added_group_pairs) {
      // Added slots of the new table are not given to writes during a resize (they are kept for
      // the migration, see continuity.h): finish it, then retry with them.
      while (step_locked()) {
      }
      continue;
    }
    if (!grow_locked(key)) {
      ++stats_.full;
      return r;
    }
  }
}

ContinuityResult ContinuityShard::find_or_put(uint64_t key, std::span<const std::byte> value) {
  return write(Kind::kFindOrPut, key, value);
}
ContinuityResult ContinuityShard::put(uint64_t key, std::span<const std::byte> value) {
  return write(Kind::kPut, key, value);
}
ContinuityResult ContinuityShard::update(uint64_t key, std::span<const std::byte> value) {
  return write(Kind::kUpdate, key, value);
}
ContinuityResult ContinuityShard::erase(uint64_t key) { return write(Kind::kErase, key, {}); }

// --- online resizing ------------------------------------------------------------------------------

bool ContinuityShard::start_locked() {
  if (resizing_ || level_ >= cfg_.max_resizes) return false;
  const uint32_t next = level_ + 1;
  const uint64_t pairs = cfg_.buckets_at(next) / 2;
  for (uint64_t i = 0; i < pairs; ++i) store_indicator(next, i, kUnborn);
  // Every pair of the new table is UNBORN on the media before the geometry names the table.
  region_.persist(cfg_.table_offset(next), cfg_.table_offset(next + 1) - cfg_.table_offset(next));
  store_geometry(level_, true);
  resizing_ = true;
  cursor_ = 0;
  ++stats_.resizes;
  return true;
}

void ContinuityShard::migrate_pair(uint64_t pair) {
  const uint64_t ind = region_.load(indicator_off(level_, pair));
  if (ind & kMoved) return;
  const uint64_t before = region_.persists();
  const uint32_t next = level_ + 1;
  const uint64_t child[2] = {pair, pair + cfg_.buckets_at(level_) / 2};
  uint64_t cind[2], low[2];
  for (int c = 0; c < 2; ++c) {
    cind[c] = region_.load(indicator_off(next, child[c]));
    if (!(cind[c] & kUnborn))
      throw std::logic_error("continuity: a child of a not-MOVED pair is born (recovery resets these)");
    low[c] = 0;
  }
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  // Own and added items alike: each takes its home bucket, then the SBuckets, then the child's
  // group. The parent's own items alone always fit the children's own slots, and how many items
  // reach a group does not depend on the order, so at most the parent's added items go there.
  for (uint64_t b = ind & kValidMask; b; b &= b - 1) {
    const uint64_t off = slot_off(level_, pair, static_cast<uint32_t>(std::countr_zero(b)));
    for (uint32_t w = 0; w < l.bytes; w += 8) store64(rec.data() + w, region_.load(off + w));
    const uint64_t key = l.key(rec.data());
    const ContinuityPlacement p = continuity_place(cfg_, key, next);
    stats_.migrated_added_items += std::countr_zero(b) >= static_cast<int>(kAddShift);
    const int c = p.pair == child[0] ? 0 : 1;
    const int bit = free_bit(p, low[c], cfg_.added_group_pairs != 0);
    if (bit < 0 || p.pair != child[c]) throw std::logic_error("continuity: a migrated segment overflowed");
    stats_.added_writes += bit >= static_cast<int>(kAddShift);
    low[c] = write_slot(next, p.pair, static_cast<uint32_t>(bit), key, p.kbits, seq_of(cind[c]) + 1, low[c],
                        std::span<const std::byte>(rec.data() + l.val_off, cfg_.value_bytes));
    ++stats_.migrated_items;
  }
  // Insert before erase: the children are published (UNBORN cleared) before the parent lets go.
  set_indicator(next, child[0], low[0]);
  set_indicator(next, child[1], low[1]);
  set_indicator(level_, pair, 0, kMoved);  // bits cleared and MOVED set in one store
  ++stats_.migrated_pairs;
  stats_.migrate_persists += region_.persists() - before;
}

bool ContinuityShard::step_locked() {
  if (!resizing_) return false;
  const uint64_t pairs = cfg_.buckets_at(level_) / 2;
  while (cursor_ < pairs && (region_.load(indicator_off(level_, cursor_)) & kMoved)) ++cursor_;
  if (cursor_ < pairs) {
    migrate_pair(cursor_++);
    return true;
  }
  store_geometry(level_ + 1, false);  // every pair MOVED: the new table is in charge
  ++level_;
  resizing_ = false;
  return false;
}

bool ContinuityShard::grow_locked(uint64_t key) {
  if (write_level() >= cfg_.max_resizes) return false;
  while (step_locked()) {
  }
  start_locked();
  migrate_pair(continuity_place(cfg_, key, level_).pair);
  return true;
}

bool ContinuityShard::start_resize() {
  std::lock_guard lock(mu_);
  return start_locked();
}
bool ContinuityShard::resize_step() {
  std::lock_guard lock(mu_);
  return step_locked();
}
void ContinuityShard::finish_resize() {
  std::lock_guard lock(mu_);
  while (step_locked()) {
  }
}
uint32_t ContinuityShard::level() const {
  std::lock_guard lock(mu_);
  return level_;
}
bool ContinuityShard::resizing() const {
  std::lock_guard lock(mu_);
  return resizing_;
}
uint64_t ContinuityShard::capacity() const {
  std::lock_guard lock(mu_);
  return cfg_.slots_at(write_level());
}

uint64_t ContinuityShard::resize_into(ContinuityShard& dst) {
  if (&dst == this) throw InvalidArgument("resize_into: the destination is this table");
  if (dst.cfg_.value_bytes != cfg_.value_bytes || dst.cfg_.hash_seed != cfg_.hash_seed || dst.node_ != node_ ||
      dst.cfg_.memory_nodes != cfg_.memory_nodes)
    throw InvalidArgument("resize_into: the destination differs in values, hash seed or node");
  uint64_t moved = 0;
  for (auto& [key, value] : items()) {
    // Insert first (or find the copy a crashed resize already made), then erase here.
    const ContinuityResult r = dst.find_or_put(key, value);
    if (r.status == Status::kFull)
      throw InvalidArgument("resize_into: the destination segment of key " + std::to_string(key) +
                            " is full; every item is still in one of the two tables");
    erase(key);
    ++moved;
  }
  return moved;
}

std::optional<std::vector<std::byte>> ContinuityShard::find(uint64_t key) const {
  if (!owns(key)) return std::nullopt;
  std::lock_guard lock(mu_);
  ContinuityPlacement p = continuity_place(cfg_, key, level_);
  if (region_.load(indicator_off(level_, p.pair)) & kMoved) p = continuity_place(cfg_, key, level_ + 1);
  auto at = locate(key, p);
  if (!at) return std::nullopt;
  const SlotLayout l(cfg_);
  std::vector<std::byte> rec(l.bytes);
  const uint64_t off = slot_off(p.level, at->pair, at->bit);
  for (uint32_t w = 0; w < l.bytes; w += 8) store64(rec.data() + w, region_.load(off + w));
  return std::vector<std::byte>(rec.begin() + l.val_off, rec.begin() + l.val_off + cfg_.value_bytes);
}

std::vector<std::pair<uint64_t, std::vector<std::byte>>> ContinuityShard::items() const {
  const SlotLayout l(cfg_);
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> out;
  std::vector<std::byte> rec(l.bytes);
  // Not-MOVED pairs of the table in charge, and (resizing) the born pairs of the new one.
  for (uint32_t level = level_; level <= write_level(); ++level)
    for (uint64_t i = 0; i < cfg_.buckets_at(level) / 2; ++i) {
      const uint64_t ind = region_.load(indicator_off(level, i));
      if (ind & (kMoved | kUnborn)) continue;
      for (uint64_t b = ind & kValidMask; b; b &= b - 1) {
        const uint64_t off = slot_off(level, i, static_cast<uint32_t>(std::countr_zero(b)));
        for (uint32_t w = 0; w < l.bytes; w += 8) store64(rec.data() + w, region_.load(off + w));
        out.emplace_back(l.key(rec.data()),
                         std::vector<std::byte>(rec.begin() + l.val_off, rec.begin() + l.val_off + cfg_.value_bytes));
      }
    }
  return out;
}

uint64_t ContinuityShard::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

ContinuityStats ContinuityShard::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// --- memory-node side on a fabric ----------------------------------------------------------------

struct ContinuityServer::State {
  std::shared_ptr<detail::ShardHost<ContinuityShard>> host;
  std::atomic<bool> stop{false};
  std::thread migrator;  // background_migration: advances running resizes one pair at a time
  ~State() {
    stop = true;
    if (migrator.joinable()) migrator.join();
  }
};

ContinuityServer::ContinuityServer(Fabric& fabric, const ContinuityConfig& cfg, PersistMode mode, uint16_t rpc_id)
    : cfg_(cfg), state_(std::make_shared<State>()) {
  cfg_.validate();
  state_->host = detail::ShardHost<ContinuityShard>::create(fabric, cfg_, mode, rpc_id, kContinuityRpcFirst, kContinuityRpcLast,
                                                      "continuity", config_tag(cfg_));
  if (cfg_.background_migration && cfg_.max_resizes > 0)
    state_->migrator = std::thread([host = state_->host, stop = &state_->stop] {
      // An exception here (a persist that fails, a broken invariant) must not terminate the memory
      // node from a helper thread: the thread stops and says why; writes still migrate their own
      // pairs (and meet the same error through their RPC, which reports it to the client).
      try {
        while (!stop->load()) {
          bool moved = false;
          host->for_each_shard([&moved](ContinuityShard& s) { moved = s.resize_step() || moved; });
          if (moved) std::this_thread::yield();  // the mutex is free between pairs: writes go first
          else std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "continuity: background migration stopped: %s\n", e.what());
      }
    });
}

ContinuityServer::~ContinuityServer() = default;

bool ContinuityServer::hosts(uint32_t node) const { return state_->host->hosts(node); }
ContinuityShard& ContinuityServer::shard(uint32_t node) { return state_->host->shard(node); }
PersistentRegion& ContinuityServer::region(uint32_t node) { return state_->host->region(node); }

bool ContinuityServer::bulk_insert(uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = continuity_place(cfg_, key).node;
  if (!hosts(node)) return false;
  const ContinuityResult r = state_->host->shard(node).put(key, value);
  if (r.status == Status::kFull)
    throw InvalidArgument("continuity shard " + std::to_string(node) + ": the segment of key " + std::to_string(key) +
                          " is full at " + std::to_string(state_->host->shard(node).records()) + " of " +
                          std::to_string(state_->host->shard(node).capacity()) +
                          " slots: use a lower load factor, more SBuckets, added SBuckets or more resizes");
  return true;
}

uint64_t ContinuityServer::records() const { return state_->host->records(); }

bool ContinuityServer::recovered() const { return state_->host->recovered(); }

ContinuityStats ContinuityServer::stats() const {
  ContinuityStats t;
  state_->host->for_each_shard([&t](const ContinuityShard& s) {
    const ContinuityStats x = s.stats();
    t.inserts += x.inserts;
    t.updates += x.updates;
    t.erases += x.erases;
    t.full += x.full;
    t.insert_persists += x.insert_persists;
    t.update_persists += x.update_persists;
    t.erase_persists += x.erase_persists;
    t.resizes += x.resizes;
    t.migrated_pairs += x.migrated_pairs;
    t.migrated_items += x.migrated_items;
    t.migrate_persists += x.migrate_persists;
    t.cleaned_leftovers += x.cleaned_leftovers;
    t.added_writes += x.added_writes;
    t.added_vacated += x.added_vacated;
    t.migrated_added_items += x.migrated_added_items;
  });
  return t;
}

// --- client -------------------------------------------------------------------------------------

ContinuityClient::ContinuityClient(const ContinuityConfig& cfg, Engine& engine, uint16_t rpc_id)
    : cfg_(cfg), engine_(engine), rpc_id_(rpc_id), cfg_tag_(config_tag(cfg)) {
  cfg_.validate();
  levels_.assign(cfg_.memory_nodes, 0);
  if (rpc_id < kContinuityRpcFirst || rpc_id > kContinuityRpcLast)
    throw InvalidArgument("continuity rpc id must be in [0x0D00, 0x0D0F], got " + std::to_string(rpc_id));
}

void ContinuityClient::check_value(std::span<const std::byte> value, bool exact) const {
  if (value.size() > cfg_.value_bytes || (exact && value.size() != cfg_.value_bytes))
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes does not fit the table's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
}

Task<OpResult> ContinuityClient::get(uint64_t key, std::span<std::byte> value_out) {
  const uint32_t node = continuity_place(cfg_, key).node;
  uint32_t level = levels_[node];
  const SlotLayout l(cfg_);
  const uint32_t len = cfg_.segment_bytes() + 8;  // an even segment's READ, with the echo word
  // The group and the previous attempt's buffers are allocated when first needed: most gets READ
  // one segment once (four zeroed buffers a get were a fifth of its client CPU).
  std::vector<std::byte> seg(len), grp;
  // The previous attempt's READs of this segment (and group), for items older than the seq window
  // (continuity.h, "Old items"): `prev_level` is none when there is nothing to compare with.
  constexpr uint32_t kNone = ~0u;
  std::vector<std::byte> prev_seg, prev_grp;
  uint64_t prev_ind = 0;
  uint32_t prev_level = kNone;
  bool prev_grp_read = false;
  uint32_t old_waits = 0;  // attempts that stopped only at a slot outside the window, or busy
  bool ask = false;
  OpResult r;
  ContinuityPlacement p;
  for (uint32_t attempt = 0; attempt < kMaxRetries; ++attempt) {
    p = continuity_place(cfg_, key, level);
    co_await engine_.read(RemoteAddr{p.node, p.segment_offset}, seg.data(), p.read_bytes);  // the one READ
    ++r.chunks;
    const uint64_t ind = load64(seg.data() + p.indicator_pos);
    if (ind & kMoved) {  // the pair's items are in the next table, and so is the table in charge
      if (level >= cfg_.max_resizes) break;
      levels_[node] = std::max(levels_[node], ++level);
      prev_level = kNone;
      continue;
    }
    if (ind & kUnborn) {  // not migrated yet: its items are still in the previous table
      if (level == 0) break;
      --level;
      prev_level = kNone;
      continue;
    }
    const uint64_t s = seq_of(ind);
    const uint64_t bits = ind & segment_mask(cfg_, p.first_bit);
    // A slot outside the seq window — republished after the indicator was read (pub > s), or an
    // item older than 2^16 publications of its pair — is taken only if the previous attempt read
    // the same indicator word and the same slot bytes (continuity.h, "Old items").
    const bool same = prev_level == level && prev_ind == ind;
    auto settled = [&](bool in_window, const std::byte* rec, const std::byte* prev) {
      return in_window || (prev != nullptr && std::memcmp(rec, prev, l.bytes) == 0);
    };
    // Keeps this attempt's READs for the next one; true when the lookup should ask the node.
    auto retry = [&](bool grp_read, bool old) {
      if (prev_seg.empty()) prev_seg.resize(len);
      seg.swap(prev_seg);
      prev_ind = ind;
      prev_level = level;
      if (grp_read) {
        if (prev_grp.empty()) prev_grp.resize(cfg_.group_bytes());
        grp.swap(prev_grp);
      }
      prev_grp_read = grp_read;
      return old && ++old_waits >= kOldItemReads;
    };
    // An even segment is bracketed by the pair's echo word (READ first) and its indicator: equal
    // words mean no indicator store came between them, so every valid slot was READ as that
    // indicator published it, the slots of bucket 2i included (READ before the indicator). Unequal:
    // the pair changed during the READ; READ again (and after kOldItemReads such READs, ask).
    const bool even = p.first_bit == 0;
    if (even && load64(seg.data()) != ind) {
      if ((ask = retry(false, true))) break;
      continue;
    }
    bool stable = true, old = false;
    const std::byte* hit = nullptr;
    for (uint64_t b = bits; b; b &= b - 1) {
      const uint32_t bit = static_cast<uint32_t>(std::countr_zero(b));
      // Slot position inside the READ: the even segment's READ starts at the pair (the echo), the
      // odd one at its indicator.
      const uint64_t pos = cfg_.slot_in_pair(bit) - (even ? 0 : cfg_.odd_segment_in_pair());
      const std::byte* rec = seg.data() + pos;
      const uint64_t ctrl = load64(rec);
      if (!(ctrl & kOcc) || !l.consistent(rec)) {
        stable = false;  // torn (or, in a quiet even segment, corrupt): never guess
        break;
      }
      // The seq window is the test of every slot READ after the indicator; the slots of bucket 2i
      // in a quiet even segment (READ between the echo and the indicator) are the published
      // items, old ones included.
      if ((!even || bit >= 4) && !settled(not_after(version_of(ctrl), s), rec, same ? prev_seg.data() + pos : nullptr)) {
        stable = false;  // rewritten after the indicator was read, or an old item: READ again
        old = true;
        break;
      }
      if (static_cast<uint32_t>(ctrl) == p.kbits && l.key(rec) == key) hit = rec;
    }
    if (!stable) {
      if ((ask = retry(false, old))) break;
      continue;
    }
    if (const uint64_t claims = (ind & kAddMask) >> kAddShift; !hit && claims) {
      if (cfg_.added_group_pairs == 0)
        throw InvalidArgument("continuity: the table has added SBuckets but this client's configuration has none "
                              "(added_group_pairs = 0): build the client with the table's configuration");
      // The pair has added slots: READ its group (after the segment READ completed, so every word
      // of it is observed after the indicator). A claimed slot is taken only if it holds a whole
      // item of this pair published no later than the indicator (pub <= s); anything else — torn,
      // republished by this pair (pub > s), or reused by another pair of the group after the
      // indicator was read (its key is not this pair's) — is unstable: READ again, never a miss.
      if (grp.empty()) grp.resize(cfg_.group_bytes());
      co_await engine_.read(RemoteAddr{p.node, cfg_.group_offset(level, cfg_.group_of(level, p.pair))}, grp.data(),
                            static_cast<uint32_t>(grp.size()));
      ++r.chunks;
      for (uint64_t b = claims; b; b &= b - 1) {
        const uint64_t pos = uint64_t{static_cast<uint32_t>(std::countr_zero(b))} * l.bytes;
        const std::byte* rec = grp.data() + pos;
        const uint64_t ctrl = load64(rec);
        if (!(ctrl & kOcc) || !l.consistent(rec)) {
          stable = false;
          break;
        }
        if (!settled(not_after(version_of(ctrl), s), rec, same && prev_grp_read ? prev_grp.data() + pos : nullptr)) {
          stable = false;
          old = true;
          break;
        }
        const ContinuityPlacement q = continuity_place(cfg_, l.key(rec), level);
        if (q.pair != p.pair || q.node != p.node || static_cast<uint32_t>(ctrl) != q.kbits) {
          stable = false;  // another pair's item: the slot was freed and reused after our indicator
          break;
        }
        if (l.key(rec) == key) hit = rec;
      }
      if (!stable) {
        if ((ask = retry(true, old))) break;
        continue;
      }
    }
    if (hit) {
      if (!value_out.empty()) std::memcpy(value_out.data(), hit + l.val_off, std::min<size_t>(value_out.size(), cfg_.value_bytes));
      r.status = Status::kFound;
      r.matches = 1;
    } else {
      r.status = Status::kNotFound;
    }
    co_return r;
  }
  if (ask) {
    // An old item whose pair keeps changing: the node answers under its shard lock (one RPC; the
    // lookup linearizes inside it).
    co_return co_await write_rpc::get(engine_, "continuity", rpc_id_, node, cfg_tag_, key, cfg_.value_bytes, value_out, r);
  }
  throw FabricError("continuity: segment at offset " + std::to_string(p.segment_offset) + " on node " +
                    std::to_string(p.node) + " stayed inconsistent or carries a resize mark its table cannot have " +
                    "(did the memory node die mid-write, or is the geometry another?)");
}

Task<OpResult> ContinuityClient::remote(uint8_t op, uint64_t key, std::span<const std::byte> value) {
  const uint32_t node = continuity_place(cfg_, key).node;
  return write_rpc::write(engine_, "continuity", rpc_id_, node, cfg_tag_, static_cast<write_rpc::Op>(op), key, value, &persists_);
}

Task<OpResult> ContinuityClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, false);
  co_return co_await remote(write_rpc::kFindOrPut, key, value);
}

Task<OpResult> ContinuityClient::put(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kPut, key, value);
}

Task<OpResult> ContinuityClient::update(uint64_t key, std::span<const std::byte> value) {
  check_value(value, true);
  co_return co_await remote(write_rpc::kUpdate, key, value);
}

Task<OpResult> ContinuityClient::erase(uint64_t key) { co_return co_await remote(write_rpc::kErase, key, {}); }

Task<OpResult> ContinuityClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  return get_all_by_get(key, cfg_.value_bytes, values_out);
}

Task<ContinuityHeader> ContinuityClient::read_header(uint32_t node) {
  if (node >= cfg_.memory_nodes) throw InvalidArgument("node " + std::to_string(node) + " holds no shard of this table");
  ContinuityHeader h{};
  co_await engine_.read(RemoteAddr{node, 0}, &h, sizeof h);
  try {
    check_image_frame(&h, "continuity", kContinuityMagic, kContinuityFormatVersion);  // magic, version, checksum
  } catch (const PmemError& e) {  // over the fabric: not a file's image, the node's table
    throw FabricError("node " + std::to_string(node) + " holds no valid continuity table: " + e.what());
  }
  if (h.buckets != cfg_.buckets_per_node || h.sbuckets != cfg_.sbuckets || h.value_bytes != cfg_.value_bytes ||
      h.hash_seed != cfg_.hash_seed || h.memory_nodes != cfg_.memory_nodes || h.added_group_pairs != cfg_.added_group_pairs)
    throw InvalidArgument("continuity shard " + std::to_string(node) + " was built with a different configuration");
  co_return h;
}

}  // namespace rdmahash
