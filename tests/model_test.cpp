// Tests for the variable read size model (include/rdmahash/model.h, seed 000 §3).
#include "rdmahash/model.h"
#include "model/memory_limit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

using rdmahash::model::c_with_cluster;
using rdmahash::model::CostParams;
using rdmahash::model::evaluate_read_size;
using rdmahash::model::expected_reads_with_cluster;
using rdmahash::model::FirstEmptyDistribution;
using rdmahash::model::LookupDistribution;
using rdmahash::model::max_read_size_by_bandwidth;
using rdmahash::model::optimal_read_size;
using rdmahash::model::optimal_read_size_with_cluster;
using rdmahash::model::paper_cost_params;
using rdmahash::model::read_cost_ns;
using rdmahash::model::ReadSizeChoice;

constexpr std::uint64_t kPaperRecords = std::uint64_t{120} << 20;  // seed 000 §5.1

std::uint64_t slots_for(std::uint64_t records, double load_factor) {
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(records) / load_factor));
}

// Knuth's exact unsuccessful-search cost C'_N = (1 + Q_1(M, N)) / 2,
// Q_1(M, N) = Σ_{k>=0} (k+1) · N(N−1)…(N−k+1) / M^k.
double knuth_unsuccessful_exact(std::uint64_t M, std::uint64_t N) {
  double q = 0.0, term = 1.0;
  for (std::uint64_t k = 0; k <= N; ++k) {
    q += static_cast<double>(k + 1) * term;
    term *= static_cast<double>(N - k) / static_cast<double>(M);
    if (term < 1e-300) break;
  }
  return 0.5 * (1.0 + q);
}

double knuth_unsuccessful_asymptotic(double alpha) {
  return 0.5 * (1.0 + 1.0 / ((1.0 - alpha) * (1.0 - alpha)));
}

// Offsets of the first empty slot from every start position of a circular table.
std::vector<std::uint32_t> first_empty_offsets(const std::vector<bool>& occupied) {
  const std::size_t M = occupied.size();
  std::size_t empty = 0;
  while (occupied[empty]) ++empty;  // N < M, so an empty slot exists
  std::vector<std::uint32_t> off(M, 0);
  for (std::size_t i = 1; i <= M; ++i) {
    const std::size_t s = (empty + M - i) % M;
    off[s] = occupied[s] ? off[(s + 1) % M] + 1 : 0;
  }
  return off;
}

// Inserts a key with home slot h; returns the slot it took.
std::size_t insert_linear(std::vector<bool>& occupied, std::size_t h) {
  const std::size_t M = occupied.size();
  while (occupied[h]) h = (h + 1) % M;  // wrap-around, as in Knuth's circular model
  occupied[h] = true;
  return h;
}

// Statistics of simulated tables, one sample per table: the mean offset, the mean READs at R = 4
// and the fraction at each offset k < kFirst. A distribution matches them when each lies within 5
// standard errors of the across-table mean.
class TableStats {
 public:
  static constexpr std::size_t kFirst = 5;
  void add_offset(std::size_t k) {
    stat_[0] += static_cast<double>(k);
    stat_[1] += static_cast<double>(k / 4 + 1);
    if (k < kFirst) stat_[2 + k] += 1.0;
  }
  // Ends a table whose `count` offsets were added.
  void end_table(std::size_t count) {
    for (std::size_t s = 0; s < stat_.size(); ++s) {
      const double v = stat_[s] / static_cast<double>(count);
      sum_[s] += v;
      sumsq_[s] += v * v;
      stat_[s] = 0.0;
    }
    ++tables_;
  }
  void expect_matches(const rdmahash::model::OffsetDistribution& d) const {
    std::vector<double> model = {d.mean_offset(), d.expected_reads(4)};
    for (std::size_t k = 0; k < kFirst; ++k) model.push_back(d.p(k));
    for (std::size_t s = 0; s < model.size(); ++s) {
      const double mean = sum_[s] / tables_;
      const double var = std::max(0.0, sumsq_[s] / tables_ - mean * mean);
      const double se = std::sqrt(var / (tables_ - 1));
      EXPECT_NEAR(mean, model[s], 5.0 * se + 1e-12) << "statistic " << s << " (se " << se << ")";
    }
  }

 private:
  std::vector<double> stat_ = std::vector<double>(kFirst + 2, 0.0);
  std::vector<double> sum_ = std::vector<double>(kFirst + 2, 0.0);
  std::vector<double> sumsq_ = std::vector<double>(kFirst + 2, 0.0);
  int tables_ = 0;
};

// ------------------------------------------------------------------------------------------
// The distribution P_k
// ------------------------------------------------------------------------------------------

