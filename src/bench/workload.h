// Workload generation: which keys exist, which key each operation uses, and the scheme adapter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <memory>
#include <optional>
#include <span>

#include "bench/options.h"
#include "bench/report.h"
#include "rdmahash/engine.h"
#include "rdmahash/linear.h"
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
bool value_matches(uint64_t key, std::span<const std::byte> value);

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

enum class OpKind : uint8_t { kGet, kGetAll, kFindOrPut, kRawRead };
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
  double insert_fraction_;
};

// Thin per-scheme adapter used by the driver.
class SchemeAdapter {
 public:
  virtual ~SchemeAdapter() = default;
  virtual uint64_t region_bytes() const = 0;
  virtual uint64_t slots() const = 0;  // home slots over all memory nodes (0: the table grows)
  // The table's slots now, read from the memory this process hosts (race: its directory on node 0);
  // 0 where this process cannot tell. Tables of fixed size answer slots().
  virtual uint64_t slots_in(Fabric&) const { return slots(); }
  virtual unsigned key_bits() const = 0;
  virtual uint32_t value_bytes() const = 0;
  // Memory-node side: formats every shard this process hosts (`fabric.local_region(n)` is
  // non-empty) and loads the records of `keys` that belong to them, in one pass over the keys.
  // Registers whatever RPC handlers the scheme's clients need. Call before the start barrier.
  // Called again on the same fabric to reload the table between points: the result is the table
  // as the first call left it (a persistent image: restored as it was after the first call).
  virtual void load(Fabric& fabric, const KeySpace& keys, const std::function<void(uint64_t done)>& progress) = 0;
  struct ClientSetup {
    std::unique_ptr<KvClient> client;
    uint32_t read_size = 0;  // the lookup read size in slots (for model/cluster: the model's R*)
  };
  // A client whose lookups size their reads as `spec` says. For model sizes it reads the table's
  // metadata (one READ) to learn the load factor. Throws InvalidArgument if the scheme has no such
  // policy.
  virtual ClientSetup make_client(Engine& engine, const ReadSizeSpec& spec, const BenchOptions& o) const = 0;
  // The same for client `client` (unique among the table's live and dead clients: race names lock
  // owners by it); schemes that do not care answer make_client.
  virtual ClientSetup make_client_as(Engine& engine, const ReadSizeSpec& spec, const BenchOptions& o, uint32_t) const {
    return make_client(engine, spec, o);
  }
  virtual std::string describe() const = 0;
  // After a client's run: scheme statistics for the report (race: splits, directory depth).
  virtual void finish(KvClient&, ClientResult&) const {}
  // Persistent schemes (--pm-path): the memory node's table memory, a file mapping the fabric must
  // expose as its region (opened on first call, on the memory node only); empty otherwise.
  virtual std::span<std::byte> persistent_region() { return {}; }
  // "volatile", "pmem" or "msync" for persistent schemes (after load), else empty.
  virtual std::string persistence() const { return {}; }
  // After load: the records of an existing persistent image that was recovered instead of
  // bulk-loaded (on the memory node hosting it); nothing if the table was loaded from the keys.
  virtual std::optional<uint64_t> recovered_records() const { return std::nullopt; }
  // Online resizes the table has made so far (over every shard), where this process can tell
  // (continuity: hosts every shard); nothing otherwise.
  virtual std::optional<uint64_t> table_resizes() const { return std::nullopt; }
  // Whether a resize is in progress now (same condition).
  virtual std::optional<bool> table_resizing() const { return std::nullopt; }
  // `rdmahash serve`: what to repair after a client died (null: nothing to repair). Memory-node side.
  virtual std::unique_ptr<ClientLossHandler> loss_handler(Fabric&) const { return nullptr; }
};

std::unique_ptr<SchemeAdapter> make_adapter(const BenchOptions& o, double load_factor);

}  // namespace rdmahash::bench
