// Level hashing's registry entry (rdmahash/scheme.h), seed 002's baseline: volatile, or on a
// --pm-path file exactly as continuity (pm_table.h). An existing image is validated
// (level_check_image: before the fabric sees it, so that a foreign, truncated or corrupt file is
// refused untouched) and recovered — recovery finishes an interrupted top-level resize and clears
// the duplicate copy of an interrupted movement — never bulk-loaded. The table has room for the
// resizes its capacity needs (level_resizes_for), so a small table grows while clients insert.
// Design: rdmahash/level.h.
#include <fstream>
#include <memory>
#include <string>

#include "common/hash.h"
#include "rdmahash/level.h"
#include "schemes/pm_table.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class LevelTable final : public SchemeTable {
 public:
  explicit LevelTable(const TableOptions& o) : pm_(o), die_loading_(o.die_loading) {
    cfg_ = LevelConfig::for_records(o.records, o.load_factor, o.memory_nodes, 1);
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x1E7EULL);
    cfg_.max_resizes = level_resizes_for(cfg_, o.capacity ? o.capacity : o.records + o.writes);
    // An existing image keeps the room for resizes it was made with (it depends on the first run's
    // ops and workloads, not only on the table options): read it from the header, whose frame
    // (checksum) is checked before any field of it is believed; level_check_image then validates
    // it whole. The data set is part of the image too (the records word): another record count is
    // refused, not a table missing keys.
    if (pm_.enabled()) {
      cfg_.records = o.records;
      LevelHeader h{};
      std::ifstream in(pm_.path(), std::ios::binary);
      if (in.read(reinterpret_cast<char*>(&h), sizeof h) && h.magic == kLevelMagic) {
        try {
          check_image_frame(&h, "level", kLevelMagic, kLevelFormatVersion);
        } catch (const PmemError& e) {
          throw pm_.refused(e);
        }
        cfg_.max_resizes = h.max_resizes;
      }
    }
    cfg_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  // Slots of the two levels in use at creation (a resize doubles the top level).
  uint64_t slots() const override { return 12 * cfg_.base_buckets * cfg_.memory_nodes; }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  std::span<std::byte> persistent_region() override {
    return pm_.region(
        cfg_.region_bytes(), [this](std::span<std::byte> bytes) { level_check_image(bytes, cfg_, 0); },
        "a truncated image");
  }

  void load(Fabric& fabric, RecordSource& records) override {
    const bool reload = server_ != nullptr;
    server_.reset();  // no client is running: the old server's handler is replaced below
    load_persistent_table(
        pm_, fabric, records, reload, {"level", kLevelMagic, kLevelAreaOffset, cfg_.region_bytes(), cfg_.memory_nodes},
        [this] { return persistent_region(); }, [&] { open_server(fabric); },
        [this]() -> std::optional<std::pair<uint64_t, std::string>> {
          if (!server_->recovered()) return std::nullopt;
          return std::pair<uint64_t, std::string>{server_->records(), " (level: " + server_->recovery_summary() + ")"};
        },
        [&] { bulk_load(*server_, cfg_.value_bytes, records, die_loading_); }, recovered_);
  }

  Client make_client(Engine& engine, const ClientOptions& c) const override {
    require_fixed_read_size(c, "level");
    return {std::make_unique<LevelClient>(cfg_, engine), 8};
  }
  std::string describe() const override {
    return "level N=" + std::to_string(cfg_.base_buckets) + " bucket=" + std::to_string(cfg_.bucket_bytes()) +
           "B resizes<=" + std::to_string(cfg_.max_resizes);
  }
  std::string persistence() const override { return to_string(pm_.mode()); }
  std::optional<uint64_t> recovered_records() const override { return recovered_; }

 private:
  void open_server(Fabric& fabric) {
    cfg_.format_unpublished = pm_.created();  // a new file: its magic after the bulk load
    try {
      server_ = std::make_unique<LevelServer>(fabric, cfg_, pm_.mode());
    } catch (const PmemError& e) {
      throw pm_.refused(e);
    }
  }

  LevelConfig cfg_;
  PmImage pm_;
  uint64_t die_loading_;  // tests only: TableOptions::die_loading
  std::unique_ptr<LevelServer> server_;
  std::optional<uint64_t> recovered_;  // records of the image recovered by the first load
};

}  // namespace

std::string check_level(const TableOptions& o) {
  if (o.storage != Storage::kInline) return "{storage} applies to linear and cuckoo (level stores records in its buckets)";
  return {};
}

std::unique_ptr<SchemeTable> make_level(const TableOptions& o) { return std::make_unique<LevelTable>(o); }

}  // namespace rdmahash::scheme_impl
