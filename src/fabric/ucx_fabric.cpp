// UcxFabric: the fabric over UCX (UCP API), bootstrapped with MPI.
//
// Design
// ------
// * One ucp_context (RMA | AMO64 | AM | WAKEUP) and one worker (UCS_THREAD_MODE_SINGLE) per
//   process, endpoints to every rank including this one (loopback, which symmetric mode needs, goes
//   over the "self" transport when UCX_TLS allows it). Transports come from the environment (UCX_TLS, UCX_NET_DEVICES,
//   ...); nothing is hard-coded here.
// * MPI (MPI_COMM_WORLD) is used only for bootstrap and control: allgather of worker addresses and
//   packed rkeys, barriers, gather(). Each step of create() ends with an agreement (allreduce) so
//   that a failure on one rank makes every rank throw instead of leaving the others in a
//   collective. The collectives of create() and of destruction are non-blocking (MPI_I*) and
//   progress the worker while they wait: over TCP a peer's endpoint wireup or flush needs this
//   worker to progress. barrier() and gather() are plain blocking MPI calls: the lifecycle in
//   ucx_fabric.h makes sure no client needs a memory node's progress while it sits in them.
// * Memory node regions come from ucp_mem_map(UCP_MEM_MAP_ALLOCATE). Letting UCX allocate the
//   memory lets it pick a shared-memory segment (sysv/posix) that peers on the same host map
//   through the unpacked rkey: GET/PUT become memcpy and CAS/FAA become CPU atomics executed by the
//   initiator, so one-sided operations complete without the target's CPU, like RDMA. With memory
//   from malloc, shared-memory transports could only use CMA for GET/PUT and would fall back to
//   active-message ("software") atomics that need the target to progress. Over TCP every
//   one-sided operation is an active message the target must progress; serve() does that.
// * execute() posts every request with the non-blocking *_nbx calls (at most kMaxInFlight at a
//   time; a batch of thousands is posted in waves), then busy-progresses the worker until every
//   request has completed (a failed request does not stop the others; each request's status is
//   its own, fabric.h). Between progress calls that find nothing it waits as config.client_wait
//   says (ClientWait, ucx_fabric.h; UcxFabricImpl::client_idle() below): keep polling, or spin
//   for client_spin and then arm the worker and sleep in poll() on its event fd (bounded by
//   kClientSleepBound). kAuto is resolved with serve_mode in query_transports(). PUT completion
//   in UCP is only local, so a batch that wrote to a node
//   ends with ucp_ep_flush_nbx on that node's endpoint: when execute() returns, the writes are
//   visible to every other client. CSWAP follows the UCP 1.13 convention: `buffer` holds the
//   compare value, `reply_buffer` holds the swap value on input and receives the old value.
// * serve() waits as config.serve_mode says (ServeMode, ucx_fabric.h; serve_step() below): in
//   event mode it drains the worker with ucp_worker_progress, arms it (ucp_worker_arm;
//   UCS_ERR_BUSY means "progress again") and sleeps in poll() on the worker's event fd
//   (ucp_worker_get_efd) until an event arrives; hybrid mode first spins on ucp_worker_progress
//   until serve_spin passes without an event; poll mode never sleeps. kAuto is resolved in
//   init_local() from the context's transports (ucp_context_print_info's resource lines: UCX
//   1.13 has no query API for them): hybrid when every transport but "self" is tcp. serve()
//   returns when a "done" active message from every client rank of this round has been counted
//   (a rank that is both client and memory node counts its own message too, delivered through
//   the self endpoint). `rdmahash serve` runs the same serve_step() in its own poll loop, over
//   every worker it has: a served memory node (kServer) makes one worker per client
//   (add_client_worker(); why in ucx_service.h, "One UCX worker per client"), progresses them
//   all (progress_all()), arms them all before it sleeps, and its event_fd() is an epoll set of
//   their event fds.
// * RPCs are active messages (ucp_am_send_nbx with UCP_AM_SEND_FLAG_REPLY). The memory node runs
//   the registered RpcHandler inside the AM callback (progress context) and answers with another
//   active message on the reply endpoint (posting a non-blocking send from an AM callback is
//   allowed; only ucp_worker_progress is not). The reply buffer lives on the heap until its send
//   completes. Payloads and replies of any size work: data that arrives
//   with UCP_AM_RECV_ATTR_FLAG_RNDV (rendezvous, large messages) is fetched with
//   ucp_am_recv_data_nbx before the handler runs (request side) or straight into the caller's
//   reply vector (reply side). Replies are matched to requests by a process-wide request id.
// * Same-host fast path (config.direct_access): a region this process can address — its own
//   (symmetric mode), or a peer's that ucp_rkey_ptr maps (shared-memory transports: posix, sysv,
//   xpmem) — is reached with the CPU (fabric/direct_access.h): READ/WRITE are word-wise loads and
//   stores executed inside execute(), no UCX request, no progress. A batch that mixes them with
//   UCX requests to other nodes is still one execute(): the direct ones run while the others are
//   posted, and counters count both alike (RT/op figures do not depend on the path). A batch whose
//   requests all go direct (every batch of a same-host job once atomics go direct) skips the
//   posting machinery altogether (slots, flush bookkeeping, completion loop): execute() performs
//   it in batch order and returns — the same order, fences and statuses post() would give.
//   CAS/FAA go direct only when every atomic any process of the job issues on that memory is a CPU
//   atomic, because CPU atomics are not atomic with respect to a NIC's (device) atomics:
//     - MPI jobs whose ranks all run on this host (same boot id and host name), and every rank's
//       UCX context runs atomics in "cpu" mode: with direct access on and UCX_ATOMIC_MODE unset,
//       the fabric sets ATOMIC_MODE=cpu (UCX would otherwise pick "device" atomics through a NIC's
//       loopback when an atomic-capable NIC exists, even between processes of one host); in cpu
//       mode shared-memory transports run UCX atomics with the initiator's CPU and other transports
//       as active messages the target's CPU runs with ucs_atomic_* — CPU atomics either way. The
//       ranks agree on it (allreduce); UCX_ATOMIC_MODE set to anything but cpu disables it.
//     - Otherwise (a rank on another host, whose atomics a NIC may execute; or a `bench
//       --connect` client, which cannot know where the memory node's other clients run), atomics
//       keep the UCX path and only READ/WRITE go direct. A plain store racing with a NIC atomic on
//       the same word is no different from an RDMA PUT racing with it (the schemes never WRITE a
//       word others CAS concurrently without owning it), and an aligned 8-byte load sees either value.
// * Coalescing (config.read_coalescing, ReadCoalescing in ucx_fabric.h, --read-coalescing; kAuto =
//   on when every transport is TCP). Over TCP UCX emulates each ucp_get, ucp_put and ucp_atomic
//   with an active message that the memory node's CPU answers: per request one sendto each way and
//   ~6 µs of kernel CPU on each side. When a batch sends a node at least 2 requests (at most
//   kMaxOpvOps, kMaxOpvBytes each way) and the node is not mapped for direct access, execute()
//   sends its READs, WRITEs, CASes and FAAs — fenced or not — as ONE kAmOpv message (coalesce(),
//   post_opv()) and the memory node's on_opv() answers with one reply; an RPC to the node goes as
//   its own message beside it.
//     Order: on_opv() performs the requests in posting (batch) order, each completely before the
//   next, so every fence of fabric.h holds trivially (a fenced request is performed after all
//   earlier requests of the batch to that node) and so does every order the per-operation path
//   keeps. An RPC is never part of the message (its handler runs in its own message's callback);
//   a batch with an RPC AND a fenced request to the node keeps all its requests to that node on
//   the per-operation path, since the message goes out with its first member, possibly before the
//   RPC. A fenced request behind one to its node that failed validation is not posted, as in post().
//     Atomicity: CAS/FAA run as seq_cst __atomic compare-exchange / fetch-add on the 8-byte-aligned
//   word, so they are atomic with respect to every other accessor that may reach the word
//   concurrently: other messages and UCX's own emulated AMOs over TCP (this worker runs its
//   callbacks one at a time; UCX's AM atomics are ucs_atomic_* on this CPU too), and clients on this
//   host that map the region (direct access: CPU atomics, lock cmpxchg / lock xadd). A NIC's device
//   atomics are not in that list: `auto` coalesces only where every transport is TCP, and a
//   context with any transport that may use device atomics (RDMA; `--read-coalescing on` there)
//   never puts a CAS/FAA in a message — a batch with one keeps that node on the per-operation path
//   (coalesce_atomics()). Direct atomics run only when every atomic of the job is a CPU atomic
//   (above). A client that reaches a memory node only over TCP while others reach it by RDMA gets
//   CPU atomics either way (UCX's own TCP emulation performs them on the node's CPU too): such a
//   mixed cluster needs UCX_ATOMIC_MODE=cpu on the RDMA clients, for UCX as for us. READ/WRITE bytes are copied
//   word-wise with relaxed atomic loads/stores (aligned 8-byte words never torn, tails byte-wise):
//   what the per-operation path over TCP gives and the schemes' check words assume.
//     Checks: on_opv() checks every request before performing any (the bound an rkey enforces:
//   [offset, offset + len) inside [0, region_bytes); CAS/FAA 8-byte aligned; a known kind; the
//   WRITE payloads exactly the bytes after the descriptors; reply within kMaxOpvBytes). One bad
//   request refuses the whole message: nothing is performed, those requests fail with FabricError,
//   the memory node goes on.
//     Outcome (fabric.h): a coalesced request's status is its message's — all completed (kOk: its
//   effect happened, READ bytes and old values are in) or none did. A refused message: kFailed
//   (nothing happened). A message whose send failed or whose reply was lost or malformed: READs
//   kFailed (no valid bytes, as a failed ucp_get), WRITE/CAS/FAA kUnknown (performed or not).
//   No flush follows a coalesced WRITE: the reply comes after the memory node performed it.
//     Counters count requests as before (engine RT/op, requests/op, bytes/op do not change with
//   coalescing on or off); FabricCounters::coalesced_* say what was coalesced.
//     Access: the memory node accepts kAmOpv from any endpoint that reaches its worker, exactly as
//   it accepts UCX's own emulated GET/PUT/AMO over TCP (which check no rkey at the target) and
//   kAmRpc: a `serve` client learns the worker address only from the sealed welcome that also
//   carries the rkey (docs/security.md), an mpirun rank from MPI. A message can do nothing a
//   request through the rkey could not: only [0, region_bytes) of the region.
// * Destruction: close every endpoint in FLUSH mode while progressing, then a non-blocking MPI
//   barrier while still progressing (a peer may need our progress to finish its own flushes,
//   e.g. over TCP), then unmap the region and destroy worker and context. When the destructor
//   runs during exception unwinding, it skips every collective step and force-closes endpoints,
//   so a failing rank does not hang before its caller gets to MPI_Abort.
//
// Active message protocol (ids below; headers are sent as the UCP AM header, little endian,
// native layout, all ranks run the same binary):
//   kAmRpc    client -> memory node. header RpcHeader {u64 req_id; u32 src_rank; u16 rpc_id;
//             u16 reserved} (16 B); data = request payload.
//   kAmReply  memory node -> client. header ReplyHeader {u64 req_id; u32 status; u32 reserved}
//             (16 B); data = reply bytes (status kOk) or an error message (other statuses).
//   kAmDone   client -> memory node. header DoneHeader {u32 src_rank; u32 reserved} (8 B); no data.
//   kAmOpv    client -> memory node (UCP_AM_SEND_FLAG_REPLY | EAGER). header OpvHeader {u64 req_id;
//             u32 count; u32 reserved} (16 B); data = count x OpvOp {u64 offset; u32 len; u8 kind
//             (ReqKind: READ 0, WRITE 1, CAS 2, FAA 3); u8 reserved[3]; u64 operand (CAS compare,
//             FAA addend); u64 swap (CAS)} (32 B each; offsets relative to the region), then the
//             WRITEs' payloads concatenated in order. Answered with kAmReply: status kOk and, in
//             request order, each READ's bytes and each CAS/FAA's old value (8 B); or
//             kRpcBadRequest and a message (a request outside the region, a misaligned atomic, an
//             unknown kind, payload bytes that do not match, too many requests or bytes, data sent
//             by rendezvous), nothing performed.
//
// Threading: the worker is single-threaded. connect() may be called from any thread, but every
// Transport of one UcxFabric, serve() and client_done() must be used from one thread at a time.
// Transports must not outlive their fabric.
#include "rdmahash/ucx_fabric.h"

#include "fabric/direct_access.h"
#include "fabric/ucx_internal.h"

