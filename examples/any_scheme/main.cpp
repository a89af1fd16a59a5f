// any_scheme — one program, every scheme of the library, chosen at run time through the scheme
// registry (rdmahash/scheme.h), on the in-process fabric; built against the installed package.
// It bulk-loads 1 000 records, then runs 20 000 random put / update / erase / find_or_put / get
// operations against the table and a std::unordered_map beside it, and exits 1 at the first
// answer that differs (status or value).
//
//   any_scheme SCHEME      (linear, cuckoo, race, continuity, level, hopscotch, ...: `rdmahash bench --help`)
//   any_scheme all         every registered scheme in turn
#include <rdmahash/scheme.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <unordered_map>
#include <vector>

namespace {

// The value a key holds: its key and a version, in the table's value bytes.
std::vector<std::byte> value_of(uint64_t key, uint64_t version, uint32_t bytes) {
  std::vector<std::byte> v(bytes);
  const uint64_t words[2] = {key, version};
  std::memcpy(v.data(), words, std::min<size_t>(bytes, sizeof words));
  return v;
}

// The records the memory node loads: keys 1..n, version 0.
class Records final : public rdmahash::RecordSource {
 public:
  Records(uint64_t n, uint32_t value_bytes) : n_(n), value_bytes_(value_bytes) {}
  uint64_t count() const override { return n_; }
  uint64_t next() override { return ++at_; }
  void fill(uint64_t key, std::span<std::byte> value) const override {
    const auto v = value_of(key, 0, value_bytes_);
    std::memcpy(value.data(), v.data(), std::min(value.size(), v.size()));
  }

 private:
  uint64_t n_, at_ = 0;
  uint32_t value_bytes_;
};

}  // namespace

// Runs the check on one scheme: 0 when every answer agreed, 1 otherwise, 2 for bad options.
int check(const rdmahash::SchemeDescriptor& scheme) {
  const rdmahash::SchemeDescriptor* d = &scheme;
  rdmahash::TableOptions o;  // every field has a default; the scheme's own limits are checked here
  o.scheme = d->id;
  o.records = 1000;
  o.load_factor = 0.15;  // up to 2 000 keys: room below every scheme's maximum load
  o.inserts = 2000;
  o.writes = 20000;
  o.value_bytes = d->caps.max_value_bytes_inline >= 16 ? 16 : 0;
  if (std::string e = rdmahash::check_table_options(o); !e.empty()) {
    std::fprintf(stderr, "any_scheme: error: %s\n", rdmahash::format_option_error(e).c_str());
    return 2;
  }
  auto table = rdmahash::make_table(o);
  auto fabric = rdmahash::make_local_fabric({table->region_bytes()});
  Records records(o.records, table->value_bytes());
  table->load(*fabric, records);  // the memory node's side: format and bulk-load its shard
  auto transport = fabric->connect();
  rdmahash::Engine engine(*transport);
  auto client = table->make_client(engine, {}).client;  // the client's side

  const uint32_t vb = table->value_bytes();
  std::unordered_map<uint64_t, uint64_t> oracle;  // key -> version
  for (uint64_t k = 1; k <= o.records; ++k) oracle[k] = 0;
  std::mt19937_64 rng(1);
  std::vector<std::byte> out(vb);
  uint64_t version = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t key = 1 + rng() % 2000;
    const auto it = oracle.find(key);
    const bool present = it != oracle.end();
    const int op = static_cast<int>(rng() % 5);
    rdmahash::Status got{}, want{};
    ++version;
    if (op == 0 && vb) {  // put
      got = engine.run(client->put(key, value_of(key, version, vb))).status;
      want = present ? rdmahash::Status::kUpdated : rdmahash::Status::kInserted;
      oracle[key] = version;
    } else if (op == 1 && vb) {  // update
      got = engine.run(client->update(key, value_of(key, version, vb))).status;
      want = present ? rdmahash::Status::kUpdated : rdmahash::Status::kNotFound;
      if (present) it->second = version;
    } else if (op == 2) {  // erase
      got = engine.run(client->erase(key)).status;
      want = present ? rdmahash::Status::kErased : rdmahash::Status::kNotFound;
      oracle.erase(key);
    } else if (op == 3) {  // find_or_put
      got = engine.run(client->find_or_put(key, value_of(key, version, vb))).status;
      want = present ? rdmahash::Status::kFound : rdmahash::Status::kInserted;
      if (!present) oracle[key] = version;
    } else {  // get
      got = engine.run(client->get(key, out)).status;
      want = present ? rdmahash::Status::kFound : rdmahash::Status::kNotFound;
      if (present && vb && out != value_of(key, it->second, vb)) {
        std::printf("any_scheme %s: get(%llu) returned another value\n", d->name, static_cast<unsigned long long>(key));
        return 1;
      }
    }
    if (got != want) {
      std::printf("any_scheme %s: operation %d on key %llu: %s, expected %s\n", d->name, i,
                  static_cast<unsigned long long>(key), rdmahash::to_string(got), rdmahash::to_string(want));
      return 1;
    }
  }
  std::printf("any_scheme %s (%s): 20000 operations agree with std::unordered_map: ok\n", d->name, table->describe().c_str());
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: any_scheme SCHEME|all (schemes: %s)\n", rdmahash::scheme_names().c_str());
    return 2;
  }
  if (std::strcmp(argv[1], "all") == 0) {
    int worst = 0;
    for (const rdmahash::SchemeDescriptor& d : rdmahash::schemes()) worst = std::max(worst, check(d));
    return worst;
  }
  const rdmahash::SchemeDescriptor* d = rdmahash::find_scheme(argv[1]);
  if (!d) {
    std::fprintf(stderr, "any_scheme: error: no scheme '%s' (available: %s)\n", argv[1], rdmahash::scheme_names().c_str());
    return 2;
  }
  return check(*d);
}
