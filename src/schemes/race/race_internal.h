// Declarations private to RACE hashing's source files (race.cpp, race_client.cpp, race_split.cpp):
// the slot, directory-entry and block encodings, the key's placement, and RaceClient::Impl, whose
// read/write path is defined in race_client.cpp and whose splits in race_split.cpp. The design
// essay (layout, protocol, split, safety argument) is in include/rdmahash/race.h. Not installed.
#pragma once

#include "rdmahash/race.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <optional>
#include <cstring>
#include <mutex>
#include <string>

#include "common/hash.h"

namespace rdmahash {
namespace race_internal {

// --- slot, directory entry and header words ----------------------------------------------------
constexpr uint64_t kFrozen = 1ULL << 47;
constexpr uint64_t kCommitted = 1ULL << 46;
// A tentative copy killed by another inserter: its value with bit 63 set (pointer kept, so its
// owner recognises it and clears it; race.h "Helping"). Fingerprints are the 7 bits 56..62.
constexpr uint64_t kKilled = 1ULL << 63;
constexpr uint64_t kOffMask = (1ULL << 40) - 1;
constexpr uint64_t kPtrMask = (1ULL << 46) - 1;  // node + offset: a block's identity
// A slot of a new subtable before the split's copy reached it: FROZEN | COMMITTED with no pointer.
// Only the copy CASes it away (to the entry or to 0), so a late helper's copy never lands twice.
// Freezing never produces this word (a frozen empty slot is kFrozen; a committed slot has a
// pointer), so a helper of an old split whose copy CASes land late — after a child was itself
// frozen for its own split — cannot unfreeze that child's slots or put back erased items there.
constexpr uint64_t kReserved = kFrozen | kCommitted;
// Every bucket header of a retired subtable (split: its keys live in its two children): matches
// no key, so a client whose stale cache names it re-reads the directory (race.h, SRCDD).
constexpr uint64_t kRetiredHeader = ~0ULL;
constexpr uint32_t kRetiredDepth = 0xff;
// The split word (node-0 header): 0, or owner+1 << 48 | the split descriptor block's address.
inline uint64_t split_word(uint32_t owner, RemoteAddr desc) {
  return (uint64_t{owner + 1} << 48) | (uint64_t{desc.node} << 40) | (desc.offset / 64);
}
constexpr uint64_t kDescMagic = 0x5350494C54524143ULL;  // descriptor block, word 0
constexpr uint32_t kMaxUnits = 255;  // block length field, 64-byte units
constexpr uint32_t kBatch = 256;     // requests per batch in split loops

inline uint8_t slot_fp(uint64_t v) { return static_cast<uint8_t>((v >> 56) & 0x7f); }
inline uint32_t slot_units(uint64_t v) { return static_cast<uint32_t>((v >> 48) & 0xff); }
inline RemoteAddr slot_block(uint64_t v) {
  return RemoteAddr{static_cast<uint32_t>((v >> 40) & 0x3f), (v & kOffMask) * 64};
}
inline uint64_t make_slot(uint8_t fp, uint32_t units, RemoteAddr block) {
  return (uint64_t{fp} << 56) | (uint64_t{units} << 48) | (uint64_t{block.node} << 40) | (block.offset / 64);
}
inline RemoteAddr entry_addr(uint64_t e) { return RemoteAddr{static_cast<uint32_t>((e >> 40) & 0x3f), (e & kOffMask) * 64}; }
inline uint32_t entry_depth(uint64_t e) { return static_cast<uint32_t>((e >> 48) & 0x3f); }
inline uint64_t make_entry(RemoteAddr sub, uint32_t depth) {
  return (uint64_t{depth} << 48) | (uint64_t{sub.node} << 40) | (sub.offset / 64);
}
inline bool same_addr(RemoteAddr a, RemoteAddr b) { return a.node == b.node && a.offset == b.offset; }
inline uint64_t make_header(uint32_t depth, uint64_t suffix) { return uint64_t{depth} | (suffix << 8); }
// What a client must share with the server: the memory nodes, groups per subtable and max depth
// place buckets, the board and the pool, the hash seed places keys, and key_bytes is the key space
// (how a uint64 key becomes its bytes). A client that differed in one of them would read and write
// another table's places and corrupt this one silently. Never 0 (a zeroed header matches no config).
inline uint64_t race_config_tag(const RaceConfig& c) {
  uint64_t h = hash::mix64(c.hash_seed ^ kRaceMagic);
  for (uint64_t f : {uint64_t{c.memory_nodes}, uint64_t{c.groups_per_subtable}, uint64_t{c.max_depth}, uint64_t{c.key_bytes}})
    h = hash::mix64(h ^ f);
  return h | 1;
}
inline uint64_t mask(uint32_t bits) { return bits >= 64 ? ~0ULL : (1ULL << bits) - 1; }
inline uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

inline uint64_t hash_bytes(std::span<const std::byte> key, uint64_t seed) {
  uint64_t h = hash::mix64(seed ^ (key.size() * 0x9E3779B97F4A7C15ULL));
  for (size_t i = 0; i < key.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, key.data() + i, std::min<size_t>(8, key.size() - i));
    h = hash::mix64(h ^ w) + i;
  }
  return hash::mix64(h);
}

// --- KV blocks ---------------------------------------------------------------------------------
inline uint32_t block_bytes(size_t klen, size_t vlen) { return static_cast<uint32_t>((8 + klen + vlen + 7) / 8 * 8 + 8); }
inline uint32_t block_units(size_t klen, size_t vlen) { return (block_bytes(klen, vlen) + 63) / 64; }
inline uint64_t block_check(const std::byte* b, uint32_t words) {
  uint64_t h = 0xB10CB10CB10CULL;
  for (uint32_t i = 0; i < words; ++i) h = hash::mix64(h ^ load64(b + 8 * i));
  return h;
}
// The header's top 16 bits name the writer (client id): whoever meets the block in a tentative
// slot learns whose it is.
inline void build_block(std::span<const std::byte> key, std::span<const std::byte> value, uint32_t writer, std::vector<std::byte>& out) {
  out.assign(size_t{block_units(key.size(), value.size())} * 64, std::byte{0});
  store64(out.data(), uint64_t(key.size()) | (uint64_t(value.size()) << 16) | (uint64_t{writer} << 48));
  std::memcpy(out.data() + 8, key.data(), key.size());
  if (!value.empty()) std::memcpy(out.data() + 8 + key.size(), value.data(), value.size());
  const uint32_t words = (8 + static_cast<uint32_t>(key.size() + value.size()) + 7) / 8;
  store64(out.data() + 8 * words, block_check(out.data(), words));
}
// The key and value of a block read in full, or nullopt if it does not validate.
struct BlockView {
  std::span<const std::byte> key, value;
  uint32_t writer = 0;
};
inline std::optional<BlockView> parse_block(const std::byte* b, uint32_t len) {
  const uint64_t h = load64(b);
  const uint64_t klen = h & 0xffff, vlen = (h >> 16) & 0xffffffffULL;
  if (klen == 0 || klen > kMaxKeyBytes || vlen > kMaxValueBytes || block_bytes(klen, vlen) > len)
    return std::nullopt;
  const uint32_t words = static_cast<uint32_t>((8 + klen + vlen + 7) / 8);
  if (load64(b + 8 * words) != block_check(b, words)) return std::nullopt;
  return BlockView{{b + 8, klen}, {b + 8 + klen, vlen}, static_cast<uint32_t>(h >> 48)};
}

// --- the key's placement -----------------------------------------------------------------------
struct Place {
  uint64_t h;
  std::array<uint64_t, 2> main;  // main bucket indices in [0, 2G)
  uint8_t fp;
};
inline Place place(const RaceConfig& c, std::span<const std::byte> key) {
  Place p;
  p.h = hash_bytes(key, c.hash_seed);
  const uint64_t mains = uint64_t{2} * c.groups_per_subtable;
  p.main = {hash::range(hash::mix64(p.h ^ 0xA0761D6478BD642FULL), mains),
            hash::range(hash::mix64(p.h ^ 0xE7037ED1A0B428DBULL), mains)};
  p.fp = static_cast<uint8_t>(hash::mix64(p.h ^ 0x8EBC6AF09C88C6E3ULL) >> 57);  // 7 bits: bit 63 is kKilled
  return p;
}
// Offset of main bucket m's combined bucket inside a subtable (two buckets, 128 bytes).
inline uint64_t combined_offset(uint64_t m) { return (m / 2) * 3 * kRaceBucketBytes + (m % 2) * kRaceBucketBytes; }

inline uint64_t initial_count_on(const RaceConfig& c, uint32_t node) {
  const uint64_t n = uint64_t{1} << c.initial_depth;
  return n / c.memory_nodes + (node < n % c.memory_nodes ? 1 : 0);
}

// Memory-node stores (the RPC handler and formatting run beside one-sided readers).
inline void node_store(std::byte* base, uint64_t off, uint64_t v) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off)).store(v, std::memory_order_release);
}
inline uint64_t node_load(std::byte* base, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off)).load(std::memory_order_acquire);
}

