// The memory-node side shared by every scheme whose writes the node's CPU applies (cuckoo,
// hopscotch, cluster; on persistent memory continuity, level): one Shard per node hosted by this
// process (on PM over its own PersistentRegion), the two-sided write request (write_rpc.h) served
// on them, and the per-node accessors their public Server classes expose (internal). A Shard
// provides find_or_put / put / update / erase returning a Status or {status, persists} (PM) or
// {status, displacements}, owns(key), find(key) (the kGet fallback, under the shard's lock) and
// records(); it is built from (cfg, node, region) — a std::span<std::byte> of the fabric's local
// region, or a PersistentRegion& on PM (then it also provides recovered()).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
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
  // On persistent memory (`mode`): each shard gets a PersistentRegion over the node's region.
  template <class Config>
  static std::shared_ptr<ShardHost> create(Fabric& fabric, const Config& cfg, PersistMode mode, uint16_t rpc_id,
                                           uint16_t rpc_first, uint16_t rpc_last, const char* scheme, uint32_t tag) {
    return create_impl(fabric, cfg, &mode, rpc_id, rpc_first, rpc_last, scheme, tag);
  }
  // In DRAM: each shard is built on the node's region itself.
  template <class Config>
  static std::shared_ptr<ShardHost> create(Fabric& fabric, const Config& cfg, uint16_t rpc_id, uint16_t rpc_first,
                                           uint16_t rpc_last, const char* scheme, uint32_t tag) {
    return create_impl(fabric, cfg, nullptr, rpc_id, rpc_first, rpc_last, scheme, tag);
  }

  bool hosts(uint32_t node) const { return node < shards_.size() && shards_[node]; }
  Shard& shard(uint32_t node) const {
    check_hosted(node);
    return *shards_[node];
  }
  PersistentRegion& region(uint32_t node) const {
    check_hosted(node);
    if (!regions_[node]) throw InvalidArgument(std::string(scheme_) + " shard " + std::to_string(node) + " is not on persistent memory");
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
  template <class Config>
  static std::shared_ptr<ShardHost> create_impl(Fabric& fabric, const Config& cfg, const PersistMode* mode,
                                                uint16_t rpc_id, uint16_t rpc_first, uint16_t rpc_last,
                                                const char* scheme, uint32_t tag) {
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
      if (mode) {
        if constexpr (std::is_constructible_v<Shard, const Config&, uint32_t, PersistentRegion&>) {
          host->regions_[n] = std::make_unique<PersistentRegion>(region, *mode);
          host->shards_[n] = std::make_unique<Shard>(cfg, n, *host->regions_[n]);
        }
      } else if constexpr (std::is_constructible_v<Shard, const Config&, uint32_t, std::span<std::byte>>) {
        host->shards_[n] = std::make_unique<Shard>(cfg, n, region);
      }
      if (!host->shards_[n]) throw InvalidArgument(std::string(scheme) + ": shards cannot be built on this kind of region");
    }
    // The handler keeps the host alive: the server object may be dropped after construction.
    fabric.register_rpc(rpc_id, [h = host](uint32_t, std::span<const std::byte> req, std::vector<std::byte>& reply) {
      h->handle(req, reply);
    });
    return host;
  }

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
                         case write_rpc::kGet:
                           // Under the shard's lock: the one-sided lookup's fallback (cuckoo: a miss
                           // overlapping relocations; continuity, level: an item older than the seq
                           // window whose pair keeps changing, "Old items").
                           return write_rpc::get_on_node(s, scheme, key);
                       }
                       throw InvalidArgument(std::string(scheme) + ": unknown op");
                     });
  }
  static write_rpc::Result result(Status s) { return write_rpc::Result{s, 0}; }
  template <class R>
  static write_rpc::Result result(const R& r) {
    if constexpr (requires { r.persists; })
      return write_rpc::Result{r.status, static_cast<uint32_t>(r.persists)};
    else
      return write_rpc::Result{r.status, r.displacements};
  }

  const char* scheme_;
  uint32_t tag_;
  std::vector<std::unique_ptr<PersistentRegion>> regions_;  // on PM only
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace rdmahash::detail
