#include "bench/driver.h"

#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench/kv_mix.h"
#include "bench/report.h"
#include "bench/sysinfo.h"
#include "bench/workload.h"
#include "bench/ycsb.h"
#include "rdmahash/sim_fabric.h"
#include "rdmahash/ucx_fabric.h"
#include "rdmahash/ucx_service.h"
#include "common/hash.h"
#include "common/cpu_clock.h"

namespace rdmahash::bench {
namespace {

// CPU time of the calling thread (a client), for the JSON's client_cpu_ns_per_op: what an
// operation costs the client's CPU, beside how long it takes.
using common::thread_cpu_ns;

// The timed part of a client's run: wall time on the transport's clock, the thread's CPU time,
// how the client waited (UCX ClientWait: sleeps, waits that did not spin because the CPUs were
// contended) and the lines its READs spanned, from construction to finish(r).
class TimedPart {
 public:
  explicit TimedPart(Engine& engine)
      : transport_(engine.transport()), start_(transport_.now()), cpu_start_(thread_cpu_ns()),
        sleeps_(transport_.counters().client_sleeps), unspun_(transport_.counters().client_unspun_sleeps),
        lines_(transport_.counters().lines_read), direct_(transport_.counters().direct_rounds) {}
  void finish(ClientResult& r) const {
    r.seconds = std::chrono::duration<double>(transport_.now() - start_).count();
    r.cpu_ns = thread_cpu_ns() - cpu_start_;
    r.client_sleeps = transport_.counters().client_sleeps - sleeps_;
    r.client_unspun_sleeps = transport_.counters().client_unspun_sleeps - unspun_;
    r.lines_read = transport_.counters().lines_read - lines_;
    r.direct_rounds = transport_.counters().direct_rounds - direct_;
  }

 private:
  Transport& transport_;
  std::chrono::steady_clock::time_point start_;
  uint64_t cpu_start_, sleeps_, unspun_, lines_, direct_;
};

struct RawTarget {
  uint32_t memory_nodes;
  uint64_t region_bytes;
  uint32_t bytes;
  // A raw READ's address from its op's random bits: 8-byte aligned, inside the slot area of a
  // random memory node.
  RemoteAddr addr(uint64_t bits) const {
    const uint32_t node = static_cast<uint32_t>(hash::range(bits, memory_nodes));
    const uint64_t span = region_bytes > 64 + bytes ? (region_bytes - 64 - bytes) / 8 : 0;
    return RemoteAddr{node, 64 + hash::range(hash::mix64(bits), span + 1) * 8};
  }
};

// The operation's buffers live in its coroutine frame when they fit (no malloc per operation: a
// measured get must not pay for the benchmark's bookkeeping more than a raw read does).
constexpr size_t kFrameBuffer = 512;

Task<void> do_op(KvClient* kv, Engine* engine, Op op, uint32_t value_bytes, ClientResult* r, RawTarget raw) {
  const size_t need = op.kind == OpKind::kRawRead ? raw.bytes : value_bytes;
  alignas(8) std::byte small[kFrameBuffer];
  std::vector<std::byte> big;
  if (need > sizeof small) big.resize(need);
  const std::span<std::byte> buf(need > sizeof small ? big.data() : small, need);
  if (op.kind == OpKind::kRawRead) {
    co_await engine->read(raw.addr(op.key), buf.data(), raw.bytes);
    co_return;
  }
  std::fill(buf.begin(), buf.end(), std::byte{0});
  OpResult res;
  if (op.kind == OpKind::kGetAll) {
    std::vector<std::byte> values;
    res = co_await kv->get_all(op.key, value_bytes ? &values : nullptr);
    if (value_bytes)
      for (size_t i = 0; i + value_bytes <= values.size(); i += value_bytes)
        if (!value_matches(op.key, std::span<const std::byte>(values).subspan(i, value_bytes))) ++r->value_mismatches;
  } else if (op.kind == OpKind::kUpdate) {
    fill_value(op.key, buf);  // the key's own value: later reads still verify
    res = co_await kv->update(op.key, buf);
  } else if (op.kind == OpKind::kErase) {
    res = co_await kv->erase(op.key);
  } else {
    // A find-or-put: gets never come here (run_client hands them to get_visit and GetCheck).
    if (op.kind != OpKind::kFindOrPut) throw std::logic_error("do_op: a get must go to get_visit");
    fill_value(op.key, buf);
    res = co_await kv->find_or_put(op.key, buf);
  }
  r->add_outcome(res);
  r->matches += res.matches;
}

// --multi-get on: a client's gets as one multi-get of `ops` keys, `depth` in flight
// (KvClient::get_batch: one batch per round, no coroutine per key); raw READs likewise, `depth` READs
// a batch with no coroutine each, so that get / raw-read compares the same kind of loop. False,
// with no op taken from `stream`, when the scheme has no multi-get (the caller runs its get_visit loop).
bool run_multi_get(Engine& engine, KvClient& kv, OpStream& stream, Workload w, uint64_t ops, uint32_t depth, RawTarget raw,
                   uint32_t vb, GetCheck& gets, ClientResult& r) {
  if (depth == 0) depth = 1;
  auto done = [&](const Engine::Completion& c) {
    r.add_op(c.stats, c.latency);
    if (c.error) ++r.errors;
  };
  std::vector<Request> reqs;
  std::vector<std::byte> bufs;
  const bool raw_reads = w == Workload::kRawRead;
  if (!raw_reads) return kv.get_batch(ops, depth, [&](uint64_t) { return stream.next().key; }, vb, gets, done);
  bufs.resize(size_t{depth} * raw.bytes);
  engine.restart_clock();  // the first READs start now, not at the engine's last batch
  for (uint64_t issued = 0; issued < ops;) {  // every raw READ is answered in its round: `depth` a batch
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(depth, ops - issued));
    issued += n;
    reqs.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      // Only the fields that change, written in place (`reqs[i] = Request{}` is a block fill of the
      // whole request, about a fifth of this loop's own time). The rest keep resize()'s defaults
      // (an unfenced READ): nothing else writes these requests but execute_batch, which resets
      // each one's status itself.
      Request& q = reqs[i];
      q.addr = raw.addr(stream.next().key);
      q.buf = bufs.data() + size_t{i} * raw.bytes;
      q.len = raw.bytes;
    }
    const auto t0 = engine.batch_clock();
    const std::string error = engine.execute_batch(reqs);
    const auto latency = std::chrono::duration_cast<std::chrono::nanoseconds>(engine.batch_clock() - t0);
    for (uint32_t i = 0; i < n; ++i) {
      OpStats st;
      st.round_trips = 1;
      st.reads = 1;
      st.bytes = raw.bytes;
      done(Engine::Completion{i, st, latency, reqs[i].status == ReqStatus::kOk ? nullptr : std::make_exception_ptr(FabricError(error))});
    }
  }
  return true;
}

