// RACE hashing. Layout, protocol, split and the safety argument: include/rdmahash/race.h.
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
namespace {

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
inline uint64_t mask(uint32_t bits) { return bits >= 64 ? ~0ULL : (1ULL << bits) - 1; }
inline uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

uint64_t hash_bytes(std::span<const std::byte> key, uint64_t seed) {
  uint64_t h = hash::mix64(seed ^ (key.size() * 0x9E3779B97F4A7C15ULL));
  for (size_t i = 0; i < key.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, key.data() + i, std::min<size_t>(8, key.size() - i));
    h = hash::mix64(h ^ w) + i;
  }
  return hash::mix64(h);
}

// --- KV blocks ---------------------------------------------------------------------------------
uint32_t block_bytes(size_t klen, size_t vlen) { return static_cast<uint32_t>((8 + klen + vlen + 7) / 8 * 8 + 8); }
uint32_t block_units(size_t klen, size_t vlen) { return (block_bytes(klen, vlen) + 63) / 64; }
uint64_t block_check(const std::byte* b, uint32_t words) {
  uint64_t h = 0xB10CB10CB10CULL;
  for (uint32_t i = 0; i < words; ++i) h = hash::mix64(h ^ load64(b + 8 * i));
  return h;
}
// The header's top 16 bits name the writer (client id): whoever meets the block in a tentative
// slot learns whose it is.
void build_block(std::span<const std::byte> key, std::span<const std::byte> value, uint32_t writer, std::vector<std::byte>& out) {
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
std::optional<BlockView> parse_block(const std::byte* b, uint32_t len) {
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
Place place(const RaceConfig& c, std::span<const std::byte> key) {
  Place p;
  p.h = hash_bytes(key, c.hash_seed);
  const uint64_t mains = uint64_t{2} * c.groups_per_subtable;
  p.main = {hash::range(hash::mix64(p.h ^ 0xA0761D6478BD642FULL), mains),
            hash::range(hash::mix64(p.h ^ 0xE7037ED1A0B428DBULL), mains)};
  p.fp = static_cast<uint8_t>(hash::mix64(p.h ^ 0x8EBC6AF09C88C6E3ULL) >> 57);  // 7 bits: bit 63 is kKilled
  return p;
}
// Offset of main bucket m's combined bucket inside a subtable (two buckets, 128 bytes).
uint64_t combined_offset(uint64_t m) { return (m / 2) * 3 * kRaceBucketBytes + (m % 2) * kRaceBucketBytes; }

uint64_t initial_count_on(const RaceConfig& c, uint32_t node) {
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

}  // namespace

// --- configuration ------------------------------------------------------------------------------

void RaceConfig::validate() const {
  auto bad = [](const std::string& m) { throw InvalidArgument("race config: " + m); };
  if (memory_nodes == 0 || memory_nodes > kRaceMaxNodes) bad("memory nodes must be in [1, 64]");
  if (groups_per_subtable == 0 || groups_per_subtable > (1u << 20)) bad("groups per subtable must be in [1, 2^20]");
  // The directory is READ whole (64 + 8·2^depth bytes), and a request's length is 32-bit.
  if (max_depth > 28) bad("max depth must be at most 28 (the directory is read in one request of under 4 GiB)");
  if (initial_depth > max_depth) bad("initial depth must be at most max depth (" + std::to_string(max_depth) + ")");
  if (chunk_bytes < 16384 || chunk_bytes % 64 != 0) bad("chunk bytes must be a multiple of 64, at least 16384");
  if (key_bytes < 8 || key_bytes > kMaxKeyBytes) bad("key bytes must be in [8, 256]");
}

uint64_t RaceConfig::pool_offset() const { return board_offset() + kRaceBoardBytes; }

uint64_t RaceConfig::region_bytes(uint64_t pool_bytes) const {
  return pool_offset() + initial_count_on(*this, 0) * subtable_bytes() + pool_bytes;
}

uint64_t RaceConfig::region_bytes_for(uint64_t records, uint32_t value_bytes, uint32_t clients) const {
  const uint64_t block = uint64_t{block_units(key_bytes, value_bytes)} * 64;
  // Subtables split at about half load in the worst case; the pool must also hold every client's
  // partly used chunk on every node.
  const uint64_t subtables = records / (kRaceSlots * 3 * uint64_t{groups_per_subtable} / 3) + 2;
  // A split retires its subtable (two children replace it): about twice the live subtables.
  const uint64_t per_node = (records * block + 2 * subtables * subtable_bytes()) / memory_nodes;
  return region_bytes(per_node + per_node / 4 + uint64_t{clients + 1} * chunk_bytes * 2 + subtable_bytes() * 4);
}

// --- memory-node side ---------------------------------------------------------------------------

namespace {
void serve_alloc(Fabric& fabric, std::span<const std::byte> req, std::vector<std::byte>& reply);
}

RaceServer::RaceServer(Fabric& fabric, const RaceConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  if (fabric.memory_nodes() != cfg.memory_nodes)
    throw InvalidArgument("race: the fabric has " + std::to_string(fabric.memory_nodes()) + " memory nodes, the config " +
                          std::to_string(cfg.memory_nodes));
  const uint64_t sb = cfg.subtable_bytes();
  for (uint32_t n = 0; n < cfg.memory_nodes; ++n) {
    auto region = fabric.local_region(n);
    if (region.empty()) continue;
    const uint64_t need = cfg.pool_offset() + initial_count_on(cfg, n) * sb;
    if (region.size() < need + sb)
      throw InvalidArgument("race: region of " + std::to_string(region.size()) + " bytes on node " + std::to_string(n) +
                            " is too small (directory and initial subtables need " + std::to_string(need + sb) + ")");
    std::memset(region.data(), 0, need);  // before any client can reach the node
    std::byte* base = region.data();
    // Initial subtable i lives on node i mod K, at slot i / K of that node's pool.
    for (uint64_t i = n; i < (uint64_t{1} << cfg.initial_depth); i += cfg.memory_nodes) {
      const uint64_t off = cfg.pool_offset() + (i / cfg.memory_nodes) * sb;
      for (uint64_t b = 0; b < 3ULL * cfg.groups_per_subtable; ++b)
        store64(base + off + b * kRaceBucketBytes, make_header(cfg.initial_depth, i));
    }
    if (n == 0)
      for (uint64_t i = 0; i < (uint64_t{1} << cfg.initial_depth); ++i)
        store64(base + cfg.directory_offset() + 8 * i,
                make_entry(RemoteAddr{static_cast<uint32_t>(i % cfg.memory_nodes), cfg.pool_offset() + (i / cfg.memory_nodes) * sb},
                           cfg.initial_depth));
    RaceNodeHeader h{};
    h.magic = kRaceMagic;
    h.global_depth = cfg.initial_depth;
    h.pool_next = need;
    h.pool_end = region.size() / 64 * 64;
    std::memcpy(base, &h, sizeof h);
  }
  // Allocation RPC: request = bytes wanted, node (8 bytes each); reply = offset (0: exhausted).
  auto mu = std::make_shared<std::mutex>();
  fabric.register_rpc(kRaceRpcAlloc, [&fabric, mu](uint32_t, std::span<const std::byte> req, std::vector<std::byte>& reply) {
    std::lock_guard lock(*mu);
    serve_alloc(fabric, req, reply);
  });
}

namespace {
// Bump allocation in a node's pool (the caller serializes).
void serve_alloc(Fabric& fabric, std::span<const std::byte> req, std::vector<std::byte>& reply) {
  uint64_t want = 0, node = 0, got = 0;
  if (req.size() == 16) {
    want = load64(req.data());
    node = load64(req.data() + 8);
  }
  auto region = fabric.local_region(static_cast<uint32_t>(node));
  if (want > 0 && want % 64 == 0 && !region.empty()) {
    const uint64_t next = node_load(region.data(), offsetof(RaceNodeHeader, pool_next));
    const uint64_t end = node_load(region.data(), offsetof(RaceNodeHeader, pool_end));
    if (next + want <= end) {
      got = next;
      node_store(region.data(), offsetof(RaceNodeHeader, pool_next), next + want);
    }
  }
  reply.resize(8);
  store64(reply.data(), got);
}

// The loader's transport: requests applied to this process's regions directly (no clients run
// yet, so plain copies suffice), allocation served inline.
class DirectTransport final : public Transport {
 public:
  explicit DirectTransport(Fabric& f) : fabric_(f) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      counters_.add(r);
      if (r.kind == ReqKind::kRpc) {
        serve_alloc(fabric_, std::span<const std::byte>(static_cast<const std::byte*>(r.buf), r.len), *r.reply);
        continue;
      }
      auto region = fabric_.local_region(r.addr.node);
      const uint64_t len = (r.kind == ReqKind::kRead || r.kind == ReqKind::kWrite) ? r.len : 8;
      if (region.empty() || r.addr.offset > region.size() || len > region.size() - r.addr.offset)
        throw FabricError("race loader: access outside the regions hosted here");
      std::byte* p = region.data() + r.addr.offset;
      switch (r.kind) {
        case ReqKind::kRead: std::memcpy(r.buf, p, r.len); break;
        case ReqKind::kWrite: std::memcpy(p, r.buf, r.len); break;
        case ReqKind::kCas: {
          const uint64_t old = load64(p);
          if (old == r.compare) store64(p, r.swap);
          *r.result = old;
          break;
        }
        case ReqKind::kFaa: {
          const uint64_t old = load64(p);
          store64(p, old + r.compare);
          *r.result = old;
          break;
        }
        case ReqKind::kRpc: break;
      }
    }
  }

 private:
  Fabric& fabric_;
};
}  // namespace

