// rdmahash/model.h — the variable read size model for linear probing over one-sided READs
// (seed 000, Wang et al., ADMS'20, §3: Eq. 1–10). Pure math: no fabric, no table, no I/O.
//
// Model
// -----
// A lookup in a linear-probing table of M slots holding N records starts at slot h* and scans
// forward (circularly) until it meets an empty slot. Over one-sided RDMA it does so with READs of
// R contiguous slots each. The model picks the R that minimises the expected cost of a lookup:
//
//   R* = argmin_R  E[X(R)] · T(R)                                              (Eq. 1)
//   subject to     R · w · ρ̂ ≤ l,   ρ̂ = ρ0 · h / (h + w)                      (Eq. 2)
//   T(R) = c + α · R · w                                                        (Eq. 3)
//   E[X(R)] = Σ_i i · Prob_i(R),   Prob_i(R) = C_{iR} − C_{(i−1)R}               (Eq. 4, 5)
//   C_k = Σ_{i<k} P_i,  C_0 = 0                                                 (Eq. 6)
//   P_k = M^−N (g(M,N,k) + g(M,N,k+1) + … + g(M,N,N))      (Knuth, TAOCP 6.4)   (Eq. 7)
//   g(M,N,k) = C(N,k) f(k+1,k) f(M−k−1,N−k),   f(m,n) = (1 − n/m) m^n
//
// Indexing conventions (checked against Knuth's unsuccessful-search cost in the tests)
// -------------------------------------------------------------------------------------
// * k is the OFFSET of the first empty slot from the probe start: P_0 = 1 − N/M is the
//   probability that the start slot itself is empty. Reaching the first empty slot at offset k
//   inspects k + 1 slots, so with reads of R slots it takes X(R) = ⌊k/R⌋ + 1 READs.
// * C_k = Pr[offset < k] = Pr[the first k slots contain an empty one]; hence Pr[X(R) ≤ i] = C_{iR}
//   (Eq. 5), and E[X(R)] = Σ_{i≥0} (1 − C_{iR}) (the tail-sum form used here; the i = 0 term is 1).
// * E[X(1)] = 1 + E[k] = Σ_k (k+1) P_k is Knuth's C'_N = (1 + Q_1(M,N)) / 2, the expected number
//   of probes of an unsuccessful search, ≈ (1 + 1/(1−α)²)/2 for large M at load factor α = N/M.
//   `mean_first_empty()` is E[k] = E[X(1)] − 1 (slots strictly before the empty one).
// * g(M,N,j)/M^N =: h_j is the probability that the start slot is empty and is followed by a run
//   of exactly j filled slots; P_k = Σ_{j≥k} h_j, Σ_j h_j = P_0 and Σ_k P_k = Σ_j (j+1) h_j = 1.
//
// Numerics
// --------
// M^−N · M^N over/underflows for any realistic table, and a direct lgamma() evaluation of
// log g loses ~1e-5 relative accuracy at N ≈ 2^34 (|lgamma| ≈ 4e11). Instead we use
//   h_0 = (1 − (N+1)/M) · (1 − 1/M)^(N−1)
//   h_{j+1}/h_j = (N−j)/(M−j−1) · (1 + 1/(j+1))^j · (1 − 1/(M−j−1))^(N−j−2)
// evaluated in log space with log1p (every term is O(1), so the accumulated log h_j has an
// absolute error of ~1e-16 per step). Only the range of j that matters is computed: we stop at
// the first J where a rigorous geometric bound on everything left out,
//   Σ_{j>J} (j+1)(j+2)/2 · h_j  ≤  1e-13          (this bounds the error of E[X(R)] for all R ≥ 1,
//                                                  and a fortiori the neglected mass Σ_{k>J} P_k),
// holds; the bound uses  h_{j+1}/h_j ≤ ρ_J = exp(ln β_J + 1 − β_J + 2/(M−N+1)) for J ≤ j ≤ N−2,
// β_J = (N−J)/(M−J−1), which follows from j·ln(1+1/(j+1)) < 1 and ln(1−x) ≤ −x; the last term h_N
// is bounded separately. P_k and the tails T_k = 1 − C_k are then formed by backward summation
// (small to large, relatively accurate even deep in the tail), C_k by compensated forward
// summation. Support sizes: K ≈ 170 at α = 0.5, ≈ 2.9·10^4 at α = 0.95 (M = 2^27, ~3 ms),
// ≈ 8·10^5 at α = 0.99 (M = 2^34, ~90 ms); small, highly loaded tables may run to k = N.
// Σ_k P_k = 1 holds to ~1e-15 … 2e-13 in practice (the tests require 1e-9).
// N = M − 1 (a single empty slot) is handled exactly: P_k = 1/M for k = 0..N.
// If the needed support would exceed kMaxSupport entries (load factor within ~0.2% of 1 in a
// table of hundreds of millions of slots) the constructor throws std::domain_error.
//
// Bandwidth constraint: our reading of Eq. 2 (documented because the seed is terse)
// ---------------------------------------------------------------------------------
// * l is the link bandwidth in BYTES per second (100 Gb/s InfiniBand EDR → 12.5e9 B/s), α is in
//   ns per byte (1/l = 0.08 ns/B), c in ns, ρ0 in READ requests per second, h and w in bytes.
// * ρ̂ = ρ0 · h/(h+w) is taken literally as written in the seed: the 0-byte-payload peak message
//   rate scaled by the size of a one-SLOT message (h + w) relative to a 0-byte message (h). It
//   does not depend on R; R·w is the payload of one READ, so R·w·ρ̂ is the payload bandwidth
//   the client would draw at rate ρ̂, and the largest admissible read size is
//      R_bw = ⌊ l · (h + w) / (w · ρ0 · h) ⌋.
//   With the seed's parameters this is ⌊22.70⌋ = 22 slots for w = 8 B (Table 1 reports 23),
//   ⌊9.26⌋ = 9 for w = 32 B (Table 3: 9) and ⌊5.90⌋ = 5 for w = 128 B (Table 3: 6): the paper
//   evidently rounded l·(h+w)/(w·ρ0·h) to NEAREST (23 slots draw 12.66e9 B/s, 1.3% over l).
//   We keep the inequality of Eq. 2 as written, so constrained R* ≤ R_bw always.
//   (The alternative reading ρ̂ = ρ0 · h/(h + R·w) never binds with these parameters, since
//   ρ0·h = 2.6e9 B/s < l, and so cannot reproduce Table 1.)
// * A tiny relative slack (1e-12) is applied before flooring so that an exact integer bound is
//   not lost to rounding.
//
// Cluster hints (Eq. 10, §3.4, §4.4)
// ----------------------------------
// A known cluster is given relative to the probe start h*: `cluster_offset` x = h_i − h* ≥ 0 is
// the offset of its first filled slot, `cluster_length` L the number of filled slots, and the slot
// at offset x + L is known to be EMPTY (a cluster "finishes at an empty slot"). Eq. 10:
//   C'_0 = 0;  C'_k = C_k for 0 < k ≤ x;  C'_k = C_x for x < k ≤ x + L;  C'_k = 1 for k > x + L.
// (As in the paper, the first branch reuses the unconditioned P_j; it is not a true conditional
// distribution.) Offset 0 means the probe start is inside the cluster — the cluster starts at or
// before h* and exactly L filled slots remain from h* on — so the first empty slot is at offset L
// for certain and `optimal_read_size_with_cluster` returns read_size = L + 1 (one READ that
// reaches the empty slot, §4.4 case 1), regardless of max_R and the bandwidth bound
// (`exceeds_bandwidth` tells the caller). L = 0 means "the slot at offset x is known empty".
// For x > 0 the search range is additionally capped at x + L + 1 (beyond it E[X] = 1 and the
// cost only grows).
//
// Thread safety: a FirstEmptyDistribution is immutable after construction; all functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmahash::model {

