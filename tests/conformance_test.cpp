// The conformance suite (issue 27 item 4): KvClient's contract (rdmahash/table.h) checked against
// std::unordered_map for every scheme and storage. Every case below runs once per entry of
// `kParams`; a new scheme gets the whole suite by adding an entry there (and, if it is built
// differently, a line in make_table). What each scheme supports (values, update, byte keys,
// multimap get_all, kFull on an update, growth) is taken from its header's documented contract
// (`contract_of`), and an unsupported operation must fail the documented way.
//
// Cases (each deterministic: the seed is the parameter's name):
//  * RandomOperationsMatchUnorderedMap: find_or_put / get / put / update / erase / get_all on a
//    small key range (bulk-loaded keys, new keys, key 0 and the largest key of the range), the
//    status of every op and the value after every op checked, then every key read back (get and
//    get_visit); byte-key schemes also with mixed-length byte keys and values.
//  * ErrorContractFailsBeforeAnyRequest: wrong-size values, keys outside the key range, byte keys
//    on integer-key schemes, get_all on a scheme holding a key once without multimap lookups,
//    writes to a read-only table: InvalidArgument, and not one request on the client's transport.
//  * ConcurrentFindOrPutInsertsEachKeyOnce: clients on threads racing find_or_put on the same keys.
//  * FillingTowardCapacityLosesNothing: new keys until kFull (or growth), then random operations
//    near full; no acknowledged key is ever lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bench/workload.h"
#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/linear.h"
#include "rdmahash/scheme.h"
#include "rdmahash/table.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::value_for;

