// Hopscotch hashing (rdmahash/hopscotch.h) on LocalFabric: the mechanisms the conformance suite
// does not see. Every key stays within H of its home (memory scanned), a hit is one READ in one
// round trip, a reader's READ between the steps of a displacement still finds every present key,
// shuffled READs with displacements between their words never miss or tear, a corrupt record is
// never returned, and values larger than the table's are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "rdmahash/hopscotch.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::value_for;

struct Table {
  HopscotchConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<HopscotchServer> server;
  explicit Table(const HopscotchConfig& c, uint64_t spare = 0) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes() + spare));
    server = std::make_unique<HopscotchServer>(*fabric, c);
  }
  // Every live (slot, key) of node n, read straight from its memory.
  std::vector<std::pair<uint64_t, uint64_t>> scan(uint32_t n) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    const auto region = fabric->local_region(n);
    const uint32_t rb = cfg.record_bytes();
    for (uint64_t s = 0; s < cfg.slots_per_node(); ++s) {
      uint64_t ctrl = 0, key = 0;
      std::memcpy(&ctrl, region.data() + kHopscotchSlotsOffset + s * rb, 8);
      std::memcpy(&key, region.data() + kHopscotchSlotsOffset + s * rb + 8, 8);
      if (ctrl >> 63) out.emplace_back(s, key);
    }
    return out;
  }
  // Every live (group, key) of node n's overflow chains, followed from the heads in its memory.
  std::vector<std::pair<uint64_t, uint64_t>> chains(uint32_t n) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    const auto region = fabric->local_region(n);
    auto word = [&](uint64_t o) {
      uint64_t w = 0;
      std::memcpy(&w, region.data() + o, 8);
      return w;
    };
    for (uint64_t g = 0; g < cfg.groups(); ++g)
      for (uint64_t b = word(cfg.heads_offset() + g * 8); b != 0; b = word(b))
        for (uint32_t i = 0; i < cfg.block_records; ++i) {
          const uint64_t o = b + 8 + uint64_t{i} * cfg.record_bytes();
          if (word(o) >> 63) out.emplace_back(g, word(o + 8));
        }
    return out;
  }
  // Every key of node n where it may be: within H of its home, or in its group's chain, once.
  void expect_placed(uint32_t n, const std::set<uint64_t>& present) const {
    std::set<uint64_t> seen;
    for (const auto& [slot, key] : scan(n)) {
      const uint64_t home = hopscotch_place(cfg, key).home;
      ASSERT_GE(slot, home) << "key " << key << " before its home";
      ASSERT_LT(slot - home, cfg.neighborhood) << "key " << key << " at distance " << slot - home << " from home";
      ASSERT_TRUE(seen.insert(key).second) << "key " << key << " live twice outside a move";
    }
    for (const auto& [group, key] : chains(n)) {
      ASSERT_EQ(group, hopscotch_place(cfg, key).home / cfg.neighborhood) << "key " << key << " in another group's chain";
      ASSERT_TRUE(seen.insert(key).second) << "key " << key << " live twice";
    }
    ASSERT_EQ(seen, present);
  }
};

HopscotchConfig small(uint64_t home_slots, uint32_t H, uint32_t vb) {
  HopscotchConfig c;
  c.home_slots_per_node = home_slots;
  c.neighborhood = H;
  c.value_bytes = vb;
  return c;
}

