// Does a client's CPU work per key hide the cache misses of a batch of random reads on this
// machine? (issue 30 item 2; docs/results.md, "A round ahead"). Not part of the build:
//   g++ -O2 -I src -o /tmp/overlap_probe scripts/overlap_probe.cpp && /tmp/overlap_probe W
// A 1 GiB THP region; batches of 16 random 64-byte-aligned addresses, 8 M keys, 3 repeats. W is
// the work per key: W dependent 64-bit mixes (about 5 ns each), done before the key's load. Modes:
//   none    the work alone (the load replaced by the address): the floor;
//   batch   the batch's 16 prefetches at its start, then each key's work and load (main's
//           multi-get: UcxTransport::execute prefetches a round's READs, then copies them);
//   ahead   each key's prefetch issued a round ahead, one per key between the work of the
//           round before (every miss has a whole round to land).
// Prints ns per key for each mode; the cost of memory is a mode's time minus none's.
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/hash.h"  // header-only, includes nothing of the project

using rdmahash::hash::mix64;

int main(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) < 0) {
    std::fprintf(stderr, "usage: %s W (work per key: dependent mixes, >= 0)\n", argv[0]);
    return 2;
  }
  const int W = std::atoi(argv[1]);
  const uint64_t bytes = uint64_t{1} << 30, lines = bytes / 64, n = 8000000;
  char* p = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 1, bytes);
  uint64_t sum = 0, ctr = 1, acc = 7;
  const char* names[] = {"none", "batch", "ahead"};
  for (int rep = 0; rep < 3; ++rep) {
    std::printf("W=%d", W);
    for (int mode = 0; mode < 3; ++mode) {
      uint64_t a[16], next[16];
      for (int j = 0; j < 16; ++j) next[j] = mix64(ctr++) % lines * 64;
      const auto t0 = std::chrono::steady_clock::now();
      for (uint64_t i = 0; i < n; i += 16) {
        for (int j = 0; j < 16; ++j) {
          a[j] = next[j];
          if (mode == 1) __builtin_prefetch(p + a[j]);
        }
        for (int j = 0; j < 16; ++j) {
          next[j] = mix64(ctr++) % lines * 64;
          if (mode == 2) __builtin_prefetch(p + next[j]);
          for (int w = 0; w < W; ++w) acc = mix64(acc + w);
          sum += mode == 0 ? a[j] : *reinterpret_cast<const uint64_t*>(p + a[j]);
        }
      }
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
      std::printf("  %s %.1f", names[mode], ns);
    }
    std::printf(" ns/key\n");
  }
  return (sum + acc) == 42;  // keeps the loads
}
