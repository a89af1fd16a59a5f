// `rdmahash model` / `rdmahash calibrate`: see model_cmd.h.
#include "cli/model_cmd.h"

#include <mpi.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <algorithm>
#include <fstream>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bench/options.h"
#include "bench/sysinfo.h"
#include "model/calibrate.h"
#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/sim_fabric.h"
#include "rdmahash/model.h"
#include "rdmahash/table.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash::cli {
namespace {

using nlohmann::json;
namespace m = rdmahash::model;

// An input error: reported as `rdmahash <cmd>: error: <what>`, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void require_positive(const char* flag, double v) {
  if (!std::isfinite(v) || !(v > 0)) throw UsageError(std::string(flag) + " must be a positive number (got " + num(v) + ")");
}

// "R1-R2" or "R".
std::pair<uint64_t, uint64_t> parse_range(const std::string& s) {
  auto parse_u = [&](const std::string& t) -> uint64_t {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError("--curve must be R1-R2 with integers 1 <= R1 <= R2 (got '" + s + "')");
    errno = 0;
    const unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
    if (errno == ERANGE) throw UsageError("--curve bound too large: '" + t + "'");
    return v;
  };
  const size_t dash = s.find('-');
  const uint64_t lo = parse_u(s.substr(0, dash));
  const uint64_t hi = dash == std::string::npos ? lo : parse_u(s.substr(dash + 1));
  if (lo == 0 || hi < lo) throw UsageError("--curve must be R1-R2 with integers 1 <= R1 <= R2 (got '" + s + "')");
  if (hi - lo >= 1000000) throw UsageError("--curve spans more than 1000000 read sizes");
  return {lo, hi};
}

}  // namespace

// ------------------------------------------------------------------------------------------
// rdmahash model
// ------------------------------------------------------------------------------------------

ModelCommand::ModelCommand(CLI::App& app) {
  const m::CostParams d = m::paper_cost_params();
  cmd_ = app.add_subcommand("model", "the read-size cost model (seed 000 §3): R* for a table, one R, or a curve");
  cmd_->footer(
      "The READ size R* minimises E[X(R)]*T(R), T(R) = c + alpha*R*w (Eq. 1, 3), subject to\n"
      "R*w*rho0*h/(h+w) <= l (Eq. 2; --unconstrained drops it). Defaults for c, alpha, rho0, l are seed 000's\n"
      "(§5.1): c = 1290 ns, alpha = 0.08 ns/B, rho0 = 87.17e6 READs/s, l = 100 Gb/s = 12.5e9 B/s.\n"
      "--profile takes them from `rdmahash calibrate`; explicit flags override both.");
  o_records_ = cmd_->add_option("--records", records_, "N: records in the table (required)");
  o_slots_ = cmd_->add_option("--slots", slots_, "M: slots in the table (or --load-factor)");
  o_lf_ = cmd_->add_option("--load-factor", load_factor_, "F in (0,1): M = ceil(N/F) (or --slots)");
  cmd_->add_option("--slot-bytes", slot_bytes_, "w: bytes per slot")->capture_default_str();
  cmd_->add_option("--header-bytes", header_bytes_, "h: bytes of a 0-byte READ message (InfiniBand: 30)")
      ->capture_default_str();
  o_c_ = cmd_->add_option("--c-ns", c_ns_, "c: fixed cost of one READ, ns (default " + num(d.c_ns) + ")");
  o_alpha_ = cmd_->add_option("--alpha-ns-per-byte", alpha_,
                              "alpha: cost per byte, ns/B (default " + num(d.alpha_ns_per_byte) + ")");
  o_rho0_ = cmd_->add_option("--rho0", rho0_, "rho0: peak rate of small READs, READs/s (default " +
                                                   num(d.rho0_ops_per_s) + ")");
  o_link_ = cmd_->add_option("--link-bytes-per-s", link_,
                             "l: link bandwidth, BYTES/s (default " + num(d.link_bytes_per_s) + " = 100 Gb/s)");
  o_profile_ = cmd_->add_option("--profile", profile_, "take c, rho0, alpha, l from a `rdmahash calibrate` profile");
  cmd_->add_flag("--unconstrained", unconstrained_, "ignore the bandwidth constraint (Eq. 2)");
  cmd_->add_option("--present-fraction", present_fraction_text_,
                   "the share of lookups whose key is present and which stop at it (Knuth's successful search); "
                   "0: every lookup reads to the first empty slot, seed 000's model")
      ->capture_default_str();
  cmd_->add_flag("--throughput", throughput_,
                 "with --profile: c and alpha from its throughput fit (time per READ at depth vs size), the "
                 "model of `bench --read-size model-throughput`");
  cmd_->add_option("--max-read-size", max_read_size_, "largest R searched")->capture_default_str();
  o_read_size_ = cmd_->add_option("--read-size", read_size_, "evaluate this R instead of optimising");
  o_cluster_offset_ = cmd_->add_option("--cluster-offset", cluster_offset_,
                                       "cluster hint (Eq. 10): offset x of the next cluster from the probe start");
  o_cluster_length_ = cmd_->add_option("--cluster-length", cluster_length_,
                                       "cluster hint: its length L (the slot at x+L is empty)");
  o_curve_ = cmd_->add_option("--curve", curve_, "also print E[X(R)] and the cost for every R in R1-R2");
  cmd_->add_flag("--json", json_, "print one JSON object");
}