std::vector<uint64_t> distinct_keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> keys;
  while (keys.size() < n) {
    const uint64_t k = rng() >> 1;
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

bool intact(uint64_t key, std::span<const std::byte> v, const std::unordered_map<uint64_t, uint32_t>& salt) {
  const auto want = value_for(key, salt.at(key), static_cast<uint32_t>(v.size()));
  return std::equal(want.begin(), want.end(), v.begin());
}

TEST(Hopscotch, EveryKeyStaysWithinItsNeighbourhood) {
  for (uint32_t H : {4u, 8u, 32u}) {
    Table t(small(512, H, 16));
    HopscotchShard& shard = t.server->shard(0);
    const auto universe = distinct_keys(560, H);
    std::set<uint64_t> present;
    std::mt19937_64 rng(H * 7 + 1);
    uint64_t full = 0;
    for (int step = 0; step < 30000; ++step) {
      const uint64_t k = universe[rng() % universe.size()];
      if (present.count(k) && rng() % 3 == 0) {
        ASSERT_EQ(shard.erase(k).status, Status::kErased);
        present.erase(k);
      } else {
        const Status s = shard.put(k, value_for(k, 0, 16)).status;
        if (s == Status::kFull) ++full;
        else present.insert(k);
      }
      if (step % 1000 == 999) {
        SCOPED_TRACE("H=" + std::to_string(H));
        t.expect_placed(0, present);
      }
    }
    EXPECT_GT(shard.stats().displacements, 100u) << "H=" << H << ": the churn must displace records";
    std::printf("H=%u: %zu present of 512 home slots, %llu displacements, %llu kFull\n", H, present.size(),
                static_cast<unsigned long long>(shard.stats().displacements), static_cast<unsigned long long>(full));
  }
}

TEST(Hopscotch, HitIsOneReadInOneRoundTrip) {
  HopscotchConfig c = small(1250, 8, 16);
  c.memory_nodes = 2;
  Table t(c);
  const auto keys = distinct_keys(1600, 5);  // load 0.64
  for (uint64_t k : keys) (void)t.server->bulk_insert(k, value_for(k, 0, 16));
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  std::vector<std::byte> out(16);
  for (uint64_t k : keys) {
    OpStats st;
    const uint64_t reads = transport->counters().reads, bytes = transport->counters().bytes_read;
    const OpResult r = engine.run(client.get(k, out), &st);
    ASSERT_EQ(r.status, Status::kFound);
    ASSERT_EQ(out, value_for(k, 0, 16));
    ASSERT_EQ(st.round_trips, 1u);
    ASSERT_EQ(transport->counters().reads - reads, 1u);
    ASSERT_EQ(transport->counters().bytes_read - bytes, c.read_bytes());
    ASSERT_EQ(r.chunks, 1u);
  }
  EXPECT_EQ(t.server->stats().chained, 0u) << "at this load every key fits its neighbourhood";
  // A miss once the moves word is cached: the neighbourhood READ, then the 8-byte moves READ and
  // the group's chain head READ (empty) in one round trip.
  (void)engine.run(client.read_header(0));
  (void)engine.run(client.read_header(1));
  OpStats st;
  ASSERT_EQ(engine.run(client.get(keys.back() ^ 0x5555, out), &st).status, Status::kNotFound);
  EXPECT_EQ(st.reads, 3u);
  EXPECT_EQ(st.round_trips, 2u);
}

// The move hook runs between the copy and the clear of every move, and after the clear: a reader's
// single READ taken at each of those instants must find every present key (copy-then-clear).
TEST(Hopscotch, ReaderBetweenDisplacementStepsFindsEveryPresentKey) {
  HopscotchConfig c = small(400, 8, 24);
  c.overflow_percent = 0;  // every key in its neighbourhood, where probe_once looks
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  const auto universe = distinct_keys(420, 9);
  std::unordered_map<uint64_t, uint32_t> salt;  // present keys and their values' salt
  std::mt19937_64 rng(3);
  uint64_t steps = 0, missed = 0, torn = 0;
  std::vector<std::byte> out(24);
  shard.set_move_hook([&] {
    ++steps;
    for (const auto& [k, s] : salt) {
      const auto r = engine.run(client.probe_once(k, out));
      if (!r || *r != Status::kFound) ++missed;
      else if (!intact(k, out, salt)) ++torn;
    }
  });
  for (int i = 0; i < 6000 && steps < 400; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    if (salt.count(k) && rng() % 2 == 0) {
      ASSERT_EQ(shard.erase(k).status, Status::kErased);
      salt.erase(k);
    } else if (!salt.count(k)) {
      const uint32_t s = static_cast<uint32_t>(i + 1);
      if (shard.put(k, value_for(k, s, 24)).status == Status::kInserted) salt[k] = s;
    }
  }
  EXPECT_GT(steps, 100u) << "displacements must happen";
  EXPECT_EQ(missed, 0u) << "a present key was absent from its neighbourhood between the steps of a move";
  EXPECT_EQ(torn, 0u);
}

// Splits every READ into its 8-byte words, performed in descending or shuffled order, with one
// memory-node write (`hook`) between some of them: a neighbourhood READ is not atomic, and a key
// moving forward is missed when its new slot is read before the copy and its old one after the
// clear. The moves counter must make the reader retry.
class ShuffledTransport final : public Transport {
 public:
  ShuffledTransport(std::unique_ptr<Transport> inner, std::function<void()> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.len >= 16) {
        const uint32_t words = r.len / 8;
        std::vector<uint32_t> order(words);
        for (uint32_t w = 0; w < words; ++w) order[w] = words - 1 - w;
        if (rng_() % 2) std::shuffle(order.begin(), order.end(), rng_);
        for (uint32_t w : order) {
          Request piece = r;
          piece.addr.offset += w * 8;
          piece.buf = static_cast<std::byte*>(r.buf) + w * 8;
          piece.len = 8;
          inner_->execute(std::span<Request>(&piece, 1));
          if (rng_() % (words + 4) < 4) hook_();
        }
      } else {
        hook_();
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
  std::mt19937_64 rng_{23};
};

// Lookups of never-erased keys (load 0.8) whose READs are split into shuffled words, with updates,
// inserts and erases of other keys between the words; returns the shard's stats at the end.
HopscotchShardStats shuffled_reads_never_miss_or_tear(uint32_t H, uint64_t min_moves) {
  const HopscotchConfig c = small(600, H, 40);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto all = distinct_keys(700, 41);
  const std::vector<uint64_t> pool(all.begin(), all.begin() + 480);  // load 0.8, never erased
  // Every salt each key's value has had, in order: a lookup must return one it had while it ran.
  std::unordered_map<uint64_t, std::vector<uint32_t>> salts;
  for (uint64_t k : pool) {
    EXPECT_EQ(shard.put(k, value_for(k, 0, 40)).status, Status::kInserted);
    salts[k] = {0};
  }
  std::mt19937_64 rng(7);
  std::vector<uint64_t> churn_in, churn_out(all.begin() + 480, all.end());
  uint32_t next_salt = 1;
  auto hook = [&] {
    const uint64_t x = rng();
    if (x % 4 == 0) {
      const uint64_t k = pool[(x >> 8) % pool.size()];
      salts[k].push_back(next_salt);
      ASSERT_EQ(shard.update(k, value_for(k, next_salt++, 40)).status, Status::kUpdated);
    } else if ((x % 4 == 1 && !churn_out.empty()) || churn_in.empty()) {
      const size_t j = (x >> 8) % churn_out.size();
      const uint64_t k = churn_out[j];
      if (shard.put(k, value_for(k, 0, 40)).status == Status::kInserted) {
        churn_in.push_back(k);
        churn_out.erase(churn_out.begin() + static_cast<std::ptrdiff_t>(j));
      }
    } else {
      const size_t j = (x >> 8) % churn_in.size();
      ASSERT_EQ(shard.erase(churn_in[j]).status, Status::kErased);
      churn_out.push_back(churn_in[j]);
      churn_in.erase(churn_in.begin() + static_cast<std::ptrdiff_t>(j));
    }
  };
  auto transport = std::make_unique<ShuffledTransport>(t.fabric->connect(), hook);
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  const uint64_t moved_before = shard.stats().displacements;
  std::vector<std::byte> out(40);
  uint64_t missed = 0, torn = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t k = pool[rng() % pool.size()];
    const std::vector<uint32_t>& had = salts.at(k);  // a map's elements stay where they are
    const size_t at_start = had.size() - 1;
    const OpResult r = engine.run(client.get(k, out));
    // The value read is the one of some instant of the lookup: the one at its start or one the hook
    // wrote since (checking only these keeps the check linear and catches a stale value too).
    if (r.status != Status::kFound) ++missed;
    else {
      bool ok = false;
      for (size_t s = at_start; s < had.size() && !ok; ++s) ok = out == value_for(k, had[s], 40);
      torn += !ok;
    }
  }
  EXPECT_EQ(missed, 0u) << "a present key was reported absent while records were moving";
  EXPECT_EQ(torn, 0u) << "a torn value was returned";
  EXPECT_GT(shard.stats().displacements - moved_before, min_moves) << "displacements must overlap the lookups";
  return shard.stats();
}

TEST(Hopscotch, ShuffledReadsWithDisplacementsBetweenWordsNeverMissOrTear) { (void)shuffled_reads_never_miss_or_tear(8, 100); }

// The miss the moves counter exists for, forced: the reader's one READ of y's neighbourhood is
// performed slot by slot from the top, and between the first slot (y's destination, still free)
// and the rest (y's old slot, cleared by then) an insert moves y. The READ sees y nowhere; the
// moves word changed meanwhile, so the lookup must read again and find y.
class DescendingOnceTransport final : public Transport {
 public:
  DescendingOnceTransport(std::unique_ptr<Transport> inner, uint32_t record_bytes, uint32_t read_bytes,
                          std::function<void()> hook)
      : inner_(std::move(inner)), rb_(record_bytes), len_(read_bytes), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.len == len_ && hook_) {
        for (uint32_t i = len_ / rb_; i-- > 0;) {
          Request piece = r;
          piece.addr.offset += i * rb_;
          piece.buf = static_cast<std::byte*>(r.buf) + i * rb_;
          piece.len = rb_;
          inner_->execute(std::span<Request>(&piece, 1));
          if (hook_) std::exchange(hook_, nullptr)();
        }
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint32_t rb_, len_;
  std::function<void()> hook_;
};

TEST(Hopscotch, MissDuringAMoveIsReadAgain) {
  const HopscotchConfig c = small(64, 4, 16);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  auto homed = [&](uint64_t home, size_t n) {
    std::vector<uint64_t> out;
    for (uint64_t k = 1; out.size() < n; ++k)
      if (hopscotch_place(c, k * 0x9E3779B97F4A7C15ULL >> 1).home == home) out.push_back(k * 0x9E3779B97F4A7C15ULL >> 1);
    return out;
  };
  const auto at10 = homed(10, 5);
  const uint64_t y = homed(12, 1)[0];
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(shard.put(at10[i], value_for(at10[i], 0, 16)).status, Status::kInserted);
  ASSERT_EQ(shard.put(y, value_for(y, 0, 16)).status, Status::kInserted);
  auto slot_of = [&](uint64_t key) -> uint64_t {
    for (const auto& [s, k] : t.scan(0))
      if (k == key) return s;
    return ~0ULL;
  };
  ASSERT_EQ(slot_of(y), 14u) << "slots 10..13 hold the four keys homed at 10, y (home 12) probes to 14";
  // Inserting a fifth key homed at 10 finds slot 15 free, moves y from 14 to 15 (its neighbourhood
  // [12, 16) still holds it), then finds nothing to move into 14 and chains x in its group.
  const uint64_t x = at10[4];
  auto hook = [&] {
    const uint64_t moved = shard.stats().displacements;
    EXPECT_EQ(shard.put(x, value_for(x, 0, 16)).status, Status::kInserted);
    EXPECT_EQ(shard.stats().chained, 1u);
    EXPECT_EQ(shard.stats().displacements, moved + 1);
  };
  auto transport = std::make_unique<DescendingOnceTransport>(t.fabric->connect(), c.record_bytes(), c.read_bytes(), hook);
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  (void)engine.run(client.read_header(0));  // the moves word cached: a miss could be trusted at once
  std::vector<std::byte> out(16);
  OpStats st;
  const OpResult r = engine.run(client.get(y, out), &st);
  EXPECT_EQ(slot_of(y), 15u);
  EXPECT_EQ(r.status, Status::kFound) << "y was present throughout, but the READ met it in neither slot";
  EXPECT_EQ(out, value_for(y, 0, 16));
  EXPECT_EQ(r.chunks, 2u) << "the neighbourhood READ, then once more after the moves word changed";
}

TEST(Hopscotch, CorruptRecordIsNeverReturned) {
  HopscotchConfig c = small(256, 8, 16);
  c.retry_budget = std::chrono::milliseconds(5);
  Table t(c);
  const auto keys = distinct_keys(100, 77);
  for (uint64_t k : keys) ASSERT_TRUE(t.server->bulk_insert(k, value_for(k, 0, 16)));
  auto region = t.fabric->local_region(0);
  // Flip one value byte of a present record (its check word now disagrees): the state a torn READ
  // of an update would show.
  const auto [slot, key] = t.scan(0).at(10);
  region[kHopscotchSlotsOffset + slot * c.record_bytes() + 16 + 3] ^= std::byte{0x40};
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  std::vector<std::byte> out(16);
  EXPECT_FALSE(engine.run(client.probe_once(key, out)).has_value()) << "the corrupt record must read as unstable";
  EXPECT_THROW(engine.run(client.get(key, out)), RetryBudgetExceeded);
  // The others are untouched.
  for (uint64_t k : keys) {
    if (k == key) continue;
    ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
  }
}

TEST(Hopscotch, ValuesLargerThanTheTableAreRefused) {
  const HopscotchConfig c = small(256, 8, 16);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const uint64_t k = distinct_keys(1, 3)[0];
  const std::vector<std::byte> big(24, std::byte{1});
  EXPECT_THROW(shard.find_or_put(k, big), InvalidArgument);
  EXPECT_THROW(shard.put(k, big), InvalidArgument);
  EXPECT_THROW(shard.update(k, big), InvalidArgument);
  EXPECT_EQ(shard.records(), 0u);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  EXPECT_THROW(engine.run(client.find_or_put(k, big)), InvalidArgument);
  EXPECT_EQ(transport->counters().batches, 0u);
  EXPECT_THROW(HopscotchConfig(small(256, 65, 16)).validate(), InvalidArgument);
  EXPECT_THROW(HopscotchConfig(small(256, 1, 16)).validate(), InvalidArgument);
}


// --- overflow chains -------------------------------------------------------------------------------

// n keys whose home slot is `home` (from the n-th such key on after `skip`).
std::vector<uint64_t> homed_keys(const HopscotchConfig& c, uint64_t home, size_t n, size_t skip = 0) {
  std::vector<uint64_t> out;
  for (uint64_t k = 1; out.size() < n + skip; ++k) {
    const uint64_t key = k * 0x9E3779B97F4A7C15ULL >> 1;
    if (hopscotch_place(c, key).home == home) out.push_back(key);
  }
  return {out.begin() + static_cast<std::ptrdiff_t>(skip), out.end()};
}

// H=4, 64 home slots: four keys homed at 10 fill slots 10..13 and nothing homed at 10 can be
// displaced into 14 (every key there is homed at 10), so further keys homed at 10 go to the chain of
// group 2 (home slots 8..11), four per block (not the default two), each new block linked at the head.
HopscotchConfig chain_config() {
  HopscotchConfig c = small(64, 4, 16);
  c.block_records = 4;
  return c;
}

TEST(HopscotchChains, FillToNinetyPercentAndRandomOpsMatchTheOracle) {
  HopscotchConfig c = small(2048, 8, 16);
  c.memory_nodes = 2;
  Table t(c);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  const size_t fill = 2 * 2048 * 9 / 10;
  const auto universe = distinct_keys(fill + fill / 4, 17);  // the fill, and the random phase's quarter more
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  for (size_t i = 0; i < fill; ++i) {
    const uint64_t k = universe[i];
    ASSERT_EQ(engine.run(client.put(k, value_for(k, 0, 16))).status, Status::kInserted) << "key " << i;
    oracle[k] = value_for(k, 0, 16);
  }
  const HopscotchShardStats filled = t.server->stats();
  EXPECT_GT(filled.chained, fill / 50) << "at load 0.9 with H=8 many keys must be chained";
  std::printf("load 0.9, H=8: %llu of %zu keys chained in %llu of %llu blocks\n",
              static_cast<unsigned long long>(filled.chained), fill, static_cast<unsigned long long>(filled.blocks_used),
              static_cast<unsigned long long>(filled.overflow_blocks));
  std::vector<std::byte> out(16);
  for (const auto& [k, v] : oracle) {
    ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound) << "key " << k;
    ASSERT_EQ(out, v);
  }
  // Random operations over the fill's keys and a quarter more, erasing at half the rate of the
  // inserts: the load stays around 0.9.
  std::mt19937_64 rng(99);
  uint64_t full = 0;
  const size_t range = fill + fill / 4;
  for (int step = 0; step < 30000; ++step) {
    const uint64_t k = universe[rng() % range];
    const bool present = oracle.count(k) > 0;
    const auto v = value_for(k, static_cast<uint32_t>(step + 1), 16);
    const std::string where = "step " + std::to_string(step) + ", key " + std::to_string(k);
    switch (rng() % 5) {
      case 0: {
        const Status s = engine.run(client.find_or_put(k, v)).status;
        if (s == Status::kFull && !present) { ++full; break; }
        ASSERT_EQ(s, present ? Status::kFound : Status::kInserted) << where;
        if (!present) oracle[k] = v;
        break;
      }
      case 1: {
        const Status s = engine.run(client.put(k, v)).status;
        if (s == Status::kFull && !present) { ++full; break; }
        ASSERT_EQ(s, present ? Status::kUpdated : Status::kInserted) << where;
        oracle[k] = v;
        break;
      }
      case 2:
        ASSERT_EQ(engine.run(client.update(k, v)).status, present ? Status::kUpdated : Status::kNotFound) << where;
        if (present) oracle[k] = v;
        break;
      case 3:
        if (rng() % 2) {
          ASSERT_EQ(engine.run(client.erase(k)).status, present ? Status::kErased : Status::kNotFound) << where;
          oracle.erase(k);
          break;
        }
        [[fallthrough]];
      default: {
        const Status s = engine.run(client.get(k, out)).status;
        ASSERT_EQ(s, present ? Status::kFound : Status::kNotFound) << where;
        if (present) {
          ASSERT_EQ(out, oracle[k]) << where;
        }
      }
    }
  }
  std::set<uint64_t> present[2];
  for (const auto& [k, v] : oracle) present[hopscotch_place(c, k).node].insert(k);
  for (uint32_t n = 0; n < 2; ++n) {
    t.expect_placed(n, present[n]);
    auto keys = t.server->shard(n).keys();
    EXPECT_EQ(std::set<uint64_t>(keys.begin(), keys.end()), present[n]);
  }
  for (const auto& [k, v] : oracle) {
    ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
    ASSERT_EQ(out, v);
    ASSERT_EQ(t.server->shard(hopscotch_place(c, k).node).find(k), v);
  }
  EXPECT_EQ(t.server->records(), oracle.size());
  std::printf("after 30000 random operations: %zu keys, %llu chained, %llu blocks used, %llu kFull\n", oracle.size(),
              static_cast<unsigned long long>(t.server->stats().chained),
              static_cast<unsigned long long>(t.server->stats().blocks_used), static_cast<unsigned long long>(full));
}