#include <mpi.h>
#include <cstdlib>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace rdmahash {
namespace {

constexpr uint16_t kAmRpc = 1;
constexpr uint16_t kAmReply = 2;
constexpr uint16_t kAmDone = 3;
constexpr uint16_t kAmOpv = 4;

// Coalesced requests (kAmOpv): at most this many requests, request bytes (descriptors and WRITE
// payloads) and reply bytes (READ bytes and atomics' old values) per message. The client coalesces
// only batches within all three; a memory node refuses a message beyond any.
constexpr uint32_t kMaxOpvOps = 1024;
constexpr uint64_t kMaxOpvBytes = uint64_t{1} << 20;

// Upper bound on requests of one batch that are posted but not completed. Keeps UCX's internal
// request pool and pending queues small for batches of thousands of requests.
constexpr size_t kMaxInFlight = 512;

struct RpcHeader {
  uint64_t req_id;
  uint32_t src_rank;
  uint16_t rpc_id;
  uint16_t reserved;
};
struct ReplyHeader {
  uint64_t req_id;
  uint32_t status;
  uint32_t reserved;
};
struct DoneHeader {
  uint32_t src_rank;
  uint32_t reserved;
};
struct OpvHeader {
  uint64_t req_id;
  uint32_t count;
  uint32_t reserved;
};
// One request of a kAmOpv message. kind: a ReqKind (READ, WRITE, CAS, FAA); len: READ/WRITE bytes
// (8 for atomics); operand: CAS compare value, FAA addend; swap: CAS swap value.
struct OpvOp {
  uint64_t offset;
  uint32_t len;
  uint8_t kind;
  uint8_t reserved[3];
  uint64_t operand;
  uint64_t swap;
};
static_assert(sizeof(RpcHeader) == 16 && sizeof(ReplyHeader) == 16 && sizeof(DoneHeader) == 8);
static_assert(sizeof(OpvHeader) == 16 && sizeof(OpvOp) == 32);

// Bytes a request adds to a kAmOpv message (descriptor + WRITE payload) and to its reply.
inline uint64_t opv_request_bytes(const Request& r) { return sizeof(OpvOp) + (r.kind == ReqKind::kWrite ? r.len : 0); }
inline uint64_t opv_reply_bytes(const Request& r) {
  return r.kind == ReqKind::kRead ? r.len : (r.kind == ReqKind::kCas || r.kind == ReqKind::kFaa) ? 8 : 0;
}

enum RpcStatus : uint32_t { kRpcOk = 0, kRpcNoHandler = 1, kRpcHandlerFailed = 2, kRpcBadRequest = 3 };

std::string ucx_error(const std::string& what, ucs_status_t status) {
  return "ucx fabric: " + what + ": " + ucs_status_string(status);
}

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw FabricError(std::string("ucx fabric: ") + what + " failed (MPI error " + std::to_string(rc) + ")");
}

const char* kind_name(ReqKind k) {
  switch (k) {
    case ReqKind::kRead: return "READ";
    case ReqKind::kWrite: return "WRITE";
    case ReqKind::kCas: return "CAS";
    case ReqKind::kFaa: return "FAA";
    case ReqKind::kRpc: return "RPC";
  }
  return "?";
}

std::string describe(const Request& r) {
  std::string s = kind_name(r.kind);
  if (r.kind == ReqKind::kRpc) return s + " " + std::to_string(r.rpc_id) + " to node " + std::to_string(r.addr.node);
  if (r.kind == ReqKind::kRead || r.kind == ReqKind::kWrite) s += " of " + std::to_string(r.len) + " bytes";
  return s + " at node " + std::to_string(r.addr.node) + " offset " + std::to_string(r.addr.offset);
}

class UcxFabricImpl;
class UcxTransport;

// One request of a batch (or one endpoint flush) while it is in flight.
struct Slot {
  UcxTransport* owner = nullptr;
  Request* req = nullptr;  // null for flush slots
  uint32_t node = 0;       // flush slots: the flushed node
  int pending = 0;         // completions still expected (RPC: send + reply)
  ucs_status_t status = UCS_OK;
  std::string error;       // RPC: error reported by the memory node
  RpcHeader hdr{};         // RPC: must stay valid until the send completes (opv: hdr.req_id is its id)
  // Coalescing. A member request's slot names its message (`group`, index into groups_); the
  // message's slot (req == null) holds the members, the bytes sent and the header.
  int32_t group = -1;
  bool leader = false;                 // member that posts the message (the first one)
  bool opv = false;                    // this slot is a coalesced message
  bool refused = false;                // opv: the memory node refused it (nothing was performed)
  std::vector<Request*> members;       // opv: the requests, in posting (batch) order
  std::vector<std::byte> body;         // opv: OpvOps then WRITE payloads; valid until the send completes
  std::vector<std::byte> payload;      // opv, while the message is built: the WRITE payloads (then appended to body)
  OpvHeader ohdr{};                    // opv
  uint64_t total = 0;                  // opv: reply bytes expected
  std::vector<std::byte> scratch;      // opv: a reply that arrives by rendezvous
};

// A reply being sent by a memory node; freed when the send completes.
struct OutgoingReply {
  ReplyHeader hdr{};
  std::vector<std::byte> data;
};

// An RPC whose payload arrives by rendezvous; the handler runs when the data is in.
struct IncomingRpc {
  UcxFabricImpl* fabric = nullptr;
  RpcHeader hdr{};
  ucp_ep_h reply_ep = nullptr;
  std::vector<std::byte> payload;
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(UcxFabricImpl& f) : fabric_(f) {}
  void execute(std::span<Request> batch) override;

  // One expected completion of `s` has happened.
  void complete_unit(Slot& s, ucs_status_t status) {
    if (status != UCS_OK && s.status == UCS_OK) s.status = status;
    if (--s.pending == 0) --outstanding_;
  }
  void fail_rpc(Slot& s, std::string message) {
    if (s.error.empty()) s.error = std::move(message);
    complete_unit(s, UCS_ERR_REJECTED);
  }
  // A coalesced message's reply (`len` bytes at `data`): scatters it into the members' buffers
  // (READ bytes, CAS/FAA old values).
  void opv_reply(Slot& g, const std::byte* data, size_t len);
  // detail::raw_opv (tests): one message with the given requests, no client-side checks.
  void raw_opv(uint32_t node, std::span<Request> reqs);

 private:
  void validate(const Request& r) const;
  // The request may be performed by this CPU on the node's mapped region (direct access): a READ
  // or WRITE, or a CAS/FAA where CPU atomics are atomic with every other accessor's (see above).
  bool goes_direct(const Request& r) const;
  void post(Slot& s);
  void post_flush(Slot& s);
  void post_opv(Slot& g);
  // Forms groups_: the requests of this batch that go to one memory node as one message.
  void coalesce(std::span<Request> batch);
  // Appends `r` to message `g` (descriptor, WRITE payload, reply size).
  static void add_member(Slot& g, Request& r);
  void settle(Slot& s, ucs_status_ptr_t sp);

  UcxFabricImpl& fabric_;
  std::vector<Slot> slots_;
  std::vector<Slot> flush_slots_;
  std::vector<Slot> groups_;  // coalesced messages of this batch (never resized while in flight)
  std::vector<char> wrote_;  // per node: this batch wrote to it
  std::vector<char> posted_; // per node: this batch posted a UCX request to it (fences, see post())
  size_t outstanding_ = 0;   // slots with pending > 0
  uint64_t batches_ = 0;     // liveness checks (service clients)
  std::chrono::steady_clock::time_point last_batch_look_{};
};

class UcxFabricImpl final : public UcxFabric {
 public:
  // kMpi: a rank of an mpirun job (create()). kServer / kClient: `rdmahash serve` and its clients
  // (ucx_service.cpp): no MPI; the TCP handshake there carries what create()'s allgathers carry.
  enum class Mode { kMpi, kServer, kClient };
  explicit UcxFabricImpl(const UcxFabricConfig& config);
  // Service modes. kServer: memory node `self` of `nodes`. kClient: client `self` of memory nodes
  // `nodes` (connected by connect_service_nodes()).
  UcxFabricImpl(Mode mode, const UcxFabricConfig& config, uint32_t self, uint32_t nodes);
  void init_service();
  std::vector<std::byte> worker_address_bytes() { return worker_address_of(worker_); }
  // kServer: a worker of this client's own (its address goes in the client's welcome), so that
  // what one client leaves behind in UCX's per-worker state cannot stall another (see "Service
  // memory nodes" in the header comment); removed when the client leaves or is lost.
  std::vector<std::byte> add_client_worker(uint32_t id);
  void remove_client_worker(uint32_t id);
  std::vector<std::byte> region_export();
  void connect_service_nodes(const std::vector<detail::UcxRemoteNode>& nodes);
  int event_fd();
  bool drain_and_arm();
  // One step of a memory node's wait (ServeMode): progresses the worker as the mode says and
  // returns true when it is armed (the caller may sleep in poll() on event_fd()), false when the
  // caller should look at its other fds without sleeping and call again (poll mode, or hybrid
  // mode while events keep coming: at most ~1 ms per step).
  bool serve_step();
  // A client's wait between progress calls (ClientWait): `progressed` is what the last
  // ucp_worker_progress returned. Returns true when it slept in poll() (the caller then looks at
  // the clock: liveness checks). Never throws: a failing arm turns the policy into kPoll.
  struct IdleState {
    std::chrono::steady_clock::time_point since{};  // first idle progress of this stretch
    bool idle = false;
  };
  bool client_idle(unsigned progressed, IdleState& st);
  bool ep_failed() const { return ep_failed_; }
  void set_ep_failed() { ep_failed_ = true; }
  void set_liveness(std::function<std::string()> f) { liveness_ = std::move(f); }
  bool has_liveness() const { return static_cast<bool>(liveness_); }
  // "" while every memory node is alive (or nobody can tell: MPI mode), else why not.
  std::string dead_node() const { return liveness_ ? liveness_() : std::string(); }
  // A batch gave up on a dead memory node: requests may still be in flight, so release() leaks
  // the UCX resources instead of closing endpoints whose callbacks would touch freed transports.
  void set_broken() { broken_ = true; }
  bool broken() const { return broken_; }
  ~UcxFabricImpl() override;
  void init();

  // Fabric
  std::string_view name() const override { return "ucx"; }
  uint32_t memory_nodes() const override { return k_; }
  uint64_t region_bytes(uint32_t node) const override { return node < k_ ? config_.region_bytes : 0; }
  std::span<std::byte> local_region(uint32_t node) override {
    if (!is_memory_node() || node != static_cast<uint32_t>(rank_) || region_ == nullptr) return {};
    return {region_, config_.region_bytes};
  }
  std::unique_ptr<Transport> connect() override {
    if (mode_ == Mode::kServer) throw FabricError("ucx fabric: a served memory node runs no client (use a DirectTransport)");
    return std::make_unique<UcxTransport>(*this);
  }
  void register_rpc(uint16_t id, RpcHandler handler) override { handlers_[id] = std::move(handler); }

  // UcxFabric
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool is_memory_node() const override {
    return mode_ == Mode::kServer || (mode_ == Mode::kMpi && static_cast<uint32_t>(rank_) < k_);
  }
  bool is_client() const override {
    return mode_ == Mode::kClient || (mode_ == Mode::kMpi && (config_.symmetric || static_cast<uint32_t>(rank_) >= k_));
  }
  uint32_t client_count() const override {
    return config_.symmetric ? static_cast<uint32_t>(size_) : static_cast<uint32_t>(size_) - k_;
  }
  void barrier() override { mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  void client_done() override;
  void serve() override;
  ServeMode serve_mode() const override { return serve_mode_; }
  ClientWait client_wait() const override { return client_wait_; }
  ReadCoalescing read_coalescing() const override { return read_coalescing_; }
  // May a coalesced message carry CAS/FAA? Its atomics are the memory node's CPU atomics, atomic
  // only against other CPU atomics: true when every transport of this context performs atomics on
  // a CPU (TCP's emulation, shared memory), false when a NIC may (RDMA: `--read-coalescing on`
  // there coalesces READs and WRITEs only, and a batch's atomics keep the node on UCX's path).
  bool coalesce_atomics() const { return coalesce_atomics_; }
  std::string transports() const override { return transports_; }
  uint64_t spin_pauses() const { return spin_pauses_; }
  std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) override;

