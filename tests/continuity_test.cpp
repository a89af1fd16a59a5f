// Continuity hashing on LocalFabric: layout (eqs. 1-3), one READ per lookup, persists per op,
// conformance against std::unordered_map, readers racing the node's writes (forced interleavings
// and threads), bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "rdmahash/continuity.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::InterleavingTransport;
using test::value_for;

struct ContTable {
  ContinuityConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<ContinuityServer> server;
  explicit ContTable(const ContinuityConfig& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    server = std::make_unique<ContinuityServer>(*fabric, c);
  }
};

struct SyncClient {
  std::unique_ptr<Transport> transport;
  Engine engine;
  ContinuityClient client;
  OpStats last;
  SyncClient(Fabric& f, const ContinuityConfig& c) : transport(f.connect()), engine(*transport), client(c, engine) {}
  OpResult run(Task<OpResult> t) {
    last = {};
    return engine.run(std::move(t), &last);
  }
};

std::vector<uint64_t> distinct_keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> keys;
  while (keys.size() < n)
    if (uint64_t k = rng(); seen.insert(k).second) keys.push_back(k);
  return keys;
}

TEST(ContinuityLayout, SegmentOffsetsFollowEquationsTwoAndThree) {
  ContinuityConfig c;
  c.buckets_per_node = 10;
  c.sbuckets = 3;
  c.value_bytes = 8;
  // slot = ctrl + key + value + check = 32 B; bucket = 128 B; pair = 2·128 + 8 + 3·128 = 648 B.
  EXPECT_EQ(c.slot_bytes(), 32u);
  EXPECT_EQ(c.pair_bytes(), 648u);
  EXPECT_EQ(c.segment_bytes(), 128u + 8u + 384u);
  EXPECT_EQ(c.pair_slots(), 20u);  // the 20-bit indicator of seed 002 Fig. 1
  for (uint64_t k = 0; k < 2000; ++k) {
    const ContinuityPlacement p = continuity_place(c, k);
    ASSERT_LT(p.bucket, 10u);
    const uint64_t size_se = c.segment_bytes(), size_bu = c.bucket_bytes();
    const uint64_t want = p.bucket % 2 == 0 ? p.bucket / 2 * (size_se + size_bu)
                                            : (p.bucket - 1) / 2 * (size_se + size_bu) + size_bu;
    ASSERT_EQ(p.segment_offset, c.table_offset(0) + want);
    ASSERT_LE(p.segment_offset + c.segment_bytes(), c.region_bytes());
  }
}

TEST(ContinuityConfig, BadGeometryIsRejected) {
  ContinuityConfig c;
  c.buckets_per_node = 7;
  EXPECT_THROW(c.validate(), InvalidArgument);
  c.buckets_per_node = 8;
  c.sbuckets = 5;
  EXPECT_THROW(c.validate(), InvalidArgument);
  c.sbuckets = 0;
  EXPECT_THROW(c.validate(), InvalidArgument);
  c.sbuckets = 3;
  c.value_bytes = 121;
  EXPECT_THROW(c.validate(), InvalidArgument);
  EXPECT_THROW(ContinuityConfig::for_records(10, 1.5, 1), InvalidArgument);
}

