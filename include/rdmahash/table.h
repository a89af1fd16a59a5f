// rdmahash/table.h — what every scheme's client offers, and the error contract.
//
// Keys are unsigned 64-bit integers (a scheme may accept a narrower range: see its config).
// Values are fixed-size byte strings of the table's `value_bytes`.
//
// Byte-string keys (`KeyView`): the overloads taking a KeyView store keys and values as byte
// strings of any length from 1 to `kMaxKeyBytes` (key) and 0 to `kMaxValueBytes` (value); keys
// are compared byte for byte (two keys of different lengths are different keys). Only schemes
// that store variable-length records take them (--scheme race); the others keep 8-byte integer
// keys and their byte-key overloads throw InvalidArgument("--scheme X takes 8-byte integer keys")
// before any request. A scheme taking byte keys also takes uint64 keys: see its header for how a
// uint64 key maps to bytes. With byte keys, `get` reports the stored value's length in
// `OpResult::value_bytes` and copies min(length, out.size()) bytes; `get(key, std::vector*)`
// resizes the vector to the value.
//
// Error contract (every call):
//  * returns an OpResult whose `status` says what happened (see Status);
//  * throws `InvalidArgument` for a key or value the table cannot hold (e.g. a key outside the
//    key range, a value of the wrong size) — before any remote request is issued;
//  * throws `FabricError` when the transport fails; the table is left as the completed requests
//    left it (every scheme's protocol keeps it consistent at every request boundary). Only the
//    operation whose request failed fails (fabric.h, "Per-request outcome"). A read that kept
//    meeting a locked or torn record for longer than its scheme's `retry_budget` throws
//    `RetryBudgetExceeded` (a FabricError) and changed nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "rdmahash/engine.h"
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
  uint32_t value_bytes = 0;  // byte-key get: length of the stored value (variable-length schemes)
  uint32_t persists = 0; // persistent schemes: flush+fence calls the memory node made for this op
};

// A byte-string key (see the contract above). A view: the bytes must outlive the call's Task.
struct KeyView {
  std::span<const std::byte> bytes;
  KeyView() = default;
  explicit KeyView(std::span<const std::byte> b) : bytes(b) {}
  explicit KeyView(std::string_view s) : bytes(reinterpret_cast<const std::byte*>(s.data()), s.size()) {}
};
inline constexpr size_t kMaxKeyBytes = 256;
inline constexpr size_t kMaxValueBytes = 15 * 1024;

// Receives a get's answer where the scheme holds it (KvClient::get_visit): `value` is the found
// value's `value_bytes` bytes — the table's value size (empty when not found or the table has no
// values) — valid only during the call.
class GetVisitor {
 public:
  virtual void on_get(uint64_t key, const OpResult& r, std::span<const std::byte> value) = 0;

 protected:
  ~GetVisitor() = default;
};