// A chained key is found with one-sided READs only: the neighbourhood, then the moves word and the
// chain head in one round trip, then one READ per block down to the key's.
TEST(HopscotchChains, ChainedKeyIsFoundOneSided) {
  const HopscotchConfig c = chain_config();
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto keys = homed_keys(c, 10, 13);
  for (uint64_t k : keys) ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
  ASSERT_EQ(shard.stats().chained, 9u);
  ASSERT_EQ(shard.stats().blocks_used, 3u);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  (void)engine.run(client.read_header(0));
  std::vector<std::byte> out(16);
  for (size_t i = 0; i < keys.size(); ++i) {
    OpStats st;
    const OpResult r = engine.run(client.get(keys[i], out), &st);
    ASSERT_EQ(r.status, Status::kFound) << "key " << i;
    ASSERT_EQ(out, value_for(keys[i], 0, 16));
    // Keys 4..7 are in the first block (the chain's last), 8..11 the second, 12 the third (its head).
    const uint32_t hops = i < 4 ? 0 : i < 8 ? 3 : i < 12 ? 2 : 1;
    EXPECT_EQ(st.round_trips, hops ? 2 + hops : 1) << "key " << i;
    EXPECT_EQ(st.reads, hops ? 3 + hops : 1) << "key " << i;
    EXPECT_EQ(st.rpcs, 0u);
    EXPECT_EQ(r.chunks, 1 + hops) << "key " << i;
  }
  OpStats st;
  EXPECT_EQ(engine.run(client.get(homed_keys(c, 9, 1)[0], out), &st).status, Status::kNotFound);
  EXPECT_EQ(st.round_trips, 6u) << "a miss in a group with three blocks reads all three, then `moves` again";
  // The chain is searched node-side too: update, find, erase, and the freed record reused.
  ASSERT_EQ(shard.update(keys[5], value_for(keys[5], 1, 16)).status, Status::kUpdated);
  ASSERT_EQ(shard.find(keys[5]), value_for(keys[5], 1, 16));
  ASSERT_EQ(shard.find_or_put(keys[5], value_for(keys[5], 2, 16)).status, Status::kFound);
  ASSERT_EQ(engine.run(client.get(keys[5], out)).status, Status::kFound);
  ASSERT_EQ(out, value_for(keys[5], 1, 16));
  ASSERT_EQ(shard.erase(keys[5]).status, Status::kErased);
  ASSERT_EQ(engine.run(client.get(keys[5], out)).status, Status::kNotFound);
  ASSERT_EQ(shard.stats().chained, 8u);
  // Three more fill the head block; the next one takes the record freed in the last block.
  const auto more = homed_keys(c, 10, 4, 13);
  for (uint64_t k : more) ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
  EXPECT_EQ(shard.stats().blocks_used, 3u) << "the freed chain record is reused, no block is taken";
  OpStats last;
  ASSERT_EQ(engine.run(client.get(more[3], out), &last).status, Status::kFound);
  EXPECT_EQ(last.round_trips, 5u) << "the freed record is in the chain's last block";
}

