// Probe lengths of find_or_put against Knuth's closed form (seed 001 Table 1 "Rt." column;
// seed 000 §3.3 E[X(R)]): after bulk-loading to load factor α, the mean number of chunks a
// find_or_put of a new key scans equals E[X(C)] for the first-empty-slot distribution, and the
// mean number of READs a get of a present key makes equals E[X(R)] for where present keys sit
// (model::LookupDistribution, Knuth's successful search).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "rdmahash/model.h"
#include "test_util.h"

namespace rdmahash {
namespace {

struct Case {
  double alpha;
  uint32_t chunk;
};

class ProbeLength : public testing::TestWithParam<Case> {};

TEST_P(ProbeLength, MeanChunksMatchKnuth) {
  const auto [alpha, chunk] = GetParam();
  LinearConfig c;
  c.home_slots = 1ULL << 21;
  c.tail_slots = 1ULL << 14;
  const uint64_t records = static_cast<uint64_t>(alpha * static_cast<double>(c.home_slots));
  auto fabric = make_local_fabric({c.region_bytes()});
  LinearShardLoader loader(c, 0, fabric->local_region(0));
  std::mt19937_64 rng(1234 + static_cast<uint64_t>(alpha * 100) + chunk);
  for (uint64_t i = 0; i < records; ++i) loader.insert(rng() >> 1, {});
  ASSERT_EQ(loader.records(), records);

  Client client(*fabric, c, test::probe(chunk, 1u << 16, 8));
  constexpr int kNewKeys = 4000;  // moves α by 0.2 %
  std::vector<uint64_t> keys;
  for (int i = 0; i < kNewKeys; ++i) keys.push_back(rng() >> 1);
  auto res = client.find_or_put_many(keys, {}, 16);
  double chunks = 0, sumsq = 0;
  for (const auto& r : res) {
    ASSERT_EQ(r.status, Status::kInserted);
    chunks += r.chunks;
    sumsq += static_cast<double>(r.chunks) * r.chunks;
  }
  const double measured = chunks / kNewKeys;
  // The tolerance comes from the sample: 5 standard errors of the mean (a flat ±10 % would hide a
  // 5 % bias at C = 32, where a new key almost always costs exactly one chunk). The inserts move α
  // from records/S to (records + kNewKeys)/S, so the model's value lies between the two ends.
  const double se = std::sqrt(std::max(0.0, sumsq / kNewKeys - measured * measured) / (kNewKeys - 1));
  const double lo = model::FirstEmptyDistribution(c.home_slots, records).expected_reads(chunk);
  const double hi = model::FirstEmptyDistribution(c.home_slots, records + kNewKeys).expected_reads(chunk);
  std::printf("alpha=%.2f C=%u: measured %.4f chunks per new key (se %.4f), E[X(C)] = %.4f..%.4f\n", alpha, chunk,
              measured, se, lo, hi);
  EXPECT_GE(measured, lo - 5 * se - 1e-9);
  EXPECT_LE(measured, hi + 5 * se + 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Knuth, ProbeLength,
                         testing::Values(Case{0.5, 8}, Case{0.5, 32}, Case{0.8, 8}, Case{0.8, 32}, Case{0.9, 8},
                                         Case{0.9, 32}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return "a" + std::to_string(static_cast<int>(i.param.alpha * 100)) + "_C" +
                                  std::to_string(i.param.chunk);
                         });

// Gets of loaded keys with reads of R slots: READs per get against LookupDistribution(M, N, 1).
class GetProbeLength : public testing::TestWithParam<Case> {};

TEST_P(GetProbeLength, MeanReadsMatchKnuthsSuccessfulSearch) {
  const auto [alpha, read_size] = GetParam();
  LinearConfig c;
  c.home_slots = 1ULL << 20;
  c.tail_slots = 1ULL << 14;
  const uint64_t records = static_cast<uint64_t>(alpha * static_cast<double>(c.home_slots));
  auto fabric = make_local_fabric({c.region_bytes()});
  LinearShardLoader loader(c, 0, fabric->local_region(0));
  std::mt19937_64 rng(4321 + static_cast<uint64_t>(alpha * 100) + read_size);
  std::vector<uint64_t> loaded;
  for (uint64_t i = 0; i < records; ++i) {
    loaded.push_back(rng() >> 1);
    loader.insert(loaded.back(), {});
  }
  ASSERT_EQ(loader.records(), records);

  Client client(*fabric, c, test::probe(8, 1u << 16, read_size));
  constexpr int kGets = 20000;
  std::vector<uint64_t> keys;
  for (int i = 0; i < kGets; ++i) keys.push_back(loaded[rng() % loaded.size()]);
  const auto res = client.get_many(keys, {}, 16);
  double reads = 0, sumsq = 0;
  for (const auto& r : res) {
    ASSERT_EQ(r.status, Status::kFound);
    reads += r.chunks;
    sumsq += static_cast<double>(r.chunks) * r.chunks;
  }
  const double measured = reads / kGets;
  const double se = std::sqrt(std::max(0.0, sumsq / kGets - measured * measured) / (kGets - 1));
  const double present = model::LookupDistribution(c.home_slots, records, 1.0).expected_reads(read_size);
  const double first_empty = model::FirstEmptyDistribution(c.home_slots, records).expected_reads(read_size);
  std::printf("alpha=%.2f R=%u: measured %.4f READs per get (se %.4f), present-key E[X(R)] = %.4f, first-empty %.4f\n",
              alpha, read_size, measured, se, present, first_empty);
  EXPECT_NEAR(measured, present, 5 * se + 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Knuth, GetProbeLength,
                         testing::Values(Case{0.5, 1}, Case{0.5, 4}, Case{0.8, 1}, Case{0.8, 8}, Case{0.9, 4},
                                         Case{0.9, 16}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return "a" + std::to_string(static_cast<int>(i.param.alpha * 100)) + "_R" +
                                  std::to_string(i.param.chunk);
                         });

}  // namespace
}  // namespace rdmahash