TEST(Continuity, LookupIsOneReadAndWritesPersistTwoTwoOne) {
  ContinuityConfig c;
  c.buckets_per_node = 64;
  c.value_bytes = 16;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  const auto keys = distinct_keys(300, 3);
  for (uint64_t k : keys) {
    const OpResult r = cl.run(cl.client.find_or_put(k, value_for(k, 0, 16)));
    if (r.status == Status::kFull) continue;
    ASSERT_EQ(r.status, Status::kInserted);
    EXPECT_EQ(r.persists, 2u);
  }
  std::vector<std::byte> out(16);
  for (uint64_t k : keys) {
    const OpResult r = cl.run(cl.client.get(k, out));
    EXPECT_EQ(cl.last.round_trips, 1u);
    EXPECT_EQ(cl.last.reads, 1u);
    EXPECT_EQ(cl.last.bytes, c.segment_bytes());
    if (r.status == Status::kFound) {
      EXPECT_EQ(out, value_for(k, 0, 16));
      const OpResult u = cl.run(cl.client.update(k, value_for(k, 1, 16)));
      if (u.status == Status::kUpdated) { EXPECT_EQ(u.persists, 2u); }
      const OpResult e = cl.run(cl.client.erase(k));
      EXPECT_EQ(e.status, Status::kErased);
      EXPECT_EQ(e.persists, 1u);
    }
  }
  const ContinuityStats s = t.server->stats();
  EXPECT_GT(s.inserts, 250u);
  EXPECT_EQ(s.insert_persists, 2 * s.inserts);
  EXPECT_EQ(s.update_persists, 2 * s.updates);
  EXPECT_EQ(s.erase_persists, s.erases);
  EXPECT_EQ(t.server->records(), 0u);
}

class ContinuityOracle : public testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(ContinuityOracle, RandomOperationsMatchUnorderedMap) {
  const auto [sbuckets, value_bytes] = GetParam();
  ContinuityConfig c;
  c.memory_nodes = 2;
  c.buckets_per_node = 24;
  c.sbuckets = sbuckets;
  c.value_bytes = value_bytes;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  const auto universe = distinct_keys(c.slots_per_node() * 2, 11);  // up to ~100% load: kFull happens
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  std::mt19937_64 rng(5);
  std::vector<std::byte> out(value_bytes);
  uint64_t full = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    const auto v = value_for(k, static_cast<uint32_t>(i), value_bytes);
    const bool present = oracle.count(k) > 0;
    switch (rng() % 5) {
      case 0: {
        const OpResult r = cl.run(cl.client.get(k, out));
        ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound);
        if (present) { ASSERT_EQ(out, oracle[k]); }
        break;
      }
      case 1: {
        const OpResult r = cl.run(cl.client.find_or_put(k, v));
        if (present) ASSERT_EQ(r.status, Status::kFound);
        else if (r.status == Status::kFull) ++full;
        else { ASSERT_EQ(r.status, Status::kInserted); oracle[k] = v; }
        break;
      }
      case 2: {
        const OpResult r = cl.run(cl.client.put(k, v));
        if (r.status == Status::kFull) { ++full; break; }
        ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kInserted);
        oracle[k] = v;
        break;
      }
      case 3: {
        const OpResult r = cl.run(cl.client.update(k, v));
        if (!present) { ASSERT_EQ(r.status, Status::kNotFound); break; }
        if (r.status == Status::kFull) { ++full; break; }  // the old value stays
        ASSERT_EQ(r.status, Status::kUpdated);
        oracle[k] = v;
        break;
      }
      default: {
        const OpResult r = cl.run(cl.client.erase(k));
        ASSERT_EQ(r.status, present ? Status::kErased : Status::kNotFound);
        oracle.erase(k);
      }
    }
  }
  EXPECT_GT(full, 0u) << "the universe should overfill some segments";
  uint64_t n = 0;
  for (uint32_t node = 0; node < 2; ++node)
    for (const auto& [k, v] : t.server->shard(node).items()) {
      ASSERT_TRUE(oracle.count(k));
      ASSERT_EQ(v, oracle[k]);
      ++n;
    }
  EXPECT_EQ(n, oracle.size());
  EXPECT_EQ(t.server->records(), oracle.size());
}

INSTANTIATE_TEST_SUITE_P(Geometries, ContinuityOracle,
                         testing::Combine(testing::Values(1u, 3u, 4u), testing::Values(0u, 8u, 40u)));