// One client's share of one point.
ClientResult run_client(Engine& engine, const SchemeTable& table, const BenchOptions& o, Workload w,
                        const ReadSizeSpec& read_size, uint32_t read_bytes, uint32_t chunk, double assumed_lf,
                        const KeySpace& keys,
                        uint32_t client, uint32_t clients, uint64_t insert_point, uint32_t repeat,
                        check::HistoryBuffer* history) {
  ClientResult r;
  r.latency_ns.reserve(o.ops);
  auto setup = make_client(table, engine, o, read_size, client, chunk, assumed_lf, model_present_fraction(o, w));
  std::unique_ptr<KvClient> kv = std::move(setup.client);
  r.read_size = setup.read_size;
  OpStream stream(o, w, keys, client, clients, insert_point);
  const RawTarget raw{o.memory_nodes, table.region_bytes(), read_bytes};
  const uint32_t vb = table.value_bytes();
  std::optional<KvMix> mix;
  if (w == Workload::kKvMix) mix.emplace(o, keys, vb, client, repeat, history);
  GetCheck gets(&r, vb);
  const TimedPart timed(engine);
  if (o.multi_get == Switch::kOn && !mix && w == Workload::kFindOrPut &&
      kv->find_or_put_batch(
          o.ops, o.depth, [&](uint64_t) { return stream.next().key; },
          [](uint64_t, uint64_t key, std::span<std::byte> out) { fill_value(key, out); },  // do_op's value
          [&](const Engine::Completion& c, const OpResult& res) {
            r.add_op(c.stats, c.latency);
            if (c.error) {
              ++r.errors;
              return;
            }
            r.add_outcome(res);
            r.matches += res.matches;
          })) {
    r.multi_get_ops = o.ops;
    timed.finish(r);
    add_client_stats(table, *kv, r);
    return r;
  }
  if (o.multi_get == Switch::kOn && !mix && (w == Workload::kGet || w == Workload::kRawRead) &&
      run_multi_get(engine, *kv, stream, w, o.ops, o.depth, raw, vb, gets, r)) {
    r.multi_get_ops = o.ops;
    timed.finish(r);
    add_client_stats(table, *kv, r);
    return r;
  }
  engine.run_many(
      o.ops, o.depth,
      [&](uint64_t) -> Task<void> {
        if (mix) return mix->next(kv.get(), &engine, &r);
        const Op op = stream.next();
        if (op.kind == OpKind::kGet) return kv->get_visit(op.key, vb, gets);
        return do_op(kv.get(), &engine, op, vb, &r, raw);
      },
      [&](const Engine::Completion& c) {
        r.add_op(c.stats, c.latency);
        if (c.error) ++r.errors;
      });
  timed.finish(r);
  add_client_stats(table, *kv, r);
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
  r->add_outcome(res);
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
ClientResult run_ycsb_client(Engine& engine, const SchemeTable& table, const BenchOptions& o,
                             const ycsb::Workload& w, Workload phase, const KeySpace& keys, uint32_t client,
                             uint32_t clients) {
  ClientResult r;
  auto setup = make_client(table, engine, o, o.read_sizes.front(), client, 0, o.assumed_load_factors.front(),
                           model_present_fraction(o, phase));
  std::unique_ptr<KvClient> kv = std::move(setup.client);
  r.read_size = setup.read_size;
  const uint32_t vb = table.value_bytes();
  auto done = [&](const Engine::Completion& c) {
    r.add_op(c.stats, c.latency);
    if (c.error) ++r.errors;
  };
  const TimedPart timed(engine);
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
  timed.finish(r);
  add_client_stats(table, *kv, r);
  return r;
}

// Touches every page of every shard a client may read: one 8-byte READ per 4 KiB page, many in
// flight. A client maps a memory node's region lazily (UCX shared memory: on first access), so
// without this the first timed point would also measure page faults.
Task<void> touch(Engine* engine, RemoteAddr addr) {
  uint64_t word = 0;
  co_await engine->read(addr, &word, sizeof word);
}

ClientResult warm_up(Engine& engine, const SchemeTable& table, uint32_t memory_nodes) {
  constexpr uint64_t kPage = 4096;
  const uint64_t region = table.region_bytes();
  const uint64_t pages = (region + kPage - 1) / kPage;
  ClientResult r;
  const TimedPart timed(engine);
  engine.run_many(
      pages * memory_nodes, 64,
      [&](uint64_t i) {
        const uint64_t off = std::min((i % pages) * kPage, region - 8);
        return touch(&engine, RemoteAddr{static_cast<uint32_t>(i / pages), off});
      },
      [&](const Engine::Completion& c) {
        if (c.error) std::rethrow_exception(c.error);
        ++r.ops;
      });
  timed.finish(r);
  return r;
}

struct Point {
  Workload workload;
  ReadSizeSpec read_size;
  uint32_t read_bytes;
  uint32_t repeat = 0;
  uint32_t chunk = 0;  // find-or-put chunk size of this point's clients (0: the table's)
  double assumed_load_factor = 0;  // the load factor model read sizes assume (0: the table's)
};

// Workloads that change the table (a later point would not start from the loaded state).
bool writes(Workload w) {
  return w != Workload::kGet && w != Workload::kGetAll && w != Workload::kRawRead;
}

// Workloads whose operations include find-or-puts (their clients probe chunks).
bool inserts_keys(Workload w) {
  return w == Workload::kFindOrPut || w == Workload::kMixed || w == Workload::kReadIntensive || w == Workload::kWriteIntensive;
}

std::vector<Point> points_of(const BenchOptions& o) {
  std::vector<Point> pts;
  if (!o.ycsb_path.empty()) {  // YCSB: each repetition is a load phase into an empty table, then a run phase
    for (uint32_t rep = 0; rep < o.repeat; ++rep) {
      pts.push_back({Workload::kYcsbLoad, o.read_sizes.front(), 0, rep, 0, o.assumed_load_factors.front()});
      pts.push_back({Workload::kYcsbRun, o.read_sizes.front(), 0, rep, 0, o.assumed_load_factors.front()});
    }
    return pts;
  }
  const double assumed = o.assumed_load_factors.front();
  for (uint32_t rep = 0; rep < o.repeat; ++rep)
  for (Workload w : o.workloads) {
    if (w == Workload::kGet || w == Workload::kGetAll)
      for (const ReadSizeSpec& r : o.read_sizes)
        for (double a : o.assumed_load_factors) pts.push_back({w, r, 0, rep, 0, a});
    else if (w == Workload::kRawRead)
      for (uint32_t b : o.read_bytes) pts.push_back({w, o.read_sizes.front(), b, rep, 0, assumed});
    else if (inserts_keys(w))  // --chunk sweeps the workloads whose find-or-puts probe chunks
      for (uint32_t c : o.chunks) pts.push_back({w, o.read_sizes.front(), 0, rep, c, assumed});
    else
      pts.push_back({w, o.read_sizes.front(), 0, rep, 0, assumed});
  }
  return pts;
}

// Points that draw new keys (OpStream): each gets its own block of new keys.
uint64_t insert_points(const std::vector<Point>& pts) {
  return static_cast<uint64_t>(std::count_if(pts.begin(), pts.end(), [](const Point& p) {
    return p.workload != Workload::kYcsbLoad && p.workload != Workload::kYcsbRun && writes(p.workload);
  }));
}

// One client's share of one point, YCSB phases included.
ClientResult run_point(Engine& engine, const SchemeTable& table, const BenchOptions& o, const Point& pt,
                       const KeySpace& keys, uint32_t client, uint32_t clients, uint64_t insert_point,
                       const ycsb::Workload* w, check::HistoryBuffer* history) {
  if (pt.workload == Workload::kYcsbLoad || pt.workload == Workload::kYcsbRun)
    return run_ycsb_client(engine, table, o, *w, pt.workload, keys, client, clients);
  return run_client(engine, table, o, pt.workload, pt.read_size, pt.read_bytes, pt.chunk, pt.assumed_load_factor, keys,
                    client, clients,
                    insert_point, pt.repeat, history);
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

void check_key_capacity(const BenchOptions& o, const SchemeTable& a, uint32_t clients, uint64_t insert_pts) {
  const unsigned bits = a.key_bits();
  if (bits >= 63) return;
  const double needed = static_cast<double>(o.records) + static_cast<double>(std::max<uint64_t>(insert_pts, 1)) *
                                                             static_cast<double>(clients) * static_cast<double>(o.ops + 1);
  if (needed >= static_cast<double>(1ULL << bits))
    throw InvalidArgument("--records plus new keys (insert points x clients x ops) exceed the " + std::to_string(bits) +
                          "-bit key space: use --key-bytes 8, fewer ops or fewer insert points");
}

// Bytes one process needs for `tables` shards of `region` bytes and `clients` clients' latency
// samples (4 bytes per op, copied once more when merged).
uint64_t bytes_needed(uint64_t region, uint32_t tables, uint64_t ops, uint32_t clients) {
  return region * tables + ops * clients * 8;
}

// --ycsb: the workload file sets records, ops, value size and mix. Returns the parsed workload
// (or null) and adjusts `o`: the table is sized for the records plus the inserts one run phase
// expects (every repetition starts from a fresh table), and nothing is bulk-loaded (YCSB's load
// phase inserts the records through the clients).
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
  const uint64_t limit = max_value_bytes(o);
  if (w->value_bytes() > limit)
    throw InvalidArgument(o.ycsb_path + ": records of fieldcount x fieldlength = " + std::to_string(w->value_bytes()) +
                          " bytes do not fit the " + std::to_string(limit) + " value bytes of " +
                          (scheme_of(o).caps.byte_keys ? "a " + std::string(scheme_of(o).name) + " KV block" : o.storage == Storage::kInline ? "an inline record: use --storage heap (up to " +
                                                       std::to_string(kMaxHeapValueBytes) + " bytes), or e.g. -p fieldcount=1 -p fieldlength=100"
                                                 : "a heap record"));
  for (ycsb::OpType t : ycsb::used_op_types(*w))
    if (t == ycsb::OpType::kScan && !o.ycsb_skip_unsupported)
      throw InvalidArgument(o.ycsb_path + ": operation 'scan' is not supported by --scheme " + std::string(scheme_of(o).name) +
                            " (hash tables have no key order); pass --ycsb-skip-unsupported to skip scans");
  // The file's counts bypass the --ops and --records checks: held to the same bounds here, before
  // anything is sized or loaded (2^64-1 records plus the inserts wrapped o.records).
  if (w->operation_count > kMaxOps)
    throw InvalidArgument(o.ycsb_path + ": operationcount " + std::to_string(w->operation_count) +
                          " is more than 2^32 (the bound of --ops)");
  if (w->record_count > kMaxRecords)
    throw InvalidArgument(o.ycsb_path + ": recordcount " + std::to_string(w->record_count) +
                          " is more than 2^34 (the bound of --records)");
  // Both bounded, so the sum below cannot wrap (inserts <= 2^32: the proportions add up to 1).
  const auto inserts = static_cast<uint64_t>(static_cast<double>(w->operation_count) * w->insert_proportion);
  if (w->record_count + inserts + 1 > kMaxRecords)
    throw InvalidArgument(o.ycsb_path + ": recordcount " + std::to_string(w->record_count) + " plus the " +
                          std::to_string(inserts) + " inserts expected (operationcount x insertproportion) make " +
                          "more than 2^34 records (the bound of --records)");
  o.records = w->record_count + inserts + 1;
  o.value_bytes = w->value_bytes();
  o.ops = w->operation_count;
  o.load_factors.resize(1);
  o.workloads = {Workload::kYcsbLoad, Workload::kYcsbRun};
  return w;
}

// Records one table may gain beyond the loaded ones (o.table_writes, for heap sizing): every new key
// and every out-of-place update of the points between two reloads, plus the private heap blocks
// each client takes per point.
void plan_table_writes(BenchOptions& o, const ycsb::Workload* yw, uint32_t clients) {
  const std::vector<Point> pts = points_of(o);
  const uint64_t writing = static_cast<uint64_t>(std::count_if(pts.begin(), pts.end(), [](const Point& p) { return writes(p.workload); }));
  const uint64_t blocks = kHeapBlock * static_cast<uint64_t>(clients) * (writing + 1);
  if (yw) {  // inserts are in o.records already; updates and read-modify-writes write a record each
    const double updates = static_cast<double>(yw->operation_count) *
                           (yw->update_proportion + yw->read_modify_write_proportion);
    o.table_writes = static_cast<uint64_t>(updates) + blocks;
    return;
  }
  const uint64_t per_point = o.ops * clients;
  o.table_writes = (o.keep_table ? writing : std::min<uint64_t>(writing, 1)) * per_point + blocks;
}

// What differs between the in-process run and the UCX run; the sweep itself is shared.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual uint32_t clients() const = 0;
  virtual uint32_t memory_nodes() const = 0;
  virtual PointInfo layout() const = 0;  // fabric, ranks, memory nodes, clients
  // The table of the table at `load_factor` (UCX --pm-path: the one rank 0 made before the
  // fabric, whose file mapping the fabric registered).
  virtual std::shared_ptr<SchemeTable> table(const BenchOptions& o, double load_factor) {
    return make_table(o, load_factor);
  }
  // A table of `a`'s size is about to be loaded (local: a new fabric; over the file mapping of a
  // persistent table, --pm-path).
  virtual void begin_table(SchemeTable& a) = 0;
  // Formats every shard and bulk-loads `keys` into them (UCX: memory nodes, between two barriers);
  // called again to reload the table between points (a persistent image: restored, see
  // ContinuityAdapter::load).
  virtual void load(SchemeTable& a, const KeySpace& keys) = 0;
  // Runs `fn(engine, client)` on every client, started together; returns the merged result where
  // points are reported (local: here; UCX: rank 0), else nothing.
  virtual std::optional<ClientResult> run(const std::function<ClientResult(Engine&, uint32_t)>& fn) = 0;
  // --history: writes the file of one table's life from every client's buffer (`history[c]`;
  // UCX: each rank holds only its own client's and rank 0 gathers them).
  // The fabric this process uses (local: the one of the current table).
  virtual Fabric& fabric() = 0;
  virtual void write_history(const KeySpace& keys, uint32_t value_bytes, std::vector<check::HistoryBuffer>& history) = 0;
  // --history, before the table's first point: room for `events` per client (--connect: the file
  // itself is the buffer, so that a killed client leaves its history behind).
  virtual void begin_history(const KeySpace&, uint32_t /*value_bytes*/, std::vector<check::HistoryBuffer>&, uint64_t /*events*/) {}
  // This process reports the points (local, --connect: yes; UCX: rank 0).
  virtual bool reports() { return true; }
};

