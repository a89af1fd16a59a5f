// rdmahash — command-line front end.
//
//   rdmahash bench [options]     benchmark a scheme (see --help); `mpirun -n N rdmahash bench
//                                --fabric ucx ...` runs over UCX, `--fabric local` in one process.
//   rdmahash model [options]     the read-size cost model (seed 000 §3): R* for a table, or a curve.
//   rdmahash calibrate [options] measure the model's c, rho0, alpha, l on a fabric (seed 000 §3.5).
//   rdmahash serve [options]     a memory node as a service (no MPI); clients: bench --connect
//   rdmahash check-history FILE...  is a `bench --history` file (or the files of one served
//                                table's clients) linearizable? (execs the Go checker,
//                                rdmahash-check-history, installed beside this executable)
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/options.h"
#include "bench/ycsb.h"
#include "model/calibrate.h"
#include "cli/model_cmd.h"
#include "rdmahash/fabric.h"
#include "rdmahash/scheme.h"
#include "rdmahash/table.h"

namespace {

// --scheme's help: the registry's schemes, each with its summary.
std::string scheme_help() {
  std::string h;
  for (const auto& d : rdmahash::schemes()) h += std::string(h.empty() ? "" : "; ") + d.name + " (" + d.summary + ")";
  return h;
}

}  // namespace

