// Cuckoo hashing on LocalFabric: conformance against std::unordered_map, probe costs, concurrent
// writers with one-sided readers during relocations, bulk builds, bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <tuple>
#include <cstdio>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "rdmahash/cuckoo.h"
#include "schemes/record.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::InterleavingTransport;
using test::value_for;

// A formatted, empty table: one LocalFabric region per shard, the RPC handler registered.
struct CuckooTable {
  CuckooConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<CuckooServer> server;
  explicit CuckooTable(const CuckooConfig& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    server = std::make_unique<CuckooServer>(*fabric, c);
  }
  std::vector<uint64_t> all_keys() const {
    std::vector<uint64_t> keys;
    for (uint32_t n = 0; n < cfg.memory_nodes; ++n) {
      auto k = server->shard(n).keys();
      keys.insert(keys.end(), k.begin(), k.end());
    }
    return keys;
  }
};

// One client thread's synchronous view: transport, engine, client; `last` holds the last op's stats.
struct SyncClient {
  std::unique_ptr<Transport> transport;
  Engine engine;
  CuckooClient client;
  OpStats last;
  SyncClient(Fabric& f, const CuckooConfig& c, CuckooProbe probe, uint64_t seed = 1)
      : transport(f.connect()), engine(*transport), client(c, probe, engine, seed) {}
  OpResult run(Task<OpResult> t) {
    last = {};
    return engine.run(std::move(t), &last);
  }
  OpResult get(uint64_t k, std::span<std::byte> out = {}) { return run(client.get(k, out)); }
  OpResult find_or_put(uint64_t k, std::span<const std::byte> v = {}) { return run(client.find_or_put(k, v)); }
  OpResult put(uint64_t k, std::span<const std::byte> v) { return run(client.put(k, v)); }
  OpResult update(uint64_t k, std::span<const std::byte> v) { return run(client.update(k, v)); }
  OpResult erase(uint64_t k) { return run(client.erase(k)); }
  void prime() {
    for (uint32_t n = 0; n < client.config().memory_nodes; ++n) (void)engine.run(client.read_header(n));
  }
};

uint64_t key_mask(const CuckooConfig& c) { return c.key_bytes == 4 ? 0xffffffffULL : ~0ULL; }

std::vector<uint64_t> distinct_keys(size_t n, uint64_t mask, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> keys;
  while (keys.size() < n) {
    const uint64_t k = rng() & mask;
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

// --- conformance ---------------------------------------------------------------------------------

struct Variant {
  CuckooStorage storage;
  uint32_t slots, key_bytes, value_bytes;
  CuckooProbe probe;
};

std::string name_of(const testing::TestParamInfo<Variant>& i) {
  const Variant& v = i.param;
  return std::string(to_string(v.storage)) + "_s" + std::to_string(v.slots) + "_k" + std::to_string(v.key_bytes) +
         "_v" + std::to_string(v.value_bytes) + "_" + to_string(v.probe);
}

class CuckooOracle : public testing::TestWithParam<Variant> {
 protected:
  CuckooConfig config() const {
    const Variant& v = GetParam();
    CuckooConfig c;
    c.storage = v.storage;
    c.slots_per_bucket = v.slots;
    c.key_bytes = v.key_bytes;
    c.value_bytes = v.value_bytes;
    c.memory_nodes = 2;
    // About 400 of the 600 universe keys are present at a time: load ≈ 0.78 (S=4) or 0.5 (S=1),
    // enough that inserts need displacement paths.
    c.buckets_per_node = v.slots == 4 ? 64 : 400;
    return c;
  }
};

TEST_P(CuckooOracle, RandomOperationsMatchUnorderedMap) {
  CuckooTable t(config());
  SyncClient c(*t.fabric, t.cfg, GetParam().probe, 5);
  const uint32_t vb = t.cfg.value_bytes;
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  std::mt19937_64 rng(42);
  std::vector<uint64_t> universe = distinct_keys(599, key_mask(t.cfg), 9);
  universe.push_back(0);  // key 0 is an ordinary key
  std::vector<std::byte> out(vb);
  uint64_t full = 0;
  for (int step = 0; step < 4000; ++step) {
    const uint64_t k = universe[rng() % universe.size()];
    const int op = static_cast<int>(rng() % 5);
    const auto v = value_for(k, static_cast<uint32_t>(step), vb);
    const bool present = oracle.count(k) > 0;
    if (op == 0) {
      auto r = c.find_or_put(k, v);
      if (r.status == Status::kFull && !present) { ++full; continue; }
      ASSERT_EQ(r.status, present ? Status::kFound : Status::kInserted) << "step " << step;
      EXPECT_EQ(r.chunks, 0u);
      EXPECT_EQ(c.last.rpcs, 1u);
      if (!present) oracle[k] = v;
    } else if (op == 1) {
      std::fill(out.begin(), out.end(), std::byte{0xEE});
      auto r = c.get(k, out);
      ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << "step " << step;
      EXPECT_EQ(c.last.rpcs, 0u) << "lookups are one-sided";
      if (present) {
        ASSERT_EQ(out, oracle[k]) << "step " << step;
        EXPECT_LE(r.chunks, kCuckooWays);
      }
    } else if (op == 2) {
      auto r = c.erase(k);
      ASSERT_EQ(r.status, present ? Status::kErased : Status::kNotFound);
      oracle.erase(k);
    } else if (op == 3) {
      auto r = c.update(k, v);
      ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kNotFound);
      if (present) oracle[k] = v;
    } else {
      auto r = c.put(k, v);
      if (r.status == Status::kFull && !present) { ++full; continue; }
      ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kInserted);
      oracle[k] = v;
    }
  }
  EXPECT_LT(full, 20u) << "the table was sized to rarely fill";
  // The table holds exactly the oracle's keys, each once, with their values.
  auto keys = t.all_keys();
  std::unordered_set<uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size()) << "duplicate key in the table";
  EXPECT_EQ(keys.size(), oracle.size());
  EXPECT_EQ(t.server->records(), oracle.size());
  for (const auto& [k, v] : oracle) {
    EXPECT_TRUE(distinct.count(k));
    ASSERT_EQ(c.get(k, out).status, Status::kFound);
    EXPECT_EQ(out, v);
    EXPECT_EQ(t.server->shard(cuckoo_place(t.cfg, k).node).find(k), v);
  }
  EXPECT_GT(t.server->stats().relocating_inserts, 0u) << "the test should exercise displacement paths";
  // get_all: a cuckoo table holds a key at most once, so it answers like get().
  ASSERT_FALSE(oracle.empty());
  std::vector<std::byte> all;
  const auto& [k0, v0] = *oracle.begin();
  EXPECT_EQ(c.run(c.client.get_all(k0, &all)).status, Status::kFound);
  EXPECT_EQ(all, v0);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CuckooOracle,
    testing::Values(Variant{CuckooStorage::kInline, 4, 8, 8, CuckooProbe::kParallel},
                    Variant{CuckooStorage::kInline, 4, 8, 8, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kInline, 1, 8, 8, CuckooProbe::kParallel},
                    Variant{CuckooStorage::kInline, 1, 8, 8, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kInline, 4, 4, 0, CuckooProbe::kParallel},
                    Variant{CuckooStorage::kInline, 1, 4, 4, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kInline, 4, 8, 120, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kHeap, 4, 8, 8, CuckooProbe::kParallel},
                    Variant{CuckooStorage::kHeap, 4, 8, 8, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kHeap, 1, 8, 8, CuckooProbe::kParallel},
                    Variant{CuckooStorage::kHeap, 1, 8, 8, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kHeap, 4, 4, 0, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kHeap, 1, 4, 4, CuckooProbe::kParallel},
                    // YCSB's default records (10 x 100 B) and the largest heap records.
                    Variant{CuckooStorage::kHeap, 4, 8, 1000, CuckooProbe::kParallel},
                    Variant{CuckooStorage::kHeap, 1, 8, 4096, CuckooProbe::kSequential},
                    Variant{CuckooStorage::kHeap, 4, 8, 120, CuckooProbe::kParallel}),
    name_of);

