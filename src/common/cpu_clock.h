// The calling thread's CPU time (internal; the lowest layer: includes nothing of the project).
// Used for a client's CPU per operation (bench), the simulated fabric's measured client CPU and
// calibrate's execute() cost. A system call on Linux (~0.5 µs on a VM): read it around many
// operations, not around each.
#pragma once

#include <cstdint>
#include <ctime>

namespace rdmahash::common {

inline uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace rdmahash::common
