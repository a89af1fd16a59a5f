// Crash consistency of continuity hashing, exhaustively: every store and persist of a workload is
// recorded through the persist choke point (PersistObserver); at every recorded event a crash image
// is rebuilt (only persisted lines; plus a random prefix of each line's unpersisted stores; plus all
// of them), reopened, recovered and checked against the acknowledged operations. Also: images in
// real files (pmem_map_file) reopen and recover; corrupt images are refused and left untouched.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "pm_test_util.h"
#include "rdmahash/continuity.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::AlignedImage;
using test::Event;
using test::Recorder;
using test::State;
using test::Step;
using test::value_for;

State recovered_state(const ContinuityConfig& c, std::span<std::byte> image) {
  PersistentRegion region(image, PersistMode::kVolatile);
  ContinuityShard shard(c, 0, region);  // throws PmemError on any violated invariant
  return test::state_of(shard);
}

// The crash-point check. `mode`: 0 = only persisted lines, 1 = plus a random prefix of each
// line's unpersisted stores, 2 = plus all of them.
struct CrashChecker {
  const ContinuityConfig& cfg;
  const std::vector<std::byte>& initial;
  const std::vector<Event>& log;
  const std::vector<Step>& steps;
  const State& start;
  uint64_t checked = 0;
  std::string first_failure;
  bool finish_after = false;  // also finish the recovered shard's resize and require the same items

  void run(uint64_t seed) {
    test::replay_crashes(initial, log, seed, [&](size_t e, std::span<std::byte> image, int mode) { check(e, image, mode); },
                         [] { return false; });
  }

  void check(size_t e, std::span<std::byte> image, int mode) {
    ++checked;
    std::string why;
    try {
      const State got = recovered_state(cfg, image);
      why = test::acknowledged_mismatch(got, steps, start, e);
      if (why.empty() && finish_after) {
        PersistentRegion region(image, PersistMode::kVolatile);
        ContinuityShard shard(cfg, 0, region);
        shard.finish_resize();
        if (recovered_state(cfg, image) != got) why = "finishing the recovered resize changed the items";
      }
    } catch (const std::exception& ex) {
      why = std::string("recovery failed: ") + ex.what();
    }
    if (!why.empty() && first_failure.empty()) first_failure = test::crash_label(e, mode) + ": " + why;
  }
};

TEST(ContinuityCrash, EveryCrashPointRecoversTheAcknowledgedOperations) {
  ContinuityConfig c;
  c.buckets_per_node = 8;  // 4 pairs × 20 slots: segments fill, slots are reused, updates hit kFull
  c.sbuckets = 3;
  c.value_bytes = 24;
  // Recording starts once the table exists (a crash while formatting leaves an image that is
  // refused, see continuity.h); `initial` is that durable image.
  test::RecordedShard<ContinuityShard, ContinuityConfig> w(c);  // records from here on
  auto& [live, region, shard, initial, rec] = w;

  std::mt19937_64 rng(2024);
  std::vector<uint64_t> universe;
  for (int i = 0; i < 110; ++i) universe.push_back(rng());
  State state;
  std::vector<Step> steps;
  uint64_t kinds[4] = {0, 0, 0, 0};
  for (int i = 0; i < 1500; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    const auto v = value_for(k, static_cast<uint32_t>(i), c.value_bytes);
    const size_t begin = rec.log.size();
    const uint64_t x = rng() % 10;
    ContinuityResult r;
    if (x < 4) r = shard.find_or_put(k, v);
    else if (x < 7) r = shard.update(k, v);
    else r = shard.erase(k);
    test::acknowledge(state, kinds, k, v, r.status);
    steps.push_back({begin, rec.log.size(), state});
  }
  region.set_observer(nullptr);
  ASSERT_GT(kinds[0], 100u);
  ASSERT_GT(kinds[1], 100u);
  ASSERT_GT(kinds[2], 100u);
  ASSERT_EQ(recovered_state(c, live.bytes), state);

  const State empty;
  CrashChecker check{c, initial, rec.log, steps, empty, 0, {}};
  check.run(7);
  EXPECT_EQ(check.first_failure, "");
  uint64_t persists = 0;
  for (const Event& e : rec.log) persists += e.persist;
  // Every event is a crash point: persisted-only, random prefix of pending lines, all pending.
  std::printf("continuity crash test: %zu ops (%lu inserts, %lu updates, %lu erases, %lu full), %zu events "
              "(%lu persists), %lu crash images checked\n",
              steps.size(), static_cast<unsigned long>(kinds[0]), static_cast<unsigned long>(kinds[1]),
              static_cast<unsigned long>(kinds[2]), static_cast<unsigned long>(kinds[3]), rec.log.size(),
              static_cast<unsigned long>(persists), static_cast<unsigned long>(check.checked));
  EXPECT_GT(check.checked, rec.log.size());
}

