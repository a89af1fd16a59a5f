// Linear probing over one-sided operations. The layout, publication protocol and invariants are
// documented in include/rdmahash/linear.h; this file follows them line by line.
#include <csignal>
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdmahash/linear.h"
#include "common/hash.h"
#include "schemes/record.h"
#include "schemes/retry.h"

namespace rdmahash {
namespace {

using record::kDel;
using record::kLock;
using record::kOcc;
using record::kVersionMask;
constexpr uint64_t kSetTombstone = 1;
constexpr uint64_t kHeaderBytes = sizeof(ShardHeader);
// kHeap slot words (see linear.h).
constexpr uint64_t kHOcc = 1ULL << 63;
constexpr uint64_t kHDel = 1ULL << 62;
constexpr int kFpShift = 46;
constexpr uint64_t kIdxMask = (1ULL << kFpShift) - 1;
constexpr uint64_t kHeapHeaderBytes = sizeof(HeapHeader);
inline uint64_t heap_word(uint16_t fp, uint64_t index) {
  return kHOcc | (static_cast<uint64_t>(fp) << kFpShift) | (index + 1);
}
inline bool heap_live(uint64_t w) { return (w & kHOcc) && !(w & kHDel); }
inline uint16_t heap_fp(uint64_t w) { return static_cast<uint16_t>(w >> kFpShift); }
inline uint64_t heap_index(uint64_t w) { return (w & kIdxMask) - 1; }
// kHeap4 bucket words.
inline uint8_t way_fp(uint64_t w, uint32_t way) { return static_cast<uint8_t>(w >> (32 + 8 * way)); }
inline uint64_t bucket_group(uint64_t w) { return (w & 0xffffffffULL) - 1; }
inline bool bucket_has_free_way(uint64_t w) { return w == 0 || way_fp(w, 3) == 0; }  // ways fill in order

// A buffer that lives in the coroutine frame when small (the common case: R or C slots of a few
// words) and on the heap otherwise, so a lookup does not pay a malloc for its read buffer.
class Scratch {
 public:
  // n == 0: just the inline bytes (callers check size() and fall back to their own buffer).
  explicit Scratch(size_t n) : n_(n ? n : sizeof small_) {
    if (n > sizeof small_) big_.resize(n);
  }
  std::byte* data() { return n_ > sizeof small_ ? big_.data() : small_; }
  size_t size() const { return n_; }

