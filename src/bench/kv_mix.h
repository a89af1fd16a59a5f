// kv-mix: a contended key-value workload whose histories the linearizability checker verifies
// (`rdmahash bench --workload kv-mix --keys N --history FILE`, then `rdmahash check-history FILE`).
//
// Keys: N key indices [b, b + N) of the experiment's KeySpace, with b = max(0, records - N/2):
// the lower half is bulk-loaded (present with fill_value(key)), the upper half starts absent.
// Each client draws its operations uniformly over those keys and from the mix get 40 %, put 15 %,
// update 15 %, erase 10 %, find_or_put 20 %. Tables without values (linear --slot-format set)
// cannot put or update: there those draws are skipped and the mix is get / erase / find_or_put.
//
// Values: every write writes a value no other write writes — its first 8 bytes are the tag
// (client + 1) << 44 | repeat << 34 | sequence, the rest fill_value(tag) — so a read's digest
// names the one write it saw, and a torn read names none (--value-bytes must be 0 or ≥ 8).
//
// History rules: --history needs --workload kv-mix alone (other workloads write keys the history
// would not know of) and one --load-factor (each load factor builds a new table). A history is
// one table's whole life, so --history implies --keep-table: repetitions continue on one table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/options.h"
#include "bench/report.h"
#include "bench/workload.h"
#include "check/history.h"
#include "rdmahash/engine.h"
#include "rdmahash/table.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash::bench {

// Empty when the kv-mix / --history options are consistent, else the message.
std::string kv_mix_error(const BenchOptions& o);

// The operations of one client at one kv-mix point (deterministic in seed, client and repeat).
class KvMix {
 public:
  KvMix(const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes, uint32_t client, uint32_t repeat,
        check::HistoryBuffer* history);
  // The next operation; it records itself into the history (if any) and counts into `r`.
  Task<void> next(KvClient* kv, const Engine* engine, ClientResult* r);

 private:
  uint64_t rng();
  const KeySpace& keys_;
  uint64_t first_, count_;
  uint32_t value_bytes_;
  uint32_t client_;
  uint64_t tag_base_;
  uint64_t seq_ = 0;
  uint64_t state_;
  check::HistoryBuffer* history_;
};

// The kInit events: every kv-mix key's state before the run.
std::vector<check::HistoryEvent> kv_mix_initial_state(const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes);

// Writes the history file of a run: the initial state, then every client's events.
void write_kv_mix_history(const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes,
                          std::span<const check::HistoryBuffer> clients);
// UCX (collective): every client rank sends its events to rank 0 after the run (MPI gather), and
// rank 0 writes the one file.
void gather_kv_mix_history(UcxFabric& fabric, const BenchOptions& o, const KeySpace& keys, uint32_t value_bytes,
                           const check::HistoryBuffer& mine);

// UCX runs with --history (collective: call on every rank after MPI_Init): throws InvalidArgument
// on every rank alike when the client ranks span several hosts (their monotonic clocks are
// unrelated) or the history would exceed its bound.
void check_ucx_history(const BenchOptions& o);
// 1 if `path` can be written, else 0, leaving an existing file untouched (a new one is created and
// removed again); called before a run so that a bad --history path is bad input, not an error after
// the run, and a run refused later does not destroy an earlier history. Throws InvalidArgument,
// naming the path, when it exists and is not a regular file (check::history_target_error).
int history_writable(const std::string& path);

}  // namespace rdmahash::bench