// Online resizing (continuity.h "Online resizing"): the table starts with 4 buckets and doubles
// three times while writes go on; each write migrates only its own pair, so inserts,
// updates and erases land between migrated pairs; extra resize steps are interleaved as
// operations of their own. Every crash point must recover to the acknowledged state, and the
// recovered shard must then finish its resize (and take writes) with every item still present.
TEST(ContinuityCrash, EveryCrashPointOfAnOnlineResizeWithWritesRecovers) {
  ContinuityConfig c;
  c.buckets_per_node = 4;
  c.sbuckets = 3;
  c.value_bytes = 16;
  c.max_resizes = 3;
  c.migrate_pairs_per_write = 0;  // a write migrates its own pair only: resizes stay in progress
  test::RecordedShard<ContinuityShard, ContinuityConfig> w(c);  // records from here on
  auto& [live, region, shard, initial, rec] = w;
  std::mt19937_64 rng(77);
  std::vector<uint64_t> universe;
  for (int i = 0; i < 260; ++i) universe.push_back(rng());
  State state;
  std::vector<Step> steps;
  uint64_t kinds[4] = {0, 0, 0, 0}, during = 0, steps_alone = 0;
  for (int i = 0; i < 1400; ++i) {
    const size_t begin = rec.log.size();
    const bool was_resizing = shard.resizing();
    const uint64_t x = rng() % 20;
    if (x == 0) {  // a migration step on its own (the node's CPU between requests)
      shard.resize_step();
      ++steps_alone;
      steps.push_back({begin, rec.log.size(), state});
      continue;
    }
    // Inserts dominate early so that the table fills and grows; later a balanced mix.
    const uint64_t k = universe[rng() % (i < 700 ? universe.size() : 200)];
    const auto v = value_for(k, static_cast<uint32_t>(i), c.value_bytes);
    ContinuityResult r;
    if (x < 11) r = shard.find_or_put(k, v);
    else if (x < 15) r = shard.put(k, v);
    else if (x < 18) r = shard.update(k, v);
    else r = shard.erase(k);
    test::acknowledge(state, kinds, k, v, r.status);
    during += was_resizing && r.status != Status::kFound && r.status != Status::kNotFound;
    steps.push_back({begin, rec.log.size(), state});
  }
  region.set_observer(nullptr);
  const ContinuityStats st = shard.stats();
  ASSERT_EQ(st.resizes, 3u) << "the workload should grow the table to its last level";
  ASSERT_GE(st.migrated_pairs, 2u + 4u + 1u);  // tables 0 and 1 wholly, table 2 begun
  ASSERT_GT(during, 20u) << "writes should land while a resize is in progress";
  ASSERT_GT(kinds[2], 50u);
  ASSERT_EQ(recovered_state(c, live.bytes), state);

  const State empty;
  CrashChecker check{c, initial, rec.log, steps, empty, 0, {}};
  check.finish_after = true;
  check.run(13);
  EXPECT_EQ(check.first_failure, "");
  std::printf("continuity online-resize crash test: %zu ops (%lu inserts, %lu updates, %lu erases, %lu full, %lu "
              "writes during a resize, %lu lone steps), %lu resizes, %lu pairs migrated, %zu events, %lu crash "
              "images checked\n",
              steps.size(), static_cast<unsigned long>(kinds[0]), static_cast<unsigned long>(kinds[1]),
              static_cast<unsigned long>(kinds[2]), static_cast<unsigned long>(kinds[3]),
              static_cast<unsigned long>(during), static_cast<unsigned long>(steps_alone),
              static_cast<unsigned long>(st.resizes), static_cast<unsigned long>(st.migrated_pairs), rec.log.size(),
              static_cast<unsigned long>(check.checked));
  EXPECT_GT(check.checked, rec.log.size());
}

