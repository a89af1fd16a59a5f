// rdmahash/ucx_fabric.h — the UCX (UCP) fabric, launched and bootstrapped with MPI.
//
// One process per MPI rank, one UCP worker per process. Ranks `0..K-1` are memory nodes (or every
// rank with `symmetric`); memory node i exposes a region allocated by
// `ucp_mem_map(UCP_MEM_MAP_ALLOCATE)` so that one-sided operations on shared memory complete
// without the target's CPU. MPI is used only to exchange worker addresses and packed rkeys, for
// barriers, and to gather results; the data path is UCP (get/put/atomic_nbx, active messages).
//
// How memory nodes wait for work is UcxFabricConfig::serve_mode (ServeMode below): by default
// they sleep on the worker's event fd where one-sided operations need no target CPU (shared
// memory, RDMA) and spin for a bounded time before sleeping where the target CPU executes every
// one-sided operation (TCP). Clients progress their worker while they wait for a batch, which
// also serves RPCs sent to them when they host a shard (symmetric mode); how they wait between
// events is UcxFabricConfig::client_wait (ClientWait below): busy polling by default, spin-then-
// sleep on the worker's event fd where every transport is TCP.
//
// Lifecycle (every rank): create() [collective] → load shards → barrier() → clients run, then call
// client_done() → memory nodes call serve() (returns when every client rank has called
// client_done()) → barrier() → destroy.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmahash/fabric.h"