// One table of the suite: a scheme and its storage, named as gtest prints it.
struct Param {
  const char* name;
  const char* scheme;
  const char* storage = "inline";       // linear: inline | heap | heap4; cuckoo: inline | heap
  const char* slot_format = "auto";     // linear: set | inline
  uint32_t key_bytes = 8;
  uint32_t value_bytes = 16;
  uint32_t slots_per_bucket = 4;        // cuckoo
  const char* probe = "parallel";       // cuckoo
  uint32_t sbuckets = 3;                // continuity
  uint32_t neighborhood = 8;            // hopscotch
  bool persistent = false;              // continuity, level, hopscotch: the table is a pmem file (one node)
  const char* chunk_order = "linear";   // linear: linear | quadratic (chunks of 4 slots: linear.h, ChunkOrder)
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

// Every scheme and storage. A new scheme: one line here.
const Param kParams[] = {
    {.name = "linear_set", .scheme = "linear", .slot_format = "set", .value_bytes = 0},
    {.name = "linear_inline", .scheme = "linear", .slot_format = "inline", .value_bytes = 32},
    {.name = "linear_set_quadratic", .scheme = "linear", .slot_format = "set", .value_bytes = 0, .chunk_order = "quadratic"},
    {.name = "linear_inline_quadratic", .scheme = "linear", .slot_format = "inline", .value_bytes = 32,
     .chunk_order = "quadratic"},
    {.name = "linear_inline_k4_quadratic", .scheme = "linear", .slot_format = "inline", .key_bytes = 4, .value_bytes = 4,
     .chunk_order = "quadratic"},
    {.name = "linear_inline_v120", .scheme = "linear", .slot_format = "inline", .value_bytes = 120},
    {.name = "linear_inline_k4", .scheme = "linear", .slot_format = "inline", .key_bytes = 4, .value_bytes = 4},
    {.name = "linear_inline_k4_v0", .scheme = "linear", .slot_format = "inline", .key_bytes = 4, .value_bytes = 0},
    {.name = "linear_heap", .scheme = "linear", .storage = "heap", .value_bytes = 32},
    {.name = "linear_heap_k4", .scheme = "linear", .storage = "heap", .key_bytes = 4, .value_bytes = 4},
    {.name = "linear_heap_k4_v0", .scheme = "linear", .storage = "heap", .key_bytes = 4, .value_bytes = 0},
    {.name = "linear_heap_v4096", .scheme = "linear", .storage = "heap", .value_bytes = 4096},
    {.name = "linear_heap4", .scheme = "linear", .storage = "heap4", .value_bytes = 8},
    {.name = "cuckoo_inline_s4", .scheme = "cuckoo", .value_bytes = 8},
    {.name = "cuckoo_inline_s4_seq", .scheme = "cuckoo", .value_bytes = 8, .probe = "sequential"},
    {.name = "cuckoo_inline_s1", .scheme = "cuckoo", .key_bytes = 4, .value_bytes = 8, .slots_per_bucket = 1},
    {.name = "cuckoo_heap_s4", .scheme = "cuckoo", .storage = "heap", .value_bytes = 32},
    {.name = "cuckoo_heap_s1", .scheme = "cuckoo", .storage = "heap", .value_bytes = 32, .slots_per_bucket = 1,
     .probe = "sequential"},
    {.name = "race", .scheme = "race", .value_bytes = 16},
    {.name = "continuity", .scheme = "continuity", .value_bytes = 8},
    {.name = "continuity_sb1_v0", .scheme = "continuity", .value_bytes = 0, .sbuckets = 1},
    {.name = "continuity_pmem", .scheme = "continuity", .value_bytes = 40, .sbuckets = 4, .persistent = true},
    {.name = "level_volatile", .scheme = "level", .value_bytes = 8},
    {.name = "level_v0", .scheme = "level", .value_bytes = 0},
    {.name = "level_pmem", .scheme = "level", .value_bytes = 40, .persistent = true},
    {.name = "hopscotch", .scheme = "hopscotch", .value_bytes = 16},
    {.name = "hopscotch_h16_v0", .scheme = "hopscotch", .value_bytes = 0, .neighborhood = 16},
    // H=2: neighbourhoods overflow early, so the random operations and the fill run through the
    // overflow chains and the fill ends with the pool exhausted.
    {.name = "hopscotch_h2", .scheme = "hopscotch", .value_bytes = 16, .neighborhood = 2},
    {.name = "hopscotch_pmem", .scheme = "hopscotch", .value_bytes = 40, .persistent = true},  // P-FaRM-KV
    {.name = "cluster", .scheme = "cluster", .value_bytes = 16},
    {.name = "cluster_v0", .scheme = "cluster", .value_bytes = 0},
    {.name = "cluster_v120", .scheme = "cluster", .value_bytes = 120},
};

// Table size and run lengths (small: the suite also runs under TSan and ASan).
constexpr uint64_t kRecords = 256;      // bulk-loaded records; the table is sized for 2x at load 0.5
constexpr double kLoadFactor = 0.5;
constexpr uint64_t kRandomKeys = 384;   // the random operations' key range (the loaded keys included)
constexpr int kRandomSteps = 3000;
constexpr uint32_t kClients = 3;
constexpr uint64_t kFillCap = 4096;     // new keys offered while filling (growing tables stop growing first)

const SchemeDescriptor& descriptor_of(const Param& p) {
  const SchemeDescriptor* d = find_scheme(p.scheme);
  if (!d) throw std::invalid_argument(std::string("conformance: no registered scheme '") + p.scheme + "'");
  return *d;
}

// The typed table options of a parameter (rdmahash/scheme.h).
TableOptions options_of(const Param& p, const std::string& pm_path) {
  TableOptions o;
  o.scheme = descriptor_of(p).id;
  o.storage = parse_storage(p.storage).value();
  o.slot_format = parse_slot_format(p.slot_format).value();
  o.key_bytes = p.key_bytes;
  o.value_bytes = p.value_bytes;
  o.slots_per_bucket = p.slots_per_bucket;
  o.cuckoo_lookup = parse_cuckoo_lookup(p.probe).value();
  o.sbuckets = p.sbuckets;
  o.neighborhood = p.neighborhood;
  o.pm_path = pm_path;
  o.chunk_order = parse_chunk_order(p.chunk_order).value();
  if (o.chunk_order == ChunkOrder::kQuadratic) {
    o.chunk = 4;         // more chunks per probe
    o.tail_slots = 64;   // quadratic chunks use the whole ring: a 4096-slot tail would not fill in kFillCap inserts
  }
  o.memory_nodes = p.persistent ? 1 : 2;
  o.records = 2 * kRecords;
  o.load_factor = kLoadFactor;
  o.inserts = kFillCap * 8;  // race: room for the fill
  o.writes = kFillCap / 2;   // linear heaps: room for out-of-place writes; level: for resizes (then kFull)
  o.seed = 7;
  o.command = "conformance";
  return o;
}

// THE place the suite builds a scheme: the registry (every registered scheme must have a parameter:
// ConformanceCoverage below).
std::unique_ptr<SchemeTable> make_scheme_table(const Param& p, const std::string& pm_path) {
  return rdmahash::make_table(options_of(p, pm_path));
}

// What the scheme's header documents (the contract the cases check).
enum class GetAll { kMultimap, kLikeGet };
struct Contract {
  bool values;            // holds values (a set holds keys only)
  bool writable;          // online writes (linear heap4 is bulk-loaded: writes throw InvalidArgument)
  bool update;            // update() (a set cannot: InvalidArgument)
  bool byte_keys;         // KeyView overloads (race); else they throw InvalidArgument naming the scheme
  bool fixed_values;      // values of exactly value_bytes (race: any length up to kMaxValueBytes)
  bool full_on_update;    // an update of a present key may answer kFull (out-of-place updates)
  GetAll get_all;
  std::optional<uint64_t> key_limit;  // keys from here on are outside the key range
};
Contract contract_of(const Param& p) {
  const SchemeCaps& caps = descriptor_of(p).caps;
  const std::string s = p.scheme, storage = p.storage;
  Contract c{};
  const bool set = std::string(p.slot_format) == "set";
  c.values = !set && p.value_bytes > 0;
  c.writable = storage != "heap4";
  c.update = !set;
  c.byte_keys = caps.byte_keys;
  c.fixed_values = !caps.byte_keys;
  // Updates in place (linear.h inline slots, cuckoo.h, hopscotch.h) never answer kFull; every other scheme
  // writes a new copy and may (a heap or pool exhausted, no free slot in the key's buckets).
  c.full_on_update = !((s == "linear" && storage == "inline") || s == "cuckoo" || s == "hopscotch" ||
                       s == "cluster");
  c.get_all = caps.multimap ? GetAll::kMultimap : GetAll::kLikeGet;  // table.h: else as get()
  if (set) c.key_limit = 1ULL << 63;
  else if (caps.four_byte_keys && p.key_bytes == 4) c.key_limit = 1ULL << 32;
  return c;
}

uint64_t seed_of(const Param& p) {  // FNV-1a of the name: fixed per parameter, the same everywhere
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const char* c = p.name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001B3ULL;
  return h;
}

using Oracle = std::unordered_map<uint64_t, std::vector<std::byte>>;

// A scheme's table on a LocalFabric, bulk-loaded with kRecords records.
struct Table {
  Param param;
  Contract contract;
  std::filesystem::path dir;  // persistent: the pmem file's directory (removed at the end)
  std::unique_ptr<SchemeTable> table;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<bench::KeySpace> keys;

