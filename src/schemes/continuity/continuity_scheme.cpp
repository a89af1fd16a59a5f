// Continuity hashing's registry entry (rdmahash/scheme.h): the memory node's server (volatile, or
// on a --pm-path file: pm_table.h), online resizes, the clients. Design: rdmahash/continuity.h.
#include <algorithm>
#include <memory>
#include <string>

#include "common/hash.h"
#include "rdmahash/continuity.h"
#include "schemes/pm_table.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class ContinuityTable final : public SchemeTable {
 public:
  explicit ContinuityTable(const TableOptions& o) : pm_(o), die_loading_(o.die_loading) {
    cfg_ = ContinuityConfig::for_records(o.records, o.load_factor, o.memory_nodes, o.sbuckets);
    // max_resizes N: the table of the last level is the one records/load_factor ask for; it
    // starts 2^N times smaller (at least one pair) and doubles online when a segment is full.
    cfg_.max_resizes = o.max_resizes;
    cfg_.added_group_pairs = o.added_sbucket_pairs;
    cfg_.migrate_pairs_per_write = o.resize_pace;
    // A resize also advances while no write arrives, unless resize_pace 0 asks for a resize that
    // moves only with the written keys' pairs (tests: kills and histories mid-migration).
    cfg_.background_migration = o.resize_pace > 0;
    cfg_.buckets_per_node = std::max<uint64_t>(2, (cfg_.buckets_per_node >> o.max_resizes) & ~uint64_t{1});
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0xC047ULL);
    if (pm_.enabled()) cfg_.records = o.records;  // the records word: another --records is refused
    cfg_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.slots_at(cfg_.max_resizes) * cfg_.memory_nodes; }
  // Slots of the newest table of every shard hosted here (all of them, or 0: cannot tell).
  uint64_t slots_in(Fabric&) const override {
    if (!hosts_all()) return 0;
    uint64_t n = 0;
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i) n += server_->shard(i).capacity();
    return n;
  }
  std::optional<uint64_t> table_resizes() const override {
    if (!hosts_all()) return std::nullopt;
    uint64_t levels = 0;  // levels reached (a recovered image's resizes included)
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i)
      levels += server_->shard(i).level() + (server_->shard(i).resizing() ? 1 : 0);
    return levels;
  }
  std::optional<bool> table_resizing() const override {
    if (!hosts_all()) return std::nullopt;
    bool any = false;
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i) any = any || server_->shard(i).resizing();
    return any;
  }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  std::span<std::byte> persistent_region() override {
    return pm_.region(
        cfg_.region_bytes(),
        [](std::span<std::byte> bytes) {
          if (bytes.size() < kContinuityHeaderBytes)
            throw PmemError("the file has " + std::to_string(bytes.size()) +
                            " bytes, less than a continuity header (not a table image)");
          check_image_frame(bytes.data(), "continuity", kContinuityMagic, kContinuityFormatVersion);
        },
        "another geometry or a truncated image");
  }

  void load(Fabric& fabric, RecordSource& records) override {
    const bool reload = server_ != nullptr;
    server_.reset();  // no client is running: the old server's handler is replaced below
    load_persistent_table(
        pm_, fabric, records, reload,
        {"continuity", kContinuityMagic, kContinuityHeaderBytes, cfg_.region_bytes(), cfg_.memory_nodes},
        [this] { return persistent_region(); }, [&] { open_server(fabric); },
        [this]() -> std::optional<std::pair<uint64_t, std::string>> {
          if (!server_->recovered()) return std::nullopt;  // an existing image: validated and scanned
          return std::pair<uint64_t, std::string>{server_->records(), ""};
        },
        [&] {
          bulk_load(*server_, cfg_.value_bytes, records, die_loading_);
          // A bulk load that grew the table leaves no resize half done: the run starts settled
          // (clients learn the level with one extra READ per node; writes of the run grow it online).
          for (uint32_t n = 0; n < cfg_.memory_nodes; ++n)
            if (server_->hosts(n)) server_->shard(n).finish_resize();
        },
        recovered_);
  }

  Client make_client(Engine& engine, const ClientOptions& c) const override {
    require_fixed_read_size(c, "continuity");
    return {std::make_unique<ContinuityClient>(cfg_, engine), 4 + 4 * cfg_.sbuckets};
  }

  std::string describe() const override {
    return "continuity sb=" + std::to_string(cfg_.sbuckets) + " seg=" + std::to_string(cfg_.segment_bytes()) + "B" +
           (cfg_.max_resizes ? " N0=" + std::to_string(cfg_.buckets_per_node) + " max_resizes=" +
                                   std::to_string(cfg_.max_resizes)
                             : "") +
           (cfg_.added_group_pairs ? " added=1/" + std::to_string(cfg_.added_group_pairs) : "");
  }
  ReportFields report_options() const override {
    return {{"max_resizes", uint64_t{cfg_.max_resizes}},
            {"added_sbuckets", cfg_.added_group_pairs ? "1/" + std::to_string(cfg_.added_group_pairs) : std::string("0")}};
  }
  std::string persistence() const override { return to_string(pm_.mode()); }
  std::optional<uint64_t> recovered_records() const override { return recovered_; }

 private:
  bool hosts_all() const {
    if (!server_) return false;
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i)
      if (!server_->hosts(i)) return false;
    return true;
  }
  void open_server(Fabric& fabric) {
    cfg_.format_unpublished = pm_.created();  // a new file: its magic after the bulk load
    try {
      server_ = std::make_unique<ContinuityServer>(fabric, cfg_, pm_.mode());
    } catch (const PmemError& e) {
      throw pm_.refused(e);
    }
  }

  ContinuityConfig cfg_;
  PmImage pm_;
  uint64_t die_loading_;  // tests only: TableOptions::die_loading
  std::unique_ptr<ContinuityServer> server_;
  std::optional<uint64_t> recovered_;  // records of the image recovered by the first load
};

}  // namespace

std::string check_continuity(const TableOptions& o) {
  if (o.storage != Storage::kInline) return "{storage} applies to linear and cuckoo (continuity stores records in its buckets)";
  return {};
}

std::unique_ptr<SchemeTable> make_continuity(const TableOptions& o) { return std::make_unique<ContinuityTable>(o); }

}  // namespace rdmahash::scheme_impl