 private:
  size_t n_;
  alignas(8) std::byte small_[512];  // find_or_put's double buffer of 2 chunks of 8 slots of 32 B
  std::vector<std::byte> big_;
};

using record::load64;
using record::make_ctrl;
using record::store64;
using record::version_of;

// Inline slots and heap records use the shared record format (schemes/record.h).
struct InlineLayout : record::Layout {
  explicit InlineLayout(const LinearConfig& c) : record::Layout(c.key_bytes, c.value_bytes) {}
};

// The key stored in a published inline slot.
inline uint64_t slot_key(const LinearConfig& c, const std::byte* slot) { return InlineLayout(c).key(slot); }
inline bool inline_consistent(const LinearConfig&, const InlineLayout& l, const std::byte* slot) {
  return l.consistent(slot);
}
// Builds the bytes after ctrl (key word, padded value, check) for version `v`.
inline void build_payload(const LinearConfig&, const InlineLayout& l, uint64_t key, uint64_t v,
                          std::span<const std::byte> value, std::byte* slot) {
  l.build(key, v, value, slot);
}

}  // namespace

const char* to_string(SlotFormat f) {
  switch (f) {
    case SlotFormat::kSet: return "set";
    case SlotFormat::kInline: return "inline";
    case SlotFormat::kHeap: return "heap";
    case SlotFormat::kHeap4: return "heap4";
  }
  return "?";
}

// --- configuration --------------------------------------------------------------------------

LinearConfig LinearConfig::for_records(uint64_t records, double load_factor, uint32_t memory_nodes) {
  if (!(load_factor > 0.0 && load_factor < 1.0))
    throw InvalidArgument("load factor must be in (0, 1), got " + std::to_string(load_factor));
  if (records == 0) throw InvalidArgument("records must be at least 1");
  if (memory_nodes == 0) throw InvalidArgument("memory nodes must be at least 1");
  LinearConfig c;
  c.memory_nodes = memory_nodes;
  const double total_home = static_cast<double>(records) / load_factor;
  const double per_node = total_home / memory_nodes + 0.5;
  // Converting a double beyond 2^64 to an integer is undefined: refuse before the cast.
  if (!(per_node <= static_cast<double>(kMaxHomeSlots)))
    throw InvalidArgument("load factor " + std::to_string(load_factor) + " is too small for " + std::to_string(records) +
                          " records: the table would need more than 2^36 home slots per memory node");
  c.home_slots = std::max<uint64_t>(8, static_cast<uint64_t>(per_node));
  return c;
}

namespace {
// A shard's bytes, or nullopt when they overflow or exceed kMaxRegionBytes.
std::optional<uint64_t> checked_region_bytes(const LinearConfig& c) {
  uint64_t total = 0, bytes = 0, heap = 0;
  if (__builtin_add_overflow(c.home_slots, c.tail(), &total) ||
      __builtin_mul_overflow(total, uint64_t{c.slot_bytes()}, &bytes) || __builtin_add_overflow(bytes, kHeaderBytes, &bytes))
    return std::nullopt;
  if (c.heap()) {
    const uint64_t records = c.heap_records ? c.heap_records
                                            : (c.format == SlotFormat::kHeap4 ? total * 4 : total + total / 4 + 1024);
    if (__builtin_mul_overflow(records, uint64_t{c.record_bytes()}, &heap) ||
        __builtin_add_overflow(heap, kHeapHeaderBytes, &heap) || __builtin_add_overflow(bytes, heap, &bytes))
      return std::nullopt;
  }
  if (bytes > kMaxRegionBytes) return std::nullopt;
  return bytes;
}
}  // namespace

std::string linear_config_error(const LinearConfig& c) {
  if (c.memory_nodes == 0) return "memory nodes must be at least 1";
  if (c.home_slots == 0) return "home slots must be at least 1";
  if (c.home_slots > kMaxHomeSlots) return "home slots per node must be at most 2^36";
  if (c.tail_slots > kMaxTailSlots)
    return "tail slots per node must be at most 2^36, got " + std::to_string(c.tail_slots);
  if (c.format == SlotFormat::kSet) {
    if (c.key_bytes != 8) return "set tables use 8-byte slots holding 63-bit keys (key bytes must be 8)";
    if (c.value_bytes != 0) return "set tables hold keys only (value bytes must be 0; use inline records for values)";
  } else {
    if (c.key_bytes != 4 && c.key_bytes != 8) return "key bytes must be 4 or 8, got " + std::to_string(c.key_bytes);
    if (c.format == SlotFormat::kInline && c.value_bytes > 120)
      return "value bytes must be at most 120 for inline records, got " + std::to_string(c.value_bytes);
    if (c.value_bytes > 4096) return "value bytes must be at most 4096 for heap records, got " + std::to_string(c.value_bytes);
    if (c.format != SlotFormat::kInline && c.format != SlotFormat::kHeap && c.format != SlotFormat::kHeap4)
      return "unknown slot format " + std::to_string(static_cast<int>(c.format));
  }
  if (c.format == SlotFormat::kHeap && c.heap_capacity() > kIdxMask)
    return "heap records per node must be below 2^46";
  if (c.format == SlotFormat::kHeap4 && (c.heap_capacity() / 4 >= 0xffffffffULL || c.heap_capacity() % 4))
    return "heap4 heaps hold a multiple of 4 records, fewer than 2^34";
  // The region's size by checked arithmetic: a tail of 2^61 slots wrapped it, and the loader wrote
  // past the end of the small region it got.
  if (!checked_region_bytes(c)) return "a shard (slots and heap) would exceed 2^44 bytes";
  return {};
}

void LinearConfig::validate() const {
  if (auto e = linear_config_error(*this); !e.empty()) throw InvalidArgument(e);
}

uint32_t LinearConfig::slot_bytes() const {
  return format == SlotFormat::kInline ? InlineLayout(*this).bytes : 8;
}

uint32_t LinearConfig::record_bytes() const {
  return format == SlotFormat::kSet ? 8 : InlineLayout(*this).bytes;
}

uint64_t LinearConfig::heap_capacity() const {
  if (!heap()) return 0;
  if (heap_records) return heap_records;
  const uint64_t t = total_slots();
  return format == SlotFormat::kHeap4 ? 4 * t : t + t / 4 + 1024;
}

uint64_t LinearConfig::heap_offset() const { return kHeaderBytes + total_slots() * slot_bytes(); }

uint64_t LinearConfig::region_bytes() const {
  if (auto b = checked_region_bytes(*this)) return *b;
  throw InvalidArgument("linear: a shard (slots and heap) would exceed 2^44 bytes");
}

HeapSlot decode_heap_slot(uint64_t w) {
  HeapSlot h;
  if (w == 0) return h;
  h.empty = false;
  h.tombstone = (w & kHDel) != 0;
  h.fp = heap_fp(w);
  h.index = heap_index(w);
  return h;
}

std::optional<std::pair<uint64_t, std::vector<std::byte>>> linear_heap_record(const LinearConfig& cfg,
                                                                            std::span<const std::byte> region,
                                                                            uint64_t index) {
  if (!cfg.heap() || index >= cfg.heap_capacity()) return std::nullopt;
  const InlineLayout l(cfg);
  const uint64_t off = cfg.heap_offset() + kHeapHeaderBytes + index * l.bytes;
  if (off + l.bytes > region.size()) return std::nullopt;
  std::vector<std::byte> rec(region.begin() + static_cast<std::ptrdiff_t>(off),
                             region.begin() + static_cast<std::ptrdiff_t>(off + l.bytes));
  const uint64_t ctrl = load64(rec.data());
  if (!(ctrl & kOcc) || (ctrl & (kLock | kDel)) || !inline_consistent(cfg, l, rec.data())) return std::nullopt;
  const uint64_t key = slot_key(cfg, rec.data());
  if (static_cast<uint32_t>(ctrl) != linear_place(cfg, key).kbits) return std::nullopt;
  return std::make_pair(key, std::vector<std::byte>(rec.begin() + l.val_off, rec.begin() + l.val_off + cfg.value_bytes));
}

const char* to_string(SpeculativeClaim s) {
  switch (s) {
    case SpeculativeClaim::kOff: return "off";
    case SpeculativeClaim::kOn: return "on";
    case SpeculativeClaim::kAuto: return "auto";
  }
  return "?";
}

std::optional<SpeculativeClaim> parse_speculative_claim(std::string_view name) {
  for (SpeculativeClaim s : {SpeculativeClaim::kOff, SpeculativeClaim::kOn, SpeculativeClaim::kAuto})
    if (name == to_string(s)) return s;
  return std::nullopt;
}

void ProbeConfig::validate() const {
  if (chunk == 0) throw InvalidArgument("chunk size must be at least 1 slot");
  if (max_chunks == 0) throw InvalidArgument("max chunks must be at least 1");
  if (read_size == 0) throw InvalidArgument("read size must be at least 1 slot");
  if (chunk > 65536 || read_size > 65536) throw InvalidArgument("chunk and read size must be at most 65536 slots");
}

LinearPlacement linear_place(const LinearConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  const uint64_t h2 = hash::mix64(h ^ 0xA0761D6478BD642FULL);
  LinearPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  p.home = hash::range(h2, c.home_slots);
  p.kbits = c.key_bytes == 4 ? static_cast<uint32_t>(key) : static_cast<uint32_t>(h);
  // Bits 32..47 of h: independent of the node (top bits of h) and of the home slot (from h2).
  p.fp16 = static_cast<uint16_t>(h >> 32);
  p.fp8 = static_cast<uint8_t>(1 + (h >> 32) % 255);
  return p;
}

// --- memory-node side -------------------------------------------------------------------------

LinearShardLoader::LinearShardLoader(const LinearConfig& cfg, uint32_t node, std::span<std::byte> region)
    : cfg_(cfg), node_(node), region_(region) {
  cfg_.validate();
  if (node >= cfg.memory_nodes) throw InvalidArgument("shard index out of range");
  if (region.size() < cfg.region_bytes())
    throw InvalidArgument("region of " + std::to_string(region.size()) + " bytes is smaller than the shard (" +
                          std::to_string(cfg.region_bytes()) + " bytes)");
  std::memset(region.data(), 0, cfg.region_bytes());
  ShardHeader h{};
  h.magic = kLinearMagic;
  h.format = static_cast<uint32_t>(cfg.format);
  h.key_bytes = cfg.key_bytes;
  h.value_bytes = cfg.value_bytes;
  h.slot_bytes = cfg.slot_bytes();
  h.home_slots = cfg.home_slots;
  h.total_slots = cfg.total_slots();
  h.records = 0;
  h.hash_seed = cfg.hash_seed;
  h.node = node;
  h.memory_nodes = cfg.memory_nodes;
  std::memcpy(region.data(), &h, sizeof h);
  if (cfg.heap()) {
    HeapHeader hh{};
    hh.magic = kLinearHeapMagic;
    hh.next = 0;
    hh.capacity = cfg.heap_capacity();
    hh.record_bytes = cfg.record_bytes();
    hh.ways = cfg.format == SlotFormat::kHeap4 ? 4 : 1;
    std::memcpy(region.data() + cfg.heap_offset(), &hh, sizeof hh);
  }
}

uint64_t LinearShardLoader::records() const {
  ShardHeader h;
  std::memcpy(&h, region_.data(), sizeof h);
  return h.records;
}

bool LinearShardLoader::insert(uint64_t key, std::span<const std::byte> value) {
  const LinearPlacement p = linear_place(cfg_, key);
  if (p.node != node_) return false;
  if (cfg_.format == SlotFormat::kSet && key >= kOcc) throw InvalidArgument("set keys must be below 2^63");
  if (cfg_.format != SlotFormat::kSet && cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("4-byte keys must be below 2^32");
  if (value.size() != (cfg_.format == SlotFormat::kSet ? 0 : cfg_.value_bytes))
    throw InvalidArgument("value must be exactly value_bytes long");
  const uint32_t sb = cfg_.slot_bytes();
  std::byte* slots = region_.data() + kHeaderBytes;
  const uint64_t total = cfg_.total_slots();
  uint64_t s = p.home;
  if (cfg_.format == SlotFormat::kHeap4) {
    while (s < total && !bucket_has_free_way(load64(slots + s * sb))) ++s;
  } else {
    while (s < total && load64(slots + s * sb) != 0) ++s;
  }
  if (s == total)
    throw InvalidArgument("shard " + std::to_string(node_) + " overflowed its " + std::to_string(cfg_.tail()) +
                          " tail slots: use a lower load factor or more tail slots");
  std::byte* slot = slots + s * sb;
  if (cfg_.heap()) {
    HeapHeader hh;
    std::byte* hp = region_.data() + cfg_.heap_offset();
    std::memcpy(&hh, hp, sizeof hh);
    const InlineLayout l(cfg_);
    uint64_t word = load64(slot);
    uint64_t index;
    if (cfg_.format == SlotFormat::kHeap4) {
      if (word == 0) {  // the bucket's first record: allocate its group of 4
        if (hh.next + 4 > hh.capacity)
          throw InvalidArgument("shard " + std::to_string(node_) + ": heap of " + std::to_string(hh.capacity) +
                                " records is full");
        word = hh.next / 4 + 1;
        hh.next += 4;
      }
      uint32_t way = 0;
      while (way_fp(word, way) != 0) ++way;
      index = bucket_group(word) * 4 + way;
      word |= static_cast<uint64_t>(p.fp8) << (32 + 8 * way);
    } else {
      if (hh.next >= hh.capacity)
        throw InvalidArgument("shard " + std::to_string(node_) + ": heap of " + std::to_string(hh.capacity) +
                              " records is full");
      index = hh.next++;
      word = heap_word(p.fp16, index);
    }
    std::byte* rec = hp + kHeapHeaderBytes + index * l.bytes;
    build_payload(cfg_, l, key, 1, value, rec);
    store64(rec, make_ctrl(1, p.kbits));
    store64(slot, word);
    std::memcpy(hp, &hh, sizeof hh);
  } else if (cfg_.format == SlotFormat::kSet) {
    store64(slot, kOcc | key);
  } else {
    InlineLayout l(cfg_);
    build_payload(cfg_, l, key, 1, value, slot);
    store64(slot, make_ctrl(1, p.kbits));
  }
  ShardHeader h;
  std::memcpy(&h, region_.data(), sizeof h);
  ++h.records;
  std::memcpy(region_.data(), &h, sizeof h);
  return true;
}

std::vector<uint64_t> linear_scan_keys(const LinearConfig& cfg, std::span<const std::byte> region) {
  std::vector<uint64_t> keys;
  const uint32_t sb = cfg.slot_bytes();
  const std::byte* slots = region.data() + kHeaderBytes;
  for (uint64_t s = 0; s < cfg.total_slots(); ++s) {
    const uint64_t w = load64(slots + s * sb);
    if (cfg.format == SlotFormat::kHeap) {
      if (heap_live(w))
        if (auto rec = linear_heap_record(cfg, region, heap_index(w))) keys.push_back(rec->first);
    } else if (cfg.format == SlotFormat::kHeap4) {
      for (uint32_t way = 0; w && way < 4; ++way)
        if (way_fp(w, way))
          if (auto rec = linear_heap_record(cfg, region, bucket_group(w) * 4 + way)) keys.push_back(rec->first);
    } else if (cfg.format == SlotFormat::kSet) {
      if (w & kOcc) keys.push_back(w & ~kOcc);
    } else if ((w & kOcc) && !(w & kDel)) {
      keys.push_back(slot_key(cfg, slots + s * sb));
    }
  }
  return keys;
}

// --- client -----------------------------------------------------------------------------------

struct LinearClient::Located {
  bool found = false;
  uint64_t slot = 0;
  uint64_t ctrl = 0;  // kSet: the slot word; kInline: the unlocked ctrl word read
};

LinearClient::LinearClient(const LinearConfig& cfg, const ProbeConfig& probe, Engine& engine)
    : cfg_(cfg), probe_(probe), engine_(engine), slot_bytes_(cfg.slot_bytes()), record_bytes_(cfg.record_bytes()) {
  cfg_.validate();
  probe_.validate();
  if (cfg_.heap()) spare_.resize(cfg_.memory_nodes);
}

void LinearClient::validate_key(uint64_t key) const {
  if (cfg_.format == SlotFormat::kSet && key >= kOcc)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit a set slot (keys must be below 2^63)");
  if (cfg_.format != SlotFormat::kSet && cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit 4 key bytes");
}

void LinearClient::check_value(std::span<const std::byte> value, bool required) const {
  if (cfg_.format == SlotFormat::kSet) {
    if (!value.empty()) throw InvalidArgument("set tables hold keys only: values are not accepted");
    if (required) throw InvalidArgument("set tables hold keys only: update is not supported");
    return;
  }
  if (value.size() > cfg_.value_bytes)
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes is larger than the slot's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
  if (required && value.size() != cfg_.value_bytes)
    throw InvalidArgument("value must be exactly " + std::to_string(cfg_.value_bytes) + " bytes, got " +
                          std::to_string(value.size()));
}

// --- lock recovery (memory node) --------------------------------------------------------------

LinearLockSweeper::LinearLockSweeper(Fabric& fabric, const LinearConfig& cfg) : fabric_(fabric), cfg_(cfg) {
  cfg_.validate();
}

void LinearLockSweeper::mark() {
  marked_.clear();
  if (cfg_.format != SlotFormat::kInline || cfg_.slot_bytes() == 8) return;  // no slot is ever locked
  const uint64_t sb = cfg_.slot_bytes();
  for (uint32_t n = 0; n < cfg_.memory_nodes; ++n) {
    std::span<std::byte> region = fabric_.local_region(n);
    if (region.size() < cfg_.region_bytes()) continue;
    for (uint64_t s = 0; s < cfg_.total_slots(); ++s) {
      const uint64_t c = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(region.data() + kHeaderBytes + s * sb))
                             .load(std::memory_order_acquire);
      if (c & kLock) marked_.push_back({n, s, c});
    }
  }
}

LinearLockRepair LinearLockSweeper::repair() {
  LinearLockRepair r;
  r.marked = marked_.size();
  const InlineLayout l(cfg_);
  const uint64_t sb = cfg_.slot_bytes();
  std::vector<std::byte> copy(sb);
  for (const Marked& m : marked_) {
    std::span<std::byte> region = fabric_.local_region(m.node);
    std::byte* slot = region.data() + kHeaderBytes + m.slot * sb;
    std::atomic_ref<uint64_t> ctrl(*reinterpret_cast<uint64_t*>(slot));
    if (ctrl.load(std::memory_order_acquire) != m.ctrl) continue;  // released or changed: its holder lives
    const uint64_t v = version_of(m.ctrl);
    const auto kbits = static_cast<uint32_t>(m.ctrl);
    // The payload as it is now (its holder is gone: nobody writes it).
    for (uint64_t i = 8; i < sb; i += 8)
      store64(copy.data() + i, std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot + i)).load(std::memory_order_relaxed));
    const uint64_t forward = make_ctrl((v + 1) & kVersionMask, kbits);
    const uint64_t back = m.ctrl & ~kLock;
    store64(copy.data(), forward);
    uint64_t target = 0;
    uint64_t* counter = nullptr;
    bool back_ok = false;
    if (!l.consistent(copy.data()) && v != 0) {  // version 0 is an insert's claim: nothing to go back to
      store64(copy.data(), back);
      back_ok = l.consistent(copy.data());
    }
    store64(copy.data(), forward);
    if (l.consistent(copy.data())) {
      target = forward;
      counter = &r.forward;
    } else if (back_ok) {
      target = back;
      counter = &r.back;
    } else {
      // A claim without its payload (an insert that did not happen: counted as rolled back), or
      // an update torn by its writer's death (the key is lost: counted as torn).
      target = kOcc | kDel | (((v + 1) & kVersionMask) << 32) | kbits;
      counter = v == 0 ? &r.back : &r.torn;
    }
    uint64_t expected = m.ctrl;
    if (ctrl.compare_exchange_strong(expected, target, std::memory_order_acq_rel)) ++*counter;
  }
  marked_.clear();
  return r;
}

