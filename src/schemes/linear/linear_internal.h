// Declarations private to linear probing's source files (linear_table.cpp, linear_heap.cpp,
// linear_shard.cpp): the slot and heap word encodings, the record layout and the client's
// located-slot result. The design essay (layout, publication protocol, invariants) is in
// include/rdmahash/linear.h. Not installed: nothing under include/ may include it.
#pragma once

#include <csignal>
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdmahash/linear.h"
#include "common/hash.h"
#include "schemes/record.h"
#include "schemes/retry.h"

namespace rdmahash {
namespace linear_internal {

using record::kDel;
using record::kLock;
using record::kOcc;
using record::kVersionMask;
constexpr uint64_t kSetTombstone = 1;
constexpr uint64_t kHeaderBytes = sizeof(ShardHeader);
constexpr uint32_t kMaxReadSlots = 65536;  // R and the chunk C: ProbeConfig::validate, a read sizer's R
// kHeap slot words (see linear.h).
constexpr uint64_t kHOcc = 1ULL << 63;
constexpr uint64_t kHDel = 1ULL << 62;
constexpr int kFpShift = 46;
constexpr uint64_t kIdxMask = (1ULL << kFpShift) - 1;
constexpr uint64_t kHeapHeaderBytes = sizeof(HeapHeader);
inline uint64_t heap_word(uint16_t fp, uint64_t index) {
  return kHOcc | (static_cast<uint64_t>(fp) << kFpShift) | (index + 1);
}
inline bool heap_live(uint64_t w) { return (w & kHOcc) && !(w & kHDel); }
inline uint16_t heap_fp(uint64_t w) { return static_cast<uint16_t>(w >> kFpShift); }
inline uint64_t heap_index(uint64_t w) { return (w & kIdxMask) - 1; }
// kHeap4 bucket words.
inline uint8_t way_fp(uint64_t w, uint32_t way) { return static_cast<uint8_t>(w >> (32 + 8 * way)); }
inline uint64_t bucket_group(uint64_t w) { return (w & 0xffffffffULL) - 1; }
inline bool bucket_has_free_way(uint64_t w) { return w == 0 || way_fp(w, 3) == 0; }  // ways fill in order

// linear_place (linear.h), inline here for the multi-get's loop over keys.
inline LinearPlacement place_key(const LinearConfig& c, uint64_t key) {
  const uint64_t h = hash::mix64(key ^ c.hash_seed);
  const uint64_t h2 = hash::mix64(h ^ 0xA0761D6478BD642FULL);
  LinearPlacement p;
  p.node = static_cast<uint32_t>(hash::range(h, c.memory_nodes));
  p.home = hash::range(h2, c.home_slots);
  p.kbits = c.key_bytes == 4 ? static_cast<uint32_t>(key) : static_cast<uint32_t>(h);
  // Bits 32..47 of h: independent of the node (top bits of h) and of the home slot (from h2).
  p.fp16 = static_cast<uint16_t>(h >> 32);
  p.fp8 = static_cast<uint8_t>(1 + (h >> 32) % 255);
  return p;
}

// A buffer that lives in the coroutine frame when small (the common case: R or C slots of a few
// words) and on the heap otherwise, so a lookup does not pay a malloc for its read buffer.
class Scratch {
 public:
  // n == 0: just the inline bytes (callers check size() and fall back to their own buffer).
  explicit Scratch(size_t n) : n_(n ? n : sizeof small_) {
    if (n > sizeof small_) big_.resize(n);
  }
  std::byte* data() { return n_ > sizeof small_ ? big_.data() : small_; }
  size_t size() const { return n_; }

 private:
  size_t n_;
  alignas(8) std::byte small_[512];  // find_or_put's double buffer of 2 chunks of 8 slots of 32 B
  std::vector<std::byte> big_;
};

using record::load64;
using record::make_ctrl;
using record::store64;
using record::version_of;

// Inline slots and heap records use the shared record format (schemes/record.h).
struct InlineLayout : record::Layout {
  explicit InlineLayout(const LinearConfig& c) : record::Layout(c.key_bytes, c.value_bytes) {}
};

// The key stored in a published inline slot.
inline uint64_t slot_key(const LinearConfig& c, const std::byte* slot) { return InlineLayout(c).key(slot); }
inline bool inline_consistent(const LinearConfig&, const InlineLayout& l, const std::byte* slot) {
  return l.consistent(slot);
}
// Builds the bytes after ctrl (key word, padded value, check) for version `v`.
inline void build_payload(const LinearConfig&, const InlineLayout& l, uint64_t key, uint64_t v,
                          std::span<const std::byte> value, std::byte* slot) {
  l.build(key, v, value, slot);
}

}  // namespace linear_internal
using namespace linear_internal;

struct LinearClient::Located {
  bool found = false;
  uint64_t slot = 0;
  uint64_t ctrl = 0;  // kSet: the slot word; kInline: the unlocked ctrl word read
};

// find_or_put_batch's state (linear_put_batch.cpp), kept between calls.
struct LinearClient::PutBatchState {
  enum class Stage : uint8_t {
    kRead,     // next: READ the chunk at `start` (chunk 0 with the speculative home CAS beside it),
               // and the chunk after it where insert would overlap it
    kClaim,    // next: CAS `slot` 0 -> claim (the first empty slot the scan found)
    kPublish,  // `slot` is claimed (locked): next, the payload WRITE and the fenced ctrl WRITE
  };
  struct Key {
    uint64_t index, key;
    uint64_t home;       // home slot
    uint64_t start;      // the current chunk's first slot
    uint64_t slot;       // kClaim, kPublish: the slot claimed or being claimed
    uint64_t old;        // the CAS's old value (a Request's result)
    uint32_t node, kbits;
    uint32_t buf;        // its buffers: chunk, record, value (stable while it is in flight)
    uint32_t chunk;      // i: chunks read before the current one
    uint32_t n;          // slots of the current chunk
    uint32_t j;          // kClaim: the scanned slot of the chunk the CAS is for
    uint32_t half;       // which half of its double buffer holds the current chunk
    uint32_t n_next;     // slots of chunk + 1, read in the same round into the other half (0: not read)
    uint32_t first_req;  // this round: its first request in `reqs`
    uint32_t chunks;     // OpResult::chunks so far
    Stage stage;
    bool speculated;     // chunk 0's READ carries the home CAS
    bool posted;         // this round carried its requests
    bool ahead;          // this round carried the READ of chunk + 1 (read_ahead)
    OpStats st;
    std::chrono::steady_clock::time_point t0;  // the batch boundary it joined at
  };
  struct Resume {  // a key that leaves the rounds for insert's coroutine
    Key k;
    bool past_m;     // M chunks held neither the key nor a free slot: the lookup decides
    OpResult r;
  };
  std::vector<Key> active;
  std::vector<Resume> resume;
  std::vector<uint32_t> free_bufs;
  std::vector<std::byte> bufs;
  std::vector<Request> reqs;
  bool running = false;
};

}  // namespace rdmahash
