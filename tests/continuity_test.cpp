// Continuity hashing on LocalFabric: layout (eqs. 1-3), one READ per lookup, persists per op,
// readers racing the node's writes (forced interleavings and threads), bad input (random operations
// against std::unordered_map: conformance_test).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "pm_test_util.h"
#include "rdmahash/continuity.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::distinct_keys;
using test::intact;
using test::InterleavingTransport;
using test::stamped;
using test::value_for;

using ContTable = test::ServedTable<ContinuityServer, ContinuityConfig>;
using SyncClient = test::SyncClientOf<ContinuityClient, ContinuityConfig>;

TEST(ContinuityLayout, SegmentOffsetsFollowEquationsTwoAndThree) {
  ContinuityConfig c;
  c.buckets_per_node = 10;
  c.sbuckets = 3;
  c.value_bytes = 8;
  // slot = ctrl + key + value + check = 32 B; bucket = 128 B; pair = echo 8 + 2·128 + 8 + 3·128 = 656 B.
  EXPECT_EQ(c.slot_bytes(), 32u);
  EXPECT_EQ(c.pair_bytes(), 656u);
  EXPECT_EQ(c.segment_bytes(), 128u + 8u + 384u);
  EXPECT_EQ(c.pair_slots(), 20u);  // the 20-bit indicator of seed 002 Fig. 1
  for (uint64_t k = 0; k < 2000; ++k) {
    const ContinuityPlacement p = continuity_place(c, k);
    ASSERT_LT(p.bucket, 10u);
    const uint64_t size_se = c.segment_bytes(), size_bu = c.bucket_bytes();
    // Eqs. (2)/(3) with the pair's echo word: size_se + size_bu + 8 per pair, and the odd segment
    // past it; the even segment's READ starts at the echo.
    const uint64_t want = p.bucket % 2 == 0 ? p.bucket / 2 * (size_se + size_bu + 8)
                                            : (p.bucket - 1) / 2 * (size_se + size_bu + 8) + 8 + size_bu;
    ASSERT_EQ(p.segment_offset, c.table_offset(0) + want);
    ASSERT_EQ(p.read_bytes, c.segment_bytes() + (p.bucket % 2 == 0 ? 8u : 0u));
    ASSERT_EQ(p.indicator_pos, p.bucket % 2 == 0 ? 8 + size_bu : 0u);
    ASSERT_LE(p.segment_offset + p.read_bytes, c.region_bytes());
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
    EXPECT_EQ(cl.last.bytes, continuity_place(c, k).read_bytes);
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

// Random operations against std::unordered_map, near full too: tests/conformance_test.cpp (Conformance/continuity*).

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
  ContinuityConfig added = c;  // another added-SBuckets setting: another layout
  added.added_group_pairs = 10;
  SyncClient wrong_added(*t.fabric, added);
  EXPECT_THROW(wrong_added.run(wrong_added.client.find_or_put(1, std::vector<std::byte>(8))), InvalidArgument);
  EXPECT_THROW(wrong_added.engine.run(wrong_added.client.read_header(0)), InvalidArgument);
  EXPECT_EQ(t.server->records(), 0u);
  // A header of another format version (checksum made valid) or magic is no table of this build.
  std::byte* hdr = t.fabric->local_region(0).data();
  ContinuityHeader saved{};
  std::memcpy(&saved, hdr, sizeof saved);
  auto expect_refused = [&](const ContinuityHeader& bad, const std::string& why) {
    std::memcpy(hdr, &bad, sizeof bad);
    try {
      cl.engine.run(cl.client.read_header(0));
      ADD_FAILURE() << why << ": accepted";
    } catch (const FabricError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    std::memcpy(hdr, &saved, sizeof saved);
  };
  ContinuityHeader bad = saved;
  bad.format_version = kContinuityFormatVersion + 1;
  bad.checksum = image_header_checksum(&bad, kContinuityMagic);
  expect_refused(bad, "format version");
  bad = saved;
  bad.checksum ^= 1;
  expect_refused(bad, "checksum");
  bad = saved;
  bad.magic ^= 1;
  bad.checksum = image_header_checksum(&bad, bad.magic);
  expect_refused(bad, "not a continuity table image");
  EXPECT_NO_THROW(cl.engine.run(cl.client.read_header(0)));
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
  for (uint64_t k : all) {
    if (stable.size() < 30 && shard.put(k, stamped(k, 0, 24)).status == Status::kInserted) {
      stable.push_back(k);
    } else if (churn.size() < 60) {
      churn.push_back(k);
    }
  }
  const auto n = test::reads_between_node_writes<ContinuityClient>(*t.fabric, shard, c, stable, churn, 20000, 24);
  EXPECT_EQ(n.missed, 0u) << "a present key was reported absent";
  EXPECT_EQ(n.torn + n.churn_torn, 0u) << "a torn value was returned";
  EXPECT_EQ(n.stale, 0u) << "a lookup returned an older value than an earlier lookup";
  EXPECT_GT(n.writes, 20000u);
}

// Runs before(i) before the client's i-th READ (0-based) and, when split(i) holds, executes that
// READ as two — its first split_words words, then mid(i), then the rest — so a test can put the
// node's stores at any point of a lookup, inside a READ included.
class HookTransport final : public Transport {
 public:
  HookTransport(std::unique_ptr<Transport> inner, std::function<void(uint64_t)> before)
      : HookTransport(std::move(inner), std::move(before), [](uint64_t) {}, [](uint64_t) { return false; }, 0) {}
  HookTransport(std::unique_ptr<Transport> inner, std::function<void(uint64_t)> before,
                std::function<void(uint64_t)> mid, uint64_t split_read, uint32_t split_words)
      : HookTransport(std::move(inner), std::move(before), std::move(mid),
                      [split_read](uint64_t i) { return i == split_read; }, split_words) {}
  HookTransport(std::unique_ptr<Transport> inner, std::function<void(uint64_t)> before,
                std::function<void(uint64_t)> mid, std::function<bool(uint64_t)> split, uint32_t split_words)
      : inner_(std::move(inner)), before_(std::move(before)), mid_(std::move(mid)), split_when_(std::move(split)),
        split_(split_words * 8) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead) {
        const uint64_t i = reads_++;
        before_(i);
        if (split_ > 0 && split_ < r.len && split_when_(i)) {
          Request head = r, tail = r;
          head.len = split_;
          tail.addr.offset += split_;
          tail.buf = static_cast<std::byte*>(r.buf) + split_;
          tail.len = r.len - split_;
          inner_->execute(std::span<Request>(&head, 1));
          mid_(i);
          inner_->execute(std::span<Request>(&tail, 1));
        } else {
          inner_->execute(std::span<Request>(&r, 1));
        }
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void(uint64_t)> before_, mid_;
  std::function<bool(uint64_t)> split_when_;
  uint32_t split_;
  uint64_t reads_ = 0;
};

// The defect format 3 had (CI, a loaded machine): a client preempted inside its READ of an even
// segment, after copying bucket 2i and before the indicator word, while the node rewrote one of
// those slots four times (its 2-bit generation wrapped): the lookup returned a value the key no
// longer had, or missed it. Here the cut is forced: every armed READ of an even segment stops right
// before the indicator while the node makes 0..12 updates of the bucket's keys (which alternate
// between two home slots, so multiples of 4 rewrite one slot 4k times). Each lookup must return a
// version the key held while it ran, and take 2 READs exactly when the pair changed inside the
// first (the echo differs from the indicator), 1 otherwise.
TEST(ContinuityInterleaving, SlotRewrittenManyTimesBeforeTheIndicatorWordIsNeverReturned) {
  ContinuityConfig c;
  c.buckets_per_node = 4;
  c.value_bytes = 16;
  ContTable t(c);
  ContinuityShard& shard = t.server->shard(0);
  std::vector<uint64_t> keys;  // three keys of bucket 0 (an even segment): home slots 0..2, slot 3 free
  for (uint64_t k = 2; keys.size() < 3; ++k)
    if (continuity_place(c, k).bucket == 0) keys.push_back(k);
  std::vector<uint64_t> version(keys.size(), 0);
  for (uint64_t k : keys) ASSERT_EQ(shard.put(k, stamped(k, 0, 16)).status, Status::kInserted);
  std::mt19937_64 rng(41);
  uint32_t updates = 0;
  auto hook = [&] {
    for (uint32_t u = 0; u < updates; ++u) {
      const size_t i = rng() % 4 == 0 ? rng() % keys.size() : 0;  // mostly the first key
      ASSERT_EQ(shard.update(keys[i], stamped(keys[i], version[i] + 1, 16)).status, Status::kUpdated);
      ++version[i];
    }
  };
  const ContinuityPlacement p0 = continuity_place(c, keys[0]);
  bool armed = false;   // cut the next READ (every one is of bucket 0's even segment)
  bool always = false;  // cut every READ
  auto owned = std::make_unique<HookTransport>(
      t.fabric->connect(), [](uint64_t) {}, [&](uint64_t) { armed = false, hook(); },
      [&](uint64_t) { return armed || always; }, p0.indicator_pos / 8);
  HookTransport& transport = *owned;
  Engine engine(transport);
  ContinuityClient client(c, engine);
  std::vector<std::byte> out(16);
  uint64_t wrong = 0, reads_off = 0, changed = 0;
  for (int n = 0; n < 3000; ++n) {
    const size_t i = rng() % 4 == 0 ? rng() % keys.size() : 0;
    const uint64_t before = version[i];
    updates = static_cast<uint32_t>(rng() % 13);
    armed = true;
    const uint64_t reads0 = transport.counters().reads;
    const OpResult r = engine.run(client.get(keys[i], out));
    uint64_t ver = 0;
    if (r.status != Status::kFound || !intact(keys[i], out, &ver) || ver < before || ver > version[i]) ++wrong;
    if (transport.counters().reads - reads0 != (updates > 0 ? 2u : 1u)) ++reads_off;
    changed += updates > 0;
  }
  EXPECT_EQ(wrong, 0u) << "a lookup returned a version the key did not hold while it ran, or missed it";
  EXPECT_EQ(reads_off, 0u) << "a lookup did not READ again exactly when its pair changed inside the first READ";
  EXPECT_GT(changed, 2000u);
  EXPECT_GT(version[0], 10000u);
  // A pair that changes inside every READ: after kOldItemReads (4) busy READs the lookup asks the
  // node, which answers under its shard lock.
  for (int n = 0; n < 50; ++n) {
    const size_t i = rng() % keys.size();
    const uint64_t before = version[i];
    updates = 1 + static_cast<uint32_t>(rng() % 5);
    always = true;
    OpStats st;
    const OpResult r = engine.run(client.get(keys[i], out), &st);
    always = false;
    uint64_t ver = 0;
    EXPECT_EQ(r.status, Status::kFound);
    EXPECT_TRUE(intact(keys[i], out, &ver) && ver >= before && ver <= version[i]);
    EXPECT_EQ(st.reads, 4u);
    EXPECT_EQ(st.rpcs, 1u);
  }
}

// The same with added SBuckets, the table kept near full so that stable keys live in the group
// and the node's writes free and reuse group slots between the words of every READ (group READs
// included, and those of a lookup's second and later attempts).
TEST(ContinuityInterleaving, WritesBetweenWordsOfAReadNeverTearOrHideAnItemInAddedSlots) {
  ContinuityConfig c;
  c.buckets_per_node = 4;  // 2 pairs × 20 own slots, sharing one added group of 12
  c.value_bytes = 24;
  c.added_group_pairs = 2;
  ContTable t(c);
  ContinuityShard& shard = t.server->shard(0);
  const auto all = distinct_keys(400, 23);
  std::vector<uint64_t> stable, churn;
  for (uint64_t k : all) {
    if (stable.size() < 40) {
      if (shard.put(k, stamped(k, 0, 24)).status == Status::kInserted) stable.push_back(k);
    } else if (churn.size() < 40) {
      churn.push_back(k);
    }
  }
  ASSERT_EQ(stable.size(), 40u);
  ASSERT_GT(shard.stats().added_writes, 0u);
  const auto n = test::reads_between_node_writes<ContinuityClient>(*t.fabric, shard, c, stable, churn, 20000, 24);
  EXPECT_EQ(n.missed, 0u) << "a present key was reported absent";
  EXPECT_EQ(n.torn + n.churn_torn, 0u) << "a torn value was returned";
  EXPECT_EQ(n.stale, 0u) << "a lookup returned an older value than an earlier lookup";
  EXPECT_GT(shard.stats().added_writes, 1000u);
  EXPECT_GT(n.writes, 20000u);
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
  uint64_t added_migrated = 0;
  for (uint64_t round = 0; round < 8; ++round) {  // 8 tables, other keys and schedules
    ContinuityConfig c;
    c.buckets_per_node = 8;
    c.value_bytes = 16;
    c.max_resizes = 3;
    c.migrate_pairs_per_write = 0;
    c.added_group_pairs = round % 2 ? 2 : 0;  // odd rounds: added groups, their items migrated too
    ContTable t(c);
    ContinuityShard& shard = t.server->shard(0);
    const auto all = distinct_keys(160, 61 + round);
    // With added groups, 72 stable keys in 80 + 24 slots: overflowing segments put some of them in
    // the groups, and the first resize's migrations move them.
    const size_t n_stable = c.added_group_pairs ? 72 : 40;
    std::vector<uint64_t> stable, churn;
    for (uint64_t k : all) {
      if (stable.size() < n_stable && shard.put(k, stamped(k, 0, 16)).status == Status::kInserted) stable.push_back(k);
      else churn.push_back(k);
    }
    ASSERT_EQ(stable.size(), n_stable);
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
    added_migrated += shard.stats().migrated_added_items;
    std::printf("continuity lock-step resize%s: %lu stores, %lu lookups (%lu of 2+ READs), %lu node writes, %lu "
                "added items migrated\n",
                c.added_group_pairs ? " (added groups)" : "", static_cast<unsigned long>(baton.stores),
                static_cast<unsigned long>(lookups), static_cast<unsigned long>(two),
                static_cast<unsigned long>(versions_written.load()),
                static_cast<unsigned long>(shard.stats().migrated_added_items));
  }
  EXPECT_GT(added_migrated, 3u) << "the rounds with added groups should migrate items out of added slots";
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

namespace rdmahash {
namespace {

// --- added SBuckets (seed 002 Fig. 10) -------------------------------------------------------------

// Keys of one node whose bucket in table 0 is `b0` and in table `level` is `bl` (for tests that
// must put items in chosen segments).
std::vector<uint64_t> keys_in(const ContinuityConfig& c, uint64_t b0, uint32_t level, uint64_t bl, size_t n,
                              uint64_t from = 1) {
  std::vector<uint64_t> out;
  for (uint64_t k = from; out.size() < n; ++k)
    if (continuity_place(c, k, 0).bucket == b0 && continuity_place(c, k, level).bucket == bl) out.push_back(k);
  return out;
}

// Oracle conformance with added groups in use: tables driven past full, so that overflowing
// segments put items (and out-of-place updates) into the added slots of their group.
class ContinuityAddedOracle : public testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(ContinuityAddedOracle, RandomOperationsNearFullMatchUnorderedMap) {
  const auto [sbuckets, group_pairs] = GetParam();
  ContinuityConfig c;
  c.memory_nodes = 2;
  c.buckets_per_node = 40;
  c.sbuckets = sbuckets;
  c.value_bytes = 8;
  c.added_group_pairs = group_pairs;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  const auto universe = distinct_keys(c.slots_per_node() * 3, 13);  // 1.5x all slots: segments overflow
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  std::mt19937_64 rng(15);
  std::vector<std::byte> out(8);
  uint64_t full = 0, two_reads = 0, hits_in_group = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    const auto v = value_for(k, static_cast<uint32_t>(i), 8);
    const bool present = oracle.count(k) > 0;
    switch (rng() % 5) {
      case 0: {
        const OpResult r = cl.run(cl.client.get(k, out));
        ASSERT_EQ(r.status, present ? Status::kFound : Status::kNotFound) << "op " << i;
        if (present) { ASSERT_EQ(out, oracle[k]); }
        ASSERT_LE(cl.last.reads, 2u);  // no resize: the segment, then at most the group
        two_reads += cl.last.reads == 2;
        hits_in_group += present && cl.last.reads == 2;
        break;
      }
      case 1: {
        const OpResult r = cl.run(cl.client.find_or_put(k, v));
        if (present) ASSERT_EQ(r.status, Status::kFound);
        else if (r.status == Status::kFull) ++full;
        else { ASSERT_EQ(r.status, Status::kInserted); ASSERT_EQ(r.persists, 2u); oracle[k] = v; }
        break;
      }
      case 2: {
        const OpResult r = cl.run(cl.client.put(k, v));
        if (r.status == Status::kFull) { ++full; break; }
        ASSERT_EQ(r.status, present ? Status::kUpdated : Status::kInserted);
        ASSERT_EQ(r.persists, 2u);
        oracle[k] = v;
        break;
      }
      case 3: {
        const OpResult r = cl.run(cl.client.update(k, v));
        if (!present) { ASSERT_EQ(r.status, Status::kNotFound); break; }
        if (r.status == Status::kFull) { ++full; break; }
        ASSERT_EQ(r.status, Status::kUpdated);
        ASSERT_EQ(r.persists, 2u);
        oracle[k] = v;
        break;
      }
      default: {
        const OpResult r = cl.run(cl.client.erase(k));
        ASSERT_EQ(r.status, present ? Status::kErased : Status::kNotFound);
        if (present) { ASSERT_EQ(r.persists, 1u); }
        oracle.erase(k);
      }
    }
  }
  const ContinuityStats st = t.server->stats();
  EXPECT_GT(full, 0u);
  EXPECT_GT(st.added_writes, 100u) << "overflowing segments should use their added groups";
  EXPECT_GT(st.added_vacated, 50u);
  EXPECT_GT(two_reads, 0u);
  EXPECT_GT(hits_in_group, 0u);
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

INSTANTIATE_TEST_SUITE_P(Groups, ContinuityAddedOracle,
                         testing::Combine(testing::Values(1u, 3u, 4u), testing::Values(1u, 3u, 10u)));

struct StoreLog final : PersistObserver {
  std::vector<std::pair<uint64_t, uint64_t>> stores;
  void on_store(uint64_t off, uint64_t v) override { stores.emplace_back(off, v); }
  void on_persist(uint64_t, uint64_t) override {}
};

// The update-then-reuse race: a reader READs k's segment (its pair claims added slot x, which
// holds k); then the node erases a key of k's segment, updates k (k moves from x to the freed own
// slot, x released in the same indicator store) and gives x to another item — of the other pair
// of the group (scenario 0) or of k's own pair (scenario 1); only then does the reader READ the
// group. For every prefix of those stores between the two READs — and inside the group READ,
// after each of the first three words of slot x — the lookup must find k with its old or new
// value: x holding another pair's item (0), a later publication of its own pair (1), or a torn
// mix of two publications is unstable and READ again, never a miss or a wrong value.
TEST(ContinuityAdded, GroupReadSeparatedFromSegmentReadByEachStoreNeverMisses) {
  ContinuityConfig c;
  c.buckets_per_node = 4;  // 2 pairs sharing one added group of 12 slots
  c.sbuckets = 3;
  c.value_bytes = 8;
  c.added_group_pairs = 2;
  ASSERT_EQ(c.groups_at(0), 1u);
  // Pair 0 full (16 keys of bucket 0, 4 of bucket 1), k in the group; pair 1 full (16 + 4).
  const auto b0 = keys_in(c, 0, 0, 0, 19), b1 = keys_in(c, 1, 0, 1, 4), b2 = keys_in(c, 2, 0, 2, 17),
             b3 = keys_in(c, 3, 0, 3, 4);
  const uint64_t k = b0[16], own_erased = b0[3], other = b2[16], same = b0[17];
  for (int scenario = 0; scenario < 2; ++scenario) {
    auto build = [&](ContinuityShard& s) {
      for (size_t i = 0; i < 16; ++i) ASSERT_EQ(s.put(b0[i], value_for(b0[i], 0, 8)).status, Status::kInserted);
      for (uint64_t x : b1) ASSERT_EQ(s.put(x, value_for(x, 0, 8)).status, Status::kInserted);
      for (size_t i = 0; i < 16; ++i) ASSERT_EQ(s.put(b2[i], value_for(b2[i], 0, 8)).status, Status::kInserted);
      for (uint64_t x : b3) ASSERT_EQ(s.put(x, value_for(x, 0, 8)).status, Status::kInserted);
      ASSERT_EQ(s.put(k, value_for(k, 0, 8)).status, Status::kInserted);
      ASSERT_EQ(s.stats().added_writes, 1u);  // k is in the group
    };
    auto scenario_ops = [&](ContinuityShard& s) {
      ASSERT_EQ(s.erase(own_erased).status, Status::kErased);
      ASSERT_EQ(s.update(k, value_for(k, 1, 8)).status, Status::kUpdated);  // x -> the freed own slot
      ASSERT_EQ(s.stats().added_vacated, 1u);
      const uint64_t reuse = scenario == 0 ? other : same;
      ASSERT_EQ(s.put(reuse, value_for(reuse, 0, 8)).status, Status::kInserted);  // takes x
      ASSERT_EQ(s.stats().added_writes, 2u);
    };
    // The node's stores of the scenario, recorded on an identical table.
    StoreLog log;
    {
      ContTable rec(c);
      build(rec.server->shard(0));
      rec.server->region(0).set_observer(&log);
      scenario_ops(rec.server->shard(0));
      rec.server->region(0).set_observer(nullptr);
    }
    ASSERT_GE(log.stores.size(), 11u);
    uint64_t retried = 0;
    for (uint32_t split = 0; split < 4; ++split)
    for (size_t n = 0; n <= log.stores.size(); ++n) {
      ContTable t(c);
      build(t.server->shard(0));
      PersistentRegion& region = t.server->region(0);
      // Between the segment READ and the group READ (split 0) or after word `split` of the group
      // READ: the first n stores.
      const auto stores = [&](uint64_t) {
        for (size_t j = 0; j < n; ++j) region.store(log.stores[j].first, log.stores[j].second);
      };
      auto transport = std::make_unique<HookTransport>(
          t.fabric->connect(), [&](uint64_t i) { if (split == 0 && i == 1) stores(i); }, stores, uint64_t{1}, split);
      Engine engine(*transport);
      ContinuityClient client(c, engine);
      std::vector<std::byte> out(8);
      OpStats st;
      const OpResult r = engine.run(client.get(k, out), &st);
      ASSERT_EQ(r.status, Status::kFound) << "scenario " << scenario << ", " << n << " stores after word " << split
                                          << " of the group READ";
      ASSERT_TRUE(out == value_for(k, 0, 8) || out == value_for(k, 1, 8))
          << "scenario " << scenario << ", " << n << " stores after word " << split << " of the group READ";
      ASSERT_GE(st.reads, 2u);
      retried += st.reads > 2;
    }
    // Once x holds the other item whole, the group READ is rejected and the lookup READs again.
    EXPECT_GT(retried, 0u) << "scenario " << scenario;
  }
}

// Online resizing with added groups: a write during a resize never takes an added slot of the
// new table (they are kept for the migration, whose overflow is at most the parent group's
// claims). Parent pair 0 holds 32 items (12 in the group) that all go to child pair 0, whose own
// 20 slots overflow by 12 into the child's group, which it shares with child pair 1. Writes to
// child pair 1 during the resize, with its own slots full, finish the resize first; the
// migration never finds a full group.
TEST(ContinuityAdded, WritesDuringAResizeLeaveTheNewGroupsToTheMigration) {
  ContinuityConfig c;
  c.buckets_per_node = 4;
  c.sbuckets = 3;
  c.value_bytes = 8;
  c.added_group_pairs = 2;
  c.max_resizes = 1;
  c.migrate_pairs_per_write = 0;
  ContTable t(c);
  ContinuityShard& s = t.server->shard(0);
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  auto put = [&](uint64_t k) {
    const Status st = s.put(k, value_for(k, 0, 8)).status;
    if (st == Status::kInserted) oracle[k] = value_for(k, 0, 8);
    return st;
  };
  for (uint64_t k : keys_in(c, 0, 1, 0, 28)) ASSERT_EQ(put(k), Status::kInserted);  // 16 own + 12 added
  for (uint64_t k : keys_in(c, 1, 1, 1, 4)) ASSERT_EQ(put(k), Status::kInserted);
  for (uint64_t k : keys_in(c, 2, 1, 2, 16)) ASSERT_EQ(put(k), Status::kInserted);
  for (uint64_t k : keys_in(c, 3, 1, 3, 4)) ASSERT_EQ(put(k), Status::kInserted);
  ASSERT_EQ(s.stats().added_writes, 12u);
  ASSERT_TRUE(s.start_resize());
  uint64_t full = 0;
  for (uint64_t k : keys_in(c, 3, 1, 3, 12, 1 + keys_in(c, 3, 1, 3, 4).back())) full += put(k) == Status::kFull;
  EXPECT_FALSE(s.resizing());
  EXPECT_EQ(s.level(), 1u);
  EXPECT_EQ(s.stats().migrated_added_items, 12u);
  EXPECT_EQ(full, 12u) << "child pair 1 is full and its group holds child 0's overflow; no level is left";
  EXPECT_EQ(s.records(), oracle.size());
  for (auto& [k, v] : s.items()) {
    ASSERT_TRUE(oracle.count(k));
    ASSERT_EQ(v, oracle[k]);
  }
  EXPECT_EQ(s.items().size(), oracle.size());
}

// Real threads: two writers update stable keys (some of which live in added slots) and insert
// and erase churn keys of the same near-full pairs (slots of the shared group change hands);
// two readers check every stable lookup (found, whole, never older).
TEST(ContinuityAdded, ReadersDuringWritesToAddedSlotsSeeEveryStableKeyWhole) {
  ContinuityConfig c;
  c.buckets_per_node = 4;
  c.value_bytes = 16;
  c.added_group_pairs = 2;
  ContTable t(c);
  const auto keys = distinct_keys(200, 81);
  std::vector<uint64_t> stable, churn;
  for (uint64_t k : keys) {
    if (stable.size() < 44 && t.server->shard(0).put(k, stamped(k, 0, 16)).status == Status::kInserted)
      stable.push_back(k);
    else if (stable.size() >= 44)
      churn.push_back(k);
  }
  ASSERT_EQ(stable.size(), 44u);  // of 52 slots: several in the group
  ASSERT_GT(t.server->stats().added_writes, 0u);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0}, multi{0};
  std::atomic<int> readers_reading{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(w + 500);
      while (readers_reading.load() < 2) std::this_thread::yield();
      std::unordered_set<uint64_t> in;
      for (uint64_t v = 1; v < 3000; ++v) {
        const size_t i = (rng() % (stable.size() / 2)) * 2 + w;
        (void)cl.run(cl.client.update(stable[i], stamped(stable[i], v, 16)));
        const uint64_t k = churn[(rng() % (churn.size() / 2)) * 2 + w];
        if (in.count(k)) {
          if (cl.run(cl.client.erase(k)).status == Status::kErased) in.erase(k);
        } else if (cl.run(cl.client.find_or_put(k, stamped(k, v, 16))).status == Status::kInserted) {
          in.insert(k);
        }
      }
    });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(r + 27);
      std::unordered_map<uint64_t, uint64_t> seen;
      std::vector<std::byte> out(16);
      for (uint64_t n = 0; !stop.load() || n < 1000; ++n) {
        if (n == 1) ++readers_reading;
        const uint64_t k = stable[rng() % stable.size()];
        const OpResult res = cl.run(cl.client.get(k, out));
        multi += cl.last.reads > 1;
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
  EXPECT_GT(multi.load(), 0u);
  EXPECT_GT(t.server->stats().added_vacated, 0u);
}

// Seed 002 Fig. 10: from a tiny table (8 numbered buckets = 20 buckets with the SBuckets, 80
// slots) doubling up to 9 times, the load factor (items / all slots, added ones included) at each
// resize's trigger and at the final kFull, without and with added groups for 1/20 and 1/10 of the
// pairs. With added groups a resize starts only when a segment and its group are both full.
TEST(ContinuityLoad, AddedSBucketsRaiseTheLoadFactorAtEachResize) {
  double mean[3] = {0, 0, 0};
  const uint32_t groups[3] = {0, 20, 10};
  for (int g = 0; g < 3; ++g) {
    std::string line;
    double sum = 0, at[10] = {};  // at[r]: load at resize r+1 (r = 9: the final kFull), summed over seeds
    uint64_t n = 0;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      ContinuityConfig c;
      c.buckets_per_node = 8;
      c.value_bytes = 0;
      c.max_resizes = 9;
      c.added_group_pairs = groups[g];
      c.hash_seed = seed;
      std::vector<std::byte> mem(c.region_bytes() + kCacheLine);
      const auto mis = reinterpret_cast<uintptr_t>(mem.data()) % kCacheLine;
      PersistentRegion region({mem.data() + (mis ? kCacheLine - mis : 0), c.region_bytes()}, PersistMode::kVolatile);
      ContinuityShard shard(c, 0, region);
      std::mt19937_64 rng(seed * 31);
      uint64_t resizes = 0;
      for (;;) {
        const uint64_t before = shard.records(), cap = shard.capacity();
        const Status s = shard.find_or_put(rng(), {}).status;
        const double lf = static_cast<double>(before) / static_cast<double>(cap);
        if (s == Status::kFull) {
          at[9] += lf;
          sum += lf, ++n;
          break;
        }
        if (shard.stats().resizes > resizes) {
          at[resizes] += lf;
          ++resizes;
          if (resizes > 3) sum += lf, ++n;  // from the fourth resize on (tables of 64+ buckets)
        }
      }
      ASSERT_EQ(resizes, 9u);
    }
    mean[g] = sum / static_cast<double>(n);
    for (int r = 0; r < 10; ++r) line += (r == 9 ? " | full " : " ") + std::to_string(at[r] / 3).substr(0, 5);
    std::printf("continuity Fig. 10, added groups %s: load at resizes 1..9 and at the final kFull (mean of 3 "
                "seeds):%s; mean from resize 4 on %.3f\n",
                groups[g] ? ("1/" + std::to_string(groups[g])).c_str() : "off", line.c_str(), mean[g]);
  }
  EXPECT_GT(mean[1], mean[0] + 0.05);
  EXPECT_GT(mean[2], mean[0] + 0.05);
}

}  // namespace
}  // namespace rdmahash

namespace rdmahash {
namespace {

// The added-group map (ContinuityConfig::group_of): every group of every table is shared by at
// most added_group_pairs pairs (and at least one), and the children of the pairs of one group of
// table l are the pairs of one or two whole groups of table l+1, which no other pair shares.
TEST(ContinuityLayout, AddedGroupsHoldAtMostTheirPairsAndChildrenStayTogether) {
  for (uint64_t buckets : {2u, 8u, 40u, 250u})
    for (uint32_t d : {1u, 2u, 3u, 10u, 20u}) {
      ContinuityConfig c;
      c.buckets_per_node = buckets;
      c.added_group_pairs = d;
      c.max_resizes = 7;
      for (uint32_t l = 0; l <= 7; ++l) {
        const uint64_t pairs = c.buckets_at(l) / 2, groups = c.groups_at(l);
        std::vector<uint64_t> members(groups, 0);
        for (uint64_t p = 0; p < pairs; ++p) {
          const uint64_t g = c.group_of(l, p);
          ASSERT_LT(g, groups);
          ++members[g];
        }
        for (uint64_t g = 0; g < groups; ++g) {
          ASSERT_GE(members[g], 1u);
          ASSERT_LE(members[g], d) << buckets << " buckets, 1/" << d << ", table " << l;
        }
        if (l == 7) break;
        // Children P and P + pairs of table l+1: the parent group of each group of table l+1 is one.
        std::vector<int64_t> parent_of(c.groups_at(l + 1), -1);
        for (uint64_t p = 0; p < pairs; ++p)
          for (uint64_t child : {p, p + pairs}) {
            int64_t& pg = parent_of[c.group_of(l + 1, child)];
            if (pg < 0) pg = static_cast<int64_t>(c.group_of(l, p));
            ASSERT_EQ(pg, static_cast<int64_t>(c.group_of(l, p)));
          }
        ASSERT_EQ(c.table_offset(l + 1), c.table_offset(l) + c.table_bytes(l));
      }
      ASSERT_EQ(c.region_bytes(), c.table_offset(8));
    }
}


// Items older than the seq window (continuity.h, "Old items"): 2^16 indicator stores of a pair
// that leave one of its items alone put that item's pub outside the 17-bit window. It must stay
// readable by a one-sided lookup (two READs that return the same bytes: 2 round trips) and a
// clean image holding it must recover. One pair per node; every update of b is one store. a is in
// the odd bucket (its slots follow the indicator); ae, in bucket 2i of the even segment, is read
// between the echo and the indicator and needs no second READ however old.
TEST(ContinuityOldItems, AnItemOlderThanTheSeqWindowIsFoundAndTheImageRecovers) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  ContinuityShard& shard = t.server->shard(0);
  uint64_t a = 0, ae = 0, b = 0;
  for (uint64_t k = 1; !a || !ae || !b; ++k) {
    uint64_t& slot = continuity_place(c, k).bucket == 1 ? (a ? b : a) : ae;
    if (!slot) slot = k;
  }
  ASSERT_EQ(shard.put(a, value_for(a, 0, 8)).status, Status::kInserted);
  ASSERT_EQ(shard.put(ae, value_for(ae, 0, 8)).status, Status::kInserted);
  ASSERT_EQ(shard.put(b, value_for(b, 0, 8)).status, Status::kInserted);
  std::vector<std::byte> out(8);
  OpStats st;
  ASSERT_EQ(cl.engine.run(cl.client.get(a, out), &st).status, Status::kFound);
  EXPECT_EQ(st.reads, 1u);  // young: inside the window
  // a's pub is 1; after these the pair's seq is 70 003: (seq - pub) mod 2^17 = 70 002 >= 2^16.
  for (uint32_t i = 1; i <= 70000; ++i) ASSERT_EQ(shard.update(b, value_for(b, i, 8)).status, Status::kUpdated);
  st = OpStats{};
  const OpResult r = cl.engine.run(cl.client.get(a, out), &st);
  EXPECT_EQ(r.status, Status::kFound);
  EXPECT_EQ(out, value_for(a, 0, 8));
  EXPECT_EQ(st.reads, 2u) << "an old item costs one more READ, no more";
  st = OpStats{};
  ASSERT_EQ(cl.engine.run(cl.client.get(ae, out), &st).status, Status::kFound);
  EXPECT_EQ(out, value_for(ae, 0, 8));
  EXPECT_EQ(st.reads, 1u) << "an old item of bucket 2i in a quiet even segment";
  ASSERT_EQ(cl.run(cl.client.get(b, out)).status, Status::kFound);
  EXPECT_EQ(out, value_for(b, 70000, 8));
  EXPECT_EQ(cl.run(cl.client.get(999983, out)).status, Status::kNotFound);
  // A copy of the (fully persisted) image recovers with a in it.
  std::span<std::byte> img = t.server->region(0).bytes();
  test::AlignedImage copy(img.size());
  std::memcpy(copy.bytes.data(), img.data(), img.size());
  PersistentRegion r2(copy.bytes, PersistMode::kVolatile);
  ContinuityShard reopened(c, 0, r2);
  EXPECT_EQ(reopened.find(a), std::optional<std::vector<std::byte>>(value_for(a, 0, 8)));
  EXPECT_EQ(reopened.find(b), std::optional<std::vector<std::byte>>(value_for(b, 70000, 8)));
}

// The same for items in the pair's added group: the pair full, then 2^16 stores of one key put
// and erased again; every key, in the segment or in the group, is found whole.
TEST(ContinuityOldItems, OldItemsInTheAddedGroupAreFound) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  c.added_group_pairs = 1;
  ContTable t(c);
  SyncClient cl(*t.fabric, c);
  ContinuityShard& shard = t.server->shard(0);
  std::vector<uint64_t> keys;
  for (uint64_t k = 100; keys.size() < 200 && shard.stats().added_writes < 3; ++k)
    if (shard.put(k, value_for(k, 0, 8)).status == Status::kInserted) keys.push_back(k);
  ASSERT_GE(shard.stats().added_writes, 3u);
  const uint64_t churn = 7;
  for (uint32_t i = 0; i < 35000; ++i) {
    ASSERT_EQ(shard.put(churn, value_for(churn, i, 8)).status, Status::kInserted);
    ASSERT_EQ(shard.erase(churn).status, Status::kErased);
  }
  std::vector<std::byte> out(8);
  for (uint64_t k : keys) {
    OpStats st;
    ASSERT_EQ(cl.engine.run(cl.client.get(k, out), &st).status, Status::kFound) << k;
    EXPECT_EQ(out, value_for(k, 0, 8)) << k;
    // At most: the segment READ twice before the group READ, then both again (1 + 2 + 2).
    EXPECT_LE(st.reads, 5u) << k;
  }
  EXPECT_EQ(cl.run(cl.client.get(churn, out)).status, Status::kNotFound);
}


std::vector<uint64_t> keys_in_bucket(const ContinuityConfig& c, uint64_t b, size_t n) {
  std::vector<uint64_t> out;
  for (uint64_t k = 1; out.size() < n; ++k)
    if (continuity_place(c, k, 0).bucket == b) out.push_back(k);
  return out;
}

// (Found by review of the first "Old items" rule, which compared slot bytes across two READs
// without the indicator: it returned vA here.) One pair. Key k's ANCIENT value vA (freed 2^17
// publications ago; its bytes are still in slot x = bit 17) must not be returned while k's value is
// vB during the whole lookup:
//   READ 1 (s1 = 131071): y = bit 16 holds k=vB (pub 4, out of the window) -> unstable.
//   node:  put j -> x (pub 131072), seq s2 = 131072
//   READ 2 reads the indicator (x and y valid, s2)
//   node:  erase j; update k -> vA writes x = (k, vA, pub 131074 == 2 mod 2^17) -- bytes equal
//          to READ 1's stale copy of x; the indicator store publishing it has NOT happened
//   READ 2 reads the slots: y settled (same as READ 1), x settled (same as READ 1) -> hit = x.
TEST(ContinuityOldItems, StaleBytesEqualToARewriteAreNotTakenAcrossAChangedIndicator) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  const auto b1 = keys_in_bucket(c, 1, 3);
  const uint64_t k = b1[0], f1 = b1[1], j = b1[2], h = keys_in_bucket(c, 0, 1)[0];
  const auto vA = value_for(k, 0, 8), vB = value_for(k, 1, 8);
  auto build = [&](ContinuityShard& s) {
    ASSERT_EQ(s.put(f1, value_for(f1, 0, 8)).status, Status::kInserted);  // bit 16, seq 1
    ASSERT_EQ(s.put(k, vA).status, Status::kInserted);                    // bit 17 = x, pub 2
    ASSERT_EQ(s.erase(f1).status, Status::kErased);                         // seq 3
    ASSERT_EQ(s.update(k, vB).status, Status::kUpdated);                   // bit 16 = y, pub 4; x freed
    ASSERT_EQ(s.put(h, value_for(h, 0, 8)).status, Status::kInserted);     // seq 5 (bucket 0)
    for (uint32_t i = 1; i <= 131066; ++i) ASSERT_EQ(s.update(h, value_for(h, i, 8)).status, Status::kUpdated);
    // seq = 131071
  };
  StoreLog log;
  {
    ContTable rec(c);
    build(rec.server->shard(0));
    ASSERT_EQ(rec.server->shard(0).put(j, value_for(j, 0, 8)).status, Status::kInserted);
    rec.server->region(0).set_observer(&log);
    ASSERT_EQ(rec.server->shard(0).erase(j).status, Status::kErased);
    ASSERT_EQ(rec.server->shard(0).update(k, vA).status, Status::kUpdated);
    rec.server->region(0).set_observer(nullptr);
  }
  ASSERT_GE(log.stores.size(), 4u);
  ContTable t(c);
  ContinuityShard& shard = t.server->shard(0);
  build(shard);
  PersistentRegion& region = t.server->region(0);
  auto transport = std::make_unique<HookTransport>(
      t.fabric->connect(),
      [&](uint64_t i) {
        if (i == 1) {
          ASSERT_EQ(shard.put(j, value_for(j, 0, 8)).status, Status::kInserted);
        }
      },
      [&](uint64_t i) {
        if (i == 1)  // erase j + the slot words of "update k -> vA", not its indicator store (nor the echo after it)
          for (size_t n = 0; n + 2 < log.stores.size(); ++n) region.store(log.stores[n].first, log.stores[n].second);
      },
      1, 1);  // the odd segment starts with the indicator word
  Engine engine(*transport);
  ContinuityClient client(c, engine);
  std::vector<std::byte> out(8);
  OpStats st;
  const OpResult r = engine.run(client.get(k, out), &st);
  ASSERT_EQ(r.status, Status::kFound);
  EXPECT_EQ(out, vB) << "k was vB for the whole lookup; vA was its value 2^17 publications ago "
                     << (out == vA ? "(got vA)" : "(got something else)");
  EXPECT_EQ(st.rpcs, 0u);  // two READs under one unchanged indicator settle it: no need to ask
}