// `lock`: the ordinal of a lock this client holds (lock_taken()); called before and after its
// payload WRITE. Other operations of the engine may take locks in between, hence the ordinal.
uint64_t LinearClient::lock_taken() { return probe_.die_holding_lock ? ++locks_taken_ : 0; }
void LinearClient::maybe_die_holding_lock(uint64_t lock, bool payload_written) {
  if (lock != 0 && lock == probe_.die_holding_lock && payload_written == (lock % 2 == 1)) ::raise(SIGKILL);
}

// Publishes the record `rec` (slot_bytes_ bytes: the unlocked ctrl word, then the payload) into
// the slot at `a`, which this client holds locked: the payload WRITE and the WRITE of the ctrl
// word fenced after it, one round trip (the fenced order is argued in linear.h). Fault injection
// (die_holding_lock, odd lock): the payload alone first, then die before the unlock.
Task<void> LinearClient::publish(RemoteAddr a, const std::byte* rec, uint64_t lock) {
  const RemoteAddr payload{a.node, a.offset + 8};
  if (lock != 0 && lock == probe_.die_holding_lock && lock % 2 == 1) {
    co_await engine_.write(payload, rec + 8, slot_bytes_ - 8);
    maybe_die_holding_lock(lock, true);
  }
  Pending body = engine_.write(payload, rec + 8, slot_bytes_ - 8);
  Pending unlock = engine_.write_fenced(a, rec, 8);
  co_await std::move(body);
  co_await std::move(unlock);
}

