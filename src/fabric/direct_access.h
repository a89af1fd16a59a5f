// Internal: the "direct access" path of a fabric — one-sided requests executed by this process's
// CPU on memory it can address (LocalFabric's regions; a UCX peer's region mapped through
// ucp_rkey_ptr, or this rank's own region), instead of by a transport request.
//
// Semantics are those of an RDMA NIC as fabric.h states them, so the schemes cannot tell the
// difference (only time can):
//   READ/WRITE  word-wise copies with atomic loads/stores of every 8-byte-aligned word: a
//               multi-word READ racing with a WRITE or CAS may be torn between words, an aligned
//               word never is (and the race stays defined behaviour in C++, quiet under TSan).
//               A READ loads its words in ascending address order with acquire loads, so a later
//               word is never older than an earlier one in the order the writer stored them
//               (continuity's echo and seq window rely on it: continuity.h, "Torn reads"). On
//               x86 (TSO) acquire loads are the same plain MOVs as relaxed ones; on a weakly
//               ordered CPU (ARM) relaxed loads could be reordered. Stores stay relaxed: a WRITE
//               promises no order among its words, as on a NIC.
//   CAS/FAA     std::atomic_ref (lock cmpxchg / lock xadd on x86), sequentially consistent.
// A transport brackets every batch with sequentially consistent fences, like the completion of a
// request: what a batch wrote is visible before execute() returns.
//
// When CPU atomics are atomic with respect to another accessor's atomics: only when that accessor's
// atomics on the same memory are CPU atomics too. UCX's are when UCX runs them in "cpu" atomic mode
// (UCX_ATOMIC_MODE=cpu: shared-memory transports execute them with the initiator's CPU, others as
// active messages the target's CPU executes with ucs_atomic_*), not when a NIC executes them
// (device atomics: ib/rc, ...). See ucx_fabric.cpp for when the UCX fabric uses direct atomics.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rdmahash/fabric.h"

namespace rdmahash::detail {

void copy_in(std::byte* dst, const std::byte* src, size_t len);   // remote -> local
void copy_out(std::byte* dst, const std::byte* src, size_t len);  // local -> remote

// copy_in, with the common case inline: whole aligned words (a window of slots), the same
// acquire loads in ascending order.
inline void read_in(std::byte* dst, const std::byte* src, size_t len) {
  if (((reinterpret_cast<uintptr_t>(src) | len) & 7) != 0) return copy_in(dst, src, len);
  for (size_t i = 0; i < len; i += 8) {
    const uint64_t w = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<std::byte*>(src + i)))
                           .load(std::memory_order_acquire);
    std::memcpy(dst + i, &w, 8);
  }
}

// Executes READ, WRITE, CAS or FAA `r` on `target`, the mapped address of r.addr (bounds and
// alignment already checked by the caller). Not for RPCs.
inline void direct_execute(Request& r, std::byte* target) {
  switch (r.kind) {
    case ReqKind::kRead:
      read_in(static_cast<std::byte*>(r.buf), target, r.len);
      break;
    case ReqKind::kWrite:
      copy_out(target, static_cast<const std::byte*>(r.buf), r.len);
      break;
    case ReqKind::kCas: {
      uint64_t expected = r.compare;
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(target))
          .compare_exchange_strong(expected, r.swap, std::memory_order_seq_cst);
      *r.result = expected;  // the old value whether or not the swap happened
      break;
    }
    case ReqKind::kFaa:
      *r.result = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(target)).fetch_add(r.compare, std::memory_order_seq_cst);
      break;
    case ReqKind::kRpc:
      break;
  }
}

// Asks the CPU for the cache lines [p, p + len) touches, the first 4 of them, so that the misses of
// a batch overlap (independent random reads run at ~25 ns each when prefetched, ~250 ns when
// dependent). Counted from the lines the range spans, not from len: a 64-byte window of two
// 32-byte slots that starts mid-line touches two lines.
inline void prefetch(const std::byte* p, size_t len) {
  constexpr uintptr_t kLine = 64;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / kLine;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + (len ? len - 1 : 0)) / kLine;
  for (uintptr_t l = first; l <= last && l < first + 4; ++l) __builtin_prefetch(reinterpret_cast<const void*>(l * kLine));
}

}  // namespace rdmahash::detail