  explicit Table(const Param& p) : param(p), contract(contract_of(p)) {
    std::string pm_path;
    if (p.persistent) {
      std::string tmpl = (std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp") +
                         std::string("/rdmahash-conformance-XXXXXX");
      dir = ::mkdtemp(tmpl.data());
      pm_path = (dir / "table.pm").string();
    }
    table = make_scheme_table(p, pm_path);
    const auto pm = table->persistent_region();
    fabric = pm.empty() ? make_local_fabric(std::vector<uint64_t>(p.persistent ? 1 : 2, table->region_bytes()))
                        : make_local_fabric_over({pm});
    keys = std::make_unique<bench::KeySpace>(kRecords, table->key_bits(), seed_of(p));
    bench::KeyRecords records(*keys);
    table->load(*fabric, records);
  }
  ~Table() {
    fabric.reset();
    table.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  uint32_t vb() const { return contract.values ? param.value_bytes : 0; }
  std::vector<std::byte> value(uint64_t key, uint32_t salt) const { return value_for(key, salt, vb()); }
  // The bulk-loaded records, as the oracle starts.
  Oracle loaded() const {
    Oracle o;
    for (uint64_t i = 0; i < kRecords; ++i) {
      std::vector<std::byte> v(vb());
      bench::fill_value(keys->key(i), v);
      o[keys->key(i)] = v;
    }
    return o;
  }
  // Keys 0..n-1 of the key space (the first kRecords loaded), key 0 and the range's largest key.
  std::vector<uint64_t> universe(uint64_t n) const {
    std::vector<uint64_t> u;
    std::unordered_set<uint64_t> seen;
    auto add = [&](uint64_t k) {
      if (seen.insert(k).second) u.push_back(k);
    };
    for (uint64_t i = 0; i < n; ++i) add(keys->key(i));
    add(0);
    add(contract.key_limit ? *contract.key_limit - 1 : ~0ULL);
    return u;
  }
};

// One client: its own transport and engine (one thread's).
struct Session {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<KvClient> kv;
  Session(Table& t, uint32_t id) : transport(t.fabric->connect()), engine(std::make_unique<Engine>(*transport)) {
    ClientOptions c;
    c.client_id = id;
    kv = t.table->make_client(*engine, c).client;
  }
  OpResult run(Task<OpResult> task) { return engine->run(std::move(task)); }
  uint64_t batches() const { return transport->counters().batches; }
};

struct Seen final : GetVisitor {
  int calls = 0;
  OpResult r;
  std::vector<std::byte> value;
  void on_get(uint64_t, const OpResult& r2, std::span<const std::byte> v) override {
    ++calls;
    r = r2;
    value.assign(v.begin(), v.end());
  }
};

// Every key of `keys` answers as the oracle says: get, get_visit, and get_all where it answers.
void expect_matches(Table& t, Session& s, const Oracle& oracle, const std::vector<uint64_t>& keys) {
  std::vector<std::byte> out(t.vb());
  for (const uint64_t k : keys) {
    const auto it = oracle.find(k);
    const bool present = it != oracle.end();
    std::fill(out.begin(), out.end(), std::byte{0xEE});
    const OpResult r = s.run(s.kv->get(k, out));
    ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << "key " << k;
    if (present) {
      ASSERT_EQ(out, it->second) << "key " << k;
    }
    Seen seen;
    s.engine->run(s.kv->get_visit(k, t.vb(), seen));
    ASSERT_EQ(seen.calls, 1) << "key " << k;
    ASSERT_EQ(seen.r.status, r.status) << "get_visit, key " << k;
    if (present) {
      ASSERT_EQ(seen.value, it->second) << "get_visit, key " << k;
    } else {
      ASSERT_TRUE(seen.value.empty()) << "get_visit, key " << k;
    }
  }
}

class Conformance : public testing::TestWithParam<Param> {};

// One random operation on `k`, checked against the oracle (and the key read back after a write).
// `full` counts the kFull answers the contract allows: an insert of an absent key, and an update
// of a present one where updates are out of place; either changes nothing.
void random_op(Table& t, Session& s, Oracle& oracle, uint64_t k, uint32_t op, uint32_t salt, uint64_t& full) {
  const Contract& c = t.contract;
  const bool present = oracle.count(k) > 0;
  const auto v = t.value(k, salt);
  std::vector<std::byte> out(t.vb());
  const std::string where = "op " + std::to_string(op) + " on key " + std::to_string(k) + (present ? " (present)" : " (absent)");
  bool wrote = false;
  switch (op) {
    case 0: {  // find_or_put
      if (!c.writable) { EXPECT_THROW(s.run(s.kv->find_or_put(k, v)), InvalidArgument) << where; break; }
      const OpResult r = s.run(s.kv->find_or_put(k, v));
      if (r.status == Status::kFull && !present) { ++full; wrote = true; break; }
      ASSERT_EQ(r.status, present ? Status::kFound : Status::kInserted) << where;
      if (!present) oracle[k] = v;
      wrote = true;
      break;
    }
    case 1: {  // get
      std::fill(out.begin(), out.end(), std::byte{0xEE});
      const OpResult r = s.run(s.kv->get(k, out));
      ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << where;
      if (present) {
        ASSERT_EQ(out, oracle[k]) << where;
        ASSERT_EQ(r.matches, 1u) << where;
      }
      break;
    }
    case 2: {  // put
      if (!c.writable) { EXPECT_THROW(s.run(s.kv->put(k, v)), InvalidArgument) << where; break; }
      const OpResult r = s.run(s.kv->put(k, v));
      if (r.status == Status::kFull && (!present || c.full_on_update)) { ++full; wrote = true; break; }
      ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kInserted) << where;
      oracle[k] = v;
      wrote = true;
      break;
    }
    case 3: {  // update
      if (!c.writable || !c.update) { EXPECT_THROW(s.run(s.kv->update(k, v)), InvalidArgument) << where; break; }
      const OpResult r = s.run(s.kv->update(k, v));
      if (r.status == Status::kFull && present && c.full_on_update) { ++full; wrote = true; break; }
      ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kNotFound) << where;
      if (present) oracle[k] = v;
      wrote = true;
      break;
    }
    case 4: {  // erase
      if (!c.writable) { EXPECT_THROW(s.run(s.kv->erase(k)), InvalidArgument) << where; break; }
      ASSERT_EQ(s.run(s.kv->erase(k)).status, present ? Status::kErased : Status::kNotFound) << where;
      oracle.erase(k);
      wrote = true;
      break;
    }
    default: {  // get_all
      std::vector<std::byte> all;
      const OpResult r = s.run(s.kv->get_all(k, &all));
      ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << where;
      ASSERT_EQ(r.matches, present ? 1u : 0u) << where;
      if (present) {
        ASSERT_EQ(all, oracle[k]) << where;
      } else {
        ASSERT_TRUE(all.empty()) << where;
      }
    }
  }
  if (wrote) {  // the state after the write, read back
    const auto it = oracle.find(k);
    std::fill(out.begin(), out.end(), std::byte{0xEE});
    ASSERT_EQ(s.run(s.kv->get(k, out)).status, it != oracle.end() ? Status::kFound : Status::kNotFound) << "after " << where;
    if (it != oracle.end()) {
      ASSERT_EQ(out, it->second) << "after " << where;
    }
  }
}

TEST_P(Conformance, RandomOperationsMatchUnorderedMap) {
  Table t(GetParam());
  Session s(t, 0);
  Oracle oracle = t.loaded();
  const auto universe = t.universe(kRandomKeys);
  std::mt19937_64 rng(seed_of(GetParam()));
  uint64_t full = 0;
  for (int step = 0; step < kRandomSteps; ++step) {
    const uint64_t k = universe[rng() % universe.size()];
    const auto op = static_cast<uint32_t>(rng() % 6);
    ASSERT_NO_FATAL_FAILURE(random_op(t, s, oracle, k, op, static_cast<uint32_t>(step), full)) << "step " << step;
  }
  RecordProperty("full", static_cast<int>(full));
  EXPECT_LT(full, kRandomSteps / 100u) << "the table was sized to rarely fill";
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, oracle, universe));
  if (!t.contract.byte_keys) return;

  // Byte keys (race): mixed lengths (1 .. kMaxKeyBytes) and values (0 .. several KiB).
  std::unordered_map<std::string, std::string> bytes_oracle;
  auto key_of = [](uint64_t i, size_t len) {
    std::string k(len, 'k');
    for (size_t j = 0; j < len && j < 8; ++j) k[j] = static_cast<char>('a' + (i >> (5 * j)) % 26);
    return k;
  };
  auto bytes = [](const std::string& s) { return std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size()); };
  auto str = [](const std::vector<std::byte>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size()); };
  for (int step = 0; step < kRandomSteps; ++step) {
    const uint64_t i = rng() % 600;
    const std::string k = key_of(i, i % 7 == 0 ? kMaxKeyBytes : 1 + i % 40);
    std::string v(rng() % 16 == 0 ? 2000 + rng() % 3000 : rng() % 64, '\0');
    for (char& ch : v) ch = static_cast<char>(rng());
    const bool present = bytes_oracle.count(k) > 0;
    const KeyView kv(k);
    switch (rng() % 5) {
      case 0:
        ASSERT_EQ(s.run(s.kv->find_or_put(kv, bytes(v))).status, present ? Status::kFound : Status::kInserted) << step;
        if (!present) bytes_oracle[k] = v;
        break;
      case 1:
        ASSERT_EQ(s.run(s.kv->put(kv, bytes(v))).status, present ? Status::kUpdated : Status::kInserted) << step;
        bytes_oracle[k] = v;
        break;
      case 2:
        ASSERT_EQ(s.run(s.kv->update(kv, bytes(v))).status, present ? Status::kUpdated : Status::kNotFound) << step;
        if (present) bytes_oracle[k] = v;
        break;
      case 3:
        ASSERT_EQ(s.run(s.kv->erase(kv)).status, present ? Status::kErased : Status::kNotFound) << step;
        bytes_oracle.erase(k);
        break;
      default: {
        std::vector<std::byte> got;
        const OpResult r = s.run(s.kv->get(kv, &got));
        ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << step;
        if (present) {
          ASSERT_EQ(str(got), bytes_oracle[k]) << step;
          ASSERT_EQ(r.value_bytes, bytes_oracle[k].size()) << step;
        }
      }
    }
  }
  for (const auto& [k, v] : bytes_oracle) {
    std::vector<std::byte> got;
    ASSERT_EQ(s.run(s.kv->get(KeyView(k), &got)).status, Status::kFound);
    ASSERT_EQ(str(got), v);
  }
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, oracle, universe)) << "the integer keys after the byte keys";
}

