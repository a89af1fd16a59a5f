// Workload generation: which keys exist, which key each operation uses, and the scheme adapter.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <memory>
#include <optional>
#include <span>

#include "bench/options.h"
#include "bench/report.h"
#include "common/hash.h"
#include "rdmahash/engine.h"
#include "rdmahash/linear.h"
#include "rdmahash/scheme.h"
#include "rdmahash/table.h"
#include "rdmahash/ucx_service.h"

namespace rdmahash::bench {

// Key i of the experiment: a seeded bijection of i onto the scheme's key domain of `bits` bits,
// so that keys are distinct, spread, and reproducible on every rank without communication.
// Keys 0..records-1 are loaded; keys from `records` on are new.
//
// With a Zipf skew θ > 0 the loaded records are a multimap: record j carries key(z_j) with z_j
// drawn from Zipf(θ) over [0, records) (rank 0 the most frequent), and lookups draw their keys
// the same way (seed 000 §5.8).
class KeySpace {
 public:
  KeySpace(uint64_t records, unsigned bits, uint64_t seed, double zipf_theta = 0);
  uint64_t key(uint64_t i) const;
  uint64_t records() const { return records_; }
  double zipf_theta() const { return theta_; }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t records_;
  unsigned bits_;
  uint64_t seed_;
  double theta_;
  uint64_t rounds_[3];  // key()'s round constants, from the seed
  uint64_t odd_[3];     // and its multipliers ((round << 1) | 1)
  uint64_t mask_;       // [0, 2^bits)
  unsigned shift_;      // its xor-shift
};

// The keys of the loaded records, in load order; every rank generates the same sequence.
class RecordStream {
 public:
  explicit RecordStream(const KeySpace& keys);
  ~RecordStream();
  uint64_t next();

 private:
  struct Zipf;
  const KeySpace& keys_;
  uint64_t i_ = 0;
  std::unique_ptr<Zipf> zipf_;
};

// The value stored with `key` (deterministic, so readers can verify what they got).
void fill_value(uint64_t key, std::span<std::byte> out);
// True if `value` is what fill_value(key, ...) writes (compared without a buffer).
inline bool value_matches(uint64_t key, std::span<const std::byte> value) {
  uint64_t s = key;
  for (size_t i = 0; i < value.size(); i += 8) {
    s = hash::mix64(s + 0x2545F4914F6CDD1DULL);
    if (value.size() - i >= 8) {
      uint64_t w;
      std::memcpy(&w, value.data() + i, 8);
      if (w != s) return false;
    } else if (std::memcmp(value.data() + i, &s, value.size() - i) != 0) {
      return false;
    }
  }
  return true;
}

// The benchmark's gets (KvClient::get_visit) report here: every found value is checked against
// its key's (value_matches) where the scheme read it — no buffer of the caller's, no copy, no
// coroutine around get — and the outcome is counted as do_op counts the other operations'
// (ClientResult::add_outcome, plus matches).
class GetCheck final : public GetVisitor {
 public:
  GetCheck(ClientResult* r, uint32_t value_bytes) : r_(r), value_bytes_(value_bytes) {}
  void on_get(uint64_t key, const OpResult& res, std::span<const std::byte> value) override {
    if (res.status == Status::kFound && value_bytes_ && !value_matches(key, value)) ++r_->value_mismatches;
    r_->add_outcome(res);
    r_->matches += res.matches;
  }

 private:
  ClientResult* r_;
  uint32_t value_bytes_;
};

enum class OpKind : uint8_t { kGet, kGetAll, kFindOrPut, kRawRead, kUpdate, kErase };
struct Op {
  OpKind kind;
  uint64_t key;  // kRawRead: random 64 bits for the address
};

// The op sequence of one client. Deterministic in (seed, client) — or in seed alone with
// same_keys, so that every client issues the same sequence.
// New keys (inserts) are key indices from keys.records() on, in blocks of ops + 1: block
// `insert_point` * clients + client, so no two clients (unless same_keys) and no two insert
// points of one run (each point, repetition included, has its own `insert_point`) share a new key.
class OpStream {
 public:
  OpStream(const BenchOptions& o, Workload w, const KeySpace& keys, uint32_t client, uint32_t clients = 1,
           uint64_t insert_point = 0);
  ~OpStream();
  Op next();

 private:
  struct Zipf;
  uint64_t rng();
  uint64_t present_index();
  std::unique_ptr<Zipf> zipf_;
  Workload w_;
  const KeySpace& keys_;
  uint64_t state_;
  uint64_t next_new_;
  uint64_t next_erase_;  // kErase: the next loaded key index this client erases
  uint64_t erase_step_;  // clients (1 with same_keys: every client erases the same keys)
  double insert_fraction_;
};

// The bench reaches schemes only through the registry (rdmahash/scheme.h); these turn its options
// and key space into the registry's typed values.

// The loaded records of `keys` (RecordStream order), with fill_value's values.
class KeyRecords final : public RecordSource {
 public:
  explicit KeyRecords(const KeySpace& keys, std::function<void(uint64_t)> on_progress = {})
      : keys_(keys), stream_(keys) {
    progress = std::move(on_progress);
  }
  uint64_t count() const override { return keys_.records(); }
  uint64_t next() override { return stream_.next(); }
  void fill(uint64_t key, std::span<std::byte> value) const override { fill_value(key, value); }

 private:
  const KeySpace& keys_;
  RecordStream stream_;
};

// The table of `o` at `load_factor` (validated: InvalidArgument naming the flags).
std::unique_ptr<SchemeTable> make_table(const BenchOptions& o, double load_factor);
// Loads `keys` into the memory nodes this process hosts.
void load_table(SchemeTable& t, Fabric& fabric, const KeySpace& keys, std::function<void(uint64_t)> progress = {});
// A client of `t` reading as `read_size` says, named `client_id` (unique among the table's clients).
// `chunk`: find-or-put chunk size (0: the table's); `assumed_load_factor`: the load factor a model
// read size is sized for (0: the table's); `present_fraction`: ClientOptions::present_fraction.
SchemeTable::Client make_client(const SchemeTable& t, Engine& engine, const BenchOptions& o,
                                const ReadSizeSpec& read_size, uint32_t client_id = 0, uint32_t chunk = 0,
                                double assumed_load_factor = 0, double present_fraction = 0);
// The share of lookups model read sizes take to find their key: --present-fraction, else from the
// workload: 1 where every lookup is of a loaded key (get, update, mixed, read-/write-intensive,
// ycsb-run; find-or-put probes in chunks, not read sizes), 0 elsewhere (get-all scans to the first
// empty slot; erase and kv-mix look up absent keys too): seed 000's model.
double model_present_fraction(const BenchOptions& o, Workload w);
// What a row reports as model_present_fraction: the share `read_size`'s model priced, `fraction`;
// 0 for cluster (its hints and R* price first-empty scans); NaN (JSON null) for a fixed size.
double reported_present_fraction(const ReadSizeSpec& read_size, double fraction);
// After a client's run: its scheme statistics into the row (splits, split loads, directory depth).
void add_client_stats(const SchemeTable& t, KvClient& kv, ClientResult& r);

}  // namespace rdmahash::bench
