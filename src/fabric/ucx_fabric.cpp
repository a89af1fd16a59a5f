// UcxFabric: the UCP data path, bootstrapped with MPI.
//
// Why these choices (measured on this project's machines, see ../shared/design.md §2):
//  * Exposed memory comes from ucp_mem_map(UCP_MEM_MAP_ALLOCATE): over shared memory UCX then maps
//    the region into the clients, so READ/WRITE/CAS/FAA complete without the target's CPU. With
//    user (malloc'd) memory, or over TCP, operations need the target to progress its worker.
//  * Memory nodes never busy-poll. serve() arms the worker and sleeps in epoll on its event fd,
//    progressing only when woken (that is what TCP needs; shared memory does not care).
//  * MPI only bootstraps: worker addresses, rkeys and region base addresses are all-gathered once;
//    barriers and the result gather use MPI too. Nothing on the data path touches MPI.
//
// Active messages (UCP AM), header = AmHeader:
//   kAmRpc    client → memory node: {req_id, src rank, rpc id} + payload. The handler runs in the
//             progress loop of the memory node (never inside the UCX callback, which may not send)
//             and its reply goes back as kAmReply {req_id} + reply bytes.
//   kAmReply  memory node → client: completes the request whose id it carries.
//   kAmDone   client → every memory node: this client finished its run (see serve()).
// Payloads above the eager limit arrive as rendezvous and are fetched with ucp_am_recv_data_nbx.
//
// Completion: a batch is complete when every posted operation's callback ran (or it completed
// immediately) and every RPC reply arrived. A WRITE's local completion only means its buffer may
// be reused, so a batch that contains WRITEs ends with ucp_worker_flush_nbx: when execute()
// returns, every write of the batch is visible at the target (the schemes' publication protocols
// rely on that ordering).
#include "rdmahash/ucx_fabric.h"

#include <mpi.h>
#include <sys/epoll.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>

namespace rdmahash {
namespace {

constexpr uint16_t kAmRpc = 1;
constexpr uint16_t kAmReply = 2;
constexpr uint16_t kAmDone = 3;

struct AmHeader {
  uint64_t req_id;
  uint32_t src;
  uint16_t rpc_id;
  uint16_t reserved;
};

void check(ucs_status_t s, const char* what) {
  if (s != UCS_OK) throw FabricError(std::string("ucx: ") + what + ": " + ucs_status_string(s));
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw FabricError(std::string("mpi: ") + what + " failed");
}

// Per-batch completion state shared by the callbacks of its operations.
struct BatchState {
  int outstanding = 0;
  ucs_status_t status = UCS_OK;
};

void send_done_cb(void* request, ucs_status_t status, void* user) {
  auto* b = static_cast<BatchState*>(user);
  if (status != UCS_OK && b->status == UCS_OK) b->status = status;
  --b->outstanding;
  ucp_request_free(request);
}

struct Incoming {
  uint16_t am_id;
  AmHeader hdr;
  std::vector<std::byte> data;
};

class UcxFabricImpl;

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(UcxFabricImpl& f) : f_(f) {}
  void execute(std::span<Request> batch) override;

 private:
  UcxFabricImpl& f_;
};

class UcxFabricImpl final : public UcxFabric {
 public:
  explicit UcxFabricImpl(const UcxFabricConfig& cfg);
  ~UcxFabricImpl() override;

  std::string_view name() const override { return "ucx"; }
  uint32_t memory_nodes() const override { return nodes_; }
  uint64_t region_bytes(uint32_t node) const override { return node < nodes_ ? region_bytes_ : 0; }
  std::span<std::byte> local_region(uint32_t node) override {
    if (!is_memory_node() || node != static_cast<uint32_t>(rank_)) return {};
    return {static_cast<std::byte*>(base_), region_bytes_};
  }
  std::unique_ptr<Transport> connect() override { return std::make_unique<UcxTransport>(*this); }
  void register_rpc(uint16_t id, RpcHandler handler) override { handlers_[id] = std::move(handler); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool is_memory_node() const override { return static_cast<uint32_t>(rank_) < nodes_; }
  bool is_client() const override { return symmetric_ || static_cast<uint32_t>(rank_) >= nodes_; }
  uint32_t client_count() const override { return symmetric_ ? size_ : size_ - nodes_; }
  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  void client_done() override;
  void serve() override;
  std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) override;

  // Used by UcxTransport.
  void execute(std::span<Request> batch, FabricCounters& counters);