int ModelCommand::run() {
  try {
    // --- inputs ---------------------------------------------------------------------------
    if (!o_records_->count()) throw UsageError("--records is required");
    if (records_ == 0) throw UsageError("--records must be at least 1");
    if (o_slots_->count() && o_lf_->count()) throw UsageError("give either --slots or --load-factor, not both");
    if (!o_slots_->count() && !o_lf_->count()) throw UsageError("give --slots M or --load-factor F");
    uint64_t M = slots_;
    if (o_lf_->count()) {
      if (!(load_factor_ > 0 && load_factor_ < 1))
        throw UsageError("--load-factor must be in (0,1) (got " + num(load_factor_) + ")");
      const double slots = std::ceil(static_cast<double>(records_) / load_factor_);
      if (!(slots <= static_cast<double>(m::FirstEmptyDistribution::kMaxSlots)))
        throw UsageError("the table is too large: ceil(N/F) exceeds 2^52 slots");
      M = static_cast<uint64_t>(slots);
    }
    if (records_ >= M)
      throw UsageError("records N (" + std::to_string(records_) + ") must be less than slots M (" +
                       std::to_string(M) + ")");
    if (M > m::FirstEmptyDistribution::kMaxSlots) throw UsageError("--slots must be at most 2^52");
    if (o_read_size_->count() && read_size_ == 0) throw UsageError("--read-size must be at least 1");
    if (max_read_size_ == 0) throw UsageError("--max-read-size must be at least 1");
    if (o_cluster_offset_->count() != o_cluster_length_->count())
      throw UsageError("--cluster-offset and --cluster-length must be given together");
    const bool cluster = o_cluster_offset_->count() > 0;
    if (cluster && cluster_offset_ > UINT64_MAX - cluster_length_ - 1)
      throw UsageError("--cluster-offset + --cluster-length is too large");
    if (auto f = bench::parse_fraction(present_fraction_text_)) present_fraction_ = *f;
    else throw UsageError("--present-fraction must be a number in [0, 1] (got '" + present_fraction_text_ + "')");
    if (cluster && present_fraction_ > 0)
      throw UsageError("--present-fraction with --cluster-offset: cluster hints (Eq. 10) price scans to the first "
                       "empty slot; give --present-fraction 0");
    std::pair<uint64_t, uint64_t> curve{0, 0};
    if (o_curve_->count()) curve = parse_range(curve_);

    // --- parameters: seed 000 defaults < profile < flags ------------------------------------
    m::CostParams p = m::paper_cost_params(slot_bytes_);
    json sources = {{"c_ns", "seed000"}, {"alpha_ns_per_byte", "seed000"},
                    {"rho0_ops_per_s", "seed000"}, {"link_bytes_per_s", "seed000"}};
    if (o_profile_->count()) {
      const m::Profile prof = m::load_profile(profile_);  // throws ProfileError
      p = throughput_ ? prof.throughput_cost_params(slot_bytes_) : prof.cost_params(slot_bytes_);
      for (auto& [k, v] : sources.items()) v = "profile";
      if (throughput_) sources["c_ns"] = sources["alpha_ns_per_byte"] = "profile throughput fit";
    } else if (throughput_) {
      throw UsageError("--throughput takes c and alpha from a profile: give --profile FILE");
    }
    if (o_c_->count()) { p.c_ns = c_ns_; sources["c_ns"] = "flag"; }
    if (o_alpha_->count()) { p.alpha_ns_per_byte = alpha_; sources["alpha_ns_per_byte"] = "flag"; }
    if (o_rho0_->count()) { p.rho0_ops_per_s = rho0_; sources["rho0_ops_per_s"] = "flag"; }
    if (o_link_->count()) { p.link_bytes_per_s = link_; sources["link_bytes_per_s"] = "flag"; }
    p.slot_bytes = slot_bytes_;
    p.header_bytes = header_bytes_;
    require_positive("--c-ns", p.c_ns);
    require_positive("--alpha-ns-per-byte", p.alpha_ns_per_byte);
    require_positive("--rho0", p.rho0_ops_per_s);
    require_positive("--link-bytes-per-s", p.link_bytes_per_s);
    require_positive("--slot-bytes", p.slot_bytes);
    require_positive("--header-bytes", p.header_bytes);

    // --- the model ------------------------------------------------------------------------
    const m::FirstEmptyDistribution dist(M, records_);
    const m::LookupDistribution stops(M, records_, present_fraction_);  // = dist when the fraction is 0
    auto expected = [&](uint64_t R) {
      return cluster ? m::expected_reads_with_cluster(dist, R, cluster_offset_, cluster_length_)
                     : stops.expected_reads(R);
    };
    const bool constrained = !unconstrained_;
    m::ReadSizeChoice choice;
    if (o_read_size_->count()) {
      choice = m::evaluate_read_size(stops, p, read_size_);
      if (cluster) {
        choice.expected_reads = expected(read_size_);
        choice.cost_ns = choice.expected_reads * m::read_cost_ns(p, read_size_);
      }
    } else if (cluster) {
      choice = m::optimal_read_size_with_cluster(dist, p, constrained, cluster_offset_, cluster_length_,
                                                 max_read_size_);
    } else {
      choice = m::optimal_read_size(stops, p, constrained, max_read_size_);
    }
    const double rho_hat = p.rho0_ops_per_s * p.header_bytes / (p.header_bytes + p.slot_bytes);

    json out = {
        {"mode", o_read_size_->count() ? "evaluate" : "optimize"},
        {"slots", M},
        {"records", records_},
        {"load_factor", dist.load_factor()},
        {"slot_bytes", p.slot_bytes},
        {"header_bytes", p.header_bytes},
        {"c_ns", p.c_ns},
        {"alpha_ns_per_byte", p.alpha_ns_per_byte},
        {"rho0_ops_per_s", p.rho0_ops_per_s},
        {"link_bytes_per_s", p.link_bytes_per_s},
        {"param_sources", sources},
        {"profile", o_profile_->count() ? json(profile_) : json(nullptr)},
        {"max_read_size", max_read_size_},
        {"read_size", choice.read_size},
        {"read_bytes", static_cast<double>(choice.read_size) * p.slot_bytes},
        {"expected_reads", choice.expected_reads},
        {"read_cost_ns", m::read_cost_ns(p, choice.read_size)},
        {"cost_ns", choice.cost_ns},
        {"constrained", choice.constrained},
        {"max_read_size_by_bandwidth", choice.max_read_size_by_bandwidth},
        {"exceeds_bandwidth", choice.exceeds_bandwidth},
        {"payload_bytes_per_s_at_rho_hat", static_cast<double>(choice.read_size) * p.slot_bytes * rho_hat},
        {"expected_reads_one_slot", stops.expected_reads(1)},
        {"present_fraction", present_fraction_},
    };
    if (cluster) {
      out["cluster_offset"] = cluster_offset_;
      out["cluster_length"] = cluster_length_;
    }
    json curve_rows = json::array();
    if (o_curve_->count()) {
      for (uint64_t R = curve.first;; ++R) {
        const double e = expected(R), t = m::read_cost_ns(p, R);
        curve_rows.push_back({{"read_size", R},
                              {"expected_reads", e},
                              {"read_cost_ns", t},
                              {"cost_ns", e * t},
                              {"within_bandwidth", R <= choice.max_read_size_by_bandwidth}});
        if (R == curve.second) break;
      }
      out["curve"] = curve_rows;
    }

    if (json_) {
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    std::printf("table: N = %llu records, M = %llu slots, load factor %.6g, w = %g B\n",
                static_cast<unsigned long long>(records_), static_cast<unsigned long long>(M), dist.load_factor(),
                p.slot_bytes);
    std::printf("params: c = %g ns, alpha = %g ns/B, rho0 = %.4g READs/s, l = %.4g B/s, h = %g B (%s)\n", p.c_ns,
                p.alpha_ns_per_byte, p.rho0_ops_per_s, p.link_bytes_per_s, p.header_bytes,
                o_profile_->count() ? ("profile " + profile_).c_str() : "seed 000 defaults unless given");
    std::printf("bandwidth bound (Eq. 2): R <= %llu slots\n",
                static_cast<unsigned long long>(choice.max_read_size_by_bandwidth));
    std::printf("lookups: %g of them stop at their key, the rest at the first empty slot\n", present_fraction_);
    if (cluster)
      std::printf("cluster hint: offset %llu, length %llu\n", static_cast<unsigned long long>(cluster_offset_),
                  static_cast<unsigned long long>(cluster_length_));
    std::printf("%s R = %llu slots (%g B)%s\n", o_read_size_->count() ? "evaluated" : "optimal",
                static_cast<unsigned long long>(choice.read_size), static_cast<double>(choice.read_size) * p.slot_bytes,
                o_read_size_->count() ? "" : (choice.constrained ? ", bandwidth-constrained" : ", unconstrained"));
    std::printf("E[X(R)] = %.6g READs, T(R) = %.6g ns, cost E[X(R)]*T(R) = %.6g ns%s\n", choice.expected_reads,
                m::read_cost_ns(p, choice.read_size), choice.cost_ns,
                choice.exceeds_bandwidth ? "  (exceeds the bandwidth bound)" : "");
    if (o_curve_->count()) {
      std::printf("%10s %14s %12s %14s %s\n", "R", "E[X(R)]", "T(R) ns", "cost ns", "within-bw");
      for (const auto& row : curve_rows)
        std::printf("%10llu %14.6g %12.6g %14.6g %s\n", row["read_size"].get<unsigned long long>(),
                    row["expected_reads"].get<double>(), row["read_cost_ns"].get<double>(),
                    row["cost_ns"].get<double>(), row["within_bandwidth"].get<bool>() ? "yes" : "no");
    }
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "rdmahash model: error: %s\n", e.what());
  } catch (const m::ProfileError& e) {
    std::fprintf(stderr, "rdmahash model: error: %s\n", e.what());
  } catch (const std::invalid_argument& e) {  // the model library's own checks
    std::fprintf(stderr, "rdmahash model: error: %s\n", e.what());
  } catch (const std::domain_error& e) {  // load factor too close to 1 for the support limit
    std::fprintf(stderr, "rdmahash model: error: %s\n", e.what());
  } catch (const std::exception& e) {  // not bad input (bad_alloc, a bug): a message and status 1, as bench, never an abort
    std::fprintf(stderr, "rdmahash model: error: %s\n", e.what());
    return 1;
  }
  return 2;
}

