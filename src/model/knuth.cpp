// Variable read size model (seed 000 §3): Knuth's first-empty-slot distribution and the
// read-size optimiser. See include/rdmahash/model.h for the model, conventions and numerics.
#include "rdmahash/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace rdmahash::model {
namespace {

// Error budget for everything left out of the stored support, measured on E[X(1)] (>= 1).
constexpr double kTruncationTolerance = 1e-13;

// Neumaier-compensated running sum.
struct CompensatedSum {
  double sum = 0.0;
  double comp = 0.0;
  void add(double x) noexcept {
    const double t = sum + x;
    if (std::fabs(sum) >= std::fabs(x)) {
      comp += (sum - t) + x;
    } else {
      comp += (x - t) + sum;
    }
    sum = t;
  }
  double value() const noexcept { return sum + comp; }
};

// Upper bound on Σ_{j>J} (j+1)(j+2)/2 · h_j for J < N, i.e. on everything the truncation at J
// leaves out of E[X(1)] (and hence out of every E[X(R)] and out of Σ P_k). Returns +inf when no
// useful bound is available yet (ratio bound >= 1).
double truncation_bound(double M, double N, double J, double h_J, double log_h_N) {
  const double d = M - J - 1.0;  // > 0 because J < N <= M - 2
  const double beta = (N - J) / d;
  // For all j in [J, N-2]: ln(h_{j+1}/h_j) <= ln β_j + 1 − β_j + 2/(M−j−1) <= ln β_J + 1 − β_J
  // + 2/(M−N+1), because β_j is non-increasing in j and ln β + 1 − β is increasing on (0, 1).
  const double log_rho = std::log(beta) + 1.0 - beta + 2.0 / (M - N + 1.0);
  if (!(log_rho < 0.0)) return std::numeric_limits<double>::infinity();
  const double rho = std::exp(log_rho);
  const double one_minus = -std::expm1(log_rho);
  // Terms j = J+1 .. N-1: h_j <= h_J ρ^t with t = j − J, weight (j+1)(j+2)/2 <= (a+t)²/2, a = J+2.
  const double a = J + 2.0;
  const double s0 = rho / one_minus;
  const double s1 = rho / (one_minus * one_minus);
  const double s2 = rho * (1.0 + rho) / (one_minus * one_minus * one_minus);
  const double geometric = 0.5 * h_J * (a * a * s0 + 2.0 * a * s1 + s2);
  // Term j = N, bounded exactly.
  const double last = std::exp(log_h_N + std::log(N + 1.0) + std::log(N + 2.0) - std::log(2.0));
  return geometric + last;
}

void validate_params(const CostParams& p) {
  auto check = [](double v, const char* name) {
    if (!std::isfinite(v) || !(v > 0.0)) {
      throw std::invalid_argument(std::string("rdmahash::model::CostParams: ") + name +
                                  " must be finite and > 0 (got " + std::to_string(v) + ")");
    }
  };
  check(p.c_ns, "c_ns");
  check(p.alpha_ns_per_byte, "alpha_ns_per_byte");
  check(p.rho0_ops_per_s, "rho0_ops_per_s");
  check(p.link_bytes_per_s, "link_bytes_per_s");
  check(p.header_bytes, "header_bytes");
  check(p.slot_bytes, "slot_bytes");
}

void require_nonzero_read_size(std::uint64_t R, const char* where) {
  if (R == 0) {
    throw std::invalid_argument(std::string("rdmahash::model::") + where +
                                ": read size R must be >= 1");
  }
}

void validate_cluster(std::uint64_t x, std::uint64_t L, const char* where) {
  // x + L + 1 (the offset just past the known empty slot) must be representable.
  if (x >= std::numeric_limits<std::uint64_t>::max() - L) {
    throw std::invalid_argument(std::string("rdmahash::model::") + where +
                                ": cluster_offset + cluster_length overflows");
  }
}

double cost_unchecked(const CostParams& p, std::uint64_t R) {
  return p.c_ns + p.alpha_ns_per_byte * static_cast<double>(R) * p.slot_bytes;
}

std::uint64_t bandwidth_bound_unchecked(const CostParams& p) {
  const double rho_hat = p.rho0_ops_per_s * p.header_bytes / (p.header_bytes + p.slot_bytes);
  double x = p.link_bytes_per_s / (p.slot_bytes * rho_hat);
  x *= 1.0 + 1e-12;  // do not lose an exact integer bound to rounding
  if (!(x < 18446744073709549568.0)) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::floor(x));
}

// Upper end of the read-size search range (>= 1).
std::uint64_t search_limit(bool constrained, std::uint64_t max_R, std::uint64_t r_bw) {
  if (max_R == 0) {
    throw std::invalid_argument("rdmahash::model: max_R must be >= 1");
  }
  std::uint64_t upper = max_R;
  if (constrained) upper = std::min(upper, std::max<std::uint64_t>(r_bw, 1));
  return upper;
}

