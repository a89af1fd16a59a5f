// The registry's private side: each scheme's folder defines its check and its table factory;
// registry.cpp lists them (one entry a scheme). See rdmahash/scheme.h.
#pragma once

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rdmahash/scheme.h"

namespace rdmahash::scheme_impl {

std::string check_linear(const TableOptions& o);
std::unique_ptr<SchemeTable> make_linear(const TableOptions& o);
std::string check_cuckoo(const TableOptions& o);
std::unique_ptr<SchemeTable> make_cuckoo(const TableOptions& o);
std::string check_race(const TableOptions& o);
std::unique_ptr<SchemeTable> make_race(const TableOptions& o);
std::string check_continuity(const TableOptions& o);
std::unique_ptr<SchemeTable> make_continuity(const TableOptions& o);
std::string check_level(const TableOptions& o);
std::unique_ptr<SchemeTable> make_level(const TableOptions& o);
std::string check_hopscotch(const TableOptions& o);
std::unique_ptr<SchemeTable> make_hopscotch(const TableOptions& o);
std::string check_cluster(const TableOptions& o);
std::unique_ptr<SchemeTable> make_cluster(const TableOptions& o);

// Every record through `server.bulk_insert` (false: the key's shard lives elsewhere), progress every
// 64 Ki records (the caller reports the end: a persistent table's load may recover instead). `die_after` (tests only): the process kills itself after that many
// records (0: never).
template <class Server>
void bulk_load(Server& server, uint32_t value_bytes, RecordSource& records, uint64_t die_after = 0) {
  std::vector<std::byte> value(value_bytes);
  const uint64_t count = records.count();
  for (uint64_t i = 0; i < count; ++i) {
    if (i == die_after && die_after != 0) ::raise(SIGKILL);
    const uint64_t k = records.next();
    records.fill(k, value);
    server.bulk_insert(k, value);
    if ((i & 0xFFFF) == 0 && records.progress) records.progress(i);
  }
}
// A DRAM table's whole load: bulk_load, then the end reported.
template <class Server>
void load_all(Server& server, uint32_t value_bytes, RecordSource& records) {
  bulk_load(server, value_bytes, records);
  if (records.progress) records.progress(records.count());
}

// The read-size choices (--read-size model, hints) are linear probing's: every other scheme refuses them.
void require_fixed_read_size(const ClientOptions& c, const char* scheme);

}  // namespace rdmahash::scheme_impl