// ------------------------------------------------------------------------------------------
// rdmahash calibrate
// ------------------------------------------------------------------------------------------

CalibrateCommand::CalibrateCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("calibrate", "measure the model's c, rho0, alpha, l on a fabric (seed 000 §3.5)");
  cmd_->footer(
      "c = median latency of 8-byte READs at depth 1; alpha = least-squares slope of median latency vs READ\n"
      "size (--sizes); rho0 = best rate of 8-byte READs over --rate-depth; l = payload bytes/s of\n"
      "--bandwidth-bytes READs at --bandwidth-depth. Writes a profile (JSON) for `rdmahash model --profile`.\n"
      "--fabric ucx: run under `mpirun -n 2` (rank 0: memory node, rank 1: client).");
  cmd_->add_option("--fabric", fabric_, "local (in-process) or ucx (launch with mpirun -n 2)")->capture_default_str();
  cmd_->add_option("--iterations", iterations_,
                   "depth-1 READs per latency size; the rate test uses 10x, the bandwidth test 1x")
      ->capture_default_str();
  cmd_->add_option("--region-bytes", region_bytes_, "size of the remote region READs are spread over")
      ->capture_default_str();
  cmd_->add_option("--out", out_, "write the profile to FILE (default: stdout)");
  cmd_->add_option("--sizes", sizes_, "READ sizes (bytes) of the latency fit (alpha); 8 B gives c")
      ->delimiter(',')->capture_default_str();
  cmd_->add_option("--rate-depth", rate_depths_, "depths of the 8-byte READ rate test (rho0: the best)")
      ->delimiter(',')->capture_default_str();
  cmd_->add_option("--bandwidth-bytes", bandwidth_bytes_, "READ size of the bandwidth test (l)")->capture_default_str();
  cmd_->add_option("--bandwidth-depth", bandwidth_depth_, "depth of the bandwidth test")->capture_default_str();
  cmd_->add_option("--seed", seed_, "seed of the READ offsets")->capture_default_str();
  cmd_->add_option("--throughput-sizes", throughput_sizes_,
                   "READ sizes (bytes) of the throughput fit: time per READ at --throughput-depth vs size "
                   "(`bench --read-size model-throughput`)")
      ->delimiter(',')->capture_default_str();
  cmd_->add_option("--throughput-depth", throughput_depth_, "READs in flight in the throughput test")
      ->capture_default_str();
  cmd_->add_option("--direct-access", direct_access_,
                   "--fabric ucx: on (a same-host memory node's region is read with loads, as bench's default) or off "
                   "(every READ is a UCX request: the path of `bench --direct-access off` and of remote nodes)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd_->add_option("--write-sim-profile", sim_profile_out_,
                   "--fabric local: also write a `bench --fabric sim --sim-profile` file describing this machine's "
                   "in-process fabric (one client, one memory node: client CPU per batch and per READ, copy bandwidth; "
                   "see docs/architecture.md, \"Simulated fabric\")");
}