RemoteAddr LinearClient::slot_addr(uint32_t node, uint64_t slot) const {
  return RemoteAddr{node, kHeaderBytes + slot * slot_bytes_};
}

Task<ShardHeader> LinearClient::read_header(uint32_t node) {
  ShardHeader h{};
  co_await engine_.read(RemoteAddr{node, 0}, &h, sizeof h);
  if (h.magic != kLinearMagic) throw FabricError("node " + std::to_string(node) + " holds no linear table shard");
  if (h.slot_bytes != slot_bytes_ || h.home_slots != cfg_.home_slots || h.key_bytes != cfg_.key_bytes ||
      h.value_bytes != cfg_.value_bytes || h.format != static_cast<uint32_t>(cfg_.format))
    throw InvalidArgument("shard " + std::to_string(node) + " was built with a different configuration");
  co_return h;
}

Task<bool> LinearClient::read_stable(uint32_t node, uint64_t slot, std::byte* dst) {
  const InlineLayout l(cfg_);
  RetryDeadline deadline(probe_.retry_budget);
  do {
    co_await engine_.read(slot_addr(node, slot), dst, slot_bytes_);
    const uint64_t ctrl = load64(dst);
    if (ctrl & kDel) co_return false;
    if (!(ctrl & kLock) && inline_consistent(cfg_, l, dst)) co_return true;
  } while (!deadline.expired());
  throw RetryBudgetExceeded("slot " + std::to_string(slot) + " on node " + std::to_string(node) + " stayed locked or inconsistent for " +
                            std::to_string(deadline.attempts()) + " reads, longer than the retry budget (a writer died mid-update?)");
}

// Scans slots [j, n) of a lookup window `data` for `key` and stops at the first answer: kHit at
// slot j (the set word, or an unlocked inline record of the key whose check word matches), kUnstable
// at slot j (its ctrl names the key's bits but it is locked or fails its check: re-read it),
// kMiss (an empty slot ends the probe, seed 000 §4.3) or kMore (no answer: read the next window).
enum class LinearClient::Probe : uint8_t { kHit, kUnstable, kMiss, kMore };
LinearClient::Probe LinearClient::scan(uint64_t key, const LinearPlacement& p, const std::byte* data, uint64_t n,
                                       uint64_t& j) const {
  const bool set = cfg_.format == SlotFormat::kSet;
  const InlineLayout l(cfg_);
  for (; j < n; ++j) {
    const std::byte* sl = data + j * slot_bytes_;
    const uint64_t w = load64(sl);
    if (w == 0) return Probe::kMiss;
    if (set) {
      if (w == (kOcc | key)) return Probe::kHit;
      continue;
    }
    if ((w & kDel) || static_cast<uint32_t>(w) != p.kbits) continue;
    if ((w & kLock) || !inline_consistent(cfg_, l, sl)) return Probe::kUnstable;
    if (cfg_.key_bytes == 8 && load64(sl + l.key_off) != key) continue;
    return Probe::kHit;
  }
  return Probe::kMore;
}

// Slots a lookup READ at `slot` fetches: the read size, never past the last tail slot.
uint64_t LinearClient::window(uint32_t node, uint64_t slot) const {
  return std::min<uint64_t>(read_slots(node, slot), cfg_.total_slots() - slot);
}

uint32_t LinearClient::read_slots(uint32_t node, uint64_t slot) const {
  return probe_.read_sizer ? std::max<uint32_t>(1, probe_.read_sizer->size_at(node, slot)) : probe_.read_size;
}

// Reports the clusters a scan has seen to a read sizer that tracks them. A scan knows the slots
// from `run_start` (its home slot, or the slot after the last empty one it saw) are occupied up
// to the next empty slot, across reads; each such run is reported when its empty slot is seen.
// The run that starts at the home slot may begin earlier than the scan can see: it is reported
// from the home slot, which is all a later read starting inside it needs. Tombstones count as
// occupied: probes run through them.
void LinearClient::observe_clusters(uint32_t node, uint64_t start, const std::byte* slots, uint64_t n,
                                    uint64_t& run_start) const {
  if (!probe_.read_sizer || !probe_.read_sizer->wants_clusters()) return;
  for (uint64_t j = 0; j < n; ++j) {
    if (load64(slots + j * slot_bytes_) != 0) continue;
    const uint64_t empty = start + j;
    if (empty > run_start) probe_.read_sizer->observe(node, run_start, empty - run_start);
    run_start = empty + 1;
  }
}

Task<OpResult> LinearClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  validate_key(key);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  if (cfg_.heap()) {
    co_await heap_scan(key, p, true, {}, values_out, r);
    r.status = r.matches ? Status::kFound : Status::kNotFound;
    co_return r;
  }
  const uint64_t total = cfg_.total_slots();
  const InlineLayout l(cfg_);
  const bool set = cfg_.format == SlotFormat::kSet;
  std::vector<std::byte> buf;
  std::vector<std::byte> one(slot_bytes_);
  uint64_t run_start = p.home;
  for (uint64_t s = p.home; s < total;) {
    const uint64_t n = window(p.node, s);
    buf.resize(n * slot_bytes_);
    co_await engine_.read(slot_addr(p.node, s), buf.data(), static_cast<uint32_t>(n * slot_bytes_));
    ++r.chunks;
    observe_clusters(p.node, s, buf.data(), n, run_start);
    for (uint64_t j = 0; j < n; ++j) {
      const std::byte* sl = buf.data() + j * slot_bytes_;
      uint64_t w = load64(sl);
      if (w == 0) {  // the first empty slot ends the scan (seed 000 §4.3)
        r.status = r.matches ? Status::kFound : Status::kNotFound;
        co_return r;
      }
      if (set) {
        r.matches += w == (kOcc | key);
        continue;
      }
      if ((w & kDel) || static_cast<uint32_t>(w) != p.kbits) continue;
      if ((w & kLock) || !inline_consistent(cfg_, l, sl)) {
        if (!co_await read_stable(p.node, s + j, one.data())) continue;
        sl = one.data();
      }
      if (cfg_.key_bytes == 8 && load64(sl + l.key_off) != key) continue;
      ++r.matches;
      if (values_out) values_out->insert(values_out->end(), sl + l.val_off, sl + l.val_off + cfg_.value_bytes);
    }
    s += n;
  }
  r.status = r.matches ? Status::kFound : Status::kNotFound;
  co_return r;
}

// --- cluster hints ----------------------------------------------------------------------------

ClusterReadSizer::ClusterReadSizer(uint32_t default_size, size_t capacity,
                                   std::function<uint32_t(uint64_t, uint64_t)> size_with_cluster, uint32_t max_size)
    : default_size_(std::max<uint32_t>(1, default_size)),
      capacity_(capacity),
      size_with_cluster_(std::move(size_with_cluster)),
      max_size_(max_size) {}

void ClusterReadSizer::observe(uint32_t node, uint64_t start, uint64_t length) {
  // A run shorter than the default read cannot save a round trip (a read of R* slots covers it),
  // so it is not worth the bookkeeping on every lookup of a lightly skewed table.
  if (capacity_ == 0 || length < default_size_) return;
  // Not among the largest: nothing to do (the common case once the tracker is full).
  if (clusters_.size() >= capacity_ && length <= by_length_.begin()->first) return;
  auto containing = clusters_.upper_bound({node, start});
  if (containing != clusters_.begin()) {
    auto prev = std::prev(containing);
    if (prev->first.first == node && prev->first.second <= start &&
        prev->first.second + prev->second >= start + length)
      return;  // a part of a cluster already known (a lookup that started inside it)
  }
  // Drop what this observation supersedes: tracked clusters overlapping it (the table only grows,
  // so an overlapping older cluster is a stale piece of this one).
  auto it = clusters_.lower_bound({node, start});
  if (it != clusters_.begin()) {
    auto prev = std::prev(it);
    if (prev->first.first == node && prev->first.second + prev->second > start) it = prev;
  }
  while (it != clusters_.end() && it->first.first == node && it->first.second < start + length) {
    if (it->first.second == start && it->second == length) return;  // already known
    auto range = by_length_.equal_range(it->second);
    for (auto b = range.first; b != range.second; ++b)
      if (b->second == it->first) { by_length_.erase(b); break; }
    it = clusters_.erase(it);
  }
  if (clusters_.size() >= capacity_) {
    auto smallest = by_length_.begin();
    if (smallest->first >= length) return;  // not among the largest
    clusters_.erase(smallest->second);
    by_length_.erase(smallest);
  }
  clusters_.emplace(Key{node, start}, length);
  by_length_.emplace(length, Key{node, start});
}

