// What the machine offers a benchmark: memory available now and the last-level cache size.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

namespace rdmahash::bench {

// MemAvailable of /proc/meminfo in bytes (the kernel's estimate of what can be allocated without
// swapping), or the address-space limit (RLIMIT_AS) if that is lower; 0 if MemAvailable cannot be
// read (then no memory check is made).
uint64_t mem_available_bytes();

// Size in bytes of the last-level cache of cpu0: level 3 if there is one, else the largest
// (from /sys/devices/system/cpu/cpu0/cache/index*/{level,size}); 0 if unknown.
uint64_t llc_bytes();

// What pages the kernel backs [p, p + bytes) of this process with, from /proc/self/smaps over
// every mapping the range overlaps: "hugetlb" (KernelPageSize above 4 kB: hugetlbfs, SysV
// SHM_HUGETLB), "thp" (at least half of the resident bytes in transparent huge pages:
// AnonHugePages, ShmemPmdMapped, FilePmdMapped), "4k", or "" when smaps cannot be read.
struct PageReport {
  std::string kind;
  uint64_t page_kb = 0;        // the largest KernelPageSize of the range's mappings
  double huge_fraction = 0;    // resident bytes in huge pages (hugetlb or THP) / resident bytes
};
PageReport region_pages(const void* p, uint64_t bytes);
// The same from the text of an smaps file (tests).
PageReport region_pages_in(std::istream& smaps, const void* p, uint64_t bytes);

// "320 MB (335544320 bytes)": sizes in messages a reader can check.
std::string bytes_text(uint64_t bytes);

// The error of a table refused up front because `what` needs more than MemAvailable: "the table
// does not fit in memory: <what> needs <needed> but MemAvailable is <available> (/proc/meminfo);
// <remedy>" (the bench's, and the Python module's local_table with its own remedy).
std::string memory_error(uint64_t needed, uint64_t available, const std::string& what,
                         const std::string& remedy = "use fewer --records, a lower --value-bytes or fewer --memory-nodes");

// Collective over MPI_COMM_WORLD: each rank gives the bytes it will allocate (`mine`); the ranks
// of each host sum theirs against that host's MemAvailable, and when some host falls short every
// rank throws the same InvalidArgument, memory_error() of the worst host with `what` and `remedy`
// (so no rank goes on into a collective its peers left).
void check_host_memory_mpi(uint64_t mine, const std::string& what, const std::string& remedy);

}  // namespace rdmahash::bench