namespace {

using rdmahash::bench::BenchOptions;
using rdmahash::bench::OptionText;

// The options that shape a table (shared by bench and serve; a --connect client takes them from
// the server: see table_option_names()).
// `serve` builds one table and serves it until stopped: some texts differ from the bench's, and its
// --load-factor is one number (`serve_load_factor`, parsed by parse_serve_load_factor()).
void add_table_options(CLI::App& cmd, BenchOptions& o, OptionText& text, std::string& distribution,
                       std::string* serve_load_factor) {
  const bool serve = serve_load_factor != nullptr;
  cmd.add_option("--scheme", text.scheme, "hash table scheme: " + scheme_help())->capture_default_str();
  cmd.add_option("--sbuckets", o.sbuckets, "continuity: SBuckets between two numbered buckets (1..4)")->capture_default_str();
  cmd.add_option("--max-resizes", o.max_resizes,
                 "continuity: the table starts 2^N times smaller than --records/--load-factor ask and doubles online "
                 "(the memory node migrates it while clients read and write) up to N times, when a segment is full")
      ->capture_default_str();
  cmd.add_option("--added-sbuckets", text.added_sbuckets,
                 "continuity: added SBuckets (seed 002 Fig. 10) for 1/D of the segment pairs, 0 or 1/D (e.g. 1/10): a "
                 "full segment overflows into its pair's added group before the table reports full or resizes")
      ->capture_default_str();
  cmd.add_option("--resize-pace", o.resize_pace,
                 "continuity: pairs the memory node migrates per write request during a resize, besides the key's own "
                 "and, unless 0, in a background thread while a resize runs (0: a resize advances only by the pairs of "
                 "the keys written)")
      ->capture_default_str();
  cmd.add_option("--pm-path", o.pm_path,
                 serve ? "continuity, level, hopscotch: keep the table in this file (pmem_map_file); an existing file is recovered, "
                         "not loaded"
                       : "continuity, level, hopscotch: keep the table in this file (pmem_map_file); an existing file is recovered, "
                         "not loaded; reloads between points write back the image as loaded");
  cmd.add_option("--slot-format", text.slot_format, "linear slot format: auto, set (63-bit keys) or inline (records)")
      ->capture_default_str();
  cmd.add_option("--storage", text.storage, "records inline in the table slots, in a heap (8-byte CAS-able slots), or heap4 (linear, bulk-loaded: 4 fingerprints per slot)")->capture_default_str();
  cmd.add_option("--slots-per-bucket", o.slots_per_bucket, "cuckoo: 1 or 4 slots per bucket")->capture_default_str();
  cmd.add_option("--neighborhood", o.neighborhood,
                 "hopscotch: H, the slots of a key's neighbourhood (2..64); a lookup READs them in one READ")
      ->capture_default_str();
  cmd.add_option("--memory-nodes", o.memory_nodes,
                 serve ? "memory nodes K the table is split over (one `rdmahash serve` each: --node 0..K-1)"
                       : "memory nodes K (ucx: ranks 0..K-1)")
      ->capture_default_str();
  cmd.add_option("--records", o.records, "records bulk-loaded before the run (1..2^34)")->capture_default_str();
  if (serve)
    cmd.add_option("--load-factor", *serve_load_factor, "load factor in (0,1) of the loaded table (records / slots)")
        ->type_name("FLOAT")->capture_default_str();
  else
    cmd.add_option("--load-factor", o.load_factors, "load factor(s) in (0,1); a list sweeps, e.g. 0.5,0.8")
        ->delimiter(',')->capture_default_str();
  cmd.add_option("--key-bytes", o.key_bytes, "4 or 8 (race: 8..256, the 8-byte key plus a fixed suffix)")->capture_default_str();
  cmd.add_option("--value-bytes", o.value_bytes, "value bytes: 0..120 inline, 0..4096 with --storage heap, up to 15360 with --scheme race")->capture_default_str();
  cmd.add_option("--initial-depth", o.initial_depth, "race: the table starts with 2^N subtables and grows by splitting")
      ->capture_default_str();
  cmd.add_option("--race-groups", o.race_groups, "race: bucket groups per subtable (3 buckets of 7 slots each)")
      ->capture_default_str();
  cmd.add_option("--distribution", distribution, "loaded keys and lookups: uniform, or zipf:THETA (a multimap)")
      ->capture_default_str();
  cmd.add_option("--chunk-order", text.chunk_order,
                 "linear tables: the order of a key's chunks, linear (contiguous) or quadratic (chunk i at home + "
                 "C·i(i+1)/2, modulo the shard; the table's property: one --chunk, fixed --read-size; linear.h)")
      ->capture_default_str();
  cmd.add_option("--tail-slots", o.tail_slots, "linear: overflow slots per shard, at most 2^36 (0: max(4096, S/32))")
      ->capture_default_str();
  cmd.add_option("--seed", o.seed,
                 serve ? "seed of the loaded keys and of hashing (the clients get it from the server)"
                       : "seed of keys, hashing and operation streams")
      ->capture_default_str();
}

// How memory nodes wait for work (rdmahash::ServeMode): `serve`, and the memory-node ranks of an
// mpirun `bench --fabric ucx`.
void add_serve_wait_options(CLI::App& cmd, BenchOptions& o, OptionText& text) {
  cmd.add_option("--serve-mode", text.serve_mode,
                 "how a memory node waits for UCX work: event (sleep on the worker's event fd whenever idle), hybrid "
                 "(spin --serve-spin-us after the last event, then sleep), poll (never sleep: takes a core) or auto "
                 "(hybrid when UCX can only use TCP, which makes the memory node execute every one-sided operation; "
                 "else event)")
      ->capture_default_str();
  cmd.add_option("--serve-spin-us", o.serve_spin_us, "hybrid mode: microseconds without an event before the memory node sleeps (below 1000: a spin stops every 1 ms to look at its sockets)")
      ->check(CLI::Range(1u, 999u))->capture_default_str();
}

void add_bench_options(CLI::App& cmd, BenchOptions& o, OptionText& text, std::vector<std::string>& workloads,
                       std::vector<std::string>& read_sizes, std::string& distribution,
                       std::vector<std::string>& ycsb_props) {
  add_table_options(cmd, o, text, distribution, nullptr);
  cmd.add_option("--fabric", text.fabric,
                 "local (threads in this process), ucx (launch with mpirun) or sim (a simulated RDMA fabric in "
                 "virtual time: --clients simulated clients, --sim-profile constants)")
      ->capture_default_str();
  cmd.add_option("--connect", o.connect,
                 "run one client against memory nodes served by `rdmahash serve` at HOST:PORT,... (node order); "
                 "the table options come from the servers")
      ->delimiter(',');
  cmd.add_option("--token-file", o.token_file,
                 "--connect: the file holding the memory nodes' shared secret (copy of their --token-file; mode 0600)");
  cmd.add_option("--cuckoo-probe", text.cuckoo_probe, "cuckoo lookups: parallel (k READs at once) or sequential")
      ->capture_default_str();
  cmd.add_flag("--symmetric", o.symmetric, "every rank hosts a shard and runs a client (PGAS layout)");
  cmd.add_option("--clients", o.clients, "client threads (local fabric; sim: simulated clients, up to 65536)")->capture_default_str();
  cmd.add_option("--sim-profile", o.sim_profile,
                 "--fabric sim: edr (seed 000's EDR constants) or a key=value profile file (e.g. from "
                 "`rdmahash calibrate --write-sim-profile FILE`)")
      ->capture_default_str();
  cmd.add_option("--direct-access", text.direct_access,
                 "ucx: reach same-host memory (own shard, peers' shared memory) with loads, stores and CPU atomics (on) "
                 "or with UCX requests (off)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd.add_option("--multi-get", text.multi_get,
                 "get and raw-read: each client posts --depth operations at a time as one multi-get (linear inline "
                 "tables: one batch per round with the next window of every key not yet answered, no coroutine per "
                 "key; other schemes: get as with off); find-or-put likewise as one multi-find-or-put (linear inline "
                 "tables of records larger than a word); off: one coroutine per operation, --depth in flight")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd.add_option("--huge-pages", text.huge_pages,
                 "shard regions on 2 MiB pages where the kernel allows: THP (madvise) for local regions, hugetlbfs "
                 "pages for UCX's when reserved (vm.nr_hugepages); off: 4 KB pages. JSON region_pages says what the "
                 "kernel gave")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd.add_option("--race-dir-cache", text.race_dir_cache, "race: clients cache the directory (on) or read its entry per operation (off)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd.add_option("--workload", workloads,
                 "get, get-all, find-or-put, mixed, read-intensive, write-intensive, raw-read, update (loaded keys, new values), "
                 "erase (each client its own loaded keys), kv-mix (a list runs each)")
      ->delimiter(',')->capture_default_str();
  cmd.add_option("--ops", o.ops, "operations per client")->capture_default_str();
  cmd.add_option("--depth", o.depth, "operations in flight per client")->capture_default_str();
  cmd.add_option("--chunk", o.chunks,
                 "find-or-put chunk size C (slots); a list sweeps the workloads that insert (seed 001's Table 1)")
      ->delimiter(',')->capture_default_str();
  cmd.add_option("--max-chunks", o.max_chunks, "find-or-put gives up after M chunks")->capture_default_str();
  cmd.add_option("--speculative-claim", text.speculative_claim,
                 "linear find-or-put: CAS the claim of the home slot in chunk 0's batch (on), only after a scan "
                 "(off, seed 001), or on while it wins at least as often as chunk 0 is full (auto)")
      ->check(CLI::IsMember({"on", "off", "auto"}))->capture_default_str();
  cmd.add_option("--read-size", read_sizes,
                 "lookup READ size: N or fixed:N slots, model, model-unconstrained, model-throughput (needs --profile), "
                 "cluster (a list sweeps)")
      ->delimiter(',')->capture_default_str();
  cmd.add_option("--profile", o.profile_path,
                 "cost-model parameters from `rdmahash calibrate` for model/cluster read sizes (default: seed 000's)")
      ->check(CLI::ExistingFile);
  cmd.add_option("--clusters", o.clusters, "clusters each client tracks for --read-size cluster")->capture_default_str();
  cmd.add_option("--location-cache", o.location_cache,
                 "cluster: header buckets each client caches (DrTM's location cache: a cached hit is one READ); 0: off")
      ->capture_default_str();
  cmd.add_option("--assumed-load-factor", o.assumed_load_factors,
                 "size model reads for this load factor instead of the table's (seed 000 §5.6; a list sweeps)")
      ->delimiter(',');
  cmd.add_option("--present-fraction", text.present_fraction,
                 "model read sizes: the share of gets taken to find their key and stop there; 0 prices every "
                 "lookup to the first empty slot (seed 000's model; cluster always uses it); auto: 1 where every "
                 "lookup is of a loaded key (get, update, mixed, read-/write-intensive, ycsb-run), else 0")
      ->capture_default_str();
  cmd.add_option("--read-bytes", o.read_bytes, "raw-read READ size in bytes (a list sweeps)")->delimiter(',')
      ->capture_default_str();
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
  cmd.add_option("--memory-limit", text.memory_limit,
                 "before each table's first point, measure this machine's random 8-byte read limit on a region of "
                 "the table's size (one core: dependent ns per load, and loads/s in prefetched batches of 16), with "
                 "4 KB pages (4k) or transparent huge pages (thp); rows report it (JSON memory_limit_ops_per_s)")
      ->check(CLI::IsMember({"off", "4k", "thp"}))->capture_default_str();
  cmd.add_flag("--cold", o.cold,
               "no warm-up: the first point also measures the clients' first touch of every page (default: "
               "each client reads one word per 4 KiB page of every shard first; JSON warmup_seconds)");
  cmd.add_flag("--keep-table", o.keep_table,
               "do not reload the table after a point that wrote: each point starts where the last ended "
               "(JSON load_factor_start/end); default: every point starts from the bulk-loaded table");
  cmd.add_option("--keys", o.kv_keys, "kv-mix: the keys the clients contend on (half loaded, half absent)")
      ->capture_default_str();
  cmd.add_option("--history", o.history_path,
                 "kv-mix: record every operation of every client to FILE (check with `rdmahash check-history FILE`)");
  cmd.add_option("--json", o.json_path, "append one JSON object per point to FILE (JSON Lines)");
  cmd.add_flag_callback("--no-progress", [&o] { o.progress = false; }, "no progress bar while loading");
  cmd.add_flag("--quiet", o.quiet, "no summary table on stdout");
  add_serve_wait_options(cmd, o, text);
  // How clients wait for their requests (rdmahash::ClientWait): mpirun client ranks and --connect.
  cmd.add_option("--client-wait", text.client_wait,
                 "how a ucx client waits for its requests: poll (progress in a loop), hybrid (spin --client-spin-us "
                 "without an event, then sleep on the worker's event fd; no spin while the machine has more runnable "
                 "tasks than CPUs), event (sleep as soon as nothing is ready) "
                 "or auto (hybrid when UCX can only use TCP, else poll)")
      ->capture_default_str();
  cmd.add_option("--read-coalescing", text.read_coalescing,
                 "ucx clients: send a batch's READs, WRITEs, CASes and FAAs to one memory node as one active "
                 "message performed in posting order (not when the batch sends that node an RPC; atomics only where "
                 "no NIC performs atomics): on, off, or auto (on when UCX can only use TCP, whose emulated "
                 "requests cost the memory node's CPU a message each)")
      ->capture_default_str();
  cmd.add_option("--client-spin-us", o.client_spin_us, "--client-wait hybrid: microseconds without an event before a client sleeps")
      ->capture_default_str();

}

// "rdmahash bench" etc.: the subcommand named on the command line, for error messages.
std::string command_name(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "bench" || a == "serve" || a == "model" || a == "calibrate" || a == "check-history") return "rdmahash " + a;
  }
  return "rdmahash";
}