// The segment's half of the old-item rule's byte comparison (the group's is below): two READs
// under one unchanged indicator word must also return the same bytes of a slot outside the window,
// because the second READ copies the slot after its indicator, where the node may already have
// freed and rewritten it. One pair; o is old (70 000 stores later) in slot x of the odd bucket; a
// lookup of o2 (absent): READ 1 (o outside the window: unstable), then READ 2, inside which, after
// its indicator word, the node erases o and writes o2 into x without publishing it. Same
// indicator, x now o2's whole item with pub > s: it must not be taken (o2 was never published).
TEST(ContinuityOldItems, ARewriteOfASegmentSlotUnderTheSameIndicatorIsNotTaken) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  const auto b1 = keys_in_bucket(c, 1, 3);
  const uint64_t o = b1[0], e = b1[1], o2 = b1[2];
  auto build = [&](ContinuityShard& s) {
    ASSERT_EQ(s.put(o, value_for(o, 0, 8)).status, Status::kInserted);  // x = bit 16, pub 1
    ASSERT_EQ(s.put(e, value_for(e, 0, 8)).status, Status::kInserted);
    for (uint32_t i = 0; i < 35000; ++i) {  // 70 000 stores: o is old
      ASSERT_EQ(s.erase(e).status, Status::kErased);
      ASSERT_EQ(s.put(e, value_for(e, 0, 8)).status, Status::kInserted);
    }
  };
  StoreLog log;  // "erase o, put o2" on an identical table
  {
    ContTable rec(c);
    build(rec.server->shard(0));
    rec.server->region(0).set_observer(&log);
    ASSERT_EQ(rec.server->shard(0).erase(o).status, Status::kErased);
    ASSERT_EQ(rec.server->shard(0).put(o2, value_for(o2, 0, 8)).status, Status::kInserted);
    rec.server->region(0).set_observer(nullptr);
  }
  ASSERT_GE(log.stores.size(), 5u);
  ContTable t(c);
  build(t.server->shard(0));
  PersistentRegion& region = t.server->region(0);
  auto transport = std::make_unique<HookTransport>(
      t.fabric->connect(), [](uint64_t) {},
      [&](uint64_t) {  // erase o, and o2's slot words, not its indicator store (nor the echo after it)
        for (size_t n = 0; n + 2 < log.stores.size(); ++n) region.store(log.stores[n].first, log.stores[n].second);
      },
      1, 1);  // READ 2, after the odd segment's first word, its indicator
  Engine engine(*transport);
  ContinuityClient client(c, engine);
  std::vector<std::byte> out(8);
  OpStats st;
  EXPECT_EQ(engine.run(client.get(o2, out), &st).status, Status::kNotFound) << "an unpublished item was returned";
  EXPECT_GE(st.reads, 3u);
}

