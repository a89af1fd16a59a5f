// Linear probing's configuration and memory-node side: LinearConfig and ProbeConfig checks,
// placement, the shard loader and key scan, and the lock sweeper that repairs locks of dead
// clients. The layout and the lock-recovery argument are in include/rdmahash/linear.h.
#include "schemes/linear/linear_internal.h"

namespace rdmahash {

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
  if (c.chunk_order != ChunkOrder::kLinear && c.chunk_order != ChunkOrder::kQuadratic)
    return "unknown chunk order " + std::to_string(static_cast<int>(c.chunk_order));
  if (c.quadratic()) {
    if (c.format != SlotFormat::kSet && c.format != SlotFormat::kInline)
      return std::string("quadratic chunks apply to set and inline slots, not ") + to_string(c.format) + " tables";
    if (c.chunk == 0 || c.chunk > 65536) return "the quadratic chunk size must be in [1, 65536], got " + std::to_string(c.chunk);
    if (c.chunk > c.home_slots + c.tail())
      return "the quadratic chunk size " + std::to_string(c.chunk) + " exceeds the shard's " +
             std::to_string(c.home_slots + c.tail()) + " slots";
  }
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

const char* to_string(ChunkOrder o) { return o == ChunkOrder::kQuadratic ? "quadratic" : "linear"; }

std::optional<ChunkOrder> parse_chunk_order(std::string_view name) {
  if (name == "linear") return ChunkOrder::kLinear;
  if (name == "quadratic") return ChunkOrder::kQuadratic;
  return std::nullopt;
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
  if (chunk > kMaxReadSlots || read_size > kMaxReadSlots)
    throw InvalidArgument("chunk and read size must be at most " + std::to_string(kMaxReadSlots) + " slots");
}

LinearPlacement linear_place(const LinearConfig& c, uint64_t key) { return place_key(c, key); }

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
  if (cfg_.quadratic()) {  // the first empty slot in quadratic chunk order (linear.h, ChunkOrder)
    s = total;
    uint64_t start = p.home;
    for (uint64_t i = 0; i < cfg_.quad_chunks() && s == total; start = cfg_.quad_next(start, i), ++i)
      for (uint64_t j = 0; j < cfg_.chunk; ++j)
        if (load64(slots + ((start + j) % total) * sb) == 0) {
          s = (start + j) % total;
          break;
        }
    if (s == total)
      throw InvalidArgument("shard " + std::to_string(node_) + ": the key's " + std::to_string(cfg_.quad_chunks()) +
                            " quadratic chunks are full: use a lower load factor or more tail slots");
  } else {
    s = first_free(p.home);
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
  if (!next_.empty() && !slot_free(s)) next_[s] = static_cast<uint32_t>(s + 1);
  ShardHeader h;
  std::memcpy(&h, region_.data(), sizeof h);
  ++h.records;
  std::memcpy(region_.data(), &h, sizeof h);
  return true;
}

bool LinearShardLoader::slot_free(uint64_t s) const {
  ++slot_checks_;
  const uint64_t w = load64(region_.data() + kHeaderBytes + s * cfg_.slot_bytes());
  return cfg_.format == SlotFormat::kHeap4 ? bucket_has_free_way(w) : w == 0;
}

uint64_t LinearShardLoader::first_free(uint64_t home) {
  const uint64_t total = cfg_.total_slots();
  if (next_.empty()) {
    uint64_t s = home;
    for (uint64_t walked = 0; s < total && !slot_free(s); ++s)
      if (++walked == kLongWalk && total < UINT32_MAX) {
        next_.resize(total + 1);
        for (uint64_t t = 0; t < total; ++t) next_[t] = static_cast<uint32_t>(slot_free(t) ? t : t + 1);
        next_[total] = static_cast<uint32_t>(total);
        return first_free(home);
      }
    return s;
  }
  // A root is free: every slot this shard holds was filled by insert(), which marks it (the
  // loader runs before clients start; see linear.h).
  uint64_t s = home;
  while (s < total && next_[s] != s) {
    ++slot_checks_;
    next_[s] = next_[next_[s]];  // path halving
    s = next_[s];
  }
  return s;
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

}  // namespace rdmahash
