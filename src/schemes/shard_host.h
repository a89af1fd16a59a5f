// The memory-node side shared by the persistent schemes whose writes the node's CPU applies
// (continuity, level): one PersistentRegion and one Shard per node hosted by this process, the
// two-sided write request (write_rpc.h) served on them, and the per-node accessors their public
// Server classes expose (internal). A Shard provides find_or_put / put / update / erase returning
// {status, persists}, records(), recovered() and stats(), and is built from (cfg, node, region).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/pmem.h"
#include "rdmahash/table.h"
#include "schemes/write_rpc.h"

namespace rdmahash::detail {

template <class Shard>
class ShardHost {
 public:
  // Formats or recovers (the Shard's constructor decides) every node of `cfg` hosted by `fabric`
  // and registers the write RPC `rpc_id`, which must lie in [rpc_first, rpc_last]. `scheme` names
  // the scheme in errors; `tag` is the configuration tag clients must present.
  template <class Config>
  static std::shared_ptr<ShardHost> create(Fabric& fabric, const Config& cfg, PersistMode mode, uint16_t rpc_id,
                                           uint16_t rpc_first, uint16_t rpc_last, const char* scheme, uint32_t tag) {
    if (rpc_id < rpc_first || rpc_id > rpc_last)
      throw InvalidArgument(std::string(scheme) + " rpc id must be in [" + hex(rpc_first) + ", " + hex(rpc_last) +
                            "], got " + std::to_string(rpc_id));
    if (fabric.memory_nodes() < cfg.memory_nodes)
      throw InvalidArgument("the table has " + std::to_string(cfg.memory_nodes) + " shards but the fabric only " +
                            std::to_string(fabric.memory_nodes()) + " memory nodes");
    auto host = std::shared_ptr<ShardHost>(new ShardHost(scheme, tag));
    host->regions_.resize(cfg.memory_nodes);
    host->shards_.resize(cfg.memory_nodes);
    for (uint32_t n = 0; n < cfg.memory_nodes; ++n) {
      auto region = fabric.local_region(n);
      if (region.empty()) continue;
      host->regions_[n] = std::make_unique<PersistentRegion>(region, mode);
      host->shards_[n] = std::make_unique<Shard>(cfg, n, *host->regions_[n]);
    }
    // The handler keeps the host alive: the server object may be dropped after construction.
    fabric.register_rpc(rpc_id, [h = host](uint32_t, std::span<const std::byte> req, std::vector<std::byte>& reply) {
      h->handle(req, reply);
    });
    return host;
  }

  bool hosts(uint32_t node) const { return node < shards_.size() && shards_[node]; }
  Shard& shard(uint32_t node) const {
    check_hosted(node);
    return *shards_[node];
  }
  PersistentRegion& region(uint32_t node) const {
    check_hosted(node);
    return *regions_[node];
  }
  uint64_t records() const {
    uint64_t n = 0;
    for (const auto& s : shards_) n += s ? s->records() : 0;
    return n;
  }
  bool recovered() const {  // every hosted shard was recovered from an existing image (and one is hosted)
    bool any = false;
    for (const auto& s : shards_)
      if (s) {
        if (!s->recovered()) return false;
        any = true;
      }
    return any;
  }
  template <class F>
  void for_each_shard(F&& f) const {
    for (const auto& s : shards_)
      if (s) f(*s);
  }

 private:
  ShardHost(const char* scheme, uint32_t tag) : scheme_(scheme), tag_(tag) {}
  static std::string hex(uint16_t v) {
    static const char* digits = "0123456789ABCDEF";
    std::string s = "0x";
    for (int shift = 12; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xF];
    return s;
  }
  void check_hosted(uint32_t node) const {
    if (!hosts(node))
      throw InvalidArgument(std::string(scheme_) + " shard " + std::to_string(node) + " is not hosted by this process");
  }
  void handle(std::span<const std::byte> req, std::vector<std::byte>& reply) {
    const char* scheme = scheme_;
    write_rpc::serve(scheme, tag_, req, shards_, reply,
                     [scheme](Shard& s, write_rpc::Op op, uint64_t key, std::span<const std::byte> value) {
                       switch (op) {
                         case write_rpc::kFindOrPut: return result(s.find_or_put(key, value));
                         case write_rpc::kPut: return result(s.put(key, value));
                         case write_rpc::kUpdate: return result(s.update(key, value));
                         case write_rpc::kErase: return result(s.erase(key));
                         case write_rpc::kGet: {
                           // Under the shard's lock: the one-sided lookup's fallback for an item
                           // older than the seq window whose pair keeps changing ("Old items").
                           if (!s.owns(key)) throw InvalidArgument(std::string(scheme) + ": key does not belong to this shard");
                           auto v = s.find(key);
                           if (!v) return write_rpc::Result{Status::kNotFound, 0};
                           return write_rpc::Result{Status::kFound, 0, std::move(*v)};
                         }
                       }
                       throw InvalidArgument(std::string(scheme) + ": unknown op");
                     });
  }
  template <class R>
  static write_rpc::Result result(const R& r) {
    return write_rpc::Result{r.status, r.persists};
  }

  const char* scheme_;
  uint32_t tag_;
  std::vector<std::unique_ptr<PersistentRegion>> regions_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace rdmahash::detail