uint32_t ClusterReadSizer::size_at(uint32_t node, uint64_t slot) {
  auto it = clusters_.upper_bound({node, slot});
  if (it != clusters_.begin()) {
    auto prev = std::prev(it);
    if (prev->first.first == node && slot < prev->first.second + prev->second)  // inside: read to its end
      return static_cast<uint32_t>(std::min<uint64_t>(max_size_, prev->first.second + prev->second - slot + 1));
  }
  if (it == clusters_.end() || it->first.first != node) return default_size_;
  const uint64_t offset = it->first.second - slot;
  if (offset > 2ULL * default_size_) return default_size_;  // too far ahead to change the choice
  const uint64_t length = it->second;
  const uint64_t key = (offset << 32) | std::min<uint64_t>(length, 0xffffffffULL);
  if (auto c = cache_.find(key); c != cache_.end()) return c->second;
  if (cache_.size() > (1u << 16)) cache_.clear();
  const uint32_t r = std::clamp<uint32_t>(size_with_cluster_(offset, length), 1, max_size_);
  cache_.emplace(key, r);
  return r;
}

// Where a lookup's answer goes. `check` vets the sink against the table's value size; `buffer` is
// where a value is copied when it does not come from a window in the frame (a heap record); `hit`
// hands over an inline hit in place (its value, and `at`: its slot and the ctrl word read), `copied`
// a value already in `buffer` (or none: not found).
struct LinearClient::CopySink {  // get(): the value copied to value_out, the OpResult returned
  using Ret = OpResult;
  std::span<std::byte> out;
  void check(uint32_t) const {}  // any value_out: the value is copied, cut or zero-padded by the caller
  std::span<std::byte> buffer(Scratch&, std::vector<std::byte>&, uint32_t) const { return out; }
  OpResult hit(uint64_t, const OpResult& r, std::span<const std::byte> value, const Located&) const {
    if (!out.empty() && !value.empty()) std::memcpy(out.data(), value.data(), std::min(out.size(), value.size()));
    return r;
  }
  OpResult copied(uint64_t, const OpResult& r, std::span<std::byte>) const { return r; }
};
struct LinearClient::VisitSink {  // get_visit(): the visitor sees the value where it lies
  using Ret = void;
  GetVisitor* v;
  uint32_t value_bytes;  // the caller's: must be the table's (the value is handed over where it lies)
  void check(uint32_t table_value_bytes) const {
    if (value_bytes != table_value_bytes)
      throw InvalidArgument("linear get_visit: value_bytes " + std::to_string(value_bytes) +
                            " is not the table's value size " + std::to_string(table_value_bytes));
  }
  std::span<std::byte> buffer(Scratch& frame, std::vector<std::byte>& big, uint32_t value_bytes) const {
    if (value_bytes > frame.size()) {
      big.assign(value_bytes, std::byte{0});
      return big;
    }
    std::fill_n(frame.data(), value_bytes, std::byte{0});
    return {frame.data(), value_bytes};
  }
  void hit(uint64_t key, const OpResult& r, std::span<const std::byte> value, const Located&) const {
    v->on_get(key, r, value);
  }
  void copied(uint64_t key, const OpResult& r, std::span<std::byte> buf) const {
    v->on_get(key, r, r.status == Status::kFound ? std::span<const std::byte>(buf) : std::span<const std::byte>());
  }
};

struct LinearClient::LocateSink {  // locate(): the key's slot and ctrl word; the READs added to `reads`
  using Ret = Located;
  uint32_t* reads;
  void check(uint32_t) const {}
  std::span<std::byte> buffer(Scratch&, std::vector<std::byte>&, uint32_t) const {  // heap tables: heap_scan
    throw std::logic_error("linear: locate on a heap table");
  }
  Located hit(uint64_t, const OpResult& r, std::span<const std::byte>, const Located& at) const {
    *reads += r.chunks;
    return at;
  }
  Located copied(uint64_t, const OpResult& r, std::span<std::byte>) const {  // inline: a miss
    *reads += r.chunks;
    return Located{};
  }
};

Task<LinearClient::Located> LinearClient::locate(uint64_t key, uint32_t& reads) {
  return lookup(key, LocateSink{&reads});  // not a coroutine itself: the lookup's frame is the only one
}

Task<OpResult> LinearClient::get(uint64_t key, std::span<std::byte> value_out) {
  return lookup(key, CopySink{value_out});  // not a coroutine itself: get's frame is lookup's
}

Task<void> LinearClient::get_visit(uint64_t key, uint32_t value_bytes, GetVisitor& v) {
  return lookup(key, VisitSink{&v, value_bytes});
}

// The lookup (seed 000 §4.3) of get, get_visit and locate: READ a window of R slots from the home
// slot, scan it, read the next window while no slot answers (one READ per window, a re-read of a
// locked or torn slot of the key), all in this one frame; a hit is handed to the sink from the
// window.
template <class Sink>
Task<typename Sink::Ret> LinearClient::lookup(uint64_t key, Sink sink) {
  validate_key(key);
  sink.check(cfg_.value_bytes);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  // The window buffer (inline), or get_visit's value buffer when a heap record is copied out: in
  // the frame unless larger than its inline bytes (no malloc per get).
  Scratch buf(0);
  std::vector<std::byte> big, one;
  if (cfg_.heap()) {
    const std::span<std::byte> out = sink.buffer(buf, big, cfg_.value_bytes);
    const Located loc = co_await heap_scan(key, p, false, out, nullptr, r);
    r.status = loc.found ? Status::kFound : Status::kNotFound;
    r.matches = loc.found ? 1 : 0;
    co_return sink.copied(key, r, out);
  }
  const InlineLayout l(cfg_);
  const uint64_t total = cfg_.total_slots();
  uint64_t run_start = p.home;
  for (uint64_t s = p.home; s < total;) {
    const uint64_t n = window(p.node, s);
    std::byte* data = buf.data();
    if (n * slot_bytes_ > buf.size()) {
      big.resize(n * slot_bytes_);
      data = big.data();
    }
    co_await engine_.read(slot_addr(p.node, s), data, static_cast<uint32_t>(n * slot_bytes_));
    ++r.chunks;
    observe_clusters(p.node, s, data, n, run_start);
    for (uint64_t j = 0;; ++j) {
      const Probe found = scan(key, p, data, n, j);
      if (found == Probe::kMore) break;
      if (found == Probe::kMiss) co_return sink.copied(key, r, {});
      const std::byte* sl = data + j * slot_bytes_;
      if (found == Probe::kUnstable) {  // locked or torn: re-read it until stable (or erased)
        one.resize(slot_bytes_);
        if (!co_await read_stable(p.node, s + j, one.data())) continue;
        sl = one.data();
        if (cfg_.key_bytes == 8 && load64(sl + l.key_off) != key) continue;
      }
      r.status = Status::kFound;
      r.matches = 1;
      co_return sink.hit(key, r,
                         cfg_.value_bytes ? std::span<const std::byte>(sl + l.val_off, cfg_.value_bytes)
                                          : std::span<const std::byte>(),
                         Located{true, s + j, load64(sl)});
    }
    s += n;
  }
  co_return sink.copied(key, r, {});
}

