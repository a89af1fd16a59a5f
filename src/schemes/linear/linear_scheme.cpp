// Linear probing's registry entry (rdmahash/scheme.h): its option limits, its table on a memory
// node (shard loaders, the lock sweeper `serve` runs after a client died) and its clients (read
// size fixed, by the cost model, or with cluster hints). The design essay is rdmahash/linear.h.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/hash.h"
#include "rdmahash/linear.h"
#include "rdmahash/model.h"
#include "rdmahash/ucx_service.h"
#include "schemes/registry.h"

namespace rdmahash::scheme_impl {

namespace {

class LinearTable final : public SchemeTable {
 public:
  explicit LinearTable(const TableOptions& o) {
    cfg_ = LinearConfig::for_records(o.records, o.load_factor, o.memory_nodes);
    // Storage::kHeap|kHeap4: records out of band (seed 000 §4.1); records = key + value bytes.
    const bool heap = o.storage == Storage::kHeap || o.storage == Storage::kHeap4;
    const bool inline_fmt = !heap && (o.slot_format == SlotFormatChoice::kInline ||
                                      (o.slot_format == SlotFormatChoice::kAuto && (o.value_bytes > 0 || o.key_bytes == 4)));
    cfg_.format = o.storage == Storage::kHeap4 ? SlotFormat::kHeap4 : heap ? SlotFormat::kHeap
                : inline_fmt ? SlotFormat::kInline : SlotFormat::kSet;
    // heap4 buckets hold 4 records: the load factor is records / (4 · home buckets).
    if (cfg_.format == SlotFormat::kHeap4) cfg_.home_slots = std::max<uint64_t>(8, (cfg_.home_slots + 3) / 4);
    cfg_.key_bytes = o.key_bytes;
    cfg_.value_bytes = inline_fmt || heap ? o.value_bytes : 0;
    cfg_.tail_slots = o.tail_slots;
    // A heap holds the loaded records and what the points write (updates are out of place and never
    // reclaimed), not one record per slot: at load factor 0.5 and 1000-byte values that halves the
    // table. 5 % + 1024 records cover the imbalance of hashing records over the nodes.
    if (cfg_.format == SlotFormat::kHeap) {
      const double per_node = static_cast<double>(o.records + o.writes) / o.memory_nodes;
      cfg_.heap_records = static_cast<uint64_t>(per_node * 1.05) + 1024;
    }
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x7AB1E5EEDULL);
    cfg_.chunk_order = o.chunk_order;
    cfg_.chunk = o.chunk;  // kQuadratic: the chunks of the table's probe sequence (linear.h, ChunkOrder)
    cfg_.validate();
    probe_.chunk = o.chunk;
    probe_.max_chunks = o.max_chunks;
    probe_.speculative_claim = o.speculative_claim;
    probe_.die_holding_lock = o.die_holding_lock;
    probe_.validate();
    cost_params_ = o.cost_params ? *o.cost_params : model::paper_cost_params(cfg_.slot_bytes());
    cost_params_.slot_bytes = cfg_.slot_bytes();
    throughput_cost_params_ = o.throughput_cost_params;
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.home_slots * cfg_.memory_nodes * (cfg_.format == SlotFormat::kHeap4 ? 4 : 1); }
  unsigned key_bits() const override {
    return cfg_.format == SlotFormat::kSet ? 63 : cfg_.key_bytes * 8;
  }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  std::unique_ptr<ClientLossHandler> loss_handler(Fabric& fabric) const override {
    if (cfg_.format != SlotFormat::kInline) return nullptr;  // set and heap: single CASes, nothing held
    struct Handler final : ClientLossHandler {
      Handler(Fabric& f, const LinearConfig& c) : sweeper(f, c) {}
      void mark(uint32_t) override { sweeper.mark(); }
      std::string repair() override {
        const LinearLockRepair r = sweeper.repair();
        if (r.marked == 0) return "lock recovery: no locked slot";
        return "lock recovery: " + std::to_string(r.marked) + " locked slot(s) marked, " + std::to_string(r.forward) +
               " rolled forward, " + std::to_string(r.back) + " rolled back, " + std::to_string(r.torn) +
               " torn (key lost)";
      }
      LinearLockSweeper sweeper;
    };
    return std::make_unique<Handler>(fabric, cfg_);
  }
  void load(Fabric& fabric, RecordSource& records) override {
    std::vector<std::unique_ptr<LinearShardLoader>> loaders(cfg_.memory_nodes);
    for (uint32_t n = 0; n < cfg_.memory_nodes; ++n)
      if (auto region = fabric.local_region(n); !region.empty())
        loaders[n] = std::make_unique<LinearShardLoader>(cfg_, n, region);
    std::vector<std::byte> value(cfg_.value_bytes);
    const uint64_t count = records.count();
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t k = records.next();
      if (auto& l = loaders[linear_place(cfg_, k).node]) {
        records.fill(k, value);
        l->insert(k, value);
      }
      if ((i & 0xFFFF) == 0 && records.progress) records.progress(i);
    }
    if (records.progress) records.progress(count);
  }