TEST(Continuity, BadInputFailsBeforeAnyRequest) {
  ContinuityConfig c;
  c.value_bytes = 8;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  const std::vector<std::byte> big(9);
  EXPECT_THROW(cl.run(cl.client.find_or_put(1, big)), InvalidArgument);
  EXPECT_THROW(cl.run(cl.client.put(1, std::vector<std::byte>(7))), InvalidArgument);
  EXPECT_EQ(cl.transport->counters().batches, 0u);
  // A client with another geometry is refused by the node, and nothing is written.
  ContinuityConfig other = c;
  other.sbuckets = 2;
  SyncClient wrong(*t.fabric, other);
  EXPECT_THROW(wrong.run(wrong.client.find_or_put(1, std::vector<std::byte>(8))), InvalidArgument);
  EXPECT_THROW(wrong.engine.run(wrong.client.read_header(0)), InvalidArgument);
  EXPECT_EQ(t.server->records(), 0u);
}

// Values that say which key and which write they belong to, so a reader can tell a torn or stale
// value from a real one.
std::vector<std::byte> stamped(uint64_t key, uint64_t version, uint32_t bytes) {
  std::vector<std::byte> v(bytes);
  for (uint32_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t w = (i == 0) ? version : key * 0x9E3779B97F4A7C15ULL + version * (i + 1);
    std::memcpy(v.data() + i, &w, 8);
  }
  return v;
}
bool intact(uint64_t key, const std::vector<std::byte>& v, uint64_t* version) {
  uint64_t ver;
  std::memcpy(&ver, v.data(), 8);
  *version = ver;
  return v == stamped(key, ver, static_cast<uint32_t>(v.size()));
}

// Forced interleavings: node-side writes (inserts, out-of-place updates, erases, and so slot
// reuse in the same segments) run between the words of every READ. Stable keys are never erased:
// a lookup must always find them, with a whole value no older than one it saw before.
TEST(ContinuityInterleaving, WritesBetweenWordsOfAReadNeverTearOrHideAnItem) {
  ContinuityConfig c;
  c.buckets_per_node = 8;  // 4 pairs × 20 slots: heavy slot reuse in every segment
  c.value_bytes = 24;
  ContTable t(c);
  ContinuityShard& shard = t.server->shard(0);
  const auto all = distinct_keys(200, 21);
  std::vector<uint64_t> stable, churn;
  std::unordered_map<uint64_t, uint64_t> version;
  for (uint64_t k : all) {
    if (stable.size() < 30 && shard.put(k, stamped(k, 0, 24)).status == Status::kInserted) {
      stable.push_back(k);
      version[k] = 0;
    } else if (churn.size() < 60) {
      churn.push_back(k);
    }
  }
  std::mt19937_64 rng(9);
  std::unordered_set<uint64_t> churn_in;
  uint64_t writes = 0;
  auto hook = [&] {
    const uint64_t x = rng();
    if (x % 2 == 0) {
      const uint64_t k = stable[(x >> 8) % stable.size()];
      if (shard.update(k, stamped(k, version[k] + 1, 24)).status == Status::kUpdated) ++version[k], ++writes;
    } else {
      const uint64_t k = churn[(x >> 8) % churn.size()];
      if (churn_in.count(k)) {
        ASSERT_EQ(shard.erase(k).status, Status::kErased);
        churn_in.erase(k);
      } else if (shard.put(k, stamped(k, 0, 24)).status == Status::kInserted) {
        churn_in.insert(k);
      }
      ++writes;
    }
  };
  auto transport = std::make_unique<InterleavingTransport>(t.fabric->connect(), hook);
  Engine engine(*transport);
  ContinuityClient client(c, engine);
  std::unordered_map<uint64_t, uint64_t> seen;
  std::vector<std::byte> out(24);
  uint64_t missed = 0, torn = 0, stale = 0, churn_torn = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool st = rng() % 3 != 0;
    const uint64_t k = st ? stable[rng() % stable.size()] : churn[rng() % churn.size()];
    const OpResult r = engine.run(client.get(k, out));
    uint64_t ver = 0;
    if (st) {
      if (r.status != Status::kFound) { ++missed; continue; }
      if (!intact(k, out, &ver)) { ++torn; continue; }
      if (seen.count(k) && ver < seen[k]) ++stale;
      seen[k] = std::max(seen[k], ver);
    } else if (r.status == Status::kFound && !intact(k, out, &ver)) {
      ++churn_torn;
    }
  }
  EXPECT_EQ(missed, 0u) << "a present key was reported absent";
  EXPECT_EQ(torn + churn_torn, 0u) << "a torn value was returned";
  EXPECT_EQ(stale, 0u) << "a lookup returned an older value than an earlier lookup";
  EXPECT_GT(writes, 20000u);
}

