// rdmahash/engine.h — per-client coroutine scheduler with batched posting (seed 000, Algorithm 1).
//
// Every operation (a lookup, an insert, ...) is a coroutine. A remote access is an awaitable
// `Pending` returned by `read/write/cas/faa/rpc`: creating it *queues* the request; awaiting it
// suspends the operation until the request has completed. The engine runs every runnable coroutine
// until each is suspended or finished; only then does it post the whole queue to the transport as
// one batch and wait for it (one round trip for all of them), after which it resumes the waiters.
// Up to `depth` operations are in flight at once (`run_many`), so a batch carries up to `depth`
// operations' requests: this is how one client keeps the network busy (seed 000 §4, Algorithm 1).
//
// Overlap (seed 001): an operation may create a `Pending` now and await it later (e.g. post chunk
// i+1 before scanning chunk i). A `Pending` destroyed before it was posted is withdrawn from the
// queue, so an operation that finishes early sends nothing it does not need.
//
// Latency (run_many): from the batch boundary at which an operation was started to the batch
// boundary at which it finished.
//
// Accounting, per operation (`OpStats`): `round_trips` counts the batches the operation waited
// for; requests by kind and bytes count what it issued (payload bytes; atomics count 8). Requests
// are counted when posted, so withdrawn requests are not counted.
//
// Thread safety: an Engine and its Transport belong to one thread. Errors: a transport failure
// fails only the requests the transport reports as failed (or could not report on; see
// fabric.h, "Per-request outcome"); the other operations of the batch resume normally. Awaiting a
// failed request throws FabricError inside its operation, which surfaces from `run` or in
// `run_many`'s callback. MemoryNodeLost is not caught: it leaves `run`/`run_many`.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/task.h"

namespace rdmahash {

struct OpStats {
  uint32_t round_trips = 0;
  uint32_t reads = 0, writes = 0, cas = 0, faa = 0, rpcs = 0;
  uint64_t bytes = 0;
  void add(const OpStats& o) {
    round_trips += o.round_trips; reads += o.reads; writes += o.writes; cas += o.cas;
    faa += o.faa; rpcs += o.rpcs; bytes += o.bytes;
  }
};

class Engine;

namespace detail {
struct EngineNode {
  uint64_t result = 0;
  bool done = false;
  bool failed = false;
  std::coroutine_handle<> waiter;
  OpStats* op = nullptr;
  size_t queue_index = 0;
  EngineNode* next_free = nullptr;
};
}  // namespace detail

// A queued or completed remote request. Await it once; the result is the old value for CAS/FAA
// (0 for the others). Move-only.
class [[nodiscard]] Pending {
 public:
  Pending(Pending&& o) noexcept : engine_(o.engine_), node_(std::exchange(o.node_, nullptr)) {}
  Pending& operator=(Pending&&) = delete;
  ~Pending();

  bool await_ready() const noexcept { return node_->done; }
  void await_suspend(std::coroutine_handle<> h) noexcept;
  uint64_t await_resume();
  bool done() const noexcept { return node_ && node_->done; }

 private:
  friend class Engine;
  Pending(Engine* e, detail::EngineNode* n) : engine_(e), node_(n) {}
  Engine* engine_;
  detail::EngineNode* node_;
};

class Engine {
 public:
  explicit Engine(Transport& transport);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queue a request. Buffers must stay valid until the Pending completes or is destroyed.
  Pending read(RemoteAddr addr, void* dst, uint32_t len);
  Pending write(RemoteAddr addr, const void* src, uint32_t len);
  // A WRITE performed after every request queued before it (to the same memory node): the
  // transport fences it (fabric.h), so both can go in one batch. The queue keeps its order.
  Pending write_fenced(RemoteAddr addr, const void* src, uint32_t len);
  Pending cas(RemoteAddr addr, uint64_t expected, uint64_t desired);
  // A CAS performed after every request queued before it (to the same memory node), as
  // write_fenced: e.g. a record's WRITE and the CAS that publishes it share one batch.
  Pending cas_fenced(RemoteAddr addr, uint64_t expected, uint64_t desired);
  Pending faa(RemoteAddr addr, uint64_t add);
  // A READ performed after every request queued before it (to the same memory node), as
  // write_fenced: e.g. a CAS and the READ that must see its effect share one batch.
  Pending read_fenced(RemoteAddr addr, void* dst, uint32_t len);
  Pending rpc(uint32_t node, uint16_t id, const void* payload, uint32_t len,
              std::vector<std::byte>* reply);

  // Runs one operation to completion and returns its result (rethrows its exception).
  template <class T>
  T run(Task<T> task, OpStats* stats = nullptr);
  void run(Task<void> task, OpStats* stats = nullptr);

