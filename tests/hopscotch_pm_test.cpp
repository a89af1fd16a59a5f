// P-FaRM-KV: the hopscotch table on persistent memory (rdmahash/hopscotch.h, "Persistent memory").
// Persists per operation (exact: 2 + 4 per displacement move per insert, 3 per update, 1 per erase
// plus 1 when it unlinks an emptied overflow block), crash images at every store/persist of a
// workload with displacement moves, chain inserts (new and existing blocks), updates and erases
// (the machinery of continuity_crash_test / level_test: pm_test_util.h), reopening a real file, and
// refused images.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "pm_test_util.h"
#include "rdmahash/hopscotch.h"
#include "rdmahash/level.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::AlignedImage;
using test::distinct_keys;
using test::Event;
using test::Recorder;
using test::State;
using test::state_of;
using test::Step;
using test::value_for;

// A small shard whose neighbourhoods fill: displacement moves, chains, block reuse.
HopscotchConfig small_config() {
  HopscotchConfig c;
  c.home_slots_per_node = 24;
  c.neighborhood = 4;
  c.value_bytes = 16;
  c.block_records = 2;
  c.overflow_percent = 100;  // 12 blocks of 2
  return c;
}

// The persists an answered write must have made (hopscotch.h): insert 2 + 4 per move, update 3,
// erase 1 (+1 for the unlink of an emptied block), a refused insert 4 per move it made first.
uint32_t expected_persists(Status s, uint32_t moves, uint64_t unlinked) {
  switch (s) {
    case Status::kInserted: return 2 + 4 * moves;
    case Status::kUpdated: return 3;
    case Status::kErased: return static_cast<uint32_t>(1 + unlinked);
    case Status::kFull: return 4 * moves;
    default: return 0;
  }
}

TEST(HopscotchPm, WritesPersistTwoPlusFourPerMoveThreeAndOne) {
  const HopscotchConfig c = small_config();
  AlignedImage live(c.region_bytes());
  PersistentRegion region(live.bytes, PersistMode::kVolatile);
  HopscotchShard shard(c, 0, region);
  EXPECT_FALSE(shard.recovered());
  std::mt19937_64 rng(5);
  const auto keys = distinct_keys(60, 11);
  uint64_t moves = 0, kinds[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 3000; ++i) {
    const uint64_t k = keys[rng() % keys.size()];
    const auto v = value_for(k, static_cast<uint32_t>(i), c.value_bytes);
    const uint64_t unlinks = shard.stats().unlinks;
    const uint64_t p0 = region.persists();
    const uint64_t x = rng() % 10;
    const HopscotchShardResult r = x < 5 ? shard.put(k, v) : x < 7 ? shard.update(k, v) : shard.erase(k);
    const uint64_t unlinked = shard.stats().unlinks - unlinks;
    ASSERT_EQ(r.persists, expected_persists(r.status, r.displacements, unlinked)) << "op " << i;
    ASSERT_EQ(region.persists() - p0, r.persists);
    moves += r.displacements;
    kinds[r.status == Status::kInserted ? 0 : r.status == Status::kUpdated ? 1 : r.status == Status::kErased ? 2 : 3] += 1;
    kinds[4] += unlinked;
  }
  const HopscotchShardStats st = shard.stats();
  EXPECT_GT(moves, 20u);
  EXPECT_GT(kinds[4], 5u);  // erases that unlinked a block (2 persists)
  EXPECT_EQ(st.insert_persists, 2 * st.inserts + 4 * st.displacements);
  EXPECT_EQ(st.update_persists, 3 * st.updates);
  EXPECT_EQ(st.erase_persists, st.erases + st.unlinks);
  std::printf("hopscotch pm persists: %lu inserts (%lu moves) %lu persists, %lu updates %lu, %lu erases (%lu unlinks) %lu\n",
              static_cast<unsigned long>(st.inserts), static_cast<unsigned long>(st.displacements),
              static_cast<unsigned long>(st.insert_persists), static_cast<unsigned long>(st.updates),
              static_cast<unsigned long>(st.update_persists), static_cast<unsigned long>(st.erases),
              static_cast<unsigned long>(st.unlinks), static_cast<unsigned long>(st.erase_persists));
}

