#include "bench/workload.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "bench/ycsb.h"
#include "rdmahash/continuity.h"
#include "rdmahash/level.h"
#include "rdmahash/cuckoo.h"
#include "rdmahash/pmem.h"
#include "rdmahash/race.h"
#include "rdmahash/model.h"
#include "common/hash.h"

namespace rdmahash::bench {

KeySpace::KeySpace(uint64_t records, unsigned bits, uint64_t seed, double zipf_theta)
    : records_(records), bits_(bits), seed_(seed), theta_(zipf_theta) {
  uint64_t s = seed_;
  for (int r = 0; r < 3; ++r) {
    rounds_[r] = s = hash::mix64(s + 0x9E3779B97F4A7C15ULL);
    odd_[r] = (s << 1) | 1;
  }
  mask_ = bits_ >= 64 ? ~0ULL : (1ULL << bits_) - 1;
  shift_ = bits_ / 2 + 1;
}

uint64_t KeySpace::key(uint64_t i) const {
  // Each step is a bijection on [0, 2^bits): add, xor-shift, multiply by an odd constant. The
  // constants depend on the seed and the bits only (computed once: key() runs for every operation).
  uint64_t x = i & mask_;
  for (int r = 0; r < 3; ++r) {
    x = (x + rounds_[r]) & mask_;
    x ^= x >> shift_;
    x = (x * odd_[r]) & mask_;
  }
  return x;
}

void fill_value(uint64_t key, std::span<std::byte> out) {
  uint64_t s = key;
  for (size_t i = 0; i < out.size(); i += 8) {
    s = hash::mix64(s + 0x2545F4914F6CDD1DULL);
    std::memcpy(out.data() + i, &s, std::min<size_t>(8, out.size() - i));
  }
}

bool value_matches(uint64_t key, std::span<const std::byte> value) {
  uint64_t s = key;
  for (size_t i = 0; i < value.size(); i += 8) {
    s = hash::mix64(s + 0x2545F4914F6CDD1DULL);
    if (value.size() - i >= 8) {
      uint64_t w;
      std::memcpy(&w, value.data() + i, 8);
      if (w != s) return false;
    } else if (std::memcmp(value.data() + i, &s, value.size() - i) != 0) {
      return false;
    }
  }
  return true;
}

struct RecordStream::Zipf {
  ycsb::Rng rng;
  ycsb::ZipfianGenerator gen;
};

RecordStream::RecordStream(const KeySpace& keys) : keys_(keys) {
  if (keys.zipf_theta() > 0)
    zipf_.reset(new Zipf{ycsb::Rng(hash::mix64(keys.seed() ^ 0x2F1A7E11ULL)),
                         ycsb::ZipfianGenerator(0, keys.records() - 1, keys.zipf_theta())});
}
RecordStream::~RecordStream() = default;

uint64_t RecordStream::next() {
  const uint64_t i = i_++;
  return keys_.key(zipf_ ? zipf_->gen.next(zipf_->rng) : i);
}

struct OpStream::Zipf {
  ycsb::Rng rng;
  ycsb::ZipfianGenerator gen;
};
OpStream::~OpStream() = default;

OpStream::OpStream(const BenchOptions& o, Workload w, const KeySpace& keys, uint32_t client, uint32_t clients,
                   uint64_t insert_point)
    : w_(w), keys_(keys) {
  const uint32_t stream = o.same_keys ? 0 : client;
  state_ = hash::mix64(o.seed * 0x100000001B3ULL + stream + 1);
  // New keys of different clients never collide unless --same-keys asks them to, and no insert
  // point re-uses the new keys of an earlier one (they would be found, not inserted).
  next_new_ = keys.records() + (insert_point * clients + stream) * (o.ops + 1);
  if (keys.zipf_theta() > 0)
    zipf_.reset(new Zipf{ycsb::Rng(hash::mix64(state_ ^ 0x51ED2701ULL)),
                         ycsb::ZipfianGenerator(0, keys.records() - 1, keys.zipf_theta())});
  insert_fraction_ = w == Workload::kMixed ? 0.5 : w == Workload::kReadIntensive ? 0.2
                   : w == Workload::kWriteIntensive ? 0.8 : w == Workload::kFindOrPut ? 1.0 : 0.0;
}

uint64_t OpStream::rng() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return hash::mix64(state_);
}

uint64_t OpStream::present_index() {
  return zipf_ ? zipf_->gen.next(zipf_->rng) : hash::range(rng(), keys_.records());
}

