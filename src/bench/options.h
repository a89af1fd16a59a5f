// Benchmark configuration: one value, passed in; no globals.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <utility>
#include <vector>

#include "rdmahash/linear.h"
#include "rdmahash/model.h"
#include "rdmahash/scheme.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash::bench {

// kUpdate: update() of random loaded keys (the value fill_value writes: readers can verify it);
// kErase: erase() of loaded keys, each client its own (client c: key indices c, c + n, c + 2n, ...;
// past the loaded records the indices wrap and erases miss: outcomes.not_found).
enum class Workload { kGet, kGetAll, kFindOrPut, kMixed, kReadIntensive, kWriteIntensive, kRawRead, kUpdate, kErase,
                      kYcsbLoad, kYcsbRun, kKvMix };
const char* to_string(Workload w);
Workload parse_workload(const std::string& s);  // throws InvalidArgument

// A fraction in [0, 1] written as a plain decimal or exponent number ("0.5", "1e0"; no spaces,
// sign "+", hex or "nan"); -0 reads as 0. nullopt for anything else.
std::optional<double> parse_fraction(std::string_view s);

// Lookup read sizes: rdmahash::ReadSizeSpec (scheme.h).
ReadSizeSpec parse_read_size(const std::string& s);  // "8", "fixed:8", "model", ... ; throws InvalidArgument

// "uniform" → 0; "zipf:THETA" → THETA. Throws InvalidArgument.
double parse_distribution(const std::string& s);

// Value bytes a record can hold: inline slots and cuckoo inline buckets up to 120, heap records up
// to 4096 (YCSB's default 10 x 100-byte records fit).
constexpr uint32_t kMaxInlineValueBytes = 120;
constexpr uint32_t kMaxHeapValueBytes = 4096;

// Run sizes: --ops per client (each op keeps an 8-byte latency sample) and the records of a table
// (check_table_options' bound on --records). A --ycsb file's counts are held to the same.
constexpr uint64_t kMaxOps = uint64_t{1} << 32;
constexpr uint64_t kMaxRecords = uint64_t{1} << 34;

struct BenchOptions;
uint32_t max_value_bytes(const BenchOptions& o);  // by scheme and storage (rdmahash::max_value_bytes)

enum class FabricKind : uint8_t { kLocal, kUcx, kSim };
const char* to_string(FabricKind f);

