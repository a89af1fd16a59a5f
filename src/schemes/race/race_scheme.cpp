// RACE's registry entry (rdmahash/scheme.h): the memory node's server (formats, registers the
// allocator; bulk loads through a loader client on the process hosting every node), the clients
// (named by id: lock owners, tentative copies) and the death board `serve` marks. Design: rdmahash/race.h.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "rdmahash/race.h"
#include "rdmahash/ucx_service.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

// Byte-string blocks out of place; uint64 keys become key_bytes-byte keys (the 8 key bytes plus a
// fixed suffix). The table starts with 2^initial_depth subtables and grows.
class RaceTable final : public SchemeTable {
 public:
  explicit RaceTable(const TableOptions& o) : value_bytes_(o.value_bytes), clients_(std::max<uint32_t>(o.clients, 16)) {
    cfg_.memory_nodes = o.memory_nodes;
    cfg_.groups_per_subtable = o.race_groups;
    cfg_.initial_depth = o.initial_depth;
    cfg_.key_bytes = o.key_bytes;
    cfg_.dir_cache = o.race_dir_cache == Switch::kOn;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x5ACE5ACEULL);
    // Records the run may hold: what `serve --capacity` says, else the loaded ones plus every
    // insert the run may make.
    capacity_ = o.capacity ? o.capacity : o.records + o.inserts;
    // Directory deep enough for subtables at a quarter load (headroom for uneven local depths; the
    // pool itself is sized by RaceConfig::region_bytes_for), at least initial_depth + 6.
    const double subtables = static_cast<double>(capacity_) / (0.25 * kRaceSlots * 3 * cfg_.groups_per_subtable);
    uint32_t depth = cfg_.initial_depth + 6;
    while (depth < 22 && static_cast<double>(uint64_t{1} << depth) < 4 * subtables) ++depth;
    cfg_.max_depth = depth;
    cfg_.chunk_bytes = 1 << 20;
    cfg_.test_die_at_step = o.die_holding_lock;  // tests only: die at the Nth split step
    cfg_.validate();
  }
  // Each client may hold a prepared split (its subtables) and a partly used chunk per node: at
  // least 16 clients' worth (a served table's clients are not known in advance), else the run's.
  uint64_t region_bytes() const override { return cfg_.region_bytes_for(capacity_, value_bytes_, clients_); }
  uint64_t slots() const override { return 0; }  // the table grows: no fixed slot count
  uint64_t slots_in(Fabric& fabric) const override {
    return fabric.local_region(0).empty() ? 0 : race_slot_count(fabric, cfg_);
  }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return value_bytes_; }

  void load(Fabric& fabric, RecordSource& records) override {
    RaceServer server(fabric, cfg_);  // formats the hosted nodes, registers the allocator
    const uint64_t count = records.count();
    if (count == 0 || fabric.local_region(0).empty()) return;
    RaceLoader loader(fabric, cfg_);  // InvalidArgument unless every node is hosted here
    uint64_t failed = 0;
    loader.engine().run_many(
        count, 32,
        [&](uint64_t) -> Task<void> {
          const uint64_t k = records.next();
          std::vector<std::byte> v(value_bytes_);
          records.fill(k, v);
          const OpResult r = co_await loader.client().find_or_put(k, v);
          if (r.status == Status::kFull) ++failed;
        },
        [&](const Engine::Completion& c) {
          if (c.error) std::rethrow_exception(c.error);
          if ((c.index & 0xFFFF) == 0 && records.progress) records.progress(c.index);
        });
    if (failed) throw InvalidArgument("race: the memory pool ran out while loading " + std::to_string(count) + " records");
    if (records.progress) records.progress(count);
  }

  // The client id names this client in its split descriptors and KV blocks (tentative copies).
  Client make_client(Engine& engine, const ClientOptions& c) const override {
    require_fixed_read_size(c, "race");
    return {std::make_unique<RaceClient>(cfg_, engine, c.client_id), 2 * kRaceSlots};
  }
  // Served (node 0 here): a lost client is marked on the death board after the grace period (its
  // posted requests have landed by then). Survivors do not need the mark (race.h, Helping: any
  // client finishes an installed split and commits or kills a tentative copy); serve logs it.
  std::unique_ptr<ClientLossHandler> loss_handler(Fabric& fabric) const override {
    if (fabric.local_region(0).empty()) return nullptr;
    struct Handler final : ClientLossHandler {
      Handler(Fabric& f, const RaceConfig& c) : fabric(f), cfg(c) {}
      void mark(uint32_t id) override { lost.push_back(id); }
      std::string repair() override {
        std::string ids;
        for (const uint32_t id : lost) {
          race_mark_dead(fabric, cfg, id);
          ids += (ids.empty() ? "" : ", ") + std::to_string(id);
        }
        lost.clear();
        return "race: client(s) " + ids + " marked dead on the death board";
      }
      Fabric& fabric;
      RaceConfig cfg;
      std::vector<uint32_t> lost;
    };
    return std::make_unique<Handler>(fabric, cfg_);
  }
  ClientStats client_stats(KvClient& kv) const override {
    auto& c = static_cast<RaceClient&>(kv);
    return {c.stats().splits, c.stats().split_load, c.cached_depth()};
  }
  ReportFields report_options() const override {
    return {{"race_dir_cache", std::string(cfg_.dir_cache ? "on" : "off")},
            {"initial_depth", uint64_t{cfg_.initial_depth}}};
  }
  std::string describe() const override {
    return "race G=" + std::to_string(cfg_.groups_per_subtable) + " key=" + std::to_string(cfg_.key_bytes) +
           "B cache=" + (cfg_.dir_cache ? "on" : "off") + " d0=" + std::to_string(cfg_.initial_depth);
  }

 private:
  RaceConfig cfg_;
  uint32_t value_bytes_;
  uint32_t clients_;
  uint64_t capacity_ = 0;
};

}  // namespace

std::string check_race(const TableOptions& o) {
  if (o.key_bytes < 8 || o.key_bytes > kMaxKeyBytes) return "{key_bytes} must be in [8, 256] with {scheme} race";
  if (o.value_bytes > kMaxValueBytes) return "{value_bytes} must be at most 15360 with {scheme} race";
  if (o.memory_nodes > 64) return "{memory_nodes} must be at most 64 with {scheme} race";
  if (o.storage != Storage::kInline) return "{storage} applies to linear and cuckoo (race stores records out of place)";
  return {};
}

std::unique_ptr<SchemeTable> make_race(const TableOptions& o) { return std::make_unique<RaceTable>(o); }

}  // namespace rdmahash::scheme_impl