TEST_P(Conformance, ErrorContractFailsBeforeAnyRequest) {
  Table t(GetParam());
  const Contract& c = t.contract;
  const uint32_t vb = t.param.value_bytes;
  Session s(t, 0);
  const uint64_t k = t.keys->key(0);  // a loaded key
  auto invalid = [&](auto make, const std::string& what) {
    EXPECT_THROW(s.run(make()), InvalidArgument) << what;
  };
  const std::vector<std::byte> longer(c.fixed_values ? vb + 1 : kMaxValueBytes + 1), shorter(vb > 0 ? vb - 1 : 0);
  if (c.writable) {
    // Values longer than the table's (race: than kMaxValueBytes) on every write; put and update
    // take exactly value_bytes (find_or_put(key) without a value is the key-only form).
    invalid([&] { return s.kv->find_or_put(k, longer); }, "find_or_put, value too long");
    invalid([&] { return s.kv->put(k, longer); }, "put, value too long");
    invalid([&] { return s.kv->update(k, longer); }, "update, value too long");
    if (c.fixed_values && c.values) {
      invalid([&] { return s.kv->put(k, shorter); }, "put, value too short");
      invalid([&] { return s.kv->update(k, shorter); }, "update, value too short");
    }
    if (!c.update) invalid([&] { return s.kv->update(k, {}); }, "update on a table without values");
  } else {  // read-only (bulk-loaded) table: every write is refused
    const auto v = t.value(k, 1);
    invalid([&] { return s.kv->find_or_put(k, v); }, "find_or_put on a read-only table");
    invalid([&] { return s.kv->put(k, v); }, "put on a read-only table");
    invalid([&] { return s.kv->update(k, v); }, "update on a read-only table");
    invalid([&] { return s.kv->erase(k); }, "erase on a read-only table");
  }
  if (c.key_limit) {
    const uint64_t bad = *c.key_limit;
    std::vector<std::byte> out(t.vb());
    const auto v = t.value(bad, 1);
    invalid([&] { return s.kv->get(bad, out); }, "get, key outside the range");
    invalid([&] { return s.kv->find_or_put(bad, v); }, "find_or_put, key outside the range");
    invalid([&] { return s.kv->put(bad, v); }, "put, key outside the range");
    if (c.update) invalid([&] { return s.kv->update(bad, v); }, "update, key outside the range");
    invalid([&] { return s.kv->erase(bad); }, "erase, key outside the range");
  }
  const std::string key_str = "some key";
  const KeyView key(key_str);
  const std::vector<std::byte> v8(8);
  if (c.byte_keys) {
    const std::string empty, huge(kMaxKeyBytes + 1, 'k');
    invalid([&] { return s.kv->find_or_put(KeyView(empty), v8); }, "empty byte key");
    invalid([&] { return s.kv->put(KeyView(huge), v8); }, "byte key longer than kMaxKeyBytes");
    invalid([&] { return s.kv->put(key, longer); }, "byte-key value longer than kMaxValueBytes");
  } else {
    // The byte-key overloads throw InvalidArgument naming the scheme (table.h).
    const std::string name = std::string("--scheme ") + t.param.scheme;
    auto names_scheme = [&](auto make, const char* what) {
      try {
        (void)s.run(make());
        ADD_FAILURE() << what << ": a byte key was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << what << ": " << e.what();
      }
    };
    std::vector<std::byte> got;
    names_scheme([&] { return s.kv->find_or_put(key, v8); }, "find_or_put(KeyView)");
    names_scheme([&] { return s.kv->get(key, &got); }, "get(KeyView)");
    names_scheme([&] { return s.kv->update(key, v8); }, "update(KeyView)");
    names_scheme([&] { return s.kv->put(key, v8); }, "put(KeyView)");
    names_scheme([&] { return s.kv->erase(key); }, "erase(KeyView)");
    EXPECT_STREQ(s.kv->scheme_name(), t.param.scheme);
  }
  EXPECT_EQ(s.batches(), 0u) << "bad input must fail before any request";
  // The client is still usable, the table unchanged.
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, t.loaded(), t.universe(kRecords + 16)));
}