// --- probe costs ---------------------------------------------------------------------------------

struct Cost {
  double chunks = 0, round_trips = 0, reads = 0;
};

// Builds `records` keys at `load` and measures per-lookup costs over every key (hits) and as many
// absent keys (misses; the relocation cache is primed, as after a client's first lookups).
struct CostRun {
  Cost hit, miss;
  uint32_t max_hit_chunks = 0, max_miss_chunks = 0;
};

CostRun measure(CuckooStorage storage, uint32_t slots, double load, CuckooProbe probe, uint64_t records = 4000) {
  CuckooConfig cfg = CuckooConfig::for_records(records, load, 1, slots);
  cfg.storage = storage;
  cfg.key_bytes = 8;
  cfg.value_bytes = 8;
  CuckooTable t(cfg);
  const auto keys = distinct_keys(records, ~0ULL, 77);
  std::vector<std::byte> values;
  for (uint64_t k : keys) {
    auto v = value_for(k, 3, 8);
    values.insert(values.end(), v.begin(), v.end());
  }
  t.server->build(keys, values);
  SyncClient c(*t.fabric, cfg, probe, 11);
  c.prime();
  CostRun run;
  std::vector<std::byte> out(8);
  const uint64_t reads0 = c.transport->counters().reads;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = c.get(keys[i], out);
    EXPECT_EQ(r.status, Status::kFound);
    EXPECT_EQ(out, value_for(keys[i], 3, 8));
    run.hit.chunks += r.chunks;
    run.hit.round_trips += c.last.round_trips;
    run.hit.reads += c.last.reads;
    run.max_hit_chunks = std::max(run.max_hit_chunks, r.chunks);
  }
  EXPECT_EQ(c.transport->counters().reads - reads0, static_cast<uint64_t>(run.hit.reads)) << "OpStats vs transport";
  const auto absent = distinct_keys(2 * records, ~0ULL, 78);  // overlaps `keys` only by chance
  const std::unordered_set<uint64_t> present(keys.begin(), keys.end());
  uint64_t misses = 0;
  for (uint64_t k : absent) {
    if (present.count(k)) continue;
    if (++misses > records) break;
    auto r = c.get(k);
    EXPECT_EQ(r.status, Status::kNotFound);
    run.miss.chunks += r.chunks;
    run.miss.round_trips += c.last.round_trips;
    run.miss.reads += c.last.reads;
    run.max_miss_chunks = std::max(run.max_miss_chunks, r.chunks);
  }
  for (Cost* x : {&run.hit, &run.miss}) {
    const double n = x == &run.hit ? static_cast<double>(keys.size()) : static_cast<double>(records);
    x->chunks /= n;
    x->round_trips /= n;
    x->reads /= n;
  }
  return run;
}

TEST(Cuckoo, ParallelInlineLookupIsKReadsInOneRoundTrip) {
  auto cfg = CuckooConfig::for_records(3000, 0.9, 2, 4);
  CuckooTable t(cfg);
  const auto keys = distinct_keys(3000, ~0ULL, 5);
  t.server->build(keys);
  SyncClient c(*t.fabric, cfg, CuckooProbe::kParallel);
  for (uint64_t k : keys) {
    const uint64_t batches = c.transport->counters().batches;
    auto r = c.get(k);
    ASSERT_EQ(r.status, Status::kFound);
    ASSERT_EQ(r.chunks, kCuckooWays);
    ASSERT_EQ(c.last.reads, kCuckooWays);
    ASSERT_EQ(c.last.round_trips, 1u);
    ASSERT_EQ(c.transport->counters().batches - batches, 1u);  // the k READs were one batch
    ASSERT_EQ(c.last.bytes, kCuckooWays * cfg.bucket_bytes());
  }
  // A miss adds one 8-byte header READ of the relocation counter after the k bucket READs.
  c.prime();
  auto r = c.get(keys[0] ^ 0x5555);
  ASSERT_EQ(r.status, Status::kNotFound);
  EXPECT_EQ(r.chunks, kCuckooWays);
  EXPECT_EQ(c.last.reads, kCuckooWays + 1);
  EXPECT_EQ(c.last.round_trips, 2u);
}

TEST(Cuckoo, SequentialLookupReadsAtMostKBucketsInRandomOrder) {
  for (CuckooStorage storage : {CuckooStorage::kInline, CuckooStorage::kHeap}) {
    auto cfg = CuckooConfig::for_records(2000, 0.85, 1, 4);
    cfg.storage = storage;
    CuckooTable t(cfg);
    const auto keys = distinct_keys(2000, ~0ULL, 6);
    t.server->build(keys);
    SyncClient c(*t.fabric, cfg, CuckooProbe::kSequential, 99);
    c.prime();
    std::set<uint32_t> seen_chunks;
    for (int round = 0; round < 3; ++round) {
      for (uint64_t k : keys) {
        const uint64_t reads = c.transport->counters().reads;
        auto r = c.get(k);
        ASSERT_EQ(r.status, Status::kFound);
        ASSERT_GE(r.chunks, 1u);
        ASSERT_LE(r.chunks, kCuckooWays);
        seen_chunks.insert(r.chunks);
        if (storage == CuckooStorage::kInline) {
          ASSERT_EQ(c.transport->counters().reads - reads, r.chunks);  // every READ was a bucket READ
          ASSERT_EQ(c.last.round_trips, r.chunks);                    // one bucket per round trip
        } else {
          ASSERT_GE(c.last.reads, r.chunks + 1);  // + the heap record(s) whose fingerprint matched
        }
      }
    }
    // The candidate order is random per operation: the same keys are found after 1, 2 or 3 READs.
    EXPECT_EQ(seen_chunks, (std::set<uint32_t>{1, 2, 3})) << to_string(storage);
    for (int i = 0; i < 200; ++i) {
      auto r = c.get(keys[0] + 1000003ULL * (i + 1));
      if (r.status == Status::kFound) continue;
      ASSERT_EQ(r.chunks, kCuckooWays);  // a miss never reads more than k buckets either
      if (storage == CuckooStorage::kInline) {
        ASSERT_EQ(c.last.reads, kCuckooWays + 1);
      }
    }
  }
}

