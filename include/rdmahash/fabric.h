// rdmahash/fabric.h — the one-sided transport every scheme is written against.
//
// Model
// -----
// A fabric connects clients to `memory_nodes()` memory nodes. Each memory node exposes one
// contiguous region of `region_bytes(node)` bytes. Schemes name remote memory only by
// `RemoteAddr{node, offset}`; they never hold a pointer into another node's memory.
//
// A client owns one `Transport` (not thread-safe; one per client thread or process). It hands the
// transport a batch of `Request`s; `execute()` posts all of them and returns when every one has
// completed. One `execute()` is one network round trip for every request in it (requests of one
// batch are not ordered with respect to each other: do not put a WRITE and a dependent READ of
// the same bytes in one batch — unless the later one is fenced, below).
//
// Fence: a request with `fence` set is performed at its memory node only after every earlier
// request of the batch to that node has been performed there (what a UCX fence gives: UCX posts
// it after ucp_worker_fence). It orders without a round trip: e.g. a payload WRITE and the WRITE
// (or CAS) that publishes it go in one batch. A fence is not a request: it is not counted.
// Behind a failed request to its node a fenced request is not performed (it fails too: what it was
// ordered after may not have happened), as a work request behind a failed one on an RDMA queue
// pair; failures at other nodes do not concern it. (UCX: a failure known when posting — a request
// that failed validation; one UCX reports only at completion cannot hold back what was posted
// after it, see ucx_fabric.cpp.) A fence orders one-sided requests; it does not order them after an
// earlier RPC's handler on every transport (over shared memory or RDMA a fenced READ may be
// performed before the memory node's CPU has run the handler; over TCP one stream orders them).
// No scheme relies on it: what depends on an RPC's effect waits for its reply.
//
// Operations:
//   kRead   copy `len` bytes at `addr` into `buf`.
//   kWrite  copy `len` bytes from `buf` to `addr`.
//   kCas    8-byte compare-and-swap at `addr` (8-byte aligned): if *addr == compare, *addr = swap;
//           the old value is stored in `*result` in either case.
//   kFaa    8-byte fetch-and-add of `compare` at `addr`; old value in `*result`.
//   kRpc    two-sided request to the CPU of memory node `addr.node`: handler `rpc_id` registered
//           with `Fabric::register_rpc` receives `len` bytes from `buf` and fills `*reply`.
//           `len` is at most kMaxRpcBytes: a memory node refuses a larger payload before it
//           allocates room for it (the request fails, FabricError), on every fabric alike.
//
// Atomicity: CAS/FAA are atomic with respect to each other and to 8-byte-aligned 8-byte READs;
// READs of more than 8 bytes are not atomic (a concurrent WRITE may be observed torn), which is
// why multi-word records carry a version and a checksum (see schemes/linear).
//
// Errors: transport failures throw `FabricError`; an address outside a region is a programming
// error and throws `FabricError` too (never undefined behaviour).
//
// Per-request outcome: a failure belongs to the request that failed, not to its batch. When
// `execute()` throws FabricError it has first set `status` of every request it knows the outcome
// of: kOk for a request that completed (its effect happened and its result is valid), kFailed for
// one that did not. A request left kUnknown (the transport could not tell, e.g. it was never
// posted, or a wrapper executed copies of it) counts as failed; its effect may or may not have
// happened. When `execute()` returns normally every request succeeded. The engine resumes each
// waiting operation with its own request's outcome, so an operation whose requests all landed is
// never told it failed because another operation's request in the same batch did.
// `MemoryNodeLost` is different: it ends the client (see below), whatever the statuses say.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rdmahash {