// The chain hook runs after a new block is filled and after the head store that links it: a reader
// at either instant must find every present key with its value (fill first, then publish).
TEST(HopscotchChains, ReaderAtEachStepOfABlockPublishFindsEveryPresentKey) {
  const HopscotchConfig c = chain_config();
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  (void)engine.run(client.read_header(0));
  const auto keys = homed_keys(c, 10, 17);
  std::vector<uint64_t> present;
  uint64_t steps = 0, missed = 0;
  std::vector<std::byte> out(16);
  shard.set_chain_hook([&] {
    ++steps;
    for (uint64_t k : present)
      if (engine.run(client.get(k, out)).status != Status::kFound || out != value_for(k, 0, 16)) ++missed;
  });
  for (uint64_t k : keys) {
    ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
    present.push_back(k);
  }
  EXPECT_EQ(steps, 2u * 4) << "four blocks, two steps each";
  EXPECT_EQ(missed, 0u) << "a reader met a published block that was not filled yet";
}

// Performs the READs of one length word by word from the last, running `hook` once right after
// word `fire_after` was read: the record state a reader gets when a write lands in the middle of
// its READ.
class WordsDescendingOnceTransport final : public Transport {
 public:
  WordsDescendingOnceTransport(std::unique_ptr<Transport> inner, uint32_t len, uint32_t fire_after,
                               std::function<void()> hook)
      : inner_(std::move(inner)), len_(len), fire_after_(fire_after), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.len == len_ && hook_) {
        for (uint32_t w = len_ / 8; w-- > 0;) {
          Request piece = r;
          piece.addr.offset += w * 8;
          piece.buf = static_cast<std::byte*>(r.buf) + w * 8;
          piece.len = 8;
          inner_->execute(std::span<Request>(&piece, 1));
          if (w == fire_after_ && hook_) std::exchange(hook_, nullptr)();
        }
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint32_t len_, fire_after_;
  std::function<void()> hook_;
};