namespace {

// Checks that FILE can be written without truncating anything yet.
bool can_write(const std::string& path) {
  if (path.empty()) return true;
  std::ofstream f(path, std::ios::app);
  return static_cast<bool>(f);
}

// Writes the profile and, when it went to a file, a one-paragraph summary on stdout.
void emit(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
    return;
  }
  std::ofstream f(path, std::ios::trunc);
  f << text << '\n';
  f.close();
  if (!f) throw std::runtime_error("cannot write --out file '" + path + "'");
  const m::Profile p = m::profile_from_json(text);
  std::printf("fabric %s%s: c = %.4g ns, rho0 = %.4g READs/s, alpha = %.4g ns/B (%s), l = %.4g B/s -> %s\n",
              p.fabric.c_str(), [&] {
                for (const auto& [k, v] : p.env)
                  if (k == "UCX_TLS") return " (UCX_TLS=" + v + ")";
                return std::string();
              }().c_str(),
              p.c_ns, p.rho0_ops_per_s, p.alpha_ns_per_byte, p.alpha_source.c_str(), p.link_bytes_per_s,
              path.c_str());
  if (p.has_throughput())
    std::printf("throughput fit: %.4g ns per READ + %.4g ns/B at depth %u\n", p.throughput_fit.intercept,
                p.throughput_fit.slope, p.throughput.front().depth);
}