  // Used by transports and callbacks.
  ucp_worker_h worker() const { return worker_; }
  ucp_ep_h ep(uint32_t rank) const { return eps_[rank]; }
  ucp_rkey_h rkey(uint32_t node) const { return rkeys_[node]; }
  uint64_t remote_base(uint32_t node) const { return remote_base_[node]; }
  // Node's region as this process addresses it (direct access), or null: use UCX.
  std::byte* direct(uint32_t node) const { return node < direct_.size() ? direct_[node] : nullptr; }
  bool direct_atomics() const { return direct_atomics_; }
  uint64_t next_request_id() { return next_req_id_++; }
  std::unordered_map<uint64_t, Slot*>& rpc_waiting() { return rpc_waiting_; }

 private:
  static ucs_status_t on_rpc(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param);
  static void on_rpc_data(void* request, ucs_status_t status, size_t length, void* user_data);
  static ucs_status_t on_reply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  static ucs_status_t on_opv(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  static ucs_status_t on_done(void* arg, const void* header, size_t header_length, void* data, size_t length,
                              const ucp_am_recv_param_t* param);
  static void on_reply_sent(void* request, ucs_status_t status, void* user_data);

  void init_local();
  // Fills transports_ and resolves serve_mode_ (kAuto) from the context's resources.
  void query_transports();
  void connect_peers(const std::vector<std::vector<std::byte>>& addresses);
  void exchange_rkeys();
  // Memory node n's region_export(): base address, size (must be config_.region_bytes), rkey
  // unpacked on eps_[n]. Throws FabricError.
  void import_region(uint32_t n, const std::vector<std::byte>& blob);
  // Sets direct_[n] when direct access is on and node n's whole region is addressable here.
  void map_direct(uint32_t n);
  bool all_ranks_on_this_host();
  void set_am_handler(ucp_worker_h w, uint16_t id, ucp_am_recv_callback_t cb);
  void set_am_handlers(ucp_worker_h w);
  std::vector<std::byte> worker_address_of(ucp_worker_h w);
  // Progresses every worker of this process once (kServer: the main one and each client's);
  // returns the sum of what ucp_worker_progress returned.
  unsigned progress_all();
  // The worker whose progress runs the active message callbacks now (their data descriptors
  // belong to it).
  ucp_worker_h am_worker() const { return serving_ ? serving_ : worker_; }
  void run_rpc(const RpcHeader& h, ucp_ep_h reply_ep, std::span<const std::byte> payload);
  void send_reply(ucp_ep_h reply_ep, OutgoingReply* out);
  // Progresses the worker until `sp` (a UCP request, NULL or an error) completes; frees it.
  ucs_status_t wait(ucs_status_ptr_t sp);
  // Waits for a non-blocking MPI operation while progressing the worker (when it exists): during
  // create() and destruction a peer may be waiting for this worker (e.g. TCP wireup, flushes).
  void progress_wait(MPI_Request& req);
  void progress_barrier();
  bool all_agree(bool ok);
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine);
  void release(bool unwinding);

  UcxFabricConfig config_;
  Mode mode_ = Mode::kMpi;
  bool ep_failed_ = false;  // service client: an endpoint reported a peer failure
  bool broken_ = false;     // see set_broken()
  std::function<std::string()> liveness_;
  int rank_ = 0;
  int size_ = 0;
  uint32_t k_ = 0;  // memory nodes

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::map<uint32_t, ucp_worker_h> client_workers_;  // kServer: client id -> its worker
  ucp_worker_h serving_ = nullptr;                   // kServer: the worker being progressed
  int epfd_ = -1;                                    // kServer: epoll set of every worker's event fd
  ucp_mem_h memh_ = nullptr;
  std::byte* region_ = nullptr;
  std::vector<ucp_ep_h> eps_;          // index = rank
  std::vector<ucp_rkey_h> rkeys_;      // index = memory node
  std::vector<uint64_t> remote_base_;  // index = memory node
  std::vector<std::byte*> direct_;     // index = memory node: mapped region (direct access) or null
  bool one_host_ = false;              // MPI: every rank runs on this host
  bool cpu_atomics_ = false;           // this context's UCX atomics are CPU atomics (ATOMIC_MODE=cpu)
  bool direct_atomics_ = false;        // CAS/FAA on direct_ regions use CPU atomics (see the header)
  bool connected_ = false;             // create() finished on every rank

  std::unordered_map<uint16_t, RpcHandler> handlers_;
  std::unordered_map<uint64_t, Slot*> rpc_waiting_;  // request id -> RPC awaiting its reply
  uint64_t next_req_id_ = 1;
  uint64_t done_received_ = 0;  // "done" messages not yet consumed by serve()
  ServeMode serve_mode_ = ServeMode::kEvent;  // config_.serve_mode, kAuto resolved
  ClientWait client_wait_ = ClientWait::kPoll;  // config_.client_wait, kAuto resolved
  ReadCoalescing read_coalescing_ = ReadCoalescing::kOff;  // config_.read_coalescing, kAuto resolved
  bool coalesce_atomics_ = true;
  int efd_ = -1;                                // the worker's event fd (client_idle), once asked
  // Hybrid mode: no spinning until then (the last spin was preempted), and how often that happened.
  static constexpr std::chrono::milliseconds kSpinPause{100};
  std::chrono::steady_clock::time_point spin_paused_until_{};
  uint64_t spin_pauses_ = 0;
  std::string transports_;                    // "tl/dev,..." of the context
};

// ---------------------------------------------------------------------------------------------
// Request completion callbacks (progress context; must not throw).

void on_op_done(void* request, ucs_status_t status, void* user_data) {
  Slot& s = *static_cast<Slot*>(user_data);
  s.owner->complete_unit(s, status);
  ucp_request_free(request);
}

// Completion of the send half of an RPC. A failed send gets no reply: stop waiting for it.
void on_rpc_sent(void* request, ucs_status_t status, void* user_data);

// ---------------------------------------------------------------------------------------------
// UcxFabricImpl

UcxFabricImpl::UcxFabricImpl(const UcxFabricConfig& config) : config_(config) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) throw FabricError("ucx fabric: MPI must be initialised before UcxFabric::create");
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  // Every rank on this host: UCX's own sockets need the loopback only (issue 16; init_local()
  // applies it unless UCX_NET_DEVICES is set). On several hosts UCX picks the devices.
  if (config_.net_devices.empty()) {
    MPI_Comm host = MPI_COMM_NULL;
    int on_host = 0;
    mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
    mpi_check(MPI_Comm_size(host, &on_host), "MPI_Comm_size");
    MPI_Comm_free(&host);
    if (on_host == size_) config_.net_devices = "lo";
  }
  // Validation depends only on the config and the world size, so every rank throws alike.
  if (config.region_bytes == 0) throw FabricError("ucx fabric: region_bytes must be positive");
  if (config.symmetric) {
    k_ = static_cast<uint32_t>(size_);
  } else {
    if (config.memory_nodes == 0) throw FabricError("ucx fabric: at least one memory node is required");
    if (config.memory_nodes > static_cast<uint32_t>(size_))
      throw FabricError("ucx fabric: " + std::to_string(config.memory_nodes) + " memory nodes need at least as many ranks, got " +
                        std::to_string(size_));
    k_ = config.memory_nodes;
  }
}

UcxFabricImpl::UcxFabricImpl(Mode mode, const UcxFabricConfig& config, uint32_t self, uint32_t nodes)
    : config_(config), mode_(mode), rank_(static_cast<int>(self)), size_(1), k_(nodes) {
  if (mode == Mode::kMpi) throw FabricError("ucx fabric: internal error: service constructor in MPI mode");
  if (config.region_bytes == 0) throw FabricError("ucx fabric: region_bytes must be positive");
  if (nodes == 0) throw FabricError("ucx fabric: at least one memory node is required");
  if (mode == Mode::kServer && self >= nodes)
    throw FabricError("ucx fabric: memory node " + std::to_string(self) + " of " + std::to_string(nodes) + " does not exist");
}

std::vector<std::byte> UcxFabricImpl::worker_address_of(ucp_worker_h w) {
  ucp_worker_attr_t wattr{};
  wattr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  ucs_status_t st = ucp_worker_query(w, &wattr);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_query", st));
  const auto* a = reinterpret_cast<const std::byte*>(wattr.address);
  std::vector<std::byte> out(a, a + wattr.address_length);
  ucp_worker_release_address(w, wattr.address);
  return out;
}

void UcxFabricImpl::init_service() {
  init_local();
  if (mode_ != Mode::kServer) return;
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) throw FabricError(std::string("ucx fabric: epoll_create1: ") + std::strerror(errno));
  int fd = -1;
  ucs_status_t st = ucp_worker_get_efd(worker_, &fd);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_get_efd", st));
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw FabricError(std::string("ucx fabric: epoll_ctl: ") + std::strerror(errno));
}

std::vector<std::byte> UcxFabricImpl::add_client_worker(uint32_t id) {
  if (mode_ != Mode::kServer) throw FabricError("ucx fabric: internal error: client workers belong to a served memory node");
  if (client_workers_.count(id)) throw FabricError("ucx fabric: internal error: client " + std::to_string(id) + " has a worker");
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w = nullptr;
  ucs_status_t st = ucp_worker_create(context_, &wparams, &w);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_create for client " + std::to_string(id), st));
  try {
    set_am_handlers(w);
    int fd = -1;
    st = ucp_worker_get_efd(w, &fd);
    if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_get_efd", st));
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      throw FabricError(std::string("ucx fabric: epoll_ctl: ") + std::strerror(errno));
    auto address = worker_address_of(w);
    client_workers_.emplace(id, w);
    return address;
  } catch (...) {
    ucp_worker_destroy(w);  // its event fd leaves the epoll set as it closes
    throw;
  }
}

void UcxFabricImpl::remove_client_worker(uint32_t id) {
  auto it = client_workers_.find(id);
  if (it == client_workers_.end()) return;
  int fd = -1;
  if (ucp_worker_get_efd(it->second, &fd) == UCS_OK) ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  // Endpoints UCX made for the client's wireup are closed by force: a lost client's replies in
  // flight complete with an error (on_reply_sent frees them), a finished client has none.
  ucp_worker_destroy(it->second);
  client_workers_.erase(it);
}

unsigned UcxFabricImpl::progress_all() {
  unsigned n = ucp_worker_progress(worker_);
  for (auto& [id, w] : client_workers_) {
    serving_ = w;
    n += ucp_worker_progress(w);
  }
  serving_ = nullptr;
  return n;
}

std::vector<std::byte> UcxFabricImpl::region_export() {
  void* packed = nullptr;
  size_t packed_size = 0;
  ucs_status_t st = ucp_rkey_pack(context_, memh_, &packed, &packed_size);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_rkey_pack", st));
  const uint64_t base = reinterpret_cast<uintptr_t>(region_), bytes = config_.region_bytes;
  std::vector<std::byte> blob(16 + packed_size);
  std::memcpy(blob.data(), &base, 8);
  std::memcpy(blob.data() + 8, &bytes, 8);
  std::memcpy(blob.data() + 16, packed, packed_size);
  ucp_rkey_buffer_release(packed);
  return blob;
}

// A service client's endpoint to a memory node failed (the server died or is unreachable): its
// requests complete with an error, which execute() reports; say so once.
void on_service_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* f = static_cast<UcxFabricImpl*>(arg);
  if (!f->ep_failed()) std::fprintf(stderr, "ucx fabric: the connection to a memory node failed: %s\n", ucs_status_string(status));
  f->set_ep_failed();
}

void UcxFabricImpl::connect_service_nodes(const std::vector<detail::UcxRemoteNode>& nodes) {
  if (nodes.size() != k_) throw FabricError("ucx fabric: internal error: node count mismatch");
  eps_.assign(k_, nullptr);
  rkeys_.assign(k_, nullptr);
  remote_base_.assign(k_, 0);
  for (uint32_t n = 0; n < k_; ++n) {
    const auto& node = nodes[n];
    ucp_ep_params_t ep{};
    // Peer failure handling (where the caller asks for it, see ucx_service.h): a server's endpoint
    // to this client (made by UCX's wireup) inherits the mode, so when this client dies the
    // server's pending replies fail instead of UCX aborting the server ("Endpoint timeout" is fatal
    // under UCP_ERR_HANDLING_MODE_NONE, seen over TCP); and a dead server fails this client's
    // requests instead of hanging them.
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_mode = node.peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &on_service_ep_error;
    ep.err_handler.arg = this;
    ep.address = reinterpret_cast<const ucp_address_t*>(node.worker_address.data());
    ucs_status_t st = ucp_ep_create(worker_, &ep, &eps_[n]);
    if (st != UCS_OK) {
      eps_[n] = nullptr;
      throw FabricError(ucx_error("ucp_ep_create to memory node " + std::to_string(n), st));
    }
    import_region(n, node.region_export);
  }
  const ucp_request_param_t no_params{};
  ucs_status_t st = wait(ucp_worker_flush_nbx(worker_, &no_params));  // wire every endpoint up now
  if (st != UCS_OK) throw FabricError(ucx_error("connecting to the memory nodes (worker flush)", st));
}

