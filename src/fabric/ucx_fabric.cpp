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
//   worker to progress. barrier() progresses the worker too (a symmetric rank's peer may still
//   need its RPCs served); gather() is a plain blocking MPI call: the lifecycle in ucx_fabric.h
//   makes sure no client needs a memory node's progress while it sits in it.
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
//   for client_spin (not while the machine's CPUs are contended: detail::ClientSpin) and then
//   arm the worker and sleep in poll() on its event fd (bounded by kClientSleepBound). kAuto is
//   resolved with serve_mode in query_transports(). PUT completion in UCP is only local, so a
//   batch that wrote to a node
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
#include "fabric/ucx_impl.h"

namespace rdmahash::ucx_impl {

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

void UcxFabricImpl::init() {
  one_host_ = all_ranks_on_this_host();
  peers_elsewhere_ = !one_host_;
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
  // UCX's memory domains read their hugetlb mode from the environment when the context opens them.
  if (config_.region_pages == RegionPages::kSmall && is_memory_node()) {
    ::setenv("UCX_SYSV_HUGETLB_MODE", "n", 1);
    ::setenv("UCX_POSIX_HUGETLB_MODE", "n", 1);
  }
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
  coalesce_atomics_ = cpu_atomics_only(tls);
  // The kAuto choices go by the transports that can carry traffic to the peers. UCX reaches a peer
  // on another host over the network only, even when its context also holds shared memory (and the
  // hosts of scripts/hosts.sh share one kernel, boot id included: UCX tells them apart by their
  // IPC namespaces). So with a peer elsewhere, shared memory does not count: TCP alone resolves as
  // TCP does (hybrid waits, coalescing), which a client polling for answers that need the memory
  // node's CPU would otherwise not get (a 10x slower served run between two hosts under load).
  // A served memory node (kServer) cannot know where its clients will be: it keeps the context's.
  if (peers_elsewhere_) {
    static const char* const kSharedMemory[] = {"posix", "sysv", "cma", "xpmem", "knem"};
    std::erase_if(tls, [](const std::string& tl) {
      return std::find(std::begin(kSharedMemory), std::end(kSharedMemory), tl) != std::end(kSharedMemory);
    });
  }
  serve_mode_ = resolve_serve_mode(config_.serve_mode, tls);
  client_wait_ = resolve_client_wait(config_.client_wait, tls);
  read_coalescing_ = resolve_read_coalescing(config_.read_coalescing, tls);
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
  // A send that completed locally may still sit in a transport's queue (UCX over TCP buffers it
  // while the socket is busy or the endpoint still wiring up) and only leaves with this worker's
  // progress; the caller's next step is an MPI collective that never progresses UCX, and the memory
  // nodes wait for this message before they join it. Flush: the messages have left when it completes.
  if (first_error == UCS_OK) {
    ucp_request_param_t p{};
    first_error = wait(ucp_worker_flush_nbx(worker_, &p));
  }
  if (first_error != UCS_OK) throw FabricError(ucx_error("client_done: sending the done message", first_error));
}

constexpr int kServeRecheckMs = 20;

void UcxFabricImpl::serve() {
  if (!is_memory_node()) return;
  const uint64_t expected = client_count();
  const int fd = event_fd();
  while (done_received_ < expected) {
    if (!serve_step()) continue;  // not armed: progress again
    if (done_received_ >= expected) break;
    // Bounded: a worker armed while UCX's TCP transport still held unread bytes (seen with two
    // memory nodes on separate hosts and clients on a third, shared memory within a host and TCP
    // between: the last client's done message never woke either node) signals nothing more, so
    // the sleep is cut every kServeRecheck and the worker progressed again. A missed wakeup then
    // costs at most that, never a hang.
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, kServeRecheckMs) < 0 && errno != EINTR)
      throw FabricError(std::string("ucx fabric: poll on the worker event fd: ") + std::strerror(errno));
  }
  done_received_ -= expected;  // messages of a later round may already be counted
}

}  // namespace rdmahash::ucx_impl

namespace rdmahash {
using ucx_impl::UcxFabricImpl;


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
}  // namespace rdmahash
