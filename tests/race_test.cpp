// RACE hashing on LocalFabric: byte-key conformance against std::unordered_map, bad input, pool
// exhaustion, concurrent clients on overlapping keys, growth from one subtable, stale directory
// caches, and forced interleavings of every split step with other clients' operations.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "rdmahash/cuckoo.h"
#include "rdmahash/race.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using Bytes = std::vector<std::byte>;

Bytes bytes_of(const std::string& s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}
std::string str_of(const Bytes& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// A random key of 1..max_len bytes (mixed lengths) built from `i`, so keys are reproducible.
std::string key_of(uint64_t i, size_t max_len = 64) {
  std::mt19937_64 r(i * 0x9E3779B97F4A7C15ULL + 1);
  const size_t len = 1 + r() % max_len;
  std::string s(len, '\0');
  for (auto& ch : s) ch = static_cast<char>(r());
  // Distinct keys: the index itself is part of the key when it fits.
  std::memcpy(s.data(), &i, std::min<size_t>(len, 8));
  return len < 8 ? std::string("k") + std::to_string(i) : s;
}
// A value of `len` bytes that names its key and version (readers check they got a written value).
std::string value_of(const std::string& key, uint64_t version, size_t len) {
  std::string v = key + "#" + std::to_string(version) + "#";
  while (v.size() < len) v += static_cast<char>('a' + (v.size() * 7 + version) % 26);
  v.resize(std::max(len, v.size()));
  return v;
}

struct RaceTable {
  RaceConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<RaceServer> server;
  explicit RaceTable(const RaceConfig& c, uint64_t pool_bytes = 64 << 20) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes(pool_bytes)));
    server = std::make_unique<RaceServer>(*fabric, c);
  }
};

struct Sync {
  std::unique_ptr<Transport> transport;
  Engine engine;
  RaceClient client;
  OpStats last;
  Sync(Fabric& f, const RaceConfig& c, uint32_t id = 0) : transport(f.connect()), engine(*transport), client(c, engine, id) {}
  Sync(std::unique_ptr<Transport> t, const RaceConfig& c, uint32_t id)
      : transport(std::move(t)), engine(*transport), client(c, engine, id) {}
  OpResult run(Task<OpResult> t) {
    last = {};
    return engine.run(std::move(t), &last);
  }
  OpResult put(const std::string& k, const std::string& v) { return run(client.put(KeyView(k), bytes_of(v))); }
  OpResult find_or_put(const std::string& k, const std::string& v) { return run(client.find_or_put(KeyView(k), bytes_of(v))); }
  OpResult update(const std::string& k, const std::string& v) { return run(client.update(KeyView(k), bytes_of(v))); }
  OpResult erase(const std::string& k) { return run(client.erase(KeyView(k))); }
  std::optional<std::string> get(const std::string& k) {
    Bytes out;
    const OpResult r = run(client.get(KeyView(k), &out));
    if (r.status != Status::kFound) return std::nullopt;
    EXPECT_EQ(r.value_bytes, out.size());
    return str_of(out);
  }
};

RaceConfig small_cfg(uint32_t groups = 2, uint32_t nodes = 1) {
  RaceConfig c;
  c.memory_nodes = nodes;
  c.groups_per_subtable = groups;
  c.initial_depth = 0;
  c.max_depth = 14;
  c.chunk_bytes = 1 << 16;
  return c;
}

// --- conformance --------------------------------------------------------------------------------

class RaceOracle : public testing::TestWithParam<std::tuple<uint32_t, bool>> {};

TEST_P(RaceOracle, MixedLengthByteKeysMatchUnorderedMap) {
  const auto [nodes, cache] = GetParam();
  RaceConfig cfg = small_cfg(2, nodes);
  cfg.dir_cache = cache;
  RaceTable t(cfg);
  Sync c(*t.fabric, cfg, 1);
  std::unordered_map<std::string, std::string> oracle;
  std::mt19937_64 rng(5 + nodes);
  uint64_t version = 0;
  for (int i = 0; i < 6000; ++i) {
    const std::string k = key_of(rng() % 1500, (rng() % 8 == 0) ? kMaxKeyBytes : 40);
    const size_t vlen = rng() % 16 == 0 ? 2000 + rng() % 3000 : rng() % 64;
    const std::string v = value_of(k, ++version, vlen);
    const bool present = oracle.count(k) > 0;
    switch (rng() % 6) {
      case 0: {
        const OpResult r = c.find_or_put(k, v);
        ASSERT_EQ(r.status, present ? Status::kFound : Status::kInserted) << i;
        if (!present) oracle[k] = v;
        break;
      }
      case 1: {
        ASSERT_EQ(c.put(k, v).status, present ? Status::kUpdated : Status::kInserted) << i;
        oracle[k] = v;
        break;
      }
      case 2: {
        ASSERT_EQ(c.update(k, v).status, present ? Status::kUpdated : Status::kNotFound) << i;
        if (present) oracle[k] = v;
        break;
      }
      case 3: {
        ASSERT_EQ(c.erase(k).status, present ? Status::kErased : Status::kNotFound) << i;
        oracle.erase(k);
        break;
      }
      default: {
        const auto got = c.get(k);
        ASSERT_EQ(got.has_value(), present) << i;
        if (present) {
          ASSERT_EQ(*got, oracle[k]) << i;
        }
      }
    }
  }
  for (const auto& [k, v] : oracle) ASSERT_EQ(c.get(k), v);
  const RaceInspection in = race_inspect(*t.fabric, cfg, true);
  EXPECT_EQ(in.committed, oracle.size());
  EXPECT_EQ(in.tentative, 0u);
  EXPECT_EQ(in.frozen, 0u);
  EXPECT_TRUE(in.split_word_clear);
  EXPECT_GE(in.global_depth, 3u) << "the table must have grown from one subtable";
  std::set<std::string> keys;
  for (const auto& k : in.keys) keys.insert(str_of(k));
  EXPECT_EQ(keys.size(), in.keys.size()) << "a key is stored twice";
}

INSTANTIATE_TEST_SUITE_P(Nodes, RaceOracle, testing::Combine(testing::Values(1u, 3u), testing::Values(true, false)),
                         [](const auto& i) {
                           return "k" + std::to_string(std::get<0>(i.param)) + (std::get<1>(i.param) ? "_cache" : "_nocache");
                         });

TEST(Race, IntegerKeysAreTheirBytesPlusAFixedSuffix) {
  RaceConfig cfg = small_cfg();
  cfg.key_bytes = 16;
  RaceTable t(cfg);
  Sync c(*t.fabric, cfg);
  const Bytes v = test::value_for(7, 1, 32);
  ASSERT_EQ(c.run(c.client.find_or_put(uint64_t{7}, v)).status, Status::kInserted);
  ASSERT_EQ(c.run(c.client.find_or_put(uint64_t{7}, v)).status, Status::kFound);
  Bytes out(32);
  ASSERT_EQ(c.run(c.client.get(uint64_t{7}, out)).status, Status::kFound);
  EXPECT_EQ(out, v);
  // The same 16 bytes as a byte key name the same record.
  Bytes k(16);
  const uint64_t seven = 7;
  std::memcpy(k.data(), &seven, 8);
  for (uint32_t i = 8; i < 16; ++i) k[i] = static_cast<std::byte>(0xA5 ^ i);
  Bytes got;
  ASSERT_EQ(c.run(c.client.get(KeyView(k), &got)).status, Status::kFound);
  EXPECT_EQ(got, v);
  EXPECT_EQ(c.run(c.client.get(uint64_t{8}, out)).status, Status::kNotFound);
}

