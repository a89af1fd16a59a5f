// Probe lengths of find_or_put against Knuth's closed form (seed 001 Table 1 "Rt." column;
// seed 000 §3.3 E[X(R)]): after bulk-loading to load factor α, the mean number of chunks a
// find_or_put of a new key scans equals E[X(C)] for the first-empty-slot distribution.
#include <gtest/gtest.h>

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
  double chunks = 0;
  for (const auto& r : res) {
    ASSERT_EQ(r.status, Status::kInserted);
    chunks += r.chunks;
  }
  const double measured = chunks / kNewKeys;
  const model::FirstEmptyDistribution dist(c.home_slots, records);
  const double expected = dist.expected_reads(chunk);
  std::printf("alpha=%.2f C=%u: measured %.3f chunks per new key, E[X(C)] = %.3f\n", alpha, chunk, measured, expected);
  EXPECT_NEAR(measured, expected, 0.10 * expected);
}

INSTANTIATE_TEST_SUITE_P(Knuth, ProbeLength,
                         testing::Values(Case{0.5, 8}, Case{0.5, 32}, Case{0.8, 8}, Case{0.8, 32}, Case{0.9, 8},
                                         Case{0.9, 32}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return "a" + std::to_string(static_cast<int>(i.param.alpha * 100)) + "_C" +
                                  std::to_string(i.param.chunk);
                         });

}  // namespace
}  // namespace rdmahash
