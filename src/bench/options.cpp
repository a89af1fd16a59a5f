#include "bench/options.h"

#include <cmath>

#include "rdmahash/table.h"

namespace rdmahash::bench {

const char* to_string(Workload w) {
  switch (w) {
    case Workload::kGet: return "get";
    case Workload::kFindOrPut: return "find-or-put";
    case Workload::kMixed: return "mixed";
    case Workload::kReadIntensive: return "read-intensive";
    case Workload::kWriteIntensive: return "write-intensive";
    case Workload::kRawRead: return "raw-read";
  }
  return "?";
}

Workload parse_workload(const std::string& s) {
  for (Workload w : {Workload::kGet, Workload::kFindOrPut, Workload::kMixed, Workload::kReadIntensive,
                     Workload::kWriteIntensive, Workload::kRawRead})
    if (s == to_string(w)) return w;
  throw InvalidArgument("unknown workload '" + s +
                        "' (expected get, find-or-put, mixed, read-intensive, write-intensive or raw-read)");
}

std::string BenchOptions::error() const {
  if (fabric != "local" && fabric != "ucx") return "--fabric must be 'local' or 'ucx', got '" + fabric + "'";
  if (scheme != "linear") return "--scheme '" + scheme + "' is not available (available: linear)";
  if (slot_format != "auto" && slot_format != "set" && slot_format != "inline")
    return "--slot-format must be auto, set or inline, got '" + slot_format + "'";
  if (memory_nodes == 0) return "--memory-nodes must be at least 1";
  if (memory_nodes > 4096) return "--memory-nodes must be at most 4096";
  if (clients == 0) return "--clients must be at least 1";
  if (clients > 256) return "--clients must be at most 256";
  if (records == 0) return "--records must be at least 1";
  if (records > (1ULL << 34)) return "--records must be at most 2^34";
  if (load_factors.empty()) return "--load-factor needs at least one value";
  for (double f : load_factors)
    if (!(f > 0.0 && f < 1.0) || std::isnan(f))
      return "--load-factor must be in (0, 1), got " + std::to_string(f);
  if (key_bytes != 4 && key_bytes != 8) return "--key-bytes must be 4 or 8";
  if (value_bytes > 120) return "--value-bytes must be at most 120 (inline records hold at most 120 value bytes)";
  if (slot_format == "set" && (value_bytes != 0 || key_bytes != 8))
    return "--slot-format set holds 63-bit keys only: use --key-bytes 8 and --value-bytes 0";
  if (key_bytes == 4 && records >= (1ULL << 31)) return "--key-bytes 4 allows fewer than 2^31 records";
  if (repeat == 0 || repeat > 1000) return "--repeat must be in [1, 1000]";
  if (workloads.empty()) return "--workload needs at least one value";
  if (ops == 0) return "--ops must be at least 1";
  if (depth == 0 || depth > 4096) return "--depth must be in [1, 4096]";
  if (chunk == 0 || chunk > 65536) return "--chunk must be in [1, 65536]";
  if (max_chunks == 0) return "--max-chunks must be at least 1";
  if (read_sizes.empty()) return "--read-size needs at least one value";
  for (uint32_t r : read_sizes)
    if (r == 0 || r > 65536) return "--read-size must be in [1, 65536] slots";
  for (uint32_t b : read_bytes)
    if (b == 0 || b > (1u << 20)) return "--read-bytes must be in [1, 1048576]";
  return {};
}

}  // namespace rdmahash::bench