// A distribution of the offset k (from a lookup's start slot) at which a lookup can stop, with
// what Eq. 4–5 need of it. X(R) = ⌊k/R⌋ + 1 READs of R slots reach offset k, so E[X(R)] is the
// same tail sum whatever the stopping rule: FirstEmptyDistribution (seed 000's model: the scan
// reaches an empty slot) and LookupDistribution (gets of present keys stop at the key) differ
// only in P_k. Immutable after construction.
class OffsetDistribution {
 public:
  // Largest number of stored offsets (k = 0..kMaxSupport−1).
  static constexpr std::uint64_t kMaxSupport = std::uint64_t{1} << 24;
  // Largest accepted M (doubles represent every integer up to 2^53 exactly).
  static constexpr std::uint64_t kMaxSlots = std::uint64_t{1} << 52;

  std::uint64_t slots() const noexcept { return m_; }
  std::uint64_t records() const noexcept { return n_; }
  double load_factor() const noexcept { return static_cast<double>(n_) / static_cast<double>(m_); }
  // Largest offset with a stored (non-neglected) probability; p(k) = 0 for k > cutoff().
  std::uint64_t cutoff() const noexcept { return static_cast<std::uint64_t>(p_.size()) - 1; }

  // P_k: probability that the lookup stops exactly k slots after its start.
  double p(std::uint64_t k) const noexcept;
  // C_k = Σ_{i<k} P_i (C_0 = 0).
  double c(std::uint64_t k) const noexcept;
  // 1 − C_k = Σ_{i≥k} P_i, computed without cancellation (tail(0) = 1 exactly).
  double tail(std::uint64_t k) const noexcept;
  // E[X(R)] = Σ_{i≥0} (1 − C_{iR}): expected number of R-slot READs to reach the stopping offset
  // (Eq. 4–5). Throws std::invalid_argument if R == 0.
  double expected_reads(std::uint64_t R) const;
  // E[k] = Σ_k k·P_k = E[X(1)] − 1.
  double mean_offset() const noexcept { return mean_k_; }