bool LinearClient::speculating() const {
  switch (probe_.speculative_claim) {
    case SpeculativeClaim::kOff: return false;
    case SpeculativeClaim::kOn: return true;
    case SpeculativeClaim::kAuto: break;
  }
  // A won speculation saves a round trip; an insert whose chunk 0 is full pays one more with it
  // (chunk 1 is no longer overlapped). Ties, and a client with no evidence yet, speculate.
  return claims_home_ >= claims_past_chunk0_;
}

void LinearClient::note_claim(uint64_t distance) {
  constexpr uint32_t kClaimWindow = 256;  // recent inserts weigh most: the load factor moves
  if (++claims_ > kClaimWindow) {
    claims_ /= 2;
    claims_home_ /= 2;
    claims_past_chunk0_ /= 2;
  }
  claims_home_ += distance == 0;
  claims_past_chunk0_ += distance >= probe_.chunk;
}

Task<OpResult> LinearClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, false);
  check_writable();
  if (cfg_.format == SlotFormat::kHeap) co_return co_await heap_insert(key, value);
  co_return co_await insert(key, value);
}

// Seed 001 find-or-put: chunks of C slots, at most M chunks; chunk i+1 is posted before chunk i is
// scanned, so its round trip overlaps the scan (and usually shares a batch with chunk i).
Task<OpResult> LinearClient::insert(uint64_t key, std::span<const std::byte> value) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  const uint64_t total = cfg_.total_slots();
  const uint32_t C = probe_.chunk;
  const uint32_t M = probe_.max_chunks;
  const bool set = cfg_.format == SlotFormat::kSet;
  const InlineLayout l(cfg_);
  const size_t chunk_bytes = static_cast<size_t>(C) * slot_bytes_;
  Scratch bufs(2 * chunk_bytes);
  Scratch one(slot_bytes_);

  auto chunk_len = [&](uint32_t i) -> uint64_t {
    const uint64_t start = p.home + static_cast<uint64_t>(i) * C;
    return start >= total ? 0 : std::min<uint64_t>(C, total - start);
  };
  auto post = [&](uint32_t i) {
    return engine_.read(slot_addr(p.node, p.home + static_cast<uint64_t>(i) * C), bufs.data() + (i % 2) * chunk_bytes,
                        static_cast<uint32_t>(chunk_len(i) * slot_bytes_));
  };
  // Key-match check for an occupied slot word/ctrl `w` at `slot`; may re-read the slot.
  // Returns 1 = my key (found), 0 = another key or a tombstone.
  auto is_mine = [&](uint64_t w, uint64_t slot, const std::byte* bytes) -> Task<bool> {
    if (set) co_return w == (kOcc | key);
    if ((w & kDel) || static_cast<uint32_t>(w) != p.kbits) co_return false;
    if (cfg_.key_bytes == 4) {
      // The ctrl word holds the whole key. But a locked version-0 ctrl is a claim whose insert is
      // not published yet, and a sweeper rolls it back if its holder died: wait for it.
      if (!(w & kLock) || version_of(w) != 0) co_return true;
      co_return co_await read_stable(p.node, slot, one.data());
    }
    if (!bytes || (w & kLock) || !inline_consistent(cfg_, l, bytes)) {
      if (!co_await read_stable(p.node, slot, one.data())) co_return false;
      bytes = one.data();
    }
    co_return load64(bytes + l.key_off) == key;
  };

  if (chunk_len(0) == 0) { r.status = Status::kFull; co_return r; }
  // A slot that is one word (sets; 4-byte keys without a value) is published by the CAS itself; a
  // larger record is claimed locked and published after its payload.
  const bool one_word = slot_bytes_ == 8;
  const uint64_t claim = set ? (kOcc | key) : one_word ? make_ctrl(1, p.kbits) : (kOcc | kLock | p.kbits);
  // `slot` is claimed: publish the payload, then the unlocking ctrl fenced after it, in one round
  // trip (see the protocol in linear.h).
  auto publish_claim = [&](uint64_t slot) -> Task<void> {
    if (one_word) co_return;
    const uint64_t lock = lock_taken();
    maybe_die_holding_lock(lock, false);
    std::memset(one.data(), 0, one.size());
    build_payload(cfg_, l, key, 1, value, one.data());
    store64(one.data(), make_ctrl(1, p.kbits));
    co_await publish(slot_addr(p.node, slot), one.data(), lock);
  };

  std::optional<Pending> cur(post(0));
  // Speculative claim (linear.h): the home slot's claim CAS goes in chunk 0's batch. Won, the key
  // is absent and the READ is not needed; lost, chunk 0 is scanned as usual, home included.
  const bool speculate = speculating();
  if (speculate && co_await engine_.cas(slot_addr(p.node, p.home), 0, claim) == 0) {
    ++r.chunks;
    note_claim(0);
    co_await publish_claim(p.home);
    r.status = Status::kInserted;
    co_return r;
  }
  for (uint32_t i = 0; i < M; ++i) {
    const uint64_t n = chunk_len(i);
    const bool more = i + 1 < M && chunk_len(i + 1) > 0;
    // Seed 001 posts chunk i+1 before it scans chunk i; after a lost speculative claim chunk 1 is
    // posted only if chunk 0 turns out full (the READ it saves pays for the failed CAS).
    const bool overlap = !(speculate && i == 0);
    std::optional<Pending> next;
    if (overlap && more) next.emplace(post(i + 1));
    co_await std::move(*cur);
    cur.reset();
    ++r.chunks;
    const std::byte* chunk = bufs.data() + (i % 2) * chunk_bytes;
    const uint64_t start = p.home + static_cast<uint64_t>(i) * C;
    for (uint64_t j = 0; j < n; ++j) {
      const std::byte* sl = chunk + j * slot_bytes_;
      const uint64_t slot = start + j;
      uint64_t w = load64(sl);
      if (w == 0) {
        const uint64_t old = co_await engine_.cas(slot_addr(p.node, slot), 0, claim);
        if (old == 0) {
          note_claim(slot - p.home);
          co_await publish_claim(slot);
          r.status = Status::kInserted;
          co_return r;
        }
        w = old;  // someone else claimed it first: re-check the winner (seed 001, line 15)
        if (co_await is_mine(w, slot, nullptr)) { r.status = Status::kFound; r.matches = 1; co_return r; }
        continue;
      }
      // Only a slot whose word names the key (set word, or ctrl's key bits) costs the is_mine
      // coroutine; is_mine itself repeats these tests.
      const bool may_be_mine = set ? w == (kOcc | key) : !(w & kDel) && static_cast<uint32_t>(w) == p.kbits;
      if (may_be_mine && co_await is_mine(w, slot, sl)) { r.status = Status::kFound; r.matches = 1; co_return r; }
    }
    if (!overlap && more) next.emplace(post(i + 1));
    if (!next) break;
    cur.emplace(std::move(*next));
  }
  // M chunks held neither the key nor an empty slot. Lookups scan on to the first empty slot, so
  // a key past M chunks (inserted by a client with a larger M) is present: answer as get would,
  // never kFull for a present key.
  if ((co_await locate(key, r.chunks)).found) {
    r.status = Status::kFound;
    r.matches = 1;
    co_return r;
  }
  r.status = Status::kFull;
  co_return r;
}

Task<OpResult> LinearClient::update(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, true);
  check_writable();
  if (cfg_.format == SlotFormat::kHeap) co_return co_await heap_update(key, value);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  const InlineLayout l(cfg_);
  std::vector<std::byte> payload(slot_bytes_);
  for (;;) {
    const Located loc = co_await locate(key, r.chunks);
    if (!loc.found) { r.status = Status::kNotFound; co_return r; }
    const RemoteAddr a = slot_addr(p.node, loc.slot);
    const uint64_t locked = loc.ctrl | kLock;
    if (co_await engine_.cas(a, loc.ctrl, locked) != loc.ctrl) continue;  // raced: look again
    uint64_t unlocked = 0;
    const uint64_t v = (version_of(loc.ctrl) + 1) & kVersionMask;
    const uint64_t lock = lock_taken();
    maybe_die_holding_lock(lock, false);
    if (slot_bytes_ > 8) {
      build_payload(cfg_, l, key, v, value, payload.data());
      store64(payload.data(), make_ctrl(v, p.kbits));
      co_await publish(a, payload.data(), lock);
    } else {
      maybe_die_holding_lock(lock, true);
      co_await engine_.write(a, &(unlocked = make_ctrl(v, p.kbits)), 8);
    }
    r.status = Status::kUpdated;
    r.matches = 1;
    co_return r;
  }
}