TEST(FirstEmptyDistribution, ProbabilitiesSumToOne) {
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> cases = {
      {1, 0},
      {10, 0},
      {10, 9},
      {1000, 1},
      {1000, 500},
      {1000, 950},
      {1000, 998},
      {1000, 999},
      {std::uint64_t{1} << 20, 943718},  // α = 0.9
      {slots_for(kPaperRecords, 0.95), kPaperRecords},
      {std::uint64_t{1} << 34, std::uint64_t{1} << 33},
      {std::uint64_t{1} << 34, static_cast<std::uint64_t>(0.95 * 17179869184.0)},
  };
  for (const auto& [M, N] : cases) {
    SCOPED_TRACE("M = " + std::to_string(M) + ", N = " + std::to_string(N));
    const FirstEmptyDistribution d(M, N);
    double sum = 0.0;
    for (std::uint64_t k = 0; k <= d.cutoff(); ++k) {
      ASSERT_GE(d.p(k), 0.0);
      sum += d.p(k);
    }
    EXPECT_NEAR(sum, 1.0, 1e-9);
    EXPECT_NEAR(d.c(d.cutoff() + 1), 1.0, 1e-9);
    EXPECT_NEAR(d.c(std::numeric_limits<std::uint64_t>::max()), 1.0, 1e-9);
    EXPECT_EQ(d.c(0), 0.0);
    EXPECT_EQ(d.p(d.cutoff() + 1), 0.0);
    EXPECT_LE(d.cutoff(), N);
    // P_0 = 1 − N/M by definition; P is non-increasing (P_k − P_{k−1} = −h_{k−1} <= 0, Eq. 8).
    EXPECT_NEAR(d.p(0), 1.0 - static_cast<double>(N) / static_cast<double>(M), 1e-12);
    for (std::uint64_t k = 1; k <= std::min<std::uint64_t>(d.cutoff(), 5000); ++k) {
      ASSERT_LE(d.p(k), d.p(k - 1) * (1 + 1e-12));
      ASSERT_NEAR(d.c(k) + d.tail(k), 1.0, 1e-9);
    }
  }
}

TEST(FirstEmptyDistribution, NearlyFullTableIsUniform) {
  // One empty slot: the first empty slot is equally likely at every offset 0..N.
  const FirstEmptyDistribution d(1000, 999);
  for (std::uint64_t k : {0, 1, 500, 999}) EXPECT_NEAR(d.p(k), 1e-3, 1e-15);
  EXPECT_EQ(d.p(1000), 0.0);
  EXPECT_NEAR(d.mean_first_empty(), 499.5, 1e-9);
}

// Exact check of Knuth's formula and of the indexing convention: enumerate all M^N hash
// sequences of a tiny circular table, insert with linear probing and histogram the offset of the
// first empty slot from every start position.
TEST(FirstEmptyDistribution, MatchesExhaustiveEnumeration) {
  for (const auto& [M, N] : std::vector<std::pair<std::size_t, std::size_t>>{
           {7, 0}, {7, 1}, {7, 3}, {7, 5}, {7, 6}, {8, 6}}) {
    SCOPED_TRACE("M = " + std::to_string(M) + ", N = " + std::to_string(N));
    std::vector<double> count(M, 0.0);
    std::vector<std::size_t> seq(N, 0);
    double sequences = 0.0;
    for (;;) {
      std::vector<bool> occ(M, false);
      for (std::size_t h : seq) insert_linear(occ, h);
      for (std::uint32_t k : first_empty_offsets(occ)) count[k] += 1.0;
      sequences += 1.0;
      std::size_t i = 0;  // next sequence, base M
      while (i < N && ++seq[i] == M) seq[i++] = 0;
      if (i == N) break;
    }
    const FirstEmptyDistribution d(M, N);
    for (std::size_t k = 0; k < M; ++k) {
      EXPECT_NEAR(d.p(k), count[k] / (sequences * static_cast<double>(M)), 1e-12) << "k = " << k;
    }
  }
}

TEST(FirstEmptyDistribution, ExpectedReadsOfOneSlotIsKnuthsUnsuccessfulSearch) {
  // Exact, finite M.
  for (const auto& [M, N] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {1000, 0}, {1000, 500}, {1000, 900}, {1000, 990}, {1000, 999},
           {std::uint64_t{1} << 27, static_cast<std::uint64_t>(0.9 * 134217728.0)}}) {
    SCOPED_TRACE("M = " + std::to_string(M) + ", N = " + std::to_string(N));
    const FirstEmptyDistribution d(M, N);
    const double exact = knuth_unsuccessful_exact(M, N);
    EXPECT_NEAR(d.expected_reads(1), exact, 1e-10 * exact);
    EXPECT_NEAR(d.mean_first_empty(), d.expected_reads(1) - 1.0, 1e-9 * exact);
  }
  // Asymptotic (1 + 1/(1−α)²)/2 for a large table, within 1%.
  const std::uint64_t M = std::uint64_t{1} << 27;
  for (double alpha : {0.5, 0.8, 0.9}) {
    const FirstEmptyDistribution d(M, static_cast<std::uint64_t>(alpha * static_cast<double>(M)));
    const double knuth = knuth_unsuccessful_asymptotic(alpha);
    EXPECT_NEAR(d.expected_reads(1), knuth, 0.01 * knuth) << "alpha = " << alpha;
  }
}