// A torn block READ: z's chain record is erased and z put again into the same record while the
// reader's block READ is between z's key word and its ctrl word. The reader holds the new ctrl
// with the old value and check word; the check word disagrees, so it reads the block again and
// returns the new value, never the erased one.
TEST(HopscotchChains, TornBlockReadIsReadAgain) {
  const HopscotchConfig c = chain_config();
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto keys = homed_keys(c, 10, 6);
  for (uint64_t k : keys) ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
  // z: record 0 of the only block, words 1 (ctrl) .. 5 (check); keys[5] keeps the block linked.
  const uint64_t z = keys[4];
  ASSERT_EQ(shard.erase(z).status, Status::kErased);
  bool fired = false;
  auto hook = [&] {
    fired = true;
    ASSERT_EQ(shard.put(z, value_for(z, 1, 16)).status, Status::kInserted);
    ASSERT_EQ(shard.stats().blocks_used, 1u) << "z must reuse its old record";
  };
  auto transport = std::make_unique<WordsDescendingOnceTransport>(t.fabric->connect(), c.block_bytes(), 2, hook);
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  (void)engine.run(client.read_header(0));
  std::vector<std::byte> out(16);
  const OpResult r = engine.run(client.get(z, out));
  ASSERT_TRUE(fired);
  ASSERT_EQ(r.status, Status::kFound);
  EXPECT_EQ(out, value_for(z, 1, 16)) << "the erased value was returned from a torn block READ";
  EXPECT_EQ(r.chunks, 3u) << "the neighbourhood, the torn block, the block again";
}