TEST(Cuckoo, LookupCostByLoadFactor) {
  // The numbers the report quotes: bucket READs (chunks), round trips and all READs per lookup.
  std::printf("%-7s %-2s %-5s %-10s | hit: buckets rtts reads | miss: buckets rtts reads\n", "storage", "S", "load",
              "probe");
  struct Case {
    CuckooStorage storage;
    uint32_t slots;
    double load;
  };
  for (const Case& cs : {Case{CuckooStorage::kInline, 4, 0.5}, Case{CuckooStorage::kInline, 4, 0.9},
                         Case{CuckooStorage::kHeap, 4, 0.5}, Case{CuckooStorage::kHeap, 4, 0.9},
                         Case{CuckooStorage::kInline, 1, 0.5}, Case{CuckooStorage::kHeap, 1, 0.5}}) {
    for (CuckooProbe probe : {CuckooProbe::kParallel, CuckooProbe::kSequential}) {
      const CostRun run = measure(cs.storage, cs.slots, cs.load, probe);
      std::printf("%-7s %-2u %-5.2f %-10s |       %7.3f %4.2f %5.2f |        %7.3f %4.2f %5.2f\n",
                  to_string(cs.storage), cs.slots, cs.load, to_string(probe), run.hit.chunks, run.hit.round_trips,
                  run.hit.reads, run.miss.chunks, run.miss.round_trips, run.miss.reads);
      EXPECT_LE(run.max_hit_chunks, kCuckooWays);
      EXPECT_LE(run.max_miss_chunks, kCuckooWays);
      if (probe == CuckooProbe::kParallel) {
        EXPECT_EQ(run.hit.chunks, 3.0);
        EXPECT_EQ(run.hit.round_trips, cs.storage == CuckooStorage::kInline ? 1.0 : 2.0);
      } else {
        EXPECT_LT(run.hit.chunks, 2.5);  // stops at the first hit: about 2 on average
        EXPECT_EQ(run.miss.chunks, 3.0);
      }
    }
  }
}

// --- concurrency ----------------------------------------------------------------------------------

// A value that proves its own integrity: [salt:4][value_for(key, salt)].
std::vector<std::byte> salted(uint64_t key, uint32_t salt, uint32_t vb) {
  std::vector<std::byte> v(vb);
  std::memcpy(v.data(), &salt, 4);
  auto rest = value_for(key, salt, vb - 4);
  std::copy(rest.begin(), rest.end(), v.begin() + 4);
  return v;
}
bool intact(uint64_t key, std::span<const std::byte> v) {
  uint32_t salt;
  std::memcpy(&salt, v.data(), 4);
  auto want = salted(key, salt, static_cast<uint32_t>(v.size()));
  return std::equal(want.begin(), want.end(), v.begin());
}

