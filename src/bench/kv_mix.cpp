#include "bench/kv_mix.h"

#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>

#include "common/hash.h"

namespace rdmahash::bench {
namespace {

// Draw thresholds out of 100: get, put, update, erase, find_or_put (see kv_mix.h).
constexpr uint32_t kGetPct = 40, kPutPct = 15, kUpdatePct = 15, kErasePct = 10;

uint64_t first_key_index(const BenchOptions& o) { return o.records > o.kv_keys / 2 ? o.records - o.kv_keys / 2 : 0; }

uint64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

void make_value(uint64_t tag, std::span<std::byte> out) {
  if (out.empty()) return;
  std::memcpy(out.data(), &tag, std::min<size_t>(8, out.size()));
  fill_value(tag, out.subspan(std::min<size_t>(8, out.size())));
}

uint64_t history_events(const BenchOptions& o, uint64_t clients) {
  return o.kv_keys + clients * o.ops * o.repeat;
}

}  // namespace

std::string kv_mix_error(const BenchOptions& o) {
  const bool mix = std::find(o.workloads.begin(), o.workloads.end(), Workload::kKvMix) != o.workloads.end();
  if (mix) {
    if (o.kv_keys == 0 || o.kv_keys > (1u << 20)) return "--keys must be in [1, 2^20]";
    if (o.value_bytes > 0 && o.value_bytes < 8)
      return "workload kv-mix writes a unique tag per write: --value-bytes must be 0 or at least 8";
    if (o.ops >= (uint64_t{1} << 34)) return "workload kv-mix: --ops must be below 2^34";
    if (o.repeat >= 1024) return "workload kv-mix: --repeat must be below 1024";
    if (o.zipf_theta > 0) return "workload kv-mix needs distinct keys: use --distribution uniform";
  }
  if (o.history_path.empty()) return {};
  if (!o.ycsb_path.empty()) return "--history records workload kv-mix, not --ycsb runs";
  for (Workload w : o.workloads)
    if (w != Workload::kKvMix)
      return std::string("--history records workload kv-mix only (workload ") + to_string(w) +
             " writes keys the history would not know of)";
  if (o.load_factors.size() != 1) return "--history needs one --load-factor (each builds a new table)";
  if (o.fabric != FabricKind::kUcx && history_events(o, o.symmetric ? o.memory_nodes : o.clients) > check::kMaxEvents)
    return "--history would record more than 2^24 events: use fewer --ops, --clients or --repeat";
  return {};
}

KvMix::KvMix(const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes, uint32_t client, uint32_t repeat,
             check::HistoryBuffer* history)
    : keys_(keys),
      first_(first_key_index(o)),
      count_(o.kv_keys),
      value_bytes_(value_bytes),
      client_(history && history->client() ? *history->client() : client),
      tag_base_((uint64_t{client_} + 1) << 44 | uint64_t{repeat} << 34),
      state_(hash::mix64(o.seed * 0x100000001B3ULL + uint64_t{client} * 1031 + repeat + 0x4B564D49ULL)),
      history_(history) {}

uint64_t KvMix::rng() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return hash::mix64(state_);
}

Task<void> KvMix::next(KvClient* kv, const Engine* engine, ClientResult* r) {
  check::HistoryEvent ev;
  ev.invoke_ns = steady_ns(engine->batch_clock());  // before this operation queues anything
  ev.client = client_;
  ev.key = keys_.key(first_ + hash::range(rng(), count_));
  uint32_t draw = static_cast<uint32_t>(hash::range(rng(), 100));
  while (value_bytes_ == 0 && draw >= kGetPct && draw < kGetPct + kPutPct + kUpdatePct)
    draw = static_cast<uint32_t>(hash::range(rng(), 100));  // no values: put/update are skipped
  const check::HistOp op = draw < kGetPct ? check::HistOp::kGet
                         : draw < kGetPct + kPutPct ? check::HistOp::kPut
                         : draw < kGetPct + kPutPct + kUpdatePct ? check::HistOp::kUpdate
                         : draw < kGetPct + kPutPct + kUpdatePct + kErasePct ? check::HistOp::kErase
                         : check::HistOp::kFindOrPut;
  ev.op = static_cast<uint8_t>(op);
  std::vector<std::byte> value(value_bytes_);
  if (op == check::HistOp::kPut || op == check::HistOp::kUpdate || op == check::HistOp::kFindOrPut) {
    make_value(tag_base_ | seq_++, value);
    ev.written = check::value_digest(value);
  }
  // Pending until it completes: a client killed now leaves it as "outcome unknown".
  check::HistoryEvent pending = ev;
  pending.response_ns = ev.invoke_ns;
  pending.status = check::kStatusError;
  const uint64_t slot = history_ ? history_->push(pending) : 0;
  OpResult res;
  std::exception_ptr failed;
  try {
    switch (op) {
      case check::HistOp::kGet: res = co_await kv->get(ev.key, value); break;
      case check::HistOp::kPut: res = co_await kv->put(ev.key, value); break;
      case check::HistOp::kUpdate: res = co_await kv->update(ev.key, value); break;
      case check::HistOp::kErase: res = co_await kv->erase(ev.key); break;
      default: res = co_await kv->find_or_put(ev.key, value); break;
    }
  } catch (const FabricError&) {
    failed = std::current_exception();  // outcome unknown: recorded as such, then reported
  }
  ev.response_ns = steady_ns(engine->batch_clock());  // the boundary after its last request completed
  ev.status = failed ? check::kStatusError : static_cast<uint8_t>(res.status);
  if (!failed && op == check::HistOp::kGet && res.status == Status::kFound) ev.read = check::value_digest(value);
  if (history_) history_->set(slot, ev);
  if (failed) std::rethrow_exception(failed);
  r->add_outcome(res);
}