Op OpStream::next() {
  switch (w_) {
    case Workload::kRawRead: return Op{OpKind::kRawRead, rng()};
    case Workload::kGet: return Op{OpKind::kGet, keys_.key(present_index())};
    case Workload::kGetAll: return Op{OpKind::kGetAll, keys_.key(present_index())};
    default: break;
  }
  const bool insert = static_cast<double>(rng() >> 11) * 0x1.0p-53 < insert_fraction_;
  if (insert) return Op{OpKind::kFindOrPut, keys_.key(next_new_++)};
  return Op{OpKind::kFindOrPut, keys_.key(hash::range(rng(), keys_.records()))};
}

namespace {

class LinearAdapter final : public SchemeAdapter {
 public:
  LinearAdapter(const BenchOptions& o, double load_factor) {
    cfg_ = LinearConfig::for_records(o.records, load_factor, o.memory_nodes);
    // --storage heap|heap4: records out of band (seed 000 §4.1); records = key + value bytes.
    const bool heap = o.storage == "heap" || o.storage == "heap4";
    if (heap && o.slot_format == "set")
      throw InvalidArgument("--slot-format set holds keys in the slots: it cannot be combined with --storage " + o.storage);
    const bool inline_fmt = !heap && (o.slot_format == "inline" || (o.slot_format == "auto" && (o.value_bytes > 0 || o.key_bytes == 4)));
    cfg_.format = o.storage == "heap4" ? SlotFormat::kHeap4 : heap ? SlotFormat::kHeap
                : inline_fmt ? SlotFormat::kInline : SlotFormat::kSet;
    if (o.storage == "heap4")
      for (Workload w : o.workloads)
        if (w != Workload::kGet && w != Workload::kGetAll && w != Workload::kRawRead)
          throw InvalidArgument(std::string("--storage heap4 tables are bulk-loaded (read-only): workload ") +
                                to_string(w) + " writes; use get, get-all or raw-read");
    // heap4 buckets hold 4 records: the load factor is records / (4 · home buckets).
    if (cfg_.format == SlotFormat::kHeap4) cfg_.home_slots = std::max<uint64_t>(8, (cfg_.home_slots + 3) / 4);
    cfg_.key_bytes = o.key_bytes;
    cfg_.value_bytes = inline_fmt || heap ? o.value_bytes : 0;
    cfg_.tail_slots = o.tail_slots;
    // A heap holds the loaded records and what the points write (updates are out of place and never
    // reclaimed), not one record per slot: at load factor 0.5 and 1000-byte values that halves the
    // table. 5 % + 1024 records cover the imbalance of hashing records over the nodes.
    if (cfg_.format == SlotFormat::kHeap) {
      const double per_node = static_cast<double>(o.records + o.table_writes) / o.memory_nodes;
      cfg_.heap_records = static_cast<uint64_t>(per_node * 1.05) + 1024;
    }
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x7AB1E5EEDULL);
    cfg_.validate();
    probe_.chunk = o.chunk;
    probe_.max_chunks = o.max_chunks;
    probe_.speculative_claim = *parse_speculative_claim(o.speculative_claim);
    probe_.die_holding_lock = o.die_holding_lock;
    probe_.validate();
    cost_params_ = o.cost_params ? *o.cost_params : model::paper_cost_params(cfg_.slot_bytes());
    cost_params_.slot_bytes = cfg_.slot_bytes();
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
  void load(Fabric& fabric, const KeySpace& keys, const std::function<void(uint64_t)>& progress) override {
    std::vector<std::unique_ptr<LinearShardLoader>> loaders(cfg_.memory_nodes);
    for (uint32_t n = 0; n < cfg_.memory_nodes; ++n)
      if (auto region = fabric.local_region(n); !region.empty())
        loaders[n] = std::make_unique<LinearShardLoader>(cfg_, n, region);
    std::vector<std::byte> value(cfg_.value_bytes);
    RecordStream records(keys);
    for (uint64_t i = 0; i < keys.records(); ++i) {
      const uint64_t k = records.next();
      if (auto& l = loaders[linear_place(cfg_, k).node]) {
        fill_value(k, value);
        l->insert(k, value);
      }
      if ((i & 0xFFFF) == 0 && progress) progress(i);
    }
    if (progress) progress(keys.records());
  }

