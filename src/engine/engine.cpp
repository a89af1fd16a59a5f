// Engine: see include/rdmahash/engine.h for the scheduling model.
#include "rdmahash/engine.h"

#include <cassert>
#include <optional>
#include <stdexcept>
#include <utility>

namespace rdmahash {

// A root coroutine owns one top-level operation: it awaits the operation's task, records its
// outcome and tells the engine it is finished. It starts suspended and destroys itself at the end.
struct Engine::Root {
  OpStats stats;
  uint64_t index = 0;
  std::chrono::steady_clock::time_point start;
  std::exception_ptr error;
  bool finished = false;
  std::function<void(Root*)>* on_finish = nullptr;
};

namespace {
struct RootCoro {
  struct promise_type {
    static void* operator new(std::size_t n) { return detail::FramePool::allocate(n); }
    static void operator delete(void* p, std::size_t n) noexcept { detail::FramePool::deallocate(p, n); }
    RootCoro get_return_object() { return RootCoro{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> h;
};

template <class RootT>
RootCoro root_coro(Task<void> task, RootT* root) {
  try {
    co_await std::move(task);
  } catch (...) {
    root->error = std::current_exception();
  }
  root->finished = true;
  if (root->on_finish) (*root->on_finish)(root);
}
}  // namespace

Engine::Engine(Transport& transport) : transport_(transport), tick_(transport.now()) {}

Engine::~Engine() = default;

detail::EngineNode* Engine::enqueue(const Request& r) {
  detail::EngineNode* n = free_;
  if (n) {
    free_ = n->next_free;
  } else {
    pool_.push_back(std::make_unique<detail::EngineNode>());
    n = pool_.back().get();
  }
  *n = detail::EngineNode{};
  n->op = current_ ? current_ : &scratch_;
  n->queue_index = queue_.size();
  queue_.push_back(r);
  if (r.kind == ReqKind::kCas || r.kind == ReqKind::kFaa) queue_.back().result = &n->result;
  queued_.push_back(n);
  return n;
}

void Engine::release(detail::EngineNode* n) {
  n->next_free = free_;
  free_ = n;
}

void Engine::withdraw(detail::EngineNode* n) {
  if (!n->done) {
    // Not posted yet (requests complete within the batch that posts them): take it off the queue.
    // Erase in place: the queue's order is what a fenced request is ordered against.
    const size_t i = n->queue_index;
    assert(i < queue_.size() && queued_[i] == n);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    queued_.erase(queued_.begin() + static_cast<std::ptrdiff_t>(i));
    for (size_t j = i; j < queued_.size(); ++j) queued_[j]->queue_index = j;
  }
  release(n);
}

void Engine::suspend_on(detail::EngineNode* n, std::coroutine_handle<> h) {
  n->waiter = h;
  n->op = current_ ? current_ : n->op;
}

Pending Engine::read(RemoteAddr addr, void* dst, uint32_t len) {
  Request r;
  r.kind = ReqKind::kRead; r.addr = addr; r.buf = dst; r.len = len;
  return Pending(this, enqueue(r));
}

Pending Engine::read_fenced(RemoteAddr addr, void* dst, uint32_t len) {
  Request r;
  r.kind = ReqKind::kRead; r.addr = addr; r.buf = dst; r.len = len; r.fence = true;
  return Pending(this, enqueue(r));
}

Pending Engine::write(RemoteAddr addr, const void* src, uint32_t len) {
  Request r;
  r.kind = ReqKind::kWrite; r.addr = addr; r.buf = const_cast<void*>(src); r.len = len;
  return Pending(this, enqueue(r));
}

Pending Engine::write_fenced(RemoteAddr addr, const void* src, uint32_t len) {
  Request r;
  r.kind = ReqKind::kWrite; r.addr = addr; r.buf = const_cast<void*>(src); r.len = len; r.fence = true;
  return Pending(this, enqueue(r));
}

Pending Engine::cas(RemoteAddr addr, uint64_t expected, uint64_t desired) {
  Request r;
  r.kind = ReqKind::kCas; r.addr = addr; r.compare = expected; r.swap = desired; r.len = 8;
  return Pending(this, enqueue(r));
}

Pending Engine::cas_fenced(RemoteAddr addr, uint64_t expected, uint64_t desired) {
  Request r;
  r.kind = ReqKind::kCas; r.addr = addr; r.compare = expected; r.swap = desired; r.len = 8; r.fence = true;
  return Pending(this, enqueue(r));
}

Pending Engine::faa(RemoteAddr addr, uint64_t add) {
  Request r;
  r.kind = ReqKind::kFaa; r.addr = addr; r.compare = add; r.len = 8;
  return Pending(this, enqueue(r));
}

Pending Engine::rpc(uint32_t node, uint16_t id, const void* payload, uint32_t len,
                    std::vector<std::byte>* reply) {
  Request r;
  r.kind = ReqKind::kRpc; r.addr = RemoteAddr{node, 0}; r.buf = const_cast<void*>(payload);
  r.len = len; r.rpc_id = id; r.reply = reply;
  return Pending(this, enqueue(r));
}

void Engine::flush() {
  batch_.swap(queue_);
  batch_nodes_.swap(queued_);
  queue_.clear();
  queued_.clear();
  bool failed = false;
  try {
    transport_.execute(batch_);
  } catch (const FabricError& e) {
    failed = true;
    last_error_ = e.what();
  }
  tick_ = transport_.now();
  for (size_t i = 0; i < batch_.size(); ++i) {
    detail::EngineNode* n = batch_nodes_[i];
    const Request& r = batch_[i];
    OpStats* op = n->op;
    switch (r.kind) {
      case ReqKind::kRead: ++op->reads; op->bytes += r.len; break;
      case ReqKind::kWrite: ++op->writes; op->bytes += r.len; break;
      case ReqKind::kCas: ++op->cas; op->bytes += 8; break;
      case ReqKind::kFaa: ++op->faa; op->bytes += 8; break;
      case ReqKind::kRpc: ++op->rpcs; op->bytes += r.len + (r.reply ? r.reply->size() : 0); break;
    }
    n->done = true;
    // Each waiter gets its own request's outcome: a request the transport reports kOk landed even
    // if another request of the batch failed (e.g. a lock CAS whose unlock must still follow).
    n->failed = failed && r.status != ReqStatus::kOk;
    if (n->waiter) {
      // An operation waits on one request at a time, so this counts each waiting op once.
      ++op->round_trips;
      ready_.push_back(Ready{n->waiter, op});
      n->waiter = {};
    }
  }
  batch_.clear();
  batch_nodes_.clear();
}

std::string Engine::execute_batch(std::span<Request> batch) {
  if (current_ || !queue_.empty() || !ready_.empty())
    throw std::logic_error("Engine::execute_batch: called while an operation runs");
  std::string error;
  for (Request& r : batch) r.status = ReqStatus::kUnknown;  // a reused request keeps no old outcome
  try {
    transport_.execute(batch);
    for (Request& r : batch) r.status = ReqStatus::kOk;  // all landed: execute() did not throw
  } catch (const FabricError& e) {
    error = e.what();
  }
  tick_ = transport_.now();
  return error;
}

void Engine::begin_direct_reads() {
  if (current_ || !queue_.empty() || !ready_.empty())
    throw std::logic_error("Engine::begin_direct_reads: called while an operation runs");
  transport_.begin_direct_reads();
}

void Engine::drive(const std::function<void()>& refill) {
  for (;;) {
    while (!ready_.empty()) {
      running_.swap(ready_);
      for (const Ready& r : running_) {
        current_ = r.op;
        r.h.resume();
      }
      running_.clear();
    }
    current_ = nullptr;
    if (refill) refill();
    if (!ready_.empty()) continue;
    if (queue_.empty()) break;
    flush();
  }
  current_ = nullptr;
}

void Engine::spawn(Task<void> task, Root* root) {
  auto coro = root_coro(std::move(task), root);
  current_ = &root->stats;
  coro.h.resume();  // runs until the operation first waits (or finishes)
  current_ = nullptr;
}

void Engine::run(Task<void> task, OpStats* stats) {
  Root root;
  spawn(std::move(task), &root);
  drive({});
  if (!root.finished) throw FabricError("operation did not finish: it waited on nothing the engine could post");
  if (stats) stats->add(root.stats);
  if (root.error) std::rethrow_exception(root.error);
}

void Engine::run_many(uint64_t count, uint32_t depth, const std::function<Task<void>(uint64_t)>& make,
                      const std::function<void(const Completion&)>& done) {
  if (depth == 0) depth = 1;
  std::vector<std::unique_ptr<Root>> roots;
  std::vector<Root*> idle;
  uint64_t next = 0;
  uint32_t inflight = 0;
  tick_ = transport_.now();
  // An exception from `make` or `done` must not abandon the operations in flight, which may hold
  // locks (a claimed slot, a split word) until their next request; and `done` runs inside the
  // root coroutine, whose escaping exception would terminate. So the first one is kept, nothing
  // starts after it, the operations in flight finish and are reported, and it is rethrown.
  std::exception_ptr callback_error;
  std::function<void(Root*)> on_finish = [&](Root* r) {
    --inflight;
    const auto latency = tick_ - r->start;
    try {
      done(Completion{r->index, r->stats, std::chrono::duration_cast<std::chrono::nanoseconds>(latency), r->error});
    } catch (...) {
      if (!callback_error) callback_error = std::current_exception();
    }
    idle.push_back(r);
  };
  auto refill = [&] {
    while (inflight < depth && next < count && !callback_error) {
      Root* r;
      if (!idle.empty()) {
        r = idle.back();
        idle.pop_back();
      } else {
        roots.push_back(std::make_unique<Root>());
        r = roots.back().get();
      }
      *r = Root{};
      r->index = next++;
      r->on_finish = &on_finish;
      r->start = tick_;
      std::optional<Task<void>> task;
      try {
        task.emplace(make(r->index));
      } catch (...) {  // the operation never started: nothing of it to finish or report
        callback_error = std::current_exception();
        idle.push_back(r);
        break;
      }
      ++inflight;
      spawn(std::move(*task), r);
    }
  };
  drive(refill);
  if (inflight != 0) throw FabricError("operations did not finish: they waited on nothing the engine could post");
  if (callback_error) std::rethrow_exception(callback_error);
}

}  // namespace rdmahash
