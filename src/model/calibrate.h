// model/calibrate.h — model bootstrapping (seed 000 §3.5): measure the cost-model parameters of
// Eq. 2 and Eq. 3 on the fabric at hand, like qperf but through our own Engine and Transport.
//
// What is measured (all through one client's Engine against one memory node), after one
// sequential sweep of READs over the whole region (first-touch costs such as page faults in a
// shared-memory mapping would otherwise land in the first measurement), and after a short warm-up
// before each measurement:
//   * latency: for every size in `latency_sizes` (default 8 B … 64 KiB), `iterations` READs at
//     depth 1 (one READ per round trip) at random 8-byte-aligned offsets of the region; the
//     engine's per-operation latency (batch boundary to batch boundary) is recorded and the
//     median (plus p10/p90/min/mean) kept.
//   * c   = median depth-1 latency of a `small_bytes` (8 B) READ — the model's "latency of a
//           minimal READ" (the seed uses 0-byte READs; our fabric has no 0-byte READ).
//   * α   = least-squares slope of median latency vs READ size over `latency_sizes`, in ns/B.
//           A slope ≤ 0 (possible on fabrics where size hardly matters, e.g. shared memory with
//           noisy medians) cannot be used by the model (it needs α > 0): then α = 1e9 / l (the
//           seed's own choice, α = 1/l) and `alpha_source` says "inverse_bandwidth".
//   * ρ0  = peak rate of `small_bytes` READs: `rate_ops` READs at each depth of `rate_depths`
//           (the engine posts up to `depth` READs per batch), the best rate wins.
//   * l   = link bandwidth: `bandwidth_ops` READs of `bandwidth_bytes` (64 KiB) at depth
//           `bandwidth_depth` (16), payload bytes per second.
//   * throughput vs size (issue 30 item 4: what a pipelined client pays per READ): `iterations`
//           READs at depth `throughput_depth` (16, the benchmarks' depth) for every size in
//           `throughput_sizes`; the time per READ (1 / rate) is fitted as a + b·bytes
//           (`throughput_fit`). `throughput_cost_params()` puts a and b in Eq. 3's place of c and
//           α: T(R) becomes the time a READ of R slots occupies the pipeline (client CPU, copies,
//           the link) rather than its latency, so E[X(R)]·T(R) is the time per lookup at depth,
//           the model `--read-size model-throughput` minimises. Over loopback TCP the latency
//           model reads large windows (a round trip costs 20 µs, a byte 0.5 ns), while at depth a
//           byte costs copy CPU on both ends and smaller reads win.
//   * the transport's own client CPU (`ExecuteCpu`): Transport::execute called directly in a
//           tight loop (no engine, no coroutine), batches of 1 and of `execute_depth` (16)
//           `small_bytes` READs, timed with the thread's CPU clock around the whole loop (one
//           clock read per loop, not per batch), the median of 5 loops; then
//           per_request = (cpu(batch of D) - cpu(batch of 1)) / (D - 1) and
//           per_batch = cpu(batch of 1) - per_request (each at least 0). c and ρ0 include the
//           engine's and the measuring loop's code as well; these two do not, which is what a
//           simulated fabric that times the client's own code (sim `client_cpu = measured`) must
//           add for the fabric's part, and nothing more. Over UCX (`--fabric ucx`) execute() also
//           polls for the network's completions, so there the figures are the client's CPU per
//           batch including that wait, not the transport's own work.
//
// A `Profile` holds the four parameters, every raw measurement and where they were taken
// (fabric, UCX_* environment, host, UTC date). It round-trips through JSON (`to_json` /
// `profile_from_json`); `rdmahash calibrate` writes it and `rdmahash model --profile` reads it.
//
// This is an internal (not installed) part of the tools; the header is free of nlohmann::json.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/model.h"