  ClientSetup make_client(Engine& engine, const ReadSizeSpec& spec, const BenchOptions& o) const override {
    ProbeConfig p = probe_;
    if (spec.kind == ReadSizeSpec::Kind::kFixed) {
      p.read_size = spec.slots;
      return {std::make_unique<LinearClient>(cfg_, p, engine), p.read_size};
    }
    if (cfg_.format == SlotFormat::kHeap4)
      throw InvalidArgument("--read-size " + spec.text() + ": the read-size model assumes one record per slot; "
                            "use a fixed read size with --storage heap4");
    // Model sizes: the load factor comes from the table's metadata (or --assumed-load-factor).
    const ShardHeader h = engine.run(LinearClient(cfg_, p, engine).read_header(0));
    const uint64_t m = h.home_slots;
    uint64_t n = h.records;
    if (o.assumed_load_factor > 0) n = static_cast<uint64_t>(o.assumed_load_factor * static_cast<double>(m));
    n = std::min<uint64_t>(n, m - 1);
    auto dist = std::make_shared<model::FirstEmptyDistribution>(m, n);
    model::CostParams params = cost_params_;
    params.slot_bytes = cfg_.slot_bytes();
    const bool constrained = spec.kind != ReadSizeSpec::Kind::kModelUnconstrained;
    p.read_size = static_cast<uint32_t>(model::optimal_read_size(*dist, params, constrained).read_size);
    if (spec.kind == ReadSizeSpec::Kind::kCluster) {
      p.read_sizer = std::make_shared<ClusterReadSizer>(
          p.read_size, o.clusters, [dist, params, r = p.read_size](uint64_t x, uint64_t len) {
            // Reading past the cluster's end by more than R* cannot pay off: bound the search.
            return static_cast<uint32_t>(
                model::optimal_read_size_with_cluster(*dist, params, true, x, len, x + len + 1 + r).read_size);
          });
    }
    return {std::make_unique<LinearClient>(cfg_, p, engine), p.read_size};
  }

  std::string describe() const override {
    return std::string("linear/") + to_string(cfg_.format) + " slot=" + std::to_string(cfg_.slot_bytes()) + "B";
  }

  const LinearConfig& config() const { return cfg_; }