int UcxFabricImpl::event_fd() {
  if (mode_ == Mode::kServer) return epfd_;  // every worker's event fd (init_service())
  int fd = -1;
  ucs_status_t st = ucp_worker_get_efd(worker_, &fd);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_get_efd", st));
  return fd;
}

bool UcxFabricImpl::drain_and_arm() {
  while (progress_all() != 0) {
  }
  auto arm = [](ucp_worker_h w) {
    const ucs_status_t st = ucp_worker_arm(w);
    if (st == UCS_ERR_BUSY) return false;
    if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_arm", st));
    return true;
  };
  if (!arm(worker_)) return false;
  for (auto& [id, w] : client_workers_)
    if (!arm(w)) return false;
  return true;
}

bool UcxFabricImpl::serve_step() {
  using clock = std::chrono::steady_clock;
  // Bound on one spinning step: the caller's other fds (sockets, signals) are looked at this often.
  constexpr auto kLookEvery = std::chrono::milliseconds(1);
  if (serve_mode_ == ServeMode::kPoll) {
    const auto start = clock::now();
    do {
      for (int i = 0; i < 64; ++i) progress_all();
    } while (clock::now() - start < kLookEvery);
    return false;
  }
  if (serve_mode_ == ServeMode::kHybrid && clock::now() >= spin_paused_until_) {
    // A spin pays only while this process has a CPU to itself: when another runnable process
    // wants it (a client on a machine with fewer cores than busy processes), every request then
    // waits for the scheduler to give the spinner its turn again (milliseconds), whereas a process
    // that sleeps and is woken runs at once. So a spin during which this thread was switched out
    // involuntarily (getrusage) turns the spin off for kSpinPause: event mode meanwhile.
    rusage before{};
    ::getrusage(RUSAGE_THREAD, &before);
    const auto start = clock::now();
    auto last = start;
    for (auto now = start; now - last < config_.serve_spin; now = clock::now()) {
      if (progress_all() != 0) {
        last = now;
      } else {
        // Nothing this time: let a runnable process of this CPU (a client, on a machine with
        // fewer cores than spinning processes) run first; without one this returns at once.
        sched_yield();
      }
      if (now - start >= kLookEvery) break;  // still busy: look at the other fds, come back
    }
    rusage after{};
    ::getrusage(RUSAGE_THREAD, &after);
    if (after.ru_nivcsw != before.ru_nivcsw) {
      spin_paused_until_ = clock::now() + kSpinPause;
      ++spin_pauses_;
    }
    if (clock::now() - start >= kLookEvery) return false;
  }
  return drain_and_arm();
}

bool UcxFabricImpl::client_idle(unsigned progressed, IdleState& st) {
  if (client_wait_ == ClientWait::kPoll) return false;
  if (progressed != 0) {
    st.idle = false;
    return false;
  }
  using clock = std::chrono::steady_clock;
  if (client_wait_ == ClientWait::kHybrid) {
    const auto now = clock::now();
    if (!st.idle) {
      st.idle = true;
      st.since = now;
    }
    // No sched_yield() here (unlike the memory node's spin): clients that yield to each other
    // ping-pong the CPU away from the process they wait for; a spin of client_spin is bounded.
    if (now - st.since < config_.client_spin) return false;
  }
  if (efd_ < 0 && ucp_worker_get_efd(worker_, &efd_) != UCS_OK) {
    efd_ = -1;
    client_wait_ = ClientWait::kPoll;
    return false;
  }
  const ucs_status_t st_arm = ucp_worker_arm(worker_);
  if (st_arm == UCS_ERR_BUSY) return false;  // events arrived meanwhile: progress them
  if (st_arm != UCS_OK) {
    client_wait_ = ClientWait::kPoll;  // cannot sleep safely: poll from now on
    return false;
  }
  pollfd pfd{efd_, POLLIN, 0};
  ::poll(&pfd, 1, static_cast<int>(kClientSleepBound.count()));  // EINTR, timeout: progress again
  st.idle = false;
  return true;
}

void UcxFabricImpl::init() {
  one_host_ = all_ranks_on_this_host();
  std::string error;
  try {
    init_local();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_agree(error.empty())) throw FabricError(error.empty() ? "ucx fabric: another rank failed to initialise UCX" : error);

  // Worker addresses.
  ucp_worker_attr_t wattr{};
  wattr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  ucs_status_t st = ucp_worker_query(worker_, &wattr);
  if (!all_agree(st == UCS_OK))
    throw FabricError(st != UCS_OK ? ucx_error("ucp_worker_query", st) : "ucx fabric: another rank failed to query its worker address");
  std::vector<std::vector<std::byte>> addresses;
  try {
    addresses = allgather({reinterpret_cast<const std::byte*>(wattr.address), wattr.address_length});
  } catch (...) {
    ucp_worker_release_address(worker_, wattr.address);
    throw;
  }
  ucp_worker_release_address(worker_, wattr.address);

  error.clear();
  try {
    connect_peers(addresses);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_agree(error.empty())) throw FabricError(error.empty() ? "ucx fabric: another rank failed to create endpoints" : error);

  exchange_rkeys();  // agrees internally
  // CPU atomics only if every rank's UCX atomics are CPU atomics too (see the header).
  direct_atomics_ = all_agree(config_.direct_access && one_host_ && cpu_atomics_);

  // Wire up every connection now (flush waits for the endpoints' wireup), with every rank
  // progressing, so that the first requests of the clients do not depend on peers' progress.
  const ucp_request_param_t no_params{};  // completion is polled by wait()
  st = wait(ucp_worker_flush_nbx(worker_, &no_params));
  if (!all_agree(st == UCS_OK)) throw FabricError(ucx_error("initial worker flush", st == UCS_OK ? UCS_ERR_IO_ERROR : st));
  progress_barrier();
  connected_ = true;
}

void UcxFabricImpl::init_local() {
  ucp_config_t* cfg = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_config_read", st));
  if (!config_.net_devices.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
    st = ucp_config_modify(cfg, "NET_DEVICES", config_.net_devices.c_str());
    if (st != UCS_OK) {
      ucp_config_release(cfg);
      throw FabricError(ucx_error("setting UCX_NET_DEVICES=" + config_.net_devices, st));
    }
  }
  if (const char* mode = std::getenv("UCX_ATOMIC_MODE"); mode != nullptr) {
    cpu_atomics_ = std::string(mode) == "cpu";
  } else if (config_.direct_access && one_host_) {
    st = ucp_config_modify(cfg, "ATOMIC_MODE", "cpu");
    if (st != UCS_OK) {
      ucp_config_release(cfg);
      throw FabricError(ucx_error("setting UCX_ATOMIC_MODE=cpu", st));
    }
    cpu_atomics_ = true;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(std::max<uint32_t>(static_cast<uint32_t>(size_), k_));
  st = ucp_init(&params, cfg, &context_);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    context_ = nullptr;
    throw FabricError(ucx_error("ucp_init", st));
  }

  query_transports();

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(context_, &wparams, &worker_);
  if (st != UCS_OK) {
    worker_ = nullptr;
    throw FabricError(ucx_error("ucp_worker_create", st));
  }

  set_am_handlers(worker_);

  if (is_memory_node()) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = config_.region_address;
    mp.length = config_.region_bytes;
    mp.flags = config_.region_address ? 0 : UCP_MEM_MAP_ALLOCATE;
    st = ucp_mem_map(context_, &mp, &memh_);
    if (st != UCS_OK) {
      memh_ = nullptr;
      throw FabricError(ucx_error("ucp_mem_map of " + std::to_string(config_.region_bytes) + " bytes", st));
    }
    ucp_mem_attr_t ma{};
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    st = ucp_mem_query(memh_, &ma);
    if (st != UCS_OK) throw FabricError(ucx_error("ucp_mem_query", st));
    if (ma.length < config_.region_bytes) throw FabricError("ucx fabric: ucp_mem_map returned a short region");
    region_ = static_cast<std::byte*>(ma.address);
    if (!config_.region_address) std::memset(region_, 0, config_.region_bytes);
  }
}

void UcxFabricImpl::query_transports() {
  char* text = nullptr;
  size_t len = 0;
  std::FILE* f = ::open_memstream(&text, &len);
  if (f == nullptr) throw FabricError(std::string("ucx fabric: open_memstream: ") + std::strerror(errno));
  ucp_context_print_info(context_, f);
  std::fclose(f);
  const std::string info(text, len);
  std::free(text);
  // Lines "#      resource 1  :  md 1  dev 1  flags -- tcp/lo".
  std::vector<std::string> tls;
  transports_.clear();
  for (size_t pos = 0; pos < info.size();) {
    size_t end = info.find('\n', pos);
    if (end == std::string::npos) end = info.size();
    const std::string line = info.substr(pos, end - pos);
    pos = end + 1;
    const size_t flags = line.find(" -- ");
    if (line.find("resource") == std::string::npos || flags == std::string::npos) continue;
    std::string tl_dev = line.substr(flags + 4);
    while (!tl_dev.empty() && (tl_dev.back() == ' ' || tl_dev.back() == '\r')) tl_dev.pop_back();
    transports_ += (transports_.empty() ? "" : ",") + tl_dev;
    tls.push_back(tl_dev.substr(0, tl_dev.find('/')));
  }
  serve_mode_ = resolve_serve_mode(config_.serve_mode, tls);
  client_wait_ = resolve_client_wait(config_.client_wait, tls);
  read_coalescing_ = resolve_read_coalescing(config_.read_coalescing, tls);
  coalesce_atomics_ = cpu_atomics_only(tls);
}

void UcxFabricImpl::set_am_handlers(ucp_worker_h w) {
  set_am_handler(w, kAmRpc, &on_rpc);
  set_am_handler(w, kAmReply, &on_reply);
  set_am_handler(w, kAmDone, &on_done);
  set_am_handler(w, kAmOpv, &on_opv);
}

void UcxFabricImpl::set_am_handler(ucp_worker_h w, uint16_t id, ucp_am_recv_callback_t cb) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = id;
  p.cb = cb;
  p.arg = this;
  ucs_status_t st = ucp_worker_set_am_recv_handler(w, &p);
  if (st != UCS_OK) throw FabricError(ucx_error("ucp_worker_set_am_recv_handler", st));
}

void UcxFabricImpl::connect_peers(const std::vector<std::vector<std::byte>>& addresses) {
  eps_.assign(static_cast<size_t>(size_), nullptr);
  for (int r = 0; r < size_; ++r) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses[static_cast<size_t>(r)].data());
    ucs_status_t st = ucp_ep_create(worker_, &ep, &eps_[static_cast<size_t>(r)]);
    if (st != UCS_OK) {
      eps_[static_cast<size_t>(r)] = nullptr;
      throw FabricError(ucx_error("ucp_ep_create to rank " + std::to_string(r), st));
    }
  }
}

void UcxFabricImpl::exchange_rkeys() {
  // Blob of a memory node: region_export(). Others send nothing.
  std::vector<std::byte> blob;
  std::string error;
  if (is_memory_node()) {
    try {
      blob = region_export();
    } catch (const FabricError& e) {
      error = e.what();
    }
  }
  if (!all_agree(error.empty())) throw FabricError(error.empty() ? "ucx fabric: another rank failed to pack its rkey" : error);
  auto blobs = allgather(blob);

  rkeys_.assign(k_, nullptr);
  remote_base_.assign(k_, 0);
  try {
    for (uint32_t n = 0; n < k_; ++n) import_region(n, blobs[n]);
  } catch (const FabricError& e) {
    error = e.what();
  }
  if (!all_agree(error.empty())) throw FabricError(error.empty() ? "ucx fabric: another rank failed to unpack rkeys" : error);
}