// Added SBuckets (continuity.h): a near-full table of 2 pairs sharing one added group, growing
// online twice; inserts that overflow into the group, updates into and out of added slots,
// erases of added items, group slots changing hands between the pairs, and resizes that migrate
// added items (to children's own slots and to their groups). Every crash point recovers to the
// acknowledged state (recovery checks each claimed added slot and that no slot is claimed twice),
// and the recovered shard finishes its resize with every item present.
TEST(ContinuityCrash, EveryCrashPointWithAddedSBucketsRecovers) {
  ContinuityConfig c;
  c.buckets_per_node = 4;
  c.sbuckets = 3;
  c.value_bytes = 8;
  c.added_group_pairs = 2;
  c.max_resizes = 2;
  c.migrate_pairs_per_write = 0;
  test::RecordedShard<ContinuityShard, ContinuityConfig> w(c);  // records from here on
  auto& [live, region, shard, initial, rec] = w;
  std::mt19937_64 rng(4242);
  std::vector<uint64_t> universe;
  for (int i = 0; i < 400; ++i) universe.push_back(rng());
  State state;
  std::vector<Step> steps;
  uint64_t kinds[4] = {0, 0, 0, 0};
  ContinuityStats at_first_resize{};
  for (int i = 0; i < 1600; ++i) {
    const size_t begin = rec.log.size();
    const uint64_t x = rng() % 20;
    if (x == 0) {
      shard.resize_step();
      steps.push_back({begin, rec.log.size(), state});
      continue;
    }
    // A near-full table of 52 slots churns for a while (added slots change hands), then it grows.
    const size_t range = i < 700 ? 70 : (i < 1100 ? 200 : universe.size());
    const uint64_t k = universe[rng() % range];
    const auto v = value_for(k, static_cast<uint32_t>(i), c.value_bytes);
    ContinuityResult r;
    if (x < 9) r = shard.find_or_put(k, v);
    else if (x < 13) r = shard.put(k, v);
    else if (x < (i < 700 ? 14u : 17u)) r = shard.update(k, v);
    else r = shard.erase(k);  // more erases while the table churns near full
    test::acknowledge(state, kinds, k, v, r.status);
    steps.push_back({begin, rec.log.size(), state});
    if (shard.stats().resizes == 0) at_first_resize = shard.stats();
  }
  region.set_observer(nullptr);
  const ContinuityStats st = shard.stats();
  ASSERT_EQ(st.resizes, 2u);
  std::printf("before the first resize: %lu writes into added slots, %lu out\n",
              static_cast<unsigned long>(at_first_resize.added_writes),
              static_cast<unsigned long>(at_first_resize.added_vacated));
  ASSERT_GT(at_first_resize.added_writes, 30u) << "inserts and updates into added slots before any resize";
  ASSERT_GT(at_first_resize.added_vacated, 30u) << "updates out of and erases of added items";
  ASSERT_GT(st.migrated_added_items, 5u) << "a resize should migrate added items";
  ASSERT_GT(kinds[2], 50u);
  ASSERT_EQ(recovered_state(c, live.bytes), state);

  const State empty;
  CrashChecker check{c, initial, rec.log, steps, empty, 0, {}};
  check.finish_after = true;
  check.run(21);
  EXPECT_EQ(check.first_failure, "");
  std::printf("continuity added-SBuckets crash test: %zu ops (%lu inserts, %lu updates, %lu erases, %lu full), %lu "
              "writes into and %lu out of added slots, %lu resizes migrating %lu added items, %zu events, %lu crash "
              "images checked\n",
              steps.size(), static_cast<unsigned long>(kinds[0]), static_cast<unsigned long>(kinds[1]),
              static_cast<unsigned long>(kinds[2]), static_cast<unsigned long>(kinds[3]),
              static_cast<unsigned long>(st.added_writes), static_cast<unsigned long>(st.added_vacated),
              static_cast<unsigned long>(st.resizes), static_cast<unsigned long>(st.migrated_added_items),
              rec.log.size(), static_cast<unsigned long>(check.checked));
  EXPECT_GT(check.checked, rec.log.size());
}