 private:
  LinearConfig cfg_;
  ProbeConfig probe_;
  model::CostParams cost_params_;
};

class CuckooAdapter final : public SchemeAdapter {
 public:
  CuckooAdapter(const BenchOptions& o, double load_factor) {
    cfg_ = CuckooConfig::for_records(o.records, load_factor, o.memory_nodes, o.slots_per_bucket);
    cfg_.key_bytes = o.key_bytes;
    cfg_.value_bytes = o.value_bytes;
    cfg_.storage = o.storage == "heap" ? CuckooStorage::kHeap : CuckooStorage::kInline;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0xC0C0ULL);
    cfg_.validate();
    probe_ = o.cuckoo_probe == "sequential" ? CuckooProbe::kSequential : CuckooProbe::kParallel;
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.slots_per_node() * cfg_.memory_nodes; }
  unsigned key_bits() const override { return cfg_.key_bytes == 4 ? 32 : 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  void load(Fabric& fabric, const KeySpace& keys, const std::function<void(uint64_t)>& progress) override {
    // The server formats the hosted shards and serves the clients' inserts (relocations need the
    // owner's CPU); it must outlive the run, so the adapter keeps it.
    server_ = std::make_unique<CuckooServer>(fabric, cfg_);
    std::vector<std::byte> value(cfg_.value_bytes);
    RecordStream records(keys);
    for (uint64_t i = 0; i < keys.records(); ++i) {
      const uint64_t k = records.next();
      fill_value(k, value);
      server_->bulk_insert(k, value);  // false when the key's shard lives elsewhere
      if ((i & 0xFFFF) == 0 && progress) progress(i);
    }
    if (progress) progress(keys.records());
  }

  ClientSetup make_client(Engine& engine, const ReadSizeSpec& spec, const BenchOptions& o) const override {
    if (spec.kind != ReadSizeSpec::Kind::kFixed)
      throw InvalidArgument("--read-size " + spec.text() + " applies to linear probing, not to --scheme cuckoo");
    return {std::make_unique<CuckooClient>(cfg_, probe_, engine, hash::mix64(o.seed + 7)), cfg_.slots_per_bucket};
  }

  std::string describe() const override {
    return std::string("cuckoo/") + (cfg_.storage == CuckooStorage::kHeap ? "heap" : "inline") + " S=" +
           std::to_string(cfg_.slots_per_bucket) + (probe_ == CuckooProbe::kParallel ? " par" : " seq");
  }

 private:
  CuckooConfig cfg_;
  CuckooProbe probe_;
  std::unique_ptr<CuckooServer> server_;
};

// RACE: byte-string blocks out of place; the bench's uint64 keys become key_bytes-byte keys (the
// 8 key bytes plus a fixed suffix). The table starts with 2^initial_depth subtables and grows.
class RaceAdapter final : public SchemeAdapter {
 public:
  RaceAdapter(const BenchOptions& o, double) : value_bytes_(o.value_bytes) {
    cfg_.memory_nodes = o.memory_nodes;
    cfg_.groups_per_subtable = o.race_groups;
    cfg_.initial_depth = o.initial_depth;
    cfg_.key_bytes = o.key_bytes;
    cfg_.dir_cache = o.race_dir_cache == "on";
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x5ACE5ACEULL);
    // Records the run may hold: the loaded ones plus every insert the workloads may make.
    bool inserts = !o.ycsb_path.empty();
    for (Workload w : o.workloads)
      if (w != Workload::kGet && w != Workload::kGetAll && w != Workload::kRawRead) inserts = true;
    capacity_ = o.table_capacity ? o.table_capacity  // a served table: what `rdmahash serve --capacity` says
                                 : o.records + (inserts ? o.ops * std::max<uint32_t>(o.clients, 8) * o.repeat : 0);
    // Directory deep enough for subtables at a quarter load, at least initial_depth + 4.
    const double subtables = static_cast<double>(capacity_) / (0.25 * kRaceSlots * 3 * cfg_.groups_per_subtable);
    uint32_t depth = cfg_.initial_depth + 6;
    while (depth < 22 && static_cast<double>(uint64_t{1} << depth) < 4 * subtables) ++depth;
    cfg_.max_depth = depth;
    cfg_.chunk_bytes = 1 << 20;
    cfg_.test_die_at_step = o.die_holding_lock;  // tests only: die at the Nth split step
    cfg_.validate();
  }
  uint64_t region_bytes() const override {
    return cfg_.region_bytes_for(capacity_, value_bytes_, 16);
  }
  uint64_t slots() const override { return 0; }  // the table grows: no fixed slot count
  uint64_t slots_in(Fabric& fabric) const override {
    return fabric.local_region(0).empty() ? 0 : race_slot_count(fabric, cfg_);
  }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return value_bytes_; }

  void load(Fabric& fabric, const KeySpace& keys, const std::function<void(uint64_t)>& progress) override {
    RaceServer server(fabric, cfg_);  // formats the hosted nodes, registers the allocator
    if (keys.records() == 0 || fabric.local_region(0).empty()) return;
    RaceLoader loader(fabric, cfg_);  // InvalidArgument unless every node is hosted here
    RecordStream records(keys);
    std::vector<std::byte> value(value_bytes_);
    uint64_t failed = 0;
    loader.engine().run_many(
        keys.records(), 32,
        [&](uint64_t) -> Task<void> {
          const uint64_t k = records.next();
          std::vector<std::byte> v(value_bytes_);
          fill_value(k, v);
          const OpResult r = co_await loader.client().find_or_put(k, v);
          if (r.status == Status::kFull) ++failed;
        },
        [&](const Engine::Completion& c) {
          if (c.error) std::rethrow_exception(c.error);
          if ((c.index & 0xFFFF) == 0 && progress) progress(c.index);
        });
    if (failed) throw InvalidArgument("race: the memory pool ran out while loading " + std::to_string(keys.records()) + " records");
    if (progress) progress(keys.records());
  }

  ClientSetup make_client(Engine& engine, const ReadSizeSpec& spec, const BenchOptions& o) const override {
    return make_client_as(engine, spec, o, 0);
  }
  // The client id names this client in its split descriptors and KV blocks (tentative copies).
  ClientSetup make_client_as(Engine& engine, const ReadSizeSpec& spec, const BenchOptions&, uint32_t client) const override {
    if (spec.kind != ReadSizeSpec::Kind::kFixed)
      throw InvalidArgument("--read-size " + spec.text() + " applies to linear probing, not to --scheme race");
    return {std::make_unique<RaceClient>(cfg_, engine, client), 2 * kRaceSlots};
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
  void finish(KvClient& kv, ClientResult& r) const override {
    auto& c = static_cast<RaceClient&>(kv);
    r.resizes += c.stats().splits;
    for (const double lf : c.stats().split_load) r.add_split_load(lf);
    r.directory_depth = std::max(r.directory_depth, c.cached_depth());
  }
  std::string describe() const override {
    return "race G=" + std::to_string(cfg_.groups_per_subtable) + " key=" + std::to_string(cfg_.key_bytes) +
           "B cache=" + (cfg_.dir_cache ? "on" : "off") + " d0=" + std::to_string(cfg_.initial_depth);
  }

 private:
  RaceConfig cfg_;
  uint32_t value_bytes_;
  uint64_t capacity_ = 0;
};

