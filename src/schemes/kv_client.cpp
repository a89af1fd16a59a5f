// KvClient's default methods, shared by every scheme: to_string(Status), get_visit, get_all_by_get,
// and the byte-string-key overloads of schemes that take 8-byte integer keys. The interface is
// documented in include/rdmahash/table.h.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "rdmahash/table.h"

namespace rdmahash {

const char* to_string(Status s) {
  switch (s) {
    case Status::kFound: return "found";
    case Status::kInserted: return "inserted";
    case Status::kFull: return "full";
    case Status::kNotFound: return "not_found";
    case Status::kUpdated: return "updated";
    case Status::kErased: return "erased";
  }
  return "?";
}

Task<void> KvClient::get_visit(uint64_t key, uint32_t value_bytes, GetVisitor& v) {
  alignas(8) std::byte small[512];
  std::vector<std::byte> big;
  if (value_bytes > sizeof small) big.resize(value_bytes);
  const std::span<std::byte> buf(value_bytes > sizeof small ? big.data() : small, value_bytes);
  std::fill(buf.begin(), buf.end(), std::byte{0});
  const OpResult r = co_await get(key, buf);
  v.on_get(key, r, r.status == Status::kFound ? std::span<const std::byte>(buf) : std::span<const std::byte>());
}

Task<OpResult> KvClient::get_all_by_get(uint64_t key, uint32_t value_bytes, std::vector<std::byte>* values_out) {
  std::vector<std::byte> value(values_out ? value_bytes : 0);
  const OpResult r = co_await get(key, value);
  if (r.status == Status::kFound && values_out) values_out->insert(values_out->end(), value.begin(), value.end());
  co_return r;
}

namespace {
[[noreturn]] void no_byte_keys(const KvClient& c) {
  throw InvalidArgument(std::string("--scheme ") + c.scheme_name() + " takes 8-byte integer keys, not byte-string keys");
}
}  // namespace

Task<OpResult> KvClient::find_or_put(KeyView, std::span<const std::byte>) { no_byte_keys(*this); co_return OpResult{}; }
Task<OpResult> KvClient::get(KeyView, std::vector<std::byte>*) { no_byte_keys(*this); co_return OpResult{}; }
Task<OpResult> KvClient::update(KeyView, std::span<const std::byte>) { no_byte_keys(*this); co_return OpResult{}; }
Task<OpResult> KvClient::put(KeyView, std::span<const std::byte>) { no_byte_keys(*this); co_return OpResult{}; }
Task<OpResult> KvClient::erase(KeyView) { no_byte_keys(*this); co_return OpResult{}; }

}  // namespace rdmahash
