// RACE hashing's configuration and memory-node side: RaceConfig, the server (region layout and the
// allocation RPC), the loader, inspection and the death board (race_mark_dead). The client is in
// race_client.cpp and race_split.cpp; declarations shared by them in race_internal.h.
// Layout, protocol, split and the safety argument: include/rdmahash/race.h.
#include "schemes/race/race_internal.h"

namespace rdmahash {

// --- configuration ------------------------------------------------------------------------------

void RaceConfig::validate() const {
  auto bad = [](const std::string& m) { throw InvalidArgument("race config: " + m); };
  if (memory_nodes == 0 || memory_nodes > kRaceMaxNodes) bad("memory nodes must be in [1, 64]");
  if (groups_per_subtable == 0 || groups_per_subtable > kMaxRaceGroups) bad("groups per subtable must be in [1, 4096]");
  // The directory is READ whole (64 + 8·2^depth bytes), and a request's length is 32-bit.
  if (max_depth > 28) bad("max depth must be at most 28 (the directory is read in one request of under 4 GiB)");
  if (initial_depth > max_depth) bad("initial depth must be at most max depth (" + std::to_string(max_depth) + ")");
  if (chunk_bytes < 16384 || chunk_bytes % 64 != 0 || chunk_bytes > (uint64_t{1} << 40))
    bad("chunk bytes must be a multiple of 64 in [16384, 2^40]");
  if (key_bytes < 8 || key_bytes > kMaxKeyBytes) bad("key bytes must be in [8, 256]");
}

uint64_t RaceConfig::pool_offset() const { return board_offset() + kRaceBoardBytes; }

uint64_t RaceConfig::region_bytes(uint64_t pool_bytes) const {
  return pool_offset() + initial_count_on(*this, 0) * subtable_bytes() + pool_bytes;
}

uint64_t RaceConfig::region_bytes_for(uint64_t records, uint32_t value_bytes, uint32_t clients) const {
  const uint64_t block = uint64_t{block_units(key_bytes, value_bytes)} * 64;
  // Live subtables at a third of their slots (21·G): subtables split at about 80 % load (measured,
  // G = 64: 0.80-0.81), so right after a wave of splits the live ones hold about 40 %; a third
  // leaves room below that. A split retires its subtable (two children replace it): the retired
  // ones are about as many as the live ones, hence twice. Each client also holds at most one pair
  // of unpublished children (one split prepared at a time per client, race_split.cpp) and one
  // spare pair, and a partly used chunk on every node.
  const uint64_t subtables = records / (kRaceSlots * uint64_t{groups_per_subtable}) + 2;
  const uint64_t per_node = (records * block + 2 * subtables * subtable_bytes()) / memory_nodes;
  return region_bytes(per_node + per_node / 4 + uint64_t{clients + 1} * (chunk_bytes * 2 + subtable_bytes() * 4));
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
    h.config_tag = race_config_tag(cfg);
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
    // Not `next + want <= end`: a `want` from the wire near 2^64 would wrap past the check and
    // move pool_next back over memory already handed out.
    if (next <= end && want <= end - next) {
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
