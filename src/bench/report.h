// Results of one benchmark point, their aggregation over clients, JSON and the summary table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include "bench/options.h"
#include "bench/sysinfo.h"
#include "rdmahash/sim_fabric.h"
#include "model/memory_limit.h"
#include "rdmahash/engine.h"
#include "rdmahash/table.h"

namespace rdmahash::bench {

// What one client measured at one point. Counters are totals over its operations.
struct ClientResult {
  uint64_t ops = 0;
  uint64_t found = 0, inserted = 0, full = 0, not_found = 0, updated = 0, erased = 0;
  uint64_t skipped = 0;           // YCSB operations the scheme cannot do (--ycsb-skip-unsupported)
  uint64_t errors = 0;            // operations that threw
  uint64_t value_mismatches = 0;  // gets that returned a value other than the one stored
  uint64_t multi_get_ops = 0;     // ops run as a multi-get (--multi-get on and the scheme has one)
  uint64_t round_trips = 0, reads = 0, writes = 0, cas = 0, faa = 0, rpcs = 0, bytes = 0;
  uint64_t chunks = 0;            // slot-array reads per operation, summed
  uint64_t matches = 0;           // records returned (get-all returns every match)
  uint64_t persists = 0;          // flush+fence calls the memory node made for these operations
  uint32_t read_size = 0;         // lookup read size this client used (model: its R*)
  uint64_t resizes = 0;           // race: subtable splits this client performed
  uint32_t directory_depth = 0;   // race: the directory depth this client saw last (max over clients)
  // race: load factor of each subtable this client split, when it split (parts per million)
  uint64_t split_loads = 0, split_load_ppm_sum = 0, split_load_ppm_min = UINT64_MAX, split_load_ppm_max = 0;
  double seconds = 0;
  uint64_t cpu_ns = 0;            // client threads' CPU time in the timed part, summed over clients
  uint64_t client_sleeps = 0, client_unspun_sleeps = 0;  // UCX clients' waits (FabricCounters), summed
  uint64_t lines_read = 0;        // 64-byte lines the clients' READs spanned (FabricCounters), summed
  uint64_t direct_rounds = 0;     // batches of direct reads (FabricCounters::direct_rounds), summed
  std::vector<uint32_t> latency_ns;

  // Per operation, inline: the multi-get's loop calls them for every key.
  void add_op(const OpStats& s, std::chrono::nanoseconds latency) {
    ++ops;
    round_trips += s.round_trips;
    reads += s.reads; writes += s.writes; cas += s.cas; faa += s.faa; rpcs += s.rpcs;
    bytes += s.bytes;
    const auto ns = latency.count();
    latency_ns.push_back(static_cast<uint32_t>(ns < 0 ? 0 : ns > int64_t{UINT32_MAX} ? UINT32_MAX : ns));
  }
  void add_outcome(const OpResult& res) {  // chunks, persists and the status counters
    chunks += res.chunks;
    persists += res.persists;
    switch (res.status) {
      case Status::kFound: ++found; break;
      case Status::kInserted: ++inserted; break;
      case Status::kFull: ++full; break;
      case Status::kNotFound: ++not_found; break;
      case Status::kUpdated: ++updated; break;
      case Status::kErased: ++erased; break;
      default: break;
    }
  }
  void add_split_load(double load_factor);  // race: one split's load factor into the split_load_* fields
  void merge(const ClientResult& o);  // sums; seconds = max
  std::vector<std::byte> serialize() const;
  static ClientResult deserialize(std::span<const std::byte> bytes);
};

// Describes one point (what was run) for the report.
struct PointInfo {
  std::string scheme, scheme_detail, fabric;
  uint32_t ranks = 1, memory_nodes = 1, clients = 1;
  uint64_t records = 0, slots = 0;
  double target_load_factor = 0;
  Workload workload = Workload::kGet;
  uint32_t read_size = 0, read_bytes = 0;
  uint32_t chunk = 8;  // find-or-put chunk size of the point's clients
  double assumed_load_factor = 0;  // the load factor model read sizes assumed (0: the table's)
  double model_present_fraction = 0;  // the share of gets the model took to find their key (NaN: no model)
  std::string read_size_policy = "fixed";
  uint32_t repeat = 0;  // which repetition of the point (--repeat)
  std::string ycsb;     // the YCSB workload's summary, when the point is a YCSB phase
  // The table state: records / slots when the point started and when it ended (inserts raise it).
  double load_factor_start = 0, load_factor_end = 0;
  uint64_t records_start = 0, records_end = 0;  // records in the table when the point started / ended
  double warmup_seconds = 0;  // the clients' page-touching pass before this table's first point (0: --cold)
  uint64_t table_bytes = 0;   // all shards' regions
  uint64_t llc_bytes = 0;     // last-level cache of this machine (0: unknown)
  std::optional<model::MemoryLimit> memory_limit;  // --memory-limit: measured before the table's first point
  std::optional<model::MemoryLimit> memory_limit_after;  // and again on the same region right after this point
  PageReport region_pages;  // what the kernel backs memory node 0's region with (kind empty: not here)
  std::string persistence;  // persistent schemes: volatile, pmem or msync (empty: not persistent)
  ReportFields scheme_options;  // SchemeTable::report_options()
  std::optional<uint64_t> table_resizes;  // continuity: online resizes so far (where known)
  std::optional<bool> resizing_start, resizing_end;  // continuity: a resize in progress then
  // ucx (mpirun): rank 0's serve mode as resolved (ServeMode) and its UCX context's transports.
  std::string serve_mode, ucx_transports;
  // ucx, ucx-connect: how the clients wait for their requests, as resolved (ClientWait).
  std::string client_wait;
  // ucx, ucx-connect: READ coalescing as resolved (ReadCoalescing: on or off).
  std::string read_coalescing;
  // sim: the profile's constants, and the simulation's events and wall time for this point.
  std::optional<SimProfile> sim_profile;
  uint64_t sim_events = 0;
  double sim_wall_seconds = 0;
  double sim_client_cpu_ns = 0;  // measured client CPU charged (client_cpu = measured), unscaled
};

std::string to_json_line(const BenchOptions& o, const PointInfo& p, const ClientResult& total);
void print_summary_header(std::FILE* out);
void print_summary_row(std::FILE* out, const PointInfo& p, const ClientResult& total);

}  // namespace rdmahash::bench