// The interleaving tests' hook: one node-side write per step. Churn keys come and go (their inserts
// relocate pool keys); pool keys get new values in place. `rng` is the test's own (it also picks
// the keys read).
struct Churn {
  CuckooShard& shard;
  const std::vector<uint64_t>& pool;
  uint32_t value_bytes;
  std::mt19937_64& rng;
  std::vector<uint64_t> in, out;  // churn keys present, absent
  uint32_t salt = 1;
  void step() {
    const uint64_t x = rng();
    if (x % 4 == 0) {
      const uint64_t k = pool[(x >> 8) % pool.size()];
      ASSERT_EQ(shard.update(k, salted(k, salt++, value_bytes)).status, Status::kUpdated);
    } else if ((x % 4 == 1 && !out.empty()) || in.empty()) {
      const size_t j = (x >> 8) % out.size();
      const uint64_t k = out[j];
      if (shard.put(k, salted(k, salt++, value_bytes)).status == Status::kInserted) {
        in.push_back(k);
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(j));
      }
    } else {
      const size_t j = (x >> 8) % in.size();
      ASSERT_EQ(shard.erase(in[j]).status, Status::kErased);
      out.push_back(in[j]);
      in.erase(in.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
};

class CuckooRace : public testing::TestWithParam<std::pair<CuckooStorage, CuckooProbe>> {};

TEST_P(CuckooRace, WritersRelocateWhileReadersNeverMissOrTear) {
  CuckooConfig c;
  c.storage = GetParam().first;
  c.memory_nodes = 2;
  c.slots_per_bucket = 4;
  c.key_bytes = 8;
  c.value_bytes = 40;
  c.buckets_per_node = 400;  // 2800 + up to 64 churn keys in 3200 slots: load ≈ 0.9, many relocations
  CuckooTable t(c);
  const auto all = distinct_keys(2800 + 64, ~0ULL, 21);
  const std::vector<uint64_t> pool(all.begin(), all.begin() + 2800);
  const std::vector<uint64_t> churn(all.begin() + 2800, all.end());
  std::vector<std::atomic<uint8_t>> done(pool.size());  // set once find_or_put returned for the key
  // Every thread waits at a start line so that readers really overlap the writers, and the churn
  // thread keeps relocating pool keys until every reader has done its lookups.
  constexpr int kThreads = 3 + 1 + 2;
  constexpr uint64_t kMinLookups = 20000;
  std::atomic<int> ready{0}, writers_left{3}, readers_left{2};
  auto start_line = [&] {
    ++ready;
    while (ready.load() < kThreads) std::this_thread::yield();
  };
  std::atomic<uint64_t> inserted{0}, found{0}, other{0}, missed{0}, torn{0}, lookups{0}, updates{0};

  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      SyncClient cl(*t.fabric, c, CuckooProbe::kParallel);
      std::vector<size_t> idx(pool.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::shuffle(idx.begin(), idx.end(), std::mt19937_64(300 + w));
      start_line();
      for (size_t i : idx) {
        auto r = cl.find_or_put(pool[i], salted(pool[i], 0, c.value_bytes));
        if (r.status == Status::kInserted) ++inserted;
        else if (r.status == Status::kFound) ++found;
        else ++other;
        done[i].store(1, std::memory_order_release);
      }
      --writers_left;
    });
  }
  // Updates present keys and churns a separate key set (insert, erase), so records move, change and
  // disappear under the readers' feet.
  threads.emplace_back([&] {
    SyncClient cl(*t.fabric, c, CuckooProbe::kParallel);
    std::mt19937_64 rng(8);
    start_line();
    // Also until it has updated some keys itself: a loaded machine may start it after every other
    // thread finished (a CI run saw 0 updates); once the writers are done every key qualifies.
    for (uint32_t salt = 1; writers_left.load() > 0 || readers_left.load() > 0 || updates.load() < 100; ++salt) {
      const size_t i = rng() % pool.size();
      if (done[i].load(std::memory_order_acquire)) {
        if (cl.update(pool[i], salted(pool[i], salt, c.value_bytes)).status != Status::kUpdated) ++other;
        ++updates;
      }
      const uint64_t k = churn[rng() % churn.size()];
      if (rng() % 2) (void)cl.put(k, salted(k, salt, c.value_bytes));
      else (void)cl.erase(k);
    }
  });
  for (int rd = 0; rd < 2; ++rd) {
    threads.emplace_back([&, rd] {
      SyncClient cl(*t.fabric, c, GetParam().second, 500 + rd);
      std::mt19937_64 rng(600 + rd);
      std::vector<std::byte> out(c.value_bytes);
      start_line();
      for (uint64_t n = 0; writers_left.load() > 0 || n < kMinLookups; ++n) {
        const size_t i = rng() % pool.size();
        const bool must_find = done[i].load(std::memory_order_acquire);  // inserted before this lookup
        auto r = cl.get(pool[i], out);
        ++lookups;
        if (r.status == Status::kFound) {
          if (!intact(pool[i], out)) ++torn;
        } else if (must_find) {
          ++missed;
        }
      }
      --readers_left;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(other.load(), 0u);
  EXPECT_EQ(inserted.load(), pool.size());  // total inserted == distinct keys
  EXPECT_EQ(inserted.load() + found.load(), 3 * pool.size());
  EXPECT_EQ(missed.load(), 0u) << "a reader missed a key inserted before its lookup";
  EXPECT_EQ(torn.load(), 0u) << "a reader returned a torn value";
  EXPECT_GE(lookups.load(), 2 * kMinLookups);
  EXPECT_GT(updates.load(), 0u);
  const CuckooShardStats st = t.server->stats();
  EXPECT_GT(st.relocating_inserts, 50u) << "the race should cover relocations";
  // Every pool key is present exactly once with an intact value.
  auto keys = t.all_keys();
  std::unordered_set<uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size());
  SyncClient cl(*t.fabric, c, CuckooProbe::kSequential);
  std::vector<std::byte> out(c.value_bytes);
  for (uint64_t k : pool) {
    ASSERT_TRUE(distinct.count(k));
    ASSERT_EQ(cl.get(k, out).status, Status::kFound);
    ASSERT_TRUE(intact(k, out));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CuckooRace,
                         testing::Values(std::pair{CuckooStorage::kInline, CuckooProbe::kParallel},
                                         std::pair{CuckooStorage::kInline, CuckooProbe::kSequential},
                                         std::pair{CuckooStorage::kHeap, CuckooProbe::kParallel},
                                         std::pair{CuckooStorage::kHeap, CuckooProbe::kSequential}),
                         [](const auto& i) {
                           return std::string(to_string(i.param.first)) + "_" + to_string(i.param.second);
                         });

// The threaded race above depends on the scheduler to interleave; this one forces the worst
// interleavings a NIC allows, deterministically, on one thread: its transport runs node-side writes
// (relocating inserts, erases, in-place updates) between the requests of a batch and between the
// 8-byte words of every READ (a multi-word READ is not atomic): test::InterleavingTransport.
class CuckooInterleaving : public testing::TestWithParam<std::tuple<CuckooStorage, uint32_t, CuckooProbe>> {};

TEST_P(CuckooInterleaving, RelocationsBetweenReadsNeverHideOrTearAKey) {
  const auto [storage, slots, probe] = GetParam();
  CuckooConfig c;
  c.storage = storage;
  c.slots_per_bucket = slots;
  c.value_bytes = 40;
  c.buckets_per_node = slots == 4 ? 150 : 600;  // 600 slots
  const size_t base = slots == 4 ? 540 : 420;    // load 0.9 (S=4) or 0.7 (S=1) before the churn
  CuckooTable t(c);
  const auto all = distinct_keys(base + 200, ~0ULL, 41);
  const std::vector<uint64_t> pool(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(base));
  std::vector<std::byte> values;
  for (uint64_t k : pool) {
    auto v = salted(k, 0, c.value_bytes);
    values.insert(values.end(), v.begin(), v.end());
  }
  t.server->build(pool, values);
  CuckooShard& shard = t.server->shard(0);

  std::mt19937_64 rng(7);
  Churn churn{shard, pool, c.value_bytes, rng, {}, {all.begin() + static_cast<std::ptrdiff_t>(base), all.end()}};
  auto transport = std::make_unique<InterleavingTransport>(t.fabric->connect(), [&] { churn.step(); });
  Engine engine(*transport);
  CuckooClient client(c, probe, engine, 3);
  const uint64_t paths_before = shard.stats().relocating_inserts;
  std::vector<std::byte> out(c.value_bytes);
  uint64_t missed = 0, torn = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t k = pool[rng() % pool.size()];
    const OpResult r = engine.run(client.get(k, out));
    if (r.status != Status::kFound) ++missed;
    else if (!intact(k, out)) ++torn;
  }
  EXPECT_EQ(missed, 0u) << "a present key was reported absent while it was being relocated";
  EXPECT_EQ(torn, 0u) << "a torn value was returned";
  EXPECT_GT(shard.stats().relocating_inserts - paths_before, 100u) << "relocations must overlap the lookups";
}

INSTANTIATE_TEST_SUITE_P(Modes, CuckooInterleaving,
                         testing::Combine(testing::Values(CuckooStorage::kInline, CuckooStorage::kHeap),
                                          testing::Values(4u, 1u),
                                          testing::Values(CuckooProbe::kParallel, CuckooProbe::kSequential)),
                         [](const auto& i) {
                           return std::string(to_string(std::get<0>(i.param))) + "_s" +
                                  std::to_string(std::get<1>(i.param)) + "_" + to_string(std::get<2>(i.param));
                         });

// --- builds and full tables ------------------------------------------------------------------------

TEST(Cuckoo, FourSlotBucketsBuildToNinetyPercent) {
  for (CuckooStorage storage : {CuckooStorage::kInline, CuckooStorage::kHeap}) {
    auto cfg = CuckooConfig::for_records(20000, 0.9, 2, 4);
    cfg.storage = storage;
    cfg.value_bytes = 16;
    CuckooTable t(cfg);
    const auto keys = distinct_keys(20000, ~0ULL, 31);
    std::vector<std::byte> values;
    for (uint64_t k : keys) {
      auto v = value_for(k, 1, 16);
      values.insert(values.end(), v.begin(), v.end());
    }
    ASSERT_EQ(t.server->build(keys, values), keys.size());
    EXPECT_NEAR(t.server->load_factor(), 0.9, 0.001);
    EXPECT_GT(t.server->stats().relocating_inserts, 0u);
    SyncClient c(*t.fabric, cfg, CuckooProbe::kParallel);
    std::vector<std::byte> out(16);
    for (size_t i = 0; i < keys.size(); i += 7) {
      ASSERT_EQ(c.get(keys[i], out).status, Status::kFound);
      ASSERT_EQ(out, value_for(keys[i], 1, 16));
    }
    // The header records what was loaded; a client checks it before use.
    auto h = c.engine.run(c.client.read_header(1));
    EXPECT_EQ(h.records, t.server->shard(1).records());
    EXPECT_EQ(h.buckets, cfg.buckets_per_node);
    EXPECT_EQ(h.moves % 2, 0u);
  }
}

TEST(Cuckoo, OneSlotBucketsFailCleanlyAtNinetyFivePercent) {
  auto cfg = CuckooConfig::for_records(20000, 0.95, 1, 1);
  CuckooTable t(cfg);
  const auto keys = distinct_keys(20000, ~0ULL, 32);
  std::string message;
  try {
    t.server->build(keys);
    FAIL() << "a 1-slot 3-way cuckoo table cannot be built to 0.95";
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  // "cuckoo build failed: reached load factor 0.9xxx of the 0.9500 requested (...)"
  const auto at = message.find("reached load factor ");
  ASSERT_NE(at, std::string::npos) << message;
  const double reached = std::stod(message.substr(at + 20));
  EXPECT_GT(reached, 0.5) << message;
  EXPECT_LT(reached, 0.95) << message;
  EXPECT_NE(message.find("0.9500 requested"), std::string::npos) << message;
  // Nothing placed before the failure was lost.
  const uint64_t placed = t.server->records();
  EXPECT_NEAR(static_cast<double>(placed) / cfg.slots_per_node(), reached, 1e-4);
  SyncClient c(*t.fabric, cfg, CuckooProbe::kSequential);
  for (uint64_t i = 0; i < placed; ++i) ASSERT_EQ(c.get(keys[i]).status, Status::kFound) << i;
  EXPECT_EQ(c.get(keys[placed]).status, Status::kNotFound);
}

TEST(Cuckoo, OnlineInsertReportsFullAndKeepsEverything) {
  CuckooConfig cfg;
  cfg.slots_per_bucket = 1;
  cfg.buckets_per_node = 64;
  cfg.value_bytes = 8;
  cfg.max_displacements = 40;
  CuckooTable t(cfg);
  SyncClient c(*t.fabric, cfg, CuckooProbe::kParallel);
  std::unordered_set<uint64_t> in;
  uint64_t full = 0;
  for (uint64_t k = 1; k <= 200; ++k) {
    const auto before = t.all_keys();
    auto r = c.find_or_put(k, value_for(k, 0, 8));
    if (r.status == Status::kInserted) {
      in.insert(k);
    } else {
      ASSERT_EQ(r.status, Status::kFull);
      ++full;
      auto after = t.all_keys();
      ASSERT_EQ(std::multiset<uint64_t>(before.begin(), before.end()),
                std::multiset<uint64_t>(after.begin(), after.end()))
          << "a failed insert changed the table";
      EXPECT_EQ(c.get(k).status, Status::kNotFound);
    }
  }
  EXPECT_GT(full, 0u);
  EXPECT_LE(in.size(), 64u);
  std::vector<std::byte> out(8);
  for (uint64_t k : in) {
    ASSERT_EQ(c.get(k, out).status, Status::kFound);
    EXPECT_EQ(out, value_for(k, 0, 8));
  }
  EXPECT_EQ(t.server->stats().full, full);
}

// --- bad input -------------------------------------------------------------------------------------

TEST(Cuckoo, BadKeysValuesAndConfigsAreRejected) {
  CuckooConfig cfg;
  cfg.key_bytes = 4;
  cfg.value_bytes = 8;
  CuckooTable t(cfg);
  SyncClient c(*t.fabric, cfg, CuckooProbe::kParallel);
  const std::vector<std::byte> v8(8), v9(9), v3(3);
  EXPECT_THROW(c.find_or_put(1ULL << 32, v8), InvalidArgument);
  EXPECT_THROW(c.get(1ULL << 32), InvalidArgument);
  EXPECT_THROW(c.erase(1ULL << 40), InvalidArgument);
  EXPECT_THROW(c.put(1, v9), InvalidArgument);
  EXPECT_THROW(c.put(1, v3), InvalidArgument);
  EXPECT_THROW(c.update(1, v3), InvalidArgument);
  EXPECT_THROW(c.find_or_put(1, v9), InvalidArgument);
  EXPECT_EQ(c.transport->counters().batches, 0u) << "no request was issued for bad input";
  EXPECT_EQ(c.get(1).status, Status::kNotFound);
  EXPECT_THROW(t.server->build(std::vector<uint64_t>{1, 2, 1ULL << 33}), InvalidArgument);
  EXPECT_EQ(t.server->records(), 0u) << "nothing of the bad build was stored";
  EXPECT_THROW(t.server->bulk_insert(5, v3), InvalidArgument);
  EXPECT_THROW(t.server->shard(1), InvalidArgument);
  // The shard's own entry points refuse a key wider than 4 bytes too (not "another shard's key").
  EXPECT_THROW(t.server->shard(0).bulk_insert(1ULL << 33, v8), InvalidArgument);
  EXPECT_THROW(t.server->shard(0).find_or_put(1ULL << 33, v8), InvalidArgument);

  auto bad = [&](auto edit) {
    CuckooConfig b = cfg;
    edit(b);
    return b;
  };
  EXPECT_THROW(bad([](CuckooConfig& b) { b.slots_per_bucket = 2; }).validate(), InvalidArgument);
  EXPECT_THROW(bad([](CuckooConfig& b) { b.key_bytes = 5; }).validate(), InvalidArgument);
  EXPECT_THROW(bad([](CuckooConfig& b) { b.value_bytes = 121; }).validate(), InvalidArgument);
  EXPECT_THROW(bad([](CuckooConfig& b) { b.storage = CuckooStorage::kHeap; b.value_bytes = 4097; }).validate(),
               InvalidArgument);
  EXPECT_NO_THROW(bad([](CuckooConfig& b) { b.storage = CuckooStorage::kHeap; b.value_bytes = 4096; }).validate());
  EXPECT_THROW(bad([](CuckooConfig& b) { b.buckets_per_node = 2; }).validate(), InvalidArgument);
  EXPECT_THROW(bad([](CuckooConfig& b) { b.memory_nodes = 0; }).validate(), InvalidArgument);
  EXPECT_THROW(bad([](CuckooConfig& b) { b.max_displacements = 0; }).validate(), InvalidArgument);
  EXPECT_THROW(bad([](CuckooConfig& b) { b.storage = static_cast<CuckooStorage>(7); }).validate(), InvalidArgument);
  EXPECT_THROW(CuckooConfig::for_records(100, 1.0, 1), InvalidArgument);
  EXPECT_THROW(CuckooConfig::for_records(0, 0.5, 1), InvalidArgument);
  EXPECT_THROW(CuckooConfig::for_records(100, 0.5, 0), InvalidArgument);
  EXPECT_THROW(CuckooConfig::for_records(100, 0.5, 1, 3), InvalidArgument);
  EXPECT_THROW((void)CuckooClient(cfg, CuckooProbe::kParallel, c.engine, 1, 0x0B00), InvalidArgument);
  EXPECT_THROW((void)CuckooServer(*t.fabric, cfg, 0x0D00), InvalidArgument);
  CuckooConfig two = cfg;
  two.memory_nodes = 2;
  EXPECT_THROW((void)CuckooServer(*t.fabric, two), InvalidArgument) << "more shards than memory nodes";
  auto small = make_local_fabric({cfg.region_bytes() - 8});
  EXPECT_THROW((void)CuckooServer(*small, cfg), InvalidArgument) << "region smaller than the shard";

  // A client whose configuration differs from the table's is refused by the node and by the header.
  CuckooConfig other = cfg;
  other.hash_seed ^= 1;
  SyncClient o(*t.fabric, other, CuckooProbe::kParallel);
  EXPECT_THROW(o.find_or_put(1, v8), InvalidArgument);
  EXPECT_THROW(o.engine.run(o.client.read_header(0)), InvalidArgument);
  // A region that holds no cuckoo shard.
  auto blank = make_local_fabric({cfg.region_bytes()});
  SyncClient b(*blank, cfg, CuckooProbe::kParallel);
  EXPECT_THROW(b.engine.run(b.client.read_header(0)), FabricError);
}


// --- multi-get (CuckooClient::get_batch) -------------------------------------------------------------

using Answer = test::GetAnswer;
using Recorder = test::GetRecorder;

// A multi-get's answers and costs, key by key: answer, value, chunks, round trips, READs, bytes.
struct BatchAnswers {
  std::vector<std::optional<Answer>> got;
  std::vector<OpStats> cost;
  std::vector<std::exception_ptr> error;
};
BatchAnswers multi_get(CuckooClient& client, const std::vector<uint64_t>& keys, uint32_t depth, uint32_t vb) {
  BatchAnswers a;
  a.got.resize(keys.size());
  a.cost.resize(keys.size());
  a.error.resize(keys.size());
  std::vector<int> calls(keys.size(), 0);
  Recorder rec;
  const bool has = client.get_batch(keys.size(), depth, [&](uint64_t i) { return keys[i]; }, vb, rec,
                                    [&](const Engine::Completion& c) {
                                      ++calls.at(c.index);
                                      a.got[c.index] = std::move(rec.last);
                                      rec.last.reset();
                                      a.cost[c.index] = c.stats;
                                      a.error[c.index] = c.error;
                                    });
  EXPECT_TRUE(has);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(calls[i], 1) << "key index " << i << ": done once per key";
  return a;
}

class CuckooMultiGet : public testing::TestWithParam<std::tuple<uint32_t, uint32_t, uint32_t>> {};

// Against the oracle (a std::unordered_map) and against the same client's get of the same key
// (the relocation counter cached, as after the first round trip): the same answer, value, chunks,
// round trips, READs and bytes, for present keys and absent ones (get's miss check: 2 round trips).
TEST_P(CuckooMultiGet, AnswersAndCostsAreGets) {
  const auto [slots, nodes, vb] = GetParam();
  CuckooConfig c;
  c.slots_per_bucket = slots;
  c.memory_nodes = nodes;
  c.value_bytes = vb;
  c.buckets_per_node = slots == 4 ? 128 : 512;
  CuckooTable t(c);
  const auto all = distinct_keys(1200, ~0ULL, 5);
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  SyncClient loader(*t.fabric, c, CuckooProbe::kParallel);
  const size_t target = size_t{c.buckets_per_node} * slots * nodes * (slots == 4 ? 85 : 45) / 100;
  for (uint64_t k : all) {
    if (oracle.size() == target) break;
    auto v = value_for(k, 2, vb);
    if (loader.find_or_put(k, v).status == Status::kInserted) oracle.emplace(k, std::move(v));
  }
  ASSERT_EQ(oracle.size(), target);
  SyncClient s(*t.fabric, c, CuckooProbe::kParallel);
  s.prime();
  std::mt19937_64 rng(9);
  uint64_t misses = 0, hits = 0;
  for (const uint32_t depth : {1u, 5u, 64u}) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 64; ++i) keys.push_back(all[rng() % all.size()]);  // ~40 % absent
    for (const uint32_t want_vb : {vb, vb / 2}) {  // the table's size, and a cut value
      const BatchAnswers a = multi_get(s.client, keys, depth, want_vb);
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_FALSE(a.error[i]);
        ASSERT_TRUE(a.got[i].has_value()) << "on_get must come before done";
        const auto it = oracle.find(keys[i]);
        if (it == oracle.end()) {
          EXPECT_EQ(a.got[i]->r.status, Status::kNotFound);
          EXPECT_TRUE(a.got[i]->value.empty());
          ++misses;
        } else {
          ASSERT_EQ(a.got[i]->r.status, Status::kFound) << keys[i];
          EXPECT_EQ(a.got[i]->value, std::vector<std::byte>(it->second.begin(), it->second.begin() + want_vb));
          ++hits;
        }
        std::vector<std::byte> out(want_vb);
        const OpResult alone = s.get(keys[i], out);
        EXPECT_EQ(alone.status, a.got[i]->r.status);
        EXPECT_EQ(alone.chunks, a.got[i]->r.chunks) << keys[i];
        EXPECT_EQ(s.last.round_trips, a.cost[i].round_trips) << keys[i];
        EXPECT_EQ(s.last.reads, a.cost[i].reads) << keys[i];
        EXPECT_EQ(s.last.bytes, a.cost[i].bytes) << keys[i];
        EXPECT_EQ(a.cost[i].writes + a.cost[i].cas + a.cost[i].faa + a.cost[i].rpcs, 0u);
      }
    }
  }
  EXPECT_GT(misses, 50u);
  EXPECT_GT(hits, 50u);
  // Heap storage and sequential probing have none (false, nothing done).
  Recorder rec;
  CuckooClient seq(c, CuckooProbe::kSequential, s.engine);
  EXPECT_FALSE(seq.get_batch(all, vb, rec, [](const Engine::Completion&) { ADD_FAILURE(); }));
  CuckooConfig heap = c;
  heap.storage = CuckooStorage::kHeap;
  CuckooClient on_heap(heap, CuckooProbe::kParallel, s.engine);
  const uint64_t batches = s.transport->counters().batches;
  EXPECT_FALSE(on_heap.get_batch(all, vb, rec, [](const Engine::Completion&) { ADD_FAILURE(); }));
  EXPECT_EQ(s.transport->counters().batches, batches);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CuckooMultiGet,
                         testing::Values(std::make_tuple(4u, 1u, 8u), std::make_tuple(4u, 2u, 40u),
                                         std::make_tuple(1u, 2u, 8u)),
                         [](const auto& i) {
                           return "s" + std::to_string(std::get<0>(i.param)) + "_n" + std::to_string(std::get<1>(i.param)) +
                                  "_v" + std::to_string(std::get<2>(i.param));
                         });

