// Word-wise copies of the direct-access path (see direct_access.h for why acquire loads and relaxed stores).
#include "fabric/direct_access.h"

#include <cstring>

namespace rdmahash::detail {

void copy_in(std::byte* dst, const std::byte* src, size_t len) {
  size_t i = 0;
  while (i < len && (reinterpret_cast<uintptr_t>(src + i) & 7) != 0) {
    dst[i] = std::atomic_ref<std::byte>(const_cast<std::byte&>(src[i])).load(std::memory_order_acquire);
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<std::byte*>(src + i)))
                     .load(std::memory_order_acquire);
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < len; ++i)
    dst[i] = std::atomic_ref<std::byte>(const_cast<std::byte&>(src[i])).load(std::memory_order_acquire);
}

void copy_out(std::byte* dst, const std::byte* src, size_t len) {
  size_t i = 0;
  while (i < len && (reinterpret_cast<uintptr_t>(dst + i) & 7) != 0) {
    std::atomic_ref<std::byte>(dst[i]).store(src[i], std::memory_order_relaxed);
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, src + i, 8);
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(dst + i)).store(w, std::memory_order_relaxed);
  }
  for (; i < len; ++i) std::atomic_ref<std::byte>(dst[i]).store(src[i], std::memory_order_relaxed);
}

}  // namespace rdmahash::detail