enum class Verdict : uint8_t { kOk, kRetry };

}  // namespace race_internal
using namespace race_internal;

struct RaceClient::Impl {
  Impl(const RaceConfig& c, Engine& e, uint32_t id_, RaceClientStats& s)
      : cfg(c), engine(e), st(s), id(id_), alloc_node(id_ % c.memory_nodes) {}
  const RaceConfig& cfg;
  Engine& engine;
  RaceClientStats& st;
  uint32_t id;  // owner id in locks and blocks
  uint32_t gd = 0;
  std::vector<uint64_t> dir;  // cached entries [0, 2^gd)
  uint32_t alloc_node;
  std::vector<std::pair<RemoteAddr, uint64_t>> chunks;  // (next free, end) of chunks with room
  bool refilling = false;

  // One operation's key and what it has learned.
  struct Ctx {
    std::span<const std::byte> key;
    Place p;
    std::vector<std::pair<uint64_t, bool>> known;  // block identity → holds this key
    uint32_t chunks = 0;
  };
  // The two combined buckets as read.
  struct SlotRef {
    RemoteAddr addr;
    uint64_t v;
    int cb;  // which combined bucket (0/1); the shared overflow is listed once, under the first
  };
  struct View {
    RemoteAddr sub{};
    std::array<std::byte, 256> buf{};
    std::vector<SlotRef> slots;  // deduplicated, ascending address
    uint32_t match = 0;          // bit i: slots[i] has the key's fingerprint, neither empty nor killed
    std::array<uint32_t, 2> load{};
    bool headers_ok = true;
    bool frozen = false;
  };