// --memory-limit: the machine's random-read limit on a region of `bytes`, mapped here (in the
// reporting process, while the others wait at the next point's barrier; after a table's last point
// they go on to the next table or to teardown) and measured now; the probe stays mapped so that
// the limit is measured again after each point.
std::unique_ptr<model::MemoryProbe> probe_memory(const BenchOptions& o, uint64_t bytes) {
  if (o.memory_limit == BenchOptions::MemoryProbe::kOff) return nullptr;
  const uint64_t avail = mem_available_bytes();
  if (avail && bytes + (uint64_t{256} << 20) > avail)
    throw InvalidArgument("--memory-limit: a probe region of the table's size (" + bytes_text(bytes) +
                          ") does not fit in MemAvailable (" + bytes_text(avail) + ") beside the table");
  model::MemoryLimitOptions m;
  m.bytes = std::max<uint64_t>(bytes, 4096);
  m.pages = o.memory_limit == BenchOptions::MemoryProbe::kThp ? model::ProbePages::kThp : model::ProbePages::k4;
  m.seed = o.seed;
  m.inspect_pages = [](const void* p, uint64_t n) {
    const PageReport r = region_pages(p, n);
    return std::make_pair(r.kind, r.huge_fraction);
  };
  return std::make_unique<model::MemoryProbe>(m);
}

