// rdmahash — command-line front end.
//
//   rdmahash bench [options]     benchmark a scheme (see --help); `mpirun -n N rdmahash bench
//                                --fabric ucx ...` runs over UCX, `--fabric local` in one process.
//   rdmahash model [options]     the read-size cost model (seed 000 §3): R* for a table, or a curve.
//   rdmahash calibrate [options] measure the model's c, rho0, alpha, l on a fabric (seed 000 §3.5).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/options.h"
#include "bench/ycsb.h"
#include "model/calibrate.h"
#include "cli/model_cmd.h"
#include "rdmahash/fabric.h"
#include "rdmahash/table.h"

namespace {

using rdmahash::bench::BenchOptions;

void add_bench_options(CLI::App& cmd, BenchOptions& o, std::vector<std::string>& workloads,
                       std::vector<std::string>& read_sizes, std::string& distribution,
                       std::vector<std::string>& ycsb_props) {
  cmd.add_option("--fabric", o.fabric, "local (threads in this process) or ucx (launch with mpirun)")
      ->capture_default_str();
  cmd.add_option("--scheme", o.scheme, "hash table scheme: linear, cuckoo or continuity")->capture_default_str();
  cmd.add_option("--sbuckets", o.sbuckets, "continuity: SBuckets between two numbered buckets (1..4)")->capture_default_str();
  cmd.add_option("--pm-path", o.pm_path,
                 "continuity: keep the table in this file (pmem_map_file); an existing file is recovered, not loaded");
  cmd.add_option("--slot-format", o.slot_format, "linear slot format: auto, set (63-bit keys) or inline (records)")
      ->capture_default_str();
  cmd.add_option("--storage", o.storage, "records inline in the table slots, in a heap (8-byte CAS-able slots), or heap4 (linear, bulk-loaded: 4 fingerprints per slot)")->capture_default_str();
  cmd.add_option("--slots-per-bucket", o.slots_per_bucket, "cuckoo: 1 or 4 slots per bucket")->capture_default_str();
  cmd.add_option("--cuckoo-probe", o.cuckoo_probe, "cuckoo lookups: parallel (k READs at once) or sequential")
      ->capture_default_str();
  cmd.add_option("--memory-nodes", o.memory_nodes, "memory nodes K (ucx: ranks 0..K-1)")->capture_default_str();
  cmd.add_flag("--symmetric", o.symmetric, "every rank hosts a shard and runs a client (PGAS layout)");
  cmd.add_option("--clients", o.clients, "client threads (local fabric only)")->capture_default_str();
  cmd.add_option("--records", o.records, "records bulk-loaded before the run")->capture_default_str();
  cmd.add_option("--load-factor", o.load_factors, "load factor(s) in (0,1); a list sweeps, e.g. 0.5,0.8")
      ->delimiter(',')->capture_default_str();
  cmd.add_option("--key-bytes", o.key_bytes, "4 or 8")->capture_default_str();
  cmd.add_option("--value-bytes", o.value_bytes, "inline value bytes, 0..120")->capture_default_str();
  cmd.add_option("--workload", workloads,
                 "get, get-all, find-or-put, mixed, read-intensive, write-intensive, raw-read (a list runs each)")
      ->delimiter(',');
  cmd.add_option("--ops", o.ops, "operations per client")->capture_default_str();
  cmd.add_option("--depth", o.depth, "operations in flight per client")->capture_default_str();
  cmd.add_option("--chunk", o.chunk, "find-or-put chunk size C (slots)")->capture_default_str();
  cmd.add_option("--max-chunks", o.max_chunks, "find-or-put gives up after M chunks")->capture_default_str();
  cmd.add_option("--read-size", read_sizes,
                 "lookup READ size: N or fixed:N slots, model, model-unconstrained, cluster (a list sweeps)")
      ->delimiter(',');
  cmd.add_option("--profile", o.profile_path,
                 "cost-model parameters from `rdmahash calibrate` for model/cluster read sizes (default: seed 000's)")
      ->check(CLI::ExistingFile);
  cmd.add_option("--clusters", o.clusters, "clusters each client tracks for --read-size cluster")->capture_default_str();
  cmd.add_option("--assumed-load-factor", o.assumed_load_factor,
                 "size model reads for this load factor instead of the table's (seed 000 §5.6)");
  cmd.add_option("--distribution", distribution, "loaded keys and lookups: uniform, or zipf:THETA (a multimap)")
      ->capture_default_str();
  cmd.add_option("--read-bytes", o.read_bytes, "raw-read READ size in bytes (a list sweeps)")->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--tail-slots", o.tail_slots, "overflow slots per shard (0: max(4096, S/32))");
  cmd.add_option("--seed", o.seed, "seed of keys, hashing and operation streams")->capture_default_str();
  cmd.add_option("--repeat", o.repeat, "run the whole sequence of points N times (medians on noisy machines)")
      ->capture_default_str();
  cmd.add_flag("--same-keys", o.same_keys, "every client issues the same key sequence (worst-case contention)");
  cmd.add_option("--ycsb", o.ycsb_path,
                 "run a YCSB core workload file (load phase, then run phase); records, ops, value size and mix "
                 "come from the file")
      ->check(CLI::ExistingFile);
  cmd.add_option("-p", ycsb_props, "override a YCSB property, as YCSB's client: -p name=value (repeatable)");
  cmd.add_flag("--ycsb-skip-unsupported", o.ycsb_skip_unsupported,
               "skip YCSB operations the scheme cannot do (scans) instead of failing; counted as skipped");
  cmd.add_option("--json", o.json_path, "append one JSON object per point to FILE (JSON Lines)");
  cmd.add_flag("!--no-progress", o.progress, "no progress bar while loading");
  cmd.add_flag("--quiet", o.quiet, "no summary table on stdout");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rdmahash: hash tables in remote memory over one-sided operations"};
  app.require_subcommand(1);
  BenchOptions opts;
  std::vector<std::string> workloads{"get"}, read_sizes{"8"};
  std::string distribution = "uniform";
  std::vector<std::string> ycsb_props;
  CLI::App* bench = app.add_subcommand("bench", "benchmark a scheme over a fabric");
  add_bench_options(*bench, opts, workloads, read_sizes, distribution, ycsb_props);
  rdmahash::cli::ModelCommand model_cmd(app);
  rdmahash::cli::CalibrateCommand calibrate_cmd(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (model_cmd.parsed()) return model_cmd.run();
  if (calibrate_cmd.parsed()) return calibrate_cmd.run(argc, argv);

  try {
    opts.workloads.clear();
    for (const auto& w : workloads) opts.workloads.push_back(rdmahash::bench::parse_workload(w));
    opts.read_sizes.clear();
    for (const auto& r : read_sizes) opts.read_sizes.push_back(rdmahash::bench::parse_read_size(r));
    opts.zipf_theta = rdmahash::bench::parse_distribution(distribution);
    for (const auto& p : ycsb_props) opts.ycsb_overrides.push_back(rdmahash::bench::ycsb::parse_override(p));
    if (!opts.profile_path.empty()) opts.cost_params = rdmahash::model::load_profile(opts.profile_path).cost_params();
    if (!ycsb_props.empty() && opts.ycsb_path.empty()) throw rdmahash::InvalidArgument("-p name=value needs --ycsb FILE");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
    return 2;
  }
  if (auto err = opts.error(); !err.empty()) {
    std::fprintf(stderr, "rdmahash bench: error: %s\n", err.c_str());
    return 2;
  }

  if (opts.fabric == "local") {
    try {
      return rdmahash::bench::run_local(opts);
    } catch (const rdmahash::InvalidArgument& e) {  // bad input (options, files): status 2
      std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
      return 1;
    }
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  try {
    status = rdmahash::bench::run_ucx(opts);
  } catch (const rdmahash::InvalidArgument& e) {
    // Every rank validates identically, so every rank gets here: report once, exit cleanly.
    if (rank == 0) std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
    MPI_Finalize();
    return 2;
  } catch (const std::exception& e) {
    // A failure on one rank would leave the others waiting in a collective: abort them all.
    std::fprintf(stderr, "rdmahash bench: rank %d: error: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
