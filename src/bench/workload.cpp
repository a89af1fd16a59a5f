#include "bench/workload.h"

#include <cstring>
#include <vector>

#include "schemes/hash.h"

namespace rdmahash::bench {

uint64_t KeySpace::key(uint64_t i) const {
  // Each step is a bijection on [0, 2^bits): add, xor-shift, multiply by an odd constant.
  const uint64_t mask = bits_ >= 64 ? ~0ULL : (1ULL << bits_) - 1;
  uint64_t x = i & mask;
  uint64_t s = seed_;
  for (int round = 0; round < 3; ++round) {
    s = hash::mix64(s + 0x9E3779B97F4A7C15ULL);
    x = (x + s) & mask;
    x ^= x >> (bits_ / 2 + 1);
    x = (x * ((s << 1) | 1)) & mask;
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

OpStream::OpStream(const BenchOptions& o, Workload w, const KeySpace& keys, uint32_t client)
    : w_(w), keys_(keys) {
  const uint32_t stream = o.same_keys ? 0 : client;
  state_ = hash::mix64(o.seed * 0x100000001B3ULL + stream + 1);
  // New keys of different clients never collide unless --same-keys asks them to.
  next_new_ = keys.records() + static_cast<uint64_t>(stream) * (o.ops + 1);
  insert_fraction_ = w == Workload::kMixed ? 0.5 : w == Workload::kReadIntensive ? 0.2
                   : w == Workload::kWriteIntensive ? 0.8 : w == Workload::kFindOrPut ? 1.0 : 0.0;
}

uint64_t OpStream::rng() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return hash::mix64(state_);
}

Op OpStream::next() {
  switch (w_) {
    case Workload::kRawRead: return Op{OpKind::kRawRead, rng()};
    case Workload::kGet: return Op{OpKind::kGet, keys_.key(hash::range(rng(), keys_.records()))};
    default: break;
  }
  const bool insert = static_cast<double>(rng() >> 11) * 0x1.0p-53 < insert_fraction_;
  if (insert) return Op{OpKind::kFindOrPut, keys_.key(next_new_++)};
  return Op{OpKind::kFindOrPut, keys_.key(hash::range(rng(), keys_.records()))};
}

namespace {

class LinearAdapter final : public SchemeAdapter {
 public:
  LinearAdapter(const BenchOptions& o, double load_factor) {
    cfg_ = LinearConfig::for_records(o.records, load_factor, o.memory_nodes);
    const bool inline_fmt = o.slot_format == "inline" || (o.slot_format == "auto" && (o.value_bytes > 0 || o.key_bytes == 4));
    cfg_.format = inline_fmt ? SlotFormat::kInline : SlotFormat::kSet;
    cfg_.key_bytes = o.key_bytes;
    cfg_.value_bytes = inline_fmt ? o.value_bytes : 0;
    cfg_.tail_slots = o.tail_slots;
    cfg_.hash_seed = hash::mix64(o.seed ^ 0x7AB1E5EEDULL);
    cfg_.validate();
    probe_.chunk = o.chunk;
    probe_.max_chunks = o.max_chunks;
    probe_.validate();
  }
  uint64_t region_bytes() const override { return cfg_.region_bytes(); }
  uint64_t slots() const override { return cfg_.home_slots * cfg_.memory_nodes; }
  unsigned key_bits() const override {
    return cfg_.format == SlotFormat::kSet ? 63 : cfg_.key_bytes * 8;
  }
  uint32_t value_bytes() const override { return cfg_.value_bytes; }

  void load_shard(uint32_t node, std::span<std::byte> region, const KeySpace& keys,
                  const std::function<void(uint64_t)>& progress) override {
    LinearShardLoader loader(cfg_, node, region);
    std::vector<std::byte> value(cfg_.value_bytes);
    for (uint64_t i = 0; i < keys.records(); ++i) {
      const uint64_t k = keys.key(i);
      if (linear_place(cfg_, k).node != node) continue;
      fill_value(k, value);
      loader.insert(k, value);
      if ((i & 0xFFFF) == 0 && progress) progress(i);
    }
    if (progress) progress(keys.records());
  }

  void load_all(const std::function<std::span<std::byte>(uint32_t)>& region, const KeySpace& keys,
                const std::function<void(uint64_t)>& progress) override {
    std::vector<LinearShardLoader> loaders;
    for (uint32_t n = 0; n < cfg_.memory_nodes; ++n) loaders.emplace_back(cfg_, n, region(n));
    std::vector<std::byte> value(cfg_.value_bytes);
    for (uint64_t i = 0; i < keys.records(); ++i) {
      const uint64_t k = keys.key(i);
      fill_value(k, value);
      loaders[linear_place(cfg_, k).node].insert(k, value);
      if ((i & 0xFFFF) == 0 && progress) progress(i);
    }
    if (progress) progress(keys.records());
  }

  std::unique_ptr<KvClient> make_client(Engine& engine, uint32_t read_size) const override {
    ProbeConfig p = probe_;
    p.read_size = read_size;
    return std::make_unique<LinearClient>(cfg_, p, engine);
  }

  std::string describe() const override {
    return std::string("linear/") + to_string(cfg_.format) + " slot=" + std::to_string(cfg_.slot_bytes()) + "B";
  }

  const LinearConfig& config() const { return cfg_; }

 private:
  LinearConfig cfg_;
  ProbeConfig probe_;
};

}  // namespace

std::unique_ptr<SchemeAdapter> make_adapter(const BenchOptions& o, double load_factor) {
  if (o.scheme == "linear") return std::make_unique<LinearAdapter>(o, load_factor);
  throw InvalidArgument("unknown scheme '" + o.scheme + "'");
}

}  // namespace rdmahash::bench