// An old item under a pair whose indicator changes before every READ (a hot neighbour): two READs
// under one indicator never come, so after a few the lookup asks the node (kGet RPC) and gets the
// item from under the shard lock.
TEST(ContinuityOldItems, AnOldItemBesideAHotKeyIsAnsweredByTheNode) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  ContTable t(c);
  ContinuityShard& shard = t.server->shard(0);
  const auto odd = keys_in_bucket(c, 1, 3);
  const uint64_t a = odd[0], b = odd[1];  // a's slots follow the indicator: the window applies
  ASSERT_EQ(shard.put(a, value_for(a, 0, 8)).status, Status::kInserted);
  ASSERT_EQ(shard.put(b, value_for(b, 0, 8)).status, Status::kInserted);
  uint32_t v = 0;
  for (; v < 70000; ++v) ASSERT_EQ(shard.update(b, value_for(b, v + 1, 8)).status, Status::kUpdated);
  auto transport = std::make_unique<HookTransport>(t.fabric->connect(), [&](uint64_t i) {
    if (i > 64) throw FabricError("test: the lookup kept reading instead of asking the node");
    ASSERT_EQ(shard.update(b, value_for(b, ++v, 8)).status, Status::kUpdated);  // b is hot
  });
  Engine engine(*transport);
  ContinuityClient client(c, engine);
  std::vector<std::byte> out(8);
  OpStats st;
  ASSERT_EQ(engine.run(client.get(a, out), &st).status, Status::kFound);
  EXPECT_EQ(out, value_for(a, 0, 8));
  EXPECT_EQ(st.rpcs, 1u);
  EXPECT_EQ(st.reads, 4u);  // kOldItemReads READs, then the node
  st = OpStats{};
  ASSERT_EQ(engine.run(client.get(odd[2], out), &st).status, Status::kNotFound);  // a miss asks the same way
  EXPECT_EQ(st.rpcs, 1u);
}