// CLI11 reads "-1" into an unsigned option as 2^64-1 (and "-5" as 2^64-5): every unsigned option of
// every subcommand refuses a sign instead, so the message says what is wrong.
void refuse_negative_unsigned(CLI::App& app) {
  const CLI::Validator not_negative(
      [](std::string& v) -> std::string {
        const size_t i = v.find_first_not_of(" \t");
        return i != std::string::npos && v[i] == '-' ? "must not be negative, got " + v : std::string();
      },
      "", "NOT_NEGATIVE");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* opt : sub->get_options())
      if (opt->get_type_name().rfind("UINT", 0) == 0) opt->check(not_negative);
}

// A comma-separated list with an empty element ("," or "a," or "a,,b"): CLI11 drops the empty
// elements and then takes the next argument ("--quiet") as the list's value. Returns the error
// message naming the option, or empty.
std::string empty_list_element(CLI::App& app, int argc, char** argv) {
  CLI::App* sub = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (sub == nullptr) {
      for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
        if (s->get_name() == a) sub = s;
      continue;
    }
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const CLI::Option* opt = sub->get_option_no_throw(name);
    if (opt == nullptr || opt->get_delimiter() != ',') continue;
    if (eq == std::string::npos && i + 1 >= argc) continue;  // CLI11 reports the missing value
    const std::string value = eq != std::string::npos ? a.substr(eq + 1) : argv[i + 1];
    if (value.empty() || value.front() == ',' || value.back() == ',' || value.find(",,") != std::string::npos)
      return name + " '" + value + "' has an empty element: give a comma-separated list of values (e.g. " + name +
             " a,b)";
  }
  return {};
}