// A DRAM shard persists nothing and logs nothing (the same protocol code, no region).
TEST(HopscotchPm, DramShardPersistsNothing) {
  const HopscotchConfig c = small_config();
  std::vector<std::byte> mem(c.region_bytes());
  HopscotchShard shard(c, 0, mem);
  const auto keys = distinct_keys(40, 3);
  for (uint64_t k : keys) EXPECT_EQ(shard.put(k, value_for(k, 1, 16)).persists, 0u);
  for (uint64_t k : keys) EXPECT_EQ(shard.update(k, value_for(k, 2, 16)).persists, 0u);
  EXPECT_GT(shard.stats().displacements, 0u);
  for (uint64_t o = c.log_offset(); o < c.region_bytes(); ++o) ASSERT_EQ(mem[o], std::byte{0}) << o;
}

// --- crash images ---------------------------------------------------------------------------------

State recovered_state(const HopscotchConfig& c, std::span<std::byte> image, uint64_t* repairs = nullptr) {
  PersistentRegion region(image, PersistMode::kVolatile);
  HopscotchShard shard(c, 0, region);  // throws PmemError on any violated invariant
  if (!shard.recovered()) throw std::runtime_error("a crash image was formatted, not recovered");
  if (repairs) *repairs = shard.recovery_repairs();
  const HopscotchShardStats st = shard.stats();
  uint64_t chained = 0;
  for (uint64_t k : shard.keys()) {
    const HopscotchPlacement p = hopscotch_place(c, k);
    bool in_hood = false;
    for (uint64_t s = p.home; s < p.home + c.neighborhood; ++s) {
      uint64_t ctrl, key;
      std::memcpy(&ctrl, image.data() + kHopscotchSlotsOffset + s * c.record_bytes(), 8);
      std::memcpy(&key, image.data() + kHopscotchSlotsOffset + s * c.record_bytes() + 8, 8);
      in_hood |= (ctrl >> 63) && key == k;
    }
    chained += !in_hood;
  }
  if (st.chained != chained) throw std::runtime_error("chained count differs from the records in chains");
  return state_of(shard);
}

// Before every event: the persisted lines only, plus a random prefix of each line's unpersisted
// stores, plus all of them; each image must recover to the acknowledged state (or the in-flight
// operation's), and a second recovery of the recovered image must find nothing to repair.
struct CrashChecker {
  const HopscotchConfig& cfg;
  const std::vector<std::byte>& initial;
  const std::vector<Event>& log;
  const std::vector<Step>& steps;
  const State& start;
  uint64_t checked = 0;
  std::string first_failure;

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
      uint64_t repairs = 0;
      if (why.empty() && recovered_state(cfg, image, &repairs) != got) why = "a second recovery changed the state";
      if (why.empty() && repairs != 0) why = "a recovered image needed repairs again";
    } catch (const std::exception& ex) {
      why = std::string("recovery failed: ") + ex.what();
    }
    if (!why.empty() && first_failure.empty()) first_failure = test::crash_label(e, mode) + ": " + why;
  }
};

