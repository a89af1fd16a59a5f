// Hopscotch hashing's registry entry (rdmahash/scheme.h): the memory node's server (formats the
// hosted shards, serves writes that displace on its CPU) and the clients. Design: rdmahash/hopscotch.h.
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "rdmahash/hopscotch.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class HopscotchTable final : public SchemeTable {
 public:
  explicit HopscotchTable(const TableOptions& o) {
    cfg_ = HopscotchConfig::for_records(o.records, o.load_factor, o.memory_nodes, o.neighborhood);
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x4805ULL);
    cfg_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.home_slots_per_node * cfg_.memory_nodes; }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  void load(Fabric& fabric, RecordSource& records) override {
    server_ = std::make_unique<HopscotchServer>(fabric, cfg_);
    load_all(*server_, cfg_.value_bytes, records);
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

 private:
  HopscotchConfig cfg_;
  std::unique_ptr<HopscotchServer> server_;
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