// Recovery with added SBuckets refuses (and leaves untouched) an image whose added slots break
// the invariants: a slot claimed by both pairs of its group, a claimed slot whose item is torn,
// a claimed slot holding the other pair's item; and an image of another added-group setting.
TEST(ContinuityCrash, RecoveryRefusesBrokenAddedSlots) {
  ContinuityConfig c;
  c.buckets_per_node = 4;
  c.value_bytes = 8;
  c.added_group_pairs = 2;
  AlignedImage good(c.region_bytes());
  {
    PersistentRegion region(good.bytes, PersistMode::kVolatile);
    ContinuityShard shard(c, 0, region);
    std::mt19937_64 rng(3);
    while (shard.stats().added_writes < 4) (void)shard.find_or_put(rng(), test::value_for(1, 1, 8));
  }
  const uint64_t ind_off[2] = {c.table_offset(0) + 8 + c.bucket_bytes(), c.table_offset(0) + c.pair_bytes() + 8 + c.bucket_bytes()};
  uint64_t ind[2];
  for (int i = 0; i < 2; ++i) std::memcpy(&ind[i], good.bytes.data() + ind_off[i], 8);
  const uint64_t claims[2] = {(ind[0] >> 32) & 0xfff, (ind[1] >> 32) & 0xfff};
  ASSERT_NE(claims[0] | claims[1], 0u);
  ASSERT_NO_THROW(recovered_state(c, good.bytes));
  auto refused = [&](const std::vector<std::byte>& bytes, const ContinuityConfig& cfg, const std::string& what) {
    AlignedImage img(bytes.size());
    std::memcpy(img.bytes.data(), bytes.data(), bytes.size());
    EXPECT_THROW(recovered_state(cfg, img.bytes), PmemError) << what;
    EXPECT_EQ(0, std::memcmp(img.bytes.data(), bytes.data(), bytes.size())) << what << ": the image was modified";
  };
  const std::vector<std::byte> base(good.bytes.begin(), good.bytes.end());
  const int owner = claims[0] ? 0 : 1, other = 1 - owner;
  const uint32_t x = static_cast<uint32_t>(std::countr_zero(claims[owner]));
  {  // the other pair also claims slot x (refused: x's key is not the other pair's)
    auto bad = base;
    const uint64_t w = ind[other] | (uint64_t{1} << (32 + x));
    std::memcpy(bad.data() + ind_off[other], &w, 8);
    refused(bad, c, "a slot claimed twice");
  }
  const uint64_t slot = c.group_offset(0, 0) + uint64_t{x} * c.slot_bytes();
  {  // a torn value in the claimed slot
    auto bad = base;
    bad[slot + 16] ^= std::byte{1};
    refused(bad, c, "a torn added slot");
  }
  {  // x handed to the other pair (with the owner's seq, so the item's pub passes): only the check
     // that a claimed slot's key belongs to the claiming pair catches it
    auto bad = base;
    const uint64_t seq_bits = ((uint64_t{1} << 17) - 1) << 44;
    const uint64_t w0 = ind[owner] & ~(uint64_t{1} << (32 + x));
    const uint64_t w1 = (ind[other] & ~seq_bits) | (ind[owner] & seq_bits) | (uint64_t{1} << (32 + x));
    std::memcpy(bad.data() + ind_off[owner], &w0, 8);
    std::memcpy(bad.data() + ind_off[other], &w1, 8);
    refused(bad, c, "a claimed slot holding another pair's item");
  }
  ContinuityConfig off = c;
  off.added_group_pairs = 0;
  refused(base, off, "another added-group setting");
  {  // the header records the format (4) and the setting (every header bit flip is refused, below)
    ContinuityHeader h;
    std::memcpy(&h, base.data(), sizeof h);
    EXPECT_EQ(h.format_version, 4u);
    EXPECT_EQ(h.added_group_pairs, 2u);
  }
}