class FabricError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A memory node is gone (its process ended: a served node's connection closed). Unlike a
// FabricError, which fails the operations of one batch, this ends the client: the engine does not
// catch it, it leaves run()/run_many() (suspended operations are abandoned), and the fabric is
// unusable from then on.
class MemoryNodeLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A scheme's retry loop (a record that stays locked or torn, a miss that keeps overlapping
// relocations) ran out of its time budget (LinearProbe/CuckooConfig `retry_budget`). The
// operation failed and changed nothing; retrying it later may succeed. A FabricError, so callers
// that count failed operations count it too.
class RetryBudgetExceeded : public FabricError {
 public:
  using FabricError::FabricError;
};

// The default time a reader keeps retrying before RetryBudgetExceeded: generous, so that a lock
// holder that is merely descheduled (oversubscribed ranks, sanitizer builds) never fails healthy
// readers; only a holder that died (and that nobody recovers) does.
inline constexpr std::chrono::nanoseconds kDefaultRetryBudget = std::chrono::seconds(20);

struct RemoteAddr {
  uint32_t node = 0;
  uint64_t offset = 0;
};

// The largest RPC payload a memory node accepts (see kRpc above). A payload's size comes from the
// wire, and a node that allocated whatever a client announced could be made to exhaust its memory;
// the schemes' RPCs carry at most a few KB (a record write: a header, the key and the value).
inline constexpr uint32_t kMaxRpcBytes = uint32_t{1} << 20;

enum class ReqKind : uint8_t { kRead, kWrite, kCas, kFaa, kRpc };

enum class ReqStatus : uint8_t { kUnknown, kOk, kFailed };

struct Request {
  ReqKind kind = ReqKind::kRead;
  RemoteAddr addr;
  void* buf = nullptr;        // read destination, write source, rpc payload
  uint32_t len = 0;           // bytes (read/write/rpc); ignored for CAS/FAA (always 8)
  uint64_t compare = 0;       // CAS: expected value; FAA: addend
  uint64_t swap = 0;          // CAS: desired value
  uint64_t* result = nullptr; // CAS/FAA: receives the old value (required)
  uint16_t rpc_id = 0;        // RPC: handler id
  std::vector<std::byte>* reply = nullptr;  // RPC: receives the reply (required)
  ReqStatus status = ReqStatus::kUnknown;   // out: set by execute() when it throws (see above)
  bool fence = false;         // performed after every earlier request of the batch to its node
};

// The 64-byte lines a READ of `len` bytes at `offset` spans, counted from its region's start
// (regions start on a line at least: UCX maps pages, the local fabric aligns to 64 bytes, so these
// are lines of memory): what a READ touches in the memory it reads, where bytes say what it moves. A 64-byte window of 32-byte slots spans one line
// or two, by where it starts; a random 8-byte read (the memory limit's probe) spans one.
inline uint64_t lines_spanned(uint64_t offset, uint64_t len) { return len == 0 ? 0 : (offset + len - 1) / 64 - offset / 64 + 1; }

// Totals over every request a transport executed.
struct FabricCounters {
  uint64_t batches = 0;
  uint64_t reads = 0, writes = 0, cas = 0, faa = 0, rpcs = 0;
  uint64_t bytes_read = 0, bytes_written = 0;  // payload bytes; atomics count 8 each way
  uint64_t lines_read = 0;  // lines_spanned() of every READ (atomics not counted)
  // Batches of READs this CPU performed as direct reads (Transport::direct_region), without a
  // request; already counted in `batches`.
  uint64_t direct_rounds = 0;
  // UCX over TCP (coalescing, ucx_fabric.h): requests that travelled in a coalesced message, and
  // those messages. Already counted above (a coalesced request is still one request).
  uint64_t coalesced_requests = 0, coalesced_messages = 0;
  // UCX clients (ClientWait, ucx_fabric.h): sleeps on the worker's event fd, and kHybrid waits
  // that did not spin because the machine had more runnable tasks than CPUs.
  uint64_t client_sleeps = 0, client_unspun_sleeps = 0;
  void add(const Request& r);
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Posts every request and waits until all have completed. Throws FabricError if any failed,
  // after setting each request's `status` (see "Per-request outcome").
  virtual void execute(std::span<Request> batch) = 0;
  const FabricCounters& counters() const { return counters_; }
  // The clock this client's time is measured by: the engine's batch boundaries (latencies,
  // histories) and the bench's throughput. Real fabrics: steady_clock. A simulated fabric
  // (sim_fabric.h): its virtual time, so every measurement of a simulated run is in virtual time.
  virtual std::chrono::steady_clock::time_point now() const { return std::chrono::steady_clock::now(); }

  // Direct reads: a READ performed by this process's CPU on memory it maps, without a request,
  // for a lookup that reads many windows in place (LinearClient::get_batch). A transport that
  // performs node `node`'s READs that way anyway (UCX with direct access, LocalFabric) returns
  // that node's mapped region; others return {} and the caller posts requests. Reading through
  // it is a READ with this header's semantics only when
  //   * it lies inside a round: begin_direct_reads() ... end_direct_reads(), which do what
  //     execute() does around a batch (fences, the batch count, a dead memory node's
  //     MemoryNodeLost, a fabric made unusable: the only exception begin_direct_reads throws),
  //     and end_direct_reads counts the READs and the round (FabricCounters::direct_rounds);
  //   * it loads aligned 8-byte words in ascending order with acquire loads (detail::read_in),
  //     as a direct READ of execute() does, and checks its own bounds against the span.
  virtual std::span<const std::byte> direct_region(uint32_t /*node*/) { return {}; }
  virtual void begin_direct_reads() { throw std::logic_error("Transport: no direct reads"); }
  void end_direct_reads(uint64_t reads, uint64_t bytes, uint64_t lines);

 protected:
  FabricCounters counters_;
};

// Handler of a two-sided request, run by the CPU of the memory node that received it.
// `src` is the sender's client id (UCX: its rank). Must be thread-safe on LocalFabric, where it
// runs on the calling client's thread.
using RpcHandler = std::function<void(uint32_t src, std::span<const std::byte> request,
                                      std::vector<std::byte>& reply)>;

class Fabric {
 public:
  virtual ~Fabric() = default;
  virtual std::string_view name() const = 0;
  virtual uint32_t memory_nodes() const = 0;
  virtual uint64_t region_bytes(uint32_t node) const = 0;
  // The region of `node` when this process hosts it (LocalFabric: every node), else empty.
  // Used by memory-node-side code: bulk loading, RPC handlers, inspection.
  virtual std::span<std::byte> local_region(uint32_t node) = 0;
  // A new client access path. Safe to call from several threads.
  virtual std::unique_ptr<Transport> connect() = 0;
  // Registers the handler for `id` on every memory node hosted by this process. Register before
  // any client can send that id (the bench registers before its start barrier).
  virtual void register_rpc(uint16_t id, RpcHandler handler) = 0;
};

// Page size policy of the regions a fabric allocates. Tables larger than the last-level cache
// spend much of a random READ in TLB misses on 4 KB pages (a 1 GB region is 256 Ki pages).
//   kHuge:  ask for 2 MiB pages where the kernel allows without configuration changes: the local
//           fabric aligns regions of at least 4 MiB to 2 MiB and madvise(MADV_HUGEPAGE)s them
//           (transparent huge pages in THP's "madvise" or "always" mode); UCX allocates with its
//           hugetlb mode "try" (hugetlbfs pages when /proc/sys/vm/nr_hugepages reserves them).
//   kSmall: 4 KB pages (MADV_NOHUGEPAGE; UCX_{SYSV,POSIX}_HUGETLB_MODE=n).
// What the kernel actually gave is reported by `bench` (JSON region_pages).
enum class RegionPages : uint8_t { kHuge, kSmall };

// In-process fabric: memory nodes are heap regions of this process, clients are threads, atomics
// are real `std::atomic_ref` operations. Every request is bounds-checked.
std::unique_ptr<Fabric> make_local_fabric(std::vector<uint64_t> region_bytes, RegionPages pages = RegionPages::kHuge);
// The same over regions the caller owns and keeps alive (e.g. persistent-memory file mappings).
std::unique_ptr<Fabric> make_local_fabric_over(const std::vector<std::span<std::byte>>& regions);

}  // namespace rdmahash