TEST(FirstEmptyDistribution, ExpectedReadsMatchesEquations4And5) {
  const FirstEmptyDistribution d(5000, 4000);
  for (std::uint64_t R : {1, 2, 3, 7, 16, 64}) {
    double direct = 0.0;  // Σ_i i · (C_{iR} − C_{(i−1)R})
    for (std::uint64_t i = 1; (i - 1) * R <= d.cutoff(); ++i) {
      direct += static_cast<double>(i) * (d.c(i * R) - d.c((i - 1) * R));
    }
    EXPECT_NEAR(d.expected_reads(R), direct, 1e-9) << "R = " << R;
  }
}

TEST(FirstEmptyDistribution, ExpectedReadsNonIncreasingInReadSize) {
  for (double alpha : {0.25, 0.5, 0.8, 0.95}) {
    const FirstEmptyDistribution d(slots_for(kPaperRecords, alpha), kPaperRecords);
    double prev = d.expected_reads(1);
    for (std::uint64_t R = 2; R <= 1000; ++R) {
      const double e = d.expected_reads(R);
      ASSERT_LE(e, prev + 1e-12) << "alpha = " << alpha << ", R = " << R;
      ASSERT_GE(e, 1.0);
      prev = e;
    }
    EXPECT_DOUBLE_EQ(d.expected_reads(d.cutoff() + 1), 1.0);
  }
}

// Agreement with simulation: random circular tables of M = 1000 slots filled by linear probing
// with wrap-around; from every start position, the distance to the first empty slot. The
// tolerance is 5 standard errors of the across-table means (the RNG seed is fixed).
TEST(FirstEmptyDistribution, MatchesSimulatedTables) {
  constexpr std::size_t M = 1000;
  constexpr int kTables = 3000;
  std::mt19937_64 rng(0x5eed000);
  for (double alpha : {0.5, 0.8, 0.9}) {
    SCOPED_TRACE("alpha = " + std::to_string(alpha));
    const std::size_t N = static_cast<std::size_t>(alpha * M);
    TableStats stats;
    for (int t = 0; t < kTables; ++t) {
      std::vector<bool> occ(M, false);
      for (std::size_t i = 0; i < N; ++i) insert_linear(occ, static_cast<std::size_t>(rng() % M));
      for (std::uint32_t k : first_empty_offsets(occ)) stats.add_offset(k);
      stats.end_table(M);
    }
    stats.expect_matches(FirstEmptyDistribution(M, N));
  }
}

// A 2^27-slot table costs work proportional to the cutoff, not to M (what makes it fast; no
// wall-clock assertion): the tail beyond the cutoff is negligible and the mean is Knuth's.
TEST(FirstEmptyDistribution, LargeTableIsTruncatedAtACutoff) {
  const std::uint64_t M = std::uint64_t{1} << 27;
  const FirstEmptyDistribution d(M, static_cast<std::uint64_t>(0.95 * static_cast<double>(M)));
  EXPECT_LT(d.cutoff(), std::uint64_t{200000});
  EXPECT_LT(d.tail(d.cutoff()), 1e-12);
  EXPECT_NEAR(d.c(d.cutoff()), 1.0, 1e-9);
  EXPECT_NEAR(d.expected_reads(1), knuth_unsuccessful_asymptotic(0.95), 0.01 * 200.5);
}

TEST(FirstEmptyDistribution, InvalidInputsThrow) {
  EXPECT_THROW(FirstEmptyDistribution(0, 0), std::invalid_argument);
  EXPECT_THROW(FirstEmptyDistribution(100, 100), std::invalid_argument);
  EXPECT_THROW(FirstEmptyDistribution(100, 101), std::invalid_argument);
  EXPECT_THROW(FirstEmptyDistribution(std::uint64_t{1} << 60, 1), std::invalid_argument);
  const FirstEmptyDistribution d(100, 50);
  EXPECT_THROW(d.expected_reads(0), std::invalid_argument);
  // Load factor 1 − 2^-20 in a 2^40-slot table needs more than kMaxSupport offsets.
  EXPECT_THROW(FirstEmptyDistribution(std::uint64_t{1} << 40,
                                      (std::uint64_t{1} << 40) - (std::uint64_t{1} << 20)),
               std::domain_error);
}

// ------------------------------------------------------------------------------------------
// Where a get stops: LookupDistribution (present keys stop at the key)
// ------------------------------------------------------------------------------------------

// Knuth's exact successful-search cost C_N = (1 + Q_0(M, N−1)) / 2,
// Q_0(M, n) = Σ_{k>=0} n(n−1)…(n−k+1) / M^k.
double knuth_successful_exact(std::uint64_t M, std::uint64_t N) {
  const std::uint64_t n = N - 1;
  double q = 0.0, term = 1.0;
  for (std::uint64_t k = 0; k <= n; ++k) {
    q += term;
    term *= static_cast<double>(n - k) / static_cast<double>(M);
    if (term < 1e-300) break;
  }
  return 0.5 * (1.0 + q);
}