 protected:
  // Validates M and N (std::invalid_argument if M == 0, N >= M or M > kMaxSlots).
  OffsetDistribution(std::uint64_t slots_M, std::uint64_t records_N, const char* who);
  // Forms C_k, the tails and the mean from p_ (which must hold P_0..P_K, K ≥ 0).
  void finish();

  std::uint64_t m_;
  std::uint64_t n_;
  std::vector<double> p_;     // P_k, k = 0..K
  std::vector<double> c_;     // C_k, k = 0..K+1
  std::vector<double> tail_;  // Σ_{i≥k} P_i, k = 0..K
  double mean_k_ = 0.0;
};

// Distribution of the offset k of the first empty slot from a uniformly random probe start in a
// circular linear-probing table of M slots holding N records with uniform hashing (Knuth).
class FirstEmptyDistribution : public OffsetDistribution {
 public:
  // Throws std::invalid_argument if M == 0, N >= M or M > kMaxSlots; std::domain_error if the
  // support needed for 1e-13 accuracy exceeds kMaxSupport.
  FirstEmptyDistribution(std::uint64_t slots_M, std::uint64_t records_N);
  // E[k] = E[X(1)] − 1 (slots strictly before the empty one).
  double mean_first_empty() const noexcept { return mean_offset(); }
};

// Where a get stops: a fraction `present_fraction` of lookups are of keys in the table and stop
// at the key; the rest are of absent keys (or scan a multimap) and stop at the first empty slot.
//   P_k = f · D_k + (1 − f) · P^{first empty}_k(M, N)
// D_k, the offset of a random present key from its home slot, follows from the first-empty
// distribution (Knuth, TAOCP 6.4, the derivation of the successful-search cost C_N from C'_n):
// linear probing puts the key inserted when n records were in the table at that moment's first
// empty slot, and the layout does not depend on the insertion order, so
//   D_k = (1/N) Σ_{n=0}^{N−1} P^{first empty}_k(M, n).
// A present key at offset k is in READ ⌊k/R⌋ + 1, as an empty slot would be, so E[X(R)] keeps the
// form of Eq. 4–5; with R = 1 and f = 1 it is Knuth's successful search C_N = (1 + Q_0(M, N−1))/2
// ≈ (1 + 1/(1−α))/2 (tested), against the unsuccessful ≈ (1 + 1/(1−α)²)/2 that seed 000 prices.
// At load 0.8 and R = 8 a get needs 1.13 READs where the first-empty model counts 2.19.
//
// Numerics: for N ≤ kExactRecords the sum is taken term by term. Above, it is integrated over the
// load β = n/M with composite Simpson in u = −ln(1 − β) (dβ = e^{−u} du): C'(β) ≈ (1 + e^{2u})/2
// is steep in β near α but C'·e^{−u} = cosh u is smooth in u. kQuadratureIntervals intervals;
// a node between two record counts takes both neighbours' distributions, weighted linearly; the
// weights are normalised so Σ P_k = 1. Tests hold it to the exact sum within 1e-6 (relative) in
// E[X(R)] at N = 16 000 and 19 000 of 20 000 slots (3e-5 in a full table, N = M − 1), and to
// Knuth's exact C_N. Cost: ~130 first-empty distributions, 0.7 s at load 0.99 of 2^23 slots.
// Throws std::invalid_argument for f outside [0, 1] or what FirstEmptyDistribution throws.
class LookupDistribution : public OffsetDistribution {
 public:
  static constexpr std::uint64_t kExactRecords = 4096;
  static constexpr int kQuadratureIntervals = 64;
  LookupDistribution(std::uint64_t slots_M, std::uint64_t records_N, double present_fraction);
  double present_fraction() const noexcept { return f_; }