void UcxFabricImpl::import_region(uint32_t n, const std::vector<std::byte>& b) {
  uint64_t bytes = 0;
  if (b.size() <= 16) throw FabricError("ucx fabric: memory node " + std::to_string(n) + " sent no rkey");
  std::memcpy(&remote_base_[n], b.data(), 8);
  std::memcpy(&bytes, b.data() + 8, 8);
  if (bytes != config_.region_bytes)
    throw FabricError("ucx fabric: memory node " + std::to_string(n) + " has a region of " + std::to_string(bytes) +
                      " bytes, this process expects " + std::to_string(config_.region_bytes));
  ucs_status_t st = ucp_ep_rkey_unpack(eps_[n], b.data() + 16, &rkeys_[n]);
  if (st != UCS_OK) {
    rkeys_[n] = nullptr;
    throw FabricError(ucx_error("ucp_ep_rkey_unpack for memory node " + std::to_string(n), st));
  }
  map_direct(n);
}

void UcxFabricImpl::map_direct(uint32_t n) {
  if (direct_.size() != k_) direct_.assign(k_, nullptr);
  direct_[n] = nullptr;
  if (!config_.direct_access) return;
  if (is_memory_node() && n == static_cast<uint32_t>(rank_)) {  // our own region
    direct_[n] = region_;
    return;
  }
  // ucp_rkey_ptr maps the region when a shared-memory transport packed the rkey (else
  // UCS_ERR_UNREACHABLE): check that both ends map, contiguously.
  void* first = nullptr;
  void* last = nullptr;
  const uint64_t bytes = config_.region_bytes;
  if (ucp_rkey_ptr(rkeys_[n], remote_base_[n], &first) != UCS_OK || first == nullptr) return;
  if (ucp_rkey_ptr(rkeys_[n], remote_base_[n] + bytes - 1, &last) != UCS_OK) return;
  if (static_cast<std::byte*>(last) != static_cast<std::byte*>(first) + (bytes - 1)) return;
  if (reinterpret_cast<uintptr_t>(first) % 8 != 0) return;  // atomics and word copies need alignment
  direct_[n] = static_cast<std::byte*>(first);
}

bool UcxFabricImpl::all_ranks_on_this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = 0;
  std::string id = name;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) id += std::string("/") + buf;
    std::fclose(f);
  }
  const auto ids = allgather(std::as_bytes(std::span(id)));
  for (const auto& other : ids)
    if (other.size() != id.size() || std::memcmp(other.data(), id.data(), id.size()) != 0) return false;
  return true;
}

UcxFabricImpl::~UcxFabricImpl() { release(std::uncaught_exceptions() > 0); }

void UcxFabricImpl::release(bool unwinding) {
  if (broken_) return;  // leak: see set_broken()
  int finalized = 0;
  if (mode_ == Mode::kMpi) MPI_Finalized(&finalized);
  const bool collective = mode_ == Mode::kMpi && connected_ && !unwinding && !finalized;
  // A service client flushes its endpoints on a normal exit (its last writes were flushed by
  // execute() already; this completes the closing handshake); nobody waits for it in a barrier.
  const bool flush_close = collective || (mode_ == Mode::kClient && !unwinding);
  if (worker_) {
    direct_.assign(direct_.size(), nullptr);  // peers' mappings go with their rkeys
    for (ucp_rkey_h& rk : rkeys_)
      if (rk) ucp_rkey_destroy(rk), rk = nullptr;
    // Close every endpoint at once (FLUSH: outstanding operations, e.g. RPC replies, complete
    // first), progressing until all closures are done.
    std::vector<ucs_status_ptr_t> closing;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flush_close ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    for (ucp_ep_h& e : eps_) {
      if (!e) continue;
      ucs_status_ptr_t sp = ucp_ep_close_nbx(e, &p);
      e = nullptr;
      if (sp != nullptr && !UCS_PTR_IS_ERR(sp)) closing.push_back(sp);
    }
    for (ucs_status_ptr_t sp : closing) wait(sp);
    // Peers may still need this worker to complete their own closures.
    if (collective) progress_barrier();
  }
  if (memh_) {
    ucp_mem_unmap(context_, memh_);
    memh_ = nullptr;
    region_ = nullptr;
  }
  while (!client_workers_.empty()) remove_client_worker(client_workers_.begin()->first);
  if (epfd_ >= 0) ::close(epfd_), epfd_ = -1;
  if (worker_) {
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }
  if (context_) {
    ucp_cleanup(context_);
    context_ = nullptr;
  }
}

ucs_status_t UcxFabricImpl::wait(ucs_status_ptr_t sp) {
  if (sp == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(sp)) return UCS_PTR_STATUS(sp);
  ucs_status_t st;
  while ((st = ucp_request_check_status(sp)) == UCS_INPROGRESS) ucp_worker_progress(worker_);
  ucp_request_free(sp);
  return st;
}

void UcxFabricImpl::progress_wait(MPI_Request& req) {
  int flag = 0;
  while (!flag) {
    if (worker_) ucp_worker_progress(worker_);
    mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  }
}

void UcxFabricImpl::progress_barrier() {
  MPI_Request req;
  mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
  progress_wait(req);
}

bool UcxFabricImpl::all_agree(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Request req;
  mpi_check(MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
  progress_wait(req);
  return all == 1;
}

std::vector<std::vector<std::byte>> UcxFabricImpl::allgather(std::span<const std::byte> mine) {
  if (mine.size() > static_cast<size_t>(INT_MAX)) throw FabricError("ucx fabric: allgather of more than 2 GiB");
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  MPI_Request req;
  mpi_check(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, &req), "MPI_Iallgather");
  progress_wait(req);
  size_t total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    if (total > static_cast<size_t>(INT_MAX)) throw FabricError("ucx fabric: allgather of more than 2 GiB");
    displs[i] = static_cast<int>(total);
    total += static_cast<size_t>(lens[i]);
  }
  std::vector<std::byte> all(total);
  mpi_check(MPI_Iallgatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD, &req),
            "MPI_Iallgatherv");
  progress_wait(req);
  std::vector<std::vector<std::byte>> out(lens.size());
  for (size_t i = 0; i < lens.size(); ++i)
    out[i].assign(all.begin() + displs[i], all.begin() + displs[i] + lens[i]);
  return out;
}

std::vector<std::vector<std::byte>> UcxFabricImpl::gather(std::span<const std::byte> mine) {
  if (mine.size() > static_cast<size_t>(INT_MAX)) throw FabricError("ucx fabric: gather of more than 2 GiB");
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? static_cast<size_t>(size_) : 0), displs(lens.size());
  mpi_check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  size_t total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    if (total > static_cast<size_t>(INT_MAX)) throw FabricError("ucx fabric: gather of more than 2 GiB");
    displs[i] = static_cast<int>(total);
    total += static_cast<size_t>(lens[i]);
  }
  std::vector<std::byte> all(total);
  mpi_check(MPI_Gatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, 0, MPI_COMM_WORLD),
            "MPI_Gatherv");
  std::vector<std::vector<std::byte>> out(lens.size());
  for (size_t i = 0; i < lens.size(); ++i)
    out[i].assign(all.begin() + displs[i], all.begin() + displs[i] + lens[i]);
  return out;
}

void UcxFabricImpl::client_done() {
  if (!is_client()) return;
  const DoneHeader hdr{static_cast<uint32_t>(rank_), 0};
  std::vector<ucs_status_ptr_t> sends;
  ucs_status_t first_error = UCS_OK;
  for (uint32_t n = 0; n < k_; ++n) {
    ucp_request_param_t p{};
    ucs_status_ptr_t sp = ucp_am_send_nbx(eps_[n], kAmDone, &hdr, sizeof hdr, nullptr, 0, &p);
    if (UCS_PTR_IS_ERR(sp)) {
      if (first_error == UCS_OK) first_error = UCS_PTR_STATUS(sp);
    } else if (sp != nullptr) {
      sends.push_back(sp);
    }
  }
  for (ucs_status_ptr_t sp : sends) {
    ucs_status_t st = wait(sp);
    if (st != UCS_OK && first_error == UCS_OK) first_error = st;
  }
  if (first_error != UCS_OK) throw FabricError(ucx_error("client_done: sending the done message", first_error));
}

void UcxFabricImpl::serve() {
  if (!is_memory_node()) return;
  const uint64_t expected = client_count();
  const int fd = event_fd();
  while (done_received_ < expected) {
    if (!serve_step()) continue;  // not armed: progress again
    if (done_received_ >= expected) break;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, -1) < 0 && errno != EINTR)
      throw FabricError(std::string("ucx fabric: poll on the worker event fd: ") + std::strerror(errno));
  }
  done_received_ -= expected;  // messages of a later round may already be counted
}

// --- active message handlers ------------------------------------------------------------------

ucs_status_t UcxFabricImpl::on_done(void* arg, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  ++static_cast<UcxFabricImpl*>(arg)->done_received_;
  return UCS_OK;
}

ucs_status_t UcxFabricImpl::on_rpc(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                   const ucp_am_recv_param_t* param) {
  auto* f = static_cast<UcxFabricImpl*>(arg);
  if (header_length != sizeof(RpcHeader)) {
    std::fprintf(stderr, "ucx fabric: rank %d: dropping an RPC with a %zu-byte header\n", f->rank_, header_length);
    return UCS_OK;
  }
  RpcHeader h;
  std::memcpy(&h, header, sizeof h);
  ucp_ep_h reply_ep = nullptr;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) reply_ep = param->reply_ep;
  else if (h.src_rank < f->eps_.size()) reply_ep = f->eps_[h.src_rank];
  if (reply_ep == nullptr) {
    std::fprintf(stderr, "ucx fabric: rank %d: dropping an RPC from unknown rank %u\n", f->rank_, h.src_rank);
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    f->run_rpc(h, reply_ep, {static_cast<const std::byte*>(data), length});
    return UCS_OK;
  }
  // Rendezvous: fetch the payload first, run the handler when it is in.
  IncomingRpc* in = nullptr;
  try {
    in = new IncomingRpc{f, h, reply_ep, std::vector<std::byte>(length)};
  } catch (const std::bad_alloc&) {
    return UCS_ERR_NO_MEMORY;  // allowed for rendezvous: the sender's request fails with it
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &on_rpc_data;
  p.user_data = in;
  ucs_status_ptr_t sp = ucp_am_recv_data_nbx(f->am_worker(), data, in->payload.data(), length, &p);
  if (sp == nullptr) {
    f->run_rpc(in->hdr, in->reply_ep, in->payload);
    delete in;
    return UCS_OK;
  }
  if (UCS_PTR_IS_ERR(sp)) {
    auto* out = new OutgoingReply;
    out->hdr = {h.req_id, kRpcBadRequest, 0};
    const std::string msg = ucx_error("receiving the RPC payload", UCS_PTR_STATUS(sp));
    out->data.assign(reinterpret_cast<const std::byte*>(msg.data()), reinterpret_cast<const std::byte*>(msg.data() + msg.size()));
    f->send_reply(reply_ep, out);
    delete in;
    return UCS_OK;
  }
  return UCS_INPROGRESS;
}

