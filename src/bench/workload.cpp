#include "bench/workload.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "bench/ycsb.h"
#include "rdmahash/model.h"
#include "common/hash.h"

namespace rdmahash::bench {

KeySpace::KeySpace(uint64_t records, unsigned bits, uint64_t seed, double zipf_theta)
    : records_(records), bits_(bits), seed_(seed), theta_(zipf_theta) {
  uint64_t s = seed_;
  for (int r = 0; r < 3; ++r) {
    rounds_[r] = s = hash::mix64(s + 0x9E3779B97F4A7C15ULL);
    odd_[r] = (s << 1) | 1;
  }
  mask_ = bits_ >= 64 ? ~0ULL : (1ULL << bits_) - 1;
  shift_ = bits_ / 2 + 1;
}

uint64_t KeySpace::key(uint64_t i) const {
  // Each step is a bijection on [0, 2^bits): add, xor-shift, multiply by an odd constant. The
  // constants depend on the seed and the bits only (computed once: key() runs for every operation).
  uint64_t x = i & mask_;
  for (int r = 0; r < 3; ++r) {
    x = (x + rounds_[r]) & mask_;
    x ^= x >> shift_;
    x = (x * odd_[r]) & mask_;
  }
  return x;
}

void fill_value(uint64_t key, std::span<std::byte> out) {
  uint64_t s = key;
  for (size_t i = 0; i < out.size(); i += 8) {
    s = hash::mix64(s + 0x2545F4914F6CDD1DULL);
    std::memcpy(out.data() + i, &s, std::min<size_t>(8, out.size() - i));
  }
}

struct RecordStream::Zipf {
  ycsb::Rng rng;
  ycsb::ZipfianGenerator gen;
};

RecordStream::RecordStream(const KeySpace& keys) : keys_(keys) {
  if (keys.zipf_theta() > 0)
    zipf_.reset(new Zipf{ycsb::Rng(hash::mix64(keys.seed() ^ 0x2F1A7E11ULL)),
                         ycsb::ZipfianGenerator(0, keys.records() - 1, keys.zipf_theta())});
}
RecordStream::~RecordStream() = default;

uint64_t RecordStream::next() {
  const uint64_t i = i_++;
  return keys_.key(zipf_ ? zipf_->gen.next(zipf_->rng) : i);
}

struct OpStream::Zipf {
  ycsb::Rng rng;
  ycsb::ZipfianGenerator gen;
};
OpStream::~OpStream() = default;

OpStream::OpStream(const BenchOptions& o, Workload w, const KeySpace& keys, uint32_t client, uint32_t clients,
                   uint64_t insert_point)
    : w_(w), keys_(keys) {
  const uint32_t stream = o.same_keys ? 0 : client;
  state_ = hash::mix64(o.seed * 0x100000001B3ULL + stream + 1);
  // New keys of different clients never collide unless --same-keys asks them to, and no insert
  // point re-uses the new keys of an earlier one (they would be found, not inserted).
  next_new_ = keys.records() + (insert_point * clients + stream) * (o.ops + 1);
  next_erase_ = stream;
  erase_step_ = o.same_keys ? 1 : clients;
  if (keys.zipf_theta() > 0)
    zipf_.reset(new Zipf{ycsb::Rng(hash::mix64(state_ ^ 0x51ED2701ULL)),
                         ycsb::ZipfianGenerator(0, keys.records() - 1, keys.zipf_theta())});
  insert_fraction_ = w == Workload::kMixed ? 0.5 : w == Workload::kReadIntensive ? 0.2
                   : w == Workload::kWriteIntensive ? 0.8 : w == Workload::kFindOrPut ? 1.0 : 0.0;
}

uint64_t OpStream::rng() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return hash::mix64(state_);
}

uint64_t OpStream::present_index() {
  return zipf_ ? zipf_->gen.next(zipf_->rng) : hash::range(rng(), keys_.records());
}

Op OpStream::next() {
  switch (w_) {
    case Workload::kRawRead: return Op{OpKind::kRawRead, rng()};
    case Workload::kGet: return Op{OpKind::kGet, keys_.key(present_index())};
    case Workload::kGetAll: return Op{OpKind::kGetAll, keys_.key(present_index())};
    case Workload::kUpdate: return Op{OpKind::kUpdate, keys_.key(present_index())};
    case Workload::kErase: {
      const uint64_t i = next_erase_ % keys_.records();
      next_erase_ += erase_step_;
      return Op{OpKind::kErase, keys_.key(i)};
    }
    default: break;
  }
  const bool insert = static_cast<double>(rng() >> 11) * 0x1.0p-53 < insert_fraction_;
  if (insert) return Op{OpKind::kFindOrPut, keys_.key(next_new_++)};
  return Op{OpKind::kFindOrPut, keys_.key(hash::range(rng(), keys_.records()))};
}

std::unique_ptr<SchemeTable> make_table(const BenchOptions& o, double load_factor) {
  const TableOptions t = table_options(o, load_factor);
  if (std::string e = check_table_options(t); !e.empty()) throw InvalidArgument(flag_error(e));
  return scheme(t.scheme).make(t);
}

void load_table(SchemeTable& t, Fabric& fabric, const KeySpace& keys, std::function<void(uint64_t)> progress) {
  KeyRecords records(keys, std::move(progress));
  t.load(fabric, records);
}

SchemeTable::Client make_client(const SchemeTable& t, Engine& engine, const BenchOptions& o, const ReadSizeSpec& read_size,
                                uint32_t client_id, uint32_t chunk, double assumed_load_factor,
                                double present_fraction) {
  ClientOptions c;
  c.read_size = read_size;
  c.assumed_load_factor = assumed_load_factor;
  c.present_fraction = present_fraction;
  c.clusters = o.clusters;
  c.client_id = client_id;
  c.chunk = chunk;
  c.location_cache = o.location_cache;
  return t.make_client(engine, c);
}

double model_present_fraction(const BenchOptions& o, Workload w) {
  if (o.present_fraction) return *o.present_fraction;
  switch (w) {
    // Every lookup is of a loaded key (mixed workloads' new keys go through find-or-put's chunks).
    case Workload::kGet:
    case Workload::kUpdate:
    case Workload::kMixed:
    case Workload::kReadIntensive:
    case Workload::kWriteIntensive:
    case Workload::kYcsbRun:
      return 1.0;
    // Scans to the first empty slot (get-all), lookups that can miss (erase past the loaded keys,
    // kv-mix's absent half), or no lookups: seed 000's model.
    default:
      return 0.0;
  }
}

double reported_present_fraction(const ReadSizeSpec& read_size, double fraction) {
  switch (read_size.kind) {
    case ReadSizeSpec::Kind::kFixed: return std::nan("");
    case ReadSizeSpec::Kind::kCluster: return 0.0;
    default: return fraction;
  }
}

void add_client_stats(const SchemeTable& t, KvClient& kv, ClientResult& r) {
  const SchemeTable::ClientStats s = t.client_stats(kv);
  r.resizes += s.splits;
  for (const double lf : s.split_loads) r.add_split_load(lf);
  r.directory_depth = std::max(r.directory_depth, s.directory_depth);
}

}  // namespace rdmahash::bench