// Paper: search 2 round trips; ours: insert 4 (one more for the commit, race.h says why).
TEST(Race, RoundTripsPerOperation) {
  RaceConfig cfg = small_cfg(64);
  RaceTable t(cfg);
  Sync c(*t.fabric, cfg);
  ASSERT_EQ(c.find_or_put("alpha", "one").status, Status::kInserted);  // + directory read, chunk RPC
  EXPECT_EQ(c.last.rpcs, 1u);
  ASSERT_EQ(c.find_or_put("beta", "two").status, Status::kInserted);
  EXPECT_EQ(c.last.round_trips, 3u);  // WRITE + READ, placement CAS + fenced re-READ, commit CAS
  EXPECT_EQ(c.last.cas, 2u);
  EXPECT_EQ(c.last.writes, 1u);
  ASSERT_TRUE(c.get("beta").has_value());
  EXPECT_EQ(c.last.round_trips, 2u);
  EXPECT_EQ(c.last.reads, 5u);  // 2 combined buckets, 1 block, the directory entry and depth
  ASSERT_EQ(c.update("beta", "three").status, Status::kUpdated);
  EXPECT_EQ(c.last.round_trips, 3u);
  ASSERT_EQ(c.erase("beta").status, Status::kErased);
  EXPECT_EQ(c.last.round_trips, 3u);
  EXPECT_FALSE(c.get("beta").has_value());
  EXPECT_EQ(c.last.round_trips, 2u);
}

TEST(Race, BadKeysAndValuesAreRejectedBeforeAnyRequest) {
  RaceConfig cfg = small_cfg();
  RaceTable t(cfg);
  Sync c(*t.fabric, cfg);
  (void)c.get("warm");
  const uint64_t batches = c.transport->counters().batches;
  const std::string long_key(kMaxKeyBytes + 1, 'x');
  const std::string long_value(kMaxValueBytes + 1, 'v');
  EXPECT_THROW(c.put(long_key, "v"), InvalidArgument);
  EXPECT_THROW(c.put("", "v"), InvalidArgument);
  EXPECT_THROW(c.get(""), InvalidArgument);
  EXPECT_THROW(c.erase(long_key), InvalidArgument);
  EXPECT_THROW(c.put("k", long_value), InvalidArgument);
  EXPECT_THROW(c.update("k", long_value), InvalidArgument);
  EXPECT_EQ(c.transport->counters().batches, batches);
  // The limits themselves are accepted.
  EXPECT_EQ(c.put(std::string(kMaxKeyBytes, 'y'), std::string(kMaxValueBytes, 'z')).status, Status::kInserted);
  EXPECT_EQ(c.get(std::string(kMaxKeyBytes, 'y'))->size(), kMaxValueBytes);
  RaceConfig bad = cfg;
  bad.memory_nodes = 65;
  EXPECT_THROW(bad.validate(), InvalidArgument);
  bad = cfg;
  bad.initial_depth = 20;
  EXPECT_THROW(bad.validate(), InvalidArgument);
}

// Byte keys on integer-key schemes (InvalidArgument naming the scheme, no request): tests/conformance_test.cpp
// (Conformance.ErrorContractFailsBeforeAnyRequest, every scheme).

TEST(Race, ExhaustedPoolAnswersFullAndChangesNothing) {
  RaceConfig cfg = small_cfg(2);
  cfg.chunk_bytes = 16384;
  RaceTable t(cfg, 3 * 16384 + 3 * cfg.subtable_bytes());
  Sync c(*t.fabric, cfg);
  std::unordered_map<std::string, std::string> oracle;
  int full = 0;
  for (int i = 0; i < 5000 && full < 20; ++i) {
    const std::string k = "key" + std::to_string(i), v = value_of(k, 1, 200);
    const OpResult r = c.find_or_put(k, v);
    if (r.status == Status::kFull) {
      ++full;
      EXPECT_FALSE(c.get(k).has_value());
    } else {
      ASSERT_EQ(r.status, Status::kInserted);
      oracle[k] = v;
    }
  }
  EXPECT_EQ(full, 20);
  for (const auto& [k, v] : oracle) ASSERT_EQ(c.get(k), v);
  EXPECT_EQ(race_inspect(*t.fabric, cfg).committed, oracle.size());
}

// The allocation RPC takes its size from the wire. A size near 2^64 used to wrap `next + want`
// past the pool's end check and move the bump pointer back over blocks already handed out, so
// two clients would carve the same memory. Now it is refused (offset 0) and changes nothing.
TEST(Race, AllocationRpcOfAWrappingSizeIsRefused) {
  RaceConfig cfg = small_cfg();
  RaceTable t(cfg);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  auto alloc = [&](uint64_t want) {
    const std::array<uint64_t, 2> req{want, 0};
    std::vector<std::byte> reply;
    e.run([&]() -> Task<void> { co_await e.rpc(0, kRaceRpcAlloc, req.data(), 16, &reply); }());
    EXPECT_EQ(reply.size(), 8u);
    uint64_t got = 0;
    std::memcpy(&got, reply.data(), 8);
    return got;
  };
  const uint64_t first = alloc(64);
  ASSERT_NE(first, 0u);
  for (const uint64_t want : {uint64_t{0} - (uint64_t{1} << 20), uint64_t{0} - 64, uint64_t{1} << 63})
    EXPECT_EQ(alloc(want), 0u) << "want " << want;
  EXPECT_EQ(alloc(64), first + 64) << "the bump pointer moved";
  // A client's configuration may not ask for chunks that large either.
  cfg.chunk_bytes = uint64_t{1} << 41;
  EXPECT_THROW(cfg.validate(), InvalidArgument);
}

// A client whose configuration addresses another layout (groups per subtable, max depth, key bytes,
// hash seed) used to compute bucket offsets inside other subtables and corrupt the table silently.
// Its first directory read now refuses the table; a client with only client-side options changed
// (chunk bytes, help patience, the directory cache) is accepted.
TEST(Race, AClientOfAnotherLayoutIsRefused) {
  const RaceConfig cfg = small_cfg();
  RaceTable t(cfg);
  Sync owner(*t.fabric, cfg);
  ASSERT_EQ(owner.put("k", "v").status, Status::kInserted);
  auto variant = [&](auto change) {
    RaceConfig c = cfg;
    change(c);
    return c;
  };
  for (const RaceConfig& c : {variant([](RaceConfig& c) { c.groups_per_subtable *= 2; }),
                              variant([](RaceConfig& c) { c.max_depth -= 1; }), variant([](RaceConfig& c) { c.key_bytes = 16; }),
                              variant([](RaceConfig& c) { c.hash_seed ^= 1; }), variant([](RaceConfig& c) {
                                c.hash_seed ^= 1;
                                c.dir_cache = false;  // reads directory entries, not the directory
                              })}) {
    Sync other(*t.fabric, c);
    try {
      other.put("k", "w");
      ADD_FAILURE() << "a client of another layout wrote";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("another configuration"), std::string::npos) << e.what();
    }
  }
  Sync same(*t.fabric, variant([](RaceConfig& c) {
              c.chunk_bytes *= 2;
              c.help_patience = 0;
              c.dir_cache = false;
            }));
  EXPECT_EQ(same.get("k"), std::optional<std::string>("v"));
  EXPECT_EQ(owner.get("k"), std::optional<std::string>("v")) << "the refused clients changed nothing";
}

