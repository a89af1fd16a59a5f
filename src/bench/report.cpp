#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <variant>
#include <nlohmann/json.hpp>

#include "rdmahash/table.h"

namespace rdmahash::bench {

void ClientResult::add_split_load(double load_factor) {
  const auto ppm = static_cast<uint64_t>(std::llround(std::clamp(load_factor, 0.0, 1.0) * 1e6));
  ++split_loads;
  split_load_ppm_sum += ppm;
  split_load_ppm_min = std::min(split_load_ppm_min, ppm);
  split_load_ppm_max = std::max(split_load_ppm_max, ppm);
}

void ClientResult::merge(const ClientResult& o) {
  ops += o.ops; found += o.found; inserted += o.inserted; full += o.full; not_found += o.not_found;
  updated += o.updated; erased += o.erased; skipped += o.skipped;
  errors += o.errors; value_mismatches += o.value_mismatches;
  multi_get_ops += o.multi_get_ops;
  round_trips += o.round_trips; reads += o.reads; writes += o.writes; cas += o.cas; faa += o.faa;
  rpcs += o.rpcs; bytes += o.bytes; chunks += o.chunks; matches += o.matches;
  persists += o.persists;
  read_size = std::max(read_size, o.read_size);
  resizes += o.resizes;
  directory_depth = std::max(directory_depth, o.directory_depth);
  split_loads += o.split_loads;
  split_load_ppm_sum += o.split_load_ppm_sum;
  split_load_ppm_min = std::min(split_load_ppm_min, o.split_load_ppm_min);
  split_load_ppm_max = std::max(split_load_ppm_max, o.split_load_ppm_max);
  seconds = std::max(seconds, o.seconds);
  cpu_ns += o.cpu_ns;
  client_sleeps += o.client_sleeps;
  client_unspun_sleeps += o.client_unspun_sleeps;
  lines_read += o.lines_read;
  direct_rounds += o.direct_rounds;
  latency_ns.insert(latency_ns.end(), o.latency_ns.begin(), o.latency_ns.end());
}

namespace {
constexpr size_t kFixedWords = 34;
}

std::vector<std::byte> ClientResult::serialize() const {
  const uint64_t fixed[kFixedWords] = {ops, found, inserted, full, not_found, errors, value_mismatches,
                                       round_trips, reads, writes, cas, faa, rpcs, bytes, chunks, matches,
                                       read_size, updated, skipped, resizes, directory_depth, erased, persists,
                                       split_loads, split_load_ppm_sum, split_load_ppm_min, split_load_ppm_max,
                                       cpu_ns, multi_get_ops, client_sleeps, client_unspun_sleeps,
                                       lines_read, direct_rounds, latency_ns.size()};
  std::vector<std::byte> out(sizeof fixed + sizeof(double) + latency_ns.size() * 4);
  std::memcpy(out.data(), fixed, sizeof fixed);
  std::memcpy(out.data() + sizeof fixed, &seconds, sizeof(double));
  if (!latency_ns.empty()) std::memcpy(out.data() + sizeof fixed + sizeof(double), latency_ns.data(), latency_ns.size() * 4);
  return out;
}

ClientResult ClientResult::deserialize(std::span<const std::byte> in) {
  ClientResult r;
  uint64_t f[kFixedWords];
  if (in.size() < sizeof f + sizeof(double)) throw InvalidArgument("truncated client result");
  std::memcpy(f, in.data(), sizeof f);
  r.ops = f[0]; r.found = f[1]; r.inserted = f[2]; r.full = f[3]; r.not_found = f[4]; r.errors = f[5];
  r.value_mismatches = f[6]; r.round_trips = f[7]; r.reads = f[8]; r.writes = f[9]; r.cas = f[10];
  r.faa = f[11]; r.rpcs = f[12]; r.bytes = f[13]; r.chunks = f[14]; r.matches = f[15];
  r.read_size = static_cast<uint32_t>(f[16]);
  r.updated = f[17];
  r.skipped = f[18];
  r.resizes = f[19];
  r.directory_depth = static_cast<uint32_t>(f[20]);
  r.erased = f[21];
  r.persists = f[22];
  r.split_loads = f[23];
  r.split_load_ppm_sum = f[24];
  r.split_load_ppm_min = f[25];
  r.split_load_ppm_max = f[26];
  r.cpu_ns = f[27];
  r.multi_get_ops = f[28];
  r.client_sleeps = f[29];
  r.client_unspun_sleeps = f[30];
  r.lines_read = f[31];
  r.direct_rounds = f[32];
  std::memcpy(&r.seconds, in.data() + sizeof f, sizeof(double));
  const uint64_t nlat = f[kFixedWords - 1];
  if (in.size() != sizeof f + sizeof(double) + nlat * 4) throw InvalidArgument("corrupt client result");
  r.latency_ns.resize(nlat);
  if (nlat) std::memcpy(r.latency_ns.data(), in.data() + sizeof f + sizeof(double), nlat * 4);
  return r;
}

namespace {

struct Derived {
  double throughput, rt, reads, writes, cas, faa, rpcs, bytes, chunks;
  double p10, p25, p50, p75, p90, p99, max;
};

Derived derive(const ClientResult& t) {
  Derived d{};
  const double n = t.ops ? static_cast<double>(t.ops) : 1.0;
  d.throughput = t.seconds > 0 ? t.ops / t.seconds : 0;
  d.rt = t.round_trips / n; d.reads = t.reads / n; d.writes = t.writes / n; d.cas = t.cas / n;
  d.faa = t.faa / n; d.rpcs = t.rpcs / n; d.bytes = t.bytes / n; d.chunks = t.chunks / n;
  std::vector<uint32_t> v = t.latency_ns;
  std::sort(v.begin(), v.end());
  auto pct = [&](double q) {
    if (v.empty()) return 0.0;
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    return v[i] / 1000.0;
  };
  d.p10 = pct(0.10); d.p25 = pct(0.25); d.p50 = pct(0.50); d.p75 = pct(0.75); d.p90 = pct(0.90);
  d.p99 = pct(0.99); d.max = v.empty() ? 0 : v.back() / 1000.0;
  return d;
}

}  // namespace

std::string to_json_line(const BenchOptions& o, const PointInfo& p, const ClientResult& t) {
  const Derived d = derive(t);
  nlohmann::json j;
  j["scheme"] = p.scheme;
  j["scheme_detail"] = p.scheme_detail;
  j["fabric"] = p.fabric;
  if (const char* tls = std::getenv("UCX_TLS"); tls && p.fabric == "ucx") j["ucx_tls"] = tls;
  if (p.fabric == "ucx") j["direct_access"] = to_string(o.direct_access);
  if (!p.serve_mode.empty()) j["serve_mode"] = p.serve_mode;
  if (!p.client_wait.empty()) {
    j["client_wait"] = p.client_wait;
    // How the clients waited in the timed part, per operation: sleeps on the event fd, and hybrid
    // waits that did not spin because the machine had more runnable tasks than CPUs (ClientWait).
    const double ops = t.ops ? static_cast<double>(t.ops) : 1.0;
    j["client_sleeps_per_op"] = static_cast<double>(t.client_sleeps) / ops;
    j["client_unspun_sleeps_per_op"] = static_cast<double>(t.client_unspun_sleeps) / ops;
  }
  if (!p.read_coalescing.empty()) j["read_coalescing"] = p.read_coalescing;
  if (!p.ucx_transports.empty()) j["ucx_transports"] = p.ucx_transports;
  if (p.sim_profile) {
    const SimProfile& sp = *p.sim_profile;
    j["sim_profile"] = sp.name;
    j["sim"] = {{"latency_ns", sp.latency_ns},         {"nic_ops_per_s", sp.nic_ops_per_s},
                {"link_bytes_per_s", sp.link_bytes_per_s}, {"header_bytes", sp.header_bytes},
                {"qp_depth", sp.qp_depth},             {"rpc_ns", sp.rpc_ns},
                {"client_batch_ns", sp.client_batch_ns}, {"client_request_ns", sp.client_request_ns},
                {"client_cpu_scale", sp.client_cpu_scale}};
    // fixed: deterministic virtual times; measured: the clients' real CPU time is charged, so
    // throughput and latencies vary from run to run (sim_fabric.cpp).
    j["sim_client_cpu"] = client_cpu_name(sp.client_cpu);
    j["sim_client_cpu_ns"] = p.sim_client_cpu_ns;
    j["sim_events"] = p.sim_events;
    j["sim_wall_seconds"] = p.sim_wall_seconds;
    j["sim_events_per_s"] = p.sim_wall_seconds > 0 ? static_cast<double>(p.sim_events) / p.sim_wall_seconds : 0.0;
  }
  j["ranks"] = p.ranks;
  j["memory_nodes"] = p.memory_nodes;
  j["clients"] = p.clients;
  j["symmetric"] = o.symmetric;
  j["records"] = p.records;
  j["slots"] = p.slots;
  j["load_factor"] = p.slots ? static_cast<double>(p.records) / static_cast<double>(p.slots) : 0.0;
  j["target_load_factor"] = p.target_load_factor;
  j["load_factor_start"] = p.load_factor_start;
  j["load_factor_end"] = p.load_factor_end;
  j["records_start"] = p.records_start;
  j["records_end"] = p.records_end;
  j["keep_table"] = o.keep_table;
  j["table_bytes"] = p.table_bytes;
  j["llc_bytes"] = p.llc_bytes;
  if (p.memory_limit) {  // --memory-limit: this machine's random-read limit on a region of the table's size
    j["memory_limit_ops_per_s"] = p.memory_limit->batched_ops_per_s;
    j["memory_limit"] = {{"bytes", p.memory_limit->bytes},
                         {"pages", p.memory_limit->pages},
                         {"pages_given", p.memory_limit->pages_given},
                         {"huge_fraction", p.memory_limit->huge_fraction},
                         {"batch", p.memory_limit->batch},
                         {"batched_ops_per_s", p.memory_limit->batched_ops_per_s},
                         {"dependent_ns", p.memory_limit->dependent_ns},
                         {"probe_seconds", p.memory_limit->seconds}};
    if (p.memory_limit_after) {  // the same region probed again right after this row's point
      j["memory_limit_after_ops_per_s"] = p.memory_limit_after->batched_ops_per_s;
      j["memory_limit"]["after_batched_ops_per_s"] = p.memory_limit_after->batched_ops_per_s;
      j["memory_limit"]["after_dependent_ns"] = p.memory_limit_after->dependent_ns;
      j["memory_limit"]["after_probe_seconds"] = p.memory_limit_after->seconds;
    }
  }
  j["huge_pages"] = to_string(o.huge_pages);
  j["multi_get"] = to_string(o.multi_get);
  if (!p.region_pages.kind.empty()) {  // memory node 0's region, where the reporting process hosts it
    j["region_pages"] = p.region_pages.kind;
    j["region_page_kb"] = p.region_pages.page_kb;
    j["region_huge_fraction"] = p.region_pages.huge_fraction;
  }
  j["warmup_seconds"] = p.warmup_seconds;
  j["cold"] = o.cold;
  j["key_bytes"] = o.key_bytes;
  j["value_bytes"] = o.value_bytes;
  j["workload"] = to_string(p.workload);
  j["depth"] = o.depth;
  j["chunk"] = p.chunk;
  j["max_chunks"] = o.max_chunks;
  j["speculative_claim"] = to_string(o.speculative_claim);
  j["chunk_order"] = to_string(o.chunk_order);
  j["read_size"] = t.read_size ? t.read_size : p.read_size;
  j["read_size_policy"] = p.read_size_policy;
  j["clusters"] = o.clusters;
  j["location_cache"] = o.location_cache;
  j["assumed_load_factor"] = p.assumed_load_factor;
  if (std::isnan(p.model_present_fraction)) j["model_present_fraction"] = nullptr;
  else j["model_present_fraction"] = p.model_present_fraction;
  j["distribution"] = o.zipf_theta > 0 ? "zipf" : "uniform";
  j["zipf_theta"] = o.zipf_theta;
  j["matches_per_op"] = t.ops ? static_cast<double>(t.matches) / static_cast<double>(t.ops) : 0.0;
  j["matches_per_s"] = t.seconds > 0 ? static_cast<double>(t.matches) / t.seconds : 0.0;
  if (p.workload == Workload::kRawRead) j["read_bytes"] = p.read_bytes;
  j["same_keys"] = o.same_keys;
  j["seed"] = o.seed;
  j["repeat"] = p.repeat;
  j["ops"] = t.ops;
  j["seconds"] = t.seconds;
  j["throughput_ops_per_s"] = d.throughput;
  // Client CPU per operation (thread CPU time of the timed part; every client's, summed, / ops).
  j["client_cpu_ns_per_op"] = t.ops ? static_cast<double>(t.cpu_ns) / static_cast<double>(t.ops) : 0.0;
  j["latency_us"] = {{"p10", d.p10}, {"p25", d.p25}, {"p50", d.p50}, {"p75", d.p75},
                     {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
  j["round_trips_per_op"] = d.rt;
  j["requests_per_op"] = {{"read", d.reads}, {"write", d.writes}, {"cas", d.cas}, {"faa", d.faa}, {"rpc", d.rpcs}};
  j["bytes_per_op"] = d.bytes;
  // The 64-byte lines the clients' READs spanned (lines_spanned, fabric.h), per operation, beside
  // memory_limit_ops_per_s, whose probe reads one line a load. Not a cost by itself: a window's
  // second line comes almost free with its first (results.md, "Lines read per get").
  j["lines_read_per_op"] = t.ops ? static_cast<double>(t.lines_read) / static_cast<double>(t.ops) : 0.0;
  // Batches the clients performed as direct reads (a multi-get on mapped regions), per operation:
  // which path a row took, not a cost.
  j["direct_read_rounds_per_op"] = t.ops ? static_cast<double>(t.direct_rounds) / static_cast<double>(t.ops) : 0.0;
  if (find_scheme(p.scheme) && find_scheme(p.scheme)->caps.splits) {
    j["resizes"] = t.resizes;
    j["directory_depth"] = t.directory_depth;
    // Memory efficiency: how full each subtable was when a split of this point divided it.
    if (t.split_loads)
      j["split_load_factor"] = {{"splits", t.split_loads},
                                {"mean", static_cast<double>(t.split_load_ppm_sum) / 1e6 / static_cast<double>(t.split_loads)},
                                {"min", static_cast<double>(t.split_load_ppm_min) / 1e6},
                                {"max", static_cast<double>(t.split_load_ppm_max) / 1e6}};
  }
  if (p.table_resizes) j["resizes"] = *p.table_resizes;  // online resizes since the table was created
  if (p.resizing_start) j["resizing_start"] = *p.resizing_start;  // a resize in progress when the point began
  if (p.resizing_end) j["resizing_end"] = *p.resizing_end;
  for (const auto& [name, value] : p.scheme_options)  // the scheme's own options (race_dir_cache, max_resizes, ...)
    std::visit([&j, &name](const auto& v) { j[name] = v; }, value);
  j["chunks_per_op"] = d.chunks;
  if (!p.persistence.empty()) {
    j["persistence"] = p.persistence;
    if (!o.pm_path.empty()) j["pm_path"] = o.pm_path;
    j["persists_per_op"] = t.ops ? static_cast<double>(t.persists) / static_cast<double>(t.ops) : 0.0;
    j["persists"] = t.persists;
  }
  j["outcomes"] = {{"found", t.found}, {"inserted", t.inserted}, {"full", t.full}, {"not_found", t.not_found},
                   {"updated", t.updated}, {"erased", t.erased}, {"skipped", t.skipped}};
  if (!p.ycsb.empty()) {
    j["ycsb"] = p.ycsb;
    j["ycsb_file"] = o.ycsb_path;
    j["ycsb_skip_unsupported"] = o.ycsb_skip_unsupported;
  }
  j["errors"] = t.errors;
  j["value_mismatches"] = t.value_mismatches;
  j["multi_get_ops"] = t.multi_get_ops;
  return j.dump();
}

void print_summary_header(std::FILE* out) {
  std::fprintf(out, "%-22s %-6s %5s %4s %7s %10s %5s %-15s %5s %10s %11s %8s %8s %8s %6s %6s %8s %-22s\n", "scheme",
               "fabric", "ranks", "mem", "clients", "records", "lf", "workload", "R/B", "ops", "ops/s", "p50us",
               "p90us", "p99us", "RT/op", "req/op", "bytes/op", "found/ins/full/miss");
}

void print_summary_row(std::FILE* out, const PointInfo& p, const ClientResult& t) {
  const Derived d = derive(t);
  const double lf = p.load_factor_start;
  const uint32_t rb = p.workload == Workload::kRawRead ? p.read_bytes : (t.read_size ? t.read_size : p.read_size);
  char outcomes[64];
  std::snprintf(outcomes, sizeof outcomes, "%llu/%llu/%llu/%llu", static_cast<unsigned long long>(t.found),
                static_cast<unsigned long long>(t.inserted), static_cast<unsigned long long>(t.full),
                static_cast<unsigned long long>(t.not_found));
  std::fprintf(out, "%-22s %-6s %5u %4u %7u %10llu %5.2f %-15s %5u %10llu %11.0f %8.2f %8.2f %8.2f %6.2f %6.2f %8.1f %-22s\n",
               p.scheme_detail.c_str(), p.fabric.c_str(), p.ranks, p.memory_nodes, p.clients,
               static_cast<unsigned long long>(p.records), lf, to_string(p.workload), rb,
               static_cast<unsigned long long>(t.ops), d.throughput, d.p50, d.p90, d.p99, d.rt,
               d.reads + d.writes + d.cas + d.faa + d.rpcs, d.bytes, outcomes);
  if (t.errors || t.value_mismatches)
    std::fprintf(out, "  WARNING: %llu operations failed, %llu values differed from the stored ones\n",
                 static_cast<unsigned long long>(t.errors), static_cast<unsigned long long>(t.value_mismatches));
  std::fflush(out);
}

}  // namespace rdmahash::bench
