// The review transport of issue 10 (item 6), kept as a test: two kv-mix clients of one table on
// LocalFabric, in one thread. Client A's transport reorders each batch at random (fences kept) and splits every
// READ into 8-byte words executed in random order; between any two of A's requests (and pieces)
// client B executes its batches (strict alternation: one client at a time). Both record a history (kv-mix tags make every written value
// unique), written to OUT for `rdmahash check-history` (Porcupine). Few keys, so A and B collide.
//
// usage: reorder_split_history SCHEME OUT OPS
//   SCHEME: linear_set | linear_inline | linear_heap | cuckoo_inline | cuckoo_heap | race | continuity
//   OPS:    operations of each client
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/kv_mix.h"
#include "bench/options.h"
#include "bench/report.h"
#include "bench/workload.h"
#include "check/history.h"
#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"

namespace rdmahash {
namespace {

// Reorders every batch (within its fences) and splits every READ into its 8-byte-aligned words, read in random order;
// `hook` may run (one other client's operation) before any request or piece. Each request's status
// is its own (fabric.h).
class ReorderSplitTransport final : public Transport {
 public:
  ReorderSplitTransport(std::unique_ptr<Transport> inner, std::function<void()> hook, uint64_t seed)
      : inner_(std::move(inner)), hook_(std::move(hook)), rng_(seed) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    // A batch is unordered except across fences (fabric.h): segments [begin, end) start at a
    // fenced request; each is shuffled, the segments keep their order.
    std::vector<size_t> order(batch.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t begin = 0, end = 0; begin < batch.size(); begin = end) {
      end = begin + 1;
      while (end < batch.size() && !batch[end].fence) ++end;
      std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end), rng_);
    }
    std::string error;
    for (size_t i : order) {
      Request& r = batch[i];
      try {
        if (r.kind == ReqKind::kRead && r.len > 8) {
          read_split(r);
        } else {
          maybe_hook();
          inner_->execute(std::span<Request>(&r, 1));
        }
        r.status = ReqStatus::kOk;
        counters_.add(r);
      } catch (const FabricError& e) {
        r.status = ReqStatus::kFailed;
        if (error.empty()) error = e.what();
      }
    }
    if (!error.empty()) throw FabricError(error);
  }

 private:
  void maybe_hook() {
    if (rng_() % 3 == 0) hook_();
  }
  void read_split(const Request& r) {
    // Pieces end at 8-byte-aligned remote offsets: an aligned word is never torn (fabric.h).
    std::vector<std::pair<uint32_t, uint32_t>> pieces;  // [from, to) within the request
    uint32_t from = 0;
    while (from < r.len) {
      const uint64_t at = r.addr.offset + from;
      const uint32_t to = static_cast<uint32_t>(std::min<uint64_t>(r.len, from + (8 - at % 8)));
      pieces.emplace_back(from, to);
      from = to;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng_);
    for (auto [a, b] : pieces) {
      maybe_hook();
      Request piece = r;
      piece.addr.offset += a;
      piece.buf = static_cast<std::byte*>(r.buf) + a;
      piece.len = b - a;
      inner_->execute(std::span<Request>(&piece, 1));
    }
  }
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
  std::mt19937_64 rng_;
};

bench::BenchOptions options_for(const std::string& scheme, uint64_t ops) {
  bench::BenchOptions o;
  o.records = 1000;
  o.kv_keys = 4;
  o.ops = ops;
  o.depth = 4;
  o.clients = 2;
  o.workloads = {bench::Workload::kKvMix};
  o.keep_table = true;
  o.value_bytes = 16;
  o.seed = 11;
  if (scheme == "linear_set") {
    o.slot_format = SlotFormatChoice::kSet;
    o.value_bytes = 0;
  } else if (scheme == "linear_inline") {
    o.slot_format = SlotFormatChoice::kInline;
  } else if (scheme == "linear_heap") {
    o.storage = Storage::kHeap;
  } else if (scheme == "cuckoo_inline") {
    o.scheme = SchemeId::kCuckoo;
  } else if (scheme == "cuckoo_heap") {
    o.scheme = SchemeId::kCuckoo;
    o.storage = Storage::kHeap;
  } else if (scheme == "race") {
    o.scheme = SchemeId::kRace;
    o.key_bytes = 16;
  } else if (scheme == "continuity") {
    o.scheme = SchemeId::kContinuity;
  } else {
    throw std::invalid_argument("unknown scheme " + scheme);
  }
  // Heap schemes size their heaps for the writes: every op of both clients (B: up to 2 x ops) may write a record.
  o.table_writes = 3 * ops + 4096;
  if (auto e = o.error(); !e.empty()) throw std::invalid_argument(e);
  return o;
}

