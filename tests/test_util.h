// Shared helpers for the in-process tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rdmahash/client.h"
#include "rdmahash/fabric.h"
#include "rdmahash/linear.h"

namespace rdmahash::test {

// Runs `f` (which may throw: rethrown here) on a thread of its own, and ends the test binary with a
// failure if it is still running after `limit`. For tests of a loop's bound: with the bound
// removed (its mutant) the loop never ends, and the test fails now instead of at ctest's timeout.
// Not a timing assertion: `limit` is far above what the call takes on any machine.
template <class F>
void ends_within(std::chrono::seconds limit, const std::string& what, F f) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  std::thread th([f = std::move(f), done]() mutable {
    try {
      f();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  if (result.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s was still running after %lld s (a loop without its bound?)\n", what.c_str(),
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  th.join();
  result.get();
}

// A get's answer as a GetVisitor saw it (multi-get tests).
struct GetAnswer {
  OpResult r;
  std::vector<std::byte> value;
};
// Records each answer; a multi-get's `done` files the last one under its index (on_get comes
// right before it).
struct GetRecorder final : GetVisitor {
  std::optional<GetAnswer> last;
  void on_get(uint64_t, const OpResult& r, std::span<const std::byte> v) override {
    last = GetAnswer{r, std::vector<std::byte>(v.begin(), v.end())};
  }
};

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

// `n` keys of this (one-node) linear table whose home slot is `home`, found by trying keys in a
// fixed order from `seed` (a crowded neighbourhood for the key under test).
inline std::vector<uint64_t> keys_homed_at(const LinearConfig& c, uint64_t home, size_t n, uint64_t seed) {
  std::vector<uint64_t> out;
  const uint64_t mask = c.format == SlotFormat::kSet ? (1ULL << 63) - 1 : c.key_bytes == 4 ? 0xffffffffULL : ~0ULL;
  for (uint64_t k = seed; out.size() < n; ++k) {
    const uint64_t key = (k * 0x9E3779B97F4A7C15ULL) & mask;
    if (key > 1 && linear_place(c, key).home == home) out.push_back(key);
  }
  return out;
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

// Forces the interleavings a NIC allows, deterministically, on one thread: `hook` (typically one
// memory-node-side write) runs before every non-READ request of a batch and at random 8-byte word
// boundaries inside every READ, which it splits into ascending pieces (a multi-word READ is not
// atomic): the harshest cheap test of a one-sided read protocol against a concurrent writer.
// Shared by cuckoo_test, race_test and continuity_test.
class InterleavingTransport final : public Transport {
 public:
  InterleavingTransport(std::unique_ptr<Transport> inner, std::function<void()> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead) {
        // About four writes land inside each READ, at random word boundaries (a one-word READ gets
        // one before it 4 times in 5). Words between two writes are read as one piece.
        const uint32_t words = (r.len + 7) / 8;
        uint32_t done = 0;
        for (uint32_t w = 0; w <= words; ++w) {
          const bool cut = w < words && rng_() % (words + 4) < 4;
          if (!cut && w < words) continue;
          read_piece(r, done * 8, std::min(r.len, w * 8));
          done = w;
          if (cut) hook_();
        }
      } else {
        hook_();
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  void read_piece(const Request& r, uint32_t from, uint32_t to) {
    if (from >= to) return;
    Request piece = r;
    piece.addr.offset += from;
    piece.buf = static_cast<std::byte*>(r.buf) + from;
    piece.len = to - from;
    inner_->execute(std::span<Request>(&piece, 1));
  }
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
  std::mt19937_64 rng_{17};
};

// Fault injection for the per-request failure contract (fabric.h, "Per-request outcome"): runs
// each request of a batch on the inner transport one by one, except those `fail` picks, which are
// reported kFailed without being applied. `before` (optional) runs before each request, e.g. to
// release a lock from "another client" after N reads. Throws FabricError when a request failed,
// after setting every request's status, as the real transports do.
class FaultTransport final : public Transport {
 public:
  using Pick = std::function<bool(const Request&, uint64_t ordinal)>;
  FaultTransport(std::unique_ptr<Transport> inner, Pick fail, std::function<void(const Request&, uint64_t)> before = {})
      : inner_(std::move(inner)), fail_(std::move(fail)), before_(std::move(before)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    bool failed = false;
    std::vector<uint32_t> failed_nodes;
    auto failed_at = [&](uint32_t node) { return std::find(failed_nodes.begin(), failed_nodes.end(), node) != failed_nodes.end(); };
    for (Request& r : batch) {
      const uint64_t ordinal = next_++;
      if (before_) before_(r, ordinal);
      if (fail_ && fail_(r, ordinal)) {
        r.status = ReqStatus::kFailed;
        failed = true;
        failed_nodes.push_back(r.addr.node);
        ++injected_;
        continue;
      }
      if (r.fence && failed_at(r.addr.node)) {  // fabric.h: not performed behind a failed request to its node
        r.status = ReqStatus::kFailed;
        failed_nodes.push_back(r.addr.node);
        continue;
      }
      inner_->execute(std::span<Request>(&r, 1));
      r.status = ReqStatus::kOk;
      counters_.add(r);
    }
    if (failed) throw FabricError("fault transport: injected request failure");
  }
  uint64_t injected() const { return injected_; }
  uint64_t requests() const { return next_; }

 private:
  std::unique_ptr<Transport> inner_;
  Pick fail_;
  std::function<void(const Request&, uint64_t)> before_;
  uint64_t next_ = 0, injected_ = 0;
};

}  // namespace rdmahash::test