// A coalesced message (kAmOpv): every request is checked first, as an rkey access would be
// (kind, [offset, offset + len) inside the region, CAS/FAA on an 8-byte-aligned word, the WRITE
// payloads exactly the bytes that follow the descriptors); any bad one refuses the whole message
// with kRpcBadRequest and nothing is performed (the client fails those requests, FabricError).
// Then the requests are performed in posting order, each completely before the next (so a fenced
// request follows every earlier one of its batch to this node, fabric.h), and the reply carries
// the READ bytes and the CAS/FAA old values in that order. READ/WRITE copy word-wise with relaxed
// atomic loads/stores (direct_access.h: aligned 8-byte words are never torn, as the schemes' check
// words assume); CAS/FAA are seq_cst __atomic read-modify-writes, atomic with respect to every other
// accessor of the word: UCX's own emulated AMOs (ucs_atomic_* on this CPU), CPU atomics of clients
// that map this region (direct access) and other messages (this worker runs them one at a time).
ucs_status_t UcxFabricImpl::on_opv(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                   const ucp_am_recv_param_t* param) {
  auto* f = static_cast<UcxFabricImpl*>(arg);
  if (header_length != sizeof(OpvHeader) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    std::fprintf(stderr, "ucx fabric: rank %d: dropping a malformed coalesced message\n", f->rank_);
    return UCS_OK;
  }
  OpvHeader h;
  std::memcpy(&h, header, sizeof h);
  auto* out = new OutgoingReply;
  out->hdr = {h.req_id, kRpcOk, 0};
  auto refuse = [&](const std::string& why) {
    out->hdr.status = kRpcBadRequest;
    const std::string msg = "ucx fabric: memory node " + std::to_string(f->rank_) + " refused a coalesced message: " + why;
    out->data.assign(reinterpret_cast<const std::byte*>(msg.data()), reinterpret_cast<const std::byte*>(msg.data() + msg.size()));
  };
  const uint64_t region = f->region_ != nullptr ? f->config_.region_bytes : 0;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    refuse("its requests did not arrive eagerly");
  } else if (!f->is_memory_node() || f->region_ == nullptr) {
    refuse("this process hosts no region");
  } else if (h.count == 0 || h.count > kMaxOpvOps || length < uint64_t{h.count} * sizeof(OpvOp) || length > kMaxOpvBytes) {
    refuse(std::to_string(h.count) + " requests in " + std::to_string(length) + " bytes (at most " +
           std::to_string(kMaxOpvOps) + " requests, " + std::to_string(kMaxOpvBytes) + " bytes)");
  } else {
    std::vector<OpvOp> ops(h.count);
    std::memcpy(ops.data(), data, uint64_t{h.count} * sizeof(OpvOp));
    const auto* payload = static_cast<const std::byte*>(data) + uint64_t{h.count} * sizeof(OpvOp);
    const uint64_t payload_len = length - uint64_t{h.count} * sizeof(OpvOp);
    uint64_t total = 0, written = 0;
    std::string bad;
    for (const OpvOp& r : ops) {
      const auto kind = static_cast<ReqKind>(r.kind);
      const bool atomic = kind == ReqKind::kCas || kind == ReqKind::kFaa;
      if (kind != ReqKind::kRead && kind != ReqKind::kWrite && !atomic) {
        bad = "request kind " + std::to_string(r.kind) + " cannot be coalesced";
        break;
      }
      const uint64_t len = atomic ? 8 : r.len;
      // The bound an rkey enforces: [offset, offset + len) inside the region.
      if (r.offset > region || len > region - r.offset) {
        bad = std::string(kind_name(kind)) + " [" + std::to_string(r.offset) + ", +" + std::to_string(len) +
              ") outside the region of " + std::to_string(region) + " bytes";
        break;
      }
      if (atomic && r.offset % 8 != 0) {
        bad = std::string(kind_name(kind)) + " at offset " + std::to_string(r.offset) + ", not 8-byte aligned";
        break;
      }
      if (kind == ReqKind::kWrite) written += len;
      if (kind != ReqKind::kWrite) total += len;
    }
    if (bad.empty() && written != payload_len)
      bad = std::to_string(payload_len) + " payload bytes for WRITEs of " + std::to_string(written) + " bytes";
    if (bad.empty() && total > kMaxOpvBytes)
      bad = std::to_string(total) + " reply bytes (at most " + std::to_string(kMaxOpvBytes) + ")";
    if (!bad.empty()) {
      refuse(bad);
    } else {
      out->data.resize(total);
      std::byte* dst = out->data.data();
      // In posting order: each request is performed before the next one starts (fences, fabric.h).
      for (size_t i = 0; i < ops.size(); ++i) {
        const OpvOp& r = ops[i];
        std::byte* target = f->region_ + r.offset;
        switch (static_cast<ReqKind>(r.kind)) {
          case ReqKind::kRead:
            detail::copy_in(dst, target, r.len);
            dst += r.len;
            break;
          case ReqKind::kWrite:
            detail::copy_out(target, payload, r.len);
            payload += r.len;
            break;
          case ReqKind::kCas: {
            uint64_t expected = r.operand;
            __atomic_compare_exchange_n(reinterpret_cast<uint64_t*>(target), &expected, r.swap, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST);
            std::memcpy(dst, &expected, 8);  // the old value whether or not the swap happened
            dst += 8;
            break;
          }
          case ReqKind::kFaa: {
            const uint64_t old = __atomic_fetch_add(reinterpret_cast<uint64_t*>(target), r.operand, __ATOMIC_SEQ_CST);
            std::memcpy(dst, &old, 8);
            dst += 8;
            break;
          }
          case ReqKind::kRpc:
            break;  // refused above
        }
      }
    }
  }
  f->send_reply(param->reply_ep, out);
  return UCS_OK;
}

void UcxFabricImpl::on_rpc_data(void* request, ucs_status_t status, size_t, void* user_data) {
  auto* in = static_cast<IncomingRpc*>(user_data);
  if (status == UCS_OK) {
    in->fabric->run_rpc(in->hdr, in->reply_ep, in->payload);
  } else {
    auto* out = new OutgoingReply;
    out->hdr = {in->hdr.req_id, kRpcBadRequest, 0};
    const std::string msg = ucx_error("receiving the RPC payload", status);
    out->data.assign(reinterpret_cast<const std::byte*>(msg.data()), reinterpret_cast<const std::byte*>(msg.data() + msg.size()));
    in->fabric->send_reply(in->reply_ep, out);
  }
  delete in;
  ucp_request_free(request);
}

void UcxFabricImpl::run_rpc(const RpcHeader& h, ucp_ep_h reply_ep, std::span<const std::byte> payload) {
  auto* out = new OutgoingReply;
  out->hdr = {h.req_id, kRpcOk, 0};
  auto fail = [&](uint32_t status, const std::string& msg) {
    out->hdr.status = status;
    out->data.assign(reinterpret_cast<const std::byte*>(msg.data()), reinterpret_cast<const std::byte*>(msg.data() + msg.size()));
  };
  auto it = handlers_.find(h.rpc_id);
  if (it == handlers_.end()) {
    fail(kRpcNoHandler, "ucx fabric: no rpc handler " + std::to_string(h.rpc_id) + " on node " + std::to_string(rank_));
  } else {
    try {
      it->second(h.src_rank, payload, out->data);
    } catch (const std::exception& e) {
      fail(kRpcHandlerFailed, "ucx fabric: rpc handler " + std::to_string(h.rpc_id) + " on node " + std::to_string(rank_) +
                                  " failed: " + e.what());
    } catch (...) {
      fail(kRpcHandlerFailed, "ucx fabric: rpc handler " + std::to_string(h.rpc_id) + " on node " + std::to_string(rank_) +
                                  " failed with a non-standard exception");
    }
  }
  send_reply(reply_ep, out);
}

void UcxFabricImpl::send_reply(ucp_ep_h reply_ep, OutgoingReply* out) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &on_reply_sent;
  p.user_data = out;
  ucs_status_ptr_t sp = ucp_am_send_nbx(reply_ep, kAmReply, &out->hdr, sizeof out->hdr, out->data.data(), out->data.size(), &p);
  if (sp == nullptr) {
    delete out;
  } else if (UCS_PTR_IS_ERR(sp)) {
    std::fprintf(stderr, "ucx fabric: rank %d: sending an RPC reply failed: %s\n", rank_, ucs_status_string(UCS_PTR_STATUS(sp)));
    delete out;
  }
}

void UcxFabricImpl::on_reply_sent(void* request, ucs_status_t status, void* user_data) {
  if (status != UCS_OK) std::fprintf(stderr, "ucx fabric: sending an RPC reply failed: %s\n", ucs_status_string(status));
  delete static_cast<OutgoingReply*>(user_data);
  ucp_request_free(request);
}

void on_opv_data(void* request, ucs_status_t status, size_t length, void* user_data) {
  Slot& s = *static_cast<Slot*>(user_data);
  if (status == UCS_OK) s.owner->opv_reply(s, s.scratch.data(), length);
  else s.owner->complete_unit(s, status);
  ucp_request_free(request);
}

void on_reply_data(void* request, ucs_status_t status, size_t, void* user_data) {
  Slot& s = *static_cast<Slot*>(user_data);
  s.owner->complete_unit(s, status);
  ucp_request_free(request);
}

ucs_status_t UcxFabricImpl::on_reply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                     const ucp_am_recv_param_t* param) {
  auto* f = static_cast<UcxFabricImpl*>(arg);
  if (header_length != sizeof(ReplyHeader)) return UCS_OK;
  ReplyHeader h;
  std::memcpy(&h, header, sizeof h);
  auto it = f->rpc_waiting_.find(h.req_id);
  if (it == f->rpc_waiting_.end()) return UCS_OK;  // nobody waits for it (cannot happen in normal operation)
  Slot& s = *it->second;
  f->rpc_waiting_.erase(it);
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (s.opv) {
    if (h.status != kRpcOk) {
      // Refused: the memory node performed none of the message's requests.
      s.refused = true;
      std::string msg = "ucx fabric: " + std::to_string(s.members.size()) + " coalesced requests failed on node " + std::to_string(s.node);
      if (!rndv) msg.assign(static_cast<const char*>(data), length);
      s.owner->fail_rpc(s, std::move(msg));
      return UCS_OK;
    }
    if (length != s.total) {
      s.owner->fail_rpc(s, "ucx fabric: node " + std::to_string(s.node) + " answered " + std::to_string(s.members.size()) +
                               " coalesced requests expecting " + std::to_string(s.total) + " bytes with " + std::to_string(length) + " bytes");
      return UCS_OK;
    }
    if (!rndv) {
      s.owner->opv_reply(s, static_cast<const std::byte*>(data), length);
      return UCS_OK;
    }
    s.scratch.resize(length);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &on_opv_data;
    p.user_data = &s;
    ucs_status_ptr_t sp = ucp_am_recv_data_nbx(f->worker_, data, s.scratch.data(), length, &p);
    if (sp == nullptr) {
      s.owner->opv_reply(s, s.scratch.data(), length);
    } else if (UCS_PTR_IS_ERR(sp)) {
      s.owner->complete_unit(s, UCS_PTR_STATUS(sp));
    } else {
      return UCS_INPROGRESS;
    }
    return UCS_OK;
  }
  if (h.status != kRpcOk) {
    std::string msg = "ucx fabric: rpc " + std::to_string(s.req->rpc_id) + " failed on node " + std::to_string(s.req->addr.node);
    if (!rndv) msg.assign(static_cast<const char*>(data), length);
    s.owner->fail_rpc(s, std::move(msg));
    return UCS_OK;
  }
  std::vector<std::byte>& reply = *s.req->reply;
  try {
    reply.resize(length);
  } catch (const std::bad_alloc&) {
    s.owner->fail_rpc(s, "ucx fabric: out of memory for an rpc reply of " + std::to_string(length) + " bytes");
    return UCS_OK;
  }
  if (!rndv) {
    if (length) std::memcpy(reply.data(), data, length);
    s.owner->complete_unit(s, UCS_OK);
    return UCS_OK;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &on_reply_data;
  p.user_data = &s;
  ucs_status_ptr_t sp = ucp_am_recv_data_nbx(f->worker_, data, reply.data(), length, &p);
  if (sp == nullptr) {
    s.owner->complete_unit(s, UCS_OK);
    return UCS_OK;
  }
  if (UCS_PTR_IS_ERR(sp)) {
    s.owner->complete_unit(s, UCS_PTR_STATUS(sp));
    return UCS_OK;
  }
  return UCS_INPROGRESS;
}

void on_rpc_sent(void* request, ucs_status_t status, void* user_data) {
  Slot& s = *static_cast<Slot*>(user_data);
  s.owner->complete_unit(s, status);
  ucp_request_free(request);
}

// ---------------------------------------------------------------------------------------------
// UcxTransport

void UcxTransport::validate(const Request& r) const {
  const uint32_t k = fabric_.memory_nodes();
  if (r.addr.node >= k)
    throw FabricError("ucx fabric: " + describe(r) + ": memory node " + std::to_string(r.addr.node) + " does not exist (" +
                      std::to_string(k) + " memory nodes)");
  const uint64_t region = fabric_.region_bytes(r.addr.node);
  uint64_t len = 0;
  switch (r.kind) {
    case ReqKind::kRead:
    case ReqKind::kWrite:
      len = r.len;
      if (len > 0 && r.buf == nullptr) throw FabricError("ucx fabric: " + describe(r) + " without a buffer");
      break;
    case ReqKind::kCas:
    case ReqKind::kFaa:
      len = 8;
      if (r.addr.offset % 8 != 0) throw FabricError("ucx fabric: " + describe(r) + ": atomic on an offset that is not 8-byte aligned");
      if (r.result == nullptr) throw FabricError("ucx fabric: " + describe(r) + " without a result buffer");
      break;
    case ReqKind::kRpc:
      if (r.reply == nullptr) throw FabricError("ucx fabric: " + describe(r) + " without a reply buffer");
      if (r.len > 0 && r.buf == nullptr) throw FabricError("ucx fabric: " + describe(r) + " without a payload buffer");
      return;
    default:
      throw FabricError("ucx fabric: unknown request kind " + std::to_string(static_cast<int>(r.kind)));
  }
  if (r.addr.offset > region || len > region - r.addr.offset)
    throw FabricError("ucx fabric: " + describe(r) + ": access [" + std::to_string(r.addr.offset) + ", +" + std::to_string(len) +
                      ") outside the region of " + std::to_string(region) + " bytes");
}

void UcxTransport::settle(Slot& s, ucs_status_ptr_t sp) {
  if (sp == nullptr) {
    complete_unit(s, UCS_OK);
  } else if (UCS_PTR_IS_ERR(sp)) {
    if (((s.req && s.req->kind == ReqKind::kRpc) || s.opv) && fabric_.rpc_waiting().erase(s.hdr.req_id) > 0)
      complete_unit(s, UCS_PTR_STATUS(sp));  // no reply will come
    complete_unit(s, UCS_PTR_STATUS(sp));
  }
  // Otherwise in flight: the callback completes it.
}

inline bool UcxTransport::goes_direct(const Request& r) const {
  return fabric_.direct(r.addr.node) != nullptr &&
         (r.kind == ReqKind::kRead || r.kind == ReqKind::kWrite || (r.kind != ReqKind::kRpc && fabric_.direct_atomics()));
}

void UcxTransport::post(Slot& s) {
  Request& r = *s.req;
  if (r.status == ReqStatus::kFailed) return;  // failed validation: never posted
  if (s.group >= 0) {  // a coalesced request: its message goes out with the first member
    if (s.leader) post_opv(groups_[static_cast<size_t>(s.group)]);
    return;
  }
  // A fenced request depends on what precedes it at its node (an unlock published after its
  // payload): behind a request to that node that failed validation it is not posted either (error
  // already set for that one); other nodes' failures do not concern it (fabric.h).
  // A failure UCX reports only at completion cannot hold it back; on RDMA the queue pair's error
  // state flushes what follows, and over shared memory a validated put does not fail.
  if (r.fence)
    for (const Slot* q = slots_.data(); q != &s; ++q)
      if (q->req->status == ReqStatus::kFailed && q->req->addr.node == r.addr.node) {
        r.status = ReqStatus::kFailed;
        return;
      }
  ++outstanding_;
  s.pending = 1;
  if ((r.kind == ReqKind::kRead || r.kind == ReqKind::kWrite) && r.len == 0) {
    complete_unit(s, UCS_OK);
    return;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &on_op_done;
  p.user_data = &s;
  const uint32_t node = r.addr.node;
  // Fence (fabric.h): earlier direct requests have been performed already (in posting order; the
  // thread fence publishes them before what follows). Earlier UCX requests to the node may still be
  // in flight: then the fenced request goes through UCX too, after ucp_worker_fence.
  if (r.fence) std::atomic_thread_fence(std::memory_order_seq_cst);
  if (goes_direct(r) && !(r.fence && posted_[node])) {
    detail::direct_execute(r, fabric_.direct(node) + r.addr.offset);  // validate() checked bounds and alignment
    complete_unit(s, UCS_OK);
    return;
  }
  if (r.fence && posted_[node]) {
    const ucs_status_t st = ucp_worker_fence(fabric_.worker());
    if (st != UCS_OK) {
      complete_unit(s, st);
      return;
    }
  }
  posted_[node] = 1;
  ucp_ep_h ep = fabric_.ep(node);
  const uint64_t raddr = fabric_.remote_base(node) + r.addr.offset;
  ucp_rkey_h rkey = fabric_.rkey(node);
  ucs_status_ptr_t sp = nullptr;
  switch (r.kind) {
    case ReqKind::kRead:
      sp = ucp_get_nbx(ep, r.buf, r.len, raddr, rkey, &p);
      break;
    case ReqKind::kWrite:
      wrote_[node] = 1;
      sp = ucp_put_nbx(ep, r.buf, r.len, raddr, rkey, &p);
      break;
    case ReqKind::kCas:
      // UCP CSWAP: buffer = compare value; reply_buffer = swap value in, old value out.
      *r.result = r.swap;
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
      p.datatype = ucp_dt_make_contig(8);
      p.reply_buffer = r.result;
      sp = ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_CSWAP, &r.compare, 1, raddr, rkey, &p);
      break;
    case ReqKind::kFaa:
      // Fetching add: UCP_ATOMIC_OP_ADD with a reply buffer.
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
      p.datatype = ucp_dt_make_contig(8);
      p.reply_buffer = r.result;
      sp = ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &r.compare, 1, raddr, rkey, &p);
      break;
    case ReqKind::kRpc:
      s.pending = 2;  // the send and the reply
      s.hdr = RpcHeader{fabric_.next_request_id(), static_cast<uint32_t>(fabric_.rank()), r.rpc_id, 0};
      fabric_.rpc_waiting()[s.hdr.req_id] = &s;  // before sending: a loopback reply may arrive inside the send
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_REPLY;
      p.cb.send = &on_rpc_sent;
      sp = ucp_am_send_nbx(ep, kAmRpc, &s.hdr, sizeof s.hdr, r.buf, r.len, &p);
      break;
  }
  settle(s, sp);
}

