// Internal: the UCX side of `rdmahash serve` and of its clients (ucx_service.cpp), implemented by
// ucx_fabric.cpp's fabric in a mode without MPI. The TCP handshake of ucx_service.cpp carries what
// UcxFabric::create() exchanges with MPI allgathers: worker addresses and region exports.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <string>
#include <memory>
#include <utility>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash::detail {

// The number of runnable tasks on the machine from /proc/loadavg's text ("0.20 0.18 0.12 3/80
// 11206": the 3 of the fourth field, the caller included), or nullopt when the text is not that.
std::optional<int> runnable_tasks(std::string_view loadavg);

// A client's kHybrid wait across batches (UcxFabricImpl::client_idle; one per transport). A spin
// pays only while no other runnable task wants a CPU: with more runnable tasks than the machine
// has CPUs (4 spinning clients and a memory node on 2 cores) every reply then waits for the
// scheduler to give the one process that can use it its turn, whereas a process that sleeps and
// is woken runs at once. So when an idle stretch begins, at most once per kLookEvery, the client
// counts the runnable tasks (/proc/loadavg, machine-wide, against the machine's online CPUs, the
// CPUs that count covers); kStreak contended looks in a row, none more than kStreakGap after the
// last, pause the spin for kPause: every stretch meanwhile sleeps at once, as kEvent does.
// (getrusage's involuntary switches, which serve_step uses, do not tell the cases apart here: over
// loopback TCP a client's send wakes the memory node on the client's own CPU, which preempts the
// client even when the other CPU is idle. The thread's affinity is not the measure either: an
// mpirun rank bound to its own core has a CPU to itself while its memory node runs on the other.)
class ClientSpin {
 public:
  static constexpr std::chrono::milliseconds kLookEvery{1}, kStreakGap{10}, kPause{100};
  static constexpr int kStreak = 3;  // contended looks in a row that pause the spin
  // `runnable` counts the runnable tasks (tests pass their own); empty: /proc/loadavg.
  explicit ClientSpin(std::function<std::optional<int>()> runnable = {}) : runnable_(std::move(runnable)) {}
  ClientSpin(const ClientSpin&) = delete;
  ClientSpin& operator=(const ClientSpin&) = delete;
  ~ClientSpin();
  // One idle progress of a kHybrid wait (ucp_worker_progress found nothing): true to keep
  // spinning, false to sleep now. `begins`: the first idle progress of a stretch (the spin's
  // clock starts, and the stretch spins at all only if not paused).
  bool keep_spinning(bool begins, std::chrono::steady_clock::time_point now, std::chrono::microseconds budget);
  bool stretch_spins() const { return spins_; }  // the current stretch spins (was not paused)
  // True while the spin is paused; counts the runnable tasks when a look is due (once per kLookEvery).
  bool paused(std::chrono::steady_clock::time_point now);
  int cpus();  // the machine's online CPUs (get_nprocs), at least 1
  void set_cpus(int cpus) { cpus_ = cpus; }  // tests

 private:
  std::optional<int> read_loadavg();
  std::function<std::optional<int>()> runnable_;
  std::chrono::steady_clock::time_point paused_until_{}, looked_at_{}, since_{};
  bool spins_ = false;
  int streak_ = 0;  // contended looks in a row
  int cpus_ = 0;    // 0: not asked yet
  int fd_ = -1;     // /proc/loadavg, kept open (pread at 0 regenerates it); -2: cannot be read
};

// A memory node's fabric, served by UcxServer's poll loop.
class UcxServiceNode {
 public:
  virtual ~UcxServiceNode() = default;
  // local_region(node) is the region; register the scheme's RPCs here.
  virtual Fabric& fabric() = 0;
  // u64 base address, u64 region bytes, packed rkey: what a client needs to reach the region.
  virtual std::vector<std::byte> region_export() = 0;
  // A UCX worker of client `id`'s own; its address goes in that client's welcome. UCX's
  // shared-memory transports give each worker ONE receive FIFO that every sender appends to by
  // reserving an element (CAS on its head) and then filling it: a client killed between the two
  // leaves an element that is never completed, and the worker's receiver waits on it for ever,
  // so every later message to that worker (every other client's RPCs) is never read. With a
  // worker per client, a dead client stalls only its own worker, which is destroyed when the
  // server learns of the loss (remove_client, also on a goodbye). Throws FabricError.
  virtual std::vector<std::byte> add_client(uint32_t id) = 0;
  virtual void remove_client(uint32_t id) = 0;
  // Readable when any worker has an event (an epoll set of them all).
  virtual int event_fd() = 0;
  // Progresses the worker as the serve mode says (UcxFabricConfig::serve_mode). True: the worker
  // is armed, safe to sleep in poll() on event_fd(); false: look at the other fds without
  // sleeping and call again.
  virtual bool serve_step() = 0;
  virtual ServeMode serve_mode() const = 0;   // kAuto resolved
  virtual std::string transports() const = 0;  // "tcp/lo,..." of the UCX context
  virtual uint64_t spin_pauses() const = 0;     // hybrid: spins cut short because the CPU was contended
};

std::unique_ptr<UcxServiceNode> make_ucx_service_node(const UcxFabricConfig& config, uint32_t node, uint32_t nodes);

struct UcxRemoteNode {
  std::vector<std::byte> worker_address;
  std::vector<std::byte> region_export;
  // Endpoint error mode: peer failure handling (UCP_ERR_HANDLING_MODE_PEER), or none. See
  // ucx_service.h: PEER unless the node shares this host and shared memory may carry the traffic.
  bool peer_failure = true;
};

// A client's fabric over memory nodes reached by their worker addresses; `config.region_bytes` is
// every node's region size (each export is checked against it). Wires every endpoint up before it
// returns (the memory nodes progress in their poll loops). `liveness` ("" while every memory node
// is alive, else why not) is asked when a batch has waited 200 ms, then every 200 ms: a batch
// waiting on a dead node throws MemoryNodeLost with that text instead of waiting forever (over shared
// memory UCX cannot tell: an RPC to a dead process is never answered, and one-sided operations
// go on "succeeding" on the dead node's segment, so a batch also looks every 1024 batches). Then it
// throws MemoryNodeLost; the fabric is unusable and leaks its UCX resources rather than free
// requests UCX may still complete.
// Tests: sends `requests` (READ, WRITE, CAS, FAA; their addr.node is ignored) as one coalesced
// message (kAmOpv) to memory node `node` through `transport` (a UcxFabric's), without the client's
// own checks (bounds, alignment), and scatters the reply into them; throws FabricError with the
// memory node's answer when it refuses.
void raw_opv(Transport& transport, uint32_t node, std::span<Request> requests);

std::unique_ptr<Fabric> make_ucx_service_client(const UcxFabricConfig& config, uint32_t client_id,
                                                const std::vector<UcxRemoteNode>& nodes,
                                                std::function<std::string()> liveness);

}  // namespace rdmahash::detail
