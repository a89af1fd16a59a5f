// model/memory_limit.h — this machine's limit for random reads of memory, measured in the same run as
// the benchmark it is compared with (issue 30): how many random 8-byte loads per second one core
// can do on a region the size of the table, and how long one load takes when each depends on the
// one before.
//
// Why: a get on a table larger than the cache costs at least one cache miss (a TLB miss too on 4 KB
// pages) on the shard's memory; with direct access or an RDMA NIC that miss is the READ. The limit
// moves 10x with the machine's load (183-315 ns per dependent load quiet, 335-540 ns beside a
// compile), so a figure must draw the limit measured beside its own points, not a number from a
// document.
//
// What is measured, on an anonymous mapping of `bytes` (every page touched first, so no page fault
// lands in a measurement), each measurement repeated `rounds` times and the median kept:
//   * dependent: a pointer chase through one random cycle over all the region's 64-byte lines (a
//     shuffled order, each line linking to the next: a single cycle, so the chase never settles
//     into a subset that fits the cache); ns per load.
//   * batched: random 8-byte-aligned loads whose addresses come from a counter-based generator (not
//     from memory), `batch` at a time, each batch prefetched in full before any of it is read: the
//     misses of a batch overlap, as an engine's batch of READs can. Loads per second.
// Pages: `k4` advises the kernel against huge pages (MADV_NOHUGEPAGE); `kThp` asks for them
// (MADV_HUGEPAGE; the kernel may still give 4 KB pages: `pages` says what was asked, and
// `pages_given` what the kernel gave when the caller passes `inspect_pages`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <string>

namespace rdmahash::model {

enum class ProbePages { k4, kThp };

struct MemoryLimitOptions {
  uint64_t bytes = uint64_t{1} << 30;
  ProbePages pages = ProbePages::k4;
  uint32_t batch = 16;
  uint32_t rounds = 3;
  uint64_t dependent_loads = 0;  // per round (0: one per 4 lines, between 2^16 and 2^20)
  uint64_t batched_loads = 0;    // per round (0: 8 per line, between 2^20 and 2^23)
  uint64_t seed = 1;
  // Optional: called once on the probe's mapping after every page is touched, before any
  // measurement; returns what backs it ("thp", "4k", ...) and the fraction of it on huge pages.
  // A limit measured on 4 KB pages where THP was asked is lower than the machine's best: a row
  // compared with it looks better than it is.
  std::function<std::pair<std::string, double>(const void* p, uint64_t bytes)> inspect_pages;
};

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string pages;               // "4k" or "thp" (what was asked of the kernel)
  std::string pages_given;         // what inspect_pages said the kernel gave ("" without it)
  double huge_fraction = 0;        // of the mapping's resident bytes, on huge pages (inspect_pages)
  uint32_t batch = 0;
  double dependent_ns = 0;         // median ns per dependent load
  double batched_ops_per_s = 0;    // median random 8-byte loads per second, batches prefetched
  double seconds = 0;              // this measurement (MemoryProbe's first: its setup included)
};

// The probe's region, mapped, touched and linked once, so that the limit can be measured again on
// it: the bench measures it before a table's points and again after each point, because the limit
// moves (26.7 to 41.4 M loads/s between two probes of the same 1 GB a few minutes apart; 0.80-1.48x
// between probes seconds apart, issue 30) and a fraction of it means something only between the
// two. It also falls with the region's size on a KVM guest (55-58 M loads/s at 264 MiB, 25-29 at 1056 MiB):
// probe a region of the table's size. measure() runs `rounds` of both
// measurements; its `seconds` is that measure() alone (the first one's includes the setup).
// The constructor throws as measure_memory_limit.
class MemoryProbe {
 public:
  explicit MemoryProbe(const MemoryLimitOptions& o);
  ~MemoryProbe();
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;
  MemoryLimit measure();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One probe, measured once. Throws std::invalid_argument for bytes < 4096 or > 2^40, batch 0 or
// > 256, rounds 0, and std::runtime_error when the mapping cannot be made.
MemoryLimit measure_memory_limit(const MemoryLimitOptions& o);

// Fills `next` (next[i] = the index after i) with one random cycle through every index. Exposed for
// the test that the chase visits every line.
void random_cycle(std::span<uint32_t> next, uint64_t seed);

}  // namespace rdmahash::model