// Relocations land inside the READs of a multi-get (as in CuckooInterleaving): a present key is
// never reported absent and never torn. (Misses that overlap a relocation are rare here; the next
// test makes one happen.)
TEST(CuckooMultiGetRace, RelocationsBetweenReadsNeverHideOrTearAKey) {
  CuckooConfig c;
  c.value_bytes = 40;
  c.buckets_per_node = 150;  // 600 slots, load 0.9 before the churn
  CuckooTable t(c);
  const auto all = distinct_keys(740, ~0ULL, 41);
  const std::vector<uint64_t> pool(all.begin(), all.begin() + 540);
  std::vector<std::byte> values;
  for (uint64_t k : pool) {
    auto v = salted(k, 0, c.value_bytes);
    values.insert(values.end(), v.begin(), v.end());
  }
  t.server->build(pool, values);
  CuckooShard& shard = t.server->shard(0);
  std::mt19937_64 rng(7);
  Churn churn{shard, pool, c.value_bytes, rng, {}, {all.begin() + 540, all.end()}};
  auto transport = std::make_unique<test::InterleavingTransport>(t.fabric->connect(), [&] { churn.step(); });
  Engine engine(*transport);
  CuckooClient client(c, CuckooProbe::kParallel, engine, 3);
  const uint64_t paths_before = shard.stats().relocating_inserts;
  uint64_t missed = 0, torn = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 64; ++i) keys.push_back(pool[rng() % pool.size()]);
    const BatchAnswers a = multi_get(client, keys, 16, c.value_bytes);
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_FALSE(a.error[i]);
      ASSERT_TRUE(a.got[i].has_value());
      if (a.got[i]->r.status != Status::kFound) ++missed;
      else if (!intact(keys[i], a.got[i]->value)) ++torn;
    }
  }
  EXPECT_EQ(missed, 0u) << "a present key was reported absent while it was being relocated";
  EXPECT_EQ(torn, 0u) << "a torn value was returned";
  EXPECT_GT(shard.stats().relocating_inserts - paths_before, 100u) << "relocations must overlap the lookups";
}