// Runs `hook` once, right after batch number `after` (1-based) was performed.
class AfterBatchTransport final : public Transport {
 public:
  AfterBatchTransport(std::unique_ptr<Transport> inner, uint64_t after, std::function<void()> hook)
      : inner_(std::move(inner)), after_(after), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    inner_->execute(batch);
    for (const Request& r : batch) counters_.add(r);
    if (++counters_.batches == after_ && hook_) std::exchange(hook_, nullptr)();
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint64_t after_;
  std::function<void()> hook_;
};

// Misses racing a block publish, forced. (a) z is chained (a new block at the head) after the
// reader's neighbourhood READ and before its head READ: the head READ sees the new block, so z is
// found. (b) w is chained (another new block) after the reader's head READ: the reader follows the
// old head, whose chain still holds every older key, so an older key is found (and w, inserted
// during the lookup, may be missed).
TEST(HopscotchChains, MissRacingABlockPublish) {
  const HopscotchConfig c = chain_config();
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto keys = homed_keys(c, 10, 14);
  for (size_t i = 0; i < 8; ++i) ASSERT_EQ(shard.put(keys[i], value_for(keys[i], 0, 16)).status, Status::kInserted);
  ASSERT_EQ(shard.stats().blocks_used, 1u);
  std::vector<std::byte> out(16);
  {  // (a): batches: 1 the header, 2 the neighbourhood READ, 3 moves + head
    const uint64_t z = keys[8];
    auto transport = std::make_unique<AfterBatchTransport>(t.fabric->connect(), 2, [&] {
      ASSERT_EQ(shard.put(z, value_for(z, 0, 16)).status, Status::kInserted);
      ASSERT_EQ(shard.stats().blocks_used, 2u);
    });
    Engine engine(*transport);
    HopscotchClient client(c, engine);
    (void)engine.run(client.read_header(0));
    const OpResult r = engine.run(client.get(z, out));
    EXPECT_EQ(r.status, Status::kFound) << "a key chained before the head READ was missed";
    EXPECT_EQ(out, value_for(z, 0, 16));
  }
  {  // (b): fill the second block, then a third is published after the head READ
    for (size_t i = 9; i < 12; ++i) ASSERT_EQ(shard.put(keys[i], value_for(keys[i], 0, 16)).status, Status::kInserted);
    const uint64_t w = keys[12];
    auto transport = std::make_unique<AfterBatchTransport>(t.fabric->connect(), 3, [&] {
      ASSERT_EQ(shard.put(w, value_for(w, 0, 16)).status, Status::kInserted);
      ASSERT_EQ(shard.stats().blocks_used, 3u);
    });
    Engine engine(*transport);
    HopscotchClient client(c, engine);
    (void)engine.run(client.read_header(0));
    OpStats st;
    const OpResult r = engine.run(client.get(keys[4], out), &st);  // in the first block, the chain's tail
    EXPECT_EQ(r.status, Status::kFound);
    EXPECT_EQ(out, value_for(keys[4], 0, 16));
    EXPECT_EQ(st.round_trips, 4u) << "the old head's chain: two blocks";
    EXPECT_EQ(engine.run(client.get(w, out)).status, Status::kFound) << "once published, w is found";
  }
}

