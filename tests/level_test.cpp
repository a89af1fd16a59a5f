// Level hashing (OSDI'18) on LocalFabric: layout, one round trip per hit, persists per op,
// readers racing the node's writes (forced interleavings; threads during resizes), crash images at
// every store/persist of a workload and of a resize (the machinery of continuity_crash_test),
// corrupt images refused (random operations against std::unordered_map: conformance_test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "pm_test_util.h"
#include "rdmahash/level.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::InterleavingTransport;
using test::value_for;
using test::AlignedImage;
using test::distinct_keys;
using test::Event;
using test::intact;
using test::Recorder;
using test::stamped;
using test::State;
using test::state_of;
using test::Step;

using LevelTable = test::ServedTable<LevelServer, LevelConfig>;
using SyncClient = test::SyncClientOf<LevelClient, LevelConfig>;

TEST(LevelLayout, LevelsDoubleAndFollowEachOther) {
  LevelConfig c;
  c.base_buckets = 5;
  c.max_resizes = 2;
  c.value_bytes = 8;
  EXPECT_EQ(c.slot_bytes(), 32u);
  EXPECT_EQ(c.bucket_bytes(), 8u + 4 * 32u);
  EXPECT_EQ(c.levels(), 4u);
  for (uint32_t l = 0; l + 1 < c.levels(); ++l) {
    EXPECT_EQ(c.level_buckets(l + 1), 2 * c.level_buckets(l));
    EXPECT_EQ(c.level_offset(l + 1), c.level_offset(l) + c.level_buckets(l) * c.bucket_bytes());
  }
  EXPECT_EQ(c.region_bytes(), kLevelAreaOffset + 15 * 5 * c.bucket_bytes());
  c.max_resizes = 9;
  EXPECT_THROW(c.validate(), InvalidArgument);
  EXPECT_THROW(LevelConfig::for_records(10, 1.0, 1), InvalidArgument);
}

TEST(Level, HitIsOneRoundTripAndWritesPersistTwoTwoOne) {
  LevelConfig c;
  c.base_buckets = 64;
  c.max_resizes = 0;
  c.value_bytes = 16;
  LevelTable t(c);
  SyncClient cl(*t.fabric, c);
  const auto keys = distinct_keys(300, 3);
  for (uint64_t k : keys) {
    const OpResult r = cl.run(cl.client.find_or_put(k, value_for(k, 0, 16)));
    ASSERT_EQ(r.status, Status::kInserted);
    EXPECT_GE(r.persists, 2u);  // 2, plus 3 per movement
  }
  std::vector<std::byte> out(16);
  (void)cl.run(cl.client.get(keys[0], out));  // the client's first lookup also reads the level word
  for (uint64_t k : keys) {
    const OpResult r = cl.run(cl.client.get(k, out));
    ASSERT_EQ(r.status, Status::kFound);
    EXPECT_EQ(cl.last.round_trips, 1u);
    EXPECT_LE(cl.last.reads, 5u);  // the level word and (up to) four candidate buckets, one batch
    EXPECT_EQ(out, value_for(k, 0, 16));
    const OpResult u = cl.run(cl.client.update(k, value_for(k, 1, 16)));
    if (u.status == Status::kUpdated) { EXPECT_GE(u.persists, 2u); }
    const OpResult e = cl.run(cl.client.erase(k));
    EXPECT_EQ(e.status, Status::kErased);
    EXPECT_EQ(e.persists, 1u);
    const OpResult m = cl.run(cl.client.get(k, out));
    EXPECT_EQ(m.status, Status::kNotFound);
    EXPECT_EQ(cl.last.round_trips, 2u);  // a miss is confirmed by a second batch
  }
  const LevelStats s = t.server->stats();
  EXPECT_EQ(s.inserts, 300u);
  EXPECT_EQ((s.insert_persists + s.update_persists - 2 * (s.inserts + s.updates)), 3 * s.moves + s.moved_updates);
  EXPECT_EQ(s.erase_persists, s.erases);
  EXPECT_EQ(t.server->records(), 0u);
}

// Random operations against std::unordered_map, through resizes to kFull: tests/conformance_test.cpp
// (Conformance/level*).

TEST(Level, BadInputFailsBeforeAnyRequest) {
  LevelConfig c;
  c.value_bytes = 8;
  LevelTable t(c);
  SyncClient cl(*t.fabric, c);
  EXPECT_THROW(cl.run(cl.client.find_or_put(1, std::vector<std::byte>(9))), InvalidArgument);
  EXPECT_THROW(cl.run(cl.client.put(1, std::vector<std::byte>(7))), InvalidArgument);
  EXPECT_EQ(cl.transport->counters().batches, 0u);
  LevelConfig other = c;
  other.base_buckets = 8;
  SyncClient wrong(*t.fabric, other);
  EXPECT_THROW(wrong.run(wrong.client.find_or_put(1, std::vector<std::byte>(8))), InvalidArgument);
  EXPECT_EQ(t.server->records(), 0u);
}

