// SimFabric: a simulated RDMA fabric in virtual time (`rdmahash bench --fabric sim`).
//
// Design
// ======
// Goal: run every scheme, the engine and the bench unchanged, with many simulated clients, and
// report throughput and latency in the virtual time of a modelled network, deterministically.
//
// Memory. As in LocalFabric, memory nodes are regions of this process and requests really read
// and write them (same bounds checks, same word-wise copies: fabric/direct_access.h). What is
// simulated is *when* each request takes effect and completes.
//
// Event model. One global event queue ordered by (virtual time, sequence number); the sequence
// number is assigned when an event is scheduled, so ties break in scheduling order and the order
// is a pure function of the simulation's inputs. Events:
//   kArrive   a request reaches its memory node: it is PERFORMED on the region now (READ copies,
//             WRITE stores, CAS/FAA apply; an RPC is queued for the node's CPU) and occupies the
//             node's NIC, a FIFO server, for max(1/nic_ops_per_s, (header_bytes + payload) /
//             link_bytes_per_s): whichever of the message rate and the link is the bottleneck.
//             The NIC is FIFO, so the order in which a node serves requests is their arrival order
//             — the order in which they were performed. The reply leaves when the NIC is done.
//   kRpcRun   the memory node's CPU (one FIFO server per node) runs an RPC's handler; it starts
//             when the NIC has received the request and the CPU is free, and takes `rpc_ns`. The
//             handler's effect happens at this event (not at arrival: a one-sided READ arriving
//             meanwhile does not see it, as on real hardware).
//   kReply    the completion reaches the client, one-way latency after the NIC (or CPU) finished.
//             It frees the request's queue-pair slot (a waiting request of that queue pair is
//             posted now) and, when it is the batch's last, wakes the client.
//   kWake     a client starts (run()) or a batch that needed no network completes.
// A request's timeline, unloaded: post t, arrive t + L, reply at t + 2L + max(1/rate, bytes/bw)
// (+ rpc_ns for an RPC). Client CPU: a batch of n requests is posted client_batch_ns +
// n * client_request_ns after the client's previous batch completed (the operation code's and the
// engine's CPU between two round trips), plus, with `client_cpu = measured`, the client's own
// CPU time (see below). Queue pairs: at most qp_depth requests per
// (client, memory node) are outstanding; the rest wait, in batch order, for a completion.
//
// Not modelled: the client's own NIC and link (one client is never the bottleneck of the EDR
// numbers we use: a client's requests are limited by qp_depth and its CPU), switches and
// congestion beyond each memory node's link, the reply's bytes of an RPC on the link, PCIe, DMA
// and cache effects on the memory node, packet loss and retransmission, memory-node failures
// (MemoryNodeLost is never thrown). A READ of more than 8 bytes is performed atomically at its
// arrival (a real NIC may interleave it with a concurrent WRITE: torn reads, which the schemes'
// checksums handle, are therefore not exercised here; LocalFabric's threads exercise them).
//
// Clients and determinism. The bench's client code is synchronous (Engine::run_many calls
// Transport::execute and expects it to return at the batch's completion), so each simulated
// client runs as a stackful coroutine (class Fiber: its own 8 MiB stack, swapcontext) on the
// thread that called run(); only one runs at any moment. A client calling execute() schedules its
// batch's events and then itself runs the event loop (advance()) until the next client that must
// run: if that is itself (e.g. one client) it just returns, with no switch; else it tells run()'s
// scheduler loop which client is next and switches to it, which resumes that client. A client
// that finishes runs the loop the same way and switches away for good; when no events are left
// the scheduler returns. All simulation state, region memory and RPC handlers are touched by one
// thread, in an order decided by the event order alone, so nothing outside the simulation can
// change an outcome: with client_cpu = fixed, the same command gives the same counters, the same
// histories and the same virtual times. A switch costs two swapcontext calls (each one system call,
// for the signal mask): ~0.7 M events/s of wall time with 768 clients, where OS threads handing a
// baton on cost a futex wake and a context switch per batch (~17 µs, ~115 k events/s;
// docs/results.md, "Simulated fabric"). The sanitizers are told about every switch (ASan: the
// stack switched to; TSan: the fiber); ASan still intercepts swapcontext itself (it warns once
// and clears the target stack's shadow, so overflows within a suspended client's older frames go
// unseen). The clients share the thread's exception-handling state: client code must not call
// execute() from a catch handler or from a destructor run by unwinding (the bench's and the
// schemes' code records an error and acts after its handler). Client code must not block on
// another client (it never could: with the clients on OS threads, the running one blocking
// stalled the simulation too), and thread_local state is shared by the clients (the coroutine
// frame pool's: only a free list).
//
// Client CPU, measured (`client_cpu = measured` in a profile, with `client_cpu_scale`, default 1).
// The fixed per-batch and per-request constants cannot know what a scheme does between two round
// trips (a RACE get's bucket scans cost a real client 2-4 µs of CPU, not ~1). But each simulated
// client runs the real scheme, engine and bench code on this CPU, one client at a time and
// switched only inside execute(): so the thread's CPU time (clock_gettime(CLOCK_THREAD_CPUTIME_ID))
// from the moment the client left the
// simulation (its start, or the return of its previous execute()) to its next execute() call is
// exactly the CPU its own code spent, and that time, times client_cpu_scale, is added to the
// batch's post time on top of the fixed constants. The simulation's own work (the event loop,
// the requests' copies, RPC handlers, switching to the next client and back) happens inside
// execute() and is not charged; neither is the reading of the clock itself (a system call, ~0.5 µs
// on this VM: its median cost, measured when the fabric is created, is subtracted from every
// interval). A connect()ed transport is charged only while one thread uses it. The price:
// virtual times now depend on this machine and its load (a descheduled thread's CPU time does not
// advance, but cache misses, frequency and a sibling's contention do), so throughput and latency
// are not repeatable; a lone client's counters still are (its requests do not depend on timing),
// but with several clients the interleaving follows the measured times, so contended runs (CAS
// retries, find-or-put races) may count differently from run to run. The JSON says which mode
// ran (`sim_client_cpu`) and how much CPU was charged (`sim_client_cpu_ns`, before scaling).
// `fixed` (the default, and edr's) stays fully deterministic; `rdmahash calibrate
// --write-sim-profile` writes `measured`, since its profile describes this machine's clients.
// What is not deterministic: code that reads the wall clock (the schemes' retry budgets, 20 s of
// wall time, never reached in a healthy run) or runs its own threads (continuity's background
// migration with --max-resizes: it takes the shards' mutex as the write RPCs do, so it is safe,
// but when it migrates is up to the OS, so such runs are not deterministic).
//
// Fences and ordering (fabric.h). Requests of one queue pair arrive, and are performed, in batch
// order (same post time, same latency, sequence numbers in batch order; a request held back by
// qp_depth is posted after the earlier ones completed), so a fenced request is performed after
// every earlier request of its batch to its node, and more: a real NIC may reorder unfenced ones.
// A fenced request behind a failed request of its batch to the same node fails unperformed, as on
// LocalFabric. A fence does not order a one-sided request after an RPC handler (the handler runs
// later, at kRpcRun): fabric.h allows exactly that. Per-request outcome: each request's status is
// set when it is performed; execute() throws FabricError after the whole batch completed.
//
// Time. Virtual time is a double in nanoseconds from 0 at the fabric's creation; it continues
// across run()s (histories stay ordered over a table's life). Transport::now() maps it to a
// steady_clock time point (rounded to the nanosecond; virtual 0 is 1 s after the clock's epoch,
// since histories reserve time 0), so the engine's latencies and the bench's throughput are virtual.
//
// Assumptions: the profile's constants are per memory node and identical for all nodes and
// clients; the one-way latency is the same both ways; requests of an RPC and its handler's reply
// are small.
#include "rdmahash/sim_fabric.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <new>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <sys/mman.h>
#include <thread>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define RDMAHASH_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RDMAHASH_SIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define RDMAHASH_SIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMAHASH_SIM_TSAN 1
#endif
#endif
#ifdef RDMAHASH_SIM_ASAN
#include <sanitizer/asan_interface.h>
#endif
#ifdef RDMAHASH_SIM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#include "common/cpu_clock.h"
#include "fabric/direct_access.h"
#include "fabric/rpc_limit.h"