// Every load factor, every point: the shared sweep. Each point starts from a stated table state:
// by default the loaded one (the shards are reloaded after any point that wrote), or with
// --keep-table the state the previous point left; rows carry the load factor at start and end.
void sweep(const BenchOptions& o, const ycsb::Workload* yw, Backend& b, Reporter* reporter) {
  const std::vector<Point> points = points_of(o);
  const uint32_t clients = b.clients();
  const uint64_t llc = llc_bytes();
  for (double lf : o.load_factors) {
    auto table = b.table(o, lf);
    check_key_capacity(o, *table, clients, insert_points(points));
    b.begin_table(*table);
    const KeySpace keys(yw ? yw->record_count : o.records, table->key_bits(), o.seed, o.zipf_theta);
    const KeySpace bulk = yw ? KeySpace(0, table->key_bits(), o.seed) : keys;
    b.load(*table, bulk);
    // Records in the table as loaded: the bulk-loaded ones, or those of a recovered persistent
    // image (--pm-path reopened; where points are reported, the memory node holding it).
    const uint64_t loaded = table->recovered_records().value_or(bulk.records());
    const uint64_t records = table->recovered_records().value_or(keys.records());
    double warmup = 0;
    if (!o.cold)
      if (auto w = b.run([&](Engine& e, uint32_t) { return warm_up(e, *table, b.memory_nodes()); })) warmup = w->seconds;
    std::unique_ptr<model::MemoryProbe> probe = b.reports() ? probe_memory(o, table->region_bytes() * b.memory_nodes()) : nullptr;
    const std::optional<model::MemoryLimit> limit = probe ? std::optional(probe->measure()) : std::nullopt;
    // The pages memory node 0's region got (where this process hosts it), after the load and the
    // warm-up touched them.
    PageReport pages;
    if (const auto r = b.fabric().local_region(0); !r.empty() && b.reports()) pages = region_pages(r.data(), r.size());
    if (limit && !o.quiet && !pages.kind.empty())
      std::printf("table pages (memory node 0): %s, %.0f %% of its resident bytes in huge pages\n", pages.kind.c_str(),
                  100 * pages.huge_fraction);
    if (limit && !o.quiet)
      std::printf("memory limit (%s pages, %s, one core): %.1f M random 8-byte loads/s in prefetched batches of %u, "
                  "%.0f ns per dependent load (probe %.1f s)\n",
                  limit->pages.c_str(), bytes_text(limit->bytes).c_str(), limit->batched_ops_per_s / 1e6, limit->batch,
                  limit->dependent_ns, limit->seconds);
    uint64_t present = loaded;  // records in the table (known where points are reported)
    bool dirty = false;                 // a point wrote since the last load
    uint64_t insert_point = 0;
    // --history records every client's operations over this table's whole life (every point runs
    // on it: the options force --keep-table).
    std::vector<check::HistoryBuffer> history(o.history_path.empty() ? 0 : clients);
    if (!history.empty()) b.begin_history(keys, table->value_bytes(), history, points.size() * o.ops);
    for (const Point& pt : points) {
      // A YCSB load phase always starts from an empty table, whatever --keep-table says, and its
      // run phase from the table that load phase left.
      const bool reload = pt.workload == Workload::kYcsbLoad  ? dirty
                          : pt.workload == Workload::kYcsbRun ? false
                                                              : dirty && !o.keep_table;
      if (reload) {
        b.load(*table, bulk);
        present = loaded;
        dirty = false;
      }
      const uint64_t ip = insert_point;
      if (pt.workload != Workload::kYcsbLoad && pt.workload != Workload::kYcsbRun && writes(pt.workload)) ++insert_point;
      const uint64_t slots_start = table->slots_in(b.fabric());
      const std::optional<bool> resizing_start = table->table_resizing();
      const auto total = b.run([&](Engine& e, uint32_t c) {
        check::HistoryBuffer* h = history.empty() ? nullptr : &history[c];
        if (h && h->events().empty()) h->reserve(o.ops * o.repeat);
        return run_point(e, *table, o, pt, keys, c, clients, ip, yw, h);
      });
      dirty = dirty || writes(pt.workload);
      if (!total) continue;
      // The limit again, right after this point: it moves even between probes seconds apart (0.80-1.48x
      // on a 1 GB region, results.md), so a row's fraction of the limit is stated against both.
      const std::optional<model::MemoryLimit> after = probe ? std::optional(probe->measure()) : std::nullopt;
      PointInfo info = b.layout();
      info.scheme = scheme_of(o).name;
      info.scheme_detail = table->describe();
      info.scheme_options = table->report_options();
      info.records = records;
      info.slots = table->slots_in(b.fabric());  // at the end (race grows)
      info.target_load_factor = lf;
      info.workload = pt.workload;
      info.read_size = pt.read_size.slots;
      info.read_bytes = pt.read_bytes;
      info.chunk = pt.chunk ? pt.chunk : o.chunks.front();
      info.assumed_load_factor = pt.assumed_load_factor;
      info.model_present_fraction = reported_present_fraction(pt.read_size, model_present_fraction(o, pt.workload));
      info.read_size_policy = pt.read_size.text();
      info.repeat = pt.repeat;
      info.ycsb = yw ? ycsb::summary(*yw) : "";
      info.records_start = present;
      // 0 where this process cannot count the slots (a race table seen from a --connect client), as
      // the JSON's load_factor.
      info.load_factor_start = slots_start ? static_cast<double>(present) / static_cast<double>(slots_start) : 0.0;
      present = present + total->inserted - std::min(present + total->inserted, total->erased);
      info.records_end = present;
      info.load_factor_end = info.slots ? static_cast<double>(present) / static_cast<double>(info.slots) : 0.0;
      info.warmup_seconds = warmup;
      info.table_bytes = table->region_bytes() * b.memory_nodes();
      info.llc_bytes = llc;
      info.memory_limit = limit;
      info.memory_limit_after = after;
      info.region_pages = pages;
      info.persistence = table->persistence();
      info.table_resizes = table->table_resizes();
      info.resizing_start = resizing_start;
      info.resizing_end = table->table_resizing();
      reporter->report(info, *total);
      if (after && !o.quiet)
        std::printf("memory limit after this point: %.1f M random 8-byte loads/s, %.0f ns per dependent load (probe %.1f s)\n",
                    after->batched_ops_per_s / 1e6, after->dependent_ns, after->seconds);
    }
    if (!history.empty()) b.write_history(keys, table->value_bytes(), history);
  }
}