// A workload over a small shard: inserts without and with displacement moves (the logged,
// cross-slot case), chain inserts into new and existing blocks, updates in slots and in chains,
// erases (with unlinks of emptied blocks).
TEST(HopscotchPmCrash, EveryCrashPointRecoversTheAcknowledgedOperations) {
  const HopscotchConfig c = small_config();
  test::RecordedShard<HopscotchShard, HopscotchConfig> w(c);  // records from here on
  auto& [live, region, shard, initial, rec] = w;
  std::mt19937_64 rng(2026);
  const auto universe = distinct_keys(44, 78);
  State state;
  std::vector<Step> steps;
  uint64_t kinds[4] = {0, 0, 0, 0};
  uint64_t plain_inserts = 0, moving_inserts = 0, chain_updates = 0, chain_inserts = 0, max_chained = 0;
  for (int i = 0; i < 900; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    const auto v = value_for(k, static_cast<uint32_t>(i), c.value_bytes);
    const size_t begin = rec.log.size();
    const uint64_t x = rng() % 10;
    const uint64_t chained0 = shard.stats().chained;
    HopscotchShardResult r;
    if (x < 5) r = shard.find_or_put(k, v);
    else if (x < 8) r = shard.update(k, v);
    else r = shard.erase(k);
    const uint64_t chained1 = shard.stats().chained;
    if (r.status == Status::kInserted) {
      (r.displacements ? moving_inserts : plain_inserts) += 1;
      chain_inserts += chained1 > chained0;
    }
    if (r.status == Status::kUpdated && chained1 > 0) {
      // an update of a chained key: its record is in a pool block
      const HopscotchPlacement p = hopscotch_place(c, k);
      bool in_hood = false;
      for (uint64_t s = p.home; s < p.home + c.neighborhood; ++s) {
        uint64_t ctrl, key;
        std::memcpy(&ctrl, live.bytes.data() + kHopscotchSlotsOffset + s * c.record_bytes(), 8);
        std::memcpy(&key, live.bytes.data() + kHopscotchSlotsOffset + s * c.record_bytes() + 8, 8);
        in_hood |= (ctrl >> 63) && key == k;
      }
      chain_updates += !in_hood;
    }
    max_chained = std::max(max_chained, chained1);
    test::acknowledge(state, kinds, k, v, r.status);
    steps.push_back({begin, rec.log.size(), state});
  }
  region.set_observer(nullptr);
  const HopscotchShardStats st = shard.stats();
  ASSERT_GT(plain_inserts, 10u);
  ASSERT_GT(moving_inserts, 5u);
  ASSERT_GT(st.displacements, 10u);
  ASSERT_GT(chain_inserts, 5u);
  ASSERT_GT(chain_updates, 5u);
  ASSERT_GT(st.unlinks, 3u);
  ASSERT_GT(kinds[1], 50u);
  ASSERT_GT(kinds[2], 30u);
  ASSERT_EQ(recovered_state(c, live.bytes), state);
  const State empty;
  CrashChecker check{c, initial, rec.log, steps, empty, 0, {}};
  check.run(7);
  EXPECT_EQ(check.first_failure, "");
  uint64_t persists = 0;
  for (const Event& e : rec.log) persists += e.persist;
  std::printf("hopscotch pm crash test: %zu ops (%lu inserts: %lu plain, %lu moving, %lu chained; %lu updates, "
              "%lu in chains; %lu erases, %lu unlinks; %lu full; %lu moves, chains up to %lu records), %zu events "
              "(%lu persists), %lu crash images checked\n",
              steps.size(), static_cast<unsigned long>(kinds[0]), static_cast<unsigned long>(plain_inserts),
              static_cast<unsigned long>(moving_inserts), static_cast<unsigned long>(chain_inserts),
              static_cast<unsigned long>(kinds[1]), static_cast<unsigned long>(chain_updates),
              static_cast<unsigned long>(kinds[2]), static_cast<unsigned long>(st.unlinks),
              static_cast<unsigned long>(kinds[3]), static_cast<unsigned long>(st.displacements),
              static_cast<unsigned long>(max_chained), rec.log.size(), static_cast<unsigned long>(persists),
              static_cast<unsigned long>(check.checked));
  EXPECT_GT(check.checked, rec.log.size());
}

// --- real files and corrupt images ---------------------------------------------------------------

using test::slurp;

HopscotchConfig file_config() {
  HopscotchConfig c;
  c.home_slots_per_node = 64;
  c.neighborhood = 4;
  c.value_bytes = 16;
  return c;
}

State make_file(const std::filesystem::path& path) {
  const HopscotchConfig c = file_config();
  PmemFile f = PmemFile::open(path, c.region_bytes());
  EXPECT_TRUE(f.created());
  PersistentRegion region(f.bytes(), f.mode());
  HopscotchShard shard(c, 0, region);
  EXPECT_FALSE(shard.recovered());
  State s;
  for (uint64_t k = 1; k <= 70; ++k) {
    const auto v = value_for(k, 1, 16);
    if (shard.find_or_put(k, v).status == Status::kInserted) s[k] = v;
  }
  for (uint64_t k = 2; k <= 70; k += 7)
    if (shard.erase(k).status == Status::kErased) s.erase(k);
  for (uint64_t k = 3; k <= 70; k += 5)
    if (shard.update(k, value_for(k, 2, 16)).status == Status::kUpdated) s[k] = value_for(k, 2, 16);
  EXPECT_GT(shard.stats().displacements, 0u);
  EXPECT_GT(shard.stats().chained, 0u);
  return s;
}

