// Cuckoo hashing's registry entry (rdmahash/scheme.h): the memory node's server (formats the
// hosted shards, serves inserts that relocate on its CPU) and the clients. Design: rdmahash/cuckoo.h.
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "rdmahash/cuckoo.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class CuckooTable final : public SchemeTable {
 public:
  explicit CuckooTable(const TableOptions& o) : seed_(o.seed) {
    cfg_ = CuckooConfig::for_records(o.records, o.load_factor, o.memory_nodes, o.slots_per_bucket);
    cfg_.key_bytes = o.key_bytes;
    cfg_.value_bytes = o.value_bytes;
    cfg_.storage = o.storage == Storage::kHeap ? CuckooStorage::kHeap : CuckooStorage::kInline;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0xC0C0ULL);
    cfg_.validate();
    probe_ = o.cuckoo_lookup == CuckooLookup::kSequential ? CuckooProbe::kSequential : CuckooProbe::kParallel;
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.slots_per_node() * cfg_.memory_nodes; }
  unsigned key_bits() const override { return cfg_.key_bytes == 4 ? 32 : 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  void load(Fabric& fabric, RecordSource& records) override {
    // The server formats the hosted shards and serves the clients' inserts (relocations need the
    // owner's CPU); it must outlive the run, so the table keeps it.
    server_ = std::make_unique<CuckooServer>(fabric, cfg_);
    load_all(*server_, cfg_.value_bytes, records);
  }

  Client make_client(Engine& engine, const ClientOptions& c) const override {
    require_fixed_read_size(c, "cuckoo");
    return {std::make_unique<CuckooClient>(cfg_, probe_, engine, hash::mix64(seed_ + 7)), cfg_.slots_per_bucket};
  }

  std::string describe() const override {
    return std::string("cuckoo/") + (cfg_.storage == CuckooStorage::kHeap ? "heap" : "inline") + " S=" +
           std::to_string(cfg_.slots_per_bucket) + (probe_ == CuckooProbe::kParallel ? " par" : " seq");
  }

 private:
  CuckooConfig cfg_;
  CuckooProbe probe_;
  uint64_t seed_;
  std::unique_ptr<CuckooServer> server_;
};

}  // namespace

std::string check_cuckoo(const TableOptions&) { return {}; }

std::unique_ptr<SchemeTable> make_cuckoo(const TableOptions& o) { return std::make_unique<CuckooTable>(o); }

}  // namespace rdmahash::scheme_impl