// A bulk load with many operations in flight fits the region region_bytes_for sizes, and every
// subtable the pool gave out is a live or retired one (or a spare pair). Operations of one client
// that met the same full subtable used to allocate a pair of children each; all but one lost the
// install CAS and `spare` kept one pair, so ~6 pairs leaked a split and a load of 800 000 records
// (bench, 16-client sizing) ran the pool out. Here: 120 000 records, the loader's 32 in flight.
TEST(Race, BulkLoadFitsItsSizingWithoutLeakingSubtables) {
  RaceConfig cfg;
  cfg.groups_per_subtable = 64;
  cfg.max_depth = 16;
  cfg.chunk_bytes = 1 << 20;
  const uint64_t n = 120000;
  const uint32_t value_bytes = 8;
  auto fabric = make_local_fabric({cfg.region_bytes_for(n, value_bytes, 1)});
  RaceServer server(*fabric, cfg);
  RaceLoader loader(*fabric, cfg);
  uint64_t full = 0;
  loader.engine().run_many(
      n, 32,
      [&](uint64_t i) -> Task<void> {
        std::vector<std::byte> v(value_bytes, std::byte{7});
        const OpResult r = co_await loader.client().find_or_put(i * 0x9E3779B97F4A7C15ULL + 1, v);
        if (r.status == Status::kFull) ++full;
      },
      [&](const Engine::Completion& c) {
        if (c.error) std::rethrow_exception(c.error);
      });
  EXPECT_EQ(full, 0u);
  RaceNodeHeader h{};
  std::memcpy(&h, fabric->local_region(0).data(), sizeof h);
  const uint64_t splits = loader.client().stats().splits;
  EXPECT_EQ(h.subtables, 2 * splits);
  const RaceInspection ins = race_inspect(*fabric, cfg);
  EXPECT_EQ(ins.committed, n);
  EXPECT_EQ(ins.subtables, 1 + splits);
  // Pool use: blocks (and split descriptors) in 1 MiB chunks, live + retired subtables, at most
  // one spare pair; a leaked pair per split would exceed it many times over.
  const uint64_t used = h.pool_next - cfg.pool_offset() - cfg.subtable_bytes();
  const uint64_t blocks = (n + splits) * 64;
  EXPECT_LE(used, blocks + blocks / 50 + cfg.chunk_bytes + (2 * splits + 2) * cfg.subtable_bytes());
}

// A chunk allocation RPC that fails fails its operation, and only it: the client's next write
// allocates again. (It used to leave the refill flag set, so every later write of the client rode
// along forever on an RPC no longer in flight, READing node 0.) The watchdog fails every request
// after the 10 000th: it bounds a wedged client's requests, not the time.
TEST(Race, FailedChunkRpcLeavesTheClientUsable) {
  RaceConfig cfg = small_cfg();
  RaceTable t(cfg);
  bool failed_rpc = false;
  auto tr = std::make_unique<test::FaultTransport>(t.fabric->connect(), [&](const Request& r, uint64_t ordinal) {
    if (r.kind == ReqKind::kRpc && !failed_rpc) {  // the first chunk RPC fails
      failed_rpc = true;
      return true;
    }
    return ordinal >= 10000;
  });
  test::FaultTransport* fault = tr.get();
  Sync c(std::move(tr), cfg, 1);
  EXPECT_THROW(c.put("first", "one"), FabricError);
  ASSERT_TRUE(failed_rpc);
  OpResult r{};
  ASSERT_NO_THROW(r = c.put("second", "two")) << "the next write spun until the watchdog (" << fault->requests()
                                              << " requests)";
  EXPECT_EQ(r.status, Status::kInserted);
  EXPECT_EQ(c.last.rpcs, 1u) << "its own chunk RPC";
  EXPECT_EQ(c.get("second"), std::optional<std::string>("two"));
  EXPECT_EQ(c.get("first"), std::nullopt) << "the failed put changed nothing";
  EXPECT_EQ(c.find_or_put("first", "one").status, Status::kInserted);
  EXPECT_LT(fault->requests(), 100u);
  EXPECT_EQ(fault->injected(), 1u);
}

// The directory is READ whole (64 + 8·2^depth bytes) in one request, whose length is 32-bit: a
// max depth of 29 or more would wrap it, so validate() refuses it.
TEST(Race, MaxDepthBeyondOneDirectoryReadIsRefused) {
  RaceConfig cfg = small_cfg();
  cfg.max_depth = 28;
  EXPECT_NO_THROW(cfg.validate());
  for (const uint32_t depth : {29u, 30u, 31u}) {
    cfg.max_depth = depth;
    try {
      cfg.validate();
      ADD_FAILURE() << "max depth " << depth << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("max depth must be at most 28"), std::string::npos) << e.what();
    }
  }
}

// A KV block whose bytes changed (memory corruption, a wild write) fails its checksum: the client
// reports a FabricError instead of returning the damaged value.
TEST(Race, CorruptedBlockFailsItsChecksum) {
  RaceConfig cfg = small_cfg();
  RaceTable t(cfg);
  Sync c(*t.fabric, cfg);
  const std::string v = "value-with-a-recognizable-pattern-0123456789";
  ASSERT_EQ(c.put("victim", v).status, Status::kInserted);
  auto region = t.fabric->local_region(0);
  const std::string hay(reinterpret_cast<const char*>(region.data()), region.size());
  const size_t at = hay.find(v);
  ASSERT_NE(at, std::string::npos);
  region[at + 3] ^= std::byte{0x40};
  EXPECT_THROW(c.get("victim"), FabricError);
}

// A bucket header that disagrees with a subtable the directory (re-read) still names cannot
// arise from any interleaving (race.cpp read_view): corrupted memory. Every operation on a key
// of that bucket reports a FabricError instead of trusting the view.
TEST(Race, HeaderDisagreeingWithTheDirectoryIsAnError) {
  RaceConfig cfg = small_cfg();
  for (const uint64_t bad_header : {~0ULL, 1ULL << 8 /* depth 0, suffix 1 */}) {
    RaceTable t(cfg);
    Sync c(*t.fabric, cfg);
    ASSERT_EQ(c.put("victim", "v").status, Status::kInserted);
    ASSERT_EQ(c.get("victim"), std::optional<std::string>("v"));
    auto region = t.fabric->local_region(0);
    uint64_t e = 0;  // the only subtable (initial depth 0): dir[0]
    std::memcpy(&e, region.data() + cfg.directory_offset(), 8);
    const uint64_t sub = (e & ((1ULL << 40) - 1)) * 64;
    for (uint64_t b = 0; b < 3ULL * cfg.groups_per_subtable; ++b) std::memcpy(region.data() + sub + 64 * b, &bad_header, 8);
    const uint64_t refreshes = c.client.stats().dir_refreshes;
    EXPECT_THROW(c.get("victim"), FabricError) << std::hex << bad_header;
    EXPECT_THROW(c.put("other", "w"), FabricError) << std::hex << bad_header;
    EXPECT_EQ(c.client.stats().dir_refreshes, refreshes + 2) << "one directory re-read each, then the error";
  }
}

// --- concurrency ---------------------------------------------------------------------------------