// Forced interleavings: node-side writes (inserts that move items between their two buckets,
// out-of-place updates, erases: slot reuse everywhere) between the words of every READ. Stable
// keys are never erased: a lookup must find them, whole, never older than before.
TEST(LevelInterleaving, WritesBetweenWordsOfAReadNeverTearOrHideAnItem) {
  LevelConfig c;
  c.base_buckets = 4;  // 12 buckets, 48 slots, kept ~85% full: movements are frequent
  c.max_resizes = 0;
  c.value_bytes = 24;
  LevelTable t(c);
  LevelShard& shard = t.server->shard(0);
  const auto all = distinct_keys(400, 21);
  std::vector<uint64_t> stable, churn;
  for (uint64_t k : all) {
    if (stable.size() < 30) {
      if (shard.put(k, stamped(k, 0, 24)).status == Status::kInserted) stable.push_back(k);
    } else if (churn.size() < 60) {
      churn.push_back(k);
    }
  }
  ASSERT_EQ(stable.size(), 30u);
  const auto n = test::reads_between_node_writes<LevelClient>(*t.fabric, shard, c, stable, churn, 20000, 24);
  EXPECT_EQ(n.missed, 0u) << "a present key was reported absent";
  EXPECT_EQ(n.torn + n.churn_torn, 0u) << "a torn value was returned";
  EXPECT_EQ(n.stale, 0u) << "a lookup returned an older value than an earlier lookup";
  EXPECT_GT(t.server->stats().moves, 100u);
  EXPECT_GT(n.writes, 20000u);
}