// Real threads: two writer clients (RPCs run on their threads, serialised by the shard's mutex)
// and two readers on the same small table.
TEST(ContinuityConcurrency, ReadersDuringWritesSeeWholeMonotoneValues) {
  ContinuityConfig c;
  c.buckets_per_node = 16;
  c.value_bytes = 16;
  ContTable t(c);
  const auto keys = distinct_keys(60, 33);
  std::vector<uint64_t> stable;
  for (uint64_t k : keys)
    if (stable.size() < 40 && t.server->shard(0).put(k, stamped(k, 0, 16)).status == Status::kInserted)
      stable.push_back(k);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  std::atomic<int> readers_reading{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(w + 100);
      // Start writing only once both readers read: on a loaded machine the writers could
      // otherwise finish before a reader thread first runs, and nothing would be tested.
      while (readers_reading.load() < 2) std::this_thread::yield();
      for (uint64_t v = 1; v < 3000; ++v) {
        // Writer w owns the stable keys of its parity, so versions per key only grow.
        const size_t i = (rng() % (stable.size() / 2)) * 2 + w;
        if (i < stable.size()) (void)cl.run(cl.client.update(stable[i], stamped(stable[i], v, 16)));
      }
    });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(r + 7);
      std::unordered_map<uint64_t, uint64_t> seen;
      std::vector<std::byte> out(16);
      for (uint64_t n = 0; !stop.load() || n < 1000; ++n) {  // at least 1000 reads each
        if (n == 1) ++readers_reading;
        const uint64_t k = stable[rng() % stable.size()];
        const OpResult res = cl.run(cl.client.get(k, out));
        uint64_t ver = 0;
        if (res.status != Status::kFound || !intact(k, out, &ver) || ver < seen[k]) ++bad;
        seen[k] = std::max(seen[k], ver);
        ++reads;
      }
    });
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GE(reads.load(), 2000u);
}

}  // namespace
}  // namespace rdmahash

namespace rdmahash {
namespace {

// Seed 002 Fig. 10's quantity without resizing: the load factor at which the first segment
// overflows. More SBuckets per pair must hold strictly more (each segment has 4 more slots).
TEST(ContinuityLoad, MoreSBucketsHoldMoreBeforeTheFirstFullSegment) {
  double prev = 0;
  for (uint32_t sb = 1; sb <= 4; ++sb) {
    double sum = 0;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      ContinuityConfig c;
      c.buckets_per_node = 2000;
      c.sbuckets = sb;
      c.value_bytes = 0;
      c.hash_seed = seed;
      std::vector<std::byte> mem(c.region_bytes() + kCacheLine);
      const auto mis = reinterpret_cast<uintptr_t>(mem.data()) % kCacheLine;
      PersistentRegion region({mem.data() + (mis ? kCacheLine - mis : 0), c.region_bytes()}, PersistMode::kVolatile);
      ContinuityShard shard(c, 0, region);
      std::mt19937_64 rng(seed * 77);
      while (shard.find_or_put(rng(), {}).status != Status::kFull) {
      }
      sum += static_cast<double>(shard.records()) / static_cast<double>(shard.capacity());
    }
    const double lf = sum / 3;
    std::printf("continuity sbuckets=%u: load factor at the first full segment %.3f (2000 buckets, 3 seeds)\n", sb, lf);
    EXPECT_GT(lf, prev);
    prev = lf;
  }
}

}  // namespace
}  // namespace rdmahash