Task<OpResult> LinearClient::put(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, cfg_.format != SlotFormat::kSet);
  check_writable();
  if (cfg_.format == SlotFormat::kSet) {
    OpResult r = co_await insert(key, value);
    if (r.status == Status::kFound) r.status = Status::kUpdated;  // nothing to replace in a set
    co_return r;
  }
  uint32_t chunks = 0;
  for (;;) {
    OpResult r = co_await update(key, value);
    chunks += r.chunks;
    if (r.status == Status::kUpdated || r.status == Status::kFull) { r.chunks = chunks; co_return r; }
    // (if/else, not ?: — GCC mishandles co_await inside a conditional expression)
    if (cfg_.format == SlotFormat::kHeap) {
      r = co_await heap_insert(key, value);
    } else {
      r = co_await insert(key, value);
    }
    chunks += r.chunks;
    if (r.status != Status::kFound) { r.chunks = chunks; co_return r; }
    // Inserted concurrently by someone else after our update missed: update it now.
  }
}

Task<OpResult> LinearClient::erase(uint64_t key) {
  validate_key(key);
  check_writable();
  if (cfg_.format == SlotFormat::kHeap) co_return co_await heap_erase(key);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  for (;;) {
    const Located loc = co_await locate(key, r.chunks);
    if (!loc.found) { r.status = Status::kNotFound; co_return r; }
    const uint64_t dead = cfg_.format == SlotFormat::kSet
                              ? kSetTombstone
                              : (kOcc | kDel | (((version_of(loc.ctrl) + 1) & kVersionMask) << 32) | p.kbits);
    if (co_await engine_.cas(slot_addr(p.node, loc.slot), loc.ctrl, dead) == loc.ctrl) {
      r.status = Status::kErased;
      r.matches = 1;
      co_return r;
    }
  }
}

// --- out-of-band records (kHeap, kHeap4); the protocol is documented in linear.h ---------------

void LinearClient::check_writable() const {
  if (cfg_.format == SlotFormat::kHeap4)
    throw InvalidArgument("heap4 tables are bulk-loaded: find_or_put, put, update and erase are not supported");
}

RemoteAddr LinearClient::record_addr(uint32_t node, uint64_t index) const {
  return RemoteAddr{node, cfg_.heap_offset() + kHeapHeaderBytes + index * record_bytes_};
}

bool LinearClient::record_matches(const std::byte* rec, uint64_t key, const LinearPlacement& p) const {
  const uint64_t ctrl = load64(rec);
  if (!(ctrl & kOcc) || (ctrl & (kLock | kDel)) || static_cast<uint32_t>(ctrl) != p.kbits) return false;
  const InlineLayout l(cfg_);
  if (cfg_.key_bytes == 8 && load64(rec + l.key_off) != key) return false;
  return inline_consistent(cfg_, l, rec);
}

void LinearClient::build_record(uint64_t key, std::span<const std::byte> value, std::byte* rec) const {
  const InlineLayout l(cfg_);
  build_payload(cfg_, l, key, 1, value, rec);
  store64(rec, make_ctrl(1, linear_place(cfg_, key).kbits));
}

// Algorithm 2 (PROCESS_OUT_OF_BAND): the record READs of window i share a batch with the READ of
// window i+1; a get returns at the first verified match, otherwise the scan ends once an empty slot
// (kHeap4: a bucket with a free way) was seen AND the records it asked for have been checked.
Task<LinearClient::Located> LinearClient::heap_scan(uint64_t key, const LinearPlacement& p, bool all,
                                                    std::span<std::byte> value_out,
                                                    std::vector<std::byte>* values_out, OpResult& r) {
  const uint64_t total = cfg_.total_slots();
  const bool four = cfg_.format == SlotFormat::kHeap4;
  const InlineLayout l(cfg_);
  struct Want {
    uint64_t slot, word, index;
  };
  Scratch slot_buf(0);
  std::vector<std::byte> big, recs;
  std::vector<Want> wants;
  std::vector<Pending> rec_reads;
  std::optional<Pending> slot_read;
  uint64_t s = p.home, n = 0, run_start = p.home;
  std::byte* data = nullptr;
  auto post_window = [&]() {
    n = std::min<uint64_t>(read_slots(p.node, s), total - s);
    data = slot_buf.data();
    if (n * 8 > slot_buf.size()) {
      big.resize(n * 8);
      data = big.data();
    }
    return engine_.read(slot_addr(p.node, s), data, static_cast<uint32_t>(n * 8));
  };
  bool ended = s >= total;
  bool window_posted = !ended;  // the READ of the window at `s` is posted (and unscanned)
  if (!ended) slot_read.emplace(post_window());
  for (;;) {
    if (slot_read) {
      co_await std::move(*slot_read);
      slot_read.reset();
      ++r.chunks;
    }
    // The previous window's records (posted in the batch that just completed).
    for (size_t i = 0; i < rec_reads.size(); ++i) {
      co_await std::move(rec_reads[i]);
      const std::byte* rec = recs.data() + i * record_bytes_;
      if (!record_matches(rec, key, p)) continue;  // fingerprint collision
      ++r.matches;
      if (values_out) values_out->insert(values_out->end(), rec + l.val_off, rec + l.val_off + cfg_.value_bytes);
      if (!all) {
        if (!value_out.empty())
          std::memcpy(value_out.data(), rec + l.val_off, std::min<size_t>(value_out.size(), cfg_.value_bytes));
        co_return Located{true, wants[i].slot, wants[i].word};
      }
    }
    rec_reads.clear();
    wants.clear();
    if (ended) break;
    if (!window_posted) {  // a get's candidate records all failed verification: read on
      slot_read.emplace(post_window());
      window_posted = true;
      continue;
    }
    if (!four) observe_clusters(p.node, s, data, n, run_start);
    for (uint64_t j = 0; j < n && !ended; ++j) {
      const uint64_t w = load64(data + j * 8);
      if (w == 0) {
        ended = true;
      } else if (!four) {
        if (heap_live(w) && heap_fp(w) == p.fp16) wants.push_back(Want{s + j, w, heap_index(w)});
      } else {
        for (uint32_t way = 0; way < 4; ++way)
          if (way_fp(w, way) == p.fp8) wants.push_back(Want{s + j, w, bucket_group(w) * 4 + way});
        ended = bucket_has_free_way(w);
      }
    }
    s += n;
    if (s >= total) ended = true;  // ran off the tail: nothing further can hold the key
    recs.resize(wants.size() * record_bytes_);
    for (size_t i = 0; i < wants.size(); ++i)
      rec_reads.push_back(engine_.read(record_addr(p.node, wants[i].index), recs.data() + i * record_bytes_,
                                       record_bytes_));
    // Overlap (Algorithm 2): the next window shares the batch of these record READs — for a get
    // only if no fingerprint matched (a match almost always ends a get: prefetching would waste a
    // READ per such get, while a failed match costs one extra round trip, rarely).
    window_posted = !ended && (all || wants.empty());
    if (window_posted) slot_read.emplace(post_window());
    if (ended && rec_reads.empty()) break;
  }
  co_return Located{};
}

std::optional<uint64_t> LinearClient::pop_spare(uint32_t node) {
  auto& v = spare_[node];
  if (v.empty()) return std::nullopt;
  const uint64_t i = v.back();
  v.pop_back();
  return i;
}