// Shared memory has no NIC and no wire: no latency, a NIC that is never the bottleneck, the
// measured copy bandwidth as the link, rpc_ns 0 (RPC handlers run on the client's thread on this
// fabric and are not measured).
// The in-process fabric as a sim profile for `client_cpu = measured` runs. The simulation times
// the scheme's, engine's and bench's code between two execute() calls itself, so the per-batch
// and per-request constants must be the fabric's part only: the CPU of Transport::execute
// measured directly (Profile::execute_cpu), not c and 1/ρ0, which also hold the measuring
// loop's engine and coroutine code (charged twice that way: the simulation ran 0.46-0.84 of
// the measured speed on a quiet machine, docs/results.md).
SimProfile sim_profile_of(const m::Profile& p, const std::string& name) {
  if (!p.execute_cpu.measured())
    throw std::runtime_error("the calibration did not measure the transport's CPU per execute()");
  SimProfile s;
  s.name = name;
  s.latency_ns = 0;
  s.nic_ops_per_s = 1e12;
  s.link_bytes_per_s = p.link_bytes_per_s;
  s.header_bytes = 0;
  s.qp_depth = 4096;
  s.rpc_ns = 0;
  s.client_request_ns = p.execute_cpu.per_request_ns;
  s.client_batch_ns = p.execute_cpu.per_batch_ns;
  s.client_cpu = SimProfile::ClientCpu::kMeasured;
  return s;
}