namespace rdmahash {
namespace {

// --- online resizing ------------------------------------------------------------------------------

// Oracle conformance while the table grows online: two shards starting at 2 buckets each double
// up to six times under random writes (each write migrates its own pair and one more), and three
// clients read one-sided, each with its own cached level. Afterwards, with no resize running, a
// client that knows the level finds every key in ONE READ.
TEST(ContinuityResize, OnlineGrowthMatchesUnorderedMapAndLookupsReturnToOneRead) {
  ContinuityConfig c;
  c.memory_nodes = 2;
  c.buckets_per_node = 2;
  c.value_bytes = 8;
  c.max_resizes = 6;
  c.migrate_pairs_per_write = 1;
  ContTable t(c);
  std::vector<std::unique_ptr<SyncClient>> cls;
  for (int i = 0; i < 3; ++i) cls.push_back(std::make_unique<SyncClient>(*t.fabric, c));
  const auto universe = distinct_keys(1400, 41);
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  std::mt19937_64 rng(8);
  std::vector<std::byte> out(8);
  uint64_t two_reads = 0;
  for (int i = 0; i < 30000; ++i) {
    SyncClient& cl = *cls[rng() % cls.size()];
    const uint64_t k = universe[rng() % (i < 12000 ? universe.size() : 800)];
    const auto v = value_for(k, static_cast<uint32_t>(i), 8);
    const bool present = oracle.count(k) > 0;
    switch (rng() % 6) {
      case 0:
      case 1: {
        const OpResult r = cl.run(cl.client.get(k, out));
        ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << "op " << i;
        if (present) { ASSERT_EQ(out, oracle[k]); }
        two_reads += cl.last.reads > 1;
        break;
      }
      case 2: {
        const OpResult r = cl.run(cl.client.find_or_put(k, v));
        if (present) ASSERT_EQ(r.status, Status::kFound);
        else if (r.status != Status::kFull) { ASSERT_EQ(r.status, Status::kInserted); oracle[k] = v; }
        break;
      }
      case 3: {
        const OpResult r = cl.run(cl.client.put(k, v));
        if (r.status == Status::kFull) break;
        ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kInserted);
        oracle[k] = v;
        break;
      }
      case 4: {
        const OpResult r = cl.run(cl.client.update(k, v));
        if (!present) { ASSERT_EQ(r.status, Status::kNotFound); break; }
        if (r.status == Status::kFull) break;
        ASSERT_EQ(r.status, Status::kUpdated);
        oracle[k] = v;
        break;
      }
      default: {
        const OpResult r = cl.run(cl.client.erase(k));
        ASSERT_EQ(r.status, present ? Status::kErased : Status::kNotFound);
        oracle.erase(k);
      }
    }
  }
  const ContinuityStats st = t.server->stats();
  EXPECT_GE(st.resizes, 8u) << "both shards should grow several times";
  EXPECT_GT(two_reads, 0u) << "some lookups should have crossed a MOVED or UNBORN mark";
  for (uint32_t n = 0; n < 2; ++n) {
    t.server->shard(n).finish_resize();
    EXPECT_FALSE(t.server->shard(n).resizing());
  }
  EXPECT_EQ(t.server->records(), oracle.size());
  // Every client learns the level (at most one extra READ per node), then every lookup is 1 READ.
  uint64_t reads = 0, lookups = 0;
  for (auto& cl : cls)
    for (int pass = 0; pass < 2; ++pass)
      for (uint64_t k : universe) {
        const OpResult r = cl->run(cl->client.get(k, out));
        ASSERT_EQ(r.status, oracle.count(k) ? Status::kFound : Status::kNotFound);
        if (pass == 1) {
          reads += cl->last.reads;
          ++lookups;
          ASSERT_EQ(cl->last.round_trips, 1u);
        }
      }
  EXPECT_EQ(reads, lookups);
}

// Without resizes allowed a full segment still reports kFull (max_resizes = 0, the default).
TEST(ContinuityResize, NoResizeAllowedMeansFull) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  ContTable t(c);
  uint64_t full = 0;
  for (uint64_t k : distinct_keys(100, 4)) full += t.server->shard(0).put(k, value_for(k, 0, 8)).status == Status::kFull;
  EXPECT_GT(full, 60u);
  EXPECT_EQ(t.server->stats().resizes, 0u);
}