// The group's half of the old-item rule: two group READs under one unchanged indicator must also
// return the same bytes. Item o sits old (70 000 stores later) in added slot x of a full pair; a
// lookup of o2 (absent) READs segment and group (x: outside the window, unstable), then segment
// again (same indicator); before its next group READ the node erases o and writes o2 into x,
// the group's only free slot, but does not claim it yet. x now holds a whole item of this pair
// with pub > s under the same indicator: it must not be taken (o2 was never published).
TEST(ContinuityOldItems, ARewriteOfAClaimedSlotUnderTheSameIndicatorIsNotTaken) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  c.added_group_pairs = 1;
  auto claims_of = [&](PersistentRegion& region, uint64_t key) {
    const ContinuityPlacement p = continuity_place(c, key);
    return (region.load(p.segment_offset + p.indicator_pos) >> 32) & 0xFFF;
  };
  uint64_t o = 0, o2 = 0, e = 0;
  auto build = [&](ContinuityShard& s, PersistentRegion& region) {
    // Fill: o is the first key to land in the group; then keys until the group is full.
    std::vector<uint64_t> in;
    for (uint64_t k = 100; claims_of(region, 100) != 0xFFF; ++k) {
      const uint64_t before = s.stats().added_writes;
      if (s.put(k, value_for(k, 0, 8)).status != Status::kInserted) continue;
      if (o == 0 && s.stats().added_writes > before) o = k;
      in.push_back(k);
    }
    ASSERT_NE(o, 0u);
    e = in.front() == o ? in.back() : in.front();
    for (uint32_t i = 0; i < 35000; ++i) {  // 70 000 stores: o is old
      ASSERT_EQ(s.erase(e).status, Status::kErased);
      ASSERT_EQ(s.put(e, value_for(e, 0, 8)).status, Status::kInserted);
    }
    if (o2 == 0)  // a key of o's bucket that is not in the table (its segment is full)
      for (uint64_t k = 100000;; ++k)
        if (continuity_place(c, k).bucket == continuity_place(c, o).bucket && !s.find(k)) {
          o2 = k;
          break;
        }
  };
  // The node's stores of "erase o, put o2", recorded on an identical table.
  StoreLog log;
  {
    ContTable rec(c);
    build(rec.server->shard(0), rec.server->region(0));
    rec.server->region(0).set_observer(&log);
    ASSERT_EQ(rec.server->shard(0).erase(o).status, Status::kErased);
    ASSERT_EQ(rec.server->shard(0).put(o2, value_for(o2, 0, 8)).status, Status::kInserted);
    rec.server->region(0).set_observer(nullptr);
    ASSERT_EQ(claims_of(rec.server->region(0), o2), 0xFFFu) << "o2 took x, the one slot o freed";
  }
  ASSERT_GE(log.stores.size(), 4u);
  ContTable t(c);
  PersistentRegion& region = t.server->region(0);
  build(t.server->shard(0), region);
  auto transport = std::make_unique<HookTransport>(t.fabric->connect(), [&](uint64_t i) {
    // READs: segment (its items are old too: unstable), segment again (settled) and group (x
    // old: unstable), segment (settled), then the second group READ — before it: erase o, and o2's
    // slot words, not its claim (the indicator store and the echo after it).
    if (i == 4)
      for (size_t n = 0; n + 2 < log.stores.size(); ++n) region.store(log.stores[n].first, log.stores[n].second);
  });
  Engine engine(*transport);
  ContinuityClient client(c, engine);
  std::vector<std::byte> out(8);
  OpStats st;
  EXPECT_EQ(engine.run(client.get(o2, out), &st).status, Status::kNotFound) << "an unpublished item was returned";
  EXPECT_GE(st.reads, 5u);
}

// A client built without added SBuckets reading a table that has them: a clear error, not a
// division by zero.
TEST(ContinuityOldItems, ClientWithoutAddedSBucketsOnATableWithThemIsRefused) {
  ContinuityConfig c;
  c.buckets_per_node = 2;
  c.sbuckets = 3;
  c.value_bytes = 8;
  c.added_group_pairs = 1;
  ContTable t(c);
  ContinuityShard& shard = t.server->shard(0);
  for (uint64_t k = 100; k < 400 && shard.stats().added_writes == 0; ++k) (void)shard.put(k, value_for(k, 0, 8));
  ASSERT_GT(shard.stats().added_writes, 0u);
  ContinuityConfig wrong = c;
  wrong.added_group_pairs = 0;
  SyncClient cl(*t.fabric, wrong);
  std::vector<std::byte> out(8);
  EXPECT_THROW(cl.run(cl.client.get(123456789, out)), InvalidArgument);
}

}  // namespace
}  // namespace rdmahash