void write_sim_profile(const std::string& path, const m::Profile& p) {
  const SimProfile s = sim_profile_of(p, path);
  if (std::string e = sim_profile_error(s); !e.empty())
    throw std::runtime_error("the calibration gives no valid sim profile: " + e);
  const m::ExecuteCpu& x = p.execute_cpu;
  std::ofstream f(path, std::ios::trunc);
  f << "# rdmahash calibrate --fabric local on " << p.host << ", " << p.date << "\n"
    << "# measured: c = " << p.c_ns << " ns (8-byte READ, depth 1, through the engine), rho0 = " << p.rho0_ops_per_s
    << " READs/s (best depth), l = " << p.link_bytes_per_s << " B/s (64 KiB READs)\n"
    << "# Transport::execute alone (thread CPU, tight loop): " << x.batch_of_1_ns << " ns per batch of 1 READ, "
    << x.batch_of_d_ns << " ns per batch of " << x.depth << "\n"
    << "# client_request_ns = (batch of " << x.depth << " - batch of 1) / " << (x.depth - 1)
    << "; client_batch_ns = batch of 1 - client_request_ns\n"
    << "# shared memory: no latency, no NIC limit (nic_ops_per_s 1e12), no header; rpc_ns not measured\n"
    << "# client_cpu = measured: the client code's own CPU between two batches is timed as the\n"
    << "# simulation runs and charged on top of client_batch_ns and client_request_ns\n"
    << sim_profile_text(s);
  f.close();
  if (!f) throw std::runtime_error("cannot write --write-sim-profile file '" + path + "'");
}

}  // namespace

m::CalibrateOptions CalibrateCommand::options() const {
  m::CalibrateOptions o;
  o.iterations = iterations_;
  o.latency_sizes = sizes_;
  o.rate_depths = rate_depths_;
  o.bandwidth_bytes = bandwidth_bytes_;
  o.bandwidth_depth = bandwidth_depth_;
  o.throughput_sizes = throughput_sizes_;
  o.throughput_depth = throughput_depth_;
  o.seed = seed_;
  return o;
}