// Strict alternation between A (the reordering, splitting client) and B: B's transport executes
// one batch only when A's hook hands it the turn, and hands it back when done; so exactly one
// client touches memory at a time and the run is the same run every time. B waits for its turn
// only while A runs; A's hook hands over only while B runs. A blocked B (re-reading a slot A
// holds locked) simply re-reads at each of its turns while A goes on.
class Baton {
 public:
  // A's hook: give B one batch, wait until it has executed it.
  void a_yields() {
    std::unique_lock l(mu_);
    if (b_finished_) return;
    turn_b_ = true;
    ++handed_;
    cv_.notify_all();
    cv_.wait(l, [&] { return !turn_b_; });
  }
  // B's transport, around each batch.
  void b_begin() {
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return turn_b_ || a_finished_; });
  }
  void b_end() {
    std::lock_guard l(mu_);
    turn_b_ = false;
    cv_.notify_all();
  }
  uint64_t handed() {
    std::lock_guard l(mu_);
    return handed_;
  }
  void a_finished() {
    std::lock_guard l(mu_);
    a_finished_ = true;
    cv_.notify_all();
  }
  void b_finished() {
    std::lock_guard l(mu_);
    b_finished_ = true;
    turn_b_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool turn_b_ = false, a_finished_ = false, b_finished_ = false;
  uint64_t handed_ = 0;  // B batches run between A's requests and pieces
};

class TurnTransport final : public Transport {
 public:
  TurnTransport(std::unique_ptr<Transport> inner, Baton& baton) : inner_(std::move(inner)), baton_(baton) {}
  void execute(std::span<Request> batch) override {
    baton_.b_begin();
    ++counters_.batches;
    try {
      inner_->execute(batch);
    } catch (...) {
      baton_.b_end();
      throw;
    }
    for (Request& r : batch) counters_.add(r);
    baton_.b_end();
  }

 private:
  std::unique_ptr<Transport> inner_;
  Baton& baton_;
};

int run(const std::string& scheme, const std::string& out, uint64_t ops) {
  bench::BenchOptions o = options_for(scheme, ops);
  o.history_path = out;
  auto adapter = bench::make_table(o, o.load_factors.front());
  auto fabric = make_local_fabric(std::vector<uint64_t>(o.memory_nodes, adapter->region_bytes()));
  const bench::KeySpace keys(o.records, adapter->key_bits(), o.seed);
  bench::load_table(*adapter, *fabric, keys);
  const uint32_t vb = adapter->value_bytes();

  std::vector<check::HistoryBuffer> hist(2);
  hist[0].reserve(ops + 16);
  hist[1].reserve(2 * ops + 16);
  Baton baton;
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> a_done{false};

  // Client B: a plain transport gated by the baton, on its own thread.
  std::thread b([&] {
    TurnTransport tb(fabric->connect(), baton);
    Engine eb(tb);
    auto kvb = bench::make_client(*adapter, eb, o, o.read_sizes.front()).client;
    bench::KvMix mixb(o, keys, vb, 1, 0, &hist[1]);
    bench::ClientResult rb;
    // B keeps going as long as A runs (up to 2 x ops), so that it overlaps all of A's run whatever
    // the scheme's round trips per operation; once A is done B starts nothing new.
    auto nothing = []() -> Task<void> { co_return; };
    try {
      eb.run_many(2 * ops, o.depth,
                  [&](uint64_t) { return a_done.load() ? nothing() : mixb.next(kvb.get(), &eb, &rb); },
                  [&](const Engine::Completion& c) {
                    if (c.error) ++errors;
                  });
    } catch (...) {
      ++errors;
    }
    baton.b_finished();
  });

  // Client A: every batch reordered, every READ split, B's batches between the pieces.
  {
    auto ta = std::make_unique<ReorderSplitTransport>(fabric->connect(), [&] { baton.a_yields(); },
                                                      0xA11CE ^ std::hash<std::string>{}(scheme));
    Engine ea(*ta);
    auto kva = bench::make_client(*adapter, ea, o, o.read_sizes.front()).client;
    bench::KvMix mixa(o, keys, vb, 0, 0, &hist[0]);
    bench::ClientResult ra;
    try {
      ea.run_many(ops, o.depth, [&](uint64_t) { return mixa.next(kva.get(), &ea, &ra); },
                  [&](const Engine::Completion& c) {
                    if (c.error) ++errors;
                  });
    } catch (...) {
      ++errors;
    }
    a_done = true;
    baton.a_finished();  // B finishes the operations it has started, alone
  }
  b.join();
  bench::write_kv_mix_history(o, keys, vb, hist);
  std::printf("%s: client A (reordered, split) %llu ops, client B %llu ops; %llu of B's batches ran between A's requests; %llu failed\n",
              scheme.c_str(), static_cast<unsigned long long>(ops), static_cast<unsigned long long>(hist[1].events().size()),
              static_cast<unsigned long long>(baton.handed()), static_cast<unsigned long long>(errors.load()));
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdmahash

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: reorder_split_history SCHEME OUT OPS\n");
    return 2;
  }
  try {
    return rdmahash::run(argv[1], argv[2], std::stoull(argv[3]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reorder_split_history: error: %s\n", e.what());
    return 2;
  }
}