// The pool bound: with a pool of two blocks, the ninth chained key is refused with kFull, and
// nothing is written past the shard's region (a canary follows it).
TEST(HopscotchChains, PoolExhaustedAnswersFullAndStaysInItsRegion) {
  HopscotchConfig c = chain_config();
  c.overflow_percent = 12;  // 8 records: two blocks of four
  ASSERT_EQ(c.overflow_blocks(), 2u);
  constexpr uint64_t kSpare = 512;
  Table t(c, kSpare);
  auto region = t.fabric->local_region(0);
  ASSERT_EQ(region.size(), c.region_bytes() + kSpare);
  std::fill(region.begin() + static_cast<std::ptrdiff_t>(c.region_bytes()), region.end(), std::byte{0xA5});
  HopscotchShard& shard = t.server->shard(0);
  const auto keys = homed_keys(c, 10, 13);
  for (size_t i = 0; i < 12; ++i) ASSERT_EQ(shard.put(keys[i], value_for(keys[i], 0, 16)).status, Status::kInserted);
  EXPECT_EQ(shard.put(keys[12], value_for(keys[12], 0, 16)).status, Status::kFull);
  EXPECT_EQ(shard.find_or_put(keys[12], value_for(keys[12], 0, 16)).status, Status::kFull);
  EXPECT_THROW(shard.bulk_insert(keys[12], value_for(keys[12], 0, 16)), InvalidArgument);
  EXPECT_EQ(shard.stats().blocks_used, 2u);
  EXPECT_EQ(shard.records(), 12u);
  for (size_t b = c.region_bytes(); b < region.size(); ++b)
    ASSERT_EQ(region[b], std::byte{0xA5}) << "byte " << b - c.region_bytes() << " past the region was written";
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  std::vector<std::byte> out(16);
  for (size_t i = 0; i < 12; ++i) ASSERT_EQ(engine.run(client.get(keys[i], out)).status, Status::kFound);
  EXPECT_EQ(engine.run(client.get(keys[12], out)).status, Status::kNotFound);
  // An erase frees a chain record: the refused key fits now.
  ASSERT_EQ(shard.erase(keys[6]).status, Status::kErased);
  ASSERT_EQ(shard.put(keys[12], value_for(keys[12], 0, 16)).status, Status::kInserted);
  ASSERT_EQ(engine.run(client.get(keys[12], out)).status, Status::kFound);
  // No pool at all: the neighbourhood is the limit, as before chains.
  HopscotchConfig none = chain_config();
  none.overflow_percent = 0;
  Table t0(none);
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(t0.server->shard(0).put(keys[i], value_for(keys[i], 0, 16)).status, Status::kInserted);
  EXPECT_EQ(t0.server->shard(0).put(keys[4], value_for(keys[4], 0, 16)).status, Status::kFull);
}

// Every client can WRITE the whole region, so the chain pointers the node's CPU follows may be
// anything. A head naming no block, or a block whose next pointer closes a cycle, used to send the
// node's walk outside the pool or around the cycle forever, holding the shard's lock. Both are
// refused now (the write fails with a message), and the shard goes on serving once repaired.
TEST(HopscotchChains, AHostileChainFailsItsWriteAndLeavesTheShardUsable) {
  const HopscotchConfig c = chain_config();
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto keys = homed_keys(c, 10, 6);
  for (size_t i = 0; i < 5; ++i) ASSERT_EQ(shard.put(keys[i], value_for(keys[i], 0, 16)).status, Status::kInserted);
  std::byte* base = t.fabric->local_region(0).data();
  auto word = [&](uint64_t off) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off)); };
  const uint64_t head = c.heads_offset() + 10 / c.neighborhood * 8;
  const uint64_t block = word(head).load();
  ASSERT_EQ(block, c.pool_offset()) << "keys[4] went to the chain's one block";
  ASSERT_EQ(word(block).load(), 0u);
  const uint64_t other = homed_keys(c, 40, 1)[0];  // another group's key
  ASSERT_EQ(shard.put(other, value_for(other, 0, 16)).status, Status::kInserted);
  struct Case {
    const char* what;
    uint64_t off, value;  // the word overwritten and its hostile value
    const char* error;    // what the refusal says
  };
  for (const Case& x : {Case{"a head naming no block", head, 8, "names no overflow block"},
                        Case{"a head inside a block", head, block + 8, "names no overflow block"},
                        Case{"a head past the pool", head, c.pool_offset() + c.overflow_blocks() * c.block_bytes(), "names no overflow block"},
                        Case{"a next pointer closing a cycle", block, block, "a cycle"}}) {
    const uint64_t saved = word(x.off).load();
    word(x.off).store(x.value);
    try {
      test::ends_within(std::chrono::seconds(20), x.what, [&] { shard.put(keys[5], value_for(keys[5], 0, 16)); });
      ADD_FAILURE() << x.what << ": the put succeeded";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(x.error), std::string::npos) << x.what << ": " << e.what();
    }
    EXPECT_EQ(shard.put(other, value_for(other, 0, 16)).status, Status::kUpdated) << x.what;
    word(x.off).store(saved);
  }
  EXPECT_EQ(shard.put(keys[5], value_for(keys[5], 0, 16)).status, Status::kInserted);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(shard.find(keys[i]), value_for(keys[i], 0, 16)) << i;
}