 private:
  double f_;
};

// Eq. 2 / Eq. 3 parameters. Units: ns, ns/byte, READs/s, bytes/s, bytes, bytes. All must be
// finite and > 0 (std::invalid_argument otherwise).
struct CostParams {
  double c_ns;                // fixed cost of one READ (latency of a 0-byte READ)
  double alpha_ns_per_byte;   // per-byte cost (1 / link bandwidth)
  double rho0_ops_per_s;      // peak rate of 0-byte-payload READs
  double link_bytes_per_s;    // link bandwidth l, BYTES per second (100 Gb/s → 12.5e9)
  double header_bytes = 30;   // h: size of a 0-byte READ message (InfiniBand)
  double slot_bytes;          // w: size of one hash slot
};

// Seed 000 §5.1: c = 1290 ns, α = 0.08 ns/B, ρ0 = 87.17 M/s, l = 100 Gb/s, h = 30 B.
CostParams paper_cost_params(double slot_bytes = 8.0);

// T(R) = c + α·R·w in ns (Eq. 3). Throws std::invalid_argument if R == 0 or params invalid.
double read_cost_ns(const CostParams& params, std::uint64_t R);

// Largest R with R·w·ρ̂ ≤ l, ρ̂ = ρ0·h/(h+w) (Eq. 2, see the header comment); may be 0 if even
// one slot per READ would exceed the link. Saturates at UINT64_MAX.
std::uint64_t max_read_size_by_bandwidth(const CostParams& params);

struct ReadSizeChoice {
  std::uint64_t read_size = 0;       // R (slots per READ)
  double expected_reads = 0.0;       // E[X(R)]
  double cost_ns = 0.0;              // E[X(R)] · T(R)
  bool constrained = false;          // the bandwidth constraint (Eq. 2) was enforced in the search
  std::uint64_t max_read_size_by_bandwidth = 0;  // R_bw of Eq. 2 (informational)
  bool exceeds_bandwidth = false;    // read_size > max_read_size_by_bandwidth
};

// R* = argmin_{1 ≤ R ≤ R_max} E[X(R)]·T(R) (Eq. 1), R_max = max_R, or min(max_R, R_bw) when
// `constrained` (if R_bw == 0 the only candidate is R = 1, flagged exceeds_bandwidth). Ties go
// to the smaller R. Throws std::invalid_argument on invalid params or max_R == 0.
ReadSizeChoice optimal_read_size(const OffsetDistribution& dist, const CostParams& params,
                                 bool constrained, std::uint64_t max_R = 4096);

// Cost of a given R (no search; constrained = false). Throws std::invalid_argument if R == 0.
ReadSizeChoice evaluate_read_size(const OffsetDistribution& dist, const CostParams& params,
                                  std::uint64_t R);

// C'_k of Eq. 10 for a known cluster at offset x = cluster_offset with L = cluster_length filled
// slots followed by an empty slot (see the header comment). Throws std::invalid_argument if
// x + L overflows.
double c_with_cluster(const FirstEmptyDistribution& dist, std::uint64_t k,
                      std::uint64_t cluster_offset, std::uint64_t cluster_length);

// E[X(R)] = Σ_{i≥0} (1 − C'_{iR}) under the cluster hint. Throws std::invalid_argument if R == 0.
double expected_reads_with_cluster(const FirstEmptyDistribution& dist, std::uint64_t R,
                                   std::uint64_t cluster_offset, std::uint64_t cluster_length);

// Eq. 1 with C'_k. cluster_offset == 0: read_size = cluster_length + 1, expected_reads = 1.
// Otherwise argmin over 1 ≤ R ≤ min(R_max, x + L + 1) with R_max as in optimal_read_size.
// Throws std::invalid_argument on invalid params, max_R == 0 or if x + L + 1 overflows.
ReadSizeChoice optimal_read_size_with_cluster(const FirstEmptyDistribution& dist,
                                              const CostParams& params, bool constrained,
                                              std::uint64_t cluster_offset,
                                              std::uint64_t cluster_length,
                                              std::uint64_t max_R = 4096);

}  // namespace rdmahash::model
