#include "bench/options.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "bench/kv_mix.h"
#include "rdmahash/linear.h"
#include "rdmahash/table.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash::bench {

const char* to_string(Workload w) {
  switch (w) {
    case Workload::kGet: return "get";
    case Workload::kGetAll: return "get-all";
    case Workload::kFindOrPut: return "find-or-put";
    case Workload::kMixed: return "mixed";
    case Workload::kReadIntensive: return "read-intensive";
    case Workload::kWriteIntensive: return "write-intensive";
    case Workload::kRawRead: return "raw-read";
    case Workload::kUpdate: return "update";
    case Workload::kErase: return "erase";
    case Workload::kYcsbLoad: return "ycsb-load";
    case Workload::kYcsbRun: return "ycsb-run";
    case Workload::kKvMix: return "kv-mix";
  }
  return "?";
}

Workload parse_workload(const std::string& s) {
  for (Workload w : {Workload::kGet, Workload::kGetAll, Workload::kFindOrPut, Workload::kMixed, Workload::kReadIntensive,
                     Workload::kWriteIntensive, Workload::kRawRead, Workload::kUpdate, Workload::kErase, Workload::kKvMix})
    if (s == to_string(w)) return w;
  throw InvalidArgument("unknown workload '" + s +
                        "' (expected get, get-all, find-or-put, mixed, read-intensive, write-intensive, raw-read, update, erase or kv-mix)");
}