template <class ExpectedReads>
ReadSizeChoice argmin_cost(const CostParams& p, bool constrained, std::uint64_t upper,
                           std::uint64_t r_bw, ExpectedReads&& expected_reads) {
  ReadSizeChoice best;
  best.constrained = constrained;
  best.max_read_size_by_bandwidth = r_bw;
  double best_cost = std::numeric_limits<double>::infinity();
  for (std::uint64_t R = 1; R <= upper; ++R) {
    const double e = expected_reads(R);
    const double cost = e * cost_unchecked(p, R);
    if (cost < best_cost) {
      best_cost = cost;
      best.read_size = R;
      best.expected_reads = e;
      best.cost_ns = cost;
    }
  }
  best.exceeds_bandwidth = best.read_size > r_bw;
  return best;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// FirstEmptyDistribution
// ------------------------------------------------------------------------------------------

OffsetDistribution::OffsetDistribution(std::uint64_t slots_M, std::uint64_t records_N, const char* who)
    : m_(slots_M), n_(records_N) {
  const std::string w = std::string("rdmahash::model::") + who;
  if (slots_M == 0) throw std::invalid_argument(w + ": M (slots) must be >= 1");
  if (records_N >= slots_M) {
    throw std::invalid_argument(w + ": N (records) must be < M (slots); got N = " + std::to_string(records_N) +
                                ", M = " + std::to_string(slots_M));
  }
  if (slots_M > kMaxSlots) {
    throw std::invalid_argument(w + ": M must be <= 2^52 (got " + std::to_string(slots_M) + ")");
  }
}

void OffsetDistribution::finish() {
  const std::size_t size = p_.size();
  // Tails T_k = Σ_{i=k}^{K} P_i, backward; mean E[k] = Σ_{k>=1} T_k, backward.
  tail_.assign(size, 0.0);
  tail_[size - 1] = p_[size - 1];
  for (std::size_t k = size - 1; k-- > 0;) tail_[k] = tail_[k + 1] + p_[k];
  double mean = 0.0;
  for (std::size_t k = size - 1; k >= 1; --k) mean += tail_[k];
  mean_k_ = mean;
  // C_k = Σ_{i<k} P_i, compensated forward sum.
  c_.assign(size + 1, 0.0);
  CompensatedSum acc;
  for (std::size_t k = 0; k < size; ++k) {
    acc.add(p_[k]);
    c_[k + 1] = acc.value();
  }
}

FirstEmptyDistribution::FirstEmptyDistribution(std::uint64_t slots_M, std::uint64_t records_N)
    : OffsetDistribution(slots_M, records_N, "FirstEmptyDistribution") {
  const double M = static_cast<double>(slots_M);
  const double N = static_cast<double>(records_N);

  // p_ first holds h_j = g(M, N, j) / M^N, then is turned into P_k = Σ_{j>=k} h_j in place.
  if (records_N == slots_M - 1) {
    // One empty slot: the run behind it always has length N; h_N = 1/M, all other h_j = 0.
    if (records_N >= kMaxSupport) {
      throw std::domain_error(
          "rdmahash::model::FirstEmptyDistribution: N = M - 1 with M > 2^24 needs a support "
          "larger than kMaxSupport");
    }
    p_.assign(static_cast<std::size_t>(records_N) + 1, 0.0);
    p_.back() = 1.0 / M;
  } else {
    // log h_N = (N−1) ln(N+1) − N ln M = −ln(N+1) + N ln(1 − (M−N−1)/M).
    const double log_h_N = -std::log(N + 1.0) + N * std::log1p(-(M - N - 1.0) / M);
    // log h_0 = ln(1 − (N+1)/M) + (N−1) ln(1 − 1/M).
    CompensatedSum log_h;
    log_h.add(std::log((M - N - 1.0) / M));
    log_h.add((N - 1.0) * std::log1p(-1.0 / M));
    p_.reserve(1024);
    for (std::uint64_t j = 0;; ++j) {
      const double J = static_cast<double>(j);
      const double h = std::exp(log_h.value());
      p_.push_back(h);
      if (j == records_N) break;
      if (truncation_bound(M, N, J, h, log_h_N) < kTruncationTolerance) break;
      if (p_.size() >= kMaxSupport) {
        throw std::domain_error(
            "rdmahash::model::FirstEmptyDistribution: load factor too close to 1 for this table "
            "size; the first-empty distribution needs more than 2^24 offsets (M = " +
            std::to_string(slots_M) + ", N = " + std::to_string(records_N) + ")");
      }
      // ln(h_{j+1}/h_j) = ln((N−j)/(M−j−1)) + j ln(1 + 1/(j+1)) + (N−j−2) ln(1 − 1/(M−j−1)).
      const double d = M - J - 1.0;
      log_h.add(std::log((N - J) / d));
      log_h.add(J * std::log1p(1.0 / (J + 1.0)));
      log_h.add((N - J - 2.0) * std::log1p(-1.0 / d));
    }
  }

  // P_k = Σ_{j=k}^{K} h_j, backward (small to large).
  for (std::size_t k = p_.size() - 1; k-- > 0;) p_[k] += p_[k + 1];
  finish();
}

LookupDistribution::LookupDistribution(std::uint64_t slots_M, std::uint64_t records_N, double present_fraction)
    : OffsetDistribution(slots_M, records_N, "LookupDistribution"), f_(present_fraction) {
  if (!(present_fraction >= 0.0 && present_fraction <= 1.0)) {
    throw std::invalid_argument("rdmahash::model::LookupDistribution: present_fraction must be in [0, 1] (got " +
                                std::to_string(present_fraction) + ")");
  }
  std::vector<double> acc;  // Σ w · P_k(M, n) over the components
  try {
    auto add = [&](std::uint64_t n, double w) {
      const FirstEmptyDistribution d(slots_M, n);
      if (acc.size() < d.cutoff() + 1) acc.resize(d.cutoff() + 1, 0.0);
      for (std::uint64_t k = 0; k <= d.cutoff(); ++k) acc[k] += w * d.p(k);
    };
    if (present_fraction < 1.0 || records_N == 0) add(records_N, 1.0 - present_fraction);
    if (present_fraction > 0.0 && records_N == 0) acc[0] += present_fraction;  // no key: stop at once
    if (present_fraction > 0.0 && records_N > 0) {
      const double f = present_fraction;
      if (records_N <= kExactRecords) {
        for (std::uint64_t n = 0; n < records_N; ++n) add(n, f / static_cast<double>(records_N));
      } else {
        // (1/N) Σ_{n<N} g(n) ≈ (1/N) ∫_{−1/2}^{N−1/2} g (midpoint rule), over β = n/M from −1/(2M)
        // to (N − 1/2)/M, in u = −ln(1 − β) (dβ = e^{−u} du); below n = 0, g(0). A node between
        // two record counts takes both components, weighted linearly: flooring instead moves
        // E[X(1)] at 19 000 of 20 000 slots by 5e-4, 500 times the tests' tolerance.
        const double M = static_cast<double>(slots_M);
        const double u_min = -std::log1p(0.5 / M);
        const double u_max = -std::log1p(-(static_cast<double>(records_N) - 0.5) / M);
        const int K = kQuadratureIntervals;
        const double h = (u_max - u_min) / K;
        std::vector<std::pair<std::uint64_t, double>> nodes;
        double total = 0.0;
        for (int i = 0; i <= K; ++i) {
          const double u = u_min + h * i;
          const double simpson = (i == 0 || i == K) ? 1.0 : (i % 2 ? 4.0 : 2.0);
          const double w = simpson * std::exp(-u);
          const double n = std::clamp(-std::expm1(-u) * M, 0.0, static_cast<double>(records_N));
          const auto lo = static_cast<std::uint64_t>(n);
          const double t = n - static_cast<double>(lo);
          nodes.emplace_back(lo, w * (1.0 - t));
          if (t > 0.0) nodes.emplace_back(lo + 1, w * t);
          total += w;
        }
        for (const auto& [n, w] : nodes) add(n, f * w / total);
      }
    }
  } catch (const std::domain_error&) {
    throw std::domain_error(
        "rdmahash::model::LookupDistribution: load factor too close to 1 for this table size; the "
        "distribution needs more than 2^24 offsets (M = " + std::to_string(slots_M) + ", N = " +
        std::to_string(records_N) + ")");
  }
  p_ = std::move(acc);
  finish();
}

double OffsetDistribution::p(std::uint64_t k) const noexcept {
  return k < p_.size() ? p_[static_cast<std::size_t>(k)] : 0.0;
}

double OffsetDistribution::c(std::uint64_t k) const noexcept {
  return k < c_.size() ? c_[static_cast<std::size_t>(k)] : c_.back();
}

double OffsetDistribution::tail(std::uint64_t k) const noexcept {
  if (k == 0) return 1.0;
  return k < tail_.size() ? tail_[static_cast<std::size_t>(k)] : 0.0;
}

double OffsetDistribution::expected_reads(std::uint64_t R) const {
  require_nonzero_read_size(R, "OffsetDistribution::expected_reads");
  const std::uint64_t K = cutoff();
  double sum = 0.0;
  for (std::uint64_t i = K / R; i >= 1; --i) sum += tail_[static_cast<std::size_t>(i * R)];
  return 1.0 + sum;
}

// ------------------------------------------------------------------------------------------
// Cost model
// ------------------------------------------------------------------------------------------

CostParams paper_cost_params(double slot_bytes) {
  CostParams p{};
  p.c_ns = 1290.0;
  p.alpha_ns_per_byte = 0.08;
  p.rho0_ops_per_s = 87.17e6;
  p.link_bytes_per_s = 100e9 / 8.0;
  p.header_bytes = 30.0;
  p.slot_bytes = slot_bytes;
  return p;
}

double read_cost_ns(const CostParams& params, std::uint64_t R) {
  validate_params(params);
  require_nonzero_read_size(R, "read_cost_ns");
  return cost_unchecked(params, R);
}

std::uint64_t max_read_size_by_bandwidth(const CostParams& params) {
  validate_params(params);
  return bandwidth_bound_unchecked(params);
}

ReadSizeChoice evaluate_read_size(const OffsetDistribution& dist, const CostParams& params,
                                  std::uint64_t R) {
  validate_params(params);
  require_nonzero_read_size(R, "evaluate_read_size");
  ReadSizeChoice r;
  r.read_size = R;
  r.expected_reads = dist.expected_reads(R);
  r.cost_ns = r.expected_reads * cost_unchecked(params, R);
  r.constrained = false;
  r.max_read_size_by_bandwidth = bandwidth_bound_unchecked(params);
  r.exceeds_bandwidth = R > r.max_read_size_by_bandwidth;
  return r;
}

ReadSizeChoice optimal_read_size(const OffsetDistribution& dist, const CostParams& params,
                                 bool constrained, std::uint64_t max_R) {
  validate_params(params);
  const std::uint64_t r_bw = bandwidth_bound_unchecked(params);
  std::uint64_t upper = search_limit(constrained, max_R, r_bw);
  // For R >= cutoff()+1 every lookup takes exactly one READ and T(R) only grows.
  upper = std::min(upper, dist.cutoff() + 1);
  return argmin_cost(params, constrained, upper, r_bw,
                     [&](std::uint64_t R) { return dist.expected_reads(R); });
}

// ------------------------------------------------------------------------------------------
// Cluster hints (Eq. 10)
// ------------------------------------------------------------------------------------------

double c_with_cluster(const FirstEmptyDistribution& dist, std::uint64_t k,
                      std::uint64_t cluster_offset, std::uint64_t cluster_length) {
  validate_cluster(cluster_offset, cluster_length, "c_with_cluster");
  if (k == 0) return 0.0;
  if (k <= cluster_offset) return dist.c(k);
  if (k <= cluster_offset + cluster_length) return dist.c(cluster_offset);
  return 1.0;
}

double expected_reads_with_cluster(const FirstEmptyDistribution& dist, std::uint64_t R,
                                   std::uint64_t cluster_offset, std::uint64_t cluster_length) {
  require_nonzero_read_size(R, "expected_reads_with_cluster");
  validate_cluster(cluster_offset, cluster_length, "expected_reads_with_cluster");
  const std::uint64_t x = cluster_offset;
  const std::uint64_t end = x + cluster_length;
  // i = 0 contributes 1. 1 <= iR <= x: 1 − C_{iR}; tails vanish beyond the cutoff.
  double sum = 0.0;
  for (std::uint64_t i = std::min(x, dist.cutoff()) / R; i >= 1; --i) sum += dist.tail(i * R);
  // x < iR <= x + L: 1 − C_x each.
  const std::uint64_t inside = end / R - x / R;
  sum += static_cast<double>(inside) * dist.tail(x);
  return 1.0 + sum;
}

ReadSizeChoice optimal_read_size_with_cluster(const FirstEmptyDistribution& dist,
                                              const CostParams& params, bool constrained,
                                              std::uint64_t cluster_offset,
                                              std::uint64_t cluster_length, std::uint64_t max_R) {
  validate_params(params);
  validate_cluster(cluster_offset, cluster_length, "optimal_read_size_with_cluster");
  const std::uint64_t r_bw = bandwidth_bound_unchecked(params);
  const std::uint64_t reach = cluster_offset + cluster_length + 1;  // slots up to the empty one
  if (cluster_offset == 0) {
    if (max_R == 0) throw std::invalid_argument("rdmahash::model: max_R must be >= 1");
    ReadSizeChoice r;
    r.read_size = reach;
    r.expected_reads = 1.0;
    r.cost_ns = cost_unchecked(params, reach);
    r.constrained = constrained;
    r.max_read_size_by_bandwidth = r_bw;
    r.exceeds_bandwidth = reach > r_bw;
    return r;
  }
  std::uint64_t upper = search_limit(constrained, max_R, r_bw);
  upper = std::min(upper, reach);
  return argmin_cost(params, constrained, upper, r_bw, [&](std::uint64_t R) {
    return expected_reads_with_cluster(dist, R, cluster_offset, cluster_length);
  });
}

}  // namespace rdmahash::model