int CalibrateCommand::run(int& argc, char**& argv) {
  const m::CalibrateOptions o = options();
  try {
    if (fabric_ != "local" && fabric_ != "ucx") throw UsageError("--fabric must be local or ucx (got '" + fabric_ + "')");
    if (fabric_ == "local" && cmd_->count("--direct-access") > 0)
      throw UsageError("--direct-access applies to --fabric ucx (the in-process fabric has no UCX requests)");
    if (region_bytes_ < 4096 || region_bytes_ > (uint64_t{1} << 40))
      throw UsageError("--region-bytes must be in [4096, 2^40]");
    if (const uint64_t avail = rdmahash::bench::mem_available_bytes(); avail && region_bytes_ > avail)
      throw UsageError("--region-bytes " + std::to_string(region_bytes_) + " is more than the memory available (" +
                       std::to_string(avail) + " bytes)");
    o.validate(region_bytes_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmahash calibrate: error: %s\n", e.what());
    return 2;
  }
  if (!sim_profile_out_.empty() && fabric_ != "local") {
    std::fprintf(stderr, "rdmahash calibrate: error: --write-sim-profile describes the in-process fabric: use --fabric local\n");
    return 2;
  }
  if (fabric_ == "local") {
    if (!can_write(out_)) {
      std::fprintf(stderr, "rdmahash calibrate: error: cannot open --out file '%s' for writing\n", out_.c_str());
      return 2;
    }
    if (!can_write(sim_profile_out_)) {
      std::fprintf(stderr, "rdmahash calibrate: error: cannot open --write-sim-profile file '%s' for writing\n",
                   sim_profile_out_.c_str());
      return 2;
    }
    try {
      auto fabric = make_local_fabric({region_bytes_});
      auto transport = fabric->connect();
      Engine engine(*transport);
      m::Profile p = m::calibrate(engine, 0, region_bytes_, o);
      p.fabric = "local";
      emit(out_, m::to_json(p));
      if (!sim_profile_out_.empty()) write_sim_profile(sim_profile_out_, p);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmahash calibrate: error: %s\n", e.what());
      return 1;
    }
  }
  return run_ucx(argc, argv);
}

int CalibrateCommand::run_ucx(int& argc, char**& argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Checks every rank must agree on before the collective create().
  int out_ok = rank == 0 ? can_write(out_) : 1;
  MPI_Bcast(&out_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string err;
  if (size != 2)
    err = "calibrate over ucx needs exactly 2 ranks (rank 0: memory node, rank 1: client), got " +
          std::to_string(size) + ": launch with mpirun -n 2";
  else if (!out_ok)
    err = "cannot open --out file '" + out_ + "' for writing";
  if (!err.empty()) {
    if (rank == 0) std::fprintf(stderr, "rdmahash calibrate: error: %s\n", err.c_str());
    MPI_Finalize();
    return 2;
  }

  try {
    UcxFabricConfig fc;
    fc.memory_nodes = 1;
    fc.region_bytes = region_bytes_;
    fc.direct_access = direct_access_ == "on";
    auto fabric = UcxFabric::create(fc);
    if (fabric->is_memory_node()) {
      // Fault every page in now, so the client's READs do not measure first-touch page faults.
      auto region = fabric->local_region(0);
      std::memset(region.data(), 0x5a, region.size());
    }
    fabric->barrier();
    std::string text;
    if (fabric->is_client()) {
      auto transport = fabric->connect();
      Engine engine(*transport);
      m::Profile p = m::calibrate(engine, 0, region_bytes_, options());
      p.fabric = direct_access_ == "on" ? "ucx" : "ucx, direct access off";
      p.env = m::ucx_environment();
      text = m::to_json(p);
      fabric->client_done();
    }
    fabric->serve();
    auto all = fabric->gather(std::as_bytes(std::span(text.data(), text.size())));
    if (rank == 0) {
      for (const auto& b : all)
        if (!b.empty()) emit(out_, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
    }
    fabric->barrier();
  } catch (const std::exception& e) {
    // A failure on one rank would leave the other waiting in a collective: abort both.
    std::fprintf(stderr, "rdmahash calibrate: rank %d: error: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}

}  // namespace rdmahash::cli