struct RaceLoader::State {
  DirectTransport transport;
  Engine engine;
  RaceClient client;
  State(Fabric& f, const RaceConfig& c) : transport(f), engine(transport), client(c, engine, 0) {}
};

RaceLoader::RaceLoader(Fabric& fabric, const RaceConfig& cfg) {
  for (uint32_t n = 0; n < cfg.memory_nodes; ++n)
    if (fabric.local_region(n).empty())
      throw InvalidArgument("race: bulk loading needs every memory node in this process (node " + std::to_string(n) +
                            " is elsewhere): use one memory node, or let the clients insert (--ycsb)");
  state_ = std::make_unique<State>(fabric, cfg);
}
RaceLoader::~RaceLoader() = default;
Engine& RaceLoader::engine() { return state_->engine; }
RaceClient& RaceLoader::client() { return state_->client; }

// --- client -------------------------------------------------------------------------------------

namespace {
enum class Verdict : uint8_t { kOk, kRetry };
}

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
    std::array<uint32_t, 2> load{};
    bool headers_ok = true;
    bool frozen = false;
  };

  uint64_t entry_for(uint64_t h) const { return dir[h & mask(gd)]; }

  // Other operations of this client keep using the cache while this one reads: it is replaced
  // in one step, never left half-filled.
  Task<void> refresh() {
    ++st.dir_refreshes;
    uint32_t want = dir.empty() ? cfg.initial_depth : gd;
    for (;;) {
      std::vector<std::byte> buf(64 + (size_t{8} << want));
      co_await engine.read(RemoteAddr{0, 0}, buf.data(), static_cast<uint32_t>(buf.size()));
      const uint64_t depth = load64(buf.data() + 8);
      if (load64(buf.data()) != kRaceMagic) throw FabricError("race: node 0 holds no RACE table (bad magic)");
      if (depth > cfg.max_depth) throw FabricError("race: directory depth " + std::to_string(depth) + " exceeds the config");
      if (depth > want) {  // grew since: read the larger directory
        want = static_cast<uint32_t>(depth);
        continue;
      }
      std::vector<uint64_t> d(size_t{1} << depth);
      bool complete = true;
      for (size_t i = 0; i < d.size(); ++i) {
        d[i] = load64(buf.data() + 64 + 8 * i);
        if (d[i] == 0) complete = false;  // a doubling's copy not yet visible: read again
      }
      if (!complete) continue;
      if (!dir.empty() && depth < gd) co_return;  // a newer refresh of this client finished first
      gd = static_cast<uint32_t>(depth);
      dir = std::move(d);
      co_return;
    }
  }

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

  // A writer met frozen slots in `sub`: S is being split (or was: retired). Help the split of
  // `sub` if it is the one installed (splits run one at a time), then re-read the directory.
  // Never waits: either the split is finished here or it was finished already.
  Task<void> help_frozen(const Ctx& c, RemoteAddr sub) {
    uint64_t w = 0;
    co_await engine.read(split_at(), &w, 8);
    if (w != 0) co_await run_split(w, &sub, false);
    co_await refresh();
    // S's split is finished now (we ran it, or it had been released, which follows publication),
    // so the fresh directory no longer names S. If it does, S was frozen with no split installed
    // for it: a broken invariant (race.h), not something to wait for.
    if (same_addr(entry_addr(entry_for(c.p.h)), sub))
      throw FabricError("race: a subtable the directory names holds frozen slots, but no installed split is of it");
  }

  // Runs the split described by split word `w` to its end (race.h, "Split", steps 4-9). Any
  // number of clients may run it at once, and any may stop at any request: every change is a CAS
  // from a value that never comes back, or a WRITE of a constant into a retired subtable.
  // `only`: do nothing unless the split is of that subtable. Returns how it ended, as far as this
  // runner can tell: kPublished (dir[s] named S or A: the split is real), kVoid (the descriptor
  // is void — its subtable had been split before it was installed — and our CAS released the
  // word, so the test ran while it was installed; nobody touched A or B), or kUnknown (another
  // operation of ours ran it; the split is not of `only`; or the word was released before our
  // test: dir[s] naming neither S nor A then also fits a finished split whose child A was split
  // since). Only the installer
  // needs to know (its statistics and its spare children): see split_published.
  enum class End { kPublished, kVoid, kUnknown };
  Task<End> run_split(uint64_t w, const RemoteAddr* only, bool mine, bool* load_recorded = nullptr) {
    // Another operation of this client already runs this split: ride along (one 8-byte READ per
    // batch) until the word changes, instead of repeating its work. Waiting for our own operation
    // is not waiting for another client: it progresses at every batch we post.
    // (If that operation ends without finishing it, e.g. a failed request, we run it ourselves.)
    while (std::find(running.begin(), running.end(), w) != running.end()) {
      uint64_t cur = 0;
      co_await engine.read(split_at(), &cur, 8);
      if (cur != w) co_return End::kUnknown;
    }
    struct Running {  // removes w from `running` however this coroutine ends
      std::vector<uint64_t>& v;
      uint64_t w;
      ~Running() { v.erase(std::find(v.begin(), v.end(), w)); }
    };
    running.push_back(w);
    Running guard{running, w};
    std::array<uint64_t, 8> d{};
    co_await engine.read(entry_addr(w), d.data(), 64);
    if (d[0] != kDescMagic || d[7] != block_check(reinterpret_cast<const std::byte*>(d.data()), 7))
      throw FabricError("race: the split word names a block that is not a valid split descriptor");
    Desc x{d[1], static_cast<uint32_t>(d[2]), entry_addr(d[3]), entry_addr(d[4]), entry_addr(d[5])};
    if (only && !same_addr(*only, x.sub)) co_return End::kUnknown;
    const uint64_t eS = make_entry(x.sub, x.L), eA = make_entry(x.a, x.L + 1);
    uint64_t ds = 0;
    co_await engine.read(dir_at(x.s), &ds, 8);
    die_point();
    // While w is installed dir[s] changes only by this split's publication (S@L → A@L+1), so
    // this test gives the same answer to every helper that reads dir[s] while w is installed.
    // After the release it does not: a finished split's child A may have been split since.
    if (ds != eS && ds != eA) co_return co_await cas(split_at(), w, 0) ? End::kVoid : End::kUnknown;
    if (!mine && (w >> 48) != uint64_t{id} + 1) ++st.helped;
    if (ds == eS) {  // not published at s yet: freeze and copy (a publisher has finished both)
      std::vector<uint64_t> val;
      co_await freeze(x.sub, val);
      if (mine) {
        record_split_load(val);
        if (load_recorded) *load_recorded = true;
      }
      co_await copy(x, val);
    }
    const uint64_t depth = co_await double_dir(x.L);
    co_await publish(x, depth);
    die_point();
    // Retire S: its headers now match no key (stale caches re-read the directory at once).
    {
      std::vector<Pending> p;
      for (uint64_t b = 0; b < 3ULL * cfg.groups_per_subtable; ++b) {
        p.push_back(engine.write(RemoteAddr{x.sub.node, x.sub.offset + b * 64}, &kRetiredHeader, 8));
        if (p.size() == kBatch) co_await post_all(p);
      }
      co_await post_all(p);
    }
    die_point();
    if (co_await cas(split_at(), w, 0)) {
      uint64_t ignored = co_await engine.faa(RemoteAddr{0, offsetof(RaceNodeHeader, subtables)}, 2);
      (void)ignored;
    }
    die_point();
    co_return End::kPublished;
  }

  // The installer's verdict on its split w once run_split returned (w is no longer installed then,
  // and never again: descriptor blocks are not reused). kUnknown is settled by one 8-byte READ of
  // slot 0 of A: a void split's A is never written (no runner passes the VOID test, nobody else
  // knows A), while a published one was copied in full — every slot CASed away from RESERVED —
  // before its publication, and no later write produces RESERVED again. So RESERVED there ⟺ void.
  // How full the subtable a split of this client divided was (bench: split_load_factor).
  void record_split_load(const std::vector<uint64_t>& val) {
    const auto used = std::count_if(val.begin(), val.end(), [](uint64_t v) { return v != 0; });
    st.split_load.push_back(static_cast<double>(used) / static_cast<double>(val.size()));
  }

  Task<bool> split_published(End end, RemoteAddr a) {
    if (end != End::kUnknown) co_return end == End::kPublished;
    uint64_t v = 0;
    co_await engine.read(RemoteAddr{a.node, a.offset + slot_at(0)}, &v, 8);
    co_return v != kReserved;
  }

  // Step 4: CAS every slot of S v → v|FROZEN until all are frozen. S is retired after the split
  // and never unfrozen, so a frozen slot holds its value for good: `val` (FROZEN cleared) is the
  // same for every helper.
  Task<void> freeze(RemoteAddr sub, std::vector<uint64_t>& val) {
    std::vector<std::byte> img(cfg.subtable_bytes());
    co_await engine.read(sub, img.data(), static_cast<uint32_t>(img.size()));
    die_point();
    const uint64_t slots = 3ULL * cfg.groups_per_subtable * kRaceSlots;
    val.assign(slots, 0);
    std::vector<uint64_t> todo;
    for (uint64_t i = 0; i < slots; ++i) {
      const uint64_t v = load64(img.data() + slot_at(i));
      val[i] = v & ~kFrozen;
      if (!(v & kFrozen)) todo.push_back(i);
    }
    while (!todo.empty()) {
      std::vector<uint64_t> again;
      for (size_t from = 0; from < todo.size(); from += kBatch) {
        const size_t to = std::min(todo.size(), from + kBatch);
        std::vector<Pending> p;
        for (size_t j = from; j < to; ++j)
          p.push_back(engine.cas(RemoteAddr{sub.node, sub.offset + slot_at(todo[j])}, val[todo[j]], val[todo[j]] | kFrozen));
        for (size_t j = from; j < to; ++j) {
          Pending& pj = p[j - from];
          const uint64_t old = co_await pj;
          if (old == val[todo[j]]) continue;
          val[todo[j]] = old & ~kFrozen;
          if (!(old & kFrozen)) again.push_back(todo[j]);  // a writer got there first: freeze what it wrote
        }
      }
      todo.swap(again);
      die_point();
    }
  }

  // Step 5: slot i of S goes to slot i of A or B by bit L of its key's hash; the other child's
  // slot i becomes empty. Each is a CAS from RESERVED: done once, by whichever helper is first.
  Task<void> copy(const Desc& x, const std::vector<uint64_t>& val) {
    std::vector<std::byte> ia(cfg.subtable_bytes()), ib(cfg.subtable_bytes());
    {
      auto ra = engine.read(x.a, ia.data(), static_cast<uint32_t>(ia.size()));
      auto rb = engine.read(x.b, ib.data(), static_cast<uint32_t>(ib.size()));
      co_await ra;
      co_await rb;
    }
    const uint64_t slots = val.size();
    for (uint64_t from = 0; from < slots; from += kBatch) {
      const uint64_t to = std::min(slots, from + kBatch);
      std::vector<std::vector<std::byte>> bufs(to - from);
      std::vector<Pending> p;
      auto open = [&](uint64_t i) { return load64(ia.data() + slot_at(i)) == kReserved || load64(ib.data() + slot_at(i)) == kReserved; };
      for (uint64_t i = from; i < to; ++i) {
        if (val[i] == 0 || !open(i)) continue;
        bufs[i - from].resize(slot_units(val[i]) * 64);
        p.push_back(engine.read(slot_block(val[i]), bufs[i - from].data(), slot_units(val[i]) * 64));
      }
      co_await post_all(p);
      die_point();
      for (uint64_t i = from; i < to; ++i) {
        if (!open(i)) continue;
        bool to_b = false;
        if (val[i] != 0) {
          auto blk = parse_block(bufs[i - from].data(), static_cast<uint32_t>(bufs[i - from].size()));
          if (!blk) throw FabricError("race: split found a KV block that fails its checksum");
          to_b = (hash_bytes(blk->key, cfg.hash_seed) >> x.L) & 1;
        }
        if (load64(ia.data() + slot_at(i)) == kReserved)
          p.push_back(engine.cas(RemoteAddr{x.a.node, x.a.offset + slot_at(i)}, kReserved, to_b ? 0 : val[i]));
        if (load64(ib.data() + slot_at(i)) == kReserved)
          p.push_back(engine.cas(RemoteAddr{x.b.node, x.b.offset + slot_at(i)}, kReserved, to_b ? val[i] : 0));
      }
      co_await post_all(p);
      die_point();
    }
  }

  // Step 6: if L == GD, double: upper half entries CAS 0 → their lower twin, then GD CAS L → L+1
  // (only after every upper entry is set, so no reader sees a zero entry below 2^GD). Returns GD.
  Task<uint64_t> double_dir(uint32_t L) {
    uint64_t depth = 0;
    co_await engine.read(RemoteAddr{0, offsetof(RaceNodeHeader, global_depth)}, &depth, 8);
    if (depth != L) co_return depth;
    std::vector<uint64_t> d(size_t{1} << L);
    co_await engine.read(dir_at(0), d.data(), static_cast<uint32_t>(8 * d.size()));
    std::vector<Pending> p;
    for (size_t j = 0; j < d.size(); ++j) {
      p.push_back(engine.cas(dir_at(d.size() + j), 0, d[j]));
      if (p.size() == kBatch) co_await post_all(p);
    }
    co_await post_all(p);
    die_point();
    const uint64_t old = co_await engine.cas(RemoteAddr{0, offsetof(RaceNodeHeader, global_depth)}, L, L + 1);
    die_point();
    co_return old == L ? L + 1 : old;
  }

  // Step 7: every entry ≡ s (mod 2^L) below 2^depth: CAS S@L → A or B (by bit L) at L+1. S is
  // never named again once retired, so a late helper's CAS fails.
  Task<void> publish(const Desc& x, uint64_t depth) {
    const uint64_t eS = make_entry(x.sub, x.L), eA = make_entry(x.a, x.L + 1), eB = make_entry(x.b, x.L + 1);
    std::vector<Pending> p;
    for (uint64_t i = x.s; i < (uint64_t{1} << depth); i += uint64_t{1} << x.L) {
      p.push_back(engine.cas(dir_at(i), eS, ((i >> x.L) & 1) ? eB : eA));
      if (p.size() == kBatch) co_await post_all(p);
    }
    co_await post_all(p);
  }

  static uint64_t slot_at(uint64_t i) { return (i / kRaceSlots) * 64 + 8 + (i % kRaceSlots) * 8; }
  // RT: read both combined buckets of the key in the subtable the cache names (cache off: READ
  // the directory entry first). A stale header (RETIRED, or a suffix the key does not have)
  // refreshes the directory and retries with it.
  Task<Verdict> read_view(Ctx& c, View& v) {
    if (dir.empty()) co_await refresh();
    if (!cfg.dir_cache) {
      uint64_t e = 0, depth = 0;
      auto a = engine.read(RemoteAddr{0, 8}, &depth, 8);
      auto b = engine.read(RemoteAddr{0, cfg.directory_offset() + 8 * (c.p.h & mask(gd))}, &e, 8);
      co_await a;
      co_await b;
      if (depth != gd) co_await refresh();
      else dir[c.p.h & mask(gd)] = e;
    }
    const uint64_t e = entry_for(c.p.h);
    v.sub = entry_addr(e);
    std::array<RemoteAddr, 2> cb;
    for (int i = 0; i < 2; ++i) cb[i] = RemoteAddr{v.sub.node, v.sub.offset + combined_offset(c.p.main[i])};
    {
      auto r0 = engine.read(cb[0], v.buf.data(), 128);
      auto r1 = engine.read(cb[1], v.buf.data() + 128, 128);
      co_await r0;
      co_await r1;
    }
    c.chunks += 2;
    v.slots.clear();
    v.load = {0, 0};
    v.headers_ok = true;
    v.frozen = false;
    for (int i = 0; i < 2; ++i)
      for (int b = 0; b < 2; ++b) {
        const std::byte* bucket = v.buf.data() + 128 * i + 64 * b;
        const uint64_t hdr = load64(bucket);
        const uint32_t depth = static_cast<uint32_t>(hdr & 0xff);
        if (depth == kRetiredDepth || (c.p.h & mask(depth)) != (hdr >> 8)) v.headers_ok = false;
        for (uint32_t s = 0; s < kRaceSlots; ++s) {
          const RemoteAddr a{cb[i].node, cb[i].offset + 64 * b + 8 + 8 * s};
          const uint64_t w = load64(bucket + 8 + 8 * s);
          if (w != 0) ++v.load[i];
          if (w & kFrozen) v.frozen = true;
          if (std::any_of(v.slots.begin(), v.slots.end(), [&](const SlotRef& r) { return r.addr.offset == a.offset; })) continue;
          v.slots.push_back(SlotRef{a, w, i});
        }
      }
    std::sort(v.slots.begin(), v.slots.end(), [](const SlotRef& x, const SlotRef& y) { return x.addr.offset < y.addr.offset; });
    if (v.headers_ok) co_return Verdict::kOk;
    ++st.stale_detected;
    ++st.stale_headers;
    co_await refresh();
    // The fresh directory cannot still name the subtable read. Its headers are written once, in
    // its image before any entry names it, and then only RETIRED, after its split's publication
    // has CASed every entry naming it (copy-on-split order, race.h); the refresh READ follows
    // ours, so it sees that publication. A subtable named at index i has a suffix ≡ i, which is
    // the key's. So this is corrupted memory or a broken protocol: an error, not a view to use
    // (before copy-on-split it meant "headers rewritten, not published yet": contents current).
    if (same_addr(entry_addr(entry_for(c.p.h)), v.sub))
      throw FabricError("race: a bucket header of a subtable the directory names is RETIRED or has another suffix "
                        "(memory corrupted or the split protocol broken)");
    co_return Verdict::kRetry;
  }

  // RT: READ the blocks of fingerprint-matching slots this op has not classified yet (committed
  // only, unless `all`), plus the key's directory entry when `check_dir`: the check that no split
  // published since the view was read moved the key elsewhere. Fills `copies` with the slots
  // holding the key. `value_out` receives the value of the committed copy.
  Task<Verdict> classify(Ctx& c, const View& v, bool all, bool check_dir, std::vector<SlotRef>& copies,
                         std::vector<std::byte>* value_out, uint32_t* value_len) {
    struct Fetch {
      uint64_t id;
      RemoteAddr at;
      uint32_t len;
      std::vector<std::byte> buf;
    };
    std::vector<Fetch> fetch;
    for (const SlotRef& s : v.slots) {
      if ((s.v & ~kFrozen) == 0 || (s.v & kKilled) || slot_fp(s.v) != c.p.fp || (!all && !(s.v & kCommitted))) continue;
      const uint64_t id = s.v & kPtrMask;
      const bool wanted_value = value_out && (s.v & kCommitted);
      if (!wanted_value && std::any_of(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == id; })) continue;
      if (std::any_of(fetch.begin(), fetch.end(), [&](const Fetch& f) { return f.id == id; })) continue;
      fetch.push_back(Fetch{id, slot_block(s.v), slot_units(s.v) * 64, {}});
    }
    uint64_t e = 0, depth = gd;
    const uint32_t cached_gd = gd;
    if (!fetch.empty() || check_dir) {
      std::vector<Pending> pend;
      for (auto& f : fetch) {
        f.buf.resize(f.len);
        pend.push_back(engine.read(f.at, f.buf.data(), f.len));
      }
      // The global depth too: a split that doubled the directory leaves the entry at the old
      // index naming S even when it moved the key (the key's entry is in the new upper half).
      std::optional<Pending> d, g;
      if (check_dir) {
        d.emplace(engine.read(RemoteAddr{0, cfg.directory_offset() + 8 * (c.p.h & mask(cached_gd))}, &e, 8));
        g.emplace(engine.read(RemoteAddr{0, offsetof(RaceNodeHeader, global_depth)}, &depth, 8));
      }
      for (auto& p : pend) co_await p;
      if (d) {
        Pending& dp = *d;
        co_await dp;
        Pending& gp = *g;
        co_await gp;
      }
    }
    if (check_dir && (depth != cached_gd || !same_addr(entry_addr(e), v.sub))) {
      ++st.stale_detected;
      co_await refresh();
      co_return Verdict::kRetry;
    }
    for (auto& f : fetch) {
      auto b = parse_block(f.buf.data(), f.len);
      if (!b) throw FabricError("race: a KV block failed its checksum (memory corrupted or a pointer is wrong)");
      const bool mine = b->key.size() == c.key.size() && std::equal(b->key.begin(), b->key.end(), c.key.begin());
      if (std::none_of(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == f.id; })) {
        c.known.emplace_back(f.id, mine);
      }
      if (mine && value_out) {
        value_out->assign(b->value.begin(), b->value.end());
        if (value_len) *value_len = static_cast<uint32_t>(b->value.size());
      }
    }
    copies.clear();
    for (const SlotRef& s : v.slots) {
      if ((s.v & ~kFrozen) == 0 || (s.v & kKilled) || slot_fp(s.v) != c.p.fp) continue;
      const uint64_t id = s.v & kPtrMask;
      auto it = std::find_if(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == id; });
      if (it != c.known.end() && it->second) copies.push_back(s);
    }
    co_return Verdict::kOk;
  }

  // Space for one block, carved from this client's chunks; a new chunk by RPC when none has room,
  // trying every node. Several operations of this client may refill at once: every chunk they
  // get is kept, none is dropped. False: the pool is exhausted.
  Task<bool> alloc_block(uint32_t bytes, RemoteAddr& out) {
    bytes = (bytes + 63) / 64 * 64;
    for (;;) {
      for (size_t i = 0; i < chunks.size(); ++i)
        if (chunks[i].second - chunks[i].first.offset >= bytes) {
          out = chunks[i].first;
          chunks[i].first.offset += bytes;
          if (chunks[i].second - chunks[i].first.offset < 64 * kMaxUnits) chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(i));
          co_return true;
        }
      if (refilling) {
        // Another operation's RPC is in flight: ride along in its batch (one 8-byte READ), then
        // look again, instead of fetching a chunk of our own that would go mostly unused.
        uint64_t scratch = 0;
        co_await engine.read(RemoteAddr{0, 0}, &scratch, 8);
        continue;
      }
      refilling = true;
      // Cleared on every way out, a failing RPC's exception included: left set, every later
      // allocation of this client would ride along forever on an RPC no longer in flight.
      struct Unset {
        bool& flag;
        ~Unset() { flag = false; }
      } unset{refilling};
      bool ok = false;
      for (uint32_t tries = 0; tries < cfg.memory_nodes && !ok; ++tries) {
        const uint32_t node = alloc_node;
        alloc_node = (alloc_node + 1) % cfg.memory_nodes;  // spread chunks over the nodes
        if (const uint64_t got = co_await rpc_alloc(node, cfg.chunk_bytes)) {
          chunks.emplace_back(RemoteAddr{node, got}, got + cfg.chunk_bytes);
          ok = true;
        }
      }
      if (!ok) co_return false;
    }
  }

  Task<uint64_t> rpc_alloc(uint32_t node, uint64_t bytes) {
    std::array<uint64_t, 2> req{bytes, node};
    std::vector<std::byte> reply;
    co_await engine.rpc(node, kRaceRpcAlloc, req.data(), 16, &reply);
    ++st.chunk_rpcs;
    if (reply.size() != 8) throw FabricError("race: malformed allocation reply");
    co_return load64(reply.data());
  }

  // --- operations ---------------------------------------------------------------------------

  void check_key(std::span<const std::byte> key) const {
    if (key.empty() || key.size() > kMaxKeyBytes)
      throw InvalidArgument("race: keys must be 1 to " + std::to_string(kMaxKeyBytes) + " bytes, got " +
                            std::to_string(key.size()));
  }
  void check_value(std::span<const std::byte> value) const {
    if (value.size() > kMaxValueBytes)
      throw InvalidArgument("race: values must be at most " + std::to_string(kMaxValueBytes) + " bytes, got " +
                            std::to_string(value.size()));
  }

  Task<OpResult> get(std::span<const std::byte> key, std::vector<std::byte>* out) {
    check_key(key);
    Ctx c{key, place(cfg, key), {}, 0};
    View v;
    std::vector<SlotRef> copies;
    std::vector<std::byte> value;
    OpResult r;
    for (;;) {
      if (co_await read_view(c, v) == Verdict::kRetry) continue;
      if (co_await classify(c, v, false, true, copies, &value, &r.value_bytes) == Verdict::kRetry) continue;
      break;
    }
    r.chunks = c.chunks;
    const bool hit = std::any_of(copies.begin(), copies.end(), [](const SlotRef& s) { return s.v & kCommitted; });
    if (!hit) {
      r.status = Status::kNotFound;
      r.value_bytes = 0;
      co_return r;
    }
    r.status = Status::kFound;
    r.matches = 1;
    if (out) *out = std::move(value);
    co_return r;
  }

  // CAS, returning whether it swapped.
  Task<bool> cas(RemoteAddr a, uint64_t expect, uint64_t desired) {
    co_return (co_await engine.cas(a, expect, desired)) == expect;
  }

  enum class Mode : uint8_t { kFindOrPut, kPut, kUpdate };

  // find_or_put / put / update: see race.h for the insert protocol and duplicate resolution.
  Task<OpResult> write(std::span<const std::byte> key, std::span<const std::byte> value, Mode mode) {
    check_key(key);
    check_value(value);
    Ctx c{key, place(cfg, key), {}, 0};
    std::vector<std::byte> block;
    build_block(key, value, id, block);
    const uint32_t units = static_cast<uint32_t>(block.size() / 64);
    RemoteAddr at;
    if (!co_await alloc_block(static_cast<uint32_t>(block.size()), at)) co_return OpResult{Status::kFull, 0, 0, 0};
    uint64_t mine_tent = make_slot(c.p.fp, units, at);
    uint64_t mine_id = mine_tent & kPtrMask;
    c.known.emplace_back(mine_id, true);
    bool have_mine = false;
    bool placed = false;  // mine_tent was placed: never again (race.h, Protocol: no slot value is placed twice)
    RemoteAddr mine_at{};
    bool written = false;
    View v;
    std::vector<SlotRef> copies;
    auto done = [&](Status s) { return OpResult{s, c.chunks, s == Status::kFound ? 1u : 0u, 0}; };
    for (;;) {
      Verdict rv;
      if (!written) {
        auto w = engine.write(at, block.data(), static_cast<uint32_t>(block.size()));  // same round trip
        rv = co_await read_view(c, v);
        co_await w;
        written = true;
      } else {
        rv = co_await read_view(c, v);
      }
      if (rv == Verdict::kRetry) continue;
      if (v.frozen) {  // a split of this subtable is running: help it finish, then read again
        co_await help_frozen(c, v.sub);
        continue;
      }
      // Committed copies need a validated view (dir check); tentative ones do not.
      const bool any_match = std::any_of(v.slots.begin(), v.slots.end(), [&](const SlotRef& s) {
        return (s.v & ~kFrozen) != 0 && slot_fp(s.v) == c.p.fp && (s.v & kPtrMask) != mine_id;
      });
      if (co_await classify(c, v, true, any_match || mode == Mode::kUpdate, copies, nullptr, nullptr) == Verdict::kRetry)
        continue;
      // Our copy killed by another inserter (race.h, "Helping"): clear the marker and start over.
      // Only a kill leaves it, so a copy of ours that is gone without one was committed.
      const SlotRef* marker = nullptr;
      for (const SlotRef& s : v.slots)
        if ((s.v & kKilled) && (s.v & kPtrMask) == mine_id) marker = &s;
      if (marker) {
        if (!co_await cas(marker->addr, marker->v, 0)) continue;
        have_mine = false;
        continue;
      }
      const SlotRef* mine = nullptr;
      const SlotRef* committed = nullptr;
      const SlotRef* lowest = nullptr;  // the lowest tentative copy: the one that may commit
      // Our block referenced twice would be a bug; the committed reference, else the lowest, is
      // ours, the others are withdrawn like other tentative copies.
      for (const SlotRef& s : copies)
        if ((s.v & kPtrMask) == mine_id && (!mine || (s.v & kCommitted))) mine = &s;
      for (const SlotRef& s : copies) {
        if (s.v & kCommitted) {
          if (&s == mine || (s.v & kPtrMask) != mine_id) committed = &s;
        } else if (!lowest || s.addr.offset < lowest->addr.offset) {
          lowest = &s;
        }
      }
      if (mine && (mine->v & kCommitted)) {  // a helper committed it (our own CAS answers at once)
        ++st.commits_by_helper;
        for (const SlotRef& h : copies)
          if (&h != mine && (h.v & kPtrMask) == mine_id) (void)co_await cas(h.addr, h.v, 0);
        co_return done(Status::kInserted);
      }
      if (have_mine && !mine) {
        // Our copy is gone and left no kill marker: a helper committed it and a later update or
        // erase replaced it (it never left a split behind: a retired subtable is all frozen) (validate the view first: a stale one may just not show it).
        if (co_await classify(c, v, true, true, copies, nullptr, nullptr) == Verdict::kRetry) continue;
        ++st.commits_by_helper;
        co_return done(Status::kInserted);
      }
      if (committed) {
        if (mine) {  // withdraw our tentative copy before answering (fails if it was committed)
          if (!co_await cas(mine->addr, mine->v, 0)) continue;
          have_mine = false;
        }
        if (mode == Mode::kFindOrPut) co_return done(Status::kFound);
        const uint64_t next = make_slot(c.p.fp, units, at) | kCommitted;
        if (co_await cas(committed->addr, committed->v, next)) co_return done(Status::kUpdated);
        continue;  // lost to a concurrent write: fresh read
      }
      if (mode == Mode::kUpdate) co_return done(Status::kNotFound);
      if (lowest) {
        // Kill every other tentative copy (withdraw ours), then, once a re-read shows the lowest
        // as the only copy, commit it, whoever owns it: nobody waits for its owner.
        bool changed = false;
        for (const SlotRef& s : copies) {
          if (&s == lowest) continue;
          const bool own = (s.v & kPtrMask) == mine_id;
          if (!co_await cas(s.addr, s.v, own ? 0 : (s.v | kKilled))) {
            changed = true;
            continue;
          }
          changed = true;
          if (own) have_mine = false;
          else ++st.kills;
        }
        if (changed) continue;  // re-read and decide again
        const SlotRef t = *lowest;
        const uint64_t commit_v = t.v | kCommitted;
        if (co_await cas(t.addr, t.v, commit_v)) {
          if ((t.v & kPtrMask) == mine_id) co_return done(Status::kInserted);
          ++st.commits_helped;  // its owner's insert took effect here; ours finds (or updates) it
          if (mode == Mode::kFindOrPut) co_return done(Status::kFound);
        }
        continue;
      }
      // Absent: CAS an empty slot of the less loaded combined bucket (main bucket first).
      const int first = v.load[0] <= v.load[1] ? 0 : 1;
      const SlotRef* empty = nullptr;
      for (const SlotRef& s : v.slots)  // the less loaded combined bucket's own slots first
        if (s.v == 0 && s.cb == first) { empty = &s; break; }
      for (const SlotRef& s : v.slots)
        if (!empty && s.v == 0) { empty = &s; break; }
      if (!empty) {
        if (!cfg.resize) co_return done(Status::kFull);
        const Status s = co_await split(c, v.sub);
        if (s == Status::kFull) co_return done(Status::kFull);
        continue;
      }
      if (placed) {
        // Our copy was killed or withdrawn and we place the key again: with a fresh block, i.e. a
        // new slot value. The same value placed again (maybe in the same slot) would let a stalled
        // helper's commit or kill CAS, issued from a view of the first placement, land on this
        // one. The old block is leaked; the WRITE goes with the next READ, before our CAS.
        if (!co_await alloc_block(static_cast<uint32_t>(block.size()), at)) co_return done(Status::kFull);
        mine_tent = make_slot(c.p.fp, units, at);
        mine_id = mine_tent & kPtrMask;
        c.known.emplace_back(mine_id, true);
        placed = false;
        written = false;
        continue;
      }
      if (co_await cas(empty->addr, 0, mine_tent)) {
        have_mine = true;
        mine_at = empty->addr;
        placed = true;
      }
    }
  }

  Task<OpResult> erase(std::span<const std::byte> key) {
    check_key(key);
    Ctx c{key, place(cfg, key), {}, 0};
    View v;
    std::vector<SlotRef> copies;
    for (;;) {
      if (co_await read_view(c, v) == Verdict::kRetry) continue;
      if (co_await classify(c, v, false, true, copies, nullptr, nullptr) == Verdict::kRetry) continue;
      const SlotRef* committed = nullptr;
      for (const SlotRef& s : copies)
        if (s.v & kCommitted) committed = &s;
      if (!committed) co_return OpResult{Status::kNotFound, c.chunks, 0, 0};
      if (committed->v & kFrozen) {  // a split of this subtable is running: help it finish
        co_await help_frozen(c, v.sub);
        continue;
      }
      if (co_await cas(committed->addr, committed->v, 0)) co_return OpResult{Status::kErased, c.chunks, 1, 0};
    }
  }

  // --- split (race.h, "Split", steps 1-3; then run_split) ----------------------------------------

  Task<void> post_all(std::vector<Pending>& p) {
    for (auto& x : p) co_await x;
    p.clear();
  }

  // Two fresh subtables for this client's next split, allocated before anything is published and
  // kept when the split does not happen (another client's split was installed, or ours was void).
  std::array<std::optional<RemoteAddr>, 2> spare;

  // kInserted: the subtable was split (by us or someone else); retry the insert. kFull: no room.
  Task<Status> split(Ctx& c, RemoteAddr sub) {
    co_await refresh();
    const uint64_t e = entry_for(c.p.h);
    if (!same_addr(entry_addr(e), sub)) co_return Status::kInserted;  // already split by someone
    const uint32_t L = entry_depth(e);
    if (L >= cfg.max_depth) co_return Status::kFull;
    const uint64_t s = c.p.h & mask(L), s2 = s | (uint64_t{1} << L);
    // 1. One split runs at a time: if one is installed, help it to its end, then retry.
    uint64_t cur = 0;
    co_await engine.read(split_at(), &cur, 8);
    if (cur != 0) {
      co_await run_split(cur, nullptr, false);
      co_await refresh();
      co_return Status::kInserted;
    }
    // 2. The children: A (suffix s) and B (s2), every slot RESERVED, and the descriptor block.
    // Taken out of `spare` before any co_await: this client's other operations may split too.
    std::array<std::optional<RemoteAddr>, 2> kids{std::exchange(spare[0], std::nullopt), std::exchange(spare[1], std::nullopt)};
    auto keep = [&] {  // unused (nothing published them): for this client's next split
      for (int k = 0; k < 2; ++k)
        if (kids[k] && !spare[k]) spare[k] = kids[k];
    };
    for (int k = 0; k < 2; ++k)
      for (uint32_t t = 0; t < cfg.memory_nodes && !kids[k]; ++t) {
        const uint32_t node = static_cast<uint32_t>(((k ? s2 : s) + t) % cfg.memory_nodes);
        if (const uint64_t got = co_await rpc_alloc(node, cfg.subtable_bytes())) kids[k] = RemoteAddr{node, got};
      }
    RemoteAddr blk{};
    bool have_blk = false;  // (no co_await inside && : GCC 12 miscompiles it)
    if (kids[0] && kids[1]) have_blk = co_await alloc_block(64, blk);
    if (!have_blk) {
      keep();
      co_return Status::kFull;
    }
    die_point();
    const RemoteAddr a = *kids[0], b = *kids[1];
    std::vector<std::byte> ia(cfg.subtable_bytes()), ib(cfg.subtable_bytes());
    for (uint64_t i = 0; i < 3ULL * cfg.groups_per_subtable; ++i) {
      store64(ia.data() + 64 * i, make_header(L + 1, s));
      store64(ib.data() + 64 * i, make_header(L + 1, s2));
      for (uint32_t j = 0; j < kRaceSlots; ++j) {
        store64(ia.data() + 64 * i + 8 + 8 * j, kReserved);
        store64(ib.data() + 64 * i + 8 + 8 * j, kReserved);
      }
    }
    std::array<uint64_t, 8> d{kDescMagic, s, L, make_entry(sub, L), make_entry(a, L + 1), make_entry(b, L + 1), id, 0};
    d[7] = block_check(reinterpret_cast<const std::byte*>(d.data()), 7);
    {
      auto wa = engine.write(a, ia.data(), static_cast<uint32_t>(ia.size()));
      auto wb = engine.write(b, ib.data(), static_cast<uint32_t>(ib.size()));
      auto wd = engine.write(blk, d.data(), 64);
      co_await wa;
      co_await wb;
      co_await wd;
    }
    die_point();
    // 3. Install the descriptor: from here on anyone can finish the split. Lost: help the winner.
    const uint64_t w = split_word(id, blk);
    const uint64_t old = co_await engine.cas(split_at(), 0, w);
    if (old != 0) {
      keep();  // never published
      co_await run_split(old, nullptr, false);
      co_await refresh();
      co_return Status::kInserted;
    }
    die_point();
    // Counted once, by its installer, iff published; a void split's A and B (never written by
    // anyone) stay this client's spares. Taking a published split for void would hand out live
    // subtables for overwriting (test RaceFault.InstallerStalledPastItsPublishedSplit...).
    bool load_recorded = false;
    const End end = co_await run_split(w, nullptr, true, &load_recorded);
    if (co_await split_published(end, a)) {
      ++st.splits;
      if (!load_recorded) {
        // A helper froze S before this client's run got there. S stays frozen for good (only its
        // headers are retired), so freeze() is one READ of the values the split divided.
        std::vector<uint64_t> val;
        co_await freeze(sub, val);
        record_split_load(val);
      }
    } else {
      keep();
    }
    co_await refresh();
    co_return Status::kInserted;
  }
};