// Lock-step: a node thread runs resizes and writes, and is let through ONE 8-byte store at a
// time, only between two words of a client's READ (InterleavingTransport cuts each READ about
// four times). So every store of a pair's migration — a child's slot words, a child's indicator,
// the parent's MOVED store — lands inside READs of the segments it changes. Stable keys are
// never erased: each lookup must find them, with a whole value no older than one seen before.
struct StoreBaton final : PersistObserver {
  std::mutex m;
  std::condition_variable cv;
  uint64_t stores = 0, credits = 0;
  bool done = false;
  void on_store(uint64_t, uint64_t) override {
    std::unique_lock lock(m);
    ++stores;
    cv.notify_all();
    cv.wait(lock, [&] { return credits > 0 || done; });
    if (credits) --credits;
  }
  void on_persist(uint64_t, uint64_t) override {}
  void step() {  // let the node make exactly one more store (or finish)
    std::unique_lock lock(m);
    if (done) return;
    const uint64_t target = stores + 1;
    ++credits;
    cv.notify_all();
    cv.wait(lock, [&] { return stores >= target || done; });
  }
  void finish() {
    std::lock_guard lock(m);
    done = true;
    cv.notify_all();
  }
};

TEST(ContinuityInterleaving, EveryStoreOfAMigrationInsideAReadNeverHidesOrTearsAnItem) {
  for (uint64_t round = 0; round < 8; ++round) {  // 8 tables, other keys and schedules
    ContinuityConfig c;
    c.buckets_per_node = 8;
    c.value_bytes = 16;
    c.max_resizes = 3;
    c.migrate_pairs_per_write = 0;
    ContTable t(c);
    ContinuityShard& shard = t.server->shard(0);
    const auto all = distinct_keys(160, 61 + round);
    std::vector<uint64_t> stable(all.begin(), all.begin() + 40), churn(all.begin() + 40, all.end());
    for (uint64_t k : stable) ASSERT_EQ(shard.put(k, stamped(k, 0, 16)).status, Status::kInserted);
    StoreBaton baton;
    t.server->region(0).set_observer(&baton);
    std::atomic<uint64_t> versions_written{0};
    std::vector<uint64_t> version(stable.size(), 0);
    // The node: three resizes, each begun explicitly and advanced one pair at a time, with an
    // update of a stable key and a churn insert or erase after every migrated pair.
    std::thread node([&] {
      std::mt19937_64 rng(3 + round);
      std::unordered_set<uint64_t> in;
      for (int r = 0; r < 3; ++r) {
        if (!shard.resizing()) shard.start_resize();
        do {
          const size_t i = rng() % stable.size();
          if (shard.update(stable[i], stamped(stable[i], version[i] + 1, 16)).status == Status::kUpdated) ++version[i];
          const uint64_t k = churn[rng() % churn.size()];
          if (in.count(k)) {
            if (shard.erase(k).status == Status::kErased) in.erase(k);
          } else if (shard.put(k, stamped(k, 0, 16)).status == Status::kInserted) {
            in.insert(k);
          }
          ++versions_written;
        } while (shard.resize_step());
      }
      baton.finish();
    });
    auto transport = std::make_unique<InterleavingTransport>(t.fabric->connect(), [&] { baton.step(); });
    Engine engine(*transport);
    ContinuityClient client(c, engine);
    std::unordered_map<uint64_t, uint64_t> seen;
    std::vector<std::byte> out(16);
    std::mt19937_64 rng(5 + round);
    uint64_t missed = 0, torn = 0, stale = 0, churn_torn = 0, lookups = 0, two = 0;
    bool finished = false;
    while (!finished) {
      {
        std::lock_guard lock(baton.m);
        finished = baton.done;
      }
      const bool st = rng() % 4 != 0;
      const uint64_t k = st ? stable[rng() % stable.size()] : churn[rng() % churn.size()];
      const OpResult r = engine.run(client.get(k, out));
      ++lookups;
      two += r.chunks > 1;
      uint64_t ver = 0;
      if (st) {
        if (r.status != Status::kFound) { ++missed; continue; }
        if (!intact(k, out, &ver)) { ++torn; continue; }
        if (seen.count(k) && ver < seen[k]) ++stale;
        seen[k] = std::max(seen[k], ver);
      } else if (r.status == Status::kFound && !intact(k, out, &ver)) {
        ++churn_torn;
      }
    }
    node.join();
    t.server->region(0).set_observer(nullptr);
    EXPECT_EQ(missed, 0u) << "a present key was reported absent";
    EXPECT_EQ(torn + churn_torn, 0u) << "a torn value was returned";
    EXPECT_EQ(stale, 0u) << "a lookup returned an older value than an earlier lookup";
    EXPECT_EQ(shard.level(), 3u);
    EXPECT_EQ(client.cached_level(0), 3u);
    EXPECT_GT(two, 0u);
    EXPECT_GT(baton.stores, 600u);
    std::printf("continuity lock-step resize: %lu stores, %lu lookups (%lu of 2+ READs), %lu node writes\n",
                static_cast<unsigned long>(baton.stores), static_cast<unsigned long>(lookups),
                static_cast<unsigned long>(two), static_cast<unsigned long>(versions_written.load()));
  }
}