// Resizing: the move of every item into a table of twice the buckets, recorded on both regions
// in one global order. Before every event a crash image pair is rebuilt (persisted lines only, a
// random prefix of unpersisted stores, all of them); both images must recover, together hold every
// item exactly (a key in both has one value), and resuming the resize must leave every item in
// the new table and none in the old.
struct TaggedRecorder final : PersistObserver {
  std::vector<std::pair<int, Event>>* log;
  int region;
  void on_store(uint64_t off, uint64_t v) override { log->push_back({region, {false, off, v}}); }
  void on_persist(uint64_t off, uint64_t len) override { log->push_back({region, {true, off, len}}); }
};

// Echo words (continuity.h, "Torn reads") are stored after each indicator but never persisted on
// their own, so a crash image may hold any older echo. Recovery must rewrite every echo a reader
// may READ (both tables of a resize in progress) from its indicator, or the even segments of those
// pairs look busy to every lookup for ever.
TEST(ContinuityCrash, RecoveryRewritesEveryEchoFromItsIndicator) {
  ContinuityConfig c;
  c.buckets_per_node = 8;
  c.value_bytes = 8;
  c.max_resizes = 1;
  AlignedImage img(c.region_bytes());
  {
    PersistentRegion region(img.bytes, PersistMode::kVolatile);
    ContinuityShard shard(c, 0, region);
    for (uint64_t k = 2; k < 40; ++k) (void)shard.put(k, value_for(k, 0, 8));
    ASSERT_TRUE(shard.start_resize());
    ASSERT_TRUE(shard.resize_step());  // table 0 pair 0 MOVED, its children born, the rest UNBORN
  }
  auto word = [&](uint64_t off) {
    uint64_t w;
    std::memcpy(&w, img.bytes.data() + off, 8);
    return w;
  };
  std::mt19937_64 rng(8);
  for (uint32_t level = 0; level <= 1; ++level)
    for (uint64_t pair = 0; pair < c.buckets_at(level) / 2; ++pair) {
      const uint64_t echo = c.table_offset(level) + pair * c.pair_bytes(), junk = rng();
      ASSERT_EQ(word(echo), word(echo + 8 + c.bucket_bytes())) << "the live table keeps echo = indicator";
      std::memcpy(img.bytes.data() + echo, &junk, 8);
    }
  const State before = recovered_state(c, img.bytes);
  EXPECT_GT(before.size(), 20u);
  for (uint32_t level = 0; level <= 1; ++level)
    for (uint64_t pair = 0; pair < c.buckets_at(level) / 2; ++pair) {
      const uint64_t echo = c.table_offset(level) + pair * c.pair_bytes();
      EXPECT_EQ(word(echo), word(echo + 8 + c.bucket_bytes())) << "table " << level << " pair " << pair;
    }
}