TEST(LookupDistribution, AbsentLookupsAreTheFirstEmptyDistribution) {
  const FirstEmptyDistribution d(5000, 4000);
  const LookupDistribution l(5000, 4000, 0.0);
  ASSERT_EQ(l.cutoff(), d.cutoff());
  for (std::uint64_t k = 0; k <= d.cutoff(); ++k) ASSERT_EQ(l.p(k), d.p(k)) << "k = " << k;
  for (std::uint64_t R : {1, 3, 8}) EXPECT_EQ(l.expected_reads(R), d.expected_reads(R));
}

TEST(LookupDistribution, OneSlotReadsAreKnuthsSuccessfulSearch) {
  // Exact sum (N <= kExactRecords) and the quadrature (above), finite M.
  for (const auto& [M, N] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {1000, 1}, {1000, 500}, {1000, 900}, {1000, 999}, {5000, 4096},
           {20000, 16000}, {std::uint64_t{1} << 27, static_cast<std::uint64_t>(0.5 * 134217728.0)},
           {std::uint64_t{1} << 27, static_cast<std::uint64_t>(0.9 * 134217728.0)}}) {
    SCOPED_TRACE("M = " + std::to_string(M) + ", N = " + std::to_string(N));
    const LookupDistribution d(M, N, 1.0);
    const double exact = knuth_successful_exact(M, N);
    const double tolerance = N <= LookupDistribution::kExactRecords ? 1e-10 : 1e-6;
    EXPECT_NEAR(d.expected_reads(1), exact, tolerance * exact);
    EXPECT_NEAR(d.mean_offset(), d.expected_reads(1) - 1.0, 1e-9 * exact);
    double sum = 0.0;
    for (std::uint64_t k = 0; k <= d.cutoff(); ++k) sum += d.p(k);
    EXPECT_NEAR(sum, 1.0, 1e-9);
  }
  // Asymptotic (1 + 1/(1−α))/2, within 0.1 %.
  const std::uint64_t M = std::uint64_t{1} << 27;
  for (double alpha : {0.5, 0.8, 0.9}) {
    const LookupDistribution d(M, static_cast<std::uint64_t>(alpha * static_cast<double>(M)), 1.0);
    const double knuth = 0.5 * (1.0 + 1.0 / (1.0 - alpha));
    EXPECT_NEAR(d.expected_reads(1), knuth, 1e-3 * knuth) << "alpha = " << alpha;
  }
}

// The quadrature against the exact mixture (1/N) Σ_n P_k(M, n), for every R the model searches:
// 1e-6 (relative) up to load 0.95; a full table (N = M − 1, 3e-5 measured) gets 1e-4.
TEST(LookupDistribution, QuadratureMatchesTheExactMixture) {
  for (const auto& [M, N] :
       std::vector<std::pair<std::uint64_t, std::uint64_t>>{{20000, 16000}, {20000, 19000}, {5000, 4999}}) {
    const double tolerance = N == M - 1 ? 1e-4 : 1e-6;
    SCOPED_TRACE("M = " + std::to_string(M) + ", N = " + std::to_string(N));
    ASSERT_GT(N, LookupDistribution::kExactRecords);
    std::vector<double> exact;
    for (std::uint64_t n = 0; n < N; ++n) {
      const FirstEmptyDistribution d(M, n);
      if (exact.size() < d.cutoff() + 1) exact.resize(d.cutoff() + 1, 0.0);
      for (std::uint64_t k = 0; k <= d.cutoff(); ++k) exact[k] += d.p(k) / static_cast<double>(N);
    }
    const LookupDistribution d(M, N, 1.0);
    for (std::uint64_t R : {1, 2, 4, 8, 16, 64, 256}) {
      double e = 1.0;  // Σ_{i≥0} Pr[k ≥ iR]
      for (std::uint64_t i = 1; i * R < exact.size(); ++i)
        for (std::uint64_t k = i * R; k < exact.size(); ++k) e += exact[k];
      EXPECT_NEAR(d.expected_reads(R), e, tolerance * e) << "R = " << R;
    }
  }
}

TEST(LookupDistribution, MixIsLinearInThePresentFraction) {
  const LookupDistribution absent(5000, 4000, 0.0), present(5000, 4000, 1.0), mix(5000, 4000, 0.3);
  EXPECT_DOUBLE_EQ(mix.present_fraction(), 0.3);
  for (std::uint64_t R : {1, 4, 16}) {
    EXPECT_NEAR(mix.expected_reads(R), 0.3 * present.expected_reads(R) + 0.7 * absent.expected_reads(R), 1e-12);
    EXPECT_LT(present.expected_reads(R), absent.expected_reads(R));
  }
}