ReadSizeSpec parse_read_size(const std::string& s) {
  ReadSizeSpec r;
  if (s == "model") { r.kind = ReadSizeSpec::Kind::kModel; return r; }
  if (s == "model-unconstrained") { r.kind = ReadSizeSpec::Kind::kModelUnconstrained; return r; }
  if (s == "cluster") { r.kind = ReadSizeSpec::Kind::kCluster; return r; }
  if (s == "model-throughput") { r.kind = ReadSizeSpec::Kind::kModelThroughput; return r; }
  std::string num = s.rfind("fixed:", 0) == 0 ? s.substr(6) : s;
  size_t used = 0;
  unsigned long v = 0;
  try {
    v = std::stoul(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (num.empty() || used != num.size() || num[0] == '-' || v == 0 || v > 65536)
    throw InvalidArgument("--read-size '" + s + "' must be a slot count in [1, 65536], fixed:N, model, "
                          "model-unconstrained, model-throughput or cluster");
  r.slots = static_cast<uint32_t>(v);
  return r;
}

double parse_distribution(const std::string& s) {
  if (s == "uniform") return 0;
  if (s.rfind("zipf:", 0) == 0) {
    size_t used = 0;
    double theta = 0;
    try {
      theta = std::stod(s.substr(5), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == s.size() - 5 && used > 0 && theta > 0 && theta < 10 && theta != 1.0) return theta;
  }
  throw InvalidArgument("--distribution '" + s + "' must be uniform or zipf:THETA with 0 < THETA < 10, THETA != 1");
}

namespace {
std::string double_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace

uint32_t max_value_bytes(const BenchOptions& o) {
  return rdmahash::max_value_bytes(table_options(o, o.load_factors.empty() ? 0.5 : o.load_factors.front()));
}

const SchemeDescriptor& scheme_of(const BenchOptions& o) { return scheme(o.scheme); }

const char* to_string(FabricKind f) { return f == FabricKind::kUcx ? "ucx" : f == FabricKind::kSim ? "sim" : "local"; }

std::string added_sbuckets_text(uint32_t pairs) { return pairs ? "1/" + std::to_string(pairs) : "0"; }

std::optional<double> parse_fraction(std::string_view s) {
  double f = -1;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, f, std::chars_format::general);
  if (s.empty() || ec != std::errc() || ptr != end || !(f >= 0 && f <= 1)) return std::nullopt;
  return f == 0 ? 0.0 : f;  // -0 -> 0
}

std::string apply_option_text(const OptionText& t, BenchOptions& o) {
  BenchOptions r = o;
  if (t.fabric == "local") r.fabric = FabricKind::kLocal;
  else if (t.fabric == "ucx") r.fabric = FabricKind::kUcx;
  else if (t.fabric == "sim") r.fabric = FabricKind::kSim;
  else return "--fabric must be 'local', 'ucx' or 'sim', got '" + t.fabric + "'";
  if (const SchemeDescriptor* d = find_scheme(t.scheme)) r.scheme = d->id;
  else return "--scheme '" + t.scheme + "' is not available (available: " + scheme_names() + ")";
  if (auto v = parse_switch(t.race_dir_cache)) r.race_dir_cache = *v;
  else return "--race-dir-cache must be on or off";
  if (t.memory_limit == "off") r.memory_limit = BenchOptions::MemoryProbe::kOff;
  else if (t.memory_limit == "4k") r.memory_limit = BenchOptions::MemoryProbe::k4k;
  else if (t.memory_limit == "thp") r.memory_limit = BenchOptions::MemoryProbe::kThp;
  else return "--memory-limit must be off, 4k or thp, got '" + t.memory_limit + "'";
  if (auto v = parse_chunk_order(t.chunk_order)) r.chunk_order = *v;
  else return "--chunk-order must be linear or quadratic, got '" + t.chunk_order + "'";
  if (auto v = parse_speculative_claim(t.speculative_claim)) r.speculative_claim = *v;
  else return "--speculative-claim must be on, off or auto, got '" + t.speculative_claim + "'";
  if (const int64_t d = added_sbuckets_pairs(t.added_sbuckets); d >= 0) r.added_sbucket_pairs = static_cast<uint32_t>(d);
  else
    return "--added-sbuckets must be 0 or 1/D with D in [1, 65535] (e.g. 1/10: one added group per 10 segment pairs), "
           "got '" + t.added_sbuckets + "'";
  if (auto v = parse_storage(t.storage)) r.storage = *v;
  else return "--storage must be inline, heap or heap4, got '" + t.storage + "'";
  if (auto v = parse_cuckoo_lookup(t.cuckoo_probe)) r.cuckoo_probe = *v;
  else return "--cuckoo-probe must be parallel or sequential, got '" + t.cuckoo_probe + "'";
  if (auto v = parse_slot_format(t.slot_format)) r.slot_format = *v;
  else return "--slot-format must be auto, set or inline, got '" + t.slot_format + "'";
  if (t.present_fraction == "auto") r.present_fraction.reset();
  else if (auto f = parse_fraction(t.present_fraction)) r.present_fraction = *f;
  else return "--present-fraction must be auto or a number in [0, 1], got '" + t.present_fraction + "'";
  if (auto v = parse_switch(t.direct_access)) r.direct_access = *v;
  else return "--direct-access must be on or off";
  if (auto v = parse_switch(t.multi_get)) r.multi_get = *v;
  else return "--multi-get must be on or off";
  if (auto v = parse_switch(t.huge_pages)) r.huge_pages = *v;
  else return "--huge-pages must be on or off";
  if (auto v = parse_serve_mode(t.serve_mode)) r.serve_mode = *v;
  else return "--serve-mode must be " + std::string(serve_mode_names()) + ", got '" + t.serve_mode + "'";
  if (auto v = parse_client_wait(t.client_wait)) r.client_wait = *v;
  else return "--client-wait must be " + std::string(client_wait_names()) + ", got '" + t.client_wait + "'";
  if (auto v = parse_read_coalescing(t.read_coalescing)) r.read_coalescing = *v;
  else return "--read-coalescing must be " + std::string(read_coalescing_names()) + ", got '" + t.read_coalescing + "'";
  o = r;
  return {};
}

std::string flag_error(std::string_view message) {
  return format_option_error(message, [](std::string_view field) -> std::string {
    if (field == "zipf_theta") return "--distribution zipf";
    if (field == "cuckoo_lookup") return "--cuckoo-probe";
    if (field == "added_sbucket_pairs") return "--added-sbuckets";
    std::string flag = "--" + std::string(field);
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    return flag;
  });
}

TableOptions table_options(const BenchOptions& o, double load_factor) {
  TableOptions t;
  t.scheme = o.scheme;
  t.memory_nodes = o.memory_nodes;
  t.records = o.records;
  t.load_factor = load_factor;
  t.key_bytes = o.key_bytes;
  t.value_bytes = o.value_bytes;
  t.seed = o.seed;
  t.zipf_theta = o.zipf_theta;
  t.capacity = o.table_capacity;
  t.writes = o.table_writes;
  // Keys the clients may insert: every insert point's ops, for at least 8 clients (race sizes its pool).
  bool inserts = !o.ycsb_path.empty();
  for (Workload w : o.workloads)
    if (w != Workload::kGet && w != Workload::kGetAll && w != Workload::kRawRead) inserts = true;
  t.inserts = inserts ? o.ops * std::max<uint32_t>(o.clients, 8) * o.repeat : 0;
  t.clients = o.clients;
  t.storage = o.storage;
  t.slot_format = o.slot_format;
  t.tail_slots = o.tail_slots;
  t.chunk = o.chunks.empty() ? 8 : o.chunks.front();
  t.max_chunks = o.max_chunks;
  t.speculative_claim = o.speculative_claim;
  t.chunk_order = o.chunk_order;
  t.cost_params = o.cost_params;
  t.throughput_cost_params = o.throughput_cost_params;
  t.slots_per_bucket = o.slots_per_bucket;
  t.cuckoo_lookup = o.cuckoo_probe;
  t.race_groups = o.race_groups;
  t.initial_depth = o.initial_depth;
  t.race_dir_cache = o.race_dir_cache;
  t.sbuckets = o.sbuckets;
  t.max_resizes = o.max_resizes;
  t.added_sbucket_pairs = o.added_sbucket_pairs;
  t.resize_pace = o.resize_pace;
  t.neighborhood = o.neighborhood;
  t.pm_path = o.pm_path;
  t.keep_table = o.keep_table;
  t.command = o.command;
  t.die_holding_lock = o.die_holding_lock;
  t.die_loading = o.die_loading;
  return t;
}

std::string BenchOptions::error() const {
  const SchemeCaps& caps = scheme_of(*this).caps;
  if (zipf_theta < 0 || zipf_theta >= 10 || std::isnan(zipf_theta)) return "--distribution zipf:THETA needs 0 < THETA < 10";
  if (zipf_theta == 1.0) return "--distribution zipf:1 is not supported (the generator needs THETA != 1)";
  if (load_factors.empty()) return "--load-factor needs at least one value";
  if (chunks.empty()) return "--chunk needs at least one value";
  for (uint32_t c : chunks)
    if (c == 0 || c > 65536) return "--chunk must be in [1, 65536]";
  if (chunk_order == ChunkOrder::kQuadratic) {
    if (scheme != SchemeId::kLinear)
      return "--chunk-order quadratic applies to --scheme linear, not " + std::string(scheme_of(*this).name);
    if (chunks.size() > 1)
      return "--chunk-order quadratic: the chunk size is part of the table's probe sequence, so one table has one: "
             "give one --chunk per run (got " + std::to_string(chunks.size()) + ")";
    for (const auto& r : read_sizes)
      if (r.kind != ReadSizeSpec::Kind::kFixed)
        return "--chunk-order quadratic: --read-size " + r.text() + " (the read-size model, cluster hints) assumes "
               "contiguous probing; quadratic lookups read whole chunks";
  }
  // Every limit of the table, each in one place (the registry: rdmahash/scheme.h), at every load factor.
  for (double f : load_factors)
    if (std::string e = check_table_options(table_options(*this, f)); !e.empty()) return flag_error(e);
  // The layout's and the run's limits.
  if (caps.bulk_load_needs_all_nodes && fabric == FabricKind::kUcx && (memory_nodes > 1 || symmetric) && ycsb_path.empty())
    return "--scheme " + std::string(scheme_of(*this).name) + " bulk-loads its records in the process hosting every memory node: over ucx use "
           "--memory-nodes 1 (not --symmetric), or --ycsb (the clients insert the records)";
  if (kv_keys == 0 || kv_keys > (1u << 20)) return "--keys must be in [1, 2^20]";
  if (client_spin_us < 1 || client_spin_us > 100000) return "--client-spin-us must be in [1, 100000] (microseconds)";
  if (serve_spin_us < 1 || serve_spin_us > 999) return "--serve-spin-us must be in [1, 999] (microseconds: below the 1 ms at which a spin stops to look at its sockets)";
  if (!pm_path.empty() && symmetric)
    return "--pm-path holds one memory node's table: use --memory-nodes 1 (and no --symmetric)";
  if (!pm_path.empty() && load_factors.size() != 1) return "--pm-path holds one table: give one --load-factor";
  if (chunks.size() > 1 && !caps.chunked_inserts)
    return "--chunk with several values sweeps find-or-put's chunk size: --scheme " + std::string(scheme_of(*this).name) +
           " does not probe in chunks";
  if (!caps.multimap)
    for (Workload w : workloads)
      if (w == Workload::kGetAll) return "workload get-all (multimap scans) applies to --scheme linear";
  if (storage == Storage::kHeap4)
    for (Workload w : workloads)
      if (w != Workload::kGet && w != Workload::kGetAll && w != Workload::kRawRead)
        return std::string("--storage heap4 tables are bulk-loaded (read-only): workload ") + to_string(w) +
               " writes; use get, get-all or raw-read";
  for (Workload w : workloads)
    if (w == Workload::kUpdate && value_bytes == 0 && connect.empty())  // --connect: the server's table decides (driver)
      return "workload update replaces values: give --value-bytes (a table of keys alone has nothing to update)";
  if (memory_nodes == 0) return "--memory-nodes must be at least 1";
  if (clients == 0) return "--clients must be at least 1";
  if (fabric == FabricKind::kSim) {
    if (clients > 65536) return "--clients must be at most 65536 simulated clients";
  } else if (clients > 256) {
    return "--clients must be at most 256";
  }
  if (repeat == 0 || repeat > 1000) return "--repeat must be in [1, 1000]";
  if (workloads.empty()) return "--workload needs at least one value";
  if (ops == 0) return "--ops must be at least 1";
  // Each op keeps an 8-byte latency sample; "-1" parses as 2^64-1 and must not reach the driver.
  if (ops > kMaxOps) return "--ops must be at most 2^32 per client";
  if (depth == 0 || depth > 4096) return "--depth must be in [1, 4096]";
  if (read_sizes.empty()) return "--read-size needs at least one value";
  for (const auto& r : read_sizes)
    if (r.kind == ReadSizeSpec::Kind::kFixed && (r.slots == 0 || r.slots > 65536))
      return "--read-size must be in [1, 65536] slots";
  for (const auto& r : read_sizes)
    if (r.kind == ReadSizeSpec::Kind::kModelThroughput && !throughput_cost_params)
      return "--read-size model-throughput needs --profile FILE from `rdmahash calibrate` (the throughput test: "
             "time per READ at depth vs size)";
  if (storage == Storage::kHeap4)
    for (const auto& r : read_sizes)
      if (r.kind != ReadSizeSpec::Kind::kFixed)
        return "--read-size " + r.text() + " assumes one record per slot: use a fixed read size with --storage heap4";
  if (clusters > 10000000) return "--clusters must be at most 10^7";
  if (location_cache > (1u << 24)) return "--location-cache must be at most 2^24 header buckets";
  // --connect: the served table's scheme decides (checked again by the driver once it is known).
  if (location_cache != 0 && scheme != SchemeId::kCluster && connect.empty())
    return "--location-cache applies to --scheme cluster";
  if (present_fraction && !(*present_fraction >= 0 && *present_fraction <= 1))
    return "--present-fraction must be auto or in [0, 1]";
  if (assumed_load_factors.empty()) return "--assumed-load-factor needs a value";
  for (const double a : assumed_load_factors)
    if (a != 0 && !(a > 0 && a < 1)) return "--assumed-load-factor must be in (0, 1)";
  if (zipf_theta > 0) {
    for (Workload w : workloads)
      if (w != Workload::kGet && w != Workload::kGetAll && w != Workload::kRawRead)
        return std::string("--distribution zipf loads duplicate keys (a multimap): workload ") + to_string(w) +
               " needs distinct keys";
  }
  for (uint32_t b : read_bytes)
    if (b == 0 || b > (1u << 20)) return "--read-bytes must be in [1, 1048576]";
  if (auto e = kv_mix_error(*this); !e.empty()) return e;
  return {};
}

std::string table_spec(const BenchOptions& o) {
  std::string s;
  auto add = [&](const char* name, const std::string& v) { s += std::string(name) + "=" + v + "\n"; };
  add("scheme", scheme_of(o).name);
  add("slot_format", to_string(o.slot_format));
  add("storage", to_string(o.storage));
  add("slots_per_bucket", std::to_string(o.slots_per_bucket));
  add("neighborhood", std::to_string(o.neighborhood));
  add("initial_depth", std::to_string(o.initial_depth));
  add("race_groups", std::to_string(o.race_groups));
  add("sbuckets", std::to_string(o.sbuckets));
  add("max_resizes", std::to_string(o.max_resizes));
  add("added_sbuckets", added_sbuckets_text(o.added_sbucket_pairs));
  add("memory_nodes", std::to_string(o.memory_nodes));
  add("records", std::to_string(o.records));
  add("load_factor", double_text(o.load_factors.at(0)));
  add("key_bytes", std::to_string(o.key_bytes));
  add("value_bytes", std::to_string(o.value_bytes));
  add("tail_slots", std::to_string(o.tail_slots));
  add("seed", std::to_string(o.seed));
  add("zipf_theta", double_text(o.zipf_theta));
  add("table_writes", std::to_string(o.table_writes));
  add("table_capacity", std::to_string(o.table_capacity));
  add("chunk_order", to_string(o.chunk_order));
  add("chunk", std::to_string(o.chunks.empty() ? 8 : o.chunks.front()));  // quadratic: the table's probe sequence
  return s;
}

void apply_table_spec(BenchOptions& o, const std::string& spec) {
  size_t pos = 0;
  int seen = 0;
  while (pos < spec.size()) {
    const size_t end = spec.find('\n', pos);
    const std::string line = spec.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? spec.size() : end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw InvalidArgument("table spec from the memory node: malformed line '" + line + "'");
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    // The whole value must parse (std::stoull / std::stod); no sign: every number here is >= 0.
    auto number = [&](auto parse) {
      size_t used = 0;
      decltype(parse(v, &used)) x{};
      try {
        x = parse(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || v.empty() || v[0] == '-') throw InvalidArgument("table spec from the memory node: bad " + k + "=" + v);
      return x;
    };
    auto u64 = [&] { return number([](const std::string& t, size_t* u) { return std::stoull(t, u); }); };
    auto dbl = [&] { return number([](const std::string& t, size_t* u) { return std::stod(t, u); }); };
    auto u32 = [&]() -> uint32_t {
      const uint64_t x = u64();
      if (x > UINT32_MAX) throw InvalidArgument("table spec from the memory node: bad " + k + "=" + v);
      return static_cast<uint32_t>(x);
    };
    ++seen;
    auto word = [&](auto parsed) {  // a typed option's word
      if (!parsed) throw InvalidArgument("table spec from the memory node: bad " + k + "=" + v);
      return *parsed;
    };
    if (k == "scheme") o.scheme = word(find_scheme(v) ? std::optional<SchemeId>(find_scheme(v)->id) : std::nullopt);
    else if (k == "slot_format") o.slot_format = word(parse_slot_format(v));
    else if (k == "storage") o.storage = word(parse_storage(v));
    else if (k == "slots_per_bucket") o.slots_per_bucket = u32();
    else if (k == "neighborhood") o.neighborhood = u32();
    else if (k == "initial_depth") o.initial_depth = u32();
    else if (k == "race_groups") o.race_groups = u32();
    else if (k == "sbuckets") o.sbuckets = u32();
    else if (k == "max_resizes") o.max_resizes = u32();
    else if (k == "added_sbuckets") {
      const int64_t d = added_sbuckets_pairs(v);
      o.added_sbucket_pairs = static_cast<uint32_t>(word(d >= 0 ? std::optional<int64_t>(d) : std::nullopt));
    }
    else if (k == "memory_nodes") o.memory_nodes = u32();
    else if (k == "records") o.records = u64();
    else if (k == "load_factor") o.load_factors = {dbl()};
    else if (k == "key_bytes") o.key_bytes = u32();
    else if (k == "value_bytes") o.value_bytes = u32();
    else if (k == "tail_slots") o.tail_slots = u64();
    else if (k == "seed") o.seed = u64();
    else if (k == "zipf_theta") o.zipf_theta = dbl();
    else if (k == "table_writes") o.table_writes = u64();
    else if (k == "table_capacity") o.table_capacity = u64();
    else if (k == "chunk_order") o.chunk_order = word(parse_chunk_order(v));
    else if (k == "chunk") o.served_chunk = u32();
    else throw InvalidArgument("table spec from the memory node: unknown option '" + k + "' (a newer server?)");
  }
  if (seen != 22) throw InvalidArgument("table spec from the memory node: " + std::to_string(seen) + " of 22 options");
  // A quadratic table's chunk size is its probe sequence's: the client takes it (or must have given it).
  if (o.chunk_order == ChunkOrder::kQuadratic) {
    if (!o.chunk_given) o.chunks = {o.served_chunk};
    else if (o.chunks.size() != 1 || o.chunks.front() != o.served_chunk)
      throw InvalidArgument("--chunk: the served table probes quadratic chunks of " + std::to_string(o.served_chunk) +
                            " slots (--chunk-order quadratic is the table's): give --chunk " +
                            std::to_string(o.served_chunk) + " or drop it");
  }
}

int64_t added_sbuckets_pairs(const std::string& spec) {
  if (spec == "0") return 0;
  if (spec.size() < 3 || spec.compare(0, 2, "1/") != 0 || spec.size() > 7) return -1;
  int64_t d = 0;
  for (size_t i = 2; i < spec.size(); ++i) {
    if (spec[i] < '0' || spec[i] > '9') return -1;
    d = d * 10 + (spec[i] - '0');
  }
  return d >= 1 && d <= 65535 && spec[2] != '0' ? d : -1;
}

const std::vector<std::string>& table_option_names() {
  static const std::vector<std::string> names{
      "--scheme",      "--sbuckets",      "--max-resizes", "--added-sbuckets", "--resize-pace", "--pm-path",   "--slot-format", "--storage",   "--slots-per-bucket", "--neighborhood",
      "--memory-nodes", "--records",      "--load-factor", "--key-bytes", "--value-bytes", "--initial-depth",
      "--race-groups", "--tail-slots",    "--seed",      "--distribution", "--chunk-order"};
  return names;
}

}  // namespace rdmahash::bench