void UcxTransport::post_opv(Slot& g) {
  ++outstanding_;
  g.pending = 2;  // the send and the reply
  g.hdr.req_id = fabric_.next_request_id();
  g.ohdr = OpvHeader{g.hdr.req_id, static_cast<uint32_t>(g.members.size()), 0};
  g.body.insert(g.body.end(), g.payload.begin(), g.payload.end());
  g.payload.clear();
  posted_[g.node] = 1;
  // No flush for its WRITEs: the reply comes after the memory node performed them.
  fabric_.rpc_waiting()[g.hdr.req_id] = &g;  // before sending: the reply may arrive inside the send
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &on_rpc_sent;
  p.user_data = &g;
  // EAGER: the memory node performs the requests inside its AM callback (it refuses a rendezvous).
  p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  settle(g, ucp_am_send_nbx(fabric_.ep(g.node), kAmOpv, &g.ohdr, sizeof g.ohdr, g.body.data(), g.body.size(), &p));
}

void UcxTransport::opv_reply(Slot& g, const std::byte* data, size_t len) {
  if (len != g.total) {
    fail_rpc(g, "ucx fabric: coalesced requests: reply of " + std::to_string(len) + " bytes, expected " + std::to_string(g.total));
    return;
  }
  for (Request* r : g.members) {
    if (r->kind == ReqKind::kRead) {
      std::memcpy(r->buf, data, r->len);
      data += r->len;
    } else if (r->kind == ReqKind::kCas || r->kind == ReqKind::kFaa) {
      std::memcpy(r->result, data, 8);
      data += 8;
    }
  }
  complete_unit(g, UCS_OK);
}

void UcxTransport::add_member(Slot& g, Request& r) {
  OpvOp op{};
  op.offset = r.addr.offset;
  op.len = (r.kind == ReqKind::kCas || r.kind == ReqKind::kFaa) ? 8 : r.len;
  op.kind = static_cast<uint8_t>(r.kind);
  op.operand = r.compare;
  op.swap = r.swap;
  // Descriptors first, WRITE payloads after them: each kept apart while the message is built (an
  // insert before earlier payloads would make building quadratic) and joined by post_opv.
  g.body.insert(g.body.end(), reinterpret_cast<const std::byte*>(&op), reinterpret_cast<const std::byte*>(&op) + sizeof op);
  if (r.kind == ReqKind::kWrite && r.len > 0) {
    const auto* src = static_cast<const std::byte*>(r.buf);
    g.payload.insert(g.payload.end(), src, src + r.len);
  }
  g.total += opv_reply_bytes(r);
  g.members.push_back(&r);
}

// Coalescing (ReadCoalescing, ucx_fabric.h): the one-sided requests of this batch to node n — READ,
// WRITE, CAS, FAA, fenced or not — become one kAmOpv message when n is not mapped for direct access
// and the batch sends n at least 2 of them, within kMaxOpvOps / kMaxOpvBytes. Sound because the
// memory node performs them in posting order, each before the next: every order the per-operation
// path keeps (one endpoint, ucp_worker_fence before a fenced request) it keeps too, and more. An
// RPC to n is never part of the message: it goes as its own active message (its handler runs in
// that message's callback). Unfenced, it is unordered with the batch's other requests anyway; but
// the message goes out with its first member, possibly before the RPC, so a batch with an RPC and
// a fenced request to n keeps every request to n on the per-operation path, whose order is UCX's.
void UcxTransport::coalesce(std::span<Request> batch) {
  groups_.clear();
  if (fabric_.read_coalescing() != ReadCoalescing::kOn) return;
  const uint32_t k = fabric_.memory_nodes();
  std::vector<uint32_t> count(k, 0);
  std::vector<uint64_t> sent(k, 0), reply(k, 0);
  std::vector<char> mixed(k, 0);  // the node's requests keep their own UCX operations
  std::vector<char> rpc(k, 0), fenced(k, 0);  // the batch sends the node an RPC, a fenced request
  std::vector<char> failed_before(k, 0);  // per node: an earlier request of the batch failed validation
  for (Request& r : batch) {
    if (r.status == ReqStatus::kFailed) {  // failed validation: never posted (node may not exist)
      if (r.addr.node < k) failed_before[r.addr.node] = 1;
      continue;
    }
    // post()'s rule: a fenced request behind one to its node that failed validation is not posted either.
    if (r.fence && failed_before[r.addr.node]) continue;
    const uint32_t n = r.addr.node;
    if (r.fence) fenced[n] = 1;
    if (r.kind == ReqKind::kRpc) {
      rpc[n] = 1;
      continue;
    }
    // An atomic where a NIC may perform other clients' atomics on the same word (coalesce_atomics)
    // keeps the node on the per-operation path too: a CPU CAS is not atomic against a NIC's.
    if (!fabric_.coalesce_atomics() && (r.kind == ReqKind::kCas || r.kind == ReqKind::kFaa)) {
      mixed[n] = 1;
      continue;
    }
    if ((r.kind == ReqKind::kRead || r.kind == ReqKind::kWrite) && r.len == 0) continue;  // completes without a message
    ++count[n];
    sent[n] += opv_request_bytes(r);
    reply[n] += opv_reply_bytes(r);
  }
  std::vector<int32_t> group_of(k, -1);
  for (uint32_t n = 0; n < k; ++n) {
    if (rpc[n] && fenced[n]) mixed[n] = 1;
    if (mixed[n] || count[n] < 2 || count[n] > kMaxOpvOps || sent[n] > kMaxOpvBytes || reply[n] > kMaxOpvBytes) continue;
    if (fabric_.direct(n) != nullptr) continue;  // real loads, stores and atomics: nothing to save
    group_of[n] = static_cast<int32_t>(groups_.size());
    Slot g{};
    g.owner = this;
    g.node = n;
    g.opv = true;
    g.members.reserve(count[n]);
    g.body.reserve(sent[n]);
    groups_.push_back(std::move(g));
  }
  if (groups_.empty()) return;
  std::fill(failed_before.begin(), failed_before.end(), 0);
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = batch[i];
    if (r.status == ReqStatus::kFailed) {
      if (r.addr.node < k) failed_before[r.addr.node] = 1;
      continue;
    }
    if (r.fence && failed_before[r.addr.node]) continue;  // post() fails it
    if (r.kind == ReqKind::kRpc) continue;  // its own message (post())
    if ((r.kind == ReqKind::kRead || r.kind == ReqKind::kWrite) && r.len == 0) continue;
    const int32_t gi = group_of[r.addr.node];
    if (gi < 0) continue;
    Slot& g = groups_[static_cast<size_t>(gi)];
    slots_[i].group = gi;
    slots_[i].leader = g.members.empty();
    add_member(g, r);
  }
}

void UcxTransport::raw_opv(uint32_t node, std::span<Request> reqs) {
  if (node >= fabric_.memory_nodes()) throw FabricError("raw_opv: no memory node " + std::to_string(node));
  slots_.clear();
  groups_.assign(1, Slot{});
  posted_.assign(fabric_.memory_nodes(), 0);
  outstanding_ = 0;
  Slot& g = groups_[0];
  g.owner = this;
  g.node = node;
  g.opv = true;
  for (Request& r : reqs) add_member(g, r);
  post_opv(g);
  while (outstanding_ != 0) ucp_worker_progress(fabric_.worker());
  const Slot done = std::move(groups_[0]);
  groups_.clear();
  if (done.status != UCS_OK) throw FabricError(!done.error.empty() ? done.error : ucx_error("raw coalesced message", done.status));
}

void UcxTransport::post_flush(Slot& s) {
  ++outstanding_;
  s.pending = 1;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &on_op_done;
  p.user_data = &s;
  settle(s, ucp_ep_flush_nbx(fabric_.ep(s.node), &p));
}