std::vector<check::HistoryEvent> kv_mix_initial_state(const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes) {
  std::vector<check::HistoryEvent> init;
  std::vector<std::byte> value(value_bytes);
  for (uint64_t i = first_key_index(o); i < first_key_index(o) + o.kv_keys; ++i) {
    check::HistoryEvent e;
    e.client = check::kInitClient;
    e.op = static_cast<uint8_t>(check::HistOp::kInit);
    e.key = keys.key(i);
    if (i < keys.records()) {
      fill_value(e.key, value);  // what the bulk load stored
      e.written = check::value_digest(value);
      e.status = static_cast<uint8_t>(Status::kInserted);
    } else {
      e.status = static_cast<uint8_t>(Status::kNotFound);
    }
    init.push_back(e);
  }
  return init;
}

void write_kv_mix_history(const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes,
                          std::span<const check::HistoryBuffer> clients) {
  std::vector<std::span<const check::HistoryEvent>> parts;
  for (const auto& c : clients) parts.push_back(c.events());
  check::write_history(o.history_path, kv_mix_initial_state(o, keys, value_bytes), parts);
}

void gather_kv_mix_history(UcxFabric& fabric, const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes,
                           const check::HistoryBuffer& mine) {
  const auto all = fabric.gather(mine.serialize());
  if (fabric.rank() != 0) return;
  std::vector<check::HistoryBuffer> clients(all.size());
  for (size_t i = 0; i < all.size(); ++i)
    for (const auto& e : check::HistoryBuffer::deserialize(all[i])) clients[i].push(e);
  write_kv_mix_history(o, keys, value_bytes, clients);
}

void check_ucx_history(const BenchOptions& o) {
  if (o.history_path.empty()) return;
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool client = o.symmetric || static_cast<uint32_t>(rank) >= o.memory_nodes;
  // The clock story: the history orders operations by CLOCK_MONOTONIC, which is one clock per
  // running kernel. Ranks under one kernel (one boot id) share it — processes of one machine, and
  // the "hosts" of scripts/hosts.sh, which are network and UTS namespaces of one machine; ranks
  // under different kernels (separate machines) do not, and their times cannot be ordered.
  std::string id;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) id = buf;
    std::fclose(f);
  }
  if (id.empty()) {  // no boot id: the host name, the stricter test
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    id.assign(name, static_cast<size_t>(len));
  }
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : id) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  uint64_t lo = client ? h : ~0ULL, hi = client ? h : 0;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (lo != hi)
    throw InvalidArgument("--history needs every client rank under one kernel (one boot id): CLOCK_MONOTONIC is "
                          "per machine, so times of different machines cannot be ordered");
  const uint64_t clients = o.symmetric ? static_cast<uint64_t>(ranks)
                                       : static_cast<uint64_t>(std::max(0, ranks - static_cast<int>(o.memory_nodes)));
  if (history_events(o, clients) > check::kMaxEvents)
    throw InvalidArgument("--history would record more than 2^24 events: use fewer --ops, ranks or --repeat");
  // Rank 0 writes the file after the run: find out now, on every rank alike, whether it can
  // (-1: not a regular file; rank 0, the one that reports, keeps the message).
  int writable = 0;
  std::string why;
  if (rank == 0) {
    try {
      writable = history_writable(o.history_path);
    } catch (const InvalidArgument& e) {
      writable = -1;
      why = e.what();
    }
  }
  MPI_Bcast(&writable, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (writable < 0)
    throw InvalidArgument(why.empty() ? "--history file '" + o.history_path + "' is not a regular file" : why);
  if (!writable) throw InvalidArgument("cannot open --history file '" + o.history_path + "' for writing");
}

// Whether the history can be written at the end, without touching an existing file: a run refused
// later (a bad --pm-path, too little memory) must leave an earlier history as it was.
int history_writable(const std::string& path) {
  // Looked at before it is opened: a FIFO would block the open, and a device is no history file.
  if (std::string why = check::history_target_error(path); !why.empty()) throw InvalidArgument(why);
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return 1;
  }
  if (errno != ENOENT) return 0;
  const int created = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (created < 0) return 0;
  ::close(created);
  ::unlink(path.c_str());
  return 1;
}

}  // namespace rdmahash::bench