TEST_P(Conformance, ConcurrentFindOrPutInsertsEachKeyOnce) {
  Table t(GetParam());
  if (!t.contract.writable) GTEST_SKIP() << "a read-only (bulk-loaded) table: writes are refused (ErrorContract)";
  // Every client offers the same keys, each in its own order: 64 loaded keys and 200 new ones.
  std::vector<uint64_t> keys;
  for (uint64_t i = kRecords - 64; i < kRecords + 200; ++i) keys.push_back(t.keys->key(i));
  std::vector<std::vector<Status>> outcome(kClients, std::vector<Status>(keys.size(), Status::kNotFound));
  std::vector<std::exception_ptr> errors(kClients);
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      try {
        Session s(t, c);
        std::vector<size_t> order(keys.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), std::mt19937_64(seed_of(t.param) + c));
        s.engine->run_many(
            order.size(), 4,
            [&](uint64_t i) -> Task<void> {
              const size_t j = order[i];
              const auto v = t.value(keys[j], 1000 + c);
              outcome[c][j] = (co_await s.kv->find_or_put(keys[j], v)).status;
            },
            [](const Engine::Completion& done) {
              if (done.error) std::rethrow_exception(done.error);
            });
      } catch (...) {
        errors[c] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  Oracle oracle = t.loaded();
  for (size_t j = 0; j < keys.size(); ++j) {
    const bool loaded = j < 64;
    uint32_t inserted = 0, winner = 0;
    for (uint32_t c = 0; c < kClients; ++c) {
      ASSERT_TRUE(outcome[c][j] == Status::kInserted || outcome[c][j] == Status::kFound)
          << "key " << keys[j] << " client " << c << ": " << to_string(outcome[c][j]);
      if (outcome[c][j] == Status::kInserted) ++inserted, winner = c;
    }
    ASSERT_EQ(inserted, loaded ? 0u : 1u) << "key " << keys[j] << (loaded ? " (loaded)" : " (new)");
    if (!loaded) oracle[keys[j]] = t.value(keys[j], 1000 + winner);
  }
  Session s(t, kClients);
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, oracle, keys));
}