// The ctrl word of `key`'s record (8-byte keys, inline), found in node 0's buckets, or null.
uint64_t* cuckoo_ctrl_of(CuckooTable& t, uint64_t key) {
  const uint32_t rb = t.cfg.record_bytes();
  std::span<std::byte> region = t.fabric->local_region(0);
  for (uint64_t off = 64; off + rb <= 64 + uint64_t{t.cfg.buckets_per_node} * t.cfg.bucket_bytes(); off += rb) {
    uint64_t ctrl, k;
    std::memcpy(&ctrl, region.data() + off, 8);
    std::memcpy(&k, region.data() + off + 8, 8);
    if ((ctrl & record::kOcc) && k == key) return reinterpret_cast<uint64_t*>(region.data() + off);
  }
  return nullptr;
}

// A miss that overlapped a relocation (forced): key X is invisible to the batch's bucket READs
// while the shard's `moves` advances (X moved into a bucket already read, then back), and visible
// again after that batch. The multi-get must not trust that miss (get's miss check): X is found by
// get's next attempt, at get's own cost under the same interference.
TEST(CuckooMultiGetRace, MissThatOverlapsAMoveGoesOnAsGet) {
  CuckooConfig c;
  c.buckets_per_node = 64;
  CuckooTable t(c);
  const auto keys = distinct_keys(60, ~0ULL, 13);
  {
    SyncClient s(*t.fabric, c, CuckooProbe::kParallel);
    for (uint64_t k : keys) ASSERT_EQ(s.find_or_put(k, value_for(k, 1, c.value_bytes)).status, Status::kInserted);
  }
  const uint64_t x = keys[17];
  std::byte* rec = reinterpret_cast<std::byte*>(cuckoo_ctrl_of(t, x));
  ASSERT_NE(rec, nullptr);
  std::byte* moves = t.fabric->local_region(0).data() + kCuckooMovesOffset;
  const uint32_t rb = c.record_bytes();
  auto run = [&](bool batch) {
    std::vector<std::byte> saved;  // X's record while hidden
    bool armed = false;
    uint64_t hidden_in = 0;
    Transport* self = nullptr;
    test::FaultTransport ft(t.fabric->connect(), {}, [&](const Request& r, uint64_t) {
      const uint64_t now = self->counters().batches;
      if (!saved.empty() && now != hidden_in) {  // the batch after the hidden one: X is back
        std::copy(saved.begin(), saved.end(), rec);
        saved.clear();
      }
      if (armed && r.kind == ReqKind::kRead && r.len > 8) {  // the first bucket READ
        armed = false;
        hidden_in = now;
        saved.assign(rec, rec + rb);
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(rec)).store(0);  // not OCC: X is not here
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(moves)).fetch_add(2);  // a move began and ended
      }
    });
    self = &ft;
    Engine e(ft);
    CuckooClient client(c, CuckooProbe::kParallel, e);
    for (uint32_t n = 0; n < c.memory_nodes; ++n) (void)e.run(client.read_header(n));  // "before" cached
    armed = true;
    std::pair<OpResult, OpStats> out;
    if (batch) {
      const BatchAnswers a = multi_get(client, {x}, 1, c.value_bytes);
      EXPECT_FALSE(a.error[0]);
      out = {a.got[0]->r, a.cost[0]};
      if (a.got[0]->r.status == Status::kFound) {
        EXPECT_EQ(a.got[0]->value, value_for(x, 1, c.value_bytes));
      }
    } else {
      std::vector<std::byte> v(c.value_bytes);
      OpStats st;
      out = {e.run(client.get(x, v), &st), st};
    }
    EXPECT_TRUE(saved.empty()) << "X must be back";
    EXPECT_FALSE(armed);
    return out;
  };
  const auto [gr, gs] = run(false);
  const auto [br, bs] = run(true);
  ASSERT_EQ(gr.status, Status::kFound) << "get itself must not trust the miss";
  ASSERT_EQ(br.status, Status::kFound) << "a multi-get trusted a miss that overlapped a relocation";
  EXPECT_EQ(gs.round_trips, 3u);  // buckets (X hidden), moves (changed), buckets (X found)
  EXPECT_EQ(bs.round_trips, gs.round_trips);
  EXPECT_EQ(bs.reads, gs.reads);
  EXPECT_EQ(bs.bytes, gs.bytes);
  EXPECT_EQ(br.chunks, gr.chunks);
}