// Continuity's and level's bulk load: every record through the memory-node server's
// bulk_insert (no client, no fabric requests), reporting progress every 64 Ki records.
// (`die_after`, tests only: the process kills itself after that many records; 0 = never.)
template <class Server>
void bulk_load(Server& server, uint32_t value_bytes, const KeySpace& keys, const std::function<void(uint64_t)>& progress,
               uint64_t die_after) {
  std::vector<std::byte> value(value_bytes);
  RecordStream records(keys);
  for (uint64_t i = 0; i < keys.records(); ++i) {
    if (i == die_after && die_after != 0) ::raise(SIGKILL);
    const uint64_t k = records.next();
    fill_value(k, value);
    server.bulk_insert(k, value);
    if ((i & 0xFFFF) == 0 && progress) progress(i);
  }
}

// A new --pm-path file becomes a table only once its bulk load is complete: it was formatted
// without its magic word (format_unpublished: at no instant is it a valid empty table), which is
// written, in its own persist, after the load. A run killed while formatting or loading leaves an
// image every later run refuses (never a partial table taken for the data set); a load that fails
// removes the file it created.
template <class Load>
void load_new_file(const PmemFile& file, std::span<std::byte> image, const std::string& command, uint64_t magic,
                   Load&& load) {
  PersistentRegion region(image, file.mode());
  try {
    load();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(file.path(), ec);
    std::fprintf(stderr, "%s: the bulk load of the new file %s failed: %s\n", command.c_str(), file.path().c_str(),
                 ec ? ("could not remove it: " + ec.message() + "; delete it").c_str() : "removed it");
    throw;
  }
  region.store(0, magic);
  region.persist(0, 8);
}