namespace rdmahash {

// How a memory node (UcxFabric::serve(), `rdmahash serve`) waits for UCX work.
//   kEvent:  progress until idle, arm the worker (ucp_worker_arm), sleep in poll() on its event fd.
//            No CPU while idle, but every wakeup costs the request that caused it a scheduler
//            wakeup and a few system calls (poll, epoll_wait, arm) before UCX sees it.
//   kHybrid: after the last event, keep calling ucp_worker_progress until `serve_spin` passes
//            without one, then as kEvent. Back-to-back requests (a client at depth 16) are then
//            answered by a spinning worker; an idle memory node sleeps after `serve_spin`.
//            `serve_spin` stays below 1 ms (--serve-spin-us ≤ 999): a spin returns every 1 ms to
//            look at the caller's other fds and starts afresh, so a longer one would never sleep.
//   kPoll:   never sleep: progress continuously (other fds are looked at without blocking about
//            every millisecond). Takes a core for good: for a memory node with a core of its own.
//   kAuto:   kHybrid when every transport the UCX context may use to reach another process is
//            TCP (UCX then emulates READ/WRITE/CAS/FAA with active messages that this node's CPU
//            executes: its progress latency is on the critical path of every operation), else
//            kEvent (shared memory and RDMA complete one-sided operations without this CPU; only
//            RPCs and wireup wake it). See resolve_serve_mode() and docs/results.md for the numbers.
enum class ServeMode { kAuto, kEvent, kHybrid, kPoll };
const char* serve_mode_name(ServeMode mode);
// The one place a serve mode's name is checked (--serve-mode; every caller validates through it):
// "auto", "event", "hybrid", "poll", else nullopt. serve_mode_names() is the list for messages.
std::optional<ServeMode> parse_serve_mode(std::string_view name);
inline constexpr const char* serve_mode_names() { return "auto, event, hybrid or poll"; }
// The spin of kHybrid: long enough to cover the gap between two batches of one client at depth 16
// over TCP on the loopback (a few µs to tens of µs), short enough that an idle node gives its core back.
constexpr std::chrono::microseconds kDefaultServeSpin{50};
// kAuto's choice given the transports (UCX names, e.g. "tcp", "posix", "rc_mlx5"; "self" is
// ignored) of the context; other modes are returned unchanged.
ServeMode resolve_serve_mode(ServeMode mode, const std::vector<std::string>& transports);

// How a client (UcxTransport::execute) waits while its batch's requests are in flight.
//   kPoll:   call ucp_worker_progress in a loop until the batch completes. Lowest latency while the
//            client has a core to itself; with more runnable processes than cores (2 clients and a
//            memory node on 2 cores, over TCP) every process busy-waits its whole time slice, and
//            a request's answer waits for the scheduler to run the one process that can use it
//            (milliseconds: the 2-client p99 of 5-8 ms in docs/results.md).
//   kHybrid: progress; once `client_spin` passes without an event (ucp_worker_progress returning
//            0), arm the worker (ucp_worker_arm) and sleep in poll() on its event fd until a reply
//            arrives. (It does not sched_yield() while spinning: clients yielding to each other
//            took the CPU from the memory node they waited for, 3x slower in a contended run.)
//            No spin at all while the machine has more runnable tasks than CPUs (looked at in /proc/loadavg at most once per ms; 3 looks in a row pause it for
//            100 ms: detail::ClientSpin): 4 clients and a memory node on 2 cores then wait as
//            kEvent does. The bench JSON counts both (client_sleeps_per_op,
//            client_unspun_sleeps_per_op; FabricCounters).
//   kEvent:  kHybrid without the spin: arm and sleep as soon as progress finds nothing.
//   kAuto:   kHybrid when every transport is TCP (replies arrive on sockets the event fd covers,
//            and the peers this client waits for need CPU time themselves), else kPoll (shared
//            memory and RDMA complete without a wakeup; the event fd would cost a wakeup per batch).
// A sleep is bounded (kClientSleepBound): a transport whose completions raise no event can only
// delay a batch, never hang it. Requires UCP_FEATURE_WAKEUP (every context of this fabric has it).
enum class ClientWait { kAuto, kPoll, kHybrid, kEvent };
const char* client_wait_name(ClientWait wait);
// The one place a client wait policy's name is checked (--client-wait).
std::optional<ClientWait> parse_client_wait(std::string_view name);
inline constexpr const char* client_wait_names() { return "auto, poll, hybrid or event"; }
// kHybrid's spin: a few round trips over loopback TCP (one client's get: p50 23 us at depth 1, 26 us
// at depth 16 on the 2-core test machine, docs/results.md "TCP: how a client waits, re-measured"),
// so a reply usually comes within it and a client with a CPU of its own waits as fast as kPoll.
// It takes no CPU another process needs: while the machine has more runnable tasks than CPUs the
// client does not spin at all (detail::ClientSpin, ucx_internal.h). 20 us, the old default, slept
// before a fifth of the depth-1 replies.
constexpr std::chrono::microseconds kDefaultClientSpin{100};
constexpr std::chrono::milliseconds kClientSleepBound{1};
ClientWait resolve_client_wait(ClientWait wait, const std::vector<std::string>& transports);

// Whether a client sends the one-sided requests of one batch to one memory node (READ, WRITE, CAS,
// FAA, fenced or not) as one active message (kAmOpv, ucx_fabric.cpp), which the memory node
// performs in posting order and answers with one reply, instead of one UCX operation each. The
// name (and --read-coalescing) is from when it covered READs only; it covers every one-sided request.
//   kOn:   coalesce a batch's one-sided requests to a node (one that is not mapped for direct
//          access) when there are at least 2; an RPC to the node goes as its own message beside
//          them, unless the batch also sends the node a fenced request (then every request to the
//          node keeps the per-operation path: the message may go out before the RPC).
//   kOff:  one ucp_get / ucp_put / ucp_atomic_op per request.
//   kAuto: kOn when every transport is TCP (UCX then emulates each one-sided operation with an
//          active message that the memory node's CPU answers: one message per request each way, a
//          system call each; one message for the batch does the same work), else kOff (shared
//          memory and RDMA have real one-sided operations that need no CPU at the memory node).
enum class ReadCoalescing { kAuto, kOn, kOff };
const char* read_coalescing_name(ReadCoalescing mode);
// The one place --read-coalescing's value is checked.
std::optional<ReadCoalescing> parse_read_coalescing(std::string_view name);
inline constexpr const char* read_coalescing_names() { return "auto, on or off"; }
ReadCoalescing resolve_read_coalescing(ReadCoalescing mode, const std::vector<std::string>& transports);
// Whether every transport of a context performs atomics on a CPU (self, TCP's emulation, shared
// memory): only then may a coalesced message carry CAS/FAA, which the memory node performs as CPU
// atomics; a CPU atomic is not atomic against a NIC's (RDMA: atomics keep UCX's path).
bool cpu_atomics_only(const std::vector<std::string>& transports);

struct UcxFabricConfig {
  uint32_t memory_nodes = 1;   // K: ranks 0..K-1 host a region (ignored when symmetric)
  bool symmetric = false;      // every rank hosts a region and runs a client
  uint64_t region_bytes = 0;   // per memory node
  // Memory node only (not symmetric): expose this memory (e.g. a persistent-memory file mapping,
  // which keeps its contents) instead of allocating a zeroed region. ucp_mem_map registers it
  // without UCP_MEM_MAP_ALLOCATE, so over shared memory peers READ it through CMA.
  std::byte* region_address = nullptr;
  // UCX's network devices (UCX_NET_DEVICES, e.g. "lo") unless the environment sets that variable;
  // empty: every device UCX finds. `rdmahash serve` on a loopback address passes "lo", so UCX's
  // own TCP sockets listen on the loopback only.
  std::string net_devices;
  // Same-host fast path: READ/WRITE on a region this process can address (its own, or a peer's
  // mapped by ucp_rkey_ptr over shared memory) are word-wise loads and stores, and CAS/FAA CPU
  // atomics where that is safe (see ucx_fabric.cpp), executed inside execute() with no UCX request
  // and no progress. Counters (batches, requests, bytes) are the same either way. false: every
  // request goes through UCX (`bench --direct-access off`).
  bool direct_access = true;
  // Page size of the region UCX allocates (fabric.h, RegionPages): kHuge leaves UCX's hugetlb mode
  // "try" (hugetlbfs pages when reserved); kSmall sets UCX_{SYSV,POSIX}_HUGETLB_MODE=n in this
  // process. Shared memory cannot use THP unless /sys/kernel/mm/transparent_hugepage/shmem_enabled
  // allows it; `bench` reports what the region got (JSON region_pages).
  RegionPages region_pages = RegionPages::kHuge;
  // Memory nodes: how serve() waits for work (see ServeMode); kAuto is resolved by create() from
  // the transports of the UCX context.
  ServeMode serve_mode = ServeMode::kAuto;
  std::chrono::microseconds serve_spin = kDefaultServeSpin;
  // Clients: how execute() waits for its requests (see ClientWait); kAuto is resolved by create()
  // from the transports of the UCX context.
  ClientWait client_wait = ClientWait::kAuto;
  std::chrono::microseconds client_spin = kDefaultClientSpin;
  // Clients: coalescing of one-sided requests over TCP (see ReadCoalescing); kAuto is resolved by create().
  ReadCoalescing read_coalescing = ReadCoalescing::kAuto;
};

class UcxFabric : public Fabric {
 public:
  // Collective over MPI_COMM_WORLD. MPI must be initialised. Throws FabricError.
  static std::unique_ptr<UcxFabric> create(const UcxFabricConfig& config);
  ~UcxFabric() override;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool is_memory_node() const = 0;  // this rank hosts a region
  virtual bool is_client() const = 0;       // symmetric, or rank >= K
  virtual uint32_t client_count() const = 0;
  virtual void barrier() = 0;
  // Client side: tell every memory node this rank's client is finished. Call once.
  virtual void client_done() = 0;
  // Memory node side: serve one-sided progress and RPCs, waiting as config.serve_mode says, until
  // every client rank has called client_done(). No-op on ranks that host nothing.
  virtual void serve() = 0;
  // The serve mode in effect (kAuto resolved) and the UCX transports of this process's context
  // ("tcp/lo,self/memory0", from ucp_context_print_info): what `bench` reports in its JSON.
  virtual ServeMode serve_mode() const = 0;
  virtual ClientWait client_wait() const = 0;  // kAuto resolved
  virtual ReadCoalescing read_coalescing() const = 0;  // kAuto resolved: kOn or kOff
  virtual std::string transports() const = 0;
  // Gathers each rank's bytes at rank 0 (index = rank); other ranks get an empty vector.
  virtual std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) = 0;

 protected:
  UcxFabric() = default;
};

}  // namespace rdmahash
