// The memory-limit probe; what and why in model/memory_limit.h.
#include "model/memory_limit.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "common/hash.h"

namespace rdmahash::model {
namespace {

constexpr uint64_t kLine = 64;

// The probe's region, 2 MiB-aligned (a huge page can back it from its first byte) between
// inaccessible reserved bytes: its own mapping in /proc/self/smaps, never merged with a neighbour
// of the same advice, so what inspect_pages reads is the probe's pages alone.
class Mapping {
 public:
  Mapping(uint64_t bytes, ProbePages pages) : reserved_(bytes + 2 * kHuge) {
    void* r = ::mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
      throw std::runtime_error("memory-limit probe: cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
    base_ = static_cast<std::byte*>(r);
    const uintptr_t start = (reinterpret_cast<uintptr_t>(base_) + kHuge) & ~(kHuge - 1);  // a page or more before it, 2 MiB after
    p_ = reinterpret_cast<std::byte*>(start);
    if (::mprotect(p_, bytes, PROT_READ | PROT_WRITE) != 0) {
      const int e = errno;
      ::munmap(base_, reserved_);
      throw std::runtime_error("memory-limit probe: cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(e));
    }
    // Advice only: a kernel without THP ignores it; what was asked is reported.
    (void)::madvise(p_, bytes, pages == ProbePages::kThp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  }
  ~Mapping() { ::munmap(base_, reserved_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint64_t* words() const { return reinterpret_cast<uint64_t*>(p_); }

 private:
  static constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  std::byte* base_ = nullptr;  // the reservation
  std::byte* p_ = nullptr;     // the probe's bytes in it
  uint64_t reserved_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void random_cycle(std::span<uint32_t> next, uint64_t seed) {
  const uint64_t n = next.size();
  if (n == 0) return;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  uint64_t s = hash::mix64(seed ^ 0x6D656D6C696D6974ULL);
  for (uint64_t i = n - 1; i > 0; --i) {  // Fisher-Yates: a uniformly random order
    s = hash::mix64(s + 0x9E3779B97F4A7C15ULL);
    std::swap(order[i], order[hash::range(s, i + 1)]);
  }
  // Each index links to the next in that order, the last to the first: ONE cycle through all of
  // them (a random permutation used directly would have short cycles that stay in the cache).
  for (uint64_t i = 0; i < n; ++i) next[order[i]] = order[(i + 1) % n];
}

struct MemoryProbe::Impl {
  explicit Impl(const MemoryLimitOptions& opt)
      : o(opt), lines(o.bytes / kLine), words(lines * (kLine / 8)), m(lines * kLine, o.pages) {}
  MemoryLimitOptions o;
  uint64_t lines, words;
  Mapping m;
  MemoryLimit base;  // what every measure() reports besides the rates
  std::chrono::steady_clock::time_point setup_start;
  bool measured = false;
  uint64_t at = 0;  // where the chase stands
};

namespace {
const MemoryLimitOptions& checked(const MemoryLimitOptions& o) {
  if (o.bytes < 4096 || o.bytes > (uint64_t{1} << 40))
    throw std::invalid_argument("memory-limit probe: bytes must be in [4096, 2^40], got " + std::to_string(o.bytes));
  if (o.batch == 0 || o.batch > 256) throw std::invalid_argument("memory-limit probe: batch must be in [1, 256]");
  if (o.rounds == 0) throw std::invalid_argument("memory-limit probe: rounds must be at least 1");
  if (o.bytes / kLine > 0xFFFFFFFFULL) throw std::invalid_argument("memory-limit probe: at most 2^32 lines");
  return o;
}
}  // namespace

MemoryProbe::MemoryProbe(const MemoryLimitOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  impl_ = std::make_unique<Impl>(checked(o));
  Impl& p = *impl_;
  p.setup_start = t0;
  uint64_t* w = p.m.words();
  {
    std::vector<uint32_t> next(p.lines);
    random_cycle(next, o.seed);
    for (uint64_t i = 0; i < p.words; ++i) w[i] = i;  // touches every page
    for (uint64_t i = 0; i < p.lines; ++i) w[i * (kLine / 8)] = next[i];
  }
  MemoryLimit& r = p.base;
  r.bytes = p.lines * kLine;
  r.pages = o.pages == ProbePages::kThp ? "thp" : "4k";
  if (o.inspect_pages) std::tie(r.pages_given, r.huge_fraction) = o.inspect_pages(w, p.lines * kLine);
  r.batch = o.batch;
}

MemoryProbe::~MemoryProbe() = default;

MemoryLimit MemoryProbe::measure() {
  Impl& p = *impl_;
  const MemoryLimitOptions& o = p.o;
  const auto t0 = p.measured ? std::chrono::steady_clock::now() : p.setup_start;
  p.measured = true;
  const uint64_t* w = p.m.words();
  const uint64_t words = p.words;
  const uint64_t dep = o.dependent_loads ? o.dependent_loads : std::clamp<uint64_t>(p.lines / 4, 1u << 16, 1u << 20);
  const uint64_t bat = o.batched_loads ? o.batched_loads : std::clamp<uint64_t>(8 * p.lines, 1u << 20, 1u << 23);
  std::vector<double> dep_ns, bat_rate;
  uint64_t sink = 0;
  uint64_t at = p.at;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    auto t = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < dep; ++i) at = w[at * (kLine / 8)];  // each address from the last load
    dep_ns.push_back(seconds_since(t) * 1e9 / static_cast<double>(dep));
    sink += at;

    uint64_t ctr = hash::mix64(o.seed + round);
    uint64_t idx[256];
    t = std::chrono::steady_clock::now();
    for (uint64_t done = 0; done < bat; done += o.batch) {
      for (uint32_t k = 0; k < o.batch; ++k) {
        idx[k] = hash::range(hash::mix64(ctr++), words);
        __builtin_prefetch(&w[idx[k]]);
      }
      for (uint32_t k = 0; k < o.batch; ++k) sink += w[idx[k]];
    }
    const uint64_t loads = (bat + o.batch - 1) / o.batch * o.batch;
    bat_rate.push_back(static_cast<double>(loads) / seconds_since(t));
  }
  p.at = at;
  // Keep the loads: the sum goes through a volatile store the compiler cannot drop.
  volatile uint64_t keep = sink;
  (void)keep;
  MemoryLimit r = p.base;
  r.dependent_ns = median(dep_ns);
  r.batched_ops_per_s = median(bat_rate);
  r.seconds = seconds_since(t0);
  return r;
}

MemoryLimit measure_memory_limit(const MemoryLimitOptions& o) { return MemoryProbe(o).measure(); }

}  // namespace rdmahash::model