// Several clients insert the same keys (different values): each key is inserted exactly once, and
// every reader only ever sees the winner's value.
TEST(RaceConcurrency, OverlappingInsertsInsertEachKeyOnce) {
  RaceConfig cfg = small_cfg(2);
  RaceTable t(cfg);
  constexpr int kThreads = 4, kKeys = 3000;
  std::vector<std::atomic<int>> inserted(kKeys);
  std::vector<std::vector<Status>> results(kThreads, std::vector<Status>(kKeys));
  std::vector<std::thread> th;
  std::atomic<uint64_t> bad{0};
  for (int w = 0; w < kThreads; ++w)
    th.emplace_back([&, w] {
      Sync c(*t.fabric, cfg, w);
      std::vector<int> order(kKeys);
      for (int i = 0; i < kKeys; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937_64(w));
      for (int i : order) {
        const std::string k = key_of(i);
        const OpResult r = c.find_or_put(k, value_of(k, w, 24));
        if (r.status == Status::kInserted) inserted[i]++;
        else if (r.status != Status::kFound) bad++;
        const auto got = c.get(k);
        if (!got || got->substr(0, k.size() + 1) != k + "#") bad++;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0u);
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(inserted[i].load(), 1) << "key " << i;
  const RaceInspection in = race_inspect(*t.fabric, cfg, true);
  EXPECT_EQ(in.committed, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(in.tentative, 0u);
  EXPECT_EQ(in.frozen, 0u);
  EXPECT_TRUE(in.split_word_clear);
  Sync c(*t.fabric, cfg, 9);
  for (int i = 0; i < kKeys; ++i) {
    // The stored value is the one of the client that got kInserted... all values name the key.
    const std::string k = key_of(i);
    ASSERT_TRUE(c.get(k).has_value());
  }
}

// Each key has one writer that puts increasing versions and erases sometimes; other clients read
// the same keys while splits run. A reader never sees a version older than one it saw before
// (no lost update, no resurrection after an erase), never a value that was not written, and the
// final table equals every writer's final state.
TEST(RaceConcurrency, UpdatesAndErasesAreNeverLostOrResurrected) {
  RaceConfig cfg = small_cfg(2);
  RaceTable t(cfg);
  constexpr int kWriters = 3, kReaders = 2, kKeysPer = 400, kRounds = 6;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  // published[w*kKeysPer+i] = last version written (0 = erased/absent), for the final check
  std::vector<std::atomic<int64_t>> last(kWriters * kKeysPer);
  auto key = [](int w, int i) { return "w" + std::to_string(w) + "/" + key_of(static_cast<uint64_t>(i), 20); };
  std::vector<std::thread> th;
  for (int w = 0; w < kWriters; ++w)
    th.emplace_back([&, w] {
      Sync c(*t.fabric, cfg, w);
      std::mt19937_64 rng(w);
      for (int round = 1; round <= kRounds; ++round)
        for (int i = 0; i < kKeysPer; ++i) {
          const std::string k = key(w, i);
          const int64_t version = round * 10;
          if (round % 3 == 0 && rng() % 2) {
            const OpResult r = c.erase(k);
            if (r.status != (last[w * kKeysPer + i] ? Status::kErased : Status::kNotFound)) bad++;
            last[w * kKeysPer + i] = 0;
          } else {
            const OpResult r = c.put(k, value_of(k, version, 16 + rng() % 100));
            if (r.status != (last[w * kKeysPer + i] ? Status::kUpdated : Status::kInserted)) bad++;
            last[w * kKeysPer + i] = version;
          }
        }
    });
  for (int r = 0; r < kReaders; ++r)
    th.emplace_back([&, r] {
      Sync c(*t.fabric, cfg, 10 + r);
      std::vector<int64_t> seen(kWriters * kKeysPer, 0);
      std::mt19937_64 rng(100 + r);
      while (!stop || reads.load() <= 1000) {  // on a loaded machine the writers may finish first
        const int w = static_cast<int>(rng() % kWriters), i = static_cast<int>(rng() % kKeysPer);
        const std::string k = key(w, i);
        const auto got = c.get(k);
        reads++;
        if (!got) continue;
        const size_t a = k.size(), b = got->find('#', a + 1);
        if (got->size() <= a || got->substr(0, a) != k || (*got)[a] != '#' || b == std::string::npos) {
          bad++;
          continue;
        }
        const int64_t v = std::stoll(got->substr(a + 1, b - a - 1));
        if (*got != value_of(k, v, got->size()) || v < seen[w * kKeysPer + i]) bad++;
        seen[w * kKeysPer + i] = v;
      }
    });
  for (int w = 0; w < kWriters; ++w) th[w].join();
  stop = true;
  for (size_t j = kWriters; j < th.size(); ++j) th[j].join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 1000u);
  Sync c(*t.fabric, cfg, 50);
  uint64_t present = 0;
  for (int w = 0; w < kWriters; ++w)
    for (int i = 0; i < kKeysPer; ++i) {
      const auto got = c.get(key(w, i));
      const int64_t v = last[w * kKeysPer + i];
      ASSERT_EQ(got.has_value(), v != 0);
      if (v) {
        ++present;
        ASSERT_EQ(got->substr(0, got->find('#', key(w, i).size() + 1)), key(w, i) + "#" + std::to_string(v));
      }
    }
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, present);
  EXPECT_EQ(in.tentative + in.frozen, 0u);
  EXPECT_GE(in.global_depth, 4u);
}

// Four clients grow the table from one subtable to 1 M keys while two others read back what was
// acknowledged. RDMAHASH_RACE_GROWTH_KEYS sets the total (the sanitizer runs use fewer).
TEST(RaceConcurrency, GrowthFromOneSubtableLosesNothing) {
  RaceConfig cfg = small_cfg(16);
  cfg.max_depth = 16;
  cfg.chunk_bytes = 1 << 20;
  constexpr int kWriters = 4, kReaders = 2;
  uint64_t total = 1000000;
  if (const char* e = std::getenv("RDMAHASH_RACE_GROWTH_KEYS")) total = std::strtoull(e, nullptr, 10);
  ASSERT_GE(total, 100000u) << "RDMAHASH_RACE_GROWTH_KEYS: at least 100000 keys, so the directory doubles several times";
  const uint64_t kPer = total / kWriters;
  RaceTable t(cfg, 96 * total + (64 << 20));  // 64-byte blocks, subtables, the clients' chunks
  std::vector<std::vector<std::atomic<bool>>> acked;
  for (int w = 0; w < kWriters; ++w) acked.emplace_back(kPer);
  std::atomic<uint64_t> bad{0}, checked{0};
  std::atomic<int> writers_done{0};
  std::vector<std::thread> th;
  auto key = [](int w, uint64_t i) { return std::to_string(w) + ":" + std::to_string(i * 7919 + 13); };
  for (int w = 0; w < kWriters; ++w)
    th.emplace_back([&, w] {
      auto tr = t.fabric->connect();
      Engine e(*tr);
      RaceClient c(cfg, e, w);
      std::vector<std::string> keys(kPer);
      for (uint64_t i = 0; i < kPer; ++i) keys[i] = key(w, i);
      e.run_many(
          kPer, 8,
          [&](uint64_t i) -> Task<void> {
            const std::string& k = keys[i];
            const Bytes v = bytes_of(value_of(k, 1, 16));
            const OpResult r = co_await c.find_or_put(KeyView(k), v);
            if (r.status != Status::kInserted) bad++;
          },
          [&](const Engine::Completion& done) {
            if (done.error) bad++;
            acked[w][done.index] = true;  // acknowledged: readers may now look for it
          });
      writers_done++;
    });
  for (int r = 0; r < kReaders; ++r)
    th.emplace_back([&, r] {
      Sync c(*t.fabric, cfg, 20 + r);
      std::mt19937_64 rng(r);
      while (writers_done < kWriters) {
        const int w = static_cast<int>(rng() % kWriters);
        const uint64_t i = rng() % kPer;
        if (!acked[w][i]) continue;
        const std::string k = key(w, i);
        const auto got = c.get(k);
        checked++;
        if (!got || *got != value_of(k, 1, 16)) bad++;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(checked.load(), 100u);
  const RaceInspection in = race_inspect(*t.fabric, cfg, true);
  EXPECT_EQ(in.committed, kWriters * kPer);
  EXPECT_EQ(in.tentative + in.frozen, 0u);
  EXPECT_TRUE(in.split_word_clear);
  EXPECT_GE(in.global_depth, 8u) << "the directory must have doubled several times";
  std::set<std::string> keys;
  for (const auto& k : in.keys) keys.insert(str_of(k));
  EXPECT_EQ(keys.size(), kWriters * kPer) << "duplicates or missing keys";
  Sync c(*t.fabric, cfg, 40);
  for (int w = 0; w < kWriters; ++w)
    for (uint64_t i = 0; i < kPer; i += 97) ASSERT_EQ(c.get(key(w, i)), value_of(key(w, i), 1, 16));
}

// --- directory cache ------------------------------------------------------------------------------

TEST(Race, StaleCacheIsDetectedByHeadersAndRefreshedOnlyThen) {
  RaceConfig cfg = small_cfg(2);
  RaceTable t(cfg);
  Sync a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(a.put(key_of(i), "v" + std::to_string(i)).status, Status::kInserted);
  const uint32_t old_depth = a.client.cached_depth();
  // No splits: a's cache stays valid and it never re-reads the directory.
  const uint64_t refreshes = a.client.stats().dir_refreshes;
  for (int i = 0; i < 50; ++i) ASSERT_EQ(a.get(key_of(i)), "v" + std::to_string(i));
  EXPECT_EQ(a.client.stats().dir_refreshes, refreshes);
  // b grows the table a lot; a's cache is now old.
  for (int i = 50; i < 3000; ++i) ASSERT_EQ(b.put(key_of(i), "v" + std::to_string(i)).status, Status::kInserted);
  ASSERT_GT(race_inspect(*t.fabric, cfg).global_depth, old_depth + 2);
  EXPECT_EQ(a.client.cached_depth(), old_depth);
  const uint64_t stale = a.client.stats().stale_detected;
  for (int i = 0; i < 3000; i += 3) ASSERT_EQ(a.get(key_of(i)), "v" + std::to_string(i)) << i;
  EXPECT_GT(a.client.stats().stale_detected, stale);
  // SRCDD: found at the bucket READ, by the RETIRED headers of the subtables b's splits replaced.
  EXPECT_GT(a.client.stats().stale_headers, 0u);
  EXPECT_GT(a.client.cached_depth(), old_depth);
  // Refreshes happen only on detection, not per operation.
  EXPECT_LE(a.client.stats().dir_refreshes - refreshes, a.client.stats().stale_detected - stale);
  EXPECT_FALSE(a.get("absent-key").has_value());
}

// --- forced interleavings ---------------------------------------------------------------------------

// Client A runs inside an InterleavingTransport whose hook runs one whole operation of client B
// between A's requests and between the words of A's READs. A's operations therefore see every
// state of B's splits (B's ops are atomic to A), and B's ops see every intermediate state of A's
// splits (A's are paused at each request). Both are checked against the oracle.
TEST(RaceInterleaving, SplitsInterleavedWithEveryRequestOfAnotherClient) {
  RaceConfig cfg = small_cfg(1);  // 21 slots per subtable: splits all the time
  RaceTable t(cfg);
  Sync b(*t.fabric, cfg, 2);
  std::map<std::string, std::string> oracle;  // keys B owns
  std::map<std::string, std::string> a_keys;  // keys A inserted (complete)
  std::string a_inflight, watch;
  std::set<std::string> watched;
  std::mt19937_64 rng(11);
  uint64_t version = 0, b_ops = 0, a_state_checks = 0;
  bool in_hook = false;
  auto hook = [&] {
    if (in_hook) return;
    in_hook = true;
    const std::string k = "b" + std::to_string(rng() % 300);
    const uint64_t x = rng() % 10;
    {
      if (x < 4) {
        const std::string v = value_of(k, ++version, rng() % 40);
        const OpResult r = b.put(k, v);
        EXPECT_EQ(r.status, oracle.count(k) ? Status::kUpdated : Status::kInserted);
        oracle[k] = v;
        if (k == watch) watched.insert(v);
      } else if (x < 5) {
        const OpResult r = b.erase(k);
        EXPECT_EQ(r.status, oracle.count(k) ? Status::kErased : Status::kNotFound);
        oracle.erase(k);
        if (k == watch) watched.insert("<absent>");
      } else if (x < 8) {
        const auto got = b.get(k);
        EXPECT_EQ(got.has_value(), oracle.count(k) > 0) << k;
        if (got && oracle.count(k)) {
          EXPECT_EQ(*got, oracle[k]);
        }
      } else if (!a_keys.empty()) {  // A's completed inserts are visible mid-split too
        auto it = a_keys.begin();
        std::advance(it, rng() % a_keys.size());
        EXPECT_EQ(b.get(it->first), it->second);
        ++a_state_checks;
      }
      ++b_ops;
    }
    in_hook = false;
  };
  Sync a(std::make_unique<test::InterleavingTransport>(t.fabric->connect(), hook), cfg, 1);
  for (int i = 0; i < 400; ++i) {
    const std::string k = "a" + std::to_string(i), v = value_of(k, 1, rng() % 50);
    a_inflight = k;
    ASSERT_EQ(a.find_or_put(k, v).status, Status::kInserted);
    a_keys[k] = v;
    if (i % 2 == 0) {
      // A reads one of B's keys while B's ops and splits run between A's words: the answer must
      // be a state the key had during A's get.
      watch = "b" + std::to_string(rng() % 300);
      watched.clear();
      watched.insert(oracle.count(watch) ? oracle[watch] : std::string("<absent>"));
      const auto got = a.get(watch);
      ASSERT_TRUE(watched.count(got ? *got : std::string("<absent>"))) << watch;
      watch.clear();
    }
  }
  EXPECT_GT(a.client.stats().splits, 10u);
  EXPECT_GT(b.client.stats().splits, 5u);
  EXPECT_GT(b.client.stats().helped, 5u) << "B must have met A's splits and helped them";
  EXPECT_GT(a_state_checks, 100u);
  Sync c(*t.fabric, cfg, 3);
  for (const auto& [k, v] : oracle) ASSERT_EQ(c.get(k), v);
  for (const auto& [k, v] : a_keys) ASSERT_EQ(c.get(k), v);
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, oracle.size() + a_keys.size());
  EXPECT_EQ(in.tentative + in.frozen, 0u);
  (void)b_ops;
}


// Tears the second 128-byte READ of a batch (a get's second combined bucket) after its word 9,
// i.e. after both bucket headers, and runs `hook` there once while armed.
class TearSecondBucketRead final : public Transport {
 public:
  TearSecondBucketRead(std::unique_ptr<Transport> inner, std::function<void()> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  bool armed = false;
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    int bucket_reads = 0;
    for (Request& r : batch) {
      counters_.add(r);
      if (armed && r.kind == ReqKind::kRead && r.len == 128 && ++bucket_reads == 2) {
        armed = false;
        Request head = r, tail = r;
        head.len = 72;
        tail.addr.offset += 72;
        tail.buf = static_cast<std::byte*>(r.buf) + 72;
        tail.len = 56;
        inner_->execute(std::span<Request>(&head, 1));
        hook_();
        inner_->execute(std::span<Request>(&tail, 1));
        continue;
      }
      inner_->execute(std::span<Request>(&r, 1));
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
};

// A get whose bucket READ is torn by a whole split (both headers read before it, the key's slot
// after it: the key has moved to the new subtable and its old slot is cleared) must not report a
// miss: the directory check after the READ sees the key's entry changed and retries.
TEST(RaceInterleaving, ReadTornByAWholeSplitIsRetried) {
  int moved_under_reader = 0;
  for (uint32_t trial = 0; trial < 40; ++trial)
    for (int victim = 0; victim < 12; ++victim) {
      RaceConfig cfg = small_cfg(1);
      cfg.max_depth = 4;
      cfg.hash_seed = 1000 + trial;
      RaceTable t(cfg, 1 << 20);
      Sync b(*t.fabric, cfg, 2);
      std::vector<std::string> keys;
      for (int i = 0; i < 12; ++i) {  // 12 of the single subtable's 21 slots: no split yet
        keys.push_back("t" + std::to_string(i));
        ASSERT_EQ(b.put(keys.back(), "v" + keys.back()).status, Status::kInserted);
      }
      ASSERT_EQ(b.client.stats().splits, 0u);
      int extra = 0;
      auto hook = [&] {  // B inserts until its first split (moves about half of the keys)
        while (b.client.stats().splits == 0) {
          const std::string k = "x" + std::to_string(extra++);
          ASSERT_EQ(b.put(k, "v" + k).status, Status::kInserted);
        }
      };
      auto tear = std::make_unique<TearSecondBucketRead>(t.fabric->connect(), hook);
      TearSecondBucketRead* tp = tear.get();
      Sync a(std::move(tear), cfg, 1);
      (void)a.get("warm-up");  // caches the one-subtable directory
      const std::string& k = keys[victim];
      const uint64_t stale = a.client.stats().stale_detected;
      tp->armed = true;
      const auto got = a.get(k);
      ASSERT_TRUE(got.has_value()) << "trial " << trial << " key " << k << ": a key moved by a split was reported absent";
      ASSERT_EQ(*got, "v" + k);
      if (a.client.stats().stale_detected > stale) ++moved_under_reader;
    }
  EXPECT_GT(moved_under_reader, 100);
}


// Runs `hook` once, before the first 8-byte WRITE of a RETIRED header (a split that has published
// its children and not yet retired the old subtable).
class HookRetire final : public Transport {
 public:
  HookRetire(std::unique_ptr<Transport> inner, std::function<void()> hook) : inner_(std::move(inner)), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      counters_.add(r);
      uint64_t v = 0;
      if (r.kind == ReqKind::kWrite && r.len == 8) std::memcpy(&v, r.buf, 8);
      if (v == ~0ULL && hook_) std::exchange(hook_, nullptr)();
      inner_->execute(std::span<Request>(&r, 1));
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
};

// A's split has published the children of S but not yet retired S (headers still valid, slots
// frozen with the old values). C updates every key (in the children); then R, whose cache still
// names S, reads every key: the RT2 directory check must send it to the children — S's frozen
// contents are no longer current. Repeated over several first splits (hash seeds).
TEST(RaceInterleaving, ReadOfAPublishedNotYetRetiredSubtableIsRetried) {
  uint64_t checked = 0;
  for (uint32_t trial = 0; trial < 8; ++trial) {
    RaceConfig cfg = small_cfg(1);
    cfg.hash_seed = 77 + trial;
    RaceTable t(cfg, 2 << 20);
    Sync c(*t.fabric, cfg, 3), r(*t.fabric, cfg, 4);
    std::map<std::string, std::string> oracle;
    bool hooked = false;
    auto hook = [&] {
      hooked = true;
      for (auto& [k, v] : oracle) {
        v = "new-" + k;
        ASSERT_EQ(c.update(k, v).status, Status::kUpdated);
      }
      for (const auto& [k, v] : oracle) {
        ASSERT_EQ(r.get(k), v) << "trial " << trial << ": a read of the published subtable's old copy";
        ++checked;
      }
    };
    Sync a(std::make_unique<HookRetire>(t.fabric->connect(), hook), cfg, 1);
    (void)r.get("warm-up");  // R caches the one-subtable directory
    for (int i = 0; !hooked && i < 100; ++i) {
      const std::string k = "k" + std::to_string(i);
      ASSERT_EQ(a.put(k, "v" + k).status, Status::kInserted);
      if (!hooked) oracle[k] = "v" + k;  // keys present before the split
    }
    ASSERT_TRUE(hooked);
  }
  EXPECT_GT(checked, 100u);
}

// Executes a batch's directory CASes that expect a nonzero entry (a publication) in reverse
// order — the fabric contract lets a batch land in any order — and runs `hook` once, after the
// first of them landed.
class ReversePublication final : public Transport {
 public:
  ReversePublication(std::unique_ptr<Transport> inner, uint64_t dir_end, std::function<void()> hook)
      : inner_(std::move(inner)), dir_end_(dir_end), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    std::vector<Request*> pub;
    for (Request& r : batch) {
      counters_.add(r);
      if (r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset >= 64 && r.addr.offset < dir_end_ && r.compare != 0)
        pub.push_back(&r);
      else
        inner_->execute(std::span<Request>(&r, 1));
    }
    for (auto it = pub.rbegin(); it != pub.rend(); ++it) {
      inner_->execute(std::span<Request>(*it, 1));
      if (hook_) std::exchange(hook_, nullptr)();
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint64_t dir_end_;
  std::function<void()> hook_;
};

// The first split doubles the directory and its publication lands upper entry first: between the
// two, C (fresh directory) updates keys one by one and R, whose cache predates the doubling
// (depth 0, index 0, still naming S), reads each right after. A key of the upper half was updated
// in the child while dir[0] still names S: only the global depth check sends R there.
TEST(RaceInterleaving, PublicationLandingOutOfOrderIsCaughtByTheDepthCheck) {
  int upper_first = 0;
  for (uint32_t trial = 0; trial < 12; ++trial) {
    RaceConfig cfg = small_cfg(1);
    cfg.hash_seed = 900 + trial;
    RaceTable t(cfg, 2 << 20);
    Sync c(*t.fabric, cfg, 3), r(*t.fabric, cfg, 4);
    std::map<std::string, std::string> oracle;
    bool hooked = false;
    auto hook = [&] {
      hooked = true;
      const uint64_t helped = c.client.stats().helped;
      for (auto& [k, v] : oracle) {
        v = "new-" + k;
        ASSERT_EQ(c.update(k, v).status, Status::kUpdated);
        ASSERT_EQ(r.get(k), v) << "trial " << trial << ": R read S's frozen copy of a key updated in a child";
        if (c.client.stats().helped == helped) ++upper_first;  // dir[0] still named S
      }
    };
    Sync a(std::make_unique<ReversePublication>(t.fabric->connect(), cfg.board_offset(), hook), cfg, 1);
    (void)r.get("warm-up");  // R caches the one-subtable directory (depth 0)
    for (int i = 0; !hooked && i < 100; ++i) {
      const std::string k = "k" + std::to_string(i);
      ASSERT_EQ(a.put(k, "v" + k).status, Status::kInserted);
      if (!hooked) oracle[k] = "v" + k;
    }
    ASSERT_TRUE(hooked);
  }
  EXPECT_GT(upper_first, 5) << "keys must have been updated in the upper child while dir[0] still named S";
}

// Runs `hook` once, before the first CAS that installs a split (split word 0 → descriptor).
class HookInstall final : public Transport {
 public:
  HookInstall(std::unique_ptr<Transport> inner, std::function<void()> hook) : inner_(std::move(inner)), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      counters_.add(r);
      if (r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset == offsetof(RaceNodeHeader, split) && r.compare == 0 &&
          hook_)
        std::exchange(hook_, nullptr)();
      inner_->execute(std::span<Request>(&r, 1));
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
};

// Stops for good (every request throws, nothing lands) from the first request `stop` accepts.
class StopTransport final : public Transport {
 public:
  StopTransport(std::unique_ptr<Transport> inner, std::function<bool(const Request&)> stop)
      : inner_(std::move(inner)), stop_(std::move(stop)) {}
  bool stopped = false;
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (!stopped && stop_(r)) stopped = true;
      if (stopped) throw FabricError("test: this client stopped");
      counters_.add(r);
      inner_->execute(std::span<Request>(&r, 1));
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<bool(const Request&)> stop_;
};

// One split at a time: B has read the split word (0) and is about to install its own split when A
// installs one, freezes its subtable and stops (before its first copy CAS). B's install must fail
// and B must finish A's split before anything else (else A's subtable would stay frozen with no
// descriptor naming it). Then everything agrees with the oracle.
TEST(RaceInterleaving, ASplitInstalledFirstIsFinishedByTheNextSplitter) {
  for (uint32_t trial = 0; trial < 6; ++trial) {
    RaceConfig cfg = small_cfg(1);
    cfg.initial_depth = 1;
    cfg.hash_seed = 500 + trial;
    RaceTable t(cfg, 2 << 20);
    std::map<std::string, std::string> oracle;
    auto stop = std::make_unique<StopTransport>(t.fabric->connect(), [](const Request& r) {
      return r.kind == ReqKind::kCas && (r.compare & (1ULL << 47));  // A's first copy CAS
    });
    StopTransport* a_tr = stop.get();
    Sync a(std::move(stop), cfg, 1);
    std::string a_pending;
    bool hooked = false;
    auto hook = [&] {
      hooked = true;
      for (int i = 0; !a_tr->stopped; ++i) {
        const std::string k = "a" + std::to_string(i);
        try {
          ASSERT_EQ(a.put(k, "v" + k).status, Status::kInserted);
          oracle[k] = "v" + k;
        } catch (const FabricError&) {
          ASSERT_TRUE(a_tr->stopped);
          a_pending = k;
        }
      }
      RaceNodeHeader h;
      std::memcpy(&h, t.fabric->local_region(0).data(), sizeof h);
      ASSERT_NE(h.split, 0u) << "A stopped inside its installed split";
      ASSERT_GT(race_inspect(*t.fabric, cfg).frozen, 0u);
    };
    Sync b(std::make_unique<HookInstall>(t.fabric->connect(), hook), cfg, 2);
    for (int i = 0; !hooked; ++i) {
      const std::string k = "b" + std::to_string(i);
      ASSERT_EQ(b.put(k, "v" + k).status, Status::kInserted);
      oracle[k] = "v" + k;
    }
    EXPECT_GT(b.client.stats().helped, 0u) << "trial " << trial << ": B did not finish A's installed split";
    Sync c(*t.fabric, cfg, 3);
    const auto got = c.get(a_pending);
    if (got) oracle[a_pending] = *got;
    for (const auto& [k, v] : oracle) ASSERT_EQ(c.get(k), v) << "trial " << trial << " key " << k;
    const RaceInspection in = race_inspect(*t.fabric, cfg);
    EXPECT_EQ(in.frozen, 0u) << "trial " << trial;
    EXPECT_TRUE(in.split_word_clear) << "trial " << trial;
    EXPECT_EQ(in.committed, oracle.size()) << "trial " << trial;
    EXPECT_EQ(in.tentative, 0u) << "trial " << trial;
  }
}

// Records the address of the first CAS that expects an empty slot (0) and runs `hook` once,
// before that CAS executes.
class HookFirstEmptySlotCas final : public Transport {
 public:
  HookFirstEmptySlotCas(std::unique_ptr<Transport> inner, std::function<void()> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  std::optional<RemoteAddr> first;
  bool first_swapped = false;
  std::function<void()> after_first;  // runs once, before the request after that CAS
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      counters_.add(r);
      const bool is_first = r.kind == ReqKind::kCas && r.compare == 0 && !first;
      if (is_first) {
        first = r.addr;
        if (hook_) hook_();
      }
      if (!is_first && first && after_first) std::exchange(after_first, nullptr)();
      inner_->execute(std::span<Request>(&r, 1));
      if (is_first) first_swapped = *r.result == 0;
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
};

// The slot a lone insert of `key` claims in a fresh table.
RemoteAddr first_claim(const RaceConfig& cfg, const std::string& key) {
  RaceTable t(cfg, 1 << 20);
  auto probe = std::make_unique<HookFirstEmptySlotCas>(t.fabric->connect(), nullptr);
  HookFirstEmptySlotCas* p = probe.get();
  Sync s(std::move(probe), cfg, 1);
  EXPECT_EQ(s.put(key, "v").status, Status::kInserted);
  return p->first.value();
}

// Two inserts of one key from views that differ in another slot: A reads while j holds the slot
// k would take (A picks another one); before A's CAS, B erases j and inserts k into that slot.
// Both CASes succeed, on different slots. Only A's re-read of both buckets after its CAS (the
// CAS re-check) sees B's committed copy: A withdraws its tentative one and answers kFound.
TEST(RaceInterleaving, TwoInsertsOfOneKeyFromDifferentViewsCommitOnce) {
  RaceConfig cfg = small_cfg(2);
  const std::string k = "the-key";
  const RemoteAddr x = first_claim(cfg, k);
  std::string j;
  for (int i = 0; i < 1000 && j.empty(); ++i) {
    const RemoteAddr y = first_claim(cfg, "j" + std::to_string(i));
    if (y.node == x.node && y.offset == x.offset) j = "j" + std::to_string(i);
  }
  ASSERT_FALSE(j.empty()) << "no key found that claims the same slot as " << k;
  RaceTable t(cfg, 1 << 20);
  Sync b(*t.fabric, cfg, 2);
  ASSERT_EQ(b.put(j, "vj").status, Status::kInserted);
  bool hooked = false;
  auto hook = [&] {
    hooked = true;
    ASSERT_EQ(b.erase(j).status, Status::kErased);
    ASSERT_EQ(b.find_or_put(k, "from-b").status, Status::kInserted);
  };
  auto tr = std::make_unique<HookFirstEmptySlotCas>(t.fabric->connect(), hook);
  HookFirstEmptySlotCas* a_tr = tr.get();
  Sync a(std::move(tr), cfg, 1);
  const OpResult r = a.find_or_put(k, "from-a");
  ASSERT_TRUE(hooked);
  ASSERT_TRUE(a_tr->first.has_value());
  EXPECT_FALSE(a_tr->first->node == x.node && a_tr->first->offset == x.offset) << "A must have claimed another slot";
  EXPECT_EQ(r.status, Status::kFound) << "both inserts of one key committed";
  Sync c(*t.fabric, cfg, 3);
  EXPECT_EQ(c.get(k), std::optional<std::string>("from-b"));
  EXPECT_EQ(c.erase(k).status, Status::kErased);
  EXPECT_EQ(c.get(k), std::nullopt) << "a second committed copy of the key survived the erase";
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, 0u);
  EXPECT_EQ(in.tentative, 0u);
}

// A new key whose first view holds a fingerprint match of another key (its block must be READ)
// places its copy in that READ's round trip: 3 round trips, not 4. A client whose such views
// held the key (hits) stops speculating: a hit costs 2 again, not a placement and a withdrawal.
TEST(Race, FingerprintMatchOfAnotherKeyCostsNoRoundTripOnInsert) {
  RaceConfig cfg = small_cfg(64);
  RaceTable t(cfg);
  Sync c(*t.fabric, cfg);
  std::vector<std::string> keys;
  bool matched = false;
  for (int i = 0; i < 1000 && !matched; ++i) {
    const std::string k = "spec-" + std::to_string(i);
    ASSERT_EQ(c.find_or_put(k, "v" + k).status, Status::kInserted) << k;
    keys.push_back(k);
    if (i > 0 && c.last.reads > 4) {  // 2 + 2 bucket READs, + the matching block, dir entry, depth
      matched = true;
      EXPECT_EQ(c.last.round_trips, 3u) << k;
      EXPECT_EQ(c.last.cas, 2u) << k;
    } else if (i > 0) {
      EXPECT_EQ(c.last.round_trips, 3u) << k;
    }
  }
  ASSERT_TRUE(matched) << "no insert met a fingerprint match";
  // Hits: each kFound; the gate closes after a few (a speculative hit: placement + withdrawal).
  std::vector<uint64_t> rts;
  for (int i = 0; i < 8; ++i) {
    const std::string& k = keys[static_cast<size_t>(i) % keys.size()];
    ASSERT_EQ(c.find_or_put(k, "again").status, Status::kFound) << k;
    rts.push_back(c.last.round_trips);
    EXPECT_TRUE(c.last.round_trips == 2u || c.last.round_trips == 4u) << k << ": " << c.last.round_trips;
    EXPECT_EQ(c.get(k), std::optional<std::string>("v" + k)) << k;
  }
  for (size_t i = 4; i < rts.size(); ++i) EXPECT_EQ(rts[i], 2u) << "hit " << i << ": the gate did not close";
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, keys.size());
  EXPECT_EQ(in.tentative, 0u);
  EXPECT_EQ(in.killed, 0u);
}

// Performs a batch as fabric.h allows and no more: its requests are unordered except behind a
// fenced one, so each run from a fenced request to the next runs in reverse order (LocalFabric runs
// them in order, which hides a missing fence).
class ReverseUnfenced final : public Transport {
 public:
  explicit ReverseUnfenced(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (size_t begin = 0, end = 0; begin < batch.size(); begin = end) {
      end = begin + 1;
      while (end < batch.size() && !batch[end].fence) ++end;
      for (size_t i = end; i-- > begin;) {
        counters_.add(batch[i]);
        inner_->execute(std::span<Request>(&batch[i], 1));
      }
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
};

// An insert posts its placement CAS and the re-READ of both combined buckets in one batch (3 round
// trips: race.h, Costs). The READ must be fenced behind the CAS: performed first, it shows no copy
// of ours, which the owner takes for "committed by a helper, then replaced" and answers kInserted
// for a copy nobody will ever commit (invisible to every reader).
TEST(RaceInterleaving, PlacementReReadIsFencedBehindItsCas) {
  RaceConfig cfg = small_cfg(64);
  RaceTable t(cfg);
  Sync a(std::make_unique<ReverseUnfenced>(t.fabric->connect()), cfg, 1);
  Sync b(*t.fabric, cfg, 2);
  for (int i = 0; i < 40; ++i) {
    const std::string k = "fenced-" + std::to_string(i);
    ASSERT_EQ(a.find_or_put(k, "v" + std::to_string(i)).status, Status::kInserted) << k;
    ASSERT_EQ(b.get(k), std::optional<std::string>("v" + std::to_string(i))) << k << ": answered kInserted, not visible";
    ASSERT_EQ(b.find_or_put(k, "other").status, Status::kFound) << k;
  }
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, 40u);
  EXPECT_EQ(in.tentative, 0u);
}

// A's insert reads the one subtable S; before A's CAS, B splits S and inserts the same key, which
// the split sent to a child of S. S is retired, every slot frozen for good, so A's CAS into it
// (stale view) fails: no copy is ever stranded. A re-reads (the retired headers send it to the
// directory) and answers kFound. In odd trials B splits three more times right after A's CAS.
TEST(RaceInterleaving, AStaleCasIntoARetiredSubtableFails) {
  for (int trial = 0; trial < 24; ++trial) {
    RaceConfig cfg = small_cfg(1);
    cfg.max_depth = 8;
    RaceTable t(cfg, 2 << 20);
    Sync b(*t.fabric, cfg, 2);
    const std::string k = "k" + std::to_string(trial);
    int n = 0;
    std::vector<std::string> keys;
    auto put_until_splits = [&](uint64_t target) {
      while (b.client.stats().splits < target) {
        keys.push_back("x" + std::to_string(n++));
        ASSERT_EQ(b.put(keys.back(), "v").status, Status::kInserted);
      }
    };
    auto hook = [&] {
      put_until_splits(1);
      ASSERT_EQ(b.find_or_put(k, "from-b").status, Status::kInserted);
    };
    auto tr = std::make_unique<HookFirstEmptySlotCas>(t.fabric->connect(), hook);
    HookFirstEmptySlotCas* a_tr = tr.get();
    if (trial % 2) a_tr->after_first = [&] { put_until_splits(b.client.stats().splits + 3); };
    Sync a(std::move(tr), cfg, 1);
    ASSERT_EQ(a.find_or_put(k, "from-a").status, Status::kFound);
    ASSERT_TRUE(a_tr->first.has_value());
    EXPECT_FALSE(a_tr->first_swapped) << "trial " << trial << ": a CAS into a retired subtable landed";
    Sync c(*t.fabric, cfg, 3);
    ASSERT_EQ(c.get(k), std::optional<std::string>("from-b"));
    for (const auto& x : keys) ASSERT_EQ(c.get(x), std::optional<std::string>("v")) << x;
    const RaceInspection in = race_inspect(*t.fabric, cfg);
    EXPECT_EQ(in.committed, keys.size() + 1);
    ASSERT_EQ(in.tentative, 0u) << "trial " << trial;
  }
}

// Runs `hook` before every CAS into node 0's directory (a split publishing, or doubling).
class HookDirectoryCas final : public Transport {
 public:
  HookDirectoryCas(std::unique_ptr<Transport> inner, uint64_t dir_end, std::function<void()> hook)
      : inner_(std::move(inner)), dir_end_(dir_end), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      counters_.add(r);
      if (r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset >= 64 && r.addr.offset < dir_end_) hook_();
      inner_->execute(std::span<Request>(&r, 1));
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint64_t dir_end_;
  std::function<void()> hook_;
};

// While client A publishes a split (CASes directory entries, doubles the directory), client B
// (wait budget 0) puts 30 keys: it meets A's installed split, runs it to its end, and goes on —
// its own splits install only once A's is finished (one split word). A's later CASes fail
// harmlessly; every key of both stays reachable.
TEST(RaceInterleaving, WritersHelpASplitThatIsPublishing) {
  RaceConfig cfg = small_cfg(1);
  RaceTable t(cfg, 8 << 20);
  Sync b(*t.fabric, cfg, 2);
  std::map<std::string, std::string> stored;
  int next_b = 0;
  uint64_t hooks = 0;
  bool in_hook = false;
  auto hook = [&] {
    RaceNodeHeader h;
    std::memcpy(&h, t.fabric->local_region(0).data(), sizeof h);
    if (in_hook || h.split == 0) return;  // only while A's split is installed
    in_hook = true;
    ++hooks;
    for (int i = 0; i < 30; ++i) {
      const std::string k = "b" + std::to_string(next_b++);
      ASSERT_EQ(b.put(k, "v" + k).status, Status::kInserted);
      stored[k] = "v" + k;
    }
    in_hook = false;
  };
  Sync a(std::make_unique<HookDirectoryCas>(t.fabric->connect(), cfg.pool_offset(), hook), cfg, 1);
  for (int i = 0; i < 300; ++i) {
    const std::string k = "a" + std::to_string(i);
    ASSERT_EQ(a.put(k, "v" + k).status, Status::kInserted);
    stored[k] = "v" + k;
  }
  EXPECT_GT(a.client.stats().splits, 5u);
  EXPECT_GT(hooks, 5u);
  EXPECT_GT(b.client.stats().helped, 5u) << "B must have finished A's splits";
  Sync c(*t.fabric, cfg, 3);
  for (const auto& [k, v] : stored) ASSERT_EQ(c.get(k), v) << k;
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, stored.size());
  EXPECT_EQ(in.tentative + in.frozen, 0u);
  EXPECT_TRUE(in.split_word_clear);
}

}  // namespace
}  // namespace rdmahash
namespace rdmahash {
namespace {
// One client with 8 operations in flight splits under its own other operations.
TEST(RaceConcurrency, PipelinedGrowthOneClient) {
  RaceConfig cfg = small_cfg(16);
  RaceTable t(cfg);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  RaceClient c(cfg, e, 0);
  const uint64_t n = 20000;
  std::vector<std::string> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = "k" + std::to_string(i);
  uint64_t bad = 0;
  e.run_many(n, 8, [&](uint64_t i) -> Task<void> {
    const Bytes v = bytes_of(value_of(keys[i], 1, 16));
    const OpResult r = co_await c.find_or_put(KeyView(keys[i]), v);
    if (r.status != Status::kInserted) bad++;
  }, [&](const Engine::Completion& d) { if (d.error) bad++; });
  EXPECT_EQ(bad, 0u);
  const RaceInspection in = race_inspect(*t.fabric, cfg, true);
  EXPECT_EQ(in.committed, n);
  EXPECT_EQ(in.tentative, 0u);
  EXPECT_EQ(in.frozen, 0u);
  // Each published split counted once, by its installing operation, never by one that rode along
  // on another operation's run of it (race.cpp run_split) and never for a void one.
  EXPECT_EQ(c.stats().splits, in.subtables - (uint64_t{1} << cfg.initial_depth));
  EXPECT_EQ(c.stats().helped, 0u) << "one client: no other client's split to help";
}
}
}
namespace rdmahash {
namespace {
// Writers' stale CASes into a subtable a split has left leave no stranded tentative copy.
TEST(RaceConcurrency, TwoGrowingClientsLeaveNoTentativeCopies) {
  RaceConfig cfg = small_cfg(4);
  RaceTable t(cfg);
  std::vector<std::thread> th;
  std::atomic<uint64_t> bad{0};
  const uint64_t n = 20000;
  for (int w = 0; w < 2; ++w) th.emplace_back([&, w] {
    auto tr = t.fabric->connect();
    Engine e(*tr);
    RaceClient c(cfg, e, w);
    std::vector<std::string> keys(n);
    for (uint64_t i = 0; i < n; ++i) keys[i] = std::to_string(w) + "k" + std::to_string(i);
    e.run_many(n, 1, [&](uint64_t i) -> Task<void> {
      const Bytes v = bytes_of(value_of(keys[i], 1, 16));
      const OpResult r = co_await c.find_or_put(KeyView(keys[i]), v);
      if (r.status != Status::kInserted) bad++;
    }, [&](const Engine::Completion& d) { if (d.error) bad++; });
  });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad, 0u);
  const RaceInspection in = race_inspect(*t.fabric, cfg, true);
  EXPECT_EQ(in.committed, 2 * n);
  EXPECT_EQ(in.tentative, 0u);
  EXPECT_EQ(in.frozen, 0u);
}
}
}
