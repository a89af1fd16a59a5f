#include "bench/options.h"

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
    case Workload::kYcsbLoad: return "ycsb-load";
    case Workload::kYcsbRun: return "ycsb-run";
    case Workload::kKvMix: return "kv-mix";
  }
  return "?";
}

Workload parse_workload(const std::string& s) {
  for (Workload w : {Workload::kGet, Workload::kGetAll, Workload::kFindOrPut, Workload::kMixed, Workload::kReadIntensive,
                     Workload::kWriteIntensive, Workload::kRawRead, Workload::kKvMix})
    if (s == to_string(w)) return w;
  throw InvalidArgument("unknown workload '" + s +
                        "' (expected get, get-all, find-or-put, mixed, read-intensive, write-intensive, raw-read or kv-mix)");
}

std::string ReadSizeSpec::text() const {
  switch (kind) {
    case Kind::kFixed: return "fixed:" + std::to_string(slots);
    case Kind::kModel: return "model";
    case Kind::kModelUnconstrained: return "model-unconstrained";
    case Kind::kCluster: return "cluster";
  }
  return "?";
}

ReadSizeSpec parse_read_size(const std::string& s) {
  ReadSizeSpec r;
  if (s == "model") { r.kind = ReadSizeSpec::Kind::kModel; return r; }
  if (s == "model-unconstrained") { r.kind = ReadSizeSpec::Kind::kModelUnconstrained; return r; }
  if (s == "cluster") { r.kind = ReadSizeSpec::Kind::kCluster; return r; }
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
                          "model-unconstrained or cluster");
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
std::string short_text(double v) {  // for messages: "1e-15", not "1.0000000000000001e-15"
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

uint32_t max_value_bytes(const BenchOptions& o) {
  if (o.scheme == "race") return static_cast<uint32_t>(kMaxValueBytes);  // out-of-place KV blocks
  return o.storage == "inline" ? kMaxInlineValueBytes : kMaxHeapValueBytes;
}

std::string BenchOptions::error() const {
  if (fabric != "local" && fabric != "ucx") return "--fabric must be 'local' or 'ucx', got '" + fabric + "'";
  if (scheme != "linear" && scheme != "cuckoo" && scheme != "race" && scheme != "continuity" && scheme != "level")
    return "--scheme '" + scheme + "' is not available (available: linear, cuckoo, race, continuity, level)";
  if (scheme == "race") {
    if (key_bytes < 8 || key_bytes > 256) return "--key-bytes must be in [8, 256] with --scheme race";
    if (value_bytes > 15360) return "--value-bytes must be at most 15360 with --scheme race";
    if (memory_nodes > 64) return "--memory-nodes must be at most 64 with --scheme race";
    if (race_dir_cache != "on" && race_dir_cache != "off") return "--race-dir-cache must be on or off";
    if (zipf_theta > 0) return "--distribution zipf loads duplicate keys: race tables hold each key once";
    if (storage != "inline") return "--storage applies to linear and cuckoo (race stores records out of place)";
    if (fabric == "ucx" && (memory_nodes > 1 || symmetric) && ycsb_path.empty())
      return "--scheme race bulk-loads its records in the process hosting every memory node: over ucx use "
             "--memory-nodes 1 (not --symmetric), or --ycsb (the clients insert the records)";
  }
  // Bounded whatever the scheme (an option another scheme ignores still has its range).
  if (initial_depth > 20) return "--initial-depth must be at most 20";
  if (race_groups == 0 || race_groups > 4096) return "--race-groups must be in [1, 4096]";
  if (kv_keys == 0 || kv_keys > (1u << 20)) return "--keys must be in [1, 2^20]";
  if (direct_access != "on" && direct_access != "off") return "--direct-access must be on or off";
  if (!parse_speculative_claim(speculative_claim))
    return "--speculative-claim must be on, off or auto, got '" + speculative_claim + "'";
  // The names are checked by rdmahash::parse_serve_mode / parse_client_wait only (the driver's
  // serve_mode_of() / client_wait_of() rely on this check having passed).
  if (!parse_serve_mode(serve_mode))
    return "--serve-mode must be " + std::string(serve_mode_names()) + ", got '" + serve_mode + "'";
  if (!parse_client_wait(client_wait))
    return "--client-wait must be " + std::string(client_wait_names()) + ", got '" + client_wait + "'";
  if (!parse_read_coalescing(read_coalescing))
    return "--read-coalescing must be " + std::string(read_coalescing_names()) + ", got '" + read_coalescing + "'";
  if (client_spin_us < 1 || client_spin_us > 100000) return "--client-spin-us must be in [1, 100000] (microseconds)";
  if (serve_spin_us < 1 || serve_spin_us > 999) return "--serve-spin-us must be in [1, 999] (microseconds: below the 1 ms at which a spin stops to look at its sockets)";
  if (sbuckets < 1 || sbuckets > 4) return "--sbuckets must be in [1, 4] (the indicator word has 24 valid bits)";
  if (max_resizes > 16) return "--max-resizes must be at most 16";
  if (added_sbuckets_pairs(added_sbuckets) < 0)
    return "--added-sbuckets must be 0 or 1/D with D in [1, 65535] (e.g. 1/10: one added group per 10 segment pairs), "
           "got '" + added_sbuckets + "'";
  if (added_sbuckets != "0" && scheme != "continuity") return "--added-sbuckets applies to --scheme continuity";
  if (resize_pace > 1000000) return "--resize-pace must be at most 1000000";
  if (max_resizes > 0 && scheme != "continuity") return "--max-resizes applies to --scheme continuity";
  if (!pm_path.empty() && scheme != "continuity" && scheme != "level")
    return "--pm-path applies to --scheme continuity or level";
  if (!pm_path.empty() && (memory_nodes != 1 || symmetric))
    return "--pm-path holds one memory node's table: use --memory-nodes 1 (and no --symmetric)";
  if (!pm_path.empty() && load_factors.size() != 1) return "--pm-path holds one table: give one --load-factor";
  if (storage != "inline" && storage != "heap" && storage != "heap4")
    return "--storage must be inline, heap or heap4, got '" + storage + "'";
  if (scheme != "linear" && storage == "heap4")
    return "--storage heap4 applies to --scheme linear (cuckoo: --storage heap --slots-per-bucket 4)";
  if (slots_per_bucket != 1 && slots_per_bucket != 4) return "--slots-per-bucket must be 1 or 4";
  if (cuckoo_probe != "parallel" && cuckoo_probe != "sequential")
    return "--cuckoo-probe must be parallel or sequential, got '" + cuckoo_probe + "'";
  if (scheme != "linear" && zipf_theta > 0)
    return "--distribution zipf loads duplicate keys: " + scheme + " tables hold each key once (use --scheme linear)";
  if (scheme != "linear")
    for (Workload w : workloads)
      if (w == Workload::kGetAll) return "workload get-all (multimap scans) applies to --scheme linear";
  if (slot_format != "auto" && slot_format != "set" && slot_format != "inline")
    return "--slot-format must be auto, set or inline, got '" + slot_format + "'";
  if (memory_nodes == 0) return "--memory-nodes must be at least 1";
  if (memory_nodes > 4096) return "--memory-nodes must be at most 4096";
  if (clients == 0) return "--clients must be at least 1";
  if (clients > 256) return "--clients must be at most 256";
  if (records == 0) return "--records must be at least 1";
  if (tail_slots > kMaxTailSlots)
    return "--tail-slots must be at most 2^36 (overflow slots per memory node; 0 picks max(4096, S/32)), got " +
           std::to_string(tail_slots);
  if (records > (1ULL << 34)) return "--records must be at most 2^34";
  if (load_factors.empty()) return "--load-factor needs at least one value";
  // The table has records / load factor slots, at most 2^36 per memory node (linear's bound; the
  // other schemes' are lower and their configs say so): a tiny load factor is refused here, naming
  // the range that fits, instead of wrapping a size.
  const double min_load_factor = static_cast<double>(records) / (0x1p36 * memory_nodes);
  for (double f : load_factors) {
    if (!(f > 0.0 && f < 1.0) || std::isnan(f))
      return "--load-factor must be in (0, 1), got " + short_text(f);
    if (f < min_load_factor)
      return "--load-factor " + short_text(f) + " is too small for --records " + std::to_string(records) +
             ": the table would need more than 2^36 slots per memory node; with these records and --memory-nodes "
             "the load factor must be in [" + short_text(min_load_factor) + ", 1)";
  }
  if (scheme != "race" && key_bytes != 4 && key_bytes != 8) return "--key-bytes must be 4 or 8";
  if (scheme != "race" && value_bytes > max_value_bytes(*this))
    return storage == "inline" ? "--value-bytes must be at most 120 (inline records hold at most 120 value bytes; "
                                 "--storage heap takes up to 4096)"
                               : "--value-bytes must be at most 4096 for --storage " + storage;
  if (slot_format == "set" && (value_bytes != 0 || key_bytes != 8))
    return "--slot-format set holds 63-bit keys only: use --key-bytes 8 and --value-bytes 0";
  if (key_bytes == 4 && records >= (1ULL << 31)) return "--key-bytes 4 allows fewer than 2^31 records";
  if (repeat == 0 || repeat > 1000) return "--repeat must be in [1, 1000]";
  if (workloads.empty()) return "--workload needs at least one value";
  if (ops == 0) return "--ops must be at least 1";
  // Each op keeps an 8-byte latency sample; "-1" parses as 2^64-1 and must not reach the driver.
  if (ops > (1ULL << 32)) return "--ops must be at most 2^32 per client";
  if (depth == 0 || depth > 4096) return "--depth must be in [1, 4096]";
  if (chunk == 0 || chunk > 65536) return "--chunk must be in [1, 65536]";
  if (max_chunks == 0) return "--max-chunks must be at least 1";
  if (read_sizes.empty()) return "--read-size needs at least one value";
  for (const auto& r : read_sizes)
    if (r.kind == ReadSizeSpec::Kind::kFixed && (r.slots == 0 || r.slots > 65536))
      return "--read-size must be in [1, 65536] slots";
  if (storage == "heap4")
    for (const auto& r : read_sizes)
      if (r.kind != ReadSizeSpec::Kind::kFixed)
        return "--read-size " + r.text() + " assumes one record per slot: use a fixed read size with --storage heap4";
  if (clusters > 10000000) return "--clusters must be at most 10^7";
  if (assumed_load_factor != 0 && !(assumed_load_factor > 0 && assumed_load_factor < 1))
    return "--assumed-load-factor must be in (0, 1)";
  if (zipf_theta < 0 || zipf_theta >= 10 || std::isnan(zipf_theta)) return "--distribution zipf:THETA needs 0 < THETA < 10";
  if (zipf_theta == 1.0) return "--distribution zipf:1 is not supported (the generator needs THETA != 1)";
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
  add("scheme", o.scheme);
  add("slot_format", o.slot_format);
  add("storage", o.storage);
  add("slots_per_bucket", std::to_string(o.slots_per_bucket));
  add("initial_depth", std::to_string(o.initial_depth));
  add("race_groups", std::to_string(o.race_groups));
  add("sbuckets", std::to_string(o.sbuckets));
  add("max_resizes", std::to_string(o.max_resizes));
  add("added_sbuckets", o.added_sbuckets);
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
    if (k == "scheme") o.scheme = v;
    else if (k == "slot_format") o.slot_format = v;
    else if (k == "storage") o.storage = v;
    else if (k == "slots_per_bucket") o.slots_per_bucket = u32();
    else if (k == "initial_depth") o.initial_depth = u32();
    else if (k == "race_groups") o.race_groups = u32();
    else if (k == "sbuckets") o.sbuckets = u32();
    else if (k == "max_resizes") o.max_resizes = u32();
    else if (k == "added_sbuckets") o.added_sbuckets = v;
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
    else throw InvalidArgument("table spec from the memory node: unknown option '" + k + "' (a newer server?)");
  }
  if (seen != 19) throw InvalidArgument("table spec from the memory node: " + std::to_string(seen) + " of 19 options");
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
      "--scheme",      "--sbuckets",      "--max-resizes", "--added-sbuckets", "--resize-pace", "--pm-path",   "--slot-format", "--storage",   "--slots-per-bucket",
      "--memory-nodes", "--records",      "--load-factor", "--key-bytes", "--value-bytes", "--initial-depth",
      "--race-groups", "--tail-slots",    "--seed",      "--distribution"};
  return names;
}

}  // namespace rdmahash::bench