// The window a whole-operation interleaving cannot reach: a READ of a bucket gets its token word
// (slot 0 valid, holding K), then the node erases K and starts inserting M into slot 0 — item
// written and persisted, token not yet stored (the insert is cut there) — and the READ gets the
// slots. Slot 0 now holds a consistent M published by no token the reader saw (pub > seq): M must
// not be found. Deterministic: the split is after the first word of the first bucket READ (of the
// lookup's first batch, or, after `skip_batches`, of a later one).
class SplitFirstBucketRead final : public Transport {
 public:
  SplitFirstBucketRead(std::unique_ptr<Transport> inner, std::function<void()> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  void arm(std::function<void()> hook, uint32_t skip_batches = 0) {
    hook_ = std::move(hook);
    skip_ = skip_batches;
  }
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    const bool split = skip_ == 0;
    if (skip_ > 0) --skip_;
    for (Request& r : batch) {
      if (split && r.kind == ReqKind::kRead && r.len > 8 && hook_) {
        Request head = r, tail = r;
        head.len = 8;
        tail.addr.offset += 8;
        tail.buf = static_cast<std::byte*>(r.buf) + 8;
        tail.len = r.len - 8;
        inner_->execute(std::span<Request>(&head, 1));
        std::exchange(hook_, nullptr)();
        inner_->execute(std::span<Request>(&tail, 1));
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
  uint32_t skip_ = 0;
};

struct CutAfterFirstPersist final : PersistObserver {
  struct Cut {};
  void on_store(uint64_t, uint64_t) override {}
  void on_persist(uint64_t, uint64_t) override { throw Cut{}; }
};

// K in slot 0 of its top-level bucket; the READ of that bucket in the lookup's batch
// `skip_batches` + 1 is split after its token word, where K is erased and M's insert into slot 0 is
// cut between its item persist and its token store. The lookup of M must not find it.
void unpublished_item_is_never_found(uint32_t skip_batches) {
  LevelConfig c;
  c.base_buckets = 1;  // top level: 2 buckets, bottom: 1
  c.max_resizes = 0;
  c.value_bytes = 8;
  LevelTable t(c);
  LevelShard& shard = t.server->shard(0);
  const uint64_t k = 1;
  const LevelPlacement pk = level_place(c, k);
  uint64_t m = 2;  // a key whose first top-level bucket is K's, so its insert takes K's freed slot 0
  while (level_place(c, m).h1 % 2 != pk.h1 % 2) ++m;
  ASSERT_EQ(shard.put(k, value_for(k, 0, 8)).status, Status::kInserted);
  auto cut_insert = [&] {
    ASSERT_EQ(shard.erase(k).status, Status::kErased);
    CutAfterFirstPersist cut;
    PersistentRegion& region = t.server->region(0);
    region.set_observer(&cut);
    EXPECT_THROW(shard.put(m, value_for(m, 1, 8)), CutAfterFirstPersist::Cut);
    region.set_observer(nullptr);
  };
  auto transport = std::make_unique<SplitFirstBucketRead>(t.fabric->connect(), nullptr);
  SplitFirstBucketRead* split = transport.get();
  Engine engine(*transport);
  LevelClient reader(c, engine);
  std::vector<std::byte> out(8);
  ASSERT_EQ(engine.run(reader.get(k, out)).status, Status::kFound);  // caches the level word
  split->arm(cut_insert, skip_batches);
  OpStats st;
  EXPECT_EQ(engine.run(reader.get(m, out), &st).status, Status::kNotFound) << "an unpublished item was returned";
  if (skip_batches > 0) {
    EXPECT_GE(st.round_trips, 3u);  // the miss, the unstable batch, the confirmation
  }
  EXPECT_FALSE(shard.find(m).has_value());
  EXPECT_FALSE(shard.find(k).has_value());
}

TEST(LevelInterleaving, AnItemWrittenButNotPublishedIsNeverFound) { unpublished_item_is_never_found(0); }

// The same in a lookup's second batch (a miss is always read twice), where the first batch's copy
// of slot 0 (K, published) is at hand: M's bytes differ from it, so the old-item rule (level.h)
// must not take M either.
TEST(LevelInterleaving, AnItemWrittenButNotPublishedIsNeverFoundOnASecondBatch) { unpublished_item_is_never_found(1); }

// Real threads: a writer updating stable keys and inserting new ones (which resizes the top level
// three times) while two readers look the stable keys up.
TEST(LevelConcurrency, ReadersDuringWritesAndResizesSeeWholeMonotoneValues) {
  LevelConfig c;
  c.base_buckets = 8;
  c.max_resizes = 3;
  c.value_bytes = 16;
  LevelTable t(c);
  const auto keys = distinct_keys(900, 33);
  std::vector<uint64_t> stable(keys.begin(), keys.begin() + 40), fresh(keys.begin() + 40, keys.end());
  for (uint64_t k : stable) ASSERT_EQ(t.server->shard(0).put(k, stamped(k, 0, 16)).status, Status::kInserted);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  std::atomic<int> readers_reading{0};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    SyncClient cl(*t.fabric, c);
    while (readers_reading.load() < 2) std::this_thread::yield();
    for (size_t i = 0; i < fresh.size(); ++i) {
      (void)cl.run(cl.client.find_or_put(fresh[i], stamped(fresh[i], 0, 16)));
      const uint64_t k = stable[i % stable.size()];
      (void)cl.run(cl.client.update(k, stamped(k, i + 1, 16)));
    }
  });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      SyncClient cl(*t.fabric, c);
      std::mt19937_64 rng(r + 7);
      std::unordered_map<uint64_t, uint64_t> seen;
      std::vector<std::byte> out(16);
      for (uint64_t n = 0; !stop.load() || n < 1000; ++n) {
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
  stop = true;
  threads[1].join();
  threads[2].join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(t.server->stats().resizes, 3u);
  EXPECT_GE(reads.load(), 2000u);
}

// --- crash images ---------------------------------------------------------------------------------

State recovered_state(const LevelConfig& c, std::span<std::byte> image) {
  PersistentRegion region(image, PersistMode::kVolatile);
  LevelShard shard(c, 0, region);  // throws PmemError on any violated invariant; finishes a resize
  return state_of(shard);
}

// Before every event: the persisted lines only, plus a random prefix of each line's unpersisted
// stores, plus all of them; each image must recover to the acknowledged state (or the in-flight
// operation's), and a second recovery of the recovered image must find nothing to repair.
struct CrashChecker {
  const LevelConfig& cfg;
  const std::vector<std::byte>& initial;
  const std::vector<Event>& log;
  const std::vector<Step>& steps;
  const State& start;
  uint64_t checked = 0;
  std::string first_failure;
  bool refusal_ok = false;  // an image without its magic may be refused (an interrupted restore)
  uint64_t refused = 0;

  void run(uint64_t seed) {
    test::replay_crashes(initial, log, seed, [&](size_t e, std::span<std::byte> image, int mode) { check(e, image, mode); },
                         [&] { return !first_failure.empty(); });
  }

  void check(size_t e, std::span<std::byte> image, int mode) {
    ++checked;
    std::string why;
    try {
      const State got = recovered_state(cfg, image);
      why = test::acknowledged_mismatch(got, steps, start, e);
      PersistentRegion again(image, PersistMode::kVolatile);
      LevelShard s2(cfg, 0, again);
      if (why.empty() && s2.recovery_repairs() != 0) why = "a recovered image needed repairs again";
    } catch (const PmemError& ex) {
      if (refusal_ok && std::string(ex.what()).find("not a level table image") != std::string::npos) ++refused;
      else why = std::string("recovery failed: ") + ex.what();
    } catch (const std::exception& ex) {
      why = std::string("recovery failed: ") + ex.what();
    }
    if (!why.empty() && first_failure.empty()) first_failure = test::crash_label(e, mode) + ": " + why;
  }
};

// A workload of inserts (with movements and two resizes of the top level), updates and erases.
TEST(LevelCrash, EveryCrashPointRecoversTheAcknowledgedOperations) {
  LevelConfig c;
  c.base_buckets = 2;  // 6 buckets, 24 slots: movements at once, then resizes to 12+24 and 24+48
  c.max_resizes = 2;
  c.value_bytes = 16;
  test::RecordedShard<LevelShard, LevelConfig> w(c);  // records from here on
  auto& [live, region, shard, initial, rec] = w;
  std::mt19937_64 rng(2024);
  const auto universe = distinct_keys(110, 77);
  State state;
  std::vector<Step> steps;
  uint64_t kinds[4] = {0, 0, 0, 0};
  for (int i = 0; i < 700; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    const auto v = value_for(k, static_cast<uint32_t>(i), c.value_bytes);
    const size_t begin = rec.log.size();
    const uint64_t x = rng() % 10;
    LevelResult r;
    if (x < 5) r = shard.find_or_put(k, v);
    else if (x < 8) r = shard.update(k, v);
    else r = shard.erase(k);
    test::acknowledge(state, kinds, k, v, r.status);
    steps.push_back({begin, rec.log.size(), state});
  }
  region.set_observer(nullptr);
  const LevelStats st = shard.stats();
  ASSERT_EQ(st.resizes, 2u);
  ASSERT_GT(st.moves, 5u);
  ASSERT_GT(st.moved_updates, 0u);  // updates published in another bucket, then cleared in theirs
  ASSERT_GT(kinds[1], 50u);
  ASSERT_GT(kinds[2], 30u);
  ASSERT_EQ(recovered_state(c, live.bytes), state);
  const State empty;
  CrashChecker check{c, initial, rec.log, steps, empty, 0, {}};
  check.run(7);
  EXPECT_EQ(check.first_failure, "");
  uint64_t persists = 0;
  for (const Event& e : rec.log) persists += e.persist;
  std::printf("level crash test: %zu ops (%lu inserts, %lu updates, %lu erases, %lu full; %lu moves, %lu resizes), "
              "%zu events (%lu persists), %lu crash images checked; %lu updates moved to another bucket\n",
              steps.size(), static_cast<unsigned long>(kinds[0]), static_cast<unsigned long>(kinds[1]),
              static_cast<unsigned long>(kinds[2]), static_cast<unsigned long>(kinds[3]),
              static_cast<unsigned long>(st.moves), static_cast<unsigned long>(st.resizes), rec.log.size(),
              static_cast<unsigned long>(persists), static_cast<unsigned long>(check.checked),
              static_cast<unsigned long>(st.moved_updates));
  EXPECT_GT(check.checked, rec.log.size());
}

// One explicit resize of a full table: every crash point recovers (finishing the resize) to the
// complete table.
TEST(LevelCrash, EveryCrashPointOfAResizeRecoversToTheCompleteTable) {
  LevelConfig c;
  c.base_buckets = 4;
  c.max_resizes = 1;
  c.value_bytes = 8;
  AlignedImage live(c.region_bytes());
  PersistentRegion region(live.bytes, PersistMode::kVolatile);
  LevelShard shard(c, 0, region);
  State state;
  std::mt19937_64 rng(99);
  while (state.size() < 40) {
    const uint64_t k = rng();
    const auto v = value_for(k, 3, 8);
    if (shard.find_or_put(k, v).status == Status::kInserted) state[k] = v;
  }
  ASSERT_EQ(shard.top_level(), 1u);
  std::vector<std::byte> initial(live.bytes.begin(), live.bytes.end());
  Recorder rec;
  region.set_observer(&rec);
  shard.resize();
  region.set_observer(nullptr);
  ASSERT_EQ(shard.top_level(), 2u);
  ASSERT_GT(shard.stats().rehashed, 0u);
  ASSERT_EQ(recovered_state(c, live.bytes), state);
  const std::vector<Step> steps{{0, rec.log.size(), state}};
  CrashChecker check{c, initial, rec.log, steps, state, 0, {}};
  check.run(3);
  EXPECT_EQ(check.first_failure, "");
  std::printf("level resize crash test: %lu items rehashed, %zu events, %lu crash images checked\n",
              static_cast<unsigned long>(shard.stats().rehashed), rec.log.size(),
              static_cast<unsigned long>(check.checked));
}

// --- real files and corrupt images ---------------------------------------------------------------

using test::slurp;

LevelConfig file_config() {
  LevelConfig c;
  c.base_buckets = 8;
  c.max_resizes = 1;
  c.value_bytes = 16;
  return c;
}

State make_file(const std::filesystem::path& path) {
  const LevelConfig c = file_config();
  PmemFile f = PmemFile::open(path, c.region_bytes());
  EXPECT_TRUE(f.created());
  PersistentRegion region(f.bytes(), f.mode());
  LevelShard shard(c, 0, region);
  State s;
  for (uint64_t k = 1; k <= 150; ++k) {
    const auto v = value_for(k, 1, 16);
    if (shard.find_or_put(k, v).status == Status::kInserted) s[k] = v;
  }
  for (uint64_t k = 2; k <= 150; k += 7)
    if (shard.erase(k).status == Status::kErased) s.erase(k);
  EXPECT_EQ(shard.top_level(), 2u);  // 150 keys overfill 96 slots: one resize
  return s;
}

TEST(LevelFile, ReopenRecoversEveryItemAndServesLookups) {
  test::TempDir dir("rdmahash-level");
  const auto path = dir.path / "table.pm";
  const State want = make_file(path);
  const LevelConfig c = file_config();
  PmemFile f = PmemFile::open(path, c.region_bytes());
  PersistentRegion region(f.bytes(), f.mode());
  LevelShard shard(c, 0, region);
  EXPECT_TRUE(shard.recovered());
  EXPECT_EQ(state_of(shard), want);
  auto fabric = make_local_fabric_over({f.bytes()});
  auto t = fabric->connect();
  Engine engine(*t);
  LevelClient client(c, engine);
  std::vector<std::byte> out(16);
  for (uint64_t k = 1; k <= 150; ++k) {
    const OpResult r = engine.run(client.get(k, out));
    ASSERT_EQ(r.status, want.count(k) ? Status::kFound : Status::kNotFound) << k;
    if (want.count(k)) { ASSERT_EQ(out, want.at(k)); }
  }
}

// A reload between points (bench --pm-path) writes the loaded image back over the current one
// (restore_image): at every crash point — persisted lines only, a random prefix of each line's
// unpersisted stores, all of them — the image recovers to the current state or to the loaded one,
// or has no magic and is refused as not a level image; never a mix of the two.
TEST(LevelFile, AnInterruptedRestoreIsRefusedOrWhole) {
  LevelConfig c;
  c.base_buckets = 4;  // 12 buckets, 48 slots: the 55 keys below resize the top level once
  c.max_resizes = 1;
  c.value_bytes = 16;
  AlignedImage live(c.region_bytes());
  PersistentRegion region(live.bytes, PersistMode::kVolatile);
  State loaded;
  {
    LevelShard shard(c, 0, region);
    for (uint64_t k = 1; k <= 30; ++k)
      if (shard.find_or_put(k, value_for(k, 1, 16)).status == Status::kInserted) loaded[k] = value_for(k, 1, 16);
  }
  const std::vector<std::byte> saved(live.bytes.begin(), live.bytes.end());
  State now = loaded;
  {
    LevelShard shard(c, 0, region);  // recovers the loaded image, then the points write
    for (uint64_t k = 1; k <= 30; k += 3)
      if (shard.update(k, value_for(k, 2, 16)).status == Status::kUpdated) now[k] = value_for(k, 2, 16);
    for (uint64_t k = 2; k <= 30; k += 5)
      if (shard.erase(k).status == Status::kErased) now.erase(k);
    for (uint64_t k = 31; k <= 55; ++k)
      if (shard.find_or_put(k, value_for(k, 1, 16)).status == Status::kInserted) now[k] = value_for(k, 1, 16);
    ASSERT_EQ(shard.top_level(), 2u);
  }
  ASSERT_NE(now, loaded);
  const std::vector<std::byte> current(live.bytes.begin(), live.bytes.end());
  Recorder rec;
  region.set_observer(&rec);
  restore_image(region, saved);
  region.set_observer(nullptr);
  ASSERT_EQ(std::vector<std::byte>(live.bytes.begin(), live.bytes.end()), saved);
  ASSERT_EQ(recovered_state(c, live.bytes), loaded);
  const std::vector<Step> steps{{0, rec.log.size(), loaded}};
  CrashChecker check{c, current, rec.log, steps, now, 0, {}, true};
  check.run(11);
  EXPECT_EQ(check.first_failure, "");
  EXPECT_GT(check.refused, 0u);  // the images between the two magic stores
  std::printf("restore: %zu events, %lu crash images checked, %lu refused (no magic)\n", rec.log.size(),
              static_cast<unsigned long>(check.checked), static_cast<unsigned long>(check.refused));
}

void expect_refused(const std::filesystem::path& path, const LevelConfig& c, const std::string& what) {
  test::expect_refused<LevelShard>(path, c, what);
}

TEST(LevelFile, CorruptOrForeignImagesAreRefusedUntouched) {
  test::TempDir dir("rdmahash-level");
  const auto path = dir.path / "table.pm";
  make_file(path);
  const auto good = slurp(path);
  auto write = [&](const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const LevelConfig c = file_config();
  for (size_t bit = 0; bit < 8 * kLevelHeaderBytes; ++bit) {
    auto bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write(bad);
    expect_refused(path, c, "header bit " + std::to_string(bit));
  }
  for (size_t len : {size_t{1}, size_t{64}, size_t{100}, good.size() / 2, good.size() - 8}) {
    write(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len)));
    expect_refused(path, c, "truncated to " + std::to_string(len));
  }
  write(std::vector<char>(good.size(), 'x'));
  expect_refused(path, c, "foreign file");
  write(good);
  LevelConfig other = c;
  other.base_buckets = 16;
  expect_refused(path, other, "other geometry");
  // A level word naming a level beyond the region.
  auto bad = good;
  bad[kLevelWordOffset] = 9;
  write(bad);
  expect_refused(path, c, "level word beyond the region");
  // A valid slot whose value bytes were corrupted: the first valid slot of the top level.
  bad = good;
  const uint64_t top = c.level_offset(2);
  bool flipped = false;
  for (uint64_t b = 0; b < c.level_buckets(2) && !flipped; ++b) {
    const uint64_t off = top + b * c.bucket_bytes();
    uint64_t tok;
    std::memcpy(&tok, good.data() + off, 8);
    if (tok & 1) {
      bad[off + 8 + 16] = static_cast<char>(bad[off + 8 + 16] ^ 1);
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  write(bad);
  expect_refused(path, c, "corrupt valid slot");
  // Valid bits in the retired bottom level 0.
  bad = good;
  bad[c.level_offset(0)] = 1;
  write(bad);
  expect_refused(path, c, "valid bits in a retired level");
  write({});
  expect_refused(path, c, "empty file");
}

}  // namespace
}  // namespace rdmahash

namespace rdmahash {
namespace {

// The load factor level hashing reaches before its first resize (the first insert that finds its
// four candidate buckets full and no one-step movement): OSDI'18 reports about 0.9; seed 002 Fig. 10
// compares continuity's against it.
TEST(LevelLoad, LoadFactorAtTheFirstFullInsert) {
  double sum = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    LevelConfig c;
    c.base_buckets = 1000;
    c.max_resizes = 0;
    c.value_bytes = 0;
    c.hash_seed = seed;
    std::vector<std::byte> mem(c.region_bytes() + kCacheLine);
    const auto mis = reinterpret_cast<uintptr_t>(mem.data()) % kCacheLine;
    PersistentRegion region({mem.data() + (mis ? kCacheLine - mis : 0), c.region_bytes()}, PersistMode::kVolatile);
    LevelShard shard(c, 0, region);
    std::mt19937_64 rng(seed * 77);
    while (shard.find_or_put(rng(), {}).status != Status::kFull) {
    }
    sum += static_cast<double>(shard.records()) / static_cast<double>(shard.capacity());
  }
  const double lf = sum / 3;
  std::printf("level: load factor at the first full insert %.3f (N = 1000: 3000 buckets, 3 seeds)\n", lf);
  EXPECT_GT(lf, 0.75);  // one-step movement over four candidates: far above a single bucket's
}


// Items older than the seq window (level.h, "Old items"): a bucket's token seq 2^28 + 7 stores
// past its items' pubs — the state 2^28 + 7 publications in each bucket leave behind, made here by
// moving every token's seq forward — puts every item outside the 29-bit window. One-sided lookups
// must still find every item whole (an old item costs one more batch), and the image must recover.
TEST(LevelOldItems, ItemsOlderThanTheSeqWindowAreFoundAndTheImageRecovers) {
  LevelConfig c;
  c.base_buckets = 64;
  c.max_resizes = 0;
  c.value_bytes = 16;
  LevelTable t(c);
  SyncClient cl(*t.fabric, c);
  LevelShard& shard = t.server->shard(0);
  const auto keys = distinct_keys(150, 5);
  for (uint64_t k : keys) ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
  PersistentRegion& region = t.server->region(0);
  constexpr uint64_t kSeqMask = (uint64_t{1} << 29) - 1;
  uint64_t tokens = 0;
  for (uint32_t lv = 0; lv < c.levels(); ++lv)
    for (uint64_t b = 0; b < c.level_buckets(lv); ++b) {
      const uint64_t off = c.level_offset(lv) + b * c.bucket_bytes();
      const uint64_t tok = region.load(off);
      const uint64_t seq = ((tok >> 32) & kSeqMask) + (uint64_t{1} << 28) + 7;
      region.store(off, (tok & ~(kSeqMask << 32)) | ((seq & kSeqMask) << 32));
      tokens += (tok & 0xF) != 0;
    }
  ASSERT_GT(tokens, 0u);
  std::vector<std::byte> out(16);
  for (uint64_t k : keys) {
    ASSERT_EQ(cl.run(cl.client.get(k, out)).status, Status::kFound) << k;
    EXPECT_EQ(out, value_for(k, 0, 16)) << k;
    EXPECT_LE(cl.last.round_trips, 3u) << k;  // (the first also reads the level word) + one more batch
  }
  // Writes go on from the moved seq; the updated item is young again: one batch.
  ASSERT_EQ(cl.run(cl.client.update(keys[0], value_for(keys[0], 1, 16))).status, Status::kUpdated);
  ASSERT_EQ(cl.run(cl.client.get(keys[0], out)).status, Status::kFound);
  EXPECT_EQ(out, value_for(keys[0], 1, 16));
  // A copy of the image recovers with every item.
  std::span<std::byte> img = region.bytes();
  AlignedImage copy(img.size());
  std::memcpy(copy.bytes.data(), img.data(), img.size());
  PersistentRegion r2(copy.bytes, PersistMode::kVolatile);
  LevelShard reopened(c, 0, r2);
  EXPECT_EQ(reopened.find(keys[0]), std::optional<std::vector<std::byte>>(value_for(keys[0], 1, 16)));
  for (size_t i = 1; i < keys.size(); ++i)
    EXPECT_EQ(reopened.find(keys[i]), std::optional<std::vector<std::byte>>(value_for(keys[i], 0, 16))) << keys[i];
}


struct LevelStoreLog final : PersistObserver {
  std::vector<std::pair<uint64_t, uint64_t>> stores;
  void on_store(uint64_t off, uint64_t v) override { stores.emplace_back(off, v); }
  void on_persist(uint64_t, uint64_t) override {}
};

// Calls before(n, off) before every READ of `off` (n = how many READs of it came before) and
// mid(n) after its first word.
class OffsetHookTransport final : public Transport {
 public:
  OffsetHookTransport(std::unique_ptr<Transport> inner, uint64_t off, std::function<void(uint64_t)> before,
                      std::function<void(uint64_t)> mid)
      : inner_(std::move(inner)), off_(off), before_(std::move(before)), mid_(std::move(mid)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.addr.offset == off_ && r.len > 8) {
        const uint64_t n = n_++;
        before_(n);
        Request head = r, tail = r;
        head.len = 8;
        tail.addr.offset += 8;
        tail.buf = static_cast<std::byte*>(r.buf) + 8;
        tail.len = r.len - 8;
        inner_->execute(std::span<Request>(&head, 1));
        mid_(n);
        inner_->execute(std::span<Request>(&tail, 1));
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint64_t off_;
  std::function<void(uint64_t)> before_, mid_;
  uint64_t n_ = 0;
};

// (Found by review of the first "Old items" rule, which compared slot bytes across two batches
// without the tokens: it returned vA here.) Level: k was put with vA (pub 1) and erased long ago (bucket X's seq then moved to 2^29 - 2, as
// LevelOldItems does); its bytes stay in slot x. A lookup of k:
//   batch 1: miss (X empty, seq 2^29-2) -> needs confirmation, remembered.
//   node:    put k -> vC (x, pub 2^29-1)
//   batch 2 reads X's token (x valid, seq 2^29-1)
//   node:    erase k; put k -> vA writes x with pub (2^29+1) mod 2^29 = 1: the bytes of batch 1;
//            its token store has not happened
//   batch 2 reads x: pub outside the window, same bytes as batch 1 -> hit vA.
// k's states during the lookup: absent, vC, absent: vA must not be returned.
TEST(LevelOldItems, StaleBytesEqualToARewriteAreNotTakenAcrossChangedTokens) {
  LevelConfig c;
  c.base_buckets = 64;
  c.max_resizes = 0;
  c.value_bytes = 16;
  const uint64_t k = 12345;
  const auto vA = value_for(k, 0, 16), vC = value_for(k, 2, 16);
  constexpr uint64_t kSeqMask = (uint64_t{1} << 29) - 1;
  uint64_t xoff = 0;
  auto build = [&](LevelShard& s, PersistentRegion& region) {
    ASSERT_EQ(s.put(k, vA).status, Status::kInserted);
    xoff = 0;
    for (uint32_t lv = 0; lv < c.levels(); ++lv)
      for (uint64_t b = 0; b < c.level_buckets(lv); ++b) {
        const uint64_t off = c.level_offset(lv) + b * c.bucket_bytes();
        if (region.load(off) & 0xF) xoff = off;
      }
    ASSERT_NE(xoff, 0u);
    ASSERT_EQ(s.erase(k).status, Status::kErased);
    const uint64_t tok = region.load(xoff);
    region.store(xoff, (tok & ~(kSeqMask << 32)) | ((kSeqMask - 1) << 32));  // seq 2^29 - 2
  };
  LevelStoreLog log;
  {
    LevelTable rec(c);
    build(rec.server->shard(0), rec.server->region(0));
    ASSERT_EQ(rec.server->shard(0).put(k, vC).status, Status::kInserted);
    rec.server->region(0).set_observer(&log);
    ASSERT_EQ(rec.server->shard(0).erase(k).status, Status::kErased);
    ASSERT_EQ(rec.server->shard(0).put(k, vA).status, Status::kInserted);
    rec.server->region(0).set_observer(nullptr);
  }
  ASSERT_GE(log.stores.size(), 3u);
  ASSERT_EQ(log.stores.back().first, xoff);  // the last store is X's token
  LevelTable t(c);
  LevelShard& shard = t.server->shard(0);
  PersistentRegion& region = t.server->region(0);
  build(shard, region);
  auto transport = std::make_unique<OffsetHookTransport>(
      t.fabric->connect(), xoff,
      [&](uint64_t n) {
        if (n == 1) {
          ASSERT_EQ(shard.put(k, vC).status, Status::kInserted);
        }
      },
      [&](uint64_t n) {
        if (n == 1)
          for (size_t i = 0; i + 1 < log.stores.size(); ++i) region.store(log.stores[i].first, log.stores[i].second);
      });
  Engine engine(*transport);
  LevelClient client(c, engine);
  std::vector<std::byte> out(16);
  const OpResult r = engine.run(client.get(k, out));
  if (r.status == Status::kFound) {
    EXPECT_TRUE(out == vC) << "k was absent, vC, absent during the lookup; got "
                           << (out == vA ? "vA (put 2^29 publications ago, erased, its re-put unpublished)" : "?");
  }
}


// An old item whose bucket's token changes before every batch (a hot neighbour in its bucket):
// after a few batches the lookup asks the node (kGet RPC).
TEST(LevelOldItems, AnOldItemBesideAHotKeyIsAnsweredByTheNode) {
  LevelConfig c;
  c.base_buckets = 1;  // 3 buckets: the hot key shares a bucket with the old item
  c.max_resizes = 0;
  c.value_bytes = 16;
  LevelTable t(c);
  LevelShard& shard = t.server->shard(0);
  PersistentRegion& region = t.server->region(0);
  const uint64_t a = 1;
  ASSERT_EQ(shard.put(a, value_for(a, 0, 16)).status, Status::kInserted);
  uint64_t aoff = 0;  // a's bucket
  for (uint32_t lv = 0; lv < c.levels(); ++lv)
    for (uint64_t b = 0; b < c.level_buckets(lv); ++b)
      if (region.load(c.level_offset(lv) + b * c.bucket_bytes()) & 0xF) aoff = c.level_offset(lv) + b * c.bucket_bytes();
  ASSERT_NE(aoff, 0u);
  uint64_t h = 2;  // a hot key that lands in a's bucket
  for (;; ++h) {
    ASSERT_EQ(shard.put(h, value_for(h, 0, 16)).status, Status::kInserted);
    if (region.load(aoff) & 0xE) break;
    ASSERT_EQ(shard.erase(h).status, Status::kErased);
  }
  constexpr uint64_t kSeqMask = (uint64_t{1} << 29) - 1;  // a is old: its bucket's seq 2^28 + 7 ahead
  const uint64_t tok = region.load(aoff);
  region.store(aoff, (tok & ~(kSeqMask << 32)) | (((((tok >> 32) & kSeqMask) + (uint64_t{1} << 28) + 7) & kSeqMask) << 32));
  uint32_t v = 0;
  auto transport = std::make_unique<OffsetHookTransport>(
      t.fabric->connect(), aoff,
      [&](uint64_t n) {
        if (n > 64) throw FabricError("test: the lookup kept reading instead of asking the node");
        ASSERT_EQ(shard.update(h, value_for(h, ++v, 16)).status, Status::kUpdated);
      },
      [](uint64_t) {});
  Engine engine(*transport);
  LevelClient client(c, engine);
  std::vector<std::byte> out(16);
  OpStats st;
  ASSERT_EQ(engine.run(client.get(a, out), &st).status, Status::kFound);
  EXPECT_EQ(out, value_for(a, 0, 16));
  EXPECT_EQ(st.rpcs, 1u);
}

}  // namespace
}  // namespace rdmahash