// Simulation: circular tables of M = 1000 slots filled by linear probing; every key's offset from
// its home slot. Tolerance 5 standard errors of the across-table means.
TEST(LookupDistribution, MatchesSimulatedTables) {
  constexpr std::size_t M = 1000;
  constexpr int kTables = 3000;
  std::mt19937_64 rng(0x5eed002);
  for (double alpha : {0.5, 0.8, 0.9}) {
    SCOPED_TRACE("alpha = " + std::to_string(alpha));
    const std::size_t N = static_cast<std::size_t>(alpha * M);
    TableStats stats;
    for (int t = 0; t < kTables; ++t) {
      std::vector<bool> occ(M, false);
      for (std::size_t i = 0; i < N; ++i) {
        const std::size_t home = static_cast<std::size_t>(rng() % M);
        stats.add_offset((insert_linear(occ, home) + M - home) % M);
      }
      stats.end_table(N);
    }
    stats.expect_matches(LookupDistribution(M, N, 1.0));
  }
}

TEST(LookupDistribution, InvalidInputsThrow) {
  EXPECT_THROW(LookupDistribution(100, 50, -0.1), std::invalid_argument);
  EXPECT_THROW(LookupDistribution(100, 50, 1.5), std::invalid_argument);
  EXPECT_THROW(LookupDistribution(100, 50, std::nan("")), std::invalid_argument);
  EXPECT_THROW(LookupDistribution(100, 100, 1.0), std::invalid_argument);
  EXPECT_THROW(LookupDistribution(0, 0, 1.0), std::invalid_argument);
  const LookupDistribution empty(100, 0, 1.0);  // no present key: every lookup stops at offset 0
  EXPECT_DOUBLE_EQ(empty.expected_reads(1), 1.0);
}

// ------------------------------------------------------------------------------------------
// Cost model and R*
// ------------------------------------------------------------------------------------------

TEST(CostModel, ReadCostAndBandwidthBound) {
  const CostParams p = paper_cost_params(8.0);
  EXPECT_DOUBLE_EQ(read_cost_ns(p, 1), 1290.0 + 0.64);
  EXPECT_DOUBLE_EQ(read_cost_ns(p, 100), 1290.0 + 64.0);
  // l·(h+w)/(w·ρ0·h) with l = 12.5e9 B/s, ρ0 = 87.17e6/s, h = 30 B.
  EXPECT_EQ(max_read_size_by_bandwidth(p), 22u);                      // 22.70
  EXPECT_EQ(max_read_size_by_bandwidth(paper_cost_params(5.0)), 33u);   // 33.46
  EXPECT_EQ(max_read_size_by_bandwidth(paper_cost_params(32.0)), 9u);   // 9.26
  EXPECT_EQ(max_read_size_by_bandwidth(paper_cost_params(128.0)), 5u);  // 5.90
  for (double w : {5.0, 8.0, 32.0, 128.0}) {
    const CostParams q = paper_cost_params(w);
    const std::uint64_t r = max_read_size_by_bandwidth(q);
    const double rho_hat = q.rho0_ops_per_s * q.header_bytes / (q.header_bytes + q.slot_bytes);
    EXPECT_LE(static_cast<double>(r) * w * rho_hat, q.link_bytes_per_s);
    EXPECT_GT(static_cast<double>(r + 1) * w * rho_hat, q.link_bytes_per_s);
  }
  // An exactly integral bound is kept: l chosen so that l·(h+w)/(w·ρ0·h) = 10.
  CostParams exact{1000.0, 0.1, 1e6, 0.0, 10.0, 10.0};
  exact.link_bytes_per_s = 10.0 * 10.0 * 1e6 * 10.0 / 20.0;
  EXPECT_EQ(max_read_size_by_bandwidth(exact), 10u);
}

TEST(CostModel, ConstrainedNeverExceedsBandwidthBound) {
  for (double w : {5.0, 8.0, 32.0, 128.0}) {
    const CostParams p = paper_cost_params(w);
    const std::uint64_t bound = max_read_size_by_bandwidth(p);
    for (double alpha : {0.25, 0.5, 0.65, 0.8, 0.9, 0.95}) {
      const FirstEmptyDistribution d(slots_for(kPaperRecords, alpha), kPaperRecords);
      const ReadSizeChoice c = optimal_read_size(d, p, true);
      const ReadSizeChoice u = optimal_read_size(d, p, false);
      EXPECT_TRUE(c.constrained);
      EXPECT_FALSE(u.constrained);
      EXPECT_EQ(c.max_read_size_by_bandwidth, bound);
      EXPECT_GE(c.read_size, 1u);
      EXPECT_LE(c.read_size, bound);
      EXPECT_FALSE(c.exceeds_bandwidth);
      EXPECT_LE(u.cost_ns, c.cost_ns);
      if (u.read_size <= bound) EXPECT_EQ(u.read_size, c.read_size);
      else EXPECT_EQ(c.read_size, bound);  // cost decreases up to the unconstrained optimum here
      // The result is the argmin of the evaluated costs.
      for (std::uint64_t R = 1; R <= bound; ++R) {
        ASSERT_GE(evaluate_read_size(d, p, R).cost_ns, c.cost_ns);
      }
      const ReadSizeChoice e = evaluate_read_size(d, p, c.read_size);
      EXPECT_DOUBLE_EQ(e.cost_ns, c.cost_ns);
      EXPECT_DOUBLE_EQ(e.expected_reads, c.expected_reads);
    }
  }
  // max_R caps the search.
  const FirstEmptyDistribution d(slots_for(kPaperRecords, 0.95), kPaperRecords);
  EXPECT_EQ(optimal_read_size(d, paper_cost_params(8.0), false, 100).read_size, 100u);
}