// Real threads: two writer clients update stable keys (each owns one parity, so versions per key
// only grow) and insert and erase churn keys, which fills segments and makes the node resize five
// times; two readers check every stable lookup (found, whole, never older) and every churn hit.
TEST(ContinuityConcurrency, ReadersDuringOnlineResizesSeeEveryStableKeyWhole) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.value_bytes = 16;
  c.max_resizes = 5;
  c.migrate_pairs_per_write = 0;  // resizes advance by the writes' own pairs: they stay in progress
  ContTable t(c);
  const auto keys = distinct_keys(900, 71);
  std::vector<uint64_t> stable(keys.begin(), keys.begin() + 20), churn(keys.begin() + 20, keys.end());
  for (uint64_t k : stable) ASSERT_EQ(t.server->shard(0).put(k, stamped(k, 0, 16)).status, Status::kInserted);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0}, multi{0};
  std::atomic<int> readers_reading{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(w + 300);
      while (readers_reading.load() < 2) std::this_thread::yield();
      std::vector<uint64_t> mine;  // churn keys of this writer (its parity)
      for (size_t i = w; i < churn.size(); i += 2) mine.push_back(churn[i]);
      std::unordered_set<uint64_t> in;
      for (uint64_t v = 1; v < 2500; ++v) {
        const size_t i = (rng() % (stable.size() / 2)) * 2 + w;
        (void)cl.run(cl.client.update(stable[i], stamped(stable[i], v, 16)));
        const uint64_t k = mine[rng() % (v < 1200 ? mine.size() : mine.size() / 3)];
        if (in.count(k) && rng() % 3 == 0) {
          if (cl.run(cl.client.erase(k)).status == Status::kErased) in.erase(k);
        } else if (cl.run(cl.client.find_or_put(k, stamped(k, v, 16))).status == Status::kInserted) {
          in.insert(k);
        }
      }
    });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(r + 17);
      std::unordered_map<uint64_t, uint64_t> seen;
      std::vector<std::byte> out(16);
      for (uint64_t n = 0; !stop.load() || n < 1000; ++n) {
        if (n == 1) ++readers_reading;
        const bool st = rng() % 3 != 0;
        const uint64_t k = st ? stable[rng() % stable.size()] : churn[rng() % churn.size()];
        const OpResult res = cl.run(cl.client.get(k, out));
        multi += res.chunks > 1;
        uint64_t ver = 0;
        if (st) {
          if (res.status != Status::kFound || !intact(k, out, &ver) || ver < seen[k]) ++bad;
          seen[k] = std::max(seen[k], ver);
        } else if (res.status == Status::kFound && !intact(k, out, &ver)) {
          ++bad;
        }
        ++reads;
      }
    });
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GE(reads.load(), 2000u);
  EXPECT_EQ(t.server->stats().resizes, 5u);
  std::printf("continuity threads: %lu resizes, %lu reads (%lu of 2+ READs)\n",
              static_cast<unsigned long>(t.server->stats().resizes), static_cast<unsigned long>(reads.load()),
              static_cast<unsigned long>(multi.load()));
}

}  // namespace
}  // namespace rdmahash

