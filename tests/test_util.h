// Shared helpers for the in-process tests.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "rdmahash/client.h"
#include "rdmahash/fabric.h"
#include "rdmahash/linear.h"

namespace rdmahash::test {

// A formatted, empty linear table on a LocalFabric.
struct LocalTable {
  LinearConfig cfg;
  std::unique_ptr<Fabric> fabric;
  explicit LocalTable(const LinearConfig& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    for (uint32_t n = 0; n < c.memory_nodes; ++n) LinearShardLoader(c, n, fabric->local_region(n));
  }
  std::vector<uint64_t> all_keys() const {
    std::vector<uint64_t> keys;
    for (uint32_t n = 0; n < cfg.memory_nodes; ++n) {
      auto k = linear_scan_keys(cfg, fabric->local_region(n));
      keys.insert(keys.end(), k.begin(), k.end());
    }
    return keys;
  }
};

// A slot format with its key and value sizes (the parameter of the format-parametrised tests).
struct Format {
  SlotFormat format;
  uint32_t key_bytes, value_bytes;
};
inline LinearConfig config_of(const Format& f) {
  LinearConfig c;
  c.format = f.format;
  c.key_bytes = f.key_bytes;
  c.value_bytes = f.value_bytes;
  return c;
}

inline ProbeConfig probe(uint32_t chunk, uint32_t max_chunks, uint32_t read_size) {
  ProbeConfig p;
  p.chunk = chunk;
  p.max_chunks = max_chunks;
  p.read_size = read_size;
  return p;
}

inline std::vector<std::byte> value_for(uint64_t key, uint32_t salt, uint32_t bytes) {
  std::vector<std::byte> v(bytes);
  uint64_t s = key * 0x9E3779B97F4A7C15ULL + salt;
  for (uint32_t i = 0; i < bytes; ++i) {
    s ^= s >> 29; s *= 0xBF58476D1CE4E5B9ULL;
    v[i] = static_cast<std::byte>(s >> 56);
  }
  return v;
}

}  // namespace rdmahash::test