TEST(ContinuityCrash, EveryCrashPointOfAResizeRecoversToACompleteTable) {
  ContinuityConfig small;
  small.buckets_per_node = 8;
  small.value_bytes = 16;
  ContinuityConfig big = small;
  big.buckets_per_node = 16;
  AlignedImage live0(small.region_bytes()), live1(big.region_bytes());
  PersistentRegion r0(live0.bytes, PersistMode::kVolatile), r1(live1.bytes, PersistMode::kVolatile);
  ContinuityShard src(small, 0, r0), dst(big, 0, r1);
  std::mt19937_64 rng(99);
  State state;
  while (state.size() < 40) {
    const uint64_t k = rng();
    const auto v = value_for(k, 3, 16);
    if (src.find_or_put(k, v).status == Status::kInserted) state[k] = v;
  }
  const std::vector<std::byte> init[2] = {{live0.bytes.begin(), live0.bytes.end()},
                                          {live1.bytes.begin(), live1.bytes.end()}};
  std::vector<std::pair<int, Event>> log;
  TaggedRecorder t0, t1;
  t0.log = t1.log = &log;
  t0.region = 0;
  t1.region = 1;
  r0.set_observer(&t0);
  r1.set_observer(&t1);
  ASSERT_EQ(src.resize_into(dst), state.size());
  r0.set_observer(nullptr);
  r1.set_observer(nullptr);
  ASSERT_EQ(src.records(), 0u);
  ASSERT_EQ(recovered_state(big, live1.bytes), state);

  std::vector<std::byte> durable[2] = {init[0], init[1]};
  std::map<std::pair<int, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>> pending;
  uint64_t checked = 0;
  std::string failure;
  for (size_t e = 0; e <= log.size() && failure.empty(); ++e) {
    for (int mode = 0; mode < 3 && failure.empty(); ++mode) {
      if (mode > 0 && pending.empty()) break;
      AlignedImage img0(durable[0].size()), img1(durable[1].size());
      AlignedImage* img[2] = {&img0, &img1};
      for (int r = 0; r < 2; ++r) std::memcpy(img[r]->bytes.data(), durable[r].data(), durable[r].size());
      if (mode > 0)
        for (auto& [where, stores] : pending) {
          const size_t keep = mode == 2 ? stores.size() : rng() % (stores.size() + 1);
          for (size_t i = 0; i < keep; ++i)
            std::memcpy(img[where.first]->bytes.data() + stores[i].first, &stores[i].second, 8);
        }
      ++checked;
      try {
        const State a = recovered_state(small, img0.bytes), b = recovered_state(big, img1.bytes);
        State both = b;
        for (auto& [k, v] : a)
          if (auto [it, fresh] = both.emplace(k, v); !fresh && it->second != v)
            throw std::runtime_error("key in both tables with two values");
        if (both != state) throw std::runtime_error("the two tables together lost or invented items");
        // Restart: resume the resize on the images.
        PersistentRegion q0(img0.bytes, PersistMode::kVolatile), q1(img1.bytes, PersistMode::kVolatile);
        ContinuityShard s0(small, 0, q0), s1(big, 0, q1);
        s0.resize_into(s1);
        if (s0.records() != 0 || recovered_state(big, img1.bytes) != state)
          throw std::runtime_error("resuming did not complete the resize");
      } catch (const std::exception& ex) {
        failure = "crash before event " + std::to_string(e) + " (mode " + std::to_string(mode) + "): " + ex.what();
      }
    }
    if (e == log.size()) break;
    const auto& [r, ev] = log[e];
    if (!ev.persist) {
      pending[{r, ev.off / kCacheLine}].emplace_back(ev.off, ev.value);
    } else {
      for (uint64_t line = ev.off / kCacheLine; line * kCacheLine < ev.off + ev.value; ++line) {
        auto it = pending.find({r, line});
        if (it == pending.end()) continue;
        for (auto& [off, v] : it->second) std::memcpy(durable[r].data() + off, &v, 8);
        pending.erase(it);
      }
    }
  }
  EXPECT_EQ(failure, "");
  std::printf("continuity resize crash test: %zu items moved, %zu events, %lu crash image pairs checked\n",
              state.size(), log.size(), static_cast<unsigned long>(checked));
}