  uint64_t entry_for(uint64_t h) const { return dir[h & mask(gd)]; }

  // --- the read/write path (race_client.cpp) ---------------------------------------------------

  Task<void> refresh();
  // A CAS posted in the same batch as a view's READ, which is fenced behind it. With
  // `classify_into`: the blocks and dir check of the view read before go in that batch too
  // (speculative placement, race.h "Costs"); their verdict in `classified`.
  struct SlotCas {
    RemoteAddr at;
    uint64_t expect, desired;
    std::vector<SlotRef>* classify_into = nullptr;
    Verdict classified = Verdict::kOk;
  };
  Task<Verdict> read_view(Ctx& c, View& v, SlotCas* place = nullptr, bool* won = nullptr);
  void parse_view(const Ctx& c, View& v, const std::array<RemoteAddr, 2>& cb);
  // Speculative placement's gate: of this client's recent first views holding fingerprint
  // matches not classified yet, how many held a copy of the key (decayed: halved at 64).
  uint32_t spec_seen = 0, spec_hits = 0;
  Task<Verdict> classify(Ctx& c, const View& v, bool all, bool check_dir, std::vector<SlotRef>& copies,
                         std::vector<std::byte>* value_out, uint32_t* value_len);
  struct Fetch {  // a block classify READs, at `offset` of its one buffer
    uint64_t id;
    RemoteAddr at;
    uint32_t len;
    size_t offset;
  };
  size_t select_fetches(const Ctx& c, const View& v, bool all, bool want_value, std::vector<Fetch>& fetch) const;
  void collect_copies(const Ctx& c, const View& v, std::vector<SlotRef>& copies) const;
  Task<bool> alloc_block(uint32_t bytes, RemoteAddr& out);
  Task<uint64_t> rpc_alloc(uint32_t node, uint64_t bytes);
  void check_key(std::span<const std::byte> key) const;
  void check_value(std::span<const std::byte> value) const;
  Task<OpResult> get(std::span<const std::byte> key, std::vector<std::byte>* out);

