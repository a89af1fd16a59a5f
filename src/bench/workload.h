// Workload generation: which keys exist, which key each operation uses, and the scheme adapter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "bench/options.h"
#include "rdmahash/engine.h"
#include "rdmahash/linear.h"
#include "rdmahash/table.h"

namespace rdmahash::bench {

// Key i of the experiment: a seeded bijection of i onto the scheme's key domain of `bits` bits,
// so that keys are distinct, spread, and reproducible on every rank without communication.
// Keys 0..records-1 are loaded; keys from `records` on are new.
class KeySpace {
 public:
  KeySpace(uint64_t records, unsigned bits, uint64_t seed) : records_(records), bits_(bits), seed_(seed) {}
  uint64_t key(uint64_t i) const;
  uint64_t records() const { return records_; }

 private:
  uint64_t records_;
  unsigned bits_;
  uint64_t seed_;
};

// The value stored with `key` (deterministic, so readers can verify what they got).
void fill_value(uint64_t key, std::span<std::byte> out);

enum class OpKind : uint8_t { kGet, kFindOrPut, kRawRead };
struct Op {
  OpKind kind;
  uint64_t key;  // kRawRead: random 64 bits for the address
};

// The op sequence of one client. Deterministic in (seed, client) — or in seed alone with
// same_keys, so that every client issues the same sequence.
class OpStream {
 public:
  OpStream(const BenchOptions& o, Workload w, const KeySpace& keys, uint32_t client);
  Op next();

 private:
  uint64_t rng();
  Workload w_;
  const KeySpace& keys_;
  uint64_t state_;
  uint64_t next_new_;
  double insert_fraction_;
};

// Thin per-scheme adapter used by the driver.
class SchemeAdapter {
 public:
  virtual ~SchemeAdapter() = default;
  virtual uint64_t region_bytes() const = 0;
  virtual uint64_t slots() const = 0;  // home slots over all memory nodes
  virtual unsigned key_bits() const = 0;
  virtual uint32_t value_bytes() const = 0;
  // Formats shard `node` in `region` and loads every key of `keys` that belongs to it.
  virtual void load_shard(uint32_t node, std::span<std::byte> region, const KeySpace& keys,
                          const std::function<void(uint64_t done)>& progress) = 0;
  // Loads all shards at once (in-process fabric): one pass over the keys.
  virtual void load_all(const std::function<std::span<std::byte>(uint32_t)>& region, const KeySpace& keys,
                        const std::function<void(uint64_t done)>& progress) = 0;
  virtual std::unique_ptr<KvClient> make_client(Engine& engine, uint32_t read_size) const = 0;
  virtual std::string describe() const = 0;
};

std::unique_ptr<SchemeAdapter> make_adapter(const BenchOptions& o, double load_factor);

}  // namespace rdmahash::bench