// A scheme's client. Each call is a coroutine run by an Engine; see engine.h.
class KvClient {
 public:
  virtual ~KvClient() = default;
  // Insert `key` (with `value`) unless present. Two clients racing on one key insert it once.
  virtual Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) = 0;
  // Look up `key`; on kFound copy its value into `value_out` (which may be empty to skip).
  virtual Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) = 0;
  // get() whose answer goes to `v.on_get` before the task completes (not if it throws): the same
  // requests as get(), but a scheme may hand over the value in its read buffer instead of copying
  // it, in the task's own frame (linear: no caller coroutine around get, no second copy; the
  // benchmark's get loop). `value_bytes` must be the table's value size: linear hands over the
  // value where it lies and fails with InvalidArgument (in the task) on any other size; the
  // default, get() into a buffer of `value_bytes`, cuts or zero-pads a value of another size.
  virtual Task<void> get_visit(uint64_t key, uint32_t value_bytes, GetVisitor& v);
  // Multi-get (get_visit for many keys at once): looks up keys key_of(0 .. count-1), up to `depth`
  // in flight, each answer handed to `v.on_get` as get_visit does, then `done` called once per key,
  // right after that key's on_get (Completion::index: its i; stats: its requests and round trips;
  // latency: from the batch boundary it started at to its answer; error: as run_many's, e.g. an
  // invalid key fails alone with InvalidArgument). A scheme that has one posts the READs of all
  // keys in flight together, one batch per round, without a coroutine per key, at the same
  // requests and round trips per key as get_visit (except a key that met its record locked or torn:
  // linear, one READ more; cuckoo, at most one round trip and k READs more). Returns false, doing
  // nothing, where the scheme has none (use get_visit); a `value_bytes` that get_visit refuses
  // (linear: any other than the table's) throws InvalidArgument before any request. Call it
  // outside any operation, on the client's own thread. A call from its own `done` (or on_get)
  // throws std::logic_error. An exception from key_of, on_get or done ends the call with it (keys
  // not yet reported are dropped; gets hold no locks), except on_get's for a key that met its
  // record locked or torn: that on_get runs inside the key's own operation, so the exception
  // becomes the key's Completion::error. Either way the next call runs normally.
  virtual bool get_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of,
                         uint32_t value_bytes, GetVisitor& v, const std::function<void(const Engine::Completion&)>& done) {
    (void)count, (void)depth, (void)key_of, (void)value_bytes, (void)v, (void)done;
    return false;
  }
  // Multi-find-or-put (find_or_put for many keys at once): find_or_put of keys key_of(0 .. count-1),
  // up to `depth` in flight, the value of each written by value_of(i, key, out) into a zeroed buffer of
  // the table's value size, then `done(c, r)` called once per key with its OpResult `r` (Completion as
  // get_batch's; a key whose completion has an error has no meaningful `r`). A scheme that has one
  // posts the requests of every key in flight together, one batch per round, without a coroutine
  // per key; each key's outcome is the one its find_or_put could have had, the same round trips or
  // fewer. Returns false, doing nothing, where the scheme has none (use find_or_put). Call it
  // outside any operation, on the client's own thread; a call from its own `done` throws
  // std::logic_error. Keys in flight may hold locked claims, so an exception from key_of, value_of
  // or done does not leave them there: no key starts after it, every key in flight runs to its
  // outcome and is reported to `done` (which is called again after it threw), and then the first
  // such exception is rethrown. The key whose key_of or value_of threw never starts and is not
  // reported.
  virtual bool find_or_put_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of,
                                 const std::function<void(uint64_t, uint64_t, std::span<std::byte>)>& value_of,
                                 const std::function<void(const Engine::Completion&, const OpResult&)>& done) {
    (void)count, (void)depth, (void)key_of, (void)value_of, (void)done;
    return false;
  }
  // The keys of `keys`, all in flight at once.
  bool get_batch(std::span<const uint64_t> keys, uint32_t value_bytes, GetVisitor& v,
                 const std::function<void(const Engine::Completion&)>& done) {
    return get_batch(keys.size(), static_cast<uint32_t>(std::clamp<size_t>(keys.size(), 1, UINT32_MAX)),
                     [keys](uint64_t i) { return keys[i]; }, value_bytes, v, done);
  }
  // Replace the value of a present key (kUpdated) or report kNotFound.
  virtual Task<OpResult> update(uint64_t key, std::span<const std::byte> value) = 0;
  // Insert or update: kInserted, kUpdated or kFull.
  virtual Task<OpResult> put(uint64_t key, std::span<const std::byte> value) = 0;
  // Remove a present key (kErased) or report kNotFound.
  virtual Task<OpResult> erase(uint64_t key) = 0;
  // Every record of `key` (multimap tables); values appended to `values_out` if given. Schemes that
  // hold a key at most once answer with get() (matches 0 or 1).
  virtual Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) = 0;

  // Byte-string keys (contract above). Default: InvalidArgument naming the scheme, no request.
  virtual Task<OpResult> find_or_put(KeyView key, std::span<const std::byte> value);
  virtual Task<OpResult> get(KeyView key, std::vector<std::byte>* value_out);
  virtual Task<OpResult> update(KeyView key, std::span<const std::byte> value);
  virtual Task<OpResult> put(KeyView key, std::span<const std::byte> value);
  virtual Task<OpResult> erase(KeyView key);
  // The scheme's name as --scheme spells it (for error messages).
  virtual const char* scheme_name() const = 0;

 protected:
  // get_all() of a table that holds a key at most once: get() into a buffer of `value_bytes`.
  Task<OpResult> get_all_by_get(uint64_t key, uint32_t value_bytes, std::vector<std::byte>* values_out);
};

}  // namespace rdmahash
