// LocalFabric: memory nodes are heap regions of this process and clients are threads.
//
// Why word-wise copies: remote READs race with CAS/WRITE from other clients by design (that is
// what the schemes' version/checksum protocols are for). Copying 8-byte-aligned words with relaxed
// atomic loads/stores keeps those races defined behaviour in C++ (and quiet under TSan) while
// behaving like a DMA engine: a multi-word read may be torn, an aligned word never is. A
// sequentially consistent fence brackets every batch, like the completion of an RDMA request.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rdmahash/fabric.h"
#include "fabric/direct_access.h"
#include "fabric/rpc_limit.h"

namespace rdmahash {
namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

struct AlignedFree {
  std::align_val_t align{64};  // as allocated
  void operator()(std::byte* p) const { ::operator delete[](p, align); }
};

class LocalFabric;

class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(LocalFabric& f, uint32_t id) : fabric_(f), id_(id) {}
  void execute(std::span<Request> batch) override;
  std::span<const std::byte> direct_region(uint32_t node) override;  // every node: READs are loads here
  void begin_direct_reads() override {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // as execute() starts a batch
    ++counters_.batches;
  }

 private:
  std::byte* checked_atomic(const Request& r);
  LocalFabric& fabric_;
  uint32_t id_;
};

class LocalFabric final : public Fabric {
 public:
  LocalFabric(std::vector<uint64_t> sizes, RegionPages pages) {
    if (sizes.empty()) throw FabricError("local fabric: at least one memory node is required");
    for (uint64_t s : sizes) {
      // Large regions start on a 2 MiB boundary so that THP can back all of them; the advice is
      // given before the memset faults the pages in (fabric.h, RegionPages).
      const bool large = s >= (uint64_t{4} << 20);
      const uint64_t bytes = large ? (s + kHugePage - 1) / kHugePage * kHugePage : std::max<uint64_t>(s, 8);
      const std::align_val_t align{large ? kHugePage : 64};
      std::unique_ptr<std::byte[], AlignedFree> p(static_cast<std::byte*>(::operator new[](bytes, align)), AlignedFree{align});
      if (large) (void)::madvise(p.get(), bytes, pages == RegionPages::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
      std::memset(p.get(), 0, s);
      std::byte* base = p.get();
      regions_.push_back(Region{std::move(p), base, s});
    }
  }
  // Regions owned by the caller (e.g. a persistent-memory file mapping), served as they are.
  explicit LocalFabric(const std::vector<std::span<std::byte>>& external) {
    if (external.empty()) throw FabricError("local fabric: at least one memory node is required");
    for (auto r : external) {
      if (reinterpret_cast<uintptr_t>(r.data()) % 8 != 0) throw FabricError("local fabric: region must be 8-byte aligned");
      regions_.push_back(Region{nullptr, r.data(), r.size()});
    }
  }
  std::string_view name() const override { return "local"; }
  uint32_t memory_nodes() const override { return static_cast<uint32_t>(regions_.size()); }
  uint64_t region_bytes(uint32_t node) const override {
    return node < regions_.size() ? regions_[node].size : 0;
  }
  std::span<std::byte> local_region(uint32_t node) override {
    if (node >= regions_.size()) return {};
    return {regions_[node].base, regions_[node].size};
  }
  std::unique_ptr<Transport> connect() override {
    return std::make_unique<LocalTransport>(*this, next_client_.fetch_add(1));
  }
  void register_rpc(uint16_t id, RpcHandler handler) override {
    std::unique_lock lock(rpc_mu_);
    handlers_[id] = std::move(handler);
  }

  std::byte* checked(const Request& r, uint64_t len) {
    if (r.addr.node >= regions_.size())
      throw FabricError("local fabric: memory node " + std::to_string(r.addr.node) + " does not exist");
    const Region& reg = regions_[r.addr.node];
    if (r.addr.offset > reg.size || len > reg.size - r.addr.offset)
      throw FabricError("local fabric: access [" + std::to_string(r.addr.offset) + ", +" + std::to_string(len) +
                        ") outside region of " + std::to_string(reg.size) + " bytes on node " +
                        std::to_string(r.addr.node));
    return reg.base + r.addr.offset;
  }

  void call_rpc(uint32_t src, const Request& r) {
    if (r.addr.node >= regions_.size())
      throw FabricError("local fabric: rpc to memory node " + std::to_string(r.addr.node) + " which does not exist");
    RpcHandler h;
    {
      std::shared_lock lock(rpc_mu_);
      auto it = handlers_.find(r.rpc_id);
      if (it == handlers_.end()) throw FabricError("local fabric: no rpc handler " + std::to_string(r.rpc_id));
      h = it->second;
    }
    if (r.len > kMaxRpcBytes) throw FabricError(detail::rpc_too_large(r.len));
    r.reply->clear();
    h(src, std::span<const std::byte>(static_cast<const std::byte*>(r.buf), r.len), *r.reply);
  }

 private:
  struct Region {
    std::unique_ptr<std::byte[], AlignedFree> data;  // null for external regions
    std::byte* base;
    uint64_t size;
  };
  std::vector<Region> regions_;
  std::atomic<uint32_t> next_client_{0};
  std::shared_mutex rpc_mu_;
  std::unordered_map<uint16_t, RpcHandler> handlers_;
};

std::span<const std::byte> LocalTransport::direct_region(uint32_t node) { return fabric_.local_region(node); }

void LocalTransport::execute(std::span<Request> batch) {
  // Each request succeeds or fails on its own (fabric.h, "Per-request outcome"): a bad address or
  // a throwing RPC handler fails that request only; the others of the batch still execute and are
  // reported kOk, as a NIC completes each work request of a posted list on its own.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ++counters_.batches;
  std::string error;
  std::vector<uint32_t> failed_nodes;  // nodes an earlier request of this batch failed at
  for (Request& r : batch) {
    try {
      // Requests run in batch order, so a fenced one already follows the earlier ones; the fence
      // makes their effects visible to other threads first, too. A fenced request depends on what
      // precedes it at its node (an unlock published after its payload): after a failed earlier
      // request to that node it fails too, unexecuted, as a work request behind a failed one on an
      // RDMA queue pair does. Failures at other nodes are not its business (fabric.h).
      if (r.fence) {
        if (std::find(failed_nodes.begin(), failed_nodes.end(), r.addr.node) != failed_nodes.end())
          throw FabricError("local fabric: fenced request after a failed one to node " + std::to_string(r.addr.node));
        std::atomic_thread_fence(std::memory_order_seq_cst);
      }
      switch (r.kind) {
        case ReqKind::kRead:
        case ReqKind::kWrite:
          detail::direct_execute(r, fabric_.checked(r, r.len));
          break;
        case ReqKind::kCas:
        case ReqKind::kFaa:
          detail::direct_execute(r, checked_atomic(r));
          break;
        case ReqKind::kRpc:
          if (!r.reply) throw FabricError("local fabric: rpc without a reply buffer");
          fabric_.call_rpc(id_, r);
          break;
      }
      r.status = ReqStatus::kOk;
      counters_.add(r);
    } catch (const MemoryNodeLost&) {
      throw;
    } catch (const std::exception& e) {
      // A handler's exception is its RPC's failure (UCX replies an error for it the same way).
      r.status = ReqStatus::kFailed;
      failed_nodes.push_back(r.addr.node);
      if (error.empty()) error = e.what();
    }
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!error.empty()) throw FabricError(error);
}

std::byte* LocalTransport::checked_atomic(const Request& r) {
  std::byte* p = fabric_.checked(r, 8);
  if (r.addr.offset % 8 != 0) throw FabricError("local fabric: atomic on unaligned offset " + std::to_string(r.addr.offset));
  if (!r.result) throw FabricError("local fabric: atomic without a result buffer");
  return p;
}

}  // namespace

std::unique_ptr<Fabric> make_local_fabric(std::vector<uint64_t> region_bytes, RegionPages pages) {
  return std::make_unique<LocalFabric>(std::move(region_bytes), pages);
}

std::unique_ptr<Fabric> make_local_fabric_over(const std::vector<std::span<std::byte>>& regions) {
  return std::make_unique<LocalFabric>(regions);
}

}  // namespace rdmahash
