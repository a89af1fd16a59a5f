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
// Cost: the recorder stores 48 bytes twice per operation (pending at invocation, the outcome at
// completion) into a per-client buffer reserved before the timed part; the file is written after
// the run (off the hot path), or is the buffer (a file mapping, see HistoryBuffer). The buffer is bounded: kMaxEvents per run.
//
// File format (little-endian): a 32-byte header {magic "RDMAHIS1", u32 version = 1,
// u32 event_bytes = 48, u64 count, u64 open} and `count` events. `open` = 1: a mapped recording
// that was not closed (its client died); unused capacity may follow the events. Several files
// of one table's life (one per `bench --connect` client) are checked together:
// `rdmahash check-history A B ...` (their init events must agree, their clients must differ). Events of op kInit
// (client kInitClient, times 0) give each key's state before the run (loaded or absent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

// One client's events. An operation is pushed when it is invoked — as pending: status
// kStatusError, response time = invocation time, i.e. "outcome unknown" to the checker — and
// overwritten with its outcome when it completes (set()), so the buffer is in invocation order.
// Not thread-safe: one per client.
//
// Two storages. In memory (default): written to a file after the run. Or a file mapping
// (map_file(), used by `bench --connect`): every push and set is a store into a MAP_SHARED mapping
// of the history file, whose header count is raised after each push, so a client killed at any
// instruction (kill -9) leaves a valid file — its completed operations, and the ones in flight as
// pending — that the checker reads like any other (its header's `open` flag says the recording
// was not finished and allows the unused capacity after the events).
class HistoryBuffer {
 public:
  HistoryBuffer() = default;
  HistoryBuffer(HistoryBuffer&& o) noexcept;
  HistoryBuffer& operator=(HistoryBuffer&& o) noexcept;
  ~HistoryBuffer();
  // Room for `events`, touched now (resize, then clear: the capacity stays) so that the timed part
  // takes no page faults for the buffer.
  void reserve(uint64_t events) {
    if (mapped_) return;
    events_.resize(events);
    events_.clear();
  }
  // Appends `e`; returns its index for set(). Throws std::length_error when a mapped file is full.
  uint64_t push(const HistoryEvent& e);
  void set(uint64_t index, const HistoryEvent& e);
  std::span<const HistoryEvent> events() const;
  std::vector<std::byte> serialize() const;
  static std::vector<HistoryEvent> deserialize(std::span<const std::byte> bytes);  // throws std::runtime_error

  // Records into a new file at `path` (replaced if it exists): header, the `init` events, room for
  // `capacity` more. Throws std::runtime_error naming the path (also when it is not a regular file).
  void map_file(const std::string& path, std::span<const HistoryEvent> init, uint64_t capacity);
  // Mapped: trims the file to its events, clears `open`, unmaps. Throws std::runtime_error.
  void close_file();
  bool mapped() const { return mapped_ != nullptr; }

  // The client's name in the events and in the values it writes, where it is not its index among
  // this run's clients: a `bench --connect` client is one of many runs against one server, so it
  // is named by the id the server gave it (the index wraps; the id does not), which keeps clients
  // distinct across files and every written value unique.
  void set_client(uint32_t id) { client_ = id; }
  std::optional<uint32_t> client() const { return client_; }

 private:
  std::vector<HistoryEvent> events_;
  std::optional<uint32_t> client_;
  std::byte* mapped_ = nullptr;  // the whole file
  uint64_t mapped_bytes_ = 0;
  uint64_t first_ = 0;           // mapped: events before this one are the init events
  uint64_t count_ = 0;           // mapped: events in the file (init included)
  uint64_t capacity_ = 0;        // mapped: events the file has room for (init included)
  std::string path_;
};

// Empty when a history file may be written at `path`: nothing is there, or a regular file (a
// symlink to one counts: the rename replaces the link). Else why not, naming the path: a history
// replaces its file by a rename, which must never swap a device or a FIFO for a regular file.
// Looks with stat() only, so a FIFO is never opened (an open() for writing would block).
std::string history_target_error(const std::string& path);

// Writes the history file (throws std::runtime_error naming the path on failure, and for a `path`
// that history_target_error() refuses).
void write_history(const std::string& path, std::span<const HistoryEvent> init,
                   std::span<const std::span<const HistoryEvent>> clients);

// Reads a history file; throws std::runtime_error with a clear message for a bad file.
std::vector<HistoryEvent> read_history(const std::string& path);

}  // namespace rdmahash::check
