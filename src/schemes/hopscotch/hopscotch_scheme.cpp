// Hopscotch hashing's registry entry (rdmahash/scheme.h): the memory node's server (formats the
// hosted shards, serves writes that displace on its CPU) and the clients. Volatile, or on a
// --pm-path file exactly as continuity and level (pm_table.h): P-FaRM-KV, seed 002's third scheme.
// An existing image is validated (hopscotch_check_image: before the fabric sees it, so that a
// foreign, truncated or corrupt file is refused untouched) and recovered — the redo log redone or
// dropped, records of unlinked blocks cleared — never bulk-loaded. Design: rdmahash/hopscotch.h.
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "rdmahash/hopscotch.h"
#include "schemes/pm_table.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class HopscotchTable final : public SchemeTable {
 public:
  explicit HopscotchTable(const TableOptions& o) : pm_(o), die_loading_(o.die_loading) {
    cfg_ = HopscotchConfig::for_records(o.records, o.load_factor, o.memory_nodes, o.neighborhood);
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x4805ULL);
    cfg_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.home_slots_per_node * cfg_.memory_nodes; }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  std::span<std::byte> persistent_region() override {
    return pm_.region(
        cfg_.region_bytes(), [this](std::span<std::byte> bytes) { hopscotch_check_image(bytes, cfg_, 0); },
        "a truncated image");
  }

  void load(Fabric& fabric, RecordSource& records) override {
    if (!pm_.enabled()) {
      server_ = std::make_unique<HopscotchServer>(fabric, cfg_);
      load_all(*server_, cfg_.value_bytes, records);
      return;
    }
    const bool reload = server_ != nullptr;
    server_.reset();  // no client is running: the old server's handler is replaced below
    load_persistent_table(
        pm_, fabric, records, reload,
        {"hopscotch", kHopscotchMagic, kHopscotchSlotsOffset, cfg_.region_bytes(), cfg_.memory_nodes},
        [this] { return persistent_region(); }, [&] { open_server(fabric); },
        [this]() -> std::optional<std::pair<uint64_t, std::string>> {
          if (!server_->recovered()) return std::nullopt;
          return std::pair<uint64_t, std::string>{server_->records(), " (hopscotch: " + server_->recovery_summary() + ")"};
        },
        [&] { bulk_load(*server_, cfg_.value_bytes, records, die_loading_); }, recovered_);
  }

  Client make_client(Engine& engine, const ClientOptions& c) const override {
    require_fixed_read_size(c, "hopscotch");
    return {std::make_unique<HopscotchClient>(cfg_, engine), cfg_.neighborhood};
  }

  std::string describe() const override { return "hopscotch H=" + std::to_string(cfg_.neighborhood); }
  ReportFields report_options() const override {
    return {{"neighborhood", uint64_t{cfg_.neighborhood}},
            {"overflow_blocks", cfg_.overflow_blocks()},
            {"block_records", uint64_t{cfg_.block_records}}};
  }
  std::string persistence() const override { return pm_.enabled() ? to_string(pm_.mode()) : std::string(); }
  std::optional<uint64_t> recovered_records() const override { return recovered_; }

 private:
  void open_server(Fabric& fabric) {
    cfg_.format_unpublished = pm_.created();  // a new file: its magic after the bulk load
    try {
      server_ = std::make_unique<HopscotchServer>(fabric, cfg_, pm_.mode());
    } catch (const PmemError& e) {
      throw pm_.refused(e);
    }
  }

  HopscotchConfig cfg_;
  PmImage pm_;
  uint64_t die_loading_;  // tests only: TableOptions::die_loading
  std::unique_ptr<HopscotchServer> server_;
  std::optional<uint64_t> recovered_;  // records of the image recovered by the first load
};

}  // namespace

std::string check_hopscotch(const TableOptions& o) {
  if (o.neighborhood < 2 || o.neighborhood > 64) return "{neighborhood} must be in [2, 64]";
  if (o.records / o.memory_nodes / o.load_factor > 0x1p32)
    return "{load_factor} is too small for {records}: hopscotch shards hold at most 2^32 home slots";
  return {};
}

std::unique_ptr<SchemeTable> make_hopscotch(const TableOptions& o) { return std::make_unique<HopscotchTable>(o); }

}  // namespace rdmahash::scheme_impl