TEST(HopscotchPmFile, ReopenRecoversEveryItemAndServesLookups) {
  test::TempDir dir("rdmahash-hopscotch");
  const auto path = dir.path / "table.pm";
  const State want = make_file(path);
  const HopscotchConfig c = file_config();
  PmemFile f = PmemFile::open(path, c.region_bytes());
  EXPECT_FALSE(f.created());
  PersistentRegion region(f.bytes(), f.mode());
  HopscotchShard shard(c, 0, region);
  EXPECT_TRUE(shard.recovered());
  EXPECT_EQ(shard.recovery_repairs(), 0u);
  EXPECT_EQ(state_of(shard), want);
  auto fabric = make_local_fabric_over({f.bytes()});
  auto t = fabric->connect();
  Engine engine(*t);
  HopscotchClient client(c, engine);
  std::vector<std::byte> out(16);
  for (uint64_t k = 1; k <= 80; ++k) {
    const OpResult r = engine.run(client.get(k, out));
    ASSERT_EQ(r.status, want.count(k) ? Status::kFound : Status::kNotFound) << k;
    if (want.count(k)) { ASSERT_EQ(out, want.at(k)); }
  }
}

TEST(HopscotchPmFile, CorruptOrForeignImagesAreRefusedUntouched) {
  test::TempDir dir("rdmahash-hopscotch");
  const auto path = dir.path / "table.pm";
  make_file(path);
  const auto good = slurp(path);
  auto write = [&](const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const HopscotchConfig c = file_config();
  auto refused = [&](const HopscotchConfig& cfg, const std::string& what) {
    test::expect_refused<HopscotchShard>(path, cfg, what);
  };
  // Every bit of the geometry words (magic .. hash seed, overflow blocks, the checksum).
  for (size_t bit = 0; bit < 8 * 48; ++bit) {
    auto bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write(bad);
    refused(c, "header bit " + std::to_string(bit));
  }
  for (size_t bit = 64 * 8; bit < 72 * 8; ++bit) {
    auto bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write(bad);
    refused(c, "overflow blocks bit " + std::to_string(bit));
  }
  for (size_t bit = kHopscotchChecksumOffset * 8; bit < (kHopscotchChecksumOffset + 8) * 8; ++bit) {
    auto bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    write(bad);
    refused(c, "checksum bit " + std::to_string(bit));
  }
  for (size_t len : {size_t{1}, size_t{64}, size_t{100}, good.size() / 2, good.size() - 8}) {
    write(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len)));
    refused(c, "truncated to " + std::to_string(len));
  }
  write(std::vector<char>(good.size(), 'x'));
  refused(c, "foreign file");
  write(good);
  HopscotchConfig other = c;
  other.home_slots_per_node = 128;
  refused(other, "other geometry");
  // A live record whose value bytes were corrupted.
  auto bad = good;
  bool flipped = false;
  for (uint64_t s = 0; s < c.slots_per_node() && !flipped; ++s) {
    const uint64_t o = kHopscotchSlotsOffset + s * c.record_bytes();
    uint64_t ctrl;
    std::memcpy(&ctrl, good.data() + o, 8);
    if (ctrl >> 63) {
      bad[o + 16] = static_cast<char>(bad[o + 16] ^ 1);
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  write(bad);
  refused(c, "corrupt live record");
  // A chain head pointing outside the pool.
  bad = good;
  bad[c.heads_offset()] = 9;
  write(bad);
  refused(c, "chain head outside the pool");
  // A level image: another scheme's magic.
  {
    write({});
    std::filesystem::remove(path);
    LevelConfig lc;
    lc.base_buckets = 8;
    lc.max_resizes = 1;
    PmemFile f = PmemFile::open(path, std::max(lc.region_bytes(), c.region_bytes()));
    PersistentRegion region(f.bytes(), f.mode());
    LevelShard level(lc, 0, region);
  }
  refused(c, "a level image");
  write({});
  refused(c, "empty file");
  // An existing all-zero file is not a table: the registry refuses it (hopscotch_check_image)
  // before any shard could format it.
  write(std::vector<char>(good.size(), 0));
  const auto zeros = slurp(path);
  EXPECT_THROW(hopscotch_check_image(std::as_bytes(std::span(zeros)), c, 0), PmemError);
  EXPECT_NO_THROW(hopscotch_check_image(std::as_bytes(std::span(good)), c, 0));
  EXPECT_THROW(hopscotch_check_image(std::as_bytes(std::span(good)), c, 1), PmemError);  // another node's image
}

}  // namespace
}  // namespace rdmahash