TEST(HopscotchChains, BadPoolConfigurationsAreRefused) {
  HopscotchConfig c = chain_config();
  c.block_records = 0;
  EXPECT_THROW(c.validate(), InvalidArgument);
  c.block_records = 65;
  EXPECT_THROW(c.validate(), InvalidArgument);
  c = chain_config();
  c.overflow_percent = 401;
  EXPECT_THROW(c.validate(), InvalidArgument);
  // A client built for another pool is refused by the shard's header.
  Table t(chain_config());
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchConfig other = chain_config();
  other.overflow_percent = 50;
  HopscotchClient client(other, engine);
  EXPECT_THROW(engine.run(client.read_header(0)), InvalidArgument);
  // A shard of the chainless layout (magic "HOPSCH1", a 64-byte header) is not taken for this one.
  const uint64_t old_magic = 0x3148435348504f48ULL;
  std::memcpy(t.fabric->local_region(0).data(), &old_magic, 8);
  HopscotchClient same(chain_config(), engine);
  EXPECT_THROW(engine.run(same.read_header(0)), FabricError);
}

// An empty block unlinked (and reused by another group) while a reader walks through it: the
// reader holds the old head, the block; the hook erases the block's only key (the block is unlinked
// and freed) and chains a key of another group (the block is reused there, its next pointer now 0).
// The walk ends early and misses k, which was present throughout; `moves` changed meanwhile, so the
// lookup walks again and finds k.
TEST(HopscotchChains, MissRacingABlockUnlinkIsWalkedAgain) {
  const HopscotchConfig c = chain_config();
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto keys = homed_keys(c, 10, 9);  // 4 in the neighbourhood, 4 in block 1, 1 in block 2 (the head)
  for (uint64_t k : keys) ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
  const auto other = homed_keys(c, 40, 5);  // group 10: its neighbourhood full, then one chained
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(shard.put(other[i], value_for(other[i], 0, 16)).status, Status::kInserted);
  ASSERT_EQ(shard.stats().blocks_used, 2u);
  const uint64_t k = keys[4];  // in block 1, behind the head
  bool fired = false;
  // Batches: 1 the header, 2 the neighbourhood READ, 3 moves + head (block 2).
  auto transport = std::make_unique<AfterBatchTransport>(t.fabric->connect(), 3, [&] {
    fired = true;
    ASSERT_EQ(shard.erase(keys[8]).status, Status::kErased);
    ASSERT_EQ(shard.stats().blocks_used, 1u) << "the emptied head block is unlinked";
    ASSERT_EQ(shard.put(other[4], value_for(other[4], 0, 16)).status, Status::kInserted);
    ASSERT_EQ(shard.stats().blocks_used, 2u) << "and reused by group 10";
  });
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  (void)engine.run(client.read_header(0));
  std::vector<std::byte> out(16);
  OpStats st;
  const OpResult r = engine.run(client.get(k, out), &st);
  ASSERT_TRUE(fired);
  EXPECT_EQ(r.status, Status::kFound) << "the walk through the reused block missed a present key";
  EXPECT_EQ(out, value_for(k, 0, 16));
  EXPECT_EQ(st.round_trips, 7u) << "neighbourhood, moves + head, the reused block, moves; again: 3";
  EXPECT_EQ(engine.run(client.get(other[4], out)).status, Status::kFound);
}

// Erase-and-insert churn keeps the pool's linked blocks near what the chained records need: empty
// blocks go back to the pool instead of staying linked to every group that once overflowed.
TEST(HopscotchChains, ChurnReusesEmptyBlocks) {
  HopscotchConfig c = small(4096, 8, 16);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto universe = distinct_keys(8192, 23);
  std::vector<uint64_t> in(universe.begin(), universe.begin() + 4096 * 9 / 10);
  std::vector<uint64_t> out(universe.begin() + 4096 * 9 / 10, universe.end());
  for (uint64_t k : in) ASSERT_EQ(shard.put(k, value_for(k, 0, 16)).status, Status::kInserted);
  std::mt19937_64 rng(5);
  uint64_t full = 0, max_blocks = 0;
  for (int i = 0; i < 200000; ++i) {
    const size_t a = rng() % in.size(), b = rng() % out.size();
    ASSERT_EQ(shard.erase(in[a]).status, Status::kErased);
    std::swap(in[a], out[b]);
    if (shard.put(in[a], value_for(in[a], 0, 16)).status == Status::kFull) {
      ++full;
      std::swap(in[a], in.back());
      out.push_back(in.back());
      in.pop_back();
    }
    max_blocks = std::max(max_blocks, shard.stats().blocks_used);
  }
  const HopscotchShardStats st = shard.stats();
  std::printf("200000 erase+insert at load 0.9: %llu kFull, %llu chained in %llu blocks (at most %llu) of %llu\n",
              static_cast<unsigned long long>(full), static_cast<unsigned long long>(st.chained),
              static_cast<unsigned long long>(st.blocks_used), static_cast<unsigned long long>(max_blocks),
              static_cast<unsigned long long>(st.overflow_blocks));
  EXPECT_EQ(full, 0u);
  EXPECT_LE(st.blocks_used, st.chained) << "every linked block holds a live record";
  std::set<uint64_t> present(in.begin(), in.end());
  t.expect_placed(0, present);
}

// The same at H=2, where many keys are chained: chain inserts, erases, block unlinks and reuses land
// between the words of the lookups' neighbourhood and block READs.
TEST(HopscotchChains, ShuffledReadsWithChainChurnBetweenWordsNeverMissOrTear) {
  const HopscotchShardStats st = shuffled_reads_never_miss_or_tear(2, 20);
  std::printf("H=2: %llu chained, %llu blocks linked, %llu unlinks\n", static_cast<unsigned long long>(st.chained),
              static_cast<unsigned long long>(st.blocks_used), static_cast<unsigned long long>(st.unlinks));
  EXPECT_GT(st.chained, 20u);
  EXPECT_GT(st.unlinks, 20u) << "blocks must be unlinked under the lookups";
}

}  // namespace
}  // namespace rdmahash
