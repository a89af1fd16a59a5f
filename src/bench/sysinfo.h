// What the machine offers a benchmark: memory available now and the last-level cache size.
#pragma once

#include <cstdint>
#include <string>

namespace rdmahash::bench {

// MemAvailable of /proc/meminfo in bytes (the kernel's estimate of what can be allocated without
// swapping), or the address-space limit (RLIMIT_AS) if that is lower; 0 if MemAvailable cannot be
// read (then no memory check is made).
uint64_t mem_available_bytes();

// Size in bytes of the last-level cache of cpu0: level 3 if there is one, else the largest
// (from /sys/devices/system/cpu/cpu0/cache/index*/{level,size}); 0 if unknown.
uint64_t llc_bytes();

// "320 MB (335544320 bytes)": sizes in messages a reader can check.
std::string bytes_text(uint64_t bytes);

}  // namespace rdmahash::bench