// Every option's value is typed: the CLI binds the options that arrive as words (--storage heap)
// to an OptionText and apply_option_text parses them into BenchOptions, once; nothing below the
// CLI compares option strings.
struct BenchOptions {
  FabricKind fabric = FabricKind::kLocal;
  SchemeId scheme = SchemeId::kLinear;
  SlotFormatChoice slot_format = SlotFormatChoice::kAuto;  // auto: set unless values or 4-byte keys
  Storage storage = Storage::kInline;  // inline | heap (records out of band) | heap4 (linear)
  uint32_t slots_per_bucket = 4;       // cuckoo: 1 or 4
  CuckooLookup cuckoo_probe = CuckooLookup::kParallel;
  Switch race_dir_cache = Switch::kOn;  // race: clients cache the directory
  Switch direct_access = Switch::kOn;   // ucx: same-host regions by loads/stores/CPU atomics (on) or UCX requests (off)
  Switch multi_get = Switch::kOff;      // get and raw-read: `depth` at a time as one multi-get (KvClient::get_batch)
  Switch huge_pages = Switch::kOn;      // shard regions on 2 MiB pages where the kernel allows (fabric.h, RegionPages)
  ServeMode serve_mode = ServeMode::kAuto;  // ucx memory nodes (rdmahash::ServeMode)
  uint32_t serve_spin_us = 50;          // ucx memory nodes: hybrid mode's spin (rdmahash::kDefaultServeSpin)
  ClientWait client_wait = ClientWait::kAuto;  // ucx clients (rdmahash::ClientWait)
  ReadCoalescing read_coalescing = ReadCoalescing::kAuto;  // ucx clients (rdmahash::ReadCoalescing)
  uint32_t client_spin_us = 100;        // ucx clients: hybrid's spin (rdmahash::kDefaultClientSpin)
  uint32_t initial_depth = 0;          // race: 2^N subtables at start
  uint32_t race_groups = 64;           // race: bucket groups per subtable
  uint32_t sbuckets = 3;               // continuity: SBuckets per segment pair (1..4)
  uint32_t max_resizes = 0;            // continuity: starts 2^N times smaller, doubles online up to N times
  uint32_t added_sbucket_pairs = 0;    // continuity: added SBucket groups for 1/D of the segment pairs (0: none)
  uint32_t neighborhood = 8;           // hopscotch: slots of a key's neighbourhood, in [2, 64]
  uint32_t resize_pace = 2;            // continuity (memory node): pairs migrated per write besides the key's own
  std::string pm_path;                 // continuity, level: the table lives in this pmem file (reopened if it exists)
  uint32_t memory_nodes = 1;
  bool symmetric = false;
  uint32_t clients = 1;                // local fabric: client threads (ucx: the client ranks; sim: simulated clients)
  std::string sim_profile = "edr";     // sim fabric: "edr" or a profile file (rdmahash/sim_fabric.h)
  uint64_t records = 100000;
  std::vector<double> load_factors{0.5};
  uint32_t key_bytes = 8;
  uint32_t value_bytes = 0;
  std::vector<Workload> workloads{Workload::kGet};
  uint64_t ops = 100000;               // per client
  uint32_t depth = 16;
  std::vector<uint32_t> chunks{8};    // find-or-put chunk sizes C (a list sweeps the inserting workloads)
  uint32_t max_chunks = 128;
  // --memory-limit: before each table's first point, measure this machine's random-read limit on a
  // region of the table's size (model/memory_limit.h) with 4 KB or transparent huge pages; rows then
  // report it (memory_limit_ops_per_s). Off by default: it maps a second region of the table's size.
  enum class MemoryProbe : uint8_t { kOff, k4k, kThp };
  MemoryProbe memory_limit = MemoryProbe::kOff;
  ChunkOrder chunk_order = ChunkOrder::kLinear;  // linear: the table's chunk order (linear.h); quadratic: --chunk is the table's
  uint32_t served_chunk = 0;  // --connect: the served table's chunk size (table spec)
  bool chunk_given = false;   // --chunk was on the command line (--connect: checked against a quadratic table's)
  SpeculativeClaim speculative_claim = SpeculativeClaim::kAuto;  // linear find-or-put: claim the home slot with chunk 0's READ (linear.h)
  std::vector<ReadSizeSpec> read_sizes{ReadSizeSpec{}};  // lookup read sizes (a list sweeps)
  uint32_t clusters = 1000;            // clusters tracked per client (--read-size cluster)
  uint32_t location_cache = 0;         // cluster: header buckets each client caches (DrTM's location cache; 0: off)
  // Model R from these load factors instead of the table's (0: the table's); a list sweeps the
  // lookup points, as --read-size does (seed 000 Table 2 on one table).
  std::vector<double> assumed_load_factors{0.0};
  // The share of gets model read sizes take to find their key (ClientOptions::present_fraction);
  // empty: from the workload (model_present_fraction).
  std::optional<double> present_fraction;
  std::string profile_path;            // cost-model parameters (rdmahash calibrate); empty: seed 000's
  std::optional<model::CostParams> cost_params;  // loaded from profile_path (slot_bytes set per table)
  std::optional<model::CostParams> throughput_cost_params;  // its throughput fit, when it has one
  double zipf_theta = 0;               // 0: uniform; else the loaded keys' (and lookups') Zipf skew
  std::vector<uint32_t> read_bytes{8}; // raw-read sizes
  uint64_t tail_slots = 0;
  uint64_t seed = 1;
  uint32_t repeat = 1;                 // run the sequence of points this many times (interleaved)
  bool same_keys = false;
  std::string json_path;
  // YCSB (--ycsb FILE -p name=value): records, ops, value size and mix come from the workload
  // file; the bench runs YCSB's load phase (clients insert the records) and then its run phase.
  std::string ycsb_path;
  std::vector<std::pair<std::string, std::string>> ycsb_overrides;
  bool ycsb_skip_unsupported = false;
  // Set by the driver, not an option: records one table's points may write beyond `records`
  // (inserts, out-of-place updates, clients' private blocks); sizes linear heaps (0: records only).
  uint64_t table_writes = 0;
  // `rdmahash serve --capacity`: records the served table may come to hold (race sizes its directory
  // and region for it; linear heaps hold table_writes = capacity - records more). 0: derived from
  // the bench's own points, as before.
  uint64_t table_capacity = 0;
  // --connect: memory nodes 0..K-1 served by `rdmahash serve`; the table options come from them.
  std::vector<std::string> connect;
  std::string token_file;  // --connect: the memory nodes' shared secret (their --token-file)
  // Tests only (environment RDMAHASH_TEST_DIE_HOLDING_LOCK=N, read by the CLI): linear inline
  // clients kill themselves holding their Nth slot lock (ProbeConfig::die_holding_lock); race
  // clients at their Nth split step (RaceConfig::test_die_at_step).
  uint64_t die_holding_lock = 0;
  // Tests only (environment RDMAHASH_TEST_DIE_LOADING=N): the process kills itself after the Nth
  // record of a continuity or level bulk load (a run killed while loading a new --pm-path file).
  uint64_t die_loading = 0;
  // The command whose messages these are ("rdmahash bench"; run_serve: "rdmahash serve").
  std::string command = "rdmahash bench";
  bool cold = false;                   // no warm-up: the first point also measures first-touch page faults
  bool keep_table = false;             // no reload between points: each starts where the last ended
  // kv-mix (src/bench/kv_mix.h): get/put/update/erase/find_or_put on `kv_keys` keys; `--history
  // FILE` records every operation of every client for the linearizability checker.
  uint64_t kv_keys = 16;
  std::string history_path;
  bool progress = true;                // progress bar while loading (only on a terminal)
  bool quiet = false;                  // no summary table

