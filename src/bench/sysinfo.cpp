#include "bench/sysinfo.h"

#include <mpi.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "rdmahash/table.h"

namespace rdmahash::bench {

uint64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  uint64_t value = 0, avail = 0;
  while (in >> name >> value) {
    std::getline(in, unit);
    if (name == "MemAvailable:") {
      avail = value * 1024;  // the kernel reports kB
      break;
    }
  }
  // A process under an address-space limit (ulimit -v) cannot map more than that, whatever the
  // machine has: the memory checks refuse such a run up front instead of failing to allocate.
  rlimit lim{};
  if (avail != 0 && ::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    avail = std::min<uint64_t>(avail, lim.rlim_cur);
  return avail;
}

namespace {
// "32768K", "8M", "1G" → bytes (sysfs cache sizes).
uint64_t parse_size(const std::string& s) {
  std::istringstream in(s);
  uint64_t v = 0;
  char unit = 0;
  if (!(in >> v)) return 0;
  in >> unit;
  switch (unit) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v;
  }
}
}  // namespace

uint64_t llc_bytes() {
  uint64_t best = 0, l3 = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_in(dir + "level"), size_in(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_in >> level) || !(size_in >> size)) continue;
    const uint64_t bytes = parse_size(size);
    if (level == 3) l3 = std::max(l3, bytes);
    best = std::max(best, bytes);
  }
  return l3 ? l3 : best;
}

std::string bytes_text(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ULL << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB (%llu bytes)", static_cast<double>(bytes) / (1ULL << 30),
                  static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB (%llu bytes)", static_cast<double>(bytes) / (1ULL << 20),
                  static_cast<unsigned long long>(bytes));
  return buf;
}

std::string memory_error(uint64_t needed, uint64_t available, const std::string& what, const std::string& remedy) {
  return "the table does not fit in memory: " + what + " needs " + bytes_text(needed) + " but MemAvailable is " +
         bytes_text(available) + " (/proc/meminfo); " + remedy;
}

void check_host_memory_mpi(uint64_t mine, const std::string& what, const std::string& remedy) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  uint64_t on_host = 0;
  MPI_Allreduce(&mine, &on_host, 1, MPI_UINT64_T, MPI_SUM, host);
  MPI_Comm_free(&host);
  const uint64_t avail = mem_available_bytes();
  // The worst host's numbers, known to every rank: the largest shortfall, from the lowest rank with
  // it. Saturated: a request near 2^64 bytes is a shortfall, not a wrapped negative number.
  const auto clamp63 = [](uint64_t v) { return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)); };
  const int64_t shortfall = avail ? clamp63(on_host) - clamp63(avail) : INT64_MIN;
  int64_t worst = 0;
  MPI_Allreduce(&shortfall, &worst, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  int from = shortfall == worst ? rank : ranks, root = 0;
  MPI_Allreduce(&from, &root, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  uint64_t numbers[2] = {on_host, avail};
  MPI_Bcast(numbers, 2, MPI_UINT64_T, root, MPI_COMM_WORLD);
  if (worst > 0) throw InvalidArgument(memory_error(numbers[0], numbers[1], what, remedy));
}

PageReport region_pages(const void* p, uint64_t bytes) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return {};
  return region_pages_in(in, p, bytes);
}

PageReport region_pages_in(std::istream& in, const void* p, uint64_t bytes) {
  PageReport r;
  const uint64_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  bool inside = false;
  uint64_t page_kb = 0, rss_kb = 0, huge_kb = 0;
  std::string line;
  while (std::getline(in, line)) {
    // A mapping's first line: "start-end perms offset dev inode [path]"; the others "Name: value kB".
    const auto dash = line.find('-');
    const auto space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space && line.find(':') > space) {
      const uint64_t start = std::stoull(line.substr(0, dash), nullptr, 16);
      const uint64_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = start < hi && end > lo;
      continue;
    }
    if (!inside) continue;
    std::istringstream f(line);
    std::string name;
    uint64_t kb = 0;
    if (!(f >> name >> kb)) continue;
    if (name == "KernelPageSize:") {
      page_kb = std::max(page_kb, kb);
    } else if (name == "Rss:") {
      rss_kb += kb;
    } else if (name == "Shared_Hugetlb:" || name == "Private_Hugetlb:") {  // hugetlb pages are not in Rss
      rss_kb += kb;
      huge_kb += kb;
    } else if (name == "AnonHugePages:" || name == "ShmemPmdMapped:" || name == "FilePmdMapped:") {
      huge_kb += kb;
    }
  }
  if (page_kb == 0) return r;  // the range is not mapped (or smaps has another format)
  r.page_kb = page_kb;
  r.huge_fraction = rss_kb ? std::min(1.0, static_cast<double>(huge_kb) / static_cast<double>(rss_kb)) : 0.0;
  r.kind = page_kb > 4 ? "hugetlb" : r.huge_fraction >= 0.5 ? "thp" : "4k";
  return r;
}

}  // namespace rdmahash::bench
