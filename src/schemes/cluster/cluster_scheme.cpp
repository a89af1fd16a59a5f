// Cluster hashing's registry entry (rdmahash/scheme.h): the memory node's server (formats the
// hosted shards, serves writes on its CPU) and the clients. Design: rdmahash/cluster.h.
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "rdmahash/cluster.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class ClusterTable final : public SchemeTable {
 public:
  explicit ClusterTable(const TableOptions& o) {
    cfg_ = ClusterConfig::for_records(o.records, o.load_factor, o.memory_nodes);
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0xC105ULL);
    cfg_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.entries_per_node * cfg_.memory_nodes; }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  void load(Fabric& fabric, RecordSource& records) override {
    server_ = std::make_unique<ClusterServer>(fabric, cfg_);
    load_all(*server_, cfg_.value_bytes, records);
  }

  Client make_client(Engine& engine, const ClientOptions& c) const override {
    require_fixed_read_size(c, "cluster");
    ClusterConfig cc = cfg_;
    cc.location_cache = c.location_cache;  // client side: validated by ClusterClient
    return {std::make_unique<ClusterClient>(cc, engine), kClusterSlotsPerBucket};
  }

  std::string describe() const override {
    return "cluster M=" + std::to_string(cfg_.main_buckets_per_node) + " P=" + std::to_string(cfg_.pool_buckets_per_node);
  }
  ReportFields report_options() const override {
    return {{"main_buckets", cfg_.main_buckets_per_node}, {"pool_buckets", cfg_.pool_buckets_per_node}};
  }

 private:
  ClusterConfig cfg_;
  std::unique_ptr<ClusterServer> server_;
};

}  // namespace

std::string check_cluster(const TableOptions& o) {
  // The entries are out of place already (header slots point at them): there is no other storage.
  if (o.storage != Storage::kInline) return "{storage} applies to other schemes: {scheme} cluster keeps its entries out of place, values inline in them";
  if (o.records / o.memory_nodes / o.load_factor > 0x1p32)
    return "{load_factor} is too small for {records}: cluster shards hold at most 2^32 entries";
  return {};
}

std::unique_ptr<SchemeTable> make_cluster(const TableOptions& o) { return std::make_unique<ClusterTable>(o); }

}  // namespace rdmahash::scheme_impl