TEST(CostModel, ReadSizeMonotoneInLoadFactorSeed000) {
  // Seed 000 §5.1 parameters, 8-byte inline records, N = 120·2^20; Table 1 for comparison.
  const CostParams p = paper_cost_params(8.0);
  const double loads[] = {0.25, 0.5, 0.65, 0.8, 0.85, 0.9, 0.95};
  const std::uint64_t paper_uncons[] = {5, 13, 29, 96, 174, 201, 547};
  const std::uint64_t paper_cons[] = {5, 13, 23, 23, 23, 23, 23};
  std::uint64_t prev_u = 0, prev_c = 0;
  std::printf("load  M(slots)   | R*unc  E[X]    cost(ns) | paper R  E[X]    cost(ns) | "
              "R*con  E[X]    cost(ns) | paper R  E[X]    cost(ns)\n");
  for (std::size_t i = 0; i < std::size(loads); ++i) {
    const FirstEmptyDistribution d(slots_for(kPaperRecords, loads[i]), kPaperRecords);
    const ReadSizeChoice u = optimal_read_size(d, p, false);
    const ReadSizeChoice c = optimal_read_size(d, p, true);
    const ReadSizeChoice pu = evaluate_read_size(d, p, paper_uncons[i]);
    const ReadSizeChoice pc = evaluate_read_size(d, p, paper_cons[i]);
    std::printf("%.2f  %-10llu | %5llu  %.4f  %7.1f | %5llu    %.4f  %7.1f | %5llu  %.4f  %7.1f | "
                "%5llu    %.4f  %7.1f\n",
                loads[i], static_cast<unsigned long long>(d.slots()),
                static_cast<unsigned long long>(u.read_size), u.expected_reads, u.cost_ns,
                static_cast<unsigned long long>(paper_uncons[i]), pu.expected_reads, pu.cost_ns,
                static_cast<unsigned long long>(c.read_size), c.expected_reads, c.cost_ns,
                static_cast<unsigned long long>(paper_cons[i]), pc.expected_reads, pc.cost_ns);
    EXPECT_GE(u.read_size, prev_u) << "load " << loads[i];
    EXPECT_GE(c.read_size, prev_c) << "load " << loads[i];
    prev_u = u.read_size;
    prev_c = c.read_size;
    // The cost curve is flat near the optimum: the paper's unconstrained choice is within 1%.
    EXPECT_LE(u.cost_ns, pu.cost_ns);
    EXPECT_LE(pu.cost_ns, 1.01 * u.cost_ns) << "load " << loads[i];
  }
}