namespace rdmahash::model {

// Thrown for a profile that cannot be read or is malformed (bad JSON, a missing or invalid field).
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// y ≈ slope·x + intercept by ordinary least squares.
struct LinearFit {
  double slope = 0.0;
  double intercept = 0.0;
  double r2 = 0.0;  // coefficient of determination (1 when every point is on the line)
};
// Throws std::invalid_argument if the sizes differ, there are fewer than 2 points, a value is not
// finite, or every x is the same.
LinearFit fit_line(std::span<const double> x, std::span<const double> y);

struct LatencySample {
  uint32_t bytes = 0;
  uint64_t samples = 0;
  double median_ns = 0, p10_ns = 0, p90_ns = 0, min_ns = 0, mean_ns = 0;
};

struct RateSample {
  uint32_t bytes = 0;
  uint32_t depth = 0;
  uint64_t ops = 0;
  double seconds = 0;
  double ops_per_s = 0;
  double bytes_per_s = 0;  // payload
};

// CPU per Transport::execute of small READs (see the header comment). Zero when not measured
// (profiles written before it existed).
struct ExecuteCpu {
  uint32_t depth = 0;         // D: the larger batch's requests
  uint64_t batches = 0;       // batches per timed loop (each size)
  double batch_of_1_ns = 0;   // median CPU per execute of 1 READ
  double batch_of_d_ns = 0;   // median CPU per execute of D READs
  double per_batch_ns = 0;    // the fit: execute(n READs) ≈ per_batch_ns + n · per_request_ns
  double per_request_ns = 0;
  bool measured() const { return depth > 1 && batches > 0; }
};

struct CalibrateOptions {
  uint64_t iterations = 10000;  // depth-1 READs per latency size
  std::vector<uint32_t> latency_sizes{8, 64, 256, 1024, 4096, 16384, 65536};
  uint32_t small_bytes = 8;     // size of the READ behind c and ρ0
  std::vector<uint32_t> rate_depths{64, 128, 256};
  uint64_t rate_ops = 0;        // READs per rate depth; 0: 10 × iterations
  uint32_t bandwidth_bytes = 65536;
  uint32_t bandwidth_depth = 16;
  uint64_t bandwidth_ops = 0;   // 0: iterations
  std::vector<uint32_t> throughput_sizes{8, 64, 256, 1024, 4096};  // the throughput fit's sizes
  uint32_t throughput_depth = 16;  // READs in flight in the throughput test
  uint32_t execute_depth = 16;  // D of ExecuteCpu
  uint64_t seed = 1;            // offsets of the READs
  // Throws std::invalid_argument naming the bad field (region_bytes: the target region's size).
  void validate(uint64_t region_bytes) const;
};

struct Profile {
  // The model's parameters (units as in CostParams).
  double c_ns = 0;
  double rho0_ops_per_s = 0;
  double alpha_ns_per_byte = 0;
  double link_bytes_per_s = 0;
  std::string alpha_source = "fit";  // "fit" or "inverse_bandwidth" (fit slope ≤ 0: α = 1e9/l)

  // Raw measurements.
  LinearFit latency_fit;
  std::vector<LatencySample> latency;
  std::vector<RateSample> rate;       // small READs at each rate depth
  std::vector<RateSample> bandwidth;  // large READs
  std::vector<RateSample> throughput;  // READs of each throughput size at the throughput depth
  LinearFit throughput_fit;            // ns per READ at that depth vs bytes (empty: not measured)
  ExecuteCpu execute_cpu;

  // Where and how.
  std::string fabric;                                    // "local", "ucx"
  std::vector<std::pair<std::string, std::string>> env;  // UCX_* variables of the client
  std::string host;
  std::string date;  // UTC, ISO 8601
  uint64_t region_bytes = 0;
  uint64_t iterations = 0;

  // Throws ProfileError unless the four parameters are finite and > 0.
  void validate() const;
  // The model's parameters for slots of `slot_bytes` and READ headers of `header_bytes`.
  CostParams cost_params(double slot_bytes = 8.0, double header_bytes = 30.0) const;
  // True when the profile has the throughput test (profiles written before it do not).
  bool has_throughput() const { return throughput.size() >= 2; }
  // Eq. 3's c and α from the throughput fit (see the header comment): c = the fit's intercept (at
  // least 1 ns), α = its slope, or 1e9 / l if the slope is not positive; ρ0, l, h as cost_params().
  // Throws ProfileError unless has_throughput().
  CostParams throughput_cost_params(double slot_bytes = 8.0, double header_bytes = 30.0) const;
};

// Runs every measurement against memory node `node` (a region of `region_bytes`) through
// `engine` and returns the profile with fabric-independent fields filled in (host and date from
// this process; the caller sets `fabric` and, for UCX, `env = ucx_environment()`). Throws
// std::invalid_argument for bad options, FabricError for transport failures.
Profile calibrate(Engine& engine, uint32_t node, uint64_t region_bytes, const CalibrateOptions& options);

// The process's UCX_* environment variables, sorted by name.
std::vector<std::pair<std::string, std::string>> ucx_environment();

// JSON text of a profile (one object; `indent` < 0: one line).
std::string to_json(const Profile& p, int indent = 2);
// Parses and validates a profile. Only the four parameters are required; the other fields are
// checked when present. Throws ProfileError with a message naming the problem.
Profile profile_from_json(std::string_view text);
// Reads a profile file. Throws ProfileError ("cannot read profile 'PATH'" or "profile 'PATH': ...").
Profile load_profile(const std::string& path);

}  // namespace rdmahash::model