void UcxTransport::execute(std::span<Request> batch) {
  if (fabric_.broken()) throw MemoryNodeLost("ucx fabric: a memory node was lost earlier; this fabric is unusable");
  // A bad request (address outside a region, missing buffer) fails alone and is never posted.
  std::string error;
  size_t valid = 0;
  for (Request& r : batch) {
    r.status = ReqStatus::kUnknown;
    try {
      validate(r);
      ++valid;
    } catch (const FabricError& e) {
      r.status = ReqStatus::kFailed;
      if (error.empty()) error = e.what();
    }
  }
  if (valid == 0 && !error.empty()) throw FabricError(error);  // nothing to post: not a batch
  ++counters_.batches;
  if (batch.empty()) return;
  // Over shared memory a dead memory node's READs, WRITEs and atomics still "succeed" on the
  // segment this process maps: look every 1024 batches (at most every 200 ms) too.
  if ((++batches_ & 1023) == 0 && fabric_.has_liveness()) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_batch_look_ >= std::chrono::milliseconds(200)) {
      last_batch_look_ = now;
      if (std::string dead = fabric_.dead_node(); !dead.empty()) {
        fabric_.set_broken();
        throw MemoryNodeLost("ucx fabric: " + dead);
      }
    }
  }
  // A batch whose every request goes direct (the same-host fast path's common case) is performed
  // right here, in batch order, exactly as post() would perform each one — without slots, UCX
  // calls or the completion loop. Anything else (a request to a peer UCX cannot map, an atomic
  // that must stay a UCX atomic, an RPC, a request that failed validation) takes the loop below.
  if (error.empty() && std::all_of(batch.begin(), batch.end(), [&](const Request& r) { return goes_direct(r); })) {
    for (const Request& r : batch)
      if (r.kind == ReqKind::kRead) detail::prefetch(fabric_.direct(r.addr.node) + r.addr.offset, r.len);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (Request& r : batch) {
      if (r.fence) std::atomic_thread_fence(std::memory_order_seq_cst);  // as in post()
      detail::direct_execute(r, fabric_.direct(r.addr.node) + r.addr.offset);  // validate() checked bounds
      r.status = ReqStatus::kOk;
      counters_.add(r);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return;
  }

  const uint32_t k = fabric_.memory_nodes();
  slots_.assign(batch.size(), Slot{});  // never resized while requests are in flight
  flush_slots_.assign(k, Slot{});
  wrote_.assign(k, 0);
  posted_.assign(k, 0);
  outstanding_ = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    slots_[i].owner = this;
    slots_[i].req = &batch[i];
    // Direct READs: start every cache miss of the batch before the first copy waits on one.
    if (batch[i].kind == ReqKind::kRead)
      if (std::byte* base = fabric_.direct(batch[i].addr.node)) detail::prefetch(base + batch[i].addr.offset, batch[i].len);
  }
  coalesce(batch);
  // Direct requests are ordered like a completed RDMA request: nothing of an earlier batch is
  // reordered after them, and what they wrote is visible when execute() returns (fence below).
  std::atomic_thread_fence(std::memory_order_seq_cst);

  size_t next = 0;
  bool flushed = false;
  ucp_worker_h worker = fabric_.worker();
  uint64_t spins = 0;
  std::chrono::steady_clock::time_point last_look{};  // set at the first look of a long wait
  UcxFabricImpl::IdleState idle;
  for (;;) {
    // A failed request does not stop the others: each request's outcome is its own (fabric.h).
    while (next < batch.size() && outstanding_ < kMaxInFlight) post(slots_[next++]);
    if (next == batch.size() && !flushed) {
      // PUT completion is local only: flush the written nodes so the writes are visible remotely.
      flushed = true;
      for (uint32_t n = 0; n < k; ++n) {
        if (!wrote_[n]) continue;
        flush_slots_[n].owner = this;
        flush_slots_[n].node = n;
        post_flush(flush_slots_[n]);
      }
    }
    if (outstanding_ == 0 && next == batch.size()) break;
    const bool slept = fabric_.client_idle(ucp_worker_progress(worker), idle);
    // A batch that waits long may wait on a dead memory node (service clients can ask): look
    // every 200 ms, reading the clock once per 4096 spins (or after a sleep) so that the fast
    // path does not pay.
    if (((++spins & 4095) == 0 || slept) && fabric_.has_liveness()) {
      const auto now = std::chrono::steady_clock::now();
      if (last_look == std::chrono::steady_clock::time_point{}) last_look = now;  // the wait is long: start the clock
      if (now - last_look >= std::chrono::milliseconds(200)) {
        last_look = now;
        if (std::string dead = fabric_.dead_node(); !dead.empty()) {
          for (Slot& sl : slots_)
            if (sl.req && sl.req->kind == ReqKind::kRpc) fabric_.rpc_waiting().erase(sl.hdr.req_id);
          for (Slot& g : groups_) fabric_.rpc_waiting().erase(g.hdr.req_id);
          fabric_.set_broken();
          throw MemoryNodeLost("ucx fabric: " + dead);
        }
      }
    }
  }

  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Per-request outcome (fabric.h): a request that completed is kOk even when another failed;
  // the requests not posted after a failure are kFailed (never applied); a WRITE to a node whose
  // flush failed is kUnknown (it may or may not be visible there).
  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = batch[i];
    // A coalesced request's outcome is its message's: all its requests completed, or none did.
    const Slot& s = slots_[i].group >= 0 ? groups_[static_cast<size_t>(slots_[i].group)] : slots_[i];
    if (r.status == ReqStatus::kFailed) continue;  // failed validation; error already set
    if (i >= next) {
      r.status = ReqStatus::kFailed;
      if (error.empty()) error = "ucx fabric: " + describe(r) + " not posted: an earlier request of its batch failed";
    } else if (s.status == UCS_OK) {
      r.status = ReqStatus::kOk;
      counters_.add(r);
      if (slots_[i].group >= 0) ++counters_.coalesced_requests;
    } else {
      // A refused message performed nothing (kFailed). Otherwise (the send failed, the reply was
      // lost or malformed) the memory node may have performed it: a READ's result is not valid
      // (kFailed, as for a failed ucp_get), a WRITE's or atomic's effect may have happened (kUnknown).
      r.status = (slots_[i].group >= 0 && !s.refused && r.kind != ReqKind::kRead) ? ReqStatus::kUnknown : ReqStatus::kFailed;
      if (error.empty()) error = !s.error.empty() ? s.error : ucx_error(describe(r) + " failed", s.status);
    }
  }
  for (const Slot& g : groups_)
    if (g.status == UCS_OK) ++counters_.coalesced_messages;
  for (const Slot& s : flush_slots_) {
    if (s.status == UCS_OK) continue;
    if (error.empty()) error = ucx_error("flushing writes to node " + std::to_string(s.node), s.status);
    for (Request& r : batch)
      if (r.kind == ReqKind::kWrite && r.addr.node == s.node && r.status == ReqStatus::kOk) r.status = ReqStatus::kUnknown;
  }
  if (!error.empty()) throw FabricError(error);
}

}  // namespace

const char* serve_mode_name(ServeMode mode) {
  switch (mode) {
    case ServeMode::kAuto: return "auto";
    case ServeMode::kEvent: return "event";
    case ServeMode::kHybrid: return "hybrid";
    case ServeMode::kPoll: return "poll";
  }
  return "?";
}

std::optional<ServeMode> parse_serve_mode(std::string_view name) {
  for (ServeMode m : {ServeMode::kAuto, ServeMode::kEvent, ServeMode::kHybrid, ServeMode::kPoll})
    if (name == serve_mode_name(m)) return m;
  return std::nullopt;
}

const char* client_wait_name(ClientWait wait) {
  switch (wait) {
    case ClientWait::kAuto: return "auto";
    case ClientWait::kPoll: return "poll";
    case ClientWait::kHybrid: return "hybrid";
    case ClientWait::kEvent: return "event";
  }
  return "?";
}

std::optional<ClientWait> parse_client_wait(std::string_view name) {
  for (ClientWait w : {ClientWait::kAuto, ClientWait::kPoll, ClientWait::kHybrid, ClientWait::kEvent})
    if (name == client_wait_name(w)) return w;
  return std::nullopt;
}

ClientWait resolve_client_wait(ClientWait wait, const std::vector<std::string>& transports) {
  if (wait != ClientWait::kAuto) return wait;
  // The same test as kAuto's serve mode: TCP only (besides "self").
  return resolve_serve_mode(ServeMode::kAuto, transports) == ServeMode::kHybrid ? ClientWait::kHybrid : ClientWait::kPoll;
}

const char* read_coalescing_name(ReadCoalescing mode) {
  switch (mode) {
    case ReadCoalescing::kAuto: return "auto";
    case ReadCoalescing::kOn: return "on";
    case ReadCoalescing::kOff: return "off";
  }
  return "?";
}

std::optional<ReadCoalescing> parse_read_coalescing(std::string_view name) {
  for (ReadCoalescing m : {ReadCoalescing::kAuto, ReadCoalescing::kOn, ReadCoalescing::kOff})
    if (name == read_coalescing_name(m)) return m;
  return std::nullopt;
}

bool cpu_atomics_only(const std::vector<std::string>& transports) {
  static const char* const kCpuAtomics[] = {"self", "tcp", "posix", "sysv", "xpmem", "cma", "knem"};
  for (const auto& tl : transports)
    if (std::find(std::begin(kCpuAtomics), std::end(kCpuAtomics), tl) == std::end(kCpuAtomics)) return false;
  return true;
}

ReadCoalescing resolve_read_coalescing(ReadCoalescing mode, const std::vector<std::string>& transports) {
  if (mode != ReadCoalescing::kAuto) return mode;
  // TCP only (besides "self"): the test of kAuto's serve mode.
  return resolve_serve_mode(ServeMode::kAuto, transports) == ServeMode::kHybrid ? ReadCoalescing::kOn : ReadCoalescing::kOff;
}

ServeMode resolve_serve_mode(ServeMode mode, const std::vector<std::string>& transports) {
  if (mode != ServeMode::kAuto) return mode;
  bool any = false;
  for (const auto& tl : transports) {
    if (tl == "self") continue;  // this process only
    if (tl != "tcp") return ServeMode::kEvent;  // shared memory or RDMA: one-sided without our CPU
    any = true;
  }
  return any ? ServeMode::kHybrid : ServeMode::kEvent;
}

UcxFabric::~UcxFabric() = default;

std::unique_ptr<UcxFabric> UcxFabric::create(const UcxFabricConfig& config) {
  auto f = std::make_unique<UcxFabricImpl>(config);
  f->init();
  return f;
}

namespace detail {
namespace {
class ServiceNode final : public UcxServiceNode {
 public:
  ServiceNode(const UcxFabricConfig& c, uint32_t node, uint32_t nodes)
      : f_(UcxFabricImpl::Mode::kServer, c, node, nodes) {
    f_.init_service();
  }
  Fabric& fabric() override { return f_; }
  std::vector<std::byte> region_export() override { return f_.region_export(); }
  int event_fd() override { return f_.event_fd(); }
  std::vector<std::byte> add_client(uint32_t id) override { return f_.add_client_worker(id); }
  void remove_client(uint32_t id) override { f_.remove_client_worker(id); }
  bool serve_step() override { return f_.serve_step(); }
  ServeMode serve_mode() const override { return f_.serve_mode(); }
  std::string transports() const override { return f_.transports(); }
  uint64_t spin_pauses() const override { return f_.spin_pauses(); }

 private:
  UcxFabricImpl f_;
};
}  // namespace

std::unique_ptr<UcxServiceNode> make_ucx_service_node(const UcxFabricConfig& config, uint32_t node, uint32_t nodes) {
  return std::make_unique<ServiceNode>(config, node, nodes);
}

void raw_opv(Transport& transport, uint32_t node, std::span<Request> requests) {
  auto* t = dynamic_cast<UcxTransport*>(&transport);
  if (t == nullptr) throw FabricError("raw_opv: not a UCX transport");
  t->raw_opv(node, requests);
}

std::unique_ptr<Fabric> make_ucx_service_client(const UcxFabricConfig& config, uint32_t client_id,
                                                const std::vector<UcxRemoteNode>& nodes,
                                                std::function<std::string()> liveness) {
  auto f = std::make_unique<UcxFabricImpl>(UcxFabricImpl::Mode::kClient, config, client_id,
                                           static_cast<uint32_t>(nodes.size()));
  f->set_liveness(std::move(liveness));
  f->init_service();
  f->connect_service_nodes(nodes);
  return f;
}
}  // namespace detail

}  // namespace rdmahash
