// The UCX fabric's client side (design: ucx_fabric.cpp): connecting a service client, waiting
// between progress calls, the reply handlers, and UcxTransport — posting a batch (direct access,
// UCX requests, coalesced kAmOpv messages), fences, flushes and completion.
#include <fcntl.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <charconv>
#include "fabric/ucx_impl.h"

namespace rdmahash::ucx_impl {

// ---------------------------------------------------------------------------------------------
// Request completion callbacks (progress context; must not throw).

void on_op_done(void* request, ucs_status_t status, void* user_data) {
  Slot& s = *static_cast<Slot*>(user_data);
  s.owner->complete_unit(s, status);
  ucp_request_free(request);
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
bool UcxFabricImpl::client_idle(unsigned progressed, IdleState& st, detail::ClientSpin& spin, FabricCounters& counters) {
  if (client_wait_ == ClientWait::kPoll) return false;
  if (progressed != 0) {
    st.idle = false;
    return false;
  }
  using clock = std::chrono::steady_clock;
  if (client_wait_ == ClientWait::kHybrid) {
    const bool begins = !st.idle;
    st.idle = true;
    // No sched_yield() here (unlike the memory node's spin): clients that yield to each other
    // ping-pong the CPU away from the process they wait for; a spin of client_spin is bounded.
    if (spin.keep_spinning(begins, clock::now(), config_.client_spin)) return false;
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
  ++counters.client_sleeps;
  if (client_wait_ == ClientWait::kHybrid && !spin.stretch_spins()) ++counters.client_unspun_sleeps;
  st.idle = false;
  return true;
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

void UcxTransport::start_batch() {
  if (fabric_.broken()) throw MemoryNodeLost("ucx fabric: a memory node was lost earlier; this fabric is unusable");
  ++counters_.batches;
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
}

std::span<const std::byte> UcxTransport::direct_region(uint32_t node) {
  const std::byte* base = fabric_.direct(node);
  return base ? std::span<const std::byte>(base, fabric_.region_bytes(node)) : std::span<const std::byte>();
}

void UcxTransport::begin_direct_reads() {
  start_batch();
  std::atomic_thread_fence(std::memory_order_seq_cst);  // as a batch of direct requests starts
}

void UcxTransport::execute(std::span<Request> batch) {
  if (fabric_.broken()) throw MemoryNodeLost("ucx fabric: a memory node was lost earlier; this fabric is unusable");
  // A bad request (address outside a region, missing buffer) fails alone and is never posted.
  std::string error;
  size_t valid = 0;
  bool all_direct = true;  // every request goes direct (the same-host fast path below)
  const uint32_t nodes = fabric_.memory_nodes();
  const uint64_t region = nodes ? fabric_.region_bytes(0) : 0;  // every node's region has the config's size
  for (Request& r : batch) {
    r.status = ReqStatus::kUnknown;
    // A lookup's READ inside its region (the common request) is checked here, inline: exactly
    // what validate() checks of a READ. Anything else, or anything wrong, goes to validate().
    if (r.kind == ReqKind::kRead && r.addr.node < nodes && (r.len == 0 || r.buf != nullptr) && r.addr.offset <= region &&
        r.len <= region - r.addr.offset) {
      ++valid;
      all_direct = all_direct && fabric_.direct(r.addr.node) != nullptr;
      continue;
    }
    try {
      validate(r);
      ++valid;
      all_direct = all_direct && goes_direct(r);
    } catch (const FabricError& e) {
      r.status = ReqStatus::kFailed;
      if (error.empty()) error = e.what();
    }
  }
  if (valid == 0 && !error.empty()) throw FabricError(error);  // nothing to post: not a batch
  if (batch.empty()) {
    ++counters_.batches;
    return;
  }
  start_batch();
  // A batch whose every request goes direct (the same-host fast path's common case) is performed
  // right here, in batch order, exactly as post() would perform each one — without slots, UCX
  // calls or the completion loop. Anything else (a request to a peer UCX cannot map, an atomic
  // that must stay a UCX atomic, an RPC, a request that failed validation) takes the loop below.
  if (error.empty() && all_direct) {
    for (const Request& r : batch)
      if (r.kind == ReqKind::kRead) detail::prefetch(fabric_.direct(r.addr.node) + r.addr.offset, r.len);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // The READs' counts are summed here and added once: stores through r.buf may alias counters_,
    // so counting in place would load and store each counter per READ.
    uint64_t reads = 0, bytes = 0, lines = 0;
    for (Request& r : batch) {
      std::byte* target = fabric_.direct(r.addr.node) + r.addr.offset;  // validate() checked bounds
      if (r.kind == ReqKind::kRead && !r.fence) {  // a lookup's batches: unfenced READs
        detail::read_in(static_cast<std::byte*>(r.buf), target, r.len);
        ++reads;
        bytes += r.len;
        lines += lines_spanned(r.addr.offset, r.len);
      } else {
        if (r.fence) std::atomic_thread_fence(std::memory_order_seq_cst);  // as in post()
        detail::direct_execute(r, target);
        counters_.add(r);
      }
      r.status = ReqStatus::kOk;
    }
    counters_.reads += reads;
    counters_.bytes_read += bytes;
    counters_.lines_read += lines;
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
    const bool slept = fabric_.client_idle(ucp_worker_progress(worker), idle, spin_, counters_);
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

}  // namespace rdmahash::ucx_impl

namespace rdmahash::detail {
using ucx_impl::UcxFabricImpl;
using ucx_impl::UcxTransport;

std::optional<int> runnable_tasks(std::string_view loadavg) {
  // "l1 l5 l15 runnable/total lastpid": skip three fields and their blanks.
  size_t i = 0;
  for (int field = 0; field < 3; ++field) {
    const size_t blank = loadavg.find(' ', i);
    if (blank == std::string_view::npos) return std::nullopt;
    i = blank + 1;
  }
  const size_t slash = loadavg.find('/', i);
  if (slash == std::string_view::npos || slash == i) return std::nullopt;
  int n = 0;
  const auto [end, ec] = std::from_chars(loadavg.data() + i, loadavg.data() + slash, n);
  if (ec != std::errc() || end != loadavg.data() + slash || n < 0) return std::nullopt;
  return n;
}

ClientSpin::~ClientSpin() {
  if (fd_ >= 0) ::close(fd_);
}

int ClientSpin::cpus() {
  if (cpus_ == 0) cpus_ = std::max(1, ::get_nprocs());
  return cpus_;
}

bool ClientSpin::keep_spinning(bool begins, std::chrono::steady_clock::time_point now, std::chrono::microseconds budget) {
  if (begins) {
    since_ = now;
    spins_ = !paused(now);
  }
  return spins_ && now - since_ < budget;
}

std::optional<int> ClientSpin::read_loadavg() {
  if (fd_ == -1) {
    fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fd_ = -2;
  }
  if (fd_ < 0) return std::nullopt;
  char buf[128];
  const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return std::nullopt;
  return runnable_tasks(std::string_view(buf, static_cast<size_t>(n)));
}

bool ClientSpin::paused(std::chrono::steady_clock::time_point now) {
  // looked_at_ starts at the clock's epoch (boot for steady_clock): the first look is always due.
  if (now - looked_at_ >= kLookEvery) {
    if (now - looked_at_ > kStreakGap) streak_ = 0;  // "in a row" means close together
    looked_at_ = now;
    const std::optional<int> r = runnable_ ? runnable_() : read_loadavg();
    // Unknown (no /proc): spin, as before this check existed. A task that runs for a moment (a
    // kernel thread, the other process's UCX thread) is not contention: kStreak looks in a row.
    streak_ = r && *r > cpus() ? streak_ + 1 : 0;
    if (streak_ >= kStreak) paused_until_ = now + kPause;
  }
  return now < paused_until_;
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
  // peer_failure is off exactly for a node on this host that shared memory may reach (ucx_service.cpp).
  f->set_peers_elsewhere(std::any_of(nodes.begin(), nodes.end(), [](const UcxRemoteNode& n) { return n.peer_failure; }));
  f->init_service();
  f->connect_service_nodes(nodes);
  return f;
}
}  // namespace rdmahash::detail