// Continuity hashing (seed 002); with --pm-path the memory node's table is a pmem file mapping.
//
// Reloading between points (the sweep's default): a volatile table is reformatted and bulk-loaded
// again. A --pm-path table is the file: its loaded state is what the first load left — the
// bulk-loaded records of a new file, or the recovered image of an existing one (which no bulk
// load could rebuild) — so the first load keeps a copy of the image and a reload writes it back,
// crash-safely (the magic word cleared first and restored last, each in its own persist: an
// interrupted restore is refused on reopen, never mistaken for a table), then recovers it. With
// --keep-table nothing is reloaded and no copy is kept.
class ContinuityAdapter final : public SchemeAdapter {
 public:
  ContinuityAdapter(const BenchOptions& o, double load_factor)
      : pm_path_(o.pm_path), command_(o.command), keep_table_(o.keep_table), die_loading_(o.die_loading) {
    if (o.key_bytes != 8) throw InvalidArgument("--scheme continuity stores 8-byte keys: use --key-bytes 8");
    cfg_ = ContinuityConfig::for_records(o.records, load_factor, o.memory_nodes, o.sbuckets);
    // --max-resizes N: the table of the last level is the one --records/--load-factor ask for;
    // it starts 2^N times smaller (at least one pair) and doubles online when a segment is full.
    cfg_.max_resizes = o.max_resizes;
    cfg_.added_group_pairs = static_cast<uint32_t>(added_sbuckets_pairs(o.added_sbuckets));
    cfg_.migrate_pairs_per_write = o.resize_pace;
    // A resize also advances while no write arrives, unless --resize-pace 0 asks for a resize
    // that moves only with the written keys' pairs (tests: kills and histories mid-migration).
    cfg_.background_migration = o.resize_pace > 0;
    cfg_.buckets_per_node = std::max<uint64_t>(2, (cfg_.buckets_per_node >> o.max_resizes) & ~uint64_t{1});
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0xC047ULL);
    if (!pm_path_.empty()) cfg_.records = o.records;  // the records word: another --records is refused
    cfg_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.slots_at(cfg_.max_resizes) * cfg_.memory_nodes; }
  // Slots of the newest table of every shard hosted here (all of them, or 0: cannot tell).
  uint64_t slots_in(Fabric&) const override {
    if (!server_) return 0;
    uint64_t n = 0;
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i) {
      if (!server_->hosts(i)) return 0;
      n += server_->shard(i).capacity();
    }
    return n;
  }
  std::optional<uint64_t> table_resizes() const override {
    if (!server_) return std::nullopt;
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i)
      if (!server_->hosts(i)) return std::nullopt;
    uint64_t levels = 0;  // levels reached (a recovered image's resizes included)
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i)
      levels += server_->shard(i).level() + (server_->shard(i).resizing() ? 1 : 0);
    return levels;
  }
  std::optional<bool> table_resizing() const override {
    if (!table_resizes()) return std::nullopt;
    bool any = false;
    for (uint32_t i = 0; i < cfg_.memory_nodes; ++i) any = any || server_->shard(i).resizing();
    return any;
  }
  unsigned key_bits() const override { return 63; }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  std::span<std::byte> persistent_region() override {
    if (pm_path_.empty()) return {};
    if (!file_) {
      try {
        file_ = std::make_unique<PmemFile>(PmemFile::open(pm_path_, cfg_.region_bytes()));
      } catch (const PmemError& e) {
        throw InvalidArgument(std::string("--pm-path: ") + e.what());
      }
      // Only a file this run created is formatted: an existing one must be a continuity image
      // (whatever its bytes: zeros too), else it is refused before any fabric maps it, untouched.
      if (!file_->created()) {
        try {
          if (file_->bytes().size() < kContinuityHeaderBytes)
            throw PmemError("the file has " + std::to_string(file_->bytes().size()) +
                            " bytes, less than a continuity header (not a table image)");
          check_image_frame(file_->bytes().data(), "continuity", kContinuityMagic, kContinuityFormatVersion);
        } catch (const PmemError& e) {
          file_.reset();
          throw InvalidArgument("--pm-path " + pm_path_ + ": " + e.what() + " (nothing was changed)");
        }
      }
      if (file_->bytes().size() < cfg_.region_bytes())
        throw InvalidArgument("--pm-path " + pm_path_ + ": the file has " + std::to_string(file_->bytes().size()) +
                              " bytes, this table needs " + std::to_string(cfg_.region_bytes()) +
                              " (another geometry or a truncated image; nothing was changed)");
    }
    return file_->bytes().first(cfg_.region_bytes());
  }

  void load(Fabric& fabric, const KeySpace& keys, const std::function<void(uint64_t)>& progress) override {
    const PersistMode mode = file_ ? file_->mode() : PersistMode::kVolatile;
    const bool reload = server_ != nullptr;
    server_.reset();  // no client is running: the old server's handler is replaced below
    if (reload && file_) {
      restore_image();
      open_server(fabric, mode);
      if (progress) progress(keys.records());
      return;
    }
    if (reload)  // volatile: a zero header makes the shard format itself
      for (uint32_t n = 0; n < cfg_.memory_nodes; ++n) {
        auto region = fabric.local_region(n);
        if (!region.empty()) std::memset(region.data(), 0, std::min<size_t>(region.size(), kContinuityHeaderBytes));
      }
    const auto t0 = std::chrono::steady_clock::now();
    open_server(fabric, mode);
    if (server_->recovered()) {  // an existing image: recovered (validated and scanned), not bulk-loaded
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      recovered_ = server_->records();
      std::fprintf(stderr, "%s: recovered %llu records from %s (%llu bytes) in %.3f s\n", command_.c_str(),
                   static_cast<unsigned long long>(*recovered_), pm_path_.c_str(),
                   static_cast<unsigned long long>(cfg_.region_bytes()), s);
      if (progress) progress(keys.records());
    } else {
      auto load_all = [&] {
        bulk_load(*server_, cfg_.value_bytes, keys, progress, die_loading_);
        // A bulk load that grew the table leaves no resize half done: the run starts settled
        // (clients learn the level with one extra READ per node; writes of the run grow it online).
        for (uint32_t n = 0; n < cfg_.memory_nodes; ++n)
          if (server_->hosts(n)) server_->shard(n).finish_resize();
      };
      if (file_ && file_->created())
        load_new_file(*file_, persistent_region(), command_, kContinuityMagic, load_all);
      else
        load_all();
      if (progress) progress(keys.records());
    }
    if (file_ && !keep_table_) {  // the loaded state a reload writes back
      const auto img = persistent_region();
      image_.assign(img.begin(), img.end());
    }
  }

  ClientSetup make_client(Engine& engine, const ReadSizeSpec& spec, const BenchOptions&) const override {
    if (spec.kind != ReadSizeSpec::Kind::kFixed)
      throw InvalidArgument("--read-size " + spec.text() + " applies to linear probing, not to --scheme continuity");
    return {std::make_unique<ContinuityClient>(cfg_, engine), 4 + 4 * cfg_.sbuckets};
  }

  std::string describe() const override {
    return "continuity sb=" + std::to_string(cfg_.sbuckets) + " seg=" + std::to_string(cfg_.segment_bytes()) + "B" +
           (cfg_.max_resizes ? " N0=" + std::to_string(cfg_.buckets_per_node) + " max_resizes=" +
                                   std::to_string(cfg_.max_resizes)
                             : "") +
           (cfg_.added_group_pairs ? " added=1/" + std::to_string(cfg_.added_group_pairs) : "");
  }
  std::string persistence() const override {
    return to_string(file_ ? file_->mode() : PersistMode::kVolatile);
  }
  std::optional<uint64_t> recovered_records() const override { return recovered_; }

 private:
  void open_server(Fabric& fabric, PersistMode mode) {
    cfg_.format_unpublished = file_ && file_->created();  // a new file: its magic after the bulk load
    try {
      server_ = std::make_unique<ContinuityServer>(fabric, cfg_, mode);
    } catch (const PmemError& e) {
      throw InvalidArgument("--pm-path " + pm_path_ + ": " + e.what() + " (nothing was changed)");
    }
  }
  // Writes the image of the first load back into the file (restore_image, pmem.h: magic cleared
  // first, restored last, every store through the persist choke point).
  void restore_image() {
    const auto img = persistent_region();
    if (image_.size() != img.size()) throw std::logic_error("continuity: no loaded image to restore (--keep-table?)");
    PersistentRegion region(img, file_->mode());
    rdmahash::restore_image(region, image_);
  }

  ContinuityConfig cfg_;
  std::string pm_path_;
  std::string command_;  // "rdmahash bench" or "rdmahash serve", for messages
  bool keep_table_;
  uint64_t die_loading_;  // tests only: BenchOptions::die_loading
  std::unique_ptr<PmemFile> file_;
  std::unique_ptr<ContinuityServer> server_;
  std::optional<uint64_t> recovered_;  // records of the image recovered by the first load
  std::vector<std::byte> image_;       // --pm-path without --keep-table: the file after the first load
};