  struct Completion {
    uint64_t index;
    const OpStats& stats;
    std::chrono::nanoseconds latency;
    std::exception_ptr error;
  };
  // Runs `count` operations `make(i)`, keeping up to `depth` in flight; `done` is called as each
  // finishes (in completion order). If `make` or `done` throws, no operation starts after it, the
  // ones in flight run to their end (they may hold locks) and are reported to `done`, and then the
  // first such exception is rethrown; the operation whose `make` threw is not reported.
  void run_many(uint64_t count, uint32_t depth, const std::function<Task<void>(uint64_t)>& make,
                const std::function<void(const Completion&)>& done);

  // Posts `batch` as one batch outside any operation: a multi-get's first READs need no coroutine
  // each (KvClient::get_batch). Not while run/run_many runs (std::logic_error). Requests are not
  // counted in any OpStats (the caller accounts for them). A failed request does not throw: every
  // request's `status` says whether it landed, and the returned message says why the others did
  // not ("" when all landed). MemoryNodeLost leaves, as from run. Moves batch_clock() to the
  // batch's completion.
  std::string execute_batch(std::span<Request> batch);
  // Sets batch_clock() to now (Transport::now()): before a multi-get whose first operations start
  // now (run_many does the same at its start). Not while run/run_many runs.
  void restart_clock() { tick_ = transport_.now(); }
  // Direct reads outside any operation (Transport::direct_region): a multi-get that reads its
  // windows in place instead of posting them. begin_direct_reads() starts a round as
  // execute_batch starts a batch (MemoryNodeLost leaves; not while run/run_many runs,
  // std::logic_error); end_direct_reads() counts its READs and moves batch_clock() to the round's
  // completion. As with execute_batch, no OpStats counts them.
  std::span<const std::byte> direct_region(uint32_t node) { return transport_.direct_region(node); }
  void begin_direct_reads();
  void end_direct_reads(uint64_t reads, uint64_t bytes, uint64_t lines) {
    transport_.end_direct_reads(reads, bytes, lines);
    tick_ = transport_.now();
  }

  Transport& transport() { return transport_; }

  // The transport's clock (Transport::now(): steady_clock, or a simulated fabric's virtual time) at
  // the last batch boundary (when the last batch completed). Read by an
  // operation when it starts, it is ≤ the posting of its first request; read after its last
  // request completed, it is ≥ that completion. Checked histories (src/check) rely on both.
  std::chrono::steady_clock::time_point batch_clock() const { return tick_; }

 private:
  friend class Pending;
  struct Root;
  detail::EngineNode* enqueue(const Request& r);
  void withdraw(detail::EngineNode* n);
  void release(detail::EngineNode* n);
  void suspend_on(detail::EngineNode* n, std::coroutine_handle<> h);
  void flush();
  void drive(const std::function<void()>& refill);
  void spawn(Task<void> task, Root* root);

  Transport& transport_;
  std::vector<Request> queue_;
  std::vector<detail::EngineNode*> queued_;
  std::vector<Request> batch_;
  std::vector<detail::EngineNode*> batch_nodes_;
  struct Ready { std::coroutine_handle<> h; OpStats* op; };
  std::vector<Ready> ready_, running_;
  std::vector<std::unique_ptr<detail::EngineNode>> pool_;
  detail::EngineNode* free_ = nullptr;
  OpStats* current_ = nullptr;
  OpStats scratch_;  // stats sink for requests queued outside any operation
  // Time of the last batch completion (Transport::now()). Latencies are measured from the batch boundary before an
  // operation starts to the one that completes it: two clock reads per batch, not per operation
  // (clock_gettime is not free in a VM), at the cost of the CPU time after the last batch.
  std::chrono::steady_clock::time_point tick_;
  std::string last_error_;
};

// --- inline definitions -----------------------------------------------------------------------

inline Pending::~Pending() {
  if (node_) engine_->withdraw(node_);
}
inline void Pending::await_suspend(std::coroutine_handle<> h) noexcept { engine_->suspend_on(node_, h); }
inline uint64_t Pending::await_resume() {
  auto* n = std::exchange(node_, nullptr);
  const bool failed = n->failed;
  const uint64_t r = n->result;
  engine_->release(n);
  if (failed) throw FabricError(engine_->last_error_);
  return r;
}

namespace detail {
template <class T>
Task<void> store_result(Task<T> t, std::optional<T>* out) {
  out->emplace(co_await std::move(t));
}
}  // namespace detail

template <class T>
T Engine::run(Task<T> task, OpStats* stats) {
  std::optional<T> out;
  run(detail::store_result(std::move(task), &out), stats);
  return std::move(*out);
}

}  // namespace rdmahash