TEST(CostModel, InvalidParamsThrow) {
  const FirstEmptyDistribution d(1000, 500);
  const CostParams good = paper_cost_params(8.0);
  EXPECT_THROW(read_cost_ns(good, 0), std::invalid_argument);
  EXPECT_THROW(evaluate_read_size(d, good, 0), std::invalid_argument);
  EXPECT_THROW(optimal_read_size(d, good, true, 0), std::invalid_argument);
  double CostParams::*fields[] = {&CostParams::c_ns,           &CostParams::alpha_ns_per_byte,
                                  &CostParams::rho0_ops_per_s, &CostParams::link_bytes_per_s,
                                  &CostParams::header_bytes,   &CostParams::slot_bytes};
  for (auto field : fields) {
    for (double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                       std::numeric_limits<double>::infinity()}) {
      CostParams p = good;
      p.*field = bad;
      EXPECT_THROW(read_cost_ns(p, 1), std::invalid_argument);
      EXPECT_THROW(max_read_size_by_bandwidth(p), std::invalid_argument);
      EXPECT_THROW(optimal_read_size(d, p, false), std::invalid_argument);
      EXPECT_THROW(evaluate_read_size(d, p, 4), std::invalid_argument);
      EXPECT_THROW(optimal_read_size_with_cluster(d, p, true, 3, 4), std::invalid_argument);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Cluster hints (Eq. 10)
// ------------------------------------------------------------------------------------------

TEST(ClusterHints, ModifiedCumulativeFollowsEquation10) {
  const FirstEmptyDistribution d(slots_for(kPaperRecords, 0.65), kPaperRecords);
  const std::uint64_t x = 10, L = 5;
  EXPECT_EQ(c_with_cluster(d, 0, x, L), 0.0);
  for (std::uint64_t k = 1; k <= x; ++k) EXPECT_DOUBLE_EQ(c_with_cluster(d, k, x, L), d.c(k));
  for (std::uint64_t k = x + 1; k <= x + L; ++k) {
    EXPECT_DOUBLE_EQ(c_with_cluster(d, k, x, L), d.c(x));
  }
  EXPECT_EQ(c_with_cluster(d, x + L + 1, x, L), 1.0);
  EXPECT_EQ(c_with_cluster(d, 1000, x, L), 1.0);
  // Inside a cluster (x = 0): the first empty slot is at offset L for certain.
  EXPECT_EQ(c_with_cluster(d, L, 0, L), 0.0);
  EXPECT_EQ(c_with_cluster(d, L + 1, 0, L), 1.0);
  // E[X(R)] under the hint equals Σ_i i·(C'_{iR} − C'_{(i−1)R}).
  for (std::uint64_t R : {1, 2, 3, 4, 6, 11, 16}) {
    double direct = 0.0;
    for (std::uint64_t i = 1; (i - 1) * R <= x + L; ++i) {
      direct += static_cast<double>(i) *
                (c_with_cluster(d, i * R, x, L) - c_with_cluster(d, (i - 1) * R, x, L));
    }
    EXPECT_NEAR(expected_reads_with_cluster(d, R, x, L), direct, 1e-12) << "R = " << R;
    const std::uint64_t ceil_reads = (L + 1 + R - 1) / R;
    EXPECT_DOUBLE_EQ(expected_reads_with_cluster(d, R, 0, L), static_cast<double>(ceil_reads));
  }
}

TEST(ClusterHints, InsideClusterReadsToItsEnd) {
  const FirstEmptyDistribution d(slots_for(kPaperRecords, 0.65), kPaperRecords);
  const CostParams p = paper_cost_params(8.0);
  for (std::uint64_t L : {0, 1, 9, 21, 22, 500}) {
    for (bool constrained : {false, true}) {
      const ReadSizeChoice r = optimal_read_size_with_cluster(d, p, constrained, 0, L);
      EXPECT_EQ(r.read_size, L + 1);
      EXPECT_EQ(r.expected_reads, 1.0);
      EXPECT_DOUBLE_EQ(r.cost_ns, read_cost_ns(p, L + 1));
      EXPECT_EQ(r.exceeds_bandwidth, L + 1 > 22);
    }
  }
}

TEST(ClusterHints, BehavesLikeFigure13) {
  // Cluster of 10 slots; probe start x slots before it (Fig. 13 of seed 000).
  const CostParams p = paper_cost_params(8.0);
  for (double alpha : {0.25, 0.65}) {
    SCOPED_TRACE("alpha = " + std::to_string(alpha));
    const FirstEmptyDistribution d(slots_for(kPaperRecords, alpha), kPaperRecords);
    const ReadSizeChoice oblivious = optimal_read_size(d, p, true);
    // Far away: no influence.
    EXPECT_EQ(optimal_read_size_with_cluster(d, p, true, 30, 10).read_size, oblivious.read_size);
    EXPECT_EQ(optimal_read_size_with_cluster(d, p, true, 1u << 20, 10).read_size,
              oblivious.read_size);
    // Close to the cluster: read to the cluster's end (4 + 10 slots + the empty one).
    EXPECT_EQ(optimal_read_size_with_cluster(d, p, true, 4, 10).read_size, 15u);
    // Never beyond the known empty slot, never beyond the bandwidth bound when constrained.
    for (std::uint64_t x = 1; x <= 40; ++x) {
      const ReadSizeChoice r = optimal_read_size_with_cluster(d, p, true, x, 10);
      EXPECT_LE(r.read_size, x + 11);
      EXPECT_LE(r.read_size, r.max_read_size_by_bandwidth);
      // It is the argmin of E'[X(R)]·T(R) over 1 <= R <= min(R_bw, x + L + 1).
      for (std::uint64_t R = 1; R <= std::min<std::uint64_t>(22, x + 11); ++R) {
        ASSERT_GE(expected_reads_with_cluster(d, R, x, 10) * read_cost_ns(p, R), r.cost_ns);
      }
    }
  }
  // At 65% the model may read fewer slots than cluster-oblivious when the cluster is 20 away.
  const FirstEmptyDistribution d65(slots_for(kPaperRecords, 0.65), kPaperRecords);
  EXPECT_LT(optimal_read_size_with_cluster(d65, p, true, 20, 10).read_size,
            optimal_read_size(d65, p, true).read_size);
}

TEST(ClusterHints, InvalidInputsThrow) {
  const FirstEmptyDistribution d(1000, 500);
  const CostParams p = paper_cost_params(8.0);
  const std::uint64_t big = std::numeric_limits<std::uint64_t>::max();
  EXPECT_THROW(c_with_cluster(d, 1, big, 1), std::invalid_argument);
  EXPECT_THROW(expected_reads_with_cluster(d, 0, 3, 4), std::invalid_argument);
  EXPECT_THROW(expected_reads_with_cluster(d, 1, big - 1, 1), std::invalid_argument);
  EXPECT_THROW(optimal_read_size_with_cluster(d, p, true, big / 2, big / 2 + 1),
               std::invalid_argument);
  EXPECT_THROW(optimal_read_size_with_cluster(d, p, true, 3, 4, 0), std::invalid_argument);
  EXPECT_THROW(optimal_read_size_with_cluster(d, p, true, 0, 4, 0), std::invalid_argument);
}

}  // namespace

namespace rdmahash::model {
namespace {

// The memory-limit probe's chase must visit every line of the region before it repeats one: a
// permutation with short cycles would keep the chase inside a cached subset and overstate the limit.
TEST(MemoryLimit, ChaseIsOneCycleThroughEveryLine) {
  for (uint32_t n : {1u, 2u, 3u, 1000u, 4097u, 65536u}) {
    std::vector<uint32_t> next(n);
    random_cycle(next, 7);
    std::vector<bool> seen(n, false);
    uint32_t at = 0, steps = 0, in_order = 0;
    do {
      ASSERT_LT(next[at], n);
      ASSERT_FALSE(seen[at]) << "n=" << n << ": line " << at << " visited twice after " << steps << " steps";
      seen[at] = true;
      in_order += next[at] == at + 1;
      at = next[at];
      ++steps;
    } while (at != 0);
    EXPECT_EQ(steps, n) << "n=" << n << ": the chase from line 0 returns after " << steps << " lines";
    if (n >= 1000) {
      EXPECT_LT(in_order, n / 100) << "the order is not random (prefetchers would follow it)";
    }
  }
}

TEST(MemoryLimit, MeasuresASmallRegion) {
  MemoryLimitOptions o;
  o.bytes = (1u << 20) + 40;  // not a whole number of lines: rounded down
  o.rounds = 2;
  o.dependent_loads = 1u << 14;
  o.batched_loads = 1u << 16;
  const MemoryLimit m = measure_memory_limit(o);
  EXPECT_EQ(m.bytes, uint64_t{1} << 20);
  EXPECT_EQ(m.pages, "4k");
  EXPECT_EQ(m.batch, 16u);
  EXPECT_GT(m.dependent_ns, 0.0);
  EXPECT_GT(m.batched_ops_per_s, 0.0);
  EXPECT_EQ(m.pages_given, "");  // not inspected
  o.pages = ProbePages::kThp;
  EXPECT_EQ(measure_memory_limit(o).pages, "thp");
  // inspect_pages sees the probe's own mapping, once, every page touched (resident), and its answer
  // is what the limit reports.
  int calls = 0;
  o.inspect_pages = [&](const void* p, uint64_t bytes) {
    ++calls;
    EXPECT_EQ(bytes, uint64_t{1} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    return std::make_pair(std::string("thp"), 0.75);
  };
  const MemoryLimit g = measure_memory_limit(o);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(g.pages_given, "thp");
  EXPECT_EQ(g.huge_fraction, 0.75);
}

// The bench measures the limit before a table's points and again after each one, on one mapping:
// every measure() is a full measurement of the same region (pages inspected once, at setup). That a
// later probe is measured, not copied, is checked end to end by check_bench_json.py --memory-limit.
TEST(MemoryLimit, ProbeMeasuresAgainOnTheSameRegion) {
  MemoryLimitOptions o;
  o.bytes = 1u << 20;
  o.rounds = 1;
  o.dependent_loads = 1u << 14;
  o.batched_loads = 1u << 16;
  int calls = 0;
  const void* region = nullptr;
  o.inspect_pages = [&](const void* p, uint64_t) {
    ++calls;
    region = p;
    return std::make_pair(std::string("4k"), 0.0);
  };
  MemoryProbe probe(o);
  EXPECT_EQ(calls, 1);
  ASSERT_NE(region, nullptr);
  // Every line of the region still holds its chase link: the chase may start anywhere and stay in it.
  const auto* w = static_cast<const uint64_t*>(region);
  for (uint64_t line = 0; line < o.bytes / 64; ++line) ASSERT_LT(w[line * 8], o.bytes / 64) << "line " << line;
  const MemoryLimit first = probe.measure();
  const MemoryLimit second = probe.measure();
  EXPECT_EQ(calls, 1) << "pages are inspected once, at setup";
  for (const MemoryLimit& m : {first, second}) {
    EXPECT_EQ(m.bytes, o.bytes);
    EXPECT_EQ(m.pages_given, "4k");
    EXPECT_GT(m.dependent_ns, 0.0);
    EXPECT_GT(m.batched_ops_per_s, 0.0);
    EXPECT_GT(m.seconds, 0.0);
  }
  MemoryLimitOptions bad;
  bad.bytes = 100;
  EXPECT_THROW(MemoryProbe{bad}, std::invalid_argument);
}

TEST(MemoryLimit, BadInputThrows) {
  MemoryLimitOptions o;
  o.bytes = 100;
  EXPECT_THROW(measure_memory_limit(o), std::invalid_argument);
  o.bytes = uint64_t{1} << 41;
  EXPECT_THROW(measure_memory_limit(o), std::invalid_argument);
  o.bytes = 1u << 16;
  o.batch = 0;
  EXPECT_THROW(measure_memory_limit(o), std::invalid_argument);
  o.batch = 257;
  EXPECT_THROW(measure_memory_limit(o), std::invalid_argument);
  o.batch = 16;
  o.rounds = 0;
  EXPECT_THROW(measure_memory_limit(o), std::invalid_argument);
}

}  // namespace
}  // namespace rdmahash::model
