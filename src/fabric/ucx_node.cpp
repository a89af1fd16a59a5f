// The UCX fabric's memory node (design: ucx_fabric.cpp): the workers of a served memory node (one
// per client), progressing and arming them for the serve loops, and the active-message handlers
// that answer RPCs and coalesced requests.
#include "fabric/ucx_impl.h"
#include "fabric/rpc_limit.h"

namespace rdmahash::ucx_impl {

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
  if (length > kMaxRpcBytes) {  // before any allocation: the size is the sender's word
    auto* out = new OutgoingReply;
    out->hdr = {h.req_id, kRpcBadRequest, 0};
    const std::string msg = detail::rpc_too_large(length);
    out->data.assign(reinterpret_cast<const std::byte*>(msg.data()), reinterpret_cast<const std::byte*>(msg.data() + msg.size()));
    f->send_reply(reply_ep, out);
    return UCS_OK;  // a rendezvous payload not fetched is dropped
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

}  // namespace rdmahash::ucx_impl

namespace rdmahash::detail {
using ucx_impl::UcxFabricImpl;
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
}  // namespace rdmahash::detail
