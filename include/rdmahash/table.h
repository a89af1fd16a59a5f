// rdmahash/table.h — what every scheme's client offers, and the error contract.
//
// Keys are unsigned 64-bit integers (a scheme may accept a narrower range: see its config).
// Values are fixed-size byte strings of the table's `value_bytes`.
//
// Error contract (every call):
//  * returns an OpResult whose `status` says what happened (see Status);
//  * throws `InvalidArgument` for a key or value the table cannot hold (e.g. a key outside the
//    key range, a value of the wrong size) — before any remote request is issued;
//  * throws `FabricError` when the transport fails; the table is left as the completed requests
//    left it (every scheme's protocol keeps it consistent at every request boundary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "rdmahash/task.h"

namespace rdmahash {

class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class Status : uint8_t {
  kFound,     // find_or_put: the key was already present; get: found (value copied out)
  kInserted,  // find_or_put / put: the key was absent and has been inserted
  kFull,      // insert: no free slot within the probe bound (seed 001: M chunks of C slots)
  kNotFound,  // get / update / erase: the key is absent
  kUpdated,   // update / put: the present key's value was replaced
  kErased,    // erase: the key was present and has been removed
};
const char* to_string(Status s);

struct OpResult {
  Status status = Status::kNotFound;
  uint32_t chunks = 0;   // reads of the slot array the operation scanned (probe length in reads)
  uint32_t matches = 0;  // records matched (multimap lookups); 1 for a found key
  uint32_t persists = 0; // persistent schemes: flush+fence calls the memory node made for this op
};

// A scheme's client. Each call is a coroutine run by an Engine; see engine.h.
class KvClient {
 public:
  virtual ~KvClient() = default;
  // Insert `key` (with `value`) unless present. Two clients racing on one key insert it once.
  virtual Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) = 0;
  // Look up `key`; on kFound copy its value into `value_out` (which may be empty to skip).
  virtual Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) = 0;
  // Replace the value of a present key (kUpdated) or report kNotFound.
  virtual Task<OpResult> update(uint64_t key, std::span<const std::byte> value) = 0;
  // Insert or update: kInserted, kUpdated or kFull.
  virtual Task<OpResult> put(uint64_t key, std::span<const std::byte> value) = 0;
  // Remove a present key (kErased) or report kNotFound.
  virtual Task<OpResult> erase(uint64_t key) = 0;
  // Every record of `key` (multimap tables); values appended to `values_out` if given. Schemes that
  // hold a key at most once answer with get().
  virtual Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out);
};

}  // namespace rdmahash
