#include "bench/driver.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "bench/workload.h"
#include "bench/ycsb.h"
#include "rdmahash/ucx_fabric.h"
#include "schemes/hash.h"

namespace rdmahash::bench {
namespace {

struct RawTarget {
  uint32_t memory_nodes;
  uint64_t region_bytes;
  uint32_t bytes;
};

Task<void> do_op(KvClient* kv, Engine* engine, Op op, uint32_t value_bytes, ClientResult* r, RawTarget raw) {
  std::vector<std::byte> buf(op.kind == OpKind::kRawRead ? raw.bytes : value_bytes);
  if (op.kind == OpKind::kRawRead) {
    // Random 8-byte-aligned READ inside the slot area of a random memory node.
    const uint32_t node = static_cast<uint32_t>(hash::range(op.key, raw.memory_nodes));
    const uint64_t span = raw.region_bytes > 64 + raw.bytes ? (raw.region_bytes - 64 - raw.bytes) / 8 : 0;
    const uint64_t off = 64 + hash::range(hash::mix64(op.key), span + 1) * 8;
    co_await engine->read(RemoteAddr{node, off}, buf.data(), raw.bytes);
    co_return;
  }
  OpResult res;
  if (op.kind == OpKind::kGetAll) {
    std::vector<std::byte> values;
    res = co_await kv->get_all(op.key, value_bytes ? &values : nullptr);
    if (value_bytes) {
      std::vector<std::byte> want(value_bytes);
      fill_value(op.key, want);
      for (size_t i = 0; i + value_bytes <= values.size(); i += value_bytes)
        if (!std::equal(want.begin(), want.end(), values.begin() + static_cast<std::ptrdiff_t>(i))) ++r->value_mismatches;
    }
  } else if (op.kind == OpKind::kGet) {
    res = co_await kv->get(op.key, buf);
    if (res.status == Status::kFound && value_bytes) {
      std::vector<std::byte> want(value_bytes);
      fill_value(op.key, want);
      if (want != buf) ++r->value_mismatches;
    }
  } else {
    fill_value(op.key, buf);
    res = co_await kv->find_or_put(op.key, buf);
  }
  r->chunks += res.chunks;
  r->matches += res.matches;
  r->persists += res.persists;
  switch (res.status) {
    case Status::kFound: ++r->found; break;
    case Status::kInserted: ++r->inserted; break;
    case Status::kFull: ++r->full; break;
    case Status::kNotFound: ++r->not_found; break;
    default: break;
  }
}

// One client's share of one point.
ClientResult run_client(Engine& engine, const SchemeAdapter& adapter, const BenchOptions& o, Workload w,
                        const ReadSizeSpec& read_size, uint32_t read_bytes, const KeySpace& keys, uint32_t client) {
  ClientResult r;
  r.latency_ns.reserve(o.ops);
  auto setup = adapter.make_client(engine, read_size, o);
  std::unique_ptr<KvClient> kv = std::move(setup.client);
  r.read_size = setup.read_size;
  OpStream stream(o, w, keys, client);
  const RawTarget raw{o.memory_nodes, adapter.region_bytes(), read_bytes};
  const uint32_t vb = adapter.value_bytes();
  const auto start = std::chrono::steady_clock::now();
  engine.run_many(
      o.ops, o.depth, [&](uint64_t) { return do_op(kv.get(), &engine, stream.next(), vb, &r, raw); },
      [&](const Engine::Completion& c) {
        r.add_op(c.stats, c.latency);
        if (c.error) ++r.errors;
      });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}


// --- YCSB phases ------------------------------------------------------------------------------

Task<void> ycsb_op(KvClient* kv, ycsb::Generator* gen, ycsb::Op op, uint64_t key, uint32_t value_bytes,
                   ClientResult* r) {
  std::vector<std::byte> value(value_bytes), out(value_bytes);
  OpResult res;
  switch (op.type) {
    case ycsb::OpType::kRead:
      res = co_await kv->get(key, out);
      break;
    case ycsb::OpType::kUpdate:
      fill_value(key ^ 0x5D5D, value);  // a value other than the loaded one
      res = co_await kv->update(key, value);
      break;
    case ycsb::OpType::kInsert:
      fill_value(key, value);
      res = co_await kv->find_or_put(key, value);
      gen->acknowledge_insert(op.key_index);  // later requests may now ask for it
      break;
    case ycsb::OpType::kReadModifyWrite:
      res = co_await kv->get(key, out);
      if (res.status == Status::kFound) {
        fill_value(key ^ 0x5D5D, value);
        const uint32_t chunks = res.chunks;
        res = co_await kv->update(key, value);
        res.chunks += chunks;
      }
      break;
    case ycsb::OpType::kScan:
      ++r->skipped;  // only reached with --ycsb-skip-unsupported (checked before the run)
      co_return;
  }
  r->chunks += res.chunks;
  r->persists += res.persists;
  switch (res.status) {
    case Status::kFound: ++r->found; break;
    case Status::kInserted: ++r->inserted; break;
    case Status::kFull: ++r->full; break;
    case Status::kNotFound: ++r->not_found; break;
    case Status::kUpdated: ++r->updated; break;
    default: break;
  }
}

Task<void> ycsb_load_op(KvClient* kv, uint64_t key, uint32_t value_bytes, ClientResult* r) {
  std::vector<std::byte> value(value_bytes);
  fill_value(key, value);
  const OpResult res = co_await kv->find_or_put(key, value);
  r->chunks += res.chunks;
  r->persists += res.persists;
  if (res.status == Status::kInserted) ++r->inserted;
  else if (res.status == Status::kFound) ++r->found;
  else ++r->full;
}

// YCSB's load phase (this client inserts records client, client+n, ...) or run phase.
ClientResult run_ycsb_client(Engine& engine, const SchemeAdapter& adapter, const BenchOptions& o,
                             const ycsb::Workload& w, Workload phase, const KeySpace& keys, uint32_t client,
                             uint32_t clients) {
  ClientResult r;
  auto setup = adapter.make_client(engine, o.read_sizes.front(), o);
  std::unique_ptr<KvClient> kv = std::move(setup.client);
  r.read_size = setup.read_size;
  const uint32_t vb = adapter.value_bytes();
  auto done = [&](const Engine::Completion& c) {
    r.add_op(c.stats, c.latency);
    if (c.error) ++r.errors;
  };
  const auto start = std::chrono::steady_clock::now();
  if (phase == Workload::kYcsbLoad) {
    const uint64_t n = w.load_records() > client ? (w.load_records() - client + clients - 1) / clients : 0;
    r.latency_ns.reserve(n);
    engine.run_many(n, o.depth, [&](uint64_t i) { return ycsb_load_op(kv.get(), keys.key(client + i * clients), vb, &r); },
                    done);
  } else {
    ycsb::Generator gen(w, client, clients, hash::mix64(o.seed + client), ycsb::InsertVisibility::kOnAcknowledge);
    const uint64_t n = w.ops_for_client(client, clients);
    r.latency_ns.reserve(n);
    engine.run_many(n, o.depth,
                    [&](uint64_t) {
                      const ycsb::Op op = gen.next();
                      return ycsb_op(kv.get(), &gen, op, keys.key(op.key_index), vb, &r);
                    },
                    done);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

struct Point {
  Workload workload;
  ReadSizeSpec read_size;
  uint32_t read_bytes;
  uint32_t repeat = 0;
};

std::vector<Point> points_of(const BenchOptions& o) {
  std::vector<Point> pts;
  if (!o.ycsb_path.empty()) {  // YCSB: one load phase, then the run phase (repeated runs reuse the table)
    pts.push_back({Workload::kYcsbLoad, o.read_sizes.front(), 0, 0});
    for (uint32_t rep = 0; rep < o.repeat; ++rep) pts.push_back({Workload::kYcsbRun, o.read_sizes.front(), 0, rep});
    return pts;
  }
  for (uint32_t rep = 0; rep < o.repeat; ++rep)
  for (Workload w : o.workloads) {
    if (w == Workload::kGet || w == Workload::kGetAll)
      for (const ReadSizeSpec& r : o.read_sizes) pts.push_back({w, r, 0, rep});
    else if (w == Workload::kRawRead)
      for (uint32_t b : o.read_bytes) pts.push_back({w, o.read_sizes.front(), b, rep});
    else
      pts.push_back({w, o.read_sizes.front(), 0, rep});
  }
  return pts;
}

// One client's share of one point, YCSB phases included.
ClientResult run_point(Engine& engine, const SchemeAdapter& adapter, const BenchOptions& o, const Point& pt,
                       const KeySpace& keys, uint32_t client, uint32_t clients, const ycsb::Workload* w) {
  if (pt.workload == Workload::kYcsbLoad || pt.workload == Workload::kYcsbRun)
    return run_ycsb_client(engine, adapter, o, *w, pt.workload, keys, client, clients);
  return run_client(engine, adapter, o, pt.workload, pt.read_size, pt.read_bytes, keys, client);
}

class Reporter {
 public:
  explicit Reporter(const BenchOptions& o) : o_(o) {
    if (!o.json_path.empty()) {
      json_.open(o.json_path, std::ios::app);
      if (!json_) throw InvalidArgument("cannot open --json file '" + o.json_path + "' for appending");
    }
  }
  void report(const PointInfo& p, const ClientResult& total) {
    if (!o_.quiet) {
      if (!header_done_) print_summary_header(stdout);
      header_done_ = true;
      print_summary_row(stdout, p, total);
    }
    if (json_.is_open()) {
      json_ << to_json_line(o_, p, total) << '\n';
      json_.flush();
    }
  }

 private:
  const BenchOptions& o_;
  std::ofstream json_;
  bool header_done_ = false;
};

std::function<void(uint64_t)> progress_bar(const BenchOptions& o, uint64_t total, std::string label) {
  if (!o.progress || !isatty(STDERR_FILENO)) return {};
  return [total, label](uint64_t done) {
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    const int bars = pct / 4;
    std::fprintf(stderr, "\r%s [%-25.*s] %3d%%", label.c_str(), bars, "#########################", pct);
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

void check_key_capacity(const BenchOptions& o, const SchemeAdapter& a, uint32_t clients) {
  const unsigned bits = a.key_bits();
  if (bits >= 63) return;
  const double needed = static_cast<double>(o.records) + static_cast<double>(clients) * static_cast<double>(o.ops + 1);
  if (needed >= static_cast<double>(1ULL << bits))
    throw InvalidArgument("--records plus new keys (clients x ops) exceed the " + std::to_string(bits) +
                          "-bit key space: use --key-bytes 8 or fewer ops");
}

// --ycsb: the workload file sets records, ops, value size and mix. Returns the parsed workload
// (or null) and adjusts `o`: the table is sized for the records plus the inserts the run expects,
// and nothing is bulk-loaded (YCSB's load phase inserts the records through the clients).
std::unique_ptr<ycsb::Workload> prepare_ycsb(BenchOptions& o, std::FILE* diag) {
  if (o.ycsb_path.empty()) return nullptr;
  std::unique_ptr<ycsb::Workload> w;
  try {
    w = std::make_unique<ycsb::Workload>(ycsb::load_file(o.ycsb_path, o.ycsb_overrides));
  } catch (const ycsb::YcsbError& e) {
    throw InvalidArgument(e.what());  // every rank reads the same file: a shared, clean error
  }
  if (diag)
    for (const auto& warn : w->warnings) std::fprintf(diag, "rdmahash bench: warning: %s\n", warn.c_str());
  if (w->operation_count == 0)
    throw InvalidArgument(o.ycsb_path + ": operationcount is 0 (YCSB's 'no limit'): set it, e.g. -p operationcount=1000000");
  if (w->value_bytes() > 120)
    throw InvalidArgument(o.ycsb_path + ": records of fieldcount x fieldlength = " + std::to_string(w->value_bytes()) +
                          " bytes do not fit the 120 value bytes of an inline record: e.g. -p fieldcount=1 -p fieldlength=100");
  for (ycsb::OpType t : ycsb::used_op_types(*w))
    if (t == ycsb::OpType::kScan && !o.ycsb_skip_unsupported)
      throw InvalidArgument(o.ycsb_path + ": operation 'scan' is not supported by --scheme " + o.scheme +
                            " (hash tables have no key order); pass --ycsb-skip-unsupported to skip scans");
  const double inserts = static_cast<double>(w->operation_count) * w->insert_proportion * static_cast<double>(o.repeat);
  o.records = w->record_count + static_cast<uint64_t>(inserts) + 1;
  o.value_bytes = w->value_bytes();
  o.ops = w->operation_count;
  o.load_factors.resize(1);
  o.workloads = {Workload::kYcsbLoad, Workload::kYcsbRun};
  return w;
}

}  // namespace

int run_local(const BenchOptions& o_in) {
  BenchOptions o = o_in;
  const auto yw = prepare_ycsb(o, stderr);
  Reporter reporter(o);
  const uint32_t clients = o.symmetric ? o.memory_nodes : o.clients;
  for (double lf : o.load_factors) {
    auto adapter = make_adapter(o, lf);
    check_key_capacity(o, *adapter, clients);
    const auto pm = adapter->persistent_region();  // --pm-path: the file mapping is the region
    auto fabric = pm.empty() ? make_local_fabric(std::vector<uint64_t>(o.memory_nodes, adapter->region_bytes()))
                             : make_local_fabric_over({pm});
    const KeySpace keys(yw ? yw->record_count : o.records, adapter->key_bits(), o.seed, o.zipf_theta);
    const KeySpace bulk = yw ? KeySpace(0, adapter->key_bits(), o.seed) : keys;
    adapter->load(*fabric, bulk, progress_bar(o, bulk.records(), "loading " + std::to_string(bulk.records()) + " records"));
    for (const Point& pt : points_of(o)) {
      std::vector<ClientResult> results(clients);
      std::vector<std::exception_ptr> errors(clients);
      std::barrier sync(clients);
      std::vector<std::thread> threads;
      std::vector<std::unique_ptr<Transport>> transports;
      for (uint32_t c = 0; c < clients; ++c) transports.push_back(fabric->connect());
      for (uint32_t c = 0; c < clients; ++c) {
        threads.emplace_back([&, c] {
          Engine engine(*transports[c]);
          sync.arrive_and_wait();
          try {
            results[c] = run_point(engine, *adapter, o, pt, keys, c, clients, yw.get());
          } catch (...) {
            errors[c] = std::current_exception();
          }
        });
      }
      for (auto& t : threads) t.join();
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
      ClientResult total;
      for (const auto& r : results) total.merge(r);
      PointInfo info{o.scheme, adapter->describe(), "local",
                     o.symmetric ? o.memory_nodes : o.memory_nodes + clients, o.memory_nodes, clients,
                     keys.records(), adapter->slots(), lf, pt.workload, pt.read_size.slots, pt.read_bytes,
                     pt.read_size.text(), pt.repeat, yw ? ycsb::summary(*yw) : "", adapter->persistence()};
      reporter.report(info, total);
    }
  }
  return 0;
}

int run_ucx_ranks(const BenchOptions& o, uint64_t region);

int run_ucx(const BenchOptions& o_in) {
  BenchOptions o = o_in;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  prepare_ycsb(o, rank == 0 ? stderr : nullptr);  // every rank parses the same file: same outcome
  // Every rank computes the same sizes, so the collective create() agrees on the region size.
  uint64_t region = 0;
  for (double lf : o.load_factors) region = std::max(region, make_adapter(o, lf)->region_bytes());
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (!o.symmetric && static_cast<uint32_t>(ranks) <= o.memory_nodes)
    throw InvalidArgument("no client ranks: run more ranks (" + std::to_string(ranks) + ") than --memory-nodes (" +
                          std::to_string(o.memory_nodes) + "), or use --symmetric");
  // From here on an error may be one rank's alone: it must abort the job, not wait in a collective.
  try {
    return run_ucx_ranks(o, region);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
}

int run_ucx_ranks(const BenchOptions& o_in, uint64_t region) {
  BenchOptions o = o_in;
  const auto yw = prepare_ycsb(o, nullptr);
  UcxFabricConfig fc;
  fc.memory_nodes = o.memory_nodes;
  fc.symmetric = o.symmetric;
  fc.region_bytes = region;
  // --pm-path: the memory node (rank 0) exposes the file mapping as its region.
  int my_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  std::unique_ptr<SchemeAdapter> pm_adapter;
  if (!o.pm_path.empty() && my_rank == 0) {
    pm_adapter = make_adapter(o, o.load_factors.front());
    fc.region_address = pm_adapter->persistent_region().data();
  }
  auto fabric = UcxFabric::create(fc);
  const uint32_t mem_nodes = fabric->memory_nodes();
  BenchOptions opts = o;
  opts.memory_nodes = mem_nodes;  // --symmetric: every rank is a memory node
  std::unique_ptr<Reporter> reporter;
  if (fabric->rank() == 0) reporter = std::make_unique<Reporter>(opts);
  const uint32_t client_index =
      static_cast<uint32_t>(opts.symmetric ? fabric->rank() : fabric->rank() - static_cast<int>(mem_nodes));
  std::unique_ptr<Transport> transport = fabric->is_client() ? fabric->connect() : nullptr;

  for (double lf : opts.load_factors) {
    auto adapter = pm_adapter ? std::move(pm_adapter) : make_adapter(opts, lf);
    check_key_capacity(opts, *adapter, fabric->client_count());
    const KeySpace keys(yw ? yw->record_count : opts.records, adapter->key_bits(), opts.seed, opts.zipf_theta);
    const KeySpace bulk = yw ? KeySpace(0, adapter->key_bits(), opts.seed) : keys;
    adapter->load(*fabric, bulk, fabric->rank() == 0 ? progress_bar(opts, bulk.records(), "loading shard 0") : nullptr);
    for (const Point& pt : points_of(opts)) {
      fabric->barrier();
      ClientResult mine;
      if (fabric->is_client()) {
        Engine engine(*transport);
        mine = run_point(engine, *adapter, opts, pt, keys, client_index, fabric->client_count(), yw.get());
        fabric->client_done();
      }
      fabric->serve();  // memory nodes: progress (blocking on the event fd) until every client is done
      std::vector<std::byte> bytes = fabric->is_client() ? mine.serialize() : std::vector<std::byte>{};
      auto all = fabric->gather(bytes);
      if (fabric->rank() == 0) {
        ClientResult total;
        for (const auto& b : all)
          if (!b.empty()) total.merge(ClientResult::deserialize(b));
        PointInfo info{opts.scheme, adapter->describe(), "ucx", static_cast<uint32_t>(fabric->size()), mem_nodes,
                       fabric->client_count(), keys.records(), adapter->slots(), lf, pt.workload,
                       pt.read_size.slots, pt.read_bytes, pt.read_size.text(), pt.repeat,
                       yw ? ycsb::summary(*yw) : "", adapter->persistence()};
        reporter->report(info, total);
      }
    }
  }
  fabric->barrier();
  return 0;
}

}  // namespace rdmahash::bench
