#include <atomic>

#include "rdmahash/fabric.h"

namespace rdmahash {

void FabricCounters::add(const Request& r) {
  switch (r.kind) {
    case ReqKind::kRead: ++reads; bytes_read += r.len; lines_read += lines_spanned(r.addr.offset, r.len); break;
    case ReqKind::kWrite: ++writes; bytes_written += r.len; break;
    case ReqKind::kCas: ++cas; bytes_read += 8; bytes_written += 16; break;
    case ReqKind::kFaa: ++faa; bytes_read += 8; bytes_written += 8; break;
    case ReqKind::kRpc: ++rpcs; bytes_written += r.len; break;
  }
}

void Transport::end_direct_reads(uint64_t reads, uint64_t bytes, uint64_t lines) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // as execute() ends a batch
  counters_.reads += reads;
  counters_.bytes_read += bytes;
  counters_.lines_read += lines;
  ++counters_.direct_rounds;
}

}  // namespace rdmahash
