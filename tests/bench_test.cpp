// The benchmark driver's own pieces: result serialization (what UCX ranks send to rank 0),
// option parsing, key generation.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <sstream>
#include <unordered_set>

#include "bench/options.h"
#include "bench/report.h"
#include "bench/sysinfo.h"
#include "bench/workload.h"
#include "rdmahash/table.h"
#include "rdmahash/ucx_fabric.h"
#include "common/hash.h"

namespace rdmahash::bench {
namespace {

TEST(ClientResult, SerializationRoundTripsEveryField) {
  ClientResult r;
  r.ops = 1; r.found = 2; r.inserted = 3; r.full = 4; r.not_found = 5; r.updated = 6; r.skipped = 7;
  r.errors = 8; r.value_mismatches = 9; r.round_trips = 10; r.reads = 11; r.writes = 12; r.cas = 13;
  r.faa = 14; r.rpcs = 15; r.bytes = 16; r.chunks = 17; r.matches = 18; r.read_size = 19; r.seconds = 2.5;
  r.resizes = 20; r.directory_depth = 21; r.erased = 22; r.persists = 23;
  r.cpu_ns = 24; r.multi_get_ops = 25; r.client_sleeps = 26; r.client_unspun_sleeps = 27; r.lines_read = 28;
  r.add_split_load(0.5);
  r.add_split_load(0.75);
  r.latency_ns = {100, 200, 300};
  const auto bytes = r.serialize();
  const ClientResult b = ClientResult::deserialize(bytes);
  EXPECT_EQ(b.ops, 1u); EXPECT_EQ(b.found, 2u); EXPECT_EQ(b.inserted, 3u); EXPECT_EQ(b.full, 4u);
  EXPECT_EQ(b.not_found, 5u); EXPECT_EQ(b.updated, 6u); EXPECT_EQ(b.skipped, 7u); EXPECT_EQ(b.errors, 8u);
  EXPECT_EQ(b.value_mismatches, 9u); EXPECT_EQ(b.round_trips, 10u); EXPECT_EQ(b.reads, 11u);
  EXPECT_EQ(b.writes, 12u); EXPECT_EQ(b.cas, 13u); EXPECT_EQ(b.faa, 14u); EXPECT_EQ(b.rpcs, 15u);
  EXPECT_EQ(b.bytes, 16u); EXPECT_EQ(b.chunks, 17u); EXPECT_EQ(b.matches, 18u); EXPECT_EQ(b.read_size, 19u);
  EXPECT_EQ(b.resizes, 20u); EXPECT_EQ(b.directory_depth, 21u); EXPECT_EQ(b.erased, 22u);
  EXPECT_EQ(b.persists, 23u);
  EXPECT_EQ(b.cpu_ns, 24u); EXPECT_EQ(b.multi_get_ops, 25u); EXPECT_EQ(b.client_sleeps, 26u);
  EXPECT_EQ(b.client_unspun_sleeps, 27u);
  EXPECT_EQ(b.lines_read, 28u);
  EXPECT_EQ(b.split_loads, 2u); EXPECT_EQ(b.split_load_ppm_sum, 1250000u);
  EXPECT_EQ(b.split_load_ppm_min, 500000u); EXPECT_EQ(b.split_load_ppm_max, 750000u);
  EXPECT_EQ(b.seconds, 2.5);
  EXPECT_EQ(b.latency_ns, r.latency_ns);
  auto truncated = bytes;
  truncated.pop_back();
  EXPECT_THROW(ClientResult::deserialize(truncated), InvalidArgument);
}

TEST(BenchOptions, ReadSizesAndDistributionsParse) {
  EXPECT_EQ(parse_read_size("16").slots, 16u);
  EXPECT_EQ(parse_read_size("fixed:3").slots, 3u);
  EXPECT_EQ(parse_read_size("model").kind, ReadSizeSpec::Kind::kModel);
  EXPECT_EQ(parse_read_size("cluster").text(), "cluster");
  for (const char* bad : {"0", "-1", "fixed:", "x", "70000", "8x"}) EXPECT_THROW(parse_read_size(bad), InvalidArgument) << bad;
  EXPECT_EQ(parse_distribution("uniform"), 0.0);
  EXPECT_DOUBLE_EQ(parse_distribution("zipf:0.99"), 0.99);
  for (const char* bad : {"zipf", "zipf:", "zipf:1", "zipf:-2", "normal"}) EXPECT_THROW(parse_distribution(bad), InvalidArgument) << bad;
  BenchOptions o;
  EXPECT_EQ(o.error(), "");
  o.load_factors = {0.5, 1.0};
  EXPECT_NE(o.error().find("load-factor"), std::string::npos);
}

TEST(KeySpace, IsABijectionOntoTheKeyDomain) {
  for (unsigned bits : {32u, 63u, 64u}) {
    KeySpace ks(1 << 16, bits, 7);
    std::unordered_set<uint64_t> seen;
    for (uint64_t i = 0; i < (1 << 16); ++i) {
      const uint64_t k = ks.key(i);
      if (bits < 64) {
        EXPECT_LT(k, 1ULL << bits);
      }
      EXPECT_TRUE(seen.insert(k).second) << "collision at " << i;
    }
  }
}

// key() computes its constants once; the keys are those of the formula (every rank, every build).
TEST(KeySpace, KeysFollowTheFormula) {
  for (unsigned bits : {32u, 63u, 64u})
    for (uint64_t seed : {1ULL, 7ULL, 0x1234567ULL}) {
      KeySpace ks(1000, bits, seed);
      uint64_t rounds[3], s = seed;
      for (uint64_t& r : rounds) r = s = hash::mix64(s + 0x9E3779B97F4A7C15ULL);
      const uint64_t mask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1;
      for (uint64_t i : {0ULL, 1ULL, 999ULL, 123456789ULL}) {
        uint64_t x = i & mask;
        for (const uint64_t c : rounds) {
          x = (x + c) & mask;
          x ^= x >> (bits / 2 + 1);
          x = (x * ((c << 1) | 1)) & mask;
        }
        EXPECT_EQ(ks.key(i), x) << bits << " " << seed << " " << i;
      }
    }
}

// A benchmark get's value is checked where it lies, and a wrong one is counted.
TEST(GetCheck, CountsOutcomesAndWrongValues) {
  ClientResult r;
  GetCheck check(&r, 12);
  std::vector<std::byte> v(12);
  fill_value(42, v);
  OpResult found;
  found.status = Status::kFound;
  found.chunks = 2;
  found.matches = 1;
  check.on_get(42, found, v);
  EXPECT_EQ(r.value_mismatches, 0u);
  v[11] ^= std::byte{1};  // the last, partial word
  check.on_get(42, found, v);
  EXPECT_EQ(r.value_mismatches, 1u);
  fill_value(43, v);
  check.on_get(42, found, v);  // another key's value
  EXPECT_EQ(r.value_mismatches, 2u);
  OpResult missing;
  missing.chunks = 1;
  check.on_get(7, missing, {});
  EXPECT_EQ(r.found, 3u);
  EXPECT_EQ(r.not_found, 1u);
  EXPECT_EQ(r.chunks, 7u);
  EXPECT_EQ(r.matches, 3u);
  EXPECT_EQ(r.value_mismatches, 2u);
  GetCheck no_values(&r, 0);  // a set: nothing to check
  no_values.on_get(9, found, {});
  EXPECT_EQ(r.value_mismatches, 2u);
  EXPECT_EQ(r.found, 4u);
}

// Request coalescing puts CAS/FAA in a message (the memory node's CPU atomics) only when no
// transport of the context may perform atomics on a NIC (ucx_fabric.cpp, coalesce_atomics).
TEST(UcxCoalescing, AtomicsOnlyWhereEveryTransportUsesCpuAtomics) {
  EXPECT_TRUE(cpu_atomics_only({"self", "tcp"}));
  EXPECT_TRUE(cpu_atomics_only({"self", "posix", "sysv", "cma", "tcp"}));
  EXPECT_TRUE(cpu_atomics_only({}));
  EXPECT_FALSE(cpu_atomics_only({"self", "tcp", "rc_mlx5"}));
  EXPECT_FALSE(cpu_atomics_only({"rc_verbs"}));
  EXPECT_FALSE(cpu_atomics_only({"posix", "dc_mlx5"}));
  EXPECT_FALSE(cpu_atomics_only({"ud_verbs", "tcp"}));
}


// region_pages (JSON region_pages) reads /proc/self/smaps: every mapping the range overlaps, the
// hugetlb pages that Rss leaves out, and THP's AnonHugePages / ShmemPmdMapped.
TEST(RegionPages, ClassifiesMappingsFromSmapsText) {
  const std::string smaps =
      "10000000-10400000 rw-p 00000000 00:00 0 \n"
      "Size:               4096 kB\nKernelPageSize:        4 kB\nRss:                4096 kB\n"
      "AnonHugePages:      2048 kB\nShmemPmdMapped:        0 kB\nShared_Hugetlb:        0 kB\n"
      "Private_Hugetlb:       0 kB\nVmFlags: rd wr mr mw me ac hg\n"
      "20000000-20400000 rw-s 00000000 00:0f 42                     /SYSV00000000 (deleted)\n"
      "Size:               4096 kB\nKernelPageSize:     2048 kB\nRss:                   0 kB\n"
      "AnonHugePages:         0 kB\nShared_Hugetlb:     4096 kB\nPrivate_Hugetlb:       0 kB\nVmFlags: rd wr sh ht\n"
      "30000000-30100000 rw-p 00000000 00:00 0 \n"
      "Size:               1024 kB\nKernelPageSize:        4 kB\nRss:                1024 kB\n"
      "AnonHugePages:         0 kB\nShared_Hugetlb:        0 kB\nPrivate_Hugetlb:       0 kB\nVmFlags: rd wr nh\n";
  auto at = [&](uintptr_t addr, uint64_t bytes) {
    std::istringstream in(smaps);
    return region_pages_in(in, reinterpret_cast<const void*>(addr), bytes);
  };
  PageReport thp = at(0x10000000, 0x400000);
  EXPECT_EQ(thp.kind, "thp");  // half of the resident bytes in THP: at least half counts
  EXPECT_EQ(thp.page_kb, 4u);
  EXPECT_DOUBLE_EQ(thp.huge_fraction, 0.5);
  PageReport huge = at(0x20001000, 4096);
  EXPECT_EQ(huge.kind, "hugetlb");
  EXPECT_EQ(huge.page_kb, 2048u);
  EXPECT_DOUBLE_EQ(huge.huge_fraction, 1.0);
  PageReport small = at(0x30000000, 0x100000);
  EXPECT_EQ(small.kind, "4k");
  EXPECT_DOUBLE_EQ(small.huge_fraction, 0.0);
  PageReport all = at(0x10300000, 0x20000000);  // overlaps all three
  EXPECT_EQ(all.kind, "hugetlb");
  EXPECT_DOUBLE_EQ(all.huge_fraction, (2048.0 + 4096.0) / (4096.0 + 4096.0 + 1024.0));
  EXPECT_EQ(at(0x10400000, 0x1000).kind, "");  // between mappings: nothing
  EXPECT_EQ(at(0x40000000, 0x1000).kind, "");
}

// On this process's own memory: a region advised MADV_NOHUGEPAGE is 4 KB pages, whatever THP's mode.
TEST(RegionPages, NoHugePageAdviceIsReportedAsSmallPages) {
  const size_t bytes = size_t{8} << 20;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(::madvise(p, bytes, MADV_NOHUGEPAGE), 0);
  std::memset(p, 1, bytes);
  const PageReport r = region_pages(p, bytes);
  EXPECT_EQ(r.kind, "4k");
  EXPECT_EQ(r.page_kb, 4u);
  EXPECT_DOUBLE_EQ(r.huge_fraction, 0.0);
  ::munmap(p, bytes);
}

}  // namespace
}  // namespace rdmahash::bench