  // Empty when valid, else a message naming the bad option.
  std::string error() const;
};

// The options that arrive as words, as the CLI binds them (defaults: BenchOptions').
struct OptionText {
  std::string fabric = "local", scheme = "linear", slot_format = "auto", storage = "inline", cuckoo_probe = "parallel",
              race_dir_cache = "on", direct_access = "on", multi_get = "off", huge_pages = "on", serve_mode = "auto", client_wait = "auto",
              read_coalescing = "auto", speculative_claim = "auto", chunk_order = "linear", added_sbuckets = "0", memory_limit = "off",
              present_fraction = "auto";
};
// Parses `t` into `o`'s typed fields: "" or a message naming the bad option (nothing set then).
std::string apply_option_text(const OptionText& t, BenchOptions& o);
// --added-sbuckets' text for D (0: "0").
std::string added_sbuckets_text(uint32_t pairs);

// The registry's typed table options for `o` at `load_factor`: the one place the table options'
// values meet the registry.
TableOptions table_options(const BenchOptions& o, double load_factor);
// The scheme `o` names.
const SchemeDescriptor& scheme_of(const BenchOptions& o);
// A registry message with its {field} marks replaced by the CLI's flag names.
std::string flag_error(std::string_view message);

// What a served table is: the options that shape its memory (`rdmahash serve` sends them to every
// client, which builds its scheme client from them), as "name=value" lines.
std::string table_spec(const BenchOptions& o);
// Sets those options in `o` from a spec; throws InvalidArgument for a malformed spec.
void apply_table_spec(BenchOptions& o, const std::string& spec);
// The command-line options that are part of a table spec (a --connect client refuses them).
const std::vector<std::string>& table_option_names();
// --added-sbuckets "0" -> 0, "1/D" -> D (1 <= D <= 65535); -1 for anything else.
int64_t added_sbuckets_pairs(const std::string& spec);

}  // namespace rdmahash::bench