RaceClient::RaceClient(const RaceConfig& cfg, Engine& engine, uint32_t client_id) : cfg_(cfg) {
  cfg_.validate();
  if (client_id > kRaceMaxClientId)
    throw InvalidArgument("race: client id " + std::to_string(client_id) + " does not fit the " +
                          std::to_string(kRaceMaxClientId + 1) + " owner ids of locks and blocks");
  impl_ = std::make_unique<Impl>(cfg_, engine, client_id, stats_);
}
RaceClient::~RaceClient() = default;

namespace {
// uint64 keys as bytes: the 8 little-endian bytes, then a fixed pattern up to key_bytes.
std::vector<std::byte> int_key(const RaceConfig& c, uint64_t key) {
  std::vector<std::byte> k(c.key_bytes);
  std::memcpy(k.data(), &key, 8);
  for (uint32_t i = 8; i < c.key_bytes; ++i) k[i] = static_cast<std::byte>(0xA5 ^ i);
  return k;
}
}  // namespace

Task<OpResult> RaceClient::find_or_put(KeyView key, std::span<const std::byte> value) {
  return impl_->write(key.bytes, value, Impl::Mode::kFindOrPut);
}
Task<OpResult> RaceClient::put(KeyView key, std::span<const std::byte> value) {
  return impl_->write(key.bytes, value, Impl::Mode::kPut);
}
Task<OpResult> RaceClient::update(KeyView key, std::span<const std::byte> value) {
  return impl_->write(key.bytes, value, Impl::Mode::kUpdate);
}
Task<OpResult> RaceClient::get(KeyView key, std::vector<std::byte>* value_out) { return impl_->get(key.bytes, value_out); }
Task<OpResult> RaceClient::erase(KeyView key) { return impl_->erase(key.bytes); }

