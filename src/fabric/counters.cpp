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

}  // namespace rdmahash
