// Benchmark configuration: one value, passed in; no globals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rdmahash::bench {

enum class Workload { kGet, kFindOrPut, kMixed, kReadIntensive, kWriteIntensive, kRawRead };
const char* to_string(Workload w);
Workload parse_workload(const std::string& s);  // throws InvalidArgument

struct BenchOptions {
  std::string fabric = "local";        // local | ucx
  std::string scheme = "linear";
  std::string slot_format = "auto";    // auto | set | inline (auto: set unless values or 4-byte keys)
  uint32_t memory_nodes = 1;
  bool symmetric = false;
  uint32_t clients = 1;                // local fabric: client threads (ucx: the client ranks)
  uint64_t records = 100000;
  std::vector<double> load_factors{0.5};
  uint32_t key_bytes = 8;
  uint32_t value_bytes = 0;
  std::vector<Workload> workloads{Workload::kGet};
  uint64_t ops = 100000;               // per client
  uint32_t depth = 16;
  uint32_t chunk = 8;
  uint32_t max_chunks = 128;
  std::vector<uint32_t> read_sizes{8}; // slots per get read
  std::vector<uint32_t> read_bytes{8}; // raw-read sizes
  uint64_t tail_slots = 0;
  uint64_t seed = 1;
  uint32_t repeat = 1;                 // run the sequence of points this many times (interleaved)
  bool same_keys = false;
  std::string json_path;
  bool progress = true;                // progress bar while loading (only on a terminal)
  bool quiet = false;                  // no summary table

  // Empty when valid, else a message naming the bad option.
  std::string error() const;
};

}  // namespace rdmahash::bench
