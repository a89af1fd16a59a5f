// `rdmahash model` and `rdmahash calibrate`: the read-size cost model (seed 000 §3) as a CLI, and
// the bootstrapping benchmark (§3.5) that measures its parameters on a fabric.
//
//   rdmahash model --records N (--slots M | --load-factor F) [--json] ...
//       optimal read size R* (Eq. 1, 2) or the cost of a given --read-size; --curve R1-R2 prints
//       E[X(R)] and the cost for every R in the range; --profile FILE takes c, ρ0, α, l from a
//       calibration profile (explicit flags override it).
//   rdmahash calibrate [--fabric local|ucx] [--out FILE] ...
//       measures c, ρ0, α, l and writes a profile (JSON). `--fabric ucx` runs under
//       `mpirun -n 2` (rank 0: memory node, rank 1: client).
//
// Both exit with status 2 and `rdmahash <cmd>: error: ...` on stderr for invalid input.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmahash::model {
struct CalibrateOptions;
}

namespace rdmahash::cli {

class ModelCommand {
 public:
  explicit ModelCommand(CLI::App& app);  // registers the `model` subcommand
  bool parsed() const { return cmd_->parsed(); }
  int run();  // exit status

 private:
  CLI::App* cmd_;
  uint64_t slots_ = 0, records_ = 0;
  double load_factor_ = 0;
  std::string present_fraction_text_ = "0";
  double present_fraction_ = 0;
  double slot_bytes_ = 8, header_bytes_ = 30;
  double c_ns_ = 0, alpha_ = 0, rho0_ = 0, link_ = 0;
  bool unconstrained_ = false;
  bool throughput_ = false;  // --throughput: c and alpha from the profile's throughput fit
  uint64_t read_size_ = 0, max_read_size_ = 4096;
  uint64_t cluster_offset_ = 0, cluster_length_ = 0;
  std::string curve_, profile_;
  bool json_ = false;
  CLI::Option *o_slots_, *o_records_, *o_lf_, *o_c_, *o_alpha_, *o_rho0_, *o_link_, *o_read_size_,
      *o_cluster_offset_, *o_cluster_length_, *o_curve_, *o_profile_;
};

class CalibrateCommand {
 public:
  explicit CalibrateCommand(CLI::App& app);  // registers the `calibrate` subcommand
  bool parsed() const { return cmd_->parsed(); }
  int run(int& argc, char**& argv);  // exit status; initialises MPI for --fabric ucx

 private:
  int run_ucx(int& argc, char**& argv);
  model::CalibrateOptions options() const;  // the measurement options the flags give
  CLI::App* cmd_;
  std::string fabric_ = "local";
  uint64_t iterations_ = 10000;
  uint64_t region_bytes_ = 64ull << 20;
  std::string out_;
  std::string sim_profile_out_;  // --write-sim-profile
  std::vector<uint32_t> sizes_{8, 64, 256, 1024, 4096, 16384, 65536};
  std::vector<uint32_t> rate_depths_{64, 128, 256};
  uint32_t bandwidth_bytes_ = 65536, bandwidth_depth_ = 16;
  uint64_t seed_ = 1;
  std::vector<uint32_t> throughput_sizes_{8, 64, 256, 1024, 4096};
  uint32_t throughput_depth_ = 16;
  std::string direct_access_ = "on";  // --fabric ucx: loads and stores to a same-host node (on) or UCX requests (off)
};

}  // namespace rdmahash::cli
