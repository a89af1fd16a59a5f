// Operation histories for linearizability checking (`rdmahash bench --history FILE`, issue 10).
//
// What is recorded: every key-value operation of every client, as one fixed-size HistoryEvent —
// client, invocation and response time, operation, key, a 64-bit digest of the value written and
// of the value read, and the status (or kStatusError when the transport failed: outcome unknown).
// Every write of the kv-mix workload writes a value no other write writes (client, sequence), so
// a read's digest names the one write it saw, and a torn read names none.
//
// Times: the engine's batch-boundary clock (Engine::batch_clock, std::chrono::steady_clock =
// CLOCK_MONOTONIC on Linux, one clock for every process on a host). The invocation time is the
// boundary read when the operation was started, before it queued its first request — so it is
// ≤ the true start; the response time is read when the operation resumes after its last request,
// i.e. the boundary at which the batch holding that request had completed — so it is ≥ the true
// end. Wider intervals only make the checker more permissive, never wrong. Across hosts the
// monotonic clocks are unrelated: the UCX driver refuses --history when client ranks run on more
// than one host.
//
// Cost: the recorder appends 48 bytes to a per-client buffer reserved before the timed part; the
// file is written after the run (off the hot path). The buffer is bounded: kMaxEvents per run.
//
// File format (little-endian): a 32-byte header {magic "RDMAHIS1", u32 version = 1,
// u32 event_bytes = 48, u64 count, u64 reserved = 0} and `count` events. Events of op kInit
// (client kInitClient, times 0) give each key's state before the run (loaded or absent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rdmahash::check {

enum class HistOp : uint8_t { kInit = 0, kGet = 1, kPut = 2, kUpdate = 3, kErase = 4, kFindOrPut = 5 };
const char* to_string(HistOp op);

constexpr uint8_t kStatusError = 0xFF;         // the operation threw FabricError: outcome unknown
constexpr uint32_t kInitClient = 0xFFFFFFFFu;  // the loader (kInit events)
constexpr uint64_t kMaxEvents = uint64_t{1} << 24;  // per file: 768 MiB

struct HistoryEvent {
  uint64_t invoke_ns = 0;    // steady clock
  uint64_t response_ns = 0;  // steady clock
  uint64_t key = 0;
  uint64_t written = 0;      // digest of the value written (put, update, find_or_put, init); 0: none
  uint64_t read = 0;         // digest of the value read (get → kFound); 0: none
  uint32_t client = 0;
  uint8_t op = 0;            // HistOp
  uint8_t status = 0;        // rdmahash::Status, or kStatusError
  uint16_t reserved = 0;
};
static_assert(sizeof(HistoryEvent) == 48);

// Digest of a value: 0 for the empty value (set tables hold no values), never 0 otherwise.
uint64_t value_digest(std::span<const std::byte> value);

// One client's events, in completion order. Not thread-safe: one per client.
class HistoryBuffer {
 public:
  void reserve(uint64_t events) { events_.reserve(events); }
  void push(const HistoryEvent& e) { events_.push_back(e); }
  const std::vector<HistoryEvent>& events() const { return events_; }
  std::vector<std::byte> serialize() const;
  static std::vector<HistoryEvent> deserialize(std::span<const std::byte> bytes);  // throws std::runtime_error

 private:
  std::vector<HistoryEvent> events_;
};

// Writes the history file (throws std::runtime_error naming the path on failure).
void write_history(const std::string& path, std::span<const HistoryEvent> init,
                   std::span<const std::vector<HistoryEvent>* const> clients);

// Reads a history file; throws std::runtime_error with a clear message for a bad file.
std::vector<HistoryEvent> read_history(const std::string& path);

}  // namespace rdmahash::check
