// Hash helpers shared by the schemes, the pmem image checksum, the history format and the bench
// (internal; the lowest layer: includes nothing of the project).
#pragma once

#include <cstdint>

namespace rdmahash::hash {

// splitmix64's finalizer: a bijective 64-bit mixer with full avalanche.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

// Maps a uniform 64-bit value to [0, n) without division (Lemire's multiply-shift).
inline uint64_t range(uint64_t h, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64);
}

}  // namespace rdmahash::hash