Task<OpResult> RaceClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->write(k, value, Impl::Mode::kFindOrPut);
}
Task<OpResult> RaceClient::put(uint64_t key, std::span<const std::byte> value) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->write(k, value, Impl::Mode::kPut);
}
Task<OpResult> RaceClient::update(uint64_t key, std::span<const std::byte> value) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->write(k, value, Impl::Mode::kUpdate);
}
Task<OpResult> RaceClient::erase(uint64_t key) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->erase(k);
}
Task<OpResult> RaceClient::get(uint64_t key, std::span<std::byte> value_out) {
  const auto k = int_key(cfg_, key);
  std::vector<std::byte> v;
  OpResult r = co_await impl_->get(k, &v);
  // (A miss leaves v empty: memcpy's pointers must not be null even for 0 bytes.)
  if (const size_t n = std::min(v.size(), value_out.size())) std::memcpy(value_out.data(), v.data(), n);
  co_return r;
}
Task<OpResult> RaceClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  const auto k = int_key(cfg_, key);
  std::vector<std::byte> v;
  OpResult r = co_await impl_->get(k, &v);
  if (values_out && r.status == Status::kFound) values_out->insert(values_out->end(), v.begin(), v.end());
  co_return r;
}
Task<void> RaceClient::refresh_directory() { return impl_->refresh(); }
uint32_t RaceClient::cached_depth() const { return impl_->gd; }