// serve's --load-factor: one number (BenchOptions::error() checks its range).
double parse_serve_load_factor(const std::string& text) {
  if (text.find(',') != std::string::npos)
    throw rdmahash::InvalidArgument("rdmahash serve builds one table: give one --load-factor, got '" + text + "'");
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size())
    throw rdmahash::InvalidArgument("--load-factor must be a number in (0, 1), got '" + text + "'");
  return v;
}

// Replaces this process with the Go checker (check/main.go) beside this executable.
int exec_checker(const std::vector<std::string>& files, double timeout_s, const std::string& html) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string checker = (ec ? std::filesystem::path(".") : self.parent_path()) / "rdmahash-check-history";
  std::vector<std::string> args{checker, "-timeout-per-key", std::to_string(timeout_s) + "s"};
  if (!html.empty()) args.insert(args.end(), {"-html", html});
  args.push_back("--");
  args.insert(args.end(), files.begin(), files.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv(checker.c_str(), argv.data());
  std::fprintf(stderr, "rdmahash check-history: error: cannot run the checker %s: %s (it is built with Go: "
               "install golang-go and rebuild)\n", checker.c_str(), std::strerror(errno));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rdmahash: hash tables in remote memory over one-sided operations"};
  app.require_subcommand(1);
  BenchOptions opts;
  OptionText opts_text;
  std::vector<std::string> workloads{"get"}, read_sizes{"8"};
  std::string distribution = "uniform";
  std::vector<std::string> ycsb_props;
  CLI::App* bench = app.add_subcommand("bench", "benchmark a scheme over a fabric");
  add_bench_options(*bench, opts, opts_text, workloads, read_sizes, distribution, ycsb_props);
  BenchOptions serve_opts;
  OptionText serve_text;
  std::string serve_distribution = "uniform";
  rdmahash::bench::ServeOptions serve_cfg;
  CLI::App* serve = app.add_subcommand(
      "serve", "run memory node N of a table as a service (no MPI) that `rdmahash bench --connect HOST:PORT,...` "
               "clients reach; stops cleanly on SIGTERM or SIGINT");
  std::string serve_load_factor = "0.5";
  add_table_options(*serve, serve_opts, serve_text, serve_distribution, &serve_load_factor);
  serve->add_option("--listen", serve_cfg.listen,
                    "IPv4 HOST:PORT to listen on; UCX's own sockets use the same interface (port 0: any free port, "
                    "printed when ready)")
      ->capture_default_str();
  serve->add_option("--token-file", serve_cfg.token_file,
                    "shared secret clients must prove they hold (challenge-response; never sent); created with mode "
                    "0600 if missing; required when --listen is not a loopback address (see docs/security.md)");
  add_serve_wait_options(*serve, serve_opts, serve_text);
  serve->add_option("--chunk", serve_opts.chunks,
                    "--chunk-order quadratic: the chunk size C of the table's probe sequence (clients take it)")
      ->capture_default_str();
  serve->add_option("--node", serve_cfg.node, "this server is memory node N of --memory-nodes")->capture_default_str();
  serve->add_option("--capacity", serve_cfg.capacity,
                    "records the table may come to hold, --records..2^34 (sizes race's directory, linear heaps and level's "
                    "resizes; default: records + max(records, 100000))");
  serve->add_flag_callback("--no-progress", [&serve_opts] { serve_opts.progress = false; }, "no progress bar while loading");
  rdmahash::cli::ModelCommand model_cmd(app);
  rdmahash::cli::CalibrateCommand calibrate_cmd(app);
  std::vector<std::string> history_files;
  std::string history_html;
  double history_timeout = 60;
  CLI::App* check = app.add_subcommand("check-history", "check that a `bench --history` file is linearizable (Porcupine, per-key KV model); exit 0 linearizable, 1 violation, 2 bad input (options, an unreadable or malformed file), 3 unknown (timeout)");
  check->add_option("FILE", history_files,
                    "history file(s) written by rdmahash bench --history: one run's file, or the files of every "
                    "--connect client of one served table")
      ->required();
  check->add_option("--timeout-per-key", history_timeout, "seconds per key before giving up (result: unknown, exit 3)")
      ->capture_default_str();
  check->add_option("--html", history_html, "where to write the visualization of a violating key (default: FILE.html)");
  refuse_negative_unsigned(app);
  if (const std::string err = empty_list_element(app, argc, argv); !err.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", command_name(argc, argv).c_str(), err.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and succeeds; every other parse error follows the CLI's one error contract.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "%s: error: %s\n", command_name(argc, argv).c_str(), e.what());
    return 2;
  }
  if (model_cmd.parsed()) return model_cmd.run();
  if (serve->parsed()) {
    try {
      if (const std::string err = rdmahash::bench::apply_option_text(serve_text, serve_opts); !err.empty())
        throw rdmahash::InvalidArgument(err);
      serve_opts.zipf_theta = rdmahash::bench::parse_distribution(serve_distribution);
      serve_opts.load_factors = {parse_serve_load_factor(serve_load_factor)};
      return rdmahash::bench::run_serve(serve_opts, serve_cfg);
    } catch (const rdmahash::InvalidArgument& e) {
      std::fprintf(stderr, "rdmahash serve: error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmahash serve: error: %s\n", e.what());
      return 1;
    }
  }
  if (calibrate_cmd.parsed()) return calibrate_cmd.run(argc, argv);
  if (check->parsed()) {
    if (!(history_timeout > 0 && history_timeout < 1e6)) {
      std::fprintf(stderr, "rdmahash check-history: error: --timeout-per-key must be in (0, 10^6) seconds\n");
      return 2;
    }
    return exec_checker(history_files, history_timeout, history_html);
  }

  try {
    if (const std::string err = rdmahash::bench::apply_option_text(opts_text, opts); !err.empty())
      throw rdmahash::InvalidArgument(err);
    opts.workloads.clear();
    for (const auto& w : workloads) opts.workloads.push_back(rdmahash::bench::parse_workload(w));
    opts.read_sizes.clear();
    for (const auto& r : read_sizes) opts.read_sizes.push_back(rdmahash::bench::parse_read_size(r));
    opts.zipf_theta = rdmahash::bench::parse_distribution(distribution);
    for (const auto& p : ycsb_props) opts.ycsb_overrides.push_back(rdmahash::bench::ycsb::parse_override(p));
    if (!opts.profile_path.empty()) {
      const rdmahash::model::Profile profile = rdmahash::model::load_profile(opts.profile_path);
      opts.cost_params = profile.cost_params();
      const bool wants_throughput = std::any_of(opts.read_sizes.begin(), opts.read_sizes.end(), [](const auto& r) {
        return r.kind == rdmahash::ReadSizeSpec::Kind::kModelThroughput;
      });
      // throughput_cost_params() throws, naming the problem, for a profile without the throughput test.
      if (wants_throughput || profile.has_throughput()) opts.throughput_cost_params = profile.throughput_cost_params();
    }
    if (!ycsb_props.empty() && opts.ycsb_path.empty()) throw rdmahash::InvalidArgument("-p name=value needs --ycsb FILE");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
    return 2;
  }
  opts.chunk_given = bench->count("--chunk") > 0;
  if (auto err = opts.error(); !err.empty()) {
    std::fprintf(stderr, "rdmahash bench: error: %s\n", err.c_str());
    return 2;
  }

  // Tests only: clients that die holding a lock (tests/serve_kill_test.sh, lock recovery).
  if (const char* e = std::getenv("RDMAHASH_TEST_DIE_HOLDING_LOCK")) opts.die_holding_lock = std::strtoull(e, nullptr, 10);
  // Tests only: a run killed while bulk-loading a new --pm-path file (tests/*_pm_reopen.sh).
  if (const char* e = std::getenv("RDMAHASH_TEST_DIE_LOADING")) opts.die_loading = std::strtoull(e, nullptr, 10);
  if (!opts.token_file.empty() && opts.connect.empty()) {
    std::fprintf(stderr, "rdmahash bench: error: --token-file goes with --connect (an mpirun job has no handshake)\n");
    return 2;
  }
  if (!opts.connect.empty()) {
    // The table is the servers': its options come from memory node 0, so the command line must not
    // say something else about it.
    std::string conflict;
    for (const auto& name : rdmahash::bench::table_option_names())
      if (bench->count(name) > 0 && conflict.empty()) conflict = name;
    if (!conflict.empty())
      conflict += " describes the table, which `rdmahash serve` defines: drop it with --connect";
    else if (bench->count("--fabric") > 0 && opts.fabric != rdmahash::bench::FabricKind::kUcx)
      conflict = "--connect runs over UCX: drop --fabric " + opts_text.fabric;
    else if (bench->count("--serve-mode") > 0 || bench->count("--serve-spin-us") > 0)
      conflict = "--serve-mode and --serve-spin-us tell memory nodes how to wait: give them to `rdmahash serve`, not to a --connect client";
    else if (!opts.ycsb_path.empty())
      conflict = "--ycsb starts from an empty table, which a served table is not: drop it with --connect";
    else if (opts.symmetric || bench->count("--clients") > 0)
      conflict = "--connect runs one client per process (start more processes for more clients): drop " +
                 std::string(opts.symmetric ? "--symmetric" : "--clients");
    if (!conflict.empty()) {
      std::fprintf(stderr, "rdmahash bench: error: %s\n", conflict.c_str());
      return 2;
    }
    try {
      return rdmahash::bench::run_connect(opts);
    } catch (const std::invalid_argument& e) {  // bad input (options, addresses, a refused connection)
      std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmahash bench: error: %s\n", e.what());
      return 1;
    }
  }

  const bool in_process = opts.fabric != rdmahash::bench::FabricKind::kUcx;
  if (opts.fabric != rdmahash::bench::FabricKind::kSim && bench->count("--sim-profile") > 0) {
    std::fprintf(stderr, "rdmahash bench: error: --sim-profile applies to --fabric sim\n");
    return 2;
  }
  if (in_process && (bench->count("--serve-mode") > 0 || bench->count("--serve-spin-us") > 0)) {
    std::fprintf(stderr, "rdmahash bench: error: --serve-mode and --serve-spin-us apply to --fabric ucx (the local fabric has no memory node processes)\n");
    return 2;
  }
  if (in_process && bench->count("--read-coalescing") > 0) {
    std::fprintf(stderr, "rdmahash bench: error: --read-coalescing applies to --fabric ucx and --connect (local clients call no UCX)\n");
    return 2;
  }
  if (in_process && (bench->count("--client-wait") > 0 || bench->count("--client-spin-us") > 0)) {
    std::fprintf(stderr, "rdmahash bench: error: --client-wait and --client-spin-us apply to --fabric ucx and --connect (local clients call no UCX)\n");
    return 2;
  }
  if (in_process) {
    try {
      return opts.fabric == rdmahash::bench::FabricKind::kSim ? rdmahash::bench::run_sim(opts)
                                                               : rdmahash::bench::run_local(opts);
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
