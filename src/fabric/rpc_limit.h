// Internal: the one message every fabric gives for an RPC payload over kMaxRpcBytes (fabric.h).
#pragma once

#include <cstdint>
#include <string>

#include "rdmahash/fabric.h"

namespace rdmahash::detail {

inline std::string rpc_too_large(uint64_t len) {
  return "rpc payload of " + std::to_string(len) + " bytes refused: a memory node accepts at most " +
         std::to_string(kMaxRpcBytes) + " bytes (kMaxRpcBytes)";
}

}  // namespace rdmahash::detail
