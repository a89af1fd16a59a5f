// Internal: the UCX fabric's shared declarations — wire formats of its active messages, the
// in-flight request slot, and the classes UcxFabricImpl (context, worker(s), endpoints, rkeys; one
// class for the three modes: an mpirun rank, a served memory node, a service client) and
// UcxTransport (a client's data path). The design, protocols and invariants are in the comment at
// the top of ucx_fabric.cpp; the code is split by job:
//   ucx_fabric.cpp     the context and endpoints, rkeys, MPI bootstrap and teardown, public names
//   ucx_node.cpp       the memory node: its workers (one per served client), the serve loop's
//                      progress and arming, the active-message handlers (RPC, coalesced requests)
//   ucx_transport.cpp  the client: posting, coalescing, completion, waiting, service connection
#pragma once

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

namespace rdmahash::ucx_impl {

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

inline std::string ucx_error(const std::string& what, ucs_status_t status) {
  return "ucx fabric: " + what + ": " + ucs_status_string(status);
}

inline void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw FabricError(std::string("ucx fabric: ") + what + " failed (MPI error " + std::to_string(rc) + ")");
}

inline const char* kind_name(ReqKind k) {
  switch (k) {
    case ReqKind::kRead: return "READ";
    case ReqKind::kWrite: return "WRITE";
    case ReqKind::kCas: return "CAS";
    case ReqKind::kFaa: return "FAA";
    case ReqKind::kRpc: return "RPC";
  }
  return "?";
}

inline std::string describe(const Request& r) {
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
  // A node mapped for direct access (ucp_rkey_ptr: shared memory, or this rank's own region).
  std::span<const std::byte> direct_region(uint32_t node) override;
  void begin_direct_reads() override;

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
  // Every batch: a fabric made unusable, and every 1024 batches a look for a dead memory node.
  void start_batch();
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
  detail::ClientSpin spin_;  // --client-wait hybrid: no spin while the CPUs are contended (client_idle)
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
    bool idle = false;  // the last progress found nothing (a stretch of idle progress calls is on)
  };
  bool client_idle(unsigned progressed, IdleState& st, detail::ClientSpin& spin, FabricCounters& counters);
  bool ep_failed() const { return ep_failed_; }
  void set_ep_failed() { ep_failed_ = true; }
  void set_liveness(std::function<std::string()> f) { liveness_ = std::move(f); }
  // Service client: a memory node runs on another host, so no shared-memory transport carries all
  // of this client's traffic, and the kAuto choices are made on the others (query_transports).
  void set_peers_elsewhere(bool elsewhere) { peers_elsewhere_ = elsewhere; }
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
  // Progresses this rank's worker while it waits (MPI_Ibarrier + progress), as docs/using.md says:
  // in the PGAS layout a peer may still need this rank's shard served (an RPC of cuckoo,
  // hopscotch, cluster, ...; any one-sided request over TCP) before it reaches the barrier.
  void barrier() override { progress_barrier(); }
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
  bool peers_elsewhere_ = false;       // a peer runs on another host (MPI: !one_host_; set_peers_elsewhere)
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

// Request completion callbacks (progress context; must not throw). ucx_transport.cpp.
void on_op_done(void* request, ucs_status_t status, void* user_data);
// Completion of the send half of an RPC. A failed send gets no reply: stop waiting for it.
void on_rpc_sent(void* request, ucs_status_t status, void* user_data);
void on_opv_data(void* request, ucs_status_t status, size_t length, void* user_data);
void on_reply_data(void* request, ucs_status_t status, size_t, void* user_data);
// A service client's endpoint to a memory node failed: see ucx_transport.cpp.
void on_service_ep_error(void* arg, ucp_ep_h, ucs_status_t status);

}  // namespace rdmahash::ucx_impl