// --- real files -----------------------------------------------------------------------------------

using test::slurp;
using test::TempDir;

ContinuityConfig file_config() {
  ContinuityConfig c;
  c.buckets_per_node = 32;
  c.value_bytes = 16;
  return c;
}

// Creates `path` with some items; returns them.
State make_file(const std::filesystem::path& path) {
  const ContinuityConfig c = file_config();
  PmemFile f = PmemFile::open(path, c.region_bytes());
  EXPECT_TRUE(f.created());
  PersistentRegion region(f.bytes(), f.mode());
  ContinuityShard shard(c, 0, region);
  EXPECT_FALSE(shard.recovered());
  State s;
  for (uint64_t k = 1; k <= 150; ++k) {
    const auto v = value_for(k, 1, 16);
    if (shard.find_or_put(k, v).status == Status::kInserted) s[k] = v;
  }
  for (uint64_t k = 1; k <= 150; k += 3) {
    const auto v = value_for(k, 2, 16);
    if (shard.update(k, v).status == Status::kUpdated) s[k] = v;
  }
  for (uint64_t k = 2; k <= 150; k += 7)
    if (shard.erase(k).status == Status::kErased) s.erase(k);
  return s;
}

TEST(ContinuityFile, ReopenRecoversEveryItem) {
  TempDir dir;
  const auto path = dir.path / "table.pm";
  const State want = make_file(path);
  const ContinuityConfig c = file_config();
  PmemFile f = PmemFile::open(path, c.region_bytes());
  EXPECT_FALSE(f.created());
  EXPECT_EQ(f.mode(), f.is_pmem() ? PersistMode::kPmem : PersistMode::kMsync);
  PersistentRegion region(f.bytes(), f.mode());
  ContinuityShard shard(c, 0, region);
  EXPECT_TRUE(shard.recovered());
  State got;
  for (auto& [k, v] : shard.items()) got[k] = v;
  EXPECT_EQ(got, want);
  // The recovered table serves one-sided lookups over a fabric on the mapping.
  auto fabric = make_local_fabric_over({f.bytes()});
  auto t = fabric->connect();
  Engine engine(*t);
  ContinuityClient client(c, engine);
  std::vector<std::byte> out(16);
  for (uint64_t k = 1; k <= 150; ++k) {
    const OpResult r = engine.run(client.get(k, out));
    ASSERT_EQ(r.status, want.count(k) ? Status::kFound : Status::kNotFound) << k;
    if (want.count(k)) { ASSERT_EQ(out, want.at(k)); }
  }
}

void expect_refused(const std::filesystem::path& path, const ContinuityConfig& c, const std::string& what) {
  test::expect_refused<ContinuityShard>(path, c, what);
}