Task<std::optional<uint64_t>> LinearClient::take_record(uint32_t node) {
  if (auto i = pop_spare(node)) co_return i;
  const uint64_t first =
      co_await engine_.faa(RemoteAddr{node, cfg_.heap_offset() + offsetof(HeapHeader, next)}, kHeapBlock);
  const uint64_t cap = cfg_.heap_capacity();
  if (first >= cap) co_return std::nullopt;  // exhausted (the counter may overshoot; harmless)
  const uint64_t last = std::min<uint64_t>(first + kHeapBlock, cap);
  for (uint64_t i = last; i-- > first + 1;) spare_[node].push_back(i);
  co_return first;
}

Task<bool> LinearClient::heap_is_mine(uint64_t w, uint64_t key, const LinearPlacement& p) {
  if (!heap_live(w) || heap_fp(w) != p.fp16) co_return false;
  std::vector<std::byte> rec(record_bytes_);
  co_await engine_.read(record_addr(p.node, heap_index(w)), rec.data(), record_bytes_);
  co_return record_matches(rec.data(), key, p);
}

Task<OpResult> LinearClient::heap_insert(uint64_t key, std::span<const std::byte> value) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  const uint64_t total = cfg_.total_slots();
  const uint32_t C = probe_.chunk;
  const uint32_t M = probe_.max_chunks;
  const size_t chunk_bytes = static_cast<size_t>(C) * 8;
  Scratch bufs(2 * chunk_bytes);
  std::vector<std::byte> rec(record_bytes_);
  build_record(key, value, rec.data());
  auto chunk_len = [&](uint32_t i) -> uint64_t {
    const uint64_t start = p.home + static_cast<uint64_t>(i) * C;
    return start >= total ? 0 : std::min<uint64_t>(C, total - start);
  };
  auto post = [&](uint32_t i) {
    return engine_.read(slot_addr(p.node, p.home + static_cast<uint64_t>(i) * C), bufs.data() + (i % 2) * chunk_bytes,
                        static_cast<uint32_t>(chunk_len(i) * 8));
  };
  // A speculative claim publishes the record with its CAS, so it needs a record now: take one up
  // front if none is spare (an FAA once per kHeapBlock inserts; none left: insert as seed 001).
  bool speculate = speculating();
  std::optional<uint64_t> index = pop_spare(p.node);
  bool exhausted = false;  // this operation's FAA found the heap full: no second one at the free slot
  if (speculate && !index && chunk_len(0) > 0) {
    index = co_await take_record(p.node);
    speculate = index.has_value();
    exhausted = !speculate;
  }
  auto finish = [&](Status st) {  // the record was not published: keep it private for later
    if (index) give_back(p.node, *index);
    r.status = st;
    r.matches = st == Status::kFound ? 1 : 0;
    return r;
  };
  // The private record, written speculatively in the first batch (harmless: no slot points to it).
  std::optional<Pending> write;
  auto post_write = [&] { write.emplace(engine_.write(record_addr(p.node, *index), rec.data(), record_bytes_)); };
  if (index) post_write();
  // The CAS that makes `slot` point to the record is fenced after the record's WRITE (linear.h,
  // "publication order"), so the two may share a batch.
  auto publish_cas = [&](uint64_t slot) { return engine_.cas_fenced(slot_addr(p.node, slot), 0, heap_word(p.fp16, *index)); };
  if (chunk_len(0) == 0) co_return finish(Status::kFull);

  std::optional<Pending> cur;
  if (speculate) {
    // Speculative claim (linear.h): WRITE, home CAS (fenced after it), chunk 0's READ, one batch.
    Pending claim = publish_cas(p.home);
    cur.emplace(post(0));
    const uint64_t old = co_await std::move(claim);
    co_await std::move(*write);
    write.reset();
    if (old == 0) {
      ++r.chunks;
      note_claim(0);
      r.status = Status::kInserted;
      co_return r;
    }
  } else {
    cur.emplace(post(0));
  }
  for (uint32_t i = 0; i < M; ++i) {
    const uint64_t n = chunk_len(i);
    const bool more = i + 1 < M && chunk_len(i + 1) > 0;
    // As in insert(): after a lost speculative claim chunk 1 is READ only if chunk 0 is full.
    const bool overlap = !(speculate && i == 0);
    std::optional<Pending> next;
    if (overlap && more) next.emplace(post(i + 1));
    co_await std::move(*cur);
    cur.reset();
    ++r.chunks;
    const std::byte* chunk = bufs.data() + (i % 2) * chunk_bytes;
    const uint64_t start = p.home + static_cast<uint64_t>(i) * C;
    for (uint64_t j = 0; j < n; ++j) {
      const uint64_t slot = start + j;
      const uint64_t w = load64(chunk + j * 8);
      if (w != 0) {
        if (co_await heap_is_mine(w, key, p)) co_return finish(Status::kFound);
        continue;
      }
      if (!index) {
        if (!exhausted) index = co_await take_record(p.node);
        if (!index) co_return finish(Status::kFull);
        post_write();  // shares the CAS's batch
      } else if (write) {
        // Posted in an earlier batch, so complete: awaiting costs no round trip, and a failed
        // WRITE stops here, before any slot can point to its record.
        co_await std::move(*write);
        write.reset();
      }
      Pending claim = publish_cas(slot);
      const uint64_t old = co_await std::move(claim);
      if (write) {
        co_await std::move(*write);
        write.reset();
      }
      if (old == 0) {
        note_claim(slot - p.home);
        r.status = Status::kInserted;  // the record is published: no longer ours to reuse
        co_return r;
      }
      // Someone else claimed the slot first: re-check the winner (seed 001, line 15).
      if (co_await heap_is_mine(old, key, p)) co_return finish(Status::kFound);
    }
    if (!overlap && more) next.emplace(post(i + 1));
    if (!next) break;
    cur.emplace(std::move(*next));
  }
  // As in insert(): a key past M chunks is present, not "full".
  OpResult scan;
  const bool present = (co_await heap_scan(key, p, false, {}, nullptr, scan)).found;
  r.chunks += scan.chunks;
  co_return finish(present ? Status::kFound : Status::kFull);
}

Task<OpResult> LinearClient::heap_update(uint64_t key, std::span<const std::byte> value) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  std::vector<std::byte> rec(record_bytes_);
  build_record(key, value, rec.data());
  std::optional<uint64_t> index = pop_spare(p.node);
  std::optional<Pending> write;  // shares a batch with the scan's first READ
  if (index) write.emplace(engine_.write(record_addr(p.node, *index), rec.data(), record_bytes_));
  for (;;) {
    const Located loc = co_await heap_scan(key, p, false, {}, nullptr, r);
    r.matches = 0;
    if (!loc.found) {
      if (index) give_back(p.node, *index);
      r.status = Status::kNotFound;
      co_return r;
    }
    if (!index) {
      index = co_await take_record(p.node);
      if (!index) { r.status = Status::kFull; co_return r; }
      write.emplace(engine_.write(record_addr(p.node, *index), rec.data(), record_bytes_));  // the CAS's batch
    } else if (write) {
      co_await std::move(*write);  // an earlier batch's: complete; a failed WRITE stops here
      write.reset();
    }
    Pending swap = engine_.cas_fenced(slot_addr(p.node, loc.slot), loc.ctrl, heap_word(p.fp16, *index));
    const uint64_t old = co_await std::move(swap);
    if (write) {
      co_await std::move(*write);
      write.reset();
    }
    if (old == loc.ctrl) {
      r.status = Status::kUpdated;
      r.matches = 1;
      co_return r;
    }
    // Raced with another update or an erase: the record is still private; look again.
  }
}

Task<OpResult> LinearClient::heap_erase(uint64_t key) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  for (;;) {
    const Located loc = co_await heap_scan(key, p, false, {}, nullptr, r);
    r.matches = 0;
    if (!loc.found) { r.status = Status::kNotFound; co_return r; }
    if (co_await engine_.cas(slot_addr(p.node, loc.slot), loc.ctrl, loc.ctrl | kHDel) == loc.ctrl) {
      r.status = Status::kErased;
      r.matches = 1;
      co_return r;
    }
  }
}

}  // namespace rdmahash