// Level hashing (OSDI'18), the seed 002 baseline. Volatile, or with --pm-path on a pmem file
// mapping exactly as ContinuityAdapter: a new file is formatted and bulk-loaded, an existing one is
// validated (level_check_image: before the fabric sees it, so that a foreign, truncated or corrupt
// file is refused untouched) and recovered — recovery finishes an interrupted top-level resize and
// clears the duplicate copy of an interrupted movement — never bulk-loaded. Reloads between points
// restore the image as the first load left it (restore_image, pmem.h); --keep-table: no reload, no copy.
// The table has room for the resizes its capacity needs (level_resizes_for: --capacity of `serve`,
// else the records plus the points' writes), so a small table grows while clients insert.
class LevelAdapter final : public SchemeAdapter {
 public:
  LevelAdapter(const BenchOptions& o, double load_factor)
      : pm_path_(o.pm_path), command_(o.command), keep_table_(o.keep_table), die_loading_(o.die_loading) {
    if (o.key_bytes != 8) throw InvalidArgument("--scheme level stores 8-byte keys: use --key-bytes 8");
    cfg_ = LevelConfig::for_records(o.records, load_factor, o.memory_nodes, 1);
    cfg_.value_bytes = o.value_bytes;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x1E7EULL);
    cfg_.max_resizes = level_resizes_for(cfg_, o.table_capacity ? o.table_capacity : o.records + o.table_writes);
    // An existing image keeps the room for resizes it was made with (it depends on the first run's
    // --ops and workloads, not only on the table options): read it from the header, which
    // level_check_image then validates whole (checksum, the rest of the geometry).
    // The header's frame (checksum) is checked before any field of it is believed. The data set
    // is part of the image too (the records word): another --records is refused, not a table
    // missing keys.
    if (!pm_path_.empty()) {
      cfg_.records = o.records;
      LevelHeader h{};
      std::ifstream in(pm_path_, std::ios::binary);
      if (in.read(reinterpret_cast<char*>(&h), sizeof h) && h.magic == kLevelMagic) {
        try {
          check_image_frame(&h, "level", kLevelMagic, kLevelFormatVersion);
        } catch (const PmemError& e) {
          throw InvalidArgument("--pm-path " + pm_path_ + ": " + e.what() + " (nothing was changed)");
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
    if (pm_path_.empty()) return {};
    if (!file_) {
      try {
        file_ = std::make_unique<PmemFile>(PmemFile::open(pm_path_, cfg_.region_bytes()));
      } catch (const PmemError& e) {
        throw InvalidArgument(std::string("--pm-path: ") + e.what());
      }
      try {
        // Only a file this run created is formatted: an existing one must be this table's image
        // (whatever its bytes: zeros too), else it is refused here, untouched.
        if (!file_->created()) level_check_image(file_->bytes(), cfg_, 0);
      } catch (const PmemError& e) {
        file_.reset();
        throw InvalidArgument("--pm-path " + pm_path_ + ": " + e.what() + " (nothing was changed)");
      }
      if (file_->bytes().size() < cfg_.region_bytes())
        throw InvalidArgument("--pm-path " + pm_path_ + ": the file has " + std::to_string(file_->bytes().size()) +
                              " bytes, this table needs " + std::to_string(cfg_.region_bytes()) +
                              " (a truncated image; nothing was changed)");
    }
    return file_->bytes().first(cfg_.region_bytes());
  }

  void load(Fabric& fabric, const KeySpace& keys, const std::function<void(uint64_t)>& progress) override {
    const PersistMode mode = file_ ? file_->mode() : PersistMode::kVolatile;
    const bool reload = server_ != nullptr;
    server_.reset();  // no client is running: the old server's handler is replaced below
    if (reload && file_) {
      PersistentRegion region(persistent_region(), mode);
      restore_image(region, image_);  // magic cleared first, restored last (pmem.h)
      open_server(fabric, mode);
      if (progress) progress(keys.records());
      return;
    }
    if (!file_)  // volatile: a zero header makes the shard format itself
      for (uint32_t n = 0; n < cfg_.memory_nodes; ++n) {
        auto region = fabric.local_region(n);
        if (!region.empty()) std::memset(region.data(), 0, std::min<size_t>(region.size(), kLevelAreaOffset));
      }
    const auto t0 = std::chrono::steady_clock::now();
    open_server(fabric, mode);
    if (server_->recovered()) {  // an existing image: recovered, not bulk-loaded
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      recovered_ = server_->records();
      std::fprintf(stderr, "%s: recovered %llu records from %s (%llu bytes) in %.3f s (level: %s)\n",
                   command_.c_str(), static_cast<unsigned long long>(*recovered_), pm_path_.c_str(),
                   static_cast<unsigned long long>(cfg_.region_bytes()), sec, server_->recovery_summary().c_str());
      if (progress) progress(keys.records());
    } else {
      auto load_all = [&] { bulk_load(*server_, cfg_.value_bytes, keys, progress, die_loading_); };
      if (file_ && file_->created())
        load_new_file(*file_, persistent_region(), command_, kLevelMagic, load_all);
      else
        load_all();
      if (progress) progress(keys.records());
    }
    if (file_ && !keep_table_) {  // the loaded state a reload writes back
      const auto img = persistent_region();
      image_.assign(img.begin(), img.end());
    }
  }

  ClientSetup make_client(Engine& engine, const ReadSizeSpec& spec, const BenchOptions&) const override {
    if (spec.kind != ReadSizeSpec::Kind::kFixed)
      throw InvalidArgument("--read-size " + spec.text() + " applies to linear probing, not to --scheme level");
    return {std::make_unique<LevelClient>(cfg_, engine), 8};
  }
  std::string describe() const override {
    return "level N=" + std::to_string(cfg_.base_buckets) + " bucket=" + std::to_string(cfg_.bucket_bytes()) +
           "B resizes<=" + std::to_string(cfg_.max_resizes);
  }
  std::string persistence() const override { return to_string(file_ ? file_->mode() : PersistMode::kVolatile); }
  std::optional<uint64_t> recovered_records() const override { return recovered_; }

 private:
  void open_server(Fabric& fabric, PersistMode mode) {
    cfg_.format_unpublished = file_ && file_->created();  // a new file: its magic after the bulk load
    try {
      server_ = std::make_unique<LevelServer>(fabric, cfg_, mode);
    } catch (const PmemError& e) {
      throw InvalidArgument("--pm-path " + pm_path_ + ": " + e.what() + " (nothing was changed)");
    }
  }

  LevelConfig cfg_;
  std::string pm_path_;
  std::string command_;  // "rdmahash bench" or "rdmahash serve", for messages
  bool keep_table_;
  uint64_t die_loading_;  // tests only: BenchOptions::die_loading
  std::unique_ptr<PmemFile> file_;
  std::unique_ptr<LevelServer> server_;
  std::optional<uint64_t> recovered_;  // records of the image recovered by the first load
  std::vector<std::byte> image_;       // --pm-path without --keep-table: the file after the first load
};

}  // namespace

std::unique_ptr<SchemeAdapter> make_adapter(const BenchOptions& o, double load_factor) {
  if (o.scheme == "linear") return std::make_unique<LinearAdapter>(o, load_factor);
  if (o.scheme == "cuckoo") return std::make_unique<CuckooAdapter>(o, load_factor);
  if (o.scheme == "race") return std::make_unique<RaceAdapter>(o, load_factor);
  if (o.scheme == "continuity") return std::make_unique<ContinuityAdapter>(o, load_factor);
  if (o.scheme == "level") return std::make_unique<LevelAdapter>(o, load_factor);
  throw InvalidArgument("unknown scheme '" + o.scheme + "'");
}

}  // namespace rdmahash::bench