  // CAS, returning whether it swapped.
  Task<bool> cas(RemoteAddr a, uint64_t expect, uint64_t desired) {
    co_return (co_await engine.cas(a, expect, desired)) == expect;
  }

  enum class Mode : uint8_t { kFindOrPut, kPut, kUpdate };
  Task<OpResult> write(std::span<const std::byte> key, std::span<const std::byte> value, Mode mode);
  Task<OpResult> erase(std::span<const std::byte> key);

  // Tests only (RaceConfig::test_die_at_step): the process kills itself at its Nth split step.
  uint64_t split_steps = 0;
  void die_point() {
    if (cfg.test_die_at_step != 0 && ++split_steps == cfg.test_die_at_step) ::raise(SIGKILL);
  }

  // --- splits, run by anyone (race.h, "Split") -------------------------------------------------

  struct Desc {
    uint64_t s = 0;
    uint32_t L = 0;
    RemoteAddr sub{}, a{}, b{};  // S (depth L), its children A (suffix s) and B (s | 2^L)
  };
  std::vector<uint64_t> running;  // split words some operation of this client is running
  static const RemoteAddr split_at() { return RemoteAddr{0, offsetof(RaceNodeHeader, split)}; }
  RemoteAddr dir_at(uint64_t i) const { return RemoteAddr{0, cfg.directory_offset() + 8 * i}; }

  // How a run of a split ended, as far as its runner can tell: see run_split (race_split.cpp).
  enum class End { kPublished, kVoid, kUnknown };
  static uint64_t slot_at(uint64_t i) { return (i / kRaceSlots) * 64 + 8 + (i % kRaceSlots) * 8; }

  // --- split (race.h, "Split", steps 1-3; then run_split) ----------------------------------------

  Task<void> post_all(std::vector<Pending>& p) {
    for (auto& x : p) co_await x;
    p.clear();
  }

  // Two fresh subtables for this client's next split, allocated before anything is published and
  // kept when the split does not happen (another client's split was installed, or ours was void).
  std::array<std::optional<RemoteAddr>, 2> spare;
  // Set while one of this client's operations allocates children and installs its split (steps
  // 2-3): its other operations that meet a full subtable meanwhile wait for it (one 8-byte READ a
  // look) instead of allocating children of their own. Without it each of them allocated a pair,
  // all but one lost the install CAS, and `spare` kept one pair: the rest leaked (a bulk load
  // with 32 operations in flight leaked about 6 pairs a split and ran the pool out).
  bool preparing_split = false;

  // Splits (race_split.cpp).
  Task<void> help_frozen(const Ctx& c, RemoteAddr sub);
  Task<End> run_split(uint64_t w, const RemoteAddr* only, bool mine, bool* load_recorded = nullptr);
  void record_split_load(const std::vector<uint64_t>& val);
  Task<bool> split_published(End end, RemoteAddr a);
  Task<void> freeze(RemoteAddr sub, std::vector<uint64_t>& val);
  Task<void> copy(const Desc& x, const std::vector<uint64_t>& val);
  Task<uint64_t> double_dir(uint32_t L);
  Task<void> publish(const Desc& x, uint64_t depth);
  Task<Status> split(Ctx& c, RemoteAddr sub);
};

}  // namespace rdmahash