  Client make_client(Engine& engine, const ClientOptions& c) const override {
    const ReadSizeSpec& spec = c.read_size;
    ProbeConfig p = probe_;
    if (c.chunk) {  // a point of a --chunk sweep: the client's own chunk size (the table is the same)
      if (cfg_.quadratic() && c.chunk != cfg_.chunk)
        throw InvalidArgument("--chunk-order quadratic: the table's chunks are " + std::to_string(cfg_.chunk) +
                              " slots, a client cannot probe chunks of " + std::to_string(c.chunk));
      p.chunk = c.chunk;
      p.validate();
    }
    if (spec.kind == ReadSizeSpec::Kind::kFixed) {
      p.read_size = spec.slots;
      // Quadratic tables read whole chunks in lookups too (linear.h, ChunkOrder): that is the read size.
      return {std::make_unique<LinearClient>(cfg_, p, engine), cfg_.quadratic() ? cfg_.chunk : p.read_size};
    }
    if (cfg_.quadratic())
      throw InvalidArgument("--read-size " + spec.text() + ": the read-size model and cluster hints assume contiguous "
                            "probing; quadratic tables read whole chunks (use a fixed read size)");
    if (cfg_.format == SlotFormat::kHeap4)
      throw InvalidArgument("--read-size " + spec.text() + ": the read-size model assumes one record per slot; "
                            "use a fixed read size with --storage heap4");
    // Model sizes: the load factor comes from the table's metadata (or the assumed load factor).
    const ShardHeader h = engine.run(LinearClient(cfg_, p, engine).read_header(0));
    const uint64_t m = h.home_slots;
    uint64_t n = h.records;
    if (c.assumed_load_factor > 0) n = static_cast<uint64_t>(c.assumed_load_factor * static_cast<double>(m));
    n = std::min<uint64_t>(n, m - 1);
    if (!(c.present_fraction >= 0 && c.present_fraction <= 1))
      throw InvalidArgument("the read-size model's present fraction must be in [0, 1]");
    // Cluster hints condition seed 000's first-empty distribution (Eq. 10): cluster prices scans,
    // its R* and its hints from the one distribution.
    const bool cluster = spec.kind == ReadSizeSpec::Kind::kCluster;
    const auto first_empty = cluster ? std::make_shared<const model::FirstEmptyDistribution>(m, n) : nullptr;
    const std::shared_ptr<const model::OffsetDistribution> stops =
        cluster ? std::shared_ptr<const model::OffsetDistribution>(first_empty)
                : lookup_distribution(m, n, c.present_fraction);
    model::CostParams params = cost_params_;
    if (spec.kind == ReadSizeSpec::Kind::kModelThroughput) {
      if (!throughput_cost_params_)
        throw InvalidArgument("--read-size model-throughput needs --profile FILE from `rdmahash calibrate` "
                              "(the throughput test: time per READ at depth vs size)");
      params = *throughput_cost_params_;
    }
    params.slot_bytes = cfg_.slot_bytes();
    const bool constrained = spec.kind != ReadSizeSpec::Kind::kModelUnconstrained;
    p.read_size = static_cast<uint32_t>(model::optimal_read_size(*stops, params, constrained).read_size);
    if (cluster) {
      p.read_sizer = std::make_shared<ClusterReadSizer>(
          p.read_size, c.clusters, [dist = first_empty, params, r = p.read_size](uint64_t x, uint64_t len) {
            // Reading past the cluster's end by more than R* cannot pay off: bound the search.
            return static_cast<uint32_t>(
                model::optimal_read_size_with_cluster(*dist, params, true, x, len, x + len + 1 + r).read_size);
          });
    }
    return {std::make_unique<LinearClient>(cfg_, p, engine), p.read_size};
  }

  std::string describe() const override {
    return std::string("linear/") + to_string(cfg_.format) + " slot=" + std::to_string(cfg_.slot_bytes()) + "B" +
           (cfg_.quadratic() ? " chunks=quadratic/" + std::to_string(cfg_.chunk) : std::string());
  }

 private:
  // The model's distribution for (M, N, f), built once per table and process: near load 1 it costs
  // ~100 first-empty distributions (0.7 s at load 0.99 of 2^23 slots), and every client of every
  // point asks for it.
  std::shared_ptr<const model::LookupDistribution> lookup_distribution(uint64_t m, uint64_t n, double f) const {
    std::lock_guard<std::mutex> lock(model_mu_);
    auto& d = model_cache_[{m, n, f}];
    if (!d) d = std::make_shared<const model::LookupDistribution>(m, n, f);
    return d;
  }

  LinearConfig cfg_;
  ProbeConfig probe_;
  mutable std::mutex model_mu_;
  mutable std::map<std::tuple<uint64_t, uint64_t, double>, std::shared_ptr<const model::LookupDistribution>> model_cache_;
  model::CostParams cost_params_;
  std::optional<model::CostParams> throughput_cost_params_;
};

}  // namespace

std::string check_linear(const TableOptions& o) {
  if (o.storage != Storage::kInline && o.slot_format == SlotFormatChoice::kSet)
    return std::string("{slot_format} set holds keys in the slots: it cannot be combined with {storage} ") +
           to_string(o.storage);
  if (o.chunk_order == ChunkOrder::kQuadratic && o.storage != Storage::kInline)
    return std::string("{chunk_order} quadratic applies to set and inline slots, not {storage} ") + to_string(o.storage);
  return {};
}

std::unique_ptr<SchemeTable> make_linear(const TableOptions& o) { return std::make_unique<LinearTable>(o); }

}  // namespace rdmahash::scheme_impl