TEST_P(Conformance, FillingTowardCapacityLosesNothing) {
  Table t(GetParam());
  if (!t.contract.writable) GTEST_SKIP() << "a read-only (bulk-loaded) table: writes are refused (ErrorContract)";
  Session s(t, 0);
  Oracle oracle = t.loaded();
  std::vector<uint64_t> refused;  // kFull: never inserted
  const uint64_t slots_before = t.table->slots_in(*t.fabric);
  // New keys until the first kFull, then 64 more (other segments or buckets may still take some).
  uint64_t offered = 0, after_full = 0;
  for (uint64_t i = kRecords; offered < kFillCap && after_full < 64; ++i, ++offered) {
    const uint64_t k = t.keys->key(i);
    const auto v = t.value(k, 1);
    const OpResult r = s.run(s.kv->find_or_put(k, v));
    if (r.status == Status::kFull) {
      refused.push_back(k);
    } else {
      ASSERT_EQ(r.status, Status::kInserted) << "key " << k;
      oracle[k] = v;
    }
    if (!refused.empty()) ++after_full;
  }
  const uint64_t slots_after = t.table->slots_in(*t.fabric);
  RecordProperty("inserted", static_cast<int>(offered - refused.size()));
  RecordProperty("refused", static_cast<int>(refused.size()));
  RecordProperty("slots", std::to_string(slots_before) + " -> " + std::to_string(slots_after));
  EXPECT_TRUE(!refused.empty() || slots_after > slots_before)
      << "neither full nor grown after " << offered << " inserts (slots " << slots_before << " -> " << slots_after << ")";
  std::vector<uint64_t> all;
  for (const auto& [k, v] : oracle) all.push_back(k);
  std::sort(all.begin(), all.end());
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, oracle, all)) << "after the fill";
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, oracle, refused)) << "refused keys must be absent";

  // Near full: random operations on the stored keys and some refused ones (kFull where allowed).
  std::vector<uint64_t> near = all;
  near.insert(near.end(), refused.begin(), refused.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(refused.size(), 64)));
  std::mt19937_64 rng(seed_of(t.param) ^ 0xF111);
  uint64_t full = 0;
  for (int step = 0; step < kRandomSteps / 2; ++step) {
    const uint64_t k = near[rng() % near.size()];
    const auto op = static_cast<uint32_t>(rng() % 5);  // no get_all: covered by the random operations
    ASSERT_NO_FATAL_FAILURE(random_op(t, s, oracle, k, op, static_cast<uint32_t>(step + 1), full)) << "step " << step;
  }
  RecordProperty("full_near_full", static_cast<int>(full));
  near.insert(near.end(), refused.begin(), refused.end());
  std::sort(near.begin(), near.end());
  near.erase(std::unique(near.begin(), near.end()), near.end());
  ASSERT_NO_FATAL_FAILURE(expect_matches(t, s, oracle, near)) << "after the random operations near full";
}

INSTANTIATE_TEST_SUITE_P(Schemes, Conformance, testing::ValuesIn(kParams),
                         [](const testing::TestParamInfo<Param>& i) { return std::string(i.param.name); });

// A registered scheme without a parameter would escape the suite: each has one (by registry name),
// and every parameter names a registered scheme.
TEST(ConformanceCoverage, EveryRegisteredSchemeIsInTheSuite) {
  for (const SchemeDescriptor& d : schemes()) {
    bool covered = false;
    for (const Param& p : kParams) covered = covered || std::string(p.scheme) == d.name;
    EXPECT_TRUE(covered) << "scheme " << d.name << " has no conformance parameter (tests/conformance_test.cpp kParams)";
  }
  for (const Param& p : kParams) EXPECT_NE(find_scheme(p.scheme), nullptr) << p.name;
}

}  // namespace
}  // namespace rdmahash