 private:
  static ucs_status_t am_cb(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param);
  static void am_rndv_cb(void* request, ucs_status_t status, size_t length, void* user);
  void set_am_handler(uint16_t id);
  void progress();  // one worker progress sweep + deferred RPC handling
  void handle(Incoming& msg);
  void wait(BatchState& b);
  void wireup();
  const ucp_ep_h& ep(uint32_t rank) const { return eps_[rank]; }

  int rank_ = 0, size_ = 1;
  uint32_t nodes_ = 0;
  bool symmetric_ = false;
  uint64_t region_bytes_ = 0;
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  void* base_ = nullptr;
  int efd_ = -1, epoll_fd_ = -1;
  std::vector<ucp_ep_h> eps_;
  std::vector<ucp_rkey_h> rkeys_;       // per memory node
  std::vector<uint64_t> remote_base_;   // per memory node
  std::unordered_map<uint16_t, RpcHandler> handlers_;
  std::deque<Incoming> inbox_;          // RPC requests waiting for the progress loop
  struct RpcWait {
    std::vector<std::byte>* reply;
    int* outstanding;
    bool* failed;
  };
  std::unordered_map<uint64_t, RpcWait> rpc_waits_;
  uint64_t next_req_id_ = 1;
  uint64_t done_received_ = 0;  // kAmDone messages received so far
  uint64_t done_served_ = 0;    // of which earlier serve() calls consumed
  struct ReplySend {
    std::vector<std::byte> bytes;
    AmHeader hdr;
    BatchState state;
  };
  std::list<ReplySend> reply_sends_;  // replies in flight (buffers must outlive the send)
};

// ---------------------------------------------------------------------------------------------

UcxFabricImpl::UcxFabricImpl(const UcxFabricConfig& cfg) {
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  symmetric_ = cfg.symmetric;
  nodes_ = symmetric_ ? static_cast<uint32_t>(size_) : cfg.memory_nodes;
  if (nodes_ == 0) throw FabricError("ucx fabric: at least one memory node is required");
  if (nodes_ > static_cast<uint32_t>(size_))
    throw FabricError("ucx fabric: " + std::to_string(nodes_) + " memory nodes need at least as many ranks (have " +
                      std::to_string(size_) + ")");
  if (cfg.region_bytes == 0) throw FabricError("ucx fabric: region size must be positive");
  region_bytes_ = cfg.region_bytes;

  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  const ucs_status_t st = ucp_init(&params, config, &ctx_);
  ucp_config_release(config);
  check(st, "ucp_init");

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  check(ucp_worker_create(ctx_, &wp, &worker_), "ucp_worker_create");
  check(ucp_worker_get_efd(worker_, &efd_), "ucp_worker_get_efd");
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw FabricError("ucx fabric: epoll_create1 failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = efd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, efd_, &ev) != 0) throw FabricError("ucx fabric: epoll_ctl failed");
  for (uint16_t id : {kAmRpc, kAmReply, kAmDone}) set_am_handler(id);

  // Worker addresses → endpoints to every rank (including this one: the "self" transport).
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  check(ucp_worker_get_address(worker_, &addr, &addr_len), "ucp_worker_get_address");
  int my_len = static_cast<int>(addr_len);
  std::vector<int> lens(size_), displs(size_);
  check_mpi(MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  int total = 0;
  for (int i = 0; i < size_; ++i) { displs[i] = total; total += lens[i]; }
  std::vector<char> addrs(total);
  check_mpi(MPI_Allgatherv(addr, my_len, MPI_BYTE, addrs.data(), lens.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD),
            "MPI_Allgatherv");
  ucp_worker_release_address(worker_, addr);
  eps_.resize(size_);
  for (int i = 0; i < size_; ++i) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(addrs.data() + displs[i]);
    check(ucp_ep_create(worker_, &ep, &eps_[i]), "ucp_ep_create");
  }

  // Regions: allocated by UCX on memory nodes, rkeys and base addresses all-gathered.
  std::vector<char> my_rkey;
  uint64_t my_base = 0;
  if (is_memory_node()) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = region_bytes_;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    check(ucp_mem_map(ctx_, &mp, &memh_), "ucp_mem_map");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    check(ucp_mem_query(memh_, &attr), "ucp_mem_query");
    if (attr.length < region_bytes_) throw FabricError("ucx fabric: ucp_mem_map returned a short region");
    base_ = attr.address;
    std::memset(base_, 0, region_bytes_);
    my_base = reinterpret_cast<uint64_t>(base_);
    void* rkey_buf = nullptr;
    size_t rkey_size = 0;
    check(ucp_rkey_pack(ctx_, memh_, &rkey_buf, &rkey_size), "ucp_rkey_pack");
    my_rkey.assign(static_cast<char*>(rkey_buf), static_cast<char*>(rkey_buf) + rkey_size);
    ucp_rkey_buffer_release(rkey_buf);
  }
  int rk_len = static_cast<int>(my_rkey.size());
  check_mpi(MPI_Allgather(&rk_len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  total = 0;
  for (int i = 0; i < size_; ++i) { displs[i] = total; total += lens[i]; }
  std::vector<char> rkeys(std::max(total, 1));
  check_mpi(MPI_Allgatherv(my_rkey.data(), rk_len, MPI_BYTE, rkeys.data(), lens.data(), displs.data(), MPI_BYTE,
                           MPI_COMM_WORLD),
            "MPI_Allgatherv");
  std::vector<uint64_t> bases(size_);
  check_mpi(MPI_Allgather(&my_base, 1, MPI_UINT64_T, bases.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  rkeys_.resize(nodes_);
  remote_base_.resize(nodes_);
  for (uint32_t n = 0; n < nodes_; ++n) {
    check(ucp_ep_rkey_unpack(eps_[n], rkeys.data() + displs[n], &rkeys_[n]), "ucp_ep_rkey_unpack");
    remote_base_[n] = bases[n];
  }
  wireup();
}

// Completes endpoint wire-up everywhere while every rank is progressing, so that the first
// operation of a run does not wait for a peer that is busy elsewhere (TCP connection setup needs
// both sides to progress).
void UcxFabricImpl::wireup() {
  BatchState b;
  for (int i = 0; i < size_; ++i) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_done_cb;
    p.user_data = &b;
    ucs_status_ptr_t r = ucp_ep_flush_nbx(eps_[i], &p);
    if (UCS_PTR_IS_ERR(r)) check(UCS_PTR_STATUS(r), "ucp_ep_flush_nbx");
    if (r != nullptr) ++b.outstanding;
  }
  // Keep progressing until every rank is wired: a non-blocking barrier with progress in between.
  wait(b);
  MPI_Request req;
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
  for (int flag = 0; !flag;) {
    progress();
    check_mpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  }
}

UcxFabricImpl::~UcxFabricImpl() {
  // Let in-flight replies finish before tearing down.
  while (!reply_sends_.empty()) progress();
  for (ucp_rkey_h k : rkeys_)
    if (k) ucp_rkey_destroy(k);
  for (ucp_ep_h e : eps_) {
    if (!e) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;  // no remote progress needed: every rank is tearing down
    ucs_status_ptr_t r = ucp_ep_close_nbx(e, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(r);
    }
  }
  if (memh_) ucp_mem_unmap(ctx_, memh_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (worker_) ucp_worker_destroy(worker_);
  if (ctx_) ucp_cleanup(ctx_);
}

void UcxFabricImpl::set_am_handler(uint16_t id) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = id;
  p.cb = &UcxFabricImpl::am_cb;
  p.arg = this;
  check(ucp_worker_set_am_recv_handler(worker_, &p), "ucp_worker_set_am_recv_handler");
}

struct RndvRecv {
  UcxFabricImpl* self;
  std::deque<Incoming>* inbox;
  Incoming msg;
};

ucs_status_t UcxFabricImpl::am_cb(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                  const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxFabricImpl*>(arg);
  AmHeader hdr{};
  if (header_length >= sizeof hdr) std::memcpy(&hdr, header, sizeof hdr);
  // Which handler id this is: stored in the header's reserved field by the sender.
  Incoming msg{hdr.reserved, hdr, {}};
  if (msg.am_id == kAmDone) {
    ++self->done_received_;
    return UCS_OK;
  }
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // Large message: fetch it; the callback queues it like an eager one.
    auto* r = new RndvRecv{self, &self->inbox_, std::move(msg)};
    r->msg.data.resize(length);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &UcxFabricImpl::am_rndv_cb;
    p.user_data = r;
    ucs_status_ptr_t s = ucp_am_recv_data_nbx(self->worker_, data, r->msg.data.data(), length, &p);
    if (s == nullptr) {
      self->inbox_.push_back(std::move(r->msg));
      delete r;
    } else if (UCS_PTR_IS_ERR(s)) {
      delete r;
    }
    return UCS_OK;
  }
  msg.data.assign(static_cast<const std::byte*>(data), static_cast<const std::byte*>(data) + length);
  self->inbox_.push_back(std::move(msg));
  return UCS_OK;
}

void UcxFabricImpl::am_rndv_cb(void* request, ucs_status_t status, size_t, void* user) {
  auto* r = static_cast<RndvRecv*>(user);
  if (status == UCS_OK) r->inbox->push_back(std::move(r->msg));
  delete r;
  ucp_request_free(request);
}

void UcxFabricImpl::progress() {
  while (ucp_worker_progress(worker_) != 0) {
  }
  while (!inbox_.empty()) {
    Incoming msg = std::move(inbox_.front());
    inbox_.pop_front();
    handle(msg);
  }
  for (auto it = reply_sends_.begin(); it != reply_sends_.end();)
    it = it->state.outstanding == 0 ? reply_sends_.erase(it) : std::next(it);
}

void UcxFabricImpl::handle(Incoming& msg) {
  if (msg.am_id == kAmReply) {
    auto it = rpc_waits_.find(msg.hdr.req_id);
    if (it == rpc_waits_.end()) return;  // a reply nobody waits for (cannot happen; ignore)
    *it->second.reply = std::move(msg.data);
    if (msg.hdr.rpc_id != 0) *it->second.failed = true;  // no such handler, or it threw
    --*it->second.outstanding;
    rpc_waits_.erase(it);
    return;
  }
  // kAmRpc: run the handler, send the reply (an error reply is an empty one flagged in rpc_id).
  ReplySend& rs = reply_sends_.emplace_back();
  rs.hdr = AmHeader{msg.hdr.req_id, static_cast<uint32_t>(rank_), 0, kAmReply};
  auto h = handlers_.find(msg.hdr.rpc_id);
  if (h == handlers_.end()) {
    rs.hdr.rpc_id = 1;  // "no such handler"
  } else {
    try {
      h->second(msg.hdr.src, msg.data, rs.bytes);
    } catch (const std::exception&) {
      rs.hdr.rpc_id = 2;  // the handler threw
      rs.bytes.clear();
    }
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_done_cb;
  p.user_data = &rs.state;
  ucs_status_ptr_t r = ucp_am_send_nbx(eps_[msg.hdr.src], kAmReply, &rs.hdr, sizeof rs.hdr, rs.bytes.data(),
                                       rs.bytes.size(), &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) ++rs.state.outstanding;
}

void UcxFabricImpl::wait(BatchState& b) {
  while (b.outstanding > 0) progress();
}

void UcxTransport::execute(std::span<Request> batch) {
  f_.execute(batch, counters_);
}

void UcxFabricImpl::execute(std::span<Request> batch, FabricCounters& counters) {
  // Validate first: a bad request fails the batch before anything is posted.
  for (const Request& r : batch) {
    if (r.kind == ReqKind::kRpc) {
      if (r.addr.node >= nodes_) throw FabricError("ucx fabric: rpc to memory node " + std::to_string(r.addr.node) + " which does not exist");
      if (!r.reply) throw FabricError("ucx fabric: rpc without a reply buffer");
      continue;
    }
    const uint64_t len = (r.kind == ReqKind::kCas || r.kind == ReqKind::kFaa) ? 8 : r.len;
    if (r.addr.node >= nodes_) throw FabricError("ucx fabric: memory node " + std::to_string(r.addr.node) + " does not exist");
    if (r.addr.offset > region_bytes_ || len > region_bytes_ - r.addr.offset)
      throw FabricError("ucx fabric: access [" + std::to_string(r.addr.offset) + ", +" + std::to_string(len) +
                        ") outside region of " + std::to_string(region_bytes_) + " bytes on node " +
                        std::to_string(r.addr.node));
    if ((r.kind == ReqKind::kCas || r.kind == ReqKind::kFaa) && (r.addr.offset % 8 != 0 || !r.result))
      throw FabricError("ucx fabric: atomics need an 8-byte aligned offset and a result buffer");
  }
  ++counters.batches;
  BatchState b;
  int replies = 0;
  bool rpc_failed = false;
  bool wrote = false;
  std::vector<AmHeader> headers;
  headers.reserve(batch.size());
  for (Request& r : batch) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_done_cb;
    p.user_data = &b;
    ucs_status_ptr_t s = nullptr;
    const uint32_t node = r.addr.node;
    const uint64_t raddr = remote_base_[node] + r.addr.offset;
    switch (r.kind) {
      case ReqKind::kRead:
        s = ucp_get_nbx(eps_[node], r.buf, r.len, raddr, rkeys_[node], &p);
        break;
      case ReqKind::kWrite:
        s = ucp_put_nbx(eps_[node], r.buf, r.len, raddr, rkeys_[node], &p);
        wrote = true;
        break;
      case ReqKind::kCas:
      case ReqKind::kFaa: {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        p.datatype = ucp_dt_make_contig(8);
        p.reply_buffer = r.result;
        if (r.kind == ReqKind::kCas) {
          *r.result = r.swap;  // CSWAP: buffer = compare, reply_buffer = swap in / old value out
          s = ucp_atomic_op_nbx(eps_[node], UCP_ATOMIC_OP_CSWAP, &r.compare, 1, raddr, rkeys_[node], &p);
        } else {
          s = ucp_atomic_op_nbx(eps_[node], UCP_ATOMIC_OP_ADD, &r.compare, 1, raddr, rkeys_[node], &p);
        }
        break;
      }
      case ReqKind::kRpc: {
        const uint64_t id = next_req_id_++;
        headers.push_back(AmHeader{id, static_cast<uint32_t>(rank_), r.rpc_id, kAmRpc});
        rpc_waits_[id] = RpcWait{r.reply, &replies, &rpc_failed};
        ++replies;
        s = ucp_am_send_nbx(eps_[node], kAmRpc, &headers.back(), sizeof(AmHeader), r.buf, r.len, &p);
        break;
      }
    }
    if (UCS_PTR_IS_ERR(s)) {
      if (b.status == UCS_OK) b.status = UCS_PTR_STATUS(s);
    } else if (s != nullptr) {
      ++b.outstanding;
    }
    counters.add(r);
  }
  while (b.outstanding > 0 || replies > 0) progress();
  if (wrote && b.status == UCS_OK) {
    BatchState f;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_done_cb;
    p.user_data = &f;
    ucs_status_ptr_t s = ucp_worker_flush_nbx(worker_, &p);
    if (UCS_PTR_IS_ERR(s)) check(UCS_PTR_STATUS(s), "ucp_worker_flush_nbx");
    if (s != nullptr) ++f.outstanding;
    wait(f);
    if (f.status != UCS_OK) b.status = f.status;
  }
  check(b.status, "batch");
  if (rpc_failed) throw FabricError("ucx fabric: an rpc handler was missing on the memory node or failed");
}

void UcxFabricImpl::client_done() {
  BatchState b;
  AmHeader hdr{0, static_cast<uint32_t>(rank_), 0, kAmDone};
  for (uint32_t n = 0; n < nodes_; ++n) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_done_cb;
    p.user_data = &b;
    ucs_status_ptr_t s = ucp_am_send_nbx(eps_[n], kAmDone, &hdr, sizeof hdr, nullptr, 0, &p);
    if (UCS_PTR_IS_ERR(s)) check(UCS_PTR_STATUS(s), "ucp_am_send_nbx(done)");
    if (s != nullptr) ++b.outstanding;
  }
  wait(b);
}

void UcxFabricImpl::serve() {
  if (!is_memory_node()) return;
  const uint64_t target = done_served_ + client_count();
  while (done_received_ < target) {
    progress();
    if (done_received_ >= target) break;
    const ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress again
    check(s, "ucp_worker_arm");
    epoll_event ev;
    // Sleep until the worker has something; the timeout is only a safety net, not a poll loop.
    (void)epoll_wait(epoll_fd_, &ev, 1, 1000);
  }
  done_served_ = target;
}

std::vector<std::vector<std::byte>> UcxFabricImpl::gather(std::span<const std::byte> mine) {
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0), displs(rank_ == 0 ? size_ : 0);
  check_mpi(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  int total = 0;
  for (size_t i = 0; i < lens.size(); ++i) { displs[i] = total; total += lens[i]; }
  std::vector<std::byte> all(std::max(total, 1));
  check_mpi(MPI_Gatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, 0,
                        MPI_COMM_WORLD),
            "MPI_Gatherv");
  std::vector<std::vector<std::byte>> out;
  for (size_t i = 0; i < lens.size(); ++i)
    out.emplace_back(all.begin() + displs[i], all.begin() + displs[i] + lens[i]);
  return out;
}

}  // namespace

UcxFabric::~UcxFabric() = default;

std::unique_ptr<UcxFabric> UcxFabric::create(const UcxFabricConfig& config) {
  return std::make_unique<UcxFabricImpl>(config);
}

}  // namespace rdmahash