TEST(ContinuityFile, CorruptOrForeignImagesAreRefusedUntouched) {
  TempDir dir;
  const auto path = dir.path / "table.pm";
  make_file(path);
  const auto good = slurp(path);
  auto write = [&](const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const ContinuityConfig c = file_config();
  // Every single-bit flip of the header.
  for (size_t bit = 0; bit < 8 * kContinuityHeaderBytes; ++bit) {
    auto bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write(bad);
    expect_refused(path, c, "header bit " + std::to_string(bit));
  }
  // Every single-bit flip of the geometry word (level, RESIZING, check).
  for (size_t bit = 0; bit < 64; ++bit) {
    auto bad = good;
    bad[kContinuityGeometryOffset + bit / 8] = static_cast<char>(bad[kContinuityGeometryOffset + bit / 8] ^ (1 << (bit % 8)));
    write(bad);
    expect_refused(path, c, "geometry bit " + std::to_string(bit));
  }
  // Truncations: inside the header, and of the table.
  for (size_t len : {size_t{1}, size_t{40}, size_t{64}, good.size() / 2, good.size() - 8}) {
    write(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len)));
    expect_refused(path, c, "truncated to " + std::to_string(len));
  }
  // Another format entirely, and the right format with another geometry.
  std::vector<char> foreign(good.size(), 'x');
  write(foreign);
  expect_refused(path, c, "foreign file");
  write(good);
  ContinuityConfig other = c;
  other.sbuckets = 2;
  expect_refused(path, other, "other geometry");
  // A valid slot whose bytes were corrupted: recovery reports it instead of serving it.
  {
    PmemFile f = PmemFile::open(path, c.region_bytes());
    PersistentRegion region(f.bytes(), f.mode());
    ContinuityShard shard(c, 0, region);
    ASSERT_GT(shard.records(), 0u);
  }
  auto bad = good;
  bool flipped = false;
  for (uint64_t pair = 0; pair < c.buckets_per_node / 2 && !flipped; ++pair) {
    const uint64_t ind_off = c.table_offset(0) + pair * c.pair_bytes() + 8 + c.bucket_bytes();
    uint64_t ind;
    std::memcpy(&ind, good.data() + ind_off, 8);
    if (ind & (1ULL << 4)) {  // first SBucket slot is valid: flip a value bit
      bad[ind_off + 8 + 16] = static_cast<char>(bad[ind_off + 8 + 16] ^ 1);
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  write(bad);
  expect_refused(path, c, "corrupt valid slot");
  // An indicator with a reserved bit (24..31: format 3's generations) set, on a pair holding items.
  bad = good;
  flipped = false;
  for (uint64_t pair = 0; pair < c.buckets_per_node / 2 && !flipped; ++pair) {
    const uint64_t ind_off = c.table_offset(0) + pair * c.pair_bytes() + 8 + c.bucket_bytes();
    uint64_t ind;
    std::memcpy(&ind, good.data() + ind_off, 8);
    if (ind & 0xf) {
      ind |= 1ULL << 26;
      std::memcpy(bad.data() + ind_off, &ind, 8);
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  write(bad);
  expect_refused(path, c, "reserved indicator bit");
  // An empty file and a directory.
  write({});
  expect_refused(path, c, "empty file");
  EXPECT_THROW(PmemFile::open(dir.path.string(), 4096), PmemError);
}

// One owner at a time (pmem.h): while a PmemFile maps a file, a second open of it — here, the same
// process, another open file description — is refused with the file and the holder's pid, and
// maps nothing; once the first is gone, the file opens again (the lock went with it).
TEST(PmemFile, SecondOpenerIsRefusedWhileTheFirstHoldsIt) {
  TempDir dir;
  const auto path = (dir.path / "owned.pm").string();
  {
    PmemFile first = PmemFile::open(path, 4096);
    EXPECT_TRUE(first.created());
    try {
      PmemFile second = PmemFile::open(path, 4096);
      ADD_FAILURE() << "a second opener mapped " << path << " while the first held it";
    } catch (const PmemError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path + ": in use by another process"), std::string::npos) << what;
      EXPECT_NE(what.find("pid " + std::to_string(::getpid())), std::string::npos) << what;
    }
  }
  PmemFile again = PmemFile::open(path, 4096);
  EXPECT_FALSE(again.created());
}

// created() is true only for a file this open made (O_EXCL): an existing file of zeros is not new.
TEST(PmemFile, AnExistingFileOfZerosIsNotCreated) {
  TempDir dir;
  const auto path = dir.path / "zeros.pm";
  std::ofstream(path, std::ios::binary) << std::string(8192, '\0');
  PmemFile f = PmemFile::open(path.string(), 4096);
  EXPECT_FALSE(f.created());
  EXPECT_EQ(f.bytes().size(), 8192u);
}

}  // namespace
}  // namespace rdmahash