class LocalBackend final : public Backend {
 public:
  LocalBackend(const BenchOptions& o) : o_(o), clients_(o.symmetric ? o.memory_nodes : o.clients) {}
  uint32_t clients() const override { return clients_; }
  uint32_t memory_nodes() const override { return o_.memory_nodes; }
  PointInfo layout() const override {
    PointInfo p;
    p.fabric = "local";
    p.ranks = o_.symmetric ? o_.memory_nodes : o_.memory_nodes + clients_;
    p.memory_nodes = o_.memory_nodes;
    p.clients = clients_;
    return p;
  }
  void begin_table(SchemeTable& a) override {
    fabric_.reset();  // free the previous table first
    const auto pm = a.persistent_region();  // --pm-path: the file mapping is the region
    fabric_ = pm.empty() ? make_local_fabric(std::vector<uint64_t>(o_.memory_nodes, a.region_bytes()),
                                             o_.huge_pages == Switch::kOn ? RegionPages::kHuge : RegionPages::kSmall)
                         : make_local_fabric_over({pm});
  }
  void load(SchemeTable& a, const KeySpace& keys) override {
    load_table(a, *fabric_, keys, progress_bar(o_, keys.records(), "loading " + std::to_string(keys.records()) + " records"));
  }
  std::optional<ClientResult> run(const std::function<ClientResult(Engine&, uint32_t)>& fn) override {
    std::vector<ClientResult> results(clients_);
    std::vector<std::exception_ptr> errors(clients_);
    std::barrier sync(clients_);
    std::vector<std::unique_ptr<Transport>> transports;
    for (uint32_t c = 0; c < clients_; ++c) transports.push_back(fabric_->connect());
    std::vector<std::thread> threads;
    for (uint32_t c = 0; c < clients_; ++c) {
      threads.emplace_back([&, c] {
        Engine engine(*transports[c]);
        sync.arrive_and_wait();
        try {
          results[c] = fn(engine, c);
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
    return total;
  }
  Fabric& fabric() override { return *fabric_; }
  void write_history(const KeySpace& keys, uint32_t value_bytes, std::vector<check::HistoryBuffer>& history) override {
    write_kv_mix_history(o_, keys, value_bytes, history);
  }

 private:
  const BenchOptions& o_;
  uint32_t clients_;
  std::unique_ptr<Fabric> fabric_;
};

// --fabric sim: the table in a SimFabric, the clients simulated in its virtual time (a coroutine
// each, one running at a time: sim_fabric.cpp).
class SimBackend final : public Backend {
 public:
  SimBackend(const BenchOptions& o, SimProfile profile)
      : o_(o), clients_(o.symmetric ? o.memory_nodes : o.clients), profile_(std::move(profile)) {}
  uint32_t clients() const override { return clients_; }
  uint32_t memory_nodes() const override { return o_.memory_nodes; }
  PointInfo layout() const override {
    PointInfo p;
    p.fabric = "sim";
    p.ranks = 1;
    p.memory_nodes = o_.memory_nodes;
    p.clients = clients_;
    p.sim_profile = profile_;
    p.sim_events = last_.events;
    p.sim_wall_seconds = last_.wall_seconds;
    p.sim_client_cpu_ns = last_.client_cpu_ns;
    return p;
  }
  void begin_table(SchemeTable& a) override {
    if (!a.persistent_region().empty()) throw InvalidArgument("--fabric sim does not simulate a --pm-path table");
    fabric_.reset();
    fabric_ = make_sim_fabric(std::vector<uint64_t>(o_.memory_nodes, a.region_bytes()), profile_);
  }
  void load(SchemeTable& a, const KeySpace& keys) override {
    load_table(a, *fabric_, keys, progress_bar(o_, keys.records(), "loading " + std::to_string(keys.records()) + " records"));
  }
  std::optional<ClientResult> run(const std::function<ClientResult(Engine&, uint32_t)>& fn) override {
    std::vector<ClientResult> results(clients_);
    fabric_->run(clients_, [&](uint32_t c, Transport& t) {
      Engine engine(t);
      results[c] = fn(engine, c);
    });
    last_ = fabric_->last_run();
    ClientResult total;
    for (const auto& r : results) total.merge(r);
    return total;
  }
  Fabric& fabric() override { return *fabric_; }
  void write_history(const KeySpace& keys, uint32_t value_bytes, std::vector<check::HistoryBuffer>& history) override {
    write_kv_mix_history(o_, keys, value_bytes, history);
  }

 private:
  const BenchOptions& o_;
  uint32_t clients_;
  SimProfile profile_;
  std::unique_ptr<SimFabric> fabric_;
  SimRunStats last_;
};

class UcxBackend final : public Backend {
 public:
  // `pm_table`: --pm-path on the memory node, the table whose file mapping `fabric` registered.
  UcxBackend(const BenchOptions& o, UcxFabric& fabric, std::shared_ptr<SchemeTable> pm_table)
      : o_(o), fabric_(fabric), transport_(fabric.is_client() ? fabric.connect() : nullptr),
        pm_table_(std::move(pm_table)) {}
  uint32_t clients() const override { return fabric_.client_count(); }
  uint32_t memory_nodes() const override { return fabric_.memory_nodes(); }
  PointInfo layout() const override {
    PointInfo p;
    p.fabric = "ucx";
    p.ranks = static_cast<uint32_t>(fabric_.size());
    p.memory_nodes = fabric_.memory_nodes();
    p.clients = fabric_.client_count();
    // Memory node 0's (this process, rank 0, unless symmetric: then every rank serves and is a client).
    p.serve_mode = serve_mode_name(fabric_.serve_mode());
    p.client_wait = client_wait_name(fabric_.client_wait());  // every rank resolves it from the same options
    p.read_coalescing = read_coalescing_name(fabric_.read_coalescing());
    p.ucx_transports = fabric_.transports();
    return p;
  }
  std::shared_ptr<SchemeTable> table(const BenchOptions& o, double load_factor) override {
    if (pm_table_) return pm_table_;  // --pm-path: one load factor, one table
    return make_table(o, load_factor);
  }
  void begin_table(SchemeTable&) override {}  // the regions were sized for every load factor
  void load(SchemeTable& a, const KeySpace& keys) override {
    fabric_.barrier();  // no client is still reading the old table
    load_table(a, fabric_, keys, fabric_.rank() == 0 ? progress_bar(o_, keys.records(), "loading shard 0") : nullptr);
    fabric_.barrier();  // no client reads the new one before it is complete
  }
  std::optional<ClientResult> run(const std::function<ClientResult(Engine&, uint32_t)>& fn) override {
    fabric_.barrier();
    ClientResult mine;
    if (fabric_.is_client()) {
      const uint32_t client = static_cast<uint32_t>(
          o_.symmetric ? fabric_.rank() : fabric_.rank() - static_cast<int>(fabric_.memory_nodes()));
      Engine engine(*transport_);
      mine = fn(engine, client);
      fabric_.client_done();
    }
    fabric_.serve();  // memory nodes: progress (blocking on the event fd) until every client is done
    std::vector<std::byte> bytes = fabric_.is_client() ? mine.serialize() : std::vector<std::byte>{};
    auto all = fabric_.gather(bytes);
    if (fabric_.rank() != 0) return std::nullopt;
    ClientResult total;
    for (const auto& b : all)
      if (!b.empty()) total.merge(ClientResult::deserialize(b));
    return total;
  }
  bool reports() override { return fabric_.rank() == 0; }
  Fabric& fabric() override { return fabric_; }
  void write_history(const KeySpace& keys, uint32_t value_bytes, std::vector<check::HistoryBuffer>& history) override {
    const uint32_t client = static_cast<uint32_t>(
        o_.symmetric ? fabric_.rank() : fabric_.rank() - static_cast<int>(fabric_.memory_nodes()));
    const check::HistoryBuffer none;
    gather_kv_mix_history(fabric_, o_, keys, value_bytes, fabric_.is_client() ? history.at(client) : none);
  }

 private:
  const BenchOptions& o_;
  UcxFabric& fabric_;
  std::unique_ptr<Transport> transport_;
  std::shared_ptr<SchemeTable> pm_table_;
};

// --connect: this process is one client of memory nodes served by `rdmahash serve`.
class ConnectBackend final : public Backend {
 public:
  ConnectBackend(const BenchOptions& o, UcxConnection& c)
      : o_(o), conn_(c), transport_(c.fabric->connect()), client_(c.client_id % kConnectClientIds) {}
  uint32_t clients() const override { return kConnectClientIds; }  // the client index space
  uint32_t memory_nodes() const override { return conn_.fabric->memory_nodes(); }
  PointInfo layout() const override {
    PointInfo p;
    p.fabric = "ucx-connect";
    p.client_wait = client_wait_name(conn_.client_wait);
    p.read_coalescing = read_coalescing_name(conn_.read_coalescing);
    p.ranks = 1;
    p.memory_nodes = conn_.fabric->memory_nodes();
    p.clients = 1;
    return p;
  }
  void begin_table(SchemeTable& a) override {
    if (a.region_bytes() != conn_.fabric->region_bytes(0))
      throw FabricError("the table of memory node 0 has a region of " + std::to_string(conn_.fabric->region_bytes(0)) +
                        " bytes, but its table spec gives " + std::to_string(a.region_bytes()) +
                        ": this client and the server are different builds");
  }
  void load(SchemeTable&, const KeySpace&) override {}  // the servers loaded the table
  std::optional<ClientResult> run(const std::function<ClientResult(Engine&, uint32_t)>& fn) override {
    // race names lock owners by client id and marks dead ones for good: ids must not wrap.
    if (scheme_of(o_).caps.client_ids && conn_.client_id >= kConnectClientIds)
      throw InvalidArgument(std::string(scheme_of(o_).name) + ": memory node 0 has given out " + std::to_string(conn_.client_id) +
                            " client ids; " + scheme_of(o_).name + " needs ids below " + std::to_string(kConnectClientIds) +
                            " (dead clients' ids are never reused): restart the servers");
    Engine engine(*transport_);
    return fn(engine, client_);
  }
  Fabric& fabric() override { return *conn_.fabric; }
  void begin_history(const KeySpace& keys, uint32_t value_bytes, std::vector<check::HistoryBuffer>& history,
                     uint64_t events) override {
    // Named by the server's id, not the wrapped index: the kv-mix values carry it in bits 44..63.
    if (conn_.client_id >= (uint32_t{1} << 20) - 1)
      throw InvalidArgument("--history: memory node 0 has given out " + std::to_string(conn_.client_id) +
                            " client ids; a history names its client by that id, which must be below 2^20 - 1 "
                            "(every written value must be unique): restart the servers");
    history.at(client_).set_client(conn_.client_id);
    history.at(client_).map_file(o_.history_path, kv_mix_initial_state(o_, keys, value_bytes), events);
  }
  void write_history(const KeySpace&, uint32_t, std::vector<check::HistoryBuffer>& history) override {
    history.at(client_).close_file();
  }

 private:
  const BenchOptions& o_;
  UcxConnection& conn_;
  std::unique_ptr<Transport> transport_;
  uint32_t client_;
};

// UCX: every rank checks that the memory nodes and clients on its host fit in its MemAvailable,
// and all ranks agree on the outcome (so the error is an InvalidArgument on every rank).
void check_memory_ucx(const BenchOptions& o, uint64_t region) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool memory_node = o.symmetric || static_cast<uint32_t>(rank) < o.memory_nodes;
  const bool client = o.symmetric || static_cast<uint32_t>(rank) >= o.memory_nodes;
  const uint64_t clients = o.symmetric ? static_cast<uint64_t>(ranks) : static_cast<uint64_t>(ranks) - o.memory_nodes;
  // Rank 0 also holds every client's latency samples while it merges them.
  const uint64_t mine = (memory_node ? region : 0) + (client ? o.ops * 4 : 0) + (rank == 0 ? o.ops * clients * 8 : 0);
  check_host_memory_mpi(mine, "one host's memory nodes (" + bytes_text(region) + " each) and clients",
                        "use fewer --records, a lower --value-bytes or fewer --memory-nodes");
}

}  // namespace


// Up front, before any point runs (local and sim fabrics: every shard lives in this process): the
// largest table of the sweep must fit.
static void check_memory_in_process(const BenchOptions& o, uint32_t clients) {
  if (const uint64_t avail = mem_available_bytes())
    for (double lf : o.load_factors) {
      const uint64_t region = make_table(o, lf)->region_bytes();
      // --pm-path without --keep-table: one more table, the copy of the loaded image reloads restore.
      const bool image_copy = !o.pm_path.empty() && !o.keep_table;
      const uint64_t need = bytes_needed(region, o.memory_nodes + (image_copy ? 1 : 0), o.ops, clients);
      if (need > avail)
        throw InvalidArgument(memory_error(need, avail, std::to_string(o.memory_nodes) + " shard(s) of " +
                                                          bytes_text(region) + (image_copy ? " (and a copy of the image)" : "") +
                                                          " plus latency samples"));
    }
}

int run_local(const BenchOptions& o_in) {
  BenchOptions o = o_in;
  if (!o.history_path.empty()) o.keep_table = true;  // a history is one table's whole life
  const auto yw = prepare_ycsb(o, stderr);
  const uint32_t clients = o.symmetric ? o.memory_nodes : o.clients;
  plan_table_writes(o, yw.get(), clients);
  if (!o.history_path.empty() && !history_writable(o.history_path))
    throw InvalidArgument("cannot open --history file '" + o.history_path + "' for writing");
  check_memory_in_process(o, clients);
  Reporter reporter(o);
  LocalBackend backend(o);
  sweep(o, yw.get(), backend, &reporter);
  return 0;
}

int run_sim(const BenchOptions& o_in) {
  BenchOptions o = o_in;
  if (!o.history_path.empty()) o.keep_table = true;  // a history is one table's whole life
  if (!o.pm_path.empty()) throw InvalidArgument("--fabric sim does not simulate a --pm-path table");
  // No warm-up: virtual time has no page faults, and touching every page costs simulated events.
  o.cold = true;
  SimProfile profile;
  try {
    profile = load_sim_profile(o.sim_profile);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(std::string("--sim-profile: ") + e.what());
  }
  const auto yw = prepare_ycsb(o, stderr);
  const uint32_t clients = o.symmetric ? o.memory_nodes : o.clients;
  plan_table_writes(o, yw.get(), clients);
  if (!o.history_path.empty() && !history_writable(o.history_path))
    throw InvalidArgument("cannot open --history file '" + o.history_path + "' for writing");
  check_memory_in_process(o, clients);
  Reporter reporter(o);
  SimBackend backend(o, profile);
  sweep(o, yw.get(), backend, &reporter);
  return 0;
}

int run_ucx_ranks(const BenchOptions& o, uint64_t region);

int run_ucx(const BenchOptions& o_in) {
  BenchOptions o = o_in;
  if (!o.history_path.empty()) o.keep_table = true;  // a history is one table's whole life
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const auto yw = prepare_ycsb(o, rank == 0 ? stderr : nullptr);  // every rank parses the same file: same outcome
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const uint32_t clients = o.symmetric ? static_cast<uint32_t>(ranks)
                                       : static_cast<uint32_t>(std::max<int>(ranks - static_cast<int>(o.memory_nodes), 1));
  plan_table_writes(o, yw.get(), clients);
  check_ucx_history(o);
  // Every rank computes the same sizes, so the collective create() agrees on the region size.
  uint64_t region = 0;
  for (double lf : o.load_factors) region = std::max(region, make_table(o, lf)->region_bytes());
  if (!o.symmetric && static_cast<uint32_t>(ranks) <= o.memory_nodes)
    throw InvalidArgument("no client ranks: run more ranks (" + std::to_string(ranks) + ") than --memory-nodes (" +
                          std::to_string(o.memory_nodes) + "), or use --symmetric");
  check_memory_ucx(o, region);
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
  fc.direct_access = o.direct_access == Switch::kOn;
  fc.region_pages = o.huge_pages == Switch::kOn ? RegionPages::kHuge : RegionPages::kSmall;
  fc.serve_mode = o.serve_mode;
  fc.serve_spin = std::chrono::microseconds(o.serve_spin_us);
  fc.client_wait = o.client_wait;
  fc.client_spin = std::chrono::microseconds(o.client_spin_us);
  fc.read_coalescing = o.read_coalescing;
  // --pm-path: the memory node (rank 0) exposes the file mapping as its region; the table owning
  // the mapping outlives the fabric that registered it.
  int my_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  std::shared_ptr<SchemeTable> pm_table;
  if (!o.pm_path.empty() && my_rank == 0) {
    pm_table = make_table(o, o.load_factors.front());
    fc.region_address = pm_table->persistent_region().data();
  }
  auto fabric = UcxFabric::create(fc);
  o.memory_nodes = fabric->memory_nodes();  // --symmetric: every rank is a memory node
  std::unique_ptr<Reporter> reporter;
  if (fabric->rank() == 0) reporter = std::make_unique<Reporter>(o);
  {
    UcxBackend backend(o, *fabric, pm_table);
    sweep(o, yw.get(), backend, reporter.get());
  }
  fabric->barrier();
  return 0;
}

int run_connect(const BenchOptions& o_in) {
  BenchOptions o = o_in;
  UcxConnection conn;
  std::string token;
  if (!o.token_file.empty()) {
    try {
      token = load_token_file(o.token_file, false);
    } catch (const std::invalid_argument& e) {
      throw InvalidArgument(e.what());
    }
  }
  try {
    UcxClientOptions co;
    co.direct_access = o.direct_access == Switch::kOn;
    co.client_wait = o.client_wait;
    co.client_spin = std::chrono::microseconds(o.client_spin_us);
    co.read_coalescing = o.read_coalescing;
    conn = connect_ucx_servers(o.connect, token, co);
  } catch (const FabricError& e) {  // refused or unreachable: the address is the bad input
    throw InvalidArgument(e.what());
  }
  apply_table_spec(o, conn.table_spec);
  o.fabric = FabricKind::kUcx;
  o.keep_table = true;  // the table is shared: nobody reloads it
  if (auto err = o.error(); !err.empty()) throw InvalidArgument(err);
  for (Workload w : o.workloads)
    if (w == Workload::kUpdate && o.value_bytes == 0)
      throw InvalidArgument("workload update replaces values: the served table has none (serve it with --value-bytes)");
  if (o.location_cache != 0 && o.scheme != SchemeId::kCluster)
    throw InvalidArgument("--location-cache applies to --scheme cluster: the served table is " +
                          std::string(scheme(o.scheme).name));
  if (!o.history_path.empty() && !history_writable(o.history_path))
    throw InvalidArgument("cannot open --history file '" + o.history_path + "' for writing");
  if (const uint64_t avail = mem_available_bytes(); avail && o.ops * 8 > avail)
    throw InvalidArgument(memory_error(o.ops * 8, avail, "the latency samples of --ops"));
  Reporter reporter(o);
  ConnectBackend backend(o, conn);
  sweep(o, nullptr, backend, &reporter);
  return 0;
}

int run_serve(const BenchOptions& o_in, const ServeOptions& s) {
  BenchOptions o = o_in;
  o.command = "rdmahash serve";  // the adapters' messages (recovered, a failed bulk load)
  o.fabric = FabricKind::kUcx;
  o.keep_table = true;                 // a --pm-path table is the file: no copy of the image is kept
  o.workloads = {Workload::kGet};      // the clients' workloads are theirs to validate
  if (o.load_factors.size() != 1) throw InvalidArgument("rdmahash serve builds one table: give one --load-factor");
  if (s.node >= o.memory_nodes)
    throw InvalidArgument("--node " + std::to_string(s.node) + " does not exist: --memory-nodes is " + std::to_string(o.memory_nodes));
  if (auto err = o.error(); !err.empty()) throw InvalidArgument(err);
  o.table_capacity = s.capacity ? s.capacity : o.records + std::max<uint64_t>(o.records, 100000);
  // Sizes grow with the capacity (race's pool, linear heaps): beyond --records' own bound they wrap.
  if (o.table_capacity < o.records)
    throw InvalidArgument("--capacity must be at least --records (" + std::to_string(o.records) + "), got " +
                          std::to_string(o.table_capacity));
  if (o.table_capacity > (uint64_t{1} << 34))
    throw InvalidArgument("--capacity must be at most 2^34 (records the table may come to hold, like --records), got " +
                          std::to_string(o.table_capacity));
  o.table_writes = o.table_capacity - o.records;
  auto table = make_table(o, o.load_factors.front());
  if (const uint64_t avail = mem_available_bytes(); avail && table->region_bytes() > avail)
    throw InvalidArgument(memory_error(table->region_bytes(), avail, "memory node " + std::to_string(s.node)));
  UcxServerConfig sc;
  sc.node = s.node;
  sc.nodes = o.memory_nodes;
  sc.region_bytes = table->region_bytes();
  sc.region_address = table->persistent_region().data();  // --pm-path: the file mapping (else null)
  sc.listen = s.listen;
  sc.table_spec = table_spec(o);
  sc.handle_signals = true;
  bool created = false;
  if (!s.token_file.empty()) {
    try {
      sc.token = load_token_file(s.token_file, true, &created);
    } catch (const std::invalid_argument& e) {
      throw InvalidArgument(e.what());
    }
  }
  sc.serve_mode = o.serve_mode;
  sc.spin = std::chrono::microseconds(o.serve_spin_us);
  std::unique_ptr<UcxServer> server;
  try {
    server = UcxServer::create(sc);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(std::string("--listen: ") + e.what());
  }
  const KeySpace keys(o.records, table->key_bits(), o.seed, o.zipf_theta);
  load_table(*table, server->fabric(), keys, progress_bar(o, keys.records(), "loading shard " + std::to_string(s.node)));
  server->set_loss_handler(table->loss_handler(server->fabric()));
  const uint64_t records = table->recovered_records().value_or(keys.records());
  std::printf("rdmahash serve: memory node %u of %u (%s, %llu records%s, %s) listening on %s\n", s.node, o.memory_nodes,
              table->describe().c_str(), static_cast<unsigned long long>(records),
              table->recovered_records() ? " recovered" : "", bytes_text(table->region_bytes()).c_str(),
              server->address().c_str());
  if (created) std::fprintf(stderr, "rdmahash serve: created token file %s (mode 0600): give the clients a copy\n", s.token_file.c_str());
  std::fflush(stdout);
  const int sig = server->run(stderr);
  const auto st = server->stats();
  std::printf("rdmahash serve: stopped by %s: %llu clients served (%llu finished, %llu lost), %llu connections dropped, "
              "%llu armed waits, %llu spin pauses, %llu failed accepts\n",
              sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "request", static_cast<unsigned long long>(st.connected),
              static_cast<unsigned long long>(st.finished), static_cast<unsigned long long>(st.lost),
              static_cast<unsigned long long>(st.dropped), static_cast<unsigned long long>(st.sleeps),
              static_cast<unsigned long long>(st.spin_pauses), static_cast<unsigned long long>(st.accept_failures));
  std::fflush(stdout);
  return 0;
}

}  // namespace rdmahash::bench