// A record left locked (a writer mid-update) fails its own key once the retry budget ends, never
// answered as absent; the other keys are answered. Unlocked, all are.
TEST(CuckooMultiGetFaults, LockedRecordFailsOnlyItsKey) {
  CuckooConfig c;
  c.buckets_per_node = 64;
  c.retry_budget = std::chrono::milliseconds(2);
  CuckooTable t(c);
  const auto keys = distinct_keys(100, ~0ULL, 3);
  SyncClient s(*t.fabric, c, CuckooProbe::kParallel);
  for (uint64_t k : keys) ASSERT_EQ(s.find_or_put(k, value_for(k, 1, c.value_bytes)).status, Status::kInserted);
  uint64_t* ctrl = cuckoo_ctrl_of(t, keys[7]);
  ASSERT_NE(ctrl, nullptr);
  s.prime();  // the miss check's "before" cached: a locked record taken for a miss would be trusted
  std::atomic_ref<uint64_t>(*ctrl).fetch_or(record::kLock);
  BatchAnswers a = multi_get(s.client, keys, 16, c.value_bytes);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 7) {
      ASSERT_TRUE(a.error[i]) << "a locked record must not be answered";
      EXPECT_THROW(std::rethrow_exception(a.error[i]), RetryBudgetExceeded);
      continue;
    }
    ASSERT_FALSE(a.error[i]) << i;
    ASSERT_EQ(a.got[i]->r.status, Status::kFound) << i;
    EXPECT_EQ(a.got[i]->value, value_for(keys[i], 1, c.value_bytes));
  }
  std::atomic_ref<uint64_t>(*ctrl).fetch_and(~record::kLock);
  a = multi_get(s.client, keys, 16, c.value_bytes);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_FALSE(a.error[i]) << i;
    EXPECT_EQ(a.got[i]->r.status, Status::kFound) << i;
  }
}

