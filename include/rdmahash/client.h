// rdmahash/client.h — the synchronous and batched front door to a table.
//
//   auto fabric = rdmahash::make_local_fabric({cfg.region_bytes()});
//   rdmahash::LinearShardLoader(cfg, 0, fabric->local_region(0));   // memory node: format shard
//   rdmahash::Client client(*fabric, cfg);
//   client.find_or_put(42);                                         // -> kInserted
//   client.find_or_put_many(keys, /*depth=*/32);                    // pipelined, Algorithm 1
//
// A Client owns one Transport and one Engine: use it from one thread (make one per thread).
// Each call's error contract is KvClient's (table.h). `last_stats()` reports the round trips,
// requests and bytes of the most recent call (summed over a batch).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/linear.h"
#include "rdmahash/table.h"

namespace rdmahash {

class Client {
 public:
  Client(Fabric& fabric, const LinearConfig& table, const ProbeConfig& probe = {});
  ~Client();

  OpResult find_or_put(uint64_t key, std::span<const std::byte> value = {});
  OpResult get(uint64_t key, std::span<std::byte> value_out = {});
  OpResult update(uint64_t key, std::span<const std::byte> value);
  OpResult put(uint64_t key, std::span<const std::byte> value = {});
  OpResult erase(uint64_t key);

  // Pipelined: up to `depth` operations in flight. `values` holds keys.size() values of the
  // table's value_bytes back to back (empty for sets); `values_out` likewise receives them.
  // Every key is validated before any request is issued. get_many is a multi-get, `depth` keys in
  // flight (LinearClient::get_batch: one batch per round of windows, no coroutine per key; heap
  // tables: one get per key, `depth` in flight); the same requests and round trips per key.
  // find_or_put_many is likewise a multi-find-or-put where the table has one
  // (LinearClient::find_or_put_batch: inline records; else one find_or_put per key, `depth` in
  // flight): insert's round trips per key, at most its READs.
  std::vector<OpResult> find_or_put_many(std::span<const uint64_t> keys, std::span<const std::byte> values = {},
                                         uint32_t depth = 16);
  std::vector<OpResult> get_many(std::span<const uint64_t> keys, std::span<std::byte> values_out = {},
                                 uint32_t depth = 16);

  const OpStats& last_stats() const { return last_; }
  Engine& engine() { return *engine_; }
  KvClient& table() { return *table_; }

 private:
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LinearClient> table_;
  OpStats last_;
};

}  // namespace rdmahash