namespace rdmahash {
namespace {

// background_migration: once writes stop, the server's thread finishes the running resize; every
// item is still there, and a client that learned the level finds each in one READ.
TEST(ContinuityResize, BackgroundMigrationFinishesAResizeWithoutWrites) {
  ContinuityConfig c;
  c.buckets_per_node = 64;
  c.value_bytes = 8;
  c.max_resizes = 2;
  c.migrate_pairs_per_write = 0;  // writes migrate only their own pairs
  c.background_migration = true;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  for (uint64_t k : distinct_keys(2000, 91)) {
    if (cl.run(cl.client.find_or_put(k, value_for(k, 1, 8))).status == Status::kInserted) oracle[k] = value_for(k, 1, 8);
    if (t.server->stats().resizes > 0) break;  // the first resize has begun: stop writing
  }
  ASSERT_EQ(t.server->stats().resizes, 1u);
  // Hang guard only (no timing is asserted): the thread needs a few milliseconds.
  for (int i = 0; i < 30000 && t.server->shard(0).resizing(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(t.server->shard(0).resizing());
  EXPECT_EQ(t.server->shard(0).level(), 1u);
  EXPECT_EQ(t.server->stats().migrated_pairs, 32u);
  std::vector<std::byte> out(8);
  uint64_t reads = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (auto& [k, v] : oracle) {
      ASSERT_EQ(cl.run(cl.client.get(k, out)).status, Status::kFound);
      ASSERT_EQ(out, v);
      if (pass == 1) reads += cl.last.reads;
    }
  EXPECT_EQ(reads, oracle.size());
  EXPECT_EQ(cl.client.cached_level(0), 1u);
}

}  // namespace
}  // namespace rdmahash

namespace rdmahash {
namespace {

// With online resizing the table never reports full until its last level: the load factor at
// which each resize starts is the load at the first full segment of that level (seed 002 Fig. 10's
// saw-tooth), and each resize doubles the capacity exactly.
TEST(ContinuityLoad, OnlineResizesStartAtTheFirstFullSegmentAndDoubleTheCapacity) {
  for (uint32_t sb : {1u, 3u}) {
    ContinuityConfig c;
    c.buckets_per_node = 250;
    c.sbuckets = sb;
    c.value_bytes = 0;
    c.max_resizes = 3;
    std::vector<std::byte> mem(c.region_bytes() + kCacheLine);
    const auto mis = reinterpret_cast<uintptr_t>(mem.data()) % kCacheLine;
    PersistentRegion region({mem.data() + (mis ? kCacheLine - mis : 0), c.region_bytes()}, PersistMode::kVolatile);
    ContinuityShard shard(c, 0, region);
    std::mt19937_64 rng(sb * 13);
    std::string line;
    uint64_t resizes = 0;
    for (;;) {
      const uint64_t before = shard.records(), cap = shard.capacity();
      const Status s = shard.find_or_put(rng(), {}).status;
      if (s == Status::kFull) {
        line += " full at " + std::to_string(static_cast<double>(before) / static_cast<double>(cap)).substr(0, 5);
        break;
      }
      if (shard.stats().resizes > resizes) {
        ++resizes;
        ASSERT_EQ(shard.capacity(), 2 * cap);
        const double lf = static_cast<double>(before) / static_cast<double>(cap);
        EXPECT_GT(lf, 0.15);  // a segment holds 4 + 4·sb of the pair's 8 + 4·sb slots
        line += " resize " + std::to_string(resizes) + " at " + std::to_string(lf).substr(0, 5) + ";";
      }
    }
    EXPECT_EQ(resizes, 3u);
    EXPECT_EQ(shard.level(), 3u);
    std::printf("continuity sbuckets=%u, 250 buckets, 3 online resizes:%s\n", sb, line.c_str());
  }
}

}  // namespace
}  // namespace rdmahash