// A memory node whose READs fail fails only the keys it holds; a bad key fails alone; done cannot
// start another multi-get.
TEST(CuckooMultiGetFaults, FailedReadsBadKeysAndReentry) {
  CuckooConfig c;
  c.memory_nodes = 2;
  c.key_bytes = 4;
  c.buckets_per_node = 64;
  CuckooTable t(c);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 80; ++k) keys.push_back(k * 7919);
  {
    SyncClient s(*t.fabric, c, CuckooProbe::kParallel);
    for (uint64_t k : keys) ASSERT_EQ(s.find_or_put(k, value_for(k, 1, c.value_bytes)).status, Status::kInserted);
  }
  keys.push_back(1ULL << 40);  // does not fit 4 key bytes
  // Node 1's READs land, then are reported failed (fabric.h allows it): a buffer of a failed READ
  // holds the real bucket, so answering from it would be a hit rather than the failure.
  struct LandedButFailed final : Transport {
    std::unique_ptr<Transport> inner;
    void execute(std::span<Request> batch) override {
      inner->execute(batch);
      bool failed = false;
      for (Request& r : batch)
        if (r.addr.node == 1) r.status = ReqStatus::kFailed, failed = true;
      if (failed) throw FabricError("node 1: injected failure after the READ landed");
    }
  } ft;
  ft.inner = t.fabric->connect();
  Engine e(ft);
  CuckooClient client(c, CuckooProbe::kParallel, e);
  const BatchAnswers a = multi_get(client, keys, 16, c.value_bytes);
  size_t on1 = 0;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    const bool fails = cuckoo_place(c, keys[i]).node == 1;
    on1 += fails;
    if (fails) {
      ASSERT_TRUE(a.error[i]) << keys[i];
      EXPECT_THROW(std::rethrow_exception(a.error[i]), FabricError);
    } else {
      ASSERT_FALSE(a.error[i]) << keys[i];
      EXPECT_EQ(a.got[i]->r.status, Status::kFound);
      EXPECT_EQ(a.got[i]->value, value_for(keys[i], 1, c.value_bytes));
    }
  }
  EXPECT_GT(on1, 0u);
  EXPECT_LT(on1, keys.size() - 1);
  ASSERT_TRUE(a.error.back());
  EXPECT_THROW(std::rethrow_exception(a.error.back()), InvalidArgument);
  // get itself: a bad key fails its own task, not the run_many around it.
  std::vector<std::exception_ptr> errs(2);
  e.run_many(
      2, 2, [&](uint64_t i) -> Task<void> { co_await client.get(i == 0 ? keys[0] : keys.back(), {}); },
      [&](const Engine::Completion& comp) { errs[comp.index] = comp.error; });
  EXPECT_EQ(static_cast<bool>(errs[0]), cuckoo_place(c, keys[0]).node == 1);
  ASSERT_TRUE(errs[1]);
  EXPECT_THROW(std::rethrow_exception(errs[1]), InvalidArgument);
  Recorder rec;
  EXPECT_THROW((void)client.get_batch(keys.size(), 4, [&](uint64_t i) { return keys[i]; }, c.value_bytes, rec,
                                      [&](const Engine::Completion&) {
                                        (void)client.get_batch(1, 1, [](uint64_t) { return 5; }, c.value_bytes, rec,
                                                               [](const Engine::Completion&) {});
                                      }),
               std::logic_error);
}

}  // namespace
}  // namespace rdmahash