// --- inspection -----------------------------------------------------------------------------------

uint64_t race_slot_count(Fabric& fabric, const RaceConfig& cfg) {
  auto n0 = fabric.local_region(0);
  if (n0.empty()) throw InvalidArgument("race_slot_count: node 0 is not hosted by this process");
  const auto depth = static_cast<uint32_t>(node_load(n0.data(), offsetof(RaceNodeHeader, global_depth)));
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < (uint64_t{1} << depth); ++i)
    ids.push_back(node_load(n0.data(), cfg.directory_offset() + 8 * i) & ((1ULL << 46) - 1));
  std::sort(ids.begin(), ids.end());
  const auto subtables = static_cast<uint64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
  return subtables * 3 * cfg.groups_per_subtable * kRaceSlots;
}

RaceInspection race_inspect(Fabric& fabric, const RaceConfig& cfg, bool with_keys) {
  RaceInspection r;
  auto n0 = fabric.local_region(0);
  if (n0.empty()) throw InvalidArgument("race_inspect: node 0 is not hosted by this process");
  r.global_depth = static_cast<uint32_t>(node_load(n0.data(), offsetof(RaceNodeHeader, global_depth)));
  if (node_load(n0.data(), offsetof(RaceNodeHeader, split)) != 0) r.split_word_clear = false;
  std::vector<uint64_t> seen;
  for (uint64_t i = 0; i < (uint64_t{1} << r.global_depth); ++i) {
    const uint64_t e = node_load(n0.data(), cfg.directory_offset() + 8 * i);
    const uint64_t id = e & ((1ULL << 46) - 1);
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    const RemoteAddr sub = entry_addr(e);
    auto region = fabric.local_region(sub.node);
    ++r.subtables;
    for (uint64_t b = 0; b < 3ULL * cfg.groups_per_subtable; ++b)
      for (uint32_t s = 0; s < kRaceSlots; ++s) {
        ++r.slots;
        const uint64_t w = node_load(region.data(), sub.offset + b * 64 + 8 + 8 * s);
        if (w == 0) continue;
        if (w & kFrozen) ++r.frozen;
        if (w & kKilled) {
          ++r.killed;
          continue;
        }
        if (!(w & kCommitted)) {
          ++r.tentative;
          continue;
        }
        ++r.committed;
        if (with_keys) {
          const RemoteAddr a = slot_block(w);
          auto br = fabric.local_region(a.node);
          auto blk = parse_block(br.data() + a.offset, slot_units(w) * 64);
          if (!blk) throw FabricError("race_inspect: a committed slot points to a block that fails its checksum");
          r.keys.emplace_back(blk->key.begin(), blk->key.end());
        }
      }
  }
  return r;
}

}  // namespace rdmahash

namespace rdmahash {
void race_mark_dead(Fabric& fabric, const RaceConfig& cfg, uint32_t client_id) {
  auto n0 = fabric.local_region(0);
  if (n0.empty()) throw InvalidArgument("race_mark_dead: node 0 is not hosted by this process");
  if (client_id > kRaceMaxClientId) return;  // such a client never ran (its constructor refused it)
  auto* word = reinterpret_cast<uint64_t*>(n0.data() + cfg.board_offset() + 8 * (client_id / 64));
  std::atomic_ref<uint64_t>(*word).fetch_or(uint64_t{1} << (client_id % 64), std::memory_order_acq_rel);
}
}  // namespace rdmahash