namespace rdmahash {

SimProfile sim_profile_edr() {
  // Seed 000 §5.1 (model.h paper_cost_params, docs/read-size.md): c = 1290 ns for a 0-byte READ,
  // l = 100 Gb/s = 12.5e9 B/s (α = 0.08 ns/B), ρ0 = 87.17 M READs/s, h = 30 B. The unloaded
  // 0-byte READ takes 2L + 1/ρ0 here, so L = (c − 1/ρ0) / 2 makes it exactly c; a READ of B bytes
  // then takes c + (30 + B)/l − 1/ρ0 once the link binds (B > ~110 B): Eq. 3's slope α.
  // Not in seed 000, assumed: 16 outstanding requests per queue pair (the engine's batches are
  // what limit a client), 1 µs of memory-node CPU per RPC, no client CPU (the seed's c is the
  // whole cost of a READ).
  SimProfile p;
  p.name = "edr";
  const double rho0 = 87.17e6;
  p.nic_ops_per_s = rho0;
  p.latency_ns = (1290.0 - 1e9 / rho0) / 2;
  p.link_bytes_per_s = 12.5e9;
  p.header_bytes = 30;
  p.qp_depth = 16;
  p.rpc_ns = 1000;
  p.client_batch_ns = 0;
  p.client_request_ns = 0;
  return p;
}

namespace {
struct Field {
  const char* key;
  double SimProfile::*d;
  uint32_t SimProfile::*u;
};
const Field kFields[] = {
    {"latency_ns", &SimProfile::latency_ns, nullptr},
    {"nic_ops_per_s", &SimProfile::nic_ops_per_s, nullptr},
    {"link_bytes_per_s", &SimProfile::link_bytes_per_s, nullptr},
    {"header_bytes", &SimProfile::header_bytes, nullptr},
    {"qp_depth", nullptr, &SimProfile::qp_depth},
    {"rpc_ns", &SimProfile::rpc_ns, nullptr},
    {"client_batch_ns", &SimProfile::client_batch_ns, nullptr},
    {"client_request_ns", &SimProfile::client_request_ns, nullptr},
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}
}  // namespace

const char* client_cpu_name(SimProfile::ClientCpu c) {
  return c == SimProfile::ClientCpu::kMeasured ? "measured" : "fixed";
}

std::string sim_profile_error(const SimProfile& p) {
  auto bad = [](double v) { return !std::isfinite(v); };
  if (bad(p.latency_ns) || p.latency_ns < 0) return "latency_ns must be a finite number >= 0";
  if (bad(p.nic_ops_per_s) || p.nic_ops_per_s <= 0) return "nic_ops_per_s must be a finite number > 0";
  if (bad(p.link_bytes_per_s) || p.link_bytes_per_s <= 0) return "link_bytes_per_s must be a finite number > 0";
  if (bad(p.header_bytes) || p.header_bytes < 0) return "header_bytes must be a finite number >= 0";
  if (p.qp_depth == 0 || p.qp_depth > 65536) return "qp_depth must be in [1, 65536]";
  if (bad(p.rpc_ns) || p.rpc_ns < 0) return "rpc_ns must be a finite number >= 0";
  if (bad(p.client_batch_ns) || p.client_batch_ns < 0) return "client_batch_ns must be a finite number >= 0";
  if (bad(p.client_request_ns) || p.client_request_ns < 0) return "client_request_ns must be a finite number >= 0";
  if (p.client_cpu != SimProfile::ClientCpu::kFixed && p.client_cpu != SimProfile::ClientCpu::kMeasured)
    return "client_cpu must be fixed or measured";
  if (bad(p.client_cpu_scale) || p.client_cpu_scale <= 0) return "client_cpu_scale must be a finite number > 0";
  return {};
}

std::string sim_profile_text(const SimProfile& p) {
  std::ostringstream s;
  s.precision(17);
  for (const Field& f : kFields) {
    s << f.key << " = ";
    if (f.d) s << p.*(f.d);
    else s << p.*(f.u);
    s << '\n';
  }
  s << "client_cpu = " << client_cpu_name(p.client_cpu) << '\n';
  s << "client_cpu_scale = " << p.client_cpu_scale << '\n';
  return s.str();
}

SimProfile load_sim_profile(const std::string& name) {
  if (name == "edr") return sim_profile_edr();
  std::ifstream in(name);
  if (!in) throw std::invalid_argument("'" + name + "' is not 'edr' and not a readable file");
  SimProfile p;
  p.name = name;
  std::vector<bool> seen(std::size(kFields), false);
  bool seen_cpu = false, seen_scale = false;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = name + ":" + std::to_string(lineno) + ": ";
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw std::invalid_argument(where + "expected 'key = value', got '" + line + "'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key == "client_cpu") {
      if (seen_cpu) throw std::invalid_argument(where + "field 'client_cpu' given twice");
      seen_cpu = true;
      if (value == "fixed") p.client_cpu = SimProfile::ClientCpu::kFixed;
      else if (value == "measured") p.client_cpu = SimProfile::ClientCpu::kMeasured;
      else throw std::invalid_argument(where + "client_cpu: '" + value + "' is not 'fixed' or 'measured'");
      continue;
    }
    if (key == "client_cpu_scale") {
      if (seen_scale) throw std::invalid_argument(where + "field 'client_cpu_scale' given twice");
      seen_scale = true;
      size_t used = 0;
      try {
        p.client_cpu_scale = std::stod(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (value.empty() || used != value.size())
        throw std::invalid_argument(where + "client_cpu_scale: '" + value + "' is not a number");
      continue;
    }
    size_t i = 0;
    while (i < std::size(kFields) && key != kFields[i].key) ++i;
    if (i == std::size(kFields)) throw std::invalid_argument(where + "unknown field '" + key + "'");
    if (seen[i]) throw std::invalid_argument(where + "field '" + key + "' given twice");
    seen[i] = true;
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (value.empty() || used != value.size()) throw std::invalid_argument(where + key + ": '" + value + "' is not a number");
    if (kFields[i].d) {
      p.*(kFields[i].d) = v;
    } else {
      if (v != std::floor(v) || v < 0 || v > 4294967295.0)
        throw std::invalid_argument(where + key + ": '" + value + "' is not a whole number");
      p.*(kFields[i].u) = static_cast<uint32_t>(v);
    }
  }
  for (size_t i = 0; i < std::size(kFields); ++i)
    if (!seen[i]) throw std::invalid_argument(name + ": field '" + std::string(kFields[i].key) + "' is missing");
  if (std::string e = sim_profile_error(p); !e.empty()) throw std::invalid_argument(name + ": " + e);
  return p;
}

namespace {

struct AlignedFree {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

enum class Ev : uint8_t { kWake, kArrive, kRpcRun, kReply };

struct ClientState;

struct Event {
  double t;
  uint64_t seq;
  ClientState* client;
  uint32_t index;  // the request's index in the client's batch
  Ev kind;
};

struct Later {
  bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

struct Qp {
  uint32_t outstanding = 0;
  std::deque<uint32_t> waiting;
};

// A client's own stack and machine context: the simulated clients are stackful coroutines on the
// thread that called run(), switched with swapcontext (one system call per switch, for the signal
// mask: ~1 µs, against ~17 µs for waking another OS thread). Switches go through run()'s
// scheduler loop only (client -> scheduler -> client), which is all the sanitizers must be told
// about: ASan the stack being switched to, TSan the fiber (flags 0: each switch synchronizes, as
// the baton's mutex did when the clients were threads).
class Fiber {
 public:
  // Reserved, not committed (MAP_NORESERVE): only the pages a client touches cost memory. 8 MiB,
  // a thread's default: client code and RPC handlers (which run on the calling client's stack)
  // have the room they had as threads, also with the sanitizers' larger frames.
  static constexpr size_t kStackBytes = size_t{8} << 20;

  // The scheduler's side: this thread's own stack.
  Fiber() {
#ifdef RDMAHASH_SIM_TSAN
    tsan_ = __tsan_get_current_fiber();
#endif
  }
  // A client's side: `entry(arg)` runs on a fresh stack at the first switch to it.
  Fiber(void (*entry)(void*), void* arg) : entry_(entry), arg_(arg) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    map_bytes_ = kStackBytes + page;  // the lowest page is a guard: an overflow faults
    void* m = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                     -1, 0);
    // Two mappings per client (guard + stack): the kernel's vm.max_map_count (65530 by default)
    // bounds the clients at about 32 000.
    if (m == MAP_FAILED)
      throw FabricError("sim fabric: cannot map a client's stack (too many simulated clients for vm.max_map_count or memory?)");
    map_ = m;
    stack_ = static_cast<std::byte*>(map_) + page;
    stack_bytes_ = kStackBytes;
    if (::mprotect(map_, page, PROT_NONE) != 0 || ::getcontext(&uc_) != 0) {
      ::munmap(map_, map_bytes_);
      map_ = nullptr;
      throw FabricError("sim fabric: cannot set up a client's stack (too many simulated clients for vm.max_map_count?)");
    }
    uc_.uc_stack.ss_sp = stack_;
    uc_.uc_stack.ss_size = stack_bytes_;
    uc_.uc_link = nullptr;  // entry never returns: it switches away for the last time
    const auto bits = reinterpret_cast<uintptr_t>(this);
    ::makecontext(&uc_, reinterpret_cast<void (*)()>(&Fiber::trampoline), 2, static_cast<unsigned>(bits >> 32),
                  static_cast<unsigned>(bits & 0xffffffffu));
#ifdef RDMAHASH_SIM_TSAN
    tsan_ = __tsan_create_fiber(0);
#endif
  }
  ~Fiber() {
#ifdef RDMAHASH_SIM_TSAN
    if (map_ && tsan_) __tsan_destroy_fiber(tsan_);
#endif
    if (map_) ::munmap(map_, map_bytes_);
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Saves this context in `from` and continues `to`; returns when something switches back to
  // `from`. `last`: `from` will never be resumed (a finished client), so ASan drops its frames.
  static void switch_to(Fiber& from, Fiber& to, bool last = false) {
#ifdef RDMAHASH_SIM_ASAN
    __sanitizer_start_switch_fiber(last ? nullptr : &from.asan_fake_, to.stack_, to.stack_bytes_);
#else
    (void)last;
#endif
#ifdef RDMAHASH_SIM_TSAN
    __tsan_switch_to_fiber(to.tsan_, 0);
#endif
    if (::swapcontext(&from.uc_, &to.uc_) != 0) std::terminate();
    from.resumed();
  }

 private:
  static void trampoline(unsigned hi, unsigned lo) {
    auto* self = reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | static_cast<uintptr_t>(lo));
    self->resumed();
    self->entry_(self->arg_);
    std::terminate();  // entry switched away for the last time and was resumed: a scheduler bug
  }
  // After a switch lands here: ASan learns the stack it came from (the scheduler's, whose bounds
  // the scheduler's Fiber does not know until a client first switches back to it).
  void resumed() {
#ifdef RDMAHASH_SIM_ASAN
    const void* bottom = nullptr;
    size_t size = 0;
    __sanitizer_finish_switch_fiber(asan_fake_, &bottom, &size);
    asan_fake_ = nullptr;
    if (scheduler_ && !scheduler_->stack_) {
      scheduler_->stack_ = static_cast<std::byte*>(const_cast<void*>(bottom));
      scheduler_->stack_bytes_ = size;
    }
#endif
  }

 public:
  Fiber* scheduler_ = nullptr;  // a client's scheduler (ASan: its stack bounds are learned here)

 private:
  ucontext_t uc_{};
  void (*entry_)(void*) = nullptr;
  void* arg_ = nullptr;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::byte* stack_ = nullptr;
  size_t stack_bytes_ = 0;
  [[maybe_unused]] void* asan_fake_ = nullptr;
  [[maybe_unused]] void* tsan_ = nullptr;
};

struct ClientState {
  uint32_t id = 0;
  std::span<Request> batch;
  uint32_t outstanding = 0;  // requests of the batch without a reply yet
  std::vector<uint32_t> failed_nodes;
  std::string error;
  std::vector<Qp> qps;  // per memory node
  Fiber* fiber = nullptr;  // inside run(): this client's coroutine
  // Measured client CPU: this thread's CPU time when the client last left the simulation (its
  // start, or the return of execute()); valid only on the thread that set it.
  bool cpu_mark_valid = false;
  std::thread::id cpu_thread;
  double cpu_mark_ns = 0;
};

double thread_cpu_ns() { return static_cast<double>(common::thread_cpu_ns()); }

// What reading the thread CPU clock itself adds to an interval between two readings (a system
// call: ~0.5 µs on a VM): the median of back-to-back readings' differences. Subtracted from
// every measured interval, so that measuring does not make the client slower.
double thread_cpu_read_ns() {
  double d[31];
  for (double& x : d) {
    const double a = thread_cpu_ns();
    x = thread_cpu_ns() - a;
  }
  std::nth_element(d, d + 15, d + 31);
  return std::max(0.0, d[15]);
}

void mark_cpu(ClientState* st) {
  st->cpu_thread = std::this_thread::get_id();
  st->cpu_mark_ns = thread_cpu_ns();
  st->cpu_mark_valid = true;
}

class SimFabricImpl;

class SimTransport final : public Transport {
 public:
  SimTransport(SimFabricImpl& f, ClientState* st) : fabric_(f), st_(st) {}
  void execute(std::span<Request> batch) override;
  std::chrono::steady_clock::time_point now() const override;

 private:
  SimFabricImpl& fabric_;
  ClientState* st_;
};

// A transport of connect(): a client of its own, outside run() (one thread at a time).
class OwnedSimTransport final : public Transport {
 public:
  OwnedSimTransport(SimFabricImpl& f, std::unique_ptr<ClientState> st)
      : st_(std::move(st)), inner_(f, st_.get()) {}
  void execute(std::span<Request> batch) override {
    struct Sync {  // the counters of a batch that failed count too
      OwnedSimTransport* t;
      ~Sync() { t->counters_ = t->inner_.counters(); }
    } sync{this};
    inner_.execute(batch);
  }
  std::chrono::steady_clock::time_point now() const override { return inner_.now(); }

 private:
  std::unique_ptr<ClientState> st_;
  SimTransport inner_;
};

class SimFabricImpl final : public SimFabric {
 public:
  SimFabricImpl(std::vector<uint64_t> sizes, SimProfile p) : profile_(std::move(p)) {
    if (sizes.empty()) throw FabricError("sim fabric: at least one memory node is required");
    if (std::string e = sim_profile_error(profile_); !e.empty()) throw std::invalid_argument("sim profile: " + e);
    for (uint64_t s : sizes) {
      std::unique_ptr<std::byte[], AlignedFree> mem(
          static_cast<std::byte*>(::operator new[](std::max<uint64_t>(s, 8), std::align_val_t{64})));
      std::memset(mem.get(), 0, s);
      regions_.push_back(Region{std::move(mem), s});
    }
    nic_free_.assign(regions_.size(), 0.0);
    cpu_free_.assign(regions_.size(), 0.0);
    min_service_ns_ = 1e9 / profile_.nic_ops_per_s;
    measured_ = profile_.client_cpu == SimProfile::ClientCpu::kMeasured;
    if (measured_) clock_read_ns_ = thread_cpu_read_ns();
  }

  std::string_view name() const override { return "sim"; }
  uint32_t memory_nodes() const override { return static_cast<uint32_t>(regions_.size()); }
  uint64_t region_bytes(uint32_t node) const override { return node < regions_.size() ? regions_[node].size : 0; }
  std::span<std::byte> local_region(uint32_t node) override {
    if (node >= regions_.size()) return {};
    return {regions_[node].data.get(), regions_[node].size};
  }
  std::unique_ptr<Transport> connect() override {
    auto st = std::make_unique<ClientState>();
    st->id = next_standalone_++;
    return std::make_unique<OwnedSimTransport>(*this, std::move(st));
  }
  void register_rpc(uint16_t id, RpcHandler handler) override { handlers_[id] = std::move(handler); }
  const SimProfile& profile() const override { return profile_; }
  SimRunStats last_run() const override { return last_; }

  void run(uint32_t clients, const std::function<void(uint32_t, Transport&)>& fn) override {
    std::vector<std::unique_ptr<ClientState>> states;
    std::vector<std::unique_ptr<SimTransport>> transports;
    for (uint32_t c = 0; c < clients; ++c) {
      states.push_back(std::make_unique<ClientState>());
      states.back()->id = c;
      transports.push_back(std::make_unique<SimTransport>(*this, states.back().get()));
    }
    std::vector<std::exception_ptr> errors(clients);
    const uint64_t events0 = events_;
    const double cpu0 = client_cpu_ns_;
    const double t0 = now_;
    const auto wall0 = std::chrono::steady_clock::now();
    // The clients' coroutines, each started at its wake event. A client leaves its coroutine only
    // inside execute() (waiting for its batch) and at its end; run()'s loop below resumes whichever
    // client the event order says runs next.
    std::vector<Start> starts(clients);
    std::vector<std::unique_ptr<Fiber>> fibers;
    fibers.reserve(clients);
    Fiber scheduler;
    scheduler_ = &scheduler;
    struct Reset {
      SimFabricImpl* f;
      ~Reset() { f->scheduler_ = nullptr; }
    } reset{this};
    for (uint32_t c = 0; c < clients; ++c) {
      starts[c] = Start{this, states[c].get(), c, &fn, transports[c].get(), &errors[c]};
      fibers.push_back(std::make_unique<Fiber>(&SimFabricImpl::client_main, &starts[c]));
      fibers.back()->scheduler_ = &scheduler;
      states[c]->fiber = fibers.back().get();
    }
    // Only now (the stacks could not be had: nothing was scheduled) the clients' start events.
    active_ = clients;
    for (uint32_t c = 0; c < clients; ++c) schedule(now_, states[c].get(), 0, Ev::kWake);
    next_ = advance();
    while (ClientState* st = std::exchange(next_, nullptr)) Fiber::switch_to(scheduler, *st->fiber);
    if (active_ != 0) throw std::logic_error("sim fabric: no event is left but a client has not finished");
    last_.events = events_ - events0;
    last_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    last_.virtual_ns = now_ - t0;
    last_.client_cpu_ns = client_cpu_ns_ - cpu0;
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // --- called by the running client (or a connect()ed transport outside run()) ----------------

  // Posts `batch` for `st` (after its CPU time), runs the simulation until `st` completes.
  void execute(ClientState* st, std::span<Request> batch) {
    // A connect()ed transport has no coroutine: inside run() it could not wait for its batch
    // while the clients run (and nothing may be scheduled for it that no one would resume).
    if (scheduler_ && !st->fiber)
      throw std::logic_error("sim fabric: a connect()ed transport was used inside run(); use the transport run() passes");
    double t = now_ + profile_.client_batch_ns + profile_.client_request_ns * static_cast<double>(batch.size());
    if (measured_ && st->cpu_mark_valid && st->cpu_thread == std::this_thread::get_id()) {
      const double spent = std::max(0.0, thread_cpu_ns() - st->cpu_mark_ns - clock_read_ns_);
      client_cpu_ns_ += spent;
      t += spent * profile_.client_cpu_scale;
    }
    st->batch = batch;
    st->outstanding = 0;
    st->failed_nodes.clear();
    st->error.clear();
    if (st->qps.empty()) st->qps.resize(regions_.size());
    for (uint32_t i = 0; i < batch.size(); ++i) {
      Request& r = batch[i];
      r.status = ReqStatus::kUnknown;
      if (r.addr.node >= regions_.size()) {
        fail(st, r, "sim fabric: memory node " + std::to_string(r.addr.node) + " does not exist");
        continue;
      }
      ++st->outstanding;
      Qp& qp = st->qps[r.addr.node];
      if (qp.outstanding < profile_.qp_depth) {
        ++qp.outstanding;
        schedule(t + profile_.latency_ns, st, i, Ev::kArrive);
      } else {
        qp.waiting.push_back(i);
      }
    }
    if (st->outstanding == 0) schedule(t, st, 0, Ev::kWake);
    ClientState* next = advance();
    if (next != st) {
      if (!next || !st->fiber || !scheduler_) throw std::logic_error("sim fabric: a client outside run() waited on another client");
      next_ = next;  // the scheduler resumes it; this client is resumed at its batch's completion
      Fiber::switch_to(*st->fiber, *scheduler_);
    }
  }

  // A client's coroutine: runs the client's code, then gives the scheduler the next client to
  // run and leaves for good.
  static void client_main(void* arg) {
    auto* a = static_cast<Start*>(arg);
    SimFabricImpl* self = a->self;
    ClientState* st = a->st;
    if (self->measured_) mark_cpu(st);
    try {
      (*a->fn)(a->c, *a->transport);
    } catch (...) {
      *a->error = std::current_exception();
    }
    --self->active_;
    self->next_ = self->advance();
    Fiber::switch_to(*st->fiber, *self->scheduler_, /*last=*/true);
  }

  double now_ns() const { return now_; }
  bool measured() const { return measured_; }

 private:
  struct Region {
    std::unique_ptr<std::byte[], AlignedFree> data;
    uint64_t size;
  };

  void schedule(double t, ClientState* st, uint32_t index, Ev kind) { queue_.push(Event{t, seq_++, st, index, kind}); }

  // Processes events in order until a client must run (returned), or none are left (null).
  ClientState* advance() {
    while (!queue_.empty()) {
      const Event e = queue_.top();
      queue_.pop();
      ++events_;
      now_ = e.t;
      switch (e.kind) {
        case Ev::kWake:
          return e.client;
        case Ev::kArrive:
          arrive(e);
          break;
        case Ev::kRpcRun:
          rpc_run(e);
          break;
        case Ev::kReply:
          if (reply(e)) return e.client;
          break;
      }
    }
    return nullptr;
  }

  static double payload_bytes(const Request& r) {
    switch (r.kind) {
      case ReqKind::kRead:
      case ReqKind::kWrite:
      case ReqKind::kRpc:
        return r.len;
      case ReqKind::kCas:
      case ReqKind::kFaa:
        return 8;
    }
    return 0;
  }

  void fail(ClientState* st, Request& r, const std::string& message) {
    r.status = ReqStatus::kFailed;
    st->failed_nodes.push_back(r.addr.node);
    if (st->error.empty()) st->error = message;
  }

  std::byte* checked(const Request& r, uint64_t len) {
    const Region& reg = regions_[r.addr.node];
    if (r.addr.offset > reg.size || len > reg.size - r.addr.offset)
      throw FabricError("sim fabric: access [" + std::to_string(r.addr.offset) + ", +" + std::to_string(len) +
                        ") outside region of " + std::to_string(reg.size) + " bytes on node " +
                        std::to_string(r.addr.node));
    return reg.data.get() + r.addr.offset;
  }

  void arrive(const Event& e) {
    ClientState* st = e.client;
    Request& r = st->batch[e.index];
    const uint32_t node = r.addr.node;
    const double service =
        std::max(min_service_ns_, (profile_.header_bytes + payload_bytes(r)) * 1e9 / profile_.link_bytes_per_s);
    const double start = std::max(now_, nic_free_[node]);
    nic_free_[node] = start + service;
    const bool blocked =
        r.fence && std::find(st->failed_nodes.begin(), st->failed_nodes.end(), node) != st->failed_nodes.end();
    if (r.kind == ReqKind::kRpc && !blocked) {
      const double cpu = std::max(start + service, cpu_free_[node]);
      cpu_free_[node] = cpu + profile_.rpc_ns;
      schedule(cpu, st, e.index, Ev::kRpcRun);
      return;
    }
    if (blocked) {
      fail(st, r, "sim fabric: fenced request after a failed one to node " + std::to_string(node));
    } else {
      try {
        switch (r.kind) {
          case ReqKind::kRead:
          case ReqKind::kWrite:
            detail::direct_execute(r, checked(r, r.len));
            break;
          case ReqKind::kCas:
          case ReqKind::kFaa: {
            std::byte* p = checked(r, 8);
            if (r.addr.offset % 8 != 0)
              throw FabricError("sim fabric: atomic on unaligned offset " + std::to_string(r.addr.offset));
            if (!r.result) throw FabricError("sim fabric: atomic without a result buffer");
            detail::direct_execute(r, p);
            break;
          }
          case ReqKind::kRpc:
            break;
        }
        r.status = ReqStatus::kOk;
      } catch (const std::exception& ex) {
        fail(st, r, ex.what());
      }
    }
    schedule(start + service + profile_.latency_ns, st, e.index, Ev::kReply);
  }

  void rpc_run(const Event& e) {
    ClientState* st = e.client;
    Request& r = st->batch[e.index];
    try {
      if (!r.reply) throw FabricError("sim fabric: rpc without a reply buffer");
      auto it = handlers_.find(r.rpc_id);
      if (it == handlers_.end()) throw FabricError("sim fabric: no rpc handler " + std::to_string(r.rpc_id));
      if (r.len > kMaxRpcBytes) throw FabricError(detail::rpc_too_large(r.len));
      r.reply->clear();
      it->second(st->id, std::span<const std::byte>(static_cast<const std::byte*>(r.buf), r.len), *r.reply);
      r.status = ReqStatus::kOk;
    } catch (const std::exception& ex) {
      fail(st, r, ex.what());
    }
    schedule(now_ + profile_.rpc_ns + profile_.latency_ns, st, e.index, Ev::kReply);
  }

  // A completion reached its client: true when it was the batch's last.
  bool reply(const Event& e) {
    ClientState* st = e.client;
    Qp& qp = st->qps[st->batch[e.index].addr.node];
    --qp.outstanding;
    if (!qp.waiting.empty()) {
      const uint32_t next = qp.waiting.front();
      qp.waiting.pop_front();
      ++qp.outstanding;
      schedule(now_ + profile_.latency_ns, st, next, Ev::kArrive);
    }
    return --st->outstanding == 0;
  }

  SimProfile profile_;
  std::vector<Region> regions_;
  std::unordered_map<uint16_t, RpcHandler> handlers_;
  std::vector<double> nic_free_, cpu_free_;
  double min_service_ns_ = 0;
  bool measured_ = false;
  double clock_read_ns_ = 0;  // thread_cpu_read_ns(), measured mode
  double client_cpu_ns_ = 0;  // measured client CPU charged so far (unscaled)
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  double now_ = 0;
  uint64_t seq_ = 0;
  uint64_t events_ = 0;
  std::atomic<uint32_t> active_{0};
  uint32_t next_standalone_ = 0x80000000u;
  struct Start {  // what a client's coroutine runs
    SimFabricImpl* self;
    ClientState* st;
    uint32_t c;
    const std::function<void(uint32_t, Transport&)>* fn;
    Transport* transport;
    std::exception_ptr* error;
  };
  Fiber* scheduler_ = nullptr;   // inside run(): the scheduler's context
  ClientState* next_ = nullptr;  // inside run(): the client the scheduler resumes next
  SimRunStats last_;
};

void SimTransport::execute(std::span<Request> batch) {
  ++counters_.batches;
  struct Mark {  // the client's CPU is measured again from here, also when the batch failed
    SimFabricImpl& f;
    ClientState* st;
    ~Mark() {
      if (f.measured()) mark_cpu(st);
    }
  } mark{fabric_, st_};
  fabric_.execute(st_, batch);
  bool failed = false;
  for (const Request& r : batch) {
    if (r.status == ReqStatus::kOk) counters_.add(r);
    else failed = true;
  }
  if (failed) throw FabricError(st_->error.empty() ? "sim fabric: request failed" : st_->error);
}

std::chrono::steady_clock::time_point SimTransport::now() const {
  // Virtual time 0 is reported as 1 s: histories (src/check) reserve time 0 for initial states.
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(1000000000LL + std::llround(fabric_.now_ns())));
}

}  // namespace

std::unique_ptr<SimFabric> make_sim_fabric(std::vector<uint64_t> region_bytes, SimProfile profile) {
  return std::make_unique<SimFabricImpl>(std::move(region_bytes), std::move(profile));
}

}  // namespace rdmahash
